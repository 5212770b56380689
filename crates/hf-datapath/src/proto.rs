//! The controller ↔ datapath control protocol (DESIGN "Seams": controller → datapath).
//!
//! # What it is
//!
//! A versioned, length-prefixed binary protocol over a local stream (a unix socket in the
//! daemons, an in-memory pipe in the simulator). Every frame is a 4-byte big-endian payload
//! length followed by a [postcard](https://docs.rs/postcard) encoding of one message. The first
//! message each way is a hello carrying [`PROTOCOL_VERSION`]; a peer with another version is
//! answered with [`FromDatapath::Error`] and disconnected. Messages are values, not code: a
//! program carries flows as SB text with their identity, ports, zones and the chassis table by
//! name, and the datapath compiles it. The datapath keeps the last program it installed and the
//! zone map and hands both back to a (re)connecting controller ([`FromDatapath::Hello`]), which is
//! what makes a controller restart lossless.
//!
//! The same encoding carries the state handoff between datapath processes
//! ([`ToDatapath::ExportState`] → [`FromDatapath::Exported`]), so it is versioned from the first
//! day: bump [`PROTOCOL_VERSION`] on any change to a message.
//!
//! # What it does not do
//!
//! No I/O: [`encode_to`] appends a frame to a buffer and [`Decoder`] splits received bytes into
//! messages. Untrusted bytes never panic: a bad length or payload is a [`ProtoError`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::delta::{
    Applied, DatapathChange, DatapathsDelta, DeltaError, DeltaHint, FewTexts, ListDelta, MapDelta,
    PrevFlows, ProgramDelta, Undo, apply, apply_undoable, between, unique_datapaths,
};

/// The protocol version; both hellos carry it.
///
/// Version 4 added [`ToDatapath::ProgramDelta`] and [`FromDatapath::BaseMismatch`] (as new last
/// variants: every message of version 3, the state export included, encodes the same, so a
/// version-3 export imports; see `tests/handoff_v3.rs`).
///
/// Version 5 added the hitless takeover of a running datapath by a new process
/// ([`ToDatapath::TakeOver`], [`FromDatapath::HandOver`]), again as new last variants. A
/// controller never sends or receives them, so a version-5 peer still speaks with a version-4
/// one ([`MIN_PROTOCOL_VERSION`]); only a takeover needs version 5 at both ends.
///
/// Version 6 added meters ([`ToDatapath::Meters`]) and ACL log lines
/// ([`FromDatapath::AclLog`]), and the service monitors ([`ToDatapath::SvcMonitors`],
/// [`FromDatapath::SvcStatus`]: LB health checks, probed by the datapath, see [`crate::svc`]),
/// again as new last variants, each sent only to a version-6 peer: with an older controller a
/// datapath writes ACL log lines to its own log and runs no health checks, and an older
/// datapath runs unmetered and unprobed (a controller it refuses greets it with its version
/// next).
///
/// Version 7 added port mirroring ([`ToDatapath::Mirrors`]: SB `Mirror` sessions of the local
/// ports, see [`crate::mirror`]), as a new last variant, sent only to a version-7 peer: an
/// older datapath mirrors nothing, and the controller says so for every mirrored local port.
///
/// Version 8 added multicast snooping ([`ToDatapath::Mcast`]: the snooping switches with
/// local ports, [`FromDatapath::McastGroups`]: their learned groups, see [`crate::snoop`]), as
/// new last variants, each sent only to a version-8 peer: an older datapath snoops nothing
/// (the controller says so once), and an older controller leaves `IGMP_Group` alone; and
/// periodic router advertisements ([`ToDatapath::PeriodicRas`], see [`crate::ra`]), which an
/// older datapath does not send (the controller says so once).
///
/// Version 9 added BFD from logical router ports to their next hops ([`ToDatapath::HopBfd`],
/// [`FromDatapath::HopBfdStatus`], see [`crate::hop_bfd`]), as new last variants, each sent
/// only to a version-9 peer: an older datapath runs no such session (the controller says so
/// once, and their SB status stays as northd wrote it).
///
/// Version 10 added the BFD sessions to a takeover ([`ToDatapath::TakeOverSessions`],
/// [`FromDatapath::ExportedSessions`]), as new last variants: a new process asks for them
/// only from a version-10 datapath (an older one hands over without them, and its sessions
/// start again `Down` in the new process).
pub const PROTOCOL_VERSION: u32 = 10;

/// The first version whose takeover hands over the BFD sessions.
pub const SESSIONS_TAKEOVER_VERSION: u32 = 10;

/// The first version with BFD to next hops.
pub const HOP_BFD_VERSION: u32 = 9;

/// The first version with multicast snooping.
pub const MCAST_VERSION: u32 = 8;

/// The first version with port mirroring.
pub const MIRROR_VERSION: u32 = 7;

/// The first version with service monitors.
pub const SVC_VERSION: u32 = 6;

/// The version a takeover's hello says (the first with [`ToDatapath::TakeOver`]): the
/// running datapath may be older than the new process.
pub const TAKEOVER_VERSION: u32 = 5;

/// The oldest peer version this build speaks with (see [`PROTOCOL_VERSION`]).
pub const MIN_PROTOCOL_VERSION: u32 = 4;

/// Whether a peer's hello version is one this build speaks.
pub fn speaks(version: u32) -> bool {
    (MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version)
}

/// The largest frame accepted (a program for a 500-switch topology is tens of MB).
pub const MAX_FRAME: usize = 512 << 20;

