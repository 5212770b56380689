//! Incident D's world (`../shared/incidents/004`), shared by `tests/incidents.rs` and the
//! sandbox's `--scenario db-rebuild`: OVN-Kubernetes's shared gateway. Every node has a
//! gateway router `GR_<node>` (`options:chassis=<node>`, `options:snat-ct-zone=0`, as
//! OVN-Kubernetes sets it so the router's SNAT shares the host's conntrack zone) whose `snat`
//! rewrites the pod network to the node's address on the provider network; a pod on the
//! cluster switch talks TCP to an external host through that SNAT, and the external host talks
//! TCP to the pod through a load balancer VIP on the node's address (the router's DNAT).
//!
//! The zone map is deliberately not the one a fresh allocation would give (lowest free zone in
//! name order): the gateway routers are created after the cluster switch's ports (as
//! OVN-Kubernetes initialises a node's gateway after its pods' network), and a pod is deleted
//! and its zone flushed before the story starts. A controller that forgot the datapath's map
//! and allocated afresh would move the router's SNAT zone ([`canonical_zones`] says where to).
//!
//! Also the fault the incident was ([`naive_flush`]): what ovn-controller 23.03 did after the
//! rebuild, flushing the conntrack zone it believed it owned (the routers' SNAT zone) while the
//! zone stays in use.
//!
//! What it does not do: assert anything (its users do) or rebuild (see
//! [`World::rebuild_databases`] and [`rebuild_and_restart`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::net::TcpRecord;
use crate::net::{Direction, HostConfig, Transfer};
use crate::world::World;
use crate::world::incident_c::{OVNK_PHYSNET, OVNK_SWITCH, ovnk_gateways, ovnk_nodes};
use crate::world::nb::{self, Txn};

/// The nodes (chassis).
pub const NODES: [&str; 2] = ["hv1", "hv2"];
/// The pod whose TCP runs through its node's gateway router, on [`NODES`]`[0]`.
pub const POD: &str = "pod1";
/// Its address on [`OVNK_SWITCH`].
pub const POD_IP: &str = "10.100.0.11";
/// A pod on the same node that is deleted before the story (its zone is flushed then).
pub const GONE_POD: &str = "pod0";
/// A pod on the second node.
pub const POD2: &str = "pod2";
/// The gateway router the pod's egress leaves through.
pub const ROUTER: &str = "GR_hv1";
/// Its SNAT zone's name (and its DNAT zone's).
pub const SNAT_ZONE: &str = "lr/GR_hv1/snat";
/// The router's DNAT (common) zone's name.
pub const DNAT_ZONE: &str = "lr/GR_hv1/dnat";
/// The node's address: the router's external address and the SNAT target.
pub const NODE_IP: &str = "172.16.0.11";
/// The external host, on the provider network.
pub const EXT: &str = "ext1";
/// Its address.
pub const EXT_IP: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 10);
/// The port the external host serves on.
pub const EXT_PORT: u16 = 443;
/// A load balancer VIP on the node's address (like a NodePort in front of the API server):
/// [`NODE_IP`]`:`[`VIP_PORT`] DNATed by [`ROUTER`] to [`POD`]`:`[`VIP_PORT`], so the external
/// host's connections to it live in the router's DNAT zone.
pub const VIP_PORT: u16 = 6443;
/// The streams' pace, bytes per second.
pub const RATE: u64 = 1_000_000;

fn pod(name: &str, mac: &str, ip: &str, chassis: &str) -> Txn {
    nb::vif(OVNK_SWITCH, name, mac, ip, chassis)
}

/// The cluster switch and its pods (with a stateful ACL, so the pods' own zones hold
/// conntrack entries too).
pub fn pods() -> Vec<Txn> {
    vec![
        nb::switch(OVNK_SWITCH),
        pod(GONE_POD, "0a:58:0a:64:00:0a", "10.100.0.10", "hv1"),
        pod(POD, "0a:58:0a:64:00:0b", POD_IP, "hv1"),
        pod(POD2, "0a:58:0a:64:00:0c", "10.100.0.12", "hv2"),
        nb::acl(
            OVNK_SWITCH,
            "from-lport",
            1001,
            &format!("inport == \"{POD}\" && ip4"),
            "allow-related",
        ),
    ]
}

