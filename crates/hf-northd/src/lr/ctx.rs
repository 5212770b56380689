//! One router digested for its stages: its enabled ports with their networks, whether it is a
//! gateway router or has a distributed gateway port, and its NAT rows, load balancers, static
//! routes and policies parsed once. Bad rows become diagnostics here (a NAT whose addresses do
//! not parse, a `logical_port` that does not exist, a route whose next hop no port reaches, an
//! unparsable policy match) and are left out (overlapping networks are `Topo`'s); stages only read the
//! result. Nothing here emits flows.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hf_expr::ast::Expr;
use hf_model::nb;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use uuid::Uuid;

use crate::addr::{Mac, parse_ip_port, parse_net};
use crate::diag::Diags;
use crate::flow::{DpIdx, Owner};
use crate::topo::{PortIdx, PortKind, Topo};

/// One enabled router port.
#[derive(Clone, Debug)]
pub struct Rp {
    /// Index in [`Topo::ports`].
    pub idx: PortIdx,
    /// Name.
    pub name: String,
    /// NB row.
    pub nb: Uuid,
    /// MAC.
    pub mac: Mac,
    /// IPv4 networks (with host bits).
    pub v4: Vec<Ipv4Net>,
    /// IPv6 networks (with host bits), global ones first, then the link-local one OVN adds.
    pub v6: Vec<Ipv6Net>,
    /// The chassis-redirect port's name when this is the distributed gateway port.
    pub cr: Option<String>,
    /// The switch datapath on the other side (through the `type=router` LSP), if any.
    pub peer_switch: Option<DpIdx>,
    /// The LRP on the other side of a router-to-router link.
    pub peer_lrp: Option<PortIdx>,
    /// `options:route_table`.
    pub route_table: Option<String>,
    /// The routable NAT and LB addresses of the other routers on the switch it faces
    /// ([`crate::lr::routable::beside`]), found once for the routes and the resolution.
    pub routable: Vec<crate::lr::routable::Routable>,
    /// An NB `BFD` row names it ([`crate::bfd::BfdPlan::has_bfd`]).
    pub has_bfd: bool,
}

impl Rp {
    /// `is_chassis_resident("cr-...")` for the distributed gateway port.
    pub fn resident(&self) -> Option<Expr> {
        self.cr.as_ref().map(|c| resident(c))
    }

    /// The port's IPv6 networks that are not link-local.
    pub fn v6_global(&self) -> impl Iterator<Item = &Ipv6Net> {
        self.v6.iter().filter(|n| !is_lla(n.addr()))
    }

    /// Its address in the network holding `ip`, if any.
    pub fn addr_for(&self, ip: IpAddr) -> Option<IpAddr> {
        match ip {
            IpAddr::V4(a) => self
                .v4
                .iter()
                .find(|n| n.trunc().contains(&a))
                .map(|n| IpAddr::V4(n.addr())),
            IpAddr::V6(a) => self
                .v6
                .iter()
                .find(|n| n.trunc().contains(&a))
                .map(|n| IpAddr::V6(n.addr())),
        }
    }
}

/// `fe80::/10`.
pub fn is_lla(a: Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

/// `is_chassis_resident("port")`.
pub fn resident(port: &str) -> Expr {
    Expr::ChassisResident {
        port: port.to_string(),
        span: Default::default(),
    }
}

/// NAT type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatKind {
    /// `snat`.
    Snat,
    /// `dnat`.
    Dnat,
    /// `dnat_and_snat`.
    DnatAndSnat,
}

impl NatKind {
    /// Has an SNAT half.
    pub fn snat(self) -> bool {
        matches!(self, NatKind::Snat | NatKind::DnatAndSnat)
    }
    /// Has a DNAT half.
    pub fn dnat(self) -> bool {
        matches!(self, NatKind::Dnat | NatKind::DnatAndSnat)
    }
    fn name(self) -> &'static str {
        match self {
            NatKind::Snat => "snat",
            NatKind::Dnat => "dnat",
            NatKind::DnatAndSnat => "dnat_and_snat",
        }
    }
}

/// One NAT row, parsed.
#[derive(Clone, Debug)]
pub struct Nat {
    /// NB row.
    pub uuid: Uuid,
    /// Type.
    pub kind: NatKind,
    /// `external_ip`.
    pub external: IpAddr,
    /// `logical_ip` (a host or, for snat, a network).
    pub logical: IpNet,
    /// Distributed: (`logical_port`, `external_mac`), only on routers with a DGP.
    pub distributed: Option<(String, Mac)>,
    /// The DGP it is on (index into [`Rtr::ports`]), on distributed routers.
    pub dgp: Option<usize>,
    /// `allowed_ext_ips` address set name.
    pub allowed: Option<String>,
    /// `exempted_ext_ips` address set name.
    pub exempted: Option<String>,
    /// `external_port_range` (`lo-hi`).
    pub port_range: Option<(u16, u16)>,
    /// The 24.09 `match` extension, parsed.
    pub extra: Option<Expr>,
    /// The 24.09 `priority` extension.
    pub priority: i64,
    /// The owner of its flows.
    pub owner: Owner,
    /// `options:stateless=true` (as written; it changes translation only for
    /// `dnat_and_snat`, see [`Nat::stateless`]).
    pub stateless_opt: bool,
}

