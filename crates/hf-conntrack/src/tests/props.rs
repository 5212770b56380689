//! Property tests: random packet sequences never panic, `peek` always predicts `process`, and
//! the table's invariants hold after every step.

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
struct Step {
    flow: usize,
    from: usize,
    flags: u16,
    seq_jump: u32,
    len: usize,
    action: u8,
    advance_s: u64,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0usize..4,
        0usize..2,
        prop::sample::select(vec![
            SYN,
            SYN | ACK,
            ACK,
            FIN | ACK,
            RST,
            RST | ACK,
            ACK | 0x08,
            0,
        ]),
        prop_oneof![Just(0u32), 1u32..100, Just(0x8000_0000)],
        0usize..1500,
        0u8..5,
        prop_oneof![Just(0u64), 1u64..200, Just(500_000)],
    )
        .prop_map(
            |(flow, from, flags, seq_jump, len, action, advance_s)| Step {
                flow,
                from,
                flags,
                seq_jump,
                len,
                action,
                advance_s,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_tcp_sequences_keep_the_table_consistent(
        steps in prop::collection::vec(step(), 1..60),
        liberal in any::<bool>(),
    ) {
        let mut ct = Conntrack::new(Config { max_connections: 3, tcp_liberal: liberal, ..Config::default() });
        let mut flows: Vec<Tcp> = (0..4u16)
            .map(|i| Tcp::new(v4(10, 0, 0, 1), 1000 + i, v4(10, 0, 0, 2), 80))
            .collect();
        let mut now = secs(1);
        for s in steps {
            now += secs(s.advance_s);
            let f = &mut flows[s.flow];
            f.seq[s.from] = f.seq[s.from].wrapping_add(s.seq_jump);
            let frame = f.seg(s.from, s.flags, s.len);
            let act = match s.action {
                0 => CtAction::lookup(),
                1 => commit(),
                2 => commit().snat(NatRange::addr(v4(198, 51, 100, 1))),
                3 => CtAction::lookup().with_nat(),
                _ => commit().dnat(NatRange::addr_port(v4(10, 0, 0, 3), 8080)),
            };
            let p = parsed(&frame);
            let predicted = ct.peek(0, &p, now, &act);
            let got = ct.process(0, &p, now, &act);
            prop_assert_eq!(predicted, got);
            prop_assert!(got.state.contains(CtState::TRK));
            // new, est and inv exclude each other.
            let n = [CtState::NEW, CtState::EST, CtState::INV, CtState::REL]
                .iter()
                .filter(|b| got.state.contains(**b))
                .count();
            prop_assert_eq!(n, 1, "state {:?}", got.state);
            prop_assert!(ct.len() <= 3);
            if let Err(e) = crate::fuzzing::check_invariants(&ct) {
                return Err(TestCaseError::fail(e));
            }
            if s.advance_s > 0 {
                ct.handle_timeout(now);
            }
        }
    }

    #[test]
    fn arbitrary_operation_streams_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        crate::fuzzing::conntrack(&data);
    }
}

