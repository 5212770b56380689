//! `datapath-veth`: VM-to-VM throughput on the real kernel (root), holdfast side by side with
//! what else can join two namespaces on this machine.
//!
//! # Topologies
//!
//! Each is its own hf-testkit lab ([`topo`]); all are built first, then measured in turn (so a
//! change of the machine's load during the run touches them alike), then removed:
//! - `direct-veth`: two namespaces on one veth pair (the limit);
//! - `linux-bridge`: a Linux bridge in a switch namespace, a veth pair to each VM;
//! - `ovs-netdev`: real `ovs-vswitchd` with `datapath_type=netdev` (its userspace datapath) and
//!   its own `ovsdb-server` in the switch namespace, the bridge's NORMAL flow,
//!   `userspace-tso-enable=true` (see [`topo::ovs_netdev`]);
//! - `holdfast-one-chassis` and `holdfast-across-chassis`: the `holdfast` binary built beside
//!   this one (or `$HOLDFAST_BIN`): central `holdfast db` + `northd`, two chassis with
//!   `holdfast datapath` + `controller` on their local databases, VMs plugged with `ovs-vsctl
//!   add-port`; vm1 → vm2 on one chassis, vm1 → vm3 through Geneve over an underlay veth.
//!
//! Every VM's MTU is 1500 (the holdfast underlay's is 1600, room for Geneve).
//!
//! # Workloads
//!
//! Per topology, with iperf3 between the two VMs (client → server); each figure is the
//! median of its runs (the runs' values are noted on stderr):
//! - `tcp_1stream_offloads_on`: one TCP stream, every veth end's offloads as the kernel makes
//!   them (checksums, SG, TSO, GSO on; GRO off); the receiver's Gbit/s, the sender's
//!   retransmits;
//! - `tcp_1stream_offloads_off`: the same with checksum, SG, TSO, GSO and GRO off on every veth
//!   end the traffic crosses (`ethtool -K`);
//! - `udp_60B`: UDP with 60-byte payloads as fast as the sender goes (`-u -l 60 -b 0`),
//!   offloads off; the packets per second the receiver got, and the loss.
//!
//! The holdfast lines carry two baselines each (`direct-veth` and `ovs-netdev`: one line per
//! baseline, ratio above 1 = holdfast ahead). Sender, receiver and forwarders share the
//! machine's cores: the figures are for this machine, side by side in one run.
//!
//! # Knobs
//!
//! - `--tiny`: one run of 1 s (CI keeps the suite working; the figures mean nothing).
//! - `HF_BENCH_DATAPATH_SECONDS=N`: N seconds per run (default 5; TCP also omits its first
//!   second, slow start, from the figure); `HF_BENCH_DATAPATH_RUNS=N`: runs (default 3).
//! - `HF_BENCH_PERF_DIR=DIR`: `perf record -g` of the holdfast datapaths during the first run
//!   of each holdfast measurement, into `DIR/<topology>-<workload>.data` (`perf report -i`).
//!
//! Without root it prints one `SKIP:` line and reports nothing (under `CI=true` it fails).
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

mod topo;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use hf_testkit::{Iperf3Opts, KitError};

use crate::report::Better;
use crate::{Opts, Report};
use topo::{Pair, Topo};

/// The tools every topology needs; OVS's are checked for `ovs-netdev` alone.
const TOOLS: &[&str] = &["ip", "ethtool", "iperf3", "ping"];
const OVS_TOOLS: &[&str] = &["ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl"];
const HOLDFAST_TOOLS: &[&str] = &["ovs-vsctl", "ovn-nbctl"];
/// The baselines the holdfast lines are compared with.
const BASELINES: &[&str] = &["direct-veth", "ovs-netdev"];
/// iperf3's port on every server.
const PORT: u16 = 5201;
/// Seconds per run unless `--tiny` or `HF_BENCH_DATAPATH_SECONDS` says otherwise.
const DEFAULT_SECONDS: u64 = 5;
/// Runs per (topology, workload) unless `--tiny` or `HF_BENCH_DATAPATH_RUNS` says otherwise.
const DEFAULT_RUNS: u64 = 3;
/// The UDP payload of `udp_60B`.
const UDP_PAYLOAD: u32 = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    TcpOffloadsOn,
    TcpOffloadsOff,
    Udp60,
}

