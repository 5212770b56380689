//! OVSDB's standalone database file format, so that `ovsdb-tool` reads holdfast's files and
//! holdfast reads files `ovsdb-tool create` wrote.
//!
//! A file is a sequence of records, each a header line `OVSDB JSON <length> <sha1>\n` followed by
//! `<length>` bytes: one JSON value and a newline, whose SHA-1 is `<sha1>` in hex. The first
//! record is the schema; each later record is one committed transaction:
//! `{"<table>": {"<uuid>": <row> | null}, "_date": <ms>, "_comment": "...", "_is_diff": true}`,
//! where a new row lists its non-default columns and a modified row lists its changed columns.
//!
//! Column diffs, as ovsdb-server writes them by default: with `"_is_diff": true` a modified
//! column carries [`Datum::diff`] of its old and new value (the new value for types of at most
//! one element, the element-wise difference for larger sets and maps); without it, the full new
//! value. [`WriteOptions::column_diff`] chooses (ovsdb-server's `--disable-file-column-diff`
//! turns it off). The reader accepts both, applies diffs only to rows that exist (a new row's
//! columns are values) and checks the size of every value a diff produces. One deliberate
//! difference from ovsdb-server: a record whose diffs OVS 3.1's reader would misread (a diff
//! larger than the column's maximum, or a diff applied to a default value of a set with
//! `min` 1; both fixed in OVS 3.3) is written with full values and without `"_is_diff"`, so
//! `ovsdb-tool` and `ovsdb-server` of every version read holdfast's files correctly.
//!
//! A compacted file is the schema followed by one record that inserts every row.
//!
//! Sans-I/O: encoding returns bytes, decoding takes bytes; `hf-ovsdb-net` owns the file.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use sha1::{Digest, Sha1};
use uuid::Uuid;

use crate::atom::parse_uuid;
use crate::datum::Datum;
use crate::db::{Database, Row, RowChange, TxnDelta};
use crate::error::{OvsdbError, Result};
use crate::schema::Schema;

const MAGIC: &str = "OVSDB JSON";

/// How transaction records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Write modified columns as diffs in `"_is_diff": true` records (ovsdb-server's default);
    /// false writes full new values, as `ovsdb-server --disable-file-column-diff` does.
    pub column_diff: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { column_diff: true }
    }
}

/// The diffs of every changed composite column of every modified row of `delta`, in the order
/// the record writers visit them (tables, rows, columns), or None when the record carries full
/// values: `opts` asks for them, or OVS 3.1's reader would misread one of the diffs (see the
/// module doc). A record has `"_is_diff": true` exactly when this is Some.
fn column_diffs(
    schema: &Schema,
    delta: &TxnDelta,
    opts: WriteOptions,
) -> Option<std::vec::IntoIter<Datum>> {
    if !opts.column_diff {
        return None;
    }
    let mut out = Vec::new();
    for (t, changes) in &delta.tables {
        let ts = &schema.tables[*t];
        for ch in changes {
            let (Some(o), Some(n)) = (&ch.old, &ch.new) else {
                continue;
            };
            for (c, cs) in ts.columns.iter().enumerate() {
                let ty = &cs.ty;
                if cs.ephemeral || !ty.is_composite() || o.cols[c] == n.cols[c] {
                    continue;
                }
                let d = Datum::diff(&o.cols[c], &n.cols[c], ty);
                if d.len() < ty.min
                    || d.len() > ty.max
                    || (o.cols[c] == ts.defaults()[c] && d != n.cols[c])
                {
                    return None;
                }
                out.push(d);
            }
        }
    }
    Some(out.into_iter())
}

