//! Program deltas (protocol version 4): what changed between two [`ProgramMsg`]s, per
//! datapath and per part, so that a change as small as a port add travels as a few kilobytes
//! instead of the whole program. Re-exported by [`crate::proto`].
//!
//! # What it does
//!
//! - [`between`] (pure) builds a [`ProgramDelta`] from an old and a new program: datapaths
//!   removed, added (whole) and changed (their ports, multicast groups and flows as a
//!   [`ListDelta`]: items removed and changed **by identity** — a flow's [`FlowMsg::id`], a
//!   port's or group's name — and items added at their place), the map parts (zones, address
//!   sets, port groups) by key, and every other part (chassis table, neighbours, FDB, VIPs,
//!   SNAT zones, DNS, migrations) whole when it changed. The scalars (generation, chassis,
//!   `nb_cfg`, owner, feature level, the `no_last_good` hook) always travel.
//! - A [`DeltaHint`] narrows what [`between`] compares: only the datapaths it names and, with
//!   `rest`, the non-datapath parts. **The hint must be a superset** of what changed: a
//!   datapath it leaves out is taken as unchanged, so a changed one it omits is silently
//!   missing from the delta (the property test shows it). Datapath names are always compared
//!   (cheap), so a datapath added or removed is never missed.
//! - [`apply`] / [`apply_undoable`]: check the whole delta against the program first (its base
//!   generation, every name and identity it removes or changes exists, every added one does
//!   not, positions in range, no ambiguous identity), then change the program; an error
//!   changes nothing. [`Undo::revert`] puts the program back as it was (the datapath does when
//!   the applied program then fails to compile).
//! - Exactness: `apply(old, between(old, new, None))` yields `new` exactly, order of every
//!   list included. A list whose surviving items changed their relative order, or that has
//!   two items with one identity, travels whole ([`ListDelta::Whole`]).
//!
//! # What it does not do
//!
//! No I/O and no compilation (the datapath's [`crate::Datapath::install_delta`] does), no
//! compression of the text inside a flow, no check that the result is a good program (that is
//! the compiler's job, as for a whole program).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::proto::{
    ChassisMsg, DatapathMsg, DnsMsg, FdbMsg, FlowMsg, GroupMsg, LbVipMsg, MigrationMsg,
    NeighbourMsg, PortMsg, ProgramMsg,
};

/// What may differ between the two programs handed to [`between`]. Must be a superset of
/// what really differs (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct DeltaHint<'a> {
    /// The datapaths (names) whose content may differ; the others are not compared.
    pub datapaths: &'a BTreeSet<String>,
    /// Whether anything outside the datapaths (zones, sets, chassis table, neighbours, FDB,
    /// VIPs, SNAT zones, DNS, migrations) may differ; `false`: those are not compared.
    pub rest: bool,
}

/// The change of a program from generation [`ProgramDelta::base`] to
/// [`ProgramDelta::generation`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramDelta {
    /// The generation of the program this delta applies to.
    pub base: u64,
    /// [`ProgramMsg::generation`] of the result.
    pub generation: u64,
    /// [`ProgramMsg::chassis`].
    pub chassis: String,
    /// [`ProgramMsg::nb_cfg`].
    pub nb_cfg: i64,
    /// [`ProgramMsg::owner`].
    pub owner: u32,
    /// [`ProgramMsg::feature_level`].
    pub feature_level: Option<String>,
    /// [`ProgramMsg::no_last_good`].
    pub no_last_good: bool,
    /// The datapaths.
    pub datapaths: DatapathsDelta,
    /// [`ProgramMsg::zones`], by name.
    pub zones: MapDelta<u16>,
    /// [`ProgramMsg::chassis_table`], whole, when it changed.
    pub chassis_table: Option<Vec<ChassisMsg>>,
    /// [`ProgramMsg::neighbours`], whole, when it changed.
    pub neighbours: Option<Vec<NeighbourMsg>>,
    /// [`ProgramMsg::address_sets`], by name.
    pub address_sets: MapDelta<Vec<String>>,
    /// [`ProgramMsg::port_groups`], by name.
    pub port_groups: MapDelta<Vec<String>>,
    /// [`ProgramMsg::fdb`], whole, when it changed.
    pub fdb: Option<Vec<FdbMsg>>,
    /// [`ProgramMsg::lb_vips`], whole, when it changed.
    pub lb_vips: Option<Vec<LbVipMsg>>,
    /// [`ProgramMsg::switch_snat_zones`], whole, when it changed.
    pub switch_snat_zones: Option<Vec<(String, u16)>>,
    /// [`ProgramMsg::dns`], whole, when it changed.
    pub dns: Option<Vec<DnsMsg>>,
    /// [`ProgramMsg::migrations`], whole, when it changed.
    pub migrations: Option<Vec<MigrationMsg>>,
}

/// The change of [`ProgramMsg::datapaths`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatapathsDelta {
    /// Datapaths (names) gone.
    pub removed: Vec<String>,
    /// Datapaths whose content changed.
    pub changed: Vec<DatapathChange>,
    /// New datapaths, whole, appended after the surviving ones (unless `order` says otherwise).
    pub added: Vec<Arc<DatapathMsg>>,
    /// The names of the result in order, when that is not "the old order without the removed
    /// ones, then the added ones".
    pub order: Option<Vec<String>>,
}

