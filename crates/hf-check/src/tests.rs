//! Unit tests: NB and SB built by real OVSDB transactions (hf-ovsdb's executor, the code
//! `holdfast db` runs) against holdfast's schemas, read back as snapshots; SB flows, where a
//! case needs them, compiled by hf-northd from the NB. Each code has a case that must find it
//! and a case that must not.

use std::sync::Arc;

use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};
use hf_ovsdb::{Database, Schema};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::{Code, Finding, LiveDatapath, Options, Severity, check, render_json, render_text};

/// One in-process database.
struct Db {
    db: Database,
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

fn by_name(name: &str) -> Value {
    json!([["name", "==", name]])
}

impl Db {
    fn new(schema: &str, root: Option<&str>) -> Db {
        let path = format!("{}/../../schemas/{schema}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).expect("schema");
        let mut d = Db {
            db: Database::new(Arc::new(Schema::parse(&text).expect("schema parses")), 7),
        };
        if let Some(t) = root {
            d.txn(vec![json!({"op": "insert", "table": t, "row": {}})]);
        }
        d
    }

    fn txn(&mut self, ops: Vec<Value>) -> Uuid {
        match execute(&mut self.db, &ops, &NoLocks) {
            TxnOutcome::Commit { results, delta } => {
                self.db.apply(&delta);
                results
                    .iter()
                    .find_map(|r| r.get("uuid").and_then(|u| u.get(1)).and_then(Value::as_str))
                    .and_then(|u| u.parse().ok())
                    .unwrap_or_default()
            }
            other => panic!("transaction {ops:?} failed: {other:?}"),
        }
    }
}

/// The NB under construction.
struct Nb(Db);

impl Nb {
    fn new() -> Nb {
        Nb(Db::new("ovn-nb.ovsschema", Some("NB_Global")))
    }

    fn snapshot(&self) -> NbSnapshot {
        NbSnapshot::from_db(&self.0.db).expect("NB snapshot")
    }

    fn global(&mut self, col: &str, key: &str, value: &str) {
        self.0.txn(vec![
            json!({"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [[col, "delete", set(&[key])], [col, "insert", map(&[(key, value)])]]}),
        ]);
    }

    fn ls(&mut self, name: &str) -> Uuid {
        self.0.txn(vec![
            json!({"op": "insert", "table": "Logical_Switch", "row": {"name": name}}),
        ])
    }

    fn lsp(&mut self, ls: &str, name: &str, mut row: Value) -> Uuid {
        row["name"] = json!(name);
        self.0.txn(vec![
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p", "row": row}),
            json!({"op": "mutate", "table": "Logical_Switch", "where": by_name(ls),
                "mutations": [["ports", "insert", ["named-uuid", "p"]]]}),
        ])
    }

    fn vif(&mut self, ls: &str, name: &str, addresses: &str) -> Uuid {
        self.lsp(ls, name, json!({"addresses": set(&[addresses])}))
    }

    fn localnet(&mut self, ls: &str) {
        self.lsp(
            ls,
            &format!("{ls}-localnet"),
            json!({"type": "localnet", "addresses": set(&["unknown"]),
                "options": map(&[("network_name", "physnet")])}),
        );
    }

    fn lr(&mut self, name: &str, options: &[(&str, &str)]) -> Uuid {
        self.0
            .txn(vec![json!({"op": "insert", "table": "Logical_Router",
            "row": {"name": name, "options": map(options)}})])
    }

    /// Router port `lrp` on `lr`, attached to switch `ls`.
    fn link(&mut self, ls: &str, lr: &str, lrp: &str, mac: &str, nets: &[&str]) -> Uuid {
        let u = self.0.txn(vec![
            json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "p",
                "row": {"name": lrp, "mac": mac, "networks": set(nets)}}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["ports", "insert", ["named-uuid", "p"]]]}),
        ]);
        self.lsp(
            ls,
            &format!("{ls}-{lrp}"),
            json!({"type": "router", "addresses": set(&["router"]),
                "options": map(&[("router-port", lrp)])}),
        );
        u
    }

    fn gateway_chassis(&mut self, lrp: &str, chassis: &str) {
        self.0.txn(vec![
            json!({"op": "insert", "table": "Gateway_Chassis", "uuid-name": "g",
                "row": {"name": format!("{lrp}-{chassis}"), "chassis_name": chassis, "priority": 10}}),
            json!({"op": "mutate", "table": "Logical_Router_Port", "where": by_name(lrp),
                "mutations": [["gateway_chassis", "insert", ["named-uuid", "g"]]]}),
        ]);
    }

