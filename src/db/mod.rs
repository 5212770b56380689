//! `holdfast db`: command-line wiring of the OVSDB server (hf-ovsdb-net), in the style of
//! ovsdb-server: `holdfast db --remote ptcp:6641:127.0.0.1 --remote punix:PATH nb.db sb.db`,
//! and `holdfast db create FILE SCHEMA`. Invoked as `ovsdb-server` (a link to the binary),
//! the same server with ovsdb-server's command line ([`OvsdbServerCli`]), so OVN's `ovn-ctl`
//! starts and stops it.
//!
//! Submodules: [`daemon`] (detach, monitor, pidfile, user), [`vlog`] (OVS-style logging),
//! [`remotes`] (`db:` remotes and TLS settings), [`unixctl`] (the `ovs-appctl` socket),
//! [`shell`] (what the northd, controller and datapath shells share).
// The binary is an I/O shell: it reads the clock and seeds randomness.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

pub(crate) mod daemon;
mod remotes;
pub(crate) mod shell;
pub(crate) mod unixctl;
pub(crate) mod vlog;
use hf_ovsdb_net::serve::{Remote, ServeOptions};
use hf_ovsdb_net::server::{Config, Core};
use hf_ovsdb_net::storage;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DbArgs {
    #[command(subcommand)]
    action: Option<DbAction>,

    #[command(flatten)]
    serve: ServeArgs,
}

