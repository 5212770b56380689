//! `fanout`: one NB change reaching a thousand chassis. One process holds holdfast's OVSDB
//! server core (NB and SB, `hf-sim`'s in-memory `Db`), holdfast northd's core and 1,000 chassis
//! (a controller core with conditional monitoring and a datapath core each, joined by the
//! control protocol's bytes), all sans-I/O and stepped in turn on one thread (`hf-sim`'s world
//! parts, without its hosts and links). `--tiny`: 20 chassis of 4 ports;
//! `HF_BENCH_FANOUT_CHASSIS=N` chooses another count.
//!
//! The topology (issue 20): N switches of 20 VIFs, switch `ls{i}`'s ports on chassis `hv{i}`
//! (`requested-chassis`, and attached to that chassis's datapath); the switches joined in groups
//! of 10 by N/10 routers (no hub), so each chassis needs about 1 % of SB. A port group `pg_all`
//! holds one port of every switch.
//!
//! Figures:
//! - `fanout_N_chassis_nb_change_to_all_programs` (ms): an ACL added to `pg_all`, from the NB
//!   commit until every chassis's datapath runs a program holding it (checked afterwards: each
//!   chassis's own switch has a flow with the ACL's match), **as a deployment runs it**: the
//!   chassis on their own hosts, in parallel. Everything here runs on one thread, so the suite
//!   times each part of each round (the server's share of every step by [`Db::set_stopwatch`])
//!   and adds, round by round, northd's own time, the server's (one process: every session's
//!   share in turn) and the slowest chassis's own time; the figure is that sum up to the round
//!   in which the last chassis's program changed. It leaves out the network and any
//!   contention on the server between sessions.
//!   `..._one_thread` is the wall time on the one thread (every chassis in turn: about N times
//!   a chassis's work), `..._server` the server's share in all, `..._northd` (northd's steps,
//!   the server's work they cause included), `..._chassis_total` (every chassis's steps,
//!   including the server's work on its session) and `..._slowest_chassis` (the largest single
//!   chassis's share).
//! - `fanout_N_chassis_cold_start` (ms): from the chassis starting (SB already written) until
//!   nothing moves, for orientation.
//! - `fanout_N_chassis_db_heap` (MB): the server core's heap (NB and SB, and the sessions left
//!   after the chassis stopped), measured by the counting allocator as what remains after the
//!   chassis and northd are dropped; `..._northd_heap` (MB); `..._heap_per_chassis` (KB): the
//!   heap the chassis took (controller, datapath and their SB sessions on the server), divided
//!   by N.
//!
//! What it does not measure: a real SB server process and sockets (`hf-bench ovsdb` and
//! `northd` do), packet forwarding, real ovn-controllers (a thousand of them are out of reach on
//! one machine). There is no baseline.
// A benchmark is an I/O shell: it reads the clock.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hf_sim::world::chassis::Chassis;
use hf_sim::world::db::{Db, NB, txn_ok};
use hf_sim::world::northd::NorthdNode;
use hf_sim::world::{encap_ip, nb};
use serde_json::{Value, json};

use crate::alloc;
use crate::{Opts, Report};

/// Switches joined by one router.
const GROUP: usize = 10;
/// The measured ACL's distinguishing term, found again in each chassis's program.
const ACL_TERM: &str = "tcp.dst == 6789";
/// Steps without anything moving or a due timer before giving up.
const MAX_ROUNDS: usize = 10_000;

