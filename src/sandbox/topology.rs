//! The sandbox's topologies, as data: what each builds in NB (through `hf_sim`'s NB builders,
//! i.e. the transactions `ovn-nbctl` would send) and how it is printed.
//!
//! `--topology default` ([`Distributed`]): two switches `ls1` (10.0.1.0/24) and `ls2`
//! (10.0.2.0/24) behind a distributed router `lr0`, whose gateway port `lr0-ext` (172.16.0.1/24,
//! on the gateway chassis `gw1`) reaches the external switch `ext`. As in a production OVN,
//! `ext` is a provider network: its `localnet` port `ln-ext` (`network_name=physnet1`) bridges
//! it to the physical network `physnet1` on every chassis, and the router's patch port `ext-lr0`
//! announces the router's NAT addresses there (`nat-addresses=router`). Traffic from the
//! switches leaves through SNAT to 172.16.0.100 on the gateway. Hosts `vm1`... are spread over
//! the hypervisor chassis in turn, alternating between the switches, two per chassis.
//!
//! `--topology ovnk-l2` ([`ovnk_l2`]): OVN-Kubernetes' layer-2 design, incident C's: one switch
//! `l2` (10.100.0.0/24) spanning the hypervisors, and every hypervisor its own gateway: a
//! gateway router per node with the same gateway address on `l2`, SNATing the network to the
//! node's own address on `physnet1`. Hosts `vm1`..., two per hypervisor, all on `l2`.
//!
//! In both, the external host `ext1` (172.16.0.10, 1 ms away) is a machine on `physnet1`, not a
//! logical port. The live-migration story adds what a CMS adds for a VM: its own egress address
//! where the design has one ([`Topology::floating_ip`]) and a security group
//! ([`Topology::security_group`]).
//!
//! What it does not do: load balancers or DHCP (the scenarios of the simulator's tests cover
//! those); the user adds them with `ovn-nbctl` while the sandbox runs.

use std::fmt::Write as _;

use hf_sim::world::nb::{self, Nat, PortOpts, Txn};

use super::args::TopologyKind;

pub mod ovnk_l2;

pub use ovnk_l2::OvnkL2;

/// One VIF port with its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vm {
    /// Port and host name.
    pub name: String,
    /// The switch.
    pub switch: &'static str,
    /// `xx:xx:xx:xx:xx:xx`.
    pub mac: String,
    /// IPv4 address.
    pub ip: String,
    /// Prefix length of its subnet.
    pub prefix: u8,
    /// Its default gateway (the router port's address).
    pub gateway: &'static str,
    /// The chassis it is bound on (`options:requested-chassis`).
    pub chassis: String,
}

/// A host on a provider network: outside the logical topology, reached through a `localnet`
/// port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtHost {
    /// Host name (what the control socket calls it).
    pub name: String,
    /// `xx:xx:xx:xx:xx:xx`.
    pub mac: String,
    /// Its IPv4 address.
    pub ip: String,
    /// Prefix length of its network.
    pub prefix: u8,
    /// Its default gateway (the router's gateway port), if it has one; without, it reaches only
    /// its own network.
    pub gateway: Option<&'static str>,
    /// The provider network it is on (`network_name` of the `localnet` port).
    pub net: &'static str,
}

/// A switch with its subnet and router port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subnet {
    /// Switch name.
    pub switch: &'static str,
    /// `10.0.1.0/24`.
    pub cidr: &'static str,
    /// Router port name.
    pub lrp: &'static str,
    /// Router port MAC.
    pub lrp_mac: &'static str,
    /// Router port address with prefix.
    pub lrp_net: &'static str,
}

/// Where a VM's traffic to the external host leaves, and as what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    /// The address the external host sees (the SNAT's).
    pub ip: String,
    /// Where the SNAT happens, for people (`gw1`, `GR_hv2 on hv2`).
    pub at: String,
}