/// Controller → datapath.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToDatapath {
    /// The first message: who is connecting, and its protocol version.
    Hello {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// The controller's chassis name (`external_ids:system-id`).
        chassis: String,
    },
    /// Install this program atomically: the datapath compiles it whole and swaps it in, or
    /// keeps the previous one and answers [`FromDatapath::Rejected`].
    Program(Box<ProgramMsg>),
    /// Flush the conntrack entries of these zones (by stable name). The datapath refuses zone 0
    /// and names not in its zone map; flushed names leave the zone map.
    FlushZones {
        /// Zone names (`lsp/<port>`, `lr/<router>/dnat`, ...).
        names: Vec<String>,
    },
    /// Dump conntrack entries, of one zone (by name) or all.
    DumpConntrack {
        /// A zone name, or `None` for every zone.
        zone: Option<String>,
    },
    /// Activate a port waiting for activation (`activation-strategy`), as a RARP would.
    SetPortActive {
        /// Logical port name.
        port: String,
    },
    /// Report counters.
    GetCounters,
    /// Export the whole state (program, zone map, conntrack) for a handoff to another
    /// datapath process.
    ExportState,
    /// Keep-alive; answered with [`FromDatapath::Pong`].
    Ping {
        /// Echoed back.
        seq: u64,
    },
    /// Install the running program changed by this delta ([`crate::delta`]), atomically as
    /// for [`ToDatapath::Program`]: answered with [`FromDatapath::Installed`] or
    /// [`FromDatapath::Rejected`] (the previous program keeps running), or with
    /// [`FromDatapath::BaseMismatch`] when the datapath does not run the delta's base (no
    /// program, another generation, a datapath held at earlier flows, or a delta that does
    /// not fit): the controller then sends the whole program. (Added in version 4.)
    ProgramDelta(Box<ProgramDelta>),
    /// A new datapath process takes this one's place (`holdfast datapath --takeover`): the
    /// answer is [`FromDatapath::Exported`] with the whole state, after which this datapath
    /// forwards nothing more ([`crate::Datapath::handed_over`]); its shell then sends
    /// [`FromDatapath::HandOver`] with its sockets and exits. Only from a version-5 peer.
    /// (Added in version 5.)
    TakeOver,
    /// The chassis's meters (SB `Meter`) and the flows' controller meters
    /// (`Logical_Flow.controller_meter`, by flow identity), replacing the last ones; they
    /// apply to the running program and every later one. Only to a version-6 peer. (Added in
    /// version 6.)
    Meters(MetersMsg),
    /// The service monitors whose logical ports are bound here, all of them (a monitor not in
    /// the list stops): the datapath probes each backend ([`crate::svc`]) and answers with
    /// [`FromDatapath::SvcStatus`] for every monitor whose status it knows. Only to a
    /// version-6 peer. (Added in version 6.)
    SvcMonitors(Vec<SvcMonitorMsg>),
    /// The mirror sessions of the local ports, all of them (a session not in the list stops):
    /// what a port sends and/or receives is copied, encapsulated in GRE or ERSPAN, to the
    /// session's sink ([`crate::mirror`], [`crate::Transmit::Mirror`]). Only to a version-7
    /// peer. (Added in version 7.)
    Mirrors(Vec<MirrorMsg>),
    /// The chassis to run BFD with over the tunnels, all of them (a session not in the list
    /// stops), and the timers ([`crate::bfd`]); the datapath answers with
    /// [`FromDatapath::BfdStatus`] whenever a state changes. Only to a version-7 peer. (Added
    /// in version 7.)
    Bfd(BfdMsg),
    /// Gratuitous ARPs to send now and again 2, 6, 14 and 30 s later (a gateway that became
    /// active for its addresses, as pinctrl announces them). Only to a version-7 peer. (Added
    /// in version 7.)
    Garps(Vec<AnnounceMsg>),
    /// The snooping switches (SB `IP_Multicast` with `enabled`) that have local ports, all of
    /// them (a switch not in the list stops snooping): the datapath learns their groups from
    /// what `igmp` punts, queries, and answers with [`FromDatapath::McastGroups`] for every
    /// switch whose groups changed ([`crate::snoop`]). Only to a version-8 peer. (Added in
    /// version 8.)
    Mcast(Vec<crate::snoop::McastCfgMsg>),
    /// The periodic router advertisements of the router ports whose switches have local
    /// ports, all of them ([`crate::ra`]). Only to a version-8 peer. (Added in version 8.)
    PeriodicRas(Vec<crate::ra::PeriodicRaMsg>),
    /// The BFD sessions to next hops whose router ports are resident here, all of them (a
    /// session not in the list stops): the datapath runs them ([`crate::hop_bfd`]) and answers
    /// with [`FromDatapath::HopBfdStatus`] for every session, then for each change. Only to a
    /// version-9 peer. (Added in version 9.)
    HopBfd(Vec<crate::hop_bfd::HopBfdMsg>),
    /// [`ToDatapath::TakeOver`], with the BFD sessions handed over too
    /// ([`FromDatapath::ExportedSessions`] first): the new process runs them on, so neither
    /// the other chassis nor the next hops see a session go down (which would move gateways
    /// away and take routes out). Only to a version-10 datapath (its hello says so).
    /// (Added in version 10.)
    TakeOverSessions,
}

/// [`ToDatapath::Bfd`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdMsg {
    /// (chassis name, tunnel IP) of each peer.
    pub peers: Vec<(String, std::net::IpAddr)>,
    /// The timers.
    pub timers: crate::bfd::BfdTimers,
}

