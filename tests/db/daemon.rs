//! holdfast as a drop-in `ovsdb-server` (issue 8): started and stopped by OVN's own `ovn-ctl`
//! through a link named `ovsdb-server`; `--detach` that returns to a caller capturing its
//! output; every unixctl command through real `ovs-appctl`; `--monitor` restarting a crashed
//! server; `db:` remotes following `Connection` rows set by real `ovn-nbctl`; unknown options
//! refused by name. Oracles: OVN's and OVS's tools, never holdfast's own client.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{holdfast, require, run, run_ok};

/// A directory whose `bin/ovsdb-server` is a link to the holdfast binary.
pub(crate) fn link_dir(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(holdfast(), bin.join("ovsdb-server")).unwrap();
    bin
}

pub(crate) use crate::common::free_port;

pub(crate) fn pid_of(pidfile: &Path) -> Option<i32> {
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

pub(crate) fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn ppid(pid: i32) -> Option<i32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    after.split_whitespace().nth(1)?.parse().ok()
}

pub(crate) fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// Kills the daemons named by pidfiles (and their `--monitor` parents) when dropped, so a
/// failing test leaves nothing running.
pub(crate) struct Reaper(pub(crate) Vec<PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in &self.0 {
            let Some(pid) = pid_of(p) else { continue };
            if !alive(pid) {
                continue;
            }
            // The monitor first, so it does not restart the daemon.
            if let Some(parent) = ppid(pid)
                && parent > 1
                && std::fs::read_to_string(format!("/proc/{parent}/comm"))
                    .is_ok_and(|c| c.trim() == "ovsdb-server")
            {
                let _ = Command::new("kill")
                    .args(["-KILL", &parent.to_string()])
                    .status();
            }
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

fn appctl(ctl: &Path, args: &[&str]) -> std::process::Output {
    run(
        Command::new("ovs-appctl").arg("-t").arg(ctl).args(args),
        Duration::from_secs(20),
    )
}

fn appctl_ok(ctl: &Path, args: &[&str]) -> String {
    let o = appctl(ctl, args);
    assert!(
        o.status.success(),
        "ovs-appctl {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ovsdb-client list-dbs` against a remote: whether the server answers there.
fn answers(remote: &str) -> bool {
    let o = run(
        Command::new("ovsdb-client").args(["--timeout=3", "list-dbs", remote]),
        Duration::from_secs(10),
    );
    o.status.success() && String::from_utf8_lossy(&o.stdout).contains("OVN_Northbound")
}

fn nb_file(dir: &Path) -> PathBuf {
    let f = dir.join("nb.db");
    run_ok(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(&f)
            .arg("/usr/share/ovn/ovn-nb.ovsschema"),
    );
    f
}

#[test]
fn ovn_ctl_starts_and_stops_holdfast_as_ovsdb_server() {
    if !nix_is_root() {
        // ovn-ctl/ovs-ctl create their directories owned by root (install -o root, chown).
        eprintln!(
            "SKIP ovn_ctl_starts_and_stops_holdfast_as_ovsdb_server: OVN's and OVS's scripts need root"
        );
        return;
    }
    if !require(
        "ovn_ctl",
        &[
            "/usr/share/ovn/scripts/ovn-ctl",
            "ovsdb-tool",
            "ovn-nbctl",
            "ovn-sbctl",
            "ovn-appctl",
        ],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ctl = OvnCtl::new(dir);
    let (nb_port, sb_port) = (free_port(), free_port());
    let run_dir = ctl.run_dir.clone();
    let _reaper = Reaper(vec![
        run_dir.join("ovnnb_db.pid"),
        run_dir.join("ovnsb_db.pid"),
    ]);
    let ovn_ctl = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ctl.run(&args)
    };
    ovn_ctl(&[
        "--db-nb-create-insecure-remote=yes".into(),
        format!("--db-nb-port={nb_port}"),
        "--db-nb-addr=127.0.0.1".into(),
        "start_nb_ovsdb".into(),
    ]);
    ovn_ctl(&[
        "--db-sb-create-insecure-remote=yes".into(),
        format!("--db-sb-port={sb_port}"),
        "--db-sb-addr=127.0.0.1".into(),
        "start_sb_ovsdb".into(),
    ]);
    // The process ovn-ctl started is holdfast, under the name ovn-ctl checks.
    let nb_pid = pid_of(&run_dir.join("ovnnb_db.pid")).expect("NB pidfile");
    let sb_pid = pid_of(&run_dir.join("ovnsb_db.pid")).expect("SB pidfile");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{nb_pid}/comm"))
            .unwrap()
            .trim(),
        "ovsdb-server"
    );
    assert_eq!(
        std::fs::canonicalize(format!("/proc/{nb_pid}/exe")).unwrap(),
        std::fs::canonicalize(holdfast()).unwrap()
    );
    // Real clients against the insecure TCP remotes and the unix sockets.
    let nb = format!("--db=tcp:127.0.0.1:{nb_port}");
    let sb = format!("--db=tcp:127.0.0.1:{sb_port}");
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "ls-add", "sw0"]));
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "lsp-add", "sw0", "p0"]));
    let show = run_ok(
        Command::new("ovn-nbctl")
            .arg(format!(
                "--db=unix:{}",
                run_dir.join("ovnnb_db.sock").display()
            ))
            .arg("show"),
    );
    assert!(show.contains("(sw0)") && show.contains("port p0"), "{show}");
    run_ok(Command::new("ovn-sbctl").args([
        sb.as_str(),
        "chassis-add",
        "ch0",
        "geneve",
        "127.0.0.1",
    ]));
    let sbshow = run_ok(Command::new("ovn-sbctl").args([sb.as_str(), "show"]));
    assert!(sbshow.contains("Chassis ch0"), "{sbshow}");
    // SB connections with RBAC or read-only access are refused by name, never served with
    // more access than the row grants.
    let rbac_port = free_port();
    run_ok(Command::new("ovn-sbctl").args([
        sb.as_str(),
        "set-connection",
        "role=ovn-controller",
        &format!("ptcp:{rbac_port}:127.0.0.1"),
    ]));
    let sb_log = dir.join("log/ovsdb-server-sb.log");
    wait_for(
        "the RBAC refusal in the SB log",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&sb_log)
                .unwrap_or_default()
                .contains("role \"ovn-controller\" (OVSDB RBAC) is not supported by holdfast db")
        },
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", rbac_port)).is_err());
    run_ok(Command::new("ovn-sbctl").args([
        sb.as_str(),
        "set-connection",
        "read-only",
        &format!("ptcp:{rbac_port}:127.0.0.1"),
    ]));
    wait_for(
        "the read-only refusal in the SB log",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&sb_log)
                .unwrap_or_default()
                .contains("read_only=true connections are not supported by holdfast db")
        },
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", rbac_port)).is_err());
    run_ok(Command::new("ovn-sbctl").args([sb.as_str(), "del-connection"]));
    // ovn-ctl ran `ovn-nbctl init`: NB_Global exists.
    let g = run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "list", "NB_Global"]));
    assert!(g.contains("_uuid"), "{g}");
    for (ctl, db) in [
        ("ovnnb_db.ctl", "OVN_Northbound"),
        ("ovnsb_db.ctl", "OVN_Southbound"),
    ] {
        let out = run_ok(
            Command::new("ovn-appctl")
                .arg("-t")
                .arg(run_dir.join(ctl))
                .arg("ovsdb-server/list-dbs"),
        );
        assert_eq!(out, format!("{db}\n_Server\n"));
    }
    // ovn-ctl's status commands (pidfile + `ovsdb-server/sync-status`).
    assert_eq!(ovn_ctl(&["status_ovnnb".into()]).trim(), "running/active");
    assert_eq!(ovn_ctl(&["status_ovnsb".into()]).trim(), "running/active");
    // The log file is OVS-style and colourless.
    let log = std::fs::read_to_string(dir.join("log/ovsdb-server-nb.log")).unwrap();
    assert!(log.contains("|ovsdb_server|INFO|"), "{log}");
    assert!(
        !log.contains('\x1b'),
        "colour codes in the log file: {log:?}"
    );
    ovn_ctl(&["stop_nb_ovsdb".into()]);
    ovn_ctl(&["stop_sb_ovsdb".into()]);
    wait_for("the servers to exit", Duration::from_secs(10), || {
        !alive(nb_pid) && !alive(sb_pid)
    });
    assert!(
        !run_dir.join("ovnnb_db.pid").exists(),
        "pidfile left behind"
    );
    assert!(
        !run_dir.join("ovnnb_db.ctl").exists(),
        "unixctl socket left behind"
    );
    // The data survived: a fresh start serves the switch (real ovsdb-tool reads the file).
    let q = run_ok(
        Command::new("ovsdb-tool")
            .arg("query")
            .arg(dir.join("db/ovnnb_db.db"))
            .arg(r#"["OVN_Northbound",{"op":"select","table":"Logical_Switch","where":[],"columns":["name"]}]"#),
    );
    assert!(q.contains("sw0"), "{q}");
}

