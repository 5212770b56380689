//! `ls_in_arp_rsp`: the switch answers ARP requests and IPv6 neighbour solicitations for the
//! addresses of its ports (VIF `addresses`, and the router port's MAC and networks for ports of
//! type `router` with `addresses: router`), except to the port that owns the address, for
//! requests arriving from localnet ports, and for ports with `unknown` addresses (they answer
//! themselves). `options:arp_proxy` on router-type ports answers for the listed addresses with
//! the router port's MAC.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hf_expr::Action;
use hf_expr::actions::NestedKind;

use super::Sw;
use super::act::{loopback, next, output};
use crate::addr::Mac;
use crate::build::{always, and, eq, eq_num, f, in_set, inport, ip4, ip6, mac, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::stage::Stage;
use crate::topo::{PortIdx, PortKind};

/// One address entry of a port as northd uses it: a MAC and its IPs.
#[derive(Clone, Debug)]
pub struct Addrs {
    /// The MAC.
    pub mac: Mac,
    /// IPv4 addresses.
    pub v4: Vec<Ipv4Addr>,
    /// IPv6 addresses (a router port's include its link-local address).
    pub v6: Vec<Ipv6Addr>,
}

/// The addresses port `p` owns (OVN's `lsp_addrs`).
pub fn lsp_addrs(sw: &Sw<'_, '_>, p: PortIdx) -> Vec<Addrs> {
    let port = sw.port(p);
    let mut v: Vec<Addrs> = port
        .addresses
        .iter()
        .filter_map(|a| {
            Some(Addrs {
                mac: a.mac?,
                v4: a.ipv4.iter().map(|n| n.addr()).collect(),
                v6: a.ipv6.iter().map(|n| n.addr()).collect(),
            })
        })
        .collect();
    if port.router_addresses
        && let PortKind::SwitchRouter { lrp: Some(l) } = port.kind
    {
        let lrp = sw.port(l);
        if let Some(m) = lrp.mac {
            let mut a = Addrs {
                mac: m,
                v4: Vec::new(),
                v6: Vec::new(),
            };
            for n in &lrp.networks {
                match n.addr() {
                    IpAddr::V4(x) => a.v4.push(x),
                    IpAddr::V6(x) => a.v6.push(x),
                }
            }
            a.v6.push(m.ipv6_lla());
            v.push(a);
        }
    }
    v
}

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
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// `nd_ns && ip6.dst == {A, SN(A)} && nd.target == A`.
pub fn ns_for(a: Ipv6Addr) -> hf_expr::ast::Expr {
    and([
        pred("nd_ns"),
        in_set(f("ip6.dst"), [ip6(a), ip6(solicited(a))]),
        eq(f("nd.target"), ip6(a)),
    ])
}

/// `arp.tpa == A && arp.op == 1`.
pub fn arp_for(a: Ipv4Addr) -> hf_expr::ast::Expr {
    and([eq(f("arp.tpa"), ip4(a)), eq_num(f("arp.op"), 1)])
}

/// The ARP reply for `a` from `m`.
pub fn arp_reply(m: Mac, a: Ipv4Addr) -> Vec<Action> {
    vec![
        Action::move_field(f("eth.dst"), f("eth.src")),
        Action::assign(f("eth.src"), mac(m)),
        Action::assign(f("arp.op"), crate::build::num(2)),
        Action::move_field(f("arp.tha"), f("arp.sha")),
        Action::assign(f("arp.sha"), mac(m)),
        Action::move_field(f("arp.tpa"), f("arp.spa")),
        Action::assign(f("arp.spa"), ip4(a)),
        Action::move_field(f("outport"), f("inport")),
        loopback(),
        output(),
    ]
}

/// Writes the stage for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    sw.dflt(out, Stage::LsInArpRsp, 0, "default", always(), vec![next()]);
    svc_monitor_responders(sw, out);
    let vlan_passthru = sw
        .topo
        .nb
        .logical_switch()
        .get(&sw.topo.datapaths[sw.dp].nb)
        .is_some_and(|l| {
            l.other_config
                .get("vlan-passthru")
                .is_some_and(|v| v == "true")
        });
    for p in sw.ports {
        let port = sw.port(*p);
        match &port.kind {
            PortKind::Localnet => {
                sw.for_port(
                    out,
                    Stage::LsInArpRsp,
                    100,
                    *p,
                    "from-localnet",
                    inport(&port.name),
                    vec![next()],
                );
                continue;
            }
            PortKind::OtherLsp(t) if t == "virtual" => {
                virtual_port(sw, out, diags, *p);
                continue;
            }
            PortKind::OtherLsp(t) if t == "external" => continue,
            _ => {}
        }
        if port.unknown || vlan_passthru {
            continue;
        }
        let is_router = matches!(port.kind, PortKind::SwitchRouter { .. });
        let mut seen: BTreeSet<IpAddr> = BTreeSet::new();
        for a in lsp_addrs(sw, *p) {
            for ip in &a.v4 {
                if !seen.insert(IpAddr::V4(*ip)) {
                    continue;
                }
                sw.for_port(
                    out,
                    Stage::LsInArpRsp,
                    50,
                    *p,
                    format!("arp {ip}"),
                    arp_for(*ip),
                    arp_reply(a.mac, *ip),
                );
                sw.for_port(
                    out,
                    Stage::LsInArpRsp,
                    100,
                    *p,
                    format!("arp-own {ip}"),
                    and([arp_for(*ip), inport(&port.name)]),
                    vec![next()],
                );
            }
            for ip in &a.v6 {
                if !seen.insert(IpAddr::V6(*ip)) {
                    continue;
                }
                let kind = if is_router {
                    NestedKind::NdNaRouter
                } else {
                    NestedKind::NdNa
                };
                sw.for_port(
                    out,
                    Stage::LsInArpRsp,
                    50,
                    *p,
                    format!("nd {ip}"),
                    ns_for(*ip),
                    vec![Action::nested(
                        kind,
                        vec![
                            Action::assign(f("eth.src"), mac(a.mac)),
                            Action::assign(f("ip6.src"), ip6(*ip)),
                            Action::assign(f("nd.target"), ip6(*ip)),
                            Action::assign(f("nd.tll"), mac(a.mac)),
                            Action::move_field(f("outport"), f("inport")),
                            loopback(),
                            output(),
                        ],
                    )],
                );
                sw.for_port(
                    out,
                    Stage::LsInArpRsp,
                    100,
                    *p,
                    format!("nd-own {ip}"),
                    and([ns_for(*ip), inport(&port.name)]),
                    vec![next()],
                );
            }
        }
        if let PortKind::SwitchRouter { lrp: Some(l) } = port.kind
            && let Some(proxy) = port.options.get("arp_proxy")
            && let Some(rmac) = sw.port(l).mac
        {
            let ips: Vec<Ipv4Addr> = proxy
                .split([',', ' '])
                .filter_map(|w| crate::addr::parse_net(w.trim()))
                .filter_map(|n| match n.addr() {
                    IpAddr::V4(a) => Some(a),
                    IpAddr::V6(_) => None,
                })
                .collect();
            if !ips.is_empty() {
                sw.for_port(
                    out,
                    Stage::LsInArpRsp,
                    50,
                    *p,
                    "arp-proxy",
                    and([
                        eq_num(f("arp.op"), 1),
                        super::act::set_of("arp.tpa", ips.iter().map(|a| ip4(*a))),
                    ]),
                    vec![
                        Action::move_field(f("eth.dst"), f("eth.src")),
                        Action::assign(f("eth.src"), mac(rmac)),
                        Action::assign(f("arp.op"), crate::build::num(2)),
                        Action::move_field(f("arp.tha"), f("arp.sha")),
                        Action::assign(f("arp.sha"), mac(rmac)),
                        super::act::exchange("arp.tpa", "arp.spa"),
                        Action::move_field(f("outport"), f("inport")),
                        loopback(),
                        output(),
                    ],
                );
            }
        }
    }
}

