//! NAT header rewrites with incremental checksum updates (RFC 1624).
//!
//! [`apply_nat`] changes addresses and ports (or the ICMP query identifier) in place and keeps the
//! IPv4 header checksum and the L4 checksum (TCP, UDP, ICMP, ICMPv6, including the pseudo-header)
//! valid without re-summing the packet. For ICMP errors it also rewrites the quoted packet
//! (`inner_*` fields), as conntrack asks for related traffic.

use std::net::IpAddr;

use crate::checksum::{checksum_adjust, fold, pseudo_header_sum, sum_words};
use crate::parse::{Parsed, ip_proto};

/// The header changes conntrack asks for; `None` leaves a field alone.
///
/// For ICMP queries (echo and friends) `sport` and `dport` both mean the query identifier: set one.
/// The `inner_*` fields apply to the packet quoted inside an ICMP error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NatRewrite {
    /// New IP source.
    pub src: Option<IpAddr>,
    /// New IP destination.
    pub dst: Option<IpAddr>,
    /// New L4 source port (or ICMP identifier).
    pub sport: Option<u16>,
    /// New L4 destination port (or ICMP identifier).
    pub dport: Option<u16>,
    /// New source of the packet quoted in an ICMP error.
    pub inner_src: Option<IpAddr>,
    /// New destination of the quoted packet.
    pub inner_dst: Option<IpAddr>,
    /// New source port of the quoted packet.
    pub inner_sport: Option<u16>,
    /// New destination port of the quoted packet.
    pub inner_dport: Option<u16>,
}

impl NatRewrite {
    /// True when the rewrite changes nothing. Field by field (every field is an `Option`), not a
    /// comparison with a built default: this runs on every conntrack result.
    #[inline]
    pub fn is_empty(&self) -> bool {
        let NatRewrite {
            src,
            dst,
            sport,
            dport,
            inner_src,
            inner_dst,
            inner_sport,
            inner_dport,
        } = self;
        src.is_none()
            && dst.is_none()
            && sport.is_none()
            && dport.is_none()
            && inner_src.is_none()
            && inner_dst.is_none()
            && inner_sport.is_none()
            && inner_dport.is_none()
    }

    fn touches_inner(&self) -> bool {
        self.inner_src.is_some()
            || self.inner_dst.is_some()
            || self.inner_sport.is_some()
            || self.inner_dport.is_some()
    }
}

/// Why [`apply_nat`] refused a rewrite. The frame is left unchanged.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    /// The frame is shorter than the [`Parsed`] value says: they do not belong together.
    #[error("the frame does not match its parsed layout")]
    LayoutMismatch,
    /// An address of the other IP family (NAT46/64 is not supported).
    #[error("address family of the rewrite differs from the packet's")]
    FamilyMismatch,
    /// Ports were asked for but the packet has no rewritable ports (no L4 header, or SCTP).
    #[error("the packet has no ports to rewrite")]
    NoPorts,
    /// Inner fields were asked for but the packet is not an ICMP error with a quoted packet.
    #[error("the packet has no quoted packet to rewrite")]
    NoInner,
}

/// Where the L4 checksum of a packet lives and whether it covers the IP pseudo-header.
#[derive(Clone, Copy)]
struct L4Csum {
    at: usize,
    pseudo: bool,
    /// UDP over IPv4: zero means "no checksum" and must stay zero.
    udp4: bool,
}

fn l4_csum(proto: u8, v6: bool, l4: usize, end: usize) -> Option<L4Csum> {
    let (at, pseudo) = match proto {
        ip_proto::TCP => (l4 + 16, true),
        ip_proto::UDP => (l4 + 6, true),
        ip_proto::ICMP if !v6 => (l4 + 2, false),
        ip_proto::ICMPV6 if v6 => (l4 + 2, true),
        _ => return None,
    };
    (l4 != 0 && at + 2 <= end).then_some(L4Csum {
        at,
        pseudo,
        udp4: proto == ip_proto::UDP && !v6,
    })
}

fn read16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

