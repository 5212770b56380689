//! What the replica needs from the typed side: [`Model`], implemented for `hf-model`'s
//! [`NbSnapshot`] and [`SbSnapshot`].
//!
//! A model applies `<table-updates2>` (incremental updates, `monitor_cond_since` catch-ups) and
//! turns complete row sets (the reply to `monitor`/`monitor_cond`, or `monitor_cond_since` with
//! `found: false`, and `update` notifications of the oldest protocol) into the
//! `<table-updates2>` that makes the replica equal to them, so that a full resync after a
//! reconnect reports only what really changed instead of "everything deleted, everything
//! inserted".

use std::collections::BTreeMap;

use hf_model::{ModelError, NbSnapshot, SbSnapshot, Table, VswitchSnapshot};
use hf_ovsdb::Datum;
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// How many rows [`Model::load_rows`] gets at most at once while a reply streams in.
pub const LOAD_BATCH: usize = 256;

/// Where [`Feed`] puts each batch of one table's row updates (`{uuid: update}`).
pub type RowSink<'a> = dyn FnMut(&str, Map<String, Value>) -> Result<(), ModelError> + 'a;

/// A `<table-updates2>` read piecemeal: calls the sink with every batch, returns the number of
/// row updates (see [`Model::apply_updates2_batches`]).
pub type Feed<'a> = dyn FnMut(&mut RowSink<'_>) -> Result<usize, FeedError> + 'a;

/// What [`Model::stage_updates2_batches`] did with a batched `<table-updates2>`.
#[derive(Debug)]
pub enum Staged<D> {
    /// Applied: the change set of what changed.
    Applied(D),
    /// Typed and checked, not applied: [`Model::apply_staged`] applies it.
    Pending(D),
}

/// Why a piecemeal `<table-updates2>` could not be applied.
#[derive(Debug)]
pub enum FeedError {
    /// The input is not a `<table-updates2>` (not an object of objects, or bad JSON).
    Json(String),
    /// The model refused a row.
    Model(ModelError),
}

