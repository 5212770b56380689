//! `lr_out_chk_dnat_local` (one stage of [`super`]).

use super::*;

/// `lr_out_chk_dnat_local`.
pub fn chk_dnat_local(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutChkDnatLocal;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![set_reg(Reg::DstNatIpLocal, num(0)), next()],
        r.owner(),
        "default",
        None,
    );
    if r.nats.is_empty() || (!r.gw_router && r.dgp.is_none()) {
        return;
    }
    let set1 = || vec![set_reg(Reg::DstNatIpLocal, num(1)), next()];
    out.add(
        r.dp,
        st,
        50,
        and([pred("ip"), eq(f("ct_mark.natted"), num(1))]),
        set1(),
        r.owner(),
        "natted",
        None,
    );
    if r.gw_router {
        return;
    }
    let mut seen = BTreeSet::new();
    for n in &r.nats {
        if !seen.insert(n.external) {
            continue;
        }
        if n.dgp.is_none() {
            continue;
        }
        let mut m = vec![pred("ip"), ip_dst(n.external)];
        m.extend(r.nat_resident(n));
        out.add(
            r.dp,
            st,
            50,
            and(m),
            set1(),
            n.owner.clone(),
            "local",
            Some(n.uuid),
        );
    }
}
