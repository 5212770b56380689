//! Stage stopwatches in the style of ovn-controller's `stopwatch/show`: for each named stage
//! of a change's way through a daemon (a wait or a piece of work), the samples taken, their
//! maximum, minimum, 95th percentile, a short-term and a long-term average, and the last one.
//! Both the controller and the datapath keep one set; their unixctl servers answer
//! `stopwatch/show [NAME]` and `stopwatch/reset [NAME]` from it.
//!
//! # What it does not do
//!
//! It reads no clock: callers hand it durations (the cores measure them between the `now`s
//! their shells give them, and their CPU stages with an optional clock the shell installs, so
//! the simulator stays deterministic). The percentile is over the last [`WINDOW`] samples
//! only.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Samples kept for the 95th percentile.
pub const WINDOW: usize = 256;

/// A clock a shell may install in a core to time its CPU stages (a duration since any fixed
/// origin; only differences are used). Without one, CPU stages read the `now` of the event.
pub type Clock = fn() -> Duration;

#[derive(Debug, Clone, Default)]
struct Stat {
    samples: u64,
    max: Duration,
    min: Duration,
    last: Duration,
    total: Duration,
    /// Exponentially weighted (α = 0.5): the recent trend, as OVN's short-term average.
    short_ms: f64,
    recent: VecDeque<Duration>,
}

/// A set of named stopwatches. Stages are shown in the order they were declared.
#[derive(Debug, Clone, Default)]
pub struct Stopwatches {
    order: Vec<&'static str>,
    stats: BTreeMap<&'static str, Stat>,
}

fn msec(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Stopwatches {
    /// A set with these stages (shown in this order, with no samples yet).
    pub fn new(stages: &[&'static str]) -> Stopwatches {
        let mut s = Stopwatches::default();
        for n in stages {
            s.declare(n);
        }
        s
    }

    fn declare(&mut self, name: &'static str) {
        if !self.stats.contains_key(name) {
            self.order.push(name);
            self.stats.insert(name, Stat::default());
        }
    }

    /// Adds one sample to stage `name` (declared on first use).
    pub fn record(&mut self, name: &'static str, d: Duration) {
        self.declare(name);
        let Some(s) = self.stats.get_mut(name) else {
            return;
        };
        if s.samples == 0 {
            s.min = d;
            s.max = d;
            s.short_ms = msec(d);
        } else {
            s.min = s.min.min(d);
            s.max = s.max.max(d);
            s.short_ms = 0.5 * s.short_ms + 0.5 * msec(d);
        }
        s.samples += 1;
        s.last = d;
        s.total += d;
        if s.recent.len() == WINDOW {
            s.recent.pop_front();
        }
        s.recent.push_back(d);
    }

    /// The samples of stage `name` (0 for a stage never recorded).
    pub fn samples(&self, name: &str) -> u64 {
        self.stats.get(name).map_or(0, |s| s.samples)
    }

    /// The last sample of stage `name`.
    pub fn last(&self, name: &str) -> Option<Duration> {
        self.stats
            .get(name)
            .filter(|s| s.samples > 0)
            .map(|s| s.last)
    }

    /// The long-term average of stage `name`, in milliseconds.
    pub fn average_ms(&self, name: &str) -> Option<f64> {
        self.stats
            .get(name)
            .filter(|s| s.samples > 0)
            .map(|s| msec(s.total) / s.samples as f64)
    }

    /// The stage names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.order.iter().copied()
    }

    /// Forgets the samples of `name` (or of every stage).
    pub fn reset(&mut self, name: Option<&str>) -> Result<(), String> {
        match name {
            None => {
                for s in self.stats.values_mut() {
                    *s = Stat::default();
                }
                Ok(())
            }
            Some(n) => match self.stats.get_mut(n) {
                Some(s) => {
                    *s = Stat::default();
                    Ok(())
                }
                None => Err(self.unknown(n)),
            },
        }
    }

    fn unknown(&self, n: &str) -> String {
        format!(
            "No such stopwatch \"{n}\"; the stopwatches are: {}",
            self.order.join(", ")
        )
    }

    /// `stopwatch/show [NAME]`'s text (every stage without a name).
    pub fn show(&self, name: Option<&str>) -> Result<String, String> {
        let names: Vec<&'static str> = match name {
            None => self.order.clone(),
            Some(n) => match self.order.iter().find(|o| **o == n) {
                Some(o) => vec![*o],
                None => return Err(self.unknown(n)),
            },
        };
        let mut out = String::new();
        for n in names {
            let Some(s) = self.stats.get(n) else {
                continue;
            };
            out.push_str(&format!("Statistics for '{n}'\n"));
            out.push_str(&format!("  Total samples: {}\n", s.samples));
            if s.samples == 0 {
                continue;
            }
            let mut sorted: Vec<Duration> = s.recent.iter().copied().collect();
            sorted.sort();
            let p95 = sorted
                .get((sorted.len() * 95).div_ceil(100).saturating_sub(1))
                .copied()
                .unwrap_or_default();
            out.push_str(&format!("  Maximum: {:.3} msec\n", msec(s.max)));
            out.push_str(&format!("  Minimum: {:.3} msec\n", msec(s.min)));
            out.push_str(&format!("  95th percentile: {:.6} msec\n", msec(p95)));
            out.push_str(&format!("  Short term average: {:.6} msec\n", s.short_ms));
            out.push_str(&format!(
                "  Long term average: {:.6} msec\n",
                msec(s.total) / s.samples as f64
            ));
            out.push_str(&format!("  Last sample: {:.3} msec\n", msec(s.last)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_reports_min_max_average_and_percentile() {
        let mut s = Stopwatches::new(&["a", "b"]);
        for ms in [4u64, 1, 10] {
            s.record("a", Duration::from_millis(ms));
        }
        let t = s.show(Some("a")).unwrap();
        assert!(t.contains("Total samples: 3\n"), "{t}");
        assert!(t.contains("Maximum: 10.000 msec"), "{t}");
        assert!(t.contains("Minimum: 1.000 msec"), "{t}");
        assert!(t.contains("95th percentile: 10.000000 msec"), "{t}");
        assert!(t.contains("Long term average: 5.000000 msec"), "{t}");
        assert!(t.contains("Last sample: 10.000 msec"), "{t}");
        // Every stage, in declaration order, even one without samples.
        let all = s.show(None).unwrap();
        assert!(all.find("'a'").unwrap() < all.find("'b'").unwrap(), "{all}");
        assert!(
            all.contains("Statistics for 'b'\n  Total samples: 0\n"),
            "{all}"
        );
        let e = s.show(Some("c")).unwrap_err();
        assert!(e.contains("\"c\"") && e.contains("a, b"), "{e}");
        s.reset(Some("a")).unwrap();
        assert_eq!(s.samples("a"), 0);
        assert!(s.reset(Some("zz")).is_err());
    }
}
