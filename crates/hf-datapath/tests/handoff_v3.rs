//! The state handoff across protocol versions: the export a version-3 datapath sent
//! (`tests/fixtures/handoff-v3.bin`, written by holdfast at 04c7cdd, see the fixtures'
//! README) still decodes and imports into this datapath, which then forwards on its
//! connection; and a version-3 controller is refused by name.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_datapath::example::{self, VM1_IP, VM1_MAC, VM2_IP, VM2_MAC};
use hf_datapath::proto::{Decoder, FromDatapath, PROTOCOL_VERSION, ToDatapath, encode};
use hf_datapath::{Datapath, Transmit};
use hf_wire::tcp_flags::{ACK, PSH};

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];

const V3_EXPORT: &[u8] = include_bytes!("fixtures/handoff-v3.bin");

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn v3_export() -> hf_datapath::proto::StateExport {
    let mut d = Decoder::<FromDatapath>::new();
    d.push(V3_EXPORT);
    let mut found = None;
    while let Some(m) = d.next_msg().unwrap() {
        if let FromDatapath::Exported(s) = m {
            found = Some(*s);
        }
    }
    assert_eq!(d.buffered(), 0);
    found.expect("the fixture holds an Exported frame")
}

/// vm2's reply, mid-stream (ACK|PSH, no SYN), as hv2 tunnels it to hv1: the egress pipeline of
/// sw0 on hv1 delivers it to vm1 only when vm1's zone knows the connection (`ct.inv` drops
/// it otherwise).
fn reply_from_hv2() -> Vec<u8> {
    let seg = Seg::new(
        (IpAddr::V4(VM2_IP), 80),
        (IpAddr::V4(VM1_IP), 40000),
        ACK | PSH,
        (5001, 1001),
        20,
    );
    let mut frame = tcp_frame(&seg);
    // From vm2's MAC to vm1's.
    frame[..6].copy_from_slice(&VM1_MAC);
    frame[6..12].copy_from_slice(&VM2_MAC);
    let mut g = Vec::new();
    hf_wire::geneve::GeneveRepr {
        meta: hf_wire::geneve::OvnMetadata {
            datapath: 1,
            ports: Some(hf_wire::geneve::PortKeys {
                ingress: 2,
                egress: 1,
            }),
        },
        oam: false,
    }
    .emit(&mut g);
    g.extend_from_slice(&frame);
    g
}

fn delivered(dp: &mut Datapath) -> Vec<String> {
    std::iter::from_fn(|| dp.poll_transmit())
        .filter_map(|t| match t {
            Transmit::Port { port, .. } => Some(port),
            Transmit::Tunnel { .. } | Transmit::Mirror { .. } => None,
        })
        .collect()
}

/// Connects a v4 controller and sends `delta`; the answers.
fn drive(dp: &mut Datapath, delta: ToDatapath, now: Duration) -> Vec<FromDatapath> {
    dp.handle_control_connected(now);
    let msgs = [
        ToDatapath::Hello {
            version: PROTOCOL_VERSION,
            chassis: "hv1".into(),
        },
        delta,
    ];
    for m in &msgs {
        dp.handle_control_bytes(&encode(m).unwrap(), now);
    }
    let mut d = Decoder::<FromDatapath>::new();
    while let Some(b) = dp.poll_control_transmit() {
        d.push(&b);
    }
    std::iter::from_fn(|| d.next_msg().unwrap()).collect()
}

#[test]
fn a_version_3_export_imports_and_keeps_its_connection() {
    let state = v3_export();
    let p = state.program.clone().expect("the export has a program");
    assert_eq!(p.generation, 1);
    let mut dp = example::chassis(1, IPS);
    dp.import_state(state.clone(), ms(30)).unwrap();
    assert_eq!(dp.generation(), 1);
    assert_eq!(dp.program(), Some(&p));
    assert_eq!(dp.zones(), &state.zones);
    let est = vec!["tcp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=40000,dport=80),reply=(src=10.0.0.2,dst=10.0.0.1,sport=80,dport=40000),zone=1,protoinfo=(state=ESTABLISHED)".to_string()];
    assert_eq!(dp.dump_conntrack(Some("lsp/vm1"), ms(30)).unwrap(), est);
    // A v4 controller takes over with a delta against the imported program: sw0's egress
    // now drops new connections (established ones pass).
    let mut p2 = p.clone();
    p2.generation = 2;
    let f = std::sync::Arc::make_mut(&mut p2.datapaths[0])
        .flows
        .iter_mut()
        .find(|f| f.egress && &*f.matches == "ct.new")
        .expect("the example's egress ct.new flow");
    let f = std::sync::Arc::make_mut(f);
    f.actions = "drop;".into();
    let delta = || ToDatapath::ProgramDelta(Box::new(hf_datapath::proto::between(&p, &p2, None)));
    let ans = drive(&mut dp, delta(), ms(31));
    assert!(
        matches!(ans.last(), Some(FromDatapath::Installed { generation: 2, flow_errors }) if flow_errors.is_empty()),
        "{ans:?}"
    );
    assert_eq!(dp.program(), Some(&p2));
    // vm2's mid-stream reply reaches vm1: the imported connection is established.
    dp.handle_tunnel(IPS[1], &reply_from_hv2(), ms(32));
    assert_eq!(delivered(&mut dp), ["vm1".to_string()]);
    assert_eq!(dp.dump_conntrack(Some("lsp/vm1"), ms(33)).unwrap(), est);
    // The control case: the same import without its connections drops the same reply.
    let mut bare = example::chassis(1, IPS);
    let mut no_ct = state;
    no_ct.conntrack = postcard::to_allocvec(&hf_conntrack::CtExport {
        conns: Vec::new(),
        ..postcard::from_bytes::<hf_conntrack::CtExport>(&no_ct.conntrack).unwrap()
    })
    .unwrap();
    bare.import_state(no_ct, ms(30)).unwrap();
    let ans = drive(&mut bare, delta(), ms(31));
    assert!(
        matches!(
            ans.last(),
            Some(FromDatapath::Installed { generation: 2, .. })
        ),
        "{ans:?}"
    );
    bare.handle_tunnel(IPS[1], &reply_from_hv2(), ms(32));
    assert_eq!(delivered(&mut bare), Vec::<String>::new());
}

#[test]
fn a_version_3_controller_is_refused_by_name() {
    let mut dp = example::chassis(1, IPS);
    dp.handle_control_connected(ms(0));
    dp.handle_control_bytes(
        &encode(&ToDatapath::Hello {
            version: 3,
            chassis: "hv1".into(),
        })
        .unwrap(),
        ms(0),
    );
    let mut d = Decoder::<FromDatapath>::new();
    while let Some(b) = dp.poll_control_transmit() {
        d.push(&b);
    }
    let ans: Vec<FromDatapath> = std::iter::from_fn(|| d.next_msg().unwrap()).collect();
    assert_eq!(
        ans,
        [FromDatapath::Error {
            message: format!(
                "controller speaks protocol version 3, this datapath speaks 4..={}",
                hf_datapath::proto::PROTOCOL_VERSION
            )
        }]
    );
    assert!(dp.control_wants_close());
}
