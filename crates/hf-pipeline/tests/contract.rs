//! The pipeline contract of issue 9, one test per point: flow identity, per-flow compile
//! errors, residency across datapaths, chassisredirect, several-chassis binding and activation,
//! no re-tunnelling, one multicast copy per chassis, neighbour events surviving a swap, Geneve
//! key limits, and per-datapath recompilation.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_conntrack::{Config, Conntrack, Owner};
use hf_expr::actions::Pipeline as Pipe;
use hf_pipeline::{
    Activation, CompileError, DatapathKind, DatapathSpec, Destination, Event, FlowErrorKind,
    FlowId, FlowSpec, GroupSpec, Ingress, Outputs, Pipeline, PortLocation, PortSpec, Program,
    ProgramSpec,
};
use hf_wire::{EthAddr, tcp_flags};

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn syn() -> Vec<u8> {
    tcp_frame(&Seg::new(
        (IpAddr::V4(A), 1000),
        (IpAddr::V4(B), 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    ))
}

fn port(name: &str, key: u32, location: PortLocation) -> PortSpec {
    PortSpec {
        name: name.into(),
        key,
        location,
        zone: key as u16,
        ..PortSpec::default()
    }
}

fn flow(pipe: Pipe, table: u8, prio: u16, m: &str, a: &str) -> FlowSpec {
    let mut f = FlowSpec::from_text(pipe, table, prio, m, a);
    assert!(f.parse_error.is_none(), "{m} / {a}: {:?}", f.parse_error);
    f.stage = format!("stage{table}").into();
    f.id = FlowId::derived(f.pipeline, &f.stage, f.table, f.priority, m);
    f
}

fn switch(name: &str, key: u32, ports: Vec<PortSpec>, flows: Vec<FlowSpec>) -> DatapathSpec {
    DatapathSpec {
        name: name.into(),
        tunnel_key: key,
        kind: DatapathKind::Switch,
        ports,
        groups: Vec::new(),
        flows,
    }
}

fn spec(datapaths: Vec<DatapathSpec>) -> ProgramSpec {
    ProgramSpec {
        datapaths,
        owner: Owner(1),
        ..ProgramSpec::default()
    }
}

/// Ingress table 0 does `a`; egress outputs.
fn simple(a: &str) -> Vec<FlowSpec> {
    vec![
        flow(Pipe::Ingress, 0, 0, "1", a),
        flow(Pipe::Egress, 0, 0, "1", "output;"),
    ]
}

fn run(p: &mut Pipeline, ct: &mut Conntrack, from: Ingress, f: &[u8]) -> Vec<Destination> {
    let mut out = Outputs::default();
    p.process(ct, from, f, Duration::from_secs(1), &mut out)
        .expect("processed");
    out.iter().map(|(d, _)| d).collect()
}

#[test]
fn identity_reaches_the_trace() {
    let mut f = flow(Pipe::Ingress, 0, 7, "ip4", "outport = \"b\"; output;");
    f.id = FlowId::hf("abc123");
    f.stage = "ls_in_l2_lkup".into();
    f.sb_uuid = Some("4ad2e626-250f-44f8-a338-cfc40d3c8b10".into());
    f.stage_hint = Some("a0dfbb58".into());
    let s = spec(vec![switch(
        "ls",
        1,
        vec![
            port("a", 1, PortLocation::Local(1)),
            port("b", 2, PortLocation::Local(2)),
        ],
        vec![f, flow(Pipe::Egress, 0, 0, "1", "output;")],
    )]);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    let ct = Conntrack::new(Config::default());
    let t = p
        .trace(
            &ct,
            Ingress::Local(1),
            &syn(),
            Duration::from_secs(1),
            &mut Outputs::default(),
        )
        .expect("traced");
    let r = t
        .records
        .first()
        .and_then(|r| r.flow.as_ref())
        .expect("a flow matched");
    assert_eq!(r.id, FlowId::hf("abc123"));
    assert_eq!(r.stage, "ls_in_l2_lkup");
    assert_eq!(
        r.sb_uuid.as_deref(),
        Some("4ad2e626-250f-44f8-a338-cfc40d3c8b10")
    );
    assert_eq!(r.stage_hint.as_deref(), Some("a0dfbb58"));
    // The SB text is what a trace shows, as written.
    assert_eq!(r.matches, "ip4");
    let d = |stage: &str, table: u8, prio: u16, m: &str| {
        FlowId::derived(Pipe::Ingress, stage, table, prio, m)
    };
    assert_eq!(d("s", 1, 10, "ip4"), d("s", 1, 10, "ip4"));
    // The stage names the table; without a stage name the table number does.
    assert_eq!(d("s", 1, 10, "ip4"), d("s", 2, 10, "ip4"));
    assert_ne!(d("", 1, 10, "ip4"), d("", 2, 10, "ip4"));
    // Priority and pipeline are part of it.
    assert_ne!(d("s", 1, 10, "ip4"), d("s", 1, 11, "ip4"));
    assert_ne!(
        d("s", 1, 10, "ip4"),
        FlowId::derived(Pipe::Egress, "s", 1, 10, "ip4")
    );
}

#[test]
fn a_bad_flow_is_its_own_error_and_the_rest_compiles() {
    let mut flows = simple("outport = \"b\"; output;");
    let bad = [
        ("ip4 &&", "next;", FlowErrorKind::Syntax, "ip4 &&"),
        ("1", "nosuch = 1; next;", FlowErrorKind::Syntax, "nosuch"),
        (
            "inport == @nope",
            "next;",
            FlowErrorKind::UnknownSet,
            "@nope",
        ),
        (
            "ip4.src == $none4",
            "next;",
            FlowErrorKind::UnknownSet,
            "$none4",
        ),
        // Every action OVN 23.03 has is executed now (sctp_abort included), so an action error
        // stands in for the "cannot execute" class.
        (
            "1",
            "ct_lb_mark(backends=10.0.0.1:80; hash_fields=\"bogus\");",
            FlowErrorKind::Action,
            "bogus",
        ),
    ];
    for (i, (m, a, _, _)) in bad.iter().enumerate() {
        let mut f = FlowSpec::from_text(Pipe::Ingress, 0, 100 + i as u16, m, a);
        f.stage = "ls_in_test".into();
        f.sb_uuid = Some(format!("uuid-{i}").into());
        f.id = FlowId::derived(f.pipeline, &f.stage, f.table, f.priority, m);
        flows.push(f);
    }
    let s = spec(vec![switch(
        "ls",
        1,
        vec![
            port("a", 1, PortLocation::Local(1)),
            port("b", 2, PortLocation::Local(2)),
        ],
        flows,
    )]);
    let (prog, errs) = Program::compile(&s).expect("structurally fine");
    assert_eq!(errs.len(), bad.len(), "{errs:#?}");
    for (i, (m, _, kind, needle)) in bad.iter().enumerate() {
        let e = errs
            .iter()
            .find(|e| e.sb_uuid.as_deref() == Some(format!("uuid-{i}").as_str()))
            .unwrap_or_else(|| panic!("no error for {m}: {errs:#?}"));
        assert_eq!(e.kind, *kind, "{e}");
        assert_eq!(e.datapath, "ls");
        assert_eq!(e.pipeline, "ingress");
        assert_eq!(e.priority, 100 + i as u16);
        assert_eq!(e.stage, "ls_in_test");
        let text = e.to_string();
        assert!(text.contains(needle), "{text}");
        assert!(
            text.contains("ls_in_test") && text.contains(&format!("uuid-{i}")),
            "{text}"
        );
    }
    assert_eq!(prog.flow_errors().count(), bad.len());
    // The good flows work.
    let mut p = Pipeline::new(prog);
    let mut ct = Conntrack::new(Config::default());
    assert_eq!(
        run(&mut p, &mut ct, Ingress::Local(1), &syn()),
        [Destination::Local(2)]
    );
    // compile_strict refuses the same program.
    assert!(matches!(
        Program::compile_strict(&s),
        Err(CompileError::Flow(_))
    ));
}

#[test]
fn is_chassis_resident_sees_every_datapath() {
    // A router flow asks about a switch port and a cr- port of another datapath.
    let sw = switch(
        "sw",
        1,
        vec![
            PortSpec {
                resident: true,
                ..port("vm1", 1, PortLocation::Local(1))
            },
            port("vm2", 2, PortLocation::Remote { chassis: 9 }),
            // Local but not resident (a localport, or a copy on an additional chassis).
            port("lp", 4, PortLocation::Local(4)),
            port(
                "sw-lr",
                3,
                PortLocation::Patch {
                    peer: "lr-sw".into(),
                },
            ),
        ],
        vec![
            flow(Pipe::Ingress, 0, 0, "1", "outport = \"sw-lr\"; output;"),
            flow(Pipe::Egress, 0, 0, "1", "output;"),
        ],
    );
    let mut gw = port("cr-lr-gw", 5, PortLocation::Remote { chassis: 9 });
    gw.resident = true; // what SB says (bound here) even though not Local
    let lr = DatapathSpec {
        name: "lr".into(),
        tunnel_key: 2,
        kind: DatapathKind::Router {
            dnat_zone: 20,
            snat_zone: 21,
        },
        ports: vec![
            port(
                "lr-sw",
                1,
                PortLocation::Patch {
                    peer: "sw-lr".into(),
                },
            ),
            port("lr-out", 2, PortLocation::Local(7)),
            gw,
        ],
        groups: Vec::new(),
        flows: vec![
            flow(
                Pipe::Ingress,
                0,
                30,
                "is_chassis_resident(\"vm2\") || is_chassis_resident(\"lp\")",
                "drop;",
            ),
            flow(
                Pipe::Ingress,
                0,
                20,
                "is_chassis_resident(\"vm1\") && is_chassis_resident(\"cr-lr-gw\")",
                "outport = \"lr-out\"; output;",
            ),
            flow(Pipe::Ingress, 0, 0, "1", "drop;"),
            flow(Pipe::Egress, 0, 0, "1", "output;"),
        ],
    };
    let s = spec(vec![sw, lr]);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    assert_eq!(
        run(&mut p, &mut ct, Ingress::Local(1), &syn()),
        [Destination::Local(7)],
        "vm1 (another datapath) and cr-lr-gw are resident; vm2 is not"
    );
}

#[test]
fn chassisredirect_resident_here_continues_as_the_distributed_port() {
    let s = spec(vec![DatapathSpec {
        name: "lr".into(),
        tunnel_key: 2,
        kind: DatapathKind::Router {
            dnat_zone: 20,
            snat_zone: 21,
        },
        ports: vec![
            port("lr-in", 1, PortLocation::Local(1)),
            port("lr-gw", 2, PortLocation::Local(2)),
            port(
                "cr-lr-gw",
                3,
                PortLocation::Redirect {
                    port: "lr-gw".into(),
                },
            ),
        ],
        groups: Vec::new(),
        flows: vec![
            flow(Pipe::Ingress, 0, 0, "1", "outport = \"cr-lr-gw\"; output;"),
            // Egress sees the distributed port as outport.
            flow(Pipe::Egress, 0, 10, "outport == \"lr-gw\"", "output;"),
            flow(Pipe::Egress, 0, 0, "1", "drop;"),
        ],
    }]);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    assert_eq!(
        run(&mut p, &mut ct, Ingress::Local(1), &syn()),
        [Destination::Local(2)]
    );
    // From a tunnel, addressed to the cr- port: the same.
    assert_eq!(
        run(
            &mut p,
            &mut ct,
            Ingress::Tunnel {
                datapath: 2,
                inport: 1,
                outport: 3
            },
            &syn()
        ),
        [Destination::Local(2)]
    );
}

/// Whether a datapath has a resident chassisredirect port is decided when the program is set
/// (a tunnel frame's egress port is looked up only where one may stand for another): a program
/// swap that makes `cr-lr-gw` resident here must redirect the next tunnel frame, and one that
/// moves it away must stop doing so.
#[test]
fn a_program_swap_decides_again_where_chassisredirect_ports_are() {
    let lr = |cr: PortLocation| {
        spec(vec![DatapathSpec {
            name: "lr".into(),
            tunnel_key: 2,
            kind: DatapathKind::Router {
                dnat_zone: 20,
                snat_zone: 21,
            },
            ports: vec![
                port("lr-in", 1, PortLocation::Local(1)),
                port("lr-gw", 2, PortLocation::Local(2)),
                port("cr-lr-gw", 3, cr),
            ],
            groups: Vec::new(),
            flows: vec![
                flow(Pipe::Egress, 0, 10, "outport == \"lr-gw\"", "output;"),
                flow(Pipe::Egress, 0, 0, "1", "drop;"),
            ],
        }])
    };
    let remote = || PortLocation::Remote { chassis: 7 };
    let resident = || PortLocation::Redirect {
        port: "lr-gw".into(),
    };
    let from = Ingress::Tunnel {
        datapath: 2,
        inport: 1,
        outport: 3,
    };
    let mut p = Pipeline::new(Program::compile_strict(&lr(remote())).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    assert!(
        run(&mut p, &mut ct, from, &syn()).is_empty(),
        "not resident: dropped"
    );
    p.set_program(Program::compile_strict(&lr(resident())).expect("compiles"));
    assert_eq!(
        run(&mut p, &mut ct, from, &syn()),
        [Destination::Local(2)],
        "resident after the swap: continues as lr-gw"
    );
    p.set_program(Program::compile_strict(&lr(remote())).expect("compiles"));
    assert!(
        run(&mut p, &mut ct, from, &syn()).is_empty(),
        "moved away again"
    );
}

fn rarp() -> Vec<u8> {
    let mut f = Vec::new();
    hf_wire::reply::arp_request(&mut f, EthAddr([2, 0, 0, 0, 0, 2]), B, B);
    f[12] = 0x80;
    f[13] = 0x35;
    f[20] = 0;
    f[21] = 3; // RARP request
    f
}

#[test]
fn a_port_on_two_chassis_gets_both_copies_and_activates_on_rarp() {
    let mut mig = port("mig", 2, PortLocation::Local(2));
    mig.also_remote = vec![7];
    mig.activation = Some(Activation::RARP);
    let s = spec(vec![switch(
        "ls",
        5,
        vec![port("a", 1, PortLocation::Local(1)), mig],
        vec![
            flow(
                Pipe::Ingress,
                0,
                10,
                "inport == \"a\"",
                "outport = \"mig\"; output;",
            ),
            flow(
                Pipe::Ingress,
                0,
                5,
                "inport == \"mig\"",
                "outport = \"a\"; output;",
            ),
            flow(Pipe::Egress, 0, 0, "1", "output;"),
        ],
    )]);
    let prog = Program::compile_strict(&s).expect("compiles");
    let mut p = Pipeline::new(prog);
    let mut ct = Conntrack::new(Config::default());
    // Output to the port: the other chassis gets a tunnel copy, this one a local copy.
    assert_eq!(
        run(&mut p, &mut ct, Ingress::Local(1), &syn()),
        [
            Destination::Tunnel {
                chassis: 7,
                datapath: 5,
                inport: 1,
                outport: 2
            },
            Destination::Local(2)
        ]
    );
    // Inactive here: its own traffic is dropped before the pipeline.
    assert!(!p.port_active(2));
    let mut out = Outputs::default();
    let st = p
        .process(
            &mut ct,
            Ingress::Local(2),
            &syn(),
            Duration::from_secs(1),
            &mut out,
        )
        .expect("processed");
    assert!(st.inactive_port && out.is_empty());
    // A RARP activates it (and says so).
    let _ = p.process(
        &mut ct,
        Ingress::Local(2),
        &rarp(),
        Duration::from_secs(1),
        &mut out,
    );
    assert!(p.port_active(2));
    assert!(
        p.take_events()
            .iter()
            .any(|e| matches!(e, Event::PortActivated { local: 2, port } if port == "mig"))
    );
    assert_eq!(
        run(&mut p, &mut ct, Ingress::Local(2), &syn()),
        [Destination::Local(1)]
    );
    // The flag flips without recompiling, and a new program keeps the decision.
    p.set_port_active(2, false);
    let st = p
        .process(
            &mut ct,
            Ingress::Local(2),
            &syn(),
            Duration::from_secs(1),
            &mut out,
        )
        .expect("processed");
    assert!(st.inactive_port);
    p.set_port_active(2, true);
    p.set_program(Program::compile_strict(&s).expect("compiles"));
    assert!(p.port_active(2), "activation survives a program swap");
    // A program that no longer says the port waits ends the decision: a later program that
    // says it waits again (a new migration here) makes it wait again.
    let mut active = s.clone();
    active.datapaths[0].ports[1].activation = None;
    p.set_program(Program::compile_strict(&active).expect("compiles"));
    assert!(p.port_active(2));
    p.set_program(Program::compile_strict(&s).expect("compiles"));
    assert!(
        !p.port_active(2),
        "a new migration waits for its own activation"
    );
}

fn garp(ip: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::new();
    hf_wire::reply::arp_request(&mut f, EthAddr([2, 0, 0, 0, 0, 2]), ip, ip);
    f
}

#[test]
fn activation_strategies_pick_which_announcement_activates() {
    let garp_only = Activation {
        garp: true,
        ..Activation::default()
    };
    assert!(garp_only.activates(&garp(B)));
    assert!(!garp_only.activates(&rarp()), "a RARP is not a GARP");
    let mut ask = Vec::new();
    hf_wire::reply::arp_request(
        &mut ask,
        EthAddr([2, 0, 0, 0, 0, 2]),
        B,
        Ipv4Addr::new(10, 0, 0, 1),
    );
    assert!(
        !garp_only.activates(&ask),
        "an ordinary ARP request is no announcement"
    );
    assert!(Activation::RARP.activates(&rarp()));
    assert!(!Activation::RARP.activates(&garp(B)));
    // An IPv6 neighbour advertisement: ICMPv6 type 136.
    let mut na = vec![0u8; 78];
    na[12..14].copy_from_slice(&[0x86, 0xdd]);
    na[20] = 58;
    na[54] = 136;
    let na_only = Activation {
        na: true,
        ..Activation::default()
    };
    assert!(na_only.activates(&na));
    na[54] = 135;
    assert!(!na_only.activates(&na), "a solicitation does not activate");
    assert_eq!(
        Activation::parse("rarp, garp,bogus"),
        (
            Some(Activation {
                rarp: true,
                garp: true,
                na: false
            }),
            vec!["bogus".to_string()]
        )
    );
    assert_eq!(Activation::parse("bogus").0, None);
}

#[test]
fn a_held_port_gets_its_frames_as_egress_input_to_replay_later() {
    let mut mig = port("mig", 2, PortLocation::Local(2));
    mig.also_remote = vec![7];
    let s = spec(vec![switch(
        "ls",
        5,
        vec![port("a", 1, PortLocation::Local(1)), mig],
        vec![
            flow(
                Pipe::Ingress,
                0,
                10,
                "inport == \"a\"",
                "outport = \"mig\"; output;",
            ),
            // Egress rewrites, so a held frame is visibly the egress pipeline's input.
            flow(Pipe::Egress, 0, 0, "1", "ip.ttl = 7; output;"),
        ],
    )]);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    let held = Destination::Held {
        local: 2,
        datapath: 5,
        inport: 1,
        outport: 2,
    };
    // Cached before the hold: holding must not serve the cached walk.
    run(&mut p, &mut ct, Ingress::Local(1), &syn());
    p.set_port_held(2, true);
    assert!(p.port_held(2));
    let mut out = Outputs::default();
    p.process(
        &mut ct,
        Ingress::Local(1),
        &syn(),
        Duration::from_secs(1),
        &mut out,
    )
    .expect("processed");
    let got: Vec<(Destination, Vec<u8>)> = out.iter().map(|(d, b)| (d, b.to_vec())).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(matches!(got[0].0, Destination::Tunnel { chassis: 7, .. }));
    assert_eq!(got[1].0, held);
    assert_eq!(got[1].1, syn(), "held before the egress pipeline ran");
    // A tunnel copy for the held port is held as it came.
    let from_tunnel = Ingress::Tunnel {
        datapath: 5,
        inport: 1,
        outport: 2,
    };
    assert_eq!(run(&mut p, &mut ct, from_tunnel, &syn()), [held]);
    // Released: the replay (a tunnel-style entry) runs the egress pipeline.
    p.set_port_held(2, false);
    p.process(
        &mut ct,
        from_tunnel,
        &syn(),
        Duration::from_secs(1),
        &mut out,
    )
    .expect("processed");
    let got: Vec<(Destination, Vec<u8>)> = out.iter().map(|(d, b)| (d, b.to_vec())).collect();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, Destination::Local(2));
    assert_ne!(got[0].1, syn(), "the egress pipeline ran");
}

#[test]
fn a_packet_from_a_tunnel_never_goes_back_into_one() {
    let s = spec(vec![switch(
        "ls",
        5,
        vec![
            port("a", 1, PortLocation::Local(1)),
            port("far", 2, PortLocation::Remote { chassis: 7 }),
        ],
        simple("outport = \"far\"; output;"),
    )]);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    assert_eq!(run(&mut p, &mut ct, Ingress::Local(1), &syn()).len(), 1);
    let from_tunnel = Ingress::Tunnel {
        datapath: 5,
        inport: 1,
        outport: 2,
    };
    for _ in 0..2 {
        assert!(run(&mut p, &mut ct, from_tunnel, &syn()).is_empty());
    }
}

#[test]
fn multicast_sends_one_copy_per_remote_chassis() {
    let mut ds = switch(
        "ls",
        5,
        vec![
            port("a", 1, PortLocation::Local(1)),
            port("b", 2, PortLocation::Local(2)),
            port("r1", 3, PortLocation::Remote { chassis: 7 }),
            port("r2", 4, PortLocation::Remote { chassis: 7 }),
            port("r3", 5, PortLocation::Remote { chassis: 8 }),
        ],
        simple("outport = \"_MC_flood\"; output;"),
    );
    ds.groups.push(GroupSpec {
        name: "_MC_flood".into(),
        key: 32768,
        members: ["a", "b", "r1", "r2", "r3"].map(String::from).to_vec(),
    });
    let mut p = Pipeline::new(Program::compile_strict(&spec(vec![ds])).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    let tunnel = |chassis| Destination::Tunnel {
        chassis,
        datapath: 5,
        inport: 1,
        outport: 32768,
    };
    assert_eq!(
        run(&mut p, &mut ct, Ingress::Local(1), &syn()),
        [tunnel(7), tunnel(8), Destination::Local(2)]
    );
    // On the receiving side: local members only (the input port excluded), no tunnels.
    let got = run(
        &mut p,
        &mut ct,
        Ingress::Tunnel {
            datapath: 5,
            inport: 3,
            outport: 32768,
        },
        &syn(),
    );
    assert_eq!(got, [Destination::Local(1), Destination::Local(2)]);
}

#[test]
fn learned_neighbours_are_events_and_survive_a_swap() {
    let flows = vec![
        flow(
            Pipe::Ingress,
            0,
            100,
            "arp",
            "put_arp(inport, arp.spa, arp.sha);",
        ),
        flow(
            Pipe::Ingress,
            0,
            50,
            "ip4",
            "get_arp(inport, ip4.src); outport = \"b\"; output;",
        ),
        flow(Pipe::Egress, 0, 0, "1", "output;"),
    ];
    let s = spec(vec![switch(
        "ls",
        5,
        vec![
            port("a", 1, PortLocation::Local(1)),
            port("b", 2, PortLocation::Local(2)),
        ],
        flows,
    )]);
    let mut p = Pipeline::new(Program::compile_strict(&s).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    let sha = [2, 0, 0, 0, 0, 0x11];
    let mut arp = Vec::new();
    hf_wire::reply::arp_request(&mut arp, EthAddr(sha), A, B);
    run(&mut p, &mut ct, Ingress::Local(1), &arp);
    let ev = p.take_events();
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Neighbour { datapath, port, ip, mac }
                if datapath == "ls" && port == "a" && *ip == IpAddr::V4(A) && *mac == sha
        )),
        "{ev:?}"
    );
    // A new program (without that binding in its spec) keeps what was learned.
    p.set_program(Program::compile_strict(&s).expect("compiles"));
    assert_eq!(p.neighbour(5, 1, A.into()), Some(sha));
}

