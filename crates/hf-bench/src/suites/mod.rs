//! The suites. Each module runs one workload family and reports through [`crate::Report`].

pub mod ovsdb;
pub mod ovsdb_client;

use crate::{Opts, Report};

/// A suite's entry point.
pub type SuiteFn = fn(&Opts, &mut Report) -> anyhow::Result<()>;

/// (name, one-line description, entry point), in the order `all` runs them.
pub const ALL: &[(&str, &str, SuiteFn)] = &[
    (
        "ovsdb",
        "holdfast db vs ovsdb-server: insert transactions/s and monitor fan-out",
        ovsdb::run,
    ),
    (
        "ovsdb-client",
        "client replica vs OVS's Python IDL: initial sync time and memory of the gen_topo NB and its SB",
        ovsdb_client::run,
    ),
];
