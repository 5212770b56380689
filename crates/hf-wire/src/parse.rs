//! Frame parsing: bytes to [`Parsed`] (a [`FlowKey`] plus offsets and TCP details), no allocation.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::{array_at, u8_at, u16_at, u32_at};
use crate::key::{EthAddr, FlowKey, frag};
use crate::{Layer, ParseError};

/// Ethertypes the parser knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// Reverse ARP (sent by hypervisors after a live migration).
    pub const RARP: u16 = 0x8035;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag.
    pub const QINQ: u16 = 0x88a8;
    /// Transparent Ethernet bridging (Geneve's protocol type for Ethernet payloads).
    pub const TEB: u16 = 0x6558;
}

/// IP protocol numbers the parser knows.
pub mod ip_proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// SCTP.
    pub const SCTP: u8 = 132;
}

/// Where the headers of a parsed frame start. Offsets are from the start of the frame.
///
/// `l4 == 0` means the frame has no L4 header (not IP, or a non-first fragment); `end` is where
/// the IP datagram ends (Ethernet padding after it is not part of the packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// Start of the L3 header (after Ethernet and VLAN tags).
    pub l3: u16,
    /// Start of the L4 header, or 0 when there is none.
    pub l4: u16,
    /// End of the IP datagram (or of the L3 payload for non-IP frames).
    pub end: u16,
}

/// The TCP fields conntrack's window tracking needs and a classifier does not match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpSegment {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful when ACK is set).
    pub ack: u32,
    /// Advertised window, unscaled.
    pub window: u16,
    /// The window-scale option's shift, when present (SYN segments).
    pub wscale: Option<u8>,
    /// True when the SACK-permitted option is present.
    pub sack_permitted: bool,
    /// Bytes of TCP payload.
    pub payload_len: u16,
}

/// The headers embedded in an ICMP error: the offending packet as its sender sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerHeaders {
    /// Source of the embedded packet.
    pub src: IpAddr,
    /// Destination of the embedded packet.
    pub dst: IpAddr,
    /// Its IP protocol.
    pub proto: u8,
    /// Its L4 source port (TCP/UDP/SCTP), 0 otherwise.
    pub tp_src: u16,
    /// Its L4 destination port (TCP/UDP/SCTP), 0 otherwise.
    pub tp_dst: u16,
    /// Its ICMP type when the embedded packet is ICMP.
    pub icmp_type: u8,
    /// Its ICMP echo identifier when the embedded packet is an ICMP query.
    pub icmp_id: u16,
    /// Offset of the embedded IP header in the frame.
    pub l3: u16,
    /// Offset of the embedded L4 header in the frame (0 when absent from the quote).
    pub l4: u16,
}

/// A parsed frame: the flow key plus what conntrack and NAT need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// The classifier's view.
    pub key: FlowKey,
    /// Header offsets in the frame.
    pub layout: Layout,
    /// TCP details (zero unless the packet is TCP with an L4 header).
    pub tcp: TcpSegment,
    /// ICMP/ICMPv6 query identifier (echo and friends), 0 otherwise.
    pub icmp_id: u16,
    /// For ICMP errors, the embedded packet's headers (when the quote is long enough).
    pub inner: Option<InnerHeaders>,
}

impl Parsed {
    /// True when the packet carries an L4 header.
    pub fn has_l4(&self) -> bool {
        self.layout.l4 != 0
    }
}

/// Largest frame the parser accepts (offsets are `u16`).
pub const MAX_FRAME: usize = u16::MAX as usize;

/// Parses an Ethernet frame received on `in_port` into a [`Parsed`]. Never panics; never allocates.
///
/// Understands Ethernet II with up to two VLAN tags, ARP/RARP, IPv4 (options skipped), IPv6 (hop-by-hop,
/// routing, destination-options and fragment headers walked), TCP (window scale and SACK-permitted
/// options), UDP, SCTP ports, ICMP and ICMPv6 including Neighbor Discovery options and the headers
/// quoted in ICMP errors. Other ethertypes and protocols yield a key with the fields parsed so far.
pub fn parse(frame: &[u8], in_port: u32, metadata: u64) -> Result<Parsed, ParseError> {
    let mut p = Parsed {
        key: FlowKey::new(in_port, metadata),
        layout: Layout::default(),
        tcp: TcpSegment::default(),
        icmp_id: 0,
        inner: None,
    };
    parse_into(frame, in_port, metadata, &mut p)?;
    Ok(p)
}

