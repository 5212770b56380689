//! The chassis measured from the outside, for the `controller` suite: real ovn-controller on
//! its own Open_vSwitch database and `ovs-vswitchd --enable-dummy=override`, or the `holdfast
//! datapath` + `holdfast controller` daemons; the OVSDB poller both are timed with; the SB
//! reset between sides. It measures nothing by itself: [`measure_chassis`] does, for the suite.
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub(super) use hf_testkit::ovn::RealChassis;

use super::{ADDS, CHASSIS, Central, batch, finish_child, median, ms, new_port, sv};
use crate::Report;
use crate::suites::central::{Daemon, daemon_args, ok, vm_mb};

/// ovn-controller's figures.
pub(super) struct Theirs {
    /// Until `Chassis_Private.nb_cfg` is the current one.
    pub(super) cold_ms: f64,
    /// Until a local port is also `up`.
    pub(super) cold_up_ms: f64,
    pub(super) port_add_ms: f64,
    pub(super) port_add_up_ms: f64,
    /// Port delete, ACL on a port group, ports in one transaction.
    pub(super) changes: super::changes::Changes,
    /// The controller's peak RSS.
    pub(super) rss_mb: f64,
    /// The controller's and the datapath's (ovs-vswitchd's).
    pub(super) chassis_rss_mb: f64,
}

/// A synchronous OVSDB connection for polling (JSON-RPC `transact` with selects), so that
/// waiting costs a round trip instead of a process start.
pub(super) struct Poller {
    sock: std::os::unix::net::UnixStream,
    buf: Vec<u8>,
    id: u64,
}

