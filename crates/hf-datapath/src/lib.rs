//! `hf-datapath`: holdfast's per-chassis datapath.
//!
//! # What it does
//!
//! - [`proto`]: the versioned controller ↔ datapath control protocol (program push, zone map,
//!   conntrack dump and flush by owner, counters, state export for handoff).
//!
//! # What it does not do (yet)
//!
//! The sans-I/O datapath core (ports, Geneve tunnels, the pipeline with its flow cache,
//! conntrack, the zone map, packet-in replies) and the `holdfast datapath` shell are being
//! built on top of this protocol.

pub mod proto;
