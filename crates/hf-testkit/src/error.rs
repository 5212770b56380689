//! The one error of the harness: what failed, and how to fix it where there is a fix.

use std::time::Duration;

/// `Result` with [`KitError`].
pub type Result<T> = std::result::Result<T, KitError>;

/// Why a harness call failed. Its `Debug` is its `Display`, so a test that returns
/// `Result<()>` and fails prints the whole message.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum KitError {
    /// A command could not be started at all.
    #[error("cannot run `{cmd}`: {source} (is it installed? scripts/test.sh installs the tools)")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("`{cmd}` failed ({status})\nstderr: {stderr}\nstdout: {stdout}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
        /// What it printed on stdout.
        stdout: String,
    },
    /// A command or a process did not finish in time; it was killed.
    #[error("`{cmd}` did not finish within {after:?} (killed)\nstderr: {stderr}\nstdout: {stdout}")]
    Timeout {
        /// The command line.
        cmd: String,
        /// How long it had.
        after: Duration,
        /// What it printed on stderr.
        stderr: String,
        /// What it printed on stdout.
        stdout: String,
    },
    /// A condition waited for never came true.
    #[error("gave up after {after:?} waiting for {what}")]
    Wait {
        /// What was waited for, and what was seen last.
        what: String,
        /// How long it waited.
        after: Duration,
    },
    /// A file or directory operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A tool's output was not what the harness can read.
    #[error("cannot read {what}: {detail}")]
    Parse {
        /// Whose output.
        what: String,
        /// What was wrong, with the text.
        detail: String,
    },
    /// An argument the harness cannot use (a name too long for an interface, a bad tag).
    #[error("{0}")]
    Invalid(String),
    /// The harness needs root (network namespaces).
    #[error("{0} needs root (network namespaces); run the tests as root, as CI does")]
    NotRoot(String),
    /// `iperf3` ran and reported a failure (a reset, a refused connection, a timeout): what was
    /// transferred until then is in the report.
    #[error("iperf3 failed: {error}\n{report}")]
    Iperf3 {
        /// iperf3's own error string (or why its report is unusable).
        error: String,
        /// The report it printed, with what was transferred before the failure.
        report: Box<crate::Iperf3Report>,
    },
}

impl std::fmt::Debug for KitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl KitError {
    /// An [`KitError::Io`] naming what was done.
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> KitError {
        KitError::Io {
            what: what.into(),
            source,
        }
    }
}
