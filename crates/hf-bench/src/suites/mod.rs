//! The suites. Each module runs one workload family and reports through [`crate::Report`].

pub mod central;
pub mod conntrack;
pub mod controller;
pub mod datapath_veth;
pub mod expr;
pub mod fanout;
pub mod migration;
pub mod migration_real;
pub mod northd;
pub mod ovsdb;
pub mod ovsdb_client;
pub mod pipeline;
pub mod sandbox;
pub mod trace;

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
        "conntrack",
        "hf-conntrack: new connections/s, lookups/s over 10k established, heap bytes per entry",
        conntrack::run,
    ),
    (
        "expr",
        "hf-expr parse + type-check + normalise throughput over real OVN 23.03 flows",
        expr::run,
    ),
    (
        "pipeline",
        "hf-pipeline: switch → router → SNAT with conntrack over 10k established TCP connections, cached path and full walk (pps)",
        pipeline::run,
    ),
    (
        "ovsdb-client",
        "client replica vs OVS's Python IDL: initial sync time and memory of the gen_topo NB and its SB",
        ovsdb_client::run,
    ),
    (
        "trace",
        "holdfast trace vs ovn-trace on the gen_topo SB real ovn-northd writes: one CLI trace, per trace in the long-running mode, translate+compile for one chassis",
        trace::run,
    ),
    (
        "northd",
        "holdfast northd vs ovn-northd on the gen_topo NB (100x20, 300x30, 500x40): in-process compile, cold compile and lsp-add until --wait=sb, peak RSS",
        northd::run,
    ),
    (
        "controller",
        "holdfast chassis vs ovn-controller on the gen_topo SB real ovn-northd writes (500x40): cold start and one port added, with the split and peak heap",
        controller::run,
    ),
    (
        "fanout",
        "one NB change (an ACL on a port group over every switch) reaching 1,000 chassis: holdfast db core, northd and chassis cores in one process; heap per chassis",
        fanout::run,
    ),
    (
        "sandbox",
        "hf-datapath: established TCP between two chassis through Geneve, in memory, one core (pps)",
        sandbox::run,
    ),
    (
        "migration",
        "incident C in the simulator: 100 live migrations of a VM with 10k conntrack entries behind NAT and a security group; stall p50/p99 (simulated ms), retransmissions, bytes moved",
        migration::run,
    ),
    (
        "datapath-veth",
        "VM to VM on real namespaces (root): iperf3 TCP (offloads on/off) and 60-byte UDP through holdfast on one chassis and across two, beside a direct veth pair, a Linux bridge and OVS's userspace datapath",
        datapath_veth::run,
    ),
    (
        "migration-real",
        "live migrations of a VM between two holdfast chassis on real namespaces (root) during kernel TCP to an external namespace: the stall it sees (p50, p99)",
        migration_real::run,
    ),
];
