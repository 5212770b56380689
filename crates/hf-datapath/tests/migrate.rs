//! Live migration between two datapath cores joined by an in-test state channel: the pre-copy,
//! the hold of the port's traffic at the destination, activation, the final delta, the trim
//! of what the source delivered, the buffer's bounds, and the channel's refusals.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_datapath::example::{self, VM1_IP, VM1_MAC, VM2_IP, VM2_MAC};
use hf_datapath::migrate::StateMsg;
use hf_datapath::proto::{
    ActivationMsg, Decoder, FromDatapath, LocationMsg, MigrationMsg, PROTOCOL_VERSION, ProgramMsg,
    ToDatapath, encode,
};
use hf_datapath::{Datapath, DatapathConfig, MigrationConfig, Transmit};
use hf_wire::tcp_flags::{ACK, SYN};

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn install(dp: &mut Datapath, chassis: &str, p: ProgramMsg, now: Duration) {
    dp.handle_control_connected(now);
    for m in [
        ToDatapath::Hello {
            version: PROTOCOL_VERSION,
            chassis: chassis.into(),
        },
        ToDatapath::Program(Box::new(p)),
    ] {
        dp.handle_control_bytes(&encode(&m).expect("encodes"), now);
    }
    let mut dec = Decoder::<FromDatapath>::new();
    while let Some(b) = dp.poll_control_transmit() {
        dec.push(&b);
    }
    let mut ok = false;
    while let Ok(Some(m)) = dec.next_msg() {
        if let FromDatapath::Installed { flow_errors, .. } = &m {
            assert!(flow_errors.is_empty(), "{flow_errors:?}");
            ok = true;
        }
    }
    assert!(ok, "program installed on {chassis}");
}

/// hv1 runs vm1 (the source); hv2 has vm1 waiting for its RARP (the destination) and vm2.
fn pair(cfg: MigrationConfig) -> (Datapath, Datapath) {
    let mut src = example::chassis(1, IPS);
    let mut p1 = example::program(1, 1, IPS);
    std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p1.datapaths[0]).ports)[0]
        .also_remote = vec![2];
    p1.migrations = vec![MigrationMsg {
        port: "vm1".into(),
        incoming: false,
        peers: vec!["hv2".into()],
        ..MigrationMsg::default()
    }];
    install(&mut src, "hv1", p1, ms(0));
    let mut c = DatapathConfig::new("hv2", IPS[1]);
    c.migration = cfg;
    let mut dst = Datapath::new(c);
    dst.add_port("vm2", Some(VM2_MAC));
    dst.add_port("vm1", Some(VM1_MAC));
    let mut p2 = example::program(1, 2, IPS);
    let vm1 =
        &mut std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p2.datapaths[0]).ports)[0];
    vm1.location = LocationMsg::Local("vm1".into());
    vm1.activation = Some(ActivationMsg {
        rarp: true,
        ..ActivationMsg::default()
    });
    vm1.also_remote = vec![1];
    p2.migrations = vec![MigrationMsg {
        port: "vm1".into(),
        incoming: true,
        peers: vec!["hv1".into()],
        ..MigrationMsg::default()
    }];
    install(&mut dst, "hv2", p2, ms(0));
    (src, dst)
}

/// Moves state-channel bytes between the two (peer ids: 1 at hv2 for hv1, 2 at hv1 for hv2)
/// until nothing moves; the dial, when asked for, succeeds.
fn pipe(src: &mut Datapath, dst: &mut Datapath, now: Duration) {
    loop {
        let mut moved = false;
        while let Some(d) = dst.poll_state_dial() {
            assert_eq!(d.chassis, "hv1");
            dst.handle_state_connected(1, Some("hv1"), None, now);
            src.handle_state_connected(2, None, None, now);
            moved = true;
        }
        while let Some((peer, b)) = dst.poll_state_transmit() {
            assert_eq!(peer, 1);
            src.handle_state_bytes(2, &b, now);
            moved = true;
        }
        while let Some((peer, b)) = src.poll_state_transmit() {
            assert_eq!(peer, 2);
            dst.handle_state_bytes(1, &b, now);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

fn vm1_tcp(flags: u16, seq: u32, payload: usize) -> Vec<u8> {
    tcp_frame(&Seg::new(
        (IpAddr::V4(VM1_IP), 40000),
        (IpAddr::V4(VM2_IP), 80),
        flags,
        (seq, 0),
        payload,
    ))
}

fn to_vm1(flags: u16, seq: u32, ack: u32, payload: usize) -> Vec<u8> {
    let mut f = tcp_frame(&Seg::new(
        (IpAddr::V4(VM2_IP), 80),
        (IpAddr::V4(VM1_IP), 40000),
        flags,
        (seq, ack),
        payload,
    ));
    f[0..6].copy_from_slice(&VM1_MAC);
    f[6..12].copy_from_slice(&VM2_MAC);
    f
}

fn rarp() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&VM1_MAC);
    f.extend_from_slice(&[0x80, 0x35, 0, 1, 8, 0, 6, 4, 0, 3]);
    f.extend_from_slice(&VM1_MAC);
    f.extend_from_slice(&[0; 4]);
    f.extend_from_slice(&VM1_MAC);
    f.extend_from_slice(&[0; 4]);
    f.resize(60, 0);
    f
}

fn delivered(dp: &mut Datapath, port: &str) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while let Some(t) = dp.poll_transmit() {
        if let Transmit::Port { port: p, frame } = t
            && p == port
        {
            v.push(frame);
        }
    }
    v
}

