//! `conntrack`: `hf-conntrack` on one core.
//!
//! - `new_connections/...`: commits of TCP SYNs with distinct tuples into an empty table, plain
//!   and with SNAT port allocation (conn/s; goal at least 1 M/s).
//! - `lookups/...`: `ct_next`-style lookups (with TCP window tracking) of packets drawn uniformly
//!   at random, both directions, across 10,000 established connections (lookups/s).
//! - `bytes_per_entry/...`: heap growth over one million connections divided by one million,
//!   measured with hf-bench's counting allocator (goal at most 256).
//!
//! Packets are parsed once up front; the loops time conntrack alone.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_conntrack::{Config, Conntrack, CtAction, NatRange, Owner};
use hf_wire::{Parsed, parse, tcp_flags};

use crate::{Opts, Report};

/// Nanoseconds this thread has run on a CPU (Linux `schedstat`), if the kernel says.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// How long a timed section took: on-CPU time of this thread when the kernel reports it (the
/// machine is shared with builds, so wall time would measure them too), and wall time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Took {
    cpu: Option<Duration>,
    wall: Duration,
}

impl Took {
    /// The time rates are computed from: on-CPU time when known, wall time otherwise.
    pub(crate) fn secs(&self) -> f64 {
        self.cpu.unwrap_or(self.wall).as_secs_f64()
    }
}

/// Runs `f` and says how long it took (benchmarks are the one place that reads the clock).
#[allow(clippy::disallowed_methods)]
pub(crate) fn timed<R>(f: impl FnOnce() -> R) -> (R, Took) {
    let c0 = thread_cpu_ns();
    let t = Instant::now();
    let r = f();
    let wall = t.elapsed();
    let cpu = c0
        .zip(thread_cpu_ns())
        .map(|(a, b)| Duration::from_nanos(b.saturating_sub(a)));
    (r, Took { cpu, wall })
}

/// Runs `f` `reps` times and keeps the fastest run's result.
fn best_of<T>(
    reps: usize,
    mut f: impl FnMut() -> anyhow::Result<(Took, T, usize)>,
) -> anyhow::Result<(Took, T, usize)> {
    let mut best = f()?;
    for _ in 1..reps {
        let r = f()?;
        if r.0.secs() < best.0.secs() {
            best = r;
        }
    }
    Ok(best)
}

/// A note with both clocks, so a reader can see how loaded the machine was.
pub(crate) fn clocks_note(report: &Report, what: &str, n: f64, took: Took) {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?").to_string();
    report.note(&format!(
        "{what}: {:.0}/s by on-CPU time ({}), {:.0}/s by wall time ({:.3} s); load average {load}",
        took.cpu.map_or(f64::NAN, |c| n / c.as_secs_f64()),
        took.cpu
            .map_or("unknown".into(), |c| format!("{:.3} s", c.as_secs_f64())),
        n / took.wall.as_secs_f64(),
        took.wall.as_secs_f64(),
    ));
}

fn segment(
    from: (IpAddr, u16),
    to: (IpAddr, u16),
    flags: u16,
    seq_ack: (u32, u32),
    len: usize,
) -> anyhow::Result<Parsed> {
    Ok(parse(
        &tcp_frame(&Seg::new(from, to, flags, seq_ack, len)),
        0,
        0,
    )?)
}

