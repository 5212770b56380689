//! An index over many monitors' conditions, so that a committed row change is matched only
//! against the monitors that may care about it, not against every clause of every monitor.
//!
//! What it does: for each table, clauses of the form `column == value` are indexed by the whole
//! value, and `column includes {a, ...}` by its first element (or map key); a row change looks
//! up its old and new row's values and yields the monitors that may report it. Monitors whose
//! condition on the table could match a row not found through the index (no condition, a
//! `true` clause, `!=`, `excludes`, `<`, an empty `includes`, ...) are candidates for every
//! change. Clauses `false` never match and are left out.
//!
//! What it does not do: decide. A candidate is only a monitor that *may* report the change; the
//! exact answer is still [`crate::monitor::Monitor`]'s own evaluation of its condition on the
//! old and the new row (ovsdb-server's semantics). The index only guarantees that no monitor
//! that would report a change is left out: both the old and the new row are looked up, so a
//! row that moves from one datapath to another reaches the monitors of both.
//!
//! Monitors are numbered by the caller (`u32`, e.g. one per distinct monitor spec); the index is
//! rebuilt when monitors or their conditions change.

use hashbrown::HashMap;

use crate::atom::Atom;
use crate::condition::{Clause, Function};
use crate::datum::Datum;
use crate::db::{Row, RowChange};
use crate::monitor::Monitor;
use crate::schema::ColumnRef;

/// One table's index.
#[derive(Debug, Default, Clone)]
struct TableIndex {
    /// Monitors that may report any row change of this table.
    always: Vec<u32>,
    /// `column == value` → monitors.
    eq: HashMap<(ColumnRef, Datum), Vec<u32>>,
    /// `column includes {atom, ...}` → monitors (by the first atom, or map key).
    has: HashMap<(ColumnRef, Atom), Vec<u32>>,
    /// Columns that appear in `eq` (to look up a row's values).
    eq_cols: Vec<ColumnRef>,
    /// Columns that appear in `has`.
    has_cols: Vec<ColumnRef>,
}

/// The index over a set of monitors of one database.
#[derive(Debug, Default, Clone)]
pub struct CondIndex {
    tables: Vec<TableIndex>,
}

fn column_value(row: &Row, c: ColumnRef) -> std::borrow::Cow<'_, Datum> {
    match c {
        ColumnRef::User(i) => std::borrow::Cow::Borrowed(&row.cols[i]),
        ColumnRef::Uuid => std::borrow::Cow::Owned(Datum::scalar(Atom::Uuid(row.uuid))),
        ColumnRef::Version => std::borrow::Cow::Owned(Datum::scalar(Atom::Uuid(row.version))),
    }
}

impl CondIndex {
    /// Index `monitors` (each with the caller's number) of a database with `n_tables` tables.
    pub fn build<'a>(
        n_tables: usize,
        monitors: impl IntoIterator<Item = (u32, &'a Monitor)>,
    ) -> Self {
        let mut tables = vec![TableIndex::default(); n_tables];
        for (id, m) in monitors {
            for tm in &m.tables {
                let Some(ti) = tables.get_mut(tm.table) else {
                    continue;
                };
                let clauses = &tm.condition.clauses;
                let indexable = !clauses.is_empty() && clauses.iter().all(|c| key_of(c).is_some());
                if !indexable {
                    ti.always.push(id);
                    continue;
                }
                for c in clauses {
                    match key_of(c) {
                        Some(Key::Never) | None => {}
                        Some(Key::Eq(col, d)) => {
                            if !ti.eq_cols.contains(&col) {
                                ti.eq_cols.push(col);
                            }
                            push_unique(ti.eq.entry((col, d.clone())).or_default(), id);
                        }
                        Some(Key::Has(col, a)) => {
                            if !ti.has_cols.contains(&col) {
                                ti.has_cols.push(col);
                            }
                            push_unique(ti.has.entry((col, a.clone())).or_default(), id);
                        }
                    }
                }
            }
        }
        CondIndex { tables }
    }

    /// Whether any monitor watches table `t` at all.
    pub fn watches(&self, t: usize) -> bool {
        self.tables
            .get(t)
            .is_some_and(|ti| !ti.always.is_empty() || !ti.eq.is_empty() || !ti.has.is_empty())
    }

    /// The monitors that may report `ch` (a change to a row of table `t`), appended to `out`
    /// (sorted, without duplicates, when `out` starts empty).
    pub fn candidates(&self, t: usize, ch: &RowChange, out: &mut Vec<u32>) {
        let Some(ti) = self.tables.get(t) else { return };
        out.extend_from_slice(&ti.always);
        for row in [ch.old.as_deref(), ch.new.as_deref()].into_iter().flatten() {
            for &c in &ti.eq_cols {
                let v = column_value(row, c);
                if let Some(ids) = ti.eq.get(&KeyRef(c, &*v)) {
                    out.extend_from_slice(ids);
                }
            }
            for &c in &ti.has_cols {
                let v = column_value(row, c);
                for a in &v.keys {
                    if let Some(ids) = ti.has.get(&KeyRef(c, a)) {
                        out.extend_from_slice(ids);
                    }
                }
            }
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// A borrowed `(column, value)` key: hashes as the owned tuple does, so lookups copy nothing.
#[derive(Hash)]
struct KeyRef<'a, T>(ColumnRef, &'a T);

impl<T: PartialEq> hashbrown::Equivalent<(ColumnRef, T)> for KeyRef<'_, T> {
    fn equivalent(&self, key: &(ColumnRef, T)) -> bool {
        self.0 == key.0 && *self.1 == key.1
    }
}

fn push_unique(v: &mut Vec<u32>, id: u32) {
    if v.last() != Some(&id) {
        v.push(id);
    }
}

/// How a clause is found through the index.
enum Key<'c> {
    /// It never holds.
    Never,
    /// It holds only for rows whose column equals this value.
    Eq(ColumnRef, &'c Datum),
    /// It holds only for rows whose column contains this atom (set element or map key).
    Has(ColumnRef, &'c Atom),
}

/// None: the clause may hold for rows the index cannot find.
fn key_of(c: &Clause) -> Option<Key<'_>> {
    match c {
        Clause::Const(false) => Some(Key::Never),
        Clause::Const(true) => None,
        Clause::Compare {
            column,
            function: Function::Eq,
            arg,
        } => Some(Key::Eq(*column, arg)),
        Clause::Compare {
            column,
            function: Function::Includes,
            arg,
        } => arg.keys.first().map(|a| Key::Has(*column, a)),
        Clause::Compare { .. } => None,
    }
}
