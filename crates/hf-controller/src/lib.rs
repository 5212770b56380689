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
//! - [`program_msg::program_msg`]: a translation → the `hf_datapath::proto::ProgramMsg` a
//!   controller pushes to its datapath (flows as text with identity and last good versions).
//! - [`daemon::Controller`]: the `holdfast controller` daemon's sans-I/O core (SB replica with
//!   conditional monitoring, chassis registration, port claims, zones, programs, `nb_cfg`,
//!   flow errors, `MAC_Binding`); the binary's shell moves its bytes.
//!
//! # What it does not do
//!
//! No I/O of any kind: no sockets, no clock (the daemon core takes bytes and `now`). The only
//! threads are the scoped ones a translation may be given ([`Parallelism`], set by the
//! caller's shell): computation only, with a result that does not depend on them. Live
//! migration driving is a later issue.

pub mod daemon;
pub mod program_msg;
pub mod translate;

pub use translate::{
    ChassisEntry, Diagnostic, Extra, FlowEdit, Incremental, Parallelism, Rest, Touched,
    TranslateCache, TranslateOptions, Translation, needed_datapaths, reachable_datapaths,
    translate, translate_cached, translate_par, translate_with,
};
