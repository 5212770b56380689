//! The replica's session core: [`Replica`]. See the type's documentation for the call contract.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use hf_ovsdb::Schema;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::cluster::{MemberRejection, ServerInfo, ServerRow, judge};
use super::model::{FeedError, Model, Staged};
use super::stream::{Envelope, for_each_batch, load_table_updates2, parse};
use super::txn::{
    Build, OpsText, PendingTxn, TextTxnBuilder, TxnBuilder, TxnError, TxnId, TxnOutcome, TxnState,
    classify_reply,
};
use super::{Config, Event, MonitorMethod, Stats};
use crate::framing::{FrameError, Framer};
use crate::jsonrpc::Message;

/// The monitor id of the replicated database's monitor.
const MONITOR_ID: &str = "hf-replica";
/// The monitor id of the `_Server` monitor.
const SERVER_MONITOR_ID: &str = "hf-server";
/// From this size on, `update2`/`update3` notifications are applied batch by batch.
const STREAM_UPDATE_MIN: usize = 1 << 20;
/// [`STREAM_UPDATE_MIN`], for tests.
#[cfg(test)]
pub(crate) fn session_stream_min() -> usize {
    STREAM_UPDATE_MIN
}
/// `monitor_cond_since`'s "no previous transaction".
const ZERO_UUID: &str = "00000000-0000-0000-0000-000000000000";

/// What an outstanding request was for.
#[derive(Debug, Clone, PartialEq)]
enum Req {
    Schema,
    ServerMonitor,
    Monitor(MonitorMethod),
    CondChange,
    Txn(TxnId),
    Lock,
    Unlock,
    Echo,
}

/// Where the session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for the schema and the `_Server` row.
    Checking,
    /// The monitor request is out.
    Monitoring,
    /// Synced: updates flow, transactions go out.
    Ready,
}

#[derive(Debug)]
struct Conn {
    remote: usize,
    stage: Stage,
    method: MonitorMethod,
    framer: Framer,
    pending: BTreeMap<u64, Req>,
    last_rx: u64,
    probe_sent: Option<u64>,
    /// When the monitor request went out, and when the first bytes came after it.
    monitor_sent: Option<u64>,
    monitor_first_rx: Option<u64>,
    /// Tables the server's schema has (None until `get_schema` answered).
    server_tables: Option<Vec<String>>,
    server_checked: bool,
}

/// Where dialing is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dial {
    /// Nothing to dial (connected, or dialing).
    None,
    /// Dial this remote once `at` has come.
    At { remote: usize, at: u64 },
    /// `poll_connect` hands this remote out.
    Now(usize),
    /// The shell is dialing this remote.
    InProgress(usize),
}

/// A replica of one database: a typed [`Model`] kept in sync with a server (or with whichever
/// member of a cluster suits it), plus transactions and a lock. Sans-I/O: it never touches a
/// socket or a clock.
///
/// # Call contract
///
/// Time is a monotonic millisecond count chosen by the driver (the tokio shell passes
/// milliseconds since it started; the simulator passes its virtual clock); it must never go
/// backwards.
///
/// - Create with [`Replica::new`]. It immediately wants to dial remote 0.
/// - After every call below, drain the outputs, in this order: [`Replica::poll_close`] (close
///   the current connection: the core has already forgotten it; do not report
///   `handle_disconnected` for it), [`Replica::poll_transmit`] (write the bytes, in order),
///   [`Replica::poll_connect`] (dial that remote, then report [`Replica::handle_connected`] or
///   [`Replica::handle_disconnected`]), [`Replica::poll_event`], and finally
///   [`Replica::poll_timeout`]. Bytes from `poll_transmit` always belong to the connection
///   that exists when they are polled (a new connection starts with an empty queue).
/// - Feed received bytes with [`Replica::handle_bytes`]; report the end of the connection
///   with [`Replica::handle_disconnected`]; call [`Replica::handle_timeout`] once the time
///   [`Replica::poll_timeout`] returned has come (calling it early is harmless).
/// - Mutators ([`Replica::transact`], [`Replica::set_condition`], [`Replica::lock`],
///   [`Replica::steal`], [`Replica::unlock`]) may be called at any time; they queue what they
///   cannot send yet.
/// - Getters ([`Replica::model`], [`Replica::stats`], [`Replica::server`], ...) never change
///   anything.
///
/// # Protocol
///
/// On each connection: `get_schema` and a `monitor_cond` of `_Server`'s `Database` row for the
/// database; when the member is acceptable (see [`MemberRejection`]), the monitor:
/// `monitor_cond_since` with the last transaction id seen, falling back to `monitor_cond` and
/// then `monitor` when the server answers exactly `"unknown method"`. A `monitor_cond_since`
/// reply with `found: true` carries only the missed changes; otherwise the reply is the full
/// row set, which the model turns into the difference from what it holds, so a consumer sees
/// [`Event::Changes`] only for what really changed while it was away.
///
/// Reconnection: a connection that ends moves on to the next remote (in [`Replica::remote_order`]); after a whole round of
/// remotes failed without a sync the replica waits (backoff doubling from
/// [`Config::backoff_min_ms`] to [`Config::backoff_max_ms`]). Inactivity probes: after
/// [`Config::probe_interval_ms`] of silence an `echo` goes out, and after as long again without
/// any byte the connection is dropped.
///
/// Transactions: see [`crate::client::txn`] for retries and the at-most-once rule.
pub struct Replica<M: Model> {
    cfg: Config,
    model: M,
    conn: Option<Conn>,
    dial: Dial,
    /// The order the remotes are dialed in ([`super::remote_order`]).
    order: Vec<usize>,
    /// Remotes tried since the last sync.
    failed_in_round: usize,
    backoff_ms: u64,
    next_req: u64,
    transmit: VecDeque<Vec<u8>>,
    close: Option<String>,
    events: VecDeque<Event<M>>,
    last_txn: Option<String>,
    synced_once: bool,
    /// Set when the conditions changed while no monitor could carry the change: the next
    /// monitor must not ask for a catch-up under the old conditions.
    conditions_dirty: bool,
    server_schema: Arc<Schema>,
    server_row: ServerRow,
    seen_index: i64,
    cid: Option<Uuid>,
    txns: Vec<PendingTxn<M>>,
    next_txn: u64,
    lock_wanted: Option<(String, bool)>,
    lock_held: bool,
    lock_requested: bool,
    /// Counts update messages applied; transactions that failed a `wait` retry once it moves.
    updates_applied: u64,
    stats: Stats,
}

