//! An index of committed rows by column value, so that a monitor's initial contents and a
//! `monitor_cond_change` read only the rows their conditions can match instead of every row
//! of the table (a chassis asking for the flows of 3 datapaths out of 500 reads those flows,
//! not 100k).
//!
//! What it does: for each (table, column) some monitor condition compares with `==` or
//! `includes`, it maps every atom of the column's value (set elements, map keys) to the rows
//! holding it, and keeps the rows whose value is empty apart. [`Database::ensure_row_index`]
//! creates the column indexes a condition needs (one scan each, once);
//! [`Database::apply`] keeps them current. [`Database::monitored_rows`] then yields, for a
//! condition (a disjunction), the rows found through the index for each clause:
//! - `false` finds nothing;
//! - `_uuid == X` is a direct lookup;
//! - `column == V` finds the rows whose value holds V's first atom (or is empty, for an empty
//!   V);
//! - `column includes V` (V not empty) finds the rows holding V's first atom;
//! - anything else (`true`, an empty condition, `!=`, `excludes`, `<`, `_version`, an empty
//!   `includes`, a column without an index) makes the whole table the candidates, as before.
//!
//! What it does not do: decide. The candidates are a superset; the caller still evaluates the
//! condition on each (ovsdb-server's semantics stay in [`crate::condition`]). Column indexes
//! are never dropped (a column once asked for keeps its index while the database lives), and
//! `Where` clauses of transactions do not use them. [`IndexStats`] counts lookups against
//! scans, so tests and benchmarks can see the scan avoided.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::{HashMap, HashSet};
use uuid::Uuid;

use crate::atom::Atom;
use crate::condition::{Clause, Function, MonitorCondition};
use crate::db::{Database, Row};
use crate::schema::ColumnRef;

/// One column's index.
#[derive(Debug, Default, Clone)]
struct ColumnIndex {
    /// Atom (set element or map key) → rows whose value holds it.
    by_atom: HashMap<Atom, HashSet<Uuid>>,
    /// Rows whose value is empty.
    empty: HashSet<Uuid>,
}

impl ColumnIndex {
    fn link(&mut self, c: usize, row: &Row) {
        let v = &row.cols[c];
        if v.keys.is_empty() {
            self.empty.insert(row.uuid);
        }
        for a in &v.keys {
            self.by_atom.entry(a.clone()).or_default().insert(row.uuid);
        }
    }

    fn unlink(&mut self, c: usize, row: &Row) {
        let v = &row.cols[c];
        if v.keys.is_empty() {
            self.empty.remove(&row.uuid);
        }
        for a in &v.keys {
            if let Some(s) = self.by_atom.get_mut(a) {
                s.remove(&row.uuid);
                if s.is_empty() {
                    self.by_atom.remove(a);
                }
            }
        }
    }
}

/// How often conditions were answered through the index and how often by a scan.
#[derive(Debug, Default)]
pub struct IndexStats {
    /// Conditions answered from the index (no scan).
    pub lookups: AtomicU64,
    /// Conditions that needed a scan of the whole table.
    pub scans: AtomicU64,
    /// Candidate rows yielded by lookups (before the condition is evaluated on them).
    pub candidates: AtomicU64,
}

impl IndexStats {
    /// (lookups, scans, candidates) so far.
    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.lookups.load(Ordering::Relaxed),
            self.scans.load(Ordering::Relaxed),
            self.candidates.load(Ordering::Relaxed),
        )
    }
}

impl Clone for IndexStats {
    fn clone(&self) -> Self {
        let (l, s, c) = self.get();
        IndexStats {
            lookups: AtomicU64::new(l),
            scans: AtomicU64::new(s),
            candidates: AtomicU64::new(c),
        }
    }
}

/// The row indexes of one database, per table: (user column, its index).
#[derive(Debug, Default, Clone)]
pub struct RowIndex {
    tables: Vec<Vec<(usize, ColumnIndex)>>,
    /// Lookups against scans.
    pub stats: IndexStats,
}

impl RowIndex {
    /// No index yet, for a database of `n_tables` tables.
    pub(crate) fn new(n_tables: usize) -> Self {
        RowIndex {
            tables: vec![Vec::new(); n_tables],
            stats: IndexStats::default(),
        }
    }

    fn column(&self, t: usize, c: usize) -> Option<&ColumnIndex> {
        self.tables
            .get(t)?
            .iter()
            .find(|(col, _)| *col == c)
            .map(|(_, ix)| ix)
    }

    /// Keeps table `t`'s column indexes current as `old` is replaced by `new`.
    pub(crate) fn update(&mut self, t: usize, old: Option<&Row>, new: Option<&Row>) {
        let Some(cols) = self.tables.get_mut(t) else {
            return;
        };
        for (c, ix) in cols.iter_mut() {
            if let (Some(o), Some(n)) = (old, new)
                && o.cols[*c] == n.cols[*c]
            {
                continue;
            }
            if let Some(o) = old {
                ix.unlink(*c, o);
            }
            if let Some(n) = new {
                ix.link(*c, n);
            }
        }
    }

