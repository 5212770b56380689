//! Recompiling by datapath identity and compiling on worker threads: both must give the
//! program a fresh, sequential compile gives (compared as position-free text).

use super::*;
use crate::program::{DatapathKind, FlowSpec, PortSpec};
use hf_expr::actions::Pipeline as Pipe;

/// The program as text that does not depend on where entries sit in the arenas.
fn canonical(p: &Program) -> Vec<String> {
    p.canonical_text()
}

/// A switch with one port `NAME-p` and flows that use every kind of index a compiled datapath
/// holds: nested actions, counted actions, actions naming the datapath, a packet-in action.
fn switch(name: &str, key: u32) -> DatapathSpec {
    let port = format!("{name}-p");
    let texts = [
        (0, 100, format!("inport == \"{port}\""), "next;".to_string()),
        (
            0,
            50,
            "ip4".into(),
            "log(verdict=allow, severity=info); next;".into(),
        ),
        (
            1,
            100,
            "arp.op == 2".into(),
            "put_arp(inport, arp.spa, arp.sha); next;".into(),
        ),
        (
            1,
            90,
            "ip4".into(),
            "reg0[0] = lookup_arp(inport, ip4.src, eth.src); next;".into(),
        ),
        (
            2,
            100,
            "udp.dst == 53".into(),
            "reg0[4] = dns_lookup(); next;".into(),
        ),
        (
            2,
            90,
            "arp.op == 1".into(),
            "arp { eth.dst = ff:ff:ff:ff:ff:ff; log(severity=info); output; }; next;".into(),
        ),
        (
            3,
            100,
            "1".into(),
            format!("reg0[2] = lookup_fdb(inport, eth.src); outport = \"{port}\"; output;"),
        ),
    ];
    let flows = texts
        .iter()
        .map(|(t, prio, m, a)| {
            let mut f = FlowSpec::from_text(Pipe::Ingress, *t, *prio, m, a);
            assert!(f.parse_error.is_none(), "{m} / {a}: {:?}", f.parse_error);
            f.id = crate::FlowId(format!("{name}/{t}/{prio}").into());
            f
        })
        .collect();
    DatapathSpec {
        name: name.into(),
        tunnel_key: key,
        kind: DatapathKind::Switch,
        ports: vec![PortSpec {
            name: port,
            key: 1,
            location: PortLocation::Local(key),
            zone: 1,
            ..PortSpec::default()
        }],
        groups: Vec::new(),
        flows,
    }
}

fn spec(n: u32) -> ProgramSpec {
    ProgramSpec {
        datapaths: (1..=n).map(|k| switch(&format!("ls{k}"), k)).collect(),
        ..ProgramSpec::default()
    }
}

fn compile_all(s: &ProgramSpec) -> Program {
    let (p, errs) = Program::compile(s).expect("compiles");
    assert!(errs.is_empty(), "{errs:?}");
    p
}

#[test]
fn a_datapath_inserted_at_the_front_compiles_alone_and_the_rest_is_reused() {
    let mut s = spec(50);
    let before = compile_all(&s);
    assert_eq!(before.compiled_datapaths(), 50);
    s.datapaths.insert(0, switch("ls-new", 1000));
    let (after, errs) = before.recompile(&s, &[]).expect("recompiles");
    assert!(errs.is_empty(), "{errs:?}");
    // Exactly the new datapath compiled; every other one is the previous program's.
    assert_eq!(after.compiled_datapaths(), 1);
    assert_eq!(after.shared_datapaths(&before), 50);
    assert!(after.datapath_shared_with(&before, "ls50"));
    // ... and the program is the one a full compile gives (datapath-naming actions included).
    let fresh = compile_all(&s);
    assert_eq!(canonical(&after), canonical(&fresh));
    // Moving datapaths around (and removing one) reuses every remaining one, still equal.
    s.datapaths.swap(3, 40);
    s.datapaths.remove(10);
    let (moved, _) = after.recompile(&s, &[]).expect("recompiles");
    assert_eq!(moved.compiled_datapaths(), 0);
    assert_eq!(canonical(&moved), canonical(&compile_all(&s)));
    // A datapath that keeps its name but gets another tunnel key is compiled again.
    s.datapaths[5].tunnel_key = 2000;
    let (rekeyed, _) = moved.recompile(&s, &[]).expect("recompiles");
    assert_eq!(rekeyed.compiled_datapaths(), 1);
    assert_eq!(canonical(&rekeyed), canonical(&compile_all(&s)));
    // So is one whose port was renamed, or got another key (its flows name ports).
    s.datapaths[8].ports[0].name = "renamed".into();
    s.datapaths[9].ports[0].key = 7;
    let (renamed, _) = rekeyed.recompile(&s, &[]).expect("recompiles");
    assert_eq!(renamed.compiled_datapaths(), 2);
    assert_eq!(canonical(&renamed), canonical(&compile_all(&s)));
}

