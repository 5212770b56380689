//! `Datapath_Binding`: one row per switch and router, keyed by name, with 23.03's
//! `external_ids`: `logical-switch`/`logical-router` (the NB UUID), `name`, `name2` (neutron's
//! network or router name), `interconn-ts`, and for routers `snat-ct-zone` and
//! `always_learn_from_arp_request=false`. `load_balancers` is left empty as 23.03 does.

use std::collections::{BTreeMap, HashMap};

use crate::diag::Diags;
use crate::output::{DpRow, SbDesired};
use crate::stage::DpKind;
use crate::topo::Topo;

/// `requested-tnl-key` (switch `other_config`, router `options`) must be a number in
/// 1..16711680 not requested by another datapath (the first by name keeps it).
pub fn check_requested_keys(topo: &Topo<'_>, diags: &mut Diags) {
    let mut seen: HashMap<u32, &str> = HashMap::new();
    for d in &topo.datapaths {
        let (table, v) = match d.kind {
            DpKind::Switch => (
                "Logical_Switch",
                topo.nb
                    .logical_switch()
                    .get(&d.nb)
                    .and_then(|l| l.other_config.get("requested-tnl-key")),
            ),
            DpKind::Router => (
                "Logical_Router",
                topo.nb
                    .logical_router()
                    .get(&d.nb)
                    .and_then(|l| l.options.get("requested-tnl-key")),
            ),
        };
        let Some(v) = v else { continue };
        match v
            .parse::<u32>()
            .ok()
            .filter(|k| (1..=crate::tables::global::MAX_TUNID).contains(k))
        {
            None => diags.push(
                table,
                d.nb,
                &d.name,
                format!(
                    "requested-tnl-key {v:?} is not a number in 1..{}; a free key is assigned",
                    crate::tables::global::MAX_TUNID
                ),
            ),
            Some(k) => {
                if let Some(other) = seen.get(&k) {
                    diags.push(
                        table,
                        d.nb,
                        &d.name,
                        format!(
                            "requested-tnl-key {k} is already requested by {other:?}; a free key is assigned"
                        ),
                    );
                } else {
                    seen.insert(k, &d.name);
                }
            }
        }
    }
}

/// Adds every datapath.
pub fn build(topo: &Topo<'_>, sb: &mut SbDesired) {
    for d in &topo.datapaths {
        let mut ids = BTreeMap::new();
        ids.insert("name".to_string(), d.name.clone());
        match d.kind {
            DpKind::Switch => {
                ids.insert("logical-switch".to_string(), d.nb.to_string());
                if let Some(ls) = topo.nb.logical_switch().get(&d.nb) {
                    if let Some(n) = ls
                        .external_ids
                        .get("neutron:network_name")
                        .filter(|n| !n.is_empty())
                    {
                        ids.insert("name2".to_string(), n.clone());
                    }
                    if let Some(ts) = ls.other_config.get("interconn-ts") {
                        ids.insert("interconn-ts".to_string(), ts.clone());
                    }
                }
            }
            DpKind::Router => {
                ids.insert("logical-router".to_string(), d.nb.to_string());
                if let Some(lr) = topo.nb.logical_router().get(&d.nb) {
                    if let Some(n) = lr
                        .external_ids
                        .get("neutron:router_name")
                        .filter(|n| !n.is_empty())
                    {
                        ids.insert("name2".to_string(), n.clone());
                    }
                    // smap_get_int: a leading integer; -1 (absent or unparsable) is left out.
                    if let Some(z) = lr
                        .options
                        .get("snat-ct-zone")
                        .and_then(|z| z.trim().parse::<i64>().ok())
                        .filter(|z| *z >= 0)
                    {
                        ids.insert("snat-ct-zone".to_string(), z.to_string());
                    }
                    if lr
                        .options
                        .get("always_learn_from_arp_request")
                        .is_some_and(|v| v == "false")
                    {
                        ids.insert(
                            "always_learn_from_arp_request".to_string(),
                            "false".to_string(),
                        );
                    }
                }
            }
        }
        sb.datapaths.insert(
            d.name.clone(),
            DpRow {
                tunnel_key: d.tunnel_key,
                external_ids: ids,
                load_balancers: Default::default(),
            },
        );
    }
}
