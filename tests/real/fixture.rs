//! The real-network fixture (see `tests/real.rs`): hf-testkit's holdfast central and chassis
//! ([`hf_testkit::holdfast`]), two chassis on an underlay veth pair, and three VMs.

use super::common;

use std::time::Duration;

use hf_testkit::holdfast::{Central, Chassis};
use hf_testkit::{Lab, Netns, VmIface};

pub(crate) const TEST_TOOLS: &[&str] = &["ip", "ovs-vsctl", "ovn-nbctl", "nc", "ping", "iperf3"];

/// The VMs' MTU: the underlay's 1500 less Geneve's 58 bytes.
pub(crate) const VM_MTU: u32 = 1400;

/// vm1's security group: it may connect out, nothing may connect in; what comes back to it is
/// let in by conntrack alone (as replies), so a datapath that lost its connections drops it.
pub(crate) const VM1_SECURITY_GROUP: [&[&str]; 2] = [
    &[
        "acl-add",
        "ls1",
        "from-lport",
        "1002",
        "inport == \"vm1\" && ip4",
        "allow-related",
    ],
    &[
        "acl-add",
        "ls1",
        "to-lport",
        "1001",
        "outport == \"vm1\" && ip4",
        "drop",
    ],
];

/// Adds [`VM1_SECURITY_GROUP`] and waits until every chassis runs it.
pub(crate) fn add_vm1_security_group(central: &Central) {
    let [a, b] = VM1_SECURITY_GROUP;
    let mut first = vec!["--wait=hv"];
    first.extend_from_slice(a);
    central.nbctl_all(&[&first, b]).unwrap();
}

/// Whether `f` holds within `t`.
pub(crate) fn wait(t: Duration, mut f: impl FnMut() -> bool) -> bool {
    hf_testkit::cmd::wait_until(t, String::new, &mut f).is_ok()
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
    let all: Vec<Vec<&str>> = cmds
        .iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect();
    let all: Vec<&[&str]> = all.iter().map(Vec::as_slice).collect();
    central.nbctl_all(&all).unwrap();
}

pub(crate) fn cluster(test: &str) -> Option<Cluster> {
    if !hf_testkit::require_root(test, "network namespaces and veth pairs")
        || !hf_testkit::require_tools(test, TEST_TOOLS)
        || !common::require(test, &["ovs-vsctl", "ovn-nbctl"])
    {
        return None;
    }
    let bin = common::holdfast();
    let lab = Lab::new().unwrap();
    let central_ns = lab.netns("central").unwrap();
    let central = Central::start(&lab, &central_ns, &bin).unwrap();
    build_nb(&central, &[]);
    let hv1 = lab.netns("hv1").unwrap();
    let hv2 = lab.netns("hv2").unwrap();
    lab.veth((&hv1, "underlay"), (&hv2, "underlay")).unwrap();
    hv1.addr_add("underlay", "192.168.100.1/24").unwrap();
    hv2.addr_add("underlay", "192.168.100.2/24").unwrap();
    let c1 = Chassis::start(&lab, &hv1, &bin, "hv1", "192.168.100.1", &central.sb).unwrap();
    let c2 = Chassis::start(&lab, &hv2, &bin, "hv2", "192.168.100.2", &central.sb).unwrap();
    let vm = |name: &str, on: &Netns, tap: &str, mac: &str, ip: &str, gw: &str| {
        lab.vm(name, on, tap, &vm_iface(mac, ip, Some(gw))).unwrap()
    };
    let vm1 = vm(
        "vm1",
        &hv1,
        "tap1",
        "0a:00:00:00:00:01",
        "10.0.1.11/24",
        "10.0.1.1",
    );
    let vm2 = vm(
        "vm2",
        &hv2,
        "tap2",
        "0a:00:00:00:00:02",
        "10.0.1.12/24",
        "10.0.1.1",
    );
    let vm3 = vm(
        "vm3",
        &hv1,
        "tap3",
        "0a:00:00:00:00:03",
        "10.0.2.13/24",
        "10.0.2.1",
    );
    c1.plug("tap1", "vm1").unwrap();
    c2.plug("tap2", "vm2").unwrap();
    c1.plug("tap3", "vm3").unwrap();
    let cl = Cluster {
        central,
        central_ns,
        hv: vec![c1, c2],
        vms: vec![vm1, vm2, vm3],
        lab,
    };
    // Every port is installed where it is plugged (what the CNI waits for).
    for (c, tap) in [(0, "tap1"), (1, "tap2"), (0, "tap3")] {
        if let Err(e) = cl.hv[c].wait_installed(tap, Duration::from_secs(60)) {
            panic!("{e}\n{}", cl.logs());
        }
    }
    Some(cl)
}

impl Cluster {
    pub(crate) fn logs(&self) -> String {
        self.hv.iter().map(Chassis::logs).collect()
    }

    /// `ovs-vsctl` on chassis `i` (the test fails if it does).
    pub(crate) fn vsctl(&self, i: usize, args: &[&str]) -> String {
        self.hv[i]
            .vsctl(args)
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()))
    }

    /// `ovn-nbctl` (the test fails if it does).
    pub(crate) fn nbctl(&self, args: &[&str]) -> String {
        self.central
            .nbctl(args)
            .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()))
    }
}
