//! `--topology ovnk-l2`: OVN-Kubernetes' layer-2 design, the one of incident C, built by
//! `hf_sim`'s [`ovnk_gateways`] (the same transactions the incident's test builds).
//!
//! One switch `l2` (10.100.0.0/24) spans the hypervisors, and every hypervisor is its own
//! gateway: a gateway router `GR_<node>` (`options:chassis=<node>`) attached to `l2` with the
//! same address and MAC on every node (10.100.0.1, 0a:58:0a:64:00:01; holdfast northd looks a
//! router MAC that several gateway routers share up only where each runs, so a VM reaches its
//! own node's router), an external switch `ext_<node>` whose localnet port reaches `physnet1`,
//! and a SNAT of 10.100.0.0/24 to the node's own address (172.16.0.11 for hv1, .12 for hv2,
//! ...). There is no gateway chassis and no floating IP: a VM's egress leaves through its
//! node's router, SNATed to that node's address, so a live migration changes the address the
//! external host sees (what breaks in incident C).
//!
//! Hosts `vm1`..., two per hypervisor in turn (vm1 on hv1, vm2 on hv2, ..., then again), all on
//! `l2` from 10.100.0.11, MAC `00:00:00:00:64:HH` (HH the address's last octet, as the default
//! topology's `00:00:00:00:NN:HH`). The external host has no gateway: the nodes' addresses are
//! on its network.

use std::fmt::Write as _;

use hf_sim::world::incident_c::{
    OVNK_CIDR, OVNK_GATEWAY_IP, OVNK_GATEWAY_MAC, OVNK_SWITCH, OvnkNode, ovnk_gateways, ovnk_nodes,
};
use hf_sim::world::nb::Txn;

use super::{Design, Topology, Vm, ext_host};

/// The switch spanning the nodes.
pub const SWITCH: &str = OVNK_SWITCH;
/// The gateway MAC every node's router has on [`SWITCH`].
pub const GATEWAY_MAC: &str = OVNK_GATEWAY_MAC;

/// The design's own part: a gateway router, external switch and SNAT per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvnkL2 {
    /// One per hypervisor, in order.
    pub nodes: Vec<OvnkNode>,
}

/// The topology over the hypervisors `hv` (at least 2).
pub(super) fn topology(hv: Vec<String>) -> Topology {
    let names: Vec<&str> = hv.iter().map(String::as_str).collect();
    let nodes = ovnk_nodes(&names);
    let mut vms = Vec::new();
    for round in 0..2 {
        for (ci, ch) in hv.iter().enumerate() {
            let n = vms.len() + 1;
            let host = 10 + round * hv.len() + ci + 1;
            vms.push(Vm {
                name: format!("vm{n}"),
                switch: SWITCH,
                mac: format!("00:00:00:00:64:{host:02x}"),
                ip: format!("10.100.0.{host}"),
                prefix: 24,
                gateway: OVNK_GATEWAY_IP,
                chassis: ch.clone(),
            });
        }
    }
    Topology {
        hypervisors: hv,
        vms,
        ext_host: ext_host(None),
        design: Design::OvnkL2(OvnkL2 { nodes }),
    }
}

impl OvnkL2 {
    /// The node running on `chassis`.
    pub fn node(&self, chassis: &str) -> Option<&OvnkNode> {
        self.nodes.iter().find(|n| n.chassis == chassis)
    }

    /// The node whose own address is `ip`.
    pub fn node_with_ip(&self, ip: &str) -> Option<&OvnkNode> {
        self.nodes.iter().find(|n| n.node_ip == ip)
    }

    /// Its NB transactions, hosts left out.
    pub(super) fn nb_txns(&self) -> Vec<Txn> {
        let names: Vec<&str> = self.nodes.iter().map(|n| n.chassis.as_str()).collect();
        ovnk_gateways(&names)
    }

