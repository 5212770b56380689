//! The sandbox's control socket: OVS's unixctl (JSON-RPC over a unix socket, what
//! `ovs-appctl -t PATH` and `ovn-appctl -t PATH` speak), so a person or a script drives the
//! running sandbox: pings, streams of verified traffic, restarts, handoffs, rebuilds, a
//! migration, and a report of what every stream saw.
//!
//! # What it does
//!
//! - [`start`]: listens on the socket (`--unixctl PATH`, default [`default_path`]) with the
//!   transport every holdfast daemon shares (`crate::db::unixctl`); a request is checked
//!   against [`COMMANDS`] there (unknown commands and wrong argument counts get OVS's errors),
//!   then handed to the driver task as a [`Control`], so it runs inside the driver's world
//!   access, between two steps of the world.
//! - [`parse`]: the arguments into a [`Cmd`]; every refusal names the command and what was
//!   wrong. [`Ctl::handle`] runs it: at once for restarts, handoffs, rebuilds, stream starts and
//!   reports; a ping or a stop answers from [`Ctl::poll`] (called after every step of the
//!   driver) once the world has done it, so the driver never waits.
//! - Hosts are named by their logical port (`vm1`, ..., `ext1` the external host).
//!
//! # What it does not do
//!
//! Authenticate: whoever may open the socket drives the sandbox (it is created with the
//! process's umask, like OVS's). Do the CMS's part of a migration: `sandbox/migrate` is the
//! hypervisor's (see [`super::sim::Sim::migrate`]); `requested-chassis` and
//! `activation-strategy` are set with `ovn-nbctl`, as a CMS does.

// An I/O shell: a unix socket and the process id.
#![allow(clippy::disallowed_methods)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hf_sim::world::streams::{DEFAULT_STREAM_PORT, Stream, StreamKind, StreamReport, StreamSpec};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::Printer;
use super::bridge::{Control, Event, SimHost};
use super::sim::{PingId, PingResult, Sim, migration_line};
use crate::db::unixctl;

/// The program name in the default socket path and in `version`.
pub const PROGRAM: &str = "holdfast-sandbox";

/// The sandbox's commands, sorted by name (`list-commands` prints them with the common ones).
pub const COMMANDS: &[unixctl::Command] = &[
    ("exit", "", 0, 0),
    ("sandbox/handoff", "datapath CHASSIS", 2, 2),
    ("sandbox/migrate", "HOST CHASSIS [--pause MS]", 2, 4),
    ("sandbox/ping", "SRC DST", 2, 2),
    ("sandbox/rebuild", "", 0, 0),
    ("sandbox/report", "[--format text|json]", 0, 2),
    (
        "sandbox/restart",
        "controller CHASSIS | datapath CHASSIS | northd",
        1,
        2,
    ),
    ("sandbox/stop", "NAME", 1, 1),
    (
        "sandbox/stream",
        "NAME CLIENT SERVER[:PORT] tcp|udp [--download]",
        4,
        5,
    ),
];

/// Pings per `sandbox/ping`, and the time between them.
const PINGS: u64 = 3;
/// How long (virtual time) `sandbox/stop` waits for both ends of a stream to finish before it
/// answers with the stream as it is.
const STOP_LIMIT: Duration = Duration::from_secs(10);
/// The pause of `sandbox/migrate` without `--pause`: DESIGN's hypervisor downtime.
const DEFAULT_PAUSE: Duration = Duration::from_millis(30);

/// The socket path without `--unixctl`: `holdfast-sandbox.PID.ctl` in OVN's run directory
/// when `$OVN_RUNDIR` or `$OVS_RUNDIR` names one, else in the temporary directory (the
/// sandbox is a playground: it does not put sockets into a real OVN's `/var/run/ovn`).
pub fn default_path() -> PathBuf {
    let dir = std::env::var_os("OVN_RUNDIR")
        .or_else(|| std::env::var_os("OVS_RUNDIR"))
        .map_or_else(std::env::temp_dir, PathBuf::from);
    dir.join(format!("{PROGRAM}.{}.ctl", std::process::id()))
}

