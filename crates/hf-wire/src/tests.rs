//! Unit and property tests for hf-wire: byte-literal fixtures built by small helpers, checksums
//! verified from scratch, every prefix of valid frames parsed, and the fuzz corpus replayed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use crate::checksum::{fold, sum_words};
use crate::geneve::{self, OvnMetadata, PortKeys, TunnelOuter};
use crate::reply;
use crate::*;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// An L4 segment: TCP (20-byte header + options) or UDP, checksum left zero.
fn l4(proto: u8, sport: u16, dport: u16, flags: u16, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut s = Vec::new();
    s.extend_from_slice(&sport.to_be_bytes());
    s.extend_from_slice(&dport.to_be_bytes());
    if proto == ip_proto::TCP {
        s.extend_from_slice(&1000u32.to_be_bytes());
        s.extend_from_slice(&2000u32.to_be_bytes());
        let doff = ((20 + opts.len()) / 4) as u16;
        s.extend_from_slice(&((doff << 12) | flags).to_be_bytes());
        s.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        s.extend_from_slice(opts);
    } else {
        s.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        s.extend_from_slice(&[0, 0]);
    }
    s.extend_from_slice(payload);
    s
}

fn csum_at(proto: u8) -> usize {
    match proto {
        ip_proto::TCP => 16,
        ip_proto::UDP => 6,
        _ => 2,
    }
}

fn ip_frame(src: IpAddr, dst: IpAddr, proto: u8, seg: Vec<u8>, vlan: Option<u16>) -> Vec<u8> {
    let mut f = Vec::new();
    reply::ip_packet(
        &mut f,
        EthAddr(MAC_A),
        EthAddr(MAC_B),
        src,
        dst,
        proto,
        &seg,
    )
    .expect("one address family");
    if let Some(tci) = vlan {
        let ty = [f[12], f[13]];
        f.splice(
            12..14,
            [0x81, 0x00, (tci >> 8) as u8, tci as u8, ty[0], ty[1]],
        );
    }
    f
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    Ipv4Addr::new(a, b, c, d).into()
}

fn v6(last: u16) -> IpAddr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last).into()
}

/// True when every checksum of `frame` (IPv4 header, L4) verifies from scratch.
fn checksums_ok(frame: &[u8]) -> bool {
    checksums_valid(frame, &parse(frame, 0, 0).expect("parses"))
}

fn tcp4_frame() -> Vec<u8> {
    let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 0, 0];
    let seg = l4(ip_proto::TCP, 40000, 80, tcp_flags::SYN, &opts, b"hi");
    let mut f = ip_frame(
        v4(10, 0, 0, 1),
        v4(192, 0, 2, 7),
        ip_proto::TCP,
        seg,
        Some(0x2064),
    );
    // DSCP AF21-ish TOS 0x10, with the IPv4 header checksum adjusted to match.
    let l3 = 18;
    let cs = u16::from_be_bytes([f[l3 + 10], f[l3 + 11]]);
    let cs = checksum_adjust(cs, &[0x45, f[l3 + 1]], &[0x45, 0x10]);
    f[l3 + 1] = 0x10;
    f[l3 + 10..l3 + 12].copy_from_slice(&cs.to_be_bytes());
    f
}

fn icmp_echo(v6_: bool) -> Vec<u8> {
    let (ty, proto, s, d) = if v6_ {
        (128, ip_proto::ICMPV6, v6(1), v6(2))
    } else {
        (8, ip_proto::ICMP, v4(10, 0, 0, 1), v4(10, 0, 0, 2))
    };
    let seg = vec![ty, 0, 0, 0, 0x12, 0x34, 0, 1, b'p', b'i', b'n', b'g'];
    ip_frame(s, d, proto, seg, None)
}

