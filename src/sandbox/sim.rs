//! The sandbox's handle on the simulated world: every call the sandbox makes into `hf_sim`
//! goes through here, so the rest of the sandbox speaks of switches, hosts and results.
//!
//! Interim: the world's database and holdfast northd only (no chassis yet).

use std::time::Duration;

use anyhow::anyhow;
use hf_sim::world::db::{Db, NB, SB};
use hf_sim::world::nb::Txn;
use hf_sim::world::northd::NorthdNode;

use super::bridge::{SessionId, SimHost};
use super::topology::Topology;

/// A host of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// Its name (the logical port's).
    pub name: String,
    /// Its IPv4 address, once it has one.
    pub ip: Option<String>,
    /// The chassis its port is on.
    pub chassis: String,
}

/// A ping started with [`Sim::start_ping`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingId {
    /// The pinging host.
    pub host: String,
    /// The session's name in the host's record.
    pub name: String,
}

/// A ping's outcome so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingResult {
    /// The pinging host.
    pub from: String,
    /// Requests to send, sent, answered.
    pub count: u64,
    /// Sent.
    pub sent: u64,
    /// Answered.
    pub answered: u64,
    /// Round-trip times of the answered ones (µs).
    pub rtts_us: Vec<u64>,
    /// Every request answered or timed out.
    pub done: bool,
}

/// A TCP transfer started with [`Sim::start_tcp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpId {
    /// Client host.
    pub from: String,
    /// Server host.
    pub to: String,
    /// The connection's name in the records.
    pub name: String,
}

/// A TCP transfer's outcome so far, from both ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpResult {
    /// Bytes the receiver got in order.
    pub bytes_received: u64,
    /// Bytes the receiver checked against the pattern.
    pub bytes_verified: u64,
    /// Bytes expected.
    pub bytes_expected: u64,
    /// From opening to the last byte verified (µs).
    pub elapsed_us: u64,
    /// The client's outcome (`complete`, `running`, `reset`, ...).
    pub outcome: String,
    /// The client's address as the server saw it.
    pub server_saw: String,
}

impl TcpResult {
    /// Every byte arrived and matched.
    pub fn complete(&self) -> bool {
        self.bytes_expected > 0 && self.bytes_verified == self.bytes_expected
    }
    /// Nothing more will happen.
    pub fn finished(&self) -> bool {
        self.complete() || (self.outcome != "running" && !self.outcome.is_empty())
    }
    /// The IP part of [`TcpResult::server_saw`].
    pub fn server_saw_ip(&self) -> &str {
        self.server_saw
            .rsplit_once(':')
            .map_or(self.server_saw.as_str(), |(ip, _)| ip)
    }
}

/// The world.
pub struct Sim {
    db: Db,
    northd: NorthdNode,
    now: Duration,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("now", &self.now).finish()
    }
}

impl Sim {
    /// A world seeded by `seed`.
    pub fn new(seed: u64, _topo: &Topology) -> anyhow::Result<Sim> {
        let now = Duration::ZERO;
        let db = Db::new(seed, None, now).map_err(|e| anyhow!("the world's database: {e}"))?;
        Ok(Sim {
            db,
            northd: NorthdNode::new(seed, now),
            now,
        })
    }

    /// One NB transaction (the builders of `hf_sim::world::nb`).
    pub fn nb(&mut self, txn: Txn) -> anyhow::Result<()> {
        self.db
            .transact(NB, txn, self.now)
            .map(|_| ())
            .map_err(|e| anyhow!("{e}"))
    }

    /// Rows of an SB table.
    pub fn sb_rows(&self, table: &str) -> usize {
        self.db
            .database(SB)
            .and_then(|d| d.schema.table_index(table).map(|i| d.tables[i].rows.len()))
            .unwrap_or(0)
    }

    /// northd is connected to both databases and has nothing left to do.
    pub fn northd_caught_up(&self) -> bool {
        self.northd.is_synced() && self.sb_rows("Logical_Flow") > 0
    }

    /// Whether `chassis`'s datapath has a program installed.
    pub fn chassis_installed(&self, _chassis: &str) -> bool {
        false
    }

    /// Every host, by name.
    pub fn hosts(&self) -> Vec<HostInfo> {
        Vec::new()
    }

    /// The host is attached and its port bound.
    pub fn host_ready(&self, _host: &str) -> bool {
        false
    }

    /// The switch of a host's port.
    pub fn host_switch(&self, _host: &str) -> Option<String> {
        None
    }

    /// Start `count` pings of `dst` from `host`.
    pub fn start_ping(&mut self, host: &str, _dst: &str, _count: u64) -> anyhow::Result<PingId> {
        Err(anyhow!("no host {host} in the world"))
    }

    /// A ping's outcome so far.
    pub fn ping_result(&self, _id: &PingId) -> Option<PingResult> {
        None
    }

    /// Start a TCP transfer of `bytes` from `from` to `to`'s `port`.
    pub fn start_tcp(
        &mut self,
        from: &str,
        _to: &str,
        _port: u16,
        _bytes: u64,
    ) -> anyhow::Result<TcpId> {
        Err(anyhow!("no host {from} in the world"))
    }

    /// A transfer's outcome so far.
    pub fn tcp_result(&self, _id: &TcpId) -> Option<TcpResult> {
        None
    }

    /// The world's log lines since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        let mut v = self.db.take_log();
        v.extend(self.northd.take_log());
        v
    }

    fn settle(&mut self) {
        for _ in 0..1000 {
            if !self.northd.step(&mut self.db, self.now) {
                break;
            }
        }
    }

    /// Run until `done` holds or `limit` of virtual time passed; whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            self.settle();
            if done(self) {
                return true;
            }
            if self.now >= end {
                return false;
            }
            let next = self
                .next_deadline()
                .unwrap_or(end)
                .min(end)
                .max(self.now + Duration::from_millis(1));
            self.advance_to(next);
        }
    }
}

impl SimHost for Sim {
    fn db_connect(&mut self) -> SessionId {
        self.db.external_connect(self.now)
    }
    fn db_input(&mut self, sid: SessionId, data: &[u8]) {
        if let Err(e) = self.db.external_input(sid, data, self.now) {
            eprintln!("sandbox: {e}");
        }
        self.settle();
    }
    fn db_poll_output(&mut self, sid: SessionId) -> Option<Vec<u8>> {
        self.db.external_poll_output(sid)
    }
    fn db_closed(&self, sid: SessionId) -> bool {
        self.db.external_is_closed(sid)
    }
    fn db_disconnect(&mut self, sid: SessionId) {
        self.db.external_disconnect(sid);
    }
    fn now(&self) -> Duration {
        self.now
    }
    fn next_deadline(&self) -> Option<Duration> {
        [self.db.poll_timeout(), self.northd.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }
    fn advance_to(&mut self, now: Duration) {
        self.now = self.now.max(now);
        self.db.handle_timeout(self.now);
        self.northd.handle_timeout(self.now);
        self.settle();
    }
}
