//! The live-migration state channel as a network service (DESIGN "Seams between crates":
//! chassis ↔ chassis state transfer; "Live migration"): the `--state-listen` listener, the
//! sessions the core dials, and the tasks that move their bytes between the sockets and the
//! core's state-session API ([`hf_datapath::migrate`]).
//!
//! # Who dials whom
//!
//! A migration's destination dials its source: the core asks with
//! [`Datapath::poll_state_dial`] (the source chassis and its encap IP from the program's
//! chassis table), and the session goes to that IP at this datapath's own listening port
//! (every datapath of a cluster listens on the same port), from this datapath's listening IP.
//! Over TLS when the listener is `pssl:`, plain TCP when it is `ptcp:`. Without a listener
//! nothing listens and nothing is dialed: the core hears [`STATE_OFF`] for every dial.
//!
//! # TLS
//!
//! `pssl:` uses `-p/-c/-C` (and `--ssl-protocols`, `--ssl-ciphers`) with the project's rustls
//! set-up ([`hf_ovsdb_net::tls`]) in both directions: mutual authentication, each side's
//! certificate must be signed by the CA. A peer whose handshake fails (no certificate, another
//! CA, plain text on the TLS port) is refused before the core hears of it, with a log line
//! naming its address and the reason. The common name (CN) of the peer's certificate is handed
//! to the core as the authenticated chassis, which the peer's hello must then name (and the
//! chassis table must list).
//!
//! # Sessions
//!
//! The event loop owns the core. Each session is one task owning its socket: what it reads
//! goes to the loop as [`StateEvent::Bytes`] over one bounded channel shared by all sessions
//! (so a session whose bytes the loop has not taken yet stops reading, and TCP pushes back on
//! the peer), and what the core sends reaches the task over an unbounded channel per session,
//! whose backlog is bounded by [`OUT_MAX`]. Nothing here ever waits in the loop. The loop
//! allocates the [`PeerId`]s.
//!
//! Closing: when the core wants a session closed ([`Datapath::state_wants_close`]) the loop
//! drops the session's sender; the task writes what was queued, shuts its side down, and
//! lingers a little for the peer's end ([`LINGER`]). A socket's end or error reaches the core
//! as [`Datapath::handle_state_disconnected`].
//!
//! Guards the core does not have (it trusts its shell with the socket): a session must say
//! hello within [`HELLO_TIMEOUT`] and within [`PRE_HELLO_MAX`] bytes; a closing session whose
//! peer reads nothing is cut after [`CLOSE_TIMEOUT`]; at most [`MAX_SESSIONS`] sessions at a
//! time.
// An I/O shell: sockets, tasks, clocks.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hf_datapath::{Datapath, MigrationStats, PeerId, StateDial};
use hf_ovsdb_net::tls::{ClientConfig, ServerTls, TlsFiles, TlsSettings};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;

use super::cert;
use crate::db::shell::ClientTlsArgs;

/// What the core hears for a dial when there is no `--state-listen`.
pub const STATE_OFF: &str = "no --state-listen: the state channel is off";

/// How long a dial may take, TCP connect and TLS handshake together.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a session may take to say hello once it is up.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes a session may send before its hello is accepted.
pub const PRE_HELLO_MAX: u64 = 64 << 10;

/// How long a closing session may take to write what was queued for it.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a closed session waits for the peer's end after shutting its own down.
pub const LINGER: Duration = Duration::from_secs(2);

/// Bytes queued for a session that does not read before it is cut.
pub const OUT_MAX: u64 = 256 << 20;

/// Sessions at a time (dialed and accepted together).
pub const MAX_SESSIONS: usize = 64;

/// Reads in flight from all sessions to the event loop.
const EVENTS: usize = 64;

/// `--state-listen`, parsed: `ptcp:PORT[:IP]` or `pssl:PORT[:IP]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenSpec {
    /// `pssl:`.
    pub tls: bool,
    /// The port (0: an ephemeral port, logged; peers are then dialed on that same number).
    pub port: u16,
    /// The IP (None: `--encap-ip`).
    pub ip: Option<IpAddr>,
}

