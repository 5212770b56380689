//! holdfast chassis on real interfaces with real kernel TCP (issue 19), in network namespaces
//! the test makes (hf-testkit's [`Lab`]; root, a `SKIP:` line otherwise, a failure under
//! `CI=true`).
//!
//! The databases (`holdfast db`) and `holdfast northd` serve on unix sockets in the lab's
//! directory. Each chassis is a namespace with an underlay address on a veth pair to the other
//! chassis (Geneve crosses it), its own local OVS database (`holdfast db` serving a database
//! made from OVS's own `vswitch.ovsschema`, configured with real `ovs-vsctl` as an operator or a
//! CNI would), and `holdfast datapath` + `holdfast controller` started with nothing but that
//! database on their command lines (plus the control socket and file paths). VMs are
//! namespaces on veth pairs whose chassis end is added to `br-int` with real `ovs-vsctl
//! add-port ... external_ids:iface-id=PORT`.

#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hf_testkit::{Lab, Netns, Proc, VmIface};

const TEST_TOOLS: &[&str] = &["ip", "ovs-vsctl", "ovn-nbctl", "nc", "ping", "iperf3"];

/// The VMs' MTU: the underlay's 1500 less Geneve's 58 bytes.
const VM_MTU: u32 = 1400;

fn vswitch_schema() -> &'static Path {
    Path::new("/usr/share/openvswitch/vswitch.ovsschema")
}

/// The central databases and northd, on unix sockets (every namespace reaches them).
struct Central {
    nb: String,
    sb: String,
    _db: Proc,
    _northd: Proc,
}

impl Central {
    fn start(lab: &Lab, ns: &Netns) -> Central {
        let dir = lab.dir();
        let sock = dir.join("ovnsb.sock");
        let db = ns
            .spawn(
                "db",
                &[
                    common::holdfast().to_str().unwrap(),
                    "db",
                    "--data-dir",
                    dir.join("central").to_str().unwrap(),
                    "--remote",
                    &format!("punix:{}", sock.display()),
                    "--unixctl",
                    dir.join("db.ctl").to_str().unwrap(),
                ],
            )
            .unwrap();
        wait_path(&sock);
        let remote = format!("unix:{}", sock.display());
        let northd = ns
            .spawn(
                "northd",
                &[
                    common::holdfast().to_str().unwrap(),
                    "northd",
                    &format!("--ovnnb-db={remote}"),
                    &format!("--ovnsb-db={remote}"),
                    "--unixctl",
                    dir.join("northd.ctl").to_str().unwrap(),
                ],
            )
            .unwrap();
        Central {
            nb: remote.clone(),
            sb: remote,
            _db: db,
            _northd: northd,
        }
    }

    fn nbctl(&self, args: &[&str]) -> String {
        common::run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .arg("--timeout=30")
                .args(args),
        )
    }
}

fn wait_path(p: &Path) {
    assert!(
        wait(Duration::from_secs(30), || p.exists()),
        "{} did not appear",
        p.display()
    );
}

/// Whether `f` holds within `t`.
fn wait(t: Duration, mut f: impl FnMut() -> bool) -> bool {
    hf_testkit::cmd::wait_until(t, String::new, &mut f).is_ok()
}

/// One chassis: its namespace, local database and daemons.
struct Chassis {
    name: String,
    ns: Netns,
    conf: String,
    dir: PathBuf,
    _db: Proc,
    datapath: Option<Proc>,
    controller: Option<Proc>,
}

