//! `holdfast check` as a command on live databases:
//! - under `holdfast db` + `holdfast northd`: incident A's NAT row (an error, in text and JSON,
//!   exit status 1) and its exemption (exit status 0); a requested zone 0 (a warning: exit
//!   status 0, or 1 with `--strict`); a broken drop ACL; a live `holdfast datapath` whose zone map gives one zone to two names;
//!   a socket that is not a datapath's, and databases that cannot be read (exit 2);
//! - incident B under `holdfast northd`: an `hf-1` chassis with negotiation on (no finding)
//!   and with `ignore_chassis_features=true` (flow-unparsable), and a chassis below `hf-1`;
//! - real `ovsdb-server` + real `ovn-northd` on a realistic NB (switches, a distributed router,
//!   a gateway router with SNAT, load balancers, ACLs on port groups) and a chassis with OVN
//!   23.03's flags: clean once the SNAT is scoped; the same flows judged at `hf-1` are not.
//!
//! - `holdfast sandbox`'s topologies: the default one is clean; OVN-Kubernetes' layer 2
//!   (incident C) gives one egress-moves warning per VM.
//!
//! The finding codes' other cases are hf-check's unit tests.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "northd/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::run_ok;
use fixture::{Backend, Dbs, NorthdProc, PidDaemon};
use serde_json::Value;

const TOOLS: &[&str] = &["ovsdb-server", "ovsdb-tool", "ovn-nbctl", "ovn-sbctl"];

