//! `lr_in_gw_redirect` (one stage of [`super`]).

use super::*;

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
