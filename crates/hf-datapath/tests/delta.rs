//! Program deltas on a datapath (protocol version 4): a delta that changes one datapath parses
//! and compiles only that one and leaves forwarding and conntrack of the others alone; a delta
//! against another base, one that does not fit, or one whose result does not compile changes
//! nothing; a datapath held at earlier flows asks for the whole program.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_datapath::example::{self, VM1_IP, VM2_IP};
use hf_datapath::proto::{
    Decoder, FlowMsg, FromDatapath, LocationMsg, PROTOCOL_VERSION, PortMsg, ProgramMsg, ToDatapath,
    between, encode,
};
use hf_datapath::{Datapath, Transmit};
use hf_wire::tcp_flags::SYN;

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ctl(dp: &mut Datapath, msgs: &[ToDatapath], now: Duration) -> Vec<FromDatapath> {
    for m in msgs {
        dp.handle_control_bytes(&encode(m).unwrap(), now);
    }
    let mut d = Decoder::<FromDatapath>::new();
    while let Some(b) = dp.poll_control_transmit() {
        d.push(&b);
    }
    std::iter::from_fn(|| d.next_msg().unwrap()).collect()
}

/// The example program (switch sw0, vm1 here, vm2 on hv2) plus a second switch sw1 whose
/// ports live on hv2.
fn program(generation: u64) -> ProgramMsg {
    let mut p = example::program(generation, 1, IPS);
    let mut sw1 = (*p.datapaths[0]).clone();
    sw1.name = "sw1".into();
    sw1.tunnel_key = 2;
    std::sync::Arc::make_mut(&mut sw1.groups).clear();
    sw1.flows.retain(|f| !f.actions.contains("outport"));
    sw1.ports = vec![PortMsg {
        name: "a1".into(),
        key: 1,
        location: LocationMsg::Remote(2),
        zone: 3,
        ..PortMsg::default()
    }]
    .into();
    p.zones.insert("lsp/a1".into(), 3);
    p.datapaths.push(sw1.into());
    p
}

fn delta(old: &ProgramMsg, new: &ProgramMsg) -> ToDatapath {
    ToDatapath::ProgramDelta(Box::new(between(old, new, None)))
}

fn tcp(flags: u16, seq: u32, ack: u32, payload: usize) -> Vec<u8> {
    let (v1, v2) = ((IpAddr::V4(VM1_IP), 40000), (IpAddr::V4(VM2_IP), 80));
    tcp_frame(&Seg::new(v1, v2, flags, (seq, ack), payload))
}

/// hv1 running generation 1 with a connection vm1 → vm2 committed in vm1's zone.
fn running() -> (Datapath, ProgramMsg) {
    let mut dp = example::chassis(1, IPS);
    dp.handle_control_connected(ms(0));
    let p1 = program(1);
    let ans = ctl(
        &mut dp,
        &[
            ToDatapath::Hello {
                version: PROTOCOL_VERSION,
                chassis: "hv1".into(),
            },
            ToDatapath::Program(Box::new(p1.clone())),
        ],
        ms(0),
    );
    assert!(
        matches!(ans.last(), Some(FromDatapath::Installed { generation: 1, flow_errors }) if flow_errors.is_empty()),
        "{ans:?}"
    );
    dp.handle_port_frame("vm1", &tcp(SYN, 1000, 0, 0), ms(1));
    assert!(matches!(dp.poll_transmit(), Some(Transmit::Tunnel { .. })));
    assert_eq!(dp.counters().conntrack_entries, 1);
    (dp, p1)
}

fn conntrack(dp: &Datapath) -> Vec<String> {
    dp.dump_conntrack(None, ms(5)).unwrap()
}

