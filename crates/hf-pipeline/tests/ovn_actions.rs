//! The actions and functions ovn-northd 23.03 emits beyond forwarding and conntrack, one family
//! per test, with the flows northd writes for them: port security (as ovn-controller's
//! `consider_port_sec_flows` implements it), FDB learning, ECMP symmetric replies, LB affinity,
//! `ct_lb_mark` hash fields, `ct_snat_to_vip` hairpin, `icmp4_error`/`icmp6_error` (TTL expiry,
//! frag needed), `bind_vport`, DHCP/DNS/RA as ovn-trace models them, and counted actions.
//! Each test runs the cached path twice (the second run replays) and the full walk, and checks
//! that all three agree.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hf_conntrack::{Config, Conntrack, Owner};
use hf_expr::actions::Pipeline as Pipe;
use hf_pipeline::{
    CompileError, DatapathKind, DatapathSpec, Destination, Event, FlowSpec, Ingress, LbVipSpec,
    Outputs, Pipeline, PortLocation, PortSpec, Program, ProgramSpec,
};
use hf_wire::{EthAddr, ip_proto, parse};

const M1: EthAddr = EthAddr([2, 0, 0, 0, 0, 1]);
const M2: EthAddr = EthAddr([2, 0, 0, 0, 0, 2]);
const M3: EthAddr = EthAddr([2, 0, 0, 0, 0, 3]);
const IP1: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const IP2: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

type Flow<'a> = (Pipe, u8, u16, &'a str, &'a str);

