//! The `holdfast northd` daemon's sans-I/O parts: the lean southbound view ([`sbview`]) and
//! the core ([`core::Northd`]) that follows NB and SB through two client replicas, compiles,
//! syncs, and runs the `nb_cfg` → `sb_cfg`/`hv_cfg` handshake. The binary's `src/northd/`
//! is the shell: it moves bytes, reads clocks and serves unixctl.

pub mod core;
pub mod sbview;

pub use self::core::{Config, Northd, Role};
pub use sbview::SbView;

#[cfg(test)]
mod tests;
