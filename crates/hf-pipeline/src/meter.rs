//! Meters: token buckets per meter, per pipeline (so per chassis), as OVS's userspace
//! datapath runs OpenFlow meters with drop bands.
//!
//! Three things use them, as OVN 23.03's ovn-controller wires them:
//! - `set_meter(rate[, burst])` (QoS bandwidth limits, kbps): a packet over the rate is
//!   dropped, with every copy it would still have made. One bucket per distinct
//!   `(rate, burst)` on the chassis, as ovn-controller allocates one OpenFlow meter per
//!   distinct `set_meter` text.
//! - `log(..., meter="M")`: the log line is left out when `M` is over its rate; the packet
//!   is not affected.
//! - A flow's `controller_meter` (CoPP, [`Meters::set_flow_meter`]): its controller actions
//!   (packet generation such as `arp`/`icmp4`/`reject`, `put_arp`/`put_nd`, DHCP/DNS/RA
//!   replies, events) are left out when the meter is over its rate; for the actions whose
//!   packet would continue only through the controller (DHCP, DNS, RA options) the packet is
//!   dropped.
//!
//! A named meter comes from SB `Meter` ([`MeterSpec`], [`Meters::set`]); one that is named but
//! not configured passes everything and is reported ([`Meters::unknown`]). The buckets start
//! full, hold `burst` units (the rate's one second when the burst is 0), and refill at the
//! rate: units are packets for `pktps`, bits for `kbps`. A meter with several bands drops a
//! packet when any band is out of tokens (all of OVN's bands are drop bands).
//!
//! What it does not do: bands other than `drop` (OVN has none), statistics beyond per meter
//! passed/dropped counts, or any clock of its own (`now` is the caller's).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::FlowId;

/// One configured meter (SB `Meter` with its `Meter_Band`s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterSpec {
    /// `name`.
    pub name: String,
    /// `unit` is `pktps` (else `kbps`).
    pub pktps: bool,
    /// The drop bands: (`rate`, `burst_size`).
    pub bands: Vec<(u64, u64)>,
}

/// Which bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum MeterKey {
    /// A named SB meter.
    Named(Arc<str>),
    /// `set_meter(rate, burst)`, kbps.
    Rate(u64, u64),
}

/// One band's bucket, in millionths of a unit.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: u128,
    cap: u128,
    /// Units per second.
    rate: u64,
    last: Duration,
}

impl Bucket {
    fn new(rate: u64, burst: u64, now: Duration) -> Bucket {
        let cap = u128::from(if burst == 0 { rate } else { burst }.max(1)) * 1_000_000;
        Bucket {
            tokens: cap,
            cap,
            rate,
            last: now,
        }
    }

    fn refill(&mut self, now: Duration) {
        if now > self.last {
            let ns = (now - self.last).as_nanos();
            // rate units/s = rate * 1e6 millionths per 1e9 ns.
            let add = ns.saturating_mul(u128::from(self.rate)) / 1_000;
            self.tokens = self.tokens.saturating_add(add).min(self.cap);
            self.last = now;
        }
    }
}

/// Passed and dropped packets of one meter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeterStats {
    /// Packets within the rate.
    pub passed: u64,
    /// Packets over it.
    pub dropped: u64,
}

/// One meter in use: its unit, a bucket per band, and what it passed and dropped (since its
/// configuration last changed). Made on its first packet, so a packet allocates nothing.
#[derive(Debug, Clone)]
struct Metered {
    pktps: bool,
    bands: Vec<Bucket>,
    stats: MeterStats,
}

/// The chassis's meters: configuration, buckets, and which flows are metered by which meter.
#[derive(Debug, Default)]
pub struct Meters {
    cfg: BTreeMap<Arc<str>, MeterSpec>,
    buckets: HashMap<MeterKey, Metered>,
    flow_meters: HashMap<FlowId, Arc<str>>,
    unknown: BTreeMap<Arc<str>, u64>,
}

impl Meters {
    /// Replaces the configured meters and the flows' controller meters. Buckets of meters whose
    /// bands did not change keep their tokens; the others start full.
    pub fn set(&mut self, meters: Vec<MeterSpec>, flow_meters: Vec<(FlowId, String)>) {
        let cfg: BTreeMap<Arc<str>, MeterSpec> = meters
            .into_iter()
            .map(|m| (Arc::from(m.name.as_str()), m))
            .collect();
        self.buckets.retain(|k, _| match k {
            MeterKey::Named(n) => cfg.get(n) == self.cfg.get(n),
            MeterKey::Rate(..) => true,
        });
        self.cfg = cfg;
        self.flow_meters = flow_meters
            .into_iter()
            .map(|(f, m)| (f, Arc::from(m.as_str())))
            .collect();
        self.unknown.clear();
    }

    /// Whether no flow has a controller meter (the common case: no lookup per punt).
    pub(crate) fn no_flow_meters(&self) -> bool {
        self.flow_meters.is_empty()
    }

    /// The controller meter of flow `id`.
    pub(crate) fn flow_meter(&self, id: &FlowId) -> Option<Arc<str>> {
        self.flow_meters.get(id).cloned()
    }

