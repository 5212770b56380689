//! Geneve ([RFC 8926](https://www.rfc-editor.org/rfc/rfc8926)) as OVN uses it between chassis.
//!
//! The outer frame is Ethernet / IPv4 or IPv6 / UDP to port 6081 / Geneve / the inner Ethernet
//! frame. OVN (ovn-architecture(7), "Tunnel Encapsulations") puts the 24-bit logical datapath key
//! in the VNI and the logical ports in one option of class `0x0102`, type `0x80`, 4 bytes long:
//! one reserved bit, the 15-bit logical ingress port key, then the 16-bit logical egress port key.
//!
//! [`GenevePacket`] is a checked view over Geneve bytes in smoltcp's style (no accessor panics
//! once [`GenevePacket::new_checked`] succeeded); [`encapsulate`] and [`decapsulate`] handle whole
//! frames.

use std::net::IpAddr;

use crate::checksum::{fold, pseudo_header_sum, sum_words};
use crate::key::EthAddr;
use crate::parse::{ethertype, ip_proto, parse};
use crate::{Layer, ParseError};

/// Geneve's UDP destination port.
pub const GENEVE_PORT: u16 = 6081;
/// OVN's option class.
pub const OVN_OPT_CLASS: u16 = 0x0102;
/// OVN's option type (the critical bit is set).
pub const OVN_OPT_TYPE: u8 = 0x80;
/// Largest VNI (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;
/// Largest logical ingress port key (15 bits).
pub const MAX_INGRESS_PORT: u16 = (1 << 15) - 1;

/// Bytes a Geneve tunnel with OVN's option adds to a logical frame's L3 size, so
/// `VM-facing MTU = underlay MTU - overhead(outer_ipv6)`: the inner Ethernet header (14, carried
/// as tunnel payload), the outer IPv4 (20) or IPv6 (40) header, UDP (8), Geneve (8) and OVN's
/// metadata option (8): 58 over IPv4, 78 over IPv6. (The outer Ethernet header does not count
/// against an MTU; an inner 802.1Q tag would add 4 more.) OVN documents the same 58.
pub const fn overhead(outer_ipv6: bool) -> u16 {
    let outer_ip = if outer_ipv6 { 40 } else { 20 };
    14 + outer_ip + 8 + 8 + 8
}

/// The largest MTU a VM-facing port can have when its frames leave through a Geneve tunnel over
/// an underlay of `underlay_mtu` (e.g. 1500 -> 1442 over IPv4, 1422 over IPv6); 0 when the
/// underlay is too small to carry anything.
pub const fn inner_mtu(underlay_mtu: u32, outer_ipv6: bool) -> u32 {
    underlay_mtu.saturating_sub(overhead(outer_ipv6) as u32)
}

/// Byte ranges of the fixed Geneve header.
mod field {
    use std::ops::Range;
    pub const VER_OPTLEN: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PROTOCOL: Range<usize> = 2..4;
    pub const VNI: Range<usize> = 4..7;
    pub const OPTIONS: usize = 8;
}

/// A checked view over a Geneve header and its payload.
#[derive(Debug, Clone)]
pub struct GenevePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> GenevePacket<T> {
    /// Wraps `buffer` without checking it; accessors may panic on short buffers.
    pub fn new_unchecked(buffer: T) -> Self {
        GenevePacket { buffer }
    }

    /// Wraps `buffer` after [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self, ParseError> {
        let p = GenevePacket { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the fixed header and the options it announces are present and version is 0.
    pub fn check_len(&self) -> Result<(), ParseError> {
        let b = self.buffer.as_ref();
        if b.len() < field::OPTIONS {
            return Err(ParseError::Truncated(Layer::Geneve));
        }
        if b[field::VER_OPTLEN] >> 6 != 0 {
            return Err(ParseError::Malformed(Layer::Geneve));
        }
        if b.len() < self.header_len() {
            return Err(ParseError::Truncated(Layer::Geneve));
        }
        Ok(())
    }

    /// Length of the header including options.
    pub fn header_len(&self) -> usize {
        field::OPTIONS + usize::from(self.buffer.as_ref()[field::VER_OPTLEN] & 0x3f) * 4
    }

    /// The OAM flag.
    pub fn oam(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }

    /// The critical-options-present flag.
    pub fn critical(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }

    /// The payload's protocol type (0x6558 for Ethernet).
    pub fn protocol(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PROTOCOL];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The 24-bit virtual network identifier.
    pub fn vni(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VNI];
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }

    /// The option bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// The encapsulated payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// OVN's logical port keys carried in the Geneve option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortKeys {
    /// Logical ingress port key (15 bits).
    pub ingress: u16,
    /// Logical egress port key (16 bits).
    pub egress: u16,
}

