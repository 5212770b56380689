//! `lr_in_ip_routing_ecmp` (one stage of [`super`]).

use super::*;

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
