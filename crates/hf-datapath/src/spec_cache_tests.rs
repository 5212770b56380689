//! The spec a delta's cached build gives ([`SpecCache::build_knowing`]: unchanged datapaths'
//! flows, ports and groups and unchanged sets taken from the cache) equals the spec built from
//! scratch ([`to_spec`]), over seeded random programs, deltas and local-port changes.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::delta::{apply_undoable, between};
use crate::proto::{DatapathMsg, GroupMsg, PortMsg};

use crate::delta::tests::Rng;

const TEXTS: &[(&str, &str)] = &[
    ("ip4", "next;"),
    ("ip4.src == $as0", "drop;"),
    ("ip4.dst == $as1 && tcp", "next;"),
    ("outport == @pg0", "output;"),
    ("ip4 &&& nonsense", "next;"),
    ("eth.type == 0x800", "next;"),
];

fn flow(rng: &mut Rng, n: usize) -> Arc<FlowMsg> {
    let (m, a) = TEXTS[rng.below(TEXTS.len())];
    Arc::new(FlowMsg {
        table: rng.below(3) as u8,
        priority: 100 + n as u16,
        matches: m.into(),
        actions: a.into(),
        id: format!("f{n}").into(),
        stage: "ls_in_acl".into(),
        last_good: rng.chance(30).then(|| ("ip4".into(), "next;".into())),
        ..FlowMsg::default()
    })
}

fn port(rng: &mut Rng, dp: usize, n: usize) -> PortMsg {
    let name = format!("p{dp}-{n}");
    PortMsg {
        location: match rng.below(3) {
            0 => LocationMsg::Local(name.clone()),
            1 => LocationMsg::Remote(1 + rng.below(2) as u32),
            _ => LocationMsg::Unbound,
        },
        name,
        key: n as u32 + 1,
        zone: 1 + rng.below(3) as u16,
        addresses: vec![format!("00:00:00:00:{dp:02x}:{n:02x} 10.{dp}.0.{n}")],
        ..PortMsg::default()
    }
}

fn datapath(rng: &mut Rng, n: usize) -> DatapathMsg {
    let ports: Vec<PortMsg> = (0..1 + rng.below(4)).map(|i| port(rng, n, i)).collect();
    let members = ports.iter().map(|p| p.name.clone()).collect();
    DatapathMsg {
        name: format!("dp{n}"),
        tunnel_key: n as u32 + 1,
        ports: ports.into(),
        groups: vec![GroupMsg {
            name: "_MC_flood".into(),
            key: 32768,
            members,
        }]
        .into(),
        flows: (0..rng.below(6)).map(|i| flow(rng, i)).collect(),
        ..DatapathMsg::default()
    }
}

fn program(rng: &mut Rng) -> ProgramMsg {
    ProgramMsg {
        generation: 1,
        chassis: "hv1".into(),
        datapaths: (0..1 + rng.below(5))
            .map(|i| Arc::new(datapath(rng, i)))
            .collect(),
        zones: (1..=3).map(|z| (format!("lsp/z{z}"), z)).collect(),
        address_sets: [("as0".to_string(), vec!["10.0.0.1".to_string()])].into(),
        port_groups: [("pg0".to_string(), vec!["p0-0".to_string()])].into(),
        ..ProgramMsg::default()
    }
}

