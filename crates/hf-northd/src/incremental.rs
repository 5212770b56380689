//! Incremental compile: [`Incremental`] keeps, per datapath, the shapes (rendered text) of the
//! flows its stages built and their diagnostics, plus render's grouping (shape → datapaths) and
//! the rows of every identity. Given the NB changes since the last compile it rebuilds only the
//! datapaths whose flows can change, regroups only their shapes, re-derives only the identities
//! those shapes have, and yields the same [`Compiled`] as [`crate::compile`] would for the new
//! NB (the `incremental` test asserts this equality after every step of random NB changes).
//!
//! Which datapaths a change can touch ([`Incremental::update`]):
//! - a VIF of a switch (a `Logical_Switch_Port` that is no `router` or `localnet` port before
//!   or after and that no NAT names; a switch row whose port list alone changed by such
//!   ports): the switch, and of each router facing it only the section of the router port
//!   facing it ([`crate::lr::build_sections`]: that port's next-hop entries, which list the
//!   switch's addresses), not the router's other flows;
//! - a switch or one of its other ports, its QoS rows: the switch and the routers connected
//!   to it;
//! - a router, its ports (`Logical_Router_Port`, `Gateway_Chassis`), NAT rows, static routes
//!   and policies: the router, its neighbours (switches and peer routers) and the routers on
//!   those switches (switches answer ARP for the router's addresses and VIPs);
//! - an ACL: the switches holding it directly or through a port group; a port group: the
//!   switches of its ports, before and after; a switch whose `acls` alone changed: itself
//!   (with its VIF rule when VIFs changed too). These rebuild the switches alone: no
//!   router stage reads a switch's ACLs or port groups;
//! - an address set: the routers whose NAT rows name it (`allowed_ext_ips`,
//!   `exempted_ext_ips`); ACL matches name sets as `$name`, which controllers expand;
//! - a load balancer or load-balancer group: the switches and routers using it (directly or
//!   through a group), with the routers' expansion above;
//! - a datapath whose name, row, kind or tunnel key changed, or that appears or disappears.
//!
//! What falls back to the full compile: the first compile, a change of the health checks'
//! plan ([`crate::svc::plan`]: `Service_Monitor` status in SB, health checks, mappings, the
//! mapped ports), a change of the features, the
//! frozen datapaths or the negotiation diagnostics in [`Options`] (tunnel keys and
//! `SB_Global.options` do not: only the non-flow tables read them, and a datapath whose tunnel
//! key changes is rebuilt), features
//! other than every feature (lowering aggregates diagnostics over all datapaths), and an NB
//! change of any other table (`NB_Global` other than northd's handshake columns,
//! `DHCP_Options`, `DNS`, `Meter`, HA chassis groups, ...): correctness first.
//!
//! The topology and the non-flow tables: a change set of plain VIF, ACL, port group, address
//! set and switch-only load balancer changes patches the last ones in place
//! (`crate::vif_patch`, whose doc lists the conditions); anything else redoes
//! [`crate::topo::Topo::build`] and the non-flow tables and compares those with the last ones
//! (when given back). What it does not do: talk to SB; [`Incremental::changed`] and
//! [`Incremental::non_flow_changed`] tell the caller which flow and non-flow identities
//! changed in the last update.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use hf_expr::FeatureSet;
use hf_model::{NbDelta, NbSnapshot, RowDelta, RowRef};
use uuid::Uuid;

use crate::diag::{Diagnostic, Diags};
use crate::flow::{FlowId, Flows};
use crate::output::{FlowRow, SbDesired};
use crate::render::{IdentityKey, Shape};
use crate::stage::DpKind;
use crate::topo::{PortKind, Topo};
use crate::{Compiled, Options};

/// Test-only broken dependency rules: the oracles must catch each.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broken {
    /// A `Logical_Router_Port` change seeds no datapath (its router's flows go stale).
    RouterPortSeedsNothing,
    /// The sync's scope leaves `Port_Binding` identities out (the daemon core's rule).
    ScopeWithoutPorts,
    /// Every switch port change is taken for a VIF's: router and localnet port changes
    /// re-render only the facing routers' sections.
    VifChangesNoRouter,
    /// The VIF fast path ([`crate::vif_patch`]) leaves the datapath's multicast groups as
    /// they were.
    VifPatchNoMcast,
    /// An `ACL` change seeds no switch (its switches' flows go stale).
    AclSeedsNothing,
    /// The fast path keeps the last `Address_Set`s when the index is redone.
    IndexPatchKeepsAddressSets,
}

/// What must match between two compiles for the second to be incremental.
#[derive(Clone, Debug, PartialEq)]
struct OptsKey {
    features: FeatureSet,
    frozen: BTreeSet<String>,
    extra: Vec<Diagnostic>,
}

impl OptsKey {
    fn of(o: &Options) -> OptsKey {
        OptsKey {
            features: o.render.features,
            frozen: o.frozen_datapaths.clone(),
            extra: o.extra_diagnostics.clone(),
        }
    }
}

/// One datapath's part of the last compile.
#[derive(Debug)]
struct DpState {
    /// What the datapath was: (kind, NB row, tunnel key).
    ident: (DpKind, Uuid, u32),
    /// Its flows' shapes.
    shapes: Vec<Arc<Shape>>,
    /// Diagnostics its stages reported.
    diags: Vec<Diagnostic>,
    /// Flows built (before grouping).
    built: usize,
    /// A router's per-port sections ([`crate::lr::build_sections`]): router port name →
    /// (shapes, flows built). Empty for switches.
    sections: HashMap<String, (Vec<Arc<Shape>>, usize)>,
}

