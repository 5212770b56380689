//! The sans-I/O datapath core: [`Datapath`].
//!
//! # What it does
//!
//! - Owns the in-memory local ports (named by `iface-id`, numbered in order of appearance),
//!   the [`hf_pipeline::Pipeline`] (with its flow cache and learned state), the conntrack
//!   table and the zone map.
//! - Traffic: a frame from a local port runs the ingress pipeline of the port's datapath; a
//!   Geneve payload from a tunnel (UDP payload: Geneve header + inner frame; OVN's option with
//!   the port keys is required) runs the egress pipeline of the VNI's datapath. Outputs go to
//!   local ports ([`Transmit::Port`]) or, Geneve-encapsulated with OVN's metadata, to the remote
//!   chassis's tunnel IP from the program's chassis table ([`Transmit::Tunnel`]).
//! - Copies: a tunnel payload is decapsulated in place (the inner frame is a slice of it); the
//!   pipeline copies a frame into its context and writes each output once into the transmit
//!   buffer (an [`Outputs`] with headroom), where a tunnelled frame gets its Geneve header
//!   written in front of it (`encapsulate`; the copying path only if the headroom is too
//!   short). [`Datapath::drain_transmit`] hands out those bytes; [`Datapath::poll_transmit`]
//!   copies them into owned [`Transmit`]s.
//! - Events of the pipeline (learned neighbours and FDB entries, `bind_vport`, RARP
//!   activations) become messages to the controller; while none is connected they wait (up to
//!   [`MAX_PENDING`]) and are sent after the next hello.
//! - The control session ([`crate::control`]): hello with version check, program install,
//!   zone flushes, conntrack dumps, counters, state export.
//! - Service monitors (LB health checks, [`crate::svc`]): probes out of the monitored local
//!   ports, replies punted by `handle_svc_check`, status changes to the controller
//!   (protocol version 6).
//! - Timers: conntrack expiry, learned-table expiry and the monitors' probes
//!   ([`Datapath::poll_timeout`]).
//!
//! # What it does not do
//!
//! No I/O and no clock: every entry point takes `now`. No real interfaces (later issue), no
//! outer Ethernet/IP/UDP headers (the shell's UDP socket or the simulator's link carries the
//! Geneve payload), no buffering of frames for a port still waiting for activation (they are
//! delivered; the pipeline drops the port's own frames until it is active).
//!
//! # Invariants
//!
//! - A controller disconnect changes nothing in forwarding: program, zone map and conntrack
//!   stay as they are.
//! - Zone 0 is never in the zone map and never flushed.
//! - No input (frame, tunnel payload, control bytes) panics.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use hf_conntrack::{Conntrack, Selection};
use hf_pipeline::{Destination, Event, Ingress, Outputs, Pipeline, Program, ProgramSpec};
use hf_wire::geneve::{GenevePacket, GeneveRepr, OvnMetadata, PortKeys};

use crate::control::Control;
use hf_wire::offload::Offload;

use crate::proto::{
    Counters, FlowErrorMsg, FromDatapath, LearnedNeighbour, LocalPort, ProgramMsg, StateExport,
};

/// Why [`Datapath::install_delta`] did not install a delta (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaRefusal {
    /// This datapath does not run the delta's base: the controller sends the whole program.
    Base(String),
    /// The result does not compile (a structural error); the previous program keeps running.
    Rejected(String),
}

/// Events kept for the controller while none is connected.
pub const MAX_PENDING: usize = 4096;

/// How often learned ECMP/affinity entries are swept while there are any.
const LEARN_SWEEP: Duration = Duration::from_secs(5);

/// What a datapath is started with.
#[derive(Debug, Clone)]
pub struct DatapathConfig {
    /// The chassis name (`external_ids:system-id`); the controller's hello must name it.
    pub chassis: String,
    /// The local tunnel endpoint.
    pub tunnel_ip: IpAddr,
    /// Conntrack limits and timeouts.
    pub conntrack: hf_conntrack::Config,
    /// The zone map from local storage (what the last run had); zone 0 entries are ignored.
    pub zones: BTreeMap<String, u16>,
    /// Live migration limits and timers.
    pub migration: crate::migrate::MigrationConfig,
    /// Worker threads for compiling a program's datapaths (1: on the caller's thread). The
    /// compiled program is the same for every value; the I/O shell chooses it.
    pub compile_threads: usize,
}

impl DatapathConfig {
    /// A configuration with default conntrack settings and an empty zone map.
    pub fn new(chassis: &str, tunnel_ip: IpAddr) -> DatapathConfig {
        DatapathConfig {
            chassis: chassis.to_string(),
            tunnel_ip,
            conntrack: hf_conntrack::Config::default(),
            zones: BTreeMap::new(),
            migration: crate::migrate::MigrationConfig::default(),
            compile_threads: 1,
        }
    }
}

/// A frame to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// Out of a local port.
    Port {
        /// The port's name.
        port: String,
        /// The Ethernet frame.
        frame: Vec<u8>,
    },
    /// Into a Geneve tunnel: the UDP payload (Geneve header + inner frame) for `dst:6081`.
    Tunnel {
        /// The remote chassis's tunnel IP.
        dst: IpAddr,
        /// Geneve header and inner Ethernet frame.
        payload: Vec<u8>,
    },
    /// To a mirror session's sink ([`crate::mirror`]): the IP payload for protocol 47 (a GRE
    /// header, ERSPAN's after it for an ERSPAN session, and the mirrored frame).
    Mirror {
        /// The sink's IP.
        dst: IpAddr,
        /// GRE (and ERSPAN) header and the frame.
        payload: Vec<u8>,
    },
}

/// A queued frame, borrowed ([`Datapath::drain_transmit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransmitRef<'a> {
    /// Out of a local port.
    Port {
        /// The port's name.
        port: &'a str,
        /// The Ethernet frame.
        frame: &'a [u8],
    },
    /// Into a Geneve tunnel (Geneve header + inner frame, for `dst:6081`).
    Tunnel {
        /// The remote chassis's tunnel IP.
        dst: IpAddr,
        /// Geneve header and inner Ethernet frame.
        payload: &'a [u8],
    },
    /// To a mirror session's sink (GRE (and ERSPAN) header + frame, for IP protocol 47).
    Mirror {
        /// The sink's IP.
        dst: IpAddr,
        /// GRE (and ERSPAN) header and the frame.
        payload: &'a [u8],
    },
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum TxTo {
    Port(u32),
    Tunnel(IpAddr),
    /// A mirror session's sink.
    Mirror(IpAddr),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct TxDesc {
    pub(crate) to: TxTo,
    /// The frame's index in the transmit buffer (`Datapath::outs`).
    pub(crate) frame: usize,
    /// Checksum and segmentation still to do (an offloaded frame carried whole:
    /// [`Datapath::handle_port_frame_offload`]); for a tunnel, of the inner frame.
    pub(crate) offload: Offload,
}

/// Severity of a [`Datapath::poll_log`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed.
    Error,
    /// Something is wrong but forwarding goes on.
    Warn,
    /// Normal operation.
    Info,
    /// Detail.
    Debug,
}

#[derive(Debug, Clone)]
pub(crate) struct PortState {
    pub id: u32,
    pub mac: Option<[u8; 6]>,
}

/// Hashes a local port id (ids are the datapath's own, never from outside, so no keyed hash):
/// one multiply, where a `BTreeMap` walked its nodes for every frame a port sent.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PortIdHasher(u64);

