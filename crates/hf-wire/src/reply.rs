//! Builders for the packets OVN's actions generate: ARP requests and replies (`arp {}`, the ARP
//! responder), ICMP/ICMPv6 echo replies, ICMP/ICMPv6 errors (`icmp4 {}`, `icmp6 {}`), TCP resets
//! (`tcp_reset {}`, `reject {}`), and ND solicitations and advertisements (`nd_ns {}`,
//! `nd_na {}`, `nd_na_router {}`).
//!
//! Each builder appends one complete Ethernet frame (untagged) to `out`, with valid checksums, and
//! returns its length. The pipeline then applies the action's own field assignments to it. These
//! run on the slow path and may grow `out`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum::{checksum, checksum_adjust, fold, pseudo_header_sum, sum_words};
use crate::key::{EthAddr, FlowKey, tcp_flags};
use crate::parse::{Parsed, ethertype, ip_proto};

/// Why a builder refused: the request is not the kind of packet the builder answers.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// An ARP reply needs an ARP request.
    #[error("not an ARP request")]
    NotArpRequest,
    /// An echo reply needs an ICMP/ICMPv6 echo request.
    #[error("not an ICMP echo request")]
    NotEchoRequest,
    /// A neighbor advertisement needs a neighbor solicitation.
    #[error("not a neighbor solicitation")]
    NotNeighborSolicitation,
    /// A TCP reset needs a TCP segment that is not itself a reset.
    #[error("not a TCP segment that can be reset")]
    NotTcp,
    /// An ICMP error needs an IP packet of the matching family.
    #[error("not an IP packet of the right family")]
    NotIp,
    /// The frame does not match its parsed layout.
    #[error("the frame does not match its parsed layout")]
    LayoutMismatch,
    /// An SCTP ABORT needs an SCTP packet with a chunk that is not itself an ABORT.
    #[error("not an SCTP packet that can be aborted")]
    NotSctp,
}

/// Largest ICMPv4 error datagram (RFC 1812 §4.3.2.3).
const ICMP4_ERROR_MAX: usize = 576;
/// Largest ICMPv6 error datagram (RFC 4443 §2.4(c): the IPv6 minimum MTU).
const ICMP6_ERROR_MAX: usize = 1280;

fn emit_eth(out: &mut Vec<u8>, dst: EthAddr, src: EthAddr, ty: u16) {
    out.extend_from_slice(&dst.0);
    out.extend_from_slice(&src.0);
    out.extend_from_slice(&ty.to_be_bytes());
}

/// TTL / hop limit of generated replies (ND requires 255; OVN uses it for its replies too).
const REPLY_TTL: u8 = 255;

fn emit_ipv4(out: &mut Vec<u8>, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: usize, ttl: u8) {
    let start = out.len();
    let total = (20 + payload) as u16;
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0x40, 0, ttl, proto, 0, 0]);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&dst.octets());
    let cs = checksum(&out[start..start + 20]);
    out[start + 10..start + 12].copy_from_slice(&cs.to_be_bytes());
}

fn emit_ipv6(out: &mut Vec<u8>, src: Ipv6Addr, dst: Ipv6Addr, nh: u8, payload: usize, hlim: u8) {
    out.extend_from_slice(&[0x60, 0, 0, 0]);
    out.extend_from_slice(&(payload as u16).to_be_bytes());
    out.extend_from_slice(&[nh, hlim]);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&dst.octets());
}

/// Writes the checksum of the L4 message at `out[l4..]` into `out[l4 + at..]`.
fn finish_l4(out: &mut [u8], l4: usize, at: usize, pseudo: Option<(IpAddr, IpAddr, u8)>) {
    let len = out.len() - l4;
    let mut acc = sum_words(0, &out[l4..]);
    if let Some((s, d, p)) = pseudo {
        acc = acc.wrapping_add(pseudo_header_sum(s, d, p, len as u32));
    }
    let cs = !fold(acc);
    out[l4 + at..l4 + at + 2].copy_from_slice(&cs.to_be_bytes());
}

