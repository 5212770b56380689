//! `holdfast`: the command-line entry point. Thin: parses arguments and wires crates together.

mod check;
mod controller;
mod datapath;
mod db;
mod lflow;
mod localdb;
mod northd;
mod sandbox;
mod trace;

use clap::{Parser, Subcommand};

// mimalloc instead of glibc's malloc: the OVSDB server's request path is allocation-bound (a
// 100-row `transact` costs ~19% fewer instructions with it; see crates/hf-ovsdb-net/examples).
// The `system-alloc` feature keeps glibc's malloc, so that heaptrack sees every allocation.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Network virtualization that speaks OVN's language and keeps established connections alive.
#[derive(Debug, Parser)]
#[command(name = "holdfast", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Preflight: what in this NB/SB (and live datapaths) would break established connections
    /// (NAT rewriting internal traffic, flows a chassis cannot parse, zone identities at risk,
    /// egress that moves with a VM, broken ACLs), each with the row, the reason and the fix.
    Check(Box<check::CheckArgs>),
    /// The OVSDB server: serves the NB and SB databases (and any other) to ovn-nbctl,
    /// ovsdb-client, OVS's IDLs and holdfast's own components.
    Db(Box<db::DbArgs>),
    /// The per-chassis controller, as ovn-controller: registers the chassis in SB, claims its
    /// ports and programs the local `holdfast datapath`.
    Controller(Box<controller::ControllerArgs>),
    /// The per-chassis datapath: real ports from the local OVS database (AF_PACKET) and
    /// in-memory ones, Geneve tunnels, the flow cache, conntrack and the zone map, under a
    /// controller's control socket.
    Datapath(Box<datapath::DatapathArgs>),
    /// Check and explain OVN logical flows (match/action language).
    Lflow(lflow::LflowArgs),
    /// Compile the OVN northbound database into the southbound database, as ovn-northd does
    /// (invoked through a link named `ovn-northd`, with ovn-northd's command line).
    Northd(Box<northd::NorthdArgs>),
    /// All of holdfast in one process on a simulated network (databases, northd, chassis,
    /// hosts), with its databases on tcp:127.0.0.1:6641/6642 for real OVN tools.
    Sandbox(sandbox::SandboxArgs),
    /// Trace one packet through the logical pipelines of an OVN southbound database, as
    /// ovn-trace does, on holdfast's own pipeline and conntrack.
    Trace(trace::TraceArgs),
}

fn main() -> std::process::ExitCode {
    // Busybox-style: invoked through a link named `ovsdb-server`, the binary is holdfast's
    // OVSDB server with ovsdb-server's command line (so OVN's ovn-ctl can start it).
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let daemon = name == "ovsdb-server"
        || name == "ovn-northd"
        || args.get(1).is_some_and(|a| {
            ["db", "northd", "controller", "datapath", "trace"].contains(&a.to_str().unwrap_or(""))
        });
    if daemon {
        no_huge_pages();
    }
    let r = if name == "ovsdb-server" {
        db::OvsdbServerCli::parse_from(db::normalize_args(args)).run()
    } else if name == "ovn-northd" {
        northd::OvnNorthdCli::parse_from(db::normalize_args(args)).run()
    } else if args
        .get(1)
        .is_some_and(|a| a == "db" || a == "northd" || a == "controller")
    {
        run(Cli::parse_from(db::normalize_args(args)))
    } else {
        run(Cli::parse_from(args))
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

/// Turns transparent huge pages off for this process (and its `--detach` child) in the
/// daemons. mimalloc asks for huge pages on its arenas (`madvise`), so every first touch of a
/// 2 MB region faults in and zeroes a whole huge page, and the whole page stays resident
/// while any of it is used:
/// - a cold SB's 100k-row transaction spent ~40 % of holdfast db's CPU in `clear_page_erms`
///   under `do_huge_pmd_anonymous_page`; without huge pages its system time went from 1.7 s
///   to 0.6 s (docs/db-scale.md, "The cold start's timeline (session 11)");
/// - a chassis at 500x40 peaked at 458 MB (controller) and 371 MB (datapath) with them and
///   393 / 339 MB without (docs/change-latency.md, "Session 19").
///
/// Failing to set it only costs that, so an error is ignored. Same effect as
/// `MIMALLOC_ALLOW_THP=0`.
fn no_huge_pages() {
    let _ = nix::sys::prctl::set_thp_disable(true);
}

fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    match cli.command {
        Command::Check(args) => check::run(*args),
        Command::Db(args) => db::run(*args),
        Command::Controller(args) => controller::run(*args),
        Command::Datapath(args) => datapath::run(*args),
        Command::Lflow(args) => lflow::run(args)
            .map(|code| std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))),
        Command::Trace(args) => trace::run(args),
        Command::Northd(args) => northd::run(*args),
        Command::Sandbox(args) => sandbox::run(args),
    }
}
