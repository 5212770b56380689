//! `Port_Binding`: one row per logical switch port, logical router port and chassis-redirect
//! port, with the columns 23.03's northd owns.
//!
//! - Switch ports: `type` as NB says (an unknown type is a diagnostic and written as `""`, as
//!   23.03 leaves it), `options` copied from NB (plus `vlan-passthru` from the switch and
//!   `qdisc_queue_id` for ports with QoS options, per chassis they are bound to), `mac`
//!   and `port_security` copied verbatim, `parent_port` and `tag` (`tag_request` allocated per
//!   parent as 23.03 does), `external_ids` copied with `name` from `neutron:port_name`, and
//!   `requested_chassis` / `requested_additional_chassis` from `options:requested-chassis`
//!   (`"src,dst"` for live migration). `external` ports carry their HA chassis group.
//! - Switch ports of type `router`: `patch`, or `l3gateway` when the router is a gateway
//!   router (`options:l3gateway-chassis`), `options:peer`, and `nat_addresses` as 23.03 builds
//!   them (`options:nat-addresses=router` or an explicit list, the router port's own GARP
//!   entry, `is_chassis_resident(...)` for distributed gateway ports).
//! - Router ports: `patch` / `l3gateway`, `options:peer`, `chassis-redirect-port`,
//!   `l3gateway-chassis`, the IPv6 prefix delegation and periodic router advertisement
//!   options (`ipv6_ra_*`), `mac` = `"MAC NETWORK..."`, `external_ids` copied.
//! - Chassis-redirect ports `cr-<lrp>`: `chassisredirect`, `options:distributed-port`,
//!   `always-redirect` (unless the router has distributed NAT or the port is bridged),
//!   `redirect-type`, and the HA chassis group (NB's group, or one named after the port made
//!   from its `gateway_chassis`).
//!
//! Diagnostics: unknown port types, unparsable or duplicate `requested-tnl-key`s, tag
//! conflicts under one parent, unparsable `nat-addresses`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use hf_model::nb;

use crate::addr::{LportAddresses, Mac};
use crate::diag::Diags;
use crate::output::{PortRow, SbDesired};
use crate::stage::DpKind;
use crate::tables::lb;
use crate::tables::opt_true;
use crate::topo::{Keys, Port, PortIdx, PortKind, Topo};

/// The LSP types 23.03 knows (`ovn_is_known_nb_lsp_type`).
const KNOWN_LSP_TYPES: &[&str] = &[
    "",
    "l2gateway",
    "localnet",
    "localport",
    "router",
    "vtep",
    "external",
    "virtual",
    "remote",
];

/// The largest VLAN tag + 1 (`MAX_OVN_TAGS`).
const MAX_TAGS: i64 = 4096;

/// Adds every port.
pub fn build(topo: &Topo<'_>, keys: &Keys, sb: &mut SbDesired, diags: &mut Diags) {
    let tags = allocate_tags(topo, keys, diags);
    check_requested_keys(topo, diags);
    let queues = allocate_queues(topo, keys);
    // Built in one go from every row when the map is empty (a full build): inserted one by
    // one in topology order its nodes would stay about two-thirds full. `from_iter` keeps the
    // last of equal names, as `insert` does.
    let mut rows = Vec::with_capacity(topo.ports.len());
    for (i, p) in topo.ports.iter().enumerate() {
        let row = match &p.kind {
            PortKind::RouterPort { .. } => router_port(topo, p),
            PortKind::ChassisRedirect { of } => redirect_port(topo, p, *of),
            PortKind::SwitchRouter { lrp } => switch_router_port(topo, p, *lrp, diags),
            _ => switch_port(topo, i, p, &tags, &queues, diags),
        };
        let Some(row) = row else { continue };
        rows.push((p.name.clone(), row));
    }
    if sb.ports.is_empty() {
        sb.ports = rows.into_iter().collect();
    } else {
        sb.ports.extend(rows);
    }
    let (chassis, switches) = ha_ref_chassis(topo, keys, sb);
    for row in sb.ports.values_mut() {
        if let Some((g, _)) = &row.ha_chassis_group {
            if let Some(r) = chassis.get(g) {
                row.ha_ref_chassis = r.clone();
            }
            if let Some(r) = switches.get(g) {
                row.ha_ref_datapaths = r.clone();
            }
        }
    }
}