/// How a mirror session reaches its sink (SB `Mirror.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MirrorKind {
    /// GRE (RFC 2890) with the session's index as key, carrying the Ethernet frame (`0x6558`).
    Gre,
    /// ERSPAN type II (version 1) in GRE with a sequence number.
    Erspan,
}

/// Which of a port's frames a session copies (SB `Mirror.filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum MirrorFilter {
    /// What the port sends into the network (`from-lport`), as it sent it.
    FromLport,
    /// What the network delivers to the port (`to-lport`), as it is delivered.
    ToLport,
}

/// One mirror session (an SB `Mirror` row) and the local ports whose `mirror_rules` name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MirrorMsg {
    /// `name`.
    pub name: String,
    /// `type`.
    pub kind: MirrorKind,
    /// `filter`.
    pub filter: MirrorFilter,
    /// `sink`: the collector's IP address (as SB has it; the datapath parses it).
    pub sink: String,
    /// `index`: the GRE key; for ERSPAN the session ID and, as OVS reads ovn-controller's
    /// `erspan_idx` option, the ERSPAN index.
    pub index: i64,
    /// The local ports mirrored (logical port names, as the datapath's ports are named).
    pub ports: Vec<String>,
}

/// The meters a chassis runs ([`ToDatapath::Meters`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetersMsg {
    /// SB `Meter` rows.
    pub meters: Vec<MeterMsg>,
    /// (flow identity, meter name) for every flow with a `controller_meter`.
    pub flow_meters: Vec<(String, String)>,
}

/// One SB `Meter` with its drop bands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterMsg {
    /// `name`.
    pub name: String,
    /// `unit` is `pktps` (else `kbps`).
    pub pktps: bool,
    /// (`rate`, `burst_size`) of each band.
    pub bands: Vec<(u64, u64)>,
}

/// One service monitor to probe (SB `Service_Monitor`, with the backend's MAC resolved by the
/// controller as pinctrl resolves it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SvcMonitorMsg {
    /// `logical_port`: the backend's port, local here.
    pub logical_port: String,
    /// `ip`: the backend.
    pub ip: String,
    /// `port`: the backend's service port.
    pub port: u16,
    /// `protocol`: `tcp` or `udp`.
    pub protocol: String,
    /// `src_mac` (`svc_monitor_mac`).
    pub src_mac: [u8; 6],
    /// `src_ip`.
    pub src_ip: String,
    /// The backend's MAC.
    pub dst_mac: [u8; 6],
    /// `options` (`interval`, `timeout`, `success_count`, `failure_count`).
    pub options: BTreeMap<String, String>,
}

/// A monitor's status as the datapath's probes found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SvcStatusMsg {
    /// `logical_port`.
    pub logical_port: String,
    /// `ip`.
    pub ip: String,
    /// `port`.
    pub port: u16,
    /// `protocol`.
    pub protocol: String,
    /// `online` or `offline`.
    pub status: String,
}

