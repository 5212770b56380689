//! The NB topology as the checks read it: routers with their ports, gateway ports and a small
//! route lookup, switches with what attaches them to routers, and the cluster-internal
//! networks.
//!
//! Terms (OVN's):
//! - a *gateway router* has `options:chassis`: everything it forwards goes through its NAT;
//! - a *gateway port* (distributed gateway port) is a router port with `gateway_chassis`, an
//!   `ha_chassis_group` or `options:redirect-chassis`: a distributed router NATs only what
//!   leaves through it;
//! - an *external switch* has a `localnet` port: it is the physical network.
//!
//! Cluster-internal networks ([`Internal`]): the networks of `NB_Global
//! options:holdfast-cluster-cidrs` (host networks, which sit on external switches), the subnets
//! of switches that are not external and not reached only through gateway ports (their router
//! ports' networks, `other_config:subnet`/`ipv6_prefix`, port addresses), router networks other
//! than gateway ports' and those on external switches, and the chassis encap IPs (SB `Encap`).
//!
//! Routes ([`Topo::route`]): longest prefix over the router's connected networks and its
//! static routes with the `dst-ip` policy in the main table (a tie goes to the connected
//! network); equal-cost routes give several ports. Router policies (`Logical_Router_Policy`)
//! and other route tables are not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hf_model::{NbSnapshot, SbSnapshot, nb};
use ipnet::IpNet;

use crate::net::{parse_net, parse_subnet};

/// One router port.
#[derive(Debug)]
pub struct Port<'a> {
    /// The row.
    pub row: &'a nb::LogicalRouterPort,
    /// Its networks (host bits kept, as written).
    pub nets: Vec<IpNet>,
    /// A distributed gateway port.
    pub gateway: bool,
    /// The switch it attaches to (through a `router` type switch port).
    pub switch: Option<&'a nb::LogicalSwitch>,
}

/// One static route, resolved to ports.
#[derive(Debug)]
pub struct Route {
    /// `ip_prefix`.
    pub prefix: IpNet,
    /// The port it leaves through (index into [`Router::ports`]); `None`: `discard` or a
    /// next hop no port reaches.
    pub port: Option<usize>,
}

/// One router.
#[derive(Debug)]
pub struct Router<'a> {
    /// The row.
    pub row: &'a nb::LogicalRouter,
    /// `options:chassis` of a gateway router.
    pub gw_chassis: Option<&'a str>,
    /// Its ports, in NB order.
    pub ports: Vec<Port<'a>>,
    /// Its static routes.
    pub routes: Vec<Route>,
}

impl Router<'_> {
    /// A gateway router.
    pub fn is_gateway_router(&self) -> bool {
        self.gw_chassis.is_some()
    }

    /// Indexes of its distributed gateway ports.
    pub fn gateway_ports(&self) -> Vec<usize> {
        (0..self.ports.len())
            .filter(|i| self.ports[*i].gateway)
            .collect()
    }

    /// The port named `name`.
    pub fn port_index(&self, name: &str) -> Option<usize> {
        self.ports.iter().position(|p| p.row.name == name)
    }
}

/// Where a router sends a destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Out of these ports (several: equal-cost routes).
    Ports(BTreeSet<usize>),
    /// No route, or a `discard` route: dropped.
    Dropped,
}

/// One cluster-internal network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Internal {
    /// The network (host bits cleared).
    pub net: IpNet,
    /// What it is (`switch ls1's subnet`).
    pub what: String,
}

/// The view.
#[derive(Debug)]
pub struct Topo<'a> {
    /// NB.
    pub nb: &'a NbSnapshot,
    /// SB.
    pub sb: &'a SbSnapshot,
    /// Every router, in NB (UUID) order.
    pub routers: Vec<Router<'a>>,
    /// Switches with a `localnet` port, by UUID.
    pub external: BTreeSet<uuid::Uuid>,
    /// Cluster-internal networks, most specific source first: cluster CIDRs, switch subnets,
    /// router networks, encap IPs.
    pub internal: Vec<Internal>,
    /// Entries of `holdfast-cluster-cidrs` that are not networks.
    pub bad_cidrs: Vec<String>,
}

/// `Logical_Router_Port` is a distributed gateway port.
pub fn is_gateway_port(p: &nb::LogicalRouterPort) -> bool {
    !p.gateway_chassis.is_empty()
        || p.ha_chassis_group.is_some()
        || p.options
            .get("redirect-chassis")
            .is_some_and(|c| !c.is_empty())
}

