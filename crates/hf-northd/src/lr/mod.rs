//! The logical router pipelines (ovn-northd(8) "Logical Router Datapaths"): one module per
//! stage; stages that share helpers are child modules of one parent (`egress/undnat.rs`,
//! `routing/policy.rs`, `resolve/gw_redirect.rs`, ...). [`build`] digests the router once
//! ([`ctx::Rtr`]) and runs every stage in table order.
//!
//! What is not built (yet): ECMP
//! symmetric replies (`lr_in_ecmp_stateful`), BFD, stateless NAT, `lb_force_snat_ip` on
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
pub mod mtu;
pub mod nat;
pub mod nd_ra;
pub mod resolve;
pub mod routing;
pub mod unsnat;

use crate::build::always;
use crate::diag::Diags;
use crate::flow::{DpIdx, Flows};
use crate::stage::Stage;
use crate::topo::Topo;

/// Every flow of router `dp`.
pub fn build(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows, diags: &mut Diags) {
    // A disabled router (`enabled=false`) forwards nothing: ovn-northd gives it no pipeline
    // at all, and a datapath without flows drops every packet.
    if topo
        .nb
        .logical_router()
        .get(&topo.datapaths[dp].nb)
        .is_some_and(|l| l.enabled == Some(false))
    {
        return;
    }
    let r = ctx::Rtr::new(topo, dp, diags);
    admission::build(topo, &r, out, diags);
    lookup_neighbor::build(topo, &r, out, diags);
    learn_neighbor::build(topo, &r, out, diags);
    ip_input::build(topo, &r, out, diags);
    unsnat::build(topo, &r, out, diags);
    defrag::build(topo, &r, out, diags);
    lb_aff::check(topo, &r, out, diags);
    dnat::build(topo, &r, out, diags);
    lb_aff::learn(topo, &r, out, diags);
    nd_ra::build(topo, &r, out, diags);
    routing::routing_pre(topo, &r, out, diags);
    routing::routing(topo, &r, out, diags);
    routing::routing_ecmp(topo, &r, out, diags);
    routing::policy(topo, &r, out, diags);
    routing::policy_ecmp(topo, &r, out, diags);
    resolve::arp_resolve(topo, &r, out, diags);
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
    // ECMP symmetric replies are not built: the stage passes everything on.
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
}

#[cfg(test)]
mod tests;
