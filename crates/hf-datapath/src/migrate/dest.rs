//! The destination's side of a migration: pulls, imports, the hold of the port's traffic,
//! activation, the release of the held frames, and the timers of both sides.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use hf_conntrack::{CtExport, ImportPolicy, Tuple};
use hf_pipeline::Ingress;

use super::*;
use crate::core::{Datapath, Level};

impl Datapath {
    // ----- the destination's side -----

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_conns(
        &mut self,
        port: String,
        epoch: u64,
        phase: ConnsPhase,
        zones: Vec<(u16, String)>,
        conns: CtExport,
        delivered: Vec<u64>,
        now: Duration,
    ) {
        let Some(inc) = self.mig.incoming.get(&port) else {
            return;
        };
        if inc.epoch != epoch {
            return;
        }
        let names: HashMap<u16, &String> = zones.iter().map(|(z, n)| (*z, n)).collect();
        let local = &self.zones;
        let remap = |z: u16| names.get(&z).and_then(|n| local.get(*n)).copied();
        let mut imported_now = Vec::new();
        for c in &conns.conns {
            if let Some(z) = remap(c.orig.zone) {
                imported_now.push(Tuple { zone: z, ..c.orig });
            }
        }
        let rep = match self
            .ct
            .import_with(&conns, remap, now, ImportPolicy::SameConnection)
        {
            Ok(r) => r,
            Err(e) => {
                self.log(
                    Level::Error,
                    format!("migration of {port}: connections refused: {e}"),
                );
                return;
            }
        };
        let bytes = postcard::to_allocvec(&conns).map_or(0, |b| b.len() as u64);
        let Some(inc) = self.mig.incoming.get_mut(&port) else {
            return;
        };
        inc.imported.extend(imported_now);
        inc.lost_since = None;
        let n = conns.conns.len() as u64;
        let st = &mut inc.stats;
        st.entries_moved += rep.imported as u64;
        st.bytes_moved += bytes;
        st.collided += rep.collided as u64;
        st.unmapped += rep.malformed as u64;
        match phase {
            ConnsPhase::Precopy => st.precopy_entries += n,
            ConnsPhase::Delta => st.delta_entries += n,
            ConnsPhase::Final => st.final_delta_entries += n,
        }
        if rep.collided > 0 {
            let c = rep.collided;
            self.log(
                Level::Warn,
                format!(
                    "migration of {port}: {c} connections not imported: another connection here \
                     holds their addresses (a NAT allocation of this chassis)"
                ),
            );
        }
        if phase == ConnsPhase::Final {
            self.trim = delivered.iter().fold(HashMap::new(), |mut m, h| {
                *m.entry(*h).or_insert(0u32) += 1;
                m
            });
            if let Some(inc) = self.mig.incoming.get_mut(&port) {
                inc.stats.delivered_reported = delivered.len() as u64;
            }
            self.complete(&port, true, now);
        }
    }

    /// A local port went away.
    pub(crate) fn mig_port_removed(&mut self, name: &str) {
        self.mig.stopped.remove(name);
    }

