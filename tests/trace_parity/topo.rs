//! The seeded generator of random OVN topologies and of the packets to trace through them.
//!
//! A [`Topology`] is a pure function of its seed: the `ovn-nbctl` commands that build its
//! northbound, the chassis to create, the port bindings to set (so residency is defined) and a
//! list of [`Packet`]s, each a microflow in ovn-trace's syntax with the conntrack states and the
//! load-balancer destination both tracers are asked to assume.
//!
//! What a topology has: 1–3 internal switches (IPv4, IPv6 on about half of the topologies),
//! each with 2–4 VIFs (port security on most), one router that is either a distributed router
//! with a distributed gateway port (`lrp-set-gateway-chassis` on two gateway chassis) or a
//! gateway router (`options:chassis`), an external switch with a localnet port, a known
//! next hop and an external host; SNAT, DNAT and `dnat_and_snat` (distributed floating IPs with
//! `logical_port` + `external_mac` on distributed routers); load balancers on switches and on
//! the router (one or two backends); stateful ACLs on a port group with address sets
//! (allow-related, allow-stateless, drop, reject); static routes with ECMP; router policies.
//!
//! Packets per topology: L2 on a switch, L3 across the router (v4 and v6), ACL allowed and
//! denied in both directions, SNAT out, floating IP in, LB VIP on a switch and on the router,
//! spoofed MAC and IP, TTL 1, ping of a router port, ARP and ND for a router address, ECMP and
//! policy-routed traffic.
//!
//! What it does not do: VLANs, multicast, DHCP/DNS, several routers per topology. Whatever
//! ovn-trace picks at random (an ECMP next hop, a backend of a load balancer without
//! `--lb-dst`) is arranged never to change the verdict: ECMP next hops are unresolved
//! neighbours on one port (the ARP request floods the same ports whichever is chosen), and a
//! load balancer with two backends is always traced with `--lb-dst`.

use std::fmt::Write as _;

/// splitmix64: small, seeded, good enough for test generation.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
    /// True with probability `pct`%.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.next_u64() % 100 < pct
    }
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.range(0, v.len() - 1)]
    }
}

/// One VIF.
#[derive(Debug, Clone)]
pub struct Vif {
    pub name: String,
    pub switch: usize,
    pub mac: String,
    pub ip4: String,
    pub ip6: Option<String>,
    pub port_security: bool,
    pub chassis: String,
}

/// The router's port on one switch.
#[derive(Debug, Clone)]
pub struct Lrp {
    pub name: String,
    pub mac: String,
    pub ip4: String,
    pub ip6: Option<String>,
}

/// A NAT row.
#[derive(Debug, Clone)]
pub struct Nat {
    pub kind: &'static str,
    pub external_ip: String,
    pub logical_ip: String,
    /// Distributed floating IP: (logical port, external MAC).
    pub distributed: Option<(String, String)>,
}

/// A load balancer.
#[derive(Debug, Clone)]
pub struct Lb {
    pub name: String,
    pub vip: String,
    pub port: u16,
    pub proto: &'static str,
    /// (ip, port)
    pub backends: Vec<(String, u16)>,
    /// The switch it is attached to, or `None` for the router.
    pub switch: Option<usize>,
}

/// One packet to trace.
#[derive(Debug, Clone)]
pub struct Packet {
    /// What the packet tests (for the report and the per-class counts).
    pub class: &'static str,
    /// The datapath the packet enters (the inport's switch).
    pub datapath: String,
    /// The microflow, in ovn-trace's syntax.
    pub microflow: String,
    /// `--ct` flags, one per conntrack action in order.
    pub ct: Vec<String>,
    /// `--lb-dst`.
    pub lb_dst: Option<String>,
    /// What the generator knows the answer must be (checked against real ovn-trace, so the
    /// generator is known to ask meaningful questions).
    pub expect: Option<Expect>,
}

/// A generator's expectation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// Dropped.
    Drop,
    /// Exactly this port gets a copy (e.g. the sender gets the router's reply).
    OutputTo(String),
    /// A SNAT to this address is applied.
    SnatTo(String),
}

impl Packet {
    /// The options both tracers get, in ovn-trace's spelling.
    pub fn options(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ct.iter().map(|c| format!("--ct={c}")).collect();
        if let Some(d) = &self.lb_dst {
            v.push(format!("--lb-dst={d}"));
        }
        v
    }
}