/// A random next program: datapaths added, removed, reordered; ports, groups and flows
/// changed; sets added, changed, removed.
fn mutate(rng: &mut Rng, old: &ProgramMsg) -> ProgramMsg {
    let mut p = old.clone();
    p.generation += 1;
    match rng.below(6) {
        0 if p.datapaths.len() > 1 => {
            let i = rng.below(p.datapaths.len());
            p.datapaths.remove(i);
        }
        1 => {
            let n = 10 + rng.below(30);
            if !p.datapaths.iter().any(|d| d.tunnel_key == n as u32 + 1) {
                let at = rng.below(p.datapaths.len() + 1);
                p.datapaths.insert(at, Arc::new(datapath(rng, n)));
            }
        }
        2 if p.datapaths.len() > 1 => {
            let (a, b) = (rng.below(p.datapaths.len()), rng.below(p.datapaths.len()));
            p.datapaths.swap(a, b);
        }
        _ => {}
    }
    let n = p.datapaths.len();
    for _ in 0..rng.below(3) {
        let d = Arc::make_mut(&mut p.datapaths[rng.below(n)]);
        let dn: usize = d.name[2..].parse().unwrap_or(0);
        match rng.below(6) {
            0 => {
                // Same port (name, key), new location, zone, addresses.
                let i = rng.below(d.ports.len());
                Arc::make_mut(&mut d.ports)[i] = port(rng, dn, d.ports[i].key as usize - 1);
            }
            1 => {
                let k = d.ports.iter().map(|p| p.key).max().unwrap_or(0) as usize;
                let p = port(rng, dn, k);
                Arc::make_mut(&mut d.groups)[0].members.push(p.name.clone());
                Arc::make_mut(&mut d.ports).push(p);
            }
            2 if d.ports.len() > 1 => {
                let i = rng.below(d.ports.len());
                let gone = Arc::make_mut(&mut d.ports).remove(i);
                Arc::make_mut(&mut d.groups)[0]
                    .members
                    .retain(|m| *m != gone.name);
            }
            3 => {
                let i = d.flows.len() + rng.below(3);
                d.flows.push(flow(rng, i + 50));
            }
            4 if !d.flows.is_empty() => {
                let i = rng.below(d.flows.len());
                let (m, a) = TEXTS[rng.below(TEXTS.len())];
                let f = Arc::make_mut(&mut d.flows[i]);
                (f.matches, f.actions) = (m.into(), a.into());
            }
            _ => Arc::make_mut(&mut d.groups)[0].members.reverse(),
        }
    }
    if rng.chance(30) {
        let k = format!("as{}", rng.below(3));
        if rng.chance(40) {
            p.address_sets.remove(&k);
        } else {
            let m = (0..1 + rng.below(3))
                .map(|i| format!("10.1.{}.{i}", rng.below(9)))
                .collect();
            p.address_sets.insert(k, m);
        }
    }
    if rng.chance(20) {
        let k = format!("pg{}", rng.below(2));
        if rng.chance(40) {
            p.port_groups.remove(&k);
        } else {
            p.port_groups
                .insert(k, vec![format!("p0-{}", rng.below(3))]);
        }
    }
    p
}

/// Which ports are local (by iface-id): changes without any delta.
fn local_map(rng: &mut Rng, p: &ProgramMsg) -> BTreeMap<String, u32> {
    let mut id = 0;
    let mut m = BTreeMap::new();
    for d in &p.datapaths {
        for port in d.ports.iter() {
            id += 1;
            if rng.chance(70) {
                m.insert(port.name.clone(), id);
            }
        }
    }
    m
}

/// A spec as text, sets sorted (they are hash maps).
fn text(spec: &ProgramSpec, reported: &[FlowErrorMsg]) -> String {
    let a: BTreeMap<_, _> = spec.sets.addr_sets.iter().collect();
    let g: BTreeMap<_, _> = spec.sets.port_groups.iter().collect();
    format!(
        "{:?}\n{a:?}\n{g:?}\n{:?} {:?} {:?} {:?} {:?}\n{reported:?}",
        spec.datapaths, spec.neighbours, spec.fdb, spec.lb_vips, spec.switch_snat_zones, spec.dns
    )
}

