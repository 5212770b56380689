//! Conditional monitoring (ovn-controller's `update_sb_monitors` with `ovn-monitor-all=false`):
//! the `where` clauses per SB table that bring only what this chassis needs.
//!
//! - `Port_Binding`: every `patch`, `chassisredirect` and `external` port (they link
//!   datapaths), ports bound or requested here, `l2gateway`/`l3gateway` ports naming this
//!   chassis, the local ports by `logical_port`, and every port of a local datapath.
//! - `Logical_Flow`: flows of the local datapaths, and flows of the `Logical_DP_Group`s that
//!   contain one (groups are monitored whole, so a group change is seen at once).
//! - `MAC_Binding`, `Multicast_Group`, `Static_MAC_Binding`, `IP_Multicast`: the local
//!   datapaths'; `DNS`: rows that include one.
//! - `Chassis_Private`: every row until our `Chassis` exists (so an existing row is found, not
//!   inserted twice), then ours only; `Chassis_Template_Var`, `Controller_Event`,
//!   `IGMP_Group`: ours.
//! - Every other table whole (`Chassis`, `Encap`, `Datapath_Binding`, `SB_Global`, ...).
//!
//! "Local datapaths" are [`crate::translate::needed_datapaths`] of the view plus the
//! datapaths of the local ports' bindings: as rows arrive the set grows (a patch port reveals
//! its peer's datapath), and the core pushes a program only once the conditions it computes
//! from the view are the ones the server applied (a fixpoint).
//!
//! Note: an empty `where` list means every row in `monitor_cond`; "no row" is `[false]`.

use std::collections::{BTreeMap, BTreeSet};

use hf_model::SbSnapshot;
use serde_json::{Value, json};
use uuid::Uuid;

/// The tables whose conditions this module sets.
pub const CONDITIONED: &[&str] = &[
    "Port_Binding",
    "Logical_Flow",
    "MAC_Binding",
    "Multicast_Group",
    "Static_MAC_Binding",
    "IP_Multicast",
    "DNS",
    "Chassis_Private",
    "Chassis_Template_Var",
    "Controller_Event",
    "IGMP_Group",
];

fn u(x: Uuid) -> Value {
    json!(["uuid", x.to_string()])
}

fn or_false(v: Vec<Value>) -> Vec<Value> {
    if v.is_empty() { vec![json!(false)] } else { v }
}

/// The datapaths this chassis needs according to the view.
pub fn local_datapaths(sb: &SbSnapshot, chassis: &str, local: &BTreeSet<String>) -> BTreeSet<Uuid> {
    let mut dps = crate::translate::needed_datapaths(sb, chassis);
    for p in local {
        for pb in sb.port_binding_all_by_logical_port(p) {
            let d = pb.datapath.uuid();
            if sb.datapath_binding().contains_key(&d) && !dps.contains(&d) {
                dps.extend(crate::translate::reachable_datapaths(sb, d));
            }
        }
    }
    dps
}

/// Adds `Port_Binding` clauses for `ports` by `logical_port` to `conds` (the conditions of
/// [`conditions`]): a restarted controller watches the ports whose zones the datapath holds
/// without a datapath it knows for them, so that their absence from a complete view means they
/// are gone. Nothing to add with `monitor_all` (every row is there).
pub fn watch_ports(
    conds: &mut BTreeMap<&'static str, Option<Vec<Value>>>,
    ports: &BTreeSet<String>,
) {
    if let Some(Some(pb)) = conds.get_mut("Port_Binding") {
        for p in ports {
            let c = json!(["logical_port", "==", p]);
            if !pb.contains(&c) {
                pb.push(c);
            }
        }
    }
}

/// The conditions (table → clauses) for chassis `chassis` with local ports `local`.
/// `None` for every table with `monitor_all`.
pub fn conditions(
    sb: &SbSnapshot,
    chassis: &str,
    local: &BTreeSet<String>,
    monitor_all: bool,
) -> BTreeMap<&'static str, Option<Vec<Value>>> {
    let mut out: BTreeMap<&'static str, Option<Vec<Value>>> = BTreeMap::new();
    if monitor_all {
        for t in CONDITIONED {
            out.insert(t, None);
        }
        return out;
    }
    let ours = sb.chassis_by_name(chassis).map(|c| c.uuid);
    let dps = local_datapaths(sb, chassis, local);
    let mut pb = vec![
        json!(["type", "==", "patch"]),
        json!(["type", "==", "chassisredirect"]),
        json!(["type", "==", "external"]),
    ];
    if let Some(c) = ours {
        pb.push(json!(["chassis", "==", u(c)]));
        pb.push(json!(["requested_chassis", "==", u(c)]));
        pb.push(json!([
            "options",
            "includes",
            ["map", [["l2gateway-chassis", chassis]]]
        ]));
        pb.push(json!([
            "options",
            "includes",
            ["map", [["l3gateway-chassis", chassis]]]
        ]));
    }
    for p in local {
        pb.push(json!(["logical_port", "==", p]));
    }
    let mut lf = Vec::new();
    let mut per_dp = Vec::new();
    let mut dns = Vec::new();
    for d in &dps {
        pb.push(json!(["datapath", "==", u(*d)]));
        lf.push(json!(["logical_datapath", "==", u(*d)]));
        per_dp.push(json!(["datapath", "==", u(*d)]));
        dns.push(json!(["datapaths", "includes", u(*d)]));
    }
    for g in sb.logical_dp_group().values() {
        if g.datapaths.iter().any(|d| dps.contains(&d.uuid())) {
            lf.push(json!(["logical_dp_group", "==", u(g.uuid)]));
        }
    }
    out.insert("Port_Binding", Some(pb));
    out.insert("Logical_Flow", Some(or_false(lf)));
    for t in [
        "MAC_Binding",
        "Multicast_Group",
        "Static_MAC_Binding",
        "IP_Multicast",
    ] {
        out.insert(t, Some(or_false(per_dp.clone())));
    }
    out.insert("DNS", Some(or_false(dns)));
    match ours {
        None => {
            out.insert("Chassis_Private", None);
            out.insert("Chassis_Template_Var", Some(vec![json!(false)]));
            out.insert("Controller_Event", Some(vec![json!(false)]));
            out.insert("IGMP_Group", Some(vec![json!(false)]));
        }
        Some(c) => {
            out.insert(
                "Chassis_Private",
                Some(vec![json!(["name", "==", chassis])]),
            );
            out.insert(
                "Chassis_Template_Var",
                Some(vec![json!(["chassis", "==", chassis])]),
            );
            out.insert(
                "Controller_Event",
                Some(vec![json!(["chassis", "==", u(c)])]),
            );
            out.insert("IGMP_Group", Some(vec![json!(["chassis", "==", u(c)])]));
        }
    }
    out
}