impl Chassis {
    fn start(lab: &Lab, ns: Netns, name: &str, encap_ip: &str, sb: &str) -> Chassis {
        let dir = lab.dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("conf.db");
        common::run_ok(
            Command::new(common::holdfast())
                .args(["db", "create"])
                .arg(&file)
                .arg(vswitch_schema()),
        );
        let sock = dir.join("db.sock");
        let db = ns
            .spawn(
                &format!("{name}-db"),
                &[
                    common::holdfast().to_str().unwrap(),
                    "db",
                    "--remote",
                    &format!("punix:{}", sock.display()),
                    "--unixctl",
                    dir.join("db.ctl").to_str().unwrap(),
                    file.to_str().unwrap(),
                ],
            )
            .unwrap();
        wait_path(&sock);
        let conf = format!("unix:{}", sock.display());
        let mut c = Chassis {
            name: name.to_string(),
            ns,
            conf,
            dir,
            _db: db,
            datapath: None,
            controller: None,
        };
        // The datapath is not running yet: nothing would follow next_cfg.
        c.vsctl(&["--no-wait", "init"]);
        c.vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            &format!("external_ids:system-id={name}"),
            &format!("external_ids:ovn-remote={sb}"),
            "external_ids:ovn-encap-type=geneve",
            &format!("external_ids:ovn-encap-ip={encap_ip}"),
        ]);
        c.vsctl(&["--no-wait", "add-br", "br-int"]);
        c.start_datapath(&[]);
        c.start_controller();
        c
    }

    fn vsctl(&self, args: &[&str]) -> String {
        common::run_ok(
            Command::new("ovs-vsctl")
                .arg(format!("--db={}", self.conf))
                .arg("--timeout=30")
                .args(args),
        )
    }

    fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }

    fn start_datapath(&mut self, extra: &[&str]) {
        let mut args = vec![
            common::holdfast().display().to_string(),
            "datapath".into(),
            self.conf.clone(),
            format!("--control=punix:{}", self.path("dp.sock")),
            format!("--zones-file={}", self.path("zones.json")),
            format!("--unixctl={}", self.path("dp.ctl")),
            format!("--log-file={}", self.path("dp.log")),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let n = self.datapath.as_ref().map_or(0, |_| 1);
        self.datapath = Some(
            self.ns
                .spawn(&format!("{}-datapath{n}", self.name), &argv)
                .unwrap(),
        );
        wait_path(&self.dir.join("dp.sock"));
    }

    fn start_controller(&mut self) {
        let args = [
            common::holdfast().display().to_string(),
            "controller".into(),
            self.conf.clone(),
            format!("--datapath=unix:{}", self.path("dp.sock")),
            format!("--unixctl={}", self.path("ctl.ctl")),
            format!("--log-file={}", self.path("ctl.log")),
        ];
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        self.controller = Some(
            self.ns
                .spawn(&format!("{}-controller", self.name), &argv)
                .unwrap(),
        );
    }

    /// `ovs-vsctl add-port br-int TAP -- set Interface TAP external_ids:iface-id=PORT`, as
    /// OVN-Kubernetes' CNI and os-vif plug an interface.
    fn plug(&self, tap: &str, port: &str) {
        self.vsctl(&[
            "add-port",
            "br-int",
            tap,
            "--",
            "set",
            "Interface",
            tap,
            &format!("external_ids:iface-id={port}"),
        ]);
    }

    fn logs(&self) -> String {
        ["dp.log", "ctl.log"]
            .iter()
            .map(|f| {
                format!(
                    "--- {} {f}\n{}",
                    self.name,
                    std::fs::read_to_string(self.dir.join(f)).unwrap_or_default()
                )
            })
            .collect()
    }
}

fn vm_iface(mac: &str, ip: &str, gw: Option<&str>) -> VmIface {
    VmIface {
        mac: Some(mac.into()),
        addrs: vec![ip.into()],
        gateway: gw.map(str::to_string),
        mtu: Some(VM_MTU),
        ..VmIface::default()
    }
}

/// Two chassis joined by an underlay veth pair, a switch with a VM on each, a router to a
/// second switch with a third VM.
struct Cluster {
    central: Central,
    hv: Vec<Chassis>,
    vms: Vec<Netns>,
    lab: Lab,
}

