//! Helpers shared by the integration binaries: holdfast's binary, schemas and `holdfast db`
//! process, a raw JSON-RPC client, and hf-testkit's runners under the names the tests use
//! (real OVN's daemons are hf-testkit's `ovn` fixtures).
#![allow(dead_code, unused_imports)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use hf_testkit::ovn::{OvsdbServer, daemon_args};
pub use hf_testkit::require_tools as require;

/// The `holdfast` binary under test.
pub fn holdfast() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_holdfast"))
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// holdfast's NB schema.
pub fn nb_schema() -> PathBuf {
    repo().join("schemas/ovn-nb.ovsschema")
}

/// holdfast's SB schema.
pub fn sb_schema() -> PathBuf {
    repo().join("schemas/ovn-sb.ovsschema")
}

/// A free loopback TCP port (bound and released: another process could take it, which is
/// unlikely on a test machine).
pub fn free_port() -> u16 {
    hf_testkit::cmd::free_port().expect("a free port")
}

/// Run a command to completion with a timeout; panics with its output if it cannot run.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    run_for(cmd, timeout).unwrap_or_else(|why| panic!("{why}"))
}

/// [`run`] that does not panic when the command outlives `timeout` (or cannot start): it is
/// killed, and the error names it with what it printed.
pub fn run_for(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    hf_testkit::cmd::output(cmd, None, timeout).map_err(|e| e.to_string())
}

/// Run and require success (within 60 s); returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    hf_testkit::cmd::run(cmd, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"))
}

/// A `holdfast db` process; killed on drop.
pub struct HoldfastDb {
    child: Option<Child>,
    /// `tcp:127.0.0.1:PORT`.
    pub tcp: String,
    /// `unix:PATH`.
    pub unix: String,
    /// The database files.
    pub files: Vec<PathBuf>,
    extra: Vec<String>,
    dir: PathBuf,
}

