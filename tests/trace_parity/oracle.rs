//! The oracle side: real OVN builds each topology's southbound and real `ovn-trace` answers.
//!
//! [`Env`] starts the databases (real `ovsdb-server` for NB and SB, or one `holdfast db`
//! serving both) and real `ovn-northd` in a temporary directory, every daemon with
//! `--detach --pidfile --unixctl --log-file` and stopped by pid on drop (also when a test
//! fails). [`Env::build`] drives a [`Topology`] into NB with real `ovn-nbctl` (one process for
//! the whole batch), creates the chassis and binds the ports with real `ovn-sbctl`, and waits
//! for northd (`--wait=sb sync`). [`ovn_trace`] runs the real `ovn-trace` CLI once per packet
//! (the daemon mode cannot take `--ct`/`--lb-dst` per request: ovn-trace consumes them once
//! per process) with `--minimal` and parses its answer into a [`Verdict`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hf_testkit::ovn::{Daemon, NB_SCHEMA, OvsdbServer, SB_SCHEMA};

use crate::common::{HoldfastDb, holdfast, run, run_ok};
use crate::topo::{CHASSIS, CHASSIS_FEATURES, Packet, Topology};
use crate::verdict::Verdict;

/// Where the SB lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Real ovsdb-server, OVN's schemas.
    OvsdbServer,
    /// `holdfast db` serving NB and SB (holdfast's schemas), written by real ovn-northd.
    HoldfastDb,
}

/// A running NB + SB + northd.
pub struct Env {
    pub nb: String,
    pub sb: String,
    /// The daemons' directory (`nb.db`, `sb.db` for [`Backend::OvsdbServer`]).
    pub dir: PathBuf,
    /// Whether a northd runs (an environment without one is filled by the test).
    pub northd: bool,
    /// Real daemons, stopped last started first.
    daemons: Vec<Daemon>,
    _hfdb: Option<HoldfastDb>,
    /// Holds the daemons' files; removed on drop, after the daemons are stopped (last field).
    _dir: tempfile::TempDir,
}

impl Drop for Env {
    fn drop(&mut self) {
        while let Some(d) = self.daemons.pop() {
            drop(d);
        }
    }
}

impl Env {
    /// Start the databases and real ovn-northd.
    pub fn start(backend: Backend) -> Env {
        Env::start_with(backend, true)
    }

    /// Start the databases, and real ovn-northd when `northd`.
    pub fn start_with(backend: Backend, northd: bool) -> Env {
        let dir = tempfile::Builder::new()
            .prefix("hf-parity-")
            .tempdir()
            .expect("tempdir");
        let d = dir.path().to_path_buf();
        let mut daemons = Vec::new();
        let (nb, sb, hfdb) = match backend {
            Backend::OvsdbServer => {
                let mut remotes = Vec::new();
                for (x, schema) in [("nb", NB_SCHEMA), ("sb", SB_SCHEMA)] {
                    let server = OvsdbServer::create(&d, x, Path::new(schema)).unwrap();
                    remotes.push(server.remote);
                    daemons.push(server.daemon);
                }
                (remotes[0].clone(), remotes[1].clone(), None)
            }
            Backend::HoldfastDb => {
                let db = HoldfastDb::start(
                    &d,
                    &[
                        ("nb.db", &crate::common::nb_schema()),
                        ("sb.db", &crate::common::sb_schema()),
                    ],
                    &[],
                );
                (db.unix.clone(), db.unix.clone(), Some(db))
            }
        };
        if northd {
            let mut c = Command::new("ovn-northd");
            c.arg(format!("--ovnnb-db={nb}"))
                .arg(format!("--ovnsb-db={sb}"));
            daemons.push(Daemon::start(&d, "northd", c).unwrap());
        }
        let env = Env {
            nb,
            sb,
            dir: d,
            northd,
            daemons,
            _hfdb: hfdb,
            _dir: dir,
        };
        if !northd {
            run_ok(
                Command::new("ovn-sbctl")
                    .arg(format!("--db={}", env.sb))
                    .arg("init"),
            );
        }
        run_ok(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", env.nb))
                .arg("init"),
        );
        env
    }

    fn nbctl(&self) -> Command {
        let mut c = Command::new("ovn-nbctl");
        c.arg(format!("--db={}", self.nb)).arg("--timeout=30");
        c
    }

    fn sbctl(&self) -> Command {
        let mut c = Command::new("ovn-sbctl");
        c.arg(format!("--db={}", self.sb)).arg("--timeout=30");
        c
    }

    /// Build `t`: chassis, NB in one ovn-nbctl batch, northd's SB, port bindings. Without a
    /// northd, `fill_sb` writes the SB between the NB batch and the bindings.
    pub fn build(&self, t: &Topology) {
        self.build_with(t, |_| {});
    }

