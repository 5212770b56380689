//! `ls_in_lb`: new connections to a VIP of a load balancer on the switch are balanced with
//! `ct_lb_mark(backends=...)` (priority 120 with a port, 110 without); a VIP without backends
//! rejects when the load balancer has `options:reject=true` and drops otherwise (23.03.1).
//! A VIP with a health check lists only the backends [`crate::svc`] finds not offline (none:
//! as without backends).

use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::actions::{Backend, CtLbArgs, LbBackend, NestedKind, Pipeline as ActPipeline};
use hf_expr::constant::Constant;

use super::Sw;
use super::act::{exchange, next, set};
use super::pre_stateful::vip_dst;
use crate::build::{always, and, eq_num, f, num, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::regs::{self, Reg};
use crate::stage::Stage;

fn constant(ip: IpAddr) -> Constant {
    match ip {
        IpAddr::V4(a) => Constant::ipv4(a),
        IpAddr::V6(a) => Constant::ipv6(a),
    }
}

/// A VIP without backends: reject (`options:reject=true`) or drop.
fn empty_actions(reject: bool) -> Vec<Action> {
    if reject {
        vec![
            Action::assign(regs::field_of(regs::REG0_ALL), num(0)),
            Action::nested(
                NestedKind::Reject,
                vec![
                    exchange("outport", "inport"),
                    Action::next_table(
                        Some(ActPipeline::Egress),
                        u32::from(Stage::LsOutQosMark.table()),
                    ),
                ],
            ),
        ]
    } else {
        vec![Action::drop()]
    }
}

/// A template VIP's flow ([`crate::lb_template`]): as an ordinary VIP's, variables written in.
fn template_vip(sw: &Sw<'_, '_>, out: &mut Flows, v: &crate::lb_template::TemplateVip) {
    let mut m = vec![pred("ct.new"), v.dst()];
    m.extend(v.port_dst());
    let prio = if v.port.is_some() { 120 } else { 110 };
    let actions = if v.backends.is_empty() {
        empty_actions(v.reject)
    } else {
        vec![set(Reg::CtCommit, 0), v.ct_lb_mark(None)]
    };
    sw.owned(
        out,
        Stage::LsInLb,
        prio,
        Owner::LoadBalancer(v.name.clone()),
        format!("vip {}", v.key),
        Some(v.lb),
        and(m),
        actions,
        None,
    );
}

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    sw.dflt(out, Stage::LsInLb, 0, "default", always(), vec![next()]);
    for lb in &sw.lbs {
        for v in &lb.templates {
            template_vip(sw, out, v);
        }
        for vip in &lb.vips {
            let mut m = vec![pred("ct.new"), vip_dst(vip.ip)];
            let mut prio = 110;
            if let Some(port) = vip.port {
                m.push(eq_num(f(&format!("{}.dst", lb.proto)), port.into()));
                prio = 120;
            }
            // A VIP with a health check lists the backends whose monitors are not offline.
            let backends = sw
                .topo
                .svc
                .active(lb.uuid, &vip.key)
                .unwrap_or(&vip.backends);
            let actions = if backends.is_empty() {
                empty_actions(lb.reject_empty)
            } else {
                vec![
                    set(Reg::CtCommit, 0),
                    Action::CtLb {
                        mark: true,
                        args: Some(CtLbArgs {
                            backends: backends
                                .iter()
                                .map(|(ip, port)| {
                                    LbBackend::Addr(Backend {
                                        ip: constant(*ip),
                                        port: *port,
                                    })
                                })
                                .collect(),
                            hash_fields: lb.hash_fields.clone(),
                            flag: None,
                            legacy: false,
                        }),
                        span: hf_expr::Span::default(),
                    },
                ]
            };
            sw.owned(
                out,
                Stage::LsInLb,
                prio,
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
