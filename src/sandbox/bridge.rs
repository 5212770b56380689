//! The sandbox's bridge between real TCP clients and the simulated world's in-memory OVSDB
//! server: tokio listeners on 127.0.0.1 whose connections are sessions of the world's server,
//! and the one task that owns the world and drives it on the wall clock.
//!
//! # What it does
//!
//! - [`Listeners::bind`]: one listener per database port (`--nb-port`, `--sb-port`; 0 picks a
//!   free port). Like `holdfast db` on its default remotes, every database is served on every
//!   port; the two ports exist so that `ovn-nbctl` and `ovn-sbctl` find them where OVN's tools
//!   look by convention.
//! - Each accepted connection is one task that moves bytes: what the client sends becomes
//!   [`SimHost::db_input`] of its session, what the world answers ([`SimHost::db_poll_output`])
//!   is written back. A session the world closes closes the connection.
//! - [`drive`]: the single task that owns the world (no lock around it). It advances the world
//!   to the wall clock whenever the world's next deadline passes or input arrives, flushes every
//!   session's output, and gives the sandbox a hook ([`SimHost::after_step`]) to react (a new
//!   host to ping). The world's virtual clock may run ahead of the wall clock (a story runs in
//!   virtual time as fast as the CPU allows); the driver then keeps the offset, so the world
//!   never pauses waiting for the wall clock to catch up.
//! - Control commands ([`Control`], from the sandbox's unixctl socket, see [`super::ctl`])
//!   reach the same task as [`Event::Control`] and run inside its world access
//!   ([`SimHost::control`]), between two steps of the world, never concurrently with one.
//!
//! # What it does not do
//!
//! No TLS, and no unix sockets for the databases: the sandbox is a local playground on
//! loopback. No backpressure beyond the kernel's socket buffers (a client that stops reading
//! grows its queue).

// The bridge is an I/O shell: sockets, the clock, tasks.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A session id of the world's OVSDB server.
pub type SessionId = u64;

/// What the bridge needs from the simulated world: its OVSDB sessions as bytes, and its clock.
pub trait SimHost {
    /// Open a session of the in-memory OVSDB server (NB and SB).
    fn db_connect(&mut self) -> SessionId;
    /// Bytes a client sent on a session (any split of its JSON-RPC stream).
    fn db_input(&mut self, sid: SessionId, data: &[u8]);
    /// Bytes for the client of a session, or None once drained.
    fn db_poll_output(&mut self, sid: SessionId) -> Option<Vec<u8>>;
    /// Whether the server closed the session (a protocol error, say): the bridge then closes
    /// the connection once its output is written.
    fn db_closed(&self, sid: SessionId) -> bool;
    /// The client went away.
    fn db_disconnect(&mut self, sid: SessionId);
    /// The world's virtual time.
    fn now(&self) -> Duration;
    /// When the world next wants to run, if it does.
    fn next_deadline(&self) -> Option<Duration>;
    /// Run everything due up to `now`.
    fn advance_to(&mut self, now: Duration);
    /// Called after every step of the driver, with the world up to date: the sandbox's own
    /// reactions (pinging a newly attached host, printing what happened, answering control
    /// commands that waited for the world). May advance the world's clock further.
    fn after_step(&mut self) {}
    /// A control command: answer through `c.reply` now, or keep it and answer from a later
    /// [`SimHost::after_step`] (a command that waits for the world must not block the driver).
    fn control(&mut self, c: Control) {
        let _ = c
            .reply
            .send(Err(format!("\"{}\": no control commands here", c.method)));
    }
}

/// One control command (a well-formed unixctl request) and where its answer goes: `Ok(text)`
/// is the reply, `Err(text)` the error `ovs-appctl` prints before it exits with status 2.
#[derive(Debug)]
pub struct Control {
    /// The command (`sandbox/ping`, ...).
    pub method: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The answer.
    pub reply: tokio::sync::oneshot::Sender<Result<String, String>>,
}

/// The bound listeners.
#[derive(Debug)]
pub struct Listeners {
    nb: TcpListener,
    sb: TcpListener,
}

