//! An in-process NB for hf-northd's tests: real OVSDB transactions (hf-ovsdb's executor, the
//! same code `holdfast db` runs) against holdfast's NB schema, read back as an [`NbSnapshot`].
//! Each helper is one transaction and returns the new row's UUID; a transaction the schema
//! refuses panics with the server's error (the test's NB is wrong, not northd).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use hf_model::NbSnapshot;
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};
use hf_ovsdb::{Database, Schema};
use serde_json::{Value, json};
use uuid::Uuid;

/// The NB under construction.
pub struct Nb {
    db: Database,
    /// When set, every committed transaction's change set is appended (as hf-model's delta,
    /// what a replica would see), for the incremental compiler's tests.
    pub record: Option<Vec<hf_model::NbDelta>>,
}

fn map(pairs: &[(&str, &str)]) -> Value {
    json!([
        "map",
        pairs.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

fn set(items: &[&str]) -> Value {
    json!(["set", items])
}

fn uuids(items: &[Uuid]) -> Value {
    json!([
        "set",
        items
            .iter()
            .map(|u| json!(["uuid", u.to_string()]))
            .collect::<Vec<_>>()
    ])
}

fn by_name(name: &str) -> Value {
    json!([["name", "==", name]])
}

impl Default for Nb {
    fn default() -> Self {
        Self::new()
    }
}

impl Nb {
    /// An empty NB with its `NB_Global` row.
    pub fn new() -> Self {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../schemas/ovn-nb.ovsschema"
        ))
        .expect("NB schema");
        let schema = Schema::parse(&text).expect("NB schema parses");
        let mut nb = Nb {
            db: Database::new(Arc::new(schema), 7),
            record: None,
        };
        nb.txn(vec![
            json!({"op": "insert", "table": "NB_Global", "row": {}}),
        ]);
        nb
    }

    /// Runs one transaction; returns the UUID the first insert made (nil when none).
    pub fn txn(&mut self, ops: Vec<Value>) -> Uuid {
        match execute(&mut self.db, &ops, &NoLocks) {
            TxnOutcome::Commit { results, delta } => {
                if let Some(r) = &mut self.record {
                    r.push(hf_model::NbDelta::from_txn(&self.db.schema, &delta).expect("NB delta"));
                }
                self.db.apply(&delta);
                results
                    .iter()
                    .find_map(|r| {
                        r.get("uuid")
                            .and_then(|u| u.get(1))
                            .and_then(|u| u.as_str())
                    })
                    .and_then(|u| u.parse().ok())
                    .unwrap_or_default()
            }
            other => panic!("NB transaction {ops:?} failed: {other:?}"),
        }
    }

    /// The NB as a snapshot.
    pub fn snapshot(&self) -> NbSnapshot {
        NbSnapshot::from_db(&self.db).expect("NB snapshot")
    }

    /// Sets `NB_Global.options:key=value`.
    pub fn global_option(&mut self, key: &str, value: &str) {
        self.txn(vec![json!({"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [["options", "delete", set(&[key])], ["options", "insert", map(&[(key, value)])]]})]);
    }

    /// A logical switch.
    pub fn ls(&mut self, name: &str) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "Logical_Switch", "row": {"name": name}}),
        ])
    }

    /// A logical switch port with columns given as JSON (`addresses`, `type`, `options`, ...).
    pub fn lsp_with(&mut self, ls: &str, name: &str, mut row: Value) -> Uuid {
        row["name"] = json!(name);
        self.txn(vec![
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p", "row": row}),
            json!({"op": "mutate", "table": "Logical_Switch", "where": by_name(ls),
                "mutations": [["ports", "insert", ["named-uuid", "p"]]]}),
        ])
    }

    /// A VIF with `addresses` (one entry) and, when `secure`, the same `port_security`.
    pub fn vif(&mut self, ls: &str, name: &str, addresses: &str, secure: bool) -> Uuid {
        let ps: &[&str] = if secure { &[addresses] } else { &[] };
        self.lsp_with(
            ls,
            name,
            json!({"addresses": set(&[addresses]), "port_security": set(ps)}),
        )
    }

    /// A logical router with `options`.
    pub fn lr(&mut self, name: &str, options: &[(&str, &str)]) -> Uuid {
        self.txn(vec![json!({"op": "insert", "table": "Logical_Router",
            "row": {"name": name, "options": map(options)}})])
    }

    /// A logical router port with `mac` and `networks`, and `peer` when given.
    pub fn lrp(
        &mut self,
        lr: &str,
        name: &str,
        mac: &str,
        networks: &[&str],
        peer: Option<&str>,
    ) -> Uuid {
        let mut row = json!({"name": name, "mac": mac, "networks": set(networks)});
        if let Some(p) = peer {
            row["peer"] = json!(p);
        }
        self.txn(vec![
            json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "p", "row": row}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["ports", "insert", ["named-uuid", "p"]]]}),
        ])
    }

    /// A gateway chassis on router port `lrp` (making it a distributed gateway port).
    pub fn gateway_chassis(&mut self, lrp: &str, chassis: &str, priority: i64) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "Gateway_Chassis", "uuid-name": "g",
                "row": {"name": format!("{lrp}-{chassis}"), "chassis_name": chassis, "priority": priority}}),
            json!({"op": "mutate", "table": "Logical_Router_Port", "where": by_name(lrp),
                "mutations": [["gateway_chassis", "insert", ["named-uuid", "g"]]]}),
        ])
    }

    /// Connects switch `ls` to router `lr` through a new router port `lrp` (and the switch
    /// port `<ls>-<lrp>` of type router, `addresses=router`).
    pub fn link(&mut self, ls: &str, lr: &str, lrp: &str, mac: &str, networks: &[&str]) -> Uuid {
        let u = self.lrp(lr, lrp, mac, networks, None);
        self.lsp_with(
            ls,
            &format!("{ls}-{lrp}"),
            json!({"type": "router", "addresses": set(&["router"]),
                "options": map(&[("router-port", lrp)])}),
        );
        u
    }

    /// An ACL on switch `ls`.
    pub fn acl_ls(&mut self, ls: &str, dir: &str, prio: i64, m: &str, action: &str) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "ACL", "uuid-name": "a",
                "row": {"direction": dir, "priority": prio, "match": m, "action": action}}),
            json!({"op": "mutate", "table": "Logical_Switch", "where": by_name(ls),
                "mutations": [["acls", "insert", ["named-uuid", "a"]]]}),
        ])
    }

    /// A port group of the given ports (by UUID).
    pub fn pg(&mut self, name: &str, ports: &[Uuid]) -> Uuid {
        self.txn(vec![json!({"op": "insert", "table": "Port_Group",
            "row": {"name": name, "ports": uuids(ports)}})])
    }

    /// An ACL on port group `pg`.
    pub fn acl_pg(&mut self, pg: &str, dir: &str, prio: i64, m: &str, action: &str) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "ACL", "uuid-name": "a",
                "row": {"direction": dir, "priority": prio, "match": m, "action": action}}),
            json!({"op": "mutate", "table": "Port_Group", "where": by_name(pg),
                "mutations": [["acls", "insert", ["named-uuid", "a"]]]}),
        ])
    }

    /// An address set.
    pub fn address_set(&mut self, name: &str, addrs: &[&str]) -> Uuid {
        self.txn(vec![json!({"op": "insert", "table": "Address_Set",
            "row": {"name": name, "addresses": set(addrs)}})])
    }

    /// A NAT row on router `lr` with extra columns (`logical_port`, `external_mac`, ...).
    pub fn nat_with(
        &mut self,
        lr: &str,
        kind: &str,
        external_ip: &str,
        logical_ip: &str,
        extra: Value,
    ) -> Uuid {
        let mut row = json!({"type": kind, "external_ip": external_ip, "logical_ip": logical_ip});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                row[k] = v;
            }
        }
        self.txn(vec![
            json!({"op": "insert", "table": "NAT", "uuid-name": "n", "row": row}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["nat", "insert", ["named-uuid", "n"]]]}),
        ])
    }

    /// A NAT row on router `lr`.
    pub fn nat(&mut self, lr: &str, kind: &str, external_ip: &str, logical_ip: &str) -> Uuid {
        self.nat_with(lr, kind, external_ip, logical_ip, json!({}))
    }

    /// A static route on router `lr`.
    pub fn route(&mut self, lr: &str, prefix: &str, nexthop: &str) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "r",
                "row": {"ip_prefix": prefix, "nexthop": nexthop}}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["static_routes", "insert", ["named-uuid", "r"]]]}),
        ])
    }

    /// A router policy on router `lr`.
    pub fn policy(&mut self, lr: &str, prio: i64, m: &str, action: &str) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "Logical_Router_Policy", "uuid-name": "r",
                "row": {"priority": prio, "match": m, "action": action}}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["policies", "insert", ["named-uuid", "r"]]]}),
        ])
    }

    /// A load balancer with `vips` attached to the switches and routers named.
    pub fn lb(&mut self, name: &str, vips: &[(&str, &str)], switches: &[&str], routers: &[&str]) {
        let mut ops = vec![
            json!({"op": "insert", "table": "Load_Balancer", "uuid-name": "lb",
            "row": {"name": name, "vips": map(vips), "protocol": "tcp"}}),
        ];
        for s in switches {
            ops.push(
                json!({"op": "mutate", "table": "Logical_Switch", "where": by_name(s),
                "mutations": [["load_balancer", "insert", ["named-uuid", "lb"]]]}),
            );
        }
        for r in routers {
            ops.push(
                json!({"op": "mutate", "table": "Logical_Router", "where": by_name(r),
                "mutations": [["load_balancer", "insert", ["named-uuid", "lb"]]]}),
            );
        }
        self.txn(ops);
    }

    /// Deletes the row `uuid` of `table` (and, for a child row, the parent's reference
    /// through `parent_col` of every `parent` row).
    pub fn delete(&mut self, table: &str, uuid: Uuid, parent: Option<(&str, &str)>) {
        let mut ops = Vec::new();
        if let Some((pt, col)) = parent {
            ops.push(json!({"op": "mutate", "table": pt, "where": [],
                "mutations": [[col, "delete", ["uuid", uuid.to_string()]]]}));
        }
        ops.push(json!({"op": "delete", "table": table,
            "where": [["_uuid", "==", ["uuid", uuid.to_string()]]]}));
        self.txn(ops);
    }

    /// Sets one column of the row `uuid` of `table`.
    pub fn set(&mut self, table: &str, uuid: Uuid, column: &str, value: Value) {
        self.txn(vec![json!({"op": "update", "table": table,
            "where": [["_uuid", "==", ["uuid", uuid.to_string()]]], "row": {column: value}})]);
    }
}

