//! One chassis of the world: a controller core ([`hf_controller::daemon::Controller`]) and a
//! datapath core ([`hf_datapath::Datapath`]) joined by the control protocol's bytes (an
//! in-memory pipe), the controller's SB session joined to the world's database.
//!
//! - [`Chassis::restart_controller`]: the controller is dropped (its SB session and its pipe
//!   end) and a new one starts; it must reconcile from the datapath's hello.
//! - The chassis's controller settings ([`ChassisTuning`]: the feature level it advertises
//!   and parses, and the naive "no last good versions" test hook) apply to every controller
//!   it starts from then on ([`Chassis::set_tuning`]): a rolling upgrade is a restart after
//!   a new level is set.
//! - [`Chassis::restart_datapath`]: a handoff: `export_state` (and the BFD sessions,
//!   `export_sessions`) → a new datapath (with the
//!   mirrored zone map) → `import_state`, the same local ports re-added, the controller
//!   reconnected to it.
//! - The world watches the pipe: every frame the controller sends is decoded (with
//!   [`hf_datapath::proto::Decoder`]) and programs and zone flushes are counted, so the record
//!   says what the controller asked for, not what it says it did.
//!
//! What it does not do: route frames (the world does: [`super::World`] moves what
//! [`Chassis::datapath_mut`]'s `poll_transmit` yields over links).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use hf_controller::daemon::{Controller, ControllerConfig, Level, Tuning};
use hf_datapath::proto::{Decoder, ToDatapath};
use hf_datapath::{Datapath, DatapathConfig};

use super::db::{Db, DbClient, DbLink, WALL_EPOCH_MS};

/// The controller's SB side as a [`DbClient`].
struct CtlSb<'a>(&'a mut Controller);

impl DbClient for CtlSb<'_> {
    fn poll_connect(&mut self) -> Option<usize> {
        self.0.poll_sb_connect()
    }
    fn handle_connected(&mut self, _remote: usize, now: Duration) {
        self.0.handle_sb_connected(now)
    }
    fn handle_bytes(&mut self, data: &[u8], now: Duration) {
        self.0.handle_sb_bytes(data, now)
    }
    fn handle_disconnected(&mut self, now: Duration) {
        self.0.handle_sb_disconnected(now)
    }
    fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.0.poll_sb_transmit()
    }
    fn poll_close(&mut self) -> bool {
        self.0.poll_sb_close().is_some()
    }
}

/// What a chassis's controllers are started with, beyond the world's fixed settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChassisTuning {
    /// The feature level advertised and parsed ([`Tuning::feature_level`]).
    pub feature_level: hf_expr::Level,
    /// [`Tuning::keep_last_good`] (false: a naive controller, incident B's control case).
    pub keep_last_good: bool,
}

impl Default for ChassisTuning {
    fn default() -> Self {
        ChassisTuning {
            feature_level: hf_controller::daemon::newest_level(),
            keep_last_good: true,
        }
    }
}

fn new_controller(name: &str, encap_ip: IpAddr, t: ChassisTuning, now: Duration) -> Controller {
    let tuning = Tuning {
        probe_interval_ms: None,
        wall_offset_ms: WALL_EPOCH_MS as i64,
        feature_level: t.feature_level,
        keep_last_good: t.keep_last_good,
        ..Tuning::default()
    };
    Controller::with_tuning(controller_cfg(name, encap_ip), tuning, now)
}

/// What the world saw on a chassis's control pipe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipeStats {
    /// Programs pushed by controllers, whole or as deltas.
    pub programs: u64,
    /// `FlushZones` requests, and the zone names they named.
    pub flushes: u64,
    /// Zone names named by flush requests.
    pub flushed_names: Vec<String>,
    /// Frames the world could not decode (a protocol bug).
    pub undecodable: u64,
}

/// A controller, a datapath and their pipe.
pub struct Chassis {
    name: String,
    encap_ip: IpAddr,
    controller: Option<Controller>,
    sb_link: DbLink,
    datapath: Datapath,
    /// The local ports (name, MAC) the world attached, re-added on a datapath handoff.
    ports: BTreeMap<String, Option<[u8; 6]>>,
    watch: Decoder<ToDatapath>,
    stats: PipeStats,
    /// Controller restarts and datapath handoffs.
    pub restarts: (u64, u64),
    tuning: ChassisTuning,
    log: Vec<String>,
}

