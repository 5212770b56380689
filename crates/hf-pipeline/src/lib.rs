//! `hf-pipeline`: OVN logical pipelines, executed.
//!
//! # Layer
//!
//! A sans-I/O core above `hf-expr` (whose normalised matches and typed actions are its input),
//! `hf-wire` (parsing, header rewrites, reply builders) and `hf-conntrack` (which its conntrack
//! actions call). The datapath daemon, the simulator and `holdfast trace` all run it.
//!
//! # What it does
//!
//! - [`Program::compile`] turns a [`ProgramSpec`] (per logical datapath: tunnel key, ports with
//!   their keys, locations and zones, multicast groups, and `(table, priority, match, actions)`
//!   flows) into one tuple-space classifier per table. A flow that does not compile (its text
//!   did not parse, its match names an unknown set, an action cannot be executed) is a
//!   [`FlowError`] naming datapath, pipeline, table, priority, [`FlowId`], stage and SB UUID,
//!   and the rest compiles; structural problems (unknown patch peers, duplicate keys, tunnel
//!   keys outside Geneve's 24-bit datapath / 15-bit port / 16-bit group ranges) are a
//!   [`CompileError`]. Every compiled flow keeps its identity, stage, SB UUID and stage hint;
//!   traces show them ([`TraceFlow`]).
//! - [`Program::recompile`] compiles a changed spec again, sharing (`Arc`) the compiled tables
//!   of every datapath whose flows, port names/keys, referenced sets and residency answers did
//!   not change (see `compile`).
//! - `is_chassis_resident()` is answered from every datapath's ports ([`PortSpec::resident`]). A resident `chassisredirect` port
//!   ([`PortLocation::Redirect`]) continues in egress as its distributed port. A port bound
//!   to several chassis ([`PortSpec::also_remote`]) gets a tunnel copy to each other chassis;
//!   one waiting for activation ([`PortSpec::needs_activation`]) drops its own frames until a
//!   RARP or [`Pipeline::set_port_active`] activates it (no recompile; the decision survives
//!   swaps). A packet that came from a tunnel is never sent into one again; output to a
//!   multicast group sends one copy per remote chassis (outport = the group), and a group
//!   arriving from a tunnel reaches this chassis's local members only.
//! - [`Pipeline::process`] runs a frame through it: registers and metadata, `next`, `output`
//!   into the egress pipeline and on to a local port, a tunnel or a patch peer, `ct_next`,
//!   `ct_commit`, `ct_snat`/`ct_dnat` and their `_in_czone` forms, `ct_lb`/`ct_lb_mark`,
//!   `ct_commit_nat`, `ct_clear`, neighbour actions against the pipeline's neighbour table,
//!   `chk_lb_hairpin`, `select` (which, like OVN's group, continues in the next table), `clone`,
//!   and packet generation (`arp`, `nd_ns`, `nd_na`,
//!   `icmp4`/`icmp6` and their `_error` forms with `icmp4.frag_mtu`/`icmp6.frag_mtu`,
//!   `tcp_reset`, `sctp_abort`, `reject`).
//! - Every other action and function ovn-northd 23.03 emits, with OVN's meaning:
//!   `check_in_port_sec()`/`check_out_port_sec()` from [`PortSpec::port_security`] (the checks
//!   of ovn-controller's `consider_port_sec_flows`; see `port_sec`), the FDB (`put_fdb`,
//!   `lookup_fdb`, `get_fdb`), ECMP symmetric replies (`commit_ecmp_nh`, `chk_ecmp_nh`,
//!   `chk_ecmp_nh_mac`: ovn-controller's learned flows, 20 s idle / 30 s hard), LB affinity
//!   (`commit_lb_aff`, `chk_lb_aff`: idle timeout, backend loaded into `reg4`/`xxreg0`/`xxreg1`
//!   and `reg8[0..15]`), `ct_snat_to_vip` (hairpin SNAT to the VIP of [`ProgramSpec::lb_vips`]),
//!   `ct_lb_mark(...; hash_fields=...)` and its `skip_snat`/`force_snat` flags, `bind_vport`
//!   and `fwd_group`. `handle_svc_check` punts the frame to the chassis's service monitor
//!   ([`Event::SvcCheck`]; such walks are not cached). State learned this way lives in the [`Pipeline`] (see [`learn`]),
//!   survives program swaps, and is reported as [`Event`]s with learned neighbours
//!   ([`Pipeline::take_events`]).
//! - Packet-in actions: by default as ovn-trace models them (`put_dhcp_opts`, `put_dhcpv6_opts`
//!   and `put_nd_ra_opts` store 1, `dns_lookup` stores 0); in packet-in mode
//!   ([`Pipeline::set_packet_in`], the datapath) they build the DHCPv4/DHCPv6/DNS reply or the
//!   router advertisement as ovn-controller's pinctrl does and store whether they could
//!   ([`packet_in`]); their options are typed at compile time, an unknown one is a flow
//!   error. `igmp` punts the frame with its inport to the chassis's multicast snooping
//!   ([`Event::Igmp`]; not cached), `handle_bfd_msg` to its BFD sessions ([`Event::Bfd`]; not
//!   cached); `handle_dhcpv6_reply` changes nothing. These and
//!   `log`, `set_meter`, `sample`, `trigger_event`, `set_queue` count their hits per flow
//!   ([`Pipeline::action_hits`]; traces do not count).
//! - Meters ([`meter`], [`Pipeline::set_meters`]): `set_meter` drops what is over its rate,
//!   `log(...)` reports an [`Event::AclLog`] (ovn-controller's `acl_log` line) when its meter
//!   allows, and a flow's controller meter (CoPP) limits its controller actions.
//! - An action the pipeline cannot execute is a compile error naming the flow, never a no-op.
//! - A megaflow cache keyed on exactly the bits each walk examined replays the recorded ops;
//!   conntrack still runs on every packet, and the continuation after a conntrack
//!   recirculation is first tried in the entry the same op's continuation was last found in
//!   (checked, not trusted), so established traffic takes one hashed lookup per packet (see
//!   [`interp`] for how wildcards are accumulated, `cache` for the hints).
//! - [`Pipeline::trace`] runs the same walk and ops with conntrack in "what if" mode and records,
//!   per table, the flow that matched and what its actions did.
//!
//! # Semantics worth knowing
//!
//! - Between the ingress and egress pipelines the logical registers are cleared and the
//!   loopback check runs (`inport == outport` needs `flags.loopback`), as OVN's physical tables
//!   do "for consistent behavior with packets that get tunneled". Crossing a patch port clears
//!   registers, flags, `outport` and the conntrack fields and sets `inport` to the peer.
//! - Conntrack zones: a switch uses the zone of `inport` in ingress and of `outport` in egress; a
//!   router uses its SNAT zone for `ct_snat` and its DNAT zone for everything else (the
//!   `_in_czone` forms included: the DNAT zone is OVN's common zone).
//! - A flow's match includes the prerequisites of the fields its top-level actions assign,
//!   move or exchange, as ovn-controller adds them (`ip4.src <-> ip4.dst` only matches IPv4).
//! - A table with no matching flow drops the packet; so does `next` past the last table.
//! - `ct_lb`/`ct_lb_mark` choose a backend by a hash of the 5-tuple, or of the `hash_fields`
//!   when given, and commit with `ct_label.natted`/`ct_mark.natted` set; `chk_lb_hairpin` is
//!   "DNAT applied (or natted), source == destination and the connection's original destination
//!   one of the datapath's [`ProgramSpec::lb_vips`]" (a datapath without VIPs skips the last
//!   test), `chk_lb_hairpin_reply` the same on a reply.
//! - Generated ICMP errors, `tcp_reset` and `sctp_abort` keep the offending packet's Ethernet
//!   and IP addresses as ovn-controller's pinctrl builds them (ICMP: TTL 255, type/code 3/1 or
//!   1/1; TCP RST and SCTP ABORT: ports swapped, TTL 63): northd's nested actions set or swap
//!   the addresses. `reject` answers back to the sender (UDP with "port unreachable", TCP with
//!   a reset, SCTP with an ABORT, anything else with "host unreachable").
//! - The port name `"none"` is key 0, as in ovn-controller and ovn-trace.
//! - `put_arp`/`put_nd` that change a binding bump the generation, so cached walks that read
//!   the neighbour table are not reused.
//!
//! # What it does not do
//!
//! No I/O, no clock, no threads: `now` is an argument. No Geneve encapsulation (a
//! [`Destination::Tunnel`] carries the keys; the datapath encapsulates with `hf_wire::geneve`).
//! DHCP, DHCPv6, DNS and router-advertisement replies only in packet-in mode; no periodic
//! router advertisements, no IGMP/MLD snooping (the datapath's `snoop` module), no service-monitor probes (the datapath's
//! `svc` module sends them) and no samples exported (only counted). `select` has no
//! `hash_fields` form (OVN 23.03's parser has none either).
//! The FDB does not age. VLAN, IPv6 flow label and ND
//! option writes change the fields the pipeline matches on but not the frame. Output to a
//! multicast group from the egress pipeline drops. A conntrack
//! action that continues in the next table ends its action list: actions after it are not run
//! (northd never writes any).
//!
//! # Invariants
//!
//! - `process` is deterministic: the same program, neighbour table, conntrack state, frame and
//!   `now` give the same outputs.
//! - The cached path and the full walk give the same outputs and conntrack effects
//!   (`tests/differential.rs`); the cached path does not allocate once warm (`tests/no_alloc.rs`).
//! - No frame and no program makes it panic; walks are bounded ([`interp::MAX_STEPS`] lookups per
//!   segment, [`interp::MAX_DEPTH`] nested resubmits, [`interp::MAX_RECIRC`] recirculations).
//!
//! # Call contract
//!
//! Build a [`Program`], wrap it in a [`Pipeline`], then per received frame call
//! [`Pipeline::process`] with the conntrack table, where the frame came from, the frame, `now`
//! and an [`Outputs`] to fill (cleared first). [`Pipeline::set_program`] swaps programs and bumps
//! the generation, so cached entries of the old program are never used again.

