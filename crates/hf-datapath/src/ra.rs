//! Periodic unsolicited IPv6 router advertisements (`ipv6_ra_configs:send_periodic=true` on a
//! router port): the controller composes each advertisement ([`PeriodicRaMsg`], from the
//! router port's `ipv6_ra_*` options, as pinctrl's `ipv6_ra_update_config`/`ipv6_ra_send`
//! do) and the datapath sends it out of the local ports of the switch the router port
//! connects to, every `min_interval` plus a random part of `max_interval - min_interval`
//! seconds (pinctrl's `ipv6_ra_calc_next_announce`), the first one such an interval after the
//! advertisement is configured.
//!
//! What it does not do: run the advertisement through the switch's pipeline (pinctrl injects
//! it at the switch's patch port with the local-only flag, so to-lport ACLs could drop it;
//! here it goes straight to the local ports), or compose the frame (the controller does).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// [`crate::proto::ToDatapath::PeriodicRas`]: one router port's advertisement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeriodicRaMsg {
    /// The router port (its name identifies the advertisement).
    pub router_port: String,
    /// The local ports of the switch it connects to.
    pub ports: Vec<String>,
    /// The Ethernet frame (to 33:33:00:00:00:01, ff02::1).
    pub frame: Vec<u8>,
    /// `ipv6_ra_min_interval`, seconds.
    pub min_interval: u32,
    /// `ipv6_ra_max_interval`, seconds.
    pub max_interval: u32,
}

#[derive(Debug)]
struct Ra {
    msg: PeriodicRaMsg,
    next: Duration,
}

/// The advertisements of this chassis.
#[derive(Debug)]
pub struct Announcer {
    ras: BTreeMap<String, Ra>,
    rng: u64,
    /// Advertisements sent since start.
    pub sent: u64,
}

impl Default for Announcer {
    fn default() -> Self {
        Announcer {
            ras: BTreeMap::new(),
            rng: 0x853c_49e6_748f_ea9b,
            sent: 0,
        }
    }
}

impl Announcer {
    /// Seeds the random intervals (the simulator gives each chassis its own).
    pub fn seed(&mut self, s: u64) {
        self.rng = s | 1;
    }

    fn next_after(&mut self, now: Duration, min: u32, max: u32) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let (min_ms, max_ms) = (u64::from(min) * 1000, u64::from(max.max(min)) * 1000);
        let spread = max_ms - min_ms;
        let r = if spread == 0 { 0 } else { self.rng % spread };
        now + Duration::from_millis(min_ms + r)
    }

    /// Replaces the advertisements; one whose intervals are unchanged keeps its schedule.
    pub fn set(&mut self, list: Vec<PeriodicRaMsg>, now: Duration) {
        let mut old = std::mem::take(&mut self.ras);
        for m in list {
            let next = match old.remove(&m.router_port) {
                Some(o)
                    if o.msg.min_interval == m.min_interval
                        && o.msg.max_interval == m.max_interval =>
                {
                    o.next
                }
                _ => self.next_after(now, m.min_interval, m.max_interval),
            };
            self.ras.insert(m.router_port.clone(), Ra { msg: m, next });
        }
    }

    /// Whether no advertisement is configured.
    pub fn is_empty(&self) -> bool {
        self.ras.is_empty()
    }

    /// When the next advertisement is due.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.ras.values().map(|r| r.next).min()
    }

    /// The (local port, frame) pairs due by `now`.
    pub fn poll(&mut self, now: Duration) -> Vec<(String, Vec<u8>)> {
        let due: Vec<String> = self
            .ras
            .iter()
            .filter(|(_, r)| r.next <= now)
            .map(|(k, _)| k.clone())
            .collect();
        let mut out = Vec::new();
        for k in due {
            let (min, max) = match self.ras.get(&k) {
                Some(r) => (r.msg.min_interval, r.msg.max_interval),
                None => continue,
            };
            let next = self.next_after(now, min, max);
            if let Some(r) = self.ras.get_mut(&k) {
                r.next = next;
                for p in &r.msg.ports {
                    out.push((p.clone(), r.msg.frame.clone()));
                }
                self.sent += 1;
            }
        }
        out
    }
}

impl crate::Datapath {
    /// [`crate::proto::ToDatapath::PeriodicRas`].
    pub(crate) fn set_periodic_ras(&mut self, list: Vec<PeriodicRaMsg>, now: Duration) {
        let n = list.len();
        self.ras.set(list, now);
        self.log(
            crate::Level::Info,
            format!("periodic router advertisements: {n} router port(s)"),
        );
    }

    /// Sends the advertisements due.
    pub(crate) fn run_ras(&mut self, now: Duration) {
        for (port, f) in self.ras.poll(now) {
            if let Some(id) = self.ports.get(&port).map(|p| p.id) {
                self.queue_port_frame(id, &f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(min: u32, max: u32) -> PeriodicRaMsg {
        PeriodicRaMsg {
            router_port: "lr0-sw0".into(),
            ports: vec!["p1".into(), "p2".into()],
            frame: vec![1, 2, 3],
            min_interval: min,
            max_interval: max,
        }
    }

    #[test]
    fn advertisements_go_out_between_min_and_max_interval() {
        let s = Duration::from_secs(1);
        let mut a = Announcer::default();
        a.set(vec![msg(3, 4)], Duration::ZERO);
        let mut t = Duration::ZERO;
        let mut last = Duration::ZERO;
        for _ in 0..50 {
            let next = a.poll_timeout().unwrap_or_default();
            assert!(
                next >= last + 3 * s && next <= last + 4 * s,
                "{last:?} → {next:?}"
            );
            assert!(a.poll(next - Duration::from_millis(1)).is_empty());
            t = next;
            let out = a.poll(t);
            assert_eq!(out.len(), 2, "one frame per local port");
            last = t;
        }
        assert_eq!(a.sent, 50);
        // Same intervals: the schedule stays; new ones: rescheduled from now.
        let due = a.poll_timeout();
        a.set(vec![msg(3, 4)], t + s);
        assert_eq!(a.poll_timeout(), due);
        a.set(vec![msg(10, 20)], t + s);
        let n = a.poll_timeout().unwrap_or_default();
        assert!(n >= t + 11 * s && n <= t + 21 * s, "{n:?}");
        a.set(Vec::new(), t + s);
        assert!(a.is_empty() && a.poll_timeout().is_none());
    }
}
