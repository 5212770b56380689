//! The simulator's network: virtual clock, seeded randomness, links, hosts, the record, and a
//! deterministic event queue.
//!
//! # What it does
//!
//! - [`Clock`]: virtual monotonic time (a `Duration` since the simulation's origin) that only
//!   moves forward when told to.
//! - [`rng::Rng`]: xoshiro256** seeded by SplitMix64, with `fork(label)` for independent streams
//!   per component.
//! - [`link::Link`]: a one-way link with bandwidth, latency, optional loss, jitter and a drop-tail
//!   queue; FIFO. Defaults from DESIGN "The simulator's clock and costs".
//! - [`host::Host`]: a smoltcp host (Ethernet) with static addresses or a DHCPv4 client, ping, UDP
//!   echo client and server, TCP transfers of a verified byte pattern (upload or download, paced
//!   or not, any number at once), RARP/GARP announcements, pause/resume; its configuration and
//!   in-memory device in [`config`], the pattern protocol in [`tcp`], egress/ingress analysis in
//!   [`frames`], and per-neighbour IPv4 ARP in front of smoltcp in [`arp`] (smoltcp alone
//!   silences discovery interface-wide and drops replies to unknown senders).
//! - [`record`]: what every connection saw (bytes, verification, stalls, resets,
//!   retransmissions, pings, UDP, DHCP), serialised to canonical JSON.
//! - [`EventQueue`]: events keyed by (time, insertion sequence), so simultaneous events are
//!   handled in a fixed order.
//!
//! Everything is sans-I/O: every call takes `now`; nothing reads a clock, spawns a thread, or
//! touches OS randomness. The same seed and the same calls give the same frames and the same
//! record, byte for byte.
//!
//! # What it does not do
//!
//! It does not switch or route: links join exactly two ends, and what sits between hosts (the
//! datapaths, the Geneve underlay) is the world's business (`crate::world`). No DHCPv6, SLAAC,
//! DNS client, IP fragmentation or TCP congestion control in hosts (see [`host`]). Links do not
//! reorder, duplicate or corrupt.

pub mod arp;
pub mod config;
pub mod frames;
pub mod host;
pub mod link;
pub mod record;
pub mod rng;
pub mod tcp;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

pub use host::{Host, HostConfig, HostError};
pub use link::{Link, LinkConfig, LinkCounters};
pub use record::{HostRecord, Record, TcpRecord};
pub use rng::Rng;
pub use tcp::{Direction, Transfer};

/// Virtual time: a monotonic `Duration` since the simulation's origin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Clock {
    now: Duration,
}

impl Clock {
    /// A clock at the origin.
    pub fn new() -> Clock {
        Clock::default()
    }

    /// The current virtual time.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Moves to `t`; never backwards (an earlier `t` leaves the clock where it is). Returns the
    /// time now.
    pub fn advance_to(&mut self, t: Duration) -> Duration {
        self.now = self.now.max(t);
        self.now
    }

    /// Moves forward by `d`.
    pub fn advance_by(&mut self, d: Duration) -> Duration {
        self.now += d;
        self.now
    }
}

#[derive(Debug)]
struct Entry<E> {
    at: Duration,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Events ordered by time, then by insertion order (simultaneous events come out in the order
/// they were pushed).
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<Entry<E>>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> EventQueue<E> {
        EventQueue::default()
    }

    /// Schedules `event` at `at`.
    pub fn push(&mut self, at: Duration, event: E) {
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            at,
            seq: self.seq,
            event,
        }));
    }

    /// The time of the earliest event.
    pub fn peek_time(&self) -> Option<Duration> {
        self.heap.peek().map(|Reverse(e)| e.at)
    }

    /// The earliest event if it is due at `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<(Duration, E)> {
        if self.peek_time()? > now {
            return None;
        }
        self.pop()
    }

    /// The earliest event, due or not.
    pub fn pop(&mut self) -> Option<(Duration, E)> {
        self.heap.pop().map(|Reverse(e)| (e.at, e.event))
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// No events waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simultaneous_events_keep_insertion_order() {
        let mut q = EventQueue::new();
        let t = Duration::from_micros(5);
        q.push(t, "b1");
        q.push(Duration::from_micros(1), "a");
        q.push(t, "b2");
        q.push(t, "b3");
        assert_eq!(q.pop_due(Duration::ZERO), None);
        assert_eq!(q.pop_due(t), Some((Duration::from_micros(1), "a")));
        let rest: Vec<_> = std::iter::from_fn(|| q.pop_due(t))
            .map(|(_, e)| e)
            .collect();
        assert_eq!(rest, ["b1", "b2", "b3"]);
        assert!(q.is_empty());
    }

    #[test]
    fn clock_never_goes_back() {
        let mut c = Clock::new();
        c.advance_to(Duration::from_secs(2));
        assert_eq!(c.advance_to(Duration::from_secs(1)), Duration::from_secs(2));
        assert_eq!(c.advance_by(Duration::from_secs(1)), Duration::from_secs(3));
    }
}