/// Writes the seed corpus for the `conntrack` fuzz target: `cargo test -p hf-conntrack --
/// --ignored write_seed_corpus`.
#[test]
#[ignore = "writes fuzz/corpus/conntrack; run by hand when the seeds change"]
fn write_seed_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/conntrack");
    std::fs::create_dir_all(&dir).expect("mkdir");
    // op byte: bits 0-1 zone, bits 2-4 kind (0 lookup, 1 commit, 2 nat, 3 snat, 4 dnat,
    // 5 timeout, 6 flush, 7 export/limit), bits 5-7 time step; then a length byte and a frame.
    let rec = |op: u8, frame: &[u8]| {
        let mut v = vec![op, frame.len().min(255) as u8];
        v.extend_from_slice(&frame[..frame.len().min(255)]);
        v
    };
    let mut t = Tcp::new(v4(10, 0, 0, 1), 40000, v4(192, 0, 2, 1), 80);
    let mut seeds: Vec<Vec<u8>> = vec![];
    let mut hs = vec![];
    hs.extend(rec(1 << 2 | 1, &t.seg(0, SYN, 0)));
    hs.extend(rec(1, &t.seg(1, SYN | ACK, 0)));
    hs.extend(rec(1, &t.seg(0, ACK, 0)));
    hs.extend(rec(1, &t.seg(0, ACK, 100)));
    hs.extend(rec(7 << 2, &[]));
    hs.extend(rec(1, &t.seg(0, FIN | ACK, 0)));
    hs.extend(rec(1, &t.seg(1, FIN | ACK, 0)));
    hs.extend(rec(1 | 1 << 5, &t.seg(0, ACK, 0)));
    hs.extend(rec(5 << 2 | 7 << 5, &[]));
    seeds.push(hs);
    let mut nat = vec![];
    let u = udp_frame(v4(10, 0, 0, 1), 5, v4(8, 8, 8, 8), 53);
    nat.extend(rec(3 << 2 | 2, &u));
    nat.extend(rec(
        3 << 2 | 2,
        &udp_frame(v4(10, 0, 0, 2), 5, v4(8, 8, 8, 8), 53),
    ));
    nat.extend(rec(
        2 << 2 | 2,
        &udp_frame(v4(8, 8, 8, 8), 53, v4(198, 51, 100, 1), 1024),
    ));
    nat.extend(rec(
        4 << 2 | 2,
        &icmp_echo(v4(10, 0, 0, 1), v4(8, 8, 8, 8), 9, false),
    ));
    nat.extend(rec(
        2 << 2 | 2,
        &icmp_echo(v4(8, 8, 8, 8), v4(10, 9, 9, 9), 9, true),
    ));
    let pu = parsed(&u);
    let mut err = vec![];
    hf_wire::reply::icmp4_error(&mut err, &u, &pu, Ipv4Addr::new(8, 8, 8, 8), 3, 3, 0).expect("ip");
    nat.extend(rec(2 << 2 | 2, &err));
    nat.extend(rec(6 << 2 | 2, &[]));
    nat.extend(rec(7 << 2 | 3, &[1]));
    seeds.push(nat);
    let mut v6s = vec![];
    let mut t6 = Tcp::new(v6(1), 1, v6(2), 2);
    v6s.extend(rec(1 << 2, &t6.seg(0, SYN, 0)));
    v6s.extend(rec(1 << 2, &t6.seg(1, SYN, 0)));
    v6s.extend(rec(1 << 2, &icmp_echo(v6(1), v6(2), 3, false)));
    v6s.extend(rec(0, &icmp_echo(v6(2), v6(1), 3, true)));
    v6s.extend(rec(6 << 2, &[]));
    seeds.push(v6s);
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), s).expect("write");
    }
}

