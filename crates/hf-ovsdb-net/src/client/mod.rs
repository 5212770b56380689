//! The OVSDB client replica every component stands on: a typed replica ([`model::Model`]:
//! `hf-model`'s NB and SB snapshots) of chosen tables, columns and rows of one database, kept
//! in sync by a sans-I/O session core ([`Replica`]) that a thin tokio shell ([`shell`]) or the
//! simulator drives.
//!
//! What it does: `monitor_cond_since` with fallback to `monitor_cond` and `monitor`, conditions
//! changed at run time (`monitor_cond_change`), typed change sets ([`Event::Changes`]),
//! reconnection with backoff over a list of remotes, inactivity probes, resync that transfers
//! only missed changes when the server still has them, leader/up-to-date checks through
//! `_Server` for clustered databases ([`cluster`]), transactions with `wait`-based optimistic
//! concurrency and retry ([`txn`]), and one lock (`lock`/`steal`/`unlock`). Large messages are
//! read without one JSON tree per message: the first sync's reply streams into the model a
//! batch of rows at a time ([`Model::load_rows`]), and update notifications of a mebibyte or
//! more are typed batch by batch ([`Model::stage_updates2_batches`]); see `stream.rs`.
//!
//! What it does not do: open sockets or read clocks (the shell and the simulator do), or
//! validate rows against the schema (the server does; the model keeps what it receives).

pub mod cluster;
pub mod model;
mod session;
#[cfg(test)]
pub(crate) use session::session_stream_min;
pub mod shell;
mod stream;
pub mod txn;

#[cfg(test)]
mod tests;

use serde_json::Value;

pub use cluster::{MemberRejection, ServerInfo};
pub use model::{Model, Staged};
pub use session::Replica;
pub use shell::Client;
pub use txn::{OpsText, TextTxnBuilder, TxnBuilder, TxnError, TxnId, TxnOutcome};

/// Which monitor method a session uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MonitorMethod {
    /// `monitor_cond_since` (update3): resync sends only missed changes.
    Since,
    /// `monitor_cond` (update2).
    Cond,
    /// `monitor` (RFC 7047 update): no conditions, full rows.
    Plain,
}

impl MonitorMethod {
    /// The method name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            MonitorMethod::Since => "monitor_cond_since",
            MonitorMethod::Cond => "monitor_cond",
            MonitorMethod::Plain => "monitor",
        }
    }
}

/// One table to replicate.
#[derive(Debug, Clone, PartialEq)]
pub struct TableSelect {
    /// The table name.
    pub name: String,
    /// The columns (None: all).
    pub columns: Option<Vec<String>>,
    /// The `where` clauses rows must satisfy (None: every row). Ignored by `monitor`.
    pub condition: Option<Vec<Value>>,
}

impl TableSelect {
    /// Every column and row of `name`.
    pub fn all(name: &str) -> Self {
        TableSelect {
            name: name.to_string(),
            columns: None,
            condition: None,
        }
    }
}

/// Replica settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// How many remotes the shell can dial (indices `0..remotes`).
    pub remotes: usize,
    /// The tables to replicate (empty: every table of the model the server has).
    pub tables: Vec<TableSelect>,
    /// Only use a cluster's leader (for writers); otherwise any connected, up-to-date member.
    pub leader_only: bool,
    /// Dial the remotes in an order shuffled by this seed (ovsdb-cs's `shuffle_remotes`, on by
    /// default in OVS, so that the clients of a cluster spread over its members); `None`: in
    /// the order given. The core has no random source: the caller picks the seed (a chassis
    /// uses its name, so the order is stable per chassis and differs between chassis).
    pub shuffle_seed: Option<u64>,
    /// Probe a silent server after this long, drop it after as long again (None: never).
    pub probe_interval_ms: Option<u64>,
    /// First backoff after a round of failed remotes.
    pub backoff_min_ms: u64,
    /// Backoff ceiling.
    pub backoff_max_ms: u64,
    /// Attempts before a conflicting transaction fails.
    pub max_txn_attempts: u32,
    /// Retry a conflicting transaction after this long even without a newer update.
    pub txn_retry_ms: u64,
    /// Largest message accepted.
    pub max_message: usize,
    /// Report the first sync into an empty replica as [`Event::Changes`] too. Off by default:
    /// the first sync is applied table by table without building a change set (half the
    /// memory); the consumer reads [`Replica::model`] after [`Event::Resynced`] with
    /// `initial: true`.
    pub initial_changes: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            remotes: 1,
            tables: Vec::new(),
            leader_only: true,
            shuffle_seed: None,
            probe_interval_ms: Some(5_000),
            backoff_min_ms: 100,
            backoff_max_ms: 8_000,
            max_txn_attempts: 20,
            txn_retry_ms: 1_000,
            max_message: 1 << 30,
            initial_changes: false,
        }
    }
}

