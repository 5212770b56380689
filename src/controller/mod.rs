//! `holdfast controller`: the shell around [`hf_controller::daemon::Controller`], with
//! ovn-controller's command line where it applies and its unixctl commands. Thin: it dials the
//! SB remotes the core asks for (`tcp:`, `unix:`, `ssl:`), keeps one connection to the local
//! datapath's control socket (`--datapath unix:PATH`, retried every second while it is down),
//! moves bytes both ways, reads the clock, serves unixctl, and uses the daemon plumbing
//! `holdfast db` has (detach, monitor, pidfile, vlog).
//!
//! The local OVS database (ovn-controller's positional `OVS-DATABASE`, [`local`]) gives the
//! chassis settings (`external_ids:system-id`, `ovn-remote`, `ovn-encap-ip`, ...) that no
//! flag gives, and takes `Interface external_ids:ovn-installed`.
//!
//! What it does not do: apply a change of those settings without a restart (it logs that one
//! is needed), create the integration bridge, or ovn-controller's OpenFlow-specific commands (`group-table-list`, `meter-table-list`,
//! `lflow-cache/*`, `inject-pkt`): they are refused as unknown commands.
// An I/O shell: clocks, sockets, signals.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hf_controller::daemon::{Controller, ControllerConfig, Level, Tuning};
use hf_ovsdb_net::client::parse_remotes;
use hf_ovsdb_net::client::shell::{Reader, Writer, dial};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::db::shell::{self, ClientTlsArgs, DaemonArgs, ovn_logdir, ovn_rundir};

mod local;
use crate::db::{daemon, unixctl};
use hf_controller::daemon::local::Settings;
use local::LocalDb;

/// ovn-controller's options, as holdfast takes them.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The local OVS database, ovn-controller's OVS-DATABASE: `unix:PATH` or `tcp:IP:PORT`
    /// (default: unix:$OVS_RUNDIR/db.sock). The chassis settings come from its `Open_vSwitch
    /// external_ids` (`system-id`, `ovn-remote`, `ovn-encap-ip`, `ovn-encap-type`, `hostname`,
    /// `ovn-monitor-all`) where no flag gives them (the controller waits for them), and once a
    /// port's flows run, its `Interface` gets `external_ids:ovn-installed=true`.
    #[arg(value_name = "OVS-DATABASE")]
    database: Option<String>,

    /// The SB database (`external_ids:ovn-remote`): `tcp:IP:PORT`, `unix:PATH` or
    /// `ssl:IP:PORT`, a comma list for a cluster.
    #[arg(long, value_name = "DATABASE")]
    ovnsb_db: Option<String>,

    /// The chassis name (`Chassis.name`; `external_ids:system-id`).
    #[arg(long, value_name = "NAME")]
    system_id: Option<String>,

    /// The tunnel endpoint IP other chassis send Geneve to (`external_ids:ovn-encap-ip`).
    #[arg(long, value_name = "IP")]
    encap_ip: Option<std::net::IpAddr>,

    /// The encapsulation (`external_ids:ovn-encap-type`; default geneve, the only one
    /// holdfast speaks).
    #[arg(long, value_name = "TYPE")]
    encap_type: Option<String>,

    /// The hostname to register (`Chassis.hostname`, `external_ids:hostname`; default: this
    /// host's name).
    #[arg(long, value_name = "NAME")]
    hostname: Option<String>,

    /// The datapath's control socket, `unix:PATH` (default:
    /// unix:$OVS_RUNDIR/holdfast-datapath.sock).
    #[arg(long, value_name = "unix:PATH")]
    datapath: Option<String>,

    /// Monitor every SB row (`external_ids:ovn-monitor-all=true`) instead of only what this
    /// chassis needs.
    #[arg(long)]
    monitor_all: bool,

    /// The holdfast feature level to advertise (`Chassis.other_config:holdfast-features`) and
    /// parse: `hf-1` (OVN 20.06's language and SB layout) or `hf-2` (up to OVN 23.03; the
    /// default, the newest). An older level rehearses a rolling upgrade with holdfast's own
    /// processes: flows using newer constructs are, for this controller, flows it cannot
    /// parse (their last good version keeps running, reported in `debug/status` and
    /// `Chassis_Private.external_ids:holdfast-flow-errors`).
    #[arg(long, value_name = "LEVEL", value_parser = parse_feature_level)]
    feature_level: Option<hf_expr::Level>,

    /// The threads a full translation of the SB uses (the cold start, a resync), as
    /// ovn-northd's `--n-threads`; the result is the same with any number. Default: the
    /// available cores; 1 translates on the daemon's own thread.
    #[arg(long, value_name = "N")]
    n_threads: Option<usize>,

    /// OVS's daemon options.
    #[command(flatten)]
    daemon: DaemonArgs,

    /// TLS for ssl: databases.
    #[command(flatten)]
    tls: ClientTlsArgs,
}

