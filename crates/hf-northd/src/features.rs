//! Feature negotiation (incident B, DESIGN "The control-plane/data-plane contract"): from the
//! SB `Chassis` rows to the one [`FeatureSet`] northd may emit, the chassis it cannot serve, and
//! the datapaths whose flows must stay as they are.
//!
//! The daemon's entry point is [`negotiate`], a pure function of a lean SB view
//! ([`SbChassisView`]: chassis names, UUIDs and `other_config`, and which chassis each port is
//! bound on), the NB and a [`Policy`]. Its [`Negotiated`] goes into the compile through
//! [`Negotiated::apply`] (the render feature set, [`crate::Options::frozen_datapaths`] and the
//! chassis diagnostics), and its [`Negotiated::report`] is what the daemon writes for operators.
//!
//! Rules:
//! - A chassis with `other_config:holdfast-features` (a comma list of hf-expr feature names
//!   and levels, `FeatureSet` syntax) has exactly those features. A level newer than this
//!   northd knows (`hf-9`) means every feature it knows; other names it does not know (a
//!   newer controller's features) are ignored with a diagnostic.
//! - A chassis without it is a real `ovn-controller`, taken at OVN's own flags in
//!   `other_config` ([`OVN_FLAGS`]): its base is the OVN release the newest flag it sets
//!   implies (20.06, holdfast level `hf-1`, when it sets none: releases before 21.03 set no
//!   flag, so no flag means "assume the oldest served"), and each flag it does not set removes
//!   the registry features that flag gates (OVN 23.03's northd gates `ct_lb_mark` and
//!   `ct_mark.*` on `ct-no-masked-label`, `ct_commit_nat` and the `ct_lb` NAT flags on
//!   `ovn-ct-lb-related`).
//! - A chassis with `other_config:is-remote=true` (an interconnection gateway's view of a
//!   chassis in another zone) runs none of this northd's flows and is not counted.
//! - The common set is the intersection over the counted chassis; every feature when there is
//!   none. `NB_Global options:ignore_chassis_features=true` makes it every feature regardless.
//! - A chassis whose set does not cover [`Policy::oldest`] is *unsupported*: it is left out of
//!   the intersection (it must not hold every other chassis back), reported (one diagnostic
//!   naming its `Chassis` row, and [`Negotiated::report`]), and every datapath it executes —
//!   those with a port bound on it (`Port_Binding.chassis`/`additional_chassis`) and every
//!   datapath connected to those through router ports, as `ovn-controller` computes its local
//!   datapaths — is frozen: the sync keeps the flows SB already has for them (fail closed).
//!
//! Where operators see unsupported chassis: `NB_Global.external_ids` keys
//! `holdfast-unsupported-chassis:<chassis name>` = the reason ([`REPORT_PREFIX`]). NB is chosen
//! over `Chassis_Private` because a controller below `hf-1` (OVN ≤ 20.06) never creates a
//! `Chassis_Private` row, and the CMS reads NB. The daemon sets the keys [`Negotiated::report`]
//! returns and removes other keys with the prefix (mutate, so it never touches other keys).
//!
//! What this does not do: read databases (the daemon builds the view), or decide how a flow is
//! lowered (that is `render` and the stages, reading [`crate::topo::Topo::features`]).

use std::collections::{BTreeMap, BTreeSet};

use hf_expr::features::{self as registry, FeatureSet, Level, OvnRelease};
use hf_model::{NbSnapshot, SbSnapshot, sb};
use uuid::Uuid;

use crate::diag::Diagnostic;

/// The `Chassis.other_config` key holdfast controllers advertise their features in.
pub const ADVERTISEMENT_KEY: &str = "holdfast-features";

/// The `NB_Global.external_ids` key prefix northd reports unsupported chassis under.
pub const REPORT_PREFIX: &str = "holdfast-unsupported-chassis:";

/// One of OVN's own chassis feature flags (`Chassis.other_config:<name>=true`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OvnFlag {
    /// The `other_config` key.
    pub name: &'static str,
    /// The first OVN release whose `ovn-controller` sets it.
    pub release: OvnRelease,
    /// Registry features northd uses only when every chassis sets it.
    pub gates: &'static [&'static str],
}

/// OVN's chassis feature flags up to 23.09, oldest first (`include/ovn/features.h`; 23.03's
/// controller sets the first four).
pub const OVN_FLAGS: &[OvnFlag] = &[
    OvnFlag {
        name: "port-up-notif",
        release: OvnRelease::new(21, 3),
        gates: &[],
    },
    OvnFlag {
        name: "ct-no-masked-label",
        release: OvnRelease::new(22, 6),
        gates: &["ct-no-masked-label", "ct-mark-subfields", "ct-lb-mark"],
    },
    OvnFlag {
        name: "mac-binding-timestamp",
        release: OvnRelease::new(22, 12),
        gates: &["mac-binding-timestamp"],
    },
    OvnFlag {
        name: "ovn-ct-lb-related",
        release: OvnRelease::new(23, 3),
        gates: &["ct-commit-nat", "ct-lb-flags"],
    },
    OvnFlag {
        name: "fdb-timestamp",
        release: OvnRelease::new(23, 6),
        gates: &["fdb-timestamp"],
    },
    OvnFlag {
        name: "ls-dpg-column",
        release: OvnRelease::new(23, 6),
        gates: &["ls-dpg-column"],
    },
];

