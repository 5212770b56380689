//! Connection tuples: what identifies one direction of a connection in a zone.

use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hf_wire::{Parsed, frag, ip_proto};
use serde::{Deserialize, Serialize};

/// One direction of a connection: zone, protocol, addresses and ports.
///
/// Addresses are stored as 16 bytes (IPv4 as IPv4-mapped IPv6) with a family flag. For ICMP
/// queries `sport` is the identifier and `dport` the request type (echo request for both an echo
/// request and its reply), so the reply direction's tuple is the original with addresses swapped
/// and the same `sport`/`dport`. For protocols without ports both are zero.
#[derive(Debug, Clone, Copy, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Tuple {
    /// Source address (16 bytes; IPv4 mapped).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port, or ICMP identifier.
    pub sport: u16,
    /// Destination port, or ICMP request type.
    pub dport: u16,
    /// Conntrack zone.
    pub zone: u16,
    /// IP protocol.
    pub proto: u8,
    /// True for IPv6.
    pub v6: bool,
}

impl Hash for Tuple {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u128(u128::from_ne_bytes(self.src));
        h.write_u128(u128::from_ne_bytes(self.dst));
        h.write_u64(self.packed_rest());
    }
}

/// Field-by-field equality (what a derive gives), compared as two 16-byte words and one
/// 8-byte word: the per-packet lookup compares a tuple with its entry's, and the derived form
/// compared the arrays and the five small fields one by one.
impl PartialEq for Tuple {
    #[inline(always)]
    fn eq(&self, o: &Tuple) -> bool {
        let a = (u128::from_ne_bytes(self.src) ^ u128::from_ne_bytes(o.src))
            | (u128::from_ne_bytes(self.dst) ^ u128::from_ne_bytes(o.dst));
        a == 0 && self.packed_rest() == o.packed_rest()
    }
}

/// The IPv4-mapped 16-byte form of `a`, built as one integer (the per-byte form of
/// `to_ipv6_mapped().octets()` compiles to sixteen byte stores, which stall the 16-byte loads
/// that compare and hash the tuple right after).
#[inline(always)]
pub(crate) fn mapped4(a: Ipv4Addr) -> [u8; 16] {
    (0xffff_u128 << 32 | u128::from(u32::from(a))).to_be_bytes()
}

/// The 16-byte form of an address.
pub(crate) fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

fn ip_of(b: [u8; 16], v6: bool) -> IpAddr {
    let a = Ipv6Addr::from(b);
    if v6 {
        IpAddr::V6(a)
    } else {
        let o = a.octets();
        IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]))
    }
}

/// The request type an ICMP query or reply type belongs to; `None` for types that cannot be part
/// of a query/reply exchange.
pub(crate) fn icmp_query_type(v6: bool, ty: u8) -> Option<(u8, bool)> {
    // (request type, is_request)
    if v6 {
        match ty {
            128 => Some((128, true)),
            129 => Some((128, false)),
            _ => None,
        }
    } else {
        match ty {
            8 | 13 | 15 | 17 => Some((ty, true)),
            0 => Some((8, false)),
            14 | 16 | 18 => Some((ty - 1, false)),
            _ => None,
        }
    }
}

impl Tuple {
    /// Ports, zone, protocol and family in one word (a bijection: equal words, equal fields).
    #[inline(always)]
    pub(crate) fn packed_rest(&self) -> u64 {
        u64::from(self.sport)
            | u64::from(self.dport) << 16
            | u64::from(self.zone) << 32
            | u64::from(self.proto) << 48
            | u64::from(self.v6) << 56
    }

    /// True when `self` is not greater than [`Tuple::invert`]`(self)`, computed without building
    /// the inverse: the derived order compares `src` (against the inverse's `src`, our `dst`)
    /// first, then the ports, and every other field is the same on both sides.
    #[inline(always)]
    pub(crate) fn le_inverse(&self) -> bool {
        let (s, d) = (u128::from_be_bytes(self.src), u128::from_be_bytes(self.dst));
        s < d || (s == d && (self.is_icmp() || self.sport <= self.dport))
    }

