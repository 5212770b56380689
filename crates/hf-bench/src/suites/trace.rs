//! `trace`: `holdfast trace` side by side with real `ovn-trace` on the SB real `ovn-northd`
//! writes into real `ovsdb-server` for the NB `shared/bench/gen_topo.py` builds (500 switches ×
//! 40 ports; `--tiny`: 5 × 4). The traced packet goes from a VIF of the last switch across the
//! distributed router, the join switch and the gateway router (SNAT) to the external host.
//!
//! Figures (the workload is in the names):
//! - `cli_trace_NxP_end_to_end`: one `holdfast trace` process from start to exit (connect,
//!   fetch what the path reaches, translate, compile, trace, print) beside one `ovn-trace`
//!   process on the same question (baseline `ovn-trace-cli`); median of 3 (1 at full size for
//!   ovn-trace, which takes seconds); ms.
//! - `cli_trace_NxP_end_to_end_holdfast_db`: the same `holdfast trace` run against `holdfast
//!   db` serving a copy of that SB (its monitor conditions answered through the row index)
//!   (baseline `ovn-trace-cli` on ovsdb-server); median of 3; ms.
//! - `daemon_trace_NxP_per_trace`: the long-running mode, one request at a time over its unix
//!   socket after a warm-up, beside `ovn-trace --detach` answering the same unixctl `trace`
//!   request (`ovs-appctl -t CTL trace ...` sends exactly it; the request is sent directly so
//!   neither side pays for starting `ovs-appctl`) (baseline `ovn-trace-daemon`); mean; ms.
//! - `translate_compile_NxP_one_chassis_time` / `_heap_peak`: `hf_controller::translate` of the
//!   whole SB (already replicated) for one chassis plus `Program::compile`; ms and MB (the
//!   counting allocator's peak growth during the two steps).
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::central::{Daemon, daemon_args, gen_topo_central, ok};
use crate::alloc;
use crate::report::Better;
use crate::{Opts, Report};

/// The `holdfast` binary built beside this one (`cargo build --release` builds both).
fn holdfast_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join("holdfast");
    p.exists().then_some(p)
}

