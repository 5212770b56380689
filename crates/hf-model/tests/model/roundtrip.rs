//! Row → typed → row for every table of both schemas, with a non-default value in every column.

use hf_model::{Column, Table, nb, sb};
use hf_ovsdb::{Datum, Row, Uuid};

use super::values::non_default;

/// A row of `T`'s table with every column set to a non-default value generated from the schema.
fn full_row<T: Table>() -> Row {
    let ts = T::schema();
    Row {
        uuid: Uuid::from_u128(0x1111),
        version: Uuid::from_u128(0x2222),
        cols: ts
            .columns
            .iter()
            .map(|c| non_default(&c.ty, &format!("{}.{}", ts.name, c.name)))
            .collect(),
    }
}

fn check_table<T: Table>() -> usize {
    let ts = T::schema();
    let row = full_row::<T>();
    for (c, d) in ts.columns.iter().zip(&row.cols) {
        assert_ne!(
            &c.ty.default_datum(),
            d,
            "{}.{}: value must not be the default",
            ts.name,
            c.name
        );
        d.check(&c.ty)
            .unwrap_or_else(|e| panic!("{}.{}: generated value invalid: {e}", ts.name, c.name));
    }
    let typed = T::from_row(ts, &row).unwrap_or_else(|e| panic!("{}: {e}", T::NAME));
    assert_eq!(typed.uuid(), row.uuid);
    assert_eq!(
        typed.to_row(row.version),
        row,
        "{}: row → typed → row",
        T::NAME
    );
    assert_eq!(typed.to_datums(), row.cols);
    typed.check_known().expect("every value is listed");

    // JSON row objects.
    let json = typed.to_json_row();
    assert_eq!(
        json.len(),
        ts.columns.len(),
        "{}: every column in the JSON row",
        T::NAME
    );
    for (c, d) in ts.columns.iter().zip(&row.cols) {
        assert_eq!(json[&c.name], d.to_json(&c.ty), "{}.{}", ts.name, c.name);
    }
    let back = T::from_json_row(row.uuid, &json).expect("JSON row parses");
    assert_eq!(back, typed, "{}: typed → JSON → typed", T::NAME);

    // Column identifiers agree with the schema and the datums.
    assert_eq!(T::Column::ALL.len(), ts.columns.len());
    for (i, c) in T::Column::ALL.iter().enumerate() {
        assert_eq!(c.index(), Some(i));
        assert_eq!(c.name(), ts.columns[i].name);
        assert_eq!(
            typed.column_datum(*c),
            row.cols[i],
            "{}.{}",
            ts.name,
            c.name()
        );
        let one = typed.json_columns(&[*c]);
        assert_eq!(one.keys().collect::<Vec<_>>(), vec![c.name()]);
    }

    // Defaults are OVSDB's defaults; every column differs from them here.
    let default = T::default();
    let defaults: Vec<Datum> = ts.columns.iter().map(|c| c.ty.default_datum()).collect();
    assert_eq!(
        default.to_datums(),
        defaults,
        "{}: Default is the OVSDB default row",
        T::NAME
    );
    assert_eq!(typed.changed_columns(&default), T::Column::ALL.to_vec());
    assert_eq!(typed.update_json_row(&default), json);
    assert!(typed.update_json_row(&typed).is_empty());
    ts.columns.len()
}

struct RoundTrip {
    tables: usize,
    columns: usize,
}

impl nb::TableVisitor for RoundTrip {
    fn visit<T: nb::SnapshotTable>(&mut self) {
        self.tables += 1;
        self.columns += check_table::<T>();
    }
}

impl sb::TableVisitor for RoundTrip {
    fn visit<T: sb::SnapshotTable>(&mut self) {
        self.tables += 1;
        self.columns += check_table::<T>();
    }
}

/// Every table and every column was checked.
fn assert_covered(v: &RoundTrip, schema: &hf_ovsdb::Schema) {
    assert_eq!(v.tables, schema.tables.len());
    let columns: usize = schema.tables.iter().map(|t| t.columns.len()).sum();
    assert_eq!(v.columns, columns);
}

#[test]
fn every_nb_table_round_trips() {
    let mut v = RoundTrip {
        tables: 0,
        columns: 0,
    };
    nb::for_each_table(&mut v);
    assert_covered(&v, nb::schema());
}

#[test]
fn every_sb_table_round_trips() {
    let mut v = RoundTrip {
        tables: 0,
        columns: 0,
    };
    sb::for_each_table(&mut v);
    assert_covered(&v, sb::schema());
}

/// AnyRow dispatches by table name to the same conversions.
#[test]
fn any_row_dispatches_by_table_name() {
    for t in &nb::schema().tables {
        let row = Row {
            uuid: Uuid::from_u128(7),
            version: Uuid::nil(),
            cols: t
                .columns
                .iter()
                .map(|c| non_default(&c.ty, &c.name))
                .collect(),
        };
        let any = nb::AnyRow::from_row(t, &row)
            .expect("converts")
            .expect("known table");
        assert_eq!(any.table(), t.name);
        assert_eq!(any.uuid(), row.uuid);
        assert_eq!(any.to_row(Uuid::nil()), row);
        let back = nb::AnyRow::from_json_row(&t.name, row.uuid, &any.to_json_row())
            .expect("parses")
            .expect("known table");
        assert_eq!(back, any);
        let default = nb::AnyRow::default_for(&t.name).expect("known table");
        let defaults: Vec<Datum> = t.columns.iter().map(|c| c.ty.default_datum()).collect();
        assert_eq!(default.to_datums(), defaults);
    }
    assert!(nb::AnyRow::default_for("No_Such_Table").is_none());
}

/// Fields hold what their columns hold (a swapped field/column pair would still round-trip).
#[test]
fn fields_hold_their_own_columns() {
    let row = full_row::<nb::Nat>();
    let ts = nb::Nat::schema();
    let nat = nb::Nat::from_row(ts, &row).expect("converts");
    let col = |n: &str| &row.cols[ts.column_index(n).expect("column")];
    assert_eq!(Some(nat.match_.as_str()), col("match").keys[0].as_str());
    assert_eq!(Some(nat.priority), col("priority").keys[0].as_integer());
    assert_eq!(Some(nat.type_.as_str()), col("type").keys[0].as_str());
    assert_eq!(
        Some(nat.logical_ip.as_str()),
        col("logical_ip").keys[0].as_str()
    );
    assert_eq!(
        nat.external_mac.as_deref(),
        col("external_mac").keys[0].as_str()
    );
    assert_eq!(
        nat.allowed_ext_ips.map(|r| r.uuid()),
        col("allowed_ext_ips").keys[0].as_uuid()
    );
    let pb = nb::LogicalSwitchPort::from_row(
        nb::LogicalSwitchPort::schema(),
        &full_row::<nb::LogicalSwitchPort>(),
    )
    .expect("converts");
    assert_eq!(pb.tag, Some(4095));
    assert_eq!(pb.tag_request, Some(4095));
    assert!(pb.name.starts_with("Logical_Switch_Port.name"));
    assert!(pb.type_.starts_with("Logical_Switch_Port.type"));
}
