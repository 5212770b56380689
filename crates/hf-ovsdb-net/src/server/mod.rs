//! The OVSDB server's protocol core: every JSON-RPC method of RFC 7047 and ovsdb-server(7) over
//! any number of databases and sessions. Sans-I/O apart from the injected [`Storage`]: it takes
//! messages and time, and queues [`Output`]s (bytes for a session, or a session to close) that
//! the shell ([`crate::serve`]) delivers.
//!
//! Call contract: [`Core::connect`] gives a session id; feed each framed message with
//! [`Core::handle`]; call [`Core::tick`] at or after [`Core::poll_timeout`]; after every call
//! drain [`Core::poll_output`]; call [`Core::disconnect`] when a connection ends. Time is
//! monotonic milliseconds plus wall-clock milliseconds (for file records only).
//!
//! Big transactions: a commit decides which monitors may report which rows through an index
//! over their conditions ([`hf_ovsdb::cond_index`]) and queues the updates unencoded; a shell
//! that drains [`Core::poll_shell_output`] instead encodes them outside its lock on the core
//! ([`PendingUpdate`]), so other clients' requests are answered meanwhile. With
//! [`Core::set_background_compaction`], compaction's file is written outside the core too
//! ([`Core::poll_compaction`], [`Core::finish_compaction`]). With
//! [`Core::set_background_writes`], each commit's file record is encoded and appended outside
//! the core as well, its reply held until then ([`Core::poll_record_write`],
//! [`Core::record_written`]).

mod admin;
mod compact;
mod echo;
mod locks;
mod writes;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use hf_ovsdb::file::{WriteOptions, encode_delta_record_with, record_txn_id, snapshot_file};
use hf_ovsdb::monitor::merge_deltas;
use hf_ovsdb::server_db::{database_row, server_schema};
use hf_ovsdb::txn::{TxnEnv, TxnOps, TxnOutcome, execute_txn};
use hf_ovsdb::{Database, ErrorKind, Monitor, MonitorVersion, OvsdbError, TxnDelta, Uuid};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::jsonrpc::{
    Message, notification_bytes, notification_bytes_raw, reply_bytes, reply_bytes_raw,
};
pub use compact::{CompactionDone, CompactionTask};
pub use echo::{Echo, PendingUpdate};
pub use locks::Locks;
pub use writes::{RecordWrite, RecordWritten};

/// A connection's id.
pub type SessionId = u64;

/// Where a database's committed transactions go.
pub trait Storage: Send {
    /// Append one record; when `durable`, make it survive power loss before returning.
    fn append(&mut self, record: &[u8], durable: bool) -> std::io::Result<()>;
    /// Current size in bytes.
    fn size(&self) -> u64;
    /// Atomically replace the whole contents (compaction).
    fn replace(&mut self, contents: &[u8]) -> std::io::Result<()>;
    /// Start replacing the contents in the background: a job that writes the new contents
    /// without this storage (so without the core), or None if this storage cannot (then
    /// compaction uses [`Storage::replace`]). Appends go on to the current contents meanwhile.
    fn begin_replace(&mut self) -> std::io::Result<Option<Box<dyn ReplaceJob>>> {
        Ok(None)
    }
    /// Finish a job from [`Storage::begin_replace`] that has written the new contents: append
    /// `tail` (what was appended since), make it durable and atomically make it the contents.
    /// On error the current contents stay in use, complete.
    fn finish_replace(&mut self, job: Box<dyn ReplaceJob>, tail: &[u8]) -> std::io::Result<()> {
        let _ = (job, tail);
        Err(std::io::Error::other(
            "this storage cannot replace its contents in the background",
        ))
    }
}

/// The background part of a [`Storage`]'s replacement (see [`Storage::begin_replace`]).
pub trait ReplaceJob: Send {
    /// Write the new contents and make them durable (they are not in use yet).
    fn write(&mut self, contents: &[u8]) -> std::io::Result<()>;
    /// Append `bytes` to the new contents written by [`ReplaceJob::write`] and make them
    /// durable (the catch-up: most of the tail, written without the core; see
    /// [`Core::take_compaction_tail`]). Storages that cannot answer an error; the compaction
    /// then fails and the current contents stay in use.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let _ = bytes;
        Err(std::io::Error::other(
            "this storage cannot append to a background replacement",
        ))
    }
    /// For the storage that made the job, to take it back in [`Storage::finish_replace`].
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

/// Time as the core sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Now {
    /// Monotonic milliseconds (timeouts, probes).
    pub mono_ms: u64,
    /// Wall-clock milliseconds since the epoch (the `_date` of file records).
    pub wall_ms: u64,
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Keep at most this many transactions for `monitor_cond_since`.
    pub history_txns: usize,
    /// Keep at most this many row changes in that history.
    pub history_rows: usize,
    /// Compact a database file once it exceeds this size and four times its last snapshot.
    pub compact_min_bytes: u64,
    /// Send an echo to a session silent for this long, and drop it after as long again
    /// without an answer. None disables probes.
    pub probe_interval_ms: Option<u64>,
    /// Write modified columns of file records as diffs (`"_is_diff": true`), as ovsdb-server
    /// does by default; false writes full values (`--disable-file-column-diff`).
    pub file_column_diff: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            history_txns: 1000,
            history_rows: 200_000,
            compact_min_bytes: 10 << 20,
            probe_interval_ms: Some(5_000),
            file_column_diff: true,
        }
    }
}

/// Something the shell must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send bytes (one JSON message) to a session.
    Send(SessionId, Vec<u8>),
    /// Close a session, logging the reason.
    Close(SessionId, String),
    /// A log line for the operator (warnings: compaction, I/O errors).
    Log(String),
}

