//! Program pushes and their bookkeeping, a part of the controller core ([`super::Controller`]):
//! turning a translation into the [`ProgramMsg`](hf_datapath::proto::ProgramMsg) to push (built reusing the untouched
//! datapaths' messages of the previous build), deciding whole program or delta against what
//! runs, and the datapath's answers (`Installed`, `BaseMismatch`, `Rejected`) that move the
//! running program, the hint of what may differ from it, and whether a delta applies.
//!
//! It does not read SB or write to it (the core does), and it sends only program, delta and
//! zone-flush messages.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use hf_datapath::proto::{self, DatapathMsg, FlowErrorMsg, ToDatapath};

use super::{Controller, Level, installed_local};
use crate::program_msg::{program_msg, program_msg_reusing, same_content, same_content_within};
use crate::{Extra, TranslateOptions};

impl Controller {
    /// The local port ids of the last translation (logical port → id in
    /// [`hf_pipeline::PortLocation::Local`]): each kept from the translation before, so a port
    /// added or removed moves no other port's id. They never leave the controller (the
    /// program names local ports); a restarted controller numbers afresh.
    pub fn local_port_ids(&self) -> Option<&BTreeMap<String, u32>> {
        self.translate_cache.local_ids()
    }

    pub(super) fn maybe_push(&mut self, now: Duration) {
        if !self.translate_due {
            return;
        }
        // What the change waits for (the first reason is what its wait is recorded under).
        let blocked = if !self.dp_ready() {
            Some("wait-datapath")
        } else if !self.inflight.is_empty() {
            Some("wait-program-in-flight")
        } else if self.txn.is_some() && self.txn_claims {
            // Claims on their way change the program: translate once they are in the view.
            Some("wait-claim")
        } else if !self.view_complete() {
            Some("wait-conditions")
        } else if self.neighbours_restoring(now) {
            Some("wait-neighbours")
        } else {
            None
        };
        if let Some(b) = blocked {
            if self.change_at.is_some() && self.wait_reason.is_none() {
                self.wait_reason = Some(b);
            }
            return;
        }
        self.translate_due = false;
        self.stats.translations += 1;
        let change = self.change_at.take();
        let t0 = self.tick();
        if let Some(c) = change {
            self.sw
                .record("sb-change-to-translate", t0.saturating_sub(c));
            if let Some(r) = self.wait_reason.take() {
                self.sw.record(r, t0.saturating_sub(c));
            }
        }
        self.wait_reason = None;
        let sb = self.sb.model();
        // Local port ids are kept from the last translation: a port added or removed changes
        // no other port's id (ids never leave the controller: the program names local ports).
        let local_ids = self
            .translate_cache
            .local_ids()
            .cloned()
            .unwrap_or_default();
        let mut t = self.translate_cache.translate(
            sb,
            &TranslateOptions {
                chassis: Some(self.cfg.chassis.clone()),
            },
            &Extra {
                only_needed: true,
                zones: self.zones.clone(),
                local_ids,
                ha_up: self.ha_up.clone(),
            },
        );
        let nb_cfg = sb.sb_global_row().map_or(0, |g| g.nb_cfg);
        let t1 = self.tick();
        self.sw.record("translate", t1.saturating_sub(t0));
        self.touched_since_running = match (self.touched_since_running.take(), &t.touched) {
            (Some(mut acc), Some(now)) => {
                acc.datapaths.extend(now.datapaths.iter().cloned());
                acc.rest |= now.rest;
                Some(acc)
            }
            _ => None,
        };
        // Diagnostics: each logged once while it lasts.
        let diags: Vec<String> = t.diagnostics.iter().map(|d| d.to_string()).collect();
        let seen: BTreeSet<&str> = self.diagnostics.iter().map(String::as_str).collect();
        let fresh: Vec<String> = diags
            .iter()
            .filter(|d| !seen.contains(d.as_str()))
            .cloned()
            .collect();
        self.diagnostics = diags;
        for d in fresh {
            self.say(Level::Warn, format!("translation: {d}"));
        }
        // Zones the translation no longer has: kept until really gone.
        let retained = not_in(&self.zones, &t.zones);
        let mut to_flush = Vec::new();
        for n in retained.keys() {
            if self.gone(n) {
                let since = *self.gone_since.entry(n.clone()).or_insert(now);
                if now >= since + self.tuning.flush_grace && !self.flushing.contains(n) {
                    to_flush.push(n.clone());
                }
            } else {
                self.gone_since.remove(n);
            }
        }
        self.gone_since.retain(|n, _| retained.contains_key(n));
        // Objects without a zone (zones exhausted): fail closed, the running program stays.
        // Only a translation that ran out of zones has such objects (each with an exhausted
        // diagnostic), so the walk over every port is made only then.
        let exhausted = t
            .diagnostics
            .iter()
            .any(|d| d.reason.starts_with(crate::translate::zones::EXHAUSTED));
        let unzoned = if exhausted {
            crate::translate::zones::unzoned(&t)
        } else {
            Vec::new()
        };
        let zone_error = (!unzoned.is_empty()).then(|| {
            format!(
                "{}: no conntrack zone for {} object(s) (first: {}); the running program is kept",
                crate::translate::zones::EXHAUSTED,
                unzoned.len(),
                unzoned[0]
            )
        });
        if zone_error != self.zone_error {
            if let Some(e) = &zone_error {
                self.say(Level::Err, e.clone());
            }
            self.zone_error = zone_error.clone();
            self.with_state(|st| st.zone_error = zone_error);
            self.write_due = true;
        }
        // Answers of the last good store that changed since the last build: their datapaths'
        // messages in `last_build` are stale.
        let stale = self.stale_messages();
        if self.zone_error.is_some() {
            // Not built: the next translation's `touched` is relative to this one, not to
            // `last_build`'s.
            self.last_build = None;
            self.translate_cache.recycle(t);
            self.send_flushes(to_flush);
            if self.write_due {
                self.write_round(now);
            }
            return;
        }
        let level = hf_expr::FeatureSet::level(self.tuning.feature_level);
        // (Given back to the translator as it was.)
        let per_datapath_groups = (!level.contains("port-group-per-datapath")).then(|| {
            std::mem::replace(
                &mut t.spec.sets.port_groups,
                crate::translate::sets::port_groups_as_written(self.sb.model()),
            )
        });
        if per_datapath_groups.is_some()
            && let Some(touched) = t.touched.as_mut()
        {
            // The groups as written are read from SB here, not from the translation's sets,
            // whose `rest.sets` says nothing about them: the message's sets are built again.
            touched.rest.sets = true;
        }
        let last_good: &dyn crate::program_msg::LastGoodLookup = if self.tuning.keep_last_good {
            &self.lastgood
        } else {
            &crate::program_msg::NoLastGood
        };
        let ta = self.tick();
        self.sw.record("translation-review", ta.saturating_sub(t1));
        let prev = self
            .last_build
            .take()
            .filter(|_| self.tuning.incremental_messages);
        // The datapath messages of the last build (noted already: see `note_ports` below).
        let mut had: HashSet<*const DatapathMsg> = HashSet::new();
        // Their port lists: an edited datapath shares its previous message's list when its
        // ports did not change (`program_msg::datapath_head`, same datapath).
        let mut had_ports: HashSet<*const Vec<proto::PortMsg>> = HashSet::new();
        let build = match prev {
            Some(mut prev) => {
                prev.datapaths.retain(|d| !stale.contains(&d.name));
                had = prev.datapaths.iter().map(Arc::as_ptr).collect();
                had_ports = prev
                    .datapaths
                    .iter()
                    .map(|d| Arc::as_ptr(&d.ports))
                    .collect();
                let b = program_msg_reusing(
                    &t,
                    &self.cfg.chassis,
                    self.generation + 1,
                    nb_cfg,
                    &retained,
                    last_good,
                    prev,
                );
                self.stats.datapath_messages_reused += b
                    .msg
                    .datapaths
                    .iter()
                    .filter(|d| had.contains(&Arc::as_ptr(d)))
                    .count() as u64;
                b
            }
            None => program_msg(
                &t,
                &self.cfg.chassis,
                self.generation + 1,
                nb_cfg,
                &retained,
                last_good,
            ),
        };
        if let Some(g) = per_datapath_groups {
            t.spec.sets.port_groups = g;
        }
        self.translate_cache.recycle(t);
        let tb = self.tick();
        self.sw.record("message-assemble", tb.saturating_sub(ta));
        if !build.skipped.is_empty() {
            self.say(
                Level::Warn,
                format!(
                    "{} flow(s) without SB text left out of the program",
                    build.skipped.len()
                ),
            );
        }
        if self.tuning.incremental_messages {
            // Shares every datapath; copies the parts outside them.
            self.last_build = Some(build.msg.clone());
        }
        let mut msg = build.msg;
        msg.feature_level = Some(self.tuning.feature_level.name().to_string());
        msg.no_last_good = !self.tuning.keep_last_good;
        if let Some(r) = &self.running {
            let kept = super::super::lastgood::keep_sets(r, &mut msg);
            if !kept.is_empty() && self.kept_sets != kept {
                self.say(
                    Level::Warn,
                    format!(
                        "set(s) {} gone from SB but named by last good flow versions: kept as they were",
                        kept.join(", ")
                    ),
                );
            }
            self.kept_sets = kept;
        }
        // Only the datapaths this build made: the ones taken from the last build were noted
        // when it was made (the notes are only ever added to).
        self.note_ports(
            msg.datapaths
                .iter()
                .filter(|d| {
                    !had.contains(&Arc::as_ptr(d)) && !had_ports.contains(&Arc::as_ptr(&d.ports))
                })
                .map(|d| &**d),
        );
        // A view without any datapath while the datapath forwards for local ports: hold it.
        let running_dps = self
            .running
            .as_ref()
            .is_some_and(|r| !r.datapaths.is_empty());
        if msg.datapaths.is_empty() && running_dps && !self.dp_ports.is_empty() {
            let since = *self.empty_since.get_or_insert(now);
            if now < since + self.tuning.flush_grace {
                if since == now {
                    self.say(
                        Level::Warn,
                        "SB shows no datapath for this chassis's ports; holding the running program"
                            .into(),
                    );
                }
                return;
            }
        } else {
            self.empty_since = None;
        }
        let tc = self.tick();
        self.sw.record("message-bookkeeping", tc.saturating_sub(tb));
        // Only the datapaths a translation since the running program's touched can differ
        // (the parts outside datapaths are always compared: kept sets edit them).
        let hint = self
            .touched_since_running
            .as_ref()
            .map(|t| proto::DeltaHint {
                datapaths: &t.datapaths,
                rest: true,
            });
        if let Some(r) = &self.running
            && match hint {
                Some(h) => same_content_within(r, &msg, h.datapaths),
                None => same_content(r, &msg),
            }
        {
            self.touched_since_running = Some(crate::Touched::default());
            self.stats.programs_unchanged += 1;
            if self.installed_nb_cfg.is_none_or(|n| n < nb_cfg) {
                self.installed_nb_cfg = Some(nb_cfg);
                self.with_state(|st| st.nb_cfg = Some(nb_cfg));
                self.write_due = true;
                self.nb_cfg_since = Some((now, change, nb_cfg));
            }
            let t2 = self.tick();
            self.sw.record("message-build", t2.saturating_sub(t1));
        } else {
            self.generation += 1;
            self.stats.programs_pushed += 1;
            let before = self.dp_out.len();
            // A delta against what the datapath runs when it runs it exactly; else the whole
            // program. The hint (`touched_since_running`) is a superset of what changed:
            // every translation since `running` was built is in it.
            let delta = match &self.running {
                Some(r)
                    if self.tuning.program_deltas
                        && self.delta_ok
                        && proto::unique_datapaths(&msg) =>
                {
                    Some(proto::between(r, &msg, hint))
                }
                _ => None,
            };
            match delta {
                Some(d) => {
                    self.stats.deltas_pushed += 1;
                    self.send_dp(&ToDatapath::ProgramDelta(Box::new(d)));
                    self.inflight.insert(msg.generation, msg);
                }
                None => {
                    // Encoded from the message kept in flight: the program (every flow) is
                    // not copied.
                    let m = ToDatapath::Program(Box::new(msg));
                    self.send_dp(&m);
                    if let ToDatapath::Program(msg) = m {
                        self.inflight.insert(msg.generation, *msg);
                    }
                }
            }
            self.stats.last_push_bytes = self
                .dp_out
                .iter()
                .skip(before)
                .map(|b| b.len() as u64)
                .sum();
            let t2 = self.tick();
            self.sw.record("message-build", t2.saturating_sub(t1));
            self.sent_at.insert(self.generation, (t2, change));
        }
        self.send_flushes(to_flush);
        if self.write_due {
            self.write_round(now);
        }
    }

