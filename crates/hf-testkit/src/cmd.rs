//! Running commands to completion with a timeout, and the small waits every fixture needs.
//!
//! A command's output is drained on threads while it runs (a child writing more than a pipe
//! buffer never blocks), and one that outlives its timeout is killed with its process group.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::{KitError, Result};

/// How long [`run`] and the [`Netns`](crate::Netns) helpers give a command by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// A timeout that never comes (a benchmark's command that may run for many minutes).
pub const NO_TIMEOUT: Duration = Duration::MAX;

/// The command line of `cmd`, for messages: program and arguments, quoted where needed.
pub fn describe(cmd: &Command) -> String {
    let quote = |s: &std::ffi::OsStr| {
        let s = s.to_string_lossy();
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
        {
            s.into_owned()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(quote)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run `cmd` to completion (stdin: `input`, or nothing) within `timeout`, whatever its exit
/// status. Errors: it cannot start, or it outlived `timeout` (then it was killed).
pub fn output(cmd: &mut Command, input: Option<&[u8]>, timeout: Duration) -> Result<Output> {
    let desc = describe(cmd);
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // Its own process group, so a timeout kills what it started too.
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    let mut child = cmd.spawn().map_err(|source| KitError::Spawn {
        cmd: desc.clone(),
        source,
    })?;
    let stdin = child.stdin.take();
    let input = input.map(<[u8]>::to_vec);
    let feeder = std::thread::spawn(move || {
        if let (Some(mut pipe), Some(bytes)) = (stdin, input) {
            // A command that exits without reading all of it is not our failure.
            let _ = pipe.write_all(&bytes);
        }
    });
    let out_t = drain(child.stdout.take());
    let err_t = drain(child.stderr.take());
    let status = wait_or_kill(&mut child, timeout);
    let _ = feeder.join();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(KitError::Timeout {
            cmd: desc,
            after: timeout,
            stderr: lossy(&stderr),
            stdout: lossy(&stdout),
        }),
    }
}

/// Run `cmd` within `timeout` and require success; its stdout (lossy UTF-8).
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<String> {
    run_input(cmd, None, timeout)
}

/// [`run`] with `input` on its stdin.
pub fn run_input(cmd: &mut Command, input: Option<&[u8]>, timeout: Duration) -> Result<String> {
    let out = output(cmd, input, timeout)?;
    check(cmd, out).map(|o| lossy(&o.stdout))
}

/// `out` if its status is success, else the error naming `cmd`, its status and its output.
pub fn check(cmd: &Command, out: Output) -> Result<Output> {
    if out.status.success() {
        return Ok(out);
    }
    Err(KitError::Command {
        cmd: describe(cmd),
        status: status_text(out.status),
        stderr: lossy(&out.stderr).trim_end().to_string(),
        stdout: lossy(&out.stdout).trim_end().to_string(),
    })
}

/// `exit status 1`, `killed by signal 9`.
pub fn status_text(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => format!("{s}"),
    }
}

/// Bytes as text, invalid UTF-8 replaced.
pub fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Wait for `child` up to `timeout`; on timeout SIGKILL its process group (it was started as
/// a group leader) and reap it, and return `None`.
pub(crate) fn wait_or_kill(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let Some(deadline) = Instant::now().checked_add(timeout) else {
        return child.wait().ok();
    };
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Whether `tool` is on PATH, or, for a path with a `/`, exists.
pub fn have_tool(tool: &str) -> bool {
    if tool.contains('/') {
        return Path::new(tool).exists();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    // sbin directories too: the test may run as a user whose PATH lacks them (`ip`, `ethtool`).
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(Into::into))
        .any(|d| is_executable(&d.join(tool)))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A free loopback TCP port (bound and released: another process could take it before it is
/// used, which is unlikely on a test machine).
pub fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| KitError::io("binding 127.0.0.1:0 for a free port", e))
}

/// `f`'s answer once it has one, asking every 20 ms; after `timeout` an error saying what was
/// waited for (`what()` is asked then, so it can describe the last state seen).
pub fn poll<T>(
    timeout: Duration,
    what: impl FnOnce() -> String,
    mut f: impl FnMut() -> Option<T>,
) -> Result<T> {
    let end = deadline(timeout);
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() >= end {
            return Err(KitError::Wait {
                what: what(),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `now + timeout`, or far in the future for [`NO_TIMEOUT`].
pub(crate) fn deadline(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// [`poll`] for a condition.
pub fn wait_until(
    timeout: Duration,
    what: impl FnOnce() -> String,
    mut f: impl FnMut() -> bool,
) -> Result<()> {
    poll(timeout, what, || f().then_some(()))
}

/// The pid a daemon wrote to `pidfile`, if the file holds one.
pub fn read_pidfile(pidfile: &Path) -> Option<i32> {
    std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
