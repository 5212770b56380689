//! Router load balancer affinity (`Load_Balancer options:affinity_timeout`):
//! `lr_in_lb_aff_check` asks the controller whether a new connection to a VIP has a
//! remembered backend (`REGBIT_KNOWN_LB_SESSION = chk_lb_aff()`, which also loads the backend
//! into `REG_LB_AFF_BACKEND_IP4`/`xxreg1` and `REG_LB_AFF_MATCH_PORT`), `lr_in_dnat` sends it
//! there (priority 150, [`dnat_flows`]), and `lr_in_lb_aff_learn` remembers the backend
//! `ct_lb_mark` chose for a connection without one (`commit_lb_aff`).

use hf_expr::Action;
use hf_expr::actions::ResultFn;
use hf_expr::ast::Expr;

use crate::build::{always, and, eq, f, not, num, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::lr::act::{eqn, ipv, mv, next, nh_reg, result, set, src_reg};
use crate::lr::ctx::{Rtr, Vip};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

fn ipport(ip: std::net::IpAddr, port: Option<u16>) -> String {
    match (ip, port) {
        (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

fn fam(v: &Vip) -> &'static str {
    if v.ip.is_ipv6() { "ip6" } else { "ip4" }
}

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