/// Encode one record (header and body).
pub fn encode_record(v: &Value) -> Vec<u8> {
    let mut body = v.to_string().into_bytes();
    body.push(b'\n');
    let sha = Sha1::digest(&body);
    let mut out = format!("{MAGIC} {} {}\n", body.len(), hex(&sha)).into_bytes();
    out.extend_from_slice(&body);
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The transaction id holdfast gives a record: the first 16 bytes of the SHA-1 of its body, as a
/// UUID. It is recomputed from the file on restart, so `monitor_cond_since` history survives.
///
/// The SHA-1 is taken from the record's header (every record this module writes or
/// [`RecordReader`] returns has a header whose SHA-1 matches its body), so the body is not hashed
/// a second time; a record without such a header has its body hashed here.
pub fn record_txn_id(record: &[u8]) -> Uuid {
    let header_end = record.iter().position(|&b| b == b'\n');
    let mut b = [0u8; 16];
    if let Some(sha) = header_end.and_then(|e| header_sha_prefix(&record[..e])) {
        b = sha;
    } else {
        let body_start = header_end.map_or(0, |p| p + 1);
        let sha = Sha1::digest(&record[body_start..]);
        b.copy_from_slice(&sha[..16]);
    }
    uuid::Builder::from_random_bytes(b).into_uuid()
}

/// The first 16 bytes of the SHA-1 in a header line `OVSDB JSON <length> <sha1>` (no newline).
fn header_sha_prefix(header: &[u8]) -> Option<[u8; 16]> {
    let rest = header.strip_prefix(MAGIC.as_bytes())?.strip_prefix(b" ")?;
    let sp = rest.iter().position(|&b| b == b' ')?;
    let (len, hex) = (&rest[..sp], &rest[sp + 1..]);
    if len.is_empty() || !len.iter().all(u8::is_ascii_digit) || hex.len() != 40 {
        return None;
    }
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nibble(hex[2 * i])? << 4) | nibble(hex[2 * i + 1])?;
    }
    // The rest must be hex too, or the header is not one this module trusts.
    hex[32..]
        .iter()
        .all(|&c| nibble(c).is_some())
        .then_some(out)
}

/// Why a file could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FileError {
    /// The last record is incomplete (a crash during a write): everything before `valid_len` is
    /// good and the tail can be truncated.
    #[error("incomplete record at byte offset {valid_len} (the file ends inside it)")]
    Truncated {
        /// Length of the valid prefix.
        valid_len: usize,
    },
    /// A complete record is damaged: the file needs repair by hand.
    #[error("corrupt record at byte offset {offset}: {reason}")]
    Corrupt {
        /// Offset of the bad record's header.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Iterates the records of a file's bytes.
#[derive(Debug)]
pub struct RecordReader<'a> {
    data: &'a [u8],
    pos: usize,
}

/// One record.
#[derive(Debug)]
pub struct Record {
    /// The JSON value.
    pub json: Value,
    /// Byte offset of its header.
    pub offset: usize,
    /// Byte offset just past it.
    pub end: usize,
    /// Its transaction id (see [`record_txn_id`]).
    pub txn_id: Uuid,
}

impl<'a> RecordReader<'a> {
    /// A reader over a whole file.
    pub fn new(data: &'a [u8]) -> Self {
        RecordReader { data, pos: 0 }
    }

    /// Offset of the first byte not yet read.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for RecordReader<'_> {
    type Item = Result<Record, FileError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.data.len() {
            return None;
        }
        let start = self.pos;
        let rest = &self.data[start..];
        let corrupt = |reason: String| {
            Some(Err(FileError::Corrupt {
                offset: start,
                reason,
            }))
        };
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            return Some(Err(FileError::Truncated { valid_len: start }));
        };
        let Ok(header) = std::str::from_utf8(&rest[..nl]) else {
            return corrupt("header is not UTF-8".into());
        };
        let Some(h) = header.strip_prefix(MAGIC).and_then(|h| h.strip_prefix(' ')) else {
            return corrupt(format!("header does not start with \"{MAGIC}\""));
        };
        let mut parts = h.split(' ');
        let (Some(len), Some(sha), None) = (parts.next(), parts.next(), parts.next()) else {
            return corrupt("header is not \"OVSDB JSON <length> <sha1>\"".into());
        };
        let Ok(len) = len.parse::<usize>() else {
            return corrupt(format!("bad length \"{len}\" in header"));
        };
        let body_start = nl + 1;
        let Some(body_end) = body_start.checked_add(len) else {
            return corrupt("length overflows".into());
        };
        if body_end > rest.len() {
            return Some(Err(FileError::Truncated { valid_len: start }));
        }
        let body = &rest[body_start..body_end];
        if hex(&Sha1::digest(body)) != sha {
            return corrupt("SHA-1 does not match the record".into());
        }
        let json: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return corrupt(format!("record is not JSON: {e}")),
        };
        self.pos = start + body_end;
        Some(Ok(Record {
            json,
            offset: start,
            end: self.pos,
            txn_id: record_txn_id(&rest[..body_end]),
        }))
    }
}