/// A generated topology.
#[derive(Debug, Clone)]
pub struct Topology {
    pub seed: u64,
    pub gateway_router: bool,
    pub v6: bool,
    pub n_switches: usize,
    pub vifs: Vec<Vif>,
    pub lrps: Vec<Lrp>,
    pub ext_lrp: Lrp,
    pub nats: Vec<Nat>,
    pub lbs: Vec<Lb>,
    /// VIF indices in the port group `pg_web`.
    pub pg_web: Vec<usize>,
    /// VIF indices whose IPv4 addresses are in the address set `as_clients`.
    pub clients: Vec<usize>,
    /// VIF indices whose IPv4 addresses are in the address set `as_blocked`.
    pub blocked: Vec<usize>,
    /// `ovn-nbctl` commands (each a list of arguments), in order.
    pub nb: Vec<Vec<String>>,
    pub packets: Vec<Packet>,
}

/// Chassis every topology has: (name, encap IP).
pub const CHASSIS: &[(&str, &str)] = &[
    ("gw1", "127.0.0.11"),
    ("gw2", "127.0.0.12"),
    ("hv1", "127.0.0.21"),
    ("hv2", "127.0.0.22"),
];

/// What ovn-controller 23.03 advertises, so northd writes the spellings 23.03 controllers use.
pub const CHASSIS_FEATURES: &[&str] = &[
    "other_config:ct-no-masked-label=true",
    "other_config:mac-binding-timestamp=true",
    "other_config:ovn-ct-lb-related=true",
    "other_config:fdb-timestamp=true",
    "other_config:ls-dpg-column=true",
];

pub const EXT_GW_MAC: &str = "02:00:00:00:ff:fe";
pub const EXT_GW_IP4: &str = "172.16.0.254";
pub const EXT_GW_IP6: &str = "fd00:ff::fe";
pub const EXT_HOST_MAC: &str = "02:00:00:00:ff:64";
pub const EXT_HOST_IP4: &str = "172.16.0.100";
pub const EXT_HOST_IP6: &str = "fd00:ff::64";

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn ip6_of(k: usize, host: usize) -> String {
    format!("fd00:{k:x}::{host:x}")
}

/// The solicited-node multicast address and MAC of an IPv6 address (given as `fd00:K::H` with
/// `H` < 0x10000).
fn solicited(ip6: &str) -> (String, String) {
    let addr: std::net::Ipv6Addr = ip6.parse().expect("generated IPv6");
    let o = addr.octets();
    (
        format!("ff02::1:ff{:02x}:{:02x}{:02x}", o[13], o[14], o[15]),
        format!("33:33:ff:{:02x}:{:02x}:{:02x}", o[13], o[14], o[15]),
    )
}

/// Link-local address for a MAC (EUI-64).
fn link_local(mac: &str) -> String {
    let b: Vec<u8> = mac
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).expect("generated MAC"))
        .collect();
    format!(
        "fe80::{:02x}{:02x}:{:02x}ff:fe{:02x}:{:02x}{:02x}",
        b[0] ^ 2,
        b[1],
        b[2],
        b[3],
        b[4],
        b[5]
    )
}

