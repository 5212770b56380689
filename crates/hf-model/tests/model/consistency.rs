//! The important one: a snapshot fed the update2 notifications of a sequence of transactions
//! equals the snapshot of the database those transactions were applied to
//! (`hf_ovsdb::txn::execute`), and so does one fed the typed transaction deltas.

use std::sync::Arc;

use hf_model::{NbDelta, NbSnapshot, SbDelta, SbSnapshot};
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};
use hf_ovsdb::{Database, Datum, Monitor, MonitorVersion, Schema};
use serde_json::{Map, Value, json};

use super::values::{Rng, random_atom};

/// A monitor of every column of every table, in update2 format.
fn monitor_all(schema: &Schema) -> Monitor {
    let req: Map<String, Value> = schema
        .tables
        .iter()
        .map(|t| (t.name.clone(), json!({})))
        .collect();
    Monitor::from_json(schema, &Value::Object(req), MonitorVersion::V2).expect("monitor request")
}

/// Run `ops`; on commit return the delta after applying it to `db`.
fn commit(db: &mut Database, ops: &[Value]) -> Option<hf_ovsdb::TxnDelta> {
    match execute(db, ops, &NoLocks) {
        TxnOutcome::Commit { delta, .. } => {
            db.apply(&delta);
            Some(delta)
        }
        _ => None,
    }
}

macro_rules! harness {
    ($name:ident, $snap:ty, $delta:ty) => {
        /// A database and the two snapshots that follow it.
        struct $name {
            db: Database,
            monitor: Monitor,
            via_updates: $snap,
            via_deltas: $snap,
            /// A client that connected later: its snapshot began with `initial` rows.
            late: Option<$snap>,
            /// A second database that receives each typed delta as operations (`to_ops`).
            mirror: Database,
            steps: usize,
        }

        impl $name {
            fn new(schema: Arc<Schema>) -> Self {
                let db = Database::new(schema.clone(), 42);
                let mirror = Database::new(schema.clone(), 43);
                let monitor = monitor_all(&schema);
                let mut via_updates = <$snap>::new();
                via_updates
                    .apply_updates2(&monitor.initial(&db))
                    .expect("initial contents");
                $name {
                    db,
                    monitor,
                    via_updates,
                    via_deltas: <$snap>::new(),
                    late: None,
                    mirror,
                    steps: 0,
                }
            }

            /// Run one transaction; returns whether it committed.
            fn step(&mut self, ops: &[Value]) -> bool {
                let Some(delta) = commit(&mut self.db, ops) else {
                    return false;
                };
                self.steps += 1;
                let updates = self.monitor.updates(&self.db.schema, &delta);
                let from_updates = match &updates {
                    Some(u) => self
                        .via_updates
                        .apply_updates2(u)
                        .unwrap_or_else(|e| panic!("step {}: {e}\n{u:#}", self.steps)),
                    None => <$delta>::default(),
                };
                if let (Some(late), Some(u)) = (self.late.as_mut(), &updates) {
                    late.apply_updates2(u).expect("late client's update");
                }
                let typed = <$delta>::from_txn(&self.db.schema, &delta).expect("typed delta");
                self.via_deltas.apply(&typed);
                assert_eq!(from_updates.len(), typed.len(), "step {}", self.steps);
                assert_eq!(from_updates.changed_tables(), typed.changed_tables());
                let expected = <$snap>::from_db(&self.db).expect("from_db");
                assert_eq!(expected.len(), self.db.row_count());
                assert!(
                    self.via_updates == expected,
                    "step {}: update2 snapshot differs from the database's",
                    self.steps
                );
                assert!(
                    self.via_deltas == expected,
                    "step {}: delta snapshot differs from the database's",
                    self.steps
                );
                let ops = typed.to_ops();
                assert!(
                    ops.is_empty() || commit(&mut self.mirror, &ops).is_some(),
                    "step {}: the typed delta's operations fail: {ops:#?}",
                    self.steps
                );
                assert!(
                    <$snap>::from_db(&self.mirror).expect("mirror") == expected,
                    "step {}: mirror differs",
                    self.steps
                );
                if let Some(late) = &self.late {
                    assert!(
                        late == &expected,
                        "step {}: late client differs",
                        self.steps
                    );
                }
                true
            }

            /// Start the late client from the monitor's `initial` rows.
            fn join(&mut self) {
                let mut late = <$snap>::new();
                let d = late
                    .apply_updates2(&self.monitor.initial(&self.db))
                    .expect("initial");
                assert_eq!(d.len(), self.db.row_count());
                self.late = Some(late);
            }

            /// A fresh snapshot from the monitor's initial contents equals the database's.
            fn check_initial(&self) {
                let mut fresh = <$snap>::new();
                fresh
                    .apply_updates2(&self.monitor.initial(&self.db))
                    .expect("initial");
                assert!(fresh == <$snap>::from_db(&self.db).expect("from_db"));
            }
        }
    };
}

