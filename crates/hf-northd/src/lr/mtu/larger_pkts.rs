//! `lr_in_larger_pkts` (one stage of [`super`]).

use super::*;

/// `lr_in_larger_pkts`.
pub fn larger_pkts(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    out.add(
        r.dp,
        Stage::LrInLargerPkts,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
    for p in &r.ports {
        let Some(mtu) = gateway_mtu(topo, p) else {
            continue;
        };
        for q in r.ports.iter().filter(|q| q.idx != p.idx) {
            too_big(r, q, Some(p), mtu, Stage::LrInLargerPkts, out);
        }
    }
}