    /// The datapaths whose message in `last_build` carries stale last good answers: those the
    /// store says changed, and those whose answers moved while the installed message stayed
    /// exact when `last_build`'s message is not the installed one.
    fn stale_messages(&mut self) -> BTreeSet<String> {
        let mut stale = self.lastgood.take_changed();
        let moved = self.lastgood.take_moved();
        if moved.is_empty() {
            return stale;
        }
        let running: HashMap<&str, &Arc<DatapathMsg>> = self
            .running
            .iter()
            .flat_map(|r| &r.datapaths)
            .filter(|d| moved.contains(&d.name))
            .map(|d| (d.name.as_str(), d))
            .collect();
        for d in self.last_build.iter().flat_map(|b| &b.datapaths) {
            if moved.contains(&d.name)
                && running
                    .get(d.name.as_str())
                    .is_none_or(|r| !Arc::ptr_eq(r, d))
            {
                stale.insert(d.name.clone());
            }
        }
        stale
    }

    /// Whether replacing the zones `old` with `new` can move [`Controller::orphan_ports`]: a
    /// port zone added that no datapath names, or a watched orphan's zone gone. (The rule
    /// [`Controller::take_zones`] applies to its edit; kept as the plain form to check it.)
    #[cfg(any(test, debug_assertions))]
    fn zones_move_orphans(&self, old: &BTreeMap<String, u16>, new: &BTreeMap<String, u16>) -> bool {
        let orphan = |k: &String| {
            k.strip_prefix("lsp/")
                .is_some_and(|p| self.watched_orphans.contains(p))
        };
        let unnamed = |k: &String| k.starts_with("lsp/") && !self.zone_dp.contains_key(k);
        not_in(old, new).keys().any(orphan) || not_in(new, old).keys().any(unnamed)
    }