#[test]
fn parses_tcp_over_vlan_with_options() {
    let f = tcp4_frame();
    let p = parse(&f, 7, 9).expect("parses");
    let k = p.key;
    assert_eq!((k.in_port, k.metadata), (7, 9));
    assert_eq!((k.eth_src.0, k.eth_dst.0), (MAC_A, MAC_B));
    assert!(k.vlan_present());
    assert_eq!((k.vlan_vid(), k.vlan_pcp()), (0x064, 1));
    assert_eq!(k.eth_type, ethertype::IPV4);
    assert_eq!(k.ip4_src, Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(k.ip4_dst, Ipv4Addr::new(192, 0, 2, 7));
    assert_eq!(
        (k.ip_proto, k.ip_ttl, k.ip_tos, k.ip_frag),
        (6, 64, 0x10, 0)
    );
    assert_eq!(
        (k.tp_src, k.tp_dst, k.tcp_flags),
        (40000, 80, tcp_flags::SYN)
    );
    assert_eq!(p.tcp.seq, 1000);
    assert_eq!(p.tcp.wscale, Some(7));
    assert!(p.tcp.sack_permitted);
    assert_eq!(p.tcp.payload_len, 2);
    assert!(checksums_ok(&f));
}

#[test]
fn parses_ipv6_udp_after_hop_by_hop() {
    let seg = l4(ip_proto::UDP, 5353, 53, 0, &[], b"query");
    let mut f = ip_frame(v6(1), v6(2), ip_proto::UDP, seg, None);
    // Insert an 8-byte hop-by-hop header (next header UDP) after the IPv6 header.
    let l3 = 14;
    f[l3 + 6] = 0;
    let plen = u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]) + 8;
    f[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    f.splice(l3 + 40..l3 + 40, [ip_proto::UDP, 0, 1, 4, 0, 0, 0, 0]);
    let p = parse(&f, 0, 0).expect("parses");
    assert_eq!(p.key.ip_proto, ip_proto::UDP);
    assert_eq!((p.key.tp_src, p.key.tp_dst), (5353, 53));
    assert_eq!(p.layout.l4 as usize, l3 + 48);
    assert!(checksums_ok(&f));
}

#[test]
fn parses_arp_and_answers_it() {
    let mut req = Vec::new();
    reply::arp_request(
        &mut req,
        EthAddr(MAC_A),
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 254),
    );
    let p = parse(&req, 0, 0).expect("request parses");
    assert_eq!(p.key.arp_op, 1);
    assert_eq!(p.key.eth_dst, EthAddr::BROADCAST);
    assert_eq!(p.key.arp_tpa, Ipv4Addr::new(10, 0, 0, 254));
    let mut out = Vec::new();
    reply::arp_reply(&mut out, &p.key, EthAddr(MAC_B)).expect("answers a request");
    let r = parse(&out, 0, 0).expect("reply parses").key;
    assert_eq!(r.arp_op, 2);
    assert_eq!(
        (r.arp_sha.0, r.arp_spa),
        (MAC_B, Ipv4Addr::new(10, 0, 0, 254))
    );
    assert_eq!(
        (r.arp_tha.0, r.arp_tpa),
        (MAC_A, Ipv4Addr::new(10, 0, 0, 1))
    );
    assert_eq!(r.eth_dst.0, MAC_A);
    assert_eq!(
        reply::arp_reply(&mut out, &r, EthAddr(MAC_B)),
        Err(reply::BuildError::NotArpRequest)
    );
}

#[test]
fn nd_solicitation_and_advertisement() {
    let target = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x99);
    let src = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
    let mut ns = Vec::new();
    reply::nd_ns(&mut ns, EthAddr(MAC_A), src, target);
    assert!(checksums_ok(&ns));
    let p = parse(&ns, 0, 0).expect("NS parses");
    assert_eq!(
        (p.key.icmp_type, p.key.nd_target, p.key.nd_sll.0),
        (135, target, MAC_A)
    );
    assert_eq!(p.key.ip6_dst, reply::solicited_node(target));
    let mut na = Vec::new();
    reply::nd_na(&mut na, &p.key, EthAddr(MAC_B), true).expect("answers an NS");
    assert!(checksums_ok(&na));
    let q = parse(&na, 0, 0).expect("NA parses").key;
    assert_eq!((q.icmp_type, q.nd_target, q.nd_tll.0), (136, target, MAC_B));
    assert_eq!((q.ip6_src, q.ip6_dst, q.eth_dst.0), (target, src, MAC_A));
    assert_eq!(
        na[14 + 40 + 4],
        0xe0,
        "router, solicited and override flags"
    );
}