/// One changed datapath.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DatapathChange {
    /// Its name.
    pub name: String,
    /// [`DatapathMsg::tunnel_key`] (always sent).
    pub tunnel_key: u32,
    /// [`DatapathMsg::router_zones`] (always sent).
    pub router_zones: Option<(u16, u16)>,
    /// Ports by name, when they changed.
    pub ports: Option<ListDelta<PortMsg>>,
    /// Multicast groups by name, when they changed.
    pub groups: Option<ListDelta<GroupMsg>>,
    /// Flows by identity, when they changed.
    pub flows: Option<ListDelta<Arc<FlowMsg>>>,
}

/// The change of a list whose items have an identity ([`Keyed`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ListDelta<T> {
    /// The new list, whole (its surviving items changed order, or an identity is not unique).
    Whole(Vec<T>),
    /// Items removed and changed by identity (changed ones keep their place), then items added
    /// at their index in the new list (ascending).
    Edit {
        /// Identities removed.
        removed: Vec<String>,
        /// Items replaced, by identity.
        changed: Vec<T>,
        /// New items and their index in the result.
        added: Vec<(u32, T)>,
    },
}

/// The change of a map by key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MapDelta<V> {
    /// Keys gone.
    pub removed: Vec<String>,
    /// Keys added or changed, with their new value.
    pub set: Vec<(String, V)>,
}

impl<V> Default for MapDelta<V> {
    fn default() -> Self {
        MapDelta {
            removed: Vec::new(),
            set: Vec::new(),
        }
    }
}

impl<V> MapDelta<V> {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.set.is_empty()
    }
}

/// An item with an identity within its list.
pub trait Keyed {
    /// Its identity.
    fn key(&self) -> &str;
}

impl Keyed for FlowMsg {
    fn key(&self) -> &str {
        &self.id
    }
}

impl Keyed for PortMsg {
    fn key(&self) -> &str {
        &self.name
    }
}

impl Keyed for GroupMsg {
    fn key(&self) -> &str {
        &self.name
    }
}

impl Keyed for DatapathMsg {
    fn key(&self) -> &str {
        &self.name
    }
}

impl<T: Keyed> Keyed for Arc<T> {
    fn key(&self) -> &str {
        (**self).key()
    }
}

/// Why a delta does not apply. The program is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The delta is against another program than the one it is applied to.
    #[error(
        "program delta to generation {generation} is against generation {base}, but generation {running} runs here; send the whole program"
    )]
    BaseMismatch {
        /// The delta's base.
        base: u64,
        /// The delta's result.
        generation: u64,
        /// What the program has.
        running: u64,
    },
    /// The delta does not fit the program (a name or identity it removes or changes is
    /// missing, one it adds exists, ...): it was built against another content.
    #[error(
        "program delta to generation {generation} does not fit the running program: {what}; send the whole program"
    )]
    Inconsistent {
        /// The delta's result.
        generation: u64,
        /// What did not fit, naming the datapath and item.
        what: String,
    },
}

// ----- building -----

/// The delta from `old` to `new` (see the module docs; `hint` must be a superset of what
/// differs, `None` compares everything). Datapath names must be unique in both programs (as
/// a translation makes them; [`apply`] refuses a change by name in a program where they are
/// not, and [`unique_datapaths`] tells).
pub fn between(old: &ProgramMsg, new: &ProgramMsg, hint: Option<DeltaHint<'_>>) -> ProgramDelta {
    let rest = hint.is_none_or(|h| h.rest);
    ProgramDelta {
        base: old.generation,
        generation: new.generation,
        chassis: new.chassis.clone(),
        nb_cfg: new.nb_cfg,
        owner: new.owner,
        feature_level: new.feature_level.clone(),
        no_last_good: new.no_last_good,
        datapaths: datapaths_delta(&old.datapaths, &new.datapaths, hint.map(|h| h.datapaths)),
        zones: if rest {
            map_delta(&old.zones, &new.zones)
        } else {
            MapDelta::default()
        },
        chassis_table: whole_if(rest, &old.chassis_table, &new.chassis_table),
        neighbours: whole_if(rest, &old.neighbours, &new.neighbours),
        address_sets: if rest {
            map_delta(&old.address_sets, &new.address_sets)
        } else {
            MapDelta::default()
        },
        port_groups: if rest {
            map_delta(&old.port_groups, &new.port_groups)
        } else {
            MapDelta::default()
        },
        fdb: whole_if(rest, &old.fdb, &new.fdb),
        lb_vips: whole_if(rest, &old.lb_vips, &new.lb_vips),
        switch_snat_zones: whole_if(rest, &old.switch_snat_zones, &new.switch_snat_zones),
        dns: whole_if(rest, &old.dns, &new.dns),
        migrations: whole_if(rest, &old.migrations, &new.migrations),
    }
}

fn whole_if<T: Clone + PartialEq>(compare: bool, old: &T, new: &T) -> Option<T> {
    (compare && old != new).then(|| new.clone())
}

