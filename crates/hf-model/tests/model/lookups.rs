//! Lookup indexes stay consistent with the rows through inserts, renames and deletes.

use hf_model::{NbSnapshot, RowDelta, RowRef, SbSnapshot, Table, nb, sb};
use hf_ovsdb::Uuid;
use serde_json::json;

fn u(n: u128) -> String {
    Uuid::from_u128(n).to_string()
}

#[test]
fn by_name_follows_inserts_renames_and_deletes() {
    let mut s = NbSnapshot::new();
    s.apply_updates2(&json!({"Logical_Switch": {
        u(1): {"initial": {"name": "sw0"}},
        u(2): {"initial": {"name": "sw1"}},
    }}))
    .expect("initial");
    assert_eq!(
        s.logical_switch_by_name("sw0").map(|r| r.uuid),
        Some(Uuid::from_u128(1))
    );
    assert_eq!(
        s.logical_switch_by_name("sw1").map(|r| r.uuid),
        Some(Uuid::from_u128(2))
    );
    assert!(s.logical_switch_by_name("sw2").is_none());

    // Rename sw1 → sw2.
    let d = s
        .apply_updates2(&json!({"Logical_Switch": {u(2): {"modify": {"name": "sw2"}}}}))
        .expect("modify");
    match d.logical_switch.as_slice() {
        [RowDelta::Update { old, new }] => {
            assert_eq!((old.name.as_str(), new.name.as_str()), ("sw1", "sw2"));
        }
        other => panic!("{other:?}"),
    }
    assert!(s.logical_switch_by_name("sw1").is_none());
    assert_eq!(
        s.logical_switch_by_name("sw2").map(|r| r.uuid),
        Some(Uuid::from_u128(2))
    );

    // Two switches named alike: the unique lookup refuses, the plural one lists both.
    s.apply_updates2(&json!({"Logical_Switch": {u(3): {"insert": {"name": "sw0"}}}}))
        .expect("insert");
    assert!(s.logical_switch_by_name("sw0").is_none());
    let all: Vec<Uuid> = s
        .logical_switch_all_by_name("sw0")
        .map(|r| r.uuid)
        .collect();
    assert_eq!(all, vec![Uuid::from_u128(1), Uuid::from_u128(3)]);

    s.apply_updates2(&json!({"Logical_Switch": {u(1): {"delete": null}}}))
        .expect("delete");
    assert_eq!(
        s.logical_switch_by_name("sw0").map(|r| r.uuid),
        Some(Uuid::from_u128(3))
    );
    assert_eq!(s.logical_switch().len(), 2);
}

#[test]
fn apply_of_a_delta_keeps_indexes_like_a_fresh_snapshot() {
    let mut s = NbSnapshot::new();
    let mut d = hf_model::NbDelta::default();
    let ls = |n: u128, name: &str| nb::LogicalSwitch {
        uuid: Uuid::from_u128(n),
        name: name.into(),
        ..Default::default()
    };
    d.logical_switch.push(RowDelta::Insert(ls(1, "a")));
    d.logical_switch.push(RowDelta::Insert(ls(2, "b")));
    s.apply(&d);
    let mut d2 = hf_model::NbDelta::default();
    d2.logical_switch.push(RowDelta::Update {
        old: ls(1, "a"),
        new: ls(1, "c"),
    });
    d2.logical_switch.push(RowDelta::Delete(ls(2, "b")));
    s.apply(&d2);
    assert!(s.logical_switch_by_name("a").is_none());
    assert!(s.logical_switch_by_name("b").is_none());
    assert_eq!(s.logical_switch_by_name("c"), Some(&ls(1, "c")));
    // The same rows inserted into an empty snapshot give an equal snapshot, indexes included.
    let mut fresh = NbSnapshot::new();
    let mut d3 = hf_model::NbDelta::default();
    d3.logical_switch.push(RowDelta::Insert(ls(1, "c")));
    fresh.apply(&d3);
    assert_eq!(s, fresh);
    assert_eq!(d2.len(), 2);
    assert_eq!(d2.changed_tables(), vec!["Logical_Switch"]);
    assert_eq!(d2.changes::<nb::LogicalSwitch>().len(), 2);
    assert!(hf_model::NbDelta::default().is_empty());
}

#[test]
fn sb_port_binding_by_logical_port_and_typed_refs() {
    let mut s = SbSnapshot::new();
    s.apply_updates2(&json!({
        "Chassis": {u(1): {"initial": {"name": "hv1", "hostname": "node1"}}},
        "Datapath_Binding": {u(2): {"initial": {"tunnel_key": 5}}},
        "Port_Binding": {u(3): {"initial": {
            "logical_port": "lsp1", "tunnel_key": 1,
            "datapath": ["uuid", u(2)], "chassis": ["uuid", u(1)]}}},
    }))
    .expect("initial");
    let pb = s.port_binding_by_logical_port("lsp1").expect("bound port");
    let dp: RowRef<sb::DatapathBinding> = pb.datapath;
    assert_eq!(s.get(dp).map(|d| d.tunnel_key), Some(5));
    let ch = pb.chassis.expect("chassis");
    assert_eq!(s.get(ch).map(|c| c.name.as_str()), Some("hv1"));
    assert_eq!(
        s.chassis_by_name("hv1").map(Table::uuid),
        Some(Uuid::from_u128(1))
    );
    assert_eq!(s.rows::<sb::Chassis>().len(), 1);
    assert!(s.sb_global_row().is_none());
    s.apply_updates2(&json!({"SB_Global": {u(9): {"insert": {"nb_cfg": 4}}}}))
        .expect("insert");
    assert_eq!(s.sb_global_row().map(|g| g.nb_cfg), Some(4));
    assert_eq!(format!("{dp:?}"), format!("Datapath_Binding({})", u(2)));
}

