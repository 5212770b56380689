//! Packet-in in the datapath, end to end: an SB written by real ovn-northd 23.03 (DHCPv4 and
//! DHCPv6 options on a port, DNS records on its switch, IPv6 RA on the router port), translated
//! for the chassis, compiled, and run in packet-in mode. Requests are built and replies decoded
//! with smoltcp (an independent implementation of DHCPv4, DNS, IPv4/IPv6/UDP/ICMPv6 and ND), and
//! DHCPv6 replies with Python's standard library (smoltcp has no DHCPv6).
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod common;

use common::SbOf;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hf_conntrack::{Config, Conntrack};
use hf_controller::{Extra, TranslateOptions, translate_with};
use hf_pipeline::{Destination, Ingress, Outputs, Pipeline, Program};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    DhcpMessageType, DhcpPacket, DhcpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv6Packet, Icmpv6Repr, IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr,
    Ipv6Packet, Ipv6Repr, NdiscPrefixInfoFlags, NdiscRepr, RawHardwareAddress, UdpPacket, UdpRepr,
};

/// smoltcp's DNS wire types under short names.
mod dns {
    pub use smoltcp::wire::{
        DnsFlags as Flags, DnsOpcode as Opcode, DnsPacket as Packet, DnsQueryType as Type,
        DnsQuestion as Question, DnsRecord as Record, DnsRecordData as RecordData, DnsRepr as Repr,
    };
}

const VM_MAC: [u8; 6] = [0, 0, 0, 0, 0, 1];
const SERVER_MAC: &str = "00:00:00:00:ff:01";
const SERVER_MAC_B: [u8; 6] = [0, 0, 0, 0, 0xff, 1];

fn topology(c: &common::Central) {
    let n = |args: &[&str]| c.nbctl(args).unwrap();
    n(&["ls-add", "sw0"]);
    n(&[
        "lsp-add",
        "sw0",
        "vm1",
        "--",
        "lsp-set-addresses",
        "vm1",
        "00:00:00:00:00:01 10.0.0.11 fd00::11",
        "--",
        "lsp-set-options",
        "vm1",
        "requested-chassis=hv1",
    ]);
    n(&["lr-add", "lr0"]);
    n(&[
        "lrp-add",
        "lr0",
        "lr0-sw0",
        SERVER_MAC,
        "10.0.0.1/24",
        "fd00::1/64",
    ]);
    n(&[
        "lsp-add",
        "sw0",
        "sw0-lr0",
        "--",
        "lsp-set-type",
        "sw0-lr0",
        "router",
        "--",
        "lsp-set-addresses",
        "sw0-lr0",
        "router",
        "--",
        "lsp-set-options",
        "sw0-lr0",
        "router-port=lr0-sw0",
    ]);
    n(&[
        "set",
        "Logical_Router_Port",
        "lr0-sw0",
        "ipv6_ra_configs:address_mode=slaac",
        "ipv6_ra_configs:mtu=1450",
        "ipv6_ra_configs:rdnss=fd00::53",
        "ipv6_ra_configs:dnssl=ovn.org,test.ovn.org",
        "ipv6_ra_configs:route_info=HIGH-fd01::/64,LOW-fd02::/48",
        "ipv6_ra_configs:router_preference=HIGH",
    ]);
    let v4 = n(&["dhcp-options-create", "10.0.0.0/24"]);
    let v4 = v4.trim();
    let v4 = if v4.is_empty() {
        n(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "DHCP_Options",
            "cidr=\"10.0.0.0/24\"",
        ])
    } else {
        v4.to_string()
    };
    let v4 = v4.trim().to_string();
    n(&[
        "dhcp-options-set-options",
        &v4,
        "server_id=10.0.0.1",
        &format!("server_mac={SERVER_MAC}"),
        "lease_time=3600",
        "router=10.0.0.1",
        "dns_server={8.8.8.8,1.1.1.1}",
        "mtu=1400",
        "domain_name=\"ovn.org\"",
    ]);
    n(&["lsp-set-dhcpv4-options", "vm1", &v4]);
    n(&["dhcp-options-create", "fd00::/64"]);
    let v6 = n(&[
        "--bare",
        "--columns=_uuid",
        "find",
        "DHCP_Options",
        "cidr=\"fd00::/64\"",
    ]);
    let v6 = v6.trim().to_string();
    n(&[
        "dhcp-options-set-options",
        &v6,
        &format!("server_id={SERVER_MAC}"),
        "dns_server={fd00::53}",
        "domain_search=\"ovn.org\"",
    ]);
    n(&["lsp-set-dhcpv6-options", "vm1", &v6]);
    let dns = n(&[
        "create",
        "DNS",
        "records={\"vm1.ovn.org\"=\"10.0.0.11 fd00::11\", \"11.0.0.10.in-addr.arpa\"=\"vm1.ovn.org\"}",
    ]);
    n(&["add", "Logical_Switch", "sw0", "dns_records", dns.trim()]);
    c.sbctl(&["chassis-add", "hv1", "geneve", "127.0.0.1"])
        .unwrap();
    c.sync().unwrap();
}

