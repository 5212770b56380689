//! The incremental compiler's oracle: seeded random NB changes (ports, addresses, ACLs, port
//! groups, NAT, routes, policies, load balancers, switches, routers, address sets, global
//! options) applied as real OVSDB transactions to a generator-like NB; after every step the
//! incremental result must equal `hf_northd::compile` of the same NB (SbDesired and
//! diagnostics). Also checks that a port add rebuilds only the datapaths it can touch.

mod common;

use common::{Nb, gen_topo_like, generator_like};
use hf_northd::incremental::Incremental;
use hf_northd::{Options, compile};
use serde_json::json;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn world() -> Nb {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    // A second router with its own switches, and a router-to-router link.
    nb.lr("lr1", &[]);
    for k in 0..3 {
        let s = format!("sx{k}");
        nb.ls(&s);
        nb.link(
            &s,
            "lr1",
            &format!("lr1-{s}"),
            &format!("0a:00:00:00:fe:{k:02x}"),
            &[&format!("10.9.{k}.1/24")],
        );
        nb.vif(
            &s,
            &format!("{s}-vm1"),
            &format!("0a:00:00:09:{k:02x}:01 10.9.{k}.11"),
            true,
        );
    }
    nb.lrp(
        "lr0",
        "lr0-lr1",
        "0a:00:00:00:fd:00",
        &["192.168.255.1/30"],
        Some("lr1-lr0"),
    );
    nb.lrp(
        "lr1",
        "lr1-lr0",
        "0a:00:00:00:fd:01",
        &["192.168.255.2/30"],
        Some("lr0-lr1"),
    );
    nb
}

fn lsp_uuids(nb: &Nb) -> Vec<(uuid::Uuid, String)> {
    let s = nb.snapshot();
    s.logical_switch_port()
        .values()
        .filter(|p| p.type_.is_empty())
        .map(|p| (p.uuid, p.name.clone()))
        .collect()
}

