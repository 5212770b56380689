//! The tokio shell around [`Core`]: listeners (`ptcp:`, `pssl:`, `punix:`), one reader and one
//! writer task per connection, a timer task, and backpressure. `pssl:` connections go through
//! [`crate::tls::accept`] (mutual authentication, refusals logged) before they reach the core.
//!
//! Remotes can be added and removed while the server runs ([`Server::add_remote`],
//! [`Server::remove_remote`]: ovsdb-server's `add-remote`/`remove-remote` and `db:` remotes);
//! removing one closes its sessions, as ovsdb-server does. Each remote may carry its own
//! inactivity probe ([`Server::set_remote_probe`]).
//!
//! Backpressure: each connection counts the bytes queued for it. Above `max_backlog / 2` the
//! server stops reading that client's requests until its queue drains (a client that sends but
//! never reads cannot make the server buffer replies without bound); above `max_backlog` (monitor
//! updates caused by other clients keep coming) the connection is dropped, as a client that far
//! behind must resync anyway.
//!
//! Outside the core's lock: monitor updates are encoded by each connection's writer (a large
//! one on a blocking thread, in parts of 1 MB, each written as soon as it is made, so the
//! first bytes go out while the rest is encoded; sessions with the same monitor spec share one
//! encoding, made whole), and
//! compactions write and sync their new file on a blocking thread, then swap it in under the
//! lock (see [`crate::server`]). Each commit's file record is encoded and appended by one
//! ordered writer task on a blocking thread; the transaction's reply, held by the core, goes
//! out once its record is written (`Core::set_background_writes`). A monitor update's backlog size is an estimate made before it
//! is encoded (a row count times a typical row's size).
// The I/O shell is where the clock is read and tasks are spawned.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hashbrown::HashMap;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Notify, mpsc};

use crate::framing::{FrameError, Framer};
use crate::server::{
    CompactionTask, Core, Incoming, Now, Output, PendingUpdate, RecordWrite, RecordWritten,
    SessionId, ShellOutput,
};

/// A passive remote to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// `ptcp:PORT[:IP]`
    Tcp(std::net::SocketAddr),
    /// `punix:PATH`
    Unix(PathBuf),
    /// `pssl:PORT[:IP]`: TLS with mutual authentication ([`ServeOptions::tls`]).
    Ssl(std::net::SocketAddr),
}

impl FromStr for Remote {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (ssl, tcp) = match (s.strip_prefix("ptcp:"), s.strip_prefix("pssl:")) {
            (Some(r), _) => (false, Some(r)),
            (None, Some(r)) => (true, Some(r)),
            _ => (false, None),
        };
        if let Some(rest) = tcp {
            let (port, ip) = match rest.split_once(':') {
                Some((p, ip)) => (p, ip.trim_start_matches('[').trim_end_matches(']')),
                None => (rest, "0.0.0.0"),
            };
            let port: u16 = port
                .parse()
                .map_err(|_| format!("`{s}`: \"{port}\" is not a TCP port number"))?;
            let ip: std::net::IpAddr = ip
                .parse()
                .map_err(|_| format!("`{s}`: \"{ip}\" is not an IP address"))?;
            let addr = std::net::SocketAddr::new(ip, port);
            Ok(if ssl {
                Remote::Ssl(addr)
            } else {
                Remote::Tcp(addr)
            })
        } else if let Some(path) = s.strip_prefix("punix:") {
            if path.is_empty() {
                return Err(format!("`{s}`: punix: needs a socket path"));
            }
            Ok(Remote::Unix(PathBuf::from(path)))
        } else {
            Err(format!(
                "`{s}`: a remote is ptcp:PORT[:IP], pssl:PORT[:IP] or punix:PATH"
            ))
        }
    }
}

/// Shell settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Largest accepted message, in bytes.
    pub max_message: usize,
    /// Bytes queued for one client before it is disconnected.
    pub max_backlog: usize,
    /// The TLS configuration of `pssl:` remotes (replaceable at run time).
    pub tls: crate::tls::ServerTls,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_message: 64 << 20,
            max_backlog: 64 << 20,
            tls: crate::tls::ServerTls::default(),
        }
    }
}

