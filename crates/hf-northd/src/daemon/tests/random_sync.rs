//! The sync's oracle: seeded random NB changes (switches, routers, router ports and their
//! networks, VIFs, ACLs, port groups, address sets, load balancers, NAT, routes) committed to
//! the in-memory NB while one northd follows; after every step, SB as the incremental compile
//! and the scoped diff left it must be what a full compile from scratch and a full diff want:
//! the full diff against it writes nothing. Broken dependency rules (test-only switches in
//! the incremental compiler and the core) must make it fail.

use std::collections::BTreeSet;

use super::*;
use crate::daemon::sbview::SbView;
use crate::incremental::Broken;
use crate::output::SbDesired;
use crate::sync::{SyncInput, diff_ops};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate_insert(table: &str, name: &str, col: &str, label: &str) -> Value {
    json!({"op": "mutate", "table": table, "where": [["name", "==", name]],
        "mutations": [[col, "insert", ["set", [["named-uuid", label]]]]]})
}

fn vif_ops(ls: &str, port: &str, addr: &str) -> Vec<Value> {
    let l = format!("p_{}", port.replace('-', "_"));
    vec![
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": l,
            "row": {"name": port, "addresses": addr, "port_security": addr}}),
        mutate_insert("Logical_Switch", ls, "ports", &l),
    ]
}

/// A router port on `lr` and its switch-side twin on `ls`.
fn link_ops(ls: &str, lr: &str, mac: &str, net: &str) -> Vec<Value> {
    let lrp = format!("{lr}-{ls}");
    let lsp = format!("{ls}-{lr}");
    let (a, b) = (
        format!("r_{}", lrp.replace('-', "_")),
        format!("s_{}", lsp.replace('-', "_")),
    );
    vec![
        json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": a,
            "row": {"name": lrp, "mac": mac, "networks": net}}),
        mutate_insert("Logical_Router", lr, "ports", &a),
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": b,
            "row": {"name": lsp, "type": "router", "addresses": "router",
                "options": ["map", [["router-port", lrp]]]}}),
        mutate_insert("Logical_Switch", ls, "ports", &b),
    ]
}

fn world(sim: &mut Sim) {
    let mut ops = vec![
        json!({"op": "insert", "table": "Logical_Router", "row": {"name": "lr0"}}),
        json!({"op": "insert", "table": "Logical_Router", "row": {"name": "lr1"}}),
        json!({"op": "insert", "table": "Address_Set", "row": {"name": "as1",
            "addresses": ["set", ["10.0.0.11", "10.0.1.11"]]}}),
    ];
    for k in 0..4 {
        ops.push(
            json!({"op": "insert", "table": "Logical_Switch", "row": {"name": format!("ls{k}")}}),
        );
    }
    sim.nb(Value::Array(ops));
    for k in 0..4 {
        let ls = format!("ls{k}");
        let lr = if k == 3 { "lr1" } else { "lr0" };
        sim.nb(Value::Array(link_ops(
            &ls,
            lr,
            &format!("0a:00:00:00:ff:{k:02x}"),
            &format!("10.0.{k}.1/24"),
        )));
        for j in 1..3 {
            sim.nb(Value::Array(vif_ops(
                &ls,
                &format!("{ls}-vm{j}"),
                &format!("0a:00:00:00:{k:02x}:{j:02x} 10.0.{k}.{}", 10 + j),
            )));
        }
    }
    // lr0 ↔ lr1.
    sim.nb(json!([
        {"op": "insert", "table": "Logical_Router_Port", "uuid-name": "a",
            "row": {"name": "lr0-lr1", "mac": "0a:00:00:00:fd:00", "networks": "192.168.255.1/30",
                "peer": "lr1-lr0"}},
        mutate_insert("Logical_Router", "lr0", "ports", "a"),
        {"op": "insert", "table": "Logical_Router_Port", "uuid-name": "b",
            "row": {"name": "lr1-lr0", "mac": "0a:00:00:00:fd:01", "networks": "192.168.255.2/30",
                "peer": "lr0-lr1"}},
        mutate_insert("Logical_Router", "lr1", "ports", "b"),
        {"op": "insert", "table": "Port_Group", "row": {"name": "pg1"}},
    ]));
}

fn uuid_of(nb: &NbSnapshot, table: &str, name: &str) -> Option<uuid::Uuid> {
    match table {
        "Logical_Switch_Port" => nb
            .logical_switch_port()
            .values()
            .find(|r| r.name == name)
            .map(|r| r.uuid),
        "Logical_Router_Port" => nb
            .logical_router_port()
            .values()
            .find(|r| r.name == name)
            .map(|r| r.uuid),
        _ => None,
    }
}

fn uref(u: uuid::Uuid) -> Value {
    json!(["uuid", u.to_string()])
}

