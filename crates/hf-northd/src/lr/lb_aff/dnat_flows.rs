//! The `lr_in_dnat` priority-150 flows of load-balancer affinity (a known session goes to its remembered backend); `dnat` calls them.

use super::*;

/// `lr_in_dnat` priority 150: a known session goes to its remembered backend.
pub fn dnat_flows(topo: &Topo<'_>, r: &Rtr, out: &mut Flows) {
    for v in r.vips.iter() {
        if v.affinity.is_none() {
            continue;
        }
        let fam = fam(v);
        let v6 = v.ip.is_ipv6();
        let (flag_set, flag) = if v.skip_snat {
            (Some("flags.skip_snat_for_lb"), Some("skip_snat"))
        } else if r.force_snat_router_ip || !r.lb_force_snat.is_empty() {
            (Some("flags.force_snat_for_lb"), Some("force_snat"))
        } else {
            (None, None)
        };
        let flag = flag.filter(|_| topo.features.contains("ct-lb-flags"));
        for (b, bp) in &v.backends {
            let backend_reg = if v6 {
                src_reg(true)
            } else {
                Reg::LbAffBackendIp4.field()
            };
            let mut m: Vec<Expr> = vec![
                eq(Reg::KnownLbSession.field(), num(1)),
                pred("ct.new"),
                pred(fam),
                eq(backend_reg, ipv(*b)),
            ];
            if let Some(bp) = bp {
                m.push(eq(Reg::LbAffMatchPort.field(), num(u128::from(*bp))));
            }
            let mut a = vec![Action::assign(nh_reg(v6), ipv(v.ip))];
            if let Some(fs) = flag_set {
                a.push(set(fs, num(1)));
            }
            a.push(crate::lr::act::ct_lb_mark_hashed(&[(*b, *bp)], None, flag));
            out.add(
                r.dp,
                Stage::LrInDnat,
                150,
                and(m),
                a,
                v.owner.clone(),
                format!("aff-vip-{}-{}", v.key, ipport(*b, *bp)),
                Some(v.lb),
            );
        }
    }
}