mod act_compile;
mod arena;
mod cache;
mod canonical;
mod classifier;
mod compile;
pub mod interp;
pub mod learn;
pub mod meter;
mod packet;
pub mod packet_in;
mod port_sec;
mod program;
mod reparse;
mod stateful;
mod trace;
mod whatif;

#[doc(hidden)]
pub mod example;
#[doc(hidden)]
pub mod fuzzing;

use std::time::Duration;

use hf_conntrack::Conntrack;

pub use cache::CacheStats;
pub use learn::LearnStats;
pub use meter::{MeterSpec, MeterStats};
pub use packet_in::PacketInStats;
pub use program::{
    ActionHits, Activation, CompileError, CompileOptions, DatapathKind, DatapathSpec, DnsSpec,
    FdbSpec, FlowError, FlowErrorKind, FlowId, FlowSpec, FlowText, GroupSpec, LbVipSpec, Neighbour,
    PortKind, PortLocation, PortSpec, Program, ProgramSpec, same_opt_text, same_text,
};
pub use trace::{Trace, TraceFlow, TraceRecord};
pub use whatif::WhatIf;

use interp::{CtHandle, Mode, Neighbours, Runner, Scratch, resume_id};
use packet::slot;

/// Where an output frame goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Destination {
    /// A port on this chassis (the id given in [`PortLocation::Local`]).
    Local(u32),
    /// A Geneve tunnel to another chassis: VNI = `datapath`, and the option carries the keys.
    Tunnel {
        /// The remote chassis.
        chassis: u32,
        /// The datapath's tunnel key.
        datapath: u32,
        /// Logical ingress port key.
        inport: u32,
        /// Logical egress port key.
        outport: u32,
    },
    /// Held for a local port ([`Pipeline::set_port_held`]): the frame as it would enter the
    /// egress pipeline of `datapath` (the same thing a tunnel copy carries). The caller keeps
    /// it and replays it later as [`Ingress::Tunnel`] with these keys, so the egress pipeline
    /// (its ACLs and conntrack) runs only then.
    Held {
        /// The local port's id.
        local: u32,
        /// The datapath's tunnel key.
        datapath: u32,
        /// Logical ingress port key.
        inport: u32,
        /// Logical egress port key (the held port).
        outport: u32,
    },
}