/// Commits `n` SYNs with distinct tuples; returns (elapsed, heap growth in bytes).
fn commit_many(n: u32, snat: bool) -> anyhow::Result<(Took, usize, usize)> {
    let syn = segment(
        (Ipv4Addr::new(10, 0, 0, 1).into(), 1),
        (Ipv4Addr::new(192, 0, 2, 1).into(), 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    )?;
    let act = if snat {
        CtAction::commit(Owner(1)).snat(NatRange {
            addr_min: Ipv4Addr::new(198, 51, 100, 1).into(),
            addr_max: Ipv4Addr::new(198, 51, 100, 4).into(),
            port_min: 1024,
            port_max: 65535,
        })
    } else {
        CtAction::commit(Owner(1))
    };
    let before = crate::alloc::live_bytes();
    let mut ct = Conntrack::new(Config {
        max_connections: n as usize * 2,
        ..Config::default()
    });
    let now = Duration::from_secs(1);
    let mut p = syn;
    let ((), el) = timed(|| {
        for i in 0..n {
            // 16 sources per /24, 4,096 ports each; with SNAT, 16 peers share the external range.
            p.key.ip4_src = Ipv4Addr::from(0x0a00_0000 | (i >> 12));
            p.key.tp_src = 1024 + (i & 0xfff) as u16;
            p.key.ip4_dst = Ipv4Addr::from(0xc000_0200 | (i & 0xf));
            black_box(ct.process(1, black_box(&p), now, &act));
        }
    });
    let grown = crate::alloc::live_bytes().saturating_sub(before);
    let len = ct.len();
    drop(ct);
    Ok((el, grown, len))
}

pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (n_new, n_est, n_lookups) = if opts.tiny {
        (10_000u32, 1_000u32, 100_000usize)
    } else {
        (1_000_000, 10_000, 10_000_000)
    };
    let label = if opts.tiny { "10k" } else { "1M" };

    // Best of `reps` runs: the machine is shared, and a slow run measures the neighbours.
    let reps = if opts.tiny { 1 } else { 3 };
    let (el, grown, len) = best_of(reps, || commit_many(n_new, false))?;
    anyhow::ensure!(
        len == n_new as usize,
        "only {len} of {n_new} connections were created"
    );
    report.result(
        &format!("new_connections/tcp-syn-commit,{label}-distinct,empty-table"),
        f64::from(n_new) / el.secs(),
        "conn/s",
    );
    clocks_note(report, "new_connections", f64::from(n_new), el);
    let per_entry = grown as f64 / f64::from(n_new);
    report.result(
        &format!("bytes_per_entry/tcp,{label}-entries"),
        per_entry,
        "bytes",
    );
    report.note(&format!(
        "bytes_per_entry: heap growth {grown} bytes over {n_new} connections (goal: at most 256)"
    ));
    let (el, _, len) = best_of(reps, || commit_many(n_new, true))?;
    anyhow::ensure!(
        len == n_new as usize,
        "only {len} of {n_new} SNAT connections were created"
    );
    report.result(
        &format!("new_connections/tcp-syn-commit-snat-4-ips,{label}-distinct,empty-table"),
        f64::from(n_new) / el.secs(),
        "conn/s",
    );
    clocks_note(report, "new_connections with SNAT", f64::from(n_new), el);

    // 10,000 established connections, then packets drawn uniformly at random across them.
    let mut ct = Conntrack::new(Config::default());
    let now = Duration::from_secs(1);
    let server: IpAddr = Ipv4Addr::new(192, 0, 2, 1).into();
    // Each lookup writes one connection's addresses into a hot packet template per direction,
    // as a datapath's freshly parsed packet would be in cache; the table is what is cold.
    let (c, s) = (1_000u32, 9_000u32);
    let mut conns = Vec::with_capacity(n_est as usize);
    for i in 0..n_est {
        let client = Ipv4Addr::from(0x0a00_0000 | (i >> 8));
        let port = 20_000 + (i & 0xff) as u16;
        let cl: IpAddr = client.into();
        let synack = tcp_flags::SYN | tcp_flags::ACK;
        let steps = [
            segment((cl, port), (server, 80), tcp_flags::SYN, (c, 0), 0)?,
            segment((server, 80), (cl, port), synack, (s, c + 1), 0)?,
            segment((cl, port), (server, 80), tcp_flags::ACK, (c + 1, s + 1), 0)?,
        ];
        for p in &steps {
            ct.process(1, p, now, &CtAction::commit(Owner(1)));
        }
        conns.push((client, port));
    }
    let mut templates = [
        segment(
            (server, 1),
            (server, 80),
            tcp_flags::ACK,
            (c + 1, s + 1),
            100,
        )?,
        segment(
            (server, 80),
            (server, 1),
            tcp_flags::ACK,
            (s + 1, c + 1),
            100,
        )?,
    ];
    anyhow::ensure!(
        ct.len() == n_est as usize,
        "handshakes left {} connections",
        ct.len()
    );
    // Uniform random draws (xorshift64*), precomputed so the loop times conntrack only.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let draws: Vec<u32> = (0..n_lookups.min(1 << 20))
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 % (2 * n_est)
        })
        .collect();
    let act = CtAction::lookup();
    let mut lookup_pass = || {
        timed(|| {
            let mut invalid = 0u64;
            for k in 0..n_lookups {
                let d = draws[k % draws.len()] as usize;
                let (client, port) = conns[d >> 1];
                let p = &mut templates[d & 1];
                if d & 1 == 0 {
                    p.key.ip4_src = client;
                    p.key.tp_src = port;
                } else {
                    p.key.ip4_dst = client;
                    p.key.tp_dst = port;
                }
                let r = ct.process(1, black_box(p), now, &act);
                invalid += u64::from(r.state.contains(hf_conntrack::CtState::INV));
            }
            invalid
        })
    };
    let mut best: Option<Took> = None;
    for _ in 0..reps {
        let (invalid, took) = lookup_pass();
        anyhow::ensure!(invalid == 0, "{invalid} lookups were invalid");
        if best.is_none_or(|b| took.secs() < b.secs()) {
            best = Some(took);
        }
    }
    let el = best.ok_or_else(|| anyhow::anyhow!("no lookup pass ran"))?;
    report.result(
        &format!("lookups/tcp-est-window-tracked,{n_est}-conns,uniform-random,both-dirs"),
        n_lookups as f64 / el.secs(),
        "lookups/s",
    );
    clocks_note(report, "lookups", n_lookups as f64, el);
    report.note(
        "Linux conntrack baseline not measured: it needs netfilter rules and a packet generator \
         in a network namespace, and per-packet kernel figures are not comparable to this \
         in-process loop without them",
    );
    Ok(())
}