/// One switch `ls` (tunnel key 5): vm1, vm2, vm3 on local ports 1, 2, 3 with the given
/// `port_security` lists.
fn spec(ps: [&[&str]; 3], flows: &[Flow<'_>]) -> ProgramSpec {
    let port = |i: usize| PortSpec {
        name: format!("vm{}", i + 1),
        key: i as u32 + 1,
        location: PortLocation::Local(i as u32 + 1),
        zone: i as u16 + 1,
        port_security: ps[i].iter().map(|s| s.to_string()).collect(),
        ..PortSpec::default()
    };
    ProgramSpec {
        datapaths: vec![DatapathSpec {
            name: "ls".into(),
            tunnel_key: 5,
            kind: DatapathKind::Switch,
            ports: (0..3).map(port).collect(),
            groups: Vec::new(),
            flows: flows
                .iter()
                .map(|&(pl, t, p, m, a)| FlowSpec::parse(pl, t, p, m, a).expect("flow parses"))
                .collect(),
        }],
        owner: Owner(1),
        ..ProgramSpec::default()
    }
}

fn pipeline(s: &ProgramSpec) -> Pipeline {
    Pipeline::new(Program::compile_strict(s).expect("compiles"))
}

/// Runs `frame` three ways (cached twice, then the full walk on a fresh copy of the state) and
/// returns the cached run's outputs after checking that all three agree.
fn run_at(p: &mut Pipeline, ct: &mut Conntrack, from: u32, frame: &[u8], now: u64) -> Vec<Out> {
    run_ms(p, ct, from, frame, now * 1000)
}

type Out = (Destination, Vec<u8>);

fn collect(out: &Outputs) -> Vec<Out> {
    out.iter().map(|(d, b)| (d, b.to_vec())).collect()
}

/// Cached, cached again (a replay) and uncached agree for a stateless program.
fn run3(s: &ProgramSpec, from: u32, frame: &[u8]) -> Vec<Out> {
    let mut ct = Conntrack::new(Config::default());
    let mut p = pipeline(s);
    let a = run_at(&mut p, &mut ct, from, frame, 1);
    let b = run_at(&mut p, &mut ct, from, frame, 1);
    let mut q = pipeline(s);
    let mut ct2 = Conntrack::new(Config::default());
    let mut out = Outputs::default();
    q.process_uncached(
        &mut ct2,
        Ingress::Local(from),
        frame,
        Duration::from_secs(1),
        &mut out,
    )
    .expect("processed");
    let c = collect(&out);
    assert_eq!(a, b, "the cached replay differs from the first run");
    assert_eq!(a, c, "the cached path differs from the full walk");
    a
}

fn dests(v: &[Out]) -> Vec<Destination> {
    v.iter().map(|(d, _)| *d).collect()
}

fn udp4(src: EthAddr, dst: EthAddr, s: Ipv4Addr, d: Ipv4Addr, sp: u16, dp: u16) -> Vec<u8> {
    let mut l4 = vec![0u8; 8];
    l4[0..2].copy_from_slice(&sp.to_be_bytes());
    l4[2..4].copy_from_slice(&dp.to_be_bytes());
    l4[4..6].copy_from_slice(&8u16.to_be_bytes());
    let mut out = Vec::new();
    hf_wire::reply::ip_packet(&mut out, src, dst, s.into(), d.into(), ip_proto::UDP, &l4)
        .expect("builds");
    out
}

fn tcp(src: EthAddr, dst: EthAddr, s: IpAddr, d: IpAddr, sp: u16, dp: u16, flags: u8) -> Vec<u8> {
    let mut l4 = vec![0u8; 20];
    l4[0..2].copy_from_slice(&sp.to_be_bytes());
    l4[2..4].copy_from_slice(&dp.to_be_bytes());
    l4[4..8].copy_from_slice(&1u32.to_be_bytes());
    l4[12] = 5 << 4;
    l4[13] = flags;
    l4[14..16].copy_from_slice(&1000u16.to_be_bytes());
    let mut out = Vec::new();
    hf_wire::reply::ip_packet(&mut out, src, dst, s, d, ip_proto::TCP, &l4).expect("builds");
    out
}

/// An IPv6 ICMPv6 packet with hop limit 255 (as ND needs).
fn icmp6(src: EthAddr, dst: EthAddr, s: Ipv6Addr, d: Ipv6Addr, l4: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    hf_wire::reply::ip_packet(&mut out, src, dst, s.into(), d.into(), ip_proto::ICMPV6, l4)
        .expect("builds");
    out[14 + 7] = 255;
    out
}

/// A neighbour advertisement for `target` with target link-layer address `tll`.
fn nd_na(src: EthAddr, s: Ipv6Addr, target: Ipv6Addr, tll: EthAddr) -> Vec<u8> {
    let mut l4 = vec![136, 0, 0, 0, 0x60, 0, 0, 0];
    l4.extend_from_slice(&target.octets());
    l4.extend_from_slice(&[2, 1]);
    l4.extend_from_slice(&tll.0);
    icmp6(src, M2, s, "fe80::2".parse().expect("ip"), &l4)
}

fn arp(sha: EthAddr, spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
    let mut out = Vec::new();
    hf_wire::reply::arp_request(&mut out, sha, spa, tpa);
    out
}

/// northd's port-security stages on the ingress side, then delivery to vm2; the egress side
/// checks `check_out_port_sec()`.
const PORT_SEC: &[Flow<'static>] = &[
    (Pipe::Ingress, 0, 100, "eth.src[40]", "drop;"),
    (
        Pipe::Ingress,
        0,
        50,
        "1",
        "reg0[15] = check_in_port_sec(); next;",
    ),
    (Pipe::Ingress, 1, 50, "reg0[15] == 1", "drop;"),
    (Pipe::Ingress, 1, 0, "1", "next;"),
    (Pipe::Ingress, 2, 0, "1", "outport = \"vm2\"; output;"),
    (
        Pipe::Egress,
        0,
        0,
        "1",
        "reg0[15] = check_out_port_sec(); next;",
    ),
    (Pipe::Egress, 1, 50, "reg0[15] == 1", "drop;"),
    (Pipe::Egress, 1, 0, "1", "output;"),
];

#[test]
fn check_in_port_sec_ipv4_and_arp() {
    let s = spec(
        [
            &["02:00:00:00:00:01 10.0.0.1", "02:00:00:00:00:03"],
            &[],
            &[],
        ],
        PORT_SEC,
    );
    let ok = |f: &[u8]| dests(&run3(&s, 1, f)) == [Destination::Local(2)];
    assert!(
        ok(&udp4(M1, M2, IP1, IP2, 1000, 53)),
        "the port's own MAC and IP"
    );
    assert!(
        !ok(&udp4(M1, M2, Ipv4Addr::new(10, 0, 0, 9), IP2, 1, 53)),
        "spoofed IP"
    );
    assert!(!ok(&udp4(M2, M2, IP1, IP2, 1000, 53)), "spoofed MAC");
    assert!(
        ok(&udp4(M3, M2, Ipv4Addr::new(10, 9, 9, 9), IP2, 1, 53)),
        "an entry without IPs admits any IP from its MAC"
    );
    let dhcp = udp4(
        M1,
        EthAddr::BROADCAST,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::BROADCAST,
        68,
        67,
    );
    assert!(ok(&dhcp), "DHCP discover from 0.0.0.0");
    assert!(ok(&arp(M1, IP1, IP2)), "ARP with the port's MAC and IP");
    assert!(
        !ok(&arp(M1, Ipv4Addr::new(10, 0, 0, 7), IP2)),
        "ARP with a spoofed arp.spa"
    );
    assert!(
        ok(&arp(M3, Ipv4Addr::new(10, 0, 0, 7), IP2)),
        "ARP from the MAC-only entry"
    );
    // A port without port security passes everything.
    assert!(
        dests(&run3(
            &s,
            3,
            &udp4(M2, M1, Ipv4Addr::new(1, 2, 3, 4), IP2, 1, 2)
        )) == [Destination::Local(2)]
    );
}

#[test]
fn check_in_port_sec_subnets_and_ipv6() {
    let s = spec(
        [&["02:00:00:00:00:01 10.1.0.0/16 fd00::1/64"], &[], &[]],
        PORT_SEC,
    );
    let ok = |f: &[u8]| dests(&run3(&s, 1, f)) == [Destination::Local(2)];
    // A zero host part admits the subnet; ovn-controller matches ip4.src/16.
    assert!(ok(&udp4(M1, M2, Ipv4Addr::new(10, 1, 2, 3), IP2, 1, 2)));
    assert!(!ok(&udp4(M1, M2, Ipv4Addr::new(10, 2, 0, 1), IP2, 1, 2)));
    // fd00::1/64 has a host part: only that address (and the link-local one).
    let fd1: Ipv6Addr = "fd00::1".parse().expect("ip");
    let fd2: Ipv6Addr = "fd00::2".parse().expect("ip");
    let lla: Ipv6Addr = "fe80::ff:fe00:1".parse().expect("ip");
    let t6 = |src: Ipv6Addr| tcp(M1, M2, src.into(), fd2.into(), 1, 80, 2);
    assert!(ok(&t6(fd1)));
    assert!(ok(&t6(lla)), "the EUI-64 link-local address of the MAC");
    assert!(!ok(&t6(fd2)));
    // Neighbour advertisements: the target must be the port's, the tll zero or its MAC.
    assert!(ok(&nd_na(M1, lla, fd1, M1)));
    assert!(
        !ok(&nd_na(M1, lla, fd2, M1)),
        "NA for someone else's address"
    );
    assert!(!ok(&nd_na(M1, lla, fd1, M3)), "NA with a foreign nd.tll");
}

#[test]
fn check_out_port_sec() {
    let s = spec([&[], &["02:00:00:00:00:02 10.0.0.2/24"], &[]], PORT_SEC);
    let ok = |f: &[u8]| dests(&run3(&s, 1, f)) == [Destination::Local(2)];
    assert!(ok(&udp4(M1, M2, IP1, IP2, 1, 2)));
    assert!(
        !ok(&udp4(M1, M2, IP1, Ipv4Addr::new(10, 0, 0, 3), 1, 2)),
        "another IP"
    );
    assert!(!ok(&udp4(M1, M3, IP1, IP2, 1, 2)), "another MAC");
    assert!(
        ok(&udp4(M1, M2, IP1, Ipv4Addr::new(10, 0, 0, 255), 1, 2)),
        "subnet broadcast"
    );
    assert!(ok(&udp4(M1, M2, IP1, Ipv4Addr::BROADCAST, 1, 2)));
    assert!(
        ok(&udp4(M1, M2, IP1, Ipv4Addr::new(224, 0, 0, 5), 1, 2)),
        "multicast"
    );
}

#[test]
fn bad_port_security_is_a_named_compile_error() {
    let s = spec([&["02:00:00:00:00:01 10.0.0.300"], &[], &[]], PORT_SEC);
    match Program::compile(&s).map(|(p, _)| p) {
        Err(CompileError::PortSecurity { port, message }) => {
            assert_eq!(port, "vm1");
            assert!(message.contains("10.0.0.300"), "{message}");
        }
        other => panic!("expected a port-security error, got {other:?}"),
    }
}

/// northd's FDB stages for a port with `unknown` addresses, then `get_fdb` in l2_lkup and the
/// `outport == "none"` fallback.
const FDB: &[Flow<'static>] = &[
    (
        Pipe::Ingress,
        0,
        100,
        "inport == \"vm1\"",
        "reg0[11] = lookup_fdb(inport, eth.src); next;",
    ),
    (Pipe::Ingress, 0, 0, "1", "next;"),
    (
        Pipe::Ingress,
        1,
        100,
        "inport == \"vm1\" && reg0[11] == 0",
        "put_fdb(inport, eth.src); next;",
    ),
    (Pipe::Ingress, 1, 0, "1", "next;"),
    (
        Pipe::Ingress,
        2,
        0,
        "1",
        "outport = get_fdb(eth.dst); next;",
    ),
    (
        Pipe::Ingress,
        3,
        50,
        "outport == \"none\"",
        "outport = \"vm3\"; output;",
    ),
    (Pipe::Ingress, 3, 0, "1", "output;"),
    (Pipe::Egress, 0, 0, "1", "output;"),
];

#[test]
fn fdb_learns_reports_and_forwards() {
    let s = spec([&[], &[], &[]], FDB);
    let mut ct = Conntrack::new(Config::default());
    let mut p = pipeline(&s);
    let mx = EthAddr([2, 0, 0, 0, 0, 0x99]);
    // Before learning: vm2 → mx goes to the "none" fallback.
    let to_mx = udp4(M2, mx, IP2, IP1, 1, 2);
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 2, &to_mx, 1)),
        [Destination::Local(3)]
    );
    // mx speaks from vm1: learned, reported once.
    let from_mx = udp4(mx, M2, IP1, IP2, 1, 2);
    run_at(&mut p, &mut ct, 1, &from_mx, 1);
    run_at(&mut p, &mut ct, 1, &from_mx, 1);
    assert_eq!(p.fdb(5, mx.0), Some(1));
    assert_eq!(
        p.take_events(),
        [Event::Fdb {
            datapath: "ls".into(),
            port: "vm1".into(),
            mac: mx.0
        }]
    );
    assert!(p.take_events().is_empty());
    // Now vm2 → mx is delivered to vm1, on the cached path as on the first run.
    for _ in 0..2 {
        assert_eq!(
            dests(&run_at(&mut p, &mut ct, 2, &to_mx, 2)),
            [Destination::Local(1)]
        );
    }
    // The learned entry survives a program swap.
    p.set_program(Program::compile_strict(&s).expect("compiles"));
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 2, &to_mx, 3)),
        [Destination::Local(1)]
    );
    // A trace neither learns nor reports.
    let my = EthAddr([2, 0, 0, 0, 0, 0x98]);
    let mut out = Outputs::default();
    p.trace(
        &ct,
        Ingress::Local(1),
        &udp4(my, M2, IP1, IP2, 1, 2),
        Duration::from_secs(4),
        &mut out,
    )
    .expect("traced");
    assert_eq!(p.fdb(5, my.0), None);
    assert!(p.take_events().is_empty());
}