#[test]
fn flows_without_trees_compile_as_with_them() {
    let with = spec(6);
    let mut without = with.clone();
    for f in without.datapaths.iter_mut().flat_map(|d| &mut d.flows) {
        f.drop_trees();
        assert!(!f.has_trees());
        assert!(matches!(*f.matches, hf_expr::Expr::Bool(false)));
    }
    // Equal as flows (the trees are their text's parse), and compiled alike.
    assert_eq!(with.datapaths[0].flows, without.datapaths[0].flows);
    assert_eq!(
        canonical(&compile_all(&without)),
        canonical(&compile_all(&with))
    );
    // A flow parsed by hand (no text) keeps its trees; so does one whose text did not parse.
    let mut bare = with.datapaths[0].flows[0].clone();
    bare.source = None;
    bare.drop_trees();
    assert!(bare.has_trees());
    let mut bad = FlowSpec::from_text(Pipe::Ingress, 0, 1, "ip4 &&& x", "next;");
    assert!(bad.parse_error.is_some());
    bad.drop_trees();
    assert!(bad.has_trees());
}

/// A datapath group's flow is one text in every datapath of the group: a compile of flows kept
/// without trees parses it once per compiling thread, not once per datapath, and compiles
/// what it would from trees.
#[test]
fn a_text_shared_by_datapaths_is_parsed_once_per_thread() {
    let n = 12;
    let mut with = spec(n);
    let shared = FlowSpec::from_text(Pipe::Ingress, 0, 7, "ip4 && tcp.dst == 22", "drop;");
    for d in &mut with.datapaths {
        // A clone holds the same text allocations, as the datapath's decoded flows do.
        d.flows.push(shared.clone());
    }
    let total: usize = with.datapaths.iter().map(|d| d.flows.len()).sum();
    let mut without = with.clone();
    without
        .datapaths
        .iter_mut()
        .flat_map(|d| &mut d.flows)
        .for_each(FlowSpec::drop_trees);
    let reference = canonical(&compile_all(&with));
    assert_eq!(
        compile_all(&with).parsed_flows(),
        0,
        "trees kept: nothing parsed"
    );
    for threads in [1, 2, 3] {
        let (p, errs) = Program::compile_with(
            &without,
            &CompileOptions {
                threads,
                min_parallel_flows: 0,
            },
        )
        .expect("compiles");
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(canonical(&p), reference, "{threads} threads");
        // Every other text is its datapath's own; the shared one is parsed by each thread.
        assert_eq!(
            p.parsed_flows(),
            total - n as usize + threads,
            "{threads} threads"
        );
    }
}

#[test]
fn worker_threads_compile_the_program_the_caller_thread_does() {
    let s = spec(40);
    let one = compile_all(&s);
    for threads in [2, 3, 8, 64] {
        let (p, errs) = Program::compile_with(
            &s,
            &CompileOptions {
                threads,
                min_parallel_flows: 0,
            },
        )
        .expect("compiles");
        assert!(errs.is_empty());
        assert_eq!(p.compiled_datapaths(), 40);
        assert_eq!(canonical(&p), canonical(&one), "{threads} threads");
        // The arenas themselves are laid out as the sequential compile lays them out.
        assert_eq!(p.acts.len(), one.acts.len());
        assert_eq!(format!("{:?}", p.flows), format!("{:?}", one.flows));
    }
    // A recompile on threads: only the changed datapaths, same program.
    let mut s2 = s.clone();
    s2.datapaths.insert(7, switch("ls-a", 500));
    s2.datapaths.push(switch("ls-b", 501));
    s2.datapaths[20].flows.pop();
    let changed = [s2.datapaths[20].name.clone()];
    let changed: Vec<&str> = changed.iter().map(String::as_str).collect();
    let (seq, _) = one.recompile(&s2, &changed).expect("recompiles");
    let (par, _) = one
        .recompile_with(
            &s2,
            &changed,
            &CompileOptions {
                threads: 4,
                min_parallel_flows: 0,
            },
        )
        .expect("recompiles");
    assert_eq!(par.compiled_datapaths(), 3);
    assert_eq!(canonical(&par), canonical(&seq));
    assert_eq!(canonical(&par), canonical(&compile_all(&s2)));
}

