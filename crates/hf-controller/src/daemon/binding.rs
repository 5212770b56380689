//! Port claims (ovn-controller's `binding.c`, for VIFs): a `Port_Binding` of type `""` whose
//! `logical_port` is a local port of the datapath (its `iface-id`) is claimed by this chassis,
//! and released when the local port goes away.
//!
//! - `requested_chassis` (set by northd from `options:requested-chassis`) is respected: a port
//!   requested elsewhere is not claimed (and released if we hold it), unless this chassis is
//!   in `requested_additional_chassis`, in which case it is claimed as an additional chassis
//!   (`additional_chassis`: a multi-chassis binding during live migration). While the column is
//!   empty, the first name of `options:requested-chassis` (chassis name or hostname) decides
//!   the same way, and the other names mean additional chassis.
//! - A primary claim sets `chassis` and clears this chassis from `additional_chassis`; `up`
//!   becomes true once the datapath has installed a program where the port is local (23.03's
//!   `port-up-notif`), and false on release.
//!
//! - A `chassisredirect` port is claimed by the highest-priority chassis of its HA chassis
//!   group (or `Gateway_Chassis` rows) and released by a chassis that is no longer it; an
//!   `l3gateway` port by the chassis its `options:l3gateway-chassis` names (ovn-controller's
//!   gateway claims, so `ovn-sbctl show` lists them under the gateway).
//! - A port claimed as an additional chassis that the datapath activated (its RARP/GARP/NA)
//!   gets this chassis's name added to `options:additional-chassis-activated`, as
//!   ovn-controller does: activation is SB state, so a restarted controller or datapath keeps
//!   the port active.
//! - A `virtual` port is claimed when the datapath reports `bind_vport` ran for it
//!   (`VportBound`): `chassis` and `virtual_parent` are set, as pinctrl does.
//!
//! Not done: releasing a virtual port when its parent leaves, `external` and `l2gateway`
//! claims (the translation places those by their HA group or options; nothing is written for
//! them), container ports (`parent_port`/`tag`).

use std::collections::{BTreeMap, BTreeSet};

use hf_model::SbSnapshot;
use hf_model::sb::PortBinding;
use serde_json::{Value, json};
use uuid::Uuid;

/// How this chassis should hold a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// As `chassis`.
    Primary,
    /// As one of `additional_chassis`.
    Additional,
    /// Not at all.
    None,
}

/// How `pb` should be held by chassis `ours` (named `name`, on host `hostname`), given the
/// local ports.
pub fn claim_of(
    sb: &SbSnapshot,
    pb: &PortBinding,
    ours: Uuid,
    name: &str,
    hostname: &str,
    local: &BTreeSet<String>,
) -> Claim {
    if !pb.type_.is_empty() || !local.contains(&pb.logical_port) {
        return Claim::None;
    }
    if let Some(r) = pb.requested_chassis {
        if r.uuid() == ours {
            return Claim::Primary;
        }
        if pb
            .requested_additional_chassis
            .iter()
            .any(|c| c.uuid() == ours)
        {
            return Claim::Additional;
        }
        // Requested elsewhere (the row may be one the view does not hold: still elsewhere).
        let _ = sb;
        return Claim::None;
    }
    match pb.options.get("requested-chassis").map(|s| s.trim()) {
        None | Some("") => Claim::Primary,
        Some(list) => {
            let names: Vec<&str> = list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            let me = |n: &&str| *n == name || (!hostname.is_empty() && *n == hostname);
            match names.iter().position(me) {
                Some(0) => Claim::Primary,
                Some(_) => Claim::Additional,
                None => Claim::None,
            }
        }
    }
}

/// The option that records activations (OVN 22.09+).
const ACTIVATED: &str = "additional-chassis-activated";

fn uuid_json(u: Uuid) -> Value {
    json!(["uuid", u.to_string()])
}

