//! Which SB rows a trace needs, as `monitor_cond` conditions, so one trace on a large SB costs
//! what its packet's path costs (ovn-controller's conditional monitoring, applied to one
//! packet).
//!
//! The shell replicates the small tables whole ([`WHOLE_TABLES`]: chassis, encaps, port
//! groups, address sets, load balancers, ...) and the datapath-scoped ones ([`SCOPED_TABLES`],
//! `Datapath_Binding` among them) under [`Plan::conditions`]: first only the datapath named on
//! the command line (by name or UUID) or the microflow's inport, then, after each round,
//! [`Plan::widen`] reads what arrived and adds the datapath groups containing the plan's
//! datapaths, the peers of their patch and `l3gateway` ports, and the datapaths those peers are
//! on as *neighbours* (only their Datapath_Binding row and the peer port are fetched), until the
//! plan stops growing. [`Plan::scoped`] is the snapshot to translate: neighbours come out
//! without flows, so a walk that enters one stops there; the shell then [`Plan::expand`]s it
//! and traces again. No row of a datapath the packet does not reach is fetched (rows of the
//! whole tables aside), and a neighbour costs two rows.
//!
//! What it does not do: I/O (the shell sends the conditions and waits for the rows).

use std::collections::BTreeSet;

use hf_model::SbSnapshot;
use serde_json::{Value, json};
use uuid::Uuid;

/// Tables replicated whole: small, or needed before any datapath is known.
pub const WHOLE_TABLES: &[&str] = &[
    "SB_Global",
    "Chassis",
    "Chassis_Private",
    "Encap",
    "Gateway_Chassis",
    "HA_Chassis",
    "HA_Chassis_Group",
    "Port_Group",
    "Address_Set",
    "Load_Balancer",
    "DHCP_Options",
    "DHCPv6_Options",
    "Meter",
    "Meter_Band",
    "Chassis_Template_Var",
];

/// Tables scoped to the plan's datapaths (their condition is [`Plan::conditions`]).
pub const SCOPED_TABLES: &[&str] = &[
    "Datapath_Binding",
    "Logical_DP_Group",
    "Logical_Flow",
    "Port_Binding",
    "Multicast_Group",
    "MAC_Binding",
    "Static_MAC_Binding",
    "FDB",
    "IGMP_Group",
    "DNS",
];

/// The datapaths (and what hangs off them) a trace has asked for so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Datapaths whose rows (flows, ports, groups, bindings) are fetched.
    pub datapaths: BTreeSet<Uuid>,
    /// Datapaths next to them (behind a patch or `l3gateway` port) known only by their
    /// Datapath_Binding row and the peer port: a walk that enters one is traced again after
    /// [`Plan::expand`] fetched it.
    pub neighbours: BTreeSet<Uuid>,
    /// Logical_DP_Group UUIDs that contain a fetched datapath.
    pub groups: BTreeSet<Uuid>,
    /// Peer port names fetched wherever they are.
    pub ports: BTreeSet<String>,
    /// Port names whose datapath is fetched (the microflow's inport, when no datapath is
    /// named).
    pub start_ports: BTreeSet<String>,
    /// Datapath names (or UUIDs) asked for on the command line, fetched by
    /// `external_ids:name`, `external_ids:name2` or `_uuid`.
    pub names: BTreeSet<String>,
}

fn uuid(u: &Uuid) -> Value {
    json!(["uuid", u.to_string()])
}

