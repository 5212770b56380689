//! The harness on the real kernel: namespaces joined by a veth pair carry ping, an nc exchange
//! and iperf3; a lab leaves nothing behind when it drops, when its test panics, when its
//! process is interrupted, or (through `sweep_stale`) when its process was killed outright;
//! labs in parallel do not collide; a test that is not root prints its skip line, or fails
//! under `CI=true`.
//!
//! The tests of cleanup run a child test process (this binary, an `#[ignore]`d test selected by
//! `HF_TESTKIT_CHILD`) that prints what it created, then panics or waits for a signal.

// A test driver of real processes: it runs labs on threads.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use hf_testkit::cmd::alive;
use hf_testkit::{
    Iperf3Opts, KitError, Lab, Netns, Result, VethOpts, VmIface, nc_exchange, require_root,
    require_tools,
};

const TOOLS: &[&str] = &["ip", "iperf3", "nc", "ss", "ethtool", "busybox"];

fn ready(test: &str) -> bool {
    require_root(test, "network namespaces") && require_tools(test, TOOLS)
}

/// Namespaces `a` and `b` joined by `eth0`–`eth0`, 192.0.2.1 and .2.
fn pair(lab: &Lab) -> Result<(Netns, Netns)> {
    let (a, b) = (lab.netns("a")?, lab.netns("b")?);
    lab.veth((&a, "eth0"), (&b, "eth0"))?;
    a.addr_add("eth0", "192.0.2.1/24")?;
    b.addr_add("eth0", "192.0.2.2/24")?;
    Ok((a, b))
}

/// The namespaces `ip netns` lists whose name starts with `prefix`.
fn namespaces_with(prefix: &str) -> BTreeSet<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn ping_nc_and_iperf3_cross_a_veth_pair() -> Result<()> {
    if !ready("ping_nc_and_iperf3_cross_a_veth_pair") {
        return Ok(());
    }
    let lab = Lab::new()?;
    let (a, b) = pair(&lab)?;
    let p = a.ping("192.0.2.2", 3)?;
    assert_eq!((p.transmitted, p.received), (3, 3), "{p:?}");
    assert!(p.rtt_avg.is_some(), "{p:?}");
    // Nobody has .99: every request is lost, and the stats say so.
    let lost = a.ping("192.0.2.99", 2)?;
    assert_eq!(lost.received, 0, "{lost:?}");
    assert_eq!(lost.loss_percent(), 100.0);

    let x = nc_exchange(&b, &a, "192.0.2.2", 7000, b"hello from a\n", b"hi from b\n")?;
    assert_eq!(x.server_got, b"hello from a\n");
    assert_eq!(x.client_got, b"hi from b\n");
    // Nothing listens on the other side: the exchange fails and says so.
    let refused = Command::new("ip")
        .args([
            "netns",
            "exec",
            b.name(),
            "nc",
            "-z",
            "-w",
            "2",
            "192.0.2.1",
        ])
        .arg("7001")
        .status()
        .expect("nc -z");
    assert!(!refused.success(), "nc -z to a closed port succeeded");

    let _server = b.iperf3_server("192.0.2.2", 5201)?;
    let r = a.iperf3(&Iperf3Opts::new("192.0.2.2", 5201))?;
    assert!(r.error.is_none(), "{r}");
    assert!(r.received_bytes > 1_000_000, "{r}");
    assert!(r.bits_per_second > 1e6, "{r}");
    assert!(r.seconds > 0.5, "{r}");
    assert!(!r.intervals.is_empty(), "{r}");
    // Reverse: the server sends.
    let r = a.iperf3(&Iperf3Opts::new("192.0.2.2", 5201).reverse())?;
    assert!(r.received_bytes > 1_000_000, "{r}");
    Ok(())
}

#[test]
fn an_iperf3_cut_short_is_an_error() -> Result<()> {
    if !ready("an_iperf3_cut_short_is_an_error") {
        return Ok(());
    }
    let lab = Lab::new()?;
    let (a, b) = pair(&lab)?;
    let mut server = b.iperf3_server("192.0.2.2", 5201)?;
    let client = a.iperf3_spawn(
        &Iperf3Opts::new("192.0.2.2", 5201)
            .duration(Duration::from_secs(5))
            .interval(Duration::from_millis(200)),
    )?;
    std::thread::sleep(Duration::from_millis(1500));
    // The server dies mid-transfer: the client's connections are reset.
    server.proc.kill();
    match client.finish() {
        Err(KitError::Iperf3 { error, report }) => {
            assert!(!error.is_empty());
            assert!(
                report.error.is_some() || report.received_bytes == 0,
                "{report}"
            );
        }
        Err(e) => panic!("a failure other than iperf3's own report: {e}"),
        Ok(r) => panic!("iperf3 whose server died reported success: {r}"),
    }
    Ok(())
}

