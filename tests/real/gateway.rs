//! Through the gateway and the security group, on real namespaces with kernel TCP: SNAT to
//! the external namespace (it sees the SNAT address), a stateful ACL that drops new inbound
//! connections and lets replies in, and DHCP giving a namespace its address with busybox
//! `udhcpc` and the harness's own script (nothing outside the namespace changes). The network
//! is hf-testkit's [`GatewayNet`]: hv1, hv2 and the gateway chassis gw1, the provider network
//! reaching the external namespace through gw1.

use std::time::Duration;

use hf_testkit::holdfast::GatewayNet;
use hf_testkit::{Iperf3Opts, Lab, Netns, VmIface};

use super::common;
use super::fixture::{TEST_TOOLS, add_vm1_security_group, wait};

fn net(test: &str) -> Option<(Lab, GatewayNet)> {
    if !hf_testkit::require_root(test, "network namespaces and veth pairs")
        || !hf_testkit::require_tools(test, TEST_TOOLS)
        || !hf_testkit::require_tools(test, &["conntrack", "nft", "busybox"])
    {
        return None;
    }
    let lab = Lab::new().unwrap();
    let net = GatewayNet::build(&lab, &common::holdfast()).unwrap();
    Some((lab, net))
}

fn vm(lab: &Lab, net: &GatewayNet, name: &str, on: usize, mac: &str, ip: &str) -> Netns {
    net.vm(lab, name, on, &format!("t{name}"), mac, ip)
        .unwrap_or_else(|e| panic!("{e}\n{}", net.logs()))
}

/// From VMs on both hypervisors: the external namespace is reached through the router's SNAT
/// on gw1, and sees 172.16.0.100 as the source of every connection (its own kernel conntrack
/// says so), never a VM's address.
#[test]
fn snat_to_the_external_namespace() {
    let Some((lab, net)) = net("snat_to_the_external_namespace") else {
        return;
    };
    let vm1 = vm(&lab, &net, "vm1", 0, "0a:00:00:00:00:01", "10.0.1.11");
    let vm2 = vm(&lab, &net, "vm2", 1, "0a:00:00:00:00:02", "10.0.1.12");
    net.ext.track_connections().unwrap();
    for (v, port) in [(&vm1, 7001), (&vm2, 7002)] {
        assert!(
            wait(Duration::from_secs(30), || v
                .ping("172.16.0.10", 1)
                .is_ok_and(|p| p.received == 1)),
            "no ping to ext\n{}",
            net.logs()
        );
        let x = hf_testkit::nc_exchange(&net.ext, v, "172.16.0.10", port, b"GET /", b"200 OK")
            .unwrap_or_else(|e| panic!("{e}\n{}", net.logs()));
        assert_eq!(
            (&x.server_got[..], &x.client_got[..]),
            (&b"GET /"[..], &b"200 OK"[..])
        );
        let seen: Vec<String> = net
            .ext
            .conntrack()
            .unwrap()
            .into_iter()
            .filter(|e| e.proto == "tcp" && e.orig.dport == Some(port))
            .map(|e| e.orig.src.to_string())
            .collect();
        assert_eq!(seen, ["172.16.0.100"], "what ext saw for port {port}");
    }
    let _srv = net.ext.iperf3_server("172.16.0.10", 5201).unwrap();
    let r = vm1
        .iperf3(&Iperf3Opts::new("172.16.0.10", 5201).duration(Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("{e}\n{}", net.logs()));
    assert!(r.received_bytes > 0, "{r:?}");
}

/// A stateful ACL (vm1's security group: it may connect out, nothing may connect in): vm1's
/// connections to vm2 work, the data vm2 sends back on them included (let in by conntrack as
/// replies), and vm2 cannot connect to vm1.
#[test]
fn a_stateful_acl_drops_new_inbound_and_lets_replies_in() {
    let Some((lab, net)) = net("a_stateful_acl_drops_new_inbound_and_lets_replies_in") else {
        return;
    };
    let vm1 = vm(&lab, &net, "vm1", 0, "0a:00:00:00:00:01", "10.0.1.11");
    let vm2 = vm(&lab, &net, "vm2", 1, "0a:00:00:00:00:02", "10.0.1.12");
    add_vm1_security_group(&net.central);
    let _ = vm1.ping("10.0.1.12", 2);
    // vm2's data flows to vm1 on the connection vm1 opened.
    let _srv = vm2.iperf3_server("10.0.1.12", 5201).unwrap();
    let r = vm1
        .iperf3(
            &Iperf3Opts::new("10.0.1.12", 5201)
                .duration(Duration::from_secs(2))
                .reverse(),
        )
        .unwrap_or_else(|e| panic!("{e}\n{}", net.logs()));
    assert!(r.received_bytes > 0, "{r:?}");
    // vm1 → vm2: new connections work, replies come back.
    let x = hf_testkit::nc_exchange(&vm2, &vm1, "10.0.1.12", 7100, b"hi", b"back")
        .unwrap_or_else(|e| panic!("{e}\n{}", net.logs()));
    assert_eq!(x.client_got, b"back");
    // vm2 → vm1: refused by the security group (nothing reaches vm1's listener).
    let inbound = hf_testkit::nc_exchange(&vm1, &vm2, "10.0.1.11", 7101, b"in?", b"no");
    assert!(
        inbound.is_err(),
        "vm2 connected to vm1 through its security group"
    );
    assert!(
        vm2.ping("10.0.1.11", 2).map_or(true, |p| p.received == 0),
        "a ping got in"
    );
}

/// DHCP from holdfast's datapath: a VM namespace with the logical port's MAC and no address
/// asks with busybox `udhcpc` (the harness's own script records the offer and configures only
/// that namespace) and gets the port's address, router and lease time; then it reaches vm1.
#[test]
fn dhcp_gives_a_namespace_its_address() {
    let Some((lab, net)) = net("dhcp_gives_a_namespace_its_address") else {
        return;
    };
    let vm1 = vm(&lab, &net, "vm1", 0, "0a:00:00:00:00:01", "10.0.1.11");
    let uuid = net
        .central
        .nbctl(&["dhcp-options-create", "10.0.1.0/24"])
        .unwrap();
    let uuid = net
        .central
        .nbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "DHCP_Options",
            "cidr=\"10.0.1.0/24\"",
        ])
        .map(|u| if u.trim().is_empty() { uuid.clone() } else { u })
        .unwrap();
    let uuid = uuid.trim();
    net.central
        .nbctl_all(&[
            &[
                "dhcp-options-set-options",
                uuid,
                "lease_time=3600",
                "router=10.0.1.1",
                "server_id=10.0.1.1",
                "server_mac=02:00:00:00:01:01",
            ],
            &["lsp-add", "ls1", "vm4"],
            &["lsp-set-addresses", "vm4", "0a:00:00:00:00:04 10.0.1.14"],
            &["lsp-set-dhcpv4-options", "vm4", uuid],
        ])
        .unwrap();
    let vm4 = lab.netns("vm4").unwrap();
    lab.attach(
        &vm4,
        net.chassis[1].ns(),
        "tvm4",
        &VmIface {
            mac: Some("0a:00:00:00:00:04".into()),
            mtu: Some(hf_testkit::holdfast::VM_MTU),
            ..VmIface::default()
        },
    )
    .unwrap();
    net.chassis[1].plug("tvm4", "vm4").unwrap();
    net.chassis[1]
        .wait_installed("tvm4", Duration::from_secs(60))
        .unwrap();
    let lease = vm4
        .dhcp("eth0", Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}\n{}", net.logs()));
    assert_eq!(lease.ip, "10.0.1.14", "{lease:?}");
    assert_eq!(lease.prefix, 24, "{lease:?}");
    assert_eq!(lease.routers, ["10.0.1.1"], "{lease:?}");
    assert_eq!(lease.lease_secs, Some(3600), "{lease:?}");
    assert!(
        wait(Duration::from_secs(20), || vm4
            .ping("10.0.1.11", 1)
            .is_ok_and(|p| p.received == 1)),
        "{}",
        net.logs()
    );
    let _ = vm1;
}