/// The rows [`binding_ops`] and [`claims_move_ports`] may act on, in UUID order (the order
/// of a walk over every row): gateway ports (`chassisredirect`, `l3gateway`), the rows named
/// by a local or virtual port here, and the rows this chassis holds as primary or additional
/// chassis. Any other row yields nothing in either: a row that is not a gateway port, not
/// local, not virtual here and not held is neither claimed nor released. Found through the
/// snapshot's indexes, so a write round costs what this chassis has, not the whole view.
pub fn candidates<'a>(
    sb: &'a SbSnapshot,
    ours: Uuid,
    local: &BTreeSet<String>,
    vports: &BTreeMap<String, String>,
) -> Vec<&'a PortBinding> {
    let mut rows: BTreeMap<Uuid, &PortBinding> = BTreeMap::new();
    let mut add = |pb: &'a PortBinding| {
        rows.insert(pb.uuid, pb);
    };
    for t in ["chassisredirect", "l3gateway"] {
        sb.port_binding_all_by_type(t).for_each(&mut add);
    }
    for p in local.iter().chain(vports.keys()) {
        sb.port_binding_all_by_logical_port(p).for_each(&mut add);
    }
    sb.port_binding_all_by_chassis(ours.into())
        .for_each(&mut add);
    sb.port_binding_all_by_additional_chassis(ours.into())
        .for_each(&mut add);
    rows.into_values().collect()
}

/// Whether `pb` is one of [`candidates`] (the same rule, for one row).
pub fn is_candidate(
    pb: &PortBinding,
    ours: Uuid,
    local: &BTreeSet<String>,
    vports: &BTreeMap<String, String>,
) -> bool {
    matches!(pb.type_.as_str(), "chassisredirect" | "l3gateway")
        || local.contains(&pb.logical_port)
        || vports.contains_key(&pb.logical_port)
        || pb.chassis.is_some_and(|c| c.uuid() == ours)
        || pb.additional_chassis.iter().any(|c| c.uuid() == ours)
}

/// What the claims are made from: this chassis (`ours`, named `name`, on host `hostname`)
/// and its ports.
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// Our `Chassis` row.
    pub ours: Uuid,
    /// Our chassis name.
    pub name: &'a str,
    /// Our hostname (`options:requested-chassis` may name it).
    pub hostname: &'a str,
    /// The datapath's local ports.
    pub local: &'a BTreeSet<String>,
    /// The ports the datapath has installed as local.
    pub up: &'a BTreeSet<String>,
    /// Virtual ports bound here, with their parents.
    pub vports: &'a BTreeMap<String, String>,
    /// Ports the datapath activated here (a migration's destination).
    pub activated: &'a BTreeSet<String>,
    /// The [`candidates`] as kept by the caller; `None`: found from the view.
    pub cands: Option<&'a [Uuid]>,
    /// The chassis whose BFD sessions are up, while BFD runs: a gateway claims a
    /// `chassisredirect` port when it is the first live one
    /// ([`crate::translate::ports::ha_active`]).
    pub ha_up: Option<&'a BTreeSet<String>>,
}

impl<'a> Claimant<'a> {
    /// The rows the claims look at: those `cands` names (still in the view), or
    /// [`candidates`].
    fn rows<'s>(&self, sb: &'s SbSnapshot) -> Vec<&'s PortBinding> {
        match self.cands {
            Some(c) => c.iter().filter_map(|u| sb.port_binding().get(u)).collect(),
            None => candidates(sb, self.ours, self.local, self.vports),
        }
    }
}

/// The operations that claim, update and release port bindings.
pub fn binding_ops(sb: &SbSnapshot, c: &Claimant<'_>) -> Vec<Value> {
    binding_ops_over(sb, c.rows(sb), c)
}

