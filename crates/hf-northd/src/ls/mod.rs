//! The logical switch pipelines: one module per stage (ovn-northd(8) "Logical Switch
//! Datapaths"). [`build`] runs every stage for one switch.

use crate::build::always;
use crate::diag::Diags;
use crate::flow::{DpIdx, Flows, Owner};
use crate::stage::{DpKind, Stage};
use crate::topo::Topo;

/// Every flow of switch `dp`.
pub fn build(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows, diags: &mut Diags) {
    let _ = diags;
    // Placeholder until the stage modules land: every table passes packets on.
    defaults(topo, dp, out);
}

/// `next;` at priority 0 in every stage that has no other default.
fn defaults(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows) {
    let owner = Owner::Datapath(topo.datapaths[dp].name.clone());
    for s in Stage::ALL.iter().filter(|s| s.dp_kind() == DpKind::Switch) {
        out.add(
            dp,
            *s,
            0,
            always(),
            vec![hf_expr::Action::next()],
            owner.clone(),
            "default",
            None,
        );
    }
}