fn check_seed(seed: u64) -> Result<usize, String> {
    let mut rng = Rng::new(seed);
    let mut cache = SpecCache::new();
    let mut msg = program(&mut rng);
    let mut local = local_map(&mut rng, &msg);
    let (mut prog, _) = compile_cached(&msg, &local, None, &mut cache, &[])
        .map_err(|e| format!("seed {seed}: first program: {e}"))?;
    let mut trusted = 0;
    for step in 0..25 {
        let new = mutate(&mut rng, &msg);
        if rng.chance(50) {
            local = local_map(&mut rng, &new);
        }
        let delta = between(&msg, &new, None);
        let applied = apply_undoable(&mut msg, &delta)
            .map_err(|e| format!("seed {seed} step {step}: {e}"))?;
        let dps: BTreeSet<String> = applied.changed.iter().cloned().collect();
        let sets: BTreeSet<String> = applied
            .undo
            .touched_address_sets()
            .map(str::to_string)
            .collect();
        let groups: BTreeSet<String> = applied
            .undo
            .touched_port_groups()
            .map(str::to_string)
            .collect();
        let knowing = Knowing {
            datapaths: &dps,
            address_sets: &sets,
            port_groups: &groups,
        };
        trusted += msg.datapaths.len() - dps.len().min(msg.datapaths.len());
        let built = cache
            .build_knowing(&msg, &local, knowing)
            .map_err(|e| format!("seed {seed} step {step}: {e}"))?;
        let (want, want_errs) =
            to_spec(&msg, &local).map_err(|e| format!("seed {seed} step {step}: {e}"))?;
        if text(built.spec(), built.reported()) != text(&want, &want_errs) {
            return Err(format!(
                "seed {seed} step {step}: the cached build differs from to_spec\n{}\n---\n{}",
                text(built.spec(), built.reported()),
                text(&want, &want_errs)
            ));
        }
        let changed: Vec<&str> = dps.iter().map(String::as_str).collect();
        let (next, errs) = cache
            .compile(&msg, built, Some(&prog), &changed)
            .map_err(|e| format!("seed {seed} step {step}: compile: {e}"))?;
        // The program too (ports shared unchecked where the cache promises them unchanged):
        // what a fresh compile of the message gives, without the cache or a previous program.
        let (fresh, fresh_errs) = crate::program::compile(&msg, &local, None)
            .map_err(|e| format!("seed {seed} step {step}: fresh compile: {e}"))?;
        if next.canonical_text() != fresh.canonical_text() || errs != fresh_errs {
            return Err(format!(
                "seed {seed} step {step}: the cached install differs from a fresh compile\n{:?}\n---\n{:?}",
                next.canonical_text(),
                fresh.canonical_text()
            ));
        }
        prog = next;
    }
    Ok(trusted)
}

/// The cache keeps the running program's flows without parse trees (a compile parses a flow's
/// text again when it compiles it): what ~150k trees took between compiles.
#[test]
fn the_cache_keeps_no_parse_trees() {
    let mut parsed = 0;
    for seed in 0..20 {
        let mut rng = Rng::new(seed);
        let mut cache = SpecCache::new();
        let msg = program(&mut rng);
        let local = local_map(&mut rng, &msg);
        compile_cached(&msg, &local, None, &mut cache, &[]).expect("compiles");
        for f in cache.dps.values().flat_map(|d| &d.flows) {
            parsed += usize::from(f.parse_error.is_none());
            assert!(
                !f.has_trees() || f.parse_error.is_some(),
                "seed {seed}: {:?} keeps its trees",
                f.id
            );
        }
    }
    assert!(parsed > 20, "{parsed}");
}

#[test]
fn a_deltas_cached_build_equals_a_build_from_scratch() {
    let mut trusted = 0;
    for seed in 0..150 {
        match check_seed(seed) {
            Ok(t) => trusted += t,
            Err(e) => panic!("{e}"),
        }
    }
    // Most datapaths were taken from the cache unseen (the case the comparison is about).
    assert!(trusted > 5_000, "{trusted}");
}

/// The same program again takes every datapath from the cache, those whose flows run their
/// last good text included (their messages are kept, sparsely, and compared whole).
#[test]
fn flows_with_a_last_good_text_are_taken_from_the_cache_again() {
    let mut with_last_good = 0;
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let msg = program(&mut rng);
        let local = local_map(&mut rng, &msg);
        let mut cache = SpecCache::new();
        let (prog, _) = compile_cached(&msg, &local, None, &mut cache, &[])
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let cached = cache.dps.len();
        with_last_good += cache
            .dps
            .values()
            .filter(|d| !d.last_good.0.is_empty())
            .count();
        let again = cache
            .build(&msg, &local)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // (A datapath compiled again from last good texts after a compile error is not
        // cached: it is parsed again.)
        assert_eq!(again.reused(), cached, "seed {seed}");
        cache
            .compile(&msg, again, Some(&prog), &[])
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
    assert!(
        with_last_good > 10,
        "cached datapaths with last good texts: {with_last_good}"
    );
}

