//! The incremental compiler's fast path for plain VIF changes ([`crate::incremental`]): a
//! change set made only of `Logical_Switch_Port` rows that are plain VIFs before and after
//! (and the `Logical_Switch.ports` edits that add or remove them) patches the last compile's
//! [`Topo`] and non-flow tables in place, instead of [`Topo::build`] over all of NB and
//! [`crate::tables::build`] over every port.
//!
//! The same path takes `ACL`, `Port_Group`, `Address_Set`, `Load_Balancer` and
//! `Load_Balancer_Group` rows, and switch rows whose `acls`, `load_balancer` or
//! `load_balancer_group` changed (with VIFs in port groups allowed): none of those reaches
//! datapaths, ports or their keys, so the topology is kept and only its switch index
//! ([`crate::ls::index::LsIndex`]: ACLs, port group holders, load balancers, router
//! addresses) is built anew, with `Port_Group`, `Address_Set` and `Load_Balancer` derived
//! anew and compared by name, and their diagnostics redone ([`INDEX_DIAG_TABLES`]). Load
//! balancers a router uses (directly or through a group) are left to the full build: they
//! reach the router ports' `Port_Binding`s.
//!
//! What it patches, per changed port: its entry in the topology (parsed as
//! [`crate::topo::lsp_port`] parses it; deleted ports are swap-removed and the moved port's
//! index mended everywhere it is held), its datapath's port tunnel keys
//! ([`Topo::assign_port_keys`]), its `Port_Binding` row, its datapath's `Multicast_Group`s,
//! the diagnostics about its row, and `SB_Global.options`. It also re-keys the datapaths
//! whose ports' keys in SB (`Keys::ports`) changed since the last compile. It names every SB
//! identity it changed (a [`Scope`]), so the sync needs no comparison of whole tables.
//!
//! What it does not do: anything else. [`plan`] answers `None` (the caller builds the
//! topology and tables in full) unless every changed port is, in every version the change
//! set holds and in NB now, of type `""` with no `parent_name`, `tag`, `tag_request`,
//! `options:requested-tnl-key` or QoS options, named by no NAT, not bound
//! (`Keys::bound_chassis`), with a name no other port row has (or is derived, `cr-`), on a
//! switch no other datapath shares a name with, staying on its switch under its name (in a
//! port group, it has the index and group tables redone as above); and
//! unless the tunnel keys of datapaths, the NB rows SB names, tags, queues, bound chassis,
//! `SB_Global.options` and the last good ACL matches are what the last compile saw (or, for
//! the matches, what it gave back). Each of
//! those reaches rows beyond the port's own (tags and queues are allocated over all ports,
//! HA groups' `ref_chassis` follow bound ports, port groups make address sets and ACL
//! holders, names decide which duplicate wins). The oracle tests
//! (`tests/incremental.rs`, `daemon/tests/random_sync.rs`) compare every result with a full
//! compile.

use std::collections::{BTreeMap, BTreeSet};

use hf_model::nb::LogicalSwitchPort;
use hf_model::{NbDelta, NbSnapshot, RowDelta, RowRef};
use uuid::Uuid;

use crate::Options;
use crate::diag::Diags;
use crate::flow::DpIdx;
use crate::ls::index::LsIndex;
use crate::output::SbDesired;
use crate::sync::{Scope, changed_keys};
use crate::tables::{global, groups, lb, mcast, meter, port};
use crate::topo::{Keys, PortIdx, PortKind, Topo, TopoParts, lsp_port};

/// What one changed port does to the topology.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    /// The port named so leaves.
    Delete(String),
    /// The row `Uuid`, in the topology as before, on datapath `DpIdx`, is parsed anew.
    Update(Uuid, DpIdx),
    /// The row `Uuid` joins datapath `DpIdx`.
    Insert(Uuid, DpIdx),
}