    fn route(&mut self, lr: &str, prefix: &str, nexthop: &str) {
        self.0.txn(vec![
            json!({"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "r",
                "row": {"ip_prefix": prefix, "nexthop": nexthop}}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["static_routes", "insert", ["named-uuid", "r"]]]}),
        ]);
    }

    fn address_set(&mut self, name: &str, addrs: &[&str]) -> Uuid {
        self.0
            .txn(vec![json!({"op": "insert", "table": "Address_Set",
            "row": {"name": name, "addresses": set(addrs)}})])
    }

    fn nat(&mut self, lr: &str, kind: &str, ext: &str, logical: &str, extra: Value) -> Uuid {
        let mut row = json!({"type": kind, "external_ip": ext, "logical_ip": logical});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                row[k] = v;
            }
        }
        self.0.txn(vec![
            json!({"op": "insert", "table": "NAT", "uuid-name": "n", "row": row}),
            json!({"op": "mutate", "table": "Logical_Router", "where": by_name(lr),
                "mutations": [["nat", "insert", ["named-uuid", "n"]]]}),
        ])
    }

    fn update(&mut self, table: &str, uuid: Uuid, row: Value) {
        self.0.txn(vec![json!({"op": "update", "table": table,
            "where": [["_uuid", "==", ["uuid", uuid.to_string()]]], "row": row})]);
    }

    fn pg(&mut self, name: &str, ports: &[Uuid]) {
        let ports: Vec<Value> = ports
            .iter()
            .map(|u| json!(["uuid", u.to_string()]))
            .collect();
        self.0
            .txn(vec![json!({"op": "insert", "table": "Port_Group",
            "row": {"name": name, "ports": ["set", ports]}})]);
    }

    fn acl_pg(&mut self, pg: &str, dir: &str, prio: i64, m: &str, action: &str) -> Uuid {
        self.0.txn(vec![
            json!({"op": "insert", "table": "ACL", "uuid-name": "a",
                "row": {"direction": dir, "priority": prio, "match": m, "action": action}}),
            json!({"op": "mutate", "table": "Port_Group", "where": by_name(pg),
                "mutations": [["acls", "insert", ["named-uuid", "a"]]]}),
        ])
    }
}

/// The SB under construction.
struct Sb(Db);

impl Sb {
    fn new() -> Sb {
        Sb(Db::new("ovn-sb.ovsschema", Some("SB_Global")))
    }

    fn snapshot(&self) -> SbSnapshot {
        SbSnapshot::from_db(&self.0.db).expect("SB snapshot")
    }

    fn chassis(&mut self, name: &str, ip: &str, other: &[(&str, &str)]) -> Uuid {
        self.0.txn(vec![
            json!({"op": "insert", "table": "Encap", "uuid-name": "e",
                "row": {"type": "geneve", "ip": ip, "chassis_name": name}}),
            json!({"op": "insert", "table": "Chassis", "row": {"name": name, "hostname": name,
                "encaps": ["named-uuid", "e"], "other_config": map(other)}}),
        ]);
        let sb = self.snapshot();
        let c = sb.chassis().values().find(|c| c.name == name);
        c.expect("the chassis row").uuid
    }

    fn chassis_private(&mut self, name: &str, ids: &[(&str, &str)]) -> Uuid {
        self.0
            .txn(vec![json!({"op": "insert", "table": "Chassis_Private",
            "row": {"name": name, "external_ids": map(ids)}})])
    }

    fn flow(&mut self, m: &str, a: &str, ids: &[(&str, &str)]) -> Uuid {
        self.0
            .txn(vec![json!({"op": "insert", "table": "Logical_Flow",
            "row": {"pipeline": "ingress", "table_id": 8, "priority": 1000, "match": m,
                "actions": a, "external_ids": map(ids)}})])
    }

    /// Writes what hf-northd compiles from `nb` under the features negotiated with the
    /// chassis SB has now (as the daemon does).
    fn compile_from(&mut self, nb: &NbSnapshot) {
        let sb = self.snapshot();
        let view = hf_northd::features::SbChassisView::from_snapshot(&sb);
        let neg = hf_northd::features::negotiate(&view, nb, &Default::default());
        let mut opts = hf_northd::Options::default();
        neg.apply(&mut opts);
        let out = hf_northd::compile(nb, &opts);
        let group = self
            .0
            .txn(vec![json!({"op": "insert", "table": "Logical_DP_Group",
            "row": {}})]);
        let mut ops = Vec::new();
        for f in out.sb.flows.values() {
            let ids: Vec<(&str, &str)> = f.external_ids.iter().collect();
            let mut row = json!({"pipeline": f.pipeline, "table_id": f.table_id,
                "priority": f.priority, "match": &*f.match_, "actions": &*f.actions,
                "external_ids": map(&ids)});
            if matches!(f.dps, hf_northd::output::FlowDps::Group(_)) {
                row["logical_dp_group"] = json!(["uuid", group.to_string()]);
            }
            ops.push(json!({"op": "insert", "table": "Logical_Flow", "row": row}));
        }
        for name in out.sb.port_groups.keys() {
            ops.push(json!({"op": "insert", "table": "Port_Group", "row": {"name": name}}));
        }
        self.0.txn(ops);
    }
}

