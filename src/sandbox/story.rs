//! The sandbox's stories: bringing the topology up (progress steps 2 to 4), the stories of step
//! 5 (`default`: ping and TCP across chassis, TCP through SNAT to the external host;
//! `restarts`: every controller and northd restarted while TCP transfers run; `db-rebuild`:
//! incident D, both databases rebuilt under them with every controller restarted, in
//! [`db_rebuild`]; `live-migration`: incident C, in [`live_migration`]; `upgrade`: incident B,
//! a rolling upgrade from `hf-1`, in [`upgrade`]), and the
//! watcher that pings every host attaching itself to a new VIF port while the sandbox stays up.
//!
//! Every story runs on both topologies: the hosts it uses are picked by their place ([`Cast`]),
//! not by name, and what the external host should see comes from the topology
//! ([`Topology::egress`]).
//!
//! Stories run in the simulator's virtual time as fast as the CPU allows; each step has a
//! virtual-time limit and reports a failure (what did not happen) instead of hanging.
//!
//! What it does not do: judge anything the hosts' own stacks did not see. Every result comes
//! from the simulated hosts' records (ping replies, bytes verified by the TCP receiver,
//! retransmissions, resets) or from the datapaths' zone maps.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::bail;

use super::Printer;
use super::args::Scenario;
use super::bridge::{Control, SessionId, SimHost};
use super::ctl::Ctl;
use super::sim::{HostInfo, PingId, PingResult, Sim, TcpId, TcpResult};
use super::topology::{ExtHost, Topology, Vm};

mod db_rebuild;
mod live_migration;
pub mod snat_exemption;
mod upgrade;

/// Virtual time each coming-up step may take.
const STEP_LIMIT: Duration = Duration::from_secs(30);
/// Bytes of each TCP transfer of the default story.
const TCP_BYTES: u64 = 256 * 1024;
/// Bytes of the restarts story's transfers: long enough to be in flight across every restart.
const RESTART_BYTES_ACROSS: u64 = 8 << 20;
/// The same through SNAT (1 ms away, so slower).
const RESTART_BYTES_SNAT: u64 = 2 << 20;
/// Pings per pair.
const PINGS: u64 = 3;
/// How long a new host may take to answer its first ping (virtual time) before the sandbox
/// says it does not.
const NEW_HOST_PING_LIMIT: Duration = Duration::from_secs(10);

/// `holdfast check`'s findings with `code` on the world's NB and SB (the core `hf_check` the
/// command runs); an error when a database cannot be read.
fn check_findings(
    w: &hf_sim::world::World,
    code: hf_check::Code,
) -> Result<Vec<hf_check::Finding>, String> {
    let nb = w.nb_snapshot()?;
    let sb = w.sb_snapshot()?;
    Ok(
        hf_check::check(&nb, &sb, &[], &hf_check::Options::default())
            .into_iter()
            .filter(|f| f.code == code)
            .collect(),
    )
}

/// A story's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every step did what it should.
    Ok,
    /// A step failed; why, in a few words, when the story can say it in one line (each failure
    /// was printed above the verdict).
    Failed(Option<String>),
}

impl Verdict {
    /// Every step did what it should.
    pub fn ok(&self) -> bool {
        *self == Verdict::Ok
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Ok => f.write_str("ok"),
            Verdict::Failed(None) => f.write_str("FAILED"),
            Verdict::Failed(Some(why)) => write!(f, "FAILED ({why})"),
        }
    }
}

/// The hosts the stories use, by their place in the topology (both topologies have them).
#[derive(Debug, Clone)]
struct Cast {
    /// The first VM on the first hypervisor.
    first: Vm,
    /// A VM on the second hypervisor on the first one's switch.
    neighbour: Vm,
    /// The far end of the transfer across chassis: a VM on the second hypervisor, on another
    /// switch when the topology has one (through the router), else the last one there.
    across: Vm,
    /// The VM that reaches the external host: the first on the second hypervisor.
    out: Vm,
}

