//! The simulated world: the database (NB and SB in one in-memory OVSDB server), northd
//! (holdfast's core, or a static SB such as real ovn-northd's output), chassis (a controller
//! and a datapath core each, joined by the control protocol's bytes), hosts attached to
//! datapath ports over simulated links, Geneve between datapaths over simulated links, and the
//! scenario API. Everything runs on one virtual clock; the same seed gives the same record.
//!
//! # What it does
//!
//! - [`World::new`] builds it from a [`WorldConfig`]; [`World::nb`] applies one NB
//!   transaction (see [`nb`] for the builders); hosts attach themselves to every new VIF port
//!   with addresses (on the chassis its `requested-chassis` names, else round robin over the
//!   chassis by port name), taking DHCP when the port has `dhcpv4_options`.
//! - Time: [`World::run_for`], [`World::run_until`], [`World::advance_to`],
//!   [`World::next_deadline`], [`World::now`]. Between timers the world settles: it moves
//!   every message and frame that is due until nothing moves.
//! - Scenarios: [`World::ping`], [`World::udp`], [`World::tcp_transfer`],
//!   [`World::restart_controller`], [`World::restart_datapath`] (a handoff),
//!   [`World::crash_datapath`], [`World::restart_northd`], [`World::move_port`] (a re-plug),
//!   [`World::rebuild_databases`]; [`World::record`].
//! - Live migration ([`migrate`]): [`World::migrate`] (the CMS's NB steps and the
//!   hypervisor's), [`World::start_migration`] (the hypervisor's part alone),
//!   [`World::abort_migration`], [`World::migrations`]. The datapaths' state channel
//!   ([`state`]) travels inside the tunnel links between chassis.
//! - Provider networks ([`physnet`]): every chassis's `localnet` ports and the external hosts
//!   of [`World::add_net_host`] on one learning switch per `network_name`.
//! - Incident C's world, shared by tests, the benchmark and the sandbox: [`incident_c`];
//!   incident B's (a rolling upgrade under a stateful port-group ACL): [`incident_b`].
//! - The sandbox's access to the database: [`World::db_connect`], [`World::db_input`],
//!   [`World::db_poll_output`], [`World::db_disconnect`].
//!
//! # What it does not do
//!
//! No real sockets, threads or clocks. The control plane (OVSDB sessions, the controller ↔
//! datapath pipe) has no simulated latency: its messages move at once (the datapaths' state
//! channel does pay the links). External hosts are either ordinary VIF ports on a chassis
//! (marked with `external_ids:hf-sim-external=true`, on a 1 ms link) or hosts on a provider
//! network; provider networks have no VLANs.
//!
//! Submodules: [`db`] (the server and its sessions), [`northd`] (northd on virtual time),
//! [`nb`] (NB builders as OVSDB transactions), [`chassis`] (controller + datapath),
//! [`hosts`] (how a host is configured from its NB port).

pub mod chassis;
pub mod db;
pub mod hosts;
pub mod incident_a;
pub mod incident_b;
pub mod incident_c;
pub mod incident_d;
pub mod migrate;
pub mod nb;
pub mod northd;
pub mod physnet;
pub mod state;
pub mod streams;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_datapath::Transmit;
use serde::Serialize;
use serde_json::Value;

use crate::net::{Host, Link, LinkConfig, Record, Rng};
use chassis::Chassis;
use db::{Db, NB, SB};
pub use migrate::{MigrationPlan, MigrationRecord};
use northd::NorthdNode;
use physnet::{NetPort, PhysNet};
use state::{Carried, StateNet};

/// Who writes SB.
#[derive(Debug, Clone)]
pub enum NorthdMode {
    /// holdfast's northd core, in the world.
    Holdfast,
    /// No northd: SB is this OVSDB database file (e.g. real ovn-northd's SB, from
    /// `ovsdb-client backup`), loaded as is.
    Static(Vec<u8>),
}

/// How to build a world.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    /// Seeds every random choice (UUIDs, links, hosts' stacks).
    pub seed: u64,
    /// Chassis names; chassis `i` has the tunnel address [`encap_ip`]`(i)`.
    pub chassis: Vec<String>,
    /// Who writes SB.
    pub northd: NorthdMode,
}

/// The tunnel address of chassis number `i` (192.168.0.1, ...): what a real-northd driver
/// registers with `ovn-sbctl chassis-add`.
pub fn encap_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 168, (i / 250) as u8, (i % 250 + 1) as u8)
}

pub(crate) struct HostSlot {
    /// What NB asked for when the host was made (`None`: added with [`World::add_host`]).
    spec: Option<hosts::HostSpec>,
    /// On a provider network (an external host, [`World::add_net_host`]): `chassis` and the
    /// links are unused.
    net: Option<String>,
    /// The last frames the host sent (for [`World::trace_last`]).
    sent: std::collections::VecDeque<Vec<u8>>,
    host: Host,
    chassis: usize,
    up: Link,
    down: Link,
}

/// What the world records about a chassis.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChassisRecord {
    /// The datapath's program generation.
    pub generation: u64,
    /// The datapath's zone map.
    pub zones: BTreeMap<String, u16>,
    /// Programs the controllers pushed (decoded from the pipe).
    pub programs: u64,
    /// Zone flush requests (decoded from the pipe), and the names.
    pub flushes: u64,
    /// Zone names flushed.
    pub flushed: Vec<String>,
    /// Datapath counters.
    pub rx_port: u64,
    /// Frames from tunnels.
    pub rx_tunnel: u64,
    /// Frames to ports.
    pub tx_port: u64,
    /// Frames into tunnels.
    pub tx_tunnel: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Controller restarts, datapath handoffs.
    pub restarts: (u64, u64),
}

