//! `holdfast sandbox`: the whole of holdfast in one process on a simulated network, driven on
//! the wall clock, with its databases on `tcp:127.0.0.1:6641`/`6642` for real OVN tools.
//!
//! # What it does
//!
//! Builds an `hf_sim` world (the in-memory OVSDB server with NB and SB, holdfast northd, one
//! controller and datapath per chassis, simulated hosts with real TCP/IP stacks), puts the
//! topology `--topology` names ([`topology`]: the default one, or OVN-Kubernetes' layer-2
//! design) into NB, and shows progress while it comes up: databases
//! listening, northd's flows, the chassis' programs installed, the hosts attached. It then runs
//! the default story ([`story`]: pings and TCP transfers across chassis and through SNAT) and
//! prints the results. With `--scenario NAME` it exits (status 1 when a step failed); without,
//! it prints the commands to explore it and stays up, driving the world on the wall clock
//! ([`bridge`]) and pinging every host that attaches itself to a new VIF port. While it stays
//! up, its control socket ([`ctl`], `ovs-appctl -t PATH`) runs pings, streams, restarts,
//! handoffs, rebuilds and reports.
//!
//! # What it does not do
//!
//! Real interfaces, TLS, or persistence: everything lives in memory and is gone on exit.
//! Times in its results are the simulator's (10 Gb/s links, 50 µs between chassis, 1 ms to the
//! external host), not the machine's.
//!
//! Submodules: [`args`] (the command line), [`bridge`] (TCP listeners whose connections are
//! sessions of the world's OVSDB server, and the task that drives the world), [`ctl`] (the
//! control socket and its commands), [`topology`] (the topologies), [`sim`] (every call
//! into the world), [`story`] (the stories and the watcher of new hosts).

// The sandbox is an I/O shell: it reads the clock and owns sockets.
#![allow(clippy::disallowed_methods)]

pub mod args;
pub mod bridge;
pub mod ctl;
pub mod sim;
pub mod story;
pub mod topology;

use std::process::ExitCode;

pub use args::SandboxArgs;
use args::Scenario;
use tokio::sync::mpsc;

use bridge::Listeners;
use story::{Sandbox, Verdict};
use topology::Topology;

/// How many progress steps coming up takes.
pub const STEPS: usize = 5;

/// Where the sandbox's lines go: stdout, plain text, one line at a time (flushed, so a pipe
/// sees each as it happens).
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    quiet: bool,
    verbose: bool,
}

impl Printer {
    /// A printer; `quiet` keeps only results and the listening line; `verbose` shows every
    /// log line of the world's components (on stderr).
    pub fn new(quiet: bool, verbose: bool) -> Printer {
        Printer { quiet, verbose }
    }

    /// A log line of the world (`hv1|datapath|Info|...`, `northd|info|...`, `world: ...`):
    /// on stderr, informational ones only with --verbose.
    pub fn log(&self, line: &str) {
        // The level is the second field (`northd|info|...`) or the third (`hv1|datapath|Info|...`).
        let info = line
            .split('|')
            .skip(1)
            .take(2)
            .any(|f| f.eq_ignore_ascii_case("info") || f.eq_ignore_ascii_case("debug"));
        if self.verbose || !info {
            use std::io::Write as _;
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{line}");
        }
    }

    fn emit(text: &str) {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }

    /// `[i/5] text` (hidden with --quiet).
    pub fn progress(&self, i: usize, text: &str) {
        if !self.quiet {
            Self::emit(&format!("[{i}/{STEPS}] {text}"));
        }
    }

    /// Descriptive text (hidden with --quiet).
    pub fn info(&self, text: &str) {
        if !self.quiet {
            Self::emit(text);
        }
    }

    /// A result or anything a script needs (always printed).
    pub fn result(&self, text: &str) {
        Self::emit(text);
    }
}

/// Run `holdfast sandbox`.
pub fn run(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    args.validate()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(main(args))
}

