//! The tokio shell around [`Replica`]: dials the remotes the core asks for (`tcp:IP:PORT`,
//! `ssl:IP:PORT` with [`Client::spawn_tls`]'s configuration, `unix:PATH`), moves bytes, reads the clock, and hands events out. All protocol decisions are
//! the core's.
//!
//! [`Client::spawn`] starts a driver task on the current runtime; the [`Client`] handle runs
//! closures against the core ([`Client::with`]), awaits transactions ([`Client::transact`]),
//! and the receiver it returns yields every [`Event`] except the results of transactions
//! awaited through [`Client::transact`].
// The I/O shell is where the clock is read and tasks are spawned.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, oneshot};

use super::txn::{TxnBuilder, TxnId, TxnOutcome};
use super::{Config, Event, Model, Replica};

type Waiters = HashMap<TxnId, oneshot::Sender<(TxnOutcome, u32)>>;

struct Shared<M: Model> {
    core: Replica<M>,
    waiters: Waiters,
    drop_connection: bool,
    offline: bool,
    shutdown: bool,
}

/// A handle on a running replica. Dropping it stops the driver task.
pub struct Client<M: Model> {
    shared: Arc<Mutex<Shared<M>>>,
    wake: Arc<Notify>,
    start: Instant,
    task: tokio::task::JoinHandle<()>,
}

impl<M: Model> std::fmt::Debug for Client<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl<M: Model> Drop for Client<M> {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.wake.notify_one();
        self.task.abort();
    }
}

enum Input {
    Bytes(u64, Vec<u8>),
    Closed(u64),
}

/// The write half of a dialled remote.
pub type Writer = Box<dyn AsyncWrite + Send + Unpin>;
/// The read half of a dialled remote.
pub type Reader = Box<dyn AsyncRead + Send + Unpin>;

/// Connects to an OVSDB remote (`tcp:IP:PORT`, `ssl:IP:PORT` with `tls`, `unix:PATH`); the
/// error names the remote.
pub async fn dial(
    remote: &str,
    tls: Option<&Arc<crate::tls::ClientConfig>>,
) -> std::io::Result<(Reader, Writer)> {
    if let Some(addr) = remote.strip_prefix("ssl:") {
        let Some(cfg) = tls else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{remote}: an ssl: remote needs --private-key, --certificate and --ca-cert"
                ),
            ));
        };
        let s = crate::tls::connect(addr, cfg.clone()).await?;
        let (r, w) = tokio::io::split(s);
        Ok((Box::new(r), Box::new(w)))
    } else if let Some(addr) = remote.strip_prefix("tcp:") {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok((Box::new(r), Box::new(w)))
    } else if let Some(path) = remote.strip_prefix("unix:") {
        let s = tokio::net::UnixStream::connect(path).await?;
        let (r, w) = s.into_split();
        Ok((Box::new(r), Box::new(w)))
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{remote}: a remote is tcp:IP:PORT, ssl:IP:PORT or unix:PATH"),
        ))
    }
}

impl<M: Model> Client<M> {
    /// Start a replica of `remotes` (`cfg.remotes` is set from their number) on the current
    /// tokio runtime.
    pub fn spawn(remotes: Vec<String>, cfg: Config) -> (Self, mpsc::UnboundedReceiver<Event<M>>) {
        Self::spawn_tls(remotes, cfg, None)
    }

    /// [`Client::spawn`], with the TLS configuration `ssl:` remotes use (build it with
    /// [`crate::tls::TlsSettings::client_config`]). Without one, dialing an `ssl:` remote fails
    /// with an error naming the missing options, and the replica keeps backing off.
    pub fn spawn_tls(
        remotes: Vec<String>,
        mut cfg: Config,
        tls: Option<Arc<crate::tls::ClientConfig>>,
    ) -> (Self, mpsc::UnboundedReceiver<Event<M>>) {
        cfg.remotes = remotes.len().max(1);
        let start = Instant::now();
        let shared = Arc::new(Mutex::new(Shared {
            core: Replica::new(cfg, 0),
            waiters: HashMap::new(),
            drop_connection: false,
            offline: false,
            shutdown: false,
        }));
        let wake = Arc::new(Notify::new());
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(drive(
            shared.clone(),
            wake.clone(),
            start,
            remotes,
            tls,
            ev_tx,
        ));
        (
            Client {
                shared,
                wake,
                start,
                task,
            },
            ev_rx,
        )
    }

