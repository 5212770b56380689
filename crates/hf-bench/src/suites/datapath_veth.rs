//! `datapath-veth`: VM-to-VM throughput on the real kernel (root), holdfast side by side with
//! what else can join two namespaces on this machine.
//!
//! # Topologies
//!
//! Each is its own hf-testkit lab ([`topo`]), built, measured and removed in turn:
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
//! Per topology, with iperf3 between the two VMs (client → server), one measurement each:
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
//! - `--tiny`: 1 s per measurement (CI keeps the suite working; the figures mean nothing).
//! - `HF_BENCH_DATAPATH_SECONDS=N`: N seconds per measurement (default 10; TCP omits its
//!   first second, slow start, from the figure).
//! - `HF_BENCH_PERF_DIR=DIR`: record `perf record -g` of the holdfast datapaths during each
//!   holdfast measurement into `DIR/<topology>-<workload>.data` (`perf report -i FILE`).
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
/// Seconds per measurement unless `--tiny` or `HF_BENCH_DATAPATH_SECONDS` says otherwise.
const DEFAULT_SECONDS: u64 = 10;
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

/// What the run measured so far: (topology, workload) → figure.
type Figures = BTreeMap<(&'static str, Workload), Figure>;

/// Builds a baseline topology.
type Build = fn() -> anyhow::Result<Topo>;

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
    let secs = seconds(opts)?;
    report.note(&format!(
        "iperf3 VM to VM, {secs} s per measurement{}, MTU 1500; offloads off = checksum/SG/TSO/GSO/GRO \
         off on every veth end crossed; udp_60B with offloads off",
        if opts.tiny { "" } else { " (TCP omits its first second)" }
    ));
    let perf = perf_dir()?;
    let mut figures = Figures::new();
    let mut failures = Vec::new();

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
        let t = build().with_context(|| format!("setting up {name}"))?;
        measure(
            report,
            &t,
            secs,
            opts.tiny,
            None,
            &mut figures,
            &mut failures,
        )?;
        drop(t);
        emit(report, &figures, name, false);
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
        Some(bin) => {
            let t = topo::holdfast(&bin).context("setting up the holdfast chassis")?;
            let names: Vec<&'static str> = t.pairs.iter().map(|p| p.name).collect();
            measure(
                report,
                &t,
                secs,
                opts.tiny,
                perf.as_deref(),
                &mut figures,
                &mut failures,
            )?;
            drop(t);
            for name in names {
                emit(report, &figures, name, true);
            }
        }
    }
    if !failures.is_empty() {
        bail!("measurements that failed: {}", failures.join("; "));
    }
    Ok(())
}

/// Run every workload on every pair of `t`; a failed measurement is noted and listed in
/// `failures` (the suite fails at the end: a topology that does not forward is broken).
fn measure(
    report: &Report,
    t: &Topo,
    secs: u64,
    tiny: bool,
    perf: Option<&Path>,
    figures: &mut Figures,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let servers = t
        .pairs
        .iter()
        .map(|p| p.server.iperf3_server(p.server_ip, PORT))
        .collect::<Result<Vec<_>, _>>()?;
    // A new topology has the kernel's defaults ("on"; GRO stays as the kernel set it).
    let mut offloads = true;
    for w in WORKLOADS {
        if offloads != w.offloads() {
            t.set_offloads(w.offloads())?;
            offloads = w.offloads();
        }
        // Neighbours resolved and flows installed before the clock starts.
        t.wait_connected()?;
        for p in &t.pairs {
            let recording = match perf {
                Some(dir) if !p.forwarders.is_empty() => Some(perf_start(dir, p, w)?),
                _ => None,
            };
            let r = one(p, w, secs, tiny);
            if let Some(child) = recording {
                perf_stop(child);
            }
            match r {
                Ok(f) => {
                    figures.insert((p.name, w), f);
                }
                Err(e) => {
                    report.note(&format!("{}/{}: failed: {e:#}", p.name, w.name()));
                    failures.push(format!("{}/{}", p.name, w.name()));
                    if !p.forwarders.is_empty() {
                        eprintln!("{}", t.logs());
                    }
                }
            }
        }
    }
    drop(servers);
    Ok(())
}

/// One iperf3 run of `w` from `p`'s client to its server.
fn one(p: &Pair, w: Workload, secs: u64, tiny: bool) -> anyhow::Result<Figure> {
    let mut o = Iperf3Opts::new(p.server_ip, PORT).duration(Duration::from_secs(secs));
    if w.tcp() {
        if !tiny {
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

/// Seconds per measurement: `--tiny` 1, `HF_BENCH_DATAPATH_SECONDS`, else 10.
fn seconds(opts: &Opts) -> anyhow::Result<u64> {
    if opts.tiny {
        return Ok(1);
    }
    match std::env::var("HF_BENCH_DATAPATH_SECONDS") {
        Ok(v) => v
            .parse::<u64>()
            .ok()
            .filter(|&s| s > 0)
            .with_context(|| format!("HF_BENCH_DATAPATH_SECONDS={v:?}: expected seconds, >= 1")),
        Err(_) => Ok(DEFAULT_SECONDS),
    }
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
