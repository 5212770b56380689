//! `holdfast trace`: ovn-trace's command line on holdfast's pipeline. The I/O shell around
//! `hf-trace`: reads SB (and NB for `--ovnnb-db`) with the client replica, fetching only the
//! rows the packet's path reaches (conditional monitoring widened over patch ports), translates
//! them with `hf_controller::translate`, runs the trace and prints it; in the long-running modes
//! (`--detach`/`--unixctl`, `--stdin`) it keeps the rows loaded, follows their changes and
//! answers many traces.
//!
//! What it does not do: talk OpenFlow (ovn-trace's `--ovs`), or write anything to the databases.

// The shell is where sockets, files, the clock and processes live.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use hf_controller::translate::{Extra, Incremental, TranslateOptions};
use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb_net::client::{Client, Config, Event, TableSelect, parse_remotes};
use hf_ovsdb_net::framing::Framer;
use hf_pipeline::WhatIf;
use hf_trace::engine::{Outcome, Session};
use hf_trace::fetch::{Plan, SCOPED_TABLES, WHOLE_TABLES, datapath_name, find_datapath};
use hf_trace::nb::Origins;
use hf_trace::render::{self, Styles};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::db::unixctl;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// ovn-trace's text.
    Text,
    /// One JSON object: `{"verdict": {...}, "stages": [...]}` (see the README).
    Json,
}

/// `holdfast trace [OPTIONS] [DATAPATH] MICROFLOW`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The SB database (OVSDB remotes, comma-separated: unix:PATH, tcp:IP:PORT).
    #[arg(
        long,
        env = "OVN_SB_DB",
        default_value = "unix:/var/run/ovn/ovnsb_db.sock"
    )]
    pub db: String,
    /// The NB database: name the NB row behind each flow (from its stage-hint), as ovn-detrace.
    #[arg(long = "ovnnb-db")]
    pub ovnnb_db: Option<String>,
    /// Conntrack state for successive ct_next, ct_dnat, ct_snat, ct_lb (comma list of new, est,
    /// rel, rpl, inv, trk, snat, dnat; trk is implied). Repeat for later lookups.
    #[arg(long = "ct", value_name = "FLAGS")]
    pub ct: Vec<String>,
    /// The backend ct_lb and ct_lb_mark choose (IP or IP:PORT; [IPv6]:PORT).
    #[arg(long = "lb-dst", value_name = "IP[:PORT]")]
    pub lb_dst: Option<String>,
    /// Name datapaths by their names (the default).
    #[arg(long = "friendly-names", overrides_with = "no_friendly_names")]
    pub friendly_names: bool,
    /// Name datapaths by their SB UUIDs.
    #[arg(long = "no-friendly-names")]
    pub no_friendly_names: bool,
    /// Print every stage with its flow and what its actions did (the default).
    #[arg(long)]
    pub detailed: bool,
    /// Print the actions of each stage, nested by pipeline.
    #[arg(long)]
    pub summary: bool,
    /// Print only what reaches a port, the NAT applied and drops.
    #[arg(long)]
    pub minimal: bool,
    /// --detailed, --summary and --minimal.
    #[arg(long)]
    pub all: bool,
    /// Decide is_chassis_resident() for this chassis (without it every port is resident).
    #[arg(long)]
    pub chassis: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Seconds to wait for the database before failing.
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = crate::check::parse_secs)]
    pub timeout: f64,
    /// Print what was fetched (rounds, rows per table, datapaths) on stderr.
    #[arg(long = "fetch-stats")]
    pub fetch_stats: bool,
    /// Long-running: answer `trace` on a unixctl socket (`ovs-appctl -t SOCKET trace ...`).
    #[arg(long)]
    pub detach: bool,
    /// The unixctl socket (default: RUNDIR/holdfast-trace.PID.ctl).
    #[arg(long, value_name = "SOCKET")]
    pub unixctl: Option<PathBuf>,
    /// Write the daemon's pid here (default with no value: RUNDIR/holdfast-trace.pid).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "")]
    pub pidfile: Option<PathBuf>,
    /// The daemon's log (default with no value: RUNDIR/holdfast-trace.log).
    #[arg(long = "log-file", value_name = "FILE", num_args = 0..=1, default_missing_value = "")]
    pub log_file: Option<PathBuf>,
    /// Long-running: one JSON request per line on stdin, one JSON answer per line on stdout.
    #[arg(long)]
    pub stdin: bool,
    /// Internal: this process is the detached daemon.
    #[arg(long = "detached-child", hide = true)]
    pub detached_child: bool,
    /// [DATAPATH] MICROFLOW (the datapath defaults to the microflow's inport's).
    #[arg(value_name = "ARGS", num_args = 0..=2)]
    pub args: Vec<String>,
}

