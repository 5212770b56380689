//! Packet-in mode in the pipeline (`Pipeline::set_packet_in`): option errors at compile time,
//! the ovn-trace constants with packet-in off, and the cached path against the full walk on
//! seeded random DHCP, DNS and RS requests (replies depend on the payload, so such walks must
//! never be replayed from the cache). Replies are decoded by smoltcp elsewhere
//! (`hf-wire/tests/packet_in.rs`, `hf-controller/tests/packet_in.rs`).

use std::net::Ipv4Addr;
use std::time::Duration;

use hf_conntrack::{Config, Conntrack, Owner};
use hf_expr::actions::Pipeline as Pipe;
use hf_pipeline::{
    DatapathKind, DatapathSpec, Destination, DnsSpec, FlowSpec, Ingress, Outputs, Pipeline,
    PortLocation, PortSpec, Program, ProgramSpec,
};
use hf_wire::{EthAddr, ip_proto};
use proptest::prelude::*;

const VM: EthAddr = EthAddr([0, 0, 0, 0, 0, 1]);
const SRV: &str = "00:00:00:00:ff:01";

/// The DHCP, DNS and RA flows ovn-northd 23.03 writes for one port (`vm1`, 10.0.0.11),
/// condensed to one switch.
fn spec(dhcp_opts: &str) -> ProgramSpec {
    let flows: Vec<(u8, u16, String, String)> = vec![
        (
            0,
            100,
            "inport == \"vm1\" && eth.src == 00:00:00:00:00:01 && ip4.src == 0.0.0.0 && ip4.dst == 255.255.255.255 && udp.src == 68 && udp.dst == 67".into(),
            format!("reg0[3] = put_dhcp_opts({dhcp_opts}); next;"),
        ),
        (0, 0, "1".into(), "next;".into()),
        (
            1,
            100,
            "inport == \"vm1\" && eth.src == 00:00:00:00:00:01 && ip4 && udp.src == 68 && udp.dst == 67 && reg0[3]".into(),
            format!("eth.dst = eth.src; eth.src = {SRV}; ip4.src = 10.0.0.1; udp.src = 67; udp.dst = 68; outport = inport; flags.loopback = 1; output;"),
        ),
        (1, 0, "1".into(), "next;".into()),
        (2, 100, "udp.dst == 53".into(), "reg0[4] = dns_lookup(); next;".into()),
        (2, 0, "1".into(), "next;".into()),
        (
            3,
            100,
            "udp.dst == 53 && reg0[4]".into(),
            "eth.dst <-> eth.src; ip4.src <-> ip4.dst; udp.dst = udp.src; udp.src = 53; outport = inport; flags.loopback = 1; output;".into(),
        ),
        (
            3,
            100,
            "udp.dst == 53 && reg0[4]".into(),
            "eth.dst <-> eth.src; ip6.src <-> ip6.dst; udp.dst = udp.src; udp.src = 53; outport = inport; flags.loopback = 1; output;".into(),
        ),
        (3, 0, "1".into(), "next;".into()),
        (
            4,
            50,
            "ip6.dst == ff02::2 && nd_rs".into(),
            format!("reg0[5] = put_nd_ra_opts(addr_mode = \"slaac\", slla = {SRV}, mtu = 1450, prefix = fd00::/64); next;"),
        ),
        (4, 0, "1".into(), "next;".into()),
        (
            5,
            50,
            "ip6.dst == ff02::2 && nd_ra && reg0[5]".into(),
            format!("eth.dst = eth.src; eth.src = {SRV}; ip6.dst = ip6.src; ip6.src = fe80::200:ff:fe00:ff01; outport = inport; flags.loopback = 1; output;"),
        ),
        // Anything else goes to vm2 (so a request without a reply is seen too).
        (5, 0, "1".into(), "outport = \"vm2\"; output;".into()),
    ];
    let mut flows: Vec<FlowSpec> = flows
        .iter()
        .map(|(t, p, m, a)| FlowSpec::parse(Pipe::Ingress, *t, *p, m, a).expect("flow parses"))
        .collect();
    flows.push(FlowSpec::parse(Pipe::Egress, 0, 0, "1", "output;").expect("parses"));
    let port = |n: &str, k: u32| PortSpec {
        name: n.into(),
        key: k,
        location: PortLocation::Local(k),
        zone: k as u16,
        ..PortSpec::default()
    };
    ProgramSpec {
        datapaths: vec![DatapathSpec {
            name: "sw0".into(),
            tunnel_key: 1,
            kind: DatapathKind::Switch,
            ports: vec![port("vm1", 1), port("vm2", 2)],
            groups: Vec::new(),
            flows,
        }],
        owner: Owner(1),
        dns: vec![DnsSpec {
            datapath: "sw0".into(),
            records: [("vm1.ovn.org".to_string(), "10.0.0.11".to_string())].into(),
        }],
        ..ProgramSpec::default()
    }
}

