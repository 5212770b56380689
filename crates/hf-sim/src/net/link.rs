//! A one-way simulated link: bandwidth, latency, optional loss, jitter and a drop-tail queue.
//!
//! # What it does
//!
//! [`Link::send`] puts a frame on the wire at `now`: it starts when the previous frame has finished
//! serialising (FIFO), takes `len * 8 / bandwidth` to serialise, then arrives `latency` (+ a
//! random jitter up to [`LinkConfig::jitter`]) later. Delivery stays FIFO even with jitter (a frame
//! never overtakes the previous one). A lost frame (probability [`LinkConfig::loss_ppm`], drawn
//! from the link's own [`Rng`]) still occupies the wire, it just never arrives. With
//! [`LinkConfig::queue_limit_bytes`] a frame that finds that many bytes waiting to serialise is
//! dropped at the tail. [`Link::poll_deliver`] hands out frames whose arrival time has come;
//! [`Link::next_deadline`] says when the next one will.
//!
//! Defaults follow DESIGN "The simulator's clock and costs": 10 Gb/s and 50 µs one way
//! ([`LinkConfig::cluster`]), 1 ms one way to external hosts ([`LinkConfig::external`]), lossless.
//!
//! # What it does not do
//!
//! No reordering, no duplication, no corruption, no Ethernet framing overhead (preamble, FCS,
//! inter-frame gap are not counted), no MTU enforcement: a link carries whatever it is given. It
//! never reads a clock: time is the `now` passed in.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::rng::Rng;

/// A link's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkConfig {
    /// Bits per second (0 = infinitely fast).
    pub bandwidth_bps: u64,
    /// One-way propagation delay.
    pub latency: Duration,
    /// Loss probability in parts per million.
    pub loss_ppm: u32,
    /// Extra delay per frame, uniform in `0..=jitter`.
    pub jitter: Duration,
    /// Drop-tail limit on bytes waiting to serialise (None = unbounded).
    pub queue_limit_bytes: Option<u64>,
}

impl LinkConfig {
    /// Inside the cluster: 10 Gb/s, 50 µs one way, lossless.
    pub fn cluster() -> LinkConfig {
        LinkConfig {
            bandwidth_bps: 10_000_000_000,
            latency: Duration::from_micros(50),
            loss_ppm: 0,
            jitter: Duration::ZERO,
            queue_limit_bytes: None,
        }
    }

    /// To an external host: 10 Gb/s, 1 ms one way, lossless.
    pub fn external() -> LinkConfig {
        LinkConfig {
            latency: Duration::from_millis(1),
            ..LinkConfig::cluster()
        }
    }

    /// The same link with `ppm` parts per million of loss.
    pub fn with_loss_ppm(mut self, ppm: u32) -> LinkConfig {
        self.loss_ppm = ppm;
        self
    }

    /// The same link with up to `jitter` of extra delay per frame.
    pub fn with_jitter(mut self, jitter: Duration) -> LinkConfig {
        self.jitter = jitter;
        self
    }
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig::cluster()
    }
}

/// What a link did (all integers, so they serialise canonically).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LinkCounters {
    /// Frames handed to [`Link::send`].
    pub sent_frames: u64,
    /// Bytes handed to [`Link::send`].
    pub sent_bytes: u64,
    /// Frames handed out by [`Link::poll_deliver`].
    pub delivered_frames: u64,
    /// Bytes handed out by [`Link::poll_deliver`].
    pub delivered_bytes: u64,
    /// Frames lost to the loss probability.
    pub lost_frames: u64,
    /// Frames dropped because the queue was full.
    pub queue_drops: u64,
}

#[derive(Debug)]
struct InFlight<T> {
    arrive: Duration,
    len: u64,
    item: T,
}

/// A one-way link carrying items of type `T` (frames by default).
#[derive(Debug)]
pub struct Link<T = Vec<u8>> {
    cfg: LinkConfig,
    rng: Rng,
    /// When the wire is free again (the previous frame finished serialising).
    busy_until: Duration,
    /// Arrival time of the last frame put in flight (delivery stays FIFO).
    last_arrive: Duration,
    /// Frames in flight, in arrival order; each with the time it finishes serialising, for the
    /// queue limit.
    in_flight: VecDeque<InFlight<T>>,
    /// (time a frame finishes serialising, its length): the bytes still waiting for the wire.
    serialising: VecDeque<(Duration, u64)>,
    counters: LinkCounters,
}