    /// The program changed (or a port came or went): start, keep or end migrations, and hold
    /// exactly the ports that wait.
    pub(crate) fn sync_migrations(&mut self, now: Duration) {
        // Activations made here (or by the process this one took over from) stand until the
        // program stops saying the port waits.
        let again: Vec<u32> = self
            .mig
            .activated
            .iter()
            .filter_map(|n| self.ports.get(n).map(|p| p.id))
            .filter(|id| !self.pipeline.port_active(*id))
            .collect();
        for id in again {
            self.pipeline.set_port_active(id, true);
        }
        let wanted: Vec<(String, Option<String>, Vec<crate::proto::AnnounceMsg>)> = self
            .program
            .as_ref()
            .map(|p| {
                p.migrations
                    .iter()
                    .filter(|m| m.incoming)
                    .map(|m| (m.port.clone(), m.peers.first().cloned(), m.announce.clone()))
                    .collect()
            })
            .unwrap_or_default();
        // Local ports waiting for activation: each has an incoming migration (a source when
        // the program names one).
        let waiting: Vec<(String, u32)> = self
            .ports
            .iter()
            .filter(|(_, p)| !self.pipeline.port_active(p.id))
            .map(|(n, p)| (n.clone(), p.id))
            .collect();
        for (name, _) in &waiting {
            let (source, announce) = wanted
                .iter()
                .find(|(p, _, _)| p == name)
                .map(|(_, s, a)| (s.clone(), a.clone()))
                .unwrap_or((None, Vec::new()));
            let same = self
                .mig
                .incoming
                .get(name)
                .is_some_and(|i| i.source == source && i.activated.is_none());
            if same {
                if let Some(i) = self.mig.incoming.get_mut(name) {
                    i.announce = announce;
                }
                continue;
            }
            if self.mig.incoming.contains_key(name) {
                self.abort_incoming(name, "the source changed", now);
            }
            // The port comes back here: what this chassis handed over earlier is live again.
            if let Some(o) = self.mig.outgoing.remove(name)
                && !o.finished
            {
                self.mig
                    .finish(o.stats, "aborted: the port migrates here".into(), now);
            }
            self.mig.next_epoch += 1;
            let epoch = (now.as_micros() as u64) << 16 | (self.mig.next_epoch & 0xffff);
            let stats = MigrationStats {
                port: name.clone(),
                role: "in".into(),
                peer: source.clone().unwrap_or_default(),
                epoch,
                started_us: us(now),
                outcome: "running".into(),
                ..MigrationStats::default()
            };
            self.log(
                Level::Info,
                match &source {
                    Some(s) => format!("port {name}: migrating here from {s}; pulling its state"),
                    None => format!("port {name}: waiting for activation; its traffic is held"),
                },
            );
            self.mig.incoming.insert(
                name.clone(),
                Incoming {
                    source,
                    epoch,
                    pulled: false,
                    next_pull: now,
                    lost_since: None,
                    activated: None,
                    final_deadline: None,
                    imported: BTreeSet::new(),
                    held: VecDeque::new(),
                    held_bytes: 0,
                    from_port: VecDeque::new(),
                    announce,
                    stats,
                },
            );
        }
        // Incoming migrations whose port no longer waits (and was not activated here): the
        // CMS moved it elsewhere, or the port went away. The copy goes.
        let stale: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(n, i)| i.activated.is_none() && !waiting.iter().any(|(w, _)| w == *n))
            .map(|(n, _)| n.clone())
            .collect();
        for n in stale {
            self.abort_incoming(&n, "the port no longer waits here", now);
        }
        // Outgoing migrations whose port was released here (its device went away, or the
        // program no longer binds it here): what was handed over goes after a grace. The
        // destination may still ask for the final delta meanwhile (the device goes as the VM
        // resumes there, before its announcement arrives). A port bound here again keeps
        // everything.
        let grace = self.cfg.migration.release_grace;
        let names: Vec<String> = self.mig.outgoing.keys().cloned().collect();
        for n in names {
            let local = self.local_in_program(&n);
            if let Some(o) = self.mig.outgoing.get_mut(&n) {
                match (o.release_at, local) {
                    (None, false) => o.release_at = Some(now + grace),
                    (Some(_), true) => o.release_at = None,
                    _ => {}
                }
            }
        }
        self.apply_holds();
        self.track_delivery();
        self.pull_due(now);
    }

    pub(super) fn local_in_program(&self, port: &str) -> bool {
        self.ports.contains_key(port)
            && self.program.as_ref().is_some_and(|p| {
                p.datapaths.iter().any(|d| {
                    d.ports.iter().any(|q| {
                        q.name == port && matches!(q.location, crate::proto::LocationMsg::Local(_))
                    })
                })
            })
    }

    /// Holds traffic to every port with an incoming migration that has not completed.
    pub(super) fn apply_holds(&mut self) {
        let ids: Vec<(u32, bool)> = self
            .ports
            .iter()
            .map(|(n, p)| (p.id, self.mig.incoming.contains_key(n)))
            .collect();
        for (id, held) in ids {
            if self.pipeline.port_held(id) != held {
                self.pipeline.set_port_held(id, held);
            }
        }
    }

    /// Sends the pulls that are due, asking for sessions where there is none.
    pub(super) fn pull_due(&mut self, now: Duration) {
        let due: Vec<(String, String, u64)> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| !i.pulled && i.activated.is_none() && i.next_pull <= now)
            .filter_map(|(n, i)| Some((n.clone(), i.source.clone()?, i.epoch)))
            .collect();
        for (port, source, epoch) in due {
            match self.mig.peer_of(&source) {
                Some(peer) => {
                    self.state_send(
                        peer,
                        &StateMsg::Pull {
                            port: port.clone(),
                            epoch,
                        },
                    );
                    if let Some(i) = self.mig.incoming.get_mut(&port) {
                        i.pulled = true;
                    }
                }
                None => self.dial(&source, now),
            }
        }
    }

    pub(super) fn dial(&mut self, chassis: &str, now: Duration) {
        // A session dialed there whose hello has not come back yet counts as one.
        if self.mig.session_pending(chassis) || self.mig.peer_of(chassis).is_some() {
            return;
        }
        let ip = self.program.as_ref().and_then(|p| {
            p.chassis_table
                .iter()
                .find(|c| c.name == chassis)
                .and_then(|c| c.ip.parse::<IpAddr>().ok())
        });
        match ip {
            Some(ip) => {
                self.mig.dialing.insert(chassis.to_string());
                self.mig.dials.push_back(StateDial {
                    chassis: chassis.to_string(),
                    ip,
                });
            }
            None => {
                for i in self.mig.incoming.values_mut() {
                    if i.source.as_deref() == Some(chassis) {
                        i.next_pull = now + self.cfg.migration.retry;
                    }
                }
                self.log_once(Level::Warn, format_args!("state-noip:{chassis}"), || {
                    format!("state channel: chassis {chassis} has no encap IP in the program")
                });
            }
        }
    }

    pub(super) fn abort_incoming(&mut self, port: &str, why: &str, now: Duration) {
        let Some(inc) = self.mig.incoming.remove(port) else {
            return;
        };
        let mut removed = 0;
        for t in &inc.imported {
            if self.ct.remove_connection(t) {
                removed += 1;
            }
        }
        if let (Some(src), true) = (&inc.source, inc.pulled)
            && let Some(peer) = self.mig.peer_of(src)
        {
            self.state_send(
                peer,
                &StateMsg::Abort {
                    port: port.to_string(),
                    epoch: inc.epoch,
                    reason: why.to_string(),
                },
            );
        }
        let mut st = inc.stats;
        st.expired += inc.held.len() as u64;
        self.log(
            Level::Info,
            format!(
                "migration of {port} here ended before activation ({why}): {removed} imported \
                 connections and {} held frames dropped",
                inc.held.len()
            ),
        );
        self.mig.finish(st, format!("aborted: {why}"), now);
        self.apply_holds();
    }

    /// A held frame for local port `local` (from the pipeline's [`hf_pipeline::Destination::Held`]).
    pub(crate) fn hold_frame(
        &mut self,
        local: u32,
        datapath: u32,
        inport: u32,
        outport: u32,
        frame: &[u8],
        now: Duration,
    ) {
        let Some(name) = self.port_names.get(&local) else {
            return;
        };
        let cfg = &self.cfg.migration;
        let Some(inc) = self.mig.incoming.get_mut(name) else {
            return;
        };
        while inc
            .held
            .front()
            .is_some_and(|h| now.saturating_sub(h.at) > cfg.max_held_age)
        {
            if let Some(h) = inc.held.pop_front() {
                inc.held_bytes -= h.frame.len();
                inc.stats.expired += 1;
            }
        }
        while !inc.held.is_empty()
            && (inc.held.len() >= cfg.max_held_frames
                || inc.held_bytes + frame.len() > cfg.max_held_bytes)
        {
            if let Some(h) = inc.held.pop_front() {
                inc.held_bytes -= h.frame.len();
                inc.stats.overflowed += 1;
            }
        }
        inc.held_bytes += frame.len();
        inc.stats.buffered += 1;
        inc.held.push_back(HeldFrame {
            at: now,
            datapath,
            inport,
            outport,
            frame: frame.to_vec(),
        });
    }

    /// Whether any port is arriving (its frames from the port may be held, by name).
    pub(crate) fn ports_arriving(&self) -> bool {
        !self.mig.incoming.is_empty()
    }

    /// A frame from local port `name` (id `id`) while its migration waits: held (true) or to
    /// be processed now (false). Before activation, everything but the announcement that
    /// activates the port is held (the VM may send before its hypervisor's RARP: OVN drops
    /// that, which costs the VM its first segments); after it, everything until the final
    /// delta.
    pub(crate) fn hold_from_port(&mut self, name: &str, id: u32, frame: &[u8]) -> bool {
        if self.mig.incoming.is_empty() {
            return false;
        }
        let waiting = self.pipeline.activation_of(id);
        let Some(inc) = self.mig.incoming.get_mut(name) else {
            return false;
        };
        if inc.activated.is_none() && waiting.is_none_or(|a| a.activates(frame)) {
            return false;
        }
        if inc.from_port.len() < MAX_FROM_PORT {
            inc.from_port.push_back(frame.to_vec());
            inc.stats.held_from_port += 1;
        }
        true
    }

    /// The pipeline activated local port `name` (its RARP/GARP/NA, or the controller).
    pub(crate) fn on_port_activated(&mut self, name: &str, now: Duration) {
        self.mig.activated.insert(name.to_string());
        // `is_chassis_resident()` holds for it here from now on, before SB says so.
        if self.spec_cache.set_active(&self.mig.activated) {
            self.relocate();
        }
        let Some(inc) = self.mig.incoming.get_mut(name) else {
            return;
        };
        if inc.activated.is_some() {
            return;
        }
        inc.activated = Some(now);
        inc.stats.activated_us = Some(us(now));
        let announce = inc.announce.clone();
        let src = inc.source.clone();
        let epoch = inc.epoch;
        for a in &announce {
            self.announce(a);
        }
        let peer = src.as_deref().and_then(|s| self.mig.peer_of(s));
        match peer {
            Some(peer) => {
                self.state_send(
                    peer,
                    &StateMsg::Activated {
                        port: name.to_string(),
                        epoch,
                    },
                );
                let wait = self.cfg.migration.final_wait;
                if let Some(i) = self.mig.incoming.get_mut(name) {
                    i.final_deadline = Some(now + wait);
                }
            }
            // No source, or it cannot be reached: go on with what arrived.
            None => self.complete(name, false, now),
        }
    }

    pub(super) fn announce(&mut self, a: &crate::proto::AnnounceMsg) {
        let Ok(ip) = a.ip.parse::<std::net::Ipv4Addr>() else {
            self.log_once(Level::Warn, format_args!("announce-ip:{}", a.ip), || {
                format!("announce: {} is not an IPv4 address", a.ip)
            });
            return;
        };
        let Some(id) = self.ports.get(&a.via).map(|p| p.id) else {
            self.log_once(Level::Warn, format_args!("announce-via:{}", a.via), || {
                format!("announce of {ip}: no local port {} to send it by", a.via)
            });
            return;
        };
        let f = garp(a.mac, ip);
        self.queue_port_frame(id, &f);
        self.log(
            Level::Info,
            format!("announced {ip} at {} by port {}", mac_text(a.mac), a.via),
        );
    }

    /// Releases the held frames of `port` (after the final delta, or without it).
    pub(super) fn complete(&mut self, port: &str, got_final: bool, now: Duration) {
        let Some(mut inc) = self.mig.incoming.remove(port) else {
            return;
        };
        let id = self.ports.get(port).map(|p| p.id);
        if let Some(id) = id {
            self.pipeline.set_port_held(id, false);
            self.trim_port = Some(id);
        }
        let held = std::mem::take(&mut inc.held);
        let before_trim = self.trimmed;
        for h in held {
            if now.saturating_sub(h.at) > self.cfg.migration.max_held_age {
                inc.stats.expired += 1;
                continue;
            }
            let from = Ingress::Tunnel {
                datapath: h.datapath,
                inport: h.inport,
                outport: h.outport,
            };
            self.run(from, &h.frame, now, true);
        }
        inc.stats.trimmed = self.trimmed - before_trim;
        self.trim_port = None;
        self.trim.clear();
        let from_port = std::mem::take(&mut inc.from_port);
        for f in from_port {
            self.handle_port_frame(port, &f, now);
        }
        let outcome = if got_final {
            "completed"
        } else {
            "completed-without-final"
        };
        self.log(
            Level::Info,
            format!(
                "migration of {port} here {outcome}: {} connections moved, {} frames held, {} \
                 trimmed, {} overflowed, {} expired",
                inc.stats.entries_moved,
                inc.stats.buffered,
                inc.stats.trimmed,
                inc.stats.overflowed,
                inc.stats.expired
            ),
        );
        self.mig.finish(inc.stats, outcome.into(), now);
        self.apply_holds();
    }

    /// A delivery to the port being completed: false when the source had delivered the same
    /// frame (trimmed).
    pub(crate) fn trim_check(&mut self, id: u32, frame: &[u8]) -> bool {
        if self.trim_port != Some(id) || self.trim.is_empty() {
            return true;
        }
        let h = frame_hash(frame);
        match self.trim.get_mut(&h) {
            Some(n) if *n > 0 => {
                *n -= 1;
                self.trimmed += 1;
                false
            }
            _ => true,
        }
    }

    /// Migration timers: deltas, final waits, pull retries, copy expiry, release drops.
    pub(crate) fn migration_timeout(&mut self, now: Duration) {
        // Deltas.
        let due: Vec<(String, PeerId, u64, Duration)> = self
            .mig
            .outgoing
            .iter()
            .filter(|(_, o)| !o.finished && o.next_delta <= now)
            .map(|(n, o)| (n.clone(), o.peer, o.epoch, o.last_export))
            .collect();
        for (port, peer, epoch, since) in due {
            let sel = self.port_selection(&port).touched_since(since);
            let probe = self.ct.export(&sel, now);
            let interval = self.cfg.migration.delta_interval;
            if !probe.conns.is_empty() {
                let (n, bytes) =
                    self.send_conns(peer, &port, epoch, ConnsPhase::Delta, &sel, Vec::new(), now);
                if let Some(o) = self.mig.outgoing.get_mut(&port) {
                    o.stats.delta_entries += n;
                    o.stats.entries_moved += n;
                    o.stats.bytes_moved += bytes;
                }
            }
            if let Some(o) = self.mig.outgoing.get_mut(&port) {
                o.last_export = now;
                o.next_delta = now + interval;
            }
        }
        // Final waits that ran out: the source is silent.
        let late: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| i.final_deadline.is_some_and(|d| d <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in late {
            self.log(
                Level::Warn,
                format!("migration of {n}: no final delta from the source in time; going on"),
            );
            self.complete(&n, false, now);
        }
        // Copies whose source stayed away too long.
        let ttl = self.cfg.migration.copy_ttl;
        let expired: Vec<String> = self
            .mig
            .incoming
            .iter()
            .filter(|(_, i)| i.lost_since.is_some_and(|t| now.saturating_sub(t) >= ttl))
            .map(|(n, _)| n.clone())
            .collect();
        for n in expired {
            if let Some(i) = self.mig.incoming.get_mut(&n) {
                let mut gone = 0;
                for t in std::mem::take(&mut i.imported) {
                    if self.ct.remove_connection(&t) {
                        gone += 1;
                    }
                }
                i.lost_since = None;
                self.log(
                    Level::Info,
                    format!(
                        "migration of {n}: the source has been unreachable for {ttl:?}; the \
                         {gone} connections copied from it expire"
                    ),
                );
            }
        }
        // Releases whose grace is over.
        let drop: Vec<String> = self
            .mig
            .outgoing
            .iter()
            .filter(|(_, o)| o.release_at.is_some_and(|t| t <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for n in drop {
            let Some(o) = self.mig.outgoing.remove(&n) else {
                continue;
            };
            if !o.finished {
                self.mig.finish(o.stats.clone(), "released".into(), now);
            }
            let mut gone = 0;
            for t in &o.sent {
                if self.ct.remove_connection(t) {
                    gone += 1;
                }
            }
            self.log(
                Level::Info,
                format!(
                    "port {n} left for {}: {gone} handed-over connections removed",
                    o.stats.peer
                ),
            );
        }
        self.pull_due(now);
    }

    /// When [`Datapath::migration_timeout`] next has work.
    pub(crate) fn migration_deadline(&self) -> Option<Duration> {
        let mut t: Option<Duration> = None;
        let mut at = |d: Duration| t = Some(t.map_or(d, |x| x.min(d)));
        for o in self.mig.outgoing.values() {
            if !o.finished {
                at(o.next_delta);
            }
            if let Some(r) = o.release_at {
                at(r);
            }
        }
        for i in self.mig.incoming.values() {
            if let Some(d) = i.final_deadline {
                at(d);
            }
            // While the session to the source is being opened, its outcome (connected, failed,
            // closed) is what comes next, not the pull's retry: a pull due meanwhile would
            // wake the shell in a loop until the dial ends.
            if !i.pulled
                && i.activated.is_none()
                && i.source
                    .as_deref()
                    .is_some_and(|s| !self.mig.session_pending(s))
            {
                at(i.next_pull);
            }
            if let Some(l) = i.lost_since {
                at(l + self.cfg.migration.copy_ttl);
            }
        }
        t
    }

    /// Ports to re-report as activated to a (new) controller.
    pub(crate) fn activated_ports(&self) -> Vec<String> {
        self.mig.activated.iter().cloned().collect()
    }

    /// The program no longer says `port` waits: forget that it was activated here.
    pub(crate) fn forget_activations(&mut self) {
        let waiting: BTreeSet<String> = self
            .program
            .as_ref()
            .map(|p| {
                p.datapaths
                    .iter()
                    .flat_map(|d| d.ports.iter())
                    .filter(|q| q.activation.is_some())
                    .map(|q| q.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        self.mig.activated.retain(|p| waiting.contains(p));
    }
}