/// The whole topology: what every design has (hypervisors, VMs, the external host) and the
/// design's own part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Hypervisor chassis, `hv1`...
    pub hypervisors: Vec<String>,
    /// Hosts on the logical switches.
    pub vms: Vec<Vm>,
    /// The external host, on the provider network.
    pub ext_host: ExtHost,
    /// Routers, switches and NAT.
    pub design: Design,
}

/// A topology's routers, switches and NAT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Design {
    /// `--topology default`: a distributed router with a gateway chassis.
    Distributed(Distributed),
    /// `--topology ovnk-l2`: OVN-Kubernetes' layer-2 design, a gateway router per node.
    OvnkL2(OvnkL2),
}

/// The default design: switches behind a distributed router whose gateway port, on the gateway
/// chassis, SNATs to the provider network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distributed {
    /// The gateway chassis.
    pub gateway: &'static str,
    /// The router.
    pub router: &'static str,
    /// Internal switches.
    pub subnets: Vec<Subnet>,
    /// The external switch, its subnet and the gateway router port.
    pub external: Subnet,
    /// The SNAT address.
    pub snat_ip: &'static str,
    /// The logical network SNAT applies to.
    pub snat_net: &'static str,
    /// The external switch's `localnet` port.
    pub localnet: &'static str,
}

/// The NB chassis name of the gateway.
pub const GATEWAY: &str = "gw1";
/// The provider network of the external switch (`ovn-bridge-mappings`' name).
pub const PROVIDER_NET: &str = "physnet1";

/// The hypervisors' names, `hv1`... (at least 2).
fn hypervisor_names(hypervisors: u16) -> Vec<String> {
    (1..=hypervisors.max(2)).map(|i| format!("hv{i}")).collect()
}

/// The external host of every topology: 172.16.0.10/24 on [`PROVIDER_NET`].
fn ext_host(gateway: Option<&'static str>) -> ExtHost {
    ExtHost {
        name: "ext1".into(),
        mac: "00:00:00:00:10:0a".into(),
        ip: "172.16.0.10".into(),
        prefix: 24,
        gateway,
        net: PROVIDER_NET,
    }
}

impl Topology {
    /// The topology `kind` over `hypervisors` chassis (at least 2).
    pub fn new(kind: TopologyKind, hypervisors: u16) -> Topology {
        match kind {
            TopologyKind::Default => Topology::default_for(hypervisors),
            TopologyKind::OvnkL2 => ovnk_l2::topology(hypervisor_names(hypervisors)),
        }
    }

    /// The default topology over `hypervisors` chassis (at least 2).
    pub fn default_for(hypervisors: u16) -> Topology {
        let hv = hypervisor_names(hypervisors);
        let subnets = vec![
            Subnet {
                switch: "ls1",
                cidr: "10.0.1.0/24",
                lrp: "lr0-ls1",
                lrp_mac: "00:00:00:00:ff:01",
                lrp_net: "10.0.1.1/24",
            },
            Subnet {
                switch: "ls2",
                cidr: "10.0.2.0/24",
                lrp: "lr0-ls2",
                lrp_mac: "00:00:00:00:ff:02",
                lrp_net: "10.0.2.1/24",
            },
        ];
        // Two hosts per chassis: vm1 (ls1, hv1), vm2 (ls1, hv2), ..., then the same on ls2, so
        // that with two chassis ls1 and ls2 each span both.
        let mut vms = Vec::new();
        for (si, (sw, gw, net)) in [("ls1", "10.0.1.1", 1u8), ("ls2", "10.0.2.1", 2u8)]
            .into_iter()
            .enumerate()
        {
            for (ci, ch) in hv.iter().enumerate() {
                let n = vms.len() + 1;
                let host = 10 + si * hv.len() + ci + 1;
                vms.push(Vm {
                    name: format!("vm{n}"),
                    switch: sw,
                    mac: format!("00:00:00:00:{net:02x}:{host:02x}"),
                    ip: format!("10.0.{net}.{host}"),
                    prefix: 24,
                    gateway: gw,
                    chassis: ch.clone(),
                });
            }
        }
        Topology {
            hypervisors: hv,
            vms,
            ext_host: ext_host(Some("172.16.0.1")),
            design: Design::Distributed(Distributed {
                gateway: GATEWAY,
                router: "lr0",
                subnets,
                external: Subnet {
                    switch: "ext",
                    cidr: "172.16.0.0/24",
                    lrp: "lr0-ext",
                    lrp_mac: "00:00:00:00:ff:10",
                    lrp_net: "172.16.0.1/24",
                },
                snat_ip: "172.16.0.100",
                snat_net: "10.0.0.0/16",
                localnet: "ln-ext",
            }),
        }
    }