#[test]
fn a_delta_recompiles_only_the_datapath_it_changes() {
    let (mut dp, p1) = running();
    let ct = conntrack(&dp);
    let mut p2 = p1.clone();
    p2.generation = 2;
    std::sync::Arc::make_mut(&mut p2.datapaths[1]).flows.push(
        FlowMsg {
            table: 1,
            priority: 10,
            matches: "ip4.src == 10.9.9.9".into(),
            actions: "drop;".into(),
            id: "sw1-new".into(),
            stage: "ls_in_1".into(),
            ..FlowMsg::default()
        }
        .into(),
    );
    let ans = ctl(&mut dp, &[delta(&p1, &p2)], ms(2));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 2, flow_errors }] if flow_errors.is_empty()),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p2));
    // Only sw1 was parsed and compiled again; sw0's tables are the same allocation.
    assert_eq!(dp.spec_cache().last_parsed(), ["sw1".to_string()]);
    assert_eq!(dp.last_install_shared(), 1);
    // ... and in sw1 only the new flow was parsed and compiled: the others kept their parse
    // and their classifier entries (sw1 changed in place).
    assert_eq!(dp.spec_cache().last_parsed_flows(), 1);
    assert_eq!(dp.pipeline().program().patched_datapaths(), 1);
    assert_eq!(dp.pipeline().program().compiled_flows(), 1);
    // sw0 forwards on, with its connection.
    assert_eq!(conntrack(&dp), ct);
    // (A retransmitted SYN: the connection is the same one.)
    dp.handle_port_frame("vm1", &tcp(SYN, 1000, 0, 0), ms(3));
    assert!(matches!(dp.poll_transmit(), Some(Transmit::Tunnel { .. })));
    assert_eq!(conntrack(&dp).len(), 1);
    // A whole program of the same content changes nothing either (the control case: the
    // same observation tells a full compile apart).
    let mut p3 = p2.clone();
    p3.generation = 3;
    std::sync::Arc::make_mut(&mut p3.datapaths[0]).flows.pop();
    let ans = ctl(&mut dp, &[ToDatapath::Program(Box::new(p3))], ms(4));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 3, .. }]),
        "{ans:?}"
    );
    assert_eq!(dp.spec_cache().last_parsed(), ["sw0".to_string()]);
    assert_eq!(dp.last_install_shared(), 1);
}

#[test]
fn a_datapath_added_in_front_leaves_the_others_compiled_and_forwarding() {
    let (mut dp, p1) = running();
    let ct = conntrack(&dp);
    let mut p2 = p1.clone();
    p2.generation = 2;
    let mut front = p1.datapaths[1].clone();
    let f = std::sync::Arc::make_mut(&mut front);
    f.name = "sw-front".into();
    f.tunnel_key = 9;
    std::sync::Arc::make_mut(&mut f.ports)[0].name = "f1".into();
    p2.datapaths.insert(0, front);
    let ans = ctl(&mut dp, &[delta(&p1, &p2)], ms(2));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 2, flow_errors }] if flow_errors.is_empty()),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p2));
    // Only the new datapath was parsed and compiled; sw0 and sw1, now one place further
    // down, keep their tables (reuse by position would have compiled both again).
    assert_eq!(dp.spec_cache().last_parsed(), ["sw-front".to_string()]);
    assert_eq!(dp.last_install_shared(), 2);
    // sw0 forwards on, with its connection.
    assert_eq!(conntrack(&dp), ct);
    dp.handle_port_frame("vm1", &tcp(SYN, 1000, 0, 0), ms(3));
    assert!(matches!(dp.poll_transmit(), Some(Transmit::Tunnel { .. })));
    assert_eq!(conntrack(&dp).len(), 1);
}