/// One identity's part of the last compile.
#[derive(Debug, Default)]
struct IdState {
    /// Its shapes (usually one).
    shapes: Vec<Arc<Shape>>,
    /// The rows it was written as.
    ids: Vec<FlowId>,
    /// The diagnostics deriving them produced.
    diags: Vec<Diagnostic>,
}

/// The incremental compiler's state. See the module documentation.
#[derive(Debug, Default)]
pub struct Incremental {
    /// `None` until a full compile.
    key: Option<OptsKey>,
    dps: HashMap<Arc<str>, DpState>,
    /// Shape → the datapaths that have it, sorted by name, with multiplicity (a datapath may
    /// build one shape twice); the names are the `dps` keys' allocations.
    groups: HashMap<Arc<Shape>, Vec<(Arc<str>, u32)>>,
    /// Identity → its shapes and rows; the key is the allocation its shapes share.
    idents: HashMap<Arc<IdentityKey>, IdState>,
    /// Neighbours by datapath name (switch ↔ router, router ↔ router), as of the last compile.
    neighbours: HashMap<String, BTreeSet<String>>,
    /// Port NB row → datapath name, as of the last compile.
    port_dp: HashMap<Uuid, String>,
    /// The last result's flows, while the caller has not taken them (see [`Incremental::update`]).
    flows: Option<BTreeMap<FlowId, FlowRow>>,
    /// Identities whose rows changed in the last update (`None`: everything, a full compile).
    changed: Option<BTreeSet<FlowId>>,
    /// Datapaths rebuilt by the last update.
    rebuilt: usize,
    /// Router port sections re-rendered alone by the last update.
    sections_rebuilt: usize,
    /// The last compile's topology without its NB (patched by the VIF fast path).
    topo: Option<crate::topo::TopoParts>,
    /// The keys the last compile used, but the port keys (its topology has those).
    seen_keys: Option<crate::topo::Keys>,
    /// The last compile's diagnostics from the topology and the non-flow tables.
    topo_diags: Vec<Diagnostic>,
    /// The last result's non-flow tables (flows empty), while the caller has not taken them.
    tables: Option<SbDesired>,
    /// The non-flow identities the last update changed (`None`: unknown).
    non_flow: Option<crate::sync::Scope>,
    /// Whether the last update patched the topology and tables (the VIF fast path).
    patched: bool,
    /// The health checks' plan of the last update: an update whose plan differs is a full
    /// one ([`crate::svc`]).
    svc: Option<crate::svc::SvcPlan>,
    /// Whether the last update read any `IGMP_Group` row.
    igmp_any: bool,
    /// Whether the last update had any NB or SB `BFD` row.
    bfd_any: bool,
    /// A broken rule (tests of the oracles only).
    #[cfg(test)]
    pub(crate) broken: Option<Broken>,
    /// The last multicast groups ([`Broken::VifPatchNoMcast`] keeps them).
    #[cfg(test)]
    broken_mcgroups: Option<BTreeMap<(String, String), crate::output::McRow>>,
}

/// The datapath-level facts of a topology the dependency rules need.
struct Links {
    neighbours: HashMap<String, BTreeSet<String>>,
    port_dp: HashMap<Uuid, String>,
}

fn links(topo: &Topo<'_>) -> Links {
    let mut neighbours: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut port_dp = HashMap::new();
    for p in &topo.ports {
        let here = &topo.datapaths[p.dp].name;
        port_dp.insert(p.nb, here.clone());
        let other = match &p.kind {
            PortKind::SwitchRouter { lrp: Some(l) } => Some(*l),
            PortKind::RouterPort { peer, switch_peer } => peer.or(*switch_peer),
            _ => None,
        };
        if let Some(o) = other.and_then(|o| topo.ports.get(o)) {
            let there = &topo.datapaths[o.dp].name;
            if there != here {
                neighbours
                    .entry(here.clone())
                    .or_default()
                    .insert(there.clone());
                neighbours
                    .entry(there.clone())
                    .or_default()
                    .insert(here.clone());
            }
        }
    }
    Links {
        neighbours,
        port_dp,
    }
}

/// Datapath names a delta seeds, before expansion; `None`: cannot be classified.
#[derive(Default)]
struct Seeds {
    switches: BTreeSet<String>,
    routers: BTreeSet<String>,
    /// Switches whose VIFs alone changed: rebuilt themselves, and of the routers they face
    /// only the sections of the router ports facing them.
    vif_switches: BTreeSet<String>,
    /// Switches whose ACLs or port groups changed: rebuilt themselves only (no router stage
    /// reads a switch's ACLs or its ports' port groups).
    alone: BTreeSet<String>,
}

impl Incremental {
    /// A state that does a full compile first.
    pub fn new() -> Incremental {
        Incremental::default()
    }

    /// The flow identities whose rows the last update added, changed or removed; `None` after a
    /// full compile (anything may have changed).
    pub fn changed(&self) -> Option<&BTreeSet<FlowId>> {
        self.changed.as_ref()
    }

    /// How many datapaths the last update rebuilt (all of them after a full compile).
    pub fn rebuilt(&self) -> usize {
        self.rebuilt
    }

