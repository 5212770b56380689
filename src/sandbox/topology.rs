//! The sandbox's default topology, as data: what it builds in NB (through `hf_sim`'s NB
//! builders, i.e. the transactions `ovn-nbctl` would send) and how it is printed.
//!
//! Two switches `ls1` (10.0.1.0/24) and `ls2` (10.0.2.0/24) behind a distributed router `lr0`,
//! whose gateway port `lr0-ext` (172.16.0.1/24, on the gateway chassis `gw1`) reaches the
//! external switch `ext` and the external host `ext1` (172.16.0.10, 1 ms away); traffic from the
//! switches leaves through SNAT to 172.16.0.100. Hosts `vm1`... are spread over the hypervisor
//! chassis in turn, alternating between the switches, two per chassis.
//!
//! What it does not do: load balancers, ACLs or DHCP (the scenarios of the simulator's tests
//! cover those); the user adds them with `ovn-nbctl` while the sandbox runs.

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
    /// The external host.
    pub ext_host: Vm,
}

/// The NB chassis name of the gateway.
pub const GATEWAY: &str = "gw1";

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
            ext_host: Vm {
                name: "ext1".into(),
                switch: "ext",
                mac: "00:00:00:00:10:0a".into(),
                ip: "172.16.0.10".into(),
                prefix: 24,
                gateway: "172.16.0.1",
                chassis: GATEWAY.into(),
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
        for v in self.vms.iter().chain(std::iter::once(&self.ext_host)) {
            t.push(nb::port(
                v.switch,
                &v.name,
                &format!("{} {}", v.mac, v.ip),
                PortOpts {
                    port_security: false,
                    requested_chassis: Some(&v.chassis),
                    // The simulator puts an external host on a 1 ms link.
                    external: v.name == self.ext_host.name,
                },
            ));
        }
        t
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
                format!(", gateway port on {}", self.gateway)
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
        let _ = write!(
            s,
            "    port {:<5} {} {:<11} external host {} (1 ms away, behind {})",
            e.name, e.mac, e.ip, e.name, e.chassis
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
