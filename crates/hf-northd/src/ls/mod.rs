//! The logical switch pipelines (ovn-northd(8) "Logical Switch Datapaths", as OVN 23.03.1
//! writes them): one module per stage, where a module named without `in`/`out` writes the
//! stage of that name in both pipelines (`pre_acl` writes `ls_in_pre_acl` and
//! `ls_out_pre_acl`, whose flows are built from the same facts). [`build`] runs them for one
//! switch in table order.
//!
//! What a switch's flows depend on is gathered once in [`Sw`] (its ports by kind, the ACLs and
//! load balancers that apply, OVN's `has_acls` / `has_stateful_acl` / `has_lb_vip` /
//! `has_unknown`), from [`index::LsIndex`], which [`crate::topo::Topo`] builds once per compile.
//!
//! Not compiled (each a diagnostic where NB asks for it): learned IGMP/MLD groups, QoS queues
//! (`qdisc_queue_id`), load-balancer health checks and affinity, service monitors, native
//! DHCP for `external` ports, copp meters. For chassis without a feature 23.03 uses, stages
//! emit the older form where one exists (port security as explicit flows, `ct_commit_nat`,
//! FDB, `ct_label.label`); `render` lowers the rest.

pub mod acl;
pub mod acl_hint;
pub mod act;
pub mod apply_port_sec;
pub mod arp_rsp;
pub mod check_port_sec;
pub mod dhcp;
pub mod dns;
pub mod external_port;
pub mod hairpin;
pub mod index;
pub mod l2_lkup;
pub mod l2_unknown;
pub mod lb;
pub mod lb_aff;
pub mod lookup_fdb;
pub mod pre_acl;
pub mod pre_lb;
pub mod pre_stateful;
pub mod put_fdb;
pub mod qos;
pub mod stateful;

use hf_expr::Action;
use hf_expr::ast::Expr;
use uuid::Uuid;

use crate::diag::Diags;
use crate::flow::{DpIdx, Flow, Flows, Owner};
use crate::stage::Stage;
use crate::topo::{Port, PortIdx, PortKind, Topo};

use index::{AclInfo, LbInfo};

/// The multicast groups switch flows output to (the names OVN's controllers know; the
/// `tables` module writes the `Multicast_Group` rows).
pub const MC_FLOOD: &str = "_MC_flood";
/// Ports with `unknown` addresses.
pub const MC_UNKNOWN: &str = "_MC_unknown";
/// Every port except router ports.
pub const MC_FLOOD_L2: &str = "_MC_flood_l2";
/// Router ports with multicast relay.
pub const MC_MROUTER_FLOOD: &str = "_MC_mrouter_flood";
/// Ports with `options:mcast_flood=true`.
pub const MC_STATIC: &str = "_MC_static";

/// ACL priorities are offset by this in the ACL stages (OVN_ACL_PRI_OFFSET).
pub const ACL_PRI_OFFSET: u16 = 1000;

/// One switch, as its stages see it.
#[derive(Debug)]
pub struct Sw<'a, 't> {
    /// The topology.
    pub topo: &'a Topo<'t>,
    /// The datapath.
    pub dp: DpIdx,
    /// Its ports.
    pub ports: &'a [PortIdx],
    /// Ports of type `router`.
    pub router_ports: Vec<PortIdx>,
    /// Ports of type `localnet`.
    pub localnet: Vec<PortIdx>,
    /// Some enabled port has `unknown` among its addresses.
    pub has_unknown: bool,
    /// Every ACL row that applies counts, valid or not (OVN's `has_acls`).
    pub has_acls: bool,
    /// Some ACL that applies is `allow-related`.
    pub has_stateful_acl: bool,
    /// Some attached load balancer has a VIP.
    pub has_lb_vip: bool,
    /// The ACLs that apply and parse.
    pub acls: Vec<&'a AclInfo>,
    /// The attached load balancers.
    pub lbs: Vec<&'a LbInfo>,
    /// `NB_Global options:default_acl_drop=true`.
    pub default_acl_drop: bool,
    owner: Owner,
}