/// One random change; returns what it did.
fn step(sim: &mut Sim, rng: &mut Rng, i: usize) -> String {
    let nb = sim.db_nb();
    let switches: Vec<String> = nb
        .logical_switch()
        .values()
        .map(|s| s.name.clone())
        .collect();
    let ls = switches[rng.below(switches.len())].clone();
    let lr = ["lr0", "lr1"][rng.below(2)];
    let vifs: Vec<(uuid::Uuid, String)> = nb
        .logical_switch_port()
        .values()
        .filter(|p| p.type_.is_empty())
        .map(|p| (p.uuid, p.name.clone()))
        .collect();
    let lrps: Vec<(uuid::Uuid, String)> = nb
        .logical_router_port()
        .values()
        .filter(|p| p.peer.is_none())
        .map(|p| (p.uuid, p.name.clone()))
        .collect();
    let net = 100 + i % 100;
    if i % 9 == 4 {
        return dynamic_step(sim, i);
    }
    // Every 40th step from the 6th: symmetric ECMP on lr0 as a gateway router.
    if i % 40 == 6 {
        return symmetric_ecmp(sim, i, true);
    }
    match rng.below(23) {
        0 | 1 => {
            let p = format!("{ls}-n{i}");
            let addr = format!(
                "0a:00:00:aa:{:02x}:{:02x} 10.0.{net}.{}",
                i / 256,
                i % 256,
                1 + i % 200
            );
            sim.nb(Value::Array(vif_ops(&ls, &p, &addr)));
            format!("add port {p}")
        }
        2 if !vifs.is_empty() => {
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            sim.nb(json!([
                {"op": "mutate", "table": "Logical_Switch", "where": [],
                    "mutations": [["ports", "delete", uref(u)]]},
                {"op": "delete", "table": "Logical_Switch_Port", "where": [["_uuid", "==", uref(u)]]},
            ]));
            format!("delete port {n}")
        }
        3 if !vifs.is_empty() => {
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            let a = format!("0a:00:00:bb:00:{:02x} 10.1.{net}.5", i % 256);
            sim.nb(json!([{"op": "update", "table": "Logical_Switch_Port",
                "where": [["_uuid", "==", uref(u)]], "row": {"addresses": a}}]));
            format!("readdress {n}")
        }
        4 => {
            sim.nb(json!([
                {"op": "insert", "table": "ACL", "uuid-name": "acl", "row": {"direction": "from-lport",
                    "priority": 1000 + i, "match": "ip4 && tcp.dst == 443 && ip4.src == $as1",
                    "action": "allow-related"}},
                mutate_insert("Logical_Switch", &ls, "acls", "acl"),
            ]));
            format!("ACL on {ls}")
        }
        5 => {
            let ps: Vec<Value> = vifs
                .iter()
                .filter(|_| rng.below(3) == 0)
                .map(|v| uref(v.0))
                .collect();
            let n = ps.len();
            let mut ops = vec![json!({"op": "update", "table": "Port_Group",
                "where": [["name", "==", "pg1"]], "row": {"ports": ["set", ps]}})];
            if rng.below(2) == 0 {
                ops.push(json!({"op": "insert", "table": "ACL", "uuid-name": "pacl",
                    "row": {"direction": "to-lport", "priority": 900 + i,
                        "match": "outport == @pg1 && ip4", "action": "drop"}}));
                ops.push(json!({"op": "mutate", "table": "Port_Group",
                    "where": [["name", "==", "pg1"]],
                    "mutations": [["acls", "insert", ["set", [["named-uuid", "pacl"]]]]]}));
            }
            sim.nb(Value::Array(ops));
            format!("pg1 = {n} ports")
        }
        6 => {
            let acls: Vec<uuid::Uuid> = nb.acl().keys().copied().collect();
            if acls.is_empty() {
                return "no ACL".into();
            }
            let a = acls[rng.below(acls.len())];
            sim.nb(json!([
                {"op": "mutate", "table": "Logical_Switch", "where": [],
                    "mutations": [["acls", "delete", uref(a)]]},
                {"op": "mutate", "table": "Port_Group", "where": [],
                    "mutations": [["acls", "delete", uref(a)]]},
                {"op": "delete", "table": "ACL", "where": [["_uuid", "==", uref(a)]]},
            ]));
            "delete ACL".into()
        }
        7 | 8 if !lrps.is_empty() => {
            // A router port's networks (or MAC) change: the router's own flows and its
            // neighbours' (ARP answers, resolution) change with it.
            let (u, n) = lrps[rng.below(lrps.len())].clone();
            let row = match rng.below(4) {
                0 => json!({"mac": format!("0a:00:00:dd:{:02x}:{:02x}", i / 256, i % 256)}),
                // A re-keyed port: ECMP symmetric reply flows name port keys.
                1 => {
                    json!({"options": ["map", [["requested-tnl-key", format!("{}", 100 + i % 50)]]]})
                }
                _ => {
                    json!({"networks": ["set", [format!("10.{}.{}.1/24", 20 + i / 256, i % 256)]]})
                }
            };
            sim.nb(json!([{"op": "update", "table": "Logical_Router_Port",
                "where": [["_uuid", "==", uref(u)]], "row": row}]));
            format!("router port {n} re-addressed")
        }
        9 => {
            sim.nb(json!([
                {"op": "insert", "table": "NAT", "uuid-name": "nat", "row": {"type": "dnat_and_snat",
                    "external_ip": format!("172.16.0.{}", 10 + i % 200),
                    "logical_ip": format!("10.0.0.{}", 20 + i % 200)}},
                mutate_insert("Logical_Router", lr, "nat", "nat"),
            ]));
            format!("NAT on {lr}")
        }
        10 if rng.below(3) == 0 => symmetric_ecmp(sim, i, rng.below(2) == 0),
        10 => {
            sim.nb(json!([
                {"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "rt",
                    "row": {"ip_prefix": format!("10.{}.0.0/16", 50 + i % 100), "nexthop": "192.168.255.2"}},
                mutate_insert("Logical_Router", lr, "static_routes", "rt"),
            ]));
            format!("route on {lr}")
        }
        11 => {
            let mut ops = vec![
                json!({"op": "insert", "table": "Load_Balancer", "uuid-name": "lb",
                    "row": {"name": format!("lb{i}"), "protocol": "tcp",
                        "vips": ["map", [[format!("10.200.{}.1:80", i % 200), "10.0.0.11:80"]]]}}),
                mutate_insert("Logical_Switch", &ls, "load_balancer", "lb"),
            ];
            if rng.below(2) == 0 {
                ops.push(mutate_insert("Logical_Router", lr, "load_balancer", "lb"));
            }
            sim.nb(Value::Array(ops));
            format!("LB on {ls}")
        }
        12 => {
            let s = format!("new{i}");
            sim.nb(json!([{"op": "insert", "table": "Logical_Switch", "row": {"name": s}}]));
            if rng.below(4) != 0 {
                sim.nb(Value::Array(link_ops(
                    &s,
                    lr,
                    &format!("0a:00:00:cc:{:02x}:{:02x}", i / 256, i % 256),
                    &format!("10.{}.{}.1/24", 150 + i / 256, i % 256),
                )));
                sim.nb(Value::Array(vif_ops(
                    &s,
                    &format!("{s}-vm"),
                    &format!(
                        "0a:00:00:ee:{:02x}:{:02x} 10.{}.{}.9",
                        i / 256,
                        i % 256,
                        150 + i / 256,
                        i % 256
                    ),
                )));
            }
            format!("switch {s}")
        }
        13 if ls.starts_with("new") => {
            // Its ports go with it (garbage collected); its router port stays, peerless.
            sim.nb(json!([{"op": "delete", "table": "Logical_Switch",
                "where": [["name", "==", ls]]}]));
            if let Some(u) = uuid_of(&nb, "Logical_Router_Port", &format!("{lr}-{ls}")) {
                sim.nb(json!([
                    {"op": "mutate", "table": "Logical_Router", "where": [],
                        "mutations": [["ports", "delete", uref(u)]]},
                ]));
            }
            format!("delete switch {ls}")
        }
        14 | 15 => {
            // The switch side of a router link goes alone (the router port stays).
            let links: Vec<(uuid::Uuid, String)> = nb
                .logical_switch_port()
                .values()
                .filter(|p| p.type_ == "router" && p.name.starts_with("new"))
                .map(|p| (p.uuid, p.name.clone()))
                .collect();
            if links.is_empty() {
                return "no link to cut".into();
            }
            let (u, n) = links[rng.below(links.len())].clone();
            sim.nb(json!([
                {"op": "mutate", "table": "Logical_Switch", "where": [],
                    "mutations": [["ports", "delete", uref(u)]]},
                {"op": "delete", "table": "Logical_Switch_Port", "where": [["_uuid", "==", uref(u)]]},
            ]));
            format!("unlink {n}")
        }
        17 | 18 if !vifs.is_empty() => {
            // A VIF's enabled flag, options or `unknown` address (multicast groups follow).
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            let row = match rng.below(4) {
                0 => json!({"enabled": false}),
                1 => json!({"enabled": true}),
                2 => json!({"options": ["map", [["mcast_flood", "true"]]]}),
                _ => json!({"addresses": format!("0a:00:00:bc:00:{:02x} unknown", i % 256)}),
            };
            sim.nb(json!([{"op": "update", "table": "Logical_Switch_Port",
                "where": [["_uuid", "==", uref(u)]], "row": row.clone()}]));
            format!("VIF {n} set {row}")
        }
        19 => {
            // Two VIFs, in one transaction or two committed before northd syncs, the second
            // named to sort before the first (keys go in name order: the first, not yet in
            // SB, takes the next key).
            let (a, b) = (format!("{ls}-z{i}"), format!("a{i}-{ls}"));
            let mut ops = vif_ops(&ls, &a, &format!("0a:00:00:ab:{:02x}:01", i % 256));
            let more = vif_ops(&ls, &b, &format!("0a:00:00:ab:{:02x}:02", i % 256));
            if rng.below(2) == 0 {
                ops.extend(more);
                sim.nb(Value::Array(ops));
            } else {
                sim.nb(Value::Array(ops));
                sim.nb(Value::Array(more));
            }
            format!("add ports {a}, {b}")
        }
        20 => {
            // A router with one port, or one of those removed.
            let old: Vec<String> = nb
                .logical_router()
                .values()
                .filter(|r| r.name.starts_with("lrn"))
                .map(|r| r.name.clone())
                .collect();
            if !old.is_empty() && rng.below(2) == 0 {
                let r = old[rng.below(old.len())].clone();
                sim.nb(json!([{"op": "delete", "table": "Logical_Router",
                    "where": [["name", "==", r]]}]));
                return format!("delete router {r}");
            }
            let r = format!("lrn{i}");
            sim.nb(json!([
                {"op": "insert", "table": "Logical_Router_Port", "uuid-name": "rp",
                    "row": {"name": format!("{r}-p"),
                        "mac": format!("0a:00:00:dc:{:02x}:{:02x}", i / 256, i % 256),
                        "networks": format!("10.{}.{}.1/24", 230 + i % 20, i % 256)}},
                {"op": "insert", "table": "Logical_Router",
                    "row": {"name": r, "ports": ["named-uuid", "rp"]}},
            ]));
            format!("router {r}")
        }
        16 => {
            // An ACL row edited alone (its holders' rows unchanged).
            let acls: Vec<uuid::Uuid> = nb.acl().keys().copied().collect();
            if acls.is_empty() {
                return "no ACL to edit".into();
            }
            let a = acls[rng.below(acls.len())];
            let row = if rng.below(2) == 0 {
                json!({"priority": 1500 + i})
            } else {
                let action = ["drop", "allow", "reject"][rng.below(3)];
                json!({ "action": action })
            };
            sim.nb(json!([{"op": "update", "table": "ACL",
                "where": [["_uuid", "==", uref(a)]], "row": row.clone()}]));
            format!("ACL edit {row}")
        }
        21 => {
            // A load balancer's VIPs edited, or the load balancer deleted.
            let lbs: Vec<uuid::Uuid> = nb.load_balancer().keys().copied().collect();
            if lbs.is_empty() {
                return "no LB to edit".into();
            }
            let l = lbs[rng.below(lbs.len())];
            if rng.below(3) == 0 {
                sim.nb(json!([
                    {"op": "mutate", "table": "Logical_Switch", "where": [],
                        "mutations": [["load_balancer", "delete", uref(l)]]},
                    {"op": "mutate", "table": "Logical_Router", "where": [],
                        "mutations": [["load_balancer", "delete", uref(l)]]},
                    {"op": "delete", "table": "Load_Balancer", "where": [["_uuid", "==", uref(l)]]},
                ]));
                return "LB deleted".into();
            }
            let vip = format!("10.201.{}.1:80", i % 200);
            sim.nb(json!([{"op": "update", "table": "Load_Balancer",
                "where": [["_uuid", "==", uref(l)]],
                "row": {"vips": ["map", [[vip, "10.0.0.12:80"]]]}}]));
            "LB edit vips".into()
        }
        _ => {
            let a: Vec<String> = (0..1 + rng.below(3))
                .map(|k| format!("10.0.{}.{}", k, 10 + rng.below(50)))
                .collect();
            sim.nb(json!([{"op": "update", "table": "Address_Set",
                "where": [["name", "==", "as1"]], "row": {"addresses": ["set", a]}}]));
            "address set".into()
        }
    }
}