/// `holdfast check` on `dbs` with `extra` arguments: (exit status, stdout, stderr).
fn check(dbs: &Dbs, extra: &[&str]) -> (i32, String, String) {
    let out = common::run(
        Command::new(common::holdfast())
            .arg("check")
            .arg(format!("--ovnnb-db={}", dbs.nb))
            .arg(format!("--ovnsb-db={}", dbs.sb))
            .args(extra),
        Duration::from_secs(60),
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The findings of a JSON run.
fn findings(dbs: &Dbs, extra: &[&str]) -> (i32, Vec<Value>) {
    let mut args = vec!["--format=json"];
    args.extend_from_slice(extra);
    let (code, out, err) = check(dbs, &args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, v["findings"].as_array().cloned().unwrap_or_default())
}

fn codes(f: &[Value]) -> Vec<String> {
    f.iter()
        .map(|x| x["code"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn nb(dbs: &Dbs, args: &[&str]) -> String {
    run_ok(dbs.nbctl().args(args)).trim().to_string()
}

fn sync(dbs: &Dbs) {
    run_ok(dbs.nbctl().args(["--wait=sb", "sync"]));
}

/// Router port `lrp` (on `lr`) attached to switch `ls`.
fn link(dbs: &Dbs, ls: &str, lr: &str, lrp: &str, mac: &str, net: &str) {
    let lsp = format!("{ls}-{lrp}");
    nb(dbs, &["lrp-add", lr, lrp, mac, net]);
    nb(
        dbs,
        &[
            "lsp-add",
            ls,
            &lsp,
            "--",
            "lsp-set-type",
            &lsp,
            "router",
            "--",
            "lsp-set-addresses",
            &lsp,
            "router",
            "--",
            "lsp-set-options",
            &lsp,
            &format!("router-port={lrp}"),
        ],
    );
}

fn localnet(dbs: &Dbs, ls: &str) {
    let p = format!("ln-{ls}");
    nb(
        dbs,
        &[
            "lsp-add",
            ls,
            &p,
            "--",
            "lsp-set-type",
            &p,
            "localnet",
            "--",
            "lsp-set-addresses",
            &p,
            "unknown",
            "--",
            "lsp-set-options",
            &p,
            "network_name=physnet",
        ],
    );
}

/// Incident A's shape: a pod behind the cluster router, gateway router GR_node1 on the join
/// switch and on node1's host network 10.6.158.0/24 (listed in holdfast-cluster-cidrs), and a
/// per-pod SNAT to the node's address. Returns the NAT row's UUID.
fn incident_a(dbs: &Dbs) -> String {
    nb(
        dbs,
        &[
            "ls-add",
            "node1",
            "--",
            "ls-add",
            "join",
            "--",
            "ls-add",
            "ext_node1",
        ],
    );
    nb(
        dbs,
        &[
            "lsp-add",
            "node1",
            "pod1",
            "--",
            "lsp-set-addresses",
            "pod1",
            "0a:58:0a:81:00:09 10.129.0.9",
        ],
    );
    localnet(dbs, "ext_node1");
    nb(
        dbs,
        &["lr-add", "ovn_cluster_router", "--", "lr-add", "GR_node1"],
    );
    nb(
        dbs,
        &["set", "logical_router", "GR_node1", "options:chassis=node1"],
    );
    link(
        dbs,
        "node1",
        "ovn_cluster_router",
        "rtos-node1",
        "0a:58:0a:81:00:01",
        "10.129.0.1/23",
    );
    link(
        dbs,
        "join",
        "ovn_cluster_router",
        "rtoj",
        "0a:58:64:40:00:01",
        "100.64.0.1/16",
    );
    link(
        dbs,
        "join",
        "GR_node1",
        "rtoj-GR_node1",
        "0a:58:64:40:00:02",
        "100.64.0.2/16",
    );
    link(
        dbs,
        "ext_node1",
        "GR_node1",
        "rtoe-GR_node1",
        "0a:58:0a:06:9e:0c",
        "10.6.158.12/24",
    );
    nb(
        dbs,
        &["lr-route-add", "GR_node1", "10.128.0.0/14", "100.64.0.1"],
    );
    nb(
        dbs,
        &["lr-route-add", "GR_node1", "0.0.0.0/0", "10.6.158.1"],
    );
    nb(
        dbs,
        &[
            "lr-route-add",
            "ovn_cluster_router",
            "0.0.0.0/0",
            "100.64.0.2",
        ],
    );
    nb(
        dbs,
        &[
            "set",
            "NB_Global",
            ".",
            "options:holdfast-cluster-cidrs=\"10.6.158.0/24\"",
        ],
    );
    nb(
        dbs,
        &[
            "lr-nat-add",
            "GR_node1",
            "snat",
            "10.6.158.12",
            "10.129.0.9",
        ],
    );
    nb(
        dbs,
        &[
            "--bare",
            "--columns=_uuid",
            "find",
            "NAT",
            "logical_ip=10.129.0.9",
        ],
    )
}

/// Scopes NAT `nat` with an `exempted_ext_ips` address set of `addrs`.
fn exempt(dbs: &Dbs, nat: &str, name: &str, addrs: &str) {
    let set = nb(
        dbs,
        &[
            "create",
            "Address_Set",
            &format!("name={name}"),
            &format!("addresses=\"{addrs}\""),
        ],
    );
    nb(
        dbs,
        &["set", "NAT", nat, &format!("exempted_ext_ips={set}")],
    );
}

/// check reads the keys the holdfast controller writes: the same spelling on both sides.
#[test]
fn reads_the_keys_the_controller_writes() {
    assert_eq!(
        hf_check::zones::ZONE_ERROR_KEY,
        hf_controller::daemon::chassis::ZONE_ERROR_KEY
    );
}

/// A `--timeout` that is not a number is a usage error naming it, not a panic.
#[test]
fn a_timeout_that_is_not_a_number_is_refused() {
    // NaN and infinity panicked in Duration::from_secs_f64; both commands share the parser.
    for bad in ["nan", "inf", "-1"] {
        for args in [
            vec![
                "check".to_string(),
                "--ovnnb-db=unix:/nonexistent/nb.sock".into(),
                "--ovnsb-db=unix:/nonexistent/sb.sock".into(),
                format!("--timeout={bad}"),
            ],
            vec![
                "trace".to_string(),
                "--db=unix:/nonexistent/sb.sock".into(),
                format!("--timeout={bad}"),
                "ls0".into(),
                "inport == \"p1\"".into(),
            ],
        ] {
            let out = common::run(
                Command::new(common::holdfast()).args(&args),
                Duration::from_secs(30),
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(out.stdout.is_empty(), "{args:?}");
            assert!(
                err.contains("--timeout")
                    && err.contains(&format!("\"{bad}\" is not a number of seconds")),
                "{args:?}: {err}"
            );
        }
    }
}

#[test]
fn findings_and_exit_statuses_under_holdfast() {
    if !common::require("check", TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Holdfast);
    let northd = NorthdProc::start(d, "northd", &dbs.nb, &dbs.sb, &[]);
    let (code, out, _) = check(&dbs, &[]);
    assert_eq!((code, out.as_str()), (0, "check: no findings\n"));

    // Incident A: an error, in text and in JSON.
    let nat = incident_a(&dbs);
    sync(&dbs);
    let (code, out, err) = check(&dbs, &[]);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("error[snat-internal]: snat on gateway router GR_node1"),
        "{out}"
    );
    assert!(lines[0].contains("10.6.158.1 in 10.6.158.0/24"), "{out}");
    assert_eq!(
        lines[1],
        format!("  --> NB NAT {nat} (GR_node1 snat 10.129.0.9 -> 10.6.158.12)")
    );
    assert!(
        lines[3].starts_with("  = help: set exempted_ext_ips"),
        "{out}"
    );
    assert_eq!(lines.last().copied(), Some("check: 1 error, 0 warnings"));
    let (code, f) = findings(&dbs, &[]);
    assert_eq!(code, 1);
    assert_eq!(codes(&f), ["snat-internal"]);
    assert_eq!(f[0]["row"], nat.as_str());
    assert_eq!(f[0]["table"], "NAT");
    assert_eq!(f[0]["severity"], "error");
    assert_eq!(f[0]["name"], "GR_node1 snat 10.129.0.9 -> 10.6.158.12");

    // Exempting the host network: clean.
    exempt(&dbs, &nat, "host_networks", "10.6.158.0/24");
    let (code, out, _) = check(&dbs, &[]);
    assert_eq!((code, out.as_str()), (0, "check: no findings\n"));

    // A requested zone 0: a warning, which only --strict fails.
    nb(
        &dbs,
        &[
            "set",
            "logical_router",
            "GR_node1",
            "options:snat-ct-zone=0",
        ],
    );
    let (code, f) = findings(&dbs, &[]);
    assert_eq!((code, codes(&f)), (0, vec!["zone-risk".to_string()]));
    assert_eq!(f[0]["severity"], "warning");
    assert_eq!(f[0]["table"], "Logical_Router");
    let (code, out, _) = check(&dbs, &["--strict"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("warning[zone-risk]: router GR_node1 requests conntrack zone 0"));
    nb(
        &dbs,
        &[
            "remove",
            "logical_router",
            "GR_node1",
            "options",
            "snat-ct-zone",
        ],
    );

    // A drop ACL whose match does not parse.
    nb(&dbs, &["pg-add", "pg_pods", "pod1"]);
    nb(
        &dbs,
        &[
            "acl-add",
            "pg_pods",
            "to-lport",
            "1000",
            "outport == @pg_pods && tcp.dst ==",
            "drop",
        ],
    );
    sync(&dbs);
    let (code, f) = findings(&dbs, &[]);
    assert_eq!((code, codes(&f)), (1, vec!["acl-broken".to_string()]));
    assert_eq!(f[0]["severity"], "error");
    assert_eq!(f[0]["table"], "ACL");
    assert!(
        f[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("port group pg_pods to-lport priority 1000 drop"),
        "{f:?}"
    );
    // What holdfast northd did, read from its SB marks (`hf-acl-broken`), end to end.
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("holdfast northd fails closed"),
        "{f:?}"
    );
    nb(&dbs, &["acl-del", "pg_pods"]);

    // A live datapath whose zone map gives zone 7 to two names (as its --zones-file says).
    std::fs::write(
        d.join("hv1.zones"),
        r#"{"lsp/a": 7, "lsp/b": 7, "lsp/c": 8}"#,
    )
    .unwrap();
    let _dp = start_datapath(d, "hv1");
    let ctl = d.join("hv1.ctl");
    let (code, f) = findings(&dbs, &["--datapath-ctl", ctl.to_str().unwrap()]);
    assert_eq!((code, codes(&f)), (1, vec!["zone-risk".to_string()]));
    assert_eq!(f[0]["table"], "zone map");
    assert_eq!(f[0]["row"], ctl.to_str().unwrap());
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("zone 7 is used by 2 names: lsp/a, lsp/b")
    );

    // Not a datapath's socket (northd's): refused, exit 2.
    let (code, out, err) = check(&dbs, &["--datapath-ctl", northd.ctl.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("not a holdfast datapath's socket"), "{err}");
    // Databases that cannot be read: exit 2, nothing on stdout.
    let out = common::run(
        Command::new(common::holdfast()).args([
            "check",
            "--ovnnb-db=unix:/nonexistent/nb.sock",
            &format!("--ovnsb-db={}", dbs.sb),
            "--timeout=0.5",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ovnnb-db unix:/nonexistent/nb.sock"));
}

/// A detached `holdfast datapath` for chassis `name` with its zone map in `dir/NAME.zones`.
fn start_datapath(dir: &Path, name: &str) -> PidDaemon {
    run_ok(
        Command::new(common::holdfast())
            .arg("datapath")
            .args(common::daemon_args(dir, name))
            .arg(format!("--chassis={name}"))
            .arg("--encap-ip=127.0.0.1")
            .arg("--geneve-port=0")
            .arg(format!(
                "--control=punix:{}",
                dir.join(format!("{name}.sock")).display()
            ))
            .arg(format!(
                "--zones-file={}",
                dir.join(format!("{name}.zones")).display()
            )),
    );
    PidDaemon::adopt(dir, name)
}

#[test]
fn incident_b_flows_and_chassis_under_holdfast_northd() {
    if !common::require("check incident B", TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Holdfast);
    let _northd = NorthdProc::start(d, "northd", &dbs.nb, &dbs.sb, &[]);
    nb(&dbs, &["ls-add", "sw0"]);
    nb(
        &dbs,
        &[
            "lsp-add",
            "sw0",
            "vm1",
            "--",
            "lsp-set-addresses",
            "vm1",
            "0a:00:00:00:00:01 10.0.0.11",
        ],
    );
    nb(&dbs, &["pg-add", "pg_web", "vm1"]);
    nb(
        &dbs,
        &[
            "acl-add",
            "pg_web",
            "to-lport",
            "1002",
            "outport == @pg_web && tcp.dst == 80",
            "allow-related",
        ],
    );
    nb(
        &dbs,
        &[
            "acl-add",
            "pg_web",
            "to-lport",
            "1000",
            "outport == @pg_web && ip",
            "drop",
        ],
    );
    nb(
        &dbs,
        &["lb-add", "lb0", "10.0.0.100:80", "10.0.0.11:8080", "tcp"],
    );
    nb(&dbs, &["ls-lb-add", "sw0", "lb0"]);
    run_ok(
        dbs.sbctl()
            .args(["chassis-add", "hv1", "geneve", "192.168.0.11"]),
    );
    run_ok(dbs.sbctl().args([
        "set",
        "chassis",
        "hv1",
        "other_config:holdfast-features=\"hf-1\"",
    ]));
    sync(&dbs);
    // northd negotiated hf-1: nothing the chassis cannot parse.
    let (code, f) = findings(&dbs, &[]);
    assert_eq!((code, codes(&f)), (0, Vec::<String>::new()), "{f:?}");

    // ignore_chassis_features: the newest forms reach the hf-1 chassis.
    nb(
        &dbs,
        &[
            "set",
            "NB_Global",
            ".",
            "options:ignore_chassis_features=true",
        ],
    );
    sync(&dbs);
    let (code, f) = findings(&dbs, &[]);
    assert_eq!(
        (code, codes(&f)),
        (1, vec!["flow-unparsable".to_string()]),
        "{f:?}"
    );
    assert_eq!(f[0]["table"], "Chassis");
    assert_eq!(f[0]["name"], "hv1");
    let msg = f[0]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("chassis hv1 (other_config:holdfast-features=hf-1) cannot parse"),
        "{msg}"
    );
    assert!(
        f[0]["fix"]
            .as_str()
            .unwrap()
            .contains("ignore_chassis_features")
    );
    nb(
        &dbs,
        &[
            "remove",
            "NB_Global",
            ".",
            "options",
            "ignore_chassis_features",
        ],
    );
    sync(&dbs);

    // A chassis below hf-1: unsupported (and northd says so in NB too; one finding).
    run_ok(
        dbs.sbctl()
            .args(["chassis-add", "hv0", "geneve", "192.168.0.10"]),
    );
    run_ok(dbs.sbctl().args([
        "set",
        "chassis",
        "hv0",
        "other_config:holdfast-features=\"addr-set\"",
    ]));
    sync(&dbs);
    let (code, f) = findings(&dbs, &[]);
    assert_eq!(
        (code, codes(&f)),
        (1, vec!["chassis-unsupported".to_string()]),
        "{f:?}"
    );
    assert_eq!(f[0]["name"], "hv0");
}

#[test]
fn real_ovn_northd_on_a_realistic_nb_runs_clean() {
    if !common::require(
        "check on real ovn-northd",
        &[TOOLS, &["ovn-northd"]].concat(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Ovsdb);
    run_ok(
        Command::new("ovn-northd")
            .args(common::daemon_args(d, "ovn-northd"))
            .arg(format!("--ovnnb-db={}", dbs.nb))
            .arg(format!("--ovnsb-db={}", dbs.sb)),
    );
    let _northd = PidDaemon::adopt(d, "ovn-northd");
    // A chassis as OVN 23.03's ovn-controller registers it.
    run_ok(
        dbs.sbctl()
            .args(["chassis-add", "hv1", "geneve", "192.168.0.11"]),
    );
    run_ok(dbs.sbctl().args([
        "set",
        "chassis",
        "hv1",
        "other_config:port-up-notif=true",
        "other_config:ct-no-masked-label=true",
        "other_config:mac-binding-timestamp=true",
        "other_config:ovn-ct-lb-related=true",
    ]));
    // Two switches behind a distributed router, a join switch to a gateway router with an
    // external switch, SNAT of the cluster on the gateway router, load balancers on a switch
    // and on the gateway router, ACLs on a port group.
    nb(
        &dbs,
        &[
            "ls-add", "sw0", "--", "ls-add", "sw1", "--", "ls-add", "join", "--", "ls-add", "ext",
        ],
    );
    for (sw, p, addr) in [
        ("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11"),
        ("sw0", "vm2", "0a:00:00:00:00:02 10.0.0.12"),
        ("sw1", "vm3", "0a:00:00:00:01:03 10.0.1.13"),
    ] {
        nb(
            &dbs,
            &["lsp-add", sw, p, "--", "lsp-set-addresses", p, addr],
        );
        nb(&dbs, &["lsp-set-port-security", p, addr]);
    }
    localnet(&dbs, "ext");
    nb(&dbs, &["lr-add", "lr0", "--", "lr-add", "gr0"]);
    nb(
        &dbs,
        &["set", "logical_router", "gr0", "options:chassis=hv1"],
    );
    link(
        &dbs,
        "sw0",
        "lr0",
        "lr0-sw0",
        "0a:00:00:00:ff:00",
        "10.0.0.1/24",
    );
    link(
        &dbs,
        "sw1",
        "lr0",
        "lr0-sw1",
        "0a:00:00:00:ff:01",
        "10.0.1.1/24",
    );
    link(
        &dbs,
        "join",
        "lr0",
        "lr0-join",
        "0a:00:00:00:ff:02",
        "100.64.0.1/16",
    );
    link(
        &dbs,
        "join",
        "gr0",
        "gr0-join",
        "0a:00:00:00:ff:03",
        "100.64.0.2/16",
    );
    link(
        &dbs,
        "ext",
        "gr0",
        "gr0-ext",
        "0a:00:00:00:ff:04",
        "172.16.0.100/24",
    );
    nb(&dbs, &["lr-route-add", "lr0", "0.0.0.0/0", "100.64.0.2"]);
    nb(&dbs, &["lr-route-add", "gr0", "10.0.0.0/16", "100.64.0.1"]);
    nb(&dbs, &["lr-route-add", "gr0", "0.0.0.0/0", "172.16.0.254"]);
    nb(
        &dbs,
        &["lr-nat-add", "gr0", "snat", "172.16.0.100", "10.0.0.0/16"],
    );
    nb(
        &dbs,
        &[
            "lb-add",
            "lb-web",
            "10.0.0.100:80",
            "10.0.0.11:8080,10.0.0.12:8080",
            "tcp",
        ],
    );
    nb(&dbs, &["ls-lb-add", "sw0", "lb-web"]);
    nb(
        &dbs,
        &["lb-add", "lb-ext", "172.16.0.200:80", "10.0.1.13:80", "tcp"],
    );
    nb(&dbs, &["lr-lb-add", "gr0", "lb-ext"]);
    nb(&dbs, &["pg-add", "pg_web", "vm1", "vm2"]);
    for (dir, prio, m, action) in [
        (
            "to-lport",
            "1002",
            "outport == @pg_web && ip4 && tcp.dst == 80",
            "allow-related",
        ),
        (
            "from-lport",
            "1001",
            "inport == @pg_web && ip4",
            "allow-related",
        ),
        ("to-lport", "1000", "outport == @pg_web && ip", "drop"),
    ] {
        nb(&dbs, &["acl-add", "pg_web", dir, prio, m, action]);
    }
    sync(&dbs);
    let n_flows = run_ok(
        dbs.sbctl()
            .args(["--bare", "--columns=_uuid", "list", "Logical_Flow"]),
    )
    .split_whitespace()
    .count();
    assert!(n_flows > 300, "real ovn-northd wrote only {n_flows} flows");

    // The cluster's SNAT also rewrites traffic to the chassis' tunnel address, reached through
    // the gateway router's default route: a true finding until it is scoped.
    let (code, f) = findings(&dbs, &[]);
    assert_eq!(
        (code, codes(&f)),
        (1, vec!["snat-internal".to_string()]),
        "{f:?}"
    );
    assert!(
        f[0]["message"].as_str().unwrap().contains("192.168.0.11"),
        "{f:?}"
    );
    let nat = nb(
        &dbs,
        &[
            "--bare",
            "--columns=_uuid",
            "find",
            "NAT",
            "logical_ip=\"10.0.0.0/16\"",
        ],
    );
    exempt(&dbs, &nat, "underlay", "192.168.0.0/24");
    let (code, out, err) = check(&dbs, &["--strict"]);
    assert_eq!((code, out.as_str()), (0, "check: no findings\n"), "{err}");

    // The same flows judged for a chassis at hf-1 (as a holdfast controller of that level
    // would advertise): real ovn-northd does not negotiate holdfast levels, so it fires.
    run_ok(dbs.sbctl().args([
        "set",
        "chassis",
        "hv1",
        "other_config:holdfast-features=\"hf-1\"",
    ]));
    let (code, f) = findings(&dbs, &[]);
    assert_eq!(
        (code, codes(&f)),
        (1, vec!["flow-unparsable".to_string()]),
        "{f:?}"
    );
    run_ok(dbs.sbctl().args([
        "remove",
        "chassis",
        "hv1",
        "other_config",
        "holdfast-features",
    ]));

    // A drop ACL whose match does not parse: real ovn-northd writes its text, which no
    // chassis can parse, so the ACL is absent and what it dropped passes.
    nb(
        &dbs,
        &[
            "acl-add",
            "pg_web",
            "to-lport",
            "1003",
            "outport == @pg_web && tcp.dst ==",
            "drop",
        ],
    );
    sync(&dbs);
    let (code, f) = findings(&dbs, &[]);
    assert_eq!(
        (code, codes(&f)),
        (
            1,
            vec!["flow-unparsable".to_string(), "acl-broken".to_string()]
        ),
        "{f:?}"
    );
    // A stateful drop ACL is two flows, whose stage-hint names the ACL.
    let acl = nb(
        &dbs,
        &["--bare", "--columns=_uuid", "find", "ACL", "priority=1003"],
    );
    let msg = f[0]["message"].as_str().unwrap();
    assert!(msg.contains("cannot parse 2 of"), "{msg}");
    assert!(
        msg.contains(&format!("from NB row {}...", &acl[..8])),
        "{msg}"
    );
    assert!(
        f[0]["fix"]
            .as_str()
            .unwrap()
            .starts_with("these flows parse for no chassis")
    );
    assert!(
        f[1]["message"]
            .as_str()
            .unwrap()
            .contains("opens the port group"),
        "{f:?}"
    );
}

/// A running `holdfast sandbox` (killed on drop) and its databases' remotes.
struct Sandbox {
    child: std::process::Child,
    nb: String,
    sb: String,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sandbox {
    /// Starts the sandbox on `topology` and waits until its hosts are attached (NB complete).
    fn start(topology: &str) -> Sandbox {
        use std::io::BufRead;
        let mut child = Command::new(common::holdfast())
            .args([
                "sandbox",
                "--nb-port=0",
                "--sb-port=0",
                "--topology",
                topology,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("cannot start holdfast sandbox");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut sb = Sandbox {
            child,
            nb: String::new(),
            sb: String::new(),
        };
        let mut seen = Vec::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("sandbox: {e:?}; output:\n{}", seen.join("\n")));
            if line.contains("databases listening on") {
                let mut r = line
                    .split("tcp:")
                    .skip(1)
                    .map(|s| format!("tcp:{}", s.split_whitespace().next().unwrap_or("")));
                sb.nb = r.next().unwrap_or_default();
                sb.sb = r.next().unwrap_or_default();
            }
            let done = line.starts_with("[4/5]");
            seen.push(line);
            if done {
                return sb;
            }
        }
    }

    fn check(&self) -> (i32, Vec<Value>) {
        let out = common::run(
            Command::new(common::holdfast()).args([
                "check",
                "--format=json",
                &format!("--ovnnb-db={}", self.nb),
                &format!("--ovnsb-db={}", self.sb),
            ]),
            Duration::from_secs(60),
        );
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (
            out.status.code().unwrap_or(-1),
            v["findings"].as_array().cloned().unwrap_or_default(),
        )
    }
}

#[test]
fn the_sandbox_topologies() {
    // The default topology: every VM's egress is the gateway's SNAT, or its own floating IP.
    let sb = Sandbox::start("default");
    assert_eq!(sb.check(), (0, Vec::new()));
    drop(sb);
    // Incident C's OVN-Kubernetes layer 2: every VM leaves through its node's gateway router.
    let sb = Sandbox::start("ovnk-l2");
    let (code, f) = sb.check();
    assert_eq!(code, 0, "{f:?}");
    let names: Vec<&str> = f.iter().map(|x| x["name"].as_str().unwrap_or("")).collect();
    assert_eq!(
        names,
        ["vm1 on l2", "vm2 on l2", "vm3 on l2", "vm4 on l2"],
        "{f:?}"
    );
    assert!(
        f.iter()
            .all(|x| x["code"] == "egress-moves" && x["severity"] == "warning")
    );
}
