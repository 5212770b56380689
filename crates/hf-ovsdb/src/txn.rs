//! Transactions: RFC 7047 section 5.2 (`transact`) with every operation, and the commit-time
//! checks of section 3.2 (referential integrity, weak references, garbage collection of
//! unreferenced rows in non-root tables, `maxRows`, `indexes`).
//!
//! Call contract: [`execute`] validates and computes the transaction's effect against the
//! committed database without changing any row, and returns the [`TxnDelta`] to commit. The
//! caller persists the delta (the file format is in [`crate::file`]), then calls
//! [`crate::Database::apply`]. If persisting fails the caller drops the delta and replies with
//! an "I/O error"; nothing committed is lost.

use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::atom::describe_json;
use crate::condition::{Where, uuid_column_type};
use crate::datum::Datum;
use crate::db::{Database, Row, RowChange, TxnDelta, UuidGen};
use crate::error::{ErrorKind, OvsdbError, Result};
use crate::mutation::Mutation;
use crate::schema::{ColumnRef, Schema, TableSchema};

/// What a transaction needs to know about the session that sent it.
pub trait TxnEnv {
    /// Whether the session holds lock `name` (for `assert`).
    fn owns_lock(&self, name: &str) -> bool;
    /// Whether a `wait` with a timeout has already waited out its time (then it fails with
    /// "timed out" instead of blocking again).
    fn wait_expired(&self) -> bool {
        false
    }
}

/// An environment with no locks, whose waits never block.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLocks;

impl TxnEnv for NoLocks {
    fn owns_lock(&self, _: &str) -> bool {
        false
    }
    fn wait_expired(&self) -> bool {
        true
    }
}

/// The outcome of executing a transaction.
#[derive(Debug)]
pub enum TxnOutcome {
    /// All operations succeeded: reply with `results` once `delta` is durable and applied.
    Commit {
        /// One result per operation.
        results: Vec<Value>,
        /// The changes (possibly empty: read-only transactions).
        delta: TxnDelta,
    },
    /// An operation or the commit failed: reply with `results`; nothing changes.
    Failed {
        /// The results, ending with the error.
        results: Vec<Value>,
        /// The error.
        error: OvsdbError,
    },
    /// A `wait` operation with a timeout is not satisfied yet: run the whole transaction again
    /// after the next commit, or with [`TxnEnv::wait_expired`] true once `timeout_ms` passes
    /// (`None`: wait forever).
    Blocked {
        /// How long the wait may block, in milliseconds.
        timeout_ms: Option<u64>,
    },
}

enum Work {
    Insert(Row),
    Modify(Row),
    Delete,
}

struct Symbol {
    uuid: Uuid,
    created: bool,
}

struct Exec<'a> {
    db: &'a Database,
    schema: &'a Schema,
    work: Vec<HashMap<Uuid, Work>>,
    inserted: Vec<Vec<Uuid>>,
    symbols: HashMap<String, Symbol>,
    uuid_gen: UuidGen,
    comments: Vec<String>,
    durable: bool,
}

enum OpError {
    Error(OvsdbError),
    Blocked(Option<u64>),
}

impl From<OvsdbError> for OpError {
    fn from(e: OvsdbError) -> Self {
        OpError::Error(e)
    }
}

/// A `transact` request's operations (the params after the database name).
#[derive(Debug, Clone)]
pub enum TxnOps {
    /// As JSON trees.
    Values(Vec<Value>),
    /// As JSON texts (each one valid JSON, e.g. borrowed from the request by a
    /// `RawValue` parse), each parsed only when it runs: a 100k-operation request never
    /// exists as one tree, only one operation's at a time.
    Text(Vec<Box<RawValue>>),
}

