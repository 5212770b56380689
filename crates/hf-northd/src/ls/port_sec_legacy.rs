//! Port security for chassis without `check_in_port_sec()`/`check_out_port_sec()` (feature
//! `check-port-sec`, OVN 22.06): the explicit per-port match flows OVN 20.06 wrote
//! (`ls_in_port_sec_l2`/`_ip`/`_nd`, `ls_out_port_sec_ip`/`_l2`), folded into the 23.03
//! check stages by priority. They set the same flag (`Reg::PortSecDrop`) the apply stages
//! drop on, so the rest of the pipeline is unchanged.
//!
//! Per port with `port_security` (ingress, `ls_in_check_port_sec`):
//! - 98: ARP with `eth.src` and `arp.sha` the entry's MAC (and `arp.spa` its IPv4 addresses,
//!   when it has some); ND with `nd.sll`/`nd.tll` zero or the MAC (and `nd.target` its IPv6
//!   addresses and source its addresses, link-local or `::`): pass.
//! - 97: any other ARP or ND from the port: drop.
//! - 96: IPv4 from the MAC with a source among its addresses, or a DHCP discover from
//!   0.0.0.0; IPv6 from the MAC with a source among its addresses or its link-local address,
//!   or DAD/MLD from `::` to `ff02::/16`: pass.
//! - 95: other IP from a MAC of an entry with addresses: drop.
//! - 92: anything from one of the MACs: pass. 91: anything else from the port: drop.
//!
//! Egress (`ls_out_check_port_sec`), per port with `port_security`: 96 IPv4/IPv6 to the MAC
//! with a destination among its addresses (plus broadcast, multicast, the subnet broadcast,
//! link-local, `ff00::/8`): pass; 95 other IP to the MAC: drop; 92 anything to one of the
//! MACs: pass; 91 anything else to the port: drop. Multicast keeps the 23.03 flow (100).
//!
//! An address with host bits set (`10.0.0.5/24`) allows that address only; with a zero host
//! part (`10.0.0.0/24`) the whole subnet, as OVN 20.06 did.

use std::net::{Ipv4Addr, Ipv6Addr};

use hf_expr::ast::Value;
use ipnet::{Ipv4Net, Ipv6Net};

use super::Sw;
use super::act::{next, set};
use crate::addr::{LportAddresses, Mac};
use crate::build::{
    always, and, eq, eq_num, f, in_set, inport, ip4, ip6, mac, net4, net6, or, outport, pred,
};
use crate::flow::Flows;
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{PortIdx, PortKind};

fn pass() -> Vec<hf_expr::Action> {
    vec![set(Reg::PortSecDrop, 0), next()]
}

fn deny() -> Vec<hf_expr::Action> {
    vec![set(Reg::PortSecDrop, 1), next()]
}

/// IPv4 addresses of an entry as 20.06 matched them (egress adds each subnet's broadcast).
fn v4_values(nets: &[Ipv4Net], egress: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for n in nets {
        let host = u32::from(n.addr()) & !u32::from(n.netmask());
        if n.prefix_len() == 32 || host != 0 {
            out.push(ip4(n.addr()));
            if egress && n.prefix_len() < 31 {
                out.push(ip4(n.broadcast()));
            }
        } else {
            out.push(net4(*n));
        }
    }
    out
}

fn v6_values(nets: &[Ipv6Net]) -> Vec<Value> {
    nets.iter()
        .map(|n| {
            let host = u128::from(n.addr()) & !u128::from(n.netmask());
            if n.prefix_len() == 128 || host != 0 {
                ip6(n.addr())
            } else {
                net6(*n)
            }
        })
        .collect()
}

fn macs_of(ps: &[LportAddresses]) -> Vec<Value> {
    ps.iter().filter_map(|e| e.mac).map(mac).collect()
}

/// Ports of `sw` whose port security is checked: enabled, not external, with entries.
fn secured(sw: &Sw<'_, '_>) -> Vec<PortIdx> {
    sw.ports
        .iter()
        .copied()
        .filter(|p| {
            let port = sw.port(*p);
            port.enabled
                && !port.port_security.is_empty()
                && !matches!(&port.kind, PortKind::OtherLsp(t) if t == "external")
        })
        .collect()
}

fn zero_mac() -> Value {
    mac(Mac(0))
}