#[test]
fn tunnel_keys_outside_geneve_are_refused() {
    let base = || {
        spec(vec![switch(
            "ls",
            5,
            vec![port("a", 1, PortLocation::Local(1))],
            simple("drop;"),
        )])
    };
    let mut s = base();
    s.datapaths[0].tunnel_key = 1 << 24;
    assert!(matches!(
        Program::compile(&s),
        Err(CompileError::TunnelKey { .. })
    ));
    let mut s = base();
    s.datapaths[0].ports[0].key = 1 << 15;
    let e = Program::compile(&s).expect_err("port key too large");
    assert!(
        e.to_string().contains("32768") && e.to_string().contains("port a"),
        "{e}"
    );
    let mut s = base();
    s.datapaths[0].groups.push(GroupSpec {
        name: "g".into(),
        key: 100,
        members: vec![],
    });
    assert!(matches!(
        Program::compile(&s),
        Err(CompileError::TunnelKey { .. })
    ));
    let mut s = base();
    s.datapaths[0].tunnel_key = (1 << 24) - 1;
    s.datapaths[0].ports[0].key = (1 << 15) - 1;
    assert!(Program::compile(&s).is_ok());
}

#[test]
fn a_change_to_one_datapath_recompiles_that_datapath_only() {
    let dp = |name: &str, key: u32, a: &str| {
        switch(
            name,
            key,
            vec![
                port(&format!("{name}-a"), 1, PortLocation::Local(key * 10 + 1)),
                port(&format!("{name}-b"), 2, PortLocation::Local(key * 10 + 2)),
            ],
            vec![
                flow(Pipe::Ingress, 0, 10, "inport == @pg", a),
                flow(Pipe::Ingress, 0, 0, "1", "drop;"),
                flow(Pipe::Egress, 0, 0, "1", "output;"),
            ],
        )
    };
    let mk = |b_action: &str, pg: &[&str]| {
        let mut s = spec(vec![
            dp("x", 1, "outport = \"x-b\"; output;"),
            dp("y", 2, b_action),
            switch(
                "z",
                3,
                vec![port("z-a", 1, PortLocation::Local(31))],
                simple("drop;"),
            ),
        ]);
        s.sets
            .port_groups
            .insert("pg".into(), pg.iter().map(|s| s.to_string()).collect());
        s
    };
    let s1 = mk("drop;", &["x-a", "y-a"]);
    let (p1, _) = Program::compile(&s1).expect("compiles");
    // y's flows change.
    let s2 = mk("outport = \"y-b\"; output;", &["x-a", "y-a"]);
    let (p2, errs) = p1.recompile(&s2, &["y"]).expect("recompiles");
    assert!(errs.is_empty());
    assert!(p2.datapath_shared_with(&p1, "x"));
    assert!(!p2.datapath_shared_with(&p1, "y"));
    assert!(p2.datapath_shared_with(&p1, "z"));
    assert_eq!(p2.shared_datapaths(&p1), 2);
    let mut pipe = Pipeline::new(p2);
    let mut ct = Conntrack::new(Config::default());
    assert_eq!(
        run(&mut pipe, &mut ct, Ingress::Local(21), &syn()),
        [Destination::Local(22)]
    );
    assert_eq!(
        run(&mut pipe, &mut ct, Ingress::Local(11), &syn()),
        [Destination::Local(12)]
    );
    // A port group change touches the datapaths whose flows name it and that have the
    // member that came or went (x, which lost x-a), not y (its member y-a stays) nor z.
    let s3 = mk("outport = \"y-b\"; output;", &["y-a"]);
    let (p3, _) = pipe.program().recompile(&s3, &[]).expect("recompiles");
    assert!(!p3.datapath_shared_with(pipe.program(), "x"));
    assert!(p3.datapath_shared_with(pipe.program(), "y"));
    assert!(p3.datapath_shared_with(pipe.program(), "z"));
    pipe.set_program(p3);
    assert!(run(&mut pipe, &mut ct, Ingress::Local(11), &syn()).is_empty());
    // The same result as a full compile.
    let (full, _) = Program::compile(&s3).expect("compiles");
    let mut fp = Pipeline::new(full);
    for id in [11, 12, 21, 22, 31] {
        assert_eq!(
            run(&mut pipe, &mut ct, Ingress::Local(id), &syn()),
            run(&mut fp, &mut ct, Ingress::Local(id), &syn()),
            "local port {id}"
        );
    }
}
