//! Incident C's world (`../shared/incidents/003`), shared by `tests/incidents.rs`, the
//! `migration` benchmark and the sandbox: the default topology's shape with a provider
//! network, a VM with its own egress address (a distributed `dnat_and_snat`) and a
//! Neutron-style security group, an external host on the provider network and an east-west
//! peer, and the two paced streams every migration case runs. Also the incident's own design,
//! OVN-Kubernetes' layer 2 ([`ovnk_topology`]), whose network without hosts
//! ([`ovnk_gateways`]) the sandbox's `--topology ovnk-l2` builds too.
//!
//! What it does not do: assert anything (its users do) or migrate (see [`super::migrate`]).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::net::{Direction, HostConfig, Transfer};
use crate::world::World;
use crate::world::nb::{self, Nat, Txn};

/// The VM that migrates, its floating (per-VM egress) address and external MAC.
pub const VM: &str = "vm1";
pub const VM_IP: &str = "10.0.1.11";
pub const FIP: &str = "172.16.0.50";
pub const FIP_MAC: &str = "02:00:00:00:ee:01";
/// The external host, on the provider network `physnet1`.
pub const EXT: &str = "ext1";
pub const EXT_IP: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 10);
/// The east-west peer (another switch, another hypervisor).
pub const PEER: &str = "vm3";
pub const PEER_IP: &str = "10.0.2.13";

/// Parses a constant address of this module.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("a test address")
}

/// The default topology's shape with a provider network: switches ls1 and ls2 behind the
/// distributed router lr0, whose gateway port lr0-ext (on gw1) reaches switch `ext`, whose
/// localnet port reaches `physnet1`, where the external host lives. Everything SNATs to
/// 172.16.0.100 on the gateway, except the VM, whose distributed `dnat_and_snat` gives it its
/// own address wherever it runs.
pub fn topology() -> Vec<Txn> {
    let mut t = vec![
        nb::router("lr0"),
        nb::switch("ls1"),
        nb::switch("ls2"),
        nb::switch("ext"),
        nb::router_port("lr0", "lr0-ls1", "00:00:00:00:ff:01", &["10.0.1.1/24"]),
        nb::router_port("lr0", "lr0-ls2", "00:00:00:00:ff:02", &["10.0.2.1/24"]),
        nb::router_port("lr0", "lr0-ext", "00:00:00:00:ff:10", &["172.16.0.1/24"]),
        nb::patch("ls1", "ls1-lr0", "lr0-ls1"),
        nb::patch("ls2", "ls2-lr0", "lr0-ls2"),
        nb::patch("ext", "ext-lr0", "lr0-ext"),
        nb::set_port_options("ext-lr0", &[("nat-addresses", "router")], &[]),
        nb::localnet("ext", "ln-ext", "physnet1"),
        nb::gateway_chassis("lr0-ext", "gw1", 20),
        nb::nat(
            "lr0",
            Nat {
                kind: "snat",
                external_ip: "172.16.0.100",
                logical_ip: "10.0.0.0/16",
                logical_port: None,
            },
        ),
        nb::nat(
            "lr0",
            Nat {
                kind: "dnat_and_snat",
                external_ip: FIP,
                logical_ip: VM_IP,
                logical_port: Some((VM, FIP_MAC)),
            },
        ),
        nb::vif("ls1", VM, "00:00:00:00:01:0b", VM_IP, "hv1"),
        nb::vif("ls1", "vm2", "00:00:00:00:01:0c", "10.0.1.12", "hv2"),
        nb::vif("ls2", PEER, "00:00:00:00:02:0d", PEER_IP, "hv3"),
    ];
    t.extend(security_group("ls1"));
    t
}

/// A Neutron-style security group on the VM's port, as ACLs of its switch `sw`: egress allowed
/// with allow-related, ingress only what is related, everything else dropped.
pub fn security_group(sw: &str) -> Vec<Txn> {
    let mut t = Vec::new();
    for (dir, prio, m, action) in [
        (
            "from-lport",
            1002,
            format!("inport == \"{VM}\" && ip4"),
            "allow-related",
        ),
        (
            "from-lport",
            1001,
            format!("inport == \"{VM}\" && ip"),
            "drop",
        ),
        (
            "to-lport",
            1001,
            format!("outport == \"{VM}\" && ip"),
            "drop",
        ),
    ] {
        t.push(nb::acl(sw, dir, prio, &m, action));
    }
    t
}

