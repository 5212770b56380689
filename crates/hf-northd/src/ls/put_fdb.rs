//! `ls_in_put_fdb`: learn the source MAC of a port that takes unknown MACs when
//! `ls_in_lookup_fdb` did not find it (see [`super::lookup_fdb::learns`]).

use hf_expr::Action;

use super::Sw;
use super::act::{is, next};
use crate::build::{always, and, f, inport};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    sw.dflt(out, Stage::LsInPutFdb, 0, "default", always(), vec![next()]);
    for p in sw.ports {
        let port = sw.port(*p);
        if !super::lookup_fdb::learns(port) {
            continue;
        }
        sw.for_port(
            out,
            Stage::LsInPutFdb,
            100,
            *p,
            "learn",
            and([inport(&port.name), is(Reg::LkupFdb, 0)]),
            vec![
                Action::PutFdb {
                    port: f("inport"),
                    mac: f("eth.src"),
                    span: hf_expr::Span::default(),
                },
                next(),
            ],
        );
    }
}