#[test]
fn the_port_moves_with_its_connections_and_the_destination_releases_its_held_frames_in_order() {
    let (mut src, mut dst) = pair(MigrationConfig::default());
    // vm1 opens a connection on the source (committed in its zone there).
    src.handle_port_frame("vm1", &vm1_tcp(SYN, 100, 0), ms(1));
    while src.poll_transmit().is_some() {}
    assert_eq!(src.conntrack().len(), 1);
    // The destination pulls; the pre-copy carries it.
    pipe(&mut src, &mut dst, ms(2));
    assert_eq!(dst.conntrack().len(), 1, "{:?}", dst.migration_stats());
    assert!(dst.port_held("vm1"));
    // Traffic to vm1 reaches both chassis (the sender's chassis sends a copy to each); the
    // destination holds its copies, in order.
    let frames: Vec<Vec<u8>> = (0..5).map(|i| to_vm1(SYN | ACK, 900 + i, 101, 0)).collect();
    for (i, f) in frames.iter().enumerate() {
        dst.handle_tunnel(IPS[0], &geneve(f), ms(3 + i as u64));
    }
    assert!(
        delivered(&mut dst, "vm1").is_empty(),
        "held until activation"
    );
    // The source delivered the first two of them itself before the VM stopped.
    for f in &frames[..2] {
        src.handle_tunnel(IPS[1], &geneve(f), ms(4));
    }
    assert_eq!(delivered(&mut src, "vm1").len(), 2);
    src.stop_port("vm1");
    src.handle_tunnel(IPS[1], &geneve(&frames[2]), ms(5));
    assert!(
        delivered(&mut src, "vm1").is_empty(),
        "a stopped port gets nothing"
    );
    // vm1 resumes at the destination: its own frame before the RARP is held, not dropped.
    dst.handle_port_frame("vm1", &vm1_tcp(ACK, 101, 10), ms(10));
    dst.handle_port_frame("vm1", &rarp(), ms(11));
    let _ = delivered(&mut dst, "vm1");
    pipe(&mut src, &mut dst, ms(11));
    // The final delta came back: the three frames the source did not deliver are released, in
    // order; the two it did are trimmed.
    let out = delivered(&mut dst, "vm1");
    assert_eq!(out.len(), 3, "{:?}", dst.migration_stats());
    for (got, want) in out.iter().zip(&frames[2..]) {
        assert_eq!(got[38..42], want[38..42], "in order");
    }
    let st = dst
        .migration_stats()
        .into_iter()
        .find(|s| s.role == "in")
        .expect("stats");
    assert_eq!(
        (
            st.outcome.as_str(),
            st.buffered,
            st.trimmed,
            st.held_from_port
        ),
        ("completed", 5, 2, 1),
        "{st:?}"
    );
    assert!(!dst.port_held("vm1"));
}

/// A Geneve payload from hv2 for vm1 (datapath 1, inport vm2 = 2, outport vm1 = 1).
fn geneve(inner: &[u8]) -> Vec<u8> {
    let mut g = vec![
        0x02, 0x40, 0x65, 0x58, 0, 0, 1, 0, 0x01, 0x02, 0x80, 0x01, 0, 2, 0, 1,
    ];
    g.extend_from_slice(inner);
    g
}

#[test]
fn a_full_buffer_drops_its_oldest_frames_and_counts_them() {
    let cfg = MigrationConfig {
        max_held_frames: 4,
        ..MigrationConfig::default()
    };
    let (_, mut dst) = pair(cfg);
    for i in 0..10 {
        let syn = tcp_frame(&Seg::new(
            (IpAddr::V4(VM2_IP), 1000 + i as u16),
            (IpAddr::V4(VM1_IP), 80),
            SYN,
            (900 + i, 0),
            0,
        ));
        dst.handle_tunnel(IPS[0], &geneve(&syn), ms(1));
    }
    // No source session: activation goes on with what it has.
    dst.handle_port_frame("vm1", &rarp(), ms(2));
    let out = delivered(&mut dst, "vm1");
    let st = dst
        .migration_stats()
        .into_iter()
        .find(|s| s.role == "in")
        .expect("stats");
    assert_eq!((st.buffered, st.overflowed), (10, 6), "{st:?}");
    assert_eq!(st.outcome, "completed-without-final");
    // The four newest survived, in order (new connections: the egress pipeline commits them).
    let seqs: Vec<u32> = out
        .iter()
        .map(|f| u32::from_be_bytes([f[38], f[39], f[40], f[41]]))
        .collect();
    assert_eq!(seqs, [906, 907, 908, 909]);
}