/// One random change; returns what it did.
fn step(nb: &mut Nb, rng: &mut Rng, i: usize) -> String {
    let snap = nb.snapshot();
    let switches: Vec<String> = snap
        .logical_switch()
        .values()
        .map(|s| s.name.clone())
        .collect();
    let routers: Vec<String> = snap
        .logical_router()
        .values()
        .map(|s| s.name.clone())
        .collect();
    let ls = switches[rng.below(switches.len())].clone();
    let lr = routers[rng.below(routers.len())].clone();
    let vifs = lsp_uuids(nb);
    let net = 100 + i % 100;
    match rng.below(16) {
        0 | 1 => {
            let name = format!("{ls}-n{i}");
            nb.vif(
                &ls,
                &name,
                &format!(
                    "0a:00:00:aa:{:02x}:{:02x} 10.0.{net}.{}",
                    i / 256,
                    i % 256,
                    1 + i % 200
                ),
                rng.below(2) == 0,
            );
            format!("add port {name} on {ls}")
        }
        2 if !vifs.is_empty() => {
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            nb.delete("Logical_Switch_Port", u, Some(("Logical_Switch", "ports")));
            format!("delete port {n}")
        }
        3 if !vifs.is_empty() => {
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            nb.set(
                "Logical_Switch_Port",
                u,
                "addresses",
                json!([
                    "set",
                    [format!("0a:00:00:bb:00:{:02x} 10.1.{net}.5", i % 256)]
                ]),
            );
            format!("readdress port {n}")
        }
        4 => {
            nb.acl_ls(
                &ls,
                "from-lport",
                1000 + i as i64,
                "ip4 && tcp.dst == 443",
                "allow-related",
            );
            format!("ACL on {ls}")
        }
        5 => {
            let ps: Vec<uuid::Uuid> = vifs
                .iter()
                .filter(|_| rng.below(3) == 0)
                .map(|v| v.0)
                .collect();
            if let Some(pg) = snap.port_group_by_name("pg_web") {
                nb.set(
                    "Port_Group",
                    pg.uuid,
                    "ports",
                    json!([
                        "set",
                        ps.iter()
                            .map(|u| json!(["uuid", u.to_string()]))
                            .collect::<Vec<_>>()
                    ]),
                );
            }
            format!("pg_web ports = {} ports", ps.len())
        }
        6 => {
            let acls: Vec<uuid::Uuid> = snap.acl().keys().copied().collect();
            if acls.is_empty() {
                return "no ACL".into();
            }
            let a = acls[rng.below(acls.len())];
            let mut ops = vec![
                json!({"op": "mutate", "table": "Logical_Switch", "where": [],
                    "mutations": [["acls", "delete", ["uuid", a.to_string()]]]}),
                json!({"op": "mutate", "table": "Port_Group", "where": [],
                    "mutations": [["acls", "delete", ["uuid", a.to_string()]]]}),
            ];
            ops.push(json!({"op": "delete", "table": "ACL",
                "where": [["_uuid", "==", ["uuid", a.to_string()]]]}));
            nb.txn(ops);
            "delete ACL".into()
        }
        7 => {
            nb.nat(
                &lr,
                "dnat_and_snat",
                &format!("172.16.0.{}", 10 + i % 200),
                &format!("10.0.0.{}", 20 + i % 200),
            );
            format!("NAT on {lr}")
        }
        8 => {
            let nats: Vec<uuid::Uuid> = snap.nat().keys().copied().collect();
            if nats.is_empty() {
                return "no NAT".into();
            }
            let n = nats[rng.below(nats.len())];
            nb.delete("NAT", n, Some(("Logical_Router", "nat")));
            "delete NAT".into()
        }
        9 => {
            nb.route(&lr, &format!("10.{}.0.0/16", 50 + i % 100), "172.16.0.254");
            format!("route on {lr}")
        }
        10 => {
            nb.policy(&lr, 200 + i as i64, "ip4.dst == 10.77.0.0/16", "drop");
            format!("policy on {lr}")
        }
        11 => {
            let rs: Vec<&str> = if rng.below(2) == 0 {
                vec![]
            } else {
                vec![lr.as_str()]
            };
            nb.lb(
                &format!("lb{i}"),
                &[(&format!("10.200.{}.1:80", i % 200), "10.0.0.11:80")],
                &[ls.as_str()],
                &rs,
            );
            format!("LB on {ls}")
        }
        12 => {
            let s = format!("new{i}");
            nb.ls(&s);
            if rng.below(2) == 0 {
                nb.link(
                    &s,
                    &lr,
                    &format!("{lr}-{s}"),
                    &format!("0a:00:00:cc:{:02x}:{:02x}", i / 256, i % 256),
                    &[&format!("10.{}.{}.1/24", 150 + i / 256, i % 256)],
                );
            }
            format!("switch {s}")
        }
        13 => {
            if let Some(sw) = snap.logical_switch_by_name(&ls)
                && ls != "sw0"
            {
                // Its ports and router ports' LSPs go with it (garbage collected).
                nb.txn(vec![json!({"op": "delete", "table": "Logical_Switch",
                    "where": [["_uuid", "==", ["uuid", sw.uuid.to_string()]]]})]);
                return format!("delete switch {ls}");
            }
            "keep sw0".into()
        }
        14 => {
            if let Some(a) = snap.address_set_by_name("as_clients") {
                nb.set(
                    "Address_Set",
                    a.uuid,
                    "addresses",
                    json!(["set", [format!("10.0.1.{}", i % 250)]]),
                );
            }
            "address set".into()
        }
        _ => {
            nb.global_option("mac_prefix", &format!("0a:{:02x}:00", i % 256));
            "global option".into()
        }
    }
}

