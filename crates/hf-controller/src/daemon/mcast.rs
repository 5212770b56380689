//! Multicast snooping, the controller's part ([`super::Controller`]): which switches snoop
//! here (SB `IP_Multicast` with `enabled`, that have local ports), sent to a version-8
//! datapath when that changes ([`ToDatapath::Mcast`]), and the groups it learns written as
//! this chassis's SB `IGMP_Group` rows (as pinctrl's `ip_mcast_sync` writes them: one row per
//! (address, datapath, chassis) holding the local member ports; address `mrouters` for the
//! multicast-router ports). Rows of switches that no longer snoop here are deleted.
//!
//! It does not parse IGMP/MLD or keep timers (the datapath does, `hf_datapath::snoop`). With
//! an older datapath, a snooping switch with local ports is a warning: nothing is learned.
//!
//! [`ToDatapath::Mcast`]: hf_datapath::proto::ToDatapath::Mcast

use std::collections::{BTreeMap, BTreeSet};

use hf_datapath::proto::{self, ToDatapath};
use hf_datapath::snoop::{McastCfgMsg, McastGroupMsg, McastGroupsMsg};
use hf_model::SbSnapshot;
use hf_model::sb::Delta;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Controller, Level};

/// Group writes waiting for the view to show them: datapath name → its groups here.
pub type Pending = BTreeMap<String, Vec<McastGroupMsg>>;