struct Chassis {
    pipe: Pipeline,
    ct: Conntrack,
    vm1: u32,
}

impl Chassis {
    fn new(c: &common::Central) -> Chassis {
        let sb = c.sb_snapshot();
        let t = translate_with(
            &sb,
            &TranslateOptions {
                chassis: Some("hv1".into()),
            },
            &Extra {
                only_needed: true,
                ..Extra::default()
            },
        );
        assert!(t.diagnostics.is_empty(), "{:#?}", t.diagnostics);
        let sw0 = t.spec.dns.iter().find(|d| d.datapath == "sw0");
        assert_eq!(
            sw0.and_then(|d| d.records.get("vm1.ovn.org"))
                .map(String::as_str),
            Some("10.0.0.11 fd00::11"),
            "DNS records of sw0 in the program: {:?}",
            t.spec.dns
        );
        let (prog, errs) = Program::compile(&t.spec).unwrap();
        assert!(errs.is_empty(), "{errs:#?}");
        let mut pipe = Pipeline::new(prog);
        pipe.set_packet_in(true);
        Chassis {
            pipe,
            ct: Conntrack::new(Config::default()),
            vm1: t.local_ports["vm1"],
        }
    }

    /// Runs `frame` from vm1 both cached (twice, so the second could be a cache hit) and
    /// uncached, checks all three agree, and returns the frames sent back to vm1.
    fn ask(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
        let now = Duration::from_secs(1);
        let mut runs = Vec::new();
        for cached in [true, true, false] {
            let mut out = Outputs::default();
            let from = Ingress::Local(self.vm1);
            if cached {
                self.pipe.process(&mut self.ct, from, frame, now, &mut out)
            } else {
                self.pipe
                    .process_uncached(&mut self.ct, from, frame, now, &mut out)
            }
            .unwrap();
            let v: Vec<(Destination, Vec<u8>)> = out.iter().map(|(d, b)| (d, b.to_vec())).collect();
            runs.push(v);
        }
        assert_eq!(runs[0], runs[1], "cached path differs from the first walk");
        assert_eq!(runs[0], runs[2], "cached path differs from the full walk");
        runs[0]
            .iter()
            .filter(|(d, _)| *d == Destination::Local(self.vm1))
            .map(|(_, b)| b.clone())
            .collect()
    }
}

fn eth(dst: [u8; 6], proto: EthernetProtocol, payload_len: usize) -> (EthernetRepr, Vec<u8>) {
    let r = EthernetRepr {
        src_addr: EthernetAddress(VM_MAC),
        dst_addr: EthernetAddress(dst),
        ethertype: proto,
    };
    (r, vec![0u8; r.buffer_len() + payload_len])
}

fn udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let udp = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Udp,
        payload_len: udp.header_len() + payload.len(),
        hop_limit: 64,
    };
    let dst_mac = if dst == Ipv4Addr::BROADCAST {
        [0xff; 6]
    } else {
        SERVER_MAC_B
    };
    let (e, mut buf) = eth(
        dst_mac,
        EthernetProtocol::Ipv4,
        ip.buffer_len() + ip.payload_len,
    );
    let mut f = EthernetFrame::new_unchecked(&mut buf);
    e.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p, &caps);
    let mut u = UdpPacket::new_unchecked(p.payload_mut());
    udp.emit(
        &mut u,
        &src.into(),
        &dst.into(),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &caps,
    );
    buf
}

fn udp6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    dst_mac: [u8; 6],
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let udp = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Udp,
        payload_len: udp.header_len() + payload.len(),
        hop_limit: 64,
    };
    let (e, mut buf) = eth(
        dst_mac,
        EthernetProtocol::Ipv6,
        ip.buffer_len() + ip.payload_len,
    );
    let mut f = EthernetFrame::new_unchecked(&mut buf);
    e.emit(&mut f);
    let mut p = Ipv6Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p);
    let mut u = UdpPacket::new_unchecked(p.payload_mut());
    udp.emit(
        &mut u,
        &src.into(),
        &dst.into(),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &caps,
    );
    buf
}

