//! `Chassis`, `Encap` and `Chassis_Private` registration: the operations that make SB hold
//! this chassis's rows as ovn-controller 23.03 writes them (`controller/chassis.c`), computed
//! from the replica's view so that the same function both decides whether a write is needed
//! and builds it when the transaction is sent.
//!
//! - `Chassis`: `name`, `hostname`, one `Encap` (`type`, `ip`, `chassis_name`,
//!   `options:csum=true`), and `other_config` with the keys 23.03 sets (`ovn-bridge-mappings`,
//!   `datapath-type`, `ovn-cms-options`, `ovn-monitor-all`, the lflow-cache settings,
//!   `iface-types`, `ovn-chassis-mac-mappings`, `is-interconn`) and its feature flags
//!   (`port-up-notif`, `ct-no-masked-label`, `mac-binding-timestamp`, `ovn-ct-lb-related`),
//!   plus `holdfast-features=<hf-expr feature names>`. Keys other writers added are kept.
//! - `Chassis_Private`: `name`, `chassis`, and (written by the core) `nb_cfg`,
//!   `nb_cfg_timestamp` and the `holdfast-flow-error*` and `holdfast-zone-error`
//!   `external_ids`.
//! - Rows deleted behind our back (a database rebuild, `ovn-sbctl chassis-del`) are inserted
//!   again at the next write round.
//!
//! Not done: bridge mappings, transport zones, several encap types or IPs (one of each).

use std::collections::BTreeMap;

use hf_model::SbSnapshot;
use serde_json::{Value, json};
use uuid::Uuid;

/// What this chassis registers as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `Chassis.name` (`system-id`).
    pub name: String,
    /// `Chassis.hostname`.
    pub hostname: String,
    /// `Encap.type`.
    pub encap_type: String,
    /// `Encap.ip`.
    pub encap_ip: String,
    /// `ovn-monitor-all`.
    pub monitor_all: bool,
    /// `holdfast-features`.
    pub features: String,
}

/// The `other_config` keys this chassis owns, with their values.
pub fn other_config(id: &Identity) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for (k, v) in [
        ("ovn-bridge-mappings", ""),
        ("datapath-type", ""),
        ("ovn-cms-options", ""),
        ("ovn-enable-lflow-cache", "true"),
        ("ovn-limit-lflow-cache", ""),
        ("ovn-memlimit-lflow-cache-kb", ""),
        ("ovn-trim-limit-lflow-cache", ""),
        ("ovn-trim-wmark-perc-lflow-cache", ""),
        ("ovn-trim-timeout-ms", ""),
        ("iface-types", ""),
        ("ovn-chassis-mac-mappings", ""),
        ("is-interconn", "false"),
        ("port-up-notif", "true"),
        ("ct-no-masked-label", "true"),
        ("mac-binding-timestamp", "true"),
        ("ovn-ct-lb-related", "true"),
    ] {
        m.insert(k.to_string(), v.to_string());
    }
    m.insert(
        "ovn-monitor-all".into(),
        if id.monitor_all { "true" } else { "false" }.into(),
    );
    m.insert("holdfast-features".into(), id.features.clone());
    m
}

/// An OVSDB map value.
pub fn map_json<'a>(m: impl IntoIterator<Item = (&'a String, &'a String)>) -> Value {
    json!([
        "map",
        m.into_iter()
            .map(|(k, v)| json!([k, v]))
            .collect::<Vec<_>>()
    ])
}

fn uuid_json(u: Uuid) -> Value {
    json!(["uuid", u.to_string()])
}

/// Our `Chassis` row's UUID, when the view has it.
pub fn our_chassis(sb: &SbSnapshot, name: &str) -> Option<Uuid> {
    sb.chassis_by_name(name).map(|c| c.uuid)
}

