//! `lr_in_arp_resolve` (one stage of [`super`]).

use super::*;

/// `lr_in_arp_resolve`.
pub fn arp_resolve(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, diags: &mut Diags) {
    arp_resolve_common(topo, r, out, diags);
    for p in &r.ports {
        arp_resolve_port(topo, r, p, out);
    }
}

/// `lr_in_arp_resolve`'s flows that belong to no router port.
pub fn arp_resolve_common(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInArpResolve;
    let o = r.owner();
    let sp = Default::default;
    out.add(r.dp, st, 0, always(), drop(), o.clone(), "default", None);
    out.add(
        r.dp,
        st,
        1,
        pred("ip4"),
        vec![
            Action::GetArp {
                port: f("outport"),
                ip: nh_reg(false),
                span: sp(),
            },
            next(),
        ],
        o.clone(),
        "get-arp",
        None,
    );
    out.add(
        r.dp,
        st,
        1,
        pred("ip6"),
        vec![
            Action::GetNd {
                port: f("outport"),
                ip: nh_reg(true),
                span: sp(),
            },
            next(),
        ],
        o.clone(),
        "get-nd",
        None,
    );
    out.add(
        r.dp,
        st,
        500,
        or([pred("ip4.mcast"), pred("ip6.mcast")]),
        vec![next()],
        o,
        "mcast",
        None,
    );
}

