//! `migration-real`: live migrations of a VM between two holdfast chassis on real namespaces
//! with real kernel TCP (root), measured where the issue says: at the external namespace.
//!
//! Topology: central `holdfast db` + `holdfast northd`; chassis `hv1`, `hv2` and the gateway
//! `gw1` (namespaces on one underlay bridge, Geneve between them), each with its local OVS
//! database and daemons ([`hf_testkit::holdfast`]); the VM (a namespace, `10.0.1.11` on `ls1`
//! behind `lr0`); the external namespace (`172.16.0.10` on the provider network `physnet1`,
//! plugged on `gw1` as the localnet port), reached through the router's SNAT to `172.16.0.100`
//! on `gw1`.
//!
//! A paced TCP stream runs from the VM to the external namespace (1 KB every millisecond, a
//! kernel socket each side) while the VM migrates back and forth: OVN's CMS steps around it
//! (`requested-chassis=src,dst` with `activation-strategy=garp`, then `requested-chassis=dst`)
//! and the hypervisor's part in between: a new veth pair into the VM's namespace plugged on the
//! destination with the same `iface-id`, the VM's interface down, its address moved, a
//! gratuitous ARP, the old pair and port removed. The receiver records every gap between
//! arrivals; per migration the stall is the longest gap from the pause to two seconds after
//! it. Reported: `stall_p50`, `stall_p99` and `stall_max` (ms) over the migrations (goal: p99
//! under 100 ms).
//!
//! `--tiny`: 2 migrations; otherwise 20 (`HF_BENCH_MIGRATIONS`).

// A benchmark reads the clock and runs processes.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use hf_testkit::holdfast::{GatewayNet, VM_MTU};
use hf_testkit::{Lab, Netns, VmIface};

use crate::{Opts, Report};

const TOOLS: &[&str] = &["ip", "ovs-vsctl", "ovn-nbctl", "python3", "busybox"];

/// The receiver (in the external namespace): accepts one connection and writes, on EOF, the
/// gaps between arrivals longer than 2 ms as `start end` lines (CLOCK_MONOTONIC seconds).
const RECEIVER: &str = r#"
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
open(sys.argv[3] + ".ready", "w").close()
c, _ = s.accept()
last = time.monotonic(); gaps = []; total = 0
while True:
    b = c.recv(65536)
    now = time.monotonic()
    if not b: break
    total += len(b)
    if now - last > 0.002: gaps.append((last, now))
    last = now
with open(sys.argv[3], "w") as f:
    f.write("total %d\n" % total)
    for a, b in gaps: f.write("%f %f\n" % (a, b))
"#;

/// The sender (in the VM): 1 KB every millisecond until `STOP` exists.
const SENDER: &str = r#"
import os, socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = b"x" * 1024; t = time.monotonic()
while not os.path.exists(sys.argv[3]):
    c.sendall(buf); t += 0.001
    d = t - time.monotonic()
    if d > 0: time.sleep(d)
c.close()
"#;

