//! Expiry under virtual time, limits and eviction, flushing, mark/label, export/import.

use super::*;

#[test]
fn udp_expires_after_30s_unreplied_and_120s_replied() {
    let mut ct = Conntrack::new(Config::default());
    let (a, b) = (v4(10, 0, 0, 1), v4(10, 0, 0, 2));
    let out = udp(a, 1000, b, 53);
    let back = udp(b, 53, a, 1000);
    let t0 = Duration::from_millis(5_500);
    ct.process(1, &out, t0, &commit());
    let t = Tuple::new(1, 17, a, 1000, b, 53);
    assert!(ct.get(&t, t0 + secs(29)).is_some());
    assert!(
        ct.get(&t, t0 + secs(30)).is_none(),
        "expired exactly at 30 s"
    );
    // A lookup after expiry sees a new connection even before the wheel collected it.
    let r = ct.process(1, &out, t0 + secs(31), &CtAction::lookup());
    assert_eq!(r.state, CtState::TRK | CtState::NEW);
    assert_eq!(ct.handle_timeout(t0 + secs(31)), 1);
    assert!(ct.is_empty());
    assert_eq!(ct.poll_timeout(), None);

    let t1 = t0 + secs(40);
    ct.process(1, &out, t1, &commit());
    ct.process(1, &back, t1 + secs(10), &CtAction::lookup());
    assert_eq!(ct.handle_timeout(t1 + secs(129)), 0);
    assert_eq!(ct.len(), 1);
    assert_eq!(ct.handle_timeout(t1 + secs(131)), 1);
    assert_eq!(ct.stats().expired, 2);
}

#[test]
fn timer_wheel_expires_each_entry_at_its_own_time_over_laps() {
    let mut ct = Conntrack::new(Config::default());
    // Connections with timeouts from 30 s (ICMP) to 5 days (established TCP), stepped through
    // virtual time in uneven steps larger and smaller than a wheel lap.
    let mut tcp = Tcp::new(v4(10, 0, 0, 1), 1, v4(10, 0, 0, 2), 2);
    let t0 = secs(1_000);
    for (from, flags) in [(0, SYN), (1, SYN | ACK), (0, ACK)] {
        run(&mut ct, 9, &tcp.seg(from, flags, 0), t0, &commit());
    }
    ct.process(
        9,
        &echo(v4(10, 0, 0, 1), v4(10, 0, 0, 3), 5, false),
        t0,
        &commit(),
    );
    ct.process(
        9,
        &udp(v4(10, 0, 0, 1), 7, v4(10, 0, 0, 3), 8),
        t0,
        &commit(),
    );
    let mut now = t0;
    let mut left = vec![];
    for step in [7, 20, 100, 4_000, 10_000, 200_000, 300_000] {
        now += secs(step);
        ct.handle_timeout(now);
        crate::fuzzing::check_invariants(&ct).expect("invariants");
        left.push(ct.len());
        assert!(ct.poll_timeout().is_none_or(|t| t > now));
    }
    // After 27 s nothing expired; after 127 s ICMP and UDP are gone; TCP lives 432,000 s.
    assert_eq!(left, vec![3, 3, 1, 1, 1, 1, 0]);
}

#[test]
fn refresh_moves_expiry_without_losing_the_entry() {
    let mut ct = Conntrack::new(Config::default());
    let (a, b) = (v4(10, 0, 0, 1), v4(10, 0, 0, 2));
    ct.process(1, &udp(a, 1, b, 2), secs(0), &commit());
    for s in (20..=600).step_by(20) {
        ct.handle_timeout(secs(s));
        ct.process(1, &udp(a, 1, b, 2), secs(s), &CtAction::lookup());
        assert_eq!(ct.len(), 1, "alive at {s} s");
    }
    assert_eq!(ct.handle_timeout(secs(630)), 1);
}