/// Listen on `path` (replacing a stale socket): well-formed requests go to the driver as
/// [`Event::Control`]; once the reply to `exit` is written, `exit` is told.
pub fn start(
    path: &Path,
    events: mpsc::UnboundedSender<Event>,
    exit: mpsc::UnboundedSender<()>,
) -> std::io::Result<()> {
    unixctl::listen(
        path,
        move |m| {
            let events = events.clone();
            async move {
                let q = match unixctl::parse_request(m, COMMANDS) {
                    Ok(q) => q,
                    Err(reply) => return reply.map(|r| (r, false)),
                };
                let exit = q.method == "exit";
                let (tx, rx) = oneshot::channel();
                let c = Control {
                    method: q.method,
                    args: q.args,
                    reply: tx,
                };
                let r = if events.send(Event::Control(c)).is_err() {
                    Err("the sandbox is stopping".to_string())
                } else {
                    rx.await
                        .unwrap_or_else(|_| Err("the sandbox is stopping".into()))
                };
                Some((unixctl::reply(&q.id, r), exit))
            }
        },
        move || {
            let _ = exit.send(());
        },
    )
}

/// Which process `sandbox/restart` restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proc {
    /// A chassis's controller.
    Controller(String),
    /// A chassis's datapath, crashed: a new one with the zone map only.
    Datapath(String),
    /// northd.
    Northd,
}

/// A validated command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// Stop the sandbox once the reply is written.
    Exit,
    /// The version.
    Version,
    /// The command list.
    ListCommands,
    /// `vlog/*`: the sandbox has no vlog.
    Vlog,
    /// Ping `dst` (a host name or an address) from host `src`.
    Ping {
        /// The pinging host.
        src: String,
        /// A host name or an IP address.
        dst: String,
    },
    /// Start a stream.
    Stream {
        /// Its name.
        name: String,
        /// Connecting host.
        client: String,
        /// Accepting host.
        server: String,
        /// The server's port (None: [`DEFAULT_STREAM_PORT`]).
        port: Option<u16>,
        /// TCP or UDP.
        kind: StreamKind,
        /// The server sends (TCP only).
        download: bool,
    },
    /// Stop a stream.
    Stop {
        /// Its name.
        name: String,
    },
    /// A crash and restart.
    Restart(Proc),
    /// A datapath state handoff on a chassis.
    Handoff {
        /// The chassis.
        chassis: String,
    },
    /// Rebuild both databases.
    Rebuild,
    /// Migrate a host.
    Migrate {
        /// The host.
        host: String,
        /// The destination chassis.
        chassis: String,
        /// The VM's pause.
        pause: Duration,
    },
    /// The report.
    Report {
        /// As JSON.
        json: bool,
    },
}