/// The server's options: ovsdb-server's command line (as OVN's `ovn-ctl` and OVS's
/// `ovs-ctl` use it) plus holdfast's own tuning options.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Database files to serve (create them with `holdfast db create` or `ovsdb-tool
    /// create`). Without any, `holdfast db` (not `ovsdb-server`) serves OVN_Northbound and
    /// OVN_Southbound from `--data-dir`, created from holdfast's embedded schemas on first use.
    #[arg(value_name = "DATABASE")]
    databases: Vec<PathBuf>,

    /// Where the default NB and SB files live when no DATABASE is given.
    #[arg(
        long,
        value_name = "DIR",
        env = "HOLDFAST_DATA_DIR",
        default_value = "holdfast-data"
    )]
    data_dir: PathBuf,

    /// Listen on a passive remote: `ptcp:PORT[:IP]` (port 0 picks a free one),
    /// `pssl:PORT[:IP]` (TLS with mutual authentication: needs --private-key, --certificate
    /// and --ca-cert), `punix:PATH`, or `db:DB,TABLE,COLUMN` (the remotes named in that column: strings, or references to
    /// `Connection` rows whose `target` and `inactivity_probe` are used; followed as they
    /// change). Repeatable. Every database is served on every remote. Default for
    /// `holdfast db` (not `ovsdb-server`) when none is given: `ptcp:6641:127.0.0.1` and
    /// `ptcp:6642:127.0.0.1`.
    #[arg(long = "remote", value_name = "REMOTE")]
    remotes: Vec<String>,

    /// Write the process id to FILE (default: $OVS_RUNDIR/ovsdb-server.pid), locked while
    /// the server runs and removed on clean exit.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pidfile: Option<String>,

    /// With --pidfile, start even if another process holds the pidfile.
    #[arg(long)]
    overwrite_pidfile: bool,

    /// Write log messages to FILE (default: $OVS_LOGDIR/ovsdb-server.log), without colour.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    log_file: Option<String>,

    /// Log levels, OVS's `[module][:destination][:level]` (destinations console, syslog,
    /// file; levels off, emer, err, warn, info, dbg); `-v` alone means everything at dbg.
    /// Repeatable: `-vconsole:off -vfile:info`. See `vlog/list` for the modules.
    #[arg(short = 'v', long = "verbose", value_name = "SPEC", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    verbose: Vec<String>,

    /// Run in the background once every remote is listening and the pidfile exists; the
    /// foreground process prints the bound addresses and exits 0. The daemon's standard
    /// streams go to /dev/null.
    #[arg(long)]
    detach: bool,

    /// Run a supervisor process that restarts the server when it crashes (killed by SIGSEGV,
    /// SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGPIPE, SIGALRM, SIGXCPU, SIGXFSZ, SIGKILL, or a
    /// panic), at most once every 10 seconds.
    #[arg(long)]
    monitor: bool,

    /// With --detach, do not change the working directory to `/`.
    #[arg(long)]
    no_chdir: bool,

    /// Run as USER (and GROUP, default the user's) once started.
    #[arg(long, value_name = "USER[:GROUP]")]
    user: Option<String>,

    /// The control socket `ovs-appctl -t` talks to (default:
    /// $OVS_RUNDIR/ovsdb-server.PID.ctl).
    #[arg(long, value_name = "SOCKET")]
    unixctl: Option<PathBuf>,

    /// TLS private key (PEM) for pssl: remotes: a file, or `db:DB,TABLE,COLUMN` (OVN's SSL
    /// table), re-read when the database or the file changes.
    #[arg(long, short = 'p', value_name = "KEY")]
    private_key: Option<String>,

    /// TLS certificate (PEM; may be followed by intermediates) for pssl: remotes: a file or a
    /// `db:` reference.
    #[arg(long, short = 'c', value_name = "CERT")]
    certificate: Option<String>,

    /// CA certificate(s) (PEM) that must have signed every client's certificate (clients
    /// without one, or with one from another CA, are refused and logged): a file or a `db:`
    /// reference.
    #[arg(long = "ca-cert", short = 'C', value_name = "CACERT")]
    ca_cert: Option<String>,

    /// CA certificate file used as --ca-cert when that is not given and the file exists (a
    /// file or a `db:` reference). OVS writes a missing one from the first peer's chain;
    /// holdfast does not bootstrap, and reports a missing file as an error.
    #[arg(long, value_name = "CACERT")]
    bootstrap_ca_cert: Option<String>,

    /// Do not confine the process to its run and database directories. Compatibility only:
    /// holdfast never confines itself, so this is always the case.
    #[arg(long)]
    no_self_confinement: bool,

    /// TLS versions, as OVS spells them: a list (`TLSv1.2,TLSv1.3`), a range
    /// (`TLSv1.2-TLSv1.3`) or `TLSv1.2+`; or a `db:` reference. Default: TLS 1.2 and 1.3 (all
    /// rustls implements).
    #[arg(long, value_name = "PROTOCOLS")]
    ssl_protocols: Option<String>,

    /// TLS 1.2 cipher suites as an OpenSSL cipher string (e.g. `HIGH:!aNULL:!MD5`), mapped
    /// onto the suites rustls implements (a cipher it does not implement is an error); or a
    /// `db:` reference.
    #[arg(long, value_name = "CIPHERS")]
    ssl_ciphers: Option<String>,

    /// Write whole new column values, never column diffs (`_is_diff` records), to database
    /// files, as ovsdb-server's option does (for readers older than OVS 2.15).
    #[arg(long)]
    disable_file_column_diff: bool,

    /// Milliseconds of silence before the server probes a client with `echo` (the client is
    /// dropped after as long again without any message). 0 disables probes. A Connection
    /// row's inactivity_probe overrides it for its remote.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    inactivity_probe: u64,

    /// Bytes queued for one client before it is disconnected as a slow reader.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    max_backlog: usize,

    /// Largest accepted JSON-RPC message, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 << 20)]
    max_message: usize,

    /// Compact a database file once it is this large and four times its last compacted size.
    #[arg(long, value_name = "BYTES", default_value_t = 10 << 20)]
    compact_threshold: u64,
}

/// `ovsdb-server`'s command line: what the binary parses when invoked under that name.
#[derive(Debug, clap::Parser)]
#[command(
    name = "ovsdb-server",
    version = OVSDB_SERVER_VERSION,
    about = "holdfast's OVSDB server, invoked as ovsdb-server: a drop-in for OVS's ovsdb-server \
             as OVN's ovn-ctl and OVS's ovs-ctl start it.",
    after_help = COMPAT_HELP
)]
pub struct OvsdbServerCli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `version`'s and `--version`'s text after the program name: the holdfast release, then
/// the ovsdb-server release whose command line and unixctl interface holdfast follows (OVS's
/// scripts compare that last word, e.g. to decide that `ovs-appctl exit` is understood).
pub const OVSDB_SERVER_VERSION: &str = concat!("(holdfast ", env!("CARGO_PKG_VERSION"), ") 3.1.0");