impl Plan {
    /// The `where` clauses (ORed, as `monitor_cond` does) for each of [`SCOPED_TABLES`].
    pub fn conditions(&self, sb: &SbSnapshot) -> Vec<(&'static str, Vec<Value>)> {
        let on_dp = |col: &str| -> Vec<Value> {
            self.datapaths
                .iter()
                .map(|d| json!([col, "==", uuid(d)]))
                .collect()
        };
        let or_false = |mut v: Vec<Value>| {
            if v.is_empty() {
                v.push(json!(false));
            }
            v
        };
        let mut flows = on_dp("logical_datapath");
        flows.extend(
            self.groups
                .iter()
                .map(|g| json!(["logical_dp_group", "==", uuid(g)])),
        );
        let mut ports = on_dp("datapath");
        ports.extend(
            self.ports
                .iter()
                .chain(&self.start_ports)
                .map(|p| json!(["logical_port", "==", p])),
        );
        let includes = |col: &str| -> Vec<Value> {
            self.datapaths
                .iter()
                .map(|d| json!([col, "includes", uuid(d)]))
                .collect()
        };
        let fdb: Vec<Value> = self
            .datapaths
            .iter()
            .filter_map(|d| sb.datapath_binding().get(d))
            .map(|d| json!(["dp_key", "==", d.tunnel_key]))
            .collect();
        let optional_dp = |col: &str| -> Vec<Value> {
            self.datapaths
                .iter()
                .map(|d| json!([col, "==", uuid(d)]))
                .collect()
        };
        let mut dps = on_dp("_uuid");
        dps.extend(
            self.neighbours
                .iter()
                .map(|d| json!(["_uuid", "==", uuid(d)])),
        );
        for n in &self.names {
            for key in ["name", "name2"] {
                dps.push(json!(["external_ids", "includes", ["map", [[key, n]]]]));
            }
            if let Ok(u) = Uuid::parse_str(n) {
                dps.push(json!(["_uuid", "==", uuid(&u)]));
            }
        }
        vec![
            ("Datapath_Binding", or_false(dps)),
            ("Logical_DP_Group", or_false(includes("datapaths"))),
            ("Logical_Flow", or_false(flows)),
            ("Port_Binding", or_false(ports)),
            ("Multicast_Group", or_false(on_dp("datapath"))),
            ("MAC_Binding", or_false(on_dp("datapath"))),
            ("Static_MAC_Binding", or_false(on_dp("datapath"))),
            ("FDB", or_false(fdb)),
            ("IGMP_Group", or_false(optional_dp("datapath"))),
            ("DNS", or_false(includes("datapaths"))),
        ]
    }

    /// Grows the plan from the rows that have arrived: the datapaths named and the start
    /// ports' datapaths, the groups containing its datapaths, the peers of their patch and
    /// `l3gateway` ports, and (as neighbours) the datapaths those peers are on. True when it
    /// grew (the shell then sends the new conditions and waits again).
    pub fn widen(&mut self, sb: &SbSnapshot) -> bool {
        let before = self.clone();
        for (u, d) in sb.datapath_binding() {
            let named = |k: &str| {
                d.external_ids
                    .get(k)
                    .is_some_and(|v| self.names.contains(v))
            };
            if named("name") || named("name2") || self.names.contains(&u.to_string()) {
                self.datapaths.insert(*u);
            }
        }
        for (u, g) in sb.logical_dp_group() {
            if g.datapaths
                .iter()
                .any(|d| self.datapaths.contains(&d.uuid()))
            {
                self.groups.insert(*u);
            }
        }
        for pb in sb.port_binding().values() {
            if self.start_ports.contains(&pb.logical_port) {
                self.datapaths.insert(pb.datapath.uuid());
            }
        }
        for pb in sb.port_binding().values() {
            let d = pb.datapath.uuid();
            if self.ports.contains(&pb.logical_port) && !self.datapaths.contains(&d) {
                self.neighbours.insert(d);
            }
        }
        for d in &self.datapaths {
            self.neighbours.remove(d);
        }
        for pb in sb.port_binding().values() {
            if self.datapaths.contains(&pb.datapath.uuid())
                && matches!(pb.type_.as_str(), "patch" | "l3gateway")
                && let Some(peer) = pb.options.get("peer")
            {
                self.ports.insert(peer.clone());
            }
        }
        *self != before
    }
}

impl Plan {
    /// Moves a neighbour the walk entered into the fetched datapaths. True when it was one.
    pub fn expand(&mut self, d: Uuid) -> bool {
        self.neighbours.remove(&d) && self.datapaths.insert(d)
    }