/// Runs the command; the exit code.
pub fn run(a: TraceArgs) -> anyhow::Result<std::process::ExitCode> {
    if a.detach && !a.detached_child {
        return detach(&a);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(run_async(a))
}

fn rundir() -> PathBuf {
    std::env::var_os("OVN_RUNDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/run/ovn"))
}

fn default_path(p: &Option<PathBuf>, name: &str) -> Option<PathBuf> {
    p.as_ref().map(|p| {
        if p.as_os_str().is_empty() {
            rundir().join(name)
        } else {
            p.clone()
        }
    })
}

fn ctl_path(a: &TraceArgs) -> PathBuf {
    a.unixctl
        .clone()
        .unwrap_or_else(|| rundir().join(format!("holdfast-trace.{}.ctl", std::process::id())))
}

/// `--detach`: start this command again as a daemon (its own session, stderr to the log file)
/// and return once it answers on its socket or has failed.
fn detach(a: &TraceArgs) -> anyhow::Result<std::process::ExitCode> {
    let exe = std::env::current_exe().context("cannot find the holdfast binary")?;
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.push("--detached-child".into());
    let log = default_path(&a.log_file, "holdfast-trace.log");
    let stderr = match &log {
        Some(p) => std::process::Stdio::from(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open the log file {}", p.display()))?,
        ),
        None => std::process::Stdio::null(),
    };
    let mut child = std::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("cannot start the daemon")?;
    let ready = a
        .unixctl
        .clone()
        .unwrap_or_else(|| rundir().join(format!("holdfast-trace.{}.ctl", child.id())));
    let deadline = Instant::now() + Duration::from_secs_f64(a.timeout.max(0.1) + 5.0);
    loop {
        if let Some(st) = child.try_wait()? {
            bail!(
                "the daemon exited ({st}) before it was ready{}",
                log.map(|l| format!("; see {}", l.display()))
                    .unwrap_or_default()
            );
        }
        if std::os::unix::net::UnixStream::connect(&ready).is_ok() {
            return Ok(std::process::ExitCode::SUCCESS);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the daemon did not open {} in time", ready.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// ovn-trace's `--ct` flags.
fn parse_ct(s: &str) -> anyhow::Result<u8> {
    let mut v = 0x20u8;
    for f in s.split([',', '|']).map(str::trim).filter(|f| !f.is_empty()) {
        v |= match f.strip_prefix('+').unwrap_or(f) {
            "new" => 0x01,
            "est" => 0x02,
            "rel" => 0x04,
            "rpl" => 0x08,
            "inv" => 0x10,
            "trk" => 0x20,
            "snat" => 0x40,
            "dnat" => 0x80,
            other => bail!(
                "--ct={s}: unknown flag \"{other}\" (new, est, rel, rpl, inv, trk, snat, dnat)"
            ),
        };
    }
    Ok(v)
}

fn parse_lb_dst(s: &str) -> anyhow::Result<(IpAddr, Option<u16>)> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, None));
    }
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    bail!("--lb-dst={s}: bad address (IP, IP:PORT or [IPv6]:PORT)")
}

/// What one trace request asks.
#[derive(Debug, Clone, Default)]
struct Request {
    datapath: Option<String>,
    microflow: String,
    what_if: WhatIf,
    styles: Styles,
    json: bool,
}

fn request_from_args(a: &TraceArgs) -> anyhow::Result<Request> {
    let (datapath, microflow) = match a.args.as_slice() {
        [m] => (None, m.clone()),
        [d, m] => (Some(d.clone()), m.clone()),
        _ => bail!("one or two non-option arguments are required: [DATAPATH] MICROFLOW"),
    };
    let what_if = WhatIf {
        ct_states: a.ct.iter().map(|c| parse_ct(c)).collect::<Result<_, _>>()?,
        lb_dst: a.lb_dst.as_deref().map(parse_lb_dst).transpose()?,
    };
    Ok(Request {
        datapath,
        microflow,
        what_if,
        styles: Styles {
            detailed: a.detailed || a.all,
            summary: a.summary || a.all,
            minimal: a.minimal || a.all,
        },
        json: a.format == Format::Json,
    })
}

