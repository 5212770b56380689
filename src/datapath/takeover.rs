//! The hitless datapath restart (`holdfast datapath --takeover`): a new process takes a
//! running one's place over its control socket, so that an upgrade or a restart resets no
//! connection.
//!
//! 1. The new process connects to the old one's control socket and says hello with protocol
//!    version 5; the answer carries the running program, the zone map and the ports, which
//!    the new process compiles while the old one still forwards.
//! 2. It asks [`ToDatapath::TakeOver`] (a version-10 datapath: [`ToDatapath::TakeOverSessions`],
//!    which hands over the BFD sessions too, so that no peer sees one go down): the old process
//!    exports its whole state (program, zone map, conntrack, activations) and stops forwarding, then its shell sends
//!    [`FromDatapath::HandOver`] with its sockets (the ports' AF_PACKET sockets, the Geneve
//!    socket, the control listener, the state-channel listener) as `SCM_RIGHTS`, and exits.
//!    Frames that arrive meanwhile wait in those sockets' queues: nothing is dropped.
//! 3. The new process imports the state and serves on the sockets it received.
//!
//! What it does not do: take over from a datapath older than protocol version 5 (the error
//! says so, and the old process keeps running), or carry frames a migration's destination
//! holds (they start again from the new process's program, as in the simulator's handoff).

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use hf_datapath::proto::{
    Decoder, FromDatapath, HandleMsg, LocalPort, ProgramMsg, SessionsExport, StateExport,
    ToDatapath, encode,
};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// How long the old process may take to answer each step.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// What the running datapath said in its hello.
pub struct Running {
    pub ports: Vec<LocalPort>,
    pub program: Option<ProgramMsg>,
}

/// The old process's protocol version (from its hello), kept for step 2.
struct OldVersion(u32);

/// A takeover in progress: the session with the old process.
pub struct Takeover {
    stream: UnixStream,
    dec: Decoder<FromDatapath>,
    /// Descriptors received so far, in order.
    fds: Vec<OwnedFd>,
    path: String,
    /// The old process's pid: first SO_PEERCRED, which names the process that called
    /// `listen()` (before `--detach` forked, it is a parent long gone), then the sender of
    /// the old process's messages (`SCM_CREDENTIALS`, the kernel's word), which is the one
    /// that holds the pidfile and must exit before this process can take it.
    pub old_pid: Option<i32>,
    old_version: OldVersion,
}

/// What the old process handed over.
pub struct Handed {
    pub state: StateExport,
    /// The BFD sessions (from a version-10 datapath).
    pub sessions: Option<SessionsExport>,
    pub sockets: Vec<(HandleMsg, OwnedFd)>,
}

