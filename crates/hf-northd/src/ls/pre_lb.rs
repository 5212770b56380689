//! `ls_in_pre_lb` and `ls_out_pre_lb`: with a load balancer VIP on the switch, every IP packet
//! goes to conntrack (`REGBIT_CONNTRACK_NAT`, so `ls_*_pre_stateful` runs `ct_lb_mark`), except
//! multicast, ND/MLD, service-monitor traffic, stateless-ACL traffic and packets from or to
//! router ports (and localnet ports when there is no VIP). Egress to such a port clears the
//! conntrack state when no stateful ACL needs it (23.03.1).

use super::Sw;
use super::act::{is, next, set};
use super::pre_acl::{nd_mld, skip_ports, svc_monitor};
use crate::build::{always, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for (stage, ingress) in [(Stage::LsInPreLb, true), (Stage::LsOutPreLb, false)] {
        sw.dflt(out, stage, 110, "mcast", pred("eth.mcast"), vec![next()]);
        sw.dflt(out, stage, 110, "nd", nd_mld(), vec![next()]);
        sw.dflt(
            out,
            stage,
            110,
            "svc-monitor",
            svc_monitor(ingress),
            vec![next()],
        );
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
        sw.dflt(
            out,
            stage,
            110,
            "stateless",
            is(Reg::AclStateless, 1),
            vec![next()],
        );
        if sw.has_lb_vip {
            sw.dflt(
                out,
                stage,
                100,
                "ip",
                pred("ip"),
                vec![set(Reg::CtNat, 1), next()],
            );
        }
    }
    for lb in sw.lbs.iter().filter(|l| l.event && !l.reject_empty) {
        for v in lb.templates.iter().filter(|v| v.backends.is_empty()) {
            let (m, a) = v.event_flow();
            sw.owned(
                out,
                Stage::LsInPreLb,
                130,
                crate::flow::Owner::LoadBalancer(lb.name.clone()),
                format!("event {}", v.key),
                Some(lb.uuid),
                m,
                a,
                None,
            );
        }
        for vip in lb.vips.iter().filter(|v| v.backends.is_empty()) {
            let (m, a) = crate::lb_event::flow(lb.uuid, vip.ip, vip.port, lb.proto);
            sw.owned(
                out,
                Stage::LsInPreLb,
                130,
                crate::flow::Owner::LoadBalancer(lb.name.clone()),
                format!("event {}", vip.key),
                Some(lb.uuid),
                m,
                a,
                None,
            );
        }
    }
    let mut skip = sw.router_ports.clone();
    if !sw.has_lb_vip {
        skip.extend(&sw.localnet);
    }
    let egress = if sw.has_stateful_acl {
        vec![next()]
    } else {
        vec![
            hf_expr::Action::CtClear {
                span: hf_expr::Span::default(),
            },
            next(),
        ]
    };
    skip_ports(sw, out, &skip, Stage::LsInPreLb, Stage::LsOutPreLb, &egress);
}