/// The keys `new` lacks and the entries it sets anew: one ordered walk of both maps (the
/// zones are thousands of names; a lookup per key compared each a dozen times).
fn map_delta<V: Clone + PartialEq>(
    old: &BTreeMap<String, V>,
    new: &BTreeMap<String, V>,
) -> MapDelta<V> {
    let mut out = MapDelta::default();
    let (mut a, mut b) = (old.iter().peekable(), new.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((k, _)), None) => {
                out.removed.push((*k).clone());
                a.next();
            }
            (None, Some((k, v))) => {
                out.set.push(((*k).clone(), (*v).clone()));
                b.next();
            }
            (Some((ka, va)), Some((kb, vb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    out.removed.push((*ka).clone());
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    out.set.push(((*kb).clone(), (*vb).clone()));
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if va != vb {
                        out.set.push(((*kb).clone(), (*vb).clone()));
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    out
}

fn datapaths_delta(
    old: &[Arc<DatapathMsg>],
    new: &[Arc<DatapathMsg>],
    hint: Option<&BTreeSet<String>>,
) -> DatapathsDelta {
    let old_ix: HashMap<&str, usize> = old
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), i))
        .collect();
    let new_names: HashSet<&str> = new.iter().map(|d| d.name.as_str()).collect();
    let mut out = DatapathsDelta {
        removed: old
            .iter()
            .filter(|d| !new_names.contains(d.name.as_str()))
            .map(|d| d.name.clone())
            .collect(),
        ..DatapathsDelta::default()
    };
    for d in new {
        match old_ix.get(d.name.as_str()) {
            None => out.added.push(d.clone()),
            Some(&i) => {
                if hint.is_some_and(|h| !h.contains(&d.name)) {
                    continue;
                }
                let o = &old[i];
                // One shared datapath (the controller's reused messages) is equal as it is.
                if !Arc::ptr_eq(o, d) && o != d {
                    out.changed.push(DatapathChange {
                        name: d.name.clone(),
                        tunnel_key: d.tunnel_key,
                        router_zones: d.router_zones,
                        ports: if ignore_ports() {
                            None
                        } else {
                            list_delta(&o.ports, &d.ports)
                        },
                        groups: list_delta(&o.groups, &d.groups),
                        flows: list_delta(&o.flows, &d.flows),
                    });
                }
            }
        }
    }
    // The default order: the survivors in their old order, then the added ones.
    let removed: HashSet<&str> = out.removed.iter().map(String::as_str).collect();
    let default_order = old
        .iter()
        .map(|d| d.name.as_str())
        .filter(|n| !removed.contains(n))
        .chain(out.added.iter().map(|d| d.name.as_str()));
    if !default_order.eq(new.iter().map(|d| d.name.as_str())) || new_names.len() != new.len() {
        out.order = Some(new.iter().map(|d| d.name.clone()).collect());
    }
    out
}

/// A test-only broken rule (port changes left out), to show the property test catches it.
#[cfg(test)]
fn ignore_ports() -> bool {
    tests::IGNORE_PORTS.with(|c| c.get())
}

#[cfg(not(test))]
fn ignore_ports() -> bool {
    false
}

/// Whether every datapath of `p` has a name of its own (what a delta needs, see [`between`]).
pub fn unique_datapaths(p: &ProgramMsg) -> bool {
    unique_keys(&p.datapaths)
}

/// Whether every item of `items` has an identity of its own.
fn unique_keys<T: Keyed>(items: &[T]) -> bool {
    let mut seen = HashSet::with_capacity(items.len());
    items.iter().all(|i| seen.insert(i.key()))
}

/// The change from `old` to `new`, `None` when they are equal.
///
/// A set of texts that many candidates are tested against, each probe without hashing the
/// candidate or reading more of it than its length and last 8 bytes unless those match one
/// of the texts (flow identities share long prefixes, SB UUIDs share their length): a probe
/// is a binary search over (length, tail) words, then a compare of the few equal ones.
#[derive(Debug, Default)]
pub struct FewTexts<'a> {
    /// (length, last ≤ 8 bytes as a word, the text), sorted.
    texts: Vec<(usize, u64, &'a str)>,
}

impl<'a> FewTexts<'a> {
    /// The set of `texts`.
    pub fn new(texts: impl IntoIterator<Item = &'a str>) -> FewTexts<'a> {
        let mut texts: Vec<_> = texts.into_iter().map(|t| (t.len(), tail(t), t)).collect();
        texts.sort_unstable();
        texts.dedup();
        FewTexts { texts }
    }

    /// No text.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// Whether `t` is one of the texts.
    pub fn contains(&self, t: &str) -> bool {
        if self.texts.is_empty() {
            return false;
        }
        let k = (t.len(), tail(t));
        let from = self.texts.partition_point(|(l, w, _)| (*l, *w) < k);
        self.texts[from..]
            .iter()
            .take_while(|(l, w, _)| (*l, *w) == k)
            .any(|(_, _, x)| *x == t)
    }
}

/// The last (up to) 8 bytes of `t` as one word.
fn tail(t: &str) -> u64 {
    let b = t.as_bytes();
    // One unaligned load for the usual text (a variable-length copy is a call to `memcpy`).
    if let Some(last) = b.last_chunk::<8>() {
        return u64::from_le_bytes(*last);
    }
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

/// The items both lists begin and end with (equal, in place) are neither removed, changed nor
/// added, so the edit is computed over the rest alone: a flow added to a router's 31k flows
/// hashes the few in between, not every identity twice. Applying an edit finds each identity
/// it names in the whole list, so every such identity must be nowhere in the common parts
/// (else the list travels whole).
fn list_delta<T: Keyed + Clone + PartialEq>(old: &[T], new: &[T]) -> Option<ListDelta<T>> {
    let head = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    if head == old.len() && head == new.len() {
        return None;
    }
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let whole = || Some(ListDelta::Whole(new.to_vec()));
    let (mid_old, mid_new) = (&old[head..old.len() - tail], &new[head..new.len() - tail]);
    let Some((removed, changed, added)) = edit_between(mid_old, mid_new, head) else {
        return whole();
    };
    // The identities the edit names, looked for in the common parts (compared by length
    // first: a handful of names against the common items, no hashing).
    let named: Vec<&str> = removed
        .iter()
        .map(String::as_str)
        .chain(changed.iter().map(Keyed::key))
        .chain(added.iter().map(|(_, x)| x.key()))
        .collect();
    let common = old[..head].iter().chain(&old[old.len() - tail..]);
    let named = FewTexts::new(named);
    let clash = common.into_iter().any(|x| named.contains(x.key()));
    if clash {
        return whole();
    }
    Some(ListDelta::Edit {
        removed,
        changed,
        added,
    })
}

/// An edit's parts (removed keys, changed items, items added at their index in the whole list,
/// `offset` items before `new`'s first) turning `old` into `new`; `None` when it cannot be
/// made by identity (a key twice in either list, survivors out of their relative order).
#[allow(clippy::type_complexity)]
fn edit_between<T: Keyed + Clone + PartialEq>(
    old: &[T],
    new: &[T],
    offset: usize,
) -> Option<(Vec<String>, Vec<T>, Vec<(u32, T)>)> {
    // One pass over each list (a touched datapath's flows are thousands).
    let mut old_ix: HashMap<&str, usize> = HashMap::with_capacity(old.len());
    for (i, x) in old.iter().enumerate() {
        if old_ix.insert(x.key(), i).is_some() {
            return None;
        }
    }
    let mut hit = vec![false; old.len()];
    let mut added_keys: HashSet<&str> = HashSet::new();
    let mut changed = Vec::new();
    let mut added = Vec::new();
    // The survivors must keep their relative order.
    let mut last = None;
    for (j, x) in new.iter().enumerate() {
        match old_ix.get(x.key()) {
            None => {
                if !added_keys.insert(x.key()) {
                    return None;
                }
                added.push(((offset + j) as u32, x.clone()));
            }
            Some(&i) => {
                if hit[i] || last.is_some_and(|l| i < l) {
                    return None;
                }
                hit[i] = true;
                last = Some(i);
                if &old[i] != x {
                    changed.push(x.clone());
                }
            }
        }
    }
    let removed = old
        .iter()
        .zip(&hit)
        .filter(|(_, h)| !**h)
        .map(|(x, _)| x.key().to_string())
        .collect();
    Some((removed, changed, added))
}

// ----- applying -----

/// What [`apply_undoable`] did: the datapaths to compile again, and how to go back.
#[derive(Debug)]
pub struct Applied {
    /// Datapaths (names) changed or added (removed ones are gone).
    pub changed: Vec<String>,
    /// How to put the program back.
    pub undo: Undo,
}

/// The parts of a program a delta replaced (see [`Undo::revert`]).
#[derive(Debug, Default)]
pub struct Undo {
    scalars: Scalars,
    /// The old order of datapath names, when the datapaths changed.
    old_order: Option<Vec<String>>,
    /// The old versions of removed datapaths.
    saved: HashMap<String, Arc<DatapathMsg>>,
    /// What changed in the changed datapaths (edited in place).
    edited: HashMap<String, DpUndo>,
    /// Names of datapaths the delta added.
    added: Vec<String>,
    zones: Vec<(String, Option<u16>)>,
    address_sets: Vec<(String, Option<Vec<String>>)>,
    port_groups: Vec<(String, Option<Vec<String>>)>,
    chassis_table: Option<Vec<ChassisMsg>>,
    neighbours: Option<Vec<NeighbourMsg>>,
    fdb: Option<Vec<FdbMsg>>,
    lb_vips: Option<Vec<LbVipMsg>>,
    switch_snat_zones: Option<Vec<(String, u16)>>,
    dns: Option<Vec<DnsMsg>>,
    migrations: Option<Vec<MigrationMsg>>,
}

#[derive(Debug, Default)]
struct Scalars {
    generation: u64,
    chassis: String,
    nb_cfg: i64,
    owner: u32,
    feature_level: Option<String>,
    no_last_good: bool,
}

/// What the flows of datapath `name` were before the delta, when they may differ from now.
#[derive(Debug, PartialEq)]
pub enum PrevFlows<'a> {
    /// The datapath is not one the delta changed: its flows are what the program has.
    Same,
    /// The delta added it: it had none.
    Absent,
    /// The delta changed it: these were its flows (rebuilt from the program's and what the
    /// delta replaced: the delta edits in place, keeping no copy of the list).
    Were(std::borrow::Cow<'a, [Arc<FlowMsg>]>),
}

impl Undo {
    /// The flows datapath `name` had before the delta; `now` is the program the delta was
    /// applied to (as it left it).
    pub fn prev_flows<'a>(&'a self, name: &str, now: &'a ProgramMsg) -> PrevFlows<'a> {
        if let Some(d) = self.saved.get(name) {
            PrevFlows::Were(std::borrow::Cow::Borrowed(&d.flows))
        } else if let Some(u) = self.edited.get(name) {
            let cur = now.datapaths.iter().find(|d| d.name == name);
            match (&u.flows, cur) {
                (None, Some(d)) => PrevFlows::Were(std::borrow::Cow::Borrowed(&d.flows)),
                (Some(f), Some(d)) => PrevFlows::Were(std::borrow::Cow::Owned(f.old(&d.flows))),
                (_, None) => PrevFlows::Absent,
            }
        } else if self.added.iter().any(|a| a == name) {
            PrevFlows::Absent
        } else {
            PrevFlows::Same
        }
    }

    /// The program's feature level before the delta.
    pub fn prev_feature_level(&self) -> Option<&str> {
        self.scalars.feature_level.as_deref()
    }

    /// The address sets the delta added, changed or removed (names).
    pub fn touched_address_sets(&self) -> impl Iterator<Item = &str> + '_ {
        self.address_sets.iter().map(|(n, _)| n.as_str())
    }

    /// The port groups the delta added, changed or removed (names).
    pub fn touched_port_groups(&self) -> impl Iterator<Item = &str> + '_ {
        self.port_groups.iter().map(|(n, _)| n.as_str())
    }

    /// Puts `prog` (the program the delta was applied to) back as it was.
    pub fn revert(self, prog: &mut ProgramMsg) {
        let s = self.scalars;
        prog.generation = s.generation;
        prog.chassis = s.chassis;
        prog.nb_cfg = s.nb_cfg;
        prog.owner = s.owner;
        prog.feature_level = s.feature_level;
        prog.no_last_good = s.no_last_good;
        // The changed datapaths first, in place (the order below moves them by name).
        let mut edited = self.edited;
        for d in &mut prog.datapaths {
            if let Some(u) = edited.remove(&d.name) {
                let d = Arc::make_mut(d);
                d.tunnel_key = u.tunnel_key;
                d.router_zones = u.router_zones;
                if let Some(p) = u.ports {
                    p.revert(Arc::make_mut(&mut d.ports));
                }
                if let Some(g) = u.groups {
                    g.revert(Arc::make_mut(&mut d.groups));
                }
                if let Some(f) = u.flows {
                    f.revert(&mut d.flows);
                }
            }
        }
        if let Some(order) = self.old_order {
            let mut by_name: HashMap<String, Arc<DatapathMsg>> =
                std::mem::take(&mut prog.datapaths)
                    .into_iter()
                    .map(|d| (d.name.clone(), d))
                    .collect();
            for a in &self.added {
                by_name.remove(a);
            }
            by_name.extend(self.saved);
            prog.datapaths = order.iter().filter_map(|n| by_name.remove(n)).collect();
        }
        undo_map(&mut prog.zones, self.zones);
        undo_map(&mut prog.address_sets, self.address_sets);
        undo_map(&mut prog.port_groups, self.port_groups);
        put_back(&mut prog.chassis_table, self.chassis_table);
        put_back(&mut prog.neighbours, self.neighbours);
        put_back(&mut prog.fdb, self.fdb);
        put_back(&mut prog.lb_vips, self.lb_vips);
        put_back(&mut prog.switch_snat_zones, self.switch_snat_zones);
        put_back(&mut prog.dns, self.dns);
        put_back(&mut prog.migrations, self.migrations);
    }
}

fn undo_map<V>(map: &mut BTreeMap<String, V>, saved: Vec<(String, Option<V>)>) {
    // Saved in the order applied: undone backwards.
    for (k, v) in saved.into_iter().rev() {
        match v {
            Some(v) => {
                map.insert(k, v);
            }
            None => {
                map.remove(&k);
            }
        }
    }
}

fn put_back<T>(slot: &mut T, saved: Option<T>) {
    if let Some(v) = saved {
        *slot = v;
    }
}

/// Applies `delta` to `prog`: the datapaths changed or added, or an error with `prog`
/// unchanged.
pub fn apply(prog: &mut ProgramMsg, delta: &ProgramDelta) -> Result<Vec<String>, DeltaError> {
    apply_undoable(prog, delta).map(|a| a.changed)
}

/// [`apply`], keeping what it replaced so that [`Undo::revert`] can put it back.
pub fn apply_undoable(prog: &mut ProgramMsg, delta: &ProgramDelta) -> Result<Applied, DeltaError> {
    if delta.base != prog.generation {
        return Err(DeltaError::BaseMismatch {
            base: delta.base,
            generation: delta.generation,
            running: prog.generation,
        });
    }
    let bad = |what: String| DeltaError::Inconsistent {
        generation: delta.generation,
        what,
    };
    // ---- check and prepare (nothing changes) ----
    let dd = &delta.datapaths;
    let ix: HashMap<&str, usize> = prog
        .datapaths
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), i))
        .collect();
    let touches_dps = !(dd.removed.is_empty() && dd.added.is_empty() && dd.changed.is_empty())
        || dd.order.is_some();
    if ix.len() != prog.datapaths.len() && touches_dps {
        return Err(bad(
            "the program has two datapaths with one name, so a change by name is ambiguous".into(),
        ));
    }
    let mut touched: HashSet<&str> = HashSet::new();
    for n in &dd.removed {
        if !ix.contains_key(n.as_str()) {
            return Err(bad(format!("datapath {n} to remove is not in the program")));
        }
        if !touched.insert(n) {
            return Err(bad(format!("datapath {n} named twice")));
        }
    }
    type Plans<'d> = (
        ListPlan<'d, PortMsg>,
        ListPlan<'d, GroupMsg>,
        ListPlan<'d, Arc<FlowMsg>>,
    );
    let mut prepared: Vec<(usize, &DatapathChange, Plans<'_>)> =
        Vec::with_capacity(dd.changed.len());
    for c in &dd.changed {
        let Some(&i) = ix.get(c.name.as_str()) else {
            return Err(bad(format!(
                "datapath {} to change is not in the program",
                c.name
            )));
        };
        if !touched.insert(&c.name) {
            return Err(bad(format!("datapath {} named twice", c.name)));
        }
        let o = &prog.datapaths[i];
        let at = |what: &str, e: String| bad(format!("datapath {}: {what}: {e}", c.name));
        prepared.push((
            i,
            c,
            (
                plan_list(&o.ports, c.ports.as_ref()).map_err(|e| at("ports", e))?,
                plan_list(&o.groups, c.groups.as_ref()).map_err(|e| at("groups", e))?,
                plan_list(&o.flows, c.flows.as_ref()).map_err(|e| at("flows", e))?,
            ),
        ));
    }
    for a in &dd.added {
        if ix.contains_key(a.name.as_str()) {
            return Err(bad(format!("datapath {} to add is in the program", a.name)));
        }
        if !touched.insert(&a.name) {
            return Err(bad(format!("datapath {} named twice", a.name)));
        }
    }
    let removed: HashSet<&str> = dd.removed.iter().map(String::as_str).collect();
    let result_names: Vec<&str> = match &dd.order {
        Some(order) => {
            let mut expect: Vec<&str> = prog
                .datapaths
                .iter()
                .map(|d| d.name.as_str())
                .filter(|n| !removed.contains(n))
                .chain(dd.added.iter().map(|d| d.name.as_str()))
                .collect();
            let mut got: Vec<&str> = order.iter().map(String::as_str).collect();
            expect.sort_unstable();
            got.sort_unstable();
            if expect != got {
                return Err(bad(
                    "its datapath order does not name exactly the datapaths of the result".into(),
                ));
            }
            order.iter().map(String::as_str).collect()
        }
        None => Vec::new(),
    };
    check_map_removals(&prog.zones, &delta.zones, "zone").map_err(&bad)?;
    check_map_removals(&prog.address_sets, &delta.address_sets, "address set").map_err(&bad)?;
    check_map_removals(&prog.port_groups, &delta.port_groups, "port group").map_err(&bad)?;

    // ---- change (cannot fail) ----
    let mut undo = Undo {
        scalars: Scalars {
            generation: std::mem::replace(&mut prog.generation, delta.generation),
            chassis: std::mem::replace(&mut prog.chassis, delta.chassis.clone()),
            nb_cfg: std::mem::replace(&mut prog.nb_cfg, delta.nb_cfg),
            owner: std::mem::replace(&mut prog.owner, delta.owner),
            feature_level: std::mem::replace(&mut prog.feature_level, delta.feature_level.clone()),
            no_last_good: std::mem::replace(&mut prog.no_last_good, delta.no_last_good),
        },
        ..Undo::default()
    };
    let mut changed: Vec<String> = Vec::new();
    let structural = !dd.removed.is_empty() || !dd.added.is_empty() || dd.order.is_some();
    if structural || !dd.changed.is_empty() {
        undo.old_order = Some(prog.datapaths.iter().map(|d| d.name.clone()).collect());
    }
    for (i, c, (ports, groups, flows)) in prepared {
        changed.push(c.name.clone());
        // In place: a datapath the program alone holds is not copied (one another holder
        // shares is, once, by `make_mut`).
        let d = Arc::make_mut(&mut prog.datapaths[i]);
        let du = DpUndo {
            tunnel_key: std::mem::replace(&mut d.tunnel_key, c.tunnel_key),
            router_zones: std::mem::replace(&mut d.router_zones, c.router_zones),
            ports: ports.make_shared(&mut d.ports),
            groups: groups.make_shared(&mut d.groups),
            flows: flows.make(&mut d.flows),
        };
        undo.edited.insert(c.name.clone(), du);
    }
    if structural {
        let old = std::mem::take(&mut prog.datapaths);
        let mut kept = Vec::with_capacity(old.len() + dd.added.len());
        for d in old {
            if removed.contains(d.name.as_str()) {
                undo.saved.insert(d.name.clone(), d);
            } else {
                kept.push(d);
            }
        }
        for a in &dd.added {
            changed.push(a.name.clone());
            undo.added.push(a.name.clone());
            kept.push(a.clone());
        }
        if dd.order.is_some() {
            let mut by_name: HashMap<String, Arc<DatapathMsg>> =
                kept.into_iter().map(|d| (d.name.clone(), d)).collect();
            kept = result_names
                .iter()
                .filter_map(|n| by_name.remove(*n))
                .collect();
        }
        prog.datapaths = kept;
    }
    undo.zones = apply_map(&mut prog.zones, &delta.zones);
    undo.address_sets = apply_map(&mut prog.address_sets, &delta.address_sets);
    undo.port_groups = apply_map(&mut prog.port_groups, &delta.port_groups);
    undo.chassis_table = replace_part(&mut prog.chassis_table, &delta.chassis_table);
    undo.neighbours = replace_part(&mut prog.neighbours, &delta.neighbours);
    undo.fdb = replace_part(&mut prog.fdb, &delta.fdb);
    undo.lb_vips = replace_part(&mut prog.lb_vips, &delta.lb_vips);
    undo.switch_snat_zones = replace_part(&mut prog.switch_snat_zones, &delta.switch_snat_zones);
    undo.dns = replace_part(&mut prog.dns, &delta.dns);
    undo.migrations = replace_part(&mut prog.migrations, &delta.migrations);
    Ok(Applied { changed, undo })
}

