//! [`Proc`]: a process a test started inside a namespace, stopped when it drops.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::cmd::{self, describe};
use crate::lab::Shared;
use crate::{KitError, Result};

/// How much of each log a failing test prints.
const LOG_TAIL: usize = 4000;

/// A process group the lab stops if its [`Proc`] has not.
#[derive(Debug)]
pub(crate) struct ProcEntry {
    pub(crate) id: u64,
    pub(crate) pgid: i32,
}

/// A process started by [`Netns::spawn`](crate::Netns::spawn): the leader of its own process
/// group, its stdout and stderr in files of the lab's directory. Dropping it stops the group
/// (SIGTERM, then SIGKILL after 2 s); when the test is failing its output is printed first.
#[derive(Debug)]
pub struct Proc {
    name: String,
    cmd: String,
    child: Child,
    pid: i32,
    id: u64,
    /// Set once reaped: the lab no longer knows the group.
    status: Option<ExitStatus>,
    out: PathBuf,
    err: PathBuf,
    lab: Arc<Shared>,
}

impl Proc {
    pub(crate) fn spawn(lab: &Arc<Shared>, name: &str, mut c: Command) -> Result<Proc> {
        let desc = describe(&c);
        let out = lab.unique_file(name, "out");
        let err = out.with_extension("err");
        let file = |p: &Path| {
            File::create(p).map_err(|e| KitError::io(format!("creating {}", p.display()), e))
        };
        c.stdout(Stdio::from(file(&out)?))
            .stderr(Stdio::from(file(&err)?));
        // `ip netns exec` replaces itself with the program: the pid stays the program's.
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let child = c.spawn().map_err(|source| KitError::Spawn {
            cmd: desc.clone(),
            source,
        })?;
        let pid = i32::try_from(child.id())
            .map_err(|_| KitError::Invalid(format!("pid {} of `{desc}`", child.id())))?;
        let id = lab.add_proc(pid, name, &out, &err);
        Ok(Proc {
            name: name.to_string(),
            cmd: desc,
            child,
            pid,
            id,
            status: None,
            out,
            err,
            lab: lab.clone(),
        })
    }

    /// Its name in the lab (its log files are `<name>.out`/`.err`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid (also its process group).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether it still runs (it is reaped if it has exited).
    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Its exit status if it has exited (reaping it).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Ok(Some(s)) = self.child.try_wait()
        {
            self.reaped(s);
        }
        self.status
    }

    fn reaped(&mut self, s: ExitStatus) {
        self.status = Some(s);
        self.lab.forget_proc(self.id);
        // The rest of its group, if it left any behind, goes too.
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
    }

    /// Wait up to `timeout` for it to exit by itself; an error (with its output) if it did not
    /// (it keeps running).
    pub fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let end = cmd::deadline(timeout);
        loop {
            if let Some(s) = self.try_status() {
                return Ok(s);
            }
            if Instant::now() >= end {
                return Err(KitError::Timeout {
                    cmd: self.cmd.clone(),
                    after: timeout,
                    stderr: self.stderr(),
                    stdout: self.stdout(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// [`Proc::wait`] and require success.
    pub fn wait_ok(&mut self, timeout: Duration) -> Result<()> {
        let s = self.wait(timeout)?;
        if s.success() {
            return Ok(());
        }
        Err(KitError::Command {
            cmd: self.cmd.clone(),
            status: cmd::status_text(s),
            stderr: self.stderr(),
            stdout: self.stdout(),
        })
    }

    /// Send `sig` to its process group (while it runs).
    pub fn signal(&mut self, sig: Signal) -> Result<()> {
        if self.try_status().is_some() {
            return Err(KitError::Invalid(format!(
                "{} has exited: nothing to signal",
                self.name
            )));
        }
        killpg(Pid::from_raw(self.pid), sig).map_err(|e| {
            KitError::io(
                format!("signalling {} (pid {})", self.name, self.pid),
                e.into(),
            )
        })
    }

    /// SIGKILL its process group and reap it: a crash, with no chance to clean up.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if self.try_status().is_none() {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
            if let Ok(s) = self.child.wait() {
                self.reaped(s);
            }
        }
        self.status
    }

    /// SIGTERM its process group, wait up to 2 s, then SIGKILL; its exit status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if self.try_status().is_none() {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGTERM);
            let _ = self.wait(Duration::from_secs(2));
        }
        self.kill()
    }

    /// What it printed on stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// The file its stdout goes to.
    pub fn stdout_path(&self) -> &Path {
        &self.out
    }

    /// The tail of its stdout and stderr, headed by its name and command (for messages).
    pub fn log(&self) -> String {
        format!(
            "{}    command: {}\n",
            log_tail(&self.name, &self.out, &self.err),
            self.cmd
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprint!("{}", self.log());
        }
        self.lab.forget_log(&self.out);
        self.stop();
    }
}

/// The last [`LOG_TAIL`] bytes of a process's stdout and stderr files.
pub(crate) fn log_tail(name: &str, out: &Path, err: &Path) -> String {
    let tail = |p: &Path| {
        let s = std::fs::read(p).unwrap_or_default();
        let cut = s.len().saturating_sub(LOG_TAIL);
        String::from_utf8_lossy(&s[cut..]).into_owned()
    };
    format!(
        "---- hf-testkit: process {name}\n---- stdout ({}):\n{}\n---- stderr:\n{}\n",
        out.display(),
        tail(out),
        tail(err)
    )
}
