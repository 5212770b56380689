//! `lr_in_lookup_neighbor`: whether the sender of an ARP or ND packet is already known
//! (`REGBIT_LOOKUP_NEIGHBOR_RESULT`), so `lr_in_learn_neighbor` learns only new bindings.
//! ARP requests are looked up only from senders in the port's own networks.

use hf_expr::actions::ResultFn;

use crate::build::{always, and, eq, f, inport, net4, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{eqn, next, result, set_reg};
use crate::lr::ctx::Rtr;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

/// Builds the stage.
pub fn build(_topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInLookupNeighbor;
    let o = r.owner();
    let res = Reg::LookupNeighborResult.field();
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![
            set_reg(Reg::LookupNeighborResult, crate::build::num(1)),
            next(),
        ],
        o.clone(),
        "default",
        None,
    );
    let arp = || ResultFn::LookupArp {
        port: f("inport"),
        ip: f("arp.spa"),
        mac: f("arp.sha"),
    };
    out.add(
        r.dp,
        st,
        100,
        eqn("arp.op", 2),
        vec![result(res.clone(), arp()), next()],
        o.clone(),
        "arp-reply",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        pred("nd_na"),
        vec![
            result(
                res.clone(),
                ResultFn::LookupNd {
                    port: f("inport"),
                    ip: f("nd.target"),
                    mac: f("nd.tll"),
                },
            ),
            next(),
        ],
        o.clone(),
        "nd-na",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        pred("nd_ns"),
        vec![
            result(
                res.clone(),
                ResultFn::LookupNd {
                    port: f("inport"),
                    ip: f("ip6.src"),
                    mac: f("nd.sll"),
                },
            ),
            next(),
        ],
        o,
        "nd-ns",
        None,
    );
    for p in &r.ports {
        for n in &p.v4 {
            let mut m = vec![
                inport(&p.name),
                eq(f("arp.spa"), net4(n.trunc())),
                eqn("arp.op", 1),
            ];
            m.extend(p.resident());
            out.add(
                r.dp,
                st,
                100,
                and(m),
                vec![result(res.clone(), arp()), next()],
                Owner::Port(p.name.clone()),
                format!("arp-request-{n}"),
                Some(p.nb),
            );
        }
    }
}
