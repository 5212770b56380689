//! Looking at a host's frames from the outside: TCP segment analysis (retransmissions, resets),
//! DHCP message counts, and builders for migration announcements (RARP, gratuitous ARP).
//!
//! # What it does
//!
//! [`classify`] parses an Ethernet frame (IPv4 or IPv6 without extension headers) far enough to
//! say whether it is a TCP segment (endpoints, sequence range, flags) or a DHCPv4 client message.
//! [`FlowTracker`] watches a host's segments per connection, like `tcpdump` on the host would:
//!
//! - egress segments whose sequence range starts before the highest sequence number already sent
//!   are retransmissions. Each retransmission belongs to an *episode*: one that does not continue
//!   the previous data segment sent (a jump back in sequence space, as a TCP stack rewinding to
//!   its oldest unacknowledged byte does) starts a new one. An episode that starts after the third
//!   duplicate ACK since the last episode or ACK progress is a fast retransmit (RFC 5681, and
//!   smoltcp's own trigger); any other is a retransmission timeout (the sender retransmitted
//!   without duplicate ACKs asking for it: its timer fired). Every segment of an episode (smoltcp
//!   goes back N) is counted with its episode's kind.
//! - ingress data segments whose bytes the host had already received in order are duplicates.
//!   The in-order point is the end of the contiguous data received since the SYN, or the host's
//!   own latest ACK number when that is further (data it had received out of order and then
//!   acknowledged), so a duplicate is never a guess.
//! - RSTs in both directions.
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
    /// The acknowledgement number, when the ACK flag is set.
    pub ack: Option<u32>,
    /// The window field as sent (unscaled).
    pub window: u16,
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
                ack: tcp.ack().then(|| tcp.ack_number().0 as u32),
                window: tcp.window_len(),
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

/// Duplicate ACKs that trigger a fast retransmit (RFC 5681 section 3.2; smoltcp's threshold).
pub const DUP_ACK_THRESHOLD: u32 = 3;

/// Per-connection segment statistics, keyed by (local, remote) endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// One past the highest sequence number sent.
    high: Option<u32>,
    /// One past the last data segment sent (a retransmission starting elsewhere opens a new
    /// episode).
    last_end: Option<u32>,
    /// The current retransmission episode is a fast retransmit.
    episode_fast: bool,
    /// The last acknowledgement number received, and the window that came with it.
    last_ack: Option<u32>,
    peer_window: u16,
    /// Duplicate ACKs received in a row for `last_ack`.
    dup_acks: u32,
    /// The third duplicate ACK arrived and no episode has started since.
    fast_pending: bool,
    /// The in-order receive point: one past the last byte received in order.
    rcv_nxt: Option<u32>,
    pub data_segments: u64,
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    /// Retransmitted segments of fast-retransmit episodes.
    pub fast_retransmits: u64,
    /// Retransmitted segments of timeout episodes.
    pub timeout_retransmits: u64,
    /// Timeout episodes (retransmissions without three duplicate ACKs asking for them).
    pub retransmission_timeouts: u64,
    /// Data segments received whose bytes had all been received in order already.
    pub duplicates: u64,
    pub resets_sent: u64,
    pub resets_received: u64,
}

impl FlowStats {
    /// A new connection on the same endpoints (port reuse): the per-connection state starts
    /// again, the counters go on.
    fn restart(&mut self) {
        self.high = None;
        self.last_end = None;
        self.episode_fast = false;
        self.last_ack = None;
        self.peer_window = 0;
        self.dup_acks = 0;
        self.fast_pending = false;
        self.rcv_nxt = None;
    }

    fn retransmitted(&mut self, seq: u32) {
        self.retransmitted_segments += 1;
        if self.last_end != Some(seq) {
            // A jump back: a new episode, fast when the third duplicate ACK asked for it.
            self.episode_fast = std::mem::take(&mut self.fast_pending);
            if !self.episode_fast {
                self.retransmission_timeouts += 1;
            }
        }
        if self.episode_fast {
            self.fast_retransmits += 1;
        } else {
            self.timeout_retransmits += 1;
        }
    }

