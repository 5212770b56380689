//! The sandbox's handle on the simulated world (`hf_sim::world::World`): every call the
//! sandbox makes into it goes through here, so the rest of the sandbox speaks of switches,
//! hosts and results.
//!
//! What it does not do: build the world's parts (that is `hf_sim`), or decide the topology
//! ([`super::topology`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, anyhow};
use hf_datapath::proto::LocationMsg;
use hf_sim::net::HostConfig;
use hf_sim::world::hosts::parse_mac;
use hf_sim::world::nb::Txn;
use hf_sim::world::streams::{Stream, StreamReport, StreamSpec};
use hf_sim::world::{MigrationPlan, MigrationRecord, NorthdMode, World, WorldConfig};

use super::bridge::{SessionId, SimHost};
use super::topology::{ExtHost, Topology};

/// A host of the world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// Its name (the logical port's; an external host's own).
    pub name: String,
    /// Its IPv4 address, once it has one.
    pub ip: Option<String>,
    /// Where it is: the chassis its port is on, or the provider network of an external host.
    pub place: String,
    /// An external host on a provider network (no logical port, no chassis).
    pub external: bool,
    /// It takes its address by DHCP.
    pub dhcp: bool,
}

/// A ping started with [`Sim::start_ping`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingId {
    /// The pinging host.
    pub host: String,
    /// The session's name in the host's record.
    pub name: String,
}

/// A ping's outcome so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingResult {
    /// The pinging host.
    pub from: String,
    /// Requests to send, sent, answered.
    pub count: u64,
    /// Sent.
    pub sent: u64,
    /// Answered.
    pub answered: u64,
    /// Round-trip times of the answered ones (µs).
    pub rtts_us: Vec<u64>,
    /// Every request answered or timed out.
    pub done: bool,
}

/// A TCP transfer started with [`Sim::start_tcp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpId {
    /// Client host.
    pub from: String,
    /// Server host.
    pub to: String,
    /// The connection's name in the records.
    pub name: String,
}

/// A TCP transfer's outcome so far, from both ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpResult {
    /// Bytes the receiver got in order.
    pub bytes_received: u64,
    /// Bytes the receiver checked against the pattern.
    pub bytes_verified: u64,
    /// Bytes expected.
    pub bytes_expected: u64,
    /// From opening to the last byte verified (µs).
    pub elapsed_us: u64,
    /// The client's outcome (`complete`, `running`, `reset`, ...).
    pub outcome: String,
    /// The client's address as the server saw it.
    pub server_saw: String,
    /// From opening to established (µs), if it was.
    pub connect_us: Option<u64>,
    /// Segments the client sent again.
    pub retransmitted: u64,
    /// Resets either end received.
    pub resets: u64,
    /// Bytes the server acknowledged to the client.
    pub bytes_acked: u64,
    /// The receiver's longest gap between in-order bytes (µs).
    pub stall_max_us: u64,
}

impl TcpResult {
    /// Every byte arrived and matched.
    pub fn complete(&self) -> bool {
        self.bytes_expected > 0 && self.bytes_verified == self.bytes_expected
    }
    /// Nothing more will happen.
    pub fn finished(&self) -> bool {
        self.complete() || (self.outcome != "running" && !self.outcome.is_empty())
    }
    /// The IP part of [`TcpResult::server_saw`].
    pub fn server_saw_ip(&self) -> &str {
        self.server_saw
            .rsplit_once(':')
            .map_or(self.server_saw.as_str(), |(ip, _)| ip)
    }
}

/// The world.
pub struct Sim {
    world: World,
    seed: u64,
    /// (host, port) pairs listening for TCP.
    listening: BTreeSet<(String, u16)>,
    /// External hosts on provider networks: host → network.
    net_hosts: BTreeMap<String, String>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.world.now())
            .finish()
    }
}