/// `ovn-nbctl --bfd` state of the session to 172.16.0.10 as holdfast northd writes it back
/// into NB, and SB's (the datapath's finding, which the controller writes).
fn bfd_status(net: &GatewayNet) -> (String, String) {
    let nb = net
        .central
        .nbctl(&[
            "--bare",
            "--columns=status",
            "find",
            "BFD",
            "dst_ip=172.16.0.10",
        ])
        .unwrap_or_default();
    let sb = hf_testkit::cmd::run(
        std::process::Command::new("ovn-sbctl")
            .arg(format!("--db={}", net.central.sb))
            .args([
                "--bare",
                "--columns=status",
                "find",
                "BFD",
                "dst_ip=172.16.0.10",
            ]),
        Duration::from_secs(30),
    )
    .unwrap_or_default();
    (nb.trim().to_string(), sb.trim().to_string())
}

/// BIRD 2 in the external namespace, one BFD session to the router's gateway port.
fn start_bird(lab: &Lab, net: &GatewayNet) -> hf_testkit::Proc {
    let dir = lab.dir();
    let conf = dir.join("bird.conf");
    std::fs::write(
        &conf,
        "router id 172.16.0.10;\n\
         protocol device { }\n\
         protocol bfd {\n\
         \tinterface \"eth0\" { interval 300 ms; multiplier 3; };\n\
         \tneighbor 172.16.0.1 dev \"eth0\" local 172.16.0.10;\n\
         }\n",
    )
    .unwrap();
    let sock = dir.join("bird.ctl");
    net.ext
        .spawn(
            "bird",
            &[
                "bird",
                "-f",
                "-c",
                conf.to_str().unwrap_or_default(),
                "-s",
                sock.to_str().unwrap_or_default(),
            ],
        )
        .unwrap()
}

