//! Offload metadata (checksum and segmentation) carried beside a frame, and its software fallback.
//!
//! # What it does
//!
//! Linux hands a packet socket with `PACKET_VNET_HDR` (and a tap with `IFF_VNET_HDR`, and a
//! virtio-net device) a 10-byte `struct virtio_net_hdr` before every frame. It says two things the
//! frame's bytes do not:
//!
//! - **Partial checksum** (`VIRTIO_NET_HDR_F_NEEDS_CSUM`): the L4 checksum field at
//!   `csum_start + csum_offset` holds only the pseudo-header sum (not inverted); whoever finally
//!   puts the frame on a wire sums the bytes from `csum_start` to the end and stores the result.
//!   `VIRTIO_NET_HDR_F_DATA_VALID` instead says the checksum was already verified.
//! - **Segmentation** (`gso_type` TCPv4, TCPv6 or UDP-L4 with `gso_size`): the frame is one
//!   super-frame of up to 64 KiB whose payload stands for `gso_size`-byte segments, each with its
//!   own headers (IPv4 id and length, TCP sequence number and flags, UDP length, checksums).
//!
//! [`Offload`] is that header as a typed value ([`Offload::from_virtio_hdr`],
//! [`Offload::to_virtio_hdr`]). When a frame must leave through something that cannot take the
//! metadata (a Geneve tunnel's UDP socket, a port without `PACKET_VNET_HDR`), the two pure
//! functions here do what the kernel or the NIC would have done: [`complete_checksum`] finishes a
//! partial checksum, [`segment`] cuts a super-frame into wire-sized frames the way Linux's
//! `tcp_gso_segment`/`__udp_gso_segment` do (IPv4 id incremented per segment, CWR only on the
//! first TCP segment, FIN and PSH only on the last, full checksums).
//!
//! # What it does not do
//!
//! No I/O. No tunnel GSO (`SKB_GSO_UDP_TUNNEL`; a packet socket never reports it), no IPv4 UFO
//! (`VIRTIO_NET_HDR_GSO_UDP`, deprecated in Linux and never produced on receive), no BIG TCP
//! (super-frames above 64 KiB with a zero IP length are segmented from the frame's length, but
//! nothing larger than `u16` lengths is emitted). For IPv6 the L4 header is where `csum_start`
//! points (extension headers are not walked without it), and the pseudo-header uses the IPv6
//! destination field as it stands (a routing header's final destination is not looked up).
//!
//! # Invariants
//!
//! - Nothing here panics on any bytes and any [`Offload`] (property-tested with arbitrary input);
//!   malformed input is an [`OffloadError`], a small `Copy` value.
//! - A partial checksum completed by [`complete_checksum`] verifies; every segment [`segment`]
//!   emits has valid IPv4 header and L4 checksums (tested against an independent sum and smoltcp,
//!   and byte for byte against the kernel's own segmentation in `hf-datapath`'s AF_PACKET tests).
//!
//! # NAT on a frame with a partial checksum
//!
//! The L4 field of a [`Csum::Partial`] frame holds the pseudo-header sum itself, not its
//! complement, so an incremental update of an address or port is applied to the complement:
//! `field' = !checksum_adjust(!field, old, new)` for address changes (which are in the pseudo
//! header), and nothing for port changes (ports are summed later, when the checksum is completed).

use crate::checksum::{fold, sum_words};

/// Length of `struct virtio_net_hdr` (the header `PACKET_VNET_HDR` prepends).
pub const VIRTIO_NET_HDR_LEN: usize = 10;

/// `struct virtio_net_hdr` values (`include/uapi/linux/virtio_net.h`).
mod virtio {
    pub const F_NEEDS_CSUM: u8 = 1;
    pub const F_DATA_VALID: u8 = 2;
    pub const GSO_NONE: u8 = 0;
    pub const GSO_TCPV4: u8 = 1;
    pub const GSO_TCPV6: u8 = 4;
    pub const GSO_UDP_L4: u8 = 5;
    pub const GSO_ECN: u8 = 0x80;
}

/// What the sender said about the frame's L4 checksum.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Csum {
    /// No claim: the checksum is whatever the bytes say (complete, or wrong).
    #[default]
    None,
    /// The checksum still has to be computed: sum the bytes from `start` (an offset from the start
    /// of the frame) to the end and store the result at `start + offset`.
    Partial {
        /// Where the summed bytes start (the L4 header).
        start: u16,
        /// Where the checksum field is, from `start` (16 for TCP, 6 for UDP).
        offset: u16,
    },
    /// The checksum was verified by the receiving device or stack.
    Valid,
}