/// Parses `ptcp:PORT[:IP]` or `pssl:PORT[:IP]` (an IPv6 address may be in brackets).
pub fn parse_listen(s: &str) -> anyhow::Result<ListenSpec> {
    let bad = |why: &str| anyhow::anyhow!("--state-listen={s}: {why}");
    let (tls, rest) = if let Some(r) = s.strip_prefix("ptcp:") {
        (false, r)
    } else if let Some(r) = s.strip_prefix("pssl:") {
        (true, r)
    } else {
        return Err(bad(
            "the state channel listens on ptcp:PORT[:IP] or pssl:PORT[:IP]",
        ));
    };
    let (port, ip) = match rest.split_once(':') {
        Some((p, ip)) => (p, Some(ip)),
        None => (rest, None),
    };
    let port: u16 = port
        .parse()
        .map_err(|_| bad(&format!("\"{port}\" is not a port number (0-65535)")))?;
    let ip = match ip {
        None => None,
        Some(ip) => {
            let bare = ip
                .strip_prefix('[')
                .and_then(|i| i.strip_suffix(']'))
                .unwrap_or(ip);
            Some(
                bare.parse::<IpAddr>()
                    .map_err(|_| bad(&format!("\"{ip}\" is not an IP address")))?,
            )
        }
    };
    Ok(ListenSpec { tls, port, ip })
}

#[derive(Clone)]
struct Tls {
    server: ServerTls,
    client: Arc<ClientConfig>,
}

/// The listener bound before the daemon detaches (so that errors reach the caller).
#[derive(Debug)]
pub struct Bound {
    listener: std::net::TcpListener,
    addr: SocketAddr,
    tls: Option<Tls>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

/// Loads the TLS settings `pssl:` needs (an error naming the missing flags).
fn load_tls(spec: &str, tls: &ClientTlsArgs) -> anyhow::Result<Tls> {
    let missing: Vec<&str> = [
        ("--private-key (-p)", tls.private_key.is_none()),
        ("--certificate (-c)", tls.certificate.is_none()),
        ("--ca-cert (-C)", tls.ca_cert.is_none()),
    ]
    .into_iter()
    .filter(|(_, m)| *m)
    .map(|(f, _)| f)
    .collect();
    let (Some(k), Some(c), Some(ca)) = (&tls.private_key, &tls.certificate, &tls.ca_cert) else {
        anyhow::bail!(
            "--state-listen={spec}: a TLS state channel needs --private-key, --certificate and \
             --ca-cert; missing: {}",
            missing.join(", ")
        );
    };
    let settings = TlsSettings::load(&TlsFiles {
        private_key: k.clone(),
        certificate: c.clone(),
        ca_cert: ca.clone(),
        protocols: tls.ssl_protocols.clone(),
        ciphers: tls.ssl_ciphers.clone(),
    })
    .map_err(|e| anyhow::anyhow!("--state-listen={spec}: {e}"))?;
    for w in &settings.warnings {
        tracing::warn!("state channel: {w}");
    }
    let server = settings
        .server_config()
        .map_err(|e| anyhow::anyhow!("--state-listen={spec}: {e}"))?;
    let client = settings
        .client_config()
        .map_err(|e| anyhow::anyhow!("--state-listen={spec}: {e}"))?;
    Ok(Tls {
        server: ServerTls::new(Some(server)),
        client,
    })
}

/// Binds `--state-listen` (None: the state channel is off) and loads its TLS settings.
pub fn bind(
    spec: Option<&str>,
    encap_ip: IpAddr,
    tls: &ClientTlsArgs,
    inherited: Option<std::net::TcpListener>,
) -> anyhow::Result<Option<Bound>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let l = parse_listen(spec)?;
    let tls = if l.tls {
        Some(load_tls(spec, tls)?)
    } else {
        None
    };
    let want = SocketAddr::new(l.ip.unwrap_or(encap_ip), l.port);
    // A takeover's listener is the old process's, bound as this --state-listen says.
    let listener = match inherited {
        Some(l) => l,
        None => std::net::TcpListener::bind(want)
            .with_context(|| format!("--state-listen={spec}: cannot listen on {want}"))?,
    };
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    Ok(Some(Bound {
        listener,
        addr,
        tls,
    }))
}

