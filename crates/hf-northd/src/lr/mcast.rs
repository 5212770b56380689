//! Multicast relay on a router (`options:mcast_relay=true`, ovn-northd 23.03's
//! `build_mcast_lookup_flows_for_lrouter`, the relay half of
//! `build_egress_delivery_flows_for_lrouter_port` and of
//! `build_misc_local_traffic_drop_flows_for_lrouter`):
//!
//! - `lr_in_ip_input` priority 82: IP multicast goes on (`next;`) instead of being dropped
//!   ([`crate::lr::ip_input`] asks [`relay`]); with a port that has `options:mcast_flood`,
//!   priority 120 lets IGMP and MLD with TTL 1 through.
//! - `lr_in_ip_routing`: every group relayed to the router ([`crate::tables::igmp`]) at
//!   priority 10500 (`outport = "<group>"; ip.ttl--; next;`, first cloned to `_MC_static`
//!   when some port floods statically); unregistered multicast dropped at 10450, or with a
//!   static flood port, IGMP/MLD cloned to `_MC_static` at 10460, other multicast at 10450,
//!   and IGMP/MLD from the router's own MACs dropped at 10550.
//! - `lr_out_delivery` priority 110 per port: multicast leaves with the port's MAC as source.

use std::net::IpAddr;

use hf_expr::Action;

use crate::build::{and, eq, eq_num, f, ip4, ip6, mac, or, pred};
use crate::flow::Flows;
use crate::lr::act::{dec_ttl, next, output, set_outport};
use crate::lr::ctx::Rtr;
use crate::ls::act::clone;
use crate::stage::Stage;
use crate::tables::opt_true;
use crate::topo::{PortKind, Topo};

/// Whether the router has `options:mcast_relay=true`.
pub fn relay(topo: &Topo<'_>, r: &Rtr) -> bool {
    topo.nb
        .logical_router()
        .get(&topo.datapaths[r.dp].nb)
        .is_some_and(|lr| opt_true(&lr.options, "mcast_relay"))
}

/// Whether an enabled port of the router has `options:mcast_flood=true` (23.03's
/// `rtr.flood_static`).
pub fn flood_static(topo: &Topo<'_>, r: &Rtr) -> bool {
    topo.datapaths[r.dp].ports.iter().any(|&p| {
        let p = &topo.ports[p];
        matches!(p.kind, PortKind::RouterPort { .. })
            && p.enabled
            && opt_true(&p.options, "mcast_flood")
    })
}

fn mcast() -> hf_expr::ast::Expr {
    or([pred("ip4.mcast"), pred("ip6.mcast")])
}

fn mld() -> hf_expr::ast::Expr {
    or([pred("mldv1"), pred("mldv2")])
}

/// `lr_in_ip_input` priority 120 (with a static flood port).
pub fn ip_input(topo: &Topo<'_>, r: &Rtr, out: &mut Flows) {
    if !flood_static(topo, r) {
        return;
    }
    let ttl1 = || eq_num(f("ip.ttl"), 1);
    for (m, d) in [(pred("igmp"), "igmp-ttl1"), (mld(), "mld-ttl1")] {
        out.add(
            r.dp,
            Stage::LrInIpInput,
            120,
            and([m, ttl1()]),
            vec![next()],
            r.owner(),
            d,
            None,
        );
    }
}

/// `lr_in_ip_routing`'s multicast flows.
pub fn routing(topo: &Topo<'_>, r: &Rtr, out: &mut Flows) {
    if !relay(topo, r) {
        return;
    }
    let st = Stage::LrInIpRouting;
    let fs = flood_static(topo, r);
    let mut plan = crate::tables::igmp::plan(topo, &topo.igmp);
    for g in plan.groups.remove(&r.dp).unwrap_or_default().into_values() {
        let m = match g.addr {
            IpAddr::V4(a) => and([pred("ip4"), eq(f("ip4.dst"), ip4(a))]),
            IpAddr::V6(a) => and([pred("ip6"), eq(f("ip6.dst"), ip6(a))]),
        };
        let mut a = Vec::new();
        if fs {
            a.push(clone(vec![
                set_outport(crate::tables::mcast::MC_STATIC),
                dec_ttl(),
                next(),
            ]));
        }
        a.extend([set_outport(&g.name), dec_ttl(), next()]);
        out.add(
            r.dp,
            st,
            10500,
            m,
            a,
            r.owner(),
            format!("mcast-group {}", g.name),
            None,
        );
    }
    if !fs {
        out.add(
            r.dp,
            st,
            10450,
            mcast(),
            crate::lr::act::drop(),
            r.owner(),
            "mcast-unregistered",
            None,
        );
        return;
    }
    for p in &r.ports {
        for (m, d) in [(pred("igmp"), "igmp"), (mld(), "mld")] {
            out.add(
                r.dp,
                st,
                10550,
                and([eq(f("eth.src"), mac(p.mac)), m]),
                crate::lr::act::drop(),
                crate::flow::Owner::Port(p.name.clone()),
                format!("mcast-own-{d}"),
                Some(p.nb),
            );
        }
    }
    for (m, d) in [(pred("igmp"), "igmp-static"), (mld(), "mld-static")] {
        out.add(
            r.dp,
            st,
            10460,
            m,
            vec![clone(vec![
                set_outport(crate::tables::mcast::MC_STATIC),
                next(),
            ])],
            r.owner(),
            d,
            None,
        );
    }
    out.add(
        r.dp,
        st,
        10450,
        mcast(),
        vec![clone(vec![
            set_outport(crate::tables::mcast::MC_STATIC),
            dec_ttl(),
            next(),
        ])],
        r.owner(),
        "mcast-static",
        None,
    );
}

/// `lr_out_delivery` priority 110.
pub fn delivery(topo: &Topo<'_>, r: &Rtr, out: &mut Flows) {
    if !relay(topo, r) {
        return;
    }
    for p in &r.ports {
        out.add(
            r.dp,
            Stage::LrOutDelivery,
            110,
            and([mcast(), crate::build::outport(&p.name)]),
            vec![
                Action::assign(f("eth.src"), crate::lr::act::macv(p.mac)),
                output(),
            ],
            crate::flow::Owner::Port(p.name.clone()),
            "mcast-src",
            Some(p.nb),
        );
    }
}
