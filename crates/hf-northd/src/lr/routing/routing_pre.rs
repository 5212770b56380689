//! `lr_in_ip_routing_pre` (one stage of [`super`]).

use super::*;

/// `lr_in_ip_routing_pre`.
pub fn routing_pre(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInIpRoutingPre;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![set_reg(Reg::RouteTableId, num(0)), next()],
        r.owner(),
        "default",
        None,
    );
    for p in &r.ports {
        if let Some(id) = p.route_table.as_ref().and_then(|t| r.route_tables.get(t)) {
            out.add(
                r.dp,
                st,
                100,
                inport(&p.name),
                vec![set_reg(Reg::RouteTableId, num(u128::from(*id))), next()],
                Owner::Port(p.name.clone()),
                "route-table",
                Some(p.nb),
            );
        }
    }
}