/// The protocol a super-frame is segmented as.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GsoKind {
    /// TCP over IPv4 (TSO).
    TcpV4,
    /// TCP over IPv6.
    TcpV6,
    /// UDP segmentation (`UDP_SEGMENT`, USO) over IPv4 or IPv6: every segment is a datagram.
    UdpL4,
}

/// A super-frame's segmentation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gso {
    /// The protocol.
    pub kind: GsoKind,
    /// Payload bytes per segment (the MSS for TCP).
    pub size: u16,
    /// The sender's hint of the header length; Linux reports the length of the linear part of
    /// its buffer here, so it is passed through, never trusted ([`segment`] parses the headers).
    pub hdr_len: u16,
    /// ECN was negotiated on the TCP connection (`VIRTIO_NET_HDR_GSO_ECN`).
    pub ecn: bool,
}

/// Offload metadata of one frame: the typed `struct virtio_net_hdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Offload {
    /// The L4 checksum's state.
    pub csum: Csum,
    /// Segmentation, when the frame is a super-frame.
    pub gso: Option<Gso>,
}

/// Why offload metadata could not be decoded or applied. Small and `Copy`: built on the
/// untrusted-byte path.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum OffloadError {
    /// The virtio-net header is shorter than 10 bytes.
    #[error("virtio-net header truncated")]
    HeaderTruncated,
    /// The virtio-net header has a `gso_type` this module does not know (the value is given).
    #[error("unsupported virtio-net gso_type {0}")]
    UnsupportedGso(u8),
    /// The checksum field `csum_start + csum_offset` does not lie inside the frame.
    #[error("partial checksum field outside the frame")]
    CsumOutOfFrame,
    /// The frame ends inside a header segmentation needs (Ethernet, VLAN, IP, TCP or UDP).
    #[error("super-frame truncated in its headers")]
    Truncated,
    /// The frame's headers do not match the segmentation kind (e.g. TCPv4 on an IPv6 frame, a
    /// fragment, a header length no valid packet has).
    #[error("super-frame headers do not match the segmentation request")]
    Mismatch,
    /// `gso_size` is zero.
    #[error("segmentation size of zero")]
    ZeroSize,
    /// A segment would not fit the 16-bit IP length fields.
    #[error("segment too long for its IP length field")]
    TooLong,
}

impl Offload {
    /// No metadata: a complete frame whose checksum is what its bytes say.
    pub const NONE: Offload = Offload {
        csum: Csum::None,
        gso: None,
    };

    /// True when there is nothing to do before the frame can go on a wire.
    pub fn is_none(&self) -> bool {
        self.gso.is_none() && !matches!(self.csum, Csum::Partial { .. })
    }