/// [`parse`] into a caller's [`Parsed`] (the packet path's context), so the parse is not
/// returned by value and copied again. On success `p` describes `frame` exactly as [`parse`]'s
/// result would; on an error its contents are unspecified (but valid). Never panics; never
/// allocates.
pub fn parse_into(
    frame: &[u8],
    in_port: u32,
    metadata: u64,
    p: &mut Parsed,
) -> Result<(), ParseError> {
    if frame.len() > MAX_FRAME {
        return Err(ParseError::Malformed(Layer::Ethernet));
    }
    *p = Parsed {
        key: FlowKey::new(in_port, metadata),
        layout: Layout::default(),
        tcp: TcpSegment::default(),
        icmp_id: 0,
        inner: None,
    };
    let trunc = |l| ParseError::Truncated(l);
    p.key.eth_dst = EthAddr(array_at(frame, 0).ok_or(trunc(Layer::Ethernet))?);
    p.key.eth_src = EthAddr(array_at(frame, 6).ok_or(trunc(Layer::Ethernet))?);
    let mut ty = u16_at(frame, 12).ok_or(trunc(Layer::Ethernet))?;
    let mut off = 14usize;
    let mut tags = 0;
    while ty == ethertype::VLAN || ty == ethertype::QINQ {
        if tags == 2 {
            return Err(ParseError::Malformed(Layer::Vlan));
        }
        let tci = u16_at(frame, off).ok_or(trunc(Layer::Vlan))?;
        if tags == 0 {
            p.key.vlan_tci = tci | 0x1000;
        }
        ty = u16_at(frame, off + 2).ok_or(trunc(Layer::Vlan))?;
        off += 4;
        tags += 1;
    }
    p.key.eth_type = ty;
    // Offsets fit in u16: the frame length was checked above.
    p.layout.l3 = off as u16;
    p.layout.end = frame.len() as u16;
    match ty {
        ethertype::ARP | ethertype::RARP => parse_arp(frame, off, p)?,
        ethertype::IPV4 => parse_ipv4(frame, off, p)?,
        ethertype::IPV6 => parse_ipv6(frame, off, p)?,
        _ => {}
    }
    Ok(())
}

fn parse_arp(frame: &[u8], off: usize, p: &mut Parsed) -> Result<(), ParseError> {
    let arp = frame.get(off..).unwrap_or_default();
    if arp.len() < 28 {
        return Err(ParseError::Truncated(Layer::Arp));
    }
    let (htype, ptype) = (u16_at(arp, 0), u16_at(arp, 2));
    if htype != Some(1) || ptype != Some(ethertype::IPV4) || arp[4] != 6 || arp[5] != 4 {
        return Err(ParseError::Malformed(Layer::Arp));
    }
    let k = &mut p.key;
    k.arp_op = u16_at(arp, 6).unwrap_or_default();
    k.arp_sha = EthAddr(array_at(arp, 8).unwrap_or_default());
    k.arp_spa = Ipv4Addr::from(array_at::<4>(arp, 14).unwrap_or_default());
    k.arp_tha = EthAddr(array_at(arp, 18).unwrap_or_default());
    k.arp_tpa = Ipv4Addr::from(array_at::<4>(arp, 24).unwrap_or_default());
    p.layout.end = (off + 28) as u16;
    Ok(())
}

/// An IPv4 header's facts, shared by the outer parser and the ICMP-error quote parser.
struct Ipv4Hdr {
    hlen: usize,
    total: usize,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    frag_off: u16,
    more_frags: bool,
}