const OPTS: &str = "offerip = 10.0.0.11, lease_time = 3600, netmask = 255.255.255.0, router = 10.0.0.1, server_id = 10.0.0.1";

#[test]
fn unknown_or_bad_options_are_flow_errors_naming_them() {
    for (opts, want) in [
        (
            format!("{OPTS}, frobnicate = 1"),
            "unknown DHCPv4 option \"frobnicate\"",
        ),
        ("lease_time = 3600".to_string(), "requires offerip"),
        (
            format!("{OPTS}, mtu = \"x\""),
            "mtu: requires numeric value",
        ),
    ] {
        let (_, errs) = Program::compile(&spec(&opts)).expect("program compiles");
        assert_eq!(errs.len(), 1, "{errs:#?}");
        assert!(
            errs[0].to_string().contains(want),
            "{} does not say {want}",
            errs[0]
        );
    }
    let mut s = spec(OPTS);
    s.dns[0].datapath = "nope".into();
    assert!(
        Program::compile(&s).is_err(),
        "DNS records for an unknown datapath"
    );
}

fn dhcp(xid: u32, ty: u8, tail: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8; 236];
    d[0] = 1;
    d[1] = 1;
    d[2] = 6;
    d[4..8].copy_from_slice(&xid.to_be_bytes());
    d[28..34].copy_from_slice(&VM.0);
    d.extend_from_slice(&[0x63, 0x82, 0x53, 0x63, 53, 1, ty]);
    d.extend_from_slice(tail);
    d.push(255);
    udp(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, 68, 67, &d)
}

fn udp(s: Ipv4Addr, d: Ipv4Addr, sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let mut l4 = vec![0u8; 8];
    l4[0..2].copy_from_slice(&sp.to_be_bytes());
    l4[2..4].copy_from_slice(&dp.to_be_bytes());
    l4[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    l4.extend_from_slice(payload);
    let mut out = Vec::new();
    hf_wire::reply::ip_packet(
        &mut out,
        VM,
        EthAddr([0xff; 6]),
        s.into(),
        d.into(),
        ip_proto::UDP,
        &l4,
    )
    .expect("builds");
    out
}

fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    udp(
        Ipv4Addr::new(10, 0, 0, 11),
        Ipv4Addr::new(10, 0, 0, 1),
        4000 + id % 1000,
        53,
        &q,
    )
}

type Out = Vec<(Destination, Vec<u8>)>;

fn run(p: &mut Pipeline, ct: &mut Conntrack, frame: &[u8], cached: bool) -> Out {
    let mut out = Outputs::default();
    let now = Duration::from_secs(1);
    if cached {
        p.process(ct, Ingress::Local(1), frame, now, &mut out)
    } else {
        p.process_uncached(ct, Ingress::Local(1), frame, now, &mut out)
    }
    .expect("processed");
    out.iter().map(|(d, b)| (d, b.to_vec())).collect()
}