// ----- changing a datapath in place, flow by flow -----

/// A small seeded generator (xorshift), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
    fn chance(&mut self, pct: usize) -> bool {
        self.below(100) < pct
    }
}

/// A random flow of a switch whose ports are `p1`..`p9` (some missing), naming ports,
/// address sets, port groups, residency, counted actions; a few never compile (bad text, an
/// unknown set). Priorities come from a small range, so equal priorities overlap (where the
/// classifier's tie-break shows).
fn random_flow(rng: &mut Rng, n: usize) -> FlowSpec {
    let p = 1 + rng.below(9);
    let matches = [
        format!("inport == \"p{p}\""),
        format!("outport == \"p{p}\" && ip4"),
        "ip4.src == $as1".to_string(),
        "ip4.dst == $as2 && tcp".to_string(),
        "inport == @pg1".to_string(),
        "outport == @pg2 && udp".to_string(),
        format!("is_chassis_resident(\"p{p}\")"),
        format!("ip4.dst == 10.0.0.{p}"),
        format!("tcp.dst == {}", 80 + p),
        "ip4 && udp.dst == {53, 67}".to_string(),
        format!("inport == \"p{p}\" && ip4.src == {{10.0.0.1, 10.0.0.2}}"),
        "1".to_string(),
        "ip4.src == $nosuch".to_string(),
        "ip4.src == &&".to_string(),
    ];
    let actions = [
        "next;".to_string(),
        "drop;".to_string(),
        format!("outport = \"p{p}\"; output;"),
        "log(severity=info); next;".to_string(),
        "reg0[0] = 1; next;".to_string(),
        "ct_next;".to_string(),
    ];
    // Errors are rare, as in real programs.
    let skip = if rng.chance(90) { 2 } else { 0 };
    let m = &matches[rng.below(matches.len() - skip)];
    let a = &actions[rng.below(actions.len())];
    let pipe = if rng.chance(30) {
        Pipe::Egress
    } else {
        Pipe::Ingress
    };
    let mut f = FlowSpec::from_text(pipe, rng.below(4) as u8, 10 * rng.below(4) as u16, m, a);
    // Identities are unique but for an occasional clash (derived identities can clash).
    f.id = crate::FlowId(format!("f{}", if rng.chance(5) { 0 } else { n }).into());
    f.stage = format!("stage{}", rng.below(3)).into();
    f
}

fn random_dp(rng: &mut Rng, name: &str, key: u32, next_id: &mut usize) -> DatapathSpec {
    let mut ports = Vec::new();
    for k in 1..=9u32 {
        if rng.chance(80) {
            ports.push(PortSpec {
                name: format!("p{k}"),
                key: k,
                location: PortLocation::Local(key * 100 + k),
                zone: 1,
                resident: rng.chance(50),
                ..PortSpec::default()
            });
        }
    }
    let flows = (0..20 + rng.below(30))
        .map(|_| {
            *next_id += 1;
            random_flow(rng, *next_id)
        })
        .collect();
    DatapathSpec {
        name: name.into(),
        tunnel_key: key,
        kind: DatapathKind::Switch,
        ports,
        groups: Vec::new(),
        flows,
    }
}

fn random_sets(rng: &mut Rng) -> hf_expr::Sets {
    let mut sets = hf_expr::Sets::default();
    for name in ["as1", "as2"] {
        let members = (1..=4u128)
            .filter(|_| rng.chance(50))
            .map(|k| hf_expr::Constant::new(0x0a00_0000 + k, hf_expr::Format::Ipv4))
            .collect();
        sets.addr_sets.insert(name.into(), members);
    }
    for name in ["pg1", "pg2"] {
        let members = (1..=9)
            .filter(|_| rng.chance(30))
            .map(|k| format!("p{k}"))
            .collect();
        sets.port_groups.insert(name.into(), members);
    }
    sets
}