/// In the order they run (offloads are switched once, on to off).
const WORKLOADS: [Workload; 3] = [
    Workload::TcpOffloadsOn,
    Workload::TcpOffloadsOff,
    Workload::Udp60,
];

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::TcpOffloadsOn => "tcp_1stream_offloads_on",
            Workload::TcpOffloadsOff => "tcp_1stream_offloads_off",
            Workload::Udp60 => "udp_60B",
        }
    }

    fn offloads(self) -> bool {
        self == Workload::TcpOffloadsOn
    }

    fn tcp(self) -> bool {
        self != Workload::Udp60
    }

    fn unit(self) -> &'static str {
        if self.tcp() { "Gbit/s" } else { "pps" }
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy)]
struct Figure {
    /// Gbit/s (TCP) or packets/s (UDP), at the receiver.
    value: f64,
    /// TCP: the sender's retransmitted segments.
    retransmits: Option<u64>,
    /// UDP: datagrams lost, in percent of those sent.
    loss_percent: Option<f64>,
}

/// Every run of every (topology, workload), in the order they ran.
type Samples = BTreeMap<(&'static str, Workload), Vec<Figure>>;

/// Builds a baseline topology.
type Build = fn() -> anyhow::Result<Topo>;

/// How long and how often each (topology, workload) is measured.
#[derive(Debug, Clone, Copy)]
struct Plan {
    secs: u64,
    runs: usize,
    tiny: bool,
}

pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return skip("needs root (network namespaces and veth pairs); run it as root, as CI does");
    }
    let absent = missing(TOOLS);
    if !absent.is_empty() {
        return skip(&format!(
            "missing {} (scripts/test.sh installs them)",
            absent.join(", ")
        ));
    }
    let plan = plan(opts)?;
    report.note(&format!(
        "iperf3 VM to VM, median of {} run(s) of {} s{}, the topologies in turn within each run; \
         MTU 1500; offloads off = checksum/SG/TSO/GSO/GRO off on every veth end crossed; \
         udp_60B with offloads off",
        plan.runs,
        plan.secs,
        if plan.tiny {
            ""
        } else {
            " (TCP omits its first second)"
        }
    ));
    let perf = perf_dir()?;

    // Every topology is built first and measured in turn, so that a change in the machine's
    // load during the run touches all of them alike.
    let mut topos = Vec::new();
    let baselines: [(&str, &[&str], Build); 3] = [
        ("direct-veth", &[], topo::direct),
        ("linux-bridge", &[], topo::linux_bridge),
        ("ovs-netdev", OVS_TOOLS, topo::ovs_netdev),
    ];
    for (name, tools, build) in baselines {
        let absent = missing(tools);
        if !absent.is_empty() {
            not_measured(report, name, &format!("missing {}", absent.join(", ")))?;
            continue;
        }
        topos.push(build().with_context(|| format!("setting up {name}"))?);
    }
    match holdfast_bin() {
        None => not_measured(
            report,
            "holdfast",
            "no `holdfast` binary beside hf-bench (cargo build --release -p holdfast builds \
             it) and no $HOLDFAST_BIN",
        )?,
        Some(_) if !missing(HOLDFAST_TOOLS).is_empty() => not_measured(
            report,
            "holdfast",
            &format!("missing {}", missing(HOLDFAST_TOOLS).join(", ")),
        )?,
        Some(bin) => topos.push(topo::holdfast(&bin).context("setting up the holdfast chassis")?),
    }

    let mut samples = Samples::new();
    let failures = measure(report, &topos, plan, perf.as_deref(), &mut samples)?;
    // In the order they were built: the baselines, then holdfast's against them.
    let names: Vec<&'static str> = topos
        .iter()
        .flat_map(|t| &t.pairs)
        .map(|p| p.name)
        .collect();
    drop(topos);

    let figures: Figures = samples
        .iter()
        .filter_map(|(k, runs)| median(runs).map(|f| (*k, f)))
        .collect();
    for ((name, w), runs) in &samples {
        if runs.len() > 1 {
            let all: Vec<String> = runs.iter().map(|f| format!("{:.3}", f.value)).collect();
            report.note(&format!(
                "{name}/{}: runs {} {}",
                w.name(),
                all.join(", "),
                w.unit()
            ));
        }
    }
    for name in names {
        emit(report, &figures, name, name.starts_with("holdfast"));
    }
    if !failures.is_empty() {
        bail!("measurements that failed: {}", failures.join("; "));
    }
    Ok(())
}

