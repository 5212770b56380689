//! `northd`: holdfast northd against real `ovn-northd` 23.03 on the NB `shared/bench/gen_topo.py`
//! builds with real `ovn-nbctl` on a real `ovsdb-server` (N switches × P ports: 100×20, 300×30
//! and 500×40; `--tiny`: 100×20 only).
//!
//! Figures (the workload is in the names):
//! - `compile_NxP_in_process`: `hf_northd::compile` of the NB read from the server's backup
//!   (no I/O inside; median of 3); ms. With `compile_NxP_flows` (Logical_Flow rows written,
//!   after datapath grouping) and `compile_NxP_heap_peak` (the counting allocator's peak growth
//!   during one compile, NB snapshot excluded); MB.
//! - `compile_NxP_incremental_full` / `_heap_peak` / `_kept`: the daemon's compile (the
//!   incremental compiler's first, full one): ms, its heap peak, and what it keeps between
//!   compiles with the desired SB given back (MB); a note names what each part holds.
//! - Side by side, each northd on its own copy of the same NB and an empty SB (real
//!   `ovsdb-server`s, OVN 23.03's schemas), baseline `ovn-northd`:
//!   - `northd_cold_NxP_wait_sb`: from starting the daemon to `ovn-nbctl --wait=sb sync`
//!     returning; ms.
//!   - `northd_lsp_add_NxP_wait_sb`: one `ovn-nbctl --wait=sb lsp-add` of a VIF with an
//!     address on `ls0` (median of 3 ports); ms.
//!   - `northd_lsp_add_NxP_nb_to_sb`: northd's own time for the same port adds, seen from
//!     outside: an OVSDB client monitoring NB `Logical_Switch_Port` and one monitoring SB
//!     `Port_Binding` (this process, its own JSON-RPC sessions) timestamp the update that
//!     carries the new port on each; the figure is SB arrival − NB arrival (median of 3); ms.
//!   - `northd_NxP_peak_rss`: the daemon's `VmHWM` after both; MB.
//!   - `northd_cold_NxP_wait_sb_on_holdfast_db`, `northd_lsp_add_NxP_wait_sb_on_holdfast_db`,
//!     `northd_lsp_add_NxP_nb_to_sb_on_holdfast_db`:
//!     the same for the holdfast stack (holdfast northd on one `holdfast db` serving both
//!     databases) against ovn-northd on `ovsdb-server`s: what replacing both buys.
//!
//!   The holdfast side runs `holdfast northd` (the binary beside hf-bench) with ovn-northd's
//!   command line; when it is missing or does not bring SB up to date, the ovn-northd figures
//!   are printed alone and a note says why (with `CI=true` the suite fails instead, as it does
//!   when an OVN tool is missing).
//!
//! Development knobs: `HF_BENCH_NORTHD_SIZE=300x30` runs one size, and
//! `HF_BENCH_NORTHD_COMPILE_ONLY=1` only the in-process figures (for profiling),
//! `HF_BENCH_NORTHD_NB_CACHE=DIR` keeps the built NB in DIR and reuses it.
//!
//! `HF_BENCH_NORTHD_DB=cluster` (issue 20's scale-out): both sides' NB and SB are 3-member
//! real `ovsdb-server` Raft clusters ([`raft`]), every northd and `ovn-nbctl` given the three
//! remotes. After the cold sync both leaders are killed; `northd_failover_NxP_wait_sb_raft`
//! is the time from the kills to an `ovn-nbctl --wait=sb sync` returning (the election
//! included), and the port adds then run on the surviving members; these lines get the suffix
//! `_raft`. holdfast db is standalone, so on the holdfast stack its only server is killed
//! (SIGKILL) and started again on the same files instead (`..._on_holdfast_db_restarted`,
//! with `northd_failover_NxP_wait_sb_on_holdfast_db_restarted`), against ovn-northd on Raft.
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

mod raft;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hf_model::NbSnapshot;

use super::central::{
    Daemon, NB_SCHEMA, PYTHON, SB_SCHEMA, daemon_args, gen_topo, ok, server, vm_mb,
};
use crate::alloc;
use crate::report::Better;
use crate::{Opts, Report};

/// The `holdfast` binary built beside this one.
fn holdfast_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("holdfast");
    p.exists().then_some(p)
}