/// What a connection's writer sends, in order.
/// Messages at least this large get debug log lines with their timings (the cold-start
/// timeline of docs/db-scale.md).
const BIG_MESSAGE: usize = 1 << 20;

enum Chunk {
    /// One encoded message.
    Bytes(Vec<u8>),
    /// A monitor update, encoded by the writer (outside the core's lock).
    Update(PendingUpdate),
}

struct Conn {
    /// The listener that accepted it (see [`Listener`]).
    listener: u64,
    tx: mpsc::UnboundedSender<Chunk>,
    backlog: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

struct State {
    core: Core,
    /// Where compactions go to be run off the lock.
    compactions: mpsc::UnboundedSender<CompactionTask>,
    /// Where file records go to be encoded and written off the lock, in commit order.
    records: mpsc::UnboundedSender<RecordWrite>,
    conns: HashMap<SessionId, Conn>,
    listeners: Vec<Listener>,
    next_listener: u64,
}

/// One bound remote and its accept task.
struct Listener {
    id: u64,
    remote: Remote,
    /// What was bound: `tcp:IP:PORT`, `unix:PATH`.
    bound: String,
    /// Inactivity probe for its sessions (None: the configured default).
    probe: Option<Option<u64>>,
    task: tokio::task::JoinHandle<()>,
}

/// A running server. Cloning gives another handle on the same server.
#[derive(Clone)]
pub struct Server {
    state: Arc<Mutex<State>>,
    start: Instant,
    opts: ServeOptions,
    local: Vec<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listening", &self.local)
            .finish()
    }
}

impl Server {
    /// The addresses actually bound (`tcp:IP:PORT`, `ssl:IP:PORT`, `unix:PATH`), in remote order.
    pub fn local_addrs(&self) -> &[String] {
        &self.local
    }

    fn now(start: Instant) -> Now {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Now {
            mono_ms: start.elapsed().as_millis() as u64,
            wall_ms,
        }
    }

    /// Run a closure against the core (e.g. to inspect state in tests), then deliver outputs.
    pub fn with_core<R>(&self, f: impl FnOnce(&mut Core, Now) -> R) -> R {
        let mut st = self.state.lock();
        let r = f(&mut st.core, Self::now(self.start));
        dispatch(&mut st, &self.opts);
        r
    }
}

