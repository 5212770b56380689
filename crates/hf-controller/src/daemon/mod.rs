//! The `holdfast controller` daemon's sans-I/O core ([`Controller`]): one SB replica (with
//! conditional monitoring) and one datapath control connection, driven by bytes and `now`.
//! The binary's `src/controller/` is the shell (sockets, clock, unixctl); the simulator runs
//! the same core on its virtual clock.
//!
//! Modules: [`core`] (the state machine and the call contract), [`chassis`] (Chassis, Encap
//! and Chassis_Private registration), [`binding`] (Port_Binding claims), [`monitor`]
//! (conditions), [`lastgood`] (last good flow versions and flow errors by cause), [`neigh`]
//! (learned neighbours → MAC_Binding), [`local`] (the local OVS database: chassis settings,
//! `ovn-installed`).

pub mod binding;
pub mod chassis;
pub mod core;
pub mod lastgood;
pub mod local;
pub mod monitor;
pub mod neigh;
pub mod svc;

pub use self::core::{
    Controller, ControllerConfig, Level, STAGES, Stats, Tuning, local_mirrors, newest_level,
};