/// The VM's address on the OVN-Kubernetes-shaped layer-2 network.
pub const OVNK_VM_IP: &str = "10.100.0.11";
/// The east-west peer's on that network.
pub const OVNK_PEER_IP: &str = "10.100.0.13";
/// The OVN-Kubernetes layer-2 network's switch, spanning the nodes.
pub const OVNK_SWITCH: &str = "l2";
/// Its subnet (what every node's gateway router SNATs).
pub const OVNK_CIDR: &str = "10.100.0.0/24";
/// The gateway address every node's gateway router has on [`OVNK_SWITCH`].
pub const OVNK_GATEWAY_IP: &str = "10.100.0.1";
/// The gateway MAC every node's gateway router has on [`OVNK_SWITCH`] (OVN-Kubernetes derives
/// it from the address: `0a:58` and the IPv4 octets).
pub const OVNK_GATEWAY_MAC: &str = "0a:58:0a:64:00:01";
/// The provider network every node's external switch reaches.
pub const OVNK_PHYSNET: &str = "physnet1";

/// One node of the OVN-Kubernetes layer-2 design: the names and addresses
/// [`ovnk_gateways`] gives its gateway router and external switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvnkNode {
    /// The chassis (the router's `options:chassis`).
    pub chassis: String,
    /// The gateway router, `GR_<chassis>`.
    pub router: String,
    /// The router's port on [`OVNK_SWITCH`], `rtos-<chassis>` ([`OVNK_GATEWAY_MAC`],
    /// [`OVNK_GATEWAY_IP`]/24 on every node).
    pub switch_port: String,
    /// The switch's side of that patch, `stor-<chassis>`.
    pub switch_patch: String,
    /// The router's port on the external switch, `rtoe-<chassis>`.
    pub ext_port: String,
    /// That port's MAC, `0a:58:ac:10:00:NN` with NN the node address's last octet.
    pub ext_mac: String,
    /// The external switch, `ext_<chassis>`.
    pub ext_switch: String,
    /// The external switch's side of the patch, `etor-<chassis>`.
    pub ext_patch: String,
    /// The external switch's localnet port (`ln-ext_<chassis>`, on [`OVNK_PHYSNET`]).
    pub localnet: String,
    /// The node's own address on the provider network (172.16.0.11 for the first node, .12
    /// for the second, ...): the router's external address and the SNAT target.
    pub node_ip: String,
}

/// The nodes of [`ovnk_gateways`] over `nodes`, in order.
pub fn ovnk_nodes(nodes: &[&str]) -> Vec<OvnkNode> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, n)| OvnkNode {
            chassis: n.to_string(),
            router: format!("GR_{n}"),
            switch_port: format!("rtos-{n}"),
            switch_patch: format!("stor-{n}"),
            ext_port: format!("rtoe-{n}"),
            ext_mac: format!("0a:58:ac:10:00:{:02x}", 11 + i),
            ext_switch: format!("ext_{n}"),
            ext_patch: format!("etor-{n}"),
            localnet: format!("ln-ext_{n}"),
            node_ip: format!("172.16.0.{}", 11 + i),
        })
        .collect()
}

/// The OVN-Kubernetes layer-2 design's network, without hosts: one switch [`OVNK_SWITCH`]
/// ([`OVNK_CIDR`]) spanning the nodes, and on every node a gateway router (`options:chassis`)
/// attached to it with the same gateway address and MAC ([`OVNK_GATEWAY_IP`],
/// [`OVNK_GATEWAY_MAC`]), whose SNAT rewrites the network to that node's own address on the
/// provider network (172.16.0.11 for the first node, .12 for the second, ...), through the node's external switch and its
/// localnet port on [`OVNK_PHYSNET`] (see [`ovnk_nodes`]). A VM's egress leaves through the
/// gateway router of the node it runs on: after a migration, with another source address.
/// The VMs are the caller's (ports on [`OVNK_SWITCH`] with [`OVNK_GATEWAY_IP`] as gateway).
pub fn ovnk_gateways(nodes: &[&str]) -> Vec<Txn> {
    let mut t = vec![nb::switch(OVNK_SWITCH)];
    for n in ovnk_nodes(nodes) {
        t.push(nb::router(&n.router));
        t.push(nb::set_router_options(
            &n.router,
            &[("chassis", &n.chassis)],
        ));
        t.push(nb::router_port(
            &n.router,
            &n.switch_port,
            OVNK_GATEWAY_MAC,
            &[&format!("{OVNK_GATEWAY_IP}/24")],
        ));
        t.push(nb::patch(OVNK_SWITCH, &n.switch_patch, &n.switch_port));
        t.push(nb::switch(&n.ext_switch));
        t.push(nb::router_port(
            &n.router,
            &n.ext_port,
            &n.ext_mac,
            &[&format!("{}/24", n.node_ip)],
        ));
        t.push(nb::patch(&n.ext_switch, &n.ext_patch, &n.ext_port));
        t.push(nb::localnet(&n.ext_switch, &n.localnet, OVNK_PHYSNET));
        t.push(nb::nat(
            &n.router,
            Nat {
                kind: "snat",
                external_ip: &n.node_ip,
                logical_ip: OVNK_CIDR,
                logical_port: None,
            },
        ));
    }
    t
}