/// The fast path's plan for one change set ([`plan`]).
#[derive(Debug, Default)]
pub(crate) struct Plan {
    ops: Vec<Op>,
    /// Every changed `Logical_Switch_Port` row (its diagnostics are redone).
    pub(crate) rows: BTreeSet<Uuid>,
    /// Datapaths whose port keys SB changed (re-keyed, their rows' keys patched).
    rekey: BTreeSet<DpIdx>,
    /// ACLs, port groups (or a changed port's membership), address sets or switch-only load
    /// balancers changed: the switch index ([`crate::ls::index::LsIndex`]) is built anew
    /// over the kept topology, and `Port_Group`, `Address_Set` and `Load_Balancer` are
    /// derived anew and compared by name.
    pub(crate) index: bool,
    /// Load balancers (or groups, or a switch's references to them) changed (the index is
    /// redone, `Load_Balancer` with it); none may be a router's.
    lbs: bool,
}

/// The NB tables whose diagnostics the switch index and the group and load balancer tables
/// make: all of them are redone when [`Plan::index`] is set.
pub(crate) const INDEX_DIAG_TABLES: [&str; 4] =
    ["ACL", "Load_Balancer", "Port_Group", "Address_Set"];

/// A plain VIF, as the fast path takes it (see the module doc).
fn plain(p: &LogicalSwitchPort) -> bool {
    p.type_.is_empty()
        && p.parent_name.as_deref().is_none_or(str::is_empty)
        && p.tag.is_none()
        && p.tag_request.is_none()
        && !p.options.contains_key("requested-tnl-key")
        && !port::has_qos_options(&p.options)
        && !p.name.is_empty()
        && !p.name.starts_with("cr-")
}

/// Whether the `Keys` parts other than port keys are what the last compile saw (`a` holds no
/// port keys: see [`Keys::without_ports`]).
fn same_keys(a: &Keys, b: &Keys) -> bool {
    a.datapaths == b.datapaths
        && a.nb_rows == b.nb_rows
        && a.sb_options == b.sb_options
        && a.tags == b.tags
        && a.bound_chassis == b.bound_chassis
        && a.queue_ids == b.queue_ids
}

