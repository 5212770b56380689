//! `ls_in_l2_unknown`: a destination no port claims goes to the ports with `unknown`
//! addresses (`_MC_unknown`) or is dropped; packets for disabled ports are dropped.

use super::MC_UNKNOWN;
use super::Sw;
use super::act::{output, to_port};
use crate::build::{always, outport};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::stage::Stage;

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    let none = if sw.has_unknown {
        to_port(MC_UNKNOWN)
    } else {
        vec![hf_expr::Action::drop()]
    };
    sw.dflt(out, Stage::LsInL2Unknown, 50, "none", outport("none"), none);
    sw.dflt(
        out,
        Stage::LsInL2Unknown,
        0,
        "default",
        always(),
        vec![output()],
    );
    for p in sw.ports {
        let port = sw.port(*p);
        if !port.enabled
            && !matches!(&port.kind, crate::topo::PortKind::OtherLsp(t) if t == "external")
        {
            sw.for_port(
                out,
                Stage::LsInL2Unknown,
                50,
                *p,
                "disabled",
                outport(&port.name),
                vec![hf_expr::Action::drop()],
            );
        }
    }
}
