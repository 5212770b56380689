//! `lr_in_lb_aff_check` (one stage of [`super`]).

use super::*;

/// `lr_in_lb_aff_check`.
pub fn check(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInLbAffCheck;
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
    for v in r
        .vips
        .iter()
        .filter(|v| v.affinity.is_some() && !v.backends.is_empty())
    {
        let fam = fam(v);
        let mut m = vec![
            pred("ct.new"),
            not(pred("ct.rel")),
            pred(fam),
            eq(f(&format!("{fam}.dst")), ipv(v.ip)),
        ];
        let mut a = vec![mv(nh_reg(v.ip.is_ipv6()), f(&format!("{fam}.dst")))];
        if let Some(p) = v.port {
            m.push(pred(v.proto));
            m.push(eqn(&format!("{}.dst", v.proto), u128::from(p)));
            a.push(mv(
                Reg::OrigTpDportRouter.field(),
                f(&format!("{}.dst", v.proto)),
            ));
        }
        a.push(result(Reg::KnownLbSession.field(), ResultFn::ChkLbAff));
        a.push(next());
        out.add(
            r.dp,
            st,
            100,
            and(m),
            a,
            v.owner.clone(),
            format!("vip-{}", v.key),
            Some(v.lb),
        );
    }
}