impl Sim {
    /// The world's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A world seeded by `seed` with the topology's chassis and holdfast northd.
    pub fn new(seed: u64, topo: &Topology) -> anyhow::Result<Sim> {
        let world = World::new(WorldConfig {
            seed,
            chassis: topo.chassis(),
            northd: NorthdMode::Holdfast,
        })
        .map_err(|e| anyhow!("cannot build the simulated world: {e}"))?;
        Ok(Sim {
            world,
            seed,
            listening: BTreeSet::new(),
            net_hosts: BTreeMap::new(),
        })
    }

    /// Puts the external host `h` on its provider network.
    pub fn add_net_host(&mut self, h: &ExtHost) -> anyhow::Result<()> {
        let mac = parse_mac(&h.mac).ok_or_else(|| anyhow!("{}: bad MAC {:?}", h.name, h.mac))?;
        let ip: Ipv4Addr =
            h.ip.parse()
                .with_context(|| format!("{}: bad address {:?}", h.name, h.ip))?;
        let gw: Option<Ipv4Addr> = h
            .gateway
            .map(|g| {
                g.parse()
                    .with_context(|| format!("{}: bad gateway {g:?}", h.name))
            })
            .transpose()?;
        let cfg = HostConfig::new(&h.name, mac, self.seed ^ 0xe).with_ipv4(ip, h.prefix, gw);
        self.world
            .add_net_host(h.net, &h.name, cfg)
            .map_err(|e| anyhow!("{e}"))?;
        self.net_hosts.insert(h.name.clone(), h.net.to_string());
        Ok(())
    }

    /// One NB transaction (the builders of `hf_sim::world::nb`).
    pub fn nb(&mut self, txn: Txn) -> anyhow::Result<()> {
        self.world.nb(txn).map(|_| ()).map_err(|e| anyhow!("{e}"))
    }

    /// (Logical_Flow rows, Datapath_Binding rows) of SB.
    pub fn sb_counts(&self) -> anyhow::Result<(usize, usize)> {
        let sb = self.world.sb_snapshot().map_err(|e| anyhow!("{e}"))?;
        Ok((sb.logical_flow().len(), sb.datapath_binding().len()))
    }

    /// `ovn-nbctl --wait=hv sync`: true once every chassis installed the current NB.
    pub fn sync_hv(&mut self, limit: Duration) -> anyhow::Result<()> {
        self.world.sync_hv(limit).map_err(|e| anyhow!("{e}"))
    }

    /// Whether `chassis`'s datapath has a program installed.
    pub fn chassis_installed(&self, chassis: &str) -> bool {
        self.world
            .chassis_by_name(chassis)
            .is_some_and(|c| c.datapath().program().is_some())
    }

    /// Every VIF port of NB that has a host, with its switch.
    pub fn vif_hosts(&self) -> Vec<(String, String)> {
        let Ok(nb) = self.world.nb_snapshot() else {
            return Vec::new();
        };
        let mut v = Vec::new();
        for ls in nb.logical_switch().values() {
            for r in &ls.ports {
                if let Some(p) = nb.logical_switch_port().get(&r.uuid())
                    && self.world.host(&p.name).is_some()
                {
                    v.push((p.name.clone(), ls.name.clone()));
                }
            }
        }
        v.sort();
        v
    }

