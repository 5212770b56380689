//! The flat established-flow path: an established TCP packet's run finds its first segment
//! through the resume point's hint and its continuation after conntrack through the `ct_next`
//! op's hint (copies of the cache entries, see `cache`), with no hashed lookup; and the copies
//! die with what they were made from: a program swap, a conntrack state change or expiry, a
//! port removal. Every run is compared with a twin pipeline that walks every packet
//! (`process_uncached`) on its own conntrack table.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_conntrack::{Config, Conntrack, Owner};
use hf_expr::actions::Pipeline as Pipe;
use hf_pipeline::{
    CacheStats, DatapathKind, DatapathSpec, Destination, FlowSpec, Ingress, Outputs, Pipeline,
    PortLocation, PortSpec, Program, ProgramSpec,
};
use hf_wire::tcp_flags;

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

const FAR: Destination = Destination::Tunnel {
    chassis: 7,
    datapath: 5,
    inport: 1,
    outport: 3,
};

/// The established-flow policy: `ct_next` in table 0, then established traffic from vm1 to
/// `to_vm2`'s port, replies to vm1, new connections from vm1 committed, anything else to the
/// tunnel (so a changed conntrack state shows in the output; a committed frame is marked).
fn flows(to_vm2: &str) -> Vec<(u8, u16, String)> {
    vec![
        (0, 100, "ip".into()),
        (1, 100, format!("ct.est && inport == \"vm1\" => {to_vm2}")),
        (1, 100, "ct.est && inport == \"vm2\" => vm1".into()),
        (1, 90, "ct.new && inport == \"vm1\" => commit".into()),
        (1, 0, "1 => far".into()),
    ]
}

/// The program: one switch with vm1 (local 1), far (remote chassis 7) and, when `with_vm2`,
/// vm2 (local 2). Flows naming a port the program lacks are dropped (and reported) by the
/// compile, as a port removal does.
fn program(to_vm2: &str, with_vm2: bool) -> Program {
    let port = |name: &str, key: u32, location| PortSpec {
        name: name.into(),
        key,
        location,
        // One zone for both VMs: a reply finds the connection its request committed.
        zone: 1,
        ..PortSpec::default()
    };
    let mut fl = Vec::new();
    for (t, p, m) in flows(to_vm2) {
        let (m, a) = match m.split_once(" => ") {
            None => (m.as_str(), "ct_next;".to_string()),
            // Committed frames are marked (their Ethernet source rewritten).
            Some((m, "commit")) => (
                m,
                "ct_commit { }; eth.src = 02:00:00:00:00:aa; outport = \"vm2\"; output;".into(),
            ),
            Some((m, to)) => (m, format!("outport = \"{to}\"; output;")),
        };
        fl.push(FlowSpec::parse(Pipe::Ingress, t, p, m, &a).expect("flow parses"));
    }
    fl.push(FlowSpec::parse(Pipe::Ingress, 0, 0, "1", "next;").expect("flow parses"));
    fl.push(FlowSpec::parse(Pipe::Egress, 0, 0, "1", "output;").expect("egress"));
    let mut ports = vec![
        port("vm1", 1, PortLocation::Local(1)),
        port("far", 3, PortLocation::Remote { chassis: 7 }),
    ];
    if with_vm2 {
        ports.push(port("vm2", 2, PortLocation::Local(2)));
    }
    let (p, _errors) = Program::compile(&ProgramSpec {
        datapaths: vec![DatapathSpec {
            name: "ls".into(),
            tunnel_key: 5,
            kind: DatapathKind::Switch,
            ports,
            groups: Vec::new(),
            flows: fl,
        }],
        neighbours: Vec::new(),
        sets: hf_expr::Sets::default(),
        owner: Owner(1),
        ..ProgramSpec::default()
    })
    .expect("program compiles");
    p
}

/// A segment of connection `sport` between vm1 (A) and vm2 (B).
fn seg(from_vm1: bool, sport: u16, flags: u16, seq: (u32, u32), payload: usize) -> Vec<u8> {
    let (a, b) = ((IpAddr::V4(A), sport), (IpAddr::V4(B), 80));
    if from_vm1 {
        tcp_frame(&Seg::new(a, b, flags, seq, payload))
    } else {
        tcp_frame(&Seg::new(b, a, flags, seq, payload))
    }
}

/// A cached pipeline and its walking twin, each with its own conntrack table.
struct Twin {
    cached: Pipeline,
    walked: Pipeline,
    ct: [Conntrack; 2],
    now: Duration,
}

impl Twin {
    fn new(prog: impl Fn() -> Program) -> Twin {
        Twin {
            cached: Pipeline::new(prog()),
            walked: Pipeline::new(prog()),
            ct: [
                Conntrack::new(Config::default()),
                Conntrack::new(Config::default()),
            ],
            now: Duration::from_secs(1),
        }
    }

    /// Runs `f` through both; panics if they differ; returns the destinations.
    fn run(&mut self, from: Ingress, f: &[u8]) -> Vec<Destination> {
        self.run_frames(from, f)
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    }

    /// [`Twin::run`], returning the frames too.
    fn run_frames(&mut self, from: Ingress, f: &[u8]) -> Vec<(Destination, Vec<u8>)> {
        let (mut oa, mut ow) = (Outputs::default(), Outputs::default());
        let [ca, cw] = &mut self.ct;
        let ra = self.cached.process(ca, from, f, self.now, &mut oa);
        let rw = self.walked.process_uncached(cw, from, f, self.now, &mut ow);
        assert_eq!(ra.is_ok(), rw.is_ok(), "one side refused the frame");
        let a: Vec<_> = oa.iter().map(|(d, b)| (d, b.to_vec())).collect();
        let w: Vec<_> = ow.iter().map(|(d, b)| (d, b.to_vec())).collect();
        assert_eq!(a, w, "the cached path and the full walk differ");
        assert_eq!(ca.len(), cw.len(), "the conntrack tables differ");
        a
    }

