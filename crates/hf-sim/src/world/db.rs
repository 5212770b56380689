//! The world's database: one in-memory [`hf_ovsdb_net::server::Core`] serving OVN_Northbound and
//! OVN_Southbound (holdfast's `schemas/`, through `hf_model`), on the virtual clock.
//!
//! # What it does
//!
//! - Routes the server's output to per-session inboxes; every client inside the world (northd's
//!   replicas, each controller's SB replica) is a [`DbClient`] pumped by [`Db::pump`], with
//!   messages delivered at once (no simulated latency on the control plane).
//! - The world's own writer session ([`Db::transact`]) for the NB builders, answered
//!   synchronously.
//! - External sessions for the sandbox ([`Db::external_connect`] and friends): raw JSON-RPC
//!   bytes in (framed with [`hf_ovsdb_net::framing::Framer`]), raw bytes out.
//! - Dump and reload with new UUIDs ([`Db::dump_ops`]) for `rebuild_databases`, and loading a
//!   southbound database file (e.g. real ovn-northd's, from `ovsdb-client backup`).
//!
//! # What it does not do
//!
//! No storage (nothing is written to disk), no sockets, no clustering.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use hf_ovsdb::Database;
use hf_ovsdb_net::client::{Model, Replica};
use hf_ovsdb_net::framing::Framer;
use hf_ovsdb_net::server::{self, Core, Output, SessionId};
use serde_json::{Value, json};

/// NB's database name.
pub const NB: &str = "OVN_Northbound";
/// SB's database name.
pub const SB: &str = "OVN_Southbound";

/// Wall-clock milliseconds at the simulator's time origin (file records, `*_timestamp`).
pub const WALL_EPOCH_MS: u64 = 1_767_225_600_000;

/// The server's notion of `now`.
pub fn server_now(now: Duration) -> server::Now {
    server::Now {
        mono_ms: now.as_millis() as u64,
        wall_ms: WALL_EPOCH_MS + now.as_millis() as u64,
    }
}

/// A client of the database inside the world: the session half of a replica.
pub trait DbClient {
    /// A dial request (remote index), if the client wants to connect.
    fn poll_connect(&mut self) -> Option<usize>;
    /// The session is up.
    fn handle_connected(&mut self, remote: usize, now: Duration);
    /// Bytes from the server.
    fn handle_bytes(&mut self, data: &[u8], now: Duration);
    /// The session ended.
    fn handle_disconnected(&mut self, now: Duration);
    /// Bytes to the server (one JSON message each).
    fn poll_transmit(&mut self) -> Option<Vec<u8>>;
    /// The client wants its session closed.
    fn poll_close(&mut self) -> bool {
        false
    }
}

impl<M: Model> DbClient for Replica<M> {
    fn poll_connect(&mut self) -> Option<usize> {
        Replica::poll_connect(self)
    }
    fn handle_connected(&mut self, remote: usize, now: Duration) {
        Replica::handle_connected(self, remote, now.as_millis() as u64)
    }
    fn handle_bytes(&mut self, data: &[u8], now: Duration) {
        Replica::handle_bytes(self, data, now.as_millis() as u64)
    }
    fn handle_disconnected(&mut self, now: Duration) {
        Replica::handle_disconnected(self, now.as_millis() as u64)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        Replica::poll_transmit(self)
    }
    fn poll_close(&mut self) -> bool {
        Replica::poll_close(self).is_some()
    }
}

/// A client's session with the world's database.
#[derive(Debug, Default)]
pub struct DbLink {
    sid: Option<SessionId>,
}

/// The longest JSON-RPC message an external session may send: `holdfast db`'s default
/// `--max-message`, so an outside client cannot make the sandbox buffer more.
pub const EXTERNAL_MAX_MESSAGE: usize = 64 << 20;

impl DbLink {
    /// A link with no session yet.
    pub fn new() -> DbLink {
        DbLink::default()
    }
}

#[derive(Debug)]
struct External {
    framer: Framer,
    out: Vec<u8>,
}

/// The in-memory server and its sessions' inboxes.
pub struct Db {
    core: Core,
    seed: u64,
    inbox: BTreeMap<SessionId, VecDeque<Vec<u8>>>,
    /// Sessions the server closed (the client learns it on its next pump).
    closed: BTreeSet<SessionId>,
    external: BTreeMap<SessionId, External>,
    writer: SessionId,
    next_id: u64,
    /// Incremented each time the databases are recreated: older links are stale.
    epoch: u64,
    log: Vec<String>,
    /// A clock for [`Db::server_busy`] (the simulator itself reads none; a benchmark sets it).
    stopwatch: Option<fn() -> Duration>,
    /// The server's time in [`Db::pump`] (requests handled, output routed), by `stopwatch`.
    server_busy: Duration,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("core", &self.core)
            .field("epoch", &self.epoch)
            .finish()
    }
}

