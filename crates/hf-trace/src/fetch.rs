//! Which SB rows a trace needs, as `monitor_cond` conditions, so one trace on a large SB costs
//! what its packet's path costs (ovn-controller's conditional monitoring, applied to one
//! packet).
//!
//! The shell replicates the small tables whole ([`WHOLE_TABLES`]: chassis, encaps, port
//! groups, address sets, load balancers, `Datapath_Binding`, `Logical_DP_Group`, ...), the
//! topology ([`TOPOLOGY_PORT_TYPES`]: every `patch`, `l3gateway` and `chassisredirect`
//! `Port_Binding`, a few rows per datapath) and the datapath-scoped tables
//! ([`SCOPED_TABLES`]) under [`Plan::conditions`]. Since the whole topology is local, the plan
//! knows at once which datapaths a datapath's patch and `l3gateway` ports lead to (its
//! *neighbours*) and which groups hold it: asking for one more datapath is one condition
//! change (one per session: flows travel on their own), not one round per hop of the widening.
//!
//! [`Plan::widen`] resolves the datapath named on the command line (by name or UUID) or the
//! microflow's inport, and computes groups, peers and neighbours from what is local.
//! [`Plan::scoped`] is the snapshot to translate: the fetched datapaths whole, neighbours as
//! their peer ports only, without flows, so a walk that enters one stops there; the shell then
//! [`Plan::expand`]s it and traces again. [`Plan::scoped_delta`] is the same snapshot as a
//! change to the previous one, so a round translates and compiles only what it fetched. No scoped row
//! (flows, ports, groups, bindings) of a datapath the packet does not reach is fetched; the
//! whole tables and the topology rows aside.
//!
//! What it does not do: I/O (the shell sends the conditions and waits for the rows).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use hf_model::sb::{Delta as SbDelta, LogicalFlow, PortBinding};
use hf_model::{RowDelta, SbSnapshot, Table};
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
    "Datapath_Binding",
    "Logical_DP_Group",
];

/// Tables scoped to the plan's datapaths (their condition is [`Plan::conditions`]).
pub const SCOPED_TABLES: &[&str] = &[
    "Logical_Flow",
    "Port_Binding",
    "Multicast_Group",
    "MAC_Binding",
    "Static_MAC_Binding",
    "FDB",
    "IGMP_Group",
    "DNS",
];

/// `Port_Binding` types always fetched, wherever they are: the links between datapaths (and
/// the `cr-` ports `is_chassis_resident()` names), so neighbours are known without a round.
pub const TOPOLOGY_PORT_TYPES: &[&str] = &["patch", "l3gateway", "chassisredirect"];

/// The datapaths (and what hangs off them) a trace has asked for so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Datapaths whose rows (flows, ports, groups, bindings) are fetched.
    pub datapaths: BTreeSet<Uuid>,
    /// Datapaths next to them (behind a patch or `l3gateway` port), or holding a port of
    /// [`Plan::ports`], translated as their Datapath_Binding row and those ports alone: a
    /// walk that enters one is traced again after [`Plan::expand`] fetched it.
    pub neighbours: BTreeSet<Uuid>,
    /// Logical_DP_Group UUIDs that contain a fetched datapath.
    pub groups: BTreeSet<Uuid>,
    /// The peers of the fetched datapaths' patch and `l3gateway` ports (topology rows, always
    /// local).
    pub peers: BTreeSet<String>,
    /// Further port names fetched wherever they are (those `is_chassis_resident()` names).
    pub ports: BTreeSet<String>,
    /// Port names whose datapath is fetched (the microflow's inport, when no datapath is
    /// named).
    pub start_ports: BTreeSet<String>,
    /// Datapath names (or UUIDs) asked for on the command line, found by
    /// `external_ids:name`, `external_ids:name2` or `_uuid`.
    pub names: BTreeSet<String>,
}

fn uuid(u: &Uuid) -> Value {
    json!(["uuid", u.to_string()])
}