/// Where a frame enters the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ingress {
    /// Generated by the chassis itself (a BFD control packet, as pinctrl's packet-out with
    /// `MFF_LOG_DATAPATH` and `MFF_LOG_INPORT` set): the ingress pipeline of `datapath` as if it
    /// came in by logical port `inport`.
    Injected {
        /// The datapath's tunnel key.
        datapath: u32,
        /// Logical ingress port key.
        inport: u32,
    },
    /// Generated by the chassis itself and output at once to logical port or multicast group
    /// `outport` of `datapath`, as from `inport` (pinctrl's packet-out into the output tables:
    /// the IGMP/MLD reports it forwards to the multicast routers and the queries it floods):
    /// no ingress pipeline; each local member's egress pipeline, one copy per remote chassis.
    Output {
        /// The datapath's tunnel key.
        datapath: u32,
        /// Logical ingress port key (not sent back to it).
        inport: u32,
        /// Logical port or multicast group key.
        outport: u32,
    },
    /// From a local port (its id in [`PortLocation::Local`]): the ingress pipeline of its
    /// datapath.
    Local(u32),
    /// From a tunnel: the egress pipeline of `datapath` with both ports known.
    Tunnel {
        /// Datapath tunnel key.
        datapath: u32,
        /// Logical ingress port key.
        inport: u32,
        /// Logical egress port key.
        outport: u32,
    },
}

/// The frames a run produced. Reuse one across calls: it keeps its buffers.
///
/// Each frame can be preceded by `headroom` bytes ([`Outputs::with_headroom`]) so that a caller
/// can write an encapsulation header in front of it in place ([`Outputs::prepend`]) instead of
/// copying the frame after a header. [`Outputs::keep`] turns the frames so far into kept ones:
/// hidden from [`Outputs::iter`] and not forgotten by [`Outputs::clear`] (what a run does
/// first), so a datapath can use one `Outputs` as its transmit buffer and queue frames without
/// copying them ([`Outputs::frame`] reads any frame, kept or not; [`Outputs::reset`] forgets
/// all).
#[derive(Debug, Default, Clone)]
pub struct Outputs {
    bytes: Vec<u8>,
    pkts: Vec<(Destination, usize, usize)>,
    headroom: usize,
    /// Frames before this index (and their bytes) are kept.
    kept: usize,
}

impl Outputs {
    /// An `Outputs` that leaves `headroom` bytes (zeros) before every frame.
    pub fn with_headroom(headroom: usize) -> Outputs {
        Outputs {
            headroom,
            ..Outputs::default()
        }
    }

    /// The headroom left before each frame.
    pub fn headroom(&self) -> usize {
        self.headroom
    }

    /// Forgets every frame not kept (keeps the buffers).
    pub fn clear(&mut self) {
        let end = self.kept_end();
        self.bytes.truncate(end);
        self.pkts.truncate(self.kept);
    }

    /// Forgets every frame, kept or not (keeps the buffers).
    pub fn reset(&mut self) {
        self.bytes.clear();
        self.pkts.clear();
        self.kept = 0;
    }

    /// Keeps every frame so far: [`Outputs::iter`] and [`Outputs::len`] no longer show them and
    /// [`Outputs::clear`] no longer forgets them. Returns the index of the first frame not kept
    /// before this call (the first of the frames just kept).
    pub fn keep(&mut self) -> usize {
        std::mem::replace(&mut self.kept, self.pkts.len())
    }

    fn kept_end(&self) -> usize {
        self.kept
            .checked_sub(1)
            .and_then(|i| self.pkts.get(i))
            .map_or(0, |p| p.2)
    }

    /// Number of frames (not kept).
    pub fn len(&self) -> usize {
        self.pkts.len() - self.kept
    }

    /// True when nothing was sent (since the last [`Outputs::keep`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Index of the first frame not kept (frames `first()..first() + len()` are the run's).
    pub fn first(&self) -> usize {
        self.kept
    }

