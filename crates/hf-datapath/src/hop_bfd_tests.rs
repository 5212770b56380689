//! The next-hop BFD sessions against a scripted peer whose packets are written byte by byte
//! here (RFC 5880 §4.1), not with [`Control::to_bytes`].

use super::*;

const PORT_IP: &str = "172.16.0.1";
const HOP: &str = "172.16.0.10";
const DISC: u32 = 0x0abc_0001;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

fn msg(admin_down: bool) -> HopBfdMsg {
    HopBfdMsg {
        logical_port: "lr0-ext".into(),
        dst_ip: ip(HOP),
        src_port: 49152,
        disc: DISC,
        min_tx_ms: 1000,
        min_rx_ms: 1000,
        mult: 5,
        admin_down,
        datapath: 3,
        port: 2,
        src_mac: [2, 0, 0, 0, 0xee, 1],
        src_ip: ip(PORT_IP),
    }
}

/// A peer's control packet: state, flags (P 0x20, F 0x10, D 0x02), discriminators, timers (µs).
fn peer(state: u8, flags: u8, my: u32, your: u32, tx_us: u32, rx_us: u32) -> Vec<u8> {
    let mut b = vec![0x20, (state << 6) | flags, 3, 24];
    for w in [my, your, tx_us, rx_us, 0] {
        b.extend_from_slice(&w.to_be_bytes());
    }
    b
}

const DOWN: u8 = 1;
const INIT: u8 = 2;
const UP: u8 = 3;
const ADMIN_DOWN: u8 = 0;
const PEER: u32 = 77;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// (state code, flags, my disc, your disc) of an injected frame, after checking its headers.
fn sent(i: &Inject) -> (u8, u8, u32, u32) {
    assert_eq!((i.datapath, i.port), (3, 2));
    let f = &i.frame;
    assert_eq!(
        &f[0..6],
        &[0xff; 6],
        "to broadcast (the router resolves the next hop)"
    );
    assert_eq!(&f[6..12], &[2, 0, 0, 0, 0xee, 1]);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    assert_eq!(f[14 + 8], 255, "TTL 255 (RFC 5881 §5)");
    assert_eq!(f[14 + 9], 17);
    assert_eq!(&f[14 + 12..14 + 16], &[172, 16, 0, 1]);
    assert_eq!(&f[14 + 16..14 + 20], &[172, 16, 0, 10]);
    let udp = &f[34..];
    assert_eq!(u16::from_be_bytes([udp[0], udp[1]]), 49152);
    assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), 3784);
    let b = &udp[8..];
    assert_eq!(b.len(), 24);
    assert_eq!(b[0] >> 5, 1, "version 1");
    assert_eq!(b[2], 5, "detect multiplier");
    let w = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    assert_eq!((w(12), w(16)), (1_000_000, 1_000_000), "timers in µs");
    (b[1] >> 6, b[1] & 0x3f, w(4), w(8))
}

fn states(b: &mut HopBfd) -> Vec<&'static str> {
    b.take_changes()
        .iter()
        .map(HopBfdStatusMsg::status)
        .collect()
}

#[test]
fn a_session_comes_up_with_the_peers_three_way_handshake() {
    let mut b = HopBfd::default();
    b.set(vec![msg(false)], ms(0));
    let out = b.poll(ms(0));
    assert_eq!(out.len(), 1);
    assert_eq!(sent(&out[0]), (DOWN, 0, DISC, 0));
    // The peer has not heard from us: Your Discriminator 0, selected by its address.
    let r = b.receive(
        ip(HOP),
        &peer(DOWN, 0, PEER, 0, 1_000_000, 1_000_000),
        ms(10),
    );
    assert_eq!(r, Ok(None));
    assert_eq!(states(&mut b), vec!["init"]);
    // A state change is sent at once, with the peer's discriminator.
    let out = b.poll(ms(10));
    assert_eq!(sent(&out[0]), (INIT, 0, DISC, PEER));
    assert!(
        b.receive(
            ip(HOP),
            &peer(UP, 0, PEER, DISC, 1_000_000, 1_000_000),
            ms(20)
        )
        .is_ok()
    );
    assert_eq!(states(&mut b), vec!["up"]);
    assert_eq!(sent(&b.poll(ms(20))[0]).0, UP);
    assert_eq!(b.statuses()[0].status(), "up");
}

fn up(b: &mut HopBfd) {
    b.set(vec![msg(false)], ms(0));
    b.poll(ms(0));
    let _ = b.receive(
        ip(HOP),
        &peer(INIT, 0, PEER, DISC, 300_000, 1_000_000),
        ms(5),
    );
    assert_eq!(states(b), vec!["up"]);
}

#[test]
fn silence_for_the_detection_time_takes_it_down() {
    let mut b = HopBfd::default();
    up(&mut b);
    // 3 (the peer's multiplier) × max(its TX 300 ms, our RX 1000 ms) = 3 s after the last packet.
    assert_eq!(b.poll_timeout().map(|t| t <= ms(3005)), Some(true));
    b.poll(ms(3004));
    assert!(states(&mut b).is_empty());
    b.poll(ms(3005));
    assert_eq!(states(&mut b), vec!["down"]);
    // Down again: the peer's discriminator is forgotten.
    let out = b.poll(ms(6000));
    assert_eq!(sent(&out[0]), (DOWN, 0, DISC, 0));
}

#[test]
fn the_peers_down_or_admin_down_takes_it_down() {
    for peer_state in [DOWN, ADMIN_DOWN] {
        let mut b = HopBfd::default();
        up(&mut b);
        assert!(
            b.receive(
                ip(HOP),
                &peer(peer_state, 0, PEER, DISC, 1_000_000, 1_000_000),
                ms(50)
            )
            .is_ok()
        );
        assert_eq!(states(&mut b), vec!["down"], "peer state {peer_state}");
    }
}

