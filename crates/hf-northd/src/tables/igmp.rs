//! IGMP/MLD-learned multicast groups: the controllers' SB `IGMP_Group` rows (one per
//! datapath, chassis and group address, with the chassis's ports that joined) become one
//! `Multicast_Group` per (switch, group address), as ovn-northd 23.03's `build_mcast_groups`
//! makes them:
//!
//! - the group is named by the row's `address` text; its ports are the union over chassis of
//!   the rows' ports, leaving out ports that are not switch ports, ports with
//!   `options:mcast_flood=true` (they get all multicast anyway) and switch ports whose router
//!   has `options:mcast_relay=true`; plus the switch's localnet ports. A row left with no port
//!   makes no group.
//! - the pseudo-address `mrouters` adds its ports to `_MC_mrouter_flood` instead.
//! - a router with `options:mcast_relay=true` gets, for every routable group learned on a
//!   switch it connects to (IPv4, or IPv6 [`routable6`]), a group of the same name holding the
//!   router port (its `cr-` port when it has one), unless the port has `options:mcast_flood`.
//! - tunnel keys: a group SB already has keeps its key; a new one takes the lowest free key
//!   from 32773 up (ovn-northd allocates in hash order with a moving hint; holdfast in name
//!   order, so a fresh SB's keys can differ from ovn-northd's by a permutation within a
//!   datapath — the parity test compares them as such).
//!
//! Flows ([`flows`]): one `ls_in_l2_lkup` priority-90 flow per group of a switch, except
//! link-local groups (224.0.0.0/24, ff02::1, ff02::2, ff05::2), at most
//! `other_config:mcast_table_size` (default 2048) per family; router groups make no flow.
//!
//! What holdfast does not do here: delete stale `IGMP_Group` rows (those of a deleted
//! datapath or without chassis) as ovn-northd does; they are ignored instead.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::flow::DpIdx;
use crate::output::{McRow, SbDesired};
use crate::stage::DpKind;
use crate::tables::opt_true;
use crate::topo::{PortKind, Topo};

/// The lowest key of a learned group (`OVN_MIN_IP_MULTICAST`).
pub const MIN_KEY: u32 = 32773;
/// The highest (`OVN_MAX_IP_MULTICAST`).
pub const MAX_KEY: u32 = 65535;
/// The pseudo-address of the multicast-router entries (`OVN_IGMP_GROUP_MROUTERS`).
pub const MROUTERS: &str = "mrouters";
/// `mcast_table_size`'s default (`OVN_MCAST_DEFAULT_MAX_ENTRIES`).
pub const DEFAULT_TABLE_SIZE: u64 = 2048;

/// One SB `IGMP_Group` row, resolved to names (what the compile reads).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IgmpSeen {
    /// The datapath's name (`Datapath_Binding.external_ids:name`).
    pub datapath: String,
    /// `address`: an IPv4 or IPv6 group, or `mrouters`.
    pub address: String,
    /// `chassis` name (only to keep rows of different chassis apart).
    pub chassis: String,
    /// `ports`' `logical_port`s.
    pub ports: Vec<String>,
}

/// One learned group of one datapath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Learned {
    /// The `Multicast_Group` name (the address text of the first row seen).
    pub name: String,
    /// The parsed address.
    pub addr: IpAddr,
    /// Member ports.
    pub ports: BTreeSet<String>,
}

/// Parses a group address as OVN does (IPv4 first, then IPv6).
fn parse(a: &str) -> Option<IpAddr> {
    a.parse::<Ipv4Addr>()
        .map(IpAddr::V4)
        .or_else(|_| a.parse::<Ipv6Addr>().map(IpAddr::V6))
        .ok()
}

/// RFC 4291 2.7: a routable IPv6 multicast group (scope above link-local, not reserved).
pub fn routable6(a: &Ipv6Addr) -> bool {
    let scope = a.octets()[1] & 0x0f;
    !matches!(scope, 0 | 1 | 2 | 0xf)
}

