//! `migration`: incident C's live migration in the simulator (`hf_sim::world::incident_c`),
//! measured in simulated time: a VM with its own egress address (a distributed
//! `dnat_and_snat`), a Neutron-style security group and 10,000 established conntrack entries
//! besides its real streams migrates back and forth between two hypervisors, each time with a
//! 30 ms pause (DESIGN's hypervisor downtime), while a paced download from the external host
//! (through the provider network) and a paced east-west upload run.
//!
//! Per migration the stall is the longest gap in in-order progress over both streams and both
//! of their ends (the receiving end of the data and the sender's ACK advances), in fresh streams
//! that live across that migration only. Reported:
//!
//! - `stall_p50/...`, `stall_p99/...` (ms, simulated; goal: p99 <= 40 ms with a 30 ms pause);
//! - `segments_retransmitted/...` and `retransmission_timeouts/...` over every stream (goal: 0);
//! - `transfer_bytes/...` (bytes of conntrack state moved per migration, all batches), and
//!   `final_delta_ms_p50/99/...`: from the VM's announcement at the destination to the release
//!   of what it held (the final delta's round trip and import).
//!
//! `--tiny`: 2 migrations of a VM with 100 synthetic entries.

// A benchmark reads the wall clock (only for its note on how long the run took).
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use hf_sim::world::incident_c::{self, EXT, PEER, VM, ip};
use hf_sim::world::{MigrationPlan, World};

use crate::{Opts, Report};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[k.min(sorted.len() - 1)]
}

/// The stall, retransmissions and timeouts of a set of streams, over both ends of each (a far
/// end's connection is the one whose peer port is the VM's: the floating IP keeps ports).
fn stream_figures(w: &World, s: &incident_c::Streams) -> (u64, u64, u64) {
    let mut recs = Vec::new();
    for n in [&s.download, &s.east_west] {
        let Some(r) = w.tcp_record(VM, n) else {
            continue;
        };
        let port = r.local.rsplit_once(':').map(|(_, p)| p.to_string());
        recs.push(r);
        for h in [EXT, PEER] {
            let Some(host) = w.host(h) else { continue };
            for f in host.tcp_names() {
                if let Some(far) = w.tcp_record(h, &f)
                    && far.remote.rsplit_once(':').map(|(_, p)| p.to_string()) == port
                {
                    recs.push(far);
                }
            }
        }
    }
    let stall = recs.iter().map(|r| r.stall_max_us).max().unwrap_or(0);
    let retx = recs.iter().map(|r| r.retransmitted_segments).sum();
    let rto = recs.iter().map(|r| r.retransmission_timeouts).sum();
    (stall, retx, rto)
}

/// Runs the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (migrations, entries) = if opts.tiny { (2, 100) } else { (100, 10_000) };
    let workload = format!(
        "{migrations}-migrations,{entries}-conntrack-entries,pause-30ms,dnat_and_snat+security-group,2-paced-tcp-streams"
    );
    report.note(&format!("incident C in the simulator: {workload}"));
    let mut w = incident_c::world(41);
    let added = w
        .add_synthetic_connections(VM, ip("198.51.100.7"), entries)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    anyhow::ensure!(
        added >= u32::from(entries),
        "only {added} connections in the VM's zone"
    );
    let plan = MigrationPlan::default();
    let mut stalls = Vec::new();
    let mut finals = Vec::new();
    let mut bytes = Vec::new();
    let (mut retx, mut rto) = (0, 0);
    let mut moved_min = u64::MAX;
    let wall = std::time::Instant::now();
    for i in 0..migrations {
        // Fresh streams per migration: the stall of each is that migration's.
        let s = incident_c::start_streams(&mut w, 600_000);
        let to = if i % 2 == 0 { "hv2" } else { "hv1" };
        let m = w
            .migrate(VM, to, &plan)
            .map_err(|e| anyhow::anyhow!("migration {i} to {to}: {e}"))?;
        anyhow::ensure!(m.outcome == "completed", "migration {i}: {m:?}");
        let done = w.run_until(
            |w| {
                [&s.download, &s.east_west]
                    .iter()
                    .all(|n| w.tcp_record(VM, n).is_some_and(|r| r.outcome != "running"))
            },
            Duration::from_secs(10),
        );
        anyhow::ensure!(done, "migration {i}: the streams did not finish");
        let (stall, r, t) = stream_figures(&w, &s);
        stalls.push(stall as f64 / 1000.0);
        retx += r;
        rto += t;
        bytes.push(m.bytes_moved as f64);
        moved_min = moved_min.min(m.entries_moved);
        if let (Some(a), Some(b)) = (m.activated_us, m.released_us) {
            finals.push(b.saturating_sub(a) as f64 / 1000.0);
        }
    }
    stalls.sort_by(f64::total_cmp);
    finals.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    report.result(
        &format!("stall_p50/{workload}"),
        percentile(&stalls, 50.0),
        "ms",
    );
    report.result(
        &format!("stall_p99/{workload}"),
        percentile(&stalls, 99.0),
        "ms",
    );
    report.result(
        &format!("segments_retransmitted/{workload}"),
        retx as f64,
        "segments",
    );
    report.result(
        &format!("retransmission_timeouts/{workload}"),
        rto as f64,
        "timeouts",
    );
    report.result(&format!("transfer_bytes/{workload}"), mean(&bytes), "bytes");
    report.result(
        &format!("final_delta_ms_p50/{workload}"),
        percentile(&finals, 50.0),
        "ms",
    );
    report.result(
        &format!("final_delta_ms_p99/{workload}"),
        percentile(&finals, 99.0),
        "ms",
    );
    report.note(&format!(
        "every migration moved at least {moved_min} connections; {:.1} s of wall time",
        wall.elapsed().as_secs_f64()
    ));
    Ok(())
}
