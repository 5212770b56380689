//! NAT: SNAT and DNAT both ways, related ICMP errors, port uniqueness at scale, exhaustion.

use std::collections::HashSet;

use hf_wire::{apply_nat, reply};

use super::*;

const EXT: [u8; 4] = [198, 51, 100, 1];

fn ext() -> IpAddr {
    v4(EXT[0], EXT[1], EXT[2], EXT[3])
}

/// Runs `frame` with `act`, applies the rewrite, and returns the result and the rewritten
/// packet's parse.
fn through(
    ct: &mut Conntrack,
    zone: u16,
    frame: &[u8],
    now: Duration,
    act: &CtAction,
) -> (CtResult, Parsed, Vec<u8>) {
    let mut f = frame.to_vec();
    let mut p = parsed(&f);
    let r = ct.process(zone, &p, now, act);
    apply_nat(&mut f, &mut p, &r.rewrite).expect("conntrack's rewrites apply");
    assert_eq!(parsed(&f).key, p.key, "rewrite and re-parse agree");
    crate::fuzzing::check_invariants(ct).expect("invariants");
    (r, p, f)
}

#[test]
fn snat_translates_both_directions() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v4(10, 0, 0, 5), 33000, v4(203, 0, 113, 9), 443);
    let now = secs(1);
    let act = commit().snat(NatRange::addr(ext()));
    let (r, p, _) = through(&mut ct, 7, &t.seg(0, SYN, 0), now, &act);
    assert_eq!(r.state, CtState::TRK | CtState::NEW | CtState::SNAT);
    assert_eq!(p.key.ip4_src, Ipv4Addr::from(EXT));
    assert_eq!(p.key.tp_src, 33000, "the source port is kept when free");
    // The reply comes back to the external address; plain `nat` undoes the translation.
    let mut back = t;
    back.a = ext();
    let (r, p, _) = through(
        &mut ct,
        7,
        &back.seg(1, SYN | ACK, 0),
        now,
        &CtAction::lookup().with_nat(),
    );
    assert_eq!(
        r.state,
        CtState::TRK | CtState::EST | CtState::RPL | CtState::DNAT
    );
    assert_eq!(p.key.ip4_dst, Ipv4Addr::new(10, 0, 0, 5));
    assert_eq!(p.key.tp_dst, 33000);
    t.seq = back.seq;
    let (r, p, _) = through(
        &mut ct,
        7,
        &t.seg(0, ACK, 0),
        now,
        &CtAction::lookup().with_nat(),
    );
    assert_eq!(r.state, CtState::TRK | CtState::EST | CtState::SNAT);
    assert_eq!(p.key.ip4_src, Ipv4Addr::from(EXT));
    // Without `nat` the connection is tracked but nothing is rewritten.
    let r = ct.process(7, &parsed(&t.seg(0, ACK, 0)), now, &CtAction::lookup());
    assert!(r.rewrite.is_empty());
    assert!(!r.state.contains(CtState::SNAT));
}

#[test]
fn dnat_to_a_backend_and_back() {
    let mut ct = Conntrack::new(Config::default());
    let vip = v4(172, 30, 0, 10);
    let backend = v4(10, 0, 1, 20);
    let client = v4(192, 0, 2, 50);
    let mut t = Tcp::new(client, 50000, vip, 80);
    let now = secs(1);
    let act = commit().dnat(NatRange::addr_port(backend, 8080));
    let (r, p, _) = through(&mut ct, 3, &t.seg(0, SYN, 0), now, &act);
    assert!(r.state.contains(CtState::DNAT));
    assert_eq!((IpAddr::from(p.key.ip4_dst), p.key.tp_dst), (backend, 8080));
    assert_eq!(
        r.orig.map(|o| (o.dst_ip(), o.dport)),
        Some((vip, 80)),
        "ct_nw_dst/ct_tp_dst"
    );
    let mut from_backend = t;
    from_backend.b = backend;
    from_backend.bp = 8080;
    let (r, p, _) = through(
        &mut ct,
        3,
        &from_backend.seg(1, SYN | ACK, 0),
        now,
        &CtAction::lookup().with_nat(),
    );
    assert_eq!(
        r.state,
        CtState::TRK | CtState::EST | CtState::RPL | CtState::SNAT
    );
    assert_eq!((IpAddr::from(p.key.ip4_src), p.key.tp_src), (vip, 80));
}