    /// The frames not kept, in the order they were sent.
    pub fn iter(&self) -> impl Iterator<Item = (Destination, &[u8])> + '_ {
        self.pkts
            .get(self.kept..)
            .unwrap_or(&[])
            .iter()
            .map(|&(d, a, b)| (d, self.bytes.get(a..b).unwrap_or(&[])))
    }

    /// Frame `i` (kept or not) and where it goes; `None` past the end.
    pub fn frame(&self, i: usize) -> Option<(Destination, &[u8])> {
        let &(d, a, b) = self.pkts.get(i)?;
        Some((d, self.bytes.get(a..b)?))
    }

    /// Frame `i` (kept or not), to change in place (a datapath restoring what it changed
    /// before the pipeline ran, such as an offloaded frame's partial checksum field).
    pub fn frame_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let &(_, a, b) = self.pkts.get(i)?;
        self.bytes.get_mut(a..b)
    }

    /// Writes `header` in the headroom of frame `i`, just before it, and returns the header
    /// and frame as one slice, without copying the frame: from then on frame `i` is header and
    /// frame (headers stack: an outer one can be prepended to it while headroom is left). `None`
    /// (and no change) when the frame does not exist or the headroom left before it is shorter
    /// than `header`: the caller copies instead.
    pub fn prepend(&mut self, i: usize, header: &[u8]) -> Option<&[u8]> {
        let &(_, a, b) = self.pkts.get(i)?;
        let room = a - self.room_start(i);
        if header.len() > room {
            return None;
        }
        let start = a - header.len();
        self.bytes.get_mut(start..a)?.copy_from_slice(header);
        if let Some(p) = self.pkts.get_mut(i) {
            p.1 = start;
        }
        self.bytes.get(start..b)
    }

    /// Where the headroom of frame `i` starts: the end of the frame before it.
    fn room_start(&self, i: usize) -> usize {
        i.checked_sub(1)
            .and_then(|j| self.pkts.get(j))
            .map_or(0, |p| p.2)
    }

    /// Pushes a frame (with the headroom before it).
    pub fn push_frame(&mut self, d: Destination, frame: &[u8]) {
        self.push(d, frame);
    }

    pub(crate) fn push(&mut self, d: Destination, frame: &[u8]) {
        let room = self.bytes.len() + self.headroom;
        self.bytes.resize(room, 0);
        self.bytes.extend_from_slice(frame);
        self.pkts.push((d, room, self.bytes.len()));
    }
}

/// Why a frame was not processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// The frame did not parse.
    #[error("frame does not parse: {0}")]
    Parse(#[from] hf_wire::ParseError),
    /// No logical port is bound to this local port.
    #[error("no logical port is bound to local port {0}")]
    UnknownLocalPort(u32),
    /// No datapath has this tunnel key.
    #[error("no datapath has tunnel key {0}")]
    UnknownDatapath(u32),
}

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Segments run (1 + recirculations).
    pub segments: u32,
    /// Segments served by the cache.
    pub cache_hits: u32,
    /// The frame came from a port that is not active on this chassis yet and was not a RARP:
    /// dropped before the pipeline (OVN's `activation-strategy=rarp`).
    pub inactive_port: bool,
}

/// Something the caller should act on, collected by [`Pipeline::take_events`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// `put_arp`/`put_nd` learned (or changed) a binding: the controller writes it to SB
    /// `MAC_Binding`. Learned bindings also survive [`Pipeline::set_program`].
    Neighbour {
        /// Datapath name.
        datapath: String,
        /// Logical port name.
        port: String,
        /// The address.
        ip: std::net::IpAddr,
        /// Its Ethernet address.
        mac: [u8; 6],
    },
    /// `put_fdb` learned (or moved) a MAC: the controller writes it to SB `FDB`.
    Fdb {
        /// Datapath name.
        datapath: String,
        /// Logical port name.
        port: String,
        /// The MAC.
        mac: [u8; 6],
    },
    /// `bind_vport(V, P)`: virtual port `vport` is now reached through `parent` (the
    /// controller claims `vport` for this chassis, as pinctrl does).
    BindVport {
        /// Datapath name.
        datapath: String,
        /// The virtual port.
        vport: String,
        /// Its parent port.
        parent: String,
    },
    /// `log(...)` ran (and its meter allowed it): what ovn-controller writes as an `acl_log`
    /// line. `frame` is the packet as it was when the action ran.
    AclLog {
        /// `name`, if the ACL has one.
        name: Option<String>,
        /// `alert`, `warning`, `notice`, `info` or `debug`.
        severity: &'static str,
        /// `allow`, `drop` or `reject`.
        verdict: &'static str,
        /// `from-lport` (ingress pipeline) or `to-lport` (egress).
        direction: &'static str,
        /// The packet.
        frame: Vec<u8>,
    },
    /// `handle_svc_check(P)`: a reply to a service monitor's probe (addressed to
    /// `svc_monitor_mac`) arrived from logical port `port`; the chassis's monitor logic reads
    /// it (TCP SYN-ACK or RST, ICMP port unreachable).
    SvcCheck {
        /// Datapath name.
        datapath: String,
        /// The logical port it came from.
        port: String,
        /// The frame as it arrived.
        frame: Vec<u8>,
    },
    /// `igmp;`: an IGMP or MLD message from logical port `port`, for the chassis's
    /// multicast snooping (which learns the groups and writes SB `IGMP_Group`).
    Igmp {
        /// Datapath name (a switch).
        datapath: String,
        /// The logical port it came from.
        port: String,
        /// The datapath's tunnel key and the port's (to forward the message as pinctrl does,
        /// [`Ingress::Output`]).
        keys: (u32, u32),
        /// The frame as the action saw it.
        frame: Vec<u8>,
    },
    /// `handle_bfd_msg();`: a BFD control packet to a router port's address, from logical port
    /// `port`, for the chassis's BFD sessions to next hops (which write SB `BFD.status`).
    Bfd {
        /// Datapath name (a router).
        datapath: String,
        /// The logical port it came from.
        port: String,
        /// The frame as the action saw it.
        frame: Vec<u8>,
    },
    /// A port waiting for activation sent a RARP and is now active on this chassis.
    PortActivated {
        /// Its local port id.
        local: u32,
        /// Its logical name.
        port: String,
    },
}

