//! Real `ovsdb-server` processes: standalone or members of a Raft cluster of one database, in a
//! test's directory, each listening on a loopback TCP port and a unix socket, started with
//! `--detach --pidfile --unixctl --log-file` and stopped by pid on drop (also when a test
//! fails). Shared by the client tests (`tests/client/`) and northd's cluster tests
//! (`tests/northd/cluster.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{free_port, run, run_ok};

/// One `ovsdb-server` process serving one database file; its pidfile, unixctl socket, log
/// and client socket are `ovsdb.pid`/`.ctl`/`.log`/`.sock` in its own directory.
pub struct Member {
    /// Its directory.
    pub dir: PathBuf,
    /// The database file.
    pub db: PathBuf,
    /// The loopback TCP port clients connect to.
    pub port: u16,
    /// The unixctl socket.
    pub ctl: PathBuf,
    pidfile: PathBuf,
}

impl Member {
    /// `tcp:127.0.0.1:PORT`.
    pub fn remote(&self) -> String {
        format!("tcp:127.0.0.1:{}", self.port)
    }

    /// `unix:DIR/ovsdb.sock`.
    pub fn unix(&self) -> String {
        format!("unix:{}", self.sock().display())
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("ovsdb.sock")
    }

    /// Start `ovsdb-server` on `db` (created by the caller) in `dir`, on a new port.
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
        // A socket file left by a killed server would make the new one fail to listen.
        let _ = std::fs::remove_file(self.sock());
        run_ok(
            Command::new("ovsdb-server")
                .arg("--detach")
                .arg("--no-chdir")
                .arg(format!("--pidfile={}", self.pidfile.display()))
                .arg(format!(
                    "--log-file={}",
                    self.dir.join("ovsdb.log").display()
                ))
                .arg(format!("--unixctl={}", self.ctl.display()))
                .arg(format!("--remote=ptcp:{}:127.0.0.1", self.port))
                .arg(format!("--remote=punix:{}", self.sock().display()))
                .arg(&self.db),
        );
    }

    /// The pid, while it runs.
    pub fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(&self.pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// SIGKILL the server and wait until it is gone; its pidfile is removed (the pid may be
    /// reused: nothing to signal on drop).
    pub fn kill9(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let end = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "ovsdb-server {} (pid {pid}) survived SIGKILL",
                self.dir.display()
            );
        }
        let _ = std::fs::remove_file(&self.pidfile);
    }

    /// Start again on the same file, port and socket.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// `ovs-appctl cluster/status` of database `name` (empty when the server does not answer).
    pub fn cluster_status(&self, name: &str) -> String {
        let out = run(
            Command::new("ovs-appctl")
                .arg("-t")
                .arg(&self.ctl)
                .arg("cluster/status")
                .arg(name),
            Duration::from_secs(10),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

/// A standalone `ovsdb-server` for `schema`, in `dir`.
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

/// A Raft cluster of one database: members `DIR/{base}{i}/`, in the order of their remotes.
pub struct Cluster {
    /// The members, killed ones included.
    pub members: Vec<Member>,
    db_name: String,
    killed: Vec<usize>,
}

impl Cluster {
    /// `ovsdb-tool create-cluster` / `join-cluster` over `n` loopback TCP ports for Raft, the
    /// servers, and a wait (up to 60 s) until every member has joined.
    pub fn start(dir: &Path, base: &str, schema: &Path, db_name: &str, n: usize) -> Cluster {
        let raft: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut members = Vec::new();
        for (i, port) in raft.iter().enumerate() {
            let d = dir.join(format!("{base}{i}"));
            std::fs::create_dir_all(&d).expect("mkdir");
            let db = d.join("db");
            let local = format!("tcp:127.0.0.1:{port}");
            let mut c = Command::new("ovsdb-tool");
            if i == 0 {
                c.arg("create-cluster").arg(&db).arg(schema).arg(&local);
            } else {
                c.arg("join-cluster").arg(&db).arg(db_name).arg(&local);
                c.args(raft[..i].iter().map(|p| format!("tcp:127.0.0.1:{p}")));
            }
            run_ok(&mut c);
            members.push(Member::start(&d, &db));
        }
        let cluster = Cluster {
            members,
            db_name: db_name.to_string(),
            killed: Vec::new(),
        };
        poll(
            Duration::from_secs(60),
            || {
                cluster
                    .members
                    .iter()
                    .all(|m| m.cluster_status(db_name).contains("Status: cluster member"))
                    .then_some(())
            },
            || format!("the {db_name} cluster never formed:\n{}", cluster.status()),
        );
        cluster
    }

    /// Every member's unix socket, as OVSDB tools take a list of remotes.
    pub fn remotes(&self) -> String {
        self.remotes_of((0..self.members.len()).collect())
    }

    /// The unix sockets of the members not killed.
    pub fn alive(&self) -> String {
        self.remotes_of(self.alive_members())
    }

    /// The unix sockets of `members`, comma-separated.
    pub fn remotes_of(&self, members: Vec<usize>) -> String {
        members
            .into_iter()
            .map(|i| self.members[i].unix())
            .collect::<Vec<_>>()
            .join(",")
    }

    fn alive_members(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|i| !self.killed.contains(i))
            .collect()
    }

    /// Whether member `i` says it leads.
    pub fn is_leader(&self, i: usize) -> bool {
        self.members[i]
            .cluster_status(&self.db_name)
            .contains("Role: leader")
    }

    /// `cluster/status` of the live members (for failure messages).
    pub fn status(&self) -> String {
        self.alive_members()
            .into_iter()
            .map(|i| {
                format!(
                    "--- member {i}\n{}",
                    self.members[i].cluster_status(&self.db_name)
                )
            })
            .collect()
    }

    /// The current leader, waiting up to 30 s for one to be elected.
    pub fn leader(&self) -> usize {
        poll(
            Duration::from_secs(30),
            || {
                self.alive_members()
                    .into_iter()
                    .find(|i| self.is_leader(*i))
            },
            || {
                format!(
                    "the {} cluster has no leader:\n{}",
                    self.db_name,
                    self.status()
                )
            },
        )
    }

    /// SIGKILL the current leader (waiting for one to be elected first); its index.
    pub fn kill_leader(&mut self) -> usize {
        let l = self.leader();
        self.kill(l);
        l
    }

    /// SIGKILL member `i`.
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill9();
        self.killed.push(i);
    }

    /// Move leadership away from the live leader (`cluster/failure-test transfer-leadership`,
    /// the transfer ovsdb-server makes before writing a snapshot): the old leader stays up as
    /// a follower, its connections open. Waits up to 30 s for another member to lead; returns
    /// (old leader, new leader).
    pub fn transfer_leadership(&self) -> (usize, usize) {
        let old = self.leader();
        run_ok(
            Command::new("ovs-appctl")
                .arg("-t")
                .arg(&self.members[old].ctl)
                .args(["cluster/failure-test", "transfer-leadership"]),
        );
        let new = poll(
            Duration::from_secs(30),
            || Some(self.leader()).filter(|n| *n != old),
            || {
                format!(
                    "{} leadership never moved from member {old}:\n{}",
                    self.db_name,
                    self.status()
                )
            },
        );
        (old, new)
    }

    /// Start every killed member again on its file (it rejoins the cluster with the log it
    /// had), and wait up to 30 s until each is a cluster member again that knows the leader.
    pub fn rejoin(&mut self) {
        let back: Vec<usize> = std::mem::take(&mut self.killed);
        for i in &back {
            self.members[*i].restart();
        }
        for i in back {
            let rejoined = |s: &str| {
                s.contains("Status: cluster member")
                    && s.lines()
                        .any(|l| l.starts_with("Leader: ") && !l.contains("unknown"))
            };
            poll(
                Duration::from_secs(30),
                || rejoined(&self.members[i].cluster_status(&self.db_name)).then_some(()),
                || {
                    format!(
                        "{} member {i} never rejoined:\n{}",
                        self.db_name,
                        self.members[i].cluster_status(&self.db_name)
                    )
                },
            );
        }
    }
}

/// `f`'s answer once it has one, asking every 20 ms; panics with `why()` after `timeout`.
fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>, why: impl Fn() -> String) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "{}", why());
        std::thread::sleep(Duration::from_millis(20));
    }
}