fn dhcp4_request(ty: DhcpMessageType, xid: u32, requested: Option<Ipv4Addr>) -> Vec<u8> {
    let params = [1u8, 3, 6, 15, 26, 51, 54];
    let repr = DhcpRepr {
        message_type: ty,
        transaction_id: xid,
        secs: 0,
        client_hardware_address: EthernetAddress(VM_MAC),
        client_ip: Ipv4Addr::UNSPECIFIED,
        your_ip: Ipv4Addr::UNSPECIFIED,
        server_ip: Ipv4Addr::UNSPECIFIED,
        router: None,
        subnet_mask: None,
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        broadcast: false,
        requested_ip: requested,
        client_identifier: Some(EthernetAddress(VM_MAC)),
        server_identifier: requested.map(|_| Ipv4Addr::new(10, 0, 0, 1)),
        parameter_request_list: Some(&params),
        dns_servers: None,
        max_size: Some(1432),
        lease_duration: None,
        renew_duration: None,
        rebind_duration: None,
        additional_options: &[],
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DhcpPacket::new_unchecked(&mut b)).unwrap();
    udp4(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, 68, 67, &b)
}

/// Decodes a DHCPv4 reply frame with smoltcp (checksums verified) and checks the headers the
/// response flow set: from the server MAC and IP to vm1's MAC, UDP 67 → 68.
fn decode_dhcp4(frame: &[u8], check: impl FnOnce(&DhcpRepr<'_>, Ipv4Addr)) {
    let f = EthernetFrame::new_checked(frame).unwrap();
    assert_eq!(f.src_addr(), EthernetAddress(SERVER_MAC_B));
    assert_eq!(f.dst_addr(), EthernetAddress(VM_MAC));
    assert_eq!(f.ethertype(), EthernetProtocol::Ipv4);
    let p = Ipv4Packet::new_checked(f.payload()).unwrap();
    assert!(p.verify_checksum(), "IPv4 header checksum");
    let ip = Ipv4Repr::parse(&p, &ChecksumCapabilities::default()).unwrap();
    assert_eq!(ip.src_addr, Ipv4Addr::new(10, 0, 0, 1));
    let u = UdpPacket::new_checked(p.payload()).unwrap();
    assert!(
        u.verify_checksum(&ip.src_addr.into(), &ip.dst_addr.into()),
        "UDP checksum"
    );
    assert_eq!((u.src_port(), u.dst_port()), (67, 68));
    let d = DhcpPacket::new_checked(u.payload()).unwrap();
    let r = DhcpRepr::parse(&d).unwrap();
    check(&r, ip.dst_addr);
}

fn ovn_offer_checks(r: &DhcpRepr<'_>) {
    assert_eq!(r.your_ip, Ipv4Addr::new(10, 0, 0, 11));
    assert_eq!(r.router, Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(r.subnet_mask, Some(Ipv4Addr::new(255, 255, 255, 0)));
    assert_eq!(r.lease_duration, Some(3600));
    assert_eq!(r.server_identifier, Some(Ipv4Addr::new(10, 0, 0, 1)));
    let dns: Vec<Ipv4Addr> = r.dns_servers.iter().flatten().copied().collect();
    assert_eq!(dns, [Ipv4Addr::new(8, 8, 8, 8), Ipv4Addr::new(1, 1, 1, 1)]);
    assert_eq!(r.client_hardware_address, EthernetAddress(VM_MAC));
}

fn need_ovn(test: &str) -> bool {
    common::require(
        test,
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "ovsdb-client",
            "ovn-northd",
            "ovn-nbctl",
            "ovn-sbctl",
            "python3",
        ],
    )
}

#[test]
fn real_northd_dhcp_dns_and_ra_are_answered_in_the_datapath() {
    if !need_ovn("real_northd_dhcp_dns_and_ra_are_answered_in_the_datapath") {
        return;
    }
    let c = common::Central::start().unwrap();
    topology(&c);
    let mut ch = Chassis::new(&c);

    // DHCPv4: DISCOVER → OFFER, REQUEST → ACK, REQUEST for another address → NAK.
    let got = ch.ask(&dhcp4_request(DhcpMessageType::Discover, 0x1234_5678, None));
    assert_eq!(got.len(), 1, "one OFFER back to vm1");
    decode_dhcp4(&got[0], |r, dst| {
        assert_eq!(r.message_type, DhcpMessageType::Offer);
        assert_eq!(r.transaction_id, 0x1234_5678);
        assert_eq!(dst, Ipv4Addr::new(10, 0, 0, 11));
        ovn_offer_checks(r);
    });
    // Another transaction: the reply carries its id (not a replay of the first).
    let got = ch.ask(&dhcp4_request(DhcpMessageType::Discover, 0xabcd, None));
    decode_dhcp4(&got[0], |r, _| assert_eq!(r.transaction_id, 0xabcd));
    let got = ch.ask(&dhcp4_request(
        DhcpMessageType::Request,
        0x1234_5679,
        Some(Ipv4Addr::new(10, 0, 0, 11)),
    ));
    decode_dhcp4(&got[0], |r, _| {
        assert_eq!(r.message_type, DhcpMessageType::Ack);
        ovn_offer_checks(r);
    });
    let got = ch.ask(&dhcp4_request(
        DhcpMessageType::Request,
        0x1234_567a,
        Some(Ipv4Addr::new(10, 0, 0, 99)),
    ));
    decode_dhcp4(&got[0], |r, _| {
        assert_eq!(r.message_type, DhcpMessageType::Nak);
        assert_eq!(r.your_ip, Ipv4Addr::UNSPECIFIED);
    });
    // A RELEASE gets no reply (pinctrl: result 0, and ls_in_dhcp_response does not match).
    let got = ch.ask(&dhcp4_request(DhcpMessageType::Release, 7, None));
    assert!(got.is_empty(), "no reply to a RELEASE: {got:?}");

    // DNS over IPv4: A, AAAA, PTR; an unknown name is not answered here.
    let v4 = |q: &[u8]| {
        udp4(
            Ipv4Addr::new(10, 0, 0, 11),
            Ipv4Addr::new(10, 0, 0, 1),
            5353,
            53,
            q,
        )
    };
    let a = decode_dns(
        &ch.ask(&v4(&dns_query(0x11, "VM1.ovn.org", dns::Type::A)))[..],
        false,
    );
    assert_eq!(a.0, 0x11);
    assert_eq!(a.1, ["A 10.0.0.11"]);
    let aaaa = decode_dns(
        &ch.ask(&v4(&dns_query(0x12, "vm1.ovn.org", dns::Type::Aaaa)))[..],
        false,
    );
    assert_eq!(aaaa.1, ["AAAA fd00::11"]);
    let ptr = decode_dns(
        &ch.ask(&v4(&dns_query(
            0x13,
            "11.0.0.10.in-addr.arpa",
            dns::Type::Unknown(12),
        )))[..],
        false,
    );
    assert_eq!(ptr.1, ["PTR vm1.ovn.org"]);
    let none = ch.ask(&v4(&dns_query(0x14, "vm9.ovn.org", dns::Type::A)));
    assert!(
        none.iter().all(|f| !is_dns_response(f)),
        "no DNS answer for an unknown name"
    );
    // DNS over IPv6.
    let q6 = udp6(
        "fd00::11".parse().unwrap(),
        "fd00::1".parse().unwrap(),
        SERVER_MAC_B,
        5353,
        53,
        &dns_query(0x15, "vm1.ovn.org", dns::Type::Aaaa),
    );
    let r6 = decode_dns(&ch.ask(&q6)[..], true);
    assert_eq!(r6.1, ["AAAA fd00::11"]);

    // DHCPv6: SOLICIT → ADVERTISE with IA_NA, server id, DNS server and domain search.
    let lla: Ipv6Addr = "fe80::200:ff:fe00:1".parse().unwrap();
    let solicit = dhcpv6_solicit(0x00ab_cdef, 0x0102_0304);
    let f = udp6(
        lla,
        "ff02::1:2".parse().unwrap(),
        [0x33, 0x33, 0, 1, 0, 2],
        546,
        547,
        &solicit,
    );
    let got = ch.ask(&f);
    assert_eq!(got.len(), 1, "one ADVERTISE back to vm1");
    let (src, dst, payload) = decode_udp6(&got[0], 547, 546);
    assert_eq!(dst, lla);
    assert_eq!(src, "fe80::200:ff:fe00:ff01".parse::<Ipv6Addr>().unwrap());
    let d = python_dhcpv6(&payload);
    assert_eq!(d["type"], 2, "{d}");
    assert_eq!(d["xid"], 0x00ab_cdef, "{d}");
    assert_eq!(d["server_duid"], "0003000100000000ff01", "{d}");
    assert_eq!(d["client_id"], "00030001000000000001", "{d}");
    assert_eq!(d["iaid"], 0x0102_0304, "{d}");
    assert_eq!(d["ia_addr"], "fd00::11", "{d}");
    assert_eq!(d["dns"], serde_json::json!(["fd00::53"]), "{d}");
    assert_eq!(d["search"], serde_json::json!(["ovn.org"]), "{d}");

    // Router Solicitation → Router Advertisement from the router port.
    let got = ch.ask(&router_solicit(lla));
    assert_eq!(got.len(), 1, "one RA back to vm1: {got:?}");
    let f = EthernetFrame::new_checked(&got[0][..]).unwrap();
    assert_eq!(f.src_addr(), EthernetAddress(SERVER_MAC_B));
    assert_eq!(f.dst_addr(), EthernetAddress(VM_MAC));
    let p = Ipv6Packet::new_checked(f.payload()).unwrap();
    let ip = Ipv6Repr::parse(&p).unwrap();
    assert_eq!(
        ip.src_addr,
        "fe80::200:ff:fe00:ff01".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(ip.dst_addr, lla);
    assert_eq!(ip.hop_limit, 255);
    let icmp = Icmpv6Packet::new_checked(p.payload()).unwrap();
    let r = Icmpv6Repr::parse(
        &ip.src_addr,
        &ip.dst_addr,
        &icmp,
        &ChecksumCapabilities::default(),
    )
    .unwrap();
    let Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
        hop_limit,
        router_lifetime,
        lladdr,
        mtu,
        prefix_info,
        ..
    }) = r
    else {
        panic!("not a router advertisement: {r:?}");
    };
    assert_eq!(hop_limit, 255);
    assert_eq!(router_lifetime, smoltcp::time::Duration::from_secs(65535));
    assert_eq!(lladdr, Some(RawHardwareAddress::from_bytes(&SERVER_MAC_B)));
    assert_eq!(mtu, Some(1450));
    let pi = prefix_info.expect("prefix information");
    assert_eq!(pi.prefix, "fd00::".parse::<Ipv6Addr>().unwrap());
    assert_eq!(pi.prefix_len, 64);
    assert!(
        pi.flags
            .contains(NdiscPrefixInfoFlags::ON_LINK | NdiscPrefixInfoFlags::ADDRCONF)
    );
    // The options smoltcp does not decode (RFC 8106 RDNSS/DNSSL, RFC 4191 route information
    // and preference), with Python's standard library.
    let ra = python_ra(p.payload());
    assert_eq!(ra["prf"], "HIGH", "{ra}");
    assert_eq!(ra["rdnss"], serde_json::json!(["fd00::53"]), "{ra}");
    assert_eq!(
        ra["dnssl"],
        serde_json::json!(["ovn.org", "test.ovn.org"]),
        "{ra}"
    );
    assert_eq!(
        ra["routes"],
        serde_json::json!([["HIGH", "fd01::/64"], ["LOW", "fd02::/48"]]),
        "{ra}"
    );

    let s = ch.pipe.packet_in_stats();
    // Each request ran three times (two cached runs and one full walk).
    assert_eq!(s.dhcp4_replies, 3 * 4, "{s:?}");
    assert_eq!(s.dns_replies, 3 * 4, "{s:?}");
    assert_eq!(s.dhcp6_replies, 3, "{s:?}");
    assert_eq!(s.ra_replies, 3, "{s:?}");
    assert_eq!(s.failures, 3 * 2, "RELEASE and the unknown name: {s:?}");
}

