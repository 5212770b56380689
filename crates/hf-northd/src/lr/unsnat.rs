//! `lr_in_unsnat`: traffic to an SNAT external address is un-SNATed (`ct_snat`) before
//! anything else looks at its destination. Gateway routers do it for every packet; routers
//! with a distributed gateway port do it on the gateway chassis (or the logical port's chassis
//! for distributed NAT), in the common zone unless the packet looped back with
//! `flags.use_snat_zone`.

use std::collections::BTreeSet;

use hf_expr::actions::NatKind;

use crate::build::{always, and, eq, f, inport, num, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::lr::act::{ct_nat, ip_dst, next};
use crate::lr::ctx::Rtr;
use crate::stage::Stage;
use crate::topo::Topo;

/// Builds the stage.
pub fn build(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInUnsnat;
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
    let mut seen = BTreeSet::new();
    for n in r.nats.iter().filter(|n| n.kind.snat()) {
        if !seen.insert(n.external) {
            continue;
        }
        if r.gw_router {
            out.add(
                r.dp,
                st,
                90,
                and([pred("ip"), ip_dst(n.external)]),
                vec![ct_nat(NatKind::Snat, None, None)],
                n.owner.clone(),
                "unsnat",
                Some(n.uuid),
            );
        } else if let Some(d) = n.dgp {
            let p = &r.ports[d];
            let res = if n.distributed.is_some() {
                None
            } else {
                p.resident()
            };
            let mut m = vec![
                pred("ip"),
                ip_dst(n.external),
                inport(&p.name),
                eq(f("flags.loopback"), num(0)),
            ];
            m.extend(res.clone());
            out.add(
                r.dp,
                st,
                100,
                and(m),
                vec![ct_nat(NatKind::SnatInCzone, None, None)],
                n.owner.clone(),
                "unsnat-czone",
                Some(n.uuid),
            );
            let mut m = vec![
                pred("ip"),
                ip_dst(n.external),
                inport(&p.name),
                eq(f("flags.loopback"), num(1)),
                eq(f("flags.use_snat_zone"), num(1)),
            ];
            m.extend(res);
            out.add(
                r.dp,
                st,
                100,
                and(m),
                vec![ct_nat(NatKind::Snat, None, None)],
                n.owner.clone(),
                "unsnat-snat-zone",
                Some(n.uuid),
            );
        }
    }
}
