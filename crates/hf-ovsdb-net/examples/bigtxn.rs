//! A profiling driver for a cold SB: one transaction inserting `D` `Datapath_Binding`s (first
//! argument, default 500) and 200 `Logical_Flow`s on each (100k rows at the default), against a
//! server core holding one unconditional monitor of `Logical_Flow` (northd's) and `M` (second
//! argument, default 1000) chassis monitors, each conditional on the flows of 5 datapaths.
//! Prints the wall time of each phase of the big-transaction path, done step by step with the
//! library's own functions: framing + JSON parse, execute (validation, commit checks), file
//! record encoding, file write, apply, matching changes to monitors (naive: every condition of
//! every monitor; indexed: [`CondIndex`]), and encoding the updates; then the same transaction
//! through [`Core::handle`] (what runs under the server's lock) and the encoding of its pending
//! updates (what runs outside it). One run, wall clock: for orientation, not a benchmark.
// A driver is an I/O shell: it reads the clock and writes files.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Instant;

use hf_ovsdb::cond_index::CondIndex;
use hf_ovsdb::file::{WriteOptions, encode_delta_record_with};
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};
use hf_ovsdb::{Database, Monitor, MonitorVersion, Schema};
use hf_ovsdb_net::framing::Framer;
use hf_ovsdb_net::server::{Config, Core, Now, ShellOutput};
use serde_json::{Value, json};

const SB_SCHEMA: &str = include_str!("../../../schemas/ovn-sb.ovsschema");

fn big_txn(d: usize) -> Value {
    let mut ops = vec![json!("OVN_Southbound")];
    for i in 0..d {
        ops.push(
            json!({"op": "insert", "table": "Datapath_Binding", "uuid-name": format!("dp{i}"),
            "row": {"tunnel_key": i + 1, "external_ids": ["map", [["name", format!("ls{i}")]]]}}),
        );
        for j in 0..200 {
            ops.push(json!({"op": "insert", "table": "Logical_Flow", "row": {
                "logical_datapath": ["named-uuid", format!("dp{i}")],
                "pipeline": if j % 2 == 0 { "ingress" } else { "egress" },
                "table_id": j % 30, "priority": j * 10,
                "match": format!("inport == \"p{i}-{j}\" && ip4.src == 10.{}.{}.{}", i >> 8, i & 255, j),
                "actions": "next;",
                "external_ids": ["map", [["source", "northd.c:1234"], ["stage-name", "ls_in_acl"]]]}}));
        }
    }
    Value::Array(ops)
}

fn ms(t: Instant) -> String {
    format!("{:8.1} ms", t.elapsed().as_secs_f64() * 1e3)
}

