//! Monitors: `monitor` (RFC 7047 4.1.5), `monitor_cond`, `monitor_cond_change` and
//! `monitor_cond_since` (ovsdb-server(7) 4.1.12-4.1.16): parsing requests, the initial contents,
//! and turning committed [`TxnDelta`]s into `<table-updates>` / `<table-updates2>`.
//!
//! As ovsdb-server does: a request without "columns" monitors every column but `_uuid`, so
//! also `_version` (then every modified row is reported, also one whose only change was undone
//! by weak-reference clean-up); a `modify` in update2/update3 carries [`Datum::diff`] of each
//! changed column (the new value for types of at most one element); `insert`/`initial` list
//! non-default columns; update (V1) gives changed columns' old values and the whole new row.
//!
//! Sans-I/O: the server owns sessions and sockets; this module only computes JSON.

use std::sync::Arc;

use hashbrown::HashMap;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::condition::MonitorCondition;
use crate::datum::Datum;
use crate::db::{Database, Row, RowChange, TxnDelta};
use crate::error::{OvsdbError, Result};
use crate::schema::{ColumnRef, Schema, TableSchema};

/// Which notification format a monitor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MonitorVersion {
    /// `monitor`: `update` notifications with old/new rows.
    V1,
    /// `monitor_cond`: `update2` notifications with row diffs.
    V2,
    /// `monitor_cond_since`: `update3` notifications (update2 plus the transaction id).
    V3,
}

/// Which kinds of change a table monitor reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Select {
    /// Initial contents.
    pub initial: bool,
    /// Inserted rows.
    pub insert: bool,
    /// Deleted rows.
    pub delete: bool,
    /// Modified rows.
    pub modify: bool,
}

impl Select {
    const ALL: Select = Select {
        initial: true,
        insert: true,
        delete: true,
        modify: true,
    };
    const NONE: Select = Select {
        initial: false,
        insert: false,
        delete: false,
        modify: false,
    };

    fn from_json(v: Option<&Value>) -> Result<Self> {
        let Some(v) = v else { return Ok(Select::ALL) };
        let o = v
            .as_object()
            .ok_or_else(|| OvsdbError::syntax("\"select\" must be an object"))?;
        let flag = |k: &str| -> Result<bool> {
            match o.get(k) {
                None => Ok(true),
                Some(Value::Bool(b)) => Ok(*b),
                Some(_) => Err(OvsdbError::syntax(format!(
                    "\"select\" member \"{k}\" must be a boolean"
                ))),
            }
        };
        Ok(Select {
            initial: flag("initial")?,
            insert: flag("insert")?,
            delete: flag("delete")?,
            modify: flag("modify")?,
        })
    }

    fn or(self, o: Select) -> Select {
        Select {
            initial: self.initial || o.initial,
            insert: self.insert || o.insert,
            delete: self.delete || o.delete,
            modify: self.modify || o.modify,
        }
    }
}

/// What one monitor watches in one table.
#[derive(Debug, Clone)]
pub struct TableMonitor {
    /// Table index.
    pub table: usize,
    /// Monitored user columns (sorted).
    pub columns: Vec<usize>,
    /// Reported change kinds.
    pub select: Select,
    /// Row filter (conditional monitors; empty = all rows).
    pub condition: MonitorCondition,
    /// Whether `_version` is reported (asked for, or "columns" omitted: ovsdb-server then
    /// reports every column but `_uuid`).
    pub version: bool,
    defaults: Vec<Datum>,
}

/// A parsed monitor request.
#[derive(Debug, Clone)]
pub struct Monitor {
    /// Notification format.
    pub version: MonitorVersion,
    /// Per-table parts, in table order.
    pub tables: Vec<TableMonitor>,
}