fn emit_arp(out: &mut Vec<u8>, op: u16, sha: EthAddr, spa: Ipv4Addr, tha: EthAddr, tpa: Ipv4Addr) {
    out.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4]);
    out.extend_from_slice(&op.to_be_bytes());
    out.extend_from_slice(&sha.0);
    out.extend_from_slice(&spa.octets());
    out.extend_from_slice(&tha.0);
    out.extend_from_slice(&tpa.octets());
}

/// An ARP request from `sha`/`spa` for `tpa`, broadcast (OVN's `arp {}` action).
pub fn arp_request(out: &mut Vec<u8>, sha: EthAddr, spa: Ipv4Addr, tpa: Ipv4Addr) -> usize {
    let start = out.len();
    emit_eth(out, EthAddr::BROADCAST, sha, ethertype::ARP);
    emit_arp(out, 1, sha, spa, EthAddr::ZERO, tpa);
    out.len() - start
}

/// An Ethernet frame carrying one IP datagram (TTL/hop limit 64) from `src` to `dst` with
/// protocol `proto` and L4 bytes `l4`, whose checksum (TCP, UDP, ICMP, ICMPv6) is computed and
/// filled in. For generated packets, the simulator and tests.
pub fn ip_packet(
    out: &mut Vec<u8>,
    eth_src: EthAddr,
    eth_dst: EthAddr,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    l4: &[u8],
) -> Result<usize, BuildError> {
    ip_packet_ttl(out, (eth_src, eth_dst), (src, dst), proto, l4, 64)
}

/// [`ip_packet`] with TTL/hop limit `ttl` (255 for single-hop BFD, RFC 5881 §5).
pub fn ip_packet_ttl(
    out: &mut Vec<u8>,
    (eth_src, eth_dst): (EthAddr, EthAddr),
    (src, dst): (IpAddr, IpAddr),
    proto: u8,
    l4: &[u8],
    ttl: u8,
) -> Result<usize, BuildError> {
    let start = out.len();
    let v6 = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            emit_eth(out, eth_dst, eth_src, ethertype::IPV4);
            emit_ipv4(out, s, d, proto, l4.len(), ttl);
            false
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            emit_eth(out, eth_dst, eth_src, ethertype::IPV6);
            emit_ipv6(out, s, d, proto, l4.len(), ttl);
            true
        }
        _ => return Err(BuildError::NotIp),
    };
    let at = match proto {
        ip_proto::TCP => Some((16, true)),
        ip_proto::UDP => Some((6, true)),
        ip_proto::ICMP if !v6 => Some((2, false)),
        ip_proto::ICMPV6 if v6 => Some((2, true)),
        _ => None,
    };
    let off = out.len();
    out.extend_from_slice(l4);
    if let Some((at, pseudo)) = at.filter(|(at, _)| at + 2 <= l4.len()) {
        out[off + at..off + at + 2].copy_from_slice(&[0, 0]);
        finish_l4(out, off, at, pseudo.then_some((src, dst, proto)));
        if proto == ip_proto::UDP && out[off + at..off + at + 2] == [0, 0] {
            // A computed UDP checksum of zero is sent as all ones (RFC 768).
            out[off + at..off + at + 2].copy_from_slice(&[0xff, 0xff]);
        }
    }
    Ok(out.len() - start)
}

/// The ARP reply to `request` saying that `request.arp_tpa` is at `mac` (OVN's ARP responder).
pub fn arp_reply(out: &mut Vec<u8>, request: &FlowKey, mac: EthAddr) -> Result<usize, BuildError> {
    if request.eth_type != ethertype::ARP || request.arp_op != 1 {
        return Err(BuildError::NotArpRequest);
    }
    let start = out.len();
    emit_eth(out, request.eth_src, mac, ethertype::ARP);
    emit_arp(
        out,
        2,
        mac,
        request.arp_tpa,
        request.arp_sha,
        request.arp_spa,
    );
    Ok(out.len() - start)
}

fn datagram<'a>(frame: &'a [u8], p: &Parsed) -> Result<&'a [u8], BuildError> {
    frame
        .get(usize::from(p.layout.l3)..usize::from(p.layout.end))
        .ok_or(BuildError::LayoutMismatch)
}

