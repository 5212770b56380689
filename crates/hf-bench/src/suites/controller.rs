//! `controller`: what a chassis spends turning SB into forwarding, holdfast against real
//! `ovn-controller` 23.03 on the SB real `ovn-northd` compiles from the NB
//! `shared/bench/gen_topo.py` builds (500 switches × 40 ports; `--tiny`: 5 × 4;
//! `HF_BENCH_CONTROLLER_SIZE=NxP` chooses another size).
//!
//! The measured chassis is `hv1` (it also hosts gen_topo's gateway router `gw0`). Its local
//! ports are every VIF of every tenth switch (`ls0`, `ls10`, ...: 10% of the switches, 2,000
//! VIFs at 500×40), asked for with NB `options:requested-chassis=hv1`; for ovn-controller they
//! are `br-int` interfaces with `external_ids:iface-id`.
//!
//! Figures (the workload is in the names; every time in ms, lower is better):
//! - `cold_start_NxP`: holdfast: the SB replica's initial sync (our `hf-ovsdb-net` client over
//!   a unix socket, whole SB), then the chassis path once (median of 3): translate
//!   ([`hf_controller::translate_cached`] for `hv1`, `only_needed`), the `ProgramMsg`
//!   (`hf_controller::program_msg`), its `ToDatapath::Program` frame encoded and decoded
//!   (`hf_datapath::proto`), the datapath's `hf_datapath::program::SpecCache::build` (its
//!   `to_spec`) and `SpecCache::compile` ([`hf_pipeline::Program::compile`]). Baseline `ovn-controller`: from starting the daemon
//!   (ovs-vswitchd already up with the interfaces) until its `Chassis_Private.nb_cfg` reaches
//!   `SB_Global.nb_cfg`, which it writes once the OpenFlow flows of that SB are installed in
//!   ovs-vswitchd (full recompute, claims, install).
//! - `port_add_NxP`: one VIF added on `ls0` (with `requested-chassis=hv1`), median of 5,
//!   timed on both sides from the moment the SB server holds the new `Port_Binding` (polled
//!   every ~1 ms over one OVSDB connection; northd's own time is not counted). holdfast: until
//!   our replica holds it (`sb_update`), then the same path with zones kept and both caches
//!   as after the previous program, the datapaths whose flows changed named by the
//!   `SpecCache` (the ones it parsed again), and
//!   [`hf_pipeline::Program::recompile`] reusing every other datapath's tables (checked
//!   against a fresh compile, untimed). Baseline `ovn-controller`: its interface is on `br-int`
//!   beforehand; until `Chassis_Private.nb_cfg` reaches the `nb_cfg` of that change.
//! - `cold_start_NxP_daemons`, `port_add_NxP_daemons`: the holdfast chassis as processes,
//!   measured from the outside exactly as ovn-controller is: `holdfast datapath` (the `holdfast`
//!   binary beside hf-bench) with the local ports (and the ports to be added) as in-memory
//!   ports, started beforehand as ovs-vswitchd is; then `holdfast controller` on the same SB
//!   with conditional monitoring; until its `Chassis_Private.nb_cfg` reaches the target
//!   (written once the datapath answered `Installed`). Baseline `ovn-controller`.
//! - `cold_start_NxP_daemons_until_up`, `port_add_NxP_daemons_until_up`: the same, until the
//!   (a) local port's `Port_Binding.up` is also true (the claim committed to SB): what a CMS
//!   waiting for `up` sees; baseline `ovn-controller` timed the same way. Without the holdfast
//!   binary these ovn-controller figures are `ovn_controller_*_until_up` alone.
//! - `chassis_NxP_peak_rss`: `VmHWM` of holdfast controller + datapath against
//!   `ovn-controller+ovs-vswitchd`; MB.
//! - `cold_start_NxP_split_*`, `port_add_NxP_split_*`: where holdfast's time goes (`sb_sync`
//!   or `sb_update`, `translate`, `to_msg`, `encode`, `decode`, `to_spec`, `compile`).
//! - `port_add_NxP_incremental_translate`, `port_add_NxP_incremental_to_msg` (in process,
//!   median of 3 per add, then of the adds): the same port add through the controller's
//!   incremental path: [`hf_controller::Incremental`] fed the change set between the two
//!   snapshots (made untimed by comparing them), and
//!   `hf_controller::program_msg::program_msg_reusing` reusing the previous message; its
//!   message is checked equal to the full path's (untimed).
//! - `port_delete_NxP_daemons`, `acl_add_pgK_NxP_daemons`, `port_add_100_one_txn_NxP_daemons`,
//!   `port_delete_100_one_txn_NxP_daemons`: after the port adds, on both chassis as processes,
//!   a port delete (median of 5), an ACL added to a port group of K ports, one on every switch
//!   (500 at 500×40; median of 3), and 100 ports of the chassis added, then deleted, in one NB
//!   transaction; each from SB holding northd's result (`SB_Global.nb_cfg`) until the chassis
//!   reports that `nb_cfg` (see `controller/changes.rs`). Baseline `ovn-controller`.
//! - `cold_start_NxP_translate_1_thread`, `cold_start_NxP_translate_N_threads`: the cold
//!   translation alone ([`hf_controller::translate_par`], no cache, median of 3) on one
//!   thread and on every core (the in-process and daemon lines above use every core).
//! - `port_add_NxP_heap_install_peak`, `port_add_NxP_heap_install_kept`: the datapath's side
//!   of the (median) port add in process (the delta applied to the kept message, the spec
//!   build, the compile): the largest stage's peak growth and what the three leave allocated
//!   (the new program shares the old one's tables, so this is what the change costs); MB.
//! - `cold_start_NxP_heap_peak`: the counting allocator's peak growth over one pass of the
//!   chassis path (the SB replica excluded); MB.
//! - `cold_start_NxP_heap_<stage>_peak` and `cold_start_NxP_heap_<stage>_kept` for the stages
//!   `replica_load` (the SB replica's initial sync, tokio client included), `translate`,
//!   `message_build` (`program_msg`), and the datapath's `decode` (the frame decoded into the
//!   kept `ProgramMsg`), `to_spec` (the spec cache's parsed flows) and `compile` (the compiled
//!   program, `SpecCache::compile`): the counting allocator's peak growth during the stage
//!   and what the stage leaves allocated (the replica's rows, the translation, the message);
//!   MB. Where a chassis's memory sits, stage by stage (the largest of the 3 cold passes). `ovn_controller_NxP_peak_rss`: the daemon's
//!   `VmHWM`; MB (different measures, hence no ratio).
//!
//! The sides run one after the other on the same SB (in process, daemons, ovn-controller);
//! between them the chassis's rows are removed and its ports set back to `up=false`.
//!
//! What it does not measure: packet forwarding (`hf-bench pipeline`, `hf-bench sandbox`), and
//! ovn-controller's own `stopwatch/show` figures are printed as a note, not as lines.
//!
//! `HF_BENCH_CONTROLLER_IN_PROCESS=1` stops after the in-process holdfast figures (no daemons,
//! no ovn-controller): for measuring the heap per stage quickly.
//!
//! With `CI=true` a missing OVN/OVS tool fails the suite; otherwise it is skipped with a note.
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hf_datapath::proto::{self, ProgramMsg, ToDatapath};
use hf_model::SbSnapshot;

