//! The packet-in builders (`dhcp`, `dns`, `ra`) against an independent implementation:
//! requests are built and replies decoded with smoltcp's wire types (DHCPv4, DNS names with
//! compression pointers, IPv4/UDP checksums), plus property tests that no input panics.
#![allow(clippy::unwrap_used)]

use std::net::Ipv4Addr;

use hf_wire::dhcp::{self, Arg, Dhcp4Opts, Dhcp6Opts, DhcpError};
use hf_wire::ra::{self, RaError, RaOpts};
use hf_wire::{dns, parse};
use proptest::prelude::*;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    DhcpMessageType, DhcpPacket, DhcpRepr, DnsPacket, EthernetAddress, EthernetFrame,
    EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

fn num(v: u128) -> Vec<Arg> {
    vec![Arg::Num {
        value: v,
        prefix: None,
    }]
}

fn ip(a: [u8; 4]) -> u128 {
    u128::from(u32::from(Ipv4Addr::from(a)))
}

fn args(v: &[(&str, Vec<Arg>)]) -> Vec<(String, Vec<Arg>)> {
    v.iter().map(|(n, a)| (n.to_string(), a.clone())).collect()
}

/// OVN northd's usual options for 10.0.0.0/24.
fn ovn_opts(offer: [u8; 4]) -> Dhcp4Opts {
    Dhcp4Opts::encode(&args(&[
        ("offerip", num(ip(offer))),
        (
            "dns_server",
            vec![
                Arg::Num {
                    value: ip([8, 8, 8, 8]),
                    prefix: None,
                },
                Arg::Num {
                    value: ip([1, 1, 1, 1]),
                    prefix: None,
                },
            ],
        ),
        ("lease_time", num(3600)),
        ("netmask", num(ip([255, 255, 255, 0]))),
        ("router", num(ip([10, 0, 0, 1]))),
        ("server_id", num(ip([10, 0, 0, 1]))),
        ("T1", num(1800)),
        ("T2", num(3150)),
        (
            "domain_search_list",
            vec![Arg::Str("abc.com,xyz.abc.com".into())],
        ),
    ]))
    .unwrap()
}

fn frame_udp4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let caps = ChecksumCapabilities::default();
    let udp = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let ipr = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Udp,
        payload_len: udp.header_len() + payload.len(),
        hop_limit: 64,
    };
    let e = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([0xff; 6]),
        ethertype: EthernetProtocol::Ipv4,
    };
    let mut buf = vec![0u8; e.buffer_len() + ipr.buffer_len() + ipr.payload_len];
    let mut f = EthernetFrame::new_unchecked(&mut buf);
    e.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    ipr.emit(&mut p, &caps);
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

fn request(
    ty: DhcpMessageType,
    xid: u32,
    mac: [u8; 6],
    bcast: bool,
    req: Option<Ipv4Addr>,
) -> Vec<u8> {
    let repr = DhcpRepr {
        message_type: ty,
        transaction_id: xid,
        secs: 3,
        client_hardware_address: EthernetAddress(mac),
        client_ip: Ipv4Addr::UNSPECIFIED,
        your_ip: Ipv4Addr::UNSPECIFIED,
        server_ip: Ipv4Addr::UNSPECIFIED,
        router: None,
        subnet_mask: None,
        relay_agent_ip: Ipv4Addr::UNSPECIFIED,
        broadcast: bcast,
        requested_ip: req,
        client_identifier: Some(EthernetAddress(mac)),
        server_identifier: None,
        parameter_request_list: Some(&[1, 3, 6, 51, 54]),
        dns_servers: None,
        max_size: None,
        lease_duration: None,
        renew_duration: None,
        rebind_duration: None,
        additional_options: &[],
    };
    let mut b = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DhcpPacket::new_unchecked(&mut b)).unwrap();
    frame_udp4(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, 68, 67, &b)
}

/// Decodes a reply with smoltcp; returns the IP destination, the DHCP repr's fields we check,
/// and the raw options.
fn decode(frame: &[u8], check: impl FnOnce(Ipv4Addr, &DhcpRepr<'_>, &[u8])) {
    let f = EthernetFrame::new_checked(frame).unwrap();
    let p = Ipv4Packet::new_checked(f.payload()).unwrap();
    assert!(p.verify_checksum(), "IPv4 header checksum");
    let u = UdpPacket::new_checked(p.payload()).unwrap();
    assert!(u.verify_checksum(&p.src_addr().into(), &p.dst_addr().into()));
    let d = DhcpPacket::new_checked(u.payload()).unwrap();
    let r = DhcpRepr::parse(&d).unwrap();
    check(p.dst_addr(), &r, &u.payload()[240..]);
}

/// The raw value of option `code` in an options area.
fn option(opts: &[u8], code: u8) -> Option<Vec<u8>> {
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => i += 1,
            255 => return None,
            c => {
                let len = usize::from(*opts.get(i + 1)?);
                let v = opts.get(i + 2..i + 2 + len)?;
                if c == code {
                    return Some(v.to_vec());
                }
                i += 2 + len;
            }
        }
    }
    None
}

