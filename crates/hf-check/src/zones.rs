//! `zone-risk` (incident D): conntrack zone identities at risk.
//!
//! From NB: `Logical_Router options:snat-ct-zone`, the only zone request OVN 23.03 has
//! (northd copies it into `Datapath_Binding.external_ids:snat-ct-zone`; `ovn-controller` has no
//! per-port request, it allocates port zones itself). Zone 0 requested is a warning: holdfast
//! refuses it and allocates `lr/<name>/snat` by name, but a real `ovn-controller` would use
//! zone 0, the host's, and flush it after a database rebuild (incident D). Two routers
//! requesting the same zone (real `ovn-controller` gives it to both: shared state), and a value
//! that is not a zone, are warnings too.
//!
//! From SB: a chassis that reports `Chassis_Private.external_ids:holdfast-zone-error` (a
//! holdfast controller that ran out of zones: it keeps its running program and installs no
//! change until zones are freed) is an error.
//!
//! From live datapaths ([`crate::LiveDatapath`], a `holdfast datapath`'s `ct-zone-list`): zone
//! 0 in the map, and one zone used by two names, are errors (the datapath shares conntrack
//! state between them, or with the host, now).
//!
//! What it does not do: read a real `ovn-controller`'s zone map (OVS `Bridge
//! external_ids:ct-zone-*`); it never talks to controllers.

use std::collections::BTreeMap;

use hf_model::{NbSnapshot, SbSnapshot};

use crate::{Code, Finding, LiveDatapath, Severity, Source};

/// The `Chassis_Private.external_ids` key a holdfast controller reports zone exhaustion under
/// (`hf_controller::daemon::chassis::ZONE_ERROR_KEY`; written here, not imported, so check
/// needs no controller).
pub const ZONE_ERROR_KEY: &str = "holdfast-zone-error";

/// Adds the findings.
pub fn check(nb: &NbSnapshot, sb: &SbSnapshot, live: &[LiveDatapath], out: &mut Vec<Finding>) {
    let mut reports: Vec<_> = sb
        .chassis_private()
        .values()
        .filter_map(|c| c.external_ids.get(ZONE_ERROR_KEY).map(|e| (c, e)))
        .collect();
    reports.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    for (c, e) in reports {
        out.push(Finding {
            code: Code::ZoneRisk,
            severity: Severity::Error,
            source: Source::Sb,
            table: "Chassis_Private".into(),
            row: c.uuid.to_string(),
            name: c.name.clone(),
            message: format!("chassis {} reports {ZONE_ERROR_KEY}={e}", c.name),
            why: "a chassis without a free conntrack zone installs no change at all (it keeps its running program rather than run conntrack without a zone), so new ports and every other change wait".into(),
            fix: "delete what is no longer needed on that chassis (zones of deleted objects are freed after their grace), or spread the ports over more chassis".into(),
        });
    }

    let mut requested: BTreeMap<u16, Vec<(&str, uuid::Uuid)>> = BTreeMap::new();
    for lr in nb.logical_router().values() {
        let Some(z) = lr.options.get("snat-ct-zone") else {
            continue;
        };
        let name = format!("{} options:snat-ct-zone={z}", lr.name);
        match z.trim().parse::<u16>() {
            Ok(0) => out.push(Finding {
                code: Code::ZoneRisk,
                severity: Severity::Warning,
                source: Source::Nb,
                table: "Logical_Router".into(),
                row: lr.uuid.to_string(),
                name,
                message: format!(
                    "router {} requests conntrack zone 0 for its SNAT: holdfast refuses zone 0, the host's; it allocates lr/{}/snat by name instead; real ovn-controller would use and flush zone 0 after a DB rebuild (incident D)",
                    lr.name, lr.name
                ),
                why: "flushing zone 0 drops the conntrack state of every host connection that is not in a container, so established traffic breaks for tens of seconds".into(),
                fix: format!(
                    "remove the request (`ovn-nbctl remove Logical_Router {} options snat-ct-zone`) or request a zone other than 0",
                    lr.name
                ),
            }),
            Ok(n) => requested.entry(n).or_default().push((&lr.name, lr.uuid)),
            Err(_) => out.push(Finding {
                code: Code::ZoneRisk,
                severity: Severity::Warning,
                source: Source::Nb,
                table: "Logical_Router".into(),
                row: lr.uuid.to_string(),
                name,
                message: format!(
                    "router {} requests conntrack zone \"{z}\", which is not a zone 1..65535; it is ignored and a zone is allocated",
                    lr.name
                ),
                why: "the CMS believes the router's SNAT state lives in a zone it chose, but it does not".into(),
                fix: format!(
                    "set a number 1..65535 or remove it (`ovn-nbctl remove Logical_Router {} options snat-ct-zone`)",
                    lr.name
                ),
            }),
        }
    }
    for (zone, routers) in &requested {
        if routers.len() < 2 {
            continue;
        }
        let names: Vec<&str> = routers.iter().map(|(n, _)| *n).collect();
        let Some((first, uuid)) = routers.first() else {
            continue;
        };
        out.push(Finding {
            code: Code::ZoneRisk,
            severity: Severity::Warning,
            source: Source::Nb,
            table: "Logical_Router".into(),
            row: uuid.to_string(),
            name: format!("{first} options:snat-ct-zone={zone}"),
            message: format!(
                "routers {} all request conntrack zone {zone} for their SNAT",
                names.join(", ")
            ),
            why: "on a chassis that runs both, real ovn-controller gives both the zone, so their SNAT state shares one conntrack table; holdfast gives it to the first by name and allocates the others elsewhere, so the CMS's choice does not hold".into(),
            fix: "give each router its own zone, or remove the requests and let zones be allocated by name".into(),
        });
    }
    for dp in live {
        let mut by_zone: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
        for (name, zone) in &dp.zones {
            by_zone.entry(*zone).or_default().push(name);
        }
        for (zone, names) in &by_zone {
            let list = names.join(", ");
            let (message, why, fix) = if *zone == 0 {
                (
                    format!("the datapath's zone map gives zone 0, the host's, to {list}"),
                    "conntrack state of the host and of these objects mixes, and a flush of either breaks the other's connections (incident D)",
                    "restart the datapath's controller so it reallocates by name (it never allocates zone 0), or remove the entry from the datapath's --zones-file while it is stopped",
                )
            } else if names.len() > 1 {
                (
                    format!("zone {zone} is used by {} names: {list}", names.len()),
                    "their connections share one conntrack table, so a flush for one breaks the others and their entries can collide",
                    "restart the controller so it reconciles the zone map by name, or correct the datapath's --zones-file while it is stopped",
                )
            } else {
                continue;
            };
            out.push(Finding {
                code: Code::ZoneRisk,
                severity: Severity::Error,
                source: Source::Datapath,
                table: "zone map".into(),
                row: dp.name.clone(),
                name: list,
                message,
                why: why.into(),
                fix: fix.into(),
            });
        }
    }
}