/// Runs the suite.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (n, p) = size(opts)?;
    let tag = format!("fanout_{n}_chassis");
    let now = Duration::from_secs(1);
    let h0 = alloc::live_bytes();

    let t = Instant::now();
    let mut db = Db::new(7, None, now).map_err(anyhow::Error::msg)?;
    db.set_stopwatch(clock);
    for g in 0..n.div_ceil(GROUP) {
        let members: Vec<usize> = (g * GROUP..((g + 1) * GROUP).min(n)).collect();
        let mut first = nb::router(&format!("lr{g}"));
        for &i in &members {
            first.extend(nb::switch(&format!("ls{i}")));
        }
        nb_txn(&mut db, first, now).with_context(|| format!("router lr{g} and its switches"))?;
        let mut second = Vec::new();
        for &i in &members {
            let (hi, lo) = (i / 256, i % 256);
            let lrp = format!("lr{g}-ls{i}");
            let net = format!("10.{hi}.{lo}.1/24");
            let mac = format!("02:00:00:{hi:02x}:{lo:02x}:01");
            second.extend(nb::router_port(&format!("lr{g}"), &lrp, &mac, &[&net]));
            second.extend(nb::patch(&format!("ls{i}"), &format!("ls{i}-lr"), &lrp));
            for j in 0..p {
                second.extend(nb::vif(
                    &format!("ls{i}"),
                    &format!("ls{i}-p{j}"),
                    &format!("0a:00:{hi:02x}:{lo:02x}:00:{j:02x}"),
                    &format!("10.{hi}.{lo}.{}", j + 10),
                    &format!("hv{i}"),
                ));
            }
        }
        nb_txn(&mut db, second, now).with_context(|| format!("the ports of group {g}"))?;
    }
    let pg_ports = select_uuids(&mut db, (0..n).map(|i| format!("ls{i}-p0")), now)?;
    nb_txn(
        &mut db,
        vec![json!({"op": "insert", "table": "Port_Group",
            "row": {"name": "pg_all", "ports": ["set", pg_ports]}})],
        now,
    )
    .context("the port group")?;
    let nb_ms = t.elapsed().as_secs_f64() * 1e3;

    let t = Instant::now();
    let mut northd = NorthdNode::new(7, now);
    let mut chassis: Vec<Chassis> = Vec::new();
    settle(&mut db, &mut northd, &mut chassis, now)?;
    if !northd.is_synced() {
        bail!("northd did not sync with the databases");
    }
    let northd_ms = t.elapsed().as_secs_f64() * 1e3;
    report.note(&format!(
        "{n} switches × {p} ports, {} routers: NB built in {nb_ms:.0} ms, northd's cold SB in {northd_ms:.0} ms",
        n.div_ceil(GROUP)
    ));

    let h_before_chassis = alloc::live_bytes();
    let t = Instant::now();
    for i in 0..n {
        let mut c = Chassis::new(&format!("hv{i}"), encap_ip(i).into(), now);
        for j in 0..p {
            let (hi, lo) = (i / 256, i % 256);
            c.add_port(
                &format!("ls{i}-p{j}"),
                Some([0x0a, 0, hi as u8, lo as u8, 0, j as u8]),
            );
        }
        chassis.push(c);
    }
    let h_created = alloc::live_bytes().saturating_sub(h_before_chassis);
    settle(&mut db, &mut northd, &mut chassis, now)?;
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let h_chassis = alloc::live_bytes().saturating_sub(h_before_chassis);
    for (i, c) in chassis.iter().enumerate() {
        if c.datapath().generation() == 0 {
            bail!("chassis hv{i} never installed a program after the cold start");
        }
    }

    // The measured change (the note marks its start, for a profiler attached from outside).
    report.note(&format!(
        "cold start done in {cold_ms:.0} ms; adding the measured ACL"
    ));
    let gen0: Vec<u64> = chassis.iter().map(|c| c.datapath().generation()).collect();
    let mut changed_at = vec![None; n];
    let mut per_chassis = vec![Duration::ZERO; n];
    let mut northd_time = Duration::ZERO;
    let t0 = Instant::now();
    nb_txn(
        &mut db,
        vec![
            json!({"op": "insert", "table": "ACL", "uuid-name": "acl_new",
                "row": {"direction": "to-lport", "priority": 1001, "match": format!("outport == @pg_all && ip4 && {ACL_TERM}"),
                    "action": "allow-related"}}),
            json!({"op": "mutate", "table": "Port_Group", "where": [["name", "==", "pg_all"]],
                "mutations": [["acls", "insert", ["set", [["named-uuid", "acl_new"]]]]]}),
        ],
        now,
    )
    .context("the ACL")?;
    // With the chassis on their own hosts, a round costs northd's own time, the server's
    // (one process, every session's share in turn), and the slowest chassis's own time.
    let mut rounds = 0;
    let mut parallel = Duration::ZERO;
    let mut parallel_at = vec![None; n];
    let mut server_time = Duration::ZERO;
    loop {
        rounds += 1;
        let s = Instant::now();
        let busy = db.server_busy();
        let mut moved = northd.step(&mut db, now);
        let northd_round = s.elapsed();
        let northd_server = db.server_busy() - busy;
        northd_time += northd_round;
        let mut round_server = northd_server;
        let mut round_chassis = Duration::ZERO;
        let mut changed_now = Vec::new();
        for (i, c) in chassis.iter_mut().enumerate() {
            let s = Instant::now();
            let busy = db.server_busy();
            moved |= c.step(&mut db, now);
            let done = Instant::now();
            let server = db.server_busy() - busy;
            per_chassis[i] += done - s;
            round_server += server;
            round_chassis = round_chassis.max((done - s).saturating_sub(server));
            if c.datapath().generation() != gen0[i] {
                if changed_at[i].is_none() {
                    changed_now.push(i);
                }
                changed_at[i] = Some(done - t0);
            }
        }
        server_time += round_server;
        parallel += northd_round.saturating_sub(northd_server) + round_server + round_chassis;
        for i in changed_now {
            parallel_at[i] = Some(parallel);
        }
        if !moved || rounds > MAX_ROUNDS {
            break;
        }
    }
    let mut missing = Vec::new();
    for (i, c) in chassis.iter().enumerate() {
        if !holds_acl(c, &format!("ls{i}")) {
            missing.push(format!("hv{i}"));
        }
    }
    if !missing.is_empty() {
        bail!(
            "{} chassis do not run the ACL after the change settled (first: {}); rounds: {rounds}",
            missing.len(),
            missing[0]
        );
    }
    let serial_ms = changed_at
        .iter()
        .map(|d| d.map(|d| d.as_secs_f64() * 1e3))
        .collect::<Option<Vec<f64>>>()
        .context("a chassis holds the ACL without a new program generation")?
        .into_iter()
        .fold(0.0, f64::max);
    let all_ms = parallel_at
        .iter()
        .map(|d| d.map(|d| d.as_secs_f64() * 1e3))
        .collect::<Option<Vec<f64>>>()
        .context("a chassis changed its program in no round")?
        .into_iter()
        .fold(0.0, f64::max);
    let chassis_total: Duration = per_chassis.iter().sum();
    let slowest = per_chassis.iter().max().copied().unwrap_or_default();

    // The replica of the first chassis, table by table (what conditional monitoring still
    // brings: rows and the heap they take loaded afresh), and the rows of every chassis's.
    if let Some(sb) = chassis[0].controller().map(|c| c.sb().model()) {
        let tables = replica_tables(sb)?;
        let (rows, bytes) = tables.iter().fold((0, 0), |(r, b), t| (r + t.1, b + t.2));
        let mut big: Vec<_> = tables.iter().filter(|t| t.1 > 0).collect();
        big.sort_by_key(|t| std::cmp::Reverse(t.2));
        let list: Vec<String> = big
            .iter()
            .take(8)
            .map(|(t, r, b)| format!("{t} {r} rows {:.0} KB", *b as f64 / 1024.0))
            .collect();
        report.note(&format!(
            "hv0's SB replica: {rows} rows, {:.0} KB loaded afresh; largest: {}",
            bytes as f64 / 1024.0,
            list.join(", ")
        ));
        report.result(
            &format!("{tag}_replica_heap_hv0"),
            bytes as f64 / 1024.0,
            "KB",
        );
    }
    let all_rows: usize = chassis
        .iter()
        .filter_map(|c| c.controller().map(|c| c.sb().model().len()))
        .sum();
    report.note(&format!(
        "SB replica rows per chassis: {:.0} on average",
        all_rows as f64 / n as f64
    ));

    // Memory: stop the controllers (their share), drop the chassis (the datapaths' and their
    // sessions'), then northd; what remains is the server's.
    let h_running = alloc::live_bytes();
    for c in chassis.iter_mut() {
        c.stop_controller(&mut db, now);
    }
    settle(&mut db, &mut northd, &mut chassis, now)?;
    let h_controllers = h_running.saturating_sub(alloc::live_bytes());
    drop(chassis);
    let h_after_chassis = alloc::live_bytes();
    drop(northd);
    let h_northd_gone = alloc::live_bytes();
    let northd_heap = h_after_chassis.saturating_sub(h_northd_gone);
    let db_heap = h_northd_gone.saturating_sub(h0);
    drop(db);

    let msf = |d: Duration| d.as_secs_f64() * 1e3;
    report.note(&format!(
        "the ACL settled in {rounds} rounds; northd {:.1} ms, chassis {:.1} ms in all, slowest chassis {:.2} ms",
        msf(northd_time),
        msf(chassis_total),
        msf(slowest)
    ));
    report.result(&format!("{tag}_nb_change_to_all_programs"), all_ms, "ms");
    report.result(
        &format!("{tag}_nb_change_to_all_programs_one_thread"),
        serial_ms,
        "ms",
    );
    report.result(
        &format!("{tag}_nb_change_to_all_programs_server"),
        msf(server_time),
        "ms",
    );
    report.result(
        &format!("{tag}_nb_change_to_all_programs_northd"),
        msf(northd_time),
        "ms",
    );
    report.result(
        &format!("{tag}_nb_change_to_all_programs_chassis_total"),
        msf(chassis_total),
        "ms",
    );
    report.result(
        &format!("{tag}_nb_change_to_all_programs_slowest_chassis"),
        msf(slowest),
        "ms",
    );
    report.result(&format!("{tag}_cold_start"), cold_ms, "ms");
    let mb = |b: usize| b as f64 / (1024.0 * 1024.0);
    report.result(&format!("{tag}_db_heap"), mb(db_heap), "MB");
    report.result(&format!("{tag}_northd_heap"), mb(northd_heap), "MB");
    report.note(&format!(
        "heap per chassis: {:.0} KB as created (controller and datapath cores before any SB), {:.0} KB after the cold start",
        h_created as f64 / 1024.0 / n as f64,
        h_chassis as f64 / 1024.0 / n as f64
    ));
    report.note(&format!(
        "of the running chassis's heap: {:.0} KB per controller (replica, translation, last good, its pushes), the rest datapath",
        h_controllers as f64 / 1024.0 / n as f64
    ));
    report.result(
        &format!("{tag}_heap_per_chassis"),
        h_chassis as f64 / 1024.0 / n as f64,
        "KB",
    );
    Ok(())
}