#[test]
fn offer_ack_nak_inform_decode_with_smoltcp() {
    let o = ovn_opts([10, 0, 0, 5]);
    let mac = [2, 0, 0, 0, 0, 9];
    let check_common = |r: &DhcpRepr<'_>| {
        assert_eq!(r.router, Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(r.server_identifier, Some(Ipv4Addr::new(10, 0, 0, 1)));
        let dns: Vec<Ipv4Addr> = r.dns_servers.iter().flatten().copied().collect();
        assert_eq!(dns, [Ipv4Addr::new(8, 8, 8, 8), Ipv4Addr::new(1, 1, 1, 1)]);
    };
    for (ty, req, want) in [
        (DhcpMessageType::Discover, None, DhcpMessageType::Offer),
        (
            DhcpMessageType::Request,
            Some(Ipv4Addr::new(10, 0, 0, 5)),
            DhcpMessageType::Ack,
        ),
    ] {
        let f = request(ty, 0xdead_beef, mac, false, req);
        let p = parse(&f, 1, 0).unwrap();
        let mut out = Vec::new();
        dhcp::reply4(&mut out, &f, &p, &o).unwrap();
        decode(&out, |dst, r, opts| {
            assert_eq!(
                dst,
                Ipv4Addr::new(10, 0, 0, 5),
                "unicast to the offered address"
            );
            assert_eq!(r.message_type, want);
            assert_eq!(r.transaction_id, 0xdead_beef);
            assert_eq!(r.secs, 3);
            assert_eq!(r.client_hardware_address, EthernetAddress(mac));
            assert_eq!(r.your_ip, Ipv4Addr::new(10, 0, 0, 5));
            assert_eq!(r.subnet_mask, Some(Ipv4Addr::new(255, 255, 255, 0)));
            assert_eq!(r.lease_duration, Some(3600));
            assert_eq!(r.renew_duration, Some(1800));
            assert_eq!(r.rebind_duration, Some(3150));
            check_common(r);
            // Option 119 with a compression pointer, decoded by smoltcp's DNS name reader.
            let v = option(opts, 119).unwrap();
            let names = dns_names(&v);
            assert_eq!(names, ["abc.com", "xyz.abc.com"]);
        });
    }
    // REQUEST for another address: NAK, no address, no options but the type.
    let f = request(
        DhcpMessageType::Request,
        1,
        mac,
        true,
        Some(Ipv4Addr::new(10, 0, 0, 6)),
    );
    let p = parse(&f, 1, 0).unwrap();
    let mut out = Vec::new();
    assert_eq!(dhcp::reply4(&mut out, &f, &p, &o), Ok(dhcp::msg::NAK));
    decode(&out, |dst, r, opts| {
        assert_eq!(dst, Ipv4Addr::BROADCAST, "broadcast flag → broadcast reply");
        assert_eq!(r.message_type, DhcpMessageType::Nak);
        assert_eq!(r.your_ip, Ipv4Addr::UNSPECIFIED);
        assert_eq!(r.router, None);
        assert_eq!(option(opts, 51), None);
    });
    // INFORM: ACK without netmask, lease time, T1, T2.
    let f = request(DhcpMessageType::Inform, 2, mac, false, None);
    let p = parse(&f, 1, 0).unwrap();
    let mut out = Vec::new();
    dhcp::reply4(&mut out, &f, &p, &o).unwrap();
    decode(&out, |_, r, _| {
        assert_eq!(r.message_type, DhcpMessageType::Ack);
        assert_eq!(r.your_ip, Ipv4Addr::UNSPECIFIED);
        assert_eq!(r.subnet_mask, None);
        assert_eq!(r.lease_duration, None);
        assert_eq!(r.renew_duration, None);
        check_common(r);
    });
    // RELEASE and DECLINE: no reply, nothing written.
    for ty in [DhcpMessageType::Release, DhcpMessageType::Decline] {
        let f = request(ty, 3, mac, false, None);
        let p = parse(&f, 1, 0).unwrap();
        let mut out = vec![7u8];
        assert!(matches!(
            dhcp::reply4(&mut out, &f, &p, &o),
            Err(DhcpError::NoReply(_))
        ));
        assert_eq!(out, [7]);
    }
}

