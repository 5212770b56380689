//! The source's side of a migration: pulls, the pre-copy, deltas and the final delta, what
//! it delivered to the port, and the release of what it handed over.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use hf_conntrack::{CtExport, Selection};

use super::*;
use crate::core::{Datapath, Level};

impl Datapath {
    // ----- the source's side -----

    /// The connections of `port` here: its own zone, and the router/switch zones' entries that
    /// carry one of its addresses.
    pub(super) fn port_selection(&self, port: &str) -> Selection {
        let mut sel = Selection::default();
        if let Some(&z) = self.zones.get(&format!("lsp/{port}")) {
            sel = sel.zone(z);
        }
        let ips: Vec<IpAddr> = self
            .program
            .as_ref()
            .and_then(|p| {
                p.datapaths
                    .iter()
                    .flat_map(|d| d.ports.iter())
                    .find(|p| p.name == port)
            })
            .map(|p| {
                p.addresses
                    .iter()
                    .flat_map(|a| a.split_whitespace())
                    .filter_map(|t| t.parse::<IpAddr>().ok())
                    .collect()
            })
            .unwrap_or_default();
        for (name, &z) in &self.zones {
            if name.starts_with("lr/") || name.starts_with("ls/") {
                for ip in &ips {
                    sel = sel.address(z, *ip);
                }
            }
        }
        sel
    }

    pub(super) fn migrates_to(&self, port: &str, chassis: &str) -> bool {
        self.program.as_ref().is_some_and(|p| {
            p.migrations
                .iter()
                .any(|m| m.port == port && !m.incoming && m.peers.iter().any(|c| c == chassis))
        })
    }

    pub(super) fn zone_names(&self, ct: &CtExport) -> Vec<(u16, String)> {
        let used: BTreeSet<u16> = ct.conns.iter().map(|c| c.orig.zone).collect();
        self.zones
            .iter()
            .filter(|(_, z)| used.contains(z))
            .map(|(n, z)| (*z, n.clone()))
            .collect()
    }

