//! The suites. Each module runs one workload family and reports through [`crate::Report`].

use crate::{Opts, Report};

pub mod conntrack;

/// A suite's entry point.
pub type SuiteFn = fn(&Opts, &mut Report) -> anyhow::Result<()>;

/// (name, one-line description, entry point), in the order `all` runs them.
pub const ALL: &[(&str, &str, SuiteFn)] = &[(
    "conntrack",
    "hf-conntrack: new connections/s, lookups/s over 10k established, heap bytes per entry",
    conntrack::run,
)];
