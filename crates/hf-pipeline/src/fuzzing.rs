//! Random programs and packets from bytes, shared by the fuzz target
//! (`fuzz/fuzz_targets/pipeline.rs`), its corpus replay and the differential property test. Not
//! part of the stable API.
//!
//! The topology is fixed (a switch with two local VIFs, a remote port and a patch to a router
//! whose other port is local, plus a flood group); the flows are drawn from pools of matches and
//! actions that cover every action family the interpreter implements.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, icmp_echo, tcp_frame, udp_frame};
use hf_conntrack::{Config, Conntrack, Owner, Selection};
use hf_expr::actions::Pipeline as Pipe;
use hf_wire::{EthAddr, tcp_flags};

use crate::{
    DatapathKind, DatapathSpec, FlowSpec, GroupSpec, Ingress, Outputs, Pipeline, PortLocation,
    PortSpec, Program, ProgramSpec,
};

const MATCHES: &[&str] = &[
    "1",
    "ip4",
    "tcp",
    "udp",
    "arp",
    "icmp4",
    "ip4.src == 10.0.0.0/24",
    "ip4.dst == 192.168.0.1",
    "tcp.dst == 80",
    "tcp.dst == {80, 443}",
    "tcp.src >= 1024",
    "ct.est",
    "ct.new",
    "!ct.trk",
    "ct.trk && ct.rpl",
    "ct.inv || ct_mark.blocked == 1",
    "reg0[0] == 1",
    "reg0 == 5",
    "inport == \"vm1\"",
    "outport == \"vm2\"",
    "outport != \"vm1\"",
    "eth.dst == 02:00:00:00:00:02",
    "eth.bcast",
    "ip.ttl == 64",
    "ct_mark.natted == 1",
    "flags.loopback == 1",
    "reg1 == 10.0.0.5",
    "udp.src == 53 || tcp.src == 53",
    "ip4.src == $as1",
    "inport == @pg1",
    "reg2 == 2",
    "eth.src[40] == 0",
    "tcp.flags & 0x2 == 0x2",
    "reg0[15] == 1",
    "reg0[11] == 1",
    "reg9[5] == 1",
    "reg9[6] == 1",
    "reg4 == 10.0.0.7",
    "outport == \"none\"",
    "reg0[3] == 1",
];

const EFFECTS: &[&str] = &[
    "",
    "reg0[0] = 1;",
    "reg0 = 5;",
    "reg1 = ip4.src;",
    "eth.dst <-> eth.src;",
    "ip.ttl--;",
    "ct_clear;",
    "outport = \"vm2\";",
    "outport = \"rp\";",
    "outport = \"_MC_flood\";",
    "outport = \"remote\";",
    "outport = \"vm1\";",
    "flags.loopback = 1;",
    "ct_commit { ct_mark.blocked = 0; ct_label.label = 7; };",
    "ct_commit(ct_mark=0x1/0x1);",
    "reg3[0] = chk_lb_hairpin();",
    "get_arp(outport, ip4.dst);",
    "put_arp(inport, arp.spa, arp.sha);",
    "reg4[0] = lookup_arp(inport, arp.spa, arp.sha);",
    "ip4.dst = 192.168.0.9;",
    "tcp.dst = 8080;",
    "push(reg0); pop(reg5);",
    "eth.src = 02:00:00:00:00:aa;",
    "reg6 = reg1;",
    "reg0[15] = check_in_port_sec();",
    "reg0[15] = check_out_port_sec();",
    "put_fdb(inport, eth.src);",
    "reg0[11] = lookup_fdb(inport, eth.src);",
    "outport = get_fdb(eth.dst);",
    "commit_ecmp_nh(ipv6 = false, proto = tcp);",
    "reg9[5] = chk_ecmp_nh_mac();",
    "reg9[5] = chk_ecmp_nh();",
    "commit_lb_aff(vip = \"192.168.0.1:80\", backend = \"10.0.0.7:80\", proto = tcp, timeout = 1);",
    "reg9[6] = chk_lb_aff();",
    "reg0[3] = put_dhcp_opts(offerip = 10.0.0.1, lease_time = 10);",
    "reg0[4] = dns_lookup();",
    "log(name=\"x\", severity=info, verdict=allow);",
    "set_meter(10);",
    "ct_snat_to_vip;",
    "icmp4.frag_mtu = 1400;",
];