#[test]
fn global_cap_evicts_unestablished_first_and_never_established() {
    let mut ct = Conntrack::new(Config {
        max_connections: 100,
        ..Config::default()
    });
    let now = secs(1);
    let server = v4(192, 0, 2, 1);
    let mut est = vec![];
    for i in 0..60u16 {
        let mut t = Tcp::new(v4(10, 0, 1, 1), 10_000 + i, server, 80);
        for (from, flags) in [(0, SYN), (1, SYN | ACK), (0, ACK)] {
            ct.process(1, &parsed(&t.seg(from, flags, 0)), now, &commit());
        }
        est.push(t);
    }
    // A SYN flood: many more half-open connections than the table holds.
    for i in 0..1_000u32 {
        let mut t = Tcp::new(
            IpAddr::from(Ipv4Addr::from(0xc633_6400 + i)),
            999,
            server,
            80,
        );
        let r = ct.process(1, &parsed(&t.seg(0, SYN, 0)), now, &commit());
        assert_eq!(
            r.refused, None,
            "half-open connections are evicted for new ones"
        );
    }
    assert_eq!(ct.len(), 100);
    for t in &est {
        assert!(
            ct.get(&t.tuple(1), now).is_some(),
            "an established connection was evicted"
        );
    }
    assert_eq!(ct.stats().evicted, 960);
    crate::fuzzing::check_invariants(&ct).expect("invariants");
    // Fill the rest with established connections: then a new commit is refused.
    for i in 60..100u16 {
        let mut t = Tcp::new(v4(10, 0, 2, 1), 10_000 + i, server, 80);
        for (from, flags) in [(0, SYN), (1, SYN | ACK), (0, ACK)] {
            ct.process(1, &parsed(&t.seg(from, flags, 0)), now, &commit());
        }
    }
    let mut late = Tcp::new(v4(10, 0, 3, 1), 1, server, 80);
    let r = ct.process(1, &parsed(&late.seg(0, SYN, 0)), now, &commit());
    assert_eq!(r.refused, Some(CommitRefused::TableFull));
    for t in &est {
        assert!(ct.get(&t.tuple(1), now).is_some());
    }
}

#[test]
fn zone_limits_apply_per_zone() {
    let mut ct = Conntrack::new(Config::default());
    ct.set_zone_limit(7, Some(2));
    let now = secs(1);
    for p in 1..=3u16 {
        let r = ct.process(
            7,
            &udp(v4(10, 0, 0, 1), p, v4(10, 0, 0, 2), 9),
            now,
            &commit(),
        );
        assert_eq!(r.refused, (p == 3).then_some(CommitRefused::ZoneLimit));
        let r = ct.process(
            8,
            &udp(v4(10, 0, 0, 1), p, v4(10, 0, 0, 2), 9),
            now,
            &commit(),
        );
        assert_eq!(r.refused, None);
    }
    assert_eq!((ct.zone_count(7), ct.zone_count(8)), (2, 3));
    ct.set_zone_limit(7, None);
    let r = ct.process(
        7,
        &udp(v4(10, 0, 0, 1), 3, v4(10, 0, 0, 2), 9),
        now,
        &commit(),
    );
    assert_eq!(r.refused, None);
}

/// A table with connections in zones 0, 3 and 5, owners 1 and 2, and NAT in zone 5.
fn populated() -> (Conntrack, Vec<(u16, Parsed)>) {
    let mut ct = Conntrack::new(Config::default());
    let now = secs(1);
    let mut probes = vec![];
    for (zone, owner) in [(0u16, 9u32), (3, 1), (5, 2), (6, 1)] {
        for i in 0..5u16 {
            let mut t = Tcp::new(v4(10, 0, zone as u8, 1), 100 + i, v4(192, 0, 2, 1), 80);
            let act = CtAction {
                mark: Some(Masked::<u32>::all(u32::from(i))),
                ..CtAction::commit(Owner(owner))
            };
            let act = if zone == 5 {
                act.snat(NatRange::addr(v4(198, 51, 100, 1)))
            } else {
                act
            };
            for (from, flags) in [(0, SYN), (1, SYN | ACK), (0, ACK)] {
                let f = t.seg(from, flags, 0);
                ct.process(zone, &parsed(&f), now, &act);
            }
            probes.push((zone, parsed(&t.seg(0, ACK, 10))));
            probes.push((zone, parsed(&t.seg(1, ACK, 10))));
            let u = udp(v4(10, 1, zone as u8, 1), 100 + i, v4(8, 8, 8, 8), 53);
            ct.process(zone, &u, now, &act);
            probes.push((zone, u));
            let e = echo(v4(10, 2, zone as u8, 1), v4(8, 8, 8, 8), i, false);
            ct.process(zone, &e, now, &act);
            probes.push((
                zone,
                echo(v4(8, 8, 8, 8), v4(10, 2, zone as u8, 1), i, true),
            ));
        }
    }
    (ct, probes)
}

#[test]
fn flushing_any_zone_leaves_zone_0_untouched() {
    let (ct0, _) = populated();
    let now = secs(2);
    let zone0: Vec<_> = ct0.connections(now).filter(|c| c.orig.zone == 0).collect();
    assert_eq!(zone0.len(), 15);
    for z in [1u16, 3, 5, 6, 65535] {
        let (mut ct, _) = populated();
        let before = ct.zone_count(z);
        assert_eq!(ct.flush_zone(z), Ok(before as usize));
        assert_eq!(ct.zone_count(z), 0);
        let after: Vec<_> = ct.connections(now).filter(|c| c.orig.zone == 0).collect();
        assert_eq!(after, zone0, "flushing zone {z} touched zone 0");
        crate::fuzzing::check_invariants(&ct).expect("invariants");
    }
    let (mut ct, _) = populated();
    assert_eq!(ct.flush_zone(0), Err(FlushError::ZoneZero));
    assert_eq!(ct.zone_count(0), 15);
}