/// A generator-like topology (tests/trace_parity/topo.rs's features): two internal switches
/// with port-secured VIFs, a port group with stateful ACLs (allow-related, allow-stateless,
/// drop, reject) using address sets, a distributed router with a distributed gateway port on
/// two gateway chassis, an external switch with a localnet port, SNAT, DNAT, a distributed
/// floating IP, load balancers on a switch and on the router, a static route and a policy.
/// Returns the UUIDs of the VIFs by name.
pub fn generator_like(nb: &mut Nb) -> BTreeMap<String, Uuid> {
    let mut vifs = BTreeMap::new();
    for (s, net) in [("sw0", "10.0.0"), ("sw1", "10.0.1")] {
        nb.ls(s);
        for i in 1..=3 {
            let name = format!("{s}-vm{i}");
            let mac = format!("0a:00:00:00:{:02x}:{i:02x}", if s == "sw0" { 0 } else { 1 });
            let addr = format!("{mac} {net}.{} fd00:{}::{}", 10 + i, &net[5..], 10 + i);
            vifs.insert(name.clone(), nb.vif(s, &name, &addr, i != 3));
        }
    }
    nb.ls("ext");
    nb.lsp_with(
        "ext",
        "ext-localnet",
        serde_json::json!({"type": "localnet", "addresses": ["set", ["unknown"]],
            "options": ["map", [["network_name", "physnet"]]]}),
    );
    nb.lr("lr0", &[]);
    nb.link(
        "sw0",
        "lr0",
        "lr0-sw0",
        "0a:00:00:00:ff:00",
        &["10.0.0.1/24", "fd00:0::1/64"],
    );
    nb.link(
        "sw1",
        "lr0",
        "lr0-sw1",
        "0a:00:00:00:ff:01",
        &["10.0.1.1/24", "fd00:1::1/64"],
    );
    nb.link(
        "ext",
        "lr0",
        "lr0-ext",
        "0a:00:00:00:ff:02",
        &["172.16.0.1/24"],
    );
    nb.gateway_chassis("lr0-ext", "gw1", 20);
    nb.gateway_chassis("lr0-ext", "gw2", 10);
    let members: Vec<Uuid> = vifs
        .iter()
        .filter(|(n, _)| n.ends_with("vm1") || n.ends_with("vm2"))
        .map(|(_, u)| *u)
        .collect();
    nb.pg("pg_web", &members);
    nb.address_set("as_clients", &["10.0.1.11", "10.0.1.12"]);
    nb.acl_pg(
        "pg_web",
        "to-lport",
        1002,
        "outport == @pg_web && ip4 && ip4.src == $as_clients && tcp.dst == 80",
        "allow-related",
    );
    nb.acl_pg(
        "pg_web",
        "from-lport",
        1001,
        "inport == @pg_web && ip4 && udp.dst == 53",
        "allow-stateless",
    );
    nb.acl_pg(
        "pg_web",
        "to-lport",
        1000,
        "outport == @pg_web && ip4 && tcp.dst == 22",
        "reject",
    );
    nb.acl_pg(
        "pg_web",
        "to-lport",
        900,
        "outport == @pg_web && ip",
        "drop",
    );
    nb.nat("lr0", "snat", "172.16.0.100", "10.0.0.0/24");
    nb.nat("lr0", "dnat", "172.16.0.101", "10.0.1.11");
    nb.nat_with(
        "lr0",
        "dnat_and_snat",
        "172.16.0.102",
        "10.0.0.12",
        serde_json::json!({"logical_port": "sw0-vm2", "external_mac": "0a:00:00:00:ee:01"}),
    );
    nb.lb(
        "lb-sw",
        &[("10.0.0.100:80", "10.0.0.11:8080")],
        &["sw0"],
        &[],
    );
    nb.lb(
        "lb-lr",
        &[("172.16.0.200:80", "10.0.1.11:80,10.0.1.12:80")],
        &[],
        &["lr0"],
    );
    nb.route("lr0", "0.0.0.0/0", "172.16.0.254");
    nb.policy(
        "lr0",
        100,
        "ip4.src == 10.0.1.0/24 && ip4.dst == 192.168.0.0/16",
        "drop",
    );
    vifs
}

