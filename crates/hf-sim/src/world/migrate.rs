//! Live migration in the world (DESIGN "Live migration", incident C): the hypervisor's part
//! ([`World::start_migration`]) and the whole story with the CMS's NB steps
//! ([`World::migrate`]).
//!
//! The hypervisor's part, on the world's clock:
//!
//! 1. The destination's device appears: a datapath port with the VM's MAC on the destination
//!    chassis (its controller claims it as an additional chassis; its datapath pulls the
//!    port's state from the source).
//! 2. Pre-copy ([`MigrationPlan::precopy`]): the VM runs on the source.
//! 3. Stop: the source's device is stopped ([`hf_datapath::Datapath::stop_port`], as QEMU
//!    stops the rings), then the VM pauses once what was already on its wire has reached it.
//! 4. Pause ([`MigrationPlan::pause`], DESIGN's 30 ms): the VM sends and takes nothing.
//! 5. Resume on the destination: the same host (its whole TCP/IP state) is attached there, the
//!    source's device goes away, and the VM announces itself (a RARP, or a gratuitous ARP
//!    when the strategy is `garp`).
//!
//! [`World::migrate`] wraps it in the CMS's steps: `options:requested-chassis="src,dst"` and
//! `options:activation-strategy` first, then, [`MigrationPlan::final_step_after`] after the
//! resume, `requested-chassis=dst` without the strategy.

use std::time::Duration;

use serde::Serialize;

use super::{HostSlot, World, nb};
use crate::net::Link;

/// How a migration runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationPlan {
    /// How long the VM runs on the source once the destination's device exists.
    pub precopy: Duration,
    /// The hypervisor's downtime.
    pub pause: Duration,
    /// `options:activation-strategy` (and what the resumed VM sends: a RARP unless the list
    /// has no `rarp`, then a gratuitous ARP).
    pub strategy: String,
    /// When the CMS names the destination alone, after the resume (`None`: it does not).
    pub final_step_after: Option<Duration>,
}

impl Default for MigrationPlan {
    fn default() -> MigrationPlan {
        MigrationPlan {
            precopy: Duration::from_millis(200),
            pause: Duration::from_millis(30),
            strategy: "rarp".into(),
            final_step_after: Some(Duration::from_millis(100)),
        }
    }
}

/// What one migration did: the hypervisor's times, and what the datapaths moved (from the
/// destination's [`hf_datapath::MigrationStats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MigrationRecord {
    /// The host (its logical port).
    pub host: String,
    /// Source and destination chassis.
    pub from: String,
    /// Destination chassis.
    pub to: String,
    /// The pause (µs).
    pub pause_us: u64,
    /// Virtual times (µs): started, device stopped, VM paused, resumed.
    pub started_us: u64,
    /// The source's device stopped.
    pub stopped_us: Option<u64>,
    /// The VM paused.
    pub paused_us: Option<u64>,
    /// The VM resumed on the destination.
    pub resumed_us: Option<u64>,
    /// Connections imported by the destination, all batches.
    pub entries_moved: u64,
    /// Bytes of the batches.
    pub bytes_moved: u64,
    /// Connections in the pre-copy.
    pub precopy_entries: u64,
    /// Connections in the deltas.
    pub delta_entries: u64,
    /// Connections in the final delta.
    pub final_delta_entries: u64,
    /// Frames the destination held for the port.
    pub buffered: u64,
    /// Held frames dropped because the source had delivered them.
    pub trimmed: u64,
    /// Held frames dropped for room.
    pub overflowed: u64,
    /// Held frames dropped for age.
    pub expired: u64,
    /// Connections refused because the destination's own held their addresses.
    pub collided: u64,
    /// When the destination saw the VM's announcement, and when it released what it held
    /// (µs): the final delta's round trip and import are the difference.
    pub activated_us: Option<u64>,
    /// See [`MigrationRecord::activated_us`].
    pub released_us: Option<u64>,
    /// The destination's outcome (`completed`, `completed-without-final`, `aborted: ...`), or
    /// the hypervisor's while it runs (`pre-copy`, `paused`, ...).
    pub outcome: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Precopy { until: Duration },
    Stopping { since: Duration },
    Paused { until: Duration },
}