/// Parses a request whose argument count [`COMMANDS`] already checked; the error names the
/// command and what is wrong with which argument.
pub fn parse(method: &str, args: &[String]) -> Result<Cmd, String> {
    let arg = |i: usize| args.get(i).map_or("", String::as_str);
    let bad = |what: String| Err(format!("{method}: {what}"));
    Ok(match method {
        "exit" => Cmd::Exit,
        "version" => Cmd::Version,
        "list-commands" => Cmd::ListCommands,
        m if m.starts_with("vlog/") => Cmd::Vlog,
        "sandbox/ping" => Cmd::Ping {
            src: arg(0).to_string(),
            dst: arg(1).to_string(),
        },
        "sandbox/stream" => {
            let name = arg(0);
            if name.is_empty() || name.starts_with('-') || name.chars().any(char::is_whitespace) {
                return bad(format!(
                    "{name:?} is no stream name (a word not starting with '-')"
                ));
            }
            let (server, port) = match arg(2).rsplit_once(':') {
                Some((h, p)) => match p.parse::<u16>() {
                    Ok(p) if p != 0 => (h, Some(p)),
                    _ => {
                        return bad(format!(
                            "{:?}: the port {p:?} is not a number from 1 to 65535",
                            arg(2)
                        ));
                    }
                },
                None => (arg(2), None),
            };
            let kind = match arg(3) {
                "tcp" => StreamKind::Tcp,
                "udp" => StreamKind::Udp,
                k => return bad(format!("{k:?} is no stream kind (tcp or udp)")),
            };
            let download = match args.get(4).map(String::as_str) {
                None => false,
                Some("--download") => true,
                Some(o) => return bad(format!("unknown option {o:?} (only --download)")),
            };
            if download && kind == StreamKind::Udp {
                return bad(
                    "--download is for tcp streams (a udp stream is a request/echo exchange, \
                     both ways)"
                        .into(),
                );
            }
            Cmd::Stream {
                name: name.to_string(),
                client: arg(1).to_string(),
                server: server.to_string(),
                port,
                kind,
                download,
            }
        }
        "sandbox/stop" => Cmd::Stop {
            name: arg(0).to_string(),
        },
        "sandbox/restart" => match (arg(0), args.len()) {
            ("controller", 2) => Cmd::Restart(Proc::Controller(arg(1).to_string())),
            ("datapath", 2) => Cmd::Restart(Proc::Datapath(arg(1).to_string())),
            ("northd", 1) => Cmd::Restart(Proc::Northd),
            ("controller" | "datapath", _) => {
                return bad(format!("restart {} of which chassis?", arg(0)));
            }
            ("northd", _) => return bad("northd takes no chassis".into()),
            (p, _) => {
                return bad(format!(
                    "{p:?} is no process (controller CHASSIS, datapath CHASSIS or northd)"
                ));
            }
        },
        "sandbox/handoff" => match arg(0) {
            "datapath" => Cmd::Handoff {
                chassis: arg(1).to_string(),
            },
            p => {
                return bad(format!(
                    "{p:?}: only a datapath hands its state over (datapath CHASSIS)"
                ));
            }
        },
        "sandbox/rebuild" => Cmd::Rebuild,
        "sandbox/migrate" => {
            let pause = match (args.get(2).map(String::as_str), args.get(3)) {
                (None, _) => DEFAULT_PAUSE,
                (Some("--pause"), Some(ms)) => match ms.parse::<u64>() {
                    Ok(ms) => Duration::from_millis(ms),
                    Err(_) => {
                        return bad(format!("--pause {ms:?}: not a number of milliseconds"));
                    }
                },
                (Some("--pause"), None) => return bad("--pause needs MS".into()),
                (Some(o), _) => return bad(format!("unknown option {o:?} (only --pause MS)")),
            };
            Cmd::Migrate {
                host: arg(0).to_string(),
                chassis: arg(1).to_string(),
                pause,
            }
        }
        "sandbox/report" => match (args.first().map(String::as_str), args.get(1)) {
            (None, _) => Cmd::Report { json: false },
            (Some("--format"), Some(f)) if f == "json" => Cmd::Report { json: true },
            (Some("--format"), Some(f)) if f == "text" => Cmd::Report { json: false },
            (Some("--format"), Some(f)) => {
                return bad(format!("--format {f:?}: text or json"));
            }
            (Some("--format"), None) => return bad("--format needs text or json".into()),
            (Some(o), _) => return bad(format!("unknown option {o:?} (only --format)")),
        },
        other => return Err(format!("\"{other}\" is not implemented")),
    })
}

/// Where a command's answer goes.
type Reply = oneshot::Sender<Result<String, String>>;

/// A command whose answer waits for the world.
#[derive(Debug)]
enum Pending {
    Ping {
        id: PingId,
        what: String,
        reply: Reply,
    },
    Stop {
        name: String,
        since: Duration,
        reply: Reply,
    },
}

/// The control state: the streams by name (in the order they started) and the commands whose
/// answers wait for the world.
#[derive(Debug, Default)]
pub struct Ctl {
    streams: Vec<(String, Stream)>,
    pending: Vec<Pending>,
}

impl Ctl {
    /// A control state with no stream.
    pub fn new() -> Ctl {
        Ctl::default()
    }

    /// Run a command (see the module doc): answered now, or kept for [`Ctl::poll`].
    pub fn handle(&mut self, sim: &mut Sim, p: &Printer, c: Control) {
        let cmd = match parse(&c.method, &c.args) {
            Ok(cmd) => cmd,
            Err(e) => {
                let _ = c.reply.send(Err(e));
                return;
            }
        };
        let r = self.run(sim, cmd, &c.method, c.reply);
        if let Some((reply, r)) = r {
            if let Ok(text) = &r
                && c.method != "sandbox/report"
                && c.method != "list-commands"
                && !text.is_empty()
            {
                p.info(&format!("{}: {}", c.method, text.trim_end()));
            }
            let _ = reply.send(r);
        }
    }