#[test]
fn flushing_by_owner_touches_nothing_else() {
    let (mut ct, _) = populated();
    let now = secs(2);
    let before: Vec<_> = ct.connections(now).collect();
    assert_eq!(ct.flush_owner(Owner(1)), Ok(30));
    let after: Vec<_> = ct.connections(now).collect();
    let kept: Vec<_> = before
        .iter()
        .copied()
        .filter(|c| c.owner != Owner(1))
        .collect();
    assert_eq!(after, kept);
    // Zone 0's owner-9 connections survive even a flush by owner 9.
    assert_eq!(ct.flush_owner(Owner(9)), Ok(0));
    assert_eq!(ct.zone_count(0), 15);
    assert_eq!(ct.flush_owner(Owner::NONE), Err(FlushError::NoOwner));
    crate::fuzzing::check_invariants(&ct).expect("invariants");
}

#[test]
fn mark_and_label_are_set_only_by_commit() {
    let mut ct = Conntrack::new(Config::default());
    let now = secs(1);
    let p = udp(v4(10, 0, 0, 1), 1, v4(10, 0, 0, 2), 2);
    let set = |commit, mark| CtAction {
        commit,
        mark: Some(Masked {
            value: mark,
            mask: 0xff,
        }),
        label: Some(Masked {
            value: 1 << 127,
            mask: 1 << 127,
        }),
        ..CtAction::default()
    };
    let r = ct.process(1, &p, now, &set(true, 0x12));
    assert_eq!((r.mark, r.label), (0x12, 1 << 127));
    let r = ct.process(1, &p, now, &set(false, 0x34));
    assert_eq!(r.mark, 0x12, "no commit, no mark change");
    let r = ct.process(1, &p, now, &set(true, 0x1234));
    assert_eq!(r.mark, 0x34, "masked update");
    let r = ct.process(
        1,
        &udp(v4(10, 0, 0, 2), 2, v4(10, 0, 0, 1), 1),
        now,
        &CtAction::lookup(),
    );
    assert_eq!(
        (r.mark, r.label),
        (0x34, 1 << 127),
        "the reply sees the connection's fields"
    );
}

#[test]
fn export_then_import_with_zone_remap_answers_every_lookup_the_same() {
    let (src, probes) = populated();
    let now = secs(2);
    let exp = src.export(&Selection::everything(), now);
    assert_eq!(exp.conns.len(), src.len());
    // Through serde, as the handoff does.
    let json = serde_json::to_string(&exp).expect("serialises");
    let back: CtExport = serde_json::from_str(&json).expect("deserialises");
    assert_eq!(back, exp);
    let remap = |z: u16| match z {
        3 => 30,
        5 => 50,
        z => z,
    };
    let mut dst = Conntrack::new(Config::default());
    // The other side's clock reads differently: expiry travels as time remaining.
    let later = secs(10_000);
    let rep = dst.import(&back, remap, later).expect("same version");
    assert_eq!(rep.imported, src.len());
    crate::fuzzing::check_invariants(&dst).expect("invariants");
    let act = CtAction::lookup().with_nat();
    for (zone, p) in &probes {
        let mut want = src.peek(*zone, p, now, &act);
        let got = dst.peek(remap(*zone), p, later, &act);
        want.zone = remap(*zone);
        if let Some(o) = want.orig.as_mut() {
            o.zone = remap(*zone);
        }
        assert_eq!(got, want, "zone {zone} probe {:?}", p.key);
    }
    let mut old = exp.clone();
    old.version = EXPORT_VERSION + 1;
    assert_eq!(
        dst.import(&old, |z| z, later),
        Err(ImportError::Version {
            found: EXPORT_VERSION + 1,
            expected: EXPORT_VERSION
        })
    );
}

