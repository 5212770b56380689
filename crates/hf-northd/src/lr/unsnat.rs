//! `lr_in_unsnat`: traffic to an SNAT external address is un-SNATed (`ct_snat`) before
//! anything else looks at its destination. Gateway routers do it for every packet; routers
//! with a distributed gateway port do it on the gateway chassis (or the logical port's chassis
//! for distributed NAT), in the common zone unless the packet looped back with
//! `flags.use_snat_zone`.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hf_expr::actions::NatKind;

use crate::build::{always, and, eq, f, inport, num, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
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
    let gw_force = r.lb_force_snat.iter().filter(|_| r.gw_router);
    for a in gw_force.chain(r.dnat_force_snat.iter()) {
        out.add(
            r.dp,
            st,
            110,
            and([pred(if a.is_ipv6() { "ip6" } else { "ip4" }), ip_dst(*a)]),
            vec![ct_nat(NatKind::Snat, None, None)],
            r.owner(),
            format!("force-snat-{a}"),
            None,
        );
    }
    if r.force_snat_router_ip {
        for (p, a) in r.router_ip_snat_addrs() {
            out.add(
                r.dp,
                st,
                110,
                and([inport(&p.name), ip_dst(a)]),
                vec![ct_nat(NatKind::Snat, None, None)],
                Owner::Port(p.name.clone()),
                format!("force-snat-{a}"),
                Some(p.nb),
            );
        }
    }
    // A router LB VIP that is also a NAT external address skips unSNAT.
    let ext: BTreeSet<IpAddr> = r.nats.iter().map(|n| n.external).collect();
    for v in r.vips.iter().filter(|v| ext.contains(&v.ip)) {
        let fam = if v.ip.is_ipv6() { "ip6" } else { "ip4" };
        let mut m = vec![pred(fam), ip_dst(v.ip), pred(v.proto)];
        if let Some(port) = v.port {
            m.push(eq(f(&format!("{}.dst", v.proto)), num(u128::from(port))));
        }
        out.add(
            r.dp,
            st,
            120,
            and(m),
            vec![next()],
            v.owner.clone(),
            format!("vip-{}", v.key),
            Some(v.lb),
        );
    }
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
                if n.stateless() {
                    vec![next()]
                } else {
                    vec![ct_nat(NatKind::Snat, None, None)]
                },
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
                if n.stateless() {
                    vec![next()]
                } else {
                    vec![ct_nat(NatKind::SnatInCzone, None, None)]
                },
                n.owner.clone(),
                "unsnat-czone",
                Some(n.uuid),
            );
            if n.stateless_opt {
                continue;
            }
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
