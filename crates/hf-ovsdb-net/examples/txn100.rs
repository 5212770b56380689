//! A profiling driver for the batched-transaction path: one session sends `N` (first argument,
//! default 20) `transact` requests of 100 `Logical_Switch_Port` inserts plus one `Logical_Switch`
//! (the workload of `hf-bench ovsdb`'s `txn_insert_100rows_pipelined4`) through the framer and
//! the server core, which writes its database file. A second session, when the second argument
//! is `monitor`, holds a `monitor_cond` on both tables. Run under
//! `valgrind --tool=callgrind` with two values of `N` to get the instructions per transaction.
//! It does not measure wall time nor the socket shells.
// A driver is an I/O shell: it writes files.
#![allow(clippy::disallowed_methods)]

use hf_ovsdb_net::framing::Framer;
use hf_ovsdb_net::server::{Config, Core, Now, Output};
use serde_json::{Value, json};

const NB_SCHEMA: &str = include_str!("../../../schemas/ovn-nb.ovsschema");

fn batch_insert(i: usize) -> Value {
    let mut ops = vec![json!("OVN_Northbound")];
    let mut ports = Vec::with_capacity(100);
    for j in 0..100 {
        let name = format!("b{i}-p{j}");
        ops.push(json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": format!("p{j}"), "row": {
            "name": name, "addresses": format!("0a:00:00:{:02x}:{:02x}:{:02x} 10.{}.{}.{}", (i >> 8) & 255, i & 255, j, (i >> 8) & 255, i & 255, j)}}));
        ports.push(json!(["named-uuid", format!("p{j}")]));
    }
    ops.push(json!({"op": "insert", "table": "Logical_Switch", "row": {"name": format!("b{i}"), "ports": ["set", ports]}}));
    Value::Array(ops)
}

pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(20), |a| a.parse())?;
    let with_monitor = args.next().as_deref() == Some("monitor");
    // Build every request up front so the count measures the server side only.
    let reqs: Vec<Vec<u8>> = (0..n)
        .map(|i| json!({"method": "transact", "params": batch_insert(i), "id": i}).to_string())
        .map(String::into_bytes)
        .collect();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("nb.db");
    hf_ovsdb_net::storage::create(&file, NB_SCHEMA)?;
    let loaded = hf_ovsdb_net::storage::open(&file, 1, 1000)?;
    let mut core = Core::new(Config::default(), 7);
    core.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)?;
    let now = Now::default();
    let sid = core.connect(now);
    if with_monitor {
        let m = core.connect(now);
        let req = json!({"method": "monitor_cond", "params": ["OVN_Northbound", "m",
            {"Logical_Switch_Port": [{"columns": ["name", "addresses"]}],
             "Logical_Switch": [{"columns": ["name", "ports"]}]}], "id": "mon"});
        core.handle(m, req, now);
        core.poll_output().for_each(drop);
    }
    let mut framer = Framer::new(1 << 30);
    let mut replies = 0usize;
    let mut bytes = 0usize;
    for r in &reqs {
        framer.push(r);
        while let Some(m) = framer.next_message() {
            core.handle(sid, m?, now);
        }
        for o in core.poll_output() {
            match o {
                Output::Send(s, b) => {
                    if s == sid {
                        replies += 1;
                    }
                    bytes += b.len();
                }
                other => return Err(format!("unexpected output {other:?}").into()),
            }
        }
    }
    if replies != n {
        return Err(format!("{replies} replies to {n} requests").into());
    }
    println!("{n} transactions, {bytes} bytes out");
    Ok(())
}