impl Poller {
    pub(super) fn connect(path: &Path) -> anyhow::Result<Poller> {
        let sock = std::os::unix::net::UnixStream::connect(path)
            .with_context(|| format!("connecting to {}", path.display()))?;
        sock.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Poller {
            sock,
            buf: Vec::new(),
            id: 0,
        })
    }

    /// One `transact` on OVN_Southbound; the `result` array.
    pub(super) fn transact(
        &mut self,
        ops: Vec<serde_json::Value>,
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        self.id += 1;
        let mut params = vec![serde_json::json!("OVN_Southbound")];
        params.extend(ops);
        let req = serde_json::json!({"method": "transact", "params": params, "id": self.id});
        self.sock.write_all(req.to_string().as_bytes())?;
        loop {
            let mut it =
                serde_json::Deserializer::from_slice(&self.buf).into_iter::<serde_json::Value>();
            match it.next() {
                Some(Ok(v)) => {
                    let used = it.byte_offset();
                    self.buf.drain(..used);
                    if v["method"] == "echo" {
                        let reply = serde_json::json!({"result": v["params"], "id": v["id"]});
                        self.sock.write_all(reply.to_string().as_bytes())?;
                        continue;
                    }
                    if v["id"] != self.id {
                        continue;
                    }
                    if !v["error"].is_null() {
                        bail!("transact failed: {}", v["error"]);
                    }
                    return v["result"]
                        .as_array()
                        .cloned()
                        .context("transact: no result array");
                }
                Some(Err(e)) if !e.is_eof() => bail!("bad JSON from the SB server: {e}"),
                _ => {}
            }
            let mut chunk = [0u8; 65536];
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                bail!("the SB server closed the connection");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// What the SB server holds now about the chassis and `port`.
    pub(super) fn state(&mut self, port: &str) -> anyhow::Result<SbState> {
        let r = self.transact(vec![
            serde_json::json!({"op": "select", "table": "SB_Global", "where": [], "columns": ["nb_cfg"]}),
            serde_json::json!({"op": "select", "table": "Chassis_Private",
                "where": [["name", "==", CHASSIS]], "columns": ["nb_cfg"]}),
            serde_json::json!({"op": "select", "table": "Port_Binding",
                "where": [["logical_port", "==", port]], "columns": ["up"]}),
        ])?;
        let rows = |i: usize| r.get(i).and_then(|v| v["rows"].as_array().cloned());
        let port_row = rows(2).and_then(|r| r.first().cloned());
        Ok(SbState {
            sb_cfg: rows(0)
                .and_then(|r| r.first().and_then(|row| row["nb_cfg"].as_i64()))
                .unwrap_or(0),
            chassis_cfg: rows(1).and_then(|r| r.first().and_then(|row| row["nb_cfg"].as_i64())),
            exists: port_row.is_some(),
            // `up` is an optional boolean: `true`, or `["set", []]`.
            up: port_row.is_some_and(|row| row["up"] == serde_json::json!(true)),
        })
    }
}

/// One poll of the SB server.
#[derive(Debug, Clone, Copy)]
pub(super) struct SbState {
    /// `SB_Global.nb_cfg`.
    pub(super) sb_cfg: i64,
    /// The chassis's `Chassis_Private.nb_cfg`, once it registered.
    pub(super) chassis_cfg: Option<i64>,
    /// The polled port's `Port_Binding` exists.
    pub(super) exists: bool,
    /// ... and is `up`.
    pub(super) up: bool,
}

/// A chassis measured from the outside: started, given new ports, its memory read.
pub(super) trait Measured {
    /// Starts the controller (everything else is up already).
    fn start(&mut self) -> anyhow::Result<()>;
    /// Makes `name` a local port before its logical port exists.
    fn prepare_port(&mut self, name: &str) -> anyhow::Result<()>;
    /// [`Measured::prepare_port`] for several ports.
    fn prepare_ports(&mut self, names: &[String]) -> anyhow::Result<()> {
        names.iter().try_for_each(|n| self.prepare_port(n))
    }
    /// The controller's log tail, for timeouts.
    fn log_tail(&self) -> String;
    /// The controller's own report (ovn-controller's `stopwatch/show`, holdfast's program
    /// generation), when it has one.
    fn stopwatch(&self, reset: bool) -> Option<String>;
    /// Whether its datapath logs each program it installs.
    fn logs_installs(&self) -> bool {
        false
    }
    /// When the datapath reported each program installed (wall clock), if it says.
    fn installs(&self) -> Vec<std::time::SystemTime> {
        Vec::new()
    }
    /// Peak RSS (MB) of the controller and of the whole chassis (controller + datapath).
    fn rss_mb(&self) -> anyhow::Result<(f64, f64)>;
}

/// `VmHWM` of the process in `pidfile`, in MB.
pub(super) fn vm_hwm_mb(pidfile: &Path) -> anyhow::Result<f64> {
    vm_mb(pidfile, "VmHWM")
}

impl Measured for RealChassis {
    fn start(&mut self) -> anyhow::Result<()> {
        Ok(self.start_controller()?)
    }

    fn prepare_port(&mut self, name: &str) -> anyhow::Result<()> {
        self.vsctl(RealChassis::iface_cmd(name))?;
        Ok(())
    }

    fn prepare_ports(&mut self, names: &[String]) -> anyhow::Result<()> {
        self.vsctl(batch(names.iter().map(|n| RealChassis::iface_cmd(n))))?;
        Ok(())
    }

    fn log_tail(&self) -> String {
        let l = self.controller_log();
        l[l.floor_char_boundary(l.len().saturating_sub(3000))..].to_string()
    }

    fn stopwatch(&self, reset: bool) -> Option<String> {
        let s = self.appctl(&["stopwatch/show"]).ok()?;
        if reset {
            let _ = self.appctl(&["stopwatch/reset"]);
        }
        Some(format!("  stopwatch/show:\n{}", stopwatch_summary(&s)))
    }

    fn rss_mb(&self) -> anyhow::Result<(f64, f64)> {
        let c = vm_hwm_mb(&self.dir().join("ovn-controller.pid"))?;
        let v = vm_hwm_mb(&self.dir().join("ovs-vswitchd.pid"))?;
        Ok((c, c + v))
    }
}

/// The holdfast chassis as daemons: `holdfast datapath` with in-memory ports, then `holdfast
/// controller` on the SB and the datapath's control socket.
pub(super) struct HfChassis {
    bin: PathBuf,
    dir: PathBuf,
    sb: String,
    daemons: Vec<Daemon>,
}

impl Drop for HfChassis {
    fn drop(&mut self) {
        while let Some(d) = self.daemons.pop() {
            drop(d);
        }
    }
}

impl HfChassis {
    /// Starts the datapath with `ports` (and the ports the suite will add) as in-memory ports.
    pub(super) fn prepare(
        bin: &Path,
        dir: &Path,
        sb: &str,
        ports: &[String],
    ) -> anyhow::Result<HfChassis> {
        let dir = dir.join("holdfast-chassis");
        std::fs::create_dir_all(&dir)?;
        let mut c = HfChassis {
            bin: bin.to_path_buf(),
            dir: dir.clone(),
            sb: sb.to_string(),
            daemons: Vec::new(),
        };
        ok(Command::new(bin)
            .arg("datapath")
            .args(daemon_args(&dir, "holdfast-datapath"))
            .arg(format!("--chassis={CHASSIS}"))
            .arg("--encap-ip=127.0.0.2")
            .arg("--geneve-port=0")
            .arg(format!("--control=punix:{}", dir.join("dp.sock").display()))
            .arg(format!("--zones-file={}", dir.join("zones.json").display()))
            .args(ports.iter().map(|p| format!("--port={p}")))
            // Info: its "program N installed" lines time the install (see `installs`).
            .env("HOLDFAST_LOG", "info"))
        .context("starting holdfast datapath")?;
        c.daemons.push(Daemon::adopt(&dir, "holdfast-datapath"));
        Ok(c)
    }
}

impl Measured for HfChassis {
    fn start(&mut self) -> anyhow::Result<()> {
        ok(Command::new(&self.bin)
            .arg("controller")
            .args(daemon_args(&self.dir, "holdfast-controller"))
            .arg(format!("--ovnsb-db={}", self.sb))
            .arg(format!("--system-id={CHASSIS}"))
            .arg(format!("--hostname=host-{CHASSIS}"))
            .arg("--encap-ip=127.0.0.2")
            .arg(format!(
                "--datapath=unix:{}",
                self.dir.join("dp.sock").display()
            ))
            .env("HOLDFAST_LOG", "warn"))
        .context("starting holdfast controller")?;
        self.daemons
            .push(Daemon::adopt(&self.dir, "holdfast-controller"));
        Ok(())
    }

    fn logs_installs(&self) -> bool {
        true
    }

    fn installs(&self) -> Vec<std::time::SystemTime> {
        let log =
            std::fs::read_to_string(self.dir.join("holdfast-datapath.log")).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("|INFO|program ") && l.contains(" installed: "))
            .filter_map(|l| log_time(l.split('|').next()?))
            .collect()
    }

    fn prepare_port(&mut self, _name: &str) -> anyhow::Result<()> {
        // Declared when the datapath started (it has no runtime port-add command).
        Ok(())
    }

    fn log_tail(&self) -> String {
        let l =
            std::fs::read_to_string(self.dir.join("holdfast-controller.log")).unwrap_or_default();
        l[l.len().saturating_sub(3000)..].to_string()
    }

    fn stopwatch(&self, reset: bool) -> Option<String> {
        // The daemons' own stage stopwatches (`stopwatch/show`: the controller's from the SB
        // change to nb_cfg committed, the datapath's decode/apply/parse/compile/swap), each
        // stage as "average (samples)", and which program generation runs.
        let mut out = Vec::new();
        for (who, ctl) in [
            ("controller", "holdfast-controller.ctl"),
            ("datapath", "holdfast-datapath.ctl"),
        ] {
            let path = self.dir.join(ctl);
            let s = crate::suites::trace::unixctl(&path, "stopwatch/show", &[]).ok()?;
            out.push(format!("  {who}: {}", hf_stopwatch_summary(&s)));
            if reset {
                let _ = crate::suites::trace::unixctl(&path, "stopwatch/reset", &[]);
            }
        }
        let s = crate::suites::trace::unixctl(
            &self.dir.join("holdfast-controller.ctl"),
            "debug/status",
            &[],
        )
        .ok()?;
        out.extend(
            s.lines()
                .filter(|l| l.starts_with("Program:") || l.starts_with("Reported nb_cfg"))
                .map(|l| format!("  {l}")),
        );
        Some(out.join("\n"))
    }

    fn rss_mb(&self) -> anyhow::Result<(f64, f64)> {
        let c = vm_hwm_mb(&self.dir.join("holdfast-controller.pid"))?;
        let d = vm_hwm_mb(&self.dir.join("holdfast-datapath.pid"))?;
        Ok((c, c + d))
    }
}