    /// Run `f` against the core (read the model, change conditions, take a lock, ...).
    pub fn with<R>(&self, f: impl FnOnce(&mut Replica<M>) -> R) -> R {
        let r = f(&mut self.shared.lock().core);
        self.wake.notify_one();
        r
    }

    /// Queue a transaction and wait for its outcome (and the number of attempts).
    pub async fn transact(&self, build: TxnBuilder<M>) -> (TxnOutcome, u32) {
        let (tx, rx) = oneshot::channel();
        {
            let mut sh = self.shared.lock();
            let id = sh.core.transact(build);
            sh.waiters.insert(id, tx);
        }
        self.wake.notify_one();
        rx.await.unwrap_or((
            TxnOutcome::Failed(super::TxnError::Refused("the client stopped".into())),
            0,
        ))
    }

    /// Close the current connection as if the network failed (the replica reconnects).
    pub fn drop_connection(&self) {
        self.shared.lock().drop_connection = true;
        self.wake.notify_one();
    }

    /// Simulate a network outage: while offline, every dial fails at once (the core backs off
    /// as it would for an unreachable server). Combine with [`Client::drop_connection`].
    pub fn set_offline(&self, offline: bool) {
        self.shared.lock().offline = offline;
        self.wake.notify_one();
    }

    /// Wait until `f` holds for the core, checking every 10 ms; false after `timeout`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Replica<M>) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if f(&self.shared.lock().core) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Milliseconds since the client started (the core's clock).
    pub fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// Reads and writes of at least this many bytes get debug log lines with their timings (the
/// cold-start timeline of docs/db-scale.md).
const BIG_IO: usize = 1 << 20;

async fn drive<M: Model>(
    shared: Arc<Mutex<Shared<M>>>,
    wake: Arc<Notify>,
    start: Instant,
    remotes: Vec<String>,
    tls: Option<Arc<crate::tls::ClientConfig>>,
    events: mpsc::UnboundedSender<Event<M>>,
) {
    let now = || start.elapsed().as_millis() as u64;
    let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Input>();
    let mut writer: Option<Writer> = None;
    let mut reader_task: Option<tokio::task::JoinHandle<()>> = None;
    let mut generation = 0u64;
    loop {
        // Drain the core's outputs.
        let (connect, close, transmits, timeout, offline) = {
            let mut guard = shared.lock();
            let sh = &mut *guard;
            if sh.shutdown {
                return;
            }
            if std::mem::take(&mut sh.drop_connection) && writer.is_some() {
                writer = None;
                if let Some(t) = reader_task.take() {
                    t.abort();
                }
                generation += 1;
                sh.core.handle_disconnected(now());
            }
            let connect = sh.core.poll_connect();
            let close = sh.core.poll_close();
            let transmits: Vec<Vec<u8>> = std::iter::from_fn(|| sh.core.poll_transmit()).collect();
            while let Some(ev) = sh.core.poll_event() {
                match ev {
                    Event::TxnDone {
                        id,
                        outcome,
                        attempts,
                    } if sh.waiters.contains_key(&id) => {
                        if let Some(w) = sh.waiters.remove(&id) {
                            let _ = w.send((outcome, attempts));
                        }
                    }
                    other => {
                        let _ = events.send(other);
                    }
                }
            }
            (
                connect,
                close,
                transmits,
                sh.core.poll_timeout(),
                sh.offline,
            )
        };
        if close.is_some() {
            writer = None;
            if let Some(t) = reader_task.take() {
                t.abort();
            }
            generation += 1;
        }
        let mut write_failed = false;
        let sent: usize = transmits.iter().map(Vec::len).sum();
        let write_start = Instant::now();
        if let Some(w) = writer.as_mut() {
            for t in &transmits {
                if w.write_all(t).await.is_err() {
                    write_failed = true;
                    break;
                }
            }
            // A TLS stream may hold records back until flushed (a no-op for plain sockets).
            if !transmits.is_empty() && !write_failed && w.flush().await.is_err() {
                write_failed = true;
            }
        }
        if sent >= BIG_IO && !write_failed {
            // The cold-start timeline (docs/db-scale.md).
            tracing::debug!(
                "{sent} bytes written in {} ms",
                write_start.elapsed().as_millis()
            );
        }
        if write_failed {
            writer = None;
            if let Some(t) = reader_task.take() {
                t.abort();
            }
            generation += 1;
            shared.lock().core.handle_disconnected(now());
            continue;
        }
        if let Some(r) = connect {
            let remote = remotes.get(r).cloned().unwrap_or_default();
            if offline {
                shared.lock().core.handle_disconnected(now());
                continue;
            }
            let dialed =
                tokio::time::timeout(Duration::from_secs(5), dial(&remote, tls.as_ref())).await;
            match dialed {
                Ok(Ok((mut rd, w))) => {
                    generation += 1;
                    let g = generation;
                    let tx = in_tx.clone();
                    reader_task = Some(tokio::spawn(async move {
                        let mut buf = vec![0u8; 256 * 1024];
                        loop {
                            match rd.read(&mut buf).await {
                                Ok(0) | Err(_) => {
                                    let _ = tx.send(Input::Closed(g));
                                    return;
                                }
                                Ok(n) => {
                                    if tx.send(Input::Bytes(g, buf[..n].to_vec())).is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    }));
                    writer = Some(w);
                    shared.lock().core.handle_connected(r, now());
                }
                Ok(Err(e)) => {
                    // As OVS's reconnect: an attempt that fails is logged (a TLS refusal
                    // louder: it will not fix itself).
                    if remote.starts_with("ssl:") {
                        tracing::warn!("{remote}: connection attempt failed: {e}");
                    } else {
                        tracing::info!("{remote}: connection attempt failed: {e}");
                    }
                    shared.lock().core.handle_disconnected(now());
                }
                Err(_) => {
                    tracing::info!("{remote}: connection attempt timed out");
                    shared.lock().core.handle_disconnected(now());
                }
            }
            continue;
        }
        let sleep = timeout.map(|t| t.saturating_sub(now()));
        tokio::select! {
            input = in_rx.recv() => {
                let Some(first) = input else { return };
                // Take whatever else already arrived, so a large sync is applied without a
                // wake-up per read.
                let mut batch = vec![first];
                while let Ok(more) = in_rx.try_recv() {
                    batch.push(more);
                }
                let received: usize = batch
                    .iter()
                    .map(|i| match i {
                        Input::Bytes(_, b) => b.len(),
                        Input::Closed(_) => 0,
                    })
                    .sum();
                let (waited, mut sh) = (Instant::now(), shared.lock());
                let handle_start = Instant::now();
                for input in batch {
                    match input {
                        Input::Bytes(g, b) if g == generation => sh.core.handle_bytes(&b, now()),
                        Input::Closed(g) if g == generation => {
                            writer = None;
                            reader_task = None;
                            generation += 1;
                            sh.core.handle_disconnected(now());
                        }
                        _ => {}
                    }
                }
                if received >= BIG_IO {
                    tracing::debug!(
                        "{received} bytes received and handled in {} ms (waited {} ms for the replica)",
                        handle_start.elapsed().as_millis(),
                        (handle_start - waited).as_millis()
                    );
                }
            }
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(sleep.unwrap_or(3_600_000))) => {
                shared.lock().core.handle_timeout(now());
            }
        }
    }
}