/// ECMP routes with symmetric replies on lr0 (whose flows name its ports' tunnel keys), lr0
/// made a gateway router (`gw`) or a distributed one again.
fn symmetric_ecmp(sim: &mut Sim, i: usize, gw: bool) -> String {
    let prefix = format!("10.{}.0.0/16", 50 + i % 100);
    let sym = json!(["map", [["ecmp_symmetric_reply", "true"]]]);
    let opts = if gw {
        json!(["map", [["chassis", "hv1"]]])
    } else {
        json!(["map", []])
    };
    sim.nb(json!([
        {"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "rt",
            "row": {"ip_prefix": prefix, "nexthop": "192.168.255.2", "options": sym}},
        {"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "rt2",
            "row": {"ip_prefix": prefix, "nexthop": "10.0.0.254", "options": sym}},
        mutate_insert("Logical_Router", "lr0", "static_routes", "rt"),
        mutate_insert("Logical_Router", "lr0", "static_routes", "rt2"),
        {"op": "update", "table": "Logical_Router", "where": [["name", "==", "lr0"]],
            "row": {"options": opts}},
    ]));
    format!("symmetric ECMP on lr0 (gateway router: {gw})")
}

/// Every ninth step: dynamic addresses (a port asking for them, a switch's IPAM options
/// set, changed or removed); the daemon writes the assignments to NB before it compiles.
fn dynamic_step(sim: &mut Sim, i: usize) -> String {
    let k = (i / 9) % 4;
    let ls = format!("ls{k}");
    match (i / 9) % 6 {
        0 | 3 => {
            let p = format!("{ls}-d{i}");
            let addr = if i.is_multiple_of(2) {
                "dynamic".to_string()
            } else {
                format!("0a:00:00:cc:00:{:02x} dynamic", i % 256)
            };
            sim.nb(Value::Array(vif_ops(&ls, &p, &addr)));
            format!("add dynamic port {p}")
        }
        1 => {
            let oc = json!([
                "map",
                [
                    ["subnet", format!("10.0.{k}.0/24")],
                    ["exclude_ips", format!("10.0.{k}.2..10.0.{k}.{}", 3 + i % 7)]
                ]
            ]);
            sim.nb(json!([{"op": "update", "table": "Logical_Switch",
                "where": [["name", "==", ls]], "row": {"other_config": oc}}]));
            format!("subnet on {ls}")
        }
        2 => {
            let oc = json!(["map", [["ipv6_prefix", format!("fd00:{k}::")]]]);
            sim.nb(json!([{"op": "update", "table": "Logical_Switch",
                "where": [["name", "==", ls]], "row": {"other_config": oc}}]));
            format!("ipv6_prefix on {ls}")
        }
        4 => {
            sim.nb(json!([{"op": "update", "table": "Logical_Switch",
                "where": [["name", "==", ls]], "row": {"other_config": ["map", []]}}]));
            format!("no IPAM on {ls}")
        }
        _ => {
            // A VIF of the switch (static or dynamic) asks for dynamic addresses anew.
            let nb = sim.db_nb();
            let Some(p) = nb
                .logical_switch()
                .values()
                .find(|s| s.name == ls)
                .and_then(|s| {
                    s.ports
                        .iter()
                        .filter_map(|r| nb.logical_switch_port().get(&r.uuid()))
                        .find(|p| p.type_.is_empty())
                })
                .map(|p| p.uuid)
            else {
                return format!("no VIF on {ls}");
            };
            let a = format!("0a:00:00:dd:00:{:02x} dynamic", i % 256);
            sim.nb(json!([{"op": "update", "table": "Logical_Switch_Port",
                "where": [["_uuid", "==", uref(p)]], "row": {"addresses": a}}]));
            format!("readdress dynamic on {ls}")
        }
    }
}

