//! Single behaviours on a one-switch program: generation-based cache invalidation, neighbour
//! learning, flooding, tunnels, TTL expiry, clone and packet generation.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, icmp_echo, tcp_frame};
use hf_conntrack::{Config, Conntrack, Owner};
use hf_expr::actions::Pipeline as Pipe;
use hf_pipeline::{
    DatapathKind, DatapathSpec, Destination, FlowSpec, GroupSpec, Ingress, Outputs, Pipeline,
    PortLocation, PortSpec, Program, ProgramSpec,
};
use hf_wire::{EthAddr, parse, tcp_flags};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// One switch: vm1 (local 1), vm2 (local 2), far (remote chassis 7), group `_MC_flood` of all.
/// `ingress` are (table, priority, match, actions) of the ingress pipeline; the egress pipeline
/// outputs.
fn program(ingress: &[(u8, u16, &str, &str)]) -> Program {
    let port = |name: &str, key, location| PortSpec {
        name: name.into(),
        key,
        location,
        zone: key as u16,
        ..PortSpec::default()
    };
    let mut flows: Vec<FlowSpec> = ingress
        .iter()
        .map(|&(t, p, m, a)| FlowSpec::parse(Pipe::Ingress, t, p, m, a).expect("flow parses"))
        .collect();
    flows.push(FlowSpec::parse(Pipe::Egress, 0, 0, "1", "output;").expect("egress"));
    Program::compile_strict(&ProgramSpec {
        datapaths: vec![DatapathSpec {
            name: "ls".into(),
            tunnel_key: 5,
            kind: DatapathKind::Switch,
            ports: vec![
                port("vm1", 1, PortLocation::Local(1)),
                port("vm2", 2, PortLocation::Local(2)),
                port("far", 3, PortLocation::Remote { chassis: 7 }),
            ],
            groups: vec![GroupSpec {
                name: "_MC_flood".into(),
                key: 32768,
                members: vec!["vm1".into(), "vm2".into(), "far".into()],
            }],
            flows,
        }],
        neighbours: Vec::new(),
        sets: hf_expr::Sets::default(),
        owner: Owner(1),
        ..ProgramSpec::default()
    })
    .expect("program compiles")
}

fn syn() -> Vec<u8> {
    tcp_frame(&Seg::new(
        (IpAddr::V4(A), 1000),
        (IpAddr::V4(B), 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    ))
}

fn run(
    p: &mut Pipeline,
    ct: &mut Conntrack,
    from: Ingress,
    f: &[u8],
) -> Vec<(Destination, Vec<u8>)> {
    let mut out = Outputs::default();
    p.process(ct, from, f, Duration::from_secs(1), &mut out)
        .expect("processed");
    out.iter().map(|(d, b)| (d, b.to_vec())).collect()
}

fn dests(v: &[(Destination, Vec<u8>)]) -> Vec<Destination> {
    v.iter().map(|(d, _)| *d).collect()
}

#[test]
fn a_new_program_invalidates_cached_walks() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[(0, 0, "1", "outport = \"vm2\"; output;")]));
    let g0 = p.generation();
    for _ in 0..2 {
        assert_eq!(
            dests(&run(&mut p, &mut ct, Ingress::Local(1), &syn())),
            [Destination::Local(2)]
        );
    }
    assert_eq!(p.cache_len(), 1);
    p.set_program(program(&[(0, 0, "1", "outport = \"far\"; output;")]));
    assert!(p.generation() > g0);
    let out = run(&mut p, &mut ct, Ingress::Local(1), &syn());
    assert_eq!(
        dests(&out),
        [Destination::Tunnel {
            chassis: 7,
            datapath: 5,
            inport: 1,
            outport: 3
        }],
        "the old program's cached walk was not used"
    );
}