/// One random change of the spec: flows added, removed, changed, moved; ports added, removed,
/// rekeyed, made (non-)resident; sets changed. Returns the datapaths whose flows it changed.
fn random_change(rng: &mut Rng, s: &mut ProgramSpec, next_id: &mut usize) -> Vec<String> {
    let di = rng.below(s.datapaths.len());
    let d = &mut s.datapaths[di];
    let n = d.flows.len();
    let mut flows_changed = true;
    match rng.below(11) {
        0 | 1 if n > 0 => {
            d.flows.remove(rng.below(n));
        }
        2..=4 => {
            *next_id += 1;
            let f = random_flow(rng, *next_id);
            d.flows.insert(rng.below(n + 1), f);
        }
        5 if n > 0 => {
            // Same identity, other content.
            let i = rng.below(n);
            let id = d.flows[i].id.clone();
            *next_id += 1;
            d.flows[i] = random_flow(rng, *next_id);
            d.flows[i].id = id;
        }
        6 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            d.flows.swap(a, b);
        }
        7 => {
            flows_changed = false;
            let k = 1 + rng.below(9) as u32;
            match d.ports.iter().position(|p| p.key == k) {
                Some(i) if rng.chance(50) => {
                    d.ports.remove(i);
                }
                Some(i) => d.ports[i].resident = !d.ports[i].resident,
                None => d.ports.push(PortSpec {
                    name: format!("p{k}"),
                    key: k,
                    location: PortLocation::Local(d.tunnel_key * 100 + k),
                    zone: 1,
                    resident: rng.chance(50),
                    ..PortSpec::default()
                }),
            }
        }
        8 => {
            flows_changed = false;
            // A port renamed: its key stays, its name changes.
            if let Some(p) = d.ports.first_mut() {
                p.name = if p.name.ends_with('x') {
                    p.name.trim_end_matches('x').into()
                } else {
                    format!("{}x", p.name)
                };
            }
        }
        9 => {
            flows_changed = false;
            s.sets = random_sets(rng);
        }
        _ => {
            // Several flows added in a row at one place (ranks spread between neighbours).
            let at = rng.below(n + 1);
            for _ in 0..1 + rng.below(6) {
                *next_id += 1;
                let f = random_flow(rng, *next_id);
                d.flows.insert(at, f);
            }
        }
    }
    if flows_changed {
        vec![s.datapaths[di].name.clone()]
    } else {
        Vec::new()
    }
}

/// Over seeded random changes, a recompile that changes datapaths in place (flow by flow,
/// from the previous recompile's program, so changes pile up) gives the program a fresh
/// compile of the same spec gives: tables (subtables in visiting order, hash lists in order,
/// so the tie-break between equal priorities too), actions, counters, errors, references.
fn check_in_place_seed(seed: u64) -> (usize, usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut next_id = 0;
    let mut s = ProgramSpec {
        datapaths: (1..=3)
            .map(|k| random_dp(&mut rng, &format!("ls{k}"), k, &mut next_id))
            .collect(),
        sets: random_sets(&mut rng),
        ..ProgramSpec::default()
    };
    let (mut prog, _) = Program::compile(&s).expect("compiles");
    let (mut patched, mut partial) = (0, 0);
    for step in 0..40 {
        let changed = random_change(&mut rng, &mut s, &mut next_id);
        let changed: Vec<&str> = changed.iter().map(String::as_str).collect();
        // Half the time the flows hold no trees, as a datapath keeps them: flows compiled
        // again (stale ones, whole datapaths) are parsed from their text.
        if rng.chance(50) {
            s.datapaths
                .iter_mut()
                .flat_map(|d| &mut d.flows)
                .for_each(FlowSpec::drop_trees);
        }
        let (next, errs) = prog.recompile(&s, &changed).expect("recompiles");
        let (fresh, fresh_errs) = Program::compile(&s).expect("compiles");
        assert_eq!(
            canonical(&next),
            canonical(&fresh),
            "seed {seed} step {step}: in place != fresh"
        );
        assert_eq!(errs, fresh_errs, "seed {seed} step {step}: errors");
        patched += next.patched_datapaths();
        if next.patched_datapaths() > 0 && next.compiled_flows() < fresh.compiled_flows() {
            partial += 1;
        }
        prog = next;
    }
    (patched, partial)
}

#[test]
fn in_place_changes_equal_a_fresh_compile_over_random_changes() {
    let (mut patched, mut partial) = (0, 0);
    for seed in 0..60 {
        let (p, q) = check_in_place_seed(seed);
        patched += p;
        partial += q;
    }
    // The in-place path ran, and compiled fewer flows than a whole datapath's.
    assert!(patched > 1000, "only {patched} datapaths changed in place");
    assert!(
        partial > 1000,
        "only {partial} recompiles compiled fewer flows"
    );
}

