//! The router egress stages: `lr_out_chk_dnat_local` (is the destination a NAT address
//! local to this chassis: `REGBIT_DST_NAT_IP_LOCAL`), `lr_out_undnat` (reply traffic of
//! DNAT and load balancers gets its source translated back), `lr_out_post_undnat` (gateway
//! routers commit new connections), `lr_out_snat` (SNAT by longest logical prefix, or the
//! 24.09 `match`/`priority` order), `lr_out_post_snat`, `lr_out_egr_loop` (traffic to a
//! NAT address of the same distributed router re-enters the ingress pipeline) and
//! `lr_out_delivery` (output on enabled ports). One function per stage.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::actions::{NatKind, Pipeline};

use crate::build::{always, and, eq, f, not, num, or, outport, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    ct_clear, ct_nat, drop, eqn, ip_dst, ip_src, ip_src_net, ipf, loopback, macv, mv, nested, next,
    output, set, set_reg, swap,
};
use crate::lr::ctx::Rtr;
use crate::lr::nat;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

/// `lr_out_chk_dnat_local`.
pub fn chk_dnat_local(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutChkDnatLocal;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![set_reg(Reg::DstNatIpLocal, num(0)), next()],
        r.owner(),
        "default",
        None,
    );
    if r.nats.is_empty() || (!r.gw_router && r.dgp.is_none()) {
        return;
    }
    let set1 = || vec![set_reg(Reg::DstNatIpLocal, num(1)), next()];
    out.add(
        r.dp,
        st,
        50,
        and([pred("ip"), eq(f("ct_mark.natted"), num(1))]),
        set1(),
        r.owner(),
        "natted",
        None,
    );
    if r.gw_router {
        return;
    }
    let mut seen = BTreeSet::new();
    for n in &r.nats {
        if !seen.insert(n.external) {
            continue;
        }
        if n.dgp.is_none() {
            continue;
        }
        let mut m = vec![pred("ip"), ip_dst(n.external)];
        m.extend(r.nat_resident(n));
        out.add(
            r.dp,
            st,
            50,
            and(m),
            set1(),
            n.owner.clone(),
            "local",
            Some(n.uuid),
        );
    }
}

/// `lr_out_undnat`.
pub fn undnat(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutUndnat;
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
    if r.gw_router {
        if r.has_nat_or_lb() {
            out.add(
                r.dp,
                st,
                50,
                pred("ip"),
                vec![loopback(), ct_nat(NatKind::Dnat, None, None)],
                r.owner(),
                "undnat",
                None,
            );
            out.add(
                r.dp,
                st,
                100,
                or([pred("nd"), pred("nd_rs"), pred("nd_ra")]),
                vec![next()],
                r.owner(),
                "nd",
                None,
            );
        }
        return;
    }
    for n in r.nats.iter().filter(|n| n.kind.dnat()) {
        let Some(d) = n.dgp else { continue };
        let p = &r.ports[d];
        let mut m = vec![pred("ip"), ip_src(n.logical.addr()), outport(&p.name)];
        let mut a = Vec::new();
        match &n.distributed {
            Some((_, mac)) => a.push(set("eth.src", macv(*mac))),
            None => m.extend(p.resident()),
        }
        if n.stateless() {
            a.push(next());
        } else {
            a.push(ct_nat(NatKind::DnatInCzone, None, None));
        }
        out.add(
            r.dp,
            st,
            100,
            and(m),
            a,
            n.owner.clone(),
            "undnat",
            Some(n.uuid),
        );
    }
    let Some(d) = r.dgp else { return };
    let p = &r.ports[d];
    for v in r.vips.iter().filter(|v| !v.backends.is_empty()) {
        let fam = ipf(v.ip.is_ipv6());
        let backs = v.backends.iter().map(|(ip, port)| {
            let mut m = vec![ip_src(*ip)];
            if let Some(port) = port {
                m.push(eqn(&format!("{}.src", v.proto), u128::from(*port)));
            }
            and(m)
        });
        let mut m = vec![pred(fam), or(backs.collect::<Vec<_>>()), outport(&p.name)];
        m.extend(p.resident());
        out.add(
            r.dp,
            st,
            120,
            and(m),
            if v.skip_snat {
                vec![set("flags.skip_snat_for_lb", num(1)), next()]
            } else if !r.lb_force_snat.is_empty() {
                vec![set("flags.force_snat_for_lb", num(1)), next()]
            } else {
                vec![ct_nat(NatKind::DnatInCzone, None, None)]
            },
            v.owner.clone(),
            format!("vip-{}", v.key),
            Some(v.lb),
        );
    }
}

/// `lr_out_post_undnat`.
pub fn post_undnat(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutPostUndnat;
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
    if r.gw_router && r.has_nat_or_lb() {
        out.add(
            r.dp,
            st,
            50,
            and([pred("ip"), pred("ct.new")]),
            vec![Action::ct_commit_block(Vec::new()), next()],
            r.owner(),
            "commit",
            None,
        );
    }
}