/// Bind every remote and start serving on the current tokio runtime.
pub async fn start(
    mut core: Core,
    remotes: &[Remote],
    opts: ServeOptions,
) -> std::io::Result<Server> {
    let start = Instant::now();
    core.set_background_compaction(true);
    core.set_background_writes(true);
    let (compactions, mut compaction_rx) = mpsc::unbounded_channel::<CompactionTask>();
    let (records, mut record_rx) = mpsc::unbounded_channel::<RecordWrite>();
    let state = Arc::new(Mutex::new(State {
        core,
        compactions,
        records,
        conns: HashMap::new(),
        listeners: Vec::new(),
        next_listener: 1,
    }));
    let mut server = Server {
        state: state.clone(),
        start,
        opts: opts.clone(),
        local: Vec::new(),
    };
    for r in remotes {
        let bound = server.add_remote(r).await?;
        server.local.push(bound);
    }
    {
        // Compactions: encode and write the new file on a blocking thread, without the lock;
        // then install it under the lock.
        let (state, opts) = (state.clone(), opts.clone());
        tokio::spawn(async move {
            while let Some(task) = compaction_rx.recv().await {
                let name = task.database().to_string();
                // Snapshot, then the tail committed meanwhile (catch-up), each written and
                // synced on a blocking thread; under the lock only the rest and the rename.
                let run = tokio::task::spawn_blocking(move || task.run()).await;
                let caught_up = match run {
                    Ok(mut done) => {
                        let tail = state.lock().core.take_compaction_tail(&done);
                        tokio::task::spawn_blocking(move || {
                            done.catch_up(&tail);
                            done
                        })
                        .await
                    }
                    Err(e) => Err(e),
                };
                match caught_up {
                    Ok(done) => {
                        let mut st = state.lock();
                        st.core.finish_compaction(done);
                        dispatch(&mut st, &opts);
                    }
                    Err(e) => tracing::warn!("compacting database {name} failed: {e}"),
                }
            }
        });
    }
    {
        // File records: one ordered writer (a record may depend on the ones before it), each
        // batch encoded and written on a blocking thread without the lock; then the replies
        // they held are released under the lock.
        let (state, opts) = (state.clone(), opts.clone());
        tokio::spawn(async move {
            while let Some(first) = record_rx.recv().await {
                let mut batch = vec![first];
                while let Ok(more) = record_rx.try_recv() {
                    batch.push(more);
                }
                let lost: Vec<RecordWritten> = batch
                    .iter()
                    .map(|w| w.lost("the file writer's thread panicked"))
                    .collect();
                let t = Instant::now();
                let done = tokio::task::spawn_blocking(move || {
                    batch.into_iter().map(RecordWrite::run).collect::<Vec<_>>()
                })
                .await
                .unwrap_or(lost);
                let bytes: usize = done
                    .iter()
                    .map(|d| d.result().as_ref().map_or(0, |n| *n))
                    .sum();
                if bytes >= BIG_MESSAGE {
                    tracing::debug!(
                        "file records ({bytes} bytes) encoded and written in {} ms",
                        t.elapsed().as_millis()
                    );
                }
                let mut st = state.lock();
                let now = Server::now(start);
                for d in done {
                    st.core.record_written(d, now);
                }
                dispatch(&mut st, &opts);
            }
        });
    }
    {
        let (state, opts) = (state.clone(), opts.clone());
        tokio::spawn(async move {
            loop {
                let wait = {
                    let st = state.lock();
                    let now = Server::now(start).mono_ms;
                    st.core
                        .poll_timeout()
                        .map_or(100, |t| t.saturating_sub(now).min(100))
                };
                tokio::time::sleep(Duration::from_millis(wait.max(1))).await;
                let mut st = state.lock();
                st.core.tick(Server::now(start));
                dispatch(&mut st, &opts);
            }
        });
    }
    Ok(server)
}

/// Bind one remote; returns what was bound and the accept task.
async fn bind(
    r: &Remote,
    id: u64,
    state: Arc<Mutex<State>>,
    start: Instant,
    opts: ServeOptions,
) -> std::io::Result<(String, tokio::task::JoinHandle<()>)> {
    match r {
        Remote::Tcp(addr) => {
            let l = TcpListener::bind(addr).await?;
            let a = l.local_addr()?;
            let name = format!("tcp:{}:{}", fmt_ip(a.ip()), a.port());
            let l = Arc::new(l);
            let task = accept_loop(name.clone(), id, state, start, opts, move || {
                let l = l.clone();
                async move {
                    let (s, _) = l.accept().await?;
                    let _ = s.set_nodelay(true);
                    Ok(s.into_split())
                }
            });
            Ok((name, task))
        }
        Remote::Ssl(addr) => {
            let l = TcpListener::bind(addr).await?;
            let a = l.local_addr()?;
            let name = format!("ssl:{}:{}", fmt_ip(a.ip()), a.port());
            let task = ssl_accept_loop(name.clone(), id, l, state, start, opts);
            Ok((name, task))
        }
        Remote::Unix(path) => {
            if path.exists() {
                // A stale socket from a previous run; ovsdb-server replaces it the same way.
                let _ = std::fs::remove_file(path);
            }
            let l = UnixListener::bind(path)?;
            let name = format!("unix:{}", path.display());
            let l = Arc::new(l);
            let task = accept_loop(name.clone(), id, state, start, opts, move || {
                let l = l.clone();
                async move { Ok(l.accept().await?.0.into_split()) }
            });
            Ok((name, task))
        }
    }
}

