//! Unit tests of the tricky router parts: route priorities and ECMP, NAT with the 24.09
//! `match`/`priority` extension, allowed/exempted external IPs, distributed NAT, and the
//! diagnostics of bad rows. Flows are checked by printing their typed trees and parsing the
//! text back with hf-expr (what a chassis would read), compared with the text OVN writes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use crate::diag::Diags;
use crate::flow::{Flow, Flows};
use crate::stage::Stage;
use crate::topo::{Keys, Topo};

/// Builds an NB from `(table, uuid-name, row)` triples; `["named-uuid", n]` refer to rows.
fn nb(rows: &[(&str, &str, Value)]) -> hf_model::NbSnapshot {
    let id =
        |n: &str| uuid::Uuid::from_u128(crate::flow::fnv1a64(n.as_bytes()) as u128 | (1 << 100));
    fn fix(v: &Value, id: &dyn Fn(&str) -> uuid::Uuid) -> Value {
        match v {
            Value::Array(a) if a.len() == 2 && a[0] == "named-uuid" => {
                json!(["uuid", id(a[1].as_str().unwrap()).to_string()])
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| fix(x, id)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), fix(x, id))).collect())
            }
            x => x.clone(),
        }
    }
    let mut upd = serde_json::Map::new();
    for (t, n, row) in rows {
        let e = upd.entry(t.to_string()).or_insert_with(|| json!({}));
        e.as_object_mut()
            .unwrap()
            .insert(id(n).to_string(), json!({ "insert": fix(row, &id) }));
    }
    let mut s = hf_model::NbSnapshot::new();
    let d = s.apply_updates2(&Value::Object(upd)).expect("valid NB");
    if s.logical_router().is_empty() {
        s.apply(&d);
    }
    s
}

fn set(names: &[&str]) -> Value {
    json!([
        "set",
        names
            .iter()
            .map(|n| json!(["named-uuid", n]))
            .collect::<Vec<_>>()
    ])
}

fn compile(nb: &hf_model::NbSnapshot) -> (Vec<Flow>, Diags) {
    let mut diags = Diags::default();
    let topo = Topo::build(nb, &Keys::default(), hf_expr::FeatureSet::all(), &mut diags);
    let mut out = Flows::default();
    let dp = *topo.dp_by_name.get("lr0").expect("lr0");
    super::build(&topo, dp, &mut out, &mut diags);
    (out.flows, diags)
}

/// Normalised text of a match as a chassis parses it.
fn norm(m: &str) -> String {
    hf_expr::parse_match(hf_expr::symbols::SymbolTable::shared(), m)
        .unwrap_or_else(|e| panic!("{m}: {e}"))
        .to_string()
}

/// The flows of `stage` as (priority, parsed match, actions text).
fn of(flows: &[Flow], stage: Stage) -> Vec<(u16, String, String)> {
    flows
        .iter()
        .filter(|f| f.stage == stage)
        .map(|f| {
            (
                f.priority,
                norm(&f.matches.to_string()),
                hf_expr::printer::actions_to_string(&f.actions),
            )
        })
        .collect()
}