const COMPAT_HELP: &str = "Options only for ovsdb-server compatibility: --no-self-confinement (holdfast never confines itself). --bootstrap-ca-cert is used as \
--ca-cert when its file exists; a missing one is an error (no bootstrapping from a peer). Not supported, refused by name: active remotes (tcp:, unix:, ssl: in --remote), \
--sync-from and the other replication options, --run, clustered and relay databases.";

/// OVS's getopt spelling `-vSPEC` (an optional argument glued to `-v`) as clap reads it:
/// `--verbose=SPEC`. Everything after `--` is left alone.
pub fn normalize_args(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut rest = false;
    for a in args {
        let s = a.to_string_lossy();
        if rest || s == "--" {
            rest = true;
            out.push(a);
        } else if let Some(spec) = s.strip_prefix("-v")
            && !s.starts_with("--")
        {
            out.push(format!("--verbose={spec}").into());
        } else {
            out.push(a);
        }
    }
    out
}

impl OvsdbServerCli {
    /// Serve as ovsdb-server.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        serve(self.serve, true)
    }
}

#[derive(Debug, Subcommand)]
enum DbAction {
    /// Create a database file holding only SCHEMA (an .ovsschema file), like
    /// `ovsdb-tool create`.
    Create {
        /// The database file to create (must not exist).
        file: PathBuf,
        /// The schema file.
        schema: PathBuf,
    },
    /// Compact database files offline: rewrite each as its schema plus one snapshot record.
    Compact {
        /// Database files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32) ^ u64::from_le_bytes(*uuid_bytes())
}

fn uuid_bytes() -> &'static [u8; 8] {
    static B: std::sync::OnceLock<[u8; 8]> = std::sync::OnceLock::new();
    B.get_or_init(|| {
        let mut b = [0u8; 8];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            let _ = std::io::Read::read_exact(&mut f, &mut b);
        }
        b
    })
}

pub fn run(args: DbArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(DbAction::Create { file, schema }) => {
            let text = std::fs::read_to_string(&schema)
                .with_context(|| format!("cannot read schema file {}", schema.display()))?;
            let s = storage::create(&file, &text)?;
            println!("created {} ({} {})", file.display(), s.name, s.version);
            Ok(ExitCode::SUCCESS)
        }
        Some(DbAction::Compact { files }) => {
            for f in files {
                let mut loaded = storage::open(&f, seed(), 0)?;
                if let Some(w) = loaded.warning {
                    eprintln!("warning: {w}");
                }
                let snap = hf_ovsdb::file::snapshot_file(&loaded.db, wall_ms());
                hf_ovsdb_net::server::Storage::replace(&mut loaded.storage, &snap)
                    .with_context(|| format!("compacting {}", f.display()))?;
                println!("compacted {} to {} bytes", f.display(), snap.len());
            }
            Ok(ExitCode::SUCCESS)
        }
        None => serve(args.serve, false),
    }
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// holdfast's own schemas, embedded so that `holdfast db` works from any directory.
const NB_SCHEMA: &str = include_str!("../../schemas/ovn-nb.ovsschema");
const SB_SCHEMA: &str = include_str!("../../schemas/ovn-sb.ovsschema");

/// The default NB and SB files in `dir`, created from the embedded schemas when missing.
fn default_databases(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let mut files = Vec::new();
    for (name, schema) in [("ovnnb_db.db", NB_SCHEMA), ("ovnsb_db.db", SB_SCHEMA)] {
        let f = dir.join(name);
        if !f.exists() {
            storage::create(&f, schema)?;
            eprintln!("created {}", f.display());
        }
        files.push(f);
    }
    Ok(files)
}

/// What `HOLDFAST_LOG` may say: a level for the console, or a `-v` spec.
fn env_log_spec(v: &str) -> String {
    match v.trim().to_ascii_lowercase().as_str() {
        "error" => "console:err".into(),
        "warn" => "console:warn".into(),
        "info" => "console:info".into(),
        "debug" | "trace" => "console:dbg".into(),
        "off" => "console:off".into(),
        other => other.to_string(),
    }
}