/// The echo reply to an ICMP or ICMPv6 echo request: addresses swapped, same identifier, sequence
/// and data, TTL/hop limit kept. `frame`/`p` are the request.
pub fn echo_reply(out: &mut Vec<u8>, frame: &[u8], p: &Parsed) -> Result<usize, BuildError> {
    let k = &p.key;
    let (v6, req, rep) = match (k.eth_type, k.ip_proto, k.icmp_type) {
        (ethertype::IPV4, ip_proto::ICMP, 8) => (false, 8u8, 0u8),
        (ethertype::IPV6, ip_proto::ICMPV6, 128) => (true, 128, 129),
        _ => return Err(BuildError::NotEchoRequest),
    };
    let dg = datagram(frame, p)?;
    let l4 = usize::from(p.layout.l4)
        .checked_sub(usize::from(p.layout.l3))
        .filter(|&o| o != 0 && o + 4 <= dg.len())
        .ok_or(BuildError::LayoutMismatch)?;
    let start = out.len();
    emit_eth(out, k.eth_src, k.eth_dst, k.eth_type);
    let ip = out.len();
    out.extend_from_slice(dg);
    // Swapping source and destination leaves every checksum unchanged (the sum commutes).
    let (s, d, n) = if v6 { (8, 24, 16) } else { (12, 16, 4) };
    let mut src = [0u8; 16];
    src[..n].copy_from_slice(&out[ip + s..ip + s + n]);
    out.copy_within(ip + d..ip + d + n, ip + s);
    out[ip + d..ip + d + n].copy_from_slice(&src[..n]);
    let t = ip + l4;
    out[t] = rep;
    let cs = u16::from_be_bytes([out[t + 2], out[t + 3]]);
    let cs = checksum_adjust(cs, &[req, out[t + 1]], &[rep, out[t + 1]]);
    out[t + 2..t + 4].copy_from_slice(&cs.to_be_bytes());
    Ok(out.len() - start)
}

/// An ICMPv4 error (`icmp_type`/`icmp_code`, e.g. 3/3 port unreachable, 11/0 TTL exceeded) about
/// the packet in `frame`, from `src_ip` back to the packet's source, quoting as much of the
/// offending datagram as fits in 576 bytes. `rest` is the header's second word (the next-hop MTU
/// for "fragmentation needed", otherwise 0).
pub fn icmp4_error(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    src_ip: Ipv4Addr,
    icmp_type: u8,
    icmp_code: u8,
    rest: u32,
) -> Result<usize, BuildError> {
    icmp_error_to_sender(out, frame, p, src_ip.into(), [icmp_type, icmp_code], rest)
}

/// OVN's `icmp4 { }`/`icmp6 { }`/`icmp4_error { }`/`icmp6_error { }` packet: an ICMP error
/// (`icmp_type`/`icmp_code`; OVN starts from 3/1 or 1/1) quoting the datagram in `frame`, with
/// the *same* Ethernet and IP addresses and TTL 255 as ovn-controller builds it: the logical
/// flow's nested actions then set the addresses (`eth.dst <-> eth.src; ip4.dst = ip4.src; ...`).
pub fn icmp_error_same_addresses(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    icmp_type: u8,
    icmp_code: u8,
    rest: u32,
) -> Result<usize, BuildError> {
    let (Some(src), Some(dst)) = (p.key.ip_src(), p.key.ip_dst()) else {
        return Err(BuildError::NotIp);
    };
    let eth = (p.key.eth_dst, p.key.eth_src);
    let n = icmp_error(out, frame, p, eth, (src, dst), [icmp_type, icmp_code], rest)?;
    set_ttl(out, n, src.is_ipv6(), 255);
    Ok(n)
}