/// The record for a committed delta with full values (no column diffs). `date_ms` is
/// wall-clock milliseconds (the caller's clock).
pub fn delta_record(schema: &Schema, delta: &TxnDelta, date_ms: u64) -> Value {
    delta_record_with(schema, delta, date_ms, WriteOptions { column_diff: false })
}

/// The record for a committed delta, written as `opts` says.
pub fn delta_record_with(
    schema: &Schema,
    delta: &TxnDelta,
    date_ms: u64,
    opts: WriteOptions,
) -> Value {
    let mut diffs = column_diffs(schema, delta, opts);
    let mut m = Map::new();
    for (t, changes) in &delta.tables {
        let ts = &schema.tables[*t];
        let mut rows = Map::new();
        for ch in changes {
            let v = match (&ch.old, &ch.new) {
                (_, None) => Value::Null,
                (None, Some(n)) => {
                    let mut r = Map::new();
                    for (c, cs) in ts.columns.iter().enumerate() {
                        if cs.ephemeral || n.cols[c] == ts.defaults()[c] {
                            continue;
                        }
                        r.insert(cs.name.clone(), n.cols[c].to_json(&cs.ty));
                    }
                    Value::Object(r)
                }
                (Some(o), Some(n)) => {
                    let mut r = Map::new();
                    for (c, cs) in ts.columns.iter().enumerate() {
                        if cs.ephemeral || n.cols[c] == o.cols[c] {
                            continue;
                        }
                        let d = diffs
                            .as_mut()
                            .filter(|_| cs.ty.is_composite())
                            .and_then(Iterator::next);
                        let v = d.as_ref().unwrap_or(&n.cols[c]).to_json(&cs.ty);
                        r.insert(cs.name.clone(), v);
                    }
                    if r.is_empty() {
                        continue; // only ephemeral columns changed
                    }
                    Value::Object(r)
                }
            };
            rows.insert(ch.uuid.to_string(), v);
        }
        if !rows.is_empty() {
            m.insert(ts.name.clone(), Value::Object(rows));
        }
    }
    m.insert("_date".into(), json!(date_ms));
    if let Some(c) = &delta.comment {
        m.insert("_comment".into(), json!(c));
    }
    if diffs.is_some() {
        m.insert("_is_diff".into(), json!(true));
    }
    Value::Object(m)
}

/// The encoded record (header and body) for a committed delta with the default
/// [`WriteOptions`] (column diffs, as ovsdb-server writes).
pub fn encode_delta_record(schema: &Schema, delta: &TxnDelta, date_ms: u64) -> Vec<u8> {
    encode_delta_record_with(schema, delta, date_ms, WriteOptions::default())
}