/// The plan for `deltas` (applied in order to the NB the topology `t` was built from, giving
/// `nb`), or `None` when the fast path does not apply (see the module doc). `seen` are the
/// keys the last compile used but its port keys (the topology has those), `keys` this
/// compile's.
pub(crate) fn plan(
    nb: &NbSnapshot,
    deltas: &[NbDelta],
    t: &TopoParts,
    seen: &Keys,
    keys: &Keys,
) -> Option<Plan> {
    // The ACL index is kept: it reads the last good matches only for matches that do not
    // parse, and gives back what it used (`acl_good`), so the ones the last compile saw or
    // the ones it gave back make the same index.
    if !same_keys(seen, keys)
        || (keys.acl_last_good != seen.acl_last_good && keys.acl_last_good != t.ls.acl_good)
    {
        return None;
    }
    // Only ports, switches' port, ACL and load balancer lists, ACLs, port groups, address
    // sets and load balancers no router uses (NB_Global's handshake columns were checked by
    // the caller's seeds).
    let mut first: BTreeMap<Uuid, Option<&LogicalSwitchPort>> = BTreeMap::new();
    let mut plan = Plan::default();
    for d in deltas {
        let index_rows = d.acl.len() + d.port_group.len() + d.address_set.len();
        let lb_rows = d.load_balancer.len() + d.load_balancer_group.len();
        if d.len()
            != d.logical_switch.len()
                + d.logical_switch_port.len()
                + d.nb_global.len()
                + index_rows
                + lb_rows
        {
            return None;
        }
        plan.index |= index_rows + lb_rows > 0;
        plan.lbs |= lb_rows > 0;
        for r in &d.logical_switch_port {
            for row in [r.before(), r.after()].into_iter().flatten() {
                if !plain(row) {
                    return None;
                }
            }
            first.entry(r.uuid()).or_insert(r.before());
        }
    }
    for d in deltas {
        for r in &d.logical_switch {
            let RowDelta::Update { old, new } = r else {
                return None;
            };
            let mut a = old.clone();
            a.ports = new.ports.clone();
            a.acls = new.acls.clone();
            a.load_balancer = new.load_balancer.clone();
            a.load_balancer_group = new.load_balancer_group.clone();
            if a.acls != old.acls {
                plan.index = true;
            }
            if a.load_balancer != old.load_balancer
                || a.load_balancer_group != old.load_balancer_group
            {
                plan.index = true;
                plan.lbs = true;
            }
            if a != *new
                || old
                    .ports
                    .symmetric_difference(&new.ports)
                    .any(|p| !first.contains_key(&p.uuid()))
            {
                return None;
            }
        }
    }
    if plan.lbs && routers_use_lbs(nb, deltas) {
        return None;
    }
    let mut names: BTreeSet<&str> = BTreeSet::new();
    for (&u, before) in &first {
        // Where the topology has it: under its name before this change set.
        let old = match before {
            Some(b) => match t.port_by_name.get(&b.name) {
                Some(&i) if t.ports[i].nb == u => Some(i),
                Some(_) => return None,
                None => None,
            },
            None => None,
        };
        let now = nb.logical_switch_port().get(&u);
        let mut switches = nb.logical_switch_all_by_ports(RowRef::from(u));
        let ls = switches.next();
        if switches.next().is_some() {
            return None;
        }
        if let Some(row) = now {
            if !plain(row) {
                return None;
            }
            names.insert(&row.name);
        }
        if let Some(b) = before {
            names.insert(&b.name);
        }
        match (old, now.zip(ls)) {
            (Some(i), Some((row, ls))) => {
                let dp = *t.dp_by_nb.get(&ls.uuid)?;
                if row.name != t.ports[i].name || dp != t.ports[i].dp {
                    return None;
                }
                plan.ops.push(Op::Update(u, dp));
            }
            (Some(i), None) => plan.ops.push(Op::Delete(t.ports[i].name.clone())),
            (None, Some((row, ls))) => {
                let dp = *t.dp_by_nb.get(&ls.uuid)?;
                if t.port_by_name.contains_key(&row.name) {
                    return None;
                }
                plan.ops.push(Op::Insert(u, dp));
            }
            (None, None) => {}
        }
        plan.rows.insert(u);
        if let Some(ls) = ls
            && (nb.logical_switch_all_by_name(&ls.name).nth(1).is_some()
                || nb.logical_router_all_by_name(&ls.name).next().is_some())
        {
            return None;
        }
    }
    // Rows beyond the port's own: names shared, NAT, port groups, bound chassis.
    for n in &names {
        let others = nb
            .logical_switch_port_all_by_name(n)
            .filter(|r| !first.contains_key(&r.uuid))
            .count()
            + nb.logical_router_port_all_by_name(n).count();
        if others > 0 || keys.bound_chassis.contains_key(*n) {
            return None;
        }
    }
    if nb.nat().values().any(|n| {
        n.logical_port
            .as_deref()
            .is_some_and(|lp| names.contains(lp))
    }) {
        return None;
    }
    // A port in a port group makes its address sets and its switch an ACL holder: the
    // index and the group tables are derived anew. (One that left a group changed the
    // group's row, which set the flag above.)
    for u in &plan.rows {
        if nb
            .port_group_all_by_ports(RowRef::from(*u))
            .next()
            .is_some()
        {
            plan.index = true;
        }
    }
    // Datapaths with a port whose key in SB is not the one the topology has (SB changed it,
    // or has none for it): keyed anew. A datapath whose every port SB keys as the topology
    // does is keyed the same again ([`Topo::assign_port_keys`] reads only its ports' keys),
    // so no copy of the last compile's port keys is needed.
    // One pass over the topology's ports, one lookup each (a port whose name another port
    // of the topology shares is compared too: re-keying its datapath gives the same keys).
    for p in &t.ports {
        if keys.ports.get(&p.name) != Some(&p.tunnel_key) {
            plan.rekey.insert(p.dp);
        }
    }
    Some(plan)
}

