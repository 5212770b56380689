//! The SB rows besides logical flows: `Datapath_Binding`, `Port_Binding`, `Multicast_Group`,
//! `Port_Group`, `Address_Set`, `Load_Balancer`, `SB_Global` options.

use crate::diag::Diags;
use crate::output::{DpRow, PortRow, SbDesired};
use crate::render::RenderOptions;
use crate::stage::DpKind;
use crate::topo::{PortKind, Topo};

/// Fills every non-flow table of `sb`.
pub fn build(topo: &Topo<'_>, opts: &RenderOptions, sb: &mut SbDesired, diags: &mut Diags) {
    let _ = (opts, diags);
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
}