impl Monitor {
    /// Parse `<monitor-requests>` (or `<monitor-cond-requests>`) for `schema`.
    pub fn from_json(schema: &Schema, v: &Value, version: MonitorVersion) -> Result<Self> {
        let obj = v.as_object().ok_or_else(|| {
            OvsdbError::syntax("monitor requests must be an object mapping table names to requests")
        })?;
        let mut tables = Vec::with_capacity(obj.len());
        for (tname, reqs) in obj {
            let t = schema.require_table(tname)?;
            let ts = &schema.tables[t];
            let reqs: Vec<&Value> = match reqs {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let mut columns: Vec<usize> = Vec::new();
            let mut select = Select::NONE;
            let mut condition = MonitorCondition::default();
            let mut all_cols = false;
            let mut with_version = false;
            for r in reqs {
                let ro = r
                    .as_object()
                    .ok_or_else(|| OvsdbError::syntax("a monitor request must be an object"))?;
                for k in ro.keys() {
                    if !matches!(k.as_str(), "columns" | "select" | "where") {
                        return Err(OvsdbError::syntax(format!(
                            "unexpected member \"{k}\" in monitor request"
                        )));
                    }
                }
                match ro.get("columns") {
                    None => all_cols = true,
                    Some(c) => {
                        let arr = c
                            .as_array()
                            .ok_or_else(|| OvsdbError::syntax("\"columns\" must be an array"))?;
                        for n in arr {
                            let n = n.as_str().ok_or_else(|| {
                                OvsdbError::syntax("column names must be strings")
                            })?;
                            // _uuid is always reported (as the row's key).
                            match ts.column_ref(n)? {
                                ColumnRef::User(i) => columns.push(i),
                                ColumnRef::Version => with_version = true,
                                ColumnRef::Uuid => {}
                            }
                        }
                    }
                }
                select = select.or(Select::from_json(ro.get("select"))?);
                if let Some(w) = ro.get("where") {
                    if version == MonitorVersion::V1 {
                        return Err(OvsdbError::syntax(
                            "\"where\" is only valid in monitor_cond requests",
                        ));
                    }
                    condition
                        .clauses
                        .extend(MonitorCondition::from_json(ts, w)?.clauses);
                    if condition.clauses.is_empty() {
                        // An explicit empty list still means "every row".
                    }
                }
            }
            if all_cols {
                columns = (0..ts.columns.len()).collect();
                with_version = true;
            }
            columns.sort_unstable();
            columns.dedup();
            let defaults = ts.defaults().to_vec();
            tables.push(TableMonitor {
                table: t,
                columns,
                select,
                condition,
                version: with_version,
                defaults,
            });
        }
        tables.sort_by_key(|t| t.table);
        Ok(Monitor { version, tables })
    }

    /// A key that is equal for two monitors exactly when they produce the same updates for every
    /// delta (same format, tables, columns, selects and conditions): the server computes each
    /// commit's updates once per distinct key instead of once per client.
    pub fn spec_key(&self) -> String {
        let mut k = format!("{:?}", self.version);
        for t in &self.tables {
            k.push_str(&format!(
                "|{}:{:?}:{}:{:?}:{:?}",
                t.table, t.columns, t.version, t.select, t.condition
            ));
        }
        k
    }

    /// Creates the row indexes this monitor's conditions can use
    /// ([`Database::ensure_row_index`]), so [`Monitor::initial`] and later condition changes
    /// read only the rows the conditions can match.
    pub fn index_rows(&self, db: &mut Database) {
        for tm in &self.tables {
            db.ensure_row_index(tm.table, &tm.condition);
        }
    }

    /// The initial contents (the reply to the monitor request). Reads only the rows the
    /// conditions can match when [`Monitor::index_rows`] indexed their columns.
    /// [`Monitor::write_initial`] as a tree (the server sends the text).
    pub fn initial(&self, db: &Database) -> Value {
        let mut out = Vec::new();
        self.write_initial(db, &mut out);
        text_tree(&out)
    }

    /// The initial contents as JSON text (`{"Table": {"uuid": {"initial": row}}}`, or
    /// `{"new": row}` for `monitor`), rows in UUID order, tables in the monitor's order; an
    /// empty table is left out.
    pub fn write_initial(&self, db: &Database, out: &mut Vec<u8>) {
        let schema = &db.schema;
        out.push(b'{');
        let mut first_table = true;
        for tm in &self.tables {
            if !tm.select.initial {
                continue;
            }
            let ts = &schema.tables[tm.table];
            let mut rows: Vec<&Arc<Row>> = db
                .monitored_rows(tm.table, &[&tm.condition])
                .filter(|r| tm.condition.eval(r))
                .collect();
            if rows.is_empty() {
                continue;
            }
            rows.sort_unstable_by_key(|r| r.uuid);
            table_start(out, &mut first_table, &ts.name);
            for (k, r) in rows.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_uuid_str(out, &r.uuid);
                match self.version {
                    MonitorVersion::V1 => {
                        out.extend_from_slice(b":{\"new\":");
                        tm.write_row(ts, r, false, out);
                    }
                    _ => {
                        out.extend_from_slice(b":{\"initial\":");
                        tm.write_row(ts, r, true, out);
                    }
                }
                out.push(b'}');
            }
            out.push(b'}');
        }
        out.push(b'}');
    }

