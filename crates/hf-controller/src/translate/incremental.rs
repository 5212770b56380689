//! The incremental translator: [`Incremental`] keeps the last translation and re-translates
//! only what depends on the SB rows changed since, from the replica's change sets.
//!
//! # What it does
//!
//! The caller notes each change set ([`Incremental::changed`], the `Delta` of the replica's
//! `Event::Changes`) or that anything may have changed ([`Incremental::everything`]: a resync,
//! a condition change), asks for a translation ([`Incremental::translate`]) and gives it back
//! once done with it ([`Incremental::recycle`]). What a changed row re-translates:
//!
//! | changed | re-translated |
//! |---|---|
//! | `Logical_Flow` | the row, in its old and new datapaths (one flow each, placed in order) |
//! | `Logical_DP_Group` | its rows, in its old and new members; the load balancers' VIPs |
//! | `Port_Binding` | the ports and groups of its old and new datapath and of the datapaths whose patch ports name it as peer; local port ids; migrations; the needed-datapath set (a datapath in or out of it: everything) |
//! | `Multicast_Group` | the groups of its old and new datapath |
//! | `Address_Set`, `Port_Group` | the sets of their old and new names |
//! | `MAC_Binding`, `Static_MAC_Binding`, `FDB` | neighbours and FDB (FDB also after port changes) |
//! | `Load_Balancer`, `DNS` | the LB VIPs, the DNS records |
//! | `Chassis`, `Encap`, `Chassis_Template_Var`, `Datapath_Binding`, `HA_Chassis_Group`, `HA_Chassis`, `Gateway_Chassis` | everything ([`super::translate_cached`], which still reuses every unchanged flow's parse) |
//!
//! Local port ids are assigned again over every local port after a port change (or when
//! [`Extra::local_ids`] changed), keeping `local_ids` ([`ports::assign_local`]): with the last
//! translation's ids kept, as the daemon passes them, no other port's id moves, so a port
//! add touches only its own datapaths. [`Translation::touched`]'s `rest` names each part
//! outside datapaths that may differ ([`Rest`]), and [`Translation::flow_edits`] how each
//! touched datapath's flows changed (the rows taken out, the places of the flows put in).
//!
//! Zones are assigned again every time (a function of every zone name). Diagnostics are kept
//! per section (per datapath, per flow row) and put together in [`super::translate_with`]'s
//! order. The result equals [`super::translate_with`]'s exactly, and
//! [`super::Translation::touched`] says which datapaths may differ from the previous result
//! (the tests below check both over seeded random changes of every table read).
//!
//! # What it does not do
//!
//! No I/O. Only its full passes use threads ([`Incremental::set_parallelism`]); a step runs
//! on the calling thread. It does not look at the rows of tables the translation does not read
//! (`Chassis_Private`, `SB_Global`, ...). A translation not given back makes the next one
//! start afresh, as do changed options or template variables.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use hf_model::SbSnapshot;
use hf_model::sb::Delta;

use hf_pipeline::{DatapathKind, DatapathSpec, FlowSpec, PortLocation};
use uuid::Uuid;

use super::{
    Diagnostic, Extra, Rest, Touched, TranslateCache, TranslateOptions, Translation, flows, ports,
    sets, zones,
};

/// How an incremental step changed one datapath's flows ([`Translation::flow_edits`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowEdit {
    /// The SB UUIDs (as text) of the rows taken out (a superset: a row that was not in the
    /// datapath may be named). Every flow of such a row left the datapath.
    pub removed: Vec<String>,
    /// Where the flows put in are in the datapath's new flow list, ascending.
    pub added: Vec<usize>,
}

/// What changed since the last translation.
#[derive(Debug, Default, Clone)]
struct Changes {
    /// Something that needs everything translated again.
    all: bool,
    pb: BTreeSet<Uuid>,
    /// Old and new datapaths of the changed ports.
    pb_dps: BTreeSet<Uuid>,
    /// Old and new names of the changed ports.
    pb_names: BTreeSet<String>,
    /// Old and new `options:peer` of the changed ports.
    pb_peers: BTreeSet<String>,
    /// A changed port is (or was) a patch or l3gateway port.
    topo: bool,
    mg_dps: BTreeSet<Uuid>,
    lf: BTreeSet<Uuid>,
    /// Per changed flow row: the datapaths and DP groups it named before.
    lf_old: HashMap<Uuid, (BTreeSet<Uuid>, BTreeSet<Uuid>)>,
    /// Changed flow rows that were not there at the last translation (their first change
    /// since is their insertion): no datapath holds their flows, none are taken out.
    lf_new: HashSet<Uuid>,
    /// Changed DP groups with their old members.
    dpg: BTreeMap<Uuid, BTreeSet<Uuid>>,
    /// Changed address sets, their old and new names; old and new names of changed port groups.
    as_rows: BTreeSet<Uuid>,
    as_names: BTreeSet<String>,
    pg_names: BTreeSet<String>,
    neigh: bool,
    lb: bool,
    dns: bool,
}

