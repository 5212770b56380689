//! What every holdfast daemon shell (`holdfast northd`, `controller`, `datapath`) shares with
//! the others: OVS's daemon options ([`DaemonArgs`]) and TLS client options
//! ([`ClientTlsArgs`]), the logging set-up, the start-up sequence (user, `--detach`,
//! `--monitor`, pidfile), the unixctl socket binding, the readiness hand-over, OVN's run and
//! log directories, and the `vlog/*` unixctl commands.
//!
//! What it does not do: anything protocol- or daemon-specific; each shell keeps its own
//! options, main loop and unixctl commands.
// A shell: environment, files and sockets.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;

use super::{daemon, vlog};

/// OVS's daemon options, as every OVS and OVN daemon spells them.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Write the process id to FILE (default: PROGRAM.pid in the run directory).
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub pidfile: Option<String>,

    /// With --pidfile, start even if another process holds the pidfile.
    #[arg(long)]
    pub overwrite_pidfile: bool,

    /// Run in the background once started; the daemon's standard streams go to /dev/null.
    #[arg(long)]
    pub detach: bool,

    /// With --detach, do not change the working directory to `/`.
    #[arg(long)]
    pub no_chdir: bool,

    /// Restart the daemon when it crashes.
    #[arg(long)]
    pub monitor: bool,

    /// Write log messages to FILE (default: PROGRAM.log in the log directory), without colour.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub log_file: Option<String>,

    /// Log levels, OVS's `[module][:destination][:level]`; `-v` alone means dbg everywhere.
    #[arg(short = 'v', long = "verbose", value_name = "SPEC", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub verbose: Vec<String>,

    /// The control socket `ovn-appctl -t`/`ovs-appctl -t` talks to (default:
    /// PROGRAM.PID.ctl in the run directory).
    #[arg(long, value_name = "SOCKET")]
    pub unixctl: Option<PathBuf>,

    /// Run as USER (and GROUP) once started.
    #[arg(long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,
}

/// TLS options for `ssl:` database remotes.
#[derive(Debug, Args)]
pub struct ClientTlsArgs {
    /// TLS private key (PEM) for ssl: databases.
    #[arg(long, short = 'p', value_name = "KEY")]
    pub private_key: Option<PathBuf>,

    /// TLS certificate (PEM) for ssl: databases.
    #[arg(long, short = 'c', value_name = "CERT")]
    pub certificate: Option<PathBuf>,

    /// CA certificate (PEM) that must have signed the servers' certificates.
    #[arg(long = "ca-cert", short = 'C', value_name = "CACERT")]
    pub ca_cert: Option<PathBuf>,

    /// TLS versions, as OVS spells them (`TLSv1.2,TLSv1.3`).
    #[arg(long, value_name = "PROTOCOLS")]
    pub ssl_protocols: Option<String>,

    /// TLS 1.2 cipher suites as an OpenSSL cipher string.
    #[arg(long, value_name = "CIPHERS")]
    pub ssl_ciphers: Option<String>,
}

impl ClientTlsArgs {
    /// The client TLS settings for `remotes`: `None` when no remote is `ssl:` and no key is
    /// given; an error when an `ssl:` remote lacks the three files.
    pub fn client_config(
        &self,
        remotes: &[String],
    ) -> anyhow::Result<Option<Arc<hf_ovsdb_net::tls::ClientConfig>>> {
        let needs_tls = remotes.iter().any(|r| r.starts_with("ssl:"));
        match (&self.private_key, &self.certificate, &self.ca_cert) {
            (Some(k), Some(c), Some(ca)) => Ok(Some(
                hf_ovsdb_net::tls::TlsSettings::load(&hf_ovsdb_net::tls::TlsFiles {
                    private_key: k.clone(),
                    certificate: c.clone(),
                    ca_cert: ca.clone(),
                    protocols: self.ssl_protocols.clone(),
                    ciphers: self.ssl_ciphers.clone(),
                })
                .and_then(|t| t.client_config())
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            )),
            _ if needs_tls => {
                anyhow::bail!("ssl: databases need --private-key, --certificate and --ca-cert")
            }
            _ => Ok(None),
        }
    }
}

/// Checks that `option` (e.g. `--ovnsb-db`) names at least one database and only
/// `unix:`/`tcp:`/`ssl:` ones.
pub fn check_db_remotes(option: &str, remotes: &[String]) -> anyhow::Result<()> {
    if remotes.is_empty() {
        anyhow::bail!("{option}: no database remote given");
    }
    for r in remotes {
        if !(r.starts_with("unix:") || r.starts_with("tcp:") || r.starts_with("ssl:")) {
            anyhow::bail!("{option}={r}: a database is unix:PATH, tcp:IP:PORT or ssl:IP:PORT");
        }
    }
    Ok(())
}

/// OVN's run directory: `$OVN_RUNDIR`, else `$OVS_RUNDIR`, else `/var/run/ovn`.
pub fn ovn_rundir() -> PathBuf {
    std::env::var_os("OVN_RUNDIR")
        .or_else(|| std::env::var_os("OVS_RUNDIR"))
        .map_or_else(|| PathBuf::from("/var/run/ovn"), PathBuf::from)
}

