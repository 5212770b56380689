//! The logical router pipelines: one module per stage or group of related stages
//! (ovn-northd(8) "Logical Router Datapaths"). [`build`] digests the router once
//! ([`ctx::Rtr`]) and runs every stage in table order.
//!
//! What is not built (yet): gateway MTU checks (`lr_in_chk_pkt_len`/`lr_in_larger_pkts` pass
//! everything), IPv6 router advertisements (`lr_in_nd_ra_*` pass everything), load balancer
//! affinity, ECMP symmetric replies, BFD, discard routes; `lb_force_snat_ip` with addresses,
//! `force_snat_for_dnat`. Rows asking for them get no diagnostic unless they are malformed.

pub mod act;
pub mod admission;
pub mod ctx;
pub mod defrag;
pub mod dnat;
pub mod egress;
pub mod ip_input;
pub mod learn_neighbor;
pub mod lookup_neighbor;
pub mod nat;
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
    let r = ctx::Rtr::new(topo, dp, diags);
    admission::build(topo, &r, out, diags);
    lookup_neighbor::build(topo, &r, out, diags);
    learn_neighbor::build(topo, &r, out, diags);
    ip_input::build(topo, &r, out, diags);
    unsnat::build(topo, &r, out, diags);
    defrag::build(topo, &r, out, diags);
    dnat::build(topo, &r, out, diags);
    routing::routing_pre(topo, &r, out, diags);
    routing::routing(topo, &r, out, diags);
    routing::routing_ecmp(topo, &r, out, diags);
    routing::policy(topo, &r, out, diags);
    routing::policy_ecmp(topo, &r, out, diags);
    resolve::arp_resolve(topo, &r, out, diags);
    resolve::gw_redirect(topo, &r, out, diags);
    resolve::arp_request(topo, &r, out, diags);
    egress::chk_dnat_local(topo, &r, out, diags);
    egress::undnat(topo, &r, out, diags);
    egress::post_undnat(topo, &r, out, diags);
    egress::snat(topo, &r, out, diags);
    egress::post_snat(topo, &r, out, diags);
    egress::egr_loop(topo, &r, out, diags);
    egress::delivery(topo, &r, out, diags);
    // Stages that pass everything on.
    for s in [
        Stage::LrInLbAffCheck,
        Stage::LrInLbAffLearn,
        Stage::LrInEcmpStateful,
        Stage::LrInNdRaOptions,
        Stage::LrInNdRaResponse,
        Stage::LrInChkPktLen,
        Stage::LrInLargerPkts,
    ] {
        out.add(
            dp,
            s,
            0,
            always(),
            vec![hf_expr::Action::next()],
            r.owner(),
            "default",
            None,
        );
    }
}

#[cfg(test)]
mod tests;
