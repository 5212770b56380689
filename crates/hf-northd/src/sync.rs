//! [`SbDesired`] → OVSDB operations. Today: the transaction that fills an SB holding none of
//! northd's rows ([`insert_ops`]); the incremental sync against a lean SB view builds on the
//! same row encoders.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Value, json};
use uuid::Uuid;

use crate::output::{FlowDps, SbDesired};

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
            ops.push(
                json!({"op": "insert", "table": "HA_Chassis_Group", "uuid-name": gl,
                "row": {"name": gname, "ha_chassis": ref_set(refs)}}),
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
            "match": f.match_,
            "actions": f.actions,
            "external_ids": map(&f.external_ids),
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
    if !d.sb_options.is_empty() {
        ops.push(json!({"op": "update", "table": "SB_Global", "where": [],
            "row": {"options": map(&d.sb_options)}}));
    }
    ops
}
