//! The committed contents of one database: rows, unique indexes and the reference index.
//!
//! Rows are shared (`Arc<Row>`), so that transaction deltas, monitor history and snapshots can
//! hold old and new versions without copying them.

use std::sync::Arc;

use hashbrown::HashMap;
use uuid::Uuid;

use crate::datum::Datum;
use crate::schema::Schema;

/// One row version.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `_uuid`.
    pub uuid: Uuid,
    /// `_version`: changes with every modification.
    pub version: Uuid,
    /// User columns, in schema column order.
    pub cols: Vec<Datum>,
}

/// A change to one row: `old` is the committed version before, `new` after (None: absent).
#[derive(Debug, Clone)]
pub struct RowChange {
    /// The row's UUID.
    pub uuid: Uuid,
    /// Before.
    pub old: Option<Arc<Row>>,
    /// After.
    pub new: Option<Arc<Row>>,
}

/// The changes one transaction made, per table, ready to apply, log and publish.
#[derive(Debug, Clone, Default)]
pub struct TxnDelta {
    /// (table index, changes), in table order; only tables with changes.
    pub tables: Vec<(usize, Vec<RowChange>)>,
    /// Text of `comment` operations, joined with newlines.
    pub comment: Option<String>,
    /// A `commit` operation asked for durability (fsync before replying).
    pub durable: bool,
}

impl TxnDelta {
    /// No row changed.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|(_, c)| c.is_empty())
    }

    /// Total number of row changes.
    pub fn len(&self) -> usize {
        self.tables.iter().map(|(_, c)| c.len()).sum()
    }
}

/// Incoming references to one row.
#[derive(Debug, Default, Clone)]
pub(crate) struct Incoming {
    /// Count of strong references.
    pub strong: u32,
    /// Rows holding weak references: source UUID → (source table, count).
    pub weak: HashMap<Uuid, (usize, u32)>,
}

/// One table's rows and indexes.
#[derive(Debug, Default, Clone)]
pub struct Table {
    /// Rows by UUID.
    pub rows: HashMap<Uuid, Arc<Row>>,
    /// One map per schema index: the indexed columns' values → the row holding them.
    pub(crate) indexes: Vec<HashMap<Vec<Datum>, Uuid>>,
}

/// A deterministic UUID source (splitmix64), seeded by the caller: sans-I/O code may not read
/// the OS's randomness, and the simulator needs reproducible UUIDs.
#[derive(Debug, Clone)]
pub struct UuidGen {
    state: u64,
}

impl UuidGen {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        UuidGen { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A fresh version-4 UUID.
    pub fn next_uuid(&mut self) -> Uuid {
        let hi = self.next_u64();
        let lo = self.next_u64();
        uuid::Builder::from_random_bytes(((u128::from(hi) << 64) | u128::from(lo)).to_be_bytes())
            .into_uuid()
    }
}

/// A database: schema plus committed rows.
#[derive(Debug, Clone)]
pub struct Database {
    /// The schema.
    pub schema: Arc<Schema>,
    /// Tables, in schema order.
    pub tables: Vec<Table>,
    pub(crate) incoming: HashMap<Uuid, Incoming>,
    /// UUID source for new rows and versions.
    pub uuids: UuidGen,
    /// Rows by column value, for monitor conditions ([`crate::row_index`]).
    pub(crate) row_index: crate::row_index::RowIndex,
}

impl Database {
    /// An empty database of `schema`; `seed` seeds UUID generation.
    pub fn new(schema: Arc<Schema>, seed: u64) -> Self {
        let tables = schema
            .tables
            .iter()
            .map(|t| Table {
                rows: HashMap::new(),
                indexes: vec![HashMap::new(); t.indexes.len()],
            })
            .collect();
        Database {
            row_index: crate::row_index::RowIndex::new(schema.tables.len()),
            schema,
            tables,
            incoming: HashMap::new(),
            uuids: UuidGen::new(seed),
        }
    }

    /// The committed row `uuid` of table `t`.
    pub fn row(&self, t: usize, uuid: &Uuid) -> Option<&Arc<Row>> {
        self.tables.get(t)?.rows.get(uuid)
    }

