//! `ls_in_pre_acl` and `ls_out_pre_acl`: with a stateful ACL on the switch, IP traffic is
//! marked for conntrack (defragmentation and tracking) except from and to router and localnet
//! ports, ND/MLD/DHCPv6 and multicast; `allow-stateless` ACLs mark their traffic to bypass
//! conntrack (also when the switch only has load balancers).

use hf_expr::ast::Expr;

use super::act::{next, set};
use super::index::AclVerdict;
use super::{ACL_PRI_OFFSET, Sw};
use crate::build::{addr_set, always, and, eq, eq_num, f, inport, or, outport, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// `nd || nd_rs || nd_ra || mldv1 || mldv2`: never sent to conntrack.
pub fn nd_mld() -> Expr {
    or([
        pred("nd"),
        pred("nd_rs"),
        pred("nd_ra"),
        pred("mldv1"),
        pred("mldv2"),
    ])
}

/// `nd || nd_ra || nd_rs || mldv1 || mldv2` (the ACL stages' order).
pub fn nd_mld_acl() -> Expr {
    or([
        pred("nd"),
        pred("nd_ra"),
        pred("nd_rs"),
        pred("mldv1"),
        pred("mldv2"),
    ])
}

/// `eth.dst == $svc_monitor_mac` (ingress) / `eth.src == $svc_monitor_mac` (egress).
pub fn svc_monitor(ingress: bool) -> Expr {
    let field = if ingress { "eth.dst" } else { "eth.src" };
    eq(f(field), addr_set("svc_monitor_mac"))
}

/// Router and localnet ports skip conntrack in `stage_in`/`stage_out`; egress `actions_out`.
pub fn skip_ports(
    sw: &Sw<'_, '_>,
    out: &mut Flows,
    ports: &[usize],
    stage_in: Stage,
    stage_out: Stage,
    actions_out: &[hf_expr::Action],
) {
    for p in ports {
        let name = &sw.port(*p).name;
        sw.for_port(
            out,
            stage_in,
            110,
            *p,
            "skip-ct",
            and([pred("ip"), inport(name)]),
            vec![next()],
        );
        sw.for_port(
            out,
            stage_out,
            110,
            *p,
            "skip-ct",
            and([pred("ip"), outport(name)]),
            actions_out.to_vec(),
        );
    }
}

fn stateless_filters(sw: &Sw<'_, '_>, out: &mut Flows) {
    for acl in &sw.acls {
        if acl.verdict != AclVerdict::AllowStateless {
            continue;
        }
        let stage = if acl.ingress {
            Stage::LsInPreAcl
        } else {
            Stage::LsOutPreAcl
        };
        sw.owned(
            out,
            stage,
            acl.priority + ACL_PRI_OFFSET,
            super::acl::owner(acl),
            "stateless",
            Some(acl.uuid),
            acl.matches.clone(),
            vec![set(Reg::AclStateless, 1), next()],
            None,
        );
    }
}

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for (stage, ingress) in [(Stage::LsInPreAcl, true), (Stage::LsOutPreAcl, false)] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
        sw.dflt(
            out,
            stage,
            110,
            "svc-monitor",
            svc_monitor(ingress),
            vec![next()],
        );
    }
    if sw.has_stateful_acl {
        let mut skip = sw.router_ports.clone();
        skip.extend(&sw.localnet);
        skip_ports(
            sw,
            out,
            &skip,
            Stage::LsInPreAcl,
            Stage::LsOutPreAcl,
            &[next()],
        );
        stateless_filters(sw, out);
        for stage in [Stage::LsInPreAcl, Stage::LsOutPreAcl] {
            let dhcp6 = and([
                pred("udp"),
                eq_num(f("udp.src"), 546),
                eq_num(f("udp.dst"), 547),
            ]);
            let mut parts = match nd_mld() {
                Expr::Or(v) => v,
                e => vec![e],
            };
            parts.push(dhcp6);
            sw.dflt(out, stage, 110, "nd", Expr::Or(parts), vec![next()]);
            sw.dflt(out, stage, 110, "mcast", pred("eth.mcast"), vec![next()]);
            sw.dflt(
                out,
                stage,
                100,
                "ip",
                pred("ip"),
                vec![set(Reg::CtDefrag, 1), next()],
            );
        }
    } else if sw.has_lb_vip {
        stateless_filters(sw, out);
    }
}
