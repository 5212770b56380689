//! Result lines, in the format `../shared/DESIGN.md` ("Benchmarks") fixes.

use serde::Serialize;

/// Options every suite receives.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Print JSON lines instead of text.
    pub json: bool,
    /// Token-sized workloads.
    pub tiny: bool,
}

/// Whether a larger value is better (rates) or a smaller one (times, sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Rates: ops/s, pps.
    Higher,
    /// Times, sizes: seconds, bytes.
    Lower,
}

#[derive(Debug, Serialize)]
struct Baseline<'a> {
    name: &'a str,
    value: f64,
}

#[derive(Debug, Serialize)]
struct Line<'a> {
    suite: &'a str,
    name: &'a str,
    value: f64,
    unit: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<Baseline<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tiny: Option<bool>,
}

/// Collects and prints the result lines of one suite.
#[derive(Debug)]
pub struct Report {
    suite: String,
    opts: Opts,
    lines: usize,
}

impl Report {
    /// A report for `suite`.
    pub fn new(suite: &str, opts: Opts) -> Self {
        Report {
            suite: suite.to_string(),
            opts,
            lines: 0,
        }
    }

    /// Number of result lines printed so far.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// One figure without a baseline.
    pub fn result(&mut self, name: &str, value: f64, unit: &str) {
        self.emit(name, value, unit, None, Better::Higher);
    }

    /// One figure side by side with a baseline; the ratio is oriented so that above 1 means
    /// holdfast is ahead.
    pub fn compare(
        &mut self,
        name: &str,
        value: f64,
        unit: &str,
        better: Better,
        baseline_name: &str,
        baseline_value: f64,
    ) {
        self.emit(
            name,
            value,
            unit,
            Some((baseline_name, baseline_value)),
            better,
        );
    }

    /// A note (skipped baseline, workload description) on stderr, so stdout stays parseable.
    pub fn note(&self, msg: &str) {
        eprintln!("[{}] {msg}", self.suite);
    }

    fn emit(
        &mut self,
        name: &str,
        value: f64,
        unit: &str,
        baseline: Option<(&str, f64)>,
        better: Better,
    ) {
        self.lines += 1;
        let ratio = baseline.map(|(_, b)| match better {
            Better::Higher => value / b,
            Better::Lower => b / value,
        });
        if self.opts.json {
            let line = Line {
                suite: &self.suite,
                name,
                value,
                unit,
                baseline: baseline.map(|(name, value)| Baseline { name, value }),
                ratio,
                tiny: self.opts.tiny.then_some(true),
            };
            match serde_json::to_string(&line) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("hf-bench: cannot serialise a result: {e}"),
            }
        } else {
            let tiny = if self.opts.tiny { "  (tiny)" } else { "" };
            match (baseline, ratio) {
                (Some((bname, bval)), Some(r)) => println!(
                    "{:10} {name:40} {value:>14.1} {unit:8} {bname}: {bval:>14.1}  ratio {r:.2}{tiny}",
                    self.suite
                ),
                _ => println!("{:10} {name:40} {value:>14.1} {unit:8}{tiny}", self.suite),
            }
        }
    }
}