impl Cast {
    fn of(t: &Topology) -> Option<Cast> {
        let (h1, h2) = (t.hypervisors.first()?, t.hypervisors.get(1)?);
        let first = t.vms.iter().find(|v| &v.chassis == h1)?.clone();
        let on_h2 = || t.vms.iter().filter(|v| &v.chassis == h2);
        let neighbour = on_h2().find(|v| v.switch == first.switch)?.clone();
        let across = on_h2()
            .find(|v| v.switch != first.switch)
            .or_else(|| on_h2().next_back())?
            .clone();
        let out = on_h2().next()?.clone();
        Some(Cast {
            first,
            neighbour,
            across,
            out,
        })
    }
}

/// A host a story reaches: a VM or the external host.
#[derive(Debug, Clone)]
struct Target {
    name: String,
    ip: String,
    /// Its chassis, or the provider network of the external host.
    place: String,
}

impl Target {
    fn vm(v: &Vm) -> Target {
        Target {
            name: v.name.clone(),
            ip: v.ip.clone(),
            place: v.chassis.clone(),
        }
    }

    fn ext(e: &ExtHost) -> Target {
        Target {
            name: e.name.clone(),
            ip: e.ip.clone(),
            place: e.net.to_string(),
        }
    }
}

/// What the stories do with their [`Cast`] (see [`Sandbox::plan`]).
#[derive(Debug, Clone)]
struct Plan {
    /// Pings: from, to, how they go.
    pings: Vec<(Vm, Target, String)>,
    /// The transfer across chassis: client, server.
    across: (Vm, Vm),
    /// The clients of the transfers to the external host, one per egress address.
    snat: Vec<Vm>,
    /// The external host.
    ext: Target,
}

/// The sandbox: the world, its topology, and what it watches for.
pub struct Sandbox {
    sim: Sim,
    topo: Topology,
    p: Printer,
    /// Hosts the sandbox knows about (the topology's and those already reported).
    known: BTreeSet<String>,
    /// New hosts waiting for their port to come up: (host, switch, seen at).
    waiting: Vec<(String, String, Duration)>,
    /// New hosts being pinged: (host, ping, started at).
    pinging: Vec<(HostInfo, PingId, Duration)>,
    watching: bool,
    /// A client wrote to the database since the last look for new ports.
    nb_dirty: bool,
    /// The control socket's commands: streams, answers that wait for the world.
    ctl: Ctl,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("known", &self.known)
            .finish()
    }
}

fn ms(us: u64) -> String {
    format!("{:.2} ms", us as f64 / 1000.0)
}