/// What the run measured: (topology, workload) → the median run.
type Figures = BTreeMap<(&'static str, Workload), Figure>;

/// The run with the median value (its retransmits or loss with it).
fn median(runs: &[Figure]) -> Option<Figure> {
    let mut v = runs.to_vec();
    v.sort_by(|a, b| a.value.total_cmp(&b.value));
    v.get(v.len() / 2).copied()
}

/// Run every workload `plan.runs` times on every pair of every topology, the pairs in turn
/// within each run. A failed measurement is noted; the failures are returned (the suite fails
/// at the end: a topology that does not forward is broken).
fn measure(
    report: &Report,
    topos: &[Topo],
    plan: Plan,
    perf: Option<&Path>,
    samples: &mut Samples,
) -> anyhow::Result<Vec<String>> {
    let mut failures = Vec::new();
    let mut servers = Vec::new();
    for p in topos.iter().flat_map(|t| &t.pairs) {
        servers.push(p.server.iperf3_server(p.server_ip, PORT)?);
    }
    // A new topology has the kernel's defaults ("on"; GRO stays as the kernel set it).
    let mut offloads = true;
    for w in WORKLOADS {
        for t in topos {
            if offloads != w.offloads() {
                t.set_offloads(w.offloads())?;
            }
            // Neighbours resolved and flows installed before the clock starts.
            t.wait_connected()?;
        }
        offloads = w.offloads();
        for run in 0..plan.runs {
            for t in topos {
                for p in &t.pairs {
                    let recording = match perf {
                        Some(dir) if run == 0 && !p.forwarders.is_empty() => {
                            Some(perf_start(dir, p, w)?)
                        }
                        _ => None,
                    };
                    let r = one(p, w, plan);
                    if let Some(child) = recording {
                        perf_stop(child);
                    }
                    match r {
                        Ok(f) => samples.entry((p.name, w)).or_default().push(f),
                        Err(e) => {
                            report.note(&format!("{}/{}: failed: {e:#}", p.name, w.name()));
                            failures.push(format!("{}/{} (run {})", p.name, w.name(), run + 1));
                            if !p.forwarders.is_empty() {
                                eprintln!("{}", t.logs());
                            }
                        }
                    }
                }
            }
        }
    }
    drop(servers);
    Ok(failures)
}

/// One iperf3 run of `w` from `p`'s client to its server.
fn one(p: &Pair, w: Workload, plan: Plan) -> anyhow::Result<Figure> {
    let mut o = Iperf3Opts::new(p.server_ip, PORT).duration(Duration::from_secs(plan.secs));
    if w.tcp() {
        if !plan.tiny {
            o.extra = vec!["--omit".into(), "1".into()];
        }
    } else {
        o.udp = true;
        o.length = Some(UDP_PAYLOAD);
        o.bitrate = Some("0".into());
    }
    let r = p.client.iperf3(&o).map_err(|e| match e {
        KitError::Iperf3 { error, report } => anyhow::anyhow!("iperf3: {error} ({report})"),
        e => e.into(),
    })?;
    if r.seconds <= 0.0 {
        bail!("iperf3 measured no time: {r}");
    }
    Ok(if w.tcp() {
        Figure {
            value: r.bits_per_second / 1e9,
            retransmits: r.retransmits,
            loss_percent: None,
        }
    } else {
        let got = r.received_bytes as f64 / f64::from(UDP_PAYLOAD);
        Figure {
            value: got / r.seconds,
            retransmits: None,
            loss_percent: match (r.lost_packets, r.packets) {
                (Some(l), Some(n)) if n > 0 => Some(100.0 * l as f64 / n as f64),
                _ => None,
            },
        }
    })
}

/// The result lines of topology `name`: each workload's figure (against the baselines when
/// `compare`), its retransmits or its loss.
fn emit(report: &mut Report, figures: &Figures, name: &'static str, compare: bool) {
    for w in WORKLOADS {
        let Some(f) = figures.get(&(name, w)) else {
            continue;
        };
        let line = format!("{name}/{}", w.name());
        let bases: Vec<(&str, f64)> = if compare {
            BASELINES
                .iter()
                .filter_map(|b| figures.get(&(*b, w)).map(|bf| (*b, bf.value)))
                .collect()
        } else {
            Vec::new()
        };
        if bases.is_empty() {
            report.result(&line, f.value, w.unit());
        }
        for (b, v) in bases {
            report.compare(&line, f.value, w.unit(), Better::Higher, b, v);
        }
        if let Some(r) = f.retransmits {
            report.result(&format!("{line}_retransmits"), r as f64, "segments");
        }
        if let Some(l) = f.loss_percent {
            report.result(&format!("{line}_loss"), l, "%");
        }
    }
}

/// The suite cannot run here: one `SKIP:` line, or under `CI=true` an error.
fn skip(why: &str) -> anyhow::Result<()> {
    if hf_testkit::is_ci() {
        bail!("{why} (CI=true: a missing dependency fails, never skips)");
    }
    eprintln!("SKIP: datapath-veth: {why}");
    Ok(())
}

/// A topology not measured: a note, or under `CI=true` an error.
fn not_measured(report: &Report, name: &str, why: &str) -> anyhow::Result<()> {
    if hf_testkit::is_ci() {
        bail!("{name} not measured: {why} (CI=true: a missing dependency fails)");
    }
    report.note(&format!("{name} not measured: {why}"));
    Ok(())
}

fn missing<'a>(tools: &[&'a str]) -> Vec<&'a str> {
    tools
        .iter()
        .copied()
        .filter(|t| !hf_testkit::cmd::have_tool(t))
        .collect()
}