/// The encoded record (header and body) for a committed delta, written directly as bytes: the
/// same record [`encode_record`]`(&`[`delta_record_with`]`(..))` produces, without building a
/// JSON tree (this is on every commit's path).
pub fn encode_delta_record_with(
    schema: &Schema,
    delta: &TxnDelta,
    date_ms: u64,
    opts: WriteOptions,
) -> Vec<u8> {
    use std::io::Write;
    let mut diffs = column_diffs(schema, delta, opts);
    let mut body: Vec<u8> = Vec::with_capacity(256 + delta.len() * 128);
    body.push(b'{');
    let mut first_table = true;
    for (t, changes) in &delta.tables {
        let ts = &schema.tables[*t];
        let defaults = ts.defaults();
        let mark = body.len();
        if !first_table {
            body.push(b',');
        }
        let _ = serde_json::to_writer(&mut body, &ts.name);
        body.extend_from_slice(b":{");
        let mut any_row = false;
        for ch in changes {
            let row_mark = body.len();
            if any_row {
                body.push(b',');
            }
            let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            body.push(b'"');
            body.extend_from_slice(ch.uuid.hyphenated().encode_lower(&mut text).as_bytes());
            body.extend_from_slice(b"\":");
            match (&ch.old, &ch.new) {
                (_, None) => body.extend_from_slice(b"null"),
                (old, Some(n)) => {
                    body.push(b'{');
                    let mut any_col = false;
                    for (c, cs) in ts.columns.iter().enumerate() {
                        let skip = cs.ephemeral
                            || match old {
                                None => n.cols[c] == defaults[c],
                                Some(o) => n.cols[c] == o.cols[c],
                            };
                        if skip {
                            continue;
                        }
                        if any_col {
                            body.push(b',');
                        }
                        any_col = true;
                        let _ = serde_json::to_writer(&mut body, &cs.name);
                        body.push(b':');
                        let d = diffs
                            .as_mut()
                            .filter(|_| old.is_some() && cs.ty.is_composite())
                            .and_then(Iterator::next);
                        d.as_ref()
                            .unwrap_or(&n.cols[c])
                            .write_json(&cs.ty, &mut body);
                    }
                    if old.is_some() && !any_col {
                        body.truncate(row_mark); // only ephemeral columns changed
                        continue;
                    }
                    body.push(b'}');
                }
            }
            any_row = true;
        }
        if !any_row {
            body.truncate(mark);
            continue;
        }
        body.push(b'}');
        first_table = false;
    }
    if !first_table {
        body.push(b',');
    }
    let _ = write!(body, "\"_date\":{date_ms}");
    if let Some(c) = &delta.comment {
        body.extend_from_slice(b",\"_comment\":");
        let _ = serde_json::to_writer(&mut body, c);
    }
    if diffs.is_some() {
        body.extend_from_slice(b",\"_is_diff\":true");
    }
    body.extend_from_slice(b"}\n");
    let sha = Sha1::digest(&body);
    let mut out = format!("{MAGIC} {} {}\n", body.len(), hex(&sha)).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The delta a transaction record describes, relative to `db`'s current contents.
pub fn record_delta(db: &mut Database, v: &Value) -> Result<TxnDelta> {
    let obj = v
        .as_object()
        .ok_or_else(|| OvsdbError::syntax("transaction record must be an object"))?;
    let is_diff = obj
        .get("_is_diff")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let schema = db.schema.clone();
    let mut tables: Vec<(usize, Vec<RowChange>)> = Vec::new();
    let mut no_named = |n: &str| -> Result<Uuid> {
        Err(OvsdbError::syntax(format!(
            "named-uuid \"{n}\" in a database file"
        )))
    };
    for (k, rows) in obj {
        if k.starts_with('_') {
            continue;
        }
        let t = schema.require_table(k)?;
        let ts = &schema.tables[t];
        let rows = rows
            .as_object()
            .ok_or_else(|| OvsdbError::syntax(format!("table {k} in record must be an object")))?;
        let mut changes = Vec::with_capacity(rows.len());
        for (us, rv) in rows {
            let uuid = parse_uuid(us)?;
            let old = db.row(t, &uuid).cloned();
            let new = match rv {
                Value::Null => None,
                Value::Object(cols) => {
                    let mut row = match &old {
                        Some(o) => Row::clone(o),
                        None => Row {
                            uuid,
                            version: Uuid::nil(),
                            cols: ts.defaults().to_vec(),
                        },
                    };
                    for (cn, cv) in cols {
                        let c = ts.column_index(cn).ok_or_else(|| {
                            OvsdbError::syntax(format!(
                                "record names unknown column {cn} of table {k}"
                            ))
                        })?;
                        let ty = &ts.columns[c].ty;
                        let at = |e: OvsdbError| {
                            OvsdbError::new(
                                e.kind,
                                format!("column {cn} of {k} row {us}: {}", e.details),
                            )
                        };
                        // A diff may hold more elements than the column allows; the value it
                        // produces may not.
                        let d = Datum::from_json_unchecked(ty, cv, &mut no_named).map_err(at)?;
                        row.cols[c] = if is_diff && old.is_some() {
                            row.cols[c].try_apply_diff(&d, ty).map_err(at)?
                        } else {
                            d.check_size(ty).map_err(at)?;
                            d
                        };
                    }
                    row.version = db.uuids.next_uuid();
                    Some(Arc::new(row))
                }
                _ => {
                    return Err(OvsdbError::syntax(format!(
                        "row {us} in record must be an object or null"
                    )));
                }
            };
            changes.push(RowChange { uuid, old, new });
        }
        changes.sort_by_key(|c| c.uuid);
        tables.push((t, changes));
    }
    tables.sort_by_key(|(t, _)| *t);
    Ok(TxnDelta {
        tables,
        comment: obj
            .get("_comment")
            .and_then(Value::as_str)
            .map(str::to_string),
        durable: false,
    })
}

/// A compacted file: the schema record and one record inserting every row.
pub fn snapshot_file(db: &Database, date_ms: u64) -> Vec<u8> {
    snapshot_file_from(&db.schema, db.snapshot_rows(), date_ms)
}

/// [`snapshot_file`] from a [`Database::snapshot_rows`] taken earlier (e.g. under a lock, the
/// encoding done after it is released): the same bytes as `snapshot_file` of the database as
/// it was then.
pub fn snapshot_file_from(schema: &Schema, mut rows: TxnDelta, date_ms: u64) -> Vec<u8> {
    let mut out = encode_record(schema.to_json());
    for (_, r) in &mut rows.tables {
        r.sort_by_key(|c| c.uuid);
    }
    if !rows.is_empty() {
        // Written directly (no JSON tree of the whole database): the same bytes as
        // `encode_record(&delta_record(..))`, as `direct_encoding_equals_the_value_encoding`
        // and `snapshot_is_the_value_encoding` check.
        let opts = WriteOptions { column_diff: false };
        out.extend(encode_delta_record_with(schema, &rows, date_ms, opts));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_encoding_equals_the_value_encoding() {
        let schema = Arc::new(
            Schema::parse(
                r#"{"name": "D", "tables": {"T": {"columns": {
                "s": {"type": "string"}, "n": {"type": {"key": "integer", "min": 0, "max": 1}},
                "m": {"type": {"key": "string", "value": "real", "min": 0, "max": "unlimited"}},
                "e": {"type": "string", "ephemeral": true}}}}}"#,
            )
            .unwrap(),
        );
        let mut db = Database::new(schema.clone(), 3);
        let mut deltas = Vec::new();
        for v in [
            json!({"T": {"8b7f2b9a-0000-4000-8000-00000000000a": {"s": "x\"y", "m": ["map", [["k", 1.5]]]},
                         "8b7f2b9a-0000-4000-8000-00000000000b": {"n": 3}}}),
            json!({"T": {"8b7f2b9a-0000-4000-8000-00000000000a": {"s": "z"}, "8b7f2b9a-0000-4000-8000-00000000000b": null}}),
        ] {
            let d = record_delta(&mut db, &v).unwrap();
            db.apply(&d);
            deltas.push(d);
        }
        let mut d = deltas.remove(0);
        d.comment = Some("c\u{1}".into());
        for column_diff in [true, false] {
            let opts = WriteOptions { column_diff };
            for d in [&d, &deltas[0], &TxnDelta::default()] {
                // Member order may differ; the records must mean the same and be well-formed.
                let direct = encode_delta_record_with(&schema, d, 42, opts);
                let via_value = encode_record(&delta_record_with(&schema, d, 42, opts));
                let a = RecordReader::new(&direct).next().unwrap().unwrap();
                let b = RecordReader::new(&via_value).next().unwrap().unwrap();
                assert_eq!(a.json, b.json);
                assert_eq!(direct.len(), via_value.len());
                assert_eq!(a.json.get("_is_diff").is_some(), column_diff);
            }
        }
    }

    /// The compacted file is written directly from the rows: byte for byte what the old
    /// `Value` path (`encode_record(&delta_record(..))`) wrote, over generated rows.
    #[test]
    fn snapshot_is_the_value_encoding() {
        let schema = Arc::new(
            Schema::parse(
                r#"{"name": "D", "tables": {"A": {"columns": {
                "s": {"type": "string"}, "n": {"type": {"key": "integer", "min": 0, "max": 1}},
                "m": {"type": {"key": "string", "value": "real", "min": 0, "max": "unlimited"}},
                "r": {"type": {"key": {"type": "uuid", "refTable": "B"}, "min": 0, "max": "unlimited"}},
                "e": {"type": "string", "ephemeral": true}}},
                "B": {"columns": {"b": {"type": "boolean"}}}}}"#,
            )
            .unwrap(),
        );
        let mut db = Database::new(schema.clone(), 3);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut a = Map::new();
        let mut b = Map::new();
        for i in 0..200u64 {
            let bu = format!("8b7f2b9a-0000-4000-8000-{:012x}", 1000 + i);
            b.insert(bu.clone(), json!({"b": next() % 2 == 0}));
            let mut row = Map::new();
            if next() % 4 != 0 {
                row.insert("s".into(), json!(format!("s\"{}\u{7}é", next() % 50)));
            }
            if next() % 2 == 0 {
                row.insert("n".into(), json!(next() as i64 % 1000 - 500));
            }
            let pairs: Vec<Value> = (0..next() % 4)
                .map(|k| json!([format!("k{k}"), (next() % 1000) as f64 / 8.0]))
                .collect();
            row.insert("m".into(), json!(["map", pairs]));
            if next() % 3 == 0 {
                row.insert("r".into(), json!(["set", [["uuid", bu]]]));
            }
            row.insert("e".into(), json!("gone"));
            a.insert(
                format!("{:08x}-0000-4000-8000-000000000001", next() as u32),
                Value::Object(row),
            );
        }
        let d = record_delta(&mut db, &json!({"A": a, "B": b})).unwrap();
        db.apply(&d);
        let direct = snapshot_file(&db, 42);
        let mut rows = db.snapshot_rows();
        for (_, r) in &mut rows.tables {
            r.sort_by_key(|c| c.uuid);
        }
        let mut via_value = encode_record(schema.to_json());
        via_value.extend(encode_record(&delta_record(&schema, &rows, 42)));
        assert_eq!(
            String::from_utf8_lossy(&direct),
            String::from_utf8_lossy(&via_value)
        );
    }

    fn diff_schema() -> Arc<Schema> {
        Arc::new(
            Schema::parse(
                r#"{"name": "D", "tables": {"T": {"columns": {
                "enabled": {"type": {"key": "boolean", "min": 0, "max": 1}},
                "tag": {"type": {"key": "integer", "min": 0, "max": 1}},
                "s": {"type": {"key": "integer", "min": 0, "max": 2}},
                "one": {"type": {"key": "integer", "min": 1, "max": 3}},
                "m": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}}}}}}"#,
            )
            .unwrap(),
        )
    }

    const R: &str = "8b7f2b9a-0000-4000-8000-00000000000a";

    fn load(schema: &Arc<Schema>, records: &[Value]) -> Result<Database> {
        let mut db = Database::new(schema.clone(), 3);
        for v in records {
            let d = record_delta(&mut db, v)?;
            db.apply(&d);
        }
        Ok(db)
    }

    fn col(db: &Database, name: &str) -> Value {
        let ts = &db.schema.tables[0];
        let c = ts.column_index(name).unwrap();
        let u = parse_uuid(R).unwrap();
        db.row(0, &u).unwrap().cols[c].to_json(&ts.columns[c].ty)
    }

    #[test]
    fn is_diff_records_as_ovsdb_server_writes_them() {
        // What ovsdb-server 3.1 writes for `enabled` false -> true -> [] and `tag` 5 -> [],
        // `m` {a=1,b=2} -> {a=1,b=3,c=4}.
        let schema = diff_schema();
        let db = load(
            &schema,
            &[
                json!({"T": {R: {"enabled": false, "tag": 5, "m": ["map", [["a", "1"], ["b", "2"]]]}}}),
                json!({"T": {R: {"enabled": true, "tag": ["set", []], "m": ["map", [["b", "3"], ["c", "4"]]]}}, "_is_diff": true}),
                json!({"T": {R: {"enabled": ["set", []]}}, "_is_diff": true}),
            ],
        )
        .unwrap();
        assert_eq!(col(&db, "enabled"), json!(["set", []]));
        assert_eq!(col(&db, "tag"), json!(["set", []]));
        assert_eq!(
            col(&db, "m"),
            json!(["map", [["a", "1"], ["b", "3"], ["c", "4"]]])
        );
        // A diff larger than the column's maximum is fine; the value it makes must fit.
        let db = load(
            &schema,
            &[
                json!({"T": {R: {"s": ["set", [1, 2]]}}}),
                json!({"T": {R: {"s": ["set", [1, 2, 3, 4]]}}, "_is_diff": true}),
            ],
        )
        .unwrap();
        assert_eq!(col(&db, "s"), json!(["set", [3, 4]]));
        let e = load(
            &schema,
            &[
                json!({"T": {R: {"s": ["set", [1, 2]]}}}),
                json!({"T": {R: {"s": ["set", [3]]}}, "_is_diff": true}),
            ],
        )
        .unwrap_err();
        assert!(e.details.contains("column s of T row"), "{e}");
        // A diff applied to a default value of a min-1 set adds to it (OVS 3.3 semantics).
        let db = load(
            &schema,
            &[
                json!({"T": {R: {"tag": 1}}}),
                json!({"T": {R: {"one": 7}}, "_is_diff": true}),
            ],
        )
        .unwrap();
        assert_eq!(col(&db, "one"), json!(["set", [0, 7]]));
    }

    #[test]
    fn written_diffs_read_back_and_fall_back_for_old_readers() {
        let schema = diff_schema();
        let mut db = load(
            &schema,
            &[json!({"T": {R: {"enabled": false, "tag": 5, "s": ["set", [1, 2]], "m": ["map", [["a", "1"]]]}}})],
        )
        .unwrap();
        let opts = WriteOptions::default();
        let step = |db: &mut Database, v: Value| -> Value {
            let d = record_delta(db, &v).unwrap();
            let rec = encode_delta_record_with(&db.schema.clone(), &d, 1, opts);
            let via_value = delta_record_with(&db.schema.clone(), &d, 1, opts);
            db.apply(&d);
            let json = RecordReader::new(&rec).next().unwrap().unwrap().json;
            assert_eq!(json, via_value, "both encoders write the same record");
            json
        };
        // Full-value changes, recorded as ovsdb-server would: new values for optional columns.
        let r = step(
            &mut db,
            json!({"T": {R: {"enabled": true, "tag": ["set", []], "s": ["set", [1]], "m": ["map", [["a", "2"]]]}}}),
        );
        assert_eq!(
            r["T"][R]["s"],
            json!(2),
            "the diff of a set: the removed element"
        );
        assert_eq!(r["_is_diff"], json!(true));
        assert_eq!(r["T"][R]["enabled"], json!(true));
        assert_eq!(r["T"][R]["tag"], json!(["set", []]));
        assert_eq!(r["T"][R]["m"], json!(["map", [["a", "2"]]]));
        // {1} -> {3,4}: the diff has 3 elements, more than OVS 3.1 reads: full values.
        let r = step(&mut db, json!({"T": {R: {"s": ["set", [3, 4]]}}}));
        assert!(r.get("_is_diff").is_none(), "{r}");
        assert_eq!(r["T"][R]["s"], json!(["set", [3, 4]]));
        // The default of a min-1 set: {0} -> {0,7} would be misread by OVS 3.1: full values.
        let r = step(&mut db, json!({"T": {R: {"one": ["set", [0, 7]]}}}));
        assert!(r.get("_is_diff").is_none(), "{r}");
        let r = step(&mut db, json!({"T": {R: {"one": ["set", [7]]}}}));
        assert_eq!(r["_is_diff"], json!(true));
        assert_eq!(r["T"][R]["one"], json!(0));
    }

    #[test]
    fn txn_id_from_the_header_is_the_body_hash() {
        let rec = encode_record(&json!({"x": [1, "two"]}));
        let nl = rec.iter().position(|&b| b == b'\n').unwrap();
        let sha = Sha1::digest(&rec[nl + 1..]);
        let mut want = [0u8; 16];
        want.copy_from_slice(&sha[..16]);
        let want = uuid::Builder::from_random_bytes(want).into_uuid();
        assert_eq!(record_txn_id(&rec), want);
        // A header with a bad SHA-1 field falls back to hashing the body.
        let mut bad = b"OVSDB JSON 3 zz".to_vec();
        bad.extend_from_slice(&rec[nl..]);
        assert_eq!(record_txn_id(&bad), want);
    }

    #[test]
    fn record_roundtrip_and_truncation() {
        let a = encode_record(&json!({"x": 1}));
        let b = encode_record(&json!({"y": [1, 2]}));
        let mut f = a.clone();
        f.extend_from_slice(&b);
        let recs: Vec<_> = RecordReader::new(&f)
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].json, json!({"y": [1, 2]}));
        assert_eq!(recs[1].end, f.len());
        for cut in a.len() + 1..f.len() {
            let mut r = RecordReader::new(&f[..cut]);
            assert!(r.next().unwrap().is_ok());
            assert_eq!(
                r.next().unwrap().unwrap_err(),
                FileError::Truncated { valid_len: a.len() }
            );
        }
        let mut bad = f.clone();
        let last = bad.len() - 3;
        bad[last] ^= 1;
        let mut r = RecordReader::new(&bad);
        r.next();
        assert!(matches!(r.next(), Some(Err(FileError::Corrupt { .. }))));
    }
}