#[test]
fn snat_and_dnat_in_one_commit() {
    let mut ct = Conntrack::new(Config::default());
    let now = secs(1);
    let p = udp(v4(192, 0, 2, 1), 5000, v4(172, 30, 0, 1), 53);
    let act = commit()
        .dnat(NatRange::addr_port(v4(10, 0, 0, 53), 5353))
        .snat(NatRange::addr(v4(10, 0, 0, 1)));
    let r = ct.process(2, &p, now, &act);
    assert_eq!(
        r.state,
        CtState::TRK | CtState::NEW | CtState::SNAT | CtState::DNAT
    );
    assert_eq!(r.rewrite.src, Some(v4(10, 0, 0, 1)));
    assert_eq!(
        (r.rewrite.dst, r.rewrite.dport),
        (Some(v4(10, 0, 0, 53)), Some(5353))
    );
    let back = udp(
        v4(10, 0, 0, 53),
        5353,
        v4(10, 0, 0, 1),
        r.rewrite.sport.unwrap_or(5000),
    );
    let r = ct.process(2, &back, now, &CtAction::lookup().with_nat());
    assert!(r.state.contains(CtState::RPL | CtState::EST));
    assert_eq!(
        (r.rewrite.src, r.rewrite.sport),
        (Some(v4(172, 30, 0, 1)), Some(53))
    );
    assert_eq!(r.rewrite.dst, Some(v4(192, 0, 2, 1)));
}

#[test]
fn icmp_echo_snat_and_related_errors() {
    let mut ct = Conntrack::new(Config::default());
    let now = secs(1);
    let (inside, peer) = (v4(10, 0, 0, 5), v4(203, 0, 113, 9));
    let act = commit().snat(NatRange::addr(ext()));
    let r = ct.process(7, &echo(inside, peer, 0x77, false), now, &act);
    assert_eq!(r.rewrite.src, Some(ext()));
    let r = ct.process(
        7,
        &echo(peer, ext(), 0x77, true),
        now,
        &CtAction::lookup().with_nat(),
    );
    assert!(r.state.contains(CtState::EST | CtState::RPL));
    assert_eq!(r.rewrite.dst, Some(inside));
    // An unsolicited echo reply is invalid.
    let r = ct.process(7, &echo(peer, ext(), 0x78, true), now, &commit());
    assert_eq!(r.state, CtState::TRK | CtState::INV);

    // A TCP connection through SNAT, then a router on the way sends "unreachable" about the
    // translated packet back to the external address.
    let mut t = Tcp::new(inside, 41000, peer, 443);
    let (_, _, sent) = through(
        &mut ct,
        7,
        &t.seg(0, SYN, 0),
        now,
        &commit().snat(NatRange::addr(ext())),
    );
    let sent_p = parsed(&sent);
    let mut err = Vec::new();
    reply::icmp4_error(
        &mut err,
        &sent,
        &sent_p,
        Ipv4Addr::new(192, 0, 2, 254),
        3,
        1,
        0,
    )
    .expect("ip");
    // The error's own addresses: from the router to the packet's source (the external address).
    let (r, p, f) = through(&mut ct, 7, &err, now, &CtAction::lookup().with_nat());
    assert_eq!(
        r.state,
        CtState::TRK | CtState::REL | CtState::RPL | CtState::DNAT
    );
    assert_eq!(IpAddr::from(p.key.ip4_dst), inside);
    let inner = parsed(&f).inner.expect("quote");
    assert_eq!((inner.src, inner.tp_src), (inside, 41000));
    assert_eq!((inner.dst, inner.tp_dst), (peer, 443));
    // An error about a connection nobody tracks is invalid.
    let mut other = Tcp::new(v4(10, 0, 0, 6), 1, peer, 2);
    let f2 = other.seg(0, SYN, 0);
    let mut err2 = Vec::new();
    reply::icmp4_error(
        &mut err2,
        &f2,
        &parsed(&f2),
        Ipv4Addr::new(192, 0, 2, 254),
        3,
        1,
        0,
    )
    .expect("ip");
    assert_eq!(
        ct.process(7, &parsed(&err2), now, &CtAction::lookup())
            .state,
        CtState::TRK | CtState::INV
    );
}

