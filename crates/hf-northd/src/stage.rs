//! The logical pipelines' stages: one enum, table numbers derived from the order of declaration.
//!
//! The stage lists and names are OVN 23.03's (`ovn-northd(8)`), so a real `ovn-controller`, real
//! `ovn-trace` and operators reading `ovn-sbctl lflow-list` see the tables they know. Table
//! numbers are never written by hand: [`Stage::table`] is the stage's position within its
//! pipeline.

use std::fmt;

/// Which kind of datapath a pipeline belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DpKind {
    /// A logical switch.
    Switch,
    /// A logical router.
    Router,
}

/// Ingress or egress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pipeline {
    /// `ingress`.
    Ingress,
    /// `egress`.
    Egress,
}

impl Pipeline {
    /// `ingress` / `egress`, as SB's `Logical_Flow.pipeline`.
    pub fn name(self) -> &'static str {
        match self {
            Pipeline::Ingress => "ingress",
            Pipeline::Egress => "egress",
        }
    }
}

macro_rules! stages {
    ($( $kind:ident $pipe:ident : [ $( $variant:ident = $name:literal ),* $(,)? ] )*) => {
        /// A stage of a logical pipeline.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Stage {
            $( $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )* )*
        }

        impl Stage {
            /// Every stage, pipeline by pipeline, in table order.
            pub const ALL: &'static [Stage] = &[ $( $( Stage::$variant, )* )* ];

            /// OVN's stage name (`ls_in_acl`), written as `external_ids:stage-name`.
            pub fn name(self) -> &'static str {
                match self { $( $( Stage::$variant => $name, )* )* }
            }

            /// The datapath kind and pipeline the stage belongs to.
            pub fn placement(self) -> (DpKind, Pipeline) {
                match self { $( $( Stage::$variant => (DpKind::$kind, Pipeline::$pipe), )* )* }
            }

            /// The stage's table number: its position within its pipeline.
            pub fn table(self) -> u8 {
                $(
                    {
                        let list: &[Stage] = &[ $( Stage::$variant, )* ];
                        if let Some(i) = list.iter().position(|s| *s == self) {
                            return i as u8;
                        }
                    }
                )*
                0
            }
        }
    };
}

