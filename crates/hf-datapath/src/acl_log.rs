//! ACL log lines as ovn-controller 23.03 writes them (its `acl_log` module): `name="N",
//! verdict=V, severity=S, direction=D: FLOW`, where FLOW is the packet as Open vSwitch's
//! `flow_format` prints a packet-in's headers (`tcp,vlan_tci=0x0000,dl_src=...,tcp_flags=syn`).
//!
//! [`flow_format`] follows OVS's flow extraction for Ethernet (one 802.1Q tag), ARP/RARP,
//! IPv4 (options, fragments), IPv6 (hop-by-hop, routing, destination options and fragment
//! headers), TCP, UDP, SCTP, ICMP, ICMPv6 with neighbour discovery, and IGMP (its type and code
//! as ports, as OVS has them); truncated headers read as zero, as OVS leaves unparsed fields.
//! Checked against `ovs-ofctl parse-pcap` on generated packets (`tests/acl_log_format.rs`).
//!
//! What it does not do: packet metadata (OVN's packet-ins carry none into the line), MPLS,
//! several VLAN tags beyond the first two, or other tunnel headers.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The whole line (after `acl_log|INFO|`).
pub fn line(
    name: Option<&str>,
    verdict: &str,
    severity: &str,
    direction: &str,
    frame: &[u8],
) -> String {
    let mut s = String::from("name=");
    json_string(&mut s, name.unwrap_or("<unnamed>"));
    let _ = write!(
        s,
        ", verdict={verdict}, severity={severity}, direction={direction}: {}",
        flow_format(frame)
    );
    s
}

/// A JSON string literal, as OVS's `json_string_escape` writes it.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn mac(b: &[u8]) -> String {
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(b) {
        *d = *s;
    }
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(x) => u16::from_be_bytes([x[0], x[1]]),
        None => 0,
    }
}

fn v4(b: &[u8], at: usize) -> Ipv4Addr {
    match b.get(at..at + 4) {
        Some(x) => Ipv4Addr::new(x[0], x[1], x[2], x[3]),
        None => Ipv4Addr::UNSPECIFIED,
    }
}

fn v6(b: &[u8], at: usize) -> Ipv6Addr {
    match b
        .get(at..at + 16)
        .and_then(|x| <[u8; 16]>::try_from(x).ok())
    {
        Some(x) => Ipv6Addr::from(x),
        None => Ipv6Addr::UNSPECIFIED,
    }
}

const TCP_FLAGS: [&str; 9] = ["fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr", "ns"];

/// The L3 fields common to IPv4 and IPv6, and the protocol and payload.
struct L3 {
    proto: u8,
    tos: u8,
    ttl: u8,
    /// `no`, `first` or `later`.
    frag: &'static str,
}

/// `FLOW`: the packet as OVS's `flow_format` prints it.
pub fn flow_format(f: &[u8]) -> String {
    let dst = f.get(0..6).unwrap_or(&[]);
    let src = f.get(6..12).unwrap_or(&[]);
    let mut ety = be16(f, 12);
    let mut off = 14;
    let mut vlan = String::from("vlan_tci=0x0000");
    if matches!(ety, 0x8100 | 0x88a8) && f.len() >= 18 {
        let tci = be16(f, 14);
        vlan = format!(
            "dl_vlan={},dl_vlan_pcp={},vlan_tci1=0x0000",
            tci & 0x0fff,
            tci >> 13
        );
        ety = be16(f, 16);
        off = 18;
    }
    let l2 = format!("{vlan},dl_src={},dl_dst={}", mac(src), mac(dst));
    let body = f.get(off..).unwrap_or(&[]);
    match ety {
        0x0806 | 0x8035 => {
            let name = if ety == 0x0806 { "arp" } else { "rarp" };
            // Only Ethernet/IPv4 ARP is parsed; other ARP reads as zeros.
            let ok = body.len() >= 28
                && be16(body, 0) == 1
                && be16(body, 2) == 0x0800
                && body[4] == 6
                && body[5] == 4;
            let (op, sha, spa, tha, tpa) = if ok {
                (
                    be16(body, 6),
                    mac(&body[8..14]),
                    v4(body, 14),
                    mac(&body[18..24]),
                    v4(body, 24),
                )
            } else {
                (
                    0,
                    mac(&[]),
                    Ipv4Addr::UNSPECIFIED,
                    mac(&[]),
                    Ipv4Addr::UNSPECIFIED,
                )
            };
            format!(
                "{name},{l2},arp_spa={spa},arp_tpa={tpa},arp_op={op},arp_sha={sha},arp_tha={tha}"
            )
        }
        0x0800 => ipv4(&l2, body),
        0x86dd => ipv6(&l2, body),
        other => format!("{l2},dl_type={other:#06x}"),
    }
}