/// The release assumed for a real `ovn-controller` that sets no flag.
pub const UNFLAGGED_RELEASE: OvnRelease = OvnRelease::new(20, 6);

/// What negotiation needs to know besides the chassis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The oldest level served: chassis below it are unsupported (default `hf-1`).
    pub oldest: Level,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { oldest: Level::Hf1 }
    }
}

/// One `Chassis` row, as negotiation sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChassisRow {
    /// The row's UUID.
    pub uuid: Uuid,
    /// `name`.
    pub name: String,
    /// `other_config`.
    pub other_config: BTreeMap<String, String>,
}

/// The SB facts negotiation reads: every `Chassis` row and, per chassis UUID, the datapaths
/// (by `Datapath_Binding.external_ids:name`) with a port bound on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbChassisView {
    /// Every `Chassis` row.
    pub chassis: Vec<ChassisRow>,
    /// Chassis UUID → names of datapaths with a `Port_Binding` whose `chassis` or
    /// `additional_chassis` is it.
    pub bound: BTreeMap<Uuid, BTreeSet<String>>,
}

impl SbChassisView {
    /// The view of a full SB snapshot (for tests and tools).
    pub fn from_snapshot(sb: &SbSnapshot) -> Self {
        Self::from_parts(
            sb.chassis().values(),
            sb.datapath_binding(),
            sb.port_binding().values(),
        )
    }

    /// The view of SB rows as the daemon's lean replica holds them: it needs `Chassis.name`
    /// and `other_config`, `Datapath_Binding.external_ids`, and `Port_Binding.datapath`,
    /// `chassis` and `additional_chassis` (the latter only matters for ports in live
    /// migration; without it such a port counts on its main chassis only).
    pub fn from_parts<'a>(
        chassis: impl IntoIterator<Item = &'a sb::Chassis>,
        datapaths: &BTreeMap<Uuid, sb::DatapathBinding>,
        port_bindings: impl IntoIterator<Item = &'a sb::PortBinding>,
    ) -> Self {
        let mut v = SbChassisView {
            chassis: chassis
                .into_iter()
                .map(|c| ChassisRow {
                    uuid: c.uuid,
                    name: c.name.clone(),
                    other_config: c.other_config.clone().into(),
                })
                .collect(),
            bound: BTreeMap::new(),
        };
        for pb in port_bindings {
            // Unbound ports (most, where few chassis run) cost no datapath lookup.
            if pb.chassis.is_none() && pb.additional_chassis.is_empty() {
                continue;
            }
            let Some(dp) = datapaths
                .get(&pb.datapath.uuid())
                .and_then(|d| d.external_ids.get("name"))
            else {
                continue;
            };
            let on = pb
                .chassis
                .iter()
                .chain(pb.additional_chassis.iter())
                .map(|c| c.uuid());
            for c in on {
                v.bound.entry(c).or_default().insert(dp.clone());
            }
        }
        v
    }
}

/// Where a chassis' feature set came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `other_config:holdfast-features`.
    Advertised,
    /// OVN's flags: the release they imply.
    OvnFlags(OvnRelease),
    /// `other_config:is-remote=true`: not counted.
    Remote,
}

/// One chassis' outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChassisFeatures {
    /// The `Chassis` row.
    pub uuid: Uuid,
    /// Its features.
    pub features: FeatureSet,
    /// Where they came from.
    pub source: Source,
    /// Why it is unsupported (its set does not cover the oldest served level), if it is.
    pub unsupported: Option<String>,
}

/// What negotiation decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The features every supported chassis has: what flows may use.
    pub features: FeatureSet,
    /// `NB_Global options:ignore_chassis_features=true` was set.
    pub ignored: bool,
    /// Per chassis name.
    pub chassis: BTreeMap<String, ChassisFeatures>,
    /// Datapaths (by name) whose SB flows must stay as they are.
    pub frozen_datapaths: BTreeSet<String>,
    /// One per unsupported chassis and per unreadable advertisement (table `Chassis`).
    pub diagnostics: Vec<Diagnostic>,
}

impl Negotiated {
    /// Chassis names that are unsupported, sorted.
    pub fn unsupported(&self) -> impl Iterator<Item = (&str, &str)> {
        self.chassis
            .iter()
            .filter_map(|(n, c)| c.unsupported.as_deref().map(|r| (n.as_str(), r)))
    }

