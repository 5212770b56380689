//! `ovsdb`: holdfast's OVSDB server side by side with real `ovsdb-server` on the same machine,
//! workload and schema (holdfast's NB schema; both write their database file, neither fsyncs).
//!
//! Workloads (fixed in the result names):
//! - `txn_insert_1row_pipelined32`: single-row `Logical_Switch` inserts from one client, 32 in
//!   flight; transactions per second.
//! - `txn_insert_100rows_pipelined4`: transactions of 100 `Logical_Switch_Port` inserts, 4 in
//!   flight; transactions per second.
//! - `monitor_fanout_50clients`: 50 clients hold a `monitor_cond` on `Address_Set` (empty at the
//!   start); one client commits single-row inserts, 32 in flight; rate of updates delivered to
//!   all monitors (inserts × 50 / time until the last monitor has seen the last insert).
//!
//! Transports (the suffix of the result name):
//! - none: holdfast's server in this process (its own tokio runtime; transparent huge pages
//!   off, as `holdfast db` runs) over loopback TCP, against `ovsdb-server` over loopback TCP.
//! - `_unix_process`: both servers in their own process (the `holdfast` binary's `holdfast db`
//!   and `ovsdb-server`), over a unix socket. The `holdfast` binary is looked for in
//!   `$HOLDFAST_BIN`, then beside this benchmark binary (`cargo build --release --bin holdfast`).
//!   Without it the `_process` lines are skipped with a note, except with `CI=true`, where a
//!   missing holdfast binary, `ovsdb-server` or `ovs-pki` fails the suite.
//! - `_tls_process`: the two transaction workloads over `pssl:` on loopback TCP, both servers in
//!   their own process, certificates made by `ovs-pki` (RSA 2048), the client on rustls
//!   (TLS 1.3 as both servers negotiate it by default).
// A benchmark is an I/O shell: it reads the clock and spawns threads.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hf_ovsdb_net::framing::Framer;
use serde_json::{Value, json};

use hf_testkit::cmd::free_port;
use hf_testkit::ovn::{OvsdbServer, create_db};

use crate::report::Better;
use crate::{Opts, Report};

const NB_SCHEMA: &str = include_str!("../../../../schemas/ovn-nb.ovsschema");

/// How a client reaches a server.
#[derive(Clone)]
enum Addr {
    /// `IP:PORT`.
    Tcp(String),
    /// A unix socket.
    Unix(PathBuf),
    /// `IP:PORT` of a `pssl:` remote, and the client's TLS configuration.
    Tls(String, Arc<rustls::ClientConfig>),
}

/// A server under test, stopped on drop.
enum Target {
    /// holdfast's server in this process.
    Holdfast {
        addr: Addr,
        _rt: tokio::runtime::Runtime,
    },
    /// `holdfast db` in its own process.
    HoldfastProcess {
        unix: Addr,
        tls: Option<Addr>,
        child: Child,
    },
    /// `ovsdb-server` in its own process.
    Ovsdb {
        addr: Addr,
        unix: Addr,
        tls: Option<Addr>,
        _server: OvsdbServer,
    },
}