#[test]
fn a_flow_added_to_a_big_datapath_compiles_alone() {
    let mut s = spec(3);
    // ls2 gets many flows of its own (an ACL table).
    let extra: Vec<FlowSpec> = (0..300)
        .map(|i| {
            let mut f = FlowSpec::from_text(
                Pipe::Ingress,
                4,
                1000,
                &format!("ip4.src == 10.1.{}.{} && tcp.dst == 22", i / 200, i % 200),
                "drop;",
            );
            f.id = crate::FlowId(format!("acl{i}").into());
            f
        })
        .collect();
    s.datapaths[1].flows.extend(extra);
    let before = compile_all(&s);
    let s0 = s.clone();
    // One ACL flow added in the middle, one removed: only the new one compiles; ls1 and ls3
    // are shared whole.
    let mut f = FlowSpec::from_text(Pipe::Ingress, 4, 1000, "ip4.src == 10.9.9.9", "next;");
    f.id = crate::FlowId("acl-new".into());
    s.datapaths[1].flows.insert(150, f);
    s.datapaths[1].flows.remove(20);
    let (after, errs) = before.recompile(&s, &["ls2"]).expect("recompiles");
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(after.compiled_datapaths(), 1);
    assert_eq!(after.patched_datapaths(), 1);
    assert_eq!(after.compiled_flows(), 1);
    assert!(after.datapath_shared_with(&before, "ls1"));
    assert_eq!(canonical(&after), canonical(&compile_all(&s)));
    // The old program (still running until the swap) is untouched: copy-on-write.
    assert_eq!(canonical(&before), canonical(&compile_all(&s0)));
}

/// `spec(2)` with a port group `big` of both switches' ports and 400 names no datapath has
/// (the other switches of a large cluster), and a flow naming it in each switch.
fn big_group_spec() -> ProgramSpec {
    let mut s = spec(2);
    let mut members: Vec<String> = (0..400).map(|i| format!("far{i}")).collect();
    members.push("ls1-p".into());
    members.push("ls2-p".into());
    s.sets.port_groups.insert("big".into(), members);
    for d in &mut s.datapaths {
        let mut f = FlowSpec::from_text(
            Pipe::Ingress,
            4,
            2000,
            "inport == @big && outport == @big && ip4",
            "drop;",
        );
        f.id = crate::FlowId("acl-big".into());
        d.flows.push(f);
        let mut g = FlowSpec::from_text(Pipe::Egress, 4, 1900, "outport == @big", "next;");
        g.id = crate::FlowId("acl-out-big".into());
        d.flows.push(g);
    }
    s
}

#[test]
fn a_port_group_compiles_with_only_the_members_its_datapath_has() {
    let s = big_group_spec();
    let big = compile_all(&s);
    // The same program with the group cut to the two switches' ports: the names no datapath
    // has compile to nothing (not 402 × 402 alternatives per switch kept as dimensions).
    let mut small = s.clone();
    small
        .sets
        .port_groups
        .insert("big".into(), vec!["ls1-p".into(), "ls2-p".into()]);
    assert_eq!(canonical(&big), canonical(&compile_all(&small)));
    // And it is the group's own switch's port that matches: per switch, one port.
    let mut own = s.clone();
    own.sets
        .port_groups
        .insert("big".into(), vec!["ls1-p".into()]);
    assert_ne!(
        canonical(&big),
        canonical(&compile_all(&own)),
        "ls2's flow must still see ls2-p"
    );
}

