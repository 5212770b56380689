//! Two `Datapath`s with the example program exchanging Geneve: cross-chassis delivery with the
//! exact bytes, conntrack surviving a controller disconnect and a new program, zone flushes,
//! the hello's version check, state export/import, and garbage never panicking.

#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, icmp_echo, tcp_frame};
use hf_datapath::example::{self, VM1_IP, VM1_MAC, VM2_IP, VM2_MAC};
use hf_datapath::proto::{
    Decoder, FromDatapath, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, ProgramMsg, ToDatapath, encode,
};
use hf_datapath::{Datapath, DatapathConfig, Transmit};
use hf_wire::tcp_flags::{ACK, PSH, SYN};

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Sends `msgs` on `dp`'s control session and returns its answers.
fn ctl(dp: &mut Datapath, msgs: &[ToDatapath], now: Duration) -> Vec<FromDatapath> {
    for m in msgs {
        dp.handle_control_bytes(&encode(m).unwrap(), now);
    }
    let mut d = Decoder::<FromDatapath>::new();
    while let Some(b) = dp.poll_control_transmit() {
        d.push(&b);
    }
    let mut out = Vec::new();
    while let Some(m) = d.next_msg().unwrap() {
        out.push(m);
    }
    out
}

fn hello(chassis: &str) -> ToDatapath {
    ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: chassis.into(),
    }
}

fn chassis(hv: u32) -> Datapath {
    example::chassis(hv, IPS)
}

fn connect_and_program(dp: &mut Datapath, hv: u32, generation: u64, now: Duration) {
    dp.handle_control_connected(now);
    let ans = ctl(
        dp,
        &[
            hello(&format!("hv{hv}")),
            ToDatapath::Program(Box::new(example::program(generation, hv, IPS))),
        ],
        now,
    );
    assert!(
        matches!(ans.last(), Some(FromDatapath::Installed { generation: g, flow_errors }) if *g == generation && flow_errors.is_empty()),
        "{ans:?}"
    );
}

struct Net {
    dps: [Datapath; 2],
}

impl Net {
    fn new() -> Net {
        let mut n = Net {
            dps: [chassis(1), chassis(2)],
        };
        connect_and_program(&mut n.dps[0], 1, 1, ms(0));
        connect_and_program(&mut n.dps[1], 2, 1, ms(0));
        n
    }

    /// Injects `frame` on `port` of chassis `hv`, carries tunnel packets between the chassis
    /// until quiet, and returns what came out of local ports as (chassis, port, frame).
    fn send(
        &mut self,
        hv: usize,
        port: &str,
        frame: &[u8],
        now: Duration,
    ) -> Vec<(usize, String, Vec<u8>)> {
        self.dps[hv - 1].handle_port_frame(port, frame, now);
        self.carry(now)
    }

    /// [`Net::send`] through a port handle.
    fn send_at(
        &mut self,
        hv: usize,
        port: hf_datapath::PortHandle,
        frame: &[u8],
        now: Duration,
    ) -> Vec<(usize, String, Vec<u8>)> {
        self.dps[hv - 1].handle_port_frame_at(port, frame, now);
        self.carry(now)
    }

    /// Carries tunnel packets between the chassis until quiet; returns what came out of local
    /// ports.
    fn carry(&mut self, now: Duration) -> Vec<(usize, String, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            let mut moved = false;
            for i in 0..2 {
                while let Some(t) = self.dps[i].poll_transmit() {
                    moved = true;
                    match t {
                        Transmit::Port { port, frame } => out.push((i + 1, port, frame)),
                        Transmit::Tunnel { dst, payload } => {
                            let j = IPS
                                .iter()
                                .position(|ip| *ip == dst)
                                .expect("known tunnel IP");
                            assert_ne!(i, j, "a chassis tunnels to itself");
                            let src = IPS[i];
                            self.dps[j].handle_tunnel(src, &payload, now);
                        }
                        Transmit::Mirror { dst, .. } => panic!("no mirror is set up: {dst}"),
                    }
                }
            }
            if !moved {
                return out;
            }
        }
    }
}

fn swap_macs(mut f: Vec<u8>) -> Vec<u8> {
    let (a, b) = f.split_at_mut(6);
    a.swap_with_slice(&mut b[..6]);
    f
}

/// A TCP segment between vm1 and vm2 (vm1 → vm2 when `from1`).
fn tcp(from1: bool, flags: u16, seq: u32, ack: u32, payload: usize) -> Vec<u8> {
    let (v1, v2) = ((IpAddr::V4(VM1_IP), 40000), (IpAddr::V4(VM2_IP), 80));
    if from1 {
        tcp_frame(&Seg::new(v1, v2, flags, (seq, ack), payload))
    } else {
        swap_macs(tcp_frame(&Seg::new(v2, v1, flags, (seq, ack), payload)))
    }
}

