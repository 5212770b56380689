#![allow(clippy::unwrap_used)]

use super::*;

const S: Duration = Duration::from_secs(1);

/// An Ethernet + IPv4 frame carrying IGMP message `msg` (its checksum filled in).
fn igmp_frame(msg: &[u8]) -> Vec<u8> {
    let mut m = msg.to_vec();
    m[2] = 0;
    m[3] = 0;
    let c = hf_wire::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![
        0x01, 0x00, 0x5e, 0, 0, 0x16, 0x0a, 0, 0, 0, 0, 1, 0x08, 0x00,
    ];
    let len = (20 + m.len()) as u16;
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 10, 0, 0, 1, 224, 0, 0, 22,
    ];
    ip[2..4].copy_from_slice(&len.to_be_bytes());
    let c = hf_wire::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&m);
    f
}

/// An Ethernet + IPv6 (hop-by-hop router alert) frame carrying MLD message `msg` from `src`.
fn mld_frame(src: Ipv6Addr, msg: &[u8]) -> Vec<u8> {
    let dst = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);
    let mut m = msg.to_vec();
    m[2] = 0;
    m[3] = 0;
    let sum = hf_wire::pseudo_header_sum(IpAddr::V6(src), IpAddr::V6(dst), 58, m.len() as u32);
    let c = !hf_wire::sum_with(sum, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![0x33, 0x33, 0, 0, 0, 0x16, 0x0a, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((8 + m.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
    f.extend_from_slice(&m);
    f
}

fn v2_report(g: [u8; 4]) -> Vec<u8> {
    igmp_frame(&[0x16, 0, 0, 0, g[0], g[1], g[2], g[3]])
}

fn v2_leave(g: [u8; 4]) -> Vec<u8> {
    igmp_frame(&[0x17, 0, 0, 0, g[0], g[1], g[2], g[3]])
}

fn cfg(dp: &str, ports: &[&str]) -> McastCfgMsg {
    McastCfgMsg {
        datapath: dp.into(),
        querier: false,
        table_size: 2048,
        idle_timeout: 300,
        query_interval: 150,
        query_max_resp: 1,
        ports: ports.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }
}

fn groups(s: &Snooper, dp: &str) -> Vec<(String, Vec<String>)> {
    s.groups()
        .into_iter()
        .find(|g| g.datapath == dp)
        .map(|g| g.groups.into_iter().map(|g| (g.address, g.ports)).collect())
        .unwrap_or_default()
}

fn g(addr: &str, ports: &[&str]) -> (String, Vec<String>) {
    (addr.into(), ports.iter().map(|p| p.to_string()).collect())
}

#[test]
fn igmpv2_joins_and_leaves_and_memberships_expire() {
    let mut s = Snooper::default();
    assert!(
        s.set(vec![cfg("sw0", &["p1", "p2", "p3"])], Duration::ZERO)
            .is_empty()
    );
    let (_, changed) = s.poll(Duration::ZERO);
    assert_eq!(changed.len(), 1, "a new switch is reported (empty)");
    s.handle("sw0", "p1", &v2_report([239, 1, 1, 1]), S)
        .unwrap();
    s.handle("sw0", "p2", &v2_report([239, 1, 1, 1]), 2 * S)
        .unwrap();
    s.handle("sw0", "p3", &v2_report([239, 2, 2, 2]), 2 * S)
        .unwrap();
    assert_eq!(
        groups(&s, "sw0"),
        vec![g("239.1.1.1", &["p1", "p2"]), g("239.2.2.2", &["p3"])]
    );
    let (_, changed) = s.poll(2 * S);
    assert_eq!(changed.len(), 1);
    // Nothing new: nothing reported.
    s.handle("sw0", "p1", &v2_report([239, 1, 1, 1]), 3 * S)
        .unwrap();
    assert!(s.poll(3 * S).1.is_empty());
    s.handle("sw0", "p2", &v2_leave([239, 1, 1, 1]), 4 * S)
        .unwrap();
    assert_eq!(
        groups(&s, "sw0"),
        vec![g("239.1.1.1", &["p1"]), g("239.2.2.2", &["p3"])]
    );
    // p3's membership (2 s + 300 s) goes before p1's (3 s + 300 s).
    assert_eq!(s.poll_timeout(), Some(Duration::ZERO));
    s.poll(4 * S);
    assert_eq!(s.poll_timeout(), Some(302 * S));
    let (_, changed) = s.poll(302 * S);
    assert_eq!(changed[0].groups.len(), 1);
    assert_eq!(groups(&s, "sw0"), vec![g("239.1.1.1", &["p1"])]);
    s.poll(303 * S);
    assert!(groups(&s, "sw0").is_empty());
    // Link-local groups are not learned; other switches are not snooped.
    s.handle("sw0", "p1", &v2_report([224, 0, 0, 251]), 304 * S)
        .unwrap();
    s.handle("sw9", "p1", &v2_report([239, 1, 1, 1]), 304 * S)
        .unwrap();
    assert!(groups(&s, "sw0").is_empty());
    assert!(s.poll(304 * S).1.is_empty());
}

#[test]
fn igmpv3_and_mldv2_records_join_and_leave() {
    let mut s = Snooper::default();
    s.set(vec![cfg("sw0", &["p1", "p2"])], Duration::ZERO);
    // Records: CHANGE_TO_EXCLUDE {} 239.1.1.1 (join), ALLOW_NEW {10.0.0.9} 239.3.3.3
    // (join, with a source and 4 bytes of aux data).
    let mut v3 = vec![0x22, 0, 0, 0, 0, 0, 0, 2];
    v3.extend_from_slice(&[4, 0, 0, 0, 239, 1, 1, 1]);
    v3.extend_from_slice(&[
        5, 1, 0, 1, 239, 3, 3, 3, 10, 0, 0, 9, 0xaa, 0xbb, 0xcc, 0xdd,
    ]);
    s.handle("sw0", "p1", &igmp_frame(&v3), S).unwrap();
    assert_eq!(
        groups(&s, "sw0"),
        vec![g("239.1.1.1", &["p1"]), g("239.3.3.3", &["p1"])]
    );
    // TO_INCLUDE {} 239.1.1.1: a leave.
    let leave = [0x22, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0, 239, 1, 1, 1];
    s.handle("sw0", "p1", &igmp_frame(&leave), 2 * S).unwrap();
    assert_eq!(groups(&s, "sw0"), vec![g("239.3.3.3", &["p1"])]);
    // A truncated record list is an error, and changes nothing.
    let e = s
        .handle("sw0", "p2", &igmp_frame(&v3[..20]), 3 * S)
        .unwrap_err();
    assert!(e.contains("truncated"), "{e}");
    // MLDv2: IS_EXCLUDE {} ff0e::1 joins; MLDv1 done leaves it.
    let src = "fe80::1".parse().unwrap();
    let grp = Ipv6Addr::new(0xff0e, 0, 0, 0, 0, 0, 0, 1).octets();
    let mut m2 = vec![143, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0];
    m2.extend_from_slice(&grp);
    s.handle("sw0", "p2", &mld_frame(src, &m2), 4 * S).unwrap();
    assert!(groups(&s, "sw0").contains(&g("ff0e::1", &["p2"])));
    let mut done = vec![132, 0, 0, 0, 0, 0, 0, 0];
    done.extend_from_slice(&grp);
    s.handle("sw0", "p2", &mld_frame(src, &done), 5 * S)
        .unwrap();
    assert_eq!(groups(&s, "sw0"), vec![g("239.3.3.3", &["p1"])]);
    // A bad checksum is refused.
    let mut bad = v2_report([239, 9, 9, 9]);
    let n = bad.len();
    bad[n - 1] ^= 1;
    let e = s.handle("sw0", "p2", &bad, 6 * S).unwrap_err();
    assert!(e.contains("checksum"), "{e}");
    assert_eq!(s.bad, 2);
}

#[test]
fn queries_make_mrouter_ports_and_a_full_table_evicts_the_oldest() {
    let mut s = Snooper::default();
    let mut c = cfg("sw0", &["p1", "p2", "r1"]);
    c.table_size = 2;
    s.set(vec![c], Duration::ZERO);
    s.handle("sw0", "p1", &v2_report([239, 0, 0, 1]), S)
        .unwrap();
    s.handle("sw0", "p2", &v2_report([239, 0, 0, 2]), 2 * S)
        .unwrap();
    s.handle("sw0", "p1", &v2_report([239, 0, 0, 1]), 3 * S)
        .unwrap();
    // Full: 239.0.0.2 (refreshed at 2 s) makes room for 239.0.0.3.
    s.handle("sw0", "p2", &v2_report([239, 0, 0, 3]), 4 * S)
        .unwrap();
    assert_eq!(
        groups(&s, "sw0"),
        vec![g("239.0.0.1", &["p1"]), g("239.0.0.3", &["p2"])]
    );
    // A general query from r1: a multicast-router port, which does not join groups.
    s.handle(
        "sw0",
        "r1",
        &igmp_frame(&[0x11, 10, 0, 0, 0, 0, 0, 0]),
        5 * S,
    )
    .unwrap();
    s.handle("sw0", "r1", &v2_report([239, 0, 0, 1]), 6 * S)
        .unwrap();
    assert_eq!(
        groups(&s, "sw0"),
        vec![
            g("239.0.0.1", &["p1"]),
            g("239.0.0.3", &["p2"]),
            g(MROUTERS, &["r1"])
        ]
    );
    s.poll(6 * S);
    s.poll(5 * S + MROUTER_IDLE);
    assert!(!groups(&s, "sw0").iter().any(|(a, _)| a == MROUTERS));
    // A port that left the chassis leaves its groups.
    s.set(vec![cfg("sw0", &["p1", "r1"])], 200 * S);
    assert_eq!(groups(&s, "sw0"), vec![g("239.0.0.1", &["p1"])]);
    // A switch no longer listed is reported with no groups.
    s.poll(200 * S);
    s.set(Vec::new(), 201 * S);
    let (_, changed) = s.poll(201 * S);
    assert_eq!(
        changed,
        vec![McastGroupsMsg {
            datapath: "sw0".into(),
            groups: Vec::new()
        }]
    );
}

#[test]
fn seeds_fill_only_a_fresh_switch() {
    let mut s = Snooper::default();
    let mut c = cfg("sw0", &["p1", "p2"]);
    c.known = vec![
        McastGroupMsg {
            address: "239.1.1.1".into(),
            ports: vec!["p1".into(), "gone".into()],
        },
        McastGroupMsg {
            address: MROUTERS.into(),
            ports: vec!["p2".into()],
        },
    ];
    s.set(vec![c.clone()], Duration::ZERO);
    assert_eq!(
        groups(&s, "sw0"),
        vec![g("239.1.1.1", &["p1"]), g(MROUTERS, &["p2"])]
    );
    // Later seeds (the controller's view of rows this datapath wrote) change nothing.
    c.known = vec![McastGroupMsg {
        address: "239.7.7.7".into(),
        ports: vec!["p2".into()],
    }];
    s.set(vec![c], S);
    assert_eq!(
        groups(&s, "sw0"),
        vec![g("239.1.1.1", &["p1"]), g(MROUTERS, &["p2"])]
    );
    // Seeded memberships still expire.
    s.poll(301 * S);
    assert!(groups(&s, "sw0").iter().all(|(a, _)| a == MROUTERS));
}

#[test]
fn the_querier_sends_general_queries_every_interval() {
    let mut s = Snooper::default();
    let mut c = cfg("sw0", &["p1", "p2"]);
    c.querier = true;
    c.query_interval = 60;
    c.query_max_resp = 2;
    c.eth_src = "0a:00:00:00:00:fe".into();
    c.ip4_src = "10.0.0.254".into();
    c.ip6_src = "fe80::fe".into();
    assert!(s.set(vec![c.clone()], Duration::ZERO).is_empty());
    let (q, _) = s.poll(Duration::ZERO);
    assert_eq!(q.len(), 4, "IGMP and MLD out of each of 2 ports");
    for f in q.iter().map(|q| &q.frame) {
        let p = hf_wire::parse(f, 0, 0).unwrap();
        assert!(hf_wire::checksums_valid(f, &p), "{f:02x?}");
        let ops = parse(f).unwrap();
        assert_eq!(ops, vec![Op::Query]);
        assert_eq!(&f[6..12], &[0x0a, 0, 0, 0, 0, 0xfe]);
    }
    let igmp = &q[0].frame;
    assert_eq!(&igmp[26..34], &[10, 0, 0, 254, 224, 0, 0, 1]);
    assert_eq!(igmp[14 + 24 + 1], 20, "max response 2 s in tenths");
    assert_eq!(s.poll_timeout(), Some(60 * S));
    assert!(s.poll(59 * S).0.is_empty());
    assert_eq!(s.poll(60 * S).0.len(), 4);
    // Without eth_src (or with querier off) no query.
    c.eth_src = "nonsense".into();
    let w = s.set(vec![c.clone()], 61 * S);
    assert!(w.iter().any(|w| w.contains("eth_src")), "{w:?}");
    assert!(s.poll(500 * S).0.is_empty());
    c.eth_src = "0a:00:00:00:00:fe".into();
    c.ip4_src = "not-an-ip".into();
    c.ip6_src = String::new();
    let w = s.set(vec![c], 501 * S);
    assert!(w.iter().any(|w| w.contains("ip4_src")), "{w:?}");
    assert!(s.poll(501 * S).0.is_empty());
}

#[test]
fn untrusted_bytes_do_not_panic() {
    let mut s = Snooper::default();
    s.set(vec![cfg("sw0", &["p1"])], Duration::ZERO);
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let base = {
        let mut v3 = vec![0x22, 0, 0, 0, 0, 0, 0, 2];
        v3.extend_from_slice(&[4, 0, 0, 0, 239, 1, 1, 1, 5, 1, 0, 1, 239, 3, 3, 3]);
        igmp_frame(&v3)
    };
    for _ in 0..20_000 {
        let mut f = base.clone();
        let n = (next() % 6) as usize;
        for _ in 0..n {
            let i = (next() as usize) % f.len();
            f[i] = next() as u8;
        }
        f.truncate((next() as usize) % (f.len() + 1));
        let _ = s.handle("sw0", "p1", &f, Duration::ZERO);
    }
}

#[test]
fn a_new_seq_no_flushes_the_switch() {
    let mut s = Snooper::default();
    let mut c = cfg("sw0", &["p1", "r1"]);
    s.set(vec![c.clone()], Duration::ZERO);
    s.handle("sw0", "p1", &v2_report([239, 1, 1, 1]), S)
        .unwrap();
    s.handle("sw0", "r1", &igmp_frame(&[0x11, 10, 0, 0, 0, 0, 0, 0]), S)
        .unwrap();
    s.poll(S);
    // The same configuration again: nothing changes.
    s.set(vec![c.clone()], 2 * S);
    assert!(s.poll(2 * S).1.is_empty());
    assert_eq!(groups(&s, "sw0").len(), 2);
    c.seq_no += 1;
    s.set(vec![c], 3 * S);
    let (_, changed) = s.poll(3 * S);
    assert_eq!(
        changed,
        vec![McastGroupsMsg {
            datapath: "sw0".into(),
            groups: Vec::new()
        }]
    );
    // Learning goes on after the flush.
    s.handle("sw0", "p1", &v2_report([239, 1, 1, 1]), 4 * S)
        .unwrap();
    assert_eq!(groups(&s, "sw0"), vec![g("239.1.1.1", &["p1"])]);
}