#[test]
fn detach_returns_to_a_capturing_caller_and_serves() {
    if !require(
        "detach",
        &[
            "ovsdb-tool",
            "ovsdb-client",
            "ovs-appctl",
            "bash",
            "timeout",
        ],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = nb_file(dir);
    let (pidfile, ctl, out) = (dir.join("p.pid"), dir.join("c.ctl"), dir.join("out"));
    let _reaper = Reaper(vec![pidfile.clone()]);
    // The caller captures stdout: it must get EOF once the foreground process exits.
    let script = format!(
        "x=$({} db --detach --inactivity-probe=300 --pidfile={} --unixctl={} --log-file={} --remote=ptcp:0:127.0.0.1 --remote=punix:{} {}); echo \"$x\" > {}",
        holdfast().display(),
        pidfile.display(),
        ctl.display(),
        dir.join("log").display(),
        dir.join("s.sock").display(),
        f.display(),
        out.display()
    );
    let o = run(
        Command::new("timeout").args(["10", "bash", "-c", &script]),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "detach did not return 0: {o:?}");
    let pid = pid_of(&pidfile).expect("pidfile exists when the foreground returns");
    assert!(alive(pid));
    for fd in 0..3 {
        let t = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
        assert_eq!(t, Path::new("/dev/null"), "fd {fd} of the daemon is {t:?}");
    }
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        Path::new("/"),
        "a detached daemon changes to /"
    );
    let banner = std::fs::read_to_string(&out).unwrap();
    let addr = banner
        .lines()
        .find_map(|l| l.strip_prefix("listening on "))
        .expect("banner");
    assert!(
        answers(addr),
        "the detached server does not answer on {addr}"
    );
    // Silent clients: probed on TCP (here every 300 ms), never on a unix socket (as
    // ovsdb-server: local peers cannot vanish silently).
    let mut t = std::net::TcpStream::connect(addr.trim_start_matches("tcp:")).unwrap();
    let mut u = std::os::unix::net::UnixStream::connect(dir.join("s.sock")).unwrap();
    t.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    u.set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut b = [0u8; 512];
    let n = read_retry(&mut t, &mut b).unwrap();
    assert!(String::from_utf8_lossy(&b[..n]).contains("\"echo\""));
    let r = read_retry(&mut u, &mut b);
    assert!(
        r.as_ref().is_err_and(|e| matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )),
        "a unix client was probed or dropped: {r:?}"
    );
    // A second server on the same pidfile is refused while the first holds it.
    let again = run(
        Command::new(holdfast())
            .args(["db", "--remote=ptcp:0:127.0.0.1"])
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!("--unixctl={}", dir.join("c2.ctl").display()))
            .arg(&f),
        Duration::from_secs(20),
    );
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains(&format!("already running as pid {pid}")),
        "{again:?}"
    );
    // Console logging into a pipe: OVS's line format, no colour codes.
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("|ovsdb_server|ERR|"), "{err}");
    assert!(!err.contains('\x1b'), "colour codes on a pipe: {err:?}");
    // --overwrite-pidfile starts anyway and takes the pidfile over.
    let ctl2 = dir.join("c2.ctl");
    run_ok(
        Command::new(holdfast())
            .args([
                "db",
                "--detach",
                "--overwrite-pidfile",
                "--remote=ptcp:0:127.0.0.1",
            ])
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!("--unixctl={}", ctl2.display()))
            .arg(&f),
    );
    let pid2 = pid_of(&pidfile).unwrap();
    assert_ne!(pid2, pid);
    assert!(alive(pid) && alive(pid2));
    appctl_ok(&ctl2, &["exit"]);
    wait_for("the second server to exit", Duration::from_secs(10), || {
        !alive(pid2)
    });
    appctl_ok(&ctl, &["exit"]);
    wait_for("exit", Duration::from_secs(10), || !alive(pid));
    assert!(!pidfile.exists());
}