/// An ICMPv6 error (e.g. 1/4 port unreachable, 3/0 hop limit exceeded, 2/0 packet too big with
/// the MTU in `rest`) about the packet in `frame`, from `src_ip`, quoting up to 1280 bytes total.
pub fn icmp6_error(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    src_ip: Ipv6Addr,
    icmp_type: u8,
    icmp_code: u8,
    rest: u32,
) -> Result<usize, BuildError> {
    icmp_error_to_sender(out, frame, p, src_ip.into(), [icmp_type, icmp_code], rest)
}

/// [`icmp4_error`]/[`icmp6_error`]: from `src` back to the packet's source and Ethernet sender.
fn icmp_error_to_sender(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    src: IpAddr,
    type_code: [u8; 2],
    rest: u32,
) -> Result<usize, BuildError> {
    let to = p.key.ip_src().ok_or(BuildError::NotIp)?;
    let eth = (p.key.eth_src, p.key.eth_dst);
    icmp_error(out, frame, p, eth, (src, to), type_code, rest)
}

/// `eth` is (destination, source), `ips` (source, destination).
fn icmp_error(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    eth: (EthAddr, EthAddr),
    ips: (IpAddr, IpAddr),
    type_code: [u8; 2],
    rest: u32,
) -> Result<usize, BuildError> {
    let (src, to) = ips;
    let (max, hdr, proto) = match (src, to) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (ICMP4_ERROR_MAX, 20, ip_proto::ICMP),
        (IpAddr::V6(_), IpAddr::V6(_)) => (ICMP6_ERROR_MAX, 40, ip_proto::ICMPV6),
        _ => return Err(BuildError::NotIp),
    };
    let dg = datagram(frame, p)?;
    let quote = &dg[..dg.len().min(max - hdr - 8)];
    let start = out.len();
    emit_eth(out, eth.0, eth.1, p.key.eth_type);
    match (src, to) {
        (IpAddr::V4(s), IpAddr::V4(d)) => emit_ipv4(out, s, d, proto, 8 + quote.len(), REPLY_TTL),
        (IpAddr::V6(s), IpAddr::V6(d)) => emit_ipv6(out, s, d, proto, 8 + quote.len(), REPLY_TTL),
        _ => return Err(BuildError::NotIp),
    }
    let l4 = out.len();
    out.extend_from_slice(&type_code);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&rest.to_be_bytes());
    out.extend_from_slice(quote);
    finish_l4(out, l4, 2, src.is_ipv6().then_some((src, to, proto)));
    Ok(out.len() - start)
}

/// The TCP reset answering the segment in `frame` (RFC 9293 §3.10.7.1), from its destination
/// back to its source: if the segment carried an ACK, the reset has that sequence number and no
/// ACK; otherwise sequence 0 and an ACK of everything the segment occupied. A reset is never
/// answered with a reset.
pub fn tcp_reset(out: &mut Vec<u8>, p: &Parsed) -> Result<usize, BuildError> {
    reset(out, p, true)
}

/// OVN's `reject` answer to a TCP segment as ovn-controller's pinctrl builds it
/// (`pinctrl_handle_reject` → `pinctrl_handle_tcp_reset` with loopback): the reset of
/// [`tcp_reset`] (addresses swapped) with TTL 63, as real OVS then forwards it (found by the
/// real-datapath oracle, `tests/datapath_oracle.rs`).
pub fn tcp_reset_reject(out: &mut Vec<u8>, p: &Parsed) -> Result<usize, BuildError> {
    let n = reset(out, p, true)?;
    set_ttl(out, n, p.key.is_ipv6(), 63);
    Ok(n)
}

/// OVN's `tcp_reset { }` packet as ovn-controller's pinctrl builds it: the reset (sequence
/// numbers as [`tcp_reset`]) with the segment's *own* Ethernet and IP addresses, its ports
/// swapped, and TTL 63; the logical flow's nested actions swap the addresses.
pub fn tcp_reset_same_addresses(out: &mut Vec<u8>, p: &Parsed) -> Result<usize, BuildError> {
    let n = reset(out, p, false)?;
    set_ttl(out, n, p.key.is_ipv6(), 63);
    Ok(n)
}