impl Event {
    pub(crate) fn neighbour(
        prog: &Program,
        (dp, port, ip, v6): (u32, u32, u128, bool),
        mac: u128,
    ) -> Option<Event> {
        let d = prog.dp_by_key(dp)?;
        let p = d.ports.get(&port)?;
        let ip = if v6 {
            std::net::IpAddr::V6(std::net::Ipv6Addr::from(ip))
        } else {
            std::net::IpAddr::V4(std::net::Ipv4Addr::from(ip as u32))
        };
        let b = (mac as u64).to_be_bytes();
        Some(Event::Neighbour {
            datapath: d.name.clone(),
            port: p.name.clone(),
            ip,
            mac: [b[2], b[3], b[4], b[5], b[6], b[7]],
        })
    }
}

/// A program with its neighbour table, flow cache and scratch space.
#[derive(Debug)]
pub struct Pipeline {
    prog: Program,
    generation: u64,
    neigh: Neighbours,
    /// FDB, ECMP next hops, LB affinity (see [`learn`]).
    state: learn::Learned,
    counters: Vec<u64>,
    cache: cache::Cache,
    scr: Scratch,
    events: Vec<Event>,
    /// Bindings learned by `put_arp`/`put_nd`, by (datapath, port) name: reapplied on a swap.
    learned: std::collections::BTreeMap<(String, String, std::net::IpAddr), [u8; 6]>,
    /// Local ports currently inactive, with what activates them.
    inactive: std::collections::BTreeMap<u32, Activation>,
    /// Local ports whose traffic is held (see [`Pipeline::set_port_held`]).
    held: std::collections::BTreeSet<u32>,
    /// Activation decisions made here (by RARP or [`Pipeline::set_port_active`]): they
    /// outlive program swaps.
    activation: std::collections::BTreeMap<u32, bool>,
    /// Packet-in mode: DHCP/DHCPv6/DNS/RA actions build their replies (see [`packet_in`]).
    packet_in: bool,
    /// Meters and their buckets (see [`meter`]); they outlive program swaps.
    meters: meter::Meters,
    /// What packet-in actions did.
    pin_stats: PacketInStats,
    /// Per datapath (by index): whether it has a chassisredirect port resident here, so a
    /// tunnel frame's egress port is looked up only where one may stand for another (set
    /// with the program).
    redirects: Vec<bool>,
}

/// Per datapath of `prog`, whether any of its ports is a resident chassisredirect port.
fn redirect_flags(prog: &Program) -> Vec<bool> {
    prog.dps
        .iter()
        .map(|d| {
            d.ports
                .values()
                .any(|p| matches!(p.loc, program::Loc::Redirect(_)))
        })
        .collect()
}

impl Pipeline {
    /// A pipeline running `prog`, with its neighbour table loaded from the program.
    pub fn new(prog: Program) -> Pipeline {
        let mut p = Pipeline {
            prog,
            generation: 1,
            neigh: Neighbours::default(),
            state: learn::Learned::default(),
            counters: Vec::new(),
            cache: cache::Cache::default(),
            scr: Scratch::new(),
            events: Vec::new(),
            learned: Default::default(),
            inactive: Default::default(),
            held: Default::default(),
            activation: Default::default(),
            packet_in: false,
            meters: meter::Meters::default(),
            pin_stats: PacketInStats::default(),
            redirects: Vec::new(),
        };
        p.redirects = redirect_flags(&p.prog);
        p.load_state();
        p.load_learned();
        p
    }

    /// Loads the program's FDB (SB rows win over learned entries) and sizes the counters.
    fn load_learned(&mut self) {
        for &(dp, mac, port) in &self.prog.fdb {
            self.state.fdb.insert((dp, mac), port);
        }
        self.counters.clear();
        self.counters.resize(self.prog.counters.len(), 0);
    }

    fn load_state(&mut self) {
        self.neigh.clear();
        for &(dp, port, ip, v6, mac) in &self.prog.neighbours {
            self.neigh.insert((dp, port, ip, v6), mac);
        }
        // What this pipeline learned wins over the program's (possibly older) bindings.
        for ((dpn, pn, ip), mac) in &self.learned {
            let Some(d) = self.prog.dps.iter().find(|d| &d.name == dpn) else {
                continue;
            };
            let Some((&key, _)) = d.ports.iter().find(|(_, p)| &p.name == pn) else {
                continue;
            };
            let (ip, v6) = program::ip_u128(*ip);
            let m = mac.iter().fold(0u128, |a, b| (a << 8) | u128::from(*b));
            let k = (d.key, key, ip, v6);
            // A binding the new program lacks (a rebuilt SB has no `MAC_Binding` rows) is
            // reported again, so the controller writes it back: `put_arp` sees no change and
            // would never say so, and the other chassis would ARP for it forever.
            if self.neigh.insert(k, m) != Some(m)
                && let Some(e) = Event::neighbour(&self.prog, k, m)
            {
                self.events.push(e);
            }
        }
        self.inactive = self.prog.inactive.iter().copied().collect();
        // A decision made here matters only while the program still says "inactive": once it
        // does not (the activation reached SB, or the port was bound here as primary), the
        // decision is forgotten, so a later migration to this chassis waits again.
        let inactive = &self.inactive;
        self.activation
            .retain(|id, _| self.prog.local.contains_key(id) && inactive.contains_key(id));
        for (&id, &active) in &self.activation {
            if active {
                self.inactive.remove(&id);
            }
        }
        let local = &self.prog.local;
        self.held.retain(|id| local.contains_key(id));
    }