fn run(nb: &Nb, sb: &Sb, live: &[LiveDatapath]) -> Vec<Finding> {
    check(&nb.snapshot(), &sb.snapshot(), live, &Options::default())
}

fn of(fs: &[Finding], code: Code) -> Vec<&Finding> {
    fs.iter().filter(|f| f.code == code).collect()
}

/// Incident A's shape: pods behind the cluster router, reaching gateway router GR_node1
/// through the join switch; GR_node1's external port on node1's host network 10.6.158.0/24
/// (an external switch), where etcd lives on another node; a per-pod SNAT to the node's IP.
fn incident_a(nb: &mut Nb) -> Uuid {
    nb.ls("node1");
    nb.vif("node1", "pod1", "0a:58:0a:81:00:09 10.129.0.9");
    nb.ls("join");
    nb.ls("ext_node1");
    nb.localnet("ext_node1");
    nb.lr("ovn_cluster_router", &[]);
    nb.link(
        "node1",
        "ovn_cluster_router",
        "rtos-node1",
        "0a:58:0a:81:00:01",
        &["10.129.0.1/23"],
    );
    nb.link(
        "join",
        "ovn_cluster_router",
        "rtoj",
        "0a:58:64:40:00:01",
        &["100.64.0.1/16"],
    );
    nb.lr("GR_node1", &[("chassis", "node1")]);
    nb.link(
        "join",
        "GR_node1",
        "rtoj-GR_node1",
        "0a:58:64:40:00:02",
        &["100.64.0.2/16"],
    );
    nb.link(
        "ext_node1",
        "GR_node1",
        "rtoe-GR_node1",
        "0a:58:0a:06:9e:0c",
        &["10.6.158.12/24"],
    );
    nb.route("GR_node1", "10.128.0.0/14", "100.64.0.1");
    nb.route("GR_node1", "0.0.0.0/0", "10.6.158.1");
    nb.global("options", "holdfast-cluster-cidrs", "10.6.158.0/24");
    nb.nat("GR_node1", "snat", "10.6.158.12", "10.129.0.9", json!({}))
}

#[test]
fn snat_internal_incident_a_and_its_exemption() {
    let mut nb = Nb::new();
    let nat = incident_a(&mut nb);
    let sb = Sb::new();
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::SnatInternal);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    let f = hits[0];
    assert_eq!(f.severity, Severity::Error);
    assert_eq!((f.table.as_str(), f.row.clone()), ("NAT", nat.to_string()));
    assert_eq!(f.name, "GR_node1 snat 10.129.0.9 -> 10.6.158.12");
    assert!(
        f.message.contains("e.g. 10.6.158.1 in 10.6.158.0/24"),
        "{}",
        f.message
    );
    assert!(f.fix.contains("exempted_ext_ips"), "{}", f.fix);
    // The pod's own subnet and the join network lie behind the pods' own port: not reported.
    assert!(!f.message.contains("10.129.0.0/23"), "{}", f.message);

    // Exempting the host network scopes the row.
    let set = nb.address_set("internal", &["10.6.158.0/24"]);
    nb.update(
        "NAT",
        nat,
        json!({"exempted_ext_ips": ["uuid", set.to_string()]}),
    );
    assert!(of(&run(&nb, &sb, &[]), Code::SnatInternal).is_empty());
    // A set covering only half of it does not.
    nb.update(
        "Address_Set",
        set,
        json!({"addresses": set_of(&["10.6.158.0/25"])}),
    );
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::SnatInternal);
    assert_eq!(hits.len(), 1);
    assert!(
        hits[0].message.contains("e.g. 10.6.158.128"),
        "{}",
        hits[0].message
    );
}

fn set_of(items: &[&str]) -> Value {
    set(items)
}

