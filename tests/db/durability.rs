//! Durability: every acknowledged transaction survives SIGKILL, a torn last record is recovered,
//! compaction keeps every row, and `ovsdb-tool` reads the files holdfast writes.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::common::*;

fn names(addr: &str) -> HashMap<String, usize> {
    let mut rpc = Rpc::connect(addr);
    let r = rpc
        .call("transact", json!(["OVN_Northbound", {"op": "select", "table": "Logical_Switch", "where": [], "columns": ["name"]}]))
        .expect("select");
    let mut m = HashMap::new();
    for row in r["result"][0]["rows"].as_array().expect("rows") {
        *m.entry(row["name"].as_str().unwrap_or_default().to_string())
            .or_insert(0) += 1;
    }
    m
}

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut hf = HoldfastDb::start(dir.path(), &[("nb.db", &nb_schema())], &[]);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (addr, acked) = (hf.tcp_addr(), acked.clone());
        std::thread::spawn(move || {
            let mut rpc = Rpc::connect(&addr);
            for i in 0.. {
                let name = format!("d{i}");
                let r = rpc.call("transact", json!(["OVN_Northbound", {"op": "insert", "table": "Logical_Switch", "row": {"name": name, "other_config": ["map", [["i", i.to_string()]]]}}]));
                match r {
                    Some(r) if r["result"][0]["uuid"].is_array() => {
                        acked.lock().unwrap().push(name)
                    }
                    _ => break, // the server is gone
                }
            }
        })
    };
    while acked.lock().unwrap().len() < 400 {
        std::thread::sleep(Duration::from_millis(2));
    }
    hf.kill9();
    writer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 400);

    hf.restart();
    let got = names(&hf.tcp_addr());
    let missing: Vec<&String> = acked.iter().filter(|n| !got.contains_key(*n)).collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged transactions lost after SIGKILL, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        got.values().all(|c| *c == 1),
        "no transaction applied twice"
    );

    // ovsdb-tool reads the file holdfast wrote.
    if require("sigkill_mid_stream (ovsdb-tool part)", &["ovsdb-tool"]) {
        let log = run_ok(Command::new("ovsdb-tool").arg("show-log").arg(&hf.files[0]));
        assert!(
            log.lines().filter(|l| l.starts_with("record")).count() > acked.len(),
            "one record per transaction plus the schema"
        );
        let q = run_ok(Command::new("ovsdb-tool").arg("query").arg(&hf.files[0]).arg(
            r#"["OVN_Northbound",{"op":"select","table":"Logical_Switch","where":[],"columns":["name"]}]"#,
        ));
        let v: serde_json::Value = serde_json::from_str(&q).unwrap();
        assert_eq!(
            v[0]["rows"].as_array().unwrap().len(),
            got.len(),
            "ovsdb-tool sees the same rows"
        );
    }
}

#[test]
fn torn_last_record_is_truncated_and_compaction_keeps_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut hf = HoldfastDb::start(
        dir.path(),
        &[("nb.db", &nb_schema())],
        &["--compact-threshold", "30000"],
    );
    let mut rpc = Rpc::connect(&hf.tcp_addr());
    for i in 0..50 {
        let r = rpc.call("transact", json!(["OVN_Northbound", {"op": "insert", "table": "Logical_Switch", "row": {"name": format!("c{i}")}}])).unwrap();
        assert!(r["result"][0]["uuid"].is_array());
    }
    // Many updates of one row: the log grows, compaction must kick in and shrink it.
    for i in 0..400 {
        let r = rpc
            .call("transact", json!(["OVN_Northbound", {"op": "update", "table": "Logical_Switch", "where": [["name", "==", "c0"]], "row": {"other_config": ["map", [["n", i.to_string()], ["pad", "x".repeat(400)]]]}}]))
            .unwrap();
        assert_eq!(r["result"][0]["count"], 1);
    }
    drop(rpc);
    // Compactions run beside the commits (a compaction starts once the records queued before
    // it are written, on a blocking thread): give the last one a moment to land.
    let count = || {
        std::fs::read(&hf.files[0])
            .unwrap()
            .windows(11)
            .filter(|w| w == b"OVSDB JSON ")
            .count()
    };
    let mut records = count();
    for _ in 0..100 {
        if records < 300 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        records = count();
    }
    assert!(
        records < 300,
        "compaction rewrote the log ({records} records after 451 transactions)"
    );
    hf.kill9();
    // A crash in the middle of a write leaves a partial record behind.
    let mut data = std::fs::read(&hf.files[0]).unwrap();
    data.extend_from_slice(
        b"OVSDB JSON 512 0123456789abcdef0123456789abcdef01234567\n{\"Logical_Switch\":{\"",
    );
    std::fs::write(&hf.files[0], &data).unwrap();
    hf.restart();
    let got = names(&hf.tcp_addr());
    assert_eq!(got.len(), 50);
    let mut rpc = Rpc::connect(&hf.tcp_addr());
    let r = rpc.call("transact", json!(["OVN_Northbound", {"op": "select", "table": "Logical_Switch", "where": [["name", "==", "c0"]], "columns": ["other_config"]}])).unwrap();
    assert_eq!(
        r["result"][0]["rows"][0]["other_config"][1][0],
        json!(["n", "399"]),
        "the last update survived compaction and restart"
    );
    if require("torn_last_record (ovsdb-tool part)", &["ovsdb-tool"]) {
        run_ok(Command::new("ovsdb-tool").arg("show-log").arg(&hf.files[0]));
    }
}

#[test]
fn offline_compact_and_files_from_ovsdb_tool() {
    if !require("offline_compact_and_files_from_ovsdb_tool", &["ovsdb-tool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A file created and written by ovsdb-tool is served by holdfast.
    let f = dir.path().join("nb.db");
    run_ok(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(&f)
            .arg(nb_schema()),
    );
    run_ok(Command::new("ovsdb-tool").arg("transact").arg(&f).arg(
        r#"["OVN_Northbound",{"op":"insert","table":"Logical_Switch","row":{"name":"from-tool","other_config":["map",[["a","b"]]]}}]"#,
    ));
    run_ok(Command::new("ovsdb-tool").arg("transact").arg(&f).arg(
        r#"["OVN_Northbound",{"op":"update","table":"Logical_Switch","where":[],"row":{"other_config":["map",[["c","d"]]]}}]"#,
    ));
    run_ok(Command::new(holdfast()).args(["db", "compact"]).arg(&f));
    let log = run_ok(Command::new("ovsdb-tool").arg("show-log").arg(&f));
    assert_eq!(
        log.lines().filter(|l| l.starts_with("record")).count(),
        2,
        "schema plus one snapshot record:\n{log}"
    );
    let hf = HoldfastDb::start(dir.path(), &[("nb.db", &nb_schema())], &[]);
    let mut rpc = Rpc::connect(&hf.tcp_addr());
    let r = rpc.call("transact", json!(["OVN_Northbound", {"op": "select", "table": "Logical_Switch", "where": [], "columns": ["name", "other_config"]}])).unwrap();
    assert_eq!(
        r["result"][0]["rows"],
        json!([{"name": "from-tool", "other_config": ["map", [["c", "d"]]]}]),
        "ovsdb-tool's diff records replay exactly"
    );
}