/// A trace request's failure: its message.
#[derive(Debug)]
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

/// The SB rows loaded so far, their translation, and (optionally) NB.
struct Loaded {
    client: Client<SbSnapshot>,
    events: UnboundedReceiver<Event<SbSnapshot>>,
    /// Logical_Flow alone, on a second session started once its first condition is known:
    /// ovsdb-server scans the whole table for each condition it evaluates, so the first
    /// session never asks for it (not even with a `false` condition).
    flows: Option<(Client<SbSnapshot>, UnboundedReceiver<Event<SbSnapshot>>)>,
    plan: Plan,
    /// What was translated last ([`Plan::scoped`] of the plan then), changed by
    /// [`Plan::scoped_delta`] each round.
    scoped: SbSnapshot,
    /// Translates `scoped` again only where a round's delta touched it.
    translator: Incremental,
    sent: BTreeMap<&'static str, Vec<Value>>,
    session: Option<Session>,
    diagnostics: Vec<String>,
    shown: std::collections::BTreeSet<String>,
    dirty: bool,
    chassis: Option<String>,
    origins: Option<Origins>,
    timeout: Duration,
    db: String,
    rounds: usize,
    /// Milliseconds: connecting and the first sync, each widening round, translating,
    /// compiling.
    times: (u64, Vec<u64>, u64, u64),
    friendly: bool,
}

async fn connect_sb(db: &str, timeout: Duration) -> anyhow::Result<Loaded> {
    let remotes = parse_remotes(db);
    if remotes.is_empty() {
        bail!("--db: no database remote given");
    }
    let mut tables: Vec<TableSelect> = WHOLE_TABLES.iter().map(|t| TableSelect::all(t)).collect();
    // The scoped tables start with their condition for an empty plan (the topology's
    // Port_Binding rows, nothing else), so the first round only adds to it.
    let empty = SbSnapshot::new();
    let start: BTreeMap<&str, Vec<Value>> =
        Plan::default().conditions(&empty).into_iter().collect();
    tables.extend(
        SCOPED_TABLES
            .iter()
            .filter(|t| **t != "Logical_Flow")
            .map(|t| TableSelect {
                name: t.to_string(),
                columns: None,
                condition: Some(start.get(t).cloned().unwrap_or_else(|| vec![json!(false)])),
            }),
    );
    let (client, events) = Client::<SbSnapshot>::spawn(remotes, sb_config(tables));
    let sent = start
        .into_iter()
        .filter(|(t, _)| *t != "Logical_Flow")
        .collect();
    let mut l = Loaded {
        client,
        events,
        flows: None,
        plan: Plan::default(),
        scoped: SbSnapshot::new(),
        translator: Incremental::new(),
        sent,
        session: None,
        diagnostics: Vec::new(),
        shown: Default::default(),
        dirty: true,
        chassis: None,
        origins: None,
        timeout,
        db: db.to_string(),
        rounds: 0,
        times: (0, Vec::new(), 0, 0),
        friendly: true,
    };
    let t0 = Instant::now();
    l.wait_synced().await?;
    l.times.0 = t0.elapsed().as_millis() as u64;
    Ok(l)
}

fn sb_config(tables: Vec<TableSelect>) -> Config {
    Config {
        tables,
        leader_only: false,
        backoff_min_ms: 50,
        backoff_max_ms: 500,
        ..Config::default()
    }
}

/// Drains one session's events: changes set `dirty`; the last disconnect reason is returned.
fn drain_events(
    events: &mut UnboundedReceiver<Event<SbSnapshot>>,
    dirty: &mut bool,
) -> Option<String> {
    let mut why = None;
    while let Ok(e) = events.try_recv() {
        match e {
            // northd and the controllers bump SB_Global and Chassis_Private on every change
            // anywhere; the translation reads neither, so those alone keep the program.
            Event::Changes(d) => {
                let ignored = d.sb_global.len() + d.chassis_private.len();
                if <SbSnapshot as hf_ovsdb_net::client::Model>::delta_len(&d) > ignored {
                    *dirty = true;
                }
            }
            Event::Resynced { .. } => *dirty = true,
            Event::Disconnected { reason, .. } => why = Some(reason),
            Event::Warning(w) => eprintln!("warning: {w}"),
            _ => {}
        }
    }
    why
}