    /// A tuple from addresses and ports (the address families must agree; IPv4 wins otherwise).
    pub fn new(zone: u16, proto: u8, src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Tuple {
        Tuple {
            src: addr16(src),
            dst: addr16(dst),
            sport,
            dport,
            zone,
            proto,
            v6: src.is_ipv6() && dst.is_ipv6(),
        }
    }

    /// Source address.
    pub fn src_ip(&self) -> IpAddr {
        ip_of(self.src, self.v6)
    }

    /// Destination address.
    pub fn dst_ip(&self) -> IpAddr {
        ip_of(self.dst, self.v6)
    }

    /// True for ICMP/ICMPv6 query tuples, whose "ports" do not swap on inversion.
    pub fn is_icmp(&self) -> bool {
        matches!(self.proto, ip_proto::ICMP | ip_proto::ICMPV6)
    }

    /// The tuple of the opposite direction (no NAT).
    pub fn invert(&self) -> Tuple {
        let (sport, dport) = if self.is_icmp() {
            (self.sport, self.dport)
        } else {
            (self.dport, self.sport)
        };
        Tuple {
            src: self.dst,
            dst: self.src,
            sport,
            dport,
            ..*self
        }
    }

    /// True when either address of the tuple is `a`.
    pub fn involves(&self, a: IpAddr) -> bool {
        let b = addr16(a);
        a.is_ipv6() == self.v6 && (self.src == b || self.dst == b)
    }
}

/// How a packet relates to conntrack, before any lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extracted {
    /// A packet conntrack tracks by its own tuple; `query_reply` marks ICMP replies, which can
    /// never start a connection.
    Own { tuple: Tuple, query_reply: bool },
    /// An ICMP error: look up this tuple (the inverse of the quoted packet's).
    Related(Tuple),
    /// Not trackable: not IP, a fragment (no defragmentation), an ICMP type that is neither query
    /// nor error, or an error without a usable quote.
    Invalid,
}

/// Extracts the conntrack view of a parsed packet.
#[inline(always)]
pub(crate) fn extract(zone: u16, p: &Parsed) -> Extracted {
    let k = &p.key;
    let v6 = k.is_ipv6();
    if !(k.is_ipv4() || v6) || k.ip_frag & frag::ANY != 0 {
        return Extracted::Invalid;
    }
    let (src, dst) = if v6 {
        (k.ip6_src.octets(), k.ip6_dst.octets())
    } else {
        (mapped4(k.ip4_src), mapped4(k.ip4_dst))
    };
    let mut t = Tuple {
        src,
        dst,
        sport: 0,
        dport: 0,
        zone,
        proto: k.ip_proto,
        v6,
    };
    let icmp = if v6 { ip_proto::ICMPV6 } else { ip_proto::ICMP };
    match k.ip_proto {
        ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP => {
            if !p.has_l4() {
                return Extracted::Invalid;
            }
            t.sport = k.tp_src;
            t.dport = k.tp_dst;
        }
        proto if proto == icmp => {
            if !p.has_l4() {
                return Extracted::Invalid;
            }
            if let Some((req, is_req)) = icmp_query_type(v6, k.icmp_type) {
                t.sport = p.icmp_id;
                t.dport = u16::from(req);
                return Extracted::Own {
                    tuple: t,
                    query_reply: !is_req,
                };
            }
            return match p.inner {
                Some(i) if i.src.is_ipv6() == v6 && i.l4 != 0 => {
                    let mut q = Tuple::new(zone, i.proto, i.src, i.tp_src, i.dst, i.tp_dst);
                    if i.proto == icmp {
                        match icmp_query_type(v6, i.icmp_type) {
                            Some((req, _)) => {
                                q.sport = i.icmp_id;
                                q.dport = u16::from(req);
                            }
                            None => return Extracted::Invalid,
                        }
                    }
                    Extracted::Related(q.invert())
                }
                _ => Extracted::Invalid,
            };
        }
        _ => {}
    }
    Extracted::Own {
        tuple: t,
        query_reply: false,
    }
}