fn fresh_core(seed: u64, sb: Option<Database>) -> Result<Core, String> {
    let mut core = Core::new(
        server::Config {
            probe_interval_ms: None,
            ..server::Config::default()
        },
        seed,
    );
    core.add_database(
        Database::new(Arc::clone(hf_model::nb::schema()), seed ^ 0x4e42),
        None,
        vec![],
    )?;
    let sb = sb.unwrap_or_else(|| Database::new(Arc::clone(hf_model::sb::schema()), seed ^ 0x5342));
    core.add_database(sb, None, vec![])?;
    Ok(core)
}

/// Does a transact reply say every operation succeeded?
pub fn txn_ok(reply: &Value) -> Result<(), String> {
    if !reply["error"].is_null() {
        return Err(format!("transaction failed: {}", reply["error"]));
    }
    match reply["result"].as_array() {
        None => Err(format!("transaction reply without result: {reply}")),
        Some(r) => match r
            .iter()
            .find(|o| o.get("error").is_some_and(|e| !e.is_null()))
        {
            Some(e) => Err(format!("transaction failed: {e}")),
            None => Ok(()),
        },
    }
}

impl Db {
    /// NB empty but an `NB_Global` row; SB empty but an `SB_Global` row (or `sb`, a loaded
    /// southbound database, as is).
    pub fn new(seed: u64, sb: Option<Database>, now: Duration) -> Result<Db, String> {
        let static_sb = sb.is_some();
        let mut core = fresh_core(seed, sb)?;
        let writer = core.connect(server_now(now));
        let mut db = Db {
            core,
            seed,
            inbox: BTreeMap::new(),
            closed: BTreeSet::new(),
            external: BTreeMap::new(),
            writer,
            next_id: 0,
            epoch: 0,
            log: Vec::new(),
            stopwatch: None,
            server_busy: Duration::ZERO,
        };
        db.transact(
            NB,
            vec![json!({"op": "insert", "table": "NB_Global", "row": {}})],
            now,
        )?;
        if !static_sb {
            db.transact(
                SB,
                vec![json!({"op": "insert", "table": "SB_Global", "row": {}})],
                now,
            )?;
        }
        Ok(db)
    }

    /// The server core (read access: its databases).
    pub fn core(&self) -> &Core {
        &self.core
    }

    /// A served database.
    pub fn database(&self, name: &str) -> Option<&Database> {
        self.core.database(name)
    }

    /// How many times the databases were recreated.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Log lines of the server.
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    fn route(&mut self) {
        let out: Vec<Output> = self.core.poll_output().collect();
        for o in out {
            match o {
                Output::Send(s, b) => {
                    if let Some(e) = self.external.get_mut(&s) {
                        e.out.extend_from_slice(&b);
                    } else if s != self.writer {
                        self.inbox.entry(s).or_default().push_back(b);
                    }
                }
                Output::Close(s, why) => {
                    self.log.push(format!("session {s} closed: {why}"));
                    self.closed.insert(s);
                    self.inbox.remove(&s);
                }
                Output::Log(l) => self.log.push(l),
            }
        }
    }

    /// One transaction on `db` through the world's writer session, answered at once.
    pub fn transact(&mut self, db: &str, ops: Vec<Value>, now: Duration) -> Result<Value, String> {
        self.next_id += 1;
        let id = format!("world-{}", self.next_id);
        let mut params = vec![json!(db)];
        params.extend(ops);
        self.core.handle(
            self.writer,
            json!({"method": "transact", "params": params, "id": id}),
            server_now(now),
        );
        let mut reply = None;
        let out: Vec<Output> = self.core.poll_output().collect();
        for o in out {
            match o {
                Output::Send(s, b) if s == self.writer => {
                    let v: Value = serde_json::from_slice(&b)
                        .map_err(|e| format!("unparsable reply to the world's transaction: {e}"))?;
                    if v["id"] == json!(id) {
                        reply = Some(v);
                    }
                }
                Output::Send(s, b) => {
                    if let Some(e) = self.external.get_mut(&s) {
                        e.out.extend_from_slice(&b);
                    } else {
                        self.inbox.entry(s).or_default().push_back(b);
                    }
                }
                Output::Close(s, why) => {
                    self.log.push(format!("session {s} closed: {why}"));
                    self.closed.insert(s);
                }
                Output::Log(l) => self.log.push(l),
            }
        }
        let reply = reply.ok_or_else(|| format!("no reply to the world's transaction on {db}"))?;
        txn_ok(&reply)?;
        Ok(reply)
    }

