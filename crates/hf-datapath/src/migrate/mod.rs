//! Live migration between datapaths (DESIGN "Live migration", incident C): the state channel
//! between chassis, the conntrack transfer, and the destination's hold of the port's traffic.
//!
//! # The protocol
//!
//! Datapath to datapath over a stream (TCP or TLS in the daemons, a simulated link in
//! `hf-sim`), framed like the control protocol (a 4-byte big-endian length, then postcard).
//! Each side opens with [`StateMsg::Hello`] carrying [`STATE_VERSION`] and its chassis name; a
//! peer with another version, a name that is not in the program's chassis table, or a name that
//! differs from its certificate's (when the shell authenticated one) is refused and logged.
//!
//! The destination drives. For every local port its program lists as an incoming migration
//! ([`crate::proto::MigrationMsg`]) and that waits for activation:
//!
//! 1. It dials the source (its encap IP, from the chassis table) and sends
//!    [`StateMsg::Pull`] with a fresh epoch. The source checks that its program says the port
//!    migrates to that chassis (else [`StateMsg::Abort`]; the destination pulls again later),
//!    answers with the pre-copy ([`ConnsPhase::Precopy`]): every connection in the port's own
//!    zone (`lsp/<port>`) and every connection of a router or switch zone (`lr/...`, `ls/...`)
//!    whose original or reply tuple carries one of the port's addresses, with the zone numbers'
//!    names. Then, every [`MigrationConfig::delta_interval`], what was touched since the last
//!    send ([`ConnsPhase::Delta`]).
//! 2. The destination imports each batch with [`hf_conntrack::ImportPolicy::SameConnection`],
//!    zones remapped by name: a later batch refreshes the same connection, and a NAT
//!    allocation never displaces one the destination handed out itself (counted as a
//!    collision).
//! 3. Until the port is active here, traffic to it is held (the pipeline's
//!    [`hf_pipeline::Pipeline::set_port_held`]): frames come out as they would enter the
//!    port's egress pipeline and wait in a bounded buffer ([`MigrationConfig::max_held_frames`],
//!    [`MigrationConfig::max_held_bytes`], [`MigrationConfig::max_held_age`]; the oldest go
//!    first and are counted).
//! 4. The port's first RARP/GARP/NA (its activation strategy) activates it. The destination
//!    announces the port's distributed NAT addresses, holds the port's own frames too, and
//!    sends [`StateMsg::Activated`]. The source answers with the final delta
//!    ([`ConnsPhase::Final`]) and the hashes of the frames it delivered to the port since the
//!    pre-copy began, up to the moment the hypervisor stopped the port
//!    ([`crate::Datapath::stop_port`]).
//! 5. The destination imports the final delta, replays the held frames in order through the
//!    egress pipeline (so ACLs and conntrack see the final state), drops those whose hash the
//!    source delivered (trimmed: the VM took them before it paused), delivers the rest, then
//!    runs the port's held frames. Everything newer follows.
//!
//! # Failure modes
//!
//! - The destination dies during the pre-copy: the source forgets that pull when the session
//!   ends; the VM runs on the source with everything (the source never removes anything
//!   before the port is released there).
//! - Activation never comes: when the program stops listing the migration (the CMS moved the
//!   port back), or the source is unreachable for [`MigrationConfig::copy_ttl`], the
//!   destination removes the connections it imported and drops what it held.
//! - The source dies after the pause (no final delta within
//!   [`MigrationConfig::final_wait`], or the session is gone): the destination goes on with
//!   what it has (the pre-copy and the deltas that arrived).
//! - The same port migrates again before the last migration finished: the new pull has a new
//!   epoch; messages of the old one are ignored, and the source's pending removal of the
//!   entries it handed over (after [`MigrationConfig::release_grace`]) is cancelled when the
//!   port comes back.
//!
//! # What it does not do
//!
//! No I/O: sessions are bytes in, frames out, under the shell's [`PeerId`]s. A datapath handoff
//! in the middle of a migration does not carry the migration (the held frames and the pulls
//! start again from the new process's program); activation decisions do carry over.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use hf_conntrack::{CtExport, Tuple};
use serde::{Deserialize, Serialize};

