//! Frames for the oracle: builders for the packets hosts send (Ethernet + IPv4 or IPv6 +
//! TCP/UDP/ICMP or ICMPv6 with valid checksums, ARP), a small decoder for the replies hosts build from what arrived,
//! and a one-line description of a frame for failure reports.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub type Mac = [u8; 6];

pub const ETH_IP4: u16 = 0x0800;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_IP6: u16 = 0x86dd;

pub const TCP_FIN: u8 = 0x01;
pub const TCP_SYN: u8 = 0x02;
pub const TCP_RST: u8 = 0x04;
pub const TCP_PSH: u8 = 0x08;
pub const TCP_ACK: u8 = 0x10;

pub fn parse_mac(s: &str) -> Mac {
    let mut m = [0u8; 6];
    for (i, b) in s.split(':').enumerate() {
        m[i] = u8::from_str_radix(b, 16).expect("generated MAC");
    }
    m
}

pub fn fmt_mac(m: &Mac) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut it = data.chunks_exact(2);
    for c in &mut it {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = it.remainder() {
        acc += u32::from(*b) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The Internet checksum of `data` (RFC 1071).
pub fn csum(data: &[u8]) -> u16 {
    fold(sum16(data, 0))
}

/// The TCP/UDP/ICMPv6 checksum with the pseudo-header of either family (RFC 793, RFC 8200
/// §8.1: the same one's-complement sum of addresses, protocol and length).
fn l4_csum(src: IpAddr, dst: IpAddr, proto: u8, seg: &[u8]) -> u16 {
    let bytes = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let mut acc = sum16(&bytes(src), 0);
    acc = sum16(&bytes(dst), acc);
    acc += u32::from(proto) + seg.len() as u32;
    fold(sum16(seg, acc))
}

/// The bytes of `l4` with its checksum: `Icmp` is ICMPv6 (next header 58, pseudo-header
/// checksum) when `src`/`dst` are IPv6, ICMP (protocol 1) otherwise.
fn segment(l4: &L4, src: IpAddr, dst: IpAddr) -> (u8, Vec<u8>) {
    let (proto, mut seg) = match l4 {
        L4::Tcp {
            sport,
            dport,
            seq,
            ack,
            flags,
            payload,
        } => {
            let mut s = Vec::new();
            s.extend_from_slice(&sport.to_be_bytes());
            s.extend_from_slice(&dport.to_be_bytes());
            s.extend_from_slice(&seq.to_be_bytes());
            s.extend_from_slice(&ack.to_be_bytes());
            s.extend_from_slice(&[0x50, *flags, 0xff, 0xff, 0, 0, 0, 0]);
            s.extend_from_slice(payload);
            (6u8, s)
        }
        L4::Udp {
            sport,
            dport,
            payload,
        } => {
            let mut s = Vec::new();
            s.extend_from_slice(&sport.to_be_bytes());
            s.extend_from_slice(&dport.to_be_bytes());
            s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            s.extend_from_slice(&[0, 0]);
            s.extend_from_slice(payload);
            (17u8, s)
        }
        L4::Icmp {
            ty,
            code,
            rest,
            payload,
        } => {
            let mut s = vec![*ty, *code, 0, 0];
            s.extend_from_slice(rest);
            s.extend_from_slice(payload);
            (if src.is_ipv6() { 58 } else { 1 }, s)
        }
        L4::Other(p, b) => (*p, b.clone()),
    };
    match proto {
        6 => {
            let c = l4_csum(src, dst, 6, &seg);
            seg[16..18].copy_from_slice(&c.to_be_bytes());
        }
        17 => {
            let c = l4_csum(src, dst, 17, &seg);
            let c = if c == 0 { 0xffff } else { c };
            seg[6..8].copy_from_slice(&c.to_be_bytes());
        }
        1 => {
            let c = csum(&seg);
            seg[2..4].copy_from_slice(&c.to_be_bytes());
        }
        58 => {
            let c = l4_csum(src, dst, 58, &seg);
            seg[2..4].copy_from_slice(&c.to_be_bytes());
        }
        _ => {}
    }
    (proto, seg)
}

/// Decodes an L4 segment of protocol `proto` (`icmp`: 1 for IPv4, 58 for IPv6).
fn parse_l4(proto: u8, seg: &[u8], icmp: u8) -> L4 {
    match proto {
        6 if seg.len() >= 20 => {
            let off = usize::from(seg[12] >> 4) * 4;
            L4::Tcp {
                sport: u16::from_be_bytes([seg[0], seg[1]]),
                dport: u16::from_be_bytes([seg[2], seg[3]]),
                seq: u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]),
                ack: u32::from_be_bytes([seg[8], seg[9], seg[10], seg[11]]),
                flags: seg[13],
                payload: seg.get(off..).unwrap_or_default().to_vec(),
            }
        }
        17 if seg.len() >= 8 => L4::Udp {
            sport: u16::from_be_bytes([seg[0], seg[1]]),
            dport: u16::from_be_bytes([seg[2], seg[3]]),
            payload: seg[8..].to_vec(),
        },
        p if p == icmp && seg.len() >= 8 => L4::Icmp {
            ty: seg[0],
            code: seg[1],
            rest: [seg[4], seg[5], seg[6], seg[7]],
            payload: seg[8..].to_vec(),
        },
        p => L4::Other(p, seg.to_vec()),
    }
}