/// Waits until a session is synced with no condition change in flight.
async fn wait_session(
    client: &Client<SbSnapshot>,
    events: &mut UnboundedReceiver<Event<SbSnapshot>>,
    dirty: &mut bool,
    timeout: Duration,
    db: &str,
) -> anyhow::Result<()> {
    let ok = client
        .wait_until(timeout, |r| r.is_synced() && !r.conditions_pending())
        .await;
    let why = drain_events(events, dirty);
    if !ok {
        bail!(
            "{db}: database connection failed ({})",
            why.unwrap_or_else(|| "no answer".into())
        );
    }
    Ok(())
}

async fn load_nb(db: &str, timeout: Duration) -> anyhow::Result<Origins> {
    let cfg = Config {
        tables: [
            "ACL",
            "Logical_Switch_Port",
            "Logical_Router_Port",
            "NAT",
            "Load_Balancer",
            "Logical_Router_Policy",
            "Logical_Router_Static_Route",
            "Logical_Switch",
            "Logical_Router",
        ]
        .iter()
        .map(|t| TableSelect::all(t))
        .collect(),
        leader_only: false,
        ..Config::default()
    };
    let (client, mut events) = Client::<NbSnapshot>::spawn(parse_remotes(db), cfg);
    let ok = client.wait_until(timeout, |r| r.is_synced()).await;
    let mut why = String::new();
    while let Ok(e) = events.try_recv() {
        if let Event::Disconnected { reason, .. } = e {
            why = reason;
        }
    }
    if !ok {
        bail!("--ovnnb-db {db}: database connection failed ({why})");
    }
    Ok(client.with(|r| Origins::new(r.model())))
}

impl Loaded {
    /// Drains replica events: changes make the translation stale; the last disconnect reason
    /// is kept for error messages.
    fn drain(&mut self) -> Option<String> {
        let why = drain_events(&mut self.events, &mut self.dirty);
        if let Some((_, ev)) = self.flows.as_mut() {
            drain_events(ev, &mut self.dirty).or(why)
        } else {
            why
        }
    }

    async fn wait_synced(&mut self) -> anyhow::Result<()> {
        wait_session(
            &self.client,
            &mut self.events,
            &mut self.dirty,
            self.timeout,
            &self.db,
        )
        .await
    }

    /// Sends the Logical_Flow condition (starting the flows session the first time); false
    /// when it is the one sent already. The caller waits.
    fn send_flows(&mut self, cond: Vec<Value>) -> bool {
        if self.sent.get("Logical_Flow") == Some(&cond) {
            return false;
        }
        self.sent.insert("Logical_Flow", cond.clone());
        match self.flows.as_mut() {
            Some((c, _)) => c.with(|r| r.set_condition("Logical_Flow", Some(cond))),
            None => {
                let sel = TableSelect {
                    name: "Logical_Flow".into(),
                    columns: None,
                    condition: Some(cond),
                };
                self.flows = Some(Client::<SbSnapshot>::spawn(
                    parse_remotes(&self.db),
                    sb_config(vec![sel]),
                ));
            }
        }
        true
    }

    /// Widens the fetched rows until `dp` (or the inport's datapath) and all it reaches are in.
    async fn ensure(&mut self, datapath: Option<&str>, inport: Option<&str>) -> anyhow::Result<()> {
        let mut grew = false;
        if let Some(d) = datapath {
            grew |= self.plan.names.insert(d.to_string());
        } else if let Some(p) = inport {
            grew |= self.plan.start_ports.insert(p.to_string());
        }
        if !grew {
            return Ok(());
        }
        self.close().await
    }