    /// The zone map becomes `installed`'s, less the zones being flushed, edited in place: a
    /// port add moves one entry of thousands, and a copy of the map per install cost more
    /// than the rest of the `Installed` bookkeeping. Notes whether the edit can move the
    /// orphan zones (as [`Controller::zones_move_orphans`] of the two maps would say).
    fn take_zones(&mut self, installed: &BTreeMap<String, u16>) {
        #[cfg(debug_assertions)]
        let expected = {
            let mut z = installed.clone();
            for n in &self.flushing {
                z.remove(n);
            }
            (self.zones_move_orphans(&self.zones, &z), z)
        };
        // Entries of `installed` that `self.zones` lacks or holds with another zone, and
        // names `self.zones` has that `installed` lacks: one ordered walk of both.
        let mut set: Vec<(&String, u16)> = Vec::new();
        let mut gone: Vec<String> = Vec::new();
        let mut old = self.zones.iter().peekable();
        for (n, z) in installed {
            while let Some((o, _)) = old.next_if(|(o, _)| o.as_str() < n.as_str()) {
                gone.push(o.clone());
            }
            match old.next_if(|(o, _)| *o == n) {
                Some((_, oz)) if oz == z => {}
                _ => set.push((n, *z)),
            }
        }
        gone.extend(old.map(|(o, _)| o.clone()));
        gone.extend(
            self.flushing
                .iter()
                .filter(|n| self.zones.contains_key(*n))
                .cloned(),
        );
        set.retain(|(n, _)| !self.flushing.contains(*n));
        let orphan = |k: &String| {
            k.strip_prefix("lsp/")
                .is_some_and(|p| self.watched_orphans.contains(p))
        };
        let unnamed = |k: &String| k.starts_with("lsp/") && !self.zone_dp.contains_key(k);
        let moves = gone.iter().any(orphan)
            || set
                .iter()
                .any(|(n, _)| !self.zones.contains_key(*n) && unnamed(n));
        self.orphans_dirty |= moves;
        for n in &gone {
            self.zones.remove(n);
        }
        for (n, z) in set {
            self.zones.insert(n.clone(), z);
        }
        #[cfg(debug_assertions)]
        {
            assert_eq!(self.zones, expected.1, "the zone map edited in place");
            assert_eq!(moves, expected.0, "whether the edit moves the orphans");
        }
    }

