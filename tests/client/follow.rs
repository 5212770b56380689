//! A replica follows another client's inserts, updates and deletes; after a server restart its
//! view equals a fresh replica's; with `monitor_cond_since` (holdfast db, and an ovsdb-server
//! Raft cluster: standalone ovsdb-server keeps no transaction history) the resync after a short
//! outage receives only the missed rows.

use std::path::Path;
use std::time::Duration;

use hf_model::NbSnapshot;
use hf_ovsdb_net::client::{Client, Event, MonitorMethod, TxnOutcome};
use serde_json::{Value, json};

use crate::common::{self, HoldfastDb, require};
use crate::procs::{self, until};

const TABLES: &[&str] = &["Logical_Switch"];

fn names(c: &Client<NbSnapshot>) -> Vec<String> {
    c.with(|r| {
        let mut v: Vec<String> = r
            .model()
            .logical_switch()
            .values()
            .map(|s| s.name.clone())
            .collect();
        v.sort();
        v
    })
}

async fn write(w: &Client<NbSnapshot>, ops: Value) {
    let ops = ops.as_array().unwrap().clone();
    let (outcome, _) = w.transact(Box::new(move |_| ops.clone())).await;
    assert!(matches!(outcome, TxnOutcome::Committed(_)), "{outcome:?}");
}

fn insert(name: &str) -> Value {
    json!([{"op": "insert", "table": "Logical_Switch", "row": {"name": name}}])
}

/// The whole scenario against one server; `restart` restarts it (same remote).
async fn scenario(remote: String, mut restart: impl FnMut(), history: bool) {
    let (r, mut events) = procs::replica::<NbSnapshot>(vec![remote.clone()], TABLES, false);
    let (w, _wev) = procs::replica::<NbSnapshot>(vec![remote.clone()], TABLES, false);
    until(&r, "first sync", |r| r.is_synced()).await;
    until(&w, "writer sync", |r| r.is_synced()).await;
    assert_eq!(r.with(|r| r.method()), Some(MonitorMethod::Since));

    // Inserts, an update, a delete.
    for i in 0..5 {
        write(&w, insert(&format!("sw{i}"))).await;
    }
    until(&r, "five inserts", |r| {
        r.model().logical_switch().len() == 5
    })
    .await;
    write(
        &w,
        json!([{"op": "update", "table": "Logical_Switch",
        "where": [["name", "==", "sw0"]], "row": {"name": "renamed"}}]),
    )
    .await;
    write(
        &w,
        json!([{"op": "delete", "table": "Logical_Switch",
        "where": [["name", "==", "sw1"]]}]),
    )
    .await;
    until(&r, "update and delete", |r| {
        r.model().logical_switch_by_name("renamed").is_some()
            && r.model().logical_switch().len() == 4
    })
    .await;
    assert_eq!(names(&r), ["renamed", "sw2", "sw3", "sw4"]);

    // A short outage of the replica alone: three changes while it is away.
    r.with(|r| while r.poll_event().is_some() {});
    while events.try_recv().is_ok() {}
    let before = r.with(|r| r.stats().rows_received);
    r.set_offline(true);
    r.drop_connection();
    until(&r, "outage", |r| !r.is_synced()).await;
    write(&w, insert("missed1")).await;
    write(&w, insert("missed2")).await;
    write(
        &w,
        json!([{"op": "delete", "table": "Logical_Switch",
        "where": [["name", "==", "sw2"]]}]),
    )
    .await;
    r.set_offline(false);
    until(&r, "resync after the outage", |r| {
        r.is_synced() && r.model().logical_switch().len() == 5
    })
    .await;
    let received = r.with(|r| r.stats().rows_received) - before;
    let mut resync = None;
    while resync.is_none() {
        let e = tokio::time::timeout(Duration::from_secs(10), events.recv()).await;
        match e {
            Ok(Some(Event::Resynced { full, rows, .. })) => resync = Some((full, rows)),
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    if history {
        assert_eq!(resync, Some((false, 3)), "only the missed changes");
        assert_eq!(received, 3, "three rows received for three missed changes");
    } else {
        assert_eq!(resync.map(|r| r.0), Some(true), "no history: a full resync");
        assert_eq!(received, 5);
    }
    assert_eq!(names(&r), ["missed1", "missed2", "renamed", "sw3", "sw4"]);

    // A server restart; the writer changes more once it is back.
    restart();
    until(&w, "writer back", |r| r.is_synced()).await;
    write(&w, insert("after-restart")).await;
    until(&r, "replica back", |r| {
        r.is_synced() && r.model().logical_switch_by_name("after-restart").is_some()
    })
    .await;
    let (fresh, _fev) = procs::replica::<NbSnapshot>(vec![remote], TABLES, false);
    until(&fresh, "fresh dump", |r| r.is_synced()).await;
    let a = r.with(|r| r.model().logical_switch().clone());
    let b = fresh.with(|r| r.model().logical_switch().clone());
    assert_eq!(a, b, "the resynced view equals a fresh dump");
    assert_eq!(a.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_and_resyncs_with_holdfast_db() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = HoldfastDb::start(dir.path(), &[("nb.db", &common::nb_schema())], &[]);
    let remote = db.unix.clone();
    scenario(remote, move || db.restart(), true).await;
}

fn real_nb() -> &'static Path {
    Path::new("/usr/share/ovn/ovn-nb.ovsschema")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_and_resyncs_with_ovsdb_server_standalone() {
    if !require(
        "follows_and_resyncs_with_ovsdb_server_standalone",
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "/usr/share/ovn/ovn-nb.ovsschema",
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut m = procs::standalone(dir.path(), real_nb());
    let remote = m.remote();
    scenario(remote, move || m.restart().unwrap(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_and_resyncs_with_ovsdb_server_cluster_of_one() {
    if !require(
        "follows_and_resyncs_with_ovsdb_server_cluster_of_one",
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "ovs-appctl",
            "/usr/share/ovn/ovn-nb.ovsschema",
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut ms = procs::cluster(dir.path(), real_nb(), "OVN_Northbound", 1);
    let remote = ms[0].remote();
    scenario(
        remote,
        move || {
            ms[0].restart().unwrap();
            std::thread::sleep(Duration::from_millis(200));
        },
        true,
    )
    .await;
}