    /// Replaces the program (and reloads the neighbour table from it, plus every binding
    /// `put_arp`/`put_nd` learned here); cached walks of the old program die. Activation
    /// decisions made here ([`Pipeline::set_port_active`], RARP) carry over.
    pub fn set_program(&mut self, prog: Program) {
        self.prog = prog;
        self.redirects = redirect_flags(&self.prog);
        self.generation += 1;
        self.load_state();
        self.load_learned();
        self.cache.clear();
    }

    /// Activates (or deactivates) local port `id` without recompiling: an inactive port's
    /// frames are dropped before the pipeline, except a RARP, which activates it (OVN's
    /// `activation-strategy=rarp`). Output *to* an inactive port is still produced; the
    /// datapath may hold it until activation.
    pub fn set_port_active(&mut self, id: u32, active: bool) {
        self.activation.insert(id, active);
        let changed = if active {
            self.inactive.remove(&id).is_some()
        } else {
            let a = self
                .prog
                .inactive
                .iter()
                .find(|(i, _)| *i == id)
                .map_or(Activation::RARP, |(_, a)| *a);
            self.inactive.insert(id, a).is_none()
        };
        if changed {
            self.generation += 1;
            self.cache.clear();
        }
    }

    /// Sets the chassis's meters and the flows' controller meters ([`meter`]). The flow
    /// cache starts over (a cached walk may have skipped a punt's meter check).
    pub fn set_meters(&mut self, meters: Vec<MeterSpec>, flow_meters: Vec<(FlowId, String)>) {
        self.meters.set(meters, flow_meters);
        self.generation += 1;
        self.cache.clear();
    }

    /// The meters' passed/dropped counts and the meters named but not configured.
    pub fn meters(&self) -> &meter::Meters {
        &self.meters
    }

    /// Packet-in mode. Off (the default, and what `holdfast trace` uses), `put_dhcp_opts`,
    /// `put_dhcpv6_opts` and `put_nd_ra_opts` store 1 and `dns_lookup` stores 0 without
    /// touching the packet, as ovn-trace models them. On (the datapath), they do the work
    /// ovn-controller's pinctrl does: the packet becomes the DHCP/DHCPv6/DNS reply or the
    /// router advertisement, the result bit says whether it could be built, and the pipeline
    /// continues (see [`packet_in`]). Cached walks of the other mode die.
    pub fn set_packet_in(&mut self, on: bool) {
        if self.packet_in != on {
            self.packet_in = on;
            self.generation += 1;
            self.cache.clear();
        }
    }

    /// Whether packet-in mode is on ([`Pipeline::set_packet_in`]).
    pub fn packet_in(&self) -> bool {
        self.packet_in
    }

    /// What packet-in actions did since the pipeline was created (traces do not count).
    pub fn packet_in_stats(&self) -> PacketInStats {
        self.pin_stats
    }

    /// What activates local port `id`, while it waits (`None`: it is active).
    pub fn activation_of(&self, id: u32) -> Option<Activation> {
        self.inactive.get(&id).copied()
    }

    /// Whether local port `id` is active (ports not waiting for activation always are).
    pub fn port_active(&self, id: u32) -> bool {
        !self.inactive.contains_key(&id)
    }

    /// Holds (or stops holding) the traffic *to* local port `id`: while held, a frame an
    /// ingress pipeline outputs to it, or a tunnel copy for it, does not run the port's egress
    /// pipeline but comes out as [`Destination::Held`], for the caller to keep and replay in
    /// order later (a live migration's destination holds the port's frames until it has the
    /// final conntrack delta). Cached walks die.
    pub fn set_port_held(&mut self, id: u32, held: bool) {
        let changed = if held {
            self.held.insert(id)
        } else {
            self.held.remove(&id)
        };
        if changed {
            self.generation += 1;
            self.cache.clear();
        }
    }

    /// Whether traffic to local port `id` is held.
    pub fn port_held(&self, id: u32) -> bool {
        self.held.contains(&id)
    }

    /// Whether events were collected since the last [`Pipeline::take_events`] (what a caller
    /// checks per frame before taking them).
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Takes the events collected so far.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Sizes of the learned tables.
    pub fn learn_stats(&self) -> LearnStats {
        self.state.stats()
    }

    /// Drops ECMP next-hop and LB affinity entries that have timed out by `now` (lookups
    /// already ignore them; this frees their memory).
    pub fn expire_learned(&mut self, now: Duration) {
        self.state.expire(now);
    }

    /// The datapath's tunnel key and the logical port's key of local port `id`, if the program
    /// places it.
    pub fn local_port(&self, id: u32) -> Option<(u32, u32)> {
        let &(dp, key) = self.prog.local.get(&id)?;
        Some((self.prog.dps.get(dp as usize)?.key, key))
    }

    /// The key of multicast group `name` (`_MC_flood_l2`, ...) of the datapath with
    /// `tunnel_key`, if it has one.
    pub fn group_key(&self, tunnel_key: u32, name: &str) -> Option<u32> {
        self.prog
            .dp_by_key(tunnel_key)?
            .from
            .groups
            .iter()
            .find(|g| g.name == name)
            .map(|g| g.key)
    }

