//! Port_Binding → [`PortSpec`]: where each port lives as seen from one chassis, whether
//! `is_chassis_resident()` holds for it, which further chassis get copies, and whether it waits
//! for activation.
//!
//! The rules (ovn-controller 23.03's `binding.c`/`physical.c`; without a chassis every port is
//! resident and local, as ovn-trace assumes):
//!
//! | type | bound where | seen from chassis C |
//! |---|---|---|
//! | `""` (VIF) | `chassis` (+ `additional_chassis`); unclaimed: `requested_chassis` (+ `requested_additional_chassis`) | local if C is one of them, else remote at the primary; copies to the others |
//! | `virtual` | `chassis` (set by `bind_vport`) | like a VIF, unbound until claimed |
//! | `external` | `chassis`; unclaimed: the highest-priority `ha_chassis_group` member | like a VIF |
//! | `patch` | everywhere | patch to `options:peer` |
//! | `l3gateway` | `options:l3gateway-chassis` | patch on that chassis, remote elsewhere |
//! | `l2gateway` | `options:l2gateway-chassis` | local on that chassis, remote elsewhere |
//! | `chassisredirect` | `chassis`; unclaimed: the highest-priority `ha_chassis_group` / `gateway_chassis` member | redirect to `options:distributed-port` there, remote elsewhere |
//! | `localnet` | every chassis (whose `ovn-bridge-mappings` name the network, when set) | local |
//! | `localport` | every chassis | local, never tunnelled |
//! | `vtep`, `remote`, others | not supported | unbound, with a diagnostic |
//!
//! A port bound here as an additional chassis with `options:activation-strategy` (a comma list
//! of `rarp`, `garp`, `na`; unknown names are diagnosed), and not listed in
//! `options:additional-chassis-activated`, starts inactive.
//!
//! `is_chassis_resident()` follows ovn-controller's `is_chassis_resident_cb`: a port is
//! resident where its (primary) `chassis` is (never for localnet, localport and patch ports,
//! which nobody claims), a `chassisredirect` port on the active (highest-priority) member of
//! its HA group, an `l3gateway` port on its gateway chassis. One deliberate difference: an
//! additional chassis listed in `options:additional-chassis-activated` is resident too (the VM
//! runs there now), so what follows the port (a distributed `dnat_and_snat`'s NAT and its ARP
//! answers) is applied where the port is active, not only where it was first bound. Until the
//! CMS names the destination alone, the source stays resident as well and forwards what still
//! reaches it (frames in flight, and what the provider network sends there until the
//! destination's announcement arrives) to the destination.
//!
//! [`MigrationSpec`]s list the local ports in a live migration (bound here and on another
//! chassis): the destination's source, the source's destinations, and what the destination
//! announces at activation (the `nat_addresses` entries of switch ports that are
//! `is_chassis_resident` on the port, out of their switch's `localnet` ports).

use std::collections::{BTreeMap, BTreeSet};

use hf_model::SbSnapshot;
use hf_model::sb;
use hf_pipeline::{Activation, GroupSpec, PortKind, PortLocation, PortSpec};
use uuid::Uuid;

use super::par::{self, Parallelism};
use super::{Diagnostic, Translation};

/// A local port in a live migration (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationSpec {
    /// The logical port.
    pub port: String,
    /// This chassis is the destination (an additional chassis).
    pub incoming: bool,
    /// The source (incoming) or the destinations, by chassis name.
    pub peers: Vec<String>,
    /// (MAC, IPv4 address, local port to send the gratuitous ARP by), at activation.
    pub announce: Vec<([u8; 6], String, String)>,
}

