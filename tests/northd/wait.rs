//! Real `ovn-nbctl --wait=sb` and `--wait=hv` against holdfast northd (on `holdfast db` and on
//! real `ovsdb-server`), `ovn-ctl start_northd`/`stop_northd` through the `ovn-northd` link,
//! and every unixctl command through `ovn-appctl`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, run, run_ok};
use crate::fixture::{Backend, Dbs, NorthdProc, wait_for};

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-appctl",
];

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hf-northd-")
        .tempdir()
        .expect("tempdir")
}

/// `--wait=sb` returns once SB has the change, and `--wait=hv` once the chassis caught up.
fn wait_sb_and_hv(backend: Backend) {
    let dir = tempdir();
    let dbs = Dbs::start(dir.path(), backend);
    let northd = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &[]);
    assert!(
        wait_for(Duration::from_secs(10), || northd.status()
            == "Status: active"),
        "northd never became active: {}",
        northd.log_text()
    );
    let t = Instant::now();
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
    eprintln!("{backend:?}: two --wait=sb commands in {:?}", t.elapsed());
    let (nb_cfg, sb_cfg) = (dbs.nb_global("nb_cfg"), dbs.nb_global("sb_cfg"));
    assert!(
        nb_cfg >= 2 && sb_cfg == nb_cfg,
        "nb_cfg {nb_cfg}, sb_cfg {sb_cfg}"
    );
    let sb_global = run_ok(dbs.sbctl().args(["get", "SB_Global", ".", "nb_cfg"]));
    assert_eq!(sb_global.trim(), nb_cfg.to_string());
    // What --wait=sb waited for is there: the port's binding and its switch's flows.
    let pb = run_ok(
        dbs.sbctl()
            .args(["--bare", "--columns=logical_port", "list", "Port_Binding"]),
    );
    assert!(
        pb.lines().any(|l| l.trim() == "p1"),
        "no Port_Binding for p1: {pb}"
    );
    let flows = run_ok(dbs.sbctl().args(["lflow-list", "sw0"]));
    assert!(flows.contains("ls_in_"), "no flows for sw0: {flows}");
    // A bad row never blocks --wait=sb: an LSP with an unparsable address.
    run_ok(dbs.nbctl().args([
        "--wait=sb",
        "lsp-add",
        "sw0",
        "bad",
        "--",
        "lsp-set-addresses",
        "bad",
        "00:00:00:00:00:02 10.0.0.300",
    ]));
    assert!(
        wait_for(Duration::from_secs(5), || northd
            .appctl(&["status"])
            .contains("bad")),
        "status does not name the bad row: {}",
        northd.appctl(&["status"])
    );
    assert!(
        northd.log_text().contains("\"bad\""),
        "the diagnostic is not logged"
    );
    // Fixed, the diagnostic goes away (logged once as resolved) and status drops it.
    run_ok(dbs.nbctl().args([
        "--wait=sb",
        "lsp-set-addresses",
        "bad",
        "00:00:00:00:00:02 10.0.0.3",
    ]));
    assert!(
        wait_for(Duration::from_secs(5), || !northd
            .appctl(&["status"])
            .contains("bad")),
        "status still names the fixed row"
    );
    let log = northd.log_text();
    assert!(
        log.contains("resolved: Logical_Switch_Port \"bad\""),
        "the fix is not logged"
    );
    // Each diagnostic is logged once when it appears and once when it goes away.
    let all = log.matches("Logical_Switch_Port \"bad\" (").count();
    let resolved = log
        .matches("resolved: Logical_Switch_Port \"bad\" (")
        .count();
    assert!(
        resolved >= 1 && all == 2 * resolved,
        "diagnostics logged more than once each way:\n{log}"
    );

    // --wait=hv: one chassis whose Chassis_Private.nb_cfg the test advances.
    run_ok(
        dbs.sbctl()
            .args(["chassis-add", "ch1", "geneve", "127.0.0.2"]),
    );
    let ch = run_ok(
        dbs.sbctl()
            .args(["--bare", "--columns=_uuid", "find", "Chassis", "name=ch1"]),
    );
    let cp = run_ok(dbs.sbctl().args([
        "create",
        "Chassis_Private",
        "name=ch1",
        &format!("chassis={}", ch.trim()),
        "nb_cfg=0",
    ]));
    let cp = cp.trim().to_string();
    let before = dbs.nb_global("nb_cfg");
    let mut waiter = Command::new("ovn-nbctl")
        .arg(format!("--db={}", dbs.nb))
        .args(["--timeout=30", "--wait=hv", "sync"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ovn-nbctl");
    assert!(
        wait_for(Duration::from_secs(10), || dbs.nb_global("nb_cfg") > before),
        "ovn-nbctl --wait=hv never bumped nb_cfg"
    );
    let target = dbs.nb_global("nb_cfg");
    // SB gets the new nb_cfg; hv_cfg lags behind the chassis, so the waiter still waits.
    assert!(wait_for(Duration::from_secs(10), || dbs
        .nb_global("sb_cfg")
        == target));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        waiter.try_wait().expect("wait").is_none(),
        "--wait=hv returned before the chassis caught up"
    );
    assert!(dbs.nb_global("hv_cfg") < target);
    run_ok(dbs.sbctl().args([
        "set",
        "Chassis_Private",
        &cp,
        &format!("nb_cfg={target}"),
        "nb_cfg_timestamp=12345",
    ]));
    let done = wait_for(Duration::from_secs(10), || {
        waiter.try_wait().expect("wait").is_some()
    });
    assert!(done, "--wait=hv did not return after the chassis caught up");
    let st = waiter.wait().expect("wait");
    assert!(st.success(), "ovn-nbctl --wait=hv failed");
    assert_eq!(dbs.nb_global("hv_cfg"), target);
    assert_eq!(dbs.nb_global("hv_cfg_timestamp"), 12345);
    // Logical_Switch_Port.up follows the binding (23.03): bound and up → true.
    let up = || run_ok(dbs.nbctl().args(["get", "Logical_Switch_Port", "p1", "up"]));
    assert_eq!(up().trim(), "false");
    let pb = run_ok(dbs.sbctl().args([
        "--bare",
        "--columns=_uuid",
        "find",
        "Port_Binding",
        "logical_port=p1",
    ]));
    run_ok(dbs.sbctl().args([
        "set",
        "Port_Binding",
        pb.trim(),
        &format!("chassis={}", ch.trim()),
        "up=true",
    ]));
    assert!(
        wait_for(Duration::from_secs(10), || up().trim() == "true"),
        "Logical_Switch_Port p1 never came up"
    );
}

