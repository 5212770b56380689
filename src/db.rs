//! `holdfast db`: command-line wiring of the OVSDB server (hf-ovsdb-net), in the style of
//! ovsdb-server: `holdfast db --remote ptcp:6641:127.0.0.1 --remote punix:PATH nb.db sb.db`,
//! and `holdfast db create FILE SCHEMA`.
// The binary is an I/O shell: it reads the clock and seeds randomness.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use hf_ovsdb_net::serve::{Remote, ServeOptions};
use hf_ovsdb_net::server::{Config, Core};
use hf_ovsdb_net::storage;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DbArgs {
    #[command(subcommand)]
    action: Option<DbAction>,

    /// Database files to serve (create them with `holdfast db create`). Without any, serves
    /// OVN_Northbound and OVN_Southbound from `--data-dir`, created from holdfast's embedded
    /// schemas on first use.
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
    /// `pssl:PORT[:IP]` (TLS; needs --private-key, --certificate and --ca-cert) or
    /// `punix:PATH`. Repeatable. Every database is served on every remote. Default:
    /// `ptcp:6641:127.0.0.1` and `ptcp:6642:127.0.0.1` (OVN's NB and SB ports).
    #[arg(long = "remote", value_name = "REMOTE")]
    remotes: Vec<String>,

    /// Write the process id to FILE (removed on clean exit).
    #[arg(long, value_name = "FILE")]
    pidfile: Option<PathBuf>,

    /// Write log messages to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,

    /// Run in the background once every remote is listening; the foreground process prints the
    /// bound addresses and exits.
    #[arg(long)]
    detach: bool,

    /// Milliseconds of silence before the server probes a client with `echo` (the client is
    /// dropped after as long again without any message). 0 disables probes.
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

    // Boxed: keeps `DbArgs` (and the `Command` enum holding it) small.
    #[command(flatten)]
    tls: Box<TlsArgs>,
}

/// ovsdb-server's TLS options (lib/stream-ssl.h), for `pssl:` remotes.
#[derive(Debug, Args)]
struct TlsArgs {
    /// TLS private key (PEM) for `pssl:` remotes.
    #[arg(short = 'p', long, value_name = "FILE")]
    private_key: Option<PathBuf>,

    /// TLS certificate (PEM; may be followed by intermediates) for `pssl:` remotes.
    #[arg(short = 'c', long, value_name = "FILE")]
    certificate: Option<PathBuf>,

    /// CA certificate(s) (PEM) that must have signed every client's certificate: clients
    /// without a certificate, or with one from another CA, are refused (and logged).
    #[arg(short = 'C', long, value_name = "FILE")]
    ca_cert: Option<PathBuf>,

    /// TLS versions, as OVS spells them: a list (`TLSv1.2,TLSv1.3`), a range
    /// (`TLSv1.2-TLSv1.3`) or `TLSv1.2+`. Default: TLS 1.2 and 1.3 (all rustls implements).
    #[arg(long, value_name = "PROTOCOLS")]
    ssl_protocols: Option<String>,

    /// TLS 1.2 cipher suites as an OpenSSL cipher string (e.g. `HIGH:!aNULL:!MD5`), mapped onto
    /// the suites rustls implements; a cipher it does not implement is an error.
    #[arg(long, value_name = "CIPHERS")]
    ssl_ciphers: Option<String>,
}

