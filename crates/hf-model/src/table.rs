//! What every generated row type and column enum provides.

use std::fmt::Debug;

use hf_ovsdb::{Datum, Row, TableSchema};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::error::ModelError;

/// A typed row of one table of holdfast's schema (`nb::LogicalSwitch`, `sb::PortBinding`, ...).
///
/// Conversions go both ways:
/// - from an [`hf_ovsdb::Row`] of any schema that shares the table ([`Table::from_row`]): columns
///   are found by name, so a peer whose schema lacks a column (OVN 23.03 has no `NAT.match`)
///   gives that field its default, and columns holdfast does not know are skipped;
/// - to datums and rows in holdfast's column order (names sorted, as [`hf_ovsdb::Schema`] keeps
///   them), and to the JSON row objects of `insert` and `update` operations.
pub trait Table: Clone + Debug + PartialEq + Default + 'static {
    /// The table's name in the schema (`"Logical_Switch"`).
    const NAME: &'static str;
    /// The table's typed column identifiers.
    type Column: Column;

    /// `_uuid`.
    fn uuid(&self) -> Uuid;

    /// The table as holdfast's schema defines it.
    fn schema() -> &'static TableSchema;

    /// Convert a row of table `ts` (which may come from another schema version).
    fn from_row(ts: &TableSchema, row: &Row) -> Result<Self, ModelError>;

    /// One datum per column of [`Table::schema`], in its order.
    fn to_datums(&self) -> Vec<Datum>;

    /// The datum of one column.
    fn column_datum(&self, column: Self::Column) -> Datum;

    /// Enum columns whose values holdfast's schema does not list (kept as `Other`).
    fn unknown_values(&self) -> Vec<(Self::Column, String)>;

    /// The row, with version `version`.
    fn to_row(&self, version: Uuid) -> Row {
        Row {
            uuid: self.uuid(),
            version,
            cols: self.to_datums(),
        }
    }

    /// Every column as a JSON row object (without `_uuid`), for an `insert` operation.
    fn to_json_row(&self) -> Map<String, Value> {
        let ts = Self::schema();
        ts.columns
            .iter()
            .zip(self.to_datums())
            .map(|(c, d)| (c.name.clone(), d.to_json(&c.ty)))
            .collect()
    }

    /// The given columns as a JSON row object.
    fn json_columns(&self, columns: &[Self::Column]) -> Map<String, Value> {
        let ts = Self::schema();
        columns
            .iter()
            .filter_map(|c| {
                let i = c.index()?;
                Some((
                    ts.columns[i].name.clone(),
                    self.column_datum(*c).to_json(&ts.columns[i].ty),
                ))
            })
            .collect()
    }

    /// The columns whose values differ between `old` and `self`.
    fn changed_columns(&self, old: &Self) -> Vec<Self::Column> {
        let (a, b) = (old.to_datums(), self.to_datums());
        Self::Column::ALL
            .iter()
            .copied()
            .filter(|c| c.index().is_some_and(|i| a[i] != b[i]))
            .collect()
    }

    /// The JSON row object of an `update` operation that turns `old` into `self`: only the
    /// changed columns (empty when nothing changed).
    fn update_json_row(&self, old: &Self) -> Map<String, Value> {
        self.json_columns(&self.changed_columns(old))
    }

    /// An `insert` operation for this row. A non-nil `uuid` goes into the operation's `uuid`
    /// member, so that the row keeps it and other rows of the same transaction can refer to it
    /// (ovsdb-server and hf-ovsdb accept it); columns at their default are left out.
    fn insert_op(&self) -> Value {
        let ts = Self::schema();
        let row: Map<String, Value> = ts
            .columns
            .iter()
            .zip(self.to_datums())
            .filter(|(c, d)| *d != c.ty.default_datum())
            .map(|(c, d)| (c.name.clone(), d.to_json(&c.ty)))
            .collect();
        let mut op = json!({"op": "insert", "table": Self::NAME, "row": row});
        if !self.uuid().is_nil() {
            op["uuid"] = json!(self.uuid().to_string());
        }
        op
    }

    /// An `update` operation that turns row `old` (same UUID) into `self`; `None` when no
    /// column changed.
    fn update_op(&self, old: &Self) -> Option<Value> {
        let row = self.update_json_row(old);
        (!row.is_empty()).then(|| {
            json!({"op": "update", "table": Self::NAME, "where": uuid_where(self.uuid()),
                   "row": row})
        })
    }

    /// A `delete` operation for this row.
    fn delete_op(&self) -> Value {
        json!({"op": "delete", "table": Self::NAME, "where": uuid_where(self.uuid())})
    }

    /// Parse a JSON row object (as `select` returns it, or the `initial`/`insert` member of an
    /// update2 notification) of holdfast's schema. Missing columns take their defaults; `_uuid`,
    /// `_version` and unknown columns are skipped.
    fn from_json_row(uuid: Uuid, row: &Map<String, Value>) -> Result<Self, ModelError> {
        let ts = Self::schema();
        let mut cols: Vec<Datum> = ts.defaults().to_vec();
        for (name, v) in row {
            let Some(i) = ts.column_index(name) else {
                continue;
            };
            cols[i] = parse_datum(Self::NAME, uuid, &ts.columns[i], v)?;
        }
        Self::from_row(
            ts,
            &Row {
                uuid,
                version: Uuid::nil(),
                cols,
            },
        )
    }

    /// Fails with [`ModelError::UnknownEnum`] naming the first enum value holdfast's schema
    /// does not list.
    fn check_known(&self) -> Result<(), ModelError> {
        match self.unknown_values().into_iter().next() {
            None => Ok(()),
            Some((c, value)) => Err(ModelError::UnknownEnum {
                table: Self::NAME.to_string(),
                column: c.name().to_string(),
                uuid: self.uuid(),
                value,
            }),
        }
    }
}