    pub(super) fn send_flushes(&mut self, to_flush: Vec<String>) {
        if to_flush.is_empty() {
            return;
        }
        self.stats.flush_requests += 1;
        self.say(
            Level::Info,
            format!(
                "flushing conntrack zone(s) of deleted objects: {}",
                to_flush.join(", ")
            ),
        );
        self.flushing.extend(to_flush.iter().cloned());
        self.send_dp(&ToDatapath::FlushZones { names: to_flush });
    }

    /// The datapath installed `generation` (with these flow errors).
    pub(super) fn on_installed(&mut self, generation: u64, flow_errors: Vec<FlowErrorMsg>) {
        let Some(p) = self.inflight.remove(&generation) else {
            self.say(
                Level::Warn,
                format!("datapath installed generation {generation}, which was not pushed"),
            );
            return;
        };
        self.stats.programs_installed += 1;
        let now = self.now;
        let handled = self.tick();
        if let Some((sent, change)) = self.sent_at.remove(&generation) {
            self.sw.record("datapath-install", now.saturating_sub(sent));
            self.nb_cfg_since = Some((now, change, p.nb_cfg));
        }
        // Older pushes never answered (a reconnect) are not waited for.
        self.sent_at.retain(|g, _| *g > generation);
        // A held datapath runs earlier flows than `p` has: the next push goes whole.
        self.delta_ok = !flow_errors.iter().any(|e| e.held);
        // `p` runs now; flow errors change last good answers the translation's
        // `touched` does not see.
        self.touched_since_running = flow_errors.is_empty().then(crate::Touched::default);
        let lines = self
            .lastgood
            .installed_after(&p, &flow_errors, self.running.as_ref());
        for (err, line) in lines {
            self.say(if err { Level::Warn } else { Level::Info }, line);
        }
        self.take_zones(&p.zones);
        self.installed_nb_cfg = Some(self.installed_nb_cfg.map_or(p.nb_cfg, |n| n.max(p.nb_cfg)));
        let up = installed_local(&p);
        let report = self.lastgood.report();
        let nb_cfg = self.installed_nb_cfg;
        self.with_state(|st| {
            st.up = up;
            st.flow_report = report;
            st.nb_cfg = nb_cfg;
        });
        self.installed_version += 1;
        self.say(
            Level::Debug,
            format!(
                "datapath installed generation {generation} (nb_cfg {})",
                p.nb_cfg
            ),
        );
        // (The replaced program is freed after the write round: see `retired`.)
        self.retired = self.running.replace(p);
        self.write_due = true;
        let done = self.tick();
        self.sw
            .record("installed-bookkeeping", done.saturating_sub(handled));
    }