/// [`binding_ops`] over the given rows (in their order).
fn binding_ops_over<'a>(
    sb: &'a SbSnapshot,
    rows: impl IntoIterator<Item = &'a PortBinding>,
    c: &Claimant<'_>,
) -> Vec<Value> {
    let Claimant {
        ours,
        name,
        hostname,
        local,
        up: up_ports,
        vports,
        activated,
        ..
    } = *c;
    let mut ops = Vec::new();
    for pb in rows {
        let gateway = match pb.type_.as_str() {
            "chassisredirect" => Some(crate::translate::ports::ha_active(sb, pb, ours, c.ha_up)),
            "l3gateway" => {
                Some(pb.options.get("l3gateway-chassis").map(String::as_str) == Some(name))
            }
            _ => None,
        };
        if let Some(here) = gateway {
            let holds = pb.chassis.map(|c| c.uuid()) == Some(ours);
            let row = match (here, holds) {
                (true, false) => Some(uuid_json(ours)),
                (false, true) => Some(json!(["set", []])),
                _ => None,
            };
            if let Some(ch) = row {
                ops.push(json!({"op": "update", "table": "Port_Binding",
                    "where": [["_uuid", "==", uuid_json(pb.uuid)]], "row": {"chassis": ch}}));
                ops.push(json!({"op": "comment", "comment": format!(
                    "holdfast controller {name}: {} {} lport {}",
                    if here { "claiming" } else { "releasing" }, pb.type_, pb.logical_port)}));
            }
            continue;
        }
        if pb.type_ == "virtual" {
            if let Some(parent) = vports.get(&pb.logical_port)
                && (pb.chassis.map(|c| c.uuid()) != Some(ours)
                    || pb.virtual_parent.as_deref() != Some(parent.as_str()))
            {
                ops.push(json!({"op": "update", "table": "Port_Binding",
                    "where": [["_uuid", "==", uuid_json(pb.uuid)]],
                    "row": {"chassis": uuid_json(ours), "virtual_parent": parent}}));
                ops.push(json!({"op": "comment", "comment": format!(
                    "holdfast controller {name}: claiming virtual lport {} (parent {parent})",
                    pb.logical_port)}));
            }
            continue;
        }
        let claim = claim_of(sb, pb, ours, name, hostname, local);
        let holds_primary = pb.chassis.map(|c| c.uuid()) == Some(ours);
        let holds_additional = pb.additional_chassis.iter().any(|c| c.uuid() == ours);
        let mut row = serde_json::Map::new();
        let mut mutations = Vec::new();
        match claim {
            Claim::Primary => {
                if !holds_primary {
                    row.insert("chassis".into(), uuid_json(ours));
                }
                if holds_additional {
                    mutations.push(json!(["additional_chassis", "delete", uuid_json(ours)]));
                }
                let up = up_ports.contains(&pb.logical_port);
                if pb.up != Some(up) {
                    row.insert("up".into(), json!(up));
                }
            }
            Claim::Additional => {
                if holds_primary {
                    row.insert("chassis".into(), json!(["set", []]));
                }
                if !holds_additional {
                    mutations.push(json!(["additional_chassis", "insert", uuid_json(ours)]));
                }
                let listed = crate::translate::ports::activated_chassis(pb);
                if activated.contains(&pb.logical_port) && !listed.contains(&name) {
                    let mut list: Vec<&str> = listed;
                    list.push(name);
                    mutations.push(json!(["options", "delete", ["set", [ACTIVATED]]]));
                    mutations.push(json!([
                        "options",
                        "insert",
                        ["map", [[ACTIVATED, list.join(",")]]]
                    ]));
                }
            }
            Claim::None => {
                if holds_primary {
                    row.insert("chassis".into(), json!(["set", []]));
                    row.insert("up".into(), json!(false));
                }
                if holds_additional {
                    mutations.push(json!(["additional_chassis", "delete", uuid_json(ours)]));
                }
            }
        }
        if row.is_empty() && mutations.is_empty() {
            // Nothing to write for this row (the usual case): no `where` clause is built, so
            // that a round costs little per row held.
            continue;
        }
        let at = json!([["_uuid", "==", uuid_json(pb.uuid)]]);
        if !row.is_empty() {
            ops.push(json!({"op": "update", "table": "Port_Binding", "where": at, "row": row}));
        }
        if !mutations.is_empty() {
            ops.push(json!({"op": "mutate", "table": "Port_Binding", "where": at,
                            "mutations": mutations}));
        }
        let what = match claim {
            Claim::Primary => "claiming",
            Claim::Additional if holds_additional => "activating (additional chassis)",
            Claim::Additional => "claiming (additional chassis)",
            Claim::None => "releasing",
        };
        ops.push(json!({"op": "comment",
            "comment": format!("holdfast controller {name}: {what} lport {}", pb.logical_port)}));
    }
    ops
}