/// What the sessions' tasks and the listener tell the event loop.
#[derive(Debug)]
pub enum StateEvent {
    /// The listener accepted a connection.
    Accepted(std::io::Result<(TcpStream, SocketAddr)>),
    /// A session is up (TLS handshake done): the peer certificate's CN with TLS.
    Connected {
        /// The session.
        peer: PeerId,
        /// The peer certificate's common name.
        cn: Option<String>,
    },
    /// A dial failed.
    DialFailed {
        /// The session it was for.
        peer: PeerId,
        /// Why, naming the address.
        reason: String,
    },
    /// An accepted connection was refused before it was up (its handshake failed; logged).
    Refused {
        /// The session.
        peer: PeerId,
    },
    /// Bytes from a session.
    Bytes {
        /// The session.
        peer: PeerId,
        /// What was read.
        data: Vec<u8>,
    },
    /// A session that was up is gone.
    Closed {
        /// The session.
        peer: PeerId,
        /// Why.
        reason: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Dialing, or the TLS handshake of an accepted connection.
    Connecting,
    /// Handed to the core.
    Up,
    /// The core (or a guard) wants it closed; the task writes what is queued.
    Closing,
}

#[derive(Debug)]
struct Session {
    /// Dialed by this datapath (`Some(chassis)`), or accepted.
    dialed: Option<String>,
    addr: SocketAddr,
    tls: bool,
    /// The peer certificate's common name.
    cn: Option<String>,
    phase: Phase,
    /// None once closing.
    out: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// Bytes handed to the task, and written by it.
    queued: u64,
    written: Arc<AtomicU64>,
    bytes_in: u64,
    /// Up without a hello: the hello deadline; closing: the close deadline.
    deadline: Option<Instant>,
    task: tokio::task::AbortHandle,
}

impl Session {
    /// A session being opened (dialed: `Some(chassis)`).
    fn new(
        dialed: Option<String>,
        addr: SocketAddr,
        tls: bool,
        out: mpsc::UnboundedSender<Vec<u8>>,
        written: Arc<AtomicU64>,
        task: tokio::task::AbortHandle,
    ) -> Session {
        Session {
            dialed,
            addr,
            tls,
            cn: None,
            phase: Phase::Connecting,
            out: Some(out),
            queued: 0,
            written,
            bytes_in: 0,
            deadline: None,
            task,
        }
    }

    fn bytes_out(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn who(&self, chassis: Option<&str>) -> String {
        match chassis.or(self.cn.as_deref()).or(self.dialed.as_deref()) {
            Some(c) => format!("chassis {c} at {}", self.addr),
            None => self.addr.to_string(),
        }
    }
}

#[derive(Debug)]
struct Listening {
    /// Before [`StateChannel::start`]: the bound socket.
    std: Option<std::net::TcpListener>,
    listener: Option<TcpListener>,
    addr: SocketAddr,
    tls: Option<Tls>,
    /// `pssl:PORT:IP`, for logs.
    name: String,
}

/// The state channel: listener, sessions, and the channel from their tasks. See the module
/// docs.
#[derive(Debug)]
pub struct StateChannel {
    listening: Option<Listening>,
    sessions: BTreeMap<PeerId, Session>,
    next_peer: PeerId,
    tx: mpsc::Sender<StateEvent>,
    rx: mpsc::Receiver<StateEvent>,
}

enum Dialed {
    Plain(TcpStream),
    Tls(
        Box<tokio_rustls::client::TlsStream<TcpStream>>,
        Option<String>,
    ),
}

impl StateChannel {
    /// A state channel on `bound` (None: off).
    pub fn new(bound: Option<Bound>) -> StateChannel {
        let (tx, rx) = mpsc::channel(EVENTS);
        StateChannel {
            listening: bound.map(|b| Listening {
                name: format!(
                    "{}:{}:{}",
                    if b.tls.is_some() { "pssl" } else { "ptcp" },
                    b.addr.port(),
                    match b.addr.ip() {
                        IpAddr::V6(ip) => format!("[{ip}]"),
                        ip => ip.to_string(),
                    }
                ),
                std: Some(b.listener),
                listener: None,
                addr: b.addr,
                tls: b.tls,
            }),
            sessions: BTreeMap::new(),
            next_peer: 0,
            tx,
            rx,
        }
    }