    /// The port key learned for `mac` in the datapath with `tunnel_key` (`get_fdb`).
    pub fn fdb(&self, tunnel_key: u32, mac: [u8; 6]) -> Option<u32> {
        let m = mac.iter().fold(0u128, |a, b| (a << 8) | u128::from(*b));
        self.state.fdb.get(&(tunnel_key, m)).copied()
    }

    /// Hits of every counted action (`log`, `set_meter`, `sample`, `trigger_event`,
    /// `set_queue`, `igmp`, `handle_svc_check`, DHCP/DNS/RA functions, `bind_vport`) since the
    /// program was installed. Traces do not count.
    pub fn action_hits(&self) -> Vec<ActionHits> {
        self.prog.action_hits(&self.counters)
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    /// The program generation: bumped by [`Pipeline::set_program`] and by `put_arp`/`put_nd`
    /// when they change a binding.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The flow cache's lookup counters (lookups and hash tables probed).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Number of flow-cache entries.
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }

    /// The MAC bound to `ip` behind port `port_key` of the datapath with `tunnel_key`.
    pub fn neighbour(
        &self,
        tunnel_key: u32,
        port_key: u32,
        ip: std::net::IpAddr,
    ) -> Option<[u8; 6]> {
        let (ip, v6) = program::ip_u128(ip);
        self.neigh.get(&(tunnel_key, port_key, ip, v6)).map(|m| {
            let b = (*m as u64).to_be_bytes();
            [b[2], b[3], b[4], b[5], b[6], b[7]]
        })
    }

    /// Runs `frame` through the program using the flow cache. Conntrack effects are applied to
    /// `ct`; the frames to send are in `out` (cleared first).
    pub fn process(
        &mut self,
        ct: &mut Conntrack,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
    ) -> Result<RunStats, ProcessError> {
        self.run(
            CtHandle::Live(ct),
            from,
            frame,
            now,
            out,
            None,
            Mode::Cached,
            None,
        )
    }

    /// Like [`Pipeline::process`] but walks every table for every segment and caches nothing: the
    /// reference the cached path is tested against, and `first_packet`'s workload.
    pub fn process_uncached(
        &mut self,
        ct: &mut Conntrack,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
    ) -> Result<RunStats, ProcessError> {
        self.run(
            CtHandle::Live(ct),
            from,
            frame,
            now,
            out,
            None,
            Mode::Uncached,
            None,
        )
    }

    /// Walks `frame` through the program with conntrack in "what if" mode (nothing changes,
    /// neither conntrack nor the neighbour table) and records each table visit.
    pub fn trace(
        &mut self,
        ct: &Conntrack,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
    ) -> Result<Trace, ProcessError> {
        self.trace_with(ct, from, frame, now, out, &WhatIf::default())
    }

    /// [`Pipeline::trace_with`] with conntrack running for real on `scratch`, a table the
    /// caller keeps for this one trace: a connection the walk commits is seen by its later
    /// lookups (a reply the pipeline generates, a hairpin), as on the datapath, while the
    /// neighbour, FDB, ECMP and affinity tables stay untouched as in every trace. `holdfast
    /// trace` passes an empty table per packet.
    pub fn trace_scratch(
        &mut self,
        scratch: &mut Conntrack,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
        what_if: &WhatIf,
    ) -> Result<Trace, ProcessError> {
        self.run_traced(CtHandle::Live(scratch), from, frame, now, out, what_if)
    }

    /// [`Pipeline::trace`] with what-if overrides: forced `ct_state`s for successive
    /// conntrack lookups and a chosen load-balancer backend (ovn-trace's `--ct` and
    /// `--lb-dst`).
    pub fn trace_with(
        &mut self,
        ct: &Conntrack,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
        what_if: &WhatIf,
    ) -> Result<Trace, ProcessError> {
        self.run_traced(CtHandle::WhatIf(ct), from, frame, now, out, what_if)
    }