/// A router-like datapath doing ECMP symmetric replies as northd writes them (simplified to the
/// actions under test): packets arriving from vm1 are committed with `commit_ecmp_nh`; replies
/// check `chk_ecmp_nh()` and the next request `chk_ecmp_nh_mac()`.
const ECMP: &[Flow<'static>] = &[
    (
        Pipe::Ingress,
        0,
        100,
        "inport == \"vm1\" && ip4",
        "reg9[5] = chk_ecmp_nh_mac(); next;",
    ),
    (
        Pipe::Ingress,
        0,
        100,
        "inport == \"vm2\" && ip4",
        "reg9[5] = chk_ecmp_nh(); next;",
    ),
    (
        Pipe::Ingress,
        1,
        100,
        "inport == \"vm1\" && reg9[5] == 0 && tcp",
        "commit_ecmp_nh(ipv6 = false, proto = tcp); next;",
    ),
    (Pipe::Ingress, 1, 0, "1", "next;"),
    (
        Pipe::Ingress,
        2,
        100,
        "reg9[5] == 1",
        "outport = \"vm3\"; output;",
    ),
    (
        Pipe::Ingress,
        2,
        50,
        "inport == \"vm1\"",
        "outport = \"vm2\"; output;",
    ),
    (
        Pipe::Ingress,
        2,
        50,
        "inport == \"vm2\"",
        "outport = \"vm1\"; output;",
    ),
    (Pipe::Egress, 0, 0, "1", "output;"),
];

#[test]
fn ecmp_next_hop_is_learned_and_expires() {
    let s = spec([&[], &[], &[]], ECMP);
    let mut ct = Conntrack::new(Config::default());
    let mut p = pipeline(&s);
    let (a, b): (IpAddr, IpAddr) = (IP1.into(), Ipv4Addr::new(198, 51, 100, 7).into());
    let req = tcp(M1, M2, a, b, 4000, 80, 2);
    let reply = tcp(M2, M1, b, a, 80, 4000, 0x12);
    let other_reply = tcp(M2, M1, b, a, 80, 4001, 0x12);
    // Before any request, the reply is not a known next hop.
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 2, &reply, 1)),
        [Destination::Local(1)]
    );
    // The first request is committed (its own check misses) ...
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 1, &req, 1)),
        [Destination::Local(2)]
    );
    // ... after which the request direction (same eth.src) and the reply are both known.
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 1, &req, 2)),
        [Destination::Local(3)]
    );
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 2, &reply, 2)),
        [Destination::Local(3)]
    );
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 2, &other_reply, 2)),
        [Destination::Local(1)]
    );
    assert_eq!(p.learn_stats().ecmp, 2);
    // 20 s idle: forgotten.
    assert_eq!(
        dests(&run_at(&mut p, &mut ct, 2, &reply, 30)),
        [Destination::Local(1)]
    );
    p.expire_learned(Duration::from_secs(30));
    assert_eq!(p.learn_stats().ecmp, 0);
}

/// LB affinity as northd writes it for a switch: check, then either the remembered backend or
/// `ct_lb_mark` over all backends and learning the choice.
const AFF: &[Flow<'static>] = &[
    (
        Pipe::Ingress,
        0,
        100,
        "ct.new && ip4.dst == 10.0.0.100 && tcp.dst == 80",
        "reg9[6] = chk_lb_aff(); next;",
    ),
    (Pipe::Ingress, 0, 0, "1", "next;"),
    (
        Pipe::Ingress,
        1,
        150,
        "reg9[6] == 1 && ct.new && ip4 && reg4 == 10.0.0.2 && reg8[0..15] == 8080",
        "ct_lb_mark(backends=10.0.0.2:8080);",
    ),
    (
        Pipe::Ingress,
        1,
        150,
        "reg9[6] == 1 && ct.new && ip4 && reg4 == 10.0.0.3 && reg8[0..15] == 8080",
        "ct_lb_mark(backends=10.0.0.3:8080);",
    ),
    (
        Pipe::Ingress,
        1,
        120,
        "ct.new && ip4.dst == 10.0.0.100 && tcp.dst == 80",
        "ct_lb_mark(backends=10.0.0.2:8080,10.0.0.3:8080);",
    ),
    (Pipe::Ingress, 1, 0, "1", "next;"),
    (
        Pipe::Ingress,
        2,
        100,
        "ct.new && ip4.dst == 10.0.0.2 && tcp.dst == 8080",
        "commit_lb_aff(vip = \"10.0.0.100:80\", backend = \"10.0.0.2:8080\", proto = tcp, timeout = 60); next;",
    ),
    (
        Pipe::Ingress,
        2,
        100,
        "ct.new && ip4.dst == 10.0.0.3 && tcp.dst == 8080",
        "commit_lb_aff(vip = \"10.0.0.100:80\", backend = \"10.0.0.3:8080\", proto = tcp, timeout = 60); next;",
    ),
    (Pipe::Ingress, 2, 0, "1", "next;"),
    (Pipe::Ingress, 3, 0, "1", "outport = \"vm2\"; output;"),
    (Pipe::Egress, 0, 0, "1", "output;"),
];