/// The part of `lr_in_arp_resolve` that belongs to router port `p` (its next hops: the
/// addresses on the switch it faces, its peer router, its NAT next hops): what a port change
/// on that switch re-renders of the router (see [`crate::incremental`]).
pub fn arp_resolve_port(topo: &Topo<'_>, r: &Rtr, p: &Rp, out: &mut Flows) {
    let st = Stage::LrInArpResolve;
    let nat_ext: BTreeSet<IpAddr> = r.nats.iter().map(|n| n.external).collect();
    let dynamic_neigh = topo
        .nb
        .logical_router()
        .get(&topo.datapaths[r.dp].nb)
        .and_then(|l| l.options.get("dynamic_neigh_routers"))
        .is_some_and(|v| v == "true");
    {
        let mut seen: BTreeSet<IpAddr> = BTreeSet::new();
        let own = Owner::Port(p.name.clone());
        let mut entry = |out: &mut Flows, ip: IpAddr, mac: Mac, owner: Owner, hint| {
            if !in_port_nets(p, ip) || !seen.insert(ip) {
                return;
            }
            out.add(
                r.dp,
                st,
                100,
                and([outport(&p.name), eq(nh_reg(ip.is_ipv6()), ipv(ip))]),
                vec![set("eth.dst", macv(mac)), next()],
                owner,
                format!("nh-{ip}"),
                hint,
            );
        };
        // Router addresses that are NAT external addresses: never a next hop.
        for fam in [false, true] {
            let ips: Vec<IpAddr> = if fam {
                p.v6.iter().map(|n| IpAddr::V6(n.addr())).collect()
            } else {
                p.v4.iter().map(|n| IpAddr::V4(n.addr())).collect()
            };
            let hit: Vec<_> = ips
                .into_iter()
                .filter(|a| nat_ext.contains(a))
                .map(ipv)
                .collect();
            if !hit.is_empty() {
                let fld = if fam { "ip6.dst" } else { "ip4.dst" };
                out.add(
                    r.dp,
                    st,
                    2,
                    set_of(fld, hit),
                    drop(),
                    own.clone(),
                    format!("nat-router-ip-{fam}"),
                    Some(p.nb),
                );
            }
        }
        if let Some(s) = p.peer_switch {
            // The switch port facing this router (OVN's stage-hint for router entries).
            let facing = topo.ports[p.idx].kind.clone();
            let facing_lsp = match facing {
                PortKind::RouterPort {
                    switch_peer: Some(l),
                    ..
                } => Some(topo.ports[l].nb),
                _ => None,
            };
            for &qi in &topo.datapaths[s].ports {
                let q = &topo.ports[qi];
                match &q.kind {
                    PortKind::SwitchRouter { lrp: Some(l) } => {
                        if *l == p.idx || dynamic_neigh {
                            continue;
                        }
                        other_router(out, r, p, &topo.ports[*l], facing_lsp);
                    }
                    PortKind::SwitchRouter { lrp: None } => {}
                    _ if !q.enabled => {}
                    PortKind::OtherLsp(t) if t == "virtual" => {
                        // Until a parent claims it, a virtual IP is resolved by ARP.
                        let vip = q
                            .options
                            .get("virtual-ip")
                            .and_then(|v| v.trim().parse::<IpAddr>().ok());
                        if let Some(vip) = vip
                            && q.options.contains_key("virtual-parents")
                            && in_port_nets(p, vip)
                        {
                            out.add(
                                r.dp,
                                st,
                                100,
                                and([outport(&p.name), eq(nh_reg(vip.is_ipv6()), ipv(vip))]),
                                vec![set("eth.dst", macv(Mac(0))), next()],
                                Owner::Port(q.name.clone()),
                                format!("nh-{vip}"),
                                Some(q.nb),
                            );
                        }
                    }
                    _ => {
                        for a in &q.addresses {
                            let Some(m) = a.mac else { continue };
                            for n in &a.ipv4 {
                                entry(
                                    out,
                                    IpAddr::V4(n.addr()),
                                    m,
                                    Owner::Port(q.name.clone()),
                                    Some(q.nb),
                                );
                            }
                            for n in &a.ipv6 {
                                entry(
                                    out,
                                    IpAddr::V6(n.addr()),
                                    m,
                                    Owner::Port(q.name.clone()),
                                    Some(q.nb),
                                );
                            }
                        }
                    }
                }
            }
        }
        if let Some(peer) = p.peer_lrp {
            let lrp = &topo.ports[peer];
            other_router(out, r, p, lrp, Some(lrp.nb));
        }
        // The routable NAT and LB addresses of the other routers on the switch (only on a
        // gateway router or a distributed gateway port, as 23.03).
        if r.gw_router || p.cr.is_some() {
            for ra in &p.routable {
                out.add(
                    r.dp,
                    st,
                    100,
                    and([
                        outport(&p.name),
                        crate::build::set_braced(
                            nh_reg(false),
                            ra.ips.iter().map(|a| ipv(IpAddr::V4(*a))),
                        ),
                    ]),
                    vec![set("eth.dst", macv(ra.mac)), next()],
                    own.clone(),
                    format!("routable-{}", ra.mac.0),
                    None,
                );
            }
        }
        if p.cr.is_some()
            && topo.ports[p.idx]
                .options
                .get("redirect-type")
                .is_some_and(|t| t.eq_ignore_ascii_case("bridged"))
            && let Some(cr) = &p.cr
        {
            out.add(
                r.dp,
                st,
                50,
                and([outport(&p.name), crate::build::not(resident(cr))]),
                vec![set("eth.dst", macv(p.mac)), next()],
                own.clone(),
                "bridged-redirect",
                Some(p.nb),
            );
        }
        if p.cr.is_some() {
            let mut done = BTreeSet::new();
            for n in r
                .nats
                .iter()
                .filter(|n| n.dgp.is_some_and(|d| r.ports[d].idx == p.idx))
            {
                if !done.insert(n.external) {
                    continue;
                }
                let mac = n.distributed.as_ref().map_or(p.mac, |(_, m)| *m);
                let v6 = n.external.is_ipv6();
                if !seen.contains(&n.external) {
                    seen.insert(n.external);
                    out.add(
                        r.dp,
                        st,
                        100,
                        and([outport(&p.name), eq(nh_reg(v6), ipv(n.external))]),
                        vec![set("eth.dst", macv(mac)), next()],
                        n.owner.clone(),
                        "nat-nh",
                        Some(n.uuid),
                    );
                }
                let dst = eq(f(if v6 { "ip6.dst" } else { "ip4.dst" }), ipv(n.external));
                out.add(
                    r.dp,
                    st,
                    150,
                    and([inport(&p.name), outport(&p.name), dst]),
                    drop(),
                    n.owner.clone(),
                    "nat-hairpin",
                    Some(n.uuid),
                );
            }
        }
    }
}