/// Names in an RFC 1035 encoded list, read with smoltcp's name parser (which follows
/// compression pointers relative to the start of `v`).
fn dns_names(v: &[u8]) -> Vec<String> {
    let pkt = DnsPacket::new_unchecked(v);
    let mut names = Vec::new();
    let mut at = 0;
    while at < v.len() {
        let labels: Vec<String> = pkt
            .parse_name(&v[at..])
            .map(|l| String::from_utf8(l.unwrap().to_vec()).unwrap())
            .collect();
        names.push(labels.join("."));
        // Skip this name's bytes: labels up to a zero or a pointer.
        while at < v.len() {
            let n = v[at];
            if n == 0 {
                at += 1;
                break;
            }
            if n & 0xc0 == 0xc0 {
                at += 2;
                break;
            }
            at += 1 + usize::from(n);
        }
    }
    names
}

#[test]
fn classless_static_routes_and_bootfile_follow_ovn() {
    let o = Dhcp4Opts::encode(&args(&[
        ("offerip", num(ip([10, 0, 0, 5]))),
        (
            "classless_static_route",
            vec![
                Arg::Num {
                    value: ip([30, 0, 0, 0]),
                    prefix: Some(24),
                },
                Arg::Num {
                    value: ip([10, 0, 0, 10]),
                    prefix: None,
                },
                Arg::Num {
                    value: 0,
                    prefix: Some(0),
                },
                Arg::Num {
                    value: ip([10, 0, 0, 1]),
                    prefix: None,
                },
            ],
        ),
        ("bootfile_name", vec![Arg::Str("pxe.efi".into())]),
        ("bootfile_name_alt", vec![Arg::Str("ipxe.efi".into())]),
        ("next_server", num(ip([10, 0, 0, 2]))),
    ]))
    .unwrap();
    let f = request(
        DhcpMessageType::Discover,
        1,
        [2, 0, 0, 0, 0, 1],
        false,
        None,
    );
    let p = parse(&f, 1, 0).unwrap();
    let mut out = Vec::new();
    dhcp::reply4(&mut out, &f, &p, &o).unwrap();
    decode(&out, |_, r, opts| {
        // RFC 3442: 24.30.0.0 → 10.0.0.10, 0 → 10.0.0.1.
        assert_eq!(
            option(opts, 121).unwrap(),
            [24, 30, 0, 0, 10, 0, 0, 10, 0, 10, 0, 0, 1]
        );
        // Not an iPXE client: the alternative boot file is sent as option 67.
        assert_eq!(option(opts, 67).unwrap(), b"ipxe.efi");
        assert_eq!(option(opts, 254), None);
        assert_eq!(
            r.server_ip,
            Ipv4Addr::new(10, 0, 0, 2),
            "siaddr from next_server"
        );
    });
}

#[test]
fn bad_options_are_named_errors() {
    let e = Dhcp4Opts::encode(&args(&[("offerip", num(1)), ("nonsense", num(1))])).unwrap_err();
    assert_eq!(e.to_string(), "unknown DHCPv4 option \"nonsense\"");
    let e = Dhcp4Opts::encode(&args(&[("lease_time", num(1))])).unwrap_err();
    assert_eq!(e, DhcpError::NoOfferIp);
    let e = Dhcp4Opts::encode(&args(&[("offerip", num(1)), ("mtu", num(70000))])).unwrap_err();
    assert!(e.to_string().contains("mtu"), "{e}");
    let e = Dhcp4Opts::encode(&args(&[("offerip", num(1)), ("hostname", num(5))])).unwrap_err();
    assert!(
        e.to_string().contains("hostname: requires string value"),
        "{e}"
    );
    let e = Dhcp6Opts::encode(&args(&[("lease_time", num(1))])).unwrap_err();
    assert_eq!(e.to_string(), "unknown DHCPv6 option \"lease_time\"");
    let e = RaOpts::encode(&args(&[("mtu", vec![Arg::Str("x".into())])])).unwrap_err();
    assert!(matches!(e, RaError::BadValue { .. }), "{e}");
    let e = RaOpts::encode(&args(&[("bogus", num(1))])).unwrap_err();
    assert_eq!(e, RaError::UnknownOption("bogus".into()));
}