/// The VIP on [`ROUTER`] (see [`VIP_PORT`]).
pub fn vip() -> Txn {
    nb::load_balancer(
        "lb-node-hv1",
        &format!("{NODE_IP}:{VIP_PORT}"),
        &[&format!("{POD_IP}:{VIP_PORT}")],
        "tcp",
        &[],
        &[ROUTER],
    )
}

/// The nodes' gateways ([`ovnk_gateways`]: `GR_<node>` with `options:chassis`, its `snat` of
/// [`super::incident_c::OVNK_CIDR`] to the node's address, the external switch and its localnet port on
/// [`OVNK_PHYSNET`]), each router with `options:snat-ct-zone=0`.
pub fn gateways() -> Vec<Txn> {
    // The cluster switch is made by `pods`.
    let mut t: Vec<Txn> = ovnk_gateways(&NODES).into_iter().skip(1).collect();
    for n in ovnk_nodes(&NODES) {
        t.push(nb::set_router_options(&n.router, &[("snat-ct-zone", "0")]));
    }
    t.push(vip());
    t
}

/// The world, ready, with the zone map made non-canonical (see the module docs): pods first,
/// then the gateways, then [`GONE_POD`] deleted and its zone flushed. Panics when it does not
/// come up within 30 s of virtual time (a broken build, not an input error).
pub fn world(seed: u64) -> World {
    let mut w = World::holdfast(seed, &NODES);
    w.nb_all(pods()).expect("NB pods");
    w.await_ports_ready("the pods");
    w.nb_all(gateways()).expect("NB gateways");
    w.add_net_host(
        OVNK_PHYSNET,
        EXT,
        HostConfig::new(EXT, [0, 0, 0, 0, 0x10, 0x0a], seed ^ 0xd).with_ipv4(EXT_IP, 24, None),
    )
    .expect("external host");
    w.await_ports_ready("the gateways");
    delete_pod(&mut w, GONE_POD).expect("NB delete");
    // Past the controllers' flush grace: the deleted pod's zone is flushed and leaves the map.
    let gone = format!("lsp/{GONE_POD}");
    let ok = w.run_until(
        |w| {
            w.chassis()
                .iter()
                .all(|c| !c.datapath().zones().contains_key(&gone))
        },
        Duration::from_secs(30),
    );
    assert!(ok, "{gone} not flushed; log:\n{}", w.take_log().join("\n"));
    w.run_for(Duration::from_millis(200));
    w
}

/// `ovn-nbctl lsp-del NAME` for a port of [`OVNK_SWITCH`].
pub fn delete_pod(w: &mut World, name: &str) -> Result<(), String> {
    let nb = w.nb_snapshot()?;
    let p = nb
        .logical_switch_port()
        .values()
        .find(|p| p.name == name)
        .ok_or_else(|| format!("no logical switch port {name}"))?;
    w.nb(vec![
        serde_json::json!({"op": "mutate", "table": "Logical_Switch",
        "where": [["name", "==", OVNK_SWITCH]],
        "mutations": [["ports", "delete", ["set", [["uuid", p.uuid.to_string()]]]]]}),
    ])?;
    Ok(())
}

/// The zone map a fresh allocation would give `names`: zones 1, 2, ... in name order (what a
/// controller that ignored the datapath's map would compute).
pub fn canonical_zones<'a>(names: impl IntoIterator<Item = &'a String>) -> BTreeMap<String, u16> {
    let mut v: Vec<&String> = names.into_iter().collect();
    v.sort();
    v.into_iter()
        .zip(1u16..)
        .map(|(n, z)| (n.clone(), z))
        .collect()
}

