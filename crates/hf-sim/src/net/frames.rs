//! Looking at a host's frames from the outside: TCP segment analysis (retransmissions, resets),
//! DHCP message counts, and builders for migration announcements (RARP, gratuitous ARP).
//!
//! # What it does
//!
//! [`classify`] parses an Ethernet frame (IPv4 or IPv6 without extension headers) far enough to
//! say whether it is a TCP segment (endpoints, sequence range, flags) or a DHCPv4 client message.
//! [`FlowTracker`] watches a host's egress segments per connection and counts those whose sequence
//! range starts before the highest sequence number already sent (a retransmission, seen at the
//! sender like `tcpdump` would), and RSTs in both directions.
//!
//! # What it does not do
//!
//! No IPv6 extension headers, no IP fragments, no checksum checks (the receiving stack does
//! those): a frame it cannot parse is simply "other".

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use smoltcp::wire::{
    DhcpMessageType, DhcpPacket, DhcpRepr, EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet,
    Ipv6Packet, TcpPacket, UdpPacket,
};

/// A TCP segment's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    /// Payload length plus one for SYN and one for FIN.
    pub seg_len: u32,
    pub payload_len: u32,
    pub syn: bool,
    pub fin: bool,
    pub rst: bool,
}

/// A DHCPv4 message's facts (client → server on 68 → 67, or server → client on 67 → 68).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dhcp {
    /// True for client → server.
    pub from_client: bool,
    pub message_type: DhcpMessageType,
    pub client_mac: [u8; 6],
    pub your_ip: Ipv4Addr,
    pub server_identifier: Option<Ipv4Addr>,
    pub subnet_mask: Option<Ipv4Addr>,
    pub router: Option<Ipv4Addr>,
    pub lease_duration: Option<u32>,
}

/// What a frame is, as far as the record cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Class {
    Tcp(Segment),
    Dhcp(Dhcp),
    /// An ICMP or ICMPv6 echo request.
    EchoRequest {
        ident: u16,
        seq: u16,
    },
    /// Any other UDP datagram.
    Udp {
        src: SocketAddr,
        dst: SocketAddr,
    },
    Other,
    /// Not even an Ethernet frame.
    Malformed,
}

/// Classifies one Ethernet frame.
pub fn classify(frame: &[u8]) -> Class {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Class::Malformed;
    };
    let (src, dst, proto, payload): (IpAddr, IpAddr, IpProtocol, &[u8]) = match eth.ethertype() {
        EthernetProtocol::Ipv4 => {
            let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
                return Class::Other;
            };
            if ip.more_frags() || ip.frag_offset() != 0 {
                return Class::Other;
            }
            (
                IpAddr::V4(ip.src_addr()),
                IpAddr::V4(ip.dst_addr()),
                ip.next_header(),
                ip.payload(),
            )
        }
        EthernetProtocol::Ipv6 => {
            let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else {
                return Class::Other;
            };
            (
                IpAddr::V6(ip.src_addr()),
                IpAddr::V6(ip.dst_addr()),
                ip.next_header(),
                ip.payload(),
            )
        }
        _ => return Class::Other,
    };
    match proto {
        IpProtocol::Tcp => {
            let Ok(tcp) = TcpPacket::new_checked(payload) else {
                return Class::Other;
            };
            let payload_len = tcp.payload().len() as u32;
            let seg_len = payload_len + u32::from(tcp.syn()) + u32::from(tcp.fin());
            Class::Tcp(Segment {
                src: SocketAddr::new(src, tcp.src_port()),
                dst: SocketAddr::new(dst, tcp.dst_port()),
                seq: tcp.seq_number().0 as u32,
                seg_len,
                payload_len,
                syn: tcp.syn(),
                fin: tcp.fin(),
                rst: tcp.rst(),
            })
        }
        IpProtocol::Udp => {
            let Ok(udp) = UdpPacket::new_checked(payload) else {
                return Class::Other;
            };
            let from_client = match (udp.src_port(), udp.dst_port()) {
                (68, 67) => true,
                (67, 68) => false,
                (sp, dp) => {
                    return Class::Udp {
                        src: SocketAddr::new(src, sp),
                        dst: SocketAddr::new(dst, dp),
                    };
                }
            };
            let Ok(pkt) = DhcpPacket::new_checked(udp.payload()) else {
                return Class::Other;
            };
            match DhcpRepr::parse(&pkt) {
                Ok(r) => Class::Dhcp(Dhcp {
                    from_client,
                    message_type: r.message_type,
                    client_mac: r.client_hardware_address.0,
                    your_ip: r.your_ip,
                    server_identifier: r.server_identifier,
                    subnet_mask: r.subnet_mask,
                    router: r.router,
                    lease_duration: r.lease_duration,
                }),
                Err(_) => Class::Other,
            }
        }
        // Echo request: type 8 (ICMP) or 128 (ICMPv6), code 0, then checksum, ident, seq.
        IpProtocol::Icmp | IpProtocol::Icmpv6 if payload.len() >= 8 => {
            let request = if proto == IpProtocol::Icmp { 8 } else { 128 };
            if payload[0] != request || payload[1] != 0 {
                return Class::Other;
            }
            Class::EchoRequest {
                ident: u16::from_be_bytes([payload[4], payload[5]]),
                seq: u16::from_be_bytes([payload[6], payload[7]]),
            }
        }
        _ => Class::Other,
    }
}

