//! `hf-bench`: holdfast's benchmark binary.
//!
//! `cargo run --release -p hf-bench -- <suite> [--json] [--tiny]` prints one result per line.
//! With `--json` each line is one JSON object (`suite`, `name`, `value`, `unit`, and for a
//! side-by-side comparison `baseline` and `ratio`, where a ratio above 1 always means holdfast is
//! ahead). `--tiny` runs every workload at a token size: `scripts/test.sh` uses it so that the
//! suites keep working; it measures nothing worth reporting.
//!
//! Benchmarks report; they never fail a build. A suite whose baseline tool is missing prints the
//! holdfast figure alone and says which baseline it skipped and why.
//!
//! Adding a suite: write `suites/<name>.rs` with `pub fn run(opts: &Opts, report: &mut Report) ->
//! anyhow::Result<()>` and list it in [`SUITES`].

mod alloc;
mod report;
mod suites;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

use clap::Parser;
pub use report::{Opts, Report};

/// Every suite, in the order `all` runs them.
const SUITES: &[(&str, &str, suites::SuiteFn)] = suites::ALL;

#[derive(Debug, Parser)]
#[command(name = "hf-bench", about = "Run holdfast's benchmark suites", long_about = None)]
struct Cli {
    /// The suite to run, or `all`. `list` prints the suites.
    suite: String,
    /// Print one JSON object per result line.
    #[arg(long)]
    json: bool,
    /// Token-sized workloads (keeps the suites working in CI; the numbers mean nothing).
    #[arg(long)]
    tiny: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let opts = Opts {
        json: cli.json,
        tiny: cli.tiny,
    };
    if cli.suite == "list" {
        for (name, about, _) in SUITES {
            println!("{name:16} {about}");
        }
        return Ok(());
    }
    let chosen: Vec<_> = if cli.suite == "all" {
        SUITES.iter().collect()
    } else {
        match SUITES.iter().find(|(n, _, _)| *n == cli.suite) {
            Some(s) => vec![s],
            None => {
                let names: Vec<_> = SUITES.iter().map(|(n, _, _)| *n).collect();
                anyhow::bail!(
                    "unknown suite `{}`\n  = help: the suites are: {}, or `all`",
                    cli.suite,
                    names.join(", ")
                );
            }
        }
    };
    let mut failed = Vec::new();
    for (name, _, run) in chosen {
        let mut report = Report::new(name, opts.clone());
        if let Err(e) = run(&opts, &mut report) {
            eprintln!("hf-bench: suite `{name}` failed: {e:#}");
            failed.push(*name);
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("suites that failed to run: {}", failed.join(", "));
    }
    Ok(())
}