    /// Answer the commands that waited for the world, where it has done what they wait for.
    pub fn poll(&mut self, sim: &Sim, p: &Printer) {
        if self.pending.is_empty() {
            return;
        }
        let now = sim.now();
        let mut still = Vec::new();
        for q in std::mem::take(&mut self.pending) {
            match q {
                Pending::Ping { id, what, reply } => match sim.ping_result(&id) {
                    Some(r) if r.done => {
                        let line = format!("{what}: {}", ping_outcome(&r));
                        p.info(&format!("sandbox/ping: {line}"));
                        let _ = reply.send(if r.answered > 0 { Ok(line) } else { Err(line) });
                    }
                    Some(_) => still.push(Pending::Ping { id, what, reply }),
                    None => {
                        let _ = reply.send(Err(format!("{what}: the ping session is gone")));
                    }
                },
                Pending::Stop { name, since, reply } => {
                    let Some(r) = self.report_of(sim, &name) else {
                        let _ = reply.send(Err(format!("sandbox/stop: no stream {name}")));
                        continue;
                    };
                    if r.is_final() {
                        let line = stream_line(&r);
                        p.info(&format!("sandbox/stop: {line}"));
                        let _ = reply.send(Ok(line));
                    } else if now.saturating_sub(since) >= STOP_LIMIT {
                        let _ = reply.send(Ok(format!(
                            "{} (not final after {STOP_LIMIT:?} of simulated time)",
                            stream_line(&r)
                        )));
                    } else {
                        still.push(Pending::Stop { name, since, reply });
                    }
                }
            }
        }
        self.pending = still;
    }

