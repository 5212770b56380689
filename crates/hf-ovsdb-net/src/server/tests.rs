//! The protocol core driven directly, without sockets: monitors, history, locks, probes, waits.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

const SCHEMA: &str = r#"{"name": "T", "version": "1.0.0", "tables": {
  "S": {"isRoot": true, "columns": {"name": {"type": "string"}, "n": {"type": "integer"},
        "m": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}}}}}}"#;

fn core() -> Core {
    let mut c = Core::new(
        Config {
            probe_interval_ms: Some(1000),
            ..Config::default()
        },
        7,
    );
    let db = Database::new(Arc::new(hf_ovsdb::Schema::parse(SCHEMA).unwrap()), 1);
    c.add_database(db, None, vec![]).unwrap();
    c
}

fn now(ms: u64) -> Now {
    Now {
        mono_ms: ms,
        wall_ms: 1_000_000 + ms,
    }
}

/// Every message sent to `sid` since the last call, parsed.
/// Messages for other sessions stay queued.
fn sent(c: &mut Core, sid: SessionId) -> Vec<Value> {
    let all: Vec<Output> = c.poll_output().collect();
    let mut mine = Vec::new();
    for o in all {
        match o {
            Output::Send(s, b) if s == sid => mine.push(serde_json::from_slice(&b).unwrap()),
            other => c.out.push(ShellOutput::Output(other)),
        }
    }
    mine
}

fn req(c: &mut Core, sid: SessionId, method: &str, params: Value, id: u64) {
    c.handle(
        sid,
        json!({"method": method, "params": params, "id": id}),
        now(0),
    );
}

fn insert(c: &mut Core, sid: SessionId, name: &str, id: u64) -> String {
    req(
        c,
        sid,
        "transact",
        json!(["T", {"op": "insert", "table": "S", "row": {"name": name}}]),
        id,
    );
    write_records(c);
    let msgs = sent(c, sid);
    let reply = msgs.iter().find(|m| m["id"] == id).unwrap();
    reply["result"][0]["uuid"][1].as_str().unwrap().to_string()
}

/// Commits rows until a compaction is due, then five more while its snapshot is unwritten (the
/// tail the compaction must keep). `i` numbers the rows and ends past the last one.
fn commit_until_compaction_and_five_more(
    c: &mut Core,
    s: SessionId,
    i: &mut u64,
) -> CompactionTask {
    let task = loop {
        insert(c, s, &format!("n{i}"), *i);
        *i += 1;
        if let Some(t) = c.poll_compaction() {
            break t;
        }
        assert!(*i < 1000, "no compaction became due");
    };
    for _ in 0..5 {
        insert(c, s, &format!("n{i}"), *i);
        *i += 1;
    }
    task
}

/// The log lines the core has to say.
/// Run the file writes queued by a core with background writes, in order, as the shell's
/// writer does (nothing for a core that writes its records itself).
fn write_records(c: &mut Core) {
    while let Some(w) = c.poll_record_write() {
        let done = w.run();
        c.record_written(done, now(0));
    }
}

fn logs(c: &mut Core) -> Vec<String> {
    c.poll_output()
        .filter_map(|o| match o {
            Output::Log(l) => Some(l),
            _ => None,
        })
        .collect()
}

#[test]
fn unknown_method_is_the_exact_string_the_idl_falls_back_on() {
    let mut c = core();
    let s = c.connect(now(0));
    req(&mut c, s, "frobnicate", json!([]), 1);
    let m = sent(&mut c, s);
    assert_eq!(m, vec![json!({"id": 1, "error": "unknown method"})]);
}

#[test]
fn list_dbs_and_server_database() {
    let mut c = core();
    let s = c.connect(now(0));
    req(&mut c, s, "list_dbs", json!([]), 1);
    assert_eq!(sent(&mut c, s)[0]["result"], json!(["_Server", "T"]));
    req(
        &mut c,
        s,
        "transact",
        json!(["_Server", {"op": "select", "table": "Database", "where": [["name", "==", "T"]], "columns": ["model", "connected", "leader"]}]),
        2,
    );
    let r = &sent(&mut c, s)[0]["result"][0]["rows"][0];
    assert_eq!(
        r,
        &json!({"model": "standalone", "connected": true, "leader": true})
    );
    req(&mut c, s, "transact", json!(["Nope"]), 3);
    assert_eq!(sent(&mut c, s)[0]["error"]["error"], "unknown database");
}

