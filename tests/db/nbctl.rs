//! Real `ovn-nbctl` (OVN 23.03) against `holdfast db` with holdfast's NB schema, and the same
//! script against real `ovsdb-server` with OVN's schema: the answers must agree, compared
//! canonically (UUIDs mapped to row names, lines sorted, the columns both schemas have).

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

const OVN_NB: &str = "/usr/share/ovn/ovn-nb.ovsschema";

/// The script: every command the issue names, building a small but complete topology.
fn script() -> Vec<Vec<&'static str>> {
    let s = |x: &'static str| x.split('|').collect::<Vec<_>>();
    vec![
        s("ls-add|sw0"),
        s("ls-add|sw1"),
        s("ls-add|ext"),
        s("lsp-add|sw0|sw0-p1"),
        s("lsp-set-addresses|sw0-p1|00:00:00:00:00:01 10.0.0.11"),
        s("lsp-set-port-security|sw0-p1|00:00:00:00:00:01 10.0.0.11"),
        s("lsp-add|sw0|sw0-p2"),
        s("lsp-set-addresses|sw0-p2|00:00:00:00:00:02 10.0.0.12 fd00::12|unknown"),
        s("lsp-set-options|sw0-p2|requested-chassis=hv1,hv2|activation-strategy=rarp"),
        s("lsp-add|sw1|sw1-p1"),
        s("lsp-set-addresses|sw1-p1|00:00:00:00:01:01 10.0.1.11"),
        s("lsp-add|ext|ext-localnet"),
        s("lsp-set-type|ext-localnet|localnet"),
        s("lsp-set-addresses|ext-localnet|unknown"),
        s("lsp-set-options|ext-localnet|network_name=phys"),
        s("lr-add|lr0"),
        s("lrp-add|lr0|lr0-sw0|00:00:00:00:ff:01|10.0.0.1/24|fd00::1/64"),
        s("lrp-add|lr0|lr0-sw1|00:00:00:00:ff:02|10.0.1.1/24"),
        s("lrp-add|lr0|lr0-ext|00:00:00:00:ff:03|172.16.0.1/24"),
        s("lrp-set-gateway-chassis|lr0-ext|hv1|20"),
        s("lrp-set-gateway-chassis|lr0-ext|hv2|10"),
        s(
            "lsp-add|sw0|sw0-lr0|--|lsp-set-type|sw0-lr0|router|--|lsp-set-addresses|sw0-lr0|router|--|lsp-set-options|sw0-lr0|router-port=lr0-sw0",
        ),
        s("lr-nat-add|lr0|snat|172.16.0.1|10.0.0.0/24"),
        s("lr-nat-add|lr0|dnat|172.16.0.10|10.0.0.11"),
        s("lr-nat-add|lr0|dnat_and_snat|172.16.0.20|10.0.1.11|sw1-p1|00:00:00:00:aa:01"),
        s("lr-route-add|lr0|0.0.0.0/0|172.16.0.254"),
        s("lr-route-add|lr0|192.168.0.0/16|10.0.1.100"),
        s("--ecmp|lr-route-add|lr0|10.9.0.0/16|10.0.1.101"),
        s("--ecmp|lr-route-add|lr0|10.9.0.0/16|10.0.1.102"),
        s("pg-add|pg0|sw0-p1|sw0-p2"),
        s("pg-set-ports|pg0|sw0-p1|sw1-p1"),
        s("acl-add|sw0|from-lport|1000|ip4.src == 10.0.0.11|allow-related"),
        s("acl-add|sw0|to-lport|900|ip4 && tcp.dst == 22|drop"),
        s("--type=port-group|acl-add|pg0|to-lport|1001|outport == @pg0 && ip4|allow-related"),
        s("--type=port-group|acl-add|pg0|from-lport|1002|inport == @pg0 && udp|reject"),
        s("lb-add|lb0|172.30.0.10:80|10.0.0.11:8080,10.0.1.11:8080|tcp"),
        s("lb-add|lb1|172.30.0.11:53|10.0.0.12:53|udp"),
        s("ls-lb-add|sw0|lb0"),
        s("ls-lb-add|sw1|lb1"),
        s("lr-lb-add|lr0|lb0"),
        s("create|Address_Set|name=as0|addresses=\"10.0.0.11\",\"10.0.0.12\""),
        s("create|Address_Set|name=as1|addresses=\"10.0.1.11\""),
        s("set|Logical_Switch|sw0|other_config:subnet=10.0.0.0/24"),
        s("set|Logical_Switch_Port|sw0-p1|external_ids:owner=test"),
        s("set|Logical_Router|lr0|options:lb_force_snat_ip=router_ip"),
        s("get|Logical_Switch|sw0|other_config:subnet"),
        s("get|Logical_Switch_Port|sw0-p1|addresses|port_security"),
        s("--columns=name,addresses|list|Address_Set"),
        s("list|Logical_Switch|sw0"),
        s("list|NAT"),
        s("list|Logical_Router_Static_Route"),
        s("find|Logical_Switch_Port|type=router"),
        s("--bare|--columns=name|find|Logical_Switch_Port|type=\"\""),
        s("destroy|Address_Set|as1"),
        s("ls-list"),
        s("lsp-list|sw0"),
        s("lr-list"),
        s("lrp-list|lr0"),
        s("lr-nat-list|lr0"),
        s("lr-route-list|lr0"),
        s("acl-list|sw0"),
        s("--type=port-group|acl-list|pg0"),
        s("lb-list"),
        s("ls-lb-list|sw0"),
        s("lr-lb-list|lr0"),
        s("lrp-get-gateway-chassis|lr0-ext"),
        s("lsp-get-addresses|sw0-p2"),
        s("lsp-get-port-security|sw0-p1"),
        s("lsp-get-options|sw0-p2"),
        s("lsp-get-type|ext-localnet"),
        // Errors must agree too.
        s("ls-add|sw0"),
        s("lsp-add|nosuch|p"),
        s("show"),
    ]
}