impl Changes {
    fn note(&mut self, d: &Delta) {
        if !(d.chassis.is_empty()
            && d.encap.is_empty()
            && d.chassis_template_var.is_empty()
            && d.datapath_binding.is_empty()
            && d.ha_chassis_group.is_empty()
            && d.ha_chassis.is_empty()
            && d.gateway_chassis.is_empty())
        {
            self.all = true;
        }
        for r in &d.port_binding {
            self.pb.insert(r.uuid());
            for row in r.before().into_iter().chain(r.after()) {
                self.pb_dps.insert(row.datapath.uuid());
                self.pb_names.insert(row.logical_port.clone());
                self.pb_peers.extend(row.options.get("peer").cloned());
                if matches!(row.type_.as_str(), "patch" | "l3gateway") {
                    self.topo = true;
                }
            }
        }
        for r in &d.multicast_group {
            for row in r.before().into_iter().chain(r.after()) {
                self.mg_dps.insert(row.datapath.uuid());
            }
        }
        for r in &d.logical_flow {
            self.lf.insert(r.uuid());
            let e = match self.lf_old.entry(r.uuid()) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    if r.before().is_none() {
                        self.lf_new.insert(r.uuid());
                    }
                    e.insert(Default::default())
                }
            };
            for row in r.before().into_iter().chain(r.after()) {
                e.0.extend(row.logical_datapath.map(|d| d.uuid()));
                e.1.extend(row.logical_dp_group.map(|g| g.uuid()));
            }
        }
        for r in &d.logical_dp_group {
            let e = self.dpg.entry(r.uuid()).or_default();
            for row in r.before().into_iter().chain(r.after()) {
                e.extend(row.datapaths.iter().map(|d| d.uuid()));
            }
        }
        for r in &d.address_set {
            self.as_rows.insert(r.uuid());
            for row in r.before().into_iter().chain(r.after()) {
                self.as_names.insert(row.name.clone());
            }
        }
        for r in &d.port_group {
            for row in r.before().into_iter().chain(r.after()) {
                self.pg_names.insert(row.name.clone());
            }
        }
        self.neigh |=
            !d.mac_binding.is_empty() || !d.static_mac_binding.is_empty() || !d.fdb.is_empty();
        self.lb |= !d.load_balancer.is_empty();
        self.dns |= !d.dns.is_empty();
    }
}

/// A multicast group's diagnostic with the group's (tunnel key, UUID): their order.
type GroupDiag = ((i64, Uuid), Diagnostic);

/// What the last translation was made of, beyond the translation itself.
#[derive(Debug, Default, Clone)]
struct State {
    opts: TranslateOptions,
    /// [`Extra::ha_up`] of the last full translation (a change translates everything).
    ha_up: Option<BTreeSet<String>>,
    only_needed: bool,
    vars: BTreeMap<String, String>,
    /// Diagnostics by section: chassis and datapaths; ports per datapath; groups per datapath
    /// (keyed by the group's tunnel key and UUID); sets; flows per row; neighbours and FDB;
    /// load balancers; DNS; zones.
    head: Vec<Diagnostic>,
    ports: BTreeMap<Uuid, Vec<Diagnostic>>,
    groups: BTreeMap<Uuid, Vec<GroupDiag>>,
    sets: BTreeMap<Uuid, Vec<Diagnostic>>,
    flows: BTreeMap<Uuid, Vec<Diagnostic>>,
    neigh: Vec<Diagnostic>,
    lbs: Vec<Diagnostic>,
    dns: Vec<Diagnostic>,
    zones: Vec<Diagnostic>,
    /// The last zone assignment reported nothing (no conflict, no exhaustion): the next one
    /// may start from it ([`zones_fast`]).
    zones_clean: bool,
    /// Per datapath: which of its ports are local here (aligned with its ports).
    local: BTreeMap<Uuid, Vec<bool>>,
    /// Ports that make their datapath needed here: port → datapath.
    bound_here: HashMap<Uuid, Uuid>,
    /// The datapaths needed here (with `only_needed`), translated or not (a datapath with a
    /// bad key is needed but left out).
    needed: BTreeSet<Uuid>,
    /// The local port ids the last translation was given to keep ([`Extra::local_ids`]).
    local_keep: BTreeMap<String, u32>,
    /// `options:peer` value → (port → its datapath) of the ports naming it.
    peers: HashMap<String, BTreeMap<Uuid, Uuid>>,
}