    /// How many router port sections the last update re-rendered without their router.
    pub fn sections_rebuilt(&self) -> usize {
        self.sections_rebuilt
    }

    /// The non-flow SB identities (`Port_Binding`, `Multicast_Group`, ...) the last update
    /// changed; `None` when unknown (a full compile, or the tables were not given back).
    /// Its `flows` are empty: see [`Incremental::changed`].
    pub fn non_flow_changed(&self) -> Option<&crate::sync::Scope> {
        self.non_flow.as_ref()
    }

    /// Whether the last update patched the last topology and non-flow tables in place (the
    /// plain VIF fast path, `vif_patch`) rather than building them anew.
    pub fn patched(&self) -> bool {
        self.patched
    }

    /// Drops the state field by field, calling `after` with each field's name once it is
    /// freed: a memory profile's hook (`hf-bench northd` reports the bytes each held). The
    /// desired SB the state holds (given back with [`Incremental::restore`]) is dropped first,
    /// as `flows` then `tables`.
    pub fn drop_measured(mut self, after: &mut dyn FnMut(&'static str)) {
        drop(self.flows.take());
        after("desired flows");
        drop(self.tables.take());
        after("desired non-flow tables");
        drop(std::mem::take(&mut self.groups));
        after("groups (shape -> datapaths)");
        drop(std::mem::take(&mut self.idents));
        after("identities (shapes, flow ids, diagnostics)");
        drop(std::mem::take(&mut self.dps));
        after("per-datapath shapes, sections, diagnostics");
        drop(self.topo.take());
        after("topology");
        drop(std::mem::take(&mut self.neighbours));
        drop(std::mem::take(&mut self.port_dp));
        after("links (neighbours, port -> datapath)");
        drop(self);
        after("the rest");
    }

    /// Forgets everything: the next update is a full compile.
    pub fn reset(&mut self) {
        *self = Incremental::default();
    }

    /// Compiles `nb`, which is the NB of the last update with `deltas` applied (in order);
    /// the result equals [`crate::compile`]`(nb, opts)`. `deltas` = `None` means "unknown
    /// changes": a full compile. The result's flows are the state's: hand them back with
    /// [`Incremental::restore`] before the next update, or it is a full compile.
    pub fn update(
        &mut self,
        nb: &NbSnapshot,
        deltas: Option<&[NbDelta]>,
        opts: &Options,
    ) -> Compiled {
        let key = OptsKey::of(opts);
        // Health checks: a monitor's status (an SB input) or a mapping can change the flows
        // of datapaths no NB change names; any change to the plan makes the update full.
        let svc = crate::svc::plan(nb, &opts.keys.svc, &opts.keys.sb_options);
        let svc_same = self.svc.as_ref() == Some(&svc);
        self.svc = Some(svc.clone());
        // Learned multicast groups (SB `IGMP_Group`, see [`crate::tables::igmp`]) are not
        // patched: while any exist (or the last update had some), every update is full.
        // BFD (NB `BFD` rows, SB `BFD` statuses: [`crate::bfd`]) likewise.
        let bfd_now = !opts.keys.bfd.is_empty() || !nb.bfd().is_empty();
        let unpatched_quiet =
            opts.keys.igmp.is_empty() && !self.igmp_any && !bfd_now && !self.bfd_any;
        self.igmp_any = !opts.keys.igmp.is_empty();
        self.bfd_any = bfd_now;
        let seeds = match deltas {
            Some(ds)
                if svc_same
                    && unpatched_quiet
                    && self.key.as_ref() == Some(&key)
                    && key.features == FeatureSet::all()
                    && self.flows.is_some() =>
            {
                self.seeds(nb, ds)
            }
            _ => None,
        };
        match seeds {
            Some(s) => {
                // Expansion over the old links here; over the new ones in `run`.
                let dirty = self.expand(&s, &self.neighbours);
                let plan = match (&self.topo, &self.seen_keys, deltas, &self.tables) {
                    (Some(t), Some(k), Some(ds), Some(_)) => {
                        crate::vif_patch::plan(nb, ds, t, k, &opts.keys)
                    }
                    _ => None,
                };
                self.run(nb, opts, Some(s), dirty.into_iter().collect(), plan)
            }
            None => {
                #[cfg(test)]
                let broken = self.broken;
                *self = Incremental::default();
                #[cfg(test)]
                {
                    self.broken = broken;
                }
                self.svc = Some(svc);
                self.igmp_any = !opts.keys.igmp.is_empty();
                self.bfd_any = bfd_now;
                if key.features != FeatureSet::all() {
                    // Lowering reports over all datapaths: only the plain compile does that.
                    let c = crate::compile(nb, opts);
                    self.rebuilt = c.sb.datapaths.len();
                    return c;
                }
                self.key = Some(key);
                self.flows = Some(BTreeMap::new());
                self.run(nb, opts, None, Vec::new(), None)
            }
        }
    }

    /// Gives back the last [`Incremental::update`]'s result, unchanged: its flows, and its
    /// non-flow tables (patched in place by the next update, and compared with its result to
    /// name what changed). No copy of either is kept meanwhile.
    pub fn restore(&mut self, mut sb: SbDesired) {
        if self.key.is_some() {
            self.flows = Some(std::mem::take(&mut sb.flows));
            self.tables = Some(sb);
        }
    }

    fn expand(
        &self,
        seeds: &Seeds,
        neighbours: &HashMap<String, BTreeSet<String>>,
    ) -> BTreeSet<String> {
        let empty = BTreeSet::new();
        let nb = |d: &str| neighbours.get(d).unwrap_or(&empty);
        let mut out: BTreeSet<String> = BTreeSet::new();
        for s in &seeds.switches {
            out.insert(s.clone());
            out.extend(nb(s).iter().cloned());
        }
        out.extend(seeds.vif_switches.iter().cloned());
        out.extend(seeds.alone.iter().cloned());
        for r in &seeds.routers {
            out.insert(r.clone());
            for n in nb(r) {
                out.insert(n.clone());
                out.extend(nb(n).iter().cloned());
            }
        }
        out
    }

    /// The datapaths `deltas` can touch directly; `None` when some change is not classified.
    fn seeds(&self, nb: &NbSnapshot, deltas: &[NbDelta]) -> Option<Seeds> {
        let mut s = Seeds::default();
        for d in deltas {
            self.seed_one(nb, d, &mut s)?;
        }
        Some(s)
    }

    fn seed_one(&self, nb: &NbSnapshot, d: &NbDelta, s: &mut Seeds) -> Option<()> {
        // Tables nothing here classifies: a full compile.
        let unclassified = d.len()
            - d.logical_switch.len()
            - d.logical_switch_port.len()
            - d.logical_router.len()
            - d.logical_router_port.len()
            - d.acl.len()
            - d.port_group.len()
            - d.nat.len()
            - d.logical_router_static_route.len()
            - d.logical_router_policy.len()
            - d.load_balancer.len()
            - d.load_balancer_group.len()
            - d.gateway_chassis.len()
            - d.qos.len()
            - d.address_set.len()
            - d.nb_global.len();
        if unclassified != 0 {
            return None;
        }
        for r in &d.nb_global {
            match r {
                RowDelta::Update { old, new } => {
                    if with_handshake_of(old, new) != *new {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        for r in &d.logical_switch {
            // A switch whose port list alone changed, by VIFs only: as a VIF change.
            if let RowDelta::Update { old, new } = r
                && self.vif_ports_only(nb, d, old, new)
            {
                s.vif_switches.insert(new.name.clone());
                continue;
            }
            // A switch whose ACL list alone changed (with VIFs at most): itself only.
            if let RowDelta::Update { old, new } = r {
                let mut a = old.clone();
                a.acls = new.acls.clone();
                if a == *new {
                    s.alone.insert(new.name.clone());
                    continue;
                }
                let mut b = new.clone();
                b.acls = old.acls.clone();
                if self.vif_ports_only(nb, d, old, &b) {
                    s.alone.insert(new.name.clone());
                    s.vif_switches.insert(new.name.clone());
                    continue;
                }
            }
            for row in [r.before(), r.after()].into_iter().flatten() {
                s.switches.insert(row.name.clone());
            }
        }
        for r in &d.logical_router {
            for row in [r.before(), r.after()].into_iter().flatten() {
                s.routers.insert(row.name.clone());
            }
        }
        for r in &d.logical_switch_port {
            // A router port with the same name: one of the two is left out as the duplicate,
            // so that router changes as if its port did.
            for row in [r.before(), r.after()].into_iter().flatten() {
                for lrp in nb.logical_router_port_all_by_name(&row.name) {
                    for lr in nb.logical_router_all_by_ports(RowRef::from(lrp.uuid)) {
                        s.routers.insert(lr.name.clone());
                    }
                }
            }
            if self.vif_only(nb, r) {
                self.lsp_switches(nb, r.uuid(), &mut s.vif_switches);
            } else {
                self.lsp_switches(nb, r.uuid(), &mut s.switches);
            }
        }
        for r in &d.logical_router_port {
            #[cfg(test)]
            if self.broken == Some(Broken::RouterPortSeedsNothing) {
                continue;
            }
            let u = r.uuid();
            if let Some(n) = self.port_dp.get(&u) {
                s.routers.insert(n.clone());
            }
            for lr in nb.logical_router_all_by_ports(RowRef::from(u)) {
                s.routers.insert(lr.name.clone());
            }
        }
        for r in &d.gateway_chassis {
            for lrp in nb.logical_router_port_all_by_gateway_chassis(RowRef::from(r.uuid())) {
                if let Some(n) = self.port_dp.get(&lrp.uuid) {
                    s.routers.insert(n.clone());
                }
                for lr in nb.logical_router_all_by_ports(RowRef::from(lrp.uuid)) {
                    s.routers.insert(lr.name.clone());
                }
            }
        }
        for r in &d.qos {
            for ls in nb.logical_switch_all_by_qos_rules(RowRef::from(r.uuid())) {
                s.switches.insert(ls.name.clone());
            }
        }
        // ACLs and port groups reach only switch stages: their switches alone.
        for r in &d.acl {
            #[cfg(test)]
            if self.broken == Some(Broken::AclSeedsNothing) {
                continue;
            }
            let u = RowRef::from(r.uuid());
            for ls in nb.logical_switch_all_by_acls(u) {
                s.alone.insert(ls.name.clone());
            }
            for pg in nb.port_group_all_by_acls(u) {
                for p in &pg.ports {
                    self.lsp_switches(nb, p.uuid(), &mut s.alone);
                }
            }
        }
        for r in &d.port_group {
            for row in [r.before(), r.after()].into_iter().flatten() {
                for p in &row.ports {
                    self.lsp_switches(nb, p.uuid(), &mut s.alone);
                }
            }
        }
        // An address set reaches flows only by name, through NAT `allowed_ext_ips` and
        // `exempted_ext_ips` (ACL matches name it as `$name`, expanded by controllers).
        for r in &d.address_set {
            let u = r.uuid();
            for n in nb.nat().values() {
                let uses = [&n.allowed_ext_ips, &n.exempted_ext_ips]
                    .iter()
                    .any(|x| x.is_some_and(|a| a.uuid() == u));
                if uses {
                    for lr in nb.logical_router_all_by_nat(RowRef::from(n.uuid)) {
                        s.routers.insert(lr.name.clone());
                    }
                }
            }
        }
        for r in &d.nat {
            for lr in nb.logical_router_all_by_nat(RowRef::from(r.uuid())) {
                s.routers.insert(lr.name.clone());
            }
        }
        for r in &d.logical_router_static_route {
            for lr in nb.logical_router_all_by_static_routes(RowRef::from(r.uuid())) {
                s.routers.insert(lr.name.clone());
            }
        }
        for r in &d.logical_router_policy {
            for lr in nb.logical_router_all_by_policies(RowRef::from(r.uuid())) {
                s.routers.insert(lr.name.clone());
            }
        }
        let mut lbs: BTreeSet<Uuid> = d.load_balancer.iter().map(|r| r.uuid()).collect();
        let mut lb_groups: BTreeSet<Uuid> =
            d.load_balancer_group.iter().map(|r| r.uuid()).collect();
        for r in &d.load_balancer_group {
            for row in [r.before(), r.after()].into_iter().flatten() {
                lbs.extend(row.load_balancer.iter().map(|l| l.uuid()));
            }
        }
        for g in nb.load_balancer_group().values() {
            if g.load_balancer.iter().any(|l| lbs.contains(&l.uuid())) {
                lb_groups.insert(g.uuid);
            }
        }
        if !lbs.is_empty() || !lb_groups.is_empty() {
            for ls in nb.logical_switch().values() {
                if ls.load_balancer.iter().any(|l| lbs.contains(&l.uuid()))
                    || ls
                        .load_balancer_group
                        .iter()
                        .any(|g| lb_groups.contains(&g.uuid()))
                {
                    s.switches.insert(ls.name.clone());
                }
            }
            for lr in nb.logical_router().values() {
                if lr.load_balancer.iter().any(|l| lbs.contains(&l.uuid()))
                    || lr
                        .load_balancer_group
                        .iter()
                        .any(|g| lb_groups.contains(&g.uuid()))
                {
                    s.routers.insert(lr.name.clone());
                }
            }
        }
        Some(())
    }

    /// Whether a `Logical_Switch_Port` change reaches routers only through the next-hop
    /// entries of the router ports facing its switch ([`crate::lr::build_sections`]): it is
    /// no router or localnet port before or after, no router port has its name, and no NAT
    /// names it as `logical_port`.
    fn vif_only(&self, nb: &NbSnapshot, r: &RowDelta<hf_model::nb::LogicalSwitchPort>) -> bool {
        #[cfg(test)]
        if self.broken == Some(Broken::VifChangesNoRouter) {
            return true;
        }
        let rows: Vec<&hf_model::nb::LogicalSwitchPort> =
            [r.before(), r.after()].into_iter().flatten().collect();
        // A name a router port row also has: whichever is left out as the duplicate, the
        // router's ports change with it.
        rows.iter().all(|p| {
            p.type_ != "router"
                && p.type_ != "localnet"
                && nb.logical_router_port_all_by_name(&p.name).next().is_none()
        }) && !nb.nat().values().any(|n| {
            n.logical_port
                .as_ref()
                .is_some_and(|lp| rows.iter().any(|p| p.name == *lp))
        })
    }

    /// Whether switch row `old` became `new` by its `ports` alone, gaining and losing only
    /// ports that [`Incremental::vif_only`] would pass.
    fn vif_ports_only(
        &self,
        nb: &NbSnapshot,
        d: &NbDelta,
        old: &hf_model::nb::LogicalSwitch,
        new: &hf_model::nb::LogicalSwitch,
    ) -> bool {
        let mut a = old.clone();
        a.ports = new.ports.clone();
        if a != *new {
            return false;
        }
        old.ports.symmetric_difference(&new.ports).all(|p| {
            let u = p.uuid();
            match d.logical_switch_port.iter().find(|r| r.uuid() == u) {
                Some(r) => self.vif_only(nb, r),
                None => nb.logical_switch_port().get(&u).is_some_and(|row| {
                    self.vif_only(
                        nb,
                        &RowDelta::Update {
                            old: row.clone(),
                            new: row.clone(),
                        },
                    )
                }),
            }
        })
    }

    /// The switches a logical switch port was on (last compile) and is on (`nb`).
    fn lsp_switches(&self, nb: &NbSnapshot, u: Uuid, out: &mut BTreeSet<String>) {
        if let Some(n) = self.port_dp.get(&u) {
            out.insert(n.clone());
        }
        for ls in nb.logical_switch_all_by_ports(RowRef::from(u)) {
            out.insert(ls.name.clone());
        }
    }

    /// Builds the topology and the non-flow tables, then the flows of every datapath
    /// (`seeds` = `None`) or of `dirty`, the seeds' expansion over the new links and the
    /// datapaths whose identity changed.
    fn run(
        &mut self,
        nb: &NbSnapshot,
        opts: &Options,
        seeds: Option<Seeds>,
        dirty: Vec<String>,
        plan: Option<crate::vif_patch::Plan>,
    ) -> Compiled {
        let mut diags = Diags::default();
        let tables_prev = self.tables.take();
        let parts = self.topo.take();
        // The plain VIF fast path patches the last topology; anything else builds it anew.
        let (topo, patched) = match (plan, parts) {
            (Some(plan), Some(parts)) => {
                let mut topo = Topo::from_parts(nb, parts);
                let p = crate::vif_patch::patch_topo(&mut topo, &plan, &opts.keys, &mut diags);
                (topo, Some((plan, p)))
            }
            _ => (
                Topo::build(nb, &opts.keys, opts.render.features, &mut diags),
                None,
            ),
        };
        let new_links = match &patched {
            Some((plan, p)) => {
                let mut port_dp = std::mem::take(&mut self.port_dp);
                for u in &plan.rows {
                    port_dp.remove(u);
                }
                for (u, dp) in &p.present {
                    port_dp.insert(*u, topo.datapaths[*dp].name.clone());
                }
                Links {
                    neighbours: std::mem::take(&mut self.neighbours),
                    port_dp,
                }
            }
            None => links(&topo),
        };
        let full = seeds.is_none();
        let mut dirty: BTreeSet<String> = dirty.into_iter().collect();
        if let Some(s) = &seeds {
            dirty.extend(self.expand(s, &new_links.neighbours));
        }
        // Datapaths that appeared, disappeared or changed what they are.
        let mut present: HashMap<&str, usize> = HashMap::new();
        for (i, d) in topo.datapaths.iter().enumerate() {
            present.insert(d.name.as_str(), i);
            let ident = (d.kind, d.nb, d.tunnel_key);
            if full
                || self
                    .dps
                    .get(d.name.as_str())
                    .is_none_or(|s| s.ident != ident)
            {
                dirty.insert(d.name.clone());
            }
        }
        dirty.extend(
            self.dps
                .keys()
                .filter(|n| !present.contains_key(&***n))
                .map(|n| n.to_string()),
        );
        // Routers of which only per-port sections need re-rendering: those facing a switch
        // whose VIFs alone changed (and not dirty as a whole).
        let mut partial: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        if let Some(sd) = &seeds {
            for p in &topo.ports {
                let PortKind::RouterPort {
                    switch_peer: Some(l),
                    ..
                } = &p.kind
                else {
                    continue;
                };
                let (router, switch) = (
                    &topo.datapaths[p.dp].name,
                    &topo.datapaths[topo.ports[*l].dp].name,
                );
                if sd.vif_switches.contains(switch) && !dirty.contains(router) {
                    partial
                        .entry(router.clone())
                        .or_default()
                        .insert(p.name.clone());
                }
            }
        }
        // Rebuild the dirty datapaths; take their old shapes out of the groups.
        let mut touched: BTreeSet<Arc<IdentityKey>> = BTreeSet::new();
        let mut rebuilt = 0;
        for name in &dirty {
            let (name, old, old_sections) = match self.dps.remove_entry(name.as_str()) {
                Some((k, o)) => (k, o.shapes, o.sections),
                None => (Arc::from(name.as_str()), Vec::new(), HashMap::new()),
            };
            let name = &name;
            let Some(&i) = present.get(&**name) else {
                for sh in old
                    .iter()
                    .chain(old_sections.values().flat_map(|(v, _)| v.iter()))
                {
                    self.ungroup(sh, name);
                    touched.insert(sh.ident.clone());
                }
                continue;
            };
            rebuilt += 1;
            let mut flows = Flows::default();
            let mut d = Diags::default();
            let mut sections = HashMap::new();
            match topo.datapaths[i].kind {
                DpKind::Switch => crate::ls::build(&topo, i, &mut flows, &mut d),
                DpKind::Router => {
                    crate::lr::build_core(&topo, i, &mut flows, &mut d);
                    let mut old_sections = old_sections;
                    for (port, fl) in crate::lr::build_sections(&topo, i, None) {
                        let was = old_sections.remove(&port).unwrap_or_default().0;
                        let shapes = self.swap_shapes(name, was, &fl, &topo, &mut touched);
                        sections.insert(port, (shapes, fl.len()));
                    }
                    for (_, (was, _)) in old_sections {
                        self.swap_shapes(name, was, &Flows::default(), &topo, &mut touched);
                    }
                }
            }
            let shapes = self.swap_shapes(name, old, &flows, &topo, &mut touched);
            let dp = &topo.datapaths[i];
            self.dps.insert(
                name.clone(),
                DpState {
                    ident: (dp.kind, dp.nb, dp.tunnel_key),
                    shapes,
                    diags: d.0,
                    built: flows.len(),
                    sections,
                },
            );
        }
        // Re-render the sections of the routers facing switches whose VIFs changed.
        let mut sections_rebuilt = 0;
        for (name, ports) in &partial {
            let Some(&i) = present.get(name.as_str()) else {
                continue;
            };
            let built = crate::lr::build_sections(&topo, i, Some(ports));
            let Some((name, mut st)) = self.dps.remove_entry(name.as_str()) else {
                continue;
            };
            let name = &name;
            for (port, fl) in built {
                sections_rebuilt += 1;
                let was = st.sections.remove(&port).unwrap_or_default().0;
                let shapes = self.swap_shapes(name, was, &fl, &topo, &mut touched);
                st.sections.insert(port, (shapes, fl.len()));
            }
            self.dps.insert(name.clone(), st);
        }
        // Re-derive the touched identities' rows.
        let mut flows: BTreeMap<FlowId, FlowRow> = self.flows.take().unwrap_or_default();
        let mut changed = BTreeSet::new();
        // A full compile's rows, for a map built in one go: inserted one by one in identity
        // order (random in `FlowId` order) the map's nodes stay about two-thirds full; built
        // from the sorted rows they are full. Same last-wins rule
        // for equal ids as `insert`: `from_iter` keeps the last of equal keys.
        let mut fresh: Vec<(FlowId, FlowRow)> = Vec::new();
        for key in &touched {
            let st = self.idents.get_mut(key);
            let old_ids = st.map(|st| std::mem::take(&mut st.ids)).unwrap_or_default();
            let mut new_rows = BTreeMap::new();
            let mut d = Diags::default();
            if let Some(st) = self.idents.get(key) {
                let variants: Vec<(&Shape, Vec<&str>)> = st
                    .shapes
                    .iter()
                    .map(|sh| {
                        let names = self
                            .groups
                            .get(sh)
                            .map(|m| m.iter().map(|(n, _)| &**n).collect())
                            .unwrap_or_default();
                        (sh.as_ref(), names)
                    })
                    .collect();
                new_rows = crate::render::identity_rows(key, variants, true, &mut d);
            }
            for id in &old_ids {
                if !new_rows.contains_key(id) {
                    flows.remove(id);
                    changed.insert(*id);
                }
            }
            let ids: Vec<FlowId> = new_rows.keys().copied().collect();
            for (id, row) in new_rows {
                if full {
                    changed.insert(id);
                    fresh.push((id, row));
                    continue;
                }
                match flows.get(&id) {
                    Some(r) if *r == row => {}
                    _ => {
                        changed.insert(id);
                        flows.insert(id, row);
                    }
                }
            }
            if let Some(st) = self.idents.get_mut(key) {
                if st.shapes.is_empty() && ids.is_empty() && d.0.is_empty() {
                    self.idents.remove(key);
                } else {
                    st.ids = ids;
                    st.diags = d.0;
                }
            }
        }
        if flows.is_empty() {
            flows = fresh.into_iter().collect();
        } else {
            flows.extend(fresh);
        }
        // The non-flow tables: patched for plain VIF changes, else built anew and compared
        // with the last ones (when given back) to name what changed.
        let (sb, non_flow) = match (&patched, tables_prev) {
            (Some((plan, p)), Some(mut sb)) => {
                sb.flows = flows;
                #[cfg(test)]
                let kept = (self.broken == Some(Broken::IndexPatchKeepsAddressSets))
                    .then(|| sb.address_sets.clone());
                #[allow(unused_mut)]
                let mut s =
                    crate::vif_patch::patch_tables(&topo, opts, plan, p, &mut sb, &mut diags);
                #[cfg(test)]
                if let Some(k) = kept {
                    sb.address_sets = k;
                    s.address_sets.clear();
                }
                (sb, Some(s))
            }
            (_, prev) => {
                let mut sb = SbDesired {
                    flows,
                    ..Default::default()
                };
                crate::tables::build(&topo, opts, &mut sb, &mut diags);
                sb.frozen_datapaths = opts.frozen_datapaths.clone();
                let s = prev.map(|old| crate::sync::Scope::between(&old, &sb, &BTreeSet::new()));
                (sb, s)
            }
        };
        #[cfg(test)]
        let sb = {
            let mut sb = sb;
            if self.broken == Some(Broken::VifPatchNoMcast)
                && let (Some((_, p)), Some(old)) = (&patched, &self.broken_mcgroups)
            {
                for dp in &p.dps {
                    let name = &topo.datapaths[*dp].name;
                    sb.mcgroups.retain(|(d, _), _| d != name);
                    for (k, v) in old.iter().filter(|((d, _), _)| d == name) {
                        sb.mcgroups.insert(k.clone(), v.clone());
                    }
                }
            }
            if self.broken == Some(Broken::VifPatchNoMcast) {
                self.broken_mcgroups = Some(sb.mcgroups.clone());
            }
            sb
        };
        // The topology's and tables' diagnostics: the last ones but the changed rows', when
        // patched.
        let global_diags: Vec<Diagnostic> = match &patched {
            Some((plan, _)) => std::mem::take(&mut self.topo_diags)
                .into_iter()
                .filter(|d| {
                    // Redone: the changed rows' diagnostics, and with the index those of
                    // the index's tables.
                    let redone = plan.rows.contains(&d.row)
                        || (plan.index && crate::vif_patch::INDEX_DIAG_TABLES.contains(&d.table));
                    // The health checks' plan is the last one (else the update is full):
                    // its diagnostics are added back whole.
                    !redone && !topo.svc.diags.contains(d)
                })
                .chain(diags.0)
                .chain(topo.svc.diags.iter().cloned())
                .collect(),
            None => diags.0,
        };
        let mut diagnostics = global_diags.clone();
        self.topo_diags = global_diags;
        let mut built = 0;
        for s in self.dps.values() {
            diagnostics.extend(s.diags.iter().cloned());
            built += s.built + s.sections.values().map(|(_, n)| n).sum::<usize>();
        }
        for st in self.idents.values() {
            diagnostics.extend(st.diags.iter().cloned());
        }
        diagnostics.extend(opts.extra_diagnostics.iter().cloned());
        diagnostics.sort();
        diagnostics.dedup();
        self.neighbours = new_links.neighbours;
        self.port_dp = new_links.port_dp;
        self.changed = if full { None } else { Some(changed) };
        self.non_flow = if full { None } else { non_flow };
        self.rebuilt = rebuilt;
        self.sections_rebuilt = sections_rebuilt;
        self.patched = patched.is_some();
        let acl_last_good = topo.ls.acl_good.clone();
        self.topo = Some(topo.into_parts());
        self.seen_keys = Some(opts.keys.without_ports());
        Compiled {
            sb,
            diagnostics,
            flows_built: built,
            acl_last_good,
        }
    }

    /// Replaces `old`, shapes of datapath `dp` (or of one of its sections), by the shapes
    /// of `flows`: only shapes gained or lost change the groups, and only their identities'
    /// rows can change (added to `touched`). Returns the new shapes, shared with the groups.
    fn swap_shapes(
        &mut self,
        dp: &Arc<str>,
        old: Vec<Arc<Shape>>,
        flows: &Flows,
        topo: &Topo<'_>,
        touched: &mut BTreeSet<Arc<IdentityKey>>,
    ) -> Vec<Arc<Shape>> {
        let new: Vec<Shape> = crate::render::shapes_all_features(flows, topo);
        let mut count: HashMap<Arc<Shape>, i64> = HashMap::with_capacity(new.len());
        for sh in old {
            *count.entry(sh).or_default() -= 1;
        }
        for sh in &new {
            match count.get_mut(sh) {
                Some(c) => *c += 1,
                None => {
                    // One allocation per identity: a shape of a known identity takes its.
                    let sh = match self.idents.get_key_value(&sh.ident) {
                        Some((k, _)) => sh.clone().with_ident(k.clone()),
                        None => sh.clone(),
                    };
                    count.insert(Arc::new(sh), 1);
                }
            }
        }
        for (sh, c) in &count {
            if *c != 0 {
                touched.insert(sh.ident.clone());
            }
            for _ in 0..(-*c).max(0) {
                self.ungroup(sh, dp);
            }
            for _ in 0..(*c).max(0) {
                self.regroup(sh.clone(), dp);
            }
        }
        new.iter()
            .filter_map(|sh| self.groups.get_key_value(sh).map(|(k, _)| k.clone()))
            .collect()
    }

    fn ungroup(&mut self, sh: &Arc<Shape>, dp: &str) {
        let Some(m) = self.groups.get_mut(sh) else {
            return;
        };
        if let Ok(i) = m.binary_search_by(|(n, _)| (**n).cmp(dp)) {
            m[i].1 -= 1;
            if m[i].1 == 0 {
                m.remove(i);
            }
        }
        if m.is_empty() {
            self.groups.remove(sh);
            // Its rows stay until the identity is re-derived (it is in `touched`).
            if let Some(st) = self.idents.get_mut(&sh.ident) {
                st.shapes.retain(|x| x != sh);
            }
        }
    }

    /// Adds `sh` of `dp` to the groups.
    fn regroup(&mut self, sh: Arc<Shape>, dp: &Arc<str>) {
        let shared = match self.groups.get_key_value(&sh) {
            Some((k, _)) => k.clone(),
            None => {
                let st = self.idents.entry(sh.ident.clone()).or_default();
                // Most identities have one shape (see `groups` above); later pushes grow
                // as usual (an identity may have a shape per datapath).
                if st.shapes.capacity() == 0 {
                    st.shapes.reserve_exact(1);
                }
                st.shapes.push(sh.clone());
                sh.clone()
            }
        };
        // Most shapes belong to one datapath: a list of one, not `Vec`'s first growth to
        // four (96 bytes a shape at 100k shapes).
        let m = self
            .groups
            .entry(shared)
            .or_insert_with(|| Vec::with_capacity(1));
        match m.binary_search_by(|(n, _)| (**n).cmp(&**dp)) {
            Ok(i) => m[i].1 += 1,
            Err(i) => m.insert(i, (dp.clone(), 1)),
        }
    }
}

/// `old` with `new`'s handshake columns (`nb_cfg`, `sb_cfg`, `hv_cfg` and their timestamps),
/// which northd and the CMS bump on every `--wait`: equal to `new` when nothing else changed.
pub(crate) fn with_handshake_of(
    old: &hf_model::nb::NbGlobal,
    new: &hf_model::nb::NbGlobal,
) -> hf_model::nb::NbGlobal {
    let mut a = old.clone();
    a.nb_cfg = new.nb_cfg;
    a.nb_cfg_timestamp = new.nb_cfg_timestamp;
    a.sb_cfg = new.sb_cfg;
    a.sb_cfg_timestamp = new.sb_cfg_timestamp;
    a.hv_cfg = new.hv_cfg;
    a.hv_cfg_timestamp = new.hv_cfg_timestamp;
    a
}