/// Handshake vm1 → vm2; returns the next sequence numbers (vm1's, vm2's).
fn handshake(n: &mut Net, now: Duration) -> (u32, u32) {
    let got = n.send(1, "vm1", &tcp(true, SYN, 1000, 0, 0), now);
    assert_eq!(got.len(), 1, "SYN delivered: {got:?}");
    let got = n.send(2, "vm2", &tcp(false, SYN | ACK, 5000, 1001, 0), now);
    assert_eq!(got.len(), 1, "SYN-ACK delivered: {got:?}");
    let got = n.send(1, "vm1", &tcp(true, ACK, 1001, 5001, 0), now);
    assert_eq!(got.len(), 1, "ACK delivered: {got:?}");
    (1001, 5001)
}

#[test]
fn frame_crosses_chassis_with_its_bytes() {
    let mut n = Net::new();
    // ARP request (broadcast): flooded to vm2 through the tunnel, unchanged.
    let mut arp = Vec::new();
    hf_wire::reply::arp_request(&mut arp, hf_wire::EthAddr(VM1_MAC), VM1_IP, VM2_IP);
    let got = n.send(1, "vm1", &arp, ms(1));
    assert_eq!(got, vec![(2, "vm2".to_string(), arp.clone())]);
    // ICMP echo vm1 → vm2 and its reply back.
    let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 7, false);
    let got = n.send(1, "vm1", &ping, ms(2));
    assert_eq!(got, vec![(2, "vm2".to_string(), ping.clone())]);
    let pong = swap_macs(icmp_echo(VM2_IP.into(), VM1_IP.into(), 7, true));
    let got = n.send(2, "vm2", &pong, ms(3));
    assert_eq!(got, vec![(1, "vm1".to_string(), pong.clone())]);
    // A new connection from vm2 is refused by the policy (the oracle can fail).
    let ping2 = swap_macs(icmp_echo(VM2_IP.into(), VM1_IP.into(), 9, false));
    assert!(n.send(2, "vm2", &ping2, ms(4)).is_empty());
    let c1 = n.dps[0].counters();
    assert_eq!((c1.rx_port, c1.tx_tunnel), (2, 2));
    let c2 = n.dps[1].counters();
    assert_eq!(c2.rx_tunnel, 2);
    assert!(c2.dropped >= 1);
}

#[test]
fn established_tcp_survives_disconnect_and_new_program() {
    let mut n = Net::new();
    let (s1, s2) = handshake(&mut n, ms(10));
    // The controller of hv1 goes away: nothing changes.
    n.dps[0].handle_control_disconnected(ms(20));
    let data = tcp(true, ACK | PSH, s1, s2, 100);
    let got = n.send(1, "vm1", &data, ms(30));
    assert_eq!(got, vec![(2, "vm2".to_string(), data)]);
    // A new controller pushes a new program with the same zones (one extra flow).
    n.dps[0].handle_control_connected(ms(40));
    let ans = ctl(&mut n.dps[0], &[hello("hv1")], ms(40));
    match &ans[..] {
        [
            FromDatapath::Hello {
                zones,
                program,
                ports,
                ..
            },
        ] => {
            assert_eq!(zones, &example::program(1, 1, IPS).zones);
            assert_eq!(program.as_ref().map(|p| p.generation), Some(1));
            assert_eq!(ports.len(), 1);
        }
        other => panic!("hello answer: {other:?}"),
    }
    let mut p2 = example::program(2, 1, IPS);
    let extra = hf_datapath::proto::FlowMsg {
        table: 2,
        priority: 10,
        matches: "udp.dst == 9".into(),
        actions: "drop;".into(),
        id: "extra".into(),
        ..Default::default()
    };
    std::sync::Arc::make_mut(&mut p2.datapaths[0])
        .flows
        .push(extra.into());
    let ans = ctl(&mut n.dps[0], &[ToDatapath::Program(Box::new(p2))], ms(41));
    assert!(
        matches!(ans[..], [FromDatapath::Installed { generation: 2, .. }]),
        "{ans:?}"
    );
    assert_eq!(n.dps[0].generation(), 2);
    // The connection keeps working both ways.
    let data = tcp(true, ACK | PSH, s1 + 100, s2, 10);
    assert_eq!(n.send(1, "vm1", &data, ms(50)).len(), 1);
    let back = tcp(false, ACK | PSH, s2, s1 + 110, 20);
    let got = n.send(2, "vm2", &back, ms(51));
    assert_eq!(got, vec![(1, "vm1".to_string(), back)]);
    // A connection vm2 opens is still refused.
    let syn = swap_macs(tcp_frame(&Seg::new(
        (VM2_IP.into(), 41000),
        (VM1_IP.into(), 22),
        SYN,
        (1, 0),
        0,
    )));
    assert!(n.send(2, "vm2", &syn, ms(52)).is_empty());
}

