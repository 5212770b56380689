//! Incident A's world (`../shared/incidents/000`), shared by `tests/incidents.rs` and the
//! sandbox's `--scenario snat-exemption`: OVN-Kubernetes' shared-gateway design on one node
//! (the node switch, `ovn_cluster_router`, the join switch and the node's gateway router
//! `GR_node1` on the provider network), a pod with the incident's per-pod `snat` row
//! (`logical_ip` the pod, `external_ip` the node), and three machines on the provider network:
//! - `etcd`, the host network of another control-plane node, whose server checks its client's
//!   identity the way mutual TLS bound to the pod's address does: it refuses every peer address
//!   but the pod's ([`crate::net::Host::listen_tcp_from`]);
//! - `client`, which reaches the pod through a NodePort-like load balancer on the gateway
//!   router (the node's address, port 30080), so the DNAT replies go back through the router
//!   whose SNAT is being scoped;
//! - `outside`, a service outside the cluster's host networks, which must still see the node's
//!   address (scoping must not just switch the SNAT off).
//!
//! [`Scoping`] chooses how the `snat` row is kept off cluster-internal destinations: not at all
//! (the incident), `exempted_ext_ips`, `allowed_ext_ips` (both OVN 23.03) or the NAT `match`
//! (OVN 24.09's column, a schema extension of holdfast's).
//!
//! What it does not do: assert anything (its users do).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde_json::{Value, json};

use crate::net::{Direction, HostConfig, Transfer};
use crate::world::World;
use crate::world::nb::{self, Nat, Txn};

/// The pod, its address and MAC.
pub const POD: &str = "pod1";
pub const POD_IP: &str = "10.129.0.9";
/// The node the pod runs on, its chassis and its address on the provider network.
pub const NODE_CHASSIS: &str = "hv1";
pub const NODE_IP: &str = "10.6.158.12";
/// The gateway router and the per-pod `snat` row's router.
pub const GR: &str = "GR_node1";
/// The provider network.
pub const PHYSNET: &str = "physnet1";
/// The cluster's host networks (the control-plane nodes' addresses): what `exempted_ext_ips`
/// exempts and `NB_Global options:holdfast-cluster-cidrs` names.
pub const HOST_NETWORKS: &str = "10.6.158.0/25";
/// Host-network etcd on another control-plane node, and its port.
pub const ETCD: &str = "etcd";
pub const ETCD_IP: Ipv4Addr = Ipv4Addr::new(10, 6, 158, 13);
pub const ETCD_PORT: u16 = 2379;
/// The NodePort client, the node port and the pod's port behind it.
pub const CLIENT: &str = "client";
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 6, 158, 150);
pub const NODE_PORT: u16 = 30080;
pub const POD_PORT: u16 = 8080;
/// A service outside the cluster (past the host networks) and its port.
pub const OUTSIDE: &str = "outside";
pub const OUTSIDE_IP: Ipv4Addr = Ipv4Addr::new(10, 6, 158, 200);
pub const OUTSIDE_PORT: u16 = 443;

/// How the pod's `snat` row is scoped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoping {
    /// Not at all: incident A's row.
    None,
    /// `exempted_ext_ips`: an address set of the cluster's host networks.
    Exempted,
    /// `allowed_ext_ips`: an address set of what lies outside them.
    Allowed,
    /// The NAT `match` (OVN 24.09): `ip4.dst != <host networks>`.
    Match,
}

impl Scoping {
    /// Every form that keeps the row off internal destinations.
    pub const SCOPED: [Scoping; 3] = [Scoping::Exempted, Scoping::Allowed, Scoping::Match];

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scoping::None => "none",
            Scoping::Exempted => "exempted_ext_ips",
            Scoping::Allowed => "allowed_ext_ips",
            Scoping::Match => "match",
        }
    }
}

pub use crate::world::incident_c::ip;

