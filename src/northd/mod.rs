//! `holdfast northd`: the shell around [`hf_northd::daemon::Northd`], with ovn-northd's command
//! line (also when the binary is invoked through a link named `ovn-northd`, so OVN's
//! `ovn-ctl start_northd` starts it) and its unixctl commands. Thin: two client replicas (NB
//! and the lean SB view) under hf-ovsdb-net's tokio shell, the clock, the unixctl socket, and
//! the daemon plumbing `holdfast db` uses (detach, monitor, pidfile, vlog).
//!
//! What it does not do: run several threads of compile work (`--n-threads` is accepted and
//! the log says holdfast northd is single-threaded), or ovn-northd's
//! `sb-cluster-state-reset`/`nb-cluster-state-reset` and `parallel-build/*` commands (refused as
//! unknown commands).
// An I/O shell: clocks, sockets, signals.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use hf_model::NbSnapshot;
use hf_northd::daemon::core::Level;
use hf_northd::daemon::{Config as CoreConfig, Northd, SbView};
use hf_ovsdb_net::client::{Client, Config, Event, parse_remotes};
use tokio::sync::{mpsc, oneshot};

use crate::db::shell::{self, ClientTlsArgs, DaemonArgs, ovn_logdir, ovn_rundir};
use crate::db::{daemon, unixctl};

/// ovn-northd's options.
#[derive(Debug, Args)]
pub struct NorthdArgs {
    /// The NB database: `unix:PATH`, `tcp:IP:PORT` or `ssl:IP:PORT`, a comma list for a
    /// cluster (default: unix:$OVN_RUNDIR/ovnnb_db.sock).
    #[arg(long, value_name = "DATABASE")]
    ovnnb_db: Option<String>,

    /// The SB database (default: unix:$OVN_RUNDIR/ovnsb_db.sock).
    #[arg(long, value_name = "DATABASE")]
    ovnsb_db: Option<String>,

    /// Accepted for ovn-northd compatibility: holdfast northd compiles on one thread.
    #[arg(long, value_name = "N")]
    n_threads: Option<u32>,

    /// Start paused: follow NB and SB, write nothing until `resume`.
    #[arg(long)]
    dry_run: bool,

    /// Every SECONDS, diff every SB row northd owns against the NB compile, not only the
    /// identities NB changes touched, repairing what other SB writers changed unseen (a
    /// write northd sees is repaired at once; so does `inc-engine/recompute`). 0: never.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    full_diff_interval: u64,

    /// OVS's daemon options.
    #[command(flatten)]
    daemon: DaemonArgs,

    /// TLS for ssl: databases.
    #[command(flatten)]
    tls: ClientTlsArgs,
}

/// `ovn-northd`'s command line, for the binary invoked under that name.
#[derive(Debug, clap::Parser)]
#[command(
    name = "ovn-northd",
    version = NORTHD_VERSION,
    about = "holdfast northd, invoked as ovn-northd: compiles the OVN northbound database into the southbound database, as OVN's ovn-northd does."
)]
pub struct OvnNorthdCli {
    #[command(flatten)]
    args: NorthdArgs,
}

impl OvnNorthdCli {
    /// Run as ovn-northd.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        run(self.args)
    }
}

/// `version`'s text after the program name: holdfast's release, then the OVN release whose
/// interface it follows.
pub const NORTHD_VERSION: &str = concat!("(holdfast ", env!("CARGO_PKG_VERSION"), ") 23.03.0");

const PROGRAM: &str = "ovn-northd";

/// The replicas' inactivity probe interval (see `serve`).
const PROBE_INTERVAL_MS: u64 = 30_000;

/// The unixctl commands, sorted by name.
const COMMANDS: &[unixctl::Command] = &[
    ("exit", "[--restart]", 0, 1),
    ("inc-engine/recompute", "", 0, 0),
    ("is-paused", "", 0, 0),
    ("memory/show", "", 0, 0),
    ("nb-connection-status", "", 0, 0),
    ("pause", "", 0, 0),
    ("resume", "", 0, 0),
    ("sb-connection-status", "", 0, 0),
    ("status", "", 0, 0),
];

