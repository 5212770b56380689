//! The chassis's local OVS database as the controller and the datapath each replicate it: a
//! client replica of chosen tables and columns of `Open_vSwitch` (OVS's own schema, typed by
//! `hf_model::vswitch`), its events turned into "the rows changed", and one write at a time
//! with its outcome kept for a retry. What each daemon reads and writes is its own module's
//! (`controller/local.rs`, `datapath/local.rs`).
// An I/O shell: the write runs as a task.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use hf_model::VswitchSnapshot;
use hf_ovsdb_net::client::{Client, Config, Event, TableSelect, TxnBuilder, TxnOutcome};
use tokio::sync::mpsc::UnboundedReceiver;

/// A replica of the local database.
pub struct Replica {
    /// The remote (`unix:PATH`, `tcp:IP:PORT`).
    pub remote: String,
    /// The client (shared with the writes on their way).
    pub client: Arc<Client<VswitchSnapshot>>,
    events: UnboundedReceiver<Event<VswitchSnapshot>>,
    /// In sync with the server.
    pub synced: bool,
    /// The one write on its way, and how the last one ended.
    writing: Arc<AtomicU8>,
}

const IDLE: u8 = 0;
const WRITING: u8 = 1;
/// The last write failed: write again.
const FAILED: u8 = 2;

impl Replica {
    /// Starts replicating `tables` (name, columns) of `remote`; it keeps reconnecting while
    /// the database is not there.
    pub fn spawn(remote: &str, tables: &[(&str, &[&str])]) -> Self {
        let cfg = Config {
            tables: tables
                .iter()
                .map(|(t, cols)| TableSelect {
                    name: (*t).into(),
                    columns: Some(cols.iter().map(|c| (*c).to_string()).collect()),
                    condition: None,
                })
                .collect(),
            backoff_min_ms: 100,
            backoff_max_ms: 2_000,
            ..Config::default()
        };
        let (client, events) = Client::<VswitchSnapshot>::spawn(vec![remote.to_string()], cfg);
        Replica {
            remote: remote.to_string(),
            client: Arc::new(client),
            events,
            synced: false,
            writing: Arc::default(),
        }
    }

    /// Waits for the next event and takes it in: `Some(true)` when the rows changed (or a
    /// sync brought them), `Some(false)` for anything else, `None` when the replica stopped.
    pub async fn next(&mut self) -> Option<bool> {
        let e = self.events.recv().await?;
        Some(match e {
            Event::Resynced { .. } => {
                if !self.synced {
                    tracing::info!("local database {}: connected", self.remote);
                }
                self.synced = true;
                true
            }
            Event::Changes(_) => true,
            Event::Disconnected { reason, .. } => {
                if self.synced {
                    tracing::warn!("local database {}: {reason}", self.remote);
                } else {
                    tracing::debug!("local database {}: {reason}", self.remote);
                }
                self.synced = false;
                false
            }
            Event::Warning(w) => {
                tracing::warn!("local database {}: {w}", self.remote);
                false
            }
            _ => false,
        })
    }

    /// Runs `f` on the rows.
    pub fn with<R>(&self, f: impl FnOnce(&VswitchSnapshot) -> R) -> R {
        self.client.with(|r| f(r.model()))
    }

    /// Whether a write is on its way.
    pub fn writing(&self) -> bool {
        self.writing.load(Ordering::Acquire) == WRITING
    }

    /// Whether the last write failed (and has not been tried again).
    pub fn last_write_failed(&self) -> bool {
        self.writing.load(Ordering::Acquire) == FAILED
    }

    /// Sends the transaction `build` makes from the rows (rebuilt on a retry); `what` names it
    /// in the warning a failure logs.
    pub fn write(&self, what: &'static str, build: TxnBuilder<VswitchSnapshot>) {
        self.writing.store(WRITING, Ordering::Release);
        let (client, writing, remote) = (
            Arc::clone(&self.client),
            Arc::clone(&self.writing),
            self.remote.clone(),
        );
        tokio::spawn(async move {
            let (outcome, _) = client.transact(build).await;
            let next = match outcome {
                TxnOutcome::Failed(e) => {
                    tracing::warn!("local database {remote}: writing {what} failed: {e}");
                    FAILED
                }
                _ => IDLE,
            };
            writing.store(next, Ordering::Release);
        });
    }
}