#[test]
fn user_option_switches_user() {
    if !nix_is_root() {
        eprintln!("SKIP user_option_switches_user: needs root to switch users");
        return;
    }
    if !require("user", &["ovsdb-tool", "ovn-nbctl", "ovs-appctl"]) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = nb_file(dir);
    let (pidfile, ctl, sock) = (dir.join("p.pid"), dir.join("c.ctl"), dir.join("s.sock"));
    let _reaper = Reaper(vec![pidfile.clone()]);
    run_ok(Command::new("chmod").arg("755").arg(dir));
    run_ok(Command::new("chown").arg("-R").arg("nobody").arg(dir));
    run_ok(
        Command::new(holdfast())
            .args(["db", "--detach", "--user", "nobody"])
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!("--unixctl={}", ctl.display()))
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(&f),
    );
    let pid = pid_of(&pidfile).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let nobody = run_ok(Command::new("id").args(["-u", "nobody"]));
    assert!(
        uid_line
            .split_whitespace()
            .skip(1)
            .all(|u| u == nobody.trim()),
        "{uid_line}"
    );
    run_ok(
        Command::new("ovn-nbctl")
            .arg(format!("--db=unix:{}", sock.display()))
            .args(["ls-add", "x"]),
    );
    appctl_ok(&ctl, &["exit"]);
    wait_for("exit", Duration::from_secs(10), || !alive(pid));
}