impl std::hash::Hasher for PortIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (u64::from(i) ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Local port id → name.
pub(crate) type PortNames =
    std::collections::HashMap<u32, String, std::hash::BuildHasherDefault<PortIdHasher>>;

/// A local port as [`Datapath::port_handle`] found it: its local id, so a frame's port is not
/// looked up by name per frame ([`Datapath::handle_port_frame_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortHandle(u32);

/// The per-chassis datapath core. See the module docs.
#[derive(Debug)]
pub struct Datapath {
    /// Taken over by a new process ([`crate::proto::ToDatapath::TakeOver`]): forwards nothing more.
    pub(crate) handed_over: bool,
    pub(crate) cfg: DatapathConfig,
    pub(crate) ports: BTreeMap<String, PortState>,
    /// Local id → port name (hashed: read for every frame a port sends).
    pub(crate) port_names: PortNames,
    next_port_id: u32,
    pub(crate) pipeline: Pipeline,
    pub(crate) ct: Conntrack,
    pub(crate) program: Option<ProgramMsg>,
    /// The parsed flows of the running program (so an unchanged datapath is not parsed again).
    pub(crate) spec_cache: crate::program::SpecCache,
    pub(crate) flow_errors: Vec<FlowErrorMsg>,
    /// Datapaths of the installed program held at flows they ran before (their flows in
    /// `program` are those, not what the controller sent): a delta cannot apply until a whole
    /// program comes.
    held: Vec<String>,
    /// Of the last install's datapaths, how many share their compiled tables with the program
    /// it replaced.
    last_shared: usize,
    pub(crate) zones: BTreeMap<String, u16>,
    zones_changed: bool,
    /// Chassis id → tunnel IP (Geneve chassis of the program's table).
    tunnels: BTreeMap<u32, IpAddr>,
    /// Chassis ids of the table that cannot be reached (another encapsulation).
    no_tunnel: BTreeMap<u32, String>,
    /// Frames to send, described in `tx`: their bytes are where the pipeline wrote them, in
    /// `outs` (kept frames), a tunnelled frame's Geneve header written in its headroom. The
    /// frames the pipeline produced are never copied again before they are sent.
    pub(crate) tx: VecDeque<TxDesc>,
    /// The offloaded frame being processed ([`crate::offload`]): what its outputs carry.
    pub(crate) rx_offload: crate::offload::RxOffload,
    pub(crate) outs: Outputs,
    pub(crate) control: Option<Control>,
    pub(crate) ctl_tx: VecDeque<Vec<u8>>,
    /// Messages for the controller produced while none had said hello.
    pub(crate) pending: VecDeque<FromDatapath>,
    pub(crate) counters: Counters,
    logs: VecDeque<(Level, String)>,
    last_sweep: Duration,
    /// Distinct drop causes already logged (so a flood logs once).
    logged: std::collections::BTreeSet<String>,
    /// Where [`Datapath::log_once`] writes a key to look it up (reused: a flood of drops
    /// allocates nothing).
    log_key: String,
    /// Live migrations ([`crate::migrate`]).
    pub(crate) mig: crate::migrate::Migrations,
    /// The latest `now` any entry point was given (for work an entry point without `now`
    /// triggers, such as an install).
    pub(crate) clock: Duration,
    /// Local ports whose deliveries are recorded for a migration's destination.
    pub(crate) tracking: BTreeMap<u32, String>,
    /// While a migration's held frames are released: the port, and the frame hashes its
    /// source delivered (each trims one copy).
    pub(crate) trim_port: Option<u32>,
    pub(crate) trim: std::collections::HashMap<u64, u32>,
    /// Held frames trimmed so far.
    pub(crate) trimmed: u64,
    /// Stage stopwatches of program installs (`stopwatch/show`).
    pub(crate) stopwatch: crate::stopwatch::Stopwatches,
    /// The shell's clock for the CPU stages (see [`Datapath::set_stage_clock`]).
    stage_clock: Option<crate::stopwatch::Clock>,
    /// Service monitors (LB health checks) probed from here ([`crate::svc`]).
    pub(crate) svc: crate::svc::Prober,
    /// Multicast snooping ([`crate::snoop`]).
    pub(crate) snoop: crate::snoop::Snooper,
    /// Periodic router advertisements ([`crate::ra`]).
    pub(crate) ras: crate::ra::Announcer,
    /// BFD to next hops ([`crate::hop_bfd`]).
    pub(crate) hop_bfd: crate::hop_bfd::HopBfd,
    /// Port mirroring sessions ([`crate::mirror`]).
    pub(crate) mirror: crate::mirror::Mirrors,
    /// BFD with other chassis over the tunnels ([`crate::bfd`]).
    pub(crate) bfd: crate::bfd::Bfd,
    /// Gratuitous ARPs still to repeat: (when, frame, local port).
    pub(crate) garps: Vec<(Duration, Vec<u8>, String)>,
}

/// The datapath's stopwatches, in the order a program goes through them: decoding the frame,
/// applying a delta to the running program's message, parsing the changed flows into specs,
/// compiling, switching the pipeline to the new program, and the whole install.
pub const STAGES: &[&str] = &[
    "program-decode",
    "delta-apply",
    "flow-parse",
    "compile",
    "program-swap",
    "program-install",
];

impl Datapath {
    /// A datapath with no ports and an empty program.
    pub fn new(cfg: DatapathConfig) -> Datapath {
        // Each chassis its own random advertisement intervals (deterministic by name).
        let mut ras = crate::ra::Announcer::default();
        ras.seed(cfg.chassis.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        }));
        let opts = hf_pipeline::CompileOptions {
            threads: cfg.compile_threads.max(1),
            ..hf_pipeline::CompileOptions::default()
        };
        let empty = match Program::compile(&ProgramSpec::default()) {
            Ok((p, _)) => p,
            // An empty spec has nothing that can fail; keep a clear message if it ever does.
            Err(e) => unreachable!("empty program does not compile: {e}"),
        };
        let zones = cfg
            .zones
            .iter()
            .filter(|(_, z)| **z != 0)
            .map(|(n, z)| (n.clone(), *z))
            .collect();
        let mut pipeline = Pipeline::new(empty);
        // The datapath answers DHCP, DNS and RA itself (ovn-controller's pinctrl work).
        pipeline.set_packet_in(true);
        Datapath {
            ct: Conntrack::new(cfg.conntrack.clone()),
            cfg,
            ports: BTreeMap::new(),
            port_names: PortNames::default(),
            next_port_id: 1,
            pipeline,
            program: None,
            spec_cache: crate::program::SpecCache::with_options(opts),
            flow_errors: Vec::new(),
            handed_over: false,
            held: Vec::new(),
            last_shared: 0,
            zones,
            zones_changed: false,
            tunnels: BTreeMap::new(),
            no_tunnel: BTreeMap::new(),
            tx: VecDeque::new(),
            rx_offload: crate::offload::RxOffload::default(),
            outs: Outputs::with_headroom(GeneveRepr::MAX_LEN),
            control: None,
            ctl_tx: VecDeque::new(),
            pending: VecDeque::new(),
            counters: Counters::default(),
            logs: VecDeque::new(),
            last_sweep: Duration::ZERO,
            logged: Default::default(),
            log_key: String::new(),
            mig: Default::default(),
            clock: Duration::ZERO,
            tracking: BTreeMap::new(),
            trim_port: None,
            trim: Default::default(),
            trimmed: 0,
            stopwatch: crate::stopwatch::Stopwatches::new(STAGES),
            stage_clock: None,
            svc: crate::svc::Prober::default(),
            snoop: crate::snoop::Snooper::default(),
            hop_bfd: crate::hop_bfd::HopBfd::default(),
            ras,
            mirror: crate::mirror::Mirrors::default(),
            bfd: crate::bfd::Bfd::default(),
            garps: Vec::new(),
        }
    }

    /// Installs the clock the CPU stages of [`STAGES`] are timed with (the shell's monotonic
    /// clock). Without one they read the last `now` given, so they show 0 (the simulator).
    pub fn set_stage_clock(&mut self, clock: crate::stopwatch::Clock) {
        self.stage_clock = Some(clock);
    }

    /// The stage clock's time (or the last `now`).
    pub(crate) fn tick(&self) -> Duration {
        self.stage_clock.map_or(self.clock, |c| c())
    }

    /// The stage stopwatches ([`STAGES`]).
    pub fn stopwatch(&self) -> &crate::stopwatch::Stopwatches {
        &self.stopwatch
    }

    /// The stage stopwatches, to reset them.
    pub fn stopwatch_mut(&mut self) -> &mut crate::stopwatch::Stopwatches {
        &mut self.stopwatch
    }

    /// The configuration.
    pub fn config(&self) -> &DatapathConfig {
        &self.cfg
    }

    pub(crate) fn log(&mut self, level: Level, msg: String) {
        if self.logs.len() < MAX_PENDING {
            self.logs.push_back((level, msg));
        }
    }

    pub(crate) fn log_once(
        &mut self,
        level: Level,
        key: std::fmt::Arguments<'_>,
        msg: impl FnOnce() -> String,
    ) {
        use std::fmt::Write;
        if self.logged.len() >= 1024 {
            return;
        }
        self.log_key.clear();
        // Writing into a String cannot fail.
        let _ = self.log_key.write_fmt(key);
        if self.logged.contains(self.log_key.as_str()) {
            return;
        }
        self.logged.insert(self.log_key.clone());
        let m = msg();
        self.log(level, m);
    }

    /// The next log line.
    pub fn poll_log(&mut self) -> Option<(Level, String)> {
        self.logs.pop_front()
    }

    /// Sends `msg` to the controller if one said hello, else keeps it for the next one.
    pub(crate) fn notify(&mut self, msg: FromDatapath) {
        if self.control.as_ref().is_some_and(|c| c.ready()) {
            self.send(&msg);
        } else if matches!(
            msg,
            FromDatapath::PortAdded(_) | FromDatapath::PortRemoved { .. }
        ) {
            // The next hello carries the ports as they are then.
        } else if self.pending.len() < MAX_PENDING {
            self.pending.push_back(msg);
        }
    }

    // ----- ports -----

    /// Adds an in-memory port named by its `iface-id` (a no-op for a port that exists with the
    /// same MAC). The controller hears [`FromDatapath::PortAdded`].
    pub fn add_port(&mut self, name: &str, mac: Option<[u8; 6]>) {
        if let Some(p) = self.ports.get_mut(name) {
            if p.mac == mac {
                return;
            }
            p.mac = mac;
        } else {
            let id = self.next_port_id;
            self.next_port_id += 1;
            self.ports.insert(name.to_string(), PortState { id, mac });
            self.port_names.insert(id, name.to_string());
            self.mirror.rebind(&self.ports);
            self.relocate();
            self.sync_migrations(self.clock);
        }
        self.log(Level::Info, format!("port {name}: added"));
        self.notify(FromDatapath::PortAdded(LocalPort {
            name: name.to_string(),
            mac,
        }));
    }

    /// Removes a port (unknown names are ignored). The controller hears
    /// [`FromDatapath::PortRemoved`].
    pub fn remove_port(&mut self, name: &str) {
        let Some(p) = self.ports.remove(name) else {
            return;
        };
        self.port_names.remove(&p.id);
        self.mirror.rebind(&self.ports);
        self.mig_port_removed(name);
        self.relocate();
        self.sync_migrations(self.clock);
        self.log(Level::Info, format!("port {name}: removed"));
        self.notify(FromDatapath::PortRemoved {
            name: name.to_string(),
        });
    }

    /// The local ports.
    pub fn ports(&self) -> Vec<LocalPort> {
        self.ports
            .iter()
            .map(|(n, p)| LocalPort {
                name: n.clone(),
                mac: p.mac,
            })
            .collect()
    }

    /// The local port ids by name (what [`crate::program::compile`] takes).
    pub fn port_ids(&self) -> BTreeMap<String, u32> {
        self.ports.iter().map(|(n, p)| (n.clone(), p.id)).collect()
    }

    /// A port appeared or went: the program's `Local` locations resolve differently, so the
    /// installed program is compiled again (sharing unchanged tables).
    pub(crate) fn relocate(&mut self) {
        let Some(msg) = self.program.take() else {
            return;
        };
        self.spec_cache.set_active(&self.mig.activated);
        let local = self.port_ids();
        match crate::program::compile_cached(
            &msg,
            &local,
            Some(self.pipeline.program()),
            &mut self.spec_cache,
            &[],
        ) {
            Ok((prog, errs)) => {
                self.pipeline.set_program(prog);
                self.flow_errors = errs;
            }
            Err(e) => self.log(
                Level::Error,
                format!(
                    "program {}: recompiling after a port change failed: {e}",
                    msg.generation
                ),
            ),
        }
        self.program = Some(msg);
    }

    // ----- programs -----

    /// Installs `msg` atomically: compiled whole and swapped in, or refused (the previous
    /// program keeps running). On success the zone map becomes the program's.
    pub fn install(&mut self, msg: ProgramMsg) -> Result<Vec<FlowErrorMsg>, String> {
        self.spec_cache.set_active(&self.mig.activated);
        // Datapaths whose flows differ from the installed program's must be compiled again:
        // the spec cache knows them when it holds the running program's flows; otherwise they
        // are found by comparing with the installed message.
        let changed: Vec<&str> = if self.spec_cache.is_valid() {
            Vec::new()
        } else {
            msg.datapaths
                .iter()
                .filter(|d| {
                    self.program.as_ref().is_none_or(|old| {
                        old.datapaths
                            .iter()
                            .find(|o| o.name == d.name)
                            .is_none_or(|o| o.flows != d.flows)
                    })
                })
                .map(|d| d.name.as_str())
                .collect()
        };
        let crate::program::Compiled {
            program: prog,
            errors: errs,
            held,
        } = crate::program::compile_cached_holding(
            &msg,
            &self.port_ids(),
            Some(self.pipeline.program()),
            self.program.as_ref(),
            &mut self.spec_cache,
            &changed,
        )?;
        // Held datapaths run their previous flows: those are what this program runs.
        let mut msg = msg;
        for name in &held {
            let old = self
                .program
                .as_ref()
                .and_then(|p| p.datapaths.iter().find(|d| &d.name == name))
                .map(|d| d.flows.clone());
            if let (Some(flows), Some(d)) =
                (old, msg.datapaths.iter_mut().find(|d| &d.name == name))
            {
                std::sync::Arc::make_mut(d).flows = flows;
            }
        }
        Ok(self.installed(msg, prog, errs, held))
    }

    /// Applies `delta` to the installed program and installs the result atomically: only the
    /// datapaths it changes or adds are parsed and compiled again (the others share their
    /// tables), and on any error the running program stays exactly as it was.
    /// `Err(DeltaRefusal::Base)`: this datapath does not run the delta's base (no program,
    /// another generation, a held datapath, or content the delta does not fit): the
    /// controller sends the whole program. `Err(DeltaRefusal::Rejected)`: the result does
    /// not compile (as a whole program's structural error).
    pub fn install_delta(
        &mut self,
        delta: &crate::delta::ProgramDelta,
    ) -> Result<Vec<FlowErrorMsg>, DeltaRefusal> {
        let Some(mut msg) = self.program.take() else {
            return Err(DeltaRefusal::Base(format!(
                "program delta to generation {} is against generation {}, but no program runs \
                 here; send the whole program",
                delta.generation, delta.base
            )));
        };
        if !self.held.is_empty() && delta.base == msg.generation {
            let reason = format!(
                "program delta to generation {} is against generation {}, whose datapath(s) {} \
                 run earlier flows here (held); send the whole program",
                delta.generation,
                delta.base,
                self.held.join(", ")
            );
            self.program = Some(msg);
            return Err(DeltaRefusal::Base(reason));
        }
        let no_last_good_changed = msg.no_last_good != delta.no_last_good;
        let t0 = self.tick();
        let applied = match crate::delta::apply_undoable(&mut msg, delta) {
            Ok(a) => a,
            Err(e) => {
                self.program = Some(msg);
                return Err(DeltaRefusal::Base(e.to_string()));
            }
        };
        let t1 = self.tick();
        self.stopwatch.record("delta-apply", t1.saturating_sub(t0));
        let may_differ: std::collections::BTreeSet<String> =
            applied.changed.iter().cloned().collect();
        let changed: Vec<&str> = applied.changed.iter().map(String::as_str).collect();
        let local = self.port_ids();
        self.spec_cache.set_active(&self.mig.activated);
        let built = if no_last_good_changed {
            self.spec_cache.build(&msg, &local)
        } else {
            let sets: std::collections::BTreeSet<String> = applied
                .undo
                .touched_address_sets()
                .map(str::to_string)
                .collect();
            let groups: std::collections::BTreeSet<String> = applied
                .undo
                .touched_port_groups()
                .map(str::to_string)
                .collect();
            self.spec_cache.build_knowing(
                &msg,
                &local,
                crate::program::Knowing {
                    datapaths: &may_differ,
                    address_sets: &sets,
                    port_groups: &groups,
                },
            )
        };
        let prev = crate::program::PrevProgram::Delta {
            now: &msg,
            undo: &applied.undo,
        };
        let t2 = self.tick();
        self.stopwatch.record("flow-parse", t2.saturating_sub(t1));
        let compiled = built.and_then(|b| {
            self.spec_cache
                .compile_prev(&msg, b, Some(self.pipeline.program()), prev, &changed)
        });
        let t3 = self.tick();
        self.stopwatch.record("compile", t3.saturating_sub(t2));
        let crate::program::Compiled {
            program: prog,
            errors: errs,
            held,
        } = match compiled {
            Ok(c) => c,
            Err(e) => {
                applied.undo.revert(&mut msg);
                self.program = Some(msg);
                return Err(DeltaRefusal::Rejected(e));
            }
        };
        // Held datapaths run their previous flows (what the delta replaced).
        let olds: Vec<(String, Vec<std::sync::Arc<crate::proto::FlowMsg>>)> = held
            .iter()
            .filter_map(|n| prev.flows_of(n).map(|f| (n.clone(), f.into_owned())))
            .collect();
        for (name, flows) in olds {
            if let Some(d) = msg.datapaths.iter_mut().find(|d| d.name == name) {
                std::sync::Arc::make_mut(d).flows = flows;
            }
        }
        drop(applied);
        let r = self.installed(msg, prog, errs, held);
        let t4 = self.tick();
        self.stopwatch.record("program-swap", t4.saturating_sub(t3));
        Ok(r)
    }

    /// The common end of [`Datapath::install`] and [`Datapath::install_delta`]: `prog`
    /// (compiled from `msg`) runs.
    fn installed(
        &mut self,
        msg: ProgramMsg,
        prog: Program,
        errs: Vec<FlowErrorMsg>,
        held: Vec<String>,
    ) -> Vec<FlowErrorMsg> {
        if !held.is_empty() {
            self.log(
                Level::Warn,
                format!(
                    "program {}: datapath(s) {} held at the flows they ran (a flow has no version that compiles)",
                    msg.generation,
                    held.join(", ")
                ),
            );
        }
        let mut tunnels = BTreeMap::new();
        let mut no_tunnel = BTreeMap::new();
        for c in &msg.chassis_table {
            // `compile` checked the IPs.
            let Ok(ip) = c.ip.parse::<IpAddr>() else {
                continue;
            };
            if c.encap_type == "geneve" || c.encap_type.is_empty() {
                tunnels.insert(c.id, ip);
            } else {
                no_tunnel.insert(c.id, format!("{} ({})", c.name, c.encap_type));
            }
        }
        for (id, what) in &no_tunnel {
            self.log(
                Level::Warn,
                format!(
                    "chassis {what} (id {id}): only Geneve is supported; frames to it are dropped"
                ),
            );
        }
        self.last_shared = prog.shared_datapaths(self.pipeline.program());
        self.pipeline.set_program(prog);
        self.tunnels = tunnels;
        self.no_tunnel = no_tunnel;
        if self.zones != msg.zones {
            self.zones = msg.zones.clone();
            self.zones_changed = true;
        }
        self.counters.generation = msg.generation;
        self.flow_errors = errs.clone();
        self.log(
            Level::Info,
            format!(
                "program {} installed: {} datapaths, {} flows, {} flow errors",
                msg.generation,
                msg.datapaths.len(),
                self.pipeline.program().flow_count(),
                errs.len()
            ),
        );
        self.program = Some(msg);
        self.held = held;
        self.forget_activations();
        self.sync_migrations(self.clock);
        errs
    }

    /// How many datapaths of the last installed program share their compiled tables with the
    /// program it replaced ([`hf_pipeline::Program::shared_datapaths`]).
    pub fn last_install_shared(&self) -> usize {
        self.last_shared
    }

    /// The spec cache's view of the last compile (which datapaths were parsed again).
    pub fn spec_cache(&self) -> &crate::program::SpecCache {
        &self.spec_cache
    }

    /// The zone map changed since the last call (the shell then writes it to local storage).
    pub fn take_zones_changed(&mut self) -> bool {
        std::mem::take(&mut self.zones_changed)
    }

    /// Flushes the conntrack entries of the named zones. Refused as a whole (nothing flushed)
    /// when a name is not in the zone map or names zone 0. Flushed names leave the zone map.
    pub fn flush_zones(&mut self, names: &[String]) -> Result<u64, String> {
        let mut zones = Vec::new();
        for n in names {
            match self.zones.get(n) {
                None => return Err(format!("zone \"{n}\" is not in the zone map")),
                Some(0) => return Err(format!("zone \"{n}\" is zone 0, which is never flushed")),
                Some(&z) => zones.push(z),
            }
        }
        let mut entries = 0u64;
        for (n, z) in names.iter().zip(zones) {
            entries += self.ct.flush_zone(z).map_err(|e| e.to_string())? as u64;
            self.zones.remove(n);
            self.zones_changed = true;
        }
        Ok(entries)
    }

    // ----- traffic -----

    /// Whether a new datapath process took this one's place ([`crate::proto::ToDatapath::TakeOver`]): its
    /// state went with the export, and frames given to it now are dropped (the shell stops
    /// reading and hands its sockets over).
    pub fn handed_over(&self) -> bool {
        self.handed_over
    }

    /// A frame arrived on local port `port`.
    pub fn handle_port_frame(&mut self, port: &str, frame: &[u8], now: Duration) {
        self.counters.rx_port += 1;
        let Some(p) = self.ports.get(port) else {
            self.counters.dropped += 1;
            self.log_once(Level::Warn, format_args!("noport:{port}"), || {
                format!("frame on unknown port {port}: dropped")
            });
            return;
        };
        let id = p.id;
        self.clock = self.clock.max(now);
        if self.hold_from_port(port, id, frame) {
            return;
        }
        self.run(Ingress::Local(id), frame, now, false);
    }

    /// The handle of local port `name`, for [`Datapath::handle_port_frame_at`]: the port's
    /// name looked up once rather than per frame. `None` for a port that is not here.
    pub fn port_handle(&self, name: &str) -> Option<PortHandle> {
        self.ports.get(name).map(|p| PortHandle(p.id))
    }

    /// [`Datapath::handle_port_frame`] for the port `port` names, without a lookup by name.
    /// Port ids are never reused: a handle of a removed port (even one added again under the
    /// same name) names no port, and its frames are dropped and logged as on an unknown port.
    pub fn handle_port_frame_at(&mut self, port: PortHandle, frame: &[u8], now: Duration) {
        let id = port.0;
        if self.ports_arriving() {
            // Held frames are keyed by name: the slow path, while a migration arrives.
            if let Some(name) = self.port_names.get(&id).cloned() {
                return self.handle_port_frame(&name, frame, now);
            }
        }
        self.counters.rx_port += 1;
        if !self.port_names.contains_key(&id) {
            self.counters.dropped += 1;
            self.log_once(Level::Warn, format_args!("noport-id:{id}"), || {
                format!("frame on removed port (local id {id}): dropped")
            });
            return;
        }
        self.clock = self.clock.max(now);
        self.run(Ingress::Local(id), frame, now, false);
    }

    /// A Geneve payload (Geneve header + inner Ethernet frame) arrived from `src`.
    pub fn handle_tunnel(&mut self, src: IpAddr, geneve: &[u8], now: Duration) {
        self.counters.rx_tunnel += 1;
        self.clock = self.clock.max(now);
        let parsed = GenevePacket::new_checked(geneve)
            .and_then(|g| GeneveRepr::parse(&g).map(|r| (r, g.header_len())));
        let (repr, hlen) = match parsed {
            Ok(x) => x,
            Err(e) => {
                self.counters.dropped += 1;
                self.log_once(Level::Warn, format_args!("geneve:{src}:{e}"), || {
                    format!("tunnel packet from {src}: {e}: dropped")
                });
                return;
            }
        };
        if repr.meta.datapath == 0
            && repr.meta.ports.is_none()
            && let Some(inner) = geneve.get(hlen..)
            && let Some(c) = crate::bfd::control_in(inner)
        {
            return self.bfd_receive(src, c, now);
        }
        let Some(ports) = repr.meta.ports else {
            self.counters.dropped += 1;
            self.log_once(Level::Warn, format_args!("geneve-noopt:{src}"), || {
                format!("tunnel packet from {src} without OVN's port option: dropped")
            });
            return;
        };
        let Some(inner) = geneve.get(hlen..) else {
            self.counters.dropped += 1;
            return;
        };
        let from = Ingress::Tunnel {
            datapath: repr.meta.datapath,
            inport: u32::from(ports.ingress),
            outport: u32::from(ports.egress),
        };
        self.run(from, inner, now, true);
    }

    pub(crate) fn run(&mut self, from: Ingress, frame: &[u8], now: Duration, tunnel: bool) {
        if self.handed_over {
            // The connections now live in the new process: this one must not change them.
            self.counters.dropped += 1;
            return;
        }
        let res = self
            .pipeline
            .process(&mut self.ct, from, frame, now, &mut self.outs);
        match res {
            Ok(st) => {
                self.counters.cache_hits += u64::from(st.cache_hits);
                self.counters.cache_misses += u64::from(st.segments.saturating_sub(st.cache_hits));
                if self.outs.is_empty() {
                    self.counters.dropped += 1;
                }
            }
            Err(e) => {
                self.counters.dropped += 1;
                self.log_once(Level::Debug, format_args!("proc:{tunnel}:{e}"), || {
                    format!("frame not processed: {e}")
                });
            }
        }
        let mut no_tunnel = None;
        // The mirror sessions this packet was copied to (once each, as OVS mirrors).
        let mut mirrored = 0u32;
        // Frames are queued where the pipeline wrote them (`outs` stays in place: moving it
        // out and back stalled on store forwarding).
        let first = self.outs.first();
        for i in first..first + self.outs.len() {
            let Some((dst, _)) = self.outs.frame(i) else {
                continue;
            };
            match dst {
                Destination::Local(id) => match self.port_names.get(&id) {
                    Some(_) => {
                        if !self.delivery_ok(i, id, now) {
                            continue;
                        }
                        self.counters.tx_port += 1;
                        let offload = self.out_offload(i);
                        self.tx.push_back(TxDesc {
                            to: TxTo::Port(id),
                            frame: i,
                            offload,
                        });
                        if !self.mirror.is_empty() {
                            self.mirror_delivered(id, i, &mut mirrored);
                        }
                    }
                    None => self.counters.dropped += 1,
                },
                Destination::Held {
                    local,
                    datapath,
                    inport,
                    outport,
                } => {
                    // Held frames are copied anyway (kept for later): this copy lets the hold
                    // borrow `self`.
                    let f = self.outs.frame(i).map(|(_, b)| b.to_vec());
                    let f = f.unwrap_or_default();
                    self.hold_frame(local, datapath, inport, outport, &f, now)
                }
                Destination::Tunnel {
                    chassis,
                    datapath,
                    inport,
                    outport,
                } => {
                    let Some(&ip) = self.tunnels.get(&chassis) else {
                        self.counters.dropped += 1;
                        no_tunnel = Some(chassis);
                        continue;
                    };
                    let repr = GeneveRepr {
                        meta: OvnMetadata {
                            datapath,
                            ports: Some(PortKeys {
                                ingress: inport as u16,
                                egress: outport as u16,
                            }),
                        },
                        oam: false,
                    };
                    let offload = self.out_offload(i);
                    let frame = encapsulate(&mut self.outs, i, &repr);
                    self.counters.tx_tunnel += 1;
                    self.tx.push_back(TxDesc {
                        to: TxTo::Tunnel(ip),
                        frame,
                        offload,
                    });
                }
                _ => self.counters.dropped += 1,
            }
        }
        if let Ingress::Local(id) = from {
            let mask = self.mirror.sent_by(id);
            if mask != 0 {
                self.mirror_copy(mask, &mut mirrored, id, frame);
            }
        }
        self.outs.keep();
        if self.tx.is_empty() {
            self.outs.reset();
        }
        if let Some(chassis) = no_tunnel {
            let what = self
                .no_tunnel
                .get(&chassis)
                .cloned()
                .unwrap_or_else(|| format!("id {chassis}, not in the chassis table"));
            self.log_once(Level::Warn, format_args!("tun:{chassis}"), || {
                format!("no Geneve tunnel to chassis {what}: frames dropped")
            });
        }
        self.take_events(now);
    }

    /// Whether frame `i` of the transmit buffer may go out of local port `id` (a migration may
    /// stop or trim it). Copies the frame only while a migration needs to look at it.
    fn delivery_ok(&mut self, i: usize, id: u32, now: Duration) -> bool {
        if self.mig.stopped.is_empty()
            && self.tracking.is_empty()
            && (self.trim_port != Some(id) || self.trim.is_empty())
        {
            return true;
        }
        let f = self.outs.frame(i).map(|(_, b)| b.to_vec());
        let f = f.unwrap_or_default();
        self.note_delivery(id, &f, now) && self.trim_check(id, &f)
    }

    /// Queues `bytes` out of local port `id`.
    pub(crate) fn queue_port_frame(&mut self, id: u32, bytes: &[u8]) {
        self.counters.tx_port += 1;
        self.outs.push_frame(Destination::Local(id), bytes);
        let frame = self.outs.first();
        self.outs.keep();
        self.tx.push_back(TxDesc {
            to: TxTo::Port(id),
            frame,
            offload: Offload::default(),
        });
        if !self.mirror.is_empty() {
            self.mirror_delivered(id, frame, &mut 0);
            self.outs.keep();
        }
    }

    /// Turns the pipeline's events into controller messages.
    fn take_events(&mut self, now: Duration) {
        if !self.pipeline.has_events() {
            return;
        }
        let events = self.pipeline.take_events();
        let mut learned = Vec::new();
        let mut acl_logs = Vec::new();
        let mut svc = false;
        let mut mcast = false;
        let mut hop_bfd = false;
        let mut forwards = Vec::new();
        for ev in events {
            match ev {
                Event::AclLog {
                    name,
                    severity,
                    verdict,
                    direction,
                    frame,
                } => acl_logs.push(crate::acl_log::line(
                    name.as_deref(),
                    verdict,
                    severity,
                    direction,
                    &frame,
                )),
                Event::Neighbour {
                    datapath,
                    port,
                    ip,
                    mac,
                } => learned.push(LearnedNeighbour {
                    datapath,
                    port,
                    ip: ip.to_string(),
                    mac,
                }),
                Event::PortActivated { port, .. } => {
                    self.log(
                        Level::Info,
                        format!("port {port}: activated by its announcement"),
                    );
                    self.on_port_activated(&port, now);
                    self.notify(FromDatapath::PortActivated { port });
                }
                Event::Fdb {
                    datapath,
                    port,
                    mac,
                } => self.notify(FromDatapath::LearnedFdb(vec![crate::proto::FdbMsg {
                    datapath,
                    port,
                    mac,
                }])),
                Event::BindVport {
                    datapath,
                    vport,
                    parent,
                } => self.notify(FromDatapath::VportBound {
                    datapath,
                    vport,
                    parent,
                }),
                Event::SvcCheck { port, frame, .. } => {
                    self.svc.handle_reply(&port, &frame, now);
                    svc = true;
                }
                Event::Igmp {
                    datapath,
                    port,
                    keys: (dp, inport),
                    frame,
                } => {
                    match self.snoop.handle(&datapath, &port, &frame, now) {
                        Ok(f) => {
                            // Sent on as pinctrl does (`igmp` consumed it): reports to the
                            // multicast routers, queries to the L2 domain.
                            if let Some(g) = f.group().and_then(|g| self.pipeline.group_key(dp, g))
                            {
                                let from = hf_pipeline::Ingress::Output {
                                    datapath: dp,
                                    inport,
                                    outport: g,
                                };
                                forwards.push((from, frame));
                            }
                        }
                        Err(e) => {
                            self.log_once(Level::Warn, format_args!("snoop:{datapath}"), || e)
                        }
                    }
                    mcast = true;
                }
                Event::Bfd { port, frame, .. } => {
                    self.hop_bfd_receive(&port, &frame, now);
                    hop_bfd = true;
                }
                other => self.log(
                    Level::Warn,
                    format!("pipeline event not handled: {other:?}"),
                ),
            }
        }
        if !learned.is_empty() {
            self.notify(FromDatapath::Learned(learned));
        }
        if !acl_logs.is_empty() {
            // A version-6 controller writes them as ovn-controller does; with an older one (or
            // none) they go to this datapath's own log.
            if self
                .control
                .as_ref()
                .is_some_and(|c| c.ready() && c.version >= 6)
            {
                self.notify(FromDatapath::AclLog(acl_logs));
            } else {
                for l in acl_logs {
                    self.log(Level::Info, format!("acl_log: {l}"));
                }
            }
        }
        if svc {
            self.run_svc(now);
        }
        if mcast {
            self.run_mcast(now);
        }
        if hop_bfd {
            self.run_hop_bfd(now);
        }
        for (from, frame) in forwards {
            self.run(from, &frame, now, false);
        }
    }

    /// Installs the meters a controller sent ([`crate::proto::ToDatapath::Meters`]).
    pub(crate) fn set_meters(&mut self, m: crate::proto::MetersMsg) {
        let n = (m.meters.len(), m.flow_meters.len());
        let specs = m
            .meters
            .into_iter()
            .map(|x| hf_pipeline::MeterSpec {
                name: x.name,
                pktps: x.pktps,
                bands: x.bands,
            })
            .collect();
        let flows = m
            .flow_meters
            .into_iter()
            .map(|(f, name)| (hf_pipeline::FlowId(f.into()), name))
            .collect();
        self.pipeline.set_meters(specs, flows);
        self.log(
            Level::Info,
            format!(
                "meters: {} configured, {} flow(s) with a controller meter",
                n.0, n.1
            ),
        );
    }

    // ----- service monitors -----

    /// Takes the controller's service monitors ([`crate::svc::Prober::set`]) and answers with
    /// every status known.
    pub(crate) fn set_svc_monitors(
        &mut self,
        list: Vec<crate::proto::SvcMonitorMsg>,
        now: Duration,
    ) {
        for bad in self.svc.set(list) {
            self.log(Level::Warn, bad);
        }
        let known = self.svc.statuses();
        if !known.is_empty() {
            self.send_svc(known);
        }
        self.run_svc(now);
    }

    /// Runs the monitors: probes out of their local ports, status changes to the controller.
    fn run_svc(&mut self, now: Duration) {
        if self.svc.is_empty() {
            return;
        }
        let (frames, changes) = self.svc.poll(now);
        for p in frames {
            match self.ports.get(&p.port).map(|s| s.id) {
                Some(id) => self.queue_port_frame(id, &p.frame),
                None => self.log_once(Level::Warn, format_args!("svc:{}", p.port), || {
                    format!(
                        "service monitor probe for port {}: no such local port",
                        p.port
                    )
                }),
            }
        }
        if !changes.is_empty() {
            for c in &changes {
                self.log(
                    Level::Info,
                    format!(
                        "service monitor {} {}:{} ({}): {}",
                        c.logical_port, c.ip, c.port, c.protocol, c.status
                    ),
                );
            }
            self.send_svc(changes);
        }
    }

    /// Status messages go only to a controller that speaks them (version 6); another learns
    /// them all when it sends its monitors.
    fn send_svc(&mut self, s: Vec<crate::proto::SvcStatusMsg>) {
        if self
            .control
            .as_ref()
            .is_some_and(|c| c.ready() && c.version() >= crate::proto::SVC_VERSION)
        {
            self.send(&FromDatapath::SvcStatus(s));
        }
    }

    /// The next frame to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        loop {
            let Some(d) = self.tx.pop_front() else {
                self.outs.reset();
                return None;
            };
            let mut bytes = self
                .outs
                .frame(d.frame)
                .map(|(_, b)| b.to_vec())
                .unwrap_or_default();
            if self.tx.is_empty() {
                self.outs.reset();
            }
            // One frame per call: a partial checksum is completed here; a super-frame (which
            // only drain_transmit can cut into several) is dropped, and said so.
            if !d.offload.is_none() {
                let whole = d.offload.gso.is_none()
                    && hf_wire::offload::complete_checksum(&mut bytes, &d.offload).is_ok();
                if !whole {
                    self.counters.dropped += 1;
                    self.log_once(Level::Warn, format_args!("poll-gso"), || {
                        "poll_transmit: an offloaded super-frame dropped (drain_transmit cuts \
                         them into segments)"
                            .into()
                    });
                    continue;
                }
            }
            match d.to {
                TxTo::Port(id) => {
                    // A port removed since the frame was queued: the frame is dropped.
                    let Some(name) = self.port_names.get(&id) else {
                        self.counters.dropped += 1;
                        continue;
                    };
                    return Some(Transmit::Port {
                        port: name.clone(),
                        frame: bytes,
                    });
                }
                TxTo::Tunnel(dst) => {
                    return Some(Transmit::Tunnel {
                        dst,
                        payload: bytes,
                    });
                }
                TxTo::Mirror(dst) => {
                    return Some(Transmit::Mirror {
                        dst,
                        payload: bytes,
                    });
                }
            }
        }
    }

    /// Hands every queued frame to `f` without copying it (what [`Datapath::poll_transmit`]
    /// does, minus the allocations): the forwarding loop of the shells and the benchmark.
    pub fn drain_transmit(&mut self, mut f: impl FnMut(TransmitRef<'_>)) {
        let mut whole = hf_wire::offload::Segments::new();
        let mut failed = 0;
        self.drain_transmit_offload(|t, o| {
            if o.is_none() {
                return f(t);
            }
            if !crate::offload::complete(t, o, &mut whole, &mut f) {
                failed += 1;
            }
        });
        self.counters.dropped += failed;
    }

    /// [`Datapath::drain_transmit`] for a shell that hands offloads to its devices: each frame
    /// comes with the checksum and segmentation still to do ([`Offload`]; of the inner frame
    /// for a tunnel), as [`Datapath::handle_port_frame_offload`] carried them.
    pub fn drain_transmit_offload(&mut self, mut f: impl FnMut(TransmitRef<'_>, &Offload)) {
        while let Some(d) = self.tx.pop_front() {
            let bytes = self.outs.frame(d.frame).map_or(&[][..], |(_, b)| b);
            match d.to {
                TxTo::Port(id) => match self.port_names.get(&id) {
                    Some(name) => f(
                        TransmitRef::Port {
                            port: name,
                            frame: bytes,
                        },
                        &d.offload,
                    ),
                    None => self.counters.dropped += 1,
                },
                TxTo::Tunnel(dst) => f(
                    TransmitRef::Tunnel {
                        dst,
                        payload: bytes,
                    },
                    &d.offload,
                ),
                TxTo::Mirror(dst) => f(
                    TransmitRef::Mirror {
                        dst,
                        payload: bytes,
                    },
                    &d.offload,
                ),
            }
        }
        self.outs.reset();
    }

    // ----- timers -----

    /// When [`Datapath::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let ct = self.ct.poll_timeout();
        let ls = self.pipeline.learn_stats();
        let learn = (ls.ecmp + ls.lb_affinity > 0).then_some(self.last_sweep + LEARN_SWEEP);
        [
            ct,
            learn,
            self.migration_deadline(),
            self.svc.poll_timeout(),
            self.snoop.poll_timeout(),
            self.ras.poll_timeout(),
            self.bfd.poll_timeout(),
            self.hop_bfd.poll_timeout(),
            self.garps.iter().map(|g| g.0).min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Expires conntrack entries and learned entries due by `now`.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.clock = self.clock.max(now);
        self.ct.handle_timeout(now);
        self.migration_timeout(now);
        if now >= self.last_sweep + LEARN_SWEEP {
            self.pipeline.expire_learned(now);
            self.last_sweep = now;
        }
        self.run_bfd(now);
        if self.svc.poll_timeout().is_some_and(|t| t <= now) {
            self.run_svc(now);
        }
        if self.snoop.poll_timeout().is_some_and(|t| t <= now) {
            self.run_mcast(now);
        }
        if self.ras.poll_timeout().is_some_and(|t| t <= now) {
            self.run_ras(now);
        }
        if self.hop_bfd.poll_timeout().is_some_and(|t| t <= now) {
            self.run_hop_bfd(now);
        }
    }

    // ----- introspection -----

    /// Counters (live conntrack entries included).
    pub fn counters(&self) -> Counters {
        Counters {
            conntrack_entries: self.ct.len() as u64,
            packet_in: self.pipeline.packet_in_stats().replies(),
            ..self.counters.clone()
        }
    }

    /// The zone map (stable name → zone).
    pub fn zones(&self) -> &BTreeMap<String, u16> {
        &self.zones
    }

    /// The installed program.
    pub fn program(&self) -> Option<&ProgramMsg> {
        self.program.as_ref()
    }

    /// The installed program's generation (0 before any).
    pub fn generation(&self) -> u64 {
        self.program.as_ref().map_or(0, |p| p.generation)
    }

    /// The flow errors of the installed program.
    pub fn flow_errors(&self) -> &[FlowErrorMsg] {
        &self.flow_errors
    }

    /// A trace of `frame` arriving on local port `port` against the live conntrack and
    /// tables in "what if" mode (nothing changes): what a failure report shows next to the
    /// outputs. `None` for an unknown port.
    pub fn trace_port_frame(&mut self, port: &str, frame: &[u8], now: Duration) -> Option<String> {
        let id = self.ports.get(port)?.id;
        let mut outs = Outputs::with_headroom(0);
        let t = self
            .pipeline
            .trace(&self.ct, Ingress::Local(id), frame, now, &mut outs);
        Some(match t {
            Ok(t) => t.to_string(),
            Err(e) => format!("trace failed: {e}"),
        })
    }

    /// The pipeline (for traces and action hit counts).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The conntrack table.
    pub fn conntrack(&self) -> &Conntrack {
        &self.ct
    }

    /// Conntrack entries in `ovs-appctl dpctl/dump-conntrack`'s style, of one zone (by name)
    /// or all.
    pub fn dump_conntrack(&self, zone: Option<&str>, now: Duration) -> Result<Vec<String>, String> {
        let z = match zone {
            None => None,
            Some(n) => match self.zones.get(n) {
                Some(&z) => Some(z),
                None => return Err(format!("zone \"{n}\" is not in the zone map")),
            },
        };
        Ok(crate::dump::dump(&self.ct, z, now))
    }

    /// The whole state (program, zone map, conntrack) for a handoff to another process.
    pub fn export_state(&self, now: Duration) -> StateExport {
        let ct = self.ct.export(&Selection::everything(), now);
        StateExport {
            program: self.program.clone(),
            zones: self.zones.clone(),
            // Encoding a plain struct into a Vec cannot fail.
            conntrack: postcard::to_allocvec(&ct).unwrap_or_default(),
            activated: self.activated_ports(),
        }
    }

    /// The BFD sessions for a takeover ([`crate::proto::ToDatapath::TakeOverSessions`]).
    pub fn export_sessions(&self, now: Duration) -> crate::proto::SessionsExport {
        crate::proto::SessionsExport {
            tunnel: self.bfd.export(now),
            hop: self.hop_bfd.export(now),
        }
    }

    /// Runs on the BFD sessions a taken-over process ran (after [`Datapath::import_state`]:
    /// next-hop sessions send through the program's routers). The controller that connects
    /// next is told their states, and its lists keep them as they are.
    pub fn import_sessions(&mut self, e: crate::proto::SessionsExport, now: Duration) {
        self.clock = self.clock.max(now);
        self.log(
            Level::Info,
            format!(
                "takeover: running on {} BFD session(s) with chassis and {} to next hops",
                e.tunnel.len(),
                e.hop.len()
            ),
        );
        self.bfd.import(e.tunnel, now);
        self.hop_bfd.import(e.hop, now);
    }

    /// Takes over an exported state: installs its program (against this datapath's ports),
    /// adopts its zone map and imports its connections. Everything is decoded and checked
    /// first (the conntrack blob, its version, every connection, the zone map, the program's
    /// compilation), so an error changes nothing: program, zone map, conntrack and
    /// activations stay as they were.
    pub fn import_state(&mut self, s: StateExport, now: Duration) -> Result<(), String> {
        let ct: hf_conntrack::CtExport = postcard::from_bytes(&s.conntrack)
            .map_err(|e| format!("exported conntrack does not decode: {e}"))?;
        if ct.version != hf_conntrack::EXPORT_VERSION {
            return Err(format!(
                "exported conntrack has version {}, this datapath reads {}",
                ct.version,
                hf_conntrack::EXPORT_VERSION
            ));
        }
        if let Some(i) = ct.first_malformed() {
            return Err(format!(
                "exported conntrack connection {i} (of {}) is malformed (mismatched tuples or \
                 TCP state): the export is corrupt; nothing imported",
                ct.conns.len()
            ));
        }
        if let Some(i) = ct.conns.iter().position(|c| c.orig.zone == 0) {
            return Err(format!(
                "exported conntrack connection {i} is in zone 0, the host's: nothing imported"
            ));
        }
        if let Some((n, _)) = s.zones.iter().find(|(_, z)| **z == 0) {
            return Err(format!("exported zone map gives zone 0 to \"{n}\""));
        }
        self.clock = self.clock.max(now);
        if let Some(p) = s.program {
            // Activations made by the old process hold here too (before the program's
            // install decides which ports wait); undone if the program is refused.
            let before = self.mig.activated.clone();
            self.mig.activated.extend(s.activated.iter().cloned());
            if let Err(e) = self.install(p) {
                self.mig.activated = before;
                return Err(e);
            }
        } else {
            self.mig.activated.extend(s.activated.iter().cloned());
        }
        if self.zones != s.zones {
            self.zones = s.zones;
            self.zones_changed = true;
        }
        // Checked above: the version matches, so the import takes every connection.
        let rep = self
            .ct
            .import(&ct, |z| z, now)
            .map_err(|e| format!("conntrack import: {e}"))?;
        self.log(
            Level::Info,
            format!(
                "state imported: {} connections ({} replaced, {} malformed, {} refused)",
                rep.imported, rep.replaced, rep.malformed, rep.refused
            ),
        );
        Ok(())
    }
}

/// Writes `repr`'s Geneve header in front of frame `i` of `outs`, in its headroom, and returns
/// the index of the encapsulated frame: `i` itself, or, when the headroom left before it is too
/// short, a copy (header and frame) pushed at the end (the copying path, which gives the same
/// bytes).
pub(crate) fn encapsulate(outs: &mut Outputs, i: usize, repr: &GeneveRepr) -> usize {
    let hdr = repr.to_array();
    let hdr = hdr.get(..repr.buffer_len()).unwrap_or(&hdr);
    if outs.prepend(i, hdr).is_some() {
        return i;
    }
    let Some((dst, bytes)) = outs.frame(i) else {
        return i;
    };
    let mut v = Vec::with_capacity(hdr.len() + bytes.len());
    v.extend_from_slice(hdr);
    v.extend_from_slice(bytes);
    outs.push_frame(dst, &v);
    outs.first() + outs.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warnings(dp: &mut Datapath) -> Vec<String> {
        std::iter::from_fn(|| dp.poll_log())
            .filter(|(l, _)| *l == Level::Warn)
            .map(|(_, m)| m)
            .collect()
    }

    #[test]
    fn a_flood_of_drops_logs_each_cause_once() {
        let mut dp = Datapath::new(DatapathConfig::new("hv1", [192, 0, 2, 1].into()));
        let src: IpAddr = [192, 0, 2, 2].into();
        for i in 0..100u64 {
            let now = Duration::from_millis(i);
            dp.handle_port_frame("ghost", &[0; 14], now);
            dp.handle_port_frame("ghost2", &[0; 14], now);
            dp.handle_tunnel(src, &[0xff], now);
        }
        let w = warnings(&mut dp);
        assert_eq!(w.len(), 3, "{w:?}");
        assert_eq!(w[0], "frame on unknown port ghost: dropped");
        assert_eq!(w[1], "frame on unknown port ghost2: dropped");
        assert!(w[2].starts_with("tunnel packet from 192.0.2.2: "), "{w:?}");
        assert_eq!(dp.counters().dropped, 300);
        // The same causes later still log nothing.
        dp.handle_port_frame("ghost", &[0; 14], Duration::from_secs(1));
        assert!(warnings(&mut dp).is_empty());
    }

    /// Frames with varied lengths and headrooms (seeded, deterministic): the Geneve payload
    /// written in place in the headroom equals the copying version (header emitted, frame
    /// appended), before and after other frames (kept or not), and decapsulates back to the
    /// same header and frame; a headroom too short is the copying path, with the same bytes.
    #[test]
    fn encapsulate_in_place_equals_the_copying_version() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut in_place = 0;
        let mut copied = 0;
        for round in 0..400 {
            let headroom = [GeneveRepr::MAX_LEN, 0, 8, 15, 16, 40][round % 6];
            let mut outs = Outputs::with_headroom(headroom);
            let mut frames = Vec::new();
            for _ in 0..(1 + next() % 4) {
                let len = (next() % 200) as usize;
                let f: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                outs.push_frame(Destination::Local(1), &f);
                frames.push(f);
                if next() % 3 == 0 {
                    outs.keep();
                }
            }
            let n = frames.len();
            let base = outs.first() + outs.len() - n;
            for (k, f) in frames.iter().enumerate() {
                let repr = GeneveRepr {
                    meta: OvnMetadata {
                        datapath: (next() % (1 << 24)) as u32,
                        ports: Some(PortKeys {
                            ingress: (next() % (1 << 15)) as u16,
                            egress: next() as u16,
                        }),
                    },
                    oam: false,
                };
                let mut want = Vec::new();
                repr.emit(&mut want);
                want.extend_from_slice(f);
                let i = encapsulate(&mut outs, base + k, &repr);
                if i == base + k {
                    in_place += 1;
                    assert!(headroom >= GeneveRepr::MAX_LEN, "in place with {headroom}");
                } else {
                    copied += 1;
                }
                let (_, got) = outs.frame(i).expect("the encapsulated frame");
                assert_eq!(got, &want[..], "round {round} frame {k}");
                let g = GenevePacket::new_checked(got).expect("a Geneve header");
                assert_eq!(GeneveRepr::parse(&g).expect("parses"), repr);
                assert_eq!(&got[g.header_len()..], &f[..]);
            }
            // The frames not encapsulated yet are untouched by their neighbours' headers.
            for (k, f) in frames.iter().enumerate() {
                let (_, got) = outs.frame(base + k).expect("frame");
                if got.len() == f.len() {
                    assert_eq!(got, &f[..]);
                } else {
                    assert_eq!(&got[GeneveRepr::MAX_LEN..], &f[..]);
                }
            }
        }
        assert!(in_place > 100 && copied > 100, "{in_place} {copied}");
    }
}