impl TxnOps {
    /// How many operations.
    pub fn len(&self) -> usize {
        match self {
            TxnOps::Values(v) => v.len(),
            TxnOps::Text(t) => t.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Operation `i` as a tree (`i < len`).
    fn get(&self, i: usize) -> Result<std::borrow::Cow<'_, Value>> {
        match self {
            TxnOps::Values(v) => Ok(std::borrow::Cow::Borrowed(&v[i])),
            TxnOps::Text(t) => serde_json::from_str(t[i].get())
                .map(std::borrow::Cow::Owned)
                .map_err(|e| OvsdbError::syntax(format!("operation is not valid JSON: {e}"))),
        }
    }
}

/// Execute the operations of a `transact` request (the params after the database name).
pub fn execute(db: &mut Database, ops: &[Value], env: &dyn TxnEnv) -> TxnOutcome {
    execute_ops(db, &Ops::Slice(ops), env)
}

/// [`execute`] for operations kept as [`TxnOps`] (trees or texts).
pub fn execute_txn(db: &mut Database, ops: &TxnOps, env: &dyn TxnEnv) -> TxnOutcome {
    execute_ops(db, &Ops::Owned(ops), env)
}

enum Ops<'a> {
    Slice(&'a [Value]),
    Owned(&'a TxnOps),
}

impl Ops<'_> {
    fn len(&self) -> usize {
        match self {
            Ops::Slice(s) => s.len(),
            Ops::Owned(o) => o.len(),
        }
    }

    fn get(&self, i: usize) -> Result<std::borrow::Cow<'_, Value>> {
        match self {
            Ops::Slice(s) => Ok(std::borrow::Cow::Borrowed(&s[i])),
            Ops::Owned(o) => o.get(i),
        }
    }
}

fn execute_ops(db: &mut Database, ops: &Ops<'_>, env: &dyn TxnEnv) -> TxnOutcome {
    let uuid_gen = db.uuids.clone();
    let schema = db.schema.clone();
    let mut ex = Exec {
        db,
        schema: &schema,
        work: (0..schema.tables.len()).map(|_| HashMap::new()).collect(),
        inserted: vec![Vec::new(); schema.tables.len()],
        symbols: HashMap::new(),
        uuid_gen,
        comments: Vec::new(),
        durable: false,
    };
    let mut results = Vec::with_capacity(ops.len());
    for i in 0..ops.len() {
        let op = match ops.get(i) {
            Ok(op) => op,
            Err(e) => {
                let e = e.context(format!("operation {} of {}", i + 1, ops.len()));
                results.push(e.to_json());
                results.resize(ops.len(), Value::Null);
                return TxnOutcome::Failed { results, error: e };
            }
        };
        let op = &*op;
        match ex.op(op, env) {
            Ok(r) => results.push(r),
            Err(OpError::Blocked(t)) => return TxnOutcome::Blocked { timeout_ms: t },
            Err(OpError::Error(mut e)) => {
                if e.kind == ErrorKind::Syntax && !e.details.starts_with("operation") {
                    e = e.context(format!(
                        "operation {} of {} ({})",
                        i + 1,
                        ops.len(),
                        op_name(op)
                    ));
                }
                results.push(e.to_json());
                // The operations after the failed one were not executed: null, as
                // ovsdb-server answers (one result per operation).
                results.resize(ops.len(), Value::Null);
                return TxnOutcome::Failed { results, error: e };
            }
        }
    }
    if let Some((name, _)) = ex.symbols.iter().find(|(_, s)| !s.created) {
        let e = OvsdbError::syntax(format!(
            "named-uuid \"{name}\" is referenced but no insert in this transaction creates it"
        ));
        results.push(e.to_json());
        return TxnOutcome::Failed { results, error: e };
    }
    match ex.commit() {
        Ok(delta) => {
            let uuid_gen = ex.uuid_gen;
            db.uuids = uuid_gen;
            TxnOutcome::Commit { results, delta }
        }
        Err(e) => {
            results.push(e.to_json());
            TxnOutcome::Failed { results, error: e }
        }
    }
}

fn op_name(op: &Value) -> String {
    op.get("op")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

fn member<'v>(o: &'v Map<String, Value>, k: &str) -> Result<&'v Value> {
    o.get(k)
        .ok_or_else(|| OvsdbError::syntax(format!("operation is missing required member \"{k}\"")))
}

