//! Real OVS/OVN daemons for the tests and benchmarks that compare with them (OVN 23.03 and
//! OVS 3.1 from Debian's packages are the oracles, `DESIGN.md` "Oracles we did not write").
//!
//! Every daemon runs `--detach --no-chdir --pidfile --log-file --unixctl` with its files named
//! `NAME.pid`/`.log`/`.ctl` in the test's directory ([`daemon_args`]), and is stopped by pid
//! when its handle drops, also when the test fails. What there is:
//!
//! - [`Daemon`]: one such process (any program, holdfast's daemons included).
//! - [`OvsdbServer`]: a real `ovsdb-server` on database files, `ovsdb-tool create`d or given.
//! - [`Central`]: NB and SB `ovsdb-server`s and `ovn-northd` in a temporary directory, with
//!   `ovn-nbctl`/`ovn-sbctl` runners, `--wait=sb sync` and an SB backup.
//! - [`RealChassis`]: a private `Open_vSwitch` database, `ovs-vswitchd --enable-dummy=override`
//!   with `br-int` and dummy interfaces, and `ovn-controller`.
//! - [`raft`]: `ovsdb-server` members of a Raft cluster, killed, restarted and rejoined.
//!
//! It does not put these daemons in network namespaces (they talk over unix sockets and
//! loopback TCP); a test that wants one inside a [`Lab`](crate::Lab) namespace runs the same
//! command through [`Netns::command`](crate::Netns::command) and adopts the daemon.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::cmd::{self, DEFAULT_TIMEOUT, alive, read_pidfile};
use crate::{KitError, Result};

mod central;
mod chassis;
pub mod raft;

pub use central::Central;
pub use chassis::{ChassisOpts, RealChassis};

/// How long a daemon may take to detach (an `ovsdb-server` reading a large database).
const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(300);

/// Real OVN 23.03's NB schema.
pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
/// Real OVN 23.03's SB schema.
pub const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";
/// OVS's `Open_vSwitch` schema.
pub const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// What [`Central`] runs.
pub const CENTRAL_TOOLS: &[&str] = &[
    "ovsdb-tool",
    "ovsdb-server",
    "ovsdb-client",
    "ovn-northd",
    "ovn-nbctl",
    "ovn-sbctl",
    NB_SCHEMA,
    SB_SCHEMA,
];

/// What [`RealChassis`] runs.
pub const CHASSIS_TOOLS: &[&str] = &[
    "ovsdb-tool",
    "ovsdb-server",
    "ovs-vsctl",
    "ovs-ofctl",
    "ovs-vswitchd",
    "ovn-controller",
    "ovn-appctl",
    VSWITCH_SCHEMA,
];

/// OVN's schema `nb` or `sb` (real OVN 23.03's).
pub fn ovn_schema(db: &str) -> PathBuf {
    PathBuf::from(format!("/usr/share/ovn/ovn-{db}.ovsschema"))
}

/// The flags every OVS/OVN daemon a test starts gets: detached, with its pidfile, log file and
/// unixctl socket named `NAME.pid`/`.log`/`.ctl` in `dir`. holdfast's daemons take the same.
pub fn daemon_args(dir: &Path, name: &str) -> Vec<String> {
    vec![
        "--detach".into(),
        "--no-chdir".into(),
        format!("--pidfile={}", dir.join(format!("{name}.pid")).display()),
        format!("--log-file={}", dir.join(format!("{name}.log")).display()),
        format!("--unixctl={}", dir.join(format!("{name}.ctl")).display()),
    ]
}

/// Point every OVS/OVN run, log and database directory variable of `c` at `dir`, so a tool
/// finds the daemons of this test (and never the system's).
pub fn in_rundir<'a>(c: &'a mut Command, dir: &Path) -> &'a mut Command {
    for v in [
        "OVS_RUNDIR",
        "OVS_LOGDIR",
        "OVS_DBDIR",
        "OVN_RUNDIR",
        "OVN_LOGDIR",
    ] {
        c.env(v, dir);
    }
    c
}

/// `ovsdb-tool create FILE SCHEMA`.
pub fn create_db(file: &Path, schema: &Path) -> Result<()> {
    cmd::run(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(file)
            .arg(schema),
        DEFAULT_TIMEOUT,
    )
    .map(drop)
}

/// A daemon that detached and wrote its pid to `NAME.pid`. Dropping the handle sends it
/// SIGTERM (it is not waited for: [`Daemon::stop`] waits).
#[derive(Debug)]
pub struct Daemon {
    name: String,
    dir: PathBuf,
}

impl Daemon {
    /// Run `c` with [`daemon_args`]`(dir, name)` appended; it returns once the daemon has
    /// detached (its pidfile written), within 5 minutes.
    pub fn start(dir: &Path, name: &str, mut c: Command) -> Result<Daemon> {
        c.args(daemon_args(dir, name));
        cmd::run(&mut c, DAEMON_START_TIMEOUT)?;
        Ok(Daemon::adopt(dir, name))
    }

