mod scenarios;
use hf_sim::world::{NorthdMode, World, WorldConfig};
use std::time::Duration;
#[test]
fn dbg() {
    let s = scenarios::l3();
    let mut w = World::new(WorldConfig {
        seed: 7,
        chassis: s.chassis.iter().map(|c| c.to_string()).collect(),
        northd: NorthdMode::Holdfast,
    })
    .unwrap();
    w.nb_all(s.nb.clone()).unwrap();
    scenarios::wait_ready(&mut w);
    let mode = std::env::var("MODE").unwrap_or_default();
    if mode.contains('t') {
        w.tcp_listen("vm4", 7000).unwrap();
        let _ = w
            .tcp_transfer("vm1", scenarios::ip("10.0.0.14"), 7000, 40_000_000)
            .unwrap();
        w.run_for(Duration::from_millis(3));
    }
    if mode.contains('1') {
        w.restart_controller("hv1").unwrap();
    }
    w.run_for(Duration::from_millis(2));
    if mode.contains('2') {
        w.restart_controller("hv2").unwrap();
    }
    let secs: u64 = std::env::var("SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    w.run_for(Duration::from_secs(secs));
    let f0 = w.record().net.hosts["vm1"].frames_in;
    w.take_log();
    w.nb(hf_sim::world::nb::port(
        "sw0",
        "vm7",
        "00:00:00:00:00:07 10.0.0.17",
        hf_sim::world::nb::PortOpts {
            requested_chassis: Some("hv2"),
            ..Default::default()
        },
    ))
    .unwrap();
    scenarios::wait_ready(&mut w);
    let c0 = w.record().chassis;
    if std::env::var("OK").is_ok() {
        scenarios::ping_ok(&mut w, "vm1", "10.0.0.17", 2);
    } else {
        let _ = w.ping(
            "vm1",
            scenarios::ip("10.0.0.17"),
            3,
            Duration::from_millis(10),
        );
    }
    w.run_for(Duration::from_secs(1));
    for l in w.take_log() {
        println!("LOG {l}");
    }
    let r = w.record();
    println!("vm7 {:?}", r.net.hosts["vm7"]);
    println!("vm1 frames_in delta {}", r.net.hosts["vm1"].frames_in - f0);
    println!(
        "vm1 tcp {:?}",
        r.net.hosts["vm1"]
            .tcp
            .values()
            .map(|t| (&t.outcome, &t.state))
            .collect::<Vec<_>>()
    );
    println!("vm1 pings {:?}", r.net.hosts["vm1"].pings);
    for c in ["hv1", "hv2"] {
        println!("{c} before {:?}\n{c} after {:?}", c0[c], r.chassis[c]);
    }
    println!("{}", w.trace_last("vm7", 0).unwrap_or_else(|e| e));
}