/// One read, retried when interrupted: a read on a socket with a timeout is never restarted
/// after a signal or a stop/continue of the process (signal(7)), and EINTR says nothing about
/// the server.
fn read_retry(r: &mut impl std::io::Read, b: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match r.read(b) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

pub(crate) fn nix_is_root() -> bool {
    run_ok(Command::new("id").arg("-u")).trim() == "0"
}

/// OVN's own `ovn-ctl`, with a link named `ovsdb-server` to holdfast first on PATH and every
/// directory it uses (run, log, db, sysconf) inside the test's directory.
pub(crate) struct OvnCtl {
    path: String,
    dir: PathBuf,
    /// `OVN_RUNDIR` (also `OVS_RUNDIR`): pidfiles, sockets and control sockets.
    pub(crate) run_dir: PathBuf,
}

impl OvnCtl {
    pub(crate) fn new(dir: &Path) -> OvnCtl {
        let bin = link_dir(dir);
        OvnCtl {
            path: format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
            dir: dir.to_path_buf(),
            run_dir: dir.join("run"),
        }
    }

    /// Runs `ovn-ctl ARGS`, asserts that it succeeded and returns its stdout.
    pub(crate) fn run(&self, args: &[&str]) -> String {
        let mut c = Command::new("/usr/share/ovn/scripts/ovn-ctl");
        c.args(args)
            .env("PATH", &self.path)
            .env("OVN_RUNDIR", &self.run_dir)
            .env("OVS_RUNDIR", &self.run_dir)
            .env("OVN_LOGDIR", self.dir.join("log"))
            .env("OVN_DBDIR", self.dir.join("db"))
            .env("OVN_SYSCONFDIR", self.dir.join("etc"))
            .current_dir(&self.dir);
        let out = run(&mut c, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "ovn-ctl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

#[test]
fn unixctl_commands_through_ovs_appctl() {
    if !require(
        "unixctl",
        &["ovsdb-tool", "ovsdb-client", "ovs-appctl", "ovn-nbctl"],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = nb_file(dir);
    let bin = link_dir(dir);
    let (pidfile, ctl, sock) = (dir.join("p.pid"), dir.join("c.ctl"), dir.join("s.sock"));
    let _reaper = Reaper(vec![pidfile.clone()]);
    run_ok(
        Command::new(bin.join("ovsdb-server"))
            .arg("--detach")
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!("--unixctl={}", ctl.display()))
            .arg(format!("--log-file={}", dir.join("log").display()))
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(&f),
    );
    let pid = pid_of(&pidfile).unwrap();
    let unix = format!("unix:{}", sock.display());

    let v = appctl_ok(&ctl, &["version"]);
    assert!(v.starts_with("ovsdb-server "), "{v}");
    // OVS's scripts use `exit` when the last word is at least 2.5.90.
    let last: Vec<u32> = v
        .split_whitespace()
        .last()
        .unwrap()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(last >= vec![2, 5, 90], "{v}");

    let cmds = appctl_ok(&ctl, &["list-commands"]);
    assert!(cmds.starts_with("The available commands are:\n"), "{cmds}");
    for c in [
        "exit",
        "version",
        "ovsdb-server/compact",
        "ovsdb-server/list-dbs",
        "ovsdb-server/add-remote",
        "ovsdb-server/remove-remote",
        "ovsdb-server/list-remotes",
        "ovsdb-server/reconnect",
        "memory/show",
        "vlog/list",
        "vlog/set",
        "list-commands",
    ] {
        assert!(
            cmds.lines()
                .any(|l| l.trim_start().starts_with(&format!("{c} ")) || l.trim() == c),
            "{c} missing: {cmds}"
        );
    }
    assert_eq!(
        appctl_ok(&ctl, &["ovsdb-server/list-dbs"]),
        "OVN_Northbound\n_Server\n"
    );

    // add-remote / list-remotes / remove-remote, checked by connecting with ovsdb-client.
    let port = free_port();
    let remote = format!("ptcp:{port}:127.0.0.1");
    let tcp = format!("tcp:127.0.0.1:{port}");
    assert!(!answers(&tcp));
    appctl_ok(&ctl, &["ovsdb-server/add-remote", &remote]);
    assert!(answers(&tcp), "add-remote did not listen");
    let list = appctl_ok(&ctl, &["ovsdb-server/list-remotes"]);
    assert_eq!(list, format!("{remote}\npunix:{}\n", sock.display()));
    let bad = appctl(&ctl, &["ovsdb-server/add-remote", "tcp:192.0.2.1:6640"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("tcp:192.0.2.1:6640"),
        "{bad:?}"
    );
    appctl_ok(&ctl, &["ovsdb-server/remove-remote", &remote]);
    assert!(!answers(&tcp), "remove-remote still listens");
    let none = appctl(&ctl, &["ovsdb-server/remove-remote", &remote]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no such remote"));

    // compact: after some transactions the file is one schema and one snapshot record.
    for i in 0..5 {
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={unix}"))
                .args(["ls-add", &format!("sw{i}")]),
        );
    }
    let records = |f: &Path| {
        run_ok(Command::new("ovsdb-tool").arg("show-log").arg(f))
            .lines()
            .filter(|l| l.starts_with("record "))
            .count()
    };
    assert!(records(&f) >= 6);
    appctl_ok(&ctl, &["ovsdb-server/compact"]);
    assert_eq!(records(&f), 2, "not compacted");
    run_ok(
        Command::new("ovn-nbctl")
            .arg(format!("--db={unix}"))
            .args(["ls-add", "late"]),
    );
    appctl_ok(&ctl, &["ovsdb-server/compact", "OVN_Northbound"]);
    assert_eq!(records(&f), 2);
    let nodb = appctl(&ctl, &["ovsdb-server/compact", "nonesuch"]);
    assert_eq!(nodb.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nodb.stderr).contains("no database by that name"));

    // memory/show in ovsdb-server's "key:value" form; cells grow with rows.
    let mem = appctl_ok(&ctl, &["memory/show"]);
    let cells: u64 = mem
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("cells:"))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{mem}"));
    assert!(
        cells > 0 && mem.contains("atoms:") && mem.contains("monitors:"),
        "{mem}"
    );
    // Counted as ovsdb-server counts: the same rows add the same cells and atoms there.
    let figure = |ctl: &Path, key: &str| -> i64 {
        let m = appctl_ok(ctl, &["memory/show"]);
        m.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}:")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {m}"))
    };
    let real =
        crate::common::OvsdbServer::create(dir, "real", Path::new(hf_testkit::ovn::NB_SCHEMA))
            .unwrap();
    let real_ctl = real.daemon.ctl();
    let mut deltas = Vec::new();
    for (ctl, db) in [(&ctl, unix.clone()), (&real_ctl, real.remote.clone())] {
        // ovn-nbctl creates NB_Global when it is missing: have it on both before measuring.
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={db}"))
                .arg("init"),
        );
        let before = (figure(ctl, "cells"), figure(ctl, "atoms"));
        run_ok(Command::new("ovn-nbctl").arg(format!("--db={db}")).args([
            "ls-add",
            "m0",
            "--",
            "lsp-add",
            "m0",
            "mp0",
            "--",
            "lsp-set-addresses",
            "mp0",
            "00:00:00:00:00:01 10.0.0.1",
        ]));
        deltas.push((
            figure(ctl, "cells") - before.0,
            figure(ctl, "atoms") - before.1,
        ));
    }
    assert_eq!(
        deltas[0], deltas[1],
        "memory/show deltas (holdfast, ovsdb-server)"
    );
    // Output formats as ovsdb-server's: the same lines for what both have.
    appctl_ok(&real_ctl, &["vlog/set", "syslog:off"]);
    let (ours, theirs) = (
        appctl_ok(&ctl, &["vlog/list"]),
        appctl_ok(&real_ctl, &["vlog/list"]),
    );
    let ours_lines: Vec<&str> = ours.lines().collect();
    assert_eq!(ours_lines[..2], theirs.lines().collect::<Vec<_>>()[..2]);
    let mut shared = 0;
    for l in &ours_lines[2..] {
        let module = l.split_whitespace().next().unwrap();
        if let Some(t) = theirs
            .lines()
            .find(|t| t.split_whitespace().next() == Some(module))
        {
            assert_eq!(*l, t, "vlog/list line for {module}");
            shared += 1;
        }
    }
    assert!(shared >= 5, "{ours}");
    let (ours, theirs) = (
        appctl_ok(&ctl, &["list-commands"]),
        appctl_ok(&real_ctl, &["list-commands"]),
    );
    for l in ours.lines() {
        assert!(
            theirs.lines().any(|t| t == l),
            "list-commands line {l:?} is not ovsdb-server's"
        );
    }
    let (ours, theirs) = (
        appctl_ok(&ctl, &["version"]),
        appctl_ok(&real_ctl, &["version"]),
    );
    assert_eq!(
        ours.split_whitespace().last(),
        theirs.split_whitespace().last()
    );
    drop(real);

    // reconnect drops a live client.
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    // One round trip first, so the session surely exists when reconnect runs.
    std::io::Write::write_all(&mut c, br#"{"method":"echo","params":[],"id":"e"}"#).unwrap();
    let mut b = [0u8; 256];
    let n = read_retry(&mut c, &mut b).unwrap();
    assert!(String::from_utf8_lossy(&b[..n]).contains("\"e\""));
    appctl_ok(&ctl, &["ovsdb-server/reconnect"]);
    let n = read_retry(&mut c, &mut b);
    assert!(
        matches!(n, Ok(0))
            || n.as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "client not disconnected: {n:?}"
    );

    // vlog.
    let vl = appctl_ok(&ctl, &["vlog/list"]);
    assert!(
        vl.starts_with("                 console    syslog    file\n"),
        "{vl}"
    );
    assert!(
        vl.lines()
            .any(|l| l.starts_with("unixctl ") && l.ends_with("INFO")),
        "{vl}"
    );
    appctl_ok(&ctl, &["vlog/set", "unixctl:file:dbg"]);
    let vl = appctl_ok(&ctl, &["vlog/list"]);
    assert!(
        vl.lines()
            .any(|l| l.starts_with("unixctl ") && l.ends_with("DBG")),
        "{vl}"
    );
    appctl_ok(&ctl, &["version"]);
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    assert!(
        log.contains("|unixctl|DBG|received request version"),
        "{log}"
    );
    let bogus = appctl(&ctl, &["vlog/set", "bogus"]);
    assert_eq!(bogus.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bogus.stderr)
            .contains("no destination, level, or module \"bogus\"")
    );
    let unknown = appctl(&ctl, &["no/such-command"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("\"no/such-command\" is not a valid command")
    );
    let extra = appctl(&ctl, &["version", "x"]);
    assert!(
        String::from_utf8_lossy(&extra.stderr)
            .contains("\"version\" command takes at most 0 arguments")
    );

    appctl_ok(&ctl, &["exit"]);
    wait_for("exit", Duration::from_secs(10), || !alive(pid));
    assert!(!pidfile.exists() && !ctl.exists() && !sock.exists());
}

