//! `lr_in_policy_ecmp` (one stage of [`super`]).

use super::*;

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