/// Map UUIDs of named rows to `Table:name`.
fn uuid_names(db: &str) -> HashMap<String, String> {
    let mut m = HashMap::new();
    for t in [
        "Logical_Switch",
        "Logical_Switch_Port",
        "Logical_Router",
        "Logical_Router_Port",
        "Load_Balancer",
        "Port_Group",
        "Address_Set",
        "Gateway_Chassis",
    ] {
        let out = run_ok(Command::new("ovn-nbctl").arg(format!("--db={db}")).args([
            "--bare",
            "--format=csv",
            "--data=bare",
            "--no-headings",
            "--columns=_uuid,name",
            "list",
            t,
        ]));
        for line in out.lines() {
            if let Some((u, n)) = line.split_once(',') {
                m.insert(u.to_string(), format!("{t}:{n}"));
            }
        }
    }
    m
}

/// Run the script; returns, per command, (exit status, stdout, stderr) with UUIDs mapped.
fn run_script(db: &str, hide: &BTreeSet<String>) -> Vec<(bool, Vec<String>, String)> {
    let mut raw = Vec::new();
    let mut names = HashMap::new();
    for (i, args) in script().iter().enumerate() {
        if args[0] == "destroy" {
            names.extend(uuid_names(db)); // before the row vanishes
        }
        let out = run(
            Command::new("ovn-nbctl")
                .arg(format!("--db={db}"))
                .arg("--timeout=20")
                .args(args),
            Duration::from_secs(30),
        );
        raw.push((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
        if i + 1 == script().len() {
            names.extend(uuid_names(db));
        }
    }
    raw.into_iter()
        .map(|(ok, out, err)| {
            let mut lines: Vec<String> = map_uuids(&out, &names)
                .lines()
                .filter(|l| {
                    // Drop `column : value` lines of columns only one schema has.
                    let key = l.split(':').next().unwrap_or("").trim();
                    !(l.contains(" : ") && hide.contains(key))
                })
                .map(sort_bracketed)
                .collect();
            lines.sort();
            (ok, lines, map_uuids(&err, &names))
        })
        .collect()
}

/// Sets of references print in UUID order, which differs between servers once UUIDs are mapped
/// to names: sort the elements of every innermost `[a, b, c]` list in a line.
fn sort_bracketed(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(a) = rest.find('[') {
        let Some(len) = rest[a + 1..].find(']') else {
            break;
        };
        let inner = &rest[a + 1..a + 1 + len];
        if inner.contains('[') {
            // Not innermost: copy the bracket and continue inside.
            out.push_str(&rest[..=a]);
            rest = &rest[a + 1..];
            continue;
        }
        // `show` separates some lists (gateway chassis) with bare spaces.
        let sep = if inner.contains(", ") || inner.contains('"') {
            ", "
        } else {
            " "
        };
        let mut items: Vec<&str> = inner.split(sep).collect();
        items.sort_unstable();
        out.push_str(&rest[..a]);
        out.push('[');
        out.push_str(&items.join(sep));
        out.push(']');
        rest = &rest[a + 2 + len..];
    }
    out.push_str(rest);
    out
}

fn columns(schema: &str) -> HashMap<String, BTreeSet<String>> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema).unwrap()).unwrap();
    v["tables"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(t, tv)| {
            (
                t.clone(),
                tv["columns"].as_object().unwrap().keys().cloned().collect(),
            )
        })
        .collect()
}

