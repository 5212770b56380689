//! NB `BFD` (sessions from a logical router port to a next hop) → SB `BFD`, the NB `status`
//! written back, which router ports have BFD, and which static routes are left out because
//! their next hop's session is down: ovn-northd 23.03's `build_bfd_table`, the `bfd` part of
//! `parsed_routes_add` and `bfd_cleanup_connections`, as one pure plan over NB and the SB rows
//! northd finds.
//!
//! # What it does
//!
//! - NB `status` unset: `admin_down` (written back to NB).
//! - An NB row with an SB row (same `logical_port` and `dst_ip`): when the statuses differ
//!   and either is `admin_down`, SB takes NB's; otherwise NB takes SB's (the controller's
//!   finding). The SB row takes NB's `min_tx`, `min_rx`, `detect_mult` (defaults 1000, 1000,
//!   5) and status. Without one: a new SB row with the lowest free `src_port` from 49152 and a
//!   non-zero `disc` (random in 23.03; here a hash of the row, stable across restarts).
//! - The named logical port has BFD (`has_bfd`), except that the port of an SB row left
//!   without an NB row loses it (23.03 resets it after the NB pass, whatever NB says).
//! - A valid static route whose `bfd` names an NB row with its `dst_ip` equal to the route's
//!   `nexthop`: an `admin_down` status becomes `down` (written back); a `down` route is left
//!   out. An NB row that had an SB row before and no such route gets `admin_down`.
//!
//! # What it does not do
//!
//! Run sessions (the controllers do, and write SB `status`).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hf_model::NbSnapshot;
use uuid::Uuid;

/// `BFD_DEF_MINTX`, `BFD_DEF_MINRX`, `BFD_DEF_DETECT_MULT`.
pub const DEFAULTS: (i64, i64, i64) = (1000, 1000, 5);
/// The first `src_port` (`BFD_UDP_SRC_PORT_START`).
pub const SRC_PORT_START: i64 = 49152;

/// An SB `BFD` row as northd finds it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BfdSeen {
    /// `logical_port`.
    pub logical_port: String,
    /// `dst_ip`.
    pub dst_ip: String,
    /// `src_port`.
    pub src_port: i64,
    /// `disc`.
    pub disc: i64,
    /// `status`.
    pub status: String,
}

/// An SB `BFD` row northd wants (keyed by (logical port, dst IP)).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BfdRow {
    /// `src_port`.
    pub src_port: i64,
    /// `disc`.
    pub disc: i64,
    /// `status`.
    pub status: String,
    /// `min_tx`.
    pub min_tx: i64,
    /// `min_rx`.
    pub min_rx: i64,
    /// `detect_mult`.
    pub detect_mult: i64,
}

/// The plan.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BfdPlan {
    /// SB rows by (logical port, dst IP).
    pub sb: BTreeMap<(String, String), BfdRow>,
    /// NB `BFD.status` to write: row → status (only where it differs from NB's).
    pub nb_status: BTreeMap<Uuid, String>,
    /// Logical ports with BFD.
    pub has_bfd: BTreeSet<String>,
    /// Static routes left out (their session is down).
    pub routes_down: BTreeSet<Uuid>,
}

fn status_text(s: Option<&hf_model::nb::BfdStatus>) -> String {
    s.map(|s| s.as_str().to_string()).unwrap_or_default()
}

