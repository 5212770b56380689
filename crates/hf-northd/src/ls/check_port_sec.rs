//! `ls_in_check_port_sec` and `ls_out_check_port_sec`: admission and port security.
//!
//! OVN 23.03 checks port security (MAC and IP, from SB `Port_Binding.port_security`) in the
//! controller through `check_in_port_sec()` / `check_out_port_sec()`; northd writes the calls
//! and the per-port exceptions: a disabled port's packets are marked to drop, logical VLANs
//! and multicast source MACs are dropped. External ports have no flows here.
//!
//! For chassis without `check-port-sec` (OVN before 22.06, holdfast `hf-1`) the same checks are
//! lowered to explicit flows in these two stages ([`lowered`]), with the meaning of the older
//! `port_sec_l2` / `port_sec_ip` / `port_sec_nd` tables: port security never disappears because
//! a chassis is old.

use hf_expr::actions::ResultFn;

use super::Sw;
use super::act::{next, result, set};
use crate::build::{always, bit, inport, pred};
use crate::diag::Diags;
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::PortKind;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    let ls = sw
        .topo
        .nb
        .logical_switch()
        .get(&sw.topo.datapaths[sw.dp].nb);
    let vlan_passthru = ls.is_some_and(|l| {
        l.other_config
            .get("vlan-passthru")
            .is_some_and(|v| v == "true")
    });
    if !vlan_passthru {
        sw.dflt(
            out,
            Stage::LsInCheckPortSec,
            100,
            "vlan",
            pred("vlan.present"),
            vec![hf_expr::Action::drop()],
        );
    }
    sw.dflt(
        out,
        Stage::LsInCheckPortSec,
        100,
        "mcast-src",
        bit(hf_expr::FieldRef::bits("eth.src", 40, 40)),
        vec![hf_expr::Action::drop()],
    );
    let native = sw.topo.features.contains("check-port-sec");
    let check_in = if native {
        vec![
            result(Reg::PortSecDrop.field(), ResultFn::CheckInPortSec),
            next(),
        ]
    } else {
        vec![next()]
    };
    sw.dflt(
        out,
        Stage::LsInCheckPortSec,
        50,
        "check",
        always(),
        check_in,
    );
    for p in sw.ports {
        let port = sw.port(*p);
        if matches!(&port.kind, PortKind::OtherLsp(t) if t == "external") {
            continue;
        }
        if !port.enabled {
            sw.for_port(
                out,
                Stage::LsInCheckPortSec,
                100,
                *p,
                "disabled",
                inport(&port.name),
                vec![set(Reg::PortSecDrop, 1), next()],
            );
            continue;
        }
        if matches!(&port.kind, PortKind::OtherLsp(t) if t == "vtep") {
            // From a VTEP (ramp) switch: straight to the hairpin stage (see `hairpin`).
            sw.for_port(
                out,
                Stage::LsInCheckPortSec,
                70,
                *p,
                "vtep",
                inport(&port.name),
                vec![
                    set(Reg::FromRamp, 1),
                    hf_expr::Action::next_table(
                        Some(hf_expr::actions::Pipeline::Ingress),
                        u32::from(Stage::LsInHairpin.table()),
                    ),
                ],
            );
            continue;
        }
        if let Some(q) = port.options.get("qdisc_queue_id") {
            diags.push(
                "Logical_Switch_Port",
                port.nb,
                &port.name,
                format!("options:qdisc_queue_id={q} (QoS queues) is not compiled; the port is not shaped"),
            );
        }
        if !native {
            lowered::port(sw, out, *p);
        }
    }
    // Egress: multicast is not checked; everything else is.
    sw.dflt(
        out,
        Stage::LsOutCheckPortSec,
        100,
        "mcast",
        pred("eth.mcast"),
        vec![set(Reg::PortSecDrop, 0), next()],
    );
    let check_out = if native {
        vec![
            result(Reg::PortSecDrop.field(), ResultFn::CheckOutPortSec),
            next(),
        ]
    } else {
        vec![set(Reg::PortSecDrop, 0), next()]
    };
    sw.dflt(
        out,
        Stage::LsOutCheckPortSec,
        0,
        "check",
        always(),
        check_out,
    );
}

