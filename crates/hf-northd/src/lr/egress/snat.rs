//! `lr_out_snat` (one stage of [`super`]).

use super::*;

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
    if r.vips.iter().any(|v| v.skip_snat) || r.templates.iter().any(|v| v.skip_snat) {
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
        for (p, a) in r.router_ip_snat_addrs() {
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
