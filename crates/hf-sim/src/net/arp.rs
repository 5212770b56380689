//! Per-neighbour ARP resolution in front of smoltcp, so simulated hosts resolve neighbours the
//! way Linux does rather than the way smoltcp 0.12 does.
//!
//! # Why
//!
//! smoltcp rate-limits neighbour discovery for the whole interface (one unanswered lookup
//! silences every other new neighbour for a second), and a reply the stack itself generates (an
//! ICMP echo reply, an RST) to a sender it has no ARP entry for is dropped, not queued. A host
//! that is pinged by a peer it never talked to therefore loses the first replies, and a host that
//! talks to two new neighbours within a second holds the second for a second. Linux resolves per
//! neighbour and queues packets while it does. Those artifacts would show up in the simulator as
//! "unreachable for a second" and be blamed on the datapath.
//!
//! # What it does
//!
//! [`Resolver`] keeps a shadow of smoltcp's IPv4 neighbour cache (same fill rule: an ARP request
//! or reply aimed at one of the host's addresses from a unicast sender on one of its networks;
//! same 60 s lifetime). The host then:
//! - asks for a next hop itself (its own ARP request, at most one per second per neighbour) when
//!   an application starts talking to it, and drops smoltcp's duplicate request;
//! - holds an arriving IPv4 packet addressed to it whose reply's next hop is unknown, asks for
//!   that next hop, and hands the packet to smoltcp once the answer arrived (or after
//!   [`HOLD_MAX`], whichever comes first), so smoltcp's reply finds the neighbour.
//!
//! # What it does not do
//!
//! IPv6 neighbour discovery is left to smoltcp as is (its limits apply). No ARP probing of stale
//! entries, no gratuitous-ARP learning (like smoltcp, only ARP aimed at the host fills the table).

use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::Duration;

/// smoltcp's neighbour cache entry lifetime.
pub const ENTRY_LIFETIME: Duration = Duration::from_secs(60);
/// Time between two ARP requests for the same neighbour.
pub const RETRY: Duration = Duration::from_secs(1);
/// Longest time an arriving packet is held for its reply's next hop.
pub const HOLD_MAX: Duration = Duration::from_secs(1);

/// An ARP packet's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arp {
    /// 1 request, 2 reply.
    pub op: u16,
    pub sender_mac: [u8; 6],
    pub sender_ip: Ipv4Addr,
    pub target_ip: Ipv4Addr,
}

/// Parses an Ethernet/IPv4 ARP frame.
pub fn parse(frame: &[u8]) -> Option<Arp> {
    if frame.len() < 42 || frame[12..14] != [0x08, 0x06] || frame[14..20] != [0, 1, 8, 0, 6, 4] {
        return None;
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&frame[22..28]);
    let ip = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
    Some(Arp {
        op: u16::from_be_bytes([frame[20], frame[21]]),
        sender_mac: mac,
        sender_ip: ip(28),
        target_ip: ip(38),
    })
}

/// A broadcast ARP request from `mac`/`spa` for `tpa`.
pub fn request(mac: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&spa.octets());
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&tpa.octets());
    f.resize(60, 0);
    f
}

/// The IPv4 source and destination of a frame, if it is IPv4.
pub fn ipv4_addrs(frame: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[14] >> 4 != 4 {
        return None;
    }
    let ip = |o: usize| Ipv4Addr::new(frame[o], frame[o + 1], frame[o + 2], frame[o + 3]);
    Some((ip(26), ip(30)))
}

/// The shadow neighbour table, outstanding requests and held packets.
#[derive(Debug, Default)]
pub struct Resolver {
    known: BTreeMap<Ipv4Addr, Duration>,
    asked: BTreeMap<Ipv4Addr, Duration>,
    held: VecDeque<(Ipv4Addr, Duration, Vec<u8>)>,
    /// Packets held, and those released without an answer.
    pub held_total: u64,
    pub released_unresolved: u64,
}

impl Resolver {
    /// `ip` has a live entry.
    pub fn is_known(&self, ip: Ipv4Addr, now: Duration) -> bool {
        self.known.get(&ip).is_some_and(|exp| *exp > now)
    }

    /// Learns from an ARP packet the host received, with smoltcp's rule: aimed at one of `ours`,
    /// from a unicast sender `on_link`. Returns true when it filled an entry.
    pub fn learn(&mut self, a: &Arp, ours: bool, on_link: bool, now: Duration) -> bool {
        let unicast_ip = !(a.sender_ip.is_unspecified()
            || a.sender_ip.is_broadcast()
            || a.sender_ip.is_multicast());
        let unicast_mac = a.sender_mac[0] & 1 == 0 && a.sender_mac != [0; 6];
        if !(a.op == 1 || a.op == 2) || !ours || !on_link || !unicast_ip || !unicast_mac {
            return false;
        }
        self.known.insert(a.sender_ip, now + ENTRY_LIFETIME);
        self.asked.remove(&a.sender_ip);
        true
    }