/// The three kinds of first packet the NAT round trip uses, and the answer to each.
fn first_and_answer(
    kind: u8,
    (a, ap): (IpAddr, u16),
    (b, bp): (IpAddr, u16),
) -> (Vec<u8>, Vec<u8>) {
    match kind {
        0 => {
            let mut t = Tcp::new(a, ap, b, bp);
            let syn = t.seg(0, SYN, 0);
            (syn, t.seg(1, SYN | ACK, 0))
        }
        1 => (udp_frame(a, ap, b, bp), udp_frame(b, bp, a, ap)),
        _ => (icmp_echo(a, b, ap, false), icmp_echo(b, a, ap, true)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever NAT a connection gets, the first packet's rewrite keeps checksums valid, and the
    /// answer to the translated packet is translated back to exactly the original endpoints.
    #[test]
    fn nat_round_trip_restores_the_endpoints(
        kind in 0u8..3,
        inside in any::<u32>(), peer in any::<u32>(),
        ap in 1u16.., bp in 1u16..,
        nat in 0u8..3,
        ports in (1024u16..2048, 0u16..64),
        six in any::<bool>(),
    ) {
        let (a, b, ext, backend) = if six {
            let v6 = |x: u32| IpAddr::from(std::net::Ipv6Addr::from(0xfd00_u128 << 112 | u128::from(x)));
            (v6(inside), v6(peer), v6(0xfffe_0007), v6(0xfffe_0009))
        } else {
            (Ipv4Addr::from(inside).into(), Ipv4Addr::from(peer).into(), v4(198, 51, 100, 7), v4(10, 200, 0, 9))
        };
        prop_assume!(a != b && a != ext && b != ext && b != backend && a != backend);
        let snat = NatRange { addr_min: ext, addr_max: ext, port_min: ports.0, port_max: ports.0 + ports.1 };
        let act = match nat {
            0 => commit().snat(snat),
            1 => commit().dnat(NatRange::addr_port(backend, 8443)),
            _ => commit().dnat(NatRange::addr_port(backend, 8443)).snat(snat),
        };
        let mut ct = Conntrack::new(Config::default());
        let (first, _) = first_and_answer(kind, (a, ap), (b, bp));
        let mut f = first.clone();
        let mut p = parsed(&f);
        let r = ct.process(1, &p, secs(1), &act);
        prop_assert_eq!(r.refused, None);
        hf_wire::apply_nat(&mut f, &mut p, &r.rewrite).expect("applies");
        prop_assert!(hf_wire::checksums_valid(&f, &p));
        // The far side answers the packet it saw.
        let seen = (p.key.ip_src().expect("ip"), p.key.ip_dst().expect("ip"));
        let (sp, dp) = if kind == 2 { (p.icmp_id, p.icmp_id) } else { (p.key.tp_src, p.key.tp_dst) };
        let (_, answer) = first_and_answer(kind, (seen.0, sp), (seen.1, dp));
        let mut g = answer.clone();
        let mut q = parsed(&g);
        let r = ct.process(1, &q, secs(2), &CtAction::lookup().with_nat());
        prop_assert!(r.state.contains(CtState::EST | CtState::RPL), "{:?}", r.state);
        hf_wire::apply_nat(&mut g, &mut q, &r.rewrite).expect("applies");
        prop_assert!(hf_wire::checksums_valid(&g, &q));
        prop_assert_eq!((q.key.ip_src(), q.key.ip_dst()), (Some(b), Some(a)));
        if kind == 2 {
            prop_assert_eq!(q.icmp_id, ap);
        } else {
            prop_assert_eq!((q.key.tp_src, q.key.tp_dst), (bp, ap));
        }
    }
}

fn any_tuple() -> impl Strategy<Value = Tuple> {
    (
        0u16..3,
        prop::sample::select(vec![6u8, 17, 1]),
        0u8..4,
        0u8..4,
        0u16..3,
        0u16..3,
    )
        .prop_map(|(zone, proto, s, d, sp, dp)| {
            Tuple::new(zone, proto, v4(10, 0, 0, s), sp, v4(10, 0, 0, d), dp)
        })
}

fn any_peer() -> impl Strategy<Value = TcpPeer> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(|(end, maxend, maxwin, maxack, scale, flags)| TcpPeer {
            end,
            maxend,
            maxwin,
            maxack,
            scale,
            flags,
        })
}

fn any_conn() -> impl Strategy<Value = ConnState> {
    (
        any_tuple(),
        any_tuple(),
        any::<[bool; 4]>(),
        (any_peer(), any_peer(), 0usize..10),
        0u64..200_000,
    )
        .prop_map(|(orig, reply, f, (a, b, st), exp)| {
            let states = [
                TcpState::None,
                TcpState::SynSent,
                TcpState::SynRecv,
                TcpState::Established,
                TcpState::FinWait,
                TcpState::CloseWait,
                TcpState::LastAck,
                TcpState::TimeWait,
                TcpState::Close,
                TcpState::SynSent2,
            ];
            ConnState {
                orig,
                reply,
                mark: 1,
                label: 2,
                owner: Owner(3),
                expires_in_ms: exp,
                seen_reply: f[0],
                assured: f[1],
                snat: f[2],
                dnat: f[3],
                tcp: (orig.proto == 6).then_some(TcpExport {
                    state: states[st],
                    peers: [a, b],
                }),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Imports of arbitrary (possibly conflicting or inconsistent) connections never panic, keep
    /// the table consistent, and leave every tuple answering for at most one connection; packets
    /// then run against the imported state without panicking.
    #[test]
    fn arbitrary_imports_keep_the_table_consistent(
        conns in prop::collection::vec(any_conn(), 0..40),
        cap in 1usize..30,
    ) {
        let mut ct = Conntrack::new(Config { max_connections: cap, ..Config::default() });
        let data = CtExport { version: EXPORT_VERSION, conns: conns.clone() };
        let rep = ct.import(&data, |z| z, secs(1)).expect("same version");
        prop_assert_eq!(rep.imported + rep.malformed + rep.refused, conns.len());
        prop_assert!(ct.len() <= cap);
        if let Err(e) = crate::fuzzing::check_invariants(&ct) {
            return Err(TestCaseError::fail(e));
        }
        for c in &conns {
            let mut t = Tcp::new(c.orig.src_ip(), c.orig.sport, c.orig.dst_ip(), c.orig.dport);
            for (from, flags) in [(0, ACK), (1, ACK), (0, FIN | ACK), (1, RST)] {
                let p = parsed(&t.seg(from, flags, 5));
                let r = ct.process(c.orig.zone, &p, secs(2), &CtAction::lookup().with_nat());
                prop_assert!(r.state.contains(CtState::TRK));
            }
        }
        if let Err(e) = crate::fuzzing::check_invariants(&ct) {
            return Err(TestCaseError::fail(e));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The index's canonical form, computed without building the inverse, is the derived order's
    /// answer; and the hash is the same for both directions.
    #[test]
    fn le_inverse_is_the_derived_order(t in any_tuple(), same_addr in any::<bool>(), same_port in any::<bool>()) {
        let mut t = t;
        if same_addr {
            t.dst = t.src;
        }
        if same_port {
            t.dport = t.sport;
        }
        prop_assert_eq!(t.le_inverse(), t <= t.invert());
        let ct = Conntrack::new(Config::default());
        prop_assert_eq!(ct.hash(&t), ct.hash(&t.invert()));
    }
}