#[test]
fn monitors_of_every_version_see_inserts_updates_and_deletes() {
    let mut c = core();
    let w = c.connect(now(0));
    let m = c.connect(now(0));
    req(
        &mut c,
        m,
        "monitor",
        json!(["T", "v1", {"S": {"columns": ["name", "n"]}}]),
        1,
    );
    req(
        &mut c,
        m,
        "monitor_cond",
        json!(["T", "v2", {"S": [{"columns": ["name", "n"], "where": [["n", ">", 5]]}]}]),
        2,
    );
    req(
        &mut c,
        m,
        "monitor_cond_since",
        json!(["T", "v3", {"S": [{"columns": ["name", "m"]}]}, "00000000-0000-0000-0000-000000000000"]),
        3,
    );
    let init = sent(&mut c, m);
    assert_eq!(init.len(), 3);
    assert_eq!(init[2]["result"][0], false);

    let u = insert(&mut c, w, "a", 10);
    let msgs = sent(&mut c, m);
    let methods: Vec<&str> = msgs.iter().map(|x| x["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        vec!["update", "update3"],
        "the v2 monitor filters n > 5"
    );
    assert_eq!(msgs[0]["params"][1]["S"][&u]["new"]["name"], "a");
    assert_eq!(
        msgs[1]["params"][2]["S"][&u]["insert"],
        json!({"name": "a"})
    );

    // Modify: n 0 -> 9 brings the row into the v2 monitor's condition (an insert for it).
    req(
        &mut c,
        w,
        "transact",
        json!(["T", {"op": "update", "table": "S", "where": [], "row": {"n": 9, "m": ["map", [["k", "v"]]]}}]),
        11,
    );
    let msgs = sent(&mut c, m);
    let by: std::collections::HashMap<&str, &Value> = msgs
        .iter()
        .map(|x| (x["method"].as_str().unwrap(), &x["params"]))
        .collect();
    assert_eq!(by["update"][1]["S"][&u]["old"], json!({"n": 0}));
    assert_eq!(
        by["update2"][1]["S"][&u]["insert"],
        json!({"name": "a", "n": 9})
    );
    assert_eq!(
        by["update3"][2]["S"][&u]["modify"],
        json!({"m": ["map", [["k", "v"]]]})
    );

    req(
        &mut c,
        w,
        "transact",
        json!(["T", {"op": "delete", "table": "S", "where": []}]),
        12,
    );
    let msgs = sent(&mut c, m);
    let by: std::collections::HashMap<&str, &Value> = msgs
        .iter()
        .map(|x| (x["method"].as_str().unwrap(), &x["params"]))
        .collect();
    assert_eq!(by["update"][1]["S"][&u]["old"]["name"], "a");
    assert_eq!(by["update2"][1]["S"][&u], json!({"delete": null}));
    assert_eq!(by["update3"][2]["S"][&u], json!({"delete": null}));
}

#[test]
fn monitor_cond_since_resends_only_missed_changes() {
    let mut c = core();
    let w = c.connect(now(0));
    let m = c.connect(now(0));
    insert(&mut c, w, "a", 1);
    req(
        &mut c,
        m,
        "monitor_cond_since",
        json!(["T", "x", {"S": [{}]}, "00000000-0000-0000-0000-000000000000"]),
        2,
    );
    let r = sent(&mut c, m).remove(0);
    let last = r["result"][1].as_str().unwrap().to_string();
    assert_eq!(r["result"][2]["S"].as_object().unwrap().len(), 1);
    c.disconnect(m);
    // Two changes while the client is away.
    insert(&mut c, w, "b", 3);
    insert(&mut c, w, "c", 4);
    let m2 = c.connect(now(0));
    req(
        &mut c,
        m2,
        "monitor_cond_since",
        json!(["T", "x", {"S": [{}]}, last]),
        5,
    );
    let r = sent(&mut c, m2).remove(0);
    assert_eq!(r["result"][0], true, "the server still has the history");
    let rows = r["result"][2]["S"].as_object().unwrap();
    assert_eq!(rows.len(), 2, "only the two missed rows are sent");
    assert!(rows.values().all(|v| v.get("insert").is_some()));
    // Up to date: found, nothing to send.
    let last = r["result"][1].clone();
    let m3 = c.connect(now(0));
    req(
        &mut c,
        m3,
        "monitor_cond_since",
        json!(["T", "x", {"S": [{}]}, last]),
        6,
    );
    let r = sent(&mut c, m3).remove(0);
    assert_eq!(r["result"][0], true);
    assert_eq!(r["result"][2], json!({}));
    // Unknown id: everything, found false.
    let m4 = c.connect(now(0));
    req(
        &mut c,
        m4,
        "monitor_cond_since",
        json!(["T", "x", {"S": [{}]}, "11111111-1111-4111-8111-111111111111"]),
        7,
    );
    let r = sent(&mut c, m4).remove(0);
    assert_eq!(r["result"][0], false);
    assert_eq!(r["result"][2]["S"].as_object().unwrap().len(), 3);
}

#[test]
fn monitor_cond_change_sends_rows_entering_and_leaving() {
    let mut c = core();
    let w = c.connect(now(0));
    let a = insert(&mut c, w, "a", 1);
    let b = insert(&mut c, w, "b", 2);
    let m = c.connect(now(0));
    req(
        &mut c,
        m,
        "monitor_cond",
        json!(["T", "x", {"S": [{"where": [["name", "==", "a"]]}]}]),
        3,
    );
    let r = sent(&mut c, m).remove(0);
    assert_eq!(
        r["result"]["S"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec![&a]
    );
    req(
        &mut c,
        m,
        "monitor_cond_change",
        json!(["x", "y", {"S": [{"where": [["name", "==", "b"]]}]}]),
        4,
    );
    let msgs = sent(&mut c, m);
    assert_eq!(msgs.len(), 2, "the update comes before the reply");
    assert_eq!(msgs[0]["method"], "update2");
    assert_eq!(msgs[0]["params"][0], "y");
    assert_eq!(msgs[0]["params"][1]["S"][&a], json!({"delete": null}));
    assert_eq!(msgs[0]["params"][1]["S"][&b]["insert"]["name"], "b");
    assert_eq!(msgs[1]["result"], json!({}));
    req(&mut c, m, "monitor_cancel", json!(["x"]), 5);
    assert_eq!(sent(&mut c, m)[0]["error"], "unknown monitor");
    req(&mut c, m, "monitor_cancel", json!(["y"]), 6);
    assert_eq!(sent(&mut c, m)[0]["result"], json!({}));
}

#[test]
fn locks_hand_over_on_unlock_and_disconnect() {
    let mut c = core();
    let a = c.connect(now(0));
    let b = c.connect(now(0));
    req(&mut c, a, "lock", json!(["l"]), 1);
    assert_eq!(sent(&mut c, a)[0]["result"], json!({"locked": true}));
    req(&mut c, b, "lock", json!(["l"]), 2);
    assert_eq!(sent(&mut c, b)[0]["result"], json!({"locked": false}));
    // assert works only for the owner.
    req(
        &mut c,
        b,
        "transact",
        json!(["T", {"op": "assert", "lock": "l"}]),
        3,
    );
    assert_eq!(sent(&mut c, b)[0]["result"][0]["error"], "not owner");
    c.disconnect(a);
    let out: Vec<Output> = c.poll_output().collect();
    assert!(out.iter().any(|o| matches!(o, Output::Send(x, m) if *x == b && String::from_utf8_lossy(m).contains("\"locked\""))));
    req(
        &mut c,
        b,
        "transact",
        json!(["T", {"op": "assert", "lock": "l"}]),
        4,
    );
    assert_eq!(sent(&mut c, b)[0]["result"], json!([{}]));
    let s = c.connect(now(0));
    req(&mut c, s, "steal", json!(["l"]), 5);
    let out: Vec<Output> = c.poll_output().collect();
    assert!(out.iter().any(|o| matches!(o, Output::Send(x, m) if *x == b && String::from_utf8_lossy(m).contains("\"stolen\""))));
}

#[test]
fn inactivity_probe_then_disconnect() {
    let mut c = core();
    let s = c.connect(now(0));
    assert_eq!(c.poll_timeout(), Some(1000));
    c.tick(now(1000));
    let m = sent(&mut c, s);
    assert_eq!(m[0]["method"], "echo");
    c.tick(now(1500));
    assert_eq!(c.session_count(), 1);
    c.tick(now(2000));
    assert_eq!(c.session_count(), 0, "no answer to the probe: dropped");
    // A session that answers stays.
    let s = c.connect(now(3000));
    c.tick(now(4000));
    c.handle(
        s,
        json!({"id": "echo", "result": [], "error": null}),
        now(4100),
    );
    c.tick(now(5000));
    assert_eq!(c.session_count(), 1);
}

#[test]
fn blocked_wait_completes_after_a_commit_or_times_out() {
    let mut c = core();
    let w = c.connect(now(0));
    let s = c.connect(now(0));
    let wait = json!(["T", {"op": "wait", "timeout": 500, "table": "S", "where": [], "columns": ["name"], "until": "==", "rows": [{"name": "a"}]},
                          {"op": "insert", "table": "S", "row": {"name": "after-wait"}}]);
    c.handle(
        s,
        json!({"method": "transact", "params": wait, "id": 1}),
        now(0),
    );
    assert!(sent(&mut c, s).is_empty(), "blocked");
    insert(&mut c, w, "a", 2);
    let m = sent(&mut c, s);
    assert_eq!(m.len(), 1);
    assert!(
        m[0]["result"][1]["uuid"].is_array(),
        "the waiting transaction ran after the commit: {m:?}"
    );
    // Times out.
    let wait = json!(["T", {"op": "wait", "timeout": 500, "table": "S", "where": [], "columns": ["name"], "until": "==", "rows": []}]);
    c.handle(
        s,
        json!({"method": "transact", "params": wait, "id": 3}),
        now(1000),
    );
    c.tick(now(1499));
    assert!(sent(&mut c, s).is_empty());
    c.tick(now(1500));
    assert_eq!(sent(&mut c, s)[0]["result"][0]["error"], "timed out");
    // Cancel.
    let wait = json!(["T", {"op": "wait", "table": "S", "where": [], "columns": ["name"], "until": "==", "rows": []}]);
    c.handle(
        s,
        json!({"method": "transact", "params": wait, "id": 4}),
        now(2000),
    );
    c.handle(
        s,
        json!({"method": "cancel", "params": [4], "id": null}),
        now(2000),
    );
    assert_eq!(sent(&mut c, s)[0]["error"]["error"], "canceled");
}

#[test]
fn invalid_messages_close_only_their_session() {
    let mut c = core();
    let bad = c.connect(now(0));
    let good = c.connect(now(0));
    c.handle(bad, json!({"neither": 1}), now(0));
    let out: Vec<Output> = c.poll_output().collect();
    assert!(matches!(&out[0], Output::Close(s, _) if *s == bad));
    assert_eq!(c.session_count(), 1);
    req(&mut c, good, "echo", json!(["hi"]), 1);
    assert_eq!(sent(&mut c, good)[0]["result"], json!(["hi"]));
    for (params, needle) in [
        (json!([]), "get_schema needs"),
        (json!([1]), "get_schema needs"),
    ] {
        req(&mut c, good, "get_schema", params, 2);
        let m = sent(&mut c, good);
        assert!(m[0]["error"]["details"].as_str().unwrap().contains(needle));
    }
}

#[test]
fn shared_update_computation_respects_each_monitors_spec() {
    let mut c = core();
    let w = c.connect(now(0));
    let a = c.connect(now(0));
    let b = c.connect(now(0));
    let d = c.connect(now(0));
    let cond = |name: &str| json!({"S": [{"columns": ["name"], "where": [["name", "==", name]]}]});
    req(&mut c, a, "monitor_cond", json!(["T", "ma", cond("x")]), 1);
    req(&mut c, b, "monitor_cond", json!(["T", "mb", cond("x")]), 1);
    req(&mut c, d, "monitor_cond", json!(["T", "md", cond("y")]), 1);
    for s in [a, b, d] {
        sent(&mut c, s);
    }
    let u = insert(&mut c, w, "x", 2);
    let ma = sent(&mut c, a);
    let mb = sent(&mut c, b);
    assert_eq!(ma.len(), 1);
    assert_eq!(
        ma[0]["params"][0], "ma",
        "each client gets its own monitor id"
    );
    assert_eq!(mb[0]["params"][0], "mb");
    assert_eq!(ma[0]["params"][1], mb[0]["params"][1]);
    assert_eq!(ma[0]["params"][1]["S"][&u]["insert"], json!({"name": "x"}));
    assert!(
        sent(&mut c, d).is_empty(),
        "a monitor with another condition gets nothing"
    );
    // After a condition change the monitor no longer shares the old spec's updates.
    req(
        &mut c,
        b,
        "monitor_cond_change",
        json!(["mb", "mb2", {"S": [{"where": [["name", "==", "y"]]}]}]),
        3,
    );
    sent(&mut c, b);
    insert(&mut c, w, "y", 4);
    assert!(sent(&mut c, a).is_empty());
    assert_eq!(sent(&mut c, b)[0]["params"][0], "mb2");
    assert_eq!(sent(&mut c, d).len(), 1);
}

/// A storage that keeps what the core writes.
struct MemStorage(Arc<std::sync::Mutex<Vec<u8>>>);

impl Storage for MemStorage {
    fn append(&mut self, record: &[u8], _durable: bool) -> std::io::Result<()> {
        self.0.lock().unwrap().extend_from_slice(record);
        Ok(())
    }
    fn size(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
    fn replace(&mut self, contents: &[u8]) -> std::io::Result<()> {
        *self.0.lock().unwrap() = contents.to_vec();
        Ok(())
    }
}

#[test]
fn file_records_carry_column_diffs_unless_disabled() {
    for column_diff in [true, false] {
        let file = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut c = Core::new(
            Config {
                file_column_diff: column_diff,
                ..Config::default()
            },
            7,
        );
        let db = Database::new(Arc::new(hf_ovsdb::Schema::parse(SCHEMA).unwrap()), 1);
        c.add_database(db, Some(Box::new(MemStorage(file.clone()))), vec![])
            .unwrap();
        let s = c.connect(now(0));
        req(
            &mut c,
            s,
            "transact",
            json!(["T", {"op": "insert", "table": "S", "row": {"name": "a", "m": ["map", [["k", "1"], ["x", "1"]]]}}]),
            1,
        );
        req(
            &mut c,
            s,
            "transact",
            json!(["T", {"op": "update", "table": "S", "where": [], "row": {"n": 4, "m": ["map", [["k", "2"], ["x", "1"]]]}}]),
            2,
        );
        let replies = sent(&mut c, s);
        assert!(replies.iter().all(|r| r["error"].is_null()), "{replies:?}");
        let bytes = file.lock().unwrap().clone();
        let recs: Vec<Value> = hf_ovsdb::file::RecordReader::new(&bytes)
            .map(|r| r.unwrap().json)
            .collect();
        let last = recs.last().unwrap();
        let row = last["S"].as_object().unwrap().values().next().unwrap();
        assert_eq!(row["n"], json!(4));
        if column_diff {
            assert_eq!(last["_is_diff"], json!(true));
            assert_eq!(
                row["m"],
                json!(["map", [["k", "2"]]]),
                "only the changed key"
            );
        } else {
            assert!(last.get("_is_diff").is_none(), "{last}");
            assert_eq!(row["m"], json!(["map", [["k", "2"], ["x", "1"]]]));
        }
    }
}

fn updates_for(outs: &[ShellOutput], sid: SessionId) -> Vec<PendingUpdate> {
    outs.iter()
        .filter_map(|o| match o {
            ShellOutput::Update(s, u) if *s == sid => Some(u.clone()),
            _ => None,
        })
        .collect()
}

fn names_in_update(u: &PendingUpdate) -> std::collections::BTreeSet<String> {
    let v: Value = serde_json::from_slice(&u.encode().unwrap()).unwrap();
    v["params"][1]["S"]
        .as_object()
        .unwrap()
        .values()
        .map(|r| r["insert"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// Rows of [`big_transaction_under_a_monitor`]'s insert.
const BIG_ROWS: usize = 5000;

/// Three sessions on `c`: `a` monitoring `S`'s names, `b` committing a [`BIG_ROWS`]-row
/// insert, `w` idle; with the shell output of `b`'s transaction.
fn big_transaction_under_a_monitor(
    c: &mut Core,
) -> (SessionId, SessionId, SessionId, Vec<ShellOutput>) {
    let (a, b, w) = (c.connect(now(0)), c.connect(now(0)), c.connect(now(0)));
    req(
        c,
        a,
        "monitor_cond",
        json!(["T", "ma", {"S": [{"columns": ["name"]}]}]),
        1,
    );
    sent(c, a);
    let mut ops = vec![json!("T")];
    ops.extend(
        (0..BIG_ROWS)
            .map(|i| json!({"op": "insert", "table": "S", "row": {"name": format!("r{i}")}})),
    );
    req(c, b, "transact", Value::Array(ops), 2);
    let first: Vec<ShellOutput> = c.poll_shell_output().collect();
    (a, b, w, first)
}

/// A big transaction's echo is not made under the core: the core has returned, and answers a
/// small transaction from another client, before the big update's text exists; the big update,
/// encoded afterwards by its sender, is complete, and the monitor gets the two in commit order.
#[test]
fn a_small_transaction_is_answered_while_a_big_echo_is_still_unwritten() {
    let mut c = core();
    let (a, _b, w, first) = big_transaction_under_a_monitor(&mut c);
    let n = BIG_ROWS;
    let big = updates_for(&first, a);
    assert_eq!(big.len(), 1, "{first:?}");
    assert!(
        !big[0].is_encoded(),
        "the big echo was encoded under the core"
    );

    // Another client's small transaction is committed and answered meanwhile.
    req(
        &mut c,
        w,
        "transact",
        json!(["T", {"op": "insert", "table": "S", "row": {"name": "small"}}]),
        3,
    );
    let second: Vec<ShellOutput> = c.poll_shell_output().collect();
    let reply = second
        .iter()
        .find_map(|o| match o {
            ShellOutput::Output(Output::Send(s, bytes)) if *s == w => {
                Some(serde_json::from_slice::<Value>(bytes).unwrap())
            }
            _ => None,
        })
        .expect("the small transaction is answered");
    assert_eq!(reply["id"], 3);
    assert!(reply["result"][0]["uuid"].is_array(), "{reply}");
    assert!(!big[0].is_encoded(), "answering it needed the big echo");

    // The big echo, written now, is complete; then comes the small one.
    let got = names_in_update(&big[0]);
    let want: std::collections::BTreeSet<String> = (0..n).map(|i| format!("r{i}")).collect();
    assert_eq!(got, want);
    let small = updates_for(&second, a);
    assert_eq!(small.len(), 1);
    assert_eq!(names_in_update(&small[0]), ["small".to_string()].into());
}

/// Compaction's snapshot is written by a task that needs nothing of the core (transactions
/// commit while it has not run, and between its run and its installation), and a crash at any
/// point of the replacement leaves a file that loads with every committed transaction.
#[test]
fn background_compaction_keeps_every_commit_and_survives_a_crash_anywhere() {
    use crate::storage::CrashPoint;
    let crashes = std::iter::once(None).chain(CrashPoint::ALL.map(Some));
    let modes = crashes.flat_map(|c| [(c, false), (c, true)]);
    for (crash, background_writes) in modes {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        crate::storage::create(&path, SCHEMA).unwrap();
        let loaded = crate::storage::open(&path, 1, 100).unwrap();
        let mut storage = loaded.storage;
        if let Some(p) = crash {
            storage.inject_crash(p);
        }
        let mut c = Core::new(
            Config {
                compact_min_bytes: 4000,
                ..Config::default()
            },
            7,
        );
        c.set_background_compaction(true);
        c.set_background_writes(background_writes);
        c.add_database(loaded.db, Some(Box::new(storage)), loaded.history)
            .unwrap();
        let s = c.connect(now(0));
        let mut i = 0;
        // Commits go on while the snapshot is being written...
        let task = commit_until_compaction_and_five_more(&mut c, s, &mut i);
        let done = task.run();
        // ... and between the write and the swap.
        insert(&mut c, s, &format!("n{i}"), i);
        i += 1;
        c.finish_compaction(done);
        let logs = logs(&mut c);
        assert_eq!(logs.len(), 1, "{logs:?}");
        if crash.is_none() {
            assert!(logs[0].starts_with("compacted database T"), "{logs:?}");
            // After the swap, appends go to the new file.
            insert(&mut c, s, &format!("n{i}"), i);
            i += 1;
        } else {
            assert!(logs[0].contains("injected crash"), "{logs:?}");
        }
        let names = |db: &Database| -> std::collections::BTreeSet<String> {
            let Ok(hf_ovsdb::ColumnRef::User(ci)) = db.schema.tables[0].column_ref("name") else {
                panic!("no name column");
            };
            db.tables[0]
                .rows
                .values()
                .map(|r| r.cols[ci].first().unwrap().as_str().unwrap().to_string())
                .collect()
        };
        let want: std::collections::BTreeSet<String> = (0..i).map(|k| format!("n{k}")).collect();
        assert_eq!(names(c.database("T").unwrap()), want);
        drop(c);
        let reopened = crate::storage::open(&path, 1, 100).unwrap_or_else(|e| {
            panic!("crash at {crash:?} ({background_writes}): the file does not load: {e}")
        });
        assert_eq!(
            names(&reopened.db),
            want,
            "crash at {crash:?} ({background_writes})"
        );
        let records = hf_ovsdb::file::RecordReader::new(&std::fs::read(&path).unwrap()).count();
        match crash {
            // Schema, snapshot, the six commits of the tail, the one after the swap.
            None => assert_eq!(records, 2 + 6 + 1),
            Some(CrashPoint::Renamed) => assert_eq!(records, 2 + 6),
            Some(_) => assert_eq!(records, 1 + want.len()),
        }
    }
}

/// A core compacting in the background past 4,000 bytes, and the database file at `path`
/// created and opened for it (to add after any other setting).
fn compacting_core_on(path: &std::path::Path) -> (Core, crate::storage::Loaded) {
    crate::storage::create(path, SCHEMA).unwrap();
    let loaded = crate::storage::open(path, 1, 100).unwrap();
    let mut c = Core::new(
        Config {
            compact_min_bytes: 4000,
            ..Config::default()
        },
        7,
    );
    c.set_background_compaction(true);
    (c, loaded)
}

/// The tail committed while the snapshot was written is appended by the catch-up, without
/// the core; `finish_compaction` appends only what committed after it. Every record is in the
/// new file exactly once.
#[test]
fn compaction_catch_up_writes_the_tail_outside_the_core_and_finish_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let (mut c, loaded) = compacting_core_on(&path);
    c.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)
        .unwrap();
    let s = c.connect(now(0));
    let mut i = 0;
    let task = commit_until_compaction_and_five_more(&mut c, s, &mut i);
    let mut done = task.run();
    let tail = c.take_compaction_tail(&done);
    assert!(
        !tail.is_empty(),
        "five commits were made during the snapshot"
    );
    assert!(
        c.take_compaction_tail(&done).is_empty(),
        "the tail was taken"
    );
    done.catch_up(&tail);
    // Two more commits during the catch-up: finish_compaction appends these alone.
    for _ in 0..2 {
        insert(&mut c, s, &format!("n{i}"), i);
        i += 1;
    }
    c.finish_compaction(done);
    let logs = logs(&mut c);
    assert!(
        logs.len() == 1 && logs[0].starts_with("compacted database T"),
        "{logs:?}"
    );
    drop(c);
    let bytes = std::fs::read(&path).unwrap();
    let records = hf_ovsdb::file::RecordReader::new(&bytes).count();
    // Schema, snapshot, five caught up, two appended under the core.
    assert_eq!(records, 2 + 5 + 2);
    let reopened = crate::storage::open(&path, 1, 100).unwrap();
    assert_eq!(reopened.db.tables[0].rows.len(), i as usize);
}

/// The rows named in a database (for the file tests).
fn row_names(db: &Database) -> Vec<String> {
    let Ok(hf_ovsdb::ColumnRef::User(ci)) = db.schema.tables[0].column_ref("name") else {
        panic!("no name column");
    };
    let mut v: Vec<String> = db.tables[0]
        .rows
        .values()
        .map(|r| r.cols[ci].first().unwrap().as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// Sends to `sid` in `outs`, parsed.
fn sends_to(outs: &[ShellOutput], sid: SessionId) -> Vec<Value> {
    outs.iter()
        .filter_map(|o| match o {
            ShellOutput::Output(Output::Send(s, b)) if *s == sid => {
                Some(serde_json::from_slice(b).unwrap())
            }
            _ => None,
        })
        .collect()
}

/// With background writes, a big transaction's file record is neither encoded nor written under
/// the core: the commit queues it, the monitor gets the update, another client's `echo` and
/// read are answered, all while the record (held back here) is not in the file; the big
/// transaction's reply waits for its record, and a later commit's reply waits behind it (one
/// ordered writer), so the file holds the records in commit order.
#[test]
fn others_are_answered_while_a_big_record_is_still_being_written() {
    let file = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut c = Core::new(Config::default(), 7);
    c.set_background_writes(true);
    let db = Database::new(Arc::new(hf_ovsdb::Schema::parse(SCHEMA).unwrap()), 1);
    c.add_database(db, Some(Box::new(MemStorage(file.clone()))), vec![])
        .unwrap();
    let (a, b, w, first) = big_transaction_under_a_monitor(&mut c);
    let n = BIG_ROWS;
    assert_eq!(
        updates_for(&first, a).len(),
        1,
        "the monitor has the update"
    );
    assert!(
        sends_to(&first, b).is_empty(),
        "replied before the record was written"
    );
    let big = c
        .poll_record_write()
        .expect("the big record is queued for the writer, not written under the core");
    assert!(file.lock().unwrap().is_empty(), "written under the core");

    req(&mut c, w, "echo", json!(["x"]), 3);
    req(
        &mut c,
        w,
        "transact",
        json!(["T", {"op": "select", "table": "S", "where": [["name", "==", "r7"]], "columns": ["name"]}]),
        4,
    );
    let mid: Vec<ShellOutput> = c.poll_shell_output().collect();
    let got = sends_to(&mid, w);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0]["result"], json!(["x"]));
    assert_eq!(got[1]["result"], json!([{"rows": [{"name": "r7"}]}]));
    assert!(sends_to(&mid, b).is_empty());

    // A small commit meanwhile: its update goes out, its reply waits behind the big record.
    req(
        &mut c,
        w,
        "transact",
        json!(["T", {"op": "insert", "table": "S", "row": {"name": "small"}}]),
        5,
    );
    let after: Vec<ShellOutput> = c.poll_shell_output().collect();
    assert_eq!(updates_for(&after, a).len(), 1);
    assert!(sends_to(&after, w).is_empty());
    let small = c.poll_record_write().expect("the small record is queued");
    assert!(file.lock().unwrap().is_empty());

    let done = big.run();
    assert!(done.result().is_ok(), "{done:?}");
    c.record_written(done, now(1));
    let out: Vec<ShellOutput> = c.poll_shell_output().collect();
    let replies = sends_to(&out, b);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0]["id"], 2);
    assert_eq!(replies[0]["result"].as_array().unwrap().len(), n);
    assert!(sends_to(&out, w).is_empty(), "answered before its record");
    c.record_written(small.run(), now(2));
    let out: Vec<ShellOutput> = c.poll_shell_output().collect();
    let replies = sends_to(&out, w);
    assert_eq!(replies.len(), 1);
    assert!(replies[0]["result"][0]["uuid"].is_array(), "{replies:?}");

    let bytes = file.lock().unwrap().clone();
    let recs: Vec<Value> = hf_ovsdb::file::RecordReader::new(&bytes)
        .map(|r| r.unwrap().json)
        .collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0]["S"].as_object().unwrap().len(), n);
    assert_eq!(recs[1]["S"].as_object().unwrap().len(), 1);
}

