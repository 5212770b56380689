//! `lr_out_post_snat` (one stage of [`super`]).

use super::*;

/// `lr_out_post_snat`.
pub fn post_snat(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    out.add(
        r.dp,
        Stage::LrOutPostSnat,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
}
