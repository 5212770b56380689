//! Multi-packet flows over a generated topology: who starts them, towards what, and the script
//! of packets both ends send. The server's packets are built from the frame that actually
//! arrived at it (addresses and ports swapped: after SNAT the reply goes to the translated
//! address and port seen on the wire, after DNAT or a load balancer it comes from the backend),
//! and it answers from the interface where that frame came out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::topo::{
    EXT_GW_IP4, EXT_GW_IP6, EXT_GW_MAC, EXT_HOST_IP4, EXT_HOST_IP6, EXT_HOST_MAC, Rng, Topology,
};
use crate::wire::{
    Arp, Body, Frame, Ip4, Ip6, L4, Mac, TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN, parse_mac,
};

/// A host: its interface (= its logical port), MAC, IPv4 address and IPv6 address (in a
/// topology with IPv6).
#[derive(Debug, Clone)]
pub struct Host {
    pub port: String,
    pub mac: Mac,
    pub ip: Ipv4Addr,
    pub ip6: Option<Ipv6Addr>,
}

/// How a TCP flow ends.
#[derive(Debug, Clone, Copy)]
pub enum End {
    /// The client sends FIN.
    Fin,
    /// The server resets.
    Rst,
}

#[derive(Debug, Clone)]
pub enum Kind {
    /// SYN, SYN-ACK, ACK, data both ways, FIN or RST.
    Tcp { sport: u16, dport: u16, end: End },
    /// Request, reply, request.
    Udp { sport: u16, dport: u16 },
    /// Echo request, reply, request.
    Icmp { id: u16 },
    /// Two echo requests (to a router address: the router answers).
    Ping { id: u16 },
    /// An ARP request for the destination address.
    Arp,
}

/// One flow.
#[derive(Debug, Clone)]
pub struct Flow {
    pub class: &'static str,
    pub client: Host,
    pub dst_mac: Mac,
    /// IPv4 or IPv6: the client sends from its address of the same family.
    pub dst_ip: IpAddr,
    /// TTL or hop limit.
    pub ttl: u8,
    pub kind: Kind,
}

/// Who sends a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

const C_ISN: u32 = 1_000_000;
const S_ISN: u32 = 7_000_000;
const DATA: &[u8] = b"holdfast";

impl Flow {
    /// The roles of its packets, in order.
    pub fn script(&self) -> Vec<Role> {
        use Role::*;
        match self.kind {
            Kind::Tcp { end: End::Fin, .. } => vec![Client, Server, Client, Client, Server, Client],
            Kind::Tcp { end: End::Rst, .. } => vec![Client, Server, Client, Client, Server, Server],
            Kind::Udp { .. } | Kind::Icmp { .. } => vec![Client, Server, Client],
            Kind::Ping { .. } => vec![Client, Client],
            Kind::Arp => vec![Client],
        }
    }

    /// Whether the real datapath must start again after this flow: a TCP reset sent by
    /// pinctrl (a `reject` ACL) makes real OVS 3.1.0's userspace conntrack abort on a later
    /// packet (`KNOWN_ORACLE_LIMITS` in `datapath_oracle.rs`), so both sides start afresh
    /// after every flow that may produce one.
    pub fn restart_after(&self) -> bool {
        self.class.starts_with("reject")
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        format!(
            "[{}] {} ({}) -> {} via {} ttl {}: {:?}",
            self.class,
            self.client.port,
            self.src_ip(),
            self.dst_ip,
            crate::wire::fmt_mac(&self.dst_mac),
            self.ttl,
            self.kind
        )
    }

    /// The client's address in the destination's family.
    fn src_ip(&self) -> IpAddr {
        match self.dst_ip {
            IpAddr::V4(_) => self.client.ip.into(),
            IpAddr::V6(_) => self
                .client
                .ip6
                .expect("an IPv6 flow's client has an IPv6 address")
                .into(),
        }
    }

