//! The acceptance scenarios with holdfast northd in the world (see `scenarios/mod.rs`), and
//! the world-only ones: controller and northd restarts, reproducibility.

mod scenarios;

use hf_sim::world::{NorthdMode, World, WorldConfig};
use scenarios::Scenario;

fn world(s: &Scenario, seed: u64) -> World {
    let mut w = World::new(WorldConfig {
        seed,
        chassis: s.chassis.iter().map(|c| c.to_string()).collect(),
        northd: NorthdMode::Holdfast,
    })
    .expect("world");
    w.nb_all(s.nb.clone()).expect("NB builds");
    w
}

fn run(s: Scenario) {
    let mut w = world(&s, 42);
    (s.check)(&mut w);
}

#[test]
fn l2() {
    run(scenarios::l2());
}

#[test]
fn l3() {
    run(scenarios::l3());
}

#[test]
fn cross_chassis() {
    run(scenarios::cross_chassis());
}

#[test]
fn acl() {
    run(scenarios::acl());
}

#[test]
fn snat() {
    run(scenarios::snat());
}

#[test]
fn dnat_fip() {
    run(scenarios::dnat_fip());
}

#[test]
fn load_balancer() {
    run(scenarios::load_balancer());
}

#[test]
fn dhcp() {
    run(scenarios::dhcp());
}