/// Runs the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return skip("needs root (network namespaces and veth pairs); run it as root, as CI does");
    }
    let absent: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|t| !hf_testkit::cmd::have_tool(t))
        .collect();
    if !absent.is_empty() || !Path::new(hf_testkit::holdfast::VSWITCH_SCHEMA).exists() {
        return skip(&format!(
            "missing {} or OVS's vswitch.ovsschema (scripts/test.sh installs them)",
            absent.join(", ")
        ));
    }
    let Some(bin) = super::datapath_veth::holdfast_bin() else {
        return skip("no holdfast binary beside hf-bench (build it: cargo build -p holdfast)");
    };
    let n = migrations(opts)?;
    let lab = Lab::new()?;
    let net = Net::build(&lab, &bin).context("building the topology")?;
    let stalls = net
        .migrate(&lab, n)
        .map_err(|e| anyhow::anyhow!("{e:#}\n{}", net.logs()))?;
    let mut sorted = stalls.clone();
    sorted.sort_by(f64::total_cmp);
    report.note(&format!(
        "{n} migrations hv1 <-> hv2 of a VM streaming 1 KB/ms (kernel TCP) to the external \
         namespace through SNAT on gw1; stall = longest gap at the receiver from the pause to \
         2 s after; per migration: {}",
        stalls
            .iter()
            .map(|s| format!("{s:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let name = |what: &str| format!("{what}/{n}_migrations_kernel_tcp_1KB_per_ms");
    report.result(&name("stall_p50"), percentile(&sorted, 50.0), "ms");
    report.result(&name("stall_p99"), percentile(&sorted, 99.0), "ms");
    report.result(
        &name("stall_max"),
        sorted.last().copied().unwrap_or(f64::NAN),
        "ms",
    );
    Ok(())
}

fn skip(why: &str) -> anyhow::Result<()> {
    if hf_testkit::is_ci() {
        bail!("{why} (CI=true: a missing dependency fails, never skips)");
    }
    eprintln!("SKIP: migration-real: {why}");
    Ok(())
}

fn migrations(opts: &Opts) -> anyhow::Result<usize> {
    if opts.tiny {
        return Ok(2);
    }
    match std::env::var("HF_BENCH_MIGRATIONS") {
        Ok(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .with_context(|| format!("HF_BENCH_MIGRATIONS={v:?}: expected a count, >= 1")),
        Err(_) => Ok(20),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

fn now_s() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

struct Net {
    net: GatewayNet,
    vm: Netns,
}

impl Net {
    fn build(lab: &Lab, bin: &Path) -> anyhow::Result<Net> {
        let net = GatewayNet::build(lab, bin)?;
        let vm = net.vm(lab, "vm", 0, "tap0", "0a:00:00:00:00:0b", "10.0.1.11")?;
        // The path works before anything moves (the first packets resolve neighbours).
        hf_testkit::cmd::wait_until(
            Duration::from_secs(30),
            || "the VM reaching the external namespace".into(),
            || vm.ping("172.16.0.10", 1).is_ok_and(|p| p.received == 1),
        )?;
        Ok(Net { net, vm })
    }

    fn logs(&self) -> String {
        self.net.logs()
    }

    /// `n` migrations during the stream; the stall of each, in ms.
    fn migrate(&self, lab: &Lab, n: usize) -> anyhow::Result<Vec<f64>> {
        let dir = lab.dir();
        let gaps_file = dir.join("gaps.txt");
        let stop = dir.join("stop");
        let recv = self.net.ext.spawn(
            "stall-receiver",
            &[
                "python3",
                "-c",
                RECEIVER,
                "172.16.0.10",
                "9000",
                gaps_file.to_str().unwrap_or_default(),
            ],
        )?;
        let ready = dir.join("gaps.txt.ready");
        hf_testkit::cmd::wait_until(
            Duration::from_secs(10),
            || "the receiver to listen".into(),
            || ready.exists(),
        )?;
        let mut send = self.vm.spawn(
            "stall-sender",
            &[
                "python3",
                "-c",
                SENDER,
                "172.16.0.10",
                "9000",
                stop.to_str().unwrap_or_default(),
            ],
        )?;
        std::thread::sleep(Duration::from_secs(1));
        let mut pauses = Vec::new();
        let mut here = 0usize;
        let mut tap = "tap0".to_string();
        let mut ifname = "eth0".to_string();
        for m in 0..n {
            let there = 1 - here;
            let (src, dst) = (&self.net.chassis[here], &self.net.chassis[there]);
            self.net.central.nbctl(&[
                "--wait=hv",
                "lsp-set-options",
                "vm",
                &format!("requested-chassis={},{}", src.name(), dst.name()),
                "activation-strategy=garp",
            ])?;
            let new_tap = format!("tap{}", m + 1);
            let new_if = format!("eth{}", m + 1);
            lab.attach(
                &self.vm,
                dst.ns(),
                &new_tap,
                &VmIface {
                    ifname: new_if.clone(),
                    mac: Some("0a:00:00:00:00:0b".into()),
                    mtu: Some(VM_MTU),
                    ..VmIface::default()
                },
            )?;
            dst.plug(&new_tap, "vm")?;
            // The hypervisor's pause: the VM stops here and resumes there.
            pauses.push(now_s());
            self.vm.link_down(&ifname)?;
            self.vm
                .ip(&["addr", "del", "10.0.1.11/24", "dev", &ifname])?;
            self.vm.addr_add(&new_if, "10.0.1.11/24")?;
            self.vm.route_add("0.0.0.0/0", "10.0.1.1")?;
            self.vm.garp(&new_if, "10.0.1.11")?;
            src.vsctl(&["del-port", "br-int", &tap])?;
            self.vm.ip(&["link", "del", &ifname])?;
            self.net.central.nbctl(&[
                "--wait=hv",
                "lsp-set-options",
                "vm",
                &format!("requested-chassis={}", dst.name()),
            ])?;
            std::thread::sleep(Duration::from_secs(2));
            here = there;
            tap = new_tap;
            ifname = new_if;
        }
        std::fs::write(&stop, b"")?;
        send.wait_ok(Duration::from_secs(20))?;
        let mut recv = recv;
        recv.wait_ok(Duration::from_secs(20))?;
        let text = std::fs::read_to_string(&gaps_file)
            .with_context(|| format!("reading {}", gaps_file.display()))?;
        let gaps: Vec<(f64, f64)> = text
            .lines()
            .filter_map(|l| {
                let (a, b) = l.split_once(' ')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .collect();
        let total = text
            .lines()
            .find_map(|l| l.strip_prefix("total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if total == 0 {
            bail!("the receiver got nothing");
        }
        Ok(pauses
            .iter()
            .map(|&p| {
                gaps.iter()
                    .filter(|(a, b)| *b >= p && *a <= p + 2.0)
                    .map(|(a, b)| (b - a) * 1000.0)
                    .fold(0.0, f64::max)
            })
            .collect())
    }
}