/// Sets the TTL/hop limit of the frame that ends `out` and is `n` bytes long (IPv4: adjusting
/// the header checksum).
fn set_ttl(out: &mut [u8], n: usize, v6: bool, ttl: u8) {
    let ip = out.len() - n + 14;
    if v6 {
        out[ip + 7] = ttl;
    } else {
        let old = out[ip + 8];
        out[ip + 8] = ttl;
        let cs = u16::from_be_bytes([out[ip + 10], out[ip + 11]]);
        let cs = checksum_adjust(cs, &[old, out[ip + 9]], &[ttl, out[ip + 9]]);
        out[ip + 10..ip + 12].copy_from_slice(&cs.to_be_bytes());
    }
}

/// CRC-32C (Castagnoli), SCTP's checksum (RFC 9260 appendix A).
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The SCTP ABORT answering the SCTP packet in `frame`, as ovn-controller's pinctrl builds it
/// for `sctp_abort { }` (`swap_addresses` false: the packet's own Ethernet and IP addresses,
/// for the flow to swap) and for `reject { }` of SCTP (true: back to the sender). Ports are
/// swapped, TTL 63. The verification tag is the packet's, with the T bit set, except for an
/// INIT with tag 0, which is answered with its initiate tag (RFC 9260 §8.4). An ABORT is never
/// answered.
pub fn sctp_abort(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    swap_addresses: bool,
) -> Result<usize, BuildError> {
    let k = &p.key;
    if k.ip_proto != ip_proto::SCTP || !p.has_l4() {
        return Err(BuildError::NotSctp);
    }
    let l4 = usize::from(p.layout.l4);
    let hdr = frame.get(l4..l4 + 16).ok_or(BuildError::NotSctp)?;
    let vtag = u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    let chunk = hdr[12];
    if chunk == 6 {
        return Err(BuildError::NotSctp);
    }
    let (tag, reflected) = match (vtag, chunk) {
        (0, 1) => {
            let t = frame.get(l4 + 16..l4 + 20).ok_or(BuildError::NotSctp)?;
            (u32::from_be_bytes([t[0], t[1], t[2], t[3]]), false)
        }
        _ => (vtag, true),
    };
    let (Some(src), Some(dst)) = (k.ip_src(), k.ip_dst()) else {
        return Err(BuildError::NotIp);
    };
    let mut seg = [0u8; 16];
    seg[0..2].copy_from_slice(&k.tp_dst.to_be_bytes());
    seg[2..4].copy_from_slice(&k.tp_src.to_be_bytes());
    seg[4..8].copy_from_slice(&tag.to_be_bytes());
    seg[12] = 6;
    seg[13] = u8::from(reflected);
    seg[14..16].copy_from_slice(&4u16.to_be_bytes());
    let cs = crc32c(&seg);
    seg[8..12].copy_from_slice(&cs.to_le_bytes());
    let n = if swap_addresses {
        ip_packet(out, k.eth_dst, k.eth_src, dst, src, ip_proto::SCTP, &seg)?
    } else {
        ip_packet(out, k.eth_src, k.eth_dst, src, dst, ip_proto::SCTP, &seg)?
    };
    set_ttl(out, n, k.is_ipv6(), 63);
    Ok(n)
}

fn reset(out: &mut Vec<u8>, p: &Parsed, swap: bool) -> Result<usize, BuildError> {
    let k = &p.key;
    if k.ip_proto != ip_proto::TCP || !p.has_l4() || k.tcp_flags & tcp_flags::RST != 0 {
        return Err(BuildError::NotTcp);
    }
    let (Some(src), Some(dst)) = (k.ip_dst(), k.ip_src()) else {
        return Err(BuildError::NotIp);
    };
    let occupied = u32::from(p.tcp.payload_len)
        + u32::from(k.tcp_flags & tcp_flags::SYN != 0)
        + u32::from(k.tcp_flags & tcp_flags::FIN != 0);
    let (seq, ack, flags) = if k.tcp_flags & tcp_flags::ACK != 0 {
        (p.tcp.ack, 0, tcp_flags::RST)
    } else {
        (
            0,
            p.tcp.seq.wrapping_add(occupied),
            tcp_flags::RST | tcp_flags::ACK,
        )
    };
    let mut seg = [0u8; 20];
    seg[0..2].copy_from_slice(&k.tp_dst.to_be_bytes());
    seg[2..4].copy_from_slice(&k.tp_src.to_be_bytes());
    seg[4..8].copy_from_slice(&seq.to_be_bytes());
    seg[8..12].copy_from_slice(&ack.to_be_bytes());
    seg[12..14].copy_from_slice(&((5u16 << 12) | flags).to_be_bytes());
    if swap {
        ip_packet(out, k.eth_dst, k.eth_src, src, dst, ip_proto::TCP, &seg)
    } else {
        ip_packet(out, k.eth_src, k.eth_dst, dst, src, ip_proto::TCP, &seg)
    }
}

