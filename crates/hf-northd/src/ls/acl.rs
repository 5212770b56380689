//! `ls_in_acl`, `ls_in_acl_after_lb` and `ls_out_acl`: the NB ACLs of the switch and of the
//! port groups with ports on it, at NB priority + 1000, and the stateful defaults around them
//! (reply and related traffic of committed connections allowed at 65532, invalid and
//! blocked-reply traffic dropped, new connections committed at priority 1).
//!
//! Stateful switches (an `allow-related` ACL or a load balancer VIP) commit allowed
//! connections and mark dropped established ones `ct_mark.blocked = 1`, as 23.03 does; the
//! `REGBIT_ACL_HINT_*` bits come from [`super::acl_hint`]. `tier` does not exist in 23.03's
//! schema; `label` is committed through `REG_LABEL` in [`super::stateful`].

use hf_expr::Action;
use hf_expr::actions::{NestedKind, Pipeline as ActPipeline};
use hf_expr::ast::Expr;

use super::acl_hint::blocked;
use super::act::{ct_commit_bare, is, next, set};
use super::index::{AclInfo, AclVerdict};
use super::pre_acl::{nd_mld_acl, svc_monitor};
use super::{ACL_PRI_OFFSET, Sw};
use crate::addr::Mac;
use crate::build::{always, and, eq, eq_num, f, ip4, ip6, mac, not, num, or, outport, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::regs::{self, Reg};
use crate::stage::Stage;

/// The identity owner of an ACL's flows.
pub fn owner(acl: &AclInfo) -> Owner {
    Owner::Acl {
        holder: acl.holder.clone(),
        direction: if acl.ingress {
            "from-lport"
        } else {
            "to-lport"
        }
        .to_string(),
        priority: i64::from(acl.priority),
        nb_match: acl.nb_match.clone(),
    }
}

fn log(acl: &AclInfo) -> Option<Action> {
    acl.log.as_ref().map(|args| Action::Log {
        args: args.clone(),
        span: hf_expr::Span::default(),
    })
}

/// `ct_commit { ct_mark.blocked = V; };`
fn commit_blocked(v: u128) -> Action {
    Action::ct_commit_block(vec![Action::assign(f("ct_mark.blocked"), num(v))])
}

/// `reg0 = 0; reject { outport <-> inport; next(pipeline=..., table=...); };`
fn reject(ingress: bool) -> Vec<Action> {
    let next_stage = if ingress {
        Stage::LsOutQosMark
    } else {
        Stage::LsInL2Lkup
    };
    let pipe = if ingress {
        ActPipeline::Egress
    } else {
        ActPipeline::Ingress
    };
    vec![
        Action::assign(regs::field_of(regs::REG0_ALL), num(0)),
        Action::nested(
            NestedKind::Reject,
            vec![
                super::act::exchange("outport", "inport"),
                Action::next_table(Some(pipe), u32::from(next_stage.table())),
            ],
        ),
    ]
}

fn stage_of(acl: &AclInfo) -> Stage {
    if acl.after_lb {
        Stage::LsInAclAfterLb
    } else if acl.ingress {
        Stage::LsInAcl
    } else {
        Stage::LsOutAcl
    }
}

/// The flows of one ACL on `sw`.
fn consider(sw: &Sw<'_, '_>, out: &mut Flows, acl: &AclInfo, has_stateful: bool) {
    let stage = stage_of(acl);
    let prio = acl.priority + ACL_PRI_OFFSET;
    let add = |out: &mut Flows, stage: Stage, prio: u16, disc: &str, m: Expr, a: Vec<Action>| {
        sw.owned(
            out,
            stage,
            prio,
            owner(acl),
            disc,
            Some(acl.uuid),
            m,
            a,
            None,
        );
    };
    let with_hint = |r: Reg| and([is(r, 1), acl.matches.clone()]);
    let logged = |mut rest: Vec<Action>| {
        let mut a: Vec<Action> = log(acl).into_iter().collect();
        a.append(&mut rest);
        a
    };
    match acl.verdict {
        AclVerdict::AllowStateless => {
            add(
                out,
                stage,
                prio,
                "allow",
                acl.matches.clone(),
                logged(vec![next()]),
            );
        }
        AclVerdict::Allow | AclVerdict::AllowRelated if !has_stateful => {
            add(
                out,
                stage,
                prio,
                "allow",
                acl.matches.clone(),
                logged(vec![next()]),
            );
        }
        AclVerdict::Allow | AclVerdict::AllowRelated => {
            let label = |a: &mut Vec<Action>| {
                a.push(set(Reg::AclLabel, 1));
                a.push(Action::assign(
                    Reg::AclLabelValue.field(),
                    num(acl.label.into()),
                ));
            };
            let mut a = vec![set(Reg::CtCommit, 1)];
            if acl.label != 0 {
                label(&mut a);
            }
            a.extend(log(acl));
            a.push(next());
            add(
                out,
                stage,
                prio,
                "allow-new",
                with_hint(Reg::AclHintAllowNew),
                a,
            );
            let mut a = Vec::new();
            if acl.label != 0 {
                a.push(set(Reg::CtCommit, 1));
                label(&mut a);
            }
            a.extend(log(acl));
            a.push(next());
            add(
                out,
                stage,
                prio,
                "allow-est",
                with_hint(Reg::AclHintAllow),
                a,
            );
            if acl.log.is_some() && acl.label != 0 && acl.log_related {
                let other = if acl.ingress {
                    Stage::LsOutAcl
                } else {
                    Stage::LsInAcl
                };
                let lbl = eq_num(f("ct_label.label"), acl.label.into());
                let rpl = and([
                    pred("ct.est"),
                    not(pred("ct.rel")),
                    not(pred("ct.new")),
                    not(pred("ct.inv")),
                    pred("ct.rpl"),
                    blocked(0),
                    lbl.clone(),
                ]);
                let rel = and([
                    not(pred("ct.est")),
                    pred("ct.rel"),
                    not(pred("ct.new")),
                    not(pred("ct.inv")),
                    blocked(0),
                    lbl,
                ]);
                add(
                    out,
                    other,
                    u16::MAX - 2,
                    "log-reply",
                    rpl,
                    logged(vec![next()]),
                );
                add(
                    out,
                    other,
                    u16::MAX - 2,
                    "log-related",
                    rel,
                    logged(vec![next()]),
                );
            }
        }
        AclVerdict::Drop | AclVerdict::Reject => {
            let is_reject = acl.verdict == AclVerdict::Reject;
            let verdict = |extra: Vec<Action>| {
                let mut a: Vec<Action> = log(acl).into_iter().collect();
                a.extend(extra);
                if is_reject {
                    a.extend(reject(acl.ingress));
                }
                a
            };
            if has_stateful {
                add(
                    out,
                    stage,
                    prio,
                    "drop-new",
                    with_hint(Reg::AclHintDrop),
                    verdict(vec![]),
                );
                let m = with_hint(Reg::AclHintBlock);
                let a = if is_reject {
                    // OVN logs first, then commits, then rejects.
                    verdict(vec![commit_blocked(1)])
                } else {
                    let mut a = vec![commit_blocked(1)];
                    a.extend(log(acl));
                    a
                };
                add(out, stage, prio, "drop-est", m, a);
            } else {
                add(
                    out,
                    stage,
                    prio,
                    "drop",
                    acl.matches.clone(),
                    verdict(vec![]),
                );
            }
        }
    }
}

/// Writes the three ACL stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    let has_stateful = sw.has_stateful();
    let default_action = || {
        if sw.default_acl_drop {
            vec![Action::drop()]
        } else {
            vec![next()]
        }
    };
    if !sw.has_acls {
        let prio = if sw.has_lb_vip { 0 } else { u16::MAX };
        sw.dflt(out, Stage::LsInAcl, prio, "default", always(), vec![next()]);
        sw.dflt(
            out,
            Stage::LsOutAcl,
            prio,
            "default",
            always(),
            vec![next()],
        );
        sw.dflt(
            out,
            Stage::LsInAclAfterLb,
            0,
            "default",
            always(),
            vec![next()],
        );
    } else {
        for stage in [Stage::LsInAcl, Stage::LsOutAcl, Stage::LsInAclAfterLb] {
            sw.dflt(out, stage, 0, "default", always(), default_action());
        }
    }
    if has_stateful {
        let commit_nat = sw.topo.features.contains("ct-commit-nat");
        for (stage, ingress) in [(Stage::LsInAcl, true), (Stage::LsOutAcl, false)] {
            sw.dflt(
                out,
                stage,
                1,
                "commit-blocked",
                and([pred("ip"), pred("ct.est"), blocked(1)]),
                vec![set(Reg::CtCommit, 1), next()],
            );
            let new = if sw.default_acl_drop {
                vec![Action::drop()]
            } else {
                vec![set(Reg::CtCommit, 1), next()]
            };
            sw.dflt(
                out,
                stage,
                1,
                "commit-new",
                and([pred("ip"), not(pred("ct.est"))]),
                new,
            );
            sw.dflt(
                out,
                stage,
                u16::MAX - 3,
                "invalid",
                or([
                    pred("ct.inv"),
                    and([pred("ct.est"), pred("ct.rpl"), blocked(1)]),
                ]),
                vec![Action::drop()],
            );
            let reply = and([
                pred("ct.est"),
                not(pred("ct.rel")),
                not(pred("ct.new")),
                not(pred("ct.inv")),
                pred("ct.rpl"),
                blocked(0),
            ]);
            let reply_a = if ingress {
                vec![
                    set(Reg::AclHintDrop, 0),
                    set(Reg::AclHintBlock, 0),
                    set(Reg::AclHintAllowRel, 1),
                    next(),
                ]
            } else {
                vec![next()]
            };
            sw.dflt(out, stage, u16::MAX - 3, "reply", reply, reply_a);
            let related = and([
                not(pred("ct.est")),
                pred("ct.rel"),
                not(pred("ct.new")),
                not(pred("ct.inv")),
                blocked(0),
            ]);
            let mut rel_a = Vec::new();
            if ingress {
                rel_a.push(set(Reg::AclHintAllowRel, 1));
            }
            rel_a.push(if commit_nat {
                Action::CtCommitNat {
                    span: hf_expr::Span::default(),
                }
            } else {
                next()
            });
            sw.dflt(out, stage, u16::MAX - 3, "related", related, rel_a);
        }
        sw.dflt(
            out,
            Stage::LsInAclAfterLb,
            u16::MAX - 3,
            "related",
            is(Reg::AclHintAllowRel, 1),
            vec![next()],
        );
    }
    for stage in [Stage::LsInAcl, Stage::LsOutAcl, Stage::LsInAclAfterLb] {
        sw.dflt(out, stage, u16::MAX - 3, "nd", nd_mld_acl(), vec![next()]);
    }
    for acl in &sw.acls {
        let first = out.flows.len();
        consider(sw, out, acl, has_stateful);
        if let Some(mark) = acl.broken {
            for f in &mut out.flows[first..] {
                f.mark = Some(mark);
            }
        }
    }
    dhcp_replies(sw, out, has_stateful);
    if super::dns::has_records(sw) {
        let a = if has_stateful {
            vec![ct_commit_bare(), next()]
        } else {
            vec![next()]
        };
        sw.dflt(
            out,
            Stage::LsOutAcl,
            34000,
            "dns-reply",
            eq_num(f("udp.src"), 53),
            a,
        );
    }
    if sw.has_acls || sw.has_lb_vip {
        sw.dflt(
            out,
            Stage::LsInAcl,
            34000,
            "svc-monitor",
            svc_monitor(true),
            vec![next()],
        );
        sw.dflt(
            out,
            Stage::LsOutAcl,
            34000,
            "svc-monitor",
            svc_monitor(false),
            vec![next()],
        );
    }
}