/// `stopwatch/show`'s text as one line: `stage avg ms (samples), ...` (stages without
/// samples left out).
pub(super) fn hf_stopwatch_summary(show: &str) -> String {
    let mut parts = Vec::new();
    let mut name = "";
    let mut samples = "";
    let mut min = f64::NAN;
    let msec = |v: &str| {
        v.trim_end_matches(" msec")
            .parse::<f64>()
            .unwrap_or(f64::NAN)
    };
    for l in show.lines() {
        if let Some(n) = l.strip_prefix("Statistics for '") {
            name = n.trim_end_matches('\'');
        } else if let Some(n) = l.trim().strip_prefix("Total samples: ") {
            samples = n;
        } else if let Some(m) = l.trim().strip_prefix("Minimum: ") {
            min = msec(m);
        } else if let Some(a) = l.trim().strip_prefix("Long term average: ") {
            parts.push(format!("{name} {:.1}/{min:.1} ms ({samples})", msec(a)));
        }
    }
    format!("stage average/minimum (samples): {}", parts.join(", "))
}

/// A log line's `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC) as a wall-clock time.
pub(super) fn log_time(stamp: &str) -> Option<std::time::SystemTime> {
    let s = stamp.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|v| v.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, millis) = time.split_once('.')?;
    let mut t = hms.splitn(3, ':').map(|v| v.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let millis: i64 = millis.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total = ((days * 24 + hh) * 60 + mm) * 60 + ss;
    let ms = u64::try_from(total * 1000 + millis).ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_millis(ms))
}

