//! `lr_in_lookup_neighbor`: whether the sender of an ARP or ND packet is already known
//! (`REGBIT_LOOKUP_NEIGHBOR_RESULT`), so `lr_in_learn_neighbor` learns only new bindings.
//! ARP requests are looked up only from senders in the port's own networks. With the router's
//! `options:always_learn_from_arp_request=false`, requests only refresh bindings already
//! known (`REGBIT_LOOKUP_NEIGHBOR_IP_RESULT` from `lookup_arp_ip`/`lookup_nd_ip`), except
//! requests for the router's own address.

use hf_expr::Action;
use hf_expr::actions::ResultFn;

use crate::build::{always, and, eq, f, inport, ip4, net4, num, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{eqn, next, result, set_reg};
use crate::lr::ctx::Rtr;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

/// `always_learn_from_arp_request` (default true).
pub fn learn_from_arp_request(topo: &Topo<'_>, r: &Rtr) -> bool {
    topo.nb
        .logical_router()
        .get(&topo.datapaths[r.dp].nb)
        .and_then(|l| l.options.get("always_learn_from_arp_request"))
        .is_none_or(|v| v != "false")
}

/// Builds the stage.
pub fn build(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    let st = Stage::LrInLookupNeighbor;
    let o = r.owner();
    let learn = learn_from_arp_request(topo, r);
    let res = Reg::LookupNeighborResult.field();
    let ip_res = || set_reg(Reg::LookupNeighborIpResult, num(1));
    let with = |first: Action, extra: Option<Action>| {
        let mut v = vec![first];
        v.extend(extra);
        v.push(next());
        v
    };
    out.add(
        r.dp,
        st,
        0,
        always(),
        vec![set_reg(Reg::LookupNeighborResult, num(1)), next()],
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
        with(result(res.clone(), arp()), (!learn).then(ip_res)),
        o.clone(),
        "arp-reply",
        None,
    );
    out.add(
        r.dp,
        st,
        100,
        pred("nd_na"),
        with(
            result(
                res.clone(),
                ResultFn::LookupNd {
                    port: f("inport"),
                    ip: f("nd.target"),
                    mac: f("nd.tll"),
                },
            ),
            (!learn).then(ip_res),
        ),
        o.clone(),
        "nd-na",
        None,
    );
    let ns_ip = (!learn).then(|| {
        result(
            Reg::LookupNeighborIpResult.field(),
            ResultFn::LookupNdIp {
                port: f("inport"),
                ip: f("ip6.src"),
            },
        )
    });
    out.add(
        r.dp,
        st,
        100,
        pred("nd_ns"),
        with(
            result(
                res.clone(),
                ResultFn::LookupNd {
                    port: f("inport"),
                    ip: f("ip6.src"),
                    mac: f("nd.sll"),
                },
            ),
            ns_ip,
        ),
        o,
        "nd-ns",
        None,
    );
    if !learn {
        // Unsolicited link-local NAs to a multicast address refresh known bindings only.
        let m = and([
            pred("nd_na"),
            eq(
                f("ip6.src"),
                crate::build::net6("fe80::/10".parse().expect("constant")),
            ),
            eq(
                f("ip6.dst"),
                crate::build::net6("ff00::/8".parse().expect("constant")),
            ),
        ]);
        let a = vec![
            result(
                res.clone(),
                ResultFn::LookupNd {
                    port: f("inport"),
                    ip: f("ip6.src"),
                    mac: f("nd.tll"),
                },
            ),
            result(
                Reg::LookupNeighborIpResult.field(),
                ResultFn::LookupNdIp {
                    port: f("inport"),
                    ip: f("ip6.src"),
                },
            ),
            next(),
        ];
        out.add(r.dp, st, 110, m, a, r.owner(), "unsolicited-na", None);
    }
    for p in &r.ports {
        let own = Owner::Port(p.name.clone());
        for n in &p.v4 {
            if !learn {
                let mut m = vec![
                    inport(&p.name),
                    eq(f("arp.spa"), net4(n.trunc())),
                    eq(f("arp.tpa"), ip4(n.addr())),
                    eqn("arp.op", 1),
                ];
                m.extend(p.resident());
                out.add(
                    r.dp,
                    st,
                    110,
                    and(m),
                    with(result(res.clone(), arp()), Some(ip_res())),
                    own.clone(),
                    format!("arp-request-to-router-{n}"),
                    Some(p.nb),
                );
            }
            let mut m = vec![
                inport(&p.name),
                eq(f("arp.spa"), net4(n.trunc())),
                eqn("arp.op", 1),
            ];
            m.extend(p.resident());
            let extra = (!learn).then(|| {
                result(
                    Reg::LookupNeighborIpResult.field(),
                    ResultFn::LookupArpIp {
                        port: f("inport"),
                        ip: f("arp.spa"),
                    },
                )
            });
            out.add(
                r.dp,
                st,
                100,
                and(m),
                with(result(res.clone(), arp()), extra),
                own.clone(),
                format!("arp-request-{n}"),
                Some(p.nb),
            );
        }
    }
}