harness!(NbHarness, NbSnapshot, NbDelta);
harness!(SbHarness, SbSnapshot, SbDelta);

fn nb_harness() -> NbHarness {
    NbHarness::new(hf_model::nb::schema().clone())
}

fn uuid_of(h: &NbHarness, table: &str, name: &str) -> Value {
    let t = h.db.schema.table_index(table).expect("table");
    let ts = &h.db.schema.tables[t];
    let c = ts.column_index("name").expect("name column");
    let row = h.db.tables[t]
        .rows
        .values()
        .find(|r| r.cols[c].keys.first().and_then(|a| a.as_str()) == Some(name))
        .unwrap_or_else(|| panic!("no {table} named {name}"));
    json!(["uuid", row.uuid.to_string()])
}

#[test]
fn nb_scripted_sequence_matches_database() {
    let mut h = nb_harness();
    let steps: Vec<Vec<Value>> = vec![
        // Switch with two ports, global options.
        vec![
            json!({"op": "insert", "table": "NB_Global", "row": {
                "options": ["map", [["ignore_chassis_features", "true"]]], "nb_cfg": 3}}),
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p1", "row": {
                "name": "lsp1", "addresses": ["set", ["00:00:00:00:00:01 10.0.0.1"]],
                "options": ["map", [["requested-chassis", "hv1"]]], "tag_request": 10,
                "enabled": true}}),
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p2", "row": {
                "name": "lsp2", "type": "router", "addresses": "router",
                "port_security": ["set", ["00:00:00:00:00:02", "00:00:00:00:00:03"]]}}),
            json!({"op": "insert", "table": "Logical_Switch", "row": {
                "name": "sw0", "ports": ["set", [["named-uuid", "p1"], ["named-uuid", "p2"]]],
                "other_config": ["map", [["subnet", "10.0.0.0/24"]]]}}),
        ],
        // Port group with weak refs to the ports and an ACL; an address set.
        vec![
            json!({"op": "insert", "table": "Address_Set", "row": {
                "name": "cluster", "addresses": ["set", ["10.0.0.0/8", "192.168.0.0/16"]]}}),
            json!({"op": "insert", "table": "ACL", "uuid-name": "a1", "row": {
                "direction": "to-lport", "action": "allow-related", "priority": 1001,
                "match": "ip4.src == $cluster", "name": "allow-cluster", "severity": "info",
                "log": true, "label": 7}}),
            json!({"op": "insert", "table": "Port_Group", "row": {
                "name": "pg1", "acls": ["named-uuid", "a1"]}}),
        ],
        // Router with a port, a NAT with the 24.09 columns, a route and a policy.
        vec![
            json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "rp", "row": {
                "name": "lrp0", "mac": "00:00:00:00:ff:01",
                "networks": ["set", ["10.0.0.254/24", "fd00::1/64"]], "peer": "lrp9"}}),
            json!({"op": "insert", "table": "NAT", "uuid-name": "n1", "row": {
                "type": "snat", "logical_ip": "10.0.0.0/24", "external_ip": "172.16.0.1",
                "match": "ip4.dst != 10.0.0.0/8", "priority": 100}}),
            json!({"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "r1",
                "row": {"ip_prefix": "0.0.0.0/0", "nexthop": "172.16.0.254", "policy": "dst-ip"}}),
            json!({"op": "insert", "table": "Logical_Router_Policy", "uuid-name": "pol", "row": {
                "priority": 10, "match": "ip4", "action": "reroute",
                "nexthops": ["set", ["10.0.0.5", "10.0.0.6"]]}}),
            json!({"op": "insert", "table": "Logical_Router", "row": {
                "name": "lr0", "ports": ["named-uuid", "rp"], "nat": ["named-uuid", "n1"],
                "static_routes": ["named-uuid", "r1"], "policies": ["named-uuid", "pol"],
                "options": ["map", [["chassis", "hv1"]]]}}),
        ],
    ];
    for ops in steps {
        assert!(h.step(&ops), "{ops:#?}");
    }
    h.join();
    let ls = uuid_of(&h, "Logical_Switch", "sw0");
    let p1 = uuid_of(&h, "Logical_Switch_Port", "lsp1");
    let p2 = uuid_of(&h, "Logical_Switch_Port", "lsp2");
    let aset = uuid_of(&h, "Address_Set", "cluster");
    let more: Vec<Vec<Value>> = vec![
        // Port group gets the ports (weak references); NAT scoped by the address set.
        vec![
            json!({"op": "update", "table": "Port_Group", "where": [["name", "==", "pg1"]],
                "row": {"ports": ["set", [p1.clone(), p2.clone()]]}}),
            json!({"op": "update", "table": "NAT", "where": [],
                "row": {"exempted_ext_ips": aset.clone(), "priority": 200, "match": ""}}),
        ],
        // Set, map, optional and scalar changes; a mutate that adds a port.
        vec![
            json!({"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", "lsp1"]],
                "row": {"addresses": ["set", ["00:00:00:00:00:01 10.0.0.11", "unknown"]],
                        "options": ["map", [["requested-chassis", "hv1,hv2"],
                                            ["activation-strategy", "rarp"]]],
                        "tag_request": ["set", []], "enabled": false, "type": ""}}),
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p3",
                "row": {"name": "lsp3"}}),
            json!({"op": "mutate", "table": "Logical_Switch", "where": [["_uuid", "==", ls.clone()]],
                "mutations": [["ports", "insert", ["set", [["named-uuid", "p3"]]]],
                              ["other_config", "delete", ["set", ["subnet"]]],
                              ["external_ids", "insert", ["map", [["owner", "test"]]]]]}),
            json!({"op": "mutate", "table": "NB_Global", "where": [],
                "mutations": [["nb_cfg", "+=", 1]]}),
        ],
        // Removing a port from the switch deletes it (garbage collection) and removes it from
        // the port group (weak reference).
        vec![
            json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "sw0"]],
            "mutations": [["ports", "delete", ["set", [p2.clone()]]]]}),
        ],
        // Load balancer with enums in an optional and a set; QoS with an enum-keyed map; a
        // meter with its bands.
        vec![
            json!({"op": "insert", "table": "Load_Balancer", "uuid-name": "lb", "row": {
                "name": "lb0", "vips": ["map", [["10.96.0.1:80", "10.0.0.1:8080,10.0.0.2:8080"]]],
                "protocol": "tcp", "selection_fields": ["set", ["ip_src", "tp_dst"]]}}),
            json!({"op": "insert", "table": "QoS", "uuid-name": "q", "row": {
                "priority": 5, "direction": "from-lport", "match": "ip4",
                "action": ["map", [["dscp", 46]]],
                "bandwidth": ["map", [["rate", 1000], ["burst", 100]]]}}),
            json!({"op": "insert", "table": "Meter_Band", "uuid-name": "b", "row": {
                "action": "drop", "rate": 10, "burst_size": 5}}),
            json!({"op": "insert", "table": "Meter", "row": {
                "name": "m0", "unit": "pktps", "bands": ["named-uuid", "b"]}}),
            json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "sw0"]],
                "mutations": [["load_balancer", "insert", ["named-uuid", "lb"]],
                              ["qos_rules", "insert", ["named-uuid", "q"]]]}),
        ],
        // Deleting the router removes its ports, NAT, route and policy; the load balancer's
        // deletion clears the switch's weak reference.
        vec![
            json!({"op": "delete", "table": "Logical_Router", "where": [["name", "==", "lr0"]]}),
            json!({"op": "delete", "table": "Load_Balancer", "where": []}),
        ],
        vec![
            json!({"op": "delete", "table": "Port_Group", "where": []}),
            json!({"op": "delete", "table": "Logical_Switch", "where": [["_uuid", "==", ls]]}),
        ],
    ];
    for ops in more {
        assert!(h.step(&ops), "{ops:#?}");
    }
    h.check_initial();
    assert_eq!(h.via_updates.logical_switch().len(), 0);
    assert_eq!(h.via_updates.logical_switch_port().len(), 0);
    assert_eq!(h.via_updates.nat().len(), 0);
    assert_eq!(h.via_updates.address_set().len(), 1);
    assert_eq!(h.via_updates.meter().len(), 1);
}