stages! {
    Switch Ingress: [
        LsInCheckPortSec = "ls_in_check_port_sec",
        LsInApplyPortSec = "ls_in_apply_port_sec",
        LsInLookupFdb = "ls_in_lookup_fdb",
        LsInPutFdb = "ls_in_put_fdb",
        LsInPreAcl = "ls_in_pre_acl",
        LsInPreLb = "ls_in_pre_lb",
        LsInPreStateful = "ls_in_pre_stateful",
        LsInAclHint = "ls_in_acl_hint",
        LsInAcl = "ls_in_acl",
        LsInQosMark = "ls_in_qos_mark",
        LsInQosMeter = "ls_in_qos_meter",
        LsInLbAffCheck = "ls_in_lb_aff_check",
        LsInLb = "ls_in_lb",
        LsInLbAffLearn = "ls_in_lb_aff_learn",
        LsInPreHairpin = "ls_in_pre_hairpin",
        LsInNatHairpin = "ls_in_nat_hairpin",
        LsInHairpin = "ls_in_hairpin",
        LsInAclAfterLb = "ls_in_acl_after_lb",
        LsInStateful = "ls_in_stateful",
        LsInArpRsp = "ls_in_arp_rsp",
        LsInDhcpOptions = "ls_in_dhcp_options",
        LsInDhcpResponse = "ls_in_dhcp_response",
        LsInDnsLookup = "ls_in_dns_lookup",
        LsInDnsResponse = "ls_in_dns_response",
        LsInExternalPort = "ls_in_external_port",
        LsInL2Lkup = "ls_in_l2_lkup",
        LsInL2Unknown = "ls_in_l2_unknown",
    ]
    Switch Egress: [
        LsOutPreAcl = "ls_out_pre_acl",
        LsOutPreLb = "ls_out_pre_lb",
        LsOutPreStateful = "ls_out_pre_stateful",
        LsOutAclHint = "ls_out_acl_hint",
        LsOutAcl = "ls_out_acl",
        LsOutQosMark = "ls_out_qos_mark",
        LsOutQosMeter = "ls_out_qos_meter",
        LsOutStateful = "ls_out_stateful",
        LsOutCheckPortSec = "ls_out_check_port_sec",
        LsOutApplyPortSec = "ls_out_apply_port_sec",
    ]
    Router Ingress: [
        LrInAdmission = "lr_in_admission",
        LrInLookupNeighbor = "lr_in_lookup_neighbor",
        LrInLearnNeighbor = "lr_in_learn_neighbor",
        LrInIpInput = "lr_in_ip_input",
        LrInUnsnat = "lr_in_unsnat",
        LrInDefrag = "lr_in_defrag",
        LrInLbAffCheck = "lr_in_lb_aff_check",
        LrInDnat = "lr_in_dnat",
        LrInLbAffLearn = "lr_in_lb_aff_learn",
        LrInEcmpStateful = "lr_in_ecmp_stateful",
        LrInNdRaOptions = "lr_in_nd_ra_options",
        LrInNdRaResponse = "lr_in_nd_ra_response",
        LrInIpRoutingPre = "lr_in_ip_routing_pre",
        LrInIpRouting = "lr_in_ip_routing",
        LrInIpRoutingEcmp = "lr_in_ip_routing_ecmp",
        LrInPolicy = "lr_in_policy",
        LrInPolicyEcmp = "lr_in_policy_ecmp",
        LrInArpResolve = "lr_in_arp_resolve",
        LrInChkPktLen = "lr_in_chk_pkt_len",
        LrInLargerPkts = "lr_in_larger_pkts",
        LrInGwRedirect = "lr_in_gw_redirect",
        LrInArpRequest = "lr_in_arp_request",
    ]
    Router Egress: [
        LrOutChkDnatLocal = "lr_out_chk_dnat_local",
        LrOutUndnat = "lr_out_undnat",
        LrOutPostUndnat = "lr_out_post_undnat",
        LrOutSnat = "lr_out_snat",
        LrOutPostSnat = "lr_out_post_snat",
        LrOutEgrLoop = "lr_out_egr_loop",
        LrOutDelivery = "lr_out_delivery",
    ]
}

impl Stage {
    /// The datapath kind.
    pub fn dp_kind(self) -> DpKind {
        self.placement().0
    }

    /// The pipeline.
    pub fn pipeline(self) -> Pipeline {
        self.placement().1
    }

    /// The stage of the same pipeline `n` tables on (`None` past the end).
    pub fn offset(self, n: u8) -> Option<Stage> {
        let t = self.table().checked_add(n)?;
        Stage::ALL
            .iter()
            .copied()
            .find(|s| s.placement() == self.placement() && s.table() == t)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_follow_declaration_order() {
        assert_eq!(Stage::LsInCheckPortSec.table(), 0);
        assert_eq!(Stage::LsInL2Unknown.table(), 26);
        assert_eq!(Stage::LsOutApplyPortSec.table(), 9);
        assert_eq!(Stage::LrInArpRequest.table(), 21);
        assert_eq!(Stage::LrOutDelivery.table(), 6);
        assert_eq!(Stage::LrInDnat.offset(1), Some(Stage::LrInLbAffLearn));
        assert_eq!(Stage::LrOutDelivery.offset(1), None);
    }

    #[test]
    fn names_are_unique_and_prefixed_by_placement() {
        let mut seen = std::collections::BTreeSet::new();
        for s in Stage::ALL {
            assert!(seen.insert(s.name()), "{s} twice");
            let prefix = match s.placement() {
                (DpKind::Switch, Pipeline::Ingress) => "ls_in_",
                (DpKind::Switch, Pipeline::Egress) => "ls_out_",
                (DpKind::Router, Pipeline::Ingress) => "lr_in_",
                (DpKind::Router, Pipeline::Egress) => "lr_out_",
            };
            assert!(s.name().starts_with(prefix), "{s}");
        }
    }
}