/// The full diff of a compile from scratch against SB as node 0 sees it: what it would
/// write (empty when the incremental path left SB right).
fn full_diff_from_scratch(sim: &Sim) -> Vec<Value> {
    let nb = sim.db_nb();
    let view = sim.nodes[0].sb.model();
    // Negotiated with the chassis, as the daemon compiles (a bound chassis's features).
    let (opts, _) = super::core::negotiated_options(&nb, view);
    let c = crate::compile(&nb, &opts);
    let nb_cfg = nb.nb_global().values().next().map_or(0, |g| g.nb_cfg);
    let mut n = 0u128;
    let mut fresh = || {
        n += 1;
        uuid::Uuid::from_u128(n)
    };
    let (ops, _) = diff_ops(
        &SyncInput {
            desired: &c.sb,
            nb_cfg,
            scope: None,
        },
        view,
        &mut fresh,
    );
    ops
}

/// Runs `steps` random steps; the first step (and what it did) after which SB differs from
/// a fresh compile's full diff, if any.
fn run(seed: u64, steps: usize, broken: Option<Broken>) -> Result<(usize, u64, u64), String> {
    run_kinds(seed, steps, broken, &mut BTreeSet::new(), Start::Empty)
}

/// When northd starts: on the empty NB (the world arrives as changes, each classified), or
/// on the populated one (its first compile is the incremental compiler's full path with every
/// row in it, which the other start never runs).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    Empty,
    Populated,
}