/// Cold start and port adds of a chassis measured from the SB server (see the module doc).
/// `side` numbers the added ports (see [`new_port`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn measure_chassis(
    report: &Report,
    central: &Central,
    ch: &mut dyn Measured,
    label: &str,
    probe: &str,
    side: u8,
    size: (usize, usize),
    timeout: Duration,
) -> anyhow::Result<Theirs> {
    let mut poll = Poller::connect(&central.sb_sock())?;
    let target = poll.state(probe)?.sb_cfg;
    if target <= 0 {
        bail!("SB_Global.nb_cfg is {target}: the earlier --wait=sb did not bump it");
    }
    // Give the datapath a moment to create its ports (not part of the measure).
    std::thread::sleep(Duration::from_millis(500));

    // Cold start: until the chassis reports the current nb_cfg (its flows for that SB are
    // installed), and until a local port is also `up` (its claim committed).
    let t0 = Instant::now();
    let wall0 = std::time::SystemTime::now();
    ch.start()?;
    let deadline = t0 + timeout;
    let mut cfg_at = None;
    let up_at = loop {
        let st = poll.state(probe)?;
        let now = Instant::now();
        let cfg = st.chassis_cfg.is_some_and(|c| c >= target);
        if cfg && cfg_at.is_none() {
            cfg_at = Some(now);
        }
        if cfg && st.up {
            break now;
        }
        if now > deadline {
            bail!(
                "{label}: timed out after {timeout:?} waiting for the cold start; log tail:\n{}",
                ch.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let cold_ms = ms(cfg_at.unwrap_or(up_at) - t0);
    let cold_up_ms = ms(up_at - t0);
    report.note(&format!(
        "{label} cold start: nb_cfg {target} in {cold_ms:.0} ms, {probe} up in {cold_up_ms:.0} ms"
    ));
    // The datapath may write its log line a moment after answering.
    let mut installs = ch.installs();
    for _ in 0..20 {
        if !installs.is_empty() || !ch.logs_installs() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        installs = ch.installs();
    }
    if let Some(first) = installs.first() {
        let inst = ms(first.duration_since(wall0).unwrap_or_default());
        report.note(&format!(
            "{label} cold start: first program installed after {inst:.0} ms (the datapath's log), nb_cfg reported {:.0} ms later",
            cold_ms - inst
        ));
    }
    if let Some(s) = ch.stopwatch(true) {
        report.note(&format!("{label} after the cold start:\n{s}"));
    }

    // Port adds: from the SB server holding the port to the chassis reporting the new nb_cfg
    // (and to the port being up). The target nb_cfg is known once ovn-nbctl --wait=sb
    // returns, so the polls are kept and read afterwards.
    let mut adds = Vec::new();
    let mut adds_up = Vec::new();
    let mut walls = Vec::new();
    for k in 0..ADDS {
        let (name, cmds) = new_port(side, k);
        ch.prepare_port(&name)?;
        std::thread::sleep(Duration::from_millis(300));
        let mut child = central.nbctl_child(Some("sb"), &cmds)?;
        let mut polls: Vec<(Instant, SbState)> = Vec::new();
        let mut target = None;
        let deadline = Instant::now() + timeout;
        loop {
            let st = poll.state(&name)?;
            let now = Instant::now();
            polls.push((now, st));
            // Once ovn-nbctl --wait=sb returned, SB_Global.nb_cfg is the new one.
            if target.is_none() && child.try_wait()?.is_some() {
                target = Some(poll.state(&name)?.sb_cfg);
            }
            if let Some(tg) = target
                && st.up
                && st.chassis_cfg.is_some_and(|c| c >= tg)
            {
                break;
            }
            if now > deadline {
                let _ = child.kill();
                bail!(
                    "{label}: timed out after {timeout:?} waiting for {name} up; log tail:\n{}",
                    ch.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        finish_child(child, &name)?;
        let tg = target.context("target")?;
        let first =
            |f: &dyn Fn(&SbState) -> bool| polls.iter().find(|(_, s)| f(s)).map(|(t, _)| *t);
        let at_server = first(&|s| s.exists).context("the port never appeared")?;
        let cfg_at = first(&|s| s.exists && s.chassis_cfg.is_some_and(|c| c >= tg))
            .context("nb_cfg never reached")?;
        let up_at =
            first(&|s| s.up && s.chassis_cfg.is_some_and(|c| c >= tg)).context("never up")?;
        adds.push(ms(cfg_at.saturating_duration_since(at_server)));
        adds_up.push(ms(up_at.saturating_duration_since(at_server)));
        // The same instant on the wall clock, for the datapath's log.
        walls.push((
            std::time::SystemTime::now() - at_server.elapsed(),
            ms(cfg_at.saturating_duration_since(at_server)),
        ));
    }
    let mut installs = ch.installs();
    for _ in 0..20 {
        if !ch.logs_installs()
            || installs
                .last()
                .is_some_and(|l| walls.last().is_some_and(|(t, _)| l >= t))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        installs = ch.installs();
    }
    if !installs.is_empty() {
        let parts: Vec<String> = walls
            .iter()
            .map(|(t0, total)| match installs.iter().find(|i| *i >= t0) {
                Some(i) => {
                    let inst = ms(i.duration_since(*t0).unwrap_or_default());
                    format!(
                        "{inst:.0} ms to installed + {:.0} ms to nb_cfg",
                        total - inst
                    )
                }
                None => "no install logged".to_string(),
            })
            .collect();
        report.note(&format!(
            "{label} port adds, from the SB row (the datapath's log, ms resolution): {}",
            parts.join("; ")
        ));
    }
    if let Some(s) = ch.stopwatch(false) {
        report.note(&format!("{label} over the {ADDS} port adds:\n{s}"));
    }
    let changes =
        super::changes::measure(report, central, ch, &mut poll, label, side, size, timeout)?;
    let (rss_mb, chassis_rss_mb) = ch.rss_mb()?;
    Ok(Theirs {
        changes,
        cold_ms,
        cold_up_ms,
        port_add_ms: median(adds),
        port_add_up_ms: median(adds_up),
        rss_mb,
        chassis_rss_mb,
    })
}

/// Removes the measured chassis from SB after a side ran, so the next one starts from the
/// same SB: its ports' `up` back to false, its `Chassis_Private` and `Chassis` rows deleted
/// (the bindings' weak references to it go with them).
pub(super) fn reset_chassis(central: &Central) -> anyhow::Result<()> {
    let mut poll = Poller::connect(&central.sb_sock())?;
    let r = poll.transact(vec![serde_json::json!({"op": "select", "table": "Chassis",
        "where": [["name", "==", CHASSIS]], "columns": ["_uuid"]})])?;
    let uuids: Vec<String> = r
        .first()
        .and_then(|v| v["rows"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|row| row["_uuid"][1].as_str().map(str::to_string))
        .collect();
    let mut ops = Vec::new();
    for u in &uuids {
        ops.push(serde_json::json!({"op": "update", "table": "Port_Binding",
            "where": [["chassis", "==", ["uuid", u]]], "row": {"up": false}}));
    }
    ops.push(
        serde_json::json!({"op": "delete", "table": "Chassis_Private",
        "where": [["name", "==", CHASSIS]]}),
    );
    ops.push(serde_json::json!({"op": "delete", "table": "Chassis",
        "where": [["name", "==", CHASSIS]]}));
    let r = poll.transact(ops)?;
    if let Some(e) = r.iter().find(|v| !v["error"].is_null()) {
        bail!("resetting {CHASSIS} in SB: {e}");
    }
    central.nbctl(Some("sb"), &sv(&["sync"]))?;
    Ok(())
}

/// The `flow-generation` and `flow-installation` blocks of `stopwatch/show` (its other
/// stopwatches are small), one line each.
pub(super) fn stopwatch_summary(s: &str) -> String {
    let mut out = Vec::new();
    let mut cur: Option<(String, Vec<String>)> = None;
    for line in s.lines() {
        let l = line.trim();
        if let Some(name) = l
            .strip_prefix("Statistics for '")
            .and_then(|r| r.strip_suffix("'"))
        {
            if let Some(c) = cur.take() {
                out.push(c);
            }
            cur = Some((name.to_string(), Vec::new()));
        } else if let Some((_, v)) = cur.as_mut()
            && !l.is_empty()
            && (l.starts_with("Total samples")
                || l.starts_with("Maximum")
                || l.starts_with("Long term average"))
        {
            v.push(l.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out.extend(cur);
    out.into_iter()
        .filter(|(n, _)| n.starts_with("flow-"))
        .map(|(n, v)| format!("  {n}: {}", v.join("; ")))
        .collect::<Vec<_>>()
        .join("\n")
}