#[test]
fn lb_affinity_keeps_a_client_on_its_backend() {
    let mut flows = vec![(Pipe::Ingress, 0u8, 200u16, "ip && !ct.trk", "ct_next;")];
    flows.extend_from_slice(AFF);
    // ct_next recirculates into table 1: shift the affinity stages by one.
    let shifted: Vec<Flow<'_>> = flows
        .iter()
        .map(|&(pl, t, pr, m, a)| {
            (
                pl,
                if pl == Pipe::Ingress && pr != 200 {
                    t + 1
                } else {
                    t
                },
                pr,
                m,
                a,
            )
        })
        .collect();
    let s = spec([&[], &[], &[]], &shifted);
    let mut ct = Conntrack::new(Config::default());
    let mut p = pipeline(&s);
    let vip: IpAddr = Ipv4Addr::new(10, 0, 0, 100).into();
    let backend_of = |out: &[Out]| -> IpAddr {
        let pk = parse(&out[0].1, 0, 0).expect("parses");
        pk.key.ip_dst().expect("ip")
    };
    // Find a client port whose connections hash to each backend, then check that once a
    // client has a backend, new connections from any source port keep it.
    let mut seen = std::collections::BTreeSet::new();
    for sport in 1000..1064u16 {
        let syn = tcp(M1, M2, IP1.into(), vip, sport, 80, 2);
        let out = run_at(&mut p, &mut ct, 1, &syn, 1);
        assert_eq!(dests(&out), [Destination::Local(2)]);
        seen.insert(backend_of(&out));
    }
    assert_eq!(
        seen.len(),
        1,
        "one client, one backend while the session lives: {seen:?}"
    );
    assert_eq!(p.learn_stats().lb_affinity, 1);
    // After the idle timeout, a new choice is made (and learned again).
    let syn = tcp(M1, M2, IP1.into(), vip, 5000, 80, 2);
    run_at(&mut p, &mut ct, 1, &syn, 100);
    assert_eq!(p.learn_stats().lb_affinity, 1);
    // Without affinity, 64 source ports would spread over both backends.
    let s2 = spec(
        [&[], &[], &[]],
        &[
            (Pipe::Ingress, 0, 200, "ip && !ct.trk", "ct_next;"),
            (
                Pipe::Ingress,
                1,
                120,
                "ct.new && ip4.dst == 10.0.0.100 && tcp.dst == 80",
                "ct_lb_mark(backends=10.0.0.2:8080,10.0.0.3:8080);",
            ),
            (Pipe::Ingress, 2, 0, "1", "outport = \"vm2\"; output;"),
            (Pipe::Egress, 0, 0, "1", "output;"),
        ],
    );
    let mut q = pipeline(&s2);
    let mut ct2 = Conntrack::new(Config::default());
    let spread: std::collections::BTreeSet<IpAddr> = (1000..1064u16)
        .map(|sp| {
            backend_of(&run_at(
                &mut q,
                &mut ct2,
                1,
                &tcp(M1, M2, IP1.into(), vip, sp, 80, 2),
                1,
            ))
        })
        .collect();
    assert_eq!(spread.len(), 2, "the control has teeth");
}

#[test]
fn ct_lb_mark_hash_fields_choose_by_the_named_fields() {
    let flows = |h: &'static str| -> Vec<Flow<'static>> {
        vec![
            (Pipe::Ingress, 0, 200, "ip && !ct.trk", "ct_next;"),
            (Pipe::Ingress, 1, 120, "ct.new && ip4.dst == 10.0.0.100", h),
            (Pipe::Ingress, 2, 0, "1", "outport = \"vm2\"; output;"),
            (Pipe::Egress, 0, 0, "1", "output;"),
        ]
    };
    let s = spec(
        [&[], &[], &[]],
        &flows(
            "ct_lb_mark(backends=10.0.0.2:80,10.0.0.3:80,10.0.0.4:80; hash_fields=\"ip_src,ip_dst\");",
        ),
    );
    let vip: IpAddr = Ipv4Addr::new(10, 0, 0, 100).into();
    let mut p = pipeline(&s);
    let mut ct = Conntrack::new(Config::default());
    // Hashing only addresses: every source port of one client lands on the same backend.
    let backends: std::collections::BTreeSet<Vec<u8>> = (2000..2040u16)
        .map(|sp| {
            let out = run_at(
                &mut p,
                &mut ct,
                1,
                &tcp(M1, M2, IP1.into(), vip, sp, 80, 2),
                1,
            );
            out[0].1[30..34].to_vec()
        })
        .collect();
    assert_eq!(backends.len(), 1);
    // Unknown fields are a compile error naming them.
    let bad = spec(
        [&[], &[], &[]],
        &flows("ct_lb_mark(backends=10.0.0.2:80; hash_fields=\"bogus\");"),
    );
    let err = Program::compile_strict(&bad).expect_err("rejected");
    assert!(err.to_string().contains("bogus"), "{err}");
}

