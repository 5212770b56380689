//! `lr_in_ip_input`: what the router itself answers or refuses. Martian and broadcast
//! sources, multicast and TTL-expired packets are dropped (with ICMP time exceeded for TTL
//! 0/1 unicast, sourced from the ingress port); ICMP/ICMPv6 echo to router addresses is
//! answered; ARP and ND for router addresses, NAT external addresses and router LB VIPs are
//! answered (on the gateway chassis only, for a distributed gateway port; on the logical
//! port's chassis for distributed NAT); other IP traffic to router addresses is dropped
//! (as 23.03 does without `options:...` reject settings). DHCPv6 replies to the router go to
//! `handle_dhcpv6_reply`.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use hf_expr::Action;
use hf_expr::actions::NestedKind;
use hf_expr::ast::{Expr, Value};

use crate::addr::Mac;
use crate::build::{
    always, and, bit, eq, f, in_set, inport, ip4, ip6, net4, net6, not, num, or, pred,
};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::lr::act::{
    drop, eqn, ipv, loopback, macv, mv, nested, next, output, set, set_of, set_outport, swap,
};
use crate::lr::ctx::{Rtr, resident};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{PortKind, Topo};

const ST: Stage = Stage::LrInIpInput;

/// The solicited-node multicast address of `a`.
pub fn solicited(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        (u16::from(o[14]) << 8) | u16::from(o[15]),
    )
}

/// Its MAC (`33:33:ff:xx:xx:xx`).
pub fn solicited_mac(a: Ipv6Addr) -> Mac {
    let o = a.octets();
    Mac(0x3333_ff00_0000 | (u64::from(o[13]) << 16) | (u64::from(o[14]) << 8) | u64::from(o[15]))
}

fn ttl01() -> Expr {
    in_set(f("ip.ttl"), [num(0), num(1)])
}

/// The ARP reply actions, from `mac` (a field value: `xreg0[0..47]`) or a fixed MAC.
pub fn arp_reply(m: Option<Mac>) -> Vec<Action> {
    let src = |dst: &str| match m {
        Some(m) => set(dst, macv(m)),
        None => mv(f(dst), Reg::InportEthAddr.field()),
    };
    vec![
        mv(f("eth.dst"), f("eth.src")),
        src("eth.src"),
        set("arp.op", num(2)),
        mv(f("arp.tha"), f("arp.sha")),
        src("arp.sha"),
        swap("arp.tpa", "arp.spa"),
        mv(f("outport"), f("inport")),
        loopback(),
        output(),
    ]
}

fn nd_reply(kind: NestedKind) -> Vec<Action> {
    vec![nested(
        kind,
        vec![
            mv(f("eth.src"), Reg::InportEthAddr.field()),
            mv(f("ip6.src"), f("nd.target")),
            mv(f("nd.tll"), Reg::InportEthAddr.field()),
            mv(f("outport"), f("inport")),
            loopback(),
            output(),
        ],
    )]
}

fn nd_ns_for(a: Ipv6Addr) -> Expr {
    and([
        set_of("ip6.dst", vec![ip6(a), ip6(solicited(a))]),
        pred("nd_ns"),
        eq(f("nd.target"), ip6(a)),
    ])
}