fn write16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Adjusts the checksum at `cs` for bytes changing from `old` to `new`.
fn adjust(f: &mut [u8], cs: L4Csum, old: &[u8], new: &[u8]) {
    let cur = read16(f, cs.at);
    if cs.udp4 && cur == 0 {
        return;
    }
    let mut v = checksum_adjust(cur, old, new);
    if cs.udp4 && v == 0 {
        v = 0xffff;
    }
    write16(f, cs.at, v);
}

fn octets(a: IpAddr) -> ([u8; 16], usize) {
    match a {
        IpAddr::V4(v) => {
            let mut o = [0; 16];
            o[..4].copy_from_slice(&v.octets());
            (o, 4)
        }
        IpAddr::V6(v) => (v.octets(), 16),
    }
}

/// Rewrites the address at `at` (an IPv4 or IPv6 header at `l3`), fixing the IPv4 header checksum
/// and the pseudo-header part of `l4`'s checksum.
fn rewrite_addr(f: &mut [u8], l3: usize, at: usize, new: IpAddr, v4: bool, l4: Option<L4Csum>) {
    let (new, n) = octets(new);
    let mut old = [0u8; 16];
    old[..n].copy_from_slice(&f[at..at + n]);
    if old[..n] == new[..n] {
        return;
    }
    if v4 {
        let cur = read16(f, l3 + 10);
        write16(f, l3 + 10, checksum_adjust(cur, &old[..n], &new[..n]));
    }
    if let Some(cs) = l4.filter(|c| c.pseudo) {
        adjust(f, cs, &old[..n], &new[..n]);
    }
    f[at..at + n].copy_from_slice(&new[..n]);
}

fn rewrite16(f: &mut [u8], at: usize, new: u16, l4: Option<L4Csum>) {
    let old = read16(f, at);
    if old == new {
        return;
    }
    if let Some(cs) = l4 {
        adjust(f, cs, &old.to_be_bytes(), &new.to_be_bytes());
    }
    write16(f, at, new);
}

fn family_ok(a: Option<IpAddr>, v6: bool) -> bool {
    a.is_none_or(|a| a.is_ipv6() == v6)
}

