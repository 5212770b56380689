//! `lr_out_egr_loop` (one stage of [`super`]).

use super::*;

/// `lr_out_egr_loop`.
pub fn egr_loop(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrOutEgrLoop;
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![next()],
        r.owner(),
        "default",
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
        let Some(d) = n.dgp else { continue };
        let p = &r.ports[d];
        let mut m = vec![ip_dst(n.external), outport(&p.name)];
        m.extend(r.nat_resident(n));
        let mut body = vec![
            ct_clear(),
            mv(f("inport"), f("outport")),
            set("outport", hf_expr::ast::Value::Str(String::new())),
            swap("eth.dst", "eth.src"),
            set("flags", num(0)),
            loopback(),
            mv(f("flags.use_snat_zone"), Reg::DstNatIpLocal.field()),
        ];
        for i in 0..=9 {
            body.push(set(&format!("reg{i}"), num(0)));
        }
        body.push(set_reg(Reg::EgressLoopback, num(1)));
        body.push(Action::next_table(Some(Pipeline::Ingress), 0));
        out.add(
            r.dp,
            st,
            100,
            and(m),
            vec![nested(hf_expr::actions::NestedKind::Clone, body)],
            n.owner.clone(),
            "loop",
            Some(n.uuid),
        );
    }
}
