//! The SB rows besides logical flows, as real ovn-northd 23.03 writes them, one module per
//! table: [`datapath`] (`Datapath_Binding`), [`port`] (`Port_Binding` and the HA chassis
//! groups of chassis-redirect and external ports), [`mcast`] (`Multicast_Group`), [`groups`]
//! (`Port_Group` and `Address_Set`), [`lb`] (`Load_Balancer`), [`global`] (`SB_Global.options`)
//! [`dns`] (`DNS`), [`dhcp`] (the `DHCP_Options`/`DHCPv6_Options` code tables) and
//! [`mac_binding`] (MAC_Binding ageing, a pure function the daemon calls
//! on its clock).
//!
//! What SB already holds and ovn-northd would keep by writing it back to NB comes in through
//! [`crate::Keys`]: tunnel keys, container tags, queue ids, `mac_prefix`/`svc_monitor_mac`,
//! and where ports are bound (for `HA_Chassis_Group.ref_chassis` and per-chassis queue ids).
//!
//! Also [`dns`] (`DNS`).
//!
//! [`meter`] (`Meter` and `Meter_Band`), [`template_var`] (`Chassis_Template_Var`), [`mirror`]
//! (`Mirror`).
//! `Service_Monitor` rows are [`crate::svc`]'s plan, copied here.
//!
//! What it does not do: IGMP groups (learned by controllers),
//! static MAC bindings, and `ipv6_ra_pd_list` (read back from
//! SB by OVN). Dynamic addresses are [`crate::ipam`]'s, written to NB by the daemon. VXLAN mode's smaller key spaces are not
//! served (`max_tunid` is Geneve's).

pub mod datapath;
pub mod dhcp;
pub mod dns;
pub mod global;
pub mod groups;
pub mod igmp;
pub mod lb;
pub mod mac_binding;
pub mod mcast;
pub mod meter;
pub mod mirror;
pub mod port;
pub mod template_var;

use crate::Options;
use crate::diag::Diags;
use crate::output::SbDesired;
use crate::topo::Topo;

/// Fills every non-flow table of `sb`.
pub fn build(topo: &Topo<'_>, opts: &Options, sb: &mut SbDesired, diags: &mut Diags) {
    datapath::build(topo, sb);
    datapath::check_requested_keys(topo, diags);
    port::build(topo, &opts.keys, sb, diags);
    mcast::build(topo, sb);
    mcast::build_ip_multicast(topo, sb);
    sb.bfd = topo.bfd.sb.clone();
    igmp::build(topo, &opts.keys.igmp, &opts.keys.mc_keys, sb);
    dns::build(topo, sb);
    dhcp::build(sb);
    meter::build(topo, sb, diags);
    template_var::build(topo, sb, diags);
    mirror::build(topo, sb, diags);
    groups::port_groups(topo, &opts.render, sb, diags);
    lb::build(topo, &opts.render, sb, diags);
    global::build(topo, opts, sb);
    // The health checks' monitors, planned with the topology ([`crate::svc`]).
    sb.service_monitors = topo.svc.monitors.clone();
    // After `global` (the `svc_monitor_mac` set holds the MAC chosen there).
    groups::address_sets(topo, sb, diags);
}

/// `true`/`false` option parsing as OVN's `smap_get_bool` does it (only `true` is true).
pub(crate) fn opt_true(m: &impl hf_model::StrMap, key: &str) -> bool {
    m.get_str(key).is_some_and(|v| v == "true")
}