    /// Adds to [`Plan::ports`] every port an `is_chassis_resident("NAME")` in the flows of
    /// `flows` names (a switch's flows name the router's `cr-` port, on another datapath):
    /// without its binding the port would be unknown and never resident. True when the plan
    /// grew. The names are read from the match text as northd writes them, without parsing.
    pub fn add_resident_ports(&mut self, flows: &SbSnapshot) -> bool {
        const CALL: &str = "is_chassis_resident(\"";
        let before = self.ports.len();
        for lf in flows.logical_flow().values() {
            let mut rest = lf.match_.as_str();
            while let Some(i) = rest.find(CALL) {
                rest = &rest[i + CALL.len()..];
                if let Some(j) = rest.find('"') {
                    self.ports.insert(rest[..j].to_string());
                    rest = &rest[j..];
                }
            }
        }
        self.ports.len() != before
    }

    /// The snapshot to translate: `sb` with each datapath group restricted to the fetched
    /// datapaths, so neighbours come out as datapaths with their peer ports and no flows (a
    /// walk that enters one stops at its first table, and the shell widens and traces again).
    ///
    /// `flows`, when given, holds the Logical_Flow rows (replicated on their own session);
    /// they are added to the result.
    pub fn scoped(&self, sb: &SbSnapshot, flows: Option<&SbSnapshot>) -> SbSnapshot {
        let mut out = sb.clone();
        let mut delta = hf_model::SbDelta::default();
        if let Some(f) = flows {
            delta.logical_flow = f
                .logical_flow()
                .values()
                .filter(|lf| !sb.logical_flow().contains_key(&lf.uuid))
                .map(|lf| hf_model::RowDelta::Insert(lf.clone()))
                .collect();
        }
        for g in sb.logical_dp_group().values() {
            let mut new = g.clone();
            new.datapaths.retain(|d| self.datapaths.contains(&d.uuid()));
            if new.datapaths.len() != g.datapaths.len() {
                delta.logical_dp_group.push(hf_model::RowDelta::Update {
                    old: g.clone(),
                    new,
                });
            }
        }
        out.apply_owned(delta);
        out
    }
}

/// Finds a datapath as ovn-trace does: by UUID, by
/// `external_ids:name`, or by `external_ids:name2`.
pub fn find_datapath(sb: &SbSnapshot, name: &str) -> Result<Uuid, String> {
    if let Ok(u) = Uuid::parse_str(name)
        && sb.datapath_binding().contains_key(&u)
    {
        return Ok(u);
    }
    let by = |key: &str| -> Vec<Uuid> {
        sb.datapath_binding()
            .iter()
            .filter(|(_, d)| d.external_ids.get(key).map(String::as_str) == Some(name))
            .map(|(u, _)| *u)
            .collect()
    };
    for key in ["name", "name2"] {
        match by(key).as_slice() {
            [u] => return Ok(*u),
            [] => {}
            many => {
                return Err(format!(
                    "datapath \"{name}\" is ambiguous: {} datapaths have external_ids:{key}={name}",
                    many.len()
                ));
            }
        }
    }
    Err(format!("unknown datapath \"{name}\""))
}