#[test]
fn wait_sb_and_hv_on_holdfast_db() {
    if !common::require("northd wait", TOOLS) {
        return;
    }
    wait_sb_and_hv(Backend::Holdfast);
}

#[test]
fn wait_sb_and_hv_on_ovsdb_server() {
    if !common::require("northd wait", TOOLS) {
        return;
    }
    wait_sb_and_hv(Backend::Ovsdb);
}

/// Every unixctl command, through real `ovn-appctl`.
#[test]
fn unixctl_commands() {
    if !common::require("northd unixctl", TOOLS) {
        return;
    }
    let dir = tempdir();
    let dbs = Dbs::start(dir.path(), Backend::Holdfast);
    let mut n = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &["--n-threads=4"]);
    assert!(wait_for(Duration::from_secs(10), || n.status() == "Status: active"));
    assert!(
        n.log_text().contains("single-threaded"),
        "--n-threads not mentioned in the log"
    );
    let list = n.appctl(&["list-commands"]);
    for c in [
        "exit",
        "status",
        "pause",
        "resume",
        "is-paused",
        "inc-engine/recompute",
        "nb-connection-status",
        "sb-connection-status",
        "version",
        "list-commands",
        "vlog/set",
        "vlog/list",
        "vlog/reopen",
        "vlog/close",
        "memory/show",
    ] {
        assert!(list.contains(c), "list-commands lacks {c}: {list}");
    }
    let v = n.appctl(&["version"]);
    assert!(
        v.starts_with("ovn-northd ") && v.contains("holdfast"),
        "{v}"
    );
    assert_eq!(n.appctl(&["nb-connection-status"]).trim(), "connected");
    assert_eq!(n.appctl(&["sb-connection-status"]).trim(), "connected");
    assert_eq!(n.appctl(&["is-paused"]).trim(), "false");
    assert!(n.appctl(&["vlog/list"]).contains("northd"));
    n.appctl(&["vlog/set", "northd:file:dbg"]);
    n.appctl(&["vlog/reopen"]);
    assert!(n.counter("compiles") >= 1);

    // pause: standby in all but name, the lock released; nothing reaches SB.
    n.appctl(&["pause"]);
    assert_eq!(n.appctl(&["is-paused"]).trim(), "true");
    assert_eq!(n.status(), "Status: paused");
    let out = run(
        dbs.nbctl()
            .args(["--timeout=2", "--wait=sb", "ls-add", "paused-sw"]),
        Duration::from_secs(20),
    );
    assert!(
        !out.status.success(),
        "--wait=sb returned while northd was paused"
    );
    let dps = || {
        run_ok(dbs.sbctl().args([
            "--bare",
            "--columns=external_ids",
            "list",
            "Datapath_Binding",
        ]))
    };
    assert!(!dps().contains("paused-sw"), "a paused northd wrote SB");
    // resume: it catches up.
    n.appctl(&["resume"]);
    assert!(wait_for(Duration::from_secs(10), || n.status() == "Status: active"));
    run_ok(dbs.nbctl().args(["--wait=sb", "sync"]));
    assert!(dps().contains("paused-sw"));
    // inc-engine/recompute compiles again.
    let before = n.counter("compiles");
    n.appctl(&["inc-engine/recompute"]);
    assert!(wait_for(Duration::from_secs(10), || n.counter("compiles") > before));
    // Unknown commands are refused by name.
    let (ok, _, err) = n.appctl_raw(&["no-such-command"]);
    assert!(!ok && err.contains("no-such-command"), "{err}");
    n.appctl(&["vlog/close"]);
    // exit: the process goes.
    let pid = n.pid();
    n.appctl(&["exit"]);
    assert!(
        wait_for(Duration::from_secs(10), || !std::path::Path::new(&format!(
            "/proc/{pid}"
        ))
        .exists()),
        "northd did not exit"
    );
    n.stop();
}