/// Priority 110: the source IPs of the health checks' monitors whose ports are on `sw`
/// answer with `svc_monitor_mac` (ovn-northd's `build_lswitch_arp_nd_service_monitor`), so
/// backends can reply to probes.
fn svc_monitor_responders(sw: &Sw<'_, '_>, out: &mut Flows) {
    let plan = &sw.topo.svc;
    let Some(m) = Mac::parse(&plan.mac) else {
        return;
    };
    for (ip, r) in plan.responders_on(&sw.topo.datapaths[sw.dp].name) {
        let (disc, matches, actions) = match ip {
            IpAddr::V4(a) => (format!("svc-arp {a}"), arp_for(a), arp_reply(m, a)),
            IpAddr::V6(a) => (
                format!("svc-nd {a}"),
                and([pred("nd_ns"), eq(f("nd.target"), ip6(a))]),
                vec![Action::nested(
                    NestedKind::NdNa,
                    vec![
                        Action::move_field(f("eth.dst"), f("eth.src")),
                        Action::assign(f("eth.src"), mac(m)),
                        Action::assign(f("ip6.src"), ip6(a)),
                        Action::assign(f("nd.target"), ip6(a)),
                        Action::assign(f("nd.tll"), mac(m)),
                        Action::move_field(f("outport"), f("inport")),
                        loopback(),
                        output(),
                    ],
                )],
            ),
        };
        sw.owned(
            out,
            Stage::LsInArpRsp,
            110,
            crate::flow::Owner::LoadBalancer(r.lb_name.clone()),
            disc,
            Some(r.lb),
            matches,
            actions,
            None,
        );
    }
}