    /// Each monitored table that `delta` changes, in the monitor's table order, with the
    /// changes to consider: all of them, or the ones `rows` selects (see
    /// [`Monitor::updates_selected`]). Shared by the tree and the text encoders.
    fn selected<'a>(
        &'a self,
        delta: &'a TxnDelta,
        rows: Option<&'a [Vec<u32>]>,
    ) -> impl Iterator<
        Item = (
            &'a TableMonitor,
            Box<dyn Iterator<Item = &'a RowChange> + 'a>,
        ),
    > + 'a {
        let mut di = 0;
        self.tables
            .iter()
            .map_while(move |tm| {
                while di < delta.tables.len() && delta.tables[di].0 < tm.table {
                    di += 1;
                }
                let (t, changes) = delta.tables.get(di)?;
                Some((tm, (*t == tm.table).then_some((di, changes))))
            })
            .filter_map(move |(tm, hit)| {
                let (di, changes) = hit?;
                let changes: Box<dyn Iterator<Item = &'a RowChange> + 'a> = match rows {
                    None => Box::new(changes.iter()),
                    Some(rows) => Box::new(
                        rows.get(di)
                            .into_iter()
                            .flatten()
                            .filter_map(move |&i| changes.get(i as usize)),
                    ),
                };
                Some((tm, changes))
            })
    }

    /// The updates one committed delta causes for this monitor; None when there are none.
    pub fn updates(&self, schema: &Schema, delta: &TxnDelta) -> Option<Value> {
        self.updates_selected(schema, delta, None)
    }

    /// Like [`Monitor::updates`], but looking only at some of the delta's changes: `rows[i]`
    /// lists (ascending) the indices into `delta.tables[i]`'s changes to consider, e.g. those a
    /// [`crate::cond_index::CondIndex`] found for this monitor. None considers every change.
    pub fn updates_selected(
        &self,
        schema: &Schema,
        delta: &TxnDelta,
        rows: Option<&[Vec<u32>]>,
    ) -> Option<Value> {
        let mut out = Map::new();
        for (tm, changes) in self.selected(delta, rows) {
            let ts = &schema.tables[tm.table];
            let mut out_rows = Map::new();
            for ch in changes {
                if let Some(v) = tm.change_json(ts, ch, self.version) {
                    out_rows.insert(ch.uuid.to_string(), v);
                }
            }
            if !out_rows.is_empty() {
                out.insert(ts.name.clone(), Value::Object(out_rows));
            }
        }
        if out.is_empty() {
            None
        } else {
            Some(Value::Object(out))
        }
    }

    /// [`Monitor::updates_selected`] as JSON text appended to `out`, written straight from the
    /// rows (no `Value` tree: a 100k-row echo is tens of megabytes of text and several times
    /// that as a tree). The text means the same as the tree's (members may come in another
    /// order: tables and columns in schema order). Returns false, with `out` unchanged, when
    /// there is nothing to report.
    pub fn write_updates_selected(
        &self,
        schema: &Schema,
        delta: &TxnDelta,
        rows: Option<&[Vec<u32>]>,
        out: &mut Vec<u8>,
    ) -> bool {
        self.write_updates_parts(schema, delta, rows, out, usize::MAX, &mut |_| {})
    }

    /// [`Monitor::write_updates_selected`] in parts: once `out` holds at least `part` bytes
    /// after a row that is reported, `flush` is called to take them (it must leave `out` empty
    /// or with its bytes still to be sent before what follows). The parts, concatenated with
    /// what is left in `out` at the end, are exactly the text `write_updates_selected` writes.
    /// Nothing is flushed before the first reported row, so when nothing is reported `flush` is
    /// never called and false is returned with `out` unchanged.
    pub fn write_updates_parts(
        &self,
        schema: &Schema,
        delta: &TxnDelta,
        rows: Option<&[Vec<u32>]>,
        out: &mut Vec<u8>,
        part: usize,
        flush: &mut dyn FnMut(&mut Vec<u8>),
    ) -> bool {
        let start = out.len();
        out.push(b'{');
        let mut any_table = false;
        for (tm, changes) in self.selected(delta, rows) {
            let ts = &schema.tables[tm.table];
            let table_mark = out.len();
            if any_table {
                out.push(b',');
            }
            write_str(out, &ts.name);
            out.extend_from_slice(b":{");
            let mut any_row = false;
            for ch in changes {
                let row_mark = out.len();
                if any_row {
                    out.push(b',');
                }
                write_uuid_str(out, &ch.uuid);
                out.push(b':');
                if tm.write_change(ts, ch, self.version, out) {
                    any_row = true;
                    // Past this row nothing written so far is taken back (the table has a row,
                    // so it and the whole object stay): the bytes may go.
                    if out.len() >= part {
                        flush(out);
                    }
                } else {
                    out.truncate(row_mark);
                }
            }
            if any_row {
                out.push(b'}');
                any_table = true;
            } else {
                out.truncate(table_mark);
            }
        }
        if any_table {
            out.push(b'}');
        } else {
            out.truncate(start);
        }
        any_table
    }

    /// Replace conditions (`monitor_cond_change`). Returns the `<table-updates2>` for rows that
    /// enter or leave the monitored set, or None if none do. [`Monitor::change_conditions_text`]
    /// as a tree (the server sends the text).
    pub fn change_conditions(&mut self, db: &mut Database, v: &Value) -> Result<Option<Value>> {
        Ok(self
            .change_conditions_text(db, v)?
            .map(|text| text_tree(&text)))
    }

    /// Replace conditions (`monitor_cond_change`). Returns the `<table-updates2>` text for
    /// rows that enter or leave the monitored set (rows in UUID order), or None if none do.
    ///
    /// Only rows that can change sides are read: a condition is a disjunction, so a row that
    /// a clause present in both the old and the new condition matches stays, and one that no
    /// clause in only one of them matches keeps its side. The candidates are therefore the
    /// rows that the clauses the change added or removed can match (through the row index,
    /// which this extends to the new condition's columns); the whole conditions still decide
    /// each of them. A trace that adds one datapath's clause to a monitor holding four reads
    /// that datapath's rows, not all five's again.
    pub fn change_conditions_text(
        &mut self,
        db: &mut Database,
        v: &Value,
    ) -> Result<Option<Vec<u8>>> {
        if self.version == MonitorVersion::V1 {
            return Err(OvsdbError::syntax(
                "monitor_cond_change needs a monitor_cond or monitor_cond_since monitor",
            ));
        }
        let obj = v
            .as_object()
            .ok_or_else(|| OvsdbError::syntax("monitor_cond_change requests must be an object"))?;
        let schema = db.schema.clone();
        let mut new_conds: Vec<(usize, MonitorCondition)> = Vec::new();
        for (tname, reqs) in obj {
            let t = schema.require_table(tname)?;
            let ts = &schema.tables[t];
            if !self.tables.iter().any(|tm| tm.table == t) {
                return Err(OvsdbError::syntax(format!(
                    "table {tname} is not monitored by this monitor"
                )));
            }
            let reqs: Vec<&Value> = match reqs {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let mut cond = MonitorCondition::default();
            for r in reqs {
                let ro = r
                    .as_object()
                    .ok_or_else(|| OvsdbError::syntax("a condition update must be an object"))?;
                if ro.contains_key("columns") {
                    return Err(OvsdbError::syntax(
                        "changing monitored columns is not supported",
                    ));
                }
                if let Some(w) = ro.get("where") {
                    cond.clauses
                        .extend(MonitorCondition::from_json(ts, w)?.clauses);
                }
            }
            new_conds.push((t, cond));
        }
        let mut out = Vec::new();
        out.push(b'{');
        let mut first_table = true;
        for (t, cond) in new_conds {
            let Some(tm) = self.tables.iter_mut().find(|tm| tm.table == t) else {
                continue;
            };
            db.ensure_row_index(t, &cond);
            let ts = &schema.tables[t];
            let mut rows: Vec<(Arc<Row>, bool)> = Vec::new();
            let changed = changed_clauses(&tm.condition, &cond);
            let candidates: Box<dyn Iterator<Item = &Arc<Row>>> = match &changed {
                Some((added, removed)) => {
                    let narrowed: Vec<&MonitorCondition> = [added, removed]
                        .into_iter()
                        .filter(|c| !c.clauses.is_empty())
                        .collect();
                    if narrowed.is_empty() {
                        // The same clauses (perhaps in another order): no row changes sides.
                        Box::new(std::iter::empty())
                    } else {
                        db.monitored_rows(t, &narrowed)
                    }
                }
                None => db.monitored_rows(t, &[&tm.condition, &cond]),
            };
            for r in candidates {
                let was = tm.condition.eval(r);
                let is = cond.eval(r);
                if (is && !was && tm.select.insert) || (was && !is && tm.select.delete) {
                    rows.push((Arc::clone(r), is));
                }
            }
            tm.condition = cond;
            if rows.is_empty() {
                continue;
            }
            rows.sort_unstable_by_key(|(r, _)| r.uuid);
            table_start(&mut out, &mut first_table, &ts.name);
            for (k, (r, inserted)) in rows.iter().enumerate() {
                if k > 0 {
                    out.push(b',');
                }
                write_uuid_str(&mut out, &r.uuid);
                if *inserted {
                    out.extend_from_slice(b":{\"insert\":");
                    tm.write_row(ts, r, true, &mut out);
                    out.push(b'}');
                } else {
                    out.extend_from_slice(b":{\"delete\":null}");
                }
            }
            out.push(b'}');
        }
        out.push(b'}');
        Ok((!first_table).then_some(out))
    }
}

