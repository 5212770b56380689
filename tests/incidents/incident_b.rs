//! Incident B (`002`): a newer northd wrote flows (`@pg_...` on per-datapath port groups,
//! `ct_commit { ... }`, `ct_mark.blocked`) that older controllers could not parse; the ACL
//! flows vanished and established traffic died. Here, in the deterministic simulator, with
//! holdfast's own controllers started at the older level `hf-1` and TCP running through a
//! Neutron-style security group (stateful ACLs on port groups, across chassis):
//!
//! - a rolling upgrade in either order (controllers first, northd first) has no parse error on
//!   any chassis at any step, and northd's SB form changes only once every chassis advertises
//!   `hf-2`; TCP sees no reset, no retransmission, every byte verified;
//! - forcing the newer form (`ignore_chassis_features=true`) on `hf-1` controllers keeps
//!   traffic flowing on the flows' last good versions, and each cause is reported once, with
//!   a count, in the log and in `Chassis_Private.external_ids`;
//! - the control case: the same forced change with controllers that keep no last good version
//!   (a test hook) fails closed, and the streams stop.

use std::time::Duration;

use hf_expr::Level;
use hf_sim::world::World;
use hf_sim::world::chassis::ChassisTuning;
use hf_sim::world::incident_b::{self, CHASSIS, Step, at, start_streams, world};
use hf_sim::world::nb;
use hf_sim::world::streams::Stream;

const SEED: u64 = 0x1_0002;

/// Lets the world run for a second (the streams keep going) and records the step.
fn step(w: &mut World, what: &str, streams: &[Stream], log: &mut Vec<String>) -> Step {
    w.run_for(Duration::from_secs(1));
    log.extend(w.take_log());
    Step::record(w, what, streams)
}

/// Stops the streams and waits until both ends are final.
fn finish(w: &mut World, streams: &mut [Stream]) -> Vec<hf_sim::world::streams::StreamReport> {
    for s in streams.iter_mut() {
        w.stop_stream(s).expect("stop");
    }
    let done = w.run_until(
        |w| streams.iter().all(|s| w.stream_report(s).is_final()),
        Duration::from_secs(20),
    );
    let reports: Vec<_> = streams.iter().map(|s| w.stream_report(s)).collect();
    assert!(done, "streams did not finish: {reports:#?}");
    reports
}

/// What every upgrade order must keep: no flow error anywhere, ever (the log has no flow
/// error line either, so nothing transient was missed between steps); the SB form `hf-1`
/// while some chassis advertises `hf-1` and `hf-2` once none does; every byte verified, no
/// reset, no retransmission.
fn assert_clean_upgrade(w: &mut World, steps: &[Step], log: &[String], streams: &mut [Stream]) {
    let report: Vec<String> = steps.iter().map(Step::line).collect();
    let report = report.join("\n");
    for s in steps {
        assert_eq!(s.parse_errors(), 0, "parse errors at a step:\n{report}");
        for (c, e) in &s.errors {
            assert!(e.reported.is_empty(), "{c} reports flow errors:\n{report}");
        }
        let all_hf2 = s.advertised.values().all(|l| *l == Some(Level::Hf2));
        let want = if all_hf2 { Level::Hf2 } else { Level::Hf1 };
        assert_eq!(s.sb_form, want, "SB form at \"{}\":\n{report}", s.what);
        assert_eq!(s.resets(), 0, "{report}");
        assert_eq!(s.retransmitted(), 0, "{report}");
    }
    let bad: Vec<&String> = log.iter().filter(|l| l.contains("flow error:")).collect();
    assert!(bad.is_empty(), "flow errors logged:\n{bad:#?}\n{report}");
    // The last step is on hf-2 everywhere: the upgrade did happen.
    let last = steps.last().expect("steps");
    assert_eq!(last.sb_form, Level::Hf2, "{report}");
    for r in finish(w, streams) {
        assert_eq!(r.state, "stopped", "{r:?}\n{report}");
        assert!(r.bytes > 1_000_000, "{r:?}");
        assert_eq!(r.bytes, r.verified, "{r:?}");
        assert_eq!((r.resets, r.retransmitted, r.timeouts), (0, 0, 0), "{r:?}");
    }
}

