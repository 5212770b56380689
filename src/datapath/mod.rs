//! `holdfast datapath`: the per-chassis datapath daemon, a thin shell around
//! [`hf_datapath::Datapath`] (ovs-vswitchd's place in a chassis).
//!
//! What it does: the chassis's local OVS database as its first argument ([`local`]: the
//! interfaces of the integration bridge with `external_ids:iface-id` become AF_PACKET ports
//! ([`devices`]), and their rows get `ofport`, `link_state`, `error`... back, with `cur_cfg`
//! following `next_cfg`); in-memory ports given on the command line (`--port NAME[,MAC]`, for
//! tests and the simulator); Geneve to and from other chassis over UDP on `--encap-ip` (port
//! `--geneve-port`, 6081 by default; the remote chassis are reached on the same port number);
//! the controller's control socket (`--control punix:PATH`, one controller at a time; a new
//! connection replaces the old one); the zone map mirrored to `--zones-file` (written
//! atomically on every change, read on start); the hitless restart (`--takeover`,
//! [`takeover`]: state and sockets from the running process); the daemon plumbing `holdfast
//! db` has (`--detach`, `--pidfile`, `--log-file`, `--unixctl`, `-v`) and unixctl commands to
//! look inside and to drive the in-memory ports from tests (`datapath/inject`,
//! `datapath/capture`); and live migration's state channel between datapaths
//! (`--state-listen ptcp:PORT[:IP]|pssl:PORT[:IP]`, mutual TLS with `-p/-c/-C`; [`state`]).
//!
//! What it does not do: internal ports (tap devices it would create), patch and tunnel
//! interfaces in the local database, bridges other than the integration bridge (each refused
//! with its reason in `Interface.error`), AF_XDP, outer Ethernet/IP headers of its own (the
//! kernel's UDP socket carries Geneve), IPv6 tunnel endpoints other than what the socket does
//! by itself. Offloaded frames (partial checksums, TSO super-frames) are completed or
//! segmented before the pipeline, not carried through it.
// An I/O shell: clocks, sockets, signals.
#![allow(clippy::disallowed_methods)]

mod cert;
mod devices;
mod local;
mod state;
mod takeover;
mod tunnel;

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use std::os::fd::AsRawFd;

use hf_datapath::proto::HandleMsg;
use hf_datapath::{Datapath, DatapathConfig, Level, TransmitRef};
use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UdpSocket, UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use crate::db::shell::{self, ClientTlsArgs, DaemonArgs};
use crate::db::{daemon, unixctl};

const PROGRAM: &str = "holdfast-datapath";

/// Bytes waiting for a controller that does not read before its connection is closed.
const CTL_OUT_MAX: usize = 1 << 30;

/// Geneve datagrams received per wake-up beyond the first, before the other sources get
/// their turn.
const TUNNEL_BUDGET: usize = 256;

/// Frames kept per port for `datapath/capture`.
const CAPTURE_MAX: usize = 1024;

/// `holdfast datapath`'s options.
#[derive(Debug, Args)]
#[command(
    after_help = "Real ports come from the local OVS database (DATABASE): `ovs-vsctl add-port br-int \
tap0 -- set Interface tap0 external_ids:iface-id=vm1` attaches tap0 to logical port vm1 (an \
AF_PACKET socket), `ovs-vsctl del-port br-int tap0` detaches it. In-memory ports (--port, for the \
simulator and tests): frames enter with `datapath/inject PORT HEX` and leave into \
`datapath/capture PORT`.

Live migration's state channel: a migrating port's destination dials its source's encap IP at \
the --state-listen port (the same on every chassis) and pulls the port's conntrack state \
(a pre-copy, deltas, the final delta at activation). With pssl: both ends authenticate with \
certificates signed by the -C CA, and a certificate's CN must be its chassis name.",
    mut_arg("private_key", |a| a.help(
        "TLS private key (PEM): for the pssl: state channel, both ways"
    )),
    mut_arg("certificate", |a| a.help(
        "TLS certificate (PEM) whose CN is this chassis's name (--chassis): for the pssl: \
state channel, both ways"
    )),
    mut_arg("ca_cert", |a| a.help(
        "CA certificate (PEM) that must have signed every peer chassis's certificate (mutual TLS)"
    )),
)]
pub struct DatapathArgs {
    /// The chassis's local OVS database, as ovs-vswitchd takes it: `unix:PATH` or
    /// `tcp:IP:PORT` (default: unix:$OVS_RUNDIR/db.sock). The interfaces on the integration
    /// bridge's ports (`external_ids:ovn-bridge`, default br-int) with
    /// `external_ids:iface-id=PORT` are opened and attached to logical port PORT; each
    /// `Interface` row gets its `ofport`, `ifindex`, `mac_in_use`, `mtu`, `admin_state`,
    /// `link_state` and `error`, and `Open_vSwitch.cur_cfg` follows `next_cfg` (so `ovs-vsctl`
    /// without --no-wait returns). The chassis name and encap IP come from its
    /// `external_ids:system-id` and `ovn-encap-ip` when --chassis and --encap-ip are not given.
    #[arg(value_name = "DATABASE")]
    database: Option<String>,

