//! Compaction with the file written outside the core.
//!
//! What it does: when a database file has grown enough, the core takes a snapshot of the rows
//! (one `Arc` copy per row: cheap, and the only part done while the database cannot change)
//! and hands out a [`CompactionTask`]. Whoever runs the task (a blocking thread in
//! [`crate::serve`]) sorts and encodes the snapshot and writes it, made durable, through the
//! storage's [`super::ReplaceJob`] to a new file that is not yet in use. Meanwhile commits go on
//! being appended to the old file, and a copy of those records is kept with the file (the tail). At
//! [`super::Core::finish_compaction`] the storage appends the tail to the new file, makes it
//! durable and swaps it in atomically (a rename), so a crash at any point leaves either the old
//! file with every committed transaction or the new one with every committed transaction. The
//! tail can be large (a cold SB's 100k-row transaction committed meanwhile): the runner first
//! takes it out of the core ([`super::Core::take_compaction_tail`]) and appends it, synced,
//! without the core ([`CompactionDone::catch_up`]), so that under the core only what committed
//! during the catch-up is written and synced, with the rename.
//!
//! What it does not do: compact storages that cannot write in the background (their
//! [`super::Storage::begin_replace`] answers None); those are compacted under the core as
//! before. Nor does it run two compactions of one database at once.

use std::sync::Arc;

use hf_ovsdb::file::snapshot_file_from;
use hf_ovsdb::{Schema, TxnDelta};

use super::ReplaceJob;

/// A compaction in progress, as the core tracks it.
pub(super) struct Running {
    pub id: u64,
}

/// The part of a compaction that runs outside the core: encode and write the snapshot.
pub struct CompactionTask {
    pub(super) db: usize,
    pub(super) name: String,
    pub(super) id: u64,
    pub(super) schema: Arc<Schema>,
    pub(super) snapshot: TxnDelta,
    pub(super) wall_ms: u64,
    pub(super) job: Box<dyn ReplaceJob>,
}

impl std::fmt::Debug for CompactionTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionTask")
            .field("database", &self.name)
            .field("rows", &self.snapshot.len())
            .finish()
    }
}

impl CompactionTask {
    /// The database being compacted.
    pub fn database(&self) -> &str {
        &self.name
    }

    /// Encode the snapshot and write it, durably, to the new file. Needs nothing of the core;
    /// give the result to [`super::Core::finish_compaction`].
    pub fn run(mut self) -> CompactionDone {
        let bytes = snapshot_file_from(
            &self.schema,
            std::mem::take(&mut self.snapshot),
            self.wall_ms,
        );
        let result = self.job.write(&bytes).map(|()| bytes.len() as u64);
        CompactionDone {
            db: self.db,
            name: self.name,
            id: self.id,
            job: self.job,
            result,
        }
    }
}

/// A [`CompactionTask`] that has run.
pub struct CompactionDone {
    pub(super) db: usize,
    pub(super) name: String,
    pub(super) id: u64,
    pub(super) job: Box<dyn ReplaceJob>,
    /// The snapshot's size, or why it could not be written.
    pub(super) result: std::io::Result<u64>,
}

impl CompactionDone {
    /// Append `tail` (from [`super::Core::take_compaction_tail`]) to the new file and make it
    /// durable, without the core. On failure the compaction fails at
    /// [`super::Core::finish_compaction`] (the current file stays in use, complete).
    pub fn catch_up(&mut self, tail: &[u8]) {
        if tail.is_empty() || self.result.is_err() {
            return;
        }
        if let Err(e) = self.job.append(tail) {
            self.result = Err(e);
        }
    }
}

impl std::fmt::Debug for CompactionDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionDone")
            .field("database", &self.name)
            .field("result", &self.result)
            .finish()
    }
}