fn dns_query(id: u16, name: &str, ty: dns::Type) -> Vec<u8> {
    let mut wire = Vec::new();
    for l in name.split('.') {
        wire.push(l.len() as u8);
        wire.extend_from_slice(l.as_bytes());
    }
    wire.push(0);
    let repr = dns::Repr {
        transaction_id: id,
        opcode: dns::Opcode::Query,
        flags: dns::Flags::RECURSION_DESIRED,
        question: dns::Question {
            name: &wire,
            type_: ty,
        },
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut dns::Packet::new_unchecked(&mut b[..]));
    b
}

fn is_dns_response(frame: &[u8]) -> bool {
    frame.len() > 14 + 20 + 8 + 2 && frame[14 + 20 + 8 + 2] & 0x80 != 0
}

/// The (id, answers) of the one DNS response in `frames`, decoded with smoltcp.
fn decode_dns(frames: &[Vec<u8>], v6: bool) -> (u16, Vec<String>) {
    assert_eq!(frames.len(), 1, "one DNS response back to vm1");
    let f = EthernetFrame::new_checked(&frames[0][..]).unwrap();
    assert_eq!(f.dst_addr(), EthernetAddress(VM_MAC));
    assert_eq!(f.src_addr(), EthernetAddress(SERVER_MAC_B));
    let payload = if v6 {
        decode_udp6(&frames[0], 53, 5353).2
    } else {
        let p = Ipv4Packet::new_checked(f.payload()).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 11));
        let u = UdpPacket::new_checked(p.payload()).unwrap();
        assert!(u.verify_checksum(&p.src_addr().into(), &p.dst_addr().into()));
        assert_eq!((u.src_port(), u.dst_port()), (53, 5353));
        u.payload().to_vec()
    };
    let pkt = dns::Packet::new_checked(&payload[..]).unwrap();
    assert!(pkt.flags().contains(dns::Flags::RESPONSE));
    assert_eq!(pkt.question_count(), 1);
    let (mut rest, _) = dns::Question::parse(pkt.payload()).unwrap();
    let mut answers = Vec::new();
    for _ in 0..pkt.answer_record_count() {
        let (r, rec) = dns::Record::parse(rest).unwrap();
        rest = r;
        assert_eq!(rec.ttl, 3600);
        answers.push(match rec.data {
            dns::RecordData::A(a) => format!("A {a}"),
            dns::RecordData::Aaaa(a) => format!("AAAA {a}"),
            dns::RecordData::Other(dns::Type::Unknown(12), data) => {
                let labels: Vec<String> = pkt
                    .parse_name(data)
                    .map(|l| String::from_utf8(l.unwrap().to_vec()).unwrap())
                    .collect();
                format!("PTR {}", labels.join("."))
            }
            other => format!("{other:?}"),
        });
    }
    assert!(rest.is_empty(), "bytes after the answers");
    (pkt.transaction_id(), answers)
}