fn replace_part<T: Clone>(slot: &mut T, new: &Option<T>) -> Option<T> {
    new.as_ref().map(|v| std::mem::replace(slot, v.clone()))
}

fn check_map_removals<V>(
    map: &BTreeMap<String, V>,
    d: &MapDelta<V>,
    what: &str,
) -> Result<(), String> {
    match d.removed.iter().find(|k| !map.contains_key(*k)) {
        Some(k) => Err(format!("{what} {k} to remove is not in the program")),
        None => Ok(()),
    }
}

fn apply_map<V: Clone>(map: &mut BTreeMap<String, V>, d: &MapDelta<V>) -> Vec<(String, Option<V>)> {
    let mut saved = Vec::with_capacity(d.removed.len() + d.set.len());
    for k in &d.removed {
        let old = map.remove(k);
        saved.push((k.clone(), old));
    }
    for (k, v) in &d.set {
        let old = map.insert(k.clone(), v.clone());
        saved.push((k.clone(), old));
    }
    saved
}

/// A list edit checked against its list, waiting to be made in place ([`ListPlan::make`]).
enum ListPlan<'d, T> {
    /// The list stays.
    Keep,
    /// The list is replaced whole.
    Whole(&'d [T]),
    /// Old indexes removed (ascending), old indexes replaced, items inserted at their index
    /// in the result (ascending).
    Edit {
        removed: Vec<usize>,
        changed: Vec<(usize, &'d T)>,
        added: &'d [(u32, T)],
    },
}

/// What a list edit replaced, to put the list back ([`ListUndo::revert`]) or to see it as it
/// was ([`ListUndo::old`]) without having copied the list.
#[derive(Debug)]
enum ListUndo<T> {
    /// The list was replaced whole: the old one.
    Whole(Vec<T>),
    /// Edited in place.
    Edit {
        /// Removed items at their old index (ascending).
        removed: Vec<(usize, T)>,
        /// Replaced items at their old index.
        changed: Vec<(usize, T)>,
        /// Indexes of the inserted items in the result (ascending).
        added: Vec<usize>,
    },
}

/// Where the items an edit names are in `old`: a linear search for a few names (a change
/// of one flow must not hash a datapath's thousands of identities), an index otherwise.
struct Finder<'o, T> {
    old: &'o [T],
    index: Option<HashMap<&'o str, Vec<usize>>>,
}