    /// Total rows in all tables.
    pub fn row_count(&self) -> usize {
        self.tables.iter().map(|t| t.rows.len()).sum()
    }

    pub(crate) fn strong_refs_to(&self, u: &Uuid) -> u32 {
        self.incoming.get(u).map_or(0, |i| i.strong)
    }

    pub(crate) fn index_key(&self, t: usize, ix: usize, row: &Row) -> Vec<Datum> {
        self.schema.tables[t].indexes[ix]
            .iter()
            .map(|c| row.cols[*c].clone())
            .collect()
    }

    /// Install a delta that has already been validated (by a transaction's commit, or because it
    /// was read back from this database's own file).
    pub fn apply(&mut self, delta: &TxnDelta) {
        for (t, changes) in &delta.tables {
            let t = *t;
            for ch in changes {
                self.row_index
                    .update(t, ch.old.as_deref(), ch.new.as_deref());
                if let Some(old) = &ch.old {
                    self.unlink(t, old);
                }
                match &ch.new {
                    Some(new) => {
                        self.link(t, new);
                        self.tables[t].rows.insert(ch.uuid, new.clone());
                    }
                    None => {
                        self.tables[t].rows.remove(&ch.uuid);
                    }
                }
            }
        }
    }

    fn unlink(&mut self, t: usize, row: &Row) {
        let ts = &self.schema.tables[t];
        for ix in 0..ts.indexes.len() {
            let key = self.index_key(t, ix, row);
            if self.tables[t].indexes[ix].get(&key) == Some(&row.uuid) {
                self.tables[t].indexes[ix].remove(&key);
            }
        }
        let schema = self.schema.clone();
        for (c, col) in schema.tables[t].columns.iter().enumerate() {
            if !col.ty.has_refs() {
                continue;
            }
            row.cols[c].for_each_ref(&col.ty, |target, _, strong| {
                if let hashbrown::hash_map::Entry::Occupied(mut e) = self.incoming.entry(target) {
                    let inc = e.get_mut();
                    if strong {
                        inc.strong = inc.strong.saturating_sub(1);
                    } else if let hashbrown::hash_map::Entry::Occupied(mut w) =
                        inc.weak.entry(row.uuid)
                    {
                        w.get_mut().1 -= 1;
                        if w.get().1 == 0 {
                            w.remove();
                        }
                    }
                    if inc.strong == 0 && inc.weak.is_empty() {
                        e.remove();
                    }
                }
            });
        }
    }

    fn link(&mut self, t: usize, row: &Row) {
        let ts = &self.schema.tables[t];
        for ix in 0..ts.indexes.len() {
            let key = self.index_key(t, ix, row);
            self.tables[t].indexes[ix].insert(key, row.uuid);
        }
        let schema = self.schema.clone();
        for (c, col) in schema.tables[t].columns.iter().enumerate() {
            if !col.ty.has_refs() {
                continue;
            }
            row.cols[c].for_each_ref(&col.ty, |target, _, strong| {
                let inc = self.incoming.entry(target).or_default();
                if strong {
                    inc.strong += 1;
                } else {
                    inc.weak.entry(row.uuid).or_insert((t, 0)).1 += 1;
                }
            });
        }
    }

    /// A delta that inserts every row of this database (a snapshot, for compaction and for
    /// initial monitor contents).
    pub fn snapshot_delta(&self) -> TxnDelta {
        let mut d = self.snapshot_rows();
        for (_, rows) in &mut d.tables {
            rows.sort_by_key(|c| c.uuid);
        }
        d
    }

    /// [`Database::snapshot_delta`] without the sorting: the cheap part (one pointer copy per
    /// row) to do while the database cannot change; [`crate::file::snapshot_file_from`] sorts.
    pub fn snapshot_rows(&self) -> TxnDelta {
        let mut tables = Vec::new();
        for (t, table) in self.tables.iter().enumerate() {
            if table.rows.is_empty() {
                continue;
            }
            let rows: Vec<RowChange> = table
                .rows
                .values()
                .map(|r| RowChange {
                    uuid: r.uuid,
                    old: None,
                    new: Some(r.clone()),
                })
                .collect();
            tables.push((t, rows));
        }
        TxnDelta {
            tables,
            comment: None,
            durable: false,
        }
    }
}