/// The DHCPv6 domain search list is encoded once, with the action: RFC 1035 labels, no
/// compression; a list that does not encode is refused there, not per packet.
#[test]
fn dhcpv6_domain_search_is_encoded_with_the_action() {
    let o = Dhcp6Opts::encode(&args(&[(
        "domain_search",
        vec![Arg::Str("ovn.org, a.ovn.org".into())],
    )]))
    .unwrap();
    assert_eq!(
        o.opts,
        vec![dhcp::Dhcp6Opt::DomainSearch(
            b"\x03ovn\x03org\x00\x01a\x03ovn\x03org\x00".to_vec()
        )]
    );
    let e =
        Dhcp6Opts::encode(&args(&[("domain_search", vec![Arg::Str("a..b".into())])])).unwrap_err();
    assert!(e.to_string().contains("domain_search"), "{e}");
}

/// The RDNSS option's length is one byte of 8-byte units: 127 addresses fill it, 128 (which
/// once overflowed the length arithmetic) are a named error.
#[test]
fn rdnss_length_is_bounded() {
    let addrs = |n: u128| -> Vec<Arg> {
        (1..=n)
            .map(|v| Arg::Num {
                value: (0xfd00u128 << 112) | v,
                prefix: None,
            })
            .collect()
    };
    let ra = RaOpts::encode(&args(&[("rdnss", addrs(127))])).unwrap();
    assert_eq!(&ra.message[16..18], &[25, 255]);
    assert_eq!(ra.message.len(), 16 + 255 * 8);
    for n in [128, 300] {
        let e = RaOpts::encode(&args(&[("rdnss", addrs(n))])).unwrap_err();
        assert!(e.to_string().contains("rdnss: too many addresses"), "{e}");
    }
}

#[test]
fn dns_answers_decode_with_smoltcp() {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in ["Www", "ovn", "org"] {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 255, 0, 1]);
    let f = frame_udp4(
        Ipv4Addr::new(10, 0, 0, 5),
        Ipv4Addr::new(10, 0, 0, 1),
        3333,
        53,
        &q,
    );
    let p = parse(&f, 1, 0).unwrap();
    assert_eq!(dns::query_of(&f, &p).unwrap().name, "www.ovn.org");
    let mut out = Vec::new();
    let n = dns::answer(&mut out, &f, &p, "10.0.0.7 fd00::7 10.0.0.8").unwrap();
    assert_eq!(n, 3, "ANY: both A records and the AAAA");
    let e = EthernetFrame::new_checked(&out[..]).unwrap();
    let ipp = Ipv4Packet::new_checked(e.payload()).unwrap();
    assert!(ipp.verify_checksum());
    let u = UdpPacket::new_checked(ipp.payload()).unwrap();
    let pkt = DnsPacket::new_checked(u.payload()).unwrap();
    assert_eq!(pkt.transaction_id(), 0x1234);
    assert_eq!(pkt.answer_record_count(), 3);
    let (mut rest, qn) = smoltcp::wire::DnsQuestion::parse(pkt.payload()).unwrap();
    assert_eq!(qn.type_, smoltcp::wire::DnsQueryType::Unknown(255));
    let mut got = Vec::new();
    for _ in 0..3 {
        let (r, rec) = smoltcp::wire::DnsRecord::parse(rest).unwrap();
        rest = r;
        got.push(format!("{:?}", rec.data));
    }
    assert_eq!(got.len(), 3);
    assert!(
        got[0].contains("10.0.0.7") && got[1].contains("10.0.0.8"),
        "{got:?}"
    );
    assert!(got[2].contains("fd00::7"), "{got:?}");
    // The query parsed once by the caller gives the same response; one longer than this
    // frame's question is refused, not sliced past the end.
    let query = dns::query_of(&f, &p).unwrap();
    let mut again = Vec::new();
    let rec = "10.0.0.7 fd00::7 10.0.0.8";
    assert_eq!(dns::answer_query(&mut again, &f, &p, &query, rec), Ok(3));
    assert_eq!(again, out);
    let mut long = query.clone();
    long.name_wire = vec![1; 400];
    let mut none = Vec::new();
    assert!(matches!(
        dns::answer_query(&mut none, &f, &p, &long, rec),
        Err(dns::DnsError::BadQuery(_))
    ));
    assert!(none.is_empty());
    // A record of more addresses than ANCOUNT can count is refused (it cannot fit a frame).
    let huge = "10.0.0.7 ".repeat(70_000);
    assert_eq!(
        dns::answer(&mut none, &f, &p, &huge),
        Err(dns::DnsError::BadQuery("the answer would not fit a frame"))
    );
    assert!(none.is_empty());
    // Unsupported types and responses are not answered.
    let mut mx = q.clone();
    let at = mx.len() - 3;
    mx[at] = 15;
    let f = frame_udp4(
        Ipv4Addr::new(10, 0, 0, 5),
        Ipv4Addr::new(10, 0, 0, 1),
        1,
        53,
        &mx,
    );
    let p = parse(&f, 1, 0).unwrap();
    assert_eq!(
        dns::answer(&mut Vec::new(), &f, &p, "10.0.0.7"),
        Err(dns::DnsError::Unsupported(15))
    );
}