#[test]
fn monitor_restarts_after_segv_and_kill() {
    if !require(
        "monitor",
        &["ovsdb-tool", "ovsdb-client", "ovs-appctl", "ovn-nbctl"],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = nb_file(dir);
    let bin = link_dir(dir);
    let (pidfile, ctl, sock) = (dir.join("p.pid"), dir.join("c.ctl"), dir.join("s.sock"));
    let _reaper = Reaper(vec![pidfile.clone()]);
    run_ok(
        Command::new(bin.join("ovsdb-server"))
            .args(["--detach", "--monitor"])
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!("--unixctl={}", ctl.display()))
            .arg(format!("--log-file={}", dir.join("log").display()))
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(&f),
    );
    let unix = format!("unix:{}", sock.display());
    run_ok(
        Command::new("ovn-nbctl")
            .arg(format!("--db={unix}"))
            .args(["ls-add", "before"]),
    );
    let mut pid = pid_of(&pidfile).unwrap();
    let monitor = ppid(pid).unwrap();
    for sig in ["-SEGV", "-KILL"] {
        run_ok(Command::new("kill").args([sig, &pid.to_string()]));
        wait_for("a restarted server", Duration::from_secs(20), || {
            pid_of(&pidfile).is_some_and(|p| p != pid && alive(p)) && answers(&unix)
        });
        let new = pid_of(&pidfile).unwrap();
        assert_eq!(ppid(new), Some(monitor), "restarted by the same monitor");
        pid = new;
        // The data survived the crash.
        let ls = run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={unix}"))
                .arg("ls-list"),
        );
        assert!(ls.contains("(before)"), "{ls}");
    }
    let log = std::fs::read_to_string(dir.join("log")).unwrap();
    assert!(log.contains("killed (SIGSEGV), restarting"), "{log}");
    // A clean exit ends the monitor too.
    appctl_ok(&ctl, &["exit"]);
    wait_for(
        "server and monitor to exit",
        Duration::from_secs(10),
        || !alive(pid) && !alive(monitor),
    );
}

