//! Table-generic parts of snapshots and deltas: `<table-updates2>` rows, transaction deltas and
//! database tables to typed row changes. The generated `Snapshot`/`Delta` types dispatch on the
//! table name and call these.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

use hf_ovsdb::{RowChange, TableSchema};
use serde_json::Value;
use uuid::Uuid;

use crate::error::ModelError;
use crate::table::{RowDelta, Table, parse_datum};

/// The typed changes one table's part of a `<table-updates2>` makes to `rows` (ovsdb-server(7),
/// "update2 notification": `initial`, `insert`, `modify` with column diffs, `delete`).
/// A `modify` that changes no column holdfast models yields nothing.
pub(crate) fn table_updates2<T: Table>(
    rows: &BTreeMap<Uuid, T>,
    updates: &Value,
) -> Result<Vec<RowDelta<T>>, ModelError> {
    let obj = updates
        .as_object()
        .ok_or_else(|| ModelError::update(T::NAME, "expected an object of row updates"))?;
    let mut out = Vec::with_capacity(obj.len());
    for (uuid_text, update) in obj {
        if let Some(d) = row_update2(rows, uuid_text, update)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// [`table_updates2`] consuming the JSON: each row's JSON is freed as soon as it is typed, so
/// that a large reply is never held twice (as JSON and as typed rows) in full.
pub(crate) fn table_updates2_owned<T: Table>(
    rows: &BTreeMap<Uuid, T>,
    updates: Value,
) -> Result<Vec<RowDelta<T>>, ModelError> {
    let Value::Object(obj) = updates else {
        return Err(ModelError::update(
            T::NAME,
            "expected an object of row updates",
        ));
    };
    let mut out = Vec::with_capacity(obj.len());
    for (uuid_text, update) in obj {
        if let Some(d) = row_update2(rows, &uuid_text, &update)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// The typed change one row update of a `<table-updates2>` makes to `rows`.
fn row_update2<T: Table>(
    rows: &BTreeMap<Uuid, T>,
    uuid_text: &str,
    update: &Value,
) -> Result<Option<RowDelta<T>>, ModelError> {
    let at = || format!("{} row {uuid_text}", T::NAME);
    let uuid = hf_ovsdb::atom::parse_uuid(uuid_text)
        .map_err(|_| ModelError::update(T::NAME, format!("{uuid_text:?} is not a UUID")))?;
    let mut members = update.as_object().into_iter().flatten();
    let (kind, body) = match (members.next(), members.next()) {
        (Some(member), None) => member,
        _ => {
            return Err(ModelError::update(
                at(),
                "a row update must be an object with exactly one of \
                 initial, insert, modify, delete",
            ));
        }
    };
    let existing = rows.get(&uuid);
    let row_err = |detail: &str| ModelError::Row {
        table: T::NAME.to_string(),
        uuid,
        detail: detail.to_string(),
    };
    match kind.as_str() {
        "initial" | "insert" => {
            let m = body
                .as_object()
                .ok_or_else(|| ModelError::update(at(), format!("{kind} must be a row")))?;
            if existing.is_some() {
                return Err(row_err(&format!(
                    "{kind} of a row the snapshot already holds"
                )));
            }
            return Ok(Some(RowDelta::Insert(T::from_json_row(uuid, m)?)));
        }
        "modify" => {
            let m = body
                .as_object()
                .ok_or_else(|| ModelError::update(at(), "modify must be a row diff"))?;
            let old = existing.ok_or_else(|| row_err("modify of a row the snapshot lacks"))?;
            let ts = T::schema();
            let mut row = old.to_row(Uuid::nil());
            for (name, v) in m {
                let Some(i) = ts.column_index(name) else {
                    continue;
                };
                let diff = parse_datum(T::NAME, uuid, &ts.columns[i], v)?;
                row.cols[i] = row.cols[i].apply_diff(&diff, &ts.columns[i].ty);
            }
            let new = T::from_row(ts, &row)?;
            if &new != old {
                return Ok(Some(RowDelta::Update {
                    old: old.clone(),
                    new,
                }));
            }
        }
        "delete" => {
            let old = existing.ok_or_else(|| row_err("delete of a row the snapshot lacks"))?;
            return Ok(Some(RowDelta::Delete(old.clone())));
        }
        other => {
            return Err(ModelError::update(
                at(),
                format!("unknown row update kind {other:?}"),
            ));
        }
    }
    Ok(None)
}

/// The typed changes of one table's part of an [`hf_ovsdb::TxnDelta`] (table `ts` of the
/// database's schema). A change to columns holdfast does not model yields nothing.
pub(crate) fn table_changes<T: Table>(
    ts: &TableSchema,
    changes: &[RowChange],
) -> Result<Vec<RowDelta<T>>, ModelError> {
    let mut out = Vec::with_capacity(changes.len());
    for ch in changes {
        let old = ch.old.as_deref().map(|r| T::from_row(ts, r)).transpose()?;
        let new = ch.new.as_deref().map(|r| T::from_row(ts, r)).transpose()?;
        match (old, new) {
            (None, Some(new)) => out.push(RowDelta::Insert(new)),
            (Some(old), Some(new)) if old != new => out.push(RowDelta::Update { old, new }),
            (Some(old), None) => out.push(RowDelta::Delete(old)),
            _ => {}
        }
    }
    Ok(out)
}

/// Apply one table's row changes to `rows`; `reindex(row, false)` is called for each row
/// removed or replaced and `reindex(row, true)` for each row added, so that the snapshot's
/// lookup indexes follow.
pub(crate) fn apply_rows<T: Table>(
    rows: &mut BTreeMap<Uuid, T>,
    deltas: &[RowDelta<T>],
    mut reindex: impl FnMut(&T, bool),
) {
    for d in deltas {
        if let Some(old) = rows.remove(&d.uuid()) {
            reindex(&old, false);
        }
        if let Some(new) = d.after() {
            reindex(new, true);
            rows.insert(new.uuid(), new.clone());
        }
    }
}

/// [`apply_rows`] moving the rows in instead of cloning them (the change set is consumed).
pub(crate) fn apply_rows_owned<T: Table>(
    rows: &mut BTreeMap<Uuid, T>,
    deltas: Vec<RowDelta<T>>,
    mut reindex: impl FnMut(&T, bool),
) {
    for d in deltas {
        if let Some(old) = rows.remove(&d.uuid()) {
            reindex(&old, false);
        }
        let new = match d {
            RowDelta::Insert(new) | RowDelta::Update { new, .. } => new,
            RowDelta::Delete(_) => continue,
        };
        reindex(&new, true);
        rows.insert(new.uuid(), new);
    }
}

/// A lookup index: key → UUIDs of the rows holding it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Index<K> {
    map: BTreeMap<K, BTreeSet<Uuid>>,
}

impl<K> Default for Index<K> {
    fn default() -> Self {
        Index {
            map: BTreeMap::new(),
        }
    }
}

impl<K: Ord> Index<K> {
    /// Record (`add`) or forget that row `uuid` holds `key`.
    pub(crate) fn set(&mut self, key: K, uuid: Uuid, add: bool) {
        if add {
            self.map.entry(key).or_default().insert(uuid);
        } else if let Some(set) = self.map.get_mut(&key) {
            set.remove(&uuid);
            if set.is_empty() {
                self.map.remove(&key);
            }
        }
    }

    /// The rows holding `key`, in UUID order.
    pub(crate) fn get<'a, Q>(&'a self, key: &Q) -> impl Iterator<Item = Uuid> + use<'a, K, Q>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key).into_iter().flatten().copied()
    }

    /// The only row holding `key`; `None` when no row or several rows hold it.
    pub(crate) fn unique<Q>(&self, key: &Q) -> Option<Uuid>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        match self.map.get(key) {
            Some(set) if set.len() == 1 => set.first().copied(),
            _ => None,
        }
    }
}