/// A SOLICIT with a DUID-LL client id and an IA_NA.
fn dhcpv6_solicit(xid: u32, iaid: u32) -> Vec<u8> {
    let mut m = vec![1u8];
    m.extend_from_slice(&xid.to_be_bytes()[1..]);
    m.extend_from_slice(&[0, 1, 0, 10, 0, 3, 0, 1]);
    m.extend_from_slice(&VM_MAC);
    m.extend_from_slice(&[0, 3, 0, 12]);
    m.extend_from_slice(&iaid.to_be_bytes());
    m.extend_from_slice(&[0; 8]);
    m.extend_from_slice(&[0, 8, 0, 2, 0, 0]);
    m
}

/// Decodes an IPv6/UDP frame with smoltcp (checksum verified): (src, dst, UDP payload).
fn decode_udp6(frame: &[u8], sport: u16, dport: u16) -> (Ipv6Addr, Ipv6Addr, Vec<u8>) {
    let f = EthernetFrame::new_checked(frame).unwrap();
    assert_eq!(f.ethertype(), EthernetProtocol::Ipv6);
    let p = Ipv6Packet::new_checked(f.payload()).unwrap();
    let ip = Ipv6Repr::parse(&p).unwrap();
    let u = UdpPacket::new_checked(p.payload()).unwrap();
    assert!(
        u.verify_checksum(&IpAddress::Ipv6(ip.src_addr), &IpAddress::Ipv6(ip.dst_addr)),
        "UDP checksum over IPv6"
    );
    assert_eq!((u.src_port(), u.dst_port()), (sport, dport));
    (ip.src_addr, ip.dst_addr, u.payload().to_vec())
}

