//! Conntrack zones by stable name (DESIGN "Conntrack zones", `docs/zones.md`): `lsp/<port>`
//! for every switch port, `ls/<switch>/snat` for every switch (where `ct_snat_to_vip` commits
//! hairpin SNAT), `lr/<router>/dnat` and `lr/<router>/snat` for every router. Never zone 0
//! (the host's). A router's `snat-ct-zone` (northd copies `options:snat-ct-zone` into
//! `Datapath_Binding.external_ids`) is honoured first when it is 1..=65535; 0 (OVN-Kubernetes's
//! gateway routers ask for the host's zone) or anything else is a diagnostic naming the router,
//! and the name gets a zone like any other. Assignments passed in are kept next when their zone
//! is valid and not taken twice; the other names get the lowest free zones in name order, so
//! the result is a function of the inputs only. Names that no longer exist are dropped from the
//! returned map (the caller decides when a zone may be flushed), but their kept numbers are not
//! reused for new names.
//!
//! When every zone is taken, a name that needs one gets none: a [`EXHAUSTED`] diagnostic per
//! name, its objects keep zone 0 in the spec as "none", and [`unzoned`] lists them, so the
//! caller refuses the translation (the controller keeps its running program; a datapath
//! refuses a switch port in zone 0 anyway). Nothing falls back to zone 0.

use std::collections::{BTreeMap, BTreeSet};

use hf_pipeline::DatapathKind;

use super::{Diagnostic, Translation};

/// The name of the diagnostic for a zone that could not be allocated (every zone is taken).
pub const EXHAUSTED: &str = "zone-exhausted";

/// The zone names of objects of `t` that have no zone (zones were exhausted, see
/// [`EXHAUSTED`]): their conntrack actions would have no zone, so a controller must not push
/// a program built from `t` (it fails closed and keeps the running one).
pub fn unzoned(t: &Translation) -> Vec<String> {
    let mut out = Vec::new();
    for d in &t.spec.datapaths {
        match d.kind {
            DatapathKind::Router { .. } => {
                let (a, b) = router_zone_names(&d.name);
                out.extend([a, b].into_iter().filter(|n| !t.zones.contains_key(n)));
            }
            _ => {
                let s = switch_snat_zone_name(&d.name);
                if !t.zones.contains_key(&s) {
                    out.push(s);
                }
                out.extend(
                    d.ports
                        .iter()
                        .map(|p| port_zone_name(&p.name))
                        .filter(|n| !t.zones.contains_key(n)),
                );
            }
        }
    }
    out
}

/// The zone name of a switch port.
pub fn port_zone_name(port: &str) -> String {
    format!("lsp/{port}")
}

/// The SNAT zone name of a switch (`ct_snat_to_vip`).
pub fn switch_snat_zone_name(switch: &str) -> String {
    format!("ls/{switch}/snat")
}

/// The DNAT (common) and SNAT zone names of a router.
pub fn router_zone_names(router: &str) -> (String, String) {
    (format!("lr/{router}/dnat"), format!("lr/{router}/snat"))
}

/// `external_ids:snat-ct-zone` that northd copies from a router's `options:snat-ct-zone`.
pub(crate) fn requested(sb: &hf_model::SbSnapshot, t: &mut Translation) -> BTreeMap<String, u16> {
    let mut out = BTreeMap::new();
    for (uuid, &i) in &t.datapath_index {
        let Some(d) = sb.datapath_binding().get(uuid) else {
            continue;
        };
        let Some(z) = d.external_ids.get("snat-ct-zone") else {
            continue;
        };
        let Some(dp) = t.spec.datapaths.get(i) else {
            continue;
        };
        let snat = router_zone_names(&dp.name).1;
        match z.trim().parse::<u16>() {
            Ok(n) if n != 0 => {
                out.insert(snat, n);
            }
            Ok(_) => t.diagnostics.push(Diagnostic {
                table: "Datapath_Binding",
                uuid: *uuid,
                reason: format!(
                    "router {} asks for conntrack zone 0 (options:snat-ct-zone=0), the host's \
                     zone, which holdfast never allocates or flushes: its SNAT zone {snat} gets \
                     a zone by name instead, kept across restarts and database rebuilds (to \
                     choose the number, set options:snat-ct-zone to 1..=65535)",
                    dp.name
                ),
            }),
            Err(_) => t.diagnostics.push(Diagnostic {
                table: "Datapath_Binding",
                uuid: *uuid,
                reason: format!(
                    "router {}: options:snat-ct-zone=\"{z}\" is not a zone number 1..=65535: \
                     its SNAT zone {snat} gets a zone by name instead",
                    dp.name
                ),
            }),
        }
    }
    out
}