#[test]
fn flush_refuses_zone_zero_and_unknown_names() {
    let mut n = Net::new();
    handshake(&mut n, ms(10));
    let entries = n.dps[0].counters().conntrack_entries;
    assert!(entries >= 1);
    let dp = &mut n.dps[0];
    let ans = ctl(
        dp,
        &[ToDatapath::FlushZones {
            names: vec!["lsp/nosuch".into()],
        }],
        ms(11),
    );
    assert!(
        matches!(&ans[..], [FromDatapath::Error { message }] if message.contains("lsp/nosuch")),
        "{ans:?}"
    );
    // A program giving some name zone 0 is rejected, so zone 0 never enters the map.
    let mut bad = example::program(5, 1, IPS);
    bad.zones.insert("host".into(), 0);
    let ans = ctl(dp, &[ToDatapath::Program(Box::new(bad))], ms(12));
    assert!(
        matches!(&ans[..], [FromDatapath::Rejected { generation: 5, reason }] if reason.contains("zone 0")),
        "{ans:?}"
    );
    assert_eq!(dp.generation(), 1);
    assert!(!dp.zones().values().any(|z| *z == 0));
    // A zone map from local storage with zone 0 drops that entry.
    let mut cfg = DatapathConfig::new("hvx", IPS[0]);
    cfg.zones.insert("host".into(), 0);
    cfg.zones.insert("lsp/a".into(), 3);
    let other = Datapath::new(cfg);
    assert_eq!(other.zones().len(), 1);
    // Nothing was flushed by the refusals.
    assert_eq!(dp.counters().conntrack_entries, entries);
    let ans = ctl(
        dp,
        &[ToDatapath::FlushZones {
            names: vec!["lsp/vm1".into()],
        }],
        ms(13),
    );
    assert!(
        matches!(&ans[..], [FromDatapath::Flushed { entries: e, .. }] if *e == entries),
        "{ans:?}"
    );
    assert_eq!(dp.counters().conntrack_entries, 0);
    assert!(!dp.zones().contains_key("lsp/vm1"));
    assert!(dp.take_zones_changed());
}

#[test]
fn hello_with_another_version_is_refused() {
    let mut dp = chassis(1);
    dp.handle_control_connected(ms(0));
    let ans = ctl(
        &mut dp,
        &[ToDatapath::Hello {
            version: PROTOCOL_VERSION + 1,
            chassis: "hv1".into(),
        }],
        ms(0),
    );
    assert!(
        matches!(&ans[..], [FromDatapath::Error { message }] if message.contains("version")),
        "{ans:?}"
    );
    assert!(dp.control_wants_close());
    // Requests after the refusal are not served.
    assert!(ctl(&mut dp, &[ToDatapath::Ping { seq: 1 }], ms(1)).is_empty());
    // Another chassis's controller, and a request before the hello, are refused too.
    dp.handle_control_connected(ms(2));
    let ans = ctl(&mut dp, &[hello("hv9")], ms(2));
    assert!(
        matches!(&ans[..], [FromDatapath::Error { message }] if message.contains("hv9")),
        "{ans:?}"
    );
    dp.handle_control_connected(ms(3));
    let ans = ctl(&mut dp, &[ToDatapath::GetCounters], ms(3));
    assert!(
        matches!(&ans[..], [FromDatapath::Error { message }] if message.contains("hello")),
        "{ans:?}"
    );
    dp.handle_control_connected(ms(4));
    let ans = ctl(
        &mut dp,
        &[hello("hv1"), ToDatapath::Ping { seq: 42 }],
        ms(4),
    );
    assert!(
        matches!(
            &ans[..],
            [FromDatapath::Hello { .. }, FromDatapath::Pong { seq: 42 }]
        ),
        "{ans:?}"
    );
}

#[test]
fn export_import_keeps_connections() {
    let mut n = Net::new();
    let (s1, s2) = handshake(&mut n, ms(10));
    let ans = ctl(&mut n.dps[0], &[ToDatapath::ExportState], ms(20));
    let [FromDatapath::Exported(state)] = &ans[..] else {
        panic!("{ans:?}")
    };
    assert_eq!(*state, Box::new(n.dps[0].export_state(ms(20))));
    // A new process for hv1 takes over.
    let mut fresh = chassis(1);
    fresh.import_state((**state).clone(), ms(21)).unwrap();
    assert_eq!(fresh.generation(), 1);
    assert_eq!(fresh.zones(), n.dps[0].zones());
    assert_eq!(
        fresh.counters().conntrack_entries,
        n.dps[0].counters().conntrack_entries
    );
    let before = n.dps[0].dump_conntrack(Some("lsp/vm1"), ms(21)).unwrap();
    assert_eq!(
        before,
        vec!["tcp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=40000,dport=80),reply=(src=10.0.0.2,dst=10.0.0.1,sport=80,dport=40000),zone=1,protoinfo=(state=ESTABLISHED)".to_string()]
    );
    assert_eq!(
        fresh.dump_conntrack(Some("lsp/vm1"), ms(21)).unwrap(),
        before
    );
    n.dps[0] = fresh;
    let back = tcp(false, ACK | PSH, s2, s1, 20);
    assert_eq!(n.send(2, "vm2", &back, ms(30)).len(), 1);
    let data = tcp(true, ACK | PSH, s1, s2 + 20, 20);
    assert_eq!(n.send(1, "vm1", &data, ms(31)).len(), 1);
    assert_eq!(
        n.dps[0].dump_conntrack(Some("lsp/vm1"), ms(32)).unwrap(),
        before
    );
    // A corrupt export is an error and changes nothing.
    let mut broken = (**state).clone();
    broken.conntrack = vec![0xff; 3];
    let mut d = chassis(1);
    assert!(d.import_state(broken, ms(1)).is_err());
    assert_eq!(d.generation(), 0);
}