fn serve(args: ServeArgs, as_ovsdb_server: bool) -> anyhow::Result<ExitCode> {
    let program = "ovsdb-server";
    shell::start_logging(
        program,
        &args.verbose,
        args.log_file.as_deref(),
        &daemon::logdir(),
        env_log_spec,
    )?;
    let pidfile = args.pidfile.as_ref().map(|p| {
        if p.is_empty() {
            daemon::rundir().join(format!("{program}.pid"))
        } else {
            daemon::absolute(Path::new(p))
        }
    });
    let unixctl_path = args.unixctl.as_deref().map(daemon::absolute);
    for p in &args.databases {
        let s = p.to_string_lossy();
        if s.starts_with("relay:") {
            anyhow::bail!("{s}: relay databases are not supported by holdfast db");
        }
        let mut head = [0u8; 13];
        if let Ok(mut f) = std::fs::File::open(p)
            && std::io::Read::read_exact(&mut f, &mut head).is_ok()
            && &head == b"OVSDB CLUSTER"
        {
            anyhow::bail!(
                "{s}: a clustered database (ovsdb-tool create-cluster); holdfast db serves standalone files (ovsdb-tool create), and scales out on a real ovsdb-server cluster"
            );
        }
    }
    let mut databases: Vec<PathBuf> = args.databases.iter().map(|p| daemon::absolute(p)).collect();
    if databases.is_empty() {
        if as_ovsdb_server {
            anyhow::bail!(
                "no DATABASE given: holdfast's ovsdb-server serves the files named on its command line (it has no default conf.db)"
            );
        }
        databases = default_databases(&daemon::absolute(&args.data_dir))?;
    }
    let mut remote_strings = args.remotes.clone();
    if remote_strings.is_empty() && !as_ovsdb_server {
        remote_strings = vec!["ptcp:6641:127.0.0.1".into(), "ptcp:6642:127.0.0.1".into()];
    }
    // Syntax of every remote now, before forking: a typo fails in the foreground.
    let mut plain = Vec::new();
    for r in &remote_strings {
        match remotes::DbRef::parse(r) {
            Some(Err(e)) => anyhow::bail!("--remote={r}: {e}"),
            Some(Ok(_)) => {}
            None => {
                let parsed =
                    remotes::parse_passive(r).map_err(|e| anyhow::anyhow!("--remote={r}: {e}"))?;
                plain.push((r.clone(), parsed));
            }
        }
    }
    let tls = remotes::TlsSettings {
        private_key: args.private_key.clone(),
        certificate: args.certificate.clone(),
        ca_cert: args.ca_cert.clone(),
        bootstrap_ca_cert: args.bootstrap_ca_cert.clone(),
        protocols: args.ssl_protocols.clone(),
        ciphers: args.ssl_ciphers.clone(),
    };
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
    let d = Daemon {
        args: &args,
        as_ovsdb_server,
        program,
        pidfile,
        unixctl_path,
        databases,
        remote_strings,
        plain,
        tls,
    };
    match d.run(&mut ready) {
        Ok(code) => Ok(code),
        Err(e) => {
            // Logged (console and file, as OVS's fatal errors are) and printed by main.
            tracing::error!("{e:#}");
            Err(e)
        }
    }
}

/// The TLS settings last handed to the `pssl:` listeners: as resolved, and the files'
/// modification times then.
#[derive(Debug, Default, PartialEq)]
struct TlsState {
    resolved: remotes::ResolvedTls,
    mtimes: Vec<Option<std::time::SystemTime>>,
}