/// A storage whose appends fail.
struct FailingStorage;

impl Storage for FailingStorage {
    fn append(&mut self, _: &[u8], _: bool) -> std::io::Result<()> {
        Err(std::io::Error::other("disk full"))
    }
    fn size(&self) -> u64 {
        0
    }
    fn replace(&mut self, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other("disk full"))
    }
}

/// A background write that fails is reported, not lost: the transaction's reply carries the
/// I/O error, a transaction queued behind it too (its record is not written after a missing
/// one), and later transactions are refused before they commit.
#[test]
fn a_failed_background_write_is_answered_and_stops_further_commits() {
    let mut c = Core::new(Config::default(), 7);
    c.set_background_writes(true);
    let db = Database::new(Arc::new(hf_ovsdb::Schema::parse(SCHEMA).unwrap()), 1);
    c.add_database(db, Some(Box::new(FailingStorage)), vec![])
        .unwrap();
    let s = c.connect(now(0));
    for (name, id) in [("a", 1), ("b", 2)] {
        req(
            &mut c,
            s,
            "transact",
            json!(["T", {"op": "insert", "table": "S", "row": {"name": name}}]),
            id,
        );
    }
    assert!(sent(&mut c, s).is_empty());
    write_records(&mut c);
    let all: Vec<Output> = c.poll_output().collect();
    let replies: Vec<Value> = all
        .iter()
        .filter_map(|o| match o {
            Output::Send(_, b) => Some(serde_json::from_slice(b).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(replies.len(), 2, "{all:?}");
    for r in &replies {
        let err = &r["result"][1];
        assert_eq!(err["error"], "I/O error", "{r}");
    }
    assert!(
        replies[0]["result"][1]["details"]
            .as_str()
            .unwrap()
            .contains("disk full")
    );
    assert!(
        all.iter()
            .any(|o| matches!(o, Output::Log(l) if l.contains("disk full"))),
        "{all:?}"
    );
    req(
        &mut c,
        s,
        "transact",
        json!(["T", {"op": "insert", "table": "S", "row": {"name": "c"}}]),
        3,
    );
    let r = sent(&mut c, s);
    assert_eq!(r.len(), 1, "refused at once: {r:?}");
    assert_eq!(r[0]["result"][1]["error"], "I/O error");
    assert!(
        c.poll_record_write().is_none(),
        "nothing queued after the failure"
    );
    assert_eq!(row_names(c.database("T").unwrap()), ["a", "b"]);
}

/// Background writes and a background compaction together: the compaction starts only when
/// the file has caught up, records written while its snapshot is written go to its tail, and
/// its finish waits for the records still queued; the new file holds every row exactly once.
#[test]
fn background_writes_and_compaction_keep_every_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let (mut c, loaded) = compacting_core_on(&path);
    c.set_background_writes(true);
    c.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)
        .unwrap();
    let s = c.connect(now(0));
    let mut i = 0u64;
    let commit = |c: &mut Core, i: &mut u64| {
        req(
            c,
            s,
            "transact",
            json!(["T", {"op": "insert", "table": "S", "row": {"name": format!("n{i}")}}]),
            *i,
        );
        *i += 1;
    };
    // Grow the file three records at a time, each written while the next is queued: no
    // compaction starts before all are written (its snapshot would hold rows the file does
    // not).
    let task = loop {
        for _ in 0..3 {
            commit(&mut c, &mut i);
        }
        for _ in 0..2 {
            let w = c.poll_record_write().unwrap();
            c.record_written(w.run(), now(0));
            assert!(
                c.poll_compaction().is_none(),
                "started with a record in flight"
            );
        }
        write_records(&mut c);
        if let Some(t) = c.poll_compaction() {
            break t;
        }
    };
    // Three commits while the snapshot is written: two written, one still queued.
    for _ in 0..3 {
        commit(&mut c, &mut i);
    }
    let queued: Vec<RecordWrite> = std::iter::from_fn(|| c.poll_record_write()).collect();
    let mut queued = queued.into_iter();
    let mut done = task.run();
    for w in queued.by_ref().take(2) {
        c.record_written(w.run(), now(0));
    }
    let tail = c.take_compaction_tail(&done);
    done.catch_up(&tail);
    c.finish_compaction(done);
    assert!(logs(&mut c).is_empty(), "finished with a record queued");
    commit(&mut c, &mut i);
    let later = c.poll_record_write().unwrap();
    for w in queued {
        c.record_written(w.run(), now(0));
    }
    assert!(logs(&mut c).is_empty(), "finished with a record queued");
    c.record_written(later.run(), now(0));
    let l = logs(&mut c);
    assert!(
        l.len() == 1 && l[0].starts_with("compacted database T"),
        "{l:?}"
    );
    commit(&mut c, &mut i);
    write_records(&mut c);
    let replies = sent(&mut c, s);
    assert!(replies.iter().all(|r| r["error"].is_null()), "{replies:?}");
    let want: Vec<String> = {
        let mut v: Vec<String> = (0..i).map(|k| format!("n{k}")).collect();
        v.sort();
        v
    };
    assert_eq!(row_names(c.database("T").unwrap()), want);
    drop(c);
    let bytes = std::fs::read(&path).unwrap();
    // Schema, snapshot, the four commits of the tail, the one after the swap.
    assert_eq!(hf_ovsdb::file::RecordReader::new(&bytes).count(), 2 + 4 + 1);
    let reopened = crate::storage::open(&path, 1, 100).unwrap();
    assert_eq!(row_names(&reopened.db), want);
}

/// A core with one monitor per `monitors` entry (each its own session, the same spec), after a
/// 2,000-row transaction: the update of the first monitor's session, alone.
fn big_update(method: &str, monitors: usize) -> (PendingUpdate, Option<PendingUpdate>) {
    let mut c = core();
    let sessions: Vec<SessionId> = (0..monitors).map(|_| c.connect(now(0))).collect();
    for &s in &sessions {
        let mut params = json!(["T", "m1", {"S": [{"columns": ["name", "m"]}]}]);
        if method == "monitor_cond_since" {
            params
                .as_array_mut()
                .unwrap()
                .push(json!("00000000-0000-0000-0000-000000000000"));
        }
        req(&mut c, s, method, params, 1);
        sent(&mut c, s);
    }
    let w = c.connect(now(0));
    let mut ops = vec![json!("T")];
    ops.extend((0..2000).map(|i| {
        json!({"op": "insert", "table": "S", "row": {"name": format!("r{i}"), "m": ["map", [["k\"", "v\\u00e9"]]]}})
    }));
    req(&mut c, w, "transact", Value::Array(ops), 2);
    let mut ups = c.poll_shell_output().filter_map(|o| match o {
        ShellOutput::Update(_, u) => Some(u),
        _ => None,
    });
    let first = ups.next().expect("an update");
    let second = ups.next();
    (first, second)
}

/// A large update encoded in parts (as the shell streams it): the parts joined are exactly the
/// message encoded whole, for every monitor version; several parts are made; an update whose
/// text another session shares is made once, whole (one part).
#[test]
fn a_large_update_is_encoded_in_parts_that_join_to_the_whole_message() {
    for method in ["monitor", "monitor_cond", "monitor_cond_since"] {
        let (whole, _) = big_update(method, 1);
        let whole = whole.encode().expect("something to report");
        let (u, none) = big_update(method, 1);
        assert!(none.is_none());
        let mut parts = Vec::new();
        assert!(u.encode_parts(4096, &mut |p| parts.push(p)));
        assert!(parts.len() > 10, "{method}: {} parts", parts.len());
        assert!(
            parts[..parts.len() - 1].iter().all(|p| p.len() >= 4096),
            "{method}: a part before the last is short"
        );
        assert_eq!(parts.concat(), whole, "{method}");
        let v: Value = serde_json::from_slice(&whole).unwrap();
        assert!(v["method"].as_str().unwrap().starts_with("update"), "{v}");
    }
    let (u, other) = big_update("monitor_cond", 2);
    let other = other.expect("the second session's update");
    let mut parts = Vec::new();
    assert!(u.encode_parts(4096, &mut |p| parts.push(p)));
    assert_eq!(parts.len(), 1, "a shared text is made once, whole");
    assert_eq!(Some(parts.concat()), other.encode());
}