#[test]
fn nd_option_of_length_zero_is_malformed() {
    let mut ns = Vec::new();
    reply::nd_ns(
        &mut ns,
        EthAddr(MAC_A),
        Ipv6Addr::LOCALHOST,
        Ipv6Addr::LOCALHOST,
    );
    let opt_len = 14 + 40 + 24 + 1;
    ns[opt_len] = 0;
    assert_eq!(parse(&ns, 0, 0), Err(ParseError::Malformed(Layer::Icmpv6)));
}

#[test]
fn echo_replies_swap_addresses_and_keep_checksums() {
    for is_v6 in [false, true] {
        let f = icmp_echo(is_v6);
        assert!(checksums_ok(&f));
        let p = parse(&f, 0, 0).expect("parses");
        assert_eq!(p.icmp_id, 0x1234);
        let mut out = Vec::new();
        reply::echo_reply(&mut out, &f, &p).expect("answers an echo request");
        assert!(checksums_ok(&out));
        let r = parse(&out, 0, 0).expect("reply parses");
        assert_eq!(r.key.icmp_type, if is_v6 { 129 } else { 0 });
        assert_eq!(
            (r.key.ip_src(), r.key.ip_dst()),
            (p.key.ip_dst(), p.key.ip_src())
        );
        assert_eq!(r.icmp_id, 0x1234);
    }
}

#[test]
fn icmp_errors_quote_the_packet_and_parse_back() {
    let f = tcp4_frame();
    let p = parse(&f, 0, 0).expect("parses");
    let mut out = Vec::new();
    reply::icmp4_error(&mut out, &f, &p, Ipv4Addr::new(192, 0, 2, 254), 3, 3, 0).expect("ip");
    assert!(checksums_ok(&out));
    let e = parse(&out, 0, 0).expect("error parses");
    assert_eq!((e.key.icmp_type, e.key.icmp_code), (3, 3));
    let inner = e.inner.expect("quote parsed");
    assert_eq!((inner.src, inner.dst), (v4(10, 0, 0, 1), v4(192, 0, 2, 7)));
    assert_eq!(
        (inner.proto, inner.tp_src, inner.tp_dst),
        (ip_proto::TCP, 40000, 80)
    );

    let seg = l4(ip_proto::UDP, 1111, 2222, 0, &[], &[0; 2000]);
    let big = ip_frame(v6(1), v6(2), ip_proto::UDP, seg, None);
    let p = parse(&big, 0, 0).expect("parses");
    let mut out = Vec::new();
    reply::icmp6_error(&mut out, &big, &p, Ipv6Addr::LOCALHOST, 1, 4, 0).expect("ip6");
    assert_eq!(
        out.len(),
        14 + 1280,
        "ICMPv6 errors stop at the minimum MTU"
    );
    assert!(checksums_ok(&out));
    let e = parse(&out, 0, 0).expect("error parses");
    assert_eq!(e.inner.map(|i| (i.tp_src, i.tp_dst)), Some((1111, 2222)));
}

#[test]
fn reject_resets_leave_with_ttl_63_as_pinctrl_builds_them() {
    let f = tcp4_frame();
    let p = parse(&f, 0, 0).expect("parses");
    let (mut plain, mut reject) = (Vec::new(), Vec::new());
    reply::tcp_reset(&mut plain, &p).expect("resets a SYN");
    reply::tcp_reset_reject(&mut reject, &p).expect("resets a SYN");
    assert!(checksums_ok(&reject));
    let (a, b) = (
        parse(&plain, 0, 0).expect("parses"),
        parse(&reject, 0, 0).expect("parses"),
    );
    assert_eq!(b.key.ip_ttl, 63);
    assert_eq!(
        (
            a.key.ip_src(),
            a.key.ip_dst(),
            a.tcp.seq,
            a.tcp.ack,
            a.key.tcp_flags
        ),
        (
            b.key.ip_src(),
            b.key.ip_dst(),
            b.tcp.seq,
            b.tcp.ack,
            b.key.tcp_flags
        )
    );
}

