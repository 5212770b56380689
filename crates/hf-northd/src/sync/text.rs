//! The sync's operations written as JSON text straight from typed rows: the same operations
//! `hf_model::Table::insert_op`, `update_op` and `delete_op` build as trees (the tests
//! compare them), without the tree.
//!
//! What it does not do: check what it writes against a schema (the rows are `hf_model`'s,
//! typed by holdfast's schema; the server checks) or write any other operation kind.

use hf_model::{Column, Table};
use hf_ovsdb_net::client::OpsText;
use uuid::Uuid;

/// A JSON string.
fn string(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A UUID's text, as a JSON string.
fn uuid_string(out: &mut Vec<u8>, u: Uuid) {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    out.push(b'"');
    out.extend_from_slice(u.hyphenated().encode_lower(&mut buf).as_bytes());
    out.push(b'"');
}

/// `"where":[["_uuid","==",["uuid","…"]]]`.
fn uuid_where(out: &mut Vec<u8>, u: Uuid) {
    out.extend_from_slice(b"\"where\":[[\"_uuid\",\"==\",[\"uuid\",");
    uuid_string(out, u);
    out.extend_from_slice(b"]]]");
}

/// `Table::insert_op`'s operation: the columns not at their default, and the row's UUID
/// (when not nil) in `uuid`.
pub(super) fn insert<T: Table>(out: &mut Vec<u8>, row: &T) {
    let ts = T::schema();
    out.extend_from_slice(b"{\"op\":\"insert\",\"table\":");
    string(out, T::NAME);
    out.extend_from_slice(b",\"row\":{");
    let mut first = true;
    for ((c, d), default) in ts.columns.iter().zip(row.to_datums()).zip(ts.defaults()) {
        if d == *default {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        string(out, &c.name);
        out.push(b':');
        d.write_json(&c.ty, out);
    }
    out.push(b'}');
    if !row.uuid().is_nil() {
        out.extend_from_slice(b",\"uuid\":");
        uuid_string(out, row.uuid());
    }
    out.push(b'}');
}

/// `Table::update_op`'s operation (only the changed columns), appended to `ops`; false (and
/// nothing appended) when no column changed.
pub(super) fn update<T: Table>(ops: &mut OpsText, new: &T, old: &T) -> bool {
    let changed = new.changed_columns(old);
    if changed.is_empty() {
        return false;
    }
    let ts = T::schema();
    ops.push_with(|out| {
        out.extend_from_slice(b"{\"op\":\"update\",\"table\":");
        string(out, T::NAME);
        out.push(b',');
        uuid_where(out, new.uuid());
        out.extend_from_slice(b",\"row\":{");
        let mut first = true;
        for c in changed {
            let Some(i) = c.index() else { continue };
            if !first {
                out.push(b',');
            }
            first = false;
            string(out, &ts.columns[i].name);
            out.push(b':');
            new.column_datum(c).write_json(&ts.columns[i].ty, out);
        }
        out.extend_from_slice(b"}}");
    });
    true
}

/// A `delete` of one row by UUID.
pub(super) fn delete(out: &mut Vec<u8>, table: &str, u: Uuid) {
    out.extend_from_slice(b"{\"op\":\"delete\",\"table\":");
    string(out, table);
    out.push(b',');
    uuid_where(out, u);
    out.push(b'}');
}