mod changes;
mod chassis;

use chassis::{HfChassis, Poller, RealChassis, measure_chassis, reset_chassis};

use super::central::{build_topo, gen_topo, ok};
use crate::alloc;
use crate::report::Better;
use crate::{Opts, Report};
use hf_testkit::ovn::{ChassisOpts, VSWITCH_SCHEMA};

/// The measured chassis.
const CHASSIS: &str = "hv1";
/// Port adds measured per side (the median is reported).
const ADDS: usize = 5;

/// The `holdfast` binary: `$HOLDFAST_BIN`, else the one built beside this one.
fn holdfast_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HOLDFAST_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("holdfast");
    p.exists().then_some(p)
}

fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The size: `--tiny` 5×4, `HF_BENCH_CONTROLLER_SIZE=NxP`, else 500×40.
fn size(opts: &Opts) -> anyhow::Result<(usize, usize)> {
    if let Ok(v) = std::env::var("HF_BENCH_CONTROLLER_SIZE") {
        let parsed = v
            .split_once('x')
            .and_then(|(n, p)| Some((n.parse::<usize>().ok()?, p.parse::<usize>().ok()?)));
        return match parsed {
            Some((n, p)) if n > 0 && p > 0 => Ok((n, p)),
            _ => bail!("HF_BENCH_CONTROLLER_SIZE={v:?}: expected NxP, e.g. 300x30"),
        };
    }
    Ok(if opts.tiny { (5, 4) } else { (500, 40) })
}

/// The local ports of `hv1`: every VIF of every tenth switch (gen_topo's names).
fn local_ports(n: usize, p: usize) -> Vec<String> {
    (0..n)
        .step_by(10)
        .flat_map(|i| (0..p).map(move |j| format!("ls{i}-p{j}")))
        .collect()
}

/// The NB/SB `ovsdb-server`s with ovn-northd running on them (it stays up: the port adds
/// need it), holding gen_topo's NB and its SB.
struct Central {
    nb: String,
    sb: String,
    /// northd, then the servers (stopped in this order), and their directory.
    real: hf_testkit::ovn::Central,
}

impl Central {
    fn start(report: &Report, topo: &Path, n: usize, p: usize) -> anyhow::Result<Central> {
        let real = hf_testkit::ovn::Central::start()?;
        build_topo(report, &real, topo, n, p)?;
        Ok(Central {
            nb: real.nb.clone(),
            sb: real.sb.clone(),
            real,
        })
    }

    /// `ovn-nbctl --db=NB --timeout=600 ARGS`, with a `--wait` if given.
    fn nbctl(&self, wait: Option<&str>, args: &[String]) -> anyhow::Result<String> {
        let mut c = Command::new("ovn-nbctl");
        c.arg(format!("--db={}", self.nb)).arg("--timeout=600");
        if let Some(w) = wait {
            c.arg(format!("--wait={w}"));
        }
        ok(c.args(args))
    }

    /// [`Central::nbctl`] without waiting for it.
    fn nbctl_child(
        &self,
        wait: Option<&str>,
        args: &[String],
    ) -> anyhow::Result<std::process::Child> {
        let mut c = Command::new("ovn-nbctl");
        c.arg(format!("--db={}", self.nb)).arg("--timeout=600");
        if let Some(w) = wait {
            c.arg(format!("--wait={w}"));
        }
        c.args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("starting ovn-nbctl")
    }

    fn sbctl(&self, args: &[&str]) -> anyhow::Result<String> {
        ok(Command::new("ovn-sbctl")
            .arg(format!("--db={}", self.sb))
            .arg("--timeout=600")
            .args(args))
    }

    /// The SB's unix socket.
    fn sb_sock(&self) -> PathBuf {
        self.real.path("sb.sock")
    }
}

/// `-- cmd args...` for each command, as one ovn-nbctl/ovs-vsctl argument list.
fn batch(cmds: impl IntoIterator<Item = Vec<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for c in cmds {
        if !out.is_empty() {
            out.push("--".to_string());
        }
        out.extend(c);
    }
    out
}