/// A big datapath's change of a few flows (one removed, one inserted, one changed) takes
/// every unchanged flow's parse from the cache by looking a few flows ahead, without indexing
/// the datapath's identities (the hub router's 31k flows must not cost a pass per port add).
#[test]
fn a_few_flows_changed_in_a_big_datapath_are_found_by_looking_ahead() {
    let old: Vec<FlowMsg> = (0..1_000)
        .map(|i| FlowMsg {
            table: (i % 7) as u8,
            priority: 100,
            matches: format!("ip4.dst == 10.0.{}.{}", i / 256, i % 256).into(),
            actions: "next;".into(),
            id: format!("lr0/f{i}").into(),
            stage: "lr_in_ip_routing".into(),
            ..FlowMsg::default()
        })
        .collect();
    let mut new = old.clone();
    new.remove(300);
    new.insert(
        600,
        FlowMsg {
            matches: "ip4.dst == 10.9.9.9".into(),
            id: "lr0/new".into(),
            ..old[0].clone()
        },
    );
    new[800].actions = "drop;".into();
    let cached = ParsedDp {
        flows: old
            .iter()
            .map(|f| flow_spec(f, (&f.matches, &f.actions), None))
            .collect(),
        ports: Vec::new(),
        groups: Vec::new(),
        used: vec![Used::Primary; old.len()],
        last_good: LastGoods::default(),
        syntax: Vec::new(),
    };
    let mut r = Reusable::new(cached);
    let taken: Vec<bool> = new.iter().map(|f| r.take(f).is_some()).collect();
    let missed: Vec<usize> = (0..new.len()).filter(|&i| !taken[i]).collect();
    assert_eq!(
        missed,
        [600, 800],
        "only the inserted and the changed flow are parsed"
    );
    assert!(r.by_id.is_none(), "the identities were indexed");
    // A reordered datapath still takes every parse (through the index).
    let mut shuffled = old.clone();
    shuffled.reverse();
    let cached = ParsedDp {
        flows: old
            .iter()
            .map(|f| flow_spec(f, (&f.matches, &f.actions), None))
            .collect(),
        ports: Vec::new(),
        groups: Vec::new(),
        used: vec![Used::Primary; old.len()],
        last_good: LastGoods::default(),
        syntax: Vec::new(),
    };
    let mut r = Reusable::new(cached);
    let missed = shuffled.iter().filter(|f| r.take(f).is_none()).count();
    assert!(
        missed <= Reusable::LOOK_AHEAD_MISSES,
        "{missed} parsed again"
    );
}

/// `msg` with every equal flow text made one allocation, as a decoded frame has them
/// ([`crate::intern`]).
fn shared_texts(msg: &ProgramMsg) -> ProgramMsg {
    let frame = crate::proto::encode(&crate::proto::ToDatapath::Program(Box::new(msg.clone())))
        .unwrap_or_default();
    let mut dec = crate::proto::Decoder::<crate::proto::ToDatapath>::new();
    dec.push(&frame);
    match dec.next_msg() {
        Ok(Some(crate::proto::ToDatapath::Program(m))) => *m,
        other => panic!("decoding gave {other:?}"),
    }
}