/// The metadata OVN carries across a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OvnMetadata {
    /// The logical datapath key (24 bits), carried as the VNI.
    pub datapath: u32,
    /// The port keys; `None` when the frame had no OVN option.
    pub ports: Option<PortKeys>,
}

/// A parsed Geneve header as OVN uses it: [`GenevePacket`]'s valid values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveRepr {
    /// OVN's metadata.
    pub meta: OvnMetadata,
    /// The OAM flag.
    pub oam: bool,
}

impl GeneveRepr {
    /// Reads the header: protocol must be Ethernet; unknown critical options are refused as RFC
    /// 8926 §3.5 requires; OVN's option is decoded.
    pub fn parse<T: AsRef<[u8]>>(p: &GenevePacket<T>) -> Result<GeneveRepr, ParseError> {
        if p.protocol() != ethertype::TEB {
            return Err(ParseError::Unexpected(Layer::Geneve));
        }
        let mut ports = None;
        let mut opts = p.options();
        while !opts.is_empty() {
            if opts.len() < 4 {
                return Err(ParseError::Malformed(Layer::Geneve));
            }
            let class = u16::from_be_bytes([opts[0], opts[1]]);
            let ty = opts[2];
            let len = 4 + usize::from(opts[3] & 0x1f) * 4;
            let Some(data) = opts.get(4..len) else {
                return Err(ParseError::Malformed(Layer::Geneve));
            };
            if class == OVN_OPT_CLASS && ty == OVN_OPT_TYPE && data.len() == 4 {
                let v = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                ports = Some(PortKeys {
                    ingress: ((v >> 16) & 0x7fff) as u16,
                    egress: v as u16,
                });
            } else if ty & 0x80 != 0 {
                return Err(ParseError::Malformed(Layer::Geneve));
            }
            opts = &opts[len..];
        }
        Ok(GeneveRepr {
            meta: OvnMetadata {
                datapath: p.vni(),
                ports,
            },
            oam: p.oam(),
        })
    }

    /// Bytes [`Self::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        field::OPTIONS + if self.meta.ports.is_some() { 8 } else { 0 }
    }

    /// The longest header [`Self::emit`] writes (with OVN's option).
    pub const MAX_LEN: usize = field::OPTIONS + 8;

    /// The header [`Self::emit`] appends, in a fixed array: its first [`Self::buffer_len`]
    /// bytes (for writing it in place, in a buffer's headroom, without allocating).
    pub fn to_array(&self) -> [u8; Self::MAX_LEN] {
        let mut a = [0u8; Self::MAX_LEN];
        let optlen = if self.meta.ports.is_some() { 2u8 } else { 0 };
        let flags = if self.oam { 0x80 } else { 0 } | if optlen > 0 { 0x40 } else { 0 };
        let vni = (self.meta.datapath & MAX_VNI).to_be_bytes();
        let t = ethertype::TEB.to_be_bytes();
        a[..8].copy_from_slice(&[optlen, flags, t[0], t[1], vni[1], vni[2], vni[3], 0]);
        if let Some(pk) = self.meta.ports {
            let c = OVN_OPT_CLASS.to_be_bytes();
            let v = (u32::from(pk.ingress & MAX_INGRESS_PORT) << 16) | u32::from(pk.egress);
            let v = v.to_be_bytes();
            a[8..].copy_from_slice(&[c[0], c[1], OVN_OPT_TYPE, 1, v[0], v[1], v[2], v[3]]);
        }
        a
    }

    /// Appends the header (with OVN's option when `meta.ports` is set) to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let optlen = if self.meta.ports.is_some() { 2u8 } else { 0 };
        let flags = if self.oam { 0x80 } else { 0 } | if optlen > 0 { 0x40 } else { 0 };
        out.extend_from_slice(&[optlen, flags]);
        out.extend_from_slice(&ethertype::TEB.to_be_bytes());
        let vni = (self.meta.datapath & MAX_VNI).to_be_bytes();
        out.extend_from_slice(&[vni[1], vni[2], vni[3], 0]);
        if let Some(pk) = self.meta.ports {
            out.extend_from_slice(&OVN_OPT_CLASS.to_be_bytes());
            out.extend_from_slice(&[OVN_OPT_TYPE, 1]);
            let v = (u32::from(pk.ingress & MAX_INGRESS_PORT) << 16) | u32::from(pk.egress);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// The outer headers of a tunnelled frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelOuter {
    /// Outer Ethernet source (the local chassis' NIC).
    pub eth_src: EthAddr,
    /// Outer Ethernet destination (the next hop towards the remote chassis).
    pub eth_dst: EthAddr,
    /// Local tunnel endpoint.
    pub src: IpAddr,
    /// Remote tunnel endpoint (same family as `src`).
    pub dst: IpAddr,
    /// UDP source port (entropy for ECMP; derive it from a hash of the inner flow).
    pub udp_src: u16,
    /// Outer TTL / hop limit.
    pub ttl: u8,
}