    /// The `NB_Global.external_ids` entries northd owns ([`REPORT_PREFIX`]`<chassis>` =
    /// reason): exactly these should exist.
    pub fn report(&self) -> BTreeMap<String, String> {
        self.unsupported()
            .map(|(n, r)| (format!("{REPORT_PREFIX}{n}"), r.to_string()))
            .collect()
    }

    /// Puts the outcome into compile options: the render feature set, the frozen datapaths and
    /// the diagnostics (so `status` lists them with the NB ones).
    pub fn apply(&self, opts: &mut crate::Options) {
        opts.render.features = self.features;
        opts.frozen_datapaths = self.frozen_datapaths.clone();
        opts.extra_diagnostics = self.diagnostics.clone();
    }
}

fn flag_set(oc: &BTreeMap<String, String>, key: &str) -> bool {
    oc.get(key).is_some_and(|v| v == "true")
}

/// A real `ovn-controller`'s features from OVN's flags.
pub fn from_ovn_flags(oc: &BTreeMap<String, String>) -> (FeatureSet, OvnRelease) {
    let release = OVN_FLAGS
        .iter()
        .filter(|f| flag_set(oc, f.name))
        .map(|f| f.release)
        .max()
        .unwrap_or(UNFLAGGED_RELEASE);
    let gated: BTreeSet<&str> = OVN_FLAGS
        .iter()
        .filter(|f| !flag_set(oc, f.name))
        .flat_map(|f| f.gates.iter().copied())
        .collect();
    (without(&FeatureSet::ovn(release), &gated), release)
}

fn without(set: &FeatureSet, names: &BTreeSet<&str>) -> FeatureSet {
    let mut out = FeatureSet::default();
    for f in set.iter().filter(|f| !names.contains(f.name)) {
        out.insert(f.name);
    }
    out
}

/// A holdfast advertisement: the features it names (unknown items are returned apart).
pub fn parse_advertisement(text: &str) -> (FeatureSet, Vec<String>) {
    let mut set = FeatureSet::default();
    let mut unknown = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match FeatureSet::parse(item) {
            Ok(s) => set = set.union(&s),
            // A level newer than this northd's newest includes everything it knows.
            Err(_) if newer_level(item) => set = FeatureSet::all(),
            Err(_) => unknown.push(item.to_string()),
        }
    }
    (set, unknown)
}

/// `hf-N` with N above the newest level this build knows.
fn newer_level(item: &str) -> bool {
    item.strip_prefix("hf-")
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n > Level::ALL.len())
}

/// Negotiates: see the module doc for the rules.
pub fn negotiate(view: &SbChassisView, nb: &NbSnapshot, policy: &Policy) -> Negotiated {
    let ignored = nb.nb_global().values().next().is_some_and(|g| {
        g.options
            .get("ignore_chassis_features")
            .is_some_and(|v| v == "true")
    });
    let oldest = FeatureSet::level(policy.oldest);
    let mut common = FeatureSet::all();
    let mut chassis = BTreeMap::new();
    let mut diagnostics = Vec::new();
    let mut frozen_seeds = BTreeSet::new();
    let mut rows: Vec<&ChassisRow> = view.chassis.iter().collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    for c in rows {
        let (features, source) = if flag_set(&c.other_config, "is-remote") {
            (FeatureSet::default(), Source::Remote)
        } else if let Some(text) = c.other_config.get(ADVERTISEMENT_KEY) {
            let (set, unknown) = parse_advertisement(text);
            if !unknown.is_empty() {
                diagnostics.push(Diagnostic {
                    table: "Chassis",
                    row: c.uuid,
                    name: c.name.clone(),
                    reason: format!(
                        "other_config:{ADVERTISEMENT_KEY} names {} unknown to this northd (a newer controller?); ignored",
                        unknown.join(", ")
                    ),
                });
            }
            (set, Source::Advertised)
        } else {
            let (set, release) = from_ovn_flags(&c.other_config);
            (set, Source::OvnFlags(release))
        };
        let mut unsupported = None;
        if source != Source::Remote {
            let missing: Vec<&str> = oldest
                .iter()
                .filter(|f| !features.contains(f.name))
                .map(|f| f.name)
                .collect();
            if missing.is_empty() || ignored {
                common = common.intersection(&features);
            } else {
                let reason = format!(
                    "below the oldest served feature level {} (lacks {}{}); its datapaths keep the flows they have",
                    policy.oldest,
                    missing
                        .iter()
                        .take(5)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", "),
                    if missing.len() > 5 {
                        format!(" and {} more", missing.len() - 5)
                    } else {
                        String::new()
                    }
                );
                diagnostics.push(Diagnostic {
                    table: "Chassis",
                    row: c.uuid,
                    name: c.name.clone(),
                    reason: format!("unsupported: {reason}"),
                });
                if let Some(dps) = view.bound.get(&c.uuid) {
                    frozen_seeds.extend(dps.iter().cloned());
                }
                unsupported = Some(reason);
            }
        }
        chassis.insert(
            c.name.clone(),
            ChassisFeatures {
                uuid: c.uuid,
                features,
                source,
                unsupported,
            },
        );
    }
    if ignored {
        common = FeatureSet::all();
    }
    diagnostics.sort();
    Negotiated {
        features: common,
        ignored,
        chassis,
        frozen_datapaths: connected(nb, &frozen_seeds),
        diagnostics,
    }
}