#[test]
fn incremental_equals_full_compile_over_random_changes() {
    let seed: u64 = std::env::var("HF_INCR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_101);
    let steps: usize = std::env::var("HF_INCR_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let mut rng = Rng(seed | 1);
    let mut nb = world();
    let opts = Options::default();
    let mut inc = Incremental::new();
    let c = inc.update(&nb.snapshot(), None, &opts);
    inc.restore(c.sb.flows);
    nb.record = Some(Vec::new());
    let mut partial = 0;
    for i in 0..steps {
        let what = step(&mut nb, &mut rng, i);
        let deltas = nb.record.replace(Vec::new()).unwrap_or_default();
        let snap = nb.snapshot();
        let got = inc.update(&snap, Some(&deltas), &opts);
        let want = compile(&snap, &opts);
        if inc.changed().is_some() {
            partial += 1;
        }
        if got.sb.flows != want.sb.flows {
            let mut diff = Vec::new();
            for (id, r) in &want.sb.flows {
                if got.sb.flows.get(id) != Some(r) {
                    diff.push(format!("- {id} {:?}", r));
                }
            }
            for (id, r) in &got.sb.flows {
                if want.sb.flows.get(id) != Some(r) {
                    diff.push(format!("+ {id} {:?}", r));
                }
            }
            diff.truncate(6);
            panic!(
                "seed {seed} step {i} ({what}): flows differ ({} vs {} rows):\n{}",
                got.sb.flows.len(),
                want.sb.flows.len(),
                diff.join("\n")
            );
        }
        assert!(
            got.sb == want.sb,
            "seed {seed} step {i} ({what}): non-flow SB differs"
        );
        assert_eq!(
            got.diagnostics, want.diagnostics,
            "seed {seed} step {i} ({what}): diagnostics differ"
        );
        assert_eq!(got.flows_built, want.flows_built, "step {i} ({what})");
        inc.restore(got.sb.flows);
    }
    // The oracle must have exercised the incremental path, not only the fallback.
    assert!(
        partial > steps / 2,
        "{partial} of {steps} steps were incremental"
    );
}

#[test]
fn a_port_add_rebuilds_only_its_switch_and_router() {
    let mut nb = world();
    let opts = Options::default();
    let mut inc = Incremental::new();
    let c = inc.update(&nb.snapshot(), None, &opts);
    inc.restore(c.sb.flows);
    let all = inc.rebuilt();
    nb.record = Some(Vec::new());
    nb.vif("sx1", "sx1-new", "0a:00:00:09:01:77 10.9.1.77", true);
    let deltas = nb.record.take().unwrap_or_default();
    let snap = nb.snapshot();
    let got = inc.update(&snap, Some(&deltas), &opts);
    // sx1 alone, and of lr1 (its router) only the section of the router port facing sx1.
    assert_eq!(inc.rebuilt(), 1, "of {all}");
    assert_eq!(inc.sections_rebuilt(), 1);
    let changed = inc.changed().expect("incremental").len();
    assert!(changed > 0 && changed < got.sb.flows.len() / 4, "{changed}");
    assert_eq!(got.sb, compile(&snap, &opts).sb);
}

/// The 500 × 40 figures (run in release: `cargo test --release -p hf-northd --test incremental
/// scale -- --ignored --nocapture`): the full compile, one port add through the incremental
/// state, and the split of the pieces it redoes.
#[test]
#[ignore]
#[allow(clippy::disallowed_methods, clippy::disallowed_types)]
fn scale_500x40_port_add() {
    use hf_expr::FeatureSet;
    use std::time::Instant;
    let n: usize = std::env::var("HF_SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let p: usize = std::env::var("HF_SCALE_P")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut nb = gen_topo_like(n, p);
    let opts = Options::default();
    let snap = nb.snapshot();
    let t = Instant::now();
    let full = compile(&snap, &opts);
    let t_full = t.elapsed().as_secs_f64() * 1e3;
    let mut inc = Incremental::new();
    let c = inc.update(&snap, None, &opts);
    inc.restore(c.sb.flows);
    // The pieces.
    let t = Instant::now();
    let mut diags = hf_northd::diag::Diags::default();
    let topo = hf_northd::topo::Topo::build(&snap, &opts.keys, FeatureSet::all(), &mut diags);
    let t_topo = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let mut sb = hf_northd::SbDesired::default();
    hf_northd::tables::build(&topo, &opts, &mut sb, &mut diags);
    let t_tables = t.elapsed().as_secs_f64() * 1e3;
    let mut per = Vec::new();
    for name in ["ls7", "lr0"] {
        let i = topo.dp_by_name[name];
        let t = Instant::now();
        let mut out = hf_northd::flow::Flows::default();
        match topo.datapaths[i].kind {
            hf_northd::DpKind::Switch => hf_northd::ls::build(&topo, i, &mut out, &mut diags),
            hf_northd::DpKind::Router => hf_northd::lr::build(&topo, i, &mut out, &mut diags),
        }
        let t_build = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let rows = hf_northd::render::flows(&topo, &out, &Default::default(), &mut diags);
        per.push(format!(
            "{name}: stages {t_build:.1} ms ({} flows), render {:.1} ms ({} rows)",
            out.len(),
            t.elapsed().as_secs_f64() * 1e3,
            rows.len()
        ));
    }
    drop(topo);
    let mut best = f64::MAX;
    let mut changed = 0;
    for k in 0..3 {
        nb.record = Some(Vec::new());
        nb.vif(
            "ls7",
            &format!("ls7-new{k}"),
            &format!("0a:00:00:77:00:{k:02x} 10.1.7.{}", 200 + k),
            false,
        );
        let deltas = nb.record.take().unwrap_or_default();
        let snap = nb.snapshot();
        let t = Instant::now();
        let c = inc.update(&snap, Some(&deltas), &opts);
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        changed = inc.changed().map_or(usize::MAX, |c| c.len());
        assert_eq!((inc.rebuilt(), inc.sections_rebuilt()), (1, 1));
        if k == 2 {
            let want = compile(&snap, &opts);
            assert!(c.sb == want.sb, "incremental differs from the full compile");
        }
        inc.restore(c.sb.flows);
    }
    println!(
        "{n}x{p}: full compile {t_full:.0} ms ({} rows); port add incremental {best:.1} ms \
         ({changed} identities changed, 1 datapath and 1 router port section rebuilt)",
        full.sb.flows.len()
    );
    println!(
        "  split: topo {t_topo:.1} ms, tables {t_tables:.1} ms; {}",
        per.join("; ")
    );
}
