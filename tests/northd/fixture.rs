//! The databases and northd processes of one test: `holdfast db` (NB and SB on one socket) or
//! two real `ovsdb-server`s, and any number of `holdfast northd` daemons started with
//! `--detach --pidfile --unixctl --log-file` in the test's directory and stopped by pid.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hf_testkit::ovn::{NB_SCHEMA, OvsdbServer, SB_SCHEMA, create_db};

use crate::common::{self, HoldfastDb, run, run_ok};

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// `holdfast db` with holdfast's schemas.
    Holdfast,
    /// Real `ovsdb-server`s with OVN 23.03's schemas.
    Ovsdb,
}

/// One `holdfast northd` daemon.
pub struct NorthdProc {
    /// `--pidfile`.
    pub pidfile: PathBuf,
    /// `--unixctl`.
    pub ctl: PathBuf,
    /// `--log-file`.
    pub log: PathBuf,
    pid: Option<i32>,
}

impl NorthdProc {
    /// Start `holdfast northd` detached against `nb`/`sb`.
    pub fn start(dir: &Path, name: &str, nb: &str, sb: &str, extra: &[&str]) -> NorthdProc {
        let mut p = NorthdProc {
            pidfile: dir.join(format!("{name}.pid")),
            ctl: dir.join(format!("{name}.ctl")),
            log: dir.join(format!("{name}.log")),
            pid: None,
        };
        run_ok(
            Command::new(common::holdfast())
                .arg("northd")
                .arg(format!("--ovnnb-db={nb}"))
                .arg(format!("--ovnsb-db={sb}"))
                .arg("--detach")
                .arg("--no-chdir")
                .arg(format!("--pidfile={}", p.pidfile.display()))
                .arg(format!("--unixctl={}", p.ctl.display()))
                .arg(format!("--log-file={}", p.log.display()))
                .arg("-vconsole:off")
                .args(extra),
        );
        p.pid = std::fs::read_to_string(&p.pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        p
    }

    /// The pid.
    pub fn pid(&self) -> i32 {
        self.pid.unwrap_or(0)
    }

    /// `ovn-appctl -t CTL args...`: (success, stdout, stderr).
    pub fn appctl_raw(&self, args: &[&str]) -> (bool, String, String) {
        let out = run(
            Command::new("ovn-appctl")
                .arg("-t")
                .arg(&self.ctl)
                .args(args),
            Duration::from_secs(20),
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `ovn-appctl` that must succeed; its stdout.
    pub fn appctl(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.appctl_raw(args);
        assert!(
            ok,
            "ovn-appctl {args:?} failed: {err}\nlog:\n{}",
            self.log_text()
        );
        out
    }

    /// `status`'s first line, `Status: ...`.
    pub fn status(&self) -> String {
        self.appctl(&["status"])
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    }

    /// A `memory/show` counter.
    pub fn counter(&self, key: &str) -> u64 {
        let s = self.appctl(&["memory/show"]);
        s.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}:")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("memory/show has no {key}: {s}"))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(p) = self.pid.take() {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
            wait_for(Duration::from_secs(5), || {
                !Path::new(&format!("/proc/{p}")).exists()
            });
        }
    }

    /// Stop with SIGTERM and wait for the process to go.
    pub fn stop(&mut self) {
        if let Some(p) = self.pid.take() {
            let _ = Command::new("kill")
                .arg(p.to_string())
                .stderr(std::process::Stdio::null())
                .status();
            wait_for(Duration::from_secs(10), || {
                !Path::new(&format!("/proc/{p}")).exists()
            });
        }
    }
}

impl Drop for NorthdProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Polls `f` every 20 ms until it holds or `t` passes.
pub fn wait_for(t: Duration, f: impl FnMut() -> bool) -> bool {
    hf_testkit::cmd::wait_until(t, String::new, f).is_ok()
}

/// A pidfile-started daemon stopped on drop (real ovsdb-server, real ovn-northd, holdfast's).
pub use hf_testkit::ovn::Daemon as PidDaemon;

/// The databases of one test.
pub struct Dbs {
    /// NB remote.
    pub nb: String,
    /// SB remote.
    pub sb: String,
    /// Real servers (stopped on drop).
    pub daemons: Vec<PidDaemon>,
    hfdb: Option<HoldfastDb>,
}

impl Dbs {
    /// Start the databases in `dir` (NB file `nb_name`, SB `sb.db`), with `ovn-nbctl init`
    /// and `ovn-sbctl init`.
    pub fn start(dir: &Path, backend: Backend) -> Dbs {
        Self::start_named(dir, backend, "nb.db")
    }

