//! Incident B end to end: the `holdfast northd` daemon on real `ovsdb-server`s, chassis
//! registered with real `ovn-sbctl`, the SB read back with real `ovn-sbctl` and every flow
//! parsed and feature-checked by hf-expr (the written text, not northd's trees):
//! - a chassis advertising only `hf-1`: every flow is within `hf-1`, no `Logical_DP_Group`,
//!   `Port_Group` rows named as in NB (global);
//! - it upgrades to `hf-2`: the newer form comes back (datapath groups, per-datapath port
//!   groups, `ct_lb_mark`); it downgrades: the older form again;
//! - `NB_Global options:ignore_chassis_features=true` overrides the `hf-1` chassis;
//! - a chassis below the oldest served level with a port bound on it: reported in
//!   `NB_Global.external_ids:holdfast-unsupported-chassis:<name>` and in `status`, the
//!   datapaths it runs keep their flows through an NB change while an unconnected switch still
//!   gets its flows; when it leaves, the report goes and the change reaches SB.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "northd/fixture.rs"]
#[allow(dead_code)]
mod fixture;

use std::collections::BTreeSet;
use std::time::Duration;

use common::run_ok;
use fixture::{Backend, Dbs, NorthdProc, wait_for};
use hf_expr::features::{FeatureSet, Level, check_actions, check_expr};
use hf_expr::{SymbolTable, parse_actions, parse_match};
use serde_json::Value;

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-appctl",
];

/// One SB flow as read back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SbFlow {
    datapath: String,
    group: bool,
    table: i64,
    priority: i64,
    m: String,
    a: String,
}

fn set_or_one(v: &Value) -> Option<String> {
    match v {
        Value::Array(a) if a.first().and_then(Value::as_str) == Some("uuid") => {
            a.get(1).and_then(Value::as_str).map(String::from)
        }
        _ => None,
    }
}