/// `CI=true`: a missing baseline or holdfast side fails the suite instead of being skipped.
fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A database file from a server (`ovsdb-client backup`).
fn backup(remote: &str, db: &str, to: &Path) -> anyhow::Result<()> {
    let out = Command::new("ovsdb-client")
        .args(["backup", remote, db])
        .output()
        .context("running ovsdb-client backup")?;
    if !out.status.success() {
        bail!(
            "ovsdb-client backup failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    std::fs::write(to, &out.stdout)?;
    Ok(())
}

fn read_nb(path: &Path) -> anyhow::Result<NbSnapshot> {
    let loaded = hf_ovsdb_net::storage::open(path, 0, 0)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    NbSnapshot::from_db(&loaded.db).map_err(|e| anyhow::anyhow!("NB snapshot: {e}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `VmHWM` of the process whose pid is in `pidfile`, in MB.
fn peak_rss_mb(pidfile: &Path) -> anyhow::Result<f64> {
    vm_mb(pidfile, "VmHWM")
}

/// How many delete-and-add cycles of one port the steady-RSS line runs.
const PORT_CYCLES: usize = 8;

/// `VmRSS` of the process whose pid is in `pidfile`, in MB.
fn rss_now_mb(pidfile: &Path) -> anyhow::Result<f64> {
    vm_mb(pidfile, "VmRSS")
}

/// What one northd did on one NB.
struct SideBySide {
    /// holdfast northd only: `VmRSS` growth over [`PORT_CYCLES`] port delete-and-add cycles.
    rss_growth_mb: Option<f64>,
    /// From killing both leaders to `--wait=sb sync` returning (Raft clusters only).
    failover_ms: Option<f64>,
    cold_ms: f64,
    lsp_add_ms: f64,
    nb_to_sb_ms: f64,
    rss_mb: f64,
}

/// An OVSDB client of its own (raw JSON-RPC on a unix socket, a reader thread) monitoring one
/// column of one table: every `update` notification is handed over with the instant it
/// arrived. The server's echo probes are answered.
struct Watch {
    rx: mpsc::Receiver<(Instant, String)>,
    stream: UnixStream,
}

impl Watch {
    fn start(remote: &str, db: &str, table: &str, column: &str) -> anyhow::Result<Watch> {
        let path = remote
            .strip_prefix("unix:")
            .with_context(|| format!("{remote}: the watch needs a unix: remote"))?;
        let mut stream =
            UnixStream::connect(path).with_context(|| format!("connecting to {path}"))?;
        let req = serde_json::json!({"method": "monitor", "id": "watch",
            "params": [db, null, {table: {"columns": [column], "select": {"initial": false}}}]});
        stream.write_all(req.to_string().as_bytes())?;
        let reader = stream.try_clone()?;
        let mut writer = stream.try_clone()?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let msgs = serde_json::Deserializer::from_reader(std::io::BufReader::new(reader))
                .into_iter::<serde_json::Value>();
            for m in msgs {
                let Ok(m) = m else { return };
                let at = Instant::now();
                match m.get("method").and_then(|v| v.as_str()) {
                    Some("update") if tx.send((at, m["params"].to_string())).is_err() => return,
                    Some("update") => {}
                    Some("echo") => {
                        let r = serde_json::json!({"id": m["id"], "result": m["params"], "error": null});
                        let _ = writer.write_all(r.to_string().as_bytes());
                    }
                    _ => {}
                }
            }
        });
        Ok(Watch { rx, stream })
    }

    /// When the first update mentioning `needle` arrived (waits up to `timeout`).
    fn seen(&self, needle: &str, timeout: Duration) -> anyhow::Result<Instant> {
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let (at, text) = self
                .rx
                .recv_timeout(left)
                .with_context(|| format!("no update mentioning {needle} within {timeout:?}"))?;
            if text.contains(needle) {
                return Ok(at);
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// `holdfast db` (`bin`) serving `dir/nb.db` and `dir/sb.db` on `dir/db.sock`, detached.
fn start_holdfast_db(bin: &Path, dir: &Path) -> anyhow::Result<Daemon> {
    ok(Command::new(bin)
        .arg("db")
        .args(daemon_args(dir, "db"))
        .arg(format!("--remote=punix:{}", dir.join("db.sock").display()))
        .arg(dir.join("nb.db"))
        .arg(dir.join("sb.db"))
        .env("HOLDFAST_LOG", "warn"))?;
    Ok(Daemon::adopt(dir, "db"))
}

/// Starts `northd` (`argv[0]` and its leading arguments) on a copy of `nb_file` and an empty
/// SB in `dir`, times the cold compile and three `lsp-add`s.
fn side(
    dir: &Path,
    nb_file: &Path,
    argv: &[String],
    name: &str,
    holdfast_db: Option<&Path>,
) -> anyhow::Result<SideBySide> {
    std::fs::create_dir_all(dir)?;
    let nb_db = dir.join("nb.db");
    std::fs::copy(nb_file, &nb_db)?;
    let mut servers = Vec::new();
    let mut clusters = Vec::new();
    let (nb, sb) = match holdfast_db {
        // One `holdfast db` serving both databases (OVN 23.03's schemas, as ovsdb-server).
        Some(bin) => {
            let sb_db = dir.join("sb.db");
            ok(Command::new(bin)
                .args(["db", "create"])
                .arg(&sb_db)
                .arg(SB_SCHEMA))?;
            servers.push(start_holdfast_db(bin, dir)?);
            let r = format!("unix:{}", dir.join("db.sock").display());
            (r.clone(), r)
        }
        None if raft::wanted()? => {
            let nbr = raft::Raft::start(dir, "nb", "OVN_Northbound", &nb_db)?;
            let sbr = raft::Raft::start(dir, "sb", "OVN_Southbound", Path::new(SB_SCHEMA))?;
            nbr.raise_election_timer(raft::ELECTION_TIMER_MS)?;
            sbr.raise_election_timer(raft::ELECTION_TIMER_MS)?;
            let remotes = (nbr.remotes(), sbr.remotes());
            clusters.push(nbr);
            clusters.push(sbr);
            remotes
        }
        None => {
            let nb_sock = dir.join("nb.sock");
            ok(Command::new("ovsdb-server")
                .args(daemon_args(dir, "nb"))
                .arg(format!("--remote=punix:{}", nb_sock.display()))
                .arg(&nb_db))?;
            servers.push(Daemon::adopt(dir, "nb"));
            let (sb_server, sb) = server(dir, "sb", SB_SCHEMA)?;
            servers.push(sb_server);
            (format!("unix:{}", nb_sock.display()), sb)
        }
    };
    let start = Instant::now();
    ok(Command::new(&argv[0])
        .args(&argv[1..])
        .args(daemon_args(dir, name))
        .arg(format!("--ovnnb-db={nb}"))
        .arg(format!("--ovnsb-db={sb}")))
    .with_context(|| format!("starting {name}"))?;
    let northd = Daemon::adopt(dir, name);
    // Ten minutes: ovn-northd's cold 100k-row SB transaction through a loaded Raft cluster
    // took more than the two minutes this once allowed (session 21, 500x40).
    let nbctl = |nb: &str, args: &[&str]| {
        ok(Command::new("ovn-nbctl")
            .arg(format!("--db={nb}"))
            .args(["--wait=sb", "--timeout=600"])
            .args(args))
    };
    nbctl(&nb, &["sync"]).with_context(|| format!("{name}: cold --wait=sb sync"))?;
    let cold_ms = start.elapsed().as_secs_f64() * 1e3;
    let (nb, watch_nb, watch_sb, failover_ms) = match clusters.as_mut_slice() {
        [nbr, sbr] => {
            // Both leaders die; northd follows the new ones. A one-shot ovn-nbctl tries each
            // remote once, so it is started once NB has a leader again.
            let t = Instant::now();
            nbr.kill_leader()?;
            sbr.kill_leader()?;
            nbr.wait_leader(Duration::from_secs(60))?;
            let nb = nbr.remotes();
            nbctl(&nb, &["sync"])
                .with_context(|| format!("{name}: --wait=sb sync after the leaders died"))?;
            let failover = t.elapsed().as_secs_f64() * 1e3;
            (nb, nbr.one(), sbr.one(), Some(failover))
        }
        // holdfast db is standalone: its counterpart of losing the leader is losing the only
        // server, killed with SIGKILL and started again on the same files.
        _ if holdfast_db.is_some() && raft::wanted()? => {
            let t = Instant::now();
            let pidfile = dir.join("db.pid");
            let pid = std::fs::read_to_string(&pidfile)?;
            ok(Command::new("kill").args(["-9", pid.trim()]))?;
            let gone = format!("/proc/{}", pid.trim());
            while Path::new(&gone).exists() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(10));
            }
            if let Some(bin) = holdfast_db {
                std::mem::forget(servers.pop());
                servers.push(start_holdfast_db(bin, dir).context("restarting holdfast db")?);
            }
            nbctl(&nb, &["sync"])
                .with_context(|| format!("{name}: --wait=sb sync after holdfast db restarted"))?;
            let failover = t.elapsed().as_secs_f64() * 1e3;
            (nb.clone(), nb, sb, Some(failover))
        }
        _ => (nb.clone(), nb, sb, None),
    };
    let nb_watch = Watch::start(&watch_nb, "OVN_Northbound", "Logical_Switch_Port", "name")?;
    let sb_watch = Watch::start(&watch_sb, "OVN_Southbound", "Port_Binding", "logical_port")?;
    let mut adds = Vec::new();
    let mut nb_to_sb = Vec::new();
    for k in 0..3 {
        let port = format!("bench-new{k}");
        let addr = format!("0a:ff:00:00:00:{:02x} 10.1.0.{}", k + 1, 240 + k);
        let t = Instant::now();
        nbctl(
            &nb,
            &[
                "lsp-add",
                "ls0",
                &port,
                "--",
                "lsp-set-addresses",
                &port,
                &addr,
            ],
        )
        .with_context(|| format!("{name}: lsp-add --wait=sb"))?;
        adds.push(t.elapsed().as_secs_f64() * 1e3);
        let quoted = format!("\"{port}\"");
        let wait = Duration::from_secs(60);
        let seen_nb = nb_watch.seen(&quoted, wait).context("NB watch")?;
        let seen_sb = sb_watch.seen(&quoted, wait).context("SB watch")?;
        nb_to_sb.push(seen_sb.saturating_duration_since(seen_nb).as_secs_f64() * 1e3);
    }
    let pidfile = dir.join(format!("{name}.pid"));
    let rss_mb = peak_rss_mb(&pidfile)?;
    // Steady memory: the same port deleted and added again, PORT_CYCLES times, after one
    // warm-up cycle; the resident set must not grow (what the allocator keeps counts too).
    let mut rss_growth_mb = None;
    if name.starts_with("holdfast") {
        let cycle = |k: usize| -> anyhow::Result<String> {
            nbctl(&nb, &["lsp-del", "bench-new0"])?;
            let addr = format!("0a:ff:00:00:01:{:02x} 10.1.1.{}", k % 256, 10 + k % 200);
            nbctl(
                &nb,
                &[
                    "lsp-add",
                    "ls0",
                    "bench-new0",
                    "--",
                    "lsp-set-addresses",
                    "bench-new0",
                    &addr,
                ],
            )
        };
        cycle(0).with_context(|| format!("{name}: port cycle"))?;
        let start = rss_now_mb(&pidfile)?;
        for k in 1..=PORT_CYCLES {
            cycle(k).with_context(|| format!("{name}: port cycle"))?;
        }
        rss_growth_mb = Some(rss_now_mb(&pidfile)? - start);
    }
    drop(northd);
    drop(clusters);
    Ok(SideBySide {
        rss_growth_mb,
        failover_ms,
        cold_ms,
        lsp_add_ms: median(adds),
        nb_to_sb_ms: median(nb_to_sb),
        rss_mb,
    })
}

/// Runs the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    for tool in [
        "ovsdb-server",
        "ovsdb-tool",
        "ovsdb-client",
        "ovn-northd",
        "ovn-nbctl",
    ] {
        if !have(tool) {
            if ci() {
                bail!("{tool} is not installed (needs OVN's packages; CI=true)");
            }
            report.note(&format!(
                "skipped: {tool} is not installed (needs OVN's packages)"
            ));
            return Ok(());
        }
    }
    let Some(topo) = gen_topo() else {
        report.note("skipped: shared/bench/gen_topo.py not found");
        return Ok(());
    };
    let all: &[(usize, usize)] = if opts.tiny {
        &[(100, 20)]
    } else {
        &[(100, 20), (300, 30), (500, 40)]
    };
    // Development knobs (profiling): HF_BENCH_NORTHD_SIZE=300x30 runs that size only,
    // HF_BENCH_NORTHD_COMPILE_ONLY=1 skips the side-by-side daemons.
    let only = std::env::var("HF_BENCH_NORTHD_SIZE").ok().and_then(|v| {
        let (n, p) = v.split_once('x')?;
        Some((n.parse::<usize>().ok()?, p.parse::<usize>().ok()?))
    });
    let compile_only = std::env::var("HF_BENCH_NORTHD_COMPILE_ONLY").is_ok();
    let chosen: Vec<(usize, usize)> = match only {
        Some(s) => vec![s],
        None => all.to_vec(),
    };
    let sizes = chosen.as_slice();
    let on_raft = raft::wanted()?;
    let sfx = if on_raft { "_raft" } else { "" };
    for &(n, p) in sizes {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        // The NB, built by real ovn-nbctl with no northd running.
        let nb_file = d.join("nb-built.db");
        // HF_BENCH_NORTHD_NB_CACHE=DIR (development knob): the built NB is kept in DIR as
        // nb-NxP.db and reused by later runs.
        let cache = std::env::var_os("HF_BENCH_NORTHD_NB_CACHE")
            .map(|d| PathBuf::from(d).join(format!("nb-{n}x{p}.db")));
        if let Some(c) = cache.as_ref().filter(|c| c.exists()) {
            std::fs::copy(c, &nb_file)?;
            report.note(&format!("reused the {n}x{p} NB from {}", c.display()));
        } else {
            let (_nb_server, nb) = server(d, "build", NB_SCHEMA)?;
            let t = Instant::now();
            ok(Command::new(PYTHON).arg(&topo).args([
                "--n",
                &n.to_string(),
                "--p",
                &p.to_string(),
                "--db",
                &nb,
            ]))?;
            report.note(&format!(
                "built the {n}x{p} NB in {:.1} s",
                t.elapsed().as_secs_f64()
            ));
            backup(&nb, "OVN_Northbound", &nb_file)?;
            if let Some(c) = &cache {
                std::fs::copy(&nb_file, c)?;
            }
        }
        in_process(report, n, p, &nb_file)?;
        if compile_only {
            continue;
        }
        let ovn = side(
            &d.join("ovn"),
            &nb_file,
            &["ovn-northd".to_string()],
            "ovn-northd",
            None,
        )
        .context("ovn-northd side")?;
        let ours = match holdfast_bin() {
            None => Err(anyhow::anyhow!(
                "no `holdfast` binary beside hf-bench (cargo build --release builds both)"
            )),
            Some(bin) => side(
                &d.join("holdfast"),
                &nb_file,
                &[bin.display().to_string(), "northd".to_string()],
                "holdfast-northd",
                None,
            ),
        };
        // The whole holdfast stack: holdfast northd on holdfast db (standalone only).
        let stack = holdfast_bin().and_then(|bin| {
            side(
                &d.join("stack"),
                &nb_file,
                &[bin.display().to_string(), "northd".to_string()],
                "holdfast-northd",
                Some(&bin),
            )
            .map_err(|e| report.note(&format!("holdfast stack side skipped at {n}x{p}: {e:#}")))
            .ok()
        });
        // With HF_BENCH_NORTHD_DB=cluster the holdfast db stack's server is restarted instead.
        let restarted = if on_raft { "_restarted" } else { "" };
        if let Some(h) = &stack {
            let b = Better::Lower;
            if let (Some(ours), Some(theirs)) = (h.failover_ms, ovn.failover_ms) {
                report.compare(
                    &format!("northd_failover_{n}x{p}_wait_sb_on_holdfast_db{restarted}"),
                    ours,
                    "ms",
                    b,
                    "ovn-northd",
                    theirs,
                );
            }
            report.compare(
                &format!("northd_cold_{n}x{p}_wait_sb_on_holdfast_db{restarted}"),
                h.cold_ms,
                "ms",
                b,
                "ovn-northd",
                ovn.cold_ms,
            );
            report.compare(
                &format!("northd_lsp_add_{n}x{p}_wait_sb_on_holdfast_db{restarted}"),
                h.lsp_add_ms,
                "ms",
                b,
                "ovn-northd",
                ovn.lsp_add_ms,
            );
            report.compare(
                &format!("northd_lsp_add_{n}x{p}_nb_to_sb_on_holdfast_db{restarted}"),
                h.nb_to_sb_ms,
                "ms",
                b,
                "ovn-northd",
                ovn.nb_to_sb_ms,
            );
        }
        let names = (
            format!("northd_cold_{n}x{p}_wait_sb{sfx}"),
            format!("northd_lsp_add_{n}x{p}_wait_sb{sfx}"),
            format!("northd_{n}x{p}_peak_rss{sfx}"),
            format!("northd_lsp_add_{n}x{p}_nb_to_sb{sfx}"),
        );
        match ours {
            Ok(h) => {
                let b = Better::Lower;
                if let (Some(ours), Some(theirs)) = (h.failover_ms, ovn.failover_ms) {
                    report.compare(
                        &format!("northd_failover_{n}x{p}_wait_sb_raft"),
                        ours,
                        "ms",
                        b,
                        "ovn-northd",
                        theirs,
                    );
                }
                report.compare(&names.0, h.cold_ms, "ms", b, "ovn-northd", ovn.cold_ms);
                report.compare(
                    &names.1,
                    h.lsp_add_ms,
                    "ms",
                    b,
                    "ovn-northd",
                    ovn.lsp_add_ms,
                );
                report.compare(
                    &names.3,
                    h.nb_to_sb_ms,
                    "ms",
                    b,
                    "ovn-northd",
                    ovn.nb_to_sb_ms,
                );
                report.compare(&names.2, h.rss_mb, "MB", b, "ovn-northd", ovn.rss_mb);
                if let Some(g) = h.rss_growth_mb {
                    report.result(
                        &format!("northd_{n}x{p}_rss_growth_over_{PORT_CYCLES}_port_cycles{sfx}"),
                        g,
                        "MB",
                    );
                }
            }
            Err(e) if ci() => {
                return Err(e.context(format!("holdfast northd side at {n}x{p} (CI=true)")));
            }
            Err(e) => {
                report.note(&format!(
                    "holdfast northd side skipped at {n}x{p}: {e:#}; ovn-northd's figures alone"
                ));
                report.result(&format!("{}_ovn_northd", names.0), ovn.cold_ms, "ms");
                report.result(&format!("{}_ovn_northd", names.1), ovn.lsp_add_ms, "ms");
                report.result(&format!("{}_ovn_northd", names.2), ovn.rss_mb, "MB");
                report.result(&format!("{}_ovn_northd", names.3), ovn.nb_to_sb_ms, "ms");
            }
        }
    }
    Ok(())
}

/// The in-process compile figures.
fn in_process(report: &mut Report, n: usize, p: usize, nb_file: &Path) -> anyhow::Result<()> {
    let nb = read_nb(nb_file)?;
    let opts = hf_northd::Options::default();
    let mut times = Vec::new();
    let mut flows = 0;
    let mut peak = 0;
    for _ in 0..3 {
        let base = alloc::reset_peak();
        let t = Instant::now();
        let c = hf_northd::compile(&nb, &opts);
        times.push(t.elapsed().as_secs_f64() * 1e3);
        peak = peak.max(alloc::peak().saturating_sub(base));
        flows = c.sb.flows.len();
        drop(c);
    }
    report.result(&format!("compile_{n}x{p}_in_process"), median(times), "ms");
    report.result(&format!("compile_{n}x{p}_flows"), flows as f64, "flows");
    report.result(
        &format!("compile_{n}x{p}_heap_peak"),
        peak as f64 / 1e6,
        "MB",
    );
    incremental_heap(report, n, p, &nb, &opts);
    Ok(())
}

/// The daemon's compile (the incremental compiler's first, full one): its heap peak, what it
/// keeps between compiles (state plus the desired SB it is given back), and what each part of
/// that holds (notes).
fn incremental_heap(
    report: &mut Report,
    n: usize,
    p: usize,
    nb: &NbSnapshot,
    opts: &hf_northd::Options,
) {
    let base = alloc::reset_peak();
    let t = Instant::now();
    let mut inc = hf_northd::incremental::Incremental::new();
    let c = inc.update(nb, None, opts);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let peak = alloc::peak().saturating_sub(base);
    inc.restore(c.sb);
    drop((c.diagnostics, c.acl_last_good));
    let kept = alloc::live_bytes().saturating_sub(base);
    report.result(&format!("compile_{n}x{p}_incremental_full"), ms, "ms");
    report.result(
        &format!("compile_{n}x{p}_incremental_heap_peak"),
        peak as f64 / 1e6,
        "MB",
    );
    report.result(
        &format!("compile_{n}x{p}_incremental_kept"),
        kept as f64 / 1e6,
        "MB",
    );
    let mut last = alloc::live_bytes();
    let mut parts = Vec::new();
    inc.drop_measured(&mut |what| {
        let now = alloc::live_bytes();
        parts.push(format!(
            "{what} {:.1} MB",
            last.saturating_sub(now) as f64 / 1e6
        ));
        last = now;
    });
    report.note(&format!(
        "{n}x{p} incremental state held: {}",
        parts.join(", ")
    ));
}