/// The clauses of `new` that `old` lacks and those of `old` that `new` lacks, as conditions;
/// None when either condition is empty (every row: no clause narrows it) or when comparing
/// them would cost more than reading the rows (over a million clause pairs).
fn changed_clauses(
    old: &MonitorCondition,
    new: &MonitorCondition,
) -> Option<(MonitorCondition, MonitorCondition)> {
    if old.clauses.is_empty()
        || new.clauses.is_empty()
        || old.clauses.len().saturating_mul(new.clauses.len()) > 1 << 20
    {
        return None;
    }
    let only = |a: &MonitorCondition, b: &MonitorCondition| MonitorCondition {
        clauses: a
            .clauses
            .iter()
            .filter(|c| !b.clauses.contains(c))
            .cloned()
            .collect(),
    };
    Some((only(new, old), only(old, new)))
}

/// Opens table `name`'s member of an updates object (`"name":{`), after a comma unless first.
fn table_start(out: &mut Vec<u8>, first: &mut bool, name: &str) {
    if !*first {
        out.push(b',');
    }
    *first = false;
    write_str(out, name);
    out.extend_from_slice(b":{");
}

/// JSON text this module wrote, as a tree.
fn text_tree(text: &[u8]) -> Value {
    // The text is the writers' own JSON: parsing it cannot fail.
    serde_json::from_slice(text).unwrap_or(Value::Null)
}

