//! The topologies of the `datapath-veth` suite, each in a lab of its own (hf-testkit's [`Lab`]:
//! its namespaces, veths and processes go when it drops): two namespaces ("VMs") joined by a
//! direct veth pair, by a Linux bridge, by Open vSwitch's userspace datapath, or by holdfast
//! (on one chassis and across two). It measures nothing itself.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use hf_testkit::cmd::{self, DEFAULT_TIMEOUT};
use hf_testkit::holdfast::{Central, Chassis, VSWITCH_SCHEMA};
use hf_testkit::{Lab, Netns, Proc, VethOpts, VmIface};

/// The client's and the server's addresses in the baselines.
const CLIENT_CIDR: &str = "10.20.0.1/24";
const SERVER_IP: &str = "10.20.0.2";
const SERVER_CIDR: &str = "10.20.0.2/24";
/// The underlay's MTU between holdfast chassis: room for Geneve's 58 bytes around a 1500-byte
/// VM frame, so every topology runs its VMs at 1500.
const UNDERLAY_MTU: u32 = 1600;
/// How long a holdfast port may take to be installed, and a path to answer pings.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Two endpoints the suite measures between: the client sends to the server.
pub(super) struct Pair {
    /// The topology's name in the result lines.
    pub(super) name: &'static str,
    pub(super) client: Netns,
    pub(super) server: Netns,
    pub(super) server_ip: &'static str,
    /// The forwarding processes a profiler attaches to (holdfast datapaths), if any.
    pub(super) forwarders: Vec<i32>,
}

/// A built topology. Its processes stop and its namespaces go when it drops.
pub(super) struct Topo {
    pub(super) pairs: Vec<Pair>,
    /// Every veth end the measured traffic crosses, whose offloads the workloads switch.
    pub(super) ends: Vec<(Netns, String)>,
    /// Daemons (OVS's), stopped before the lab goes.
    procs: Vec<Proc>,
    chassis: Vec<Chassis>,
    _central: Option<Central>,
    /// Declared last: dropped last.
    _lab: Lab,
}

impl Topo {
    fn new(lab: Lab) -> Topo {
        Topo {
            pairs: Vec::new(),
            ends: Vec::new(),
            procs: Vec::new(),
            chassis: Vec::new(),
            _central: None,
            _lab: lab,
        }
    }

    /// Turn the offloads of every end on or off (`ethtool -K`: checksums, SG, TSO, GSO, GRO).
    pub(super) fn set_offloads(&self, on: bool) -> anyhow::Result<()> {
        for (ns, ifname) in &self.ends {
            ns.offloads(ifname, on)
                .with_context(|| format!("offloads of {ifname} in {}", ns.name()))?;
        }
        Ok(())
    }

    /// What the forwarding daemons logged (holdfast's), for an error message.
    pub(super) fn logs(&self) -> String {
        let mut s: String = self.chassis.iter().map(Chassis::logs).collect();
        for p in &self.procs {
            s.push_str(&p.log());
        }
        s
    }

    /// Wait until each pair's client gets an answer from its server (neighbours resolved,
    /// flows installed).
    pub(super) fn wait_connected(&self) -> anyhow::Result<()> {
        for p in &self.pairs {
            cmd::wait_until(
                READY_TIMEOUT,
                || format!("{}: ping {} answered", p.name, p.server_ip),
                || p.client.ping(p.server_ip, 1).is_ok_and(|s| s.received == 1),
            )
            .with_context(|| self.logs())?;
        }
        Ok(())
    }
}

/// Two VMs on one veth pair: the limit.
pub(super) fn direct() -> anyhow::Result<Topo> {
    let lab = Lab::new()?;
    let (a, b) = (lab.netns("vm1")?, lab.netns("vm2")?);
    lab.veth((&a, "eth0"), (&b, "eth0"))?;
    a.addr_add("eth0", CLIENT_CIDR)?;
    b.addr_add("eth0", SERVER_CIDR)?;
    let mut t = Topo::new(lab);
    t.ends = vec![(a.clone(), "eth0".into()), (b.clone(), "eth0".into())];
    t.pairs.push(Pair {
        name: "direct-veth",
        client: a,
        server: b,
        server_ip: SERVER_IP,
        forwarders: Vec::new(),
    });
    Ok(t)
}