/// Whether the claims and releases [`binding_ops`] would write move a port in the translation
/// (its primary or additional chassis as [`crate::translate::ports::binding`] reads them).
/// `false` when every pending write only sets `up` or claims, as primary, a VIF whose
/// `requested_chassis` is this chassis and that nobody holds (the translation already places
/// it here: such a claim is pipelined with the program's install, as ovn-controller installs
/// a port's flows in the iteration that claims it).
pub fn claims_move_ports(sb: &SbSnapshot, c: &Claimant<'_>) -> bool {
    claims_move_ports_over(sb, c.rows(sb), c)
}

/// [`claims_move_ports`] over the given rows.
fn claims_move_ports_over<'a>(
    sb: &'a SbSnapshot,
    rows: impl IntoIterator<Item = &'a PortBinding>,
    c: &Claimant<'_>,
) -> bool {
    let Claimant {
        ours,
        name,
        hostname,
        local,
        vports,
        activated,
        ..
    } = *c;
    for pb in rows {
        let holds_primary = pb.chassis.map(|c| c.uuid()) == Some(ours);
        match pb.type_.as_str() {
            "chassisredirect" => {
                if crate::translate::ports::ha_active(sb, pb, ours, c.ha_up) != holds_primary {
                    return true;
                }
                continue;
            }
            "l3gateway" => {
                let here = pb.options.get("l3gateway-chassis").map(String::as_str) == Some(name);
                if here != holds_primary {
                    return true;
                }
                continue;
            }
            "virtual" => {
                if let Some(parent) = vports.get(&pb.logical_port)
                    && (!holds_primary || pb.virtual_parent.as_deref() != Some(parent.as_str()))
                {
                    return true;
                }
                continue;
            }
            _ => {}
        }
        let holds_additional = pb.additional_chassis.iter().any(|c| c.uuid() == ours);
        let moves = match claim_of(sb, pb, ours, name, hostname, local) {
            Claim::Primary => {
                holds_additional
                    || (!holds_primary
                        && (crate::translate::ports::binding(sb, pb).0 != Some(ours)
                            || !pb.requested_additional_chassis.is_empty()))
            }
            Claim::Additional => {
                holds_primary
                    || !holds_additional
                    || (activated.contains(&pb.logical_port)
                        && !crate::translate::ports::activated_chassis(pb).contains(&name))
            }
            Claim::None => holds_primary || holds_additional,
        };
        if moves {
            return true;
        }
    }
    false
}