/// A takeover (`holdfast datapath --takeover`): a version-4 peer (a controller) may not ask
/// for it; a version-5 one gets the whole state, after which the old process forwards nothing
/// (the connections continue in the process that imported them, not in two places).
#[test]
fn a_takeover_exports_the_state_and_the_old_process_forwards_no_more() {
    let mut n = Net::new();
    let (s1, s2) = handshake(&mut n, ms(10));
    n.dps[0].handle_control_connected(ms(11));
    let v4 = ToDatapath::Hello {
        version: MIN_PROTOCOL_VERSION,
        chassis: "hv1".into(),
    };
    let ans = ctl(&mut n.dps[0], &[v4, ToDatapath::TakeOver], ms(11));
    assert!(
        matches!(ans.last(), Some(FromDatapath::Error { message }) if message.contains("version 5")),
        "{ans:?}"
    );
    assert!(!n.dps[0].handed_over());
    let data = tcp(true, ACK | PSH, s1, s2, 20);
    assert_eq!(n.send(1, "vm1", &data, ms(12)).len(), 1);
    n.dps[0].handle_control_connected(ms(13));
    let ans = ctl(&mut n.dps[0], &[hello("hv1"), ToDatapath::TakeOver], ms(13));
    let Some(FromDatapath::Exported(state)) = ans.last() else {
        panic!("{ans:?}")
    };
    assert!(n.dps[0].handed_over());
    let dropped = n.dps[0].counters().dropped;
    let more = tcp(true, ACK | PSH, s1 + 20, s2, 20);
    assert!(n.send(1, "vm1", &more, ms(14)).is_empty());
    assert_eq!(n.dps[0].counters().dropped, dropped + 1);
    let mut fresh = chassis(1);
    fresh.import_state((**state).clone(), ms(15)).unwrap();
    n.dps[0] = fresh;
    assert_eq!(n.send(1, "vm1", &more, ms(16)).len(), 1);
    let back = tcp(false, ACK | PSH, s2, s1 + 40, 10);
    assert_eq!(n.send(2, "vm2", &back, ms(17)).len(), 1);
}

/// An export whose conntrack decodes but holds a corrupt connection is refused whole: the
/// target keeps its program, zone map, connections and activations. (Installing the program
/// first and skipping the bad connection would change the program and answer Ok.)
#[test]
fn a_corrupt_connection_in_an_export_changes_nothing() {
    let mut n = Net::new();
    let _ = handshake(&mut n, ms(10));
    let mut state = n.dps[0].export_state(ms(20));
    let mut ct: hf_conntrack::CtExport = postcard::from_bytes(&state.conntrack).unwrap();
    assert!(!ct.conns.is_empty() && ct.first_malformed().is_none());
    let last = ct.conns.len() - 1;
    ct.conns[last].reply.zone = ct.conns[last].orig.zone.wrapping_add(1);
    state.conntrack = postcard::to_allocvec(&ct).unwrap();
    if let Some(p) = state.program.as_mut() {
        p.generation = 99;
    }
    state.zones.insert("lsp/held".into(), 77);
    state.activated.push("vm9".into());
    // hv1's datapath itself is the target (its own state, a different generation to come).
    let dp = &mut n.dps[0];
    let (generation, zones, program) = (dp.generation(), dp.zones().clone(), dp.program().cloned());
    let conns = dp.dump_conntrack(None, ms(21)).unwrap();
    let e = dp.import_state(state, ms(21)).unwrap_err();
    assert!(
        e.contains("malformed") && e.contains("nothing imported"),
        "{e}"
    );
    assert_eq!(dp.generation(), generation);
    assert_eq!(dp.zones(), &zones);
    assert_eq!(dp.program().cloned(), program);
    assert_eq!(dp.dump_conntrack(None, ms(21)).unwrap(), conns);
    assert_eq!(dp.export_state(ms(21)).activated, Vec::<String>::new());
}