/// The benchmark's monotonic clock for the server's stopwatch ([`Db::set_stopwatch`]).
fn clock() -> Duration {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

/// Per SB table of `sb`: its name, its rows, and the heap those rows take when loaded afresh
/// into an empty snapshot (through `<table-updates2>`, as the replica loads them; indexes
/// included).
fn replica_tables(sb: &hf_model::SbSnapshot) -> anyhow::Result<Vec<(&'static str, usize, usize)>> {
    struct V<'a> {
        sb: &'a hf_model::SbSnapshot,
        out: Vec<(&'static str, usize, usize)>,
        err: Option<String>,
    }
    impl hf_model::sb::TableVisitor for V<'_> {
        fn visit<T: hf_model::sb::SnapshotTable>(&mut self) {
            let rows = T::rows(self.sb);
            let json: serde_json::Map<String, Value> = rows
                .values()
                .map(|r| (r.uuid().to_string(), json!({"insert": r.to_json_row()})))
                .collect();
            let updates = json!({ T::NAME: json });
            let before = alloc::live_bytes();
            let mut fresh = hf_model::SbSnapshot::default();
            match fresh.apply_updates2(&updates) {
                Ok(d) => drop(d),
                Err(e) => self.err = Some(format!("{}: {e}", T::NAME)),
            }
            let bytes = alloc::live_bytes().saturating_sub(before);
            drop(fresh);
            self.out.push((T::NAME, rows.len(), bytes));
        }
    }
    let mut v = V {
        sb,
        out: Vec::new(),
        err: None,
    };
    hf_model::sb::for_each_table(&mut v);
    match v.err {
        Some(e) => bail!("reloading the replica: {e}"),
        None => Ok(v.out),
    }
}