/// One unixctl request handed to the main loop.
struct Request {
    method: String,
    args: Vec<String>,
    reply: oneshot::Sender<Result<String, String>>,
}

/// What the unixctl listener hands the main loop: a request, or word that the reply to `exit`
/// has been written (the loop ends only then, so `ovn-appctl exit` always gets its answer).
enum Unixctl {
    Request(Request),
    ExitReplied,
}

fn start_unixctl(path: &Path, tx: mpsc::UnboundedSender<Unixctl>) -> std::io::Result<()> {
    let exit_tx = tx.clone();
    unixctl::listen(
        path,
        move |m| {
            let tx = tx.clone();
            async move {
                let reply = match unixctl::parse_request(m, COMMANDS) {
                    Err(None) => return None,
                    Err(Some(r)) => r,
                    Ok(q) => {
                        let exit = q.method == "exit";
                        let (rtx, rrx) = oneshot::channel();
                        let _ = tx.send(Unixctl::Request(Request {
                            method: q.method,
                            args: q.args,
                            reply: rtx,
                        }));
                        let r = rrx
                            .await
                            .unwrap_or_else(|_| Err("ovn-northd is exiting".into()));
                        return Some((unixctl::reply(&q.id, r), exit));
                    }
                };
                Some((reply, false))
            }
        },
        move || {
            let _ = exit_tx.send(Unixctl::ExitReplied);
        },
    )
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn seed() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    u64::from_le_bytes(b) ^ (wall_ms() as u64) ^ u64::from(std::process::id())
}

/// Runs northd.
pub fn run(args: NorthdArgs) -> anyhow::Result<ExitCode> {
    shell::start_logging(
        PROGRAM,
        &args.daemon.verbose,
        args.daemon.log_file.as_deref(),
        &ovn_logdir(),
        str::to_string,
    )?;
    let rundir = ovn_rundir();
    let nb_db = args
        .ovnnb_db
        .clone()
        .unwrap_or_else(|| format!("unix:{}", rundir.join("ovnnb_db.sock").display()));
    let sb_db = args
        .ovnsb_db
        .clone()
        .unwrap_or_else(|| format!("unix:{}", rundir.join("ovnsb_db.sock").display()));
    let (nb_remotes, sb_remotes) = (parse_remotes(&nb_db), parse_remotes(&sb_db));
    shell::check_db_remotes("--ovnnb-db", &nb_remotes)?;
    shell::check_db_remotes("--ovnsb-db", &sb_remotes)?;
    let all: Vec<String> = nb_remotes.iter().chain(&sb_remotes).cloned().collect();
    let tls = args.tls.client_config(&all)?;
    let shell::Started {
        mut ready,
        pidfile: _pidfile,
        unixctl: unixctl_path,
    } = shell::start(PROGRAM, &args.daemon, &rundir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting tokio")?;
    let r = rt.block_on(serve(
        &args,
        nb_remotes,
        sb_remotes,
        tls,
        unixctl_path,
        &rundir,
        &mut ready,
    ));
    if let Err(e) = &r {
        tracing::error!("{e:#}");
    }
    r
}

async fn serve(
    args: &NorthdArgs,
    nb_remotes: Vec<String>,
    sb_remotes: Vec<String>,
    tls: Option<Arc<hf_ovsdb_net::tls::ClientConfig>>,
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
    tracing::info!(
        "{PROGRAM} {NORTHD_VERSION}: NB {}, SB {}",
        nb_remotes.join(","),
        sb_remotes.join(",")
    );
    if let Some(n) = args.n_threads
        && n != 1
    {
        tracing::info!(
            "--n-threads={n}: holdfast northd is single-threaded; compiling on one thread"
        );
    }
    // Inactivity probes every 30 s rather than OVN's 5 s: one transaction of a large SB
    // (100k flows) keeps ovsdb-server busy for 10 s on a loaded machine, and a probe that
    // drops the connection then only turns a committed write into a full resync.
    let probe = Some(PROBE_INTERVAL_MS);
    let nb_cfg = Config {
        initial_changes: false,
        probe_interval_ms: probe,
        ..Config::default()
    };
    let sb_cfg = Config {
        tables: SbView::tables(),
        probe_interval_ms: probe,
        ..Config::default()
    };
    let (nb, mut nb_rx) = Client::<NbSnapshot>::spawn_tls(nb_remotes, nb_cfg, tls.clone());
    let (sb, mut sb_rx) = Client::<SbView>::spawn_tls(sb_remotes, sb_cfg, tls);
    let mut core = Northd::new(CoreConfig {
        paused: args.dry_run,
        seed: seed(),
        full_diff_interval_ms: (args.full_diff_interval > 0)
            .then(|| args.full_diff_interval.saturating_mul(1000)),
    });
    sb.with(|s| core.start(s));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    let mut exit = false;
    while !exit {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => { tracing::info!("exiting on signal"); break }
            _ = term.recv() => { tracing::info!("exiting on signal"); break }
            ev = nb_rx.recv() => {
                let Some(ev) = ev else { break };
                drain("NB", ev, &mut nb_rx, log_line, |ev| core.handle_nb_event(ev));
            }
            ev = sb_rx.recv() => {
                let Some(ev) = ev else { break };
                drain("SB", ev, &mut sb_rx, log_line, |ev| core.handle_sb_event(ev));
            }
            q = urx.recv() => {
                match q {
                    Some(Unixctl::Request(q)) => {
                        let r = command(&q.method, &q.args, &mut core, &nb, &sb);
                        let _ = q.reply.send(r);
                    }
                    Some(Unixctl::ExitReplied) => exit = true,
                    None => {}
                }
            }
            _ = tick.tick() => {}
        }
        let now = nb.now_ms();
        let (t0, c0) = (std::time::Instant::now(), core.stats().compiles);
        nb.with(|n| sb.with(|s| core.poll(n, s, now, wall_ms())));
        let took = t0.elapsed();
        if took > std::time::Duration::from_millis(10) {
            tracing::debug!("poll took {} ms", took.as_millis());
        }
        if took > std::time::Duration::from_millis(100) {
            tracing::info!(
                "busy for {} ms ({} compile(s), {} flows built, {} datapaths rebuilt)",
                took.as_millis(),
                core.stats().compiles - c0,
                core.stats().last_flows_built,
                core.stats().last_rebuilt
            );
        }
        while let Some((l, line)) = core.poll_log() {
            match l {
                Level::Info => tracing::info!("{line}"),
                Level::Warn => tracing::warn!("{line}"),
                Level::Err => tracing::error!("{line}"),
            }
        }
    }
    if exit {
        tracing::info!("exiting by unixctl request");
    }
    drop(nb);
    drop(sb);
    if let Some(p) = bound {
        let _ = std::fs::remove_file(p);
    }
    Ok(ExitCode::SUCCESS)
}