/// The imported zone map is the export's, not the program's nor the new process's own: a name
/// held beyond the program (a deleted port in its flush grace) comes along.
#[test]
fn an_import_adopts_the_exported_zone_map_with_its_held_names() {
    let mut n = Net::new();
    let _ = handshake(&mut n, ms(10));
    let mut state = n.dps[0].export_state(ms(20));
    state.zones.insert("lsp/held".into(), 77);
    let mut fresh = chassis(1);
    fresh.import_state(state.clone(), ms(21)).unwrap();
    assert_eq!(fresh.zones(), &state.zones);
    assert_eq!(fresh.zones()["lsp/held"], 77);
}

#[test]
fn port_added_after_the_program_gets_traffic() {
    let mut dp = Datapath::new(DatapathConfig::new("hv2", IPS[1]));
    connect_and_program(&mut dp, 2, 1, ms(0));
    let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 7, false);
    let mut g = Vec::new();
    hf_wire::geneve::GeneveRepr {
        meta: hf_wire::geneve::OvnMetadata {
            datapath: 1,
            ports: Some(hf_wire::geneve::PortKeys {
                ingress: 1,
                egress: 2,
            }),
        },
        oam: false,
    }
    .emit(&mut g);
    g.extend_from_slice(&ping);
    dp.handle_tunnel(IPS[0], &g, ms(1));
    assert_eq!(dp.poll_transmit(), None);
    dp.add_port("vm2", Some(VM2_MAC));
    let ans = ctl(&mut dp, &[], ms(2));
    assert!(
        matches!(&ans[..], [FromDatapath::PortAdded(p)] if p.name == "vm2"),
        "{ans:?}"
    );
    dp.handle_tunnel(IPS[0], &g, ms(3));
    assert_eq!(
        dp.poll_transmit(),
        Some(Transmit::Port {
            port: "vm2".into(),
            frame: ping
        })
    );
}

#[test]
fn bad_flow_keeps_last_good_version() {
    let mut dp = chassis(1);
    dp.handle_control_connected(ms(0));
    let mut p: ProgramMsg = example::program(1, 1, IPS);
    // The L2 flow to vm2 is broken; its last good version still forwards.
    let f = std::sync::Arc::make_mut(&mut p.datapaths[0])
        .flows
        .iter_mut()
        .find(|f| f.actions.contains("\"vm2\""))
        .unwrap();
    let f = std::sync::Arc::make_mut(f);
    f.last_good = Some((f.matches.clone(), f.actions.clone()));
    f.actions = "outport = \"vm2\"; outptu;".into();
    let ans = ctl(
        &mut dp,
        &[hello("hv1"), ToDatapath::Program(Box::new(p))],
        ms(0),
    );
    match &ans[..] {
        [_, FromDatapath::Installed { flow_errors, .. }] => {
            assert_eq!(flow_errors.len(), 1, "{flow_errors:?}");
            assert!(flow_errors[0].kept_last_good);
        }
        other => panic!("{other:?}"),
    }
    let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 7, false);
    dp.handle_port_frame("vm1", &ping, ms(1));
    assert!(matches!(dp.poll_transmit(), Some(Transmit::Tunnel { dst, .. }) if dst == IPS[1]));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]
    #[test]
    fn garbage_never_panics(
        ctl_bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        frames in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..120), 0..8),
        after_hello in proptest::bool::ANY,
    ) {
        let mut n = Net::new();
        let dp = &mut n.dps[0];
        dp.handle_control_connected(ms(1));
        if after_hello {
            ctl(dp, &[hello("hv1")], ms(1));
        }
        dp.handle_control_bytes(&ctl_bytes, ms(2));
        while dp.poll_control_transmit().is_some() {}
        for (i, f) in frames.iter().enumerate() {
            n.send(1, "vm1", f, ms(3 + i as u64));
            n.dps[1].handle_tunnel(IPS[0], f, ms(3 + i as u64));
            // A valid Geneve header in front of garbage.
            let mut g = vec![0x02, 0x40, 0x65, 0x58, 0, 0, 1, 0, 0x01, 0x02, 0x80, 0x01, 0, 1, 0, 2];
            g.extend_from_slice(f);
            n.dps[1].handle_tunnel(IPS[0], &g, ms(3 + i as u64));
            while n.dps[1].poll_transmit().is_some() {}
        }
        // Still forwarding.
        let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 77, false);
        let got = n.send(1, "vm1", &ping, ms(100));
        proptest::prop_assert_eq!(got.len(), 1);
    }
}

/// vm1's RARP (what a migrated VM announces itself with).
fn vm1_rarp() -> Vec<u8> {
    let mut rarp = Vec::new();
    hf_wire::reply::arp_request(&mut rarp, hf_wire::EthAddr(VM1_MAC), VM1_IP, VM1_IP);
    rarp[12..14].copy_from_slice(&[0x80, 0x35]);
    rarp[20..22].copy_from_slice(&[0, 3]);
    rarp
}