/// Runs a Python decoder `script` on `m` (given as hex in `argv[1]`); its JSON output.
fn python_decode(script: &str, m: &[u8]) -> serde_json::Value {
    let hex: String = m.iter().map(|b| format!("{b:02x}")).collect();
    let out = std::process::Command::new("python3")
        .args(["-c", script, &hex])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Decodes a DHCPv6 message with Python's standard library (RFC 8415 layout).
fn python_dhcpv6(m: &[u8]) -> serde_json::Value {
    let script = r#"
import sys, struct, json, ipaddress
m = bytes.fromhex(sys.argv[1])
out = {"type": m[0], "xid": int.from_bytes(m[1:4], "big")}
def opts(b):
    i = 0
    while i + 4 <= len(b):
        code, ln = struct.unpack("!HH", b[i:i+4])
        yield code, b[i+4:i+4+ln]
        i += 4 + ln
    assert i == len(b), "trailing bytes"
def names(b):
    res, cur, i = [], [], 0
    while i < len(b):
        n = b[i]; i += 1
        if n == 0:
            res.append(".".join(cur)); cur = []
        else:
            cur.append(b[i:i+n].decode()); i += n
    assert not cur
    return res
for code, body in opts(m[4:]):
    if code == 1: out["client_id"] = body.hex()
    elif code == 2: out["server_duid"] = body.hex()
    elif code == 3:
        out["iaid"], t1, t2 = struct.unpack("!III", body[:12])
        for c2, b2 in opts(body[12:]):
            if c2 == 5: out["ia_addr"] = str(ipaddress.IPv6Address(b2[:16]))
    elif code == 23: out["dns"] = [str(ipaddress.IPv6Address(body[i:i+16])) for i in range(0, len(body), 16)]
    elif code == 24: out["search"] = names(body)
print(json.dumps(out))
"#;
    python_decode(script, m)
}

fn router_solicit(src: Ipv6Addr) -> Vec<u8> {
    let dst: Ipv6Addr = "ff02::2".parse().unwrap();
    let rs = Icmpv6Repr::Ndisc(NdiscRepr::RouterSolicit {
        lladdr: Some(RawHardwareAddress::from_bytes(&VM_MAC)),
    });
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: rs.buffer_len(),
        hop_limit: 255,
    };
    let (e, mut buf) = eth(
        [0x33, 0x33, 0, 0, 0, 2],
        EthernetProtocol::Ipv6,
        ip.buffer_len() + ip.payload_len,
    );
    let mut f = EthernetFrame::new_unchecked(&mut buf);
    e.emit(&mut f);
    let mut p = Ipv6Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p);
    let mut icmp = Icmpv6Packet::new_unchecked(p.payload_mut());
    rs.emit(&src, &dst, &mut icmp, &ChecksumCapabilities::default());
    buf
}