/// Builds the stage.
pub fn build(topo: &Topo<'_>, r: &Rtr, out: &mut Flows, _diags: &mut Diags) {
    crate::lr::mtu::distributed_nat_too_big(topo, r, out);
    let o = r.owner();
    let dp = r.dp;
    let mut add = |prio: u16, m: Expr, a: Vec<Action>, disc: &str| {
        out.add(dp, ST, prio, m, a, o.clone(), disc, None)
    };
    add(0, always(), vec![next()], "default");
    add(30, ttl01(), drop(), "ttl-drop");
    add(
        32,
        and([
            ttl01(),
            not(pred("ip.later_frag")),
            or([pred("ip4.mcast"), pred("ip6.mcast")]),
        ]),
        drop(),
        "ttl-mcast",
    );
    add(50, pred("eth.bcast"), drop(), "eth-bcast");
    // Multicast goes on to routing when the router relays it ([`crate::lr::mcast`]).
    let relay = crate::lr::mcast::relay(topo, r);
    add(
        82,
        or([pred("ip4.mcast"), pred("ip6.mcast")]),
        if relay { vec![next()] } else { drop() },
        "mcast",
    );
    add(83, pred("ip6.mcast_rsvd"), drop(), "mcast-rsvd");
    add(
        84,
        or([pred("nd_rs"), pred("nd_ra")]),
        vec![next()],
        "rs-ra",
    );
    add(85, or([pred("arp"), pred("nd")]), drop(), "arp-nd");
    add(
        100,
        or([
            pred("ip4.src_mcast"),
            eq(f("ip4.src"), ip4([255, 255, 255, 255].into())),
            eq(f("ip4.src"), net4("127.0.0.0/8".parse().expect("constant"))),
            eq(f("ip4.dst"), net4("127.0.0.0/8".parse().expect("constant"))),
            eq(f("ip4.src"), net4("0.0.0.0/8".parse().expect("constant"))),
            eq(f("ip4.dst"), net4("0.0.0.0/8".parse().expect("constant"))),
        ]),
        drop(),
        "martian",
    );

    // External IPs of NAT (SNAT ones are handled by unSNAT instead of being dropped).
    let snat_ips: BTreeSet<IpAddr> = r
        .nats
        .iter()
        .filter(|n| n.kind.snat())
        .map(|n| n.external)
        .collect();

    for p in &r.ports {
        // ARP replies for a router address come only from the gateway chassis when the port
        // faces a physical network (its switch has a localnet port), as 23.03 decides: for
        // the DGP itself, or with `options:reside-on-redirect-chassis` and a single DGP.
        let n_dgps = r.ports.iter().filter(|q| q.cr.is_some()).count();
        let faces_localnet = p.peer_switch.is_some_and(|s| {
            topo.datapaths[s]
                .ports
                .iter()
                .any(|q| topo.ports[*q].kind == PortKind::Localnet)
        });
        let arp_res = if n_dgps == 0 || !faces_localnet {
            None
        } else if p.cr.is_some() {
            p.resident()
        } else if n_dgps == 1
            && topo.ports[p.idx]
                .options
                .get("reside-on-redirect-chassis")
                .is_some_and(|v| v == "true")
        {
            r.dgp.and_then(|d| r.ports[d].resident())
        } else {
            None
        };
        if let Some(mtu) = crate::lr::mtu::gateway_mtu(topo, p) {
            crate::lr::mtu::too_big(r, p, None, mtu, ST, out);
        }
        let own = Owner::Port(p.name.clone());
        let hint = Some(p.nb);
        let mut add = |prio: u16, m: Expr, a: Vec<Action>, disc: String| {
            out.add(dp, ST, prio, m, a, own.clone(), disc, hint)
        };
        // BFD to the port's next hops (`build_lrouter_bfd_flows`): the chassis answers what
        // comes to the port's addresses, what it sends itself goes on.
        if p.has_bfd {
            let fams = [
                (
                    "ip4",
                    p.v4.iter().map(|n| ip4(n.addr())).collect::<Vec<_>>(),
                ),
                (
                    "ip6",
                    p.v6.iter().map(|n| ip6(n.addr())).collect::<Vec<_>>(),
                ),
            ];
            for (fam, own) in fams.into_iter().filter(|(_, own)| !own.is_empty()) {
                // One address bare, several as a set (`op_put_v4_networks`).
                let on = |dir: &str| {
                    and([
                        crate::build::in_set(f(&format!("{fam}.{dir}")), own.clone()),
                        eq(f("udp.dst"), num(3784)),
                    ])
                };
                add(110, on("src"), vec![next()], format!("bfd-{fam}-src"));
                let punt = vec![Action::HandleBfdMsg {
                    span: hf_expr::Span::default(),
                }];
                add(110, on("dst"), punt, format!("bfd-{fam}-dst"));
            }
        }
        if !p.v4.is_empty() {
            let mut v: Vec<Value> = Vec::new();
            for n in &p.v4 {
                v.push(ip4(n.addr()));
                if n.prefix_len() < 31 {
                    v.push(ip4(n.broadcast()));
                }
            }
            add(
                100,
                and([
                    set_of("ip4.src", v),
                    eq(Reg::EgressLoopback.field(), num(0)),
                ]),
                drop(),
                "spoofed-src".into(),
            );
            let local: Vec<Value> =
                p.v4.iter()
                    .filter(|n| !snat_ips.contains(&IpAddr::V4(n.addr())))
                    .map(|n| ip4(n.addr()))
                    .collect();
            if !local.is_empty() && !r.force_snat_router_ip {
                add(60, set_of("ip4.dst", local), drop(), "to-router-ip4".into());
            }
            // TTL exceeded.
            let n = p.v4[0];
            let mut body = vec![
                swap("eth.dst", "eth.src"),
                set("icmp4.type", num(11)),
                set("icmp4.code", num(0)),
            ];
            if p.cr.is_some() {
                body.push(swap("ip4.dst", "ip4.src"));
            } else {
                body.push(mv(f("ip4.dst"), f("ip4.src")));
                body.push(set("ip4.src", ip4(n.addr())));
            }
            body.extend([
                set("ip.ttl", num(254)),
                set_outport(&p.name),
                loopback(),
                output(),
            ]);
            add(
                31,
                and([
                    inport(&p.name),
                    pred("ip4"),
                    ttl01(),
                    not(pred("ip.later_frag")),
                ]),
                vec![nested(NestedKind::Icmp4, body)],
                "ttl-exceeded-ip4".into(),
            );
        }
        for n in &p.v4 {
            add(
                90,
                and([
                    eq(f("ip4.dst"), ip4(n.addr())),
                    eqn("icmp4.type", 8),
                    eqn("icmp4.code", 0),
                ]),
                vec![
                    swap("ip4.dst", "ip4.src"),
                    set("ip.ttl", num(255)),
                    set("icmp4.type", num(0)),
                    loopback(),
                    next(),
                ],
                format!("echo-{}", n.addr()),
            );
            let mut m = vec![
                inport(&p.name),
                eqn("arp.op", 1),
                eq(f("arp.tpa"), ip4(n.addr())),
                eq(f("arp.spa"), net4(n.trunc())),
            ];
            m.extend(arp_res.clone());
            add(90, and(m), arp_reply(None), format!("arp-{}", n.addr()));
        }
        if !p.v6.is_empty() {
            let all: Vec<Value> = p.v6.iter().map(|n| ip6(n.addr())).collect();
            if !r.force_snat_router_ip {
                add(
                    60,
                    set_of("ip6.dst", all.clone()),
                    drop(),
                    "to-router-ip6".into(),
                );
            }
            let dst = if all.len() == 1 {
                eq(f("ip6.dst"), all[0].clone())
            } else {
                set_of("ip6.dst", all)
            };
            add(
                90,
                and([dst, eqn("icmp6.type", 128), eqn("icmp6.code", 0)]),
                vec![
                    swap("ip6.dst", "ip6.src"),
                    set("ip.ttl", num(255)),
                    set("icmp6.type", num(129)),
                    loopback(),
                    next(),
                ],
                "echo-ip6".into(),
            );
            for n in &p.v6 {
                let a = n.addr();
                let mut m = vec![inport(&p.name), nd_ns_for(a)];
                m.extend(p.resident());
                add(
                    90,
                    and(m),
                    nd_reply(NestedKind::NdNaRouter),
                    format!("nd-{a}"),
                );
                add(
                    100,
                    and([
                        eq(f("ip6.dst"), ip6(a)),
                        eqn("udp.src", 547),
                        eqn("udp.dst", 546),
                    ]),
                    vec![
                        Action::assign(Reg::NextHopIpv4.field(), num(0)),
                        Action::HandleDhcpv6Reply {
                            span: Default::default(),
                        },
                    ],
                    format!("dhcpv6-{a}"),
                );
            }
            for n in p.v6_global() {
                let mut body = vec![swap("eth.dst", "eth.src")];
                if p.cr.is_some() {
                    body.push(swap("ip6.dst", "ip6.src"));
                } else {
                    body.push(mv(f("ip6.dst"), f("ip6.src")));
                    body.push(set("ip6.src", ip6(n.addr())));
                }
                body.extend([
                    set("ip.ttl", num(254)),
                    set("icmp6.type", num(3)),
                    set("icmp6.code", num(0)),
                    set_outport(&p.name),
                    loopback(),
                    output(),
                ]);
                add(
                    31,
                    and([
                        inport(&p.name),
                        pred("ip6"),
                        eq(f("ip6.src"), net6(n.trunc())),
                        ttl01(),
                        not(pred("ip.later_frag")),
                    ]),
                    vec![nested(NestedKind::Icmp6, body)],
                    format!("ttl-exceeded-{}", n.trunc()),
                );
            }
        }
        // A distributed router without gateway answers TCP/UDP/SCTP to its addresses.
        if !r.gw_router && r.dgp.is_none() {
            let v4 = p.v4.iter().map(|n| IpAddr::V4(n.addr()));
            let v6 = p.v6.iter().map(|n| IpAddr::V6(n.addr()));
            for a in v4.chain(v6) {
                let (fam, kind) = if a.is_ipv6() {
                    ("ip6", NestedKind::Icmp6)
                } else {
                    ("ip4", NestedKind::Icmp4)
                };
                let base = || {
                    vec![
                        pred(fam),
                        eq(f(&format!("{fam}.dst")), ipv(a)),
                        not(pred("ip.later_frag")),
                    ]
                };
                let swaps = || {
                    vec![
                        swap("eth.dst", "eth.src"),
                        swap(&format!("{fam}.dst"), &format!("{fam}.src")),
                    ]
                };
                let icmp = |code: u128| {
                    let mut b = swaps();
                    b.push(set("ip.ttl", num(255)));
                    if a.is_ipv6() {
                        b.extend([set("icmp6.type", num(1)), set("icmp6.code", num(code))]);
                    } else {
                        b.extend([set("icmp4.type", num(3)), set("icmp4.code", num(code))]);
                    }
                    b.push(next());
                    vec![nested(kind, b)]
                };
                let (udp_code, other_code) = if a.is_ipv6() { (4, 3) } else { (3, 2) };
                let mut m = base();
                m.push(pred("udp"));
                add(80, and(m), icmp(udp_code), format!("unreach-udp-{a}"));
                for (proto, k) in [
                    ("tcp", NestedKind::TcpReset),
                    ("sctp", NestedKind::SctpAbort),
                ] {
                    let mut m = base();
                    m.push(pred(proto));
                    let mut b = swaps();
                    b.push(next());
                    add(
                        80,
                        and(m),
                        vec![nested(k, b)],
                        format!("unreach-{proto}-{a}"),
                    );
                }
                add(70, and(base()), icmp(other_code), format!("unreach-{a}"));
            }
        }
        // Router LB VIPs answer ARP/ND on every port, through the SB address sets
        // `_rtr_lb_<key>_ip4/_ip6` (which the tables stage writes with the same VIPs).
        if !r.lb_reachable.0.is_empty() {
            let set = crate::build::addr_set(&format!("_rtr_lb_{}_ip4", r.tunnel_key));
            let mut m = vec![inport(&p.name), eqn("arp.op", 1), eq(f("arp.tpa"), set)];
            m.extend(p.resident());
            out.add(
                dp,
                ST,
                90,
                and(m),
                arp_reply(None),
                own.clone(),
                "arp-lb-vips",
                None,
            );
        }
        if !r.lb_reachable.1.is_empty() {
            let set = crate::build::addr_set(&format!("_rtr_lb_{}_ip6", r.tunnel_key));
            let mut m = vec![inport(&p.name), pred("nd_ns"), eq(f("nd.target"), set)];
            m.extend(p.resident());
            out.add(
                dp,
                ST,
                90,
                and(m),
                nd_reply(NestedKind::NdNa),
                own.clone(),
                "nd-lb-vips",
                None,
            );
        }
    }

    // NAT external addresses.
    let mut seen = BTreeSet::new();
    for n in &r.nats {
        if !seen.insert(n.external) {
            continue;
        }
        let own = n.owner.clone();
        let hint = Some(n.uuid);
        let mut add = |prio: u16, m: Expr, a: Vec<Action>, disc: &str| {
            out.add(dp, ST, prio, m, a, own.clone(), disc, hint)
        };
        let (req, reply_kind) = match n.external {
            IpAddr::V4(a) => (and([eqn("arp.op", 1), eq(f("arp.tpa"), ip4(a))]), None),
            IpAddr::V6(a) => (nd_ns_for(a), Some(NestedKind::NdNa)),
        };
        let reply = |m: Option<Mac>| match reply_kind {
            None => arp_reply(m),
            Some(k) => nd_reply(k),
        };
        add(90, req.clone(), reply(None), "arp-nat");
        if let Some(d) = n.dgp {
            let p = &r.ports[d];
            add(
                91,
                and([inport(&p.name), req.clone()]),
                drop(),
                "arp-nat-not-here",
            );
            let (res, m) = match &n.distributed {
                Some((lp, m)) => (resident(lp), Some(*m)),
                None => (p.resident().unwrap_or(Expr::Bool(true)), None),
            };
            add(
                92,
                and([inport(&p.name), req, res]),
                reply(m),
                "arp-nat-here",
            );
            if n.kind == crate::lr::ctx::NatKind::Snat
                && let IpAddr::V4(a) = n.external
            {
                add(
                    120,
                    and([inport(&p.name), eq(f("ip4.src"), ip4(a))]),
                    vec![next()],
                    "snat-src",
                );
            }
        }
    }
    let _ = bit;
}
