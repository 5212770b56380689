//! The simulated world: the database (NB and SB in one in-memory OVSDB server), northd
//! (holdfast's core, or a static SB such as real ovn-northd's output), chassis (a controller
//! and a datapath core each, joined by the control protocol's bytes), hosts attached to
//! datapath ports, and the scenario API. Everything runs on one virtual clock; the same seed
//! gives the same record.
//!
//! Submodules: [`db`] (the server and its sessions), [`northd`] (northd on virtual time),
//! [`nb`] (NB builders as OVSDB transactions).

pub mod db;
pub mod nb;
pub mod northd;
