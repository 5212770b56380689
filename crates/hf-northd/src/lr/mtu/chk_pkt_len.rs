//! `lr_in_chk_pkt_len` (one stage of [`super`]).

use super::*;

/// `lr_in_chk_pkt_len`.
pub fn chk_pkt_len(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, diags: &mut Diags) {
    out.add(
        r.dp,
        Stage::LrInChkPktLen,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
        None,
    );
    for p in r.ports.iter().filter(|p| gateway_mtu(topo, p).is_some()) {
        gateway_mtu_flow(
            topo,
            r,
            p,
            Stage::LrInChkPktLen,
            outport(&p.name),
            vec![next()],
            Owner::Port(p.name.clone()),
            "check",
            Some(p.nb),
            out,
            diags,
        );
    }
}
