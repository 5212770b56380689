//! Real `ovsdb-server` processes, standalone or members of a Raft cluster of one database,
//! each listening on a loopback TCP port and a unix socket in its own directory, stopped on
//! drop (also when a test fails).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{Daemon, create_db, daemon_args, in_rundir};
use crate::Result;
use crate::cmd::{self, DEFAULT_TIMEOUT, free_port, poll};

/// One `ovsdb-server` serving one database file; its pidfile, unixctl socket, log and client
/// socket are `ovsdb.pid`/`.ctl`/`.log`/`.sock` in its own directory.
#[derive(Debug)]
pub struct Member {
    /// Its directory.
    pub dir: PathBuf,
    /// The database file.
    pub db: PathBuf,
    /// The loopback TCP port clients connect to.
    pub port: u16,
    /// The unixctl socket.
    pub ctl: PathBuf,
    daemon: Daemon,
}

impl Member {
    /// Start `ovsdb-server` on `db` (created by the caller) in `dir`, on a new port.
    pub fn start(dir: &Path, db: &Path) -> Result<Member> {
        let mut m = Member {
            dir: dir.to_path_buf(),
            db: db.to_path_buf(),
            port: free_port()?,
            ctl: dir.join("ovsdb.ctl"),
            daemon: Daemon::adopt(dir, "ovsdb"),
        };
        m.spawn()?;
        Ok(m)
    }

    fn spawn(&mut self) -> Result<()> {
        // A socket file left by a killed server would make the new one fail to listen.
        let _ = std::fs::remove_file(self.sock());
        let mut c = Command::new("ovsdb-server");
        in_rundir(&mut c, &self.dir)
            .arg(format!("--remote=ptcp:{}:127.0.0.1", self.port))
            .arg(format!("--remote=punix:{}", self.sock().display()))
            .arg(&self.db)
            .args(daemon_args(&self.dir, "ovsdb"));
        // The handle stays: it names the same pidfile (replacing it would stop the new server).
        cmd::run(&mut c, DEFAULT_TIMEOUT).map(drop)
    }

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

    /// The pid, while it runs.
    pub fn pid(&self) -> Option<i32> {
        self.daemon.pid()
    }

    /// SIGKILL the server and wait until it is gone.
    pub fn kill9(&mut self) -> Result<()> {
        self.daemon.kill9()
    }

    /// Start again on the same file, port and socket.
    pub fn restart(&mut self) -> Result<()> {
        self.kill9()?;
        self.spawn()
    }

    /// `ovs-appctl cluster/status` of database `name` (empty when the server does not answer).
    pub fn cluster_status(&self, name: &str) -> String {
        let mut c = Command::new("ovs-appctl");
        c.arg("-t").arg(&self.ctl).arg("cluster/status").arg(name);
        cmd::output(&mut c, None, Duration::from_secs(10))
            .map(|o| cmd::lossy(&o.stdout))
            .unwrap_or_default()
    }
}

/// A standalone `ovsdb-server` for `schema`, in `dir` (database file `dir/db`).
pub fn standalone(dir: &Path, schema: &Path) -> Result<Member> {
    let db = dir.join("db");
    create_db(&db, schema)?;
    Member::start(dir, &db)
}

/// A Raft cluster of one database: members `DIR/{base}{i}/`, in the order of their remotes.
#[derive(Debug)]
pub struct Cluster {
    /// The members, killed ones included.
    pub members: Vec<Member>,
    db_name: String,
    killed: Vec<usize>,
}