    fn report_of(&self, sim: &Sim, name: &str) -> Option<StreamReport> {
        self.streams
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| sim.stream_report(s))
    }

    /// Runs `cmd`; `Some` with the reply channel and the answer when it is answered now, `None`
    /// when the reply went to [`Ctl::poll`].
    fn run(
        &mut self,
        sim: &mut Sim,
        cmd: Cmd,
        method: &str,
        reply: Reply,
    ) -> Option<(Reply, Result<String, String>)> {
        let r = match cmd {
            Cmd::Exit => Ok(String::new()),
            Cmd::Version => Ok(format!("{PROGRAM} {}", env!("CARGO_PKG_VERSION"))),
            Cmd::ListCommands => Ok(unixctl::list_commands(COMMANDS)),
            Cmd::Vlog => Err(format!(
                "{method}: the sandbox does not log through vlog (start it with --verbose for \
                 every component's log lines)"
            )),
            Cmd::Ping { src, dst } => match self.start_ping(sim, &src, &dst) {
                Ok((id, what)) => {
                    self.pending.push(Pending::Ping { id, what, reply });
                    return None;
                }
                Err(e) => Err(format!("{method}: {e}")),
            },
            Cmd::Stream {
                name,
                client,
                server,
                port,
                kind,
                download,
            } => self.start_stream(
                sim,
                StreamSpec {
                    port: port.unwrap_or(DEFAULT_STREAM_PORT),
                    download,
                    ..StreamSpec::new(&name, kind, &client, &server)
                },
            ),
            Cmd::Stop { name } => match self.streams.iter_mut().find(|(n, _)| *n == name) {
                None => Err(format!("{method}: {}", self.no_stream(&name))),
                Some((_, s)) => match sim.stop_stream(s) {
                    Ok(()) => {
                        self.pending.push(Pending::Stop {
                            name,
                            since: sim.now(),
                            reply,
                        });
                        return None;
                    }
                    Err(e) => Err(format!("{method}: {e:#}")),
                },
            },
            Cmd::Restart(proc) => match proc {
                Proc::Controller(ch) => check_chassis(sim, method, &ch).and_then(|()| {
                    sim.restart_controller(&ch)
                        .map(|()| {
                            format!("controller {ch} restarted (its datapath kept forwarding)")
                        })
                        .map_err(|e| format!("{method}: {e:#}"))
                }),
                Proc::Datapath(ch) => check_chassis(sim, method, &ch).and_then(|()| {
                    sim.crash_datapath(&ch)
                        .map(|()| {
                            format!(
                                "datapath {ch} crashed and restarted: a new datapath with the \
                                 zone map only (no conntrack entries; the program again from \
                                 its controller)"
                            )
                        })
                        .map_err(|e| format!("{method}: {e:#}"))
                }),
                Proc::Northd => sim
                    .restart_northd()
                    .map(|()| "northd restarted".to_string())
                    .map_err(|e| format!("{method}: {e:#}")),
            },
            Cmd::Handoff { chassis } => check_chassis(sim, method, &chassis).and_then(|()| {
                sim.handoff_datapath(&chassis)
                    .map(|()| {
                        format!(
                            "datapath {chassis} handed its state (conntrack, program, zone map, \
                             ports) to a new datapath"
                        )
                    })
                    .map_err(|e| format!("{method}: {e:#}"))
            }),
            Cmd::Rebuild => {
                let before = sim.nb_switch_uuids();
                sim.rebuild_databases()
                    .map_err(|e| format!("{method}: {e:#}"))
                    .map(|()| {
                        let after = sim.nb_switch_uuids();
                        let fresh = after.iter().filter(|u| !before.contains(u)).count();
                        format!(
                            "rebuilt NB and SB: {} switches, {fresh} with a new UUID, names kept",
                            after.len()
                        )
                    })
            }
            Cmd::Migrate {
                host,
                chassis,
                pause,
            } => check_host(sim, method, &host)
                .and_then(|()| check_chassis(sim, method, &chassis))
                .and_then(|()| sim.migrate(&host, &chassis, pause)),
            Cmd::Report { json } => Ok(if json {
                self.report_json(sim)
            } else {
                self.report_text(sim)
            }),
        };
        Some((reply, r))
    }

    fn no_stream(&self, name: &str) -> String {
        if self.streams.is_empty() {
            format!("no stream {name:?} (none started)")
        } else {
            let names: Vec<&str> = self.streams.iter().map(|(n, _)| n.as_str()).collect();
            format!("no stream {name:?} (streams: {})", names.join(", "))
        }
    }

    fn start_ping(
        &mut self,
        sim: &mut Sim,
        src: &str,
        dst: &str,
    ) -> Result<(PingId, String), String> {
        let from = sim
            .host_info(src)
            .ok_or_else(|| format!("no host named {src:?} ({})", host_list(sim)))?;
        let (ip, to) = match dst.parse::<std::net::IpAddr>() {
            Ok(ip) => (ip.to_string(), dst.to_string()),
            Err(_) => {
                let h = sim.host_info(dst).ok_or_else(|| {
                    format!(
                        "{dst:?} is neither an IP address nor a host ({})",
                        host_list(sim)
                    )
                })?;
                let ip =
                    h.ip.clone()
                        .ok_or_else(|| format!("host {dst} has no IPv4 address (yet)"))?;
                (ip.clone(), format!("{dst} ({ip}, {})", h.place))
            }
        };
        let id = sim
            .start_ping(src, &ip, PINGS)
            .map_err(|e| format!("{e:#}"))?;
        let what = format!(
            "ping {src} ({}, {}) -> {to}",
            from.ip.as_deref().unwrap_or("no address"),
            from.place
        );
        Ok((id, what))
    }

    fn start_stream(&mut self, sim: &mut Sim, spec: StreamSpec) -> Result<String, String> {
        let method = "sandbox/stream";
        let (name, kind, download) = (spec.name.clone(), spec.kind, spec.download);
        if self.streams.iter().any(|(n, _)| *n == name) {
            return Err(format!(
                "{method}: a stream named {name:?} exists already (sandbox/report lists them)"
            ));
        }
        check_host(sim, method, &spec.client)?;
        check_host(sim, method, &spec.server)?;
        let (client, server) = (spec.client.clone(), spec.server.clone());
        let s = sim
            .start_stream(spec)
            .map_err(|e| format!("{method}: {e:#}"))?;
        let line = format!(
            "stream {name} started: {} {client} -> {server}:{} ({})",
            kind.name(),
            s.spec().port,
            match kind {
                StreamKind::Udp => format!(
                    "a {}-byte request echoed every {:?}",
                    hf_sim::world::streams::UDP_DATAGRAM_LEN,
                    s.spec().udp_interval
                ),
                _ => format!(
                    "{}, {} Mbit/s",
                    if download {
                        "download: the server sends"
                    } else {
                        "upload: the client sends"
                    },
                    s.spec().tcp_rate_bps / 1_000_000
                ),
            }
        );
        self.streams.push((name, s));
        Ok(line)
    }

    fn report_text(&self, sim: &Sim) -> String {
        let mut out = String::new();
        if self.streams.is_empty() {
            out.push_str("streams: none\n");
        } else {
            out.push_str("streams:\n");
            for (_, s) in &self.streams {
                let _ = writeln!(out, "  {}", stream_line(&sim.stream_report(s)));
            }
        }
        let migrations = sim.migration_records();
        if migrations.is_empty() {
            out.push_str("migrations: none\n");
        } else {
            out.push_str("migrations:\n");
            for m in &migrations {
                let _ = writeln!(out, "  {}", migration_line(m));
            }
        }
        out
    }

    fn report_json(&self, sim: &Sim) -> String {
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|(_, s)| stream_json(&sim.stream_report(s)))
            .collect();
        let v = json!({"streams": streams, "migrations": sim.migrations()});
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}