impl<'a, 't> Sw<'a, 't> {
    fn new(topo: &'a Topo<'t>, dp: DpIdx) -> Self {
        let d = &topo.datapaths[dp];
        let mut router_ports = Vec::new();
        let mut localnet = Vec::new();
        let mut has_unknown = false;
        for p in &d.ports {
            let port = &topo.ports[*p];
            match port.kind {
                PortKind::SwitchRouter { .. } => router_ports.push(*p),
                PortKind::Localnet => localnet.push(*p),
                _ => {}
            }
            if port.unknown && port.enabled {
                has_unknown = true;
            }
        }
        let ix = &topo.ls;
        Sw {
            topo,
            dp,
            ports: &d.ports,
            router_ports,
            localnet,
            has_unknown,
            has_acls: ix.switch_acl_rows.get(dp).is_some_and(|n| *n > 0),
            has_stateful_acl: ix.switch_stateful.get(dp).copied().unwrap_or(false),
            has_lb_vip: ix.switch_has_vip.get(dp).copied().unwrap_or(false),
            acls: ix
                .switch_acls
                .get(dp)
                .map(|v| v.iter().map(|i| &ix.acls[*i]).collect())
                .unwrap_or_default(),
            lbs: ix
                .switch_lbs
                .get(dp)
                .map(|v| v.iter().map(|i| &ix.lbs[*i]).collect())
                .unwrap_or_default(),
            default_acl_drop: topo.option_true("default_acl_drop"),
            owner: Owner::Datapath(d.name.clone()),
        }
    }

    /// The switch's name.
    pub fn name(&self) -> &str {
        &self.topo.datapaths[self.dp].name
    }

    /// Port `p`.
    pub fn port(&self, p: PortIdx) -> &'a Port {
        &self.topo.ports[p]
    }

    /// `has_stateful_acl || has_lb_vip`: allowed connections are committed.
    pub fn has_stateful(&self) -> bool {
        self.has_stateful_acl || self.has_lb_vip
    }

    /// A flow of the switch itself (owner: the datapath; shared across switches by render).
    #[allow(clippy::too_many_arguments)]
    pub fn dflt(
        &self,
        out: &mut Flows,
        stage: Stage,
        priority: u16,
        disc: &str,
        matches: Expr,
        actions: Vec<Action>,
    ) {
        out.add(
            self.dp,
            stage,
            priority,
            matches,
            actions,
            self.owner.clone(),
            disc,
            None,
        );
    }

    /// A flow that exists for port `p` (owner: the port; hint: its NB row).
    #[allow(clippy::too_many_arguments)]
    pub fn for_port(
        &self,
        out: &mut Flows,
        stage: Stage,
        priority: u16,
        p: PortIdx,
        disc: impl Into<String>,
        matches: Expr,
        actions: Vec<Action>,
    ) {
        let port = &self.topo.ports[p];
        out.add(
            self.dp,
            stage,
            priority,
            matches,
            actions,
            Owner::Port(port.name.clone()),
            disc,
            Some(port.nb),
        );
    }

    /// A flow with every field given (ACL, load balancer owners).
    #[allow(clippy::too_many_arguments)]
    pub fn owned(
        &self,
        out: &mut Flows,
        stage: Stage,
        priority: u16,
        owner: Owner,
        disc: impl Into<String>,
        hint: Option<Uuid>,
        matches: Expr,
        actions: Vec<Action>,
        meter: Option<String>,
    ) {
        out.push(Flow {
            dp: self.dp,
            stage,
            priority,
            matches,
            actions,
            owner,
            disc: disc.into(),
            hint,
            meter,
            mark: None,
        });
    }
}

/// Every flow of switch `dp`.
pub fn build(topo: &Topo<'_>, dp: DpIdx, out: &mut Flows, diags: &mut Diags) {
    let start = out.flows.len();
    let sw = Sw::new(topo, dp);
    check_port_sec::build(&sw, out, diags);
    apply_port_sec::build(&sw, out, diags);
    lookup_fdb::build(&sw, out, diags);
    put_fdb::build(&sw, out, diags);
    pre_acl::build(&sw, out, diags);
    pre_lb::build(&sw, out, diags);
    pre_stateful::build(&sw, out, diags);
    acl_hint::build(&sw, out, diags);
    acl::build(&sw, out, diags);
    qos::build(&sw, out, diags);
    lb_aff::build(&sw, out, diags);
    lb::build(&sw, out, diags);
    hairpin::build(&sw, out, diags);
    stateful::build(&sw, out, diags);
    arp_rsp::build(&sw, out, diags);
    dhcp::build(&sw, out, diags);
    dns::build(&sw, out, diags);
    external_port::build(&sw, out, diags);
    l2_lkup::build(&sw, out, diags);
    l2_unknown::build(&sw, out, diags);
    crate::copp::apply(topo, dp, &mut out.flows[start..], diags);
}

#[cfg(test)]
mod tests;