/// `lr_out_snat`.
pub fn snat(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutSnat;
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
    out.add(
        r.dp,
        st,
        120,
        pred("nd_ns"),
        vec![next()],
        r.owner(),
        "nd-ns",
        None,
    );
    if r.vips.iter().any(|v| v.skip_snat) {
        out.add(
            r.dp,
            st,
            120,
            and([eq(f("flags.skip_snat_for_lb"), num(1)), pred("ip")]),
            vec![next()],
            r.owner(),
            "skip-snat-for-lb",
            None,
        );
    }
    for (ctx, addrs) in [("lb", &r.lb_force_snat), ("dnat", &r.dnat_force_snat)] {
        for a in addrs.iter().filter(|_| r.gw_router) {
            out.add(
                r.dp,
                st,
                100,
                and([
                    eq(f(&format!("flags.force_snat_for_{ctx}")), num(1)),
                    pred(ipf(a.is_ipv6())),
                ]),
                vec![ct_nat(NatKind::Snat, Some(*a), None)],
                r.owner(),
                format!("force-snat-{ctx}-{a}"),
                None,
            );
        }
    }
    if r.force_snat_router_ip {
        for p in r
            .ports
            .iter()
            .filter(|p| p.peer_switch.is_some() || p.peer_lrp.is_some())
        {
            let firsts =
                p.v4.first()
                    .map(|n| IpAddr::V4(n.addr()))
                    .into_iter()
                    .chain(p.v6_global().next().map(|n| IpAddr::V6(n.addr())));
            for a in firsts {
                out.add(
                    r.dp,
                    st,
                    110,
                    and([
                        eq(f("flags.force_snat_for_lb"), num(1)),
                        pred(ipf(a.is_ipv6())),
                        outport(&p.name),
                    ]),
                    vec![ct_nat(NatKind::Snat, Some(a), None)],
                    Owner::Port(p.name.clone()),
                    format!("force-snat-lb-{}", ipf(a.is_ipv6())),
                    Some(p.nb),
                );
            }
        }
    }
    for n in r.nats.iter().filter(|n| n.kind.snat()) {
        let prio = nat::priority(r, n, false);
        let own = n.owner.clone();
        let hint = Some(n.uuid);
        if r.gw_router {
            let mut m = vec![pred("ip"), ip_src_net(n.logical)];
            m.extend(nat::extra(n, false));
            if let Some(x) = nat::exempt(n, false, &and(m.clone())) {
                out.add(
                    r.dp,
                    st,
                    prio + 2,
                    x,
                    vec![next()],
                    own.clone(),
                    "snat-exempt",
                    hint,
                );
            }
            let a = if n.stateless() {
                nat::rewrite(if n.v6() { "ip6.src" } else { "ip4.src" }, n.external)
            } else {
                m.push(or([not(pred("ct.trk")), not(pred("ct.rpl"))]));
                vec![ct_nat(NatKind::Snat, Some(n.external), n.port_range)]
            };
            out.add(r.dp, st, prio, and(m), a, own, "snat", hint);
            continue;
        }
        let Some(d) = n.dgp else { continue };
        let p = &r.ports[d];
        let mut m = vec![pred("ip"), ip_src_net(n.logical), outport(&p.name)];
        m.extend(r.nat_resident(n));
        m.extend(nat::extra(n, false));
        let base = and(m);
        let mac = n
            .distributed
            .as_ref()
            .map(|(_, m)| set("eth.src", macv(*m)));
        if let Some(x) = nat::exempt(n, false, &base) {
            out.add(
                r.dp,
                st,
                prio + 2,
                x,
                vec![next()],
                own.clone(),
                "snat-exempt",
                hint,
            );
        }
        let mut a: Vec<Action> = mac.iter().cloned().collect();
        if n.stateless() {
            a.extend(nat::rewrite(
                if n.v6() { "ip6.src" } else { "ip4.src" },
                n.external,
            ));
        } else {
            a.push(ct_nat(NatKind::SnatInCzone, Some(n.external), n.port_range));
        }
        out.add(
            r.dp,
            st,
            prio,
            base.clone(),
            a,
            own.clone(),
            "snat-czone",
            hint,
        );
        if n.stateless_opt {
            continue;
        }
        let mut a: Vec<Action> = mac.into_iter().collect();
        a.push(set_reg(Reg::DstNatIpLocal, num(0)));
        a.push(ct_nat(NatKind::Snat, Some(n.external), n.port_range));
        out.add(
            r.dp,
            st,
            prio + 1,
            and([base, eq(Reg::DstNatIpLocal.field(), num(1))]),
            a,
            own,
            "snat-local",
            hint,
        );
    }
}

/// `lr_out_post_snat`.
pub fn post_snat(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    out.add(
        r.dp,
        Stage::LrOutPostSnat,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
}

/// `lr_out_egr_loop`.
pub fn egr_loop(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutEgrLoop;
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
    if r.gw_router {
        return;
    }
    let mut seen = BTreeSet::new();
    for n in &r.nats {
        if !seen.insert(n.external) {
            continue;
        }
        let Some(d) = n.dgp else { continue };
        let p = &r.ports[d];
        let mut m = vec![ip_dst(n.external), outport(&p.name)];
        m.extend(r.nat_resident(n));
        let mut body = vec![
            ct_clear(),
            mv(f("inport"), f("outport")),
            set("outport", hf_expr::ast::Value::Str(String::new())),
            swap("eth.dst", "eth.src"),
            set("flags", num(0)),
            loopback(),
            mv(f("flags.use_snat_zone"), Reg::DstNatIpLocal.field()),
        ];
        for i in 0..=9 {
            body.push(set(&format!("reg{i}"), num(0)));
        }
        body.push(set_reg(Reg::EgressLoopback, num(1)));
        body.push(Action::next_table(Some(Pipeline::Ingress), 0));
        out.add(
            r.dp,
            st,
            100,
            and(m),
            vec![nested(hf_expr::actions::NestedKind::Clone, body)],
            n.owner.clone(),
            "loop",
            Some(n.uuid),
        );
    }
}

/// `lr_out_delivery`.
pub fn delivery(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutDelivery;
    out.add(r.dp, st, 0, always(), drop(), r.owner(), "default", None);
    for p in &r.ports {
        out.add(
            r.dp,
            st,
            100,
            outport(&p.name),
            vec![output()],
            Owner::Port(p.name.clone()),
            "output",
            Some(p.nb),
        );
    }
}