    /// The chassis name (default: the local database's `external_ids:system-id`); the
    /// controller must name the same.
    #[arg(long, value_name = "NAME")]
    chassis: Option<String>,

    /// The local tunnel endpoint: Geneve is received on IP:--geneve-port and sent from it
    /// (default: the local database's `external_ids:ovn-encap-ip`).
    #[arg(long, value_name = "IP")]
    encap_ip: Option<IpAddr>,

    /// The Geneve UDP port, here and on the remote chassis (0: an ephemeral port, printed in
    /// the log; remote chassis are then reached on that same number).
    #[arg(long, value_name = "PORT", default_value_t = hf_wire::geneve::GENEVE_PORT)]
    geneve_port: u16,

    /// The control socket for the controller, `punix:PATH` (default:
    /// punix:$OVS_RUNDIR/holdfast-datapath.sock).
    #[arg(long, value_name = "punix:PATH")]
    control: Option<String>,

    /// Take a running datapath's place without resetting a connection: connect to its control
    /// socket (--control), compile its program while it still forwards, then take its state
    /// (program, zone map, conntrack, activations) and its sockets (ports, Geneve, control,
    /// state channel) and serve on them; the old process exits. Both must speak control
    /// protocol version 5 or later.
    #[arg(long)]
    takeover: bool,

    /// An in-memory port named by its iface-id, optionally with its MAC (repeatable).
    #[arg(long = "port", value_name = "NAME[,MAC]")]
    ports: Vec<String>,

    /// The zone map's local storage (JSON object name → zone), read on start and rewritten
    /// atomically on every change.
    #[arg(long, value_name = "FILE")]
    zones_file: Option<PathBuf>,

    /// Live migration's state channel between datapaths: listen on PORT (IP: --encap-ip by
    /// default), plain TCP (ptcp:) or mutual TLS (pssl:, needs -p/-c/-C). Peers are dialed at
    /// their encap IP on the same PORT, over TLS with pssl:. Without it the datapath neither
    /// listens nor dials, and migrations go on without their state.
    #[arg(long, value_name = "ptcp:PORT[:IP]|pssl:PORT[:IP]")]
    state_listen: Option<String>,

    /// Worker threads that compile a program's datapaths (a cold start's whole program, or a
    /// change's datapaths). Default: the machine's available parallelism. The program is the
    /// same for every value.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    compile_threads: Option<u16>,

    /// TLS for the state channel (OVN's -p/-c/-C).
    #[command(flatten)]
    tls: ClientTlsArgs,