impl<'o, T: Keyed> Finder<'o, T> {
    fn new(old: &'o [T], names: usize) -> Finder<'o, T> {
        let index = (names > 16).then(|| {
            let mut m: HashMap<&str, Vec<usize>> = HashMap::with_capacity(old.len());
            for (i, x) in old.iter().enumerate() {
                m.entry(x.key()).or_default().push(i);
            }
            m
        });
        Finder { old, index }
    }

    /// The index of `key`: `Ok(None)` when absent, `Err` when two items have it.
    fn find(&self, key: &str) -> Result<Option<usize>, String> {
        let ambiguous = || {
            Err(format!(
                "two items have identity {key}, so an edit by identity is ambiguous"
            ))
        };
        match &self.index {
            Some(m) => match m.get(key).map(Vec::as_slice) {
                None | Some([]) => Ok(None),
                Some([i]) => Ok(Some(*i)),
                Some(_) => ambiguous(),
            },
            None => {
                let mut hits = self
                    .old
                    .iter()
                    .enumerate()
                    .filter(|(_, x)| x.key() == key)
                    .map(|(i, _)| i);
                match (hits.next(), hits.next()) {
                    (None, _) => Ok(None),
                    (Some(i), None) => Ok(Some(i)),
                    _ => ambiguous(),
                }
            }
        }
    }
}

/// Checks `d` against `old` (nothing changes), or says what did not fit. Costs what the edit
/// names, not the list's length, for a small edit (see [`Finder`]).
fn plan_list<'d, T: Keyed>(
    old: &[T],
    d: Option<&'d ListDelta<T>>,
) -> Result<ListPlan<'d, T>, String> {
    let (removed, changed, added) = match d {
        None => return Ok(ListPlan::Keep),
        Some(ListDelta::Whole(v)) => return Ok(ListPlan::Whole(v)),
        Some(ListDelta::Edit {
            removed,
            changed,
            added,
        }) => (removed, changed, added),
    };
    let find = Finder::new(old, removed.len() + changed.len() + added.len());
    let mut gone: Vec<usize> = Vec::with_capacity(removed.len());
    let mut gone_set: HashSet<usize> = HashSet::with_capacity(removed.len());
    for k in removed {
        let Some(i) = find.find(k)? else {
            return Err(format!("{k} to remove is not there"));
        };
        if !gone_set.insert(i) {
            return Err(format!("{k} removed twice"));
        }
        gone.push(i);
    }
    let mut repl: Vec<(usize, &T)> = Vec::with_capacity(changed.len());
    let mut repl_set: HashSet<usize> = HashSet::with_capacity(changed.len());
    for c in changed {
        let Some(i) = find.find(c.key())? else {
            return Err(format!("{} to change is not there", c.key()));
        };
        if gone_set.contains(&i) || !repl_set.insert(i) {
            return Err(format!("{} changed twice or removed", c.key()));
        }
        repl.push((i, c));
    }
    // Keys added so far (an added key must be neither a kept old one nor added twice).
    let mut new_keys: HashSet<&str> = HashSet::with_capacity(added.len());
    let kept_len = old.len() - gone.len();
    let mut next = 0usize;
    for (inserted, (at, x)) in added.iter().enumerate() {
        let at = *at as usize;
        // The list's length when this item goes in.
        let len = kept_len + inserted;
        if at < next || at > len {
            return Err(format!(
                "{} to add at {at}: out of order or beyond the list's {len} items",
                x.key()
            ));
        }
        let kept = match find.find(x.key()) {
            Ok(Some(i)) => !gone_set.contains(&i),
            Ok(None) => false,
            // Two old items with that identity: at most one is removed.
            Err(_) => true,
        };
        if kept || !new_keys.insert(x.key()) {
            return Err(format!("{} to add is there already", x.key()));
        }
        next = at + 1;
    }
    gone.sort_unstable();
    Ok(ListPlan::Edit {
        removed: gone,
        changed: repl,
        added,
    })
}

