//! `ls_in_dhcp_options` and `ls_in_dhcp_response`: native DHCP. holdfast northd does not yet
//! translate `DHCP_Options` rows into `put_dhcp_opts`; a port that asks for them gets a
//! diagnostic (its DHCP requests are switched like any other packet).

use super::Sw;
use super::act::next;
use crate::build::always;
use crate::diag::Diags;
use crate::flow::Flows;
use crate::stage::Stage;
use crate::topo::PortKind;

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    for stage in [Stage::LsInDhcpOptions, Stage::LsInDhcpResponse] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
    }
    let nb = sw.topo.nb;
    for p in sw.ports {
        let port = sw.port(*p);
        if !port.enabled || matches!(port.kind, PortKind::SwitchRouter { .. }) {
            continue;
        }
        let Some(lsp) = nb.logical_switch_port().get(&port.nb) else {
            continue;
        };
        if lsp.dhcpv4_options.is_some() || lsp.dhcpv6_options.is_some() {
            diags.push(
                "Logical_Switch_Port",
                port.nb,
                &port.name,
                "dhcpv4_options/dhcpv6_options are not compiled by holdfast northd yet; the port gets no native DHCP replies",
            );
        }
    }
}