impl Sandbox {
    /// The world with `seed`, over the topology's chassis.
    pub fn new(seed: u64, topo: Topology, p: Printer) -> anyhow::Result<Sandbox> {
        let sim = Sim::new(seed, &topo)?;
        Ok(Sandbox {
            sim,
            topo,
            p,
            known: BTreeSet::new(),
            waiting: Vec::new(),
            pinging: Vec::new(),
            watching: false,
            nb_dirty: false,
            ctl: Ctl::new(),
        })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Steps 2 to 4: NB built, northd's flows, programs installed on every chassis, hosts
    /// attached.
    pub fn come_up(&mut self) -> anyhow::Result<()> {
        for txn in self.topo.nb_txns() {
            self.sim.nb(txn)?;
        }
        let (switches, routers) = self.topo.datapaths();
        let datapaths = switches + routers;
        if !self.sim.run_until(STEP_LIMIT, |s| {
            s.sb_counts().is_ok_and(|(_, d)| d >= datapaths)
        }) {
            let (f, d) = self.sim.sb_counts()?;
            bail!(
                "northd did not compile the topology within {STEP_LIMIT:?} (SB has {d} datapaths, {f} flows)"
            );
        }
        let (flows, dps) = self.sim.sb_counts()?;
        self.p.progress(
            2,
            &format!(
                "northd compiled {flows} flows for {dps} datapaths ({switches} switches, {routers} \
                 router{})",
                if routers == 1 { "" } else { "s" }
            ),
        );
        let chassis = self.topo.chassis();
        let synced = self.sim.sync_hv(STEP_LIMIT);
        if synced.is_err() || !chassis.iter().all(|c| self.sim.chassis_installed(c)) {
            let missing: Vec<&str> = chassis
                .iter()
                .filter(|c| !self.sim.chassis_installed(c))
                .map(String::as_str)
                .collect();
            bail!(
                "chassis {} did not install a program within {STEP_LIMIT:?} ({})",
                missing.join(", "),
                synced
                    .err()
                    .map_or_else(|| "--wait=hv reached".to_string(), |e| format!("{e:#}"))
            );
        }
        self.p.progress(
            3,
            &format!("chassis {} up (programs installed)", chassis.join(", ")),
        );
        // The external host is a machine on the provider network, not a logical port.
        self.sim.add_net_host(&self.topo.ext_host)?;
        let want: Vec<String> = self
            .topo
            .vms
            .iter()
            .map(|v| v.name.clone())
            .chain(std::iter::once(self.topo.ext_host.name.clone()))
            .collect();
        if !self
            .sim
            .run_until(STEP_LIMIT, |s| want.iter().all(|h| s.host_ready(h)))
        {
            let missing: Vec<&str> = want
                .iter()
                .filter(|h| !self.sim.host_ready(h))
                .map(String::as_str)
                .collect();
            bail!(
                "hosts {} were not attached and bound within {STEP_LIMIT:?}",
                missing.join(", ")
            );
        }
        let hosts: Vec<String> = want
            .iter()
            .filter_map(|h| self.sim.host_info(h))
            .map(|h| format!("{} on {}", h.name, h.place))
            .collect();
        self.known = want.into_iter().collect();
        self.p
            .progress(4, &format!("hosts attached: {}", hosts.join(", ")));
        self.flush_log();
        Ok(())
    }

    /// Run a story; its verdict. Results are printed as they come.
    pub fn run_story(&mut self, s: Scenario) -> Verdict {
        let verdict = match s {
            Scenario::Default => Self::verdict(self.default_story()),
            Scenario::Restarts => Self::verdict(self.disruption_story(s)),
            Scenario::DbRebuild => self.db_rebuild_story(),
            Scenario::LiveMigration => self.live_migration_story(),
            Scenario::SnatExemption => snat_exemption::story(self.sim.seed(), self.p),
            Scenario::Upgrade => self.upgrade_story(),
        };
        self.flush_log();
        verdict
    }

    fn verdict(ok: bool) -> Verdict {
        if ok {
            Verdict::Ok
        } else {
            Verdict::Failed(None)
        }
    }

    /// Hand the world's log lines to the printer.
    pub fn flush_log(&mut self) {
        for line in self.sim.take_log() {
            self.p.log(&line);
        }
    }

    /// The hosts of the stories, or a result line saying the topology lacks them.
    fn cast(&self) -> Option<Cast> {
        let c = Cast::of(&self.topo);
        if c.is_none() {
            self.p.result(
                "  error: the topology lacks the hosts of the stories (two hypervisors with a VM \
                 each on one switch)",
            );
        }
        c
    }

    /// What the default story does with `c`: the pings (from, to, how), the transfer across
    /// chassis, and the VMs that send to the external host (one per egress address).
    fn plan(&self, c: &Cast) -> Plan {
        let t = &self.topo;
        let ext = Target::ext(&t.ext_host);
        let mut pings = vec![(
            c.first.clone(),
            Target::vm(&c.neighbour),
            "same switch".to_string(),
        )];
        if c.across.switch != c.first.switch {
            pings.push((
                c.first.clone(),
                Target::vm(&c.across),
                t.path(&c.first, &c.across),
            ));
        } else if let Some(e) = t.egress(&c.first.chassis) {
            // One switch: ping out through the first VM's node instead.
            pings.push((
                c.first.clone(),
                ext.clone(),
                format!("through SNAT on {} to the external host", e.at),
            ));
        }
        let mut snat: Vec<Vm> = Vec::new();
        for v in [&c.out, &c.first] {
            let ip = t.egress(&v.chassis).map(|e| e.ip);
            if !snat
                .iter()
                .any(|s| t.egress(&s.chassis).map(|e| e.ip) == ip)
            {
                snat.push(v.clone());
            }
        }
        Plan {
            pings,
            across: (c.first.clone(), c.across.clone()),
            snat,
            ext,
        }
    }

    fn default_story(&mut self) -> bool {
        self.p.progress(5, "running the default story");
        self.p.result(
            "results (simulated time: 10 Gb/s links, 50 us between chassis, 1 ms to the external host):",
        );
        let t = self.topo.clone();
        let Some(cast) = self.cast() else {
            return false;
        };
        let plan = self.plan(&cast);
        let mut ok = true;
        self.warm_up();
        // L2 across chassis, then L3 through the distributed router across chassis (or out to
        // the external host where there is no second switch).
        for (a, b, how) in &plan.pings {
            let r = self.ping(&a.name, &b.ip, PINGS);
            let line = format!(
                "  ping {} ({}, {}) -> {} ({}, {}), {how}: ",
                a.name, a.ip, a.chassis, b.name, b.ip, b.place
            );
            match r {
                Ok(r) if r.answered == r.count && r.count > 0 => {
                    let rtts = &r.rtts_us;
                    let min = rtts.iter().min().copied().unwrap_or(0);
                    let max = rtts.iter().max().copied().unwrap_or(0);
                    let avg = rtts.iter().sum::<u64>() / (rtts.len().max(1) as u64);
                    self.p.result(&format!(
                        "{line}{}/{} answered, rtt min/avg/max {:.3}/{:.3}/{:.3} ms",
                        r.answered,
                        r.count,
                        min as f64 / 1000.0,
                        avg as f64 / 1000.0,
                        max as f64 / 1000.0
                    ));
                }
                Ok(r) => {
                    ok = false;
                    self.p.result(&format!(
                        "{line}FAILED: {}/{} answered",
                        r.answered, r.count
                    ));
                }
                Err(e) => {
                    ok = false;
                    self.p.result(&format!("{line}FAILED: {e:#}"));
                }
            }
        }
        // TCP across chassis (through the router where there is one), and through SNAT to the
        // external host: from each egress address once.
        let (a, b) = &plan.across;
        let mut transfers = vec![(
            a.clone(),
            Target::vm(b),
            format!(
                "across chassis ({} -> {}) {}",
                a.chassis,
                b.chassis,
                t.path(a, b)
            ),
            None,
        )];
        for v in &plan.snat {
            let Some(e) = t.egress(&v.chassis) else {
                self.p.result(&format!(
                    "  error: {} on {} has no way out to the external host",
                    v.name, v.chassis
                ));
                return false;
            };
            transfers.push((
                v.clone(),
                plan.ext.clone(),
                format!("through SNAT on {} to the external host", e.at),
                Some(e.ip),
            ));
        }
        for (from, to, how, snat_ip) in transfers {
            let line = format!(
                "  tcp {} ({}) -> {} ({}:{}), {how}: ",
                from.name,
                from.ip,
                to.name,
                to.ip,
                story_port()
            );
            match self.tcp(&from.name, &to.name, TCP_BYTES) {
                Ok(r) if r.complete() => {
                    let saw = if snat_ip.is_some() {
                        format!("; the external host saw source {}", r.server_saw_ip())
                    } else {
                        String::new()
                    };
                    self.p.result(&format!(
                        "{line}{} bytes in {} (connected in {}, {} segments retransmitted, {} resets), {} verified by the receiver{saw}",
                        r.bytes_received,
                        ms(r.elapsed_us),
                        r.connect_us.map_or_else(|| "?".to_string(), ms),
                        r.retransmitted,
                        r.resets,
                        r.bytes_verified
                    ));
                    if let Some(want) = snat_ip
                        && r.server_saw_ip() != want
                    {
                        ok = false;
                        self.p.result(&format!(
                            "  FAILED: the external host saw {} instead of the SNAT address {want}",
                            r.server_saw_ip(),
                        ));
                    }
                }
                Ok(r) => {
                    ok = false;
                    self.p.result(&format!(
                        "{line}FAILED: {} of {} bytes verified ({})",
                        r.bytes_verified, TCP_BYTES, r.outcome
                    ));
                }
                Err(err) => {
                    ok = false;
                    self.p.result(&format!("{line}FAILED: {err:#}"));
                }
            }
        }
        ok
    }

    /// A simulated host (smoltcp) drops a packet that waits for ARP, and a router's first
    /// packet to an unknown neighbour becomes an ARP request: one warm-up ping per pair of
    /// the stories lets every host and router learn its neighbours first.
    fn warm_up(&mut self) {
        self.warm_up_with(&[]);
    }

    /// [`Sandbox::warm_up`], with more (host, address) pairs to ping.
    fn warm_up_with(&mut self, extra: &[(String, String)]) {
        let mut warm: Vec<(String, String)> = Vec::new();
        if let Some(c) = Cast::of(&self.topo) {
            let plan = self.plan(&c);
            let pairs = plan
                .pings
                .iter()
                .map(|(a, b, _)| (a, b.ip.clone()))
                .chain(std::iter::once((&plan.across.0, plan.across.1.ip.clone())))
                .chain(plan.snat.iter().map(|v| (v, plan.ext.ip.clone())));
            for (a, ip) in pairs {
                let pair = (a.name.clone(), ip);
                if !warm.contains(&pair) {
                    warm.push(pair);
                }
            }
        }
        warm.extend(extra.iter().cloned());
        let mut answered = 0;
        for (from, ip) in &warm {
            match self.ping(from, ip, 2) {
                Ok(r) => answered += r.answered,
                Err(e) => self
                    .p
                    .result(&format!("  warm-up ping {from} -> {ip}: {e:#}")),
            }
        }
        self.p.result(&format!(
            "  warm-up: {} pings so hosts and routers learn their neighbours, {answered} answered",
            2 * warm.len()
        ));
    }

    /// Restart every controller, then northd, 0.5 ms apart: what was done, and whether every
    /// restart was possible.
    fn restart_all(&mut self) -> (String, bool) {
        let mut order: Vec<String> = self.topo.chassis();
        order.push("northd".into());
        let mut done = Vec::new();
        let mut ok = true;
        for what in &order {
            self.sim.run_for(Duration::from_micros(500));
            let r = if what == "northd" {
                self.sim.restart_northd()
            } else {
                self.sim.restart_controller(what)
            };
            match r {
                Ok(()) => done.push(if what == "northd" {
                    "northd".to_string()
                } else {
                    format!("controller {what}")
                }),
                Err(e) => {
                    ok = false;
                    self.p.result(&format!("  restart {what}: FAILED: {e:#}"));
                }
            }
        }
        (format!("restarted {}", done.join(", ")), ok)
    }

    /// Rebuild both databases (every row again, new UUIDs, same names): what was done, and
    /// whether the UUIDs really changed.
    fn rebuild(&mut self) -> (String, bool) {
        self.sim.run_for(Duration::from_micros(500));
        let before = self.sim.nb_switch_uuids();
        if let Err(e) = self.sim.rebuild_databases() {
            self.p.result(&format!("  rebuild: FAILED: {e:#}"));
            return ("did not rebuild the databases".into(), false);
        }
        let after = self.sim.nb_switch_uuids();
        let fresh = !after.is_empty() && after.iter().all(|u| !before.contains(u));
        if !fresh {
            self.p
                .result("  FAILED: the rebuilt NB kept some of its switches' UUIDs");
        }
        (
            format!(
                "rebuilt NB and SB ({} switches, every UUID new, names kept)",
                after.len()
            ),
            fresh,
        )
    }

    /// A disruption (`restarts` or `db-rebuild`) while TCP transfers run across chassis and
    /// through SNAT: nothing lost, no zone changed or flushed.
    fn disruption_story(&mut self, kind: Scenario) -> bool {
        if kind != Scenario::DbRebuild {
            self.p
                .progress(5, &format!("running the {} story", kind.name()));
        }
        self.p.result(
            "results (simulated time: 10 Gb/s links, 50 us between chassis, 1 ms to the external host):",
        );
        self.warm_up();
        let t = self.topo.clone();
        let Some(cast) = self.cast() else {
            return false;
        };
        let (a, b, c) = (&cast.first, &cast.across, &cast.out);
        let zones_before = self.sim.zones();
        let transfers = [
            (
                a.clone(),
                (b.name.clone(), b.ip.clone()),
                RESTART_BYTES_ACROSS,
                format!("across chassis {}", t.path(a, b)),
            ),
            (
                c.clone(),
                (t.ext_host.name.clone(), t.ext_host.ip.clone()),
                RESTART_BYTES_SNAT,
                t.egress(&c.chassis).map_or_else(
                    || "to the external host".to_string(),
                    |e| format!("through SNAT on {} to the external host", e.at),
                ),
            ),
        ];
        let mut ids = Vec::new();
        for (from, (to, to_ip), bytes, how) in &transfers {
            match self.sim.start_tcp(&from.name, to, story_port() + 1, *bytes) {
                Ok(id) => ids.push((
                    id,
                    *bytes,
                    format!(
                        "  tcp {} ({}) -> {to} ({to_ip}), {how}",
                        from.name, from.chassis
                    ),
                )),
                Err(e) => {
                    self.p
                        .result(&format!("  tcp {} -> {to}: FAILED: {e:#}", from.name));
                    return false;
                }
            }
        }
        let mut ok = true;
        // Both transfers moving data first.
        if !self.sim.run_until(STEP_LIMIT, |s| {
            ids.iter()
                .all(|(id, _, _)| s.tcp_result(id).is_some_and(|r| r.bytes_acked > 0))
        }) {
            self.p
                .result("  FAILED: the transfers did not start moving data");
            return false;
        }
        let (done, disrupted) = match kind {
            Scenario::DbRebuild => self.rebuild_with_restarts(),
            _ => self.restart_all(),
        };
        ok &= disrupted;
        let progress: Vec<String> = ids
            .iter()
            .map(|(id, bytes, _)| {
                let acked = self.sim.tcp_result(id).map_or(0, |r| r.bytes_acked);
                format!("{}: {acked} of {bytes} bytes", id.from)
            })
            .collect();
        self.p.result(&format!(
            "  {done} while the transfers ran ({})",
            progress.join(", ")
        ));
        let mid_transfer = ids.iter().all(|(id, bytes, _)| {
            self.sim
                .tcp_result(id)
                .is_some_and(|r| r.bytes_acked < *bytes)
        });
        if !mid_transfer {
            ok = false;
            self.p.result(
                "  FAILED: a transfer finished before the disruption was over (nothing was tested)",
            );
        }
        self.sim.run_until(STEP_LIMIT, |s| {
            ids.iter()
                .all(|(id, _, _)| s.tcp_result(id).is_some_and(|r| r.finished()))
        });
        for (id, bytes, line) in &ids {
            match self.sim.tcp_result(id) {
                Some(r) if r.complete() && r.retransmitted == 0 && r.resets == 0 => {
                    self.p.result(&format!(
                        "{line}: {} bytes in {}, {} verified, 0 segments retransmitted, 0 resets, longest stall {}",
                        r.bytes_received,
                        ms(r.elapsed_us),
                        r.bytes_verified,
                        ms(r.stall_max_us)
                    ));
                }
                Some(r) => {
                    ok = false;
                    self.p.result(&format!(
                        "{line}: FAILED: {} of {bytes} bytes verified, {} segments retransmitted, {} resets ({})",
                        r.bytes_verified, r.retransmitted, r.resets, r.outcome
                    ));
                }
                None => {
                    ok = false;
                    self.p.result(&format!("{line}: FAILED: no record"));
                }
            }
        }
        // The control plane is whole again: every chassis installs the current NB.
        match self.sim.sync_hv(STEP_LIMIT) {
            Ok(()) => self.p.result(
                "  afterwards every chassis installed the current NB again (--wait=hv reached)",
            ),
            Err(e) => {
                ok = false;
                self.p.result(&format!("  afterwards: FAILED: {e:#}"));
            }
        }
        let zones_after = self.sim.zones();
        for (ch, (before, flushes_before)) in &zones_before {
            match zones_after
                .get(ch)
                .map(|(z, f)| (z, f.saturating_sub(*flushes_before)))
            {
                Some((after, flushes)) if after == before && flushes == 0 => {
                    self.p.result(&format!(
                        "  {ch}: zone map unchanged ({} zones), no zone flushed",
                        after.len()
                    ));
                }
                Some((after, flushes)) => {
                    ok = false;
                    self.p.result(&format!(
                        "  {ch}: FAILED: zones {before:?} became {after:?}, {flushes} flushes"
                    ));
                }
                None => {
                    ok = false;
                    self.p
                        .result(&format!("  {ch}: FAILED: the chassis is gone"));
                }
            }
        }
        ok
    }

    /// Ping `dst` from `host` `count` times and wait for the outcome.
    fn ping(&mut self, host: &str, dst: &str, count: u64) -> anyhow::Result<PingResult> {
        let id = self.sim.start_ping(host, dst, count)?;
        self.sim
            .run_until(STEP_LIMIT, |s| s.ping_result(&id).is_some_and(|r| r.done));
        match self.sim.ping_result(&id) {
            Some(r) => Ok(r),
            None => bail!("no ping record for {host}"),
        }
    }

    /// A TCP transfer of `bytes` from `from` to `to`, waited for.
    fn tcp(&mut self, from: &str, to: &str, bytes: u64) -> anyhow::Result<TcpResult> {
        let id: TcpId = self.sim.start_tcp(from, to, story_port(), bytes)?;
        self.sim.run_until(STEP_LIMIT, |s| {
            s.tcp_result(&id).is_some_and(|r| r.finished())
        });
        match self.sim.tcp_result(&id) {
            Some(r) => Ok(r),
            None => bail!("no TCP record for {from} -> {to}"),
        }
    }

    /// From now on, ping every host that attaches itself to a new VIF port (see
    /// [`SimHost::after_step`]).
    pub fn watch_new_hosts(&mut self) {
        for (name, _) in self.sim.vif_hosts() {
            self.known.insert(name);
        }
        self.watching = true;
    }

    fn check_new_hosts(&mut self) {
        let now = self.sim.now();
        if std::mem::take(&mut self.nb_dirty) {
            let present = self.sim.vif_hosts();
            // A port deleted and added again is a new host again.
            self.known
                .retain(|k| present.iter().any(|(name, _)| name == k));
            for (name, sw) in present {
                if self.known.insert(name.clone()) {
                    self.waiting.push((name, sw, now));
                }
            }
        }
        let mut still_waiting = Vec::new();
        for (name, sw, since) in std::mem::take(&mut self.waiting) {
            let Some(h) = self.sim.host_info(&name) else {
                continue; // its port went away
            };
            let ready = self.sim.host_ready(&name) && h.ip.is_some() && self.sim.ports_ready();
            if !ready {
                if now.saturating_sub(since) >= NEW_HOST_PING_LIMIT {
                    self.p.result(&format!(
                        "host {name} on {} attached, but {} after {NEW_HOST_PING_LIMIT:?}",
                        h.place,
                        if h.ip.is_none() {
                            "it has no address"
                        } else {
                            "its port is not in the chassis's program"
                        }
                    ));
                } else {
                    still_waiting.push((name, sw, since));
                }
                continue;
            }
            let ip = h.ip.clone().unwrap_or_default();
            self.p.info(&format!(
                "host {name} ({ip}) attached on {}; pinging it",
                h.place
            ));
            // Pinged from a topology host on its switch when there is one, else from the
            // first host (through the router).
            let from = self
                .topo
                .vms
                .iter()
                .find(|v| v.switch == sw)
                .unwrap_or(&self.topo.vms[0])
                .name
                .clone();
            match self.sim.start_ping(&from, &ip, 1) {
                Ok(id) => self.pinging.push((h, id, now)),
                Err(e) => self.p.result(&format!(
                    "host {name} ({ip}) on {}: cannot ping it: {e:#}",
                    h.place
                )),
            }
        }
        self.waiting = still_waiting;
        let mut still = Vec::new();
        for (h, id, since) in std::mem::take(&mut self.pinging) {
            let ip = h.ip.clone().unwrap_or_default();
            match self.sim.ping_result(&id) {
                Some(r) if r.answered > 0 => {
                    let rtt = r.rtts_us.first().copied().unwrap_or(0);
                    self.p.result(&format!(
                        "host {} ({ip}{}) on {} answers ping: {}",
                        h.name,
                        if h.dhcp { ", by DHCP" } else { "" },
                        h.place,
                        ms(rtt)
                    ));
                }
                Some(r) if r.done && now.saturating_sub(since) >= NEW_HOST_PING_LIMIT => {
                    self.p.result(&format!(
                        "host {} ({ip}) on {} does not answer ping (no reply within {NEW_HOST_PING_LIMIT:?})",
                        h.name, h.place
                    ));
                }
                Some(r) if r.done => {
                    // Not answered (the port may still be coming up): try again.
                    match self.sim.start_ping(&r.from, &ip, 1) {
                        Ok(id) => still.push((h, id, since)),
                        Err(e) => self.p.result(&format!(
                            "host {} ({ip}) on {}: cannot ping it: {e:#}",
                            h.name, h.place
                        )),
                    }
                }
                None => self.p.result(&format!(
                    "host {} ({ip}) on {}: its ping session is gone",
                    h.name, h.place
                )),
                _ => still.push((h, id, since)),
            }
        }
        self.pinging = still;
    }
}

/// The TCP port the story's receivers listen on.
fn story_port() -> u16 {
    5001
}

impl SimHost for Sandbox {
    fn db_connect(&mut self) -> SessionId {
        self.sim.db_connect()
    }
    fn db_input(&mut self, sid: SessionId, data: &[u8]) {
        self.nb_dirty = true;
        self.sim.db_input(sid, data)
    }
    fn db_poll_output(&mut self, sid: SessionId) -> Option<Vec<u8>> {
        self.sim.db_poll_output(sid)
    }
    fn db_closed(&self, sid: SessionId) -> bool {
        self.sim.db_closed(sid)
    }
    fn db_disconnect(&mut self, sid: SessionId) {
        self.sim.db_disconnect(sid)
    }
    fn now(&self) -> Duration {
        self.sim.now()
    }
    fn next_deadline(&self) -> Option<Duration> {
        self.sim.next_deadline()
    }
    fn advance_to(&mut self, now: Duration) {
        self.sim.advance_to(now)
    }
    fn after_step(&mut self) {
        if self.watching {
            self.check_new_hosts();
        }
        self.ctl.poll(&self.sim, &self.p);
        for line in self.sim.take_log() {
            self.p.log(&line);
        }
    }
    fn control(&mut self, c: Control) {
        self.ctl.handle(&mut self.sim, &self.p, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_sim::world::streams::{StreamKind, StreamSpec};

    /// A database rebuild loses no datagram of a UDP exchange with the external host through
    /// the gateway's SNAT, whenever it comes relative to the datagrams: in flight (sent just
    /// before), or sent a few milliseconds after, when the controllers install the programs
    /// of the rebuilt SB (which has lost every `MAC_Binding`: without the neighbours written
    /// again, the router turns the first datagram to the external host into an ARP request).
    /// The sandbox's `control_socket_drives_the_sandbox` lost one this way, now and then,
    /// depending on when the wall clock let the rebuild land.
    #[test]
    fn a_database_rebuild_loses_no_datagram_whenever_it_lands() {
        let topo = Topology::default_for(2);
        let mut sb = Sandbox::new(7, topo, Printer::new(true, false)).expect("sandbox");
        sb.come_up().expect("the sandbox comes up");
        let spec = StreamSpec {
            port: 7000,
            ..StreamSpec::new("u1", StreamKind::Udp, "vm3", "ext1")
        };
        let s = sb.sim.start_stream(spec).expect("stream");
        let t0 = sb.sim.now();
        // Warm-up: the router learns ext1's address (its first datagram becomes the ARP,
        // judged lost after a second).
        sb.sim.run_for(Duration::from_millis(1500));
        let warm = sb.sim.stream_report(&s).lost;
        let mut k = 160u32;
        // The rebuild lands this long after a datagram was sent (10 ms apart).
        for after_us in [0u64, 30, 3000, 5000, 7000] {
            let at = t0 + Duration::from_millis(10) * k + Duration::from_micros(after_us);
            sb.sim.advance_to(at);
            sb.sim.rebuild_databases().expect("rebuild");
            sb.sim.run_for(Duration::from_millis(1500));
            let lost = sb.sim.stream_report(&s).lost;
            assert_eq!(
                lost, warm,
                "a rebuild {after_us} us after a datagram was sent lost datagrams"
            );
            k += 300;
        }
        assert!(
            sb.sim.stream_report(&s).bytes > 0,
            "the exchange ran: {:?}",
            sb.sim.stream_report(&s)
        );
    }
}