    /// Its part of [`Topology::describe`].
    pub(super) fn describe(&self, t: &Topology) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "topology (chassis {}; OVN-Kubernetes layer 2: every node its own gateway, no \
             gateway chassis):",
            t.hypervisors.join(", ")
        );
        let _ = writeln!(
            s,
            "  switch {SWITCH} {OVNK_CIDR} (spans the nodes; gateway {OVNK_GATEWAY_IP} \
             {OVNK_GATEWAY_MAC} on every node, each VM reaches its own node's router)"
        );
        t.describe_vms(&mut s, SWITCH);
        for n in &self.nodes {
            let _ = writeln!(s, "  router {} (options:chassis={})", n.router, n.chassis);
            let _ = writeln!(
                s,
                "    port {} {OVNK_GATEWAY_MAC} {OVNK_GATEWAY_IP}/24  <->  switch {SWITCH}",
                n.switch_port
            );
            let _ = writeln!(
                s,
                "    port {} {} {}/24  <->  switch {}, port {} localnet to provider network {}",
                n.ext_port, n.ext_mac, n.node_ip, n.ext_switch, n.localnet, t.ext_host.net
            );
            let _ = writeln!(
                s,
                "    snat {OVNK_CIDR} -> {} ({}'s own address)",
                n.node_ip, n.chassis
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Design, Topology};
    use crate::sandbox::args::TopologyKind;

    #[test]
    fn two_nodes_two_vms_each_on_l2() {
        let t = Topology::new(TopologyKind::OvnkL2, 2);
        assert_eq!(t.kind(), TopologyKind::OvnkL2);
        assert_eq!(t.chassis(), ["hv1", "hv2"], "no gateway chassis");
        let vms: Vec<(&str, &str, &str, &str, &str)> = t
            .vms
            .iter()
            .map(|v| {
                (
                    v.name.as_str(),
                    v.switch,
                    v.mac.as_str(),
                    v.ip.as_str(),
                    v.chassis.as_str(),
                )
            })
            .collect();
        assert_eq!(
            vms,
            [
                ("vm1", "l2", "00:00:00:00:64:0b", "10.100.0.11", "hv1"),
                ("vm2", "l2", "00:00:00:00:64:0c", "10.100.0.12", "hv2"),
                ("vm3", "l2", "00:00:00:00:64:0d", "10.100.0.13", "hv1"),
                ("vm4", "l2", "00:00:00:00:64:0e", "10.100.0.14", "hv2"),
            ]
        );
        assert!(t.vms.iter().all(|v| v.gateway == "10.100.0.1"));
        assert_eq!(t.datapaths(), (3, 2));
        let e = t.egress("hv2").expect("hv2 is a node");
        assert_eq!(
            (e.ip.as_str(), e.at.as_str()),
            ("172.16.0.12", "GR_hv2 on hv2")
        );
        assert_eq!(t.egress("gw1"), None);
        assert_eq!(
            t.floating_ip(&t.vms[0], "172.16.0.50", "02:00:00:00:ee:01"),
            None
        );
        let Design::OvnkL2(o) = &t.design else {
            panic!("not the ovnk-l2 design: {:?}", t.design);
        };
        assert_eq!(
            o.node_with_ip("172.16.0.11").map(|n| n.chassis.as_str()),
            Some("hv1")
        );
    }

    /// NB: the incident's gateways (one router per node pinned to it, the shared gateway
    /// address, a localnet per node, SNAT to the node's address) and the VMs on l2.
    #[test]
    fn nb_has_a_gateway_router_per_node_and_the_vms() {
        let t = Topology::new(TopologyKind::OvnkL2, 3);
        let ops = serde_json::to_string(&t.nb_txns()).expect("JSON");
        for want in [
            r#"["chassis","hv3"]"#,
            r#""name":"GR_hv3""#,
            r#""name":"rtos-hv2""#,
            r#""mac":"0a:58:0a:64:00:01""#,
            r#""external_ip":"172.16.0.13""#,
            r#""logical_ip":"10.100.0.0/24""#,
            r#"["network_name","physnet1"]"#,
            r#""name":"vm6""#,
            r#""00:00:00:00:64:10 10.100.0.16""#,
            r#"["requested-chassis","hv3"]"#,
        ] {
            assert!(ops.contains(want), "{want} not in {ops}");
        }
        assert!(!ops.contains(r#""name":"ext1""#), "{ops}");
        assert!(!ops.contains("gw1"), "no gateway chassis: {ops}");
        let d = t.describe();
        for want in [
            "switch l2 10.100.0.0/24",
            "port vm6   00:00:00:00:64:10 10.100.0.16 host vm6 on hv3",
            "router GR_hv2 (options:chassis=hv2)",
            "port rtoe-hv3 0a:58:ac:10:00:0d 172.16.0.13/24  <->  switch ext_hv3, port \
             ln-ext_hv3 localnet to provider network physnet1",
            "snat 10.100.0.0/24 -> 172.16.0.11 (hv1's own address)",
            "host ext1 00:00:00:00:10:0a 172.16.0.10 external, 1 ms away, no gateway",
        ] {
            assert!(d.contains(want), "{want:?} not in\n{d}");
        }
    }
}