/// The solicited-node multicast address of `target` (RFC 4291 §2.7.1).
pub fn solicited_node(target: Ipv6Addr) -> Ipv6Addr {
    let t = target.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, t[13], t[14], t[15],
    ])
}

fn multicast_mac(ip: Ipv6Addr) -> EthAddr {
    let o = ip.octets();
    EthAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
}

/// A neighbor solicitation from `src_mac`/`src_ip` for `target`, to its solicited-node group
/// (OVN's `nd_ns {}` action), with the source link-layer address option.
pub fn nd_ns(out: &mut Vec<u8>, src_mac: EthAddr, src_ip: Ipv6Addr, target: Ipv6Addr) -> usize {
    let start = out.len();
    let dst = solicited_node(target);
    emit_eth(out, multicast_mac(dst), src_mac, ethertype::IPV6);
    emit_ipv6(out, src_ip, dst, ip_proto::ICMPV6, 32, REPLY_TTL);
    let l4 = out.len();
    out.extend_from_slice(&[135, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&target.octets());
    out.extend_from_slice(&[1, 1]);
    out.extend_from_slice(&src_mac.0);
    finish_l4(
        out,
        l4,
        2,
        Some((src_ip.into(), dst.into(), ip_proto::ICMPV6)),
    );
    out.len() - start
}

/// The neighbor advertisement answering the solicitation `ns`: `ns.nd_target` is at `mac`. Sets
/// the router flag when `router` (OVN's `nd_na_router {}`), the solicited flag unless the
/// solicitation came from the unspecified address (then the answer goes to all-nodes), and the
/// override flag; carries the target link-layer address option.
pub fn nd_na(
    out: &mut Vec<u8>,
    ns: &FlowKey,
    mac: EthAddr,
    router: bool,
) -> Result<usize, BuildError> {
    if !(ns.is_ipv6() && ns.ip_proto == ip_proto::ICMPV6 && ns.icmp_type == 135) {
        return Err(BuildError::NotNeighborSolicitation);
    }
    let dad = ns.ip6_src.is_unspecified();
    let (dst, eth_dst) = if dad {
        let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
        (all, multicast_mac(all))
    } else {
        (ns.ip6_src, ns.eth_src)
    };
    let mut flags = 0x20;
    if router {
        flags |= 0x80;
    }
    if !dad {
        flags |= 0x40;
    }
    let start = out.len();
    let src = ns.nd_target;
    emit_eth(out, eth_dst, mac, ethertype::IPV6);
    emit_ipv6(out, src, dst, ip_proto::ICMPV6, 32, REPLY_TTL);
    let l4 = out.len();
    out.extend_from_slice(&[136, 0, 0, 0, flags, 0, 0, 0]);
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&[2, 1]);
    out.extend_from_slice(&mac.0);
    finish_l4(out, l4, 2, Some((src.into(), dst.into(), ip_proto::ICMPV6)));
    Ok(out.len() - start)
}

#[cfg(test)]
mod sctp_tests {
    use super::*;

    /// RFC 3720 appendix B.4's CRC-32C check values.
    #[test]
    fn crc32c_known_answers() {
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let inc: Vec<u8> = (0u8..32).collect();
        assert_eq!(crc32c(&inc), 0x46dd_794e);
    }
}