    /// [`Env::build`] with `fill_sb` run after the NB batch (and northd's sync, if any).
    pub fn build_with(&self, t: &Topology, fill_sb: impl FnOnce(&Env)) {
        let mut sb = self.sbctl();
        for (i, (name, ip)) in CHASSIS.iter().enumerate() {
            if i > 0 {
                sb.arg("--");
            }
            sb.args(["chassis-add", name, "geneve", ip]);
            sb.args(["--", "set", "chassis", name])
                .args(CHASSIS_FEATURES);
        }
        run_ok(&mut sb);
        let mut nb = self.nbctl();
        for (i, c) in t.nb.iter().enumerate() {
            if i > 0 {
                nb.arg("--");
            }
            nb.args(c);
        }
        let out = run(&mut nb, Duration::from_secs(60));
        assert!(
            out.status.success(),
            "seed {}: ovn-nbctl batch failed: {}",
            t.seed,
            String::from_utf8_lossy(&out.stderr)
        );
        if self.northd {
            run_ok(self.nbctl().args(["--wait=sb", "sync"]));
        }
        fill_sb(self);
        let mut sb = self.sbctl();
        for (i, (port, ch)) in t.bindings().iter().enumerate() {
            if i > 0 {
                sb.arg("--");
            }
            sb.args(["lsp-bind", port, ch]);
        }
        run_ok(&mut sb);
        // One more round trip so northd has seen the bindings (it writes `up` and may adjust).
        if self.northd {
            run_ok(self.nbctl().args(["--wait=sb", "sync"]));
        }
    }
}

/// Why real ovn-trace 23.03 has no answer for a packet (its own defects, from its source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoAnswer {
    /// It aborts on an assertion: an ND solicitation for a router address (`nd_na_router`
    /// trips `ovnact_get_ND_NA()`).
    Abort,
    /// It stops the walk at `ct_snat;` in a gateway router (`execute_ct_nat` returns before
    /// tracing the next table: "has no visible effect in a gateway router"), so everything
    /// inbound to a gateway router's NAT address looks dropped.
    GatewayRouterCtSnat,
}

/// Real ovn-trace's answer for one packet, from the `--minimal` output; `Ok(Err(why))` when
/// ovn-trace cannot answer (see [`NoAnswer`]).
pub fn ovn_trace(sb: &str, p: &Packet) -> Result<Result<Verdict, NoAnswer>, String> {
    let out = run(
        Command::new("ovn-trace")
            .arg(format!("--db={sb}"))
            .arg("--minimal")
            .args(p.options())
            .arg(&p.datapath)
            .arg(&p.microflow),
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains(": assertion ") {
        return Ok(Err(NoAnswer::Abort));
    }
    if !out.status.success() {
        return Err(format!(
            "ovn-trace failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            text
        ));
    }
    let v = Verdict::from_ovn_trace_minimal(&text);
    if v.drop {
        let detail = ovn_trace_detailed(sb, p);
        let last = detail.lines().rev().map(str::trim).find(|l| !l.is_empty());
        if last == Some("ct_snat;") {
            return Ok(Err(NoAnswer::GatewayRouterCtSnat));
        }
    }
    Ok(Ok(v))
}

/// The detailed ovn-trace output, for a disagreement report.
pub fn ovn_trace_detailed(sb: &str, p: &Packet) -> String {
    let out = run(
        Command::new("ovn-trace")
            .arg(format!("--db={sb}"))
            .args(p.options())
            .arg(&p.datapath)
            .arg(&p.microflow),
        Duration::from_secs(60),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `holdfast trace --format json` on the same SB and the same question.
pub fn holdfast_trace(sb: &str, p: &Packet) -> Result<Verdict, String> {
    let out = run(
        Command::new(holdfast())
            .arg("trace")
            .arg(format!("--db={sb}"))
            .arg("--format=json")
            .args(p.options())
            .arg(&p.datapath)
            .arg(&p.microflow)
            .env("HOLDFAST_LOG", "warn"),
        Duration::from_secs(60),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "holdfast trace failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            text
        ));
    }
    Verdict::from_holdfast_json(&text)
}

/// `holdfast trace --stdin` (the long-running mode): one process per topology answering one
/// JSON request per line; killed on drop.
pub struct HoldfastStdin {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl HoldfastStdin {
    pub fn start(sb: &str) -> HoldfastStdin {
        let mut child = Command::new(holdfast())
            .arg("trace")
            .arg(format!("--db={sb}"))
            .arg("--format=json")
            .arg("--stdin")
            .env("HOLDFAST_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn holdfast trace --stdin");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        HoldfastStdin { child, out }
    }

    /// The same question as [`holdfast_trace`], over the long-running mode.
    pub fn trace(&mut self, p: &Packet) -> Result<Verdict, String> {
        use std::io::{BufRead, Write};
        let mut req = serde_json::json!({
            "datapath": p.datapath,
            "microflow": p.microflow,
            "ct": p.ct,
            "format": "json",
        });
        if let Some(d) = &p.lb_dst {
            req["lb_dst"] = serde_json::Value::String(d.clone());
        }
        let stdin = self.child.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{req}").map_err(|e| format!("holdfast trace --stdin: {e}"))?;
        stdin
            .flush()
            .map_err(|e| format!("holdfast trace --stdin: {e}"))?;
        let mut line = String::new();
        match self.out.read_line(&mut line) {
            Ok(0) | Err(_) => return Err("holdfast trace --stdin exited".into()),
            Ok(_) => {}
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
            && let Some(e) = v.get("error")
        {
            return Err(format!("holdfast trace: {e}"));
        }
        Verdict::from_holdfast_json(&line)
    }
}

impl Drop for HoldfastStdin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