    /// The handle of a daemon started otherwise with `dir/NAME.pid` as its pidfile.
    pub fn adopt(dir: &Path, name: &str) -> Daemon {
        Daemon {
            name: name.to_string(),
            dir: dir.to_path_buf(),
        }
    }

    /// Its name (`NAME.pid`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `dir/NAME.pid`.
    pub fn pidfile(&self) -> PathBuf {
        self.dir.join(format!("{}.pid", self.name))
    }

    /// `dir/NAME.log`.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.name))
    }

    /// `dir/NAME.ctl`.
    pub fn ctl(&self) -> PathBuf {
        self.dir.join(format!("{}.ctl", self.name))
    }

    /// The pid in its pidfile, while there is one.
    pub fn pid(&self) -> Option<i32> {
        read_pidfile(&self.pidfile())
    }

    /// Whether it runs.
    pub fn is_running(&self) -> bool {
        self.pid().is_some_and(alive)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGTERM, and wait up to 10 s for it to exit.
    pub fn stop(&self) -> Result<()> {
        self.signal_and_wait(Signal::SIGTERM, Duration::from_secs(10))
    }

    /// SIGKILL (a crash: no clean shutdown), and wait up to 5 s for it to be gone. Its pidfile
    /// is removed (the pid may be reused: nothing to signal later).
    pub fn kill9(&self) -> Result<()> {
        self.signal_and_wait(Signal::SIGKILL, Duration::from_secs(5))?;
        let _ = std::fs::remove_file(self.pidfile());
        Ok(())
    }

    fn signal_and_wait(&self, sig: Signal, timeout: Duration) -> Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        let _ = kill(Pid::from_raw(pid), sig);
        cmd::wait_until(
            timeout,
            || format!("{} (pid {pid}) to exit after {sig}", self.name),
            || !alive(pid),
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }
}

/// SIGTERM the daemons whose pidfiles are listed, last started first, without waiting (for a
/// `Drop` of daemons started elsewhere; [`Daemon`] does this for one).
pub fn stop_pidfiles(pidfiles: &[PathBuf]) {
    for p in pidfiles.iter().rev() {
        if let Some(pid) = read_pidfile(p) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }
}

/// A real `ovsdb-server` serving database files; stopped on drop.
#[derive(Debug)]
pub struct OvsdbServer {
    /// The process (`NAME.pid`, `.log`, `.ctl`).
    pub daemon: Daemon,
    /// `unix:DIR/NAME.sock`.
    pub remote: String,
    /// `DIR/NAME.sock`.
    pub sock: PathBuf,
    /// The files it serves.
    pub files: Vec<PathBuf>,
}

impl OvsdbServer {
    /// Create `dir/NAME.db` from `schema` with `ovsdb-tool` and serve it.
    pub fn create(dir: &Path, name: &str, schema: &Path) -> Result<OvsdbServer> {
        let file = dir.join(format!("{name}.db"));
        create_db(&file, schema)?;
        OvsdbServer::serve(dir, name, &[file], &[])
    }

    /// Serve `files` as daemon `NAME` in `dir` on `unix:DIR/NAME.sock`, with more `args`
    /// (`--remote=ptcp:PORT:127.0.0.1`, TLS files, ...).
    pub fn serve(
        dir: &Path,
        name: &str,
        files: &[PathBuf],
        args: &[String],
    ) -> Result<OvsdbServer> {
        let sock = dir.join(format!("{name}.sock"));
        // A socket left by a killed server would make the new one fail to listen.
        let _ = std::fs::remove_file(&sock);
        let mut c = Command::new("ovsdb-server");
        in_rundir(&mut c, dir)
            .arg(format!("--remote=punix:{}", sock.display()))
            .args(args)
            .args(files);
        Ok(OvsdbServer {
            daemon: Daemon::start(dir, name, c)?,
            remote: format!("unix:{}", sock.display()),
            sock,
            files: files.to_vec(),
        })
    }
}

/// Whether the tools of `sets` (e.g. [`CENTRAL_TOOLS`], [`CHASSIS_TOOLS`]) are all here: see
/// [`require_tools`](crate::require_tools).
pub fn require(test: &str, sets: &[&[&str]]) -> bool {
    let mut all: Vec<&str> = Vec::new();
    for t in sets.concat() {
        if !all.contains(&t) {
            all.push(t);
        }
    }
    crate::require_tools(test, &all)
}

/// Run `c` (a `Command` for an OVS/OVN tool) and require success; its stdout. A shorthand for
/// [`cmd::run`] with the default timeout.
pub fn run(c: &mut Command) -> Result<String> {
    cmd::run(c, DEFAULT_TIMEOUT)
}

/// `pid`'s `Vm*` figure (`VmRSS`, `VmHWM`) from `/proc/PID/status`, in bytes.
pub fn vm_bytes(pid: i32, field: &str) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let s =
        std::fs::read_to_string(&path).map_err(|e| KitError::io(format!("reading {path}"), e))?;
    s.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| KitError::Parse {
            what: path,
            detail: format!("no {field} line"),
        })
}