/// A migration the hypervisor is running.
#[derive(Debug)]
pub(crate) struct HvMigration {
    pub(crate) host: String,
    pub(crate) from: usize,
    pub(crate) to: usize,
    pause: Duration,
    garp: bool,
    pub(crate) phase: Phase,
    pub(crate) rec: MigrationRecord,
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The longest the hypervisor waits for the source's wire to drain before pausing.
const DRAIN: Duration = Duration::from_millis(1);

impl World {
    /// The hypervisor's part of migrating the VM on `host` to chassis `to` (see the module
    /// docs): returns at once; the world runs it on its clock. The NB steps are the CMS's.
    pub fn start_migration(
        &mut self,
        host: &str,
        to: &str,
        plan: &MigrationPlan,
    ) -> Result<(), String> {
        let to_i = self.chassis_index(to)?;
        let slot = self
            .hosts
            .get(host)
            .ok_or_else(|| format!("migrate: no host {host}"))?;
        if slot.net.is_some() {
            return Err(format!(
                "migrate: {host} is an external host on a provider network, not a VM"
            ));
        }
        if slot.chassis == to_i {
            return Err(format!("migrate: {host} already runs on {to}"));
        }
        if self.hv.iter().any(|m| m.host == host) {
            return Err(format!("migrate: {host} is already migrating"));
        }
        let from = slot.chassis;
        let mac = slot.host.mac();
        self.chassis[to_i].add_port(host, Some(mac));
        let now = self.now;
        let rec = MigrationRecord {
            host: host.to_string(),
            from: self.chassis[from].name().to_string(),
            to: to.to_string(),
            pause_us: us(plan.pause),
            started_us: us(now),
            outcome: "pre-copy".into(),
            ..MigrationRecord::default()
        };
        self.event(format!(
            "migration of {host} from {} to {to} started (pre-copy {:?}, pause {:?})",
            rec.from, plan.precopy, plan.pause
        ));
        self.hv.push(HvMigration {
            host: host.to_string(),
            from,
            to: to_i,
            pause: plan.pause,
            garp: !plan.strategy.split(',').any(|s| s.trim() == "rarp")
                && plan.strategy.split(',').any(|s| s.trim() == "garp"),
            phase: Phase::Precopy {
                until: now + plan.precopy,
            },
            rec,
        });
        self.settle();
        Ok(())
    }