#[test]
fn column_identifiers_build_conditions() {
    use hf_model::Column;
    assert_eq!(nb::LogicalSwitchColumn::Name.name(), "name");
    assert_eq!(nb::NatColumn::Match.name(), "match");
    assert_eq!(nb::NatColumn::Uuid.name(), "_uuid");
    assert_eq!(nb::NatColumn::Uuid.index(), None);
    assert_eq!(
        nb::LogicalSwitchColumn::Name.condition("==", json!("sw0")),
        json!(["name", "==", "sw0"])
    );
}

#[test]
fn parent_indexes_follow_reference_changes() {
    let mut s = NbSnapshot::new();
    let uuid = |n: u128| json!(["uuid", u(n)]);
    s.apply_updates2(&json!({
        "NAT": {
            u(11): {"initial": {"type": "snat", "logical_ip": "10.0.0.0/24"}},
            u(12): {"initial": {"type": "dnat", "logical_ip": "10.0.0.5"}},
        },
        "ACL": {u(21): {"initial": {"action": "drop", "direction": "to-lport"}}},
        "Logical_Router": {u(1): {"initial": {"name": "lr0",
            "nat": ["set", [uuid(11), uuid(12)]]}}},
        "Port_Group": {u(2): {"initial": {"name": "pg0", "acls": uuid(21)}}},
    }))
    .expect("initial");
    let nat = |n: u128| RowRef::<nb::Nat>::new(Uuid::from_u128(n));
    let router_of = |s: &NbSnapshot, n| s.logical_router_by_nat(nat(n)).map(|r| r.name.clone());
    assert_eq!(router_of(&s, 11).as_deref(), Some("lr0"));
    assert_eq!(router_of(&s, 12).as_deref(), Some("lr0"));
    let acl = RowRef::<nb::Acl>::new(Uuid::from_u128(21));
    assert_eq!(
        s.port_group_by_acls(acl).map(|p| p.name.as_str()),
        Some("pg0")
    );
    assert!(s.logical_switch_by_acls(acl).is_none());

    // The router drops one NAT row (an update2 set diff toggles it), a second router takes it.
    s.apply_updates2(&json!({
        "Logical_Router": {
            u(1): {"modify": {"nat": uuid(12)}},
            u(3): {"insert": {"name": "lr1", "nat": uuid(12)}},
        },
    }))
    .expect("modify");
    assert_eq!(router_of(&s, 11).as_deref(), Some("lr0"));
    assert_eq!(router_of(&s, 12).as_deref(), Some("lr1"));

    // Two routers holding the same row: the unique lookup refuses, the plural one lists both.
    s.apply_updates2(&json!({"Logical_Router": {u(4): {"insert": {"name": "lr2",
        "nat": uuid(12)}}}}))
        .expect("insert");
    assert_eq!(router_of(&s, 12), None);
    let holders: Vec<&str> = s
        .logical_router_all_by_nat(nat(12))
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(holders, vec!["lr1", "lr2"]);

    // Deleting the port group forgets its ACL.
    s.apply_updates2(&json!({"Port_Group": {u(2): {"delete": null}}}))
        .expect("delete");
    assert!(s.port_group_by_acls(acl).is_none());
}

#[test]
fn sb_parent_indexes() {
    let mut s = SbSnapshot::new();
    s.apply_updates2(&json!({
        "Datapath_Binding": {u(1): {"initial": {"tunnel_key": 1}},
                             u(2): {"initial": {"tunnel_key": 2}}},
        "Port_Binding": {
            u(11): {"initial": {"logical_port": "a", "datapath": ["uuid", u(1)], "tunnel_key": 1}},
            u(12): {"initial": {"logical_port": "b", "datapath": ["uuid", u(1)], "tunnel_key": 2}},
            u(13): {"initial": {"logical_port": "c", "datapath": ["uuid", u(2)], "tunnel_key": 1}},
        },
        "Logical_Flow": {u(21): {"initial": {"logical_datapath": ["uuid", u(2)],
            "pipeline": "ingress", "match": "1", "actions": "next;"}}},
    }))
    .expect("initial");
    let dp = |n: u128| RowRef::<sb::DatapathBinding>::new(Uuid::from_u128(n));
    let ports = |s: &SbSnapshot, n| -> Vec<String> {
        s.port_binding_all_by_datapath(dp(n))
            .map(|p| p.logical_port.clone())
            .collect()
    };
    assert_eq!(ports(&s, 1), vec!["a", "b"]);
    assert_eq!(ports(&s, 2), vec!["c"]);
    assert_eq!(s.logical_flow_all_by_logical_datapath(dp(2)).count(), 1);
    assert_eq!(s.logical_flow_all_by_logical_datapath(dp(1)).count(), 0);
    // A port moves to the other datapath.
    s.apply_updates2(&json!({"Port_Binding": {u(12): {"modify": {"datapath": ["uuid", u(2)]}}}}))
        .expect("modify");
    assert_eq!(ports(&s, 1), vec!["a"]);
    assert_eq!(ports(&s, 2), vec!["b", "c"]);
}
