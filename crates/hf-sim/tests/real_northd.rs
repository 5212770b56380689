//! The acceptance scenarios with real ovn-northd 23.03 in place of holdfast northd: each
//! scenario's NB is built in a real `ovsdb-server` (the same transactions, sent with
//! `ovsdb-client transact`), the chassis rows are pre-created with `ovn-sbctl chassis-add`
//! (so gateway chassis resolve), real `ovn-northd` compiles it (`ovn-nbctl --wait=sb sync`),
//! and its SB (`ovsdb-client backup`) is loaded into the world as a static SB. The world's
//! controllers then claim, translate and forward from real northd's flows, and the scenario's
//! checks run unchanged. Without the OVN tools the tests print a skip line; with `CI=true` they
//! fail.

mod scenarios;

use hf_sim::world::{NorthdMode, World, WorldConfig, encap_ip};
use hf_testkit::ovn::{CENTRAL_TOOLS, Central};
use scenarios::Scenario;

/// Real ovn-northd's SB for the scenario, as a database file.
fn real_sb(s: &Scenario) -> Vec<u8> {
    let mut c = Central::databases().expect("real NB and SB ovsdb-servers");
    for txn in &s.nb {
        if let Err(e) = Central::transact(&c.nb, "OVN_Northbound", txn) {
            panic!("real ovsdb-server refused a scenario transaction: {e}\n{txn:?}");
        }
    }
    for (i, ch) in s.chassis.iter().enumerate() {
        c.sbctl(&["chassis-add", ch, "geneve", &encap_ip(i).to_string()])
            .expect("chassis-add");
    }
    c.start_northd().expect("ovn-northd");
    c.sync().expect("ovn-northd compiles the NB");
    let sb = c.sb_backup().expect("SB backup");
    assert!(sb.len() > 1000, "SB backup is {} bytes", sb.len());
    sb
}

fn run_real(s: Scenario) {
    if !hf_testkit::require_tools(s.name, CENTRAL_TOOLS) {
        return;
    }
    let sb = real_sb(&s);
    let mut w = World::new(WorldConfig {
        seed: 42,
        chassis: s.chassis.iter().map(|c| c.to_string()).collect(),
        northd: NorthdMode::Static(sb),
    })
    .expect("world on real ovn-northd's SB");
    // The same NB in the world's own database: hosts attach to its ports (nothing compiles it).
    w.nb_all(s.nb.clone()).expect("NB");
    let flows = w.sb_snapshot().expect("SB").logical_flow().len();
    assert!(flows > 100, "real northd's SB has {flows} logical flows");
    (s.check)(&mut w);
}

#[test]
fn real_l2() {
    run_real(scenarios::l2());
}

#[test]
fn real_l3() {
    run_real(scenarios::l3());
}

#[test]
fn real_cross_chassis() {
    run_real(scenarios::cross_chassis());
}

#[test]
fn real_acl() {
    run_real(scenarios::acl());
}

#[test]
fn real_snat() {
    run_real(scenarios::snat());
}

#[test]
fn real_dnat_fip() {
    run_real(scenarios::dnat_fip());
}

#[test]
fn real_load_balancer() {
    run_real(scenarios::load_balancer());
}

#[test]
fn real_dhcp() {
    run_real(scenarios::dhcp());
}

#[test]
fn real_restarts_under_load() {
    run_real(scenarios::restarts());
}

#[test]
fn real_mirrors() {
    run_real(scenarios::mirrors::mirrors());
}
