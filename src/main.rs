//! `holdfast`: the command-line entry point. Thin: parses arguments and wires crates together.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "holdfast",
    version,
    about = "Network virtualization that speaks OVN's language"
)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