impl<M: Model> std::fmt::Debug for Replica<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("database", &M::DATABASE)
            .field("remote", &self.conn.as_ref().map(|c| c.remote))
            .field("rows", &self.model.row_count())
            .field("stats", &self.stats)
            .finish()
    }
}

impl<M: Model> Replica<M> {
    /// A replica that will dial the first remote of its order first (remote 0 unless
    /// [`Config::shuffle_seed`] shuffles them).
    pub fn new(cfg: Config, now: u64) -> Self {
        let _ = now;
        let backoff_ms = cfg.backoff_min_ms;
        let order = super::remote_order(&cfg);
        Replica {
            cfg,
            model: M::default(),
            conn: None,
            dial: Dial::Now(order.first().copied().unwrap_or(0)),
            order,
            failed_in_round: 0,
            backoff_ms,
            next_req: 1,
            transmit: VecDeque::new(),
            close: None,
            events: VecDeque::new(),
            last_txn: None,
            synced_once: false,
            conditions_dirty: false,
            server_schema: hf_ovsdb::server_db::server_schema(),
            server_row: ServerRow::default(),
            seen_index: 0,
            cid: None,
            txns: Vec::new(),
            next_txn: 1,
            lock_wanted: None,
            lock_held: false,
            lock_requested: false,
            updates_applied: 0,
            stats: Stats::default(),
        }
    }

    // ---- getters ----

    /// The replicated rows.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The remote of the current connection, once it is synced.
    pub fn synced_remote(&self) -> Option<usize> {
        self.conn
            .as_ref()
            .filter(|c| c.stage == Stage::Ready)
            .map(|c| c.remote)
    }

    /// Whether the replica is connected and in sync.
    pub fn is_synced(&self) -> bool {
        self.synced_remote().is_some()
    }

    /// The monitor method of the current connection.
    pub fn method(&self) -> Option<MonitorMethod> {
        self.conn
            .as_ref()
            .filter(|c| c.stage == Stage::Ready)
            .map(|c| c.method)
    }

    /// The `_Server` row of the current member.
    pub fn server(&self) -> Option<ServerInfo> {
        self.server_row.info(&self.server_schema)
    }

    /// The last transaction id the server reported (`monitor_cond_since` only).
    pub fn last_txn_id(&self) -> Option<&str> {
        self.last_txn.as_deref()
    }

    /// The order the remotes are dialed in (a permutation of `0..remotes`; see
    /// [`super::Config::shuffle_seed`]).
    pub fn remote_order(&self) -> &[usize] {
        &self.order
    }

    /// Whether this replica holds its lock.
    pub fn has_lock(&self) -> bool {
        self.lock_held
    }

    /// Transactions not finished yet.
    pub fn pending_txns(&self) -> usize {
        self.txns.len()
    }

    // ---- handle_* ----

    /// The shell connected to `remote` (the one [`Replica::poll_connect`] returned).
    pub fn handle_connected(&mut self, remote: usize, now: u64) {
        if self.dial != Dial::InProgress(remote) && self.dial != Dial::Now(remote) {
            return;
        }
        self.dial = Dial::None;
        self.server_row = ServerRow::default();
        let mut conn = Conn {
            remote,
            stage: Stage::Checking,
            method: MonitorMethod::Since,
            framer: Framer::new(self.cfg.max_message),
            pending: BTreeMap::new(),
            last_rx: now,
            probe_sent: None,
            monitor_sent: None,
            monitor_first_rx: None,
            server_tables: None,
            server_checked: false,
        };
        let db = M::DATABASE;
        self.send(&mut conn, "get_schema", json!([db]), Req::Schema);
        self.send(
            &mut conn,
            "monitor_cond",
            json!(["_Server", SERVER_MONITOR_ID, {"Database": [{
                "where": [["name", "==", db]],
                "columns": ["name", "model", "connected", "leader", "cid", "sid", "index"],
            }]}]),
            Req::ServerMonitor,
        );
        self.conn = Some(conn);
    }

    /// The connection ended (or could not be made).
    pub fn handle_disconnected(&mut self, now: u64) {
        if let Dial::InProgress(remote) | Dial::Now(remote) = self.dial {
            self.dial = Dial::None;
            self.failed(remote, "connection failed".into(), now);
            return;
        }
        if let Some(conn) = self.conn.take() {
            self.lost(conn, "connection closed".into(), now);
        }
    }