#[test]
fn export_selects_by_zone_and_by_address() {
    let (ct, _) = populated();
    let now = secs(2);
    let only3 = ct.export(&Selection::default().zone(3), now);
    assert_eq!(only3.conns.len(), 15);
    assert!(only3.conns.iter().all(|c| c.orig.zone == 3));
    // The router's SNAT entries in zone 5 that involve one inside address.
    let sel = Selection::default().address(5, v4(10, 0, 5, 1));
    let by_addr = ct.export(&sel, now);
    assert_eq!(by_addr.conns.len(), 5);
    assert!(
        by_addr
            .conns
            .iter()
            .all(|c| c.snat && c.orig.src_ip() == v4(10, 0, 5, 1))
    );
    // The external address matches through the reply tuple.
    let sel = Selection::default().address(5, v4(198, 51, 100, 1));
    assert_eq!(ct.export(&sel, now).conns.len(), 15);
}

#[test]
fn import_replaces_older_state_for_the_same_tuples() {
    let (src, _) = populated();
    let now = secs(2);
    let exp = src.export(&Selection::default().zone(3), now);
    let (mut dst, _) = populated();
    let rep = dst.import(&exp, |z| z, now).expect("imports");
    assert_eq!((rep.imported, rep.replaced), (15, 15));
    assert_eq!(dst.len(), src.len());
    crate::fuzzing::check_invariants(&dst).expect("invariants");
}

#[test]
fn a_final_delta_selects_what_was_touched_since_the_pre_copy() {
    let mut ct = Conntrack::new(Config::default());
    let quiet = udp(v4(10, 0, 0, 1), 1, v4(8, 8, 8, 8), 53);
    let busy = udp(v4(10, 0, 0, 1), 2, v4(8, 8, 8, 8), 53);
    ct.process(4, &quiet, secs(10), &commit());
    ct.process(4, &busy, secs(10), &commit());
    let pre_copy = ct.export(&Selection::default().zone(4), secs(11));
    assert_eq!(pre_copy.conns.len(), 2);
    // After the pre-copy: one connection sees a packet, a new one starts.
    ct.process(4, &busy, secs(15), &CtAction::lookup());
    let late = udp(v4(10, 0, 0, 1), 3, v4(8, 8, 8, 8), 53);
    ct.process(4, &late, secs(16), &commit());
    let delta = ct.export(
        &Selection::default().zone(4).touched_since(secs(11)),
        secs(17),
    );
    let ports: Vec<u16> = delta.conns.iter().map(|c| c.orig.sport).collect();
    assert_eq!(ports, vec![2, 3]);
}

#[test]
fn a_migration_import_refreshes_its_own_connections_and_never_displaces_others() {
    // The source's table: the migrating connections (zone 3) after a pre-copy.
    let (src, _) = populated();
    let now = secs(2);
    let exp = src.export(&Selection::default().zone(3), now);
    // A destination that already holds the same connections (an earlier pre-copy) refreshes
    // them: the same original and reply tuples are the same connection.
    let (mut same, _) = populated();
    let rep = same
        .import_with(&exp, Some, now, ImportPolicy::SameConnection)
        .expect("imports");
    assert_eq!((rep.imported, rep.replaced, rep.collided), (15, 15, 0));
    // A destination where other connections hold the tuples (the reply tuples claimed by
    // different originals) keeps them: each imported one is refused as a collision.
    let mut other = Conntrack::new(Config::default());
    let mut moved = exp.clone();
    for c in &mut moved.conns {
        c.orig.sport = c.orig.sport.wrapping_add(1);
    }
    other.import(&moved, |z| z, now).expect("imports");
    let before = other.len();
    let rep = other
        .import_with(&exp, Some, now, ImportPolicy::SameConnection)
        .expect("imports");
    assert!(rep.collided > 0, "{rep:?}");
    assert_eq!(rep.replaced, 0, "{rep:?}");
    assert_eq!(other.len(), before + rep.imported);
    crate::fuzzing::check_invariants(&other).expect("invariants");
    // The plain import (a handoff) would have replaced them: the policy is what differs.
    let rep = other.import(&exp, |z| z, now).expect("imports");
    assert!(rep.replaced > 0, "{rep:?}");
    // A zone the destination does not know skips the connection.
    let mut d = Conntrack::new(Config::default());
    let rep = d
        .import_with(&exp, |_| None, now, ImportPolicy::SameConnection)
        .expect("imports");
    assert_eq!((rep.imported, rep.malformed), (0, 15));
}

#[test]
fn remove_connection_takes_out_one_connection_by_either_tuple() {
    let (mut ct, _) = populated();
    let now = secs(2);
    let all = ct.export(&Selection::everything(), now);
    let n = ct.len();
    let c = all.conns[0];
    assert!(ct.remove_connection(&c.reply));
    assert_eq!(ct.len(), n - 1);
    assert!(ct.get(&c.orig, now).is_none());
    assert!(!ct.remove_connection(&c.orig));
    crate::fuzzing::check_invariants(&ct).expect("invariants");
}