const TERMINALS: &[&str] = &[
    "next;",
    "next;",
    "output;",
    "drop;",
    "ct_next;",
    "ct_snat(172.16.0.1);",
    "ct_dnat;",
    "ct_snat;",
    "ct_lb_mark(backends=10.0.0.7:80,10.0.0.8:80);",
    "ct_commit_nat;",
    "clone { outport = \"vm1\"; output; }; next;",
    "arp { eth.dst = ff:ff:ff:ff:ff:ff; output; };",
    "icmp4 { eth.dst <-> eth.src; ip4.dst <-> ip4.src; output; };",
    "tcp_reset { output; };",
    "next(3);",
    "next(pipeline=egress, table=0);",
    "ct_dnat(10.0.0.9);",
    "ct_snat_in_czone(172.16.0.2);",
    "reg2 = select(1, 2, 3);",
    "ct_lb_mark(backends=10.0.0.7:80,10.0.0.8:80; hash_fields=\"ip_src,ip_dst\");",
    "icmp4_error { eth.dst <-> eth.src; icmp4.type = 11; ip4.dst = ip4.src; ip4.src = 10.0.0.254; output; };",
];

/// Reads bytes, yielding zeros once they run out.
#[derive(Debug)]
pub struct Bytes<'a>(&'a [u8]);

impl<'a> Bytes<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Bytes(data)
    }

    /// The next byte (0 when exhausted).
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[usize::from(self.byte()) % from.len()]
    }
}

fn port(name: &str, key: u32, location: PortLocation, zone: u16) -> PortSpec {
    PortSpec {
        name: name.into(),
        key,
        location,
        zone,
        ..PortSpec::default()
    }
}

fn flows(b: &mut Bytes<'_>, n: usize, ports: &[&str]) -> Vec<FlowSpec> {
    let mut out = Vec::new();
    for pipe in [Pipe::Ingress, Pipe::Egress] {
        for table in 0..5u8 {
            // A catch-all at priority 0 keeps most packets moving; the last ingress table
            // picks an output port.
            let tail = match (pipe, table) {
                (Pipe::Ingress, 4) => format!("outport = \"{}\"; output;", b.pick(ports)),
                (_, 4) => "output;".to_string(),
                _ if b.byte().is_multiple_of(4) => format!("{} next;", b.pick(EFFECTS)),
                _ => "next;".to_string(),
            };
            if let Ok(f) = FlowSpec::parse(pipe, table, 0, "1", &tail) {
                out.push(f);
            }
        }
    }
    for _ in 0..n {
        let pipe = if b.byte() & 1 == 0 {
            Pipe::Ingress
        } else {
            Pipe::Egress
        };
        let table = b.byte() % 5;
        let prio = u16::from(b.byte() % 4) * 50 + 1;
        let m = b.pick(MATCHES);
        let a = format!("{} {}", b.pick(EFFECTS), b.pick(TERMINALS));
        if let Ok(f) = FlowSpec::parse(pipe, table, prio, m, &a) {
            out.push(f);
        }
    }
    out
}

