//! Database files on disk: loading (with recovery of a torn last record), appending, and
//! atomic replacement for compaction.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hf_ovsdb::file::{FileError, RecordReader, encode_record, record_delta};
use hf_ovsdb::{Database, Schema, TxnDelta, Uuid};

use crate::server::Storage;

/// Why a database file could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file could not be read or written.
    #[error("{path}: {error}{}", hint(error))]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The file is not an OVSDB standalone database.
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// A database file opened for appending.
#[derive(Debug)]
pub struct FileStorage {
    path: PathBuf,
    file: File,
    size: u64,
    /// A fault-injection hook for tests: stop a background replacement at this point.
    crash_at: Option<CrashPoint>,
}

/// Where an injected crash stops a background replacement ([`FileStorage::inject_crash`]):
/// the operation returns an error there and leaves the files as a crash would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Half of the snapshot is in the new file.
    SnapshotHalfWritten,
    /// The snapshot is written and synced; the tail is not appended yet.
    SnapshotWritten,
    /// The tail is appended and synced to the new file; it has not been renamed.
    TailWritten,
    /// The new file has been renamed over the old one; nothing after.
    Renamed,
}

impl CrashPoint {
    /// Every point, in the order they are reached.
    pub const ALL: [CrashPoint; 4] = [
        CrashPoint::SnapshotHalfWritten,
        CrashPoint::SnapshotWritten,
        CrashPoint::TailWritten,
        CrashPoint::Renamed,
    ];
}

fn crash(at: Option<CrashPoint>, here: CrashPoint) -> std::io::Result<()> {
    if at == Some(here) {
        return Err(std::io::Error::other(format!("injected crash at {here:?}")));
    }
    Ok(())
}

/// A background replacement of a [`FileStorage`]: the new contents go to `FILE.tmp`.
#[derive(Debug)]
struct FileReplaceJob {
    tmp: PathBuf,
    file: Option<File>,
    crash_at: Option<CrashPoint>,
}

impl crate::server::ReplaceJob for FileReplaceJob {
    fn write(&mut self, contents: &[u8]) -> std::io::Result<()> {
        let mut f = File::create(&self.tmp)?;
        if self.crash_at == Some(CrashPoint::SnapshotHalfWritten) {
            f.write_all(&contents[..contents.len() / 2])?;
            return crash(self.crash_at, CrashPoint::SnapshotHalfWritten);
        }
        f.write_all(contents)?;
        f.sync_all()?;
        crash(self.crash_at, CrashPoint::SnapshotWritten)?;
        self.file = Some(f);
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let Some(f) = self.file.as_mut() else {
            return Err(std::io::Error::other(
                "the new file was not written (the background job did not run or failed)",
            ));
        };
        f.write_all(bytes)?;
        f.sync_data()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut tmp = path.to_path_buf().into_os_string();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// Make a rename in `path`'s directory durable; not all filesystems allow syncing a directory.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    {
        let _ = d.sync_all();
    }
}

impl FileStorage {
    /// Fault injection for tests: make the next background replacement stop at `at` as a
    /// crash would (the call returns an error; the files stay as they are).
    pub fn inject_crash(&mut self, at: CrashPoint) {
        self.crash_at = Some(at);
    }
}

/// What [`open`] read.
#[derive(Debug)]
pub struct Loaded {
    /// The database contents.
    pub db: Database,
    /// The file, ready for appends.
    pub storage: FileStorage,
    /// The last transactions (oldest first) with their ids.
    pub history: Vec<(Uuid, Arc<TxnDelta>)>,
    /// A warning to log (a torn last record was truncated).
    pub warning: Option<String>,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> OpenError + '_ {
    move |error| OpenError::Io {
        path: path.to_path_buf(),
        error,
    }
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            "\n  = help: create it with `holdfast db create FILE SCHEMA` (or give no file names to serve the defaults)"
        }
        std::io::ErrorKind::AlreadyExists => {
            "\n  = help: the file exists already; remove it to start over"
        }
        _ => "",
    }
}

