//! TCP state transitions: handshake, data, FIN, RST, out-of-window, liberal mode, pickup, reopen.

use super::*;

const EST: CtState = CtState::EST;
const NEW: CtState = CtState::NEW;
const RPL: CtState = CtState::RPL;
const INV: CtState = CtState::INV;
const TRK: CtState = CtState::TRK;

fn state_of(ct: &Conntrack, t: &Tcp, now: Duration) -> Option<TcpState> {
    ct.get(&t.tuple(1), now)
        .and_then(|c| c.tcp)
        .map(|x| x.state)
}

/// Opens a connection a→b in zone 1 and returns it in ESTABLISHED.
fn established(ct: &mut Conntrack) -> Tcp {
    let mut t = Tcp::new(v4(10, 0, 0, 1), 40000, v4(192, 0, 2, 1), 80);
    let now = secs(1);
    assert_eq!(
        run(ct, 1, &t.seg(0, SYN, 0), now, &commit()).state,
        TRK | NEW
    );
    assert_eq!(
        run(ct, 1, &t.seg(1, SYN | ACK, 0), now, &commit()).state,
        TRK | EST | RPL
    );
    assert_eq!(
        run(ct, 1, &t.seg(0, ACK, 0), now, &commit()).state,
        TRK | EST
    );
    assert_eq!(state_of(ct, &t, now), Some(TcpState::Established));
    t
}

#[test]
fn handshake_goes_syn_sent_syn_recv_established() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v4(10, 0, 0, 1), 40000, v4(192, 0, 2, 1), 80);
    let now = secs(1);
    let syn = t.seg(0, SYN, 0);
    // ct_next without commit: new, and nothing is created.
    assert_eq!(
        run(&mut ct, 1, &syn, now, &CtAction::lookup()).state,
        TRK | NEW
    );
    assert!(ct.is_empty());
    assert_eq!(run(&mut ct, 1, &syn, now, &commit()).state, TRK | NEW);
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::SynSent));
    // A retransmitted SYN is still new (no reply seen yet).
    assert_eq!(
        run(&mut ct, 1, &syn, now, &CtAction::lookup()).state,
        TRK | NEW
    );
    let synack = t.seg(1, SYN | ACK, 0);
    assert_eq!(
        run(&mut ct, 1, &synack, now, &CtAction::lookup()).state,
        TRK | EST | RPL
    );
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::SynRecv));
    assert_eq!(
        run(&mut ct, 1, &t.seg(0, ACK, 0), now, &CtAction::lookup()).state,
        TRK | EST
    );
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::Established));
    let c = ct.get(&t.tuple(1), now).expect("tracked");
    assert!(c.assured && c.seen_reply);
}

#[test]
fn data_keeps_established_and_refreshes_the_timeout() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = established(&mut ct);
    for i in 0..10 {
        let now = secs(100 * (i + 1));
        let from = (i % 2) as usize;
        let r = run(
            &mut ct,
            1,
            &t.seg(from, ACK, 1000),
            now,
            &CtAction::lookup(),
        );
        assert!(r.state.contains(TRK | EST), "segment {i}: {:?}", r.state);
        assert_eq!(r.state.contains(RPL), from == 1);
        let c = ct.get(&t.tuple(1), now).expect("tracked");
        assert_eq!(c.expires_in_ms, 432_000_000);
    }
    assert_eq!(state_of(&ct, &t, secs(1000)), Some(TcpState::Established));
}

#[test]
fn fin_sequence_goes_through_close_states() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = established(&mut ct);
    let now = secs(2);
    let steps = [
        (0, FIN | ACK, TcpState::FinWait),
        (1, ACK, TcpState::CloseWait),
        (1, FIN | ACK, TcpState::LastAck),
        (0, ACK, TcpState::TimeWait),
    ];
    for (from, flags, want) in steps {
        let r = run(&mut ct, 1, &t.seg(from, flags, 0), now, &CtAction::lookup());
        assert!(!r.state.contains(INV), "{want:?}: {:?}", r.state);
        assert_eq!(state_of(&ct, &t, now), Some(want));
    }
    // TIME_WAIT lasts 120 s.
    assert_eq!(
        ct.get(&t.tuple(1), now).map(|c| c.expires_in_ms),
        Some(120_000)
    );
}

#[test]
fn rst_closes_and_out_of_window_rst_is_invalid() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = established(&mut ct);
    let now = secs(2);
    // An RST far outside the window is invalid and changes nothing.
    let mut bad = t;
    bad.seq[1] = bad.seq[1].wrapping_add(0x4000_0000);
    let r = run(
        &mut ct,
        1,
        &bad.seg(1, RST | ACK, 0),
        now,
        &CtAction::lookup(),
    );
    assert_eq!(r.state, TRK | INV);
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::Established));
    let r = run(
        &mut ct,
        1,
        &t.seg(1, RST | ACK, 0),
        now,
        &CtAction::lookup(),
    );
    assert!(!r.state.contains(INV));
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::Close));
    assert_eq!(
        ct.get(&t.tuple(1), now).map(|c| c.expires_in_ms),
        Some(10_000)
    );
}