#[test]
fn rarp_activation_and_learned_neighbours_reach_the_controller() {
    let mut dp = chassis(1);
    dp.handle_control_connected(ms(0));
    let mut p = example::program(1, 1, IPS);
    std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p.datapaths[0]).ports)[0]
        .activation = Some(hf_datapath::proto::ActivationMsg {
        rarp: true,
        ..Default::default()
    });
    std::sync::Arc::make_mut(&mut p.datapaths[0]).flows.push(
        hf_datapath::proto::FlowMsg {
            table: 0,
            priority: 50,
            matches: "arp".into(),
            actions: "put_arp(inport, arp.spa, arp.sha); next;".into(),
            id: "learn".into(),
            ..Default::default()
        }
        .into(),
    );
    let ans = ctl(
        &mut dp,
        &[hello("hv1"), ToDatapath::Program(Box::new(p))],
        ms(0),
    );
    assert!(
        matches!(&ans[..], [_, FromDatapath::Installed { flow_errors, .. }] if flow_errors.is_empty()),
        "{ans:?}"
    );
    // Waiting for activation: vm1's frames are dropped.
    let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 7, false);
    dp.handle_port_frame("vm1", &ping, ms(1));
    assert_eq!(dp.poll_transmit(), None);
    // Its RARP activates it, and the controller hears so.
    let rarp = vm1_rarp();
    dp.handle_port_frame("vm1", &rarp, ms(2));
    while dp.poll_transmit().is_some() {}
    let ans = ctl(&mut dp, &[], ms(2));
    assert!(
        ans.contains(&FromDatapath::PortActivated { port: "vm1".into() }),
        "{ans:?}"
    );
    dp.handle_port_frame("vm1", &ping, ms(3));
    assert!(matches!(dp.poll_transmit(), Some(Transmit::Tunnel { .. })));
    // An ARP from vm1 teaches the pipeline its binding: the controller gets it for MAC_Binding.
    let mut arp = Vec::new();
    hf_wire::reply::arp_request(&mut arp, hf_wire::EthAddr(VM1_MAC), VM1_IP, VM2_IP);
    dp.handle_port_frame("vm1", &arp, ms(4));
    while dp.poll_transmit().is_some() {}
    let learned = |mac: [u8; 6]| {
        FromDatapath::Learned(vec![hf_datapath::proto::LearnedNeighbour {
            datapath: "sw0".into(),
            port: "vm1".into(),
            ip: "10.0.0.1".into(),
            mac,
        }])
    };
    assert_eq!(ctl(&mut dp, &[], ms(4)), vec![learned(VM1_MAC)]);
    // Learned while no controller is connected: delivered after the next hello.
    dp.handle_control_disconnected(ms(5));
    let moved = [2, 0, 0, 0, 0, 0x11];
    let mut arp = Vec::new();
    hf_wire::reply::arp_request(&mut arp, hf_wire::EthAddr(moved), VM1_IP, VM2_IP);
    dp.handle_port_frame("vm1", &arp, ms(6));
    while dp.poll_transmit().is_some() {}
    dp.handle_control_connected(ms(7));
    let ans = ctl(&mut dp, &[hello("hv1")], ms(7));
    // The activation is reported again: the program still says vm1 waits, so the controller
    // before may not have written it to SB.
    assert!(
        matches!(&ans[..], [FromDatapath::Hello { .. }, l, FromDatapath::PortActivated { port }]
            if *l == learned(moved) && port == "vm1"),
        "{ans:?}"
    );
}