impl<T: Clone> ListPlan<'_, T> {
    /// [`ListPlan::make`] on a shared list: copied first only when it changes and is shared.
    fn make_shared(self, list: &mut Arc<Vec<T>>) -> Option<ListUndo<T>> {
        match self {
            ListPlan::Keep => None,
            plan => plan.make(Arc::make_mut(list)),
        }
    }

    /// Makes the edit on `list` (the list it was planned against), in place: the items it
    /// keeps are neither copied nor moved but for the shift of an insert or removal.
    fn make(self, list: &mut Vec<T>) -> Option<ListUndo<T>> {
        match self {
            ListPlan::Keep => None,
            ListPlan::Whole(v) => Some(ListUndo::Whole(std::mem::replace(list, v.to_vec()))),
            ListPlan::Edit {
                removed,
                changed,
                added,
            } => {
                let changed = changed
                    .into_iter()
                    .map(|(i, c)| (i, std::mem::replace(&mut list[i], c.clone())))
                    .collect();
                let mut out = Vec::with_capacity(removed.len());
                if !removed.is_empty() {
                    // One pass: the removed items move out, the rest close up.
                    let mut gone = removed.iter().copied().peekable();
                    let old = std::mem::take(list);
                    list.reserve(old.len() - removed.len() + added.len());
                    for (i, x) in old.into_iter().enumerate() {
                        if gone.peek() == Some(&i) {
                            gone.next();
                            out.push((i, x));
                        } else {
                            list.push(x);
                        }
                    }
                }
                list.reserve(added.len());
                let mut at_list = Vec::with_capacity(added.len());
                for (at, x) in added {
                    list.insert(*at as usize, x.clone());
                    at_list.push(*at as usize);
                }
                Some(ListUndo::Edit {
                    removed: out,
                    changed,
                    added: at_list,
                })
            }
        }
    }
}