/// How the last [`Incremental::translate`] went (for benchmarks and tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IncrementalStats {
    /// Translated from scratch (no previous translation, or something needing everything).
    pub full: bool,
    /// Datapaths whose ports were translated again.
    pub port_datapaths: usize,
    /// Flow rows translated again.
    pub flow_rows: usize,
    /// Zones were assigned from the last assignment, not over every name.
    pub zones_from_last: bool,
}

/// The incremental translator (see the module docs). One per chassis translated for.
#[derive(Debug, Default, Clone)]
pub struct Incremental {
    last: Option<Translation>,
    state: Option<State>,
    changes: Changes,
    cache: TranslateCache,
    stats: IncrementalStats,
    /// Tests only: a deliberately removed dependency rule, to show the equivalence test
    /// catches it: 1 = a `Port_Binding` change does not re-translate its datapath's groups;
    /// 2 = a `Logical_DP_Group` change does not re-translate its flows.
    #[cfg(test)]
    pub(crate) broken: u8,
}

impl Incremental {
    /// A translator with nothing translated yet.
    pub fn new() -> Incremental {
        Incremental::default()
    }

    /// Notes one change set of the replica (already applied to the snapshot that the next
    /// [`Incremental::translate`] is given).
    pub fn changed(&mut self, d: &Delta) {
        self.changes.note(d);
    }

    /// Notes that anything may have changed (a resync, a condition change): the next
    /// translation starts afresh.
    pub fn everything(&mut self) {
        self.changes.all = true;
    }

    /// Full translations run on up to `par` threads (default: the calling thread only); the
    /// result does not depend on it.
    pub fn set_parallelism(&mut self, par: super::Parallelism) {
        self.cache.set_parallelism(par);
    }

    /// Translations hold their flows in `form` (default [`super::flows::FlowForm::Parsed`];
    /// the controller daemon uses [`super::flows::FlowForm::Text`]). A change of form
    /// translates everything again at the next [`Incremental::translate`].
    pub fn set_flow_form(&mut self, form: super::flows::FlowForm) {
        if form != self.cache.flow_form() {
            self.cache.set_flow_form(form);
            self.changes.all = true;
        }
    }

    /// Gives the last translation back, unchanged, for the next one to start from.
    pub fn recycle(&mut self, t: Translation) {
        self.last = Some(t);
    }

    /// How the last translation went.
    pub fn stats(&self) -> IncrementalStats {
        self.stats
    }

    /// The local port ids of the translation last given back ([`Incremental::recycle`]):
    /// what a caller keeps by passing them as the next [`Extra::local_ids`].
    pub fn local_ids(&self) -> Option<&BTreeMap<String, u32>> {
        self.last.as_ref().map(|t| &t.local_ports)
    }

    /// The translation of `sb` (equal to [`super::translate_with`]'s), with
    /// [`Translation::touched`] against the previous one.
    pub fn translate(
        &mut self,
        sb: &SbSnapshot,
        opts: &TranslateOptions,
        extra: &Extra,
    ) -> Translation {
        let changes = std::mem::take(&mut self.changes);
        let last = self.last.take();
        let state = self.state.take();
        let only_needed = extra.only_needed && opts.chassis.is_some();
        let (Some(mut t), Some(mut s)) = (last, state) else {
            return self.full(sb, opts, extra, None);
        };
        if s.opts != *opts || s.only_needed != only_needed || s.ha_up != extra.ha_up {
            return self.full(sb, opts, extra, None);
        }
        if !changes.all && self.step(sb, extra, &changes, &mut t, &mut s) {
            self.state = Some(s);
            return t;
        }
        // (A step gives up before it changes `t`.)
        self.full(sb, opts, extra, Some(t))
    }