    /// Widens the plan from what is local, sends its conditions (both sessions at once, one
    /// round) and waits for the rows, until it stops growing. With the topology local, a
    /// datapath the walk enters costs one round.
    async fn close(&mut self) -> anyhow::Result<()> {
        loop {
            let plan = &mut self.plan;
            self.client.with(|r| while plan.widen(r.model()) {});
            let conds = self.client.with(|r| self.plan.conditions(r.model()));
            let mut changed = false;
            let mut flows_changed = false;
            for (t, c) in conds {
                if t == "Logical_Flow" {
                    flows_changed = self.send_flows(c);
                } else if self.sent.get(t) != Some(&c) {
                    changed = true;
                    self.client.with(|r| r.set_condition(t, Some(c.clone())));
                    self.sent.insert(t, c);
                }
            }
            if changed || flows_changed {
                self.rounds += 1;
                let t0 = Instant::now();
                if changed {
                    self.wait_synced().await?;
                }
                if flows_changed && let Some((c, ev)) = self.flows.as_mut() {
                    wait_session(c, ev, &mut self.dirty, self.timeout, &self.db).await?;
                }
                self.times.1.push(t0.elapsed().as_millis() as u64);
                self.dirty = true;
                continue;
            }
            // Closed. The flows' `is_chassis_resident()` may name ports of other datapaths (a
            // switch's flows name the router's `cr-` port): fetch those bindings too, or the
            // port would be unknown and never resident.
            let plan = &mut self.plan;
            let grew = self.flows.as_ref().is_some_and(|(c, _)| {
                c.with(|fr| {
                    self.client
                        .with(|r| plan.add_resident_ports(fr.model(), r.model()))
                })
            });
            if !grew {
                return Ok(());
            }
        }
    }

    /// The compiled program for what is loaded (translated again when rows changed).
    fn session(&mut self) -> Result<&mut Session, Failure> {
        self.drain();
        if self.dirty || self.session.is_none() {
            let opts = TranslateOptions {
                chassis: self.chassis.clone(),
            };
            let t0 = Instant::now();
            let plan = &self.plan;
            let have = &self.scoped;
            let flows = self.flows.as_ref().map(|(c, _)| c);
            // What this round fetched (and what changed in SB since), as a change to the
            // snapshot translated last: only that is translated and compiled again.
            let delta = self.client.with(|r| match flows {
                Some(f) => f.with(|fr| plan.scoped_delta(have, r.model(), Some(fr.model()))),
                None => plan.scoped_delta(have, r.model(), None),
            });
            self.translator.changed(&delta);
            self.scoped.apply_owned(delta);
            let t = self
                .translator
                .translate(&self.scoped, &opts, &Extra::default());
            self.times.2 += t0.elapsed().as_millis() as u64;
            let t0 = Instant::now();
            self.diagnostics = t
                .diagnostics
                .iter()
                .map(|d| format!("{} {}: {}", d.table, d.uuid, d.reason))
                .collect();
            let names = t.chassis.iter().map(|c| (c.id, c.name.clone())).collect();
            // The datapaths the translation may have changed (all of them when it cannot say).
            let changed: Vec<&str> = match &t.touched {
                Some(tc) => tc.datapaths.iter().map(String::as_str).collect(),
                None => t.spec.datapaths.iter().map(|d| d.name.as_str()).collect(),
            };
            let mut s = match self.session.take() {
                Some(mut s) => match s.update(&t.spec, &changed) {
                    Ok(()) => s,
                    Err(_) => {
                        Session::new(&t.spec).map_err(|e| Failure(format!("program: {e}")))?
                    }
                },
                None => Session::new(&t.spec).map_err(|e| Failure(format!("program: {e}")))?,
            };
            s.set_chassis_names(names);
            self.diagnostics
                .extend(s.flow_errors.iter().map(|e| e.to_string()));
            // Each distinct diagnostic once per process (the log, in the long-running modes).
            for d in &self.diagnostics {
                if self.shown.insert(d.clone()) {
                    eprintln!("warning: {d}");
                }
            }
            self.session = Some(s);
            self.translator.recycle(t);
            self.dirty = false;
            self.times.3 += t0.elapsed().as_millis() as u64;
        }
        self.session
            .as_mut()
            .ok_or_else(|| Failure("no program".into()))
    }