/// `seeds` and every datapath reachable from them through router ports (LSP `type=router`
/// with `options:router-port`, LRP `peer`), by NB names.
pub fn connected(nb: &NbSnapshot, seeds: &BTreeSet<String>) -> BTreeSet<String> {
    if seeds.is_empty() {
        return BTreeSet::new();
    }
    // Port name → its datapath name, and the links between datapaths.
    let mut lrp_dp: BTreeMap<&str, &str> = BTreeMap::new();
    for lr in nb.logical_router().values() {
        for p in lr.ports.iter().filter_map(|r| nb.get(*r)) {
            lrp_dp.insert(p.name.as_str(), lr.name.as_str());
        }
    }
    let mut links: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for ls in nb.logical_switch().values() {
        for p in ls.ports.iter().filter_map(|r| nb.get(*r)) {
            if p.type_ == "router"
                && let Some(lr) = p
                    .options
                    .get("router-port")
                    .and_then(|rp| lrp_dp.get(rp.as_str()))
            {
                links.entry(ls.name.as_str()).or_default().insert(lr);
                links.entry(lr).or_default().insert(ls.name.as_str());
            }
        }
    }
    for lr in nb.logical_router().values() {
        for p in lr.ports.iter().filter_map(|r| nb.get(*r)) {
            if let Some(other) = p.peer.as_deref().and_then(|peer| lrp_dp.get(peer)) {
                links.entry(lr.name.as_str()).or_default().insert(other);
                links.entry(other).or_default().insert(lr.name.as_str());
            }
        }
    }
    let mut out: BTreeSet<String> = seeds.clone();
    let mut todo: Vec<String> = seeds.iter().cloned().collect();
    while let Some(d) = todo.pop() {
        for n in links.get(d.as_str()).into_iter().flatten() {
            if out.insert((*n).to_string()) {
                todo.push((*n).to_string());
            }
        }
    }
    out
}

/// A feature's registry entry, for messages.
pub fn describe(name: &str) -> String {
    match registry::feature(name) {
        Some(f) => format!("{} ({}, OVN {})", f.name, f.hf, f.ovn),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oc(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn ovn_23_03_controller_flags() {
        let (set, rel) = from_ovn_flags(&oc(&[
            ("port-up-notif", "true"),
            ("ct-no-masked-label", "true"),
            ("mac-binding-timestamp", "true"),
            ("ovn-ct-lb-related", "true"),
        ]));
        assert_eq!(rel, OvnRelease::new(23, 3));
        for f in [
            "ct-lb-mark",
            "ct-mark-subfields",
            "ct-commit-nat",
            "check-port-sec",
        ] {
            assert!(set.contains(f), "{f}");
        }
        // 23.03 sets neither of 23.06's flags.
        assert!(!set.contains("ls-dpg-column"));
        assert!(!set.contains("fdb-timestamp"));
    }

    #[test]
    fn unflagged_controller_is_hf1_and_false_is_unset() {
        let (set, rel) = from_ovn_flags(&oc(&[("ct-no-masked-label", "false")]));
        assert_eq!(rel, UNFLAGGED_RELEASE);
        assert_eq!(set, FeatureSet::level(Level::Hf1));
        // A 22.12 controller (no ovn-ct-lb-related) gets ct_lb_mark but not ct_commit_nat.
        let (set, _) = from_ovn_flags(&oc(&[
            ("ct-no-masked-label", "true"),
            ("mac-binding-timestamp", "true"),
        ]));
        assert!(set.contains("ct-lb-mark"));
        assert!(!set.contains("ct-commit-nat"));
    }

    #[test]
    fn advertisement_ignores_unknown_names() {
        let (set, unknown) = parse_advertisement("hf-1, ct-commit-block ,warp-drive");
        assert!(set.contains("ct-commit-block"));
        assert!(!set.contains("reject"));
        assert_eq!(unknown, vec!["warp-drive".to_string()]);
        // A newer controller naming a level this northd does not know yet has all it knows.
        let (set, unknown) = parse_advertisement("hf-9");
        assert_eq!(set, FeatureSet::all());
        assert!(unknown.is_empty());
    }
}
