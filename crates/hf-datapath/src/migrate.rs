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

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use hf_conntrack::{CtExport, ImportPolicy, Selection, Tuple};
use hf_pipeline::Ingress;
use serde::{Deserialize, Serialize};

use crate::core::{Datapath, Level};
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
    stopped: BTreeSet<String>,
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

    // ----- state sessions (the shell's side) -----

    /// The next session to open.
    pub fn poll_state_dial(&mut self) -> Option<StateDial> {
        self.mig.dials.pop_front()
    }

    /// A session is up: one this datapath asked for (`dialed`: the chassis it dialed) or one
    /// a peer opened. `authenticated`: the chassis name the shell verified (a TLS
    /// certificate's CN), which the peer's hello must then match.
    pub fn handle_state_connected(
        &mut self,
        peer: PeerId,
        dialed: Option<&str>,
        authenticated: Option<&str>,
        now: Duration,
    ) {
        self.clock = self.clock.max(now);
        if let Some(c) = dialed {
            self.mig.dialing.remove(c);
        }
        self.mig.peers.insert(
            peer,
            Peer {
                dialed: dialed.map(str::to_string),
                authenticated: authenticated.map(str::to_string),
                ..Peer::default()
            },
        );
        let hello = StateMsg::Hello {
            version: STATE_VERSION,
            chassis: self.cfg.chassis.clone(),
        };
        self.state_send(peer, &hello);
    }

    /// A dial asked for by [`Datapath::poll_state_dial`] failed.
    pub fn handle_state_dial_failed(&mut self, chassis: &str, reason: &str, now: Duration) {
        self.clock = self.clock.max(now);
        self.mig.dialing.remove(chassis);
        self.log_once(
            Level::Warn,
            format_args!("state-dial:{chassis}:{reason}"),
            || format!("state channel to chassis {chassis}: {reason}"),
        );
        for inc in self.mig.incoming.values_mut() {
            if inc.source.as_deref() == Some(chassis) {
                inc.next_pull = now + self.cfg.migration.retry;
                inc.lost_since.get_or_insert(now);
            }
        }
    }

    /// A session ended.
    pub fn handle_state_disconnected(&mut self, peer: PeerId, now: Duration) {
        self.clock = self.clock.max(now);
        let Some(p) = self.mig.peers.remove(&peer) else {
            return;
        };
        if let Some(c) = &p.chassis {
            self.log(Level::Info, format!("state channel to chassis {c} closed"));
        }
        // Pulls served on it: the destination went away; nothing changes here.
        let gone: Vec<String> = self
            .mig
            .outgoing
            .iter()
            .filter(|(_, o)| o.peer == peer && !o.finished)
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            if let Some(o) = self.mig.outgoing.remove(&n) {
                self.log(
                    Level::Info,
                    format!(
                        "migration of {n} to {}: the destination went away during the pre-copy; \
                         the port stays here with everything",
                        o.stats.peer
                    ),
                );
                self.mig
                    .finish(o.stats, "aborted: destination went away".into(), now);
            }
        }
        // A session dialed to a source that ended before its hello (refused, or cut): dial
        // again after the retry interval, as after a failed dial, not at once.
        if p.chassis.is_none()
            && let Some(c) = &p.dialed
        {
            for inc in self.mig.incoming.values_mut() {
                if inc.source.as_deref() == Some(c.as_str()) && !inc.pulled {
                    inc.next_pull = now + self.cfg.migration.retry;
                    inc.lost_since.get_or_insert(now);
                }
            }
        }
        // Pulls made on it: the source is gone for now.
        let Some(c) = p.chassis else { return };
        let waiting: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| i.source.as_deref() == Some(c.as_str()))
            .map(|(n, _)| n.clone())
            .collect();
        for n in waiting {
            let awaiting_final = self
                .mig
                .incoming
                .get(&n)
                .is_some_and(|i| i.activated.is_some());
            if awaiting_final {
                self.complete(&n, false, now);
            } else if let Some(i) = self.mig.incoming.get_mut(&n) {
                i.pulled = false;
                i.next_pull = now + self.cfg.migration.retry;
                i.lost_since.get_or_insert(now);
            }
        }
    }

    /// The chassis of session `peer` once its hello was accepted (`None` before that, after a
    /// refusal's hello, and for unknown sessions): for the shell's listings and its hello
    /// timeout.
    pub fn state_peer(&self, peer: PeerId) -> Option<&str> {
        self.mig.peers.get(&peer).and_then(|p| p.chassis.as_deref())
    }

    /// Whether the shell should close session `peer` (it was refused) once its transmit queue
    /// is drained.
    pub fn state_wants_close(&self, peer: PeerId) -> bool {
        self.mig.peers.get(&peer).is_some_and(|p| p.closing)
    }

    /// The next bytes to send on a session.
    pub fn poll_state_transmit(&mut self) -> Option<(PeerId, Vec<u8>)> {
        self.mig.tx.pop_front()
    }

    /// Bytes from a session.
    pub fn handle_state_bytes(&mut self, peer: PeerId, data: &[u8], now: Duration) {
        self.clock = self.clock.max(now);
        let Some(p) = self.mig.peers.get_mut(&peer) else {
            return;
        };
        if p.closing {
            return;
        }
        p.dec.push(data);
        loop {
            let Some(p) = self.mig.peers.get_mut(&peer) else {
                return;
            };
            if p.closing {
                return;
            }
            match p.dec.next_msg() {
                Ok(None) => return,
                Ok(Some(m)) => self.handle_state_msg(peer, m, now),
                Err(e) => {
                    self.refuse_peer(peer, format!("bad state frame: {e}"));
                    return;
                }
            }
        }
    }

    fn state_send(&mut self, peer: PeerId, msg: &StateMsg) -> usize {
        let mut out = Vec::new();
        match encode_to(msg, &mut out) {
            Ok(()) => {
                let n = out.len();
                self.mig.tx.push_back((peer, out));
                n
            }
            Err(e) => {
                self.log(Level::Error, format!("state message not sent: {e}"));
                0
            }
        }
    }

    fn refuse_peer(&mut self, peer: PeerId, why: String) {
        let who = self
            .mig
            .peers
            .get(&peer)
            .and_then(|p| p.chassis.clone().or(p.authenticated.clone()))
            .unwrap_or_else(|| format!("session {peer}"));
        self.log(
            Level::Warn,
            format!("state channel from {who} refused: {why}"),
        );
        if let Some(p) = self.mig.peers.get_mut(&peer) {
            p.closing = true;
        }
    }

    fn known_chassis(&self, name: &str) -> bool {
        self.program
            .as_ref()
            .is_some_and(|p| p.chassis_table.iter().any(|c| c.name == name))
    }

    fn handle_state_msg(&mut self, peer: PeerId, msg: StateMsg, now: Duration) {
        let hello_done = self
            .mig
            .peers
            .get(&peer)
            .is_some_and(|p| p.chassis.is_some());
        if !hello_done {
            let StateMsg::Hello { version, chassis } = msg else {
                return self.refuse_peer(peer, "expected a hello first".into());
            };
            if version != STATE_VERSION {
                return self.refuse_peer(
                    peer,
                    format!("it speaks state version {version}, this datapath {STATE_VERSION}"),
                );
            }
            let (dialed, auth) = match self.mig.peers.get(&peer) {
                Some(p) => (p.dialed.clone(), p.authenticated.clone()),
                None => return,
            };
            if let Some(a) = auth.as_deref()
                && a != chassis
            {
                return self.refuse_peer(
                    peer,
                    format!("it says it is chassis {chassis} but its certificate names {a}"),
                );
            }
            if let Some(d) = dialed.as_deref()
                && d != chassis
            {
                return self.refuse_peer(
                    peer,
                    format!("dialed chassis {d} but the peer says it is {chassis}"),
                );
            }
            if !self.known_chassis(&chassis) {
                return self.refuse_peer(
                    peer,
                    format!("{chassis} is not a chassis of this datapath's program"),
                );
            }
            if let Some(p) = self.mig.peers.get_mut(&peer) {
                p.chassis = Some(chassis.clone());
            }
            self.log(
                Level::Info,
                format!("state channel to chassis {chassis} up"),
            );
            self.pull_due(now);
            return;
        }
        match msg {
            StateMsg::Hello { .. } => self.refuse_peer(peer, "a second hello".into()),
            StateMsg::Pull { port, epoch } => self.on_pull(peer, port, epoch, now),
            StateMsg::Activated { port, epoch } => self.on_activated_msg(peer, port, epoch, now),
            StateMsg::Conns {
                port,
                epoch,
                phase,
                zones,
                conns,
                delivered,
            } => self.on_conns(port, epoch, phase, zones, conns, delivered, now),
            StateMsg::Abort {
                port,
                epoch,
                reason,
            } => self.on_abort(peer, port, epoch, reason, now),
        }
    }

    // ----- the source's side -----

    /// The connections of `port` here: its own zone, and the router/switch zones' entries that
    /// carry one of its addresses.
    fn port_selection(&self, port: &str) -> Selection {
        let mut sel = Selection::default();
        if let Some(&z) = self.zones.get(&format!("lsp/{port}")) {
            sel = sel.zone(z);
        }
        let ips: Vec<IpAddr> = self
            .program
            .as_ref()
            .and_then(|p| {
                p.datapaths
                    .iter()
                    .flat_map(|d| d.ports.iter())
                    .find(|p| p.name == port)
            })
            .map(|p| {
                p.addresses
                    .iter()
                    .flat_map(|a| a.split_whitespace())
                    .filter_map(|t| t.parse::<IpAddr>().ok())
                    .collect()
            })
            .unwrap_or_default();
        for (name, &z) in &self.zones {
            if name.starts_with("lr/") || name.starts_with("ls/") {
                for ip in &ips {
                    sel = sel.address(z, *ip);
                }
            }
        }
        sel
    }

    fn migrates_to(&self, port: &str, chassis: &str) -> bool {
        self.program.as_ref().is_some_and(|p| {
            p.migrations
                .iter()
                .any(|m| m.port == port && !m.incoming && m.peers.iter().any(|c| c == chassis))
        })
    }

    fn zone_names(&self, ct: &CtExport) -> Vec<(u16, String)> {
        let used: BTreeSet<u16> = ct.conns.iter().map(|c| c.orig.zone).collect();
        self.zones
            .iter()
            .filter(|(_, z)| used.contains(z))
            .map(|(n, z)| (*z, n.clone()))
            .collect()
    }

    /// Exports `sel` and sends it as `phase`; returns (entries, bytes).
    #[allow(clippy::too_many_arguments)]
    fn send_conns(
        &mut self,
        peer: PeerId,
        port: &str,
        epoch: u64,
        phase: ConnsPhase,
        sel: &Selection,
        delivered: Vec<u64>,
        now: Duration,
    ) -> (u64, u64) {
        let ct = self.ct.export(sel, now);
        let n = ct.conns.len() as u64;
        if let Some(o) = self.mig.outgoing.get_mut(port) {
            o.sent.extend(ct.conns.iter().map(|c| c.orig));
        }
        let msg = StateMsg::Conns {
            port: port.to_string(),
            epoch,
            phase,
            zones: self.zone_names(&ct),
            conns: ct,
            delivered,
        };
        let bytes = self.state_send(peer, &msg) as u64;
        (n, bytes)
    }

    fn on_pull(&mut self, peer: PeerId, port: String, epoch: u64, now: Duration) {
        let from = self
            .mig
            .peers
            .get(&peer)
            .and_then(|p| p.chassis.clone())
            .unwrap_or_default();
        if !self.ports.contains_key(&port) || !self.migrates_to(&port, &from) {
            let reason = format!(
                "port {port} is not bound here for a migration to {from} (not yet, or not any more)"
            );
            self.state_send(
                peer,
                &StateMsg::Abort {
                    port,
                    epoch,
                    reason,
                },
            );
            return;
        }
        if let Some(old) = self.mig.outgoing.remove(&port)
            && !old.finished
        {
            self.mig
                .finish(old.stats, "aborted: pulled again".into(), now);
        }
        // The port is leaving again: whatever an earlier migration left to remove stays.
        let mut o = Outgoing {
            peer,
            epoch,
            last_export: now,
            next_delta: now + self.cfg.migration.delta_interval,
            delivered: VecDeque::new(),
            sent: BTreeSet::new(),
            finished: false,
            release_at: None,
            stats: MigrationStats {
                port: port.clone(),
                role: "out".into(),
                peer: from.clone(),
                epoch,
                started_us: us(now),
                outcome: "running".into(),
                ..MigrationStats::default()
            },
        };
        o.stats.outcome = "running".into();
        self.mig.outgoing.insert(port.clone(), o);
        self.track_delivery();
        let sel = self.port_selection(&port);
        let (n, bytes) = self.send_conns(
            peer,
            &port,
            epoch,
            ConnsPhase::Precopy,
            &sel,
            Vec::new(),
            now,
        );
        if let Some(o) = self.mig.outgoing.get_mut(&port) {
            o.stats.precopy_entries = n;
            o.stats.entries_moved += n;
            o.stats.bytes_moved += bytes;
        }
        self.log(
            Level::Info,
            format!("migration of {port} to {from}: pre-copy of {n} connections ({bytes} bytes)"),
        );
    }

    fn on_activated_msg(&mut self, peer: PeerId, port: String, epoch: u64, now: Duration) {
        let from = self
            .mig
            .peers
            .get(&peer)
            .and_then(|p| p.chassis.clone())
            .unwrap_or_default();
        let known = self
            .mig
            .outgoing
            .get(&port)
            .is_some_and(|o| o.epoch == epoch && o.peer == peer && !o.finished);
        if !known {
            // No pre-copy went out (or it was lost): the final delta is everything.
            if !self.ports.contains_key(&port) && !self.migrates_to(&port, &from) {
                self.state_send(
                    peer,
                    &StateMsg::Abort {
                        port: port.clone(),
                        epoch,
                        reason: format!("port {port} is not migrating from here"),
                    },
                );
                return;
            }
            self.mig.outgoing.insert(
                port.clone(),
                Outgoing {
                    peer,
                    epoch,
                    last_export: Duration::ZERO,
                    next_delta: Duration::MAX,
                    delivered: VecDeque::new(),
                    sent: BTreeSet::new(),
                    finished: false,
                    release_at: None,
                    stats: MigrationStats {
                        port: port.clone(),
                        role: "out".into(),
                        peer: from.clone(),
                        epoch,
                        started_us: us(now),
                        ..MigrationStats::default()
                    },
                },
            );
        }
        let Some(o) = self.mig.outgoing.get_mut(&port) else {
            return;
        };
        let since = o.last_export;
        let delivered: Vec<u64> = o.delivered.drain(..).map(|(_, h)| h).collect();
        o.finished = true;
        let mut sel = self.port_selection(&port);
        if since > Duration::ZERO {
            sel = sel.touched_since(since);
        }
        let nd = delivered.len() as u64;
        let (n, bytes) =
            self.send_conns(peer, &port, epoch, ConnsPhase::Final, &sel, delivered, now);
        if let Some(o) = self.mig.outgoing.get_mut(&port) {
            o.stats.final_delta_entries = n;
            o.stats.entries_moved += n;
            o.stats.bytes_moved += bytes;
            o.stats.delivered_reported = nd;
            o.stats.activated_us = Some(us(now));
            o.stats.completed_us = Some(us(now));
            o.stats.outcome = "completed".into();
            let st = o.stats.clone();
            self.mig.done.push_back(st);
            if self.mig.done.len() > MAX_DONE {
                self.mig.done.pop_front();
            }
        }
        self.track_delivery();
        self.log(
            Level::Info,
            format!(
                "migration of {port} to {from}: activated there; final delta of {n} connections, \
                 {nd} delivered frames reported"
            ),
        );
    }

    /// Which local port ids have their deliveries recorded (an unfinished outgoing migration).
    fn track_delivery(&mut self) {
        self.tracking.clear();
        for (name, o) in &self.mig.outgoing {
            if !o.finished
                && let Some(p) = self.ports.get(name)
            {
                self.tracking.insert(p.id, name.clone());
            }
        }
    }

    /// A frame goes out of local port `id` (`name`): false when it must be dropped (the port is
    /// stopped). Records it for the destination's trim when the port is leaving.
    pub(crate) fn note_delivery(&mut self, id: u32, frame: &[u8], now: Duration) -> bool {
        let Some(name) = self.port_names.get(&id) else {
            return true;
        };
        if self.mig.stopped.contains(name) {
            self.mig.dropped_stopped += 1;
            return false;
        }
        if let Some(port) = self.tracking.get(&id)
            && let Some(o) = self.mig.outgoing.get_mut(port)
        {
            let age = self.cfg.migration.max_held_age;
            while o
                .delivered
                .front()
                .is_some_and(|(t, _)| now.saturating_sub(*t) > age)
                || o.delivered.len() >= MAX_DELIVERED
            {
                o.delivered.pop_front();
            }
            o.delivered.push_back((now, frame_hash(frame)));
        }
        true
    }

    fn on_abort(&mut self, peer: PeerId, port: String, epoch: u64, reason: String, now: Duration) {
        // From a destination: it gave up on this pull.
        if self
            .mig
            .outgoing
            .get(&port)
            .is_some_and(|o| o.peer == peer && o.epoch == epoch && !o.finished)
            && let Some(o) = self.mig.outgoing.remove(&port)
        {
            self.log(
                Level::Info,
                format!("migration of {port}: the destination aborted it: {reason}"),
            );
            self.mig.finish(o.stats, format!("aborted: {reason}"), now);
            self.track_delivery();
            return;
        }
        // From a source: it refused this pull (its program may not have caught up yet).
        if let Some(i) = self.mig.incoming.get_mut(&port)
            && i.epoch == epoch
        {
            i.pulled = false;
            i.next_pull = now + self.cfg.migration.retry;
            let src = i.source.clone().unwrap_or_default();
            self.log_once(
                Level::Info,
                format_args!("pull-refused:{port}:{src}:{reason}"),
                || format!("migration of {port} from {src}: pull refused ({reason}); retrying"),
            );
        }
    }

    // ----- the destination's side -----

    #[allow(clippy::too_many_arguments)]
    fn on_conns(
        &mut self,
        port: String,
        epoch: u64,
        phase: ConnsPhase,
        zones: Vec<(u16, String)>,
        conns: CtExport,
        delivered: Vec<u64>,
        now: Duration,
    ) {
        let Some(inc) = self.mig.incoming.get(&port) else {
            return;
        };
        if inc.epoch != epoch {
            return;
        }
        let names: HashMap<u16, &String> = zones.iter().map(|(z, n)| (*z, n)).collect();
        let local = &self.zones;
        let remap = |z: u16| names.get(&z).and_then(|n| local.get(*n)).copied();
        let mut imported_now = Vec::new();
        for c in &conns.conns {
            if let Some(z) = remap(c.orig.zone) {
                imported_now.push(Tuple { zone: z, ..c.orig });
            }
        }
        let rep = match self
            .ct
            .import_with(&conns, remap, now, ImportPolicy::SameConnection)
        {
            Ok(r) => r,
            Err(e) => {
                self.log(
                    Level::Error,
                    format!("migration of {port}: connections refused: {e}"),
                );
                return;
            }
        };
        let bytes = postcard::to_allocvec(&conns).map_or(0, |b| b.len() as u64);
        let Some(inc) = self.mig.incoming.get_mut(&port) else {
            return;
        };
        inc.imported.extend(imported_now);
        inc.lost_since = None;
        let n = conns.conns.len() as u64;
        let st = &mut inc.stats;
        st.entries_moved += rep.imported as u64;
        st.bytes_moved += bytes;
        st.collided += rep.collided as u64;
        st.unmapped += rep.malformed as u64;
        match phase {
            ConnsPhase::Precopy => st.precopy_entries += n,
            ConnsPhase::Delta => st.delta_entries += n,
            ConnsPhase::Final => st.final_delta_entries += n,
        }
        if rep.collided > 0 {
            let c = rep.collided;
            self.log(
                Level::Warn,
                format!(
                    "migration of {port}: {c} connections not imported: another connection here \
                     holds their addresses (a NAT allocation of this chassis)"
                ),
            );
        }
        if phase == ConnsPhase::Final {
            self.trim = delivered.iter().fold(HashMap::new(), |mut m, h| {
                *m.entry(*h).or_insert(0u32) += 1;
                m
            });
            if let Some(inc) = self.mig.incoming.get_mut(&port) {
                inc.stats.delivered_reported = delivered.len() as u64;
            }
            self.complete(&port, true, now);
        }
    }

    /// A local port went away.
    pub(crate) fn mig_port_removed(&mut self, name: &str) {
        self.mig.stopped.remove(name);
    }

    /// The program changed (or a port came or went): start, keep or end migrations, and hold
    /// exactly the ports that wait.
    pub(crate) fn sync_migrations(&mut self, now: Duration) {
        // Activations made here (or by the process this one took over from) stand until the
        // program stops saying the port waits.
        let again: Vec<u32> = self
            .mig
            .activated
            .iter()
            .filter_map(|n| self.ports.get(n).map(|p| p.id))
            .filter(|id| !self.pipeline.port_active(*id))
            .collect();
        for id in again {
            self.pipeline.set_port_active(id, true);
        }
        let wanted: Vec<(String, Option<String>, Vec<crate::proto::AnnounceMsg>)> = self
            .program
            .as_ref()
            .map(|p| {
                p.migrations
                    .iter()
                    .filter(|m| m.incoming)
                    .map(|m| (m.port.clone(), m.peers.first().cloned(), m.announce.clone()))
                    .collect()
            })
            .unwrap_or_default();
        // Local ports waiting for activation: each has an incoming migration (a source when
        // the program names one).
        let waiting: Vec<(String, u32)> = self
            .ports
            .iter()
            .filter(|(_, p)| !self.pipeline.port_active(p.id))
            .map(|(n, p)| (n.clone(), p.id))
            .collect();
        for (name, _) in &waiting {
            let (source, announce) = wanted
                .iter()
                .find(|(p, _, _)| p == name)
                .map(|(_, s, a)| (s.clone(), a.clone()))
                .unwrap_or((None, Vec::new()));
            let same = self
                .mig
                .incoming
                .get(name)
                .is_some_and(|i| i.source == source && i.activated.is_none());
            if same {
                if let Some(i) = self.mig.incoming.get_mut(name) {
                    i.announce = announce;
                }
                continue;
            }
            if self.mig.incoming.contains_key(name) {
                self.abort_incoming(name, "the source changed", now);
            }
            // The port comes back here: what this chassis handed over earlier is live again.
            if let Some(o) = self.mig.outgoing.remove(name)
                && !o.finished
            {
                self.mig
                    .finish(o.stats, "aborted: the port migrates here".into(), now);
            }
            self.mig.next_epoch += 1;
            let epoch = (now.as_micros() as u64) << 16 | (self.mig.next_epoch & 0xffff);
            let stats = MigrationStats {
                port: name.clone(),
                role: "in".into(),
                peer: source.clone().unwrap_or_default(),
                epoch,
                started_us: us(now),
                outcome: "running".into(),
                ..MigrationStats::default()
            };
            self.log(
                Level::Info,
                match &source {
                    Some(s) => format!("port {name}: migrating here from {s}; pulling its state"),
                    None => format!("port {name}: waiting for activation; its traffic is held"),
                },
            );
            self.mig.incoming.insert(
                name.clone(),
                Incoming {
                    source,
                    epoch,
                    pulled: false,
                    next_pull: now,
                    lost_since: None,
                    activated: None,
                    final_deadline: None,
                    imported: BTreeSet::new(),
                    held: VecDeque::new(),
                    held_bytes: 0,
                    from_port: VecDeque::new(),
                    announce,
                    stats,
                },
            );
        }
        // Incoming migrations whose port no longer waits (and was not activated here): the
        // CMS moved it elsewhere, or the port went away. The copy goes.
        let stale: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(n, i)| i.activated.is_none() && !waiting.iter().any(|(w, _)| w == *n))
            .map(|(n, _)| n.clone())
            .collect();
        for n in stale {
            self.abort_incoming(&n, "the port no longer waits here", now);
        }
        // Outgoing migrations whose port was released here (its device went away, or the
        // program no longer binds it here): what was handed over goes after a grace. The
        // destination may still ask for the final delta meanwhile (the device goes as the VM
        // resumes there, before its announcement arrives). A port bound here again keeps
        // everything.
        let grace = self.cfg.migration.release_grace;
        let names: Vec<String> = self.mig.outgoing.keys().cloned().collect();
        for n in names {
            let local = self.local_in_program(&n);
            if let Some(o) = self.mig.outgoing.get_mut(&n) {
                match (o.release_at, local) {
                    (None, false) => o.release_at = Some(now + grace),
                    (Some(_), true) => o.release_at = None,
                    _ => {}
                }
            }
        }
        self.apply_holds();
        self.track_delivery();
        self.pull_due(now);
    }

    fn local_in_program(&self, port: &str) -> bool {
        self.ports.contains_key(port)
            && self.program.as_ref().is_some_and(|p| {
                p.datapaths.iter().any(|d| {
                    d.ports.iter().any(|q| {
                        q.name == port && matches!(q.location, crate::proto::LocationMsg::Local(_))
                    })
                })
            })
    }

    /// Holds traffic to every port with an incoming migration that has not completed.
    fn apply_holds(&mut self) {
        let ids: Vec<(u32, bool)> = self
            .ports
            .iter()
            .map(|(n, p)| (p.id, self.mig.incoming.contains_key(n)))
            .collect();
        for (id, held) in ids {
            if self.pipeline.port_held(id) != held {
                self.pipeline.set_port_held(id, held);
            }
        }
    }

    /// Sends the pulls that are due, asking for sessions where there is none.
    fn pull_due(&mut self, now: Duration) {
        let due: Vec<(String, String, u64)> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| !i.pulled && i.activated.is_none() && i.next_pull <= now)
            .filter_map(|(n, i)| Some((n.clone(), i.source.clone()?, i.epoch)))
            .collect();
        for (port, source, epoch) in due {
            match self.mig.peer_of(&source) {
                Some(peer) => {
                    self.state_send(
                        peer,
                        &StateMsg::Pull {
                            port: port.clone(),
                            epoch,
                        },
                    );
                    if let Some(i) = self.mig.incoming.get_mut(&port) {
                        i.pulled = true;
                    }
                }
                None => self.dial(&source, now),
            }
        }
    }

    fn dial(&mut self, chassis: &str, now: Duration) {
        // A session dialed there whose hello has not come back yet counts as one.
        if self.mig.session_pending(chassis) || self.mig.peer_of(chassis).is_some() {
            return;
        }
        let ip = self.program.as_ref().and_then(|p| {
            p.chassis_table
                .iter()
                .find(|c| c.name == chassis)
                .and_then(|c| c.ip.parse::<IpAddr>().ok())
        });
        match ip {
            Some(ip) => {
                self.mig.dialing.insert(chassis.to_string());
                self.mig.dials.push_back(StateDial {
                    chassis: chassis.to_string(),
                    ip,
                });
            }
            None => {
                for i in self.mig.incoming.values_mut() {
                    if i.source.as_deref() == Some(chassis) {
                        i.next_pull = now + self.cfg.migration.retry;
                    }
                }
                self.log_once(Level::Warn, format_args!("state-noip:{chassis}"), || {
                    format!("state channel: chassis {chassis} has no encap IP in the program")
                });
            }
        }
    }

    fn abort_incoming(&mut self, port: &str, why: &str, now: Duration) {
        let Some(inc) = self.mig.incoming.remove(port) else {
            return;
        };
        let mut removed = 0;
        for t in &inc.imported {
            if self.ct.remove_connection(t) {
                removed += 1;
            }
        }
        if let (Some(src), true) = (&inc.source, inc.pulled)
            && let Some(peer) = self.mig.peer_of(src)
        {
            self.state_send(
                peer,
                &StateMsg::Abort {
                    port: port.to_string(),
                    epoch: inc.epoch,
                    reason: why.to_string(),
                },
            );
        }
        let mut st = inc.stats;
        st.expired += inc.held.len() as u64;
        self.log(
            Level::Info,
            format!(
                "migration of {port} here ended before activation ({why}): {removed} imported \
                 connections and {} held frames dropped",
                inc.held.len()
            ),
        );
        self.mig.finish(st, format!("aborted: {why}"), now);
        self.apply_holds();
    }

    /// A held frame for local port `local` (from the pipeline's [`hf_pipeline::Destination::Held`]).
    pub(crate) fn hold_frame(
        &mut self,
        local: u32,
        datapath: u32,
        inport: u32,
        outport: u32,
        frame: &[u8],
        now: Duration,
    ) {
        let Some(name) = self.port_names.get(&local) else {
            return;
        };
        let cfg = &self.cfg.migration;
        let Some(inc) = self.mig.incoming.get_mut(name) else {
            return;
        };
        while inc
            .held
            .front()
            .is_some_and(|h| now.saturating_sub(h.at) > cfg.max_held_age)
        {
            if let Some(h) = inc.held.pop_front() {
                inc.held_bytes -= h.frame.len();
                inc.stats.expired += 1;
            }
        }
        while !inc.held.is_empty()
            && (inc.held.len() >= cfg.max_held_frames
                || inc.held_bytes + frame.len() > cfg.max_held_bytes)
        {
            if let Some(h) = inc.held.pop_front() {
                inc.held_bytes -= h.frame.len();
                inc.stats.overflowed += 1;
            }
        }
        inc.held_bytes += frame.len();
        inc.stats.buffered += 1;
        inc.held.push_back(HeldFrame {
            at: now,
            datapath,
            inport,
            outport,
            frame: frame.to_vec(),
        });
    }

    /// A frame from local port `name` (id `id`) while its migration waits: held (true) or to
    /// be processed now (false). Before activation, everything but the announcement that
    /// activates the port is held (the VM may send before its hypervisor's RARP: OVN drops
    /// that, which costs the VM its first segments); after it, everything until the final
    /// delta.
    pub(crate) fn hold_from_port(&mut self, name: &str, id: u32, frame: &[u8]) -> bool {
        let waiting = self.pipeline.activation_of(id);
        let Some(inc) = self.mig.incoming.get_mut(name) else {
            return false;
        };
        if inc.activated.is_none() && waiting.is_none_or(|a| a.activates(frame)) {
            return false;
        }
        if inc.from_port.len() < MAX_FROM_PORT {
            inc.from_port.push_back(frame.to_vec());
            inc.stats.held_from_port += 1;
        }
        true
    }

    /// The pipeline activated local port `name` (its RARP/GARP/NA, or the controller).
    pub(crate) fn on_port_activated(&mut self, name: &str, now: Duration) {
        self.mig.activated.insert(name.to_string());
        let Some(inc) = self.mig.incoming.get_mut(name) else {
            return;
        };
        if inc.activated.is_some() {
            return;
        }
        inc.activated = Some(now);
        inc.stats.activated_us = Some(us(now));
        let announce = inc.announce.clone();
        let src = inc.source.clone();
        let epoch = inc.epoch;
        for a in &announce {
            self.announce(a);
        }
        let peer = src.as_deref().and_then(|s| self.mig.peer_of(s));
        match peer {
            Some(peer) => {
                self.state_send(
                    peer,
                    &StateMsg::Activated {
                        port: name.to_string(),
                        epoch,
                    },
                );
                let wait = self.cfg.migration.final_wait;
                if let Some(i) = self.mig.incoming.get_mut(name) {
                    i.final_deadline = Some(now + wait);
                }
            }
            // No source, or it cannot be reached: go on with what arrived.
            None => self.complete(name, false, now),
        }
    }

    fn announce(&mut self, a: &crate::proto::AnnounceMsg) {
        let Ok(ip) = a.ip.parse::<std::net::Ipv4Addr>() else {
            self.log_once(Level::Warn, format_args!("announce-ip:{}", a.ip), || {
                format!("announce: {} is not an IPv4 address", a.ip)
            });
            return;
        };
        let Some(id) = self.ports.get(&a.via).map(|p| p.id) else {
            self.log_once(Level::Warn, format_args!("announce-via:{}", a.via), || {
                format!("announce of {ip}: no local port {} to send it by", a.via)
            });
            return;
        };
        let f = garp(a.mac, ip);
        self.queue_port_frame(id, &f);
        self.log(
            Level::Info,
            format!("announced {ip} at {} by port {}", mac_text(a.mac), a.via),
        );
    }

    /// Releases the held frames of `port` (after the final delta, or without it).
    fn complete(&mut self, port: &str, got_final: bool, now: Duration) {
        let Some(mut inc) = self.mig.incoming.remove(port) else {
            return;
        };
        let id = self.ports.get(port).map(|p| p.id);
        if let Some(id) = id {
            self.pipeline.set_port_held(id, false);
            self.trim_port = Some(id);
        }
        let held = std::mem::take(&mut inc.held);
        let before_trim = self.trimmed;
        for h in held {
            if now.saturating_sub(h.at) > self.cfg.migration.max_held_age {
                inc.stats.expired += 1;
                continue;
            }
            let from = Ingress::Tunnel {
                datapath: h.datapath,
                inport: h.inport,
                outport: h.outport,
            };
            self.run(from, &h.frame, now, true);
        }
        inc.stats.trimmed = self.trimmed - before_trim;
        self.trim_port = None;
        self.trim.clear();
        let from_port = std::mem::take(&mut inc.from_port);
        for f in from_port {
            self.handle_port_frame(port, &f, now);
        }
        let outcome = if got_final {
            "completed"
        } else {
            "completed-without-final"
        };
        self.log(
            Level::Info,
            format!(
                "migration of {port} here {outcome}: {} connections moved, {} frames held, {} \
                 trimmed, {} overflowed, {} expired",
                inc.stats.entries_moved,
                inc.stats.buffered,
                inc.stats.trimmed,
                inc.stats.overflowed,
                inc.stats.expired
            ),
        );
        self.mig.finish(inc.stats, outcome.into(), now);
        self.apply_holds();
    }

    /// A delivery to the port being completed: false when the source had delivered the same
    /// frame (trimmed).
    pub(crate) fn trim_check(&mut self, id: u32, frame: &[u8]) -> bool {
        if self.trim_port != Some(id) || self.trim.is_empty() {
            return true;
        }
        let h = frame_hash(frame);
        match self.trim.get_mut(&h) {
            Some(n) if *n > 0 => {
                *n -= 1;
                self.trimmed += 1;
                false
            }
            _ => true,
        }
    }

    /// Migration timers: deltas, final waits, pull retries, copy expiry, release drops.
    pub(crate) fn migration_timeout(&mut self, now: Duration) {
        // Deltas.
        let due: Vec<(String, PeerId, u64, Duration)> = self
            .mig
            .outgoing
            .iter()
            .filter(|(_, o)| !o.finished && o.next_delta <= now)
            .map(|(n, o)| (n.clone(), o.peer, o.epoch, o.last_export))
            .collect();
        for (port, peer, epoch, since) in due {
            let sel = self.port_selection(&port).touched_since(since);
            let probe = self.ct.export(&sel, now);
            let interval = self.cfg.migration.delta_interval;
            if !probe.conns.is_empty() {
                let (n, bytes) =
                    self.send_conns(peer, &port, epoch, ConnsPhase::Delta, &sel, Vec::new(), now);
                if let Some(o) = self.mig.outgoing.get_mut(&port) {
                    o.stats.delta_entries += n;
                    o.stats.entries_moved += n;
                    o.stats.bytes_moved += bytes;
                }
            }
            if let Some(o) = self.mig.outgoing.get_mut(&port) {
                o.last_export = now;
                o.next_delta = now + interval;
            }
        }
        // Final waits that ran out: the source is silent.
        let late: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| i.final_deadline.is_some_and(|d| d <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in late {
            self.log(
                Level::Warn,
                format!("migration of {n}: no final delta from the source in time; going on"),
            );
            self.complete(&n, false, now);
        }
        // Copies whose source stayed away too long.
        let ttl = self.cfg.migration.copy_ttl;
        let expired: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| i.lost_since.is_some_and(|t| now.saturating_sub(t) >= ttl))
            .map(|(n, _)| n.clone())
            .collect();
        for n in expired {
            if let Some(i) = self.mig.incoming.get_mut(&n) {
                let mut gone = 0;
                for t in std::mem::take(&mut i.imported) {
                    if self.ct.remove_connection(&t) {
                        gone += 1;
                    }
                }
                i.lost_since = None;
                self.log(
                    Level::Info,
                    format!(
                        "migration of {n}: the source has been unreachable for {ttl:?}; the \
                         {gone} connections copied from it expire"
                    ),
                );
            }
        }
        // Releases whose grace is over.
        let drop: Vec<String> = self
            .mig
            .outgoing
            .iter()
            .filter(|(_, o)| o.release_at.is_some_and(|t| t <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in drop {
            let Some(o) = self.mig.outgoing.remove(&n) else {
                continue;
            };
            if !o.finished {
                self.mig.finish(o.stats.clone(), "released".into(), now);
            }
            let mut gone = 0;
            for t in &o.sent {
                if self.ct.remove_connection(t) {
                    gone += 1;
                }
            }
            self.log(
                Level::Info,
                format!(
                    "port {n} left for {}: {gone} handed-over connections removed",
                    o.stats.peer
                ),
            );
        }
        self.pull_due(now);
    }

    /// When [`Datapath::migration_timeout`] next has work.
    pub(crate) fn migration_deadline(&self) -> Option<Duration> {
        let mut t: Option<Duration> = None;
        let mut at = |d: Duration| t = Some(t.map_or(d, |x| x.min(d)));
        for o in self.mig.outgoing.values() {
            if !o.finished {
                at(o.next_delta);
            }
            if let Some(r) = o.release_at {
                at(r);
            }
        }
        for i in self.mig.incoming.values() {
            if let Some(d) = i.final_deadline {
                at(d);
            }
            // While the session to the source is being opened, its outcome (connected, failed,
            // closed) is what comes next, not the pull's retry: a pull due meanwhile would
            // wake the shell in a loop until the dial ends.
            if !i.pulled
                && i.activated.is_none()
                && i.source
                    .as_deref()
                    .is_some_and(|s| !self.mig.session_pending(s))
            {
                at(i.next_pull);
            }
            if let Some(l) = i.lost_since {
                at(l + self.cfg.migration.copy_ttl);
            }
        }
        t
    }

    /// Ports to re-report as activated to a (new) controller.
    pub(crate) fn activated_ports(&self) -> Vec<String> {
        self.mig.activated.iter().cloned().collect()
    }

    /// The program no longer says `port` waits: forget that it was activated here.
    pub(crate) fn forget_activations(&mut self) {
        let waiting: BTreeSet<String> = self
            .program
            .as_ref()
            .map(|p| {
                p.datapaths
                    .iter()
                    .flat_map(|d| d.ports.iter())
                    .filter(|q| q.activation.is_some())
                    .map(|q| q.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        self.mig.activated.retain(|p| waiting.contains(p));
    }
}

fn mac_text(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}
