//! Load balancer templates end to end on one chassis: an NB with a template load balancer
//! (`^vip:^vport` → `^backends`) on a switch is compiled by holdfast northd, written into an
//! in-process SB with each chassis's `Chassis_Template_Var`, translated for that chassis
//! (which expands the variables in the flows and in `Load_Balancer.vips`), compiled and run:
//! a TCP SYN to the chassis's VIP reaches the backend that chassis's `^backends` names, with
//! the destination rewritten to it (sent to the clients' gateway router, which routes the
//! balanced packet back to the switch), and another chassis balances the same flows to its own
//! backend. A chassis without the variables reports the flows as per-flow errors.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use hf_conntrack::{Config, Conntrack};
use hf_controller::{Extra, TranslateOptions, translate_with};
use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};
use hf_ovsdb::{Database, Schema};
use hf_pipeline::example::frame;
use hf_pipeline::{Destination, Ingress, Outputs, Pipeline, Program};
use serde_json::{Value, json};
use uuid::Uuid;

fn db(schema: &str) -> Database {
    let text = std::fs::read_to_string(format!(
        "{}/../../schemas/{schema}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    Database::new(Arc::new(Schema::parse(&text).unwrap()), 7)
}

fn txn(db: &mut Database, ops: &[Value]) -> Vec<Value> {
    match execute(db, ops, &NoLocks) {
        TxnOutcome::Commit { results, delta } => {
            db.apply(&delta);
            results
        }
        other => panic!("transaction refused: {other:?}\n{ops:#?}"),
    }
}

const ROUTER_MAC: &str = "0a:00:00:00:00:ff";

const VM: [([u8; 6], Ipv4Addr); 3] = [
    ([0x0a, 0, 0, 0, 0, 1], Ipv4Addr::new(10, 0, 0, 11)),
    ([0x0a, 0, 0, 0, 0, 2], Ipv4Addr::new(10, 0, 0, 12)),
    ([0x0a, 0, 0, 0, 0, 3], Ipv4Addr::new(10, 0, 0, 13)),
];

/// Switch `sw0` with vm1..vm3 (requested on `chassis`) and template load balancer `tlb`.
fn nb(chassis: &str) -> NbSnapshot {
    let mut nb = db("ovn-nb.ovsschema");
    let mut ops = vec![json!({"op": "insert", "table": "NB_Global", "row": {}})];
    let mut ports = Vec::new();
    for (i, (mac, ip)) in VM.iter().enumerate() {
        let mac = mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":");
        let label = format!("p{i}");
        ops.push(
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": label,
            "row": {"name": format!("vm{}", i + 1), "addresses": format!("{mac} {ip}"),
                "options": ["map", [["requested-chassis", chassis]]]}}),
        );
        ports.push(json!(["named-uuid", label]));
    }
    ops.push(
        json!({"op": "insert", "table": "Load_Balancer", "uuid-name": "lb",
        "row": {"name": "tlb", "protocol": "tcp",
            "vips": ["map", [["^vip:^vport", "^backends"]]],
            "options": ["map", [["template", "true"], ["address-family", "ipv4"]]]}}),
    );
    // The clients' gateway: lr0, so a SYN to the VIP is sent to the router's MAC.
    ops.push(
        json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "lrp",
        "row": {"name": "lr0-sw0", "mac": ROUTER_MAC, "networks": ["set", ["10.0.0.1/24"]]}}),
    );
    ops.push(json!({"op": "insert", "table": "Logical_Router",
        "row": {"name": "lr0", "ports": ["set", [["named-uuid", "lrp"]]]}}));
    ops.push(
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "rp",
        "row": {"name": "sw0-lr0", "type": "router", "addresses": "router",
            "options": ["map", [["router-port", "lr0-sw0"]]]}}),
    );
    ports.push(json!(["named-uuid", "rp"]));
    ops.push(json!({"op": "insert", "table": "Logical_Switch",
        "row": {"name": "sw0", "ports": ["set", ports],
            "load_balancer": ["set", [["named-uuid", "lb"]]]}}));
    txn(&mut nb, &ops);
    NbSnapshot::from_db(&nb).unwrap()
}