fn any_args() -> impl Strategy<Value = Vec<(String, Vec<Arg>)>> {
    let names: Vec<&'static str> = dhcp::DHCP4_OPTIONS
        .iter()
        .map(|d| d.name)
        .chain(dhcp::DHCP6_OPTIONS.iter().map(|d| d.name))
        .chain(ra::RA_OPTIONS.iter().copied())
        .chain(["bogus"])
        .collect();
    let arg = prop_oneof![
        (any::<u128>(), proptest::option::of(0u8..=130)).prop_map(|(v, p)| Arg::Num {
            value: v >> (v as u8 % 128),
            prefix: p
        }),
        "[a-zA-Z0-9.,-/: ]{0,40}".prop_map(Arg::Str),
    ];
    proptest::collection::vec(
        (
            proptest::sample::select(names),
            proptest::collection::vec(arg, 0..4),
        )
            .prop_map(|(n, a)| (n.to_string(), a)),
        0..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(11), ..ProptestConfig::default() })]

    /// Encoding any arguments never panics.
    #[test]
    fn encoding_never_panics(a in any_args()) {
        let _ = Dhcp4Opts::encode(&a);
        let _ = Dhcp6Opts::encode(&a);
        let _ = RaOpts::encode(&a);
    }

    /// Any bytes after a valid Ethernet/IPv4/UDP header never make a builder panic, and a
    /// refusal leaves `out` as it was.
    #[test]
    fn builders_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..400), dport in prop_oneof![Just(67u16), Just(53), Just(547), any::<u16>()]) {
        let f = frame_udp4(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, 68, dport, &payload);
        let p = parse(&f, 1, 0).unwrap();
        let o4 = ovn_opts([10, 0, 0, 5]);
        let o6 = Dhcp6Opts::default();
        let ra = RaOpts::encode(&[]).unwrap();
        let mut out = Vec::new();
        if dhcp::reply4(&mut out, &f, &p, &o4).is_err() { prop_assert!(out.is_empty()); }
        out.clear();
        if dhcp::reply6(&mut out, &f, &p, &o6).is_err() { prop_assert!(out.is_empty()); }
        out.clear();
        if dns::answer(&mut out, &f, &p, "10.0.0.1 ::1").is_err() { prop_assert!(out.is_empty()); }
        out.clear();
        prop_assert!(ra::reply(&mut out, &f, &p, &ra).is_err());
        prop_assert!(out.is_empty());
    }

    /// Whole random frames (that parse) never make a builder panic.
    #[test]
    fn random_frames_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(p) = parse(&frame, 1, 0) {
            let mut out = Vec::new();
            let _ = dhcp::reply4(&mut out, &frame, &p, &ovn_opts([1, 2, 3, 4]));
            let _ = dhcp::reply6(&mut out, &frame, &p, &Dhcp6Opts::default());
            let _ = dns::answer(&mut out, &frame, &p, "1.2.3.4");
            let _ = ra::reply(&mut out, &frame, &p, &RaOpts::default());
        }
    }

    /// A DISCOVER or REQUEST from any client gets a reply smoltcp accepts, with the client's
    /// transaction id and hardware address, to the broadcast address exactly when asked.
    #[test]
    fn any_discover_gets_a_valid_offer(xid in any::<u32>(), mac in any::<[u8; 6]>(), bcast in any::<bool>(), req in any::<bool>()) {
        let mut mac = mac;
        mac[0] &= 0xfe;
        let o = ovn_opts([10, 0, 0, 5]);
        let (ty, want) = if req {
            (DhcpMessageType::Request, DhcpMessageType::Ack)
        } else {
            (DhcpMessageType::Discover, DhcpMessageType::Offer)
        };
        let f = request(ty, xid, mac, bcast, req.then_some(Ipv4Addr::new(10, 0, 0, 5)));
        let p = parse(&f, 1, 0).unwrap();
        let mut out = Vec::new();
        dhcp::reply4(&mut out, &f, &p, &o).unwrap();
        decode(&out, |dst, r, _| {
            assert_eq!(r.message_type, want);
            assert_eq!(r.transaction_id, xid);
            assert_eq!(r.client_hardware_address, EthernetAddress(mac));
            assert_eq!(r.broadcast, bcast);
            assert_eq!(dst, if bcast { Ipv4Addr::BROADCAST } else { Ipv4Addr::new(10, 0, 0, 5) });
        });
    }
}