impl Topology {
    /// The topology for `seed`, with about `n_packets` packets.
    pub fn generate(seed: u64, n_packets: usize) -> Topology {
        let mut r = Rng::new(seed);
        let gateway_router = r.chance(40);
        let v6 = r.chance(50);
        let n_switches = r.range(1, 3);
        let mut vifs = Vec::new();
        let mut lrps = Vec::new();
        for k in 0..n_switches {
            lrps.push(Lrp {
                name: format!("lr0-sw{k}"),
                mac: format!("02:00:00:00:{k:02x}:01"),
                ip4: format!("10.{k}.0.1"),
                ip6: v6.then(|| ip6_of(k, 1)),
            });
            for j in 0..r.range(2, 4) {
                let host = 10 + j;
                vifs.push(Vif {
                    name: format!("sw{k}-vm{j}"),
                    switch: k,
                    mac: format!("02:00:00:{k:02x}:{j:02x}:{:02x}", 0x10 + j),
                    ip4: format!("10.{k}.0.{host}"),
                    ip6: v6.then(|| ip6_of(k, host)),
                    port_security: r.chance(75),
                    chassis: if r.chance(50) { "hv1" } else { "hv2" }.into(),
                });
            }
        }
        let ext_lrp = Lrp {
            name: "lr0-ext".into(),
            mac: "02:00:00:00:ff:01".into(),
            ip4: "172.16.0.1".into(),
            ip6: v6.then(|| "fd00:ff::1".to_string()),
        };

        // NAT: SNAT for some subnets, a DNAT, floating IPs.
        let mut nats = Vec::new();
        for k in 0..n_switches {
            if r.chance(70) {
                let ext = if r.chance(50) {
                    ext_lrp.ip4.clone()
                } else {
                    format!("172.16.0.{}", 50 + k)
                };
                nats.push(Nat {
                    kind: "snat",
                    external_ip: ext,
                    logical_ip: format!("10.{k}.0.0/24"),
                    distributed: None,
                });
            }
        }
        let mut natted = Vec::new();
        let chosen: Vec<usize> = (0..vifs.len()).filter(|_| r.chance(35)).take(3).collect();
        for (n, vi) in chosen.into_iter().enumerate() {
            natted.push(vi);
            let v = &vifs[vi];
            let kind = if r.chance(25) {
                "dnat"
            } else {
                "dnat_and_snat"
            };
            let distributed = (kind == "dnat_and_snat" && !gateway_router && r.chance(50))
                .then(|| (v.name.clone(), format!("02:00:00:00:ee:{:02x}", n + 1)));
            nats.push(Nat {
                kind,
                external_ip: format!("172.16.0.{}", 60 + n),
                logical_ip: v.ip4.clone(),
                distributed,
            });
        }
        if v6 && r.chance(50) {
            let vi = r.range(0, vifs.len() - 1);
            if let Some(ip6) = vifs[vi].ip6.clone() {
                nats.push(Nat {
                    kind: "dnat_and_snat",
                    external_ip: "fd00:ff::60".into(),
                    logical_ip: ip6,
                    distributed: None,
                });
            }
        }

        // Load balancers.
        let mut lbs = Vec::new();
        for k in 0..n_switches {
            if r.chance(50) {
                let members: Vec<&Vif> = vifs.iter().filter(|v| v.switch == k).collect();
                let nb = r.range(1, 2).min(members.len());
                let proto = if r.chance(50) { "tcp" } else { "udp" };
                lbs.push(Lb {
                    name: format!("lb-sw{k}"),
                    vip: format!("10.{k}.0.200"),
                    port: 80,
                    proto,
                    backends: members[members.len() - nb..]
                        .iter()
                        .map(|v| (v.ip4.clone(), 8080))
                        .collect(),
                    switch: Some(k),
                });
            }
        }
        if r.chance(60) {
            let a = r.range(0, vifs.len() - 1);
            let b = r.range(0, vifs.len() - 1);
            let mut backends = vec![(vifs[a].ip4.clone(), 443)];
            if b != a && r.chance(50) {
                backends.push((vifs[b].ip4.clone(), 443));
            }
            lbs.push(Lb {
                name: "lb-lr".into(),
                vip: "172.16.0.200".into(),
                port: 443,
                proto: "tcp",
                backends,
                switch: None,
            });
        }

        // ACLs on a port group, address sets of clients and blocked sources.
        let pg_web: Vec<usize> = (0..vifs.len()).filter(|_| r.chance(40)).collect();
        let clients: Vec<usize> = (0..vifs.len())
            .filter(|i| !pg_web.contains(i) && r.chance(50))
            .collect();
        let blocked: Vec<usize> = (0..vifs.len())
            .filter(|i| !clients.contains(i) && r.chance(30))
            .collect();

        let mut t = Topology {
            seed,
            gateway_router,
            v6,
            n_switches,
            vifs,
            lrps,
            ext_lrp,
            nats,
            lbs,
            pg_web,
            clients,
            blocked,
            nb: Vec::new(),
            packets: Vec::new(),
        };
        t.nb = t.nb_commands(&mut r);
        t.packets = t.make_packets(&mut r, n_packets);
        t
    }