mod dest;
mod session;
mod source;

use crate::core::Datapath;
use crate::proto::{Decoder, encode_to};

/// The state channel's version; both hellos carry it.
pub const STATE_VERSION: u32 = 1;

/// A state session, numbered by the shell (or the simulator).
pub type PeerId = u64;

/// Datapath ↔ datapath.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StateMsg {
    /// The first message each way.
    Hello {
        /// Must equal [`STATE_VERSION`].
        version: u32,
        /// The sender's chassis name.
        chassis: String,
    },
    /// Destination → source: start sending the state of `port` (a new epoch restarts it).
    Pull {
        /// The logical port.
        port: String,
        /// Chosen by the destination; every answer carries it.
        epoch: u64,
    },
    /// Source → destination: connections of the port.
    Conns {
        /// The logical port.
        port: String,
        /// The pull's epoch.
        epoch: u64,
        /// Which batch.
        phase: ConnsPhase,
        /// The names of the zone numbers the connections use (the source's numbering).
        zones: Vec<(u16, String)>,
        /// The connections.
        conns: CtExport,
        /// With the final delta: hashes of the frames the source delivered to the port since
        /// the pre-copy began, oldest first.
        delivered: Vec<u64>,
    },
    /// Destination → source: the port is active at the destination; send the final delta.
    Activated {
        /// The logical port.
        port: String,
        /// The pull's epoch.
        epoch: u64,
    },
    /// Either way: this migration of `port` is over without completing.
    Abort {
        /// The logical port.
        port: String,
        /// The pull's epoch.
        epoch: u64,
        /// Why.
        reason: String,
    },
}

/// Which batch of connections a [`StateMsg::Conns`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConnsPhase {
    /// Everything, when the pull starts.
    Precopy,
    /// What was touched since the last batch.
    Delta,
    /// What was touched since the last batch, after activation.
    Final,
}

/// Limits and timers of migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationConfig {
    /// How often the source sends what changed during the pre-copy.
    pub delta_interval: Duration,
    /// How long the destination waits for the final delta after activation.
    pub final_wait: Duration,
    /// How long an unanswered or refused pull waits before it is sent again.
    pub retry: Duration,
    /// How long the destination keeps imported connections while it cannot reach the source
    /// and the port is not active.
    pub copy_ttl: Duration,
    /// How long the source keeps the connections it handed over once the port is released
    /// there.
    pub release_grace: Duration,
    /// Frames held for one port, at most.
    pub max_held_frames: usize,
    /// Bytes held for one port, at most.
    pub max_held_bytes: usize,
    /// A held frame older than this is dropped.
    pub max_held_age: Duration,
}

impl Default for MigrationConfig {
    fn default() -> MigrationConfig {
        MigrationConfig {
            delta_interval: Duration::from_millis(20),
            final_wait: Duration::from_millis(20),
            retry: Duration::from_millis(50),
            copy_ttl: Duration::from_secs(60),
            release_grace: Duration::from_secs(30),
            max_held_frames: 8192,
            max_held_bytes: 16 << 20,
            max_held_age: Duration::from_secs(2),
        }
    }
}

