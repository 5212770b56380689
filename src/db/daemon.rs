//! Unix daemon plumbing in OVS's manner: `--detach` (fork, `setsid`, the foreground process
//! exits only once the daemon says it is ready, the daemon's standard streams go to
//! /dev/null), `--monitor` (a supervisor that restarts the daemon when it crashes),
//! `--pidfile` (written atomically and held with a POSIX record lock, as `ovs-appctl -t NAME`
//! and OVS's scripts expect), `--user` and `--no-chdir`.
//!
//! Everything here runs before the tokio runtime exists: forking is only safe while the
//! process has one thread.
//!
//! What it does not do: drop Linux capabilities selectively (OVS's libcap-ng path); `--user`
//! switches uid, gid and supplementary groups, which drops every capability of a non-root user.
// The daemon shell forks, reads the clock and touches the file system.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork};

/// What ends a ready message on the startup pipe.
const READY: &str = "\0ready\n";

/// The write end of the startup pipe: the daemon tells its parent it is ready (or, by closing
/// it without a word, that it failed).
#[derive(Debug, Default)]
pub struct Readiness {
    pipe: Option<std::fs::File>,
}

impl Readiness {
    /// Whether somebody waits for the notification (i.e. we were detached or monitored).
    pub fn waited_for(&self) -> bool {
        self.pipe.is_some()
    }

    /// Tell the waiting parent that startup completed; `banner` is printed by the foreground
    /// process (the bound addresses).
    pub fn notify(&mut self, banner: &str) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(banner.as_bytes());
            let _ = p.write_all(READY.as_bytes());
        }
    }
}

/// Read a startup pipe to its end: Some(banner) when the child said it is ready.
fn wait_ready(r: std::os::fd::OwnedFd) -> Option<String> {
    let mut f = std::fs::File::from(r);
    let mut msg = String::new();
    let _ = f.read_to_string(&mut msg);
    msg.strip_suffix(READY).map(str::to_string)
}

fn describe(status: WaitStatus) -> String {
    match status {
        WaitStatus::Exited(_, code) => format!("exit status {code}"),
        WaitStatus::Signaled(_, sig, core) => format!(
            "killed ({}){}",
            sig.as_str(),
            if core { ", core dumped" } else { "" }
        ),
        other => format!("{other:?}"),
    }
}

fn wait_child(pid: Pid) -> WaitStatus {
    loop {
        match waitpid(pid, None) {
            Ok(s @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => return s,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                tracing::error!("waitpid {pid} failed: {e}");
                return WaitStatus::Exited(pid, 1);
            }
        }
    }
}

/// `--detach`: fork; the parent waits until the child is ready, prints its banner and exits
/// 0, or exits with the child's failure code. Returns in the child, in a new session.
pub fn detach() -> anyhow::Result<Readiness> {
    let (r, w) = nix::unistd::pipe().context("pipe")?;
    // SAFETY: called before any thread is started (the runtime is built later).
    match unsafe { fork() }.context("fork")? {
        ForkResult::Parent { child } => {
            drop(w);
            match wait_ready(r) {
                Some(banner) => {
                    print!("{banner}");
                    let _ = std::io::stdout().flush();
                    std::process::exit(0);
                }
                None => {
                    let status = wait_child(child);
                    match status {
                        WaitStatus::Exited(_, code) if code != 0 => std::process::exit(code),
                        s => {
                            eprintln!(
                                "error: fork child died before signaling startup ({})",
                                describe(s)
                            );
                            std::process::exit(1);
                        }
                    }
                }
            }
        }
        ForkResult::Child => {
            drop(r);
            nix::unistd::setsid().context("setsid")?;
            Ok(Readiness {
                pipe: Some(std::fs::File::from(w)),
            })
        }
    }
}

/// Whether the monitor restarts a daemon that ended with `status`: OVS's crash signals
/// (SIGABRT, SIGALRM, SIGBUS, SIGFPE, SIGILL, SIGPIPE, SIGSEGV, SIGXCPU, SIGXFSZ), plus
/// SIGKILL (the kernel's OOM killer) and a Rust panic's exit status 101.
fn should_restart(status: WaitStatus) -> bool {
    match status {
        WaitStatus::Signaled(_, sig, _) => matches!(
            sig,
            Signal::SIGABRT
                | Signal::SIGALRM
                | Signal::SIGBUS
                | Signal::SIGFPE
                | Signal::SIGILL
                | Signal::SIGPIPE
                | Signal::SIGSEGV
                | Signal::SIGXCPU
                | Signal::SIGXFSZ
                | Signal::SIGKILL
        ),
        WaitStatus::Exited(_, 101) => true,
        _ => false,
    }
}