    fn nb_commands(&self, r: &mut Rng) -> Vec<Vec<String>> {
        let mut c = Vec::new();
        let lrp_nets = |l: &Lrp, len4: u8| -> Vec<String> {
            let mut v = vec![
                "lrp-add".into(),
                "lr0".into(),
                l.name.clone(),
                l.mac.clone(),
                format!("{}/{len4}", l.ip4),
            ];
            if let Some(i6) = &l.ip6 {
                v.push(format!("{i6}/64"));
            }
            v
        };
        c.push(cmd(&["lr-add", "lr0"]));
        if self.gateway_router {
            c.push(cmd(&[
                "set",
                "logical_router",
                "lr0",
                "options:chassis=gw1",
            ]));
        }
        for k in 0..self.n_switches {
            let sw = format!("sw{k}");
            c.push(cmd(&["ls-add", &sw]));
            c.push(lrp_nets(&self.lrps[k], 24));
            let p = format!("sw{k}-lr0");
            c.push(cmd(&["lsp-add", &sw, &p]));
            c.push(cmd(&["lsp-set-type", &p, "router"]));
            c.push(cmd(&["lsp-set-addresses", &p, "router"]));
            c.push(cmd(&[
                "lsp-set-options",
                &p,
                &format!("router-port={}", self.lrps[k].name),
            ]));
        }
        for v in &self.vifs {
            let mut addr = format!("{} {}", v.mac, v.ip4);
            if let Some(i6) = &v.ip6 {
                write!(addr, " {i6}").expect("string");
            }
            c.push(cmd(&["lsp-add", &format!("sw{}", v.switch), &v.name]));
            c.push(cmd(&["lsp-set-addresses", &v.name, &addr]));
            if v.port_security {
                c.push(cmd(&["lsp-set-port-security", &v.name, &addr]));
            }
        }
        // The external network.
        c.push(cmd(&["ls-add", "ext"]));
        c.push(lrp_nets(&self.ext_lrp, 24));
        if !self.gateway_router {
            c.push(cmd(&["lrp-set-gateway-chassis", "lr0-ext", "gw1", "20"]));
            c.push(cmd(&["lrp-set-gateway-chassis", "lr0-ext", "gw2", "10"]));
        }
        for (p, ty, addr, opts) in [
            (
                "ext-lr0",
                "router",
                "router".to_string(),
                "router-port=lr0-ext",
            ),
            (
                "ln-ext",
                "localnet",
                "unknown".to_string(),
                "network_name=phys",
            ),
        ] {
            c.push(cmd(&["lsp-add", "ext", p]));
            c.push(cmd(&["lsp-set-type", p, ty]));
            c.push(cmd(&["lsp-set-addresses", p, &addr]));
            c.push(cmd(&["lsp-set-options", p, opts]));
        }
        for (p, mac, ip4, ip6) in [
            ("ext-gw", EXT_GW_MAC, EXT_GW_IP4, EXT_GW_IP6),
            ("ext-host", EXT_HOST_MAC, EXT_HOST_IP4, EXT_HOST_IP6),
        ] {
            let mut addr = format!("{mac} {ip4}");
            if self.v6 {
                write!(addr, " {ip6}").expect("string");
            }
            c.push(cmd(&["lsp-add", "ext", p]));
            c.push(cmd(&["lsp-set-addresses", p, &addr]));
        }
        // Routes: a default route to the known next hop, ECMP to two unresolved ones.
        c.push(cmd(&["lr-route-add", "lr0", "0.0.0.0/0", EXT_GW_IP4]));
        c.push(cmd(&[
            "--ecmp",
            "lr-route-add",
            "lr0",
            "203.0.113.0/24",
            "172.16.0.251",
        ]));
        c.push(cmd(&[
            "--ecmp",
            "lr-route-add",
            "lr0",
            "203.0.113.0/24",
            "172.16.0.252",
        ]));
        if self.v6 {
            c.push(cmd(&["lr-route-add", "lr0", "::/0", EXT_GW_IP6]));
        }
        // Router policies: a drop and a reroute.
        if self.vifs.len() > 1 && r.chance(60) {
            let v = &self.vifs[0];
            c.push(cmd(&[
                "lr-policy-add",
                "lr0",
                "1000",
                &format!("ip4.src == {} && ip4.dst == 198.51.100.0/24", v.ip4),
                "drop",
            ]));
        }
        c.push(cmd(&[
            "lr-policy-add",
            "lr0",
            "900",
            "ip4.dst == 198.51.100.77",
            "reroute",
            EXT_GW_IP4,
        ]));
        c.push(cmd(&[
            "lr-policy-add",
            "lr0",
            "800",
            "ip4.dst == 198.51.100.88",
            "allow",
        ]));
        // NAT.
        for n in &self.nats {
            let mut v = cmd(&["lr-nat-add", "lr0", n.kind, &n.external_ip, &n.logical_ip]);
            if let Some((lp, mac)) = &n.distributed {
                v.push(lp.clone());
                v.push(mac.clone());
            }
            c.push(v);
        }
        // Load balancers.
        for lb in &self.lbs {
            let b: Vec<String> = lb
                .backends
                .iter()
                .map(|(ip, p)| format!("{ip}:{p}"))
                .collect();
            c.push(cmd(&[
                "lb-add",
                &lb.name,
                &format!("{}:{}", lb.vip, lb.port),
                &b.join(","),
                lb.proto,
            ]));
            match lb.switch {
                Some(k) => c.push(cmd(&["ls-lb-add", &format!("sw{k}"), &lb.name])),
                None => c.push(cmd(&["lr-lb-add", "lr0", &lb.name])),
            }
        }
        // ACLs.
        let addrs = |ix: &[usize]| -> String {
            let v: Vec<String> = ix
                .iter()
                .map(|&i| format!("\"{}\"", self.vifs[i].ip4))
                .collect();
            v.join(",")
        };
        c.push(cmd(&[
            "create",
            "Address_Set",
            "name=as_clients",
            &format!("addresses=[{}]", addrs(&self.clients)),
        ]));
        c.push(cmd(&[
            "create",
            "Address_Set",
            "name=as_blocked",
            &format!("addresses=[{}]", addrs(&self.blocked)),
        ]));
        if !self.pg_web.is_empty() {
            let mut v = cmd(&["pg-add", "pg_web"]);
            v.extend(self.pg_web.iter().map(|&i| self.vifs[i].name.clone()));
            c.push(v);
            let acl = |dir: &str, prio: &str, m: &str, act: &str| {
                cmd(&["--type=port-group", "acl-add", "pg_web", dir, prio, m, act])
            };
            c.push(acl(
                "to-lport",
                "1002",
                "outport == @pg_web && ip4 && ip4.src == $as_clients && tcp.dst == 80",
                "allow-related",
            ));
            c.push(acl(
                "to-lport",
                "1001",
                "outport == @pg_web && icmp4",
                "allow-stateless",
            ));
            c.push(acl("to-lport", "1000", "outport == @pg_web && ip", "drop"));
            c.push(acl(
                "from-lport",
                "1003",
                "inport == @pg_web && udp.dst == 53",
                "reject",
            ));
            c.push(acl(
                "from-lport",
                "1002",
                "inport == @pg_web && ip4.dst == $as_blocked",
                "drop",
            ));
        }
        if r.chance(50) {
            c.push(cmd(&[
                "acl-add",
                "sw0",
                "from-lport",
                "900",
                "ip4 && tcp.dst == 23",
                "drop",
            ]));
        }
        c
    }