/// Hands `first` and every event already waiting on `rx` to `handle`, each after its log line
/// (if it has one) went to `log`. Every event of a burst is logged, not just the first: a
/// reconnection to a new cluster leader usually arrives right behind other events.
fn drain<M: hf_ovsdb_net::client::Model>(
    db: &str,
    first: Event<M>,
    rx: &mut mpsc::UnboundedReceiver<Event<M>>,
    mut log: impl FnMut(tracing::Level, String),
    mut handle: impl FnMut(Event<M>),
) {
    let mut next = Some(first);
    while let Some(ev) = next {
        if let Some((level, line)) = event_line(db, &ev) {
            log(level, line);
        }
        handle(ev);
        next = rx.try_recv().ok();
    }
}

/// The shell's own log line for a replica event (the core logs disconnections itself).
fn event_line<M: hf_ovsdb_net::client::Model>(
    db: &str,
    ev: &Event<M>,
) -> Option<(tracing::Level, String)> {
    match ev {
        Event::Connected { remote, method } => Some((
            tracing::Level::INFO,
            format!("{db}: connected to remote {remote} ({})", method.name()),
        )),
        Event::Resynced { full, rows, .. } => Some((
            tracing::Level::DEBUG,
            format!("{db}: in sync ({rows} rows, full={full})"),
        )),
        // The cold-start timeline (docs/db-scale.md): when the transaction's reply and the
        // changes (the echo among them) reach northd.
        Event::TxnDone { id, outcome, .. } => Some((
            tracing::Level::DEBUG,
            format!("{db}: transaction {id:?} done: {}", outcome_name(outcome)),
        )),
        Event::Changes(_) => Some((tracing::Level::DEBUG, format!("{db}: changes"))),
        _ => None,
    }
}

