//! A hand-written program shaped like ovn-northd 23.03's output for one switch (`sw0`, a VM with a
//! stateful ACL), one router (`lr0`, SNAT of 10.0.0.0/24 to 172.16.0.100) and an external switch
//! (`ext`, with a localnet port): a TCP exchange with SNAT both ways, the stateful ACL dropping
//! traffic it never allowed, and trace output that matches what the datapath did.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_conntrack::{Config, Conntrack, CtState, Owner};
use hf_expr::actions::Pipeline as Pipe;
use hf_pipeline::{
    DatapathKind, DatapathSpec, Destination, FlowSpec, Ingress, Neighbour, Outputs, Pipeline,
    PortLocation, PortSpec, Program, ProgramSpec,
};
use hf_wire::{checksums_valid, parse, tcp_flags};

const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const LR_IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];
const LR_EXT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0xfe];
const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
const VM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SNAT: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 100);
const SERVER: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 50);
const VM_PORT: u32 = 1;
const LOCALNET: u32 = 2;
const VM_ZONE: u16 = 1;
const SNAT_ZONE: u16 = 4;

type F<'a> = (Pipe, u8, u16, &'a str, &'a str);

/// Flows for a datapath, plus OVN's implicit shape: every table without a priority-0 flow gets
/// `next;` (the last table of each pipeline `output;`).
fn flows(list: &[F<'_>], n_in: u8, n_out: u8) -> Vec<FlowSpec> {
    let mut out: Vec<FlowSpec> = list
        .iter()
        .map(|&(p, t, prio, m, a)| {
            FlowSpec::parse(p, t, prio, m, a).unwrap_or_else(|e| panic!("{m} / {a}: {e}"))
        })
        .collect();
    for (pipe, n) in [(Pipe::Ingress, n_in), (Pipe::Egress, n_out)] {
        for t in 0..n {
            if !list.iter().any(|f| f.0 == pipe && f.1 == t && f.2 == 0) {
                let a = if t + 1 == n { "output;" } else { "next;" };
                out.push(FlowSpec::parse(pipe, t, 0, "1", a).expect("default flow"));
            }
        }
    }
    out
}

fn port(name: &str, key: u32, location: PortLocation, zone: u16) -> PortSpec {
    PortSpec {
        name: name.into(),
        key,
        location,
        zone,
    }
}

fn patch(peer: &str) -> PortLocation {
    PortLocation::Patch { peer: peer.into() }
}

use Pipe::{Egress as E, Ingress as I};

fn sw0_flows() -> Vec<FlowSpec> {
    flows(
        &[
            // ls_in_check_port_sec / ls_in_apply_port_sec
            (I, 0, 100, "vlan.present", "drop;"),
            (
                I,
                0,
                50,
                "inport == \"vm1\" && eth.src == 02:00:00:00:00:01",
                "next;",
            ),
            (I, 0, 50, "inport == \"sw0-lr0\"", "next;"),
            (I, 0, 0, "1", "drop;"),
            // ls_in_pre_acl: VIF traffic goes to conntrack (REGBIT_CONNTRACK_DEFRAG).
            (I, 4, 100, "ip && inport == \"vm1\"", "reg0[0] = 1; next;"),
            // ls_in_pre_stateful
            (I, 6, 100, "reg0[0] == 1", "ct_next;"),
            // ls_in_acl: established replies pass, invalid and blocked drop, allow-related
            // commits new connections (REGBIT_CONNTRACK_COMMIT = reg0[1]).
            (
                I,
                8,
                65535,
                "ct.inv || (ct.est && ct.rpl && ct_mark.blocked == 1)",
                "drop;",
            ),
            (
                I,
                8,
                65535,
                "ct.est && !ct.rel && !ct.new && !ct.inv && ct.rpl && ct_mark.blocked == 0",
                "next;",
            ),
            (
                I,
                8,
                2002,
                "((ct.new && !ct.est) || (!ct.new && ct.est && !ct.rpl && ct_mark.blocked == 1)) && (inport == \"vm1\" && ip4 && tcp)",
                "reg0[1] = 1; next;",
            ),
            (
                I,
                8,
                2002,
                "!ct.new && ct.est && !ct.rpl && ct_mark.blocked == 0 && (inport == \"vm1\" && ip4 && tcp)",
                "next;",
            ),
            (I, 8, 1001, "inport == \"vm1\" && ip4", "drop;"),
            // ls_in_stateful
            (
                I,
                18,
                100,
                "reg0[1] == 1",
                "ct_commit { ct_mark.blocked = 0; }; next;",
            ),
            // ls_in_l2_lkup
            (
                I,
                25,
                50,
                "eth.dst == 02:00:00:00:00:fe",
                "outport = \"sw0-lr0\"; output;",
            ),
            (
                I,
                25,
                50,
                "eth.dst == 02:00:00:00:00:01",
                "outport = \"vm1\"; output;",
            ),
            (I, 25, 70, "eth.mcast", "outport = \"_MC_flood\"; output;"),
            (I, 25, 0, "1", "drop;"),
            // ls_out_pre_acl / ls_out_pre_stateful
            (E, 0, 100, "ip && outport == \"vm1\"", "reg0[0] = 1; next;"),
            (E, 2, 100, "reg0[0] == 1", "ct_next;"),
            // ls_out_acl: to-lport default drop for the VM, except replies of allowed
            // connections.
            (
                E,
                4,
                65535,
                "ct.inv || (ct.est && ct.rpl && ct_mark.blocked == 1)",
                "drop;",
            ),
            (
                E,
                4,
                65535,
                "ct.est && !ct.rel && !ct.new && !ct.inv && ct.rpl && ct_mark.blocked == 0",
                "next;",
            ),
            (E, 4, 1001, "outport == \"vm1\" && ip4", "drop;"),
            // ls_out_apply_port_sec
            (E, 9, 0, "1", "output;"),
        ],
        27,
        10,
    )
}

fn lr0_flows() -> Vec<FlowSpec> {
    flows(
        &[
            // lr_in_admission
            (
                I,
                0,
                50,
                "eth.dst == 02:00:00:00:00:fe && inport == \"lr0-sw0\"",
                "xreg0[0..47] = 02:00:00:00:00:fe; next;",
            ),
            (
                I,
                0,
                50,
                "eth.dst == 02:00:00:00:01:fe && inport == \"lr0-ext\"",
                "xreg0[0..47] = 02:00:00:00:01:fe; next;",
            ),
            (I, 0, 0, "1", "drop;"),
            // lr_in_lookup_neighbor / lr_in_learn_neighbor
            (I, 1, 0, "1", "reg9[2] = 1; next;"),
            (I, 2, 90, "reg9[2] == 1", "next;"),
            // lr_in_ip_input: TTL expiry.
            (I, 3, 30, "ip4 && ip.ttl == {0, 1}", "drop;"),
            // lr_in_unsnat
            (I, 4, 90, "ip && ip4.dst == 172.16.0.100", "ct_snat;"),
            // lr_in_ip_routing_pre / lr_in_ip_routing
            (I, 12, 0, "1", "reg7 = 0; next;"),
            (
                I,
                13,
                74,
                "ip4.dst == 10.0.0.0/24",
                "ip.ttl--; reg8[0..15] = 0; reg0 = ip4.dst; reg1 = 10.0.0.1; eth.src = 02:00:00:00:00:fe; outport = \"lr0-sw0\"; flags.loopback = 1; next;",
            ),
            (
                I,
                13,
                74,
                "ip4.dst == 172.16.0.0/24",
                "ip.ttl--; reg8[0..15] = 0; reg0 = ip4.dst; reg1 = 172.16.0.100; eth.src = 02:00:00:00:01:fe; outport = \"lr0-ext\"; flags.loopback = 1; next;",
            ),
            (I, 13, 0, "1", "drop;"),
            (I, 14, 150, "reg8[0..15] == 0", "next;"),
            (I, 15, 0, "1", "reg8[0..15] = 0; next;"),
            (I, 16, 150, "reg8[0..15] == 0", "next;"),
            // lr_in_arp_resolve
            (
                I,
                17,
                100,
                "outport == \"lr0-sw0\" && reg0 == 10.0.0.2",
                "eth.dst = 02:00:00:00:00:01; next;",
            ),
            (I, 17, 0, "ip4", "get_arp(outport, reg0); next;"),
            // lr_in_arp_request
            (
                I,
                21,
                100,
                "eth.dst == 00:00:00:00:00:00 && ip4",
                "arp { eth.dst = ff:ff:ff:ff:ff:ff; arp.spa = reg1; arp.tpa = reg0; arp.op = 1; output; };",
            ),
            // lr_out_snat
            (
                E,
                3,
                153,
                "ip && ip4.src == 10.0.0.0/24 && outport == \"lr0-ext\"",
                "ct_snat(172.16.0.100);",
            ),
            // lr_out_delivery
            (E, 6, 100, "outport == \"lr0-sw0\"", "output;"),
            (E, 6, 100, "outport == \"lr0-ext\"", "output;"),
            (E, 6, 0, "1", "drop;"),
        ],
        22,
        7,
    )
}

fn ext_flows() -> Vec<FlowSpec> {
    flows(
        &[
            (
                I,
                25,
                50,
                "eth.dst == 02:00:00:00:01:fe",
                "outport = \"ext-lr0\"; output;",
            ),
            (I, 25, 0, "1", "outport = \"ln\"; output;"),
        ],
        27,
        10,
    )
}

fn spec() -> ProgramSpec {
    ProgramSpec {
        datapaths: vec![
            DatapathSpec {
                name: "sw0".into(),
                tunnel_key: 1,
                kind: DatapathKind::Switch,
                ports: vec![
                    port("vm1", 1, PortLocation::Local(VM_PORT), VM_ZONE),
                    port("sw0-lr0", 2, patch("lr0-sw0"), 2),
                ],
                groups: Vec::new(),
                flows: sw0_flows(),
            },
            DatapathSpec {
                name: "lr0".into(),
                tunnel_key: 2,
                kind: DatapathKind::Router {
                    dnat_zone: 3,
                    snat_zone: SNAT_ZONE,
                },
                ports: vec![
                    port("lr0-sw0", 1, patch("sw0-lr0"), 0),
                    port("lr0-ext", 2, patch("ext-lr0"), 0),
                ],
                groups: Vec::new(),
                flows: lr0_flows(),
            },
            DatapathSpec {
                name: "ext".into(),
                tunnel_key: 3,
                kind: DatapathKind::Switch,
                ports: vec![
                    port("ext-lr0", 1, patch("lr0-ext"), 0),
                    port("ln", 2, PortLocation::Local(LOCALNET), 5),
                ],
                groups: Vec::new(),
                flows: ext_flows(),
            },
        ],
        neighbours: vec![Neighbour {
            datapath: "lr0".into(),
            port: "lr0-ext".into(),
            ip: SERVER.into(),
            mac: SERVER_MAC,
        }],
        sets: hf_expr::Sets::default(),
        owner: Owner(9),
    }
}

fn frame(
    src: ([u8; 6], Ipv4Addr, u16),
    dst: ([u8; 6], Ipv4Addr, u16),
    flags: u16,
    seq_ack: (u32, u32),
    len: usize,
) -> Vec<u8> {
    let mut f = tcp_frame(&Seg::new(
        (IpAddr::V4(src.1), src.2),
        (IpAddr::V4(dst.1), dst.2),
        flags,
        seq_ack,
        len,
    ));
    f[0..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f
}

struct World {
    pipe: Pipeline,
    ct: Conntrack,
    out: Outputs,
    now: Duration,
}

impl World {
    fn new() -> World {
        World {
            pipe: Pipeline::new(Program::compile(&spec()).expect("program compiles")),
            ct: Conntrack::new(Config::default()),
            out: Outputs::default(),
            now: Duration::from_secs(1),
        }
    }

    /// Sends a frame in and returns what came out, checking cached and full-walk agreement is
    /// left to the differential test; here each packet is run through the cache.
    fn send(&mut self, port: u32, f: &[u8]) -> Vec<(Destination, Vec<u8>)> {
        self.now += Duration::from_millis(1);
        if std::env::var("HF_TRACE").is_ok() {
            let t = self.pipe.trace(
                &self.ct,
                Ingress::Local(port),
                f,
                self.now,
                &mut Outputs::default(),
            );
            eprintln!("{}", t.map(|t| t.to_string()).unwrap_or_default());
        }
        self.pipe
            .process(
                &mut self.ct,
                Ingress::Local(port),
                f,
                self.now,
                &mut self.out,
            )
            .expect("frame processed");
        self.out.iter().map(|(d, b)| (d, b.to_vec())).collect()
    }
}

fn only(out: &[(Destination, Vec<u8>)], to: u32) -> hf_wire::Parsed {
    assert_eq!(out.len(), 1, "expected one frame, got {out:?}");
    assert_eq!(out[0].0, Destination::Local(to));
    let p = parse(&out[0].1, 0, 0).expect("output parses");
    assert!(
        checksums_valid(&out[0].1, &p),
        "checksums of the output frame"
    );
    p
}

#[test]
fn tcp_exchange_through_snat_both_ways() {
    let mut w = World::new();
    let vm = |port| (VM_MAC, VM, port);
    let server_in = |p| (SERVER_MAC, SERVER, p);
    // The client's SYN leaves through the localnet port, source-NATed.
    let syn = frame(
        vm(40000),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::SYN,
        (1000, 0),
        0,
    );
    let out = w.send(VM_PORT, &syn);
    let p = only(&out, LOCALNET);
    assert_eq!(p.key.ip4_src, SNAT);
    assert_eq!(p.key.ip4_dst, SERVER);
    assert_eq!(p.key.tp_dst, 80);
    assert_eq!(p.key.eth_src.0, LR_EXT_MAC);
    assert_eq!(p.key.eth_dst.0, SERVER_MAC, "get_arp resolved the next hop");
    assert_eq!(p.key.ip_ttl, 63, "the router decremented the TTL");
    let nat_port = p.key.tp_src;
    assert!(w.ct.zone_count(VM_ZONE) == 1 && w.ct.zone_count(SNAT_ZONE) == 1);

    // The SYN-ACK comes back to the SNAT address and is un-SNATed to the VM.
    let to_snat = (LR_EXT_MAC, SNAT, nat_port);
    let synack = frame(
        server_in(80),
        to_snat,
        tcp_flags::SYN | tcp_flags::ACK,
        (5000, 1001),
        0,
    );
    let out = w.send(LOCALNET, &synack);
    let p = only(&out, VM_PORT);
    assert_eq!((p.key.ip4_dst, p.key.tp_dst), (VM, 40000));
    assert_eq!(p.key.ip4_src, SERVER);
    assert_eq!(p.key.eth_dst.0, VM_MAC);
    assert_eq!(p.key.eth_src.0, LR_IN_MAC);

    // Data and ACKs both ways, then FIN from each side.
    let steps: [(bool, u16, (u32, u32), usize); 6] = [
        (true, tcp_flags::ACK, (1001, 5001), 0),
        (true, tcp_flags::ACK | tcp_flags::PSH, (1001, 5001), 100),
        (false, tcp_flags::ACK, (5001, 1101), 0),
        (false, tcp_flags::ACK | tcp_flags::PSH, (5001, 1101), 200),
        (true, tcp_flags::FIN | tcp_flags::ACK, (1101, 5201), 0),
        (false, tcp_flags::FIN | tcp_flags::ACK, (5201, 1102), 0),
    ];
    for (i, (outbound, flags, sa, len)) in steps.into_iter().enumerate() {
        if outbound {
            let f = frame(vm(40000), (LR_IN_MAC, SERVER, 80), flags, sa, len);
            let p = only(&w.send(VM_PORT, &f), LOCALNET);
            assert_eq!((p.key.ip4_src, p.key.tp_src), (SNAT, nat_port), "step {i}");
            assert_eq!(p.tcp.payload_len as usize, len, "step {i}");
        } else {
            let f = frame(server_in(80), to_snat, flags, sa, len);
            let p = only(&w.send(LOCALNET, &f), VM_PORT);
            assert_eq!((p.key.ip4_dst, p.key.tp_dst), (VM, 40000), "step {i}");
        }
    }
    // The last ACK closes the connection in both zones' state machines.
    let last = frame(
        vm(40000),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::ACK,
        (1102, 5202),
        0,
    );
    only(&w.send(VM_PORT, &last), LOCALNET);
    let conns: Vec<_> = w.ct.connections(w.now).collect();
    assert_eq!(
        conns.len(),
        2,
        "one connection in the VM's zone, one in the SNAT zone"
    );
    // Later packets of the connection were served by the flow cache.
    assert!(w.pipe.cache_len() > 0);
}

#[test]
fn stateful_acl_drops_what_it_never_allowed() {
    let mut w = World::new();
    // A "reply" from the outside to the VM's real address, for a connection the VM never
    // opened: routed by lr0, it reaches the VM's to-lport ACL as ct.new (or invalid) and drops.
    let fake = frame(
        (SERVER_MAC, SERVER, 80),
        (LR_EXT_MAC, VM, 40001),
        tcp_flags::SYN | tcp_flags::ACK,
        (7000, 1),
        0,
    );
    assert!(
        w.send(LOCALNET, &fake).is_empty(),
        "unsolicited reply dropped"
    );
    // A new connection from the outside is dropped as well, and never committed.
    let syn_in = frame(
        (SERVER_MAC, SERVER, 5555),
        (LR_EXT_MAC, VM, 22),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    assert!(
        w.send(LOCALNET, &syn_in).is_empty(),
        "ct.new from outside dropped"
    );
    assert_eq!(
        w.ct.zone_count(VM_ZONE),
        0,
        "nothing committed for dropped traffic"
    );

    // The same kind of packet passes once the VM opened the connection (allow-related): the
    // drop above was the ACL's doing, not a routing accident.
    let syn = frame(
        (VM_MAC, VM, 40001),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    let p = only(&w.send(VM_PORT, &syn), LOCALNET);
    let nat_port = p.key.tp_src;
    let reply = frame(
        (SERVER_MAC, SERVER, 80),
        (LR_EXT_MAC, SNAT, nat_port),
        tcp_flags::SYN | tcp_flags::ACK,
        (7000, 2),
        0,
    );
    only(&w.send(LOCALNET, &reply), VM_PORT);
    // And the trace of the dropped packet names the ACL flow that dropped it.
    let t = w
        .pipe
        .trace(
            &w.ct,
            Ingress::Local(LOCALNET),
            &syn_in,
            w.now,
            &mut Outputs::default(),
        )
        .expect("trace");
    let last = t.records.last().expect("records");
    assert_eq!(
        (last.datapath.as_str(), last.pipeline, last.table),
        ("sw0", "egress", 4)
    );
    assert_eq!(last.flow.as_ref().map(|f| f.priority), Some(1001));
}

#[test]
fn trace_shows_the_walk_without_changing_state() {
    let mut w = World::new();
    let syn = frame(
        (VM_MAC, VM, 40002),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    let mut out = Outputs::default();
    let t = w
        .pipe
        .trace(&w.ct, Ingress::Local(VM_PORT), &syn, w.now, &mut out)
        .expect("trace");
    assert!(w.ct.is_empty(), "trace committed nothing");
    // The trace's outputs are what processing the packet produces.
    let traced: Vec<_> = out.iter().map(|(d, b)| (d, b.to_vec())).collect();
    assert_eq!(traced, w.send(VM_PORT, &syn));
    let text = t.to_string();
    assert!(
        text.contains("sw0 ingress table 6 priority 100: reg0[0] == 1 => ct_next;"),
        "{text}"
    );
    assert!(text.contains("lr0 egress table 3 priority 153"), "{text}");
    let snat = t
        .records
        .iter()
        .find(|r| r.datapath == "lr0" && r.pipeline == "egress" && r.table == 3)
        .expect("snat stage");
    assert!(
        snat.effects
            .iter()
            .any(|e| e.contains(&format!("{:?}", CtState::TRK | CtState::NEW)))
    );
}

#[test]
fn arp_request_for_an_unknown_next_hop() {
    let mut w = World::new();
    // The VM's route towards an unknown external host: get_arp finds nothing, so the router
    // sends an ARP request for it out of the localnet port instead of the packet.
    let other = Ipv4Addr::new(172, 16, 0, 77);
    let f = frame(
        (VM_MAC, VM, 40003),
        (LR_IN_MAC, other, 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    let out = w.send(VM_PORT, &f);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, Destination::Local(LOCALNET));
    let p = parse(&out[0].1, 0, 0).expect("arp parses");
    assert_eq!(p.key.eth_type, 0x0806);
    assert_eq!(p.key.arp_op, 1);
    assert_eq!((p.key.arp_spa, p.key.arp_tpa), (SNAT, other));
    assert_eq!(p.key.eth_dst.0, [0xff; 6]);
}