    /// `ovn-sbctl` commands that bind every VIF and external port to a chassis.
    pub fn bindings(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .vifs
            .iter()
            .map(|v| (v.name.clone(), v.chassis.clone()))
            .collect();
        v.push(("ext-gw".into(), "gw1".into()));
        v.push(("ext-host".into(), "gw2".into()));
        v
    }

    fn make_packets(&self, r: &mut Rng, n: usize) -> Vec<Packet> {
        let mut out = Vec::new();
        let mut guard = 0;
        while out.len() < n && guard < n * 20 {
            guard += 1;
            let class = *r.pick(CLASSES);
            if let Some(p) = self.packet(r, class) {
                out.push(p);
            }
        }
        out
    }

    /// A new connection from `src` to the outside is SNATed to its subnet's SNAT address when
    /// nothing else interferes (no floating IP of its own, no ACL of pg_web).
    fn snat_expectation(&self, src: &Vif) -> Option<Expect> {
        let subnet = format!("10.{}.0.0/24", src.switch);
        let own = self
            .nats
            .iter()
            .any(|n| n.logical_ip == src.ip4 && n.kind == "dnat_and_snat");
        let idx = self.vifs.iter().position(|v| v.name == src.name)?;
        if own || self.pg_web.contains(&idx) || (self.vifs.len() > 1 && idx == 0) {
            return None;
        }
        self.nats
            .iter()
            .find(|n| n.kind == "snat" && n.logical_ip == subnet)
            .map(|n| Expect::SnatTo(n.external_ip.clone()))
    }

    fn lrp_of(&self, v: &Vif) -> &Lrp {
        &self.lrps[v.switch]
    }

    /// Conntrack states, uniform over every conntrack action of the path (so it does not
    /// matter which actions consume a state, only that there are enough): mostly a new
    /// connection; sometimes `est` (what ovn-trace assumes without `--ct`, given explicitly
    /// because holdfast's default is its what-if conntrack); sometimes the reply of an
    /// established connection.
    fn ct(&self, r: &mut Rng) -> Vec<String> {
        let s = match r.range(0, 9) {
            0..=5 => "new",
            6..=7 => "est",
            _ => "est,rpl",
        };
        vec![s.to_string(); 16]
    }

