//! `lr_in_policy` (one stage of [`super`]).

use super::*;

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
