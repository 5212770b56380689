//! Routing stages: `lr_in_ip_routing_pre` (route table of the ingress port into
//! `REG_ROUTE_TABLE_ID`), `lr_in_ip_routing` (connected networks and static routes, longest
//! prefix first with OVN 23.03's priorities: `plen * 3 + 2` connected, `plen * 3 + 1` static
//! destination routes, `plen * 3` source routes), `lr_in_ip_routing_ecmp` (one flow per member
//! of an ECMP group chosen with `select`), `lr_in_policy` and `lr_in_policy_ecmp` (router
//! policies: allow, drop, reroute to one or several next hops). One function per stage, and
//! [`ecmp_reply`] for ECMP symmetric replies (flows in several stages).

use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::ast::Expr;
use ipnet::IpNet;

use crate::build::{always, and, eq, f, inport, net, num};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    dec_ttl, drop, ipf, ipv, loopback, macv, mv, next, nh_reg, reg_eq, set, set_outport, set_reg,
    src_reg,
};
use crate::lr::ctx::{Rp, Rtr};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::Topo;

mod ecmp_reply;
mod ip_routing;
mod policy;
mod policy_ecmp;
mod routing_ecmp;
mod routing_pre;
pub use ecmp_reply::ecmp_reply;
pub use ip_routing::routing;
pub use policy::policy;
pub use policy_ecmp::policy_ecmp;
pub use routing_ecmp::routing_ecmp;
pub use routing_pre::routing_pre;

/// OVN 23.03's route priority for a prefix of `plen` bits.
pub fn route_priority(plen: u8, src: bool, connected: bool) -> u16 {
    let ofs = if src {
        0
    } else if connected {
        2
    } else {
        1
    };
    u16::from(plen) * 3 + ofs
}

fn select(n: usize) -> Action {
    Action::Select {
        dst: Reg::EcmpMemberId.field(),
        choices: (1..=n).map(|i| (i as u16, None)).collect(),
        span: Default::default(),
    }
}

/// `reg0 = NH; reg1 = SRC; eth.src = MAC; outport = P;` (next hop `None`: the destination).
fn hop_actions(p: &Rp, v6: bool, nh: Option<IpAddr>, src: IpAddr) -> Vec<Action> {
    let nh = match nh {
        Some(a) => Action::assign(nh_reg(v6), ipv(a)),
        None => mv(nh_reg(v6), f(&format!("{}.dst", ipf(v6)))),
    };
    vec![
        nh,
        Action::assign(src_reg(v6), ipv(src)),
        set("eth.src", macv(p.mac)),
        set_outport(&p.name),
    ]
}