    /// Starts listening (inside the runtime).
    pub fn start(&mut self) -> std::io::Result<()> {
        if let Some(l) = &mut self.listening
            && let Some(s) = l.std.take()
        {
            l.listener = Some(TcpListener::from_std(s)?);
        }
        Ok(())
    }

    /// The listener's descriptor, for a takeover.
    pub fn listener_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let l = self.listening.as_ref()?;
        match (&l.listener, &l.std) {
            (Some(t), _) => Some(t.as_raw_fd()),
            (None, Some(s)) => Some(s.as_raw_fd()),
            (None, None) => None,
        }
    }

    /// What the start-up log line says about the state channel.
    pub fn describe(&self) -> String {
        match &self.listening {
            None => "state channel off".into(),
            Some(l) if l.tls.is_some() => format!("state channel {} (mutual TLS)", l.name),
            Some(l) => format!("state channel {}", l.name),
        }
    }

    /// The next event (cancel safe: for the event loop's `select!`).
    pub async fn next(&mut self) -> StateEvent {
        let StateChannel { listening, rx, .. } = self;
        let accept = async {
            match listening.as_ref().and_then(|l| l.listener.as_ref()) {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = accept => StateEvent::Accepted(r),
            Some(e) = rx.recv() => e,
        }
    }

    /// When [`StateChannel::pump`] next has a deadline to enforce.
    pub fn deadline(&self) -> Option<Instant> {
        self.sessions.values().filter_map(|s| s.deadline).min()
    }

    fn alloc(&mut self) -> PeerId {
        self.next_peer += 1;
        self.next_peer
    }

    /// Handles one event.
    pub fn handle(&mut self, ev: StateEvent, dp: &mut Datapath, now: Duration) {
        match ev {
            StateEvent::Accepted(Ok((tcp, addr))) => self.accept(tcp, addr),
            StateEvent::Accepted(Err(e)) => {
                let name = self.listening.as_ref().map_or("", |l| l.name.as_str());
                tracing::warn!("state channel {name}: accept failed: {e}");
            }
            StateEvent::Connected { peer, cn } => {
                let Some(s) = self.sessions.get_mut(&peer) else {
                    return;
                };
                s.phase = Phase::Up;
                s.cn = cn;
                s.deadline = Some(Instant::now() + HELLO_TIMEOUT);
                tracing::debug!(
                    "state channel: session {peer} with {} up ({}{})",
                    s.who(None),
                    if s.dialed.is_some() {
                        "dialed"
                    } else {
                        "accepted"
                    },
                    if s.tls { ", TLS" } else { "" }
                );
                dp.handle_state_connected(peer, s.dialed.as_deref(), s.cn.as_deref(), now);
            }
            StateEvent::DialFailed { peer, reason } => {
                if let Some(s) = self.sessions.remove(&peer)
                    && let Some(c) = &s.dialed
                {
                    dp.handle_state_dial_failed(c, &reason, now);
                }
            }
            StateEvent::Refused { peer } => {
                self.sessions.remove(&peer);
            }
            StateEvent::Bytes { peer, data } => {
                if let Some(s) = self.sessions.get_mut(&peer) {
                    s.bytes_in += data.len() as u64;
                    // What a closing session still sends (while it lingers) goes nowhere: the
                    // core may not have refused it (a guard here did), and must not buffer it.
                    if s.phase == Phase::Up {
                        dp.handle_state_bytes(peer, &data, now);
                    }
                }
            }
            StateEvent::Closed { peer, reason } => {
                if let Some(s) = self.sessions.remove(&peer) {
                    let who = s.who(dp.state_peer(peer));
                    if s.phase == Phase::Closing {
                        tracing::debug!("state channel: session with {who} closed: {reason}");
                    } else {
                        tracing::info!("state channel: session with {who} ended: {reason}");
                    }
                    dp.handle_state_disconnected(peer, now);
                }
            }
        }
    }

    /// After every event: opens the sessions the core asks for, hands the tasks what the core
    /// sends, and closes what the core (or a guard) wants closed.
    pub fn pump(&mut self, dp: &mut Datapath, now: Duration) {
        while let Some(d) = dp.poll_state_dial() {
            if self.listening.is_none() {
                dp.handle_state_dial_failed(&d.chassis, STATE_OFF, now);
            } else if self.sessions.len() >= MAX_SESSIONS {
                dp.handle_state_dial_failed(
                    &d.chassis,
                    &format!("{MAX_SESSIONS} state sessions already"),
                    now,
                );
            } else {
                self.dial(d);
            }
        }
        while let Some((peer, bytes)) = dp.poll_state_transmit() {
            if let Some(s) = self.sessions.get_mut(&peer)
                && let Some(out) = &s.out
            {
                s.queued += bytes.len() as u64;
                // An error: the task ended; its `Closed` is on its way.
                let _ = out.send(bytes);
            }
        }
        let wall = Instant::now();
        let mut cut = Vec::new();
        for (&peer, s) in &mut self.sessions {
            match s.phase {
                Phase::Connecting => continue,
                Phase::Closing => {
                    if s.deadline.is_some_and(|t| wall >= t) {
                        cut.push((peer, format!("it read nothing for {CLOSE_TIMEOUT:?}")));
                    }
                    continue;
                }
                Phase::Up => {}
            }
            let hello = dp.state_peer(peer);
            if hello.is_some() {
                s.deadline = None;
            }
            let backlog = s.queued.saturating_sub(s.bytes_out());
            if backlog > OUT_MAX {
                cut.push((peer, format!("it reads nothing ({backlog} bytes waiting)")));
                continue;
            }
            let why = if dp.state_wants_close(peer) {
                Some("refused".to_string())
            } else if hello.is_none() && s.bytes_in > PRE_HELLO_MAX {
                Some(format!("{} bytes and no hello", s.bytes_in))
            } else if hello.is_none() && s.deadline.is_some_and(|t| wall >= t) {
                Some(format!("no hello within {HELLO_TIMEOUT:?}"))
            } else {
                None
            };
            if let Some(why) = why {
                tracing::warn!(
                    "state channel: closing the session with {}: {why}",
                    s.who(hello)
                );
                s.phase = Phase::Closing;
                s.out = None;
                s.deadline = Some(wall + CLOSE_TIMEOUT);
            }
        }
        for (peer, why) in cut {
            if let Some(s) = self.sessions.remove(&peer) {
                tracing::warn!(
                    "state channel: cutting the session with {}: {why}",
                    s.who(dp.state_peer(peer))
                );
                s.task.abort();
                dp.handle_state_disconnected(peer, now);
            }
        }
    }

    fn dial(&mut self, d: StateDial) {
        let Some(l) = &self.listening else {
            return;
        };
        let addr = SocketAddr::new(d.ip, l.addr.port());
        let from = l.addr.ip();
        let tls = l.tls.as_ref().map(|t| t.client.clone());
        let peer = self.alloc();
        let (otx, orx) = mpsc::unbounded_channel();
        let written = Arc::new(AtomicU64::new(0));
        let tx = self.tx.clone();
        let w = written.clone();
        let is_tls = tls.is_some();
        let task = tokio::spawn(async move {
            let r = tokio::time::timeout(DIAL_TIMEOUT, connect(addr, from, tls))
                .await
                .unwrap_or_else(|_| {
                    Err(format!("no connection to {addr} within {DIAL_TIMEOUT:?}"))
                });
            match r {
                Err(reason) => {
                    let _ = tx.send(StateEvent::DialFailed { peer, reason }).await;
                }
                Ok(Dialed::Plain(s)) => {
                    if tx
                        .send(StateEvent::Connected { peer, cn: None })
                        .await
                        .is_ok()
                    {
                        run_session(peer, s, orx, tx, w).await;
                    }
                }
                Ok(Dialed::Tls(s, cn)) => {
                    if tx.send(StateEvent::Connected { peer, cn }).await.is_ok() {
                        run_session(peer, s, orx, tx, w).await;
                    }
                }
            }
        });
        self.sessions.insert(
            peer,
            Session::new(
                Some(d.chassis),
                addr,
                is_tls,
                otx,
                written,
                task.abort_handle(),
            ),
        );
    }

    fn accept(&mut self, tcp: TcpStream, addr: SocketAddr) {
        let Some(l) = &self.listening else {
            return;
        };
        let name = format!("state channel {}", l.name);
        if self.sessions.len() >= MAX_SESSIONS {
            tracing::warn!("{name}: refused {addr}: {MAX_SESSIONS} sessions already");
            return;
        }
        let _ = tcp.set_nodelay(true);
        let tls = l.tls.as_ref().map(|t| t.server.clone());
        let is_tls = tls.is_some();
        let peer = self.alloc();
        let (otx, orx) = mpsc::unbounded_channel();
        let written = Arc::new(AtomicU64::new(0));
        let tx = self.tx.clone();
        let w = written.clone();
        let task = tokio::spawn(async move {
            match tls {
                None => {
                    if tx
                        .send(StateEvent::Connected { peer, cn: None })
                        .await
                        .is_ok()
                    {
                        run_session(peer, tcp, orx, tx, w).await;
                    }
                }
                Some(server) => {
                    // Refusals (plain text, no certificate, another CA) are logged there,
                    // naming the listener, the address and the reason.
                    let Some(s) = hf_ovsdb_net::tls::accept(&name, tcp, addr, &server).await else {
                        let _ = tx.send(StateEvent::Refused { peer }).await;
                        return;
                    };
                    let cn = match cert::peer_common_name(s.get_ref().1.peer_certificates()) {
                        Ok(cn) => cn,
                        Err(why) => {
                            tracing::warn!("{name}: refused {addr}: {why}");
                            let _ = tx.send(StateEvent::Refused { peer }).await;
                            return;
                        }
                    };
                    if tx
                        .send(StateEvent::Connected { peer, cn: Some(cn) })
                        .await
                        .is_ok()
                    {
                        run_session(peer, s, orx, tx, w).await;
                    }
                }
            }
        });
        self.sessions.insert(
            peer,
            Session::new(None, addr, is_tls, otx, written, task.abort_handle()),
        );
    }

    /// `datapath/state-sessions`: the listener, then one line per session.
    pub fn sessions_text(&self, dp: &Datapath) -> String {
        let mut out = match &self.listening {
            None => format!("{STATE_OFF}\n"),
            Some(l) => format!(
                "listening on {}{}\n",
                l.name,
                if l.tls.is_some() { " (mutual TLS)" } else { "" }
            ),
        };
        for (&peer, s) in &self.sessions {
            let phase = match s.phase {
                Phase::Connecting => "connecting",
                Phase::Up if dp.state_peer(peer).is_none() => "hello",
                Phase::Up => "up",
                Phase::Closing => "closing",
            };
            out.push_str(&format!(
                "chassis={} address={} direction={} tls={} cert={} state={phase} bytes_in={} \
                 bytes_out={}\n",
                dp.state_peer(peer).or(s.dialed.as_deref()).unwrap_or("-"),
                s.addr,
                if s.dialed.is_some() { "out" } else { "in" },
                if s.tls { "yes" } else { "no" },
                s.cn.as_deref().unwrap_or("-"),
                s.bytes_in,
                s.bytes_out()
            ));
        }
        out
    }
}

/// Connects to `addr` from `from` (the listening IP, so the peer sees this chassis's
/// address), with TLS when `tls` is given.
async fn connect(
    addr: SocketAddr,
    from: IpAddr,
    tls: Option<Arc<ClientConfig>>,
) -> Result<Dialed, String> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| format!("cannot open a socket to {addr}: {e}"))?;
    // From the listening address when it is a concrete one of the same family.
    if !from.is_unspecified() && from.is_ipv4() == addr.is_ipv4() {
        sock.bind(SocketAddr::new(from, 0))
            .map_err(|e| format!("cannot bind {from} to connect to {addr}: {e}"))?;
    }
    let tcp = sock
        .connect(addr)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let Some(cfg) = tls else {
        return Ok(Dialed::Plain(tcp));
    };
    let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let s = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {addr} failed: {e}"))?;
    let cn = cert::peer_common_name(s.get_ref().1.peer_certificates())
        .map_err(|why| format!("{addr} refused: {why}"))?;
    Ok(Dialed::Tls(Box::new(s), Some(cn)))
}