    /// Exports `sel` and sends it as `phase`; returns (entries, bytes).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_conns(
        &mut self,
        peer: PeerId,
        port: &str,
        epoch: u64,
        phase: ConnsPhase,
        sel: &Selection,
        delivered: Vec<u64>,
        now: Duration,
    ) -> (u64, u64) {
        let ct = self.ct.export(sel, now);
        let n = ct.conns.len() as u64;
        if let Some(o) = self.mig.outgoing.get_mut(port) {
            o.sent.extend(ct.conns.iter().map(|c| c.orig));
        }
        let msg = StateMsg::Conns {
            port: port.to_string(),
            epoch,
            phase,
            zones: self.zone_names(&ct),
            conns: ct,
            delivered,
        };
        let bytes = self.state_send(peer, &msg) as u64;
        (n, bytes)
    }

    pub(super) fn on_pull(&mut self, peer: PeerId, port: String, epoch: u64, now: Duration) {
        let from = self.state_peer(peer).unwrap_or_default().to_string();
        if !self.ports.contains_key(&port) || !self.migrates_to(&port, &from) {
            let reason = format!(
                "port {port} is not bound here for a migration to {from} (not yet, or not any more)"
            );
            self.state_send(
                peer,
                &StateMsg::Abort {
                    port,
                    epoch,
                    reason,
                },
            );
            return;
        }
        if let Some(old) = self.mig.outgoing.remove(&port)
            && !old.finished
        {
            self.mig
                .finish(old.stats, "aborted: pulled again".into(), now);
        }
        // The port is leaving again: whatever an earlier migration left to remove stays.
        let next_delta = now + self.cfg.migration.delta_interval;
        let o = Outgoing::new(peer, &port, &from, epoch, now, next_delta);
        self.mig.outgoing.insert(port.clone(), o);
        self.track_delivery();
        let sel = self.port_selection(&port);
        let (n, bytes) = self.send_conns(
            peer,
            &port,
            epoch,
            ConnsPhase::Precopy,
            &sel,
            Vec::new(),
            now,
        );
        if let Some(o) = self.mig.outgoing.get_mut(&port) {
            o.stats.precopy_entries = n;
            o.stats.entries_moved += n;
            o.stats.bytes_moved += bytes;
        }
        self.log(
            Level::Info,
            format!("migration of {port} to {from}: pre-copy of {n} connections ({bytes} bytes)"),
        );
    }

    pub(super) fn on_activated_msg(
        &mut self,
        peer: PeerId,
        port: String,
        epoch: u64,
        now: Duration,
    ) {
        let from = self.state_peer(peer).unwrap_or_default().to_string();
        let known = self
            .mig
            .outgoing
            .get(&port)
            .is_some_and(|o| o.epoch == epoch && o.peer == peer && !o.finished);
        if !known {
            // No pre-copy went out (or it was lost): the final delta is everything.
            if !self.ports.contains_key(&port) && !self.migrates_to(&port, &from) {
                self.state_send(
                    peer,
                    &StateMsg::Abort {
                        port: port.clone(),
                        epoch,
                        reason: format!("port {port} is not migrating from here"),
                    },
                );
                return;
            }
            // Nothing exported yet (`last_export` zero), no deltas.
            let mut o = Outgoing::new(peer, &port, &from, epoch, now, Duration::MAX);
            o.last_export = Duration::ZERO;
            self.mig.outgoing.insert(port.clone(), o);
        }
        let Some(o) = self.mig.outgoing.get_mut(&port) else {
            return;
        };
        let since = o.last_export;
        let delivered: Vec<u64> = o.delivered.drain(..).map(|(_, h)| h).collect();
        o.finished = true;
        let mut sel = self.port_selection(&port);
        if since > Duration::ZERO {
            sel = sel.touched_since(since);
        }
        let nd = delivered.len() as u64;
        let (n, bytes) =
            self.send_conns(peer, &port, epoch, ConnsPhase::Final, &sel, delivered, now);
        if let Some(o) = self.mig.outgoing.get_mut(&port) {
            o.stats.final_delta_entries = n;
            o.stats.entries_moved += n;
            o.stats.bytes_moved += bytes;
            o.stats.delivered_reported = nd;
            o.stats.activated_us = Some(us(now));
            o.stats.completed_us = Some(us(now));
            o.stats.outcome = "completed".into();
            let st = o.stats.clone();
            self.mig.done.push_back(st);
            if self.mig.done.len() > MAX_DONE {
                self.mig.done.pop_front();
            }
        }
        self.track_delivery();
        self.log(
            Level::Info,
            format!(
                "migration of {port} to {from}: activated there; final delta of {n} connections, \
                 {nd} delivered frames reported"
            ),
        );
    }

    /// Which local port ids have their deliveries recorded (an unfinished outgoing migration).
    pub(super) fn track_delivery(&mut self) {
        self.tracking.clear();
        for (name, o) in &self.mig.outgoing {
            if !o.finished
                && let Some(p) = self.ports.get(name)
            {
                self.tracking.insert(p.id, name.clone());
            }
        }
    }

    /// A frame goes out of local port `id` (`name`): false when it must be dropped (the port is
    /// stopped). Records it for the destination's trim when the port is leaving.
    pub(crate) fn note_delivery(&mut self, id: u32, frame: &[u8], now: Duration) -> bool {
        // The forwarding path's common case: no port stopped, none leaving.
        if self.mig.stopped.is_empty() && self.tracking.is_empty() {
            return true;
        }
        let Some(name) = self.port_names.get(&id) else {
            return true;
        };
        if self.mig.stopped.contains(name) {
            self.mig.dropped_stopped += 1;
            return false;
        }
        if let Some(port) = self.tracking.get(&id)
            && let Some(o) = self.mig.outgoing.get_mut(port)
        {
            let age = self.cfg.migration.max_held_age;
            while o
                .delivered
                .front()
                .is_some_and(|(t, _)| now.saturating_sub(*t) > age)
                || o.delivered.len() >= MAX_DELIVERED
            {
                o.delivered.pop_front();
            }
            o.delivered.push_back((now, frame_hash(frame)));
        }
        true
    }

    pub(super) fn on_abort(
        &mut self,
        peer: PeerId,
        port: String,
        epoch: u64,
        reason: String,
        now: Duration,
    ) {
        // From a destination: it gave up on this pull.
        if self
            .mig
            .outgoing
            .get(&port)
            .is_some_and(|o| o.peer == peer && o.epoch == epoch && !o.finished)
            && let Some(o) = self.mig.outgoing.remove(&port)
        {
            self.log(
                Level::Info,
                format!("migration of {port}: the destination aborted it: {reason}"),
            );
            self.mig.finish(o.stats, format!("aborted: {reason}"), now);
            self.track_delivery();
            return;
        }
        // From a source: it refused this pull (its program may not have caught up yet).
        if let Some(i) = self.mig.incoming.get_mut(&port)
            && i.epoch == epoch
        {
            i.pulled = false;
            i.next_pull = now + self.cfg.migration.retry;
            let src = i.source.clone().unwrap_or_default();
            self.log_once(
                Level::Info,
                format_args!("pull-refused:{port}:{src}:{reason}"),
                || format!("migration of {port} from {src}: pull refused ({reason}); retrying"),
            );
        }
    }
}