/// Time to serialise `len` bytes at `bps` bits per second, rounded up to the nanosecond.
pub fn serialisation_time(len: u64, bps: u64) -> Duration {
    if bps == 0 {
        return Duration::ZERO;
    }
    let bits = u128::from(len) * 8 * 1_000_000_000;
    let nanos = bits.div_ceil(u128::from(bps));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

impl<T> Link<T> {
    /// A link with its own random stream (use [`Rng::fork`] with the link's name).
    pub fn new(cfg: LinkConfig, rng: Rng) -> Link<T> {
        Link {
            cfg,
            rng,
            busy_until: Duration::ZERO,
            last_arrive: Duration::ZERO,
            in_flight: VecDeque::new(),
            serialising: VecDeque::new(),
            counters: LinkCounters::default(),
        }
    }

    /// The link's parameters.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Changes the parameters from now on (frames already in flight keep their arrival time).
    pub fn set_config(&mut self, cfg: LinkConfig) {
        self.cfg = cfg;
    }

    /// Puts `item`, `len` bytes long on the wire, at `now`. Returns false when it was dropped
    /// (queue full or lost); a lost frame still occupies the wire.
    pub fn send_sized(&mut self, item: T, len: usize, now: Duration) -> bool {
        let len = len as u64;
        self.counters.sent_frames += 1;
        self.counters.sent_bytes += len;
        while self
            .serialising
            .front()
            .is_some_and(|(done, _)| *done <= now)
        {
            self.serialising.pop_front();
        }
        if let Some(limit) = self.cfg.queue_limit_bytes {
            let queued: u64 = self.serialising.iter().map(|(_, l)| l).sum();
            if queued + len > limit && !self.serialising.is_empty() {
                self.counters.queue_drops += 1;
                return false;
            }
        }
        let start = self.busy_until.max(now);
        let done = start + serialisation_time(len, self.cfg.bandwidth_bps);
        self.busy_until = done;
        self.serialising.push_back((done, len));
        let jitter = self.rng.duration_up_to(self.cfg.jitter);
        let lost = self.rng.chance_ppm(self.cfg.loss_ppm);
        if lost {
            self.counters.lost_frames += 1;
            return false;
        }
        let arrive = (done + self.cfg.latency + jitter).max(self.last_arrive);
        self.last_arrive = arrive;
        self.in_flight.push_back(InFlight { arrive, len, item });
        true
    }

    /// The next item whose arrival time is at or before `now`.
    pub fn poll_deliver(&mut self, now: Duration) -> Option<T> {
        if self.in_flight.front()?.arrive > now {
            return None;
        }
        let f = self.in_flight.pop_front()?;
        self.counters.delivered_frames += 1;
        self.counters.delivered_bytes += f.len;
        Some(f.item)
    }

    /// When the next item arrives (None when nothing is in flight).
    pub fn next_deadline(&self) -> Option<Duration> {
        self.in_flight.front().map(|f| f.arrive)
    }

    /// Items in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Drops everything in flight (a cable pulled); returns how many were dropped. They count as
    /// lost.
    pub fn clear(&mut self) -> usize {
        let n = self.in_flight.len();
        self.counters.lost_frames += n as u64;
        self.in_flight.clear();
        n
    }

    /// What the link did so far.
    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }
}

impl Link<Vec<u8>> {
    /// Puts a frame on the wire at `now` (see [`Link::send_sized`]).
    pub fn send(&mut self, frame: Vec<u8>, now: Duration) -> bool {
        let len = frame.len();
        self.send_sized(frame, len, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn frames_serialise_fifo_and_arrive_after_latency() {
        let mut l: Link = Link::new(LinkConfig::cluster(), Rng::new(1));
        // 1250 bytes at 10 Gb/s = 1 µs on the wire.
        assert!(l.send(vec![1; 1250], Duration::ZERO));
        assert!(l.send(vec![2; 1250], Duration::ZERO));
        assert_eq!(l.next_deadline(), Some(us(51)));
        assert_eq!(l.poll_deliver(us(50)), None);
        assert_eq!(l.poll_deliver(us(51)).map(|f| f[0]), Some(1));
        assert_eq!(l.poll_deliver(us(51)), None);
        assert_eq!(l.next_deadline(), Some(us(52)));
        assert_eq!(l.poll_deliver(us(60)).map(|f| f[0]), Some(2));
        assert_eq!(l.next_deadline(), None);
        assert_eq!(l.counters().delivered_frames, 2);
        assert_eq!(l.counters().delivered_bytes, 2500);
    }

    #[test]
    fn loss_is_seeded_and_jitter_keeps_order() {
        let cfg = LinkConfig::cluster()
            .with_loss_ppm(100_000)
            .with_jitter(us(20));
        let run = |seed| {
            let mut l: Link = Link::new(cfg.clone(), Rng::new(seed));
            let mut got = Vec::new();
            for i in 0..1000u32 {
                l.send(i.to_be_bytes().to_vec(), us(u64::from(i)));
            }
            while let Some(f) = l.poll_deliver(Duration::from_secs(1)) {
                got.push(u32::from_be_bytes([f[0], f[1], f[2], f[3]]));
            }
            (got, l.counters().clone())
        };
        let (a, ca) = run(5);
        let (b, cb) = run(5);
        let (c, _) = run(6);
        assert_eq!(a, b);
        assert_eq!(ca, cb);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "FIFO order kept");
        assert_eq!(ca.lost_frames + ca.delivered_frames, 1000);
        assert!(
            (50..150).contains(&ca.lost_frames),
            "lost {}",
            ca.lost_frames
        );
    }

    #[test]
    fn queue_limit_drops_at_the_tail() {
        let cfg = LinkConfig {
            bandwidth_bps: 8_000_000, // 1 byte per µs
            queue_limit_bytes: Some(3000),
            ..LinkConfig::cluster()
        };
        let mut l: Link = Link::new(cfg, Rng::new(1));
        assert!(l.send(vec![0; 1500], Duration::ZERO));
        assert!(l.send(vec![0; 1500], Duration::ZERO));
        assert!(!l.send(vec![0; 1500], Duration::ZERO));
        assert_eq!(l.counters().queue_drops, 1);
        // Once the first finished serialising there is room again.
        assert!(l.send(vec![0; 1500], us(1500)));
    }
}