/// Seconds per run and runs: `--tiny` one of 1 s; else `HF_BENCH_DATAPATH_SECONDS` (default
/// 5) and `HF_BENCH_DATAPATH_RUNS` (default 3).
fn plan(opts: &Opts) -> anyhow::Result<Plan> {
    if opts.tiny {
        return Ok(Plan {
            secs: 1,
            runs: 1,
            tiny: true,
        });
    }
    let var = |name: &str, default: u64| -> anyhow::Result<u64> {
        match std::env::var(name) {
            Ok(v) => v
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .with_context(|| format!("{name}={v:?}: expected a whole number >= 1")),
            Err(_) => Ok(default),
        }
    };
    Ok(Plan {
        secs: var("HF_BENCH_DATAPATH_SECONDS", DEFAULT_SECONDS)?,
        runs: usize::try_from(var("HF_BENCH_DATAPATH_RUNS", DEFAULT_RUNS)?)?,
        tiny: false,
    })
}

/// The `holdfast` binary: `$HOLDFAST_BIN`, else the one built beside this one.
pub(crate) fn holdfast_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HOLDFAST_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("holdfast");
    p.exists().then_some(p)
}

/// `HF_BENCH_PERF_DIR`, created, when set.
fn perf_dir() -> anyhow::Result<Option<PathBuf>> {
    let Some(d) = std::env::var_os("HF_BENCH_PERF_DIR") else {
        return Ok(None);
    };
    let d = PathBuf::from(d);
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(Some(d))
}

/// `perf record -g` of `p`'s forwarders into `dir/<topology>-<workload>.data`, until
/// [`perf_stop`].
fn perf_start(dir: &Path, p: &Pair, w: Workload) -> anyhow::Result<Child> {
    let file = dir.join(format!("{}-{}.data", p.name, w.name()));
    let pids: Vec<String> = p.forwarders.iter().map(i32::to_string).collect();
    let child = Command::new("perf")
        .args(["record", "-g", "-F", "999", "-o"])
        .arg(&file)
        .args(["-p", &pids.join(",")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting `perf record` (HF_BENCH_PERF_DIR)")?;
    Ok(child)
}

/// Stop a `perf record` (SIGINT: it writes its file) and wait for it.
fn perf_stop(mut child: Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        );
    }
    let _ = child.wait();
}