    /// One traced walk (what [`Pipeline::trace_with`] and [`Pipeline::trace_scratch`] share).
    fn run_traced(
        &mut self,
        ct: CtHandle<'_>,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
        what_if: &WhatIf,
    ) -> Result<Trace, ProcessError> {
        let mut t = Trace::default();
        self.run(
            ct,
            from,
            frame,
            now,
            out,
            Some(&mut t),
            Mode::Trace,
            Some(whatif::Cursor::new(what_if)),
        )?;
        Ok(t)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        ct: CtHandle<'_>,
        from: Ingress,
        frame: &[u8],
        now: Duration,
        out: &mut Outputs,
        trace: Option<&mut Trace>,
        mode: Mode,
        what_if: Option<whatif::Cursor<'_>>,
    ) -> Result<RunStats, ProcessError> {
        out.clear();
        let (dp, pipe, inport, outport) = match from {
            Ingress::Local(id) => {
                let &(dp, key) = self
                    .prog
                    .local
                    .get(&id)
                    .ok_or(ProcessError::UnknownLocalPort(id))?;
                if let Some(a) = self.inactive.get(&id) {
                    if !a.activates(frame) {
                        return Ok(RunStats {
                            inactive_port: true,
                            ..RunStats::default()
                        });
                    }
                    if mode != Mode::Trace {
                        self.set_port_active(id, true);
                        let port = self.prog.dps[dp as usize]
                            .ports
                            .get(&key)
                            .map(|p| p.name.clone())
                            .unwrap_or_default();
                        self.events.push(Event::PortActivated { local: id, port });
                    }
                }
                (dp, program::INGRESS, key, 0)
            }
            Ingress::Injected { datapath, inport }
            | Ingress::Output {
                datapath, inport, ..
            } => {
                let dp = self.dp_index(datapath)?;
                let outport = match from {
                    Ingress::Output { outport, .. } => outport,
                    _ => 0,
                };
                (dp, program::INGRESS, inport, outport)
            }
            Ingress::Tunnel {
                datapath,
                inport,
                outport,
            } => {
                let dp = self.dp_index(datapath)?;
                let d = &self.prog.dps[dp as usize];
                // A multicast group from a tunnel: this chassis's own members only. (Group keys
                // start at `MIN_GROUP_KEY`, compile checks: a port's frame skips the lookup.)
                if outport >= compile::MIN_GROUP_KEY
                    && let Some(members) = d.groups.get(&outport)
                {
                    let members: Vec<u32> = members
                        .iter()
                        .copied()
                        .filter(|m| {
                            m != &inport
                                && d.ports
                                    .get(m)
                                    .is_some_and(|p| matches!(p.loc, program::Loc::Local(_)))
                        })
                        .collect();
                    // Each member's frames are kept while the next runs (a run clears what
                    // is not kept), then shown together: no frame copied between buffers.
                    let kept = out.kept;
                    let mut stats = RunStats::default();
                    let mut trace = trace;
                    let mut ct = ct;
                    let mut res = Ok(());
                    for m in members {
                        let from = Ingress::Tunnel {
                            datapath,
                            inport,
                            outport: m,
                        };
                        match self.run(
                            ct.reborrow(),
                            from,
                            frame,
                            now,
                            out,
                            trace.as_deref_mut(),
                            mode,
                            None,
                        ) {
                            Ok(s) => {
                                stats.segments += s.segments;
                                stats.cache_hits += s.cache_hits;
                                out.keep();
                            }
                            Err(e) => {
                                res = Err(e);
                                break;
                            }
                        }
                    }
                    out.kept = kept;
                    res?;
                    return Ok(stats);
                }
                // A chassisredirect port resident here stands for its distributed port (no
                // lookup in a datapath without one).
                let outport = if self.redirects.get(dp as usize).copied().unwrap_or(true) {
                    match d.ports.get(&outport).map(|p| &p.loc) {
                        Some(program::Loc::Redirect(to)) => *to,
                        _ => outport,
                    }
                } else {
                    outport
                };
                // A copy for a held port is kept as it came, before its egress pipeline (no
                // lookup at all while nothing is held: the forwarding path's common case).
                if !self.held.is_empty()
                    && mode != Mode::Trace
                    && let Some(program::Loc::Local(local)) = d.ports.get(&outport).map(|p| &p.loc)
                    && self.held.contains(local)
                {
                    out.clear();
                    out.push(
                        Destination::Held {
                            local: *local,
                            datapath,
                            inport,
                            outport,
                        },
                        frame,
                    );
                    return Ok(RunStats::default());
                }
                (dp, program::EGRESS, inport, outport)
            }
        };
        // Borrowed out of the result rather than moved out by `?`: one copy of the parse fewer.
        // Parsed in place into the context (offsets into the frame, no parse copied around);
        // a frame that does not parse leaves nothing a later run reads.
        hf_wire::parse_into(frame, inport, u64::from(dp), &mut self.scr.ctx.parsed)?;
        let events_before = self.events.len();
        self.cache.maintain();
        self.scr.reset();
        let ctx = &mut self.scr.ctx;
        // Not copied: the runner copies the frame on its first write (`Runner::own_frame`).
        ctx.load();
        ctx.set(slot::INPORT, u128::from(inport));
        ctx.set(slot::OUTPORT, u128::from(outport));
        let mut r = Runner {
            prog: &self.prog,
            input: frame,
            neigh: &mut self.neigh,
            state: &mut self.state,
            counters: &mut self.counters,
            generation: &mut self.generation,
            cache: &mut self.cache,
            scr: &mut self.scr,
            ct,
            now,
            out,
            trace,
            mode,
            segments: 0,
            hits: 0,
            what_if,
            events: &mut self.events,
            held: &self.held,
            packet_in: self.packet_in,
            pin_stats: &mut self.pin_stats,
            meters: &mut self.meters,
            halted: false,
            cur_flow: 0,
            log_meter: None,
        };
        if matches!(from, Ingress::Output { .. }) {
            r.output_now(dp);
        } else {
            r.run_segment(resume_id(dp, pipe, 0), 0, cache::FIRST_HINT);
        }
        let stats = RunStats {
            segments: r.segments,
            cache_hits: r.hits,
            inactive_port: false,
        };
        self.remember_learned(events_before);
        Ok(stats)
    }

    /// The program's index of the datapath with tunnel key `key`.
    fn dp_index(&self, key: u32) -> Result<u32, ProcessError> {
        self.prog
            .by_key
            .get(&key)
            .copied()
            .ok_or(ProcessError::UnknownDatapath(key))
    }

    /// Copies the bindings learned by this run (events from `from` on) into the table that
    /// survives swaps.
    fn remember_learned(&mut self, from: usize) {
        for e in self.events.get(from..).unwrap_or(&[]) {
            if let Event::Neighbour {
                datapath,
                port,
                ip,
                mac,
            } = e
            {
                self.learned
                    .insert((datapath.clone(), port.clone(), *ip), *mac);
            }
        }
    }
}
