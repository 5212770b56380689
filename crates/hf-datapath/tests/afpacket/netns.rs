//! Network namespaces, veth pairs and kernel TCP for the AF_PACKET tests, until `hf-testkit`
//! lands: every namespace is the test's own (`hfap<pid><n>`), deleted by a guard on drop (also
//! when the test panics), and nothing is created in the host's namespace.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// True when the test may run (root). Otherwise prints one `SKIP:` line and returns false, or
/// panics under `CI=true`, where a skipped real-network test would hide a broken machine.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let msg = format!("SKIP: {test}: needs root (network namespaces, AF_PACKET sockets)");
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{msg}, and CI=true");
    }
    eprintln!("{msg}");
    false
}

/// Runs a command and panics with its output when it fails.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace of this test process, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Netns {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "hfap{}{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS...`.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend_from_slice(args);
        run("ip", &a)
    }

    /// `ip netns exec NS CMD ARGS...`.
    pub fn exec(&self, cmd: &str, args: &[&str]) -> String {
        let mut a = vec!["netns", "exec", self.name.as_str(), cmd];
        a.extend_from_slice(args);
        run("ip", &a)
    }

    /// Starts `CMD ARGS...` inside the namespace; the child is killed on drop of the guard.
    pub fn spawn(&self, cmd: &str, args: &[&str]) -> ChildGuard {
        let mut a = vec!["netns", "exec", self.name.as_str(), cmd];
        a.extend_from_slice(args);
        let child = Command::new("ip")
            .args(&a)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        ChildGuard(child)
    }

    /// Moves the calling thread into the namespace (for good: call it on a thread of its own).
    fn enter(&self) {
        enter_ns(&self.name);
    }

    /// Runs `f` on a thread inside the namespace and returns its result (a socket opened there
    /// stays in the namespace when it is handed back).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter();
                f()
            })
            .join()
            .expect("thread in the namespace panicked")
        })
    }

    /// Starts `f` on a thread inside the namespace.
    pub fn spawn_thread<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        let name = self.name.clone();
        std::thread::spawn(move || {
            enter_ns(&name);
            f()
        })
    }

    /// Creates veth `a` here and its peer `b` in `peer` (or here), both up.
    pub fn veth(&self, a: &str, b: &str, peer: Option<&Netns>) {
        match peer {
            Some(p) => {
                self.ip(&[
                    "link", "add", a, "type", "veth", "peer", "name", b, "netns", &p.name,
                ]);
                p.ip(&["link", "set", b, "up"]);
            }
            None => {
                self.ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
                self.ip(&["link", "set", b, "up"]);
            }
        }
        self.ip(&["link", "set", a, "up"]);
    }

    /// `ethtool -K DEV FEATURE on|off ...`.
    pub fn ethtool_k(&self, dev: &str, features: &[&str]) {
        let mut a = vec!["-K", dev];
        a.extend_from_slice(features);
        self.exec("ethtool", &a);
    }
}

/// Moves the calling thread into namespace `name` (for good).
fn enter_ns(name: &str) {
    let path = format!("/run/netns/{name}");
    let f = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    // SAFETY: setns(2) on a descriptor we hold open; it changes only this thread's namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}

/// A child process killed and reaped on drop.
#[derive(Debug)]
pub struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The byte at offset `i` of a test stream (not periodic in any small power of two).
pub fn pattern_byte(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i >> 20) as u8
}

/// Sends `bytes` of [`pattern_byte`] over kernel TCP from namespace `client` to `server_ip:port`
/// in `server`, and checks that every byte arrives, in order. `Err` (with what went wrong) when
/// it does not complete within `limit`.
pub fn tcp_transfer(
    client: &Netns,
    server: &Netns,
    server_ip: &str,
    bytes: u64,
    limit: Duration,
) -> Result<(), String> {
    let addr: SocketAddr = format!("{server_ip}:5001")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let deadline = Instant::now() + limit;
    let (tx, rx) = std::sync::mpsc::channel();
    let srv = server.spawn_thread(move || -> Result<u64, String> {
        let l = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let _ = tx.send(());
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err("no connection".into());
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        };
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0u64;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("server received {got} of {bytes} bytes in time"));
            }
            s.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
            let n = match s.read(&mut buf) {
                Ok(n) => n,
                Err(e) => return Err(format!("server read after {got} bytes: {e}")),
            };
            if n == 0 {
                break;
            }
            for (k, b) in buf[..n].iter().enumerate() {
                if *b != pattern_byte(got + k as u64) {
                    return Err(format!("byte {} differs", got + k as u64));
                }
            }
            got += n as u64;
        }
        if got != bytes {
            return Err(format!("server received {got} of {bytes} bytes"));
        }
        s.write_all(b"ok").map_err(|e| format!("server ack: {e}"))?;
        Ok(got)
    });
    let _ = rx.recv_timeout(Duration::from_secs(5));
    let cli = client.run(move || -> Result<(), String> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let mut chunk = vec![0u8; 1 << 16];
        let mut sent = 0u64;
        while sent < bytes {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("client sent {sent} of {bytes} bytes in time"));
            }
            s.set_write_timeout(Some(left)).map_err(|e| e.to_string())?;
            let n = (bytes - sent).min(chunk.len() as u64) as usize;
            for (k, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern_byte(sent + k as u64);
            }
            s.write_all(&chunk[..n])
                .map_err(|e| format!("client write after {sent} bytes: {e}"))?;
            sent += n as u64;
        }
        s.shutdown(Shutdown::Write).map_err(|e| e.to_string())?;
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| e.to_string())?;
        let mut ack = [0u8; 2];
        s.read_exact(&mut ack)
            .map_err(|e| format!("client waiting for the ack: {e}"))?;
        Ok(())
    });
    let srv = srv
        .join()
        .map_err(|_| "server thread panicked".to_string())?;
    cli?;
    srv.map(drop)
}