impl Listeners {
    /// Bind 127.0.0.1:`nb_port` and 127.0.0.1:`sb_port` (0 = ephemeral).
    pub async fn bind(nb_port: u16, sb_port: u16) -> anyhow::Result<Listeners> {
        let bind = |port: u16, what: &'static str| async move {
            TcpListener::bind(("127.0.0.1", port))
                .await
                .with_context(|| format!("cannot listen on tcp:127.0.0.1:{port} ({what})"))
        };
        let nb = bind(nb_port, "NB, --nb-port").await?;
        let sb = bind(sb_port, "SB, --sb-port").await?;
        Ok(Listeners { nb, sb })
    }

    /// The bound NB and SB addresses.
    pub fn addrs(&self) -> anyhow::Result<(SocketAddr, SocketAddr)> {
        Ok((self.nb.local_addr()?, self.sb.local_addr()?))
    }

    /// Accept connections on both listeners for ever, announcing each to the driver.
    pub fn spawn(self, events: mpsc::UnboundedSender<Event>) {
        let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
        for l in [self.nb, self.sb] {
            let events = events.clone();
            let next = next.clone();
            tokio::spawn(async move {
                loop {
                    match l.accept().await {
                        Ok((stream, _peer)) => {
                            let conn = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let (tx, rx) = mpsc::unbounded_channel();
                            if events.send(Event::Connect { conn, out: tx }).is_err() {
                                return;
                            }
                            tokio::spawn(connection(conn, stream, rx, events.clone()));
                        }
                        Err(e) => {
                            eprintln!("sandbox: accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            });
        }
    }
}

/// What reaches the driver from the connections.
#[derive(Debug)]
pub enum Event {
    /// A new connection, with the channel its output goes to.
    Connect {
        /// The connection's id (the bridge's, not the server's session id).
        conn: u64,
        /// Where the world's bytes for it go; dropped to close the connection.
        out: mpsc::UnboundedSender<Vec<u8>>,
    },
    /// Bytes from a connection.
    Input(u64, Vec<u8>),
    /// A connection ended.
    Disconnect(u64),
    /// A control command.
    Control(Control),
}

/// One connection: reads become [`Event::Input`], the channel's bytes are written back; when
/// the driver drops the channel (the server closed the session) the connection is shut down.
async fn connection(
    conn: u64,
    mut stream: TcpStream,
    mut out: mpsc::UnboundedReceiver<Vec<u8>>,
    events: mpsc::UnboundedSender<Event>,
) {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.split();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if events.send(Event::Input(conn, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            },
            o = out.recv() => match o {
                Some(bytes) => {
                    if wr.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                None => {
                    let _ = wr.shutdown().await;
                    break;
                }
            },
        }
    }
    let _ = events.send(Event::Disconnect(conn));
}

/// The world's clock against the wall clock: virtual = wall elapsed + offset, where the offset
/// grows whenever the world ran ahead (a story in virtual time).
#[derive(Debug)]
pub struct WallClock {
    origin: Instant,
    offset: Duration,
}

impl WallClock {
    /// A clock whose virtual time is `world_now` at this instant.
    pub fn starting_at(world_now: Duration) -> WallClock {
        WallClock {
            origin: Instant::now(),
            offset: world_now,
        }
    }

    /// The virtual time the wall clock says it is.
    pub fn virtual_now(&self) -> Duration {
        self.origin.elapsed() + self.offset
    }

    /// Take in a world that ran ahead of the wall clock.
    pub fn catch_up(&mut self, world_now: Duration) {
        let v = self.virtual_now();
        if world_now > v {
            self.offset += world_now - v;
        }
    }

    /// Make virtual time `world_now` at this instant (the wall clock jumped ahead of what the
    /// world could follow, e.g. after the machine was suspended).
    pub fn rebase(&mut self, world_now: Duration) {
        self.origin = Instant::now();
        self.offset = world_now;
    }

    /// The wall-clock instant of virtual time `t`.
    pub fn instant_of(&self, t: Duration) -> tokio::time::Instant {
        let now = tokio::time::Instant::now();
        match t.checked_sub(self.virtual_now()) {
            Some(ahead) => now + ahead,
            None => now,
        }
    }
}

/// Longest the driver sleeps without looking at the world (a safety net for a deadline the
/// world did not announce).
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// Most virtual time one step of the driver runs: a wall clock further ahead (the machine was
/// suspended, the process stopped) is not caught up on, the world just resumes from there.
const MAX_STEP: Duration = Duration::from_secs(2);

/// Virtual time run between two looks at the wall clock while catching up.
const CHUNK: Duration = Duration::from_millis(20);

/// Longest the driver runs the world before it serves its connections again: a world that
/// runs slower than the wall clock (a debug build, a loaded machine) falls behind rather than
/// leave the databases' clients unanswered (ovn-nbctl gives up after 5 s without an echo).
const MAX_BUSY: Duration = Duration::from_millis(250);

/// Runs `world` towards `target` in [`CHUNK`]s for at most [`MAX_BUSY`] of wall time; what is
/// left is run on the next turns of the driver.
fn advance_bounded<W: SimHost>(world: &mut W, target: Duration) {
    let give_up = tokio::time::Instant::now() + MAX_BUSY;
    while world.now() < target {
        let step = (world.now() + CHUNK).min(target);
        world.advance_to(step);
        if tokio::time::Instant::now() >= give_up {
            break;
        }
    }
}

/// Own `world` and drive it on the wall clock for ever (until `stop` resolves), serving the
/// connections that `events` announces.
pub async fn drive<W: SimHost>(
    world: &mut W,
    mut events: mpsc::UnboundedReceiver<Event>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut clock = WallClock::starting_at(world.now());
    let mut conns: BTreeMap<u64, (SessionId, mpsc::UnboundedSender<Vec<u8>>)> = BTreeMap::new();
    tokio::pin!(stop);
    loop {
        let wake = world
            .next_deadline()
            .map(|d| clock.instant_of(d))
            .unwrap_or_else(|| tokio::time::Instant::now() + MAX_SLEEP)
            .min(tokio::time::Instant::now() + MAX_SLEEP);
        tokio::select! {
            biased;
            _ = &mut stop => return,
            ev = events.recv() => {
                let Some(ev) = ev else { return };
                let now = clock.virtual_now().max(world.now()).min(world.now() + MAX_STEP);
                advance_bounded(world, now);
                handle_event(world, &mut conns, ev);
                // Take every event already queued before running the world again.
                while let Ok(ev) = events.try_recv() {
                    handle_event(world, &mut conns, ev);
                }
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
        let target = clock.virtual_now().max(world.now());
        if target > world.now() + MAX_STEP {
            clock.rebase(world.now() + MAX_STEP);
        }
        let now = clock.virtual_now().max(world.now());
        advance_bounded(world, now);
        world.after_step();
        clock.catch_up(world.now());
        flush(world, &mut conns);
    }
}

fn handle_event<W: SimHost>(
    world: &mut W,
    conns: &mut BTreeMap<u64, (SessionId, mpsc::UnboundedSender<Vec<u8>>)>,
    ev: Event,
) {
    match ev {
        Event::Connect { conn, out } => {
            let sid = world.db_connect();
            conns.insert(conn, (sid, out));
        }
        Event::Input(conn, data) => {
            if let Some((sid, _)) = conns.get(&conn) {
                world.db_input(*sid, &data);
            }
        }
        Event::Disconnect(conn) => {
            if let Some((sid, _)) = conns.remove(&conn) {
                world.db_disconnect(sid);
            }
        }
        Event::Control(c) => world.control(c),
    }
}

/// Hand every session's output to its connection; drop the connections the server closed.
fn flush<W: SimHost>(
    world: &mut W,
    conns: &mut BTreeMap<u64, (SessionId, mpsc::UnboundedSender<Vec<u8>>)>,
) {
    let mut closed = Vec::new();
    for (conn, (sid, out)) in conns.iter() {
        while let Some(bytes) = world.db_poll_output(*sid) {
            let _ = out.send(bytes);
        }
        if world.db_closed(*sid) {
            closed.push(*conn);
        }
    }
    for conn in closed {
        if let Some((sid, _out)) = conns.remove(&conn) {
            // Dropping `_out` closes the connection after what was queued is written.
            world.db_disconnect(sid);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The bridge against a bare in-memory OVSDB server core (no northd, no chassis), with real
    //! `ovn-nbctl`/`ovsdb-client` as the clients.

    use super::*;
    use hf_ovsdb::{Database, Schema};
    use hf_ovsdb_net::framing::Framer;
    use hf_ovsdb_net::server::{Config, Core, Now, Output};
    use std::collections::{BTreeSet, VecDeque};
    use std::sync::Arc;

    struct CoreHost {
        core: Core,
        now: Duration,
        framers: BTreeMap<SessionId, Framer>,
        out: BTreeMap<SessionId, VecDeque<Vec<u8>>>,
        closed: BTreeSet<SessionId>,
    }

    impl CoreHost {
        fn new() -> CoreHost {
            let mut core = Core::new(Config::default(), 7);
            for text in [
                include_str!("../../schemas/ovn-nb.ovsschema"),
                include_str!("../../schemas/ovn-sb.ovsschema"),
            ] {
                let schema = Arc::new(Schema::parse(text).unwrap());
                core.add_database(Database::new(schema, 7), None, Vec::new())
                    .unwrap();
            }
            CoreHost {
                core,
                now: Duration::ZERO,
                framers: BTreeMap::new(),
                out: BTreeMap::new(),
                closed: BTreeSet::new(),
            }
        }
        fn t(&self) -> Now {
            Now {
                mono_ms: self.now.as_millis() as u64,
                wall_ms: 1_700_000_000_000 + self.now.as_millis() as u64,
            }
        }
        fn dispatch(&mut self) {
            let outs: Vec<Output> = self.core.poll_output().collect();
            for o in outs {
                match o {
                    Output::Send(sid, b) => self.out.entry(sid).or_default().push_back(b),
                    Output::Close(sid, _) => {
                        self.closed.insert(sid);
                    }
                    Output::Log(_) => {}
                }
            }
        }
    }

    impl SimHost for CoreHost {
        fn db_connect(&mut self) -> SessionId {
            let sid = self.core.connect(self.t());
            self.framers.insert(sid, Framer::new(64 << 20));
            sid
        }
        fn db_input(&mut self, sid: SessionId, data: &[u8]) {
            let now = self.t();
            let Some(f) = self.framers.get_mut(&sid) else {
                return;
            };
            f.push(data);
            let mut msgs = Vec::new();
            while let Some(m) = f.next_message() {
                match m {
                    Ok(v) => msgs.push(v),
                    Err(_) => {
                        self.closed.insert(sid);
                        break;
                    }
                }
            }
            for m in msgs {
                self.core.handle(sid, m, now);
            }
            self.dispatch();
        }
        fn db_poll_output(&mut self, sid: SessionId) -> Option<Vec<u8>> {
            self.out.get_mut(&sid)?.pop_front()
        }
        fn db_closed(&self, sid: SessionId) -> bool {
            self.closed.contains(&sid)
        }
        fn db_disconnect(&mut self, sid: SessionId) {
            self.core.disconnect(sid);
            self.framers.remove(&sid);
            self.out.remove(&sid);
            self.closed.remove(&sid);
            self.dispatch();
        }
        fn now(&self) -> Duration {
            self.now
        }
        fn next_deadline(&self) -> Option<Duration> {
            self.core.poll_timeout().map(Duration::from_millis)
        }
        fn advance_to(&mut self, now: Duration) {
            self.now = self.now.max(now);
            let t = self.t();
            self.core.tick(t);
            self.dispatch();
        }
    }

    /// The clock follows the wall clock from where the world is, and keeps a world that ran
    /// ahead (a story) instead of waiting for the wall clock to catch up.
    #[test]
    fn wall_clock_keeps_the_world_ahead() {
        let mut c = WallClock::starting_at(Duration::from_secs(5));
        let v = c.virtual_now();
        assert!(
            v >= Duration::from_secs(5) && v < Duration::from_secs(6),
            "{v:?}"
        );
        c.catch_up(Duration::from_secs(100));
        let v = c.virtual_now();
        assert!(
            v >= Duration::from_secs(100) && v < Duration::from_secs(101),
            "{v:?}"
        );
        // A world behind the clock changes nothing.
        c.catch_up(Duration::from_secs(1));
        assert!(c.virtual_now() >= Duration::from_secs(100));
        // Rebasing moves the clock back to the world.
        c.rebase(Duration::from_secs(50));
        let v = c.virtual_now();
        assert!(
            v >= Duration::from_secs(50) && v < Duration::from_secs(51),
            "{v:?}"
        );
        // A deadline in the past is now; one ahead is that far ahead.
        let now = tokio::time::Instant::now();
        assert!(c.instant_of(Duration::from_secs(1)) <= now + Duration::from_millis(50));
        let ahead = c.instant_of(c.virtual_now() + Duration::from_secs(3));
        assert!(
            ahead >= now + Duration::from_millis(2900),
            "{:?}",
            ahead - now
        );
    }

    fn have(tool: &str) -> bool {
        let ok = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            let msg = format!("bridge test: missing {tool} (scripts/test.sh installs it)");
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("SKIP {msg}");
        }
        ok
    }

    /// Real ovn-nbctl writes through the bridge and real ovsdb-client reads it back, on both
    /// ports; a malformed stream gets its connection closed and the bridge stays up.
    #[test]
    fn real_clients_through_the_bridge() {
        if !have("ovn-nbctl") || !have("ovsdb-client") {
            return;
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (nb, sb, stop_tx) = rt.block_on(async {
            let l = Listeners::bind(0, 0).await.unwrap();
            let (nb, sb) = l.addrs().unwrap();
            let (tx, rx) = mpsc::unbounded_channel();
            l.spawn(tx);
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(async move {
                let mut w = CoreHost::new();
                drive(&mut w, rx, async {
                    let _ = stop_rx.await;
                })
                .await;
            });
            (nb, sb, stop_tx)
        });
        let run = |args: &[String]| {
            let out = std::process::Command::new(&args[0])
                .args(&args[1..])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let nbdb = format!("--db=tcp:{nb}");
        run(&s(&["ovn-nbctl", "--timeout=10", &nbdb, "ls-add", "sw0"]));
        run(&s(&[
            "ovn-nbctl",
            "--timeout=10",
            &nbdb,
            "lsp-add",
            "sw0",
            "p1",
            "--",
            "lsp-set-addresses",
            "p1",
            "00:00:00:00:00:01 10.0.0.1",
        ]));
        let show = run(&s(&["ovn-nbctl", "--timeout=10", &nbdb, "show"]));
        assert!(show.contains("switch") && show.contains("(sw0)"), "{show}");
        assert!(show.contains("port p1"), "{show}");
        // The other port serves the same databases.
        let dump = run(&s(&[
            "ovsdb-client",
            "--timeout=10",
            "dump",
            &format!("tcp:{sb}"),
            "OVN_Northbound",
            "Logical_Switch_Port",
            "name",
        ]));
        assert!(dump.contains("p1"), "{dump}");
        let dbs = run(&s(&["ovsdb-client", "list-dbs", &format!("tcp:{sb}")]));
        assert!(dbs.contains("OVN_Southbound"), "{dbs}");
        // Garbage closes that connection only.
        {
            use std::io::{Read, Write};
            let mut c = std::net::TcpStream::connect(nb).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(b"]]]not json").unwrap();
            let mut buf = Vec::new();
            let _ = c.read_to_end(&mut buf);
        }
        let show = run(&s(&["ovn-nbctl", "--timeout=10", &nbdb, "show"]));
        assert!(show.contains("port p1"), "{show}");
        let _ = stop_tx.send(());
        rt.shutdown_timeout(Duration::from_secs(2));
    }
}