/// A DHCPDISCOVER from `vm1` (client MAC VM1_MAC, transaction 0x01020304).
fn dhcp_discover() -> Vec<u8> {
    let mut b = vec![0u8; 236];
    b[0] = 1; // BOOTREQUEST
    b[1] = 1; // Ethernet
    b[2] = 6;
    b[4..8].copy_from_slice(&[1, 2, 3, 4]);
    b[10] = 0x80; // broadcast flag
    b[28..34].copy_from_slice(&VM1_MAC);
    b.extend_from_slice(&[99, 130, 83, 99]); // magic cookie
    b.extend_from_slice(&[53, 1, 1]); // DHCPDISCOVER
    b.push(255);
    let mut udp = Vec::new();
    udp.extend_from_slice(&68u16.to_be_bytes());
    udp.extend_from_slice(&67u16.to_be_bytes());
    udp.extend_from_slice(&((8 + b.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&b);
    let mut f = Vec::new();
    hf_wire::reply::ip_packet(
        &mut f,
        hf_wire::EthAddr(VM1_MAC),
        hf_wire::EthAddr([0xff; 6]),
        Ipv4Addr::UNSPECIFIED.into(),
        Ipv4Addr::BROADCAST.into(),
        hf_wire::ip_proto::UDP,
        &udp,
    )
    .unwrap();
    f
}

#[test]
fn dhcp_is_answered_in_the_datapath() {
    let mut dp = chassis(1);
    dp.handle_control_connected(ms(0));
    let mut p = example::program(1, 1, IPS);
    let flow = |table: u8, priority: u16, m: &str, a: &str| {
        hf_datapath::proto::FlowMsg {
            table,
            priority,
            matches: m.into(),
            actions: a.into(),
            id: format!("dhcp-{table}").into(),
            ..Default::default()
        }
        .into()
    };
    // ovn-northd's ls_in_dhcp_options / ls_in_dhcp_response shape, ahead of the example's
    // tables (priority above them in tables 0 and 1).
    std::sync::Arc::make_mut(&mut p.datapaths[0]).flows.push(flow(
        0,
        200,
        "inport == \"vm1\" && eth.src == 02:00:00:00:00:01 && ip4.src == 0.0.0.0 && ip4.dst == 255.255.255.255 && udp.src == 68 && udp.dst == 67",
        "reg0[3] = put_dhcp_opts(offerip = 10.0.0.1, router = 10.0.0.254, netmask = 255.255.255.0, server_id = 10.0.0.254, lease_time = 3600); next;",
    ));
    std::sync::Arc::make_mut(&mut p.datapaths[0]).flows.push(flow(
        1,
        65535,
        "inport == \"vm1\" && eth.src == 02:00:00:00:00:01 && ip4 && udp.src == 68 && udp.dst == 67 && reg0[3]",
        "eth.dst = eth.src; eth.src = 02:00:00:00:00:fe; ip4.dst = 10.0.0.1; ip4.src = 10.0.0.254; udp.src = 67; udp.dst = 68; outport = inport; flags.loopback = 1; output;",
    ));
    let ans = ctl(
        &mut dp,
        &[hello("hv1"), ToDatapath::Program(Box::new(p))],
        ms(0),
    );
    assert!(
        matches!(&ans[..], [_, FromDatapath::Installed { flow_errors, .. }] if flow_errors.is_empty()),
        "{ans:?}"
    );
    dp.handle_port_frame("vm1", &dhcp_discover(), ms(1));
    let Some(Transmit::Port { port, frame }) = dp.poll_transmit() else {
        panic!("no DHCP reply")
    };
    assert_eq!(port, "vm1");
    assert_eq!(&frame[0..6], &VM1_MAC, "to the client");
    assert_eq!(
        &frame[26..34],
        &[10, 0, 0, 254, 10, 0, 0, 1],
        "IP source and destination"
    );
    assert_eq!(&frame[34..38], &[0, 67, 0, 68], "UDP ports");
    let bootp = &frame[42..];
    assert_eq!(bootp[0], 2, "BOOTREPLY");
    assert_eq!(&bootp[4..8], &[1, 2, 3, 4], "transaction id");
    assert_eq!(&bootp[16..20], &[10, 0, 0, 1], "yiaddr");
    let opts = &bootp[240..];
    assert_eq!(&opts[..3], &[53, 1, 2], "DHCPOFFER first");
    assert_eq!(dp.counters().packet_in, 1);
}

/// A program that changes only a flow (same ports, same sets) takes effect: the datapath's
/// spec cache must not reuse the old datapath's tables. Also across a port change
/// (the recompile that reuses the cached specs) and back again.
#[test]
fn changed_flow_on_unchanged_ports_takes_effect() {
    let mut dp = chassis(1);
    connect_and_program(&mut dp, 1, 1, ms(0));
    let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 7, false);
    let forwards = |dp: &mut Datapath, now: Duration| {
        dp.handle_port_frame("vm1", &ping, now);
        let out = dp.poll_transmit();
        while dp.poll_transmit().is_some() {}
        matches!(out, Some(Transmit::Tunnel { dst, .. }) if dst == IPS[1])
    };
    assert!(forwards(&mut dp, ms(1)), "program 1 forwards to vm2");
    let mut p: ProgramMsg = example::program(2, 1, IPS);
    let f = std::sync::Arc::make_mut(&mut p.datapaths[0])
        .flows
        .iter_mut()
        .find(|f| f.actions.contains("\"vm2\""))
        .unwrap();
    let f = std::sync::Arc::make_mut(f);
    f.actions = "drop;".into();
    let ans = ctl(&mut dp, &[ToDatapath::Program(Box::new(p))], ms(2));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 2, .. }]),
        "{ans:?}"
    );
    assert!(
        !forwards(&mut dp, ms(3)),
        "program 2 drops what goes to vm2"
    );
    // A port change recompiles from the cached specs: still program 2.
    dp.add_port("vm9", None);
    let _ = ctl(&mut dp, &[], ms(4));
    assert!(!forwards(&mut dp, ms(5)), "program 2 after a port change");
    let ans = ctl(
        &mut dp,
        &[ToDatapath::Program(Box::new(example::program(3, 1, IPS)))],
        ms(6),
    );
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 3, .. }]),
        "{ans:?}"
    );
    assert!(forwards(&mut dp, ms(7)), "program 3 forwards again");
}

