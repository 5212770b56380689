//! `hf-sim`: a deterministic multi-chassis simulator.
//!
//! # What it does
//!
//! - [`net`]: the virtual clock, seeded randomness, in-memory links with optional loss and delay
//!   (DESIGN "The simulator's clock and costs"), simulated hosts with real TCP/UDP/ICMP stacks
//!   (smoltcp), and the record of what every connection saw.
//! - [`world`]: the composition: an in-memory OVSDB server (NB and SB), northd, chassis
//!   (controller + datapath cores), hosts attached to logical ports, and the scenario API.
//!
//! # What it does not do
//!
//! No real sockets, threads or clocks: every core runs on the virtual clock, so the same seed
//! gives the same record, byte for byte.

pub mod net;
pub mod world;