/// The row of plain VIF `i` (type `""`, no parent, tag, QoS options or HA group: what the
/// incremental path patches), as [`build`] writes it; its diagnostics go to `diags`.
pub(crate) fn vif_row(topo: &Topo<'_>, i: PortIdx, diags: &mut Diags) -> Option<PortRow> {
    switch_port(
        topo,
        i,
        &topo.ports[i],
        &HashMap::new(),
        &HashMap::new(),
        diags,
    )
}

/// The QoS options that give a port an egress queue (`port_has_qos_params`).
pub(crate) fn has_qos_options(o: &impl hf_model::StrMap) -> bool {
    has_qos(o)
}

/// HA group name → names.
type ByGroup = HashMap<String, BTreeSet<String>>;

/// `HA_Chassis_Group.ref_chassis` as 23.03 builds it: routers linked directly (router port
/// peers) or through a switch form a router group; every bound port of a switch attached to
/// a router of the group adds its chassis to the HA groups (of more than one chassis) of the
/// group's chassis-redirect ports. Returns, per HA group, the chassis of the ports
/// `keys.bound_chassis` knows and the switches whose bound ports count.
fn ha_ref_chassis(topo: &Topo<'_>, keys: &Keys, sb: &SbDesired) -> (ByGroup, ByGroup) {
    let n = topo.datapaths.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut union = |a: usize, b: usize| {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    };
    // The router each switch's first connected router port leads to (OVN takes the first).
    let mut switch_router: HashMap<usize, usize> = HashMap::new();
    for (dp, d) in topo.datapaths.iter().enumerate() {
        match d.kind {
            DpKind::Switch => {
                let routers: Vec<usize> = d
                    .ports
                    .iter()
                    .filter_map(|q| match topo.ports[*q].kind {
                        PortKind::SwitchRouter { lrp: Some(l) } => Some(topo.ports[l].dp),
                        _ => None,
                    })
                    .collect();
                if let Some(first) = routers.first() {
                    switch_router.insert(dp, *first);
                }
                for w in routers.windows(2) {
                    union(w[0], w[1]);
                }
            }
            DpKind::Router => {
                for q in &d.ports {
                    if let PortKind::RouterPort { peer: Some(l), .. } = topo.ports[*q].kind {
                        union(dp, topo.ports[l].dp);
                    }
                }
            }
        }
    }
    // HA groups of each router group.
    let mut groups_of: HashMap<usize, BTreeSet<String>> = HashMap::new();
    for (dp, d) in topo.datapaths.iter().enumerate() {
        for g in &d.dgps {
            let Some(cr) = cr_of(topo, *g) else { continue };
            if let Some((name, members)) = sb
                .ports
                .get(&cr.name)
                .and_then(|r| r.ha_chassis_group.as_ref())
                && members.len() > 1
            {
                groups_of
                    .entry(root(&mut parent, dp))
                    .or_default()
                    .insert(name.clone());
            }
        }
    }
    let mut switches: ByGroup = HashMap::new();
    for (dp, r) in &switch_router {
        if let Some(names) = groups_of.get(&root(&mut parent, *r)) {
            for g in names {
                switches
                    .entry(g.clone())
                    .or_default()
                    .insert(topo.datapaths[*dp].name.clone());
            }
        }
    }
    let mut out: ByGroup = HashMap::new();
    for (port, chassis) in &keys.bound_chassis {
        let Some(p) = topo.port(port) else { continue };
        if topo.datapaths[p.dp].kind != DpKind::Switch {
            continue;
        }
        let Some(r) = switch_router.get(&p.dp) else {
            continue;
        };
        let Some(names) = groups_of.get(&root(&mut parent, *r)) else {
            continue;
        };
        for g in names {
            out.entry(g.clone()).or_default().insert(chassis.clone());
        }
    }
    (out, switches)
}

fn base(topo: &Topo<'_>, p: &Port) -> PortRow {
    PortRow {
        datapath: topo.datapaths[p.dp].name.clone(),
        tunnel_key: p.tunnel_key,
        ..Default::default()
    }
}

/// `"MAC NET NET..."`, the way 23.03 writes a router port's `mac`.
fn lrp_mac(lrp: &nb::LogicalRouterPort) -> String {
    let mut s = lrp.mac.clone();
    for n in &lrp.networks {
        s.push(' ');
        s.push_str(n);
    }
    s
}