#[test]
fn nat_ports_stay_unique_under_100k_concurrent_flows() {
    let mut ct = Conntrack::new(Config {
        max_connections: 200_000,
        ..Config::default()
    });
    let now = secs(1);
    let peer = v4(203, 0, 113, 9);
    // Two external addresses, the whole ephemeral range: 129,024 slots for one peer.
    let range = NatRange {
        addr_min: v4(198, 51, 100, 1),
        addr_max: v4(198, 51, 100, 2),
        port_min: 1024,
        port_max: 65535,
    };
    let mut base = udp(v4(10, 0, 0, 1), 1000, peer, 443);
    let mut seen = HashSet::new();
    for i in 0..100_000u32 {
        // 1,000 inside hosts with 100 flows each, most wanting the same source ports; zones 1
        // and 2 share the external range.
        base.key.ip4_src = Ipv4Addr::from(0x0a00_0000 + 1 + i / 100);
        base.key.tp_src = 20_000 + (i % 100) as u16;
        let zone = 1 + (i % 2) as u16;
        let r = ct.process(zone, &base, now, &CtAction::commit(Owner(1)).snat(range));
        assert_eq!(r.refused, None, "flow {i} refused");
        let ip = r.rewrite.src.unwrap_or(base.key.ip4_src.into());
        let port = r.rewrite.sport.unwrap_or(base.key.tp_src);
        assert!(
            seen.insert((ip, port)),
            "flow {i}: {ip}:{port} handed out twice"
        );
    }
    assert_eq!(ct.len(), 100_000);
    crate::fuzzing::check_invariants(&ct).expect("invariants");
    // Each external endpoint answers exactly one connection.
    for &(ip, port) in seen.iter().take(1000) {
        let t = Tuple::new(1, 17, peer, 443, ip, port);
        let in_1 = ct.get(&t, now).is_some();
        let in_2 = ct.get(&Tuple { zone: 2, ..t }, now).is_some();
        assert!(
            in_1 ^ in_2,
            "{ip}:{port} owned by {} zones",
            u8::from(in_1) + u8::from(in_2)
        );
    }
}

#[test]
fn nat_exhaustion_is_per_peer_and_refused_cleanly() {
    let mut ct = Conntrack::new(Config::default());
    let now = secs(1);
    let range = NatRange {
        addr_min: ext(),
        addr_max: ext(),
        port_min: 2000,
        port_max: 2001,
    };
    let act = commit().snat(range);
    for sport in [1, 2] {
        let r = ct.process(
            4,
            &udp(v4(10, 0, 0, 1), sport, v4(8, 8, 8, 8), 53),
            now,
            &act,
        );
        assert_eq!(r.refused, None);
    }
    let r = ct.process(4, &udp(v4(10, 0, 0, 1), 3, v4(8, 8, 8, 8), 53), now, &act);
    assert_eq!(r.refused, Some(CommitRefused::NatExhausted));
    assert_eq!(r.state, CtState::TRK | CtState::NEW);
    // Another peer has its own port space.
    let r = ct.process(4, &udp(v4(10, 0, 0, 1), 3, v4(8, 8, 4, 4), 53), now, &act);
    assert_eq!(r.refused, None);
    assert_eq!(ct.len(), 3);
    // A v6 range for a v4 packet is refused, not misapplied.
    let bad = commit().snat(NatRange::addr(v6(1)));
    let r = ct.process(4, &udp(v4(10, 0, 0, 9), 3, v4(8, 8, 4, 4), 53), now, &bad);
    assert_eq!(r.refused, Some(CommitRefused::NatRange));
}

/// r21 (found by the real-datapath oracle): a connection SNATed in one zone is committed again,
/// translated, in another zone (a gateway router's SNAT zone, then the destination port's
/// zone): the second commit is a connection of its own, and the reply is tracked in both.
#[test]
fn r21_a_snated_connection_commits_again_in_another_zone() {
    let mut ct = Conntrack::new(Config::default());
    let mut t = Tcp::new(v4(10, 0, 0, 11), 32891, v4(10, 1, 0, 12), 22);
    let now = secs(1);
    let act = commit().snat(NatRange::addr(ext()));
    let (_, _, snated) = through(&mut ct, 2, &t.seg(0, SYN, 0), now, &act);
    let (r, _, _) = through(&mut ct, 19, &snated, now, &commit());
    assert_eq!(r.refused, None, "the commit in zone 19 is refused");
    assert_eq!(r.state, CtState::TRK | CtState::NEW);
    let mut back = t;
    back.a = ext();
    let reply = back.seg(1, SYN | ACK, 0);
    let r = ct.process(19, &parsed(&reply), now, &CtAction::lookup());
    assert_eq!(r.state, CtState::TRK | CtState::EST | CtState::RPL);
}