/// `ovn-nbctl lr-route-add ROUTER PREFIX NEXTHOP`.
fn route(router: &str, prefix: &str, nexthop: &str) -> Txn {
    let l = format!(
        "route_{}",
        format!("{router}_{prefix}").replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    vec![
        json!({"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": l,
            "row": {"ip_prefix": prefix, "nexthop": nexthop}}),
        json!({"op": "mutate", "table": "Logical_Router", "where": [["name", "==", router]],
            "mutations": [["static_routes", "insert", ["set", [["named-uuid", l]]]]]}),
    ]
}

/// The shared-gateway topology and the pod's `snat` row, scoped as `s`.
pub fn topology(s: Scoping) -> Vec<Txn> {
    let mut t = vec![
        nb::switch("node1"),
        nb::switch("join"),
        nb::switch("ext_node1"),
        nb::router("ovn_cluster_router"),
        nb::router(GR),
        nb::set_router_options(GR, &[("chassis", NODE_CHASSIS)]),
        nb::router_port(
            "ovn_cluster_router",
            "rtos-node1",
            "0a:58:0a:81:00:01",
            &["10.129.0.1/24"],
        ),
        nb::router_port(
            "ovn_cluster_router",
            "rtoj-ovn_cluster_router",
            "0a:58:64:40:00:01",
            &["100.64.0.1/16"],
        ),
        nb::router_port(GR, "rtoj-GR_node1", "0a:58:64:40:00:02", &["100.64.0.2/16"]),
        nb::router_port(
            GR,
            "rtoe-GR_node1",
            "02:00:0a:06:9e:0c",
            &[&format!("{NODE_IP}/24")],
        ),
        nb::patch("node1", "stor-node1", "rtos-node1"),
        nb::patch("join", "jtor-ovn_cluster_router", "rtoj-ovn_cluster_router"),
        nb::patch("join", "jtor-GR_node1", "rtoj-GR_node1"),
        nb::patch("ext_node1", "etor-GR_node1", "rtoe-GR_node1"),
        nb::localnet("ext_node1", "lnet-node1", PHYSNET),
        route("ovn_cluster_router", "0.0.0.0/0", "100.64.0.2"),
        route(GR, "10.128.0.0/14", "100.64.0.1"),
        nb::vif("node1", POD, "0a:58:0a:81:00:09", POD_IP, NODE_CHASSIS),
        // The NodePort: the node's address and port to the pod, on the gateway router.
        nb::load_balancer(
            "nodeport-web",
            &format!("{NODE_IP}:{NODE_PORT}"),
            &[&format!("{POD_IP}:{POD_PORT}")],
            "tcp",
            &[],
            &[GR],
        ),
        nb::nat(
            GR,
            Nat {
                kind: "snat",
                external_ip: NODE_IP,
                logical_ip: POD_IP,
                logical_port: None,
            },
        ),
        // What `holdfast check` calls internal beyond what NB shows: the host networks.
        vec![json!({"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [["options", "insert",
                ["map", [["holdfast-cluster-cidrs", format!("10.128.0.0/14,{HOST_NETWORKS}")]]]]]})],
    ];
    if let Some(txn) = scope(s) {
        t.push(txn);
    }
    t
}

/// The transaction that scopes the pod's `snat` row as `s` (`None` for [`Scoping::None`]):
/// what an operator applies to fix incident A's row in place.
pub fn scope(s: Scoping) -> Option<Txn> {
    let row = json!([["type", "==", "snat"], ["logical_ip", "==", POD_IP]]);
    let set = |name: &str, addrs: &[&str]| -> Value {
        json!({"op": "insert", "table": "Address_Set", "uuid-name": "as",
            "row": {"name": name, "addresses": ["set", addrs]}})
    };
    Some(match s {
        Scoping::None => return None,
        Scoping::Exempted => vec![
            set("cluster_host_networks", &[HOST_NETWORKS]),
            json!({"op": "update", "table": "NAT", "where": row,
                "row": {"exempted_ext_ips": ["named-uuid", "as"]}}),
        ],
        Scoping::Allowed => vec![
            // Everything past the host networks: the upper half of the provider subnet here,
            // the Internet in a real cluster.
            set("egress_destinations", &["10.6.158.128/25", "192.0.2.0/24"]),
            json!({"op": "update", "table": "NAT", "where": row,
                "row": {"allowed_ext_ips": ["named-uuid", "as"]}}),
        ],
        Scoping::Match => vec![json!({"op": "update", "table": "NAT", "where": row,
            "row": {"match": format!("ip4.dst != {HOST_NETWORKS}")}})],
    })
}