/// Whether a `Port_Binding` update changes nothing the translation places the port by: only
/// `up`, or `chassis` from empty to this VIF's `requested_chassis` (its claim, which
/// [`crate::translate::ports::binding`] already assumed).
pub fn placement_neutral(old: &PortBinding, new: &PortBinding) -> bool {
    let mut o = old.clone();
    o.up = new.up;
    if old.chassis.is_none()
        && new.type_.is_empty()
        && new.requested_additional_chassis.is_empty()
        && new.chassis.is_some()
        && new.chassis.map(|c| c.uuid()) == new.requested_chassis.map(|c| c.uuid())
    {
        o.chassis = new.chassis;
    }
    o == *new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::translate::test_rng::Rng;
    use hf_model::{RowDelta, RowRef, sb};

    const OURS: u128 = 1;
    const OTHER: u128 = 2;
    const NAMES: &[&str] = &["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"];

    fn chassis_ref(rng: &mut Rng) -> Option<RowRef<sb::Chassis>> {
        match rng.below(3) {
            0 => None,
            1 => Some(RowRef::new(Uuid::from_u128(OURS))),
            _ => Some(RowRef::new(Uuid::from_u128(OTHER))),
        }
    }

    /// A view of random bindings: every type the claims read, held, requested and optioned
    /// every way, names shared by several rows.
    fn random_view(rng: &mut Rng) -> SbSnapshot {
        let mut d = hf_model::SbDelta::default();
        for (n, name) in [(OURS, "hv1"), (OTHER, "hv2")] {
            d.chassis.push(RowDelta::Insert(sb::Chassis {
                uuid: Uuid::from_u128(n),
                name: name.into(),
                hostname: format!("{name}.example"),
                ..Default::default()
            }));
        }
        for i in 0..(4 + rng.below(20)) {
            let mut pb = sb::PortBinding {
                uuid: Uuid::from_u128(100 + i as u128),
                logical_port: rng.pick(NAMES).into(),
                type_: rng
                    .pick(&[
                        "",
                        "",
                        "",
                        "chassisredirect",
                        "l3gateway",
                        "virtual",
                        "patch",
                    ])
                    .into(),
                chassis: chassis_ref(rng),
                requested_chassis: chassis_ref(rng),
                up: [None, Some(true), Some(false)][rng.below(3)],
                ..Default::default()
            };
            if rng.chance(3) {
                pb.additional_chassis
                    .insert(RowRef::new(Uuid::from_u128([OURS, OTHER][rng.below(2)])));
            }
            if rng.chance(4) {
                pb.requested_additional_chassis
                    .insert(RowRef::new(Uuid::from_u128(OURS)));
            }
            if rng.chance(3) {
                let v = rng.pick(&["", "hv1", "hv2", "hv2,hv1", "hv1.example", "hv1,hv2"]);
                pb.options.insert("requested-chassis".into(), v.into());
            }
            if rng.chance(2) {
                let v = rng.pick(&["hv1", "hv2"]);
                pb.options.insert("l3gateway-chassis".into(), v.into());
            }
            if rng.chance(4) {
                pb.options.insert(ACTIVATED.into(), "hv2".into());
            }
            if rng.chance(3) {
                pb.virtual_parent = Some(rng.pick(NAMES).into());
            }
            d.port_binding.push(RowDelta::Insert(pb));
        }
        let mut view = SbSnapshot::default();
        view.apply(&d);
        view
    }

    fn some_names(rng: &mut Rng) -> BTreeSet<String> {
        NAMES
            .iter()
            .filter(|_| rng.chance(3))
            .map(|s| s.to_string())
            .collect()
    }

    /// The write and the claim check over the candidates equal the same over every row of the
    /// view, over random views and local, up, virtual and activated ports.
    #[test]
    fn candidates_give_what_a_walk_over_every_binding_gives() {
        let ours = Uuid::from_u128(OURS);
        let mut rng = Rng(7);
        let (mut wrote, mut moved) = (0, 0);
        for _ in 0..3000 {
            let view = random_view(&mut rng);
            let local = some_names(&mut rng);
            let up = some_names(&mut rng);
            let activated = some_names(&mut rng);
            let vports: BTreeMap<String, String> = some_names(&mut rng)
                .into_iter()
                .map(|n| (n, rng.pick(NAMES).to_string()))
                .collect();
            let all = || view.port_binding().values();
            let cands: Vec<Uuid> = candidates(&view, ours, &local, &vports)
                .iter()
                .map(|pb| pb.uuid)
                .collect();
            let one_by_one: Vec<Uuid> = all()
                .filter(|pb| is_candidate(pb, ours, &local, &vports))
                .map(|pb| pb.uuid)
                .collect();
            assert_eq!(cands, one_by_one, "is_candidate against candidates");
            let mut c = Claimant {
                ours,
                name: "hv1",
                hostname: "hv1.example",
                local: &local,
                up: &up,
                vports: &vports,
                activated: &activated,
                cands: None,
                ha_up: None,
            };
            let want = binding_ops_over(&view, all(), &c);
            let got = binding_ops(&view, &c);
            assert_eq!(got, want, "local {local:?} vports {vports:?} view {view:?}");
            let want_moves = claims_move_ports_over(&view, all(), &c);
            assert_eq!(claims_move_ports(&view, &c), want_moves, "{view:?}");
            // Kept candidates give the same.
            c.cands = Some(&cands);
            assert_eq!(binding_ops(&view, &c), want);
            assert_eq!(claims_move_ports(&view, &c), want_moves);
            wrote += usize::from(!want.is_empty());
            moved += usize::from(want_moves);
        }
        // The generator reaches both answers often.
        assert!(wrote > 300 && moved > 300, "wrote {wrote}, moved {moved}");
    }
}