#[test]
fn snat_internal_allowed_and_match_scope() {
    let mut nb = Nb::new();
    let nat = incident_a(&mut nb);
    let sb = Sb::new();
    // allowed_ext_ips holding only the internet's documentation range: scoped.
    let allowed = nb.address_set("outside", &["198.51.100.0/24"]);
    nb.update(
        "NAT",
        nat,
        json!({"allowed_ext_ips": ["uuid", allowed.to_string()]}),
    );
    assert!(of(&run(&nb, &sb, &[]), Code::SnatInternal).is_empty());
    // ... and holding the host network: not.
    nb.update(
        "Address_Set",
        allowed,
        json!({"addresses": set_of(&["10.6.0.0/16"])}),
    );
    assert_eq!(of(&run(&nb, &sb, &[]), Code::SnatInternal).len(), 1);
    nb.update("NAT", nat, json!({"allowed_ext_ips": ["set", []]}));

    // A match excluding the host network: scoped.
    nb.update("NAT", nat, json!({"match": "ip4.dst != 10.6.158.0/24"}));
    assert!(of(&run(&nb, &sb, &[]), Code::SnatInternal).is_empty());
    // A match the evaluator cannot decide: "may rewrite".
    nb.update("NAT", nat, json!({"match": "tcp.dst == 443"}));
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::SnatInternal);
    assert_eq!(hits.len(), 1);
    assert!(
        hits[0].message.contains("may rewrite"),
        "{}",
        hits[0].message
    );
}

#[test]
fn snat_internal_distributed_router_only_through_its_gateway_port() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    nb.ls("sw1");
    nb.ls("ext");
    nb.localnet("ext");
    nb.lr("lr0", &[]);
    nb.link(
        "sw0",
        "lr0",
        "lr0-sw0",
        "0a:00:00:00:ff:00",
        &["10.0.0.1/24"],
    );
    nb.link(
        "sw1",
        "lr0",
        "lr0-sw1",
        "0a:00:00:00:ff:01",
        &["10.0.1.1/24"],
    );
    nb.link(
        "ext",
        "lr0",
        "lr0-ext",
        "0a:00:00:00:ff:02",
        &["172.16.0.1/24"],
    );
    nb.gateway_chassis("lr0-ext", "gw1");
    // SNAT of everything: sw0 -> sw1 stays inside (not through the gateway port).
    nb.nat("lr0", "snat", "172.16.0.100", "10.0.0.0/16", json!({}));
    let mut sb = Sb::new();
    assert!(of(&run(&nb, &sb, &[]), Code::SnatInternal).is_empty());
    // A chassis whose tunnel address is reached through the gateway port (default route).
    nb.route("lr0", "0.0.0.0/0", "172.16.0.254");
    sb.chassis("hv1", "192.168.0.11", &[]);
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::SnatInternal);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert!(
        hits[0].message.contains("192.168.0.11"),
        "{}",
        hits[0].message
    );
    assert!(
        hits[0].message.contains("gateway port lr0-ext"),
        "{}",
        hits[0].message
    );
}

#[test]
fn flow_unparsable_follows_negotiation() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    let a = nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11");
    nb.pg("pg_web", &[a]);
    nb.acl_pg(
        "pg_web",
        "to-lport",
        1002,
        "outport == @pg_web && tcp.dst == 80",
        "allow-related",
    );
    nb.acl_pg(
        "pg_web",
        "to-lport",
        1000,
        "outport == @pg_web && ip",
        "drop",
    );
    let nbs = nb.snapshot();
    // An hf-1 chassis and northd negotiating: everything it gets is hf-1.
    let mut sb = Sb::new();
    sb.chassis("hv1", "192.168.0.11", &[("holdfast-features", "hf-1")]);
    sb.compile_from(&nbs);
    let fs = check(&nbs, &sb.snapshot(), &[], &Options::default());
    assert!(
        of(&fs, Code::FlowUnparsable).is_empty(),
        "{}",
        render_text(&fs)
    );

    // ignore_chassis_features: northd writes the newest form, the chassis cannot parse it.
    nb.global("options", "ignore_chassis_features", "true");
    let nbs = nb.snapshot();
    let mut sb = Sb::new();
    let hv1 = sb.chassis("hv1", "192.168.0.11", &[("holdfast-features", "hf-1")]);
    sb.compile_from(&nbs);
    let fs = check(&nbs, &sb.snapshot(), &[], &Options::default());
    let hits = of(&fs, Code::FlowUnparsable);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(hits[0].row, hv1.to_string());
    assert!(
        hits[0].message.contains("chassis hv1"),
        "{}",
        hits[0].message
    );
    assert!(
        hits[0].fix.contains("ignore_chassis_features"),
        "{}",
        hits[0].fix
    );
    // An hf-2 chassis parses all of it.
    let mut sb = Sb::new();
    sb.chassis("hv2", "192.168.0.12", &[("holdfast-features", "hf-2")]);
    sb.compile_from(&nbs);
    assert!(of(&run(&nb, &sb, &[]), Code::FlowUnparsable).is_empty());
}