/// The operations that register or update the `Chassis` (with its `Encap`) and make the
/// `Chassis_Private` row exist and point at it. Empty when SB already says what we want.
pub fn registration_ops(sb: &SbSnapshot, id: &Identity) -> Vec<Value> {
    let mut ops = Vec::new();
    let want_oc = other_config(id);
    let encap_row = json!({
        "type": id.encap_type,
        "ip": id.encap_ip,
        "chassis_name": id.name,
        "options": map_json(&BTreeMap::from([("csum".to_string(), "true".to_string())])),
    });
    let chassis_ref = match sb.chassis_by_name(&id.name) {
        None => {
            ops.push(json!({"op": "insert", "table": "Encap", "row": encap_row,
                            "uuid-name": "hf_encap"}));
            ops.push(
                json!({"op": "insert", "table": "Chassis", "uuid-name": "hf_chassis",
                "row": {
                    "name": id.name,
                    "hostname": id.hostname,
                    "encaps": ["named-uuid", "hf_encap"],
                    "other_config": map_json(&want_oc),
                }}),
            );
            ops.push(json!({"op": "comment",
                "comment": format!("holdfast controller: registering chassis '{}'", id.name)}));
            json!(["named-uuid", "hf_chassis"])
        }
        Some(c) => {
            let mut row = serde_json::Map::new();
            if c.hostname != id.hostname {
                row.insert("hostname".into(), json!(id.hostname));
            }
            let mut oc = c.other_config.clone();
            for (k, v) in &want_oc {
                oc.insert(k.clone(), v.clone());
            }
            if oc != c.other_config {
                row.insert("other_config".into(), map_json(&oc));
            }
            let encaps: Vec<_> = c.encaps.iter().filter_map(|e| sb.get(*e)).collect();
            let encap_ok = encaps.len() == 1
                && encaps[0].type_.as_str() == id.encap_type
                && encaps[0].ip == id.encap_ip
                && encaps[0].chassis_name == id.name;
            if !encap_ok {
                ops.push(json!({"op": "insert", "table": "Encap", "row": encap_row,
                                "uuid-name": "hf_encap"}));
                row.insert("encaps".into(), json!(["named-uuid", "hf_encap"]));
            }
            if !row.is_empty() {
                ops.push(json!({"op": "update", "table": "Chassis",
                    "where": [["_uuid", "==", uuid_json(c.uuid)]], "row": row}));
                ops.push(json!({"op": "comment",
                    "comment": format!("holdfast controller: updating chassis '{}'", id.name)}));
            }
            uuid_json(c.uuid)
        }
    };
    let ours = sb.chassis_by_name(&id.name).map(|c| c.uuid);
    match sb.chassis_private().values().find(|p| p.name == id.name) {
        None => ops.push(json!({"op": "insert", "table": "Chassis_Private",
            "row": {"name": id.name, "chassis": chassis_ref}})),
        Some(p) => {
            if ours.is_none() || p.chassis.map(|c| c.uuid()) != ours {
                ops.push(json!({"op": "update", "table": "Chassis_Private",
                    "where": [["_uuid", "==", uuid_json(p.uuid)]],
                    "row": {"chassis": chassis_ref}}));
            }
        }
    }
    ops
}

/// The `Chassis_Private.external_ids` key reporting objects left without a conntrack zone.
pub const ZONE_ERROR_KEY: &str = "holdfast-zone-error";

/// The operations that make `Chassis_Private` report `nb_cfg` (with its timestamp) and the
/// flow-error `external_ids`; empty when it already does (or the row is not there yet).
pub fn private_ops(
    sb: &SbSnapshot,
    name: &str,
    nb_cfg: Option<i64>,
    wall_ms: i64,
    flow_errors: &BTreeMap<String, String>,
) -> Vec<Value> {
    let Some(p) = sb.chassis_private().values().find(|p| p.name == name) else {
        return Vec::new();
    };
    let mut row = serde_json::Map::new();
    if let Some(n) = nb_cfg
        && n > p.nb_cfg
    {
        row.insert("nb_cfg".into(), json!(n));
        row.insert("nb_cfg_timestamp".into(), json!(wall_ms));
    }
    let mut ext: BTreeMap<String, String> = p
        .external_ids
        .iter()
        .filter(|(k, _)| !k.starts_with("holdfast-flow-error") && k.as_str() != ZONE_ERROR_KEY)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    ext.extend(flow_errors.iter().map(|(k, v)| (k.clone(), v.clone())));
    if !ext.iter().eq(p.external_ids.iter()) {
        row.insert("external_ids".into(), map_json(&ext));
    }
    if row.is_empty() {
        return Vec::new();
    }
    vec![json!({"op": "update", "table": "Chassis_Private",
        "where": [["_uuid", "==", uuid_json(p.uuid)]], "row": row})]
}
