//! `expr`: parse + type-check + normalise throughput of hf-expr over the real corpus: every
//! logical flow real ovn-northd 23.03 emitted for the NB that `crates/hf-expr/tests/ovn_corpus.sh`
//! builds (the committed dumps, chassis with and without 23.03's features), in flows per second
//! on one core.

use crate::{Opts, Report};
use hf_expr::lflow_list::{Flow, parse_dump};
use hf_expr::normalize::{Limits, Normalizer, Sets};
use hf_expr::{Constant, SymbolTable, parse_actions, parse_match};
use std::time::{Duration, Instant};

const DUMPS: &[&str] = &[
    include_str!("../../../hf-expr/tests/data/ovn-23.03-lflows.txt"),
    include_str!("../../../hf-expr/tests/data/ovn-23.03-lflows-legacy-chassis.txt"),
];

/// The address sets and port groups the corpus NB defines, so that normalisation expands them.
fn corpus_sets() -> Sets {
    let mut s = Sets::default();
    let ip = |t: &str| -> Constant {
        let (a, p) = t.split_once('/').unwrap_or((t, ""));
        let mut c = match a.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(v)) => Constant::ipv4(v),
            Ok(std::net::IpAddr::V6(v)) => Constant::ipv6(v),
            Err(_) => Constant::dec(0),
        };
        if let Ok(n) = p.parse() {
            c.mask = Some(hf_expr::Mask::Prefix(n));
        }
        c
    };
    for (name, members) in [
        (
            "web_clients",
            &["10.0.0.11", "10.0.0.12", "20.0.0.0/24"][..],
        ),
        ("web6", &["aef0::11", "bef0::/64"][..]),
        ("ext_exempt", &["172.168.0.50", "172.168.0.51"][..]),
        ("ext_allowed", &["172.168.0.60"][..]),
        ("pg_web_ip4", &["10.0.0.11", "20.0.0.14"][..]),
        ("pg_web_ip6", &["aef0::11", "bef0::14"][..]),
        ("pg_db_ip4", &["10.0.0.12", "20.0.0.15"][..]),
    ] {
        s.addr_sets
            .insert(name.into(), members.iter().map(|m| ip(m)).collect());
    }
    s.port_groups
        .insert("pg_web".into(), vec!["vm1".into(), "vm4".into()]);
    s.port_groups
        .insert("pg_db".into(), vec!["vm2".into(), "vm5".into()]);
    s
}

fn pass(
    flows: &[Flow],
    symtab: &SymbolTable,
    norm: &mut Normalizer<'_>,
    sets: &Sets,
) -> anyhow::Result<usize> {
    let mut atoms = 0;
    for f in flows {
        let e = parse_match(symtab, &f.match_text)
            .map_err(|e| anyhow::anyhow!("line {}: {e}", f.line))?;
        atoms += norm
            .normalize(&e, sets)
            .map_err(|e| anyhow::anyhow!("line {}: {e}", f.line))?
            .atom_count();
        atoms += parse_actions(symtab, &f.actions)
            .map_err(|e| anyhow::anyhow!("line {}: {e}", f.line))?
            .len();
    }
    Ok(atoms)
}

/// Runs the suite.
// The benchmark binary is an I/O shell: it may read the clock.
#[allow(clippy::disallowed_methods)]
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let mut flows = Vec::new();
    for d in DUMPS {
        let (f, errors) = parse_dump(d);
        anyhow::ensure!(
            errors.is_empty(),
            "corpus dump has unreadable lines: {errors:?}"
        );
        flows.extend(f);
    }
    let symtab = SymbolTable::shared();
    let sets = corpus_sets();
    let mut norm = Normalizer::new(symtab, Limits::default());
    // Warm-up (also fills the normaliser's predicate cache, as a long-running controller would).
    let mut sink = pass(&flows, symtab, &mut norm, &sets)?;
    let budget = if opts.tiny {
        Duration::ZERO
    } else {
        Duration::from_secs(3)
    };
    let start = Instant::now();
    let cpu_start = thread_cpu();
    let mut done = 0usize;
    loop {
        sink = sink.wrapping_add(pass(&flows, symtab, &mut norm, &sets)?);
        done += flows.len();
        if start.elapsed() >= budget {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let cpu_secs = (thread_cpu() - cpu_start).max(1e-9);
    report.note(&format!(
        "real corpus: {} flows from OVN 23.03 (two chassis-feature variants), {done} flows timed, checksum {sink}",
        flows.len()
    ));
    // On a shared machine wall-clock time includes time other processes held the core; the
    // thread's own CPU time is what one core spends.
    report.result(
        &format!(
            "parse_typecheck_normalize_real_corpus_{}_flows_1_core",
            flows.len()
        ),
        done as f64 / cpu_secs,
        "flows/s",
    );
    report.result(
        &format!(
            "parse_typecheck_normalize_real_corpus_{}_flows_wall_clock",
            flows.len()
        ),
        done as f64 / secs,
        "flows/s",
    );
    Ok(())
}

/// This thread's CPU time in seconds.
fn thread_cpu() -> f64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
        .unwrap_or(0.0)
}