/// The kind of a step, from what it did: its first two words.
fn kind(what: &str) -> String {
    what.split(' ').take(2).collect::<Vec<_>>().join(" ")
}

/// [`run`], also naming the kinds of step ([`kind`]) whose compile patched the topology and
/// tables rather than building them anew.
fn run_kinds(
    seed: u64,
    steps: usize,
    broken: Option<Broken>,
    patched_kinds: &mut BTreeSet<String>,
    start: Start,
) -> Result<(usize, u64, u64), String> {
    let mut sim = Sim::new(if start == Start::Empty { 1 } else { 0 });
    world(&mut sim);
    sim.run();
    if start == Start::Populated {
        sim.add_node(0);
        sim.run();
    }
    if let Some(b) = broken {
        sim.nodes[0].nd.break_for_test(b);
    }
    assert!(full_diff_from_scratch(&sim).is_empty(), "the cold sync");
    let mut rng = Rng(seed | 1);
    let mut dynamic_seen = 0;
    let mut ecmp_reply_seen = 0;
    for i in 0..steps {
        let before = sim.nodes[0].nd.stats().topo_patched;
        let what = step(&mut sim, &mut rng, i);
        if std::env::var("HF_SYNC_VERBOSE").is_ok() {
            eprintln!("step {i}: {what}");
        }
        sim.run();
        if sim.nodes[0].nd.stats().topo_patched > before {
            patched_kinds.insert(kind(&what));
        }
        check_up(&sim, seed, i, &what)?;
        dynamic_seen += sim
            .db_nb()
            .logical_switch_port()
            .values()
            .filter(|p| p.dynamic_addresses.is_some())
            .count();
        ecmp_reply_seen += sim
            .db_sb()
            .logical_flow()
            .values()
            .filter(|f| f.actions.contains("ct_mark.ecmp_reply_port"))
            .count();
        let ops = full_diff_from_scratch(&sim);
        if !ops.is_empty() {
            let shown: Vec<String> = ops.iter().take(4).map(|o| o.to_string()).collect();
            return Err(format!(
                "seed {seed} step {i} ({what}): SB differs from a full compile + full diff ({} ops):\n{}",
                ops.len(),
                shown.join("\n")
            ));
        }
    }
    // Dynamic addresses were assigned (by the daemon, before its compiles) along the way.
    assert!(
        steps < 40 || dynamic_seen > 0,
        "no port had dynamic addresses in {steps} steps"
    );
    // ECMP symmetric reply flows (which name router port keys) were there along the way.
    assert!(
        steps < 100 || ecmp_reply_seen > 0,
        "no ECMP symmetric reply flow in {steps} steps"
    );
    let s = sim.nodes[0].nd.stats();
    Ok((steps, s.scoped_diffs, s.topo_patched))
}