/// The gateway router's chassis (`options:chassis`) of router datapath `dp`.
fn gw_chassis<'t>(topo: &'t Topo<'_>, dp: usize) -> Option<&'t str> {
    let d = &topo.datapaths[dp];
    (d.kind == DpKind::Router)
        .then_some(d.gateway_chassis.as_deref())
        .flatten()
}

/// The chassis-redirect port of distributed gateway port `of`, if topo made one.
fn cr_of<'t>(topo: &'t Topo<'_>, of: PortIdx) -> Option<&'t Port> {
    topo.port(&format!("cr-{}", topo.ports[of].name))
        .filter(|c| matches!(c.kind, PortKind::ChassisRedirect { of: o } if o == of))
}

fn router_port(topo: &Topo<'_>, p: &Port) -> Option<PortRow> {
    let lrp = topo.nb.logical_router_port().get(&p.nb)?;
    let mut row = base(topo, p);
    let chassis = gw_chassis(topo, p.dp);
    row.type_ = if chassis.is_some() {
        "l3gateway"
    } else {
        "patch"
    }
    .to_string();
    let peer = match p.kind {
        PortKind::RouterPort {
            switch_peer: Some(l),
            ..
        }
        | PortKind::RouterPort { peer: Some(l), .. } => Some(l),
        _ => None,
    };
    if let Some(l) = peer {
        row.options
            .insert("peer".into(), topo.ports[l].name.clone());
        let me = topo.port_by_name.get(&p.name).copied();
        if let Some(cr) = me.and_then(|m| cr_of(topo, m)) {
            row.options
                .insert("chassis-redirect-port".into(), cr.name.clone());
        }
    }
    if let Some(c) = chassis {
        row.options
            .insert("l3gateway-chassis".into(), c.to_string());
    }
    if matches!(
        p.kind,
        PortKind::RouterPort {
            peer: None,
            switch_peer: Some(_)
        }
    ) {
        ipv6_options(p, lrp, &mut row.options);
    }
    row.mac.insert(lrp_mac(lrp));
    row.external_ids = lrp.external_ids.clone().into();
    Some(row)
}

