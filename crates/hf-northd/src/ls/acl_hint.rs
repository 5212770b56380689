//! `ls_in_acl_hint` and `ls_out_acl_hint`: from the conntrack state, which kinds of ACL flow
//! a packet may hit (`REGBIT_ACL_HINT_*`), so the ACL stages match on one bit instead of the
//! conntrack flags. Written when the switch has a stateful ACL or a load balancer VIP.

use super::Sw;
use super::act::{next, set};
use crate::build::{always, and, eq_num, f, not, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// `ct_mark.blocked == V`.
pub fn blocked(v: u128) -> hf_expr::ast::Expr {
    eq_num(f("ct_mark.blocked"), v)
}

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for stage in [Stage::LsInAclHint, Stage::LsOutAclHint] {
        if !sw.has_acls && !sw.has_lb_vip {
            sw.dflt(out, stage, u16::MAX, "default", always(), vec![next()]);
        } else {
            sw.dflt(out, stage, 0, "default", always(), vec![next()]);
        }
        if !sw.has_stateful_acl && !sw.has_lb_vip {
            continue;
        }
        let req = |b: u128| {
            and([
                not(pred("ct.new")),
                pred("ct.est"),
                not(pred("ct.rpl")),
                blocked(b),
            ])
        };
        let rows: [(u16, hf_expr::ast::Expr, [Reg; 2]); 5] = [
            (
                7,
                and([pred("ct.new"), not(pred("ct.est"))]),
                [Reg::AclHintAllowNew, Reg::AclHintDrop],
            ),
            (6, req(1), [Reg::AclHintAllowNew, Reg::AclHintDrop]),
            (
                5,
                not(pred("ct.trk")),
                [Reg::AclHintAllow, Reg::AclHintDrop],
            ),
            (4, req(0), [Reg::AclHintAllow, Reg::AclHintBlock]),
            (3, not(pred("ct.est")), [Reg::AclHintDrop, Reg::AclHintDrop]),
        ];
        for (prio, m, regs) in rows {
            let mut a = vec![set(regs[0], 1)];
            if regs[1] != regs[0] {
                a.push(set(regs[1], 1));
            }
            a.push(next());
            sw.dflt(out, stage, prio, &format!("hint{prio}"), m, a);
        }
        sw.dflt(
            out,
            stage,
            2,
            "hint2",
            and([pred("ct.est"), blocked(1)]),
            vec![set(Reg::AclHintDrop, 1), next()],
        );
        sw.dflt(
            out,
            stage,
            1,
            "hint1",
            and([pred("ct.est"), blocked(0)]),
            vec![set(Reg::AclHintBlock, 1), next()],
        );
    }
}