#[test]
fn put_arp_learns_and_bumps_the_generation() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[
        (0, 100, "arp", "put_arp(inport, arp.spa, arp.sha);"),
        (
            0,
            50,
            "ip4",
            "get_arp(inport, ip4.src); outport = \"vm2\"; output;",
        ),
    ]));
    let mut arp = Vec::new();
    let sha = EthAddr([2, 0, 0, 0, 0, 0x11]);
    hf_wire::reply::arp_request(&mut arp, sha, A, B);
    // Before learning, get_arp finds nothing and writes 00:00:00:00:00:00.
    let out = run(&mut p, &mut ct, Ingress::Local(1), &syn());
    assert_eq!(&out[0].1[0..6], &[0; 6]);
    let g0 = p.generation();
    assert!(run(&mut p, &mut ct, Ingress::Local(1), &arp).is_empty());
    assert_eq!(p.neighbour(5, 1, A.into()), Some(sha.0));
    assert_eq!(p.generation(), g0 + 1);
    // Learning the same binding again changes nothing.
    run(&mut p, &mut ct, Ingress::Local(1), &arp);
    assert_eq!(p.generation(), g0 + 1);
    // The cached walk of the IP packet is not reused with the old (empty) binding.
    let out = run(&mut p, &mut ct, Ingress::Local(1), &syn());
    assert_eq!(&out[0].1[0..6], &sha.0);
}

/// A decision on `lookup_arp`'s result depends on the neighbour table, which no field of the
/// segment's key describes: once `put_arp` learns the binding (and bumps the generation), the
/// walk cached while the lookup failed must never be replayed. (Ignoring the generation in the
/// cache's lookup makes this fail; `put_arp_learns_and_bumps_the_generation` does not see it,
/// because a replay reruns `get_arp` itself.)
#[test]
fn a_learned_binding_is_not_answered_from_a_stale_cached_walk() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[
        (0, 100, "arp", "put_arp(inport, arp.spa, arp.sha);"),
        (
            0,
            50,
            "ip4",
            "reg0[0] = lookup_arp(inport, ip4.src, eth.src); next;",
        ),
        (1, 100, "reg0[0] == 1", "outport = \"vm2\"; output;"),
        (1, 0, "1", "drop;"),
    ]));
    let ip = syn();
    let mut out = Outputs::default();
    for round in 0..2 {
        let r = p
            .process(
                &mut ct,
                Ingress::Local(1),
                &ip,
                Duration::from_secs(1),
                &mut out,
            )
            .expect("processed");
        assert!(out.is_empty(), "round {round}: no binding yet: dropped");
        assert_eq!(
            r.cache_hits, round,
            "round {round}: the second run is cached"
        );
    }
    let mut arp = Vec::new();
    let sha = EthAddr(ip[6..12].try_into().expect("6 bytes"));
    hf_wire::reply::arp_request(&mut arp, sha, A, B);
    assert!(run(&mut p, &mut ct, Ingress::Local(1), &arp).is_empty());
    assert_eq!(p.neighbour(5, 1, A.into()), Some(sha.0));
    assert_eq!(
        dests(&run(&mut p, &mut ct, Ingress::Local(1), &ip)),
        [Destination::Local(2)],
        "the walk cached before the binding was learned was replayed"
    );
}

#[test]
fn flood_skips_the_input_port_and_tunnels_to_remote_members() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[(0, 0, "1", "outport = \"_MC_flood\"; output;")]));
    for _ in 0..2 {
        let out = run(&mut p, &mut ct, Ingress::Local(1), &syn());
        // One copy per remote chassis, addressed to the group (the receiving chassis delivers
        // it to its own members), then the local members.
        assert_eq!(
            dests(&out),
            [
                Destination::Tunnel {
                    chassis: 7,
                    datapath: 5,
                    inport: 1,
                    outport: 32768
                },
                Destination::Local(2),
            ]
        );
        assert!(
            out.iter().all(|(_, f)| f == &syn()),
            "floods are unmodified copies"
        );
    }
}