/// One unixctl request (OVS's JSON-RPC 1.0 over a unix socket, as `ovs-appctl` sends it);
/// returns the reply's `result` text.
pub fn unixctl(sock: &Path, method: &str, params: &[&str]) -> anyhow::Result<String> {
    let mut s = std::os::unix::net::UnixStream::connect(sock)
        .with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let req = serde_json::json!({"method": method, "params": params, "id": 0});
    s.write_all(req.to_string().as_bytes())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            bail!("{} closed the connection", sock.display());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut it = serde_json::Deserializer::from_slice(&buf).into_iter::<serde_json::Value>();
        if let Some(Ok(v)) = it.next() {
            if !v["error"].is_null() {
                bail!("{method} failed: {}", v["error"]);
            }
            return Ok(v["result"].as_str().unwrap_or_default().to_string());
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Wait for a unixctl socket to answer.
fn wait_ctl(sock: &Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        if unixctl(sock, "version", &[]).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{} never answered", sock.display())
}

/// Run the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (n, p) = if opts.tiny { (5, 4) } else { (500, 40) };
    let Some(central) = gen_topo_central(report, n, p, &["ovn-trace"])? else {
        return Ok(());
    };
    let (d, sb) = (central.dir(), central.sb.clone());
    // hv1 hosts the gateway router; bind one VIF so residency is defined for it.
    ok(Command::new("ovn-sbctl").arg(format!("--db={sb}")).args([
        "chassis-add",
        "hv1",
        "geneve",
        "127.0.0.2",
    ]))?;

    // From the last switch's first VIF, across lr0, join and gw0 (SNAT) to the external host.
    let i = n - 1;
    let (a, b) = (1 + i / 256, i % 256);
    let dp = format!("ls{i}");
    let flow = format!(
        "inport == \"ls{i}-p0\" && eth.src == 0a:00:{:02x}:{:02x}:00:00 && \
         eth.dst == 02:01:{:02x}:{:02x}:00:01 && ip4.src == 10.{a}.{b}.10 && \
         ip4.dst == 172.16.0.100 && ip.ttl == 64 && tcp && tcp.src == 40000 && tcp.dst == 80",
        i >> 8,
        i & 255,
        i >> 8,
        i & 255
    );
    let size = format!("{n}x{p}");

    // --- one CLI trace, end to end ---------------------------------------------------------
    let runs_ovn = if opts.tiny { 3 } else { 1 };
    let mut theirs = Vec::new();
    let mut ovn_text = String::new();
    for _ in 0..runs_ovn {
        let t = Instant::now();
        ovn_text = ok(Command::new("ovn-trace")
            .arg(format!("--db={sb}"))
            .arg("--minimal")
            .arg(&dp)
            .arg(&flow))?;
        theirs.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let theirs_cli = median(theirs);
    if !ovn_text.contains("output(\"ext-host\")") {
        report.note(&format!(
            "warning: ovn-trace did not deliver the benchmark packet to ext-host:\n{ovn_text}"
        ));
    }
    match holdfast_bin().map(|bin| holdfast_cli(&bin, &sb, &dp, &flow)) {
        Some(Ok((ours, out))) => {
            if !out.contains("\"ext-host\"") {
                report.note(&format!(
                    "warning: holdfast trace did not deliver the benchmark packet to ext-host: {}",
                    out.chars().take(400).collect::<String>()
                ));
            }
            report.compare(
                &format!("cli_trace_{size}_end_to_end"),
                ours,
                "ms",
                Better::Lower,
                "ovn-trace-cli",
                theirs_cli,
            );
        }
        other => {
            match other {
                None => report.note(
                    "holdfast CLI figure skipped: no `holdfast` binary beside hf-bench \
                     (run `cargo build --release` first)",
                ),
                Some(Err(e)) => report.note(&format!("holdfast CLI figure skipped: {e:#}")),
                Some(Ok(_)) => {}
            }
            report.result(
                &format!("ovn_trace_cli_{size}_end_to_end"),
                theirs_cli,
                "ms",
            );
        }
    }

    // --- the same CLI against holdfast db, on a copy of the SB ------------------------------
    if let Some(bin) = holdfast_bin() {
        match holdfast_db_cli(&bin, d, &dp, &flow) {
            Ok((ours, out)) => {
                if !out.contains("\"ext-host\"") {
                    report.note(&format!(
                        "warning: holdfast trace on holdfast db did not deliver the benchmark packet to ext-host: {}",
                        out.chars().take(400).collect::<String>()
                    ));
                }
                report.compare(
                    &format!("cli_trace_{size}_end_to_end_holdfast_db"),
                    ours,
                    "ms",
                    Better::Lower,
                    "ovn-trace-cli",
                    theirs_cli,
                );
            }
            Err(e) => report.note(&format!("holdfast db CLI figure skipped: {e:#}")),
        }
    }

    // --- the long-running mode -------------------------------------------------------------
    let per = if opts.tiny { 5 } else { 50 };
    ok(Command::new("ovn-trace")
        .args(daemon_args(d, "ovn-trace"))
        .arg(format!("--db={sb}")))?;
    let _ovn_trace = Daemon::adopt(d, "ovn-trace");
    let ctl = d.join("ovn-trace.ctl");
    wait_ctl(&ctl)?;
    // The first request waits for the SB download.
    unixctl(&ctl, "trace", &[&dp, &flow])?;
    let t = Instant::now();
    for _ in 0..per {
        let r = unixctl(&ctl, "trace", &[&dp, &flow])?;
        std::hint::black_box(r);
    }
    let answer = unixctl(&ctl, "trace", &["--minimal", &dp, &flow])?;
    if !answer.contains("output(\"ext-host\")") {
        report.note(&format!(
            "warning: ovn-trace --detach did not deliver the benchmark packet to ext-host:\n{answer}"
        ));
    }
    let theirs_daemon = t.elapsed().as_secs_f64() * 1e3 / per as f64;
    match holdfast_daemon(d, &sb, &dp, &flow, per)? {
        Some(ours) => report.compare(
            &format!("daemon_trace_{size}_per_trace"),
            ours,
            "ms",
            Better::Lower,
            "ovn-trace-daemon",
            theirs_daemon,
        ),
        None => report.result(
            &format!("ovn_trace_daemon_{size}_per_trace"),
            theirs_daemon,
            "ms",
        ),
    }

    // --- translation and compile of the whole SB for one chassis ---------------------------
    translate_compile(report, &sb, &size)?;
    Ok(())
}

/// Median of 3 `holdfast trace --format json` runs, and the last one's output.
fn holdfast_cli(bin: &Path, sb: &str, dp: &str, flow: &str) -> anyhow::Result<(f64, String)> {
    let mut ours = Vec::new();
    let mut out = String::new();
    for _ in 0..3 {
        let t = Instant::now();
        out = ok(Command::new(bin)
            .arg("trace")
            .arg(format!("--db={sb}"))
            .arg("--format=json")
            .arg(dp)
            .arg(flow)
            .env("HOLDFAST_LOG", "warn"))?;
        ours.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok((median(ours), out))
}

/// [`holdfast_cli`] against `holdfast db` serving a copy of the SB file in `dir`.
fn holdfast_db_cli(bin: &Path, dir: &Path, dp: &str, flow: &str) -> anyhow::Result<(f64, String)> {
    let file = dir.join("hf-sb.db");
    std::fs::copy(dir.join("sb.db"), &file).context("copying the SB file")?;
    let sock = dir.join("hf-db.sock");
    ok(Command::new(bin)
        .arg("db")
        .args(daemon_args(dir, "hf-db"))
        .arg(format!("--remote=punix:{}", sock.display()))
        .arg(&file)
        .env("HOLDFAST_LOG", "warn"))?;
    let _db = Daemon::adopt(dir, "hf-db");
    let deadline = Instant::now() + Duration::from_secs(600);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        if Instant::now() > deadline {
            bail!("holdfast db never listened on {}", sock.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    holdfast_cli(bin, &format!("unix:{}", sock.display()), dp, flow)
}

/// The holdfast long-running mode's per-trace time (`holdfast trace --unixctl=SOCKET`, the
/// same unixctl `trace` request), or `None` (with a note) when it is not available.
fn holdfast_daemon(
    dir: &Path,
    sb: &str,
    dp: &str,
    flow: &str,
    per: usize,
) -> anyhow::Result<Option<f64>> {
    let Some(bin) = holdfast_bin() else {
        eprintln!(
            "[trace] holdfast long-running figure skipped: no `holdfast` binary beside hf-bench"
        );
        return Ok(None);
    };
    let ctl = dir.join("holdfast-trace.ctl");
    let mut child = Command::new(bin)
        .arg("trace")
        .arg(format!("--db={sb}"))
        .arg(format!("--unixctl={}", ctl.display()))
        .env("HOLDFAST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .context("starting holdfast trace --unixctl")?;
    let r = (|| -> anyhow::Result<f64> {
        let deadline = Instant::now() + Duration::from_secs(600);
        // The first answer waits for the SB rows the path needs.
        loop {
            match unixctl(&ctl, "trace", &[dp, flow]) {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let t = Instant::now();
        for _ in 0..per {
            let r = unixctl(&ctl, "trace", &[dp, flow])?;
            std::hint::black_box(r);
        }
        let ms = t.elapsed().as_secs_f64() * 1e3 / per as f64;
        let answer = unixctl(&ctl, "trace", &["--minimal", dp, flow])?;
        if !answer.contains("\"ext-host\"") {
            eprintln!(
                "[trace] warning: the holdfast long-running mode did not deliver the benchmark packet to ext-host:\n{answer}"
            );
        }
        Ok(ms)
    })();
    let _ = child.kill();
    let _ = child.wait();
    match r {
        Ok(ms) => Ok(Some(ms)),
        Err(e) => {
            eprintln!("[trace] holdfast long-running figure skipped: {e:#}");
            Ok(None)
        }
    }
}

/// Replicate the whole SB, then time `translate` for one chassis plus `Program::compile`, and
/// the heap they take.
fn translate_compile(report: &mut Report, sb: &str, size: &str) -> anyhow::Result<()> {
    use hf_model::SbSnapshot;
    use hf_ovsdb_net::client::{Client, Config};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let snap = rt.block_on(async {
        let (c, _ev) = Client::<SbSnapshot>::spawn(
            vec![sb.to_string()],
            Config {
                leader_only: false,
                ..Config::default()
            },
        );
        let synced = c
            .wait_until(Duration::from_secs(600), |r| r.is_synced())
            .await;
        synced.then(|| c.with(|r| r.model().clone()))
    });
    drop(rt);
    let snap = snap.context("the SB replica never synced")?;
    let opts = hf_controller::translate::TranslateOptions {
        chassis: Some("hv1".into()),
    };
    let base = alloc::reset_peak();
    let t = Instant::now();
    let tr = hf_controller::translate::translate(&snap, &opts);
    let (prog, errs) = hf_pipeline::Program::compile(&tr.spec)
        .map_err(|e| anyhow::anyhow!("the program does not compile: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let peak = alloc::peak().saturating_sub(base);
    report.note(&format!(
        "translate+compile for hv1: {} SB logical flows -> {} compiled flows, {} flow errors, {} row diagnostics",
        snap.logical_flow().len(),
        prog.flow_count(),
        errs.len(),
        tr.diagnostics.len()
    ));
    report.result(
        &format!("translate_compile_{size}_one_chassis_time"),
        ms,
        "ms",
    );
    report.result(
        &format!("translate_compile_{size}_one_chassis_heap_peak"),
        peak as f64 / (1024.0 * 1024.0),
        "MB",
    );
    drop(prog);
    Ok(())
}