/// Whether a router uses (directly or through a group, before or after `deltas`) a load
/// balancer or group the change set touches: router load balancers reach router ports'
/// `Port_Binding`s and the routers' neighbour addresses, which the fast path does not patch.
fn routers_use_lbs(nb: &NbSnapshot, deltas: &[NbDelta]) -> bool {
    let mut lbs: BTreeSet<Uuid> = BTreeSet::new();
    let mut groups: BTreeSet<Uuid> = BTreeSet::new();
    for d in deltas {
        lbs.extend(d.load_balancer.iter().map(|r| r.uuid()));
        for r in &d.load_balancer_group {
            groups.insert(r.uuid());
            for row in [r.before(), r.after()].into_iter().flatten() {
                lbs.extend(row.load_balancer.iter().map(|l| l.uuid()));
            }
        }
        for r in &d.logical_switch {
            for row in [r.before(), r.after()].into_iter().flatten() {
                lbs.extend(row.load_balancer.iter().map(|l| l.uuid()));
                groups.extend(row.load_balancer_group.iter().map(|g| g.uuid()));
            }
        }
    }
    for g in nb.load_balancer_group().values() {
        if g.load_balancer.iter().any(|l| lbs.contains(&l.uuid())) {
            groups.insert(g.uuid);
        }
    }
    nb.logical_router().values().any(|lr| {
        lr.load_balancer.iter().any(|l| lbs.contains(&l.uuid()))
            || lr
                .load_balancer_group
                .iter()
                .any(|g| groups.contains(&g.uuid()))
    })
}

/// What [`patch_topo`] changed.
#[derive(Debug, Default)]
pub(crate) struct Patched {
    /// Datapaths whose ports changed.
    pub(crate) dps: BTreeSet<DpIdx>,
    /// Names of the ports that left.
    pub(crate) removed: Vec<String>,
    /// Rows now in the topology: NB UUID → datapath.
    pub(crate) present: Vec<(Uuid, DpIdx)>,
}

/// Applies `plan` to `t` (the last compile's topology, now reading `t.nb`), with the
/// diagnostics of the changed rows into `diags`; keys datapaths anew from `keys`.
pub(crate) fn patch_topo(t: &mut Topo<'_>, plan: &Plan, keys: &Keys, diags: &mut Diags) -> Patched {
    let mut out = Patched::default();
    for op in &plan.ops {
        match op {
            Op::Delete(name) => {
                if let Some(i) = t.port_by_name.remove(name) {
                    out.dps.insert(t.ports[i].dp);
                    remove_port(t, i);
                    out.removed.push(name.clone());
                }
            }
            Op::Update(u, dp) => {
                let Some(row) = t.nb.logical_switch_port().get(u) else {
                    continue;
                };
                let Some(&i) = t.port_by_name.get(&row.name) else {
                    continue;
                };
                let ls = t.nb.logical_switch().get(&t.datapaths[*dp].nb);
                let mut p = lsp_port(row, *dp, ls, diags);
                p.tunnel_key = t.ports[i].tunnel_key;
                t.ports[i] = p;
                out.dps.insert(*dp);
                out.present.push((*u, *dp));
            }
            Op::Insert(u, dp) => {
                let Some(row) = t.nb.logical_switch_port().get(u) else {
                    continue;
                };
                let ls = t.nb.logical_switch().get(&t.datapaths[*dp].nb);
                let p = lsp_port(row, *dp, ls, diags);
                let i = t.ports.len();
                let at = t.datapaths[*dp]
                    .ports
                    .partition_point(|q| t.ports[*q].name < p.name);
                t.port_by_name.insert(p.name.clone(), i);
                t.ports.push(p);
                t.datapaths[*dp].ports.insert(at, i);
                out.dps.insert(*dp);
                out.present.push((*u, *dp));
            }
        }
    }
    for dp in out.dps.iter().chain(plan.rekey.iter()) {
        t.assign_port_keys(*dp, keys);
    }
    if plan.index {
        let ls = LsIndex::build(t, &keys.acl_last_good, diags);
        t.ls = ls;
    }
    out
}

