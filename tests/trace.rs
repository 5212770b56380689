//! `holdfast trace` against a real SB: real ovsdb-server serving OVN's own schemas, real
//! ovn-northd compiling a small topology made with real ovn-nbctl, and real ovn-trace (and
//! ovs-appctl) as spot-check oracles. One fixture (NB+SB+northd) per test, in a tempdir.
// Integration tests are I/O shells: they read the clock and spawn processes.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{holdfast, require, run, run_ok};
use hf_testkit::ovn::{Central, Daemon};
use serde_json::Value;

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovn-northd",
    "ovn-nbctl",
    "ovn-trace",
    "ovs-appctl",
    hf_testkit::ovn::NB_SCHEMA,
    hf_testkit::ovn::SB_SCHEMA,
];

/// NB and SB on real ovsdb-server, real ovn-northd between them, and the topology: switch
/// `sw0` (vm1, vm2; a to-lport drop ACL for TCP port 23 towards vm2), switch `sw1` (vm3),
/// router `lr0` joining them, and an unrelated switch `other` (o1).
struct Fixture {
    c: Central,
}

impl Fixture {
    fn new() -> Fixture {
        let f = Fixture {
            c: Central::start().unwrap(),
        };
        for cmd in [
            "ls-add sw0",
            "lsp-add sw0 vm1 -- lsp-set-addresses vm1 \"00:00:00:00:00:01 10.0.0.11\"",
            "lsp-add sw0 vm2 -- lsp-set-addresses vm2 \"00:00:00:00:00:02 10.0.0.12\"",
            "ls-add sw1",
            "lsp-add sw1 vm3 -- lsp-set-addresses vm3 \"00:00:00:00:00:03 10.0.1.13\"",
            "lr-add lr0",
            "lrp-add lr0 lr0-sw0 00:00:00:00:ff:00 10.0.0.1/24",
            "lrp-add lr0 lr0-sw1 00:00:00:00:ff:01 10.0.1.1/24",
            "lsp-add sw0 sw0-lr0 -- lsp-set-type sw0-lr0 router -- lsp-set-addresses sw0-lr0 router -- lsp-set-options sw0-lr0 router-port=lr0-sw0",
            "lsp-add sw1 sw1-lr0 -- lsp-set-type sw1-lr0 router -- lsp-set-addresses sw1-lr0 router -- lsp-set-options sw1-lr0 router-port=lr0-sw1",
            "ls-add other",
            "lsp-add other o1 -- lsp-set-addresses o1 \"00:00:00:00:00:09 10.9.0.9\"",
            "acl-add sw0 to-lport 1000 'outport == \"vm2\" && tcp.dst == 23' drop",
            "--wait=sb sync",
        ] {
            f.nbctl(cmd);
        }
        f
    }

    fn sb(&self) -> String {
        self.c.sb.clone()
    }

    fn nbctl(&self, cmd: &str) {
        run_ok(
            Command::new("sh")
                .arg("-c")
                .arg(format!("ovn-nbctl --db={} {cmd}", self.c.nb)),
        );
    }

    fn trace(&self, args: &[&str]) -> Output {
        run(
            Command::new(holdfast())
                .arg("trace")
                .arg("--db")
                .arg(self.sb())
                .arg("--timeout=5")
                .args(args),
            Duration::from_secs(60),
        )
    }