impl TableMonitor {
    fn row_json(&self, ts: &TableSchema, r: &Row, skip_defaults: bool) -> Value {
        let mut m = Map::new();
        for &c in &self.columns {
            if skip_defaults && r.cols[c] == self.defaults[c] {
                continue;
            }
            m.insert(
                ts.columns[c].name.clone(),
                r.cols[c].to_json(&ts.columns[c].ty),
            );
        }
        if self.version {
            m.insert("_version".into(), json!(["uuid", r.version.to_string()]));
        }
        Value::Object(m)
    }

    /// [`TableMonitor::row_json`] as text.
    fn write_row(&self, ts: &TableSchema, r: &Row, skip_defaults: bool, out: &mut Vec<u8>) {
        let cols = self
            .columns
            .iter()
            .copied()
            .filter(|&c| !(skip_defaults && r.cols[c] == self.defaults[c]));
        out.push(b'{');
        self.write_members(ts, cols, r.version, out, |c, ty, out| {
            r.cols[c].write_json(ty, out)
        });
        out.push(b'}');
    }

    /// Writes `"column":value` members (comma-separated, no braces) for `cols`, each value
    /// written by `value`, then `"_version"` when the monitor reports it.
    fn write_members(
        &self,
        ts: &TableSchema,
        cols: impl Iterator<Item = usize>,
        version: Uuid,
        out: &mut Vec<u8>,
        mut value: impl FnMut(usize, &crate::types::ColumnType, &mut Vec<u8>),
    ) {
        let mut first = true;
        for c in cols {
            if !first {
                out.push(b',');
            }
            first = false;
            write_str(out, &ts.columns[c].name);
            out.push(b':');
            value(c, &ts.columns[c].ty, out);
        }
        if self.version {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(b"\"_version\":");
            crate::atom::Atom::Uuid(version).write_json(out);
        }
    }

