//! `holdfast controller` as a process: a database, a northd, `holdfast datapath` with
//! in-memory ports and `holdfast controller` programming it, all `--detach`ed with pidfiles in a
//! tempdir and stopped by pid (also when an assertion fails). Once with `holdfast db` +
//! `holdfast northd`, once with real `ovsdb-server` (OVN 23.03's schemas) + real `ovn-northd`.
//! The oracles are real OVN tools: `ovn-sbctl show` lists the chassis with its Geneve encap and
//! its port, `ovn-nbctl --wait=hv lsp-add` returns (real `ovn-nbctl` waits for
//! `NB_Global.hv_cfg`, which northd computes from `Chassis_Private.nb_cfg`), `ovn-sbctl find
//! port_binding` shows the new port bound to the chassis, and `ovn-appctl`/`ovs-appctl` talk
//! to the two daemons' unixctl sockets. `--feature-level` is in `--help` and validated.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[allow(dead_code)]
#[path = "northd/fixture.rs"]
mod fixture;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{daemon_args, run_ok};
use fixture::{Backend, Dbs, NorthdProc, PidDaemon, wait_for};

const TOOLS: &[&str] = &["ovn-nbctl", "ovn-sbctl", "ovn-appctl", "ovs-appctl"];

fn appctl(tool: &str, ctl: &Path, args: &[&str]) -> String {
    run_ok(Command::new(tool).arg("-t").arg(ctl).args(args))
}

/// Starts `holdfast datapath` (ports vm1, vm2) and `holdfast controller` for hv1 in `d`.
fn start_chassis(d: &Path, sb: &str) -> Vec<PidDaemon> {
    let mut out = Vec::new();
    run_ok(
        Command::new(common::holdfast())
            .arg("datapath")
            .args(daemon_args(d, "dp"))
            .arg("--chassis=hv1")
            .arg("--encap-ip=127.0.0.1")
            .arg("--geneve-port=0")
            .arg(format!("--control=punix:{}", d.join("dp.sock").display()))
            .arg("--port=vm1,0a:00:00:00:00:01")
            .arg("--port=vm2,0a:00:00:00:00:02")
            .arg(format!("--zones-file={}", d.join("hv1.zones").display())),
    );
    out.push(PidDaemon::adopt(d, "dp"));
    run_ok(
        Command::new(common::holdfast())
            .arg("controller")
            .args(daemon_args(d, "ctl"))
            .arg(format!("--ovnsb-db={sb}"))
            .arg("--system-id=hv1")
            .arg("--hostname=hv1.example")
            .arg("--encap-ip=127.0.0.1")
            .arg(format!("--datapath=unix:{}", d.join("dp.sock").display())),
    );
    out.push(PidDaemon::adopt(d, "ctl"));
    out
}

