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

/// One route out of one port, as ovn-northd's `add_route` writes it: `ip.ttl--`, the next hop
/// and the port's MAC, loopback, `next;`; and, when the port has BFD, a twin one priority up
/// for `udp.dst == 3784` without `ip.ttl--` (a BFD packet to the next hop keeps its TTL 255).
struct RouteOut<'a> {
    port: &'a crate::lr::ctx::Rp,
    v6: bool,
    nexthop: Option<IpAddr>,
    src: IpAddr,
    prio: u16,
    m: Expr,
    owner: Owner,
    disc: String,
    hint: Option<uuid::Uuid>,
}

impl RouteOut<'_> {
    fn add(self, out: &mut Flows, r: &Rtr) {
        let mut a = vec![set_reg(Reg::EcmpGroupId, num(0))];
        a.extend(hop_actions(self.port, self.v6, self.nexthop, self.src));
        a.extend([loopback(), next()]);
        if self.port.has_bfd {
            out.add(
                r.dp,
                Stage::LrInIpRouting,
                self.prio + 1,
                and([self.m.clone(), eq(f("udp.dst"), num(3784))]),
                a.clone(),
                self.owner.clone(),
                format!("{}-bfd", self.disc),
                self.hint,
            );
        }
        a.insert(0, dec_ttl());
        out.add(
            r.dp,
            Stage::LrInIpRouting,
            self.prio,
            self.m,
            a,
            self.owner,
            self.disc,
            self.hint,
        );
    }
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
            RouteOut {
                port: p,
                v6,
                nexthop: None,
                src: n.addr(),
                prio: route_priority(n.prefix_len(), false, true),
                m,
                owner: Owner::Port(p.name.clone()),
                disc: format!("connected-{}", n.trunc()),
                hint: Some(p.nb),
            }
            .add(out, r);
        }
    }
    // Routes to the routable NAT and LB addresses of the other routers on the switches this
    // router's ports face (`crate::lr::routable`).
    for p in &r.ports {
        let Some(src) = p.v4.first() else { continue };
        for ra in &p.routable {
            for &ip in &ra.ips {
                RouteOut {
                    port: p,
                    v6: false,
                    nexthop: None,
                    src: IpAddr::V4(src.addr()),
                    prio: route_priority(32, false, true),
                    m: eq(
                        f("ip4.dst"),
                        crate::build::net4_len(ipnet::Ipv4Net::from(ip)),
                    ),
                    owner: Owner::Port(p.name.clone()),
                    disc: format!("routable-{ip}"),
                    hint: Some(p.nb),
                }
                .add(out, r);
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
            RouteOut {
                port: &r.ports[first.port],
                v6,
                nexthop: first.nexthop,
                src: first.src,
                prio,
                m: and(m),
                owner: first.owner.clone(),
                disc: "route".into(),
                hint: Some(first.uuid),
            }
            .add(out, r);
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