    /// [`Dbs::start`] with another NB file name (a rebuilt NB next to the same SB).
    pub fn start_named(dir: &Path, backend: Backend, nb_name: &str) -> Dbs {
        let dbs = match backend {
            Backend::Holdfast => {
                let sub = dir.join(nb_name.trim_end_matches(".db"));
                std::fs::create_dir_all(&sub).expect("mkdir");
                // The SB file is shared between rebuilds: a link in the server's directory.
                let sb_file = dir.join("sb.db");
                if !sb_file.exists() {
                    run_ok(
                        Command::new(common::holdfast())
                            .args(["db", "create"])
                            .arg(&sb_file)
                            .arg(common::sb_schema()),
                    );
                }
                let db = HoldfastDb::start(
                    &sub,
                    &[
                        ("nb.db", &common::nb_schema()),
                        ("../sb.db", &common::sb_schema()),
                    ],
                    &[],
                );
                Dbs {
                    nb: db.unix.clone(),
                    sb: db.unix.clone(),
                    daemons: Vec::new(),
                    hfdb: Some(db),
                }
            }
            Backend::Ovsdb => {
                let mut remotes = Vec::new();
                let mut daemons = Vec::new();
                for (x, schema) in [(nb_name, NB_SCHEMA), ("sb.db", SB_SCHEMA)] {
                    let db = dir.join(x);
                    let base = x.trim_end_matches(".db");
                    let sock = dir.join(format!("{base}.sock"));
                    if !db.exists() {
                        create_db(&db, Path::new(schema)).unwrap();
                    }
                    if !sock.exists() {
                        daemons.push(OvsdbServer::serve(dir, base, &[db], &[]).unwrap().daemon);
                    }
                    remotes.push(format!("unix:{}", sock.display()));
                }
                Dbs {
                    nb: remotes[0].clone(),
                    sb: remotes[1].clone(),
                    daemons,
                    hfdb: None,
                }
            }
        };
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", dbs.nb))
                .arg("init"),
        );
        run_ok(
            Command::new("ovn-sbctl")
                .arg(format!("--db={}", dbs.sb))
                .arg("init"),
        );
        dbs
    }

    /// SIGKILL `holdfast db` and start it again on the same files and socket path.
    pub fn restart_holdfast(&mut self) {
        if let Some(d) = self.hfdb.as_mut() {
            d.restart();
            assert_eq!(d.unix, self.nb, "the restarted server moved its socket");
        }
    }

    /// Stop the servers (SIGKILL for holdfast db, SIGTERM for ovsdb-server).
    pub fn stop(&mut self) {
        if let Some(mut d) = self.hfdb.take() {
            d.kill9();
        }
        self.daemons.clear();
    }

    /// `ovn-nbctl --db=NB --timeout=30`.
    pub fn nbctl(&self) -> Command {
        let mut c = Command::new("ovn-nbctl");
        c.arg(format!("--db={}", self.nb)).arg("--timeout=30");
        c
    }

    /// `ovn-sbctl --db=SB --timeout=30`.
    pub fn sbctl(&self) -> Command {
        let mut c = Command::new("ovn-sbctl");
        c.arg(format!("--db={}", self.sb)).arg("--timeout=30");
        c
    }

    /// `ovn-nbctl get NB_Global . COLUMN` as an integer.
    pub fn nb_global(&self, column: &str) -> i64 {
        run_ok(self.nbctl().args(["get", "NB_Global", ".", column]))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("NB_Global {column}: {e}"))
    }
}