/// Datapath → controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromDatapath {
    /// The answer to [`ToDatapath::Hello`]: the datapath's state, so a restarted controller
    /// reconciles against what is running instead of starting over.
    Hello {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// The datapath's name (its chassis).
        chassis: String,
        /// Local ports (the interfaces whose names are `iface-id`s to claim).
        ports: Vec<LocalPort>,
        /// The zone map (stable name → zone).
        zones: BTreeMap<String, u16>,
        /// The last program installed, if any (with its flows' last good versions).
        program: Option<Box<ProgramMsg>>,
    },
    /// A program was installed.
    Installed {
        /// [`ProgramMsg::generation`] of the installed program.
        generation: u64,
        /// Flows that did not compile, with the version that runs instead (if any).
        flow_errors: Vec<FlowErrorMsg>,
    },
    /// A program was not installed (a structural error); the previous one keeps running.
    Rejected {
        /// [`ProgramMsg::generation`] of the refused program.
        generation: u64,
        /// Why.
        reason: String,
    },
    /// A local port appeared.
    PortAdded(LocalPort),
    /// A local port went away.
    PortRemoved {
        /// Its name.
        name: String,
    },
    /// Neighbours the pipeline learned (`put_arp`, `put_nd`): for SB `MAC_Binding`.
    Learned(Vec<LearnedNeighbour>),
    /// A port was activated on this chassis (its first RARP/GARP, or [`ToDatapath::SetPortActive`]).
    PortActivated {
        /// Logical port name.
        port: String,
    },
    /// The answer to [`ToDatapath::FlushZones`].
    Flushed {
        /// Zone names flushed.
        names: Vec<String>,
        /// Entries removed.
        entries: u64,
    },
    /// The answer to [`ToDatapath::DumpConntrack`]: one line per connection, in
    /// `ovs-appctl dpctl/dump-conntrack`'s style.
    Conntrack(Vec<String>),
    /// The answer to [`ToDatapath::GetCounters`].
    Counters(Counters),
    /// The answer to [`ToDatapath::ExportState`].
    Exported(Box<StateExport>),
    /// The answer to [`ToDatapath::Ping`].
    Pong {
        /// Echoed.
        seq: u64,
    },
    /// A request failed (or the peer speaks another version); the text says why.
    Error {
        /// What went wrong.
        message: String,
    },
    /// FDB entries the pipeline learned (`put_fdb`): for SB `FDB`. (Added in issue 11,
    /// additively: a new last variant.)
    LearnedFdb(Vec<FdbMsg>),
    /// `bind_vport(V, P)` ran: virtual port `vport` is reached through `parent` on this
    /// chassis (the controller claims `vport`, as pinctrl does). (Added in issue 11.)
    VportBound {
        /// Datapath name.
        datapath: String,
        /// The virtual port.
        vport: String,
        /// Its parent port.
        parent: String,
    },
    /// A [`ToDatapath::ProgramDelta`] was not applied because this datapath does not run its
    /// base as the controller knows it; nothing changed. The controller sends the whole
    /// program. (Added in version 4.)
    BaseMismatch {
        /// The delta's generation.
        generation: u64,
        /// The delta's base.
        base: u64,
        /// The generation running here (0: none).
        running: u64,
        /// Why, in words.
        reason: String,
    },
    /// The sockets of a datapath that was taken over ([`ToDatapath::TakeOver`]), passed with
    /// this frame as `SCM_RIGHTS` ancillary data, one file descriptor per handle, in order.
    /// Sent by the daemon's shell, after [`FromDatapath::Exported`]. (Added in version 5.)
    HandOver {
        /// What each passed descriptor is.
        handles: Vec<HandleMsg>,
    },
    /// ACL log lines (`log()` actions that ran with their meter's leave), each the text
    /// ovn-controller's `acl_log` module writes after `acl_log|INFO|`
    /// ([`crate::acl_log::line`]). Only to a version-6 peer. (Added in version 6.)
    AclLog(Vec<String>),
    /// Service monitors whose status changed (or, in answer to [`ToDatapath::SvcMonitors`],
    /// every monitor whose status is known). Only to a version-6 peer. (Added in version 6.)
    SvcStatus(Vec<SvcStatusMsg>),
    /// Every BFD session's state, after any changed ([`ToDatapath::Bfd`]). Only to a
    /// version-7 peer. (Added in version 7.)
    BfdStatus(Vec<crate::bfd::BfdStatusMsg>),
    /// The groups of snooping switches whose groups changed (or, in answer to
    /// [`ToDatapath::Mcast`], of every snooping switch). Only to a version-8 peer. (Added in
    /// version 8.)
    McastGroups(Vec<crate::snoop::McastGroupsMsg>),
    /// BFD sessions to next hops whose state changed (or, in answer to
    /// [`ToDatapath::HopBfd`], every session). Only to a version-9 peer. (Added in version 9.)
    HopBfdStatus(Vec<crate::hop_bfd::HopBfdStatusMsg>),
    /// The BFD sessions, in answer to [`ToDatapath::TakeOverSessions`], before
    /// [`FromDatapath::Exported`]. (Added in version 10.)
    ExportedSessions(Box<SessionsExport>),
}

/// The BFD sessions a takeover hands to the new process, which runs them on without a
/// state change the peers could see ([`crate::bfd::Bfd::import`],
/// [`crate::hop_bfd::HopBfd::import`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionsExport {
    /// Between chassis over the tunnels.
    pub tunnel: crate::bfd::BfdExport,
    /// From router ports to next hops.
    pub hop: crate::hop_bfd::HopBfdExport,
}

/// One socket passed in a takeover ([`FromDatapath::HandOver`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandleMsg {
    /// A port's interface socket (AF_PACKET).
    Port {
        /// The logical port (`iface-id`) it is attached to.
        port: String,
        /// The network device.
        ifname: String,
    },
    /// The Geneve UDP socket.
    Geneve,
    /// The control socket's listener.
    Control,
    /// Live migration's state-channel listener.
    StateListen,
}

/// A local port of the datapath.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalPort {
    /// The interface's `iface-id`: the logical port it is for.
    pub name: String,
    /// Its Ethernet address, when known.
    pub mac: Option<[u8; 6]>,
}

/// A learned neighbour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedNeighbour {
    /// Datapath name.
    pub datapath: String,
    /// Logical port it was learned on.
    pub port: String,
    /// The IP, as text.
    pub ip: String,
    /// Its MAC.
    pub mac: [u8; 6],
}

/// A flow that did not compile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowErrorMsg {
    /// Its identity ([`FlowMsg::id`]).
    pub id: String,
    /// Its datapath.
    pub datapath: String,
    /// Why (kind and detail).
    pub reason: String,
    /// The last good version runs instead ([`FlowMsg::last_good`] compiled).
    pub kept_last_good: bool,
    /// No last good version ran, and the flow is in a security stage (port security, ACLs:
    /// [`crate::program::is_security_stage`]): `drop;` over `1` runs at its table and priority
    /// instead (fail closed). False when the flow is simply left out.
    pub failed_closed: bool,
    /// Its datapath is held at the flows it ran before this program (some flow of it has no
    /// version that compiles, and the datapath had run one): none of the program's flows of
    /// that datapath run, the previous ones do (`kept_last_good` is true; false for a previous
    /// flow that no longer compiles, which is left out and reported).
    pub held: bool,
}

/// Datapath counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// The installed program's generation.
    pub generation: u64,
    /// Frames received on local ports.
    pub rx_port: u64,
    /// Frames received from tunnels.
    pub rx_tunnel: u64,
    /// Frames sent to local ports.
    pub tx_port: u64,
    /// Frames sent into tunnels.
    pub tx_tunnel: u64,
    /// Frames dropped (by the pipeline or for want of a destination).
    pub dropped: u64,
    /// Flow cache hits and misses.
    pub cache_hits: u64,
    /// Flow cache misses.
    pub cache_misses: u64,
    /// Live conntrack entries.
    pub conntrack_entries: u64,
    /// Packet-in replies built in the datapath (DHCP, DNS, RA).
    pub packet_in: u64,
}