/// The whole record: the network's (hosts, links, events) and the chassis'.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorldRecord {
    /// Hosts, links and events.
    pub net: Record,
    /// Per chassis.
    pub chassis: BTreeMap<String, ChassisRecord>,
}

impl WorldRecord {
    /// Canonical JSON: the same seed gives the same bytes.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }
}

/// The simulated world.
pub struct World {
    seed: u64,
    rng: Rng,
    now: Duration,
    db: Db,
    static_sb: Option<Vec<u8>>,
    northd: Option<NorthdNode>,
    northd_seed: u64,
    chassis: Vec<Chassis>,
    tunnels: BTreeMap<(usize, usize), Link<Carried>>,
    hosts: BTreeMap<String, HostSlot>,
    /// Provider networks by name, and the `localnet` ports on them (port → network).
    physnets: BTreeMap<String, PhysNet>,
    localnets: BTreeMap<String, String>,
    /// The datapaths' state channel (live migration).
    state: StateNet,
    /// Whether the datapaths may open state sessions (a control case turns it off).
    state_channel: bool,
    /// Migrations the hypervisor runs, and those it finished.
    hv: Vec<migrate::HvMigration>,
    hv_done: Vec<MigrationRecord>,
    nb_seen: Option<String>,
    events: Vec<(u64, String)>,
    log: Vec<String>,
    /// Mirror collectors by address ([`World::add_collector`]): what reached each.
    collectors: BTreeMap<IpAddr, Vec<Collected>>,
    /// Chassis killed ([`World::kill_chassis`]): they run nothing, what reaches them is lost.
    dead: BTreeSet<usize>,
}