impl Server {
    /// Start listening on one more remote while running; returns what was bound
    /// (`tcp:IP:PORT`, `unix:PATH`). Adding a remote that is already listening is an error.
    pub async fn add_remote(&self, r: &Remote) -> std::io::Result<String> {
        let id = {
            let mut st = self.state.lock();
            if st.listeners.iter().any(|l| &l.remote == r) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{r} is already listening"),
                ));
            }
            st.next_listener += 1;
            st.next_listener
        };
        let (bound, task) = bind(r, id, self.state.clone(), self.start, self.opts.clone()).await?;
        self.state.lock().listeners.push(Listener {
            id,
            remote: r.clone(),
            bound: bound.clone(),
            probe: None,
            task,
        });
        Ok(bound)
    }

    /// Stop listening on a remote and close the sessions it accepted (ovsdb-server's
    /// `remove-remote`). Returns false when no such remote is listening.
    pub fn remove_remote(&self, r: &Remote) -> bool {
        let mut st = self.state.lock();
        let Some(i) = st.listeners.iter().position(|l| &l.remote == r) else {
            return false;
        };
        let l = st.listeners.remove(i);
        l.task.abort();
        if let Remote::Unix(p) = &l.remote {
            let _ = std::fs::remove_file(p);
        }
        let sessions: Vec<SessionId> = st
            .conns
            .iter()
            .filter(|(_, c)| c.listener == l.id)
            .map(|(sid, _)| *sid)
            .collect();
        for sid in sessions {
            close_session(&mut st, sid);
        }
        dispatch(&mut st, &self.opts);
        tracing::info!("{r}: remote deconfigured");
        true
    }

    /// The remotes listening now, with what each bound, in the order they were added.
    pub fn remotes(&self) -> Vec<(Remote, String)> {
        let st = self.state.lock();
        st.listeners
            .iter()
            .map(|l| (l.remote.clone(), l.bound.clone()))
            .collect()
    }

    /// Set the inactivity probe of a remote's sessions, current and future (None: the
    /// configured default; Some(None): never probe). False when no such remote listens.
    pub fn set_remote_probe(&self, r: &Remote, probe: Option<Option<u64>>) -> bool {
        let mut st = self.state.lock();
        let Some(l) = st.listeners.iter_mut().find(|l| &l.remote == r) else {
            return false;
        };
        l.probe = probe;
        let id = l.id;
        let sessions: Vec<SessionId> = st
            .conns
            .iter()
            .filter(|(_, c)| c.listener == id)
            .map(|(sid, _)| *sid)
            .collect();
        if let Some(p) = probe {
            for sid in sessions {
                st.core.set_session_probe(sid, p);
            }
        }
        true
    }

    /// How many sessions a remote's listener has accepted that are still connected.
    pub fn remote_sessions(&self, r: &Remote) -> Option<usize> {
        let st = self.state.lock();
        let l = st.listeners.iter().find(|l| &l.remote == r)?;
        Some(st.conns.values().filter(|c| c.listener == l.id).count())
    }

    /// Drop every client connection; clients reconnect (ovsdb-server's `reconnect`).
    pub fn disconnect_all(&self) {
        let mut st = self.state.lock();
        let sessions: Vec<SessionId> = st.conns.keys().copied().collect();
        for sid in sessions {
            close_session(&mut st, sid);
        }
        dispatch(&mut st, &self.opts);
    }

    /// Waits until every file record committed so far is written (an orderly exit: the
    /// transactions whose replies are held get them, and nothing other clients were shown is
    /// lost), or `timeout` passes; whether it was written.
    pub async fn flush_records(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if !self.state.lock().core.records_pending() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stop every listener (removing unix socket files); sessions stay until the process ends.
    pub fn shutdown_listeners(&self) {
        let mut st = self.state.lock();
        for l in st.listeners.drain(..) {
            l.task.abort();
            if let Remote::Unix(p) = &l.remote {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Close one session from the server side: its tasks see `closed` and end.
fn close_session(st: &mut State, sid: SessionId) {
    if let Some(c) = st.conns.remove(&sid) {
        c.closed.store(true, Ordering::Release);
        c.wake.notify_one();
    }
    st.core.disconnect(sid);
}

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Remote::Tcp(a) => write!(f, "ptcp:{}:{}", a.port(), fmt_ip(a.ip())),
            Remote::Ssl(a) => write!(f, "pssl:{}:{}", a.port(), fmt_ip(a.ip())),
            Remote::Unix(p) => write!(f, "punix:{}", p.display()),
        }
    }
}

/// Accept connections forever, one reader/writer pair of tasks each.
fn accept_loop<F, Fut, R, W>(
    name: String,
    listener: u64,
    state: Arc<Mutex<State>>,
    start: Instant,
    opts: ServeOptions,
    accept: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<(R, W)>> + Send,
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            match accept().await {
                Ok((rd, wr)) => {
                    tokio::spawn(connection(
                        state.clone(),
                        listener,
                        rd,
                        wr,
                        start,
                        opts.clone(),
                    ));
                }
                Err(e) => {
                    tracing::warn!("accept on {name} failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// Accept `pssl:` connections forever: each one's TLS handshake ([`crate::tls::accept`], which
/// logs refusals) runs in the connection's own task, so a slow or silent client never holds up
/// the listener; a verified client becomes a session like any other.
fn ssl_accept_loop(
    name: String,
    listener: u64,
    l: TcpListener,
    state: Arc<Mutex<State>>,
    start: Instant,
    opts: ServeOptions,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match l.accept().await {
                Ok((s, peer)) => {
                    let _ = s.set_nodelay(true);
                    let (state, opts, name) = (state.clone(), opts.clone(), name.clone());
                    tokio::spawn(async move {
                        let tls = opts.tls.clone();
                        if let Some(t) = crate::tls::accept(&name, s, peer, &tls).await {
                            // The remote may have been removed during the handshake.
                            if !state.lock().listeners.iter().any(|l| l.id == listener) {
                                tracing::info!("{name}: remote removed; closing {peer}");
                                return;
                            }
                            let (rd, wr) = tokio::io::split(t);
                            connection(state, listener, rd, wr, start, opts).await;
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accept on {name} failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

fn fmt_ip(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    }
}

/// A session's message as its writer's chunk and the bytes it counts in the backlog; other
/// outputs as they are.
fn to_chunk(o: ShellOutput) -> Result<(SessionId, Chunk, usize), Output> {
    match o {
        ShellOutput::Output(Output::Send(sid, bytes)) => {
            let n = bytes.len();
            Ok((sid, Chunk::Bytes(bytes), n))
        }
        ShellOutput::Update(sid, u) => {
            let n = u.size_hint();
            Ok((sid, Chunk::Update(u), n))
        }
        ShellOutput::Output(o) => Err(o),
    }
}

/// Deliver the core's outputs.
fn dispatch(st: &mut State, opts: &ServeOptions) {
    let outputs: Vec<ShellOutput> = st.core.poll_shell_output().collect();
    while let Some(task) = st.core.poll_compaction() {
        let _ = st.compactions.send(task);
    }
    while let Some(w) = st.core.poll_record_write() {
        let _ = st.records.send(w);
    }
    let mut dropped = Vec::new();
    for o in outputs {
        let (sid, chunk, n) = match to_chunk(o) {
            Ok(c) => c,
            Err(Output::Close(sid, reason)) => {
                tracing::info!("session {sid}: closing: {reason}");
                dropped.push(sid);
                continue;
            }
            Err(Output::Log(line)) => {
                tracing::warn!("{line}");
                continue;
            }
            Err(Output::Send(..)) => continue,
        };
        let Some(c) = st.conns.get(&sid) else {
            continue;
        };
        let queued = c.backlog.fetch_add(n, Ordering::AcqRel) + n;
        if queued > opts.max_backlog {
            tracing::warn!(
                "session {sid}: {queued} bytes queued exceed the {}-byte backlog limit; disconnecting the slow reader",
                opts.max_backlog
            );
            dropped.push(sid);
            continue;
        }
        let _ = c.tx.send(chunk);
    }
    for sid in dropped {
        if let Some(c) = st.conns.remove(&sid) {
            c.closed.store(true, Ordering::Release);
            c.wake.notify_one();
        }
        st.core.disconnect(sid);
    }
    // Disconnects can queue lock hand-overs for others.
    let again: Vec<ShellOutput> = st.core.poll_shell_output().collect();
    for o in again {
        let Ok((sid, chunk, n)) = to_chunk(o) else {
            continue;
        };
        if let Some(c) = st.conns.get(&sid) {
            c.backlog.fetch_add(n, Ordering::AcqRel);
            let _ = c.tx.send(chunk);
        }
    }
}

async fn connection<R, W>(
    state: Arc<Mutex<State>>,
    listener: u64,
    mut rd: R,
    wr: W,
    start: Instant,
    opts: ServeOptions,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let backlog = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicBool::new(false));
    let wake = Arc::new(Notify::new());
    let sid = {
        let mut st = state.lock();
        let sid = st.core.connect(Server::now(start));
        let probe = st
            .listeners
            .iter()
            .find(|l| l.id == listener)
            .and_then(|l| l.probe);
        if let Some(p) = probe {
            st.core.set_session_probe(sid, p);
        }
        st.conns.insert(
            sid,
            Conn {
                listener,
                tx,
                backlog: backlog.clone(),
                closed: closed.clone(),
                wake: wake.clone(),
            },
        );
        sid
    };
    tracing::debug!("session {sid}: connected");
    let writer = tokio::spawn(writer(
        wr,
        rx,
        backlog.clone(),
        wake.clone(),
        closed.clone(),
    ));
    let mut framer = Framer::new(opts.max_message);
    let mut buf = vec![0u8; 64 * 1024];
    let high = opts.max_backlog / 2;
    let mut reason = "client closed the connection".to_string();
    'conn: loop {
        while backlog.load(Ordering::Acquire) > high && !closed.load(Ordering::Acquire) {
            wake.notified().await;
        }
        if closed.load(Ordering::Acquire) {
            reason = "closed by server".into();
            break;
        }
        let n = tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => { reason = format!("read error: {e}"); break }
            },
            _ = wake.notified() => continue,
        };
        framer.push(&buf[..n]);
        let mut msgs = Vec::new();
        let mut frame_error = None;
        // Parsed here, outside the core's lock; a `transact` request is split into its
        // operations' texts, not parsed into one tree (see `Incoming`).
        let mut big = 0;
        let parse_start = Instant::now();
        while let Some(m) = framer.next_raw() {
            match m.and_then(|(offset, bytes)| {
                big = big.max(bytes.len());
                Incoming::parse(&bytes).map_err(|reason| FrameError::Malformed { offset, reason })
            }) {
                Ok(v) => msgs.push(v),
                Err(e) => {
                    frame_error = Some(e);
                    break;
                }
            }
        }
        if !msgs.is_empty() {
            // The cold-start timeline (docs/db-scale.md): a large request's split, its wait
            // for the lock, and its time under the lock.
            let timed = big >= BIG_MESSAGE;
            if timed {
                tracing::debug!(
                    "session {sid}: {big}-byte request split in {} ms",
                    parse_start.elapsed().as_millis()
                );
            }
            let waited = Instant::now();
            let mut st = state.lock();
            let locked = Instant::now();
            let now = Server::now(start);
            for m in msgs {
                st.core.handle_incoming(sid, m, now);
            }
            dispatch(&mut st, &opts);
            if timed {
                tracing::debug!(
                    "session {sid}: request handled under the lock in {} ms (waited {} ms for it)",
                    locked.elapsed().as_millis(),
                    (locked - waited).as_millis()
                );
            }
            if !st.conns.contains_key(&sid) {
                reason = "closed by server".into();
                break 'conn;
            }
        }
        if let Some(e) = frame_error {
            reason = format!("protocol error: {e}");
            break;
        }
    }
    tracing::debug!("session {sid}: disconnected ({reason})");
    {
        let mut st = state.lock();
        st.conns.remove(&sid);
        st.core.disconnect(sid);
        dispatch(&mut st, &opts);
    }
    // The writer flushes what is queued (an error reply, say) unless the server dropped the
    // client for being too slow.
    let _ = writer.await;
}

/// A large update is encoded in parts of this size, each written as soon as it is made.
const UPDATE_PART: usize = 1 << 20;

/// Write and flush (a TLS stream may keep records that did not fit in the socket buffer until
/// it is flushed; a no-op for plain sockets).
async fn send_all<W: AsyncWrite + Unpin>(wr: &mut W, bytes: &[u8]) -> bool {
    bytes.is_empty() || (wr.write_all(bytes).await.is_ok() && wr.flush().await.is_ok())
}

/// Encode a large update on a blocking thread in parts ([`PendingUpdate::encode_parts`]) and
/// write each part as it comes, so the first bytes go out while the rest is encoded and the
/// whole text never exists at once. False when the connection failed.
async fn stream_update<W: AsyncWrite + Unpin>(wr: &mut W, u: PendingUpdate) -> bool {
    let t = Instant::now();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(2);
    let enc = tokio::task::spawn_blocking(move || {
        // A closed receiver (the connection failed) drops the rest.
        u.encode_parts(UPDATE_PART, &mut |p| {
            let _ = tx.blocking_send(p);
        })
    });
    let (mut bytes, mut first_ms, mut ok) = (0, None, true);
    while let Some(p) = rx.recv().await {
        first_ms.get_or_insert_with(|| t.elapsed().as_millis());
        bytes += p.len();
        if !send_all(wr, &p).await {
            ok = false;
            break;
        }
    }
    drop(rx);
    let _ = enc.await;
    tracing::debug!(
        "large update ({bytes} bytes) encoded and written in parts in {} ms (first part out after {} ms)",
        t.elapsed().as_millis(),
        first_ms.unwrap_or(0)
    );
    ok
}

async fn writer<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Chunk>,
    backlog: Arc<AtomicUsize>,
    wake: Arc<Notify>,
    closed: Arc<AtomicBool>,
) {
    let mut out = Vec::with_capacity(64 * 1024);
    'run: while let Some(first) = rx.recv().await {
        out.clear();
        // Bytes counted in the backlog for what is taken now (an update counts its estimate).
        let mut taken = 0;
        let mut next = Some(first);
        let t = Instant::now();
        let mut written = 0;
        while let Some(chunk) = next.take() {
            match chunk {
                Chunk::Bytes(b) => {
                    taken += b.len();
                    out.extend_from_slice(&b);
                }
                Chunk::Update(u) => {
                    taken += u.size_hint();
                    if u.is_large() {
                        // What came before it goes first; then its parts as they are made
                        // (this runtime's workers keep serving other connections meanwhile).
                        if closed.load(Ordering::Acquire)
                            || !send_all(&mut wr, &out).await
                            || !stream_update(&mut wr, u).await
                        {
                            closed.store(true, Ordering::Release);
                            wake.notify_one();
                            break 'run;
                        }
                        written += out.len();
                        out.clear();
                    } else if let Some(b) = u.encode() {
                        out.extend_from_slice(&b);
                    }
                }
            }
            if out.len() < 1 << 20
                && let Ok(more) = rx.try_recv()
            {
                next = Some(more);
            }
        }
        if closed.load(Ordering::Acquire) {
            break;
        }
        if !send_all(&mut wr, &out).await {
            closed.store(true, Ordering::Release);
            wake.notify_one();
            break;
        }
        written += out.len();
        if written >= BIG_MESSAGE {
            tracing::debug!("{written} bytes written in {} ms", t.elapsed().as_millis());
        }
        backlog.fetch_sub(taken, Ordering::AcqRel);
        wake.notify_one();
    }
    let _ = wr.shutdown().await;
}

#[cfg(test)]
#[path = "serve_tests.rs"]
mod tests;