impl Nat {
    /// A stateless `dnat_and_snat`: translated by rewriting addresses, no conntrack.
    pub fn stateless(&self) -> bool {
        self.stateless_opt && self.kind == NatKind::DnatAndSnat
    }

    /// IPv6.
    pub fn v6(&self) -> bool {
        self.external.is_ipv6()
    }
    /// The logical IP's prefix length.
    pub fn plen(&self) -> u8 {
        self.logical.prefix_len()
    }
}

/// A load balancer VIP on the router.
#[derive(Clone, Debug)]
pub struct Vip {
    /// LB row.
    pub lb: Uuid,
    /// Owner of its flows.
    pub owner: Owner,
    /// The VIP.
    pub ip: IpAddr,
    /// The VIP port.
    pub port: Option<u16>,
    /// `tcp`, `udp`, `sctp`.
    pub proto: &'static str,
    /// Backends as written.
    pub backends: Vec<(IpAddr, Option<u16>)>,
    /// The VIP key as written (for discriminators).
    pub key: String,
    /// `options:skip_snat`.
    pub skip_snat: bool,
    /// `selection_fields`, joined as `hash_fields` wants them.
    pub hash_fields: Option<String>,
    /// No backends and `options:reject=true`: new connections are rejected.
    pub reject: bool,
    /// `options:affinity_timeout` (seconds, > 0): sessions stick to a backend.
    pub affinity: Option<u32>,
}

/// One next hop of a route group.
#[derive(Clone, Debug)]
pub struct Hop {
    /// The route row.
    pub uuid: Uuid,
    /// The owner.
    pub owner: Owner,
    /// The next hop address (`None`: connected, `reg0 = ip4.dst`).
    pub nexthop: Option<IpAddr>,
    /// Output port (index into [`Rtr::ports`]).
    pub port: usize,
    /// The port's address used as source (`reg1`/`xxreg1`).
    pub src: IpAddr,
    /// `options:ecmp_symmetric_reply=true` (used on gateway routers).
    pub symmetric: bool,
}

/// Routes with the same (table, prefix, direction): one flow, or an ECMP group.
#[derive(Clone, Debug)]
pub struct RouteGroup {
    /// Route table name (`""`: main).
    pub table: String,
    /// Prefix (host bits cleared).
    pub prefix: IpNet,
    /// Matches on the source (`policy=src-ip`).
    pub src: bool,
    /// The next hops, in NB order.
    pub hops: Vec<Hop>,
    /// ECMP group id (for groups of more than one hop).
    pub ecmp_id: u16,
    /// A `discard` route (no hops): the row and its owner.
    pub discard: Option<(Uuid, Owner)>,
    /// `options:origin=connected`: a connected route's priority offset.
    pub connected: bool,
}

/// One router policy, parsed.
#[derive(Clone, Debug)]
pub struct Policy {
    /// NB row.
    pub uuid: Uuid,
    /// Owner.
    pub owner: Owner,
    /// Priority.
    pub priority: u16,
    /// The NB match.
    pub matches: Expr,
    /// What it does.
    pub action: PolicyAction,
    /// `options:pkt_mark` (allow and reroute set `pkt.mark`).
    pub pkt_mark: Option<u32>,
}

/// A policy's action.
#[derive(Clone, Debug)]
pub enum PolicyAction {
    /// `allow`.
    Allow,
    /// `drop`.
    Drop,
    /// `reroute` to these next hops (port index in [`Rtr::ports`], next hop, source), with an
    /// ECMP group id when there are several.
    Reroute(Vec<(usize, IpAddr, IpAddr)>, u16),
}