    /// Decodes a `struct virtio_net_hdr` in the byte order a packet socket uses (the host's:
    /// Linux's `vio_le()` is the legacy virtio endianness, native on every host it runs on).
    /// Unknown flag bits are ignored; an unknown `gso_type` is an error.
    pub fn from_virtio_hdr(h: &[u8]) -> Result<Offload, OffloadError> {
        let h: &[u8; VIRTIO_NET_HDR_LEN] = h
            .get(..VIRTIO_NET_HDR_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(OffloadError::HeaderTruncated)?;
        let u16_at = |at: usize| u16::from_ne_bytes([h[at], h[at + 1]]);
        let (flags, gso_type) = (h[0], h[1]);
        let csum = if flags & virtio::F_NEEDS_CSUM != 0 {
            Csum::Partial {
                start: u16_at(6),
                offset: u16_at(8),
            }
        } else if flags & virtio::F_DATA_VALID != 0 {
            Csum::Valid
        } else {
            Csum::None
        };
        let kind = match gso_type & !virtio::GSO_ECN {
            virtio::GSO_NONE => None,
            virtio::GSO_TCPV4 => Some(GsoKind::TcpV4),
            virtio::GSO_TCPV6 => Some(GsoKind::TcpV6),
            virtio::GSO_UDP_L4 => Some(GsoKind::UdpL4),
            _ => return Err(OffloadError::UnsupportedGso(gso_type)),
        };
        let gso = kind.map(|kind| Gso {
            kind,
            size: u16_at(4),
            hdr_len: u16_at(2),
            ecn: gso_type & virtio::GSO_ECN != 0,
        });
        Ok(Offload { csum, gso })
    }

    /// Encodes the metadata as a `struct virtio_net_hdr` (host byte order, see
    /// [`Offload::from_virtio_hdr`]).
    pub fn to_virtio_hdr(&self) -> [u8; VIRTIO_NET_HDR_LEN] {
        let mut h = [0u8; VIRTIO_NET_HDR_LEN];
        match self.csum {
            Csum::None => {}
            Csum::Partial { start, offset } => {
                h[0] = virtio::F_NEEDS_CSUM;
                h[6..8].copy_from_slice(&start.to_ne_bytes());
                h[8..10].copy_from_slice(&offset.to_ne_bytes());
            }
            Csum::Valid => h[0] = virtio::F_DATA_VALID,
        }
        if let Some(g) = self.gso {
            h[1] = match g.kind {
                GsoKind::TcpV4 => virtio::GSO_TCPV4,
                GsoKind::TcpV6 => virtio::GSO_TCPV6,
                GsoKind::UdpL4 => virtio::GSO_UDP_L4,
            } | if g.ecn { virtio::GSO_ECN } else { 0 };
            h[2..4].copy_from_slice(&g.hdr_len.to_ne_bytes());
            h[4..6].copy_from_slice(&g.size.to_ne_bytes());
        }
        h
    }

    /// The same metadata for the frame after `n` bytes were inserted before its L3 header (a
    /// VLAN tag put back): offsets into the frame move by `n`. Saturates rather than wraps.
    pub fn shifted(mut self, n: u16) -> Offload {
        if let Csum::Partial { start, .. } = &mut self.csum {
            *start = start.saturating_add(n);
        }
        if let Some(g) = &mut self.gso {
            g.hdr_len = g.hdr_len.saturating_add(n);
        }
        self
    }
}

/// Finishes a [`Csum::Partial`] checksum in place, as Linux's `skb_checksum_help` does (a result of
/// zero is stored as `0xffff`, which is the same value in one's complement and keeps UDP's "no
/// checksum" meaning out of the way). Other checksum states leave the frame untouched. For a
/// super-frame call [`segment`] instead: its segments get their own checksums.
pub fn complete_checksum(frame: &mut [u8], off: &Offload) -> Result<(), OffloadError> {
    let Csum::Partial { start, offset } = off.csum else {
        return Ok(());
    };
    let (start, at) = (usize::from(start), usize::from(start) + usize::from(offset));
    if at + 2 > frame.len() || start > frame.len() {
        return Err(OffloadError::CsumOutOfFrame);
    }
    let sum = fold(sum_words(0, &frame[start..]));
    let cs = match !sum {
        0 => 0xffff,
        v => v,
    };
    frame[at..at + 2].copy_from_slice(&cs.to_be_bytes());
    Ok(())
}

/// Frames produced by [`segment`], kept in one reusable buffer (no allocation per frame once it has
/// grown to the largest super-frame seen).
#[derive(Debug, Clone, Default)]
pub struct Segments {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Segments {
    /// An empty set.
    pub fn new() -> Segments {
        Segments::default()
    }

    /// Forgets the frames, keeping the capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// How many frames there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when there is no frame.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Frame `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.bytes.get(start..end)
    }

    /// The frames in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }

    fn push(&mut self, frame: &[u8]) -> usize {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(frame);
        start
    }