impl std::fmt::Debug for Chassis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chassis")
            .field("name", &self.name)
            .field("encap_ip", &self.encap_ip)
            .finish()
    }
}

fn controller_cfg(name: &str, encap_ip: IpAddr) -> ControllerConfig {
    ControllerConfig {
        chassis: name.to_string(),
        hostname: name.to_string(),
        encap_type: "geneve".into(),
        encap_ip: encap_ip.to_string(),
        monitor_all: false,
    }
}

fn datapath_cfg(name: &str, encap_ip: IpAddr, zones: BTreeMap<String, u16>) -> DatapathConfig {
    let mut c = DatapathConfig::new(name, encap_ip);
    c.zones = zones;
    c
}

impl Chassis {
    /// A chassis whose controller connects on the next step.
    pub fn new(name: &str, encap_ip: IpAddr, now: Duration) -> Chassis {
        let mut datapath = Datapath::new(datapath_cfg(name, encap_ip, BTreeMap::new()));
        let mut controller = new_controller(name, encap_ip, ChassisTuning::default(), now);
        datapath.handle_control_connected(now);
        controller.handle_dp_connected(now);
        Chassis {
            name: name.to_string(),
            encap_ip,
            controller: Some(controller),
            sb_link: DbLink::new(),
            datapath,
            ports: BTreeMap::new(),
            watch: Decoder::new(),
            stats: PipeStats::default(),
            restarts: (0, 0),
            tuning: ChassisTuning::default(),
            log: Vec::new(),
        }
    }

    /// The settings the next controller starts with (the running one keeps its own).
    pub fn set_tuning(&mut self, t: ChassisTuning) {
        self.tuning = t;
    }

    /// The settings controllers start with.
    pub fn tuning(&self) -> ChassisTuning {
        self.tuning
    }

    /// The chassis name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its tunnel (encap) address.
    pub fn encap_ip(&self) -> IpAddr {
        self.encap_ip
    }

    /// The datapath.
    pub fn datapath(&self) -> &Datapath {
        &self.datapath
    }

    /// The datapath, for traffic.
    pub fn datapath_mut(&mut self) -> &mut Datapath {
        &mut self.datapath
    }

    /// The controller, while one runs.
    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    /// What the world saw on the control pipe.
    pub fn pipe_stats(&self) -> &PipeStats {
        &self.stats
    }

    /// Log lines since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// Attaches a local port (an in-memory interface named by its `iface-id`).
    pub fn add_port(&mut self, name: &str, mac: Option<[u8; 6]>) {
        self.ports.insert(name.to_string(), mac);
        self.datapath.add_port(name, mac);
    }

    /// Detaches a local port.
    pub fn remove_port(&mut self, name: &str) {
        self.ports.remove(name);
        self.datapath.remove_port(name);
    }

    /// The MAC a local port was attached with (`Some(None)`: attached without one).
    pub fn port_mac(&self, name: &str) -> Option<Option<[u8; 6]>> {
        self.ports.get(name).copied()
    }

    /// Whether a local port is attached.
    pub fn has_port(&self, name: &str) -> bool {
        self.ports.contains_key(name)
    }

    fn watch_frame(&mut self, b: &[u8]) {
        self.watch.push(b);
        loop {
            match self.watch.next_msg() {
                Ok(Some(ToDatapath::Program(_) | ToDatapath::ProgramDelta(_))) => {
                    self.stats.programs += 1
                }
                Ok(Some(ToDatapath::FlushZones { names })) => {
                    self.stats.flushes += 1;
                    self.stats.flushed_names.extend(names);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.stats.undecodable += 1;
                    self.log
                        .push(format!("{}: undecodable control frame: {e}", self.name));
                    self.watch = Decoder::new();
                    break;
                }
            }
        }
    }

