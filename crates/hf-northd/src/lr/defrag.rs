//! `lr_in_defrag`: traffic to a router load balancer VIP is sent to conntrack (`ct_dnat`,
//! which also defragments) so `lr_in_dnat` sees its state.

use std::collections::BTreeSet;

use hf_expr::actions::NatKind;

use crate::build::{always, and, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::lr::act::{ct_nat, ip_dst, next};
use crate::lr::ctx::Rtr;
use crate::stage::Stage;
use crate::topo::Topo;

/// Builds the stage.
pub fn build(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInDefrag;
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
    let mut seen_templates = BTreeSet::new();
    for v in &r.templates {
        if seen_templates.insert((v.v6, v.ip.clone())) {
            out.add(
                r.dp,
                st,
                100,
                and([pred("ip"), v.dst()]),
                vec![ct_nat(NatKind::Dnat, None, None)],
                crate::flow::Owner::LoadBalancer(v.name.clone()),
                format!("vip-{}", v.key),
                Some(v.lb),
            );
        }
    }
    let mut seen = BTreeSet::new();
    for v in &r.vips {
        if seen.insert(v.ip) {
            out.add(
                r.dp,
                st,
                100,
                and([pred("ip"), ip_dst(v.ip)]),
                vec![ct_nat(NatKind::Dnat, None, None)],
                v.owner.clone(),
                format!("vip-{}", v.ip),
                Some(v.lb),
            );
        }
    }
}