/// What the shell must do, with monitor updates not yet encoded ([`Core::poll_shell_output`]).
#[derive(Debug, Clone, PartialEq)]
pub enum ShellOutput {
    /// As [`Core::poll_output`] gives it.
    Output(Output),
    /// A monitor notification for a session: encode it ([`PendingUpdate::encode`], outside any
    /// lock on the core) and send it if it is not empty, in order with the session's other
    /// output.
    Update(SessionId, PendingUpdate),
}

struct DbEntry {
    db: Database,
    storage: Option<writes::SharedFile>,
    /// Records queued for the writer ([`Core::poll_record_write`]) and written so far: the
    /// file is caught up when they are equal.
    queued: u64,
    written: u64,
    /// Replies of committed transactions whose records are not written yet, in order.
    held: VecDeque<writes::HeldReply>,
    /// Why a background write failed: transactions are refused from then on.
    failed: Option<String>,
    /// A finished compaction waiting for the records queued before it to be written.
    finish_deferred: Option<CompactionDone>,
    history: VecDeque<(Uuid, Arc<TxnDelta>)>,
    history_rows: usize,
    last_txn: Uuid,
    snapshot_size: u64,
    /// The distinct monitor specs and their condition index; None when monitors changed.
    specs: Option<echo::Specs>,
    /// A compaction running off the core ([`Core::poll_compaction`]).
    compacting: Option<compact::Running>,
}

struct MonitorEntry {
    db: usize,
    id: Value,
    monitor: Arc<Monitor>,
    /// `monitor.spec_key()`, kept current across condition changes.
    key: String,
}

#[derive(Default)]
struct Session {
    monitors: BTreeMap<String, MonitorEntry>,
    last_rx_ms: u64,
    probe_sent_ms: Option<u64>,
    /// This session's own inactivity probe (from its remote's settings), overriding
    /// `Config::probe_interval_ms`; see [`Core::set_session_probe`].
    probe_ms: Option<Option<u64>>,
}

struct Pending {
    session: SessionId,
    id: Value,
    db: usize,
    ops: TxnOps,
    deadline_ms: Option<u64>,
}

/// A received message, parsed outside the core's lock ([`Incoming::parse`]) and handled
/// under it ([`Core::handle_incoming`]).
#[derive(Debug)]
pub struct Incoming(Parsed);

#[derive(Debug)]
enum Parsed {
    /// A `transact` request whose operations are JSON texts, each parsed only when it runs:
    /// a 100k-operation request (a cold SB) never exists as one tree.
    Transact { id: Value, db: String, ops: TxnOps },
    /// Anything else, as one tree.
    Message(Value),
}

impl Incoming {
    /// Parse one framed message. A well-formed `transact` request is split into its
    /// operations' texts; anything the split does not take (duplicate members, another
    /// method, malformed params) is parsed whole and answered as before. Bytes that are not
    /// JSON are an error saying what and where (serde_json's line and column).
    pub fn parse(bytes: &[u8]) -> Result<Incoming, String> {
        let split = RawRequest::parse(bytes).ok();
        if let Some((id, db, ops)) = split.as_ref().and_then(RawRequest::transact) {
            // A raw id is valid JSON.
            if let Ok(id) = serde_json::from_str(id.get()) {
                let ops = ops.into_iter().map(ToOwned::to_owned).collect();
                return Ok(Incoming(Parsed::Transact {
                    id,
                    db,
                    ops: TxnOps::Text(ops),
                }));
            }
        }
        serde_json::from_slice(bytes)
            .map(|v| Incoming(Parsed::Message(v)))
            .map_err(|e| e.to_string())
    }
}

/// A JSON-RPC message split into raw members (see [`Incoming::parse`]).
#[derive(serde::Deserialize)]
struct RawRequest<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

impl<'a> RawRequest<'a> {
    fn parse(bytes: &'a [u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(bytes)
    }

    /// The id, database name and operations of a well-formed `transact` request (an id that
    /// is not null, params an array starting with a string); None for anything else,
    /// which [`Core::handle`] answers as before.
    fn transact(&self) -> Option<(&'a RawValue, String, Vec<&'a RawValue>)> {
        if self.method?.get() != "\"transact\"" {
            return None;
        }
        let id = self.id.filter(|i| i.get() != "null")?;
        let mut params: Vec<&RawValue> = serde_json::from_str(self.params?.get()).ok()?;
        if params.is_empty() {
            return None;
        }
        let db: String = serde_json::from_str(params[0].get()).ok()?;
        params.remove(0);
        Some((id, db, params))
    }
}

/// The server core.
pub struct Core {
    cfg: Config,
    dbs: Vec<DbEntry>,
    sessions: BTreeMap<SessionId, Session>,
    next_session: SessionId,
    locks: Locks,
    pending: Vec<Pending>,
    out: Vec<ShellOutput>,
    /// Compactions write their file outside the core ([`Core::set_background_compaction`]).
    background_compaction: bool,
    compactions: Vec<CompactionTask>,
    next_compaction: u64,
    /// File records are written outside the core ([`Core::set_background_writes`]).
    background_writes: bool,
    writes: VecDeque<RecordWrite>,
    /// Seed and counter of the transaction ids drawn in that mode.
    txn_seed: u64,
    txn_count: u64,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field(
                "databases",
                &self
                    .dbs
                    .iter()
                    .map(|d| d.db.schema.name.clone())
                    .collect::<Vec<_>>(),
            )
            .field("sessions", &self.sessions.len())
            .finish()
    }
}

struct SessionEnv<'a> {
    locks: &'a Locks,
    sid: SessionId,
    expired: bool,
}

impl TxnEnv for SessionEnv<'_> {
    fn owns_lock(&self, name: &str) -> bool {
        self.locks.owns(self.sid, name)
    }
    fn wait_expired(&self) -> bool {
        self.expired
    }
}