/// The state handed to a new datapath process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateExport {
    /// The program.
    pub program: Option<ProgramMsg>,
    /// The zone map.
    pub zones: BTreeMap<String, u16>,
    /// Conntrack, as `hf_conntrack::CtExport` encoded with postcard.
    pub conntrack: Vec<u8>,
    /// Ports activated on this chassis (a RARP/GARP/NA, or [`ToDatapath::SetPortActive`])
    /// while the program still says they wait: the new process keeps them active.
    pub activated: Vec<String>,
}

/// A whole program: everything a chassis forwards with.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramMsg {
    /// The controller's sequence number of this program (grows by one per push).
    pub generation: u64,
    /// The chassis it was translated for.
    pub chassis: String,
    /// `SB_Global.nb_cfg` the SB view had when this program was translated.
    pub nb_cfg: i64,
    /// The datapaths, each shared (`Arc`): the running program, the one in flight and the
    /// next build hold one copy of every datapath none of them changed. Encoded as the
    /// datapath itself (serde's `rc`), so the wire bytes are version 3's.
    pub datapaths: Vec<Arc<DatapathMsg>>,
    /// The zone map the program uses (stable name → zone; never 0). Every zone number in the
    /// program is in it; the datapath adopts it as its zone map.
    pub zones: BTreeMap<String, u16>,
    /// The chassis table (for tunnel destinations).
    pub chassis_table: Vec<ChassisMsg>,
    /// Known neighbours (SB `MAC_Binding`, `Static_MAC_Binding`).
    pub neighbours: Vec<NeighbourMsg>,
    /// Address sets by name (without `$`): members as SB writes them.
    pub address_sets: BTreeMap<String, Vec<String>>,
    /// Port groups by name (without `@`): logical port names.
    pub port_groups: BTreeMap<String, Vec<String>>,
    /// FDB entries (SB `FDB`).
    pub fdb: Vec<FdbMsg>,
    /// Load-balancer VIPs per datapath (for `ct_snat_to_vip`).
    pub lb_vips: Vec<LbVipMsg>,
    /// Per switch, its SNAT zone (for `ct_snat_to_vip`).
    pub switch_snat_zones: Vec<(String, u16)>,
    /// DNS records per datapath (SB `DNS`): for `dns_lookup`.
    pub dns: Vec<DnsMsg>,
    /// The conntrack owner recorded on connections this program commits.
    pub owner: u32,
    /// Local ports in a live migration that involves this chassis.
    pub migrations: Vec<MigrationMsg>,
    /// The feature level the controller parses (`hf-1`, `hf-2`, a `hf_expr::FeatureSet`
    /// spelling); `None`: every feature. A flow (or last good text) using a construct outside
    /// it is, for this program, a flow that does not parse: the same fallback to its last good
    /// version and the same report (DESIGN "The control-plane/data-plane contract").
    pub feature_level: Option<String>,
    /// A test hook (a naive controller that keeps no last good versions): flows do not fall
    /// back to their `last_good` text, and no datapath is held at the flows it ran before
    /// (normally false: a datapath with a flow that has no version that compiles keeps the
    /// flows it ran before, see `crate::program`).
    pub no_last_good: bool,
}

/// A local port in a live migration (`requested-chassis="src,dst"`): this chassis is its
/// destination (bound as an additional chassis) or its source (its primary chassis).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationMsg {
    /// The logical port.
    pub port: String,
    /// This chassis is the destination.
    pub incoming: bool,
    /// The other chassis by name: the source (incoming), or the destinations.
    pub peers: Vec<String>,
    /// What the destination announces once the port is active there (a distributed
    /// `dnat_and_snat`'s external address, so the provider network learns its new place).
    pub announce: Vec<AnnounceMsg>,
}

/// A gratuitous ARP to send at activation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnounceMsg {
    /// The Ethernet address (`external_mac`).
    pub mac: [u8; 6],
    /// The IPv4 address (`external_ip`), as text.
    pub ip: String,
    /// The local port it leaves by (a `localnet` port).
    pub via: String,
}

/// What activates a port waiting on this chassis (`options:activation-strategy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationMsg {
    /// A RARP.
    pub rarp: bool,
    /// A gratuitous ARP.
    pub garp: bool,
    /// An IPv6 neighbour advertisement.
    pub na: bool,
}

impl From<ActivationMsg> for hf_pipeline::Activation {
    fn from(a: ActivationMsg) -> Self {
        hf_pipeline::Activation {
            rarp: a.rarp,
            garp: a.garp,
            na: a.na,
        }
    }
}

impl From<hf_pipeline::Activation> for ActivationMsg {
    fn from(a: hf_pipeline::Activation) -> Self {
        ActivationMsg {
            rarp: a.rarp,
            garp: a.garp,
            na: a.na,
        }
    }
}

/// One logical datapath.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatapathMsg {
    /// Its name.
    pub name: String,
    /// Its tunnel key (VNI).
    pub tunnel_key: u32,
    /// `None` for a switch; a router's (DNAT zone, SNAT zone).
    pub router_zones: Option<(u16, u16)>,
    /// Ports (shared: a datapath whose flows changed keeps its ports' list; encoded as the
    /// ports).
    pub ports: Arc<Vec<PortMsg>>,
    /// Multicast groups (shared as `ports` is).
    pub groups: Arc<Vec<GroupMsg>>,
    /// Flows of both pipelines, each shared: a datapath edited by a change of a few flows is a
    /// new list of the same flows (one reference count each), not a copy of every flow's
    /// texts, and two programs' lists compare by pointer first. Encoded as the flows.
    pub flows: Vec<Arc<FlowMsg>>,
}