/// Applies `rw` to `frame` in place and updates `p` to match. Checksums are updated
/// incrementally; on error nothing is written.
pub fn apply_nat(frame: &mut [u8], p: &mut Parsed, rw: &NatRewrite) -> Result<(), RewriteError> {
    let (l3, l4, end) = (
        usize::from(p.layout.l3),
        usize::from(p.layout.l4),
        usize::from(p.layout.end),
    );
    let v6 = p.key.is_ipv6();
    if !(p.key.is_ipv4() || v6) || frame.len() < end || l3 + if v6 { 40 } else { 20 } > end {
        return Err(RewriteError::LayoutMismatch);
    }
    if !(family_ok(rw.src, v6) && family_ok(rw.dst, v6)) {
        return Err(RewriteError::FamilyMismatch);
    }
    let proto = p.key.ip_proto;
    let is_query = matches!(proto, ip_proto::ICMP | ip_proto::ICMPV6) && p.inner.is_none();
    let ports = l4 != 0 && (matches!(proto, ip_proto::TCP | ip_proto::UDP) || is_query);
    if (rw.sport.is_some() || rw.dport.is_some()) && !ports {
        return Err(RewriteError::NoPorts);
    }
    if l4 != 0 && (l4 < l3 || l4 + 8 > end) {
        return Err(RewriteError::LayoutMismatch);
    }
    let inner = match (rw.touches_inner(), p.inner) {
        (false, _) => None,
        (true, Some(i)) if l4 != 0 => {
            let iv6 = i.src.is_ipv6();
            if !(family_ok(rw.inner_src, iv6) && family_ok(rw.inner_dst, iv6)) {
                return Err(RewriteError::FamilyMismatch);
            }
            if (rw.inner_sport.is_some() || rw.inner_dport.is_some()) && i.l4 == 0 {
                return Err(RewriteError::NoPorts);
            }
            let (il3, il4) = (usize::from(i.l3), usize::from(i.l4));
            let ihdr = if iv6 { 40 } else { 20 };
            if il3 < l4 + 8 || il3 + ihdr > end || (il4 != 0 && (il4 < il3 || il4 + 8 > end)) {
                return Err(RewriteError::LayoutMismatch);
            }
            Some(i)
        }
        (true, _) => return Err(RewriteError::NoInner),
    };
    let f = &mut frame[..end];
    let cs = l4_csum(proto, v6, l4, end);
    let (src_at, dst_at) = if v6 {
        (l3 + 8, l3 + 24)
    } else {
        (l3 + 12, l3 + 16)
    };
    if let Some(a) = rw.src {
        rewrite_addr(f, l3, src_at, a, !v6, cs);
        set_key_addr(&mut p.key, a, true);
    }
    if let Some(a) = rw.dst {
        rewrite_addr(f, l3, dst_at, a, !v6, cs);
        set_key_addr(&mut p.key, a, false);
    }
    if is_query {
        if let Some(id) = rw.sport.or(rw.dport) {
            rewrite16(f, l4 + 4, id, cs);
            p.icmp_id = id;
        }
    } else {
        if let Some(port) = rw.sport {
            rewrite16(f, l4, port, cs);
            p.key.tp_src = port;
        }
        if let Some(port) = rw.dport {
            rewrite16(f, l4 + 2, port, cs);
            p.key.tp_dst = port;
        }
    }
    if let Some(mut i) = inner {
        rewrite_inner(f, &mut i, rw);
        // The ICMP checksum covers the quote: re-sum the message (errors are rare and short).
        if let Some(cs) = cs {
            write16(f, cs.at, 0);
            let mut acc = sum_words(0, &f[l4..end]);
            if cs.pseudo {
                let (s, d) = (p.key.ip_src(), p.key.ip_dst());
                if let (Some(s), Some(d)) = (s, d) {
                    acc = acc.wrapping_add(pseudo_header_sum(s, d, proto, (end - l4) as u32));
                }
            }
            write16(f, cs.at, !fold(acc));
        }
        p.inner = Some(i);
    }
    Ok(())
}

fn rewrite_inner(f: &mut [u8], i: &mut crate::parse::InnerHeaders, rw: &NatRewrite) {
    let (l3, l4, end) = (usize::from(i.l3), usize::from(i.l4), f.len());
    let v6 = i.src.is_ipv6();
    // The quoted L4 checksum is only updated when the quote contains it.
    let cs = if l4 == 0 {
        None
    } else {
        l4_csum(i.proto, v6, l4, end)
    };
    let (src_at, dst_at) = if v6 {
        (l3 + 8, l3 + 24)
    } else {
        (l3 + 12, l3 + 16)
    };
    if let Some(a) = rw.inner_src {
        rewrite_addr(f, l3, src_at, a, !v6, cs);
        i.src = a;
    }
    if let Some(a) = rw.inner_dst {
        rewrite_addr(f, l3, dst_at, a, !v6, cs);
        i.dst = a;
    }
    if l4 == 0 {
        return;
    }
    if matches!(i.proto, ip_proto::ICMP | ip_proto::ICMPV6) {
        if let Some(id) = rw.inner_sport.or(rw.inner_dport) {
            rewrite16(f, l4 + 4, id, cs);
            i.icmp_id = id;
        }
        return;
    }
    if let Some(port) = rw.inner_sport {
        rewrite16(f, l4, port, cs);
        i.tp_src = port;
    }
    if let Some(port) = rw.inner_dport {
        rewrite16(f, l4 + 2, port, cs);
        i.tp_dst = port;
    }
}

fn set_key_addr(k: &mut crate::FlowKey, a: IpAddr, src: bool) {
    match (a, src) {
        (IpAddr::V4(a), true) => k.ip4_src = a,
        (IpAddr::V4(a), false) => k.ip4_dst = a,
        (IpAddr::V6(a), true) => k.ip6_src = a,
        (IpAddr::V6(a), false) => k.ip6_dst = a,
    }
}