/// A datapath's friendly name: `external_ids:name`, else `name2`, else its UUID.
pub fn datapath_name(sb: &SbSnapshot, u: &Uuid) -> String {
    sb.datapath_binding()
        .get(u)
        .and_then(|d| {
            d.external_ids
                .get("name")
                .or_else(|| d.external_ids.get("name2"))
                .cloned()
        })
        .unwrap_or_else(|| u.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    /// sw0 - lr0 - sw1 through patch ports, `other` alone; one group of every switch.
    fn sb() -> SbSnapshot {
        let dp = |n: u8, name: &str| {
            (
                u(n).to_string(),
                json!({"insert": {"tunnel_key": n, "external_ids": ["map", [["name", name]]]}}),
            )
        };
        let pb = |n: u8, port: &str, on: u8, peer: Option<&str>| {
            let (ty, opts) = match peer {
                Some(p) => ("patch", json!(["map", [["peer", p]]])),
                None => ("", json!(["map", []])),
            };
            (
                u(n).to_string(),
                json!({"insert": {"logical_port": port, "datapath": ["uuid", u(on).to_string()],
                    "tunnel_key": n, "type": ty, "options": opts}}),
            )
        };
        let obj = |v: Vec<(String, Value)>| Value::Object(v.into_iter().collect());
        let updates = json!({
            "Datapath_Binding": obj(vec![dp(1, "sw0"), dp(2, "lr0"), dp(3, "sw1"), dp(4, "other")]),
            "Port_Binding": obj(vec![
                pb(11, "vm1", 1, None),
                pb(12, "sw0-lr0", 1, Some("lr0-sw0")),
                pb(13, "lr0-sw0", 2, Some("sw0-lr0")),
                pb(14, "lr0-sw1", 2, Some("sw1-lr0")),
                pb(15, "sw1-lr0", 3, Some("lr0-sw1")),
                pb(16, "vm3", 3, None),
                pb(17, "o1", 4, None),
            ]),
            "Logical_DP_Group": obj(vec![(u(20).to_string(), json!({"insert": {"datapaths":
                ["set", [["uuid", u(1).to_string()], ["uuid", u(3).to_string()], ["uuid", u(4).to_string()]]]}}))]),
        });
        let mut s = SbSnapshot::new();
        s.apply_updates2(&updates).unwrap();
        s
    }

    #[test]
    fn widening_stops_at_neighbours_and_expands_on_demand() {
        let sb = sb();
        let mut p = Plan::default();
        p.names.insert("sw0".into());
        while p.widen(&sb) {}
        assert_eq!(p.datapaths, [u(1)].into());
        assert_eq!(p.neighbours, [u(2)].into());
        assert_eq!(p.groups, [u(20)].into());
        assert!(p.ports.contains("lr0-sw0"));
        assert!(p.expand(u(2)));
        while p.widen(&sb) {}
        assert_eq!(p.datapaths, [u(1), u(2)].into());
        assert_eq!(p.neighbours, [u(3)].into());
        // `other` is never asked for.
        let conds = p.conditions(&sb);
        let text = serde_json::to_string(&conds).unwrap();
        assert!(!text.contains(&u(4).to_string()), "{text}");
        // The scoped snapshot's group holds only the fetched datapaths.
        let scoped = p.scoped(&sb, None);
        let g = &scoped.logical_dp_group()[&u(20)];
        let members: BTreeSet<Uuid> = g.datapaths.iter().map(|d| d.uuid()).collect();
        assert_eq!(members, [u(1)].into());
    }

    #[test]
    fn resident_ports_named_by_flows_join_the_plan() {
        let flow = |n: u8, m: &str| {
            (
                u(n).to_string(),
                json!({"insert": {"match": m, "actions": "next;", "table_id": 0, "priority": 1,
                    "pipeline": "ingress", "logical_datapath": ["uuid", u(1).to_string()]}}),
            )
        };
        let updates = json!({"Logical_Flow": Value::Object(
            [
                flow(31, r#"is_chassis_resident("cr-lr0-pub") && !is_chassis_resident("p2")"#),
                flow(32, "ip4"),
            ]
            .into_iter()
            .collect(),
        )});
        let mut flows = SbSnapshot::new();
        flows.apply_updates2(&updates).unwrap();
        let mut p = Plan::default();
        assert!(p.add_resident_ports(&flows));
        assert_eq!(p.ports, ["cr-lr0-pub".to_string(), "p2".into()].into());
        assert!(!p.add_resident_ports(&flows));
    }

    #[test]
    fn datapaths_by_name_uuid_or_not_at_all() {
        let sb = sb();
        assert_eq!(find_datapath(&sb, "lr0"), Ok(u(2)));
        assert_eq!(find_datapath(&sb, &u(3).to_string()), Ok(u(3)));
        assert_eq!(
            find_datapath(&sb, "nope"),
            Err("unknown datapath \"nope\"".to_string())
        );
        let empty = Plan::default().conditions(&sb);
        assert!(empty.iter().all(|(_, c)| c == &vec![json!(false)]));
    }
}