#[test]
fn links_take_their_options() -> Result<()> {
    if !ready("links_take_their_options") {
        return Ok(());
    }
    let lab = Lab::new()?;
    let (c, d) = (lab.netns("c")?, lab.netns("d")?);
    let v = lab.veth_with(
        (&c, "fifteen-bytes-x"),
        (&d, "p1"),
        &VethOpts {
            mac_a: Some("02:00:00:00:00:0a".into()),
            mac_b: Some("02:00:00:00:00:0b".into()),
            mtu: Some(1400),
            offloads: Some(false),
            up: true,
        },
    )?;
    assert_eq!(c.mac("fifteen-bytes-x")?, "02:00:00:00:00:0a");
    assert_eq!(d.mac("p1")?, "02:00:00:00:00:0b");
    assert!(
        c.ip(&["link", "show", "fifteen-bytes-x"])?
            .contains("mtu 1400")
    );
    let features = d.run(&["ethtool", "-k", "p1"])?;
    assert!(
        features.contains("tcp-segmentation-offload: off"),
        "{features}"
    );
    d.offloads("p1", true)?;
    let features = d.run(&["ethtool", "-k", "p1"])?;
    assert!(
        features.contains("tcp-segmentation-offload: on"),
        "{features}"
    );
    d.set_mac("p1", "02:00:00:00:00:0c")?;
    assert_eq!(d.mac("p1")?, "02:00:00:00:00:0c");
    // Sixteen bytes is one too many for Linux: refused before `ip` sees it.
    let long = lab.veth((&c, "sixteen-bytes-xx"), (&d, "p2"));
    assert!(matches!(long, Err(KitError::Invalid(_))), "{long:?}");
    c.sysctl("net.ipv4.ip_forward", "1")?;
    assert_eq!(
        c.run(&["cat", "/proc/sys/net/ipv4/ip_forward"])?.trim(),
        "1"
    );
    v.remove()?;
    assert!(!c.has_link("fifteen-bytes-x") && !d.has_link("p1"));
    // A failing command names itself, its status and its stderr.
    let e = c.run(&["ip", "link", "set", "dev", "nonexistent", "up"]);
    let msg = format!("{}", e.expect_err("no such device"));
    assert!(
        msg.contains("nonexistent") && msg.contains("exit status"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn a_vm_behind_a_router_namespace() -> Result<()> {
    if !ready("a_vm_behind_a_router_namespace") {
        return Ok(());
    }
    let lab = Lab::new()?;
    let router = lab.netns("router")?;
    router.sysctl("net.ipv4.ip_forward", "1")?;
    let vm1 = lab.vm(
        "vm1",
        &router,
        "tap-vm1",
        &VmIface {
            mac: Some("02:00:00:00:01:01".into()),
            addrs: vec!["10.0.1.11/24".into()],
            gateway: Some("10.0.1.1".into()),
            ..VmIface::default()
        },
    )?;
    let ext = lab.vm(
        "ext",
        &router,
        "tap-ext",
        &VmIface {
            addrs: vec!["198.51.100.10/24".into()],
            gateway: Some("198.51.100.1".into()),
            ..VmIface::default()
        },
    )?;
    router.addr_add("tap-vm1", "10.0.1.1/24")?;
    router.addr_add("tap-ext", "198.51.100.1/24")?;
    assert_eq!(vm1.mac("eth0")?, "02:00:00:00:01:01");
    assert_eq!(vm1.ping("198.51.100.10", 2)?.received, 2);
    let x = nc_exchange(&ext, &vm1, "198.51.100.10", 8080, b"GET\n", b"200\n")?;
    assert_eq!(x.client_got, b"200\n");
    // A second attachment of the same VM (a migration's new pair), then the old one removed.
    let old = lab.netns("old-chassis")?;
    let first = lab.attach(
        &vm1,
        &old,
        "tap-old",
        &VmIface {
            ifname: "eth1".into(),
            ..VmIface::default()
        },
    )?;
    assert!(vm1.has_link("eth1"));
    first.remove()?;
    assert!(!vm1.has_link("eth1") && !old.has_link("tap-old"));
    vm1.garp("eth0", "10.0.1.11")?;
    Ok(())
}

#[test]
fn kernel_conntrack_of_a_namespace() -> Result<()> {
    if !ready("kernel_conntrack_of_a_namespace")
        || !require_tools("kernel_conntrack_of_a_namespace", &["conntrack", "nft"])
    {
        return Ok(());
    }
    let lab = Lab::new()?;
    let (a, b) = pair(&lab)?;
    // Untracked until something in the namespace uses conntrack.
    nc_exchange(&b, &a, "192.0.2.2", 7100, b"x", b"y")?;
    assert!(b.conntrack()?.is_empty());
    b.track_connections()?;
    nc_exchange(&b, &a, "192.0.2.2", 7101, b"x", b"y")?;
    let entries = b.conntrack()?;
    let e = entries
        .iter()
        .find(|e| e.proto == "tcp" && e.has_port(7101))
        .unwrap_or_else(|| panic!("no entry for port 7101 in {entries:?}"));
    assert_eq!(e.zone, 0);
    assert_eq!(e.orig.dst.to_string(), "192.0.2.2");
    // Only `b` tracks: `a`'s table is its own.
    assert!(a.conntrack()?.is_empty());
    // Reading the host's table works and changes nothing.
    hf_testkit::conntrack::host()?;
    Ok(())
}

#[test]
fn dhcp_configures_only_its_namespace() -> Result<()> {
    if !ready("dhcp_configures_only_its_namespace") {
        return Ok(());
    }
    let lab = Lab::new()?;
    let (srv, vm) = (lab.netns("dhcpd")?, lab.netns("vm")?);
    lab.veth((&srv, "eth0"), (&vm, "eth0"))?;
    srv.addr_add("eth0", "192.0.2.1/24")?;
    let conf = lab.dir().join("udhcpd.conf");
    std::fs::write(
        &conf,
        format!(
            "start 192.0.2.100\nend 192.0.2.110\ninterface eth0\n\
             lease_file {dir}/udhcpd.leases\npidfile {dir}/udhcpd.pid\n\
             option subnet 255.255.255.0\noption router 192.0.2.1\n\
             option dns 192.0.2.53\noption lease 600\n",
            dir = lab.dir().display()
        ),
    )
    .expect("udhcpd.conf");
    std::fs::write(lab.dir().join("udhcpd.leases"), b"").expect("leases");
    let conf = conf.to_str().expect("utf-8 path").to_string();
    let _udhcpd = srv.spawn("udhcpd", &["busybox", "udhcpd", "-f", &conf])?;
    let resolv = std::fs::read("/etc/resolv.conf").ok();
    let lease = vm.dhcp("eth0", Duration::from_secs(10))?;
    assert!(lease.ip.starts_with("192.0.2.1"), "{lease:?}");
    assert_eq!(lease.prefix, 24);
    assert_eq!(lease.routers, ["192.0.2.1"]);
    assert_eq!(lease.dns, ["192.0.2.53"]);
    assert_eq!(lease.lease_secs, Some(600));
    let addrs = vm.ip(&["-4", "addr", "show", "dev", "eth0"])?;
    assert!(addrs.contains(&format!("{}/24", lease.ip)), "{addrs}");
    let routes = vm.ip(&["route", "show", "default"])?;
    assert!(routes.contains("via 192.0.2.1"), "{routes}");
    assert_eq!(vm.ping("192.0.2.1", 1)?.received, 1);
    // Nothing outside the namespace changed.
    assert_eq!(std::fs::read("/etc/resolv.conf").ok(), resolv);
    // No server: no lease, and the error says so.
    let lonely = lab.netns("lonely")?;
    let peer = lab.netns("peer")?;
    lab.veth((&lonely, "eth0"), (&peer, "eth0"))?;
    assert!(lonely.dhcp("eth0", Duration::from_secs(2)).is_err());
    Ok(())
}

#[test]
fn labs_in_parallel_do_not_collide() {
    if !ready("labs_in_parallel_do_not_collide") {
        return;
    }
    // The same names, interfaces, addresses and ports in every lab, at the same time.
    let run = |i: usize| -> Result<String> {
        let lab = Lab::new()?;
        let (a, b) = pair(&lab)?;
        for round in 0..3 {
            let msg = format!("lab {i} round {round}\n");
            let x = nc_exchange(&b, &a, "192.0.2.2", 7200, msg.as_bytes(), b"ok\n")?;
            assert_eq!(x.server_got, msg.as_bytes());
            assert_eq!(a.ping("192.0.2.2", 1)?.received, 1);
        }
        Ok(lab.tag().to_string())
    };
    let threads: Vec<_> = (0..3).map(|i| std::thread::spawn(move || run(i))).collect();
    let tags: BTreeSet<String> = threads
        .into_iter()
        .map(|t| t.join().expect("lab thread").expect("lab"))
        .collect();
    assert_eq!(tags.len(), 3, "{tags:?}");
    for t in &tags {
        assert!(namespaces_with(&format!("{t}-")).is_empty(), "{t} left");
    }
}

#[test]
fn a_dropped_lab_leaves_nothing() -> Result<()> {
    if !ready("a_dropped_lab_leaves_nothing") {
        return Ok(());
    }
    let lab = Lab::new()?;
    let (a, _b) = pair(&lab)?;
    let mut sleeper = a.spawn("sleeper", &["sleep", "1000"])?;
    // A daemon that left its parent: only the namespace knows it.
    let daemon: i32 = a
        .run(&["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"])?
        .trim()
        .parse()
        .expect("a pid");
    let (tag, dir) = (lab.tag().to_string(), lab.dir().to_path_buf());
    assert_eq!(namespaces_with(&format!("{tag}-")).len(), 2);
    assert!(sleeper.is_running() && alive(daemon) && dir.exists());
    drop(lab);
    assert!(namespaces_with(&format!("{tag}-")).is_empty());
    assert!(!sleeper.is_running(), "the lab did not stop its process");
    let gone = hf_testkit::cmd::wait_until(
        Duration::from_secs(5),
        || format!("pid {daemon} to die"),
        || !alive(daemon),
    );
    assert!(gone.is_ok(), "{gone:?}");
    assert!(!dir.exists(), "{} left", dir.display());
    assert!(!a.exists());
    Ok(())
}

/// What a child test printed: its lab's tag, dir and pids.
struct Child {
    tag: String,
    dir: String,
    pids: Vec<i32>,
    out: String,
    err: String,
    status: std::process::ExitStatus,
}

/// Run the `#[ignore]`d test `child_lab` of this binary as a child process doing `what`;
/// `during` runs once it printed `READY` (with its pid).
fn child(what: &str, during: impl FnOnce(u32)) -> Child {
    use std::io::{BufRead, BufReader, Read};
    let mut c = Command::new(std::env::current_exe().expect("current exe"))
        .args(["--exact", "child_lab", "--ignored", "--nocapture"])
        .env("HF_TESTKIT_CHILD", what)
        // Its first lab must not sweep the leftovers another child test left on purpose.
        .env("HF_TESTKIT_SWEEP", "0")
        .env_remove("CI")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the child test");
    let pid = c.id();
    let mut stdout = BufReader::new(c.stdout.take().expect("stdout"));
    let mut out = String::new();
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        out.push_str(&line);
        if line.starts_with("READY") {
            break;
        }
    }
    during(pid);
    let mut rest = String::new();
    let _ = stdout.read_to_string(&mut rest);
    out.push_str(&rest);
    let mut err = String::new();
    let _ = c.stderr.take().expect("stderr").read_to_string(&mut err);
    let status = c.wait().expect("wait");
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .unwrap_or_else(|| panic!("the child printed no {k}:\n{out}\n{err}"))
            .trim()
            .to_string()
    };
    Child {
        tag: field("TAG="),
        dir: field("DIR="),
        pids: field("PIDS=")
            .split_whitespace()
            .map(|p| p.parse().expect("pid"))
            .collect(),
        out,
        err,
        status,
    }
}

fn assert_all_gone(c: &Child) {
    let left = namespaces_with(&format!("{}-", c.tag));
    assert!(left.is_empty(), "namespaces left: {left:?}\n{}", c.err);
    for &p in &c.pids {
        let gone = hf_testkit::cmd::wait_until(
            Duration::from_secs(5),
            || format!("pid {p} to die"),
            || !alive(p),
        );
        assert!(gone.is_ok(), "{gone:?}");
    }
    assert!(!std::path::Path::new(&c.dir).exists(), "{} left", c.dir);
}

#[test]
fn a_panicking_test_leaves_nothing_and_prints_its_logs() {
    if !ready("a_panicking_test_leaves_nothing_and_prints_its_logs") {
        return;
    }
    let c = child("panic", |_| {});
    assert!(!c.status.success(), "the child test passed:\n{}", c.out);
    assert!(c.err.contains("the child test fails here"), "{}", c.err);
    // The failing test's process log is printed before it is removed.
    assert!(c.err.contains("marker-from-the-child"), "{}", c.err);
    assert_all_gone(&c);
}

#[test]
fn an_interrupted_test_leaves_nothing() {
    if !ready("an_interrupted_test_leaves_nothing") {
        return;
    }
    for sig in [libc_sigterm(), libc_sigint()] {
        let c = child("wait", |pid| {
            let _ = Command::new("kill")
                .args([&format!("-{sig}"), &pid.to_string()])
                .status();
        });
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            c.status.code(),
            Some(128 + sig),
            "signal {sig}: {:?} (signal {:?})\n{}",
            c.status,
            c.status.signal(),
            c.err
        );
        assert_all_gone(&c);
    }
}

