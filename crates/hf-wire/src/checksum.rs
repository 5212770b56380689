//! The Internet checksum ([RFC 1071](https://www.rfc-editor.org/rfc/rfc1071)) and its incremental
//! update ([RFC 1624](https://www.rfc-editor.org/rfc/rfc1624), eqn. 3: `HC' = ~(~HC + ~m + m')`).

use std::net::IpAddr;

/// Adds `data` as big-endian 16-bit words into a 32-bit accumulator (odd tail padded with zero).
pub(crate) fn sum_words(mut acc: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
        // Fold early so the accumulator never overflows, whatever the length.
        acc = (acc & 0xffff) + (acc >> 16);
    }
    if let [last] = chunks.remainder() {
        acc = acc.wrapping_add(u32::from(*last) << 8);
    }
    acc
}

pub(crate) fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum of `data` (the value to store in a checksum field that was zero while
/// summing).
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum_words(0, data))
}

/// `data` summed onto `acc` (e.g. a [`pseudo_header_sum`]) and folded, not inverted: data whose
/// checksum verifies sums to `0xffff`; inverted, it is the checksum to store (the field zero).
pub fn sum_with(acc: u32, data: &[u8]) -> u16 {
    fold(sum_words(acc, data))
}

/// The one's-complement sum of the TCP/UDP/ICMPv6 pseudo-header (not inverted): add the L4 bytes
/// as 16-bit words, fold, and invert to get the checksum.
pub fn pseudo_header_sum(src: IpAddr, dst: IpAddr, proto: u8, l4_len: u32) -> u32 {
    let mut acc = 0;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum_words(acc, &s.octets());
            acc = sum_words(acc, &d.octets());
        }
        (s, d) => {
            acc = sum_words(acc, &ip_octets16(s));
            acc = sum_words(acc, &ip_octets16(d));
        }
    }
    acc = acc.wrapping_add(u32::from(proto));
    acc = acc.wrapping_add(l4_len >> 16).wrapping_add(l4_len & 0xffff);
    acc
}

fn ip_octets16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// Updates checksum `cs` for a field that changed from `old` to `new` (equal, even lengths; RFC
/// 1624 eqn. 3). Works on any field aligned to 16 bits within the checksummed data.
pub fn checksum_adjust(cs: u16, old: &[u8], new: &[u8]) -> u16 {
    let mut acc = u32::from(!cs);
    for c in old.chunks_exact(2) {
        acc = acc.wrapping_add(u32::from(!u16::from_be_bytes([c[0], c[1]])));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    for c in new.chunks_exact(2) {
        acc = acc.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !fold(acc)
}

/// True when the IPv4 header checksum and the L4 checksum (TCP, UDP, ICMP, ICMPv6) of `frame`
/// verify; a UDP-over-IPv4 checksum of zero ("none") and other protocols count as valid. The
/// datapath does not check on input; this is for tests, traces and debugging.
pub fn checksums_valid(frame: &[u8], p: &crate::Parsed) -> bool {
    use crate::ip_proto;
    let (l3, l4, end) = (
        usize::from(p.layout.l3),
        usize::from(p.layout.l4),
        usize::from(p.layout.end),
    );
    if p.key.is_ipv4() {
        let hlen = frame.get(l3).map_or(0, |b| usize::from(b & 0x0f) * 4);
        match frame.get(l3..l3 + hlen) {
            Some(h) if hlen >= 20 && fold(sum_words(0, h)) == 0xffff => {}
            _ => return false,
        }
    }
    if l4 == 0 {
        return true;
    }
    let Some(seg) = frame.get(l4..end) else {
        return false;
    };
    let proto = p.key.ip_proto;
    let pseudo = match proto {
        ip_proto::TCP | ip_proto::ICMPV6 => true,
        ip_proto::UDP => !(p.key.is_ipv4() && seg.get(6..8) == Some(&[0, 0])),
        ip_proto::ICMP => false,
        _ => return true,
    };
    if proto == ip_proto::UDP && !pseudo {
        return true;
    }
    let mut acc = sum_words(0, seg);
    if pseudo && let (Some(s), Some(d)) = (p.key.ip_src(), p.key.ip_dst()) {
        acc = acc.wrapping_add(pseudo_header_sum(s, d, proto, seg.len() as u32));
    }
    fold(acc) == 0xffff
}
