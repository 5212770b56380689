//! `lr_out_post_undnat` (one stage of [`super`]).

use super::*;

/// `lr_out_post_undnat`.
pub fn post_undnat(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutPostUndnat;
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
    if r.gw_router && r.has_nat_or_lb() {
        out.add(
            r.dp,
            st,
            50,
            and([pred("ip"), pred("ct.new")]),
            vec![Action::ct_commit_block(Vec::new()), next()],
            r.owner(),
            "commit",
            None,
        );
    }
}