/// What one migration of one port did on this chassis.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MigrationStats {
    /// The logical port.
    pub port: String,
    /// `in` (this chassis is the destination) or `out`.
    pub role: String,
    /// The other chassis.
    pub peer: String,
    /// The epoch.
    pub epoch: u64,
    /// Connections in the pre-copy, the deltas and the final delta.
    pub precopy_entries: u64,
    /// Connections in the deltas (a connection counts once per delta it is in).
    pub delta_entries: u64,
    /// Connections in the final delta.
    pub final_delta_entries: u64,
    /// Connections imported (destination) or sent (source), all batches.
    pub entries_moved: u64,
    /// Encoded bytes of the batches.
    pub bytes_moved: u64,
    /// Connections refused because another connection held their tuples or SNAT claim.
    pub collided: u64,
    /// Connections whose zone has no name here.
    pub unmapped: u64,
    /// Frames held for the port.
    pub buffered: u64,
    /// Held frames dropped because the source had delivered them.
    pub trimmed: u64,
    /// Held frames dropped because the buffer was full.
    pub overflowed: u64,
    /// Held frames dropped because they were older than the age limit.
    pub expired: u64,
    /// Frames the port sent before the final delta (its announcement apart), held until then.
    pub held_from_port: u64,
    /// Frame hashes the source reported as delivered.
    pub delivered_reported: u64,
    /// Virtual/monotonic times (µs): started, activated, completed.
    pub started_us: u64,
    /// When the port was activated here.
    pub activated_us: Option<u64>,
    /// When the held frames were released (destination) or the final delta sent (source).
    pub completed_us: Option<u64>,
    /// `running`, `completed`, `completed-without-final`, `aborted: ...`, `released`.
    pub outcome: String,
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// FNV-1a over a frame: what source and destination compare to trim delivered frames.
pub fn frame_hash(frame: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in frame {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A gratuitous ARP request (sender = target = `ip`) from `mac`, padded to 60 bytes.
pub fn garp(mac: [u8; 6], ip: std::net::Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip.octets());
    f.resize(60, 0);
    f
}

/// A frame held for a port: the input of its egress pipeline.
#[derive(Debug, Clone)]
struct HeldFrame {
    at: Duration,
    datapath: u32,
    inport: u32,
    outport: u32,
    frame: Vec<u8>,
}

/// This chassis is the destination of `port`.
#[derive(Debug)]
struct Incoming {
    source: Option<String>,
    epoch: u64,
    /// A pull is outstanding or accepted on the current session.
    pulled: bool,
    next_pull: Duration,
    /// When the source became unreachable (no session) while the port waits.
    lost_since: Option<Duration>,
    activated: Option<Duration>,
    final_deadline: Option<Duration>,
    imported: BTreeSet<Tuple>,
    held: VecDeque<HeldFrame>,
    held_bytes: usize,
    from_port: VecDeque<Vec<u8>>,
    announce: Vec<crate::proto::AnnounceMsg>,
    stats: MigrationStats,
}

/// This chassis is the source of `port`.
#[derive(Debug)]
struct Outgoing {
    peer: PeerId,
    epoch: u64,
    last_export: Duration,
    next_delta: Duration,
    delivered: VecDeque<(Duration, u64)>,
    sent: BTreeSet<Tuple>,
    finished: bool,
    release_at: Option<Duration>,
    stats: MigrationStats,
}

impl Outgoing {
    /// A pull of `port` by chassis `to` (session `peer`), started at `now`.
    fn new(
        peer: PeerId,
        port: &str,
        to: &str,
        epoch: u64,
        now: Duration,
        next_delta: Duration,
    ) -> Outgoing {
        Outgoing {
            peer,
            epoch,
            last_export: now,
            next_delta,
            delivered: VecDeque::new(),
            sent: BTreeSet::new(),
            finished: false,
            release_at: None,
            stats: MigrationStats {
                port: port.to_string(),
                role: "out".into(),
                peer: to.to_string(),
                epoch,
                started_us: us(now),
                outcome: "running".into(),
                ..MigrationStats::default()
            },
        }
    }
}

#[derive(Debug, Default)]
struct Peer {
    dec: Decoder<StateMsg>,
    /// The chassis we dialed (outbound sessions).
    dialed: Option<String>,
    /// The chassis the shell authenticated (a TLS certificate's CN).
    authenticated: Option<String>,
    /// The peer's chassis, once its hello is accepted.
    chassis: Option<String>,
    closing: bool,
}

/// A session the datapath wants: dial `ip` (the peer chassis's encap address) at the state
/// port, then call [`Datapath::handle_state_connected`] with `dialed = Some(chassis)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDial {
    /// The peer chassis.
    pub chassis: String,
    /// Its encap IP (from the program's chassis table).
    pub ip: IpAddr,
}