    fn trace_json(&self, args: &[&str]) -> Value {
        let mut a = vec!["--format=json"];
        a.extend_from_slice(args);
        let out = self.trace(&a);
        assert!(
            out.status.success(),
            "holdfast trace {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    }

    /// Real ovn-trace's `--minimal` output.
    fn ovn_trace(&self, dp: &str, flow: &str) -> String {
        run_ok(
            Command::new("ovn-trace")
                .arg(format!("--db={}", self.sb()))
                .arg("--minimal")
                .arg(dp)
                .arg(flow),
        )
    }
}

const L2: &str = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:00:02 && ip4.src == 10.0.0.11 && ip4.dst == 10.0.0.12 && ip.ttl == 64 && tcp.dst == 80"#;
const L3: &str = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:ff:00 && ip4.src == 10.0.0.11 && ip4.dst == 10.0.1.13 && ip.ttl == 64 && tcp.dst == 80"#;
const DENIED: &str = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:00:02 && ip4.src == 10.0.0.11 && ip4.dst == 10.0.0.12 && ip.ttl == 64 && tcp.dst == 23"#;

fn outputs(v: &Value) -> Vec<String> {
    v["verdict"]["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect()
}

fn stage_names(v: &Value) -> Vec<String> {
    v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}/{}",
                s["datapath"].as_str().unwrap(),
                s["stage"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn l2_switch_delivery_agrees_with_ovn_trace() {
    if !require("l2_switch_delivery", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let v = f.trace_json(&["sw0", L2]);
    assert_eq!(outputs(&v), ["vm2"]);
    assert!(v["verdict"]["drop"].is_null());
    assert!(
        stage_names(&v).contains(&"sw0/ls_in_l2_lkup".to_string()),
        "{:?}",
        stage_names(&v)
    );
    assert!(f.ovn_trace("sw0", L2).contains("output(\"vm2\")"));
    // The text form, without naming the datapath (the inport's, as ovn-trace).
    let out = f.trace(&[L2]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ingress(dp=\"sw0\", inport=\"vm1\")"),
        "{text}"
    );
    assert!(text.contains("ls_in_l2_lkup"), "{text}");
    assert!(text.contains("output(\"vm2\")"), "{text}");
}

#[test]
fn across_a_router_agrees_with_ovn_trace() {
    if !require("across_a_router", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let v = f.trace_json(&["sw0", L3]);
    assert_eq!(outputs(&v), ["vm3"]);
    let stages = stage_names(&v);
    for s in [
        "sw0/ls_in_l2_lkup",
        "lr0/lr_in_ip_routing",
        "sw1/ls_out_apply_port_sec",
    ] {
        assert!(stages.contains(&s.to_string()), "{s} not in {stages:?}");
    }
    assert!(f.ovn_trace("sw0", L3).contains("output(\"vm3\")"));
    // TTL 1 dies in the router, for both.
    let ttl1 = L3.replace("ip.ttl == 64", "ip.ttl == 1");
    let v = f.trace_json(&["sw0", &ttl1]);
    assert!(!outputs(&v).contains(&"vm3".to_string()), "{v}");
    assert!(!f.ovn_trace("sw0", &ttl1).contains("output(\"vm3\")"));
    // A ping of the router port and ARP for its address come back to vm1, for both; the
    // echo reply (which the walk's own conntrack commit lets back through sw0) is no NAT.
    let ping = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:ff:00 && ip4.src == 10.0.0.11 && ip4.dst == 10.0.0.1 && ip.ttl == 64 && icmp4.type == 8"#;
    let arp = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == ff:ff:ff:ff:ff:ff && arp.op == 1 && arp.sha == 00:00:00:00:00:01 && arp.spa == 10.0.0.11 && arp.tpa == 10.0.0.1"#;
    for flow in [ping, arp] {
        let v = f.trace_json(&["sw0", flow]);
        assert_eq!(outputs(&v), ["vm1"], "{flow}");
        assert!(v["verdict"]["nat"].as_array().unwrap().is_empty(), "{v}");
        assert!(
            f.ovn_trace("sw0", flow).contains("output(\"vm1\")"),
            "{flow}"
        );
    }
}

#[test]
fn acl_drop_names_the_stage_and_nb_row() {
    if !require("acl_drop", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let nb = f.c.nb.clone();
    let v = f.trace_json(&["--ovnnb-db", &nb, "sw0", DENIED]);
    assert!(outputs(&v).is_empty(), "{v}");
    assert_eq!(v["verdict"]["drop"]["stage"], "ls_out_acl", "{v}");
    assert!(v["verdict"]["drop"]["reason"].as_str().unwrap().len() > 3);
    let acl = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "ls_out_acl")
        .unwrap();
    let nb_row = acl["nb"].as_str().unwrap_or_default();
    assert!(
        nb_row.starts_with("ACL: to-lport, priority=1000") && nb_row.contains("tcp.dst == 23"),
        "{acl}"
    );
    assert!(!f.ovn_trace("sw0", DENIED).contains("output("));
}

#[test]
fn json_has_the_documented_shape() {
    if !require("json_shape", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let v = f.trace_json(&["--ct=new", "sw0", L3]);
    let top: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(top, ["stages", "verdict"]);
    let verdict: Vec<&String> = v["verdict"].as_object().unwrap().keys().collect();
    assert_eq!(verdict, ["drop", "nat", "outputs"]);
    assert!(v["verdict"]["nat"].as_array().unwrap().is_empty());
    for s in v["stages"].as_array().unwrap() {
        for k in [
            "datapath",
            "pipeline",
            "table",
            "stage",
            "priority",
            "match",
            "actions",
            "uuid",
            "flow_id",
            "stage_hint",
            "nb",
            "effects",
        ] {
            assert!(s.get(k).is_some(), "stage lacks {k}: {s}");
        }
        assert!(["ingress", "egress"].contains(&s["pipeline"].as_str().unwrap()));
        // Every stage's SB UUID is a real Logical_Flow row.
        assert_eq!(s["uuid"].as_str().unwrap().len(), 36, "{s}");
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    if !require("bad_input", TOOLS) {
        return;
    }
    let f = Fixture::new();
    // A caret under the bad token.
    let bad = r#"inport == "vm1" && ip4.srcc == 10.0.0.1"#;
    let out = f.trace(&["sw0", bad]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let src = lines.iter().find(|l| l.contains("ip4.srcc ==")).unwrap();
    let caret = lines.iter().find(|l| l.contains('^')).unwrap();
    assert_eq!(src.find("ip4.srcc"), caret.find('^'), "{err}");
    // Ambiguous microflows are refused as ovn-trace refuses them.
    let out = f.trace(&["sw0", r#"inport == "vm1" && ip"#]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ambiguous"));
    // Unknown datapath and port.
    let out = f.trace(&["nosuch", L2]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown datapath \"nosuch\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = f.trace(&[r#"inport == "nope" && eth.src == 00:00:00:00:00:01"#]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown port \"nope\""));
    // An unreachable database.
    let gone = f.c.dir().join("nothing.sock");
    let t0 = Instant::now();
    let out = run(
        Command::new(holdfast())
            .args(["trace", "--timeout=1", "--db"])
            .arg(format!("unix:{}", gone.display()))
            .args(["sw0", L2]),
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("database connection failed"), "{err}");
    assert!(err.contains("nothing.sock"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn fetches_only_the_rows_the_path_reaches() {
    if !require("conditional_fetch", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let total: usize = run_ok(Command::new("ovn-sbctl").args([
        &format!("--db={}", f.sb()),
        "--bare",
        "--columns=_uuid",
        "list",
        "Logical_Flow",
    ]))
    .lines()
    .filter(|l| !l.trim().is_empty())
    .count();
    let stats = |args: &[&str]| -> (String, String, usize) {
        let mut a = vec!["--fetch-stats", "--format=json"];
        a.extend_from_slice(args);
        let out = f.trace(&a);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let line = err
            .lines()
            .find(|l| l.starts_with("fetch:"))
            .unwrap()
            .to_string();
        let field = |k: &str| -> String {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")).map(str::to_string))
                .unwrap()
        };
        (
            field("datapaths"),
            field("neighbours"),
            field("Logical_Flow").parse().unwrap(),
        )
    };
    // A packet that stays on sw0 fetches sw0's rows; lr0 is known only by its port to sw0.
    let (dps, nbrs, l2) = stats(&["sw0", L2]);
    assert_eq!((dps.as_str(), nbrs.as_str()), ("sw0", "lr0"));
    assert!(l2 < total, "{l2} of {total} flows fetched");
    // Across the router: the walk enters lr0 and then sw1, which are fetched as it goes.
    let (dps, nbrs, l3) = stats(&["sw0", L3]);
    assert_eq!((dps.as_str(), nbrs.as_str()), ("lr0,sw0,sw1", ""));
    assert!(l2 < l3 && l3 < total, "{l2} < {l3} < {total}");
    // From `other`: that switch alone.
    let o1 = r#"inport == "o1" && eth.src == 00:00:00:00:00:09 && eth.dst == 00:00:00:00:00:0a"#;
    let (dps, nbrs, lone) = stats(&[o1]);
    assert_eq!((dps.as_str(), nbrs.as_str()), ("other", ""));
    assert!(lone < total);
    // Exactly the flows of the datapaths walked (their own and their groups'), by ovn-sbctl.
    assert_eq!(l3, sbctl_flow_count(&f, &["sw0", "sw1", "lr0"]));
    assert_eq!(l2, sbctl_flow_count(&f, &["sw0"]));
    assert_eq!(lone, sbctl_flow_count(&f, &["other"]));
}

/// The Logical_Flow rows of the named datapaths (theirs and their datapath groups'), counted
/// from real ovn-sbctl's JSON.
fn sbctl_flow_count(f: &Fixture, names: &[&str]) -> usize {
    let list = |table: &str, cols: &str| -> Vec<Value> {
        let out = run_ok(Command::new("ovn-sbctl").args([
            &format!("--db={}", f.sb()),
            "--format=json",
            &format!("--columns={cols}"),
            "list",
            table,
        ]));
        let v: Value = serde_json::from_str(&out).unwrap();
        v["data"].as_array().unwrap().clone()
    };
    let uuid = |v: &Value| v[1].as_str().unwrap_or_default().to_string();
    // A set datum is ["set", [...]] or a single atom.
    let set = |v: &Value| -> Vec<String> {
        if v[0] == "set" {
            v[1].as_array().unwrap().iter().map(uuid).collect()
        } else {
            vec![uuid(v)]
        }
    };
    let dps: Vec<String> = list("Datapath_Binding", "_uuid,external_ids")
        .iter()
        .filter(|r| {
            r[1][1]
                .as_array()
                .unwrap()
                .iter()
                .any(|kv| kv[0] == "name" && names.contains(&kv[1].as_str().unwrap()))
        })
        .map(|r| uuid(&r[0]))
        .collect();
    assert_eq!(dps.len(), names.len());
    let groups: Vec<String> = list("Logical_DP_Group", "_uuid,datapaths")
        .iter()
        .filter(|r| set(&r[1]).iter().any(|d| dps.contains(d)))
        .map(|r| uuid(&r[0]))
        .collect();
    list("Logical_Flow", "_uuid,logical_datapath,logical_dp_group")
        .iter()
        .filter(|r| {
            set(&r[1]).iter().any(|d| dps.contains(d))
                || set(&r[2]).iter().any(|g| groups.contains(g))
        })
        .count()
}

#[test]
fn daemon_answers_ovs_appctl_and_follows_changes() {
    if !require("daemon", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let d = f.c.dir();
    let ctl = d.join("trace.ctl");
    let pid = d.join("trace.pid");
    let _daemon = Daemon::adopt(d, "trace");
    run_ok(
        Command::new(holdfast())
            .args(["trace", "--detach", "--timeout=5", "--db"])
            .arg(f.sb())
            .arg(format!("--unixctl={}", ctl.display()))
            .arg(format!("--pidfile={}", pid.display()))
            .arg(format!("--log-file={}", d.join("trace.log").display())),
    );
    let appctl = |args: &[&str]| -> Output {
        run(
            Command::new("ovs-appctl").arg("-t").arg(&ctl).args(args),
            Duration::from_secs(30),
        )
    };
    let out = appctl(&["trace", "--minimal", "sw0", L2]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("output(\"vm2\")"));
    let out = appctl(&["trace", "--json", "sw0", L3]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outputs(&v), ["vm3"]);
    // Errors come back as unixctl errors.
    let out = appctl(&["trace", "sw0", r#"inport == "vm1" && ip4.srcc == 1.1.1.1"#]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ip4.srcc"));
    // A port added after the daemon loaded SB is traced to.
    f.nbctl("--wait=sb lsp-add sw0 vm4 -- lsp-set-addresses vm4 \"00:00:00:00:00:04 10.0.0.14\"");
    let to4 = L2
        .replace("00:00:00:00:00:02", "00:00:00:00:00:04")
        .replace("10.0.0.12", "10.0.0.14");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = appctl(&["trace", "--minimal", "sw0", &to4]);
        if String::from_utf8_lossy(&out.stdout).contains("output(\"vm4\")") {
            break;
        }
        assert!(Instant::now() < deadline, "vm4 never reached: {out:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The shared unixctl protocol layer: command table, argument counts, unknown commands.
    let out = appctl(&["list-commands"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("trace                   [OPTIONS]"));
    let out = appctl(&["trace"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("requires at least 1 arguments"));
    let out = appctl(&["no-such-command"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a valid command"));
    let out = appctl(&["exit"]);
    assert!(out.status.success());
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid.exists() || ctl.exists() {
        assert!(Instant::now() < deadline, "daemon did not clean up");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs one `holdfast trace --stdin --format=json` session against the fixture's SB with
/// `reqs` (one JSON request per line) and returns its answers, one per line.
fn stdin_session(f: &Fixture, reqs: &[Value]) -> Vec<Value> {
    use std::io::Write;
    let mut child = Command::new(holdfast())
        .args(["trace", "--stdin", "--format=json", "--timeout=5", "--db"])
        .arg(f.sb())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in reqs {
            writeln!(stdin, "{r}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
#[test]
fn stdin_json_lines() {
    if !require("stdin_json_lines", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let lines = stdin_session(
        &f,
        &[
            serde_json::json!({"datapath": "sw0", "microflow": L2}),
            serde_json::json!({"microflow": DENIED}),
            serde_json::json!({"datapath": "sw0", "microflow": "inport == \"vm1\" && ip4.srcc == 1"}),
            serde_json::json!({"datapath": "sw0", "microflow": L3, "format": "text"}),
        ],
    );
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(outputs(&lines[0]), ["vm2"]);
    assert_eq!(lines[1]["verdict"]["drop"]["stage"], "ls_out_acl");
    assert!(lines[2]["error"].as_str().unwrap().contains('^'));
    assert!(
        lines[3]["text"]
            .as_str()
            .unwrap()
            .contains("output(\"vm3\")")
    );
}

/// A packet whose answer is decided by the datapath a trace fetches last: sw0 → lr0 → sw1,
/// with an ACL on sw1 (fetched in the third round, after the walk entered it) dropping TCP
/// port 80 towards vm3. One long-running session answers a packet that stays on sw0 first,
/// so each later round's rows join a session that has translated and compiled before: a
/// session that did not merge a round's datapaths (their flows, or their compiled tables)
/// would walk into an sw1 without flows and answer "no flow matched" instead of the ACL.
#[test]
fn a_datapath_fetched_in_a_later_round_decides_the_answer() {
    if !require("later_round_decides", TOOLS) {
        return;
    }
    let f = Fixture::new();
    f.nbctl("--wait=sb acl-add sw1 to-lport 1000 'outport == \"vm3\" && tcp.dst == 80' drop");
    let port81 = L3.replace("tcp.dst == 80", "tcp.dst == 81");
    let reqs: Vec<Value> = [L2, L3, &port81]
        .into_iter()
        .map(|flow| serde_json::json!({"datapath": "sw0", "microflow": flow}))
        .collect();
    let lines = stdin_session(&f, &reqs);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(outputs(&lines[0]), ["vm2"]);
    // Port 80: sw1's ACL drops it, as real ovn-trace says.
    let drop = &lines[1]["verdict"]["drop"];
    assert_eq!(drop["stage"], "ls_out_acl", "{}", lines[1]);
    assert!(outputs(&lines[1]).is_empty(), "{}", lines[1]);
    let stages = stage_names(&lines[1]);
    assert!(
        stages.contains(&"lr0/lr_in_ip_routing".to_string()),
        "{stages:?}"
    );
    assert_eq!(
        stages.last().map(String::as_str),
        Some("sw1/ls_out_acl"),
        "{stages:?}"
    );
    let theirs = f.ovn_trace("sw0", L3);
    assert!(!theirs.contains("output(\"vm3\")"), "{theirs}");
    // Port 81 passes the ACL and reaches vm3, for both.
    assert_eq!(outputs(&lines[2]), ["vm3"], "{}", lines[2]);
    assert!(f.ovn_trace("sw0", &port81).contains("output(\"vm3\")"));
    // The one-shot CLI walks the same rounds from nothing and agrees.
    let v = f.trace_json(&["sw0", L3]);
    assert_eq!(v["verdict"]["drop"]["stage"], "ls_out_acl", "{v}");
}

/// The JSON verdict's NAT list as (action, field, value) triples.
fn nat(v: &Value) -> Vec<(String, String, String)> {
    v["verdict"]["nat"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["action"].as_str().unwrap().to_string(),
                n["field"].as_str().unwrap().to_string(),
                n["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn triple(a: &str, f: &str, v: &str) -> (String, String, String) {
    (a.into(), f.into(), v.into())
}

#[test]
fn nat_load_balancing_and_ct_flags_agree_with_ovn_trace() {
    if !require("nat_lb_ct", TOOLS) {
        return;
    }
    let f = Fixture::new();
    for cmd in [
        "ls-add ext",
        "lsp-add ext srv -- lsp-set-addresses srv \"00:00:00:00:02:01 172.16.0.50\"",
        "lrp-add lr0 lr0-ext 00:00:00:00:ff:02 172.16.0.1/24",
        "lsp-add ext ext-lr0 -- lsp-set-type ext-lr0 router -- lsp-set-addresses ext-lr0 router -- lsp-set-options ext-lr0 router-port=lr0-ext",
        "lrp-set-gateway-chassis lr0-ext hv1",
        "lr-nat-add lr0 snat 172.16.0.100 10.0.0.0/24",
        "lr-nat-add lr0 dnat_and_snat 172.16.0.111 10.0.0.12",
        "lb-add lb0 10.0.0.100:80 10.0.0.12:8080,10.0.1.13:8080 tcp",
        "ls-lb-add sw0 lb0",
        "--wait=sb sync",
    ] {
        f.nbctl(cmd);
    }
    // SNAT on the way out through the distributed gateway port.
    let out = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:ff:00 && ip4.src == 10.0.0.11 && ip4.dst == 172.16.0.50 && ip.ttl == 64 && tcp.src == 4000 && tcp.dst == 80"#;
    let v = f.trace_json(&["sw0", out]);
    assert_eq!(outputs(&v), ["srv"]);
    assert_eq!(
        nat(&v),
        [triple("ct_snat_in_czone", "ip4.src", "172.16.0.100")]
    );
    let real = f.ovn_trace("sw0", out);
    assert!(
        real.contains("ct_snatin_czone(ip4.src=172.16.0.100)") && real.contains("output(\"srv\")"),
        "{real}"
    );
    // A floating IP on the way in.
    let inb = r#"inport == "srv" && eth.src == 00:00:00:00:02:01 && eth.dst == 00:00:00:00:ff:02 && ip4.src == 172.16.0.50 && ip4.dst == 172.16.0.111 && ip.ttl == 64 && tcp.src == 4000 && tcp.dst == 22"#;
    let v = f.trace_json(&["ext", inb]);
    assert_eq!(outputs(&v), ["vm2"]);
    assert_eq!(
        nat(&v),
        [triple("ct_dnat_in_czone", "ip4.dst", "10.0.0.12")]
    );
    let real = f.ovn_trace("ext", inb);
    assert!(
        real.contains("ct_dnatin_czone(ip4.dst=10.0.0.12)") && real.contains("output(\"vm2\")"),
        "{real}"
    );
    // The LB VIP, with --lb-dst choosing each backend in turn.
    let vip = r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:ff:00 && ip4.src == 10.0.0.11 && ip4.dst == 10.0.0.100 && ip.ttl == 64 && tcp.src == 4000 && tcp.dst == 80"#;
    for (backend, ip, port) in [
        ("10.0.1.13:8080", "10.0.1.13", "vm3"),
        ("10.0.0.12:8080", "10.0.0.12", "vm2"),
    ] {
        let v = f.trace_json(&[&format!("--lb-dst={backend}"), "sw0", vip]);
        assert_eq!(outputs(&v), [port], "{backend}");
        assert_eq!(
            nat(&v),
            [
                triple("ct_lb_mark", "ip4.dst", ip),
                triple("ct_lb_mark", "tcp.dst", "8080")
            ]
        );
        let real = run_ok(
            Command::new("ovn-trace")
                .arg(format!("--db={}", f.sb()))
                .args(["--minimal", &format!("--lb-dst={backend}"), "sw0", vip]),
        );
        assert!(real.contains(&format!("output(\"{port}\")")), "{real}");
    }
    // --ct=inv: the stateful switch drops invalid connections, as ovn-trace says.
    let v = f.trace_json(&["--ct=inv", "sw0", L2]);
    assert!(outputs(&v).is_empty(), "{v}");
    assert_eq!(v["verdict"]["drop"]["stage"], "ls_in_acl");
    let real = run_ok(
        Command::new("ovn-trace")
            .arg(format!("--db={}", f.sb()))
            .args(["--minimal", "--ct=inv", "sw0", L2]),
    );
    assert!(!real.contains("output("), "{real}");
    let v = f.trace_json(&["--ct=est", "sw0", L2]);
    assert_eq!(outputs(&v), ["vm2"]);
}

#[test]
fn chassis_decides_residency_and_tunnels() {
    if !require("chassis", TOOLS) {
        return;
    }
    let f = Fixture::new();
    let sbctl = |cmd: &str| {
        run_ok(
            Command::new("sh")
                .arg("-c")
                .arg(format!("ovn-sbctl --db={} {cmd}", f.sb())),
        )
    };
    sbctl("chassis-add hv1 geneve 127.0.0.2");
    sbctl("chassis-add hv2 geneve 127.0.0.3");
    sbctl("lsp-bind vm1 hv1");
    sbctl("lsp-bind vm2 hv2");
    // On hv1, vm2 is remote: the copy leaves through a tunnel to hv2.
    let out = f.trace(&["--chassis", "hv1", "--minimal", "sw0", L2]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("output(\"vm2\"); /* datapath \"sw0\" via tunnel to chassis hv2 */"),
        "{text}"
    );
    let v = f.trace_json(&["--chassis", "hv1", "sw0", L2]);
    assert_eq!(outputs(&v), ["vm2"]);
    // Without --chassis every port is local, as in ovn-trace.
    let out = f.trace(&["--minimal", "sw0", L2]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("tunnel"));
    // vm1 does not live on hv2: no packet can enter there.
    let out = f.trace(&["--chassis", "hv2", "sw0", L2]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("port \"vm1\" is not bound on this chassis")
    );
}

#[test]
fn rows_that_do_not_translate_are_named_and_the_trace_goes_on() {
    if !require("bad_rows", TOOLS) {
        return;
    }
    let mut f = Fixture::new();
    // Stop northd, so the row it would delete stays: a flow whose match does not parse.
    f.c.stop_northd().unwrap();
    let sw0 = run_ok(Command::new("ovn-sbctl").args([
        &format!("--db={}", f.sb()),
        "--bare",
        "--columns=_uuid",
        "find",
        "Datapath_Binding",
        "external_ids:name=sw0",
    ]));
    let bad = run_ok(Command::new("ovn-sbctl").args([
        &format!("--db={}", f.sb()),
        "create",
        "Logical_Flow",
        &format!("logical_datapath={}", sw0.trim()),
        "pipeline=ingress",
        "table_id=0",
        "priority=200",
        "match=\"ip4.srcc == 1.2.3.4\"",
        "actions=\"drop;\"",
        "external_ids:stage-name=ls_in_check_port_sec",
    ]));
    let out = f.trace(&["--format=json", "sw0", L2]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("warning:") && l.contains(bad.trim()) && l.contains("ip4.srcc")),
        "{err}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outputs(&v), ["vm2"]);
}