    /// Moves the hypervisor's migrations along; true when something happened.
    pub(crate) fn step_migrations(&mut self) -> bool {
        let now = self.now;
        let mut moved = false;
        let mut i = 0;
        while i < self.hv.len() {
            let m = &self.hv[i];
            match m.phase {
                Phase::Precopy { until } if now >= until => {
                    let (host, from) = (m.host.clone(), m.from);
                    self.chassis[from].datapath_mut().stop_port(&host);
                    self.hv[i].phase = Phase::Stopping { since: now };
                    self.hv[i].rec.stopped_us = Some(us(now));
                    self.hv[i].rec.outcome = "stopping".into();
                    moved = true;
                }
                Phase::Stopping { since } => {
                    let drained = self
                        .hosts
                        .get(&m.host)
                        .is_none_or(|s| s.down.in_flight() == 0);
                    if drained || now >= since + DRAIN {
                        let pause = m.pause;
                        if let Some(s) = self.hosts.get_mut(&self.hv[i].host) {
                            s.host.pause(now);
                        }
                        self.hv[i].phase = Phase::Paused { until: now + pause };
                        self.hv[i].rec.paused_us = Some(us(now));
                        self.hv[i].rec.outcome = "paused".into();
                        moved = true;
                    }
                }
                Phase::Paused { until } if now >= until => {
                    let m = self.hv.remove(i);
                    self.resume_on(m);
                    moved = true;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        self.freeze_finished();
        moved
    }

    fn resume_on(&mut self, m: HvMigration) {
        let now = self.now;
        let Some(mut slot) = self.hosts.remove(&m.host) else {
            return;
        };
        // The source's device goes; the destination's (made at the start) gets the VM.
        self.chassis[m.from].remove_port(&m.host);
        self.chassis[m.from].datapath_mut().start_port(&m.host);
        let cfg = slot.up.config().clone();
        slot.up = Link::new(
            cfg.clone(),
            self.rng.fork(&format!("{} up on {}", m.host, m.to)),
        );
        slot.down = Link::new(cfg, self.rng.fork(&format!("{} down on {}", m.host, m.to)));
        slot.chassis = m.to;
        if let Some(spec) = slot.spec.as_mut() {
            spec.requested_chassis = Some(self.chassis[m.to].name().to_string());
        }
        slot.host.resume(now);
        if m.garp {
            slot.host.announce_garp();
        } else {
            slot.host.announce_rarp();
        }
        let mut rec = m.rec;
        rec.resumed_us = Some(us(now));
        rec.outcome = "resumed".into();
        self.event(format!(
            "migration of {}: resumed on {} after {:?}",
            m.host,
            self.chassis[m.to].name(),
            m.pause
        ));
        self.hosts.insert(m.host.clone(), slot);
        self.hv_done.push(rec);
    }

    /// When the hypervisor next has work.
    pub(crate) fn migration_deadline(&self) -> Option<Duration> {
        self.hv
            .iter()
            .map(|m| match m.phase {
                Phase::Precopy { until } | Phase::Paused { until } => until,
                Phase::Stopping { since } => self
                    .hosts
                    .get(&m.host)
                    .and_then(|s| s.down.next_deadline())
                    .map_or(since + DRAIN, |d| d.min(since + DRAIN)),
            })
            .min()
    }

    /// Every migration, finished and running, with what the datapaths moved. A migration's
    /// figures are the destination's while it runs; once the destination is done with it they
    /// are kept in the record ([`World::step_migrations`] freezes them), so a later restart or
    /// handoff of that datapath, or a later migration to it, does not change them.
    pub fn migrations(&self) -> Vec<MigrationRecord> {
        let mut v: Vec<MigrationRecord> = self.hv_done.clone();
        v.extend(self.hv.iter().map(|m| m.rec.clone()));
        for r in &mut v {
            // An aborted migration keeps its outcome; what the destination had (if it still
            // has it) is shown beside it.
            if (!is_final(&r.outcome) || r.outcome.starts_with("aborted by"))
                && let Some(s) = self.destination_stats(r)
            {
                fill(r, &s);
            }
        }
        v
    }

    /// The destination datapath's figures for migration `r`: the latest of its incoming
    /// migrations of the host that started with or after `r`.
    fn destination_stats(&self, r: &MigrationRecord) -> Option<hf_datapath::MigrationStats> {
        self.chassis_by_name(&r.to)?
            .datapath()
            .migration_stats()
            .into_iter()
            .rfind(|s| s.port == r.host && s.role == "in" && s.started_us >= r.started_us)
    }

    /// Keeps the destination's figures in the records of resumed migrations it is done with.
    fn freeze_finished(&mut self) {
        for k in 0..self.hv_done.len() {
            if is_final(&self.hv_done[k].outcome) {
                continue;
            }
            if let Some(s) = self.destination_stats(&self.hv_done[k])
                && s.outcome != "running"
            {
                fill(&mut self.hv_done[k], &s);
            }
        }
    }

    /// The hypervisor gives up migrating `host` (the destination died, or the operator
    /// cancelled) while the VM still runs on the source: the destination's device goes, the
    /// VM stays where it is. Refused once the VM is stopped (then it resumes on the
    /// destination).
    pub fn abort_migration(&mut self, host: &str) -> Result<(), String> {
        let Some(k) = self.hv.iter().position(|m| m.host == host) else {
            return Err(format!("abort_migration: {host} is not migrating"));
        };
        if !matches!(self.hv[k].phase, Phase::Precopy { .. }) {
            return Err(format!(
                "abort_migration: {host} is already stopped; it resumes on the destination"
            ));
        }
        let m = self.hv.remove(k);
        self.chassis[m.to].remove_port(host);
        let mut rec = m.rec;
        rec.outcome = "aborted by the hypervisor".into();
        self.event(format!(
            "migration of {host} to {} aborted; it stays on {}",
            rec.to, rec.from
        ));
        self.hv_done.push(rec);
        self.settle();
        Ok(())
    }

    /// Adds `n` established TCP connections from the VM on `port` (its first address, ports
    /// 20000 and up) to `peer:443`, tracked in the port's own zone on its chassis: synthetic
    /// state beside a scenario's real streams (a migration must move all of it). Returns how
    /// many the conntrack table holds in that zone afterwards.
    pub fn add_synthetic_connections(
        &mut self,
        port: &str,
        peer: std::net::IpAddr,
        n: u16,
    ) -> Result<u32, String> {
        use hf_conntrack::fuzzing::{Seg, tcp_frame};
        use hf_conntrack::{CtAction, Owner};
        use hf_wire::tcp_flags::{ACK, SYN};
        let chassis = self
            .host_chassis(port)
            .ok_or_else(|| format!("no VM on {port}"))?
            .to_string();
        let vm = self
            .host(port)
            .and_then(|h| h.ipv4())
            .ok_or_else(|| format!("{port} has no IPv4 address"))?;
        let now = self.now;
        let dp = self
            .datapath_mut(&chassis)
            .ok_or_else(|| format!("no chassis {chassis}"))?;
        let zone = *dp
            .zones()
            .get(&format!("lsp/{port}"))
            .ok_or_else(|| format!("{chassis} has no zone for {port}"))?;
        let ct = dp.conntrack_mut();
        for i in 0..n {
            let a = (std::net::IpAddr::V4(vm), 20000u16.wrapping_add(i));
            let b = (peer, 443);
            let (x, y) = (1000u32, 9000u32);
            for (seg, commit) in [
                (Seg::new(a, b, SYN, (x, 0), 0), true),
                (Seg::new(b, a, SYN | ACK, (y, x + 1), 0), false),
                (Seg::new(a, b, ACK, (x + 1, y + 1), 0), false),
            ] {
                let f = tcp_frame(&seg);
                let p = hf_wire::parse(&f, 0, 0).map_err(|e| format!("synthetic frame: {e:?}"))?;
                let act = if commit {
                    CtAction::commit(Owner(1))
                } else {
                    CtAction::lookup()
                };
                ct.process(zone, &p, now, &act);
            }
        }
        Ok(ct.zone_count(zone))
    }

    /// Whether the hypervisor is migrating `host` now.
    pub fn migrating(&self, host: &str) -> bool {
        self.hv.iter().any(|m| m.host == host)
    }

    /// A whole live migration of the VM on `port` to chassis `to`: the CMS's first NB step
    /// (`requested-chassis="src,dst"`, `activation-strategy`), the hypervisor's part, and,
    /// [`MigrationPlan::final_step_after`] later, the CMS's last step (`requested-chassis=dst`).
    /// Runs the world until then; returns the migration's record.
    pub fn migrate(
        &mut self,
        port: &str,
        to: &str,
        plan: &MigrationPlan,
    ) -> Result<MigrationRecord, String> {
        let from = self
            .host_chassis(port)
            .ok_or_else(|| format!("migrate: no VM on port {port}"))?
            .to_string();
        self.chassis_index(to)?;
        let both = format!("{from},{to}");
        let mut opts = vec![("requested-chassis", both.as_str())];
        if !plan.strategy.is_empty() {
            opts.push(("activation-strategy", plan.strategy.as_str()));
        }
        self.db
            .transact(super::NB, nb::set_port_options(port, &opts, &[]), self.now)
            .map_err(|e| format!("migrate {port}: NB: {e}"))?;
        self.settle();
        let started = self.now;
        self.start_migration(port, to, plan)?;
        let limit = plan.precopy + plan.pause + Duration::from_secs(5);
        if !self.run_until(|w| !w.migrating(port), limit) {
            return Err(format!("migrate {port}: not resumed after {limit:?}"));
        }
        // Until the destination has released what it held (or gave up): the migration's
        // record is then final.
        let t0 = us(started);
        let settled = |w: &World| {
            w.migrations()
                .iter()
                .rev()
                .find(|r| r.host == port && r.started_us >= t0)
                .is_some_and(|r| r.outcome != "resumed")
        };
        if !self.run_until(settled, Duration::from_secs(1)) {
            return Err(format!(
                "migrate {port}: the destination did not activate it within 1 s of the resume"
            ));
        }
        if let Some(after) = plan.final_step_after {
            self.run_for(after);
            self.db
                .transact(
                    super::NB,
                    nb::set_port_options(
                        port,
                        &[("requested-chassis", to)],
                        &["activation-strategy"],
                    ),
                    self.now,
                )
                .map_err(|e| format!("migrate {port}: NB: {e}"))?;
            self.settle();
        }
        self.migrations()
            .into_iter()
            .rfind(|r| r.host == port && r.started_us >= us(started))
            .ok_or_else(|| format!("migrate {port}: no record"))
    }
}

/// Whether a record's outcome is the destination's last word (not the hypervisor's phase).
fn is_final(outcome: &str) -> bool {
    !matches!(outcome, "pre-copy" | "stopping" | "paused" | "resumed")
}

/// Copies the destination's figures into a record; its outcome too once the VM resumed.
fn fill(r: &mut MigrationRecord, s: &hf_datapath::MigrationStats) {
    r.entries_moved = s.entries_moved;
    r.bytes_moved = s.bytes_moved;
    r.precopy_entries = s.precopy_entries;
    r.delta_entries = s.delta_entries;
    r.final_delta_entries = s.final_delta_entries;
    r.buffered = s.buffered;
    r.trimmed = s.trimmed;
    r.overflowed = s.overflowed;
    r.expired = s.expired;
    r.collided = s.collided;
    r.activated_us = s.activated_us;
    r.released_us = s.completed_us.filter(|_| s.outcome != "running");
    if r.resumed_us.is_some() && s.outcome != "running" {
        r.outcome = s.outcome.clone();
    }
}

/// The host slot is a VM the hypervisor is migrating: NB's requested-chassis follows it
/// without a new host.
pub(crate) fn keeps_host(slot: &HostSlot, wanted: &super::hosts::HostSpec) -> bool {
    slot.spec.as_ref().is_some_and(|s| {
        let mut s = s.clone();
        s.requested_chassis = wanted.requested_chassis.clone();
        s == *wanted
    })
}