    /// Has [`Db::pump`] add the server's share of its work (handling the client's requests,
    /// making and routing every session's output) to [`Db::server_busy`], read with `clock`
    /// (a benchmark's monotonic clock): what a client's step costs the server, told apart from
    /// what it costs the client.
    pub fn set_stopwatch(&mut self, clock: fn() -> Duration) {
        self.stopwatch = Some(clock);
    }

    /// The server's time in [`Db::pump`] since the stopwatch was set (zero without one).
    pub fn server_busy(&self) -> Duration {
        self.server_busy
    }

    /// Moves one client's messages both ways; true when something moved.
    pub fn pump(&mut self, c: &mut dyn DbClient, link: &mut DbLink, now: Duration) -> bool {
        let mut moved = false;
        if c.poll_close()
            && let Some(s) = link.sid.take()
        {
            self.core.disconnect(s);
            self.inbox.remove(&s);
            moved = true;
        }
        if let Some(s) = link.sid
            && self.closed.remove(&s)
        {
            link.sid = None;
            c.handle_disconnected(now);
            moved = true;
        }
        if let Some(remote) = c.poll_connect() {
            moved = true;
            let sid = self.core.connect(server_now(now));
            link.sid = Some(sid);
            c.handle_connected(remote, now);
        }
        let mut requests = Vec::new();
        while let Some(b) = c.poll_transmit() {
            moved = true;
            if link.sid.is_some() {
                requests.push(b);
            }
        }
        let started = self.stopwatch.map(|clock| clock());
        if let Some(s) = link.sid {
            for b in requests {
                match serde_json::from_slice::<Value>(&b) {
                    Ok(v) => self.core.handle(s, v, server_now(now)),
                    Err(e) => self
                        .log
                        .push(format!("session {s}: client sent unparsable JSON: {e}")),
                }
            }
        }
        self.route();
        if let (Some(clock), Some(t)) = (self.stopwatch, started) {
            self.server_busy += clock().saturating_sub(t);
        }
        if let Some(s) = link.sid
            && let Some(q) = self.inbox.get_mut(&s)
        {
            while let Some(b) = q.pop_front() {
                moved = true;
                c.handle_bytes(&b, now);
            }
        }
        moved
    }

    /// Drops a client's session (the client is going away).
    pub fn drop_link(&mut self, link: &mut DbLink) {
        if let Some(s) = link.sid.take() {
            self.core.disconnect(s);
            self.inbox.remove(&s);
            self.route();
        }
    }

