//! [`SbDesired`] → OVSDB operations: the transaction that fills an SB holding none of
//! northd's rows ([`insert_ops`]), and the incremental sync ([`diff_ops`]): what SB (as the
//! daemon's lean [`SbView`] shows it) lacks, has too much of, or has differently, as the
//! minimal operations. Rows are matched by identity (datapath and port names, flow ids,
//! group and DHCP option names), never by UUID; only changed columns of changed rows are written; rows
//! northd no longer wants are deleted (flows without `hf-flow-id` too, e.g. written by a real
//! ovn-northd); `Logical_DP_Group` rows are reused by datapath set; controller-owned
//! `Port_Binding` columns (`chassis`, `up`, `encap`, `additional_chassis`,
//! `virtual_parent`, ...) are never written; flows of `SbDesired.frozen_datapaths` are left
//! exactly as they are.
//!
//! What it does not do: write `MAC_Binding` (it only deletes those of deleted datapaths) or
//! garbage-collect `Logical_DP_Group`/`HA_Chassis` rows (OVSDB does: they are not root).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The diff's maps over every SB row of a table (20k port bindings at 500x40): foldhash, not
/// SipHash, whose per-key cost showed in every port add's profile.
type FastMap<K, V> = hashbrown::HashMap<K, V>;

use serde_json::{Value, json};
use uuid::Uuid;

use hf_ovsdb_net::client::OpsText;
use serde_json::Map;

mod bfd;
mod ip_mcast;
mod text;

use crate::daemon::sbview::{LeanFlow, SbView, text_hash};
use crate::flow::FlowId;
use crate::output::{FlowDps, SbDesired};

/// `Port_Binding.options` key the claiming controllers write when a port is activated on an
/// additional chassis (ovn-controller 22.09+); northd keeps it while the port has additional
/// chassis.
pub const ACTIVATED: &str = "additional-chassis-activated";

