//! `Port_Group` and `Address_Set`.
//!
//! Port groups: with `port-group-per-datapath` (OVN 20.09+), one row per (NB port group,
//! switch holding some of its ports), named `<switch tunnel key>_<name>`, listing that
//! switch's ports; without it (the 20.06 layout), one row per NB port group named as in NB,
//! listing all its ports. Ports northd left out (duplicate names) and router ports are not
//! listed; a router port in a port group is a diagnostic.
//!
//! Address sets, as 23.03's `sync_addr_sets`: `svc_monitor_mac`; `<pg>_ip4` and `<pg>_ip6`
//! for every NB port group, from its ports' static addresses (and `dynamic_addresses`);
//! `_rtr_lb_<router tunnel key>_ip4`/`_ip6` with the router load balancers' VIPs that its
//! neighbour responder answers for (`options:neighbor_responder`: `reachable` — in one of
//! the router's subnets — by default, `all`, or `none`); then the NB address sets, which win
//! over a derived set of the same name.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hf_model::nb;

use crate::addr::LportAddresses;
use crate::diag::Diags;
use crate::output::SbDesired;
use crate::render::RenderOptions;
use crate::stage::DpKind;
use crate::tables::lb;
use crate::topo::Topo;

fn pg_ports<'a>(topo: &Topo<'a>, pg: &nb::PortGroup) -> Vec<&'a nb::LogicalSwitchPort> {
    let mut v: Vec<&nb::LogicalSwitchPort> =
        pg.ports.iter().filter_map(|r| topo.nb.get(*r)).collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

fn sorted_pgs<'a>(topo: &Topo<'a>) -> Vec<&'a nb::PortGroup> {
    let mut pgs: Vec<&nb::PortGroup> = topo.nb.port_group().values().collect();
    pgs.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    pgs
}

/// Adds the port groups.
pub fn port_groups(topo: &Topo<'_>, opts: &RenderOptions, sb: &mut SbDesired, diags: &mut Diags) {
    let per_dp = opts.features.contains("port-group-per-datapath");
    let mut seen = BTreeSet::new();
    for pg in sorted_pgs(topo) {
        if !seen.insert(pg.name.clone()) {
            diags.push(
                "Port_Group",
                pg.uuid,
                &pg.name,
                "duplicate port group name; only the first is written to SB",
            );
            continue;
        }
        let mut by_dp: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut all = BTreeSet::new();
        for lsp in pg_ports(topo, pg) {
            let Some(p) = topo
                .port_by_name
                .get(&lsp.name)
                .map(|i| &topo.ports[*i])
                .filter(|p| p.nb == lsp.uuid)
            else {
                continue;
            };
            let d = &topo.datapaths[p.dp];
            if d.kind != DpKind::Switch {
                continue;
            }
            by_dp
                .entry(format!("{}_{}", d.tunnel_key, pg.name))
                .or_default()
                .insert(p.name.clone());
            all.insert(p.name.clone());
        }
        if per_dp {
            sb.port_groups.extend(by_dp);
        } else {
            sb.port_groups.insert(pg.name.clone(), all);
        }
    }
}

/// IPv4 and IPv6 addresses of one `addresses` entry, as text (OVN's `split_addresses`);
/// `None` for an entry that is not `MAC IP...`.
fn split(entry: &str) -> Option<(Vec<String>, Vec<String>)> {
    let a = LportAddresses::parse(entry).ok()?;
    Some((
        a.ipv4.iter().map(|n| n.addr().to_string()).collect(),
        a.ipv6.iter().map(|n| n.addr().to_string()).collect(),
    ))
}

/// Adds the address sets (after [`crate::tables::global`] chose `svc_monitor_mac`).
pub fn address_sets(topo: &Topo<'_>, sb: &mut SbDesired, diags: &mut Diags) {
    if let Some(m) = sb.sb_options.get("svc_monitor_mac") {
        sb.address_sets.insert(
            "svc_monitor_mac".to_string(),
            std::iter::once(m.clone()).collect(),
        );
    }
    for pg in sorted_pgs(topo) {
        let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
        for lsp in pg_ports(topo, pg) {
            let entries = lsp
                .addresses
                .iter()
                .filter(|a| !crate::ipam::is_dynamic(a))
                .chain(lsp.dynamic_addresses.iter());
            for e in entries {
                if let Some((a, b)) = split(e) {
                    v4.extend(a);
                    v6.extend(b);
                }
            }
        }
        sb.address_sets.insert(format!("{}_ip4", pg.name), v4);
        sb.address_sets.insert(format!("{}_ip6", pg.name), v6);
    }
    for d in topo.datapaths.iter().filter(|d| d.kind == DpKind::Router) {
        let Some(lr) = topo.nb.logical_router().get(&d.nb) else {
            continue;
        };
        // The ports' networks, with the EUI-64 link-local /64 OVN adds to each.
        let nets: Vec<ipnet::IpNet> = d
            .ports
            .iter()
            .flat_map(|p| {
                let p = &topo.ports[*p];
                let lla = p
                    .mac
                    .and_then(|m| ipnet::Ipv6Net::new(m.ipv6_lla(), 64).ok())
                    .map(|n| ipnet::IpNet::V6(n.trunc()));
                p.networks.iter().map(|n| n.trunc()).chain(lla)
            })
            .collect();
        let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
        for l in lb::router_lbs(topo, lr) {
            let mode = l
                .options
                .get("neighbor_responder")
                .map(String::as_str)
                .unwrap_or("reachable");
            let mode = match mode {
                "reachable" | "all" | "none" => mode,
                other => {
                    diags.push(
                        "Load_Balancer",
                        l.uuid,
                        &l.name,
                        format!(
                            "options:neighbor_responder {other:?} is not reachable, all or none; reachable is used"
                        ),
                    );
                    "reachable"
                }
            };
            if mode == "none" {
                continue;
            }
            for ip in lb::vip_addrs(l) {
                if mode == "all" || nets.iter().any(|n| n.contains(&ip)) {
                    match ip {
                        IpAddr::V4(a) => v4.insert(a.to_string()),
                        IpAddr::V6(a) => v6.insert(a.to_string()),
                    };
                }
            }
        }
        if !v4.is_empty() {
            sb.address_sets
                .insert(format!("_rtr_lb_{}_ip4", d.tunnel_key), v4);
        }
        if !v6.is_empty() {
            sb.address_sets
                .insert(format!("_rtr_lb_{}_ip6", d.tunnel_key), v6);
        }
    }
    let derived: BTreeSet<String> = sb.address_sets.keys().cloned().collect();
    let mut nbsets: Vec<&nb::AddressSet> = topo.nb.address_set().values().collect();
    nbsets.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    let mut seen = BTreeSet::new();
    for s in nbsets {
        if !seen.insert(s.name.as_str()) {
            diags.push(
                "Address_Set",
                s.uuid,
                &s.name,
                "duplicate address set name; only the first is written to SB",
            );
            continue;
        }
        if derived.contains(&s.name) {
            diags.push(
                "Address_Set",
                s.uuid,
                &s.name,
                "has a name northd derives (svc_monitor_mac, <port group>_ip4/_ip6 or _rtr_lb_<key>_ip4/_ip6); its addresses replace the derived set, as in ovn-northd, so ACLs using the derived set see these",
            );
        }
        sb.address_sets.insert(s.name.clone(), s.addresses.clone());
    }
}
