//! Operator-facing queries and actions on the server core, as ovsdb-server's unixctl commands
//! need them: compacting one database on request, memory figures in `memory/show`'s terms, a
//! per-session inactivity probe (a remote's `inactivity_probe`), and a change counter the shell
//! uses to notice that a database changed (to follow `db:` remotes).
//!
//! What it does not do: any I/O or argument parsing; the unixctl protocol lives in the binary.

use hf_ovsdb::Uuid;

use super::{Core, Now, SessionId};

/// Why a database could not be compacted on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactError {
    /// No served database has that name (ovsdb-server: "no database by that name").
    NoSuchDatabase(String),
    /// Writing the compacted file failed.
    Io(String, String),
}

impl std::fmt::Display for CompactError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompactError::NoSuchDatabase(_) => f.write_str("no database by that name"),
            CompactError::Io(db, e) => write!(f, "{db}: compaction failed: {e}"),
        }
    }
}

impl Core {
    /// Compact one database (or every database with a file when `name` is None) now, as
    /// `ovsdb-server/compact [DB]` does. Returns the names compacted.
    pub fn compact_database(
        &mut self,
        name: Option<&str>,
        now: Now,
    ) -> Result<Vec<String>, CompactError> {
        let targets: Vec<usize> = match name {
            Some(n) => match self.db_index(n) {
                Some(i) => vec![i],
                None => return Err(CompactError::NoSuchDatabase(n.to_string())),
            },
            None => (1..self.dbs.len()).collect(),
        };
        let mut done = Vec::new();
        for dbi in targets {
            let in_flight = self.writes_in_flight(dbi);
            let e = &mut self.dbs[dbi];
            let db_name = e.db.schema.name.clone();
            if in_flight {
                return Err(CompactError::Io(
                    db_name,
                    "records of it are being written; ask again in a moment".into(),
                ));
            }
            if e.compacting.is_some() {
                // Its new file is being written; replacing the file now would race with it.
                return Err(CompactError::Io(
                    db_name,
                    "a background compaction of it is running; ask again when it has finished (see the log)".into(),
                ));
            }
            let Some(file) = &e.storage else {
                // `_Server` (and in-memory databases) have no file: nothing to compact.
                continue;
            };
            let snap = hf_ovsdb::file::snapshot_file(&e.db, now.wall_ms);
            file.lock()
                .storage
                .replace(&snap)
                .map_err(|err| CompactError::Io(db_name.clone(), err.to_string()))?;
            e.snapshot_size = snap.len() as u64;
            done.push(db_name);
        }
        Ok(done)
    }

    /// `memory/show` figures, sorted by name as ovsdb-server prints them: `atoms`, `cells`
    /// (of every served database, `_Server` included), `monitors`, `n-weak-refs`, and when
    /// nonzero `sessions` and `txn-history`.
    pub fn memory_report(&self) -> Vec<(&'static str, u64)> {
        let (mut atoms, mut cells, mut weak) = (0u64, 0u64, 0u64);
        for e in &self.dbs {
            for (ti, t) in e.db.tables.iter().enumerate() {
                let cols = &e.db.schema.tables[ti].columns;
                for row in t.rows.values() {
                    // As ovsdb-server counts: `_uuid` and `_version` are a cell and an atom each.
                    cells += row.cols.len() as u64 + 2;
                    atoms += 2;
                    for (ci, d) in row.cols.iter().enumerate() {
                        atoms += (d.keys.len() + d.values.len()) as u64;
                        let Some(c) = cols.get(ci) else { continue };
                        d.for_each_ref(&c.ty, |_, _, strong| weak += u64::from(!strong));
                    }
                }
            }
        }
        let monitors: usize = self.sessions.values().map(|s| s.monitors.len()).sum();
        let history: usize = self.dbs.iter().map(|e| e.history.len()).sum();
        let mut out = vec![
            ("atoms", atoms),
            ("cells", cells),
            ("monitors", monitors as u64),
            ("n-weak-refs", weak),
        ];
        if !self.sessions.is_empty() {
            out.push(("sessions", self.sessions.len() as u64));
        }
        if history > 0 {
            out.push(("txn-history", history as u64));
        }
        out
    }

    /// Give session `sid` its own inactivity probe interval (None: never probe), overriding
    /// the configured default, as a `Connection` row's `inactivity_probe` does for the
    /// sessions of its remote.
    pub fn set_session_probe(&mut self, sid: SessionId, probe_ms: Option<u64>) {
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.probe_ms = Some(probe_ms);
        }
    }

    /// The id of the last transaction committed to database `name` (nil before the first),
    /// so a shell can tell cheaply whether the database changed since it last looked.
    pub fn last_txn_id(&self, name: &str) -> Option<Uuid> {
        self.db_index(name).map(|i| self.dbs[i].last_txn)
    }
}