#[test]
fn db_remotes_follow_connection_rows() {
    if !require(
        "db_remotes",
        &["ovsdb-tool", "ovsdb-client", "ovs-appctl", "ovn-nbctl"],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = nb_file(dir);
    let (pidfile, ctl, sock) = (dir.join("p.pid"), dir.join("c.ctl"), dir.join("s.sock"));
    let _reaper = Reaper(vec![pidfile.clone()]);
    run_ok(
        Command::new(holdfast())
            .args([
                "db",
                "--detach",
                "--remote=db:OVN_Northbound,NB_Global,connections",
                "--private-key=db:OVN_Northbound,SSL,private_key",
                "--certificate=db:OVN_Northbound,SSL,certificate",
                "--ca-cert=db:OVN_Northbound,SSL,ca_cert",
            ])
            .arg(format!("--pidfile={}", pidfile.display()))
            .arg(format!("--unixctl={}", ctl.display()))
            .arg(format!("--log-file={}", dir.join("log").display()))
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(&f),
    );
    let pid = pid_of(&pidfile).unwrap();
    let nb = format!("--db=unix:{}", sock.display());
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "init"]));
    let port = free_port();
    let tcp = format!("tcp:127.0.0.1:{port}");
    assert!(!answers(&tcp));
    run_ok(Command::new("ovn-nbctl").args([
        nb.as_str(),
        "set-connection",
        &format!("ptcp:{port}:127.0.0.1"),
    ]));
    wait_for(
        "the Connection's remote to listen",
        Duration::from_secs(10),
        || answers(&tcp),
    );
    // The row's status says what is bound, as ovsdb-server writes it.
    wait_for(
        "Connection status:bound_port",
        Duration::from_secs(10),
        || {
            let o = run(
                Command::new("ovn-nbctl").args([
                    nb.as_str(),
                    "get",
                    "connection",
                    ".",
                    "status:bound_port",
                ]),
                Duration::from_secs(10),
            );
            String::from_utf8_lossy(&o.stdout).trim() == format!("\"{port}\"")
        },
    );
    // The Connection row's inactivity_probe applies to its remote's sessions: with 1000 ms
    // (the default is 5000) a silent client is probed within about a second and dropped
    // after another.
    run_ok(Command::new("ovn-nbctl").args([
        nb.as_str(),
        "--inactivity-probe=1000",
        "set-connection",
        &format!("ptcp:{port}:127.0.0.1"),
    ]));
    std::thread::sleep(Duration::from_millis(600));
    let t0 = Instant::now();
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    loop {
        match read_retry(&mut silent, &mut b) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
        }
    }
    let took = t0.elapsed();
    assert!(
        String::from_utf8_lossy(&got).contains("\"echo\""),
        "no probe: {got:?}"
    );
    assert!(
        took < Duration::from_millis(4000),
        "dropped after {took:?}, not the row's 1000 ms probe"
    );
    let list = appctl_ok(&ctl, &["ovsdb-server/list-remotes"]);
    assert!(
        list.contains("db:OVN_Northbound,NB_Global,connections"),
        "{list}"
    );
    // An active target is refused with a logged error naming it; the server stays up.
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "set-connection", "tcp:192.0.2.1:6640"]));
    wait_for("the refusal to be logged", Duration::from_secs(10), || {
        std::fs::read_to_string(dir.join("log"))
            .unwrap_or_default()
            .contains("tcp:192.0.2.1:6640: active remotes")
    });
    wait_for(
        "the removed remote to stop listening",
        Duration::from_secs(10),
        || !answers(&tcp),
    );
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "del-connection"]));
    // --private-key=db:... follows the SSL table (set by real ovn-nbctl set-ssl): files that
    // do not exist are reported by name (the TLS test with ovn-ctl uses real ones).
    run_ok(Command::new("ovn-nbctl").args([
        nb.as_str(),
        "set-ssl",
        "/k/key.pem",
        "/k/cert.pem",
        "/k/ca.pem",
    ]));
    wait_for(
        "the TLS settings to be resolved",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(dir.join("log"))
                .unwrap_or_default()
                .contains("TLS settings not applied: --private-key /k/key.pem: ")
        },
    );
    assert!(alive(pid));
    appctl_ok(&ctl, &["exit"]);
    wait_for("exit", Duration::from_secs(10), || !alive(pid));
}

