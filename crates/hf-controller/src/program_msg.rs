//! [`Translation`] → [`ProgramMsg`]: the description a controller hands its datapath over the
//! control protocol (`hf_datapath::proto`).
//!
//! # What it does
//!
//! - Flows go as SB text (`FlowSpec.source`) with their identity, stage, SB UUID and stage
//!   hint; each carries the last version of the same identity that compiled
//!   ([`FlowMsg::last_good`]) when a [`LastGoodLookup`] knows one that differs from the
//!   current text.
//! - Ports are located by name: a port bound here is [`LocationMsg::Local`] with its logical
//!   port name (the datapath's local interfaces are named by `iface-id`), remote ports carry the
//!   chassis id of [`ProgramMsg::chassis_table`].
//! - Zones (the translation's, plus `extra_zones` the caller still holds), address sets (each
//!   member printed back as a logical-flow constant), port groups, the chassis table with encap
//!   IPs, neighbours, FDB, load-balancer VIPs and DNS records.
//!
//! # What it does not do
//!
//! No compiling: the datapath compiles the text. A flow without source text (built in code,
//! not from SB) cannot be described and is reported in [`ProgramBuild::skipped`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use hf_datapath::proto::{
    AnnounceMsg, ChassisMsg, DatapathMsg, DnsMsg, FdbMsg, FewTexts, FlowMsg, GroupMsg, LbVipMsg,
    LocationMsg, MigrationMsg, NeighbourMsg, PortMsg, ProgramMsg,
};
use hf_expr::actions::Pipeline;
use hf_pipeline::{DatapathKind, DatapathSpec, FlowSpec, PortKind, PortLocation, PortSpec};

use crate::Translation;
use crate::translate::FlowEdit;

/// Where the last good text of a flow is looked up: (datapath name, flow id) → (match,
/// actions). The texts are shared: a flow whose current text equals its last good one takes
/// the store's copy instead of a new one, so the store and the programs hold one.
pub trait LastGoodLookup {
    /// The last text of this flow that compiled, if known.
    fn last_good(&self, datapath: &str, id: &str) -> Option<(&Arc<str>, &Arc<str>)>;
}

/// No last good versions.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLastGood;

impl LastGoodLookup for NoLastGood {
    fn last_good(&self, _: &str, _: &str) -> Option<(&Arc<str>, &Arc<str>)> {
        None
    }
}

/// The result of [`program_msg`].
#[derive(Debug, Clone, Default)]
pub struct ProgramBuild {
    /// The message.
    pub msg: ProgramMsg,
    /// Flows that could not be described (no source text): (datapath, flow id).
    pub skipped: Vec<(String, String)>,
}

/// `Port_Binding.type` of a port kind.
pub fn port_kind_name(k: &PortKind) -> String {
    port_kind_str(k).to_string()
}

/// [`port_kind_name`], borrowed.
fn port_kind_str(k: &PortKind) -> &str {
    match k {
        PortKind::Vif => "",
        PortKind::Patch => "patch",
        PortKind::L3Gateway => "l3gateway",
        PortKind::ChassisRedirect => "chassisredirect",
        PortKind::Localnet => "localnet",
        PortKind::Localport => "localport",
        PortKind::Virtual => "virtual",
        PortKind::External => "external",
        PortKind::L2Gateway => "l2gateway",
        PortKind::Vtep => "vtep",
        PortKind::Remote => "remote",
        PortKind::Other(s) => s,
        #[allow(unreachable_patterns)]
        _ => "unknown",
    }
}

/// Builds the program message of `t` for `chassis`, numbered `generation`, translated at
/// `nb_cfg`. `extra_zones` are zone assignments the datapath holds beyond the translation's
/// (names kept until their object is really gone); they join [`ProgramMsg::zones`].
pub fn program_msg(
    t: &Translation,
    chassis: &str,
    generation: u64,
    nb_cfg: i64,
    extra_zones: &BTreeMap<String, u16>,
    last_good: &dyn LastGoodLookup,
) -> ProgramBuild {
    let local_names = local_names(t);
    let mut skipped = Vec::new();
    let datapaths = t
        .spec
        .datapaths
        .iter()
        .map(|d| Arc::new(datapath_msg(d, &local_names, last_good, &mut skipped)))
        .collect();
    let msg = assemble(t, chassis, generation, nb_cfg, extra_zones, datapaths);
    ProgramBuild { msg, skipped }
}