fn has(flows: &[(u16, String, String)], prio: u16, m: &str, a: &str) {
    let m = norm(m);
    let a = hf_expr::printer::actions_to_string(
        &hf_expr::parse_actions(hf_expr::symbols::SymbolTable::shared(), a).unwrap(),
    );
    assert!(
        flows
            .iter()
            .any(|(p, fm, fa)| *p == prio && *fm == m && *fa == a),
        "no flow {prio} {m} | {a} among:\n{}",
        flows
            .iter()
            .map(|(p, m, a)| format!("  {p} {m} | {a}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn base(extra: Vec<(&'static str, &'static str, Value)>, lr_extra: Value) -> hf_model::NbSnapshot {
    let mut lr = json!({"name": "lr0", "ports": set(&["p-in", "p-ext"])});
    if let (Some(o), Some(x)) = (lr.as_object_mut(), lr_extra.as_object()) {
        for (k, v) in x {
            o.insert(k.clone(), v.clone());
        }
    }
    let mut rows = vec![
        ("Logical_Router", "lr0", lr),
        (
            "Logical_Router_Port",
            "p-in",
            json!({"name": "lr0-in", "mac": "02:00:00:00:00:01", "networks": "10.0.0.1/24"}),
        ),
        (
            "Logical_Router_Port",
            "p-ext",
            json!({"name": "lr0-ext", "mac": "02:00:00:00:ff:01", "networks": "172.16.0.1/24"}),
        ),
    ];
    rows.extend(extra);
    nb(&rows)
}

#[test]
fn routes_take_ovn_23_03_priorities_and_ecmp_groups() {
    let nb = base(
        vec![
            (
                "Logical_Router_Static_Route",
                "r1",
                json!({"ip_prefix": "0.0.0.0/0", "nexthop": "172.16.0.254"}),
            ),
            (
                "Logical_Router_Static_Route",
                "r2",
                json!({"ip_prefix": "203.0.113.0/24", "nexthop": "172.16.0.251"}),
            ),
            (
                "Logical_Router_Static_Route",
                "r3",
                json!({"ip_prefix": "203.0.113.0/24", "nexthop": "172.16.0.252"}),
            ),
            (
                "Logical_Router_Static_Route",
                "r4",
                json!({"ip_prefix": "10.9.0.0/16", "nexthop": "172.16.0.250", "policy": "src-ip"}),
            ),
            (
                "Logical_Router_Static_Route",
                "bad",
                json!({"ip_prefix": "192.0.2.0/24", "nexthop": "198.51.100.1"}),
            ),
        ],
        json!({"static_routes": set(&["r1", "r2", "r3", "r4", "bad"])}),
    );
    let (flows, diags) = compile(&nb);
    let rt = of(&flows, Stage::LrInIpRouting);
    has(
        &rt,
        74,
        "ip4.dst == 10.0.0.0/24",
        "ip.ttl--; reg8[0..15] = 0; reg0 = ip4.dst; reg1 = 10.0.0.1; eth.src = 02:00:00:00:00:01; outport = \"lr0-in\"; flags.loopback = 1; next;",
    );
    has(
        &rt,
        194,
        "inport == \"lr0-in\" && ip6.dst == fe80::/64",
        "ip.ttl--; reg8[0..15] = 0; xxreg0 = ip6.dst; xxreg1 = fe80::ff:fe00:1; eth.src = 02:00:00:00:00:01; outport = \"lr0-in\"; flags.loopback = 1; next;",
    );
    has(
        &rt,
        1,
        "reg7 == 0 && ip4.dst == 0.0.0.0/0",
        "ip.ttl--; reg8[0..15] = 0; reg0 = 172.16.0.254; reg1 = 172.16.0.1; eth.src = 02:00:00:00:ff:01; outport = \"lr0-ext\"; flags.loopback = 1; next;",
    );
    has(
        &rt,
        73,
        "reg7 == 0 && ip4.dst == 203.0.113.0/24",
        "ip.ttl--; flags.loopback = 1; reg8[0..15] = 1; reg8[16..31] = select(1, 2);",
    );
    // A source route: plen * 3, no route table match in the main table.
    has(
        &rt,
        48,
        "ip4.src == 10.9.0.0/16",
        "ip.ttl--; reg8[0..15] = 0; reg0 = 172.16.0.250; reg1 = 172.16.0.1; eth.src = 02:00:00:00:ff:01; outport = \"lr0-ext\"; flags.loopback = 1; next;",
    );
    let ecmp = of(&flows, Stage::LrInIpRoutingEcmp);
    has(
        &ecmp,
        100,
        "reg8[0..15] == 1 && reg8[16..31] == 1",
        "reg0 = 172.16.0.251; reg1 = 172.16.0.1; eth.src = 02:00:00:00:ff:01; outport = \"lr0-ext\"; next;",
    );
    has(
        &ecmp,
        100,
        "reg8[0..15] == 1 && reg8[16..31] == 2",
        "reg0 = 172.16.0.252; reg1 = 172.16.0.1; eth.src = 02:00:00:00:ff:01; outport = \"lr0-ext\"; next;",
    );
    has(&ecmp, 150, "reg8[0..15] == 0", "next;");
    // The unreachable route is a diagnostic and has no flow.
    assert!(rt.iter().all(|(_, m, _)| !m.contains("192.0.2.0")));
    let d: Vec<String> = diags.0.iter().map(|d| d.to_string()).collect();
    assert!(
        d.iter().any(|d| d.contains("Logical_Router_Static_Route")
            && d.contains("192.0.2.0/24 via 198.51.100.1")
            && d.contains("not reachable")),
        "{d:?}"
    );
    assert_eq!(super::routing::route_priority(32, false, true), 98);
    assert_eq!(super::routing::route_priority(128, false, false), 385);
}

#[test]
fn nat_match_and_priority_follow_ovn_24_09() {
    // Gateway router; two SNATs of the same logical network told apart by destination.
    let nb = base(
        vec![
            (
                "NAT",
                "n1",
                json!({"type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.10", "match": "ip4.dst == 192.0.2.0/24", "priority": 5}),
            ),
            (
                "NAT",
                "n2",
                json!({"type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.11", "match": "ip4.dst == 198.51.100.0/24", "priority": 7}),
            ),
            (
                "NAT",
                "n3",
                json!({"type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.12"}),
            ),
            (
                "NAT",
                "n4",
                json!({"type": "dnat_and_snat", "logical_ip": "10.0.0.5", "external_ip": "172.16.0.20", "match": "tcp", "priority": 2}),
            ),
        ],
        json!({"nat": set(&["n1", "n2", "n3", "n4"]), "options": ["map", [["chassis", "gw1"]]]}),
    );
    let (flows, diags) = compile(&nb);
    assert!(diags.0.is_empty(), "{:?}", diags.0);
    let snat = of(&flows, Stage::LrOutSnat);
    has(
        &snat,
        305,
        "ip && ip4.src == 10.0.0.0/24 && ip4.dst == 192.0.2.0/24 && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.10);",
    );
    has(
        &snat,
        307,
        "ip && ip4.src == 10.0.0.0/24 && ip4.dst == 198.51.100.0/24 && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.11);",
    );
    // Without a match: 23.03's prefix ordering, below every matched row.
    has(
        &snat,
        25,
        "ip && ip4.src == 10.0.0.0/24 && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.12);",
    );
    has(
        &snat,
        302,
        "ip && ip4.src == 10.0.0.5 && tcp && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.20);",
    );
    let dnat = of(&flows, Stage::LrInDnat);
    has(
        &dnat,
        302,
        "ip && ip4.dst == 172.16.0.20 && tcp",
        "flags.loopback = 1; ct_dnat(10.0.0.5);",
    );
    let unsnat = of(&flows, Stage::LrInUnsnat);
    has(&unsnat, 90, "ip && ip4.dst == 172.16.0.10", "ct_snat;");
}

#[test]
fn allowed_and_exempted_ext_ips_scope_nat() {
    let nb = base(
        vec![
            (
                "Address_Set",
                "a1",
                json!({"name": "allowed1", "addresses": ["set", ["192.0.2.1"]]}),
            ),
            (
                "Address_Set",
                "e1",
                json!({"name": "exempt1", "addresses": ["set", ["192.0.2.2"]]}),
            ),
            (
                "NAT",
                "n1",
                json!({"type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.10", "allowed_ext_ips": ["named-uuid", "a1"]}),
            ),
            (
                "NAT",
                "n2",
                json!({"type": "dnat_and_snat", "logical_ip": "10.0.0.5", "external_ip": "172.16.0.20", "exempted_ext_ips": ["named-uuid", "e1"]}),
            ),
        ],
        json!({"nat": set(&["n1", "n2"]), "options": ["map", [["chassis", "gw1"]]]}),
    );
    let (flows, diags) = compile(&nb);
    assert!(diags.0.is_empty(), "{:?}", diags.0);
    let snat = of(&flows, Stage::LrOutSnat);
    has(
        &snat,
        25,
        "ip && ip4.src == 10.0.0.0/24 && ip4.dst == $allowed1 && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.10);",
    );
    has(
        &snat,
        33,
        "ip && ip4.src == 10.0.0.5 && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.20);",
    );
    has(
        &snat,
        35,
        "ip && ip4.src == 10.0.0.5 && ip4.dst == $exempt1",
        "next;",
    );
    let dnat = of(&flows, Stage::LrInDnat);
    has(
        &dnat,
        102,
        "ip && ip4.dst == 172.16.0.20 && ip4.src == $exempt1",
        "next;",
    );
    has(
        &dnat,
        100,
        "ip && ip4.dst == 172.16.0.20",
        "flags.loopback = 1; ct_dnat(10.0.0.5);",
    );
}

#[test]
fn distributed_nat_runs_on_the_logical_ports_chassis() {
    let nb = base(
        vec![
            (
                "Gateway_Chassis",
                "gc",
                json!({"name": "lr0-ext-gw1", "chassis_name": "gw1", "priority": 20}),
            ),
            (
                "Logical_Switch",
                "ls",
                json!({"name": "sw", "ports": set(&["vm"])}),
            ),
            (
                "Logical_Switch_Port",
                "vm",
                json!({"name": "vm1", "addresses": "02:00:00:00:00:10 10.0.0.5"}),
            ),
            (
                "NAT",
                "n1",
                json!({"type": "dnat_and_snat", "logical_ip": "10.0.0.5", "external_ip": "172.16.0.20", "logical_port": "vm1", "external_mac": "02:00:00:00:ee:01"}),
            ),
        ],
        json!({"nat": set(&["n1"])}),
    );
    // The DGP needs its gateway chassis: patch p-ext.
    let mut nb = nb;
    let p = nb
        .logical_router_port()
        .values()
        .find(|p| p.name == "lr0-ext")
        .unwrap()
        .uuid;
    let gc = nb.gateway_chassis().keys().next().copied().unwrap();
    nb.apply_updates2(&json!({"Logical_Router_Port": {p.to_string(): {"modify": {"gateway_chassis": ["uuid", gc.to_string()]}}}})).unwrap();
    let (flows, diags) = compile(&nb);
    assert!(diags.0.is_empty(), "{:?}", diags.0);
    has(
        &of(&flows, Stage::LrOutSnat),
        161,
        "ip && ip4.src == 10.0.0.5 && outport == \"lr0-ext\" && is_chassis_resident(\"vm1\")",
        "eth.src = 02:00:00:00:ee:01; ct_snat_in_czone(172.16.0.20);",
    );
    has(
        &of(&flows, Stage::LrInDnat),
        100,
        "ip && ip4.dst == 172.16.0.20 && inport == \"lr0-ext\"",
        "ct_dnat_in_czone(10.0.0.5);",
    );
    has(
        &of(&flows, Stage::LrInGwRedirect),
        100,
        "ip4.src == 10.0.0.5 && outport == \"lr0-ext\" && is_chassis_resident(\"vm1\")",
        "eth.src = 02:00:00:00:ee:01; reg1 = 172.16.0.20; next;",
    );
    has(
        &of(&flows, Stage::LrInGwRedirect),
        50,
        "outport == \"lr0-ext\"",
        "outport = \"cr-lr0-ext\"; next;",
    );
    has(
        &of(&flows, Stage::LrInAdmission),
        50,
        "eth.dst == 02:00:00:00:ff:01 && inport == \"lr0-ext\" && is_chassis_resident(\"cr-lr0-ext\")",
        "xreg0[0..47] = 02:00:00:00:ff:01; next;",
    );
}

#[test]
fn bad_rows_get_one_diagnostic_each_and_the_rest_compiles() {
    let nb = base(
        vec![
            (
                "Logical_Router_Port",
                "p-dup",
                json!({"name": "lr0-dup", "mac": "02:00:00:00:00:02", "networks": "10.0.0.2/16"}),
            ),
            (
                "NAT",
                "n1",
                json!({"type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.300"}),
            ),
            (
                "NAT",
                "n2",
                json!({"type": "snat", "logical_ip": "10.0.0.0/33", "external_ip": "172.16.0.10"}),
            ),
            (
                "NAT",
                "n3",
                json!({"type": "dnat_and_snat", "logical_ip": "10.0.0.5", "external_ip": "172.16.0.20", "logical_port": "nope", "external_mac": "02:00:00:00:ee:01"}),
            ),
            (
                "NAT",
                "ok",
                json!({"type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.30"}),
            ),
            (
                "Logical_Router_Policy",
                "pol",
                json!({"priority": 10, "match": "ip4.dst == ", "action": "drop"}),
            ),
            (
                "Logical_Router_Policy",
                "pol2",
                json!({"priority": 20, "match": "ip4.dst == 198.51.100.7", "action": "drop"}),
            ),
        ],
        json!({"nat": set(&["n1", "n2", "n3", "ok"]), "policies": set(&["pol", "pol2"]), "ports": set(&["p-in", "p-ext", "p-dup"]), "options": ["map", [["chassis", "gw1"]]]}),
    );
    let (flows, diags) = compile(&nb);
    let d: Vec<String> = diags.0.iter().map(|d| d.to_string()).collect();
    let count = |needle: &str| d.iter().filter(|x| x.contains(needle)).count();
    assert_eq!(count("172.16.0.300"), 1, "{d:?}");
    assert_eq!(count("10.0.0.0/33"), 1, "{d:?}");
    assert_eq!(count("logical_port \"nope\" does not exist"), 1, "{d:?}");
    assert_eq!(count("Logical_Router_Policy"), 1, "{d:?}");
    assert_eq!(count("overlap"), 1, "{d:?}");
    has(
        &of(&flows, Stage::LrOutSnat),
        25,
        "ip && ip4.src == 10.0.0.0/24 && (!ct.trk || !ct.rpl)",
        "ct_snat(172.16.0.30);",
    );
    has(
        &of(&flows, Stage::LrInPolicy),
        20,
        "ip4.dst == 198.51.100.7",
        "drop;",
    );
}

#[test]
fn stateless_nat_rewrites_addresses_without_conntrack() {
    let nb = base(
        vec![(
            "NAT",
            "n1",
            json!({"type": "dnat_and_snat", "logical_ip": "10.0.0.5", "external_ip": "172.16.0.20", "options": ["map", [["stateless", "true"]]]}),
        )],
        json!({"nat": set(&["n1"]), "options": ["map", [["chassis", "gw1"]]]}),
    );
    let (flows, diags) = compile(&nb);
    assert!(diags.0.is_empty(), "{:?}", diags.0);
    has(
        &of(&flows, Stage::LrInUnsnat),
        90,
        "ip && ip4.dst == 172.16.0.20",
        "next;",
    );
    has(
        &of(&flows, Stage::LrInDnat),
        100,
        "ip && ip4.dst == 172.16.0.20",
        "flags.loopback = 1; ip4.dst = 10.0.0.5; next;",
    );
    has(
        &of(&flows, Stage::LrOutSnat),
        33,
        "ip && ip4.src == 10.0.0.5",
        "ip4.src = 172.16.0.20; next;",
    );
    assert!(flows.iter().all(|f| {
        !hf_expr::printer::actions_to_string(&f.actions).contains("ct_snat(172.16.0.20)")
    }));
}

#[test]
fn gateway_mtu_checks_and_answers_too_big() {
    let nb = nb(&[
        (
            "Logical_Router",
            "lr0",
            json!({"name": "lr0", "ports": set(&["p-in", "p-ext"])}),
        ),
        (
            "Logical_Router_Port",
            "p-in",
            json!({"name": "lr0-in", "mac": "02:00:00:00:00:01", "networks": "10.0.0.1/24"}),
        ),
        (
            "Logical_Router_Port",
            "p-ext",
            json!({"name": "lr0-ext", "mac": "02:00:00:00:ff:01", "networks": "172.16.0.1/24", "options": ["map", [["gateway_mtu", "1400"]]]}),
        ),
    ]);
    let (flows, _) = compile(&nb);
    has(
        &of(&flows, Stage::LrInChkPktLen),
        50,
        "outport == \"lr0-ext\"",
        "reg9[1] = check_pkt_larger(1414); next;",
    );
    has(
        &of(&flows, Stage::LrInLargerPkts),
        150,
        "inport == \"lr0-in\" && outport == \"lr0-ext\" && ip4 && reg9[1] && reg9[0] == 0",
        "icmp4_error { reg9[0] = 1; reg9[1] = 0; eth.dst = 02:00:00:00:00:01; ip4.dst = ip4.src; ip4.src = 10.0.0.1; ip.ttl = 255; icmp4.type = 3; icmp4.code = 4; icmp4.frag_mtu = 1400; next(pipeline=ingress, table=0); };",
    );
    has(
        &of(&flows, Stage::LrInAdmission),
        50,
        "eth.mcast && inport == \"lr0-ext\"",
        "reg9[1] = check_pkt_larger(1414); xreg0[0..47] = 02:00:00:00:ff:01; next;",
    );
}

#[test]
fn a_disabled_router_has_no_pipeline() {
    let nb = base(vec![], json!({"enabled": false}));
    let (flows, _) = compile(&nb);
    assert!(flows.is_empty(), "{} flows", flows.len());
}

/// Development aid (ignored; run with `--release`): the router stages of the gen_topo-like
/// 500×40 topology (one distributed router with 500 ports, 40 VIFs behind each; a gateway
/// router with 500 SNATs) must take a small part of a second.
#[test]
#[ignore]
#[allow(clippy::disallowed_methods)] // a timing test reads the clock
fn big_router_compiles_fast() {
    let (n, p) = (500usize, 40usize);
    let mut rows: Vec<(String, String, Value)> = Vec::new();
    let mut lr_ports = Vec::new();
    for i in 0..n {
        let (a, b) = (1 + i / 256, i % 256);
        let mut lsps = vec![format!("sw{i}-r")];
        rows.push(("Logical_Switch_Port".into(), format!("sw{i}-r"), json!({"name": format!("ls{i}-lr0"), "type": "router", "addresses": "router", "options": ["map", [["router-port", format!("lr0-ls{i}")]]]})));
        for j in 0..p {
            rows.push(("Logical_Switch_Port".into(), format!("vm{i}-{j}"), json!({"name": format!("ls{i}-p{j}"), "addresses": format!("0a:00:{:02x}:{:02x}:00:{:02x} 10.{a}.{b}.{}", i >> 8, i & 255, j, 10 + j)})));
            lsps.push(format!("vm{i}-{j}"));
        }
        let refs: Vec<&str> = lsps.iter().map(String::as_str).collect();
        rows.push((
            "Logical_Switch".into(),
            format!("ls{i}"),
            json!({"name": format!("ls{i}"), "ports": set(&refs)}),
        ));
        rows.push(("Logical_Router_Port".into(), format!("lrp{i}"), json!({"name": format!("lr0-ls{i}"), "mac": format!("02:00:00:{:02x}:{:02x}:01", i >> 8, i & 255), "networks": format!("10.{a}.{b}.1/24")})));
        lr_ports.push(format!("lrp{i}"));
        rows.push(("NAT".into(), format!("nat{i}"), json!({"type": "snat", "logical_ip": format!("10.{a}.{b}.0/24"), "external_ip": "172.16.0.1"})));
    }
    rows.push((
        "Logical_Router_Static_Route".into(),
        "def".into(),
        json!({"ip_prefix": "0.0.0.0/0", "nexthop": "10.1.0.254"}),
    ));
    let refs: Vec<&str> = lr_ports.iter().map(String::as_str).collect();
    rows.push((
        "Logical_Router".into(),
        "lr0".into(),
        json!({"name": "lr0", "ports": set(&refs), "static_routes": set(&["def"])}),
    ));
    let nats: Vec<String> = (0..n).map(|i| format!("nat{i}")).collect();
    let nat_refs: Vec<&str> = nats.iter().map(String::as_str).collect();
    rows.push((
        "Logical_Router_Port".into(),
        "gwp".into(),
        json!({"name": "gw0-ext", "mac": "02:00:00:00:fe:01", "networks": "172.16.0.1/24"}),
    ));
    rows.push(("Logical_Router".into(), "gw0".into(), json!({"name": "gw0", "ports": set(&["gwp"]), "nat": set(&nat_refs), "options": ["map", [["chassis", "hv1"]]]})));
    let borrowed: Vec<(&str, &str, Value)> = rows
        .iter()
        .map(|(t, n, v)| (t.as_str(), n.as_str(), v.clone()))
        .collect();
    let nb = nb(&borrowed);
    let mut diags = Diags::default();
    let topo = Topo::build(
        &nb,
        &Keys::default(),
        hf_expr::FeatureSet::all(),
        &mut diags,
    );
    let t = std::time::Instant::now();
    let mut out = Flows::default();
    for name in ["lr0", "gw0"] {
        let dp = *topo.dp_by_name.get(name).expect("router");
        super::build(&topo, dp, &mut out, &mut diags);
    }
    let took = t.elapsed();
    eprintln!("router stages: {} flows in {took:?}", out.len());
    assert!(out.len() > n * p, "arp_resolve has an entry per VIF");
    assert!(
        took < std::time::Duration::from_millis(if cfg!(debug_assertions) { 5000 } else { 300 }),
        "{took:?}"
    );
}