#[test]
fn flow_unparsable_from_syntax_and_chassis_reports() {
    let nb = Nb::new();
    let mut sb = Sb::new();
    sb.flow("ip4 &&", "next;", &[("stage-name", "ls_in_acl")]);
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::FlowUnparsable);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert!(
        hits[0].message.contains("1 of 1 flows do not parse"),
        "{}",
        hits[0].message
    );

    let mut sb = Sb::new();
    sb.flow("ip4", "next;", &[]);
    sb.chassis_private("hv1", &[("holdfast-flow-errors", "0")]);
    assert!(of(&run(&nb, &sb, &[]), Code::FlowUnparsable).is_empty());
    sb.chassis_private(
        "hv2",
        &[
            ("holdfast-flow-errors", "3"),
            ("holdfast-flow-error-1", "unknown action foo (3 flows)"),
        ],
    );
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::FlowUnparsable);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(hits[0].table, "Chassis_Private");
    assert!(hits[0].message.contains("reports 3 flows"));
    assert!(hits[0].message.contains("unknown action foo"));
    assert!(!hits[0].message.contains("held"), "{}", hits[0].message);
    // How the chassis runs them: on last good versions, its datapath held.
    sb.chassis_private(
        "hv3",
        &[
            ("holdfast-flow-errors", "27"),
            ("holdfast-flow-error-1", "syntax: ... (27 flows)"),
            ("holdfast-flow-errors-last-good", "27"),
            ("holdfast-flow-errors-held-datapaths", "1"),
        ],
    );
    let fs = run(&nb, &sb, &[]);
    let hv3: Vec<_> = of(&fs, Code::FlowUnparsable)
        .into_iter()
        .filter(|f| f.name == "hv3")
        .collect();
    assert_eq!(hv3.len(), 1, "{}", render_text(&fs));
    assert!(
        hv3[0]
            .message
            .contains("27 run their last good version; 1 datapath held at the flows it ran"),
        "{}",
        hv3[0].message
    );
}

#[test]
fn chassis_unsupported_computed_and_reported() {
    let mut nb = Nb::new();
    let mut sb = Sb::new();
    sb.chassis("new", "192.168.0.1", &[("holdfast-features", "hf-2")]);
    assert!(of(&run(&nb, &sb, &[]), Code::ChassisUnsupported).is_empty());
    // Advertising less than hf-1.
    let old = sb.chassis("old", "192.168.0.2", &[("holdfast-features", "addr-set")]);
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::ChassisUnsupported);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(
        (hits[0].name.as_str(), hits[0].row.clone()),
        ("old", old.to_string())
    );
    // It is not reported again as unable to parse flows.
    assert!(of(&fs, Code::FlowUnparsable).is_empty());
    // northd's own report of a chassis this check does not see.
    nb.global(
        "external_ids",
        "holdfast-unsupported-chassis:gone",
        "below the oldest served feature level hf-1",
    );
    let fs = run(&nb, &sb, &[]);
    let names: Vec<&str> = of(&fs, Code::ChassisUnsupported)
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["old", "gone"]);
}

#[test]
fn zone_risk_requested_and_live() {
    let mut nb = Nb::new();
    nb.lr("gw", &[("snat-ct-zone", "5")]);
    let sb = Sb::new();
    let live_ok = LiveDatapath {
        name: "/run/hv1.ctl".into(),
        zones: vec![("lr/gw/snat".into(), 5), ("lsp/vm1".into(), 6)],
    };
    assert!(of(&run(&nb, &sb, &[live_ok]), Code::ZoneRisk).is_empty());
    let gr = nb.lr("GR_node1", &[("snat-ct-zone", "0")]);
    nb.lr("other", &[("snat-ct-zone", "5")]);
    let live = LiveDatapath {
        name: "/run/hv1.ctl".into(),
        zones: vec![
            ("lr/a/snat".into(), 0),
            ("lsp/vm1".into(), 7),
            ("lsp/vm2".into(), 7),
        ],
    };
    let fs = run(&nb, &sb, &[live]);
    let hits = of(&fs, Code::ZoneRisk);
    assert_eq!(hits.len(), 4, "{}", render_text(&fs));
    assert_eq!(hits[0].row, gr.to_string());
    assert_eq!(hits[0].severity, Severity::Warning);
    assert!(hits[0].message.contains("holdfast refuses zone 0"));
    assert!(hits[1].message.contains("gw, other"), "{}", hits[1].message);
    assert_eq!(hits[2].severity, Severity::Error);
    assert!(hits[2].message.contains("zone 0"));
    assert!(hits[3].message.contains("lsp/vm1, lsp/vm2"));
}