    fn close(&mut self) {
        self.ends.push(self.bytes.len());
    }
}

/// The L2/L3/L4 offsets of a super-frame, found by [`headers`].
struct Headers {
    l3: usize,
    l4: usize,
    /// End of the L4 header.
    hdr: usize,
    /// End of the IP datagram.
    end: usize,
    ipv4: bool,
    tcp: bool,
}

const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88a8;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Walks Ethernet, VLAN tags, IP and the L4 header of a super-frame and checks them against `gso`.
fn headers(frame: &[u8], off: &Offload, gso: &Gso) -> Result<Headers, OffloadError> {
    use OffloadError::{Mismatch, Truncated};
    let mut at = 12;
    let mut ty = be16(frame, at).ok_or(Truncated)?;
    while ty == ETH_P_8021Q || ty == ETH_P_8021AD {
        at += 4;
        ty = be16(frame, at).ok_or(Truncated)?;
    }
    let l3 = at + 2;
    let ip = frame.get(l3..).ok_or(Truncated)?;
    let (ipv4, min_l4, proto, ip_end) = match ty {
        ETH_P_IPV4 => {
            let vihl = *ip.first().ok_or(Truncated)?;
            let ihl = usize::from(vihl & 0x0f) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return Err(Mismatch);
            }
            if ip.len() < ihl {
                return Err(Truncated);
            }
            // A fragment (MF set or a non-zero offset) cannot be segmented.
            if be16(ip, 6).ok_or(Truncated)? & 0x3fff != 0 {
                return Err(Mismatch);
            }
            let tot = usize::from(be16(ip, 2).ok_or(Truncated)?);
            (true, l3 + ihl, ip[9], (tot >= ihl).then_some(l3 + tot))
        }
        ETH_P_IPV6 => {
            if ip.len() < 40 {
                return Err(Truncated);
            }
            if ip[0] >> 4 != 6 {
                return Err(Mismatch);
            }
            let plen = usize::from(be16(ip, 4).ok_or(Truncated)?);
            (false, l3 + 40, ip[6], (plen != 0).then_some(l3 + 40 + plen))
        }
        _ => return Err(Mismatch),
    };
    let want_tcp = match (gso.kind, ipv4) {
        (GsoKind::TcpV4, true) | (GsoKind::TcpV6, false) => true,
        (GsoKind::UdpL4, _) => false,
        _ => return Err(Mismatch),
    };
    let want_proto = if want_tcp { IPPROTO_TCP } else { IPPROTO_UDP };
    // The L4 header is where the partial checksum starts (that is how Linux marks it, and it steps
    // over IPv6 extension headers); without one it follows the IP header directly.
    let l4 = match off.csum {
        Csum::Partial { start, offset } => {
            let field = if want_tcp { 16 } else { 6 };
            let start = usize::from(start);
            let direct = ipv4 || proto == want_proto;
            if offset != field || start < min_l4 || (direct && start != min_l4) {
                return Err(Mismatch);
            }
            start
        }
        _ => min_l4,
    };
    if (ipv4 || l4 == min_l4) && proto != want_proto {
        return Err(Mismatch);
    }
    // The IP length, when it is set and fits the frame, bounds the datagram (Ethernet padding is
    // not payload); a zero or oversized one (BIG TCP, a truncated capture) yields to the frame.
    let end = match ip_end {
        Some(e) if e <= frame.len() => e,
        _ => frame.len(),
    };
    let l4_len = if want_tcp {
        let doff = usize::from(*frame.get(l4 + 12).ok_or(Truncated)? >> 4) * 4;
        if doff < 20 {
            return Err(Mismatch);
        }
        doff
    } else {
        8
    };
    let hdr = l4 + l4_len;
    if hdr > end {
        return Err(Truncated);
    }
    Ok(Headers {
        l3,
        l4,
        hdr,
        end,
        ipv4,
        tcp: want_tcp,
    })
}

