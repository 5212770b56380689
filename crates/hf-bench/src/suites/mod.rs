//! The suites. Each module runs one workload family and reports through [`crate::Report`].

pub mod expr;

use crate::{Opts, Report};

/// A suite's entry point.
pub type SuiteFn = fn(&Opts, &mut Report) -> anyhow::Result<()>;

/// (name, one-line description, entry point), in the order `all` runs them.
pub const ALL: &[(&str, &str, SuiteFn)] = &[(
    "expr",
    "hf-expr parse + type-check + normalise throughput over real OVN 23.03 flows",
    expr::run,
)];