#[test]
fn unknown_options_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = link_dir(dir);
    let f = dir.join("x.db");
    run_ok(
        Command::new(holdfast())
            .arg("db")
            .arg("create")
            .arg(&f)
            .arg(crate::common::nb_schema()),
    );
    for (cmd, args, name) in [
        (
            bin.join("ovsdb-server"),
            vec!["--bogus-option"],
            "--bogus-option",
        ),
        (
            bin.join("ovsdb-server"),
            vec!["--sync-from=tcp:192.0.2.1:6641"],
            "--sync-from",
        ),
        (
            bin.join("ovsdb-server"),
            vec!["--remote=tcp:192.0.2.1:6641"],
            "tcp:192.0.2.1:6641",
        ),
        (bin.join("ovsdb-server"), vec!["--remote=pssl:0"], "pssl:0"),
        (
            bin.join("ovsdb-server"),
            vec!["-vnosuchmodule:file:dbg"],
            "nosuchmodule",
        ),
        (
            bin.join("ovsdb-server"),
            vec!["--remote=db:Nope,T,c"],
            "Nope",
        ),
        (holdfast(), vec!["db", "--bogus-option"], "--bogus-option"),
    ] {
        let o = run(
            Command::new(&cmd)
                .args(&args)
                .arg(format!("--unixctl={}", dir.join("c.ctl").display()))
                .arg(&f)
                .env("OVS_RUNDIR", dir),
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{cmd:?} {args:?} was accepted");
        assert!(
            err.contains(name),
            "{cmd:?} {args:?}: error does not name {name}: {err}"
        );
    }
    // Database kinds holdfast does not serve are refused by name.
    let relay = run(
        Command::new(bin.join("ovsdb-server")).arg("relay:OVN_Northbound:tcp:192.0.2.1:6641"),
        Duration::from_secs(20),
    );
    assert!(!relay.status.success());
    assert!(String::from_utf8_lossy(&relay.stderr).contains("relay databases are not supported"));
    if require("cluster_file", &["ovsdb-tool"]) {
        let cl = dir.join("cl.db");
        run_ok(
            Command::new("ovsdb-tool")
                .arg("create-cluster")
                .arg(&cl)
                .arg(crate::common::nb_schema())
                .arg(format!("unix:{}", dir.join("cl.raft").display())),
        );
        let o = run(
            Command::new(bin.join("ovsdb-server")).arg(&cl),
            Duration::from_secs(20),
        );
        assert!(!o.status.success());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("a clustered database"),
            "{o:?}"
        );
    }
    // --help says which options exist only for compatibility.
    let help = run_ok(Command::new(bin.join("ovsdb-server")).arg("--help"));
    assert!(
        help.contains("only for ovsdb-server compatibility"),
        "{help}"
    );
    assert!(help.contains("--disable-file-column-diff"), "{help}");
}

#[test]
fn ovn_ctl_start_northd_runs_real_northd_on_holdfast_databases() {
    if !nix_is_root() {
        // ovn-ctl/ovs-ctl create their directories owned by root (install -o root, chown).
        eprintln!(
            "SKIP ovn_ctl_start_northd_runs_real_northd_on_holdfast_databases: OVN's and OVS's scripts need root"
        );
        return;
    }
    if !require(
        "ovn_ctl_northd",
        &[
            "/usr/share/ovn/scripts/ovn-ctl",
            "ovsdb-tool",
            "ovn-nbctl",
            "ovn-sbctl",
            "ovn-northd",
        ],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ctl = OvnCtl::new(dir);
    let run_dir = ctl.run_dir.clone();
    let _reaper = Reaper(vec![
        run_dir.join("ovnnb_db.pid"),
        run_dir.join("ovnsb_db.pid"),
        run_dir.join("ovn-northd.pid"),
    ]);
    let ovn_ctl = |args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ctl.run(&args);
    };
    // OVN_MANAGE_OVSDB (the default): start_northd starts both databases, then ovn-northd.
    ovn_ctl(&["start_northd".into()]);
    let nb_pid = pid_of(&run_dir.join("ovnnb_db.pid")).unwrap();
    assert_eq!(
        std::fs::canonicalize(format!("/proc/{nb_pid}/exe")).unwrap(),
        std::fs::canonicalize(holdfast()).unwrap()
    );
    let nb = format!("--db=unix:{}", run_dir.join("ovnnb_db.sock").display());
    let sb = format!("--db=unix:{}", run_dir.join("ovnsb_db.sock").display());
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "ls-add", "sw0"]));
    run_ok(Command::new("ovn-nbctl").args([nb.as_str(), "--timeout=20", "--wait=sb", "sync"]));
    let dp = run_ok(Command::new("ovn-sbctl").args([
        sb.as_str(),
        "--columns=external_ids",
        "list",
        "Datapath_Binding",
    ]));
    assert!(
        dp.contains("name=sw0"),
        "real ovn-northd did not compile sw0: {dp}"
    );
    ovn_ctl(&["stop_northd".into()]);
    wait_for("everything to stop", Duration::from_secs(10), || {
        ["ovnnb_db.pid", "ovnsb_db.pid", "ovn-northd.pid"]
            .iter()
            .all(|p| !run_dir.join(p).exists())
    });
}

