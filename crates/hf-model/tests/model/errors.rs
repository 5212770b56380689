//! Bad input: type mismatches, unknown enum values, malformed or inconsistent updates, and
//! rows from a schema version that lacks columns.

use std::sync::Arc;

use hf_model::{ModelError, NbSnapshot, Table, nb};
use hf_ovsdb::{Atom, Database, Datum, Row, Schema, Uuid};
use serde_json::{Value, json};

const U1: &str = "00000000-0000-4000-8000-000000000001";

/// holdfast's NB schema with `edit` applied to its JSON.
fn edited_schema(edit: impl FnOnce(&mut Value)) -> Schema {
    let mut v = nb::schema().to_json().clone();
    edit(&mut v);
    Schema::from_json(&v).expect("edited schema is valid")
}

fn column_error(e: &ModelError) -> (&str, &str, Uuid) {
    match e {
        ModelError::Column {
            table,
            column,
            uuid,
            ..
        } => (table, column, *uuid),
        other => panic!("expected a column error, got {other:?}"),
    }
}

#[test]
fn type_mismatch_names_table_column_and_row() {
    // A peer whose Logical_Switch.name is an integer.
    let schema = edited_schema(|v| {
        v["tables"]["Logical_Switch"]["columns"]["name"] = json!({"type": "integer"});
    });
    let ts = schema.table("Logical_Switch").expect("table");
    let uuid = Uuid::from_u128(99);
    let mut cols: Vec<Datum> = ts.columns.iter().map(|c| c.ty.default_datum()).collect();
    cols[ts.column_index("name").expect("name")] = Datum::scalar(Atom::Integer(5));
    let row = Row {
        uuid,
        version: Uuid::nil(),
        cols,
    };
    let e = nb::LogicalSwitch::from_row(ts, &row).expect_err("integer name");
    assert_eq!(column_error(&e), ("Logical_Switch", "name", uuid));
    let msg = e.to_string();
    for part in [
        "Logical_Switch",
        "name",
        &uuid.to_string(),
        "expected string",
    ] {
        assert!(msg.contains(part), "{msg:?} lacks {part:?}");
    }
}

#[test]
fn wrong_element_counts_are_errors() {
    let ts = nb::LogicalSwitchPort::schema();
    let uuid = Uuid::from_u128(5);
    let base: Vec<Datum> = ts.columns.iter().map(|c| c.ty.default_datum()).collect();
    let at = |name: &str| ts.column_index(name).expect("column");
    let cases = [
        // A scalar with no value, an optional with two, a set where a map belongs.
        ("name", Datum::empty()),
        (
            "parent_name",
            Datum::set_from(vec![Atom::string("a"), Atom::string("b")]),
        ),
        ("options", Datum::set_from(vec![Atom::string("a")])),
        (
            "addresses",
            Datum::map_from(vec![(Atom::string("a"), Atom::string("b"))]),
        ),
    ];
    for (col, d) in cases {
        let mut cols = base.clone();
        cols[at(col)] = d;
        let row = Row {
            uuid,
            version: Uuid::nil(),
            cols,
        };
        let e = nb::LogicalSwitchPort::from_row(ts, &row).expect_err(col);
        assert_eq!(column_error(&e), ("Logical_Switch_Port", col, uuid), "{e}");
    }
}