#[test]
fn a_poll_is_answered_with_a_final_at_once() {
    let mut b = HopBfd::default();
    up(&mut b);
    let r = b.receive(
        ip(HOP),
        &peer(UP, 0x20, PEER, DISC, 1_000_000, 1_000_000),
        ms(50),
    );
    let Ok(Some(f)) = r else {
        panic!("no Final: {r:?}");
    };
    assert_eq!(sent(&f), (UP, 0x10, DISC, PEER));
}

#[test]
fn admin_down_sends_nothing_and_comes_back_down() {
    let mut b = HopBfd::default();
    b.set(vec![msg(true)], ms(0));
    assert!(b.poll(ms(0)).is_empty());
    assert_eq!(b.poll_timeout(), None, "nothing to do: no busy loop");
    assert_eq!(b.statuses()[0].status(), "admin_down");
    // Packets for an AdminDown session change nothing.
    let _ = b.receive(
        ip(HOP),
        &peer(DOWN, 0, PEER, 0, 1_000_000, 1_000_000),
        ms(5),
    );
    assert!(states(&mut b).is_empty());
    b.set(vec![msg(false)], ms(100));
    assert!(states(&mut b).is_empty(), "not a change pinctrl reports");
    assert_eq!(sent(&b.poll(ms(100))[0]).0, DOWN);
    // And back to AdminDown from Up.
    let _ = b.receive(
        ip(HOP),
        &peer(INIT, 0, PEER, DISC, 1_000_000, 1_000_000),
        ms(150),
    );
    assert_eq!(states(&mut b), vec!["up"]);
    b.set(vec![msg(true)], ms(200));
    assert!(b.poll(ms(5000)).is_empty());
    // A session not in the list stops.
    b.set(Vec::new(), ms(300));
    assert!(b.is_empty());
}

#[test]
fn packets_go_every_negotiated_interval_less_jitter() {
    let mut b = HopBfd::default();
    b.set(vec![msg(false)], ms(0));
    let mut at = Vec::new();
    let mut t = 0;
    while t < 20_000 {
        if !b.poll(ms(t)).is_empty() {
            at.push(t);
        }
        t += 1;
    }
    let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 19, "{at:?}");
    assert!(gaps.iter().all(|g| (750..=1000).contains(g)), "{gaps:?}");
    assert!(gaps.iter().any(|g| *g < 1000), "jittered: {gaps:?}");
    // The peer asks for 2 s: max(our 1 s, its 2 s).
    let _ = b.receive(
        ip(HOP),
        &peer(DOWN, 0, PEER, 0, 1_000_000, 2_000_000),
        ms(t),
    );
    b.poll(ms(t));
    let start = t;
    let mut next = Vec::new();
    while t < start + 20_000 {
        if !b.poll(ms(t)).is_empty() {
            next.push(t);
        }
        t += 1;
    }
    let gaps: Vec<u64> = next.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.iter().all(|g| (1500..=2000).contains(g)), "{gaps:?}");
    // A peer that wants no packets (required RX 0) gets none.
    let _ = b.receive(ip(HOP), &peer(INIT, 0, PEER, DISC, 1_000_000, 0), ms(t));
    b.poll(ms(t));
    assert!(b.poll(ms(t + 10_000)).is_empty());
}

#[test]
fn bad_packets_are_refused_with_a_reason() {
    let mut b = HopBfd::default();
    let mut two = msg(false);
    two.src_port = 49153;
    two.disc = DISC + 1;
    b.set(vec![msg(false), two], ms(0));
    let ok = peer(DOWN, 0, PEER, DISC, 1_000_000, 1_000_000);
    assert!(b.receive(ip(HOP), &ok, ms(1)).is_ok());
    // Another address, another discriminator, Your Discriminator 0 with two sessions.
    assert!(b.receive(ip("172.16.0.11"), &ok, ms(1)).is_err());
    let wrong = peer(DOWN, 0, PEER, 999, 1_000_000, 1_000_000);
    assert!(b.receive(ip(HOP), &wrong, ms(1)).is_err());
    let zero = peer(DOWN, 0, PEER, 0, 1_000_000, 1_000_000);
    assert!(b.receive(ip(HOP), &zero, ms(1)).is_err());
    let pf = peer(UP, 0x30, PEER, DISC, 1_000_000, 1_000_000);
    assert!(b.receive(ip(HOP), &pf, ms(1)).is_err());
    let mut auth = ok.clone();
    auth[1] |= 0x04;
    assert!(b.receive(ip(HOP), &auth, ms(1)).is_err());
    assert!(b.receive(ip(HOP), &ok[..20], ms(1)).is_err());
    // A frame not sent with TTL 255 is not single-hop BFD.
    let mut f = Vec::new();
    let mut udp = vec![0xc0, 0x00, 0x0e, 0xc8, 0, 32, 0, 0];
    udp.extend_from_slice(&ok);
    let _ = hf_wire::reply::ip_packet(
        &mut f,
        hf_wire::EthAddr([2, 0, 0, 0, 0, 9]),
        hf_wire::EthAddr([2, 0, 0, 0, 0xee, 1]),
        ip(HOP),
        ip(PORT_IP),
        17,
        &udp,
    );
    assert_eq!(
        control_of(&f).err(),
        Some("TTL/hop limit is not 255 (single-hop BFD)")
    );
    f[14 + 8] = 255;
    let (src, payload) = control_of(&f).unwrap_or((ip("0.0.0.0"), &[]));
    assert_eq!((src, payload), (ip(HOP), &ok[..]));
}