/// holdfast controller and holdfast datapath run without transparent huge pages: mimalloc asks
/// for them, and a page stays resident whole while any of it is used (at 500x40 the chassis
/// peaked ~100 MB higher with them: docs/change-latency.md, "Session 19").
#[test]
fn the_chassis_daemons_run_without_transparent_huge_pages() {
    if common::thp_enabled(std::process::id()) != "1" {
        eprintln!("skipping: this test process itself runs without transparent huge pages");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // No SB is needed: the controller keeps trying to connect, and runs meanwhile.
    let sb = format!("unix:{}", tmp.path().join("no-sb.sock").display());
    let chassis = start_chassis(tmp.path(), &sb);
    for (d, what) in chassis
        .iter()
        .zip(["holdfast datapath", "holdfast controller"])
    {
        let pid = d.pid().expect("a pid in the pidfile");
        assert_eq!(common::thp_enabled(pid as u32), "0", "{what}");
    }
}

fn logs(d: &Path) -> String {
    ["ctl.log", "dp.log", "northd.log", "ovn-northd.log"]
        .iter()
        .map(|f| {
            format!(
                "--- {f}\n{}",
                std::fs::read_to_string(d.join(f)).unwrap_or_default()
            )
        })
        .collect()
}

/// The `Program:` line of `debug/status`.
fn program_line(status: &str) -> String {
    status
        .lines()
        .find(|l| l.starts_with("Program:"))
        .unwrap_or_default()
        .to_string()
}

fn end_to_end(d: &Path, dbs: &Dbs) {
    run_ok(dbs.nbctl().args(["ls-add", "ls0"]));
    run_ok(dbs.nbctl().args(["lsp-add", "ls0", "vm1"]));
    run_ok(
        dbs.nbctl()
            .args(["lsp-set-addresses", "vm1", "0a:00:00:00:00:01 10.0.0.1"]),
    );
    let chassis = start_chassis(d, &dbs.sb);
    // The chassis registers with its encap and claims vm1: real ovn-sbctl shows both.
    let shown = wait_for(Duration::from_secs(30), || {
        let s = run_ok(dbs.sbctl().arg("show"));
        s.contains("Chassis hv1")
            && s.contains("hostname: hv1.example")
            && s.contains("geneve")
            && s.contains("127.0.0.1")
            && s.contains("Port_Binding vm1")
    });
    assert!(
        shown,
        "ovn-sbctl show:\n{}\n{}",
        run_ok(dbs.sbctl().arg("show")),
        logs(d)
    );
    // --wait=hv returns once the chassis has the port (Chassis_Private.nb_cfg → hv_cfg).
    let t0 = std::time::Instant::now();
    let out = common::run(
        dbs.nbctl()
            .args([
                "--wait=hv",
                "lsp-add",
                "ls0",
                "vm2",
                "--",
                "lsp-set-addresses",
                "vm2",
            ])
            .arg("0a:00:00:00:00:02 10.0.0.2"),
        Duration::from_secs(40),
    );
    assert!(
        out.status.success(),
        "ovn-nbctl --wait=hv failed after {:?}: {}\n{}",
        t0.elapsed(),
        String::from_utf8_lossy(&out.stderr),
        logs(d)
    );
    let ch = run_ok(
        dbs.sbctl()
            .args(["--bare", "--columns=_uuid", "find", "chassis", "name=hv1"]),
    );
    let bound = run_ok(dbs.sbctl().args([
        "--bare",
        "--columns=chassis",
        "find",
        "port_binding",
        "logical_port=vm2",
    ]));
    assert_eq!(
        bound.trim(),
        ch.trim(),
        "vm2 is not bound to hv1\n{}",
        logs(d)
    );
    let hv_cfg = run_ok(dbs.nbctl().args(["get", "NB_Global", ".", "hv_cfg"]));
    let nb_cfg = run_ok(dbs.nbctl().args(["get", "NB_Global", ".", "nb_cfg"]));
    assert_eq!(hv_cfg.trim(), nb_cfg.trim());
    // The datapath runs a program with the new port's zone; the controller reports it all.
    let ctl = d.join("ctl.ctl");
    assert_eq!(
        appctl("ovn-appctl", &ctl, &["connection-status"]).trim(),
        "connected"
    );
    let status = appctl("ovn-appctl", &ctl, &["debug/status"]);
    eprintln!("{}\n{status}", run_ok(dbs.sbctl().arg("show")));
    assert!(status.contains("Chassis: hv1 (registered)"), "{status}");
    assert!(
        status.contains("Datapath: connected, 2 local port(s)"),
        "{status}"
    );
    assert!(status.contains("Flow errors: 0 flow(s)"), "{status}");
    let zones = appctl("ovn-appctl", &ctl, &["ct-zone-list"]);
    assert!(zones.contains("lsp/vm2 "), "{zones}");
    let dp_zones = appctl("ovs-appctl", &d.join("dp.ctl"), &["ct-zone-list"]);
    assert!(dp_zones.contains("lsp/vm2"), "{dp_zones}");
    assert!(appctl("ovn-appctl", &ctl, &["version"]).starts_with("ovn-controller (holdfast"));
    // A restarted controller finds the datapath running what it would push: no new program,
    // the same zones, nothing flushed.
    let before = program_line(&status);
    chassis[1].kill9().unwrap();
    run_ok(
        Command::new(common::holdfast())
            .arg("controller")
            .args(daemon_args(d, "ctl"))
            .arg(format!("--ovnsb-db={}", dbs.sb))
            .arg("--system-id=hv1")
            .arg("--hostname=hv1.example")
            .arg("--encap-ip=127.0.0.1")
            .arg(format!("--datapath=unix:{}", d.join("dp.sock").display())),
    );
    let settled = wait_for(Duration::from_secs(30), || {
        let s = appctl("ovn-appctl", &ctl, &["debug/status"]);
        s.contains("conditional monitoring settled") && s.contains("Datapath: connected,")
    });
    assert!(settled, "{}", logs(d));
    std::thread::sleep(Duration::from_millis(500));
    let status = appctl("ovn-appctl", &ctl, &["debug/status"]);
    assert_eq!(program_line(&status), before, "{status}\n{}", logs(d));
    assert_eq!(
        appctl("ovs-appctl", &d.join("dp.ctl"), &["ct-zone-list"]),
        dp_zones
    );
    let ctl_log = std::fs::read_to_string(d.join("ctl.log")).unwrap_or_default();
    assert!(!ctl_log.contains("flushing conntrack"), "{ctl_log}");
}

#[test]
fn holdfast_db_northd_datapath_and_controller() {
    if !common::require("controller end to end", TOOLS) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Holdfast);
    let _northd = NorthdProc::start(d, "northd", &dbs.nb, &dbs.sb, &[]);
    end_to_end(d, &dbs);
}