    /// Translates everything; `touched` against `prev` when given.
    fn full(
        &mut self,
        sb: &SbSnapshot,
        opts: &TranslateOptions,
        extra: &Extra,
        prev: Option<Translation>,
    ) -> Translation {
        let mut marks = Vec::new();
        let par = self.cache.par;
        let mut t =
            super::translate_marked(sb, opts, extra, Some(&mut self.cache), par, &mut marks);
        let chassis = opts.chassis.as_deref();
        let only_needed = extra.only_needed && chassis.is_some();
        let mut s = State {
            opts: opts.clone(),
            only_needed,
            vars: flows::template_vars(sb, chassis),
            ha_up: extra.ha_up.clone(),
            local_keep: extra.local_ids.clone(),
            ..State::default()
        };
        let section = |i: usize| {
            let from = if i == 0 { 0 } else { marks[i - 1] };
            let to = marks.get(i).copied().unwrap_or(t.diagnostics.len());
            t.diagnostics[from..to].to_vec()
        };
        s.head = section(0);
        for d in section(1) {
            let dp = sb.port_binding().get(&d.uuid).map(|p| p.datapath.uuid());
            s.ports.entry(dp.unwrap_or_default()).or_default().push(d);
        }
        for d in section(2) {
            let g = sb.multicast_group().get(&d.uuid);
            let dp = g.map(|g| g.datapath.uuid()).unwrap_or_default();
            let key = (g.map_or(0, |g| g.tunnel_key), d.uuid);
            s.groups.entry(dp).or_default().push((key, d));
        }
        for d in section(3) {
            s.sets.entry(d.uuid).or_default().push(d);
        }
        for d in section(4) {
            s.flows.entry(d.uuid).or_default().push(d);
        }
        s.neigh = section(5);
        s.lbs = section(6);
        s.dns = section(7);
        s.zones = section(8);
        s.zones_clean = !s.zones.iter().any(|d| d.uuid.is_nil());
        for (u, &i) in &t.datapath_index {
            let local: Vec<bool> = t.spec.datapaths[i]
                .ports
                .iter()
                .map(|p| matches!(p.location, PortLocation::Local(_)))
                .collect();
            if local.iter().any(|l| *l) {
                s.local.insert(*u, local);
            }
        }
        let here = chassis.and_then(|c| Some((sb.chassis_by_name(c)?.uuid, c)));
        for pb in sb.port_binding().values() {
            if let Some(p) = pb.options.get("peer") {
                s.peers
                    .entry(p.clone())
                    .or_default()
                    .insert(pb.uuid, pb.datapath.uuid());
            }
            if only_needed
                && let Some((h, c)) = here
                && ports::bound_on(sb, pb, h, c)
            {
                s.bound_here.insert(pb.uuid, pb.datapath.uuid());
            }
        }
        if only_needed && let Some((_, c)) = here {
            s.needed = super::needed_from(sb, c, s.bound_here.values().copied().collect());
        }
        t.touched = prev.map(|p| compare(&p, &t));
        t.renumbered = BTreeSet::new();
        t.flow_edits = None;
        self.stats = IncrementalStats {
            full: true,
            port_datapaths: t.spec.datapaths.len(),
            flow_rows: sb.logical_flow().len(),
            zones_from_last: false,
        };
        self.state = Some(s);
        t
    }

