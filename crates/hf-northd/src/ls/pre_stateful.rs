//! `ls_in_pre_stateful` and `ls_out_pre_stateful`: send marked packets to conntrack
//! (`ct_lb_mark` for load balancing and unNAT, `ct_next` for ACL tracking); a load balancer
//! VIP's new connections remember the VIP and port (`REG_ORIG_DIP_IPV4`/`REG_ORIG_TP_DPORT`,
//! for hairpin) before `ct_lb_mark`.

use std::net::IpAddr;

use hf_expr::Action;

use super::Sw;
use super::act::{ct_lb_mark, is, next};
use crate::build::{always, and, eq, eq_num, f, ip4, ip6, num};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::regs::{self, Reg};
use crate::stage::Stage;

/// The VIP address as a match value.
pub fn vip_value(ip: IpAddr) -> hf_expr::Value {
    match ip {
        IpAddr::V4(a) => ip4(a),
        IpAddr::V6(a) => ip6(a),
    }
}

/// `ip4.dst == VIP` / `ip6.dst == VIP`.
pub fn vip_dst(ip: IpAddr) -> hf_expr::ast::Expr {
    let field = if ip.is_ipv4() { "ip4.dst" } else { "ip6.dst" };
    eq(f(field), vip_value(ip))
}

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for stage in [Stage::LsInPreStateful, Stage::LsOutPreStateful] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
        sw.dflt(
            out,
            stage,
            110,
            "nat",
            is(Reg::CtNat, 1),
            vec![ct_lb_mark()],
        );
        sw.dflt(
            out,
            stage,
            100,
            "defrag",
            is(Reg::CtDefrag, 1),
            vec![Action::ct_next()],
        );
    }
    for lb in &sw.lbs {
        // Template VIPs ([`crate::lb_template`]): the same flow, variables written in.
        for v in &lb.templates {
            let mut actions = Vec::with_capacity(3);
            actions.push(Action::assign(
                if v.v6 {
                    regs::field_of(regs::ORIG_DIP_IPV6)
                } else {
                    Reg::OrigDipIpv4.field()
                },
                v.ip.value(),
            ));
            let mut m = vec![is(Reg::CtNat, 1), v.dst()];
            if let Some(p) = &v.port {
                actions.push(Action::assign(Reg::OrigTpDport.field(), p.value()));
            }
            m.extend(v.port_dst());
            actions.push(ct_lb_mark());
            sw.owned(
                out,
                Stage::LsInPreStateful,
                120,
                Owner::LoadBalancer(v.name.clone()),
                format!("vip {}", v.key),
                Some(v.lb),
                and(m),
                actions,
                None,
            );
        }
        for vip in &lb.vips {
            let mut actions = Vec::with_capacity(3);
            match vip.ip {
                IpAddr::V4(_) => {
                    actions.push(Action::assign(Reg::OrigDipIpv4.field(), vip_value(vip.ip)))
                }
                IpAddr::V6(_) => actions.push(Action::assign(
                    regs::field_of(regs::ORIG_DIP_IPV6),
                    vip_value(vip.ip),
                )),
            }
            let mut m = vec![is(Reg::CtNat, 1), vip_dst(vip.ip)];
            if let Some(port) = vip.port {
                actions.push(Action::assign(Reg::OrigTpDport.field(), num(port.into())));
                m.push(eq_num(f(&format!("{}.dst", lb.proto)), port.into()));
            }
            actions.push(ct_lb_mark());
            sw.owned(
                out,
                Stage::LsInPreStateful,
                120,
                Owner::LoadBalancer(lb.name.clone()),
                format!("vip {}", vip.key),
                Some(lb.uuid),
                and(m),
                actions,
                None,
            );
        }
    }
}