/// Port security as explicit flows, for chassis without `check_in_port_sec()`.
///
/// Ingress, per port with port security, per entry `MAC [IP...]` (M = `inport == P && eth.src
/// == MAC`): 96 fails ND of M with a foreign source/target link-layer address (or target);
/// 95 allows IP from the entry's addresses (IPv4 and DHCP discovery; IPv6 from the link-local
/// and listed addresses, and DAD); 90 fails other IP of M when the entry lists IPs, allows
/// ARP with `arp.sha == MAC` (and `arp.spa` among the IPv4 addresses) and, without IPs, ND;
/// 85 fails other ARP/ND of M; 80 allows the rest of M; 70 fails anything else from P.
/// Egress likewise on `outport` and `eth.dst` (O): 95 allows IP to the entry's addresses,
/// broadcast and multicast, 90 fails other IP of O, 80 allows O, 70 fails the rest to P.
pub mod lowered {
    use std::net::Ipv6Addr;

    use hf_expr::ast::Expr;

    use super::super::Sw;
    use super::super::act::{next, set};
    use crate::addr::{LportAddresses, Mac};
    use crate::build::{
        and, eq, eq_num, f, in_set, inport, ip4, ip6, mac, net4, net6, not, or, outport, pred,
    };
    use crate::flow::Flows;
    use crate::regs::Reg;
    use crate::stage::Stage;
    use crate::topo::PortIdx;

    /// The link-layer addresses (and targets) an ND packet of entry `e` may carry.
    fn nd_lla_ok(e: &LportAddresses, m: Mac) -> Expr {
        let zero = Mac(0);
        let sll = or([eq(f("nd.sll"), mac(zero)), eq(f("nd.sll"), mac(m))]);
        let tll = or([eq(f("nd.tll"), mac(zero)), eq(f("nd.tll"), mac(m))]);
        let tll = if e.ipv6.is_empty() {
            tll
        } else {
            let mut targets = vec![m.ipv6_lla()];
            targets.extend(e.ipv6.iter().map(|n| n.addr()));
            and([tll, in_set(f("nd.target"), targets.into_iter().map(ip6))])
        };
        or([sll, tll])
    }