    /// Every host: the VIF ports' (by switch and name), then the external ones.
    pub fn host_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.vif_hosts().into_iter().map(|(h, _)| h).collect();
        v.extend(self.net_hosts.keys().cloned());
        v
    }

    /// A host's name, address and place (chassis or provider network).
    pub fn host_info(&self, host: &str) -> Option<HostInfo> {
        let h = self.world.host(host)?;
        let net = self.net_hosts.get(host);
        Some(HostInfo {
            name: host.to_string(),
            ip: h.ipv4().map(|a| a.to_string()),
            place: net
                .map(String::as_str)
                .or_else(|| self.world.host_chassis(host))
                .unwrap_or("?")
                .to_string(),
            external: net.is_some(),
            dhcp: h.dhcp_record().is_some(),
        })
    }

    /// Every chassis's program has every host's port bound (local on its chassis).
    pub fn ports_ready(&self) -> bool {
        self.world.ports_ready()
    }

    /// The host is attached and its chassis's program has its port as a local port (an
    /// external host: it is on its network).
    pub fn host_ready(&self, host: &str) -> bool {
        if self.net_hosts.contains_key(host) {
            return self.world.host(host).is_some();
        }
        let Some(ch) = self.world.host_chassis(host) else {
            return false;
        };
        let Some(prog) = self
            .world
            .chassis_by_name(ch)
            .and_then(|c| c.datapath().program())
        else {
            return false;
        };
        prog.datapaths.iter().any(|d| {
            d.ports
                .iter()
                .any(|p| p.name == host && matches!(&p.location, LocationMsg::Local(_)))
        })
    }

    /// Start `count` pings of `dst` from `host`, 10 ms apart.
    pub fn start_ping(&mut self, host: &str, dst: &str, count: u64) -> anyhow::Result<PingId> {
        let ip: IpAddr = dst
            .parse()
            .with_context(|| format!("ping: {dst:?} is not an IP address"))?;
        let n = u16::try_from(count).unwrap_or(u16::MAX);
        let name = self
            .world
            .ping(host, ip, n, Duration::from_millis(10))
            .map_err(|e| anyhow!("{e}"))?;
        Ok(PingId {
            host: host.to_string(),
            name,
        })
    }

    /// A ping's outcome so far.
    pub fn ping_result(&self, id: &PingId) -> Option<PingResult> {
        let r = self.world.host(&id.host)?.ping_record(&id.name)?;
        Some(PingResult {
            from: id.host.clone(),
            count: r.count,
            sent: r.sent,
            answered: r.answered,
            rtts_us: r.rtt_us.iter().flatten().copied().collect(),
            done: r.done,
        })
    }

    /// Start a TCP transfer of `bytes` from `from` to `to`'s `port` (which starts listening).
    pub fn start_tcp(
        &mut self,
        from: &str,
        to: &str,
        port: u16,
        bytes: u64,
    ) -> anyhow::Result<TcpId> {
        let ip = self
            .world
            .host(to)
            .and_then(|h| h.ipv4())
            .ok_or_else(|| anyhow!("no host {to} with an address"))?;
        // Listening twice on one port is the host's error: listen once per host and port.
        if !self.listening.contains(&(to.to_string(), port)) {
            self.world
                .tcp_listen(to, port)
                .map_err(|e| anyhow!("{e}"))?;
            self.listening.insert((to.to_string(), port));
        }
        let name = self
            .world
            .tcp_transfer(from, IpAddr::V4(ip), port, bytes)
            .map_err(|e| anyhow!("{e}"))?;
        Ok(TcpId {
            from: from.to_string(),
            to: to.to_string(),
            name,
        })
    }

    /// A transfer's outcome so far (the client's record and the server's of the same
    /// connection).
    pub fn tcp_result(&self, id: &TcpId) -> Option<TcpResult> {
        let c = self.world.tcp_record(&id.from, &id.name)?;
        let cport = c.local.rsplit_once(':').map(|(_, p)| p.to_string());
        let server = self.world.host(&id.to).and_then(|h| {
            let recs: Vec<_> = h
                .tcp_names()
                .into_iter()
                .filter_map(|n| self.world.tcp_record(&id.to, &n))
                // The server's records of this port since the client opened (an earlier
                // transfer to the same port is another connection).
                .filter(|r| {
                    r.role == "server"
                        && r.started_us >= c.started_us
                        && r.local.ends_with(&format!(":{}", port_of(&c.remote)))
                })
                .collect();
            recs.iter()
                .find(|r| r.remote.rsplit_once(':').map(|(_, p)| p.to_string()) == cport)
                .or(recs.last())
                .cloned()
        });
        let (received, verified, saw) = match &server {
            Some(s) => (s.bytes_received, s.bytes_verified, s.remote.clone()),
            None => (0, 0, String::new()),
        };
        let end = server
            .as_ref()
            .and_then(|s| s.completed_us)
            .or(c.completed_us)
            .unwrap_or(self.world.now().as_micros() as u64);
        Some(TcpResult {
            bytes_received: received,
            bytes_verified: verified,
            bytes_expected: c.bytes_expected,
            elapsed_us: end.saturating_sub(c.started_us),
            outcome: c.outcome.clone(),
            server_saw: saw,
            connect_us: c.established_us.map(|e| e.saturating_sub(c.started_us)),
            retransmitted: c.retransmitted_segments,
            resets: c.resets_received + server.as_ref().map_or(0, |s| s.resets_received),
            bytes_acked: c.bytes_acked,
            stall_max_us: server.as_ref().map_or(0, |s| s.stall_max_us),
        })
    }

    /// Per chassis: its datapath's zone map and the zone flushes its controllers asked for.
    pub fn zones(&self) -> BTreeMap<String, (BTreeMap<String, u16>, u64)> {
        self.world
            .record()
            .chassis
            .into_iter()
            .map(|(n, c)| (n, (c.zones, c.flushes)))
            .collect()
    }

    /// Restart a chassis's controller (its datapath keeps forwarding).
    pub fn restart_controller(&mut self, chassis: &str) -> anyhow::Result<()> {
        self.world
            .restart_controller(chassis)
            .map_err(|e| anyhow!("{e}"))
    }

    /// Restart a chassis's controller with other settings (feature level; the upgrade story).
    pub fn restart_controller_with(
        &mut self,
        chassis: &str,
        t: hf_sim::world::chassis::ChassisTuning,
    ) -> anyhow::Result<()> {
        self.world
            .restart_controller_with(chassis, t)
            .map_err(|e| anyhow!("{e}"))
    }

    /// The world, to read (the upgrade story's records).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// Stop a chassis's controller (its datapath keeps forwarding) until
    /// [`Sim::start_controller`].
    pub fn stop_controller(&mut self, chassis: &str) -> anyhow::Result<()> {
        self.world
            .stop_controller(chassis)
            .map_err(|e| anyhow!("{e}"))
    }

    /// Start a stopped controller again.
    pub fn start_controller(&mut self, chassis: &str) -> anyhow::Result<()> {
        self.world
            .start_controller(chassis)
            .map_err(|e| anyhow!("{e}"))
    }

    /// A chassis's controller's status text (`holdfast controller`'s `status`), if it runs.
    pub fn controller_status(&self, chassis: &str) -> Option<String> {
        self.world
            .chassis_by_name(chassis)
            .and_then(|c| c.controller())
            .map(|c| c.status())
    }

    /// Restart northd.
    pub fn restart_northd(&mut self) -> anyhow::Result<()> {
        self.world.restart_northd().map_err(|e| anyhow!("{e}"))
    }

    /// Rebuild both databases: NB dumped and loaded again with new UUIDs, SB regenerated.
    pub fn rebuild_databases(&mut self) -> anyhow::Result<()> {
        self.world.rebuild_databases().map_err(|e| anyhow!("{e}"))
    }

    /// Crash a chassis's datapath: a new one with only the zone map (no conntrack, no program
    /// until the controller installs it again).
    pub fn crash_datapath(&mut self, chassis: &str) -> anyhow::Result<()> {
        self.world
            .crash_datapath(chassis)
            .map_err(|e| anyhow!("{e}"))
    }

    /// Hand a chassis's datapath state (conntrack, program, zones, ports) to a new datapath.
    pub fn handoff_datapath(&mut self, chassis: &str) -> anyhow::Result<()> {
        self.world
            .restart_datapath(chassis)
            .map_err(|e| anyhow!("{e}"))
    }

    /// The chassis' names, in configuration order.
    pub fn chassis_names(&self) -> Vec<String> {
        self.world
            .chassis()
            .iter()
            .map(|c| c.name().to_string())
            .collect()
    }

    /// Start a stream (see `hf_sim::world::streams`).
    pub fn start_stream(&mut self, spec: StreamSpec) -> anyhow::Result<Stream> {
        self.world.start_stream(spec).map_err(|e| anyhow!("{e}"))
    }

    /// Stop a stream; its report becomes final once both ends are.
    pub fn stop_stream(&mut self, s: &mut Stream) -> anyhow::Result<()> {
        self.world.stop_stream(s).map_err(|e| anyhow!("{e}"))
    }

    /// A stream as both its ends see it now.
    pub fn stream_report(&self, s: &Stream) -> StreamReport {
        self.world.stream_report(s)
    }

    /// `sandbox/migrate`: the hypervisor's part of a live migration of `host` to chassis `to`
    /// (pre-copy, then a pause of `pause`, then resume on `to` and announce).
    pub fn migrate(&mut self, host: &str, to: &str, pause: Duration) -> Result<String, String> {
        let plan = MigrationPlan {
            pause,
            ..MigrationPlan::default()
        };
        let requested = self.requested_chassis(host);
        self.world.start_migration(host, to, &plan)?;
        let mut text = format!(
            "migrating {host} to {to}: pre-copy {} ms, then a {} ms pause; the NB steps \
             (requested-chassis, activation-strategy) are the CMS's",
            plan.precopy.as_millis(),
            pause.as_millis()
        );
        let named = requested
            .as_deref()
            .is_some_and(|r| r.split(',').any(|c| c.trim() == to));
        if !named {
            text.push_str(&format!(
                "\nwarning: NB's requested-chassis of {host} is {:?}, which does not name {to}: \
                 {to} will not bind the port and the VM loses its network when it resumes there \
                 (the CMS's first step: ovn-nbctl lsp-set-options {host} \
                 requested-chassis=FROM,{to} activation-strategy=rarp)",
                requested.unwrap_or_default()
            ));
        }
        Ok(text)
    }

    /// NB's `options:requested-chassis` of logical switch port `port`.
    pub fn requested_chassis(&self, port: &str) -> Option<String> {
        let nb = self.world.nb_snapshot().ok()?;
        nb.logical_switch_port()
            .values()
            .find(|p| p.name == port)
            .and_then(|p| p.options.get("requested-chassis").cloned())
    }

    /// A whole live migration of `host` to chassis `to` with the default plan (see
    /// `hf_sim::world::World::migrate`): the CMS's first NB step, the hypervisor's part, the
    /// CMS's last step 100 ms after the resume; runs the world until then.
    pub fn migrate_whole(&mut self, host: &str, to: &str) -> anyhow::Result<MigrationRecord> {
        self.world
            .migrate(host, to, &MigrationPlan::default())
            .map_err(|e| anyhow!("{e}"))
    }

    /// Every migration the world ran or runs.
    pub fn migration_records(&self) -> Vec<MigrationRecord> {
        self.world.migrations()
    }

    /// The migrations for `sandbox/report` (see [`migrations`]).
    pub fn migrations(&self) -> Vec<serde_json::Value> {
        migrations(&self.world)
    }

    /// How many TCP connections `host` accepted on `port` (a stream's server: more than one
    /// means a client it saw under a second address or port).
    pub fn accepted(&self, host: &str, port: u16) -> usize {
        let prefix = format!("tcp:{host}:{port}<-");
        self.world.host(host).map_or(0, |h| {
            h.tcp_names()
                .iter()
                .filter(|n| n.starts_with(&prefix))
                .count()
        })
    }

    /// The TCP resets `host` sent to remote endpoints none of its connections has, by endpoint
    /// (`ip:port`): segments that reached it from an address or port it does not know.
    pub fn strays_reset(&self, host: &str) -> BTreeMap<String, u64> {
        self.world
            .host(host)
            .map(|h| h.record(self.world.now()).strays_reset)
            .unwrap_or_default()
    }

    /// The UUIDs of NB's logical switches.
    pub fn nb_switch_uuids(&self) -> Vec<String> {
        self.world.nb_snapshot().map_or_else(
            |_| Vec::new(),
            |nb| nb.logical_switch().keys().map(|u| u.to_string()).collect(),
        )
    }

    /// Run for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        self.world.run_for(d);
    }

    /// The world's log lines since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        self.world.take_log()
    }

    /// Run until `done` holds or `limit` of virtual time passed; whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        // The predicate sees the Sim, not the World: wrap without moving.
        let end = self.world.now() + limit;
        loop {
            if done(self) {
                return true;
            }
            let now = self.world.now();
            if now >= end {
                return false;
            }
            let next = self
                .world
                .next_deadline()
                .unwrap_or(end)
                .clamp(now + Duration::from_micros(10), end);
            self.world.advance_to(next);
        }
    }
}

