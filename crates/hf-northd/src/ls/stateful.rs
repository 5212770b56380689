//! `ls_in_stateful` and `ls_out_stateful`: commit what the ACL stages marked
//! (`REGBIT_CONNTRACK_COMMIT`), clearing `ct_mark.blocked` and, for a labelled ACL, writing
//! its label from `REG_LABEL`.

use hf_expr::Action;

use super::Sw;
use super::act::{is, next};
use crate::build::{always, and, f, num};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for stage in [Stage::LsInStateful, Stage::LsOutStateful] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
        let unblock = Action::assign(f("ct_mark.blocked"), num(0));
        sw.dflt(
            out,
            stage,
            100,
            "commit-label",
            and([is(Reg::CtCommit, 1), is(Reg::AclLabel, 1)]),
            vec![
                Action::ct_commit_block(if sw.topo.features.contains("ct-label-label") {
                    vec![
                        unblock.clone(),
                        Action::move_field(f("ct_label.label"), Reg::AclLabelValue.field()),
                    ]
                } else {
                    // Chassis before OVN 22.03 have no `ct_label.label`: the connection is
                    // committed without the ACL's label (which only feeds logging/CMS tools).
                    vec![unblock.clone()]
                }),
                next(),
            ],
        );
        sw.dflt(
            out,
            stage,
            100,
            "commit",
            and([is(Reg::CtCommit, 1), is(Reg::AclLabel, 0)]),
            vec![Action::ct_commit_block(vec![unblock]), next()],
        );
    }
}