/// Cuts a super-frame into the frames a device would have put on the wire, into `out` (cleared
/// first), and returns how many there are.
///
/// Without [`Offload::gso`] the one frame is copied with its partial checksum (if any)
/// completed. With it, the headers are parsed (Ethernet, up to any number of VLAN tags, IPv4 or
/// IPv6, TCP or UDP, checked against [`Gso::kind`]) and every `size` bytes of payload become one
/// frame with: the IPv4 total length, an id incremented per segment and a fresh header checksum;
/// the IPv6 payload length; for TCP the sequence number advanced by the bytes before it, CWR kept
/// only on the first segment and FIN and PSH only on the last; for UDP the datagram length; and a
/// complete L4 checksum. A super-frame whose payload fits one segment goes as it is, with its
/// checksum completed (Linux does not treat it as GSO either).
pub fn segment(frame: &[u8], off: &Offload, out: &mut Segments) -> Result<usize, OffloadError> {
    out.clear();
    let Some(gso) = off.gso else {
        return whole(frame, off, out);
    };
    if gso.size == 0 {
        return Err(OffloadError::ZeroSize);
    }
    let h = headers(frame, off, &gso)?;
    let head = &frame[..h.hdr];
    let payload = &frame[h.hdr..h.end];
    let mss = usize::from(gso.size);
    if h.hdr - h.l3 + mss.min(payload.len()) > usize::from(u16::MAX) {
        return Err(OffloadError::TooLong);
    }
    if payload.len() <= mss {
        // Linux's `virtio_net_hdr_to_skb`: "too small packets are not really GSO ones": the
        // frame goes as it is, with its checksum completed.
        return whole(&frame[..h.end], off, out);
    }
    let count = payload.len().div_ceil(mss);
    out.bytes.reserve(count * h.hdr + payload.len());
    let ip_id = be16(frame, h.l3 + 4).unwrap_or(0);
    let seq = if h.tcp {
        frame
            .get(h.l4 + 4..h.l4 + 8)
            .map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    } else {
        0
    };
    let mut chunks = payload.chunks(mss);
    for i in 0..count {
        let chunk = chunks.next().unwrap_or(&[]);
        let start = out.push(head);
        out.bytes.extend_from_slice(chunk);
        let f = &mut out.bytes[start..];
        fix_segment(f, &h, i, count, chunk.len(), ip_id, seq, mss);
        out.close();
    }
    Ok(count)
}

/// Rewrites the headers of segment `i` of `count` (a copy of the super-frame's headers followed by
/// `len` payload bytes) and computes its checksums. The offsets in `h` were checked by
/// [`headers`] and the caller bounded the lengths to `u16`.
#[allow(clippy::too_many_arguments)]
fn fix_segment(
    f: &mut [u8],
    h: &Headers,
    i: usize,
    count: usize,
    len: usize,
    ip_id: u16,
    seq: u32,
    mss: usize,
) {
    let (l3, l4) = (h.l3, h.l4);
    let l4_len = (h.hdr - l4 + len) as u16;
    if h.ipv4 {
        let ihl = l4 - l3;
        let tot = (h.hdr - l3 + len) as u16;
        f[l3 + 2..l3 + 4].copy_from_slice(&tot.to_be_bytes());
        f[l3 + 4..l3 + 6].copy_from_slice(&ip_id.wrapping_add(i as u16).to_be_bytes());
        f[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
        let cs = !fold(sum_words(0, &f[l3..l3 + ihl]));
        f[l3 + 10..l3 + 12].copy_from_slice(&cs.to_be_bytes());
    } else {
        let plen = (h.hdr - l3 - 40 + len) as u16;
        f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    }
    let csum_at = if h.tcp {
        let s = seq.wrapping_add((i * mss) as u32);
        f[l4 + 4..l4 + 8].copy_from_slice(&s.to_be_bytes());
        let mut flags = f[l4 + 13];
        if i > 0 {
            flags &= !0x80; // CWR
        }
        if i + 1 < count {
            flags &= !0x09; // FIN, PSH
        }
        f[l4 + 13] = flags;
        l4 + 16
    } else {
        f[l4 + 4..l4 + 6].copy_from_slice(&l4_len.to_be_bytes());
        l4 + 6
    };
    f[csum_at..csum_at + 2].copy_from_slice(&[0, 0]);
    let mut acc = if h.ipv4 {
        sum_words(0, &f[l3 + 12..l3 + 20])
    } else {
        sum_words(0, &f[l3 + 8..l3 + 40])
    };
    let proto = if h.tcp { IPPROTO_TCP } else { IPPROTO_UDP };
    acc = acc
        .wrapping_add(u32::from(proto))
        .wrapping_add(u32::from(l4_len));
    // Like the kernel: a zero UDP checksum would mean "none", so it is sent as 0xffff; TCP keeps
    // the plain fold.
    let cs = match !fold(sum_words(acc, &f[l4..])) {
        0 if !h.tcp => 0xffff,
        v => v,
    };
    f[csum_at..csum_at + 2].copy_from_slice(&cs.to_be_bytes());
}

/// `frame` as the one segment of `out`, its checksum completed.
fn whole(frame: &[u8], off: &Offload, out: &mut Segments) -> Result<usize, OffloadError> {
    let start = out.push(frame);
    if let Err(e) = complete_checksum(&mut out.bytes[start..], off) {
        out.clear();
        return Err(e);
    }
    out.close();
    Ok(1)
}

#[cfg(test)]
#[path = "offload_tests.rs"]
mod tests;