/// `smap_get_int`: the integer, or `default` when absent or not one.
fn get_int(m: &hf_model::SmallMap<String, String>, key: &str, default: i64) -> i64 {
    m.get(key)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// 23.03's IPv6 options of a router port facing a switch (`ovn_update_ipv6_options`):
/// prefix delegation flags, and with `ipv6_ra_configs:send_periodic=true` and a valid
/// `address_mode` the periodic router advertisement settings ovn-controller sends from.
fn ipv6_options(p: &Port, lrp: &nb::LogicalRouterPort, o: &mut BTreeMap<String, String>) {
    // OVN's router port networks always hold the EUI-64 link-local address too.
    let mut v6: Vec<ipnet::Ipv6Net> = p
        .networks
        .iter()
        .filter_map(|n| match n {
            ipnet::IpNet::V6(n) => Some(*n),
            ipnet::IpNet::V4(_) => None,
        })
        .collect();
    if let Some(m) = p.mac
        && let Ok(lla) = ipnet::Ipv6Net::new(m.ipv6_lla(), 64)
    {
        v6.push(lla);
    }
    if v6.is_empty() {
        return;
    }
    if p.enabled && opt_true(&lrp.options, "prefix_delegation") {
        o.insert("ipv6_prefix_delegation".into(), "true".into());
    }
    if p.enabled && opt_true(&lrp.options, "prefix") {
        o.insert("ipv6_prefix".into(), "true".into());
    }
    let ra = &lrp.ipv6_ra_configs;
    let Some(mode) = ra.get("address_mode") else {
        return;
    };
    if !matches!(
        mode.as_str(),
        "slaac" | "dhcpv6_stateful" | "dhcpv6_stateless"
    ) || !opt_true(ra, "send_periodic")
    {
        return;
    }
    o.insert("ipv6_ra_send_periodic".into(), "true".into());
    o.insert("ipv6_ra_address_mode".into(), mode.clone());
    let max = get_int(ra, "max_interval", 600).clamp(4, 1800);
    o.insert("ipv6_ra_max_interval".into(), max.to_string());
    let min_default = if max >= 9 { max / 3 } else { max * 3 / 4 };
    let min = get_int(ra, "min_interval", min_default)
        .min(max * 3 / 4)
        .max(3);
    o.insert("ipv6_ra_min_interval".into(), min.to_string());
    let mtu = get_int(ra, "mtu", 0);
    if mtu >= 1280 {
        o.insert("ipv6_ra_mtu".into(), mtu.to_string());
    }
    let mut prefixes = Vec::new();
    for n in &v6 {
        let lla: ipnet::Ipv6Net = "fe80::/10".parse().expect("constant");
        if lla.contains(&n.trunc().addr()) {
            o.insert("ipv6_ra_src_addr".into(), n.addr().to_string());
            continue;
        }
        prefixes.push(format!("{}/{}", n.trunc().addr(), n.prefix_len()));
    }
    o.insert("ipv6_ra_prefixes".into(), prefixes.join(" "));
    for (k, sbk) in [("rdnss", "ipv6_ra_rdnss"), ("dnssl", "ipv6_ra_dnssl")] {
        if let Some(v) = ra.get(k) {
            o.insert(sbk.into(), v.clone());
        }
    }
    if let Some(m) = p.mac {
        o.insert("ipv6_ra_src_eth".into(), m.to_string());
    }
    let prf = ra
        .get("router_preference")
        .map(String::as_str)
        .filter(|p| matches!(*p, "HIGH" | "LOW"))
        .unwrap_or("MEDIUM");
    o.insert("ipv6_ra_prf".into(), prf.into());
    if let Some(v) = ra.get("route_info") {
        o.insert("ipv6_ra_route_info".into(), v.clone());
    }
}

/// The HA chassis group a chassis-redirect port gets: NB's `ha_chassis_group` (by its
/// name), else one named after the LRP made from its `gateway_chassis`.
fn ha_group_of_lrp(
    topo: &Topo<'_>,
    lrp: &nb::LogicalRouterPort,
) -> Option<(String, Vec<(String, i64)>)> {
    if let Some(g) = lrp.ha_chassis_group.and_then(|g| topo.nb.get(g)) {
        return Some(ha_group(topo, g));
    }
    let mut members: Vec<(String, i64)> = lrp
        .gateway_chassis
        .iter()
        .filter_map(|g| topo.nb.get(*g))
        .filter(|g| !g.chassis_name.is_empty())
        .map(|g| (g.chassis_name.clone(), g.priority))
        .collect();
    if members.is_empty() {
        return None;
    }
    members.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some((lrp.name.clone(), members))
}

fn ha_group(topo: &Topo<'_>, g: &nb::HaChassisGroup) -> (String, Vec<(String, i64)>) {
    let mut members: Vec<(String, i64)> = g
        .ha_chassis
        .iter()
        .filter_map(|c| topo.nb.get(*c))
        .map(|c| (c.chassis_name.clone(), c.priority))
        .collect();
    members.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    (g.name.clone(), members)
}

/// The router has a `dnat_and_snat` with `logical_port` and `external_mac`.
fn has_distributed_nat(topo: &Topo<'_>, lr: &nb::LogicalRouter) -> bool {
    lr.nat.iter().filter_map(|n| topo.nb.get(*n)).any(|n| {
        matches!(n.type_, nb::NatType::DnatAndSnat)
            && n.logical_port.is_some()
            && n.external_mac.is_some()
    })
}

fn redirect_port(topo: &Topo<'_>, p: &Port, of: PortIdx) -> Option<PortRow> {
    let lrp = topo.nb.logical_router_port().get(&p.nb)?;
    let lr = topo.nb.logical_router().get(&topo.datapaths[p.dp].nb)?;
    let mut row = base(topo, p);
    row.type_ = "chassisredirect".into();
    row.options
        .insert("distributed-port".into(), topo.ports[of].name.clone());
    // always-redirect unless the router has distributed NAT or the switch on the other side
    // has vtep ports; a bridged redirect never always-redirects.
    let vtep_peer = match topo.ports[of].kind {
        PortKind::RouterPort {
            switch_peer: Some(s),
            ..
        } => topo.datapaths[topo.ports[s].dp]
            .ports
            .iter()
            .any(|q| matches!(&topo.ports[*q].kind, PortKind::OtherLsp(t) if t == "vtep")),
        _ => false,
    };
    let mut always = !has_distributed_nat(topo, lr) && !vtep_peer;
    if let Some(t) = lrp.options.get("redirect-type") {
        row.options.insert("redirect-type".into(), t.clone());
        if t == "bridged" {
            always = false;
        }
    }
    if always {
        row.options.insert("always-redirect".into(), "true".into());
    }
    row.mac.insert(lrp_mac(lrp));
    row.external_ids = lrp.external_ids.clone().into();
    row.ha_chassis_group = ha_group_of_lrp(topo, lrp);
    Some(row)
}

fn switch_router_port(
    topo: &Topo<'_>,
    p: &Port,
    lrp: Option<PortIdx>,
    diags: &mut Diags,
) -> Option<PortRow> {
    let lsp = topo.nb.logical_switch_port().get(&p.nb)?;
    let mut row = base(topo, p);
    let chassis = lrp.and_then(|l| gw_chassis(topo, topo.ports[l].dp));
    row.type_ = if chassis.is_some() {
        "l3gateway"
    } else {
        "patch"
    }
    .to_string();
    if let Some(rp) = lsp.options.get("router-port") {
        row.options.insert("peer".into(), rp.clone());
    }
    if let Some(c) = chassis {
        row.options
            .insert("l3gateway-chassis".into(), c.to_string());
    }
    if let Some(l) = lrp {
        row.nat_addresses = nat_addresses(topo, p, lsp, l, chassis.is_some(), diags);
    }
    common_lsp_columns(topo, lsp, &mut row);
    Some(row)
}

/// The distributed gateway port whose residency gates GARPs sent through router port `l`: `l`
/// itself when it is one, else its router's first.
fn garp_dgp(topo: &Topo<'_>, l: PortIdx) -> Option<PortIdx> {
    if topo.datapaths[topo.ports[l].dp].dgps.contains(&l) {
        return Some(l);
    }
    topo.datapaths[topo.ports[l].dp].dgps.first().copied()
}

fn resident(topo: &Topo<'_>, dgp: PortIdx) -> Option<String> {
    cr_of(topo, dgp).map(|c| format!(" is_chassis_resident({:?})", c.name))
}

/// `Port_Binding.nat_addresses` of switch port `p` (type router) peered with router port `l`.
fn nat_addresses(
    topo: &Topo<'_>,
    p: &Port,
    lsp: &nb::LogicalSwitchPort,
    l: PortIdx,
    gateway_router: bool,
    diags: &mut Diags,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let lrp_dp = topo.ports[l].dp;
    let has_dgps = !topo.datapaths[lrp_dp].dgps.is_empty();
    match lsp.options.get("nat-addresses").map(String::as_str) {
        Some("router") if gateway_router || has_dgps => {
            let exclude_lb = opt_true(&lsp.options, "exclude-lb-vips-from-garp");
            out.extend(router_nat_addresses(topo, l, !exclude_lb));
        }
        Some("router") => {}
        Some(list) if gateway_router || has_dgps => match LportAddresses::parse(list) {
            Ok(_) => {
                let mut s = list.to_string();
                if has_dgps && let Some(r) = garp_dgp(topo, l).and_then(|d| resident(topo, d)) {
                    s.push_str(&r);
                }
                out.insert(s);
            }
            Err(e) => diags.push(
                "Logical_Switch_Port",
                lsp.uuid,
                &lsp.name,
                format!("options:nat-addresses {list:?}: {e}; no NAT addresses are announced"),
            ),
        },
        _ => {}
    }
    // The router port's own addresses, announced where the gateway is.
    let peer = &topo.ports[l];
    let mut garp = false;
    if has_dgps {
        if topo.datapaths[lrp_dp].dgps.contains(&l) {
            garp = true;
        } else if opt_true(&peer.options, "reside-on-redirect-chassis") {
            if topo.datapaths[lrp_dp].dgps.len() == 1 {
                garp = true;
            } else {
                diags.push(
                    "Logical_Router_Port",
                    peer.nb,
                    &peer.name,
                    "options:reside-on-redirect-chassis needs a router with exactly one distributed gateway port; it is ignored",
                );
            }
        }
    } else if gateway_router
        && topo.datapaths[p.dp]
            .ports
            .iter()
            .any(|q| topo.ports[*q].kind == PortKind::Localnet)
    {
        garp = true;
    }
    if garp && let Some(mac) = peer.mac {
        let mut s = mac.to_string();
        for n in &peer.networks {
            if let ipnet::IpNet::V4(v4) = n {
                s.push_str(&format!(" {}", v4.addr()));
            }
        }
        if has_dgps && let Some(r) = garp_dgp(topo, l).and_then(|d| resident(topo, d)) {
            s.push_str(&r);
        }
        out.insert(s);
    }
    out
}

/// 23.03's `get_nat_addresses` for router port `l` (not only routable ones).
fn router_nat_addresses(topo: &Topo<'_>, l: PortIdx, include_lb_ips: bool) -> Vec<String> {
    let op = &topo.ports[l];
    let d = &topo.datapaths[op.dp];
    let Some(lr) = topo.nb.logical_router().get(&d.nb) else {
        return Vec::new();
    };
    let Some(mac) = op.mac else {
        return Vec::new();
    };
    let lbs = lb::router_lbs(topo, lr);
    if lr.nat.is_empty() && !lbs.iter().any(|b| !b.vips.is_empty()) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut central = mac.to_string();
    let mut any_central = false;
    let own: BTreeSet<String> = op.networks.iter().map(|n| n.addr().to_string()).collect();
    let mut nats: Vec<&nb::Nat> = lr.nat.iter().filter_map(|n| topo.nb.get(*n)).collect();
    nats.sort_by(|a, b| a.external_ip.cmp(&b.external_ip).then(a.uuid.cmp(&b.uuid)));
    for nat in nats {
        // IPv4 host addresses only (ip_parse_masked with a full mask).
        let Ok(ip) = nat.external_ip.parse::<std::net::Ipv4Addr>() else {
            continue;
        };
        if !nat_on_port(topo, nat, l) {
            continue;
        }
        let distributed = !d.dgps.is_empty()
            && matches!(nat.type_, nb::NatType::DnatAndSnat)
            && nat.logical_port.is_some()
            && nat.external_mac.is_some();
        if distributed {
            if let (Some(lp), Some(m)) = (
                &nat.logical_port,
                nat.external_mac.as_deref().and_then(Mac::parse),
            ) {
                out.push(format!("{m} {ip} is_chassis_resident({lp:?})"));
            }
        } else if !own.contains(&nat.external_ip) {
            central.push_str(&format!(" {}", nat.external_ip));
            any_central = true;
        }
    }
    if include_lb_ips {
        let (v4, v6) = lb::vip_ips(&lbs);
        for ip in v4.iter().chain(v6.iter()) {
            central.push_str(&format!(" {ip}"));
            any_central = true;
        }
    }
    if any_central {
        if d.dgps.contains(&l)
            && let Some(r) = resident(topo, l)
        {
            central.push_str(&r);
        }
        out.push(central);
    }
    out
}

/// 23.03's `is_nat_gateway_port`: with several distributed gateway ports a NAT belongs to
/// its `gateway_port`, or to the port whose networks hold its external IP.
fn nat_on_port(topo: &Topo<'_>, nat: &nb::Nat, l: PortIdx) -> bool {
    let op = &topo.ports[l];
    if topo.datapaths[op.dp].dgps.len() <= 1 {
        return true;
    }
    match nat.gateway_port.and_then(|g| topo.nb.get(g)) {
        Some(g) => g.uuid == op.nb,
        None => nat
            .external_ip
            .parse::<IpAddr>()
            .is_ok_and(|ip| op.networks.iter().any(|n| n.contains(&ip))),
    }
}

/// Columns every non-router switch port and router-type switch port share.
fn common_lsp_columns(topo: &Topo<'_>, lsp: &nb::LogicalSwitchPort, row: &mut PortRow) {
    row.parent_port = lsp.parent_name.clone().filter(|n| !n.is_empty());
    row.mirror_rules = lsp
        .mirror_rules
        .iter()
        .filter_map(|m| topo.nb.get(*m))
        .map(|m| m.name.clone())
        .collect();
    row.mac = lsp.addresses.clone();
    row.port_security = lsp.port_security.clone();
    row.external_ids = lsp.external_ids.clone().into();
    if let Some(n) = lsp
        .external_ids
        .get("neutron:port_name")
        .filter(|n| !n.is_empty())
    {
        row.external_ids.insert("name".into(), n.clone());
    }
}

/// The QoS options that give a port an egress queue (`port_has_qos_params`).
fn has_qos(o: &impl hf_model::StrMap) -> bool {
    ["qos_max_rate", "qos_min_rate", "qos_burst"]
        .iter()
        .any(|k| o.get_str(k).is_some())
}

/// The largest queue id (`QDISC_MAX_QUEUE_ID`).
const MAX_QUEUE_ID: u32 = 0xf000;

/// `options:qdisc_queue_id` of ports with QoS options, as 23.03 allocates them: unique per
/// chassis the port is bound to (each localnet port is its own space), the id SB already has
/// kept, else the lowest free from 1; an unbound port gets none until it is bound.
fn allocate_queues(topo: &Topo<'_>, keys: &Keys) -> HashMap<PortIdx, u32> {
    let mut out = HashMap::new();
    let mut used: HashMap<String, std::collections::BTreeSet<u32>> = HashMap::new();
    let mut pending = Vec::new();
    for (i, p) in topo.ports.iter().enumerate() {
        let qos = matches!(
            p.kind,
            PortKind::Vif | PortKind::Localnet | PortKind::Localport | PortKind::OtherLsp(_)
        ) && has_qos(&p.options);
        if !qos {
            continue;
        }
        let space = if p.kind == PortKind::Localnet {
            format!("localnet {}", p.name)
        } else {
            match keys.bound_chassis.get(&p.name) {
                Some(c) => c.clone(),
                None => continue,
            }
        };
        match keys.queue_ids.get(&p.name).copied().filter(|q| *q > 0) {
            Some(q) => {
                used.entry(space).or_default().insert(q);
                out.insert(i, q);
            }
            None => pending.push((i, space)),
        }
    }
    for (i, space) in pending {
        let taken = used.entry(space).or_default();
        if let Some(q) = (1..=MAX_QUEUE_ID).find(|q| !taken.contains(q)) {
            taken.insert(q);
            out.insert(i, q);
        }
    }
    out
}

fn switch_port(
    topo: &Topo<'_>,
    i: PortIdx,
    p: &Port,
    tags: &HashMap<PortIdx, i64>,
    queues: &HashMap<PortIdx, u32>,
    diags: &mut Diags,
) -> Option<PortRow> {
    let lsp = topo.nb.logical_switch_port().get(&p.nb)?;
    let mut row = base(topo, p);
    row.options = lsp.options.clone().into();
    if let Some(q) = queues.get(&i) {
        row.options.insert("qdisc_queue_id".into(), q.to_string());
    }
    if let Some(ls) = topo.nb.logical_switch().get(&topo.datapaths[p.dp].nb)
        && opt_true(&ls.other_config, "vlan-passthru")
    {
        row.options.insert("vlan-passthru".into(), "true".into());
    }
    if KNOWN_LSP_TYPES.contains(&lsp.type_.as_str()) {
        row.type_ = lsp.type_.clone();
    } else {
        diags.push(
            "Logical_Switch_Port",
            lsp.uuid,
            &lsp.name,
            format!(
                "unknown port type {:?}; its Port_Binding is written with type \"\" as ovn-northd does",
                lsp.type_
            ),
        );
    }
    if lsp.type_ == "external"
        && let Some(g) = lsp.ha_chassis_group.and_then(|g| topo.nb.get(g))
    {
        row.ha_chassis_group = Some(ha_group(topo, g));
    }
    if let Some(rc) = lsp.options.get("requested-chassis") {
        let mut names = rc.split(',').map(str::trim).filter(|c| !c.is_empty());
        row.requested_chassis = names.next().map(str::to_string);
        row.requested_additional_chassis = names.map(str::to_string).collect();
    }
    common_lsp_columns(topo, lsp, &mut row);
    row.tag = tags.get(&i).copied();
    Some(row)
}

/// Tags of container ports: NB's `tag` when set (a previous northd allocated it), else a
/// non-zero `tag_request`, else for `tag_request=0` under a parent the tag SB already has
/// for the port when it is still free, else the lowest tag free among that parent's children
/// (ports in name order, so the choice is deterministic).
/// Two children of one parent with the same tag are a diagnostic; the second gets none.
fn allocate_tags(topo: &Topo<'_>, keys: &Keys, diags: &mut Diags) -> HashMap<PortIdx, i64> {
    let mut out = HashMap::new();
    let mut used: BTreeMap<String, BTreeMap<i64, String>> = BTreeMap::new();
    let mut pending = Vec::new();
    for (i, p) in topo.ports.iter().enumerate() {
        if p.is_lrp() || matches!(p.kind, PortKind::ChassisRedirect { .. }) {
            continue;
        }
        let Some(lsp) = topo.nb.logical_switch_port().get(&p.nb) else {
            continue;
        };
        let parent = lsp.parent_name.clone().filter(|n| !n.is_empty());
        let fixed = match (lsp.tag, lsp.tag_request) {
            (Some(t), _) if parent.is_some() || lsp.tag_request.is_some() => Some(t),
            (_, Some(r)) if r != 0 => Some(r),
            (_, Some(0)) if parent.is_some() => {
                pending.push(i);
                None
            }
            _ => None,
        };
        let Some(t) = fixed else { continue };
        if !(1..MAX_TAGS).contains(&t) {
            diags.push(
                "Logical_Switch_Port",
                lsp.uuid,
                &lsp.name,
                format!("tag {t} is outside 1..4095; the port gets no tag"),
            );
            continue;
        }
        if let Some(parent) = parent {
            let taken = used.entry(parent.clone()).or_default();
            if let Some(other) = taken.get(&t) {
                diags.push(
                    "Logical_Switch_Port",
                    lsp.uuid,
                    &lsp.name,
                    format!(
                        "tag {t} under parent {parent:?} is already used by {other:?}; this port gets no tag"
                    ),
                );
                continue;
            }
            taken.insert(t, lsp.name.clone());
        }
        out.insert(i, t);
    }
    // Tags SB already has first, so a port added later never moves an older one.
    let mut fresh = Vec::new();
    for i in pending {
        let p = &topo.ports[i];
        let Some(lsp) = topo.nb.logical_switch_port().get(&p.nb) else {
            continue;
        };
        let parent = lsp.parent_name.clone().unwrap_or_default();
        let taken = used.entry(parent).or_default();
        match keys
            .tags
            .get(&p.name)
            .filter(|t| (1..MAX_TAGS).contains(*t))
        {
            Some(t) if !taken.contains_key(t) => {
                taken.insert(*t, lsp.name.clone());
                out.insert(i, *t);
            }
            _ => fresh.push(i),
        }
    }
    for i in fresh {
        let p = &topo.ports[i];
        let Some(lsp) = topo.nb.logical_switch_port().get(&p.nb) else {
            continue;
        };
        let parent = lsp.parent_name.clone().unwrap_or_default();
        let taken = used.entry(parent.clone()).or_default();
        match (1..MAX_TAGS).find(|t| !taken.contains_key(t)) {
            Some(t) => {
                taken.insert(t, lsp.name.clone());
                out.insert(i, t);
            }
            None => diags.push(
                "Logical_Switch_Port",
                lsp.uuid,
                &lsp.name,
                format!("no VLAN tag is left under parent {parent:?}; the port gets no tag"),
            ),
        }
    }
    out
}

/// `options:requested-tnl-key` must be 1..32767 and unique within its datapath.
fn check_requested_keys(topo: &Topo<'_>, diags: &mut Diags) {
    for d in &topo.datapaths {
        let mut seen: HashMap<u32, &str> = HashMap::new();
        for q in &d.ports {
            let p = &topo.ports[*q];
            if matches!(p.kind, PortKind::ChassisRedirect { .. }) {
                continue;
            }
            let Some(k) = p.options.get("requested-tnl-key") else {
                continue;
            };
            let table = if p.is_lrp() {
                "Logical_Router_Port"
            } else {
                "Logical_Switch_Port"
            };
            match k.parse::<u32>().ok().filter(|k| (1..=32767).contains(k)) {
                None => diags.push(
                    table,
                    p.nb,
                    &p.name,
                    format!(
                        "options:requested-tnl-key {k:?} is not a number in 1..32767; the port gets a free key"
                    ),
                ),
                Some(k) => {
                    if let Some(other) = seen.get(&k) {
                        diags.push(
                            table,
                            p.nb,
                            &p.name,
                            format!(
                                "options:requested-tnl-key {k} is already requested by {other:?} on {}; this port gets a free key",
                                d.name
                            ),
                        );
                    } else {
                        seen.insert(k, &p.name);
                    }
                }
            }
        }
    }
}