/// The incident's OVN-Kubernetes layer-2 world: [`ovnk_gateways`] over `nodes`, the VM on the
/// first hypervisor (hv1) and the east-west peer on hv3, both on [`OVNK_SWITCH`], and the VM's
/// security group.
pub fn ovnk_topology(nodes: &[&str]) -> Vec<Txn> {
    let mut t = ovnk_gateways(nodes);
    t.push(nb::vif(
        OVNK_SWITCH,
        VM,
        "00:00:00:00:01:0b",
        OVNK_VM_IP,
        "hv1",
    ));
    t.push(nb::vif(
        OVNK_SWITCH,
        PEER,
        "00:00:00:00:02:0d",
        OVNK_PEER_IP,
        "hv3",
    ));
    t.extend(security_group(OVNK_SWITCH));
    t
}

/// The OVN-Kubernetes-shaped world (see [`ovnk_topology`]) on hv1, hv2, hv3, ready.
pub fn ovnk_world(seed: u64) -> World {
    build(
        seed,
        &["hv1", "hv2", "hv3"],
        ovnk_topology(&["hv1", "hv2", "hv3"]),
    )
}

/// The world, ready: every port bound, neighbours warm. Panics when it does not come up
/// within 30 s of virtual time (a broken build, not an input error).
pub fn world(seed: u64) -> World {
    build(seed, &["hv1", "hv2", "hv3", "gw1"], topology())
}

fn build(seed: u64, chassis: &[&str], nb: Vec<Txn>) -> World {
    let mut w = World::holdfast(seed, chassis);
    w.nb_all(nb).expect("NB");
    w.add_net_host(
        "physnet1",
        EXT,
        HostConfig::new(EXT, [0, 0, 0, 0, 0x10, 0x0a], seed ^ 0xe).with_ipv4(
            EXT_IP,
            24,
            Some(Ipv4Addr::new(172, 16, 0, 1)),
        ),
    )
    .expect("external host");
    w.await_ports_ready("the world");
    w.run_for(Duration::from_millis(200));
    w
}

/// The streams' pace, bytes per second (8 Mbit/s): long enough to span every migration, slow
/// enough that pacing, not the window, sets the pace.
pub const RATE: u64 = 1_000_000;

/// The two streams of a case, by the VM's connection names.
#[derive(Debug, Clone)]
pub struct Streams {
    /// The download from the external host (the VM's connection name).
    pub download: String,
    /// The east-west upload to the peer.
    pub east_west: String,
}

/// A paced download from the external host (through the VM's floating IP) and a paced
/// east-west upload to the peer, both from the VM, `bytes` each, after warm-up pings (the
/// first time); runs until both are going. Panics when they do not get going (a broken
/// build).
pub fn start_streams(w: &mut World, bytes: u64) -> Streams {
    start_streams_to(w, bytes, PEER_IP)
}

/// [`start_streams`] with the peer at `peer_ip` (the OVN-Kubernetes-shaped world's).
pub fn start_streams_to(w: &mut World, bytes: u64, peer_ip: &str) -> Streams {
    // The listeners stay from an earlier call (they accept any number of connections).
    if w.tcp_listen(EXT, 80).is_ok() {
        w.tcp_listen(PEER, 5001).expect("listen");
        // Warm-up: neighbours learned on every path.
        for dst in [EXT_IP.to_string(), peer_ip.to_string()] {
            w.ping(VM, ip(&dst), 2, Duration::from_millis(20))
                .expect("ping");
            w.run_for(Duration::from_millis(1100));
        }
    }
    let now = w.now();
    let host = w.host_mut(VM).expect("vm");
    let download = host
        .start_transfer_with(
            IpAddr::V4(EXT_IP),
            80,
            Transfer {
                direction: Direction::Download,
                bytes,
                rate: Some(RATE),
            },
            now,
        )
        .expect("download");
    let east_west = host
        .start_transfer_with(
            ip(peer_ip),
            5001,
            Transfer {
                direction: Direction::Upload,
                bytes,
                rate: Some(RATE),
            },
            now,
        )
        .expect("east-west");
    w.run_for(Duration::from_millis(300));
    for n in [&download, &east_west] {
        let r = w.tcp_record(VM, n).expect("record");
        assert!(
            r.established_us.is_some() && r.bytes_received + r.bytes_acked > 0,
            "{n} did not get going: {r:?}\nlog:\n{}",
            w.take_log().join("\n")
        );
    }
    Streams {
        download,
        east_west,
    }
}