/// Counters (monotonic over the replica's life).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Dials handed to the shell.
    pub connects: u64,
    /// Completed (re)syncs.
    pub syncs: u64,
    /// Row entries received in monitor replies and updates.
    pub rows_received: u64,
    /// Update notifications received.
    pub updates_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Monitor method fallbacks.
    pub fallbacks: u64,
    /// Members rejected (not leader, behind, not connected).
    pub members_rejected: u64,
    /// Connections dropped for silence.
    pub probe_timeouts: u64,
    /// Times the replica waited before dialing again.
    pub backoffs: u64,
    /// Transactions sent (each attempt).
    pub txns_sent: u64,
    /// Transactions committed.
    pub txns_committed: u64,
    /// Conflicts retried.
    pub txns_retried: u64,
    /// Transactions whose connection died before the reply.
    pub txns_outcome_unknown: u64,
    /// Transactions failed.
    pub txns_failed: u64,
    /// Last sync: milliseconds from sending the monitor request to the first byte of any
    /// answer (the server's own work: ovsdb-server builds the whole reply first).
    pub last_sync_wait_ms: u64,
    /// Last sync: milliseconds from that first byte to the call that completed the sync, by
    /// the `now` of the calls (the transfer; the processing inside the last call is not
    /// included, since the core never reads a clock).
    pub last_sync_receive_ms: u64,
}

/// What the replica tells its user.
#[non_exhaustive]
pub enum Event<M: Model> {
    /// A session is synced on `remote`.
    Connected {
        /// The remote's index.
        remote: usize,
        /// The monitor method in use.
        method: MonitorMethod,
    },
    /// The replica is in sync again; `rows` row entries came in the monitor reply (only the
    /// missed changes when `full` is false). Preceded by [`Event::Changes`] for what the sync
    /// changed, except for the first sync into an empty replica unless
    /// [`Config::initial_changes`] asks for it (read [`Replica::model`] then).
    Resynced {
        /// Whether the server sent every row (not just the missed changes).
        full: bool,
        /// Row entries received.
        rows: usize,
        /// The first sync of this replica.
        initial: bool,
    },
    /// Rows changed.
    Changes(M::Delta),
    /// A connection ended, failed, or was refused.
    Disconnected {
        /// The remote's index.
        remote: usize,
        /// Why.
        reason: String,
    },
    /// A transaction finished.
    TxnDone {
        /// Which.
        id: TxnId,
        /// How.
        outcome: TxnOutcome,
        /// Times it was built and sent.
        attempts: u32,
    },
    /// The lock is ours.
    LockAcquired(String),
    /// The lock is no longer ours.
    LockLost(String),
    /// Something the operator should know that did not end the session.
    Warning(String),
}

impl<M: Model> std::fmt::Debug for Event<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Connected { remote, method } => write!(f, "Connected({remote}, {method:?})"),
            Event::Resynced {
                full,
                rows,
                initial,
            } => write!(f, "Resynced(full={full}, rows={rows}, initial={initial})"),
            Event::Changes(d) => write!(f, "Changes({} rows)", M::delta_len(d)),
            Event::Disconnected { remote, reason } => write!(f, "Disconnected({remote}: {reason})"),
            Event::TxnDone {
                id,
                outcome,
                attempts,
            } => write!(f, "TxnDone({id:?}, {outcome:?}, attempts={attempts})"),
            Event::LockAcquired(n) => write!(f, "LockAcquired({n})"),
            Event::LockLost(n) => write!(f, "LockLost({n})"),
            Event::Warning(w) => write!(f, "Warning({w})"),
        }
    }
}

/// The order in which a replica with `cfg` dials its remotes (a permutation of
/// `0..cfg.remotes`): the given order, or a Fisher–Yates shuffle driven by
/// [`Config::shuffle_seed`] (splitmix64).
pub fn remote_order(cfg: &Config) -> Vec<usize> {
    let n = cfg.remotes.max(1);
    let mut order: Vec<usize> = (0..n).collect();
    if let Some(seed) = cfg.shuffle_seed {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for i in (1..n).rev() {
            let j = (next() % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
    }
    order
}

/// Split a remote list as OVSDB tools spell it (`tcp:A:1,tcp:B:2`).
pub fn parse_remotes(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string)
        .collect()
}