/// A spec built with shared parses (a flow whose texts are the allocations of a flow parsed
/// before takes that parse) equals, flow by flow, each flow parsed on its own from unshared
/// copies of its texts; and flows of equal texts share one match tree and one action list.
#[test]
fn a_shared_parse_equals_each_flows_own_parse() {
    let mut shared = 0;
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let mut msg = program(&mut rng);
        // Other places, priorities, identities and stages for the same texts (a datapath
        // group's flow has one place; a memo must not carry one flow's over to another).
        for d in &mut msg.datapaths {
            for f in &mut Arc::make_mut(d).flows {
                let f = Arc::make_mut(f);
                f.egress = rng.chance(50);
                f.table = rng.below(4) as u8;
                f.priority = rng.below(3) as u16;
                f.stage = ["ls_in_acl", "ls_in_l2_lkup", ""][rng.below(3)].into();
                f.sb_uuid = rng.chance(50).then(|| format!("u{}", rng.below(3)).into());
                f.stage_hint = rng.chance(50).then(|| format!("h{}", rng.below(3)).into());
            }
        }
        if rng.chance(30) {
            msg.feature_level = Some("hf-1".into());
        }
        let msg = shared_texts(&msg);
        let local = local_map(&mut rng, &msg);
        let (spec, _) = to_spec(&msg, &local).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let level = level_of(&msg).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let mut seen: Vec<&FlowSpec> = Vec::new();
        for (d, sd) in msg.datapaths.iter().zip(&spec.datapaths) {
            assert_eq!(d.flows.len(), sd.flows.len(), "seed {seed}");
            for (f, s) in d.flows.iter().zip(&sd.flows) {
                // The flow alone, from copies nobody else holds (no memo can answer it).
                let own = (Arc::from(&*f.matches), Arc::from(&*f.actions));
                let mut want = flow_spec(f, (&own.0, &own.1), level.as_ref());
                if want.parse_error.is_some()
                    && let Some((m, a)) = &f.last_good
                {
                    let lg_own = (Arc::from(&**m), Arc::from(&**a));
                    let lg = flow_spec(f, (&lg_own.0, &lg_own.1), level.as_ref());
                    if lg.parse_error.is_none() {
                        want = lg;
                    }
                }
                assert_eq!(*s, want, "seed {seed}: datapath {}", d.name);
                for o in &seen {
                    let same_text =
                        o.source
                            .as_ref()
                            .zip(s.source.as_ref())
                            .is_some_and(|(a, b)| {
                                Arc::ptr_eq(&a.matches, &b.matches)
                                    && Arc::ptr_eq(&a.actions, &b.actions)
                            });
                    if same_text {
                        assert!(Arc::ptr_eq(&o.matches, &s.matches), "seed {seed}");
                        assert!(Arc::ptr_eq(&o.actions, &s.actions), "seed {seed}");
                        shared += 1;
                    }
                }
                seen.push(s);
            }
        }
    }
    assert!(shared > 1_500, "flows sharing a parse: {shared}");
}