/// A random program: fixed topology, `data`-chosen flows.
pub fn program_from(b: &mut Bytes<'_>) -> ProgramSpec {
    let ps = b.byte();
    let n = usize::from(b.byte() % 24);
    let ls_flows = flows(b, n, &["vm1", "vm2", "rp", "remote", "_MC_flood", "nope"]);
    let n = usize::from(b.byte() % 12);
    let lr_flows = flows(b, n, &["lrp-ls", "lrp-ext"]);
    let mut sets = hf_expr::Sets::default();
    sets.addr_sets.insert(
        "as1".into(),
        vec![hf_expr::Constant::new(0x0a00_0001, hf_expr::Format::Ipv4)],
    );
    // Members of both datapaths and a name neither has: each datapath's flows compile with
    // the members it has (compile.rs `sets_for_dp`), the reference reads the whole group.
    sets.port_groups.insert(
        "pg1".into(),
        vec!["vm1".into(), "rp".into(), "lrp-ext".into(), "ghost".into()],
    );
    ProgramSpec {
        datapaths: vec![
            DatapathSpec {
                name: "ls".into(),
                tunnel_key: 1,
                kind: DatapathKind::Switch,
                ports: vec![
                    PortSpec {
                        port_security: if ps & 1 != 0 {
                            vec!["02:00:00:00:00:01 10.0.0.1".into()]
                        } else {
                            Vec::new()
                        },
                        ..port("vm1", 1, PortLocation::Local(1), 1)
                    },
                    PortSpec {
                        port_security: if ps & 2 != 0 {
                            vec!["02:00:00:00:00:02 10.0.0.0/24".into()]
                        } else {
                            Vec::new()
                        },
                        ..port("vm2", 2, PortLocation::Local(2), 2)
                    },
                    port(
                        "rp",
                        3,
                        PortLocation::Patch {
                            peer: "lrp-ls".into(),
                        },
                        0,
                    ),
                    port("remote", 4, PortLocation::Remote { chassis: 7 }, 0),
                ],
                groups: vec![GroupSpec {
                    name: "_MC_flood".into(),
                    key: 32768,
                    members: vec!["vm1".into(), "vm2".into(), "rp".into(), "remote".into()],
                }],
                flows: ls_flows,
            },
            DatapathSpec {
                name: "lr".into(),
                tunnel_key: 2,
                kind: DatapathKind::Router {
                    dnat_zone: 10,
                    snat_zone: 11,
                },
                ports: vec![
                    port("lrp-ls", 1, PortLocation::Patch { peer: "rp".into() }, 0),
                    port("lrp-ext", 2, PortLocation::Local(3), 0),
                ],
                groups: Vec::new(),
                flows: lr_flows,
            },
        ],
        neighbours: Vec::new(),
        sets,
        owner: Owner(1),
        lb_vips: ["ls", "lr"]
            .iter()
            .map(|dp| crate::LbVipSpec {
                datapath: (*dp).into(),
                ip: Ipv4Addr::new(192, 168, 0, 1).into(),
                port: 80,
                proto: 6,
            })
            .collect(),
        switch_snat_zones: vec![("ls".into(), 20)],
        ..ProgramSpec::default()
    }
}

/// A random frame and where it enters.
pub fn frame_from(b: &mut Bytes<'_>) -> (Ingress, Vec<u8>) {
    let ips: [IpAddr; 5] = [
        Ipv4Addr::new(10, 0, 0, 1).into(),
        Ipv4Addr::new(10, 0, 0, 5).into(),
        Ipv4Addr::new(192, 168, 0, 1).into(),
        Ipv4Addr::new(172, 16, 0, 1).into(),
        Ipv4Addr::new(10, 0, 0, 7).into(),
    ];
    let (src, dst) = (b.pick(&ips), b.pick(&ips));
    let (sp, dp) = (
        b.pick(&[1024u16, 40000, 53, 80]),
        b.pick(&[80u16, 443, 53, 8080]),
    );
    let kind = b.byte() % 8;
    let flags = b.pick(&[
        tcp_flags::SYN,
        tcp_flags::SYN | tcp_flags::ACK,
        tcp_flags::ACK,
        tcp_flags::FIN | tcp_flags::ACK,
        tcp_flags::RST,
    ]);
    let seq = u32::from(b.byte()) * 1000;
    let mut f = match kind {
        0..=3 => tcp_frame(&Seg::new((src, sp), (dst, dp), flags, (seq, seq), 0)),
        4 | 5 => udp_frame(src, sp, dst, dp),
        6 => icmp_echo(src, dst, u16::from(b.byte()), false),
        _ => {
            let mut v = Vec::new();
            let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) else {
                return (Ingress::Local(1), v);
            };
            hf_wire::reply::arp_request(&mut v, EthAddr([2, 0, 0, 0, 0, 1]), s, d);
            v
        }
    };
    let dst_mac = b.pick(&[[2u8, 0, 0, 0, 0, 2], [0xff; 6], [2, 0, 0, 0, 0, 1]]);
    if let Some(d) = f.get_mut(0..6) {
        d.copy_from_slice(&dst_mac);
    }
    if b.byte().is_multiple_of(8) {
        // TTL 1 (IPv4 header checksum left stale: the pipeline does not verify it).
        if let Some(t) = f.get_mut(22) {
            *t = 1;
        }
    }
    let from = match b.byte() % 5 {
        0 | 1 => Ingress::Local(1),
        2 => Ingress::Local(2),
        3 => Ingress::Local(3),
        _ => Ingress::Tunnel {
            datapath: 1,
            inport: 4,
            outport: u32::from(b.byte() % 5),
        },
    };
    (from, f)
}