/// A typed replica of one database, as the session core keeps it.
pub trait Model: Default + std::fmt::Debug + Send + 'static {
    /// The change set type (`hf_model::NbDelta`, ...).
    type Delta: std::fmt::Debug + Clone + Default + Send + 'static;
    /// The database name on the wire (`OVN_Northbound`).
    const DATABASE: &'static str;

    /// Apply a `<table-updates2>`; all or nothing.
    fn apply_updates2(&mut self, updates: &Value) -> Result<Self::Delta, ModelError>;

    /// Apply a `<table-updates2>` keeping no change set, consuming the JSON (freed row by row
    /// as it is typed); for loading a large reply into a replica nobody watches the changes
    /// of. Returns the number of row changes. All or nothing, like
    /// [`Model::apply_updates2`].
    fn load_updates2(&mut self, updates: Value) -> Result<usize, ModelError> {
        self.apply_updates2(&updates).map(|d| Self::delta_len(&d))
    }

    /// Load a batch of `<row-update2>`s of `table` (`{uuid: update}`: `initial` or `insert`
    /// rows, as a first sync's reply carries them), keeping no change set, as
    /// [`Model::load_updates2`] of `{table: rows}` does. The session streams a large monitor
    /// reply into an empty replica with it, a few hundred rows at a time
    /// ([`LOAD_BATCH`]), so that the reply never exists as one JSON tree; on error it discards
    /// the replica. Override it when a model can load rows more directly.
    fn load_rows(&mut self, table: &str, rows: Map<String, Value>) -> Result<(), ModelError> {
        let mut one = Map::with_capacity(1);
        one.insert(table.to_string(), Value::Object(rows));
        self.load_updates2(Value::Object(one)).map(|_| ())
    }

    /// [`Model::apply_updates2`] of a `<table-updates2>` that arrives in batches: `feed` calls
    /// its sink with each batch of one table's row updates (`{uuid: update}`) and returns the
    /// number of row updates, or why the input is malformed. All or nothing. The default collects
    /// the batches into one tree and applies it; it is what [`Model::stage_updates2_batches`]
    /// does for a model that does not stage (northd's `SbView` overrides it). The session's
    /// typed snapshots stage instead, so that a large update never exists as one JSON tree.
    fn apply_updates2_batches(&mut self, feed: &mut Feed<'_>) -> Result<Self::Delta, FeedError> {
        let mut tree = Map::new();
        feed(&mut |table, rows| {
            // Only objects are inserted, so the entry is always one.
            if let Value::Object(m) = tree
                .entry(table.to_string())
                .or_insert_with(|| Value::Object(Map::new()))
            {
                m.extend(rows);
            }
            Ok(())
        })?;
        self.apply_updates2(&Value::Object(tree))
            .map_err(FeedError::Model)
    }

    /// [`Model::apply_updates2_batches`] in two steps, so that the caller can free the input
    /// between them: the batches typed into a change set ([`Staged::Pending`]), which
    /// [`Model::apply_staged`] then applies (nothing may change the model in between). The
    /// session frees a large update's bytes (57.8 MB for most of SB at 500 switches) before
    /// the apply copies its rows into the snapshot, so the two do not add up at the peak. The
    /// default applies at once ([`Staged::Applied`]).
    fn stage_updates2_batches(
        &mut self,
        feed: &mut Feed<'_>,
    ) -> Result<Staged<Self::Delta>, FeedError> {
        self.apply_updates2_batches(feed).map(Staged::Applied)
    }

    /// Applies a change set that [`Model::stage_updates2_batches`] left
    /// [`Staged::Pending`]. Only a model that stages needs it; the default refuses, as nothing
    /// is pending for a model that does not.
    fn apply_staged(&mut self, _delta: &Self::Delta) -> Result<(), ModelError> {
        Err(ModelError::Update {
            at: None,
            detail: "nothing is staged: this model applies batched updates at once".into(),
        })
    }

    /// Number of row changes in a delta.
    fn delta_len(delta: &Self::Delta) -> usize;

    /// Number of rows held.
    fn row_count(&self) -> usize;

    /// The `<table-updates2>` that turns this replica into `rows` (`{table: {uuid: row or
    /// null}}`, `null` meaning deleted). For the tables named in `complete`, rows the replica
    /// holds that `rows` lacks are deleted too. Rows equal to the replica's yield nothing.
    fn updates_to(
        &self,
        rows: &Map<String, Value>,
        complete: &[String],
    ) -> Result<Value, ModelError>;

    /// The names of every table of the model, in schema order.
    fn table_names() -> Vec<&'static str>;
}

