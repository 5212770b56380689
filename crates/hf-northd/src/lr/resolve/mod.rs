//! After routing: `lr_in_arp_resolve` (the next hop's MAC when northd knows it: addresses of
//! ports on connected switches, other routers' ports there, router-to-router peers, NAT
//! external addresses on a distributed gateway port; otherwise `get_arp`/`get_nd` from
//! learnt bindings), `lr_in_gw_redirect` (traffic leaving by a distributed gateway port goes
//! to its `cr-` port, except distributed NAT traffic, which leaves from its own chassis) and
//! `lr_in_arp_request` (an unresolved next hop gets an ARP request or ND solicitation instead
//! of the packet). One function per stage.

use std::collections::BTreeSet;
use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::actions::NestedKind;

use crate::addr::Mac;
use crate::build::{always, and, eq, f, inport, ip6, num, or, outport, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    drop, ipv, macv, nested, next, nh_reg, output, set, set_of, set_outport, src_reg,
};
use crate::lr::ctx::{Rp, Rtr, resident};
use crate::lr::ip_input::{solicited, solicited_mac};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{PortKind, Topo};

mod arp_request;
mod arp_resolve;
mod gw_redirect;
pub use arp_request::arp_request;
pub use arp_resolve::{arp_resolve, arp_resolve_common, arp_resolve_port};
pub use gw_redirect::gw_redirect;

fn in_port_nets(p: &Rp, ip: IpAddr) -> bool {
    p.addr_for(ip).is_some()
}

/// Entries for another router's port `lrp` reachable through `p` (on the same switch, or a
/// router-to-router peer): every address of it, one flow per family, as OVN writes them.
fn other_router(
    out: &mut Flows,
    r: &Rtr,
    p: &Rp,
    lrp: &crate::topo::Port,
    hint: Option<uuid::Uuid>,
) {
    let Some(mac) = lrp.mac else { return };
    let v4: Vec<IpAddr> = lrp
        .networks
        .iter()
        .filter(|n| n.addr().is_ipv4())
        .map(|n| n.addr())
        .collect();
    let mut v6: Vec<IpAddr> = lrp
        .networks
        .iter()
        .filter(|n| n.addr().is_ipv6())
        .map(|n| n.addr())
        .collect();
    let lla = IpAddr::V6(mac.ipv6_lla());
    if !v6.contains(&lla) {
        v6.push(lla);
    }
    for (fam, addrs) in [(false, v4), (true, v6)] {
        if addrs.is_empty() {
            continue;
        }
        let rhs = if addrs.len() == 1 {
            eq(nh_reg(fam), ipv(addrs[0]))
        } else {
            crate::build::in_set(nh_reg(fam), addrs.iter().map(|a| ipv(*a)))
        };
        out.add(
            r.dp,
            Stage::LrInArpResolve,
            100,
            and([outport(&p.name), rhs]),
            vec![set("eth.dst", macv(mac)), next()],
            Owner::Port(lrp.name.clone()),
            format!("router-nh-{}-{}", p.name, if fam { "ip6" } else { "ip4" }),
            hint,
        );
    }
}