/// An in-memory Ethernet device for a smoltcp interface: frames it sends pile up in `tx`,
/// frames in `rx` are received.
#[derive(Default)]
struct Wire {
    rx: std::collections::VecDeque<Vec<u8>>,
    tx: Vec<Vec<u8>>,
}

struct Rx(Vec<u8>);
struct Tx<'a>(&'a mut Vec<Vec<u8>>);

impl smoltcp::phy::RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl smoltcp::phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut b = vec![0u8; len];
        let r = f(&mut b);
        self.0.push(b);
        r
    }
}

impl smoltcp::phy::Device for Wire {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;
    fn receive(
        &mut self,
        _: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let f = self.rx.pop_front()?;
        Some((Rx(f), Tx(&mut self.tx)))
    }
    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(Tx(&mut self.tx))
    }
    fn capabilities(&self) -> smoltcp::phy::DeviceCapabilities {
        let mut c = smoltcp::phy::DeviceCapabilities::default();
        c.medium = smoltcp::phy::Medium::Ethernet;
        c.max_transmission_unit = 1514;
        c
    }
}

/// smoltcp's own DHCPv4 client, attached to vm1, gets its address, router and DNS servers from
/// the datapath's replies (DISCOVER → OFFER → REQUEST → ACK).
#[test]
fn smoltcp_dhcp_client_is_configured_through_the_pipeline() {
    if !need_ovn("smoltcp_dhcp_client_is_configured_through_the_pipeline") {
        return;
    }
    use smoltcp::iface::{Config as IfConfig, Interface, SocketSet};
    use smoltcp::socket::dhcpv4;
    use smoltcp::time::Instant;
    use smoltcp::wire::HardwareAddress;

    let c = common::Central::start().unwrap();
    topology(&c);
    let mut ch = Chassis::new(&c);
    let mut dev = Wire::default();
    let mut cfg = IfConfig::new(HardwareAddress::Ethernet(EthernetAddress(VM_MAC)));
    cfg.random_seed = 42;
    let mut iface = Interface::new(cfg, &mut dev, Instant::from_millis(0));
    let mut sockets = SocketSet::new(vec![]);
    let h = sockets.add(dhcpv4::Socket::new());
    let mut configured = None;
    for ms in (0..20_000).step_by(100) {
        let now = Instant::from_millis(ms);
        iface.poll(now, &mut dev, &mut sockets);
        for f in std::mem::take(&mut dev.tx) {
            dev.rx.extend(ch.ask(&f));
        }
        iface.poll(now, &mut dev, &mut sockets);
        if let Some(dhcpv4::Event::Configured(cfg)) = sockets.get_mut::<dhcpv4::Socket>(h).poll() {
            configured = Some((cfg.address, cfg.router, cfg.dns_servers.to_vec()));
            break;
        }
    }
    let (addr, router, dns) = configured.expect("smoltcp's DHCP client got configured");
    assert_eq!(addr.address(), Ipv4Addr::new(10, 0, 0, 11));
    assert_eq!(addr.prefix_len(), 24);
    assert_eq!(router, Some(Ipv4Addr::new(10, 0, 0, 1)));
    assert_eq!(dns, [Ipv4Addr::new(8, 8, 8, 8), Ipv4Addr::new(1, 1, 1, 1)]);
    let s = ch.pipe.packet_in_stats();
    assert!(
        s.dhcp4_replies >= 2 * 3,
        "an OFFER and an ACK (each run three ways): {s:?}"
    );

    // Renewal at T1 (half the 3600 s lease): a unicast REQUEST from 10.0.0.11 with `ciaddr`
    // set (northd's second DHCP flow) is ACKed, and the client stays configured.
    iface.update_ip_addrs(|a| {
        a.push(smoltcp::wire::IpCidr::new(
            IpAddress::Ipv4(addr.address()),
            24,
        ))
        .unwrap();
    });
    let before = ch.pipe.packet_in_stats().dhcp4_replies;
    let mut renewed = false;
    for ms in (1_790_000..1_900_000).step_by(1000) {
        let now = Instant::from_millis(ms);
        iface.poll(now, &mut dev, &mut sockets);
        for f in std::mem::take(&mut dev.tx) {
            // A renewal is unicast from the leased address.
            let e = EthernetFrame::new_checked(&f[..]).unwrap();
            if e.ethertype() == EthernetProtocol::Ipv4 {
                let p = Ipv4Packet::new_checked(e.payload()).unwrap();
                renewed |= p.src_addr() == Ipv4Addr::new(10, 0, 0, 11)
                    && p.dst_addr() == Ipv4Addr::new(10, 0, 0, 1);
            }
            dev.rx.extend(ch.ask(&f));
        }
        iface.poll(now, &mut dev, &mut sockets);
        if let Some(dhcpv4::Event::Deconfigured) = sockets.get_mut::<dhcpv4::Socket>(h).poll() {
            panic!("the client lost its lease while renewing");
        }
    }
    assert!(renewed, "the client sent a unicast renewal");
    let after = ch.pipe.packet_in_stats().dhcp4_replies;
    assert_eq!(after - before, 3, "one ACK to the renewal (run three ways)");
}

