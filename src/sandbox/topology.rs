//! The sandbox's default topology, as data: what it builds in NB (through `hf_sim`'s NB
//! builders, i.e. the transactions `ovn-nbctl` would send) and how it is printed.
//!
//! Two switches `ls1` (10.0.1.0/24) and `ls2` (10.0.2.0/24) behind a distributed router `lr0`,
//! whose gateway port `lr0-ext` (172.16.0.1/24, on the gateway chassis `gw1`) reaches the
//! external switch `ext`. As in a production OVN, `ext` is a provider network: its `localnet`
//! port `ln-ext` (`network_name=physnet1`) bridges it to the physical network `physnet1` on
//! every chassis, and the router's patch port `ext-lr0` announces the router's NAT addresses
//! there (`nat-addresses=router`). The external host `ext1` (172.16.0.10, 1 ms away) is a
//! machine on `physnet1`, not a logical port. Traffic from the switches leaves through SNAT to
//! 172.16.0.100 on the gateway. Hosts `vm1`... are spread over the hypervisor chassis in turn,
//! alternating between the switches, two per chassis.
//!
//! The live-migration story adds what a CMS adds for a VM that keeps its own egress address
//! and a security group ([`Topology::floating_ip`], [`Topology::security_group`]).
//!
//! What it does not do: load balancers or DHCP (the scenarios of the simulator's tests cover
//! those); the user adds them with `ovn-nbctl` while the sandbox runs.

use std::fmt::Write as _;

use hf_sim::world::nb::{self, Nat, PortOpts, Txn};

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
    /// Its default gateway (the router's gateway port).
    pub gateway: &'static str,
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

/// The whole topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Hypervisor chassis, `hv1`...
    pub hypervisors: Vec<String>,
    /// The gateway chassis.
    pub gateway: &'static str,
    /// The router.
    pub router: &'static str,
    /// Internal switches.
    pub subnets: Vec<Subnet>,
    /// The external switch, its subnet and the gateway router port.
    pub external: Subnet,
    /// The SNAT address and the internal network it covers.
    pub snat_ip: &'static str,
    /// The logical network SNAT applies to.
    pub snat_net: &'static str,
    /// Hosts on the internal switches.
    pub vms: Vec<Vm>,
    /// The external switch's `localnet` port.
    pub localnet: &'static str,
    /// The external host, on the provider network.
    pub ext_host: ExtHost,
}

/// The NB chassis name of the gateway.
pub const GATEWAY: &str = "gw1";
/// The provider network of the external switch (`ovn-bridge-mappings`' name).
pub const PROVIDER_NET: &str = "physnet1";

impl Topology {
    /// The default topology over `hypervisors` chassis (at least 2).
    pub fn default_for(hypervisors: u16) -> Topology {
        let hv: Vec<String> = (1..=hypervisors.max(2)).map(|i| format!("hv{i}")).collect();
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
            vms,
            localnet: "ln-ext",
            ext_host: ExtHost {
                name: "ext1".into(),
                mac: "00:00:00:00:10:0a".into(),
                ip: "172.16.0.10".into(),
                prefix: 24,
                gateway: "172.16.0.1",
                net: PROVIDER_NET,
            },
        }
    }

    /// Every chassis: hypervisors, then the gateway.
    pub fn chassis(&self) -> Vec<String> {
        let mut v = self.hypervisors.clone();
        v.push(self.gateway.to_string());
        v
    }

    /// The first host on `switch` bound on `chassis`.
    pub fn vm_on(&self, switch: &str, chassis: &str) -> Option<&Vm> {
        self.vms
            .iter()
            .find(|v| v.switch == switch && v.chassis == chassis)
    }

    /// The NB transactions that build it, in order (what `ovn-nbctl` would send).
    pub fn nb_txns(&self) -> Vec<Txn> {
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
        t.push(nb::localnet(
            self.external.switch,
            self.localnet,
            self.ext_host.net,
        ));
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

    /// The external switch's side of its patch to the router (`ext-lr0`).
    pub fn ext_patch(&self) -> String {
        format!("{}-{}", self.external.switch, self.router)
    }

    /// A distributed `dnat_and_snat` (`ovn-nbctl lr-nat-add lr0 dnat_and_snat EXTERNAL_IP
    /// LOGICAL_IP PORT EXTERNAL_MAC`): `vm`'s own egress (and ingress) address, applied on
    /// whichever chassis its port is active.
    pub fn floating_ip(&self, vm: &Vm, external_ip: &str, external_mac: &str) -> Txn {
        nb::nat(
            self.router,
            Nat {
                kind: "dnat_and_snat",
                external_ip,
                logical_ip: &vm.ip,
                logical_port: Some((&vm.name, external_mac)),
            },
        )
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
        let mut s = String::new();
        let _ = writeln!(
            s,
            "topology (chassis {}; gateway chassis {}):",
            self.hypervisors.join(", "),
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
            for v in self.vms.iter().filter(|v| v.switch == sn.switch) {
                let _ = writeln!(
                    s,
                    "    port {:<5} {} {:<11} host {} on {}",
                    v.name, v.mac, v.ip, v.name, v.chassis
                );
            }
        }
        let e = &self.ext_host;
        let _ = writeln!(
            s,
            "  switch {} {}",
            self.external.switch, self.external.cidr
        );
        let _ = writeln!(
            s,
            "    port {} localnet to provider network {} (on every chassis)",
            self.localnet, e.net
        );
        let _ = writeln!(s, "  provider network {}", e.net);
        let _ = write!(
            s,
            "    host {:<4} {} {:<11} external, 1 ms away, gateway {}",
            e.name, e.mac, e.ip, e.gateway
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
