//! `ls_in_dns_lookup` and `ls_in_dns_response`: with `DNS` records on the switch, DNS queries
//! are answered by the controller (`dns_lookup()`) and sent back to the asking port.

use hf_expr::Action;
use hf_expr::actions::ResultFn;

use super::Sw;
use super::act::{exchange, loopback, next, output, result};
use crate::build::{always, and, bit, eq_num, f, num};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;

/// The switch has a `DNS` row with records.
pub fn has_records(sw: &Sw<'_, '_>) -> bool {
    let nb = sw.topo.nb;
    nb.logical_switch()
        .get(&sw.topo.datapaths[sw.dp].nb)
        .is_some_and(|ls| {
            ls.dns_records
                .iter()
                .filter_map(|r| nb.get(*r))
                .any(|d| !d.records.is_empty())
        })
}

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, _diags: &mut Diags) {
    for stage in [Stage::LsInDnsLookup, Stage::LsInDnsResponse] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
    }
    if !has_records(sw) {
        return;
    }
    sw.dflt(
        out,
        Stage::LsInDnsLookup,
        100,
        "lookup",
        eq_num(f("udp.dst"), 53),
        vec![
            result(Reg::DnsLookupResult.field(), ResultFn::DnsLookup),
            next(),
        ],
    );
    for (v, ip) in [("v4", "ip4"), ("v6", "ip6")] {
        sw.dflt(
            out,
            Stage::LsInDnsResponse,
            100,
            &format!("response-{v}"),
            and([eq_num(f("udp.dst"), 53), bit(Reg::DnsLookupResult.field())]),
            vec![
                exchange("eth.dst", "eth.src"),
                exchange(&format!("{ip}.src"), &format!("{ip}.dst")),
                Action::move_field(f("udp.dst"), f("udp.src")),
                Action::assign(f("udp.src"), num(53)),
                Action::move_field(f("outport"), f("inport")),
                loopback(),
                output(),
            ],
        );
    }
}