#[test]
fn zone_risk_a_chassis_out_of_zones() {
    let nb = Nb::new();
    let mut sb = Sb::new();
    sb.chassis_private("hv1", &[("holdfast-flow-errors", "0")]);
    assert!(of(&run(&nb, &sb, &[]), Code::ZoneRisk).is_empty());
    let row = sb.chassis_private(
        "hv2",
        &[(
            "holdfast-zone-error",
            "zone-exhausted: no conntrack zone for 3 object(s) (first: lsp/p9); the running program is kept",
        )],
    );
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::ZoneRisk);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(hits[0].severity, Severity::Error);
    assert_eq!(hits[0].table, "Chassis_Private");
    assert_eq!(hits[0].row, row.to_string());
    assert_eq!(hits[0].name, "hv2");
    assert!(
        hits[0].message.contains("zone-exhausted"),
        "{}",
        hits[0].message
    );
}

/// Incident C's OVN-Kubernetes layer-2 shape: a switch with one gateway router per node.
fn layer2(nb: &mut Nb, nodes: &[&str]) {
    nb.ls("l2");
    nb.vif("l2", "vm1", "00:00:00:00:01:0b 10.100.0.11");
    for (i, n) in nodes.iter().enumerate() {
        let gr = format!("GR_{n}");
        nb.lr(&gr, &[("chassis", n)]);
        nb.link(
            "l2",
            &gr,
            &format!("{gr}-l2"),
            "0a:58:0a:64:00:01",
            &["10.100.0.1/24"],
        );
        let ext = format!("ext_{n}");
        nb.ls(&ext);
        nb.localnet(&ext);
        let ip = format!("172.16.0.{}", i + 1);
        nb.link(
            &ext,
            &gr,
            &format!("{gr}-ext"),
            &format!("0a:00:00:00:00:{:02x}", i + 1),
            &[&format!("{ip}/24")],
        );
        nb.nat(&gr, "snat", &ip, "10.100.0.0/24", json!({}));
    }
}

#[test]
fn egress_moves_with_per_node_gateways() {
    let mut nb = Nb::new();
    layer2(&mut nb, &["hv1"]);
    let sb = Sb::new();
    assert!(of(&run(&nb, &sb, &[]), Code::EgressMoves).is_empty());
    let mut nb = Nb::new();
    layer2(&mut nb, &["hv1", "hv2"]);
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::EgressMoves);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(hits[0].name, "vm1 on l2");
    assert!(
        hits[0].message.contains("172.16.0.1 on hv1 (GR_hv1)"),
        "{}",
        hits[0].message
    );
    assert!(hits[0].message.contains("172.16.0.2 on hv2 (GR_hv2)"));
    // The layer-2 subnet is internal, but it lies behind the sources' own port: no SNAT
    // finding.
    assert!(
        of(&fs, Code::SnatInternal).is_empty(),
        "{}",
        render_text(&fs)
    );
    // Its own distributed egress address follows it.
    nb.ls("ext");
    nb.localnet("ext");
    nb.lr("lr0", &[]);
    nb.link(
        "ext",
        "lr0",
        "lr0-ext",
        "0a:00:00:00:ff:02",
        &["172.16.0.254/24"],
    );
    nb.gateway_chassis("lr0-ext", "hv1");
    nb.nat(
        "lr0",
        "dnat_and_snat",
        "172.16.0.50",
        "10.100.0.11",
        json!({"logical_port": "vm1", "external_mac": "02:00:00:00:ee:01"}),
    );
    assert!(of(&run(&nb, &sb, &[]), Code::EgressMoves).is_empty());
}