/// Assigns zones: `requested` first (a CMS's explicit choice), then `keep`, then the lowest
/// free ones. Returns the indexes of the datapaths whose ports' or router's zones changed
/// (a translation made afresh starts with zone 0 everywhere).
pub(crate) fn assign(
    t: &mut Translation,
    requested: &BTreeMap<String, u16>,
    keep: &BTreeMap<String, u16>,
) -> BTreeSet<usize> {
    let mut changed = BTreeSet::new();
    t.spec.switch_snat_zones.clear();
    let mut wanted: BTreeSet<String> = BTreeSet::new();
    for d in &t.spec.datapaths {
        match d.kind {
            DatapathKind::Router { .. } => {
                let (a, b) = router_zone_names(&d.name);
                wanted.insert(a);
                wanted.insert(b);
            }
            _ => {
                wanted.insert(switch_snat_zone_name(&d.name));
                for p in &d.ports {
                    wanted.insert(port_zone_name(&p.name));
                }
            }
        }
    }
    let mut zones: BTreeMap<String, u16> = BTreeMap::new();
    let mut used: BTreeSet<u16> = BTreeSet::new();
    let mut by_request: BTreeMap<u16, &String> = BTreeMap::new();
    for (name, &z) in requested {
        if !wanted.contains(name) {
            continue;
        }
        if let Some(first) = by_request.get(&z) {
            t.diagnostics.push(Diagnostic {
                table: "Datapath_Binding",
                uuid: uuid::Uuid::nil(),
                reason: format!(
                    "{name}: options:snat-ct-zone={z} is also requested for {first}, which \
                     keeps it: {name} gets a zone by name instead (give each router its own \
                     number)"
                ),
            });
            continue;
        }
        used.insert(z);
        by_request.insert(z, name);
        zones.insert(name.clone(), z);
    }
    for (name, &z) in keep {
        if z == 0 || !wanted.contains(name) || zones.contains_key(name) {
            continue;
        }
        if used.insert(z) {
            zones.insert(name.clone(), z);
        } else if let Some(r) = by_request.get(&z) {
            t.diagnostics.push(Diagnostic {
                table: "Datapath_Binding",
                uuid: uuid::Uuid::nil(),
                reason: format!(
                    "{name} held zone {z}, which {r} now requests (options:snat-ct-zone={z}): \
                     {name} moves to another zone and its connections' conntrack entries stay \
                     behind in zone {z}"
                ),
            });
        }
    }
    // Kept names the translation no longer has still hold their zones (the controller keeps
    // them until their object is really gone): their numbers are not handed to new names.
    for (name, &z) in keep {
        if !wanted.contains(name) {
            used.insert(z);
        }
    }
    let mut next: u32 = 1;
    for name in &wanted {
        if zones.contains_key(name) {
            continue;
        }
        while next <= u32::from(u16::MAX) && used.contains(&(next as u16)) {
            next += 1;
        }
        if next > u32::from(u16::MAX) {
            t.diagnostics.push(Diagnostic {
                table: "Datapath_Binding",
                uuid: uuid::Uuid::nil(),
                reason: format!(
                    "{EXHAUSTED}: no conntrack zone left for {name} (zones 1..=65535 are all \
                     held; zone 0 is the host's and is never used instead): a program with it \
                     is not pushed, the running one stays (delete unused ports, switches or \
                     routers to free zones)"
                ),
            });
            continue;
        }
        zones.insert(name.clone(), next as u16);
        used.insert(next as u16);
    }
    for (i, d) in t.spec.datapaths.iter_mut().enumerate() {
        match &mut d.kind {
            DatapathKind::Router {
                dnat_zone,
                snat_zone,
            } => {
                let (a, b) = router_zone_names(&d.name);
                let (za, zb) = (
                    zones.get(&a).copied().unwrap_or(0),
                    zones.get(&b).copied().unwrap_or(0),
                );
                if (*dnat_zone, *snat_zone) != (za, zb) {
                    changed.insert(i);
                }
                *dnat_zone = za;
                *snat_zone = zb;
            }
            _ => {
                for p in &mut d.ports {
                    let z = zones.get(&port_zone_name(&p.name)).copied().unwrap_or(0);
                    if p.zone != z {
                        p.zone = z;
                        changed.insert(i);
                    }
                }
                if let Some(&z) = zones.get(&switch_snat_zone_name(&d.name)) {
                    t.spec.switch_snat_zones.push((d.name.clone(), z));
                }
            }
        }
    }
    t.zones = zones;
    changed
}