    /// Which topology this is.
    pub fn kind(&self) -> TopologyKind {
        match self.design {
            Design::Distributed(_) => TopologyKind::Default,
            Design::OvnkL2(_) => TopologyKind::OvnkL2,
        }
    }

    /// Every chassis: hypervisors, then the gateway chassis when the design has one.
    pub fn chassis(&self) -> Vec<String> {
        let mut v = self.hypervisors.clone();
        if let Design::Distributed(d) = &self.design {
            v.push(d.gateway.to_string());
        }
        v
    }

    /// The first host on `switch` bound on `chassis`.
    #[cfg(test)]
    pub fn vm_on(&self, switch: &str, chassis: &str) -> Option<&Vm> {
        self.vms
            .iter()
            .find(|v| v.switch == switch && v.chassis == chassis)
    }

    /// (Switches, routers) the design has: what northd makes datapaths of.
    pub fn datapaths(&self) -> (usize, usize) {
        match &self.design {
            Design::Distributed(d) => (d.subnets.len() + 1, 1),
            Design::OvnkL2(o) => (1 + o.nodes.len(), o.nodes.len()),
        }
    }

    /// The NB transactions that build it, in order (what `ovn-nbctl` would send).
    pub fn nb_txns(&self) -> Vec<Txn> {
        let mut t = match &self.design {
            Design::Distributed(d) => d.nb_txns(&self.ext_host),
            Design::OvnkL2(o) => o.nb_txns(),
        };
        for v in &self.vms {
            t.push(nb::port(
                v.switch,
                &v.name,
                &format!("{} {}", v.mac, v.ip),
                PortOpts {
                    port_security: false,
                    requested_chassis: Some(&v.chassis),
                    external: false,
                },
            ));
        }
        t
    }

    /// Where the traffic of a VM on `chassis` (without its own egress address) leaves for the
    /// external host, and the address that host sees: the gateway chassis's SNAT, or the
    /// gateway router of the VM's own node.
    pub fn egress(&self, chassis: &str) -> Option<Egress> {
        match &self.design {
            Design::Distributed(d) => Some(Egress {
                ip: d.snat_ip.to_string(),
                at: d.gateway.to_string(),
            }),
            Design::OvnkL2(o) => o.node(chassis).map(|n| Egress {
                ip: n.node_ip.clone(),
                at: format!("{} on {}", n.router, n.chassis),
            }),
        }
    }

    /// How traffic between two VMs goes: through the router between their switches, or on the
    /// switch they share.
    pub fn path(&self, a: &Vm, b: &Vm) -> String {
        match &self.design {
            Design::Distributed(d) if a.switch != b.switch => format!("through {}", d.router),
            _ => format!("on {}", a.switch),
        }
    }