/// The value of `options:additional-chassis-activated`: chassis names.
pub(crate) fn activated_chassis(pb: &sb::PortBinding) -> Vec<&str> {
    pb.options
        .get("additional-chassis-activated")
        .map(|l| {
            l.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Where a port is, before local ids are numbered.
#[derive(Debug)]
enum Place {
    Local,
    Remote(u32),
    Patch(String),
    Redirect(String),
    Unbound,
}

/// The chassis a VIF-like port is bound to: primary, then additional.
pub(crate) fn binding(sb: &SbSnapshot, pb: &sb::PortBinding) -> (Option<Uuid>, Vec<Uuid>) {
    let kind = pb.type_.as_str();
    let primary = pb.chassis.map(|c| c.uuid()).or(match kind {
        "" => pb.requested_chassis.map(|c| c.uuid()),
        "external" | "chassisredirect" => ha_top(sb, pb),
        _ => None,
    });
    let mut additional: Vec<Uuid> = pb.additional_chassis.iter().map(|c| c.uuid()).collect();
    if additional.is_empty() && pb.chassis.is_none() && kind.is_empty() {
        additional = pb
            .requested_additional_chassis
            .iter()
            .map(|c| c.uuid())
            .collect();
    }
    additional.retain(|c| Some(*c) != primary);
    additional.sort();
    additional.dedup();
    (primary, additional)
}

/// The gateway of a `chassisredirect` port as this chassis sees it while BFD runs (`up`: the
/// chassis whose sessions are Up), for a group of two or more gateways: the first by priority
/// that is this chassis or is up, as ovn-controller's `ha_chassis_group_is_active` decides for
/// a gateway and OVS's `bundle(active_backup)` for the others. A gateway that reaches no other
/// chassis does not count itself (it may be the one cut off), nor one whose other gateways are
/// all down and that reaches none of the group's `ref_chassis` (a session up to some other
/// group's chassis is not enough). `None`: the static choice
/// applies (BFD not running, or fewer than two gateways); `Some(None)`: no gateway is alive.
pub(crate) fn ha_live_top(
    sb: &SbSnapshot,
    pb: &sb::PortBinding,
    here: Option<Uuid>,
    up: Option<&BTreeSet<String>>,
) -> Option<Option<Uuid>> {
    let up = up?;
    if pb.type_ != "chassisredirect" {
        return None;
    }
    let cands = ha_sorted(sb, pb);
    if cands.len() < 2 {
        return None;
    }
    // `ha_chassis_group_is_active`: with every other gateway down, this one is active only
    // if it still reaches one of the group's `ref_chassis` (else it may be the one cut off).
    let others_up = cands.iter().any(|c| Some(c.2) != here && up.contains(&c.1));
    let refs_up = || {
        pb.ha_chassis_group
            .and_then(|g| sb.get(g))
            .is_some_and(|g| {
                g.ref_chassis
                    .iter()
                    .filter_map(|r| sb.get(*r))
                    .any(|r| up.contains(&r.name))
            })
    };
    let alive_here = !up.is_empty() && (others_up || refs_up());
    let me = |c: &(i64, String, Uuid)| Some(c.2) == here && alive_here;
    Some(
        cands
            .iter()
            .find(|c| me(c) || up.contains(&c.1))
            .map(|c| c.2),
    )
}

/// Whether this chassis (`ours`) is the gateway of `pb` now: [`ha_live_top`], else [`ha_top`].
pub(crate) fn ha_active(
    sb: &SbSnapshot,
    pb: &sb::PortBinding,
    ours: Uuid,
    up: Option<&BTreeSet<String>>,
) -> bool {
    ha_live_top(sb, pb, Some(ours), up).unwrap_or_else(|| ha_top(sb, pb)) == Some(ours)
}

/// The highest-priority chassis of the port's HA chassis group (then gateway_chassis).
pub(crate) fn ha_top(sb: &SbSnapshot, pb: &sb::PortBinding) -> Option<Uuid> {
    ha_sorted(sb, pb).first().map(|c| c.2)
}

/// The port's gateways (HA chassis group, else gateway_chassis): (priority, name, chassis),
/// highest priority first, ties by name.
fn ha_sorted(sb: &SbSnapshot, pb: &sb::PortBinding) -> Vec<(i64, String, Uuid)> {
    let named = |prio: i64, ch: Option<hf_model::RowRef<sb::Chassis>>| {
        let ch = ch?;
        Some((prio, sb.get(ch)?.name.clone(), ch.uuid()))
    };
    let mut cands: Vec<(i64, String, Uuid)> = pb
        .ha_chassis_group
        .and_then(|g| sb.get(g))
        .map(|g| {
            g.ha_chassis
                .iter()
                .filter_map(|h| sb.get(*h))
                .filter_map(|h| named(h.priority, h.chassis))
                .collect()
        })
        .unwrap_or_default();
    if cands.is_empty() {
        cands = pb
            .gateway_chassis
            .iter()
            .filter_map(|g| sb.get(*g))
            .filter_map(|g| named(g.priority, g.chassis))
            .collect();
    }
    // Highest priority wins; ties go to the lower name (deterministic).
    cands.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    cands
}

/// Every chassis of the port's HA chassis group and gateway_chassis rows.
fn ha_members(sb: &SbSnapshot, pb: &sb::PortBinding) -> Vec<Uuid> {
    let mut v: Vec<Uuid> = pb
        .ha_chassis_group
        .and_then(|g| sb.get(g))
        .map(|g| {
            g.ha_chassis
                .iter()
                .filter_map(|h| sb.get(*h)?.chassis.map(|c| c.uuid()))
                .collect()
        })
        .unwrap_or_default();
    v.extend(
        pb.gateway_chassis
            .iter()
            .filter_map(|g| sb.get(*g)?.chassis.map(|c| c.uuid())),
    );
    v
}

/// Whether `pb` makes its datapath local to chassis `ch` (named `name`).
pub(crate) fn bound_on(sb: &SbSnapshot, pb: &sb::PortBinding, ch: Uuid, name: &str) -> bool {
    match pb.type_.as_str() {
        "" | "virtual" => {
            let (p, a) = binding(sb, pb);
            p == Some(ch) || a.contains(&ch)
        }
        "external" => binding(sb, pb).0 == Some(ch) || ha_members(sb, pb).contains(&ch),
        // Standby gateways of an HA group need the datapaths too (ovn-controller's
        // binding.c adds them for every member, so failover needs no new datapaths).
        "chassisredirect" => binding(sb, pb).0 == Some(ch) || ha_members(sb, pb).contains(&ch),
        "l3gateway" => pb.options.get("l3gateway-chassis").map(String::as_str) == Some(name),
        "l2gateway" => pb.options.get("l2gateway-chassis").map(String::as_str) == Some(name),
        _ => false,
    }
}

/// What placing a port needs to know about the chassis (computed once per translation).
pub(crate) struct PortCtx<'a> {
    /// Chassis UUID → id of the chassis table.
    ids: BTreeMap<Uuid, u32>,
    /// The chassis whose BFD sessions are up, while BFD runs ([`ha_live_top`]).
    pub(crate) ha_up: Option<&'a BTreeSet<String>>,
    /// Our chassis row's UUID.
    here: Option<Uuid>,
    here_row: Option<&'a sb::Chassis>,
    chassis: Option<&'a str>,
}

impl<'a> PortCtx<'a> {
    /// The context for `chassis`, whose chassis table `t.chassis` already holds.
    pub(crate) fn new(sb: &'a SbSnapshot, chassis: Option<&'a str>, t: &Translation) -> Self {
        let ids: BTreeMap<Uuid, u32> = sb
            .chassis()
            .values()
            .filter_map(|c| t.chassis_by_name(&c.name).map(|e| (c.uuid, e.id)))
            .collect();
        let here: Option<Uuid> = chassis.and_then(|c| sb.chassis_by_name(c)).map(|c| c.uuid);
        let here_row = here.and_then(|u| sb.chassis().get(&u));
        PortCtx {
            ids,
            ha_up: None,
            here,
            here_row,
            chassis,
        }
    }
}

/// One datapath's ports, in (tunnel key, UUID) order, with whether each is local here (its
/// location is `Local(0)` until [`assign_local`] numbers it); diagnostics go to `diags`.
pub(crate) fn dp_ports(
    sb: &SbSnapshot,
    ctx: &PortCtx<'_>,
    dp_uuid: Uuid,
    index: &BTreeMap<Uuid, usize>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<(PortSpec, bool)> {
    let mut out = Vec::new();
    let mut pbs: Vec<&sb::PortBinding> = sb.port_binding_all_by_datapath(dp_uuid.into()).collect();
    pbs.sort_by_key(|p| (p.tunnel_key, p.uuid));
    let mut seen_keys: BTreeMap<i64, &str> = BTreeMap::new();
    for pb in pbs {
        let diag = |reason: String| Diagnostic {
            table: "Port_Binding",
            uuid: pb.uuid,
            reason: format!("logical port {}: {reason}", pb.logical_port),
        };
        if !(1..=(1 << 15) - 1).contains(&pb.tunnel_key) {
            diags.push(diag(format!(
                "tunnel_key {} is outside Geneve's 15-bit port range 1..=32767",
                pb.tunnel_key
            )));
            continue;
        }
        if let Some(other) = seen_keys.insert(pb.tunnel_key, &pb.logical_port) {
            diags.push(diag(format!(
                "tunnel_key {} is also used by {other} in the same datapath",
                pb.tunnel_key
            )));
            continue;
        }
        let kind = PortKind::from_sb(&pb.type_);
        let chassis_id = |u: Uuid| ctx.ids.get(&u).copied();
        let (place, resident, also, activation) = match ctx.chassis {
            None => place_everywhere(pb, &kind),
            Some(name) => place_on(
                sb,
                pb,
                &kind,
                ctx.ha_up,
                ctx.here,
                name,
                ctx.here_row,
                &chassis_id,
                &mut |r| diags.push(diag(r)),
            ),
        };
        if let PortKind::Vtep | PortKind::Remote | PortKind::Other(_) = kind {
            diags.push(diag(format!(
                "port type \"{}\" is not supported: treated as unbound",
                pb.type_
            )));
        }
        let place = match place {
            // A router port nothing is connected to (northd writes no options:peer): as
            // in ovn-controller, output to it goes nowhere; nothing is wrong with the row.
            Place::Patch(peer) if peer.is_empty() => Place::Unbound,
            Place::Patch(peer) if sb.port_binding_by_logical_port(&peer).is_none() => {
                diags.push(diag(format!(
                    "options:peer names {peer}, which has no Port_Binding: treated as unbound"
                )));
                Place::Unbound
            }
            Place::Patch(peer)
                if sb
                    .port_binding_by_logical_port(&peer)
                    .is_some_and(|p| !index.contains_key(&p.datapath.uuid())) =>
            {
                // The peer's datapath is not translated (not needed here).
                Place::Unbound
            }
            Place::Redirect(d) if d.is_empty() => {
                diags.push(diag(
                    "has no options:distributed-port: treated as unbound".into(),
                ));
                Place::Unbound
            }
            Place::Redirect(d)
                if !sb
                    .port_binding_all_by_datapath(dp_uuid.into())
                    .any(|p| p.logical_port == d) =>
            {
                diags.push(diag(format!(
                    "options:distributed-port names {d}, which is not in this datapath: \
                     treated as unbound"
                )));
                Place::Unbound
            }
            p => p,
        };
        let local = matches!(place, Place::Local);
        out.push((
            PortSpec {
                name: pb.logical_port.clone(),
                key: pb.tunnel_key as u32,
                location: match place {
                    Place::Local => PortLocation::Local(0),
                    Place::Remote(c) => PortLocation::Remote { chassis: c },
                    Place::Patch(peer) => PortLocation::Patch { peer },
                    Place::Redirect(port) => PortLocation::Redirect { port },
                    Place::Unbound => PortLocation::Unbound,
                },
                zone: 0,
                kind,
                resident,
                also_remote: also,
                activation,
                addresses: pb.mac.iter().cloned().collect(),
                port_security: pb.port_security.iter().cloned().collect(),
            },
            local,
        ));
    }
    out
}

/// Local port ids for the local port `names`, keeping the ids of `keep` (name → id, e.g. the
/// previous translation's [`super::Translation::local_ports`]): a name in `keep` keeps its id
/// when it is not 0 and no name before it (in name order) kept the same id; every other name
/// gets the lowest id that is neither kept nor named in `keep` (a name gone from `names`
/// still holds its id until the caller drops it from `keep`), in name order. A function of
/// the inputs only, whatever order they came in; with `keep` empty, 1.. in name order.
///
/// So a port added or removed changes no other port's id, and an id freed by a removed port
/// is reused only by a later call whose `keep` no longer names it (the controller passes the
/// previous translation's ids, so never by the translation that removed the port). The ids
/// never leave the controller: its program message names local ports
/// ([`hf_datapath::proto::LocationMsg::Local`]) and the datapath numbers its interfaces
/// itself, so no frame or flow of a datapath carries one.
pub(crate) fn assign_local<'n>(
    names: impl Iterator<Item = &'n String>,
    keep: &BTreeMap<String, u32>,
) -> BTreeMap<String, u32> {
    let set: std::collections::BTreeSet<&String> = names.collect();
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    let mut taken: std::collections::HashSet<u32> = std::collections::HashSet::new();
    for n in &set {
        if let Some(&id) = keep.get(*n)
            && id != 0
            && taken.insert(id)
        {
            out.insert((*n).clone(), id);
        }
    }
    let reserved: std::collections::HashSet<u32> = keep.values().copied().collect();
    let mut next: u32 = 1;
    for n in set {
        if out.contains_key(n) {
            continue;
        }
        while reserved.contains(&next) || taken.contains(&next) {
            next = next.saturating_add(1);
        }
        taken.insert(next);
        out.insert(n.clone(), next);
    }
    out
}

/// Gives the local ports of `ports` their ids from `local_ports`; whether any changed.
pub(crate) fn set_local_ids(
    ports: &mut [PortSpec],
    local: &[bool],
    local_ports: &BTreeMap<String, u32>,
) -> bool {
    let mut changed = false;
    for (p, l) in ports.iter_mut().zip(local) {
        if !*l {
            continue;
        }
        let loc = match local_ports.get(&p.name) {
            Some(&id) => PortLocation::Local(id),
            None => PortLocation::Unbound,
        };
        if p.location != loc {
            p.location = loc;
            changed = true;
        }
    }
    changed
}

/// Fills the ports and multicast groups of `t.spec.datapaths`; local port ids keep those of
/// `local_keep` ([`assign_local`]).
pub(crate) fn translate_ports(
    sb: &SbSnapshot,
    chassis: Option<&str>,
    ha_up: Option<&BTreeSet<String>>,
    local_keep: &BTreeMap<String, u32>,
    t: &mut Translation,
    marks: &mut Vec<usize>,
    par: Parallelism,
) {
    let mut ctx = PortCtx::new(sb, chassis, t);
    ctx.ha_up = ha_up;
    let index = t.datapath_index.clone();
    // Each datapath's ports (and their diagnostics) on `par`'s threads, put together in the
    // order of `index`.
    let dps: Vec<(Uuid, usize)> = index.iter().map(|(u, &i)| (*u, i)).collect();
    let done = par::map(par, &dps, |&(dp_uuid, _)| {
        let mut diags = Vec::new();
        let ports = dp_ports(sb, &ctx, dp_uuid, &index, &mut diags);
        (ports, diags)
    });
    let mut locals: Vec<(usize, Vec<bool>)> = Vec::new();
    for (&(_, dpi), (ports, diags)) in dps.iter().zip(done) {
        t.diagnostics.extend(diags);
        let (ports, local): (Vec<PortSpec>, Vec<bool>) = ports.into_iter().unzip();
        if let Some(d) = t.spec.datapaths.get_mut(dpi) {
            d.ports = ports;
            locals.push((dpi, local));
        }
    }
    t.local_ports = assign_local(
        locals.iter().flat_map(|(dpi, local)| {
            t.spec.datapaths[*dpi]
                .ports
                .iter()
                .zip(local)
                .filter(|(_, l)| **l)
                .map(|(p, _)| &p.name)
        }),
        local_keep,
    );
    for (dpi, local) in &locals {
        set_local_ids(&mut t.spec.datapaths[*dpi].ports, local, &t.local_ports);
    }
    marks.push(t.diagnostics.len());
    let datapaths = &t.spec.datapaths;
    let groups = par::map(par, &dps, |&(dp_uuid, dpi)| {
        let mut gdiags = Vec::new();
        let g = datapaths
            .get(dpi)
            .map(|d| dp_groups(sb, dp_uuid, d, &mut gdiags));
        (g, gdiags)
    });
    let mut gdiags = Vec::new();
    for (&(_, dpi), (g, diags)) in dps.iter().zip(groups) {
        gdiags.extend(diags);
        if let (Some(g), Some(d)) = (g, t.spec.datapaths.get_mut(dpi)) {
            d.groups = g;
        }
    }
    gdiags.sort_by_key(|(k, _)| *k);
    t.diagnostics.extend(gdiags.into_iter().map(|(_, d)| d));
    marks.push(t.diagnostics.len());
    if let (Some(h), Some(name)) = (ctx.here, chassis) {
        t.migrations = migrations(sb, h, name, t);
    }
}

/// The local VIF ports bound here and on another chassis (see the module docs).
pub(crate) fn migrations(
    sb: &SbSnapshot,
    here: Uuid,
    name: &str,
    t: &Translation,
) -> Vec<MigrationSpec> {
    let chassis_name = |u: Uuid| sb.chassis().get(&u).map(|c| c.name.clone());
    let mut out = Vec::new();
    for p in t.local_ports.keys() {
        let Some(pb) = sb.port_binding_by_logical_port(p) else {
            continue;
        };
        if !matches!(pb.type_.as_str(), "" | "virtual") {
            continue;
        }
        let (primary, additional) = binding(sb, pb);
        if additional.is_empty() {
            continue;
        }
        let (incoming, peers) = if additional.contains(&here) {
            (true, primary.into_iter().filter_map(chassis_name).collect())
        } else if primary == Some(here) {
            (
                false,
                additional.iter().filter_map(|u| chassis_name(*u)).collect(),
            )
        } else {
            continue;
        };
        let announce = if incoming {
            announcements(sb, p, name, t)
        } else {
            Vec::new()
        };
        out.push(MigrationSpec {
            port: p.clone(),
            incoming,
            peers,
            announce,
        });
    }
    out
}

/// The `nat_addresses` entries that follow `port` (`... is_chassis_resident("port")`), each
/// out of the local `localnet` ports of the switch that announces it.
fn announcements(
    sb: &SbSnapshot,
    port: &str,
    _chassis: &str,
    t: &Translation,
) -> Vec<([u8; 6], String, String)> {
    let cond = format!("is_chassis_resident(\"{port}\")");
    let mut out = Vec::new();
    for pb in sb.port_binding().values() {
        for entry in &pb.nat_addresses {
            if !entry.contains(&cond) {
                continue;
            }
            let mut words = entry.split_whitespace();
            let Some(mac) = words.next().and_then(super::flows::parse_mac) else {
                continue;
            };
            let ips: Vec<String> = words
                .take_while(|w| !w.starts_with("is_chassis_resident"))
                .filter(|w| w.parse::<std::net::Ipv4Addr>().is_ok())
                .map(str::to_string)
                .collect();
            let vias: Vec<String> = sb
                .port_binding_all_by_datapath(pb.datapath)
                .filter(|q| q.type_ == "localnet" && t.local_ports.contains_key(&q.logical_port))
                .map(|q| q.logical_port.clone())
                .collect();
            for ip in &ips {
                for via in &vias {
                    out.push((mac, ip.clone(), via.clone()));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

type Placed = (Place, bool, Vec<u32>, Option<Activation>);

fn place_everywhere(pb: &sb::PortBinding, kind: &PortKind) -> Placed {
    let peer = || pb.options.get("peer").cloned().unwrap_or_default();
    let place = match kind {
        PortKind::Patch | PortKind::L3Gateway => Place::Patch(peer()),
        PortKind::ChassisRedirect => Place::Redirect(
            pb.options
                .get("distributed-port")
                .cloned()
                .unwrap_or_default(),
        ),
        PortKind::Vtep | PortKind::Remote | PortKind::Other(_) => Place::Unbound,
        _ => Place::Local,
    };
    // ovn-trace's `is_chassis_resident()` holds for every port name.
    (place, true, Vec::new(), None)
}

#[allow(clippy::too_many_arguments)]
fn place_on(
    sb: &SbSnapshot,
    pb: &sb::PortBinding,
    kind: &PortKind,
    ha_up: Option<&BTreeSet<String>>,
    here: Option<Uuid>,
    name: &str,
    here_row: Option<&sb::Chassis>,
    chassis_id: &dyn Fn(Uuid) -> Option<u32>,
    diag: &mut dyn FnMut(String),
) -> Placed {
    let peer = || pb.options.get("peer").cloned().unwrap_or_default();
    let remote_at = |u: Option<Uuid>, diag: &mut dyn FnMut(String)| match u {
        Some(u) => match chassis_id(u) {
            Some(id) => Place::Remote(id),
            None => {
                diag(format!(
                    "bound to chassis {u}, which is not in the Chassis table"
                ));
                Place::Unbound
            }
        },
        None => Place::Unbound,
    };
    let by_name = |n: Option<&String>, diag: &mut dyn FnMut(String)| {
        let u = n.and_then(|n| sb.chassis_by_name(n)).map(|c| c.uuid);
        if u.is_none()
            && let Some(n) = n
        {
            diag(format!("chassis {n} is not in the Chassis table"));
        }
        remote_at(u, diag)
    };
    match kind {
        PortKind::Vif | PortKind::Virtual | PortKind::External => {
            let (primary, additional) = binding(sb, pb);
            let all: Vec<Uuid> = primary
                .into_iter()
                .chain(additional.iter().copied())
                .collect();
            let local = here.is_some_and(|h| all.contains(&h));
            let also: Vec<u32> = all
                .iter()
                .filter(|c| Some(**c) != here && (local || Some(**c) != primary))
                .filter_map(|c| chassis_id(*c))
                .collect();
            if local {
                let extra = here.is_some_and(|h| additional.contains(&h));
                let activated = activated_chassis(pb).contains(&name);
                let strategy = match pb.options.get("activation-strategy") {
                    Some(list) if extra => {
                        let (a, unknown) = Activation::parse(list);
                        for u in unknown {
                            diag(format!(
                                "options:activation-strategy names {u:?}, which is not rarp, garp or na: ignored"
                            ));
                        }
                        a
                    }
                    _ => None,
                };
                let activation = strategy.filter(|_| !activated);
                // ovn-controller's is_chassis_resident_cb (`Port_Binding.chassis`), plus an
                // additional chassis where the port has been activated (module docs).
                let resident = primary == here || (extra && activated);
                (Place::Local, resident, also, activation)
            } else {
                (remote_at(primary, diag), false, also, None)
            }
        }
        PortKind::Patch => (Place::Patch(peer()), false, Vec::new(), None),
        PortKind::L3Gateway | PortKind::L2Gateway => {
            let key = if *kind == PortKind::L3Gateway {
                "l3gateway-chassis"
            } else {
                "l2gateway-chassis"
            };
            let gw = pb.options.get(key);
            if gw.map(String::as_str) == Some(name) {
                let place = if *kind == PortKind::L3Gateway {
                    Place::Patch(peer())
                } else {
                    Place::Local
                };
                (place, true, Vec::new(), None)
            } else {
                (by_name(gw, diag), false, Vec::new(), None)
            }
        }
        PortKind::ChassisRedirect => {
            let (primary, _) = binding(sb, pb);
            let primary = ha_live_top(sb, pb, here, ha_up).unwrap_or(primary);
            if primary.is_some() && primary == here {
                let dgp = pb
                    .options
                    .get("distributed-port")
                    .cloned()
                    .unwrap_or_default();
                (Place::Redirect(dgp), true, Vec::new(), None)
            } else {
                (remote_at(primary, diag), false, Vec::new(), None)
            }
        }
        PortKind::Localnet => {
            let net = pb.options.get("network_name");
            // Without mappings (holdfast's controller registers an empty list: its datapath
            // has a port for each provider network it reaches, named like the localnet port)
            // every chassis has it.
            let mappings = here_row
                .and_then(|c| c.other_config.get("ovn-bridge-mappings"))
                .filter(|m| !m.trim().is_empty());
            let mapped = match mappings {
                None => true,
                Some(m) => net.is_some_and(|n| {
                    m.split(',')
                        .any(|e| e.split(':').next().map(str::trim) == Some(n.as_str()))
                }),
            };
            // Nobody claims a localnet or localport port (its `chassis` stays empty), so
            // is_chassis_resident() never holds for it.
            if mapped {
                (Place::Local, false, Vec::new(), None)
            } else {
                (Place::Unbound, false, Vec::new(), None)
            }
        }
        PortKind::Localport => (Place::Local, false, Vec::new(), None),
        _ => (Place::Unbound, false, Vec::new(), None),
    }
}

/// The multicast groups of one translated datapath `d` (SB UUID `dp`), in (tunnel key, UUID)
/// order; diagnostics go to `diags` keyed by the group's (tunnel key, UUID), the order
/// a full translation reports them in.
pub(crate) fn dp_groups(
    sb: &SbSnapshot,
    dp: Uuid,
    d: &hf_pipeline::DatapathSpec,
    diags: &mut Vec<((i64, Uuid), Diagnostic)>,
) -> Vec<GroupSpec> {
    let mut groups: Vec<&sb::MulticastGroup> =
        sb.multicast_group_all_by_datapath(dp.into()).collect();
    groups.sort_by_key(|g| (g.tunnel_key, g.uuid));
    let mut out: Vec<GroupSpec> = Vec::new();
    for g in groups {
        let key = (g.tunnel_key, g.uuid);
        if !((1 << 15)..=(1 << 16) - 1).contains(&g.tunnel_key) {
            diags.push((
                key,
                Diagnostic {
                    table: "Multicast_Group",
                    uuid: g.uuid,
                    reason: format!(
                        "group {}: tunnel_key {} is outside Geneve's multicast range 32768..=65535",
                        g.name, g.tunnel_key
                    ),
                },
            ));
            continue;
        }
        if d.ports.iter().any(|p| i64::from(p.key) == g.tunnel_key)
            || out.iter().any(|x| i64::from(x.key) == g.tunnel_key)
        {
            diags.push((
                key,
                Diagnostic {
                    table: "Multicast_Group",
                    uuid: g.uuid,
                    reason: format!(
                        "group {}: tunnel_key {} is already used in datapath {}",
                        g.name, g.tunnel_key, d.name
                    ),
                },
            ));
            continue;
        }
        let mut members: Vec<String> = Vec::new();
        for p in &g.ports {
            match sb.get(*p) {
                Some(pb) if pb.datapath == g.datapath => members.push(pb.logical_port.clone()),
                _ => diags.push((
                    key,
                    Diagnostic {
                        table: "Multicast_Group",
                        uuid: g.uuid,
                        reason: format!(
                            "group {}: member {} is not a port of its datapath: left out",
                            g.name,
                            p.uuid()
                        ),
                    },
                )),
            }
        }
        members.sort();
        out.push(GroupSpec {
            name: g.name.clone(),
            key: g.tunnel_key as u32,
            members,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use hf_model::{RowRef, SbSnapshot, sb};
    use uuid::Uuid;

    use super::{assign_local, ha_live_top};

    /// gw1 (20) and gw2 (10) for cr-x, hv1 in the group's `ref_chassis`; hv9 a chassis of
    /// nothing here.
    fn ha_view() -> (SbSnapshot, sb::PortBinding) {
        use hf_model::RowDelta;
        let mut d = hf_model::SbDelta::default();
        for (n, name) in [(1, "gw1"), (2, "gw2"), (3, "hv1"), (9, "hv9")] {
            d.chassis.push(RowDelta::Insert(sb::Chassis {
                uuid: Uuid::from_u128(n),
                name: name.into(),
                ..Default::default()
            }));
        }
        let mut g = sb::HaChassisGroup {
            uuid: Uuid::from_u128(50),
            name: "x".into(),
            ..Default::default()
        };
        for (n, prio) in [(1u128, 20), (2, 10)] {
            d.ha_chassis.push(RowDelta::Insert(sb::HaChassis {
                uuid: Uuid::from_u128(40 + n),
                chassis: Some(RowRef::new(Uuid::from_u128(n))),
                priority: prio,
                ..Default::default()
            }));
            g.ha_chassis.insert(RowRef::new(Uuid::from_u128(40 + n)));
        }
        g.ref_chassis.insert(RowRef::new(Uuid::from_u128(3)));
        d.ha_chassis_group.push(RowDelta::Insert(g));
        let pb = sb::PortBinding {
            uuid: Uuid::from_u128(60),
            logical_port: "cr-x".into(),
            type_: "chassisredirect".into(),
            ha_chassis_group: Some(RowRef::new(Uuid::from_u128(50))),
            ..Default::default()
        };
        d.port_binding.push(RowDelta::Insert(pb.clone()));
        let mut view = SbSnapshot::default();
        view.apply(&d);
        (view, pb)
    }

    #[test]
    fn a_gateway_left_alone_is_active_only_if_it_reaches_a_ref_chassis() {
        let (sb, pb) = ha_view();
        let gw2 = Some(Uuid::from_u128(2));
        let up = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        // gw1 up: gw1 is first.
        let s = up(&["gw1", "hv1"]);
        assert_eq!(
            ha_live_top(&sb, &pb, gw2, Some(&s)),
            Some(Some(Uuid::from_u128(1)))
        );
        // gw1 down, hv1 (a ref_chassis) up: gw2 takes over.
        let s = up(&["hv1"]);
        assert_eq!(ha_live_top(&sb, &pb, gw2, Some(&s)), Some(gw2));
        // gw1 down and only a chassis outside the group up: ha_chassis_group_is_active says
        // no (it may be gw2 that is cut off from the group's chassis).
        let s = up(&["hv9"]);
        assert_eq!(ha_live_top(&sb, &pb, gw2, Some(&s)), Some(None));
        // Nothing up: not active.
        let s = up(&[]);
        assert_eq!(ha_live_top(&sb, &pb, gw2, Some(&s)), Some(None));
        // A chassis that is no gateway follows the first live gateway.
        let s = up(&["gw2"]);
        let hv1 = Some(Uuid::from_u128(3));
        assert_eq!(ha_live_top(&sb, &pb, hv1, Some(&s)), Some(gw2));
    }

    fn ids(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(n, i)| (n.to_string(), *i)).collect()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn kept_ids_stay_and_new_ports_take_free_ones() {
        // Without ids to keep: 1.. in name order, whatever order the names come in.
        let n = names(&["c", "a", "b", "a"]);
        assert_eq!(
            assign_local(n.iter(), &BTreeMap::new()),
            ids(&[("a", 1), ("b", 2), ("c", 3)])
        );
        // Kept ids stay; a gone name's id (b = 2) is not given to a new name while it is
        // kept; new names take the lowest free ids in name order.
        let keep = ids(&[("a", 1), ("b", 2), ("c", 3)]);
        let n = names(&["c", "a", "e", "d"]);
        assert_eq!(
            assign_local(n.iter(), &keep),
            ids(&[("a", 1), ("c", 3), ("d", 4), ("e", 5)])
        );
        // Once b is no longer kept, its id is free again.
        let keep = ids(&[("a", 1), ("c", 3), ("e", 5)]);
        let n = names(&["a", "c", "e", "f"]);
        assert_eq!(
            assign_local(n.iter(), &keep),
            ids(&[("a", 1), ("c", 3), ("e", 5), ("f", 2)])
        );
        // An id kept twice stays with the first name (name order); 0 is never kept.
        let keep = ids(&[("x", 4), ("y", 4), ("z", 0)]);
        let n = names(&["z", "y", "x"]);
        assert_eq!(
            assign_local(n.iter(), &keep),
            ids(&[("x", 4), ("y", 1), ("z", 2)])
        );
    }
}
