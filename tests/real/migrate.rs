//! Live migration with real kernel TCP (issue 19 after incident C): the VM's attachment moves
//! from hv1 to hv2 while iperf3 runs: a new veth pair into the same VM namespace (same MAC and
//! IP), plugged on hv2 with the same `iface-id`, the old pair removed, a gratuitous ARP from
//! the VM on its new interface. The VM's kernel keeps its sockets (they follow the route), so
//! a reset would be the network's doing. The CMS's steps are OVN's: `requested-chassis=hv1,hv2`
//! with an `activation-strategy` first, `requested-chassis=hv2` at the end.

use std::time::Duration;

use hf_testkit::{Iperf3Opts, VmIface};

use super::fixture::{add_vm1_security_group, cluster, wait};

#[test]
fn kernel_tcp_survives_a_live_migration_between_chassis() {
    let Some(cl) = cluster("kernel_tcp_survives_a_live_migration_between_chassis") else {
        return;
    };
    // vm1 may connect out, nothing may connect in: what reaches it after the move is let in by
    // the conntrack state that moved with it.
    add_vm1_security_group(&cl.central);
    let (vm1, vm3) = (cl.vms[0].clone(), cl.vms[2].clone());
    let _ = vm1.ping("10.0.2.13", 2);
    let _srv = vm3.iperf3_server("10.0.2.13", 5201).unwrap();
    let mut o = Iperf3Opts::new("10.0.2.13", 5201)
        .duration(Duration::from_secs(10))
        .interval(Duration::from_millis(500))
        .reverse();
    o.bitrate = Some("40M".into());
    let run = vm1.iperf3_spawn(&o).unwrap();
    std::thread::sleep(Duration::from_millis(1500));

    // The CMS's first step.
    cl.nbctl(&[
        "--wait=hv",
        "lsp-set-options",
        "vm1",
        "requested-chassis=hv1,hv2",
        "activation-strategy=garp",
    ]);
    // The destination's interface, plugged while the VM still runs on hv1.
    let new = cl
        .lab
        .attach(
            &vm1,
            cl.hv[1].ns(),
            "tap1b",
            &VmIface {
                ifname: "eth1".into(),
                mac: Some("0a:00:00:00:00:01".into()),
                mtu: Some(super::fixture::VM_MTU),
                ..VmIface::default()
            },
        )
        .unwrap();
    cl.hv[1].plug("tap1b", "vm1").unwrap();
    // The hypervisor's pause: the VM stops on hv1 and resumes on hv2 with the same address,
    // and announces itself.
    vm1.link_down("eth0").unwrap();
    vm1.ip(&["addr", "del", "10.0.1.11/24", "dev", "eth0"])
        .unwrap();
    vm1.addr_add("eth1", "10.0.1.11/24").unwrap();
    vm1.route_add("0.0.0.0/0", "10.0.1.1").unwrap();
    vm1.garp("eth1", "10.0.1.11").unwrap();
    // The old attachment goes; the CMS's last step.
    cl.vsctl(0, &["del-port", "br-int", "tap1"]);
    vm1.ip(&["link", "del", "eth0"]).unwrap();
    cl.nbctl(&[
        "--wait=hv",
        "lsp-set-options",
        "vm1",
        "requested-chassis=hv2",
    ]);
    let r = run
        .finish()
        .unwrap_or_else(|e| panic!("the transfer failed: {e}\n{}", cl.logs()));
    eprintln!(
        "migration: {} bytes, longest stall {:.1} s, {:?} retransmits",
        r.received_bytes,
        r.longest_stall(),
        r.retransmits
    );
    let late: u64 = r
        .intervals
        .iter()
        .filter(|i| i.start >= 8.0)
        .map(|i| i.bytes)
        .sum();
    assert!(
        late > 0,
        "nothing moved after the migration: {r:?}\n{}",
        cl.logs()
    );
    // vm1 now lives on hv2: it answers from there, and hv2's datapath says the port moved in.
    assert!(
        wait(Duration::from_secs(10), || vm1
            .ping("10.0.2.13", 1)
            .is_ok_and(|p| p.received == 1)),
        "{}",
        cl.logs()
    );
    // hv2's datapath pulled vm1's connections from hv1's over the state channel.
    let migrations = super::common::run_ok(
        std::process::Command::new("ovs-appctl")
            .arg("-t")
            .arg(cl.hv[1].dir().join("dp.ctl"))
            .arg("datapath/migrations"),
    );
    eprintln!("{migrations}");
    let line = migrations
        .lines()
        .find(|l| l.starts_with("port=vm1 "))
        .unwrap_or_else(|| panic!("no migration of vm1 on hv2: {migrations}\n{}", cl.logs()));
    assert!(line.contains("outcome=completed"), "{line}");
    let moved: u64 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("moved="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(moved > 0, "no connection moved: {line}");
    let _ = new;
}