/// [`program_msg`] for a translation with [`Translation::touched`] (from
/// [`crate::Incremental`]), given the message built from the previous translation of the same
/// translator: every datapath that is not touched (or only [`Translation::renumbered`]) takes
/// its [`DatapathMsg`] from `prev` as it is (no per-flow work); a touched one whose flows the
/// translation says how it changed ([`Translation::flow_edits`]) takes its ports and groups
/// from the translation and its flows from `prev`'s message, minus the rows removed, plus the
/// flows added (built, and their last good versions looked up, for those alone); and of the
/// parts outside datapaths only those [`Touched::rest`](crate::Touched::rest) names are built
/// again. Equal to [`program_msg`]'s message. Without `touched`, or when `prev` lacks a
/// datapath, it builds as [`program_msg`] does.
///
/// The caller guarantees what `touched` cannot see: `prev` was built from the translation
/// before `t`, with the same `last_good` answers for the reused datapaths (a caller whose
/// answers changed for a datapath removes it from `prev`, which then builds it afresh), and is
/// unchanged (a caller that edits messages, such as keeping sets, passes an unedited copy).
/// Reused datapaths are shared ([`Arc`]), not copied. Flows without source text of reused
/// datapaths are not listed in [`ProgramBuild::skipped`] again (translations from SB have
/// none; a datapath with such flows is built whole).
pub fn program_msg_reusing(
    t: &Translation,
    chassis: &str,
    generation: u64,
    nb_cfg: i64,
    extra_zones: &BTreeMap<String, u16>,
    last_good: &dyn LastGoodLookup,
    mut prev: ProgramMsg,
) -> ProgramBuild {
    let Some(touched) = &t.touched else {
        return program_msg(t, chassis, generation, nb_cfg, extra_zones, last_good);
    };
    let local_names = local_names(t);
    let mut old: HashMap<String, Arc<DatapathMsg>> = std::mem::take(&mut prev.datapaths)
        .into_iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    let mut skipped = Vec::new();
    let datapaths = t
        .spec
        .datapaths
        .iter()
        .map(|d| {
            let reuse = !touched.datapaths.contains(&d.name) || t.renumbered.contains(&d.name);
            match old.remove(&d.name) {
                Some(m) if reuse => m,
                Some(m) if t.flow_edits.is_some() => {
                    let edit = t.flow_edits.as_ref().and_then(|e| e.get(&d.name));
                    match edited_datapath_msg(d, &m, edit, &local_names, last_good) {
                        Some(e) => Arc::new(e),
                        None => Arc::new(datapath_msg(d, &local_names, last_good, &mut skipped)),
                    }
                }
                _ => Arc::new(datapath_msg(d, &local_names, last_good, &mut skipped)),
            }
        })
        .collect();
    let rest = touched.rest;
    // Zones: the translation's plus `extra_zones`, which may differ from last time.
    let same_zones = !rest.zones
        && prev.zones.len()
            == t.zones.len()
                + extra_zones
                    .keys()
                    .filter(|n| !t.zones.contains_key(*n))
                    .count()
        && extra_zones
            .iter()
            .all(|(n, z)| t.zones.contains_key(n) || prev.zones.get(n) == Some(z));
    if !same_zones {
        prev.zones = all_zones(t, extra_zones);
    }
    if rest.zones {
        prev.switch_snat_zones = t.spec.switch_snat_zones.clone();
    }
    if rest.sets {
        (prev.address_sets, prev.port_groups) = sets_msg(t);
    }
    if rest.chassis {
        prev.chassis_table = chassis_table_msg(t);
    }
    if rest.neighbours {
        (prev.neighbours, prev.fdb) = neighbours_msg(t);
    }
    if rest.lb_vips {
        prev.lb_vips = lb_vips_msg(t);
    }
    if rest.dns {
        prev.dns = dns_msg(t);
    }
    if rest.migrations {
        prev.migrations = migrations_msg(t);
    }
    prev.datapaths = datapaths;
    prev.generation = generation;
    prev.chassis = chassis.to_string();
    prev.nb_cfg = nb_cfg;
    prev.owner = t.spec.owner.0;
    prev.feature_level = None;
    prev.no_last_good = false;
    ProgramBuild { msg: prev, skipped }
}