/// The world with the pod's row scoped as `s`, ready: ports bound, the three machines on the
/// provider network listening (etcd accepting the pod's address only), neighbours warm.
/// Panics when it does not come up within 30 s of virtual time (a broken build).
pub fn world(seed: u64, s: Scoping) -> World {
    let mut w = World::holdfast(seed, &[NODE_CHASSIS, "hv2"]);
    w.nb_all(topology(s)).expect("NB");
    let node = ip(NODE_IP);
    let IpAddr::V4(gw) = node else {
        unreachable!("NODE_IP is IPv4")
    };
    for (name, addr, mac) in [
        (ETCD, ETCD_IP, 0x0d),
        (CLIENT, CLIENT_IP, 0x96),
        (OUTSIDE, OUTSIDE_IP, 0xc8),
    ] {
        // Their route to the pod network is the node (OVN-Kubernetes routes it there too).
        w.add_net_host(
            PHYSNET,
            name,
            HostConfig::new(name, [2, 0, 0x0a, 6, 0x9e, mac], seed ^ u64::from(mac)).with_ipv4(
                addr,
                24,
                Some(gw),
            ),
        )
        .expect("provider network host");
    }
    w.await_ports_ready("the world");
    w.tcp_listen_from(ETCD, ETCD_PORT, &[ip(POD_IP)])
        .expect("etcd listens");
    w.tcp_listen(OUTSIDE, OUTSIDE_PORT).expect("listen");
    w.tcp_listen(POD, POD_PORT).expect("listen");
    // Warm-up: the gateway router learns the machines' MACs.
    for dst in [ETCD_IP, OUTSIDE_IP, CLIENT_IP] {
        w.ping(POD, IpAddr::V4(dst), 1, Duration::from_millis(20))
            .expect("ping");
    }
    w.run_for(Duration::from_millis(1100));
    w
}

/// The connections of one run, by the name each end's record has on the initiating host.
#[derive(Debug, Clone)]
pub struct Conns {
    /// pod → etcd (the pod's client connection).
    pub etcd: String,
    /// pod → outside.
    pub outside: String,
    /// client → node:30080 → pod, a download (the pod's replies cross the router's SNAT).
    pub nodeport: String,
}

/// Opens the three connections, `bytes` each, and runs until they end (at most 10 s).
pub fn run(w: &mut World, bytes: u64) -> Conns {
    let upload = |bytes| Transfer {
        direction: Direction::Upload,
        bytes,
        rate: None,
    };
    let etcd = w
        .tcp_start(POD, IpAddr::V4(ETCD_IP), ETCD_PORT, upload(bytes))
        .expect("etcd");
    let outside = w
        .tcp_start(POD, IpAddr::V4(OUTSIDE_IP), OUTSIDE_PORT, upload(bytes))
        .expect("outside");
    let nodeport = w
        .tcp_start(
            CLIENT,
            ip(NODE_IP),
            NODE_PORT,
            Transfer {
                direction: Direction::Download,
                bytes,
                rate: None,
            },
        )
        .expect("nodeport");
    let c = Conns {
        etcd,
        outside,
        nodeport,
    };
    let done = |w: &World| {
        [(POD, &c.etcd), (POD, &c.outside), (CLIENT, &c.nodeport)]
            .iter()
            .all(|(h, n)| w.tcp_record(h, n).is_some_and(|r| r.outcome != "running"))
    };
    w.run_until(done, Duration::from_secs(10));
    c
}

/// The server-side records `host` has (what each server saw of its clients).
pub fn served(w: &World, host: &str) -> Vec<crate::net::TcpRecord> {
    w.tcp_records(host)
        .into_iter()
        .filter(|r| r.role == "server")
        .collect()
}