/// A port handle carries frames as the port's name does, and names only the port it was made
/// for: after the port is removed (even added again under its name) its frames are dropped and
/// logged, and the new port's handle is another.
#[test]
fn a_port_handle_names_one_port() {
    let mut n = Net::new();
    assert_eq!(n.dps[0].port_handle("vm9"), None);
    let h = n.dps[0].port_handle("vm1").expect("vm1 is here");
    let syn = tcp(true, SYN, 1000, 0, 0);
    let got = n.send_at(1, h, &syn, ms(1));
    assert_eq!(got.len(), 1, "SYN delivered through the handle: {got:?}");
    assert_eq!(got[0].1, "vm2");
    // The same bytes as by name.
    let mut m = Net::new();
    assert_eq!(m.send(1, "vm1", &syn, ms(1)), got);
    let c = n.dps[0].counters();
    assert_eq!((c.rx_port, c.dropped), (1, 0));
    while n.dps[0].poll_log().is_some() {}
    n.dps[0].remove_port("vm1");
    n.dps[0].add_port("vm1", Some(VM1_MAC));
    let h2 = n.dps[0].port_handle("vm1").expect("vm1 is back");
    assert_ne!(h, h2, "a new port gets a new handle");
    let got = n.send_at(1, h, &tcp(true, ACK, 1001, 5001, 0), ms(2));
    assert!(got.is_empty(), "a stale handle delivers nothing: {got:?}");
    let c = n.dps[0].counters();
    assert_eq!((c.rx_port, c.dropped), (2, 1));
    let mut logs = Vec::new();
    while let Some((_, l)) = n.dps[0].poll_log() {
        logs.push(l);
    }
    assert!(
        logs.iter().any(|l| l.contains("removed port")),
        "the drop is logged: {logs:?}"
    );
}

/// A port activated here counts as resident (`is_chassis_resident()`) from its activation on,
/// as ovn-controller counts a port it claimed, not only once the controller's next program
/// says so (SB's `additional-chassis-activated` takes a round trip): a migrated VM's first
/// frames must not miss what only its resident chassis does (its distributed NAT).
#[test]
fn a_port_activated_here_is_resident_before_the_controller_says_so() {
    let mut dp = chassis(1);
    dp.handle_control_connected(ms(0));
    let mut p = example::program(1, 1, IPS);
    let d = std::sync::Arc::make_mut(&mut p.datapaths[0]);
    let vm1 = &mut std::sync::Arc::make_mut(&mut d.ports)[0];
    vm1.resident = false;
    vm1.activation = Some(hf_datapath::proto::ActivationMsg {
        rarp: true,
        ..Default::default()
    });
    d.flows.push(
        hf_datapath::proto::FlowMsg {
            table: 0,
            priority: 200,
            matches: "ip4 && !is_chassis_resident(\"vm1\")".into(),
            actions: "drop;".into(),
            id: "not-resident".into(),
            ..Default::default()
        }
        .into(),
    );
    let ans = ctl(
        &mut dp,
        &[hello("hv1"), ToDatapath::Program(Box::new(p.clone()))],
        ms(0),
    );
    assert!(
        matches!(&ans[..], [_, FromDatapath::Installed { flow_errors, .. }] if flow_errors.is_empty()),
        "{ans:?}"
    );
    let rarp = vm1_rarp();
    dp.handle_port_frame("vm1", &rarp, ms(2));
    while dp.poll_transmit().is_some() {}
    // Activated, and the program still says vm1 is not resident: it is, here.
    let ping = icmp_echo(VM1_IP.into(), VM2_IP.into(), 7, false);
    dp.handle_port_frame("vm1", &ping, ms(3));
    assert!(
        matches!(dp.poll_transmit(), Some(Transmit::Tunnel { .. })),
        "vm1's frame after its activation was dropped as not resident"
    );
    // The controller's next program says so too: nothing changes.
    let d = std::sync::Arc::make_mut(&mut p.datapaths[0]);
    let vm1 = &mut std::sync::Arc::make_mut(&mut d.ports)[0];
    vm1.resident = true;
    vm1.activation = None;
    p.generation = 2;
    let ans = ctl(&mut dp, &[ToDatapath::Program(Box::new(p))], ms(4));
    assert!(
        matches!(
            ans.last(),
            Some(FromDatapath::Installed { generation: 2, .. })
        ),
        "{ans:?}"
    );
    dp.handle_port_frame("vm1", &ping, ms(5));
    assert!(matches!(dp.poll_transmit(), Some(Transmit::Tunnel { .. })));
}