/// Two VMs, each on a veth pair into a switch namespace (`pa`, `pb` there).
fn two_vms_and_a_switch(lab: &Lab) -> anyhow::Result<(Netns, Netns, Netns)> {
    let sw = lab.netns("switch")?;
    let a = lab.vm(
        "vm1",
        &sw,
        "pa",
        &VmIface {
            addrs: vec![CLIENT_CIDR.into()],
            ..VmIface::default()
        },
    )?;
    let b = lab.vm(
        "vm2",
        &sw,
        "pb",
        &VmIface {
            addrs: vec![SERVER_CIDR.into()],
            ..VmIface::default()
        },
    )?;
    Ok((sw, a, b))
}

fn switched(lab: Lab, name: &'static str, sw: &Netns, a: Netns, b: Netns) -> Topo {
    let mut t = Topo::new(lab);
    t.ends = vec![
        (a.clone(), "eth0".into()),
        (b.clone(), "eth0".into()),
        (sw.clone(), "pa".into()),
        (sw.clone(), "pb".into()),
    ];
    t.pairs.push(Pair {
        name,
        client: a,
        server: b,
        server_ip: SERVER_IP,
        forwarders: Vec::new(),
    });
    t
}

/// Two VMs on a Linux bridge.
pub(super) fn linux_bridge() -> anyhow::Result<Topo> {
    let lab = Lab::new()?;
    let (sw, a, b) = two_vms_and_a_switch(&lab)?;
    sw.ip(&["link", "add", "br0", "type", "bridge"])?;
    sw.ip(&["link", "set", "pa", "master", "br0"])?;
    sw.ip(&["link", "set", "pb", "master", "br0"])?;
    sw.link_up("br0")?;
    Ok(switched(lab, "linux-bridge", &sw, a, b))
}

/// Two VMs on an Open vSwitch bridge with the userspace datapath (`datapath_type=netdev`):
/// real `ovsdb-server` and `ovs-vswitchd` in the switch namespace, files in the lab's
/// directory, the bridge's default NORMAL flow. `other_config:userspace-tso-enable=true`, as
/// without it OVS passes offloaded frames (partial checksums, TSO super-frames) on as they are
/// and the receiver drops them: the offloads-on workload would measure nothing.
pub(super) fn ovs_netdev() -> anyhow::Result<Topo> {
    let lab = Lab::new()?;
    let (sw, a, b) = two_vms_and_a_switch(&lab)?;
    let dir = lab.dir().join("ovs");
    std::fs::create_dir_all(&dir)?;
    let conf = dir.join("conf.db");
    cmd::run(
        Command::new("ovsdb-tool")
            .arg("create")
            .arg(&conf)
            .arg(VSWITCH_SCHEMA),
        DEFAULT_TIMEOUT,
    )?;
    let sock = dir.join("db.sock");
    let db = format!("unix:{}", sock.display());
    let daemon = |name: &str, last: &str| -> anyhow::Result<Proc> {
        let mut c = sw.command(name);
        for v in ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR"] {
            c.env(v, &dir);
        }
        c.arg("--no-chdir")
            .arg(format!(
                "--log-file={}",
                dir.join(format!("{name}.log")).display()
            ))
            .arg(format!(
                "--unixctl={}",
                dir.join(format!("{name}.ctl")).display()
            ));
        if name == "ovsdb-server" {
            c.arg(format!("--remote=punix:{}", sock.display()));
        }
        c.arg(last);
        Ok(sw.spawn_command(name, c)?)
    };
    let mut procs = vec![daemon("ovsdb-server", &conf.display().to_string())?];
    cmd::wait_until(
        Duration::from_secs(30),
        || format!("{} to appear", sock.display()),
        || sock.exists(),
    )?;
    let vsctl = |args: &[&str]| -> anyhow::Result<String> {
        Ok(cmd::run(
            Command::new("ovs-vsctl")
                .arg(format!("--db={db}"))
                .arg("--timeout=30")
                .args(args),
            DEFAULT_TIMEOUT,
        )?)
    };
    vsctl(&["--no-wait", "init"])?;
    vsctl(&[
        "--no-wait",
        "set",
        "Open_vSwitch",
        ".",
        "other_config:userspace-tso-enable=true",
    ])?;
    procs.push(daemon("ovs-vswitchd", &db)?);
    // Without --no-wait: returns once ovs-vswitchd has the bridge and its ports.
    vsctl(&[
        "add-br",
        "br0",
        "--",
        "set",
        "bridge",
        "br0",
        "datapath_type=netdev",
        "--",
        "add-port",
        "br0",
        "pa",
        "--",
        "add-port",
        "br0",
        "pb",
    ])?;
    let mut t = switched(lab, "ovs-netdev", &sw, a, b);
    t.procs = procs;
    Ok(t)
}