fn outcome_name(o: &hf_ovsdb_net::client::TxnOutcome) -> &'static str {
    match o {
        hf_ovsdb_net::client::TxnOutcome::Committed(_) => "committed",
        hf_ovsdb_net::client::TxnOutcome::Unchanged => "unchanged",
        hf_ovsdb_net::client::TxnOutcome::Failed(_) => "failed",
        _ => "other",
    }
}

fn log_line(level: tracing::Level, line: String) {
    if level == tracing::Level::DEBUG {
        tracing::debug!("{line}");
    } else {
        tracing::info!("{line}");
    }
}

fn command(
    method: &str,
    args: &[String],
    core: &mut Northd,
    nb: &Client<NbSnapshot>,
    sb: &Client<SbView>,
) -> Result<String, String> {
    let _ = args;
    match method {
        "exit" => Ok(String::new()),
        "version" => Ok(format!("{PROGRAM} {NORTHD_VERSION}")),
        "list-commands" => Ok(unixctl::list_commands(COMMANDS)),
        "status" => Ok(core.status()),
        "pause" => {
            sb.with(|s| core.pause(s));
            Ok(String::new())
        }
        "resume" => {
            sb.with(|s| core.resume(s));
            Ok(String::new())
        }
        "is-paused" => Ok(if core.role() == hf_northd::daemon::Role::Paused {
            "true".into()
        } else {
            "false".into()
        }),
        "inc-engine/recompute" => {
            core.recompute();
            Ok(String::new())
        }
        "nb-connection-status" => Ok(connection_status(nb.with(|r| r.is_synced()))),
        "sb-connection-status" => Ok(connection_status(sb.with(|r| r.is_synced()))),
        "memory/show" => {
            let (nbr, sbr, flows) = (
                nb.with(|r| hf_ovsdb_net::client::Model::row_count(r.model())),
                sb.with(|r| r.model().len()),
                sb.with(|r| r.model().logical_flow.len()),
            );
            let s = core.stats();
            Ok(format!(
                "nb-rows:{nbr} sb-rows:{sbr} sb-flows:{flows} compiles:{} flows-built:{} sb-commits:{} sb-unchanged:{} nb-commits:{} full-diffs:{} scoped-diffs:{}",
                s.compiles,
                s.last_flows_built,
                s.sb_commits,
                s.sb_unchanged,
                s.nb_commits,
                s.full_diffs,
                s.scoped_diffs
            ))
        }
        other => shell::vlog_command(other, args)
            .unwrap_or_else(|| Err(format!("\"{other}\" is not implemented"))),
    }
}

fn connection_status(synced: bool) -> String {
    if synced { "connected" } else { "not connected" }.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_ovsdb_net::client::MonitorMethod;

    /// A reconnection queued behind the disconnection (as after a cluster leader dies) is
    /// logged too, and every event reaches the core in order.
    #[test]
    fn every_event_of_a_burst_is_logged() {
        let (tx, mut rx) = mpsc::unbounded_channel::<Event<NbSnapshot>>();
        let first = Event::Connected {
            remote: 0,
            method: MonitorMethod::Since,
        };
        for ev in [
            Event::Disconnected {
                remote: 0,
                reason: "connection closed".into(),
            },
            Event::Connected {
                remote: 1,
                method: MonitorMethod::Since,
            },
        ] {
            tx.send(ev).unwrap();
        }
        let mut lines = Vec::new();
        let mut handled = Vec::new();
        drain(
            "NB",
            first,
            &mut rx,
            |_, l| lines.push(l),
            |ev| handled.push(format!("{ev:?}")),
        );
        assert_eq!(
            lines,
            [
                "NB: connected to remote 0 (monitor_cond_since)",
                "NB: connected to remote 1 (monitor_cond_since)"
            ]
        );
        assert_eq!(
            handled,
            [
                "Connected(0, Since)",
                "Disconnected(0: connection closed)",
                "Connected(1, Since)"
            ]
        );
    }
}