#[test]
fn packet_in_off_keeps_the_ovn_trace_constants() {
    let s = spec(OPTS);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    assert!(!p.packet_in());
    let mut ct = Conntrack::new(Config::default());
    // put_dhcp_opts stores 1: the *request* itself comes back to vm1, unchanged but for the
    // response flow's rewrites (no reply is built).
    let f = dhcp(9, 1, &[]);
    let out = run(&mut p, &mut ct, &f, true);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, Destination::Local(1));
    assert_eq!(out[0].1.len(), f.len(), "the request, not an OFFER");
    // dns_lookup stores 0: the query goes on to vm2.
    let out = run(&mut p, &mut ct, &dns_query(1, "vm1.ovn.org", 1), true);
    assert_eq!(
        out.iter().map(|o| o.0).collect::<Vec<_>>(),
        [Destination::Local(2)]
    );
    assert_eq!(p.packet_in_stats().replies(), 0);
    p.set_packet_in(true);
    let out = run(&mut p, &mut ct, &dns_query(1, "vm1.ovn.org", 1), true);
    assert_eq!(
        out.iter().map(|o| o.0).collect::<Vec<_>>(),
        [Destination::Local(1)]
    );
    assert_eq!(p.packet_in_stats().dns_replies, 1);
    let out = run(&mut p, &mut ct, &f, true);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, Destination::Local(1));
    let op = out[0].1.get(14 + 20 + 8).copied();
    assert_eq!(op, Some(2), "a BOOTREPLY now");
    assert_eq!(p.packet_in_stats().dhcp4_replies, 1);
}

/// A request the fuzzer builds: DHCP of a random type with random options, a DNS query for a
/// known or unknown name of a random type, or an RS.
fn request() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (
            any::<u32>(),
            prop_oneof![Just(1u8), Just(3), Just(4), Just(7), Just(8), any::<u8>()],
            proptest::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(x, t, tail)| dhcp(x, t, &tail)),
        (
            any::<u16>(),
            prop_oneof![
                Just("vm1.ovn.org"),
                Just("VM1.OVN.ORG"),
                Just("vm2.ovn.org")
            ],
            prop_oneof![Just(1u16), Just(28), Just(12), Just(255), Just(15)]
        )
            .prop_map(|(id, n, t)| dns_query(id, n, t)),
        any::<u8>().prop_map(|hop| {
            let mut out = Vec::new();
            let l4 = [133u8, 0, 0, 0, 0, 0, 0, 0];
            hf_wire::reply::ip_packet(
                &mut out,
                VM,
                EthAddr([0x33, 0x33, 0, 0, 0, 2]),
                "fe80::1"
                    .parse()
                    .unwrap_or(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                "ff02::2"
                    .parse()
                    .unwrap_or(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                ip_proto::ICMPV6,
                &l4,
            )
            .expect("builds");
            // The hop limit is not part of what the reply depends on.
            if let Some(b) = out.get_mut(14 + 7) {
                *b = hop;
            }
            out
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]

    /// Sequences of requests: the cached path (run twice) and the full walk give the same
    /// outputs, and the packet-in counters agree with what came back to vm1.
    #[test]
    fn cached_path_equals_full_walk(reqs in proptest::collection::vec(request(), 1..8)) {
        let s = spec(OPTS);
        let mut cached = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
        let mut full = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
        cached.set_packet_in(true);
        full.set_packet_in(true);
        let (mut c1, mut c2) = (Conntrack::new(Config::default()), Conntrack::new(Config::default()));
        let mut back = 0;
        for f in &reqs {
            let a = run(&mut cached, &mut c1, f, true);
            let b = run(&mut cached, &mut c1, f, true);
            let c = run(&mut full, &mut c2, f, false);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(&a, &c);
            back += a.iter().filter(|o| o.0 == Destination::Local(1)).count() as u64;
        }
        let st = full.packet_in_stats();
        prop_assert_eq!(st.replies(), back);
        prop_assert_eq!(cached.packet_in_stats().replies(), 2 * back);
    }
}