/// A non-zero discriminator for a new row (stable: a hash of its identity).
fn disc_of(lport: &str, dst: &str) -> i64 {
    let h = lport
        .bytes()
        .chain([0])
        .chain(dst.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    1 + i64::from((h ^ (h >> 32)) as u32 >> 1)
}

/// Whether static route `rt` of router `lr` is one ovn-northd parses (its prefix and next hop
/// parse, of one family, and a router port leads to the next hop).
fn route_valid(
    nb: &NbSnapshot,
    lr: &hf_model::nb::LogicalRouter,
    rt: &hf_model::nb::LogicalRouterStaticRoute,
) -> bool {
    let Some(prefix) = crate::addr::parse_net(rt.ip_prefix.trim()) else {
        return false;
    };
    let Ok(nh) = rt.nexthop.trim().parse::<IpAddr>() else {
        return false;
    };
    if nh.is_ipv4() != prefix.addr().is_ipv4() {
        return false;
    }
    let ports = lr.ports.iter().filter_map(|p| nb.get(*p));
    let on = |p: &hf_model::nb::LogicalRouterPort| {
        p.networks
            .iter()
            .any(|n| n.parse::<ipnet::IpNet>().is_ok_and(|n| n.contains(&nh)))
    };
    match rt.output_port.as_deref().filter(|s| !s.is_empty()) {
        Some(op) => ports.into_iter().any(|p| p.name == op),
        None => ports.into_iter().any(on),
    }
}

/// The plan for `nb` with SB's rows `seen`.
pub fn plan(nb: &NbSnapshot, seen: &[BfdSeen]) -> BfdPlan {
    let mut out = BfdPlan::default();
    if nb.bfd().is_empty() && seen.is_empty() {
        return out;
    }
    let mut sb_only: BTreeMap<(String, String), &BfdSeen> = seen
        .iter()
        .map(|s| ((s.logical_port.clone(), s.dst_ip.clone()), s))
        .collect();
    let mut used: BTreeSet<i64> = seen.iter().map(|s| s.src_port).collect();
    let mut status: BTreeMap<Uuid, String> = BTreeMap::new();
    // NB rows with an SB row before this pass (`bfd_connections`), and the ones a route uses.
    let mut connected: BTreeSet<Uuid> = BTreeSet::new();
    let mut rows: Vec<&hf_model::nb::Bfd> = nb.bfd().values().collect();
    rows.sort_by(|a, b| {
        (&a.logical_port, &a.dst_ip, a.uuid).cmp(&(&b.logical_port, &b.dst_ip, b.uuid))
    });
    for b in &rows {
        let mut st = status_text(b.status.as_ref());
        if st.is_empty() {
            st = "admin_down".into();
        }
        let key = (b.logical_port.clone(), b.dst_ip.clone());
        let (min_tx, min_rx, mult) = (
            b.min_tx.unwrap_or(DEFAULTS.0),
            b.min_rx.unwrap_or(DEFAULTS.1),
            b.detect_mult.unwrap_or(DEFAULTS.2),
        );
        match sb_only.remove(&key) {
            Some(s) => {
                if s.status != st && st != "admin_down" && s.status != "admin_down" {
                    st = s.status.clone();
                }
                out.sb.insert(
                    key,
                    BfdRow {
                        src_port: s.src_port,
                        disc: s.disc,
                        status: st.clone(),
                        min_tx,
                        min_rx,
                        detect_mult: mult,
                    },
                );
                connected.insert(b.uuid);
            }
            None if out.sb.contains_key(&key) => {}
            None => {
                let Some(port) = (SRC_PORT_START..=65535).find(|p| !used.contains(p)) else {
                    continue;
                };
                used.insert(port);
                out.sb.insert(
                    key,
                    BfdRow {
                        src_port: port,
                        disc: disc_of(&b.logical_port, &b.dst_ip),
                        status: st.clone(),
                        min_tx,
                        min_rx,
                        detect_mult: mult,
                    },
                );
            }
        }
        out.has_bfd.insert(b.logical_port.clone());
        status.insert(b.uuid, st);
    }
    for (lport, _) in sb_only.keys() {
        out.has_bfd.remove(lport);
    }
    // The routes.
    let mut used_by_route: BTreeSet<Uuid> = BTreeSet::new();
    for lr in nb.logical_router().values() {
        for rt in lr.static_routes.iter().filter_map(|r| nb.get(*r)) {
            let Some(b) = rt.bfd.and_then(|u| nb.get(u)) else {
                continue;
            };
            if b.dst_ip != rt.nexthop || rt.nexthop == "discard" || !route_valid(nb, lr, rt) {
                continue;
            }
            used_by_route.insert(b.uuid);
            let st = status.entry(b.uuid).or_insert_with(|| "admin_down".into());
            if st == "admin_down" {
                *st = "down".into();
            }
            if st == "down" {
                out.routes_down.insert(rt.uuid);
            }
        }
    }
    for u in &connected {
        if !used_by_route.contains(u)
            && let Some(st) = status.get_mut(u)
            && st != "admin_down"
        {
            *st = "admin_down".into();
        }
    }
    for b in &rows {
        if let Some(st) = status.get(&b.uuid)
            && *st != status_text(b.status.as_ref())
        {
            out.nb_status.insert(b.uuid, st.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminators_are_non_zero_and_differ() {
        let a = disc_of("lrp0", "10.0.0.2");
        let b = disc_of("lrp0", "10.0.0.3");
        assert!(a > 0 && b > 0 && a != b);
        assert!(a <= i64::from(u32::MAX));
    }
}