fn flows(dbs: &Dbs) -> Vec<SbFlow> {
    let out = run_ok(dbs.sbctl().args([
        "-f",
        "json",
        "--columns=logical_datapath,logical_dp_group,table_id,priority,match,actions",
        "list",
        "Logical_Flow",
    ]));
    let v: Value = serde_json::from_str(&out).expect("ovn-sbctl json");
    let names = dp_names(dbs);
    v["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|r| SbFlow {
            datapath: set_or_one(&r[0])
                .and_then(|u| names.iter().find(|(x, _)| *x == u).map(|(_, n)| n.clone()))
                .unwrap_or_default(),
            group: set_or_one(&r[1]).is_some(),
            table: r[2].as_i64().unwrap_or(-1),
            priority: r[3].as_i64().unwrap_or(-1),
            m: r[4].as_str().unwrap_or_default().to_string(),
            a: r[5].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}

/// (Datapath_Binding UUID, name).
fn dp_names(dbs: &Dbs) -> Vec<(String, String)> {
    let out = run_ok(dbs.sbctl().args([
        "-f",
        "json",
        "--columns=_uuid,external_ids",
        "list",
        "Datapath_Binding",
    ]));
    let v: Value = serde_json::from_str(&out).expect("ovn-sbctl json");
    let mut names = Vec::new();
    for r in v["data"].as_array().into_iter().flatten() {
        let (Some(u), Some(pairs)) = (set_or_one(&r[0]), r[1][1].as_array()) else {
            continue;
        };
        for kv in pairs {
            if kv[0].as_str() == Some("name")
                && let Some(n) = kv[1].as_str()
            {
                names.push((u.clone(), n.to_string()));
            }
        }
    }
    names
}

fn port_groups(dbs: &Dbs) -> BTreeSet<String> {
    run_ok(
        dbs.sbctl()
            .args(["--bare", "--columns=name", "list", "Port_Group"]),
    )
    .split_whitespace()
    .map(String::from)
    .collect()
}

/// Every flow parses and stays within `set`; the first one that does not, described.
fn outside(fl: &[SbFlow], set: &FeatureSet) -> Option<String> {
    let symtab = SymbolTable::shared();
    for f in fl {
        let m = match parse_match(symtab, &f.m) {
            Ok(m) => m,
            Err(e) => return Some(format!("match {:?} does not parse: {e}", f.m)),
        };
        let a = match parse_actions(symtab, &f.a) {
            Ok(a) => a,
            Err(e) => return Some(format!("actions {:?} do not parse: {e}", f.a)),
        };
        if let Err(e) = check_expr(&m, set) {
            return Some(format!("match {:?}: {e}", f.m));
        }
        if let Err(e) = check_actions(&a, set) {
            return Some(format!("actions {:?}: {e}", f.a));
        }
    }
    None
}

fn sync(dbs: &Dbs) {
    run_ok(dbs.nbctl().args(["--wait=sb", "sync"]));
}

fn set_features(dbs: &Dbs, chassis: &str, list: &str) {
    run_ok(
        dbs.sbctl()
            .args(["set", "chassis", chassis])
            .arg(format!("other_config:holdfast-features=\"{list}\"")),
    );
}

/// The older form: within hf-1, no datapath group, global port groups.
fn is_old(dbs: &Dbs) -> Result<(), String> {
    let fl = flows(dbs);
    if fl.is_empty() {
        return Err("no flows".into());
    }
    if let Some(e) = outside(&fl, &FeatureSet::level(Level::Hf1)) {
        return Err(e);
    }
    if fl.iter().any(|f| f.group) {
        return Err("a flow uses a datapath group".into());
    }
    let pgs = port_groups(dbs);
    if pgs != BTreeSet::from(["pg_web".to_string()]) {
        return Err(format!("port groups {pgs:?}"));
    }
    Ok(())
}

/// The newer form: datapath groups, per-datapath port groups, ct_lb_mark.
fn is_new(dbs: &Dbs) -> Result<(), String> {
    let fl = flows(dbs);
    if !fl.iter().any(|f| f.group) {
        return Err("no datapath group".into());
    }
    if !fl.iter().any(|f| f.a.contains("ct_lb_mark")) {
        return Err("no ct_lb_mark".into());
    }
    let pgs = port_groups(dbs);
    if pgs.contains("pg_web") || !pgs.iter().any(|p| p.ends_with("_pg_web")) {
        return Err(format!("port groups {pgs:?}"));
    }
    Ok(())
}

fn eventually(what: &str, dbs: &Dbs, f: impl Fn(&Dbs) -> Result<(), String>) {
    let mut last = String::new();
    let ok = wait_for(Duration::from_secs(20), || {
        sync(dbs);
        match f(dbs) {
            Ok(()) => true,
            Err(e) => {
                last = e;
                false
            }
        }
    });
    assert!(ok, "{what}: {last}");
}

fn unsupported_report(dbs: &Dbs, chassis: &str) -> Option<String> {
    let out = common::run(
        dbs.nbctl().args([
            "--if-exists",
            "get",
            "NB_Global",
            ".",
            &format!("external_ids:\"holdfast-unsupported-chassis:{chassis}\""),
        ]),
        Duration::from_secs(30),
    );
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

#[test]
fn incident_b_negotiation_through_the_daemon() {
    if !common::require("northd_features", TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dbs = Dbs::start(dir.path(), Backend::Ovsdb);
    // NB: two switches behind a router, port security, a port group with stateful ACLs
    // (allow-related and reject), a load balancer; and an unconnected switch.
    let nb = |args: &[&str]| run_ok(dbs.nbctl().args(args));
    nb(&[
        "ls-add", "sw0", "--", "ls-add", "sw1", "--", "ls-add", "island",
    ]);
    for (sw, i, net) in [
        ("sw0", 1, "10.0.0"),
        ("sw1", 1, "10.0.1"),
        ("sw0", 2, "10.0.0"),
    ] {
        let p = format!("{sw}-vm{i}");
        let addr = format!("0a:00:00:00:{}:0{i} {net}.1{i}", &net[5..]);
        nb(&["lsp-add", sw, &p, "--", "lsp-set-addresses", &p, &addr]);
        nb(&["lsp-set-port-security", &p, &addr]);
    }
    nb(&[
        "lsp-add",
        "island",
        "island-vm1",
        "--",
        "lsp-set-addresses",
        "island-vm1",
        "0a:00:00:00:99:01 10.9.0.11",
    ]);
    nb(&["lr-add", "lr0"]);
    for (sw, mac, net) in [
        ("sw0", "0a:00:00:00:ff:00", "10.0.0.1/24"),
        ("sw1", "0a:00:00:00:ff:01", "10.0.1.1/24"),
    ] {
        let lrp = format!("lr0-{sw}");
        let lsp = format!("{sw}-lr0");
        nb(&["lrp-add", "lr0", &lrp, mac, net]);
        nb(&[
            "lsp-add",
            sw,
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
        ]);
    }
    nb(&["pg-add", "pg_web", "sw0-vm1", "sw1-vm1"]);
    nb(&[
        "acl-add",
        "pg_web",
        "to-lport",
        "1002",
        "outport == @pg_web && ip4 && tcp.dst == 80",
        "allow-related",
    ]);
    nb(&[
        "acl-add",
        "pg_web",
        "to-lport",
        "1001",
        "outport == @pg_web && ip4 && tcp.dst == 22",
        "reject",
    ]);
    nb(&[
        "lb-add",
        "lb0",
        "10.0.0.100:80",
        "10.0.0.11:8080",
        "tcp",
        "--",
        "ls-lb-add",
        "sw0",
        "lb0",
    ]);
    // One chassis advertising only hf-1.
    run_ok(
        dbs.sbctl()
            .args(["chassis-add", "hv1", "geneve", "127.0.0.1"]),
    );
    set_features(&dbs, "hv1", "hf-1");
    let northd = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &[]);
    eventually("hf-1 chassis: the older form", &dbs, is_old);

    // Upgrade, downgrade.
    set_features(&dbs, "hv1", "hf-2");
    eventually(
        "hf-1 chassis upgraded to hf-2: the newer form",
        &dbs,
        is_new,
    );
    set_features(&dbs, "hv1", "hf-1");
    eventually("back to hf-1: the older form", &dbs, is_old);

    // ignore_chassis_features overrides; removing it restores the older form.
    nb(&[
        "set",
        "NB_Global",
        ".",
        "options:ignore_chassis_features=true",
    ]);
    eventually("ignore_chassis_features=true: the newer form", &dbs, is_new);
    nb(&[
        "remove",
        "NB_Global",
        ".",
        "options",
        "ignore_chassis_features",
    ]);
    eventually(
        "ignore_chassis_features removed: the older form",
        &dbs,
        is_old,
    );

    // A chassis below hf-1 with a port bound on it.
    run_ok(
        dbs.sbctl()
            .args(["chassis-add", "old", "geneve", "127.0.0.2"]),
    );
    set_features(&dbs, "old", "addr-set,ct-nat");
    run_ok(dbs.sbctl().args(["lsp-bind", "sw0-vm2", "old"]));
    let ok = wait_for(Duration::from_secs(20), || {
        sync(&dbs);
        unsupported_report(&dbs, "old").is_some()
    });
    assert!(ok, "no NB_Global report for chassis old");
    let reason = unsupported_report(&dbs, "old").unwrap();
    assert!(reason.contains("hf-1"), "{reason}");
    let status = northd.appctl(&["status"]);
    assert!(
        status.contains("Chassis") && status.contains("old"),
        "status does not name the unsupported chassis: {status}"
    );
    let frozen_before: BTreeSet<SbFlow> = flows(&dbs)
        .into_iter()
        .filter(|f| f.datapath == "sw0" || f.datapath == "sw1" || f.datapath == "lr0")
        .collect();
    // An NB change on a frozen switch, and a new unconnected switch.
    nb(&[
        "acl-add",
        "sw0",
        "from-lport",
        "1500",
        "ip4 && udp.dst == 4789",
        "drop",
    ]);
    nb(&[
        "ls-add",
        "island2",
        "--",
        "lsp-add",
        "island2",
        "island2-vm1",
    ]);
    sync(&dbs);
    let after = flows(&dbs);
    let frozen_after: BTreeSet<SbFlow> = after
        .iter()
        .filter(|f| f.datapath == "sw0" || f.datapath == "sw1" || f.datapath == "lr0")
        .cloned()
        .collect();
    assert_eq!(
        frozen_before, frozen_after,
        "the datapaths chassis old runs must keep their flows"
    );
    assert!(
        after.iter().any(|f| f.datapath == "island2"),
        "a datapath the unsupported chassis does not run still gets its flows"
    );
    assert!(!after.iter().any(|f| f.m.contains("udp.dst == 4789")));

    // The chassis leaves: the report goes, the change reaches SB.
    run_ok(dbs.sbctl().args(["chassis-del", "old"]));
    let ok = wait_for(Duration::from_secs(20), || {
        sync(&dbs);
        unsupported_report(&dbs, "old").is_none()
            && flows(&dbs)
                .iter()
                .any(|f| f.datapath == "sw0" && f.m.contains("udp.dst == 4789"))
    });
    assert!(
        ok,
        "after chassis old left: report {:?}",
        unsupported_report(&dbs, "old")
    );
    is_old(&dbs).unwrap();
    drop(northd);
}

/// Bad NB rows written with real `ovn-nbctl` (through `create` where `ovn-nbctl`'s own
/// commands would refuse them) never wedge the daemon: `--wait=sb` returns, `status` lists one
/// diagnostic per bad row naming it, the rest of SB is written, and a port added afterwards
/// still gets its `Port_Binding`.
#[test]
fn bad_nb_rows_never_block_wait_sb() {
    if !common::require("northd_features", TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dbs = Dbs::start(dir.path(), Backend::Ovsdb);
    let nb = |args: &[&str]| run_ok(dbs.nbctl().args(args));
    nb(&[
        "ls-add",
        "sw0",
        "--",
        "lsp-add",
        "sw0",
        "vm1",
        "--",
        "lsp-set-addresses",
        "vm1",
        "0a:00:00:00:00:01 10.0.0.11",
    ]);
    nb(&[
        "lr-add",
        "lr0",
        "--",
        "lrp-add",
        "lr0",
        "lr0-sw0",
        "0a:00:00:00:ff:00",
        "10.0.0.1/24",
    ]);
    let sw0 = nb(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "Logical_Switch",
        "name=sw0",
    ])
    .trim()
    .to_string();
    let northd = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &[]);
    sync(&dbs);
    // One bad row per class.
    nb(&[
        "lsp-add",
        "sw0",
        "sw0-ghost",
        "--",
        "lsp-set-type",
        "sw0-ghost",
        "router",
        "--",
        "lsp-set-options",
        "sw0-ghost",
        "router-port=nowhere",
    ]);
    nb(&[
        "acl-add",
        "sw0",
        "from-lport",
        "1000",
        "ip4 && tcp.dst ==",
        "drop",
    ]);
    nb(&[
        "--",
        "--id=@n",
        "create",
        "NAT",
        "type=snat",
        "external_ip=\"172.16.0.300\"",
        "logical_ip=\"10.0.0.0/24\"",
        "--",
        "add",
        "Logical_Router",
        "lr0",
        "nat",
        "@n",
    ]);
    nb(&[
        "lrp-add",
        "lr0",
        "lr0-zz",
        "0a:00:00:00:ff:09",
        "10.0.0.129/25",
    ]);
    nb(&["create", "Logical_Switch", "name=sw0"]);
    // --wait=sb returns (with a timeout: a wedged northd fails here).
    run_ok(dbs.nbctl().args(["--timeout=20", "--wait=sb", "sync"]));
    let status = northd.appctl(&["status"]);
    for (table, name) in [
        ("Logical_Switch_Port", "sw0-ghost"),
        ("ACL", "from-lport of sw0"),
        ("NAT", "172.16.0.300"),
        ("Logical_Router_Port", "lr0-zz"),
        ("Logical_Switch", "sw0"),
    ] {
        let lines: Vec<&str> = status
            .lines()
            .filter(|l| l.trim_start().starts_with(&format!("{table} \"")) && l.contains(name))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{table} {name}: want one diagnostic line in:\n{status}"
        );
    }
    // The rest is there, and northd keeps working.
    nb(&[
        "lsp-add",
        &sw0,
        "vm2",
        "--",
        "lsp-set-addresses",
        "vm2",
        "0a:00:00:00:00:02 10.0.0.12",
    ]);
    run_ok(dbs.nbctl().args(["--timeout=20", "--wait=sb", "sync"]));
    let pbs =
        run_ok(
            dbs.sbctl()
                .args(["--bare", "--columns=logical_port", "list", "Port_Binding"]),
        );
    for p in ["vm1", "vm2", "lr0-sw0", "sw0-ghost"] {
        assert!(
            pbs.split_whitespace().any(|x| x == p),
            "no Port_Binding {p}: {pbs}"
        );
    }
    assert!(
        flows(&dbs)
            .iter()
            .any(|f| f.datapath == "sw0" && f.m.contains("0a:00:00:00:00:02"))
    );
    assert!(
        northd.status().starts_with("Status: active"),
        "{}",
        northd.status()
    );
}
