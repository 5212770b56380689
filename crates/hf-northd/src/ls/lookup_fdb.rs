//! `ls_in_lookup_fdb`: ports that take unknown MACs (VIFs with `unknown` and no port
//! security, localnet ports with `options:localnet_learn_fdb=true`) look the source MAC up in
//! the FDB; `ls_in_put_fdb` learns it when it is not there yet.

use hf_expr::actions::ResultFn;

use super::Sw;
use super::act::{next, result};
use crate::build::{always, f, inport};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{Port, PortKind};

/// True when `port` learns MACs into the FDB.
pub fn learns(port: &Port) -> bool {
    port.port_security.is_empty()
        && port.unknown
        && match port.kind {
            PortKind::Vif => true,
            PortKind::Localnet => port
                .options
                .get("localnet_learn_fdb")
                .is_some_and(|v| v == "true"),
            _ => false,
        }
}

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    sw.dflt(
        out,
        Stage::LsInLookupFdb,
        0,
        "default",
        always(),
        vec![next()],
    );
    for p in sw.ports {
        let port = sw.port(*p);
        if !learns(port) {
            continue;
        }
        sw.for_port(
            out,
            Stage::LsInLookupFdb,
            100,
            *p,
            "lookup",
            inport(&port.name),
            vec![
                result(
                    Reg::LkupFdb.field(),
                    ResultFn::LookupFdb {
                        port: f("inport"),
                        mac: f("eth.src"),
                    },
                ),
                next(),
            ],
        );
    }
}