/// OVN's log directory: `$OVN_LOGDIR`, else `$OVS_LOGDIR`, else `/var/log/ovn`.
pub fn ovn_logdir() -> PathBuf {
    std::env::var_os("OVN_LOGDIR")
        .or_else(|| std::env::var_os("OVS_LOGDIR"))
        .map_or_else(|| PathBuf::from("/var/log/ovn"), PathBuf::from)
}

/// Sets up logging for `program`: `$HOLDFAST_LOG` (through `env_spec`), `--verbose`, and
/// `--log-file` (default `logdir/PROGRAM.log`).
pub fn start_logging(
    program: &str,
    verbose: &[String],
    log_file: Option<&str>,
    logdir: &Path,
    env_spec: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    vlog::set_program(program);
    if let Ok(v) = std::env::var("HOLDFAST_LOG") {
        vlog::set(&env_spec(&v)).map_err(|e| anyhow::anyhow!("HOLDFAST_LOG={v}: {e}"))?;
    }
    for v in verbose {
        vlog::set(v).map_err(|e| anyhow::anyhow!("--verbose={v}: {e}"))?;
    }
    vlog::install();
    if let Some(f) = log_file {
        let path = if f.is_empty() {
            logdir.join(format!("{program}.log"))
        } else {
            daemon::absolute(Path::new(f))
        };
        vlog::open_file(&path).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// What [`start`] leaves running: the readiness hand-over, the held pidfile and the unixctl
/// path asked for.
#[derive(Debug)]
pub struct Started {
    /// Tells the foreground process (with `--detach`) that the daemon is up.
    pub ready: daemon::Readiness,
    /// The held pidfile, if any.
    pub pidfile: Option<daemon::Pidfile>,
    /// `--unixctl`, made absolute.
    pub unixctl: Option<PathBuf>,
}

/// The start-up sequence before any thread exists: `--user`, `--detach`, `--monitor`, then
/// the pidfile (default `rundir/PROGRAM.pid`).
pub fn start(program: &str, args: &DaemonArgs, rundir: &Path) -> anyhow::Result<Started> {
    let pidfile = args.pidfile.as_ref().map(|p| {
        if p.is_empty() {
            rundir.join(format!("{program}.pid"))
        } else {
            daemon::absolute(Path::new(p))
        }
    });
    let unixctl = args.unixctl.as_deref().map(daemon::absolute);
    if let Some(u) = &args.user {
        daemon::become_user(u)?;
    }
    let mut ready = daemon::Readiness::default();
    if args.detach {
        ready = daemon::detach()?;
    }
    if args.monitor {
        ready = daemon::monitor(ready, args.detach)?;
    }
    let pidfile = match &pidfile {
        Some(p) => Some(daemon::Pidfile::create(p, args.overwrite_pidfile)?),
        None => None,
    };
    Ok(Started {
        ready,
        pidfile,
        unixctl,
    })
}

/// Binds the unixctl socket with `bind`: at `explicit` (`--unixctl`; failing is an error) or
/// at `rundir/PROGRAM.PID.ctl` (failing is a warning naming `appctl`). Returns the bound path,
/// to remove on exit.
pub fn bind_unixctl(
    explicit: Option<&Path>,
    rundir: &Path,
    program: &str,
    appctl: &str,
    bind: impl FnOnce(&Path) -> std::io::Result<()>,
) -> anyhow::Result<Option<PathBuf>> {
    let path = explicit.map_or_else(
        || super::unixctl::default_path(rundir, program),
        Path::to_path_buf,
    );
    match bind(&path) {
        Ok(()) => Ok(Some(path)),
        Err(e) if explicit.is_some() => {
            anyhow::bail!("{}: could not create unixctl socket: {e}", path.display())
        }
        Err(e) => {
            tracing::warn!(
                "{}: no unixctl socket ({e}); give --unixctl=PATH for {appctl}",
                path.display()
            );
            Ok(None)
        }
    }
}

/// Once the daemon serves: tells a waiting foreground process (with `banner`), and with
/// `--detach` stops console logging, closes the standard streams and changes to `/` (unless
/// `--no-chdir`).
pub fn ready(ready: &mut daemon::Readiness, banner: &str, args: &DaemonArgs) {
    if ready.waited_for() {
        ready.notify(banner);
    }
    if args.detach {
        vlog::console_off();
        daemon::null_stdio();
        if !args.no_chdir {
            let _ = std::env::set_current_dir("/");
        }
    }
}

/// The `vlog/*` unixctl commands every daemon serves; `None` for any other method.
pub fn vlog_command(method: &str, args: &[String]) -> Option<Result<String, String>> {
    Some(match method {
        "vlog/list" => Ok(vlog::list()),
        "vlog/set" => (|| {
            for spec in args {
                vlog::set(spec)?;
            }
            vlog::refresh();
            Ok(String::new())
        })(),
        "vlog/reopen" => vlog::reopen().map(|()| String::new()),
        "vlog/close" => {
            vlog::close();
            Ok(String::new())
        }
        _ => return None,
    })
}