    /// Re-translates what `c` changed in `t`; false (with `t` as it was) when everything must
    /// be translated.
    fn step(
        &mut self,
        sb: &SbSnapshot,
        extra: &Extra,
        c: &Changes,
        t: &mut Translation,
        s: &mut State,
    ) -> bool {
        let form = self.cache.flow_form();
        let chassis = s.opts.chassis.clone();
        let chassis = chassis.as_deref();
        // Which ports make datapaths needed here, and the patch ports naming each port.
        let here = chassis.and_then(|ch| Some((sb.chassis_by_name(ch)?.uuid, ch)));
        let start_before: BTreeSet<Uuid> = s.bound_here.values().copied().collect();
        let mut peer_dps: BTreeSet<Uuid> = BTreeSet::new();
        for n in &c.pb_names {
            if let Some(m) = s.peers.get(n) {
                peer_dps.extend(m.values());
            }
        }
        for p in &c.pb_peers {
            if let Some(m) = s.peers.get_mut(p) {
                for pb in &c.pb {
                    m.remove(pb);
                }
                if m.is_empty() {
                    s.peers.remove(p);
                }
            }
        }
        for u in &c.pb {
            s.bound_here.remove(u);
            let Some(pb) = sb.port_binding().get(u) else {
                continue;
            };
            if let Some(p) = pb.options.get("peer") {
                s.peers
                    .entry(p.clone())
                    .or_default()
                    .insert(pb.uuid, pb.datapath.uuid());
            }
            if s.only_needed
                && let Some((h, ch)) = here
                && ports::bound_on(sb, pb, h, ch)
            {
                s.bound_here.insert(pb.uuid, pb.datapath.uuid());
            }
        }
        for n in &c.pb_names {
            if let Some(m) = s.peers.get(n) {
                peer_dps.extend(m.values());
            }
        }
        if s.only_needed
            && let Some(ch) = chassis
        {
            let start: BTreeSet<Uuid> = s.bound_here.values().copied().collect();
            // A port renamed to (or from) a patch port's peer changes where patches lead.
            if (start != start_before || c.topo || !peer_dps.is_empty())
                && super::needed_from(sb, ch, start) != s.needed
            {
                return false;
            }
        }
        self.stats = IncrementalStats::default();
        let index = t.datapath_index.clone();
        let mut touched: BTreeSet<usize> = BTreeSet::new();
        let mut rest = Rest::default();
        let mut flow_edits: BTreeMap<usize, FlowEdit> = BTreeMap::new();
        // Ports.
        let mut port_dps: BTreeSet<Uuid> = c.pb_dps.union(&peer_dps).copied().collect();
        port_dps.retain(|d| index.contains_key(d));
        let mut ctx = ports::PortCtx::new(sb, chassis, t);
        ctx.ha_up = extra.ha_up.as_ref();
        // The zone names the re-translated switches had.
        let mut old_names: BTreeSet<String> = BTreeSet::new();
        for dp in &port_dps {
            let i = index[dp];
            if !matches!(t.spec.datapaths[i].kind, DatapathKind::Router { .. }) {
                old_names.extend(t.spec.datapaths[i].ports.iter().map(|p| p.name.clone()));
            }
            let mut diags = Vec::new();
            let (p, local): (Vec<_>, Vec<bool>) =
                ports::dp_ports(sb, &ctx, *dp, &index, &mut diags)
                    .into_iter()
                    .unzip();
            t.spec.datapaths[i].ports = p;
            set_or_remove(&mut s.ports, *dp, diags);
            if local.iter().any(|l| *l) {
                s.local.insert(*dp, local);
            } else {
                s.local.remove(dp);
            }
            touched.insert(i);
        }
        self.stats.port_datapaths = port_dps.len();
        // Groups: of the datapaths whose ports changed (keys and members), and of changed groups.
        let mut group_dps: BTreeSet<Uuid> = c.mg_dps.clone();
        #[cfg(test)]
        let groups_follow_ports = self.broken != 1;
        #[cfg(not(test))]
        let groups_follow_ports = true;
        if groups_follow_ports {
            group_dps.extend(port_dps.iter().copied());
        }
        group_dps.retain(|d| index.contains_key(d));
        for dp in &group_dps {
            let i = index[dp];
            let mut diags = Vec::new();
            let g = ports::dp_groups(sb, *dp, &t.spec.datapaths[i], &mut diags);
            t.spec.datapaths[i].groups = g;
            set_or_remove(&mut s.groups, *dp, diags);
            touched.insert(i);
        }
        // Local port ids (over every datapath, keeping `extra.local_ids`) and migrations.
        let mut renumbered = BTreeSet::new();
        if !port_dps.is_empty() || s.local_keep != extra.local_ids {
            let local_ports = ports::assign_local(
                s.local.iter().flat_map(|(dp, local)| {
                    t.spec.datapaths[index[dp]]
                        .ports
                        .iter()
                        .zip(local)
                        .filter(|(_, l)| **l)
                        .map(|(p, _)| &p.name)
                }),
                &extra.local_ids,
            );
            if s.local_keep != extra.local_ids {
                s.local_keep = extra.local_ids.clone();
            }
            let changed = local_ports != t.local_ports;
            for (dp, local) in &s.local {
                let i = index[dp];
                if !changed && !port_dps.contains(dp) {
                    continue;
                }
                if ports::set_local_ids(&mut t.spec.datapaths[i].ports, local, &local_ports)
                    && !touched.contains(&i)
                {
                    renumbered.insert(i);
                }
            }
            t.local_ports = local_ports;
        }
        if !c.pb.is_empty()
            && let Some((h, ch)) = here
        {
            let m = ports::migrations(sb, h, ch, t);
            rest.migrations |= m != t.migrations;
            t.migrations = m;
        }
        // Flows.
        let mut rows: BTreeSet<Uuid> = c.lf.clone();
        #[cfg(test)]
        let flows_follow_groups = self.broken != 2;
        #[cfg(not(test))]
        let flows_follow_groups = true;
        if flows_follow_groups {
            for g in c.dpg.keys() {
                rows.extend(
                    sb.logical_flow_all_by_logical_dp_group((*g).into())
                        .map(|f| f.uuid),
                );
            }
        }
        self.stats.flow_rows = rows.len();
        // Per datapath: the rows to take out (by UUID) and the flows to put in, applied in
        // one pass per datapath (a router's tens of thousands of flows are moved once, not
        // once per changed row).
        let mut edits: BTreeMap<usize, (Vec<String>, Vec<FlowSpec>)> = BTreeMap::new();
        let empty = (BTreeSet::new(), BTreeSet::new());
        for r in &rows {
            let now = sb.logical_flow().get(r);
            let (old_dps, old_groups) = c.lf_old.get(r).unwrap_or(&empty);
            // Where the row may be now: where it was and where it goes.
            let mut cands: BTreeSet<Uuid> = old_dps.clone();
            let mut groups: BTreeSet<Uuid> = old_groups.clone();
            if let Some(lf) = now {
                cands.extend(lf.logical_datapath.map(|d| d.uuid()));
                groups.extend(lf.logical_dp_group.map(|g| g.uuid()));
            }
            for g in &groups {
                if let Some(old) = c.dpg.get(g) {
                    cands.extend(old.iter().copied());
                }
                if let Some(row) = sb.logical_dp_group().get(g) {
                    cands.extend(row.datapaths.iter().map(|d| d.uuid()));
                }
            }
            // A row inserted since the last translation is in no datapath's flows yet (an
            // ACL's two rows on a group of 500 switches would otherwise be looked for in each).
            if !c.lf_new.contains(r) {
                let key = r.to_string();
                for dp in &cands {
                    if let Some(&i) = index.get(dp) {
                        edits.entry(i).or_default().0.push(key.clone());
                    }
                }
            }
            s.flows.remove(r);
            let Some(lf) = now else {
                continue;
            };
            let (targets, missing) = flows::flow_targets(sb, lf, &index);
            let mut diags: Vec<Diagnostic> = missing.into_iter().collect();
            if !targets.is_empty() {
                match flows::flow_spec_form(lf, &s.vars, form) {
                    Ok(fs) => {
                        for &i in &targets {
                            edits.entry(i).or_default().1.push(fs.clone());
                        }
                    }
                    Err(reason) => diags.push(Diagnostic {
                        table: "Logical_Flow",
                        uuid: lf.uuid,
                        reason,
                    }),
                }
            }
            if !diags.is_empty() {
                s.flows.insert(*r, diags);
            }
        }
        for (i, (gone, new)) in edits {
            let d = &mut t.spec.datapaths[i];
            let before = d.flows.len();
            if !gone.is_empty() {
                // (A router's 31k flows against a few rows: no string compare per flow.)
                let few = hf_datapath::proto::FewTexts::new(gone.iter().map(String::as_str));
                d.flows
                    .retain(|f| f.sb_uuid.as_deref().is_none_or(|u| !few.contains(u)));
            }
            if d.flows.len() != before || !new.is_empty() {
                touched.insert(i);
                let added = insert_flows(d, new);
                flow_edits.insert(
                    i,
                    FlowEdit {
                        removed: gone,
                        added,
                    },
                );
            }
        }
        // Sets.
        t.diagnostics.clear();
        rest.sets |= sets::update_sets(sb, t, &c.as_rows, &c.as_names, &c.pg_names, &mut s.sets);
        // Neighbours and FDB (whose rows name ports by key).
        if c.neigh || (!port_dps.is_empty() && !sb.fdb().is_empty()) {
            let old = (
                std::mem::take(&mut t.spec.neighbours),
                std::mem::take(&mut t.spec.fdb),
            );
            flows::translate_neighbours(sb, t);
            s.neigh = std::mem::take(&mut t.diagnostics);
            rest.neighbours |= old.0 != t.spec.neighbours || old.1 != t.spec.fdb;
        }
        if c.lb || !c.dpg.is_empty() {
            let old = std::mem::take(&mut t.spec.lb_vips);
            flows::translate_lbs(sb, chassis, t);
            s.lbs = std::mem::take(&mut t.diagnostics);
            rest.lb_vips |= old != t.spec.lb_vips;
        }
        if c.dns {
            let old = std::mem::take(&mut t.spec.dns);
            super::dns::translate_dns(sb, t);
            s.dns = std::mem::take(&mut t.diagnostics);
            rest.dns |= old != t.spec.dns;
        }
        // Zones: from the last assignment when it holds (the kept assignments include it),
        // else all of them again.
        let requested = zones::requested(sb, t);
        let dirty: Vec<usize> = port_dps.iter().map(|d| index[d]).collect();
        match s
            .zones_clean
            .then(|| zones_fast(sb, t, &requested, &extra.zones, &dirty, &old_names))
            .flatten()
        {
            Some((changed, moved)) => {
                self.stats.zones_from_last = true;
                touched.extend(changed);
                rest.zones |= moved;
            }
            None => {
                let old_zones = std::mem::take(&mut t.zones);
                let old_snat = t.spec.switch_snat_zones.clone();
                touched.extend(zones::assign(t, &requested, &extra.zones));
                rest.zones |= old_zones != t.zones || old_snat != t.spec.switch_snat_zones;
            }
        }
        s.zones = std::mem::take(&mut t.diagnostics);
        s.zones_clean = !s.zones.iter().any(|d| d.uuid.is_nil());
        // The diagnostics, in a full translation's order.
        let mut groups: Vec<GroupDiag> = s.groups.values().flatten().cloned().collect();
        groups.sort_by_key(|(k, _)| *k);
        t.diagnostics = s
            .head
            .iter()
            .chain(s.ports.values().flatten())
            .cloned()
            .chain(groups.into_iter().map(|(_, d)| d))
            .chain(s.sets.values().flatten().cloned())
            .chain(s.flows.values().flatten().cloned())
            .chain(s.neigh.iter().cloned())
            .chain(s.lbs.iter().cloned())
            .chain(s.dns.iter().cloned())
            .chain(s.zones.iter().cloned())
            .collect();
        let name = |i: &usize| t.spec.datapaths[*i].name.clone();
        renumbered.retain(|i| !touched.contains(i));
        t.touched = Some(Touched {
            datapaths: touched.iter().chain(&renumbered).map(name).collect(),
            rest,
        });
        t.renumbered = renumbered.iter().map(name).collect();
        t.flow_edits = Some(flow_edits.into_iter().map(|(i, e)| (name(&i), e)).collect());
        true
    }
}