/// Re-resolve the TLS settings (their `db:` references follow the database, as
/// ovsdb-server's do) and, when they or their files changed, rebuild the configuration of the
/// `pssl:` listeners: new connections use it, established ones keep theirs. When the settings
/// are cleared the listeners refuse connections (logged per connection); when they cannot be
/// used (a missing file, a key that does not match) the error is logged, naming it, and the
/// previous configuration stays, as OVS keeps its last good key and certificate.
fn tls_changed(
    server: &hf_ovsdb_net::serve::Server,
    listener: &hf_ovsdb_net::tls::ServerTls,
    tls: &remotes::TlsSettings,
    last: &mut TlsState,
) {
    let resolved = match server.with_core(|c, _| tls.resolve(c)) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("{e}");
            return;
        }
    };
    let now = TlsState {
        mtimes: resolved.mtimes(),
        resolved,
    };
    if &now == last {
        return;
    }
    let built = now.resolved.load().and_then(|t| {
        t.map(|t| {
            for w in &t.warnings {
                tracing::warn!("{w}");
            }
            t.server_config().map_err(|e| e.to_string())
        })
        .transpose()
    });
    match built {
        Ok(Some(cfg)) => {
            let r = &now.resolved;
            tracing::info!(
                "TLS configuration loaded: private key {}, certificate {}, CA certificate {}{}{}",
                r.private_key.as_deref().unwrap_or_default(),
                r.certificate.as_deref().unwrap_or_default(),
                r.ca_cert
                    .as_deref()
                    .or(r.bootstrap_ca_cert.as_deref())
                    .unwrap_or_default(),
                r.protocols
                    .as_deref()
                    .map(|p| format!(", protocols {p}"))
                    .unwrap_or_default(),
                r.ciphers
                    .as_deref()
                    .map(|c| format!(", ciphers {c}"))
                    .unwrap_or_default(),
            );
            listener.set(Some(cfg));
        }
        Ok(None) => {
            if listener.get().is_some() {
                tracing::info!("TLS settings cleared: pssl: remotes refuse connections");
            }
            listener.set(None);
        }
        Err(e) => tracing::error!("TLS settings not applied: {e}"),
    }
    *last = now;
}

/// Everything the daemon process needs, resolved in the foreground.
struct Daemon<'a> {
    args: &'a ServeArgs,
    as_ovsdb_server: bool,
    program: &'a str,
    pidfile: Option<PathBuf>,
    unixctl_path: Option<PathBuf>,
    databases: Vec<PathBuf>,
    remote_strings: Vec<String>,
    plain: Vec<(String, Remote)>,
    tls: remotes::TlsSettings,
}