/// A `virtual` port: GARPs and ARP replies (or, for IPv6, solicitations and unsolicited
/// advertisements) for its `options:virtual-ip` from one of its `options:virtual-parents` on
/// the same switch bind it to that parent (`bind_vport`).
fn virtual_port(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags, p: PortIdx) {
    let port = sw.port(p);
    let (Some(vip), Some(parents)) = (
        port.options.get("virtual-ip"),
        port.options.get("virtual-parents"),
    ) else {
        return;
    };
    let Ok(vip) = vip.parse::<IpAddr>() else {
        diags.push(
            "Logical_Switch_Port",
            port.nb,
            &port.name,
            format!("options:virtual-ip {vip:?} is not an IP address; the port is never bound"),
        );
        return;
    };
    for parent in parents.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(pi) = sw.topo.port_by_name.get(parent).copied() else {
            continue;
        };
        let pp = sw.port(pi);
        if pp.dp != sw.dp {
            continue;
        }
        let m = match vip {
            IpAddr::V4(a) => and([
                inport(parent),
                crate::build::or([
                    and([
                        eq_num(f("arp.op"), 1),
                        eq(f("arp.spa"), ip4(a)),
                        eq(f("arp.tpa"), ip4(a)),
                    ]),
                    and([eq_num(f("arp.op"), 2), eq(f("arp.spa"), ip4(a))]),
                ]),
            ]),
            IpAddr::V6(a) => and([
                inport(parent),
                crate::build::or([ns_for(a), and([pred("nd_na"), eq(f("nd.target"), ip6(a))])]),
            ]),
        };
        sw.owned(
            out,
            Stage::LsInArpRsp,
            100,
            crate::flow::Owner::Port(port.name.clone()),
            format!("bind {parent}"),
            Some(pp.nb),
            m,
            vec![
                Action::BindVport {
                    vport: port.name.clone(),
                    parent: f("inport"),
                    span: hf_expr::Span::default(),
                },
                next(),
            ],
            None,
        );
    }
}