impl HoldfastDb {
    /// Create (if missing) one database file per `(file name, schema)` in `dir` and serve them.
    pub fn start(dir: &Path, dbs: &[(&str, &Path)], extra: &[&str]) -> Self {
        let mut files = Vec::new();
        for (name, schema) in dbs {
            let f = dir.join(name);
            if !f.exists() {
                run_ok(
                    Command::new(holdfast())
                        .arg("db")
                        .arg("create")
                        .arg(&f)
                        .arg(schema),
                );
            }
            files.push(f);
        }
        let mut s = HoldfastDb {
            child: None,
            tcp: String::new(),
            unix: String::new(),
            files,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            dir: dir.to_path_buf(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let sock = self.dir.join("db.sock");
        let mut child = Command::new(holdfast())
            .arg("db")
            .arg("--remote")
            .arg("ptcp:0:127.0.0.1")
            .arg("--remote")
            .arg(format!("punix:{}", sock.display()))
            .args(&self.extra)
            .args(&self.files)
            .env("HOLDFAST_LOG", "warn")
            // The default unixctl socket goes to $OVS_RUNDIR: keep it in the test's directory.
            .env("OVS_RUNDIR", &self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn holdfast db");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut addrs = Vec::new();
        while addrs.len() < 2 {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(a) = l.strip_prefix("listening on ") {
                        addrs.push(a.to_string());
                    }
                }
                _ => {
                    let st = child.wait();
                    panic!("holdfast db exited before listening: {st:?}");
                }
            }
        }
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.tcp = addrs[0].clone();
        self.unix = addrs[1].clone();
        self.child = Some(child);
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// SIGKILL the server (no clean shutdown).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same files (new ports).
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// The TCP address as `IP:PORT`.
    pub fn tcp_addr(&self) -> String {
        self.tcp.trim_start_matches("tcp:").to_string()
    }
}

impl Drop for HoldfastDb {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Replace every UUID in `s` using `names` (unknown ones become `<uuid>`).
pub fn map_uuids(s: &str, names: &std::collections::HashMap<String, String>) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if i + 36 <= b.len() && is_uuid(&b[i..i + 36]) {
            let u = &s[i..i + 36];
            out.push_str(names.get(u).map_or("<uuid>", String::as_str));
            i += 36;
        } else {
            let ch = s[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_uuid(b: &[u8]) -> bool {
    b.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == b'-',
        _ => c.is_ascii_hexdigit(),
    })
}

/// A minimal synchronous JSON-RPC client for poking the server with exact bytes.
pub struct Rpc {
    pub stream: std::net::TcpStream,
    framer: hf_ovsdb_net::framing::Framer,
    next_id: u64,
    /// Notifications received while waiting for replies.
    pub notifications: Vec<serde_json::Value>,
}

impl Rpc {
    /// Connect to `IP:PORT`.
    pub fn connect(addr: &str) -> Self {
        let stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Rpc {
            stream,
            framer: hf_ovsdb_net::framing::Framer::new(1 << 30),
            next_id: 1,
            notifications: Vec::new(),
        }
    }

    /// Send raw bytes.
    pub fn send_raw(&mut self, b: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self.stream, b)
    }

    /// Next message, or None on EOF/error.
    pub fn recv(&mut self) -> Option<serde_json::Value> {
        let mut buf = [0u8; 65536];
        loop {
            if let Some(m) = self.framer.next_message() {
                return m.ok();
            }
            match std::io::Read::read(&mut self.stream, &mut buf) {
                Ok(0) => return None,
                Ok(n) => self.framer.push(&buf[..n]),
                // Reads on a socket with a timeout are not restarted after a signal or a
                // stop/continue of the process (signal(7)); EINTR is not the end.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Call and wait for the matching reply (the whole reply object).
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> Option<serde_json::Value> {
        self.call_or_why(method, params).ok()
    }

    /// [`Rpc::call`] that says why no reply came: the server closed the connection, the
    /// read timed out, or a read or framing error. While waiting it answers the server's
    /// `echo` requests (inactivity probes), as every OVSDB client must: a client that does
    /// not is dropped whenever the server goes a probe interval without reading from it.
    pub fn call_or_why(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = serde_json::json!({"method": method, "params": params, "id": id});
        self.send_raw(msg.to_string().as_bytes())
            .map_err(|e| format!("send failed: {e}"))?;
        let mut buf = [0u8; 65536];
        loop {
            let m = match self.framer.next_message() {
                Some(Ok(m)) => m,
                Some(Err(e)) => return Err(format!("bad message from the server: {e}")),
                None => match std::io::Read::read(&mut self.stream, &mut buf) {
                    Ok(0) => return Err("the server closed the connection".into()),
                    Ok(n) => {
                        self.framer.push(&buf[..n]);
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut =>
                    {
                        return Err(format!(
                            "no reply within the read timeout ({:?})",
                            self.stream.read_timeout().ok().flatten()
                        ));
                    }
                    Err(e) => return Err(format!("read error: {e}")),
                },
            };
            if m["id"] == id {
                return Ok(m);
            }
            if m["method"] == "echo" && !m["id"].is_null() {
                let reply =
                    serde_json::json!({"id": m["id"], "result": m["params"], "error": null});
                self.send_raw(reply.to_string().as_bytes())
                    .map_err(|e| format!("send failed: {e}"))?;
                continue;
            }
            self.notifications.push(m);
        }
    }

    /// Whether the server closed the connection (reads until EOF, discarding data).
    pub fn closed_within(&mut self, t: Duration) -> bool {
        let deadline = Instant::now() + t;
        let mut buf = [0u8; 65536];
        while Instant::now() < deadline {
            match std::io::Read::read(&mut self.stream, &mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut
                        || e.kind() == std::io::ErrorKind::Interrupted =>
                {
                    continue;
                }
                Err(_) => return true,
            }
        }
        false
    }
}

/// Resident memory of a process, in bytes (0 when it cannot be read).
pub fn rss_bytes(pid: u32) -> u64 {
    i32::try_from(pid)
        .ok()
        .and_then(|p| hf_testkit::ovn::vm_bytes(p, "VmRSS").ok())
        .unwrap_or(0)
}

/// Stops the daemons whose pidfiles are listed, last started first (for `Drop` impls: also
/// when a test fails).
pub fn kill_pidfiles(pidfiles: &[PathBuf]) {
    hf_testkit::ovn::stop_pidfiles(pidfiles);
}

/// `THP_enabled` of process `pid` (`/proc/PID/status`): "1" when transparent huge pages are
/// allowed, "0" when the process turned them off (`PR_SET_THP_DISABLE`).
pub fn thp_enabled(pid: u32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
    s.lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no THP_enabled line in /proc/{pid}/status:\n{s}"))
}

/// A pcap file (Ethernet link type) holding `frames` in order, with zero timestamps.
#[allow(dead_code)]
pub fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut b: Vec<u8> = Vec::new();
    b.extend(0xa1b2_c3d4u32.to_le_bytes());
    b.extend(2u16.to_le_bytes());
    b.extend(4u16.to_le_bytes());
    b.extend([0u8; 8]);
    b.extend(65535u32.to_le_bytes());
    b.extend(1u32.to_le_bytes());
    for p in frames {
        b.extend([0u8; 8]);
        b.extend((p.len() as u32).to_le_bytes());
        b.extend((p.len() as u32).to_le_bytes());
        b.extend(p);
    }
    b
}