/// [`zones::assign`]'s result computed from the last one, touching only the names of the
/// re-translated datapaths (`dirty`, whose switch ports were `old_names`): possible when the
/// last assignment reported nothing, `keep` holds every zone of it (as a controller's zone
/// map does) and its other zones are distinct, and no zone runs out. Then every name keeps
/// its zone, names gone are dropped and new ones get their kept zone or the lowest free ones
/// in name order, exactly as [`zones::assign`] would. Returns the datapaths whose zones
/// changed and whether the zone map did; `None` (nothing changed) when not possible.
fn zones_fast(
    sb: &SbSnapshot,
    t: &mut Translation,
    requested: &BTreeMap<String, u16>,
    keep: &BTreeMap<String, u16>,
    dirty: &[usize],
    old_names: &BTreeSet<String>,
) -> Option<(BTreeSet<usize>, bool)> {
    if requested.iter().any(|(n, z)| t.zones.get(n) != Some(z)) {
        return None;
    }
    let mut used = vec![0u64; 1 << 10];
    let mut take = |z: u16| {
        let (w, b) = (usize::from(z) >> 6, 1u64 << (z & 63));
        let free = used[w] & b == 0;
        used[w] |= b;
        free
    };
    // `keep` ⊇ the last assignment; its other entries (`extra`) distinct and nonzero.
    let mut extra: BTreeMap<&str, u16> = BTreeMap::new();
    let mut k = keep.iter().peekable();
    for (n, &z) in &t.zones {
        if !take(z) {
            return None;
        }
        while let Some((kn, &kz)) = k.next_if(|(kn, _)| kn.as_str() < n.as_str()) {
            extra.insert(kn, kz);
        }
        if k.next() != Some((n, &z)) {
            return None;
        }
    }
    extra.extend(k.map(|(n, z)| (n.as_str(), *z)));
    for &z in extra.values() {
        if z == 0 || !take(z) {
            return None;
        }
    }
    // The re-translated switches' names now; names gone from them and from every other
    // translated switch.
    let mut now: BTreeSet<&str> = BTreeSet::new();
    for &i in dirty {
        let d = &t.spec.datapaths[i];
        if !matches!(d.kind, DatapathKind::Router { .. }) {
            now.extend(d.ports.iter().map(|p| p.name.as_str()));
        }
    }
    let elsewhere = |n: &str| {
        sb.port_binding_all_by_logical_port(n).any(|pb| {
            t.datapath_index
                .get(&pb.datapath.uuid())
                .filter(|i| !dirty.contains(i))
                .and_then(|&i| t.spec.datapaths.get(i))
                .is_some_and(|d| {
                    !matches!(d.kind, DatapathKind::Router { .. })
                        && d.ports.iter().any(|p| p.name == n)
                })
        })
    };
    let gone: Vec<String> = old_names
        .iter()
        .filter(|n| !now.contains(n.as_str()) && !elsewhere(n))
        .map(|n| zones::port_zone_name(n))
        .collect();
    let mut new: Vec<(String, u16)> = Vec::new();
    let mut next: u32 = 1;
    for n in now {
        let name = zones::port_zone_name(n);
        if t.zones.contains_key(&name) {
            continue;
        }
        let z = match extra.get(name.as_str()) {
            Some(&z) => z,
            None => {
                while next <= u32::from(u16::MAX) && !take(next as u16) {
                    next += 1;
                }
                if next > u32::from(u16::MAX) {
                    return None;
                }
                next as u16
            }
        };
        new.push((name, z));
    }
    let moved = !gone.is_empty() || !new.is_empty();
    for n in gone {
        t.zones.remove(&n);
    }
    t.zones.extend(new);
    let mut changed = BTreeSet::new();
    for &i in dirty {
        let d = &mut t.spec.datapaths[i];
        if matches!(d.kind, DatapathKind::Router { .. }) {
            continue;
        }
        for p in &mut d.ports {
            let z = t
                .zones
                .get(&zones::port_zone_name(&p.name))
                .copied()
                .unwrap_or(0);
            if p.zone != z {
                p.zone = z;
                changed.insert(i);
            }
        }
    }
    Some((changed, moved))
}