fn collect(out: &Outputs) -> Vec<(crate::Destination, Vec<u8>)> {
    out.iter().map(|(d, f)| (d, f.to_vec())).collect()
}

/// What a differential run exercised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Packets run.
    pub packets: usize,
    /// Frames output.
    pub outputs: usize,
    /// Segments served by the cache.
    pub cache_hits: usize,
    /// Recirculations after conntrack.
    pub recirculations: usize,
    /// Continuations after conntrack found through their op's hint (no hashed lookup).
    pub chained: u64,
    /// Hints tried and refused (their entry did not match the context after conntrack).
    pub hint_refused: u64,
    /// Connections in the table at the end.
    pub connections: usize,
    /// Events reported plus learned entries (FDB, ECMP, affinity) at the end.
    pub learned: usize,
    /// Hits of counted actions (`log`, `set_meter`, DHCP/DNS functions, ...).
    pub counted: u64,
    /// Datapaths of the cached side's program that a recompile changed in place.
    pub patched: usize,
    /// First segments found through their resume point's hint (no hashed lookup).
    pub first_hinted: u64,
    /// Programs swapped under the cache mid-run (a port removed).
    pub swapped: usize,
}

impl Coverage {
    /// Adds another run's counts.
    pub fn add(&mut self, o: &Coverage) {
        self.packets += o.packets;
        self.outputs += o.outputs;
        self.cache_hits += o.cache_hits;
        self.recirculations += o.recirculations;
        self.chained += o.chained;
        self.hint_refused += o.hint_refused;
        self.connections += o.connections;
        self.learned += o.learned;
        self.counted += o.counted;
        self.patched += o.patched;
        self.first_hinted += o.first_hinted;
        self.swapped += o.swapped;
    }
}

/// Runs one random program over random packets twice, through the cache (the program changed in
/// place by a recompile) and by full walks (a fresh compile), and
/// panics if the outputs or the conntrack tables differ. Returns the number of packets run.
pub fn differential(data: &[u8]) -> usize {
    differential_with_coverage(data).packets
}

/// Action counters in a stable order: a program changed in place lists them in arena order,
/// which a fresh compile does not share.
fn sorted_hits(mut v: Vec<crate::ActionHits>) -> Vec<crate::ActionHits> {
    v.sort_by_cached_key(|h| format!("{h:?}"));
    v
}