    /// Charges one packet of `bytes` to meter `key` at `now`: `true` when it is within the
    /// rate.
    pub(crate) fn allow(&mut self, key: &MeterKey, bytes: usize, now: Duration) -> bool {
        if !self.buckets.contains_key(key) {
            // First packet of this meter (or of its new configuration): its buckets, full.
            let one;
            let (pktps, bands) = match key {
                MeterKey::Named(n) => match self.cfg.get(n) {
                    Some(m) => (m.pktps, m.bands.as_slice()),
                    None => {
                        *self.unknown.entry(n.clone()).or_default() += 1;
                        return true;
                    }
                },
                MeterKey::Rate(rate, burst) => {
                    one = [(*rate, *burst)];
                    (false, &one[..])
                }
            };
            let bands = bands
                .iter()
                .map(|(rate, burst)| {
                    if pktps {
                        Bucket::new(*rate, *burst, now)
                    } else {
                        Bucket::new(rate.saturating_mul(1000), burst.saturating_mul(1000), now)
                    }
                })
                .collect();
            self.buckets.insert(
                key.clone(),
                Metered {
                    pktps,
                    bands,
                    stats: MeterStats::default(),
                },
            );
        }
        let Some(m) = self.buckets.get_mut(key) else {
            return true;
        };
        // pktps counts packets; kbps counts bits (a kilobit is 1000 bits).
        let units: u128 = if m.pktps { 1 } else { (bytes as u128) * 8 };
        let need = units * 1_000_000;
        let mut ok = true;
        for b in m.bands.iter_mut() {
            b.refill(now);
            if b.tokens < need {
                ok = false;
            }
        }
        if ok {
            for b in m.bands.iter_mut() {
                b.tokens -= need;
            }
            m.stats.passed += 1;
        } else {
            m.stats.dropped += 1;
        }
        ok
    }

    /// Per meter in use, by name (`set_meter`s as `set_meter(RATE, BURST)`): packets passed
    /// and dropped since its configuration last changed.
    pub fn stats(&self) -> Vec<(String, MeterStats)> {
        let mut v: Vec<(String, MeterStats)> = self
            .buckets
            .iter()
            .map(|(k, m)| {
                (
                    match k {
                        MeterKey::Named(n) => n.to_string(),
                        MeterKey::Rate(r, b) => format!("set_meter({r}, {b})"),
                    },
                    m.stats,
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Meters named by flows but not configured (they pass everything), with how many packets
    /// met them.
    pub fn unknown(&self) -> Vec<(String, u64)> {
        self.unknown
            .iter()
            .map(|(n, c)| (n.to_string(), *c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pktps_bucket_caps_a_flood_at_rate_plus_burst() {
        let mut m = Meters::default();
        m.set(
            vec![MeterSpec {
                name: "m".into(),
                pktps: true,
                bands: vec![(10, 5)],
            }],
            vec![],
        );
        let k = MeterKey::Named("m".into());
        // 1,000 packets a second for 2 s: 5 (the burst) + 10/s * 2 s pass.
        let mut passed = 0;
        for i in 0..2000u64 {
            if m.allow(&k, 100, ms(i)) {
                passed += 1;
            }
        }
        assert!((24..=26).contains(&passed), "passed {passed}");
        let s = m.stats();
        assert_eq!(s[0].1.passed + s[0].1.dropped, 2000);
    }

    #[test]
    fn kbps_counts_bits_and_burst_zero_means_one_second() {
        let mut m = Meters::default();
        // set_meter(80) = 80 kbit/s = 10,000 bytes/s; 1,000-byte packets: 10/s, burst 10.
        let k = MeterKey::Rate(80, 0);
        let mut passed = 0;
        for i in 0..1000u64 {
            if m.allow(&k, 1000, ms(i)) {
                passed += 1;
            }
        }
        assert!((19..=21).contains(&passed), "passed {passed}");
    }

    #[test]
    fn an_unconfigured_meter_passes_and_is_reported() {
        let mut m = Meters::default();
        let k = MeterKey::Named("nope".into());
        assert!(m.allow(&k, 1, ms(0)));
        assert_eq!(m.unknown(), vec![("nope".to_string(), 1)]);
    }

    #[test]
    fn reconfiguring_keeps_unchanged_buckets() {
        let spec = MeterSpec {
            name: "m".into(),
            pktps: true,
            bands: vec![(1, 1)],
        };
        let mut m = Meters::default();
        m.set(vec![spec.clone()], vec![]);
        let k = MeterKey::Named("m".into());
        assert!(m.allow(&k, 1, ms(0)));
        assert!(!m.allow(&k, 1, ms(1)));
        m.set(vec![spec.clone()], vec![]);
        assert!(
            !m.allow(&k, 1, ms(2)),
            "an unchanged meter kept its empty bucket"
        );
        m.set(
            vec![MeterSpec {
                bands: vec![(1, 2)],
                ..spec
            }],
            vec![],
        );
        assert!(m.allow(&k, 1, ms(3)), "a changed meter starts full");
    }
}