#[test]
fn ovn_nbctl_against_holdfast_matches_ovsdb_server() {
    if !require(
        "ovn_nbctl_against_holdfast_matches_ovsdb_server",
        &[
            "ovn-nbctl",
            "ovsdb-server",
            "ovsdb-tool",
            "ovsdb-client",
            OVN_NB,
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hf = HoldfastDb::start(dir.path(), &[("nb.db", &nb_schema())], &[]);
    let real = OvsdbServer::create(dir.path(), "real-nb", std::path::Path::new(OVN_NB)).unwrap();

    let ours = columns(nb_schema().to_str().unwrap());
    let theirs = columns(OVN_NB);
    // Columns only one side has (holdfast's documented extensions) are left out of the comparison.
    let mut hide = BTreeSet::new();
    for (t, cols) in &ours {
        for c in cols {
            if !theirs.get(t).is_some_and(|tc| tc.contains(c)) {
                hide.insert(c.clone());
            }
        }
    }
    assert!(
        hide.contains("priority") || hide.contains("match"),
        "the NAT extension columns exist"
    );

    // holdfast is driven over TCP, as an operator would (`--db=tcp:127.0.0.1:PORT`).
    let a = run_script(&hf.tcp, &hide);
    let b = run_script(&real.remote, &hide);
    let mut mismatches = Vec::new();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let cmd = script()[i].join(" ");
        if x.0 != y.0 || x.1 != y.1 {
            mismatches.push(format!("`ovn-nbctl {cmd}`:\n  holdfast ({}): {:#?}\n  ovsdb-server ({}): {:#?}\n  holdfast stderr: {}", x.0, x.1, y.0, y.1, x.2));
        }
        if !x.0 {
            // Both failed (checked above): the error text should say the same thing.
            let norm = |s: &str| s.replace("ovn-nbctl: ", "");
            assert_eq!(norm(&x.2), norm(&y.2), "error of `{cmd}`");
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} commands differ:\n{}",
        mismatches.len(),
        a.len(),
        mismatches.join("\n")
    );
    assert!(
        a.iter().filter(|r| r.0).count() >= script().len() - 2,
        "all but the two deliberate errors succeed"
    );

    // ovsdb-client dump of every table, restricted to the columns both schemas have.
    let names = uuid_names(&hf.tcp);
    let names_real = uuid_names(&real.remote);
    let mut compared = 0;
    for (t, cols) in &theirs {
        let Some(our_cols) = ours.get(t) else {
            continue;
        };
        let common: Vec<&String> = cols.iter().filter(|c| our_cols.contains(*c)).collect();
        let dump = |db: &str, names: &HashMap<String, String>| {
            let out = run_ok(
                Command::new("ovsdb-client")
                    .args([
                        "dump",
                        "--format=csv",
                        "--no-headings",
                        db,
                        "OVN_Northbound",
                        t,
                    ])
                    .args(&common),
            );
            let mut rows: Vec<String> =
                map_uuids(&out, names).lines().map(sort_bracketed).collect();
            rows.sort();
            rows
        };
        let x = dump(&hf.tcp, &names);
        let y = dump(&real.remote, &names_real);
        assert_eq!(x, y, "ovsdb-client dump of table {t} differs");
        compared += x.len();
    }
    assert!(
        compared > 30,
        "the dump compared {compared} rows: the script built a real topology"
    );
}
