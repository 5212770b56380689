//! `holdfast sandbox`: the whole of holdfast in one process on a simulated network, driven on
//! the wall clock, with its databases on `tcp:127.0.0.1:6641`/`6642` for real OVN tools.
//!
//! Submodules: [`args`] (the command line), [`bridge`] (TCP listeners whose connections are
//! sessions of the world's in-memory OVSDB server, and the task that drives the world).

pub mod args;
pub mod bridge;
pub mod topology;

pub use args::SandboxArgs;

/// Run `holdfast sandbox`.
pub fn run(args: SandboxArgs) -> anyhow::Result<std::process::ExitCode> {
    args.validate()?;
    anyhow::bail!("holdfast sandbox: the simulated world is not wired in yet")
}
