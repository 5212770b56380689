//! `ovsdb-client`: the client replica's initial sync side by side with OVS's Python IDL
//! (`python3-openvswitch`) on the same data: the NB topology `shared/bench/gen_topo.py` builds
//! (500 switches × 40 ports; `--tiny`: 5 × 4) on a real `ovsdb-server`, and the SB real
//! `ovn-northd` compiles from it. Every table, every column, over a unix socket.
//!
//! Figures (the workload is in the names):
//! - `{nb,sb}_NxP_initial_sync_time`: from starting the client to a complete replica (connect,
//!   schema, `_Server`, monitor, typed rows); ms.
//! - `{nb,sb}_NxP_initial_sync_heap_peak_vs_tracemalloc_peak`: the replica's peak heap growth
//!   during the sync (a counting global allocator, `crate::alloc`) against the IDL's
//!   `tracemalloc` peak (measured in a separate run, since tracemalloc slows Python down); MB.
//! - `{nb,sb}_NxP_initial_sync_heap_peak_vs_rss_growth`: the same peak against the growth of
//!   the IDL process's RSS (`VmRSS` after the sync minus before; it includes what tracemalloc
//!   does not see, such as the C JSON parser's buffers); MB.
//! - `{nb,sb}_NxP_initial_sync_client_side_time`: the client's own share. ovsdb-server builds
//!   the whole reply before it sends the first byte, so the end-to-end ratio is bounded by the
//!   server. Both are the end-to-end time minus the server's time to first byte: ours as the
//!   core saw it (`Stats::last_sync_wait_ms`, from sending the monitor request to the first
//!   byte of the reply), the IDL's as a raw reader sees it for the same request (median of
//!   three). What remains is connection, handshake, transfer, parsing and typing; ms.
//! - `sbview_NxP_initial_sync_heap_{peak,after}`: the same peak for holdfast northd's lean SB
//!   replica (`hf_northd::daemon::SbView`, northd's columns), and what it holds after; MB.
//!
//! Development knobs: `HF_BENCH_CENTRAL_DBS=<dir>` serves copies of `<dir>/nb.db` and
//! `<dir>/sb.db` (saved from an earlier run) instead of building them, and
//! `HF_BENCH_SKIP_IDL=1` skips the Python baseline: for comparing builds in seconds.
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb_net::client::{Client, Config, Model};
use serde_json::Value;

use super::central::{NB_SCHEMA, PYTHON, SB_SCHEMA, gen_topo_central, ok};
use crate::alloc;
use crate::report::Better;
use crate::{Opts, Report};

const IDL_SCRIPT: &str = include_str!("../../scripts/idl_sync.py");

/// Result of one replica sync.
struct Sync {
    ms: f64,
    wait_ms: f64,
    rows: usize,
    peak: usize,
    live: usize,
}

fn sync_holdfast<M: Model>(remote: &str) -> anyhow::Result<Sync> {
    sync_holdfast_tables::<M>(remote, Vec::new())
}

/// [`sync_holdfast`] of the given table selection (empty: every table).
fn sync_holdfast_tables<M: Model>(
    remote: &str,
    tables: Vec<hf_ovsdb_net::client::TableSelect>,
) -> anyhow::Result<Sync> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let base = alloc::reset_peak();
    let start = Instant::now();
    let (client, events) = rt.block_on(async {
        let (c, ev) = Client::<M>::spawn(
            vec![remote.to_string()],
            Config {
                leader_only: false,
                tables,
                ..Config::default()
            },
        );
        let synced = c
            .wait_until(Duration::from_secs(600), |r| r.is_synced())
            .await;
        (synced.then_some(c), ev)
    });
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let client = client.context("the replica never synced")?;
    drop(events);
    let rows = client.with(|r| r.model().row_count());
    let wait_ms = client.with(|r| r.stats().last_sync_wait_ms) as f64;
    let peak = alloc::peak().saturating_sub(base);
    let live = alloc::live_bytes().saturating_sub(base);
    drop(client);
    drop(rt);
    Ok(Sync {
        ms,
        wait_ms,
        rows,
        peak,
        live,
    })
}

/// How long ovsdb-server takes to answer a `monitor_cond_since` of every table: (time to the
/// first byte, time to the last byte), for a reader that only collects the bytes.
fn server_delivery_ms(remote: &str, db: &str, schema: &str) -> anyhow::Result<(f64, f64)> {
    use std::io::{Read, Write};
    let path = remote.strip_prefix("unix:").context("a unix: remote")?;
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(schema)?)?;
    let tables: serde_json::Map<String, Value> = schema["tables"]
        .as_object()
        .context("schema tables")?
        .keys()
        .map(|t| (t.clone(), serde_json::json!([{}])))
        .collect();
    let req = serde_json::json!({"method": "monitor_cond_since", "id": 1, "params":
        [db, "raw", tables, "00000000-0000-0000-0000-000000000000"]});
    let mut s = std::os::unix::net::UnixStream::connect(path)?;
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    let start = Instant::now();
    s.write_all(req.to_string().as_bytes())?;
    let mut buf = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 1 << 20];
    let mut first = None;
    while !buf.ends_with(b"\"error\":null}") {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        first.get_or_insert_with(|| start.elapsed().as_secs_f64() * 1e3);
        buf.extend_from_slice(&chunk[..n]);
    }
    let last = start.elapsed().as_secs_f64() * 1e3;
    Ok((first.unwrap_or(last), last))
}

