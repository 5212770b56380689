//! Issue 21's LB health check behaviour: a VIP with two backends on two chassis and a TCP
//! health check (interval 2 s, timeout 1 s, success_count 2, failure_count 3). Clients reach
//! both backends; one backend's service stops (its port answers SYNs with RSTs): its chassis's
//! datapath finds it offline, the controller writes `Service_Monitor.status`, holdfast northd
//! drops it from the VIP, and new connections all reach the other backend; the service comes
//! back: online again, back in the VIP; its host goes silent (no RSTs): offline through probe
//! timeouts. The timeline is asserted against the check's options.

use std::time::Duration;

use hf_sim::world::nb;
use hf_sim::world::{NorthdMode, World, WorldConfig};

use super::scenarios::{self, ip};

const INTERVAL: u64 = 2;
const TIMEOUT: u64 = 1;
const SUCCESS: u64 = 2;
const FAILURE: u64 = 3;

/// `Service_Monitor.status` of the monitor of `lport` (None: no row or no status).
fn status(w: &World, lport: &str) -> Option<String> {
    let sb = w.sb_snapshot().ok()?;
    sb.service_monitor()
        .values()
        .find(|m| m.logical_port == lport)
        .and_then(|m| m.status.as_ref().map(|s| s.as_str().to_string()))
}

/// The backends of the VIP's `ls_in_lb` flow in SB.
fn vip_backends(w: &World) -> Option<String> {
    let sb = w.sb_snapshot().ok()?;
    sb.logical_flow()
        .values()
        .find(|f| {
            f.external_ids.get("stage-name").map(String::as_str) == Some("ls_in_lb")
                && f.match_.contains("10.0.0.100")
        })
        .map(|f| f.actions.to_string())
}

/// Opens `n` connections from vm1 to the VIP, waits for them, and returns how many new
/// client connections (from vm1, not the monitor's probes) each backend accepted.
fn connect(w: &mut World, n: usize) -> (usize, usize) {
    let before = |w: &World, b: &str| {
        scenarios::servers(w, b)
            .iter()
            .filter(|r| r.remote.starts_with("10.0.0.11:"))
            .count()
    };
    let (b2, b4) = (before(w, "vm2"), before(w, "vm4"));
    let mut names = Vec::new();
    for _ in 0..n {
        names.push(
            w.tcp_transfer("vm1", ip("10.0.0.100"), 80, 2_000)
                .expect("starts"),
        );
        w.run_for(Duration::from_millis(3));
    }
    let ok = w.run_until(
        |w| {
            names.iter().all(|c| {
                w.tcp_record("vm1", c)
                    .is_some_and(|r| r.outcome != "running")
            })
        },
        Duration::from_secs(20),
    );
    for c in &names {
        let r = w.tcp_record("vm1", c).expect("record");
        assert!(ok && r.outcome == "complete", "{r:?}");
    }
    (before(w, "vm2") - b2, before(w, "vm4") - b4)
}

/// Runs until `pred`, at most `limit`; the virtual time it took.
fn time_until(
    w: &mut World,
    limit: Duration,
    what: &str,
    pred: impl FnMut(&World) -> bool,
) -> Duration {
    let t0 = w.now();
    let ok = w.run_until(pred, limit);
    assert!(
        ok,
        "{what}: not within {limit:?}; log:\n{}",
        w.take_log().join("\n")
    );
    w.now() - t0
}