impl<'a> Exec<'a> {
    fn table(&self, o: &Map<String, Value>) -> Result<(usize, &'a TableSchema)> {
        let name = member(o, "table")?
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("\"table\" must be a string"))?;
        let t = self.schema.require_table(name)?;
        Ok((t, &self.schema.tables[t]))
    }

    fn op(&mut self, op: &Value, env: &dyn TxnEnv) -> Result<Value, OpError> {
        let o = op.as_object().ok_or_else(|| {
            OvsdbError::syntax(format!(
                "operation must be an object, not {}",
                describe_json(op)
            ))
        })?;
        let name = member(o, "op")?
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("\"op\" must be a string"))?;
        Ok(match name {
            "insert" => self.insert(o)?,
            "select" => self.select(o)?,
            "update" => self.update(o)?,
            "mutate" => self.mutate(o)?,
            "delete" => self.delete(o)?,
            "wait" => self.wait(o, env)?,
            "commit" => {
                let d = member(o, "durable")?
                    .as_bool()
                    .ok_or_else(|| OvsdbError::syntax("\"durable\" must be a boolean"))?;
                self.durable |= d;
                json!({})
            }
            "abort" => return Err(OvsdbError::new(ErrorKind::Aborted, "aborted by request").into()),
            "comment" => {
                let c = member(o, "comment")?
                    .as_str()
                    .ok_or_else(|| OvsdbError::syntax("\"comment\" must be a string"))?;
                self.comments.push(c.to_string());
                json!({})
            }
            "assert" => {
                let l = member(o, "lock")?
                    .as_str()
                    .ok_or_else(|| OvsdbError::syntax("\"lock\" must be a string"))?;
                if !env.owns_lock(l) {
                    return Err(OvsdbError::new(
                        ErrorKind::NotOwner,
                        format!("lock \"{l}\" is not held by this session"),
                    )
                    .into());
                }
                json!({})
            }
            other => {
                return Err(OvsdbError::syntax(format!("unknown operation \"{other}\"")).into());
            }
        })
    }

    fn resolve_named(
        symbols: &mut HashMap<String, Symbol>,
        uuid_gen: &mut UuidGen,
        name: &str,
    ) -> Uuid {
        // `entry_ref`: the name is copied only when the symbol is new.
        symbols
            .entry_ref(name)
            .or_insert_with(|| Symbol {
                uuid: uuid_gen.next_uuid(),
                created: false,
            })
            .uuid
    }

    /// Parse a row object's columns into `(column index, datum)` pairs.
    fn parse_row(
        &mut self,
        ts: &TableSchema,
        v: &Value,
        for_update: bool,
    ) -> Result<Vec<(usize, Datum)>> {
        let obj = v.as_object().ok_or_else(|| {
            OvsdbError::syntax(format!(
                "\"row\" must be an object, not {}",
                describe_json(v)
            ))
        })?;
        let mut out = Vec::with_capacity(obj.len());
        let symbols = &mut self.symbols;
        let uuid_gen = &mut self.uuid_gen;
        let mut named = |n: &str| Ok(Self::resolve_named(symbols, uuid_gen, n));
        for (cname, val) in obj {
            let c = match ts.column_ref(cname)? {
                ColumnRef::User(c) => c,
                _ => {
                    return Err(OvsdbError::syntax(format!(
                        "column {cname} cannot be written"
                    )));
                }
            };
            let cs = &ts.columns[c];
            if for_update && !cs.mutable {
                return Err(OvsdbError::constraint(format!(
                    "cannot update immutable column {cname} in table {}",
                    ts.name
                )));
            }
            let d = Datum::from_json(&cs.ty, val, &mut named)
                .map_err(|e| e.context(format!("column {cname} of table {}", ts.name)))?;
            out.push((c, d));
        }
        Ok(out)
    }

    fn parse_where(&mut self, ts: &TableSchema, o: &Map<String, Value>) -> Result<Where> {
        let symbols = &mut self.symbols;
        let uuid_gen = &mut self.uuid_gen;
        let mut named = |n: &str| Ok(Self::resolve_named(symbols, uuid_gen, n));
        Where::from_json(ts, member(o, "where")?, &mut named)
    }

    fn get(&self, t: usize, u: &Uuid) -> Option<&Row> {
        match self.work[t].get(u) {
            Some(Work::Insert(r) | Work::Modify(r)) => Some(r),
            Some(Work::Delete) => None,
            None => self.db.row(t, u).map(|r| &**r),
        }
    }

    fn get_mut(&mut self, t: usize, u: &Uuid) -> Option<&mut Row> {
        if !self.work[t].contains_key(u) {
            let r = self.db.row(t, u)?;
            self.work[t].insert(*u, Work::Modify((**r).clone()));
        }
        match self.work[t].get_mut(u) {
            Some(Work::Insert(r) | Work::Modify(r)) => Some(r),
            _ => None,
        }
    }

    fn matching(&self, t: usize, w: &Where) -> Vec<Uuid> {
        if let Some(u) = w.uuid_eq() {
            return match self.get(t, &u) {
                Some(r) if w.eval(r) => vec![u],
                _ => vec![],
            };
        }
        let mut out = Vec::new();
        for (u, r) in &self.db.tables[t].rows {
            let r = match self.work[t].get(u) {
                Some(Work::Modify(m)) => m,
                Some(_) => continue,
                None => &**r,
            };
            if w.eval(r) {
                out.push(*u);
            }
        }
        for u in &self.inserted[t] {
            if let Some(Work::Insert(r)) = self.work[t].get(u)
                && w.eval(r)
            {
                out.push(*u);
            }
        }
        out
    }

    fn insert(&mut self, o: &Map<String, Value>) -> Result<Value> {
        let (t, ts) = self.table(o)?;
        let uuid = match (o.get("uuid-name"), o.get("uuid")) {
            (Some(n), _) => {
                let n = n
                    .as_str()
                    .ok_or_else(|| OvsdbError::syntax("\"uuid-name\" must be a string"))?;
                if !n
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    || !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    return Err(OvsdbError::syntax(format!(
                        "\"{n}\" is not a valid uuid-name"
                    )));
                }
                let uuid_gen = &mut self.uuid_gen;
                let sym = self.symbols.entry(n.to_string()).or_insert_with(|| Symbol {
                    uuid: uuid_gen.next_uuid(),
                    created: false,
                });
                if sym.created {
                    return Err(OvsdbError::new(
                        ErrorKind::DuplicateUuidName,
                        format!("uuid-name \"{n}\" is used by more than one insert"),
                    ));
                }
                sym.created = true;
                sym.uuid
            }
            (None, Some(u)) => {
                let s = u.as_array().and_then(|a| match a.as_slice() {
                    [Value::String(tag), Value::String(s)] if tag == "uuid" => Some(s.as_str()),
                    _ => None,
                });
                let s = s
                    .or(u.as_str())
                    .ok_or_else(|| OvsdbError::syntax("\"uuid\" must be a UUID"))?;
                crate::atom::parse_uuid(s)?
            }
            (None, None) => self.uuid_gen.next_uuid(),
        };
        if self.get(t, &uuid).is_some() || self.work[t].contains_key(&uuid) {
            return Err(OvsdbError::new(
                ErrorKind::DuplicateUuidName,
                format!("row {uuid} already exists in table {}", ts.name),
            ));
        }
        let mut cols: Vec<Datum> = ts.defaults().to_vec();
        if let Some(row) = o.get("row") {
            for (c, d) in self.parse_row(ts, row, false)? {
                cols[c] = d;
            }
        }
        // Defaults must satisfy the column's constraints too (an enum whose default is not
        // one of its values must be given), as ovsdb-server checks them. Given values were
        // checked when parsed, so only the columns whose default is invalid (found once, with
        // the schema) are looked at.
        for &c in ts.invalid_defaults() {
            let cs = &ts.columns[c];
            cols[c]
                .check_atoms(&cs.ty)
                .map_err(|e| e.context(format!("column {} of table {}", cs.name, ts.name)))?;
        }
        let version = self.uuid_gen.next_uuid();
        self.work[t].insert(
            uuid,
            Work::Insert(Row {
                uuid,
                version,
                cols,
            }),
        );
        self.inserted[t].push(uuid);
        // The text form without the formatting machinery (one reply element per inserted row).
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = uuid.hyphenated().encode_lower(&mut buf);
        Ok(json!({"uuid": ["uuid", &*text]}))
    }

    fn columns(&self, ts: &TableSchema, o: &Map<String, Value>) -> Result<Option<Vec<ColumnRef>>> {
        let Some(cols) = o.get("columns") else {
            return Ok(None);
        };
        let arr = cols
            .as_array()
            .ok_or_else(|| OvsdbError::syntax("\"columns\" must be an array"))?;
        let mut out = Vec::with_capacity(arr.len());
        for c in arr {
            let n = c
                .as_str()
                .ok_or_else(|| OvsdbError::syntax("column names must be strings"))?;
            let cr = ts.column_ref(n)?;
            if !out.contains(&cr) {
                out.push(cr);
            }
        }
        Ok(Some(out))
    }

    fn select(&mut self, o: &Map<String, Value>) -> Result<Value> {
        let (t, ts) = self.table(o)?;
        let w = self.parse_where(ts, o)?;
        let cols = self.columns(ts, o)?;
        let rows: Vec<Value> = self
            .matching(t, &w)
            .iter()
            .filter_map(|u| self.get(t, u))
            .map(|r| row_to_json(ts, r, cols.as_deref()))
            .collect();
        Ok(json!({"rows": rows}))
    }

    fn update(&mut self, o: &Map<String, Value>) -> Result<Value> {
        let (t, ts) = self.table(o)?;
        let w = self.parse_where(ts, o)?;
        let row = self.parse_row(ts, member(o, "row")?, true)?;
        let targets = self.matching(t, &w);
        for u in &targets {
            if let Some(r) = self.get_mut(t, u) {
                for (c, d) in &row {
                    r.cols[*c] = d.clone();
                }
            }
        }
        Ok(json!({"count": targets.len()}))
    }

    fn mutate(&mut self, o: &Map<String, Value>) -> Result<Value> {
        let (t, ts) = self.table(o)?;
        let w = self.parse_where(ts, o)?;
        let ms = member(o, "mutations")?
            .as_array()
            .ok_or_else(|| OvsdbError::syntax("\"mutations\" must be an array"))?;
        let mut muts = Vec::with_capacity(ms.len());
        {
            let symbols = &mut self.symbols;
            let uuid_gen = &mut self.uuid_gen;
            let mut named = |n: &str| Ok(Self::resolve_named(symbols, uuid_gen, n));
            for m in ms {
                muts.push(Mutation::from_json(ts, m, &mut named)?);
            }
        }
        let targets = self.matching(t, &w);
        for u in &targets {
            if let Some(r) = self.get_mut(t, u) {
                for m in &muts {
                    let ty = &ts.columns[m.column].ty;
                    m.apply(ty, &mut r.cols[m.column]).map_err(|e| {
                        e.context(format!(
                            "mutation of column {} of table {}",
                            ts.columns[m.column].name, ts.name
                        ))
                    })?;
                }
            }
        }
        Ok(json!({"count": targets.len()}))
    }

    fn delete(&mut self, o: &Map<String, Value>) -> Result<Value> {
        let (t, ts) = self.table(o)?;
        let w = self.parse_where(ts, o)?;
        let targets = self.matching(t, &w);
        for u in &targets {
            self.remove(t, u);
        }
        Ok(json!({"count": targets.len()}))
    }

    fn remove(&mut self, t: usize, u: &Uuid) {
        if matches!(self.work[t].get(u), Some(Work::Insert(_))) {
            self.work[t].remove(u);
            self.inserted[t].retain(|x| x != u);
        } else if self.db.row(t, u).is_some() {
            self.work[t].insert(*u, Work::Delete);
        }
    }

    fn wait(&mut self, o: &Map<String, Value>, env: &dyn TxnEnv) -> Result<Value, OpError> {
        let (t, ts) = self.table(o)?;
        let timeout =
            match o.get("timeout") {
                None => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    OvsdbError::syntax("\"timeout\" must be a non-negative integer")
                })?),
            };
        let w = self.parse_where(ts, o)?;
        let cols = self.columns(ts, o)?.unwrap_or_default();
        let until = member(o, "until")?
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("\"until\" must be a string"))?;
        let want_equal = match until {
            "==" => true,
            "!=" => false,
            _ => {
                return Err(OvsdbError::syntax(format!(
                    "\"until\" must be \"==\" or \"!=\", not \"{until}\""
                ))
                .into());
            }
        };
        let rows_json = member(o, "rows")?
            .as_array()
            .ok_or_else(|| OvsdbError::syntax("\"rows\" must be an array"))?;
        let mut expected: Vec<Vec<Datum>> = Vec::with_capacity(rows_json.len());
        for r in rows_json {
            let obj = r
                .as_object()
                .ok_or_else(|| OvsdbError::syntax("each of \"rows\" must be an object"))?;
            let mut vals = Vec::with_capacity(cols.len());
            for c in &cols {
                let name = match c {
                    ColumnRef::User(i) => ts.columns[*i].name.as_str(),
                    ColumnRef::Uuid => "_uuid",
                    ColumnRef::Version => "_version",
                };
                let v = obj.get(name).ok_or_else(|| {
                    OvsdbError::syntax(format!("row in \"rows\" lacks column {name}"))
                })?;
                let ty = ts.column_type(*c, uuid_column_type());
                let symbols = &mut self.symbols;
                let uuid_gen = &mut self.uuid_gen;
                let mut named = |n: &str| Ok(Self::resolve_named(symbols, uuid_gen, n));
                vals.push(Datum::from_json(ty, v, &mut named)?);
            }
            if obj.len() != cols.len() {
                return Err(OvsdbError::syntax(
                    "rows in a wait must have exactly the listed columns",
                )
                .into());
            }
            expected.push(vals);
        }
        let mut actual: Vec<Vec<Datum>> = self
            .matching(t, &w)
            .iter()
            .filter_map(|u| self.get(t, u))
            .map(|r| cols.iter().map(|c| project(r, *c)).collect())
            .collect();
        actual.sort();
        expected.sort();
        let equal = actual == expected;
        if equal == want_equal {
            return Ok(json!({}));
        }
        if timeout == Some(0) || env.wait_expired() {
            return Err(OvsdbError::new(
                ErrorKind::TimedOut,
                format!("\"wait\" timed out on table {}", ts.name),
            )
            .into());
        }
        Err(OpError::Blocked(timeout))
    }

    /// Commit-time checks and construction of the delta.
    fn commit(&mut self) -> Result<TxnDelta> {
        let schema = self.schema;
        // A row the operations left at its committed values is no change (ovsdb-server drops
        // such rows before it assesses references). A row that weak-reference clean-up below
        // returns to its committed values stays changed and gets a new `_version`, as there.
        for t in 0..schema.tables.len() {
            let db = &self.db;
            self.work[t].retain(|u, w| match w {
                Work::Modify(r) => db.row(t, u).is_none_or(|o| o.cols != r.cols),
                _ => true,
            });
        }
        // Strong reference count changes caused by this transaction.
        let mut strong_delta: HashMap<Uuid, i64> = HashMap::new();
        let mut candidates: Vec<(usize, Uuid)> = Vec::new();
        for t in 0..schema.tables.len() {
            let ts = &schema.tables[t];
            if !ts.has_refs() && ts.is_root {
                continue;
            }
            for (u, w) in &self.work[t] {
                if !ts.is_root && matches!(w, Work::Insert(_)) {
                    candidates.push((t, *u));
                }
                if !ts.has_refs() {
                    continue;
                }
                if let Some(old) = self.db.row(t, u) {
                    count_refs(ts, old, -1, &mut strong_delta, &mut candidates);
                }
                if let Work::Insert(r) | Work::Modify(r) = w {
                    count_refs(ts, r, 1, &mut strong_delta, &mut candidates);
                }
            }
        }
        // Garbage collection: rows of non-root tables that nothing strongly references.
        while let Some((t, u)) = candidates.pop() {
            let ts = &schema.tables[t];
            if ts.is_root {
                continue;
            }
            let Some(row) = self.get(t, &u) else { continue };
            let n =
                i64::from(self.db.strong_refs_to(&u)) + strong_delta.get(&u).copied().unwrap_or(0);
            if n > 0 {
                continue;
            }
            let row = row.clone();
            count_refs(ts, &row, -1, &mut strong_delta, &mut candidates);
            self.remove(t, &u);
        }
        // Checked in ovsdb-server's order, so that a transaction with several faults reports
        // the same one: strong referential integrity, then maxRows, then weak references
        // (removed, then sizes), then indexes.
        for t in 0..schema.tables.len() {
            let ts = &schema.tables[t];
            for (u, w) in &self.work[t] {
                match w {
                    Work::Delete => {
                        let n = i64::from(self.db.strong_refs_to(u))
                            + strong_delta.get(u).copied().unwrap_or(0);
                        if n > 0 {
                            return Err(OvsdbError::new(
                                ErrorKind::ReferentialIntegrity,
                                format!(
                                    "cannot delete {} row {u} because of {n} remaining strong reference(s)",
                                    ts.name
                                ),
                            ));
                        }
                    }
                    Work::Insert(r) | Work::Modify(r) => {
                        for (c, cs) in ts.columns.iter().enumerate() {
                            if !cs.ty.has_refs() {
                                continue;
                            }
                            let mut bad = None;
                            r.cols[c].for_each_ref(&cs.ty, |target, tt, strong| {
                                if strong && bad.is_none() && self.get(tt, &target).is_none() {
                                    bad = Some((target, tt));
                                }
                            });
                            if let Some((target, tt)) = bad {
                                return Err(OvsdbError::new(
                                    ErrorKind::ReferentialIntegrity,
                                    format!(
                                        "table {} column {} row {u} references nonexistent row {target} in table {}",
                                        ts.name, cs.name, schema.tables[tt].name
                                    ),
                                ));
                            }
                        }
                    }
                }
            }
        }
        for t in 0..schema.tables.len() {
            let ts = &schema.tables[t];
            if let Some(max) = ts.max_rows
                && !self.work[t].is_empty()
            {
                let mut n = self.db.tables[t].rows.len() as i64;
                for (u, w) in &self.work[t] {
                    match w {
                        Work::Insert(_) => n += 1,
                        Work::Delete if self.db.row(t, u).is_some() => n -= 1,
                        _ => {}
                    }
                }
                if n > max as i64 {
                    return Err(OvsdbError::constraint(format!(
                        "transaction causes \"{}\" table to contain {n} rows, greater than the schema-defined limit of {max} row(s)",
                        ts.name
                    )));
                }
            }
        }
        // Weak references: drop references to rows that are gone, from rows this transaction
        // wrote and from committed rows that point at deleted rows.
        let mut deleted: Vec<Uuid> = Vec::new();
        for t in 0..schema.tables.len() {
            for (u, w) in &self.work[t] {
                if matches!(w, Work::Delete) {
                    deleted.push(*u);
                }
            }
        }
        let mut referrers: HashSet<(usize, Uuid)> = HashSet::new();
        for d in &deleted {
            if let Some(inc) = self.db.incoming.get(d) {
                for (src, (st, _)) in &inc.weak {
                    referrers.insert((*st, *src));
                }
            }
        }
        for t in 0..schema.tables.len() {
            if schema.tables[t].has_weak_refs() {
                for (u, w) in &self.work[t] {
                    if !matches!(w, Work::Delete) {
                        referrers.insert((t, *u));
                    }
                }
            }
        }
        for (t, u) in referrers {
            let ts = &schema.tables[t];
            if self.get(t, &u).is_none() {
                continue;
            }
            // Decide first (immutable), then write.
            let mut dangling_cols = Vec::new();
            if let Some(r) = self.get(t, &u) {
                for (c, cs) in ts.columns.iter().enumerate() {
                    if !cs.ty.has_weak_refs() {
                        continue;
                    }
                    let mut any = false;
                    r.cols[c].for_each_ref(&cs.ty, |target, tt, strong| {
                        if !strong && self.get(tt, &target).is_none() {
                            any = true;
                        }
                    });
                    if any {
                        dangling_cols.push(c);
                    }
                }
            }
            if dangling_cols.is_empty() {
                continue;
            }
            let gone: HashSet<Uuid> = {
                let mut g = HashSet::new();
                if let Some(r) = self.get(t, &u) {
                    for c in &dangling_cols {
                        r.cols[*c].for_each_ref(&ts.columns[*c].ty, |target, tt, strong| {
                            if !strong && self.get(tt, &target).is_none() {
                                g.insert(target);
                            }
                        });
                    }
                }
                g
            };
            if let Some(r) = self.get_mut(t, &u) {
                for c in dangling_cols {
                    let ty = weak_only(&ts.columns[c].ty);
                    r.cols[c].remove_refs(&ty, &|x| gone.contains(&x));
                }
            }
        }
        for t in 0..schema.tables.len() {
            let ts = &schema.tables[t];
            for (u, w) in &self.work[t] {
                if let Work::Insert(r) | Work::Modify(r) = w {
                    for (c, cs) in ts.columns.iter().enumerate() {
                        r.cols[c].check_size(&cs.ty).map_err(|e| {
                            e.context(format!("column {} of {} row {u}", cs.name, ts.name))
                        })?;
                    }
                }
            }
        }
        for t in 0..schema.tables.len() {
            self.check_indexes(t)?;
        }
        Ok(self.build_delta())
    }

    fn check_indexes(&self, t: usize) -> Result<()> {
        let ts = &self.schema.tables[t];
        if ts.indexes.is_empty() || self.work[t].is_empty() {
            return Ok(());
        }
        for (ix, cols) in ts.indexes.iter().enumerate() {
            let mut seen: HashMap<Vec<Datum>, Uuid> = HashMap::new();
            for (u, w) in &self.work[t] {
                let (Work::Insert(r) | Work::Modify(r)) = w else {
                    continue;
                };
                let key: Vec<Datum> = cols.iter().map(|c| r.cols[*c].clone()).collect();
                let dup = |other: Uuid| {
                    let names: Vec<&str> =
                        cols.iter().map(|c| ts.columns[*c].name.as_str()).collect();
                    OvsdbError::constraint(format!(
                        "transaction causes {} rows {u} and {other} to have identical values for index ({})",
                        ts.name,
                        names.join(", ")
                    ))
                };
                if let Some(other) = seen.get(&key) {
                    return Err(dup(*other));
                }
                if let Some(other) = self.db.tables[t].indexes[ix].get(&key)
                    && other != u
                {
                    // The committed holder keeps the key unless this transaction changes it.
                    let still = match self.work[t].get(other) {
                        None => true,
                        Some(Work::Delete) => false,
                        Some(Work::Insert(r2) | Work::Modify(r2)) => {
                            cols.iter().map(|c| &r2.cols[*c]).eq(key.iter())
                        }
                    };
                    if still {
                        return Err(dup(*other));
                    }
                }
                seen.insert(key, *u);
            }
        }
        Ok(())
    }

    fn build_delta(&mut self) -> TxnDelta {
        let mut tables = Vec::new();
        for t in 0..self.schema.tables.len() {
            let work = std::mem::take(&mut self.work[t]);
            let mut changes = Vec::with_capacity(work.len());
            for (u, w) in work {
                let old = self.db.row(t, &u).cloned();
                let new = match w {
                    Work::Delete => None,
                    Work::Insert(r) => Some(Arc::new(r)),
                    Work::Modify(mut r) => {
                        r.version = self.uuid_gen.next_uuid();
                        Some(Arc::new(r))
                    }
                };
                if old.is_none() && new.is_none() {
                    continue;
                }
                changes.push(RowChange { uuid: u, old, new });
            }
            if !changes.is_empty() {
                changes.sort_by_key(|c| c.uuid);
                tables.push((t, changes));
            }
        }
        let comment = if self.comments.is_empty() {
            None
        } else {
            Some(self.comments.join("\n"))
        };
        TxnDelta {
            tables,
            comment,
            durable: self.durable,
        }
    }
}

