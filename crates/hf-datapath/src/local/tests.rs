//! The local database's plan, ofports and write-back, run against a real transaction executor
//! (hf-ovsdb's, on the vswitch subset schema): the operations [`write_ops`] builds are
//! executed, and the next round must find nothing to write.

use std::sync::Arc;

use hf_ovsdb::db::Database;
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};

use super::*;

struct Db {
    db: Database,
}

/// An interface to add: (name, type, external_ids).
type Iface<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

impl Db {
    fn new() -> Self {
        Db {
            db: Database::new(Arc::clone(hf_model::vswitch::schema()), 7),
        }
    }

    fn run(&mut self, ops: Vec<Value>) -> Vec<Value> {
        match execute(&mut self.db, &ops, &NoLocks) {
            TxnOutcome::Commit { results, delta } => {
                self.db.apply(&delta);
                results
            }
            TxnOutcome::Failed { error, results } => {
                panic!("transaction failed: {error:?} {results:?} for {ops:#?}")
            }
            TxnOutcome::Blocked { .. } => panic!("blocked"),
        }
    }

    fn snap(&self) -> VswitchSnapshot {
        VswitchSnapshot::from_db(&self.db).expect("snapshot")
    }

    /// `ovs-vsctl add-br`/`add-port` in one transaction: bridge `bridge` with one port per
    /// interface `(name, type, external_ids)`, and the root row with `ext` when it is new.
    fn add(&mut self, bridge: &str, ifaces: &[Iface<'_>]) {
        let snap = self.snap();
        let mut ops = Vec::new();
        let mut port_refs = Vec::new();
        for (n, (name, ty, ext)) in ifaces.iter().enumerate() {
            let ext: Vec<Value> = ext.iter().map(|(k, v)| json!([k, v])).collect();
            ops.push(
                json!({"op": "insert", "table": "Interface", "uuid-name": format!("i{n}"),
                "row": {"name": name, "type": ty, "external_ids": ["map", ext]}}),
            );
            ops.push(
                json!({"op": "insert", "table": "Port", "uuid-name": format!("p{n}"),
                "row": {"name": name, "interfaces": ["named-uuid", format!("i{n}")]}}),
            );
            port_refs.push(json!(["named-uuid", format!("p{n}")]));
        }
        match snap.bridge_by_name(bridge) {
            Some(b) => ops.push(json!({"op": "mutate", "table": "Bridge",
                "where": [["_uuid", "==", ["uuid", b.uuid.to_string()]]],
                "mutations": [["ports", "insert", ["set", port_refs]]]})),
            None => {
                ops.push(json!({"op": "insert", "table": "Bridge", "uuid-name": "br",
                    "row": {"name": bridge, "ports": ["set", port_refs]}}));
                let root = snap.open_vswitch_row().expect("root row").uuid;
                ops.push(json!({"op": "mutate", "table": "Open_vSwitch",
                    "where": [["_uuid", "==", ["uuid", root.to_string()]]],
                    "mutations": [["bridges", "insert", ["set", [["named-uuid", "br"]]]]]}));
            }
        }
        self.bump(&mut ops);
        self.run(ops);
    }

    fn bump(&self, ops: &mut Vec<Value>) {
        let root = self.snap().open_vswitch_row().expect("root row").uuid;
        ops.push(json!({"op": "mutate", "table": "Open_vSwitch",
            "where": [["_uuid", "==", ["uuid", root.to_string()]]],
            "mutations": [["next_cfg", "+=", 1]]}));
    }

    fn init(ext: &[(&str, &str)]) -> Self {
        let mut d = Db::new();
        let ext: Vec<Value> = ext.iter().map(|(k, v)| json!([k, v])).collect();
        d.run(vec![json!({"op": "insert", "table": "Open_vSwitch",
            "row": {"external_ids": ["map", ext]}})]);
        d
    }

    fn iface(&self, name: &str) -> Interface {
        self.snap().interface_by_name(name).expect(name).clone()
    }
}

fn up(ifindex: u32, mac: [u8; 6]) -> Observed {
    Observed {
        ifindex: Some(ifindex),
        mac: Some(mac),
        mtu: Some(1500),
        admin_up: true,
        link_up: true,
        error: None,
    }
}

#[test]
fn the_plan_attaches_system_interfaces_by_iface_id_and_refuses_the_rest_with_reasons() {
    let mut d = Db::init(&[("system-id", "hv1")]);
    d.add(
        "br-int",
        &[
            ("br-int", "internal", &[]),
            (
                "tap0",
                "",
                &[("iface-id", "vm1"), ("attached-mac", "0a:00:00:00:00:01")],
            ),
            ("tap9", "system", &[("iface-id", "vm1")]),
            (
                "tap1",
                "",
                &[("iface-id", "vm2"), ("attached-mac", "bogus")],
            ),
            ("tap2", "", &[]),
            ("patch-x", "patch", &[("iface-id", "vm3")]),
        ],
    );
    d.add("br-ex", &[("eth1", "", &[("iface-id", "vm4")])]);
    let p = plan(&d.snap());
    assert_eq!(p.bridge, "br-int");
    assert!(p.bridge_found);
    assert_eq!(p.system_id.as_deref(), Some("hv1"));
    assert_eq!(p.next_cfg, 2);
    let role = |n: &str| p.interfaces[n].role.clone();
    assert_eq!(
        role("tap0"),
        Role::Attach {
            iface_id: "vm1".into(),
            mac: Some([0x0a, 0, 0, 0, 0, 1])
        }
    );
    assert_eq!(
        role("tap1"),
        Role::Attach {
            iface_id: "vm2".into(),
            mac: None
        }
    );
    assert_eq!(role("tap2"), Role::Unbound);
    let refused = |n: &str| match role(n) {
        Role::Refused(why) => why,
        r => panic!("{n} is {r:?}, not refused"),
    };
    assert!(refused("tap9").contains("tap0 is already attached to logical port vm1"));
    assert!(refused("patch-x").contains("interface type \"patch\""));
    assert!(refused("br-int").contains("\"internal\""));
    assert!(refused("eth1").contains("not bridge br-ex"));
    let attached: Vec<_> = p.attached().map(|(n, id, _)| (n, id)).collect();
    assert_eq!(attached, [("tap0", "vm1"), ("tap1", "vm2")]);
}

#[test]
fn ovn_bridge_names_the_integration_bridge() {
    let mut d = Db::init(&[("ovn-bridge", "br-hf")]);
    d.add("br-int", &[("tap0", "", &[("iface-id", "vm1")])]);
    d.add("br-hf", &[("tap1", "", &[("iface-id", "vm2")])]);
    let p = plan(&d.snap());
    assert_eq!(p.bridge, "br-hf");
    let attached: Vec<_> = p.attached().map(|(n, id, _)| (n, id)).collect();
    assert_eq!(attached, [("tap1", "vm2")]);
    assert!(matches!(p.interfaces["tap0"].role, Role::Refused(_)));
    let none = plan(&Db::init(&[]).snap());
    assert!(!none.bridge_found);
    assert_eq!(none.bridge, DEFAULT_BRIDGE);
}

#[test]
fn ofports_keep_row_numbers_honour_requests_and_fill_the_lowest_free() {
    let mut d = Db::init(&[]);
    d.add(
        "br-int",
        &[
            ("a", "", &[("iface-id", "pa")]),
            ("b", "", &[("iface-id", "pb")]),
            ("c", "", &[]),
            ("d", "", &[("iface-id", "pd")]),
            ("e", "", &[("iface-id", "pe")]),
        ],
    );
    // Numbers the rows hold from a previous datapath (b and d both claim 3: the first by name
    // keeps it) and a request for a held number (e asks for 7, which a holds).
    let set = |d: &mut Db, n: &str, col: &str, v: i64| {
        let u = d.iface(n).uuid;
        d.run(vec![json!({"op": "update", "table": "Interface",
            "where": [["_uuid", "==", ["uuid", u.to_string()]]], "row": {col: v}})]);
    };
    set(&mut d, "a", "ofport", 7);
    set(&mut d, "b", "ofport", 3);
    set(&mut d, "d", "ofport", 3);
    set(&mut d, "e", "ofport_request", 7);
    set(&mut d, "c", "ofport_request", 2);
    let snap = d.snap();
    let p = plan(&snap);
    let mut o = Ofports::default();
    o.assign(&snap, &p, &BTreeSet::new());
    let got: Vec<_> = ["a", "b", "c", "d", "e"].map(|n| o.get(n).unwrap()).into();
    assert_eq!(got, [7, 3, 2, 1, 4]);
    // A failure gives the number back as -1; the others keep theirs, and a new interface
    // takes the lowest free number.
    d.add("br-int", &[("f", "", &[("iface-id", "pf")])]);
    let snap = d.snap();
    let p = plan(&snap);
    o.assign(&snap, &p, &BTreeSet::from(["b".to_string()]));
    let got: Vec<_> = ["a", "b", "c", "d", "e", "f"]
        .map(|n| o.get(n).unwrap())
        .into();
    assert_eq!(got, [7, OFPORT_FAILED, 2, 1, 4, 3]);
}

#[test]
fn write_ops_report_what_was_seen_and_cur_cfg_follows_only_when_every_interface_was_tried() {
    let mut d = Db::init(&[]);
    d.add(
        "br-int",
        &[
            ("tap0", "", &[("iface-id", "vm1")]),
            ("tap1", "", &[("iface-id", "vm2")]),
            ("gre0", "gre", &[]),
        ],
    );
    let snap = d.snap();
    let p = plan(&snap);
    let mut o = Ofports::default();
    let mut seen = BTreeMap::from([("tap0".to_string(), up(11, [2, 0, 0, 0, 0, 1]))]);
    o.assign(&snap, &p, &BTreeSet::new());
    // tap1 not tried yet: its row and cur_cfg stay.
    let ops = write_ops(&snap, &p, &o, &seen);
    d.run(ops);
    assert_eq!(d.snap().open_vswitch_row().unwrap().cur_cfg, 0);
    let t0 = d.iface("tap0");
    assert_eq!(t0.ofport, Some(1));
    assert_eq!(t0.ifindex, Some(11));
    assert_eq!(t0.mac_in_use.as_deref(), Some("02:00:00:00:00:01"));
    assert_eq!(t0.link_state, Some(InterfaceLinkState::Up));
    assert_eq!(t0.admin_state, Some(InterfaceAdminState::Up));
    assert_eq!(t0.mtu, Some(1500));
    assert_eq!(t0.error, None);
    assert_eq!(d.iface("tap1").ofport, None);
    let gre = d.iface("gre0");
    assert_eq!(gre.ofport, Some(OFPORT_FAILED));
    assert!(gre.error.unwrap().contains("\"gre\""));
    // tap1 fails to open: the configuration is complete.
    seen.insert(
        "tap1".into(),
        Observed {
            error: Some("could not open network device tap1 (No such device)".into()),
            ..Observed::default()
        },
    );
    let snap = d.snap();
    o.assign(&snap, &p, &BTreeSet::from(["tap1".to_string()]));
    d.run(write_ops(&snap, &p, &o, &seen));
    let snap = d.snap();
    assert_eq!(snap.open_vswitch_row().unwrap().cur_cfg, 1);
    let t1 = d.iface("tap1");
    assert_eq!(t1.ofport, Some(OFPORT_FAILED));
    assert_eq!(
        t1.error.as_deref(),
        Some("could not open network device tap1 (No such device)")
    );
    assert_eq!(t1.link_state, None);
    // Nothing left to write: a write never causes another.
    assert_eq!(write_ops(&snap, &p, &o, &seen), Vec::<Value>::new());
    // tap1 appears and its link goes down: the row follows, its error is cleared.
    let mut t1_seen = up(12, [2, 0, 0, 0, 0, 2]);
    t1_seen.link_up = false;
    seen.insert("tap1".into(), t1_seen);
    o.assign(&snap, &p, &BTreeSet::new());
    d.run(write_ops(&snap, &p, &o, &seen));
    let t1 = d.iface("tap1");
    assert_eq!(t1.error, None);
    assert_eq!(t1.ofport, Some(2));
    assert_eq!(t1.link_state, Some(InterfaceLinkState::Down));
    assert_eq!(write_ops(&d.snap(), &p, &o, &seen), Vec::<Value>::new());
}

#[test]
fn macs_parse_as_ovs_takes_them() {
    assert_eq!(parse_mac("0a:00:00:00:00:01"), Some([10, 0, 0, 0, 0, 1]));
    assert_eq!(parse_mac("a:0:0:0:0:1"), Some([10, 0, 0, 0, 0, 1]));
    for bad in [
        "",
        "0a:00:00:00:00",
        "0a:00:00:00:00:01:02",
        "0a::00:00:00:01",
        "zz:00:00:00:00:01",
        "+a:00:00:00:00:01",
        "100:00:00:00:00:01",
    ] {
        assert_eq!(parse_mac(bad), None, "{bad}");
    }
}