#[test]
fn out_of_window_data_is_invalid_unless_liberal() {
    for liberal in [false, true] {
        let mut ct = Conntrack::new(Config {
            tcp_liberal: liberal,
            ..Config::default()
        });
        let mut t = established(&mut ct);
        let now = secs(2);
        let mut far = t;
        far.seq[0] = far.seq[0].wrapping_add(10_000_000);
        let r = run(&mut ct, 1, &far.seg(0, ACK, 100), now, &CtAction::lookup());
        assert_eq!(
            r.state.contains(INV),
            !liberal,
            "liberal={liberal}: {:?}",
            r.state
        );
        // An ACK for data never sent is out of window too.
        let mut ahead = t;
        ahead.seq[0] = ahead.seq[0].wrapping_add(5_000_000);
        let mut p = parsed(&t.seg(1, ACK, 0));
        p.tcp.ack = ahead.seq[0];
        let r = ct.process(1, &p, now, &CtAction::lookup());
        assert_eq!(r.state.contains(INV), !liberal);
        // In-window data is fine either way, and the state never moved.
        let r = run(&mut ct, 1, &t.seg(0, ACK, 100), now, &CtAction::lookup());
        assert!(!r.state.contains(INV));
        assert_eq!(state_of(&ct, &t, now), Some(TcpState::Established));
    }
}

#[test]
fn packets_that_cannot_start_a_connection_are_invalid() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v4(10, 0, 0, 1), 1, v4(10, 0, 0, 2), 2);
    for flags in [SYN | ACK, FIN, RST, 0, SYN | FIN, SYN | RST] {
        let r = run(&mut ct, 1, &t.seg(0, flags, 0), secs(1), &commit());
        assert_eq!(r.state, TRK | INV, "flags {flags:#x}");
    }
    assert!(ct.is_empty());
}

#[test]
fn mid_stream_pickup_is_established_and_liberal() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v4(10, 0, 0, 1), 1234, v4(10, 0, 0, 2), 22);
    let r = run(&mut ct, 1, &t.seg(0, ACK, 10), secs(1), &commit());
    assert_eq!(r.state, TRK | NEW);
    assert_eq!(state_of(&ct, &t, secs(1)), Some(TcpState::Established));
    let r = run(&mut ct, 1, &t.seg(1, ACK, 10), secs(1), &CtAction::lookup());
    assert_eq!(r.state, TRK | EST | RPL);
    // Windows are unknown after a pickup: a jump forward is accepted.
    t.seq[0] = t.seq[0].wrapping_add(3_000_000);
    let r = run(&mut ct, 1, &t.seg(0, ACK, 10), secs(1), &CtAction::lookup());
    assert!(!r.state.contains(INV));
}

#[test]
fn syn_after_time_wait_reopens() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = established(&mut ct);
    let now = secs(3);
    for (from, flags) in [(0, FIN | ACK), (1, FIN | ACK), (0, ACK)] {
        run(&mut ct, 1, &t.seg(from, flags, 0), now, &CtAction::lookup());
    }
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::TimeWait));
    t.seq = [77_000, 900_000];
    let r = run(&mut ct, 1, &t.seg(0, SYN, 0), now, &CtAction::lookup());
    assert_eq!(r.state, TRK | NEW, "a reopening SYN looks new");
    assert_eq!(
        state_of(&ct, &t, now),
        Some(TcpState::TimeWait),
        "lookup changes nothing"
    );
    run(&mut ct, 1, &t.seg(0, SYN, 0), now, &commit());
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::SynSent));
    assert_eq!(ct.len(), 1);
}

#[test]
fn simultaneous_open_and_ipv6() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v6(1), 5000, v6(2), 6000);
    let now = secs(1);
    run(&mut ct, 1, &t.seg(0, SYN, 0), now, &commit());
    let r = run(&mut ct, 1, &t.seg(1, SYN, 0), now, &CtAction::lookup());
    assert_eq!(r.state, TRK | EST | RPL);
    assert_eq!(state_of(&ct, &t, now), Some(TcpState::SynSent2));
}

#[test]
fn land_packets_are_invalid_and_create_nothing() {
    // Found by the conntrack fuzzer: a packet from an endpoint to itself has one tuple for both
    // directions.
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v4(10, 0, 0, 1), 7, v4(10, 0, 0, 1), 7);
    let r = run(&mut ct, 1, &t.seg(0, SYN, 0), secs(1), &commit());
    assert_eq!(r.state, CtState::TRK | CtState::INV);
    let r = ct.process(
        1,
        &udp(v4(10, 0, 0, 1), 9, v4(10, 0, 0, 1), 9),
        secs(1),
        &commit(),
    );
    assert_eq!(r.state, CtState::TRK | CtState::INV);
    assert!(ct.is_empty());
}