/// A controller's or a chassis's step: a random VIF bound to `hv1` and reported up or down,
/// or unbound, or `hv1` turned remote or back (its ports are then up once bound); or another
/// NB writer setting a port's `up`.
fn binding_step(sim: &mut Sim, rng: &mut Rng) -> String {
    let vifs: Vec<(uuid::Uuid, String)> = sim
        .db_nb()
        .logical_switch_port()
        .values()
        .filter(|p| p.type_.is_empty())
        .map(|p| (p.uuid, p.name.clone()))
        .collect();
    match rng.below(4) {
        // Another NB writer sets a port's `up` (northd puts it back).
        3 if !vifs.is_empty() => {
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            let up = rng.below(2) == 0;
            sim.nb(json!([{"op": "update", "table": "Logical_Switch_Port",
                "where": [["_uuid", "==", uref(u)]], "row": {"up": up}}]));
            format!("foreign up {up} {n}")
        }
        // A controller binds, reports up, unbinds (NB `up` follows), or the chassis turns
        // remote (its ports are up once bound).
        0 | 1 if !vifs.is_empty() => {
            let (_, n) = vifs[rng.below(vifs.len())].clone();
            let hv = sim.db_sb().chassis_by_name("hv1").map(|c| c.uuid);
            let hv = match hv {
                Some(u) => u,
                None => {
                    sim.sb(json!([
                        {"op": "insert", "table": "Encap", "uuid-name": "e",
                            "row": {"type": "geneve", "ip": "192.168.0.1", "chassis_name": "hv1"}},
                        {"op": "insert", "table": "Chassis",
                            "row": {"name": "hv1", "hostname": "hv1", "encaps": ["named-uuid", "e"],
                                // Every feature (a holdfast controller of this northd's
                                // level), so negotiation leaves the full compile as it is.
                                "other_config": ["map", [["holdfast-features", "hf-9"]]]}},
                    ]));
                    match sim.db_sb().chassis_by_name("hv1") {
                        Some(c) => c.uuid,
                        None => return "no chassis".into(),
                    }
                }
            };
            let (row, what) = match rng.below(3) {
                0 => (json!({"chassis": uref(hv), "up": true}), "bind up"),
                1 => (json!({"chassis": uref(hv), "up": false}), "bind down"),
                _ => (json!({"chassis": ["set", []], "up": false}), "bind none"),
            };
            sim.sb(json!([{"op": "update", "table": "Port_Binding",
                "where": [["logical_port", "==", n]], "row": row}]));
            format!("{what} {n}")
        }
        _ => {
            let remote = if rng.below(2) == 0 { "true" } else { "false" };
            sim.sb(
                json!([{"op": "update", "table": "Chassis", "where": [["name", "==", "hv1"]],
                "row": {"other_config": ["map", [["is-remote", remote]]]}}]),
            );
            format!("chassis remote {remote}")
        }
    }
}