impl Takeover {
    /// Connects to the datapath serving `control` and reads its hello (step 1).
    pub fn connect(control: &Path, chassis: &str) -> anyhow::Result<(Takeover, Running)> {
        let path = control.display().to_string();
        let stream = UnixStream::connect(control).with_context(|| {
            format!(
                "--takeover: no datapath to take over at the control socket {path} (start \
                 without --takeover)"
            )
        })?;
        stream.set_read_timeout(Some(STEP_TIMEOUT))?;
        // Every message from the old process then carries its sender's pid.
        nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::PassCred, &true)
            .with_context(|| format!("--takeover: SO_PASSCRED on {path}"))?;
        let old_pid =
            nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
                .ok()
                .map(|c| c.pid());
        let mut t = Takeover {
            stream,
            dec: Decoder::new(),
            fds: Vec::new(),
            path,
            old_pid,
            old_version: OldVersion(0),
        };
        // The takeover's version, not this build's: the running datapath may be older.
        t.send(&ToDatapath::Hello {
            version: hf_datapath::proto::TAKEOVER_VERSION,
            chassis: chassis.to_string(),
        })?;
        loop {
            match t.next()? {
                FromDatapath::Hello {
                    version,
                    chassis: theirs,
                    ports,
                    program,
                    ..
                } => {
                    if version < 5 {
                        anyhow::bail!(
                            "--takeover: the datapath at {} speaks control protocol version \
                             {version}; a takeover needs 5. It keeps running: stop it and \
                             start this one without --takeover (its connections will reset)",
                            t.path
                        );
                    }
                    t.old_version = OldVersion(version);
                    if theirs != chassis {
                        anyhow::bail!(
                            "--takeover: the datapath at {} is chassis \"{theirs}\", not \"{chassis}\"",
                            t.path
                        );
                    }
                    return Ok((
                        t,
                        Running {
                            ports,
                            program: program.map(|p| *p),
                        },
                    ));
                }
                FromDatapath::Error { message } => {
                    anyhow::bail!("--takeover: the datapath at {} refused: {message}", t.path)
                }
                // Events queued for a controller (ports, activations...): the export has them.
                _ => {}
            }
        }
    }

    /// Step 2: asks for the state and the sockets.
    pub fn finish(mut self) -> anyhow::Result<(Handed, Option<i32>)> {
        // The BFD sessions too, from a datapath that hands them over.
        let with_sessions = self.old_version.0 >= hf_datapath::proto::SESSIONS_TAKEOVER_VERSION;
        self.send(&if with_sessions {
            ToDatapath::TakeOverSessions
        } else {
            ToDatapath::TakeOver
        })?;
        let (mut state, mut sessions) = (None, None);
        loop {
            match self.next()? {
                FromDatapath::ExportedSessions(s) => sessions = Some(*s),
                FromDatapath::Exported(s) => state = Some(*s),
                FromDatapath::HandOver { handles } => {
                    let Some(state) = state else {
                        anyhow::bail!(
                            "--takeover: the datapath at {} handed its sockets over before its \
                             state",
                            self.path
                        );
                    };
                    if handles.len() != self.fds.len() {
                        anyhow::bail!(
                            "--takeover: the datapath at {} named {} sockets and passed {}",
                            self.path,
                            handles.len(),
                            self.fds.len()
                        );
                    }
                    let sockets = handles.into_iter().zip(self.fds.drain(..)).collect();
                    return Ok((
                        Handed {
                            state,
                            sessions,
                            sockets,
                        },
                        self.old_pid,
                    ));
                }
                FromDatapath::Error { message } => {
                    anyhow::bail!(
                        "--takeover: the datapath at {} refused: {message}",
                        self.path
                    )
                }
                _ => {}
            }
        }
    }

    fn send(&mut self, m: &ToDatapath) -> anyhow::Result<()> {
        let b = encode(m).map_err(|e| anyhow::anyhow!("--takeover: {e}"))?;
        self.stream
            .write_all(&b)
            .with_context(|| format!("--takeover: writing to {}", self.path))
    }

    /// The next message, reading with `recvmsg` so that passed descriptors are kept.
    fn next(&mut self) -> anyhow::Result<FromDatapath> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            if let Some(m) = self
                .dec
                .next_msg()
                .map_err(|e| anyhow::anyhow!("--takeover: from {}: {e}", self.path))?
            {
                return Ok(m);
            }
            if Instant::now() > deadline {
                anyhow::bail!("--takeover: {} did not answer in time", self.path);
            }
            let mut cmsg = nix::cmsg_space!([RawFd; 64], nix::libc::ucred);
            let mut iov = [IoSliceMut::new(&mut buf)];
            let fd = self.stream.as_raw_fd();
            let msg = recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)
                .with_context(|| format!("--takeover: reading from {}", self.path))?;
            let n = msg.bytes;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    match c {
                        ControlMessageOwned::ScmRights(fds) => {
                            // SAFETY: the kernel just installed these descriptors for this
                            // process; nothing else owns them.
                            self.fds.extend(
                                fds.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }),
                            );
                        }
                        ControlMessageOwned::ScmCredentials(c) if c.pid() > 0 => {
                            self.old_pid = Some(c.pid());
                        }
                        _ => {}
                    }
                }
            }
            if n == 0 {
                anyhow::bail!(
                    "--takeover: the datapath at {} closed the session",
                    self.path
                );
            }
            self.dec.push(&buf[..n]);
        }
    }
}

/// The old process's side of step 2: sends `handles` with their descriptors over the session
/// socket `fd` (blocking until written).
pub fn hand_over(fd: RawFd, handles: &[(HandleMsg, RawFd)]) -> anyhow::Result<()> {
    let msg = FromDatapath::HandOver {
        handles: handles.iter().map(|(h, _)| h.clone()).collect(),
    };
    let bytes = encode(&msg).map_err(|e| anyhow::anyhow!("hand-over: {e}"))?;
    let fds: Vec<RawFd> = handles.iter().map(|(_, f)| *f).collect();
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut sent = 0;
    while sent < bytes.len() {
        let iov = [IoSlice::new(&bytes[sent..])];
        // The descriptors go with the frame's first byte.
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let with: &[ControlMessage] = if sent == 0 { &cmsg } else { &[] };
        match sendmsg::<()>(fd, &iov, with, MsgFlags::empty(), None) {
            Ok(n) => sent += n,
            Err(nix::errno::Errno::EAGAIN) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => anyhow::bail!("hand-over: sending the sockets: {e}"),
        }
    }
    Ok(())
}

/// Waits for process `pid` to exit (the old datapath, after it handed over), so that its
/// pidfile and unixctl socket are free; gives up after `limit`.
pub fn wait_exit(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        // Gone, or a zombie its parent has not reaped yet.
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
        if zombie || nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}