    /// The datapath does not run the base of delta `generation`.
    pub(super) fn on_base_mismatch(
        &mut self,
        generation: u64,
        base: u64,
        running: u64,
        reason: String,
    ) {
        if self.inflight.remove(&generation).is_none() {
            self.say(
                Level::Warn,
                format!("datapath refused the base of delta {generation}, which was not pushed"),
            );
            return;
        }
        self.stats.deltas_refused += 1;
        self.touched_since_running = None;
        self.say(
            Level::Info,
            format!(
                "datapath runs generation {running}, not the delta's base {base} ({reason}): sending the whole program"
            ),
        );
        self.delta_ok = false;
        self.translate_due = true;
    }

    /// The datapath rejected program `generation`.
    pub(super) fn on_rejected(&mut self, generation: u64, reason: String) {
        self.inflight.remove(&generation);
        self.touched_since_running = None;
        self.stats.programs_rejected += 1;
        self.say(
            Level::Err,
            format!(
                "datapath rejected program generation {generation}: {reason}; it keeps running the previous one"
            ),
        );
    }
}

/// The entries of `a` whose names `b` lacks (one ordered walk of both maps, no lookups).
fn not_in(a: &BTreeMap<String, u16>, b: &BTreeMap<String, u16>) -> BTreeMap<String, u16> {
    let mut out = BTreeMap::new();
    let mut bs = b.keys().peekable();
    for (n, z) in a {
        while bs.next_if(|k| k.as_str() < n.as_str()).is_some() {}
        if bs.peek().is_none_or(|k| *k != n) {
            out.insert(n.clone(), *z);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Controller, ControllerConfig};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn zones(names: &[&str]) -> BTreeMap<String, u16> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_string(), i as u16 + 1))
            .collect()
    }

    /// Replacing the zones moves the orphans exactly when a port zone no datapath names comes,
    /// or a watched orphan's zone goes; checked against the walk over every zone.
    #[test]
    fn the_zone_map_edited_in_place_is_the_installed_one_less_the_flushed() {
        let mut c = Controller::new(
            ControllerConfig {
                chassis: "hv1".into(),
                hostname: "hv1.example".into(),
                encap_type: "geneve".into(),
                encap_ip: "192.168.0.1".into(),
                monitor_all: false,
            },
            Duration::ZERO,
        );
        c.zone_dp.insert("lsp/a".into(), "ls0".into());
        c.watched_orphans = ["b".to_string()].into();
        let names = [
            "lsp/a",
            "lsp/b",
            "lsp/c",
            "lsp/d",
            "ls/ls0/snat",
            "lr/lr0/dnat",
        ];
        // Every pair of subsets (as bit masks) of the names, with zones that differ for
        // some, and every subset flushed: the edit equals the plain rebuild.
        let map = |mask: u32, shift: u16| -> BTreeMap<String, u16> {
            names
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(i, n)| (n.to_string(), i as u16 + 1 + shift * (i as u16 % 2)))
                .collect()
        };
        for old in 0..64u32 {
            for new in (0..64u32).step_by(5) {
                for flush in [0u32, 0b10, 0b100101, 0b111111] {
                    c.zones = map(old, 0);
                    c.flushing = map(flush, 0).into_keys().collect();
                    c.orphans_dirty = false;
                    let installed = map(new, 10);
                    let mut want = installed.clone();
                    want.retain(|n, _| !c.flushing.contains(n));
                    let moves = c.zones_move_orphans(&c.zones, &want);
                    c.take_zones(&installed);
                    assert_eq!(c.zones, want, "{old:b} {new:b} {flush:b}");
                    assert_eq!(c.orphans_dirty, moves, "{old:b} {new:b} {flush:b}");
                }
            }
        }
    }

    #[test]
    fn zones_move_orphans_when_the_walk_would_give_others() {
        let mut c = Controller::new(
            ControllerConfig {
                chassis: "hv1".into(),
                hostname: "hv1.example".into(),
                encap_type: "geneve".into(),
                encap_ip: "192.168.0.1".into(),
                monitor_all: false,
            },
            Duration::ZERO,
        );
        c.zone_dp.insert("lsp/a".into(), "ls0".into());
        c.zones = zones(&["lsp/a", "lsp/b", "ls/ls0/snat"]);
        c.watched_orphans = c.orphan_ports();
        assert_eq!(c.watched_orphans, ["b".to_string()].into());
        for (new, moves) in [
            (&["lsp/a", "lsp/b", "ls/ls0/snat"][..], false),
            (&["lsp/a", "lsp/b"][..], false),
            (&["lsp/b"][..], false),
            (&["lsp/a", "lsp/b", "lsp/c"][..], true),
            (&["lsp/a"][..], true),
            (&["lsp/a", "lsp/b", "ls/ls1/snat"][..], false),
        ] {
            let new = zones(new);
            let got = c.zones_move_orphans(&c.zones, &new);
            assert_eq!(got, moves, "{new:?}");
            let before = std::mem::replace(&mut c.zones, new);
            assert_eq!(c.orphan_ports() != c.watched_orphans, moves, "the walk");
            c.zones = before;
        }
    }
}