fn monitor_req(dps: &[String]) -> Value {
    let cond: Vec<Value> = dps
        .iter()
        .map(|u| json!(["logical_datapath", "==", ["uuid", u]]))
        .collect();
    json!({"Logical_Flow": [{"columns": ["logical_datapath", "match", "actions", "priority", "table_id", "pipeline"], "where": cond}]})
}

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let d: usize = args.next().map_or(Ok(500), |a| a.parse())?;
    let m: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let schema = Arc::new(Schema::parse(SB_SCHEMA)?);
    let req = json!({"method": "transact", "params": big_txn(d), "id": 1}).to_string();
    println!("request: {} bytes, {} rows", req.len(), d * 201);

    // Step by step.
    let t = Instant::now();
    let mut framer = Framer::new(1 << 31);
    framer.push(req.as_bytes());
    let msg = framer.next_message().ok_or("no message")??;
    println!("frame + parse      {}", ms(t));
    let ops = msg["params"].as_array().ok_or("params")?[1..].to_vec();
    let mut db = Database::new(schema.clone(), 1);
    let t = Instant::now();
    let TxnOutcome::Commit { delta, .. } = execute(&mut db, &ops, &NoLocks) else {
        return Err("the transaction failed".into());
    };
    println!("execute            {}", ms(t));
    let t = Instant::now();
    let record = encode_delta_record_with(&schema, &delta, 0, WriteOptions::default());
    println!("record encode      {}  ({} bytes)", ms(t), record.len());
    let dir = tempfile::tempdir()?;
    let t = Instant::now();
    std::fs::write(dir.path().join("sb.db"), &record)?;
    println!("file write         {}", ms(t));
    let t = Instant::now();
    db.apply(&delta);
    println!("apply              {}", ms(t));
    let dp_table = schema.require_table("Datapath_Binding")?;
    let mut dps: Vec<String> = db.tables[dp_table]
        .rows
        .keys()
        .map(|u| u.to_string())
        .collect();
    dps.sort();
    let monitors: Vec<Monitor> = (0..m)
        .map(|k| {
            let mine: Vec<String> = (0..5)
                .map(|j| dps[(k * 5 + j) % dps.len()].clone())
                .collect();
            Monitor::from_json(&schema, &monitor_req(&mine), MonitorVersion::V3)
        })
        .collect::<Result<_, _>>()?;
    let delta = Arc::new(delta);
    let t = Instant::now();
    let mut naive_rows = 0usize;
    for mon in &monitors {
        let lf = &mon.tables[0];
        for (tt, changes) in &delta.tables {
            if *tt == lf.table {
                naive_rows += changes
                    .iter()
                    .filter(|c| c.new.as_deref().is_some_and(|r| lf.condition.eval(r)))
                    .count();
            }
        }
    }
    println!(
        "match, naive       {}  ({m} monitors x every row: {naive_rows} hits)",
        ms(t)
    );
    let t = Instant::now();
    let index = CondIndex::build(
        schema.tables.len(),
        monitors.iter().enumerate().map(|(i, m)| (i as u32, m)),
    );
    let mut hits = 0usize;
    let mut cand = Vec::new();
    for (tt, changes) in &delta.tables {
        for ch in changes {
            cand.clear();
            index.candidates(*tt, ch, &mut cand);
            hits += cand.len();
        }
    }
    println!(
        "match, indexed     {}  ({hits} hits, index built included)",
        ms(t)
    );
    let northd = Monitor::from_json(&schema, &json!({"Logical_Flow": [{}]}), MonitorVersion::V3)?;
    let t = Instant::now();
    let u = northd.updates(&schema, &delta).map(|v| v.to_string());
    println!(
        "encode, all rows   {}  ({} bytes, one unconditional monitor)",
        ms(t),
        u.map_or(0, |s| s.len())
    );

    // Through the core: what runs under the server's lock, and what the writers do after.
    let mut core = Core::new(Config::default(), 7);
    core.add_database(Database::new(schema.clone(), 1), None, vec![])?;
    let now = Now::default();
    let mon_all = core.connect(now);
    core.handle(
        mon_all,
        json!({"method": "monitor_cond_since", "params": ["OVN_Southbound", "n", {"Logical_Flow": [{}]}, null], "id": 0}),
        now,
    );
    // Chassis monitors on datapaths that do not exist yet: the conditions name tunnel keys'
    // datapaths by UUID, which the core gives in the same order as the step-by-step database
    // (same seed).
    for (k, _) in monitors.iter().enumerate() {
        let s = core.connect(now);
        let mine: Vec<String> = (0..5)
            .map(|j| dps[(k * 5 + j) % dps.len()].clone())
            .collect();
        core.handle(
            s,
            json!({"method": "monitor_cond_since", "params": ["OVN_Southbound", "c", monitor_req(&mine), null], "id": 0}),
            now,
        );
    }
    let _ = core.poll_shell_output().count();
    let writer = core.connect(now);
    let t = Instant::now();
    core.handle(writer, msg, now);
    let outs: Vec<ShellOutput> = core.poll_shell_output().collect();
    println!(
        "core.handle        {}  (under the lock: execute, record, apply, match)",
        ms(t)
    );
    let t = Instant::now();
    let mut sent = 0usize;
    let mut bytes = 0usize;
    for o in &outs {
        if let ShellOutput::Update(_, u) = o
            && let Some(b) = u.encode()
        {
            sent += 1;
            bytes += b.len();
        }
    }
    println!(
        "encode updates     {}  ({sent} notifications, {bytes} bytes; outside the lock)",
        ms(t)
    );
    Ok(())
}
