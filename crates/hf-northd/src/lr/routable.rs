//! Routable NAT and load balancer addresses (NB `NAT options:add_route=true`,
//! `Load_Balancer options:add_route=true`), as ovn-northd 23.03 builds them: a distributed
//! gateway port's routable addresses are routed by the other routers on the switch it faces.
//!
//! For router port `q` (a distributed gateway port of router R) the routable addresses are
//! ovn-northd's `get_nat_addresses(q, routable_only)`: every IPv4 `dnat`/`dnat_and_snat`
//! external address with `add_route=true` whose gateway port is `q` (with several gateway
//! ports: the NAT's `gateway_port`, else the port whose networks hold the address), a
//! distributed one (`logical_port` + `external_mac`) with its own MAC, the others with the
//! port's MAC (an address that is one of the port's own is left out), then the VIPs of R's
//! load balancers with `add_route=true`. Every other router P on that switch gets, on its port
//! `p` facing the switch:
//!
//! - `lr_in_ip_routing`: a connected route to each IPv4 address (`/32`) out of `p`, with
//!   `p`'s first IPv4 address as source (ovn-northd's `add_route` without a gateway);
//! - `lr_in_arp_resolve` (only when P is a gateway router or `p` a distributed gateway port):
//!   `outport == p && reg0 == {addresses}` → `eth.dst = MAC` per MAC.
//!
//! What it does not do: IPv6 (23.03 routes and resolves only the IPv4 addresses), template
//! load balancers (23.03 refuses `add_route` on them).

use std::net::{IpAddr, Ipv4Addr};

use hf_model::nb;

use crate::addr::Mac;
use crate::topo::{PortIdx, PortKind, Topo};

/// One group of routable addresses: the MAC that answers for them, and the IPv4 addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routable {
    /// The MAC the next hop resolves to.
    pub mac: Mac,
    /// The addresses, in ovn-northd's order.
    pub ips: Vec<Ipv4Addr>,
}

/// The routable addresses of router port `q` (none unless it is a distributed gateway port).
pub fn of_port(topo: &Topo<'_>, q: PortIdx) -> Vec<Routable> {
    let port = &topo.ports[q];
    let Some(mac) = port.mac else {
        return Vec::new();
    };
    let dp = &topo.datapaths[port.dp];
    if !port.is_dgp() || dp.gateway_chassis.is_some() {
        return Vec::new();
    }
    let nbdb = topo.nb;
    let Some(lr) = nbdb.logical_router().get(&dp.nb) else {
        return Vec::new();
    };
    let dgps = dp.ports.iter().filter(|i| topo.ports[**i].is_dgp()).count();
    let own = |ip: IpAddr| port.networks.iter().any(|n| n.addr() == ip);
    let member = |ip: IpAddr| port.networks.iter().any(|n| n.contains(&ip));
    let mut out = Vec::new();
    let mut central = Vec::new();
    for n in lr.nat.iter().filter_map(|r| nbdb.get(*r)) {
        if n.type_ == nb::NatType::Snat || n.options.get("add_route").is_none_or(|v| v != "true") {
            continue;
        }
        // An IPv4 address without a mask (ovn-northd's ip_parse_masked, exact).
        let ext = n.external_ip.trim();
        let ext = ext.strip_suffix("/32").unwrap_or(ext);
        let Ok(ip) = ext.parse::<Ipv4Addr>() else {
            continue;
        };
        let gw = n.gateway_port.map(|g| g.uuid());
        if dgps > 1
            && ((gw.is_none() && !member(IpAddr::V4(ip))) || gw.is_some_and(|g| g != port.nb))
        {
            continue;
        }
        let distributed = n.type_ == nb::NatType::DnatAndSnat
            && n.logical_port.is_some()
            && n.external_mac.is_some();
        if distributed {
            if let Some(m) = n.external_mac.as_deref().and_then(Mac::parse) {
                out.push(Routable {
                    mac: m,
                    ips: vec![ip],
                });
            }
        } else if !own(IpAddr::V4(ip)) {
            central.push(ip);
        }
    }
    let mut lbs: Vec<&nb::LoadBalancer> = lr
        .load_balancer
        .iter()
        .filter_map(|r| nbdb.get(*r))
        .collect();
    for g in lr.load_balancer_group.iter().filter_map(|r| nbdb.get(*r)) {
        lbs.extend(g.load_balancer.iter().filter_map(|r| nbdb.get(*r)));
    }
    let mut vips: Vec<Ipv4Addr> = Vec::new();
    for lb in lbs {
        let template = lb.options.get("template").is_some_and(|v| v == "true");
        if lb.options.get("add_route").is_none_or(|v| v != "true") || template {
            continue;
        }
        for vip in lb.vips.keys() {
            if let Some((IpAddr::V4(a), _)) = crate::addr::parse_ip_port(vip) {
                vips.push(a);
            }
        }
    }
    vips.sort();
    vips.dedup();
    central.extend(vips);
    if !central.is_empty() {
        out.push(Routable { mac, ips: central });
    }
    out
}

/// The routable addresses router port `p` (of another router) reaches on the switch it
/// faces: those of every other router port there, in the switch's port order.
pub fn beside(topo: &Topo<'_>, p: PortIdx, switch: Option<crate::flow::DpIdx>) -> Vec<Routable> {
    let Some(s) = switch else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for &qi in &topo.datapaths[s].ports {
        if let PortKind::SwitchRouter { lrp: Some(l) } = topo.ports[qi].kind
            && l != p
        {
            out.extend(of_port(topo, l));
        }
    }
    out
}
