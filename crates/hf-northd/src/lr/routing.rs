//! Routing stages: `lr_in_ip_routing_pre` (route table of the ingress port into
//! `REG_ROUTE_TABLE_ID`), `lr_in_ip_routing` (connected networks and static routes, longest
//! prefix first with OVN 23.03's priorities: `plen * 3 + 2` connected, `plen * 3 + 1` static
//! destination routes, `plen * 3` source routes), `lr_in_ip_routing_ecmp` (one flow per member
//! of an ECMP group chosen with `select`), `lr_in_policy` and `lr_in_policy_ecmp` (router
//! policies: allow, drop, reroute to one or several next hops). One function per stage.

use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::ast::Expr;
use ipnet::IpNet;

use crate::build::{always, and, eq, f, inport, net, num};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    dec_ttl, drop, ipf, ipv, loopback, macv, mv, next, nh_reg, reg_eq, set, set_outport, set_reg,
    src_reg,
};
use crate::lr::ctx::{Rp, Rtr};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

/// OVN 23.03's route priority for a prefix of `plen` bits.
pub fn route_priority(plen: u8, src: bool, connected: bool) -> u16 {
    let ofs = if src {
        0
    } else if connected {
        2
    } else {
        1
    };
    u16::from(plen) * 3 + ofs
}

fn select(n: usize) -> Action {
    Action::Select {
        dst: Reg::EcmpMemberId.field(),
        choices: (1..=n).map(|i| (i as u16, None)).collect(),
        span: Default::default(),
    }
}

/// `reg0 = NH; reg1 = SRC; eth.src = MAC; outport = P;` (next hop `None`: the destination).
fn hop_actions(p: &Rp, v6: bool, nh: Option<IpAddr>, src: IpAddr) -> Vec<Action> {
    let nh = match nh {
        Some(a) => Action::assign(nh_reg(v6), ipv(a)),
        None => mv(nh_reg(v6), f(&format!("{}.dst", ipf(v6)))),
    };
    vec![
        nh,
        Action::assign(src_reg(v6), ipv(src)),
        set("eth.src", macv(p.mac)),
        set_outport(&p.name),
    ]
}

/// `lr_in_ip_routing_pre`.
pub fn routing_pre(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInIpRoutingPre;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![set_reg(Reg::RouteTableId, num(0)), next()],
        r.owner(),
        "default",
        None,
    );
    for p in &r.ports {
        if let Some(id) = p.route_table.as_ref().and_then(|t| r.route_tables.get(t)) {
            out.add(
                r.dp,
                st,
                100,
                inport(&p.name),
                vec![set_reg(Reg::RouteTableId, num(u128::from(*id))), next()],
                Owner::Port(p.name.clone()),
                "route-table",
                Some(p.nb),
            );
        }
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
            let mut a = vec![dec_ttl(), set_reg(Reg::EcmpGroupId, num(0))];
            a.extend(hop_actions(p, v6, None, n.addr()));
            a.extend([loopback(), next()]);
            out.add(
                r.dp,
                st,
                route_priority(n.prefix_len(), false, true),
                m,
                a,
                Owner::Port(p.name.clone()),
                format!("connected-{}", n.trunc()),
                Some(p.nb),
            );
        }
    }
    for g in &r.routes {
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

/// `lr_in_ip_routing_ecmp`.
pub fn routing_ecmp(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInIpRoutingEcmp;
    out.add(r.dp, st, 0, always(), drop(), r.owner(), "default", None);
    out.add(
        r.dp,
        st,
        150,
        reg_eq(Reg::EcmpGroupId, 0),
        vec![next()],
        r.owner(),
        "no-ecmp",
        None,
    );
    for g in r.routes.iter().filter(|g| g.hops.len() > 1) {
        let v6 = g.prefix.addr().is_ipv6();
        for (i, h) in g.hops.iter().enumerate() {
            let p = &r.ports[h.port];
            let m = and([
                reg_eq(Reg::EcmpGroupId, u128::from(g.ecmp_id)),
                reg_eq(Reg::EcmpMemberId, i as u128 + 1),
            ]);
            let mut a = hop_actions(p, v6, h.nexthop, h.src);
            a.push(next());
            out.add(r.dp, st, 100, m, a, h.owner.clone(), "member", Some(h.uuid));
        }
    }
}

/// `lr_in_policy`.
pub fn policy(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInPolicy;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![set_reg(Reg::EcmpGroupId, num(0)), next()],
        r.owner(),
        "default",
        None,
    );
    for p in &r.policies {
        let mark: Vec<Action> = p
            .pkt_mark
            .map(|m| set("pkt.mark", num(u128::from(m))))
            .into_iter()
            .collect();
        let a = match &p.action {
            crate::lr::ctx::PolicyAction::Allow => {
                let mut a = mark.clone();
                a.extend([set_reg(Reg::EcmpGroupId, num(0)), next()]);
                a
            }
            crate::lr::ctx::PolicyAction::Drop => drop(),
            crate::lr::ctx::PolicyAction::Reroute(hops, id) if hops.len() == 1 => {
                let (port, nh, src) = hops[0];
                let mut a = mark.clone();
                a.extend(hop_actions(&r.ports[port], nh.is_ipv6(), Some(nh), src));
                a.extend([loopback(), set_reg(Reg::EcmpGroupId, num(0)), next()]);
                let _ = id;
                a
            }
            crate::lr::ctx::PolicyAction::Reroute(hops, id) => {
                vec![
                    set_reg(Reg::EcmpGroupId, num(u128::from(*id))),
                    select(hops.len()),
                ]
            }
        };
        out.add(
            r.dp,
            st,
            p.priority,
            p.matches.clone(),
            a,
            p.owner.clone(),
            "policy",
            Some(p.uuid),
        );
    }
}

/// `lr_in_policy_ecmp`.
pub fn policy_ecmp(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInPolicyEcmp;
    out.add(r.dp, st, 0, always(), drop(), r.owner(), "default", None);
    out.add(
        r.dp,
        st,
        150,
        reg_eq(Reg::EcmpGroupId, 0),
        vec![next()],
        r.owner(),
        "no-ecmp",
        None,
    );
    for p in &r.policies {
        let crate::lr::ctx::PolicyAction::Reroute(hops, id) = &p.action else {
            continue;
        };
        if hops.len() < 2 {
            continue;
        }
        for (i, (port, nh, src)) in hops.iter().enumerate() {
            let m = and([
                reg_eq(Reg::EcmpGroupId, u128::from(*id)),
                reg_eq(Reg::EcmpMemberId, i as u128 + 1),
            ]);
            let mut a: Vec<Action> = p
                .pkt_mark
                .map(|m| set("pkt.mark", num(u128::from(m))))
                .into_iter()
                .collect();
            a.extend(hop_actions(&r.ports[*port], nh.is_ipv6(), Some(*nh), *src));
            a.extend([loopback(), next()]);
            out.add(
                r.dp,
                st,
                100,
                m,
                a,
                p.owner.clone(),
                format!("member-{nh}"),
                Some(p.uuid),
            );
        }
    }
}