#[test]
fn a_member_joining_a_group_recompiles_only_the_datapath_that_has_it() {
    let mut s = big_group_spec();
    s.datapaths.push(switch("ls3", 3));
    let before = compile_all(&s);
    // A port of ls2 (`ls2-q`, new) joins the group, and a name no datapath has: ls1 and ls3
    // compile the same flows as before and are shared; ls2 changes.
    let mut next = s.clone();
    next.datapaths[1].ports.push(PortSpec {
        name: "ls2-q".into(),
        key: 2,
        location: PortLocation::Local(22),
        zone: 1,
        ..PortSpec::default()
    });
    if let Some(m) = next.sets.port_groups.get_mut("big") {
        m.push("ls2-q".into());
        m.push("far-new".into());
    }
    let (after, errs) = before.recompile(&next, &[]).expect("recompiles");
    assert!(errs.is_empty(), "{errs:?}");
    assert!(after.datapath_shared_with(&before, "ls1"));
    assert!(after.datapath_shared_with(&before, "ls3"));
    assert!(!after.datapath_shared_with(&before, "ls2"));
    assert_eq!(after.compiled_datapaths(), 1);
    assert_eq!(canonical(&after), canonical(&compile_all(&next)));
    // A member of ls1 leaving: ls1 changes in place (only the flows naming the group), and
    // the result is a fresh compile's.
    let mut last = next.clone();
    if let Some(m) = last.sets.port_groups.get_mut("big") {
        m.retain(|n| n != "ls1-p");
    }
    let (after2, errs) = after.recompile(&last, &[]).expect("recompiles");
    assert!(errs.is_empty(), "{errs:?}");
    assert!(after2.datapath_shared_with(&after, "ls2"));
    assert!(!after2.datapath_shared_with(&after, "ls1"));
    assert_eq!(after2.patched_datapaths(), 1);
    assert_eq!(after2.compiled_flows(), 2);
    assert_eq!(canonical(&after2), canonical(&compile_all(&last)));
}

