//! File records encoded and written outside the core ([`super::Core::set_background_writes`]).
//!
//! What it does: a commit applies the change, publishes it to monitors and queues a
//! [`RecordWrite`] (the change, not its bytes) instead of encoding the record and appending it
//! to the file under the core. The transaction's reply is held in the core. Whoever runs the
//! write (one ordered writer in [`crate::serve`], on a blocking thread) encodes the record,
//! appends it (synced when the transaction asked for durability) and gives the result to
//! [`super::Core::record_written`], which releases the replies of every transaction written so
//! far. So other clients' requests and monitors do not wait for the file, and a reply never
//! goes out before its record is in the file.
//!
//! Ordering: writes of one database are numbered at commit and must be run in that order (the
//! file holds the records in commit order; each may depend on the ones before).
//!
//! Compaction: a compaction starts only when every queued record is written (its snapshot is
//! then exactly the file's records); records queued while it runs are marked for its tail.
//! [`super::Core::finish_compaction`] waits (is deferred) until every queued record is written,
//! so the tail it appends is complete.
//!
//! Failure: a write that fails marks the file failed; later writes of that database are not
//! attempted (a record after a missing one could not be read back), the transactions already
//! committed in memory get the I/O error as their reply, and new transactions on that database
//! are refused before they commit. The server must be restarted (the file holds every
//! transaction whose reply said it committed).
//!
//! Crash semantics: a reply never precedes its record in the file, but other clients' reads
//! and monitor updates do (they must not wait for the file), so after a crash they may have
//! seen a change that is not on disk, whose committer never got a reply. On reconnecting they
//! get the whole contents again (next paragraph), which takes the change back. An orderly exit
//! (`holdfast db`'s `exit` or a signal) first waits for the queue to be written
//! ([`crate::serve::Server::flush_records`], at most 30 s); a kill is such a crash.
//!
//! What it changes: in this mode a transaction's id (`update3`'s and `monitor_cond_since`'s
//! last-txn-id) is drawn by the core, not taken from the record's SHA-1, so ids do not survive a
//! restart: a client that reconnects after a restart gets the whole contents again (as from
//! ovsdb-server, whose standalone databases keep no history).

use std::sync::Arc;

use hf_ovsdb::file::{WriteOptions, encode_delta_record_with};
use hf_ovsdb::{Schema, TxnDelta};
use parking_lot::Mutex;

use super::Storage;

/// A database's file, shared between the core and the writer.
pub(super) struct DbFile {
    pub storage: Box<dyn Storage>,
    /// Records written since a running compaction's snapshot, for its new file.
    pub tail: Vec<u8>,
    /// Why an earlier write failed: nothing more is written.
    pub failed: Option<String>,
}

pub(super) type SharedFile = Arc<Mutex<DbFile>>;

pub(super) fn shared(storage: Box<dyn Storage>) -> SharedFile {
    Arc::new(Mutex::new(DbFile {
        storage,
        tail: Vec::new(),
        failed: None,
    }))
}

/// A committed transaction's file record, to be encoded and appended outside the core, in
/// order ([`RecordWrite::run`], then [`super::Core::record_written`]).
pub struct RecordWrite {
    pub(super) db: usize,
    pub(super) seq: u64,
    pub(super) schema: Arc<Schema>,
    pub(super) delta: Arc<TxnDelta>,
    pub(super) wall_ms: u64,
    pub(super) opts: WriteOptions,
    /// Committed while a compaction runs: the record also goes to its tail.
    pub(super) to_tail: bool,
    pub(super) file: SharedFile,
}

impl std::fmt::Debug for RecordWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWrite")
            .field("database", &self.schema.name)
            .field("seq", &self.seq)
            .field("rows", &self.delta.len())
            .finish()
    }
}

impl RecordWrite {
    /// Row changes in the record (to tell large writes).
    pub fn rows(&self) -> usize {
        self.delta.len()
    }

    /// The result to report if the write could not be run at all (e.g. its thread panicked).
    pub fn lost(&self, why: impl Into<String>) -> RecordWritten {
        RecordWritten {
            db: self.db,
            seq: self.seq,
            result: Err(why.into()),
        }
    }

    /// Encode the record and append it (synced if the transaction is durable). Needs nothing
    /// of the core; give the result to [`super::Core::record_written`].
    pub fn run(self) -> RecordWritten {
        // Encoded before the file is locked: the core takes that lock (briefly) too.
        let record = (self.file.lock().failed.is_none())
            .then(|| encode_delta_record_with(&self.schema, &self.delta, self.wall_ms, self.opts));
        let mut f = self.file.lock();
        let result = match (&f.failed, record) {
            (Some(e), _) => Err(format!("not written after an earlier failure: {e}")),
            (None, None) => Err("not written: the file failed meanwhile".to_string()),
            (None, Some(record)) => match f.storage.append(&record, self.delta.durable) {
                Ok(()) => {
                    if self.to_tail {
                        f.tail.extend_from_slice(&record);
                    }
                    Ok(record.len())
                }
                Err(e) => {
                    let e = e.to_string();
                    f.failed = Some(e.clone());
                    Err(e)
                }
            },
        };
        RecordWritten {
            db: self.db,
            seq: self.seq,
            result,
        }
    }
}

/// A [`RecordWrite`] that has run.
#[derive(Debug)]
pub struct RecordWritten {
    pub(super) db: usize,
    pub(super) seq: u64,
    /// The record's size, or why it is not in the file.
    pub(super) result: Result<usize, String>,
}

impl RecordWritten {
    /// The record's size, or why it is not in the file.
    pub fn result(&self) -> &Result<usize, String> {
        &self.result
    }
}

/// A committed transaction's reply, held until its record is written.
pub(super) struct HeldReply {
    pub seq: u64,
    pub sid: super::SessionId,
    pub id: serde_json::Value,
    pub results: Vec<serde_json::Value>,
}