    /// The lowered flows of port `p`.
    pub fn port(sw: &Sw<'_, '_>, out: &mut Flows, p: PortIdx) {
        let port = sw.port(p);
        let raw = sw
            .topo
            .nb
            .logical_switch_port()
            .get(&port.nb)
            .map_or(0, |l| l.port_security.len());
        if raw == 0 {
            return;
        }
        let fail = || vec![set(Reg::PortSecDrop, 1), next()];
        let pass = || vec![next()];
        let pass_out = || vec![set(Reg::PortSecDrop, 0), next()];
        let ci = Stage::LsInCheckPortSec;
        let co = Stage::LsOutCheckPortSec;
        // Anything not allowed below fails (also when no entry parsed: fail closed).
        sw.for_port(out, ci, 70, p, "ps-default", inport(&port.name), fail());
        sw.for_port(out, co, 70, p, "ps-default", outport(&port.name), fail());
        for (i, e) in port.port_security.iter().enumerate() {
            let Some(m) = e.mac else { continue };
            let min = || vec![inport(&port.name), eq(f("eth.src"), mac(m))];
            let mout = || vec![outport(&port.name), eq(f("eth.dst"), mac(m))];
            let with = |mut base: Vec<Expr>, more: Vec<Expr>| {
                base.extend(more);
                and(base)
            };
            let has_ip = e.has_ip();
            let d = |tag: &str| format!("ps{i} {tag}");
            if !e.ipv4.is_empty() {
                let v4: Vec<_> = e.ipv4.iter().map(|n| ip4(n.addr())).collect();
                sw.for_port(
                    out,
                    ci,
                    95,
                    p,
                    d("ip4"),
                    with(min(), vec![in_set(f("ip4.src"), v4)]),
                    pass(),
                );
                sw.for_port(
                    out,
                    ci,
                    95,
                    p,
                    d("dhcp"),
                    with(
                        min(),
                        vec![
                            eq(f("ip4.src"), ip4(std::net::Ipv4Addr::UNSPECIFIED)),
                            eq(f("ip4.dst"), ip4(std::net::Ipv4Addr::BROADCAST)),
                            eq_num(f("udp.src"), 68),
                            eq_num(f("udp.dst"), 67),
                        ],
                    ),
                    pass(),
                );
                let mut dst: Vec<_> = e.ipv4.iter().map(|n| ip4(n.addr())).collect();
                dst.push(ip4(std::net::Ipv4Addr::BROADCAST));
                dst.push(net4("224.0.0.0/4".parse().expect("constant net")));
                sw.for_port(
                    out,
                    co,
                    95,
                    p,
                    d("ip4"),
                    with(mout(), vec![in_set(f("ip4.dst"), dst)]),
                    pass_out(),
                );
            }
            if !e.ipv6.is_empty() {
                let mut src = vec![ip6(m.ipv6_lla())];
                src.extend(e.ipv6.iter().map(|n| ip6(n.addr())));
                let srcs = in_set(f("ip6.src"), src);
                sw.for_port(out, ci, 95, p, d("ip6"), with(min(), vec![srcs]), pass());
                let dad = vec![
                    eq(f("ip6.src"), ip6(Ipv6Addr::UNSPECIFIED)),
                    eq(
                        f("ip6.dst"),
                        net6("ff02::/16".parse().expect("constant net")),
                    ),
                    in_set(f("icmp6.type"), [131u128, 135, 143].map(crate::build::num)),
                ];
                sw.for_port(out, ci, 95, p, d("dad"), with(min(), dad), pass());
                let mut dst = vec![ip6(m.ipv6_lla())];
                dst.extend(e.ipv6.iter().map(|n| ip6(n.addr())));
                dst.push(net6("ff00::/8".parse().expect("constant net")));
                sw.for_port(
                    out,
                    co,
                    95,
                    p,
                    d("ip6"),
                    with(mout(), vec![in_set(f("ip6.dst"), dst)]),
                    pass_out(),
                );
            }
            if has_ip {
                sw.for_port(
                    out,
                    ci,
                    90,
                    p,
                    d("ip"),
                    with(min(), vec![pred("ip")]),
                    fail(),
                );
                sw.for_port(
                    out,
                    co,
                    90,
                    p,
                    d("ip"),
                    with(mout(), vec![pred("ip")]),
                    fail(),
                );
            }
            let mut arp = vec![pred("arp"), eq(f("arp.sha"), mac(m))];
            if !e.ipv4.is_empty() {
                arp.push(in_set(f("arp.spa"), e.ipv4.iter().map(|n| ip4(n.addr()))));
            }
            sw.for_port(out, ci, 90, p, d("arp"), with(min(), arp), pass());
            if !has_ip {
                sw.for_port(
                    out,
                    ci,
                    90,
                    p,
                    d("nd"),
                    with(min(), vec![pred("nd")]),
                    pass(),
                );
            }
            // ND with a foreign link-layer address (or target) fails before any allow.
            sw.for_port(
                out,
                ci,
                96,
                p,
                d("nd-lla"),
                with(min(), vec![pred("nd"), not(nd_lla_ok(e, m))]),
                fail(),
            );
            sw.for_port(
                out,
                ci,
                85,
                p,
                d("arp-nd"),
                with(min(), vec![or([pred("arp"), pred("nd")])]),
                fail(),
            );
            sw.for_port(out, ci, 80, p, d("l2"), and(min()), pass());
            sw.for_port(out, co, 80, p, d("l2"), and(mout()), pass_out());
        }
    }
}