/// `["map", [[k, v], ...]]`.
pub fn map(m: &BTreeMap<String, String>) -> Value {
    json!([
        "map",
        m.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

/// `["set", [...]]` of strings.
pub fn str_set(s: &BTreeSet<String>) -> Value {
    json!(["set", s.iter().collect::<Vec<_>>()])
}

/// `["set", [refs]]`.
pub fn ref_set(refs: Vec<Value>) -> Value {
    json!(["set", refs])
}

/// An optional value: the value, or the empty set.
pub fn opt(v: Option<Value>) -> Value {
    v.unwrap_or_else(|| json!(["set", []]))
}

/// `["named-uuid", name]`.
pub fn named(n: &str) -> Value {
    json!(["named-uuid", n])
}

/// `["uuid", "..."]`.
pub fn uuid_ref(u: &Uuid) -> Value {
    json!(["uuid", u.to_string()])
}

/// Named-uuid labels must be identifiers: `[A-Za-z_][A-Za-z0-9_]*`.
fn label(prefix: &str, i: usize) -> String {
    format!("{prefix}{i}")
}

/// Operations that insert every row of `d` into an SB holding none of northd's rows.
/// `chassis` maps chassis names to their SB UUIDs (for `requested_chassis` and HA groups);
/// a name it lacks is left out of the row.
pub fn insert_ops(d: &SbDesired, chassis: &HashMap<String, Uuid>) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut dp_label = HashMap::new();
    for (i, (name, row)) in d.datapaths.iter().enumerate() {
        let l = label("dp", i);
        ops.push(
            json!({"op": "insert", "table": "Datapath_Binding", "uuid-name": l,
            "row": {"tunnel_key": row.tunnel_key, "external_ids": map(&row.external_ids)}}),
        );
        dp_label.insert(name.as_str(), l);
    }
    let dp_ref = |n: &str| dp_label.get(n).map(|l| named(l));
    let mut mirror_label: HashMap<&str, String> = HashMap::new();
    for (i, (name, m)) in d.mirrors.iter().enumerate() {
        let l = label("mirror", i);
        ops.push(json!({"op": "insert", "table": "Mirror", "uuid-name": l,
            "row": {"name": name, "filter": m.filter, "index": m.index, "sink": m.sink,
                "type": m.type_}}));
        mirror_label.insert(name.as_str(), l);
    }
    let mut port_label = HashMap::new();
    for (i, (name, row)) in d.ports.iter().enumerate() {
        let Some(dp) = dp_ref(&row.datapath) else {
            continue;
        };
        let l = label("pb", i);
        let mut r = json!({
            "logical_port": name,
            "datapath": dp,
            "tunnel_key": row.tunnel_key,
            "type": row.type_,
            "options": map(&row.options),
            "mac": str_set(&row.mac),
            "nat_addresses": str_set(&row.nat_addresses),
            "external_ids": map(&row.external_ids),
            "port_security": str_set(&row.port_security),
            "mirror_rules": ref_set(row.mirror_rules.iter()
                .filter_map(|m| mirror_label.get(m.as_str())).map(|l| named(l)).collect()),
            "parent_port": opt(row.parent_port.as_ref().map(|p| json!(p))),
            "tag": opt(row.tag.map(|t| json!(t))),
            // ovn-controller sets `up` only where northd wrote it as false.
            "up": false,
            "requested_chassis": opt(row.requested_chassis.as_ref().and_then(|c| chassis.get(c)).map(uuid_ref)),
            "requested_additional_chassis": ref_set(row.requested_additional_chassis.iter()
                .filter_map(|c| chassis.get(c)).map(uuid_ref).collect()),
        });
        if let Some((gname, members)) = &row.ha_chassis_group {
            let mut refs = Vec::new();
            for (j, (c, prio)) in members.iter().enumerate() {
                let hl = format!("{l}_hac{j}");
                let ids: BTreeMap<String, String> =
                    [("chassis-name".to_string(), c.clone())].into();
                ops.push(
                    json!({"op": "insert", "table": "HA_Chassis", "uuid-name": hl,
                    "row": {"chassis": opt(chassis.get(c).map(uuid_ref)), "priority": prio,
                            "external_ids": map(&ids)}}),
                );
                refs.push(named(&hl));
            }
            let gl = format!("{l}_hag");
            let refc = row
                .ha_ref_chassis
                .iter()
                .filter_map(|c| chassis.get(c))
                .map(uuid_ref)
                .collect();
            ops.push(
                json!({"op": "insert", "table": "HA_Chassis_Group", "uuid-name": gl,
                "row": {"name": gname, "ha_chassis": ref_set(refs), "ref_chassis": ref_set(refc)}}),
            );
            r["ha_chassis_group"] = named(&gl);
        }
        ops.push(json!({"op": "insert", "table": "Port_Binding", "uuid-name": l, "row": r}));
        port_label.insert(name.as_str(), l);
    }
    let mut group_label: HashMap<&[String], String> = HashMap::new();
    for (i, g) in d.dp_groups().into_iter().enumerate() {
        let l = label("dpg", i);
        let refs = g.iter().filter_map(|n| dp_ref(n)).collect();
        ops.push(
            json!({"op": "insert", "table": "Logical_DP_Group", "uuid-name": l,
            "row": {"datapaths": ref_set(refs)}}),
        );
        group_label.insert(g, l);
    }
    for f in d.flows.values() {
        let mut r = json!({
            "pipeline": f.pipeline,
            "table_id": f.table_id,
            "priority": f.priority,
            "match": &*f.match_,
            "actions": &*f.actions,
            "external_ids": map(&f.external_ids.to_map()),
            "controller_meter": opt(f.controller_meter.as_ref().map(|m| json!(m))),
        });
        match &f.dps {
            FlowDps::One(n) => match dp_ref(n) {
                Some(d) => r["logical_datapath"] = d,
                None => continue,
            },
            FlowDps::Group(g) => match group_label.get(g.as_slice()) {
                Some(l) => r["logical_dp_group"] = named(l),
                None => continue,
            },
        }
        ops.push(json!({"op": "insert", "table": "Logical_Flow", "row": r}));
    }
    for ((dp, name), row) in &d.mcgroups {
        let Some(dpr) = dp_ref(dp) else { continue };
        let ports = row
            .ports
            .iter()
            .filter_map(|p| port_label.get(p.as_str()).map(|l| named(l)))
            .collect();
        ops.push(json!({"op": "insert", "table": "Multicast_Group",
            "row": {"datapath": dpr, "name": name, "tunnel_key": row.tunnel_key, "ports": ref_set(ports)}}));
    }
    for (name, ports) in &d.port_groups {
        ops.push(json!({"op": "insert", "table": "Port_Group",
            "row": {"name": name, "ports": str_set(ports)}}));
    }
    for row in d.dns.values() {
        let dps: Vec<Value> = row.datapaths.iter().filter_map(|n| dp_ref(n)).collect();
        if dps.is_empty() {
            continue;
        }
        ops.push(json!({"op": "insert", "table": "DNS", "row": {
            "records": map(&row.records), "datapaths": ref_set(dps),
            "external_ids": map(&row.external_ids)}}));
    }
    for (i, (name, m)) in d.meters.iter().enumerate() {
        let mut bands = Vec::new();
        for (j, (action, rate, burst)) in m.bands.iter().enumerate() {
            let l = format!("mb{i}_{j}");
            ops.push(
                json!({"op": "insert", "table": "Meter_Band", "uuid-name": l,
                "row": {"action": action, "rate": rate, "burst_size": burst}}),
            );
            bands.push(named(&l));
        }
        ops.push(json!({"op": "insert", "table": "Meter",
            "row": {"name": name, "unit": m.unit, "bands": ref_set(bands)}}));
    }
    ip_mcast::insert_ops(d, &dp_ref, &mut ops);
    bfd::insert_ops(d, &mut ops);
    for (chassis, vars) in &d.template_vars {
        ops.push(json!({"op": "insert", "table": "Chassis_Template_Var",
            "row": {"chassis": chassis, "variables": map(vars)}}));
    }
    for (name, addrs) in &d.address_sets {
        ops.push(json!({"op": "insert", "table": "Address_Set",
            "row": {"name": name, "addresses": str_set(addrs)}}));
    }
    for (i, (name, lb)) in d.load_balancers.iter().enumerate() {
        let dps: Vec<Value> = lb.datapaths.iter().filter_map(|n| dp_ref(n)).collect();
        let mut r = json!({
            "name": name, "vips": map(&lb.vips), "options": map(&lb.options),
            "external_ids": map(&lb.external_ids),
            "protocol": opt(lb.protocol.as_ref().map(|p| json!(p)))});
        if lb.dp_group {
            let names: Vec<String> = lb.datapaths.iter().cloned().collect();
            let l = match group_label.get(names.as_slice()) {
                Some(l) => l.clone(),
                None => {
                    let l = label("lbdpg", i);
                    ops.push(json!({"op": "insert", "table": "Logical_DP_Group",
                        "uuid-name": l, "row": {"datapaths": ref_set(dps)}}));
                    l
                }
            };
            r["datapath_group"] = named(&l);
        } else {
            r["datapaths"] = ref_set(dps);
        }
        ops.push(json!({"op": "insert", "table": "Load_Balancer", "row": r}));
    }
    for (table, rows) in [
        ("DHCP_Options", &d.dhcp_options),
        ("DHCPv6_Options", &d.dhcpv6_options),
    ] {
        for (name, r) in rows {
            ops.push(json!({"op": "insert", "table": table,
                "row": {"name": name, "code": r.code, "type": r.type_}}));
        }
    }
    for (k, m) in &d.service_monitors {
        ops.push(json!({"op": "insert", "table": "Service_Monitor", "row": {
            "ip": k.ip, "port": k.port, "logical_port": k.logical_port,
            "protocol": k.protocol, "options": map(&m.options), "src_mac": m.src_mac,
            "src_ip": m.src_ip}}));
    }
    if !d.sb_options.is_empty() {
        ops.push(json!({"op": "update", "table": "SB_Global", "where": [],
            "row": {"options": map(&d.sb_options)}}));
    }
    ops
}

/// The sync's inputs besides SB: the desired state, the `SB_Global.nb_cfg` to write with the
/// flows, and the scope of the diff.
#[derive(Debug)]
pub struct SyncInput<'a> {
    /// What SB should hold.
    pub desired: &'a SbDesired,
    /// `NB_Global.nb_cfg` of the NB the desired state was compiled from.
    pub nb_cfg: i64,
    /// `None`: a full diff (every row of every table northd owns, duplicates and foreign
    /// flows included). `Some`: only the identities in the scope are compared (see
    /// [`Scope`]); rows outside it are assumed to be as the last sync left them.
    pub scope: Option<&'a Scope>,
}

/// The SB identities a diff compares, when it is not a full one: the rows an NB change may
/// have changed, by the identities [`SbDesired`] keys them with. `SB_Global` (one row) is
/// always compared.
///
/// A scoped diff equals the full one when SB outside the scope is as northd last wrote it; a
/// write by another SB client breaks that, which is why the daemon does a full diff after any
/// SB change that is not its own echo, on `inc-engine/recompute`, and periodically.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// `Logical_Flow` identities.
    pub flows: HashSet<FlowId>,
    /// `Datapath_Binding` by datapath name.
    pub datapaths: BTreeSet<String>,
    /// `Port_Binding` by logical port (`HA_Chassis_Group`s are compared on every diff).
    pub ports: BTreeSet<String>,
    /// `Multicast_Group` by (datapath name, group name).
    pub mcgroups: BTreeSet<(String, String)>,
    /// `Port_Group` by name.
    pub port_groups: BTreeSet<String>,
    /// `Address_Set` by name.
    pub address_sets: BTreeSet<String>,
    /// `Load_Balancer` by name.
    pub load_balancers: BTreeSet<String>,
    /// `DNS` by `dns_id`.
    pub dns: BTreeSet<String>,
    /// `Meter` by name.
    pub meters: BTreeSet<String>,
    /// `Chassis_Template_Var` by chassis.
    pub template_vars: BTreeSet<String>,
    /// `Mirror` by name.
    pub mirrors: BTreeSet<String>,
    /// `IP_Multicast` by switch.
    pub ip_multicast: BTreeSet<String>,
    /// `BFD` by (logical port, dst IP).
    pub bfd: BTreeSet<(String, String)>,
    /// `DHCP_Options` and `DHCPv6_Options` (fixed tables: compared as a whole).
    pub dhcp: bool,
}