/// NB's `up` as a pass over every port would write it, and the keys northd keeps between
/// compiles as made anew from the whole SB view: an error naming the step otherwise.
fn check_up(sim: &Sim, seed: u64, i: usize, what: &str) -> Result<(), String> {
    let view = sim.nodes[0].sb.model();
    let ups = super::core::nb_side(&sim.db_nb(), view, None).ups;
    if !ups.is_empty() {
        return Err(format!(
            "seed {seed} step {i} ({what}): {} ports' NB up is not what their bindings say",
            ups.len()
        ));
    }
    if let Some(kept) = sim.nodes[0].nd.kept_keys_for_test(view)
        && kept != compile_options(view).keys
    {
        return Err(format!(
            "seed {seed} step {i} ({what}): the kept keys differ from the SB view's"
        ));
    }
    Ok(())
}

#[test]
fn nb_up_follows_bindings_and_ports_over_random_changes() {
    // Ports added, renamed and deleted (the NB steps) among bindings, `up` reports and
    // `is-remote` flips (the SB steps); after each, northd's NB-side pass (which looks only
    // at the ports whose row or binding changed) must have left every port's `up` as a pass
    // over all of them would set it.
    let seed = seed();
    let mut sim = Sim::new(1);
    world(&mut sim);
    sim.run();
    let mut rng = Rng(seed | 1);
    let (mut sb_steps, mut up_changes) = (0, 0);
    for i in 0..150 {
        let what = if rng.below(2) == 0 {
            sb_steps += 1;
            binding_step(&mut sim, &mut rng)
        } else {
            step(&mut sim, &mut rng, i)
        };
        let before = sim.nodes[0].nd.stats().nb_commits;
        sim.run();
        up_changes += sim.nodes[0].nd.stats().nb_commits - before;
        check_up(&sim, seed, i, &what).unwrap_or_else(|e| panic!("{e}"));
    }
    // Not vacuous: bindings moved, and northd wrote NB for them.
    assert!(sb_steps > 50, "{sb_steps} binding steps");
    assert!(up_changes > 20, "northd wrote NB only {up_changes} times");
}