fn sv(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The `k`th port added by the suite (`side` keeps the sides' ports apart: 0 holdfast in
/// process, 1 ovn-controller, 2 the holdfast daemons): its name and the ovn-nbctl commands
/// that add it on `ls0` for `hv1`.
fn new_port(side: u8, k: usize) -> (String, Vec<String>) {
    let who = match side {
        0 => "hf",
        1 => "ovn",
        _ => "hfd",
    };
    let name = format!("bench-{who}{k}");
    let addr = format!(
        "0a:fe:{side:02x}:00:00:{:02x} 10.1.0.{}",
        k + 1,
        200 + side as usize * 10 + k
    );
    let cmds = batch([
        sv(&["lsp-add", "ls0", &name]),
        sv(&["lsp-set-addresses", &name, &addr]),
        sv(&[
            "lsp-set-options",
            &name,
            &format!("requested-chassis={CHASSIS}"),
        ]),
    ]);
    (name, cmds)
}

/// Runs the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    for tool in [
        "ovsdb-server",
        "ovsdb-tool",
        "ovn-northd",
        "ovn-nbctl",
        "ovn-sbctl",
        "ovs-vsctl",
        "ovs-vswitchd",
        "ovn-controller",
        "ovn-appctl",
        VSWITCH_SCHEMA,
    ] {
        if !hf_testkit::cmd::have_tool(tool) {
            if ci() {
                bail!("{tool} is not installed (needs OVN's and OVS's packages; CI=true)");
            }
            report.note(&format!(
                "skipped: {tool} is not installed (needs OVN's and OVS's packages)"
            ));
            return Ok(());
        }
    }
    let Some(topo) = gen_topo() else {
        if ci() {
            bail!("shared/bench/gen_topo.py not found (CI=true)");
        }
        report.note("skipped: shared/bench/gen_topo.py not found");
        return Ok(());
    };
    let (n, p) = size(opts)?;
    let tag = format!("{n}x{p}");
    let central = Central::start(report, &topo, n, p)?;
    let mine = local_ports(n, p);
    report.note(&format!(
        "{CHASSIS}'s local ports: the {} VIFs of every tenth switch (ls0, ls10, ...)",
        mine.len()
    ));

    // holdfast first, on a Chassis row written by hand (ovn-controller registers its own
    // later); northd then fills Port_Binding.requested_chassis.
    central.sbctl(&["chassis-add", CHASSIS, "geneve", "127.0.0.2"])?;
    central.nbctl(
        Some("sb"),
        &batch(mine.iter().map(|v| {
            sv(&[
                "lsp-set-options",
                v,
                &format!("requested-chassis={CHASSIS}"),
            ])
        })),
    )?;
    let ours = holdfast_side(report, &central, &tag).context("holdfast side")?;
    if std::env::var_os("HF_BENCH_CONTROLLER_IN_PROCESS").is_some() {
        report.note("HF_BENCH_CONTROLLER_IN_PROCESS: the in-process figures alone");
        report.result(&format!("cold_start_{tag}"), ours.cold_ms, "ms");
        report.result(&format!("port_add_{tag}"), ours.port_add_ms, "ms");
        ours.emit_rest(report, &tag);
        return Ok(());
    }
    central.sbctl(&["chassis-del", CHASSIS])?;
    central.nbctl(Some("sb"), &sv(&["sync"]))?;

    // The holdfast daemons, measured from the outside as ovn-controller is.
    let daemons = match holdfast_bin() {
        None => Err(anyhow::anyhow!(
            "no `holdfast` binary beside hf-bench (cargo build --release builds it)"
        )),
        Some(bin) => {
            let mut ports = mine.clone();
            ports.extend((0..ADDS).map(|k| new_port(2, k).0));
            ports.extend(changes::bulk_ports(2, n).into_iter().map(|(nm, _)| nm));
            HfChassis::prepare(&bin, central.real.dir(), &central.sb, &ports).and_then(|mut ch| {
                let r = measure_chassis(
                    report,
                    &central,
                    &mut ch,
                    "holdfast",
                    &mine[0],
                    2,
                    (n, p),
                    Duration::from_secs(300),
                );
                drop(ch);
                reset_chassis(&central)?;
                r
            })
        }
    };
    let daemons = match daemons {
        Ok(d) => Some(d),
        Err(e) if ci() => return Err(e.context(format!("holdfast daemons at {tag} (CI=true)"))),
        Err(e) => {
            report.note(&format!("holdfast daemons skipped at {tag}: {e:#}"));
            None
        }
    };

    let theirs = RealChassis::prepare(
        central.real.dir(),
        &ChassisOpts {
            name: CHASSIS,
            sb: &central.sb,
            encap_ip: "127.0.0.2",
            vifs: &mine,
        },
    )
    .map_err(anyhow::Error::from)
    .and_then(|mut ch| {
        measure_chassis(
            report,
            &central,
            &mut ch,
            "ovn-controller",
            &mine[0],
            1,
            (n, p),
            Duration::from_secs(1200),
        )
    });
    let b = Better::Lower;
    match theirs {
        Ok(t) => {
            let base = "ovn-controller";
            report.compare(
                &format!("cold_start_{tag}"),
                ours.cold_ms,
                "ms",
                b,
                base,
                t.cold_ms,
            );
            report.compare(
                &format!("port_add_{tag}"),
                ours.port_add_ms,
                "ms",
                b,
                base,
                t.port_add_ms,
            );
            if let Some(d) = &daemons {
                let lines = [
                    ("cold_start", d.cold_ms, t.cold_ms),
                    ("port_add", d.port_add_ms, t.port_add_ms),
                    ("cold_start_until_up", d.cold_up_ms, t.cold_up_ms),
                    ("port_add_until_up", d.port_add_up_ms, t.port_add_up_ms),
                ];
                for (what, ours, theirs) in lines {
                    let name = match what.split_once("_until_up") {
                        Some((w, _)) => format!("{w}_{tag}_daemons_until_up"),
                        None => format!("{what}_{tag}_daemons"),
                    };
                    report.compare(&name, ours, "ms", b, base, theirs);
                }
                let pg = changes::pg_members(n, p).len();
                for ((what, ours), (_, theirs)) in
                    d.changes.lines(pg).into_iter().zip(t.changes.lines(pg))
                {
                    report.compare(
                        &format!("{what}_{tag}_daemons"),
                        ours,
                        "ms",
                        b,
                        base,
                        theirs,
                    );
                }
                report.compare(
                    &format!("chassis_{tag}_peak_rss"),
                    d.chassis_rss_mb,
                    "MB",
                    b,
                    "ovn-controller+ovs-vswitchd",
                    t.chassis_rss_mb,
                );
            } else {
                report.result(
                    &format!("ovn_controller_cold_start_{tag}_until_up"),
                    t.cold_up_ms,
                    "ms",
                );
                report.result(
                    &format!("ovn_controller_port_add_{tag}_until_up"),
                    t.port_add_up_ms,
                    "ms",
                );
                let pg = changes::pg_members(n, p).len();
                for (what, v) in t.changes.lines(pg) {
                    report.result(&format!("ovn_controller_{what}_{tag}"), v, "ms");
                }
            }
            ours.emit_rest(report, &tag);
            report.result(&format!("ovn_controller_{tag}_peak_rss"), t.rss_mb, "MB");
        }
        Err(e) if ci() => return Err(e.context(format!("ovn-controller side at {tag} (CI=true)"))),
        Err(e) => {
            report.note(&format!(
                "ovn-controller baseline skipped at {tag}: {e:#}; holdfast's figures alone"
            ));
            report.result(&format!("cold_start_{tag}"), ours.cold_ms, "ms");
            report.result(&format!("port_add_{tag}"), ours.port_add_ms, "ms");
            if let Some(d) = &daemons {
                report.result(&format!("cold_start_{tag}_daemons"), d.cold_ms, "ms");
                report.result(&format!("port_add_{tag}_daemons"), d.port_add_ms, "ms");
                report.result(&format!("chassis_{tag}_peak_rss"), d.chassis_rss_mb, "MB");
                let pg = changes::pg_members(n, p).len();
                for (what, v) in d.changes.lines(pg) {
                    report.result(&format!("{what}_{tag}_daemons"), v, "ms");
                }
            }
            ours.emit_rest(report, &tag);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// holdfast

/// Where holdfast's time goes (ms), in pipeline order; absent steps are `None`.
#[derive(Debug, Default, Clone)]
struct Split {
    sb_sync: Option<f64>,
    /// A port add: from the SB server holding the row to the replica holding it.
    sb_update: Option<f64>,
    /// `hf_controller::translate_cached` (the controller's cache as after the previous
    /// program; empty for a cold start).
    translate: f64,
    /// `hf_controller::program_msg::program_msg`: the translation as a `ProgramMsg`.
    to_msg: f64,
    /// `proto::encode` of `ToDatapath::Program`; for a change: `proto::between` (the delta
    /// against the running program) and `proto::encode` of `ToDatapath::ProgramDelta`.
    encode: f64,
    /// `proto::Decoder` in the datapath; for a change, and `proto::apply_undoable` to the
    /// datapath's kept program.
    decode: f64,
    /// `hf_datapath::program::SpecCache::build` (`to_spec` reusing the previous program's
    /// parsed datapaths).
    to_spec: f64,
    /// `Program::compile`, or for a change: finding the datapaths whose flows changed and
    /// `Program::recompile`.
    compile: f64,
    /// Heap per stage: `translate`, the message build (`to_msg`), the datapath's `decode`
    /// (the frame decoded into its kept `ProgramMsg`), `to_spec` (the spec cache's parsed
    /// flows) and `compile` (the compiled program).
    heap: [Heap; 5],
    /// A cold start's heap by holder (a note).
    breakdown: Option<String>,
}

impl Split {
    fn total(&self) -> f64 {
        self.steps().iter().map(|(_, v)| v).sum()
    }

    fn steps(&self) -> Vec<(&'static str, f64)> {
        let mut v = Vec::new();
        if let Some(s) = self.sb_sync {
            v.push(("sb_sync", s));
        }
        if let Some(s) = self.sb_update {
            v.push(("sb_update", s));
        }
        v.extend([
            ("translate", self.translate),
            ("to_msg", self.to_msg),
            ("encode", self.encode),
            ("decode", self.decode),
            ("to_spec", self.to_spec),
            ("compile", self.compile),
        ]);
        v
    }
}

/// Heap per stage (bytes): peak growth during it, and growth it leaves behind.
#[derive(Debug, Default, Clone, Copy)]
struct Heap {
    peak: usize,
    kept: usize,
}

impl Heap {
    /// Measures `f` (an enclosing measurement's peak is kept).
    fn of<R>(f: impl FnOnce() -> R) -> (R, Heap) {
        let outer = alloc::peak();
        let base = alloc::reset_peak();
        let r = f();
        let peak = alloc::peak();
        alloc::raise_peak(outer);
        let h = Heap {
            peak: peak.saturating_sub(base),
            kept: alloc::live_bytes().saturating_sub(base),
        };
        (r, h)
    }

    fn max(self, o: Heap) -> Heap {
        Heap {
            peak: self.peak.max(o.peak),
            kept: self.kept.max(o.kept),
        }
    }
}

/// holdfast's figures.
struct Ours {
    /// The port add through the incremental path: (translate, to_msg), ms.
    incremental: (f64, f64),
    cold_ms: f64,
    cold: Split,
    port_add_ms: f64,
    port_add: Split,
    heap_mb: f64,
    /// `replica_load`, `translate`, `message_build`, `decode`, `to_spec`, `compile`.
    stages: [(&'static str, Heap); 6],
    /// The cold translation (`translate_par`, no cache) on 1 thread and on [`threads`]: ms.
    translate_threads: (f64, f64),
}

impl Ours {
    fn emit_rest(&self, report: &mut Report, tag: &str) {
        for (step, v) in self.cold.steps() {
            report.result(&format!("cold_start_{tag}_split_{step}"), v, "ms");
        }
        for (step, v) in self.port_add.steps() {
            report.result(&format!("port_add_{tag}_split_{step}"), v, "ms");
        }
        report.result(
            &format!("port_add_{tag}_incremental_translate"),
            self.incremental.0,
            "ms",
        );
        report.result(
            &format!("port_add_{tag}_incremental_to_msg"),
            self.incremental.1,
            "ms",
        );
        report.result(&format!("cold_start_{tag}_heap_peak"), self.heap_mb, "MB");
        // The datapath's install of the port add: the delta applied to the kept message
        // (`decode`), the spec build and the compile; the largest stage peak and what the
        // three leave allocated.
        let install = &self.port_add.heap[2..];
        report.result(
            &format!("port_add_{tag}_heap_install_peak"),
            install.iter().map(|h| h.peak).max().unwrap_or(0) as f64 / 1e6,
            "MB",
        );
        report.result(
            &format!("port_add_{tag}_heap_install_kept"),
            install.iter().map(|h| h.kept).sum::<usize>() as f64 / 1e6,
            "MB",
        );
        for (stage, h) in self.stages {
            let mb = |b: usize| b as f64 / 1e6;
            report.result(
                &format!("cold_start_{tag}_heap_{stage}_peak"),
                mb(h.peak),
                "MB",
            );
            report.result(
                &format!("cold_start_{tag}_heap_{stage}_kept"),
                mb(h.kept),
                "MB",
            );
        }
        let (one, many) = self.translate_threads;
        report.result(&format!("cold_start_{tag}_translate_1_thread"), one, "ms");
        report.result(
            &format!("cold_start_{tag}_translate_{}_threads", threads().get()),
            many,
            "ms",
        );
    }
}

/// What the datapath has installed, and the controller's zones.
struct Installed {
    generation: u64,
    zones: BTreeMap<String, u16>,
    /// The program message as the datapath decoded it.
    msg: ProgramMsg,
    /// The datapath's local port ids.
    local: BTreeMap<String, u32>,
    program: hf_pipeline::Program,
    /// Bytes of the `ToDatapath::Program` frame.
    frame_bytes: usize,
    /// The controller's translation cache after this program (`translate_cached`).
    tr_cache: hf_controller::TranslateCache,
    /// The datapath's parsed flows of this program (`hf_datapath::program::SpecCache`).
    spec_cache: hf_datapath::program::SpecCache,
}

/// SB → the program installed in the datapath for `hv1`, the way a chassis does it:
/// translate (only the datapaths it needs), the program message, its frame encoded and decoded
/// again, the datapath's `to_spec` and compile. With `prev`, zones are kept and the datapaths
/// whose flows did not change keep their compiled tables, as a running chassis does.
fn install(sb: &SbSnapshot, prev: Option<&Installed>) -> anyhow::Result<(Installed, Split)> {
    let mut split = Split::default();
    let generation = prev.map_or(1, |p| p.generation + 1);
    let nb_cfg = sb.sb_global().values().map(|g| g.nb_cfg).max().unwrap_or(0);

    // The caches as they were after `prev` (cloned untimed, so every try starts alike).
    let mut tr_cache = prev.map(|p| p.tr_cache.clone()).unwrap_or_default();
    tr_cache.set_parallelism(threads());
    // The daemon's form: the datapath parses the text it is sent.
    tr_cache.set_flow_form(hf_controller::translate::flows::FlowForm::Text);
    // A cold start compiles on every core, as `holdfast datapath` does by default.
    let mut spec_cache = prev.map(|p| p.spec_cache.clone()).unwrap_or_else(|| {
        hf_datapath::program::SpecCache::with_options(hf_pipeline::CompileOptions {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            ..hf_pipeline::CompileOptions::default()
        })
    });
    let t = Instant::now();
    let opts = hf_controller::TranslateOptions {
        chassis: Some(CHASSIS.into()),
    };
    let extra = hf_controller::Extra {
        only_needed: true,
        zones: prev.map(|p| p.zones.clone()).unwrap_or_default(),
        local_ids: Default::default(),
        ha_up: None,
    };
    let (tr, heap_tr) =
        Heap::of(|| hf_controller::translate_cached(sb, &opts, &extra, &mut tr_cache));
    split.translate = ms(t.elapsed());

    let t = Instant::now();
    let (build, heap_msg) = Heap::of(|| {
        hf_controller::program_msg::program_msg(
            &tr,
            CHASSIS,
            generation,
            nb_cfg,
            &BTreeMap::new(),
            &hf_controller::program_msg::NoLastGood,
        )
    });
    split.heap[0] = heap_tr;
    split.heap[1] = heap_msg;
    if prev.is_none() {
        // Where the translation's heap is (a clone's growth; shared `Arc`s count once).
        let size = |f: &dyn Fn() -> Box<dyn std::any::Any>| {
            let base = alloc::live_bytes();
            let c = f();
            let n = alloc::live_bytes().saturating_sub(base);
            drop(c);
            n as f64 / 1e6
        };
        let flows = size(&|| {
            Box::new(
                tr.spec
                    .datapaths
                    .iter()
                    .map(|d| d.flows.clone())
                    .collect::<Vec<_>>(),
            )
        });
        let whole = size(&|| Box::new(tr.clone()));
        let cache = size(&|| Box::new(tr_cache.clone()));
        let msg = size(&|| Box::new(build.msg.clone()));
        split.breakdown = Some(format!(
            "translation {whole:.1} MB (its flows {flows:.1} MB), translate cache {cache:.1} MB, \
             message {msg:.1} MB (clones; shared texts count once)"
        ));
    }
    // The translation goes back to the cache (its datapaths' flows are reused whole next
    // time); counted in `to_msg`.
    let (local, zones) = (tr.local_ports.clone(), tr.zones.clone());
    tr_cache.recycle(tr);
    split.to_msg = ms(t.elapsed());
    if !build.skipped.is_empty() {
        bail!(
            "{} flows could not be described in the program message (first: {:?})",
            build.skipped.len(),
            build.skipped[0]
        );
    }

    // A change travels as a delta against the running program (protocol version 4), applied
    // to the datapath's kept copy (cloned untimed, as the caches are).
    let mut kept = prev.map(|p| p.msg.clone());
    let mut new_msg = Some(build.msg);
    let t = Instant::now();
    let frame = match (&kept, &mut new_msg) {
        (Some(old), Some(new)) => proto::encode(&ToDatapath::ProgramDelta(Box::new(
            proto::between(old, new, None),
        ))),
        (_, new) => proto::encode(&ToDatapath::Program(Box::new(
            new.take().unwrap_or_default(),
        ))),
    }
    .map_err(|e| anyhow::anyhow!("encoding the program: {e}"))?;
    split.encode = ms(t.elapsed());

    let t = Instant::now();
    let (decoded, heap_decode) = Heap::of(|| {
        let mut dec = proto::Decoder::<ToDatapath>::new();
        dec.push(&frame);
        match (dec.next_msg(), kept.take()) {
            (Ok(Some(ToDatapath::Program(m))), None) => Ok((*m, None)),
            (Ok(Some(ToDatapath::ProgramDelta(d))), Some(mut old)) => {
                let a = proto::apply_undoable(&mut old, &d)
                    .map_err(|e| anyhow::anyhow!("the datapath refused the delta: {e}"))?;
                Ok((old, Some(a)))
            }
            (other, _) => bail!("decoding the program frame gave {other:?}"),
        }
    });
    let (msg, delta_changed) = decoded?;
    split.heap[2] = heap_decode;
    split.decode = ms(t.elapsed());
    // Untimed: the delta applied gives exactly the whole program.
    if let Some(whole) = &new_msg
        && *whole != msg
    {
        bail!("the program delta applied differs from the whole program");
    }
    drop(new_msg);

    let t = Instant::now();
    let (built, heap_spec) = Heap::of(|| match &delta_changed {
        Some(a) => {
            let may_differ: std::collections::BTreeSet<String> =
                a.changed.iter().cloned().collect();
            let sets: std::collections::BTreeSet<String> =
                a.undo.touched_address_sets().map(str::to_string).collect();
            let groups: std::collections::BTreeSet<String> =
                a.undo.touched_port_groups().map(str::to_string).collect();
            spec_cache.build_knowing(
                &msg,
                &local,
                hf_datapath::program::Knowing {
                    datapaths: &may_differ,
                    address_sets: &sets,
                    port_groups: &groups,
                },
            )
        }
        None => spec_cache.build(&msg, &local),
    });
    let built = built.map_err(|e| anyhow::anyhow!("the datapath refused the program: {e}"))?;
    split.heap[3] = heap_spec;
    split.to_spec = ms(t.elapsed());

    let t = Instant::now();
    // The delta names the datapaths that changed; without it the cache does, or a diff.
    let changed = match (&delta_changed, prev, built.changed().is_some()) {
        (Some(a), _, _) => a.changed.clone(),
        (None, Some(p), false) => changed_datapaths(&p.msg, &msg),
        _ => Vec::new(),
    };
    let refs: Vec<&str> = changed.iter().map(String::as_str).collect();
    let (compiled, heap_compile) =
        Heap::of(|| spec_cache.compile(&msg, built, prev.map(|p| &p.program), &refs));
    let (program, _errors) =
        compiled.map_err(|e| anyhow::anyhow!("the program for {CHASSIS} does not compile: {e}"))?;
    split.heap[4] = heap_compile;
    split.compile = ms(t.elapsed());
    Ok((
        Installed {
            generation,
            zones,
            msg,
            local,
            program,
            frame_bytes: frame.len(),
            tr_cache,
            spec_cache,
        },
        split,
    ))
}

/// The threads a chassis translates on (the controller daemon's default: every core).
fn threads() -> hf_controller::Parallelism {
    hf_controller::Parallelism::threads(
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
    )
}

/// What the controller translates for.
fn hv1_opts() -> hf_controller::TranslateOptions {
    hf_controller::TranslateOptions {
        chassis: Some(CHASSIS.into()),
    }
}

/// The change set from `old` to `new` of the tables the translation reads (what the replica's
/// `Event::Changes` would carry).
fn sb_delta(old: &SbSnapshot, new: &SbSnapshot) -> hf_model::sb::Delta {
    fn rows<K: Ord, T: Clone + PartialEq>(
        a: &BTreeMap<K, T>,
        b: &BTreeMap<K, T>,
    ) -> Vec<hf_model::RowDelta<T>> {
        let mut out = Vec::new();
        for (u, x) in a {
            match b.get(u) {
                None => out.push(hf_model::RowDelta::Delete(x.clone())),
                Some(y) if y != x => out.push(hf_model::RowDelta::Update {
                    old: x.clone(),
                    new: y.clone(),
                }),
                Some(_) => {}
            }
        }
        for (u, y) in b {
            if !a.contains_key(u) {
                out.push(hf_model::RowDelta::Insert(y.clone()));
            }
        }
        out
    }
    hf_model::sb::Delta {
        address_set: rows(old.address_set(), new.address_set()),
        chassis: rows(old.chassis(), new.chassis()),
        chassis_template_var: rows(old.chassis_template_var(), new.chassis_template_var()),
        datapath_binding: rows(old.datapath_binding(), new.datapath_binding()),
        dns: rows(old.dns(), new.dns()),
        encap: rows(old.encap(), new.encap()),
        fdb: rows(old.fdb(), new.fdb()),
        gateway_chassis: rows(old.gateway_chassis(), new.gateway_chassis()),
        ha_chassis: rows(old.ha_chassis(), new.ha_chassis()),
        ha_chassis_group: rows(old.ha_chassis_group(), new.ha_chassis_group()),
        load_balancer: rows(old.load_balancer(), new.load_balancer()),
        logical_dp_group: rows(old.logical_dp_group(), new.logical_dp_group()),
        logical_flow: rows(old.logical_flow(), new.logical_flow()),
        mac_binding: rows(old.mac_binding(), new.mac_binding()),
        multicast_group: rows(old.multicast_group(), new.multicast_group()),
        port_binding: rows(old.port_binding(), new.port_binding()),
        port_group: rows(old.port_group(), new.port_group()),
        static_mac_binding: rows(old.static_mac_binding(), new.static_mac_binding()),
        ..Default::default()
    }
}

/// The datapaths of `new` whose flows differ from the same-named datapath of `old` (or that
/// are new): what the datapath, holding its previous program message, hands to `recompile`.
fn changed_datapaths(old: &ProgramMsg, new: &ProgramMsg) -> Vec<String> {
    let before: HashMap<&str, &hf_datapath::proto::DatapathMsg> = old
        .datapaths
        .iter()
        .map(|d| (d.name.as_str(), &**d))
        .collect();
    new.datapaths
        .iter()
        .filter(|d| {
            before
                .get(d.name.as_str())
                .is_none_or(|o| o.flows != d.flows)
        })
        .map(|d| d.name.clone())
        .collect()
}

/// What the replica's event task watches for: the first moment it holds `port`'s binding.
#[derive(Debug, Default)]
struct Watch {
    port: Option<String>,
    seen: Option<Instant>,
}

fn lock(w: &Mutex<Watch>) -> std::sync::MutexGuard<'_, Watch> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

/// `port` is in the replica, with the requested chassis northd resolves.
fn has_port(m: &SbSnapshot, port: &str) -> bool {
    m.port_binding()
        .values()
        .any(|pb| pb.logical_port == port && pb.requested_chassis.is_some())
}

fn holdfast_side(report: &Report, central: &Central, tag: &str) -> anyhow::Result<Ours> {
    use hf_ovsdb_net::client::{Client, Config};
    // One worker: the replica keeps up with the server while this thread polls it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let sb = format!("unix:{}", central.sb_sock().display());
    let t = Instant::now();
    let heap_base = alloc::reset_peak();
    let (client, mut events) = {
        let _g = rt.enter();
        Client::<SbSnapshot>::spawn(
            vec![sb],
            Config {
                leader_only: false,
                ..Config::default()
            },
        )
    };
    let client = Arc::new(client);
    let synced = rt.block_on(client.wait_until(Duration::from_secs(600), |r| r.is_synced()));
    if !synced {
        bail!("the SB replica never synced");
    }
    let sync_ms = ms(t.elapsed());
    let heap_replica = Heap {
        peak: alloc::peak().saturating_sub(heap_base),
        kept: alloc::live_bytes().saturating_sub(heap_base),
    };
    let (wait, receive, bytes, rows) = client.with(|r| {
        let s = r.stats();
        (
            s.last_sync_wait_ms,
            s.last_sync_receive_ms,
            s.bytes_received,
            s.rows_received,
        )
    });
    report.note(&format!(
        "SB sync {sync_ms:.0} ms: {wait} ms from the monitor request to the reply's first \
         bytes (the server), {receive} ms receiving and loading it; {:.1} MB, {rows} rows",
        bytes as f64 / 1e6
    ));
    let watch = Arc::new(Mutex::new(Watch::default()));
    {
        let (client, watch) = (client.clone(), watch.clone());
        rt.spawn(async move {
            while events.recv().await.is_some() {
                let now = Instant::now();
                let port = {
                    let w = lock(&watch);
                    if w.seen.is_some() {
                        continue;
                    }
                    w.port.clone()
                };
                if let Some(p) = port
                    && client.with(|r| has_port(r.model(), &p))
                {
                    lock(&watch).seen = Some(now);
                }
            }
        });
    }
    let snap = client.with(|r| r.model().clone());
    report.note(&format!(
        "SB: {} logical flows, {} port bindings, {} datapaths",
        snap.logical_flow().len(),
        snap.port_binding().len(),
        snap.datapath_binding().len()
    ));

    // Cold start: median of 3 computations on the synced replica (the sync counted once).
    let mut colds = Vec::new();
    let mut heap = 0usize;
    let mut heaps = [Heap::default(); 5];
    let mut installed = None;
    for _ in 0..3 {
        drop(installed.take());
        let base = alloc::reset_peak();
        let (inst, split) = install(&snap, None)?;
        heap = heap.max(alloc::peak().saturating_sub(base));
        for (h, s) in heaps.iter_mut().zip(split.heap) {
            *h = h.max(s);
        }
        colds.push(split);
        installed = Some(inst);
    }
    if let Some(b) = colds.iter().find_map(|c| c.breakdown.clone()) {
        report.note(&format!("cold start heap: {b}"));
    }
    colds.sort_by(|a, b| a.total().total_cmp(&b.total()));
    let mut cold = colds[colds.len() / 2].clone();
    cold.sb_sync = Some(sync_ms);
    let mut current = installed.context("no program")?;
    // The cold translation alone, sequential and on every core (median of 3 each).
    let mut translate_threads = (0.0, 0.0);
    for (par, out) in [
        (
            hf_controller::Parallelism::SEQUENTIAL,
            &mut translate_threads.0,
        ),
        (threads(), &mut translate_threads.1),
    ] {
        let extra = hf_controller::Extra {
            only_needed: true,
            zones: BTreeMap::new(),
            local_ids: Default::default(),
            ha_up: None,
        };
        let mut v = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            drop(hf_controller::translate_par(
                &snap,
                &hv1_opts(),
                &extra,
                par,
            ));
            v.push(ms(t.elapsed()));
        }
        *out = median(v);
    }
    report.note(&format!(
        "holdfast {tag}: {} compiled flows in {} datapaths, {} flow errors; the program frame is {:.1} MB",
        current.program.flow_count(),
        current.msg.datapaths.len(),
        current.program.flow_errors().count(),
        current.frame_bytes as f64 / 1e6
    ));
    // The incremental translator as after the cold start (untimed).
    let mut inc = hf_controller::Incremental::new();
    inc.set_parallelism(threads());
    inc.set_flow_form(hf_controller::translate::flows::FlowForm::Text);
    let tr = inc.translate(
        &snap,
        &hv1_opts(),
        &hf_controller::Extra {
            only_needed: true,
            zones: BTreeMap::new(),
            local_ids: Default::default(),
            ha_up: None,
        },
    );
    inc.recycle(tr);
    let mut inc_snap = snap;
    let mut inc_times = Vec::new();

    // Port adds: from the SB server holding the port (polled) to the new program: the update
    // reaching the replica, then the computation on it.
    let mut poll = Poller::connect(&central.sb_sock())?;
    let mut adds = Vec::new();
    for k in 0..ADDS {
        let (name, cmds) = new_port(0, k);
        *lock(&watch) = Watch {
            port: Some(name.clone()),
            seen: None,
        };
        let mut child = central.nbctl_child(Some("sb"), &cmds)?;
        let mut at_server = None;
        let mut exited = false;
        let deadline = Instant::now() + Duration::from_secs(600);
        let seen = loop {
            if at_server.is_none() && poll.state(&name)?.exists {
                at_server = Some(Instant::now());
            }
            if !exited && child.try_wait()?.is_some() {
                exited = true;
            }
            let seen = lock(&watch).seen;
            if let (true, Some(_), Some(seen)) = (exited, at_server, seen) {
                break seen;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("{name}: the SB server or the replica never had it");
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        finish_child(child, &name)?;
        let at_server = at_server.context("at server")?;
        let snap = client.with(|r| r.model().clone());
        // Median of 3 computations from the same running program (the machine is shared).
        let mut tries = Vec::new();
        let mut next = None;
        for _ in 0..3 {
            drop(next.take());
            let (n, sp) = install(&snap, Some(&current))?;
            tries.push(sp);
            next = Some(n);
        }
        tries.sort_by(|a, b| a.total().total_cmp(&b.total()));
        let mut split = tries[1].clone();
        let next = next.context("no program")?;
        // The incremental path on the same change (median of 3), checked against the full one.
        let delta = sb_delta(&inc_snap, &snap);
        let mut itries = Vec::new();
        let mut inc_next = None;
        for _ in 0..3 {
            let mut i = inc.clone();
            i.changed(&delta);
            let prev_msg = current.msg.clone();
            let extra = hf_controller::Extra {
                only_needed: true,
                zones: current.zones.clone(),
                // Kept from the last translation, as the daemon does.
                local_ids: i.local_ids().cloned().unwrap_or_default(),
                ha_up: None,
            };
            let t = Instant::now();
            let tr = i.translate(&snap, &hv1_opts(), &extra);
            let translate = ms(t.elapsed());
            let t = Instant::now();
            let b = hf_controller::program_msg::program_msg_reusing(
                &tr,
                CHASSIS,
                next.generation,
                next.msg.nb_cfg,
                &BTreeMap::new(),
                &hf_controller::program_msg::NoLastGood,
                prev_msg,
            );
            let to_msg = ms(t.elapsed());
            if b.msg != next.msg {
                bail!("{name}: the incremental path's program message differs from the full one");
            }
            if k == 0 && itries.is_empty() {
                let st = i.stats();
                let touched = tr.touched.as_ref().map(|t| (t.datapaths.len(), t.rest));
                report.note(&format!(
                    "holdfast {tag}: the first port add's change set: {} rows ({} \
                     Logical_Flow, {} Port_Binding, {} Logical_DP_Group, {} Multicast_Group); \
                     incremental: {st:?}, touched (datapaths, rest) {touched:?} of {} \
                     datapaths, renumbered {}",
                    delta.len(),
                    delta.logical_flow.len(),
                    delta.port_binding.len(),
                    delta.logical_dp_group.len(),
                    delta.multicast_group.len(),
                    tr.spec.datapaths.len(),
                    tr.renumbered.len()
                ));
            }
            i.recycle(tr);
            itries.push((translate, to_msg));
            inc_next = Some(i);
        }
        itries.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
        inc_times.push(itries[1]);
        inc = inc_next.context("no translator")?;
        inc_snap = snap;
        split.sb_update = Some(ms(seen.saturating_duration_since(at_server)));
        if k == 0 {
            check_port_add(report, &current, &next)?;
            report.note(&format!(
                "holdfast {tag}: a port add's program delta frame is {} bytes (the whole program's {})",
                next.frame_bytes, current.frame_bytes
            ));
        }
        adds.push(split);
        current = next;
    }
    adds.sort_by(|a, b| a.total().total_cmp(&b.total()));
    let port_add = adds[adds.len() / 2].clone();
    inc_times.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
    let incremental = inc_times[inc_times.len() / 2];
    drop(client);
    drop(rt);
    Ok(Ours {
        incremental,
        cold_ms: cold.total(),
        cold,
        port_add_ms: port_add.total(),
        port_add,
        heap_mb: heap as f64 / 1e6,
        stages: [
            ("replica_load", heap_replica),
            ("translate", heaps[0]),
            ("message_build", heaps[1]),
            ("decode", heaps[2]),
            ("to_spec", heaps[3]),
            ("compile", heaps[4]),
        ],
        translate_threads,
    })
}

/// After the first port add (not timed): the recompiled program must compile the same flows
/// as compiling the new program afresh; and whether `hf_datapath::program::compile` (what
/// `Datapath::install` runs) gets there too.
fn check_port_add(report: &Report, prev: &Installed, next: &Installed) -> anyhow::Result<()> {
    let (spec, _) = hf_datapath::program::to_spec(&next.msg, &next.local)
        .map_err(|e| anyhow::anyhow!("to_spec: {e}"))?;
    let (fresh, _) =
        hf_pipeline::Program::compile(&spec).map_err(|e| anyhow::anyhow!("fresh compile: {e}"))?;
    if fresh.flow_count() != next.program.flow_count() {
        bail!(
            "recompile after the port add has {} flows, a fresh compile {}",
            next.program.flow_count(),
            fresh.flow_count()
        );
    }
    report.note(&format!(
        "port add: recompile reused {} of {} datapaths' tables ({} flows, as a fresh compile)",
        next.program.shared_datapaths(&prev.program),
        next.msg.datapaths.len(),
        fresh.flow_count()
    ));
    // What `Datapath::install` runs: the spec cache of the previous program.
    let mut cache = prev.spec_cache.clone();
    let (dp_way, _) = hf_datapath::program::compile_cached(
        &next.msg,
        &next.local,
        Some(&prev.program),
        &mut cache,
        &[],
    )
    .map_err(|e| anyhow::anyhow!("hf_datapath::program::compile_cached: {e}"))?;
    if dp_way.flow_count() != fresh.flow_count() {
        bail!(
            "hf_datapath::program::compile_cached with the previous program (Datapath::install) \
             has {} flows after the port add, a fresh compile {}",
            dp_way.flow_count(),
            fresh.flow_count()
        );
    }
    Ok(())
}

/// Waits for an `ovn-nbctl` started by [`Central::nbctl_child`]; an error with its stderr if it
/// failed.
fn finish_child(child: std::process::Child, what: &str) -> anyhow::Result<()> {
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "ovn-nbctl for {what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