#[test]
fn unknown_enum_values_are_kept_and_reported() {
    let row = json!({"direction": "to-lport", "action": "allow-fancy", "priority": 1,
                     "match": "1", "severity": "critical"});
    let uuid = Uuid::parse_str(U1).expect("uuid");
    let acl = nb::Acl::from_json_row(uuid, row.as_object().expect("object")).expect("converts");
    assert_eq!(acl.action, nb::AclAction::Other("allow-fancy".into()));
    assert_eq!(acl.action.unknown(), Some("allow-fancy"));
    assert_eq!(acl.direction, nb::AclDirection::ToLport);
    assert_eq!(
        acl.unknown_values(),
        vec![
            (nb::AclColumn::Action, "allow-fancy".to_string()),
            (nb::AclColumn::Severity, "critical".to_string())
        ]
    );
    match acl.check_known() {
        Err(ModelError::UnknownEnum {
            table,
            column,
            uuid: u,
            value,
        }) => {
            assert_eq!(
                (table.as_str(), column.as_str(), u, value.as_str()),
                ("ACL", "action", uuid, "allow-fancy")
            );
        }
        other => panic!("expected UnknownEnum, got {other:?}"),
    }
    // The value survives a round trip.
    assert_eq!(acl.to_json_row()["action"], json!("allow-fancy"));
    // Known spellings always parse to their variant, and Other never equals a known value
    // under another spelling.
    for v in nb::AclAction::ALL {
        assert_eq!(&nb::AclAction::from_wire(v.as_str()), v);
        assert!(v.unknown().is_none());
    }
    assert_eq!(
        nb::AclAction::from_wire("allow-related"),
        nb::AclAction::AllowRelated
    );
}

#[test]
fn updates2_type_mismatch_names_table_column_and_row() {
    let mut s = NbSnapshot::new();
    let e = s
        .apply_updates2(&json!({"Logical_Switch": {U1: {"insert": {"name": 5}}}}))
        .expect_err("integer name");
    assert_eq!(
        column_error(&e),
        ("Logical_Switch", "name", Uuid::parse_str(U1).expect("uuid"))
    );
}

#[test]
fn inconsistent_updates_are_errors_and_change_nothing() {
    let mut s = NbSnapshot::new();
    s.apply_updates2(&json!({"Logical_Switch": {U1: {"insert": {"name": "sw0"}}}}))
        .expect("insert");
    let before = s.clone();
    let u2 = "00000000-0000-4000-8000-000000000002";
    let bad = [
        // Modify or delete of a row the snapshot lacks; insert of one it holds.
        json!({"Logical_Switch": {u2: {"modify": {"name": "x"}}}}),
        json!({"Logical_Switch": {u2: {"delete": null}}}),
        json!({"Logical_Switch": {U1: {"insert": {"name": "again"}}}}),
        json!({"Logical_Switch": {U1: {"initial": {}}}}),
    ];
    for u in &bad {
        match s.apply_updates2(u) {
            Err(ModelError::Row { table, .. }) => assert_eq!(table, "Logical_Switch"),
            other => panic!("{u}: expected a row error, got {other:?}"),
        }
        assert_eq!(s, before, "{u}: snapshot changed");
    }
    let malformed = [
        json!([]),
        json!({"Logical_Switch": []}),
        json!({"Logical_Switch": {"not-a-uuid": {"delete": null}}}),
        json!({"Logical_Switch": {U1: {"modify": {}, "delete": null}}}),
        json!({"Logical_Switch": {U1: {"rename": {}}}}),
        json!({"Logical_Switch": {U1: {"modify": "x"}}}),
    ];
    for u in &malformed {
        match s.apply_updates2(u) {
            Err(ModelError::Update { .. }) => {}
            other => panic!("{u}: expected a malformed-update error, got {other:?}"),
        }
        assert_eq!(s, before, "{u}: snapshot changed");
    }
    // All or nothing: a good insert next to a bad modify is not applied.
    let mixed = json!({
        "Address_Set": {u2: {"insert": {"name": "as"}}},
        "Logical_Switch": {u2: {"modify": {"name": "x"}}},
    });
    assert!(s.apply_updates2(&mixed).is_err());
    assert_eq!(s, before);
}