fn cluster(test: &str) -> Option<Cluster> {
    if !hf_testkit::require_root(test, "network namespaces and veth pairs")
        || !hf_testkit::require_tools(test, TEST_TOOLS)
        || !common::require(test, &["ovs-vsctl", "ovn-nbctl"])
    {
        return None;
    }
    let lab = Lab::new().unwrap();
    let central_ns = lab.netns("central").unwrap();
    let central = Central::start(&lab, &central_ns);
    central.nbctl(&["ls-add", "ls1"]);
    central.nbctl(&["ls-add", "ls2"]);
    central.nbctl(&["lr-add", "lr0"]);
    central.nbctl(&[
        "lrp-add",
        "lr0",
        "lr0-ls1",
        "02:00:00:00:01:01",
        "10.0.1.1/24",
    ]);
    central.nbctl(&[
        "lrp-add",
        "lr0",
        "lr0-ls2",
        "02:00:00:00:02:01",
        "10.0.2.1/24",
    ]);
    for (ls, lrp) in [("ls1", "lr0-ls1"), ("ls2", "lr0-ls2")] {
        let p = format!("{ls}-lr0");
        central.nbctl(&[
            "lsp-add",
            ls,
            &p,
            "--",
            "lsp-set-type",
            &p,
            "router",
            "--",
            "lsp-set-addresses",
            &p,
            "router",
            "--",
            "lsp-set-options",
            &p,
            &format!("router-port={lrp}"),
        ]);
    }
    for (ls, vm, mac, ip) in [
        ("ls1", "vm1", "0a:00:00:00:00:01", "10.0.1.11"),
        ("ls1", "vm2", "0a:00:00:00:00:02", "10.0.1.12"),
        ("ls2", "vm3", "0a:00:00:00:00:03", "10.0.2.13"),
    ] {
        central.nbctl(&[
            "lsp-add",
            ls,
            vm,
            "--",
            "lsp-set-addresses",
            vm,
            &format!("{mac} {ip}"),
        ]);
    }
    let hv1 = lab.netns("hv1").unwrap();
    let hv2 = lab.netns("hv2").unwrap();
    lab.veth((&hv1, "underlay"), (&hv2, "underlay")).unwrap();
    hv1.addr_add("underlay", "192.168.100.1/24").unwrap();
    hv2.addr_add("underlay", "192.168.100.2/24").unwrap();
    let c1 = Chassis::start(&lab, hv1.clone(), "hv1", "192.168.100.1", &central.sb);
    let c2 = Chassis::start(&lab, hv2.clone(), "hv2", "192.168.100.2", &central.sb);
    let vm1 = lab
        .vm(
            "vm1",
            &hv1,
            "tap1",
            &vm_iface("0a:00:00:00:00:01", "10.0.1.11/24", Some("10.0.1.1")),
        )
        .unwrap();
    let vm2 = lab
        .vm(
            "vm2",
            &hv2,
            "tap2",
            &vm_iface("0a:00:00:00:00:02", "10.0.1.12/24", Some("10.0.1.1")),
        )
        .unwrap();
    let vm3 = lab
        .vm(
            "vm3",
            &hv1,
            "tap3",
            &vm_iface("0a:00:00:00:00:03", "10.0.2.13/24", Some("10.0.2.1")),
        )
        .unwrap();
    c1.plug("tap1", "vm1");
    c2.plug("tap2", "vm2");
    c1.plug("tap3", "vm3");
    let cl = Cluster {
        central,
        hv: vec![c1, c2],
        vms: vec![vm1, vm2, vm3],
        lab,
    };
    // Every port is installed where it is plugged (what the CNI waits for).
    for (c, tap) in [(0, "tap1"), (1, "tap2"), (0, "tap3")] {
        let ok = wait(Duration::from_secs(60), || {
            cl.hv[c]
                .vsctl(&["get", "Interface", tap, "external_ids"])
                .contains("ovn-installed=\"true\"")
        });
        assert!(ok, "{tap} not installed\n{}", cl.logs());
    }
    Some(cl)
}

impl Cluster {
    fn logs(&self) -> String {
        self.hv.iter().map(Chassis::logs).collect()
    }
}