/// Moves one session's bytes both ways until either side ends it; then tells the loop.
async fn run_session<S>(
    peer: PeerId,
    stream: S,
    mut out: mpsc::UnboundedReceiver<Vec<u8>>,
    tx: mpsc::Sender<StateEvent>,
    written: Arc<AtomicU64>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let to_loop = tx.clone();
    let reader = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => return "closed by the peer".to_string(),
                Ok(n) => {
                    let data = buf.get(..n).map(<[u8]>::to_vec).unwrap_or_default();
                    if to_loop
                        .send(StateEvent::Bytes { peer, data })
                        .await
                        .is_err()
                    {
                        return "the datapath is exiting".to_string();
                    }
                }
                Err(e) => return format!("read error: {e}"),
            }
        }
    };
    let writer = async move {
        while let Some(b) = out.recv().await {
            if let Err(e) = wr.write_all(&b).await {
                return Err(format!("write error: {e}"));
            }
            written.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        // Closed by the loop: everything queued is written.
        let _ = wr.shutdown().await;
        Ok(())
    };
    tokio::pin!(reader);
    tokio::pin!(writer);
    let reason = tokio::select! {
        r = &mut reader => r,
        w = &mut writer => match w {
            Err(e) => e,
            Ok(()) => {
                // Give the peer a moment to read the last bytes and end its side (closing
                // with unread bytes would reset the connection under them).
                let _ = tokio::time::timeout(LINGER, &mut reader).await;
                "closed by this datapath".to_string()
            }
        },
    };
    let _ = tx.send(StateEvent::Closed { peer, reason }).await;
}