#[test]
fn under_real_ovn_northd() {
    if !common::require(
        "controller under real ovn-northd",
        &[TOOLS, &["ovsdb-server", "ovsdb-tool", "ovn-northd"]].concat(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Ovsdb);
    run_ok(
        Command::new("ovn-northd")
            .args(daemon_args(d, "ovn-northd"))
            .arg(format!("--ovnnb-db={}", dbs.nb))
            .arg(format!("--ovnsb-db={}", dbs.sb)),
    );
    let _northd = PidDaemon::adopt(d, "ovn-northd");
    end_to_end(d, &dbs);
}

/// `--feature-level` is documented and an unknown level is refused, naming the known ones.
#[test]
fn feature_level_is_documented_and_validated() {
    let help = run_ok(Command::new(common::holdfast()).args(["controller", "--help"]));
    assert!(
        help.contains("--feature-level <LEVEL>") && help.contains("`hf-1`"),
        "{help}"
    );
    let out = common::run(
        Command::new(common::holdfast()).args([
            "controller",
            "--system-id=hv1",
            "--encap-ip=127.0.0.1",
            "--feature-level=hf-9",
        ]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown feature level `hf-9` (known levels: hf-1, hf-2)"),
        "{err}"
    );
}

/// The local OVS database (`vswitch.ovsschema`, OVS's own) served by `holdfast db` or by a
/// real ovsdb-server, set up with real `ovs-vsctl` as an operator or a CNI would.
fn local_db(d: &Path, real: bool) -> (String, Box<dyn std::any::Any>) {
    let schema = Path::new("/usr/share/openvswitch/vswitch.ovsschema");
    // Its own directory: the SB's holdfast db has d/db.sock.
    let d = &d.join("local");
    std::fs::create_dir(d).unwrap();
    if real {
        let s = common::OvsdbServer::create(d, "conf", schema).unwrap();
        (s.remote.clone(), Box::new(s))
    } else {
        let s = common::HoldfastDb::start(d, &[("conf.db", schema)], &[]);
        (s.unix.clone(), Box::new(s))
    }
}

fn vsctl(db: &str, args: &[&str]) -> String {
    run_ok(
        Command::new("ovs-vsctl")
            .arg(format!("--db={db}"))
            .arg("--no-wait")
            .args(args),
    )
}

/// ovn-controller's way of being configured: only the local database on the command line
/// (no --system-id, --ovnsb-db or --encap-ip), its settings in `Open_vSwitch external_ids`
/// written by real `ovs-vsctl`; and ovn-installed written back on the interface once the
/// port's flows run (what OVN-Kubernetes' CNI waits for), removed when the port goes.
fn settings_and_ovn_installed(real_local_db: bool) {
    if !common::require(
        "controller with a local database",
        &[TOOLS, &["ovs-vsctl", "ovsdb-server", "ovsdb-tool"]].concat(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Holdfast);
    let _northd = NorthdProc::start(d, "northd", &dbs.nb, &dbs.sb, &[]);
    run_ok(dbs.nbctl().args(["ls-add", "ls0"]));
    run_ok(dbs.nbctl().args(["lsp-add", "ls0", "vm1"]));
    let (conf, _server) = local_db(d, real_local_db);
    vsctl(&conf, &["init"]);
    vsctl(
        &conf,
        &[
            "set",
            "Open_vSwitch",
            ".",
            "external_ids:system-id=hv1",
            &format!("external_ids:ovn-remote={}", dbs.sb),
            "external_ids:ovn-encap-type=geneve",
            "external_ids:ovn-encap-ip=127.0.0.1",
            "external_ids:hostname=hv1.local",
        ],
    );
    vsctl(
        &conf,
        &[
            "add-br",
            "br-int",
            "--",
            "add-port",
            "br-int",
            "tap0",
            "--",
            "set",
            "Interface",
            "tap0",
            "external_ids:iface-id=vm1",
        ],
    );
    run_ok(
        Command::new(common::holdfast())
            .arg("datapath")
            .args(daemon_args(d, "dp"))
            .arg("--chassis=hv1")
            .arg("--encap-ip=127.0.0.1")
            .arg("--geneve-port=0")
            .arg(format!("--control=punix:{}", d.join("dp.sock").display()))
            .arg("--port=vm1,0a:00:00:00:00:01")
            // A database without bridges for the datapath: this test is about the controller.
            .arg(format!("unix:{}", d.join("none.sock").display())),
    );
    let _dp = PidDaemon::adopt(d, "dp");
    run_ok(
        Command::new(common::holdfast())
            .arg("controller")
            .args(daemon_args(d, "ctl"))
            .arg(format!("--datapath=unix:{}", d.join("dp.sock").display()))
            .arg(&conf),
    );
    let _ctl = PidDaemon::adopt(d, "ctl");
    let installed = || vsctl(&conf, &["get", "Interface", "tap0", "external_ids"]);
    let ok = wait_for(Duration::from_secs(30), || {
        let s = run_ok(dbs.sbctl().arg("show"));
        s.contains("Chassis hv1")
            && s.contains("hostname: hv1.local")
            && s.contains("Port_Binding vm1")
            && installed().contains("ovn-installed=\"true\"")
    });
    assert!(
        ok,
        "ovn-sbctl show:\n{}\ntap0 external_ids: {}\n{}",
        run_ok(dbs.sbctl().arg("show")),
        installed(),
        logs(d)
    );
    assert!(installed().contains("ovn-installed-ts="), "{}", installed());
    // The logical port goes: the mark goes with it.
    run_ok(dbs.nbctl().args(["lsp-del", "vm1"]));
    let gone = wait_for(Duration::from_secs(30), || {
        !installed().contains("ovn-installed")
    });
    assert!(gone, "tap0 external_ids: {}\n{}", installed(), logs(d));
    assert!(installed().contains("iface-id=vm1"), "{}", installed());
}

#[test]
fn the_local_database_configures_the_controller_and_takes_ovn_installed() {
    settings_and_ovn_installed(false);
}

#[test]
fn under_a_real_local_ovsdb_server() {
    settings_and_ovn_installed(true);
}