/// A copy of `ty` whose strong references are treated as plain UUIDs, so that weak-reference
/// clean-up never removes a strong reference.
fn weak_only(ty: &crate::types::ColumnType) -> crate::types::ColumnType {
    use crate::types::RefType::Strong;
    let mut ty = ty.clone();
    if ty.key.ref_type == Strong {
        ty.key.ref_table_index = None;
    }
    if let Some(v) = &mut ty.value
        && v.ref_type == Strong
    {
        v.ref_table_index = None;
    }
    ty
}

fn count_refs(
    ts: &TableSchema,
    r: &Row,
    sign: i64,
    delta: &mut HashMap<Uuid, i64>,
    candidates: &mut Vec<(usize, Uuid)>,
) {
    for (c, cs) in ts.columns.iter().enumerate() {
        if !cs.ty.has_refs() {
            continue;
        }
        r.cols[c].for_each_ref(&cs.ty, |target, tt, strong| {
            if strong {
                *delta.entry(target).or_insert(0) += sign;
                if sign < 0 {
                    candidates.push((tt, target));
                }
            }
        });
    }
}

fn project(r: &Row, c: ColumnRef) -> Datum {
    match c {
        ColumnRef::User(i) => r.cols[i].clone(),
        ColumnRef::Uuid => Datum::scalar(crate::atom::Atom::Uuid(r.uuid)),
        ColumnRef::Version => Datum::scalar(crate::atom::Atom::Uuid(r.version)),
    }
}

/// A row as a JSON object; `cols` None means every column plus `_uuid` and `_version`.
pub fn row_to_json(ts: &TableSchema, r: &Row, cols: Option<&[ColumnRef]>) -> Value {
    let mut m = Map::new();
    let mut put = |c: ColumnRef| match c {
        ColumnRef::User(i) => {
            m.insert(
                ts.columns[i].name.clone(),
                r.cols[i].to_json(&ts.columns[i].ty),
            );
        }
        ColumnRef::Uuid => {
            m.insert("_uuid".into(), json!(["uuid", r.uuid.to_string()]));
        }
        ColumnRef::Version => {
            m.insert("_version".into(), json!(["uuid", r.version.to_string()]));
        }
    };
    match cols {
        Some(cs) => cs.iter().for_each(|c| put(*c)),
        None => {
            put(ColumnRef::Uuid);
            put(ColumnRef::Version);
            (0..ts.columns.len()).for_each(|i| put(ColumnRef::User(i)));
        }
    }
    Value::Object(m)
}

#[cfg(test)]
#[path = "txn_tests.rs"]
mod tests;