/// `--dry-run` starts paused; unknown options are refused by name.
#[test]
fn dry_run_and_bad_options() {
    if !common::require("northd options", TOOLS) {
        return;
    }
    let out = run(
        Command::new(common::holdfast()).args(["northd", "--no-such-option"]),
        Duration::from_secs(10),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-option"));
    let help = run_ok(Command::new(common::holdfast()).args(["northd", "--help"]));
    for o in [
        "--ovnnb-db",
        "--ovnsb-db",
        "--pidfile",
        "--detach",
        "--unixctl",
        "--dry-run",
        "--n-threads",
        "--ssl-protocols",
    ] {
        assert!(help.contains(o), "--help lacks {o}");
    }
    let dir = tempdir();
    let dbs = Dbs::start(dir.path(), Backend::Holdfast);
    let n = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &["--dry-run"]);
    assert!(wait_for(Duration::from_secs(5), || n
        .appctl(&["nb-connection-status"])
        .trim()
        == "connected"));
    assert_eq!(n.status(), "Status: paused");
    assert_eq!(n.appctl(&["is-paused"]).trim(), "true");
}

/// OVN's `ovn-ctl start_northd`/`stop_northd` run the binary through a link named
/// `ovn-northd`.
#[test]
fn ovn_ctl_start_and_stop_northd() {
    if !common::require(
        "northd ovn-ctl",
        &[TOOLS, &["/usr/share/ovn/scripts/ovn-ctl"]].concat(),
    ) {
        return;
    }
    let dir = tempdir();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Holdfast);
    let bin = d.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(common::holdfast(), bin.join("ovn-northd")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run_dir = d.join("run");
    let ctl = |cmd: &str| {
        let out = run(
            Command::new("/usr/share/ovn/scripts/ovn-ctl")
                .env("PATH", &path)
                .env("OVN_RUNDIR", &run_dir)
                .env("OVN_LOGDIR", d.join("log"))
                .env("OVN_DBDIR", d.join("db"))
                .env("OVN_SYSCONFDIR", d.join("etc"))
                .args([
                    "--ovn-manage-ovsdb=no",
                    &format!("--ovn-northd-nb-db={}", dbs.nb),
                    &format!("--ovn-northd-sb-db={}", dbs.sb),
                    "--no-monitor",
                    cmd,
                ]),
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "ovn-ctl {cmd}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ctl("start_northd");
    let pidfile = run_dir.join("ovn-northd.pid");
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let guard = crate::fixture::PidDaemon::adopt(&run_dir, "ovn-northd");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(
        exe,
        common::holdfast().canonicalize().unwrap(),
        "ovn-ctl started another binary"
    );
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw-ctl"]));
    let ctl_sock = run_dir.join(format!("ovn-northd.{pid}.ctl"));
    let st = run_ok(
        Command::new("ovn-appctl")
            .arg("-t")
            .arg(&ctl_sock)
            .arg("status"),
    );
    assert_eq!(st.trim(), "Status: active");
    ctl("stop_northd");
    assert!(
        wait_for(Duration::from_secs(10), || !std::path::Path::new(&format!(
            "/proc/{pid}"
        ))
        .exists()),
        "stop_northd left northd running"
    );
    assert!(!pidfile.exists(), "the pidfile stayed");
    drop(guard);
}