#[test]
fn acl_broken_by_action_and_marker() {
    let mut nb = Nb::new();
    nb.ls("sw0");
    let p = nb.vif("sw0", "vm1", "0a:00:00:00:00:01 10.0.0.11");
    nb.pg("pg_web", &[p]);
    nb.acl_pg(
        "pg_web",
        "to-lport",
        1000,
        "outport == @pg_web && tcp.dst == 22",
        "drop",
    );
    let mut sb = Sb::new();
    assert!(of(&run(&nb, &sb, &[]), Code::AclBroken).is_empty());
    let bad_drop = nb.acl_pg(
        "pg_web",
        "to-lport",
        1001,
        "outport == @pg_web && tcp.dst ==",
        "drop",
    );
    let bad_allow = nb.acl_pg(
        "pg_web",
        "from-lport",
        1001,
        "inport == @pg_web && ip4.dst = 1",
        "allow-related",
    );
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::AclBroken);
    assert_eq!(hits.len(), 2, "{}", render_text(&fs));
    let drop = hits
        .iter()
        .find(|f| f.row == bad_drop.to_string())
        .expect("drop ACL");
    let allow = hits
        .iter()
        .find(|f| f.row == bad_allow.to_string())
        .expect("allow ACL");
    assert_eq!(drop.severity, Severity::Error);
    assert_eq!(allow.severity, Severity::Warning);
    // Real ovn-northd (no hf-flow-id): the ACL is absent, a drop opens the group.
    assert!(
        drop.message.contains("opens the port group"),
        "{}",
        drop.message
    );
    // holdfast northd's marker.
    let hint = bad_drop.simple().to_string()[..8].to_string();
    sb.flow(
        "1",
        "drop;",
        &[
            ("stage-hint", &hint),
            ("hf-acl-broken", "fail-closed"),
            ("hf-flow-id", "x"),
        ],
    );
    let fs = run(&nb, &sb, &[]);
    let drop = of(&fs, Code::AclBroken)
        .into_iter()
        .find(|f| f.row == bad_drop.to_string())
        .expect("drop ACL");
    assert!(drop.message.contains("fails closed"), "{}", drop.message);
    // The other marker, and an allow ACL under holdfast northd (no marker: left out).
    let mut sb = Sb::new();
    sb.flow(
        "1",
        "next;",
        &[
            ("stage-hint", &hint),
            ("hf-acl-broken", "last-good"),
            ("hf-flow-id", "x"),
        ],
    );
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::AclBroken);
    let drop = hits
        .iter()
        .find(|f| f.row == bad_drop.to_string())
        .expect("drop ACL");
    assert!(
        drop.message.contains("keeps the ACL's last good version"),
        "{}",
        drop.message
    );
    let allow = hits
        .iter()
        .find(|f| f.row == bad_allow.to_string())
        .expect("allow ACL");
    assert!(
        allow.message.contains("holdfast northd leaves it out"),
        "{}",
        allow.message
    );
}

#[test]
fn snat_internal_bad_cluster_cidrs_and_own_addresses() {
    let mut nb = Nb::new();
    let nat = incident_a(&mut nb);
    // Exempt the host network; list a bad entry and the node's own address as internal.
    let set = nb.address_set("internal", &["10.6.158.0/24"]);
    nb.update(
        "NAT",
        nat,
        json!({"exempted_ext_ips": ["uuid", set.to_string()]}),
    );
    nb.global(
        "options",
        "holdfast-cluster-cidrs",
        "10.6.158.0/24, etcd.example, 10.6.158.12",
    );
    let fs = run(&nb, &Sb::new(), &[]);
    let hits = of(&fs, Code::SnatInternal);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(hits[0].severity, Severity::Warning);
    assert_eq!(hits[0].table, "NB_Global");
    assert!(
        hits[0].message.contains("\"etcd.example\""),
        "{}",
        hits[0].message
    );
    // Without the exemption, the router's own address is not an example of rewritten traffic.
    nb.update("NAT", nat, json!({"exempted_ext_ips": ["set", []]}));
    nb.global("options", "holdfast-cluster-cidrs", "10.6.158.12");
    assert!(of(&run(&nb, &Sb::new(), &[]), Code::SnatInternal).is_empty());
}

#[test]
fn text_and_json_shapes() {
    let mut nb = Nb::new();
    incident_a(&mut nb);
    let fs = run(&nb, &Sb::new(), &[]);
    let text = render_text(&fs);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("error[snat-internal]: snat on gateway router GR_node1"),
        "{text}"
    );
    assert!(lines[1].starts_with("  --> NB NAT "), "{text}");
    assert!(
        lines[1].ends_with("(GR_node1 snat 10.129.0.9 -> 10.6.158.12)"),
        "{text}"
    );
    assert!(lines[2].starts_with("  = note: "), "{text}");
    assert!(lines[3].starts_with("  = help: "), "{text}");
    assert_eq!(lines.last().copied(), Some("check: 1 error, 0 warnings"));
    let j = render_json(&fs);
    let f = &j["findings"][0];
    for k in ["code", "severity", "table", "row", "name", "message", "fix"] {
        assert!(f.get(k).is_some_and(Value::is_string), "{k}: {j}");
    }
    assert_eq!(f["code"], "snat-internal");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["table"], "NAT");
    assert_eq!(render_text(&[]), "check: no findings\n");
}

