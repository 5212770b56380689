//! `holdfast`: the command-line entry point. Thin: parses arguments and wires crates together.

mod check;
mod controller;
mod datapath;
mod db;
mod lflow;
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

/// mimalloc's `mi_option_purge_delay` (index 15 of its option enum in both the v2 and v3
/// headers of the pinned `libmimalloc-sys`; the crate names no constant for it).
#[cfg(not(feature = "system-alloc"))]
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

#[cfg(not(feature = "system-alloc"))]
unsafe extern "C" {
    /// mimalloc's option setter (the C library `libmimalloc-sys` builds and links).
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Freed memory is handed back to the kernel 1 s after it was freed (arenas 10 s), not
/// mimalloc's 10 ms: a chassis builds and drops multi-megabyte program messages and specs on
/// every change, and with the default each change faulted its pages in again (a profile of
/// the port add at 500×40: 23 % of the datapath's and 8 % of the controller's samples were
/// page faults; 12 % and 5 % with 1 s). Peak RSS does not change (what is freed is reused
/// before it is returned). `MIMALLOC_PURGE_DELAY` in the environment still decides.
fn tune_allocator() {
    #[cfg(not(feature = "system-alloc"))]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none()
        && std::env::var_os("MIMALLOC_RESET_DELAY").is_none()
    {
        // SAFETY: sets one integer option; called once at the start of `main`, before any
        // thread is spawned (mimalloc documents the setter as not thread safe).
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 1000) };
    }
}

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
    /// The per-chassis datapath: in-memory ports, Geneve tunnels, the flow cache, conntrack
    /// and the zone map, under a controller's control socket.
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
    tune_allocator();
    // Busybox-style: invoked through a link named `ovsdb-server`, the binary is holdfast's
    // OVSDB server with ovsdb-server's command line (so OVN's ovn-ctl can start it).
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let central = name == "ovsdb-server"
        || name == "ovn-northd"
        || args.get(1).is_some_and(|a| a == "db" || a == "northd");
    if central {
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
/// central daemons. mimalloc asks for huge pages on its arenas (`madvise`), so every first
/// touch of a 2 MB region faults in and zeroes a whole huge page: a cold SB's 100k-row
/// transaction spent ~40 % of holdfast db's CPU in `clear_page_erms` under
/// `do_huge_pmd_anonymous_page`; without huge pages its system time went from 1.7 s to 0.6 s
/// (docs/db-scale.md, "The cold start's timeline (session 11)"). Failing to set it only costs
/// that time, so an error is ignored. Same effect as `MIMALLOC_ALLOW_THP=0`.
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

#[cfg(all(test, not(feature = "system-alloc")))]
mod alloc_tests {
    use std::process::Command;

    unsafe extern "C" {
        /// mimalloc's option getter.
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    }

    /// Runs this test alone in a child process with `env`; in the child, `check` runs.
    fn in_child(name: &str, env: &[(&str, &str)], check: impl FnOnce()) {
        if std::env::var_os("HF_ALLOC_PROBE").is_some() {
            check();
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", name, "--test-threads=1"])
            .env("HF_ALLOC_PROBE", "1")
            .env_remove("MIMALLOC_PURGE_DELAY")
            .env_remove("MIMALLOC_RESET_DELAY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run the test binary");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// Index 15 is what mimalloc's own `MIMALLOC_PURGE_DELAY` sets (so the constant names
    /// the purge delay), and `tune_allocator` leaves a value from the environment alone.
    #[test]
    fn the_purge_delay_option_is_index_15_and_the_environment_decides() {
        in_child(
            "alloc_tests::the_purge_delay_option_is_index_15_and_the_environment_decides",
            &[("MIMALLOC_PURGE_DELAY", "1234")],
            || {
                super::tune_allocator();
                // SAFETY: reads one integer option.
                let v = unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) };
                assert_eq!(v, 1234);
            },
        );
    }

    #[test]
    fn tune_allocator_sets_a_1s_purge_delay() {
        in_child(
            "alloc_tests::tune_allocator_sets_a_1s_purge_delay",
            &[],
            || {
                super::tune_allocator();
                // SAFETY: reads one integer option.
                let v = unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) };
                assert_eq!(v, 1000);
            },
        );
    }
}