fn ipv4(l2: &str, b: &[u8]) -> String {
    let ihl = usize::from(b.first().copied().unwrap_or(0) & 0x0f) * 4;
    let total = usize::from(be16(b, 2));
    // OVS's sanity check: a header or total length beyond the frame is no IPv4 packet.
    if b.len() < 20 || ihl < 20 || b.len() < ihl || total < ihl || total > b.len() {
        return format!(
            "ip,{l2},nw_src=0.0.0.0,nw_dst=0.0.0.0,nw_proto=0,nw_tos=0,nw_ecn=0,nw_ttl=0,nw_frag=no"
        );
    }
    let fo = be16(b, 6);
    let frag = if fo & 0x3fff == 0 {
        "no"
    } else if fo & 0x1fff == 0 {
        "first"
    } else {
        "later"
    };
    let l3 = L3 {
        proto: b[9],
        tos: b[1],
        ttl: b[8],
        frag,
    };
    let addrs = format!("nw_src={},nw_dst={}", v4(b, 12), v4(b, 16));
    let end = total.min(b.len());
    l4(l2, &addrs, &l3, b.get(ihl..end).unwrap_or(&[]), false)
}

fn ipv6(l2: &str, b: &[u8]) -> String {
    if b.len() < 40 || 40 + usize::from(be16(b, 4)) > b.len() {
        return format!(
            "ipv6,{l2},ipv6_src=::,ipv6_dst=::,ipv6_label=0x00000,nw_proto=0,nw_tos=0,nw_ecn=0,nw_ttl=0,nw_frag=no"
        );
    }
    let w = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let tos = ((w >> 20) & 0xff) as u8;
    let label = w & 0xfffff;
    let plen = usize::from(be16(b, 4));
    let end = (40 + plen).min(b.len());
    let mut nh = b[6];
    let ttl = b[7];
    let mut at = 40;
    let mut frag = "no";
    // Extension headers (hop-by-hop, routing, destination options, fragment).
    loop {
        match nh {
            0 | 43 | 60 => {
                let Some(h) = b.get(at..at + 2).filter(|_| at + 2 <= end) else {
                    break;
                };
                let len = (usize::from(h[1]) + 1) * 8;
                nh = h[0];
                at += len;
            }
            44 => {
                let Some(h) = b.get(at..at + 8).filter(|_| at + 8 <= end) else {
                    break;
                };
                let offset = be16(h, 2) >> 3;
                if offset != 0 {
                    // A later fragment: the protocol is the fragment header's.
                    frag = "later";
                    break;
                }
                frag = "first";
                nh = h[0];
                at += 8;
            }
            _ => break,
        }
    }
    let l3 = L3 {
        proto: nh,
        tos,
        ttl,
        frag,
    };
    let addrs = format!(
        "ipv6_src={},ipv6_dst={},ipv6_label={label:#07x}",
        v6(b, 8),
        v6(b, 24)
    );
    l4(l2, &addrs, &l3, b.get(at..end).unwrap_or(&[]), true)
}