/// The keys of `a` and `b` whose values differ (present in one only, or unequal).
pub(crate) fn changed_keys<K: Ord + Clone, V: PartialEq>(
    a: &BTreeMap<K, V>,
    b: &BTreeMap<K, V>,
    out: &mut BTreeSet<K>,
) {
    for (k, v) in a {
        if b.get(k) != Some(v) {
            out.insert(k.clone());
        }
    }
    for k in b.keys() {
        if !a.contains_key(k) {
            out.insert(k.clone());
        }
    }
}

impl Scope {
    /// The scope that takes SB from `old` (what the last sync wrote) to `new`: the non-flow
    /// rows that differ between the two, plus `flows`, the flow identities the compile
    /// changed. (The non-flow tables are compared in memory; flows are not: the incremental
    /// compiler names them.)
    pub fn between(old: &SbDesired, new: &SbDesired, flows: &BTreeSet<FlowId>) -> Scope {
        let mut s = Scope {
            flows: flows.iter().copied().collect(),
            ..Default::default()
        };
        changed_keys(&old.datapaths, &new.datapaths, &mut s.datapaths);
        changed_keys(&old.ports, &new.ports, &mut s.ports);
        changed_keys(&old.mcgroups, &new.mcgroups, &mut s.mcgroups);
        changed_keys(&old.port_groups, &new.port_groups, &mut s.port_groups);
        changed_keys(&old.address_sets, &new.address_sets, &mut s.address_sets);
        changed_keys(
            &old.load_balancers,
            &new.load_balancers,
            &mut s.load_balancers,
        );
        changed_keys(&old.dns, &new.dns, &mut s.dns);
        changed_keys(&old.meters, &new.meters, &mut s.meters);
        changed_keys(&old.template_vars, &new.template_vars, &mut s.template_vars);
        changed_keys(&old.mirrors, &new.mirrors, &mut s.mirrors);
        changed_keys(&old.ip_multicast, &new.ip_multicast, &mut s.ip_multicast);
        changed_keys(&old.bfd, &new.bfd, &mut s.bfd);
        s.dhcp = old.dhcp_options != new.dhcp_options || old.dhcpv6_options != new.dhcpv6_options;
        s
    }

    /// Adds `other`'s identities.
    pub fn merge(&mut self, other: Scope) {
        self.flows.extend(other.flows);
        self.datapaths.extend(other.datapaths);
        self.ports.extend(other.ports);
        self.mcgroups.extend(other.mcgroups);
        self.port_groups.extend(other.port_groups);
        self.address_sets.extend(other.address_sets);
        self.load_balancers.extend(other.load_balancers);
        self.dns.extend(other.dns);
        self.meters.extend(other.meters);
        self.template_vars.extend(other.template_vars);
        self.mirrors.extend(other.mirrors);
        self.ip_multicast.extend(other.ip_multicast);
        self.bfd.extend(other.bfd);
        self.dhcp |= other.dhcp;
    }

    /// How many identities it names.
    pub fn len(&self) -> usize {
        self.flows.len()
            + self.datapaths.len()
            + self.ports.len()
            + self.mcgroups.len()
            + self.port_groups.len()
            + self.address_sets.len()
            + self.load_balancers.len()
            + self.dns.len()
            + self.meters.len()
            + self.template_vars.len()
            + self.mirrors.len()
            + self.ip_multicast.len()
            + self.bfd.len()
            + usize::from(self.dhcp)
    }

    /// Whether it names nothing (only `SB_Global` is compared).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Counts of a diff, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Rows inserted.
    pub inserted: usize,
    /// Rows updated.
    pub updated: usize,
    /// Rows deleted.
    pub deleted: usize,
    /// Flows left alone because their datapath is frozen.
    pub frozen: usize,
    /// Whether the diff was a full one (every row) rather than scoped.
    pub full: bool,
}

impl SyncStats {
    /// Whether the diff writes nothing.
    pub fn is_empty(&self) -> bool {
        self.inserted + self.updated + self.deleted == 0
    }
}

/// Where a diff's operations go: JSON trees (the reference form, [`diff_ops`]) or JSON text
/// written straight from the rows ([`diff_ops_text`], what the daemon sends).
enum Sink {
    Values(Vec<Value>),
    Text(OpsText),
}

struct Ops<'a> {
    sink: Sink,
    /// The row each operation writes (northd recognises its own echo by them).
    rows: Vec<Uuid>,
    stats: SyncStats,
    fresh: &'a mut dyn FnMut() -> Uuid,
}

impl Ops<'_> {
    /// An operation built as a tree (the few that are not a whole typed row's).
    fn push_value(&mut self, op: Value, row: Uuid) {
        match &mut self.sink {
            Sink::Values(v) => v.push(op),
            Sink::Text(t) => t.push_value(&op),
        }
        self.rows.push(row);
    }

    fn put<T: hf_model::Table>(&mut self, new: &T, old: Option<&T>) {
        match old {
            Some(o) => {
                let written = match &mut self.sink {
                    Sink::Values(v) => new.update_op(o).map(|op| v.push(op)).is_some(),
                    Sink::Text(t) => text::update(t, new, o),
                };
                if written {
                    self.rows.push(new.uuid());
                    self.stats.updated += 1;
                }
            }
            None => {
                match &mut self.sink {
                    Sink::Values(v) => v.push(new.insert_op()),
                    Sink::Text(t) => t.push_with(|out| text::insert(out, new)),
                }
                self.rows.push(new.uuid());
                self.stats.inserted += 1;
            }
        }
    }

    fn delete<T: hf_model::Table>(&mut self, row: &T) {
        self.delete_uuid(T::NAME, row.uuid());
    }

    fn delete_uuid(&mut self, table: &str, u: Uuid) {
        match &mut self.sink {
            Sink::Values(v) => v.push(json!({"op": "delete", "table": table,
                "where": [["_uuid", "==", ["uuid", u.to_string()]]]})),
            Sink::Text(t) => t.push_with(|out| text::delete(out, table, u)),
        }
        self.rows.push(u);
        self.stats.deleted += 1;
    }

    fn fresh(&mut self) -> Uuid {
        (self.fresh)()
    }
}

