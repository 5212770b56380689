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
