//! `lr_in_lb_aff_learn` (one stage of [`super`]).

use super::*;

/// `lr_in_lb_aff_learn`.
pub fn learn(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInLbAffLearn;
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
    for v in r.vips.iter() {
        let Some(timeout) = v.affinity else { continue };
        let fam = fam(v);
        for (b, bp) in &v.backends {
            let mut m: Vec<Expr> = vec![
                eq(Reg::KnownLbSession.field(), num(0)),
                pred("ct.new"),
                pred(fam),
                eq(nh_reg(v.ip.is_ipv6()), ipv(v.ip)),
            ];
            if let Some(p) = v.port {
                m.push(eq(Reg::OrigTpDportRouter.field(), num(u128::from(p))));
            }
            m.push(eq(f(&format!("{fam}.dst")), ipv(*b)));
            if let Some(bp) = bp {
                m.push(eqn(&format!("{}.dst", v.proto), u128::from(*bp)));
            }
            let a = Action::CommitLbAff {
                vip: ipport(v.ip, v.port),
                backend: ipport(*b, *bp),
                proto: if v.port.is_some() {
                    v.proto.to_string()
                } else {
                    String::new()
                },
                timeout,
                span: Default::default(),
            };
            out.add(
                r.dp,
                st,
                100,
                and(m),
                vec![a],
                v.owner.clone(),
                format!("vip-{}-{}", v.key, ipport(*b, *bp)),
                Some(v.lb),
            );
        }
    }
}