    /// The client's packet at step `k` (`id`: its IP ID; unused in IPv6).
    pub fn client_frame(&self, k: usize, id: u16) -> Frame {
        if let (Kind::Arp, IpAddr::V4(tpa)) = (&self.kind, self.dst_ip) {
            return Frame {
                dst: [0xff; 6],
                src: self.client.mac,
                body: Body::Arp(Arp {
                    op: 1,
                    sha: self.client.mac,
                    spa: self.client.ip,
                    tha: [0; 6],
                    tpa,
                }),
            };
        }
        let l4 = match self.kind {
            Kind::Tcp { sport, dport, .. } => {
                let (seq, ack, flags, payload) = match k {
                    0 => (C_ISN, 0, TCP_SYN, vec![]),
                    2 => (C_ISN + 1, S_ISN + 1, TCP_ACK, vec![]),
                    3 => (C_ISN + 1, S_ISN + 1, TCP_PSH | TCP_ACK, DATA.to_vec()),
                    _ => (
                        C_ISN + 1 + DATA.len() as u32,
                        S_ISN + 1 + DATA.len() as u32,
                        TCP_FIN | TCP_ACK,
                        vec![],
                    ),
                };
                L4::Tcp {
                    sport,
                    dport,
                    seq,
                    ack,
                    flags,
                    payload,
                }
            }
            Kind::Udp { sport, dport } => L4::Udp {
                sport,
                dport,
                payload: DATA.to_vec(),
            },
            Kind::Icmp { id: icmp_id } | Kind::Ping { id: icmp_id } => {
                let seq = k as u16 + 1;
                let mut rest = [0u8; 4];
                rest[..2].copy_from_slice(&icmp_id.to_be_bytes());
                rest[2..].copy_from_slice(&seq.to_be_bytes());
                L4::Icmp {
                    ty: if self.dst_ip.is_ipv6() { 128 } else { 8 },
                    code: 0,
                    rest,
                    payload: DATA.to_vec(),
                }
            }
            Kind::Arp => unreachable!("an ARP flow is to an IPv4 address"),
        };
        Frame {
            dst: self.dst_mac,
            src: self.client.mac,
            body: ip_body(self.src_ip(), self.dst_ip, self.ttl, id, l4),
        }
    }

    /// The server's packet at step `k`, answering `arrived` (the last client packet as it
    /// came out at the server); `None` when that is not a packet of this flow's protocol.
    pub fn server_frame(&self, k: usize, arrived: &Frame, id: u16) -> Option<Frame> {
        let (src, dst, l4) = arrived.ip()?;
        let l4 = match (&self.kind, l4) {
            (Kind::Tcp { end, .. }, L4::Tcp { sport, dport, .. }) => {
                let d = DATA.len() as u32;
                let (seq, ack, flags, payload) = match (k, end) {
                    (1, _) => (S_ISN, C_ISN + 1, TCP_SYN | TCP_ACK, vec![]),
                    (4, _) => (S_ISN + 1, C_ISN + 1 + d, TCP_PSH | TCP_ACK, DATA.to_vec()),
                    _ => (S_ISN + 1 + d, C_ISN + 1 + d, TCP_RST | TCP_ACK, vec![]),
                };
                L4::Tcp {
                    sport: *dport,
                    dport: *sport,
                    seq,
                    ack,
                    flags,
                    payload,
                }
            }
            (Kind::Udp { .. }, L4::Udp { sport, dport, .. }) => L4::Udp {
                sport: *dport,
                dport: *sport,
                payload: DATA.to_vec(),
            },
            (
                Kind::Icmp { .. },
                L4::Icmp {
                    ty: ty @ (8 | 128),
                    rest,
                    ..
                },
            ) => L4::Icmp {
                ty: if *ty == 8 { 0 } else { 129 },
                code: 0,
                rest: *rest,
                payload: DATA.to_vec(),
            },
            _ => return None,
        };
        Some(Frame {
            dst: arrived.src,
            src: arrived.dst,
            body: ip_body(dst, src, 64, id, l4),
        })
    }
}

