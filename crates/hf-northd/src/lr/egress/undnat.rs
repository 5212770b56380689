//! `lr_out_undnat` (one stage of [`super`]).

use super::*;

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
    // Template VIPs ([`crate::lb_template`]), as ordinary ones below.
    for v in r.templates.iter().filter(|v| !v.backends.is_empty()) {
        let mut m = vec![
            pred(v.family()),
            crate::lb_template::backends_src(v),
            outport(&p.name),
        ];
        m.extend(p.resident());
        out.add(
            r.dp,
            st,
            120,
            and(m),
            if v.skip_snat {
                vec![set("flags.skip_snat_for_lb", num(1)), next()]
            } else if r.force_snat_router_ip || !r.lb_force_snat.is_empty() {
                vec![set("flags.force_snat_for_lb", num(1)), next()]
            } else {
                vec![ct_nat(NatKind::DnatInCzone, None, None)]
            },
            crate::flow::Owner::LoadBalancer(v.name.clone()),
            format!("vip-{}", v.key),
            Some(v.lb),
        );
    }
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