fn ipv4_header(b: &[u8]) -> Result<Ipv4Hdr, ParseError> {
    let vihl = u8_at(b, 0).ok_or(ParseError::Truncated(Layer::Ipv4))?;
    if vihl >> 4 != 4 {
        return Err(ParseError::Malformed(Layer::Ipv4));
    }
    let hlen = usize::from(vihl & 0x0f) * 4;
    if hlen < 20 {
        return Err(ParseError::Malformed(Layer::Ipv4));
    }
    if b.len() < hlen {
        return Err(ParseError::Truncated(Layer::Ipv4));
    }
    let total = usize::from(u16_at(b, 2).unwrap_or_default());
    if total < hlen {
        return Err(ParseError::Malformed(Layer::Ipv4));
    }
    let ff = u16_at(b, 6).unwrap_or_default();
    Ok(Ipv4Hdr {
        hlen,
        total,
        proto: b[9],
        src: Ipv4Addr::from(array_at::<4>(b, 12).unwrap_or_default()),
        dst: Ipv4Addr::from(array_at::<4>(b, 16).unwrap_or_default()),
        frag_off: ff & 0x1fff,
        more_frags: ff & 0x2000 != 0,
    })
}

fn parse_ipv4(frame: &[u8], off: usize, p: &mut Parsed) -> Result<(), ParseError> {
    let b = frame.get(off..).unwrap_or_default();
    let h = ipv4_header(b)?;
    if b.len() < h.total {
        return Err(ParseError::Truncated(Layer::Ipv4));
    }
    let k = &mut p.key;
    k.ip4_src = h.src;
    k.ip4_dst = h.dst;
    k.ip_proto = h.proto;
    k.ip_tos = b[1];
    k.ip_ttl = b[8];
    if h.frag_off != 0 || h.more_frags {
        k.ip_frag |= frag::ANY;
    }
    if h.frag_off != 0 {
        k.ip_frag |= frag::LATER;
    }
    let end = off + h.total;
    p.layout.end = end as u16;
    if h.frag_off != 0 {
        return Ok(());
    }
    parse_l4(frame, off + h.hlen, end, false, p)
}

fn is_ipv6_ext(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 60)
}

/// Walks IPv6 extension headers from `off` (the first header's type is `nh`). Returns the final
/// next-header value, the L4 offset and the fragment bits.
fn walk_ipv6_ext(b: &[u8], mut nh: u8, mut off: usize) -> Result<(u8, usize, u8), ParseError> {
    let mut fragbits = 0;
    for _ in 0..8 {
        if !is_ipv6_ext(nh) {
            return Ok((nh, off, fragbits));
        }
        let next = u8_at(b, off).ok_or(ParseError::Truncated(Layer::Ipv6))?;
        let len = if nh == 44 {
            let fo = u16_at(b, off + 2).ok_or(ParseError::Truncated(Layer::Ipv6))?;
            fragbits |= frag::ANY;
            if fo >> 3 != 0 {
                fragbits |= frag::LATER;
            }
            8
        } else {
            let l = u8_at(b, off + 1).ok_or(ParseError::Truncated(Layer::Ipv6))?;
            (usize::from(l) + 1) * 8
        };
        if b.len() < off + len {
            return Err(ParseError::Truncated(Layer::Ipv6));
        }
        nh = next;
        off += len;
        if fragbits & frag::LATER != 0 {
            return Ok((nh, off, fragbits));
        }
    }
    Err(ParseError::Malformed(Layer::Ipv6))
}

fn parse_ipv6(frame: &[u8], off: usize, p: &mut Parsed) -> Result<(), ParseError> {
    let b = frame.get(off..).unwrap_or_default();
    if b.len() < 40 {
        return Err(ParseError::Truncated(Layer::Ipv6));
    }
    if b[0] >> 4 != 6 {
        return Err(ParseError::Malformed(Layer::Ipv6));
    }
    let plen = usize::from(u16_at(b, 4).unwrap_or_default());
    if b.len() < 40 + plen {
        return Err(ParseError::Truncated(Layer::Ipv6));
    }
    let b = &b[..40 + plen];
    let k = &mut p.key;
    k.ip_tos = (b[0] << 4) | (b[1] >> 4);
    k.ip6_label = u32_at(b, 0).unwrap_or_default() & 0x000f_ffff;
    k.ip_ttl = b[7];
    k.ip6_src = Ipv6Addr::from(array_at::<16>(b, 8).unwrap_or_default());
    k.ip6_dst = Ipv6Addr::from(array_at::<16>(b, 24).unwrap_or_default());
    let (nh, l4, fragbits) = walk_ipv6_ext(b, b[6], 40)?;
    k.ip_proto = nh;
    k.ip_frag = fragbits;
    let end = off + 40 + plen;
    p.layout.end = end as u16;
    if fragbits & frag::LATER != 0 {
        return Ok(());
    }
    parse_l4(frame, off + l4, end, true, p)
}

