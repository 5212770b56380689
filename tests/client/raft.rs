//! A real three-member `ovsdb-server` Raft cluster on loopback: the leader is killed while a
//! replica writes a stream of transactions; the replica moves to the new leader; every
//! transaction it saw acknowledged is in the database afterwards, and none is applied twice.
//!
//! Each transaction inserts the `Logical_Switch` named `t<i>` unless the replica already holds
//! it, guarded by a `wait` that no such row exists (see `hf_ovsdb_net::client::txn`): a
//! transaction whose reply died with the leader is rebuilt after the resync, and finds its
//! row if the first attempt committed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use hf_model::nb::LogicalSwitch;
use hf_model::{NbSnapshot, Table};
use hf_ovsdb_net::client::TxnOutcome;
use hf_ovsdb_net::client::txn::wait_absent;
use serde_json::json;

use crate::common::require;
use crate::procs::{self, until};

const N: usize = 60;
const BATCH: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_during_a_write_stream() {
    if !require(
        "leader_killed_during_a_write_stream",
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
    let schema = Path::new("/usr/share/ovn/ovn-nb.ovsschema");
    let mut members = procs::cluster(dir.path(), schema, "OVN_Northbound", 3);
    let remotes: Vec<String> = members.iter().map(procs::Member::remote).collect();
    let (w, _events) = procs::replica::<NbSnapshot>(remotes.clone(), &["Logical_Switch"], true);
    let w = Arc::new(w);
    until(&w, "synced on the leader", |r| r.is_synced()).await;
    let first = w.with(|r| r.synced_remote()).unwrap();
    assert!(w.with(|r| r.server()).unwrap().leader);

    let mut acked = Vec::new();
    let mut killed = false;
    for batch in 0..N / BATCH {
        let mut tasks = Vec::new();
        for k in 0..BATCH {
            let i = batch * BATCH + k;
            let name = format!("t{i}");
            let w = w.clone();
            tasks.push(tokio::spawn(async move {
                let n = name.clone();
                let (outcome, attempts) = w
                    .transact(Box::new(move |m: &NbSnapshot| {
                        if m.logical_switch_by_name(&n).is_some() {
                            return vec![];
                        }
                        let ls = LogicalSwitch {
                            name: n.clone(),
                            ..LogicalSwitch::default()
                        };
                        vec![
                            wait_absent("Logical_Switch", json!([["name", "==", n.clone()]])),
                            ls.insert_op(),
                        ]
                    }))
                    .await;
                (name, outcome, attempts)
            }));
        }
        if batch == 4 {
            // The batch is on its way: kill the leader under it.
            tokio::time::sleep(std::time::Duration::from_micros(300)).await;
            members[first].kill9().unwrap();
            killed = true;
        }
        for t in tasks {
            let (name, outcome, _attempts) = t.await.unwrap();
            match outcome {
                TxnOutcome::Committed(_) | TxnOutcome::Unchanged => acked.push(name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    assert!(killed);
    let now_on = w.with(|r| r.synced_remote()).unwrap();
    assert_ne!(now_on, first, "the replica moved to another member");
    assert!(
        w.with(|r| r.server()).unwrap().leader,
        "and it is the new leader"
    );

    // Read everything back through a fresh replica on any surviving member.
    let alive: Vec<String> = remotes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != first)
        .map(|(_, r)| r.clone())
        .collect();
    let (check, _ce) = procs::replica::<NbSnapshot>(alive, &["Logical_Switch"], false);
    until(&check, "checker synced", |r| {
        r.is_synced() && r.model().logical_switch().len() >= N
    })
    .await;
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    check.with(|r| {
        for ls in r.model().logical_switch().values() {
            *count.entry(ls.name.clone()).or_default() += 1;
        }
    });
    for name in &acked {
        assert_eq!(
            count.get(name),
            Some(&1),
            "{name}: acknowledged, present exactly once"
        );
    }
    assert!(
        count.values().all(|n| *n == 1),
        "nothing applied twice: {count:?}"
    );
    assert_eq!(acked.len(), N);
    let stats = w.with(|r| r.stats().clone());
    eprintln!("raft test: {stats:?}");
}