    /// OVS's daemon options.
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// The unixctl commands, sorted by name.
const COMMANDS: &[unixctl::Command] = &[
    ("coverage/show", "", 0, 0),
    ("ct-zone-list", "", 0, 0),
    ("datapath/capture", "PORT", 1, 1),
    ("datapath/inject", "PORT HEX", 2, 2),
    ("datapath/migrations", "", 0, 0),
    ("datapath/state-sessions", "", 0, 0),
    ("dpctl/dump-conntrack", "[ZONE-NAME]", 0, 1),
    ("dpctl/flush-conntrack", "ZONE-NAME", 1, 1),
    ("exit", "", 0, 0),
    ("stopwatch/reset", "[NAME]", 0, 1),
    ("stopwatch/show", "[NAME]", 0, 1),
];

/// The origin of the core's `now` and of its stage clock.
static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// The stage clock ([`Datapath::set_stage_clock`]): time since [`ORIGIN`].
fn stage_clock() -> Duration {
    ORIGIN.get_or_init(Instant::now).elapsed()
}

struct Request {
    method: String,
    args: Vec<String>,
    reply: oneshot::Sender<Result<String, String>>,
}

fn start_unixctl(
    path: &Path,
    tx: mpsc::UnboundedSender<Request>,
    exit: mpsc::UnboundedSender<()>,
) -> std::io::Result<()> {
    unixctl::listen(
        path,
        move |m| {
            let tx = tx.clone();
            async move {
                let reply = match unixctl::parse_request(m, COMMANDS) {
                    Err(None) => return None,
                    Err(Some(r)) => r,
                    Ok(q) => {
                        let is_exit = q.method == "exit";
                        let (rtx, rrx) = oneshot::channel();
                        let _ = tx.send(Request {
                            method: q.method,
                            args: q.args,
                            reply: rtx,
                        });
                        let r = rrx
                            .await
                            .unwrap_or_else(|_| Err(format!("{PROGRAM} is exiting")));
                        // `exit` ends the daemon once its reply is written.
                        let exits = is_exit && r.is_ok();
                        return Some((unixctl::reply(&q.id, r), exits));
                    }
                };
                Some((reply, false))
            }
        },
        move || {
            let _ = exit.send(());
        },
    )
}

/// Parses `NAME[,MAC]`.
fn parse_port(s: &str) -> anyhow::Result<(String, Option<[u8; 6]>)> {
    let (name, mac) = match s.split_once(',') {
        Some((n, m)) => (n, Some(m)),
        None => (s, None),
    };
    if name.is_empty() {
        anyhow::bail!("--port={s}: the port needs a name");
    }
    let mac = match mac {
        None => None,
        Some(m) => Some(
            hf_controller::translate::flows::parse_mac(m).ok_or_else(|| {
                anyhow::anyhow!("--port={s}: \"{m}\" is not a MAC address (xx:xx:xx:xx:xx:xx)")
            })?,
        ),
    };
    Ok((name.to_string(), mac))
}

fn parse_hex(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return Err("the frame's hex has an odd number of digits".into());
    }
    (0..s.len() / 2)
        .map(|i| {
            s.get(2 * i..2 * i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(|| format!("\"{s}\" is not hex (at byte {i})"))
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads the zone map from local storage (missing file: empty).
fn read_zones(path: &Path) -> anyhow::Result<BTreeMap<String, u16>> {
    match std::fs::read_to_string(path) {
        Ok(s) => serde_json::from_str(&s).with_context(|| {
            format!(
                "{}: not a zone map (JSON object name → zone)",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e).with_context(|| format!("{}: cannot read the zone map", path.display())),
    }
}

/// Writes the zone map atomically (temporary file + rename).
fn write_zones(path: &Path, zones: &BTreeMap<String, u16>) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string_pretty(zones).map_err(std::io::Error::other)?;
    {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Runs the datapath daemon.
pub fn run(args: DatapathArgs) -> anyhow::Result<ExitCode> {
    shell::start_logging(
        PROGRAM,
        &args.daemon.verbose,
        args.daemon.log_file.as_deref(),
        &daemon::logdir(),
        str::to_string,
    )?;
    let rundir = daemon::rundir();
    let local_db = match &args.database {
        Some(d) => d.clone(),
        None => format!("unix:{}", rundir.join("db.sock").display()),
    };
    shell::check_db_remotes("DATABASE", &hf_ovsdb_net::client::parse_remotes(&local_db))?;
    let (chassis, encap_ip) = match (&args.chassis, args.encap_ip) {
        (Some(c), Some(ip)) => (c.clone(), ip),
        (c, ip) => local::read_settings(&local_db, c.as_deref(), ip)?,
    };
    if chassis.trim().is_empty() {
        anyhow::bail!("--chassis (or external_ids:system-id): the chassis name must not be empty");
    }
    let control = match &args.control {
        None => rundir.join(format!("{PROGRAM}.sock")),
        Some(c) => match c.strip_prefix("punix:") {
            Some(p) if !p.is_empty() => daemon::absolute(Path::new(p)),
            _ => anyhow::bail!("--control={c}: the control socket is punix:PATH"),
        },
    };
    let ports = args
        .ports
        .iter()
        .map(|p| parse_port(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let zones_file = args.zones_file.as_deref().map(daemon::absolute);
    let zones = match &zones_file {
        Some(p) => read_zones(p)?,
        None => BTreeMap::new(),
    };
    let mut cfg = DatapathConfig::new(&chassis, encap_ip);
    cfg.zones = zones;
    cfg.compile_threads = args.compile_threads.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        usize::from,
    );
    let mut dp = Datapath::new(cfg);
    dp.set_stage_clock(stage_clock);
    for (name, mac) in &ports {
        dp.add_port(name, *mac);
    }
    // Bind (or take over) before detaching so that errors reach the caller.
    let sockets = if args.takeover {
        take_over(&mut dp, &control, &chassis)?
    } else {
        let udp = std::net::UdpSocket::bind(SocketAddr::new(encap_ip, args.geneve_port))
            .with_context(|| format!("binding Geneve on {encap_ip}:{}", args.geneve_port))?;
        tunnel_buffers(&udp);
        if control.exists() {
            let _ = std::fs::remove_file(&control);
        }
        let ctl = std::os::unix::net::UnixListener::bind(&control)
            .with_context(|| format!("{}: cannot create the control socket", control.display()))?;
        Sockets {
            udp,
            control: ctl,
            state: None,
            ports: Vec::new(),
        }
    };
    sockets.udp.set_nonblocking(true)?;
    sockets.control.set_nonblocking(true)?;
    let state_bound = state::bind(
        args.state_listen.as_deref(),
        encap_ip,
        &args.tls,
        sockets.state,
    )?;
    let shell::Started {
        mut ready,
        pidfile: _pidfile,
        unixctl: unixctl_path,
    } = shell::start(PROGRAM, &args.daemon, &rundir)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let shell = Shell {
        dp,
        origin: *ORIGIN.get_or_init(Instant::now),
        captured: BTreeMap::new(),
        zones_file,
        geneve_port: 0,
        state: state::StateChannel::new(state_bound),
        chassis: chassis.clone(),
        encap_ip,
        local_db,
        devices: devices::Devices::default(),
        inherited_ports: sockets.ports,
        segs: hf_wire::offload::Segments::new(),
        tunnel_tx: tunnel::TunnelTx::default(),
        gre: hf_datapath::port::GreSender::default(),
        gre_failed: std::collections::BTreeSet::new(),
    };
    let r = rt.block_on(shell.serve(
        &args,
        sockets.udp,
        sockets.control,
        &control,
        unixctl_path,
        &rundir,
        &mut ready,
    ));
    // A datapath that handed over leaves its control socket to the new process.
    if !matches!(r, Ok(Served::HandedOver)) {
        let _ = std::fs::remove_file(&control);
    }
    let r = r.map(|_| ExitCode::SUCCESS);
    if let Err(e) = &r {
        tracing::error!("{e:#}");
    }
    r
}

/// The Geneve socket's buffers: every chassis's traffic to this one queues in one socket, so
/// it gets what the AF_PACKET ports get (4 MiB each way; forced when privileged, else as much
/// as `net.core.rmem_max`/`wmem_max` allow).
fn tunnel_buffers(udp: &std::net::UdpSocket) {
    use nix::sys::socket::{setsockopt, sockopt};
    const BUF: usize = 4 << 20;
    if setsockopt(udp, sockopt::RcvBufForce, &BUF).is_err() {
        let _ = setsockopt(udp, sockopt::RcvBuf, &BUF);
    }
    if setsockopt(udp, sockopt::SndBufForce, &BUF).is_err() {
        let _ = setsockopt(udp, sockopt::SndBuf, &BUF);
    }
}

/// The sockets the daemon serves on: bound, or taken over.
struct Sockets {
    udp: std::net::UdpSocket,
    control: std::os::unix::net::UnixListener,
    state: Option<std::net::TcpListener>,
    /// Ports' AF_PACKET sockets: (logical port, interface, socket).
    ports: Vec<(String, String, std::os::fd::OwnedFd)>,
}

/// How [`Shell::serve`] ended.
enum Served {
    /// A signal or `exit`.
    Stopped,
    /// A new process took over (its sockets went with the state).
    HandedOver,
}

/// `--takeover`: takes the running datapath's place (see [`takeover`]); `dp` gets its program
/// (compiled while the old process still forwards), then its state, and the sockets come back.
fn take_over(dp: &mut Datapath, control: &Path, chassis: &str) -> anyhow::Result<Sockets> {
    let (t, running) = takeover::Takeover::connect(control, chassis)?;
    for p in &running.ports {
        if dp.port_handle(&p.name).is_none() {
            dp.add_port(&p.name, p.mac);
        }
    }
    if let Some(p) = running.program {
        let generation = p.generation;
        dp.install(p).map_err(|e| {
            anyhow::anyhow!(
                "--takeover: the running program {generation} does not compile here: {e}; the \
                 old datapath keeps running"
            )
        })?;
    }
    let (handed, old_pid) = t.finish()?;
    // From here the old process forwards nothing: whatever fails, this one serves. On the
    // core's clock (the serve loop's), so that the sessions' deadlines keep their meaning.
    let now = stage_clock();
    if let Err(e) = dp.import_state(handed.state, now) {
        tracing::error!("--takeover: the state does not import ({e}); serving without it");
    }
    if let Some(s) = handed.sessions {
        dp.import_sessions(s, now);
    }
    let (mut udp, mut ctl, mut st) = (None, None, None);
    let mut ports = Vec::new();
    for (h, fd) in handed.sockets {
        match h {
            HandleMsg::Geneve => udp = Some(std::net::UdpSocket::from(fd)),
            HandleMsg::Control => ctl = Some(std::os::unix::net::UnixListener::from(fd)),
            HandleMsg::StateListen => st = Some(std::net::TcpListener::from(fd)),
            HandleMsg::Port { port, ifname } => ports.push((port, ifname, fd)),
        }
    }
    if let Some(pid) = old_pid
        && !takeover::wait_exit(pid, Duration::from_secs(10))
    {
        tracing::warn!("--takeover: the old datapath (pid {pid}) has not exited yet");
    }
    let (Some(udp), Some(control)) = (udp, ctl) else {
        anyhow::bail!("--takeover: the old datapath did not pass its Geneve and control sockets");
    };
    tracing::info!(
        "took over from the datapath at {} (pid {}): program {}, {} conntrack entries",
        control
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
            .unwrap_or_default(),
        old_pid.map_or_else(|| "?".into(), |p| p.to_string()),
        dp.generation(),
        dp.counters().conntrack_entries
    );
    Ok(Sockets {
        udp,
        control,
        state: st,
        ports,
    })
}

enum Ev {
    Signal,
    Accept(std::io::Result<UnixStream>),
    Read(std::io::Result<usize>),
    Writable,
    Udp(std::io::Result<(usize, SocketAddr)>),
    Unixctl(Option<Request>),
    State(state::StateEvent),
    Exit,
    Timer,
    /// The local database changed (or its replica stopped: false).
    Local(bool),
    /// An interface has frames waiting.
    Device(String),
    /// The once-a-second look at the interfaces.
    Tick,
}

struct Shell {
    dp: Datapath,
    origin: Instant,
    captured: BTreeMap<String, VecDeque<Vec<u8>>>,
    zones_file: Option<PathBuf>,
    geneve_port: u16,
    /// Live migration's sessions with other datapaths.
    state: state::StateChannel,
    chassis: String,
    encap_ip: IpAddr,
    /// The local OVS database's remote.
    local_db: String,
    /// The real interfaces.
    devices: devices::Devices,
    /// Ports taken over from the previous process: (logical port, interface, socket).
    inherited_ports: Vec<(String, String, std::os::fd::OwnedFd)>,
    /// Segments of offloaded frames for in-memory ports (reused).
    segs: hf_wire::offload::Segments,
    /// Offloaded frames into the tunnel.
    tunnel_tx: tunnel::TunnelTx,
    /// Mirror copies out to their sinks, and the sinks a send failed to (logged once each).
    gre: hf_datapath::port::GreSender,
    gre_failed: std::collections::BTreeSet<IpAddr>,
}

impl Shell {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    #[allow(clippy::too_many_arguments)]
    async fn serve(
        mut self,
        args: &DatapathArgs,
        udp: std::net::UdpSocket,
        ctl_listener: std::os::unix::net::UnixListener,
        control: &Path,
        unixctl_path: Option<PathBuf>,
        rundir: &Path,
        ready: &mut daemon::Readiness,
    ) -> anyhow::Result<Served> {
        let udp = UdpSocket::from_std(udp)?;
        self.geneve_port = udp.local_addr()?.port();
        let listener = UnixListener::from_std(ctl_listener)?;
        self.state.start()?;
        let (utx, mut urx) = mpsc::unbounded_channel();
        let (etx, mut erx) = mpsc::unbounded_channel();
        let bound = shell::bind_unixctl(
            unixctl_path.as_deref(),
            rundir,
            PROGRAM,
            "ovs-appctl",
            |p| start_unixctl(p, utx, etx),
        )?;
        shell::ready(ready, "", &args.daemon);
        tracing::info!(
            "{PROGRAM} {}: chassis {}, Geneve on {}:{}, control punix:{}, {}",
            env!("CARGO_PKG_VERSION"),
            self.chassis,
            self.encap_ip,
            self.geneve_port,
            control.display(),
            self.state.describe()
        );
        for (port, ifname, fd) in std::mem::take(&mut self.inherited_ports) {
            self.devices.adopt_fd(port, ifname, fd, &mut self.dp);
        }
        let mut local = local::LocalDb::spawn(&self.local_db, &self.chassis);
        let mut local_alive = true;
        let mut plan = hf_datapath::local::Plan::default();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.flush_logs();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        // The controller session: read half, write half, and what waits to be written
        // (written without blocking, so a controller that does not read never stalls
        // forwarding).
        let mut ses_r: Option<OwnedReadHalf> = None;
        let mut ses_w: Option<OwnedWriteHalf> = None;
        let mut ctl_out: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let mut ubuf = vec![0u8; 65536];
        let mut exit = false;
        while !exit {
            let ev = {
                // The core's timers (an unreachable one is none), and the state sessions'.
                let deadline = self
                    .dp
                    .poll_timeout()
                    .and_then(|d| self.origin.checked_add(d))
                    .into_iter()
                    .chain(self.state.deadline())
                    .min();
                let sleep = async {
                    match deadline {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                };
                let read = async {
                    match ses_r.as_mut() {
                        Some(s) => s.read(&mut buf).await,
                        None => std::future::pending().await,
                    }
                };
                let writable = async {
                    match ses_w.as_ref() {
                        Some(w) if !ctl_out.is_empty() => w.writable().await,
                        _ => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => Ev::Signal,
                    _ = term.recv() => Ev::Signal,
                    r = listener.accept() => Ev::Accept(r.map(|(s, _)| s)),
                    r = read => Ev::Read(r),
                    _ = writable => Ev::Writable,
                    r = udp.recv_from(&mut ubuf) => Ev::Udp(r),
                    q = urx.recv() => Ev::Unixctl(q),
                    e = self.state.next() => Ev::State(e),
                    alive = local.next(), if local_alive => Ev::Local(alive),
                    n = std::future::poll_fn(|cx| self.devices.poll_ready(cx)) => Ev::Device(n),
                    _ = tick.tick() => Ev::Tick,
                    _ = erx.recv() => Ev::Exit,
                    _ = sleep => Ev::Timer,
                }
            };
            let now = self.now();
            let mut lost = false;
            match ev {
                Ev::Signal => {
                    tracing::info!("exiting on signal");
                    break;
                }
                Ev::Accept(Ok(s)) => {
                    if ses_r.is_some() {
                        tracing::info!("a new controller connection replaces the old one");
                        self.dp.handle_control_disconnected(now);
                    }
                    let (r, w) = s.into_split();
                    (ses_r, ses_w) = (Some(r), Some(w));
                    ctl_out.clear();
                    self.dp.handle_control_connected(now);
                }
                Ev::Accept(Err(e)) => tracing::warn!("control socket accept failed: {e}"),
                Ev::Read(Ok(0)) | Ev::Read(Err(_)) => lost = true,
                Ev::Read(Ok(n)) => self.dp.handle_control_bytes(&buf[..n], now),
                Ev::Writable => {}
                Ev::Udp(Ok((n, from))) => {
                    self.dp.handle_tunnel(from.ip(), &ubuf[..n], now);
                    // Whatever else waits in the socket, up to a budget, without a trip
                    // through the event loop per datagram.
                    for _ in 0..TUNNEL_BUDGET {
                        match udp.try_recv_from(&mut ubuf) {
                            Ok((n, from)) => self.dp.handle_tunnel(from.ip(), &ubuf[..n], now),
                            Err(_) => break,
                        }
                    }
                }
                Ev::Udp(Err(e)) => tracing::debug!("Geneve receive failed: {e}"),
                Ev::Unixctl(None) => {}
                Ev::Unixctl(Some(q)) => {
                    let r = self.command(&q.method, &q.args);
                    let _ = q.reply.send(r);
                }
                Ev::State(e) => self.state.handle(e, &mut self.dp, now),
                Ev::Exit => exit = true,
                Ev::Timer => self.dp.handle_timeout(now),
                Ev::Local(alive) => {
                    local_alive = alive;
                    if let Some(p) = local.plan_if_changed() {
                        self.devices.apply(&p, &mut self.dp);
                        plan = p;
                    }
                }
                Ev::Device(name) => self.devices.receive(&name, &mut self.dp, now),
                Ev::Tick => {
                    if self.devices.missing() {
                        self.devices.retry(&mut self.dp);
                    }
                    // Link states and the like change without telling: looked at once a second.
                    local.mark_dirty();
                }
            }
            // State sessions: dials, bytes out, closes (after whatever the event changed; the
            // core's reasons for a close are logged before the close).
            self.flush_logs();
            self.state.pump(&mut self.dp, now);
            // Control answers.
            while let Some(frame) = self.dp.poll_control_transmit() {
                if ses_w.is_some() {
                    ctl_out.extend_from_slice(&frame);
                }
            }
            if let Some(w) = ses_w.as_ref() {
                while !ctl_out.is_empty() {
                    match w.try_write(&ctl_out) {
                        Ok(n) => {
                            ctl_out.drain(..n);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            tracing::info!("controller connection lost: {e}");
                            lost = true;
                            break;
                        }
                    }
                }
                if ctl_out.len() > CTL_OUT_MAX {
                    tracing::warn!(
                        "controller reads nothing ({} bytes waiting): closing its connection",
                        ctl_out.len()
                    );
                    lost = true;
                }
            }
            if self.dp.handed_over()
                && let Some(w) = ses_w.as_ref()
            {
                // The state is on its way: the sockets follow it, and this process ends.
                self.flush_logs();
                let mut handles = vec![
                    (HandleMsg::Geneve, udp.as_raw_fd()),
                    (HandleMsg::Control, listener.as_raw_fd()),
                ];
                handles.extend(
                    self.state
                        .listener_fd()
                        .map(|fd| (HandleMsg::StateListen, fd)),
                );
                handles.extend(
                    self.devices
                        .handles()
                        .into_iter()
                        .map(|(port, ifname, fd)| (HandleMsg::Port { port, ifname }, fd)),
                );
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                while !ctl_out.is_empty() {
                    match tokio::time::timeout_at(deadline, w.writable()).await {
                        Ok(Ok(())) => {}
                        _ => {
                            anyhow::bail!("taken over, but the new process does not read its state")
                        }
                    }
                    match w.try_write(&ctl_out) {
                        Ok(n) => {
                            ctl_out.drain(..n);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => anyhow::bail!("taken over, but sending the state failed: {e}"),
                    }
                }
                takeover::hand_over(w.as_ref().as_raw_fd(), &handles)?;
                tracing::info!("handed over to a new datapath process: exiting");
                if let Some(p) = bound {
                    let _ = std::fs::remove_file(p);
                }
                return Ok(Served::HandedOver);
            }
            let refused = self.dp.control_wants_close() && ctl_out.is_empty();
            if (lost || refused) && ses_r.is_some() {
                (ses_r, ses_w) = (None, None);
                ctl_out.clear();
                self.dp.handle_control_disconnected(now);
            }
            // Frames out.
            let mut tunnel = Vec::new();
            let captured = &mut self.captured;
            let devices = &mut self.devices;
            let geneve_port = self.geneve_port;
            let segs = &mut self.segs;
            let gre = &mut self.gre;
            let gre_failed = &mut self.gre_failed;
            // In-memory ports and the tunnel take whole frames.
            let mut emit = |t: TransmitRef<'_>| match t {
                TransmitRef::Mirror { dst, payload } => match gre.send(dst, payload) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        if gre_failed.insert(dst) {
                            tracing::warn!(
                                "mirror copies to {dst}: {e} (a raw GRE socket needs CAP_NET_RAW); dropped"
                            );
                        }
                    }
                },
                // The port's name is copied only for its first captured frame.
                TransmitRef::Port { port, frame } => match captured.get_mut(port) {
                    Some(q) => {
                        if q.len() == CAPTURE_MAX {
                            q.pop_front();
                        }
                        q.push_back(frame.to_vec());
                    }
                    None => {
                        captured.insert(port.to_string(), VecDeque::from([frame.to_vec()]));
                    }
                },
                TransmitRef::Tunnel { dst, payload } => {
                    let to = SocketAddr::new(dst, geneve_port);
                    match udp.try_send_to(payload, to) {
                        Ok(_) => {}
                        // The socket's buffer is full: send it once it has room.
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            tunnel.push((to, payload.to_vec()))
                        }
                        Err(e) => tracing::warn!("Geneve to {to}: {e}"),
                    }
                }
            };
            let mut unfit = 0u64;
            let tunnel_tx = &mut self.tunnel_tx;
            let mut later = Vec::new();
            self.dp.drain_transmit_offload(|t, o| match t {
                // A real port takes the frame with its offload (the device finishes it).
                TransmitRef::Port { port, frame } if devices.send(port, frame, o) => {}
                t if o.is_none() => emit(t),
                // Segments into the tunnel in one UDP GSO send.
                TransmitRef::Tunnel { dst, payload } => {
                    let to = SocketAddr::new(dst, geneve_port);
                    match tunnel::send(tunnel_tx, &udp, to, payload, o) {
                        Ok(left) => later.extend(left.into_iter().map(|d| (to, d))),
                        Err(()) => unfit += 1,
                    }
                }
                t => {
                    if !hf_datapath::offload::complete(t, o, segs, &mut emit) {
                        unfit += 1;
                    }
                }
            });
            tunnel.extend(later);
            if unfit > 0 {
                tracing::warn!("{unfit} offloaded frame(s) whose metadata does not fit: dropped");
            }
            for (to, payload) in tunnel {
                if let Err(e) = udp.send_to(&payload, to).await {
                    tracing::warn!("Geneve to {to}: {e}");
                }
            }
            self.devices.flush();
            self.devices.handle_send_errors(&mut self.dp);
            if self.devices.take_changed() {
                local.mark_dirty();
            }
            let (seen, failed) = self.devices.observed_if(local.wants_write());
            local.write(&plan, &seen, &failed);
            self.persist_zones();
            self.flush_logs();
        }
        if exit {
            tracing::info!("exiting by unixctl request");
        }
        if let Some(p) = bound {
            let _ = std::fs::remove_file(p);
        }
        Ok(Served::Stopped)
    }

    fn persist_zones(&mut self) {
        if !self.dp.take_zones_changed() {
            return;
        }
        if let Some(p) = &self.zones_file
            && let Err(e) = write_zones(p, self.dp.zones())
        {
            tracing::error!("{}: cannot write the zone map: {e}", p.display());
        }
    }

    fn flush_logs(&mut self) {
        while let Some((l, line)) = self.dp.poll_log() {
            match l {
                Level::Error => tracing::error!("{line}"),
                Level::Warn => tracing::warn!("{line}"),
                Level::Info => tracing::info!("{line}"),
                Level::Debug => tracing::debug!("{line}"),
            }
        }
    }

    fn command(&mut self, method: &str, args: &[String]) -> Result<String, String> {
        let now = self.now();
        let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
        match method {
            "exit" => Ok(String::new()),
            "version" => Ok(format!(
                "{PROGRAM} (holdfast) {}",
                env!("CARGO_PKG_VERSION")
            )),
            "list-commands" => Ok(unixctl::list_commands(COMMANDS)),
            "dpctl/dump-conntrack" => {
                let zone = args.first().map(String::as_str);
                self.dp
                    .dump_conntrack(zone, now)
                    .map(|lines| lines.iter().map(|l| format!("{l}\n")).collect())
            }
            "dpctl/flush-conntrack" => {
                let n = self.dp.flush_zones(&[arg(0).to_string()])?;
                self.persist_zones();
                Ok(format!("{n} entries flushed\n"))
            }
            "ct-zone-list" => Ok(self
                .dp
                .zones()
                .iter()
                .map(|(n, z)| format!("{n} {z}\n"))
                .collect()),
            "stopwatch/show" => self.dp.stopwatch().show(args.first().map(String::as_str)),
            "stopwatch/reset" => self
                .dp
                .stopwatch_mut()
                .reset(args.first().map(String::as_str))
                .map(|()| String::new()),
            "coverage/show" => {
                let c = self.dp.counters();
                Ok(format!(
                    "generation {}\nrx_port {}\nrx_tunnel {}\ntx_port {}\ntx_tunnel {}\ndropped {}\ncache_hits {}\ncache_misses {}\nconntrack_entries {}\npacket_in {}\ntx_port_full_dropped {}\ntx_tunnel_gso_sends {}\ntx_tunnel_gso_datagrams {}\n",
                    c.generation,
                    c.rx_port,
                    c.rx_tunnel,
                    c.tx_port,
                    c.tx_tunnel,
                    c.dropped,
                    c.cache_hits,
                    c.cache_misses,
                    c.conntrack_entries,
                    c.packet_in,
                    self.devices.tx_full_dropped,
                    self.tunnel_tx.gso_sends,
                    self.tunnel_tx.gso_datagrams
                ))
            }
            "datapath/inject" => {
                let port = arg(0);
                if !self.dp.ports().iter().any(|p| p.name == port) {
                    return Err(format!("no port \"{port}\""));
                }
                let frame = parse_hex(arg(1))?;
                self.dp.handle_port_frame(port, &frame, now);
                Ok(String::new())
            }
            "datapath/migrations" => Ok(state::migrations_text(&self.dp.migration_stats())),
            "datapath/state-sessions" => Ok(self.state.sessions_text(&self.dp)),
            "datapath/capture" => {
                let port = arg(0);
                if !self.dp.ports().iter().any(|p| p.name == port) {
                    return Err(format!("no port \"{port}\""));
                }
                let frames = self.captured.remove(port).unwrap_or_default();
                Ok(frames.iter().map(|f| format!("{}\n", hex(f))).collect())
            }
            other => shell::vlog_command(other, args)
                .unwrap_or_else(|| Err(format!("\"{other}\" is not implemented"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_hex_parse() {
        assert_eq!(
            parse_port("vm1,02:00:00:00:00:01").unwrap(),
            ("vm1".to_string(), Some([2, 0, 0, 0, 0, 1]))
        );
        assert_eq!(parse_port("vm1").unwrap(), ("vm1".to_string(), None));
        assert!(parse_port("vm1,zz").is_err());
        assert!(parse_port("vm1,02:00:00:00:00").is_err());
        assert!(parse_port("vm1,02:00:00:00:00:01:02").is_err());
        assert!(parse_port("vm1,+2:00:00:00:00:01").is_err());
        // One-digit groups, as OVS's eth_addr_from_string and the flow language take them.
        assert_eq!(
            parse_port("vm1,2:0:0:0:0:1").unwrap(),
            ("vm1".to_string(), Some([2, 0, 0, 0, 0, 1]))
        );
        assert!(parse_port(",02:00:00:00:00:01").is_err());
        assert_eq!(parse_hex("0a0B ff").unwrap(), vec![10, 11, 255]);
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
    }
}