#[test]
fn upgrade_controllers_first_then_northd() {
    let mut w = world(SEED);
    let mut streams = start_streams(&mut w);
    let mut log = w.take_log();
    let mut steps = vec![step(
        &mut w,
        "start (every controller hf-1)",
        &streams,
        &mut log,
    )];
    assert_eq!(steps[0].sb_form, Level::Hf1);
    for c in CHASSIS {
        w.restart_controller_with(c, at(Level::Hf2))
            .expect("restart");
        steps.push(step(&mut w, &format!("{c} at hf-2"), &streams, &mut log));
    }
    w.restart_northd().expect("northd");
    steps.push(step(&mut w, "northd restarted", &streams, &mut log));
    // The SB form changed exactly when the last chassis advertised hf-2.
    let forms: Vec<Level> = steps.iter().map(|s| s.sb_form).collect();
    assert_eq!(
        forms,
        [Level::Hf1, Level::Hf1, Level::Hf1, Level::Hf2, Level::Hf2]
    );
    assert_clean_upgrade(&mut w, &steps, &log, &mut streams);
}

#[test]
fn upgrade_northd_first_then_controllers() {
    let mut w = world(SEED + 1);
    let mut streams = start_streams(&mut w);
    let mut log = w.take_log();
    let mut steps = vec![step(
        &mut w,
        "start (every controller hf-1)",
        &streams,
        &mut log,
    )];
    w.restart_northd().expect("northd");
    steps.push(step(&mut w, "northd restarted", &streams, &mut log));
    for c in CHASSIS {
        w.restart_controller_with(c, at(Level::Hf2))
            .expect("restart");
        steps.push(step(&mut w, &format!("{c} at hf-2"), &streams, &mut log));
    }
    let forms: Vec<Level> = steps.iter().map(|s| s.sb_form).collect();
    assert_eq!(
        forms,
        [Level::Hf1, Level::Hf1, Level::Hf1, Level::Hf1, Level::Hf2]
    );
    assert_clean_upgrade(&mut w, &steps, &log, &mut streams);
}

/// Flow error log lines of chassis `c` (`<chassis>|controller|Warn|flow error: ...`).
fn flow_error_lines<'a>(log: &'a [String], c: &str) -> Vec<&'a String> {
    log.iter()
        .filter(|l| l.starts_with(&format!("{c}|controller|")) && l.contains("|flow error: "))
        .collect()
}

#[test]
fn forced_newer_form_runs_on_last_good_versions_and_says_so_once() {
    let mut w = world(SEED + 2);
    let mut streams = start_streams(&mut w);
    let mut log = w.take_log();
    let before = step(&mut w, "start (every controller hf-1)", &streams, &mut log);
    assert_eq!(before.parse_errors(), 0, "{}", before.line());
    w.nb(incident_b::ignore_chassis_features(true)).expect("NB");
    let forced = step(&mut w, "ignore_chassis_features=true", &streams, &mut log);
    assert_eq!(forced.sb_form, Level::Hf2, "{}", forced.line());
    // More NB changes: programs are installed again with the same errors.
    for prio in [900, 901, 902] {
        w.nb(nb::acl(
            "ls1",
            "to-lport",
            prio,
            "ip6 && udp.dst == 9",
            "drop",
        ))
        .expect("NB");
    }
    let later = step(&mut w, "three more NB changes", &streams, &mut log);
    let report = [&before, &forced, &later]
        .iter()
        .map(|s| s.line())
        .collect::<Vec<_>>()
        .join("\n");
    let status = w
        .chassis_by_name("hv1")
        .and_then(|c| c.controller())
        .map(|c| c.status())
        .unwrap_or_default();
    assert!(
        status.contains("Datapaths held at their last good flows: ls1"),
        "{status}"
    );
    for s in [&forced, &later] {
        for c in CHASSIS {
            let e = &s.errors[c];
            // The ACL flows of the newer form cannot be parsed at hf-1; every one of them
            // runs its last good version.
            assert!(e.count > 0, "{c}:\n{report}");
            assert_eq!(e.kept, e.count, "{c}:\n{report}");
            assert_eq!(e.failed_closed, 0, "{c}:\n{report}");
            assert_eq!(
                e.reported.get("holdfast-flow-errors"),
                Some(&e.count.to_string()),
                "{c}: {:?}\n{report}",
                e.reported
            );
            assert_eq!(
                e.reported.get("holdfast-flow-errors-last-good"),
                Some(&e.count.to_string()),
                "{c}: {:?}",
                e.reported
            );
            assert!(
                e.reported
                    .get("holdfast-flow-error-1")
                    .is_some_and(|v| v.ends_with(" flows)")),
                "{c}: {:?}",
                e.reported
            );
        }
        assert_eq!((s.resets(), s.retransmitted()), (0, 0), "{report}");
    }
    // Each distinct cause is logged once per chassis, with its count, however many installs.
    for c in CHASSIS {
        let lines = flow_error_lines(&log, c);
        let causes = later.errors[c]
            .reported
            .keys()
            .filter(|k| k.starts_with("holdfast-flow-error-") && !k.contains("errors"))
            .count();
        assert!(!lines.is_empty(), "{c}: no flow error logged");
        assert_eq!(lines.len(), causes, "{c}: {lines:#?}");
        // The newer form restructures the ACL stages (new flows with no older version), so
        // the switch is held whole at the flows it ran.
        assert!(
            lines.iter().all(|l| l.contains(" flow(s) (first: flow ")
                && l.contains("its datapath runs its last good flows (held)")),
            "{lines:#?}"
        );
        assert_eq!(
            later.errors[c]
                .reported
                .get("holdfast-flow-errors-held-datapaths")
                .map(String::as_str),
            Some("1")
        );
    }
    // Among the causes, incident B's constructs.
    let all = log.join("\n");
    assert!(all.contains("`ct-commit-block`"), "{all}");
    // Traffic flowed all along: more bytes after the change, every byte verified, no reset.
    let bytes_forced: u64 = forced.streams.iter().map(|s| s.bytes).sum();
    let bytes_later: u64 = later.streams.iter().map(|s| s.bytes).sum();
    assert!(bytes_later > bytes_forced, "{report}");
    for r in finish(&mut w, &mut streams) {
        assert_eq!(r.state, "stopped", "{r:?}");
        assert_eq!(r.bytes, r.verified, "{r:?}");
        assert_eq!((r.resets, r.timeouts), (0, 0), "{r:?}");
    }
}

