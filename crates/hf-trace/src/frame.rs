//! The frame a [`Microflow`] describes: Ethernet (with an 802.1Q tag when `vlan.tci` has the
//! CFI/present bit, bit 12, set), then by `eth.type` ARP, IPv4 or IPv6, then by `ip.proto` TCP,
//! UDP, SCTP, ICMPv4 or ICMPv6 (neighbour solicitations and advertisements with `nd.target`
//! and, when given, the `nd.sll`/`nd.tll` option). Checksums are correct; lengths are the
//! headers' own (no payload). Unconstrained fields are zero, as in ovn-trace, except an IPv6
//! next header of 0 (hop-by-hop options), which becomes 59 (no next header), and TCP flags,
//! which default to SYN so that the scratch conntrack sees the first packet of a connection
//! (a flagless segment is invalid to it; give `tcp.flags` to trace another one).
//!
//! What it does not do: IPv6 extension headers, IP options, SCTP payload chunks, or frames
//! whose `eth.type`/`ip.proto` are none of the above (those get an empty payload after the
//! header that names them).

use crate::microflow::Microflow;

fn be(v: u128, n: usize) -> Vec<u8> {
    let b = v.to_be_bytes();
    b[16 - n..].to_vec()
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut it = data.chunks_exact(2);
    for c in &mut it {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = it.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Builds the frame `m` describes.
pub fn build(m: &Microflow) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend(be(m.get("eth.dst"), 6));
    f.extend(be(m.get("eth.src"), 6));
    let tci = m.get("vlan.tci");
    if tci & 0x1000 != 0 {
        f.extend([0x81, 0x00]);
        f.extend(be(tci & 0xefff, 2));
    }
    let eth_type = m.get("eth.type") as u16;
    f.extend(eth_type.to_be_bytes());
    match eth_type {
        0x0806 => arp(m, &mut f),
        0x0800 => ipv4(m, &mut f),
        0x86dd => ipv6(m, &mut f),
        _ => {}
    }
    f
}

fn arp(m: &Microflow, f: &mut Vec<u8>) {
    f.extend([0, 1, 8, 0, 6, 4]);
    f.extend(be(m.get("arp.op"), 2));
    f.extend(be(m.get("arp.sha"), 6));
    f.extend(be(m.get("arp.spa"), 4));
    f.extend(be(m.get("arp.tha"), 6));
    f.extend(be(m.get("arp.tpa"), 4));
}

/// The L4 header for `proto` (checksum zero, at the returned offset when there is one).
fn l4(m: &Microflow, proto: u8, v6: bool) -> (Vec<u8>, Option<usize>) {
    match proto {
        6 => {
            let mut h = be(m.get("tcp.src"), 2);
            h.extend(be(m.get("tcp.dst"), 2));
            h.extend([0; 8]);
            // A TCP segment the microflow gives no flags to is a SYN: conntrack (which trace
            // runs for real, on a scratch table) calls a flagless first segment invalid.
            let flags = if m.has("tcp.flags") {
                m.get("tcp.flags") as u16 & 0x0fff
            } else {
                0x002
            };
            h.extend((0x5000u16 | flags).to_be_bytes());
            h.extend([0xff, 0xff, 0, 0, 0, 0]);
            (h, Some(16))
        }
        17 => {
            let mut h = be(m.get("udp.src"), 2);
            h.extend(be(m.get("udp.dst"), 2));
            h.extend([0, 8, 0, 0]);
            (h, Some(6))
        }
        132 => {
            let mut h = be(m.get("sctp.src"), 2);
            h.extend(be(m.get("sctp.dst"), 2));
            h.extend([0; 8]);
            (h, None)
        }
        1 if !v6 => {
            let mut h = vec![m.get("icmp4.type") as u8, m.get("icmp4.code") as u8, 0, 0];
            h.extend([0; 4]);
            (h, Some(2))
        }
        58 if v6 => {
            let ty = m.get("icmp6.type") as u8;
            let mut h = vec![ty, m.get("icmp6.code") as u8, 0, 0];
            match ty {
                135 | 136 => {
                    h.extend(if ty == 136 { [0x60, 0, 0, 0] } else { [0; 4] });
                    h.extend(be(m.get("nd.target"), 16));
                    let (opt, mac) = if ty == 135 {
                        (1u8, m.get("nd.sll"))
                    } else {
                        (2u8, m.get("nd.tll"))
                    };
                    if mac != 0 {
                        h.extend([opt, 1]);
                        h.extend(be(mac, 6));
                    }
                }
                _ => h.extend([0; 4]),
            }
            (h, Some(2))
        }
        _ => (Vec::new(), None),
    }
}

fn ipv4(m: &Microflow, f: &mut Vec<u8>) {
    let proto = m.get("ip.proto") as u8;
    let (mut seg, csum) = l4(m, proto, false);
    let total = 20 + seg.len();
    let tos = ((m.get("ip.dscp") as u8) << 2) | (m.get("ip.ecn") as u8 & 3);
    let frag = m.get("ip.frag") as u8;
    // OVS's nw_frag: bit 0 "a fragment", bit 1 "not the first one".
    let frag_field: u16 = match (frag & 1 != 0, frag & 2 != 0) {
        (true, true) => 0x2001,
        (true, false) => 0x2000,
        _ => 0,
    };
    let src = be(m.get("ip4.src"), 4);
    let dst = be(m.get("ip4.dst"), 4);
    let mut h = vec![0x45, tos];
    h.extend((total as u16).to_be_bytes());
    h.extend([0, 0]);
    h.extend(frag_field.to_be_bytes());
    h.extend([m.get("ip.ttl") as u8, proto, 0, 0]);
    h.extend(&src);
    h.extend(&dst);
    let c = fold(sum16(&h, 0));
    h[10..12].copy_from_slice(&c.to_be_bytes());
    if let Some(at) = csum {
        let acc = if proto == 1 {
            0
        } else {
            let mut ph = src.clone();
            ph.extend(&dst);
            ph.extend([0, proto]);
            ph.extend((seg.len() as u16).to_be_bytes());
            sum16(&ph, 0)
        };
        if proto == 17 {
            let n = seg.len() as u16;
            seg[4..6].copy_from_slice(&n.to_be_bytes());
        }
        let c = fold(sum16(&seg, acc));
        seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    f.extend(h);
    f.extend(seg);
}

fn ipv6(m: &Microflow, f: &mut Vec<u8>) {
    // Next header 0 is a hop-by-hop options header, which would need a body: an IPv6 packet
    // whose protocol the microflow leaves open says "no next header" (59) instead.
    let proto = match m.get("ip.proto") as u8 {
        0 => 59,
        p => p,
    };
    let (mut seg, csum) = l4(m, proto, true);
    let tc = ((m.get("ip.dscp") as u32) << 2) | (m.get("ip.ecn") as u32 & 3);
    let word = (6u32 << 28) | (tc << 20) | (m.get("ip6.label") as u32 & 0xf_ffff);
    let src = be(m.get("ip6.src"), 16);
    let dst = be(m.get("ip6.dst"), 16);
    f.extend(word.to_be_bytes());
    f.extend((seg.len() as u16).to_be_bytes());
    f.extend([proto, m.get("ip.ttl") as u8]);
    f.extend(&src);
    f.extend(&dst);
    if let Some(at) = csum {
        let mut ph = src;
        ph.extend(&dst);
        ph.extend((seg.len() as u32).to_be_bytes());
        ph.extend([0, 0, 0, proto]);
        if proto == 17 {
            let n = seg.len() as u16;
            seg[4..6].copy_from_slice(&n.to_be_bytes());
        }
        let c = fold(sum16(&seg, sum16(&ph, 0)));
        seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    f.extend(seg);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::microflow::parse;

    fn frame(text: &str) -> (Vec<u8>, hf_wire::Parsed) {
        let m = parse(text, "microflow").unwrap();
        let f = build(&m);
        let p = hf_wire::parse(&f, 1, 1).unwrap();
        assert!(hf_wire::checksums_valid(&f, &p), "{text}: bad checksums");
        (f, p)
    }

    #[test]
    fn tcp4_fields_survive_parsing() {
        let (_, p) = frame(
            "eth.src == 00:00:00:00:00:01 && eth.dst == 00:00:00:00:00:02 && ip4.src == 10.0.0.1 \
             && ip4.dst == 10.0.0.2 && ip.ttl == 64 && tcp.src == 1234 && tcp.dst == 80 && tcp.flags == 2",
        );
        let k = p.key;
        assert_eq!(k.eth_src.0, [0, 0, 0, 0, 0, 1]);
        assert_eq!(k.ip4_dst, std::net::Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(k.ip_ttl, 64);
        assert_eq!((k.tp_src, k.tp_dst), (1234, 80));
    }

    #[test]
    fn udp6_icmp6_nd_and_arp_parse() {
        frame("ip6.src == fe80::1 && ip6.dst == fe80::2 && ip.ttl == 255 && udp.dst == 53");
        let (_, p) = frame(
            "ip6.src == fe80::1 && ip6.dst == ff02::1:ff00:2 && nd_ns && nd.target == fe80::2 \
             && nd.sll == 00:00:00:00:00:01 && ip.ttl == 255",
        );
        assert_eq!(p.key.icmp_type, 135);
        let (_, p) = frame("arp.op == 1 && arp.spa == 10.0.0.1 && arp.tpa == 10.0.0.254");
        assert_eq!(p.key.arp_op, 1);
        frame(
            "icmp4 && icmp4.type == 8 && ip4.src == 1.1.1.1 && ip4.dst == 2.2.2.2 && ip.ttl == 2",
        );
    }
}
