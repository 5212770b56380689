//! `holdfast db` driven by real OVN and OVS clients (issue 2's acceptance), as one test binary.
// Integration tests are I/O shells: they read the clock and spawn threads.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "db/bad_input.rs"]
mod bad_input;
#[path = "db/clients.rs"]
mod clients;
#[path = "db/daemon.rs"]
mod daemon;
#[path = "db/differential.rs"]
mod differential;
#[path = "db/durability.rs"]
mod durability;
#[path = "db/nbctl.rs"]
mod nbctl;
#[path = "db/northd_optional.rs"]
mod northd_optional;
#[path = "db/tls.rs"]
mod tls;