fn is_link(pb: &PortBinding) -> bool {
    matches!(pb.type_.as_str(), "patch" | "l3gateway")
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
        // A port that is a topology row arrives anyway.
        let topology = |p: &String| {
            sb.port_binding_all_by_logical_port(p)
                .any(|pb| TOPOLOGY_PORT_TYPES.contains(&pb.type_.as_str()))
        };
        ports.extend(
            self.ports
                .iter()
                .chain(&self.start_ports)
                .filter(|p| !topology(p))
                .map(|p| json!(["logical_port", "==", p])),
        );
        ports.extend(TOPOLOGY_PORT_TYPES.iter().map(|t| json!(["type", "==", t])));
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
        vec![
            ("Logical_Flow", or_false(flows)),
            ("Port_Binding", ports),
            ("Multicast_Group", or_false(on_dp("datapath"))),
            ("MAC_Binding", or_false(on_dp("datapath"))),
            ("Static_MAC_Binding", or_false(on_dp("datapath"))),
            ("FDB", or_false(fdb)),
            ("IGMP_Group", or_false(on_dp("datapath"))),
            ("DNS", or_false(includes("datapaths"))),
        ]
    }

    /// Grows the plan from the rows that are local: the datapaths named and the start ports'
    /// datapaths, the groups containing its datapaths, the peers of their patch and
    /// `l3gateway` ports, and (as neighbours) the datapaths those peers and [`Plan::ports`]
    /// are on. Repeats until nothing grows (no round trip is needed in between: the topology
    /// is local). True when it grew (the shell then sends the new conditions).
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
        for p in &self.start_ports {
            for pb in sb.port_binding_all_by_logical_port(p) {
                self.datapaths.insert(pb.datapath.uuid());
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
        for d in &self.datapaths {
            for pb in sb.port_binding_all_by_datapath(hf_model::RowRef::new(*d)) {
                if is_link(pb)
                    && let Some(peer) = pb.options.get("peer")
                {
                    self.peers.insert(peer.clone());
                }
            }
        }
        for name in self.peers.iter().chain(&self.ports) {
            for pb in sb.port_binding_all_by_logical_port(name) {
                let d = pb.datapath.uuid();
                if !self.datapaths.contains(&d) {
                    self.neighbours.insert(d);
                }
            }
        }
        for d in &self.datapaths {
            self.neighbours.remove(d);
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
    /// `flows` names (a switch's flows name the router's `cr-` port, on another datapath) that
    /// `sb` does not hold yet: without its binding the port would be unknown and never
    /// resident. True when the plan grew. The names are read from the match text as northd
    /// writes them, without parsing.
    pub fn add_resident_ports(&mut self, flows: &SbSnapshot, sb: &SbSnapshot) -> bool {
        const CALL: &str = "is_chassis_resident(\"";
        let before = self.ports.len();
        for lf in flows.logical_flow().values() {
            let mut rest: &str = &lf.match_;
            while let Some(i) = rest.find(CALL) {
                rest = &rest[i + CALL.len()..];
                if let Some(j) = rest.find('"') {
                    let name = &rest[..j];
                    let here = sb
                        .port_binding_all_by_logical_port(name)
                        .any(|pb| self.datapaths.contains(&pb.datapath.uuid()));
                    if !here && !self.ports.contains(name) {
                        self.ports.insert(name.to_string());
                    }
                    rest = &rest[j..];
                }
            }
        }
        self.ports.len() != before
    }

    /// The snapshot to translate: `sb` with only the fetched datapaths' rows and, for each
    /// neighbour, the ports that lead to it (so neighbours come out as datapaths with their
    /// peer ports and no flows: a walk that enters one stops at its first table, and the shell
    /// widens and traces again); each datapath group restricted to the fetched datapaths.
    /// Every `Datapath_Binding` row is kept (a datapath neither fetched nor a neighbour comes
    /// out empty, with no port leading to it), so widening never changes that table and an
    /// incremental translation of the snapshot need not start afresh.
    ///
    /// `flows`, when given, holds the Logical_Flow rows (replicated on their own session);
    /// they are added to the result.
    pub fn scoped(&self, sb: &SbSnapshot, flows: Option<&SbSnapshot>) -> SbSnapshot {
        let mut out = SbSnapshot::new();
        out.apply_owned(self.scoped_delta(&out, sb, flows));
        out
    }

    /// The change that turns `have` (an earlier [`Plan::scoped`] result, kept by the caller)
    /// into [`Plan::scoped`]`(sb, flows)`, row by row: what a widening round fetched arrives as
    /// inserts (and the groups that gained a member as updates), so the caller applies it and
    /// translates only what it touched instead of cloning and translating the whole snapshot
    /// again. Every table is compared in UUID order against what it should hold, so rows
    /// changed or removed in `sb` since are carried too.
    pub fn scoped_delta(
        &self,
        have: &SbSnapshot,
        sb: &SbSnapshot,
        flows: Option<&SbSnapshot>,
    ) -> SbDelta {
        let mut d = SbDelta::default();
        macro_rules! whole {
            ($($t:ident),* $(,)?) => {
                $( d.$t = diff(have.$t(), sb.$t().values().map(Cow::Borrowed)); )*
            };
        }
        whole!(
            address_set,
            bfd,
            chassis,
            chassis_private,
            chassis_template_var,
            connection,
            controller_event,
            dhcp_options,
            dhcpv6_options,
            dns,
            datapath_binding,
            encap,
            fdb,
            gateway_chassis,
            ha_chassis,
            ha_chassis_group,
            igmp_group,
            ip_multicast,
            load_balancer,
            mac_binding,
            meter,
            meter_band,
            mirror,
            multicast_group,
            port_group,
            rbac_permission,
            rbac_role,
            sb_global,
            ssl,
            service_monitor,
            static_mac_binding,
        );
        // Flows: `sb`'s (none when they travel on their own session) and `flows`'.
        let lf: Vec<&LogicalFlow> = match flows {
            Some(f) if !sb.logical_flow().is_empty() => {
                let mut all: BTreeMap<Uuid, &LogicalFlow> =
                    f.logical_flow().iter().map(|(u, r)| (*u, r)).collect();
                all.extend(sb.logical_flow().iter().map(|(u, r)| (*u, r)));
                all.into_values().collect()
            }
            Some(f) => f.logical_flow().values().collect(),
            None => sb.logical_flow().values().collect(),
        };
        d.logical_flow = diff(have.logical_flow(), lf.into_iter().map(Cow::Borrowed));
        d.logical_dp_group = diff(
            have.logical_dp_group(),
            sb.logical_dp_group()
                .values()
                .filter(|g| self.groups.contains(&g.uuid))
                .map(|g| {
                    if g.datapaths
                        .iter()
                        .all(|d| self.datapaths.contains(&d.uuid()))
                    {
                        Cow::Borrowed(g)
                    } else {
                        let mut new = g.clone();
                        new.datapaths.retain(|d| self.datapaths.contains(&d.uuid()));
                        Cow::Owned(new)
                    }
                }),
        );
        d.port_binding = diff(
            have.port_binding(),
            sb.port_binding()
                .values()
                .filter(|pb| {
                    self.datapaths.contains(&pb.datapath.uuid())
                        || self.peers.contains(&pb.logical_port)
                        || self.ports.contains(&pb.logical_port)
                })
                .map(Cow::Borrowed),
        );
        d
    }
}

/// The changes that turn `have` into `want` (rows in UUID order).
fn diff<'a, T: Table>(
    have: &BTreeMap<Uuid, T>,
    want: impl Iterator<Item = Cow<'a, T>>,
) -> Vec<RowDelta<T>> {
    let mut out = Vec::new();
    let mut old = have.iter().peekable();
    for w in want {
        let u = w.uuid();
        while let Some((_, r)) = old.next_if(|(k, _)| **k < u) {
            out.push(RowDelta::Delete(r.clone()));
        }
        match old.next_if(|(k, _)| **k == u) {
            Some((_, r)) if *r == *w => {}
            Some((_, r)) => out.push(RowDelta::Update {
                old: r.clone(),
                new: w.into_owned(),
            }),
            None => out.push(RowDelta::Insert(w.into_owned())),
        }
    }
    out.extend(old.map(|(_, r)| RowDelta::Delete(r.clone())));
    out
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
        assert!(p.peers.contains("lr0-sw0"));
        // The snapshot to translate: sw0 whole, lr0 as the port to sw0 (every datapath's row
        // is kept; those neither fetched nor neighbours have no port).
        let scoped = p.scoped(&sb, None);
        let dps: BTreeSet<Uuid> = scoped.datapath_binding().keys().copied().collect();
        assert_eq!(dps, [u(1), u(2), u(3), u(4)].into());
        let ports: BTreeSet<&str> = scoped
            .port_binding()
            .values()
            .map(|pb| pb.logical_port.as_str())
            .collect();
        assert_eq!(ports, ["vm1", "sw0-lr0", "lr0-sw0"].into());
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

    /// A Logical_Flow row on datapath `dp` (`None`: on group 20).
    fn lf(n: u8, dp: Option<u8>) -> (String, Value) {
        let on = match dp {
            Some(d) => json!({"logical_datapath": ["uuid", u(d).to_string()]}),
            None => json!({"logical_dp_group": ["uuid", u(20).to_string()]}),
        };
        let mut row = json!({"match": format!("reg0 == {n}"), "actions": "next;", "table_id": 0,
            "priority": 1, "pipeline": "ingress"});
        row.as_object_mut()
            .unwrap()
            .extend(on.as_object().unwrap().clone());
        (u(n).to_string(), json!({"insert": row}))
    }

    #[test]
    fn scoped_delta_carries_each_round_and_equals_a_fresh_scoping() {
        let sb = sb();
        let mut flows = SbSnapshot::new();
        let obj = |v: Vec<(String, Value)>| Value::Object(v.into_iter().collect());
        flows
            .apply_updates2(&json!({"Logical_Flow": obj(vec![
                lf(40, Some(1)), lf(41, Some(2)), lf(42, Some(3)), lf(43, None)])}))
            .unwrap();
        let mut p = Plan::default();
        p.names.insert("sw0".into());
        while p.widen(&sb) {}
        let mut have = SbSnapshot::new();
        let mut deltas = Vec::new();
        for next in [Some(u(2)), Some(u(3)), None] {
            let d = p.scoped_delta(&have, &sb, Some(&flows));
            have.apply_owned(d.clone());
            deltas.push(d);
            assert_eq!(have, p.scoped(&sb, Some(&flows)), "round {}", deltas.len());
            if let Some(n) = next {
                assert!(p.expand(n));
                while p.widen(&sb) {}
            }
        }
        // Nothing changed since: nothing to carry.
        assert!(p.scoped_delta(&have, &sb, Some(&flows)).is_empty());
        // Entering lr0 carries its ports towards sw1 (lr0-sw1 and its peer) as inserts, and
        // nothing else: every other row was there already.
        let inserted = |d: &SbDelta| -> BTreeSet<Uuid> {
            d.port_binding
                .iter()
                .filter(|r| matches!(r, RowDelta::Insert(_)))
                .map(|r| r.uuid())
                .collect()
        };
        assert_eq!(inserted(&deltas[1]), [u(14), u(15)].into());
        assert_eq!(deltas[1].len(), 2, "{:?}", deltas[1]);
        // Entering sw1 carries vm3, and the group as an update that gains sw1.
        assert_eq!(inserted(&deltas[2]), [u(16)].into());
        match &deltas[2].logical_dp_group[..] {
            [RowDelta::Update { old, new }] => {
                assert_eq!(old.datapaths.len(), 1);
                assert_eq!(new.datapaths.len(), 2);
            }
            other => panic!("expected the group's update, got {other:?}"),
        }
        // A row removed from SB since leaves the scoped snapshot as a delete.
        let mut gone = flows.clone();
        gone.apply_updates2(&json!({"Logical_Flow": {u(40).to_string(): {"delete": null}}}))
            .unwrap();
        let d = p.scoped_delta(&have, &sb, Some(&gone));
        assert_eq!(d.len(), 1);
        assert!(matches!(&d.logical_flow[..], [RowDelta::Delete(r)] if r.uuid == u(40)));
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
        assert!(p.add_resident_ports(&flows, &SbSnapshot::new()));
        assert_eq!(p.ports, ["cr-lr0-pub".to_string(), "p2".into()].into());
        assert!(!p.add_resident_ports(&flows, &SbSnapshot::new()));
        // A port of a fetched datapath is there already.
        let sb = sb();
        let mut p = Plan::default();
        p.datapaths.insert(u(1));
        let updates = json!({"Logical_Flow": {u(33).to_string(): {"insert": {
            "match": r#"is_chassis_resident("vm1") && is_chassis_resident("vm3")"#,
            "actions": "next;", "table_id": 0, "priority": 1, "pipeline": "ingress",
            "logical_datapath": ["uuid", u(1).to_string()]}}}});
        let mut flows = SbSnapshot::new();
        flows.apply_updates2(&updates).unwrap();
        assert!(p.add_resident_ports(&flows, &sb));
        assert_eq!(p.ports, ["vm3".to_string()].into());
        // Its datapath becomes a neighbour.
        while p.widen(&sb) {}
        assert!(p.neighbours.contains(&u(3)));
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
        // An empty plan asks for nothing but the topology's port bindings.
        let empty = Plan::default().conditions(&sb);
        for (t, c) in &empty {
            if *t == "Port_Binding" {
                let types: Vec<Value> = TOPOLOGY_PORT_TYPES
                    .iter()
                    .map(|ty| json!(["type", "==", ty]))
                    .collect();
                assert_eq!(c, &types);
            } else {
                assert_eq!(c, &vec![json!(false)], "{t}");
            }
        }
    }
}
