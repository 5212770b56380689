//! holdfast northd against a real `ovsdb-server` Raft cluster (three SB members): it writes
//! through the leader, `--wait=sb` works, and after the leader is killed it carries on with
//! the new one and SB stays complete.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{self, run, run_ok};
use crate::fixture::{Backend, Dbs, NorthdProc, PidDaemon, wait_for};
use crate::ha::assert_sb_complete;

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-appctl",
    "ovs-appctl",
];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start_member(d: &Path, i: usize) -> PidDaemon {
    let pidfile = d.join(format!("sb{i}.pid"));
    run_ok(
        Command::new("ovsdb-server")
            .arg("--detach")
            .arg("--no-chdir")
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!(
                "--log-file={}",
                d.join(format!("sb{i}.log")).display()
            ))
            .arg(format!(
                "--unixctl={}",
                d.join(format!("sb{i}.ctl")).display()
            ))
            .arg(format!(
                "--remote=punix:{}",
                d.join(format!("sb{i}.sock")).display()
            ))
            .arg(d.join(format!("sb{i}.db"))),
    );
    PidDaemon { pidfile }
}

fn is_leader(d: &Path, i: usize) -> bool {
    let out = run(
        Command::new("ovs-appctl")
            .arg("-t")
            .arg(d.join(format!("sb{i}.ctl")))
            .args(["cluster/status", "OVN_Southbound"]),
        Duration::from_secs(10),
    );
    String::from_utf8_lossy(&out.stdout).contains("Role: leader")
}

#[test]
fn northd_on_a_raft_sb_cluster_survives_losing_the_leader() {
    if !common::require("northd raft", TOOLS) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("hf-northd-raft-")
        .tempdir()
        .expect("tempdir");
    let d = dir.path();
    // NB: a standalone real ovsdb-server (Dbs starts an SB too; it is not used).
    let dbs = Dbs::start(d, Backend::Ovsdb);
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    run_ok(
        Command::new("ovsdb-tool")
            .arg("create-cluster")
            .arg(d.join("sb0.db"))
            .arg("/usr/share/ovn/ovn-sb.ovsschema")
            .arg(format!("tcp:127.0.0.1:{}", ports[0])),
    );
    for i in 1..3 {
        run_ok(
            Command::new("ovsdb-tool")
                .arg("join-cluster")
                .arg(d.join(format!("sb{i}.db")))
                .arg("OVN_Southbound")
                .arg(format!("tcp:127.0.0.1:{}", ports[i]))
                .arg(format!("tcp:127.0.0.1:{}", ports[0])),
        );
    }
    let members: Vec<PidDaemon> = (0..3).map(|i| start_member(d, i)).collect();
    let sb: String = (0..3)
        .map(|i| format!("unix:{}", d.join(format!("sb{i}.sock")).display()))
        .collect::<Vec<_>>()
        .join(",");
    run_ok(
        Command::new("ovn-sbctl")
            .arg(format!("--db={sb}"))
            .args(["--timeout=30", "init"]),
    );
    let n = NorthdProc::start(d, "northd", &dbs.nb, &sb, &[]);
    assert!(
        wait_for(Duration::from_secs(20), || n.status() == "Status: active"),
        "northd never became active on the cluster: {}",
        n.log_text()
    );
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw0"]));
    run_ok(dbs.nbctl().args([
        "--wait=sb",
        "lsp-add",
        "sw0",
        "p1",
        "--",
        "lsp-set-addresses",
        "p1",
        "00:00:00:00:00:01 10.0.0.1",
    ]));
    assert_sb_complete(&dbs.nb, &sb);
    let leader = (0..3)
        .find(|i| is_leader(d, *i))
        .expect("the cluster has a leader");
    members[leader].kill9();
    // The cluster elects another leader; northd follows it and keeps writing.
    run_ok(dbs.nbctl().args([
        "--timeout=60",
        "--wait=sb",
        "lsp-add",
        "sw0",
        "p2",
        "--",
        "lsp-set-addresses",
        "p2",
        "00:00:00:00:00:02 10.0.0.2",
    ]));
    assert!(wait_for(Duration::from_secs(20), || n.status() == "Status: active"));
    let alive: String = (0..3)
        .filter(|i| *i != leader)
        .map(|i| format!("unix:{}", d.join(format!("sb{i}.sock")).display()))
        .collect::<Vec<_>>()
        .join(",");
    assert_sb_complete(&dbs.nb, &alive);
    drop(members);
}