#[test]
fn ttl_expiry_drops_and_decrement_updates_the_checksum() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[(
        0,
        0,
        "ip4",
        "ip.ttl--; outport = \"vm2\"; output;",
    )]));
    let out = run(&mut p, &mut ct, Ingress::Local(1), &syn());
    let q = parse(&out[0].1, 0, 0).expect("parses");
    assert_eq!(q.key.ip_ttl, 63);
    assert!(hf_wire::checksums_valid(&out[0].1, &q));
    let mut low = syn();
    low[22] = 1;
    assert!(run(&mut p, &mut ct, Ingress::Local(1), &low).is_empty());
    // Cached walks keep the TTL decision: the TTL-64 packet still passes afterwards.
    assert_eq!(run(&mut p, &mut ct, Ingress::Local(1), &syn()).len(), 1);
}

#[test]
fn clone_and_icmp_echo_reply_generation() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[
        (
            0,
            10,
            "icmp4 && icmp4.type == 8",
            "clone { outport = \"vm2\"; output; }; eth.dst <-> eth.src; ip4.dst <-> ip4.src; icmp4.type = 0; outport = inport; flags.loopback = 1; output;",
        ),
        (0, 0, "1", "drop;"),
    ]));
    let ping = icmp_echo(IpAddr::V4(A), IpAddr::V4(B), 7, false);
    for _ in 0..2 {
        let out = run(&mut p, &mut ct, Ingress::Local(1), &ping);
        assert_eq!(dests(&out), [Destination::Local(2), Destination::Local(1)]);
        assert_eq!(out[0].1, ping, "the clone saw the original packet");
        let r = parse(&out[1].1, 0, 0).expect("reply parses");
        assert_eq!((r.key.ip4_src, r.key.ip4_dst, r.key.icmp_type), (B, A, 0));
        assert!(hf_wire::checksums_valid(&out[1].1, &r));
        assert_eq!(out[1].1, {
            let mut want = Vec::new();
            let req = parse(&ping, 0, 0).expect("request");
            hf_wire::reply::echo_reply(&mut want, &ping, &req).expect("builder");
            // The builder keeps Ethernet addresses as the request had them; the flow swapped them.
            want[0..6].copy_from_slice(&ping[6..12]);
            want[6..12].copy_from_slice(&ping[0..6]);
            want
        });
    }
}

#[test]
fn tcp_reset_is_generated_for_a_rejected_segment() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[(
        0,
        10,
        "tcp",
        // northd's form: OVN builds the reset with the segment's own addresses (ports
        // swapped) and the flow swaps the addresses.
        "tcp_reset { eth.dst <-> eth.src; ip4.dst <-> ip4.src; outport = inport; flags.loopback = 1; output; };",
    )]));
    let out = run(&mut p, &mut ct, Ingress::Local(1), &syn());
    assert_eq!(dests(&out), [Destination::Local(1)]);
    let r = parse(&out[0].1, 0, 0).expect("reset parses");
    assert_eq!(r.key.tcp_flags & tcp_flags::RST, tcp_flags::RST);
    assert_eq!((r.key.ip4_src, r.key.ip4_dst), (B, A));
    // Ports swapped and TTL 63, as pinctrl_handle_tcp_reset does.
    assert_eq!((r.key.tp_src, r.key.tp_dst, r.key.ip_ttl), (80, 1000, 63));
    assert!(hf_wire::checksums_valid(&out[0].1, &r));
}

#[test]
fn unknown_ports_and_datapaths_are_errors() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[(0, 0, "1", "drop;")]));
    let mut out = Outputs::default();
    let now = Duration::from_secs(1);
    assert!(
        p.process(&mut ct, Ingress::Local(99), &syn(), now, &mut out)
            .is_err()
    );
    let t = Ingress::Tunnel {
        datapath: 6,
        inport: 1,
        outport: 2,
    };
    assert!(p.process(&mut ct, t, &syn(), now, &mut out).is_err());
    assert!(
        p.process(&mut ct, Ingress::Local(1), &[1, 2, 3], now, &mut out)
            .is_err()
    );
}