fn seed() -> u64 {
    std::env::var("HF_SYNC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_202)
}

#[test]
fn incremental_sync_equals_full_compile_and_full_diff_over_random_changes() {
    let steps: usize = std::env::var("HF_SYNC_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let mut kinds = BTreeSet::new();
    let (steps, scoped, patched) =
        run_kinds(seed(), steps, None, &mut kinds, Start::Empty).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{steps} steps, {scoped} scoped diffs, {patched} compiles patched the topology");
    eprintln!("kinds patched: {kinds:?}");
    // Every kind of change the fast path takes did take it at least once: VIFs, ACLs on
    // switches and port groups and their edits and deletions, port group membership, address
    // sets, switch-only load balancers.
    for k in [
        "add port",
        "readdress",
        "ACL on",
        "ACL edit",
        "delete ACL",
        "pg1 =",
        "address set",
        "LB edit",
    ] {
        assert!(
            kinds.iter().any(|x| x.starts_with(k)),
            "no {k:?} step patched the topology: {kinds:?}"
        );
    }
    // ... and the plain VIF fast path (topology and non-flow tables patched).
    assert!(
        patched as usize > steps / 8,
        "{patched} of {steps} compiles patched the topology"
    );
    // The oracle must have exercised the scoped diff, not only full ones.
    assert!(
        scoped as usize > steps / 2,
        "{scoped} of {steps} syncs were scoped"
    );
}

/// The same oracle with northd started on the populated NB: its cold compile (the
/// incremental compiler's full path) and every change after it equal a fresh compile.
#[test]
fn a_northd_started_on_a_populated_nb_equals_a_full_compile_over_random_changes() {
    let (steps, scoped, _) =
        run_kinds(seed() + 1, 60, None, &mut BTreeSet::new(), Start::Populated)
            .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        scoped as usize > steps / 2,
        "{scoped} of {steps} syncs were scoped"
    );
}

#[test]
fn a_router_port_change_that_does_not_rebuild_its_router_is_caught() {
    let e = run(seed(), 120, Some(Broken::RouterPortSeedsNothing))
        .expect_err("the oracle missed router flows left stale");
    eprintln!("caught, as it must be: {e}");
    assert!(e.contains("re-addressed"), "{e}");
}

#[test]
fn a_scope_without_port_bindings_is_caught() {
    let e = run(seed(), 120, Some(Broken::ScopeWithoutPorts))
        .expect_err("the oracle missed port bindings left out of the scope");
    eprintln!("caught, as it must be: {e}");
    assert!(e.contains("Port_Binding"), "{e}");
}

#[test]
fn a_router_port_change_taken_for_a_vifs_is_caught() {
    let e = run(seed(), 160, Some(Broken::VifChangesNoRouter))
        .expect_err("the oracle missed a router left stale by a switch-side link change");
    eprintln!("caught, as it must be: {e}");
    assert!(e.contains("unlink") || e.contains("delete switch"), "{e}");
}

#[test]
fn a_vif_patch_that_keeps_multicast_groups_is_caught() {
    let e = run(seed(), 120, Some(Broken::VifPatchNoMcast))
        .expect_err("the oracle missed multicast groups left stale by a VIF change");
    eprintln!("caught, as it must be: {e}");
    assert!(e.contains("Multicast_Group"), "{e}");
}

#[test]
fn an_acl_edit_that_seeds_no_switch_is_caught() {
    let e = run(seed(), 160, Some(Broken::AclSeedsNothing))
        .expect_err("the oracle missed a switch left stale by an ACL edit");
    eprintln!("caught, as it must be: {e}");
    assert!(e.contains("ACL edit"), "{e}");
}

#[test]
fn an_index_patch_that_keeps_address_sets_is_caught() {
    let e = run(seed(), 160, Some(Broken::IndexPatchKeepsAddressSets))
        .expect_err("the oracle missed address sets left stale by the fast path");
    eprintln!("caught, as it must be: {e}");
    assert!(e.contains("Address_Set"), "{e}");
}

/// The row an operation of the tree form writes: an insert's `uuid`, an update's or a
/// delete's `_uuid ==` condition.
fn tree_op_row(op: &Value) -> Option<uuid::Uuid> {
    let text = match op.get("op").and_then(Value::as_str)? {
        "insert" => op.get("uuid")?.as_str()?,
        "update" | "delete" => op.get("where")?.get(0)?.get(2)?.get(1)?.as_str()?,
        _ => return None,
    };
    text.parse().ok()
}

/// The sync the daemon sends is JSON text written straight from the rows
/// (`diff_ops_text`); the tree form (`diff_ops`, the old encoder) is the reference. Over
/// random NB changes, against an empty SB (a cold start: every row inserted) and against SB
/// as a step left it with the desired state of before the step (inserts, updates and
/// deletes), the text parses to the same operations, and names the rows they write.
#[test]
fn the_text_sync_equals_the_tree_sync_over_random_changes() {
    let mut sim = Sim::new(1);
    world(&mut sim);
    sim.run();
    let mut rng = Rng(seed() ^ 0x7e47);
    let (mut compared, mut updates, mut deletes) = (0, 0, 0);
    let mut check = |desired: &SbDesired, view: &SbView, what: &str| {
        let input = SyncInput {
            desired,
            nb_cfg: 7,
            scope: None,
        };
        let mut n = 0u128;
        let (tree, tree_stats) = diff_ops(&input, view, &mut || {
            n += 1;
            uuid::Uuid::from_u128(n)
        });
        let mut n = 0u128;
        let (text, text_stats) = crate::sync::diff_ops_text(&input, view, &mut || {
            n += 1;
            uuid::Uuid::from_u128(n)
        });
        assert_eq!(tree_stats, text_stats, "{what}");
        assert_eq!(text.ops.len(), tree.len(), "{what}");
        let parsed = text.ops.to_values().expect("the text is JSON");
        for (i, (a, b)) in parsed.iter().zip(&tree).enumerate() {
            assert_eq!(a, b, "{what}: operation {i}");
        }
        let rows: Vec<uuid::Uuid> = tree.iter().filter_map(tree_op_row).collect();
        assert_eq!(text.rows, rows, "{what}: the rows written");
        compared += tree.len();
        updates += tree.iter().filter(|o| o["op"] == "update").count();
        deletes += tree.iter().filter(|o| o["op"] == "delete").count();
    };
    for i in 0..40 {
        let before = {
            let view = sim.nodes[0].sb.model();
            crate::compile(&sim.db_nb(), &compile_options(view)).sb
        };
        let what = step(&mut sim, &mut rng, i);
        sim.run();
        let view = sim.nodes[0].sb.model();
        check(&before, view, &format!("step {i} ({what}) undone"));
        if i % 10 == 0 {
            let now = crate::compile(&sim.db_nb(), &compile_options(view)).sb;
            check(&now, &SbView::default(), &format!("step {i} ({what}) cold"));
        }
    }
    // Not vacuous: inserts, updates and deletes were compared.
    assert!(compared > 1000, "{compared} operations compared");
    assert!(
        updates > 10 && deletes > 10,
        "{updates} updates, {deletes} deletes"
    );
}