impl TlsArgs {
    /// The TLS configuration, when the key, certificate and CA certificate are given; an error
    /// when only some are, or when a `pssl:` remote has none.
    fn load(&self, remotes: &[Remote]) -> anyhow::Result<Option<hf_ovsdb_net::tls::TlsSettings>> {
        let needs = remotes.iter().any(|r| matches!(r, Remote::Ssl(_)));
        match (&self.private_key, &self.certificate, &self.ca_cert) {
            (Some(k), Some(c), Some(ca)) => {
                let files = hf_ovsdb_net::tls::TlsFiles {
                    private_key: k.clone(),
                    certificate: c.clone(),
                    ca_cert: ca.clone(),
                    protocols: self.ssl_protocols.clone(),
                    ciphers: self.ssl_ciphers.clone(),
                };
                Ok(Some(hf_ovsdb_net::tls::TlsSettings::load(&files)?))
            }
            (None, None, None) if !needs => {
                // Still check the strings, so that a typo is not silently carried along.
                let mut w = Vec::new();
                hf_ovsdb_net::tls::parse_protocols(self.ssl_protocols.as_deref(), &mut w)?;
                if let Some(c) = &self.ssl_ciphers {
                    hf_ovsdb_net::tls::parse_ciphers(c)?;
                }
                Ok(None)
            }
            _ => {
                let missing: Vec<&str> = [
                    ("--private-key", self.private_key.is_none()),
                    ("--certificate", self.certificate.is_none()),
                    ("--ca-cert", self.ca_cert.is_none()),
                ]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect();
                anyhow::bail!(
                    "TLS needs --private-key, --certificate and --ca-cert together{}: missing {}",
                    if needs { " (for the pssl: remote)" } else { "" },
                    missing.join(", ")
                )
            }
        }
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
        None => serve(args),
    }
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// holdfast's own schemas, embedded so that `holdfast db` works from any directory.
const NB_SCHEMA: &str = include_str!("../schemas/ovn-nb.ovsschema");
const SB_SCHEMA: &str = include_str!("../schemas/ovn-sb.ovsschema");

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

fn serve(mut args: DbArgs) -> anyhow::Result<ExitCode> {
    if args.databases.is_empty() {
        args.databases = default_databases(&args.data_dir)?;
    }
    if args.remotes.is_empty() {
        args.remotes = vec!["ptcp:6641:127.0.0.1".into(), "ptcp:6642:127.0.0.1".into()];
    }
    let remotes: Vec<Remote> = args
        .remotes
        .iter()
        .map(|r| {
            r.parse::<Remote>()
                .map_err(|e| anyhow::anyhow!("invalid --remote {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let tls = args.tls.load(&remotes)?;
    let cfg = Config {
        probe_interval_ms: (args.inactivity_probe > 0).then_some(args.inactivity_probe),
        compact_min_bytes: args.compact_threshold,
        ..Config::default()
    };
    // Load every file before anything else, so that a bad file fails fast and loudly.
    let mut core = Core::new(cfg.clone(), seed());
    let mut warnings = Vec::new();
    for path in &args.databases {
        let loaded =
            storage::open(path, seed(), cfg.history_txns).context("cannot open database")?;
        if let Some(w) = loaded.warning {
            warnings.push(w);
        }
        core.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    // With --detach, fork before the runtime starts; the parent waits for the child to say it
    // is listening (or why it failed) over a pipe.
    let mut ready_pipe = None;
    if args.detach {
        let (r, w) = nix::unistd::pipe().context("pipe")?;
        // SAFETY: no other threads exist yet (the tokio runtime is built after the fork).
        match unsafe { nix::unistd::fork() }.context("fork")? {
            nix::unistd::ForkResult::Parent { .. } => {
                drop(w);
                let mut msg = String::new();
                let mut f = std::fs::File::from(r);
                std::io::Read::read_to_string(&mut f, &mut msg).ok();
                print!("{msg}");
                return Ok(if msg.contains("listening on") {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                });
            }
            nix::unistd::ForkResult::Child => {
                drop(r);
                nix::unistd::setsid().ok();
                ready_pipe = Some(std::fs::File::from(w));
            }
        }
    }
    init_logging(args.log_file.as_deref())?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    for w in tls.iter().flat_map(|t| &t.warnings) {
        tracing::warn!("{w}");
    }
    if let Some(p) = &args.pidfile {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("cannot write pidfile {}", p.display()))?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let opts = ServeOptions {
        max_message: args.max_message,
        max_backlog: args.max_backlog,
        tls: hf_ovsdb_net::tls::ServerTls::new(
            tls.as_ref().map(|t| t.server_config()).transpose()?,
        ),
    };
    let result = rt.block_on(async {
        let server = match hf_ovsdb_net::serve::start(core, &remotes, opts).await {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("error: cannot listen: {e}\n");
                if let Some(mut p) = ready_pipe.take() {
                    let _ = p.write_all(msg.as_bytes());
                }
                return Err(anyhow::anyhow!("cannot listen: {e}"));
            }
        };
        let mut banner = String::new();
        for a in server.local_addrs() {
            banner.push_str(&format!("listening on {a}\n"));
        }
        // Detached: the foreground process prints the banner it reads from the pipe.
        match ready_pipe.take() {
            Some(mut p) => {
                let _ = p.write_all(banner.as_bytes());
            }
            None => {
                print!("{banner}");
                let _ = std::io::stdout().flush();
            }
        }
        tracing::info!(
            "serving {} on {}",
            server.with_core(|c, _| c.database_names().join(", ")),
            server.local_addrs().join(", ")
        );
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
        tracing::info!("exiting on signal");
        Ok(())
    });
    for r in &remotes {
        if let Remote::Unix(p) = r {
            let _ = std::fs::remove_file(p);
        }
    }
    if let Some(p) = &args.pidfile {
        let _ = std::fs::remove_file(p);
    }
    result.map(|()| ExitCode::SUCCESS)
}

fn init_logging(log_file: Option<&Path>) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOLDFAST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    match log_file {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open log file {}", p.display()))?;
            builder
                .with_ansi(false)
                .with_writer(std::sync::Mutex::new(f))
                .init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    Ok(())
}