    fn fetch_stats(&self) -> String {
        self.client.with(|r| {
            let m = r.model();
            let mut names: Vec<String> = self
                .plan
                .datapaths
                .iter()
                .filter(|u| m.datapath_binding().contains_key(u))
                .map(|u| datapath_name(m, u))
                .collect();
            names.sort();
            let mut nbrs: Vec<String> = self
                .plan
                .neighbours
                .iter()
                .filter(|u| m.datapath_binding().contains_key(u))
                .map(|u| datapath_name(m, u))
                .collect();
            nbrs.sort();
            format!(
                "fetch: rounds={} rows={} Datapath_Binding={} Logical_Flow={} Port_Binding={} \
                 Logical_DP_Group={} datapaths={} neighbours={} connect_ms={} rounds_ms={:?} \
                 translate_ms={} compile_ms={}",
                self.rounds,
                r.stats().rows_received
                    + self
                        .flows
                        .as_ref()
                        .map_or(0, |(c, _)| c.with(|fr| fr.stats().rows_received)),
                m.datapath_binding().len(),
                self.flows
                    .as_ref()
                    .map_or(0, |(c, _)| c.with(|fr| fr.model().logical_flow().len())),
                m.port_binding().len(),
                m.logical_dp_group().len(),
                names.join(","),
                nbrs.join(","),
                self.times.0,
                self.times.1,
                self.times.2,
                self.times.3,
            )
        })
    }

    /// Runs one request; the answer text (text or JSON) and the diagnostics to show.
    async fn answer(&mut self, q: &Request) -> Result<(Outcome, String), Failure> {
        let mf = hf_trace::microflow::parse(&q.microflow, "microflow")?;
        if q.datapath.is_none() && mf.inport.is_none() {
            return Err(Failure("microflow does not specify ingress port".into()));
        }
        self.ensure(q.datapath.as_deref(), mf.inport.as_deref())
            .await
            .map_err(|e| Failure(format!("{e:#}")))?;
        // The datapath by its friendly name, as the translation names it.
        let dp_name = match &q.datapath {
            Some(d) => Some(
                self.client
                    .with(|r| find_datapath(r.model(), d).map(|u| datapath_name(r.model(), &u)))?,
            ),
            None => None,
        };
        let friendly = self.friendly;
        let uuids: BTreeMap<String, String> = if friendly {
            BTreeMap::new()
        } else {
            self.client.with(|r| {
                r.model()
                    .datapath_binding()
                    .keys()
                    .map(|u| (datapath_name(r.model(), u), u.to_string()))
                    .collect()
            })
        };
        let origins = self.origins.clone();
        // Trace; when the walk enters a neighbour datapath (known only by its peer port),
        // fetch that datapath and trace again.
        let mut o = loop {
            let o = self.session()?.trace(dp_name.as_deref(), &mf, &q.what_if)?;
            let entered: Vec<uuid::Uuid> = self.client.with(|r| {
                let m = r.model();
                self.plan
                    .neighbours
                    .iter()
                    .filter(|u| {
                        m.datapath_binding().get(u).is_some_and(|d| {
                            let n = hf_controller::translate::datapath_name(d);
                            o.trace.records.iter().any(|rec| rec.datapath == n)
                        })
                    })
                    .copied()
                    .collect()
            });
            if entered.is_empty() {
                break o;
            }
            for u in entered {
                self.plan.expand(u);
            }
            self.dirty = true;
            self.close().await.map_err(|e| Failure(format!("{e:#}")))?;
        };
        if !friendly {
            for r in &mut o.trace.records {
                if let Some(u) = uuids.get(&r.datapath) {
                    r.datapath = u.clone();
                }
            }
            if let Some(u) = uuids.get(&o.datapath) {
                o.datapath = u.clone();
            }
        }
        let lookup = origins.as_ref().map(|or| move |h: &str| or.lookup(h));
        let nb: Option<render::NbLookup<'_>> = lookup.as_ref().map(|f| f as render::NbLookup<'_>);
        let text = if q.json {
            render::json(&o, nb).to_string()
        } else {
            render::text(&o, q.styles, nb)
        };
        Ok((o, text))
    }
}