/// `datapath/migrations`: one line per migration, finished ones first.
pub fn migrations_text(stats: &[MigrationStats]) -> String {
    let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    stats
        .iter()
        .map(|m| {
            format!(
                "port={} role={} peer={} epoch={} precopy={} delta={} final={} moved={} \
                 bytes={} collided={} unmapped={} buffered={} trimmed={} overflowed={} \
                 expired={} held_from_port={} delivered={} started_us={} activated_us={} \
                 completed_us={} outcome={}\n",
                m.port,
                m.role,
                if m.peer.is_empty() { "-" } else { &m.peer },
                m.epoch,
                m.precopy_entries,
                m.delta_entries,
                m.final_delta_entries,
                m.entries_moved,
                m.bytes_moved,
                m.collided,
                m.unmapped,
                m.buffered,
                m.trimmed,
                m.overflowed,
                m.expired,
                m.held_from_port,
                m.delivered_reported,
                m.started_us,
                opt(m.activated_us),
                opt(m.completed_us),
                m.outcome
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_specs_parse() {
        assert_eq!(
            parse_listen("pssl:6643").unwrap(),
            ListenSpec {
                tls: true,
                port: 6643,
                ip: None
            }
        );
        assert_eq!(
            parse_listen("ptcp:0:127.0.0.2").unwrap(),
            ListenSpec {
                tls: false,
                port: 0,
                ip: Some("127.0.0.2".parse().unwrap())
            }
        );
        assert_eq!(
            parse_listen("pssl:6643:[::1]").unwrap().ip,
            Some("::1".parse().unwrap())
        );
        assert_eq!(
            parse_listen("ptcp:6643:::1").unwrap().ip,
            Some("::1".parse().unwrap())
        );
        for bad in [
            "tcp:6643",
            "ptcp:",
            "ptcp:70000",
            "pssl:x",
            "ptcp:1:nohost",
            "punix:/x",
        ] {
            let e = parse_listen(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