/// `--tiny` 20 chassis × 4 ports, `HF_BENCH_FANOUT_CHASSIS=N` (× 20), else 1,000 × 20.
fn size(opts: &Opts) -> anyhow::Result<(usize, usize)> {
    if let Ok(v) = std::env::var("HF_BENCH_FANOUT_CHASSIS") {
        return match v.parse::<usize>() {
            Ok(n) if (1..=60_000).contains(&n) => Ok((n, 20)),
            _ => bail!("HF_BENCH_FANOUT_CHASSIS={v:?}: expected a chassis count from 1 to 60000"),
        };
    }
    Ok(if opts.tiny { (20, 4) } else { (1000, 20) })
}

fn nb_txn(db: &mut Db, ops: Vec<Value>, now: Duration) -> anyhow::Result<()> {
    let reply = db.transact(NB, ops, now).map_err(anyhow::Error::msg)?;
    txn_ok(&reply).map_err(anyhow::Error::msg)
}

/// The `["uuid", U]` of each named `Logical_Switch_Port`.
fn select_uuids(
    db: &mut Db,
    names: impl Iterator<Item = String>,
    now: Duration,
) -> anyhow::Result<Vec<Value>> {
    let ops: Vec<Value> = names
        .map(|nm| {
            json!({"op": "select", "table": "Logical_Switch_Port",
                "where": [["name", "==", nm]], "columns": ["_uuid"]})
        })
        .collect();
    let want = ops.len();
    let reply = db.transact(NB, ops, now).map_err(anyhow::Error::msg)?;
    let out: Vec<Value> = reply["result"]
        .as_array()
        .context("select: no result")?
        .iter()
        .filter_map(|r| r["rows"].get(0).map(|row| row["_uuid"].clone()))
        .collect();
    if out.len() != want {
        bail!("found {} of {want} port-group members in NB", out.len());
    }
    Ok(out)
}

/// Steps everything until nothing moves (the clock stays at `now`).
fn settle(
    db: &mut Db,
    northd: &mut NorthdNode,
    chassis: &mut [Chassis],
    now: Duration,
) -> anyhow::Result<()> {
    for _ in 0..MAX_ROUNDS {
        let mut moved = northd.step(db, now);
        for c in chassis.iter_mut() {
            moved |= c.step(db, now);
        }
        if !moved {
            return Ok(());
        }
    }
    bail!("still moving after {MAX_ROUNDS} rounds")
}

/// Whether `c`'s running program has the measured ACL on datapath `ls`.
fn holds_acl(c: &Chassis, ls: &str) -> bool {
    c.datapath().program().is_some_and(|p| {
        p.datapaths
            .iter()
            .filter(|d| d.name == ls)
            .any(|d| d.flows.iter().any(|f| f.matches.contains(ACL_TERM)))
    })
}