/// One stream of `sandbox/report --format json`.
fn stream_json(r: &StreamReport) -> Value {
    json!({
        "name": r.name,
        "kind": r.kind.name(),
        "client": r.client,
        "server": r.server,
        "port": r.port,
        "direction": r.direction,
        "state": r.state,
        "bytes": r.bytes,
        "verified": r.verified,
        "max_stall_ms": r.stall_max_us as f64 / 1000.0,
        "retransmitted": r.retransmitted,
        "fast_retransmits": r.fast_retransmits,
        "timeouts": r.timeouts,
        "duplicates": r.duplicates,
        "resets": r.resets,
        "lost": r.lost,
        "peer_saw": r.peer_saw,
    })
}

/// One stream for people.
fn stream_line(r: &StreamReport) -> String {
    let mut s = format!(
        "{} {} {} -> {}:{} {}, {}: ",
        r.name,
        r.kind.name(),
        r.client,
        r.server,
        r.port,
        r.direction,
        r.state
    );
    match r.kind {
        StreamKind::Udp => {
            let _ = write!(
                s,
                "{} bytes echoed ({} verified), {} lost, {} duplicates, longest stall {}",
                r.bytes,
                r.verified,
                r.lost.unwrap_or(0),
                r.duplicates,
                ms(r.stall_max_us)
            );
        }
        _ => {
            let _ = write!(
                s,
                "{} bytes ({} verified), longest stall {}, {} retransmitted ({} fast, {} timeouts), {} duplicates, {} resets",
                r.bytes,
                r.verified,
                ms(r.stall_max_us),
                r.retransmitted,
                r.fast_retransmits,
                r.timeouts,
                r.duplicates,
                r.resets
            );
        }
    }
    if let Some(p) = &r.peer_saw {
        let _ = write!(s, "; {} saw {p}", r.server);
    }
    s
}

fn ms(us: u64) -> String {
    format!("{:.3} ms", us as f64 / 1000.0)
}

fn ping_outcome(r: &PingResult) -> String {
    if r.answered == 0 {
        return format!("0/{} answered", r.count);
    }
    let min = r.rtts_us.iter().min().copied().unwrap_or(0);
    let max = r.rtts_us.iter().max().copied().unwrap_or(0);
    let avg = r.rtts_us.iter().sum::<u64>() / (r.rtts_us.len().max(1) as u64);
    format!(
        "{}/{} answered, rtt min/avg/max {:.3}/{:.3}/{:.3} ms",
        r.answered,
        r.count,
        min as f64 / 1000.0,
        avg as f64 / 1000.0,
        max as f64 / 1000.0
    )
}

fn host_list(sim: &Sim) -> String {
    format!("hosts: {}", sim.host_names().join(", "))
}

fn check_host(sim: &Sim, method: &str, host: &str) -> Result<(), String> {
    if sim.host_info(host).is_some() {
        Ok(())
    } else {
        Err(format!(
            "{method}: no host named {host:?} ({})",
            host_list(sim)
        ))
    }
}