#[test]
fn tcp_resets_answer_syns_and_acks() {
    // A SYN (no ACK) is answered with RST|ACK acknowledging the SYN and its payload.
    let f = tcp4_frame();
    let p = parse(&f, 0, 0).expect("parses");
    let mut out = Vec::new();
    reply::tcp_reset(&mut out, &p).expect("resets a SYN");
    assert!(checksums_ok(&out));
    let r = parse(&out, 0, 0).expect("reset parses");
    assert_eq!(r.key.tcp_flags, tcp_flags::RST | tcp_flags::ACK);
    assert_eq!((r.tcp.seq, r.tcp.ack), (0, 1000 + 1 + 2));
    assert_eq!(
        (r.key.ip_src(), r.key.ip_dst()),
        (p.key.ip_dst(), p.key.ip_src())
    );
    assert_eq!(
        (r.key.tp_src, r.key.tp_dst, r.key.eth_dst),
        (80, 40000, p.key.eth_src)
    );
    // A segment with an ACK is answered with a bare RST at the acknowledged sequence number.
    let seg = l4(ip_proto::TCP, 1, 2, tcp_flags::ACK, &[], b"data");
    let g = ip_frame(v6(1), v6(2), ip_proto::TCP, seg, None);
    let q = parse(&g, 0, 0).expect("parses");
    let mut out = Vec::new();
    reply::tcp_reset(&mut out, &q).expect("resets an ACK");
    assert!(checksums_ok(&out));
    let r = parse(&out, 0, 0).expect("reset parses");
    assert_eq!((r.key.tcp_flags, r.tcp.seq), (tcp_flags::RST, 2000));
    // Never a reset for a reset, nor for UDP.
    assert_eq!(
        reply::tcp_reset(&mut out, &r),
        Err(reply::BuildError::NotTcp)
    );
    let u = ip_frame(
        v4(1, 1, 1, 1),
        v4(2, 2, 2, 2),
        ip_proto::UDP,
        l4(ip_proto::UDP, 1, 2, 0, &[], b""),
        None,
    );
    let u = parse(&u, 0, 0).expect("parses");
    assert_eq!(
        reply::tcp_reset(&mut out, &u),
        Err(reply::BuildError::NotTcp)
    );
}

#[test]
fn fragments_have_no_l4() {
    let seg = l4(ip_proto::UDP, 1, 2, 0, &[], &[0; 16]);
    let mut f = ip_frame(v4(1, 1, 1, 1), v4(2, 2, 2, 2), ip_proto::UDP, seg, None);
    f[14 + 6] = 0x00;
    f[14 + 7] = 0x10; // offset 16*8 bytes
    let p = parse(&f, 0, 0).expect("parses");
    assert_eq!(p.key.ip_frag, frag::ANY | frag::LATER);
    assert!(!p.has_l4());
    assert_eq!(p.key.tp_src, 0);
}

#[test]
fn every_prefix_of_a_valid_frame_is_an_error_or_a_parse() {
    let mut frames = vec![tcp4_frame(), icmp_echo(false), icmp_echo(true)];
    let mut ns = Vec::new();
    reply::nd_ns(
        &mut ns,
        EthAddr(MAC_A),
        Ipv6Addr::LOCALHOST,
        Ipv6Addr::LOCALHOST,
    );
    frames.push(ns);
    for f in frames {
        let full = parse(&f, 0, 0).expect("the full frame parses");
        for n in 0..f.len() {
            // Truncating the IP datagram must be noticed; never a panic.
            if let Ok(p) = parse(&f[..n], 0, 0) {
                assert_ne!(p, full, "a truncated frame parsed like the full one at {n}");
            }
        }
        assert!(parse(&f[..13], 0, 0).is_err());
    }
}