/// Decodes a Router Advertisement's preference and RDNSS, DNSSL and route information options
/// with Python's standard library (RFC 4861, 4191, 8106 layouts).
fn python_ra(m: &[u8]) -> serde_json::Value {
    let script = r#"
import sys, json, ipaddress
m = bytes.fromhex(sys.argv[1])
assert m[0] == 134
prf = {0: "MEDIUM", 1: "HIGH", 3: "LOW", 2: "RESERVED"}
out = {"prf": prf[(m[5] >> 3) & 3], "rdnss": [], "dnssl": [], "routes": []}
i = 16
while i < len(m):
    t, ln = m[i], m[i + 1] * 8
    assert ln > 0 and i + ln <= len(m), "bad option length"
    body = m[i:i + ln]
    if t == 25:
        for j in range(8, ln, 16):
            out["rdnss"].append(str(ipaddress.IPv6Address(body[j:j + 16])))
    elif t == 31:
        j, cur = 8, []
        while j < ln:
            n = body[j]; j += 1
            if n == 0:
                if cur: out["dnssl"].append(".".join(cur)); cur = []
            else:
                cur.append(body[j:j + n].decode()); j += n
    elif t == 24:
        plen = body[2]
        pre = body[8:].ljust(16, b"\0")
        out["routes"].append([prf[(body[3] >> 3) & 3], str(ipaddress.IPv6Network((pre, plen)))])
    i += ln
print(json.dumps(out))
"#;
    python_decode(script, m)
}
