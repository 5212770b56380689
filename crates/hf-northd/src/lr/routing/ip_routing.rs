//! `lr_in_ip_routing` (one stage of [`super`]).

use super::*;

/// A route group's match terms: its route table (`REG_ROUTE_TABLE_ID`) and its prefix.
fn route_terms(r: &Rtr, g: &crate::lr::ctx::RouteGroup) -> Vec<Expr> {
    let v6 = g.prefix.addr().is_ipv6();
    let id = r.route_tables.get(&g.table).copied().unwrap_or(0);
    let mut m: Vec<Expr> = Vec::new();
    if id != 0 || (!g.src && !g.connected) {
        m.push(reg_eq(Reg::RouteTableId, u128::from(id)));
    }
    m.push(eq(
        f(&format!(
            "{}.{}",
            ipf(v6),
            if g.src { "src" } else { "dst" }
        )),
        net(g.prefix),
    ));
    m
}

/// A route group's match (as ovn-northd's `build_route_match` without a port).
pub(super) fn route_match(r: &Rtr, g: &crate::lr::ctx::RouteGroup) -> Expr {
    and(route_terms(r, g))
}

/// The flow ovn-northd's `add_route` adds beside a route out of a port with BFD: its match
/// and `udp.dst == 3784`, one priority up, the route's actions without `ip.ttl--` (a BFD
/// packet to the next hop keeps its TTL 255).
#[allow(clippy::too_many_arguments)]
fn bfd_twin(
    out: &mut Flows,
    r: &Rtr,
    p: &crate::lr::ctx::Rp,
    prio: u16,
    m: Expr,
    a: &[Action],
    owner: Owner,
    disc: String,
    hint: Option<uuid::Uuid>,
) {
    if !p.has_bfd {
        return;
    }
    let a: Vec<Action> = a.iter().skip(1).cloned().collect();
    out.add(
        r.dp,
        Stage::LrInIpRouting,
        prio + 1,
        and([m, eq(f("udp.dst"), num(3784))]),
        a,
        owner,
        format!("{disc}-bfd"),
        hint,
    );
}

/// `lr_in_ip_routing`.
pub fn routing(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInIpRouting;
    out.add(r.dp, st, 0, always(), drop(), r.owner(), "default", None);
    out.add(
        r.dp,
        st,
        10550,
        crate::build::or([crate::build::pred("nd_rs"), crate::build::pred("nd_ra")]),
        drop(),
        r.owner(),
        "rs-ra",
        None,
    );
    for p in &r.ports {
        let nets: Vec<IpNet> =
            p.v4.iter()
                .map(|n| IpNet::V4(*n))
                .chain(p.v6.iter().map(|n| IpNet::V6(*n)))
                .collect();
        for n in nets {
            let v6 = n.addr().is_ipv6();
            let lla = matches!(n, IpNet::V6(x) if crate::lr::ctx::is_lla(x.addr()));
            let dst = eq(f(&format!("{}.dst", ipf(v6))), net(n.trunc()));
            let m = if lla {
                and([inport(&p.name), dst])
            } else {
                dst
            };
            let mut a = vec![dec_ttl(), set_reg(Reg::EcmpGroupId, num(0))];
            a.extend(hop_actions(p, v6, None, n.addr()));
            a.extend([loopback(), next()]);
            let prio = route_priority(n.prefix_len(), false, true);
            let disc = format!("connected-{}", n.trunc());
            bfd_twin(
                out,
                r,
                p,
                prio,
                m.clone(),
                &a,
                Owner::Port(p.name.clone()),
                disc.clone(),
                Some(p.nb),
            );
            out.add(
                r.dp,
                st,
                prio,
                m,
                a,
                Owner::Port(p.name.clone()),
                disc,
                Some(p.nb),
            );
        }
    }
    // Routes to the routable NAT and LB addresses of the other routers on the switches this
    // router's ports face (`crate::lr::routable`).
    for p in &r.ports {
        let Some(src) = p.v4.first() else { continue };
        for ra in &p.routable {
            for &ip in &ra.ips {
                let mut a = vec![dec_ttl(), set_reg(Reg::EcmpGroupId, num(0))];
                a.extend(hop_actions(p, false, None, IpAddr::V4(src.addr())));
                a.extend([loopback(), next()]);
                let m = eq(
                    f("ip4.dst"),
                    crate::build::net4_len(ipnet::Ipv4Net::from(ip)),
                );
                let prio = route_priority(32, false, true);
                let disc = format!("routable-{ip}");
                bfd_twin(
                    out,
                    r,
                    p,
                    prio,
                    m.clone(),
                    &a,
                    Owner::Port(p.name.clone()),
                    disc.clone(),
                    Some(p.nb),
                );
                out.add(
                    r.dp,
                    st,
                    prio,
                    m,
                    a,
                    Owner::Port(p.name.clone()),
                    disc,
                    Some(p.nb),
                );
            }
        }
    }
    for g in &r.routes {
        let v6 = g.prefix.addr().is_ipv6();
        let mut m = route_terms(r, g);
        let prio = route_priority(g.prefix.prefix_len(), g.src, g.connected);
        if let Some((uuid, owner)) = &g.discard {
            out.add(
                r.dp,
                st,
                prio,
                and(m),
                drop(),
                owner.clone(),
                "discard",
                Some(*uuid),
            );
            continue;
        }
        let first = &g.hops[0];
        // A link-local prefix is scoped to the port it leaves by.
        if let IpNet::V6(n) = g.prefix
            && crate::lr::ctx::is_lla(n.addr())
        {
            m.insert(0, inport(&r.ports[first.port].name));
        }
        if g.hops.len() == 1 {
            let p = &r.ports[first.port];
            let mut a = vec![dec_ttl(), set_reg(Reg::EcmpGroupId, num(0))];
            a.extend(hop_actions(p, v6, first.nexthop, first.src));
            a.extend([loopback(), next()]);
            bfd_twin(
                out,
                r,
                p,
                prio,
                and(m.clone()),
                &a,
                first.owner.clone(),
                "route".into(),
                Some(first.uuid),
            );
            out.add(
                r.dp,
                st,
                prio,
                and(m),
                a,
                first.owner.clone(),
                "route",
                Some(first.uuid),
            );
        } else {
            let a = vec![
                dec_ttl(),
                loopback(),
                set_reg(Reg::EcmpGroupId, num(u128::from(g.ecmp_id))),
                select(g.hops.len()),
            ];
            out.add(
                r.dp,
                st,
                prio,
                and(m),
                a,
                first.owner.clone(),
                "ecmp",
                Some(first.uuid),
            );
        }
    }
}