#[test]
fn nat_rewrite_of_icmp_error_rewrites_the_quote() {
    let f = tcp4_frame();
    let p = parse(&f, 0, 0).expect("parses");
    let mut err = Vec::new();
    reply::icmp4_error(&mut err, &f, &p, Ipv4Addr::new(192, 0, 2, 254), 3, 1, 0).expect("ip");
    let mut e = parse(&err, 0, 0).expect("parses");
    let rw = NatRewrite {
        dst: Some(v4(172, 16, 0, 5)),
        inner_src: Some(v4(172, 16, 0, 5)),
        inner_sport: Some(1234),
        ..NatRewrite::default()
    };
    apply_nat(&mut err, &mut e, &rw).expect("rewrites");
    assert!(checksums_ok(&err));
    let again = parse(&err, 0, 0).expect("parses");
    assert_eq!(again.key.ip4_dst, Ipv4Addr::new(172, 16, 0, 5));
    let inner = again.inner.expect("quote");
    assert_eq!((inner.src, inner.tp_src), (v4(172, 16, 0, 5), 1234));
    // The quoted IPv4 header checksum was kept valid too.
    let il3 = inner.l3 as usize;
    assert_eq!(fold(sum_words(0, &err[il3..il3 + 20])), 0xffff);
}

#[test]
fn nat_refuses_mismatches_without_writing() {
    let f = tcp4_frame();
    let mut p = parse(&f, 0, 0).expect("parses");
    let mut g = f.clone();
    let bad = NatRewrite {
        src: Some(v6(1)),
        ..NatRewrite::default()
    };
    assert_eq!(
        apply_nat(&mut g, &mut p, &bad),
        Err(RewriteError::FamilyMismatch)
    );
    let inner = NatRewrite {
        inner_src: Some(v4(1, 2, 3, 4)),
        ..NatRewrite::default()
    };
    assert_eq!(
        apply_nat(&mut g, &mut p, &inner),
        Err(RewriteError::NoInner)
    );
    let mut short = f[..40].to_vec();
    let ok = NatRewrite {
        sport: Some(1),
        ..NatRewrite::default()
    };
    assert_eq!(
        apply_nat(&mut short, &mut p, &ok),
        Err(RewriteError::LayoutMismatch)
    );
    assert_eq!(g, f);
}

#[test]
fn geneve_round_trip_v4_and_v6() {
    let inner = tcp4_frame();
    for (src, dst) in [(v4(10, 1, 0, 1), v4(10, 1, 0, 2)), (v6(1), v6(2))] {
        let outer = TunnelOuter {
            eth_src: EthAddr(MAC_A),
            eth_dst: EthAddr(MAC_B),
            src,
            dst,
            udp_src: 49152,
            ttl: 64,
        };
        let meta = OvnMetadata {
            datapath: 0xabcdef,
            ports: Some(PortKeys {
                ingress: 0x7fff,
                egress: 0x8001,
            }),
        };
        let mut out = Vec::new();
        geneve::encapsulate(&mut out, &outer, &meta, &inner).expect("encapsulates");
        assert!(checksums_ok(&out));
        let d = geneve::decapsulate(&out).expect("decapsulates");
        assert_eq!((d.outer, d.meta, d.inner), (outer, meta, &inner[..]));
        // OVN's option bytes: class 0x0102, type 0x80, length 1.
        let l3 = if src.is_ipv6() { 40 } else { 20 };
        let opt = 14 + l3 + 8 + 8;
        assert_eq!(out[opt..opt + 4], [0x01, 0x02, 0x80, 0x01]);
        for n in 0..out.len() - inner.len() {
            assert!(
                geneve::decapsulate(&out[..n]).is_err(),
                "prefix {n} accepted"
            );
        }
        let bad_meta = OvnMetadata {
            datapath: 1 << 24,
            ports: None,
        };
        assert_eq!(
            geneve::encapsulate(&mut out, &outer, &bad_meta, &inner),
            Err(geneve::EncapError::KeyRange)
        );
    }
}

/// A tunnel between two IPv4 chassis carrying datapath 5 from port 1 to port 2.
fn small_tunnel() -> (TunnelOuter, OvnMetadata) {
    let outer = TunnelOuter {
        eth_src: EthAddr(MAC_A),
        eth_dst: EthAddr(MAC_B),
        src: v4(10, 1, 0, 1),
        dst: v4(10, 1, 0, 2),
        udp_src: 1,
        ttl: 64,
    };
    let meta = OvnMetadata {
        datapath: 5,
        ports: Some(PortKeys {
            ingress: 1,
            egress: 2,
        }),
    };
    (outer, meta)
}