/// A database of OVN 23.03's NB schema has no NAT.match/priority: rows convert with the
/// defaults, and typed deltas still work.
#[test]
fn rows_of_a_schema_without_extension_columns_take_defaults() {
    let schema = Arc::new(edited_schema(|v| {
        let nat = v["tables"]["NAT"]["columns"].as_object_mut().expect("NAT");
        nat.remove("match");
        nat.remove("priority");
        v["tables"]["Unknown_Table"] =
            json!({"columns": {"x": {"type": "integer"}}, "isRoot": true});
    }));
    let mut db = Database::new(schema.clone(), 1);
    let ops = [
        json!({"op": "insert", "table": "NAT", "uuid-name": "n", "row": {
            "type": "dnat_and_snat", "logical_ip": "10.0.0.5", "external_ip": "172.16.0.5",
            "logical_port": "vm1", "external_mac": "00:00:00:00:00:05"}}),
        json!({"op": "insert", "table": "Logical_Router", "row": {"name": "lr0",
            "nat": ["named-uuid", "n"]}}),
        json!({"op": "insert", "table": "Unknown_Table", "row": {"x": 1}}),
    ];
    let delta = match hf_ovsdb::txn::execute(&mut db, &ops, &hf_ovsdb::txn::NoLocks) {
        hf_ovsdb::txn::TxnOutcome::Commit { delta, .. } => delta,
        other => panic!("{other:?}"),
    };
    db.apply(&delta);
    let snap = NbSnapshot::from_db(&db).expect("converts");
    let nat = snap.nat().values().next().expect("one NAT row");
    assert_eq!(nat.type_, nb::NatType::DnatAndSnat);
    assert_eq!((nat.match_.as_str(), nat.priority), ("", 0));
    assert_eq!(nat.logical_port.as_deref(), Some("vm1"));
    let lr = snap.logical_router_by_name("lr0").expect("router");
    assert_eq!(snap.get(*lr.nat.first().expect("nat ref")), Some(nat));
    // The unknown table is skipped; everything else is there.
    assert_eq!(snap.len(), 2);
    let typed = hf_model::NbDelta::from_txn(&db.schema, &delta).expect("typed");
    assert_eq!(typed.changed_tables(), vec!["Logical_Router", "NAT"]);
}

/// Databases of the installed OVN 23.03 schemas (real ovn-northd's and ovsdb-server's) convert:
/// every table's default row, and a NAT row without the extension columns.
#[test]
fn rows_of_ovn_23_03_databases_convert() {
    for (file, nb_side) in [("ovn-nb.ovsschema", true), ("ovn-sb.ovsschema", false)] {
        let path = std::path::Path::new("/usr/share/ovn").join(file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but {} is missing",
                path.display()
            );
            eprintln!("SKIP: {} is missing", path.display());
            return;
        };
        let schema = Schema::parse(&text).expect("OVN schema parses");
        for ts in &schema.tables {
            let row = Row {
                uuid: Uuid::from_u128(1),
                version: Uuid::nil(),
                cols: ts.columns.iter().map(|c| c.ty.default_datum()).collect(),
            };
            let converted = if nb_side {
                nb::AnyRow::from_row(ts, &row).map(|r| r.is_some())
            } else {
                hf_model::sb::AnyRow::from_row(ts, &row).map(|r| r.is_some())
            };
            assert_eq!(converted, Ok(true), "{file} table {}", ts.name);
        }
        if nb_side {
            let ts = schema.table("NAT").expect("NAT");
            assert!(
                ts.column_index("match").is_none(),
                "OVN 23.03 has no NAT.match"
            );
            let mut cols: Vec<Datum> = ts.columns.iter().map(|c| c.ty.default_datum()).collect();
            cols[ts.column_index("type").expect("type")] = Datum::scalar(Atom::string("snat"));
            let row = Row {
                uuid: Uuid::from_u128(2),
                version: Uuid::nil(),
                cols,
            };
            let nat = nb::Nat::from_row(ts, &row).expect("converts");
            assert_eq!(
                (nat.type_, nat.match_.as_str(), nat.priority),
                (nb::NatType::Snat, "", 0)
            );
        }
    }
}