/// Datapath `d`'s message from its previous message `prev` (built from the translation
/// before, whose flows `edit` turned into `d`'s; `None`: the flows did not change): ports,
/// groups and zones from `d`, the flows `prev`'s minus the rows `edit` removed plus the flows
/// it added, built here. `None` when `prev`'s flows do not line up with `d`'s (a flow without
/// source text in either): the caller builds the datapath whole.
fn edited_datapath_msg(
    d: &DatapathSpec,
    prev: &DatapathMsg,
    edit: Option<&FlowEdit>,
    local_names: &BTreeMap<u32, &str>,
    last_good: &dyn LastGoodLookup,
) -> Option<DatapathMsg> {
    let Some(edit) = edit else {
        if prev.flows.len() != d.flows.len() {
            return None;
        }
        return Some(datapath_head(
            d,
            local_names,
            prev.flows.clone(),
            Some(prev),
        ));
    };
    // `prev`'s flows without the removed rows, in order; the added flows go between them.
    // (A router's 31k flows are probed here for a port add's few rows: no hashing.)
    let gone = FewTexts::new(edit.removed.iter().map(String::as_str));
    let mut kept = prev
        .flows
        .iter()
        .filter(|f| gone.is_empty() || f.sb_uuid.as_deref().is_none_or(|u| !gone.contains(u)));
    let mut added = edit.added.iter().copied().peekable();
    let mut flows = Vec::with_capacity(d.flows.len());
    for (i, f) in d.flows.iter().enumerate() {
        if added.next_if_eq(&i).is_some() {
            flows.push(Arc::new(flow_msg(&d.name, f, last_good)?));
        } else {
            flows.push(kept.next()?.clone());
        }
    }
    if kept.next().is_some() || added.next().is_some() {
        return None;
    }
    Some(datapath_head(d, local_names, flows, Some(prev)))
}

/// Local port id → logical port name.
fn local_names(t: &Translation) -> BTreeMap<u32, &str> {
    t.local_ports
        .iter()
        .map(|(n, id)| (*id, n.as_str()))
        .collect()
}

fn all_zones(t: &Translation, extra_zones: &BTreeMap<String, u16>) -> BTreeMap<String, u16> {
    let mut zones = t.zones.clone();
    for (n, z) in extra_zones {
        zones.entry(n.clone()).or_insert(*z);
    }
    zones
}

/// The message of `t` with these datapaths.
fn assemble(
    t: &Translation,
    chassis: &str,
    generation: u64,
    nb_cfg: i64,
    extra_zones: &BTreeMap<String, u16>,
    datapaths: Vec<Arc<DatapathMsg>>,
) -> ProgramMsg {
    let (address_sets, port_groups) = sets_msg(t);
    let (neighbours, fdb) = neighbours_msg(t);
    ProgramMsg {
        migrations: migrations_msg(t),
        generation,
        chassis: chassis.to_string(),
        nb_cfg,
        datapaths,
        zones: all_zones(t, extra_zones),
        chassis_table: chassis_table_msg(t),
        neighbours,
        address_sets,
        port_groups,
        fdb,
        lb_vips: lb_vips_msg(t),
        switch_snat_zones: t.spec.switch_snat_zones.clone(),
        dns: dns_msg(t),
        owner: t.spec.owner.0,
        feature_level: None,
        no_last_good: false,
    }
}

/// Address sets (each member printed back as a logical-flow constant) and port groups.
type SetsMsg = (BTreeMap<String, Vec<String>>, BTreeMap<String, Vec<String>>);

fn sets_msg(t: &Translation) -> SetsMsg {
    let address_sets = t
        .spec
        .sets
        .addr_sets
        .iter()
        .map(|(n, v)| (n.clone(), v.iter().map(|c| c.to_string()).collect()))
        .collect();
    let port_groups = t
        .spec
        .sets
        .port_groups
        .iter()
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    (address_sets, port_groups)
}

fn migrations_msg(t: &Translation) -> Vec<MigrationMsg> {
    t.migrations
        .iter()
        .map(|m| MigrationMsg {
            port: m.port.clone(),
            incoming: m.incoming,
            peers: m.peers.clone(),
            announce: m
                .announce
                .iter()
                .map(|(mac, ip, via)| AnnounceMsg {
                    mac: *mac,
                    ip: ip.clone(),
                    via: via.clone(),
                })
                .collect(),
        })
        .collect()
}

fn chassis_table_msg(t: &Translation) -> Vec<ChassisMsg> {
    t.chassis
        .iter()
        .map(|c| ChassisMsg {
            id: c.id,
            name: c.name.clone(),
            encap_type: c.encap_type.clone(),
            ip: c.ip.clone(),
        })
        .collect()
}