/// Groups rows by a key; the first row (by UUID) of each key is the one kept, the others are
/// returned as duplicates.
fn by_key<'a, R, K: std::hash::Hash + Eq>(
    rows: impl Iterator<Item = &'a R>,
    key: impl Fn(&'a R) -> Option<K>,
) -> (FastMap<K, &'a R>, Vec<&'a R>) {
    let mut m = FastMap::with_capacity(rows.size_hint().0);
    let mut dups = Vec::new();
    for r in rows {
        match key(r) {
            Some(k) => match m.entry(k) {
                hashbrown::hash_map::Entry::Occupied(_) => dups.push(r),
                hashbrown::hash_map::Entry::Vacant(e) => {
                    e.insert(r);
                }
            },
            None => dups.push(r),
        }
    }
    (m, dups)
}

/// The entries of `m` a diff visits: all of them (full), or those the scope names.
fn visit<'a, K: Ord, V>(
    m: &'a BTreeMap<K, V>,
    scope: Option<&'a BTreeSet<K>>,
) -> Box<dyn Iterator<Item = (&'a K, &'a V)> + 'a> {
    match scope {
        None => Box::new(m.iter()),
        Some(s) => Box::new(s.iter().filter_map(move |k| m.get_key_value(k))),
    }
}

/// The SB rows a diff deletes because `desired` no longer has their key: all such rows
/// (full), or those of the scope's keys.
fn gone<'a, K, Q, V, R>(
    old: &'a FastMap<&'a Q, &'a R>,
    desired: &'a BTreeMap<K, V>,
    scope: Option<&'a BTreeSet<K>>,
) -> Vec<&'a R>
where
    K: Ord + std::borrow::Borrow<Q>,
    Q: Ord + std::hash::Hash + Eq + ?Sized,
{
    match scope {
        None => {
            let mut v: Vec<(&Q, &R)> = old
                .iter()
                .filter(|(k, _)| !desired.contains_key(**k))
                .map(|(k, r)| (*k, *r))
                .collect();
            v.sort_by(|a, b| a.0.cmp(b.0));
            v.into_iter().map(|(_, r)| r).collect()
        }
        Some(s) => s
            .iter()
            .filter(|k| !desired.contains_key::<K>(k))
            .filter_map(|k| {
                let q: &Q = k.borrow();
                old.get(q).copied()
            })
            .collect(),
    }
}

/// The operations that turn `sb` into `input.desired` (see the module doc), and their counts.
/// `fresh` gives the UUIDs of inserted rows. With a scope (and no frozen datapaths: those
/// need every flow looked at) only the scope's identities are compared.
///
/// The operations as JSON trees: the reference form of [`diff_ops_text`], which the daemon
/// sends (tests compare the two).
pub fn diff_ops(
    input: &SyncInput<'_>,
    sb: &SbView,
    fresh: &mut dyn FnMut() -> Uuid,
) -> (Vec<Value>, SyncStats) {
    let (ops, stats) = diff(input, sb, fresh, Sink::Values(Vec::new()));
    match ops.sink {
        Sink::Values(v) => (v, stats),
        // `diff` keeps the sink it was given.
        Sink::Text(_) => (Vec::new(), stats),
    }
}

/// What [`diff_ops_text`] writes: the operations as JSON text, and the row each writes.
#[derive(Debug, Default)]
pub struct TextOps {
    /// The operations.
    pub ops: OpsText,
    /// The UUID of the row each operation inserts, updates or deletes.
    pub rows: Vec<Uuid>,
}

/// [`diff_ops`] written as JSON text straight from the rows (no `Value` tree: a cold SB is
/// 100k operations, ~30 MB of text and several times that as trees), with the row each
/// operation writes.
pub fn diff_ops_text(
    input: &SyncInput<'_>,
    sb: &SbView,
    fresh: &mut dyn FnMut() -> Uuid,
) -> (TextOps, SyncStats) {
    let (o, stats) = diff(input, sb, fresh, Sink::Text(OpsText::new()));
    let ops = match o.sink {
        Sink::Text(t) => t,
        // `diff` keeps the sink it was given.
        Sink::Values(_) => OpsText::new(),
    };
    (TextOps { ops, rows: o.rows }, stats)
}

struct Written {
    sink: Sink,
    rows: Vec<Uuid>,
}