/// A rough stand-in for the benchmark's 500×40 chassis (`N` switches of 40 ports and ~300
/// flows, a port group with one port on every switch), for profiling the ACL change in
/// process: `cargo test --release -p hf-pipeline --lib -- --ignored acl_on_a_group_of_every_switch --nocapture`.
/// Prints times; asserts only that the recompile equals a fresh compile.
#[test]
#[ignore]
#[allow(clippy::disallowed_methods)] // a profiling aid reads the clock
fn acl_on_a_group_of_every_switch() {
    let n: u32 = std::env::var("HF_ACL_SWITCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let mut s = ProgramSpec::default();
    let mut members = Vec::new();
    for k in 1..=n {
        let name = format!("ls{k}");
        let mut d = switch(&name, k);
        d.ports.clear();
        for p in 0..40u32 {
            d.ports.push(PortSpec {
                name: format!("{name}-p{p}"),
                key: p + 1,
                location: if k % 10 == 0 {
                    PortLocation::Local(k * 100 + p)
                } else {
                    PortLocation::Remote { chassis: 2 }
                },
                zone: 1,
                ..PortSpec::default()
            });
            let mut f = FlowSpec::from_text(
                Pipe::Ingress,
                1,
                50,
                &format!(
                    "inport == \"{name}-p{p}\" && eth.src == 02:00:00:00:{:02x}:{:02x}",
                    k % 256,
                    p
                ),
                "next;",
            );
            f.id = crate::FlowId(format!("ps{p}").into());
            d.flows.push(f);
            let mut f = FlowSpec::from_text(
                Pipe::Ingress,
                20,
                50,
                &format!("eth.dst == 02:00:00:00:{:02x}:{:02x}", k % 256, p),
                &format!("outport = \"{name}-p{p}\"; output;"),
            );
            f.id = crate::FlowId(format!("l2-{p}").into());
            d.flows.push(f);
            for t in 0..5u8 {
                let mut f = FlowSpec::from_text(
                    Pipe::Egress,
                    t,
                    100,
                    &format!(
                        "outport == \"{name}-p{p}\" && ip4.dst == 10.{}.{}.{t}",
                        k % 256,
                        p
                    ),
                    "next;",
                );
                f.id = crate::FlowId(format!("e{p}-{t}").into());
                d.flows.push(f);
            }
        }
        members.push(format!("{name}-p0"));
        s.datapaths.push(d);
    }
    s.sets.port_groups.insert("pg_bench".into(), members);
    let t = std::time::Instant::now();
    let (before, _) = Program::compile(&s).expect("compiles");
    eprintln!(
        "{n} switches, {} flows: cold compile {:?}",
        before.flow_count(),
        t.elapsed()
    );
    let mut next = s.clone();
    let mut names = Vec::new();
    for d in &mut next.datapaths {
        for (i, m) in [
            "inport == @pg_bench && ip4 && tcp.dst == 22",
            "outport == @pg_bench && ip4 && tcp.dst == 22",
        ]
        .iter()
        .enumerate()
        {
            let mut f = FlowSpec::from_text(Pipe::Ingress, 8, 2000, m, "drop;");
            f.id = crate::FlowId(format!("acl-new-{i}").into());
            d.flows.insert(100, f);
        }
        names.push(d.name.clone());
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    // As a datapath keeps them: without trees (`HF_ACL_KEEP_TREES=1`: with them).
    if std::env::var_os("HF_ACL_KEEP_TREES").is_none() {
        next.datapaths
            .iter_mut()
            .flat_map(|d| &mut d.flows)
            .for_each(FlowSpec::drop_trees);
    }
    let t = std::time::Instant::now();
    let (after, _) = before.recompile(&next, &refs).expect("recompiles");
    eprintln!(
        "ACL on a group of every switch: recompile {:?} ({} datapaths patched, {} flows compiled)",
        t.elapsed(),
        after.patched_datapaths(),
        after.compiled_flows()
    );
    let t = std::time::Instant::now();
    let (again, _) = after.recompile(&next, &[]).expect("recompiles");
    eprintln!("nothing changed: recompile {:?}", t.elapsed());
    drop(again);
    drop(before);
    // Where a compiled program's heap sits: a fresh compile, then its parts dropped one by one.
    let mb = |b: isize| b as f64 / 1e6;
    let base = heap::now();
    let (mut p, _) = Program::compile(&next).expect("compiles");
    let whole = heap::now() - base;
    let at = heap::now();
    let rules: usize = p
        .dps
        .iter()
        .flat_map(|d| d.tables.tables.iter().flatten())
        .map(|c| c.rule_count())
        .sum();
    eprintln!(
        "  ({} flows, {} actions, {rules} classifier rules; counted in {:.1} MB)",
        p.flows.len(),
        p.acts.len(),
        mb(heap::now() - at)
    );
    let mut part = |what: &str, f: &mut dyn FnMut(&mut Program)| {
        let at = heap::now();
        f(&mut p);
        eprintln!("  {what}: {:.1} MB", mb(at - heap::now()));
    };
    eprintln!("heap of the compiled program: {:.1} MB", mb(whole));
    eprintln!(
        "  (sizes: CAct {} B, FlowInfo {} B, NatRange {} B, Masked<u128> {} B, Bits {} B)",
        std::mem::size_of::<crate::program::CAct>(),
        std::mem::size_of::<crate::program::FlowInfo>(),
        std::mem::size_of::<hf_conntrack::NatRange>(),
        std::mem::size_of::<hf_conntrack::Masked<u128>>(),
        std::mem::size_of::<crate::packet::Bits>(),
    );
    part("flow infos", &mut |p| p.flows = Default::default());
    part("actions", &mut |p| p.acts = Default::default());
    part("counters", &mut |p| p.counters = Default::default());
    part("slots", &mut |p| {
        for d in &mut p.dps {
            if let Some(c) = Arc::get_mut(&mut d.tables) {
                c.slots = Vec::new();
            }
        }
    });
    part("classifier tables", &mut |p| {
        for d in &mut p.dps {
            if let Some(c) = Arc::get_mut(&mut d.tables) {
                c.tables = Default::default();
            }
        }
    });
    let at = heap::now();
    drop(p);
    eprintln!(
        "  the rest (datapaths, ports, names): {:.1} MB",
        mb(at - heap::now())
    );
    if n <= 50 {
        assert_eq!(canonical(&after), canonical(&compile_all(&next)));
    }
}

/// A counting allocator for the profiling harness's heap figures (every test of this binary
/// allocates through it; it only counts).
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicIsize, Ordering};

    static LIVE: AtomicIsize = AtomicIsize::new(0);

    struct Counting;

    // SAFETY: every call is passed to the system allocator unchanged; only the sizes are
    // counted.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
            // SAFETY: the caller's layout, as given.
            unsafe { System.alloc(l) }
        }
        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
            // SAFETY: `p` came from `alloc` with this layout.
            unsafe { System.dealloc(p, l) }
        }
        unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
            LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
            // SAFETY: as for `dealloc`, with the caller's new size.
            unsafe { System.realloc(p, l, n) }
        }
    }

    #[global_allocator]
    static A: Counting = Counting;

    /// Bytes allocated and not freed, now.
    pub fn now() -> isize {
        LIVE.load(Ordering::Relaxed)
    }
}

/// Whether datapath `name`'s port and group maps are the same allocation in both programs.
fn maps_shared(a: &Program, b: &Program, name: &str) -> bool {
    let find = |p: &Program| {
        p.dps
            .iter()
            .find(|d| d.name == name)
            .map(|d| (d.ports.clone(), d.groups.clone()))
    };
    match (find(a), find(b)) {
        (Some((ap, ag)), Some((bp, bg))) => Arc::ptr_eq(&ap, &bp) && Arc::ptr_eq(&ag, &bg),
        _ => false,
    }
}

