//! `holdfast datapath` as processes: two daemons on 127.0.0.1 and 127.0.0.2 exchanging Geneve
//! over UDP. A test client plays the controller on each control socket (hf_datapath::proto),
//! frames are injected into and captured from the in-memory ports with real `ovs-appctl`, and
//! forwarding goes on after the client is gone. Live migration's state channel between the two
//! daemons, over mutual TLS and plain TCP, is `state_channel`.

#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "datapath/acl_log_format.rs"]
mod acl_log_format;
#[path = "datapath/kernel_igmp.rs"]
mod kernel_igmp;
#[path = "datapath/mirror_format.rs"]
mod mirror_format;
#[path = "datapath/state_channel.rs"]
mod state_channel;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hf_datapath::example::{self, VM1_IP, VM1_MAC, VM2_IP, VM2_MAC};
use hf_datapath::proto::{Decoder, FromDatapath, PROTOCOL_VERSION, ToDatapath, encode};
use hf_wire::EthAddr;

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
];

struct Daemons {
    dir: tempfile::TempDir,
    pidfiles: Vec<PathBuf>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        common::kill_pidfiles(&self.pidfiles);
    }
}

/// A UDP port free on both loopback addresses (both daemons listen on it).
fn free_port() -> u16 {
    for _ in 0..50 {
        let a = std::net::UdpSocket::bind((IPS[0], 0)).unwrap();
        let p = a.local_addr().unwrap().port();
        if std::net::UdpSocket::bind((IPS[1], p)).is_ok() {
            return p;
        }
    }
    panic!("no UDP port free on both 127.0.0.1 and 127.0.0.2");
}

fn appctl(dir: &Path, name: &str, args: &[&str]) -> String {
    common::run_ok(
        Command::new("ovs-appctl")
            .arg("-t")
            .arg(dir.join(format!("{name}.ctl")))
            .args(args),
    )
}