/// L2 across the chassis (Geneve over the underlay veth), L3 through the distributed router
/// on one chassis and across, a TCP exchange and an iperf3 transfer with the kernel's TCP,
/// and the rows the datapath wrote for its interfaces (`ofport`, `link_state`, `cur_cfg`, as
/// `ovs-vsctl` without `--no-wait` waits for).
#[test]
fn two_chassis_carry_kernel_tcp_between_namespaces() {
    let Some(cl) = cluster("two_chassis_carry_kernel_tcp_between_namespaces") else {
        return;
    };
    let (vm1, vm2, vm3) = (&cl.vms[0], &cl.vms[1], &cl.vms[2]);
    // The first packets resolve neighbours; then every echo is answered.
    for (from, to, what) in [
        (vm1, "10.0.1.12", "L2 across chassis"),
        (vm1, "10.0.2.13", "L3 on one chassis"),
        (vm2, "10.0.2.13", "L3 across chassis"),
    ] {
        let _ = from.ping(to, 2);
        let p = from.ping(to, 3).unwrap();
        assert_eq!(p.received, 3, "{what}: {p:?}\n{}", cl.logs());
    }
    let x = hf_testkit::nc_exchange(vm2, vm1, "10.0.1.12", 7000, b"hello from vm1", b"hi vm1")
        .unwrap_or_else(|e| panic!("{e}\n{}", cl.logs()));
    assert_eq!(x.server_got, b"hello from vm1");
    assert_eq!(x.client_got, b"hi vm1");
    let _srv = vm3.iperf3_server("10.0.2.13", 5201).unwrap();
    let r = vm2
        .iperf3(&hf_testkit::Iperf3Opts::new("10.0.2.13", 5201).duration(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("{e}\n{}", cl.logs()));
    assert!(r.received_bytes > 0 && r.error.is_none(), "{r:?}");
    eprintln!(
        "iperf3 vm2 -> vm3 across chassis through lr0: {:.2} Gb/s, {:?} retransmits",
        r.bits_per_second / 1e9,
        r.retransmits
    );
    // The datapath's write-back, read with real ovs-vsctl.
    let hv1 = &cl.hv[0];
    let ofport = hv1.vsctl(&["get", "Interface", "tap1", "ofport"]);
    assert!(ofport.trim().parse::<i64>().unwrap() > 0, "{ofport}");
    assert_eq!(
        hv1.vsctl(&["get", "Interface", "tap1", "link_state"])
            .trim(),
        "up"
    );
    assert_eq!(
        hv1.vsctl(&["get", "Interface", "tap1", "error"]).trim(),
        "[]"
    );
    // Without --no-wait, ovs-vsctl waits for cur_cfg: it returns.
    hv1.vsctl(&["set", "Interface", "tap1", "external_ids:note=x"]);
    // A port that does not exist is reported as OVS reports it.
    hv1.vsctl(&["add-port", "br-int", "nosuch0"]);
    let ok = wait(Duration::from_secs(10), || {
        hv1.vsctl(&["get", "Interface", "nosuch0", "error"])
            .contains("could not open network device nosuch0 (No such device)")
    });
    assert!(ok, "{}", hv1.vsctl(&["list", "Interface", "nosuch0"]));
    let _ = &cl.lab;
    let _ = &cl.central;
}

/// Ports attached and detached with real ovs-vsctl: `del-port` cuts the VM off and releases
/// its binding; `add-port` again brings it back.
#[test]
fn ovs_vsctl_attaches_and_detaches_ports() {
    let Some(cl) = cluster("ovs_vsctl_attaches_and_detaches_ports") else {
        return;
    };
    let (vm1, vm2) = (&cl.vms[0], &cl.vms[1]);
    let _ = vm1.ping("10.0.1.12", 2);
    assert_eq!(
        vm1.ping("10.0.1.12", 2).unwrap().received,
        2,
        "{}",
        cl.logs()
    );
    cl.hv[1].vsctl(&["del-port", "br-int", "tap2"]);
    let gone = wait(Duration::from_secs(20), || {
        vm1.ping("10.0.1.12", 1).map_or(true, |p| p.received == 0)
    });
    assert!(gone, "vm2 still answers after del-port\n{}", cl.logs());
    cl.hv[1].plug("tap2", "vm2");
    let back = wait(Duration::from_secs(30), || {
        vm2.ping("10.0.1.11", 1).is_ok_and(|p| p.received == 1)
    });
    assert!(back, "vm2 unreachable after add-port\n{}", cl.logs());
}