    /// The column indexed by a clause, when it can use one.
    fn wanted(c: &Clause) -> Option<usize> {
        match c {
            Clause::Compare {
                column: ColumnRef::User(i),
                function: Function::Eq | Function::Includes,
                ..
            } => Some(*i),
            _ => None,
        }
    }
}

/// How one clause's rows are found.
enum Lookup<'a> {
    /// None match.
    Nothing,
    /// These may match.
    Rows(Box<dyn Iterator<Item = Uuid> + 'a>),
    /// Any row may match.
    Scan,
}

impl Database {
    /// Creates the column indexes `cond` (on table `t`) can use, each from one scan of the
    /// table. Columns already indexed are left alone.
    pub fn ensure_row_index(&mut self, t: usize, cond: &MonitorCondition) {
        let Some(table) = self.tables.get(t) else {
            return;
        };
        for c in cond.clauses.iter().filter_map(RowIndex::wanted) {
            if self.row_index.column(t, c).is_some() {
                continue;
            }
            let mut ix = ColumnIndex::default();
            for r in table.rows.values() {
                ix.link(c, r);
            }
            self.row_index.tables[t].push((c, ix));
        }
    }

    /// Lookups against scans so far ([`Database::monitored_rows`]).
    pub fn row_index_stats(&self) -> (u64, u64, u64) {
        self.row_index.stats.get()
    }

    fn lookup<'a>(&'a self, t: usize, c: &'a Clause) -> Lookup<'a> {
        match c {
            Clause::Const(false) => Lookup::Nothing,
            Clause::Const(true) => Lookup::Scan,
            Clause::Compare {
                column: ColumnRef::Uuid,
                function: Function::Eq,
                arg,
            } => match arg.keys.first().and_then(Atom::as_uuid) {
                Some(u) if self.tables[t].rows.contains_key(&u) => {
                    Lookup::Rows(Box::new(std::iter::once(u)))
                }
                _ => Lookup::Nothing,
            },
            Clause::Compare {
                column: ColumnRef::User(i),
                function: f @ (Function::Eq | Function::Includes),
                arg,
            } => {
                let Some(ix) = self.row_index.column(t, *i) else {
                    return Lookup::Scan;
                };
                match (arg.keys.first(), f) {
                    (None, Function::Eq) => Lookup::Rows(Box::new(ix.empty.iter().copied())),
                    (None, _) => Lookup::Scan,
                    (Some(a), _) => match ix.by_atom.get(a) {
                        Some(rows) => Lookup::Rows(Box::new(rows.iter().copied())),
                        None => Lookup::Nothing,
                    },
                }
            }
            Clause::Compare { .. } => Lookup::Scan,
        }
    }

    /// The rows of table `t` that may match any of `conds` (each a disjunction; an empty
    /// condition matches every row): through the row index when every clause can use it,
    /// else every row. Each row at most once, in no particular order; the caller evaluates
    /// the conditions on them.
    pub fn monitored_rows<'a>(
        &'a self,
        t: usize,
        conds: &[&'a MonitorCondition],
    ) -> Box<dyn Iterator<Item = &'a Arc<Row>> + 'a> {
        let all = || -> Box<dyn Iterator<Item = &'a Arc<Row>> + 'a> {
            self.row_index.stats.scans.fetch_add(1, Ordering::Relaxed);
            Box::new(self.tables[t].rows.values())
        };
        if t >= self.tables.len() {
            return Box::new(std::iter::empty());
        }
        let mut found: Vec<Box<dyn Iterator<Item = Uuid> + 'a>> = Vec::new();
        for cond in conds {
            if cond.clauses.is_empty() {
                return all();
            }
            for c in &cond.clauses {
                match self.lookup(t, c) {
                    Lookup::Nothing => {}
                    Lookup::Rows(r) => found.push(r),
                    Lookup::Scan => return all(),
                }
            }
        }
        self.row_index.stats.lookups.fetch_add(1, Ordering::Relaxed);
        let rows = &self.tables[t].rows;
        let out: Box<dyn Iterator<Item = &'a Arc<Row>> + 'a> = if found.len() == 1 {
            let one = found.pop().into_iter().flatten();
            Box::new(one.filter_map(move |u| rows.get(&u)))
        } else {
            let mut seen: HashSet<Uuid> = HashSet::new();
            for r in found {
                seen.extend(r);
            }
            Box::new(seen.into_iter().filter_map(move |u| rows.get(&u)))
        };
        let stats = &self.row_index.stats;
        Box::new(out.inspect(move |_| {
            stats.candidates.fetch_add(1, Ordering::Relaxed);
        }))
    }
}