/// A router digested.
#[derive(Debug)]
pub struct Rtr {
    /// Its datapath.
    pub dp: DpIdx,
    /// Name.
    pub name: String,
    /// A gateway router (`options:chassis`).
    pub gw_router: bool,
    /// Enabled router ports, by name.
    pub ports: Vec<Rp>,
    /// Index into `ports` of the first distributed gateway port.
    pub dgp: Option<usize>,
    /// NAT rows.
    pub nats: Vec<Nat>,
    /// LB VIPs.
    pub vips: Vec<Vip>,
    /// VIPs without backends that raise events ([`crate::lb_event`]).
    pub lb_events: Vec<crate::lb_event::EventVip>,
    /// VIPs of template load balancers ([`crate::lb_template`]).
    pub templates: Vec<crate::lb_template::TemplateVip>,
    /// Route groups, in priority order of emission.
    pub routes: Vec<RouteGroup>,
    /// The IPv6 next hops of static routes left out because their BFD session is down (their
    /// `lr_in_arp_request` flows stay: ovn-northd writes them from every static route).
    pub bfd_down_hops: Vec<(std::net::Ipv6Addr, Owner, Uuid)>,
    /// Policies.
    pub policies: Vec<Policy>,
    /// Route table name → id (1..).
    pub route_tables: BTreeMap<String, u32>,
    /// `options:lb_force_snat_ip=router_ip` on a gateway router.
    pub force_snat_router_ip: bool,
    /// Router LB VIPs the router answers ARP/ND for (LB `options:neighbor_responder`:
    /// `reachable`, the default, means inside one of the router's networks): the contents of
    /// the SB address sets `_rtr_lb_<key>_ip4`/`_ip6`.
    pub lb_reachable: (BTreeSet<Ipv4Addr>, BTreeSet<Ipv6Addr>),
    /// The router's tunnel key (names those address sets).
    pub tunnel_key: u32,
    /// `options:lb_force_snat_ip=ADDR...`: the first address per family (SNAT flows for them
    /// only on gateway routers; on others LB traffic is only marked).
    pub lb_force_snat: Vec<IpAddr>,
    /// `options:dnat_force_snat_ip=ADDR...` on a gateway router: the first address per family.
    pub dnat_force_snat: Vec<IpAddr>,
}