impl<'a> Topo<'a> {
    /// Builds the view.
    pub fn new(nb: &'a NbSnapshot, sb: &'a SbSnapshot) -> Topo<'a> {
        // Router port name -> the switch its `router` type switch port is on.
        let mut lrp_switch: BTreeMap<&str, &nb::LogicalSwitch> = BTreeMap::new();
        let mut external = BTreeSet::new();
        for ls in nb.logical_switch().values() {
            for p in ls.ports.iter().filter_map(|r| nb.get(*r)) {
                if p.type_ == "router"
                    && let Some(rp) = p.options.get("router-port")
                {
                    lrp_switch.insert(rp.as_str(), ls);
                }
                if p.type_ == "localnet" {
                    external.insert(ls.uuid);
                }
            }
        }
        let mut routers = Vec::new();
        for lr in nb.logical_router().values() {
            let ports: Vec<Port<'a>> = lr
                .ports
                .iter()
                .filter_map(|r| nb.get(*r))
                .map(|p| Port {
                    row: p,
                    nets: p.networks.iter().filter_map(|n| parse_net(n)).collect(),
                    gateway: is_gateway_port(p),
                    switch: lrp_switch.get(p.name.as_str()).copied(),
                })
                .collect();
            let mut r = Router {
                row: lr,
                gw_chassis: lr
                    .options
                    .get("chassis")
                    .map(String::as_str)
                    .filter(|c| !c.is_empty()),
                ports,
                routes: Vec::new(),
            };
            r.routes = lr
                .static_routes
                .iter()
                .filter_map(|s| nb.get(*s))
                .filter(|s| {
                    s.route_table.is_empty()
                        && !matches!(s.policy, Some(nb::LogicalRouterStaticRoutePolicy::SrcIp))
                })
                .filter_map(|s| {
                    let prefix = parse_subnet(&s.ip_prefix)?;
                    let port = match s.output_port.as_deref() {
                        Some(o) => r.port_index(o),
                        None => parse_net(s.nexthop.trim()).and_then(|nh| {
                            r.ports
                                .iter()
                                .position(|p| p.nets.iter().any(|n| n.contains(&nh.addr())))
                        }),
                    };
                    Some(Route { prefix, port })
                })
                .collect();
            routers.push(r);
        }
        let mut t = Topo {
            nb,
            sb,
            routers,
            external,
            internal: Vec::new(),
            bad_cidrs: Vec::new(),
        };
        t.internal = t.internal_networks();
        t
    }

    /// Where `r` sends `dst`.
    pub fn route(&self, r: &Router<'_>, dst: IpAddr) -> Lookup {
        let mut best: Option<(u8, bool, BTreeSet<usize>)> = None;
        let mut consider = |plen: u8, connected: bool, port: Option<usize>| {
            let better = match &best {
                None => true,
                Some((bp, bc, _)) => plen > *bp || (plen == *bp && connected && !*bc),
            };
            if better {
                best = Some((plen, connected, port.into_iter().collect()));
            } else if let Some((bp, bc, set)) = &mut best
                && *bp == plen
                && *bc == connected
                && let Some(p) = port
            {
                set.insert(p);
            }
        };
        for (i, p) in r.ports.iter().enumerate() {
            for n in &p.nets {
                if n.trunc().contains(&dst) {
                    consider(n.prefix_len(), true, Some(i));
                }
            }
        }
        for s in &r.routes {
            if s.prefix.contains(&dst) {
                consider(s.prefix.prefix_len(), false, s.port);
            }
        }
        match best {
            Some((_, _, set)) if !set.is_empty() => Lookup::Ports(set),
            _ => Lookup::Dropped,
        }
    }

    fn internal_networks(&mut self) -> Vec<Internal> {
        let nb = self.nb;
        let mut out: Vec<Internal> = Vec::new();
        let push = |out: &mut Vec<Internal>, net: IpNet, what: String| {
            let net = net.trunc();
            if !out.iter().any(|i| i.net == net) {
                out.push(Internal { net, what });
            }
        };
        if let Some(g) = nb.nb_global().values().next()
            && let Some(list) = g.options.get("holdfast-cluster-cidrs")
        {
            for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                match parse_subnet(item) {
                    Some(n) => push(&mut out, n, format!("holdfast-cluster-cidrs {item}")),
                    None => self.bad_cidrs.push(item.to_string()),
                }
            }
        }
        // Router ports by switch.
        let mut attached: BTreeMap<uuid::Uuid, Vec<&Port<'_>>> = BTreeMap::new();
        for r in &self.routers {
            for p in &r.ports {
                if let Some(ls) = p.switch {
                    attached.entry(ls.uuid).or_default().push(p);
                }
            }
        }
        for ls in nb.logical_switch().values() {
            if self.external.contains(&ls.uuid) {
                continue;
            }
            let ports = attached.get(&ls.uuid).map(Vec::as_slice).unwrap_or(&[]);
            if !ports.is_empty() && ports.iter().all(|p| p.gateway) {
                continue;
            }
            let what = format!("switch {}'s subnet", ls.name);
            for p in ports {
                for n in &p.nets {
                    push(&mut out, *n, what.clone());
                }
            }
            if let Some(n) = ls.other_config.get("subnet").and_then(|s| parse_subnet(s)) {
                push(&mut out, n, what.clone());
            }
            if let Some(n) = ls
                .other_config
                .get("ipv6_prefix")
                .and_then(|s| parse_subnet(&format!("{}/64", s.trim().trim_end_matches("/64"))))
            {
                push(&mut out, n, what.clone());
            }
            for p in ls.ports.iter().filter_map(|r| nb.get(*r)) {
                if p.type_ == "router" || p.type_ == "localnet" {
                    continue;
                }
                let addrs = p.addresses.iter().chain(p.dynamic_addresses.iter());
                for a in addrs {
                    for w in a.split_whitespace().skip(1) {
                        if let Some(n) = parse_net(w)
                            && !out.iter().any(|i| i.net.contains(&n.addr()))
                        {
                            let host = IpNet::from(n.addr());
                            push(&mut out, host, format!("port {}'s address", p.name));
                        }
                    }
                }
            }
        }
        for r in &self.routers {
            for p in &r.ports {
                if p.gateway || p.switch.is_some_and(|s| self.external.contains(&s.uuid)) {
                    continue;
                }
                for n in &p.nets {
                    push(
                        &mut out,
                        *n,
                        format!("router {}'s network on {}", r.row.name, p.row.name),
                    );
                }
            }
        }
        for e in self.sb.encap().values() {
            if let Some(n) = parse_net(e.ip.trim()) {
                push(
                    &mut out,
                    n,
                    format!("chassis {}'s encap IP", e.chassis_name),
                );
            }
        }
        out
    }
}