fn sync_python(script: &Path, remote: &str, schema: &str, mode: &str) -> anyhow::Result<Value> {
    let out = ok(Command::new(PYTHON)
        .arg(script)
        .arg(remote)
        .arg(schema)
        .arg(mode))?;
    Ok(serde_json::from_str(out.trim())?)
}

fn db_name(db: &str) -> String {
    if db == "nb" {
        "OVN_Northbound".into()
    } else {
        "OVN_Southbound".into()
    }
}

/// Run the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (n, p) = if opts.tiny { (5, 4) } else { (500, 40) };
    let Some(central) = gen_topo_central(report, n, p, &[])? else {
        return Ok(());
    };
    let (dir, nb, sb) = (central.dir(), central.nb.clone(), central.sb.clone());

    let script = dir.join("idl_sync.py");
    std::fs::write(&script, IDL_SCRIPT)?;
    let have_idl = std::env::var_os("HF_BENCH_SKIP_IDL").is_none()
        && Command::new(PYTHON)
            .arg("-c")
            .arg("import ovs.db.idl")
            .output()
            .is_ok_and(|o| o.status.success());
    if !have_idl {
        report.note(if std::env::var_os("HF_BENCH_SKIP_IDL").is_some() {
            "python-idl baseline skipped: HF_BENCH_SKIP_IDL is set"
        } else {
            "python-idl baseline skipped: python3-openvswitch is not installed"
        });
    }
    let size = format!("{n}x{p}");
    for (db, remote, schema) in [("nb", &nb, NB_SCHEMA), ("sb", &sb, SB_SCHEMA)] {
        let ours = if db == "nb" {
            sync_holdfast::<NbSnapshot>(remote)?
        } else {
            sync_holdfast::<SbSnapshot>(remote)?
        };
        let mb = |b: f64| b / (1024.0 * 1024.0);
        if db == "sb" {
            // holdfast northd's lean SB replica on the same data, with northd's columns.
            let view = sync_holdfast_tables::<hf_northd::daemon::SbView>(
                remote,
                hf_northd::daemon::SbView::tables(),
            )?;
            report.result(
                &format!("sbview_{size}_initial_sync_heap_peak"),
                mb(view.peak as f64),
                "MB",
            );
            report.result(
                &format!("sbview_{size}_initial_sync_heap_after"),
                mb(view.live as f64),
                "MB",
            );
        }
        if !have_idl {
            report.result(&format!("{db}_{size}_initial_sync_time"), ours.ms, "ms");
            report.result(
                &format!("{db}_{size}_initial_sync_heap_peak"),
                mb(ours.peak as f64),
                "MB",
            );
            continue;
        }
        let timed = sync_python(&script, remote, schema, "time")?;
        let traced = sync_python(&script, remote, schema, "memory")?;
        let py_rows = timed["rows"].as_u64().unwrap_or(0) as usize;
        if py_rows != ours.rows {
            report.note(&format!(
                "{db}: the replica holds {} rows, the IDL {py_rows}",
                ours.rows
            ));
        }
        let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        report.compare(
            &format!("{db}_{size}_initial_sync_time"),
            ours.ms,
            "ms",
            Better::Lower,
            "python-idl",
            f(&timed, "seconds") * 1e3,
        );
        report.compare(
            &format!("{db}_{size}_initial_sync_heap_peak_vs_tracemalloc_peak"),
            mb(ours.peak as f64),
            "MB",
            Better::Lower,
            "python-idl",
            mb(f(&traced, "tracemalloc_peak_bytes")),
        );
        report.compare(
            &format!("{db}_{size}_initial_sync_heap_peak_vs_rss_growth"),
            mb(ours.peak as f64),
            "MB",
            Better::Lower,
            "python-idl",
            mb(f(&timed, "rss_growth_bytes")),
        );
        let mut firsts = Vec::new();
        let mut lasts = Vec::new();
        for _ in 0..3 {
            let (first, last) = server_delivery_ms(remote, &db_name(db), schema)?;
            firsts.push(first);
            lasts.push(last);
        }
        firsts.sort_by(f64::total_cmp);
        lasts.sort_by(f64::total_cmp);
        let (first, last) = (firsts[1], lasts[1]);
        report.note(&format!(
            "{db}: ovsdb-server's first byte after {first:.0} ms, last after {last:.0} ms \
             (raw reader, median of 3), {:.0} ms for the replica; the replica holds {:.1} MB \
             of heap after the sync",
            ours.wait_ms,
            mb(ours.live as f64)
        ));
        report.compare(
            &format!("{db}_{size}_initial_sync_client_side_time"),
            (ours.ms - ours.wait_ms).max(1.0),
            "ms",
            Better::Lower,
            "python-idl",
            f(&timed, "seconds") * 1e3 - first,
        );
        report.note(&format!("{db}: {} rows", ours.rows));
    }
    Ok(())
}
