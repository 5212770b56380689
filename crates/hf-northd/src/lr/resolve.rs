//! After routing: `lr_in_arp_resolve` (the next hop's MAC when northd knows it: addresses of
//! ports on connected switches, other routers' ports there, router-to-router peers, NAT
//! external addresses on a distributed gateway port; otherwise `get_arp`/`get_nd` from
//! learnt bindings), `lr_in_gw_redirect` (traffic leaving by a distributed gateway port goes
//! to its `cr-` port, except distributed NAT traffic, which leaves from its own chassis) and
//! `lr_in_arp_request` (an unresolved next hop gets an ARP request or ND solicitation instead
//! of the packet). One function per stage.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::actions::NestedKind;

use crate::addr::Mac;
use crate::build::{always, and, eq, f, inport, ip6, num, or, outport, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    drop, ipv, macv, nested, next, nh_reg, output, set, set_of, set_outport, src_reg,
};
use crate::lr::ctx::{Rp, Rtr, resident};
use crate::lr::ip_input::{solicited, solicited_mac};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{PortKind, Topo};

fn in_port_nets(p: &Rp, ip: IpAddr) -> bool {
    p.addr_for(ip).is_some()
}

/// `lr_in_arp_resolve`.
pub fn arp_resolve(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
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
    let nat_ext: BTreeSet<IpAddr> = r.nats.iter().map(|n| n.external).collect();
    let dynamic_neigh = topo
        .nb
        .logical_router()
        .get(&topo.datapaths[r.dp].nb)
        .and_then(|l| l.options.get("dynamic_neigh_routers"))
        .is_some_and(|v| v == "true");
    for p in &r.ports {
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

/// Entries for another router's port `lrp` reachable through `p` (on the same switch, or a
/// router-to-router peer): every address of it, one flow per family, as OVN writes them.
fn other_router(
    out: &mut Flows,
    r: &Rtr,
    p: &Rp,
    lrp: &crate::topo::Port,
    hint: Option<uuid::Uuid>,
) {
    let Some(mac) = lrp.mac else { return };
    let v4: Vec<IpAddr> = lrp
        .networks
        .iter()
        .filter(|n| n.addr().is_ipv4())
        .map(|n| n.addr())
        .collect();
    let mut v6: Vec<IpAddr> = lrp
        .networks
        .iter()
        .filter(|n| n.addr().is_ipv6())
        .map(|n| n.addr())
        .collect();
    let lla = IpAddr::V6(mac.ipv6_lla());
    if !v6.contains(&lla) {
        v6.push(lla);
    }
    for (fam, addrs) in [(false, v4), (true, v6)] {
        if addrs.is_empty() {
            continue;
        }
        let rhs = if addrs.len() == 1 {
            eq(nh_reg(fam), ipv(addrs[0]))
        } else {
            crate::build::in_set(nh_reg(fam), addrs.iter().map(|a| ipv(*a)))
        };
        out.add(
            r.dp,
            Stage::LrInArpResolve,
            100,
            and([outport(&p.name), rhs]),
            vec![set("eth.dst", macv(mac)), next()],
            Owner::Port(lrp.name.clone()),
            format!("router-nh-{}-{}", p.name, if fam { "ip6" } else { "ip4" }),
            hint,
        );
    }
}

/// `lr_in_gw_redirect`.
pub fn gw_redirect(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInGwRedirect;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
    for p in &r.ports {
        let Some(cr) = &p.cr else { continue };
        out.add(
            r.dp,
            st,
            50,
            outport(&p.name),
            vec![set_outport(cr), next()],
            Owner::Port(p.name.clone()),
            "redirect",
            Some(p.nb),
        );
        // Stateless dnat_and_snat scoped by external IPs (23.03's quirk kept: traffic from an
        // allowed set is redirected, from an exempted set dropped, and the first allowed
        // external address is otherwise dropped).
        let mut def_flow = true;
        for n in r
            .nats
            .iter()
            .filter(|n| n.dgp.is_some_and(|d| r.ports[d].idx == p.idx) && n.stateless())
        {
            let (set_name, allowed) = match (&n.allowed, &n.exempted) {
                (Some(a), _) => (a, true),
                (None, Some(e)) => (e, false),
                (None, None) => continue,
            };
            let fam = if n.v6() { "ip6" } else { "ip4" };
            let m = and([
                outport(&p.name),
                eq(f(&format!("{fam}.src")), crate::build::addr_set(set_name)),
            ]);
            let a = if allowed {
                vec![set_outport(cr), next()]
            } else {
                drop()
            };
            out.add(
                r.dp,
                st,
                75,
                m,
                a,
                n.owner.clone(),
                "stateless-ext-ips",
                Some(n.uuid),
            );
            if allowed && def_flow {
                def_flow = false;
                out.add(
                    r.dp,
                    st,
                    70,
                    and([pred("ip"), eq(f(&format!("{fam}.dst")), ipv(n.external))]),
                    drop(),
                    n.owner.clone(),
                    "stateless-ext-ips-default",
                    None,
                );
            }
        }
        for n in r
            .nats
            .iter()
            .filter(|n| n.dgp.is_some_and(|d| r.ports[d].idx == p.idx))
        {
            let Some((lp, m)) = &n.distributed else {
                continue;
            };
            let v6 = n.v6();
            let src = eq(
                f(if v6 { "ip6.src" } else { "ip4.src" }),
                ipv(n.logical.addr()),
            );
            out.add(
                r.dp,
                st,
                100,
                and([src, outport(&p.name), resident(lp)]),
                vec![
                    set("eth.src", macv(*m)),
                    Action::assign(src_reg(v6), ipv(n.external)),
                    next(),
                ],
                n.owner.clone(),
                "distributed",
                Some(n.uuid),
            );
        }
    }
}

/// `lr_in_arp_request`.
pub fn arp_request(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInArpRequest;
    let o = r.owner();
    let zero = || eq(f("eth.dst"), macv(Mac(0)));
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![output()],
        o.clone(),
        "default",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        and([zero(), pred("ip4")]),
        vec![nested(
            NestedKind::Arp,
            vec![
                set("eth.dst", macv(Mac(0xffff_ffff_ffff))),
                Action::move_field(f("arp.spa"), Reg::SrcIpv4.field()),
                Action::move_field(f("arp.tpa"), Reg::NextHopIpv4.field()),
                set("arp.op", num(1)),
                output(),
            ],
        )],
        o.clone(),
        "arp",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        and([zero(), pred("ip6")]),
        vec![nested(
            NestedKind::NdNs,
            vec![Action::move_field(f("nd.target"), nh_reg(true)), output()],
        )],
        o,
        "nd-ns",
        None,
    );
    let mut seen = BTreeSet::new();
    for g in &r.routes {
        for h in &g.hops {
            let Some(IpAddr::V6(a)) = h.nexthop else {
                continue;
            };
            if !seen.insert(a) {
                continue;
            }
            out.add(
                r.dp,
                st,
                200,
                and([zero(), pred("ip6"), eq(nh_reg(true), ip6(a))]),
                vec![nested(
                    NestedKind::NdNs,
                    vec![
                        set("eth.dst", macv(solicited_mac(a))),
                        set("ip6.dst", ip6(solicited(a))),
                        set("nd.target", ip6(a)),
                        output(),
                    ],
                )],
                h.owner.clone(),
                format!("nd-ns-{a}"),
                Some(h.uuid),
            );
        }
    }
}
