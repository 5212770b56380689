//! `hf-controller`: what a holdfast chassis controller computes, as pure functions.
//!
//! # What it does
//!
//! - [`translate()`]: an SB snapshot (hf-model rows) and an optional chassis name → an
//!   [`hf_pipeline::ProgramSpec`] plus per-row diagnostics and the chassis table. The
//!   controller daemon, `holdfast trace`, `holdfast check` and the simulator call the same
//!   function, so what trace shows is what a chassis runs.
//! - [`translate::needed_datapaths`] / [`translate::reachable_datapaths`]: which datapaths a
//!   chassis (or a trace starting in one datapath) needs, so a consumer can monitor only those
//!   rows, as ovn-controller does by default.
//!
//! # What it does not do (yet)
//!
//! No I/O of any kind: no OVSDB session (that is `hf-ovsdb-net`'s replica), no sockets, no
//! clock. The controller daemon core (claiming ports, writing `Port_Binding.chassis`,
//! `MAC_Binding` rows, feature advertisement, migration) is a later issue; it will be built on
//! this crate.

pub mod translate;

pub use translate::{
    ChassisEntry, Diagnostic, Extra, TranslateOptions, Translation, needed_datapaths,
    reachable_datapaths, translate, translate_with,
};