/// Create a new database file holding only `schema`. Refuses to overwrite.
pub fn create(path: &Path, schema_text: &str) -> Result<Schema, OpenError> {
    let schema = Schema::parse(schema_text).map_err(|e| OpenError::Format {
        path: path.to_path_buf(),
        reason: format!("invalid schema: {e}"),
    })?;
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(&encode_record(schema.to_json()))
        .map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))?;
    Ok(schema)
}

/// Open and load a database file. `keep_history` bounds how many of the last transactions are
/// returned for `monitor_cond_since`.
pub fn open(path: &Path, seed: u64, keep_history: usize) -> Result<Loaded, OpenError> {
    let data = std::fs::read(path).map_err(io_err(path))?;
    let fmt = |reason: String| OpenError::Format {
        path: path.to_path_buf(),
        reason,
    };
    let mut reader = RecordReader::new(&data);
    let first = match reader.next() {
        Some(Ok(r)) => r,
        Some(Err(e)) => return Err(fmt(format!("cannot read the schema record: {e}"))),
        None => {
            return Err(fmt(
                "file is empty (create it with `holdfast db create FILE SCHEMA`)".into(),
            ));
        }
    };
    let schema =
        Schema::from_json(&first.json).map_err(|e| fmt(format!("invalid schema record: {e}")))?;
    let mut db = Database::new(Arc::new(schema), seed);
    let mut history: std::collections::VecDeque<(Uuid, Arc<TxnDelta>)> = Default::default();
    let mut valid_len = first.end;
    let mut warning = None;
    for (n, rec) in reader.by_ref().enumerate() {
        match rec {
            Ok(r) => {
                let delta = record_delta(&mut db, &r.json)
                    .map_err(|e| fmt(format!("record {} at byte {}: {e}", n + 2, r.offset)))?;
                db.apply(&delta);
                history.push_back((r.txn_id, Arc::new(delta)));
                if history.len() > keep_history {
                    history.pop_front();
                }
                valid_len = r.end;
            }
            Err(FileError::Truncated { valid_len: v }) => {
                warning = Some(format!(
                    "{}: the last record is incomplete (a crash during a write?); truncating {} bytes at offset {v}",
                    path.display(),
                    data.len() - v
                ));
                valid_len = v;
                break;
            }
            Err(e @ FileError::Corrupt { .. }) => return Err(fmt(e.to_string())),
        }
    }
    let file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(io_err(path))?;
    if valid_len < data.len() {
        file.set_len(valid_len as u64).map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
    }
    Ok(Loaded {
        db,
        storage: FileStorage {
            path: path.to_path_buf(),
            file,
            size: valid_len as u64,
            crash_at: None,
        },
        history: history.into(),
        warning,
    })
}

impl Storage for FileStorage {
    fn append(&mut self, record: &[u8], durable: bool) -> std::io::Result<()> {
        self.file.write_all(record)?;
        self.size += record.len() as u64;
        if durable {
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn replace(&mut self, contents: &[u8]) -> std::io::Result<()> {
        let tmp = tmp_path(&self.path);
        let mut f = File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        sync_dir(&self.path);
        // The handle follows the file through the rename: no reopening that could fail.
        self.file = f;
        self.size = contents.len() as u64;
        Ok(())
    }

    fn begin_replace(&mut self) -> std::io::Result<Option<Box<dyn crate::server::ReplaceJob>>> {
        Ok(Some(Box::new(FileReplaceJob {
            tmp: tmp_path(&self.path),
            file: None,
            crash_at: self.crash_at,
        })))
    }

    fn finish_replace(
        &mut self,
        job: Box<dyn crate::server::ReplaceJob>,
        tail: &[u8],
    ) -> std::io::Result<()> {
        let job = job
            .into_any()
            .downcast::<FileReplaceJob>()
            .map_err(|_| std::io::Error::other("a replacement job of another storage"))?;
        let Some(mut f) = job.file else {
            return Err(std::io::Error::other(
                "the new file was not written (the background job did not run or failed)",
            ));
        };
        f.write_all(tail)?;
        f.sync_all()?;
        crash(self.crash_at, CrashPoint::TailWritten)?;
        let size = f.metadata()?.len();
        std::fs::rename(&job.tmp, &self.path)?;
        crash(self.crash_at, CrashPoint::Renamed)?;
        sync_dir(&self.path);
        self.file = f;
        self.size = size;
        Ok(())
    }
}