async fn main(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    let p = Printer::new(args.quiet, args.verbose);
    // Stories that build their own simulated cluster (an incident's own design).
    if let Some(s @ Scenario::SnatExemption) = args.scenario {
        let verdict = story::snat_exemption::story(args.seed, p);
        p.result(&format!("story {}: {verdict}", s.name()));
        return Ok(if verdict.ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let topo = Topology::new(args.topology_kind(), args.chassis);
    let listeners = Listeners::bind(args.nb_port, args.sb_port).await?;
    let (nb, sb) = listeners.addrs()?;
    // Always printed (also with --quiet): scripts and tests read the ports from it.
    Printer::emit(&format!(
        "[1/{STEPS}] databases listening on tcp:{nb} (NB), tcp:{sb} (SB)"
    ));
    let (tx, rx) = mpsc::unbounded_channel();
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
    // The control socket, when the sandbox stays up; commands wait in the channel until the
    // driver runs.
    let ctl_path = if args.scenario.is_none() {
        let path = args
            .unixctl
            .as_deref()
            .map_or_else(ctl::default_path, crate::db::daemon::absolute);
        match ctl::start(&path, tx.clone(), exit_tx) {
            Ok(()) => {
                Printer::emit(&format!(
                    "control socket: {} (ovs-appctl -t {} list-commands)",
                    path.display(),
                    path.display()
                ));
                Some(path)
            }
            Err(e) if args.unixctl.is_some() => {
                anyhow::bail!(
                    "--unixctl {}: could not create the control socket: {e}",
                    path.display()
                )
            }
            Err(e) => {
                p.result(&format!(
                    "control socket: none ({}: {e}; give --unixctl PATH)",
                    path.display()
                ));
                None
            }
        }
    } else {
        None
    };
    listeners.spawn(tx);

    let mut sandbox = Sandbox::new(args.seed, topo, p)?;
    let up = sandbox.come_up();
    sandbox.flush_log();
    p.info("");
    p.info(&sandbox.topology().describe());
    p.info("");
    let scenario = args.scenario.unwrap_or(Scenario::Default);
    let verdict = match up {
        Ok(()) => sandbox.run_story(scenario),
        Err(e) => {
            p.result(&format!("error: {e:#}"));
            Verdict::Failed(Some("the sandbox did not come up".into()))
        }
    };
    p.result(&format!("story {}: {verdict}", scenario.name()));
    if args.scenario.is_some() {
        return Ok(if verdict.ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    p.info("");
    p.info(&explore_text(
        sandbox.topology(),
        nb.port(),
        sb.port(),
        ctl_path.as_deref(),
    ));
    p.result(&format!(
        "sandbox up: NB tcp:{nb}, SB tcp:{sb} (Ctrl-C stops it)"
    ));
    sandbox.watch_new_hosts();
    let stop = async {
        tokio::select! {
            _ = shutdown() => {}
            _ = exit_rx.recv() => {}
        }
    };
    bridge::drive(&mut sandbox, rx, stop).await;
    if let Some(path) = ctl_path {
        let _ = std::fs::remove_file(path);
    }
    p.info("sandbox: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    match term {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The commands to try, with the ports and the control socket the sandbox got.
fn explore_text(t: &Topology, nb: u16, sb: u16, ctl: Option<&std::path::Path>) -> String {
    let a = &t.vms[0];
    let b = t
        .vms
        .iter()
        .find(|v| v.switch != a.switch)
        .unwrap_or(&t.vms[t.vms.len() - 1]);
    // Where the first host would migrate to: another hypervisor.
    let to = t
        .hypervisors
        .iter()
        .find(|h| **h != a.chassis)
        .map_or("hv2", String::as_str);
    let nbdb = format!("--db=tcp:127.0.0.1:{nb}");
    let sbdb = format!("--db=tcp:127.0.0.1:{sb}");
    // To a host on another switch through the router, else straight to it.
    let dst_mac = if b.switch == a.switch {
        b.mac.as_str()
    } else {
        t.gateway_mac(a)
    };
    let (new_sw, new_mac, new_ip) = t.example_port();
    format!(
        "explore it (real OVN tools work against it):\n\
         \x20 ovn-nbctl {nbdb} show\n\
         \x20 ovn-sbctl {sbdb} show\n\
         \x20 ovn-sbctl {sbdb} lflow-list {sw}\n\
         \x20 holdfast trace --db=tcp:127.0.0.1:{sb} {sw} '{flow}'\n\
         \x20 ovn-trace --db=tcp:127.0.0.1:{sb} {sw} '{flow}'\n\
         \x20 ovn-nbctl {nbdb} --wait=hv lsp-add {new_sw} p9 -- lsp-set-addresses p9 \"{new_mac} {new_ip}\"\n\
         a new switch port with addresses gets a simulated host at once; the sandbox pings it and\n\
         says so (host p9 ({new_ip}) on CHASSIS answers ping: RTT). Ctrl-C stops the sandbox.{drive}",
        drive = ctl.map_or_else(String::new, |path| {
            let t = format!("ovs-appctl -t {}", path.display());
            format!(
                "\n\ndrive it through its control socket (hosts by port name, ext1 the external host):\n\
                 \x20 {t} sandbox/ping {a} {b}\n\
                 \x20 {t} sandbox/stream s1 {a} {b} tcp          # a verified 10 Mbit/s stream until stopped\n\
                 \x20 {t} sandbox/stream s2 {a} ext1 tcp --download\n\
                 \x20 {t} sandbox/stream u1 {a} ext1 udp\n\
                 \x20 {t} sandbox/restart controller hv1        # or datapath CHASSIS (a crash), northd\n\
                 \x20 {t} sandbox/handoff datapath hv2\n\
                 \x20 {t} sandbox/rebuild\n\
                 \x20 {t} sandbox/migrate {a} {to} --pause 30  # the hypervisor's part; the CMS\n\
                 \x20     sets requested-chassis={a_ch},{to} activation-strategy=rarp first (README)\n\
                 \x20 {t} sandbox/report                         # --format json for scripts\n\
                 \x20 {t} sandbox/stop s1\n\
                 \x20 {t} list-commands",
                a = a.name,
                a_ch = a.chassis,
                to = to,
                b = b.name
            )
        }),
        sw = a.switch,
        flow = format!(
            "inport == \"{}\" && eth.src == {} && eth.dst == {dst_mac} && ip4.src == {} && ip4.dst == {} && ip.ttl == 64 && icmp4.type == 8",
            a.name, a.mac, a.ip, b.ip
        ),
    )
}