/// `--feature-level`: a level name this build knows.
fn parse_feature_level(s: &str) -> Result<hf_expr::Level, String> {
    hf_expr::Level::ALL
        .iter()
        .copied()
        .find(|l| l.name() == s)
        .ok_or_else(|| {
            format!(
                "unknown feature level `{s}` (known levels: {})",
                hf_expr::Level::ALL
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// `version`'s text after the program name.
pub const CONTROLLER_VERSION: &str = concat!("(holdfast ", env!("CARGO_PKG_VERSION"), ") 23.03.0");

const PROGRAM: &str = "ovn-controller";

/// The SB replica's inactivity probe.
const PROBE_INTERVAL_MS: u64 = 30_000;

/// The unixctl commands, sorted by name.
const COMMANDS: &[unixctl::Command] = &[
    ("connection-status", "", 0, 0),
    ("ct-zone-list", "", 0, 0),
    ("debug/status", "", 0, 0),
    ("exit", "[--restart]", 0, 1),
    ("recompute", "", 0, 0),
    ("stopwatch/reset", "[NAME]", 0, 1),
    ("stopwatch/show", "[NAME]", 0, 1),
];

/// The origin of the core's `now` and of its stage clock.
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// The stage clock ([`Controller::set_stage_clock`]): time since [`START`].
fn stage_clock() -> Duration {
    START.get_or_init(Instant::now).elapsed()
}

struct Request {
    method: String,
    args: Vec<String>,
    reply: oneshot::Sender<Result<String, String>>,
}

fn start_unixctl(path: &Path, tx: mpsc::UnboundedSender<Request>) -> std::io::Result<()> {
    unixctl::listen(
        path,
        move |m| {
            let tx = tx.clone();
            async move {
                let reply = match unixctl::parse_request(m, COMMANDS) {
                    Err(None) => return None,
                    Err(Some(r)) => r,
                    Ok(q) => {
                        let (rtx, rrx) = oneshot::channel();
                        let _ = tx.send(Request {
                            method: q.method,
                            args: q.args,
                            reply: rtx,
                        });
                        let r = rrx
                            .await
                            .unwrap_or_else(|_| Err("ovn-controller is exiting".into()));
                        unixctl::reply(&q.id, r)
                    }
                };
                Some((reply, false))
            }
        },
        || {},
    )
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// Runs the controller.
pub fn run(args: ControllerArgs) -> anyhow::Result<ExitCode> {
    shell::start_logging(
        PROGRAM,
        &args.daemon.verbose,
        args.daemon.log_file.as_deref(),
        &ovn_logdir(),
        str::to_string,
    )?;
    let flags = flag_settings(&args);
    let local_db = match &args.database {
        Some(d) => d.clone(),
        None => format!("unix:{}", daemon::rundir().join("db.sock").display()),
    };
    shell::check_db_remotes("OVS-DATABASE", &parse_remotes(&local_db))?;
    // With every setting on the command line, mistakes are reported before detaching.
    if flags.missing().is_empty() {
        Chassis::check(&flags, &args.tls)?;
    }
    let rundir = ovn_rundir();
    let dp_path = match &args.datapath {
        None => daemon::rundir().join("holdfast-datapath.sock"),
        Some(d) => match d.strip_prefix("unix:") {
            Some(p) if !p.is_empty() => daemon::absolute(Path::new(p)),
            _ => anyhow::bail!("--datapath={d}: the datapath's control socket is unix:PATH"),
        },
    };
    let shell::Started {
        mut ready,
        pidfile: _pidfile,
        unixctl: unixctl_path,
    } = shell::start(PROGRAM, &args.daemon, &rundir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting tokio")?;
    let r = rt.block_on(serve(
        &args,
        flags,
        local_db,
        dp_path,
        unixctl_path,
        &rundir,
        &mut ready,
    ));
    if let Err(e) = &r {
        tracing::error!("{e:#}");
    }
    r
}

/// The chassis settings the command line gives.
fn flag_settings(args: &ControllerArgs) -> Settings {
    Settings {
        system_id: args.system_id.clone(),
        remote: args.ovnsb_db.clone(),
        encap_ip: args.encap_ip.map(|ip| ip.to_string()),
        encap_type: args.encap_type.clone(),
        hostname: args.hostname.clone(),
        monitor_all: args.monitor_all,
    }
}

/// The settings the controller needs, checked.
#[derive(Clone)]
struct Chassis {
    name: String,
    remotes: Vec<String>,
    tls: Option<Arc<hf_ovsdb_net::tls::ClientConfig>>,
    encap_ip: std::net::IpAddr,
    encap_type: String,
}

impl Chassis {
    /// Checks complete settings; the error names the setting and where it came from.
    fn check(s: &Settings, tls: &ClientTlsArgs) -> anyhow::Result<Chassis> {
        let what = |flag: &str, key: &str| format!("--{flag} (or external_ids:{key})");
        let name = s.system_id.clone().unwrap_or_default();
        if name.trim().is_empty() {
            anyhow::bail!(
                "{}: the chassis name must not be empty",
                what("system-id", "system-id")
            );
        }
        let encap_type = s.encap_type.clone().unwrap_or_else(|| "geneve".into());
        if encap_type != "geneve" {
            anyhow::bail!(
                "{}={encap_type}: holdfast's datapath speaks only geneve",
                what("encap-type", "ovn-encap-type")
            );
        }
        let ip_text = s.encap_ip.clone().unwrap_or_default();
        let encap_ip = ip_text.parse().map_err(|_| {
            anyhow::anyhow!(
                "{}={ip_text}: not an IP address",
                what("encap-ip", "ovn-encap-ip")
            )
        })?;
        let remotes = parse_remotes(s.remote.as_deref().unwrap_or_default());
        shell::check_db_remotes("--ovnsb-db (or external_ids:ovn-remote)", &remotes)?;
        let tls = tls.client_config(&remotes)?;
        Ok(Chassis {
            name,
            remotes,
            tls,
            encap_ip,
            encap_type,
        })
    }
}

/// The flags completed from the local database, waiting for it (and for the settings it
/// lacks) as ovn-controller does; says once what it waits for.
async fn wait_settings(local: &mut LocalDb, flags: &Settings) -> anyhow::Result<Settings> {
    if flags.missing().is_empty() {
        return Ok(flags.clone());
    }
    let mut said = String::new();
    loop {
        let missing = match local.settings(flags) {
            Some(s) if s.missing().is_empty() => return Ok(s),
            Some(s) => format!(
                "waiting for external_ids:{} in the local database {}",
                s.missing().join(", external_ids:"),
                local.remote()
            ),
            None => format!(
                "waiting for the local database {} for the settings no flag gives: {}",
                local.remote(),
                flags.missing().join(", ")
            ),
        };
        if missing != said {
            tracing::info!("{missing}");
            said = missing;
        }
        if !local.next().await {
            anyhow::bail!("the local database's replica stopped");
        }
    }
}

/// What the I/O tasks tell the main loop; `epoch` tells a stale connection's news apart.
enum Input {
    SbUp(u64, Writer),
    SbDown(u64, String),
    SbBytes(u64, Vec<u8>),
    DpUp(u64, Writer),
    DpDown(u64, String),
    DpBytes(u64, Vec<u8>),
}

fn spawn_reader(
    mut r: Reader,
    epoch: u64,
    tx: mpsc::UnboundedSender<Input>,
    bytes: fn(u64, Vec<u8>) -> Input,
    down: fn(u64, String) -> Input,
) {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match r.read(&mut buf).await {
                Ok(0) => {
                    let _ = tx.send(down(epoch, "connection closed".into()));
                    return;
                }
                Ok(n) => {
                    if tx.send(bytes(epoch, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.send(down(epoch, e.to_string()));
                    return;
                }
            }
        }
    });
}

/// The connections the main loop holds.
struct Links {
    remotes: Vec<String>,
    tls: Option<Arc<hf_ovsdb_net::tls::ClientConfig>>,
    dp_path: PathBuf,
    tx: mpsc::UnboundedSender<Input>,
    sb: Option<Writer>,
    sb_epoch: u64,
    dp: Option<Writer>,
    dp_epoch: u64,
    dp_dialing: bool,
    dp_retry: Instant,
    dp_warned: bool,
}

impl Links {
    fn dial_sb(&mut self, remote: usize) {
        self.sb = None;
        self.sb_epoch += 1;
        let epoch = self.sb_epoch;
        let name = self.remotes.get(remote).cloned().unwrap_or_default();
        let tls = self.tls.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match dial(&name, tls.as_ref()).await {
                Ok((r, w)) => {
                    let _ = tx.send(Input::SbUp(epoch, w));
                    spawn_reader(r, epoch, tx, Input::SbBytes, Input::SbDown);
                }
                Err(e) => {
                    let _ = tx.send(Input::SbDown(epoch, format!("{name}: {e}")));
                }
            }
        });
    }

    fn dial_dp(&mut self) {
        if self.dp.is_some() || self.dp_dialing || Instant::now() < self.dp_retry {
            return;
        }
        self.dp_dialing = true;
        self.dp_epoch += 1;
        let epoch = self.dp_epoch;
        let path = self.dp_path.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match tokio::net::UnixStream::connect(&path).await {
                Ok(s) => {
                    let (r, w) = s.into_split();
                    let _ = tx.send(Input::DpUp(epoch, Box::new(w)));
                    spawn_reader(Box::new(r), epoch, tx, Input::DpBytes, Input::DpDown);
                }
                Err(e) => {
                    let _ = tx.send(Input::DpDown(epoch, format!("{}: {e}", path.display())));
                }
            }
        });
    }
}

/// Moves the core's output to the connections; returns the time it next wants.
async fn drain(core: &mut Controller, links: &mut Links, start: Instant) {
    for _ in 0..64 {
        let now = start.elapsed();
        let mut moved = false;
        if let Some(reason) = core.poll_sb_close() {
            tracing::info!("SB: closing the connection: {reason}");
            links.sb = None;
            links.sb_epoch += 1;
        }
        while let Some(b) = core.poll_sb_transmit() {
            moved = true;
            if let Some(w) = links.sb.as_mut()
                && let Err(e) = w.write_all(&b).await
            {
                tracing::warn!("SB: write failed: {e}");
                links.sb = None;
                links.sb_epoch += 1;
                core.handle_sb_disconnected(now);
            }
        }
        if let Some(r) = core.poll_sb_connect() {
            moved = true;
            links.dial_sb(r);
        }
        while let Some(b) = core.poll_dp_transmit() {
            moved = true;
            if let Some(w) = links.dp.as_mut()
                && let Err(e) = w.write_all(&b).await
            {
                tracing::warn!("datapath: write failed: {e}");
                links.dp = None;
                links.dp_epoch += 1;
                links.dp_retry = Instant::now() + Duration::from_secs(1);
                core.handle_dp_disconnected(now);
            }
        }
        while let Some((l, line)) = core.poll_log() {
            match l {
                Level::Debug => tracing::debug!("{line}"),
                Level::Info => tracing::info!("{line}"),
                Level::Warn => tracing::warn!("{line}"),
                Level::Err => tracing::error!("{line}"),
            }
        }
        // ACL logs under ovn-controller's module name, as log shippers expect them.
        while let Some(line) = core.poll_acl_log() {
            tracing::info!(target: "acl_log", "{line}");
        }
        if !moved {
            break;
        }
    }
    for w in [links.sb.as_mut(), links.dp.as_mut()].into_iter().flatten() {
        let _ = w.flush().await;
    }
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    args: &ControllerArgs,
    flags: Settings,
    local_db: String,
    dp_path: PathBuf,
    unixctl_path: Option<PathBuf>,
    rundir: &Path,
    ready: &mut daemon::Readiness,
) -> anyhow::Result<ExitCode> {
    let (utx, mut urx) = mpsc::unbounded_channel();
    let bound = shell::bind_unixctl(
        unixctl_path.as_deref(),
        rundir,
        PROGRAM,
        "ovn-appctl",
        |p| start_unixctl(p, utx),
    )?;
    shell::ready(ready, "", &args.daemon);
    let mut local = LocalDb::spawn(&local_db);
    let settings = wait_settings(&mut local, &flags).await?;
    let chassis = Chassis::check(&settings, &args.tls)?;
    local.set_running(settings.clone());
    let Chassis { remotes, tls, .. } = chassis.clone();
    tracing::info!(
        "{PROGRAM} {CONTROLLER_VERSION}: chassis {}, SB {}, datapath unix:{}, local database {}",
        chassis.name,
        remotes.join(","),
        dp_path.display(),
        local.remote()
    );
    let start = *START.get_or_init(Instant::now);
    let cfg = ControllerConfig {
        chassis: chassis.name.clone(),
        hostname: settings.hostname.clone().unwrap_or_else(hostname),
        encap_type: chassis.encap_type.clone(),
        encap_ip: chassis.encap_ip.to_string(),
        monitor_all: settings.monitor_all,
    };
    let mut core = Controller::with_tuning(
        cfg,
        Tuning {
            remotes: remotes.len(),
            probe_interval_ms: Some(PROBE_INTERVAL_MS),
            wall_offset_ms: wall_ms(),
            feature_level: args
                .feature_level
                .unwrap_or_else(hf_controller::daemon::newest_level),
            translate_threads: hf_controller::Parallelism::threads(args.n_threads.unwrap_or_else(
                || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            )),
            ..Tuning::default()
        },
        Duration::ZERO,
    );
    core.set_stage_clock(stage_clock);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut links = Links {
        remotes,
        tls,
        dp_path,
        tx,
        sb: None,
        sb_epoch: 0,
        dp: None,
        dp_epoch: 0,
        dp_dialing: false,
        dp_retry: Instant::now(),
        dp_warned: false,
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut exit = false;
    let mut local_alive = true;
    drain(&mut core, &mut links, start).await;
    links.dial_dp();
    while !exit {
        let wake = core
            .poll_timeout()
            .map_or(Duration::from_secs(1), |t| {
                t.saturating_sub(start.elapsed())
            })
            .min(Duration::from_secs(1));
        tokio::select! {
            _ = tokio::signal::ctrl_c() => { tracing::info!("exiting on signal"); break }
            _ = term.recv() => { tracing::info!("exiting on signal"); break }
            i = rx.recv() => {
                let Some(i) = i else { break };
                let now = start.elapsed();
                match i {
                    Input::SbUp(e, w) if e == links.sb_epoch => {
                        links.sb = Some(w);
                        core.handle_sb_connected(now);
                    }
                    Input::SbDown(e, reason) if e == links.sb_epoch => {
                        tracing::debug!("SB: {reason}");
                        links.sb = None;
                        core.handle_sb_disconnected(now);
                    }
                    Input::SbBytes(e, b) if e == links.sb_epoch => core.handle_sb_bytes(&b, now),
                    Input::DpUp(e, w) if e == links.dp_epoch => {
                        links.dp = Some(w);
                        links.dp_dialing = false;
                        links.dp_warned = false;
                        tracing::info!("datapath: connected to unix:{}", links.dp_path.display());
                        core.handle_dp_connected(now);
                    }
                    Input::DpDown(e, reason) if e == links.dp_epoch => {
                        if links.dp.is_some() || !links.dp_warned {
                            tracing::warn!("datapath: {reason}; retrying every second");
                            links.dp_warned = true;
                        }
                        let was_up = links.dp.take().is_some();
                        links.dp_dialing = false;
                        links.dp_retry = Instant::now() + Duration::from_secs(1);
                        if was_up {
                            core.handle_dp_disconnected(now);
                        }
                    }
                    Input::DpBytes(e, b) if e == links.dp_epoch => core.handle_dp_bytes(&b, now),
                    _ => {}
                }
            }
            alive = local.next(), if local_alive => local_alive = alive,
            q = urx.recv() => {
                let Some(q) = q else { continue };
                let r = command(&q.method, &q.args, &mut core, start.elapsed());
                if q.method == "exit" { exit = true; }
                let _ = q.reply.send(r);
            }
            _ = tokio::time::sleep(wake) => {
                core.handle_timeout(start.elapsed());
            }
        }
        drain(&mut core, &mut links, start).await;
        links.dial_dp();
        local.sync_installed(
            &chassis.name,
            core.installed_ports_version(),
            || core.installed_ports(),
            &flags,
        );
    }
    if exit {
        tracing::info!("exiting by unixctl request");
    }
    if let Some(p) = bound {
        let _ = std::fs::remove_file(p);
    }
    Ok(ExitCode::SUCCESS)
}

fn command(
    method: &str,
    args: &[String],
    core: &mut Controller,
    now: Duration,
) -> Result<String, String> {
    match method {
        "exit" => Ok(String::new()),
        "version" => Ok(format!("{PROGRAM} {CONTROLLER_VERSION}")),
        "list-commands" => Ok(unixctl::list_commands(COMMANDS)),
        "connection-status" => Ok(if core.sb_synced() {
            "connected".into()
        } else {
            "not connected".into()
        }),
        "recompute" => {
            core.recompute(now);
            Ok(String::new())
        }
        "ct-zone-list" => Ok(core
            .zones()
            .iter()
            .map(|(n, z)| format!("{n} {z}\n"))
            .collect()),
        "debug/status" => Ok(core.status()),
        "stopwatch/show" => core.stopwatch().show(args.first().map(String::as_str)),
        "stopwatch/reset" => core
            .stopwatch_mut()
            .reset(args.first().map(String::as_str))
            .map(|()| String::new()),
        other => shell::vlog_command(other, args)
            .unwrap_or_else(|| Err(format!("\"{other}\" is not implemented"))),
    }
}
