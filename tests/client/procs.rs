//! Real `ovsdb-server` processes for the client tests: standalone or clustered members on
//! loopback TCP ports, started with `--detach` and stopped by pid on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hf_ovsdb_net::client::{Client, Config, Event, Model, TableSelect};

use crate::common::run_ok;

/// A free loopback TCP port (bound and released: another process could take it, which is
/// unlikely on a test machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One `ovsdb-server` process serving one database file.
pub struct Member {
    pub dir: PathBuf,
    pub db: PathBuf,
    pub port: u16,
    pub ctl: PathBuf,
    pidfile: PathBuf,
}

impl Member {
    /// `tcp:127.0.0.1:PORT`.
    pub fn remote(&self) -> String {
        format!("tcp:127.0.0.1:{}", self.port)
    }

    /// Start `ovsdb-server` on `db` (created by the caller), listening on a new port.
    pub fn start(dir: &Path, db: &Path) -> Self {
        let mut m = Member {
            dir: dir.to_path_buf(),
            db: db.to_path_buf(),
            port: free_port(),
            ctl: dir.join("ovsdb.ctl"),
            pidfile: dir.join("ovsdb.pid"),
        };
        m.spawn();
        m
    }

    fn spawn(&mut self) {
        run_ok(
            Command::new("ovsdb-server")
                .arg("--detach")
                .arg(format!("--pidfile={}", self.pidfile.display()))
                .arg(format!(
                    "--log-file={}",
                    self.dir.join("ovsdb.log").display()
                ))
                .arg(format!("--unixctl={}", self.ctl.display()))
                .arg(format!("--remote=ptcp:{}:127.0.0.1", self.port))
                .arg(&self.db),
        );
    }

    /// SIGKILL the server.
    pub fn kill9(&mut self) {
        if let Ok(p) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").arg("-9").arg(p.trim()).status();
            let _ = std::fs::remove_file(&self.pidfile);
        }
        // Let the port go.
        std::thread::sleep(Duration::from_millis(100));
    }

    /// Start again on the same file and port.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// `ovs-appctl cluster/status` of database `name`.
    pub fn cluster_status(&self, name: &str) -> String {
        let out = Command::new("ovs-appctl")
            .arg("-t")
            .arg(&self.ctl)
            .arg("cluster/status")
            .arg(name)
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Ok(p) = std::fs::read_to_string(&self.pidfile) {
            let _ = Command::new("kill").arg(p.trim()).status();
        }
    }
}

/// A standalone `ovsdb-server` for `schema`.
pub fn standalone(dir: &Path, schema: &Path) -> Member {
    let db = dir.join("db");
    run_ok(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(&db)
            .arg(schema),
    );
    Member::start(dir, &db)
}

/// A Raft cluster of `n` members for `schema` (database `name`), waiting until every member
/// has joined.
pub fn cluster(dir: &Path, schema: &Path, name: &str, n: usize) -> Vec<Member> {
    let raft: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let mut members = Vec::new();
    for (i, port) in raft.iter().enumerate() {
        let d = dir.join(format!("m{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let db = d.join("db");
        let local = format!("tcp:127.0.0.1:{port}");
        if i == 0 {
            run_ok(
                Command::new("ovsdb-tool")
                    .arg("create-cluster")
                    .arg(&db)
                    .arg(schema)
                    .arg(&local),
            );
        } else {
            let mut c = Command::new("ovsdb-tool");
            c.arg("join-cluster").arg(&db).arg(name).arg(&local);
            for p in &raft[..i] {
                c.arg(format!("tcp:127.0.0.1:{p}"));
            }
            run_ok(&mut c);
        }
        members.push(Member::start(&d, &db));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let joined = members
            .iter()
            .filter(|m| m.cluster_status(name).contains("Status: cluster member"))
            .count();
        if joined == n {
            break;
        }
        assert!(Instant::now() < deadline, "the cluster never formed");
        std::thread::sleep(Duration::from_millis(100));
    }
    members
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