    fn l4(r: &mut Rng) -> String {
        match r.range(0, 3) {
            0 => format!(
                "tcp && tcp.src == {} && tcp.dst == 80",
                r.range(1024, 60000)
            ),
            1 => format!(
                "udp && udp.src == {} && udp.dst == 53",
                r.range(1024, 60000)
            ),
            2 => format!(
                "tcp && tcp.src == {} && tcp.dst == 22",
                r.range(1024, 60000)
            ),
            _ => "icmp4 && icmp4.type == 8 && icmp4.code == 0".to_string(),
        }
    }

    fn l4_v6(r: &mut Rng) -> String {
        match r.range(0, 2) {
            0 => format!(
                "tcp && tcp.src == {} && tcp.dst == 80",
                r.range(1024, 60000)
            ),
            1 => format!(
                "udp && udp.src == {} && udp.dst == 53",
                r.range(1024, 60000)
            ),
            _ => "icmp6 && icmp6.type == 128 && icmp6.code == 0".to_string(),
        }
    }

    fn ip4_flow(src: &Vif, eth_dst: &str, ip_src: &str, ip_dst: &str, ttl: u8, l4: &str) -> String {
        format!(
            "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip4.src == {} && ip4.dst == {} && ip.ttl == {} && {}",
            src.name, src.mac, eth_dst, ip_src, ip_dst, ttl, l4
        )
    }

