//! Real `ovsdb-server` processes for the client tests (standalone and Raft members, from
//! hf-testkit) and the replicas the tests run against them.

use std::path::Path;
use std::time::Duration;

use hf_ovsdb_net::client::{Client, Config, Event, Model, TableSelect};

pub use hf_testkit::ovn::raft::Member;

/// A standalone `ovsdb-server` for `schema` in `dir`.
pub fn standalone(dir: &Path, schema: &Path) -> Member {
    hf_testkit::ovn::raft::standalone(dir, schema).unwrap()
}

/// A Raft cluster of `n` members for `schema` (database `name`), every member joined.
pub fn cluster(dir: &Path, schema: &Path, name: &str, n: usize) -> Vec<Member> {
    hf_testkit::ovn::raft::Cluster::start(dir, "m", schema, name, n)
        .unwrap()
        .members
}

/// A replica of `tables` (every model table when empty).
pub fn replica<M: Model>(
    remotes: Vec<String>,
    tables: &[&str],
    leader_only: bool,
) -> (Client<M>, tokio::sync::mpsc::UnboundedReceiver<Event<M>>) {
    Client::spawn(
        remotes,
        Config {
            tables: tables.iter().map(|t| TableSelect::all(t)).collect(),
            leader_only,
            probe_interval_ms: Some(2_000),
            backoff_max_ms: 1_000,
            ..Config::default()
        },
    )
}

/// Wait up to 60 s for `f` to hold for the replica; fails the test otherwise.
pub async fn until<M: Model>(
    c: &Client<M>,
    what: &str,
    f: impl FnMut(&hf_ovsdb_net::client::Replica<M>) -> bool,
) {
    assert!(
        c.wait_until(Duration::from_secs(60), f).await,
        "timed out waiting: {what}"
    );
}