#[test]
fn ct_snat_to_vip_hairpins_through_the_vip() {
    // vm1 (10.0.0.1) reaches VIP 10.0.0.100:80 whose backend is itself; northd's hairpin flows
    // SNAT to the VIP and send it back out of vm1.
    let flows: &[Flow<'_>] = &[
        (Pipe::Ingress, 0, 200, "ip && !ct.trk", "ct_next;"),
        (
            Pipe::Ingress,
            1,
            120,
            "ct.new && ip4.dst == 10.0.0.100 && tcp.dst == 80",
            "ct_lb_mark(backends=10.0.0.1:8080);",
        ),
        (Pipe::Ingress, 1, 0, "1", "next;"),
        (
            Pipe::Ingress,
            2,
            100,
            "ip4.src == 10.0.0.1 && ip4.dst == 10.0.0.1 && ct.trk && ct.dnat",
            "reg0[6] = 1; next;",
        ),
        (Pipe::Ingress, 2, 0, "1", "next;"),
        (
            Pipe::Ingress,
            3,
            100,
            "ip && ct.new && ct.trk && reg0[6] == 1",
            "ct_snat_to_vip; next;",
        ),
        (Pipe::Ingress, 3, 0, "1", "next;"),
        (
            Pipe::Ingress,
            4,
            1,
            "reg0[6] == 1",
            "eth.dst <-> eth.src; outport = inport; flags.loopback = 1; output;",
        ),
        (Pipe::Ingress, 4, 0, "1", "outport = \"vm2\"; output;"),
        (Pipe::Egress, 0, 0, "1", "output;"),
    ];
    let mut s = spec([&[], &[], &[]], flows);
    s.lb_vips.push(LbVipSpec {
        datapath: "ls".into(),
        ip: Ipv4Addr::new(10, 0, 0, 100).into(),
        port: 80,
        proto: 6,
    });
    s.switch_snat_zones.push(("ls".into(), 77));
    let mut p = pipeline(&s);
    let mut ct = Conntrack::new(Config::default());
    let vip: IpAddr = Ipv4Addr::new(10, 0, 0, 100).into();
    let out = run_at(
        &mut p,
        &mut ct,
        1,
        &tcp(M1, M2, IP1.into(), vip, 3333, 80, 2),
        1,
    );
    assert_eq!(dests(&out), [Destination::Local(1)]);
    let pk = parse(&out[0].1, 0, 0).expect("parses");
    assert_eq!(pk.key.ip_src(), Some(vip), "source NATed to the VIP");
    assert_eq!(
        pk.key.ip_dst(),
        Some(IP1.into()),
        "destination DNATed to the backend"
    );
    assert_eq!(pk.key.tp_dst, 8080);
    // Without the VIP in the program, ct_snat_to_vip leaves the source alone.
    s.lb_vips.clear();
    let mut p = pipeline(&s);
    let mut ct = Conntrack::new(Config::default());
    let out = run_at(
        &mut p,
        &mut ct,
        1,
        &tcp(M1, M2, IP1.into(), vip, 3333, 80, 2),
        1,
    );
    let pk = parse(&out[0].1, 0, 0).expect("parses");
    assert_eq!(pk.key.ip_src(), Some(IP1.into()));
}

#[test]
fn icmp4_error_answers_ttl_expiry_and_frag_needed() {
    // northd's lr_in_ip_input TTL flow (on a switch-shaped test program) and the
    // lr_in_larger_pkts flow with icmp4.frag_mtu.
    let flows: &[Flow<'_>] = &[
        (
            Pipe::Ingress,
            0,
            100,
            "ip4 && ip.ttl == {0, 1}",
            "icmp4_error { eth.dst <-> eth.src; icmp4.type = 11; icmp4.code = 0; ip4.dst = ip4.src; ip4.src = 10.0.0.254; ip.ttl = 254; outport = \"vm1\"; flags.loopback = 1; output; };",
        ),
        (
            Pipe::Ingress,
            0,
            90,
            "ip4 && udp.dst == 9",
            "icmp4_error { eth.dst <-> eth.src; ip4.dst = ip4.src; ip4.src = 10.0.0.254; ip.ttl = 255; icmp4.type = 3; icmp4.code = 4; icmp4.frag_mtu = 1400; outport = \"vm1\"; flags.loopback = 1; output; };",
        ),
        (Pipe::Ingress, 0, 0, "1", "outport = \"vm2\"; output;"),
        (Pipe::Egress, 0, 0, "1", "output;"),
    ];
    let s = spec([&[], &[], &[]], flows);
    let mut orig = udp4(M1, M2, IP1, IP2, 1234, 53);
    orig[14 + 8] = 1; // TTL 1 (the IPv4 checksum is not checked by the parser's key)
    let out = run3(&s, 1, &orig);
    assert_eq!(dests(&out), [Destination::Local(1)]);
    let f = &out[0].1;
    // Byte offsets of an untagged IPv4 frame: IP header at 14, ICMP at 34.
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    assert_eq!(&f[0..6], &M1.0, "back to the sender");
    assert_eq!(f[14 + 8], 254, "ip.ttl = 254");
    assert_eq!(f[14 + 9], 1, "ICMP");
    assert_eq!(&f[14 + 12..14 + 16], &[10, 0, 0, 254]);
    assert_eq!(&f[14 + 16..14 + 20], &IP1.octets());
    assert_eq!(
        ones_sum(&f[14..34]),
        0xffff,
        "IPv4 header checksum verifies"
    );
    assert_eq!((f[34], f[35]), (11, 0), "time exceeded");
    assert_eq!(
        &f[42..62],
        &orig[14..34],
        "the original IP header is quoted"
    );
    assert_eq!(ones_sum(&f[34..]), 0xffff, "ICMP checksum verifies");
    // Frag needed carries the MTU in bytes 6-7 of the ICMP header.
    let out = run3(&s, 1, &udp4(M1, M2, IP1, IP2, 1234, 9));
    let f = &out[0].1;
    assert_eq!((f[34], f[35]), (3, 4));
    assert_eq!(&f[40..42], &1400u16.to_be_bytes());
    assert_eq!(
        ones_sum(&f[34..]),
        0xffff,
        "ICMP checksum verifies after the MTU write"
    );
}

