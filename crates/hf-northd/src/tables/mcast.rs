//! `Multicast_Group`: the fixed groups 23.03 writes per datapath, with their fixed tunnel
//! keys, each only when it has a member (as 23.03 creates a group on its first port):
//!
//! | group               | key   | members |
//! |---------------------|-------|---------|
//! | `_MC_flood`         | 32768 | every enabled switch port |
//! | `_MC_unknown`       | 32769 | enabled, non-`external` switch ports with `unknown` addresses |
//! | `_MC_mrouter_flood` | 32770 | router-type ports of routers with `options:mcast_relay`, ports with `options:mcast_flood_reports` |
//! | `_MC_static`        | 32771 | ports (switch or enabled router ports) with `options:mcast_flood` |
//! | `_MC_flood_l2`      | 32772 | enabled switch ports that are not of type router |
//!
//! IGMP-learned groups (32773 and up) come from controllers' `IGMP_Group` rows and are built
//! by [`crate::tables::igmp`].

use std::collections::{BTreeMap, BTreeSet};

use crate::flow::DpIdx;

use crate::output::{IpMcastRow, McRow, SbDesired};
use crate::stage::DpKind;
use crate::tables::opt_true;
use crate::topo::{PortKind, Topo};

/// `_MC_flood`.
pub const MC_FLOOD: &str = "_MC_flood";
/// `_MC_unknown`.
pub const MC_UNKNOWN: &str = "_MC_unknown";
/// `_MC_mrouter_flood`.
pub const MC_MROUTER_FLOOD: &str = "_MC_mrouter_flood";
/// `_MC_static`.
pub const MC_STATIC: &str = "_MC_static";
/// `_MC_flood_l2`.
pub const MC_FLOOD_L2: &str = "_MC_flood_l2";

/// The group's tunnel key (OVN's `OVN_MCAST_*_TUNNEL_KEY`).
pub fn key(name: &str) -> Option<u32> {
    Some(match name {
        MC_FLOOD => 32768,
        MC_UNKNOWN => 32769,
        MC_MROUTER_FLOOD => 32770,
        MC_STATIC => 32771,
        MC_FLOOD_L2 => 32772,
        _ => return None,
    })
}

/// Adds the groups of every datapath.
pub fn build(topo: &Topo<'_>, sb: &mut SbDesired) {
    for p in &topo.ports {
        add_port(topo, p, sb);
    }
}

/// One `IP_Multicast` row per switch: the snooping configuration ovn-controller reads
/// (`build_ip_mcast` in 23.03). Numbers parse as unsigned decimal; anything else is the
/// default, as `smap_get_ullong` reads them.
pub fn build_ip_multicast(topo: &Topo<'_>, sb: &mut SbDesired) {
    let ls = topo.nb.logical_switch();
    for d in &topo.datapaths {
        if d.kind != DpKind::Switch {
            continue;
        }
        let Some(row) = ls.get(&d.nb) else { continue };
        let oc = &row.other_config;
        let num = |k: &str, def: u64| oc.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(def);
        let idle = num("mcast_idle_timeout", 300).clamp(15, 3600);
        let query = num("mcast_query_interval", idle / 2).clamp(1, 3600);
        let text = |k: &str| oc.get(k).cloned();
        sb.ip_multicast.insert(
            d.name.clone(),
            IpMcastRow {
                enabled: opt_true(oc, "mcast_snoop"),
                // `smap_get_bool` with a true default: anything but "false".
                querier: !oc
                    .get("mcast_querier")
                    .is_some_and(|v| v.eq_ignore_ascii_case("false")),
                table_size: i64::try_from(num("mcast_table_size", 2048)).unwrap_or(i64::MAX),
                idle_timeout: idle as i64,
                query_interval: query as i64,
                query_max_resp: i64::try_from(num("mcast_query_max_response", 1))
                    .unwrap_or(i64::MAX),
                eth_src: text("mcast_eth_src"),
                ip4_src: text("mcast_ip4_src"),
                ip6_src: text("mcast_ip6_src"),
            },
        );
    }
}

/// The groups of datapath `dp` alone, as [`build`] makes them (the incremental path's).
pub fn build_dp(topo: &Topo<'_>, dp: DpIdx) -> BTreeMap<(String, String), McRow> {
    let mut sb = SbDesired::default();
    for q in &topo.datapaths[dp].ports {
        add_port(topo, &topo.ports[*q], &mut sb);
    }
    sb.mcgroups
}

/// Every group name [`build`] writes (per datapath).
pub const GROUPS: [&str; 5] = [
    MC_FLOOD,
    MC_UNKNOWN,
    MC_MROUTER_FLOOD,
    MC_STATIC,
    MC_FLOOD_L2,
];

/// Adds port `p` to the groups it belongs in.
fn add_port(topo: &Topo<'_>, p: &crate::topo::Port, sb: &mut SbDesired) {
    let mut add = |dp: &str, group: &'static str, port: &str| {
        sb.mcgroups
            .entry((dp.to_string(), group.to_string()))
            .or_insert_with(|| McRow {
                tunnel_key: key(group).unwrap_or_default(),
                ports: BTreeSet::new(),
            })
            .ports
            .insert(port.to_string());
    };
    {
        let dp = &topo.datapaths[p.dp];
        if !p.enabled {
            return;
        }
        if dp.kind == DpKind::Router {
            if opt_true(&p.options, "mcast_flood") {
                add(&dp.name, MC_STATIC, &p.name);
            }
            return;
        }
        add(&dp.name, MC_FLOOD, &p.name);
        let is_router = matches!(p.kind, PortKind::SwitchRouter { .. });
        if !is_router {
            add(&dp.name, MC_FLOOD_L2, &p.name);
        }
        let external = matches!(&p.kind, PortKind::OtherLsp(t) if t == "external");
        if p.unknown && !external {
            add(&dp.name, MC_UNKNOWN, &p.name);
        }
        if let PortKind::SwitchRouter { lrp: Some(l) } = p.kind
            && topo
                .nb
                .logical_router()
                .get(&topo.datapaths[topo.ports[l].dp].nb)
                .is_some_and(|lr| opt_true(&lr.options, "mcast_relay"))
        {
            add(&dp.name, MC_MROUTER_FLOOD, &p.name);
        }
        if opt_true(&p.options, "mcast_flood_reports") {
            add(&dp.name, MC_MROUTER_FLOOD, &p.name);
        }
        if opt_true(&p.options, "mcast_flood") {
            add(&dp.name, MC_STATIC, &p.name);
        }
    }
}