/// The ingress flows (replacing the `check_in_port_sec()` flow, same identity).
pub fn ingress(sw: &Sw<'_, '_>, out: &mut Flows) {
    let st = Stage::LsInCheckPortSec;
    sw.dflt(out, st, 50, "check", always(), pass());
    for p in secured(sw) {
        let port = sw.port(p);
        let name = port.name.as_str();
        for (i, e) in port.port_security.iter().enumerate() {
            let Some(m) = e.mac else { continue };
            let from = || and([inport(name), eq(f("eth.src"), mac(m))]);
            // ARP.
            let mut arp = vec![from(), pred("arp"), eq(f("arp.sha"), mac(m))];
            if !e.ipv4.is_empty() {
                arp.push(in_set(f("arp.spa"), v4_values(&e.ipv4, false)));
            }
            sw.for_port(out, st, 98, p, format!("ps-arp-{i}"), and(arp), pass());
            // ND.
            let lla = m.ipv6_lla();
            let sll = or([eq(f("nd.sll"), zero_mac()), eq(f("nd.sll"), mac(m))]);
            let mut tll = vec![or([eq(f("nd.tll"), zero_mac()), eq(f("nd.tll"), mac(m))])];
            let mut nd = vec![from(), pred("ip6"), pred("nd")];
            if !e.ipv6.is_empty() {
                let mut targets = vec![ip6(lla)];
                targets.extend(v6_values(&e.ipv6));
                tll.push(in_set(f("nd.target"), targets.clone()));
                targets.push(ip6(Ipv6Addr::UNSPECIFIED));
                nd.push(in_set(f("ip6.src"), targets));
            }
            nd.push(or([
                and([pred("nd_ns"), sll]),
                and([pred("nd_na"), and(tll)]),
            ]));
            sw.for_port(out, st, 98, p, format!("ps-nd-{i}"), and(nd), pass());
            // IP.
            if !e.ipv4.is_empty() {
                let m4 = and([
                    from(),
                    pred("ip4"),
                    in_set(f("ip4.src"), v4_values(&e.ipv4, false)),
                ]);
                sw.for_port(out, st, 96, p, format!("ps-ip4-{i}"), m4, pass());
                let dhcp = and([
                    from(),
                    eq(f("ip4.src"), ip4(Ipv4Addr::UNSPECIFIED)),
                    eq(f("ip4.dst"), ip4(Ipv4Addr::BROADCAST)),
                    eq_num(f("udp.src"), 68),
                    eq_num(f("udp.dst"), 67),
                ]);
                sw.for_port(out, st, 96, p, format!("ps-dhcp-{i}"), dhcp, pass());
            }
            if !e.ipv6.is_empty() {
                let mut srcs = vec![ip6(lla)];
                srcs.extend(v6_values(&e.ipv6));
                let m6 = and([from(), pred("ip6"), in_set(f("ip6.src"), srcs)]);
                sw.for_port(out, st, 96, p, format!("ps-ip6-{i}"), m6, pass());
                let dad = and([
                    from(),
                    eq(f("ip6.src"), ip6(Ipv6Addr::UNSPECIFIED)),
                    eq(
                        f("ip6.dst"),
                        net6(
                            Ipv6Net::new(Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0), 16)
                                .unwrap_or_default(),
                        ),
                    ),
                    in_set(f("icmp6.type"), [131u128, 135, 143].map(crate::build::num)),
                ]);
                sw.for_port(out, st, 96, p, format!("ps-dad-{i}"), dad, pass());
            }
            if e.has_ip() {
                let m_ip = and([from(), pred("ip")]);
                sw.for_port(out, st, 95, p, format!("ps-ip-drop-{i}"), m_ip, deny());
            }
        }
        let nd_arp = and([inport(name), or([pred("arp"), pred("nd")])]);
        sw.for_port(out, st, 97, p, "ps-nd-drop", nd_arp, deny());
        let l2 = and([
            inport(name),
            in_set(f("eth.src"), macs_of(&port.port_security)),
        ]);
        sw.for_port(out, st, 92, p, "ps-l2", l2, pass());
        sw.for_port(out, st, 91, p, "ps-l2-drop", inport(name), deny());
    }
}

/// The egress flows (replacing the `check_out_port_sec()` flow, same identity).
pub fn egress(sw: &Sw<'_, '_>, out: &mut Flows) {
    let st = Stage::LsOutCheckPortSec;
    sw.dflt(out, st, 0, "check", always(), pass());
    for p in secured(sw) {
        let port = sw.port(p);
        let name = port.name.as_str();
        for (i, e) in port.port_security.iter().enumerate() {
            let Some(m) = e.mac else { continue };
            let to = || and([outport(name), eq(f("eth.dst"), mac(m))]);
            if !e.ipv4.is_empty() {
                let mut dsts = vec![
                    ip4(Ipv4Addr::BROADCAST),
                    net4(Ipv4Net::new(Ipv4Addr::new(224, 0, 0, 0), 4).unwrap_or_default()),
                ];
                dsts.extend(v4_values(&e.ipv4, true));
                let m4 = and([to(), pred("ip4"), in_set(f("ip4.dst"), dsts)]);
                sw.for_port(out, st, 96, p, format!("ps-ip4-{i}"), m4, pass());
            }
            if !e.ipv6.is_empty() {
                let mut dsts = vec![
                    ip6(m.ipv6_lla()),
                    net6(
                        Ipv6Net::new(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8)
                            .unwrap_or_default(),
                    ),
                ];
                dsts.extend(v6_values(&e.ipv6));
                let m6 = and([to(), pred("ip6"), in_set(f("ip6.dst"), dsts)]);
                sw.for_port(out, st, 96, p, format!("ps-ip6-{i}"), m6, pass());
            }
            if e.has_ip() {
                let m_ip = and([to(), pred("ip")]);
                sw.for_port(out, st, 95, p, format!("ps-ip-drop-{i}"), m_ip, deny());
            }
        }
        let l2 = and([
            outport(name),
            in_set(f("eth.dst"), macs_of(&port.port_security)),
        ]);
        sw.for_port(out, st, 92, p, "ps-l2", l2, pass());
        sw.for_port(out, st, 91, p, "ps-l2-drop", outport(name), deny());
    }
}