fn err_json(kind: ErrorKind, details: impl Into<String>) -> Value {
    OvsdbError::new(kind, details).to_json()
}

fn syntax(details: impl Into<String>) -> Value {
    err_json(ErrorKind::Syntax, details)
}

const SERVER_DB: usize = 0;

impl Core {
    /// A server with no databases but `_Server`. `seed` seeds UUID generation.
    pub fn new(cfg: Config, seed: u64) -> Self {
        let server = Database::new(server_schema(), seed);
        Core {
            cfg,
            dbs: vec![DbEntry {
                db: server,
                storage: None,
                history: VecDeque::new(),
                history_rows: 0,
                last_txn: Uuid::nil(),
                snapshot_size: 0,
                specs: None,
                compacting: None,
                queued: 0,
                written: 0,
                held: VecDeque::new(),
                failed: None,
                finish_deferred: None,
            }],
            sessions: Default::default(),
            next_session: 1,
            locks: Locks::default(),
            pending: Vec::new(),
            out: Vec::new(),
            background_compaction: false,
            compactions: Vec::new(),
            next_compaction: 0,
            background_writes: false,
            writes: VecDeque::new(),
            txn_seed: seed,
            txn_count: 0,
        }
    }

    /// Serve `db`, persisting to `storage`. `history` is the tail of transactions read back from
    /// the file (oldest first), so `monitor_cond_since` works across restarts.
    pub fn add_database(
        &mut self,
        db: Database,
        storage: Option<Box<dyn Storage>>,
        history: Vec<(Uuid, Arc<TxnDelta>)>,
    ) -> Result<(), String> {
        let name = db.schema.name.clone();
        if self.db_index(&name).is_some() {
            return Err(format!("database {name} is served twice"));
        }
        let row = database_row(&mut self.dbs[SERVER_DB].db, &db.schema);
        self.dbs[SERVER_DB].db.apply(&row);
        let snapshot_size = storage.as_ref().map_or(0, |s| s.size());
        let last_txn = history.last().map_or(Uuid::nil(), |h| h.0);
        let history_rows = history.iter().map(|(_, d)| d.len()).sum();
        self.dbs.push(DbEntry {
            db,
            storage: storage.map(writes::shared),
            history: history.into(),
            history_rows,
            last_txn,
            snapshot_size,
            specs: None,
            compacting: None,
            queued: 0,
            written: 0,
            held: VecDeque::new(),
            failed: None,
            finish_deferred: None,
        });
        self.trim_history(self.dbs.len() - 1);
        Ok(())
    }

    /// Names of served databases, `_Server` included.
    pub fn database_names(&self) -> Vec<String> {
        self.dbs.iter().map(|d| d.db.schema.name.clone()).collect()
    }

    /// Read access to a served database.
    pub fn database(&self, name: &str) -> Option<&Database> {
        self.db_index(name).map(|i| &self.dbs[i].db)
    }

    fn db_index(&self, name: &str) -> Option<usize> {
        self.dbs.iter().position(|d| d.db.schema.name == name)
    }

    /// A new session.
    pub fn connect(&mut self, now: Now) -> SessionId {
        let sid = self.next_session;
        self.next_session += 1;
        self.sessions.insert(
            sid,
            Session {
                last_rx_ms: now.mono_ms,
                ..Default::default()
            },
        );
        sid
    }

    /// A session ended: cancel its monitors and pending transactions, release its locks.
    pub fn disconnect(&mut self, sid: SessionId) {
        let Some(s) = self.sessions.remove(&sid) else {
            return;
        };
        for m in s.monitors.values() {
            self.dbs[m.db].specs = None;
        }
        self.pending.retain(|p| p.session != sid);
        for (name, owner) in self.locks.release_all(sid) {
            self.notify(owner, "locked", &json!([name]));
        }
    }