/// [`differential`], saying what it exercised.
pub fn differential_with_coverage(data: &[u8]) -> Coverage {
    let mut cov = Coverage::default();
    let mut b = Bytes::new(data);
    let spec = program_from(&mut b);
    // The cached side runs a program changed in place (every third flow of each datapath
    // added back to a compile without them, flow by flow), the full walk a fresh compile: the
    // two must behave the same too.
    let mut before = spec.clone();
    for d in &mut before.datapaths {
        let mut i = 0;
        d.flows.retain(|_| {
            i += 1;
            i % 3 != 0
        });
    }
    let names: Vec<&str> = spec.datapaths.iter().map(|d| d.name.as_str()).collect();
    let Ok((prog_a, _)) = Program::compile(&before).and_then(|(p, _)| p.recompile(&spec, &names))
    else {
        return cov;
    };
    cov.patched = prog_a.patched_datapaths();
    let Ok((prog_b, _)) = Program::compile(&spec) else {
        return cov;
    };
    // The program, for a failing case (`HF_DIFF_DEBUG=1`).
    if std::env::var_os("HF_DIFF_DEBUG").is_some() {
        for d in &spec.datapaths {
            eprintln!("datapath {} groups {:?}", d.name, d.groups);
            for f in &d.flows {
                eprintln!(
                    "  {:?} table {} priority {} match {} actions {:?}",
                    f.pipeline, f.table, f.priority, f.matches, f.actions
                );
            }
        }
    }
    let (mut a, mut w) = (Pipeline::new(prog_a), Pipeline::new(prog_b));
    // Packet-in mode for half the inputs, chosen without consuming a byte (so committed corpora
    // keep their meaning).
    let packet_in = data.len() % 2 == 1;
    a.set_packet_in(packet_in);
    w.set_packet_in(packet_in);
    let (mut ct_a, mut ct_w) = (
        Conntrack::new(Config::default()),
        Conntrack::new(Config::default()),
    );
    let (mut out_a, mut out_w) = (Outputs::default(), Outputs::default());
    let mut frames = Vec::new();
    let mut n = 0;
    // Under the cache's feet, at fixed packets (chosen without consuming a byte): conntrack's
    // connections all expire (the clock jumps past the longest timeout), then the program is
    // swapped for one without `vm2` (a port removal), on both sides. Cached entries and their
    // hints made before must not answer after.
    let (expire_at, swap_at) = (20, 40);
    let skew = |n: usize| {
        Duration::from_millis(10 * n as u64)
            + if n >= expire_at {
                Duration::from_secs(6 * 86_400)
            } else {
                Duration::ZERO
            }
    };
    while !b.is_empty() && n < 64 {
        if n == swap_at {
            let mut removed = spec.clone();
            for d in &mut removed.datapaths {
                d.ports.retain(|p| p.name != "vm2");
                for g in &mut d.groups {
                    g.members.retain(|m| m != "vm2");
                }
            }
            if let (Ok((pa, _)), Ok((pw, _))) =
                (Program::compile(&removed), Program::compile(&removed))
            {
                a.set_program(pa);
                w.set_program(pw);
                cov.swapped += 1;
            }
        }
        // Replay earlier packets often so that the cache gets hits.
        let (from, frame) = if !frames.is_empty() && b.byte().is_multiple_of(2) {
            let i = usize::from(b.byte()) % frames.len();
            frames.swap_remove(i)
        } else {
            frame_from(&mut b)
        };
        let now = skew(n);
        let ra = a.process(&mut ct_a, from, &frame, now, &mut out_a);
        let rw = w.process_uncached(&mut ct_w, from, &frame, now, &mut out_w);
        assert_eq!(
            ra.is_ok(),
            rw.is_ok(),
            "packet {n}: one path refused the frame"
        );
        if let Ok(r) = ra {
            cov.cache_hits += r.cache_hits as usize;
            cov.recirculations += r.segments.saturating_sub(1) as usize;
        }
        cov.outputs += out_a.len();
        assert_eq!(
            collect(&out_a),
            collect(&out_w),
            "packet {n}: outputs differ"
        );
        assert_eq!(ct_a.len(), ct_w.len(), "packet {n}: conntrack sizes differ");
        let ev = a.take_events();
        cov.learned += ev.len();
        assert_eq!(ev, w.take_events(), "packet {n}: events differ");
        assert_eq!(
            a.learn_stats(),
            w.learn_stats(),
            "packet {n}: learned state differs"
        );
        assert_eq!(
            sorted_hits(a.action_hits()),
            sorted_hits(w.action_hits()),
            "packet {n}: action counters differ"
        );
        let mut tr = Outputs::default();
        let _ = a.trace(&ct_a, from, &frame, now, &mut tr);
        frames.push((from, frame.clone()));
        frames.push((from, frame));
        n += 1;
    }
    let now = skew(n);
    assert_eq!(
        ct_a.export(&Selection::everything(), now),
        ct_w.export(&Selection::everything(), now),
        "conntrack tables differ"
    );
    let hits = sorted_hits(a.action_hits());
    assert_eq!(hits, sorted_hits(w.action_hits()), "action counters differ");
    cov.counted = hits.iter().map(|h| h.hits).sum();
    let l = a.learn_stats();
    cov.learned += l.fdb + l.ecmp + l.lb_affinity;
    cov.packets = n;
    cov.connections = ct_a.len();
    let st = a.cache_stats();
    cov.chained = st.chained;
    cov.hint_refused = st.hint_refused;
    cov.first_hinted = st.first_hinted;
    cov
}