/// One migration for people: chassis, the pause, what the datapaths moved and held, and its
/// outcome.
pub fn migration_line(m: &MigrationRecord) -> String {
    let pause = match (m.paused_us, m.resumed_us) {
        (Some(p), Some(r)) => format!("paused {:.2} ms", r.saturating_sub(p) as f64 / 1000.0),
        _ => format!("pause {:.2} ms planned", m.pause_us as f64 / 1000.0),
    };
    format!(
        "{} {} -> {}: {pause}; {} connection entries moved in {} bytes (pre-copy {}, deltas {}, \
         final delta {}); destination held {} frames ({} trimmed, {} overflowed); {}",
        m.host,
        m.from,
        m.to,
        m.entries_moved,
        m.bytes_moved,
        m.precopy_entries,
        m.delta_entries,
        m.final_delta_entries,
        m.buffered,
        m.trimmed,
        m.overflowed,
        m.outcome
    )
}

/// The `migrations` list of `sandbox/report --format json`: one object per migration the
/// world ran: per migration its host, chassis, pause and what the datapaths moved.
pub fn migrations(world: &World) -> Vec<serde_json::Value> {
    world
        .migrations()
        .into_iter()
        .map(|m| {
            serde_json::json!({
                "host": m.host,
                "from": m.from,
                "to": m.to,
                "pause_ms": m.pause_us as f64 / 1000.0,
                "entries_moved": m.entries_moved,
                "bytes_moved": m.bytes_moved,
                "precopy_entries": m.precopy_entries,
                "final_delta_entries": m.final_delta_entries,
                "buffered": m.buffered,
                "trimmed": m.trimmed,
                "overflowed": m.overflowed,
                "outcome": m.outcome,
            })
        })
        .collect()
}

fn port_of(endpoint: &str) -> &str {
    endpoint.rsplit_once(':').map_or("", |(_, p)| p)
}

impl SimHost for Sim {
    fn db_connect(&mut self) -> SessionId {
        self.world.db_connect()
    }
    fn db_input(&mut self, sid: SessionId, data: &[u8]) {
        if let Err(e) = self.world.db_input(sid, data) {
            eprintln!("sandbox: closed a database connection: {e}");
        }
    }
    fn db_poll_output(&mut self, sid: SessionId) -> Option<Vec<u8>> {
        self.world.db_poll_output(sid)
    }
    fn db_closed(&self, sid: SessionId) -> bool {
        self.world.db_is_closed(sid)
    }
    fn db_disconnect(&mut self, sid: SessionId) {
        self.world.db_disconnect(sid);
    }
    fn now(&self) -> Duration {
        self.world.now()
    }
    fn next_deadline(&self) -> Option<Duration> {
        self.world.next_deadline()
    }
    fn advance_to(&mut self, now: Duration) {
        self.world.advance_to(now);
    }
}