async fn run_async(a: TraceArgs) -> anyhow::Result<std::process::ExitCode> {
    let timeout = Duration::from_secs_f64(a.timeout.max(0.0));
    let long_running = a.detach || a.unixctl.is_some() || a.stdin;
    let first = if long_running {
        None
    } else {
        Some(request_from_args(&a)?)
    };
    // Bad microflows fail before any connection.
    if let Some(q) = &first
        && let Err(e) = hf_trace::microflow::parse(&q.microflow, "microflow")
    {
        eprintln!("error parsing flow: {e}");
        return Ok(std::process::ExitCode::from(1));
    }
    let mut l = connect_sb(&a.db, timeout).await?;
    l.chassis = a.chassis.clone();
    l.friendly = !a.no_friendly_names;
    if let Some(nb) = &a.ovnnb_db {
        l.origins = Some(load_nb(nb, timeout).await?);
    }
    if let Some(q) = first {
        let r = l.answer(&q).await;
        if a.fetch_stats {
            eprintln!("{}", l.fetch_stats());
        }
        // One question and the process ends: freeing what was fetched, translated and
        // compiled (the hub router's 31k flows at 500x40) would cost the answer tens of ms
        // for memory the exit returns anyway. The connection closes with the process.
        std::mem::forget(l);
        return match r {
            Ok((_, text)) => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes())?;
                if q.json {
                    out.write_all(b"\n")?;
                }
                Ok(std::process::ExitCode::SUCCESS)
            }
            Err(Failure(e)) => {
                eprintln!("error: {e}");
                Ok(std::process::ExitCode::from(1))
            }
        };
    }
    if a.stdin {
        return serve_stdin(&mut l, &a).await;
    }
    serve_unixctl(&mut l, &a, &ctl_path(&a)).await
}

