//! Entry points and helpers shared by the fuzz target (`fuzz/fuzz_targets/conntrack.rs`), the
//! corpus-replay test, the property tests and the benchmark. Not part of the stable API.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_wire::{EthAddr, ip_proto, parse, tcp_flags};

use crate::table::{Conntrack, F_ASSURED, F_CLAIM, F_SHARED, L_TIMER, L_UNEST, NIL};
use crate::{Config, CtAction, CtState, Masked, NatRange, Owner, Selection};

/// A TCP segment to build.
#[derive(Debug, Clone, Copy)]
pub struct Seg {
    /// Source address.
    pub src: IpAddr,
    /// Destination address (same family).
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// TCP flags.
    pub flags: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number.
    pub ack: u32,
    /// Window.
    pub win: u16,
    /// Payload bytes (zeros).
    pub payload: usize,
}

impl Seg {
    /// A segment from `src` to `dst` with a 65,535-byte window.
    pub fn new(
        (src, sport): (IpAddr, u16),
        (dst, dport): (IpAddr, u16),
        flags: u16,
        (seq, ack): (u32, u32),
        payload: usize,
    ) -> Seg {
        Seg {
            src,
            dst,
            sport,
            dport,
            flags,
            seq,
            ack,
            win: 65535,
            payload,
        }
    }
}

fn frame(src: IpAddr, dst: IpAddr, proto: u8, l4: Vec<u8>) -> Vec<u8> {
    let mut f = Vec::new();
    let (a, b) = (EthAddr([2, 0, 0, 0, 0, 1]), EthAddr([2, 0, 0, 0, 0, 2]));
    // Mixed families are a caller bug in these helpers; they yield an empty frame.
    let _ = hf_wire::reply::ip_packet(&mut f, a, b, src, dst, proto, &l4);
    f
}

/// An Ethernet/IP/TCP frame with valid checksums.
pub fn tcp_frame(s: &Seg) -> Vec<u8> {
    let mut t = Vec::with_capacity(20 + s.payload);
    t.extend_from_slice(&s.sport.to_be_bytes());
    t.extend_from_slice(&s.dport.to_be_bytes());
    t.extend_from_slice(&s.seq.to_be_bytes());
    t.extend_from_slice(&s.ack.to_be_bytes());
    t.extend_from_slice(&((5u16 << 12) | s.flags).to_be_bytes());
    t.extend_from_slice(&s.win.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.resize(20 + s.payload, 0);
    frame(s.src, s.dst, ip_proto::TCP, t)
}

/// An Ethernet/IP/UDP frame with valid checksums and a 4-byte payload.
pub fn udp_frame(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&12u16.to_be_bytes());
    u.extend_from_slice(&[0, 0, 1, 2, 3, 4]);
    frame(src, dst, ip_proto::UDP, u)
}

/// An ICMP (or ICMPv6) echo request or reply.
pub fn icmp_echo(src: IpAddr, dst: IpAddr, id: u16, reply: bool) -> Vec<u8> {
    let (proto, ty) = match (src.is_ipv6(), reply) {
        (false, false) => (ip_proto::ICMP, 8),
        (false, true) => (ip_proto::ICMP, 0),
        (true, false) => (ip_proto::ICMPV6, 128),
        (true, true) => (ip_proto::ICMPV6, 129),
    };
    let mut m = vec![ty, 0, 0, 0];
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&[0, 1, b'h', b'f']);
    frame(src, dst, proto, m)
}

/// A SYN from 10.0.0.1:40000 to 192.0.2.1:80 (the crate example's packet).
pub fn example_syn() -> Vec<u8> {
    tcp_frame(&Seg {
        src: Ipv4Addr::new(10, 0, 0, 1).into(),
        dst: Ipv4Addr::new(192, 0, 2, 1).into(),
        sport: 40000,
        dport: 80,
        flags: tcp_flags::SYN,
        seq: 1000,
        ack: 0,
        win: 65535,
        payload: 0,
    })
}