/// A random value for column `c` of table `t`: references point at existing rows of the
/// target table (or the column is left out when it needs one and there is none).
fn random_value(db: &Database, t: usize, c: usize, rng: &mut Rng) -> Option<Value> {
    let ty = &db.schema.tables[t].columns[c].ty;
    let atom = |bt: &hf_ovsdb::BaseType, rng: &mut Rng| match bt.ref_table_index {
        Some(target) => {
            let rows: Vec<_> = db.tables[target].rows.keys().copied().collect();
            if rows.is_empty() || !db.schema.tables[target].is_root {
                None
            } else {
                let mut v = rows;
                v.sort();
                Some(hf_ovsdb::Atom::Uuid(v[rng.below(v.len())]))
            }
        }
        None => Some(random_atom(bt, rng)),
    };
    let n = if ty.max == 1 {
        ty.min.max(usize::from(rng.chance(60)))
    } else {
        ty.min.max(rng.below(4))
    };
    let mut keys = Vec::new();
    let mut pairs = Vec::new();
    for _ in 0..n {
        let k = atom(&ty.key, rng)?;
        match &ty.value {
            Some(vt) => pairs.push((k, atom(vt, rng)?)),
            None => keys.push(k),
        }
    }
    let d = if ty.value.is_some() {
        Datum::map_from(pairs)
    } else {
        Datum::set_from(keys)
    };
    (d.check(ty).is_ok()).then(|| d.to_json(ty))
}