    /// Moves control messages (SB and pipe) and runs the controller; true when something moved.
    pub fn step(&mut self, db: &mut Db, now: Duration) -> bool {
        let mut moved = false;
        let Some(ctl) = self.controller.as_mut() else {
            return false;
        };
        moved |= db.pump(&mut CtlSb(ctl), &mut self.sb_link, now);
        let mut to_dp = Vec::new();
        while let Some(b) = ctl.poll_dp_transmit() {
            to_dp.push(b);
        }
        for b in to_dp {
            moved = true;
            self.watch_frame(&b);
            self.datapath.handle_control_bytes(&b, now);
        }
        let ctl = self.controller.as_mut().expect("controller checked above");
        while let Some(b) = self.datapath.poll_control_transmit() {
            moved = true;
            ctl.handle_dp_bytes(&b, now);
        }
        while let Some((l, line)) = ctl.poll_log() {
            if l != Level::Debug {
                self.log
                    .push(format!("{}|controller|{l:?}|{line}", self.name));
            }
        }
        while let Some(line) = ctl.poll_acl_log() {
            self.log.push(format!("{}|acl_log|INFO|{line}", self.name));
        }
        while let Some((l, line)) = self.datapath.poll_log() {
            self.log
                .push(format!("{}|datapath|{l:?}|{line}", self.name));
        }
        moved |= db.pump(&mut CtlSb(ctl), &mut self.sb_link, now);
        moved
    }

    /// The earliest timer of the controller or the datapath.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let c = self.controller.as_ref().and_then(Controller::poll_timeout);
        [c, self.datapath.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Runs due timers.
    pub fn handle_timeout(&mut self, now: Duration) {
        if let Some(c) = self.controller.as_mut() {
            c.handle_timeout(now);
        }
        self.datapath.handle_timeout(now);
    }

    /// Stops the controller (the datapath sees its control connection end).
    pub fn stop_controller(&mut self, db: &mut Db, now: Duration) {
        if self.controller.take().is_some() {
            db.drop_link(&mut self.sb_link);
            self.datapath.handle_control_disconnected(now);
            self.watch = Decoder::new();
        }
    }

    /// Starts a controller (a no-op when one runs).
    pub fn start_controller(&mut self, now: Duration) {
        if self.controller.is_none() {
            let mut c = new_controller(&self.name, self.encap_ip, self.tuning, now);
            self.datapath.handle_control_connected(now);
            c.handle_dp_connected(now);
            self.controller = Some(c);
        }
    }

    /// Drops the controller and starts a new one.
    pub fn restart_controller(&mut self, db: &mut Db, now: Duration) {
        self.stop_controller(db, now);
        self.start_controller(now);
        self.restarts.0 += 1;
    }

    /// The datapath crashes: a new one starts with the zone map (its mirrored local storage)
    /// and the same local ports, and the controller reconnects to it.
    pub fn crash_datapath(&mut self, now: Duration) {
        let zones = self.datapath.zones().clone();
        let mut dp = Datapath::new(datapath_cfg(&self.name, self.encap_ip, zones));
        for (p, mac) in &self.ports {
            dp.add_port(p, *mac);
        }
        self.replace_datapath(dp, now);
    }

    fn replace_datapath(&mut self, dp: Datapath, now: Duration) {
        self.datapath.handle_control_disconnected(now);
        self.datapath = dp;
        self.watch = Decoder::new();
        if let Some(c) = self.controller.as_mut() {
            c.handle_dp_disconnected(now);
            self.datapath.handle_control_connected(now);
            c.handle_dp_connected(now);
        }
        self.restarts.1 += 1;
    }

    /// Hands the datapath's state to a new datapath process and reconnects the controller.
    pub fn restart_datapath(&mut self, now: Duration) -> Result<(), String> {
        let state = self.datapath.export_state(now);
        // The new process starts without the mirrored map: its zone map comes from the handoff
        // alone (what an upgrade with a lost or stale zones file must survive).
        let mut dp = Datapath::new(datapath_cfg(&self.name, self.encap_ip, BTreeMap::new()));
        dp.import_state(state, now)
            .map_err(|e| format!("{}: import_state: {e}", self.name))?;
        // The BFD sessions go on as they were (a version-10 takeover).
        dp.import_sessions(self.datapath.export_sessions(now), now);
        for (p, mac) in &self.ports {
            dp.add_port(p, *mac);
        }
        self.replace_datapath(dp, now);
        Ok(())
    }
}