    fn packet(&self, r: &mut Rng, class: &'static str) -> Option<Packet> {
        let src = r.pick(&self.vifs).clone();
        let dp = format!("sw{}", src.switch);
        let mut p = Packet {
            class,
            datapath: dp,
            microflow: String::new(),
            ct: self.ct(r),
            lb_dst: None,
            expect: None,
        };
        let l4 = Self::l4(r);
        match class {
            "l2" => {
                let dst = r.pick(&self.vifs);
                if dst.switch != src.switch || dst.name == src.name {
                    return None;
                }
                p.microflow = Self::ip4_flow(&src, &dst.mac, &src.ip4, &dst.ip4, 64, &l4);
            }
            "l2-v6" => {
                let dst = r.pick(&self.vifs);
                if dst.switch != src.switch || dst.name == src.name || !self.v6 {
                    return None;
                }
                p.microflow = format!(
                    "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip6.src == {} && ip6.dst == {} && ip.ttl == 64 && {}",
                    src.name,
                    src.mac,
                    dst.mac,
                    src.ip6.as_deref()?,
                    dst.ip6.as_deref()?,
                    Self::l4_v6(r)
                );
            }
            "l3" | "ttl1" => {
                let dst = r.pick(&self.vifs);
                if dst.switch == src.switch {
                    return None;
                }
                let ttl = if class == "ttl1" { 1 } else { 64 };
                p.microflow =
                    Self::ip4_flow(&src, &self.lrp_of(&src).mac, &src.ip4, &dst.ip4, ttl, &l4);
            }
            "l3-v6" => {
                let dst = r.pick(&self.vifs);
                if dst.switch == src.switch || !self.v6 {
                    return None;
                }
                p.microflow = format!(
                    "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip6.src == {} && ip6.dst == {} && ip.ttl == 64 && {}",
                    src.name,
                    src.mac,
                    self.lrp_of(&src).mac,
                    src.ip6.as_deref()?,
                    dst.ip6.as_deref()?,
                    Self::l4_v6(r)
                );
            }
            "acl-to-web" => {
                // Towards a member of pg_web: allowed from $as_clients on tcp 80 (new or
                // established), ICMP allowed statelessly, everything else dropped.
                if self.pg_web.is_empty() {
                    return None;
                }
                let dst = &self.vifs[*r.pick(&self.pg_web)];
                if dst.name == src.name {
                    return None;
                }
                let l4 = if r.chance(50) {
                    format!(
                        "tcp && tcp.src == {} && tcp.dst == 80",
                        r.range(1024, 60000)
                    )
                } else {
                    l4
                };
                let eth_dst = if dst.switch == src.switch {
                    dst.mac.clone()
                } else {
                    self.lrp_of(&src).mac.clone()
                };
                p.microflow = Self::ip4_flow(&src, &eth_dst, &src.ip4, &dst.ip4, 64, &l4);
            }
            "acl-from-web" => {
                // From a member of pg_web: reject on udp 53, drop towards $as_blocked.
                if self.pg_web.is_empty() {
                    return None;
                }
                let src = self.vifs[*r.pick(&self.pg_web)].clone();
                let dst = r.pick(&self.vifs);
                if dst.name == src.name {
                    return None;
                }
                p.datapath = format!("sw{}", src.switch);
                let eth_dst = if dst.switch == src.switch {
                    dst.mac.clone()
                } else {
                    self.lrp_of(&src).mac.clone()
                };
                p.microflow = Self::ip4_flow(&src, &eth_dst, &src.ip4, &dst.ip4, 64, &l4);
            }
            "snat-out" | "ecmp" | "policy" => {
                let dst = match class {
                    "snat-out" => format!("198.18.{}.{}", r.range(0, 255), r.range(1, 254)),
                    "ecmp" => format!("203.0.113.{}", r.range(1, 254)),
                    _ => r
                        .pick(&["198.51.100.5", "198.51.100.77", "198.51.100.88"])
                        .to_string(),
                };
                p.microflow = Self::ip4_flow(&src, &self.lrp_of(&src).mac, &src.ip4, &dst, 64, &l4);
                // A reply of an established connection is un-SNATed, not SNATed.
                if class == "snat-out" && !p.ct.iter().any(|c| c.contains("rpl")) {
                    p.expect = self.snat_expectation(&src);
                }
            }
            "snat-out-v6" => {
                if !self.v6 {
                    return None;
                }
                p.microflow = format!(
                    "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip6.src == {} && ip6.dst == 2001:db8::{:x} && ip.ttl == 64 && {}",
                    src.name,
                    src.mac,
                    self.lrp_of(&src).mac,
                    src.ip6.as_deref()?,
                    r.range(1, 0xffff),
                    Self::l4_v6(r)
                );
            }
            "fip-in" => {
                // From the external host to a floating IP / DNAT address.
                let nats: Vec<&Nat> = self.nats.iter().filter(|n| n.kind != "snat").collect();
                if nats.is_empty() {
                    return None;
                }
                let n = *r.pick(&nats);
                p.datapath = "ext".into();
                let eth_dst = n
                    .distributed
                    .as_ref()
                    .map_or(self.ext_lrp.mac.clone(), |(_, m)| m.clone());
                if n.external_ip.contains(':') {
                    p.microflow = format!(
                        "inport == \"ext-host\" && eth.src == {EXT_HOST_MAC} && eth.dst == {eth_dst} && ip6.src == {EXT_HOST_IP6} && ip6.dst == {} && ip.ttl == 64 && {}",
                        n.external_ip,
                        Self::l4_v6(r)
                    );
                } else {
                    p.microflow = format!(
                        "inport == \"ext-host\" && eth.src == {EXT_HOST_MAC} && eth.dst == {eth_dst} && ip4.src == {EXT_HOST_IP4} && ip4.dst == {} && ip.ttl == 64 && {l4}",
                        n.external_ip
                    );
                }
            }
            "lb-vip" => {
                if self.lbs.is_empty() {
                    return None;
                }
                let lb = r.pick(&self.lbs).clone();
                let l4 = format!(
                    "{} && {}.src == {} && {}.dst == {}",
                    lb.proto,
                    lb.proto,
                    r.range(1024, 60000),
                    lb.proto,
                    lb.port
                );
                if lb.backends.len() > 1 {
                    let (ip, port) = r.pick(&lb.backends);
                    p.lb_dst = Some(format!("{ip}:{port}"));
                }
                match lb.switch {
                    Some(k) => {
                        let src = self.vifs.iter().rfind(|v| v.switch == k)?.clone();
                        p.datapath = format!("sw{k}");
                        // Clients of a switch VIP address the router's MAC (the VIP is off
                        // every port).
                        p.microflow =
                            Self::ip4_flow(&src, &self.lrps[k].mac, &src.ip4, &lb.vip, 64, &l4);
                    }
                    None => {
                        p.datapath = "ext".into();
                        p.microflow = format!(
                            "inport == \"ext-host\" && eth.src == {EXT_HOST_MAC} && eth.dst == {} && ip4.src == {EXT_HOST_IP4} && ip4.dst == {} && ip.ttl == 64 && {l4}",
                            self.ext_lrp.mac, lb.vip
                        );
                    }
                }
            }
            "spoof-mac" | "spoof-ip" => {
                let dst = r.pick(&self.vifs);
                if dst.name == src.name {
                    return None;
                }
                let eth_dst = if dst.switch == src.switch {
                    dst.mac.clone()
                } else {
                    self.lrp_of(&src).mac.clone()
                };
                let mut fake = src.clone();
                let mut ip_src = src.ip4.clone();
                if class == "spoof-mac" {
                    fake.mac = "02:66:66:66:66:66".into();
                } else {
                    ip_src = format!("10.{}.0.99", src.switch);
                }
                p.microflow = Self::ip4_flow(&fake, &eth_dst, &ip_src, &dst.ip4, 64, &l4);
                if src.port_security {
                    p.expect = Some(Expect::Drop);
                }
            }
            "ping-router" => {
                // Its own router port or another of the router's addresses.
                let own = r.chance(50);
                if own {
                    p.expect = Some(Expect::OutputTo(src.name.clone()));
                }
                let target = if own {
                    self.lrp_of(&src).ip4.clone()
                } else {
                    r.pick(&[&self.ext_lrp.ip4, &self.lrps[0].ip4]).to_string()
                };
                p.microflow = Self::ip4_flow(
                    &src,
                    &self.lrp_of(&src).mac,
                    &src.ip4,
                    &target,
                    64,
                    "icmp4 && icmp4.type == 8 && icmp4.code == 0",
                );
            }
            "ping-router-v6" => {
                if !self.v6 {
                    return None;
                }
                p.microflow = format!(
                    "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip6.src == {} && ip6.dst == {} && ip.ttl == 64 && icmp6 && icmp6.type == 128 && icmp6.code == 0",
                    src.name,
                    src.mac,
                    self.lrp_of(&src).mac,
                    src.ip6.as_deref()?,
                    self.lrp_of(&src).ip6.as_deref()?
                );
            }
            "arp-router" => {
                let lrp = self.lrp_of(&src);
                let own = r.chance(80);
                if own {
                    p.expect = Some(Expect::OutputTo(src.name.clone()));
                }
                let tpa = if own {
                    lrp.ip4.clone()
                } else {
                    format!("10.{}.0.77", src.switch)
                };
                p.microflow = format!(
                    "inport == \"{}\" && eth.src == {} && eth.dst == ff:ff:ff:ff:ff:ff && arp.op == 1 && arp.sha == {} && arp.spa == {} && arp.tha == 00:00:00:00:00:00 && arp.tpa == {}",
                    src.name, src.mac, src.mac, src.ip4, tpa
                );
            }
            "nd-router" | "nd-vif" => {
                if !self.v6 {
                    return None;
                }
                let target = if class == "nd-router" {
                    self.lrp_of(&src).ip6.clone()?
                } else {
                    let dst = r.pick(&self.vifs);
                    if dst.switch != src.switch || dst.name == src.name {
                        return None;
                    }
                    dst.ip6.clone()?
                };
                p.expect = Some(Expect::OutputTo(src.name.clone()));
                let (ip6_dst, eth_dst) = solicited(&target);
                let ip6_src = if r.chance(50) {
                    src.ip6.clone()?
                } else {
                    link_local(&src.mac)
                };
                p.microflow = format!(
                    "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip6.src == {} && ip6.dst == {} && ip.ttl == 255 && nd_ns && nd.target == {} && nd.sll == {}",
                    src.name, src.mac, eth_dst, ip6_src, ip6_dst, target, src.mac
                );
            }
            _ => return None,
        }
        Some(p)
    }
}