/// One random operation on a root table: insert, update (some columns) or delete.
fn random_op(db: &Database, rng: &mut Rng) -> Option<Value> {
    let roots: Vec<usize> = (0..db.schema.tables.len())
        .filter(|t| db.schema.tables[*t].is_root)
        .collect();
    let t = roots[rng.below(roots.len())];
    let ts = &db.schema.tables[t];
    let mut existing: Vec<_> = db.tables[t].rows.keys().copied().collect();
    existing.sort();
    let kind = rng.below(10);
    if kind < 5 || existing.is_empty() {
        let mut row = Map::new();
        for c in 0..ts.columns.len() {
            if rng.chance(70) || ts.columns[c].ty.min == 1 {
                row.insert(ts.columns[c].name.clone(), random_value(db, t, c, rng)?);
            }
        }
        return Some(json!({"op": "insert", "table": ts.name, "row": row}));
    }
    let target = json!(["uuid", existing[rng.below(existing.len())].to_string()]);
    if kind < 9 {
        let mut row = Map::new();
        for _ in 0..=rng.below(3) {
            let c = rng.below(ts.columns.len());
            if ts.columns[c].mutable {
                row.insert(ts.columns[c].name.clone(), random_value(db, t, c, rng)?);
            }
        }
        Some(
            json!({"op": "update", "table": ts.name, "where": [["_uuid", "==", target]],
                    "row": row}),
        )
    } else {
        Some(json!({"op": "delete", "table": ts.name, "where": [["_uuid", "==", target]]}))
    }
}

