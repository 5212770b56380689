//! The SB rows besides logical flows: `Datapath_Binding`, `Port_Binding`, `Multicast_Group`,
//! `Port_Group`, `Address_Set`, `Load_Balancer`, `SB_Global` options.

use crate::diag::Diags;
use crate::output::{DpRow, PortRow, SbDesired};
use crate::render::RenderOptions;
use crate::stage::DpKind;
use crate::topo::{PortKind, Topo};

/// Fills every non-flow table of `sb`.
pub fn build(topo: &Topo<'_>, opts: &RenderOptions, sb: &mut SbDesired, diags: &mut Diags) {
    let _ = diags;
    for d in &topo.datapaths {
        let mut external_ids = std::collections::BTreeMap::new();
        external_ids.insert("name".to_string(), d.name.clone());
        let key = match d.kind {
            DpKind::Switch => "logical-switch",
            DpKind::Router => "logical-router",
        };
        external_ids.insert(key.to_string(), d.nb.to_string());
        sb.datapaths.insert(
            d.name.clone(),
            DpRow {
                tunnel_key: d.tunnel_key,
                external_ids,
                load_balancers: Default::default(),
            },
        );
    }
    for p in &topo.ports {
        let type_ = match &p.kind {
            PortKind::Vif => "",
            PortKind::SwitchRouter { .. } | PortKind::RouterPort { .. } => "patch",
            PortKind::Localnet => "localnet",
            PortKind::Localport => "localport",
            PortKind::OtherLsp(t) => t.as_str(),
            PortKind::ChassisRedirect { .. } => "chassisredirect",
        };
        let mut row = PortRow {
            datapath: topo.datapaths[p.dp].name.clone(),
            tunnel_key: p.tunnel_key,
            type_: type_.to_string(),
            ..Default::default()
        };
        match &p.kind {
            PortKind::SwitchRouter { lrp: Some(l) } => {
                row.options
                    .insert("peer".into(), topo.ports[*l].name.clone());
            }
            PortKind::RouterPort {
                switch_peer: Some(l),
                ..
            }
            | PortKind::RouterPort { peer: Some(l), .. } => {
                row.options
                    .insert("peer".into(), topo.ports[*l].name.clone());
            }
            _ => {}
        }
        // `port_security` verbatim from NB (the controller's check_in/out_port_sec() read it).
        if !p.is_lrp()
            && let Some(lsp) = topo.nb.logical_switch_port().get(&p.nb)
        {
            row.port_security = lsp.port_security.clone();
        }
        sb.ports.insert(p.name.clone(), row);
    }
    if sb.port_groups.is_empty() && sb.address_sets.is_empty() {
        port_groups_and_address_sets(topo, opts, sb);
    }
}

/// `Port_Group` (one per port group and switch, `<key>_<name>`, in the 20.09+ layout) and
/// `Address_Set` (NB's, plus `<pg>_ip4`/`<pg>_ip6` with the addresses of a port group's ports),
/// which the switch ACLs' `@pg` and `$set` references resolve against. (Written by the `ls`
/// helper so ACLs can be checked; the `tables` helper owns this and may replace it.)
pub fn port_groups_and_address_sets(topo: &Topo<'_>, opts: &RenderOptions, sb: &mut SbDesired) {
    let nb = topo.nb;
    let per_dp = opts.features.contains("port-group-per-datapath");
    for a in nb.address_set().values() {
        sb.address_sets
            .insert(a.name.clone(), a.addresses.iter().cloned().collect());
    }
    for pg in nb.port_group().values() {
        let mut v4 = std::collections::BTreeSet::new();
        let mut v6 = std::collections::BTreeSet::new();
        let mut by_dp: std::collections::BTreeMap<u32, std::collections::BTreeSet<String>> =
            Default::default();
        for r in &pg.ports {
            let Some(lsp) = nb.get(*r) else { continue };
            let Some(p) = topo.port(&lsp.name) else {
                continue;
            };
            by_dp
                .entry(topo.datapaths[p.dp].tunnel_key)
                .or_default()
                .insert(p.name.clone());
            for a in &p.addresses {
                v4.extend(a.ipv4.iter().map(|n| n.addr().to_string()));
                v6.extend(a.ipv6.iter().map(|n| n.addr().to_string()));
            }
        }
        if per_dp {
            for (k, ports) in by_dp {
                sb.port_groups.insert(format!("{k}_{}", pg.name), ports);
            }
        } else {
            sb.port_groups
                .insert(pg.name.clone(), by_dp.into_values().flatten().collect());
        }
        sb.address_sets.insert(format!("{}_ip4", pg.name), v4);
        sb.address_sets.insert(format!("{}_ip6", pg.name), v6);
    }
}