#[test]
fn health_check_takes_a_dead_backend_out_of_the_vip_and_puts_it_back() {
    let mut nbt = scenarios::base();
    nbt.push(nb::load_balancer(
        "lb0",
        "10.0.0.100:80",
        &["10.0.0.12:8080", "10.0.0.14:8080"],
        "tcp",
        &["sw0"],
        &["lr0"],
    ));
    let (i, t, s, f) = (
        INTERVAL.to_string(),
        TIMEOUT.to_string(),
        SUCCESS.to_string(),
        FAILURE.to_string(),
    );
    nbt.push(nb::health_check(
        "lb0",
        "10.0.0.100:80",
        &[
            ("interval", &i),
            ("timeout", &t),
            ("success_count", &s),
            ("failure_count", &f),
        ],
        &[
            ("10.0.0.12", "vm2:10.0.0.254"),
            ("10.0.0.14", "vm4:10.0.0.254"),
        ],
    ));
    let mut w = World::new(WorldConfig {
        // HF_HEALTH_SEED: another world seed (host ISNs and ports, probe ports, phases).
        seed: std::env::var("HF_HEALTH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(21),
        chassis: vec!["hv1".into(), "hv2".into()],
        northd: NorthdMode::Holdfast,
    })
    .expect("world");
    w.nb_all(nbt).expect("NB builds");
    scenarios::wait_ready(&mut w);
    for b in ["vm2", "vm4"] {
        w.tcp_listen(b, 8080).expect("listen");
    }
    // Both monitors (vm2 probed from hv1, vm4 from hv2) come online.
    let up = time_until(&mut w, Duration::from_secs(30), "both online", |w| {
        status(w, "vm2").as_deref() == Some("online")
            && status(w, "vm4").as_deref() == Some("online")
    });
    eprintln!("health: both backends online {up:?} after the services started");
    w.run_for(Duration::from_millis(500));
    let both = "ct_lb_mark(backends=10.0.0.12:8080,10.0.0.14:8080);";
    assert!(
        vip_backends(&w).is_some_and(|a| a.contains(both)),
        "{:?}",
        vip_backends(&w)
    );
    let (a, b) = connect(&mut w, 16);
    assert!(a > 0 && b > 0 && a + b == 16, "vm2 {a}, vm4 {b}");

    // vm4's service stops: SYNs get RSTs.
    w.tcp_unlisten("vm4", 8080).expect("unlisten");
    let off = time_until(&mut w, Duration::from_secs(30), "vm4 offline", |w| {
        status(w, "vm4").as_deref() == Some("offline")
    });
    let out = off
        + time_until(&mut w, Duration::from_secs(5), "vm4 out of the VIP", |w| {
            vip_backends(w).is_some_and(|a| a.contains("ct_lb_mark(backends=10.0.0.12:8080);"))
        });
    eprintln!(
        "health: vm4 offline {off:?} after its service stopped, out of the VIP's flow at {out:?}"
    );
    // At most FAILURE failures one interval apart, the first within an interval of the stop
    // (the RSTs come at once: no timeout). Fewer when failures from before the services
    // started are still counted: as in pinctrl, a counter is reset only when it sets the
    // status, so at least one probe (the first after the stop) is needed, not FAILURE.
    assert!(
        off > Duration::ZERO && off <= Duration::from_secs(INTERVAL * FAILURE + TIMEOUT),
        "offline after {off:?}"
    );
    assert!(
        out - off < Duration::from_secs(1),
        "northd took {:?}",
        out - off
    );
    assert_eq!(status(&w, "vm2").as_deref(), Some("online"));
    w.run_for(Duration::from_millis(500));
    let (a, b) = connect(&mut w, 12);
    assert_eq!((a, b), (12, 0), "new connections all reach vm2");

    // The service comes back.
    w.tcp_listen("vm4", 8080).expect("listen again");
    let on = time_until(&mut w, Duration::from_secs(30), "vm4 online", |w| {
        status(w, "vm4").as_deref() == Some("online")
    });
    let back = on
        + time_until(&mut w, Duration::from_secs(5), "vm4 back in the VIP", |w| {
            vip_backends(w).is_some_and(|a| a.contains(both))
        });
    eprintln!(
        "health: vm4 online {on:?} after its service came back, back in the VIP's flow at {back:?}"
    );
    // SUCCESS successes one interval apart (the success counter was reset when it set the
    // status online), the first within an interval of the restart.
    assert!(
        on >= Duration::from_secs(INTERVAL * (SUCCESS - 1))
            && on <= Duration::from_secs(INTERVAL * SUCCESS + TIMEOUT),
        "online after {on:?}"
    );
    assert!(
        back - on < Duration::from_secs(1),
        "northd took {:?}",
        back - on
    );
    w.run_for(Duration::from_millis(500));
    let (a, b) = connect(&mut w, 16);
    assert!(a > 0 && b > 0 && a + b == 16, "vm2 {a}, vm4 {b}");

    // vm4's host goes silent (paused: it answers nothing, not even RSTs): each probe times
    // out, and the next one goes an interval after the timeout, so failures come
    // interval + timeout apart (pinctrl's timing).
    let now = w.now();
    w.host_mut("vm4").expect("vm4").pause(now);
    let silent = time_until(
        &mut w,
        Duration::from_secs(30),
        "vm4 offline (silent)",
        |w| status(w, "vm4").as_deref() == Some("offline"),
    );
    eprintln!("health: vm4 offline {silent:?} after its host went silent");
    let period = Duration::from_secs(INTERVAL + TIMEOUT);
    assert!(
        silent >= period * (FAILURE as u32 - 1) && silent <= period * FAILURE as u32,
        "offline after {silent:?}"
    );
    w.run_for(Duration::from_millis(500));
    let (a, b) = connect(&mut w, 8);
    assert_eq!((a, b), (8, 0), "new connections all reach vm2");
}