/// Checks every structural invariant of the table; `Err` names the first one broken.
pub fn check_invariants(ct: &Conntrack) -> Result<(), String> {
    let live: Vec<u32> = (0..ct.entries.len() as u32)
        .filter(|&i| ct.entries[i as usize].live())
        .collect();
    if live.len() != ct.len {
        return Err(format!("len {} but {} live entries", ct.len, live.len()));
    }
    let slots: usize = live
        .iter()
        .map(|&i| {
            if ct.entries[i as usize].flags & F_SHARED != 0 {
                1
            } else {
                2
            }
        })
        .sum();
    if ct.index.len() != slots {
        return Err(format!(
            "index holds {} slots, entries need {slots}",
            ct.index.len()
        ));
    }
    for &i in &live {
        let e = &ct.entries[i as usize];
        if (e.flags & F_SHARED != 0) != (e.reply == e.orig.invert()) {
            return Err(format!("entry {i}: shared flag disagrees with its tuples"));
        }
    }
    let mut zones = vec![0u32; 1 << 16];
    let mut claims = 0;
    for &i in &live {
        let e = &ct.entries[i as usize];
        if ct.find(&e.orig) != Some((i, 0)) {
            return Err(format!("entry {i}: original tuple not indexed to it"));
        }
        if ct.find(&e.reply) != Some((i, 1)) {
            return Err(format!("entry {i}: reply tuple not indexed to it"));
        }
        if e.orig.zone != e.reply.zone {
            return Err(format!("entry {i}: tuples in different zones"));
        }
        if e.flags & F_CLAIM != 0 {
            claims += 1;
            if ct.claimer(&e.reply) != Some(i) {
                return Err(format!("entry {i}: SNAT claim not indexed to it"));
            }
        }
        zones[usize::from(e.orig.zone)] += 1;
    }
    if claims != ct.claims.len() {
        return Err(format!(
            "{} claims indexed, {claims} flagged",
            ct.claims.len()
        ));
    }
    let mut nat_zones = vec![0u32; 1 << 16];
    for &i in &live {
        let e = &ct.entries[i as usize];
        if e.flags & (crate::table::F_SNAT | crate::table::F_DNAT) != 0 {
            nat_zones[usize::from(e.orig.zone)] += 1;
        }
    }
    if nat_zones != ct.nat_zone_counts {
        return Err("NAT zone counts disagree with the entries".into());
    }
    if zones != ct.zone_counts {
        return Err("zone counts disagree with the entries".into());
    }
    let mut unest = 0;
    let mut i = ct.unest.head;
    while i != NIL {
        let e = &ct.entries[i as usize];
        if !e.live() || e.flags & F_ASSURED != 0 {
            return Err(format!(
                "entry {i} on the unestablished list but dead or assured"
            ));
        }
        unest += 1;
        if unest > ct.len {
            return Err("unestablished list loops".into());
        }
        i = e.links[L_UNEST][1];
    }
    let want = live
        .iter()
        .filter(|&&i| ct.entries[i as usize].flags & F_ASSURED == 0)
        .count();
    if unest != want {
        return Err(format!(
            "{unest} on the unestablished list, {want} unestablished"
        ));
    }
    let mut timed = 0;
    for slot in 0..crate::timer::SLOTS as usize {
        let mut i = ct.wheel_head(slot);
        while i != NIL {
            let e = &ct.entries[i as usize];
            if !e.live() || usize::from(e.slot) != slot {
                return Err(format!(
                    "entry {i} in timer slot {slot} but dead or misfiled"
                ));
            }
            timed += 1;
            if timed > ct.len {
                return Err("timer lists loop".into());
            }
            i = e.links[L_TIMER][1];
        }
    }
    if timed != ct.len {
        return Err(format!("{timed} entries on the wheel, {} live", ct.len));
    }
    Ok(())
}