/// One table's part of [`Model::updates_to`].
fn table_updates_to<T: Table>(
    old: &BTreeMap<Uuid, T>,
    rows: Option<&Value>,
    complete: bool,
) -> Result<Option<Value>, ModelError> {
    let empty = Map::new();
    let given = match rows {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ModelError::Update {
                at: Some(T::NAME.to_string()),
                detail: "expected an object of rows".into(),
            });
        }
    };
    let mut out = Map::new();
    let mut seen = Vec::with_capacity(given.len());
    for (uuid_text, row) in given {
        let uuid = hf_ovsdb::atom::parse_uuid(uuid_text).map_err(|_| ModelError::Update {
            at: Some(T::NAME.to_string()),
            detail: format!("{uuid_text:?} is not a UUID"),
        })?;
        seen.push(uuid);
        match row {
            Value::Null => {
                if old.contains_key(&uuid) {
                    out.insert(uuid_text.clone(), json!({"delete": null}));
                }
            }
            Value::Object(m) => {
                let new = T::from_json_row(uuid, m)?;
                match old.get(&uuid) {
                    None => {
                        out.insert(uuid_text.clone(), json!({"insert": m}));
                    }
                    Some(o) if *o != new => {
                        let ts = T::schema();
                        let (a, b) = (o.to_datums(), new.to_datums());
                        let mut diff = Map::new();
                        for (i, c) in ts.columns.iter().enumerate() {
                            if a[i] != b[i] {
                                let d = Datum::diff(&a[i], &b[i], &c.ty);
                                diff.insert(c.name.clone(), d.to_json(&c.ty));
                            }
                        }
                        out.insert(uuid_text.clone(), json!({ "modify": diff }));
                    }
                    Some(_) => {}
                }
            }
            _ => {
                return Err(ModelError::Update {
                    at: Some(format!("{} row {uuid_text}", T::NAME)),
                    detail: "a row must be an object or null".into(),
                });
            }
        }
    }
    if complete {
        seen.sort_unstable();
        for uuid in old.keys() {
            if seen.binary_search(uuid).is_err() {
                out.insert(uuid.to_string(), json!({"delete": null}));
            }
        }
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

macro_rules! impl_model {
    ($module:ident, $snap:ty, $db:expr) => {
        impl Model for $snap {
            type Delta = hf_model::$module::Delta;
            const DATABASE: &'static str = $db;

            fn apply_updates2(&mut self, updates: &Value) -> Result<Self::Delta, ModelError> {
                <$snap>::apply_updates2(self, updates)
            }

            fn load_updates2(&mut self, updates: Value) -> Result<usize, ModelError> {
                <$snap>::load_updates2(self, updates)
            }

            fn stage_updates2_batches(
                &mut self,
                feed: &mut Feed<'_>,
            ) -> Result<Staged<Self::Delta>, FeedError> {
                // Typed batch by batch, applied once whole (`apply_staged`): a large update (a
                // condition change that brings most of SB) never exists as one JSON tree.
                // (The reader refuses a row named twice: `stream::for_each_batch`.)
                let mut delta = Self::Delta::default();
                let snap = &*self;
                feed(&mut |table, rows| {
                    snap.stage_updates2(&mut delta, table, Value::Object(rows))
                })?;
                Ok(Staged::Pending(delta))
            }

            fn apply_staged(&mut self, delta: &Self::Delta) -> Result<(), ModelError> {
                self.apply(delta);
                Ok(())
            }

            fn delta_len(delta: &Self::Delta) -> usize {
                delta.len()
            }

            fn row_count(&self) -> usize {
                self.len()
            }

            fn updates_to(
                &self,
                rows: &Map<String, Value>,
                complete: &[String],
            ) -> Result<Value, ModelError> {
                struct V<'a> {
                    snap: &'a $snap,
                    rows: &'a Map<String, Value>,
                    complete: &'a [String],
                    out: Map<String, Value>,
                    err: Option<ModelError>,
                }
                impl hf_model::$module::TableVisitor for V<'_> {
                    fn visit<T: hf_model::$module::SnapshotTable>(&mut self) {
                        if self.err.is_some() {
                            return;
                        }
                        let complete = self.complete.iter().any(|t| t == T::NAME);
                        match table_updates_to::<T>(
                            T::rows(self.snap),
                            self.rows.get(T::NAME),
                            complete,
                        ) {
                            Ok(Some(v)) => {
                                self.out.insert(T::NAME.to_string(), v);
                            }
                            Ok(None) => {}
                            Err(e) => self.err = Some(e),
                        }
                    }
                }
                let mut v = V {
                    snap: self,
                    rows,
                    complete,
                    out: Map::new(),
                    err: None,
                };
                hf_model::$module::for_each_table(&mut v);
                match v.err {
                    Some(e) => Err(e),
                    None => Ok(Value::Object(v.out)),
                }
            }

            fn table_names() -> Vec<&'static str> {
                struct N(Vec<&'static str>);
                impl hf_model::$module::TableVisitor for N {
                    fn visit<T: hf_model::$module::SnapshotTable>(&mut self) {
                        self.0.push(T::NAME);
                    }
                }
                let mut n = N(Vec::new());
                hf_model::$module::for_each_table(&mut n);
                n.0
            }
        }
    };
}

impl_model!(nb, NbSnapshot, "OVN_Northbound");
impl_model!(sb, SbSnapshot, "OVN_Southbound");
impl_model!(vswitch, VswitchSnapshot, "Open_vSwitch");
