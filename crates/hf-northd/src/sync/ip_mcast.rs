//! `IP_Multicast` rows, one per switch, keyed by their datapath's name: inserted, updated
//! column by column, deleted when the switch is gone (as 23.03's `build_ip_mcast` does); and
//! stale `IGMP_Group` rows deleted (without chassis or datapath, or of a datapath northd does
//! not have: a controller that crashed, as 23.03's `build_mcast_groups` purges them).

use std::collections::HashMap;

use serde_json::{Value, json};
use uuid::Uuid;

use super::{Ops, Scope, by_key, gone, visit};
use crate::daemon::sbview::SbView;
use crate::output::{IpMcastRow, SbDesired};

/// The insert operations for an SB holding none of northd's rows.
pub(super) fn insert_ops(
    d: &SbDesired,
    dp_ref: &dyn Fn(&str) -> Option<Value>,
    ops: &mut Vec<Value>,
) {
    for (dp, m) in &d.ip_multicast {
        let Some(dpr) = dp_ref(dp) else { continue };
        let mut row = json!({"datapath": dpr, "enabled": m.enabled, "querier": m.querier,
            "table_size": m.table_size, "idle_timeout": m.idle_timeout,
            "query_interval": m.query_interval, "query_max_resp": m.query_max_resp});
        for (col, v) in [
            ("eth_src", &m.eth_src),
            ("ip4_src", &m.ip4_src),
            ("ip6_src", &m.ip6_src),
        ] {
            if let Some(v) = v {
                row[col] = json!(v);
            }
        }
        ops.push(json!({"op": "insert", "table": "IP_Multicast", "row": row}));
    }
}

/// The diff's operations for `IP_Multicast`.
pub(super) fn diff(
    o: &mut Ops<'_>,
    sb: &SbView,
    d: &SbDesired,
    scope: Option<&Scope>,
    dp_uuid: &HashMap<&str, Uuid>,
) {
    use hf_model::sb as s;
    let dp_name: HashMap<Uuid, &str> = sb
        .datapath_binding
        .values()
        .filter_map(|r| r.external_ids.get("name").map(|n| (r.uuid, n.as_str())))
        .collect();
    let (old, dups) = by_key(sb.ip_multicast.values(), |r| {
        dp_name.get(&r.datapath.uuid()).copied()
    });
    for (name, m) in visit(&d.ip_multicast, scope.map(|s| &s.ip_multicast)) {
        let Some(dp) = dp_uuid.get(name.as_str()) else {
            continue;
        };
        let prev = old.get(name.as_str()).copied();
        let mut new = prev.cloned().unwrap_or_else(|| s::IpMulticast {
            uuid: o.fresh(),
            ..Default::default()
        });
        fill(&mut new, m);
        new.datapath = (*dp).into();
        o.put(&new, prev);
    }
    if scope.is_none() {
        for r in dups {
            o.delete(r);
        }
    }
    for r in gone(&old, &d.ip_multicast, scope.map(|s| &s.ip_multicast)) {
        o.delete(r);
    }
}

/// Deletes the stale `IGMP_Group` rows; `dp_uuid` holds every datapath northd keeps.
pub(super) fn purge_igmp(o: &mut Ops<'_>, sb: &SbView, dp_uuid: &HashMap<&str, Uuid>) {
    let live: std::collections::HashSet<Uuid> = dp_uuid.values().copied().collect();
    let mut stale: Vec<&hf_model::sb::IgmpGroup> = sb
        .igmp_group
        .values()
        .filter(|g| g.chassis.is_none() || g.datapath.is_none_or(|d| !live.contains(&d.uuid())))
        .collect();
    stale.sort_by_key(|g| g.uuid);
    for g in stale {
        o.delete(g);
    }
}

/// Sets `r`'s columns from `m`; the source addresses only when set (23.03 never clears them).
fn fill(r: &mut hf_model::sb::IpMulticast, m: &IpMcastRow) {
    r.enabled = Some(m.enabled);
    r.querier = Some(m.querier);
    r.table_size = Some(m.table_size);
    r.idle_timeout = Some(m.idle_timeout);
    r.query_interval = Some(m.query_interval);
    r.query_max_resp = Some(m.query_max_resp);
    for (col, v) in [
        (&mut r.eth_src, &m.eth_src),
        (&mut r.ip4_src, &m.ip4_src),
        (&mut r.ip6_src, &m.ip6_src),
    ] {
        if let Some(v) = v {
            col.clone_from(v);
        }
    }
}