/// Whether a relaying router sits behind switch port `p` (its peer router has
/// `options:mcast_relay=true`); returns that router port.
fn relay_peer(topo: &Topo<'_>, p: &crate::topo::Port) -> Option<usize> {
    let PortKind::SwitchRouter { lrp: Some(l) } = p.kind else {
        return None;
    };
    topo.nb
        .logical_router()
        .get(&topo.datapaths[topo.ports[l].dp].nb)
        .is_some_and(|lr| opt_true(&lr.options, "mcast_relay"))
        .then_some(l)
}

/// Every datapath's learned groups (switch groups from `IGMP_Group`, then the relaying
/// routers' groups) and the extra `_MC_mrouter_flood` members, per datapath index.
#[derive(Debug)]
pub struct Plan {
    /// Datapath → groups, by parsed address.
    pub groups: BTreeMap<DpIdx, BTreeMap<IpAddr, Learned>>,
    /// Datapath → ports the `mrouters` rows add to `_MC_mrouter_flood`.
    pub mrouters: BTreeMap<DpIdx, BTreeSet<String>>,
}

/// Plans the learned groups from `rows`.
pub fn plan(topo: &Topo<'_>, rows: &[IgmpSeen]) -> Plan {
    let mut groups: BTreeMap<DpIdx, BTreeMap<IpAddr, Learned>> = BTreeMap::new();
    let mut mrouters: BTreeMap<DpIdx, BTreeSet<String>> = BTreeMap::new();
    for r in rows {
        let Some(&dp) = topo.dp_by_name.get(&r.datapath) else {
            continue;
        };
        let addr = if r.address == MROUTERS {
            None
        } else {
            match parse(&r.address) {
                Some(a) => Some(a),
                None => continue,
            }
        };
        let ports: Vec<String> = r
            .ports
            .iter()
            .filter(|n| {
                let Some(&pi) = topo.port_by_name.get(n.as_str()) else {
                    return false;
                };
                let p = &topo.ports[pi];
                topo.datapaths[p.dp].kind == DpKind::Switch
                    && !matches!(
                        p.kind,
                        PortKind::RouterPort { .. } | PortKind::ChassisRedirect { .. }
                    )
                    && !opt_true(&p.options, "mcast_flood")
                    && relay_peer(topo, p).is_none()
            })
            .cloned()
            .collect();
        if ports.is_empty() {
            continue;
        }
        match addr {
            None => mrouters.entry(dp).or_default().extend(ports),
            Some(a) => groups
                .entry(dp)
                .or_default()
                .entry(a)
                .or_insert_with(|| Learned {
                    name: r.address.clone(),
                    addr: a,
                    ports: BTreeSet::new(),
                })
                .ports
                .extend(ports),
        }
    }
    // Relay: the switches' groups onto the routers that relay.
    let mut relayed: BTreeMap<DpIdx, BTreeMap<IpAddr, Learned>> = BTreeMap::new();
    for (&dp, gs) in &groups {
        for &sp in &topo.datapaths[dp].ports {
            let Some(l) = relay_peer(topo, &topo.ports[sp]) else {
                continue;
            };
            let lrp = &topo.ports[l];
            if opt_true(&lrp.options, "mcast_flood") {
                continue;
            }
            let member = topo
                .ports
                .iter()
                .find(|c| matches!(c.kind, PortKind::ChassisRedirect { of } if of == l))
                .map_or_else(|| lrp.name.clone(), |c| c.name.clone());
            for g in gs.values() {
                if let IpAddr::V6(a) = g.addr
                    && !routable6(&a)
                {
                    continue;
                }
                relayed
                    .entry(lrp.dp)
                    .or_default()
                    .entry(g.addr)
                    .or_insert_with(|| Learned {
                        name: g.name.clone(),
                        addr: g.addr,
                        ports: BTreeSet::new(),
                    })
                    .ports
                    .insert(member.clone());
            }
        }
    }
    for (dp, gs) in relayed {
        let e = groups.entry(dp).or_default();
        for (a, g) in gs {
            e.entry(a)
                .or_insert_with(|| Learned {
                    name: g.name.clone(),
                    addr: a,
                    ports: BTreeSet::new(),
                })
                .ports
                .extend(g.ports);
        }
    }
    // Localnet ports join every group of their switch.
    for (&dp, gs) in groups.iter_mut() {
        let localnet: Vec<String> = topo.datapaths[dp]
            .ports
            .iter()
            .map(|&p| &topo.ports[p])
            .filter(|p| matches!(p.kind, PortKind::Localnet))
            .map(|p| p.name.clone())
            .collect();
        for g in gs.values_mut() {
            g.ports.extend(localnet.iter().cloned());
        }
    }
    Plan { groups, mrouters }
}