fn start(d: &mut Daemons, hv: usize, port: u16) {
    let port_arg = if hv == 1 {
        "vm1,02:00:00:00:00:01"
    } else {
        "vm2,02:00:00:00:00:02"
    };
    let out = spawn(d, hv, port, &[port_arg], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `holdfast datapath` for chassis `hv` (`hvN` on `IPS[N - 1]`) with in-memory `ports`
/// and `extra` arguments, detached (its pidfile is recorded when it started).
fn spawn(
    d: &mut Daemons,
    hv: usize,
    port: u16,
    ports: &[&str],
    extra: &[String],
) -> std::process::Output {
    let name = format!("hv{hv}");
    let dir = d.dir.path();
    let out = Command::new(common::holdfast())
        .arg("datapath")
        .args(common::daemon_args(dir, &name))
        .arg(format!("--chassis={name}"))
        .arg(format!("--encap-ip={}", IPS[hv - 1]))
        .arg(format!("--geneve-port={port}"))
        .arg(format!(
            "--control=punix:{}",
            dir.join(format!("{name}.sock")).display()
        ))
        .args(ports.iter().map(|p| format!("--port={p}")))
        .arg(format!(
            "--zones-file={}",
            dir.join(format!("{name}.zones")).display()
        ))
        .args(extra)
        .output()
        .unwrap();
    if out.status.success() {
        d.pidfiles.push(dir.join(format!("{name}.pid")));
    }
    out
}

struct Client {
    s: UnixStream,
    dec: Decoder<FromDatapath>,
}

impl Client {
    fn connect(path: &Path) -> Client {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client {
            s,
            dec: Decoder::new(),
        }
    }

    fn send(&mut self, m: &ToDatapath) {
        self.s.write_all(&encode(m).unwrap()).unwrap();
    }

    fn recv(&mut self) -> FromDatapath {
        let mut buf = [0u8; 65536];
        loop {
            if let Some(m) = self.dec.next_msg().unwrap() {
                return m;
            }
            let n = self.s.read(&mut buf).unwrap();
            assert!(n > 0, "datapath closed the control connection");
            self.dec.push(&buf[..n]);
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Polls `datapath/capture PORT` until something came out (or 10 s passed).
fn capture(dir: &Path, name: &str, port: &str) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let out = appctl(dir, name, &["datapath/capture", port]);
        let lines: Vec<String> = out.lines().map(str::to_string).collect();
        if !lines.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ping(id: u16) -> Vec<u8> {
    let mut m = vec![8, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0, 1, b'h', b'f']);
    let mut f = Vec::new();
    hf_wire::reply::ip_packet(
        &mut f,
        EthAddr(VM1_MAC),
        EthAddr(VM2_MAC),
        VM1_IP.into(),
        VM2_IP.into(),
        hf_wire::ip_proto::ICMP,
        &m,
    )
    .unwrap();
    f
}

/// hv1 and hv2 started on one Geneve port, in a new directory.
fn two_daemons() -> (Daemons, u16) {
    let mut d = Daemons {
        dir: tempfile::tempdir().unwrap(),
        pidfiles: Vec::new(),
    };
    let port = free_port();
    start(&mut d, 1, port);
    start(&mut d, 2, port);
    (d, port)
}

#[test]
fn two_daemons_forward_through_geneve_and_outlive_the_controller() {
    if !common::require("datapath daemons", &["ovs-appctl"]) {
        return;
    }
    let (mut d, port) = two_daemons();
    let dir = d.dir.path().to_path_buf();
    let mut clients = Vec::new();
    for hv in 1..=2u32 {
        let mut c = Client::connect(&dir.join(format!("hv{hv}.sock")));
        c.send(&ToDatapath::Hello {
            version: PROTOCOL_VERSION,
            chassis: format!("hv{hv}"),
        });
        match c.recv() {
            FromDatapath::Hello { ports, program, .. } => {
                assert_eq!(ports.len(), 1);
                assert!(program.is_none());
            }
            other => panic!("hello answer: {other:?}"),
        }
        c.send(&ToDatapath::Program(Box::new(example::program(1, hv, IPS))));
        match c.recv() {
            FromDatapath::Installed {
                generation: 1,
                flow_errors,
            } => assert!(flow_errors.is_empty(), "{flow_errors:?}"),
            other => panic!("program answer: {other:?}"),
        }
        clients.push(c);
    }
    // ARP broadcast from vm1 reaches vm2 on the other daemon, byte for byte.
    let mut arp = Vec::new();
    hf_wire::reply::arp_request(&mut arp, EthAddr(VM1_MAC), VM1_IP, VM2_IP);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&arp)]);
    assert_eq!(capture(&dir, "hv2", "vm2"), vec![hex(&arp)]);
    let p = ping(1);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&p)]);
    assert_eq!(capture(&dir, "hv2", "vm2"), vec![hex(&p)]);
    let ct = appctl(&dir, "hv1", &["dpctl/dump-conntrack", "lsp/vm1"]);
    assert!(
        ct.contains("icmp,orig=(src=10.0.0.1,dst=10.0.0.2,id=1"),
        "{ct}"
    );
    // The zone map went to local storage.
    let zones: std::collections::BTreeMap<String, u16> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("hv1.zones")).unwrap()).unwrap();
    assert_eq!(zones, example::program(1, 1, IPS).zones);
    assert_eq!(
        appctl(&dir, "hv1", &["ct-zone-list"]),
        "lsp/vm1 1\nlsp/vm2 2\n"
    );
    // The controllers go away: forwarding continues.
    drop(clients);
    std::thread::sleep(Duration::from_millis(100));
    let p = ping(2);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&p)]);
    assert_eq!(capture(&dir, "hv2", "vm2"), vec![hex(&p)]);
    let cov = appctl(&dir, "hv2", &["coverage/show"]);
    assert!(cov.contains("rx_tunnel 3\n"), "{cov}");
    assert!(cov.contains("generation 1\n"), "{cov}");
    // A reconnecting controller gets the program back; flushing zone names it does not know
    // is refused.
    let mut c = Client::connect(&dir.join("hv1.sock"));
    c.send(&ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: "hv1".into(),
    });
    match c.recv() {
        FromDatapath::Hello { program, zones, .. } => {
            assert_eq!(program.map(|p| p.generation), Some(1));
            assert_eq!(zones, example::program(1, 1, IPS).zones);
        }
        other => panic!("hello answer: {other:?}"),
    }
    let out = Command::new("ovs-appctl")
        .arg("-t")
        .arg(dir.join("hv1.ctl"))
        .args(["dpctl/flush-conntrack", "lsp/nosuch"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("lsp/nosuch"));
    // A controller speaking another version is refused with a reason.
    let mut bad = Client::connect(&dir.join("hv2.sock"));
    bad.send(&ToDatapath::Hello {
        version: PROTOCOL_VERSION + 7,
        chassis: "hv2".into(),
    });
    match bad.recv() {
        FromDatapath::Error { message } => assert!(message.contains("version"), "{message}"),
        other => panic!("{other:?}"),
    }
    // hv2 still forwards.
    let p = ping(3);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&p)]);
    assert_eq!(capture(&dir, "hv2", "vm2"), vec![hex(&p)]);
    // hv1 restarts: its zone map comes back from local storage (the program does not).
    drop(c);
    appctl(&dir, "hv1", &["exit"]);
    let pidfile = dir.join("hv1.pid");
    let t0 = Instant::now();
    while pidfile.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pidfile.exists(), "hv1 did not exit");
    d.pidfiles.retain(|p| *p != pidfile);
    start(&mut d, 1, port);
    let mut c = Client::connect(&dir.join("hv1.sock"));
    c.send(&ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: "hv1".into(),
    });
    match c.recv() {
        FromDatapath::Hello { program, zones, .. } => {
            assert!(program.is_none());
            assert_eq!(zones, example::program(1, 1, IPS).zones);
        }
        other => panic!("hello answer: {other:?}"),
    }
}