    /// Number of connected sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Take the queued outputs, monitor updates encoded (here, by the caller).
    pub fn poll_output(&mut self) -> impl Iterator<Item = Output> + '_ {
        self.out.drain(..).filter_map(|o| match o {
            ShellOutput::Output(o) => Some(o),
            ShellOutput::Update(sid, u) => u.encode().map(|b| Output::Send(sid, b)),
        })
    }

    /// Take the queued outputs with monitor updates still to be encoded, so that a shell can
    /// encode them without holding the core (see [`PendingUpdate`]).
    pub fn poll_shell_output(&mut self) -> std::vec::Drain<'_, ShellOutput> {
        self.out.drain(..)
    }

    fn emit(&mut self, o: Output) {
        self.out.push(ShellOutput::Output(o));
    }

    /// When [`Core::tick`] must next be called (monotonic ms), if ever.
    pub fn poll_timeout(&self) -> Option<u64> {
        let default = self.cfg.probe_interval_ms;
        let probes = self
            .sessions
            .values()
            .filter_map(|s| {
                let p = s.probe_ms.unwrap_or(default)?;
                Some(s.probe_sent_ms.unwrap_or(s.last_rx_ms).saturating_add(p))
            })
            .min();
        let waits = self.pending.iter().filter_map(|p| p.deadline_ms).min();
        match (probes, waits) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Handle timers: inactivity probes and `wait` timeouts.
    pub fn tick(&mut self, now: Now) {
        {
            let default = self.cfg.probe_interval_ms;
            let mut probe = Vec::new();
            let mut close = Vec::new();
            for (sid, s) in &mut self.sessions {
                let Some(p) = s.probe_ms.unwrap_or(default) else {
                    continue;
                };
                match s.probe_sent_ms {
                    Some(t) if now.mono_ms >= t + p => close.push((*sid, p)),
                    None if now.mono_ms >= s.last_rx_ms + p => {
                        s.probe_sent_ms = Some(now.mono_ms);
                        probe.push(*sid);
                    }
                    _ => {}
                }
            }
            for sid in probe {
                let m = Message::Request {
                    method: "echo".into(),
                    params: vec![],
                    id: json!("echo"),
                };
                self.emit(Output::Send(sid, m.to_bytes()));
            }
            for (sid, p) in close {
                self.emit(Output::Close(
                    sid,
                    format!("no reply to inactivity probe after {p} ms"),
                ));
                self.disconnect(sid);
            }
        }
        let expired: Vec<usize> = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.deadline_ms.is_some_and(|d| now.mono_ms >= d))
            .map(|(i, _)| i)
            .collect();
        for i in expired.into_iter().rev() {
            let p = self.pending.remove(i);
            self.run_txn(p.session, p.id, p.db, p.ops, now, true, None);
        }
    }

    /// Handle one framed message's bytes from session `sid` (from
    /// [`crate::framing::Framer::next_raw`]): [`Incoming::parse`], then
    /// [`Core::handle_incoming`]. Bytes that are not JSON are an error naming where (the
    /// caller closes the connection, as for a framing error).
    pub fn handle_bytes(&mut self, sid: SessionId, bytes: &[u8], now: Now) -> Result<(), String> {
        let m = Incoming::parse(bytes)?;
        self.handle_incoming(sid, m, now);
        Ok(())
    }

    /// Handle one message parsed by [`Incoming::parse`].
    pub fn handle_incoming(&mut self, sid: SessionId, m: Incoming, now: Now) {
        let (id, db, ops) = match m.0 {
            Parsed::Message(v) => return self.handle(sid, v, now),
            Parsed::Transact { id, db, ops } => (id, db, ops),
        };
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.last_rx_ms = now.mono_ms;
        s.probe_sent_ms = None;
        let Some(dbi) = self.db_index(&db) else {
            let e = err_json(
                ErrorKind::UnknownDatabase,
                format!("transact request specifies unknown database {db}"),
            );
            return self.error(sid, id, e);
        };
        self.run_txn(sid, id, dbi, ops, now, false, None);
    }

    /// Handle one message from session `sid`.
    pub fn handle(&mut self, sid: SessionId, msg: Value, now: Now) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.last_rx_ms = now.mono_ms;
        s.probe_sent_ms = None;
        let msg = match Message::from_json(msg) {
            Ok(m) => m,
            Err(e) => {
                self.emit(Output::Close(sid, e.to_string()));
                self.disconnect(sid);
                return;
            }
        };
        match msg {
            Message::Request { method, params, id } => self.request(sid, &method, params, id, now),
            Message::Notification { method, params } => {
                // `cancel` is the only notification a client sends; others are ignored as
                // ovsdb-server ignores them.
                if method == "cancel" {
                    self.cancel(sid, &params);
                }
            }
            // Replies to our echo probes.
            Message::Reply { .. } | Message::Error { .. } => {}
        }
    }

    fn reply(&mut self, sid: SessionId, id: &Value, result: &Value) {
        self.emit(Output::Send(sid, reply_bytes(id, result)));
    }

    fn error(&mut self, sid: SessionId, id: Value, error: Value) {
        self.emit(Output::Send(sid, Message::Error { error, id }.to_bytes()));
    }

    fn notify(&mut self, sid: SessionId, method: &str, params: &Value) {
        self.emit(Output::Send(sid, notification_bytes(method, params)));
    }

    fn request(&mut self, sid: SessionId, method: &str, params: Vec<Value>, id: Value, now: Now) {
        match method {
            "echo" => self.reply(sid, &id, &Value::Array(params)),
            "list_dbs" => {
                let names = json!(self.database_names());
                self.reply(sid, &id, &names)
            }
            "get_schema" => match params
                .first()
                .and_then(Value::as_str)
                .map(|n| self.db_index(n))
            {
                Some(Some(i)) => {
                    let s = self.dbs[i].db.schema.to_json().clone();
                    self.reply(sid, &id, &s)
                }
                Some(None) => {
                    let e = err_json(
                        ErrorKind::UnknownDatabase,
                        format!("get_schema asks for unknown database {}", params[0]),
                    );
                    self.error(sid, id, e)
                }
                None => self.error(sid, id, syntax("get_schema needs [<db-name>]")),
            },
            "transact" => self.transact(sid, params, id, now),
            "cancel" => self.cancel(sid, &params),
            "monitor" => self.monitor(sid, params, id, MonitorVersion::V1),
            "monitor_cond" => self.monitor(sid, params, id, MonitorVersion::V2),
            "monitor_cond_since" => self.monitor(sid, params, id, MonitorVersion::V3),
            "monitor_cond_change" => self.monitor_cond_change(sid, params, id),
            "monitor_cancel" => self.monitor_cancel(sid, params, id),
            "lock" | "steal" | "unlock" => self.lock_request(sid, method, params, id),
            "set_db_change_aware" => match params.as_slice() {
                [Value::Bool(_)] => self.reply(sid, &id, &json!({})),
                _ => self.error(sid, id, syntax("set_db_change_aware needs [<boolean>]")),
            },
            _ => self.error(sid, id, json!("unknown method")),
        }
    }

    fn transact(&mut self, sid: SessionId, params: Vec<Value>, id: Value, now: Now) {
        let Some(Value::String(name)) = params.first() else {
            return self.error(sid, id, syntax("transact needs [<db-name>, <operation>*]"));
        };
        let Some(dbi) = self.db_index(name) else {
            let e = err_json(
                ErrorKind::UnknownDatabase,
                format!("transact request specifies unknown database {name}"),
            );
            return self.error(sid, id, e);
        };
        let mut params = params;
        let ops = params.split_off(1);
        self.run_txn(sid, id, dbi, TxnOps::Values(ops), now, false, None);
    }

    /// Execute (or re-execute) a transaction and reply, commit, publish, and retry waiters.
    #[allow(clippy::too_many_arguments)]
    fn run_txn(
        &mut self,
        sid: SessionId,
        id: Value,
        dbi: usize,
        ops: TxnOps,
        now: Now,
        expired: bool,
        deadline: Option<u64>,
    ) {
        let env = SessionEnv {
            locks: &self.locks,
            sid,
            expired,
        };
        let outcome = execute_txn(&mut self.dbs[dbi].db, &ops, &env);
        match outcome {
            TxnOutcome::Commit { mut results, delta } => {
                if !delta.is_empty() {
                    if dbi == SERVER_DB {
                        results.push(err_json(
                            ErrorKind::Constraint,
                            "the _Server database is read-only",
                        ));
                        return self.reply(sid, &id, &Value::Array(results));
                    }
                    if let Some(e) = &self.dbs[dbi].failed {
                        let e = format!(
                            "the database file is not being written (restart the server): an earlier write failed: {e}"
                        );
                        results.push(err_json(ErrorKind::Io, e));
                        return self.reply(sid, &id, &Value::Array(results));
                    }
                    match self.commit(dbi, delta, now) {
                        Err(e) => {
                            results.push(err_json(
                                ErrorKind::Io,
                                format!("writing the database file failed: {e}"),
                            ));
                            return self.reply(sid, &id, &Value::Array(results));
                        }
                        Ok(Some(seq)) => self.dbs[dbi].held.push_back(writes::HeldReply {
                            seq,
                            sid,
                            id,
                            results,
                        }),
                        Ok(None) => self.reply(sid, &id, &Value::Array(results)),
                    }
                    self.retry_pending(dbi, now);
                    return;
                }
                self.reply(sid, &id, &Value::Array(results))
            }
            TxnOutcome::Failed { results, .. } => self.reply(sid, &id, &Value::Array(results)),
            TxnOutcome::Blocked { timeout_ms } => {
                let deadline_ms =
                    deadline.or_else(|| timeout_ms.map(|t| now.mono_ms.saturating_add(t)));
                self.pending.push(Pending {
                    session: sid,
                    id,
                    db: dbi,
                    ops,
                    deadline_ms,
                });
            }
        }
    }

    fn retry_pending(&mut self, dbi: usize, now: Now) {
        // Each retry may commit and wake others; a pass that commits nothing ends the loop.
        loop {
            let before = self.dbs[dbi].last_txn;
            let mine: Vec<Pending> = {
                let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
                    .into_iter()
                    .partition(|p| p.db == dbi);
                self.pending = rest;
                mine
            };
            if mine.is_empty() {
                return;
            }
            for p in mine {
                self.run_txn(p.session, p.id, p.db, p.ops, now, false, p.deadline_ms);
            }
            if self.dbs[dbi].last_txn == before {
                return;
            }
        }
    }

    /// Persist, apply and publish a validated delta. With background writes, the record is
    /// queued for the writer instead: its number is returned, and the reply must wait for it.
    fn commit(&mut self, dbi: usize, delta: TxnDelta, now: Now) -> std::io::Result<Option<u64>> {
        if self.background_writes && self.dbs[dbi].storage.is_some() {
            return Ok(Some(self.commit_background(dbi, delta, now)));
        }
        let entry = &mut self.dbs[dbi];
        let opts = WriteOptions {
            column_diff: self.cfg.file_column_diff,
        };
        let record = encode_delta_record_with(&entry.db.schema, &delta, now.wall_ms, opts);
        let txn_id = record_txn_id(&record);
        if let Some(file) = &entry.storage {
            let mut f = file.lock();
            f.storage.append(&record, delta.durable)?;
            if entry.compacting.is_some() {
                f.tail.extend_from_slice(&record);
            }
        }
        let delta = self.apply_and_publish(dbi, delta, txn_id);
        drop(delta);
        self.maybe_compact(dbi, now);
        Ok(None)
    }

    fn apply_and_publish(&mut self, dbi: usize, delta: TxnDelta, txn_id: Uuid) -> Arc<TxnDelta> {
        let entry = &mut self.dbs[dbi];
        entry.db.apply(&delta);
        let delta = Arc::new(delta);
        entry.history_rows += delta.len();
        entry.history.push_back((txn_id, delta.clone()));
        entry.last_txn = txn_id;
        self.trim_history(dbi);
        self.publish(dbi, &delta, txn_id);
        delta
    }

    /// [`Core::commit`] with the record written outside the core.
    fn commit_background(&mut self, dbi: usize, delta: TxnDelta, now: Now) -> u64 {
        let txn_id = self.draw_txn_id();
        let delta = self.apply_and_publish(dbi, delta, txn_id);
        let e = &mut self.dbs[dbi];
        let Some(file) = &e.storage else {
            return e.queued;
        };
        e.queued += 1;
        self.writes.push_back(RecordWrite {
            db: dbi,
            seq: e.queued,
            schema: e.db.schema.clone(),
            delta,
            wall_ms: now.wall_ms,
            opts: WriteOptions {
                column_diff: self.cfg.file_column_diff,
            },
            to_tail: e.compacting.is_some(),
            file: file.clone(),
        });
        e.queued
    }

    /// A transaction id for background writes (see [`writes`]): 128 bits from the seed and a
    /// counter (splitmix64), as a random UUID.
    fn draw_txn_id(&mut self) -> Uuid {
        fn mix(mut z: u64) -> u64 {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
        self.txn_count += 1;
        let base = self.txn_seed.wrapping_add(
            self.txn_count
                .wrapping_mul(2)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15),
        );
        let hi = mix(base);
        let lo = mix(base.wrapping_add(0x9e37_79b9_7f4a_7c15));
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&hi.to_be_bytes());
        b[8..].copy_from_slice(&lo.to_be_bytes());
        uuid::Builder::from_random_bytes(b).into_uuid()
    }

    /// Write each commit's file record outside the core: commits queue [`RecordWrite`]s
    /// ([`Core::poll_record_write`]) and hold their replies until [`Core::record_written`]
    /// says the record is in the file. Off by default (records are written inside the call
    /// that commits). See [`writes`] for what changes (transaction ids) and how failures and
    /// compaction are handled.
    pub fn set_background_writes(&mut self, on: bool) {
        self.background_writes = on;
    }

    /// The next record to write, in commit order: run them in that order, one at a time
    /// ([`RecordWrite::run`]) and give each result to [`Core::record_written`].
    pub fn poll_record_write(&mut self) -> Option<RecordWrite> {
        self.writes.pop_front()
    }

    /// A record from [`Core::poll_record_write`] has been written (or not): release the replies
    /// it held, then run what waited for the file to catch up (a compaction's finish, or its
    /// start).
    pub fn record_written(&mut self, done: RecordWritten, now: Now) {
        let Some(e) = self.dbs.get_mut(done.db) else {
            return;
        };
        e.written = e.written.max(done.seq);
        if let Err(err) = &done.result
            && e.failed.is_none()
        {
            e.failed = Some(err.clone());
            let name = e.db.schema.name.clone();
            self.emit(Output::Log(format!(
                "writing database {name}'s file failed: {err}; transactions on it are refused until the server is restarted"
            )));
        }
        let e = &mut self.dbs[done.db];
        let mut release = Vec::new();
        while e.held.front().is_some_and(|h| h.seq <= done.seq) {
            if let Some(h) = e.held.pop_front() {
                let this = done.seq == h.seq;
                release.push((h, this));
            }
        }
        for (h, this) in release {
            let mut results = h.results;
            if this && let Err(err) = &done.result {
                results.push(err_json(
                    ErrorKind::Io,
                    format!("writing the database file failed (the change is in memory, not on disk): {err}"),
                ));
            }
            self.reply(h.sid, &h.id, &Value::Array(results));
        }
        if !self.writes_in_flight(done.db)
            && let Some(deferred) = self.dbs[done.db].finish_deferred.take()
        {
            self.finish_compaction(deferred);
        }
        // (Only if the file has caught up: see there.)
        self.maybe_compact(done.db, now);
    }

    /// Whether any database has records queued for the writer and not yet written (an
    /// orderly exit waits for them: see [`crate::serve::Server::flush_records`]).
    pub fn records_pending(&self) -> bool {
        (0..self.dbs.len()).any(|i| self.writes_in_flight(i))
    }

    /// Records queued for the writer and not yet written ([`Core::record_written`]).
    fn writes_in_flight(&self, dbi: usize) -> bool {
        let e = &self.dbs[dbi];
        e.written < e.queued
    }

    fn trim_history(&mut self, dbi: usize) {
        let (max_txns, max_rows) = (self.cfg.history_txns, self.cfg.history_rows);
        let e = &mut self.dbs[dbi];
        while e.history.len() > max_txns || (e.history_rows > max_rows && e.history.len() > 1) {
            if let Some((_, d)) = e.history.pop_front() {
                e.history_rows -= d.len();
            }
        }
    }

    fn maybe_compact(&mut self, dbi: usize, now: Now) {
        // With records still to be written, a snapshot would hold changes the file does not
        // (and the compaction's tail would miss them): wait until they are written.
        if self.writes_in_flight(dbi) {
            return;
        }
        let min = self.cfg.compact_min_bytes;
        let e = &mut self.dbs[dbi];
        let Some(file) = &e.storage else { return };
        let mut file = file.lock();
        let st = &mut file.storage;
        let size = st.size();
        if size < min || size < e.snapshot_size.saturating_mul(4) || e.compacting.is_some() {
            return;
        }
        if self.background_compaction {
            match st.begin_replace() {
                Ok(Some(job)) => {
                    self.next_compaction += 1;
                    let id = self.next_compaction;
                    file.tail.clear();
                    e.compacting = Some(compact::Running { id });
                    self.compactions.push(CompactionTask {
                        db: dbi,
                        name: e.db.schema.name.clone(),
                        id,
                        schema: e.db.schema.clone(),
                        snapshot: e.db.snapshot_rows(),
                        wall_ms: now.wall_ms,
                        job,
                    });
                    return;
                }
                Ok(None) => {}
                Err(err) => {
                    let name = e.db.schema.name.clone();
                    drop(file);
                    return self.emit(Output::Log(format!(
                        "compacting database {name} failed: cannot start the new file: {err}"
                    )));
                }
            }
        }
        let snap = snapshot_file(&e.db, now.wall_ms);
        let name = e.db.schema.name.clone();
        let replaced = file.storage.replace(&snap);
        drop(file);
        match replaced {
            Ok(()) => {
                e.snapshot_size = snap.len() as u64;
                self.emit(Output::Log(format!(
                    "compacted database {name}: {size} bytes -> {} bytes",
                    snap.len()
                )));
            }
            Err(err) => self.emit(Output::Log(format!(
                "compacting database {name} failed: {err}"
            ))),
        }
    }

    /// Let compactions write their file outside the core: they are then handed out by
    /// [`Core::poll_compaction`] (for storages that can, see [`Storage::begin_replace`]) and
    /// must be finished with [`Core::finish_compaction`]. Off by default: compaction then
    /// happens inside the call that commits.
    pub fn set_background_compaction(&mut self, on: bool) {
        self.background_compaction = on;
    }

    /// A compaction to run outside the core ([`CompactionTask::run`]), if one is due.
    pub fn poll_compaction(&mut self) -> Option<CompactionTask> {
        self.compactions.pop()
    }

    /// The records committed since `done`'s snapshot, taken out of the core so that the caller
    /// appends them to the new file without the core ([`CompactionDone::catch_up`]); then only
    /// what commits after this call is appended by [`Core::finish_compaction`], under the
    /// core. Empty when `done` is not the running compaction. The current file keeps every
    /// record whatever happens: a catch-up that fails makes the compaction fail, not lose them.
    pub fn take_compaction_tail(&mut self, done: &CompactionDone) -> Vec<u8> {
        let Some(e) = self.dbs.get(done.db) else {
            return Vec::new();
        };
        match (&e.compacting, &e.storage) {
            // A record being written holds the file: leave the tail to the finish rather than
            // wait for the write under the core.
            (Some(r), Some(file)) if r.id == done.id => file
                .try_lock()
                .map(|mut f| std::mem::take(&mut f.tail))
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Install the result of a [`CompactionTask`]: the storage appends what was committed
    /// since the snapshot (since [`Core::take_compaction_tail`], if it was called) and swaps
    /// the new file in; on any error the old file stays in use.
    pub fn finish_compaction(&mut self, done: CompactionDone) {
        if done.db < self.dbs.len() && self.writes_in_flight(done.db) {
            // Its tail is complete once the records queued so far are written
            // ([`Core::record_written`] finishes it then).
            let db = done.db;
            self.dbs[db].finish_deferred = Some(done);
            return;
        }
        let Some(e) = self.dbs.get_mut(done.db) else {
            return;
        };
        if e.compacting.as_ref().map(|r| r.id) != Some(done.id) {
            return self.emit(Output::Log(format!(
                "compaction of database {} finished after the database went away",
                done.name
            )));
        }
        if e.compacting.take().is_none() {
            return;
        }
        let name = done.name;
        let mut file = e.storage.as_ref().map(|f| f.lock());
        let tail = file
            .as_mut()
            .map(|f| std::mem::take(&mut f.tail))
            .unwrap_or_default();
        let msg = match (done.result, file.as_mut().map(|f| &mut f.storage)) {
            (Err(err), _) => format!("compacting database {name} failed: {err}"),
            (Ok(_), None) => format!("compacting database {name} failed: it has no storage"),
            (Ok(snap), Some(st)) => {
                let before = st.size();
                match st.finish_replace(done.job, &tail) {
                    Ok(()) => {
                        e.snapshot_size = snap;
                        format!(
                            "compacted database {name}: {before} bytes -> {} bytes",
                            st.size()
                        )
                    }
                    Err(err) => format!("compacting database {name} failed: {err}"),
                }
            }
        };
        drop(file);
        self.emit(Output::Log(msg));
    }

    /// Compact every database now (e.g. on operator request).
    pub fn compact_all(&mut self, now: Now) {
        for dbi in 1..self.dbs.len() {
            let in_flight = self.writes_in_flight(dbi);
            let e = &mut self.dbs[dbi];
            let name = e.db.schema.name.clone();
            if e.compacting.is_some() || in_flight {
                // Its new file is being written, or records are; replacing the file now would
                // race with them.
                self.emit(Output::Log(format!(
                    "database {name} is not compacted now: a background compaction or file write of it is running"
                )));
                continue;
            }
            if let Some(file) = &e.storage {
                let snap = snapshot_file(&e.db, now.wall_ms);
                let replaced = file.lock().storage.replace(&snap);
                match replaced {
                    Ok(()) => e.snapshot_size = snap.len() as u64,
                    Err(err) => self.emit(Output::Log(format!(
                        "compacting database {name} failed: {err}"
                    ))),
                }
            }
        }
    }

    fn publish(&mut self, dbi: usize, delta: &Arc<TxnDelta>, txn_id: Uuid) {
        let schema = self.dbs[dbi].db.schema.clone();
        if self.dbs[dbi].specs.is_none() {
            let monitors = self
                .sessions
                .values()
                .flat_map(|s| s.monitors.values())
                .filter(|m| m.db == dbi)
                .map(|m| (m.key.as_str(), &m.monitor));
            self.dbs[dbi].specs = Some(echo::Specs::build(schema.tables.len(), monitors));
        }
        let Some(specs) = &self.dbs[dbi].specs else {
            return;
        };
        if specs.monitors.is_empty() {
            return;
        }
        // Which specs may report which changes: through the condition index, once per spec.
        let echoes = specs.echoes(&schema, delta);
        let txn = json!(txn_id.to_string()).to_string();
        for (sid, s) in &self.sessions {
            for m in s.monitors.values() {
                if m.db != dbi {
                    continue;
                }
                let Some(Some(e)) = specs
                    .by_key
                    .get(m.key.as_str())
                    .map(|&k| &echoes[k as usize])
                else {
                    continue;
                };
                let u = echo::pending(e, m.monitor.version, m.id.to_string(), &txn);
                self.out.push(ShellOutput::Update(*sid, u));
            }
        }
    }

    fn cancel(&mut self, sid: SessionId, params: &[Value]) {
        let Some(target) = params.first() else { return };
        if let Some(i) = self
            .pending
            .iter()
            .position(|p| p.session == sid && &p.id == target)
        {
            let p = self.pending.remove(i);
            self.error(
                sid,
                p.id,
                err_json(ErrorKind::Canceled, "transaction canceled by request"),
            );
        }
    }

    fn monitor(&mut self, sid: SessionId, params: Vec<Value>, id: Value, version: MonitorVersion) {
        let want = if version == MonitorVersion::V3 { 4 } else { 3 };
        if params.len() != want {
            return self.error(
                sid,
                id,
                syntax(format!(
                    "monitor request needs {want} parameters, got {}",
                    params.len()
                )),
            );
        }
        let Some(name) = params[0].as_str() else {
            return self.error(sid, id, syntax("monitor: database name must be a string"));
        };
        let Some(dbi) = self.db_index(name) else {
            let e = err_json(
                ErrorKind::UnknownDatabase,
                format!("monitor request specifies unknown database {name}"),
            );
            return self.error(sid, id, e);
        };
        let key = params[1].to_string();
        if self
            .sessions
            .get(&sid)
            .is_some_and(|s| s.monitors.contains_key(&key))
        {
            return self.error(sid, id, json!("duplicate monitor ID"));
        }
        let entry = &mut self.dbs[dbi];
        let monitor = match Monitor::from_json(&entry.db.schema, &params[2], version) {
            Ok(m) => m,
            Err(e) => return self.error(sid, id, e.to_json()),
        };
        monitor.index_rows(&mut entry.db);
        let entry = &self.dbs[dbi];
        // The reply's result as JSON text: the initial contents are written as text (a large
        // monitor's rows are never a tree).
        let mut result = Vec::new();
        if version == MonitorVersion::V3 {
            let last = params[3].as_str().and_then(|s| Uuid::parse_str(s).ok());
            let found = last.and_then(|l| {
                if l == entry.last_txn && !l.is_nil() {
                    Some(entry.history.len())
                } else {
                    entry
                        .history
                        .iter()
                        .position(|(t, _)| *t == l)
                        .map(|i| i + 1)
                }
            });
            match found {
                Some(from) => {
                    let deltas: Vec<Arc<TxnDelta>> = entry
                        .history
                        .iter()
                        .skip(from)
                        .map(|(_, d)| d.clone())
                        .collect();
                    let merged = merge_deltas(&deltas);
                    let updates = monitor
                        .updates(&entry.db.schema, &merged)
                        .unwrap_or_else(|| json!({}));
                    result = json!([true, entry.last_txn.to_string(), updates])
                        .to_string()
                        .into_bytes();
                }
                None => {
                    result.extend_from_slice(b"[false,");
                    result.extend_from_slice(
                        json!(entry.last_txn.to_string()).to_string().as_bytes(),
                    );
                    result.push(b',');
                    monitor.write_initial(&entry.db, &mut result);
                    result.push(b']');
                }
            }
        } else {
            monitor.write_initial(&entry.db, &mut result);
        }
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.monitors.insert(
                key,
                MonitorEntry {
                    db: dbi,
                    id: params[1].clone(),
                    key: monitor.spec_key(),
                    monitor: Arc::new(monitor),
                },
            );
            self.dbs[dbi].specs = None;
        }
        self.emit(Output::Send(sid, reply_bytes_raw(&id, &result)));
    }

    fn monitor_cond_change(&mut self, sid: SessionId, params: Vec<Value>, id: Value) {
        let [old_id, new_id, reqs] = params.as_slice() else {
            return self.error(
                sid,
                id,
                syntax("monitor_cond_change needs [<monitor-id>, <new-monitor-id>, <requests>]"),
            );
        };
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let Some(mut entry) = s.monitors.remove(&old_id.to_string()) else {
            return self.error(sid, id, json!("unknown monitor"));
        };
        if old_id != new_id && s.monitors.contains_key(&new_id.to_string()) {
            s.monitors.insert(old_id.to_string(), entry);
            return self.error(sid, id, json!("duplicate monitor ID"));
        }
        let db = &mut self.dbs[entry.db];
        // The old spec may be shared by pending updates: change a copy.
        let changed = Arc::make_mut(&mut entry.monitor).change_conditions_text(&mut db.db, reqs);
        db.specs = None;
        let last_txn = db.last_txn;
        match changed {
            Err(e) => {
                s.monitors.insert(old_id.to_string(), entry);
                self.error(sid, id, e.to_json())
            }
            Ok(updates) => {
                entry.id = new_id.clone();
                entry.key = entry.monitor.spec_key();
                let version = entry.monitor.version;
                s.monitors.insert(new_id.to_string(), entry);
                if let Some(u) = updates {
                    let mid = new_id.to_string();
                    let bytes = match version {
                        MonitorVersion::V3 => {
                            let txn = json!(last_txn.to_string()).to_string();
                            notification_bytes_raw("update3", &[mid.as_bytes(), txn.as_bytes(), &u])
                        }
                        _ => notification_bytes_raw("update2", &[mid.as_bytes(), &u]),
                    };
                    self.emit(Output::Send(sid, bytes));
                }
                self.reply(sid, &id, &json!({}));
            }
        }
    }

    fn monitor_cancel(&mut self, sid: SessionId, params: Vec<Value>, id: Value) {
        let [mid] = params.as_slice() else {
            return self.error(sid, id, syntax("monitor_cancel needs [<monitor-id>]"));
        };
        let removed = self
            .sessions
            .get_mut(&sid)
            .and_then(|s| s.monitors.remove(&mid.to_string()));
        match removed {
            Some(m) => {
                self.dbs[m.db].specs = None;
                self.reply(sid, &id, &json!({}))
            }
            None => self.error(sid, id, json!("unknown monitor")),
        }
    }

    fn lock_request(&mut self, sid: SessionId, method: &str, params: Vec<Value>, id: Value) {
        let name = match params.as_slice() {
            [Value::String(n)] if !n.is_empty() => n.clone(),
            _ => return self.error(sid, id, syntax(format!("{method} needs [<lock-name>]"))),
        };
        match method {
            "lock" => {
                let locked = self.locks.lock(sid, &name);
                self.reply(sid, &id, &json!({"locked": locked}));
            }
            "steal" => {
                if let Some(victim) = self.locks.steal(sid, &name) {
                    self.notify(victim, "stolen", &json!([name]));
                }
                self.reply(sid, &id, &json!({"locked": true}));
            }
            _ => {
                let new_owner = self.locks.unlock(sid, &name);
                self.reply(sid, &id, &json!({}));
                if let Some(o) = new_owner {
                    self.notify(o, "locked", &json!([name]));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