/// Where a port lives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocationMsg {
    /// On this chassis, on the local port with this name (its `iface-id`).
    Local(String),
    /// On the chassis with this id of [`ProgramMsg::chassis_table`].
    Remote(u32),
    /// A patch port to the named peer.
    Patch(String),
    /// Not bound.
    #[default]
    Unbound,
    /// A resident `chassisredirect` port continuing as the named distributed port.
    Redirect(String),
}

/// One logical port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMsg {
    /// Logical port name.
    pub name: String,
    /// Tunnel key within the datapath.
    pub key: u32,
    /// Where it lives.
    pub location: LocationMsg,
    /// Its conntrack zone (a switch port's `lsp/<port>`), or 0.
    pub zone: u16,
    /// `Port_Binding.type`.
    pub kind: String,
    /// `is_chassis_resident()` holds.
    pub resident: bool,
    /// Further chassis (ids) it is bound to.
    pub also_remote: Vec<u32>,
    /// Starts inactive here until one of these frames (or [`ToDatapath::SetPortActive`])
    /// activates it; `None`: active.
    pub activation: Option<ActivationMsg>,
    /// `Port_Binding.mac`.
    pub addresses: Vec<String>,
    /// `Port_Binding.port_security`.
    pub port_security: Vec<String>,
}

/// A multicast group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMsg {
    /// Its name.
    pub name: String,
    /// Its key.
    pub key: u32,
    /// Member port names.
    pub members: Vec<String>,
}

/// One logical flow, as SB text with its identity.
#[derive(Debug, Clone, Default, Eq, Serialize, Deserialize)]
pub struct FlowMsg {
    /// `false` = ingress, `true` = egress.
    pub egress: bool,
    /// Table.
    pub table: u8,
    /// Priority.
    pub priority: u16,
    /// Match text (shared: the controller's last good store and every program holding this
    /// flow point at one copy; encoded as a string; decoded once per frame for all equal
    /// texts, see [`crate::intern`]).
    #[serde(deserialize_with = "crate::intern::arc")]
    pub matches: Arc<str>,
    /// Actions text (shared as `matches` is).
    #[serde(deserialize_with = "crate::intern::arc")]
    pub actions: Arc<str>,
    /// Stable identity (`hf_pipeline::FlowId`'s string; shared as `matches` is).
    #[serde(deserialize_with = "crate::intern::arc")]
    pub id: Arc<str>,
    /// `external_ids:stage-name` (shared as `matches` is).
    #[serde(deserialize_with = "crate::intern::arc")]
    pub stage: Arc<str>,
    /// SB `Logical_Flow` UUID (shared as `matches` is).
    #[serde(deserialize_with = "crate::intern::opt_arc")]
    pub sb_uuid: Option<Arc<str>>,
    /// `external_ids:stage-hint` (shared as `matches` is).
    #[serde(deserialize_with = "crate::intern::opt_arc")]
    pub stage_hint: Option<Arc<str>>,
    /// The last version of this flow (same identity) that compiled, when it differs from this
    /// one: the datapath compiles it instead when this text does not compile (DESIGN "The
    /// control-plane/data-plane contract"), so a bad flow never leaves a hole.
    #[serde(deserialize_with = "crate::intern::opt_pair")]
    pub last_good: Option<(Arc<str>, Arc<str>)>,
}

pub use hf_pipeline::{same_opt_text, same_text};

impl PartialEq for FlowMsg {
    fn eq(&self, o: &FlowMsg) -> bool {
        // Every field, the cheap ones first (a destructure: a new field must be compared).
        let FlowMsg {
            egress,
            table,
            priority,
            matches,
            actions,
            id,
            stage,
            sb_uuid,
            stage_hint,
            last_good,
        } = self;
        *egress == o.egress
            && *table == o.table
            && *priority == o.priority
            && same_text(id, &o.id)
            && same_text(matches, &o.matches)
            && same_text(actions, &o.actions)
            && same_text(stage, &o.stage)
            && same_opt_text(sb_uuid, &o.sb_uuid)
            && same_opt_text(stage_hint, &o.stage_hint)
            && match (last_good, &o.last_good) {
                (Some((m, a)), Some((om, oa))) => same_text(m, om) && same_text(a, oa),
                (None, None) => true,
                _ => false,
            }
    }
}

/// A chassis of the chassis table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChassisMsg {
    /// The id used by [`LocationMsg::Remote`].
    pub id: u32,
    /// `Chassis.name`.
    pub name: String,
    /// Encapsulation type (`geneve`).
    pub encap_type: String,
    /// Tunnel endpoint IP, as text.
    pub ip: String,
}

/// A known neighbour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighbourMsg {
    /// Datapath name.
    pub datapath: String,
    /// Logical port.
    pub port: String,
    /// IP as text.
    pub ip: String,
    /// MAC.
    pub mac: [u8; 6],
}

/// An FDB entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbMsg {
    /// Datapath name.
    pub datapath: String,
    /// Logical port.
    pub port: String,
    /// MAC.
    pub mac: [u8; 6],
}