/// Feeds `data` to a small conntrack as a sequence of operations: packets (parsed with
/// `hf-wire`) with lookup/commit/NAT actions in a few zones, time steps, timeouts, flushes,
/// zone limits and export/import round trips. Checks after every operation that the table's
/// invariants hold, that `peek` predicts `process`, that zone 0 is never flushed and that
/// export then import answers every lookup the same. Panics only on a bug.
pub fn conntrack(data: &[u8]) {
    let cfg = Config {
        max_connections: 48,
        default_zone_limit: Some(40),
        tcp_liberal: data.first().is_some_and(|b| b & 0x80 != 0),
        ..Config::default()
    };
    let mut ct = Conntrack::new(cfg.clone());
    let mut now = Duration::ZERO;
    let mut rest = data;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, r) = tail.split_at(n);
        rest = r;
        now += Duration::from_millis(u64::from(op >> 5) * 3_000);
        let zone = u16::from(op & 0x3);
        match (op >> 2) & 0x7 {
            0..=4 => {
                let Ok(mut p) = parse(body, 0, 0) else {
                    continue;
                };
                let sel = (op >> 2) & 0x7;
                let addr = |a, b, c, d| IpAddr::from(Ipv4Addr::new(a, b, c, d));
                let mut act = match sel {
                    0 => CtAction::lookup(),
                    1 => CtAction::commit(Owner(u32::from(zone))),
                    2 => CtAction::lookup().with_nat(),
                    3 => CtAction::commit(Owner(1)).snat(NatRange {
                        addr_min: addr(198, 51, 100, 1),
                        addr_max: addr(198, 51, 100, 2),
                        port_min: 1024,
                        port_max: 1031,
                    }),
                    _ => CtAction::commit(Owner(2))
                        .dnat(NatRange::addr_port(addr(10, 9, 9, 9), 8080)),
                };
                if let Some(&b) = body.last() {
                    act.mark = Some(Masked::<u32>::all(u32::from(b)));
                    act.label = Some(Masked {
                        value: u128::from(b) << 100,
                        mask: 0xff << 100,
                    });
                }
                let predicted = ct.peek(zone, &p, now, &act);
                let got = ct.process(zone, &p, now, &act);
                assert_eq!(predicted, got, "peek and process disagree");
                assert!(got.state.contains(CtState::TRK));
                if !got.rewrite.is_empty() {
                    let mut f = body.to_vec();
                    let _ = hf_wire::apply_nat(&mut f, &mut p, &got.rewrite);
                }
            }
            5 => {
                ct.handle_timeout(now);
            }
            6 => {
                let before = ct.zone_count(0);
                if zone == 0 {
                    assert!(ct.flush_zone(0).is_err());
                } else {
                    let _ = ct.flush_zone(zone);
                    assert_eq!(ct.zone_count(zone), 0);
                }
                let _ = ct.flush_owner(Owner(u32::from(zone)));
                assert_eq!(ct.zone_count(0), before, "a flush touched zone 0");
            }
            _ => {
                if zone == 3 {
                    ct.set_zone_limit(1, body.first().map(|&b| u32::from(b)));
                    continue;
                }
                let exp = ct.export(&Selection::everything(), now);
                let mut other = Conntrack::new(Config {
                    max_connections: 1 << 10,
                    ..cfg.clone()
                });
                let rep = other
                    .import(&exp, |z| z.wrapping_add(1), now)
                    .expect("same version");
                assert_eq!(rep.imported, exp.conns.len());
                for c in &exp.conns {
                    for t in [c.orig, c.reply] {
                        let moved = crate::Tuple {
                            zone: t.zone.wrapping_add(1),
                            ..t
                        };
                        let got = other.get(&moved, now).map(|mut g| {
                            g.orig.zone = t.zone;
                            g.reply.zone = t.zone;
                            g
                        });
                        assert_eq!(got, Some(*c), "import answers a lookup differently");
                    }
                }
                check_invariants(&other).expect("imported table is consistent");
            }
        }
        if let Err(e) = check_invariants(&ct) {
            panic!("invariant broken: {e}");
        }
    }
}