#[test]
fn output_to_the_input_port_needs_flags_loopback() {
    let mut ct = Conntrack::new(Config::default());
    let mut p = Pipeline::new(program(&[
        (0, 10, "tcp.dst == 80", "outport = inport; output;"),
        (0, 5, "tcp", "outport = inport; flags.loopback = 1; output;"),
    ]));
    assert!(run(&mut p, &mut ct, Ingress::Local(1), &syn()).is_empty());
    let other = tcp_frame(&Seg::new(
        (IpAddr::V4(A), 1000),
        (IpAddr::V4(B), 81),
        tcp_flags::SYN,
        (1, 0),
        0,
    ));
    assert_eq!(
        dests(&run(&mut p, &mut ct, Ingress::Local(1), &other)),
        [Destination::Local(1)]
    );
    assert_eq!(run(&mut p, &mut ct, Ingress::Local(1), &other)[0].1, other);
}

/// A continuation after conntrack is first tried in the entry the same op's continuation was
/// last found in, and that entry is checked, not trusted: a committed connection's packets
/// (`ct_mark == 1` after conntrack) point the hint at their continuation, and the next
/// connection's SYN (same first segment, `ct_mark == 0` after conntrack) must still be committed
/// and delivered to vm2 rather than replay the committed path to the tunnel. (Replaying the
/// hinted entry without comparing its masked values makes this fail.)
#[test]
fn a_continuation_hint_is_checked_against_the_state_after_conntrack() {
    let mut p = Pipeline::new(program(&[
        (0, 100, "ip", "ct_next;"),
        (1, 100, "ct_mark == 1", "outport = \"far\"; output;"),
        (
            1,
            90,
            "ct.new",
            "ct_commit { ct_mark = 1; }; outport = \"vm2\"; output;",
        ),
        (1, 0, "1", "drop;"),
    ]));
    let mut ct = Conntrack::new(Config::default());
    let syn = |sport: u16| {
        tcp_frame(&Seg::new(
            (IpAddr::V4(A), sport),
            (IpAddr::V4(B), 80),
            tcp_flags::SYN,
            (1, 0),
            0,
        ))
    };
    let far = Destination::Tunnel {
        chassis: 7,
        datapath: 5,
        inport: 1,
        outport: 3,
    };
    let vm2 = Destination::Local(2);
    // Connection 1: its SYN is committed and goes to vm2; retransmissions find the mark and go
    // to the tunnel (walked, then looked up: the hint is set).
    let d = dests(&run(&mut p, &mut ct, Ingress::Local(1), &syn(1000)));
    assert_eq!(d, vec![vm2]);
    for _ in 0..2 {
        let d = dests(&run(&mut p, &mut ct, Ingress::Local(1), &syn(1000)));
        assert_eq!(d, vec![far]);
    }
    // The next retransmission's segments come through the hints (the first segment's through
    // its resume point's, the continuation's through the op's): no hashed lookup.
    let s0 = p.cache_stats();
    let d = dests(&run(&mut p, &mut ct, Ingress::Local(1), &syn(1000)));
    assert_eq!(d, vec![far]);
    let s1 = p.cache_stats();
    assert_eq!(
        (
            s1.lookups - s0.lookups,
            s1.first_hinted - s0.first_hinted,
            s1.chained - s0.chained
        ),
        (0, 1, 1)
    );
    // Connection 2's SYN: same first segment, and the hint names connection 1's continuation.
    let d = dests(&run(&mut p, &mut ct, Ingress::Local(1), &syn(2000)));
    assert_eq!(d, vec![vm2], "the SYN took the committed connection's path");
    assert_eq!(ct.len(), 2, "the SYN was not committed");
    let s2 = p.cache_stats();
    assert_eq!(
        s2.chained, s1.chained,
        "a hint that does not match is not used"
    );
    assert_eq!(s2.lookups - s1.lookups, 1, "the continuation was looked up");
    // Connection 1 still goes to the tunnel (the hint moved to the other entry).
    let d = dests(&run(&mut p, &mut ct, Ingress::Local(1), &syn(1000)));
    assert_eq!(d, vec![far]);
}