    /// When the server's timers are due.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.core.poll_timeout().map(Duration::from_millis)
    }

    /// Runs the server's timers.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.core.tick(server_now(now));
        self.route();
    }

    /// Opens an external session (the sandbox's bridge to a TCP connection); a message longer
    /// than [`EXTERNAL_MAX_MESSAGE`] closes it with a named error.
    pub fn external_connect(&mut self, now: Duration) -> SessionId {
        let sid = self.core.connect(server_now(now));
        self.external.insert(
            sid,
            External {
                framer: Framer::new(EXTERNAL_MAX_MESSAGE),
                out: Vec::new(),
            },
        );
        sid
    }

    /// Bytes from an external session. A framing error closes the session and says why.
    pub fn external_input(
        &mut self,
        sid: SessionId,
        data: &[u8],
        now: Duration,
    ) -> Result<(), String> {
        let Some(e) = self.external.get_mut(&sid) else {
            return Err(format!("session {sid} is not connected"));
        };
        e.framer.push(data);
        let mut msgs = Vec::new();
        let mut err = None;
        while let Some(m) = e.framer.next_message() {
            match m {
                Ok(v) => msgs.push(v),
                Err(x) => {
                    err = Some(format!("session {sid}: {x}"));
                    break;
                }
            }
        }
        for m in msgs {
            self.core.handle(sid, m, server_now(now));
        }
        self.route();
        if let Some(x) = err {
            self.external_disconnect(sid);
            return Err(x);
        }
        Ok(())
    }

    /// Bytes for an external session, if any; `None` also for a session the server closed
    /// (see [`Db::external_is_closed`]).
    pub fn external_poll_output(&mut self, sid: SessionId) -> Option<Vec<u8>> {
        let e = self.external.get_mut(&sid)?;
        if e.out.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut e.out))
        }
    }

    /// Whether the server closed this external session (or it never existed).
    pub fn external_is_closed(&self, sid: SessionId) -> bool {
        !self.external.contains_key(&sid) || self.closed.contains(&sid)
    }

    /// An external session ended.
    pub fn external_disconnect(&mut self, sid: SessionId) {
        if self.external.remove(&sid).is_some() {
            self.core.disconnect(sid);
            self.closed.remove(&sid);
            self.route();
        }
    }

    /// Every row of every table of `db` as insert operations with fresh names for UUIDs
    /// (references rewritten to `named-uuid`), so executing them recreates the same contents
    /// with new UUIDs.
    pub fn dump_ops(&mut self, db: &str, now: Duration) -> Result<Vec<Value>, String> {
        let tables: Vec<String> = self
            .core
            .database(db)
            .ok_or_else(|| format!("no database {db}"))?
            .schema
            .tables
            .iter()
            .map(|t| t.name.clone())
            .collect();
        let selects: Vec<Value> = tables
            .iter()
            .map(|t| json!({"op": "select", "table": t, "where": []}))
            .collect();
        let reply = self.transact(db, selects, now)?;
        let mut ops = Vec::new();
        for (t, res) in tables
            .iter()
            .zip(reply["result"].as_array().into_iter().flatten())
        {
            for row in res["rows"].as_array().into_iter().flatten() {
                let Some(obj) = row.as_object() else { continue };
                let uuid = obj
                    .get("_uuid")
                    .and_then(|u| u.get(1))
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{db}.{t}: a row without _uuid"))?;
                let mut r = serde_json::Map::new();
                for (k, v) in obj {
                    if k.starts_with('_') {
                        continue;
                    }
                    r.insert(k.clone(), rename_uuids(v));
                }
                ops.push(
                    json!({"op": "insert", "table": t, "uuid-name": uuid_name(uuid), "row": r}),
                );
            }
        }
        Ok(ops)
    }

    /// Recreates both databases empty (new UUIDs from a new seed), disconnecting every
    /// session; the clients reconnect and resync. `sb` replaces SB's contents when given.
    pub fn recreate(&mut self, sb: Option<Database>, now: Duration) -> Result<(), String> {
        self.epoch += 1;
        let static_sb = sb.is_some();
        let seed = self.seed ^ self.epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut core = fresh_core(seed, sb)?;
        // Every internal session is gone: their clients see a disconnect on their next pump.
        let old: Vec<SessionId> = self.inbox.keys().copied().collect();
        self.closed.extend(old);
        self.inbox.clear();
        for sid in std::mem::take(&mut self.external).into_keys() {
            self.closed.insert(sid);
        }
        // Session ids must not collide with the old core's: skip past them.
        let max_old = self
            .closed
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.writer);
        let mut writer = core.connect(server_now(now));
        while writer <= max_old {
            core.disconnect(writer);
            writer = core.connect(server_now(now));
        }
        self.core = core;
        self.writer = writer;
        self.transact(
            NB,
            vec![json!({"op": "insert", "table": "NB_Global", "row": {}})],
            now,
        )?;
        if !static_sb {
            self.transact(
                SB,
                vec![json!({"op": "insert", "table": "SB_Global", "row": {}})],
                now,
            )?;
        }
        Ok(())
    }
}

fn uuid_name(uuid: &str) -> String {
    format!("u_{}", uuid.replace('-', "_"))
}

fn rename_uuids(v: &Value) -> Value {
    match v {
        Value::Array(a) if a.len() == 2 && a[0] == "uuid" => match a[1].as_str() {
            Some(u) => json!(["named-uuid", uuid_name(u)]),
            None => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(rename_uuids).collect()),
        _ => v.clone(),
    }
}

/// Loads an OVSDB database file (the format `ovsdb-tool create` and `ovsdb-client backup`
/// write) into a database with holdfast's schema named in the file (`OVN_Southbound` or
/// `OVN_Northbound`): every record applied in order.
pub fn load_database_file(bytes: &[u8]) -> Result<Database, String> {
    use hf_ovsdb::file::{RecordReader, record_delta};
    let mut reader = RecordReader::new(bytes);
    let first = match reader.next() {
        Some(Ok(r)) => r,
        Some(Err(e)) => return Err(format!("cannot read the schema record: {e}")),
        None => return Err("the database file is empty".into()),
    };
    let name = first.json["name"].as_str().unwrap_or_default();
    let schema = match name {
        SB => Arc::clone(hf_model::sb::schema()),
        NB => Arc::clone(hf_model::nb::schema()),
        other => {
            return Err(format!(
                "database file of schema {other:?}: expected {SB} or {NB}"
            ));
        }
    };
    let mut db = Database::new(schema, 0x5eed);
    for (n, rec) in reader.enumerate() {
        let r = rec.map_err(|e| format!("record {}: {e}", n + 2))?;
        let delta = record_delta(&mut db, &r.json)
            .map_err(|e| format!("record {} at byte {}: {e}", n + 2, r.offset))?;
        db.apply(&delta);
    }
    Ok(db)
}
