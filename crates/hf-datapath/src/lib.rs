//! `hf-datapath`: holdfast's per-chassis datapath.
//!
//! # What it does
//!
//! - [`proto`]: the versioned controller ↔ datapath control protocol (program push, zone map,
//!   conntrack dump and flush by owner, counters, state export for handoff).
//! - [`delta`]: program deltas (what changed between two programs, per datapath and part) and
//!   their exact, all-or-nothing application (protocol version 4).
//! - [`program`]: a [`proto::ProgramMsg`] (flows as SB text, ports by name) →
//!   [`hf_pipeline::ProgramSpec`] → a compiled program, with the last good version of a flow
//!   running when its current text fails.
//! - [`Datapath`] ([`core`]): the sans-I/O datapath: in-memory ports, the pipeline with its
//!   flow cache, conntrack, the zone map, Geneve between chassis, and the control session
//!   ([`control`]). The `holdfast datapath` daemon and the simulator both run it.
//! - [`local`]: the chassis's local database (OVS's `Open_vSwitch`) as ovs-vswitchd reads it:
//!   which interfaces of the integration bridge attach to which logical ports, their ofports,
//!   and the write-back (`ofport`, `link_state`, `error`, `cur_cfg`).
//! - [`stopwatch`]: stage stopwatches (`stopwatch/show`) for a change's way through a daemon.
//! - [`dump`]: conntrack entries in `dpctl/dump-conntrack`'s style.
//! - [`bfd`]: BFD with other chassis over the Geneve tunnels (which gateways are alive), and
//!   the gratuitous ARPs of a gateway that takes over.
//! - [`hop_bfd`]: BFD from logical router ports to their next hops (SB `BFD`): control
//!   packets through the router's pipeline, states to the controller (SB `BFD.status`).
//! - [`mirror`]: port mirroring (SB `Mirror`): GRE and ERSPAN copies of what a port sends or
//!   is delivered, to the session's sink, as OVS sends them for ovn-controller.
//! - [`snoop`]: multicast snooping (IGMP and MLD) for SB `IP_Multicast` switches: learned
//!   groups to the controller (SB `IGMP_Group`), and the querier.
//! - [`ra`]: periodic unsolicited IPv6 router advertisements out of the local ports.
//! - [`migrate`]: live migration between datapaths: the state channel, the conntrack pre-copy,
//!   deltas and final delta, and the destination's hold of the port's traffic until then.
//!
//! - [`port`]: real frame devices behind the [`port::FramePort`] trait: [`port::AfPacket`]
//!   (batched `AF_PACKET` with VLAN tags restored and `PACKET_VNET_HDR` offload metadata). The
//!   shell drives them; the core does not see them.
//!
//! # What it does not do (yet)
//!
//! Wire real ports into the core and the daemon (`src/datapath/`); the packet-in replies (DHCP,
//! DNS, RA) are the pipeline's.

pub mod acl_log;
pub mod bfd;
pub mod control;
pub mod core;
pub mod delta;
pub mod dump;
#[doc(hidden)]
pub mod example;
pub mod hop_bfd;
pub mod intern;
pub mod local;
pub mod migrate;
pub mod mirror;
pub mod offload;
pub mod port;
pub mod program;
pub mod proto;
pub mod ra;
pub mod snoop;
pub mod stopwatch;
pub mod svc;

pub use crate::core::{
    Datapath, DatapathConfig, DeltaRefusal, Level, MAX_PENDING, PortHandle, Transmit, TransmitRef,
};
pub use crate::migrate::{MigrationConfig, MigrationStats, PeerId, StateDial, StateMsg};