    /// [`TableMonitor::change_json`] as text; false (with whatever was written to be
    /// truncated by the caller) when the change is not reported.
    fn write_change(
        &self,
        ts: &TableSchema,
        ch: &RowChange,
        version: MonitorVersion,
        out: &mut Vec<u8>,
    ) -> bool {
        let old = ch.old.as_deref().filter(|r| self.condition.eval(r));
        let new = ch.new.as_deref().filter(|r| self.condition.eval(r));
        match (old, new, version) {
            (None, None, _) => false,
            (None, Some(n), v) => {
                if !self.select.insert {
                    return false;
                }
                let v1 = v == MonitorVersion::V1;
                out.extend_from_slice(if v1 { b"{\"new\":" } else { b"{\"insert\":" });
                self.write_row(ts, n, !v1, out);
                out.push(b'}');
                true
            }
            (Some(o), None, MonitorVersion::V1) => {
                if !self.select.delete {
                    return false;
                }
                out.extend_from_slice(b"{\"old\":");
                self.write_row(ts, o, false, out);
                out.push(b'}');
                true
            }
            (Some(_), None, _) => {
                if self.select.delete {
                    out.extend_from_slice(b"{\"delete\":null}");
                }
                self.select.delete
            }
            (Some(o), Some(n), v) => {
                if !self.select.modify {
                    return false;
                }
                let mut changed = self
                    .columns
                    .iter()
                    .copied()
                    .filter(|&c| o.cols[c] != n.cols[c])
                    .peekable();
                // `_version` changes with every modification (see `change_json`).
                if changed.peek().is_none() && !self.version {
                    return false;
                }
                if v == MonitorVersion::V1 {
                    out.extend_from_slice(b"{\"old\":{");
                    self.write_members(ts, changed, o.version, out, |c, ty, out| {
                        o.cols[c].write_json(ty, out)
                    });
                    out.extend_from_slice(b"},\"new\":");
                    self.write_row(ts, n, false, out);
                    out.push(b'}');
                } else {
                    out.extend_from_slice(b"{\"modify\":{");
                    self.write_members(ts, changed, n.version, out, |c, ty, out| {
                        Datum::diff(&o.cols[c], &n.cols[c], ty).write_json(ty, out)
                    });
                    out.extend_from_slice(b"}}");
                }
                true
            }
        }
    }

