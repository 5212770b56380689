//! `lr_out_delivery` (one stage of [`super`]).

use super::*;

/// `lr_out_delivery`.
pub fn delivery(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutDelivery;
    out.add(r.dp, st, 0, always(), drop(), r.owner(), "default", None);
    for p in &r.ports {
        out.add(
            r.dp,
            st,
            100,
            outport(&p.name),
            vec![output()],
            Owner::Port(p.name.clone()),
            "output",
            Some(p.nb),
        );
    }
}