#[test]
fn control_case_without_last_good_the_forced_form_fails_closed_and_traffic_stops() {
    let mut w = world(SEED + 3);
    let streams = start_streams(&mut w);
    let mut log = w.take_log();
    // The naive controllers: hf-1, no last good versions (a test hook).
    for c in CHASSIS {
        w.restart_controller_with(
            c,
            ChassisTuning {
                feature_level: Level::Hf1,
                keep_last_good: false,
            },
        )
        .expect("restart");
    }
    let before = step(&mut w, "naive hf-1 controllers", &streams, &mut log);
    assert_eq!(before.parse_errors(), 0, "{}", before.line());
    let bytes_before: u64 = before.streams.iter().map(|s| s.bytes).sum();
    w.nb(incident_b::ignore_chassis_features(true)).expect("NB");
    let forced = step(&mut w, "ignore_chassis_features=true", &streams, &mut log);
    w.run_for(Duration::from_secs(3));
    let after = Step::record(&w, "3 s later", &streams);
    let report = [&before, &forced, &after]
        .iter()
        .map(|s| s.line())
        .collect::<Vec<_>>()
        .join("\n");
    // The server's chassis has ACL flows it cannot parse and nothing to fall back to: they
    // fail closed, and say so (status, Chassis_Private), distinguishable from last good.
    let e = &after.errors["hv1"];
    assert!(e.failed_closed > 0 && e.kept == 0, "{report}");
    assert_eq!(
        e.reported.get("holdfast-flow-errors-failed-closed"),
        Some(&e.failed_closed.to_string()),
        "{:?}",
        e.reported
    );
    assert!(!e.reported.contains_key("holdfast-flow-errors-last-good"));
    let status = w
        .chassis_by_name("hv1")
        .and_then(|c| c.controller())
        .map(|c| c.status())
        .unwrap_or_default();
    assert!(status.contains("failed closed (drop)"), "{status}");
    // The streams stopped: nothing arrived in the last 3 s.
    let bytes_forced: u64 = forced.streams.iter().map(|s| s.bytes).sum();
    let bytes_after: u64 = after.streams.iter().map(|s| s.bytes).sum();
    assert!(bytes_before > 0, "{report}");
    assert_eq!(bytes_after, bytes_forced, "traffic kept flowing:\n{report}");
    assert!(
        after.streams.iter().all(|s| s.stall_max_us >= 3_000_000),
        "{report}"
    );
}