fn set_or_remove<T>(m: &mut BTreeMap<Uuid, Vec<T>>, k: Uuid, v: Vec<T>) {
    if v.is_empty() {
        m.remove(&k);
    } else {
        m.insert(k, v);
    }
}

/// The order of a full translation's sort: by [`flows::flow_order`], then (rows equal in it)
/// by row UUID.
/// [`before`] as an ordering.
fn order(a: &FlowSpec, b: &FlowSpec) -> std::cmp::Ordering {
    if before(a, b) {
        std::cmp::Ordering::Less
    } else if before(b, a) {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
}

fn before(a: &FlowSpec, b: &FlowSpec) -> bool {
    flows::flow_order(a, b)
        .then_with(|| a.sb_uuid.cmp(&b.sb_uuid))
        .is_lt()
}

/// Puts `new` where a full translation's sort puts them ([`before`]): a few flows are
/// inserted in place (each found by a binary search of the old list; the list is not copied,
/// a datapath of 250 flows gains an ACL's two in each of 500 switches), more in one merge of
/// the sorted lists. Returns where they went, ascending.
fn insert_flows(d: &mut DatapathSpec, mut new: Vec<FlowSpec>) -> Vec<usize> {
    /// Up to this many flows go in one by one.
    const IN_PLACE: usize = 8;
    if new.len() <= IN_PLACE {
        // Sorted (stably: equal flows keep their order, as the merge keeps it), each goes
        // before the first old flow not before it, after the new ones put in already.
        new.sort_by(order);
        let at: Vec<usize> = new
            .iter()
            .enumerate()
            .map(|(k, fs)| d.flows.partition_point(|f| before(f, fs)) + k)
            .collect();
        d.flows.reserve(new.len());
        for (fs, &pos) in new.into_iter().zip(&at) {
            d.flows.insert(pos, fs);
        }
        return at;
    }
    new.sort_by(order);
    let old = std::mem::take(&mut d.flows);
    let mut out = Vec::with_capacity(old.len() + new.len());
    let mut at = Vec::with_capacity(new.len());
    let mut new = new.into_iter().peekable();
    for f in old {
        while let Some(x) = new.next_if(|x| !before(&f, x)) {
            at.push(out.len());
            out.push(x);
        }
        out.push(f);
    }
    for x in new {
        at.push(out.len());
        out.push(x);
    }
    d.flows = out;
    at
}

/// What differs between two translations, datapath by datapath (by name).
pub fn compare(old: &Translation, new: &Translation) -> Touched {
    let by_name = |t: &Translation| -> BTreeMap<String, usize> {
        t.spec
            .datapaths
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), i))
            .collect()
    };
    let (a, b) = (by_name(old), by_name(new));
    let mut datapaths = BTreeSet::new();
    for n in a.keys().chain(b.keys()) {
        let same = match (a.get(n), b.get(n)) {
            (Some(&i), Some(&j)) => old.spec.datapaths[i] == new.spec.datapaths[j],
            _ => false,
        };
        if !same {
            datapaths.insert(n.clone());
        }
    }
    let (x, y) = (&old.spec, &new.spec);
    let rest = Rest {
        sets: x.sets.addr_sets != y.sets.addr_sets || x.sets.port_groups != y.sets.port_groups,
        chassis: old.chassis != new.chassis,
        neighbours: x.neighbours != y.neighbours || x.fdb != y.fdb,
        lb_vips: x.lb_vips != y.lb_vips,
        dns: x.dns != y.dns,
        zones: old.zones != new.zones || x.switch_snat_zones != y.switch_snat_zones,
        migrations: old.migrations != new.migrations,
    };
    Touched { datapaths, rest }
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
pub(crate) mod tests;