impl Cluster {
    /// `ovsdb-tool create-cluster` / `join-cluster` over `n` loopback TCP ports for Raft, the
    /// servers, and a wait (up to 60 s) until every member has joined.
    pub fn start(
        dir: &Path,
        base: &str,
        schema: &Path,
        db_name: &str,
        n: usize,
    ) -> Result<Cluster> {
        let raft: Vec<u16> = (0..n).map(|_| free_port()).collect::<Result<_>>()?;
        let mut members = Vec::new();
        for (i, port) in raft.iter().enumerate() {
            let d = dir.join(format!("{base}{i}"));
            std::fs::create_dir_all(&d)
                .map_err(|e| crate::KitError::io(format!("creating {}", d.display()), e))?;
            let db = d.join("db");
            let local = format!("tcp:127.0.0.1:{port}");
            let mut c = Command::new("ovsdb-tool");
            if i == 0 {
                c.arg("create-cluster").arg(&db).arg(schema).arg(&local);
            } else {
                c.arg("join-cluster").arg(&db).arg(db_name).arg(&local);
                c.args(raft[..i].iter().map(|p| format!("tcp:127.0.0.1:{p}")));
            }
            cmd::run(&mut c, DEFAULT_TIMEOUT)?;
            members.push(Member::start(&d, &db)?);
        }
        let cluster = Cluster {
            members,
            db_name: db_name.to_string(),
            killed: Vec::new(),
        };
        poll(
            Duration::from_secs(60),
            || format!("the {db_name} cluster to form:\n{}", cluster.status()),
            || {
                cluster
                    .members
                    .iter()
                    .all(|m| m.cluster_status(db_name).contains("Status: cluster member"))
                    .then_some(())
            },
        )?;
        Ok(cluster)
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
    pub fn leader(&self) -> Result<usize> {
        poll(
            Duration::from_secs(30),
            || {
                format!(
                    "a leader of the {} cluster:\n{}",
                    self.db_name,
                    self.status()
                )
            },
            || {
                self.alive_members()
                    .into_iter()
                    .find(|i| self.is_leader(*i))
            },
        )
    }

    /// SIGKILL the current leader (waiting for one to be elected first); its index.
    pub fn kill_leader(&mut self) -> Result<usize> {
        let l = self.leader()?;
        self.kill(l)?;
        Ok(l)
    }

    /// SIGKILL member `i`.
    pub fn kill(&mut self, i: usize) -> Result<()> {
        self.members[i].kill9()?;
        self.killed.push(i);
        Ok(())
    }

    /// Move leadership away from the live leader (`cluster/failure-test transfer-leadership`,
    /// the transfer ovsdb-server makes before writing a snapshot): the old leader stays up as
    /// a follower, its connections open. Waits up to 30 s for another member to lead; returns
    /// (old leader, new leader). A transfer whose election fails (ovsdb-server 3.1 sometimes
    /// has a rejoined member not yet connected to every other one, and the old leader wins
    /// the next election by timeout) is asked for again, up to three times in all.
    pub fn transfer_leadership(&self) -> Result<(usize, usize)> {
        let old = self.leader()?;
        let mut last = None;
        for _ in 0..3 {
            let leader = self.leader()?;
            if leader != old {
                return Ok((old, leader));
            }
            cmd::run(
                Command::new("ovs-appctl")
                    .arg("-t")
                    .arg(&self.members[old].ctl)
                    .args(["cluster/failure-test", "transfer-leadership"]),
                DEFAULT_TIMEOUT,
            )?;
            match poll(
                Duration::from_secs(10),
                || {
                    format!(
                        "{} leadership to move from member {old}:\n{}",
                        self.db_name,
                        self.status()
                    )
                },
                || self.leader().ok().filter(|n| *n != old),
            ) {
                Ok(new) => return Ok((old, new)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            crate::KitError::Invalid(format!("{} leadership did not move", self.db_name))
        }))
    }

    /// Start every killed member again on its file (it rejoins the cluster with the log it
    /// had), and wait up to 30 s until each is a cluster member again that knows the leader.
    pub fn rejoin(&mut self) -> Result<()> {
        let back: Vec<usize> = std::mem::take(&mut self.killed);
        for i in &back {
            self.members[*i].restart()?;
        }
        for i in back {
            let rejoined = |s: &str| {
                s.contains("Status: cluster member")
                    && s.lines()
                        .any(|l| l.starts_with("Leader: ") && !l.contains("unknown"))
            };
            poll(
                Duration::from_secs(30),
                || {
                    format!(
                        "{} member {i} to rejoin:\n{}",
                        self.db_name,
                        self.members[i].cluster_status(&self.db_name)
                    )
                },
                || rejoined(&self.members[i].cluster_status(&self.db_name)).then_some(()),
            )?;
        }
        Ok(())
    }
}
