//! Helpers for the tests that run real OVN: a temporary OVN "central" (NB and SB
//! ovsdb-servers plus ovn-northd, all `--detach`ed with pidfiles in a temporary directory and
//! stopped by pid on drop, also when the test fails), ovn-nbctl/ovn-sbctl runners, and an SB
//! snapshot read from the SB database file real ovsdb-server writes.
#![allow(dead_code, clippy::disallowed_methods, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use hf_model::SbSnapshot;

/// Whether every tool is on PATH. Missing: fails under `CI=true`, else prints a skip line.
pub fn require(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {t}"))
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test}: missing {} (scripts/test.sh installs them)",
        missing.join(", ")
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}");
    }
    eprintln!("SKIP {msg}");
    false
}

/// Runs a command and requires success; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let desc = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    assert!(
        out.status.success(),
        "{desc} failed: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// OVN's own schemas (real OVN 23.03 is the oracle).
pub fn ovn_schema(db: &str) -> PathBuf {
    PathBuf::from(format!("/usr/share/ovn/ovn-{db}.ovsschema"))
}

/// NB + SB ovsdb-servers and ovn-northd in a temporary directory.
pub struct Central {
    pub dir: tempfile::TempDir,
    pub nb: String,
    pub sb: String,
    pids: Vec<PathBuf>,
}

impl Central {
    pub fn start() -> Central {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path().to_path_buf();
        let mut c = Central {
            nb: format!("unix:{}", d.join("nb.sock").display()),
            sb: format!("unix:{}", d.join("sb.sock").display()),
            dir,
            pids: Vec::new(),
        };
        for db in ["nb", "sb"] {
            let file = d.join(format!("{db}.db"));
            run_ok(
                Command::new("ovsdb-tool")
                    .arg("create")
                    .arg(&file)
                    .arg(ovn_schema(db)),
            );
            let pid = d.join(format!("{db}.pid"));
            c.pids.push(pid.clone());
            run_ok(
                Command::new("ovsdb-server")
                    .arg("--detach")
                    .arg(format!("--pidfile={}", pid.display()))
                    .arg(format!(
                        "--log-file={}",
                        d.join(format!("{db}.log")).display()
                    ))
                    .arg(format!(
                        "--unixctl={}",
                        d.join(format!("{db}.ctl")).display()
                    ))
                    .arg(format!(
                        "--remote=punix:{}",
                        d.join(format!("{db}.sock")).display()
                    ))
                    .arg(&file),
            );
        }
        let pid = d.join("northd.pid");
        c.pids.push(pid.clone());
        run_ok(
            Command::new("ovn-northd")
                .arg("--detach")
                .arg(format!("--pidfile={}", pid.display()))
                .arg(format!("--log-file={}", d.join("northd.log").display()))
                .arg(format!("--unixctl={}", d.join("northd.ctl").display()))
                .arg(format!("--ovnnb-db={}", c.nb))
                .arg(format!("--ovnsb-db={}", c.sb)),
        );
        c
    }

    /// `ovn-nbctl --db=NB ARGS...` (one shell-free argument list).
    pub fn nbctl(&self, args: &[&str]) -> String {
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .args(args),
        )
    }

    /// `ovn-sbctl --db=SB ARGS...`.
    pub fn sbctl(&self, args: &[&str]) -> String {
        run_ok(
            Command::new("ovn-sbctl")
                .arg(format!("--db={}", self.sb))
                .args(args),
        )
    }

    /// Waits until northd has processed every NB change.
    pub fn sync(&self) {
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .arg("--timeout=30")
                .args(["--wait=sb", "sync"]),
        );
    }

    /// The SB as real ovsdb-server serves it (`ovsdb-client backup`: one compacted record;
    /// call after [`Central::sync`]).
    pub fn sb_snapshot(&self) -> SbSnapshot {
        let out = Command::new("ovsdb-client")
            .args(["backup", &self.sb, "OVN_Southbound"])
            .output()
            .expect("ovsdb-client backup");
        assert!(out.status.success(), "ovsdb-client backup failed");
        let f = self.dir.path().join("sb-backup.db");
        std::fs::write(&f, &out.stdout).expect("write backup");
        load_snapshot(&f)
    }
}

/// Reads an OVSDB standalone database file (without writing to it) into an SB snapshot.
pub fn load_snapshot(path: &Path) -> SbSnapshot {
    let data = std::fs::read(path).expect("read SB file");
    let mut reader = hf_ovsdb::file::RecordReader::new(&data);
    let first = reader
        .next()
        .expect("schema record")
        .expect("schema record parses");
    let schema = hf_ovsdb::Schema::from_json(&first.json).expect("schema");
    let mut db = hf_ovsdb::Database::new(Arc::new(schema), 1);
    for (i, rec) in reader.enumerate() {
        // `ovsdb-client backup` writes whole records: a bad one is a failure, not the end.
        let rec = rec.unwrap_or_else(|e| {
            panic!("{}: record {} after the schema: {e}", path.display(), i + 1)
        });
        let delta = hf_ovsdb::file::record_delta(&mut db, &rec.json).expect("record");
        db.apply(&delta);
    }
    SbSnapshot::from_db(&db).expect("SB snapshot")
}

impl Drop for Central {
    fn drop(&mut self) {
        for p in self.pids.iter().rev() {
            if let Ok(s) = std::fs::read_to_string(p)
                && let Ok(pid) = s.trim().parse::<i32>()
            {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}
