//! Connectivity on real interfaces: L2, L3, TCP, the write-back, attach and detach.

use std::time::Duration;

use super::fixture::{cluster, wait};

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
    // On one chassis (vm1 and vm3 on hv1): super-frames cross the datapath whole.
    let r = vm1
        .iperf3(&hf_testkit::Iperf3Opts::new("10.0.2.13", 5201).duration(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("{e}\n{}", cl.logs()));
    assert!(r.received_bytes > 0 && r.error.is_none(), "{r:?}");
    eprintln!(
        "iperf3 vm1 -> vm3 on one chassis through lr0: {:.2} Gb/s, {:?} retransmits",
        r.bits_per_second / 1e9,
        r.retransmits
    );
    let r = vm2
        .iperf3(&hf_testkit::Iperf3Opts::new("10.0.2.13", 5201).duration(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("{e}\n{}", cl.logs()));
    assert!(r.received_bytes > 0 && r.error.is_none(), "{r:?}");
    eprintln!(
        "iperf3 vm2 -> vm3 across chassis through lr0: {:.2} Gb/s, {:?} retransmits",
        r.bits_per_second / 1e9,
        r.retransmits
    );
    // vm2's super-frames crossed hv2's datapath whole and left in UDP GSO sends.
    let cov = super::common::run_ok(
        std::process::Command::new("ovs-appctl")
            .arg("-t")
            .arg(cl.hv[1].dir().join("dp.ctl"))
            .arg("coverage/show"),
    );
    let gso: u64 = cov
        .lines()
        .find_map(|l| l.strip_prefix("tx_tunnel_gso_sends "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    assert!(gso > 0, "no UDP GSO send into the tunnel: {cov}");
    // The datapath's write-back, read with real ovs-vsctl.
    let hv1 = |args: &[&str]| cl.vsctl(0, args);
    let ofport = hv1(&["get", "Interface", "tap1", "ofport"]);
    assert!(ofport.trim().parse::<i64>().unwrap() > 0, "{ofport}");
    assert_eq!(
        hv1(&["get", "Interface", "tap1", "link_state"]).trim(),
        "up"
    );
    assert_eq!(hv1(&["get", "Interface", "tap1", "error"]).trim(), "[]");
    // Without --no-wait, ovs-vsctl waits for cur_cfg: it returns.
    hv1(&["set", "Interface", "tap1", "external_ids:note=x"]);
    // A port that does not exist is reported as OVS reports it.
    hv1(&["add-port", "br-int", "nosuch0"]);
    let ok = wait(Duration::from_secs(10), || {
        hv1(&["get", "Interface", "nosuch0", "error"])
            .contains("could not open network device nosuch0 (No such device)")
    });
    assert!(ok, "{}", hv1(&["list", "Interface", "nosuch0"]));
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
    cl.vsctl(1, &["del-port", "br-int", "tap2"]);
    let gone = wait(Duration::from_secs(20), || {
        vm1.ping("10.0.1.12", 1).map_or(true, |p| p.received == 0)
    });
    assert!(gone, "vm2 still answers after del-port\n{}", cl.logs());
    cl.hv[1].plug("tap2", "vm2").unwrap();
    let back = wait(Duration::from_secs(30), || {
        vm2.ping("10.0.1.11", 1).is_ok_and(|p| p.received == 1)
    });
    assert!(back, "vm2 unreachable after add-port\n{}", cl.logs());
}