/// Removes port `i` (already out of `port_by_name`): the last port takes its index, mended
/// wherever an index is held.
fn remove_port(t: &mut Topo<'_>, i: PortIdx) {
    let dp = t.ports[i].dp;
    t.datapaths[dp].ports.retain(|q| *q != i);
    let last = t.ports.len() - 1;
    t.ports.swap_remove(i);
    if i == last {
        return;
    }
    let moved = |q: &mut PortIdx| {
        if *q == last {
            *q = i;
        }
    };
    if let Some(q) = t.port_by_name.get_mut(&t.ports[i].name) {
        moved(q);
    }
    let mdp = t.ports[i].dp;
    t.datapaths[mdp].ports.iter_mut().for_each(moved);
    t.datapaths[mdp].dgps.iter_mut().for_each(moved);
    for p in &mut t.ports {
        match &mut p.kind {
            PortKind::SwitchRouter { lrp: Some(q) } | PortKind::ChassisRedirect { of: q } => {
                moved(q)
            }
            PortKind::RouterPort { peer, switch_peer } => {
                peer.iter_mut().for_each(moved);
                switch_peer.iter_mut().for_each(moved);
            }
            _ => {}
        }
    }
}

/// Patches `sb` (the last compile's non-flow tables) for the patched topology `t`: the
/// changed ports' rows, the tunnel keys of their datapaths' and the re-keyed datapaths'
/// rows, the changed datapaths' multicast groups, `SB_Global.options`. Returns the
/// identities changed.
pub(crate) fn patch_tables(
    t: &Topo<'_>,
    opts: &Options,
    plan: &Plan,
    patched: &Patched,
    sb: &mut SbDesired,
    diags: &mut Diags,
) -> Scope {
    let mut scope = Scope::default();
    for name in &patched.removed {
        if sb.ports.remove(name).is_some() {
            scope.ports.insert(name.clone());
        }
    }
    for dp in patched.dps.iter().chain(plan.rekey.iter()) {
        for &q in &t.datapaths[*dp].ports {
            let p = &t.ports[q];
            if plan.rows.contains(&p.nb) {
                let row = port::vif_row(t, q, diags);
                if sb.ports.get(&p.name) != row.as_ref() {
                    scope.ports.insert(p.name.clone());
                    match row {
                        Some(r) => sb.ports.insert(p.name.clone(), r),
                        None => sb.ports.remove(&p.name),
                    };
                }
            } else if let Some(r) = sb.ports.get_mut(&p.name)
                && r.tunnel_key != p.tunnel_key
            {
                r.tunnel_key = p.tunnel_key;
                scope.ports.insert(p.name.clone());
            }
        }
    }
    for dp in &patched.dps {
        let mut groups = mcast::build_dp(t, *dp);
        let name = &t.datapaths[*dp].name;
        for g in mcast::GROUPS {
            let k = (name.clone(), g.to_string());
            let new = groups.remove(&k);
            if sb.mcgroups.get(&k) != new.as_ref() {
                match new {
                    Some(r) => sb.mcgroups.insert(k.clone(), r),
                    None => sb.mcgroups.remove(&k),
                };
                scope.mcgroups.insert(k);
            }
        }
    }
    global::build(t, opts, sb);
    if plan.index {
        let old = std::mem::take(&mut sb.port_groups);
        groups::port_groups(t, &opts.render, sb, diags);
        changed_keys(&old, &sb.port_groups, &mut scope.port_groups);
        // After `global` (the `svc_monitor_mac` set holds the MAC chosen there).
        let old = std::mem::take(&mut sb.address_sets);
        groups::address_sets(t, sb, diags);
        changed_keys(&old, &sb.address_sets, &mut scope.address_sets);
        // Also when no load balancer changed: its diagnostics are redone with the others'.
        let old = std::mem::take(&mut sb.load_balancers);
        lb::build(t, &opts.render, sb, diags);
        changed_keys(&old, &sb.load_balancers, &mut scope.load_balancers);
        // An ACL's own copy of a `fair` meter comes and goes with the ACL (the meters'
        // diagnostics are about `Meter` rows, which take the full build).
        let old = std::mem::take(&mut sb.meters);
        meter::build(t, sb, &mut Diags::default());
        changed_keys(&old, &sb.meters, &mut scope.meters);
    }
    sb.frozen_datapaths = opts.frozen_datapaths.clone();
    scope
}
