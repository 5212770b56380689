//! Recompiling by datapath identity and compiling on worker threads: both must give the
//! program a fresh, sequential compile gives (compared as position-free text).

use super::*;
use crate::program::{DatapathKind, FlowSpec, PortSpec};
use hf_expr::actions::Pipeline as Pipe;

/// One action, with nested bodies and counters resolved (counter numbers depend on what a
/// recompile reused; the counter's name, liveness and flow do not).
fn act_text(p: &Program, i: u32) -> String {
    let Some(a) = p.acts.get(i as usize) else {
        return format!("missing act {i}");
    };
    let counter = |c: u32| match p.counters.get(c as usize) {
        Some(k) => format!(
            "counter {} live {} dp {} flow {:?}",
            k.name,
            k.live,
            k.dp,
            p.flows.get(k.flow as usize).map(|f| &f.matches)
        ),
        None => format!("missing counter {c}"),
    };
    match a {
        CAct::Nested { kind, body } => format!(
            "Nested {kind:?} [{}]",
            body.clone()
                .map(|j| act_text(p, j))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        CAct::PacketIn { counter: c, .. }
        | CAct::BindVport { counter: c, .. }
        | CAct::Count { counter: c, .. } => {
            let mut z = a.clone();
            if let CAct::PacketIn { counter, .. }
            | CAct::BindVport { counter, .. }
            | CAct::Count { counter, .. } = &mut z
            {
                *counter = 0;
            }
            format!("{z:?} {}", counter(*c))
        }
        _ => format!("{a:?}"),
    }
}

fn flow_text(p: &Program, f: u32) -> String {
    match p.flows.get(f as usize) {
        Some(fi) => format!(
            "{} {} {} | {} | {}",
            fi.id,
            fi.priority,
            fi.matches,
            fi.actions,
            fi.acts
                .clone()
                .map(|i| act_text(p, i))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        None => format!("missing flow {f}"),
    }
}

/// The program as text that does not depend on where entries sit in the arenas.
fn canonical(p: &Program) -> Vec<String> {
    let mut out = Vec::new();
    for (i, d) in p.dps.iter().enumerate() {
        out.push(format!("dp {i} {} key {} {:?}", d.name, d.key, d.kind));
        let mut ports: Vec<_> = d.ports.iter().collect();
        ports.sort_by_key(|(k, _)| **k);
        out.push(format!("ports {ports:?}"));
        let mut groups: Vec<_> = d.groups.iter().collect();
        groups.sort();
        out.push(format!(
            "groups {groups:?} vips {:?} snat {:?}",
            d.vips, d.snat_zone
        ));
        let c = &d.tables;
        out.push(format!(
            "errors {:?} resident {:?} sets {:?} names {:?} flows {}",
            c.errors, c.resident_refs, c.set_refs, c.names, c.flow_count
        ));
        for (pi, tables) in c.tables.iter().enumerate() {
            for (ti, t) in tables.iter().enumerate() {
                out.push(format!("table {pi}/{ti}"));
                out.extend(t.describe(&|f| flow_text(p, f)));
            }
        }
    }
    let live = p.counters.iter().filter(|c| c.live).count();
    let mut local: Vec<_> = p.local.iter().collect();
    local.sort();
    let mut dns: Vec<_> = p.dns.iter().collect();
    dns.sort();
    out.push(format!(
        "live counters {live} local {local:?} neighbours {:?} fdb {:?} inactive {:?} dns {dns:?}",
        p.neighbours, p.fdb, p.inactive
    ));
    out
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
            f.id = crate::FlowId(format!("{name}/{t}/{prio}"));
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