/// The typed column identifiers of one table: use them to build `where` and `columns` lists
/// without spelling column names.
pub trait Column: Copy + Debug + Eq + Ord + 'static {
    /// Every user column, in schema order (without `_uuid`).
    const ALL: &'static [Self];

    /// The column's name on the wire (`_uuid` for the row UUID).
    fn name(self) -> &'static str;

    /// Index among the schema's user columns; `None` for `_uuid`.
    fn index(self) -> Option<usize>;

    /// A `<condition>` on this column: `[name, op, value]`.
    fn condition(self, op: &str, value: Value) -> Value {
        json!([self.name(), op, value])
    }
}

/// `[["_uuid", "==", ["uuid", UUID]]]`.
fn uuid_where(uuid: Uuid) -> Value {
    json!([["_uuid", "==", ["uuid", uuid.to_string()]]])
}

/// Parse one column's JSON value (a value or an update2 diff). Only atom types are checked
/// here: element counts are checked when the datum becomes a typed field, and enum values and
/// ranges are not checked at all, so that a newer peer's values reach the typed row (enum
/// columns keep unknown values as `Other`).
pub(crate) fn parse_datum(
    table: &str,
    uuid: Uuid,
    col: &hf_ovsdb::ColumnSchema,
    v: &Value,
) -> Result<Datum, ModelError> {
    let mut no_named = |n: &str| {
        Err(hf_ovsdb::OvsdbError::syntax(format!(
            "named-uuid \"{n}\" outside a transaction"
        )))
    };
    Datum::from_json_unchecked(&col.ty, v, &mut no_named).map_err(|e| ModelError::Column {
        table: table.to_string(),
        column: col.name.clone(),
        uuid,
        detail: e.details,
    })
}

/// One row's change. Deliberately exhaustive: a consumer handles all three.
#[derive(Debug, Clone, PartialEq)]
pub enum RowDelta<T> {
    /// A new row.
    Insert(T),
    /// A changed row, before and after.
    Update {
        /// Before.
        old: T,
        /// After.
        new: T,
    },
    /// A removed row, as it was.
    Delete(T),
}

impl<T: Table> RowDelta<T> {
    /// The row's UUID.
    pub fn uuid(&self) -> Uuid {
        match self {
            RowDelta::Insert(r) | RowDelta::Delete(r) => r.uuid(),
            RowDelta::Update { new, .. } => new.uuid(),
        }
    }

    /// The row before the change, if it existed.
    pub fn before(&self) -> Option<&T> {
        match self {
            RowDelta::Insert(_) => None,
            RowDelta::Update { old, .. } | RowDelta::Delete(old) => Some(old),
        }
    }

    /// The operation that makes this change in a database that holds the rows as `before`
    /// says (`insert` with the row's UUID, `update` of the changed columns, or `delete`);
    /// `None` for an update that changes nothing.
    pub fn to_op(&self) -> Option<Value> {
        match self {
            RowDelta::Insert(new) => Some(new.insert_op()),
            RowDelta::Update { old, new } => new.update_op(old),
            RowDelta::Delete(old) => Some(old.delete_op()),
        }
    }

    /// The row after the change, if it still exists.
    pub fn after(&self) -> Option<&T> {
        match self {
            RowDelta::Insert(new) | RowDelta::Update { new, .. } => Some(new),
            RowDelta::Delete(_) => None,
        }
    }
}