fn parse_l4(
    frame: &[u8],
    l4: usize,
    end: usize,
    v6: bool,
    p: &mut Parsed,
) -> Result<(), ParseError> {
    let b = frame.get(l4..end).unwrap_or_default();
    p.layout.l4 = l4 as u16;
    match p.key.ip_proto {
        ip_proto::TCP => parse_tcp(b, p),
        ip_proto::UDP => {
            if b.len() < 8 {
                return Err(ParseError::Truncated(Layer::Udp));
            }
            p.key.tp_src = u16_at(b, 0).unwrap_or_default();
            p.key.tp_dst = u16_at(b, 2).unwrap_or_default();
            Ok(())
        }
        ip_proto::SCTP => {
            if b.len() < 12 {
                return Err(ParseError::Truncated(Layer::Sctp));
            }
            p.key.tp_src = u16_at(b, 0).unwrap_or_default();
            p.key.tp_dst = u16_at(b, 2).unwrap_or_default();
            Ok(())
        }
        ip_proto::ICMP if !v6 => parse_icmp4(frame, l4, end, p),
        ip_proto::ICMPV6 if v6 => parse_icmp6(frame, l4, end, p),
        _ => {
            // Unknown L4: no header to describe.
            p.layout.l4 = 0;
            Ok(())
        }
    }
}

fn parse_tcp(b: &[u8], p: &mut Parsed) -> Result<(), ParseError> {
    if b.len() < 20 {
        return Err(ParseError::Truncated(Layer::Tcp));
    }
    let doff = usize::from(b[12] >> 4) * 4;
    if doff < 20 {
        return Err(ParseError::Malformed(Layer::Tcp));
    }
    if b.len() < doff {
        return Err(ParseError::Truncated(Layer::Tcp));
    }
    p.key.tp_src = u16_at(b, 0).unwrap_or_default();
    p.key.tp_dst = u16_at(b, 2).unwrap_or_default();
    p.key.tcp_flags = u16_at(b, 12).unwrap_or_default() & 0x0fff;
    let t = &mut p.tcp;
    t.seq = u32_at(b, 4).unwrap_or_default();
    t.ack = u32_at(b, 8).unwrap_or_default();
    t.window = u16_at(b, 14).unwrap_or_default();
    t.payload_len = (b.len() - doff) as u16;
    // Options: malformed options end the walk (like Linux's tcp_options), they do not fail the frame.
    let opts = &b[20..doff];
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&len) = opts.get(i + 1) else { break };
                let len = usize::from(len);
                if len < 2 || i + len > opts.len() {
                    break;
                }
                match (kind, len) {
                    (3, 3) => t.wscale = Some(opts[i + 2].min(14)),
                    (4, 2) => t.sack_permitted = true,
                    _ => {}
                }
                i += len;
            }
        }
    }
    Ok(())
}

/// ICMPv4 types whose body is an echo-style identifier (queries and their replies).
fn icmp4_is_query(ty: u8) -> bool {
    matches!(ty, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)
}

/// ICMPv4 error types, which quote the offending packet.
pub(crate) fn icmp4_is_error(ty: u8) -> bool {
    matches!(ty, 3 | 4 | 5 | 11 | 12)
}

/// ICMPv6 error types (RFC 4443 §2.1: types 0-127), of which 1-4 are defined.
pub(crate) fn icmp6_is_error(ty: u8) -> bool {
    matches!(ty, 1..=4)
}

fn parse_icmp4(frame: &[u8], l4: usize, end: usize, p: &mut Parsed) -> Result<(), ParseError> {
    let b = frame.get(l4..end).unwrap_or_default();
    if b.len() < 4 {
        return Err(ParseError::Truncated(Layer::Icmp));
    }
    p.key.icmp_type = b[0];
    p.key.icmp_code = b[1];
    if icmp4_is_query(b[0]) {
        p.icmp_id = u16_at(b, 4).ok_or(ParseError::Truncated(Layer::Icmp))?;
    } else if icmp4_is_error(b[0]) && b.len() >= 8 {
        p.inner = quoted_ipv4(frame, l4 + 8, end);
    }
    Ok(())
}