/// `--monitor`: this process becomes a supervisor; returns only in the (re)started daemon,
/// with the readiness to signal. The first daemon's readiness is relayed to `up` (the
/// foreground process with `--detach`); restarts are throttled to one per 10 seconds.
pub fn monitor(mut up: Readiness, detached: bool) -> anyhow::Result<Readiness> {
    let mut crashes = 0u32;
    let mut last_restart: Option<Instant> = None;
    let mut first = true;
    loop {
        let (r, w) = nix::unistd::pipe().context("pipe")?;
        // SAFETY: the monitor never starts threads.
        let child = match unsafe { fork() }.context("fork")? {
            ForkResult::Child => {
                drop(r);
                return Ok(Readiness {
                    pipe: Some(std::fs::File::from(w)),
                });
            }
            ForkResult::Parent { child } => child,
        };
        drop(w);
        let ready = wait_ready(r);
        if first {
            first = false;
            match ready {
                Some(banner) => {
                    if up.waited_for() {
                        up.notify(&banner);
                    } else {
                        print!("{banner}");
                        let _ = std::io::stdout().flush();
                    }
                    if detached {
                        null_stdio();
                    }
                }
                None => {
                    // Startup failed: report as the daemon would have, without restarting.
                    let status = wait_child(child);
                    match status {
                        WaitStatus::Exited(_, code) if code != 0 => std::process::exit(code),
                        s => bail!("daemon died before signaling startup ({})", describe(s)),
                    }
                }
            }
        }
        // Like OVS's monitor: do not hold the log file open while waiting (logrotate).
        super::vlog::suspend_file();
        let status = wait_child(child);
        super::vlog::resume_file();
        if !should_restart(status) {
            tracing::info!("pid {child} died, {}, exiting", describe(status));
            std::process::exit(0);
        }
        crashes += 1;
        let msg = format!("{crashes} crashes: pid {child} died, {}", describe(status));
        if let Some(t) = last_restart {
            let next = t + Duration::from_secs(10);
            let now = Instant::now();
            if now < next {
                tracing::warn!("{msg}, waiting until 10 seconds since last restart");
                std::thread::sleep(next - now);
            }
        }
        last_restart = Some(Instant::now());
        tracing::error!("{msg}, restarting");
    }
}

/// Point stdin, stdout and stderr at /dev/null (a detached daemon must not hold its caller's
/// terminal or pipes open).
pub fn null_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// A pidfile this process owns: written atomically, locked with `F_SETLK` for as long as the
/// process lives (OVS's `read_pidfile` only believes a locked pidfile), removed on drop.
#[derive(Debug)]
pub struct Pidfile {
    path: PathBuf,
    _file: std::fs::File,
}

fn lock(f: &std::fs::File, cmd: i32) -> Result<nix::libc::flock, nix::errno::Errno> {
    // SAFETY: flock is plain old data; all-zero is a valid value.
    let mut l: nix::libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = nix::libc::F_WRLCK as _;
    l.l_whence = nix::libc::SEEK_SET as _;
    // SAFETY: a valid open fd and a valid flock struct.
    let r = unsafe { nix::libc::fcntl(f.as_raw_fd(), cmd, &mut l) };
    if r == -1 {
        Err(nix::errno::Errno::last())
    } else {
        Ok(l)
    }
}

/// The pid of a live process holding `path` locked, if any.
pub fn running_pid(path: &Path) -> Option<i32> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    let l = lock(&f, nix::libc::F_GETLK).ok()?;
    if i32::from(l.l_type) == nix::libc::F_UNLCK {
        return None;
    }
    Some(l.l_pid)
}

impl Pidfile {
    /// Create `path` holding this process's pid. Refuses when another live process holds
    /// it, unless `overwrite`.
    pub fn create(path: &Path, overwrite: bool) -> anyhow::Result<Pidfile> {
        if !overwrite && let Some(pid) = running_pid(path) {
            bail!("{}: already running as pid {pid}, aborting", path.display());
        }
        let tmp = PathBuf::from(format!("{}.tmp", path.display()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .with_context(|| format!("{}: create failed", tmp.display()))?;
        lock(&f, nix::libc::F_SETLK)
            .map_err(|e| anyhow!("{}: fcntl(F_SETLK) failed: {e}", tmp.display()))?;
        f.write_all(format!("{}\n", std::process::id()).as_bytes())
            .and_then(|()| f.flush())
            .with_context(|| format!("{}: write failed", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("failed to rename {} to {}", tmp.display(), path.display()))?;
        Ok(Pidfile {
            path: path.to_path_buf(),
            _file: f,
        })
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// `--user USER[:GROUP]`: become that user (and group, by default the user's own), with the
/// user's supplementary groups.
pub fn become_user(spec: &str) -> anyhow::Result<()> {
    use nix::unistd::{Group, User};
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let u = User::from_name(user)
        .with_context(|| format!("--user {spec}: cannot look up user {user}"))?
        .ok_or_else(|| anyhow!("--user {spec}: no user named {user}"))?;
    let gid = match group {
        Some(g) if !g.is_empty() => {
            Group::from_name(g)
                .with_context(|| format!("--user {spec}: cannot look up group {g}"))?
                .ok_or_else(|| anyhow!("--user {spec}: no group named {g}"))?
                .gid
        }
        _ => u.gid,
    };
    let cname = std::ffi::CString::new(user).map_err(|_| anyhow!("--user {spec}: bad name"))?;
    nix::unistd::setgid(gid).with_context(|| format!("--user {spec}: setgid({gid}) failed"))?;
    nix::unistd::initgroups(&cname, gid)
        .with_context(|| format!("--user {spec}: initgroups failed"))?;
    nix::unistd::setuid(u.uid).with_context(|| format!("--user {spec}: setuid failed"))?;
    Ok(())
}

/// The run directory OVS daemons use: `$OVS_RUNDIR` or `/var/run/openvswitch`.
pub fn rundir() -> PathBuf {
    std::env::var_os("OVS_RUNDIR")
        .map_or_else(|| PathBuf::from("/var/run/openvswitch"), PathBuf::from)
}

/// The log directory OVS daemons use: `$OVS_LOGDIR` or `/var/log/openvswitch`.
pub fn logdir() -> PathBuf {
    std::env::var_os("OVS_LOGDIR")
        .map_or_else(|| PathBuf::from("/var/log/openvswitch"), PathBuf::from)
}

/// `path` made absolute against the current directory (daemons chdir to / later).
pub fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}