fn neighbours_msg(t: &Translation) -> (Vec<NeighbourMsg>, Vec<FdbMsg>) {
    let neighbours = t
        .spec
        .neighbours
        .iter()
        .map(|n| NeighbourMsg {
            datapath: n.datapath.clone(),
            port: n.port.clone(),
            ip: n.ip.to_string(),
            mac: n.mac,
        })
        .collect();
    let fdb = t
        .spec
        .fdb
        .iter()
        .map(|f| FdbMsg {
            datapath: f.datapath.clone(),
            port: f.port.clone(),
            mac: f.mac,
        })
        .collect();
    (neighbours, fdb)
}

fn lb_vips_msg(t: &Translation) -> Vec<LbVipMsg> {
    t.spec
        .lb_vips
        .iter()
        .map(|v| LbVipMsg {
            datapath: v.datapath.clone(),
            ip: v.ip.to_string(),
            port: v.port,
            proto: v.proto,
        })
        .collect()
}

fn dns_msg(t: &Translation) -> Vec<DnsMsg> {
    t.spec
        .dns
        .iter()
        .map(|d| DnsMsg {
            datapath: d.datapath.clone(),
            records: d.records.clone(),
        })
        .collect()
}

/// One datapath's message; flows without source text go to `skipped`.
fn datapath_msg(
    d: &DatapathSpec,
    local_names: &BTreeMap<u32, &str>,
    last_good: &dyn LastGoodLookup,
    skipped: &mut Vec<(String, String)>,
) -> DatapathMsg {
    let mut flows = Vec::with_capacity(d.flows.len());
    for f in &d.flows {
        match flow_msg(&d.name, f, last_good) {
            Some(m) => flows.push(Arc::new(m)),
            None => skipped.push((d.name.clone(), f.id.0.to_string())),
        }
    }
    datapath_head(d, local_names, flows, None)
}

/// Datapath `d`'s message with these flows: its name, key, zones, ports and groups. The
/// ports and groups are `prev`'s (shared, not copied) when they are what `d` has.
fn datapath_head(
    d: &DatapathSpec,
    local_names: &BTreeMap<u32, &str>,
    flows: Vec<Arc<FlowMsg>>,
    prev: Option<&DatapathMsg>,
) -> DatapathMsg {
    let router_zones = match d.kind {
        DatapathKind::Router {
            dnat_zone,
            snat_zone,
        } => Some((dnat_zone, snat_zone)),
        _ => None,
    };
    let ports = match prev {
        Some(m)
            if m.ports.len() == d.ports.len()
                && d.ports
                    .iter()
                    .zip(m.ports.iter())
                    .all(|(p, m)| same_port(p, m, local_names)) =>
        {
            m.ports.clone()
        }
        _ => Arc::new(d.ports.iter().map(|p| port_msg(p, local_names)).collect()),
    };
    let groups = match prev {
        Some(m)
            if m.groups.len() == d.groups.len()
                && d.groups
                    .iter()
                    .zip(m.groups.iter())
                    .all(|(g, m)| g.name == m.name && g.key == m.key && g.members == m.members) =>
        {
            m.groups.clone()
        }
        _ => Arc::new(
            d.groups
                .iter()
                .map(|g| GroupMsg {
                    name: g.name.clone(),
                    key: g.key,
                    members: g.members.clone(),
                })
                .collect(),
        ),
    };
    let msg = DatapathMsg {
        name: d.name.clone(),
        tunnel_key: d.tunnel_key,
        router_zones,
        ports,
        groups,
        flows,
    };
    debug_assert!(
        prev.is_none() || {
            let fresh = datapath_head(d, local_names, Vec::new(), None);
            *fresh.ports == *msg.ports && *fresh.groups == *msg.groups
        },
        "datapath {}: a shared port or group list differs from a fresh build",
        d.name
    );
    msg
}