/// Adds the learned groups to `sb.mcgroups` (after the fixed groups: `mrouters` entries join
/// `_MC_mrouter_flood`), keeping the keys SB has (`keys`: (datapath, group) → key).
pub fn build(
    topo: &Topo<'_>,
    rows: &[IgmpSeen],
    keys: &BTreeMap<(String, String), u32>,
    sb: &mut SbDesired,
) {
    let plan = plan(topo, rows);
    for (dp, ports) in plan.mrouters {
        let name = &topo.datapaths[dp].name;
        sb.mcgroups
            .entry((name.clone(), super::mcast::MC_MROUTER_FLOOD.to_string()))
            .or_insert_with(|| McRow {
                tunnel_key: super::mcast::key(super::mcast::MC_MROUTER_FLOOD).unwrap_or_default(),
                ports: BTreeSet::new(),
            })
            .ports
            .extend(ports);
    }
    for (dp, gs) in plan.groups {
        let name = &topo.datapaths[dp].name;
        let mut used: BTreeSet<u32> = BTreeSet::new();
        let mut fresh = Vec::new();
        let mut by_name: BTreeMap<&str, &Learned> = BTreeMap::new();
        for g in gs.values() {
            by_name.insert(&g.name, g);
        }
        for (gname, g) in &by_name {
            match keys.get(&(name.clone(), gname.to_string())) {
                Some(&k) if (MIN_KEY..=MAX_KEY).contains(&k) && used.insert(k) => {
                    sb.mcgroups.insert(
                        (name.clone(), gname.to_string()),
                        McRow {
                            tunnel_key: k,
                            ports: g.ports.clone(),
                        },
                    );
                }
                _ => fresh.push(*g),
            }
        }
        // 23.03's allocation: the next free key after a hint that starts at 32773 (so the
        // first is 32774), wrapping to 32773 after 65535.
        let mut free = (MIN_KEY + 1..=MAX_KEY).chain(std::iter::once(MIN_KEY));
        for g in fresh {
            let Some(k) = free.by_ref().find(|k| !used.contains(k)) else {
                break;
            };
            used.insert(k);
            sb.mcgroups.insert(
                (name.clone(), g.name.clone()),
                McRow {
                    tunnel_key: k,
                    ports: g.ports.clone(),
                },
            );
        }
    }
}

/// Whether 23.03 writes no flow for this group (RFC 4541 2.1.2 / RFC 4291 2.7.1).
pub fn link_local(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => {
            let s = v.segments();
            s[1..7] == [0; 6] && matches!((s[0], s[7]), (0xff02, 1) | (0xff02, 2) | (0xff05, 2))
        }
    }
}

/// The groups of switch `dp` that get an `ls_in_l2_lkup` flow, in address order, at most
/// `mcast_table_size` per family.
pub fn flow_groups(topo: &Topo<'_>, rows: &[IgmpSeen], dp: DpIdx) -> Vec<Learned> {
    if rows.is_empty() || topo.datapaths[dp].kind != DpKind::Switch {
        return Vec::new();
    }
    let name = &topo.datapaths[dp].name;
    if !rows.iter().any(|r| &r.datapath == name) {
        return Vec::new();
    }
    let size = topo
        .nb
        .logical_switch()
        .get(&topo.datapaths[dp].nb)
        .and_then(|ls| {
            ls.other_config
                .get("mcast_table_size")
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(DEFAULT_TABLE_SIZE);
    let mut plan = plan(topo, rows);
    let Some(gs) = plan.groups.remove(&dp) else {
        return Vec::new();
    };
    let (mut n4, mut n6) = (0u64, 0u64);
    let mut out = Vec::new();
    for g in gs.into_values() {
        if link_local(&g.addr) {
            continue;
        }
        let n = if g.addr.is_ipv4() { &mut n4 } else { &mut n6 };
        if *n >= size {
            continue;
        }
        *n += 1;
        out.push(g);
    }
    out
}