macro_rules! random_test {
    ($test:ident, $harness:ident, $schema:expr, $seed:expr) => {
        #[test]
        fn $test() {
            let mut h = $harness::new($schema.clone());
            let mut rng = Rng::new($seed);
            let mut committed = 0;
            for i in 0..400 {
                if i == 100 {
                    h.join();
                }
                let ops: Vec<Value> = (0..=rng.below(3))
                    .filter_map(|_| random_op(&h.db, &mut rng))
                    .collect();
                if !ops.is_empty() && h.step(&ops) {
                    committed += 1;
                }
            }
            h.check_initial();
            // Enough transactions committed for the comparison to mean something.
            assert!(
                committed > 150,
                "only {committed} of 400 transactions committed"
            );
            assert!(h.db.row_count() > 20, "only {} rows", h.db.row_count());
        }
    };
}

random_test!(
    nb_random_transactions_match_database,
    NbHarness,
    hf_model::nb::schema(),
    7
);
random_test!(
    sb_random_transactions_match_database,
    SbHarness,
    hf_model::sb::schema(),
    11
);

/// Operations built from typed rows (`insert_op`, `update_op`, `delete_op`) do to a database
/// what the typed rows say.
#[test]
fn typed_operations_reproduce_typed_rows() {
    use hf_model::{RowRef, Table, nb};
    use hf_ovsdb::Uuid;
    let mut h = nb_harness();
    let lsp = nb::LogicalSwitchPort {
        uuid: Uuid::from_u128(0x10),
        name: "lsp1".into(),
        addresses: ["00:00:00:00:00:01 10.0.0.1".to_string()].into(),
        tag_request: Some(5),
        ..Default::default()
    };
    let ls = nb::LogicalSwitch {
        uuid: Uuid::from_u128(0x20),
        name: "sw0".into(),
        ports: [RowRef::new(lsp.uuid)].into(),
        ..Default::default()
    };
    let acl = nb::Acl {
        uuid: Uuid::from_u128(0x30),
        action: nb::AclAction::Drop,
        direction: nb::AclDirection::FromLport,
        priority: 100,
        match_: "ip4".into(),
        ..Default::default()
    };
    let pg = nb::PortGroup {
        uuid: Uuid::from_u128(0x40),
        name: "pg".into(),
        ports: [RowRef::new(lsp.uuid)].into(),
        acls: [RowRef::new(acl.uuid)].into(),
        ..Default::default()
    };
    assert!(h.step(&[
        lsp.insert_op(),
        ls.insert_op(),
        acl.insert_op(),
        pg.insert_op()
    ]));
    let snap = &h.via_updates;
    assert_eq!(snap.logical_switch_by_name("sw0"), Some(&ls));
    assert_eq!(
        snap.get(RowRef::<nb::LogicalSwitchPort>::new(lsp.uuid)),
        Some(&lsp)
    );
    assert_eq!(snap.port_group_by_name("pg"), Some(&pg));
    assert_eq!(snap.acl().get(&acl.uuid), Some(&acl));

    let mut lsp2 = lsp.clone();
    lsp2.addresses.insert("unknown".into());
    lsp2.tag_request = None;
    lsp2.options
        .insert("requested-chassis".into(), "hv1".into());
    let op = lsp2.update_op(&lsp).expect("changed");
    assert_eq!(
        op["row"].as_object().map(|r| r.len()),
        Some(3),
        "only the changed columns: {op}"
    );
    assert!(lsp.update_op(&lsp).is_none());
    assert!(h.step(&[op]));
    assert_eq!(
        h.via_updates.logical_switch_port_by_name("lsp1"),
        Some(&lsp2)
    );

    assert!(h.step(&[pg.delete_op(), ls.delete_op()]));
    assert!(
        h.via_updates.is_empty(),
        "ports and ACLs were garbage collected"
    );
}