    fn change_json(
        &self,
        ts: &TableSchema,
        ch: &RowChange,
        version: MonitorVersion,
    ) -> Option<Value> {
        let old = ch.old.as_deref().filter(|r| self.condition.eval(r));
        let new = ch.new.as_deref().filter(|r| self.condition.eval(r));
        match (old, new, version) {
            (None, None, _) => None,
            (None, Some(n), MonitorVersion::V1) => self
                .select
                .insert
                .then(|| json!({"new": self.row_json(ts, n, false)})),
            (None, Some(n), _) => self
                .select
                .insert
                .then(|| json!({"insert": self.row_json(ts, n, true)})),
            (Some(o), None, MonitorVersion::V1) => self
                .select
                .delete
                .then(|| json!({"old": self.row_json(ts, o, false)})),
            (Some(_), None, _) => self.select.delete.then(|| json!({"delete": null})),
            (Some(o), Some(n), v) => {
                if !self.select.modify {
                    return None;
                }
                let changed: Vec<usize> = self
                    .columns
                    .iter()
                    .copied()
                    .filter(|&c| o.cols[c] != n.cols[c])
                    .collect();
                // `_version` changes with every modification (also one that weak-reference
                // clean-up undid), so a monitor of `_version` reports every modified row.
                if changed.is_empty() && !self.version {
                    return None;
                }
                if v == MonitorVersion::V1 {
                    let mut old_m = Map::new();
                    for &c in &changed {
                        old_m.insert(
                            ts.columns[c].name.clone(),
                            o.cols[c].to_json(&ts.columns[c].ty),
                        );
                    }
                    if self.version {
                        old_m.insert("_version".into(), json!(["uuid", o.version.to_string()]));
                    }
                    Some(json!({"old": old_m, "new": self.row_json(ts, n, false)}))
                } else {
                    let mut m = Map::new();
                    for &c in &changed {
                        let ty = &ts.columns[c].ty;
                        m.insert(
                            ts.columns[c].name.clone(),
                            Datum::diff(&o.cols[c], &n.cols[c], ty).to_json(ty),
                        );
                    }
                    if self.version {
                        m.insert("_version".into(), json!(["uuid", n.version.to_string()]));
                    }
                    Some(json!({"modify": m}))
                }
            }
        }
    }
}

/// A JSON string (escaped as serde_json escapes it).
fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A UUID as a JSON string.
fn write_uuid_str(out: &mut Vec<u8>, u: &Uuid) {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    out.push(b'"');
    out.extend_from_slice(u.hyphenated().encode_lower(&mut buf).as_bytes());
    out.push(b'"');
}

/// Merge consecutive deltas into one: per row, the first `old` and the last `new`; rows that
/// were inserted and then deleted vanish.
pub fn merge_deltas(deltas: &[Arc<TxnDelta>]) -> TxnDelta {
    let mut per_table: std::collections::BTreeMap<usize, HashMap<Uuid, RowChange>> =
        Default::default();
    for d in deltas {
        for (t, changes) in &d.tables {
            let m = per_table.entry(*t).or_default();
            for ch in changes {
                match m.get_mut(&ch.uuid) {
                    Some(existing) => existing.new = ch.new.clone(),
                    None => {
                        m.insert(ch.uuid, ch.clone());
                    }
                }
            }
        }
    }
    let mut tables = Vec::new();
    for (t, m) in per_table {
        let mut changes: Vec<RowChange> = m
            .into_values()
            .filter(|c| c.old.is_some() || c.new.is_some())
            .collect();
        if changes.is_empty() {
            continue;
        }
        changes.sort_by_key(|c| c.uuid);
        tables.push((t, changes));
    }
    TxnDelta {
        tables,
        comment: None,
        durable: false,
    }
}
