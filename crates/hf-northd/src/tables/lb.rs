//! `Load_Balancer`: one SB row per NB load balancer applied to at least one switch (directly
//! or through a load balancer group), as 23.03 writes it: `name`, `vips` and `protocol`
//! copied, `options` copied plus `hairpin_orig_tuple=true`, `external_ids:lb_id` = the NB
//! UUID, and the switches as a `datapath_group` when the chassis have `ls-dpg-column`, else in
//! `datapaths`. Router-only load balancers get no SB row (23.03 neither).
//!
//! Also the router-side helpers other tables need: a router's load balancers and their VIP
//! addresses.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hf_model::nb;

use crate::addr::parse_ip_port;
use crate::diag::Diags;
use crate::output::{LbRow, SbDesired};
use crate::render::RenderOptions;
use crate::stage::DpKind;
use crate::topo::Topo;

/// The load balancers of a router: its own and those of its groups, each once, by UUID.
pub fn router_lbs<'a>(topo: &Topo<'a>, lr: &nb::LogicalRouter) -> Vec<&'a nb::LoadBalancer> {
    collect(topo, &lr.load_balancer, &lr.load_balancer_group)
}

fn collect<'a>(
    topo: &Topo<'a>,
    lbs: &BTreeSet<hf_model::RowRef<nb::LoadBalancer>>,
    groups: &BTreeSet<hf_model::RowRef<nb::LoadBalancerGroup>>,
) -> Vec<&'a nb::LoadBalancer> {
    let nb = topo.nb;
    let mut out: BTreeMap<uuid::Uuid, &'a nb::LoadBalancer> = BTreeMap::new();
    for r in lbs {
        if let Some(l) = nb.get(*r) {
            out.insert(l.uuid, l);
        }
    }
    for g in groups.iter().filter_map(|g| nb.get(*g)) {
        for r in &g.load_balancer {
            if let Some(l) = nb.get(*r) {
                out.insert(l.uuid, l);
            }
        }
    }
    out.into_values().collect()
}

/// The VIP addresses of `lbs` (IPv4, IPv6), as text. Unparsable VIPs are skipped (the
/// stages that build VIP flows report them).
pub fn vip_ips(lbs: &[&nb::LoadBalancer]) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
    for ip in lbs.iter().flat_map(|l| vip_addrs(l)) {
        match ip {
            IpAddr::V4(a) => v4.insert(a.to_string()),
            IpAddr::V6(a) => v6.insert(a.to_string()),
        };
    }
    // A template VIP (`^vip`) lands among 23.03's IPv6 VIPs whatever its family (its
    // parsed address stays all-zero, which is not IPv4-mapped).
    for l in lbs.iter().filter(|l| crate::lb_template::is_template(l)) {
        v6.extend(crate::lb_template::vip_texts(l));
    }
    (v4, v6)
}

/// The VIP addresses of one load balancer (none for a template).
pub fn vip_addrs(lb: &nb::LoadBalancer) -> Vec<IpAddr> {
    if crate::lb_template::is_template(lb) {
        return Vec::new();
    }
    lb.vips
        .keys()
        .filter_map(|k| parse_ip_port(k).map(|(ip, _)| ip))
        .collect()
}

/// Adds the switch load balancers.
pub fn build(topo: &Topo<'_>, opts: &RenderOptions, sb: &mut SbDesired, diags: &mut Diags) {
    let dp_group = opts.features.contains("ls-dpg-column");
    let mut by_lb: BTreeMap<uuid::Uuid, (&nb::LoadBalancer, BTreeSet<String>)> = BTreeMap::new();
    for d in topo.datapaths.iter().filter(|d| d.kind == DpKind::Switch) {
        let Some(ls) = topo.nb.logical_switch().get(&d.nb) else {
            continue;
        };
        for l in collect(topo, &ls.load_balancer, &ls.load_balancer_group) {
            by_lb
                .entry(l.uuid)
                .or_insert_with(|| (l, BTreeSet::new()))
                .1
                .insert(d.name.clone());
        }
    }
    let mut lbs: Vec<_> = by_lb.into_values().collect();
    lbs.sort_by(|a, b| a.0.name.cmp(&b.0.name).then(a.0.uuid.cmp(&b.0.uuid)));
    for (l, switches) in lbs {
        if sb.load_balancers.contains_key(&l.name) {
            diags.push(
                "Load_Balancer",
                l.uuid,
                &l.name,
                "another load balancer on a switch has the same name; SB load balancers are keyed by name, so this one gets no SB row (its flows are still built)",
            );
            continue;
        }
        let mut options = l.options.clone();
        options.insert("hairpin_orig_tuple".into(), "true".into());
        let mut external_ids = BTreeMap::new();
        external_ids.insert("lb_id".to_string(), l.uuid.to_string());
        sb.load_balancers.insert(
            l.name.clone(),
            LbRow {
                vips: crate::lb_template::sb_vips(l).unwrap_or_else(|| l.vips.clone().into()),
                protocol: l.protocol.as_ref().map(|p| p.as_str().to_string()),
                options: options.into(),
                external_ids,
                datapaths: switches,
                dp_group,
            },
        );
    }
}