/// An IPv4 or IPv6 packet from `src` to `dst` (one family) with TTL or hop limit `ttl`.
fn ip_body(src: IpAddr, dst: IpAddr, ttl: u8, id: u16, l4: L4) -> Body {
    match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => Body::Ip4(Ip4 {
            src,
            dst,
            ttl,
            id,
            tos: 0,
            df: false,
            l4,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => Body::Ip6(Ip6 {
            src,
            dst,
            hlim: ttl,
            tc: 0,
            flow_label: 0,
            l4,
        }),
        _ => unreachable!("one family per packet"),
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("generated IPv4")
}

fn ip6(s: &str) -> Ipv6Addr {
    s.parse().expect("generated IPv6")
}

/// The hosts of a topology: its VIFs, and the external gateway and host (VIFs on the
/// external switch, bound to the one chassis like the others).
pub fn hosts(t: &Topology) -> Vec<Host> {
    let mut v: Vec<Host> = t
        .vifs
        .iter()
        .map(|v| Host {
            port: v.name.clone(),
            mac: parse_mac(&v.mac),
            ip: ip(&v.ip4),
            ip6: v.ip6.as_deref().map(ip6),
        })
        .collect();
    for (p, mac, a, a6) in [
        ("ext-gw", EXT_GW_MAC, EXT_GW_IP4, EXT_GW_IP6),
        ("ext-host", EXT_HOST_MAC, EXT_HOST_IP4, EXT_HOST_IP6),
    ] {
        v.push(Host {
            port: p.into(),
            mac: parse_mac(mac),
            ip: ip(a),
            ip6: t.v6.then(|| ip6(a6)),
        });
    }
    v
}

const CLASSES: &[&str] = &[
    "l2",
    "l2",
    "l3",
    "l3",
    "acl-to-web",
    "acl-from-web",
    "reject-tcp",
    "snat-out",
    "snat-out",
    "fip-in",
    "lb-vip",
    "ext-direct",
    "reject-in",
    "ttl1",
    "ping-router",
    "arp-router",
    // IPv6 (topologies with IPv6 only).
    "l2-v6",
    "l3-v6",
    "l3-v6",
    "out-v6",
    "fip-in-v6",
    "ext-direct-v6",
    "acl-to-web-v6",
    "hlim1-v6",
    "ping-router-v6",
];

/// Reject flows per topology, at most.
const MAX_REJECT_FLOWS: usize = 12;

fn any_kind(r: &mut Rng, tcp_ports: &[u16]) -> Kind {
    let sport = r.range(1024, 60000) as u16;
    match r.range(0, 5) {
        0..=2 => Kind::Tcp {
            sport,
            dport: *r.pick(tcp_ports),
            end: if r.chance(70) { End::Fin } else { End::Rst },
        },
        3 | 4 => Kind::Udp {
            sport,
            dport: *r.pick(&[53u16, 123]),
        },
        _ => Kind::Icmp {
            id: r.range(1, 65000) as u16,
        },
    }
}

/// About `n` flows for `t`, seeded.
pub fn make_flows(t: &Topology, seed: u64, n: usize) -> Vec<Flow> {
    let mut r = Rng::new(seed ^ 0x0dd_c0de);
    let hosts = hosts(t);
    let nv = t.vifs.len();
    let ext_host = hosts[nv + 1].clone();
    let ext_mac = parse_mac(&t.ext_lrp.mac);
    let mut out = Vec::new();
    let mut guard = 0;
    while out.len() < n && guard < n * 30 {
        guard += 1;
        let class = *r.pick(CLASSES);
        // Both sides start again after each reject flow (`Flow::restart_after`): a dozen per
        // topology keeps the run short.
        if class.starts_with("reject")
            && out.iter().filter(|f: &&Flow| f.restart_after()).count() >= MAX_REJECT_FLOWS
        {
            continue;
        }
        let ci = r.range(0, nv - 1);
        let c = hosts[ci].clone();
        let lrp_mac = |i: usize| parse_mac(&t.lrps[t.vifs[i].switch].mac);
        let towards = |i: usize, j: usize| -> Mac {
            if t.vifs[i].switch == t.vifs[j].switch {
                hosts[j].mac
            } else {
                lrp_mac(i)
            }
        };
        let kind = any_kind(&mut r, &[80, 22, 8080]);
        let flow = |client: Host, dst_mac, dst_ip, kind| Flow {
            class,
            client,
            dst_mac,
            dst_ip,
            ttl: 64,
            kind,
        };
        if class.ends_with("-v6") && !t.v6 {
            continue;
        }
        let v6_of = |h: &Host| IpAddr::from(h.ip6.expect("an IPv6 topology's host"));
        let f = match class {
            "l2-v6" | "l3-v6" | "hlim1-v6" => {
                let d = r.range(0, nv - 1);
                let same = t.vifs[d].switch == t.vifs[ci].switch;
                if d == ci || same != (class == "l2-v6") {
                    continue;
                }
                let mut f = flow(c, towards(ci, d), v6_of(&hosts[d]), kind);
                if class == "hlim1-v6" {
                    f.ttl = 1;
                }
                f
            }
            "out-v6" => {
                let dst = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, r.range(1, 0xfffe) as u16);
                flow(c, lrp_mac(ci), dst.into(), kind)
            }
            "fip-in-v6" => {
                let Some(n) = t.nats.iter().find(|n| n.external_ip.contains(':')) else {
                    continue;
                };
                let dst = IpAddr::from(ip6(&n.external_ip));
                flow(ext_host.clone(), ext_mac, dst, kind)
            }
            "ext-direct-v6" => {
                let d = r.range(0, nv - 1);
                flow(ext_host.clone(), ext_mac, v6_of(&hosts[d]), kind)
            }
            "acl-to-web-v6" => {
                if t.pg_web.is_empty() {
                    continue;
                }
                let d = *r.pick(&t.pg_web);
                if d == ci {
                    continue;
                }
                flow(c, towards(ci, d), v6_of(&hosts[d]), kind)
            }
            "ping-router-v6" => {
                let own = t.lrps[t.vifs[ci].switch].ip6.as_deref().map(ip6);
                let target = if r.chance(50) {
                    own
                } else {
                    t.ext_lrp.ip6.as_deref().map(ip6)
                };
                let Some(target) = target else {
                    continue;
                };
                flow(
                    c,
                    lrp_mac(ci),
                    target.into(),
                    Kind::Ping {
                        id: r.range(1, 65000) as u16,
                    },
                )
            }
            "l2" | "l3" => {
                let d = r.range(0, nv - 1);
                let same = t.vifs[d].switch == t.vifs[ci].switch;
                if d == ci || same != (class == "l2") {
                    continue;
                }
                flow(c, towards(ci, d), hosts[d].ip.into(), kind)
            }
            "acl-to-web" | "reject-tcp" => {
                if t.pg_web.is_empty() {
                    continue;
                }
                let d = *r.pick(&t.pg_web);
                if d == ci {
                    continue;
                }
                let kind = match (class, r.chance(60)) {
                    ("reject-tcp", _) | (_, true) => Kind::Tcp {
                        sport: r.range(1024, 60000) as u16,
                        dport: if class == "reject-tcp" { 25 } else { 80 },
                        end: End::Fin,
                    },
                    _ => kind,
                };
                flow(c, towards(ci, d), hosts[d].ip.into(), kind)
            }
            "acl-from-web" => {
                if t.pg_web.is_empty() {
                    continue;
                }
                let s = *r.pick(&t.pg_web);
                let d = r.range(0, nv - 1);
                if d == s {
                    continue;
                }
                let kind = if r.chance(50) {
                    Kind::Udp {
                        sport: r.range(1024, 60000) as u16,
                        dport: 53,
                    }
                } else {
                    kind
                };
                flow(hosts[s].clone(), towards(s, d), hosts[d].ip.into(), kind)
            }
            "snat-out" => {
                let dst = Ipv4Addr::new(198, 18, r.range(0, 255) as u8, r.range(1, 254) as u8);
                flow(c, lrp_mac(ci), dst.into(), kind)
            }
            "fip-in" => {
                let nats: Vec<_> = t
                    .nats
                    .iter()
                    .filter(|n| n.kind != "snat" && !n.external_ip.contains(':'))
                    .collect();
                if nats.is_empty() {
                    continue;
                }
                let n = *r.pick(&nats);
                let mac = n
                    .distributed
                    .as_ref()
                    .map_or(ext_mac, |(_, m)| parse_mac(m));
                flow(ext_host.clone(), mac, ip(&n.external_ip).into(), kind)
            }
            "lb-vip" => {
                let lbs: Vec<_> = t.lbs.iter().filter(|l| l.backends.len() == 1).collect();
                if lbs.is_empty() {
                    continue;
                }
                let lb = *r.pick(&lbs);
                let sport = r.range(1024, 60000) as u16;
                let kind = if lb.proto == "tcp" {
                    Kind::Tcp {
                        sport,
                        dport: lb.port,
                        end: End::Fin,
                    }
                } else {
                    Kind::Udp {
                        sport,
                        dport: lb.port,
                    }
                };
                match lb.switch {
                    Some(k) => {
                        let Some(ci) = t.vifs.iter().rposition(|v| v.switch == k) else {
                            continue;
                        };
                        flow(
                            hosts[ci].clone(),
                            parse_mac(&t.lrps[k].mac),
                            ip(&lb.vip).into(),
                            kind,
                        )
                    }
                    None => flow(ext_host.clone(), ext_mac, ip(&lb.vip).into(), kind),
                }
            }
            "ext-direct" | "reject-in" => {
                let d = if class == "reject-in" {
                    if t.pg_web.is_empty() {
                        continue;
                    }
                    *r.pick(&t.pg_web)
                } else {
                    r.range(0, nv - 1)
                };
                let kind = if class == "reject-in" {
                    Kind::Tcp {
                        sport: r.range(1024, 60000) as u16,
                        dport: 25,
                        end: End::Fin,
                    }
                } else {
                    kind
                };
                flow(ext_host.clone(), ext_mac, hosts[d].ip.into(), kind)
            }
            "ttl1" => {
                let d = r.range(0, nv - 1);
                if t.vifs[d].switch == t.vifs[ci].switch {
                    continue;
                }
                let mut f = flow(c, lrp_mac(ci), hosts[d].ip.into(), kind);
                f.ttl = 1;
                f
            }
            "ping-router" => {
                let own = ip(&t.lrps[t.vifs[ci].switch].ip4);
                let target = if r.chance(50) {
                    own
                } else {
                    ip(&t.ext_lrp.ip4)
                };
                flow(
                    c,
                    lrp_mac(ci),
                    target.into(),
                    Kind::Ping {
                        id: r.range(1, 65000) as u16,
                    },
                )
            }
            "arp-router" => {
                let lrp = &t.lrps[t.vifs[ci].switch];
                flow(c, [0xff; 6], ip(&lrp.ip4).into(), Kind::Arp)
            }
            _ => continue,
        };
        out.push(f);
    }
    out
}