/// The SB holdfast northd writes for [`nb`], with chassis hv1, hv2 and hv3 and the template
/// variables of hv1 (backends vm2:8080 and vm2:8081) and hv2 (vm3:8080); hv3 has none.
fn sb(chassis: &str) -> SbSnapshot {
    let c = hf_northd::compile(&nb(chassis), &hf_northd::Options::default());
    assert!(
        !c.diagnostics.iter().any(|d| d.table == "Load_Balancer"),
        "{:#?}",
        c.diagnostics
    );
    let mut sb = db("ovn-sb.ovsschema");
    let mut ids = HashMap::new();
    for (i, name) in ["hv1", "hv2", "hv3"].iter().enumerate() {
        let r = txn(
            &mut sb,
            &[
                json!({"op": "insert", "table": "Encap", "uuid-name": "e",
                "row": {"type": "geneve", "ip": format!("127.0.0.{}", i + 1), "chassis_name": name}}),
                json!({"op": "insert", "table": "Chassis",
                "row": {"name": name, "hostname": name, "encaps": ["set", [["named-uuid", "e"]]]}}),
            ],
        );
        let u: Uuid = r[1]["uuid"][1].as_str().unwrap().parse().unwrap();
        ids.insert(name.to_string(), u);
    }
    txn(&mut sb, &hf_northd::sync::insert_ops(&c.sb, &ids));
    let var = |chassis: &str, backends: String| {
        json!({"op": "insert", "table": "Chassis_Template_Var", "row": {"chassis": chassis,
            "variables": ["map", [["vip", "10.0.0.100"], ["vport", "80"],
                ["backends", backends]]]}})
    };
    txn(
        &mut sb,
        &[
            // A list of backends (two ports of vm2) on hv1, one backend on hv2.
            var("hv1", format!("{0}:8080,{0}:8081", VM[1].1)),
            var("hv2", format!("{}:8080", VM[2].1)),
        ],
    );
    SbSnapshot::from_db(&sb).unwrap()
}

/// A TCP SYN from vm1 to 10.0.0.100:80 on `chassis`: where it went as TCP (port name) and to
/// which address and port; and the translation's flow errors.
fn syn_on(chassis: &str) -> (Option<(String, Ipv4Addr, u16)>, usize) {
    let (went, errs, _) = syn_and_vips(chassis);
    (went, errs)
}

/// [`syn_on`], and whether the program knows 10.0.0.100:80 as a VIP of sw0 (the SB
/// `Load_Balancer` key `^vip:^vport` expanded for `ct_snat_to_vip`).
fn syn_and_vips(chassis: &str) -> (Option<(String, Ipv4Addr, u16)>, usize, bool) {
    let sb = sb(chassis);
    let t = translate_with(
        &sb,
        &TranslateOptions {
            chassis: Some(chassis.into()),
        },
        &Extra {
            only_needed: true,
            ..Extra::default()
        },
    );
    let pbs: Vec<_> = sb
        .port_binding()
        .values()
        .map(|p| (p.logical_port.clone(), p.requested_chassis, p.chassis))
        .collect();
    assert!(
        t.local_ports.contains_key("vm1"),
        "{chassis}: local ports {:?}, bindings {pbs:?}, {:#?}",
        t.local_ports,
        t.diagnostics
    );
    let (prog, errs) = Program::compile(&t.spec).unwrap();
    let mut pipe = Pipeline::new(prog);
    let mut ct = Conntrack::new(Config::default());
    let mut out = Outputs::default();
    // To the router's MAC: sw0 balances it (ls_in_lb), lr0 routes it back to the backend.
    let f = frame(
        (VM[0].0, VM[0].1, 40000),
        ([0x0a, 0, 0, 0, 0, 0xff], Ipv4Addr::new(10, 0, 0, 100), 80),
        hf_wire::tcp_flags::SYN,
        (1, 0),
        0,
    );
    pipe.process(
        &mut ct,
        Ingress::Local(t.local_ports["vm1"]),
        &f,
        Duration::from_secs(1),
        &mut out,
    )
    .unwrap();
    let names: HashMap<u32, &String> = t.local_ports.iter().map(|(n, i)| (*i, n)).collect();
    let went = out.iter().find_map(|(d, b)| {
        let Destination::Local(i) = d else {
            return None;
        };
        let p = hf_wire::parse(b, 0, 0)
            .ok()
            .filter(|p| p.key.ip_proto == 6)?;
        Some((names.get(&i)?.to_string(), p.key.ip4_dst, p.key.tp_dst))
    });
    let vip = t.spec.lb_vips.iter().any(|v| {
        v.datapath == "sw0"
            && v.ip == std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100))
            && v.port == 80
    });
    (went, errs.len(), vip)
}

#[test]
fn template_lb_balances_to_chassis_backends() {
    let (hv1, e1, vip1) = syn_and_vips("hv1");
    assert_eq!(e1, 0, "hv1 defines every variable");
    assert!(vip1, "hv1 knows the expanded VIP");
    assert!(
        matches!(&hv1, Some((p, ip, 8080 | 8081)) if p == "vm2" && *ip == VM[1].1),
        "hv1's ^backends is vm2:8080,vm2:8081: {hv1:?}"
    );
    let (hv2, e2) = syn_on("hv2");
    assert_eq!(e2, 0, "hv2 defines every variable");
    assert_eq!(
        hv2,
        Some(("vm3".to_string(), VM[2].1, 8080)),
        "hv2's ^backends is vm3:8080"
    );
    // hv3 has no Chassis_Template_Var: the VIP's flows do not compile there (per-flow errors,
    // as ovn-controller leaves them out), and the SYN reaches no backend (lr0 asks for the
    // VIP's MAC instead).
    let (hv3, e3, vip3) = syn_and_vips("hv3");
    assert!(!vip3, "hv3 cannot expand the VIP");
    assert!(e3 > 0, "unexpanded variables are per-flow errors on hv3");
    assert_eq!(hv3, None, "not balanced on hv3");
}