    fn swap(&mut self, prog: impl Fn() -> Program) {
        self.cached.set_program(prog());
        self.walked.set_program(prog());
    }

    /// Handshake of connection `sport`, then `n` data segments from vm1 (seq from 1001).
    fn establish(&mut self, sport: u16, n: u32) {
        assert_eq!(
            self.run(
                Ingress::Local(1),
                &seg(true, sport, tcp_flags::SYN, (1000, 0), 0)
            ),
            [Destination::Local(2)]
        );
        assert_eq!(
            self.run(
                Ingress::Local(2),
                &seg(
                    false,
                    sport,
                    tcp_flags::SYN | tcp_flags::ACK,
                    (5000, 1001),
                    0
                )
            ),
            [Destination::Local(1)]
        );
        for i in 0..n {
            assert_eq!(self.data(sport, i), [Destination::Local(2)]);
        }
    }

    /// Data segment `i` of connection `sport` from vm1.
    fn data(&mut self, sport: u16, i: u32) -> Vec<Destination> {
        self.data_frames(sport, i)
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    }

    /// [`Twin::data`], returning the frames too.
    fn data_frames(&mut self, sport: u16, i: u32) -> Vec<(Destination, Vec<u8>)> {
        let f = seg(
            true,
            sport,
            tcp_flags::ACK | tcp_flags::PSH,
            (1001 + 100 * i, 5001),
            100,
        );
        self.run_frames(Ingress::Local(1), &f)
    }

    fn stats(&self) -> CacheStats {
        self.cached.cache_stats()
    }
}

/// Whether the frames are one committed frame to vm2 (see [`flows`]).
fn committed(out: &[(Destination, Vec<u8>)]) -> bool {
    matches!(out, [(Destination::Local(2), f)] if f.get(6..12) == Some(&[2, 0, 0, 0, 0, 0xaa][..]))
}

fn delta(a: CacheStats, b: CacheStats) -> (u64, u64, u64, u64) {
    (
        b.lookups - a.lookups,
        b.first_hinted - a.first_hinted,
        b.chained - a.chained,
        b.hint_refused - a.hint_refused,
    )
}

/// An established packet takes no hashed lookup: its first segment comes through the resume
/// point's hint, its continuation through the `ct_next` op's (lookups, first hinted, chained,
/// refused per packet: 0, 1, 1, 0), on many connections sharing the entries.
#[test]
fn an_established_packet_takes_no_hashed_lookup() {
    let mut t = Twin::new(|| program("vm2", true));
    for sport in 1000..1010 {
        t.establish(sport, 3);
    }
    let s0 = t.stats();
    for i in 3..13 {
        for sport in 1000..1010 {
            assert_eq!(t.data(sport, i), [Destination::Local(2)]);
        }
    }
    assert_eq!(delta(s0, t.stats()), (0, 100, 100, 0));
}

/// A program swap: the established flow's copies die with the old program's cache (the new
/// program sends established traffic to the tunnel).
#[test]
fn a_program_swap_ends_the_flat_path() {
    let mut t = Twin::new(|| program("vm2", true));
    t.establish(1000, 3);
    t.swap(|| program("far", true));
    assert_eq!(t.data(1000, 3), [FAR], "the old program's entry answered");
    // And the new program's flat path settles.
    t.data(1000, 4);
    let s0 = t.stats();
    assert_eq!(t.data(1000, 5), [FAR]);
    assert_eq!(delta(s0, t.stats()), (0, 1, 1, 0));
}

/// Conntrack expiry: after the established timeout the same segment is not established any
/// more (it is a new connection, committed again); the continuation's copy is refused on the
/// state after conntrack, and the first segment's (which does not depend on conntrack) still
/// serves.
#[test]
fn conntrack_expiry_ends_the_flat_path() {
    let mut t = Twin::new(|| program("vm2", true));
    t.establish(1000, 3);
    t.now += Config::default().timeouts.tcp_established + Duration::from_secs(1);
    let s0 = t.stats();
    let out = t.data_frames(1000, 3);
    assert!(committed(&out), "the expired connection's path: {out:?}");
    let (lookups, first, chained, refused) = delta(s0, t.stats());
    assert_eq!((first, chained, refused), (1, 0, 1), "{lookups}");
}

/// A conntrack state change: the zone is flushed (as a policy change does) under the
/// established flow; vm1's next segment is not established (the continuation's copy is
/// refused): a new connection, committed again.
#[test]
fn a_conntrack_state_change_ends_the_flat_path() {
    let mut t = Twin::new(|| program("vm2", true));
    t.establish(1000, 3);
    for ct in &mut t.ct {
        assert_eq!(ct.flush_zone(1).expect("flushed"), 1);
    }
    let s0 = t.stats();
    let out = t.data_frames(1000, 3);
    assert!(committed(&out), "the flushed connection's path: {out:?}");
    assert_eq!(delta(s0, t.stats()).3, 1, "the continuation's copy refused");
}

/// A port removal (a program without vm2): vm1's established traffic no longer reaches vm2
/// (the output to a port the program lacks goes nowhere), and vm2's frames are refused.
#[test]
fn a_port_removal_ends_the_flat_path() {
    let mut t = Twin::new(|| program("vm2", true));
    t.establish(1000, 3);
    t.swap(|| program("vm2", false));
    assert_eq!(t.data(1000, 3), [], "the removed port still received");
    assert!(
        t.run(Ingress::Local(2), &seg(false, 1000, 0, (0, 0), 0))
            .is_empty()
    );
}