fn pid_of(pidfile: &Path) -> i32 {
    hf_testkit::cmd::read_pidfile(pidfile).unwrap()
}

use hf_testkit::cmd::alive;

/// `holdfast datapath --takeover`: a new process takes hv1's place. It gets the program, the
/// zone map and the connections (the ICMP entry made before is still there, not made again),
/// serves on the old process's Geneve socket (same port: hv2 keeps sending to it) and control
/// socket (a controller reconnects at the same path and finds the program), and the old
/// process exits. A datapath that refuses (none runs there) leaves nothing behind.
#[test]
fn a_takeover_carries_the_state_and_the_sockets_to_a_new_process() {
    if !common::require("datapath takeover", &["ovs-appctl"]) {
        return;
    }
    let (mut d, port) = two_daemons();
    let dir = d.dir.path().to_path_buf();
    for hv in 1..=2u32 {
        let mut c = Client::connect(&dir.join(format!("hv{hv}.sock")));
        c.send(&ToDatapath::Hello {
            version: PROTOCOL_VERSION,
            chassis: format!("hv{hv}"),
        });
        assert!(matches!(c.recv(), FromDatapath::Hello { .. }));
        c.send(&ToDatapath::Program(Box::new(example::program(1, hv, IPS))));
        assert!(matches!(c.recv(), FromDatapath::Installed { .. }));
    }
    let p = ping(1);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&p)]);
    assert_eq!(capture(&dir, "hv2", "vm2"), vec![hex(&p)]);
    let ct_before = appctl(&dir, "hv1", &["dpctl/dump-conntrack"]);
    assert!(
        ct_before.contains("icmp,orig=(src=10.0.0.1,dst=10.0.0.2,id=1"),
        "{ct_before}"
    );
    let old = pid_of(&dir.join("hv1.pid"));
    // Wrong chassis: refused, and the running datapath goes on.
    let out = Command::new(common::holdfast())
        .arg("datapath")
        .args(common::daemon_args(&dir, "hv1new"))
        .args(["--chassis=hv9", "--encap-ip=127.0.0.1", "--takeover"])
        .arg(format!(
            "--control=punix:{}",
            dir.join("hv1.sock").display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("refused") && err.contains("\"hv9\""),
        "{err}"
    );
    assert!(alive(old));
    // The takeover.
    let out = spawn(
        &mut d,
        1,
        port,
        &["vm1,02:00:00:00:00:01"],
        &["--takeover".into()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new = pid_of(&dir.join("hv1.pid"));
    assert_ne!(new, old);
    let t0 = Instant::now();
    while alive(old) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(old), "the old datapath still runs");
    let log = std::fs::read_to_string(dir.join("hv1.log")).unwrap();
    assert!(log.contains("took over from the datapath"), "{log}");
    // The old process is the one that held the pidfile (not the parent `--detach` left).
    assert!(log.contains(&format!("(pid {old})")), "{log}");
    // The connection came along: the same entry, and the reply finds it.
    assert_eq!(appctl(&dir, "hv1", &["dpctl/dump-conntrack"]), ct_before);
    let cov = appctl(&dir, "hv1", &["coverage/show"]);
    assert!(cov.contains("generation 1\n"), "{cov}");
    // hv2 → hv1 over the same Geneve port, and hv1 → hv2.
    let mut reply = Vec::new();
    let mut m = vec![0, 0, 0, 0];
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(&[0, 1, b'h', b'f']);
    hf_wire::reply::ip_packet(
        &mut reply,
        EthAddr(VM2_MAC),
        EthAddr(VM1_MAC),
        VM2_IP.into(),
        VM1_IP.into(),
        hf_wire::ip_proto::ICMP,
        &m,
    )
    .unwrap();
    appctl(&dir, "hv2", &["datapath/inject", "vm2", &hex(&reply)]);
    assert_eq!(capture(&dir, "hv1", "vm1"), vec![hex(&reply)]);
    let p = ping(2);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&p)]);
    assert_eq!(capture(&dir, "hv2", "vm2"), vec![hex(&p)]);
    // A controller reconnects at the same control socket and finds the program.
    let mut c = Client::connect(&dir.join("hv1.sock"));
    c.send(&ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: "hv1".into(),
    });
    match c.recv() {
        FromDatapath::Hello { program, .. } => {
            assert_eq!(program.map(|p| p.generation), Some(1));
        }
        other => panic!("hello answer: {other:?}"),
    }
}
