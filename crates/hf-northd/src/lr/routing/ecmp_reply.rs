//! ECMP symmetric replies (`Logical_Router_Static_Route options:ecmp_symmetric_reply=true`,
//! gateway routers only, as in OVN 23.03): a connection that arrives over one next hop of an
//! ECMP route is answered over that same next hop. Per output port of such a route (once):
//!
//! - `lr_in_defrag` 100: packets from the port with a source in the route's prefix
//!   (`REGBIT_KNOWN_ECMP_NH = chk_ecmp_nh_mac(); ct_next;`) and packets the route sends
//!   (`chk_ecmp_nh()`) go through conntrack;
//! - `lr_in_ecmp_stateful` 100: a new TCP/UDP/SCTP connection from that side (or an
//!   established one whose next hop is not known) is committed with the sender's MAC and the
//!   port's tunnel key in the connection (`ct_label.ecmp_reply_eth`,
//!   `ct_mark.ecmp_reply_port`) and its next hop learned (`commit_ecmp_nh`);
//! - `lr_in_ip_routing` 10300: replies of those connections leave by the port they came in by;
//!   `lr_in_policy` 65535 lets them skip router policies; `lr_in_arp_resolve` 200 sends them
//!   to the MAC they came from.
//!
//! The route on a distributed router gets a diagnostic instead (ovn-northd ignores the option
//! there without a word).

use std::collections::BTreeSet;

use hf_expr::actions::{CtCommit, ResultFn};
use hf_expr::ast::{FieldRef, Subscript};

use super::*;
use crate::build::pred;

fn known() -> Expr {
    reg_eq(Reg::KnownEcmpNh, 1)
}

fn commit(key: u32, v6: bool, proto: &str) -> Vec<Action> {
    vec![
        Action::CtCommit {
            args: CtCommit::Block(vec![
                mv(f("ct_label.ecmp_reply_eth"), f("eth.src")),
                Action::assign(f("ct_mark.ecmp_reply_port"), num(u128::from(key))),
            ]),
            span: Default::default(),
        },
        Action::CommitEcmpNh {
            ipv6: v6,
            proto: proto.to_string(),
            span: Default::default(),
        },
        next(),
    ]
}

fn chk(mac: bool) -> Vec<Action> {
    vec![
        Action::Result {
            dst: Reg::KnownEcmpNh.field(),
            func: if mac {
                ResultFn::ChkEcmpNhMac
            } else {
                ResultFn::ChkEcmpNh
            },
            span: Default::default(),
        },
        Action::CtNext {
            span: Default::default(),
        },
    ]
}

/// The flows of every symmetric ECMP route of router `r`.
pub fn ecmp_reply(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    if !r.gw_router {
        return;
    }
    for g in r.routes.iter().filter(|g| g.hops.len() > 1) {
        let v6 = g.prefix.addr().is_ipv6();
        let route_match = super::ip_routing::route_match(r, g);
        let mut visited = BTreeSet::new();
        for h in g.hops.iter().filter(|h| h.symmetric) {
            if !visited.insert(h.port) {
                continue;
            }
            let p = &r.ports[h.port];
            let key = topo.ports[p.idx].tunnel_key;
            let o = || h.owner.clone();
            let base = and([
                inport(&p.name),
                eq(
                    f(&format!(
                        "{}.{}",
                        ipf(v6),
                        if g.src { "dst" } else { "src" }
                    )),
                    net(g.prefix),
                ),
            ]);
            let disc = |s: &str| format!("ecmp-reply-{}-{s}", p.name);
            out.add(
                r.dp,
                Stage::LrInDefrag,
                100,
                base.clone(),
                chk(true),
                o(),
                disc("in"),
                Some(h.uuid),
            );
            out.add(
                r.dp,
                Stage::LrInDefrag,
                100,
                route_match.clone(),
                chk(false),
                o(),
                disc("out"),
                Some(h.uuid),
            );
            for proto in ["tcp", "udp", "sctp"] {
                let new = and([
                    base.clone(),
                    and([pred("ct.new"), crate::build::not(pred("ct.est"))]),
                    pred(proto),
                ]);
                out.add(
                    r.dp,
                    Stage::LrInEcmpStateful,
                    100,
                    new,
                    commit(key, v6, proto),
                    o(),
                    disc(&format!("new-{proto}")),
                    Some(h.uuid),
                );
                let est = and([
                    base.clone(),
                    and([crate::build::not(pred("ct.rpl")), pred("ct.est")]),
                    pred(proto),
                    reg_eq(Reg::KnownEcmpNh, 0),
                ]);
                out.add(
                    r.dp,
                    Stage::LrInEcmpStateful,
                    100,
                    est,
                    commit(key, v6, proto),
                    o(),
                    disc(&format!("est-{proto}")),
                    Some(h.uuid),
                );
            }
            let reply = and([
                pred("ct.rpl"),
                known(),
                eq(f("ct_mark.ecmp_reply_port"), num(u128::from(key))),
            ]);
            out.add(
                r.dp,
                Stage::LrInIpRouting,
                10300,
                and([reply.clone(), route_match.clone()]),
                vec![
                    dec_ttl(),
                    loopback(),
                    set("eth.src", macv(p.mac)),
                    Action::assign(src_reg(v6), ipv(h.src)),
                    set_outport(&p.name),
                    next(),
                ],
                o(),
                disc("route"),
                Some(h.uuid),
            );
            out.add(
                r.dp,
                Stage::LrInPolicy,
                65535,
                reply.clone(),
                vec![next()],
                o(),
                disc("policy"),
                Some(h.uuid),
            );
            let full = FieldRef::new("xxreg1");
            out.add(
                r.dp,
                Stage::LrInArpResolve,
                200,
                reply,
                vec![
                    Action::Push {
                        field: full.clone(),
                        span: Default::default(),
                    },
                    mv(full.clone(), f("ct_label")),
                    mv(
                        f("eth.dst"),
                        FieldRef {
                            sub: Some(Subscript::Range(32, 79)),
                            ..FieldRef::new("xxreg1")
                        },
                    ),
                    Action::Pop {
                        field: full,
                        span: Default::default(),
                    },
                    next(),
                ],
                o(),
                disc("resolve"),
                Some(h.uuid),
            );
        }
    }
}