    /// The in-order point moves to `to` when that is further.
    fn advance_rcv(&mut self, to: u32) {
        match self.rcv_nxt {
            Some(n) if !seq_before(n, to) => {}
            _ => self.rcv_nxt = Some(to),
        }
    }
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
        if let Some(ack) = s.ack
            && !s.rst
        {
            // What the host acknowledges it has received in order.
            f.advance_rcv(ack);
        }
        if s.seg_len == 0 {
            return;
        }
        f.data_segments += 1;
        let end = s.seq.wrapping_add(s.seg_len);
        let retransmission = match f.high {
            Some(high) if s.syn => {
                // A SYN starts the sequence space again only for a new connection on the same
                // endpoints (port reuse); the same ISN again is a retransmitted SYN.
                if s.seq == high.wrapping_sub(1) {
                    true
                } else {
                    f.restart();
                    if let Some(ack) = s.ack {
                        f.advance_rcv(ack);
                    }
                    f.high = Some(end);
                    false
                }
            }
            Some(high) => {
                let r = seq_before(s.seq, high);
                if r {
                    let overlap = high.wrapping_sub(s.seq).min(s.payload_len);
                    f.retransmitted_bytes += u64::from(overlap);
                }
                if seq_before(high, end) {
                    f.high = Some(end);
                }
                r
            }
            None => {
                f.high = Some(end);
                false
            }
        };
        if retransmission {
            f.retransmitted(s.seq);
        }
        f.last_end = Some(end);
    }

    /// A segment the host received; true when it is an RST of a connection the host knows.
    pub fn ingress(&mut self, s: &Segment) -> bool {
        if s.rst {
            return match self.flows.get_mut(&(s.dst, s.src)) {
                Some(f) => {
                    f.resets_received += 1;
                    true
                }
                None => false,
            };
        }
        let f = self.flows.entry((s.dst, s.src)).or_default();
        if let Some(ack) = s.ack {
            // smoltcp's duplicate ACK: no payload, the same acknowledgement number and window
            // as the last ACK, while data is outstanding.
            let outstanding = f.high.is_some_and(|h| seq_before(ack, h));
            match f.last_ack {
                Some(last)
                    if s.payload_len == 0
                        && last == ack
                        && outstanding
                        && s.window == f.peer_window =>
                {
                    f.dup_acks += 1;
                    if f.dup_acks == DUP_ACK_THRESHOLD {
                        f.fast_pending = true;
                    }
                }
                last => {
                    if last.is_none_or(|l| seq_before(l, ack)) {
                        // Progress: duplicate ACKs seen before no longer ask for anything.
                        f.fast_pending = false;
                    }
                    f.dup_acks = 0;
                    f.last_ack = Some(ack);
                }
            }
            f.peer_window = s.window;
        }
        let end = s.seq.wrapping_add(s.seg_len);
        if s.syn {
            f.rcv_nxt = Some(end);
            return false;
        }
        if s.seg_len == 0 {
            return false;
        }
        match f.rcv_nxt {
            Some(n) if s.payload_len > 0 && !seq_before(n, end) => f.duplicates += 1,
            Some(n) if !seq_before(n, s.seq) => f.advance_rcv(end),
            Some(_) => {} // out of order: the in-order point waits for the gap
            None => f.rcv_nxt = Some(end),
        }
        false
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
            ack: None,
            window: 1000,
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

    const LOCAL: &str = "10.0.0.1:1000";
    const REMOTE: &str = "10.0.0.2:80";

    /// A pure ACK from the peer (acknowledging up to `ack`).
    fn ack(ack: u32) -> Segment {
        Segment {
            src: REMOTE.parse().unwrap(),
            dst: LOCAL.parse().unwrap(),
            seq: 7,
            seg_len: 0,
            payload_len: 0,
            syn: false,
            fin: false,
            rst: false,
            ack: Some(ack),
            window: 1000,
        }
    }

    /// A data segment from the peer.
    fn data_in(seq: u32, len: u32) -> Segment {
        Segment {
            src: REMOTE.parse().unwrap(),
            dst: LOCAL.parse().unwrap(),
            ..seg(seq, len)
        }
    }

    fn stats(t: &FlowTracker) -> FlowStats {
        t.get(LOCAL.parse().unwrap(), REMOTE.parse().unwrap())
            .unwrap()
            .clone()
    }

    /// Three duplicate ACKs, then the sender goes back to the hole: a fast retransmit, and the
    /// segments that follow it in the same go-back-N burst are fast too.
    #[test]
    fn three_duplicate_acks_then_a_jump_back_is_a_fast_retransmit() {
        let mut t = FlowTracker::default();
        for i in 0..5 {
            t.egress(&seg(1000 + i * 100, 100));
        }
        t.ingress(&ack(1100));
        for _ in 0..3 {
            t.ingress(&ack(1100));
        }
        t.egress(&seg(1100, 100));
        t.egress(&seg(1200, 100));
        let f = stats(&t);
        assert_eq!(f.retransmitted_segments, 2);
        assert_eq!((f.fast_retransmits, f.timeout_retransmits), (2, 0), "{f:?}");
        assert_eq!(f.retransmission_timeouts, 0);
    }

    /// No duplicate ACKs: the sender retransmitted because its timer fired; the same segment
    /// again (backoff) is a second timeout. Two duplicate ACKs are not enough for a fast one.
    #[test]
    fn a_retransmission_without_duplicate_acks_is_a_timeout() {
        let mut t = FlowTracker::default();
        for i in 0..3 {
            t.egress(&seg(1000 + i * 100, 100));
        }
        t.ingress(&ack(1100));
        t.ingress(&ack(1100));
        t.ingress(&ack(1100));
        t.egress(&seg(1100, 100));
        t.egress(&seg(1100, 100));
        let f = stats(&t);
        assert_eq!((f.fast_retransmits, f.timeout_retransmits), (0, 2), "{f:?}");
        assert_eq!(f.retransmission_timeouts, 2);
    }

    /// A fast retransmit whose retransmission is lost too: the timer fires later, and more
    /// duplicate ACKs of the same run do not make that timeout a fast retransmit.
    #[test]
    fn a_timeout_after_a_fast_retransmit_is_a_timeout() {
        let mut t = FlowTracker::default();
        for i in 0..6 {
            t.egress(&seg(1000 + i * 100, 100));
        }
        t.ingress(&ack(1100));
        for _ in 0..3 {
            t.ingress(&ack(1100));
        }
        t.egress(&seg(1100, 100)); // fast
        t.ingress(&ack(1100)); // a 4th and 5th duplicate
        t.ingress(&ack(1100));
        t.egress(&seg(1100, 100)); // the timer
        let f = stats(&t);
        assert_eq!((f.fast_retransmits, f.timeout_retransmits), (1, 1), "{f:?}");
        assert_eq!(f.retransmission_timeouts, 1);
    }

    /// Data received twice is a duplicate once its bytes were received in order; data received
    /// out of order counts once the host acknowledged it.
    #[test]
    fn duplicates_are_bytes_already_received_in_order() {
        let mut t = FlowTracker::default();
        t.ingress(&Segment {
            syn: true,
            seg_len: 1,
            payload_len: 0,
            ..data_in(99, 0)
        });
        t.ingress(&data_in(100, 1000));
        t.ingress(&data_in(100, 1000)); // the same again
        assert_eq!(stats(&t).duplicates, 1);
        t.ingress(&data_in(2100, 1000)); // out of order: 1100..2100 missing
        t.ingress(&data_in(2100, 1000)); // twice, but never in order yet
        t.ingress(&data_in(1100, 1000)); // the gap
        assert_eq!(stats(&t).duplicates, 1);
        // The host acknowledges everything up to 3100 (it had kept 2100..3100).
        t.egress(&Segment {
            ack: Some(3100),
            ..seg(5000, 0)
        });
        t.ingress(&data_in(2100, 1000));
        t.ingress(&data_in(1600, 500)); // a part of what came in order
        t.ingress(&data_in(3000, 200)); // partly new: no duplicate
        let f = stats(&t);
        assert_eq!(f.duplicates, 3, "{f:?}");
    }
}