/// What an IP packet carries (`Icmp`: ICMP in IPv4, ICMPv6 in IPv6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        payload: Vec<u8>,
    },
    Udp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    Icmp {
        ty: u8,
        code: u8,
        /// Identifier and sequence (echo), or the unused word (errors).
        rest: [u8; 4],
        payload: Vec<u8>,
    },
    Other(u8, Vec<u8>),
}

/// An IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ip4 {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ttl: u8,
    pub id: u16,
    pub tos: u8,
    pub df: bool,
    pub l4: L4,
}

/// An IPv6 packet (no extension headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ip6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub hlim: u8,
    /// Traffic class.
    pub tc: u8,
    pub flow_label: u32,
    pub l4: L4,
}

/// An ARP packet (Ethernet/IPv4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arp {
    pub op: u16,
    pub sha: Mac,
    pub spa: Ipv4Addr,
    pub tha: Mac,
    pub tpa: Ipv4Addr,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Ip4(Ip4),
    Ip6(Ip6),
    Arp(Arp),
    Other(u16, Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub dst: Mac,
    pub src: Mac,
    pub body: Body,
}

impl Frame {
    /// The bytes, with valid IPv4 and L4 checksums.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(&self.dst);
        out.extend_from_slice(&self.src);
        match &self.body {
            Body::Arp(a) => {
                out.extend_from_slice(&ETH_ARP.to_be_bytes());
                out.extend_from_slice(&[0, 1, 8, 0, 6, 4]);
                out.extend_from_slice(&a.op.to_be_bytes());
                out.extend_from_slice(&a.sha);
                out.extend_from_slice(&a.spa.octets());
                out.extend_from_slice(&a.tha);
                out.extend_from_slice(&a.tpa.octets());
            }
            Body::Ip4(ip) => {
                out.extend_from_slice(&ETH_IP4.to_be_bytes());
                let (proto, seg) = segment(&ip.l4, ip.src.into(), ip.dst.into());
                let total = (20 + seg.len()) as u16;
                let mut h = vec![0x45, ip.tos];
                h.extend_from_slice(&total.to_be_bytes());
                h.extend_from_slice(&ip.id.to_be_bytes());
                h.extend_from_slice(&[if ip.df { 0x40 } else { 0 }, 0, ip.ttl, proto, 0, 0]);
                h.extend_from_slice(&ip.src.octets());
                h.extend_from_slice(&ip.dst.octets());
                let c = csum(&h);
                h[10..12].copy_from_slice(&c.to_be_bytes());
                out.extend_from_slice(&h);
                out.extend_from_slice(&seg);
            }
            Body::Ip6(ip) => {
                out.extend_from_slice(&ETH_IP6.to_be_bytes());
                let (proto, seg) = segment(&ip.l4, ip.src.into(), ip.dst.into());
                let word = (6u32 << 28) | (u32::from(ip.tc) << 20) | (ip.flow_label & 0xf_ffff);
                out.extend_from_slice(&word.to_be_bytes());
                out.extend_from_slice(&(seg.len() as u16).to_be_bytes());
                out.extend_from_slice(&[proto, ip.hlim]);
                out.extend_from_slice(&ip.src.octets());
                out.extend_from_slice(&ip.dst.octets());
                out.extend_from_slice(&seg);
            }
            Body::Other(t, b) => {
                out.extend_from_slice(&t.to_be_bytes());
                out.extend_from_slice(b);
            }
        }
        out
    }

    /// Decode `b` (`None` when it is too short for what its headers say).
    pub fn parse(b: &[u8]) -> Option<Frame> {
        let mac = |o: usize| -> Option<Mac> { b.get(o..o + 6)?.try_into().ok() };
        let ip4 = |o: usize| -> Option<Ipv4Addr> {
            let x: [u8; 4] = b.get(o..o + 4)?.try_into().ok()?;
            Some(Ipv4Addr::from(x))
        };
        let u16at =
            |o: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(o)?, *b.get(o + 1)?])) };
        let (dst, src) = (mac(0)?, mac(6)?);
        let et = u16at(12)?;
        let body = match et {
            ETH_ARP => Body::Arp(Arp {
                op: u16at(20)?,
                sha: mac(22)?,
                spa: ip4(28)?,
                tha: mac(32)?,
                tpa: ip4(38)?,
            }),
            ETH_IP4 => {
                let ihl = usize::from(b.get(14)? & 0x0f) * 4;
                let total = usize::from(u16at(16)?);
                let end = (14 + total).min(b.len());
                let l4o = 14 + ihl;
                let seg = b.get(l4o..end)?;
                let l4 = parse_l4(*b.get(23)?, seg, 1);
                Body::Ip4(Ip4 {
                    src: ip4(26)?,
                    dst: ip4(30)?,
                    ttl: *b.get(22)?,
                    id: u16at(18)?,
                    tos: *b.get(15)?,
                    df: b.get(20)? & 0x40 != 0,
                    l4,
                })
            }
            ETH_IP6 => {
                let ip6 = |o: usize| -> Option<Ipv6Addr> {
                    let x: [u8; 16] = b.get(o..o + 16)?.try_into().ok()?;
                    Some(Ipv6Addr::from(x))
                };
                let word = u32::from_be_bytes(b.get(14..18)?.try_into().ok()?);
                let len = usize::from(u16at(18)?);
                let seg = b.get(54..(54 + len).min(b.len()))?;
                Body::Ip6(Ip6 {
                    src: ip6(22)?,
                    dst: ip6(38)?,
                    hlim: *b.get(21)?,
                    tc: (word >> 20) as u8,
                    flow_label: word & 0xf_ffff,
                    l4: parse_l4(*b.get(20)?, seg, 58),
                })
            }
            t => Body::Other(t, b[14..].to_vec()),
        };
        Some(Frame { dst, src, body })
    }

    pub fn ip4(&self) -> Option<&Ip4> {
        match &self.body {
            Body::Ip4(i) => Some(i),
            _ => None,
        }
    }

    /// Source and destination address and the L4 part, of either family.
    pub fn ip(&self) -> Option<(IpAddr, IpAddr, &L4)> {
        match &self.body {
            Body::Ip4(i) => Some((i.src.into(), i.dst.into(), &i.l4)),
            Body::Ip6(i) => Some((i.src.into(), i.dst.into(), &i.l4)),
            _ => None,
        }
    }
}

