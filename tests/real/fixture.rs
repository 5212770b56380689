//! The real-network fixture: central databases and northd, chassis namespaces with their
//! local OVS database and daemons, VMs on veth pairs (see `tests/real.rs`).

use super::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hf_testkit::{Lab, Netns, Proc, VmIface};

pub(crate) const TEST_TOOLS: &[&str] = &["ip", "ovs-vsctl", "ovn-nbctl", "nc", "ping", "iperf3"];

/// The VMs' MTU: the underlay's 1500 less Geneve's 58 bytes.
pub(crate) const VM_MTU: u32 = 1400;

pub(crate) fn vswitch_schema() -> &'static Path {
    Path::new("/usr/share/openvswitch/vswitch.ovsschema")
}

/// The central databases and northd, on unix sockets (every namespace reaches them).
pub(crate) struct Central {
    pub(crate) nb: String,
    pub(crate) sb: String,
    pub(crate) db: Proc,
    pub(crate) northd: Proc,
}

impl Central {
    pub(crate) fn start(lab: &Lab, ns: &Netns) -> Central {
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
            db,
            northd,
        }
    }

    /// Incident D's rebuild: the databases and northd stop, their files are deleted, and
    /// everything starts again empty (the CMS then writes the same names with new UUIDs).
    pub(crate) fn rebuild(&mut self, lab: &Lab, ns: &Netns) {
        self.northd.stop();
        self.db.stop();
        let _ = std::fs::remove_dir_all(lab.dir().join("central"));
        let _ = std::fs::remove_file(lab.dir().join("ovnsb.sock"));
        *self = Central::start(lab, ns);
    }

    pub(crate) fn nbctl(&self, args: &[&str]) -> String {
        common::run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .arg("--timeout=30")
                .args(args),
        )
    }
}

pub(crate) fn wait_path(p: &Path) {
    assert!(
        wait(Duration::from_secs(30), || p.exists()),
        "{} did not appear",
        p.display()
    );
}

/// Whether `f` holds within `t`.
pub(crate) fn wait(t: Duration, mut f: impl FnMut() -> bool) -> bool {
    hf_testkit::cmd::wait_until(t, String::new, &mut f).is_ok()
}

/// One chassis: its namespace, local database and daemons.
pub(crate) struct Chassis {
    pub(crate) name: String,
    pub(crate) ns: Netns,
    pub(crate) conf: String,
    pub(crate) dir: PathBuf,
    pub(crate) _db: Proc,
    pub(crate) datapath: Option<Proc>,
    pub(crate) controller: Option<Proc>,
}

impl Chassis {
    pub(crate) fn start(lab: &Lab, ns: Netns, name: &str, encap_ip: &str, sb: &str) -> Chassis {
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

    pub(crate) fn vsctl(&self, args: &[&str]) -> String {
        common::run_ok(
            Command::new("ovs-vsctl")
                .arg(format!("--db={}", self.conf))
                .arg("--timeout=30")
                .args(args),
        )
    }

    pub(crate) fn path(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }

    pub(crate) fn start_datapath(&mut self, extra: &[&str]) {
        let mut args = vec![
            common::holdfast().display().to_string(),
            "datapath".into(),
            self.conf.clone(),
            format!("--control=punix:{}", self.path("dp.sock")),
            format!("--zones-file={}", self.path("zones.json")),
            format!("--unixctl={}", self.path("dp.ctl")),
            format!("--log-file={}", self.path("dp.log")),
            // Live migration's state channel, on the encap IP (peers dial the same port).
            "--state-listen=ptcp:6690".into(),
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

    pub(crate) fn start_controller(&mut self) {
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
    pub(crate) fn plug(&self, tap: &str, port: &str) {
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

    pub(crate) fn logs(&self) -> String {
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

pub(crate) fn vm_iface(mac: &str, ip: &str, gw: Option<&str>) -> VmIface {
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
pub(crate) struct Cluster {
    pub(crate) central: Central,
    pub(crate) central_ns: Netns,
    pub(crate) hv: Vec<Chassis>,
    pub(crate) vms: Vec<Netns>,
    pub(crate) lab: Lab,
}

/// The northbound topology of [`cluster`]: `ls1` (vm1, vm2) and `ls2` (vm3) behind `lr0`,
/// and `extra` commands, written in one transaction as a CMS restoring its state would.
pub(crate) fn build_nb(central: &Central, extra: &[&[&str]]) {
    let mut cmds: Vec<Vec<String>> = Vec::new();
    let mut cmd = |c: &[&str]| cmds.push(c.iter().map(|s| s.to_string()).collect());
    cmd(&["ls-add", "ls1"]);
    cmd(&["ls-add", "ls2"]);
    cmd(&["lr-add", "lr0"]);
    cmd(&[
        "lrp-add",
        "lr0",
        "lr0-ls1",
        "02:00:00:00:01:01",
        "10.0.1.1/24",
    ]);
    cmd(&[
        "lrp-add",
        "lr0",
        "lr0-ls2",
        "02:00:00:00:02:01",
        "10.0.2.1/24",
    ]);
    for (ls, lrp) in [("ls1", "lr0-ls1"), ("ls2", "lr0-ls2")] {
        let p = format!("{ls}-lr0");
        cmd(&["lsp-add", ls, &p]);
        cmd(&["lsp-set-type", &p, "router"]);
        cmd(&["lsp-set-addresses", &p, "router"]);
        cmd(&["lsp-set-options", &p, &format!("router-port={lrp}")]);
    }
    for (ls, vm, mac, ip) in [
        ("ls1", "vm1", "0a:00:00:00:00:01", "10.0.1.11"),
        ("ls1", "vm2", "0a:00:00:00:00:02", "10.0.1.12"),
        ("ls2", "vm3", "0a:00:00:00:00:03", "10.0.2.13"),
    ] {
        cmd(&["lsp-add", ls, vm]);
        cmd(&["lsp-set-addresses", vm, &format!("{mac} {ip}")]);
    }
    for c in extra {
        cmd(c);
    }
    let mut args: Vec<&str> = Vec::new();
    for (n, c) in cmds.iter().enumerate() {
        if n > 0 {
            args.push("--");
        }
        args.extend(c.iter().map(String::as_str));
    }
    central.nbctl(&args);
}

pub(crate) fn cluster(test: &str) -> Option<Cluster> {
    if !hf_testkit::require_root(test, "network namespaces and veth pairs")
        || !hf_testkit::require_tools(test, TEST_TOOLS)
        || !common::require(test, &["ovs-vsctl", "ovn-nbctl"])
    {
        return None;
    }
    let lab = Lab::new().unwrap();
    let central_ns = lab.netns("central").unwrap();
    let central = Central::start(&lab, &central_ns);
    build_nb(&central, &[]);
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
        central_ns,
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
    pub(crate) fn logs(&self) -> String {
        self.hv.iter().map(Chassis::logs).collect()
    }
}