/// A load-balancer VIP on a datapath.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbVipMsg {
    /// Datapath name.
    pub datapath: String,
    /// VIP as text.
    pub ip: String,
    /// Port (0 = none).
    pub port: u16,
    /// IP protocol.
    pub proto: u8,
}

/// DNS records of a datapath (SB `DNS.records`: name → space-separated addresses).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsMsg {
    /// Datapath name.
    pub datapath: String,
    /// Records.
    pub records: BTreeMap<String, String>,
}

/// What went wrong reading the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A frame longer than [`MAX_FRAME`].
    #[error("control frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLong(usize),
    /// A payload that is not a valid message.
    #[error("undecodable control message ({len} bytes): {detail}")]
    Decode {
        /// Payload length.
        len: usize,
        /// postcard's reason.
        detail: String,
    },
    /// Encoding failed (should not happen for well-formed values).
    #[error("cannot encode control message: {0}")]
    Encode(String),
}

/// Appends one frame carrying `msg` to `out`.
pub fn encode_to<T: Serialize>(msg: &T, out: &mut Vec<u8>) -> Result<(), ProtoError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut buf = std::mem::take(out);
    buf = postcard::to_extend(msg, buf).map_err(|e| ProtoError::Encode(e.to_string()))?;
    let len = buf.len() - start - 4;
    if len > MAX_FRAME {
        buf.truncate(start);
        *out = buf;
        return Err(ProtoError::TooLong(len));
    }
    buf[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
    *out = buf;
    Ok(())
}

/// One frame carrying `msg`.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    let mut out = Vec::new();
    encode_to(msg, &mut out)?;
    Ok(out)
}