/// A frame a mirror collector received ([`World::collected`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// When.
    pub at: Duration,
    /// The chassis that sent it.
    pub chassis: String,
    /// The IP payload (protocol 47): GRE header, ERSPAN's for ERSPAN, the mirrored frame.
    pub payload: Vec<u8>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("chassis", &self.chassis)
            .field("hosts", &self.hosts.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Settling stops after this many rounds at one instant (a livelock is reported, not hung on).
const MAX_ROUNDS: usize = 20_000;

impl World {
    /// A world on `chassis` with holdfast northd: the incident worlds' start. Panics when it
    /// cannot be built (a broken build, not an input error).
    pub(crate) fn holdfast(seed: u64, chassis: &[&str]) -> World {
        World::new(WorldConfig {
            seed,
            chassis: chassis.iter().map(|c| c.to_string()).collect(),
            northd: NorthdMode::Holdfast,
        })
        .expect("world")
    }

    /// Builds the world at time zero and lets it settle (chassis registered, northd synced).
    pub fn new(cfg: WorldConfig) -> Result<World, String> {
        let now = Duration::ZERO;
        let (sb, static_sb) = match &cfg.northd {
            NorthdMode::Holdfast => (None, None),
            NorthdMode::Static(b) => (Some(db::load_database_file(b)?), Some(b.clone())),
        };
        let db = Db::new(cfg.seed, sb, now)?;
        let rng = Rng::new(cfg.seed);
        let northd_seed = rng.fork("northd").seed();
        let northd = static_sb
            .is_none()
            .then(|| NorthdNode::new(northd_seed, now));
        let names = cfg.chassis.clone();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(format!("WorldConfig: chassis {n:?} is named twice"));
            }
        }
        let chassis: Vec<Chassis> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Chassis::new(n, IpAddr::V4(encap_ip(i)), now))
            .collect();
        let mut tunnels = BTreeMap::new();
        for a in 0..chassis.len() {
            for b in 0..chassis.len() {
                if a != b {
                    let label = format!("tunnel {}->{}", chassis[a].name(), chassis[b].name());
                    tunnels.insert((a, b), Link::new(LinkConfig::cluster(), rng.fork(&label)));
                }
            }
        }
        let mut w = World {
            seed: cfg.seed,
            rng,
            now,
            db,
            static_sb,
            northd,
            northd_seed,
            chassis,
            tunnels,
            hosts: BTreeMap::new(),
            physnets: BTreeMap::new(),
            localnets: BTreeMap::new(),
            state: StateNet::default(),
            state_channel: true,
            hv: Vec::new(),
            hv_done: Vec::new(),
            nb_seen: None,
            events: Vec::new(),
            log: Vec::new(),
            collectors: BTreeMap::new(),
            dead: BTreeSet::new(),
        };
        w.settle();
        Ok(w)
    }

    /// Adds a mirror collector (a tap-as-a-service sink) at `ip` on the chassis' underlay:
    /// GRE/ERSPAN packets the datapaths send to it are kept, in order, for
    /// [`World::collected`]. They arrive at once (no link in between).
    pub fn add_collector(&mut self, ip: IpAddr) {
        self.collectors.entry(ip).or_default();
    }

    /// What the collector at `ip` received.
    pub fn collected(&self, ip: IpAddr) -> &[Collected] {
        self.collectors.get(&ip).map_or(&[], Vec::as_slice)
    }

    /// Virtual time now.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub(crate) fn event(&mut self, what: String) {
        self.events.push((self.now.as_micros() as u64, what));
    }

    /// Log lines of every component since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// Applies one NB transaction (see [`nb`]), then lets the world settle.
    pub fn nb(&mut self, txn: nb::Txn) -> Result<Value, String> {
        let r = self.db.transact(NB, txn, self.now)?;
        self.settle();
        Ok(r)
    }

    /// Applies several NB transactions in order.
    pub fn nb_all(&mut self, txns: Vec<nb::Txn>) -> Result<(), String> {
        for t in txns {
            self.nb(t)?;
        }
        Ok(())
    }

    /// One transaction on SB through the world's writer session.
    pub fn sb(&mut self, ops: Vec<Value>) -> Result<Value, String> {
        let r = self.db.transact(SB, ops, self.now)?;
        self.settle();
        Ok(r)
    }

    /// NB as it is now.
    pub fn nb_snapshot(&self) -> Result<hf_model::NbSnapshot, String> {
        let d = self.db.database(NB).ok_or("no NB database")?;
        hf_model::NbSnapshot::from_db(d).map_err(|e| format!("NB: {e}"))
    }

    /// SB as it is now.
    pub fn sb_snapshot(&self) -> Result<hf_model::SbSnapshot, String> {
        let d = self.db.database(SB).ok_or("no SB database")?;
        hf_model::SbSnapshot::from_db(d).map_err(|e| format!("SB: {e}"))
    }

    /// The chassis, in configuration order.
    pub fn chassis(&self) -> &[Chassis] {
        &self.chassis
    }

    pub(crate) fn chassis_index(&self, name: &str) -> Result<usize, String> {
        self.chassis
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| format!("no chassis named {name:?}"))
    }

    /// A chassis by name.
    pub fn chassis_by_name(&self, name: &str) -> Option<&Chassis> {
        self.chassis.iter().find(|c| c.name() == name)
    }

    /// A chassis's datapath, to change it behind the world's back (a test's synthetic
    /// conntrack state, say); the world settles on its next step.
    pub fn datapath_mut(&mut self, chassis: &str) -> Option<&mut hf_datapath::Datapath> {
        self.chassis
            .iter_mut()
            .find(|c| c.name() == chassis)
            .map(|c| c.datapath_mut())
    }

    /// The host attached to logical port `lsp`.
    pub fn host(&self, lsp: &str) -> Option<&Host> {
        self.hosts.get(lsp).map(|h| &h.host)
    }

    /// The host attached to logical port `lsp`, mutable.
    pub fn host_mut(&mut self, lsp: &str) -> Option<&mut Host> {
        self.hosts.get_mut(lsp).map(|h| &mut h.host)
    }

    /// The chassis a host is attached to (`None` for an external host on a provider network).
    pub fn host_chassis(&self, lsp: &str) -> Option<&str> {
        self.hosts
            .get(lsp)
            .filter(|h| h.net.is_none())
            .map(|h| self.chassis[h.chassis].name())
    }

    /// Puts an external host named `name` on provider network `net` (the network a
    /// `localnet` port's `network_name` names; created when new), 1 ms from the switch.
    pub fn add_net_host(
        &mut self,
        net: &str,
        name: &str,
        cfg: crate::net::HostConfig,
    ) -> Result<(), String> {
        if self.hosts.contains_key(name) {
            return Err(format!("add_net_host: a host named {name} exists"));
        }
        let host = Host::new(cfg, self.now).map_err(|e| format!("host {name}: {e:?}"))?;
        let rng = self.rng.fork(&format!("physnet {net}"));
        self.physnets
            .entry(net.to_string())
            .or_insert_with(|| PhysNet::new(net, rng))
            .attach(NetPort::Host(name.to_string()));
        let up = Link::new(LinkConfig::external(), self.rng.fork(&format!("{name} up")));
        let down = Link::new(
            LinkConfig::external(),
            self.rng.fork(&format!("{name} down")),
        );
        self.hosts.insert(
            name.to_string(),
            HostSlot {
                spec: None,
                net: Some(net.to_string()),
                sent: Default::default(),
                host,
                chassis: 0,
                up,
                down,
            },
        );
        self.event(format!("host {name} attached to provider network {net}"));
        self.settle();
        Ok(())
    }

    /// A provider network.
    pub fn physnet(&self, net: &str) -> Option<&PhysNet> {
        self.physnets.get(net)
    }

    /// Turns the datapaths' state channel off (a control case: a migration then moves no
    /// conntrack state) or on.
    pub fn set_state_channel(&mut self, on: bool) {
        self.state_channel = on;
    }

    /// The state channel's sessions and bytes.
    pub fn state_net(&self) -> &StateNet {
        &self.state
    }

    /// Attaches `host` to logical port `lsp` on `chassis` (replacing any host there).
    pub fn add_host(
        &mut self,
        chassis: &str,
        lsp: &str,
        host: Host,
        external: bool,
    ) -> Result<(), String> {
        let c = self.chassis_index(chassis)?;
        self.attach(c, lsp, host, external);
        self.settle();
        Ok(())
    }

    /// Builds a host from `cfg` and attaches it to `lsp` on `chassis` (see [`World::add_host`]).
    pub fn add_host_config(
        &mut self,
        chassis: &str,
        lsp: &str,
        cfg: crate::net::HostConfig,
        external: bool,
    ) -> Result<(), String> {
        let host = Host::new(cfg, self.now).map_err(|e| format!("host {lsp}: {e:?}"))?;
        self.add_host(chassis, lsp, host, external)
    }

    fn attach(&mut self, c: usize, lsp: &str, host: Host, external: bool) {
        let cfg = if external {
            LinkConfig::external()
        } else {
            LinkConfig::cluster()
        };
        let mac = Some(host.mac());
        let up = Link::new(cfg.clone(), self.rng.fork(&format!("{lsp} up")));
        let down = Link::new(cfg, self.rng.fork(&format!("{lsp} down")));
        // The same interface (chassis and MAC) stays plugged in: only the VM behind it changes.
        match self.hosts.remove(lsp) {
            Some(old) if old.chassis == c && self.chassis[c].port_mac(lsp) == Some(mac) => {}
            Some(old) => {
                self.chassis[old.chassis].remove_port(lsp);
                self.chassis[c].add_port(lsp, mac);
            }
            None => self.chassis[c].add_port(lsp, mac),
        }
        let what = format!("host {lsp} attached on {}", self.chassis[c].name());
        self.event(what);
        self.hosts.insert(
            lsp.to_string(),
            HostSlot {
                spec: None,
                net: None,
                sent: Default::default(),
                host,
                chassis: c,
                up,
                down,
            },
        );
    }

    /// Creates hosts for new VIF ports with addresses and removes those whose port is gone.
    fn auto_attach(&mut self) -> bool {
        let txn = self.db.core().last_txn_id(NB).map(|u| u.to_string());
        if txn == self.nb_seen {
            return false;
        }
        self.nb_seen = txn;
        let Ok(nb) = self.nb_snapshot() else {
            return false;
        };
        let wanted = hosts::wanted(&nb);
        let mut moved = false;
        moved |= self.sync_localnets(&nb);
        let gone: Vec<String> = self
            .hosts
            .iter()
            .filter(|(k, s)| s.net.is_none() && !wanted.contains_key(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for g in gone {
            if let Some(h) = self.hosts.remove(&g) {
                self.chassis[h.chassis].remove_port(&g);
                self.event(format!("host {g} detached (its port is gone)"));
                moved = true;
            }
        }
        let mut rr = self.hosts.len();
        for (lsp, spec) in wanted {
            match self.hosts.get_mut(&lsp) {
                // Made by add_host, or still what NB asks for.
                Some(h) if h.spec.as_ref().is_none_or(|s| *s == spec) => continue,
                // Only requested-chassis changed: the CMS follows (or starts) a live
                // migration; the hypervisor moves VMs, not NB.
                Some(h) if migrate::keeps_host(h, &spec) => {
                    h.spec = Some(spec);
                    continue;
                }
                // NB changed the port (addresses, DHCP, requested-chassis): a new host
                // (`attach` keeps the datapath port when chassis and MAC stay the same).
                Some(_) => self.event(format!("host {lsp} replaced (its port changed)")),
                None => {}
            }
            let c = match spec
                .requested_chassis
                .as_deref()
                .and_then(|n| self.chassis_index(n).ok())
            {
                Some(c) => c,
                None if self.chassis.is_empty() => continue,
                None => {
                    rr += 1;
                    (rr - 1) % self.chassis.len()
                }
            };
            match spec.build(&lsp, self.rng.fork(&format!("host {lsp}")), self.now) {
                Ok(host) => {
                    self.attach(c, &lsp, host, spec.external);
                    if let Some(h) = self.hosts.get_mut(&lsp) {
                        h.spec = Some(spec);
                    }
                    moved = true;
                }
                Err(e) => {
                    // Remembered as seen: the same NB does not retry (and log) on every round.
                    self.log.push(format!("world: no host for port {lsp}: {e}"));
                }
            }
        }
        moved
    }

    /// One round: every component runs once and every due message and frame moves.
    fn round(&mut self) -> bool {
        let now = self.now;
        let mut moved = false;
        if let Some(n) = self.northd.as_mut() {
            moved |= n.step(&mut self.db, now);
            self.log.extend(n.take_log());
        }
        for (i, c) in self.chassis.iter_mut().enumerate() {
            if self.dead.contains(&i) {
                continue;
            }
            c.datapath_mut().advance_clock(now);
            moved |= c.step(&mut self.db, now);
            self.log.extend(c.take_log());
        }
        moved |= self.auto_attach();
        moved |= self.step_migrations();
        // Hosts → their links up (or their provider network).
        for (name, s) in self.hosts.iter_mut() {
            while let Some(f) = s.host.poll_transmit() {
                moved = true;
                if s.sent.len() == 8 {
                    s.sent.pop_front();
                }
                s.sent.push_back(f.clone());
                match s.net.as_ref().and_then(|n| self.physnets.get_mut(n)) {
                    Some(p) => p.send(&NetPort::Host(name.clone()), f, now),
                    None => {
                        s.up.send(f, now);
                    }
                }
            }
        }
        // Links up → datapaths.
        for (lsp, s) in &mut self.hosts {
            while let Some(f) = s.up.poll_deliver(now) {
                moved = true;
                if self.dead.contains(&s.chassis) {
                    continue;
                }
                self.chassis[s.chassis]
                    .datapath_mut()
                    .handle_port_frame(lsp, &f, now);
            }
        }
        // Tunnels → datapaths (and state sessions).
        for ((a, b), l) in &mut self.tunnels {
            let src = self.chassis[*a].encap_ip();
            while let Some(p) = l.poll_deliver(now) {
                moved = true;
                if self.dead.contains(b) {
                    continue;
                }
                match p {
                    Carried::Geneve(p) => {
                        self.chassis[*b].datapath_mut().handle_tunnel(src, &p, now)
                    }
                    Carried::State(id, bytes) => {
                        self.state.deliver(&mut self.chassis, *b, id, &bytes, now)
                    }
                }
            }
        }
        // Provider networks → localnet ports and external hosts.
        let mut arrived = Vec::new();
        for p in self.physnets.values_mut() {
            moved |= p.step(now, &mut arrived);
        }
        for (to, f) in arrived {
            match to {
                NetPort::Chassis(i, port) => {
                    if self.dead.contains(&i) {
                        continue;
                    }
                    if let Some(c) = self.chassis.get_mut(i) {
                        c.datapath_mut().handle_port_frame(&port, &f, now);
                    }
                }
                NetPort::Host(h) => {
                    if let Some(s) = self.hosts.get_mut(&h) {
                        s.host.handle_frame(&f, now);
                    }
                }
            }
        }
        // State sessions: dials and bytes.
        if self.state_channel {
            let mut out = Vec::new();
            moved |= self.state.step(&mut self.chassis, now, &mut out);
            for (pair, item, len) in out {
                if let Some(l) = self.tunnels.get_mut(&pair) {
                    l.send_sized(item, len, now);
                }
            }
        } else {
            for c in &mut self.chassis {
                while let Some(d) = c.datapath_mut().poll_state_dial() {
                    c.datapath_mut().handle_state_dial_failed(
                        &d.chassis,
                        "the state channel is off in this world",
                        now,
                    );
                }
            }
        }
        // Datapaths → links down and tunnels.
        for i in 0..self.chassis.len() {
            if self.dead.contains(&i) {
                continue;
            }
            while let Some(t) = self.chassis[i].datapath_mut().poll_transmit() {
                moved = true;
                match t {
                    Transmit::Port { port, frame } => match self.hosts.get_mut(&port) {
                        _ if self.localnets.contains_key(&port) => {
                            let net = &self.localnets[&port];
                            if let Some(p) = self.physnets.get_mut(net) {
                                p.send(&NetPort::Chassis(i, port.clone()), frame, now);
                            }
                        }
                        Some(s) if s.chassis == i && s.net.is_none() => {
                            s.down.send(frame, now);
                        }
                        _ => self.log.push(format!(
                            "{}: frame for port {port} with no host attached there",
                            self.chassis[i].name()
                        )),
                    },
                    Transmit::Tunnel { dst, payload } => {
                        match self.chassis.iter().position(|c| c.encap_ip() == dst) {
                            Some(j) if j != i => {
                                if let Some(l) = self.tunnels.get_mut(&(i, j)) {
                                    let len = payload.len();
                                    l.send_sized(Carried::Geneve(payload), len, now);
                                }
                            }
                            _ => self.log.push(format!(
                                "{}: tunnel frame for {dst}, which is no other chassis",
                                self.chassis[i].name()
                            )),
                        }
                    }
                    Transmit::Mirror { dst, payload } => match self.collectors.get_mut(&dst) {
                        Some(c) => c.push(Collected {
                            at: now,
                            chassis: self.chassis[i].name().to_string(),
                            payload,
                        }),
                        None => self.log.push(format!(
                            "{}: mirror frame for {dst}, which is no collector",
                            self.chassis[i].name()
                        )),
                    },
                }
            }
        }
        // Links down → hosts.
        for s in self.hosts.values_mut() {
            while let Some(f) = s.down.poll_deliver(now) {
                moved = true;
                s.host.handle_frame(&f, now);
            }
        }
        moved
    }

    /// Runs rounds at the current instant until nothing moves.
    fn settle(&mut self) {
        for _ in 0..MAX_ROUNDS {
            if !self.round() {
                return;
            }
        }
        self.log.push(format!(
            "world: still busy after {MAX_ROUNDS} rounds at {:?}; moving on",
            self.now
        ));
    }

    /// The earliest time something is due (a timer or a frame in flight).
    pub fn next_deadline(&self) -> Option<Duration> {
        let mut ds: Vec<Duration> = Vec::new();
        ds.extend(self.db.poll_timeout());
        ds.extend(self.northd.as_ref().and_then(NorthdNode::poll_timeout));
        for (i, c) in self.chassis.iter().enumerate() {
            if !self.dead.contains(&i) {
                ds.extend(c.poll_timeout());
            }
        }
        for l in self.tunnels.values() {
            ds.extend(l.next_deadline());
        }
        for p in self.physnets.values() {
            ds.extend(p.next_deadline());
        }
        ds.extend(self.migration_deadline());
        for s in self.hosts.values() {
            ds.extend(s.host.poll_timeout(self.now));
            ds.extend(s.up.next_deadline());
            ds.extend(s.down.next_deadline());
        }
        ds.into_iter().min()
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        self.db.handle_timeout(now);
        if let Some(n) = self.northd.as_mut() {
            n.handle_timeout(now);
        }
        for (i, c) in self.chassis.iter_mut().enumerate() {
            if !self.dead.contains(&i) && c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
        for s in self.hosts.values_mut() {
            if s.host.poll_timeout(now).is_some_and(|t| t <= now) {
                s.host.handle_timeout(now);
            }
        }
        self.step_migrations();
    }

    /// Runs until virtual time `t` (the sandbox calls this with the wall clock's progress).
    pub fn advance_to(&mut self, t: Duration) {
        self.run_to(t, &mut |_| false);
    }

    fn run_to(&mut self, t: Duration, stop: &mut dyn FnMut(&World) -> bool) -> bool {
        loop {
            if stop(self) {
                return true;
            }
            let next = self.next_deadline().map(|d| {
                // A timer that stays due after firing must not spin the clock in place.
                if d <= self.now {
                    self.now + Duration::from_micros(10)
                } else {
                    d
                }
            });
            match next {
                Some(d) if d <= t => {
                    self.now = d;
                    self.fire_timers();
                    self.settle();
                }
                _ => {
                    if t > self.now {
                        self.now = t;
                        self.fire_timers();
                        self.settle();
                    }
                    return stop(self);
                }
            }
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.advance_to(t);
    }

    /// Runs until `pred` holds (checked after every event) or `timeout` of virtual time has
    /// passed; whether it held.
    pub fn run_until(&mut self, mut pred: impl FnMut(&World) -> bool, timeout: Duration) -> bool {
        let t = self.now + timeout;
        self.run_to(t, &mut pred)
    }

    /// `ovn-nbctl --wait=hv sync`: bumps `NB_Global.nb_cfg` and runs until `hv_cfg` reaches it
    /// (every chassis has installed the programs for it), at most `timeout`.
    pub fn sync_hv(&mut self, timeout: Duration) -> Result<(), String> {
        self.db.transact(NB, nb::bump_nb_cfg(), self.now)?;
        let target = self.nb_global_cfg().0;
        if self.run_until(|w| w.nb_global_cfg().2 >= target, timeout) {
            Ok(())
        } else {
            let (nb, sb, hv) = self.nb_global_cfg();
            Err(format!(
                "--wait=hv: after {timeout:?}, NB_Global nb_cfg={nb} sb_cfg={sb} hv_cfg={hv}"
            ))
        }
    }

    /// `NB_Global` (nb_cfg, sb_cfg, hv_cfg).
    pub fn nb_global_cfg(&self) -> (i64, i64, i64) {
        self.nb_snapshot()
            .ok()
            .and_then(|n| {
                n.nb_global()
                    .values()
                    .next()
                    .map(|g| (g.nb_cfg, g.sb_cfg, g.hv_cfg))
            })
            .unwrap_or((0, 0, 0))
    }

    /// Whether every chassis's datapath has a program and every host's port is in the program
    /// of its chassis as a local port. A quick readiness check for tests.
    pub fn programs_installed(&self) -> bool {
        self.chassis
            .iter()
            .all(|c| c.datapath().program().is_some())
    }

    fn host_slot(&mut self, lsp: &str) -> Result<&mut Host, String> {
        self.hosts
            .get_mut(lsp)
            .map(|s| &mut s.host)
            .ok_or_else(|| format!("no host on port {lsp}"))
    }

    /// Starts `count` pings from the host on `from` to `dst`, one per `interval`; the name of
    /// the ping session (see [`Host::ping_record`]).
    pub fn ping(
        &mut self,
        from: &str,
        dst: IpAddr,
        count: u16,
        interval: Duration,
    ) -> Result<String, String> {
        let now = self.now;
        let r = self
            .host_slot(from)?
            .ping(dst, count, interval, now)
            .map_err(|e| format!("ping from {from} to {dst}: {e:?}"))?;
        self.event(format!("{from}: ping {dst} x{count} ({r})"));
        self.settle();
        Ok(r)
    }

    /// Makes the host on `lsp` answer UDP on `port` (echo).
    pub fn udp_listen(&mut self, lsp: &str, port: u16) -> Result<(), String> {
        self.host_slot(lsp)?
            .listen_udp_echo(port)
            .map_err(|e| format!("{lsp}: UDP listen {port}: {e:?}"))
    }

    /// Starts `count` UDP requests of `len` bytes from `from` to `dst:port`; the session name
    /// (see [`Host::udp_record`]).
    pub fn udp(
        &mut self,
        from: &str,
        dst: IpAddr,
        port: u16,
        count: u16,
        len: usize,
    ) -> Result<String, String> {
        let now = self.now;
        let r = self
            .host_slot(from)?
            .udp_exchange(dst, port, count, Duration::from_millis(1), len, now)
            .map_err(|e| format!("UDP from {from} to {dst}:{port}: {e:?}"))?;
        self.event(format!("{from}: udp {dst}:{port} x{count} ({r})"));
        self.settle();
        Ok(r)
    }

    /// Makes the host on `lsp` accept TCP on `port`.
    pub fn tcp_listen(&mut self, lsp: &str, port: u16) -> Result<(), String> {
        self.host_slot(lsp)?
            .listen_tcp(port)
            .map_err(|e| format!("{lsp}: TCP listen {port}: {e:?}"))
    }

    /// Makes the host on `lsp` stop accepting TCP on `port` (its service stops; SYNs are
    /// answered with RSTs).
    pub fn tcp_unlisten(&mut self, lsp: &str, port: u16) -> Result<(), String> {
        if self.host_slot(lsp)?.unlisten_tcp(port) {
            Ok(())
        } else {
            Err(format!("{lsp}: nothing listens on TCP {port}"))
        }
    }

    /// Makes the host on `lsp` accept TCP on `port` from `peers` only (a server checking its
    /// client's identity; see [`Host::listen_tcp_from`]).
    pub fn tcp_listen_from(
        &mut self,
        lsp: &str,
        port: u16,
        peers: &[IpAddr],
    ) -> Result<(), String> {
        self.host_slot(lsp)?
            .listen_tcp_from(port, peers)
            .map_err(|e| format!("{lsp}: TCP listen {port}: {e:?}"))
    }

    /// Starts a TCP upload of `bytes` pattern bytes from `from` to `dst:port`; the
    /// connection's name (see [`Host::tcp_record`]).
    pub fn tcp_transfer(
        &mut self,
        from: &str,
        dst: IpAddr,
        port: u16,
        bytes: u64,
    ) -> Result<String, String> {
        let now = self.now;
        let r = self
            .host_slot(from)?
            .start_transfer(dst, port, bytes, now)
            .map_err(|e| format!("TCP from {from} to {dst}:{port}: {e:?}"))?;
        self.event(format!("{from}: tcp {dst}:{port} {bytes} bytes ({r})"));
        self.settle();
        Ok(r)
    }

    /// Opens a TCP connection from the host on `from` to `dst:port` for transfer `t` (an
    /// upload or a download, paced or not) and runs what is due at once (its SYN leaves now);
    /// the connection's name (see [`Host::tcp_record`]).
    pub fn tcp_start(
        &mut self,
        from: &str,
        dst: IpAddr,
        port: u16,
        t: crate::net::Transfer,
    ) -> Result<String, String> {
        let now = self.now;
        let r = self
            .host_slot(from)?
            .start_transfer_with(dst, port, t, now)
            .map_err(|e| format!("TCP from {from} to {dst}:{port}: {e:?}"))?;
        self.event(format!("{from}: tcp {dst}:{port} {t:?} ({r})"));
        self.settle();
        Ok(r)
    }

    /// The record of TCP connection `name` on the host on `lsp`.
    pub fn tcp_record(&self, lsp: &str, name: &str) -> Option<crate::net::TcpRecord> {
        self.hosts.get(lsp)?.host.tcp_record(name, self.now)
    }

    /// Every TCP connection's record on the host on `lsp`, in name order (none when there is
    /// no such host): what the far end of a connection saw, without knowing its name there.
    pub fn tcp_records(&self, lsp: &str) -> Vec<crate::net::TcpRecord> {
        self.hosts.get(lsp).map_or_else(Vec::new, |s| {
            s.host
                .tcp_names()
                .iter()
                .filter_map(|n| s.host.tcp_record(n, self.now))
                .collect()
        })
    }

    /// `holdfast trace` of the `back`-th last frame (0 = the last) the host on `lsp` sent,
    /// through its chassis's running program with conntrack as it is now ("what if": nothing
    /// changes). A debugging aid.
    pub fn trace_last(&self, lsp: &str, back: usize) -> Result<String, String> {
        let s = self
            .hosts
            .get(lsp)
            .ok_or_else(|| format!("no host on {lsp}"))?;
        let frame = s
            .sent
            .iter()
            .rev()
            .nth(back)
            .ok_or_else(|| format!("{lsp} sent fewer than {} frames", back + 1))?;
        let dp = self.chassis[s.chassis].datapath();
        let msg = dp.program().ok_or("no program installed")?;
        let ids = dp.port_ids();
        let id = *ids
            .get(lsp)
            .ok_or_else(|| format!("{lsp} is no local port"))?;
        let (prog, _) = hf_datapath::program::compile(msg, &ids, None)?;
        let mut p = hf_pipeline::Pipeline::new(prog);
        p.set_packet_in(true);
        let mut out = hf_pipeline::Outputs::default();
        let t = p
            .trace(
                dp.conntrack(),
                hf_pipeline::Ingress::Local(id),
                frame,
                self.now,
                &mut out,
            )
            .map_err(|e| format!("trace: {e}"))?;
        Ok(t.to_string())
    }

    /// Runs until [`World::ports_ready`], at most 30 s of virtual time: the incident worlds'
    /// start. Panics, with the world's log, when they are not (a broken build, not an input
    /// error); `what` names what was to be ready.
    pub(crate) fn await_ports_ready(&mut self, what: &str) {
        let ok = self.run_until(|w| w.ports_ready(), Duration::from_secs(30));
        assert!(ok, "{what} not ready; log:\n{}", self.take_log().join("\n"));
    }

    /// Whether every chassis runs a program in which every host's port is local on the
    /// host's chassis and bound (not `Unbound`) on the other chassis that have its datapath.
    pub fn ports_ready(&self) -> bool {
        use hf_datapath::proto::LocationMsg;
        self.chassis.iter().enumerate().all(|(i, c)| {
            let Some(p) = c.datapath().program() else {
                return false;
            };
            let mut local_seen = 0;
            for dp in &p.datapaths {
                for port in dp.ports.iter() {
                    let Some(h) = self.hosts.get(&port.name).filter(|h| h.net.is_none()) else {
                        continue;
                    };
                    match (&port.location, h.chassis == i) {
                        (LocationMsg::Local(_), true) => local_seen += 1,
                        (LocationMsg::Unbound, _) | (LocationMsg::Local(_), false) => return false,
                        (_, true) => return false,
                        _ => {}
                    }
                }
            }
            local_seen
                == self
                    .hosts
                    .values()
                    .filter(|h| h.net.is_none() && h.chassis == i)
                    .count()
        })
    }

    /// Restarts chassis `name`'s controller (the datapath keeps forwarding meanwhile).
    pub fn restart_controller(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].restart_controller(&mut self.db, self.now);
        self.event(format!("controller {name} restarted"));
        self.settle();
        Ok(())
    }

    /// Restarts chassis `name`'s controller with new settings (a rolling upgrade's step:
    /// another feature level; or the naive control case's hook). Every later restart of that
    /// chassis keeps them.
    pub fn restart_controller_with(
        &mut self,
        name: &str,
        t: chassis::ChassisTuning,
    ) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].set_tuning(t);
        self.event(format!(
            "controller {name}: feature level {}{}",
            t.feature_level,
            if t.keep_last_good {
                ""
            } else {
                ", no last good versions"
            }
        ));
        self.restart_controller(name)
    }

    /// Stops chassis `name`'s controller (until [`World::start_controller`]).
    pub fn stop_controller(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].stop_controller(&mut self.db, self.now);
        self.event(format!("controller {name} stopped"));
        self.settle();
        Ok(())
    }

    /// Kills chassis `name` (a host failure): its controller's SB session ends, its datapath
    /// stops forwarding and sending (BFD included), and every frame that reaches it (tunnels,
    /// its VMs' links, its provider network ports) is lost. Its `Chassis` row stays, as a
    /// dead host's does.
    pub fn kill_chassis(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].stop_controller(&mut self.db, self.now);
        self.dead.insert(c);
        self.event(format!("chassis {name} killed"));
        self.settle();
        Ok(())
    }

    /// Starts chassis `name`'s controller again.
    pub fn start_controller(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].start_controller(self.now);
        self.event(format!("controller {name} started"));
        self.settle();
        Ok(())
    }

    /// Hands chassis `name`'s datapath state to a new datapath (export → import).
    pub fn restart_datapath(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].restart_datapath(self.now)?;
        self.state.drop_chassis(c, &mut self.chassis, self.now);
        self.event(format!("datapath {name} restarted (state handoff)"));
        self.settle();
        Ok(())
    }

    /// Chassis `name`'s datapath crashes and a new one starts with only the zone map its
    /// local storage mirrored: no program, no conntrack, no held frames, no state sessions
    /// (the controller reconnects and pushes a program again).
    pub fn crash_datapath(&mut self, name: &str) -> Result<(), String> {
        let c = self.chassis_index(name)?;
        self.chassis[c].crash_datapath(self.now);
        self.state.drop_chassis(c, &mut self.chassis, self.now);
        self.event(format!(
            "datapath {name} crashed and restarted (state lost)"
        ));
        self.settle();
        Ok(())
    }

    /// Drops northd and starts a new one (holdfast northd only).
    pub fn restart_northd(&mut self) -> Result<(), String> {
        let Some(n) = self.northd.take() else {
            return Err("restart_northd: this world has a static SB, no northd".into());
        };
        n.shutdown(&mut self.db);
        self.northd_seed = self.northd_seed.wrapping_add(1);
        self.northd = Some(NorthdNode::new(self.northd_seed, self.now));
        self.event("northd restarted".into());
        self.settle();
        Ok(())
    }

    /// The northd, if holdfast's runs.
    pub fn northd(&self) -> Option<&NorthdNode> {
        self.northd.as_ref()
    }

    /// Moves logical port `lsp` to chassis `to`: NB `requested-chassis=to`, and its host
    /// re-attached there (same stack, same addresses).
    pub fn move_port(&mut self, lsp: &str, to: &str) -> Result<(), String> {
        let c = self.chassis_index(to)?;
        if !self.hosts.contains_key(lsp) {
            return Err(format!("move_port: no host on port {lsp}"));
        }
        // NB first: when it refuses (no such port in NB), the host stays where it was.
        self.db
            .transact(NB, nb::set_requested_chassis(lsp, to), self.now)
            .map_err(|e| format!("move_port {lsp} to {to}: {e}"))?;
        let Some(slot) = self.hosts.remove(lsp) else {
            return Err(format!("move_port: no host on port {lsp}"));
        };
        self.chassis[slot.chassis].remove_port(lsp);
        let external = slot.up.config().latency > LinkConfig::cluster().latency;
        let spec = slot.spec.map(|mut s| {
            s.requested_chassis = Some(to.to_string());
            s
        });
        self.attach(c, lsp, slot.host, external);
        if let Some(h) = self.hosts.get_mut(lsp) {
            // The same host moved: auto-attach must not replace it for the changed option.
            h.spec = spec;
        }
        self.event(format!("port {lsp} moved to {to}"));
        self.settle();
        Ok(())
    }

    /// Dumps NB, recreates both databases (new UUIDs, same names), reloads NB; SB is
    /// regenerated by northd (or reloaded from the static SB). Every client reconnects.
    pub fn rebuild_databases(&mut self) -> Result<(), String> {
        let nb_ops = self.db.dump_ops(NB, self.now)?;
        let sb = match &self.static_sb {
            Some(b) => Some(db::load_database_file(b)?),
            None => None,
        };
        self.db.recreate(sb, self.now)?;
        // NB_Global was inserted by recreate: drop the dumped one's insert, keep its columns.
        let mut ops = Vec::new();
        for op in nb_ops {
            if op["table"] == "NB_Global" {
                let mut row = op["row"].clone();
                if let Some(o) = row.as_object_mut() {
                    for k in [
                        "nb_cfg",
                        "sb_cfg",
                        "hv_cfg",
                        "nb_cfg_timestamp",
                        "sb_cfg_timestamp",
                        "hv_cfg_timestamp",
                    ] {
                        o.remove(k);
                    }
                }
                ops.push(serde_json::json!({"op": "update", "table": "NB_Global", "where": [], "row": row}));
            } else {
                ops.push(op);
            }
        }
        self.db.transact(NB, ops, self.now)?;
        self.nb_seen = None;
        self.event("databases rebuilt".into());
        self.settle();
        Ok(())
    }

    /// Opens a database session for an outside client (the sandbox's TCP bridge).
    pub fn db_connect(&mut self) -> hf_ovsdb_net::server::SessionId {
        self.db.external_connect(self.now)
    }

    /// JSON-RPC bytes from an outside client; the world settles after them.
    pub fn db_input(
        &mut self,
        sid: hf_ovsdb_net::server::SessionId,
        bytes: &[u8],
    ) -> Result<(), String> {
        let r = self.db.external_input(sid, bytes, self.now);
        self.settle();
        r
    }

    /// JSON-RPC bytes for an outside client, if any.
    pub fn db_poll_output(&mut self, sid: hf_ovsdb_net::server::SessionId) -> Option<Vec<u8>> {
        self.db.external_poll_output(sid)
    }

    /// Whether the server closed an outside client's session.
    pub fn db_is_closed(&self, sid: hf_ovsdb_net::server::SessionId) -> bool {
        self.db.external_is_closed(sid)
    }

    /// An outside client went away.
    pub fn db_disconnect(&mut self, sid: hf_ovsdb_net::server::SessionId) {
        self.db.external_disconnect(sid);
        self.settle();
    }

    /// The record: every host's, every link's counters, world events, and per chassis what
    /// its datapath runs and what the controllers asked of it.
    pub fn record(&self) -> WorldRecord {
        let mut net = Record::new(self.seed);
        for (lsp, s) in &self.hosts {
            net.hosts.insert(lsp.clone(), s.host.record(self.now));
            net.links
                .insert(format!("{lsp} up"), s.up.counters().clone());
            net.links
                .insert(format!("{lsp} down"), s.down.counters().clone());
        }
        for ((a, b), l) in &self.tunnels {
            net.links.insert(
                format!(
                    "tunnel {}->{}",
                    self.chassis[*a].name(),
                    self.chassis[*b].name()
                ),
                l.counters().clone(),
            );
        }
        net.events = self.events.clone();
        let mut chassis = BTreeMap::new();
        for c in &self.chassis {
            let dp = c.datapath();
            let k = dp.counters();
            let st = c.pipe_stats();
            chassis.insert(
                c.name().to_string(),
                ChassisRecord {
                    generation: dp.generation(),
                    zones: dp.zones().clone(),
                    programs: st.programs,
                    flushes: st.flushes,
                    flushed: st.flushed_names.clone(),
                    rx_port: k.rx_port,
                    rx_tunnel: k.rx_tunnel,
                    tx_port: k.tx_port,
                    tx_tunnel: k.tx_tunnel,
                    dropped: k.dropped,
                    restarts: c.restarts,
                },
            );
        }
        WorldRecord { net, chassis }
    }
}