/// Every packet class.
pub const CLASSES: &[&str] = &[
    "l2",
    "l2-v6",
    "l3",
    "l3-v6",
    "ttl1",
    "acl-to-web",
    "acl-to-web",
    "acl-from-web",
    "snat-out",
    "snat-out",
    "snat-out-v6",
    "ecmp",
    "policy",
    "fip-in",
    "fip-in",
    "lb-vip",
    "lb-vip",
    "spoof-mac",
    "spoof-ip",
    "ping-router",
    "ping-router-v6",
    "arp-router",
    "nd-router",
    "nd-vif",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_deterministic_and_covers_every_class() {
        let a = Topology::generate(7, 60);
        let b = Topology::generate(7, 60);
        assert_eq!(a.nb, b.nb);
        assert_eq!(
            a.packets.iter().map(|p| &p.microflow).collect::<Vec<_>>(),
            b.packets.iter().map(|p| &p.microflow).collect::<Vec<_>>()
        );
        let mut seen = std::collections::BTreeSet::new();
        for s in 0..20 {
            for p in Topology::generate(s, 60).packets {
                seen.insert(p.class);
            }
        }
        let all: std::collections::BTreeSet<_> = CLASSES.iter().copied().collect();
        assert_eq!(seen, all);
        assert_eq!(solicited("fd00:1::1").0, "ff02::1:ff00:0001");
    }
}
