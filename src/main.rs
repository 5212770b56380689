//! `holdfast`: the command-line entry point. Thin: parses arguments and wires crates together.

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "holdfast",
    version,
    about = "Network virtualization that speaks OVN's language"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check and explain OVN logical flows (match/action language).
    Lflow(LflowArgs),
}

#[derive(Debug, Args)]
struct LflowArgs {
    #[command(subcommand)]
    command: LflowCommand,
}

#[derive(Debug, Subcommand)]
enum LflowCommand {
    /// Check every flow of an `ovn-sbctl lflow-list` dump: which fail to parse or type-check,
    /// or (with --features) which an older controller would reject.
    Check {
        /// A holdfast level (hf-1, hf-2), an OVN release (20.06), or a comma list of feature names.
        #[arg(long, value_name = "LEVEL|LIST")]
        features: Option<String>,
        /// The dump, or `-` for standard input.
        file: String,
    },
    /// Print the normalised form of a match: a disjunction of conjunctions of masked field tests.
    Normalize {
        /// The match text.
        r#match: String,
    },
}

fn lflow(args: LflowArgs) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    Ok(match args.command {
        LflowCommand::Check { features, file } => {
            if file == "-" {
                hf_expr::cli::check(features.as_deref(), std::io::stdin().lock(), &mut out)?
            } else {
                match std::fs::File::open(&file) {
                    Ok(f) => hf_expr::cli::check(features.as_deref(), f, &mut out)?,
                    Err(e) => {
                        eprintln!("error: cannot open {file}: {e}");
                        2
                    }
                }
            }
        }
        LflowCommand::Normalize { r#match } => hf_expr::cli::normalize(&r#match, &mut out)?,
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Lflow(args) => lflow(args)?,
    };
    std::process::exit(code);
}