/// A rough stand-in for the benchmark's 500×40 chassis (`HF_SCALE_SWITCHES` switches of 40
/// ports, ~300 flows each, a port group with one port on every switch), for profiling a
/// datapath's install of a delta in process: `cargo test --release -p hf-datapath --lib --
/// --ignored install_at_scale --nocapture`. Prints each stage's time (delta apply, spec build,
/// compile) for a port add on one switch and an ACL on the group; asserts nothing timed.
#[test]
#[ignore]
#[allow(clippy::disallowed_methods)] // a profiling aid reads the clock
fn install_at_scale() {
    let n: usize = std::env::var("HF_SCALE_SWITCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let mut local = BTreeMap::new();
    let text = |s: String| -> Arc<str> { s.into() };
    let mut dps = Vec::new();
    let mut members = Vec::new();
    for k in 0..n {
        let name = format!("ls{k}");
        let mut ports = Vec::new();
        let mut flows = Vec::new();
        for p in 0..40usize {
            let pn = format!("{name}-p{p}");
            let loc = if k % 10 == 0 {
                local.insert(pn.clone(), (k * 100 + p) as u32);
                LocationMsg::Local(pn.clone())
            } else {
                LocationMsg::Remote(2)
            };
            ports.push(PortMsg {
                name: pn.clone(),
                key: p as u32 + 1,
                location: loc,
                zone: 1,
                addresses: vec![format!(
                    "02:00:00:00:{:02x}:{p:02x} 10.{}.{}.{p}",
                    k % 256,
                    k / 256,
                    k % 256
                )],
                port_security: vec![format!(
                    "02:00:00:00:{:02x}:{p:02x} 10.{}.{}.{p}",
                    k % 256,
                    k / 256,
                    k % 256
                )],
                ..PortMsg::default()
            });
            let mut f = |t: u8, egress: bool, m: String, a: String, id: String| {
                flows.push(FlowMsg {
                    egress,
                    table: t,
                    priority: 50,
                    matches: text(m),
                    actions: text(a),
                    id: text(format!("{name}/{id}")),
                    stage: "ls_in_l2_lkup".into(),
                    ..FlowMsg::default()
                })
            };
            f(
                1,
                false,
                format!(
                    "inport == \"{pn}\" && eth.src == 02:00:00:00:{:02x}:{p:02x}",
                    k % 256
                ),
                "next;".into(),
                format!("ps{p}"),
            );
            f(
                20,
                false,
                format!("eth.dst == 02:00:00:00:{:02x}:{p:02x}", k % 256),
                format!("outport = \"{pn}\"; output;"),
                format!("l2-{p}"),
            );
            for t in 0..5u8 {
                f(
                    t,
                    true,
                    format!("outport == \"{pn}\" && ip4.dst == 10.{}.{p}.{t}", k % 256),
                    "next;".into(),
                    format!("e{p}-{t}"),
                );
            }
        }
        members.push(format!("{name}-p0"));
        dps.push(Arc::new(DatapathMsg {
            name,
            tunnel_key: k as u32 + 1,
            ports: ports.into(),
            flows: flows.into_iter().map(Arc::new).collect(),
            ..DatapathMsg::default()
        }));
    }
    // The hub router lr0 (the benchmark's has ~31k flows): a port per switch, an ARP
    // resolution flow per switch port and a few routing flows per switch.
    let mut ports = Vec::new();
    let mut flows = Vec::new();
    for k in 0..n {
        let rp = format!("lr0-ls{k}");
        ports.push(PortMsg {
            name: rp.clone(),
            key: k as u32 + 1,
            location: LocationMsg::Unbound,
            zone: 2,
            ..PortMsg::default()
        });
        let mut f = |t: u8, prio: u16, m: String, a: String, id: String, stage: &str| {
            flows.push(FlowMsg {
                table: t,
                priority: prio,
                matches: text(m),
                actions: text(a),
                id: text(format!("lr0/{id}")),
                stage: stage.into(),
                ..FlowMsg::default()
            })
        };
        for p in 0..40usize {
            f(
                14,
                100,
                format!(
                    "outport == \"{rp}\" && reg0 == 10.{}.{}.{p}",
                    k % 256,
                    k / 256
                ),
                format!("eth.dst = 02:00:00:00:{:02x}:{p:02x}; next;", k % 256),
                format!("arp-{k}-{p}"),
                "lr_in_arp_resolve",
            );
        }
        for t in 0..22u8 {
            f(
                t % 12,
                90 + u16::from(t),
                format!(
                    "inport == \"{rp}\" && ip4.dst == 10.{}.{}.{t}",
                    k % 256,
                    k / 256
                ),
                "next;".into(),
                format!("r-{k}-{t}"),
                "lr_in_ip_routing",
            );
        }
    }
    dps.push(Arc::new(DatapathMsg {
        name: "lr0".into(),
        tunnel_key: n as u32 + 1,
        router_zones: Some((2, 3)),
        ports: ports.into(),
        flows: flows.into_iter().map(Arc::new).collect(),
        ..DatapathMsg::default()
    }));
    let msg = ProgramMsg {
        generation: 1,
        chassis: "hv1".into(),
        datapaths: dps,
        zones: [
            ("lsp/z".to_string(), 1),
            ("lr0_dnat".to_string(), 2),
            ("lr0_snat".to_string(), 3),
        ]
        .into(),
        port_groups: [("pg_bench".to_string(), members)].into(),
        ..ProgramMsg::default()
    };
    let mut cache = SpecCache::new();
    let t = std::time::Instant::now();
    let built = cache.build(&msg, &local).expect("builds");
    let t_spec = t.elapsed();
    let (mut prog, errs) = cache.compile(&msg, built, None, &[]).expect("compiles");
    assert!(errs.is_empty(), "{:?}", &errs[..errs.len().min(3)]);
    eprintln!(
        "{n} switches, {} flows: cold spec build {t_spec:?}, compile {:?}",
        prog.flow_count(),
        t.elapsed() - t_spec
    );
    let mut running = msg;
    let mut step = |name: &str, next: ProgramMsg, running: &mut ProgramMsg, prog: &mut Program| {
        let d = between(running, &next, None);
        let t0 = std::time::Instant::now();
        let a = apply_undoable(running, &d).expect("applies");
        let t1 = t0.elapsed();
        let may: std::collections::BTreeSet<String> = a.changed.iter().cloned().collect();
        let sets: std::collections::BTreeSet<String> =
            a.undo.touched_address_sets().map(str::to_string).collect();
        let groups: std::collections::BTreeSet<String> =
            a.undo.touched_port_groups().map(str::to_string).collect();
        let built = cache
            .build_knowing(
                running,
                &local,
                Knowing {
                    datapaths: &may,
                    address_sets: &sets,
                    port_groups: &groups,
                },
            )
            .expect("builds");
        let t2 = t0.elapsed();
        let changed: Vec<&str> = a.changed.iter().map(String::as_str).collect();
        let c = cache
            .compile_prev(
                running,
                built,
                Some(prog),
                PrevProgram::Delta {
                    now: running,
                    undo: &a.undo,
                },
                &changed,
            )
            .expect("compiles");
        let t3 = t0.elapsed();
        eprintln!(
            "{name}: delta apply {t1:?}, spec build {:?}, compile {:?} ({} datapaths changed, {} patched, {} flows compiled)",
            t2 - t1,
            t3 - t2,
            a.changed.len(),
            c.program.patched_datapaths(),
            c.program.compiled_flows()
        );
        *prog = c.program;
        running.generation = next.generation;
    };
    // A port add on ls1 (a remote port: its flows and its port).
    let mut next = running.clone();
    next.generation = 2;
    {
        let d = Arc::make_mut(&mut next.datapaths[1]);
        Arc::make_mut(&mut d.ports).push(PortMsg {
            name: "ls1-new".into(),
            key: 41,
            location: LocationMsg::Remote(2),
            zone: 1,
            ..PortMsg::default()
        });
        d.flows.insert(
            3,
            FlowMsg {
                table: 20,
                priority: 50,
                matches: "eth.dst == 02:00:00:00:ff:ff".into(),
                actions: "outport = \"ls1-new\"; output;".into(),
                id: "ls1/l2-new".into(),
                stage: "ls_in_l2_lkup".into(),
                ..FlowMsg::default()
            }
            .into(),
        );
    }
    {
        // lr0 learns the new port's address (one flow, as the controller's delta carries it).
        let lr = next.datapaths.len() - 1;
        let d = Arc::make_mut(&mut next.datapaths[lr]);
        d.flows.insert(
            41,
            FlowMsg {
                table: 14,
                priority: 100,
                matches: "outport == \"lr0-ls1\" && reg0 == 10.1.0.41".into(),
                actions: "eth.dst = 02:00:00:00:ff:ff; next;".into(),
                id: "lr0/arp-1-new".into(),
                stage: "lr_in_arp_resolve".into(),
                ..FlowMsg::default()
            }
            .into(),
        );
    }
    let without = running.clone();
    let with = next.clone();
    step("port add", next, &mut running, &mut prog);
    // `HF_SCALE_REPEAT=n`: the port removed and added again n times (more samples).
    let repeat: u64 = std::env::var("HF_SCALE_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    for r in 0..repeat {
        for (name, m) in [("port remove", &without), ("port add", &with)] {
            let mut m = m.clone();
            m.generation = 4 + 2 * r + u64::from(name == "port add");
            step(name, m, &mut running, &mut prog);
        }
    }
    // An ACL on the group: two flows in every switch.
    let mut next = running.clone();
    next.generation = 4 + 2 * repeat;
    for d in next
        .datapaths
        .iter_mut()
        .filter(|d| d.router_zones.is_none())
    {
        let d = Arc::make_mut(d);
        for (i, m) in [
            "inport == @pg_bench && ip4 && tcp.dst == 22",
            "outport == @pg_bench && ip4 && tcp.dst == 22",
        ]
        .iter()
        .enumerate()
        {
            let id = format!("{}/acl-{i}", d.name);
            d.flows.insert(
                100,
                FlowMsg {
                    table: 8,
                    priority: 2000,
                    matches: (*m).into(),
                    actions: "drop;".into(),
                    id: id.into(),
                    stage: "ls_in_acl_eval".into(),
                    ..FlowMsg::default()
                }
                .into(),
            );
        }
    }
    step(
        "ACL on a group of every switch",
        next,
        &mut running,
        &mut prog,
    );
}