/// Every migration's state in a datapath.
#[derive(Debug, Default)]
pub(crate) struct Migrations {
    incoming: BTreeMap<String, Incoming>,
    outgoing: BTreeMap<String, Outgoing>,
    done: VecDeque<MigrationStats>,
    peers: BTreeMap<PeerId, Peer>,
    tx: VecDeque<(PeerId, Vec<u8>)>,
    dials: VecDeque<StateDial>,
    /// Chassis being dialed (until connected or failed).
    dialing: BTreeSet<String>,
    next_epoch: u64,
    /// Ports the hypervisor stopped (frames to them are dropped, not delivered).
    pub(crate) stopped: BTreeSet<String>,
    /// Ports activated here while the program still said they wait (re-reported to a new
    /// controller, carried by a handoff).
    pub(crate) activated: BTreeSet<String>,
    /// Frames dropped because their port was stopped or inactive without a migration.
    pub(crate) dropped_stopped: u64,
}

const MAX_DONE: usize = 64;
const MAX_FROM_PORT: usize = 4096;
const MAX_DELIVERED: usize = 16384;

impl Migrations {
    fn finish(&mut self, mut st: MigrationStats, outcome: String, now: Duration) {
        st.outcome = outcome;
        st.completed_us.get_or_insert(us(now));
        if self.done.len() == MAX_DONE {
            self.done.pop_front();
        }
        self.done.push_back(st);
    }

    /// A session to `chassis` is being opened: dialed and not connected yet, or connected and
    /// its hello not back yet.
    fn session_pending(&self, chassis: &str) -> bool {
        self.dialing.contains(chassis)
            || self
                .peers
                .values()
                .any(|p| !p.closing && p.chassis.is_none() && p.dialed.as_deref() == Some(chassis))
    }

    fn peer_of(&self, chassis: &str) -> Option<PeerId> {
        self.peers
            .iter()
            .find(|(_, p)| !p.closing && p.chassis.as_deref() == Some(chassis))
            .map(|(id, _)| *id)
    }
}

impl Datapath {
    // ----- the hypervisor's signals -----

    /// The hypervisor stopped the port's device (the last step of a live migration: QEMU
    /// stops the rings before the VM pauses): frames to it are dropped from now on, and are
    /// not reported to the destination as delivered.
    pub fn stop_port(&mut self, name: &str) {
        self.mig.stopped.insert(name.to_string());
    }

    /// The port's device runs again ([`Datapath::stop_port`] undone).
    pub fn start_port(&mut self, name: &str) {
        self.mig.stopped.remove(name);
    }

    /// The conntrack table, to add or inspect state from outside the pipeline (tests and the
    /// benchmark build synthetic connections with it).
    #[doc(hidden)]
    pub fn conntrack_mut(&mut self) -> &mut hf_conntrack::Conntrack {
        &mut self.ct
    }

    /// What every migration did, finished ones first (at most the last 64), then those
    /// running.
    pub fn migration_stats(&self) -> Vec<MigrationStats> {
        let mut v: Vec<MigrationStats> = self.mig.done.iter().cloned().collect();
        v.extend(self.mig.incoming.values().map(|i| i.stats.clone()));
        v.extend(
            self.mig
                .outgoing
                .values()
                .filter(|o| !o.finished)
                .map(|o| o.stats.clone()),
        );
        v
    }

    /// Whether traffic to local port `name` is held for a migration.
    pub fn port_held(&self, name: &str) -> bool {
        self.ports
            .get(name)
            .is_some_and(|p| self.pipeline.port_held(p.id))
    }

    /// The shell's clock reading, for work that an entry point without `now` (adding a port,
    /// installing a program) triggers.
    pub fn advance_clock(&mut self, now: Duration) {
        self.clock = self.clock.max(now);
    }
}

fn mac_text(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}