fn check_chassis(sim: &Sim, method: &str, chassis: &str) -> Result<(), String> {
    let names = sim.chassis_names();
    if names.iter().any(|c| c == chassis) {
        Ok(())
    } else {
        Err(format!(
            "{method}: no chassis named {chassis:?} (chassis: {})",
            names.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(method: &str, args: &[&str]) -> Result<Cmd, String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        parse(method, &args)
    }

    #[test]
    fn streams_parse_with_port_kind_and_direction() {
        assert_eq!(
            p(
                "sandbox/stream",
                &["s1", "vm1", "ext1:8080", "tcp", "--download"]
            ),
            Ok(Cmd::Stream {
                name: "s1".into(),
                client: "vm1".into(),
                server: "ext1".into(),
                port: Some(8080),
                kind: StreamKind::Tcp,
                download: true,
            })
        );
        assert_eq!(
            p("sandbox/stream", &["u", "vm1", "vm4", "udp"]),
            Ok(Cmd::Stream {
                name: "u".into(),
                client: "vm1".into(),
                server: "vm4".into(),
                port: None,
                kind: StreamKind::Udp,
                download: false,
            })
        );
    }

    #[test]
    fn bad_arguments_name_the_command_and_what_is_wrong() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "sandbox/stream",
                &["s", "a", "b", "sctp"],
                &["\"sctp\"", "tcp or udp"],
            ),
            (
                "sandbox/stream",
                &["s", "a", "b:x", "tcp"],
                &["\"x\"", "port"],
            ),
            ("sandbox/stream", &["s", "a", "b:0", "tcp"], &["port"]),
            (
                "sandbox/stream",
                &["s", "a", "b", "tcp", "--up"],
                &["\"--up\""],
            ),
            (
                "sandbox/stream",
                &["s", "a", "b", "udp", "--download"],
                &["--download", "tcp"],
            ),
            ("sandbox/stream", &["-x", "a", "b", "tcp"], &["stream name"]),
            (
                "sandbox/restart",
                &["vswitchd", "hv1"],
                &["\"vswitchd\"", "northd"],
            ),
            ("sandbox/restart", &["controller"], &["which chassis"]),
            (
                "sandbox/restart",
                &["northd", "hv1"],
                &["northd takes no chassis"],
            ),
            (
                "sandbox/handoff",
                &["controller", "hv1"],
                &["\"controller\"", "datapath"],
            ),
            (
                "sandbox/migrate",
                &["vm1", "hv2", "--pause", "soon"],
                &["\"soon\"", "milliseconds"],
            ),
            (
                "sandbox/migrate",
                &["vm1", "hv2", "--fast"],
                &["\"--fast\""],
            ),
            ("sandbox/report", &["--format", "xml"], &["\"xml\"", "json"]),
            ("sandbox/report", &["json"], &["\"json\"", "--format"]),
        ];
        for (m, args, want) in cases {
            let e = p(m, args).expect_err(m);
            assert!(e.starts_with(&format!("{m}: ")), "{m} {args:?}: {e}");
            for w in *want {
                assert!(e.contains(w), "{m} {args:?}: {e:?} lacks {w:?}");
            }
        }
        assert_eq!(
            p("sandbox/migrate", &["vm1", "hv2"]),
            Ok(Cmd::Migrate {
                host: "vm1".into(),
                chassis: "hv2".into(),
                pause: DEFAULT_PAUSE
            })
        );
        assert_eq!(
            p("sandbox/report", &["--format", "json"]),
            Ok(Cmd::Report { json: true })
        );
        assert_eq!(
            p("sandbox/restart", &["datapath", "gw1"]),
            Ok(Cmd::Restart(Proc::Datapath("gw1".into())))
        );
    }

    /// Every command of the table parses (with arguments it accepts), and the table is sorted
    /// as `list-commands` prints it.
    #[test]
    fn the_table_is_sorted_and_every_command_is_implemented() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.0).collect();
        let sorted = {
            let mut s = names.clone();
            s.sort();
            s
        };
        assert_eq!(names, sorted);
        names.retain(|n| n.starts_with("sandbox/"));
        let ok: &[(&str, &[&str])] = &[
            ("sandbox/handoff", &["datapath", "hv1"]),
            ("sandbox/migrate", &["vm1", "hv2", "--pause", "30"]),
            ("sandbox/ping", &["vm1", "vm4"]),
            ("sandbox/rebuild", &[]),
            ("sandbox/report", &[]),
            ("sandbox/restart", &["northd"]),
            ("sandbox/stop", &["s"]),
            ("sandbox/stream", &["s", "vm1", "vm4", "tcp"]),
        ];
        assert_eq!(names, ok.iter().map(|c| c.0).collect::<Vec<_>>());
        for (m, args) in ok {
            assert!(p(m, args).is_ok(), "{m}");
        }
    }
}