#[test]
fn geneve_refuses_unknown_critical_options() {
    let (outer, meta) = small_tunnel();
    let mut out = Vec::new();
    geneve::encapsulate(&mut out, &outer, &meta, &tcp4_frame()).expect("encapsulates");
    let class = 14 + 20 + 8 + 8;
    out[class + 1] = 0x03;
    assert_eq!(
        geneve::decapsulate(&out),
        Err(ParseError::Malformed(Layer::Geneve))
    );
    assert_eq!(
        geneve::decapsulate(&tcp4_frame()),
        Err(ParseError::Unexpected(Layer::Geneve))
    );
}

proptest! {
    /// NAT rewrite keeps checksums valid, and the reverse rewrite restores the original bytes.
    #[test]
    fn nat_rewrite_then_reverse_restores(
        is_v6 in any::<bool>(),
        tcp in any::<bool>(),
        a in any::<u32>(), b in any::<u32>(),
        sport in any::<u16>(), dport in any::<u16>(),
        nsport in any::<u16>(), ndport in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let (src, dst, nsrc, ndst): (IpAddr, IpAddr, IpAddr, IpAddr) = if is_v6 {
            (v6(a as u16), v6(b as u16), v6((a >> 16) as u16), v6((b >> 16) as u16))
        } else {
            (Ipv4Addr::from(a).into(), Ipv4Addr::from(b).into(),
             Ipv4Addr::from(a.rotate_left(7)).into(), Ipv4Addr::from(b.rotate_left(9)).into())
        };
        let proto = if tcp { ip_proto::TCP } else { ip_proto::UDP };
        let seg = l4(proto, sport, dport, tcp_flags::ACK, &[], &payload);
        let orig = ip_frame(src, dst, proto, seg, None);
        prop_assume!(checksums_ok(&orig));
        let mut f = orig.clone();
        let mut p = parse(&f, 0, 0).expect("parses");
        let rw = NatRewrite { src: Some(nsrc), dst: Some(ndst), sport: Some(nsport),
            dport: Some(ndport), ..NatRewrite::default() };
        apply_nat(&mut f, &mut p, &rw).expect("rewrites");
        prop_assert!(checksums_ok(&f));
        let q = parse(&f, 0, 0).expect("parses");
        prop_assert_eq!(q.key, p.key);
        prop_assert_eq!((q.key.ip_src(), q.key.ip_dst()), (Some(nsrc), Some(ndst)));
        let back = NatRewrite { src: Some(src), dst: Some(dst), sport: Some(sport),
            dport: Some(dport), ..NatRewrite::default() };
        apply_nat(&mut f, &mut p, &back).expect("rewrites back");
        // Checksums are equal modulo the one's-complement zero (0x0000 vs 0xffff).
        let l4off = p.layout.l4 as usize + csum_at(proto);
        let mut g = f.clone();
        g[l4off..l4off + 2].copy_from_slice(&orig[l4off..l4off + 2]);
        prop_assert_eq!(&g, &orig);
        prop_assert!(checksums_ok(&f));
    }

    /// Arbitrary bytes never panic the parser, the rewriter, the builders or the decapsulator.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        fuzzing::wire(&data);
    }

    /// Mutating one byte of a valid frame never panics anything.
    #[test]
    fn mutated_frames_never_panic(at in any::<usize>(), byte in any::<u8>(), which in 0usize..3) {
        let mut f = [tcp4_frame(), icmp_echo(false), icmp_echo(true)][which].clone();
        let i = at % f.len();
        f[i] = byte;
        fuzzing::wire(&f);
    }
}

#[test]
fn fuzz_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wire");
    let entries = std::fs::read_dir(&dir).expect("the wire corpus is committed");
    let mut n = 0;
    for e in entries {
        let path = e.expect("dir entry").path();
        fuzzing::wire(&std::fs::read(&path).expect("corpus file"));
        n += 1;
    }
    assert!(n > 0, "empty corpus at {}", dir.display());
}

