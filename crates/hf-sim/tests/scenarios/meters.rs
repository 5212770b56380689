//! Issue 21's meter and ACL log behaviour: a QoS bandwidth limit (`set_meter`) caps a UDP
//! flood at its rate and burst while other traffic passes whole; logged `drop` ACLs write
//! `acl_log` lines (parsed by [`parse_acl_log`], the parser the real ovn-controller test uses
//! on ovn-controller's own lines), one per packet without a meter and no more than the meter's
//! rate and burst with one.

use std::collections::BTreeMap;
use std::time::Duration;

use hf_sim::world::World;
use hf_sim::world::nb::Txn;
use serde_json::json;

use super::{Scenario, base, ip, udp_ok, wait_ready};

/// One `acl_log` line as OVN's own test suite reads it (its `check_acl_log.py`: the text after
/// the last `|`, `key=value` pairs before the first `:`, the packet's after it, the first of
/// those being the protocol): key → value, quotes stripped.
pub fn parse_acl_log(line: &str) -> BTreeMap<String, String> {
    let strip = |s: &str| {
        s.trim_matches(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .to_string()
    };
    let mut out = BTreeMap::new();
    let details = line.rsplit_once('|').map_or(line, |(_, d)| d);
    let (acl, packet) = details.split_once(':').unwrap_or((details, ""));
    for datum in acl.split(',') {
        let (k, v) = datum.rsplit_once('=').unwrap_or(("", datum));
        out.insert(strip(k), strip(v));
    }
    for datum in packet.split(',') {
        let (k, v) = datum.rsplit_once('=').unwrap_or(("", datum));
        let k = if k.is_empty() {
            "protocol".to_string()
        } else {
            strip(k)
        };
        out.insert(k, strip(v));
    }
    out
}

fn meter(name: &str, unit: &str, rate: i64, burst: i64) -> Txn {
    vec![
        json!({"op": "insert", "table": "Meter_Band", "uuid-name": "band",
            "row": {"action": "drop", "rate": rate, "burst_size": burst}}),
        json!({"op": "insert", "table": "Meter",
            "row": {"name": name, "unit": unit, "bands": ["set", [["named-uuid", "band"]]]}}),
    ]
}

fn logged_acl(name: &str, priority: i64, match_: &str, meter: Option<&str>) -> Txn {
    let mut row = json!({"direction": "from-lport", "priority": priority, "match": match_,
        "action": "drop", "log": true, "name": name, "severity": "warning"});
    if let Some(m) = meter {
        row["meter"] = json!(m);
    }
    vec![
        json!({"op": "insert", "table": "ACL", "uuid-name": "acl", "row": row}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "sw0"]],
            "mutations": [["acls", "insert", ["set", [["named-uuid", "acl"]]]]]}),
    ]
}

fn qos(match_: &str, rate: i64, burst: i64) -> Txn {
    vec![
        json!({"op": "insert", "table": "QoS", "uuid-name": "qos",
            "row": {"direction": "from-lport", "priority": 100, "match": match_,
                "bandwidth": ["map", [["rate", rate], ["burst", burst]]]}}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "sw0"]],
            "mutations": [["qos_rules", "insert", ["set", [["named-uuid", "qos"]]]]]}),
    ]
}

/// `count` datagrams of `len` bytes, one per millisecond, from vm1 to vm2:`port`; how many
/// vm2's server received.
fn flood(w: &mut World, port: u16, count: u16, len: usize) -> u64 {
    let _ = w.udp_listen("vm2", port);
    let before = w
        .host("vm2")
        .and_then(|h| h.udp_server_record(port))
        .map_or(0, |r| r.received);
    w.udp("vm1", ip("10.0.0.12"), port, count, len)
        .expect("udp starts");
    w.run_for(Duration::from_millis(u64::from(count) + 2000));
    w.host("vm2")
        .and_then(|h| h.udp_server_record(port))
        .map_or(0, |r| r.received)
        - before
}

fn acl_logs(w: &mut World) -> Vec<String> {
    w.take_log()
        .into_iter()
        .filter(|l| l.contains("|acl_log|INFO|"))
        .collect()
}

pub fn meters() -> Scenario {
    let mut nbt = base();
    nbt.extend([
        meter("acl-meter", "pktps", 5, 5),
        logged_acl("metered", 1002, "udp.dst == 7", Some("acl-meter")),
        logged_acl("every", 1001, "udp.dst == 6", None),
        // 80 kbit/s with an 80 kbit burst: ten 1,000-byte datagrams of burst, ten a second.
        qos("udp.dst == 9", 80, 80),
    ]);
    Scenario {
        name: "meters",
        chassis: vec!["hv1", "hv2"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            // Unmetered traffic passes whole (and resolves the neighbours).
            udp_ok(w, "vm1", "vm2", "10.0.0.12", 8, 50);
            // The QoS meter: 1,000 datagrams in 1 s, about 10 + 10 pass.
            let got = flood(w, 9, 1000, 1000);
            eprintln!(
                "meters: set_meter(80, 80) passed {got} of 1000 datagrams of 1,000 bytes in 1 s"
            );
            assert!(
                (15..=25).contains(&got),
                "set_meter(80, 80) let {got} of 1000 datagrams through"
            );
            // The same flood elsewhere arrives whole.
            let got = flood(w, 8, 1000, 1000);
            assert_eq!(got, 1000, "unmetered flood");
            let _ = acl_logs(w);
            // A logged drop ACL without a meter: one line per packet.
            let got = flood(w, 6, 20, 64);
            assert_eq!(got, 0, "the ACL drops");
            let lines = acl_logs(w);
            assert_eq!(lines.len(), 20, "{lines:#?}");
            for l in &lines {
                let p = parse_acl_log(l);
                let want = [
                    ("name", "every"),
                    ("verdict", "drop"),
                    ("severity", "warning"),
                    ("direction", "from-lport"),
                    ("protocol", "udp"),
                    ("dl_src", "00:00:00:00:00:01"),
                    ("dl_dst", "00:00:00:00:00:02"),
                    ("nw_src", "10.0.0.11"),
                    ("nw_dst", "10.0.0.12"),
                    ("tp_dst", "6"),
                ];
                for (k, v) in want {
                    assert_eq!(p.get(k).map(String::as_str), Some(v), "{k} in {l}: {p:?}");
                }
            }
            // With the meter (5/s, burst 5): 200 packets in 0.2 s log about 5 + 1 lines.
            let got = flood(w, 7, 200, 64);
            assert_eq!(got, 0, "the ACL drops");
            let lines = acl_logs(w);
            eprintln!(
                "meters: acl-meter (5/s, burst 5) logged {} of 200 drops in 0.2 s; first line: {}",
                lines.len(),
                lines.first().map_or("", String::as_str)
            );
            assert!(
                (5..=7).contains(&lines.len()),
                "{} lines: {lines:#?}",
                lines.len()
            );
            assert!(
                lines
                    .iter()
                    .all(|l| parse_acl_log(l).get("name").map(String::as_str) == Some("metered")),
                "{lines:#?}"
            );
        },
    }
}