/// The holdfast topology: central `holdfast db` + `holdfast northd`; chassis hv1 and hv2 joined
/// by an underlay veth (MTU [`UNDERLAY_MTU`]), each with its local database, `holdfast
/// datapath` and `holdfast controller`; logical switch ls1 with vm1 and vm2 on hv1 and vm3 on
/// hv2, plugged with `ovs-vsctl add-port`. Pairs: vm1 → vm2 (one chassis), vm1 → vm3 (across
/// chassis, Geneve).
pub(super) fn holdfast(bin: &Path) -> anyhow::Result<Topo> {
    let lab = Lab::new()?;
    let central_ns = lab.netns("central")?;
    let central = Central::start(&lab, &central_ns, bin)?;
    central.nbctl(&["ls-add", "ls1"])?;
    let vms = [
        ("vm1", "0a:00:00:00:00:01", "10.0.1.11", 0, "tap1"),
        ("vm2", "0a:00:00:00:00:02", "10.0.1.12", 0, "tap2"),
        ("vm3", "0a:00:00:00:00:03", "10.0.1.13", 1, "tap3"),
    ];
    for (vm, mac, ip, _, _) in vms {
        central.nbctl(&[
            "lsp-add",
            "ls1",
            vm,
            "--",
            "lsp-set-addresses",
            vm,
            &format!("{mac} {ip}"),
        ])?;
    }
    let hv = [lab.netns("hv1")?, lab.netns("hv2")?];
    lab.veth_with(
        (&hv[0], "underlay"),
        (&hv[1], "underlay"),
        &VethOpts {
            mtu: Some(UNDERLAY_MTU),
            ..VethOpts::default()
        },
    )?;
    let encap = ["192.168.100.1", "192.168.100.2"];
    let mut chassis = Vec::new();
    for (i, ns) in hv.iter().enumerate() {
        ns.addr_add("underlay", &format!("{}/24", encap[i]))?;
        chassis.push(Chassis::start(
            &lab,
            ns,
            bin,
            &format!("hv{}", i + 1),
            encap[i],
            &central.sb,
        )?);
    }
    let mut ends: Vec<(Netns, String)> = hv
        .iter()
        .map(|ns| (ns.clone(), "underlay".to_string()))
        .collect();
    let mut vm_ns = Vec::new();
    for (vm, mac, ip, on, tap) in vms {
        let ns = lab.vm(
            vm,
            &hv[on],
            tap,
            &VmIface {
                mac: Some(mac.into()),
                addrs: vec![format!("{ip}/24")],
                ..VmIface::default()
            },
        )?;
        chassis[on].plug(tap, vm)?;
        ends.push((ns.clone(), "eth0".into()));
        ends.push((hv[on].clone(), tap.into()));
        vm_ns.push(ns);
    }
    let mut t = Topo::new(lab);
    t.ends = ends;
    t._central = Some(central);
    t.chassis = chassis;
    for (_, _, _, on, tap) in vms {
        t.chassis[on]
            .wait_installed(tap, READY_TIMEOUT)
            .with_context(|| t.logs())?;
    }
    let pid = |c: &Chassis| c.datapath().map(Proc::pid);
    t.pairs = vec![
        Pair {
            name: "holdfast-one-chassis",
            client: vm_ns[0].clone(),
            server: vm_ns[1].clone(),
            server_ip: "10.0.1.12",
            forwarders: pid(&t.chassis[0]).into_iter().collect(),
        },
        Pair {
            name: "holdfast-across-chassis",
            client: vm_ns[0].clone(),
            server: vm_ns[2].clone(),
            server_ip: "10.0.1.13",
            forwarders: t.chassis.iter().filter_map(pid).collect(),
        },
    ];
    Ok(t)
}