/// Where a port lives, borrowed from its spec (`local_names`: local id → logical port name).
enum LocationView<'a> {
    Local(&'a str),
    Remote(u32),
    Patch(&'a str),
    Redirect(&'a str),
    Unbound,
}

fn location_view<'a>(p: &'a PortSpec, local_names: &BTreeMap<u32, &'a str>) -> LocationView<'a> {
    match &p.location {
        PortLocation::Local(id) => {
            LocationView::Local(local_names.get(id).copied().unwrap_or(p.name.as_str()))
        }
        PortLocation::Remote { chassis } => LocationView::Remote(*chassis),
        PortLocation::Patch { peer } => LocationView::Patch(peer),
        PortLocation::Redirect { port } => LocationView::Redirect(port),
        _ => LocationView::Unbound,
    }
}

/// Port `p`'s message.
fn port_msg(p: &PortSpec, local_names: &BTreeMap<u32, &str>) -> PortMsg {
    PortMsg {
        name: p.name.clone(),
        key: p.key,
        location: match location_view(p, local_names) {
            LocationView::Local(n) => LocationMsg::Local(n.to_string()),
            LocationView::Remote(c) => LocationMsg::Remote(c),
            LocationView::Patch(peer) => LocationMsg::Patch(peer.to_string()),
            LocationView::Redirect(port) => LocationMsg::Redirect(port.to_string()),
            LocationView::Unbound => LocationMsg::Unbound,
        },
        zone: p.zone,
        kind: port_kind_name(&p.kind),
        resident: p.resident,
        also_remote: p.also_remote.clone(),
        activation: p.activation.map(Into::into),
        addresses: p.addresses.clone(),
        port_security: p.port_security.clone(),
    }
}

/// Whether `m` is [`port_msg`]'s message for `p`, without building it.
fn same_port(p: &PortSpec, m: &PortMsg, local_names: &BTreeMap<u32, &str>) -> bool {
    // A destructure: a new field must be compared.
    let PortMsg {
        name,
        key,
        location,
        zone,
        kind,
        resident,
        also_remote,
        activation,
        addresses,
        port_security,
    } = m;
    let same_location = match (location_view(p, local_names), location) {
        (LocationView::Local(a), LocationMsg::Local(b))
        | (LocationView::Patch(a), LocationMsg::Patch(b))
        | (LocationView::Redirect(a), LocationMsg::Redirect(b)) => a == b,
        (LocationView::Remote(a), LocationMsg::Remote(b)) => a == *b,
        (LocationView::Unbound, LocationMsg::Unbound) => true,
        _ => false,
    };
    p.key == *key
        && p.zone == *zone
        && p.resident == *resident
        && same_location
        && p.name == *name
        && port_kind_str(&p.kind) == kind
        && p.also_remote == *also_remote
        && p.activation.map(Into::into) == *activation
        && p.addresses == *addresses
        && p.port_security == *port_security
}

/// One flow's message (with its last good version from `last_good`); `None` for a flow
/// without source text.
fn flow_msg(datapath: &str, f: &FlowSpec, last_good: &dyn LastGoodLookup) -> Option<FlowMsg> {
    let src = f.source.as_ref()?;
    // Texts are shared, not copied (see [`SharedText`]).
    let good = last_good.last_good(datapath, &f.id.0);
    let lg = good
        .filter(|&(m, a)| **m != *src.matches || **a != *src.actions)
        .map(|(m, a)| (Arc::clone(m), Arc::clone(a)));
    let matches = src.matches.shared_or(good.map(|g| g.0));
    let actions = src.actions.shared_or(good.map(|g| g.1));
    Some(FlowMsg {
        egress: f.pipeline == Pipeline::Egress,
        table: f.table,
        priority: f.priority,
        matches,
        actions,
        id: f.id.0.clone(),
        stage: f.stage.clone(),
        sb_uuid: f.sb_uuid.clone(),
        stage_hint: f.stage_hint.clone(),
        last_good: lg,
    })
}

/// A flow text of the translation as a message takes it: the translation's own copy when the
/// translation holds it shared (`Arc<str>`), else the last good store's copy when that reads
/// the same (`known`), else a new one. Either way a text the store, the programs and the
/// translation all hold is held once where the types allow it.
trait SharedText {
    fn shared_or(&self, known: Option<&Arc<str>>) -> Arc<str>;
}

impl SharedText for String {
    fn shared_or(&self, known: Option<&Arc<str>>) -> Arc<str> {
        match known {
            Some(k) if **k == **self => Arc::clone(k),
            _ => Arc::from(&**self),
        }
    }
}

impl SharedText for Arc<str> {
    fn shared_or(&self, _: Option<&Arc<str>>) -> Arc<str> {
        Arc::clone(self)
    }
}

/// Whether two programs describe the same forwarding (everything but the generation and the
/// `nb_cfg` they were translated at).
pub fn same_content(a: &ProgramMsg, b: &ProgramMsg) -> bool {
    a.datapaths.len() == b.datapaths.len()
        && a.datapaths
            .iter()
            .zip(&b.datapaths)
            .all(|(x, y)| same_datapath(x, y))
        && same_outside_datapaths(a, b)
}

/// Equal datapath messages; one shared message is equal without a look at its flows.
fn same_datapath(x: &Arc<DatapathMsg>, y: &Arc<DatapathMsg>) -> bool {
    Arc::ptr_eq(x, y) || x == y
}

/// [`same_content`] for programs known to differ at most in the datapaths named in
/// `datapaths` (and outside datapaths): the other datapaths are compared by name and place
/// only, not flow by flow.
pub fn same_content_within(a: &ProgramMsg, b: &ProgramMsg, datapaths: &BTreeSet<String>) -> bool {
    a.datapaths.len() == b.datapaths.len()
        && a.datapaths
            .iter()
            .zip(&b.datapaths)
            .all(|(x, y)| x.name == y.name && (!datapaths.contains(&x.name) || same_datapath(x, y)))
        && same_outside_datapaths(a, b)
}

fn same_outside_datapaths(a: &ProgramMsg, b: &ProgramMsg) -> bool {
    a.chassis == b.chassis
        && a.zones == b.zones
        && a.chassis_table == b.chassis_table
        && a.neighbours == b.neighbours
        && a.address_sets == b.address_sets
        && a.port_groups == b.port_groups
        && a.fdb == b.fdb
        && a.lb_vips == b.lb_vips
        && a.switch_snat_zones == b.switch_snat_zones
        && a.dns == b.dns
        && a.owner == b.owner
        && a.feature_level == b.feature_level
        && a.no_last_good == b.no_last_good
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_pipeline::Activation;

    /// `same_port` agrees with `port_msg`, field by field: a message that differs from the
    /// built one in any one field is not the same port (so a shared port list is never
    /// stale), for each kind of location.
    #[test]
    fn a_port_is_the_same_only_as_its_own_message() {
        let locals: BTreeMap<u32, &str> = [(7, "iface-7")].into();
        let locations = [
            PortLocation::Local(7),
            PortLocation::Local(8),
            PortLocation::Remote { chassis: 3 },
            PortLocation::Patch {
                peer: "lr0-ls0".into(),
            },
            PortLocation::Redirect {
                port: "cr-lr0".into(),
            },
            PortLocation::Unbound,
        ];
        for location in locations {
            let p = PortSpec {
                name: "ls0-p0".into(),
                key: 5,
                location,
                zone: 9,
                kind: PortKind::Other("custom".into()),
                resident: true,
                also_remote: vec![2],
                activation: Some(Activation {
                    rarp: true,
                    garp: false,
                    na: false,
                }),
                addresses: vec!["0a:00:00:00:00:01 10.0.0.1".into()],
                port_security: vec!["0a:00:00:00:00:01".into()],
            };
            let m = port_msg(&p, &locals);
            assert!(same_port(&p, &m, &locals), "{m:?}");
            type Edit = Box<dyn Fn(&mut PortMsg)>;
            let edits: Vec<Edit> = vec![
                Box::new(|m| m.name.push('x')),
                Box::new(|m| m.key += 1),
                Box::new(|m| {
                    m.location = match &m.location {
                        LocationMsg::Unbound => LocationMsg::Remote(1),
                        _ => LocationMsg::Unbound,
                    }
                }),
                Box::new(|m| match &mut m.location {
                    LocationMsg::Local(s) | LocationMsg::Patch(s) | LocationMsg::Redirect(s) => {
                        s.push('x')
                    }
                    LocationMsg::Remote(c) => *c += 1,
                    LocationMsg::Unbound => m.location = LocationMsg::Local("x".into()),
                }),
                Box::new(|m| m.zone += 1),
                Box::new(|m| m.kind = "patch".into()),
                Box::new(|m| m.resident = !m.resident),
                Box::new(|m| m.also_remote.push(4)),
                Box::new(|m| m.activation = None),
                Box::new(|m| m.addresses.clear()),
                Box::new(|m| m.port_security.push("x".into())),
            ];
            for (i, edit) in edits.iter().enumerate() {
                let mut other = m.clone();
                edit(&mut other);
                assert!(!same_port(&p, &other, &locals), "edit {i}: {other:?}");
            }
        }
    }
}
