//! `HF_BENCH_NORTHD_DB=cluster`: the `northd` suite's databases as 3-member real
//! `ovsdb-server` Raft clusters (`ovsdb-tool create-cluster`/`join-cluster` over local TCP
//! ports, clients on one unix socket per member), and the leader killed mid-run.
//!
//! What it does not do: run `holdfast db` as a cluster (it is standalone), or restart a
//! killed member.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use hf_testkit::cmd::free_port;

use super::super::central::{Daemon, daemon_args, ok};

/// Whether the suite runs on clusters (`HF_BENCH_NORTHD_DB=cluster`); any other value is an
/// error naming the accepted ones.
pub fn wanted() -> anyhow::Result<bool> {
    match std::env::var("HF_BENCH_NORTHD_DB").as_deref() {
        Err(_) | Ok("") | Ok("standalone") => Ok(false),
        Ok("cluster") => Ok(true),
        Ok(other) => bail!(
            "HF_BENCH_NORTHD_DB={other}: unknown; use `cluster` (3-member Raft clusters) or \
             `standalone` (the default)"
        ),
    }
}

/// One database on three members `{name}0..2` in `dir`.
pub struct Raft {
    dir: PathBuf,
    name: String,
    db: &'static str,
    members: Vec<Option<Daemon>>,
}

/// The clusters' election timer (ms): see [`Raft::raise_election_timer`].
pub const ELECTION_TIMER_MS: u64 = 8000;

impl Raft {
    /// A cluster of database `db` created from `contents` (a schema, or a standalone database
    /// file whose data the cluster starts with).
    pub fn start(
        dir: &Path,
        name: &str,
        db: &'static str,
        contents: &Path,
    ) -> anyhow::Result<Raft> {
        let ports = [free_port()?, free_port()?, free_port()?];
        let file = |i: usize| dir.join(format!("{name}{i}.db"));
        ok(Command::new("ovsdb-tool")
            .arg("create-cluster")
            .arg(file(0))
            .arg(contents)
            .arg(format!("tcp:127.0.0.1:{}", ports[0])))?;
        for (i, port) in ports.iter().enumerate().skip(1) {
            ok(Command::new("ovsdb-tool")
                .arg("join-cluster")
                .arg(file(i))
                .arg(db)
                .arg(format!("tcp:127.0.0.1:{port}"))
                .arg(format!("tcp:127.0.0.1:{}", ports[0])))?;
        }
        let mut r = Raft {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            db,
            members: Vec::new(),
        };
        for i in 0..3 {
            let member = format!("{name}{i}");
            ok(Command::new("ovsdb-server")
                .args(daemon_args(dir, &member))
                .arg(format!("--remote=punix:{}", r.sock(i).display()))
                .arg(file(i)))
            .with_context(|| format!("starting cluster member {member}"))?;
            r.members.push(Some(Daemon::adopt(dir, &member)));
        }
        Ok(r)
    }

    fn sock(&self, i: usize) -> PathBuf {
        self.dir.join(format!("{}{i}.sock", self.name))
    }

    /// The live members' remotes, comma-separated (all three until one is killed).
    pub fn remotes(&self) -> String {
        (0..3)
            .filter(|i| self.members[*i].is_some())
            .map(|i| format!("unix:{}", self.sock(i).display()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// One live member's remote (for a single-remote watch).
    pub fn one(&self) -> String {
        self.remotes()
            .split(',')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn leader(&self) -> Option<usize> {
        (0..3).filter(|i| self.members[*i].is_some()).find(|i| {
            Command::new("ovs-appctl")
                .arg("-t")
                .arg(self.dir.join(format!("{}{i}.ctl", self.name)))
                .args(["cluster/status", self.db])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("Role: leader"))
        })
    }

    /// Wait (up to `t`) for a leader among the live members.
    pub fn wait_leader(&self, t: Duration) -> anyhow::Result<usize> {
        let end = Instant::now() + t;
        loop {
            if let Some(l) = self.leader() {
                return Ok(l);
            }
            if Instant::now() > end {
                bail!("the {} cluster elected no leader within {t:?}", self.db);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Raises the cluster's election timer to `ms` (doubling from ovsdb-server's 1 s default,
    /// the most one change may do, each on the leader once the last one is committed), as
    /// large OVN deployments do: with 1 s, real ovn-northd's cold 100k-row transaction at
    /// 500x40 never committed within 10 minutes (the leader busy with it longer than the
    /// timer, its followers start elections). A killed leader is then replaced after about
    /// `ms`, on both stacks alike.
    pub fn raise_election_timer(&self, ms: u64) -> anyhow::Result<()> {
        let mut t = 1000;
        while t < ms {
            t = (t * 2).min(ms);
            let end = Instant::now() + Duration::from_secs(60);
            loop {
                let l = self.wait_leader(Duration::from_secs(30))?;
                let out = Command::new("ovs-appctl")
                    .arg("-t")
                    .arg(self.dir.join(format!("{}{l}.ctl", self.name)))
                    .args(["cluster/change-election-timer", self.db, &t.to_string()])
                    .output()?;
                if out.status.success() {
                    break;
                }
                if Instant::now() > end {
                    bail!(
                        "the {} cluster refused election timer {t} ms: {}",
                        self.db,
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    }

    /// SIGKILL the leader.
    pub fn kill_leader(&mut self) -> anyhow::Result<()> {
        let l = self.wait_leader(Duration::from_secs(30))?;
        if let Some(d) = self.members[l].take() {
            // Its pidfile goes too: the dead pid is not signalled again on drop.
            d.kill9()?;
        }
        Ok(())
    }
}