/// Every chassis's full zone map, by chassis name.
pub fn zone_maps(w: &World) -> BTreeMap<String, BTreeMap<String, u16>> {
    w.chassis()
        .iter()
        .map(|c| (c.name().to_string(), c.datapath().zones().clone()))
        .collect()
}

/// The incident's upgrade: every controller stops, NB and SB are rebuilt (every row gets a new
/// UUID, names stay), every controller starts against them.
pub fn rebuild_and_restart(w: &mut World) -> Result<(), String> {
    for n in NODES {
        w.stop_controller(n)?;
    }
    w.rebuild_databases()?;
    for n in NODES {
        w.start_controller(n)?;
    }
    Ok(())
}

/// The fault of the incident: flushes the conntrack entries of `names`' zones on `chassis`
/// while the zones stay in the zone map and in use (ovn-controller 23.03 after the rebuild:
/// "it owns zone 0" and flushes it). Returns the entries flushed.
pub fn naive_flush(w: &mut World, chassis: &str, names: &[&str]) -> Result<u64, String> {
    let dp = w
        .datapath_mut(chassis)
        .ok_or_else(|| format!("no chassis {chassis}"))?;
    let mut n = 0;
    for name in names {
        let z = *dp
            .zones()
            .get(*name)
            .ok_or_else(|| format!("zone {name} is not in {chassis}'s zone map"))?;
        n += dp
            .conntrack_mut()
            .flush_zone(z)
            .map_err(|e| format!("flush {name}: {e}"))? as u64;
    }
    Ok(n)
}

/// Starts a paced upload of `bytes` from the external host to [`POD`] through the VIP
/// ([`VIP_PORT`] on [`NODE_IP`], the router's DNAT); runs until it is going and returns its
/// connection name on the external host. Panics when it does not get going.
pub fn start_vip_upload(w: &mut World, bytes: u64) -> String {
    w.tcp_listen(POD, VIP_PORT).expect("listen");
    let node: Ipv4Addr = NODE_IP.parse().expect("an address");
    let name = w
        .tcp_start(
            EXT,
            IpAddr::V4(node),
            VIP_PORT,
            Transfer {
                direction: Direction::Upload,
                bytes,
                rate: Some(RATE),
            },
        )
        .expect("upload");
    going(w, EXT, name, |r| r.bytes_acked)
}

/// Runs 300 ms and returns `name` once connection `name` on `host` is established and its
/// `progress` (bytes acknowledged or received) is past 0. Panics when it is not (a broken
/// build).
fn going(w: &mut World, host: &str, name: String, progress: fn(&TcpRecord) -> u64) -> String {
    w.run_for(Duration::from_millis(300));
    let r = w.tcp_record(host, &name).expect("record");
    assert!(
        r.established_us.is_some() && progress(&r) > 0,
        "{name} did not get going: {r:?}\nlog:\n{}",
        w.take_log().join("\n")
    );
    name
}

/// Starts a paced download of `bytes` from the external host to [`POD`] through
/// [`ROUTER`]'s SNAT (after warm-up pings the first time); runs until it is going and returns
/// its connection name on the pod. Panics when it does not get going (a broken build).
pub fn start_download(w: &mut World, bytes: u64) -> String {
    if w.tcp_listen(EXT, EXT_PORT).is_ok() {
        // Warm-up: every neighbour on the path learned (and in SB) before the download.
        w.ping(POD, IpAddr::V4(EXT_IP), 2, Duration::from_millis(20))
            .expect("ping");
        w.run_for(Duration::from_millis(1100));
        w.tcp_start(
            POD,
            IpAddr::V4(EXT_IP),
            EXT_PORT,
            Transfer {
                direction: Direction::Download,
                bytes: 1000,
                rate: None,
            },
        )
        .expect("warm-up transfer");
        w.run_for(Duration::from_secs(2));
    }
    let name = w
        .tcp_start(
            POD,
            IpAddr::V4(EXT_IP),
            EXT_PORT,
            Transfer {
                direction: Direction::Download,
                bytes,
                rate: Some(RATE),
            },
        )
        .expect("download");
    going(w, POD, name, |r| r.bytes_received)
}
