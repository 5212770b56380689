//! Two replicas contend for a lock: exactly one holds it; killing the holder hands it over.

use hf_model::NbSnapshot;
use hf_ovsdb_net::client::Client;

use crate::common::{self, HoldfastDb, require};
use crate::procs::{self, until};

fn holders(a: &Client<NbSnapshot>, b: &Client<NbSnapshot>) -> (bool, bool) {
    (a.with(|r| r.has_lock()), b.with(|r| r.has_lock()))
}

async fn contend(remote: String) {
    let (a, _ea) = procs::replica::<NbSnapshot>(vec![remote.clone()], &["NB_Global"], false);
    let (b, _eb) = procs::replica::<NbSnapshot>(vec![remote.clone()], &["NB_Global"], false);
    a.with(|r| r.lock("hf_northd"));
    until(&a, "a holds the lock", |r| r.has_lock()).await;
    b.with(|r| r.lock("hf_northd"));
    // Give b every chance to (wrongly) think it holds the lock too.
    until(&b, "b synced", |r| r.is_synced()).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(holders(&a, &b), (true, false), "exactly one holder");
    // Kill the holder: its connection goes away with it.
    drop(a);
    until(&b, "the lock is handed over", |r| r.has_lock()).await;
    // A newcomer waits in line.
    let (c, _ec) = procs::replica::<NbSnapshot>(vec![remote], &["NB_Global"], false);
    c.with(|r| r.lock("hf_northd"));
    until(&c, "c synced", |r| r.is_synced()).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(holders(&b, &c), (true, false), "still exactly one holder");
    b.with(|r| r.unlock());
    until(&c, "unlock hands it over", |r| r.has_lock()).await;
    assert!(!b.with(|r| r.has_lock()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_contention_on_holdfast_db() {
    let dir = tempfile::tempdir().unwrap();
    let db = HoldfastDb::start(dir.path(), &[("nb.db", &common::nb_schema())], &[]);
    contend(db.tcp.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_contention_on_ovsdb_server() {
    if !require(
        "lock_contention_on_ovsdb_server",
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "/usr/share/ovn/ovn-nb.ovsschema",
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let m = procs::standalone(
        dir.path(),
        std::path::Path::new("/usr/share/ovn/ovn-nb.ovsschema"),
    );
    contend(m.remote()).await;
}