#[test]
fn ovs_ctl_starts_holdfast_for_conf_db() {
    if !nix_is_root() {
        // ovn-ctl/ovs-ctl create their directories owned by root (install -o root, chown).
        eprintln!("SKIP ovs_ctl_starts_holdfast_for_conf_db: OVN's and OVS's scripts need root");
        return;
    }
    if !require(
        "ovs_ctl",
        &[
            "/usr/share/openvswitch/scripts/ovs-ctl",
            "ovsdb-tool",
            "ovs-vsctl",
            "ovs-appctl",
        ],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = link_dir(dir);
    std::fs::create_dir_all(dir.join("etc/openvswitch")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run_dir = dir.join("run");
    let _reaper = Reaper(vec![run_dir.join("ovsdb-server.pid")]);
    let env = |c: &mut Command| {
        c.env("PATH", &path)
            .env("OVS_RUNDIR", &run_dir)
            .env("OVS_LOGDIR", dir.join("log"))
            .env("OVS_DBDIR", dir.join("db"))
            .env("OVS_SYSCONFDIR", dir.join("etc"))
            .current_dir(dir);
    };
    let ovs_ctl = |args: &[&str]| {
        let mut c = Command::new("/usr/share/openvswitch/scripts/ovs-ctl");
        c.args(args);
        env(&mut c);
        let out = run(&mut c, Duration::from_secs(60));
        assert!(out.status.success(), "ovs-ctl {args:?}: {out:?}");
    };
    // ovs-ctl's command line: -vconsole:emer -vsyslog:err -vfile:info, --bootstrap-ca-cert,
    // --no-chdir, --detach --monitor, then `add-remote db:...manager_options` via ovs-appctl.
    ovs_ctl(&["--no-ovs-vswitchd", "--system-id=random", "start"]);
    let db = format!("--db=unix:{}", run_dir.join("db.sock").display());
    run_ok(Command::new("ovs-vsctl").args([db.as_str(), "--no-wait", "add-br", "br0"]));
    assert_eq!(
        run_ok(Command::new("ovs-vsctl").args([db.as_str(), "list-br"])),
        "br0\n"
    );
    // `ovs-appctl -t ovsdb-server` finds the daemon through its locked pidfile.
    let mut c = Command::new("ovs-appctl");
    c.args(["-t", "ovsdb-server", "ovsdb-server/list-remotes"]);
    env(&mut c);
    let remotes = run_ok(&mut c);
    assert!(
        remotes.contains("db:Open_vSwitch,Open_vSwitch,manager_options"),
        "{remotes}"
    );
    ovs_ctl(&["--no-ovs-vswitchd", "stop"]);
    wait_for("ovsdb-server to stop", Duration::from_secs(10), || {
        !run_dir.join("ovsdb-server.pid").exists()
    });
}

/// holdfast db and holdfast northd run without transparent huge pages (mimalloc asks for them,
/// and zeroing them was ~40 % of the db's CPU at a cold SB: docs/db-scale.md).
#[test]
fn the_central_daemons_run_without_transparent_huge_pages() {
    use crate::common::thp_enabled;
    if thp_enabled(std::process::id()) != "1" {
        eprintln!("skipping: this test process itself runs without transparent huge pages");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = crate::common::HoldfastDb::start(
        tmp.path(),
        &[("sb.db", &crate::common::sb_schema())],
        &[],
    );
    assert_eq!(thp_enabled(db.pid()), "0", "holdfast db");
    let mut northd = Command::new(holdfast())
        .args([
            "northd",
            "--no-chdir",
            "--ovnnb-db",
            &db.unix,
            "--ovnsb-db",
            &db.unix,
        ])
        .arg(format!(
            "--unixctl={}",
            tmp.path().join("northd.ctl").display()
        ))
        .env("HOLDFAST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The flag is set first thing in main; wait until the process is past exec.
    wait_for("northd's unixctl socket", Duration::from_secs(30), || {
        tmp.path().join("northd.ctl").exists()
    });
    let northd_thp = thp_enabled(northd.id());
    let _ = northd.kill();
    let _ = northd.wait();
    assert_eq!(northd_thp, "0", "holdfast northd");
}