/// The ones'-complement sum of `b` (0xffff when a checksum inside it verifies).
fn ones_sum(b: &[u8]) -> u32 {
    let mut sum = 0u32;
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

#[test]
fn controller_actions_as_ovn_trace_models_them_and_counters() {
    let flows: &[Flow<'_>] = &[
        (
            Pipe::Ingress,
            0,
            100,
            "udp.dst == 67",
            "reg0[3] = put_dhcp_opts(offerip = 10.0.0.1, router = 10.0.0.254, netmask = 255.255.255.0, server_id = 10.0.0.254, lease_time = 3600); next;",
        ),
        (
            Pipe::Ingress,
            0,
            90,
            "udp.dst == 53",
            "reg0[4] = dns_lookup(); next;",
        ),
        (
            Pipe::Ingress,
            0,
            80,
            "arp",
            "bind_vport(\"vm3\", inport); log(name=\"a\", severity=info, verdict=allow); next;",
        ),
        (
            Pipe::Ingress,
            0,
            0,
            "1",
            "set_meter(100); sample(probability=65535, collector_set=1, obs_domain=1, obs_point=1); trigger_event(event = \"empty_lb_backends\", vip = \"10.0.0.100:80\", protocol = \"tcp\", load_balancer = \"00000000-0000-0000-0000-000000000000\"); next;",
        ),
        (
            Pipe::Ingress,
            1,
            100,
            "reg0[3] == 1",
            "outport = \"vm2\"; output;",
        ),
        (
            Pipe::Ingress,
            1,
            100,
            "reg0[4] == 1",
            "outport = \"vm2\"; output;",
        ),
        (Pipe::Ingress, 1, 50, "1", "outport = \"vm3\"; output;"),
        (Pipe::Egress, 0, 0, "1", "output;"),
    ];
    let s = spec([&[], &[], &[]], flows);
    // put_dhcp_opts stores 1 (ovn-trace), dns_lookup 0 (ovn-trace: not implemented).
    let dhcp = udp4(
        M1,
        EthAddr::BROADCAST,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::BROADCAST,
        68,
        67,
    );
    assert_eq!(dests(&run3(&s, 1, &dhcp)), [Destination::Local(2)]);
    assert_eq!(
        dests(&run3(&s, 1, &udp4(M1, M2, IP1, IP2, 5, 53))),
        [Destination::Local(3)]
    );
    let mut p = pipeline(&s);
    let mut ct = Conntrack::new(Config::default());
    for _ in 0..3 {
        run_at(&mut p, &mut ct, 1, &dhcp, 1);
    }
    run_at(&mut p, &mut ct, 2, &arp(M2, IP2, IP1), 1);
    run_at(&mut p, &mut ct, 2, &arp(M2, IP2, IP1), 1);
    let (logs, others): (Vec<Event>, Vec<Event>) = p
        .take_events()
        .into_iter()
        .partition(|e| matches!(e, Event::AclLog { .. }));
    assert_eq!(
        others,
        [Event::BindVport {
            datapath: "ls".into(),
            vport: "vm3".into(),
            parent: "vm2".into()
        }],
        "reported once"
    );
    // `log` (no meter): one acl_log event per logged packet, with the packet.
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(matches!(
        &logs[0],
        Event::AclLog { name: Some(n), severity: "info", verdict: "allow", direction: "from-lport", frame }
            if n == "a" && frame.as_slice() == arp(M2, IP2, IP1).as_slice()
    ));
    let hits = p.action_hits();
    let count = |name: &str| -> u64 {
        hits.iter()
            .filter(|h| h.action == name)
            .map(|h| h.hits)
            .sum()
    };
    assert_eq!(count("put_dhcp_opts"), 3);
    assert_eq!(count("log"), 2);
    assert_eq!(count("bind_vport"), 2);
    assert_eq!(count("set_meter"), 0);
    run_at(
        &mut p,
        &mut ct,
        1,
        &tcp(M1, M2, IP1.into(), IP2.into(), 1, 2, 2),
        1,
    );
    let hits = p.action_hits();
    for a in ["set_meter", "sample", "trigger_event"] {
        assert_eq!(
            hits.iter()
                .filter(|h| h.action == a)
                .map(|h| h.hits)
                .sum::<u64>(),
            1,
            "{a}"
        );
    }
    let h = hits
        .iter()
        .find(|h| h.action == "log")
        .expect("log counted");
    assert_eq!(
        (h.datapath.as_str(), h.pipeline, h.table, h.priority),
        ("ls", "ingress", 0, 80)
    );
    // Traces do not count.
    let mut out = Outputs::default();
    p.trace(
        &ct,
        Ingress::Local(1),
        &dhcp,
        Duration::from_secs(1),
        &mut out,
    )
    .expect("traced");
    assert_eq!(
        p.action_hits()
            .iter()
            .filter(|h| h.action == "put_dhcp_opts")
            .map(|h| h.hits)
            .sum::<u64>(),
        3
    );
}

#[test]
fn neighbour_events_are_reported() {
    let s = spec(
        [&[], &[], &[]],
        &[
            (
                Pipe::Ingress,
                0,
                100,
                "arp",
                "put_arp(inport, arp.spa, arp.sha);",
            ),
            (Pipe::Egress, 0, 0, "1", "output;"),
        ],
    );
    let mut p = pipeline(&s);
    let mut ct = Conntrack::new(Config::default());
    run_at(&mut p, &mut ct, 1, &arp(M1, IP1, IP2), 1);
    run_at(&mut p, &mut ct, 1, &arp(M1, IP1, IP2), 1);
    assert_eq!(
        p.take_events(),
        [Event::Neighbour {
            datapath: "ls".into(),
            port: "vm1".into(),
            ip: IP1.into(),
            mac: M1.0
        }]
    );
}

#[test]
fn actions_the_pipeline_cannot_execute_are_compile_errors() {
    for (a, needle) in [
        ("bind_vport(\"nope\", inport); next;", "nope"),
        ("fwd_group(childports=\"nope\");", "nope"),
    ] {
        let s = spec([&[], &[], &[]], &[(Pipe::Ingress, 0, 0, "1", a)]);
        let err = Program::compile_strict(&s).expect_err(a);
        assert!(err.to_string().contains(needle), "{a}: {err}");
    }
}

#[test]
fn fwd_group_outputs_to_one_child() {
    let s = spec(
        [&[], &[], &[]],
        &[
            (
                Pipe::Ingress,
                0,
                0,
                "1",
                "fwd_group(liveness=true, childports=\"vm2\", \"vm3\");",
            ),
            (Pipe::Egress, 0, 0, "1", "output;"),
        ],
    );
    let mut seen = std::collections::BTreeSet::new();
    for sp in 1..40u16 {
        let d = dests(&run3(&s, 1, &udp4(M1, M2, IP1, IP2, sp, 53)));
        assert_eq!(d.len(), 1);
        seen.insert(format!("{:?}", d[0]));
    }
    assert_eq!(seen.len(), 2, "both children are used: {seen:?}");
}

/// An SCTP INIT (verification tag 0, initiate tag 0x11223344) from `M1`/10.0.0.1:5000 to
/// `M2`/10.0.0.2:80 with a valid CRC-32C.
fn sctp_init() -> Vec<u8> {
    let mut l4 = vec![0u8; 32];
    l4[0..2].copy_from_slice(&5000u16.to_be_bytes());
    l4[2..4].copy_from_slice(&80u16.to_be_bytes());
    l4[12] = 1; // INIT
    l4[14..16].copy_from_slice(&20u16.to_be_bytes());
    l4[16..20].copy_from_slice(&0x1122_3344u32.to_be_bytes());
    let cs = hf_wire::reply::crc32c(&l4);
    l4[8..12].copy_from_slice(&cs.to_le_bytes());
    let mut out = Vec::new();
    hf_wire::reply::ip_packet(&mut out, M1, M2, IP1.into(), IP2.into(), 132, &l4).expect("builds");
    out
}

#[test]
fn sctp_abort_and_reject_of_sctp() {
    for (action, want_src) in [
        // northd's ACL reject for SCTP: the flow swaps the addresses itself.
        (
            "sctp_abort { eth.dst <-> eth.src; ip4.dst <-> ip4.src; outport = inport; flags.loopback = 1; output; };",
            IP2,
        ),
        // `reject` answers back to the sender by itself.
        (
            "reject { outport = inport; flags.loopback = 1; output; };",
            IP2,
        ),
    ] {
        let s = spec(
            [&[], &[], &[]],
            &[
                (Pipe::Ingress, 0, 10, "sctp", action),
                (Pipe::Egress, 0, 0, "1", "output;"),
            ],
        );
        let out = run3(&s, 1, &sctp_init());
        assert_eq!(dests(&out), [Destination::Local(1)], "{action}");
        let f = &out[0].1;
        let r = parse(f, 0, 0).expect("parses");
        assert_eq!(r.key.ip_proto, 132);
        assert_eq!(r.key.ip_src(), Some(want_src.into()), "{action}");
        assert_eq!(r.key.ip_dst(), Some(IP1.into()), "{action}");
        assert_eq!((r.key.tp_src, r.key.tp_dst), (80, 5000));
        let l4 = &f[34..];
        assert_eq!(
            &l4[4..8],
            &0x1122_3344u32.to_be_bytes(),
            "the INIT's initiate tag"
        );
        assert_eq!((l4[12], l4[13]), (6, 0), "ABORT without the T bit");
        let mut z = l4.to_vec();
        z[8..12].copy_from_slice(&[0; 4]);
        assert_eq!(
            &l4[8..12],
            &hf_wire::reply::crc32c(&z).to_le_bytes(),
            "CRC-32C"
        );
        assert_eq!(f[14 + 8], 63, "TTL 63 as pinctrl");
    }
}

#[test]
fn traces_explain_the_results() {
    let s = spec([&["02:00:00:00:00:01 10.0.0.1"], &[], &[]], PORT_SEC);
    let mut p = pipeline(&s);
    let ct = Conntrack::new(Config::default());
    let mut out = Outputs::default();
    let spoofed = udp4(M1, M2, Ipv4Addr::new(10, 0, 0, 9), IP2, 1, 53);
    let t = p
        .trace(
            &ct,
            Ingress::Local(1),
            &spoofed,
            Duration::from_secs(1),
            &mut out,
        )
        .expect("traced");
    assert!(out.is_empty());
    let effects: Vec<&String> = t.records.iter().flat_map(|r| &r.effects).collect();
    assert!(
        effects
            .iter()
            .any(|e| e.contains("check_in_port_sec: port security FAILED")),
        "{effects:#?}"
    );
    let t = p
        .trace(
            &ct,
            Ingress::Local(1),
            &udp4(M1, M2, IP1, IP2, 1, 53),
            Duration::from_secs(1),
            &mut out,
        )
        .expect("traced");
    assert_eq!(out.len(), 1);
    let effects: Vec<&String> = t.records.iter().flat_map(|r| &r.effects).collect();
    assert!(
        effects
            .iter()
            .any(|e| e.contains("check_in_port_sec: allowed")),
        "{effects:#?}"
    );
}

#[test]
fn select_continues_in_the_next_table() {
    // northd's ECMP route: `reg8[16..31] = select(1, 2);` with no `next;` after it.
    let s = spec(
        [&[], &[], &[]],
        &[
            (
                Pipe::Ingress,
                0,
                0,
                "1",
                "reg8[0..15] = 1; reg8[16..31] = select(1, 2);",
            ),
            (
                Pipe::Ingress,
                1,
                10,
                "reg8[16..31] == 1",
                "outport = \"vm2\"; output;",
            ),
            (
                Pipe::Ingress,
                1,
                10,
                "reg8[16..31] == 2",
                "outport = \"vm3\"; output;",
            ),
            (Pipe::Egress, 0, 0, "1", "output;"),
        ],
    );
    let mut seen = std::collections::BTreeSet::new();
    for sp in 1..40u16 {
        let d = dests(&run3(&s, 1, &udp4(M1, M2, IP1, IP2, sp, 53)));
        assert_eq!(d.len(), 1, "one copy, in the table after select");
        seen.insert(format!("{:?}", d[0]));
    }
    assert_eq!(seen.len(), 2, "both members are chosen: {seen:?}");
}

#[test]
fn chk_lb_hairpin_needs_a_vip_of_the_datapath() {
    // vm1 reaches 10.0.0.100:80, DNATed back to itself: a hairpin when 10.0.0.100:80 is a VIP
    // of the switch, not when the program knows no such VIP (but knows another).
    let flows: &[Flow<'_>] = &[
        (Pipe::Ingress, 0, 200, "ip && !ct.trk", "ct_next;"),
        (
            Pipe::Ingress,
            1,
            120,
            "ct.new && ip4.dst == 10.0.0.100 && tcp.dst == 80",
            "ct_lb_mark(backends=10.0.0.1:8080);",
        ),
        (Pipe::Ingress, 1, 0, "1", "next;"),
        (
            Pipe::Ingress,
            2,
            100,
            "ip && ct.trk",
            "reg0[6] = chk_lb_hairpin(); next;",
        ),
        (
            Pipe::Ingress,
            3,
            10,
            "reg0[6] == 1",
            "outport = \"vm3\"; output;",
        ),
        (Pipe::Ingress, 3, 0, "1", "outport = \"vm2\"; output;"),
        (Pipe::Egress, 0, 0, "1", "output;"),
    ];
    let vip: IpAddr = Ipv4Addr::new(10, 0, 0, 100).into();
    let syn = tcp(M1, M2, IP1.into(), vip, 3333, 80, 2);
    for (vip_port, want) in [(80u16, Destination::Local(3)), (81, Destination::Local(2))] {
        let mut s = spec([&[], &[], &[]], flows);
        s.lb_vips.push(LbVipSpec {
            datapath: "ls".into(),
            ip: vip,
            port: vip_port,
            proto: 6,
        });
        let mut p = pipeline(&s);
        let mut ct = Conntrack::new(Config::default());
        for _ in 0..2 {
            assert_eq!(
                dests(&run_at(&mut p, &mut ct, 1, &syn, 1)),
                [want],
                "VIP port {vip_port}"
            );
        }
    }
}

#[test]
fn counters_name_the_right_flows_after_a_partial_recompile() {
    let two = |log_prio: u16| -> ProgramSpec {
        let mut s = spec(
            [&[], &[], &[]],
            &[
                (
                    Pipe::Ingress,
                    0,
                    log_prio,
                    "1",
                    "log(name=\"a\"); outport = \"vm2\"; output;",
                ),
                (Pipe::Egress, 0, 0, "1", "output;"),
            ],
        );
        let mut other = s.datapaths[0].clone();
        other.name = "ls2".into();
        other.tunnel_key = 6;
        for (i, p) in other.ports.iter_mut().enumerate() {
            p.name = format!("w{}", i + 1);
            p.location = PortLocation::Local(10 + i as u32);
        }
        other.flows = vec![
            FlowSpec::parse(
                Pipe::Ingress,
                0,
                7,
                "1",
                "set_meter(5); outport = \"w2\"; output;",
            )
            .expect("parses"),
            FlowSpec::parse(Pipe::Egress, 0, 0, "1", "output;").expect("parses"),
        ];
        s.datapaths.push(other);
        s
    };
    let a = Program::compile_strict(&two(10)).expect("compiles");
    let (b, errs) = a.recompile(&two(20), &["ls"]).expect("recompiles");
    assert!(errs.is_empty());
    assert!(b.datapath_shared_with(&a, "ls2"), "ls2 was reused");
    let mut p = Pipeline::new(b);
    let mut ct = Conntrack::new(Config::default());
    run_at(&mut p, &mut ct, 1, &udp4(M1, M2, IP1, IP2, 1, 2), 1);
    run_at(&mut p, &mut ct, 10, &udp4(M1, M2, IP1, IP2, 1, 2), 1);
    run_at(&mut p, &mut ct, 10, &udp4(M1, M2, IP1, IP2, 1, 3), 1);
    let hits = p.action_hits();
    let log = hits
        .iter()
        .find(|h| h.action == "log")
        .expect("log counted");
    assert_eq!(
        (log.datapath.as_str(), log.priority, log.hits),
        ("ls", 20, 1)
    );
    let meter = hits
        .iter()
        .find(|h| h.action == "set_meter")
        .expect("meter counted");
    assert_eq!(
        (meter.datapath.as_str(), meter.priority, meter.hits),
        ("ls2", 7, 2)
    );
}

fn run_ms(p: &mut Pipeline, ct: &mut Conntrack, from: u32, frame: &[u8], ms: u64) -> Vec<Out> {
    let mut out = Outputs::default();
    p.process(
        ct,
        Ingress::Local(from),
        frame,
        Duration::from_millis(ms),
        &mut out,
    )
    .expect("processed");
    collect(&out)
}

/// Meters (issue 21): `set_meter` caps a flood (cached replays included), `log(meter=...)`
/// limits log lines but not packets, and a flow's controller meter limits its punts.
#[test]
fn meters_cap_floods_logs_and_punts() {
    let flows: &[Flow<'_>] = &[
        (
            Pipe::Ingress,
            0,
            100,
            "udp.dst == 9",
            "set_meter(80); next;",
        ),
        (
            Pipe::Ingress,
            0,
            90,
            "tcp",
            "log(name=\"l\", severity=alert, verdict=drop, meter=\"lm\"); next;",
        ),
        (
            Pipe::Ingress,
            0,
            80,
            "ip4.dst == 10.0.0.99",
            "icmp4 { eth.dst <-> eth.src; ip4.dst <-> ip4.src; outport = inport; flags.loopback = 1; output; };",
        ),
        (Pipe::Ingress, 0, 0, "1", "next;"),
        (Pipe::Ingress, 1, 0, "1", "outport = \"vm2\"; output;"),
        (Pipe::Egress, 0, 0, "1", "output;"),
    ];
    let s = spec([&[], &[], &[]], flows);
    let mut p = pipeline(&s);
    let icmp_flow = s.datapaths[0]
        .flows
        .iter()
        .find(|f| f.priority == 80)
        .map(|f| f.id.clone())
        .expect("the icmp4 flow");
    p.set_meters(
        vec![
            hf_pipeline::MeterSpec {
                name: "lm".into(),
                pktps: true,
                bands: vec![(2, 1)],
            },
            hf_pipeline::MeterSpec {
                name: "copp".into(),
                pktps: true,
                bands: vec![(5, 5)],
            },
        ],
        vec![(icmp_flow, "copp".into())],
    );
    let mut ct = Conntrack::new(Config::default());
    // 80 kbps = 10,000 bytes/s; 1,000-byte datagrams at 1,000/s for 2 s: the 10-packet burst
    // and 10/s pass.
    let mut big = udp4(M1, M2, IP1, IP2, 5, 9);
    big.resize(1000, 0);
    let passed = (0..2000u64)
        .filter(|ms| !run_ms(&mut p, &mut ct, 1, &big, *ms).is_empty())
        .count();
    assert!((29..=31).contains(&passed), "set_meter passed {passed}");
    // Another port, same meter text: the same bucket (one meter per distinct set_meter).
    assert!(
        run_ms(&mut p, &mut ct, 3, &big, 1999).is_empty(),
        "the bucket is shared"
    );
    // log: every packet forwarded, 1 + 2/s log lines.
    let syn = tcp(M1, M2, IP1.into(), IP2.into(), 1, 2, 2);
    p.take_events();
    for ms in 0..1000u64 {
        assert_eq!(run_ms(&mut p, &mut ct, 1, &syn, 3000 + ms).len(), 1);
    }
    let logs = p
        .take_events()
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                Event::AclLog {
                    verdict: "drop",
                    severity: "alert",
                    ..
                }
            )
        })
        .count();
    assert!((2..=4).contains(&logs), "logged {logs}");
    // The controller meter: 5 + 5/s ICMP answers out of 1,000 asks.
    let ask = udp4(M1, M2, IP1, Ipv4Addr::new(10, 0, 0, 99), 1, 2);
    let answered = (0..1000u64)
        .filter(|ms| !run_ms(&mut p, &mut ct, 1, &ask, 5000 + ms).is_empty())
        .count();
    assert!((9..=11).contains(&answered), "answered {answered}");
    let stats = p.meters().stats();
    let copp = stats
        .iter()
        .find(|(n, _)| n == "copp")
        .expect("copp stats")
        .1;
    assert_eq!(copp.passed + copp.dropped, 1000);
    // Without the controller meter every ask is answered.
    p.set_meters(Vec::new(), Vec::new());
    let answered = (0..100u64)
        .filter(|ms| !run_ms(&mut p, &mut ct, 1, &ask, 7000 + ms).is_empty())
        .count();
    assert_eq!(answered, 100);
}