/// Per-connection segment statistics, keyed by (local, remote) endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// One past the highest sequence number sent.
    high: Option<u32>,
    pub data_segments: u64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
}

/// `a` comes before `b` in sequence space.
fn seq_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Watches one host's TCP segments.
#[derive(Debug, Default)]
pub struct FlowTracker {
    flows: BTreeMap<(SocketAddr, SocketAddr), FlowStats>,
}

impl FlowTracker {
    /// A segment the host sent.
    pub fn egress(&mut self, s: &Segment) {
        let f = self.flows.entry((s.src, s.dst)).or_default();
        if s.rst {
            f.resets_sent += 1;
        }
        if s.seg_len == 0 {
            return;
        }
        f.data_segments += 1;
        let end = s.seq.wrapping_add(s.seg_len);
        match f.high {
            Some(high) if s.syn => {
                // A SYN starts the sequence space again only for a new connection on the same
                // endpoints (port reuse); the same ISN again is a retransmitted SYN.
                if s.seq == high.wrapping_sub(1) {
                    f.retransmitted_segments += 1;
                } else {
                    f.high = Some(end);
                }
            }
            Some(high) => {
                if seq_before(s.seq, high) {
                    f.retransmitted_segments += 1;
                    let overlap = high.wrapping_sub(s.seq).min(s.payload_len);
                    f.retransmitted_bytes += u64::from(overlap);
                }
                if seq_before(high, end) {
                    f.high = Some(end);
                }
            }
            None => f.high = Some(end),
        }
    }

    /// A segment the host received.
    pub fn ingress(&mut self, s: &Segment) -> bool {
        if !s.rst {
            return false;
        }
        match self.flows.get_mut(&(s.dst, s.src)) {
            Some(f) => {
                f.resets_received += 1;
                true
            }
            None => false,
        }
    }

    /// Statistics of the connection from `local` to `remote`.
    pub fn get(&self, local: SocketAddr, remote: SocketAddr) -> Option<&FlowStats> {
        self.flows.get(&(local, remote))
    }

    /// Forgets a connection (after its record was finalised).
    pub fn remove(&mut self, local: SocketAddr, remote: SocketAddr) -> Option<FlowStats> {
        self.flows.remove(&(local, remote))
    }
}

/// A RARP "request reverse" announcing `mac`, as QEMU sends after a migration (EtherType 0x8035,
/// broadcast, sender and target hardware address = `mac`, protocol addresses 0).
pub fn rarp_announce(mac: [u8; 6]) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x80, 0x35]);
    f.extend_from_slice(&[0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x03]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0; 4]);
    f.resize(60, 0);
    f
}

/// A gratuitous ARP request for `ip` from `mac` (broadcast, sender = target protocol address).
pub fn garp_announce(mac: [u8; 6], ip: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06]);
    f.extend_from_slice(&[0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ip.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip.octets());
    f.resize(60, 0);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u32, len: u32) -> Segment {
        Segment {
            src: "10.0.0.1:1000".parse().unwrap(),
            dst: "10.0.0.2:80".parse().unwrap(),
            seq,
            seg_len: len,
            payload_len: len,
            syn: false,
            fin: false,
            rst: false,
        }
    }

    #[test]
    fn a_segment_below_the_high_mark_is_a_retransmission_also_across_wrap() {
        let mut t = FlowTracker::default();
        let base = u32::MAX - 1000;
        t.egress(&seg(base, 800));
        t.egress(&seg(base.wrapping_add(800), 800)); // wraps past 0
        t.egress(&seg(base.wrapping_add(800), 800)); // again: retransmission
        t.egress(&seg(base.wrapping_add(1600), 0)); // pure ACK: ignored
        let f = t
            .get(
                "10.0.0.1:1000".parse().unwrap(),
                "10.0.0.2:80".parse().unwrap(),
            )
            .unwrap();
        assert_eq!(f.data_segments, 3);
        assert_eq!(f.retransmitted_segments, 1);
        assert_eq!(f.retransmitted_bytes, 800);
    }
}
