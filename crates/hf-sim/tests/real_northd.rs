//! The acceptance scenarios with real ovn-northd 23.03 in place of holdfast northd: each
//! scenario's NB is built in a real `ovsdb-server` (the same transactions, sent with
//! `ovsdb-client transact`), the chassis rows are pre-created with `ovn-sbctl chassis-add`
//! (so gateway chassis resolve), real `ovn-northd` compiles it (`ovn-nbctl --wait=sb sync`),
//! and its SB (`ovsdb-client backup`) is loaded into the world as a static SB. The world's
//! controllers then claim, translate and forward from real northd's flows, and the scenario's
//! checks run unchanged. Without the OVN tools the tests print a skip line; with `CI=true` they
//! fail.

// A test driver of real daemons: it runs processes and waits on a thread.
#![allow(clippy::disallowed_methods)]

mod scenarios;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hf_sim::world::{NorthdMode, World, WorldConfig, encap_ip};
use scenarios::Scenario;

const TOOLS: &[&str] = &[
    "ovsdb-tool",
    "ovsdb-server",
    "ovsdb-client",
    "ovn-northd",
    "ovn-nbctl",
    "ovn-sbctl",
];
const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";

fn have_ovn(test: &str) -> bool {
    let missing: Vec<&str> = TOOLS
        .iter()
        .copied()
        .filter(|t| {
            !Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {t}"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .chain(
            [NB_SCHEMA, SB_SCHEMA]
                .into_iter()
                .filter(|p| !Path::new(p).exists()),
        )
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "{test}: real OVN missing ({}); scripts/test.sh installs it",
        missing.join(", ")
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
    eprintln!("SKIP {msg}");
    false
}

/// Runs a command with a timeout; its stdout, or a panic with everything it said. The
/// output is collected on a thread (a child writing more than a pipe buffer never blocks).
fn run(cmd: &mut Command, timeout: Duration) -> Vec<u8> {
    let desc = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {desc}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(timeout) {
        Ok(r) => r.unwrap_or_else(|e| panic!("{desc}: {e}")),
        Err(_) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            panic!("timed out after {timeout:?}: {desc}");
        }
    };
    assert!(
        out.status.success(),
        "{desc} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out.stdout
}

/// Real daemons in a temporary directory, stopped by pid on drop (also when a test fails).
struct Ovn {
    dir: tempfile::TempDir,
    pidfiles: Vec<PathBuf>,
}

impl Ovn {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn remote(&self) -> String {
        format!("unix:{}", self.path("db.sock").display())
    }

    fn daemon_args(&mut self, name: &str) -> Vec<String> {
        let pid = self.path(&format!("{name}.pid"));
        self.pidfiles.push(pid.clone());
        vec![
            "--detach".into(),
            "--no-chdir".into(),
            format!("--pidfile={}", pid.display()),
            format!("--log-file={}", self.path(&format!("{name}.log")).display()),
            format!("--unixctl={}", self.path(&format!("{name}.ctl")).display()),
        ]
    }

    fn start() -> Ovn {
        let mut o = Ovn {
            dir: tempfile::tempdir().expect("tempdir"),
            pidfiles: Vec::new(),
        };
        for (db, schema) in [("nb.db", NB_SCHEMA), ("sb.db", SB_SCHEMA)] {
            run(
                Command::new("ovsdb-tool")
                    .arg("create")
                    .arg(o.path(db))
                    .arg(schema),
                Duration::from_secs(30),
            );
        }
        let args = o.daemon_args("ovsdb-server");
        run(
            Command::new("ovsdb-server")
                .args(args)
                .arg(format!("--remote=punix:{}", o.path("db.sock").display()))
                .arg(o.path("nb.db"))
                .arg(o.path("sb.db")),
            Duration::from_secs(30),
        );
        o
    }
}

impl Drop for Ovn {
    fn drop(&mut self) {
        for p in self.pidfiles.iter().rev() {
            if let Ok(s) = std::fs::read_to_string(p)
                && let Ok(pid) = s.trim().parse::<i32>()
            {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}

/// Real ovn-northd's SB for the scenario, as a database file.
fn real_sb(s: &Scenario) -> Vec<u8> {
    let mut o = Ovn::start();
    let remote = o.remote();
    for txn in &s.nb {
        let mut params = vec![serde_json::json!("OVN_Northbound")];
        params.extend(txn.iter().cloned());
        let out = run(
            Command::new("ovsdb-client")
                .arg("transact")
                .arg(&remote)
                .arg(serde_json::Value::Array(params).to_string()),
            Duration::from_secs(30),
        );
        let reply: serde_json::Value = serde_json::from_slice(&out).expect("transact prints JSON");
        let failed = reply.as_array().is_none_or(|r| {
            r.iter()
                .any(|o| o.get("error").is_some_and(|e| !e.is_null()))
        });
        assert!(
            !failed,
            "real ovsdb-server refused a scenario transaction: {reply}\n{txn:?}"
        );
    }
    for (i, c) in s.chassis.iter().enumerate() {
        run(
            Command::new("ovn-sbctl")
                .arg(format!("--db={remote}"))
                .args(["chassis-add", c, "geneve", &encap_ip(i).to_string()]),
            Duration::from_secs(30),
        );
    }
    let args = o.daemon_args("ovn-northd");
    run(
        Command::new("ovn-northd")
            .args(args)
            .arg(format!("--ovnnb-db={remote}"))
            .arg(format!("--ovnsb-db={remote}")),
        Duration::from_secs(30),
    );
    run(
        Command::new("ovn-nbctl")
            .arg(format!("--db={remote}"))
            .args(["--timeout=60", "--wait=sb", "sync"]),
        Duration::from_secs(90),
    );
    let sb = run(
        Command::new("ovsdb-client")
            .arg("backup")
            .arg(&remote)
            .arg("OVN_Southbound"),
        Duration::from_secs(30),
    );
    assert!(sb.len() > 1000, "SB backup is {} bytes", sb.len());
    sb
}

fn run_real(s: Scenario) {
    if !have_ovn(s.name) {
        return;
    }
    let sb = real_sb(&s);
    let mut w = World::new(WorldConfig {
        seed: 42,
        chassis: s.chassis.iter().map(|c| c.to_string()).collect(),
        northd: NorthdMode::Static(sb),
    })
    .expect("world on real ovn-northd's SB");
    // The same NB in the world's own database: hosts attach to its ports (nothing compiles it).
    w.nb_all(s.nb.clone()).expect("NB");
    let flows = w.sb_snapshot().expect("SB").logical_flow().len();
    assert!(flows > 100, "real northd's SB has {flows} logical flows");
    (s.check)(&mut w);
}

#[test]
fn real_l2() {
    run_real(scenarios::l2());
}

#[test]
fn real_l3() {
    run_real(scenarios::l3());
}

#[test]
fn real_cross_chassis() {
    run_real(scenarios::cross_chassis());
}

#[test]
fn real_acl() {
    run_real(scenarios::acl());
}

#[test]
fn real_snat() {
    run_real(scenarios::snat());
}

#[test]
fn real_dnat_fip() {
    run_real(scenarios::dnat_fip());
}

#[test]
fn real_load_balancer() {
    run_real(scenarios::load_balancer());
}

#[test]
fn real_dhcp() {
    run_real(scenarios::dhcp());
}

#[test]
fn real_restarts_under_load() {
    run_real(scenarios::restarts());
}
