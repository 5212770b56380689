//! `holdfast lflow`: operators' tools for OVN's logical-flow language (hf-expr): check an
//! `ovn-sbctl lflow-list` dump, optionally against an older feature level (incident B's
//! question before an upgrade), and show the normalised form of a match.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct LflowArgs {
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

pub fn run(args: LflowArgs) -> anyhow::Result<i32> {
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