impl Daemon<'_> {
    fn run(self, ready: &mut daemon::Readiness) -> anyhow::Result<ExitCode> {
        let args = self.args;
        let cfg = Config {
            probe_interval_ms: (args.inactivity_probe > 0).then_some(args.inactivity_probe),
            compact_min_bytes: args.compact_threshold,
            // Column diffs in file records (`_is_diff`), as ovsdb-server writes them by default.
            file_column_diff: !args.disable_file_column_diff,
            ..Config::default()
        };
        // Rust's SIGSEGV/SIGBUS handler (stack-overflow detection) swallows a SIGSEGV sent by
        // kill(2); a daemon must die of it so that --monitor restarts it, as OVS's do.
        for sig in [
            nix::sys::signal::Signal::SIGSEGV,
            nix::sys::signal::Signal::SIGBUS,
        ] {
            // SAFETY: installing the default disposition; no handler code runs.
            let _ = unsafe { nix::sys::signal::signal(sig, nix::sys::signal::SigHandler::SigDfl) };
        }
        // Load every file before anything else, so that a bad file fails fast and loudly.
        let mut core = Core::new(cfg.clone(), seed());
        for path in &self.databases {
            let loaded =
                storage::open(path, seed(), cfg.history_txns).context("cannot open database")?;
            if let Some(w) = loaded.warning {
                tracing::warn!("{w}");
            }
            core.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        for r in &self.remote_strings {
            if r.starts_with("db:") {
                remotes::Remotes::validate(r, &core)
                    .map_err(|e| anyhow::anyhow!("--remote={r}: {e}"))?;
            }
        }
        self.tls.check(&core).map_err(anyhow::Error::msg)?;
        let pssl = self
            .plain
            .iter()
            .find(|(_, r)| matches!(r, Remote::Ssl(_)))
            .map(|(t, _)| t.as_str());
        self.tls.check_static(pssl).map_err(anyhow::Error::msg)?;
        let listener_tls = hf_ovsdb_net::tls::ServerTls::default();
        let _pidfile = match &self.pidfile {
            Some(p) => Some(daemon::Pidfile::create(p, args.overwrite_pidfile)?),
            None => None,
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting tokio")?;
        let opts = ServeOptions {
            max_message: args.max_message,
            max_backlog: args.max_backlog,
            tls: listener_tls.clone(),
        };
        let plain_remotes: Vec<Remote> = self.plain.iter().map(|(_, r)| r.clone()).collect();
        let unixctl_file = self
            .unixctl_path
            .clone()
            .unwrap_or_else(|| unixctl::default_path(&daemon::rundir(), self.program));
        let result = rt.block_on(async {
            let server = hf_ovsdb_net::serve::start(core, &plain_remotes, opts)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen: {e}"))?;
            let mut rs = remotes::Remotes::default();
            rs.configured = self.remote_strings.iter().cloned().collect();
            for (text, r) in &self.plain {
                rs.started(text, r.clone());
            }
            rs.reconcile(&server).await;
            let mut tls_now = TlsState::default();
            tls_changed(&server, &listener_tls, &self.tls, &mut tls_now);
            let rs = std::sync::Arc::new(tokio::sync::Mutex::new(rs));
            let (exit_tx, mut exit_rx) = tokio::sync::mpsc::unbounded_channel();
            let ctx = std::sync::Arc::new(unixctl::Ctx {
                server: server.clone(),
                remotes: rs.clone(),
                exit: exit_tx,
                version: format!("{} {OVSDB_SERVER_VERSION}", self.program),
            });
            let mut unixctl_bound = None;
            match unixctl::start(&unixctl_file, ctx) {
                Ok(()) => unixctl_bound = Some(unixctl_file.clone()),
                Err(e) if self.unixctl_path.is_some() || self.as_ovsdb_server => {
                    anyhow::bail!(
                        "{}: could not create unixctl socket: {e}",
                        unixctl_file.display()
                    );
                }
                Err(e) => tracing::warn!(
                    "{}: no unixctl socket ({e}); give --unixctl=PATH for ovs-appctl",
                    unixctl_file.display()
                ),
            }
            let mut banner = String::new();
            for (_, bound) in server.remotes() {
                banner.push_str(&format!("listening on {bound}\n"));
            }
            // ovsdb-server prints nothing; holdfast db prints what it bound (port 0 picks one).
            if self.as_ovsdb_server {
                for line in banner.lines() {
                    tracing::info!("{line}");
                }
                banner.clear();
            }
            if ready.waited_for() {
                ready.notify(&banner);
            } else {
                print!("{banner}");
                let _ = std::io::stdout().flush();
            }
            if args.detach {
                vlog::console_off();
                daemon::null_stdio();
                if !args.no_chdir {
                    let _ = std::env::set_current_dir("/");
                }
            }
            tracing::info!(
                "{} {OVSDB_SERVER_VERSION}: serving {}",
                self.program,
                server.with_core(|c, _| c.database_names().join(", "))
            );
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
            let mut ticks = 0u64;
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => { tracing::info!("exiting on signal"); break }
                    _ = term.recv() => { tracing::info!("exiting on signal"); break }
                    // (None: no unixctl socket, so no request can come.)
                    Some(()) = exit_rx.recv() => { tracing::info!("exiting by unixctl request"); break }
                    _ = tick.tick() => {
                        ticks += 1;
                        let mut r = rs.lock().await;
                        // Follow database changes; retry failed listens every 2 s.
                        let db_changed = r.changed(&server);
                        if db_changed || (r.failing && ticks.is_multiple_of(10)) {
                            r.reconcile(&server).await;
                        }
                        // TLS settings follow the database; their files are checked for
                        // changes every 2 s.
                        if db_changed || ticks.is_multiple_of(10) {
                            tls_changed(&server, &listener_tls, &self.tls, &mut tls_now);
                        }
                        // Connection rows' status, like ovsdb-server's 2.5 s status timer.
                        if ticks.is_multiple_of(12) {
                            r.update_status(&server);
                        }
                    }
                }
            }
            server.shutdown_listeners();
            // Committed transactions whose records are still queued: written before exiting.
            if !server.flush_records(std::time::Duration::from_secs(30)).await {
                tracing::warn!("exiting with file records not yet written (30 s passed)");
            }
            if let Some(p) = unixctl_bound {
                let _ = std::fs::remove_file(p);
            }
            Ok(())
        });
        result.map(|()| ExitCode::SUCCESS)
    }
}
