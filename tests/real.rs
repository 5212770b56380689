//! holdfast chassis on real interfaces with real kernel TCP (issue 19), in network namespaces
//! the test makes (hf-testkit's [`Lab`]; root, a `SKIP:` line otherwise, a failure under
//! `CI=true`).
//!
//! The databases (`holdfast db`) and `holdfast northd` serve on unix sockets in the lab's
//! directory. Each chassis is a namespace with an underlay address on a veth pair to the other
//! chassis (Geneve crosses it), its own local OVS database (`holdfast db` serving a database
//! made from OVS's own `vswitch.ovsschema`, configured with real `ovs-vsctl` as an operator or a
//! CNI would), and `holdfast datapath` + `holdfast controller` started with nothing but that
//! database on their command lines (plus the control socket and file paths). VMs are
//! namespaces on veth pairs whose chassis end is added to `br-int` with real `ovs-vsctl
//! add-port ... external_ids:iface-id=PORT`.

#![allow(clippy::disallowed_methods, clippy::unwrap_used)]
mod common;

#[path = "real/fixture.rs"]
mod fixture;

#[path = "real/basic.rs"]
mod basic;

#[path = "real/restarts.rs"]
mod restarts;

#[path = "real/migrate.rs"]
mod migrate;

#[path = "real/gateway.rs"]
mod gateway;