fn l4(l2: &str, addrs: &str, l3: &L3, p: &[u8], is6: bool) -> String {
    let six = if is6 { "6" } else { "" };
    let common = format!(
        "nw_tos={},nw_ecn={},nw_ttl={},nw_frag={}",
        l3.tos & 0xfc,
        l3.tos & 3,
        l3.ttl,
        l3.frag
    );
    let named = match (l3.proto, is6) {
        (6, _) => Some("tcp"),
        (17, _) => Some("udp"),
        (132, _) => Some("sctp"),
        (1, false) => Some("icmp"),
        (58, true) => Some("icmp6"),
        _ => None,
    };
    let later = l3.frag == "later";
    let Some(name) = named else {
        let base = if is6 { "ipv6" } else { "ip" };
        let mut s = format!("{base},{l2},{addrs},nw_proto={},{common}", l3.proto);
        // IGMP's type and code ride in the port fields.
        if l3.proto == 2 && !is6 && !later {
            let (t, c) = if p.len() >= 8 { (p[0], p[1]) } else { (0, 0) };
            let _ = write!(s, ",tp_src={t},tp_dst={c}");
        }
        return s;
    };
    let proto = if name.starts_with("icmp") {
        name.to_string()
    } else {
        format!("{name}{six}")
    };
    let mut s = format!("{proto},{l2},{addrs},{common}");
    if later {
        return s;
    }
    match l3.proto {
        6 => {
            let (sp, dp, flags) = if p.len() >= 20 {
                (be16(p, 0), be16(p, 2), be16(p, 12) & 0x01ff)
            } else {
                (0, 0, 0)
            };
            let _ = write!(s, ",tp_src={sp},tp_dst={dp},tcp_flags=");
            if flags == 0 {
                s.push('0');
            } else {
                let names: Vec<&str> = TCP_FLAGS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| flags & (1 << i) != 0)
                    .map(|(_, n)| *n)
                    .collect();
                s.push_str(&names.join("|"));
            }
        }
        17 | 132 => {
            let min = if l3.proto == 17 { 8 } else { 12 };
            let (sp, dp) = if p.len() >= min {
                (be16(p, 0), be16(p, 2))
            } else {
                (0, 0)
            };
            let _ = write!(s, ",tp_src={sp},tp_dst={dp}");
        }
        _ => {
            let (t, c) = if p.len() >= if is6 { 4 } else { 8 } {
                (p[0], p[1])
            } else {
                (0, 0)
            };
            let _ = write!(s, ",icmp_type={t},icmp_code={c}");
            if is6 && (t == 135 || t == 136) && p.len() >= 24 {
                let target = v6(p, 8);
                let (mut sll, mut tll) = ([0u8; 6], [0u8; 6]);
                let mut at = 24;
                while let Some(h) = p.get(at..at + 2) {
                    let len = usize::from(h[1]) * 8;
                    if len == 0 {
                        break;
                    }
                    if let Some(o) = p.get(at..at + len) {
                        if o.len() >= 8 {
                            match (o[0], t) {
                                (1, 135) => sll.copy_from_slice(&o[2..8]),
                                (2, 136) => tll.copy_from_slice(&o[2..8]),
                                _ => {}
                            }
                        }
                    } else {
                        break;
                    }
                    at += len;
                }
                let _ = write!(
                    s,
                    ",nd_target={target},nd_sll={},nd_tll={}",
                    mac(&sll),
                    mac(&tll)
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_json_strings_and_unnamed_is_named_so() {
        let l = line(Some("a\"b"), "allow", "info", "from-lport", &[]);
        assert!(
            l.starts_with("name=\"a\\\"b\", verdict=allow, severity=info, direction=from-lport: "),
            "{l}"
        );
        let l = line(None, "drop", "alert", "to-lport", &[]);
        assert!(l.starts_with("name=\"<unnamed>\", verdict=drop"), "{l}");
    }

    #[test]
    fn untrusted_bytes_never_panic() {
        let mut seed = 0x1234_5678_u64;
        for n in 0..2000 {
            let mut f = vec![0u8; n % 120];
            for b in f.iter_mut() {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *b = (seed >> 33) as u8;
            }
            if f.len() > 13 {
                let t: [u16; 5] = [0x0800, 0x86dd, 0x0806, 0x8100, 0x8035];
                f[12..14].copy_from_slice(&t[n % 5].to_be_bytes());
            }
            let _ = flow_format(&f);
        }
    }
}