    /// Whether to send a request for `ip` now (unknown and not asked within [`RETRY`]); marks it
    /// asked when so.
    pub fn should_ask(&mut self, ip: Ipv4Addr, now: Duration) -> bool {
        if self.is_known(ip, now) {
            return false;
        }
        if self.asked.get(&ip).is_some_and(|t| now < *t + RETRY) {
            return false;
        }
        self.asked.insert(ip, now);
        true
    }

    /// smoltcp's own request for `ip` duplicates one of ours still outstanding.
    pub fn is_duplicate(&self, ip: Ipv4Addr, now: Duration) -> bool {
        self.asked.get(&ip).is_some_and(|t| now < *t + RETRY)
    }

    /// Holds `frame` until `next_hop` resolves.
    pub fn hold(&mut self, next_hop: Ipv4Addr, frame: Vec<u8>, now: Duration) {
        self.held_total += 1;
        self.held.push_back((next_hop, now, frame));
    }

    /// The held packets whose next hop is known now, or that waited [`HOLD_MAX`], in arrival
    /// order.
    pub fn release(&mut self, now: Duration) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut keep = VecDeque::new();
        while let Some((nh, at, f)) = self.held.pop_front() {
            if self.is_known(nh, now) {
                out.push(f);
            } else if now >= at + HOLD_MAX {
                self.released_unresolved += 1;
                out.push(f);
            } else {
                keep.push_back((nh, at, f));
            }
        }
        self.held = keep;
        out
    }

    /// Held packets waiting for `ip`.
    pub fn waiting_for(&self, ip: Ipv4Addr) -> bool {
        self.held.iter().any(|(nh, _, _)| *nh == ip)
    }

    /// When a held packet must be released, or a request repeated.
    pub fn next_deadline(&self) -> Option<Duration> {
        let held = self.held.iter().map(|(_, at, _)| *at + HOLD_MAX).min();
        let retry = self
            .held
            .iter()
            .filter_map(|(nh, _, _)| self.asked.get(nh).map(|t| *t + RETRY))
            .min();
        match (held, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Next hops of held packets (to repeat their requests).
    pub fn held_next_hops(&self) -> Vec<Ipv4Addr> {
        let mut v: Vec<Ipv4Addr> = self.held.iter().map(|(nh, _, _)| *nh).collect();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_like_smoltcp_and_asks_once_a_second() {
        let mut r = Resolver::default();
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        let t = Duration::from_secs(5);
        assert!(r.should_ask(peer, t));
        assert!(!r.should_ask(peer, t + Duration::from_millis(500)));
        assert!(r.is_duplicate(peer, t + Duration::from_millis(500)));
        assert!(r.should_ask(peer, t + Duration::from_secs(1)));
        let a = Arp {
            op: 2,
            sender_mac: [2, 0, 0, 0, 0, 2],
            sender_ip: peer,
            target_ip: Ipv4Addr::new(10, 0, 0, 1),
        };
        assert!(!r.learn(&a, false, true, t), "not aimed at us");
        assert!(!r.learn(&a, true, false, t), "not on link");
        assert!(r.learn(&a, true, true, t));
        assert!(r.is_known(peer, t + Duration::from_secs(59)));
        assert!(!r.is_known(peer, t + ENTRY_LIFETIME));
        let f = request([2, 0, 0, 0, 0, 1], Ipv4Addr::new(10, 0, 0, 1), peer);
        let p = parse(&f).unwrap();
        assert_eq!(
            (p.op, p.sender_ip, p.target_ip),
            (1, Ipv4Addr::new(10, 0, 0, 1), peer)
        );
    }

    #[test]
    fn held_packets_leave_when_resolved_or_after_hold_max() {
        let mut r = Resolver::default();
        let a = Ipv4Addr::new(10, 0, 0, 2);
        let b = Ipv4Addr::new(10, 0, 0, 3);
        r.hold(a, vec![1], Duration::ZERO);
        r.hold(b, vec![2], Duration::ZERO);
        assert!(r.release(Duration::from_millis(1)).is_empty());
        let arp = Arp {
            op: 1,
            sender_mac: [2, 0, 0, 0, 0, 2],
            sender_ip: a,
            target_ip: Ipv4Addr::new(10, 0, 0, 1),
        };
        r.learn(&arp, true, true, Duration::from_millis(2));
        assert_eq!(r.release(Duration::from_millis(2)), vec![vec![1]]);
        assert_eq!(r.next_deadline(), Some(HOLD_MAX));
        assert_eq!(r.release(HOLD_MAX), vec![vec![2]]);
        assert_eq!(r.released_unresolved, 1);
    }
}
