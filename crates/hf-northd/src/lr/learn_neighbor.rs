//! `lr_in_learn_neighbor`: learn ARP/ND senders not yet known (`put_arp`/`put_nd`), skip
//! known ones and ND packets without a usable address; drop everything else (ARP/ND that
//! reached here was for the router and is done with after learning).

use hf_expr::Action;

use crate::build::{always, and, f, or, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::lr::act::{drop, eqn, next};
use crate::lr::ctx::Rtr;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

/// Builds the stage.
pub fn build(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInLearnNeighbor;
    let o = r.owner();
    let sp = Default::default;
    out.add(r.dp, st, 0, always(), drop(), o.clone(), "default", None);
    let known = crate::build::eq_num(Reg::LookupNeighborResult.field(), 1);
    let known = if crate::lr::lookup_neighbor::learn_from_arp_request(topo, r) {
        known
    } else {
        or([
            known,
            crate::build::eq_num(Reg::LookupNeighborIpResult.field(), 0),
        ])
    };
    out.add(r.dp, st, 100, known, vec![next()], o.clone(), "known", None);
    out.add(
        r.dp,
        st,
        90,
        pred("arp"),
        vec![
            Action::PutArp {
                port: f("inport"),
                ip: f("arp.spa"),
                mac: f("arp.sha"),
                span: sp(),
            },
            next(),
        ],
        o.clone(),
        "arp",
        None,
    );
    out.add(
        r.dp,
        st,
        90,
        pred("nd_na"),
        vec![
            Action::PutNd {
                port: f("inport"),
                ip: f("nd.target"),
                mac: f("nd.tll"),
                span: sp(),
            },
            next(),
        ],
        o.clone(),
        "nd-na",
        None,
    );
    out.add(
        r.dp,
        st,
        90,
        pred("nd_ns"),
        vec![
            Action::PutNd {
                port: f("inport"),
                ip: f("ip6.src"),
                mac: f("nd.sll"),
                span: sp(),
            },
            next(),
        ],
        o.clone(),
        "nd-ns",
        None,
    );
    out.add(
        r.dp,
        st,
        95,
        and([pred("nd_na"), eqn("nd.tll", 0)]),
        vec![
            Action::PutNd {
                port: f("inport"),
                ip: f("nd.target"),
                mac: f("eth.src"),
                span: sp(),
            },
            next(),
        ],
        o.clone(),
        "nd-na-no-tll",
        None,
    );
    out.add(
        r.dp,
        st,
        95,
        and([pred("nd_ns"), or([eqn("ip6.src", 0), eqn("nd.sll", 0)])]),
        vec![next()],
        o,
        "nd-ns-no-sll",
        None,
    );
}
