//! The logical router pipelines (ovn-northd(8) "Logical Router Datapaths"): one module per
//! stage; stages that share helpers are child modules of one parent (`egress/undnat.rs`,
//! `routing/policy.rs`, `resolve/gw_redirect.rs`, ...). [`build`] digests the router once
//! ([`ctx::Rtr`]) and runs every stage in table order. [`routable`]: the routable NAT and
//! load balancer addresses of the other routers on a port's switch (routes, resolution).
//!
//! What is not built (yet): BFD, stateless NAT, `lb_force_snat_ip` on
//! distributed routers' SNAT side, NAT `gateway_port` beyond the first match, DHCPv6 prefix
//! delegation, multicast relay. Rows asking for them compile without those flows.

pub mod act;
pub mod admission;
pub mod ctx;
pub mod defrag;
pub mod dnat;
pub mod egress;
pub mod ip_input;
pub mod lb_aff;
pub mod learn_neighbor;
pub mod lookup_neighbor;
pub mod mcast;
pub mod mtu;
pub mod nat;
pub mod nd_ra;
pub mod resolve;
pub mod routable;
pub mod routing;
pub mod unsnat;

use crate::build::always;
use crate::diag::Diags;
use crate::flow::{DpIdx, Flows};
use crate::stage::Stage;
use crate::topo::Topo;

/// Whether router `dp` is disabled (`enabled=false`): ovn-northd gives it no pipeline at
/// all, and a datapath without flows drops every packet.
fn disabled(topo: &Topo<'_>, dp: DpIdx) -> bool {
    topo.nb
        .logical_router()
        .get(&topo.datapaths[dp].nb)
        .is_some_and(|l| l.enabled == Some(false))
}

/// Every flow of router `dp`.
pub fn build(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows, diags: &mut Diags) {
    build_with(topo, dp, out, diags, true);
}

/// Router `dp`'s flows but for its per-port sections (see [`build_sections`]): with those,
/// the same flows as [`build`].
pub fn build_core(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows, diags: &mut Diags) {
    build_with(topo, dp, out, diags, false);
}

/// The per-port sections of router `dp` (the `lr_in_arp_resolve` next hops of each router
/// port, see [`resolve::arp_resolve_port`]), of the ports `only` names (all when `None`),
/// each into its own flow list, by router port name. They depend on the router and on the
/// ports of the switch (or router) each port faces; [`build_core`]'s flows do not depend on
/// that switch's VIFs.
pub fn build_sections(
    topo: &Topo<'_>,
    dp: DpIdx,
    only: Option<&std::collections::BTreeSet<String>>,
) -> Vec<(String, Flows)> {
    if disabled(topo, dp) {
        return Vec::new();
    }
    // The router's diagnostics are the core's; these would repeat them.
    let mut quiet = Diags::default();
    let r = ctx::Rtr::new(topo, dp, &mut quiet);
    r.ports
        .iter()
        .filter(|p| only.is_none_or(|o| o.contains(&p.name)))
        .map(|p| {
            let mut out = Flows::default();
            resolve::arp_resolve_port(topo, &r, p, &mut out);
            (p.name.clone(), out)
        })
        .collect()
}

fn build_with(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows, diags: &mut Diags, sections: bool) {
    if disabled(topo, dp) {
        return;
    }
    let start = out.flows.len();
    let r = ctx::Rtr::new(topo, dp, diags);
    admission::build(topo, &r, out, diags);
    lookup_neighbor::build(topo, &r, out, diags);
    learn_neighbor::build(topo, &r, out, diags);
    ip_input::build(topo, &r, out, diags);
    mcast::ip_input(topo, &r, out);
    unsnat::build(topo, &r, out, diags);
    defrag::build(topo, &r, out, diags);
    lb_aff::check(topo, &r, out, diags);
    dnat::build(topo, &r, out, diags);
    lb_aff::learn(topo, &r, out, diags);
    nd_ra::build(topo, &r, out, diags);
    routing::routing_pre(topo, &r, out, diags);
    routing::routing(topo, &r, out, diags);
    mcast::routing(topo, &r, out);
    routing::routing_ecmp(topo, &r, out, diags);
    routing::ecmp_reply(topo, &r, out, diags);
    routing::policy(topo, &r, out, diags);
    routing::policy_ecmp(topo, &r, out, diags);
    if sections {
        resolve::arp_resolve(topo, &r, out, diags);
    } else {
        resolve::arp_resolve_common(topo, &r, out, diags);
    }
    mtu::chk_pkt_len(topo, &r, out, diags);
    mtu::larger_pkts(topo, &r, out, diags);
    resolve::gw_redirect(topo, &r, out, diags);
    resolve::arp_request(topo, &r, out, diags);
    egress::chk_dnat_local(topo, &r, out, diags);
    egress::undnat(topo, &r, out, diags);
    egress::post_undnat(topo, &r, out, diags);
    egress::snat(topo, &r, out, diags);
    egress::post_snat(topo, &r, out, diags);
    egress::egr_loop(topo, &r, out, diags);
    egress::delivery(topo, &r, out, diags);
    mcast::delivery(topo, &r, out);
    // The stage's default (ECMP symmetric replies add to it).
    out.add(
        dp,
        Stage::LrInEcmpStateful,
        0,
        always(),
        vec![hf_expr::Action::next()],
        r.owner(),
        "default",
        None,
    );
    crate::copp::apply(topo, dp, &mut out.flows[start..], diags);
}

#[cfg(test)]
mod tests;