/// `frame` (Ethernet + IPv4) with its IPv4 source replaced by `src`, the IPv4 header checksum
/// and a TCP or UDP checksum computed again; every other byte as it was.
pub fn with_ip4_src(frame: &[u8], src: Ipv4Addr) -> Option<Vec<u8>> {
    let mut b = frame.to_vec();
    let ihl = usize::from(*b.get(14)? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*b.get(16)?, *b.get(17)?]));
    let end = 14 + total;
    if b.len() < end || ihl < 20 {
        return None;
    }
    b[26..30].copy_from_slice(&src.octets());
    b[24..26].copy_from_slice(&[0, 0]);
    let c = csum(&b[14..14 + ihl]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    let dst = Ipv4Addr::new(b[30], b[31], b[32], b[33]);
    let (proto, l4) = (b[23], 14 + ihl);
    let at = match proto {
        6 => l4 + 16,
        17 => l4 + 6,
        _ => return Some(b),
    };
    b.get(at + 1)?;
    b[at..at + 2].copy_from_slice(&[0, 0]);
    let c = l4_csum(src.into(), dst.into(), proto, &b[l4..end]);
    b[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Some(b)
}

/// A gratuitous ARP (broadcast, sender address = target address): what ovn-controller
/// announces on its own for ports on switches with a localnet port, unrelated to any packet
/// the test sends.
pub fn is_garp(b: &[u8]) -> bool {
    matches!(Frame::parse(b), Some(Frame { dst, body: Body::Arp(a), .. }) if dst == [0xff; 6] && a.spa == a.tpa)
}

/// One line per frame: addresses, protocol fields, IP ID and checksums, then the bytes.
pub fn describe(b: &[u8]) -> String {
    let mut s = String::new();
    match Frame::parse(b) {
        None => s.push_str("(undecodable)"),
        Some(f) => {
            write!(s, "{} > {} ", fmt_mac(&f.src), fmt_mac(&f.dst)).unwrap();
            match &f.body {
                Body::Arp(a) => write!(
                    s,
                    "ARP op {} {} ({}) -> {} ({})",
                    a.op,
                    a.spa,
                    fmt_mac(&a.sha),
                    a.tpa,
                    fmt_mac(&a.tha)
                )
                .unwrap(),
                Body::Ip4(_) | Body::Ip6(_) => {
                    let l4 = match &f.body {
                        Body::Ip4(ip) => {
                            write!(
                                s,
                                "IPv4 {} > {} ttl {} id {:#06x} tos {:#04x} df {} ",
                                ip.src, ip.dst, ip.ttl, ip.id, ip.tos, ip.df
                            )
                            .unwrap();
                            &ip.l4
                        }
                        Body::Ip6(ip) => {
                            write!(
                                s,
                                "IPv6 {} > {} hlim {} tc {:#04x} flow {:#07x} ",
                                ip.src, ip.dst, ip.hlim, ip.tc, ip.flow_label
                            )
                            .unwrap();
                            &ip.l4
                        }
                        _ => unreachable!("matched above"),
                    };
                    match l4 {
                        L4::Tcp {
                            sport,
                            dport,
                            seq,
                            ack,
                            flags,
                            payload,
                        } => write!(
                            s,
                            "TCP {sport} > {dport} flags {flags:#04x} seq {seq} ack {ack} len {}",
                            payload.len()
                        )
                        .unwrap(),
                        L4::Udp {
                            sport,
                            dport,
                            payload,
                        } => write!(s, "UDP {sport} > {dport} len {}", payload.len()).unwrap(),
                        L4::Icmp {
                            ty,
                            code,
                            rest,
                            payload,
                        } => write!(
                            s,
                            "ICMP type {ty} code {code} rest {rest:02x?} len {}",
                            payload.len()
                        )
                        .unwrap(),
                        L4::Other(p, b) => write!(s, "proto {p} len {}", b.len()).unwrap(),
                    }
                }
                Body::Other(t, b) => write!(s, "ethertype {t:#06x} len {}", b.len()).unwrap(),
            }
        }
    }
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    write!(s, "\n        {hex}").unwrap();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_frames_decode_to_themselves_with_valid_checksums() {
        let f = Frame {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            body: Body::Ip4(Ip4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                ttl: 64,
                id: 7,
                tos: 0,
                df: true,
                l4: L4::Tcp {
                    sport: 1000,
                    dport: 80,
                    seq: 1,
                    ack: 0,
                    flags: TCP_SYN,
                    payload: vec![],
                },
            }),
        };
        let b = f.build();
        assert_eq!(Frame::parse(&b), Some(f));
        assert_eq!(csum(&b[14..34]), 0);
        let parsed = hf_wire::parse(&b, 0, 0).unwrap();
        assert!(hf_wire::checksums_valid(&b, &parsed));
    }

    #[test]
    fn ipv6_frames_decode_to_themselves_with_valid_checksums() {
        for l4 in [
            L4::Tcp {
                sport: 1000,
                dport: 80,
                seq: 1,
                ack: 0,
                flags: TCP_SYN,
                payload: b"x".to_vec(),
            },
            L4::Udp {
                sport: 1000,
                dport: 53,
                payload: b"holdfast".to_vec(),
            },
            L4::Icmp {
                ty: 128,
                code: 0,
                rest: [0, 1, 0, 1],
                payload: b"holdfast".to_vec(),
            },
        ] {
            let f = Frame {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                body: Body::Ip6(Ip6 {
                    src: "fd00:1::10".parse().unwrap(),
                    dst: "fd00:2::11".parse().unwrap(),
                    hlim: 64,
                    tc: 0,
                    flow_label: 0,
                    l4,
                }),
            };
            let b = f.build();
            assert_eq!(Frame::parse(&b), Some(f));
            let parsed = hf_wire::parse(&b, 0, 0).unwrap();
            assert!(hf_wire::checksums_valid(&b, &parsed), "{}", describe(&b));
        }
    }
}