fn diff(
    input: &SyncInput<'_>,
    sb: &SbView,
    fresh: &mut dyn FnMut() -> Uuid,
    sink: Sink,
) -> (Written, SyncStats) {
    use hf_model::sb as s;
    let d = input.desired;
    // A view built by hand (tests) has no flow index: only a full diff can read it.
    let scope = input
        .scope
        .filter(|_| d.frozen_datapaths.is_empty() && sb.flow_index_complete());
    let mut o = Ops {
        sink,
        rows: Vec::new(),
        stats: SyncStats {
            full: scope.is_none(),
            ..Default::default()
        },
        fresh,
    };
    let chassis: HashMap<&str, Uuid> = sb
        .chassis
        .values()
        .map(|c| (c.name.as_str(), c.uuid))
        .collect();
    // `requested-chassis` names a chassis by name or, failing that, by hostname (23.03).
    let mut by_name_or_host: HashMap<&str, Uuid> = sb
        .chassis
        .values()
        .filter(|c| !c.hostname.is_empty())
        .map(|c| (c.hostname.as_str(), c.uuid))
        .collect();
    by_name_or_host.extend(chassis.iter().map(|(n, u)| (*n, *u)));

    // SB_Global: nb_cfg and the options northd owns (other keys are left alone).
    let old_g = sb.global();
    let mut g = old_g.cloned().unwrap_or_else(|| s::SbGlobal {
        uuid: o.fresh(),
        ..Default::default()
    });
    g.nb_cfg = input.nb_cfg;
    for (k, v) in &d.sb_options {
        g.options.insert(k.clone(), v.clone());
    }
    for k in crate::tables::global::REMOVABLE {
        if !d.sb_options.contains_key(*k) {
            g.options.remove(*k);
        }
    }
    o.put(&g, old_g);

    // Datapath_Binding by external_ids:name.
    let (old_dps, dup_dps) = by_key(sb.datapath_binding.values(), |r| {
        r.external_ids.get("name").map(String::as_str)
    });
    let lb_by_name: HashMap<&str, Uuid> = sb
        .load_balancer
        .values()
        .map(|l| (l.name.as_str(), l.uuid))
        .collect();
    let mut dp_uuid: HashMap<&str, Uuid> = HashMap::new();
    if let Some(sc) = scope {
        // Datapaths outside the scope keep their rows.
        for name in d.datapaths.keys() {
            if !sc.datapaths.contains(name)
                && let Some(r) = old_dps.get(name.as_str())
            {
                dp_uuid.insert(name.as_str(), r.uuid);
            }
        }
    }
    for (name, row) in visit(&d.datapaths, scope.map(|s| &s.datapaths)) {
        let old = old_dps.get(name.as_str()).copied();
        let new = s::DatapathBinding {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            external_ids: row.external_ids.clone().into(),
            load_balancers: row
                .load_balancers
                .iter()
                .filter_map(|l| lb_by_name.get(l.as_str()).copied())
                .collect(),
            tunnel_key: i64::from(row.tunnel_key),
        };
        dp_uuid.insert(name.as_str(), new.uuid);
        o.put(&new, old);
    }
    let mut dead_dps: BTreeSet<Uuid> = BTreeSet::new();
    if scope.is_none() {
        dead_dps.extend(dup_dps.iter().map(|r| r.uuid));
    }
    for r in gone(&old_dps, &d.datapaths, scope.map(|s| &s.datapaths)) {
        dead_dps.insert(r.uuid);
    }
    for u in &dead_dps {
        if let Some(r) = sb.datapath_binding.get(u) {
            o.delete(r);
        }
    }
    // What refers to a deleted datapath goes with it.
    if !dead_dps.is_empty() {
        for (m, mb) in &sb.mac_binding {
            if dead_dps.contains(&mb.datapath) {
                o.delete_uuid("MAC_Binding", *m);
            }
        }
        for (m, dp) in &sb.static_mac_binding {
            if dead_dps.contains(dp) {
                o.delete_uuid("Static_MAC_Binding", *m);
            }
        }
    }

    // Port_Binding by logical_port (read here: the HA groups a scoped diff visits are those
    // of the ports it visits).
    let (old_pbs, dup_pbs) = by_key(sb.port_binding.values(), |r| Some(r.logical_port.as_str()));

    // HA_Chassis_Group by name (rows of groups no port uses any more are deleted).
    let (old_hag, dup_hag) = by_key(sb.ha_chassis_group.values(), |r| Some(r.name.as_str()));
    // Every diff, scoped or not, compares every group: `ref_chassis` follows where SB shows
    // ports bound (controllers' claims, which trigger no compile), and there are few groups.
    let hag_scope: Option<BTreeSet<&str>> = None;
    let mut hag_uuid: HashMap<String, Uuid> = HashMap::new();
    let mut bound_by_dp: FastMap<Uuid, BTreeSet<Uuid>> = FastMap::new();
    if hag_scope.as_ref().is_none_or(|h| !h.is_empty()) {
        for p in sb.port_binding.values() {
            if let Some(c) = p.chassis {
                bound_by_dp
                    .entry(p.datapath.uuid())
                    .or_default()
                    .insert(c.uuid());
            }
        }
    }
    for row in d.ports.values() {
        if hag_scope.as_ref().is_some_and(|h| h.is_empty()) {
            break;
        }
        let Some((gname, members)) = &row.ha_chassis_group else {
            continue;
        };
        if hag_uuid.contains_key(gname)
            || hag_scope
                .as_ref()
                .is_some_and(|h| !h.contains(gname.as_str()))
        {
            continue;
        }
        let want: BTreeSet<(String, Option<Uuid>, i64)> = members
            .iter()
            .map(|(c, p)| (c.clone(), chassis.get(c.as_str()).copied(), *p))
            .collect();
        let old = old_hag.get(gname.as_str()).copied();
        let have: BTreeSet<(String, Option<Uuid>, i64)> = old
            .map(|g| {
                g.ha_chassis
                    .iter()
                    .filter_map(|h| sb.ha_chassis.get(&h.uuid()))
                    .map(|h| {
                        (
                            h.external_ids
                                .get("chassis-name")
                                .cloned()
                                .unwrap_or_default(),
                            h.chassis.map(|c| c.uuid()),
                            h.priority,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut new = old.cloned().unwrap_or_else(|| s::HaChassisGroup {
            uuid: o.fresh(),
            name: gname.clone(),
            ..Default::default()
        });
        if old.is_none() || want != have {
            new.ha_chassis = BTreeSet::new();
            for (name, c, prio) in &want {
                let h = s::HaChassis {
                    uuid: o.fresh(),
                    chassis: c.map(Into::into),
                    priority: *prio,
                    external_ids: [("chassis-name".to_string(), name.clone())].into(),
                };
                o.put(&h, None);
                new.ha_chassis.insert(h.uuid.into());
            }
        }
        // ref_chassis: the chassis compile was told of, and those SB shows the ports of the
        // group's switches bound to (a claim re-syncs, no compile needed).
        new.ref_chassis = row
            .ha_ref_chassis
            .iter()
            .filter_map(|c| chassis.get(c.as_str()).copied())
            .chain(
                row.ha_ref_datapaths
                    .iter()
                    .filter_map(|n| dp_uuid.get(n.as_str()))
                    .filter_map(|u| bound_by_dp.get(u))
                    .flatten()
                    .copied(),
            )
            .map(Into::into)
            .collect();
        hag_uuid.insert(gname.clone(), new.uuid);
        o.put(&new, old);
    }
    match &hag_scope {
        None => {
            for r in dup_hag {
                o.delete(r);
            }
            let mut dead: Vec<(&str, &s::HaChassisGroup)> = old_hag
                .iter()
                .filter(|(n, _)| !hag_uuid.contains_key(**n))
                .map(|(n, r)| (*n, *r))
                .collect();
            dead.sort_by_key(|(n, _)| *n);
            for (_, r) in dead {
                o.delete(r);
            }
        }
        Some(h) => {
            for n in h {
                if !hag_uuid.contains_key(*n)
                    && let Some(r) = old_hag.get(n)
                {
                    o.delete(*r);
                }
            }
        }
    }

    // Mirror by name, before the bindings that name them.
    let (old_mirror, dup_mirror) = by_key(sb.mirror.values(), |r| Some(r.name.as_str()));
    let mut mirror_uuid: FastMap<&str, Uuid> =
        old_mirror.iter().map(|(n, r)| (*n, r.uuid)).collect();
    for (name, m) in visit(&d.mirrors, scope.map(|s| &s.mirrors)) {
        let old = old_mirror.get(name.as_str()).copied();
        let new = s::Mirror {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            name: name.clone(),
            filter: s::MirrorFilter::from_wire(&m.filter),
            index: m.index,
            sink: m.sink.clone(),
            type_: s::MirrorType::from_wire(&m.type_),
            external_ids: old.map(|r| r.external_ids.clone()).unwrap_or_default(),
        };
        mirror_uuid.insert(name.as_str(), new.uuid);
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_mirror {
            o.delete(r);
        }
    }
    for r in gone(&old_mirror, &d.mirrors, scope.map(|s| &s.mirrors)) {
        mirror_uuid.remove(r.name.as_str());
        o.delete(r);
    }

    // Port_Binding: only northd's columns.
    let mut pb_uuid: FastMap<&str, Uuid> = FastMap::new();
    for (name, row) in visit(&d.ports, scope.map(|s| &s.ports)) {
        let Some(dp) = dp_uuid.get(row.datapath.as_str()) else {
            continue;
        };
        let old = old_pbs.get(name.as_str()).copied();
        // A new binding is written `up=false`: ovn-controller sets `up` only where northd
        // wrote it (23.03); afterwards `up` is the controller's.
        let mut new = old.cloned().unwrap_or_else(|| s::PortBinding {
            uuid: o.fresh(),
            logical_port: name.clone(),
            up: Some(false),
            ..Default::default()
        });
        new.datapath = (*dp).into();
        new.tunnel_key = i64::from(row.tunnel_key);
        new.type_ = row.type_.clone();
        // Retain the activation flags the claiming controllers wrote (ovn-northd does the
        // same while the port has additional chassis): activation is SB state and must
        // survive northd's rewrite of the options it owns.
        let activated = (!row.requested_additional_chassis.is_empty())
            .then(|| {
                old.and_then(|o| o.options.get(ACTIVATED))
                    .filter(|_| !row.options.contains_key(ACTIVATED))
                    .cloned()
            })
            .flatten();
        new.options = row.options.clone().into();
        if let Some(a) = activated {
            new.options.insert(ACTIVATED.to_string(), a);
        }
        new.mac = row.mac.clone();
        new.parent_port = row.parent_port.clone();
        new.tag = row.tag;
        new.nat_addresses = row.nat_addresses.clone();
        new.external_ids = row.external_ids.clone().into();
        new.requested_chassis = row
            .requested_chassis
            .as_ref()
            .and_then(|c| by_name_or_host.get(c.as_str()))
            .map(|u| (*u).into());
        new.requested_additional_chassis = row
            .requested_additional_chassis
            .iter()
            .filter_map(|c| by_name_or_host.get(c.as_str()))
            .map(|u| (*u).into())
            .collect();
        new.ha_chassis_group = row
            .ha_chassis_group
            .as_ref()
            .and_then(|(g, _)| hag_uuid.get(g))
            .map(|u| (*u).into());
        new.port_security = row.port_security.clone();
        new.mirror_rules = row
            .mirror_rules
            .iter()
            .filter_map(|m| mirror_uuid.get(m.as_str()))
            .map(|u| (*u).into())
            .collect();
        pb_uuid.insert(name.as_str(), new.uuid);
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_pbs {
            o.delete(r);
        }
        let mut dead: Vec<(&str, &s::PortBinding)> = old_pbs
            .iter()
            .filter(|(n, _)| !pb_uuid.contains_key(**n))
            .map(|(n, r)| (*n, *r))
            .collect();
        dead.sort_by_key(|(n, _)| *n);
        for (_, r) in dead {
            o.delete(r);
        }
    } else {
        for r in gone(&old_pbs, &d.ports, scope.map(|s| &s.ports)) {
            o.delete(r);
        }
    }
    // A port outside the scope keeps its row (scoped diffs only).
    let port_ref = |p: &str| -> Option<Uuid> {
        pb_uuid.get(p).copied().or_else(|| {
            scope
                .is_some_and(|sc| !sc.ports.contains(p))
                .then(|| old_pbs.get(p).map(|r| r.uuid))
                .flatten()
        })
    };

    // Logical_DP_Group by datapath set.
    let mut group_uuid: HashMap<Vec<Uuid>, Uuid> = HashMap::new();
    for g in sb.logical_dp_group.values() {
        let set: Vec<Uuid> = g.datapaths.iter().map(|r| r.uuid()).collect();
        group_uuid.entry(set).or_insert(g.uuid);
    }
    let mut group_of = |names: &[String], o: &mut Ops<'_>| -> Option<Uuid> {
        let mut set = Vec::with_capacity(names.len());
        for n in names {
            set.push(*dp_uuid.get(n.as_str())?);
        }
        set.sort_unstable();
        if let Some(u) = group_uuid.get(&set) {
            return Some(*u);
        }
        let g = s::LogicalDpGroup {
            uuid: o.fresh(),
            datapaths: set.iter().map(|u| (*u).into()).collect(),
        };
        o.put(&g, None);
        group_uuid.insert(set, g.uuid);
        Some(g.uuid)
    };

    // Logical_Flow by hf-flow-id.
    let frozen: BTreeSet<Uuid> = d
        .frozen_datapaths
        .iter()
        .filter_map(|n| old_dps.get(n.as_str()).map(|r| r.uuid))
        .collect();
    let is_frozen = |f: &LeanFlow| {
        f.logical_datapath.is_some_and(|u| frozen.contains(&u))
            || f.logical_dp_group.is_some_and(|g| {
                sb.logical_dp_group
                    .get(&g)
                    .is_some_and(|g| g.datapaths.iter().any(|d| frozen.contains(&d.uuid())))
            })
    };
    // Fail closed (see `SbDesired::frozen_datapaths`): a flow any frozen datapath executes is
    // left as it is, and so is the identity it holds (its other datapaths keep that version
    // too, until the chassis upgrades or leaves); a wanted flow shared with a frozen datapath
    // that SB lacks is written for the other datapaths only.
    let mut frozen_ids: HashSet<FlowId> = HashSet::new();
    let mut old_flows: HashMap<FlowId, (Uuid, &LeanFlow)> = HashMap::new();
    let mut visit_flows: Vec<(FlowId, &crate::output::FlowRow)> = Vec::new();
    match scope {
        None => {
            let mut flow_ids: Vec<(&Uuid, &LeanFlow)> = sb.logical_flow.iter().collect();
            flow_ids.sort_unstable_by_key(|(u, _)| **u);
            for (u, f) in flow_ids {
                if is_frozen(f) {
                    o.stats.frozen += 1;
                    frozen_ids.extend(f.id);
                    continue;
                }
                match f.id {
                    Some(id) if !old_flows.contains_key(&id) && d.flows.contains_key(&id) => {
                        old_flows.insert(id, (*u, f));
                    }
                    _ => o.delete_uuid("Logical_Flow", *u),
                }
            }
            visit_flows.extend(d.flows.iter().map(|(id, r)| (*id, r)));
        }
        Some(sc) => {
            // The same rule over the scope's identities only: the lowest UUID of an identity
            // northd wants is kept, every other row of it deleted.
            let mut ids: Vec<FlowId> = sc.flows.iter().copied().collect();
            ids.sort_unstable();
            for id in ids {
                let mut rows: Vec<Uuid> = sb.flows_with_id(id).to_vec();
                rows.sort_unstable();
                let want = d.flows.get(&id);
                for (i, u) in rows.into_iter().enumerate() {
                    match sb.logical_flow.get(&u) {
                        Some(f) if i == 0 && want.is_some() => {
                            old_flows.insert(id, (u, f));
                        }
                        _ => o.delete_uuid("Logical_Flow", u),
                    }
                }
                if let Some(r) = want {
                    visit_flows.push((id, r));
                }
            }
        }
    }
    for (id, row) in visit_flows {
        if frozen_ids.contains(&id) {
            continue;
        }
        let (dp, group) = match &row.dps {
            FlowDps::One(n) => {
                if d.frozen_datapaths.contains(n) {
                    continue;
                }
                match dp_uuid.get(n.as_str()) {
                    Some(u) => (Some(*u), None),
                    None => continue,
                }
            }
            FlowDps::Group(g) => {
                let g: Vec<String> = g
                    .iter()
                    .filter(|n| !d.frozen_datapaths.contains(*n))
                    .cloned()
                    .collect();
                if g.is_empty() {
                    continue;
                }
                match group_of(&g, &mut o) {
                    Some(u) => (None, Some(u)),
                    None => continue,
                }
            }
        };
        let old = old_flows.get(&id);
        let Some((uuid, f)) = old else {
            let new = s::LogicalFlow {
                uuid: o.fresh(),
                actions: (*row.actions).into(),
                controller_meter: row.controller_meter.clone(),
                external_ids: row.external_ids.to_map().into(),
                logical_datapath: dp.map(Into::into),
                logical_dp_group: group.map(Into::into),
                match_: (*row.match_).into(),
                pipeline: s::LogicalFlowPipeline::from_wire(row.pipeline),
                priority: i64::from(row.priority),
                table_id: i64::from(row.table_id),
                tags: Default::default(),
            };
            o.put(&new, None);
            continue;
        };
        let mut cols = Map::new();
        if f.logical_datapath != dp {
            cols.insert("logical_datapath".into(), opt(dp.map(|u| uuid_ref(&u))));
        }
        if f.logical_dp_group != group {
            cols.insert("logical_dp_group".into(), opt(group.map(|u| uuid_ref(&u))));
        }
        if f.egress != (row.pipeline == "egress") {
            cols.insert("pipeline".into(), json!(row.pipeline));
        }
        if f.table_id != i16::from(row.table_id) {
            cols.insert("table_id".into(), json!(row.table_id));
        }
        if f.priority != i32::from(row.priority) {
            cols.insert("priority".into(), json!(row.priority));
        }
        if f.match_hash != text_hash(&row.match_) {
            cols.insert("match".into(), json!(&*row.match_));
        }
        if f.actions_hash != text_hash(&row.actions) {
            cols.insert("actions".into(), json!(&*row.actions));
        }
        if f.controller_meter.as_deref() != row.controller_meter.as_deref() {
            cols.insert(
                "controller_meter".into(),
                opt(row.controller_meter.as_ref().map(|m| json!(m))),
            );
        }
        let mut have = f.external_ids();
        let same_ids =
            row.external_ids.iter().all(|kv| have.next() == Some(kv)) && have.next().is_none();
        if !same_ids {
            cols.insert("external_ids".into(), map(&row.external_ids.to_map()));
        }
        if !cols.is_empty() {
            o.push_value(
                json!({"op": "update", "table": "Logical_Flow",
                "where": [["_uuid", "==", ["uuid", uuid.to_string()]]], "row": cols}),
                *uuid,
            );
            o.stats.updated += 1;
        }
    }

    // Multicast_Group by (datapath name, name).
    let dp_name: HashMap<Uuid, &str> = old_dps.iter().map(|(n, r)| (r.uuid, *n)).collect();
    let (old_mc, dup_mc) = by_key(sb.multicast_group.values(), |r| {
        dp_name
            .get(&r.datapath.uuid())
            .map(|n| ((*n).to_string(), r.name.clone()))
    });
    for (key, row) in visit(&d.mcgroups, scope.map(|s| &s.mcgroups)) {
        let Some(dp) = dp_uuid.get(key.0.as_str()) else {
            continue;
        };
        let old = old_mc.get(key).copied();
        let new = s::MulticastGroup {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            datapath: (*dp).into(),
            name: key.1.clone(),
            ports: row
                .ports
                .iter()
                .filter_map(|p| port_ref(p))
                .map(Into::into)
                .collect(),
            tunnel_key: i64::from(row.tunnel_key),
        };
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_mc {
            // A group of a deleted datapath: deleted with it (it refers to the datapath
            // strongly).
            o.delete(r);
        }
    }
    let old_mc_ref: FastMap<&(String, String), &s::MulticastGroup> =
        old_mc.iter().map(|(k, r)| (k, *r)).collect();
    for r in gone(&old_mc_ref, &d.mcgroups, scope.map(|s| &s.mcgroups)) {
        o.delete(r);
    }

    // Port_Group and Address_Set by name.
    let (old_pg, dup_pg) = by_key(sb.port_group.values(), |r| Some(r.name.as_str()));
    for (name, ports) in visit(&d.port_groups, scope.map(|s| &s.port_groups)) {
        let old = old_pg.get(name.as_str()).copied();
        let new = s::PortGroup {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            name: name.clone(),
            ports: ports.clone(),
        };
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_pg {
            o.delete(r);
        }
    }
    for r in gone(&old_pg, &d.port_groups, scope.map(|s| &s.port_groups)) {
        o.delete(r);
    }
    let (old_as, dup_as) = by_key(sb.address_set.values(), |r| Some(r.name.as_str()));
    for (name, addrs) in visit(&d.address_sets, scope.map(|s| &s.address_sets)) {
        let old = old_as.get(name.as_str()).copied();
        let new = s::AddressSet {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            name: name.clone(),
            addresses: addrs.clone(),
        };
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_as {
            o.delete(r);
        }
    }
    for r in gone(&old_as, &d.address_sets, scope.map(|s| &s.address_sets)) {
        o.delete(r);
    }

    // DNS by external_ids:dns_id (the NB row; DNS rows have no name).
    let (old_dns, dup_dns) = by_key(sb.dns.values(), |r| {
        r.external_ids.get("dns_id").map(String::as_str)
    });
    for (id, row) in visit(&d.dns, scope.map(|s| &s.dns)) {
        let datapaths: BTreeSet<hf_model::RowRef<s::DatapathBinding>> = row
            .datapaths
            .iter()
            .filter_map(|n| dp_uuid.get(n.as_str()))
            .map(|u| (*u).into())
            .collect();
        let old = old_dns.get(id.as_str()).copied();
        if datapaths.is_empty() {
            if let Some(r) = old {
                o.delete(r);
            }
            continue;
        }
        let new = s::Dns {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            datapaths,
            external_ids: row.external_ids.clone().into(),
            records: row.records.clone().into(),
        };
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_dns {
            o.delete(r);
        }
    }
    for r in gone(&old_dns, &d.dns, scope.map(|s| &s.dns)) {
        o.delete(r);
    }

    ip_mcast::diff(&mut o, sb, d, scope, &dp_uuid);
    ip_mcast::purge_igmp(&mut o, sb, &dp_uuid);
    bfd::diff(&mut o, sb, d, scope);

    // Meter by name, its bands compared as (action, rate, burst) and written anew on a change.
    let (old_meter, dup_meter) = by_key(sb.meter.values(), |r| Some(r.name.as_str()));
    for (name, m) in visit(&d.meters, scope.map(|s| &s.meters)) {
        let old = old_meter.get(name.as_str()).copied();
        let bands_now: Option<BTreeSet<(String, i64, i64)>> = old.and_then(|r| {
            r.bands
                .iter()
                .map(|b| {
                    sb.meter_band
                        .get(&b.uuid())
                        .map(|b| (b.action.as_str().to_string(), b.rate, b.burst_size))
                })
                .collect()
        });
        let mut new = old.cloned().unwrap_or_else(|| s::Meter {
            uuid: o.fresh(),
            name: name.clone(),
            ..Default::default()
        });
        new.unit = s::MeterUnit::from_wire(&m.unit);
        if bands_now.as_ref() != Some(&m.bands) {
            new.bands.clear();
            for (action, rate, burst) in &m.bands {
                let b = s::MeterBand {
                    uuid: o.fresh(),
                    action: s::MeterBandAction::from_wire(action),
                    rate: *rate,
                    burst_size: *burst,
                };
                o.put(&b, None);
                new.bands.insert(b.uuid.into());
            }
        }
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_meter {
            o.delete(r);
        }
    }
    for r in gone(&old_meter, &d.meters, scope.map(|s| &s.meters)) {
        o.delete(r);
    }

    // Chassis_Template_Var by chassis.
    let (old_tv, dup_tv) = by_key(sb.chassis_template_var.values(), |r| {
        Some(r.chassis.as_str())
    });
    for (chassis, vars) in visit(&d.template_vars, scope.map(|s| &s.template_vars)) {
        let old = old_tv.get(chassis.as_str()).copied();
        let new = s::ChassisTemplateVar {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            chassis: chassis.clone(),
            variables: vars.clone().into(),
        };
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_tv {
            o.delete(r);
        }
    }
    for r in gone(&old_tv, &d.template_vars, scope.map(|s| &s.template_vars)) {
        o.delete(r);
    }

    // Load_Balancer by name.
    let (old_lb, dup_lb) = by_key(sb.load_balancer.values(), |r| Some(r.name.as_str()));
    for (name, lb) in visit(&d.load_balancers, scope.map(|s| &s.load_balancers)) {
        let old = old_lb.get(name.as_str()).copied();
        let mut new = old.cloned().unwrap_or_else(|| s::LoadBalancer {
            uuid: o.fresh(),
            name: name.clone(),
            ..Default::default()
        });
        new.vips = lb.vips.clone().into();
        new.options = lb.options.clone().into();
        new.external_ids = lb.external_ids.clone().into();
        new.protocol = lb
            .protocol
            .as_deref()
            .map(s::LoadBalancerProtocol::from_wire);
        if lb.dp_group {
            let names: Vec<String> = lb.datapaths.iter().cloned().collect();
            new.datapath_group = group_of(&names, &mut o).map(Into::into);
            new.datapaths = BTreeSet::new();
        } else {
            new.datapath_group = None;
            new.datapaths = lb
                .datapaths
                .iter()
                .filter_map(|n| dp_uuid.get(n.as_str()))
                .map(|u| (*u).into())
                .collect();
        }
        o.put(&new, old);
    }
    if scope.is_none() {
        for r in dup_lb {
            o.delete(r);
        }
    }
    for r in gone(&old_lb, &d.load_balancers, scope.map(|s| &s.load_balancers)) {
        o.delete(r);
    }

    // Service_Monitor by (logical_port, ip, port, protocol), always whole (a few rows): the
    // columns northd writes are corrected, `status` is left to the controllers but for a
    // monitor whose port is down (set `offline`, as ovn-northd does), and rows no health check
    // needs are deleted.
    let (old_sm, dup_sm) = by_key(sb.service_monitor.values(), |r| {
        Some(crate::svc::SvcKey {
            logical_port: r.logical_port.clone(),
            ip: r.ip.clone(),
            port: u16::try_from(r.port).unwrap_or(0),
            protocol: r
                .protocol
                .as_ref()
                .map_or_else(|| "tcp".to_string(), |p| p.as_str().to_string()),
        })
    });
    for (key, row) in &d.service_monitors {
        let old = old_sm.get(key).copied();
        let mut new = old.cloned().unwrap_or_else(|| s::ServiceMonitor {
            uuid: o.fresh(),
            ip: key.ip.clone(),
            port: i64::from(key.port),
            logical_port: key.logical_port.clone(),
            protocol: Some(s::ServiceMonitorProtocol::from_wire(&key.protocol)),
            ..Default::default()
        });
        new.options = row.options.clone().into();
        new.src_mac = row.src_mac.clone();
        new.src_ip = row.src_ip.clone();
        if row.force_offline
            && new
                .status
                .as_ref()
                .is_some_and(|st| st.as_str() == "online")
        {
            new.status = Some(s::ServiceMonitorStatus::from_wire("offline"));
        }
        o.put(&new, old);
    }
    for r in dup_sm {
        o.delete(r);
    }
    let mut gone_sm: Vec<&s::ServiceMonitor> = old_sm
        .iter()
        .filter(|(k, _)| !d.service_monitors.contains_key(*k))
        .map(|(_, r)| *r)
        .collect();
    gone_sm.sort_by_key(|r| r.uuid);
    for r in gone_sm {
        o.delete(r);
    }

    // DHCP_Options and DHCPv6_Options by name: a row of another code or type is corrected,
    // rows of names northd does not know (and duplicates) are deleted.
    if scope.is_some_and(|s| !s.dhcp) {
        return (
            Written {
                sink: o.sink,
                rows: o.rows,
            },
            o.stats,
        );
    }
    let (old_d4, dup_d4) = by_key(sb.dhcp_options.values(), |r| Some(r.name.as_str()));
    for (name, row) in &d.dhcp_options {
        let old = old_d4.get(name.as_str()).copied();
        let new = s::DhcpOptions {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            code: i64::from(row.code),
            name: name.clone(),
            type_: s::DhcpOptionsType::from_wire(row.type_),
        };
        o.put(&new, old);
    }
    for r in dup_d4 {
        o.delete(r);
    }
    for r in gone(&old_d4, &d.dhcp_options, None) {
        o.delete(r);
    }
    let (old_d6, dup_d6) = by_key(sb.dhcpv6_options.values(), |r| Some(r.name.as_str()));
    for (name, row) in &d.dhcpv6_options {
        let old = old_d6.get(name.as_str()).copied();
        let new = s::Dhcpv6Options {
            uuid: old.map_or_else(|| o.fresh(), |r| r.uuid),
            code: i64::from(row.code),
            name: name.clone(),
            type_: s::Dhcpv6OptionsType::from_wire(row.type_),
        };
        o.put(&new, old);
    }
    for r in dup_d6 {
        o.delete(r);
    }
    for r in gone(&old_d6, &d.dhcpv6_options, None) {
        o.delete(r);
    }
    (
        Written {
            sink: o.sink,
            rows: o.rows,
        },
        o.stats,
    )
}