/// `--stdin`: one JSON request per line (`{"datapath": ..., "microflow": ..., "ct": [...],
/// "lb_dst": ..., "format": "json"|"text", "styles": ["summary", ...]}`), one JSON answer per
/// line: the trace's JSON document, `{"text": ...}`, or `{"error": ...}`.
async fn serve_stdin(l: &mut Loaded, a: &TraceArgs) -> anyhow::Result<std::process::ExitCode> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let base = Request {
        json: a.format == Format::Json,
        ..Request::default()
    };
    while let Some(line) = rx.recv().await {
        if line.trim().is_empty() {
            continue;
        }
        let answer = match request_from_json(&line, &base) {
            Err(e) => json!({ "error": e }),
            Ok(q) => match l.answer(&q).await {
                Ok((_, text)) if q.json => {
                    serde_json::from_str(&text).unwrap_or_else(|_| json!({ "text": text }))
                }
                Ok((_, text)) => json!({ "text": text }),
                Err(Failure(e)) => json!({ "error": e }),
            },
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn request_from_json(line: &str, base: &Request) -> Result<Request, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("request is not JSON: {e}"))?;
    let mut q = base.clone();
    q.microflow = v
        .get("microflow")
        .and_then(Value::as_str)
        .ok_or("request has no \"microflow\" string")?
        .to_string();
    q.datapath = v
        .get("datapath")
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(ct) = v.get("ct").and_then(Value::as_array) {
        q.what_if.ct_states = ct
            .iter()
            .map(|c| {
                c.as_str()
                    .ok_or_else(|| "\"ct\" is a list of strings".to_string())
                    .and_then(|c| parse_ct(c).map_err(|e| e.to_string()))
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(d) = v.get("lb_dst").and_then(Value::as_str) {
        q.what_if.lb_dst = Some(parse_lb_dst(d).map_err(|e| e.to_string())?);
    }
    match v.get("format").and_then(Value::as_str) {
        Some("json") => q.json = true,
        Some("text") => q.json = false,
        Some(f) => return Err(format!("unknown format \"{f}\" (text, json)")),
        None => {}
    }
    Ok(q)
}

/// A unixctl `trace` command's arguments: `[--detailed|--summary|--minimal|--all|--json|
/// --ct=FLAGS|--lb-dst=IP[:PORT]]... [DATAPATH] MICROFLOW`.
fn request_from_words(words: &[String]) -> Result<Request, String> {
    let mut q = Request::default();
    let mut rest = Vec::new();
    for w in words {
        match w.as_str() {
            "--detailed" => q.styles.detailed = true,
            "--summary" => q.styles.summary = true,
            "--minimal" => q.styles.minimal = true,
            "--all" => {
                q.styles = Styles {
                    detailed: true,
                    summary: true,
                    minimal: true,
                }
            }
            "--json" | "--format=json" => q.json = true,
            "--format=text" => q.json = false,
            w if w.starts_with("--ct=") => q
                .what_if
                .ct_states
                .push(parse_ct(&w[5..]).map_err(|e| e.to_string())?),
            w if w.starts_with("--lb-dst=") => {
                q.what_if.lb_dst = Some(parse_lb_dst(&w[9..]).map_err(|e| e.to_string())?)
            }
            w if w.starts_with("--") => return Err(format!("unknown option {w}")),
            _ => rest.push(w.clone()),
        }
    }
    match rest.as_slice() {
        [m] => q.microflow = m.clone(),
        [d, m] => {
            q.datapath = Some(d.clone());
            q.microflow = m.clone();
        }
        _ => return Err("one or two non-option arguments are required".into()),
    }
    Ok(q)
}

/// The unixctl server (OVS lib/unixctl.c's protocol: JSON-RPC 1.0 on a unix stream socket;
/// `ovs-appctl -t SOCKET COMMAND ARGS...` sends `{"method": COMMAND, "params": [ARGS...],
/// "id": N}` and prints the `result` string or the `error`). Commands: `trace`, `exit`,
/// `version`, `list-commands`. Between requests it follows SB changes.
async fn serve_unixctl(
    l: &mut Loaded,
    a: &TraceArgs,
    path: &Path,
) -> anyhow::Result<std::process::ExitCode> {
    if a.detached_child {
        let _ = nix::unistd::setsid();
    }
    if path.exists() {
        remove_file(path);
    }
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    let pidfile = write_pidfile(a)?;
    eprintln!("holdfast trace: listening on {}", path.display());
    let mut exiting = false;
    while !exiting {
        tokio::select! {
            acc = listener.accept() => {
                let Ok((stream, _)) = acc else { continue };
                exiting = serve_conn(l, stream).await;
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {
                l.drain();
            }
        }
    }
    remove_file(path);
    if let Some(p) = pidfile {
        remove_file(&p);
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// The daemon's unixctl commands, sorted by name as `list-commands` prints them.
const COMMANDS: &[unixctl::Command] = &[
    ("exit", "", 0, 0),
    ("list-commands", "", 0, 0),
    ("trace", "[OPTIONS] [DATAPATH] MICROFLOW", 1, usize::MAX),
    ("version", "", 0, 0),
];

/// Serves one unixctl connection until it closes; true when `exit` was asked. The protocol
/// checks (ids, params, argument counts, reply texts) are `holdfast db`'s unixctl server's.
async fn serve_conn(l: &mut Loaded, mut stream: tokio::net::UnixStream) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut framer = Framer::new(16 << 20);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match tokio::time::timeout(Duration::from_secs(60), stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return false,
        };
        framer.push(&chunk[..n]);
        while let Some(m) = framer.next_message() {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("unixctl: bad JSON-RPC message: {e}: closing");
                    return false;
                }
            };
            let q = match unixctl::parse_request(m, COMMANDS) {
                Ok(q) => q,
                Err(None) => continue,
                Err(Some(reply)) => {
                    if stream
                        .write_all(reply.to_string().as_bytes())
                        .await
                        .is_err()
                    {
                        return false;
                    }
                    continue;
                }
            };
            let exit = q.method == "exit";
            let result = match q.method.as_str() {
                "trace" => match request_from_words(&q.args) {
                    Ok(t) => l
                        .answer(&t)
                        .await
                        .map(|(_, text)| text)
                        .map_err(|Failure(e)| e),
                    Err(e) => Err(e),
                },
                "version" => Ok(format!("holdfast trace {}", env!("CARGO_PKG_VERSION"))),
                "list-commands" => Ok(unixctl::list_commands(COMMANDS)),
                _ => Ok(String::new()),
            };
            let reply = unixctl::reply(&q.id, result);
            if stream
                .write_all(reply.to_string().as_bytes())
                .await
                .is_err()
                || exit
            {
                return exit;
            }
        }
    }
}

fn write_pidfile(a: &TraceArgs) -> anyhow::Result<Option<PathBuf>> {
    let Some(p) = default_path(&a.pidfile, "holdfast-trace.pid") else {
        return Ok(None);
    };
    std::fs::write(&p, format!("{}\n", std::process::id()))
        .with_context(|| format!("cannot write the pidfile {}", p.display()))?;
    Ok(Some(p))
}

fn remove_file(p: &Path) {
    let _ = std::fs::remove_file(p);
}