impl<T: Clone> ListUndo<T> {
    /// Puts `list` (as the edit left it) back as it was.
    fn revert(self, list: &mut Vec<T>) {
        match self {
            ListUndo::Whole(v) => *list = v,
            ListUndo::Edit {
                removed,
                changed,
                added,
            } => {
                for at in added.into_iter().rev() {
                    list.remove(at);
                }
                for (i, x) in removed {
                    list.insert(i, x);
                }
                for (i, x) in changed {
                    list[i] = x;
                }
            }
        }
    }

    /// The list as it was, from `now` (the list as the edit left it); a copy.
    fn old(&self, now: &[T]) -> Vec<T> {
        match self {
            ListUndo::Whole(old) => old.clone(),
            ListUndo::Edit {
                removed,
                changed,
                added,
            } => {
                let mut v = now.to_vec();
                for at in added.iter().rev() {
                    v.remove(*at);
                }
                for (i, x) in removed {
                    v.insert(*i, x.clone());
                }
                for (i, x) in changed {
                    v[*i] = x.clone();
                }
                v
            }
        }
    }
}

/// What a delta changed in one datapath's lists (the datapath changed in place).
#[derive(Debug)]
struct DpUndo {
    tunnel_key: u32,
    router_zones: Option<(u16, u16)>,
    ports: Option<ListUndo<PortMsg>>,
    groups: Option<ListUndo<GroupMsg>>,
    flows: Option<ListUndo<Arc<FlowMsg>>>,
}

#[cfg(test)]
#[path = "delta_tests.rs"]
pub(crate) mod tests;