/// Six switches with a local port each, a hub patched to `ls1` and `ls2`, and on `ls3` a port
/// with port security and an activation strategy, and a multicast group.
fn patched_spec() -> ProgramSpec {
    let mut s = spec(6);
    let patch = |name: &str, key: u32, peer: &str| PortSpec {
        name: name.into(),
        key,
        location: PortLocation::Patch { peer: peer.into() },
        ..PortSpec::default()
    };
    s.datapaths[0].ports.push(patch("ls1-hub", 2, "hub-ls1"));
    s.datapaths[1].ports.push(patch("ls2-hub", 2, "hub-ls2"));
    let mut hub = switch("hub", 100);
    hub.ports.push(patch("hub-ls1", 2, "ls1-hub"));
    hub.ports.push(patch("hub-ls2", 3, "ls2-hub"));
    s.datapaths.push(hub);
    let ls3 = &mut s.datapaths[2];
    ls3.ports.push(PortSpec {
        name: "vm3".into(),
        key: 2,
        location: PortLocation::Local(300),
        zone: 3,
        activation: Some(crate::program::Activation {
            rarp: true,
            ..Default::default()
        }),
        port_security: vec!["00:00:00:00:00:03 10.0.0.3".into()],
        ..PortSpec::default()
    });
    ls3.groups.push(crate::program::GroupSpec {
        name: "_MC_flood".into(),
        key: MIN_GROUP_KEY,
        members: vec!["ls3-p".into(), "vm3".into()],
    });
    s
}

#[test]
fn port_maps_are_shared_only_where_a_fresh_build_gives_the_same_maps() {
    let mut s = patched_spec();
    let p1 = compile_all(&s);
    let names: Vec<String> = s.datapaths.iter().map(|d| d.name.clone()).collect();
    // Nothing changed: every datapath's maps are the previous program's.
    let (p2, _) = p1.recompile(&s, &[]).expect("recompiles");
    for n in &names {
        assert!(maps_shared(&p2, &p1, n), "{n} rebuilt");
    }
    assert_eq!(canonical(&p2), canonical(&p1));
    // One port's security changed: only its datapath's maps are built again.
    s.datapaths[2].ports[1].port_security = vec!["00:00:00:00:00:33 10.0.0.33".into()];
    let (p3, _) = p2.recompile(&s, &[]).expect("recompiles");
    assert!(!maps_shared(&p3, &p2, "ls3"));
    assert!(maps_shared(&p3, &p2, "ls4") && maps_shared(&p3, &p2, "hub"));
    assert_ne!(canonical(&p3), canonical(&p2));
    assert_eq!(canonical(&p3), canonical(&compile_all(&s)));
    // A local port moves to another interface: its datapath's maps and the local map follow.
    s.datapaths[3].ports[0].location = PortLocation::Local(44);
    let (p4, _) = p3.recompile(&s, &[]).expect("recompiles");
    assert!(!maps_shared(&p4, &p3, "ls4"));
    assert_eq!(canonical(&p4), canonical(&compile_all(&s)));
    // A datapath inserted at the front moves every index: the patch peers resolve to other
    // datapath indexes, so the patched datapaths' maps are built again; the rest are shared.
    s.datapaths.insert(0, switch("ls-new", 1000));
    let (p5, _) = p4.recompile(&s, &[]).expect("recompiles");
    for n in ["ls1", "ls2", "hub"] {
        assert!(!maps_shared(&p5, &p4, n), "{n} shared with stale peers");
    }
    assert!(maps_shared(&p5, &p4, "ls3") && maps_shared(&p5, &p4, "ls6"));
    assert_eq!(canonical(&p5), canonical(&compile_all(&s)));
    // A shared datapath's local port still takes part in the duplicate check: `ls5` (built
    // again) now claims `ls6`'s interface, and `ls6` (shared) must collide with it.
    s.datapaths[5].ports[0].location = PortLocation::Local(6);
    let fresh = Program::compile(&s)
        .map(|_| ())
        .expect_err("duplicate interface");
    let err = p5
        .recompile(&s, &[])
        .map(|_| ())
        .expect_err("duplicate interface");
    assert_eq!(err, fresh);
}