#[test]
fn a_delta_against_another_base_or_content_changes_nothing() {
    let (mut dp, p1) = running();
    let ct = conntrack(&dp);
    let mut p2 = p1.clone();
    p2.generation = 2;
    std::sync::Arc::make_mut(&mut p2.datapaths[0])
        .flows
        .remove(0);
    p2.zones.insert("lsp/x".into(), 9);
    // Another base.
    let mut other = p1.clone();
    other.generation = 7;
    let ans = ctl(&mut dp, &[delta(&other, &p2)], ms(2));
    assert!(
        matches!(
            &ans[..],
            [FromDatapath::BaseMismatch {
                generation: 2,
                base: 7,
                running: 1,
                ..
            }]
        ),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p1));
    // The same generation, another content: a flow it removes is not there.
    let mut other = p1.clone();
    std::sync::Arc::make_mut(&mut other.datapaths[0])
        .flows
        .insert(
            0,
            FlowMsg {
                id: "not-here".into(),
                ..FlowMsg::default()
            }
            .into(),
        );
    let ans = ctl(&mut dp, &[delta(&other, &p2)], ms(3));
    assert!(
        matches!(&ans[..], [FromDatapath::BaseMismatch { reason, .. }] if reason.contains("not-here")),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p1));
    assert_eq!(dp.zones(), &p1.zones);
    assert_eq!(dp.generation(), 1);
    assert_eq!(conntrack(&dp), ct);
    // The right delta still applies.
    let ans = ctl(&mut dp, &[delta(&p1, &p2)], ms(4));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 2, .. }]),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p2));
    // A datapath with no program asks for the whole one.
    let mut fresh = example::chassis(1, IPS);
    fresh.handle_control_connected(ms(0));
    let hello = ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: "hv1".into(),
    };
    let ans = ctl(&mut fresh, &[hello, delta(&p1, &p2)], ms(1));
    assert!(
        matches!(
            &ans[..],
            [
                FromDatapath::Hello { .. },
                FromDatapath::BaseMismatch { running: 0, .. }
            ]
        ),
        "{ans:?}"
    );
    assert_eq!(fresh.program(), None);
}

/// A delta whose result does not compile is rejected and undone exactly: the running program,
/// its tables and the zone map stay, and the next delta against the same base applies.
#[test]
fn a_delta_that_does_not_compile_is_undone() {
    let (mut dp, p1) = running();
    let mut bad = p1.clone();
    bad.generation = 2;
    // A port in a zone the zone map lacks (structural), a changed flow and a new set.
    std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut bad.datapaths[1]).ports)[0].zone =
        42;
    std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut bad.datapaths[1]).flows[0])
        .actions = "drop;".into();
    bad.address_sets
        .insert("as1".into(), vec!["10.0.0.1".into()]);
    bad.datapaths.swap(0, 1);
    let ans = ctl(&mut dp, &[delta(&p1, &bad)], ms(2));
    assert!(
        matches!(&ans[..], [FromDatapath::Rejected { generation: 2, reason }] if reason.contains("zone 42")),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p1));
    assert_eq!(dp.generation(), 1);
    let mut p2 = p1.clone();
    p2.generation = 2;
    std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p2.datapaths[1]).flows[0])
        .actions = "drop;".into();
    let ans = ctl(&mut dp, &[delta(&p1, &p2)], ms(3));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 2, .. }]),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p2));
    assert_eq!(dp.spec_cache().last_parsed(), ["sw1".to_string()]);
}

/// A datapath held at its earlier flows (a flow with no version that parses) runs other flows
/// than the controller sent: the next delta is answered BaseMismatch, the whole program works.
#[test]
fn a_held_datapath_asks_for_the_whole_program() {
    let (mut dp, p1) = running();
    let mut p2 = p1.clone();
    p2.generation = 2;
    std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p2.datapaths[1]).flows[0])
        .matches = "ip4 &&& nonsense".into();
    let ans = ctl(&mut dp, &[delta(&p1, &p2)], ms(2));
    let [
        FromDatapath::Installed {
            generation: 2,
            flow_errors,
        },
    ] = &ans[..]
    else {
        panic!("{ans:?}")
    };
    assert!(
        flow_errors.iter().any(|e| e.held && e.datapath == "sw1"),
        "{flow_errors:?}"
    );
    // What runs (and what a restarted controller's hello sees) is sw1's earlier flows.
    let kept = dp.program().unwrap().clone();
    assert_eq!(kept.datapaths[1].flows, p1.datapaths[1].flows);
    assert_eq!(kept.datapaths[0], p2.datapaths[0]);
    let mut p3 = p2.clone();
    p3.generation = 3;
    std::sync::Arc::make_mut(&mut p3.datapaths[0]).flows.pop();
    let ans = ctl(&mut dp, &[delta(&p2, &p3)], ms(3));
    assert!(
        matches!(&ans[..], [FromDatapath::BaseMismatch { reason, .. }] if reason.contains("held")),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&kept));
    let ans = ctl(&mut dp, &[ToDatapath::Program(Box::new(p3.clone()))], ms(4));
    assert!(
        matches!(&ans[..], [FromDatapath::Installed { generation: 3, .. }]),
        "{ans:?}"
    );
}