impl Drop for Target {
    fn drop(&mut self) {
        match self {
            Target::Ovsdb { .. } => {}
            Target::HoldfastProcess { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Target::Holdfast { .. } => {}
        }
    }
}

/// Certificates made by `ovs-pki` for a `pssl:` server and its client, both signed by the
/// same CA.
struct Pki {
    server: [PathBuf; 3],
    client: Arc<rustls::ClientConfig>,
}

fn make_pki(dir: &Path) -> anyhow::Result<Pki> {
    let pki = dir.join("pki");
    let run = |args: &[&str]| -> anyhow::Result<()> {
        let out = Command::new("ovs-pki")
            .arg(format!("--dir={}", pki.display()))
            .args(args)
            .current_dir(dir)
            .output()
            .context("running ovs-pki")?;
        if !out.status.success() {
            bail!(
                "ovs-pki {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    };
    run(&["init"])?;
    run(&["req+sign", "bench-server", "switch"])?;
    run(&["req+sign", "bench-client", "switch"])?;
    let ca = pki.join("switchca/cacert.pem");
    let client = hf_ovsdb_net::tls::TlsSettings::load(&hf_ovsdb_net::tls::TlsFiles {
        private_key: dir.join("bench-client-privkey.pem"),
        certificate: dir.join("bench-client-cert.pem"),
        ca_cert: ca.clone(),
        protocols: None,
        ciphers: None,
    })?
    .client_config()?;
    Ok(Pki {
        server: [
            dir.join("bench-server-privkey.pem"),
            dir.join("bench-server-cert.pem"),
            ca,
        ],
        client,
    })
}

/// Whether this runs in CI (`CI=true`, as CI services set it): a missing dependency of a
/// line (the holdfast binary, ovsdb-server, ovs-pki) is then an error, never a skipped line.
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The `holdfast` binary: `$HOLDFAST_BIN`, else beside this executable.
fn holdfast_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HOLDFAST_BIN") {
        return Some(PathBuf::from(p));
    }
    let p = std::env::current_exe().ok()?.parent()?.join("holdfast");
    p.exists().then_some(p)
}

/// `holdfast db` in its own process on a unix socket (and `pssl:` with `pki`).
fn start_holdfast_process(bin: &Path, dir: &Path, pki: Option<&Pki>) -> anyhow::Result<Target> {
    let file = dir.join("hfp-nb.db");
    hf_ovsdb_net::storage::create(&file, NB_SCHEMA)?;
    let sock = dir.join("hfp.sock");
    let mut cmd = Command::new(bin);
    cmd.arg("db")
        .arg("--remote")
        .arg(format!("punix:{}", sock.display()))
        .arg(format!("--log-file={}", dir.join("hfp.log").display()))
        .arg(format!("--unixctl={}", dir.join("hfp.ctl").display()));
    if let Some(p) = pki {
        cmd.args(["--remote", "pssl:0:127.0.0.1", "-p"])
            .arg(&p.server[0])
            .arg("-c")
            .arg(&p.server[1])
            .arg("-C")
            .arg(&p.server[2]);
    }
    let mut child = cmd
        .arg(&file)
        .env("HOLDFAST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let stdout = child.stdout.take().context("holdfast db stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let want = 1 + usize::from(pki.is_some());
    let mut addrs = Vec::new();
    while addrs.len() < want {
        match lines.next() {
            Some(Ok(l)) => {
                if let Some(a) = l.strip_prefix("listening on ") {
                    addrs.push(a.to_string());
                }
            }
            _ => {
                let st = child.wait();
                bail!("holdfast db exited before listening: {st:?}");
            }
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let tls = match pki {
        Some(p) => Some(Addr::Tls(
            addrs
                .iter()
                .find_map(|a| a.strip_prefix("ssl:"))
                .context("holdfast db printed no ssl: address")?
                .to_string(),
            p.client.clone(),
        )),
        None => None,
    };
    Ok(Target::HoldfastProcess {
        unix: Addr::Unix(sock),
        tls,
        child,
    })
}

fn start_holdfast(dir: &Path) -> anyhow::Result<Target> {
    let file = dir.join("hf-nb.db");
    hf_ovsdb_net::storage::create(&file, NB_SCHEMA)?;
    let loaded = hf_ovsdb_net::storage::open(&file, 1, 1000)?;
    let mut core = hf_ovsdb_net::server::Core::new(hf_ovsdb_net::server::Config::default(), 7);
    core.add_database(loaded.db, Some(Box::new(loaded.storage)), loaded.history)
        .map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let server = rt.block_on(hf_ovsdb_net::serve::start(
        core,
        &["ptcp:0:127.0.0.1".parse().map_err(anyhow::Error::msg)?],
        hf_ovsdb_net::serve::ServeOptions::default(),
    ))?;
    let addr = server.local_addrs()[0]
        .trim_start_matches("tcp:")
        .to_string();
    // Keep the server alive as long as the runtime.
    rt.spawn(async move {
        let _keep = server;
        std::future::pending::<()>().await;
    });
    Ok(Target::Holdfast {
        addr: Addr::Tcp(addr),
        _rt: rt,
    })
}

fn start_ovsdb_server(dir: &Path, pki: Option<&Pki>) -> anyhow::Result<Target> {
    let schema = dir.join("nb.ovsschema");
    std::fs::write(&schema, NB_SCHEMA)?;
    let db = dir.join("ovs-nb.db");
    create_db(&db, &schema)?;
    // Pick a free port, then hand it to ovsdb-server.
    let port = free_port()?;
    let mut args = vec![format!("--remote=ptcp:{port}:127.0.0.1")];
    let mut tls_port = None;
    if let Some(p) = pki {
        let tp = free_port()?;
        args.push(format!("--remote=pssl:{tp}:127.0.0.1"));
        args.push(format!("--private-key={}", p.server[0].display()));
        args.push(format!("--certificate={}", p.server[1].display()));
        args.push(format!("--ca-cert={}", p.server[2].display()));
        tls_port = Some(tp);
    }
    let server = OvsdbServer::serve(dir, "ovs", &[db], &args)?;
    let sock = server.sock.clone();
    let addr = format!("127.0.0.1:{port}");
    let t = Target::Ovsdb {
        addr: Addr::Tcp(addr.clone()),
        unix: Addr::Unix(sock),
        tls: tls_port
            .zip(pki)
            .map(|(tp, p)| Addr::Tls(format!("127.0.0.1:{tp}"), p.client.clone())),
        _server: server,
    };
    for _ in 0..100 {
        if TcpStream::connect(&addr).is_ok() {
            return Ok(t);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("ovsdb-server did not start listening on {addr}")
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// A blocking JSON-RPC connection.
struct Conn {
    s: Box<dyn Stream>,
    framer: Framer,
    buf: Vec<u8>,
}

fn tcp(addr: &str) -> anyhow::Result<TcpStream> {
    let s = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(s)
}

/// A TLS connection to `a` with its handshake done.
fn tls(
    a: &str,
    cfg: &Arc<rustls::ClientConfig>,
) -> anyhow::Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let ip: std::net::IpAddr = a
        .rsplit_once(':')
        .map_or(a, |(h, _)| h)
        .parse()
        .with_context(|| format!("{a}: not IP:PORT"))?;
    let c = rustls::ClientConnection::new(cfg.clone(), ip.into())?;
    let mut s = rustls::StreamOwned::new(c, tcp(a)?);
    // Finish the handshake now, so that it is not part of the first request.
    while s.conn.is_handshaking() {
        s.conn
            .complete_io(&mut s.sock)
            .with_context(|| format!("TLS handshake with {a}"))?;
    }
    Ok(s)
}

/// What a TLS connection to `addr` negotiates (for the notes).
fn tls_info(addr: &Addr) -> String {
    let Addr::Tls(a, cfg) = addr else {
        return String::new();
    };
    match tls(a, cfg) {
        Ok(s) => format!(
            "{:?}, {:?}",
            s.conn.protocol_version(),
            s.conn.negotiated_cipher_suite().map(|c| c.suite())
        ),
        Err(e) => format!("{e:#}"),
    }
}

impl Conn {
    fn new(addr: &Addr) -> anyhow::Result<Self> {
        let s: Box<dyn Stream> = match addr {
            Addr::Tcp(a) => Box::new(tcp(a)?),
            Addr::Unix(p) => {
                let s =
                    UnixStream::connect(p).with_context(|| format!("connect {}", p.display()))?;
                s.set_read_timeout(Some(Duration::from_secs(60)))?;
                Box::new(s)
            }
            Addr::Tls(a, cfg) => Box::new(tls(a, cfg)?),
        };
        Ok(Conn {
            s,
            framer: Framer::new(1 << 30),
            buf: vec![0; 1 << 16],
        })
    }

    fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        self.s.write_all(v.to_string().as_bytes())?;
        Ok(())
    }

    fn recv(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Some(m) = self.framer.next_message() {
                return m.map_err(|e| anyhow::anyhow!("{e}"));
            }
            let n = self.s.read(&mut self.buf)?;
            if n == 0 {
                bail!("server closed the connection");
            }
            self.framer.push(&self.buf[..n]);
        }
    }

    /// Read until the reply with `id`, answering echo probes.
    fn reply(&mut self, id: &Value) -> anyhow::Result<Value> {
        loop {
            let m = self.recv()?;
            if m.get("method").and_then(Value::as_str) == Some("echo") {
                self.send(&json!({"id": m["id"], "result": m["params"], "error": null}))?;
                continue;
            }
            if &m["id"] == id {
                if !m["error"].is_null() {
                    bail!("error reply: {}", m["error"]);
                }
                return Ok(m["result"].clone());
            }
        }
    }
}

/// Run `n` transactions built by `op(i)`, `window` in flight; returns the elapsed time.
fn pipelined(
    addr: &Addr,
    n: usize,
    window: usize,
    op: impl Fn(usize) -> Value,
) -> anyhow::Result<Duration> {
    let mut c = Conn::new(addr)?;
    let start = Instant::now();
    let mut sent = 0;
    let mut done = 0;
    while done < n {
        while sent < n && sent - done < window {
            c.send(&json!({"method": "transact", "params": op(sent), "id": sent}))?;
            sent += 1;
        }
        let r = c.reply(&json!(done))?;
        if r.as_array()
            .is_some_and(|a| a.iter().any(|x| x.get("error").is_some()))
        {
            bail!("transaction {done} failed: {r}");
        }
        done += 1;
    }
    Ok(start.elapsed())
}

fn single_insert(tag: &'static str, run: usize) -> impl Fn(usize) -> Value {
    move |i| {
        json!(["OVN_Northbound", {"op": "insert", "table": "Logical_Switch", "row": {
            "name": format!("{tag}-r{run}-sw{i}"), "external_ids": ["map", [["owner", "bench"], ["i", i.to_string()]]]}}])
    }
}

fn batch_insert(tag: &str, i: usize) -> Value {
    let mut ops = vec![json!("OVN_Northbound")];
    let mut ports = Vec::with_capacity(100);
    for j in 0..100 {
        let name = format!("{tag}-b{i}-p{j}");
        ops.push(json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": format!("p{j}"), "row": {
            "name": name, "addresses": format!("0a:00:00:{:02x}:{:02x}:{:02x} 10.{}.{}.{}", (i >> 8) & 255, i & 255, j, (i >> 8) & 255, i & 255, j)}}));
        ports.push(json!(["named-uuid", format!("p{j}")]));
    }
    ops.push(json!({"op": "insert", "table": "Logical_Switch", "row": {"name": format!("{tag}-b{i}"), "ports": ["set", ports]}}));
    Value::Array(ops)
}

/// `clients` monitors, one writer; returns elapsed time until every monitor saw every insert.
/// The monitored table (`Address_Set`) is empty before, so the measure is the fan-out itself.
fn fanout(
    addr: &Addr,
    tag: &str,
    clients: usize,
    inserts: usize,
    run: usize,
) -> anyhow::Result<Duration> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut handles = Vec::new();
    for k in 0..clients {
        let (addr, ready) = (addr.clone(), ready_tx.clone());
        handles.push(std::thread::spawn(move || -> anyhow::Result<Instant> {
            let mut c = Conn::new(&addr)?;
            let req = json!({"method": "monitor_cond", "params": ["OVN_Northbound", format!("m{k}"),
                {"Address_Set": [{"columns": ["name", "addresses"]}]}], "id": "mon"});
            c.send(&req)?;
            c.reply(&json!("mon"))?;
            let _ = ready.send(());
            let mut seen = 0;
            while seen < inserts {
                let m = c.recv()?;
                match m.get("method").and_then(Value::as_str) {
                    Some("update2") => {
                        seen += m["params"][1]["Address_Set"]
                            .as_object()
                            .map_or(0, |o| o.len())
                    }
                    Some("echo") => {
                        c.send(&json!({"id": m["id"], "result": m["params"], "error": null}))?
                    }
                    _ => {}
                }
            }
            Ok(Instant::now())
        }));
    }
    drop(ready_tx);
    for _ in 0..clients {
        ready_rx.recv().context("a monitor failed to start")?;
    }
    let start = Instant::now();
    pipelined(addr, inserts, 32, |i| {
        json!(["OVN_Northbound", {"op": "insert", "table": "Address_Set", "row": {
            "name": format!("{tag}-as{run}-{i}"), "addresses": ["set", [format!("10.1.{}.{}", i / 250, i % 250), "10.2.0.1"]]}}])
    })?;
    let mut last = start;
    for h in handles {
        let t = h
            .join()
            .map_err(|_| anyhow::anyhow!("monitor thread panicked"))??;
        last = last.max(t);
    }
    Ok(last - start)
}

struct Figures {
    single_tps: f64,
    batch_tps: f64,
    /// None where the fan-out is not measured (TLS).
    fanout_ups: Option<f64>,
}

/// The workloads against every target (`(tag, address)`: `tag` names the server and transport
/// and keeps row names apart when one server is measured over several transports). Each
/// workload's figure is the best of `runs` (the machine may be shared: the least disturbed run
/// is the closest to the server's real capacity), and the targets take turns run by run, so a
/// burst of load from other processes hits them alike. Each run uses fresh row names, so every
/// run does the same work.
fn measure(
    targets: &[(&'static str, &Addr)],
    with_fanout: bool,
    opts: &Opts,
    report: &Report,
) -> anyhow::Result<Vec<Figures>> {
    let (n1, nb, nf, clients, runs) = if opts.tiny {
        (200, 5, 20, 5, 1)
    } else {
        (20_000, 200, 2_000, 50, 3)
    };
    for (tag, addr) in targets {
        if matches!(addr, Addr::Tls(..)) {
            report.note(&format!("{tag}: TLS negotiated: {}", tls_info(addr)));
        }
    }
    let best = |what: &str,
                f: &dyn Fn(&'static str, &Addr, usize) -> anyhow::Result<Duration>|
     -> anyhow::Result<Vec<Duration>> {
        let mut best = vec![Duration::MAX; targets.len()];
        for r in 0..runs {
            for (k, (tag, addr)) in targets.iter().enumerate() {
                let d = f(tag, addr, r).with_context(|| format!("{tag}: {what}"))?;
                best[k] = best[k].min(d);
            }
        }
        for ((tag, _), d) in targets.iter().zip(&best) {
            report.note(&format!("{tag}: {what} in {d:?} (best of {runs})"));
        }
        Ok(best)
    };
    let d1 = best(&format!("{n1} single-row inserts"), &|tag, addr, r| {
        pipelined(addr, n1, 32, single_insert(tag, r))
    })?;
    let d2 = best(&format!("{nb} 100-row transactions"), &|tag, addr, r| {
        pipelined(addr, nb, 4, move |i| batch_insert(tag, r * nb + i))
    })?;
    let d3 = if with_fanout {
        Some(best(
            &format!("{nf} inserts to {clients} monitors"),
            &|tag, addr, r| fanout(addr, tag, clients, nf, r),
        )?)
    } else {
        None
    };
    Ok((0..targets.len())
        .map(|k| Figures {
            single_tps: n1 as f64 / d1[k].as_secs_f64(),
            batch_tps: nb as f64 / d2[k].as_secs_f64(),
            fanout_ups: d3
                .as_ref()
                .map(|d| (nf * clients) as f64 / d[k].as_secs_f64()),
        })
        .collect())
}

/// One result line per workload: holdfast's figure, with ovsdb-server's beside it when there
/// is one.
fn lines(report: &mut Report, suffix: &str, hf: &Figures, ovs: Option<&Figures>) {
    let rows = [
        (
            "txn_insert_1row_pipelined32",
            Some(hf.single_tps),
            ovs.map(|o| o.single_tps),
            "txn/s",
        ),
        (
            "txn_insert_100rows_pipelined4",
            Some(hf.batch_tps),
            ovs.map(|o| o.batch_tps),
            "txn/s",
        ),
        (
            "monitor_fanout_50clients",
            hf.fanout_ups,
            ovs.and_then(|o| o.fanout_ups),
            "updates/s",
        ),
    ];
    for (name, ours, theirs, unit) in rows {
        let Some(ours) = ours else { continue };
        let name = format!("{name}{suffix}");
        match theirs {
            Some(b) => report.compare(&name, ours, unit, Better::Higher, "ovsdb-server", b),
            None => report.result(&name, ours, unit),
        }
    }
}

fn addrs(t: &Target) -> (Option<&Addr>, Option<&Addr>, Option<&Addr>) {
    match t {
        Target::Holdfast { addr, .. } => (Some(addr), None, None),
        Target::HoldfastProcess { unix, tls, .. } => (None, Some(unix), tls.as_ref()),
        Target::Ovsdb {
            addr, unix, tls, ..
        } => (Some(addr), Some(unix), tls.as_ref()),
    }
}

/// Transparent huge pages off for this process while the suite runs, as `holdfast db` turns
/// them off for itself (src/main.rs, `no_huge_pages`), so that the in-process server is the
/// server the binary runs. With them on, mimalloc's first touch of each 2 MB region zeroes a
/// whole huge page: the in-process 100-row transactions ran at 775 txn/s with them and 1,199
/// without, on the same machine in the same minute. Back on when the suite ends.
struct NoHugePages;

impl NoHugePages {
    fn on() -> NoHugePages {
        // Failing only leaves huge pages on (the figure is then lower, not wrong).
        let _ = nix::sys::prctl::set_thp_disable(true);
        NoHugePages
    }
}

impl Drop for NoHugePages {
    fn drop(&mut self) {
        let _ = nix::sys::prctl::set_thp_disable(false);
    }
}

/// Entry point.
pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let _thp = NoHugePages::on();
    let dir = tempfile::tempdir()?;
    let sub = |name: &str| -> anyhow::Result<PathBuf> {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    };
    let have_ovs = Command::new("ovsdb-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_ovs {
        if ci() {
            anyhow::bail!(
                "ovsdb-server not found (install openvswitch-common): with CI=true the baseline is required"
            );
        }
        report.note("ovsdb-server not found: printing holdfast's figures without a baseline (install openvswitch-common)");
    }

    // 1. holdfast's server in this process vs ovsdb-server, over loopback TCP.
    {
        let hf = start_holdfast(&sub("hf")?)?;
        let ovs = if have_ovs {
            Some(start_ovsdb_server(&sub("ovs-tcp")?, None)?)
        } else {
            None
        };
        let mut targets = vec![("hf", addrs(&hf).0.context("tcp")?)];
        if let Some(o) = &ovs {
            targets.push(("ovs", addrs(o).0.context("tcp")?));
        }
        let figs = measure(&targets, true, opts, report)?;
        lines(report, "", &figs[0], figs.get(1));
    }

    // 2. and 3. Both servers in their own process: unix socket, then TLS.
    let Some(bin) = holdfast_bin() else {
        if ci() {
            anyhow::bail!(
                "the holdfast binary was not found beside hf-bench ({}) nor in $HOLDFAST_BIN: with CI=true the _unix_process and _tls_process lines are required (run `cargo build --bin holdfast` first)",
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.parent().map(|d| d.display().to_string()))
                    .unwrap_or_default()
            );
        }
        report.note("the holdfast binary was not found beside hf-bench nor in $HOLDFAST_BIN: skipping the _unix_process and _tls_process lines (run `cargo build --release --bin holdfast` first)");
        return Ok(());
    };
    let pki = match make_pki(&sub("pki")?) {
        Ok(p) => Some(p),
        Err(e) if ci() => {
            anyhow::bail!(
                "cannot make certificates with ovs-pki: {e:#}; with CI=true the _tls_process lines are required"
            )
        }
        Err(e) => {
            report.note(&format!(
                "no TLS lines: cannot make certificates with ovs-pki: {e:#}"
            ));
            None
        }
    };
    let hfp = start_holdfast_process(&bin, &sub("hfp")?, pki.as_ref())?;
    let ovsp = if have_ovs {
        Some(start_ovsdb_server(&sub("ovs-proc")?, pki.as_ref())?)
    } else {
        None
    };
    let (_, hf_unix, hf_tls) = addrs(&hfp);
    let mut targets = vec![("hf-unix", hf_unix.context("unix")?)];
    if let Some(o) = &ovsp {
        targets.push(("ovs-unix", addrs(o).1.context("unix")?));
    }
    let figs = measure(&targets, true, opts, report)?;
    lines(report, "_unix_process", &figs[0], figs.get(1));
    if let Some(hf_tls) = hf_tls {
        let mut targets = vec![("hf-tls", hf_tls)];
        if let Some(a) = ovsp.as_ref().and_then(|t| addrs(t).2) {
            targets.push(("ovs-tls", a));
        }
        let figs = measure(&targets, false, opts, report)?;
        lines(report, "_tls_process", &figs[0], figs.get(1));
    }
    Ok(())
}