    /// The MAC `vm`'s packets to its gateway go to (its router port's).
    pub fn gateway_mac(&self, vm: &Vm) -> &'static str {
        match &self.design {
            Design::Distributed(d) => d
                .subnets
                .iter()
                .find(|s| s.switch == vm.switch)
                .map_or("00:00:00:00:ff:01", |s| s.lrp_mac),
            Design::OvnkL2(_) => ovnk_l2::GATEWAY_MAC,
        }
    }

    /// A port the user could add to the first VM's switch: (switch, MAC, address), free in the
    /// topology.
    pub fn example_port(&self) -> (&'static str, &'static str, &'static str) {
        match &self.design {
            Design::Distributed(_) => ("ls1", "00:00:00:00:01:09", "10.0.1.9"),
            Design::OvnkL2(_) => (ovnk_l2::SWITCH, "00:00:00:00:64:09", "10.100.0.9"),
        }
    }

    /// A distributed `dnat_and_snat` (`ovn-nbctl lr-nat-add lr0 dnat_and_snat EXTERNAL_IP
    /// LOGICAL_IP PORT EXTERNAL_MAC`): `vm`'s own egress (and ingress) address, applied on
    /// whichever chassis its port is active. None where the design has no such thing
    /// (OVN-Kubernetes SNATs every VM's egress to its node's address).
    pub fn floating_ip(&self, vm: &Vm, external_ip: &str, external_mac: &str) -> Option<Txn> {
        match &self.design {
            Design::Distributed(d) => Some(nb::nat(
                d.router,
                Nat {
                    kind: "dnat_and_snat",
                    external_ip,
                    logical_ip: &vm.ip,
                    logical_port: Some((&vm.name, external_mac)),
                },
            )),
            Design::OvnkL2(_) => None,
        }
    }

    /// A Neutron-style security group on `vm`'s port, as ACLs on its switch: IPv4 from it
    /// allowed (and what is related to it), any other IP from it and every IP to it dropped.
    pub fn security_group(&self, vm: &Vm) -> Vec<Txn> {
        Self::security_group_rules(&vm.name)
            .into_iter()
            .map(|(dir, prio, m, action)| nb::acl(vm.switch, dir, prio, &m, action))
            .collect()
    }

    /// The security group's ACLs: (direction, priority, match, action).
    pub fn security_group_rules(vm: &str) -> [(&'static str, i64, String, &'static str); 3] {
        [
            (
                "from-lport",
                1002,
                format!("inport == \"{vm}\" && ip4"),
                "allow-related",
            ),
            (
                "from-lport",
                1001,
                format!("inport == \"{vm}\" && ip"),
                "drop",
            ),
            (
                "to-lport",
                1001,
                format!("outport == \"{vm}\" && ip"),
                "drop",
            ),
        ]
    }

    /// The topology as the sandbox prints it.
    pub fn describe(&self) -> String {
        let mut s = match &self.design {
            Design::Distributed(d) => d.describe(self),
            Design::OvnkL2(o) => o.describe(self),
        };
        let e = &self.ext_host;
        let _ = writeln!(s, "  provider network {}", e.net);
        let _ = write!(
            s,
            "    host {:<4} {} {:<11} external, 1 ms away, {}",
            e.name,
            e.mac,
            e.ip,
            e.gateway.map_or_else(
                || "no gateway (the nodes' addresses are on its network)".to_string(),
                |g| format!("gateway {g}")
            )
        );
        s
    }

    /// The VMs of `switch`, one line each (for [`Topology::describe`]).
    fn describe_vms(&self, s: &mut String, switch: &str) {
        for v in self.vms.iter().filter(|v| v.switch == switch) {
            let _ = writeln!(
                s,
                "    port {:<5} {} {:<11} host {} on {}",
                v.name, v.mac, v.ip, v.name, v.chassis
            );
        }
    }
}

impl Distributed {
    /// Its NB transactions, hosts left out.
    fn nb_txns(&self, ext: &ExtHost) -> Vec<Txn> {
        let mut t = Vec::new();
        t.push(nb::router(self.router));
        for sn in self.subnets.iter().chain(std::iter::once(&self.external)) {
            t.push(nb::switch(sn.switch));
            t.push(nb::router_port(
                self.router,
                sn.lrp,
                sn.lrp_mac,
                &[sn.lrp_net],
            ));
            t.push(nb::patch(
                sn.switch,
                &format!("{}-{}", sn.switch, self.router),
                sn.lrp,
            ));
        }
        // The external switch is a provider network: a localnet port, and the router's NAT
        // addresses announced on it from wherever each is applied.
        t.push(nb::localnet(self.external.switch, self.localnet, ext.net));
        t.push(nb::set_port_options(
            &self.ext_patch(),
            &[("nat-addresses", "router")],
            &[],
        ));
        t.push(nb::gateway_chassis(self.external.lrp, self.gateway, 20));
        t.push(nb::nat(
            self.router,
            Nat {
                kind: "snat",
                external_ip: self.snat_ip,
                logical_ip: self.snat_net,
                logical_port: None,
            },
        ));
        t
    }