    /// Bytes received on the current connection.
    pub fn handle_bytes(&mut self, data: &[u8], now: u64) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        conn.last_rx = now;
        conn.probe_sent = None;
        if conn.stage == Stage::Monitoring && conn.monitor_first_rx.is_none() {
            conn.monitor_first_rx = Some(now);
        }
        self.stats.bytes_received += data.len() as u64;
        conn.framer.push(data);
        loop {
            let (offset, bytes) = match conn.framer.next_raw() {
                None => break,
                Some(Ok(m)) => m,
                Some(Err(e)) => return self.drop_conn(conn, format!("bad stream: {e}"), now),
            };
            let malformed =
                |reason| format!("bad stream: {}", FrameError::Malformed { offset, reason });
            let env = match Envelope::parse(&bytes) {
                Ok(env) => env,
                Err(reason) => return self.drop_conn(conn, malformed(reason), now),
            };
            // The monitor reply is read straight from the bytes; everything else as a tree.
            if let Some(id) = env.reply_id()
                && let Some(Req::Monitor(method)) = conn.pending.get(&id).cloned()
                && let Some(result) = env.result
            {
                conn.pending.remove(&id);
                if let Err(reason) = self.monitor_reply_raw(&mut conn, method, result, now) {
                    return self.drop_conn(conn, reason, now);
                }
                continue;
            }
            // So are large update notifications of the replica's monitor.
            if bytes.len() >= STREAM_UPDATE_MIN
                && conn.stage == Stage::Ready
                && env.id.is_none_or(|i| i.get() == "null")
                && let (Some(m), Some(params)) = (env.method, env.params)
                && (m.get() == "\"update2\"" || m.get() == "\"update3\"")
                && let Some(r) = self.update_raw(m.get() == "\"update3\"", params)
            {
                // The update's bytes go before its rows are copied into the snapshot.
                drop(bytes);
                if let Err(reason) = r.and_then(|staged| self.update_staged(staged)) {
                    return self.drop_conn(conn, reason, now);
                }
                continue;
            }
            let msg = match env.to_value() {
                Ok(v) => v,
                Err(reason) => return self.drop_conn(conn, malformed(reason), now),
            };
            drop(bytes);
            let msg = match Message::from_json(msg) {
                Ok(m) => m,
                Err(e) => return self.drop_conn(conn, e.to_string(), now),
            };
            if let Err(reason) = self.handle_message(&mut conn, msg, now) {
                return self.drop_conn(conn, reason, now);
            }
        }
        self.conn = Some(conn);
        self.flush_txns();
    }

    /// Time has passed: dial when the backoff is over, probe a silent server, retry
    /// transactions.
    pub fn handle_timeout(&mut self, now: u64) {
        if let Dial::At { remote, at } = self.dial
            && now >= at
        {
            self.dial = Dial::Now(remote);
        }
        if let Some(mut conn) = self.conn.take() {
            if let Some(interval) = self.cfg.probe_interval_ms {
                match conn.probe_sent {
                    Some(sent) if now >= sent + interval => {
                        self.stats.probe_timeouts += 1;
                        return self.drop_conn(conn, "inactivity probe timed out".into(), now);
                    }
                    None if now >= conn.last_rx + interval => {
                        conn.probe_sent = Some(now);
                        self.send(&mut conn, "echo", json!([]), Req::Echo);
                    }
                    _ => {}
                }
            }
            self.conn = Some(conn);
        }
        for t in &mut self.txns {
            if let TxnState::WaitRetry { at, .. } = t.state
                && now >= at
            {
                t.state = TxnState::Queued;
            }
        }
        self.flush_txns();
    }

    // ---- mutators ----

    /// Queue a transaction. `build` is called with the replica's view each time the
    /// transaction is (re)sent and returns its operations (without the database name); an empty
    /// list finishes it as [`TxnOutcome::Unchanged`].
    pub fn transact(&mut self, build: TxnBuilder<M>) -> TxnId {
        self.queue_txn(Build::Json(build), None)
    }

    /// [`Replica::transact`] with the operations `build` gives for the model as it is now,
    /// built by the caller already (it looked at them to decide to write): they are sent as
    /// they are when the transaction goes out before any update moves the model (one build
    /// fewer); `build` runs for a later attempt or once the model moved.
    pub fn transact_built(&mut self, ops: Vec<Value>, build: TxnBuilder<M>) -> TxnId {
        let first = Some((self.updates_applied, ops));
        self.queue_txn(Build::Json(build), first)
    }

    /// [`Replica::transact`] for a transaction whose operations the builder writes as JSON
    /// text ([`OpsText`]): sent as written, without a `Value` tree of the whole transaction.
    pub fn transact_text(&mut self, build: TextTxnBuilder<M>) -> TxnId {
        self.queue_txn(Build::Text(build), None)
    }

    fn queue_txn(&mut self, build: Build<M>, first: Option<(u64, Vec<Value>)>) -> TxnId {
        let id = TxnId(self.next_txn);
        self.next_txn += 1;
        self.txns.push(PendingTxn {
            id,
            build,
            attempts: 0,
            state: TxnState::Queued,
            first,
        });
        self.flush_txns();
        id
    }

    /// Replace the condition of `table` (`None`: every row). Sent with `monitor_cond_change`
    /// when the session supports it; rows leaving and entering arrive as changes.
    pub fn set_condition(&mut self, table: &str, condition: Option<Vec<Value>>) {
        let sel = match self.cfg.tables.iter_mut().find(|t| t.name == table) {
            Some(t) => t,
            None => {
                self.cfg.tables.push(super::TableSelect::all(table));
                let Some(t) = self.cfg.tables.last_mut() else {
                    return;
                };
                t
            }
        };
        sel.condition = condition.clone();
        let Some(mut conn) = self.conn.take() else {
            self.conditions_dirty = true;
            return;
        };
        if conn.stage == Stage::Ready && conn.method != MonitorMethod::Plain {
            let cond = condition.unwrap_or_else(|| vec![json!(true)]);
            self.send(
                &mut conn,
                "monitor_cond_change",
                json!([MONITOR_ID, MONITOR_ID, { table: [{"where": cond}] }]),
                Req::CondChange,
            );
        } else {
            self.conditions_dirty = true;
        }
        self.conn = Some(conn);
    }

    /// Whether a condition change is still on its way: not sent yet, or sent and not answered.
    /// Servers send the rows a new condition selects before they answer the change (OVS's
    /// ovsdb-server and holdfast's), so once this is false on a synced replica the model holds
    /// them: `holdfast trace` widens its conditions and waits on this.
    pub fn conditions_pending(&self) -> bool {
        self.conditions_dirty
            || self
                .conn
                .as_ref()
                .is_some_and(|c| c.pending.values().any(|r| matches!(r, Req::CondChange)))
    }

    /// Ask for lock `name` (held until [`Replica::unlock`]; re-requested after reconnects).
    pub fn lock(&mut self, name: &str) {
        self.want_lock(name, false);
    }

    /// Take lock `name` from whoever holds it.
    pub fn steal(&mut self, name: &str) {
        self.want_lock(name, true);
    }

    /// Give the lock up.
    pub fn unlock(&mut self) {
        let Some((name, _)) = self.lock_wanted.take() else {
            return;
        };
        if self.lock_held {
            self.lock_held = false;
            self.events.push_back(Event::LockLost(name.clone()));
        }
        if let Some(mut conn) = self.conn.take() {
            if self.lock_requested {
                self.send(&mut conn, "unlock", json!([name]), Req::Unlock);
            }
            self.conn = Some(conn);
        }
        self.lock_requested = false;
    }

    // ---- poll_* ----

    /// The remote to dial now, if any.
    pub fn poll_connect(&mut self) -> Option<usize> {
        if let Dial::Now(r) = self.dial {
            self.dial = Dial::InProgress(r);
            self.stats.connects += 1;
            return Some(r);
        }
        None
    }

    /// Close the current connection (the reason is for logs).
    pub fn poll_close(&mut self) -> Option<String> {
        self.close.take()
    }

    /// Bytes to write on the current connection.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmit.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event<M>> {
        self.events.pop_front()
    }

    /// When [`Replica::handle_timeout`] wants to be called.
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut at = |x: u64| t = Some(t.map_or(x, |t| t.min(x)));
        if let Dial::At { at: a, .. } = self.dial {
            at(a);
        }
        if let (Some(conn), Some(interval)) = (&self.conn, self.cfg.probe_interval_ms) {
            at(conn.probe_sent.unwrap_or(conn.last_rx) + interval);
        }
        for tx in &self.txns {
            if let TxnState::WaitRetry { at: a, .. } = tx.state {
                at(a);
            }
        }
        t
    }

    // ---- internals ----

    fn want_lock(&mut self, name: &str, steal: bool) {
        if self
            .lock_wanted
            .as_ref()
            .is_some_and(|(n, _)| n != name && self.lock_requested)
        {
            self.unlock();
        }
        self.lock_wanted = Some((name.to_string(), steal));
        if let Some(mut conn) = self.conn.take() {
            if conn.stage == Stage::Ready && (!self.lock_requested || steal) {
                self.request_lock(&mut conn);
            }
            self.conn = Some(conn);
        }
    }

    fn request_lock(&mut self, conn: &mut Conn) {
        if let Some((name, steal)) = self.lock_wanted.clone() {
            let method = if steal { "steal" } else { "lock" };
            self.send(conn, method, json!([name]), Req::Lock);
            self.lock_requested = true;
        }
    }

    fn send(&mut self, conn: &mut Conn, method: &str, params: Value, req: Req) {
        let id = self.next_req;
        self.next_req += 1;
        conn.pending.insert(id, req);
        let bytes = Message::Request {
            method: method.to_string(),
            params: match params {
                Value::Array(a) => a,
                other => vec![other],
            },
            id: json!(id),
        }
        .to_bytes();
        self.stats.bytes_sent += bytes.len() as u64;
        self.transmit.push_back(bytes);
    }

    /// A `transact` request whose operations are JSON text: the same message [`Self::send`]
    /// makes of their trees.
    fn send_transact_text(&mut self, conn: &mut Conn, ops: &OpsText, req: Req) {
        let id = self.next_req;
        self.next_req += 1;
        conn.pending.insert(id, req);
        let mut bytes = Vec::with_capacity(ops.as_bytes().len() + 64);
        bytes.extend_from_slice(b"{\"id\":");
        bytes.extend_from_slice(id.to_string().as_bytes());
        bytes.extend_from_slice(b",\"method\":\"transact\",\"params\":[");
        // Serialising a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut bytes, M::DATABASE);
        bytes.push(b',');
        bytes.extend_from_slice(ops.as_bytes());
        bytes.extend_from_slice(b"]}");
        self.stats.bytes_sent += bytes.len() as u64;
        self.transmit.push_back(bytes);
    }

    /// The remote dialed after `remote` (in [`Replica::remote_order`]).
    fn next_remote(&self, remote: usize) -> usize {
        let n = self.order.len().max(1);
        let pos = self.order.iter().position(|r| *r == remote).unwrap_or(0);
        self.order.get((pos + 1) % n).copied().unwrap_or(0)
    }

    /// A dial of `remote` failed, or a member was rejected before sync.
    fn failed(&mut self, remote: usize, reason: String, now: u64) {
        self.events
            .push_back(Event::Disconnected { remote, reason });
        self.failed_in_round += 1;
        let next = self.next_remote(remote);
        if self.failed_in_round >= self.cfg.remotes.max(1) {
            self.failed_in_round = 0;
            self.dial = Dial::At {
                remote: next,
                at: now + self.backoff_ms,
            };
            self.stats.backoffs += 1;
            self.backoff_ms = (self.backoff_ms * 2).min(self.cfg.backoff_max_ms);
        } else {
            self.dial = Dial::Now(next);
        }
    }

    /// The connection `conn` is gone (already taken out of `self`).
    fn lost(&mut self, conn: Conn, reason: String, now: u64) {
        let was_ready = conn.stage == Stage::Ready;
        self.transmit.clear();
        for req in conn.pending.values() {
            if let Req::Txn(id) = req
                && let Some(t) = self.txns.iter_mut().find(|t| t.id == *id)
            {
                // Outcome unknown: rebuilt from the resynced replica (see txn.rs).
                t.state = TxnState::Queued;
                self.stats.txns_outcome_unknown += 1;
            }
        }
        if self.lock_held {
            self.lock_held = false;
            if let Some((name, _)) = &self.lock_wanted {
                self.events.push_back(Event::LockLost(name.clone()));
            }
        }
        self.lock_requested = false;
        self.server_row = ServerRow::default();
        if was_ready {
            self.events.push_back(Event::Disconnected {
                remote: conn.remote,
                reason,
            });
            self.failed_in_round = 1;
            self.dial = Dial::Now(self.next_remote(conn.remote));
            if self.cfg.remotes <= 1 {
                self.failed_in_round = 0;
            }
        } else {
            self.failed(conn.remote, reason, now);
        }
    }

    /// Drop the connection on the core's own decision.
    fn drop_conn(&mut self, conn: Conn, reason: String, now: u64) {
        self.close = Some(reason.clone());
        self.lost(conn, reason, now);
    }

    fn handle_message(&mut self, conn: &mut Conn, msg: Message, now: u64) -> Result<(), String> {
        match msg {
            Message::Request { method, params, id } => {
                if method == "echo" {
                    let bytes = Message::Reply {
                        result: Value::Array(params),
                        id,
                    }
                    .to_bytes();
                    self.transmit.push_back(bytes);
                }
                Ok(())
            }
            Message::Notification { method, params } => {
                self.handle_notification(conn, &method, &params, now)
            }
            Message::Reply { result, id } => {
                let Some(req) = id.as_u64().and_then(|i| conn.pending.remove(&i)) else {
                    return Ok(());
                };
                self.handle_reply(conn, req, Ok(result), now)
            }
            Message::Error { error, id } => {
                let Some(req) = id.as_u64().and_then(|i| conn.pending.remove(&i)) else {
                    return Ok(());
                };
                self.handle_reply(conn, req, Err(error), now)
            }
        }
    }

    fn handle_reply(
        &mut self,
        conn: &mut Conn,
        req: Req,
        result: Result<Value, Value>,
        now: u64,
    ) -> Result<(), String> {
        match req {
            Req::Echo | Req::Unlock | Req::CondChange => {
                if let (Req::CondChange, Err(e)) = (&req, &result) {
                    self.events
                        .push_back(Event::Warning(format!("monitor_cond_change failed: {e}")));
                }
                Ok(())
            }
            Req::Schema => {
                let tables = result
                    .ok()
                    .and_then(|s| {
                        s.get("tables")
                            .and_then(Value::as_object)
                            .map(|t| t.keys().cloned().collect::<Vec<_>>())
                    })
                    .ok_or_else(|| format!("the server does not serve {}", M::DATABASE))?;
                conn.server_tables = Some(tables);
                self.maybe_monitor(conn, now)
            }
            Req::ServerMonitor => {
                match result {
                    Ok(updates) => {
                        if !self.server_row.apply(&self.server_schema, &updates) {
                            return Err("malformed _Server update".into());
                        }
                    }
                    // A server without `_Server` (not ovsdb-server or holdfast): nothing to
                    // judge, treat it as standalone.
                    Err(_) => {
                        self.server_row = ServerRow::default();
                        conn.server_checked = true;
                        return self.start_monitor(conn, now);
                    }
                }
                if let Err(rejection) = self.judge() {
                    self.stats.members_rejected += 1;
                    return Err(format!("member rejected: {rejection}"));
                }
                conn.server_checked = true;
                self.maybe_monitor(conn, now)
            }
            Req::Monitor(method) => match result {
                Err(e) if is_unknown_method(&e) && method != MonitorMethod::Plain => {
                    let next = match method {
                        MonitorMethod::Since => MonitorMethod::Cond,
                        _ => MonitorMethod::Plain,
                    };
                    self.stats.fallbacks += 1;
                    conn.method = next;
                    conn.monitor_sent = Some(now);
                    conn.monitor_first_rx = None;
                    self.send_monitor(conn);
                    Ok(())
                }
                Err(e) => Err(format!("{} failed: {e}", method.name())),
                Ok(r) => self.monitor_reply(conn, method, r, now),
            },
            Req::Txn(id) => {
                self.txn_reply(id, result, now);
                Ok(())
            }
            Req::Lock => {
                let locked = match result {
                    Ok(r) => r.get("locked").and_then(Value::as_bool).unwrap_or(false),
                    Err(e) => {
                        // E.g. a name that is not an <id> ([A-Za-z_][A-Za-z0-9_]*).
                        self.events
                            .push_back(Event::Warning(format!("lock request refused: {e}")));
                        false
                    }
                };
                if locked {
                    self.lock_acquired();
                }
                Ok(())
            }
        }
    }

    fn judge(&mut self) -> Result<(), MemberRejection> {
        let info = self.server_row.info(&self.server_schema);
        if let Some(i) = &info {
            if i.cid.is_some() && self.cid.is_some() && i.cid != self.cid {
                // The database was recreated: what we know is about another cluster.
                self.seen_index = 0;
                self.last_txn = None;
            }
            if i.cid.is_some() {
                self.cid = i.cid;
            }
        }
        judge(info.as_ref(), self.cfg.leader_only, self.seen_index)?;
        if let Some(index) = info.and_then(|i| i.index) {
            self.seen_index = self.seen_index.max(index);
        }
        Ok(())
    }

    fn maybe_monitor(&mut self, conn: &mut Conn, now: u64) -> Result<(), String> {
        if conn.server_tables.is_some() && conn.server_checked && conn.stage == Stage::Checking {
            return self.start_monitor(conn, now);
        }
        Ok(())
    }

    fn start_monitor(&mut self, conn: &mut Conn, now: u64) -> Result<(), String> {
        conn.stage = Stage::Monitoring;
        conn.monitor_sent = Some(now);
        conn.monitor_first_rx = None;
        if self.conditions_dirty {
            self.last_txn = None;
            self.conditions_dirty = false;
        }
        self.send_monitor(conn);
        Ok(())
    }

    /// The selected tables the server has.
    fn tables(&self, conn: &Conn) -> Vec<super::TableSelect> {
        let mut sel = if self.cfg.tables.is_empty() {
            M::table_names()
                .into_iter()
                .map(super::TableSelect::all)
                .collect()
        } else {
            self.cfg.tables.clone()
        };
        if let Some(have) = &conn.server_tables {
            sel.retain(|t| have.contains(&t.name));
        }
        sel
    }

    fn send_monitor(&mut self, conn: &mut Conn) {
        let tables = self.tables(conn);
        let mut reqs = Map::new();
        for t in &tables {
            let mut r = Map::new();
            if let Some(cols) = &t.columns {
                r.insert("columns".into(), json!(cols));
            }
            if conn.method != MonitorMethod::Plain
                && let Some(c) = &t.condition
            {
                r.insert("where".into(), json!(c));
            }
            let r = Value::Object(r);
            reqs.insert(
                t.name.clone(),
                if conn.method == MonitorMethod::Plain {
                    r
                } else {
                    json!([r])
                },
            );
        }
        let db = M::DATABASE;
        let params = match conn.method {
            MonitorMethod::Since => json!([
                db,
                MONITOR_ID,
                reqs,
                self.last_txn.as_deref().unwrap_or(ZERO_UUID)
            ]),
            _ => json!([db, MONITOR_ID, reqs]),
        };
        let method = conn.method;
        self.send(conn, method.name(), params, Req::Monitor(method));
    }

    fn monitor_reply(
        &mut self,
        conn: &mut Conn,
        method: MonitorMethod,
        result: Value,
        now: u64,
    ) -> Result<(), String> {
        let tables: Vec<String> = self.tables(conn).into_iter().map(|t| t.name).collect();
        let (found, mut updates) = match method {
            MonitorMethod::Since => {
                let Value::Array(mut a) = result else {
                    return Err("malformed monitor_cond_since reply".into());
                };
                let (Some(updates), Some(last), Some(found), None) =
                    (a.pop(), a.pop(), a.pop(), a.pop())
                else {
                    return Err("malformed monitor_cond_since reply".into());
                };
                self.last_txn = last.as_str().map(str::to_string);
                (found.as_bool() == Some(true), updates)
            }
            _ => {
                self.last_txn = None;
                (false, result)
            }
        };
        let rows = count_rows(&updates);
        self.stats.rows_received += rows as u64;
        let applied = if self.loads_directly(found, method) {
            // A first sync into an empty replica: table by table, freeing each table's JSON
            // once it is typed, and keeping no change set (the consumer reads the model).
            let Value::Object(tables) = &mut updates else {
                return Err("malformed monitor reply".into());
            };
            let names: Vec<String> = tables.keys().cloned().collect();
            let mut r = Ok(None);
            for name in names {
                if let Some(rows) = tables.remove(&name) {
                    let mut one = Map::new();
                    one.insert(name, rows);
                    if let Err(e) = self.model.load_updates2(Value::Object(one)) {
                        r = Err(e);
                        break;
                    }
                }
            }
            r
        } else if found || (self.model.row_count() == 0 && method != MonitorMethod::Plain) {
            // Missed changes only, or a first sync whose changes the consumer wants.
            self.model.apply_updates2(&updates).map(Some)
        } else {
            let full = match method {
                MonitorMethod::Plain => rows_of_updates1(&updates),
                _ => rows_of_updates2(&updates),
            }
            .ok_or("malformed monitor reply")?;
            self.model
                .updates_to(&full, &tables)
                .and_then(|u| self.model.apply_updates2(&u))
                .map(Some)
        };
        drop(updates);
        let delta = match applied {
            Ok(d) => d,
            Err(e) => {
                self.last_txn = None;
                return Err(format!("cannot apply the monitor reply: {e}"));
            }
        };
        self.synced(conn, method, found, rows, delta, now);
        Ok(())
    }

    /// An `update2`/`update3` notification's params as raw text, typed batch by batch with
    /// [`Model::stage_updates2_batches`] (applied by [`Replica::update_staged`]). `None` when
    /// they are not the replica monitor's (or not shaped as expected): the tree path then
    /// handles, or reports, them.
    fn update_raw(
        &mut self,
        v3: bool,
        params: &serde_json::value::RawValue,
    ) -> Option<Result<Staged<M::Delta>, String>> {
        let parts: Vec<&serde_json::value::RawValue> = serde_json::from_str(params.get()).ok()?;
        let (id, last, updates) = match (v3, &parts[..]) {
            (true, [i, l, u]) => (*i, Some(*l), *u),
            (false, [i, u]) => (*i, None, *u),
            _ => return None,
        };
        if parse(id).ok()? != MONITOR_ID {
            return None;
        }
        if let Some(l) = last {
            self.last_txn = parse(l).ok()?.as_str().map(str::to_string);
        }
        self.stats.updates_received += 1;
        let mut rows = 0;
        let r = self.model.stage_updates2_batches(&mut |sink| {
            rows = for_each_batch(updates.get(), sink)?;
            Ok(rows)
        });
        self.stats.rows_received += rows as u64;
        Some(r.map_err(|e| {
            // The replica no longer matches the server: start over with a full resync.
            self.last_txn = None;
            match e {
                FeedError::Json(e) => format!("malformed update: {e}"),
                FeedError::Model(e) => format!("cannot apply an update: {e}"),
            }
        }))
    }

    /// Applies what [`Replica::update_raw`] staged (once the update's bytes are freed) and
    /// reports its changes.
    fn update_staged(&mut self, staged: Staged<M::Delta>) -> Result<(), String> {
        let delta = match staged {
            Staged::Applied(d) => d,
            Staged::Pending(d) => {
                if let Err(e) = self.model.apply_staged(&d) {
                    self.last_txn = None;
                    return Err(format!("cannot apply an update: {e}"));
                }
                d
            }
        };
        self.updates_applied += 1;
        if M::delta_len(&delta) > 0 {
            self.events.push_back(Event::Changes(delta));
        }
        Ok(())
    }

    /// Whether a reply that is the full row set goes straight into the model, keeping no
    /// change set: a first sync into an empty replica whose changes nobody asked for.
    fn loads_directly(&self, found: bool, method: MonitorMethod) -> bool {
        !found
            && self.model.row_count() == 0
            && method != MonitorMethod::Plain
            && !self.cfg.initial_changes
    }

    /// The monitor reply as raw text: streamed row by row into the model when
    /// [`Replica::loads_directly`], otherwise parsed and handed to [`Replica::monitor_reply`].
    fn monitor_reply_raw(
        &mut self,
        conn: &mut Conn,
        method: MonitorMethod,
        result: &serde_json::value::RawValue,
        now: u64,
    ) -> Result<(), String> {
        let malformed = |e: String| format!("malformed {} reply: {e}", method.name());
        let (found, updates) = match method {
            MonitorMethod::Since => {
                let parts: Vec<&serde_json::value::RawValue> =
                    serde_json::from_str(result.get()).map_err(|e| malformed(e.to_string()))?;
                let [found, last, updates] = parts[..] else {
                    return Err("malformed monitor_cond_since reply".into());
                };
                let found = parse(found).map_err(malformed)?;
                if found.as_bool() == Some(true) || !self.loads_directly(false, method) {
                    let v = parse(result).map_err(malformed)?;
                    return self.monitor_reply(conn, method, v, now);
                }
                self.last_txn = parse(last).map_err(malformed)?.as_str().map(str::to_string);
                (false, updates)
            }
            _ => {
                if !self.loads_directly(false, method) {
                    let v = parse(result).map_err(malformed)?;
                    return self.monitor_reply(conn, method, v, now);
                }
                self.last_txn = None;
                (false, result)
            }
        };
        let rows = match load_table_updates2(&mut self.model, updates.get()) {
            Ok(n) => n,
            Err(e) => {
                // All or nothing: the replica was empty; empty it again.
                self.model = M::default();
                self.last_txn = None;
                return Err(match e {
                    FeedError::Json(e) => format!("malformed monitor reply: {e}"),
                    FeedError::Model(e) => format!("cannot apply the monitor reply: {e}"),
                });
            }
        };
        self.stats.rows_received += rows as u64;
        self.synced(conn, method, found, rows, None, now);
        Ok(())
    }

    /// The monitor reply is in the model: the session is synced.
    fn synced(
        &mut self,
        conn: &mut Conn,
        method: MonitorMethod,
        found: bool,
        rows: usize,
        delta: Option<M::Delta>,
        now: u64,
    ) {
        conn.stage = Stage::Ready;
        let first = conn.monitor_first_rx.unwrap_or(now);
        self.stats.last_sync_wait_ms = first.saturating_sub(conn.monitor_sent.unwrap_or(first));
        self.stats.last_sync_receive_ms = now.saturating_sub(first);
        self.failed_in_round = 0;
        self.backoff_ms = self.cfg.backoff_min_ms;
        self.updates_applied += 1;
        self.events.push_back(Event::Connected {
            remote: conn.remote,
            method,
        });
        if let Some(delta) = delta
            && M::delta_len(&delta) > 0
        {
            self.events.push_back(Event::Changes(delta));
        }
        self.events.push_back(Event::Resynced {
            full: !found,
            rows,
            initial: !self.synced_once,
        });
        self.synced_once = true;
        self.stats.syncs += 1;
        if self.lock_wanted.is_some() {
            self.request_lock(conn);
        }
        if self.conditions_dirty && method != MonitorMethod::Plain {
            // Conditions changed while the monitor request was on its way.
            self.conditions_dirty = false;
            let mut reqs = Map::new();
            for t in self.tables(conn) {
                let cond = t.condition.unwrap_or_else(|| vec![json!(true)]);
                reqs.insert(t.name, json!([{ "where": cond }]));
            }
            self.send(
                conn,
                "monitor_cond_change",
                json!([MONITOR_ID, MONITOR_ID, reqs]),
                Req::CondChange,
            );
        }
        // Transactions go out from `flush_txns` once the connection is back in `self`.
        for t in &mut self.txns {
            if let TxnState::WaitRetry { .. } = t.state {
                t.state = TxnState::Queued;
            }
        }
    }

    fn handle_notification(
        &mut self,
        conn: &mut Conn,
        method: &str,
        params: &[Value],
        _now: u64,
    ) -> Result<(), String> {
        match method {
            "update" | "update2" | "update3" => {
                let (id, updates) = match (method, params) {
                    ("update3", [id, last, u]) => {
                        if id == MONITOR_ID {
                            self.last_txn = last.as_str().map(str::to_string);
                        }
                        (id, u)
                    }
                    (_, [id, u]) => (id, u),
                    _ => return Err(format!("malformed {method} notification")),
                };
                if id == SERVER_MONITOR_ID {
                    if !self.server_row.apply(&self.server_schema, updates) {
                        return Err("malformed _Server update".into());
                    }
                    return self.judge().map_err(|r| {
                        self.stats.members_rejected += 1;
                        format!("member no longer suitable: {r}")
                    });
                }
                if id != MONITOR_ID || conn.stage != Stage::Ready {
                    return Ok(());
                }
                let rows = count_rows(updates);
                self.stats.rows_received += rows as u64;
                self.stats.updates_received += 1;
                let r = if method == "update" {
                    rows_of_updates1(updates)
                        .ok_or_else(|| "malformed update".to_string())
                        .and_then(|full| {
                            self.model
                                .updates_to(&full, &[])
                                .and_then(|u| self.model.apply_updates2(&u))
                                .map_err(|e| e.to_string())
                        })
                } else {
                    self.model
                        .apply_updates2(updates)
                        .map_err(|e| e.to_string())
                };
                match r {
                    Ok(delta) => {
                        self.updates_applied += 1;
                        if M::delta_len(&delta) > 0 {
                            self.events.push_back(Event::Changes(delta));
                        }
                        Ok(())
                    }
                    Err(e) => {
                        // The replica no longer matches the server: start over with a full
                        // resync.
                        self.last_txn = None;
                        Err(format!("cannot apply an update: {e}"))
                    }
                }
            }
            "locked" => {
                if self.lock_name_is(params) {
                    self.lock_acquired();
                }
                Ok(())
            }
            "stolen" => {
                if self.lock_name_is(params) && self.lock_held {
                    self.lock_held = false;
                    if let Some((name, _)) = &self.lock_wanted {
                        self.events.push_back(Event::LockLost(name.clone()));
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn lock_name_is(&self, params: &[Value]) -> bool {
        matches!((params.first(), &self.lock_wanted), (Some(Value::String(n)), Some((w, _))) if n == w)
    }

    fn lock_acquired(&mut self) {
        if !self.lock_held
            && let Some((name, _)) = &self.lock_wanted
        {
            self.lock_held = true;
            self.events.push_back(Event::LockAcquired(name.clone()));
        }
    }

    fn txn_reply(&mut self, id: TxnId, result: Result<Value, Value>, now: u64) {
        let Some(i) = self.txns.iter().position(|t| t.id == id) else {
            return;
        };
        let outcome = match classify_reply(result) {
            Ok(results) => {
                self.stats.txns_committed += 1;
                TxnOutcome::Committed(results)
            }
            Err(TxnError::Conflict(_)) if self.txns[i].attempts < self.cfg.max_txn_attempts => {
                self.stats.txns_retried += 1;
                let sent_at = match self.txns[i].state {
                    TxnState::Sent { updates } => updates,
                    _ => self.updates_applied,
                };
                self.txns[i].state = TxnState::WaitRetry {
                    updates: sent_at,
                    at: now + self.cfg.txn_retry_ms,
                };
                return;
            }
            Err(e) => {
                self.stats.txns_failed += 1;
                TxnOutcome::Failed(e)
            }
        };
        let t = self.txns.remove(i);
        self.events.push_back(Event::TxnDone {
            id: t.id,
            outcome,
            attempts: t.attempts,
        });
    }

    /// Send every queued transaction (and those whose retry condition is met) when synced.
    fn flush_txns(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if conn.stage == Stage::Ready {
            let mut i = 0;
            while i < self.txns.len() {
                let due = match self.txns[i].state {
                    TxnState::Queued => true,
                    TxnState::WaitRetry { updates, .. } => self.updates_applied > updates,
                    TxnState::Sent { .. } => false,
                };
                if !due {
                    i += 1;
                    continue;
                }
                let first = self.txns[i]
                    .first
                    .take()
                    .filter(|(at, _)| *at == self.updates_applied);
                let ops = match (&mut self.txns[i].build, first) {
                    (Build::Json(_), Some((_, ops))) => Ok(ops),
                    (Build::Json(b), None) => Ok(b(&self.model)),
                    (Build::Text(b), _) => Err(b(&self.model)),
                };
                self.txns[i].attempts += 1;
                let empty = match &ops {
                    Ok(ops) => ops.is_empty(),
                    Err(text) => text.is_empty(),
                };
                if empty {
                    let t = self.txns.remove(i);
                    self.events.push_back(Event::TxnDone {
                        id: t.id,
                        outcome: TxnOutcome::Unchanged,
                        attempts: t.attempts,
                    });
                    continue;
                }
                let id = self.txns[i].id;
                self.txns[i].state = TxnState::Sent {
                    updates: self.updates_applied,
                };
                self.stats.txns_sent += 1;
                match ops {
                    Ok(ops) => {
                        let mut params = Vec::with_capacity(ops.len() + 1);
                        params.push(json!(M::DATABASE));
                        params.extend(ops);
                        self.send(&mut conn, "transact", Value::Array(params), Req::Txn(id));
                    }
                    Err(text) => self.send_transact_text(&mut conn, &text, Req::Txn(id)),
                }
                i += 1;
            }
        }
        self.conn = Some(conn);
    }
}

/// Whether an error reply is exactly ovsdb-server's "unknown method".
fn is_unknown_method(e: &Value) -> bool {
    e == "unknown method" || e.get("error").is_some_and(|x| x == "unknown method")
}

/// Number of row entries in a `<table-updates>` or `<table-updates2>`.
pub(crate) fn count_rows(updates: &Value) -> usize {
    updates.as_object().map_or(0, |t| {
        t.values().filter_map(Value::as_object).map(Map::len).sum()
    })
}

/// `{table: {uuid: row or null}}` from a `<table-updates>` (`monitor`): `new` or null.
fn rows_of_updates1(updates: &Value) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (t, rows) in updates.as_object()? {
        let mut m = Map::new();
        for (u, r) in rows.as_object()? {
            m.insert(
                u.clone(),
                r.as_object()?.get("new").cloned().unwrap_or(Value::Null),
            );
        }
        out.insert(t.clone(), Value::Object(m));
    }
    Some(out)
}

/// `{table: {uuid: row}}` from a full `<table-updates2>` (`initial` or `insert` rows).
fn rows_of_updates2(updates: &Value) -> Option<Map<String, Value>> {
    let mut out = Map::new();
    for (t, rows) in updates.as_object()? {
        let mut m = Map::new();
        for (u, r) in rows.as_object()? {
            let r = r.as_object()?;
            let row = r.get("initial").or_else(|| r.get("insert"))?;
            m.insert(u.clone(), row.clone());
        }
        out.insert(t.clone(), Value::Object(m));
    }
    Some(out)
}