#[test]
fn labs_of_killed_processes_are_swept() {
    if !ready("labs_of_killed_processes_are_swept") {
        return;
    }
    let c = child("wait", |pid| {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    // SIGKILL: nothing could clean up, so it is all still there...
    assert_eq!(
        namespaces_with(&format!("{}-", c.tag)).len(),
        2,
        "{}",
        c.err
    );
    assert!(std::path::Path::new(&c.dir).exists());
    // ...until a sweep (the first Lab::new of a process makes one).
    assert!(hf_testkit::sweep_stale() >= 3);
    assert_all_gone(&c);
}

#[test]
fn a_test_that_is_not_root_skips_or_fails_under_ci() {
    if !require_root(
        "a_test_that_is_not_root_skips_or_fails_under_ci",
        "switching to another user",
    ) {
        return;
    }
    let run = |ci: bool| {
        let mut c = Command::new(std::env::current_exe().expect("current exe"));
        c.args(["--exact", "child_lab", "--ignored", "--nocapture"])
            .env("HF_TESTKIT_CHILD", "not-root")
            .env("HF_TESTKIT_CHILD_UID", "65534");
        if ci {
            c.env("CI", "true");
        } else {
            c.env_remove("CI");
        }
        c.output().expect("the child test")
    };
    let out = run(false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("SKIP: not_root_child: needs root"),
        "no skip line:\n{err}"
    );
    let out = run(true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "under CI=true it skipped:\n{err}");
    assert!(err.contains("CI=true"), "{err}");
}

fn libc_sigterm() -> i32 {
    nix::sys::signal::Signal::SIGTERM as i32
}

fn libc_sigint() -> i32 {
    nix::sys::signal::Signal::SIGINT as i32
}

/// Not a test on its own: the child process of the cleanup tests (it does nothing unless
/// `HF_TESTKIT_CHILD` says what to do).
#[test]
#[ignore = "run by the cleanup tests as a child process"]
fn child_lab() {
    let Ok(what) = std::env::var("HF_TESTKIT_CHILD") else {
        return;
    };
    if what == "not-root" {
        let uid: u32 = std::env::var("HF_TESTKIT_CHILD_UID")
            .expect("uid")
            .parse()
            .expect("uid");
        nix::unistd::setuid(nix::unistd::Uid::from_raw(uid)).expect("setuid");
        if !require_root("not_root_child", "network namespaces") {
            return;
        }
        panic!("require_root said yes to uid {uid}");
    }
    let lab = Lab::new().expect("lab");
    let (a, _b) = pair(&lab).expect("pair");
    let p = a
        .spawn(
            "marker",
            &["sh", "-c", "echo marker-from-the-child; exec sleep 1000"],
        )
        .expect("spawn");
    let daemon = a
        .run(&["sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!"])
        .expect("daemon");
    // Let the marker reach its log.
    std::thread::sleep(Duration::from_millis(200));
    println!("TAG={}", lab.tag());
    println!("DIR={}", lab.dir().display());
    println!("PIDS={} {}", p.pid(), daemon.trim());
    println!("READY");
    match what.as_str() {
        "panic" => panic!("the child test fails here"),
        "wait" => std::thread::sleep(Duration::from_secs(60)),
        other => panic!("unknown HF_TESTKIT_CHILD {other}"),
    }
}