/// Writes the seed corpus for the `wire` fuzz target: `cargo test -p hf-wire -- --ignored`.
#[test]
#[ignore = "writes fuzz/corpus/wire; run by hand when the seeds change"]
fn write_seed_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wire");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut seeds = vec![tcp4_frame(), icmp_echo(false), icmp_echo(true)];
    let mut b = Vec::new();
    reply::arp_request(
        &mut b,
        EthAddr(MAC_A),
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
    );
    seeds.push(b);
    let mut b = Vec::new();
    reply::nd_ns(
        &mut b,
        EthAddr(MAC_A),
        Ipv6Addr::LOCALHOST,
        Ipv6Addr::LOCALHOST,
    );
    seeds.push(b.clone());
    let ns = parse(&b, 0, 0).expect("parses");
    let mut na = Vec::new();
    reply::nd_na(&mut na, &ns.key, EthAddr(MAC_B), false).expect("na");
    seeds.push(na);
    let t = tcp4_frame();
    let p = parse(&t, 0, 0).expect("parses");
    let mut e = Vec::new();
    reply::icmp4_error(&mut e, &t, &p, Ipv4Addr::new(1, 1, 1, 1), 11, 0, 0).expect("err");
    seeds.push(e);
    let u = ip_frame(
        v6(1),
        v6(2),
        ip_proto::UDP,
        l4(ip_proto::UDP, 1, 2, 0, &[], b"x"),
        Some(5),
    );
    let pu = parse(&u, 0, 0).expect("parses");
    let mut e6 = Vec::new();
    reply::icmp6_error(&mut e6, &u, &pu, Ipv6Addr::LOCALHOST, 3, 0, 0).expect("err6");
    seeds.push(e6);
    seeds.push(u);
    let mut g = Vec::new();
    let (outer, meta) = small_tunnel();
    geneve::encapsulate(&mut g, &outer, &meta, &t).expect("encap");
    seeds.push(g);
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), s).expect("write");
    }
}

/// `parse_into` over a context that still holds another frame's parse (the packet path reuses
/// one) gives exactly what `parse` gives: nothing of the previous frame leaks (its VLAN tag, its
/// ICMP quote, its TCP options). Each frame and each of its prefixes is parsed over each other
/// frame's parse.
#[test]
fn parse_into_a_used_context_equals_parse() {
    let f = tcp4_frame();
    let p = parse(&f, 0, 0).expect("parses");
    let mut quote = Vec::new();
    reply::icmp4_error(&mut quote, &f, &p, Ipv4Addr::new(192, 0, 2, 254), 3, 3, 0).expect("ip");
    let tagged = ip_frame(
        v4(10, 0, 0, 1),
        v4(10, 0, 0, 2),
        ip_proto::TCP,
        l4(ip_proto::TCP, 1, 2, 0x02, &[2, 4, 5, 0xb4, 1, 3, 3, 7], &[]),
        Some(0x2064),
    );
    let mut ns = Vec::new();
    reply::nd_ns(
        &mut ns,
        EthAddr(MAC_A),
        Ipv6Addr::LOCALHOST,
        Ipv6Addr::LOCALHOST,
    );
    let frames = [f, quote, tagged, icmp_echo(true), ns];
    for (i, prev) in frames.iter().enumerate() {
        for (j, f) in frames.iter().enumerate() {
            for n in (0..=f.len()).rev() {
                let mut ctx = parse(prev, 9, 99).expect("the previous frame parses");
                let into = parse_into(&f[..n], 3, 7, &mut ctx);
                match parse(&f[..n], 3, 7) {
                    Ok(want) => {
                        assert_eq!(into, Ok(()), "frame {j}[..{n}] over {i}");
                        assert_eq!(ctx, want, "frame {j}[..{n}] parsed over frame {i}");
                    }
                    Err(e) => assert_eq!(into, Err(e), "frame {j}[..{n}] over {i}"),
                }
            }
        }
    }
}