/// Why [`encapsulate`] refused.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncapError {
    /// The outer addresses are of different families.
    #[error("tunnel endpoints are of different address families")]
    FamilyMismatch,
    /// The datapath key does not fit in 24 bits or the ingress port in 15.
    #[error("datapath key or port key out of range")]
    KeyRange,
    /// The encapsulated frame would exceed 65,535 bytes.
    #[error("inner frame too long")]
    TooLong,
}

/// Appends the Geneve encapsulation of `inner` (a complete Ethernet frame) to `out`: outer
/// Ethernet, IPv4 (DF set, UDP checksum zero as OVS sends by default) or IPv6 (UDP checksum
/// computed, as IPv6 requires), UDP to port 6081, Geneve with OVN's metadata. Returns the length.
pub fn encapsulate(
    out: &mut Vec<u8>,
    outer: &TunnelOuter,
    meta: &OvnMetadata,
    inner: &[u8],
) -> Result<usize, EncapError> {
    if meta.datapath > MAX_VNI || meta.ports.is_some_and(|p| p.ingress > MAX_INGRESS_PORT) {
        return Err(EncapError::KeyRange);
    }
    let repr = GeneveRepr {
        meta: *meta,
        oam: false,
    };
    let udp_len = 8 + repr.buffer_len() + inner.len();
    let ip_hdr = if outer.src.is_ipv6() { 40 } else { 20 };
    if udp_len + ip_hdr > usize::from(u16::MAX) {
        return Err(EncapError::TooLong);
    }
    let start = out.len();
    let ty = match (outer.src, outer.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => ethertype::IPV4,
        (IpAddr::V6(_), IpAddr::V6(_)) => ethertype::IPV6,
        _ => return Err(EncapError::FamilyMismatch),
    };
    out.extend_from_slice(&outer.eth_dst.0);
    out.extend_from_slice(&outer.eth_src.0);
    out.extend_from_slice(&ty.to_be_bytes());
    let ip = out.len();
    match (outer.src, outer.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x40, 0, outer.ttl, ip_proto::UDP, 0, 0]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
            let cs = crate::checksum::checksum(&out[ip..ip + 20]);
            out[ip + 10..ip + 12].copy_from_slice(&cs.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&(udp_len as u16).to_be_bytes());
            out.extend_from_slice(&[ip_proto::UDP, outer.ttl]);
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        _ => return Err(EncapError::FamilyMismatch),
    }
    let udp = out.len();
    out.extend_from_slice(&outer.udp_src.to_be_bytes());
    out.extend_from_slice(&GENEVE_PORT.to_be_bytes());
    out.extend_from_slice(&(udp_len as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    repr.emit(out);
    out.extend_from_slice(inner);
    if outer.src.is_ipv6() {
        let acc = sum_words(0, &out[udp..]).wrapping_add(pseudo_header_sum(
            outer.src,
            outer.dst,
            ip_proto::UDP,
            udp_len as u32,
        ));
        let mut cs = !fold(acc);
        if cs == 0 {
            cs = 0xffff;
        }
        out[udp + 6..udp + 8].copy_from_slice(&cs.to_be_bytes());
    }
    Ok(out.len() - start)
}

/// A decapsulated frame: outer headers, OVN metadata and the inner Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decapsulated<'a> {
    /// The outer headers.
    pub outer: TunnelOuter,
    /// OVN's metadata.
    pub meta: OvnMetadata,
    /// The inner Ethernet frame.
    pub inner: &'a [u8],
}

/// Parses a Geneve-encapsulated frame. Frames that are not UDP to port 6081 are
/// [`ParseError::Unexpected`]; truncated or malformed ones are errors, never panics.
pub fn decapsulate(frame: &[u8]) -> Result<Decapsulated<'_>, ParseError> {
    let p = parse(frame, 0, 0)?;
    let k = &p.key;
    let (Some(src), Some(dst)) = (k.ip_src(), k.ip_dst()) else {
        return Err(ParseError::Unexpected(Layer::Geneve));
    };
    if k.ip_proto != ip_proto::UDP || !p.has_l4() || k.tp_dst != GENEVE_PORT {
        return Err(ParseError::Unexpected(Layer::Geneve));
    }
    let udp = frame
        .get(usize::from(p.layout.l4) + 8..usize::from(p.layout.end))
        .ok_or(ParseError::Truncated(Layer::Udp))?;
    let g = GenevePacket::new_checked(udp)?;
    let repr = GeneveRepr::parse(&g)?;
    let inner = &udp[g.header_len()..];
    Ok(Decapsulated {
        outer: TunnelOuter {
            eth_src: k.eth_src,
            eth_dst: k.eth_dst,
            src,
            dst,
            udp_src: k.tp_src,
            ttl: k.ip_ttl,
        },
        meta: repr.meta,
        inner,
    })
}