impl Rtr {
    /// `lb_force_snat_ip=router_ip`: each port facing a switch or another router with the
    /// address its traffic is SNATed to (its first IPv4 address and its first global IPv6
    /// address), as unSNAT and SNAT both need them.
    pub fn router_ip_snat_addrs(&self) -> impl Iterator<Item = (&Rp, IpAddr)> + '_ {
        self.ports
            .iter()
            .filter(|p| p.peer_switch.is_some() || p.peer_lrp.is_some())
            .flat_map(|p| {
                p.v4.first()
                    .map(|n| IpAddr::V4(n.addr()))
                    .into_iter()
                    .chain(p.v6_global().next().map(|n| IpAddr::V6(n.addr())))
                    .map(move |a| (p, a))
            })
    }

    /// Owner of the router's own flows.
    pub fn owner(&self) -> Owner {
        Owner::Datapath(self.name.clone())
    }

    /// The router has NAT or load balancers (OVN's NAT/LB stages come alive).
    pub fn has_nat_or_lb(&self) -> bool {
        !self.nats.is_empty() || self.has_lb_vip()
    }

    /// Some load balancer of the router has a VIP (OVN's `has_lb_vip`; templates count).
    pub fn has_lb_vip(&self) -> bool {
        !self.vips.is_empty() || !self.templates.is_empty()
    }

    /// The port index (into `ports`) of a topo port.
    pub fn port_of(&self, idx: PortIdx) -> Option<usize> {
        self.ports.iter().position(|p| p.idx == idx)
    }

    /// The port (into `ports`) whose network holds `ip`, first by name.
    pub fn port_for(&self, ip: IpAddr) -> Option<(usize, IpAddr)> {
        self.ports
            .iter()
            .enumerate()
            .find_map(|(i, p)| p.addr_for(ip).map(|a| (i, a)))
    }

    /// The residency condition of a NAT's flows on a distributed router: the logical port
    /// for distributed NAT, the chassis-redirect port otherwise.
    pub fn nat_resident(&self, n: &Nat) -> Option<Expr> {
        if let Some((lp, _)) = &n.distributed {
            return Some(resident(lp));
        }
        n.dgp.and_then(|d| self.ports[d].resident())
    }

    /// Digests router `dp`.
    pub fn new(topo: &Topo<'_>, dp: DpIdx, diags: &mut Diags) -> Rtr {
        let d = &topo.datapaths[dp];
        let nb = topo.nb;
        let lr = nb.logical_router().get(&d.nb);
        let mut r = Rtr {
            dp,
            name: d.name.clone(),
            gw_router: d.gateway_chassis.is_some(),
            ports: Vec::new(),
            dgp: None,
            nats: Vec::new(),
            vips: Vec::new(),
            lb_events: Vec::new(),
            templates: Vec::new(),
            routes: Vec::new(),
            bfd_down_hops: Vec::new(),
            policies: Vec::new(),
            route_tables: BTreeMap::new(),
            force_snat_router_ip: d.gateway_chassis.is_some()
                && lr
                    .and_then(|l| l.options.get("lb_force_snat_ip"))
                    .is_some_and(|v| v == "router_ip"),
            lb_force_snat: Vec::new(),
            lb_reachable: Default::default(),
            tunnel_key: d.tunnel_key,
            dnat_force_snat: Vec::new(),
        };
        if let Some(lr) = lr {
            for (key, dst) in [("lb_force_snat_ip", 0), ("dnat_force_snat_ip", 1)] {
                let Some(v) = lr.options.get(key).filter(|v| v.as_str() != "router_ip") else {
                    continue;
                };
                let mut got: Vec<IpAddr> = Vec::new();
                for w in v.split_whitespace() {
                    match w.parse::<IpAddr>() {
                        Ok(a) if !got.iter().any(|g| g.is_ipv4() == a.is_ipv4()) => got.push(a),
                        Ok(_) => {}
                        Err(_) => diags.push(
                            "Logical_Router",
                            lr.uuid,
                            &lr.name,
                            format!(
                                "options:{key} entry {w:?} is not an IP address; it is ignored"
                            ),
                        ),
                    }
                }
                if dst == 0 {
                    r.lb_force_snat = got;
                } else if r.gw_router {
                    r.dnat_force_snat = got;
                }
            }
        }
        r.digest_ports(topo);
        let Some(lr) = lr else {
            return r;
        };
        r.digest_nats(topo, lr, diags);
        r.digest_lbs(topo, lr, diags);
        r.digest_routes(topo, lr, diags);
        r.digest_policies(topo, lr, diags);
        r
    }

    fn digest_ports(&mut self, topo: &Topo<'_>) {
        let d = &topo.datapaths[self.dp];
        for &pi in &d.ports {
            let p = &topo.ports[pi];
            let PortKind::RouterPort { peer, switch_peer } = &p.kind else {
                continue;
            };
            if !p.enabled {
                continue;
            }
            let Some(mac) = p.mac else { continue };
            let mut v4 = Vec::new();
            let mut v6 = Vec::new();
            for n in &p.networks {
                match n {
                    IpNet::V4(n) => v4.push(*n),
                    IpNet::V6(n) => v6.push(*n),
                }
            }
            // OVN gives every router port the EUI-64 link-local address.
            let lla = mac.ipv6_lla();
            if !v6.iter().any(|n| n.addr() == lla)
                && let Ok(n) = Ipv6Net::new(lla, 64)
            {
                v6.push(n);
            }
            // Overlapping networks were dropped by `Topo` (with a diagnostic).
            let is_dgp = d.dgps.contains(&pi);
            self.ports.push(Rp {
                idx: pi,
                name: p.name.clone(),
                nb: p.nb,
                mac,
                v4,
                v6,
                cr: is_dgp.then(|| format!("cr-{}", p.name)),
                peer_switch: switch_peer.map(|s| topo.ports[s].dp),
                routable: crate::lr::routable::beside(
                    topo,
                    pi,
                    switch_peer.map(|s| topo.ports[s].dp),
                ),
                peer_lrp: *peer,
                has_bfd: topo.bfd.has_bfd.contains(&p.name),
                route_table: p
                    .options
                    .get("route_table")
                    .filter(|s| !s.is_empty())
                    .cloned(),
            });
            if is_dgp && self.dgp.is_none() {
                self.dgp = Some(self.ports.len() - 1);
            }
        }
    }

    fn digest_nats(&mut self, topo: &Topo<'_>, lr: &nb::LogicalRouter, diags: &mut Diags) {
        let nb = topo.nb;
        let mut rows: Vec<&nb::Nat> = lr.nat.iter().filter_map(|r| nb.get(*r)).collect();
        rows.sort_by(|a, b| {
            (&a.external_ip, &a.logical_ip, a.uuid).cmp(&(&b.external_ip, &b.logical_ip, b.uuid))
        });
        let symtab = hf_expr::symbols::SymbolTable::shared();
        for n in rows {
            let handle = format!(
                "{} {} {}",
                nat_type_name(&n.type_),
                n.logical_ip,
                n.external_ip
            );
            let bad = |diags: &mut Diags, why: String| {
                diags.push(
                    "NAT",
                    n.uuid,
                    &handle,
                    format!("{why}; the NAT is left out"),
                );
            };
            let kind = match &n.type_ {
                nb::NatType::Snat => NatKind::Snat,
                nb::NatType::Dnat => NatKind::Dnat,
                nb::NatType::DnatAndSnat => NatKind::DnatAndSnat,
                t => {
                    bad(
                        diags,
                        format!("type {t:?} is not snat, dnat or dnat_and_snat"),
                    );
                    continue;
                }
            };
            let Ok(external) = n.external_ip.trim().parse::<IpAddr>() else {
                bad(
                    diags,
                    format!("external_ip {:?} is not an IP address", n.external_ip),
                );
                continue;
            };
            let Some(logical) = parse_net(n.logical_ip.trim()) else {
                bad(
                    diags,
                    format!(
                        "logical_ip {:?} is not an IP address or network",
                        n.logical_ip
                    ),
                );
                continue;
            };
            if logical.addr().is_ipv4() != external.is_ipv4() {
                bad(
                    diags,
                    "external_ip and logical_ip are of different address families".into(),
                );
                continue;
            }
            let host = logical.prefix_len() == logical.max_prefix_len();
            if kind.dnat() && !host {
                bad(
                    diags,
                    format!(
                        "logical_ip {:?} must be a single address for {}",
                        n.logical_ip,
                        kind.name()
                    ),
                );
                continue;
            }
            let logical = logical.trunc();
            let mut distributed = None;
            if let Some(lp) = n.logical_port.as_ref().filter(|s| !s.is_empty()) {
                if kind != NatKind::DnatAndSnat {
                    bad(
                        diags,
                        "logical_port is only meaningful for dnat_and_snat".into(),
                    );
                    continue;
                }
                if topo.port(lp).is_none() {
                    bad(diags, format!("logical_port {lp:?} does not exist"));
                    continue;
                }
                let Some(mac) = n.external_mac.as_deref().and_then(Mac::parse) else {
                    bad(
                        diags,
                        format!(
                            "external_mac {:?} is not an Ethernet address (distributed NAT needs one)",
                            n.external_mac.clone().unwrap_or_default()
                        ),
                    );
                    continue;
                };
                if !self.gw_router {
                    distributed = Some((lp.clone(), mac));
                }
            }
            let mut dgp = None;
            if !self.gw_router {
                let dgps: Vec<usize> = self
                    .ports
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.cr.is_some())
                    .map(|(i, _)| i)
                    .collect();
                let chosen = if let Some(g) = n.gateway_port {
                    dgps.iter().copied().find(|i| self.ports[*i].nb == g.uuid())
                } else if dgps.len() == 1 {
                    dgps.first().copied()
                } else {
                    dgps.iter()
                        .copied()
                        .find(|i| self.ports[*i].addr_for(external).is_some())
                };
                match chosen {
                    Some(c) => dgp = Some(c),
                    None => {
                        // As OVN: no NAT flows, but the address is still the router's (ARP
                        // replies, not dropped as a router address).
                        diags.push(
                            "NAT",
                            n.uuid,
                            &handle,
                            "the router is neither a gateway router nor has a (matching) distributed gateway port; no NAT is done (its external address still answers ARP)",
                        );
                        distributed = None;
                    }
                }
            }
            let set_name = |r: &Option<hf_model::RowRef<nb::AddressSet>>| {
                r.and_then(|r| nb.get(r)).map(|a| a.name.clone())
            };
            let port_range = if n.external_port_range.trim().is_empty() {
                None
            } else {
                let s = n.external_port_range.trim();
                let parsed = match s.split_once('-') {
                    Some((a, b)) => a.parse::<u16>().ok().zip(b.parse::<u16>().ok()),
                    None => s.parse::<u16>().ok().map(|a| (a, a)),
                };
                match parsed.filter(|(a, b)| *a >= 1 && a <= b) {
                    Some(p) => Some(p),
                    None => {
                        bad(
                            diags,
                            format!(
                                "external_port_range {s:?} is not PORT or LO-HI within 1-65535"
                            ),
                        );
                        continue;
                    }
                }
            };
            let extra = if n.match_.trim().is_empty() {
                None
            } else {
                match hf_expr::parse_match(symtab, &n.match_) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        bad(diags, format!("match {:?} does not parse: {e}", n.match_));
                        continue;
                    }
                }
            };
            self.nats.push(Nat {
                uuid: n.uuid,
                kind,
                external,
                logical,
                distributed,
                dgp,
                allowed: set_name(&n.allowed_ext_ips),
                exempted: set_name(&n.exempted_ext_ips),
                port_range,
                extra,
                priority: n.priority,
                stateless_opt: n.options.get("stateless").is_some_and(|v| v == "true"),
                owner: Owner::Nat {
                    router: self.name.clone(),
                    kind: kind.name().to_string(),
                    logical_ip: n.logical_ip.clone(),
                    external_ip: n.external_ip.clone(),
                },
            });
        }
    }

    fn digest_lbs(&mut self, topo: &Topo<'_>, lr: &nb::LogicalRouter, diags: &mut Diags) {
        let nb = topo.nb;
        let mut lbs: Vec<&nb::LoadBalancer> =
            lr.load_balancer.iter().filter_map(|r| nb.get(*r)).collect();
        for g in lr.load_balancer_group.iter().filter_map(|r| nb.get(*r)) {
            lbs.extend(g.load_balancer.iter().filter_map(|r| nb.get(*r)));
        }
        lbs.sort_by(|a, b| (&a.name, a.uuid).cmp(&(&b.name, b.uuid)));
        lbs.dedup_by_key(|l| l.uuid);
        for lb in lbs {
            let proto = match &lb.protocol {
                None | Some(nb::LoadBalancerProtocol::Tcp) => "tcp",
                Some(nb::LoadBalancerProtocol::Udp) => "udp",
                Some(nb::LoadBalancerProtocol::Sctp) => "sctp",
                Some(p) => {
                    diags.push("Load_Balancer", lb.uuid, &lb.name, format!("protocol {p:?} is not tcp, udp or sctp; the load balancer is left out of {}", self.name));
                    continue;
                }
            };
            if crate::lb_template::is_template(lb) {
                let event = crate::lb_event::enabled(topo, lb);
                self.templates
                    .extend(crate::lb_template::parse(lb, proto, event, diags));
                continue;
            }
            let skip_snat = lb.options.get("skip_snat").is_some_and(|v| v == "true");
            let responder = lb
                .options
                .get("neighbor_responder")
                .map_or("reachable", String::as_str);
            let nets: Vec<IpNet> = topo.datapaths[self.dp]
                .ports
                .iter()
                .flat_map(|p| topo.ports[*p].networks.iter().map(|n| n.trunc()))
                .collect();
            for vip in lb.vips.keys() {
                let Some((ip, _)) = parse_ip_port(vip) else {
                    continue;
                };
                let answer = match responder {
                    "none" => false,
                    "all" => true,
                    _ => nets.iter().any(|n| n.contains(&ip)),
                };
                if answer {
                    match ip {
                        IpAddr::V4(a) => self.lb_reachable.0.insert(a),
                        IpAddr::V6(a) => self.lb_reachable.1.insert(a),
                    };
                }
            }
            for (vip, backends) in &lb.vips {
                let Some((ip, port)) = parse_ip_port(vip) else {
                    diags.push(
                        "Load_Balancer",
                        lb.uuid,
                        &lb.name,
                        format!("VIP {vip:?} is not IP[:PORT]; it is left out"),
                    );
                    continue;
                };
                let mut bs = Vec::new();
                let mut ok = true;
                for b in backends.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    match parse_ip_port(b) {
                        Some((bip, bport))
                            if bip.is_ipv4() == ip.is_ipv4()
                                && (bport.is_some() == port.is_some()) =>
                        {
                            bs.push((bip, bport))
                        }
                        _ => {
                            diags.push("Load_Balancer", lb.uuid, &lb.name, format!("backend {b:?} of VIP {vip:?} is not an address of the VIP's family (with a port exactly when the VIP has one); the VIP is left out"));
                            ok = false;
                            break;
                        }
                    }
                }
                if !ok {
                    continue;
                }
                let reject = bs.is_empty() && lb.options.get("reject").is_some_and(|v| v == "true");
                if bs.is_empty() && !reject && crate::lb_event::enabled(topo, lb) {
                    self.lb_events.push(crate::lb_event::EventVip {
                        lb: lb.uuid,
                        owner: Owner::LoadBalancer(lb.name.clone()),
                        ip,
                        port,
                        proto,
                        key: vip.clone(),
                    });
                }
                if bs.is_empty() && !reject {
                    diags.push("Load_Balancer", lb.uuid, &lb.name, format!("VIP {vip:?} has no backends (and no options:reject=true); router {} leaves it out", self.name));
                    continue;
                }
                self.vips.push(Vip {
                    lb: lb.uuid,
                    owner: Owner::LoadBalancer(lb.name.clone()),
                    ip,
                    port,
                    proto,
                    backends: bs,
                    key: vip.clone(),
                    skip_snat,
                    hash_fields: (!lb.selection_fields.is_empty()).then(|| {
                        lb.selection_fields
                            .iter()
                            .map(|f| match f.as_str() {
                                "tp_src" => format!("{proto}_src"),
                                "tp_dst" => format!("{proto}_dst"),
                                other => other.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join(",")
                    }),
                    reject,
                    affinity: lb
                        .options
                        .get("affinity_timeout")
                        .and_then(|t| t.trim().parse::<u32>().ok())
                        .filter(|t| *t > 0),
                });
            }
        }
    }

    fn digest_routes(&mut self, topo: &Topo<'_>, lr: &nb::LogicalRouter, diags: &mut Diags) {
        let nb = topo.nb;
        // Route tables: ids in name order, from ports and routes.
        let mut names: Vec<String> = self
            .ports
            .iter()
            .filter_map(|p| p.route_table.clone())
            .collect();
        let mut rows: Vec<&nb::LogicalRouterStaticRoute> =
            lr.static_routes.iter().filter_map(|r| nb.get(*r)).collect();
        rows.sort_by(|a, b| {
            (&a.route_table, &a.ip_prefix, &a.nexthop, a.uuid).cmp(&(
                &b.route_table,
                &b.ip_prefix,
                &b.nexthop,
                b.uuid,
            ))
        });
        names.extend(
            rows.iter()
                .map(|r| r.route_table.clone())
                .filter(|s| !s.is_empty()),
        );
        names.sort();
        names.dedup();
        for (i, n) in names.into_iter().enumerate() {
            self.route_tables.insert(n, i as u32 + 1);
        }
        let mut groups: BTreeMap<(String, bool, IpNet), usize> = BTreeMap::new();
        for rt in rows {
            let handle = format!("{} via {}", rt.ip_prefix, rt.nexthop);
            let bad = |diags: &mut Diags, why: String| {
                diags.push(
                    "Logical_Router_Static_Route",
                    rt.uuid,
                    &handle,
                    format!("{why}; the route is left out"),
                );
            };
            let Some(prefix) = parse_net(rt.ip_prefix.trim()) else {
                bad(
                    diags,
                    format!("ip_prefix {:?} is not an IP network", rt.ip_prefix),
                );
                continue;
            };
            let src = match &rt.policy {
                None | Some(nb::LogicalRouterStaticRoutePolicy::DstIp) => false,
                Some(nb::LogicalRouterStaticRoutePolicy::SrcIp) => true,
                Some(p) => {
                    bad(diags, format!("policy {p:?} is not dst-ip or src-ip"));
                    continue;
                }
            };
            let owner = Owner::Route {
                router: self.name.clone(),
                table: rt.route_table.clone(),
                prefix: rt.ip_prefix.clone(),
                nexthop: rt.nexthop.clone(),
            };
            let connected = rt.options.get("origin").is_some_and(|o| o == "connected");
            if topo.bfd.routes_down.contains(&rt.uuid) {
                if let Ok(std::net::IpAddr::V6(a)) = rt.nexthop.trim().parse() {
                    self.bfd_down_hops.push((a, owner.clone(), rt.uuid));
                }
                diags.push(
                    "Logical_Router_Static_Route",
                    rt.uuid,
                    &handle,
                    "the BFD session to the next hop is down (NB BFD status); the route is left out until it is up",
                );
                continue;
            }
            let symmetric = rt
                .options
                .get("ecmp_symmetric_reply")
                .is_some_and(|v| v == "true");
            if symmetric && !self.gw_router {
                diags.push("Logical_Router_Static_Route", rt.uuid, &handle, "options:ecmp_symmetric_reply works on gateway routers only (options:chassis), as in OVN 23.03; on this router replies take the router's own ECMP choice");
            }
            if rt.nexthop == "discard" {
                self.routes.push(RouteGroup {
                    table: rt.route_table.clone(),
                    prefix: prefix.trunc(),
                    src,
                    hops: Vec::new(),
                    ecmp_id: 0,
                    discard: Some((rt.uuid, owner)),
                    connected,
                });
                continue;
            }
            let Ok(nh) = rt.nexthop.trim().parse::<IpAddr>() else {
                bad(
                    diags,
                    format!("nexthop {:?} is not an IP address", rt.nexthop),
                );
                continue;
            };
            if nh.is_ipv4() != prefix.addr().is_ipv4() {
                bad(
                    diags,
                    "nexthop and ip_prefix are of different address families".into(),
                );
                continue;
            }
            let out = if let Some(op) = rt.output_port.as_ref().filter(|s| !s.is_empty()) {
                match self.ports.iter().position(|p| &p.name == op) {
                    Some(i) => {
                        let src_ip = self.ports[i].addr_for(nh).or_else(|| match nh {
                            IpAddr::V4(_) => self.ports[i].v4.first().map(|n| IpAddr::V4(n.addr())),
                            IpAddr::V6(_) => self.ports[i].v6.first().map(|n| IpAddr::V6(n.addr())),
                        });
                        src_ip.map(|s| (i, s))
                    }
                    None => {
                        bad(
                            diags,
                            format!(
                                "output_port {op:?} is not an enabled port of router {}",
                                self.name
                            ),
                        );
                        continue;
                    }
                }
            } else {
                self.port_for(nh)
            };
            let Some((port, src_ip)) = out else {
                bad(
                    diags,
                    format!(
                        "nexthop {nh} is not reachable from any port of router {}",
                        self.name
                    ),
                );
                continue;
            };
            let key = (rt.route_table.clone(), src, prefix.trunc());
            let hop = Hop {
                uuid: rt.uuid,
                owner,
                nexthop: Some(nh),
                port,
                src: src_ip,
                symmetric,
            };
            match groups.get(&key) {
                Some(&g) => {
                    if self.routes[g].hops.iter().any(|h| h.nexthop == Some(nh)) {
                        bad(
                            diags,
                            "duplicate of another route with the same prefix and next hop".into(),
                        );
                        continue;
                    }
                    self.routes[g].hops.push(hop);
                }
                None => {
                    groups.insert(key, self.routes.len());
                    self.routes.push(RouteGroup {
                        table: rt.route_table.clone(),
                        prefix: prefix.trunc(),
                        src,
                        hops: vec![hop],
                        ecmp_id: 0,
                        discard: None,
                        connected,
                    });
                }
            }
        }
        let mut next_id = 1u16;
        for g in &mut self.routes {
            if g.hops.len() > 1 {
                g.ecmp_id = next_id;
                next_id = next_id.saturating_add(1);
            }
        }
    }

    fn digest_policies(&mut self, topo: &Topo<'_>, lr: &nb::LogicalRouter, diags: &mut Diags) {
        let nb = topo.nb;
        let symtab = hf_expr::symbols::SymbolTable::shared();
        let mut rows: Vec<&nb::LogicalRouterPolicy> =
            lr.policies.iter().filter_map(|r| nb.get(*r)).collect();
        rows.sort_by(|a, b| (b.priority, &a.match_, a.uuid).cmp(&(a.priority, &b.match_, b.uuid)));
        let mut ecmp = 1u16;
        for p in rows {
            let handle = format!("{} {}", p.priority, p.match_);
            let bad = |diags: &mut Diags, why: String| {
                diags.push(
                    "Logical_Router_Policy",
                    p.uuid,
                    &handle,
                    format!("{why}; the policy is left out"),
                );
            };
            let Ok(priority) = u16::try_from(p.priority)
                .map_err(|_| ())
                .and_then(|x| if x <= 32767 { Ok(x) } else { Err(()) })
            else {
                bad(
                    diags,
                    format!("priority {} is outside 0..32767", p.priority),
                );
                continue;
            };
            let matches = match hf_expr::parse_match(symtab, &p.match_) {
                Ok(e) => e,
                Err(e) => {
                    bad(diags, format!("match {:?} does not parse: {e}", p.match_));
                    continue;
                }
            };
            let action = match &p.action {
                nb::LogicalRouterPolicyAction::Allow => PolicyAction::Allow,
                nb::LogicalRouterPolicyAction::Drop => PolicyAction::Drop,
                nb::LogicalRouterPolicyAction::Reroute => {
                    let mut hops: Vec<String> = p.nexthops.iter().cloned().collect();
                    if let Some(n) = &p.nexthop
                        && hops.is_empty()
                    {
                        hops.push(n.clone());
                    }
                    if hops.is_empty() {
                        bad(diags, "reroute without a nexthop".into());
                        continue;
                    }
                    let mut out = Vec::new();
                    let mut ok = true;
                    for h in &hops {
                        let Ok(ip) = h.trim().parse::<IpAddr>() else {
                            bad(diags, format!("nexthop {h:?} is not an IP address"));
                            ok = false;
                            break;
                        };
                        let Some((port, src)) = self.port_for(ip) else {
                            bad(
                                diags,
                                format!(
                                    "nexthop {ip} is not reachable from any port of router {}",
                                    self.name
                                ),
                            );
                            ok = false;
                            break;
                        };
                        out.push((port, ip, src));
                    }
                    if !ok {
                        continue;
                    }
                    let id = if out.len() > 1 {
                        let id = ecmp;
                        ecmp = ecmp.saturating_add(1);
                        id
                    } else {
                        0
                    };
                    PolicyAction::Reroute(out, id)
                }
                a => {
                    bad(diags, format!("action {a:?} is not allow, drop or reroute"));
                    continue;
                }
            };
            self.policies.push(Policy {
                uuid: p.uuid,
                owner: Owner::Policy {
                    router: self.name.clone(),
                    priority: p.priority,
                    nb_match: p.match_.clone(),
                },
                priority,
                matches,
                action,
                pkt_mark: p
                    .options
                    .get("pkt_mark")
                    .and_then(|m| m.trim().parse::<u32>().ok())
                    .filter(|m| *m > 0),
            });
        }
    }
}

fn nat_type_name(t: &nb::NatType) -> String {
    match t {
        nb::NatType::Snat => "snat".into(),
        nb::NatType::Dnat => "dnat".into(),
        nb::NatType::DnatAndSnat => "dnat_and_snat".into(),
        other => format!("{other:?}"),
    }
}

/// The directed broadcast address of an IPv4 network.
pub fn bcast4(n: &Ipv4Net) -> Ipv4Addr {
    n.broadcast()
}