/// Replies of the controller's DHCP server pass the egress ACLs (34000).
fn dhcp_replies(sw: &Sw<'_, '_>, out: &mut Flows, has_stateful: bool) {
    let nb = sw.topo.nb;
    let act = || {
        if has_stateful {
            vec![ct_commit_bare(), next()]
        } else {
            vec![next()]
        }
    };
    for p in sw.ports {
        let port = sw.port(*p);
        if matches!(&port.kind, crate::topo::PortKind::OtherLsp(t) if t == "external") {
            continue;
        }
        let Some(lsp) = nb.logical_switch_port().get(&port.nb) else {
            continue;
        };
        if let Some(d) = lsp.dhcpv4_options.and_then(|r| nb.get(r)) {
            let o = &d.options;
            if let (Some(id), Some(m), Some(_)) = (
                o.get("server_id").and_then(|s| s.parse().ok()),
                o.get("server_mac").and_then(|s| Mac::parse(s)),
                o.get("lease_time"),
            ) {
                let mm = and([
                    outport(&port.name),
                    eq(f("eth.src"), mac(m)),
                    eq(f("ip4.src"), ip4(id)),
                    pred("udp"),
                    eq_num(f("udp.src"), 67),
                    eq_num(f("udp.dst"), 68),
                ]);
                sw.owned(
                    out,
                    Stage::LsOutAcl,
                    34000,
                    Owner::Port(port.name.clone()),
                    "dhcp4-reply",
                    Some(d.uuid),
                    mm,
                    act(),
                    None,
                );
            }
        }
        if let Some(d) = lsp.dhcpv6_options.and_then(|r| nb.get(r))
            && let Some(m) = d.options.get("server_id").and_then(|s| Mac::parse(s))
        {
            let mm = and([
                outport(&port.name),
                eq(f("eth.src"), mac(m)),
                eq(f("ip6.src"), ip6(m.ipv6_lla())),
                pred("udp"),
                eq_num(f("udp.src"), 547),
                eq_num(f("udp.dst"), 546),
            ]);
            sw.owned(
                out,
                Stage::LsOutAcl,
                34000,
                Owner::Port(port.name.clone()),
                "dhcp6-reply",
                Some(d.uuid),
                mm,
                act(),
                None,
            );
        }
    }
}
