//! `ls_in_apply_port_sec` and `ls_out_apply_port_sec`: drop what the check stages marked.

use super::Sw;
use super::act::{is, next, output};
use crate::build::always;
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for (stage, last) in [
        (Stage::LsInApplyPortSec, next()),
        (Stage::LsOutApplyPortSec, output()),
    ] {
        sw.dflt(
            out,
            stage,
            50,
            "drop",
            is(Reg::PortSecDrop, 1),
            vec![hf_expr::Action::drop()],
        );
        sw.dflt(out, stage, 0, "default", always(), vec![last]);
    }
}