fn parse_icmp6(frame: &[u8], l4: usize, end: usize, p: &mut Parsed) -> Result<(), ParseError> {
    let b = frame.get(l4..end).unwrap_or_default();
    if b.len() < 4 {
        return Err(ParseError::Truncated(Layer::Icmpv6));
    }
    let ty = b[0];
    p.key.icmp_type = ty;
    p.key.icmp_code = b[1];
    match ty {
        128 | 129 => {
            p.icmp_id = u16_at(b, 4).ok_or(ParseError::Truncated(Layer::Icmpv6))?;
        }
        135 | 136 => {
            if b.len() < 24 {
                return Err(ParseError::Truncated(Layer::Icmpv6));
            }
            p.key.nd_target = Ipv6Addr::from(array_at::<16>(b, 8).unwrap_or_default());
            let mut i = 24;
            while i < b.len() {
                let (Some(otype), Some(olen)) = (u8_at(b, i), u8_at(b, i + 1)) else {
                    return Err(ParseError::Truncated(Layer::Icmpv6));
                };
                let olen = usize::from(olen) * 8;
                if olen == 0 {
                    return Err(ParseError::Malformed(Layer::Icmpv6));
                }
                if i + olen > b.len() {
                    return Err(ParseError::Truncated(Layer::Icmpv6));
                }
                if olen == 8 {
                    let mac = EthAddr(array_at(b, i + 2).unwrap_or_default());
                    match (ty, otype) {
                        (135, 1) => p.key.nd_sll = mac,
                        (136, 2) => p.key.nd_tll = mac,
                        _ => {}
                    }
                }
                i += olen;
            }
        }
        _ if icmp6_is_error(ty) && b.len() >= 8 => p.inner = quoted_ipv6(frame, l4 + 8, end),
        _ => {}
    }
    Ok(())
}

/// The quoted L4 ports or ICMP id of an ICMP error's embedded packet.
fn quoted_l4(frame: &[u8], l4: usize, end: usize, inner: &mut InnerHeaders) {
    let q = frame.get(l4..end).unwrap_or_default();
    match inner.proto {
        ip_proto::TCP | ip_proto::UDP | ip_proto::SCTP if q.len() >= 8 => {
            inner.tp_src = u16_at(q, 0).unwrap_or_default();
            inner.tp_dst = u16_at(q, 2).unwrap_or_default();
            inner.l4 = l4 as u16;
        }
        ip_proto::ICMP | ip_proto::ICMPV6 if q.len() >= 8 => {
            inner.icmp_type = q[0];
            inner.icmp_id = u16_at(q, 4).unwrap_or_default();
            inner.l4 = l4 as u16;
        }
        _ => {}
    }
}

fn quoted_ipv4(frame: &[u8], l3: usize, end: usize) -> Option<InnerHeaders> {
    let b = frame.get(l3..end)?;
    // The quote is usually cut short, so only the header itself must be present.
    let h = ipv4_header(b).ok()?;
    let mut inner = InnerHeaders {
        src: h.src.into(),
        dst: h.dst.into(),
        proto: h.proto,
        tp_src: 0,
        tp_dst: 0,
        icmp_type: 0,
        icmp_id: 0,
        l3: l3 as u16,
        l4: 0,
    };
    if h.frag_off == 0 {
        quoted_l4(frame, l3 + h.hlen, end, &mut inner);
    }
    Some(inner)
}

fn quoted_ipv6(frame: &[u8], l3: usize, end: usize) -> Option<InnerHeaders> {
    let b = frame.get(l3..end)?;
    if b.len() < 40 || b[0] >> 4 != 6 {
        return None;
    }
    let (nh, l4, fragbits) = walk_ipv6_ext(b, b[6], 40).ok()?;
    let mut inner = InnerHeaders {
        src: Ipv6Addr::from(array_at::<16>(b, 8)?).into(),
        dst: Ipv6Addr::from(array_at::<16>(b, 24)?).into(),
        proto: nh,
        tp_src: 0,
        tp_dst: 0,
        icmp_type: 0,
        icmp_id: 0,
        l3: l3 as u16,
        l4: 0,
    };
    if fragbits & frag::LATER == 0 {
        quoted_l4(frame, l3 + l4, end, &mut inner);
    }
    Some(inner)
}