/// Splits a received byte stream into messages of type `T`.
#[derive(Debug)]
pub struct Decoder<T> {
    buf: Vec<u8>,
    pos: usize,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Default for Decoder<T> {
    fn default() -> Self {
        Decoder {
            buf: Vec::new(),
            pos: 0,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Decoder<T> {
    /// A decoder with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds received bytes. A large frame's buffer is allocated once, at its length, when its
    /// header has arrived (growing by doubling copied a 36 MB program four times over and
    /// could leave twice its size allocated).
    pub fn push(&mut self, data: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        if let Some(frame) = self.pending_frame(data) {
            let want = (self.pos + 4 + frame).saturating_sub(self.buf.len());
            if want > self.buf.capacity() - self.buf.len() {
                self.buf.reserve_exact(want.max(data.len()));
            }
        }
        self.buf.extend_from_slice(data);
    }

    /// The payload length of the frame that starts at `pos`, once its header is in the buffer
    /// or in `data` (`None` for an impossible length: [`Decoder::next_msg`] reports it).
    fn pending_frame(&self, data: &[u8]) -> Option<usize> {
        let mut head = [0u8; 4];
        let have = &self.buf[self.pos..];
        for (k, b) in have.iter().chain(data).take(4).enumerate() {
            head[k] = *b;
        }
        if have.len() + data.len() < 4 {
            return None;
        }
        let len = u32::from_be_bytes(head) as usize;
        (len <= MAX_FRAME).then_some(len)
    }

    /// Gives a large frame's buffer back once nothing is buffered: a program frame is tens of
    /// megabytes, and a datapath keeps running for months after its first one.
    fn release(&mut self) {
        const KEEP: usize = 1 << 20;
        if self.buf.is_empty() && self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        }
    }

    /// Bytes buffered but not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete message, `Ok(None)` when more bytes are needed. After an error the
    /// stream is unusable (the caller disconnects).
    pub fn next_msg(&mut self) -> Result<Option<T>, ProtoError> {
        let rest = &self.buf[self.pos..];
        let Some(head) = rest.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_FRAME {
            return Err(ProtoError::TooLong(len));
        }
        let Some(payload) = rest.get(4..4 + len) else {
            return Ok(None);
        };
        // Equal flow texts of one frame decode into one allocation (`crate::intern`).
        let texts = crate::intern::Scope::new();
        let msg = postcard::from_bytes(payload);
        drop(texts);
        let msg = msg.map_err(|e| ProtoError::Decode {
            len,
            detail: e.to_string(),
        })?;
        self.pos += 4 + len;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            self.release();
        } else if self.pos > (1 << 20) && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        Ok(Some(msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere() {
        let msgs = vec![
            ToDatapath::Hello {
                version: PROTOCOL_VERSION,
                chassis: "hv1".into(),
            },
            ToDatapath::Program(Box::new(ProgramMsg {
                generation: 7,
                chassis: "hv1".into(),
                datapaths: vec![
                    DatapathMsg {
                        name: "sw0".into(),
                        tunnel_key: 1,
                        flows: vec![Arc::new(FlowMsg {
                            matches: "ip4".into(),
                            actions: "next;".into(),
                            id: "hf-flow-id:1".into(),
                            ..FlowMsg::default()
                        })],
                        ..DatapathMsg::default()
                    }
                    .into(),
                ],
                ..ProgramMsg::default()
            })),
            ToDatapath::Ping { seq: 3 },
        ];
        let mut bytes = Vec::new();
        for m in &msgs {
            encode_to(m, &mut bytes).unwrap();
        }
        for split in [1, 3, 4, 5, 17, bytes.len()] {
            let mut d = Decoder::<ToDatapath>::new();
            let mut got = Vec::new();
            for chunk in bytes.chunks(split) {
                d.push(chunk);
                while let Some(m) = d.next_msg().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, msgs, "split {split}");
            assert_eq!(d.buffered(), 0);
        }
    }

    /// A program frame of several megabytes, received in socket-sized chunks (after a small
    /// frame, and split inside its header): its buffer is allocated once at the frame's length,
    /// and given back once the frame is decoded; a small frame's buffer is kept.
    #[test]
    fn a_large_frame_is_buffered_in_one_allocation_and_given_back() {
        let flows = (0..40_000)
            .map(|i| {
                Arc::new(FlowMsg {
                    matches: format!("ip4.dst == 10.0.{}.{}", i / 256, i % 256).into(),
                    actions: "next;".into(),
                    id: format!("hf-flow-id:{i}").into(),
                    ..FlowMsg::default()
                })
            })
            .collect();
        let big = ToDatapath::Program(Box::new(ProgramMsg {
            generation: 1,
            chassis: "hv1".into(),
            datapaths: vec![
                DatapathMsg {
                    name: "sw0".into(),
                    tunnel_key: 1,
                    flows,
                    ..DatapathMsg::default()
                }
                .into(),
            ],
            ..ProgramMsg::default()
        }));
        let mut bytes = Vec::new();
        encode_to(&ToDatapath::Ping { seq: 1 }, &mut bytes).unwrap();
        let small = bytes.len();
        encode_to(&big, &mut bytes).unwrap();
        let frame = bytes.len() - small;
        assert!(frame > 2 << 20, "{frame} bytes");
        let mut d = Decoder::<ToDatapath>::new();
        let mut got = Vec::new();
        let mut allocations = 0;
        let mut last_ptr = std::ptr::null();
        // The first chunk ends two bytes into the large frame's header.
        let (first, rest) = bytes.split_at(small + 2);
        for chunk in std::iter::once(first).chain(rest.chunks(64 << 10)) {
            d.push(chunk);
            if d.buf.as_ptr() != last_ptr && d.buf.capacity() > 1 << 20 {
                allocations += 1;
                last_ptr = d.buf.as_ptr();
            }
            assert!(
                d.buf.capacity() <= frame + (64 << 10),
                "{}",
                d.buf.capacity()
            );
            while let Some(m) = d.next_msg().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], big);
        assert_eq!(allocations, 1, "the large frame's buffer moved");
        assert_eq!(
            d.buf.capacity(),
            0,
            "the large frame's buffer is given back"
        );
        // A small frame leaves its (small) buffer in place for the next one.
        d.push(&bytes[..small]);
        assert!(d.next_msg().unwrap().is_some());
        assert!(d.buf.capacity() > 0);
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut d = Decoder::<FromDatapath>::new();
        d.push(&u32::MAX.to_be_bytes());
        assert!(matches!(d.next_msg(), Err(ProtoError::TooLong(_))));
        let mut d = Decoder::<FromDatapath>::new();
        d.push(&[0, 0, 0, 2, 0xff, 0xff]);
        assert!(matches!(d.next_msg(), Err(ProtoError::Decode { .. })));
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let mut d = Decoder::<ToDatapath>::new();
            d.push(&data);
            while let Ok(Some(_)) = d.next_msg() {}
        }
    }

    fn flow_msg() -> impl proptest::strategy::Strategy<Value = FlowMsg> {
        use proptest::prelude::*;
        let text = || proptest::sample::select(vec!["", "a", "ip4", "ip4 && tcp"]);
        let opt = move || proptest::option::of(text());
        (
            any::<bool>(),
            0u8..2,
            0u16..2,
            (text(), text(), text(), text()),
            (opt(), opt(), proptest::option::of((text(), text()))),
        )
            .prop_map(
                |(egress, table, priority, (m, a, id, st), (u, h, lg))| FlowMsg {
                    egress,
                    table,
                    priority,
                    matches: m.into(),
                    actions: a.into(),
                    id: id.into(),
                    stage: st.into(),
                    sb_uuid: u.map(Into::into),
                    stage_hint: h.map(Into::into),
                    last_good: lg.map(|(m, a)| (m.into(), a.into())),
                },
            )
    }

    proptest::proptest! {
        /// A flow message equals another exactly when their encodings are equal (postcard's
        /// encoding of these types is one-to-one), whether their texts share allocations or
        /// not.
        #[test]
        fn flow_messages_are_equal_when_their_encodings_are(
            a in flow_msg(),
            other in flow_msg(),
            field in 0usize..11,
        ) {
            // `b` is `a` with one field (or none) taken from `other`: pairs that differ in
            // one field only, each field in turn.
            let mut b = a.clone();
            match field {
                0 => b.egress = other.egress,
                1 => b.table = other.table,
                2 => b.priority = other.priority,
                3 => b.matches = other.matches.clone(),
                4 => b.actions = other.actions.clone(),
                5 => b.id = other.id.clone(),
                6 => b.stage = other.stage.clone(),
                7 => b.sb_uuid = other.sb_uuid.clone(),
                8 => b.stage_hint = other.stage_hint.clone(),
                9 => b.last_good = other.last_good.clone(),
                _ => b = other.clone(),
            }
            let same = encode(&a).ok() == encode(&b).ok();
            proptest::prop_assert_eq!(a == b, same);
            // The same texts in other allocations, and a clone sharing them.
            let copy = FlowMsg {
                matches: Arc::from(&*a.matches),
                actions: Arc::from(&*a.actions),
                ..a.clone()
            };
            proptest::prop_assert!(copy == a && a.clone() == a);
        }
    }
}