impl Controller {
    /// Sends the datapath the snooping switches when they changed (or since its hello).
    pub(super) fn sync_mcast(&mut self) {
        if !self.dp_hello || !std::mem::take(&mut self.mcast_due) {
            return;
        }
        let sb = self.sb.model();
        let list = local_snooping(sb, &self.cfg.chassis, &self.local_set());
        // Our rows of switches that do not snoop here (any more): deleted.
        let snooping: BTreeSet<&str> = list.iter().map(|c| c.datapath.as_str()).collect();
        let stale: Vec<String> = our_rows(sb, &self.cfg.chassis)
            .filter_map(|g| {
                let d = sb.datapath_binding().get(&g.datapath?.uuid())?;
                let name = crate::translate::datapath_name(d);
                (!snooping.contains(name.as_str())).then_some(name)
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !stale.is_empty() {
            self.with_state(|st| {
                for d in stale {
                    st.igmp.insert(d, Vec::new());
                }
            });
            self.write_due = true;
        }
        if self.dp_version < proto::MCAST_VERSION {
            if !list.is_empty() && !self.mcast_warned {
                self.mcast_warned = true;
                self.say(
                    Level::Warn,
                    format!(
                        "the datapath speaks control protocol version {}, multicast snooping needs {}: switches {} learn no groups here",
                        self.dp_version,
                        proto::MCAST_VERSION,
                        list.iter()
                            .map(|c| c.datapath.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            return;
        }
        // Compared without the seeds (they are read once, for a datapath that starts empty).
        let bare: Vec<McastCfgMsg> = list
            .iter()
            .map(|c| McastCfgMsg {
                known: Vec::new(),
                ..c.clone()
            })
            .collect();
        if self.mcast_sent.as_ref() == Some(&bare) {
            return;
        }
        if !list.is_empty() || self.mcast_sent.is_some() {
            self.say(
                Level::Info,
                format!(
                    "multicast snooping: {} switch(es) to the datapath",
                    list.len()
                ),
            );
        }
        self.send_dp(&ToDatapath::Mcast(list));
        self.mcast_sent = Some(bare);
    }

    /// [`hf_datapath::proto::FromDatapath::McastGroups`]: queued for the write round.
    pub(super) fn mcast_groups(&mut self, v: Vec<McastGroupsMsg>) {
        self.with_state(|st| {
            for g in v {
                st.igmp.insert(g.datapath, g.groups);
            }
        });
        self.write_due = true;
    }
}

/// Whether change set `d` can change [`local_snooping`]: an `IP_Multicast` or
/// `Datapath_Binding` row, or the binding of a local port (its switch; `local_pb` says
/// whether `d` has one). Other bindings (every remote port) cannot.
pub(super) fn touches_mcast(d: &Delta, local_pb: bool) -> bool {
    local_pb || !d.ip_multicast.is_empty() || !d.datapath_binding.is_empty()
}

fn our_rows<'a>(
    sb: &'a SbSnapshot,
    chassis: &'a str,
) -> impl Iterator<Item = &'a hf_model::sb::IgmpGroup> + 'a {
    let ours: Option<Uuid> = sb
        .chassis()
        .values()
        .find(|c| c.name == chassis)
        .map(|c| c.uuid);
    sb.igmp_group()
        .values()
        .filter(move |g| ours.is_some() && g.chassis.map(|c| c.uuid()) == ours)
}

/// The snooping switches with `local` ports, by name, each with its configuration, local
/// ports and this chassis's `IGMP_Group` rows (the seeds).
pub fn local_snooping(
    sb: &SbSnapshot,
    chassis: &str,
    local: &BTreeSet<String>,
) -> Vec<McastCfgMsg> {
    let mut ports: BTreeMap<Uuid, BTreeSet<String>> = BTreeMap::new();
    for p in local {
        for pb in sb.port_binding_all_by_logical_port(p) {
            ports
                .entry(pb.datapath.uuid())
                .or_default()
                .insert(p.clone());
        }
    }
    let mut out = Vec::new();
    for m in sb.ip_multicast().values() {
        if m.enabled != Some(true) {
            continue;
        }
        let dp = m.datapath.uuid();
        let (Some(d), Some(ps)) = (sb.datapath_binding().get(&dp), ports.get(&dp)) else {
            continue;
        };
        let name = crate::translate::datapath_name(d);
        let pb_name: BTreeMap<Uuid, &str> = sb
            .port_binding()
            .values()
            .filter(|p| p.datapath.uuid() == dp)
            .map(|p| (p.uuid, p.logical_port.as_str()))
            .collect();
        let mut known: Vec<McastGroupMsg> = our_rows(sb, chassis)
            .filter(|g| g.datapath.map(|x| x.uuid()) == Some(dp))
            .map(|g| McastGroupMsg {
                address: g.address.clone(),
                ports: g
                    .ports
                    .iter()
                    .filter_map(|p| pb_name.get(&p.uuid()).map(|n| n.to_string()))
                    .collect(),
            })
            .collect();
        known.sort();
        let num = |v: Option<i64>, def: u64| v.and_then(|x| u64::try_from(x).ok()).unwrap_or(def);
        let idle = num(m.idle_timeout, 300);
        out.push(McastCfgMsg {
            datapath: name,
            querier: m.querier == Some(true),
            table_size: num(m.table_size, 2048),
            idle_timeout: idle,
            // pinctrl: half the idle timeout, at least 1 s, when unset.
            query_interval: num(m.query_interval, (idle / 2).max(1)),
            query_max_resp: num(m.query_max_resp, 1),
            eth_src: m.eth_src.clone(),
            ip4_src: m.ip4_src.clone(),
            ip6_src: m.ip6_src.clone(),
            ports: ps.iter().cloned().collect(),
            known,
            seq_no: m.seq_no,
        });
    }
    out.sort_by(|a, b| a.datapath.cmp(&b.datapath));
    out
}

/// Whether the view shows `groups` as this chassis's rows of switch `dp` (or the switch is
/// gone: nothing to write).
pub fn written(sb: &SbSnapshot, chassis: &str, dp: &str, groups: &[McastGroupMsg]) -> bool {
    match desired(sb, chassis, dp, groups) {
        None => true,
        Some(want) => ops_for(sb, chassis, want).is_empty(),
    }
}

/// What the rows of switch `dp` should be: (datapath, chassis, address → port rows).
struct Want {
    dp: Uuid,
    chassis: Uuid,
    groups: BTreeMap<String, BTreeSet<Uuid>>,
}

fn desired(sb: &SbSnapshot, chassis: &str, dp: &str, groups: &[McastGroupMsg]) -> Option<Want> {
    let dpu = super::super::neigh::datapath_by_name(sb, dp)?;
    let ch = sb.chassis().values().find(|c| c.name == chassis)?.uuid;
    let mut out = BTreeMap::new();
    for g in groups {
        let ports: BTreeSet<Uuid> = g
            .ports
            .iter()
            .flat_map(|p| sb.port_binding_all_by_logical_port(p))
            .filter(|pb| pb.datapath.uuid() == dpu)
            .map(|pb| pb.uuid)
            .collect();
        if !ports.is_empty() {
            out.insert(g.address.clone(), ports);
        }
    }
    Some(Want {
        dp: dpu,
        chassis: ch,
        groups: out,
    })
}

fn uuid_set(s: &BTreeSet<Uuid>) -> Value {
    json!([
        "set",
        s.iter()
            .map(|u| json!(["uuid", u.to_string()]))
            .collect::<Vec<_>>()
    ])
}

fn ops_for(sb: &SbSnapshot, chassis: &str, want: Want) -> Vec<Value> {
    let mut ops = Vec::new();
    let mut seen = BTreeSet::new();
    for g in our_rows(sb, chassis).filter(|g| g.datapath.map(|d| d.uuid()) == Some(want.dp)) {
        let have: BTreeSet<Uuid> = g.ports.iter().map(|p| p.uuid()).collect();
        let w = json!([["_uuid", "==", ["uuid", g.uuid.to_string()]]]);
        match want.groups.get(&g.address) {
            Some(ports) if seen.insert(g.address.clone()) => {
                if *ports != have {
                    ops.push(json!({"op": "update", "table": "IGMP_Group", "where": w,
                        "row": {"ports": uuid_set(ports)}}));
                }
            }
            // Gone, or a second row of the same address.
            _ => ops.push(json!({"op": "delete", "table": "IGMP_Group", "where": w})),
        }
    }
    for (addr, ports) in &want.groups {
        if !seen.contains(addr) {
            ops.push(json!({"op": "insert", "table": "IGMP_Group", "row": {
                "address": addr,
                "datapath": ["uuid", want.dp.to_string()],
                "chassis": ["uuid", want.chassis.to_string()],
                "ports": uuid_set(ports)}}));
        }
    }
    ops
}

/// The operations that make this chassis's `IGMP_Group` rows the pending groups.
pub fn igmp_ops(sb: &SbSnapshot, chassis: &str, pending: &Pending) -> Vec<Value> {
    let mut ops = Vec::new();
    for (dp, groups) in pending {
        if let Some(want) = desired(sb, chassis, dp, groups) {
            ops.extend(ops_for(sb, chassis, want));
        }
    }
    ops
}