#[test]
fn flow_unparsable_names_the_feature_outside_the_level() {
    let nb = Nb::new();
    let mut sb = Sb::new();
    sb.chassis("hv2", "192.168.0.12", &[("holdfast-features", "hf-2")]);
    // Incident B's construct: the block form of ct_commit (hf-2), in a flow of no group.
    sb.flow(
        "ip4 && ct.est",
        "ct_commit { ct_label.blocked = 0; }; next;",
        &[("stage-name", "ls_in_acl")],
    );
    sb.flow("ip4", "next;", &[("stage-name", "ls_in_acl")]);
    assert!(of(&run(&nb, &sb, &[]), Code::FlowUnparsable).is_empty());
    sb.chassis("hv1", "192.168.0.11", &[("holdfast-features", "hf-1")]);
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::FlowUnparsable);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert_eq!(hits[0].name, "hv1");
    assert!(
        hits[0].message.contains("cannot parse 1 of 2 flows"),
        "{}",
        hits[0].message
    );
    assert!(
        hits[0].message.contains("uses ct-commit-block"),
        "{}",
        hits[0].message
    );
    assert!(
        hits[0]
            .message
            .contains("ls_in_acl (ingress table 8) priority 1000 (match `ip4 && ct.est`, actions `ct_commit { ct_label.blocked = 0; }; next;`)"),
        "{}",
        hits[0].message
    );
    // No flow carries hf-flow-id: a northd other than holdfast's wrote them.
    assert!(hits[0].fix.contains("(not holdfast's)"), "{}", hits[0].fix);
    // Once one does, holdfast northd wrote SB: the fix is about its negotiation.
    sb.flow("ip4", "next;", &[("hf-flow-id", "00000000000000ab")]);
    let fs = run(&nb, &sb, &[]);
    let hits = of(&fs, Code::FlowUnparsable);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert!(
        hits[0].fix.starts_with("holdfast northd lowers flows"),
        "{}",
        hits[0].fix
    );
    // A real ovn-controller without flags is taken at OVN 20.06: it lacks the block form too.
    let mut sb2 = Sb::new();
    sb2.chassis("ovn1", "192.168.0.13", &[]);
    sb2.flow("ip4", "ct_commit { ct_label.blocked = 0; }; next;", &[]);
    let fs = run(&nb, &sb2, &[]);
    let hits = of(&fs, Code::FlowUnparsable);
    assert_eq!(hits.len(), 1, "{}", render_text(&fs));
    assert!(
        hits[0].message.contains("ovn-controller flags: OVN 20.06"),
        "{}",
        hits[0].message
    );
}

#[test]
fn bad_input_is_reported_or_skipped_never_a_panic() {
    let mut nb = Nb::new();
    nb.ls("sw");
    nb.vif("sw", "p1", "not-a-mac 10.0.0.300 fd00::zz");
    nb.lr("gr", &[("chassis", "hv1"), ("snat-ct-zone", "70000")]);
    nb.link(
        "sw",
        "gr",
        "gr-sw",
        "0a:00:00:00:00:01",
        &["banana", "10.0.0.1/24"],
    );
    nb.route("gr", "not-a-prefix", "discard");
    nb.route("gr", "0.0.0.0/0", "nowhere");
    let s = nb.address_set("odd", &["foo", "::/0", "0.0.0.0/0"]);
    nb.nat("gr", "snat", "", "10.0.0.0/24", json!({}));
    nb.nat("gr", "snat", "1.1.1.1", "garbage", json!({}));
    nb.nat(
        "gr",
        "snat",
        "1.1.1.2",
        "0.0.0.0/0",
        json!({"exempted_ext_ips": ["uuid", s.to_string()], "match": "((((ip4.dst == $odd"}),
    );
    nb.global("options", "holdfast-cluster-cidrs", ",,, ::/0,0.0.0.0/0 ,");
    let mut sb = Sb::new();
    sb.chassis(
        "hv1",
        "not-an-ip",
        &[("holdfast-features", "hf-99, nonsense")],
    );
    sb.chassis_private("hv1", &[("holdfast-flow-errors", "many")]);
    sb.flow("", "", &[]);
    sb.flow(
        "ip4.dst == $odd",
        "next(pipeline=sideways);",
        &[("stage-hint", "zz")],
    );
    let fs = run(
        &nb,
        &sb,
        &[LiveDatapath {
            name: "x".into(),
            zones: vec![("a".into(), 0), ("a".into(), 0)],
        }],
    );
    // What is reported names the row; the rest is skipped.
    let text = render_text(&fs);
    assert!(
        text.contains("warning[zone-risk]: router gr requests conntrack zone \"70000\""),
        "{text}"
    );
    assert!(
        text.contains("error[zone-risk]: the datapath's zone map gives zone 0"),
        "{text}"
    );
    assert!(text.contains("error[flow-unparsable]"), "{text}");
    let _ = render_json(&fs);
}