    /// The external switch's side of its patch to the router (`ext-lr0`).
    pub fn ext_patch(&self) -> String {
        format!("{}-{}", self.external.switch, self.router)
    }

    /// Its part of [`Topology::describe`]: the router, the switches with their hosts, the
    /// external switch.
    fn describe(&self, t: &Topology) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "topology (chassis {}; gateway chassis {}):",
            t.hypervisors.join(", "),
            self.gateway
        );
        let _ = writeln!(s, "  router {} (distributed)", self.router);
        for sn in self.subnets.iter().chain(std::iter::once(&self.external)) {
            let gw = if sn.switch == self.external.switch {
                format!(", gateway port on {} (nat-addresses=router)", self.gateway)
            } else {
                String::new()
            };
            let _ = writeln!(
                s,
                "    port {} {} {}{gw}  <->  switch {} {}",
                sn.lrp, sn.lrp_mac, sn.lrp_net, sn.switch, sn.cidr
            );
        }
        let _ = writeln!(
            s,
            "    snat {} -> {} (to the external network)",
            self.snat_net, self.snat_ip
        );
        for sn in &self.subnets {
            let _ = writeln!(s, "  switch {} {}", sn.switch, sn.cidr);
            t.describe_vms(&mut s, sn.switch);
        }
        let _ = writeln!(
            s,
            "  switch {} {}",
            self.external.switch, self.external.cidr
        );
        let _ = writeln!(
            s,
            "    port {} localnet to provider network {} (on every chassis)",
            self.localnet, t.ext_host.net
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_chassis_layout() {
        let t = Topology::default_for(2);
        assert_eq!(t.chassis(), ["hv1", "hv2", "gw1"]);
        let names: Vec<(&str, &str, &str, &str)> = t
            .vms
            .iter()
            .map(|v| (v.name.as_str(), v.switch, v.ip.as_str(), v.chassis.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("vm1", "ls1", "10.0.1.11", "hv1"),
                ("vm2", "ls1", "10.0.1.12", "hv2"),
                ("vm3", "ls2", "10.0.2.13", "hv1"),
                ("vm4", "ls2", "10.0.2.14", "hv2"),
            ]
        );
        assert_eq!(t.vm_on("ls2", "hv2").map(|v| v.name.as_str()), Some("vm4"));
        let d = t.describe();
        assert!(d.contains("port vm4   00:00:00:00:02:0e 10.0.2.14"), "{d}");
        assert!(
            d.contains("port ln-ext localnet to provider network physnet1"),
            "{d}"
        );
        assert!(d.contains("host ext1 00:00:00:00:10:0a 172.16.0.10"), "{d}");
    }

    /// The external host is no logical port: NB has the localnet port, the patch announces
    /// the router's NAT addresses, and no port is named ext1.
    #[test]
    fn the_external_network_is_a_provider_network() {
        let t = Topology::default_for(2);
        let ops = serde_json::to_string(&t.nb_txns()).expect("JSON");
        assert!(ops.contains(r#""type":"localnet""#), "{ops}");
        assert!(ops.contains(r#"["network_name","physnet1"]"#), "{ops}");
        assert!(ops.contains(r#"["nat-addresses","router"]"#), "{ops}");
        assert!(!ops.contains(r#""name":"ext1""#), "{ops}");
    }

    #[test]
    fn more_chassis_more_hosts() {
        let t = Topology::default_for(4);
        assert_eq!(t.vms.len(), 8);
        assert_eq!(t.vms[7].ip, "10.0.2.18");
        assert_eq!(t.vms[7].chassis, "hv4");
        // Every MAC distinct.
        let mut macs: Vec<&str> = t.vms.iter().map(|v| v.mac.as_str()).collect();
        macs.sort_unstable();
        macs.dedup();
        assert_eq!(macs.len(), 8);
    }
}