/// What BIRD says of its session to 172.16.0.1 (`birdc show bfd sessions`).
fn bird_session(lab: &Lab, net: &GatewayNet) -> String {
    let sock = lab.dir().join("bird.ctl");
    net.ext
        .run(&[
            "birdc",
            "-s",
            sock.to_str().unwrap_or_default(),
            "show",
            "bfd",
            "sessions",
        ])
        .unwrap_or_default()
        .lines()
        .find(|l| l.contains("172.16.0.1 "))
        .unwrap_or_default()
        .to_string()
}

/// BFD from a router port to its next hop, with a real peer: a static route with `--bfd` to
/// 198.51.100.0/24 via 172.16.0.10, where BIRD 2 runs BFD. The gateway chassis's datapath
/// brings the session up with BIRD (both ends say Up; SB and NB `BFD.status` are `up`) and vm1
/// reaches 198.51.100.1 through the route; BIRD killed, the session goes down within its
/// detection time, northd takes the route out and the address is unreachable; BIRD started
/// again, the session comes back up and so does the route.
#[test]
fn next_hop_bfd_with_bird_takes_the_route_out_and_back() {
    let test = "next_hop_bfd_with_bird_takes_the_route_out_and_back";
    if !hf_testkit::require_root(test, "network namespaces and veth pairs")
        || !hf_testkit::require_tools(test, &["bird", "birdc", "ovn-sbctl"])
    {
        return;
    }
    let Some((lab, mut net)) = net(test) else {
        return;
    };
    let vm1 = vm(&lab, &net, "vm1", 0, "0a:00:00:00:00:01", "10.0.1.11");
    net.ext.ip(&["link", "set", "lo", "up"]).unwrap();
    net.ext
        .ip(&["addr", "add", "198.51.100.1/32", "dev", "lo"])
        .unwrap();
    net.central
        .nbctl(&[
            "--bfd",
            "lr-route-add",
            "lr0",
            "198.51.100.0/24",
            "172.16.0.10",
            "lr0-ext",
        ])
        .unwrap();
    let reaches = |want: bool| {
        wait(Duration::from_secs(30), || {
            vm1.ping("198.51.100.1", 1)
                .is_ok_and(|p| (p.received == 1) == want)
        })
    };
    let up = |lab: &Lab, net: &GatewayNet| {
        wait(Duration::from_secs(60), || {
            bfd_status(net) == ("up".into(), "up".into()) && bird_session(lab, net).contains(" Up ")
        })
    };
    // Before a peer: the session is down and so is the route.
    assert!(
        wait(Duration::from_secs(30), || bfd_status(&net).0 == "down"),
        "status {:?}\n{}",
        bfd_status(&net),
        net.logs()
    );
    assert!(reaches(false), "198.51.100.1 reached with no BFD peer");
    let mut bird = start_bird(&lab, &net);
    assert!(
        up(&lab, &net),
        "status {:?}, BIRD: {:?}\n{}\n{}",
        bfd_status(&net),
        bird_session(&lab, &net),
        bird.log(),
        net.logs()
    );
    assert!(
        reaches(true),
        "no route to 198.51.100.1 with BFD up\n{}",
        net.logs()
    );
    // A hitless takeover of gw1's datapath while the session is up: the new process runs it
    // on (protocol 10), so BIRD never sees it change (state and "since" as they were) and SB
    // stays `up`.
    let state_since = |lab: &Lab, net: &GatewayNet| -> Vec<String> {
        bird_session(lab, net)
            .split_whitespace()
            .skip(2)
            .take(2)
            .map(str::to_string)
            .collect()
    };
    let before = state_since(&lab, &net);
    assert_eq!(before.first().map(String::as_str), Some("Up"), "{before:?}");
    let old = net.chassis[2].take_over_datapath().unwrap();
    if let Some(mut old) = old {
        old.wait(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("the old datapath did not exit: {e}\n{}", net.logs()));
    }
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(200));
        let now = state_since(&lab, &net);
        assert_eq!(
            (now.clone(), bfd_status(&net)),
            (before.clone(), ("up".into(), "up".into())),
            "the session moved during gw1's datapath takeover\n{}",
            net.logs()
        );
    }
    assert!(
        reaches(true),
        "no route after gw1's datapath takeover\n{}",
        net.logs()
    );
    // BIRD dies without a word: the detection time runs out.
    bird.kill();
    let killed = std::time::Instant::now();
    assert!(
        wait(Duration::from_secs(30), || bfd_status(&net)
            == ("down".into(), "down".into())),
        "status {:?} after BIRD died\n{}",
        bfd_status(&net),
        net.logs()
    );
    eprintln!(
        "next-hop BFD: down in SB {:?} after BIRD died (detection time 3 x 1 s)",
        killed.elapsed()
    );
    assert!(reaches(false), "the route stayed with its BFD session down");
    let bird2 = start_bird(&lab, &net);
    assert!(
        up(&lab, &net),
        "status {:?}, BIRD: {:?} after BIRD came back\n{}\n{}",
        bfd_status(&net),
        bird_session(&lab, &net),
        bird2.log(),
        net.logs()
    );
    assert!(reaches(true), "the route did not come back\n{}", net.logs());
}