/// `gen_topo.py`'s shape (N switches × P VIFs, a router port each, a port group with two
/// allow-related ACLs per switch, 4 load balancers on every switch), built in-process.
pub fn gen_topo_like(n: usize, p: usize) -> Nb {
    let mut nb = Nb::new();
    nb.lr("lr0", &[]);
    for i in 0..n {
        let (a, b) = (1 + i / 256, i % 256);
        let ls = format!("ls{i}");
        let mut ops = vec![
            json!({"op": "insert", "table": "Logical_Switch", "uuid-name": "ls",
            "row": {"name": ls}}),
        ];
        let mut ports = Vec::new();
        for j in 0..p {
            let name = format!("ls{i}-p{j}");
            let addr = format!(
                "0a:00:{:02x}:{:02x}:{:02x}:{:02x} 10.{a}.{b}.{}",
                i >> 8,
                i & 255,
                j >> 8,
                j & 255,
                10 + j
            );
            let un = format!("p{j}");
            ops.push(
                json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": un,
                "row": {"name": name, "addresses": ["set", [addr]]}}),
            );
            ports.push(json!(["named-uuid", un]));
        }
        ops.push(json!({"op": "mutate", "table": "Logical_Switch",
            "where": [["name", "==", ls]],
            "mutations": [["ports", "insert", ["set", ports.clone()]]]}));
        let pg = format!("pg{i}");
        ops.push(json!({"op": "insert", "table": "ACL", "uuid-name": "a1",
            "row": {"direction": "from-lport", "priority": 1001,
                "match": format!("inport == @{pg} && ip4"), "action": "allow-related"}}));
        ops.push(json!({"op": "insert", "table": "ACL", "uuid-name": "a2",
            "row": {"direction": "to-lport", "priority": 1001,
                "match": format!("outport == @{pg} && ip4.src == 10.0.0.0/8"),
                "action": "allow-related"}}));
        ops.push(json!({"op": "insert", "table": "Port_Group",
            "row": {"name": pg, "ports": ["set", ports],
                "acls": ["set", [["named-uuid", "a1"], ["named-uuid", "a2"]]]}}));
        nb.txn(ops);
        nb.link(
            &ls,
            "lr0",
            &format!("lr0-ls{i}"),
            &format!("02:01:{:02x}:{:02x}:00:01", i >> 8, i & 255),
            &[&format!("10.{a}.{b}.1/24")],
        );
    }
    let switches: Vec<String> = (0..n).map(|i| format!("ls{i}")).collect();
    let refs: Vec<&str> = switches.iter().map(String::as_str).collect();
    for k in 0..4 {
        let backends: Vec<String> = (0..3)
            .map(|m| {
                let i = (k * 7 + m * 3) % n;
                format!("10.{}.{}.{}:8080", 1 + i / 256, i % 256, 10 + (m % p))
            })
            .collect();
        nb.lb(
            &format!("lb{k}"),
            &[(&format!("172.30.0.{}:80", k + 1), &backends.join(","))],
            &refs,
            &["lr0"],
        );
    }
    nb
}