#[test]
fn a_peer_that_is_not_a_chassis_of_the_program_is_refused() {
    let (mut src, _) = pair(MigrationConfig::default());
    src.handle_state_connected(9, None, None, ms(1));
    let hello = StateMsg::Hello {
        version: hf_datapath::migrate::STATE_VERSION,
        chassis: "rogue".into(),
    };
    src.handle_state_bytes(9, &encode(&hello).expect("encodes"), ms(1));
    assert!(src.state_wants_close(9));
    // A certificate naming another chassis than the hello is refused too.
    src.handle_state_connected(10, None, Some("hv2"), ms(1));
    let hello = StateMsg::Hello {
        version: hf_datapath::migrate::STATE_VERSION,
        chassis: "hv1".into(),
    };
    src.handle_state_bytes(10, &encode(&hello).expect("encodes"), ms(1));
    assert!(src.state_wants_close(10));
    // A pull from a chassis the port does not migrate to is refused with an Abort.
    let (mut src, _) = pair(MigrationConfig::default());
    src.handle_state_connected(11, None, None, ms(1));
    let mut bytes = encode(&StateMsg::Hello {
        version: hf_datapath::migrate::STATE_VERSION,
        chassis: "hv2".into(),
    })
    .expect("encodes");
    bytes.extend(
        encode(&StateMsg::Pull {
            port: "vm2".into(),
            epoch: 1,
        })
        .expect("encodes"),
    );
    src.handle_state_bytes(11, &bytes, ms(1));
    let mut dec = Decoder::<StateMsg>::new();
    while let Some((_, b)) = src.poll_state_transmit() {
        dec.push(&b);
    }
    let mut aborted = false;
    while let Ok(Some(m)) = dec.next_msg() {
        aborted |= matches!(m, StateMsg::Abort { ref port, .. } if port == "vm2");
    }
    assert!(aborted);
}

/// A real dial takes time (a TCP connect, a TLS handshake): meanwhile no timer is due (a due
/// pull woke the daemon's loop without end), and a session that ends before its hello is
/// dialed again after the retry interval, not at once.
#[test]
fn a_slow_dial_sets_no_timer_and_a_session_lost_before_its_hello_is_retried_later() {
    let cfg = MigrationConfig::default();
    let retry = cfg.retry;
    let (_, mut dst) = pair(cfg);
    let d = dst.poll_state_dial().expect("hv2 dials its source");
    assert_eq!(d.chassis, "hv1");
    let now = ms(10);
    assert!(
        dst.poll_timeout().is_none_or(|t| t > now),
        "a timer is due while the dial is under way: {:?}",
        dst.poll_timeout()
    );
    dst.handle_timeout(now);
    assert_eq!(dst.poll_state_dial(), None, "dialed twice");
    // Connected, no hello yet: still nothing due.
    dst.handle_state_connected(1, Some("hv1"), None, now);
    assert!(dst.poll_timeout().is_none_or(|t| t > now));
    // The session ends before the hello: the next dial waits for the retry interval.
    dst.handle_state_disconnected(1, now);
    let t = dst.poll_timeout().expect("a retry is due later");
    assert!(t >= now + retry, "{t:?}");
    dst.handle_timeout(now + retry / 2);
    assert_eq!(dst.poll_state_dial(), None, "dialed again at once");
    dst.handle_timeout(now + retry);
    assert_eq!(
        dst.poll_state_dial().map(|d| d.chassis),
        Some("hv1".to_string())
    );
    // A failed dial waits for the retry interval too.
    dst.handle_state_dial_failed("hv1", "cannot connect", now + retry);
    assert!(dst.poll_timeout().is_some_and(|t| t >= now + retry * 2));
}

proptest::proptest! {
    #[test]
    fn state_channel_garbage_never_panics(
        data in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
        hello_first in proptest::bool::ANY,
    ) {
        let (mut src, _) = pair(MigrationConfig::default());
        src.handle_state_connected(3, None, None, ms(1));
        if hello_first {
            let hello = StateMsg::Hello {
                version: hf_datapath::migrate::STATE_VERSION,
                chassis: "hv2".into(),
            };
            src.handle_state_bytes(3, &encode(&hello).expect("encodes"), ms(1));
        }
        src.handle_state_bytes(3, &data, ms(2));
        src.handle_timeout(ms(100));
        while src.poll_state_transmit().is_some() {}
    }
}
