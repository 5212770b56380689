//! The incremental compiler's oracle: seeded random NB changes (ports, addresses, ACLs, port
//! groups, NAT, routes, policies, load balancers, switches, routers, address sets, global
//! options) applied as real OVSDB transactions to a generator-like NB; after every step the
//! incremental result must equal `hf_northd::compile` of the same NB (SbDesired and
//! diagnostics). Also checks that a port add rebuilds only the datapaths it can touch.

mod common;

use common::{Nb, gen_topo_like, generator_like};
use hf_northd::incremental::Incremental;
use hf_northd::sync::Scope;
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

/// `sb` without its flows (what the non-flow scope is about).
fn non_flow(sb: &hf_northd::SbDesired) -> hf_northd::SbDesired {
    hf_northd::SbDesired {
        flows: Default::default(),
        ..sb.clone()
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
    if i % 11 == 5 {
        return dynamic_step(nb, &ls, i);
    }
    match rng.below(24) {
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
            // Half the time a member of pg_web (its address sets follow its addresses).
            let members: Vec<(uuid::Uuid, String)> = snap
                .port_group_by_name("pg_web")
                .map(|pg| {
                    vifs.iter()
                        .filter(|v| pg.ports.iter().any(|p| p.uuid() == v.0))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            let (u, n) = if !members.is_empty() && rng.below(2) == 0 {
                members[rng.below(members.len())].clone()
            } else {
                vifs[rng.below(vifs.len())].clone()
            };
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
        15 => {
            nb.global_option("mac_prefix", &format!("0a:{:02x}:00", i % 256));
            "global option".into()
        }
        16 | 17 if !vifs.is_empty() => {
            // A VIF's options or enabled flag (multicast groups follow both).
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            let row = match rng.below(4) {
                0 => json!({"enabled": false}),
                1 => json!({"enabled": true}),
                2 => json!({"options": ["map", [["mcast_flood", "true"]]]}),
                _ => json!({"options": ["map", [["requested-chassis", "hv1"]]]}),
            };
            nb.txn(vec![json!({"op": "update", "table": "Logical_Switch_Port",
                "where": [["_uuid", "==", ["uuid", u.to_string()]]], "row": row.clone()})]);
            format!("VIF {n} set {row}")
        }
        18 if !vifs.is_empty() => {
            // A VIF's addresses gain `unknown` (the switch's _MC_unknown group).
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            nb.set(
                "Logical_Switch_Port",
                u,
                "addresses",
                json!([
                    "set",
                    [
                        format!("0a:00:00:bc:00:{:02x} 10.2.{net}.5", i % 256),
                        "unknown"
                    ]
                ]),
            );
            format!("unknown on {n}")
        }
        19 if !vifs.is_empty() => {
            // A VIF changes type (and back, on a later step): out of the fast path.
            let (u, n) = vifs[rng.below(vifs.len())].clone();
            let t = ["localport", "external", "virtual"][rng.below(3)];
            nb.set("Logical_Switch_Port", u, "type", json!(t));
            format!("VIF {n} becomes {t}")
        }
        20 => {
            // Two VIFs in one transaction on one switch, one named to sort first (the tunnel
            // keys of the ports after it move: keys are assigned in name order).
            let a = format!("a{i}-{ls}");
            let b = format!("{ls}-z{i}");
            nb.vif(&ls, &a, &format!("0a:00:00:ab:{:02x}:01", i % 256), false);
            nb.vif(&ls, &b, &format!("0a:00:00:ab:{:02x}:02", i % 256), false);
            format!("add ports {a}, {b}")
        }
        21 => {
            // A router with a port, or one of those removed.
            let name = format!("lrn{i}");
            let old: Vec<uuid::Uuid> = snap
                .logical_router()
                .values()
                .filter(|r| r.name.starts_with("lrn"))
                .map(|r| r.uuid)
                .collect();
            if !old.is_empty() && rng.below(2) == 0 {
                let u = old[rng.below(old.len())];
                nb.txn(vec![json!({"op": "delete", "table": "Logical_Router",
                    "where": [["_uuid", "==", ["uuid", u.to_string()]]]})]);
                return "delete router".into();
            }
            nb.lr(&name, &[]);
            nb.lrp(
                &name,
                &format!("{name}-p"),
                &format!("0a:00:00:dc:{:02x}:{:02x}", i / 256, i % 256),
                &[&format!("10.{}.{}.1/24", 230 + i % 20, i % 256)],
                None,
            );
            format!("router {name}")
        }
        22 => {
            // A router port's peer set, changed or cleared (router-to-router links).
            let lrps: Vec<(uuid::Uuid, String)> = snap
                .logical_router_port()
                .values()
                .map(|p| (p.uuid, p.name.clone()))
                .collect();
            let (u, n) = lrps[rng.below(lrps.len())].clone();
            let (_, peer) = lrps[rng.below(lrps.len())].clone();
            if rng.below(3) == 0 {
                nb.set("Logical_Router_Port", u, "peer", json!(["set", []]));
                format!("{n} loses its peer")
            } else {
                nb.set("Logical_Router_Port", u, "peer", json!(peer));
                format!("{n} peers {peer}")
            }
        }
        _ => {
            // A router port added to or removed from a router.
            let extra: Vec<uuid::Uuid> = snap
                .logical_router_port()
                .values()
                .filter(|p| p.name.starts_with("xp"))
                .map(|p| p.uuid)
                .collect();
            if !extra.is_empty() && rng.below(2) == 0 {
                let u = extra[rng.below(extra.len())];
                nb.delete("Logical_Router_Port", u, Some(("Logical_Router", "ports")));
                return "delete router port".into();
            }
            let name = format!("xp{i}");
            nb.lrp(
                &lr,
                &name,
                &format!("0a:00:00:dd:{:02x}:{:02x}", i / 256, i % 256),
                &[&format!("10.{}.{}.1/24", 210 + i % 20, i % 256)],
                None,
            );
            format!("router port {name} on {lr}")
        }
    }
}

/// Every eleventh step: dynamic addresses on switch `ls` (a port asking for them, IPAM options
/// set, unusable or removed), then, as the daemon does before it compiles, the assignments
/// [`hf_northd::ipam::plan`] decides written to NB (in the same change sets).
fn dynamic_step(nb: &mut Nb, ls: &str, i: usize) -> String {
    let what = match (i / 11) % 4 {
        0 | 3 => {
            let name = format!("{ls}-d{i}");
            let addr = if i.is_multiple_of(2) {
                "dynamic".to_string()
            } else {
                format!("0a:00:00:ee:00:{:02x} dynamic", i % 256)
            };
            nb.lsp_with(ls, &name, json!({"addresses": addr}));
            format!("add dynamic port {name}")
        }
        1 => {
            let u = nb.snapshot().logical_switch_by_name(ls).map(|s| s.uuid);
            let subnet = if i.is_multiple_of(3) {
                "10.77.0.0/33"
            } else {
                "10.77.0.0/24"
            };
            nb.set(
                "Logical_Switch",
                u.expect("switch"),
                "other_config",
                json!(["map", [["subnet", subnet], ["ipv6_prefix", "fd00:77::"]]]),
            );
            format!("IPAM options on {ls} (subnet {subnet})")
        }
        _ => {
            let u = nb.snapshot().logical_switch_by_name(ls).map(|s| s.uuid);
            nb.set(
                "Logical_Switch",
                u.expect("switch"),
                "other_config",
                json!(["map", []]),
            );
            format!("no IPAM on {ls}")
        }
    };
    let plan = hf_northd::ipam::plan(&nb.snapshot(), [0x0a, 0, 0]);
    for (u, v) in plan.writes {
        let v = v.map_or(json!(["set", []]), |s| json!(s));
        nb.set("Logical_Switch_Port", u, "dynamic_addresses", v);
    }
    what
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
    nb.record = Some(Vec::new());
    let mut partial = 0;
    let mut patched = 0;
    let mut prev = non_flow(&c.sb);
    inc.restore(c.sb);
    for i in 0..steps {
        let what = step(&mut nb, &mut rng, i);
        let deltas = nb.record.replace(Vec::new()).unwrap_or_default();
        let snap = nb.snapshot();
        let got = inc.update(&snap, Some(&deltas), &opts);
        let want = compile(&snap, &opts);
        if inc.changed().is_some() {
            partial += 1;
            // The non-flow identities it names cover every one that changed.
            let named = inc.non_flow_changed().expect("named with the flows");
            let real = Scope::between(&prev, &got.sb, &Default::default());
            let missed = |a: Vec<String>| -> Vec<String> { a.into_iter().take(4).collect() };
            let out: Vec<String> = missed(
                real.ports
                    .difference(&named.ports)
                    .map(|p| format!("Port_Binding {p}"))
                    .chain(
                        real.mcgroups
                            .difference(&named.mcgroups)
                            .map(|g| format!("Multicast_Group {g:?}")),
                    )
                    .chain(
                        real.datapaths
                            .difference(&named.datapaths)
                            .map(|d| format!("Datapath_Binding {d}")),
                    )
                    .collect(),
            );
            assert!(
                out.is_empty()
                    && real.port_groups.is_subset(&named.port_groups)
                    && real.address_sets.is_subset(&named.address_sets)
                    && real.load_balancers.is_subset(&named.load_balancers)
                    && real.dns.is_subset(&named.dns)
                    && (!real.dhcp || named.dhcp),
                "seed {seed} step {i} ({what}): changed but not named: {out:?}"
            );
        }
        if inc.patched() {
            patched += 1;
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
        prev = non_flow(&got.sb);
        inc.restore(got.sb);
    }
    eprintln!("{steps} steps: {partial} incremental, {patched} patched the topology");
    // The oracle must have exercised the incremental path, not only the fallback, and the
    // plain VIF fast path (topology and tables patched) among it.
    assert!(
        partial > steps / 2,
        "{partial} of {steps} steps were incremental"
    );
    assert!(
        patched > steps / 8,
        "{patched} of {steps} steps patched the topology"
    );
}

#[test]
fn a_port_add_rebuilds_only_its_switch_and_router() {
    let mut nb = world();
    let opts = Options::default();
    let mut inc = Incremental::new();
    let c = inc.update(&nb.snapshot(), None, &opts);
    inc.restore(c.sb);
    let all = inc.rebuilt();
    nb.record = Some(Vec::new());
    nb.vif("sx1", "sx1-new", "0a:00:00:09:01:77 10.9.1.77", true);
    let deltas = nb.record.take().unwrap_or_default();
    let snap = nb.snapshot();
    let got = inc.update(&snap, Some(&deltas), &opts);
    // sx1 alone, and of lr1 (its router) only the section of the router port facing sx1.
    assert_eq!(inc.rebuilt(), 1, "of {all}");
    assert_eq!(inc.sections_rebuilt(), 1);
    // The topology and the non-flow tables were patched, not built anew, and the non-flow
    // identities named are the port's row and its switch's groups.
    assert!(inc.patched());
    let named = inc.non_flow_changed().expect("named");
    // (sx1-vm1 sorts after the new port: with no keys in SB its tunnel key moves.)
    assert_eq!(
        named.ports.iter().collect::<Vec<_>>(),
        ["sx1-new", "sx1-vm1"],
        "{named:?}"
    );
    assert!(named.datapaths.is_empty() && named.port_groups.is_empty());
    assert!(
        named.mcgroups.iter().all(|(d, _)| d == "sx1") && !named.mcgroups.is_empty(),
        "{named:?}"
    );
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
    inc.restore(c.sb);
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
        assert!(inc.patched(), "the port add took the VIF fast path");
        if k == 2 {
            let want = compile(&snap, &opts);
            assert!(c.sb == want.sb, "incremental differs from the full compile");
        }
        inc.restore(c.sb);
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

/// Which changes the fast path takes and which it leaves to the full topology build, each
/// checked against the full compile: a plain VIF's add, readdress and delete, a port group
/// member's readdress (address sets follow), ACLs on port groups (added, edited, broken,
/// deleted), port group membership, address sets and switch load balancers are patched; a
/// type change, a router's load balancer, a container port (tags) and a name a router port
/// holds (the router port wins, with a diagnostic) are not.
#[test]
fn the_vif_fast_path_takes_plain_vifs_only() {
    let mut nb = world();
    let opts = Options::default();
    let mut inc = Incremental::new();
    let c = inc.update(&nb.snapshot(), None, &opts);
    inc.restore(c.sb);
    nb.record = Some(Vec::new());
    let check = |nb: &mut Nb, inc: &mut Incremental, what: &str, patched: bool| {
        let deltas = nb.record.replace(Vec::new()).unwrap_or_default();
        let snap = nb.snapshot();
        let got = inc.update(&snap, Some(&deltas), &opts);
        let want = compile(&snap, &opts);
        assert!(
            got.sb.flows == want.sb.flows,
            "{what}: flows differ from the full compile"
        );
        assert!(
            got.sb == want.sb,
            "{what}: non-flow SB differs from the full compile"
        );
        assert_eq!(got.diagnostics, want.diagnostics, "{what}");
        assert_eq!(inc.patched(), patched, "{what}: patched");
        inc.restore(got.sb);
    };
    let u = nb.vif("sx2", "sx2-new", "0a:00:00:09:02:77 10.9.2.77", true);
    check(&mut nb, &mut inc, "add", true);
    nb.set(
        "Logical_Switch_Port",
        u,
        "addresses",
        json!(["set", ["0a:00:00:09:02:78 10.9.2.78", "unknown"]]),
    );
    check(&mut nb, &mut inc, "readdress", true);
    nb.set(
        "Logical_Switch_Port",
        u,
        "port_security",
        json!(["set", ["junk"]]),
    );
    check(&mut nb, &mut inc, "bad port_security (a diagnostic)", true);
    nb.set(
        "Logical_Switch_Port",
        u,
        "port_security",
        json!(["set", []]),
    );
    check(&mut nb, &mut inc, "diagnostic resolved", true);
    nb.set("Logical_Switch_Port", u, "type", json!("localport"));
    check(&mut nb, &mut inc, "type change", false);
    nb.set("Logical_Switch_Port", u, "type", json!(""));
    check(&mut nb, &mut inc, "type back", false);
    nb.delete("Logical_Switch_Port", u, Some(("Logical_Switch", "ports")));
    check(&mut nb, &mut inc, "delete", true);
    let web = nb
        .snapshot()
        .port_group_by_name("pg_web")
        .and_then(|pg| pg.ports.iter().next().map(|p| p.uuid()))
        .expect("pg_web has a member");
    nb.set(
        "Logical_Switch_Port",
        web,
        "addresses",
        json!(["set", ["0a:00:00:01:01:99 10.0.1.99"]]),
    );
    check(&mut nb, &mut inc, "port group member readdressed", true);
    // ACLs, port groups, address sets and switch-only load balancers: the topology is kept,
    // its switch index and the group and load balancer tables are derived anew.
    let acl = nb.acl_pg(
        "pg_web",
        "to-lport",
        1234,
        "outport == @pg_web && tcp.dst == 8080",
        "allow-related",
    );
    check(&mut nb, &mut inc, "ACL on a port group", true);
    nb.set(
        "ACL",
        acl,
        "match",
        json!("outport == @pg_web && tcp.dst == 8081"),
    );
    check(&mut nb, &mut inc, "ACL edited", true);
    nb.set(
        "ACL",
        acl,
        "match",
        json!("outport == @pg_web && tcp.dst =="),
    );
    check(&mut nb, &mut inc, "ACL match broken (last good kept)", true);
    nb.delete("ACL", acl, Some(("Port_Group", "acls")));
    check(&mut nb, &mut inc, "ACL deleted", true);
    let pg = nb
        .snapshot()
        .port_group_by_name("pg_web")
        .map(|p| p.uuid)
        .expect("pg_web");
    let sx = nb
        .snapshot()
        .logical_switch_port_by_name("sx1-vm1")
        .map(|p| p.uuid)
        .expect("sx1-vm1");
    nb.set(
        "Port_Group",
        pg,
        "ports",
        json!(["set", [["uuid", web.to_string()], ["uuid", sx.to_string()]]]),
    );
    check(&mut nb, &mut inc, "port group spans another switch", true);
    if let Some(a) = nb
        .snapshot()
        .address_set_by_name("as_clients")
        .map(|a| a.uuid)
    {
        nb.set("Address_Set", a, "addresses", json!(["set", ["10.0.9.9"]]));
        check(&mut nb, &mut inc, "address set", true);
    }
    nb.lb("lb_sw", &[("10.210.0.1:80", "10.0.0.11:80")], &["sx0"], &[]);
    check(&mut nb, &mut inc, "switch load balancer added", true);
    let lb = nb
        .snapshot()
        .load_balancer()
        .values()
        .find(|l| l.name == "lb_sw")
        .map(|l| l.uuid)
        .expect("lb_sw");
    nb.set(
        "Load_Balancer",
        lb,
        "vips",
        json!(["map", [["10.210.0.2:80", "10.0.0.12:80"]]]),
    );
    check(&mut nb, &mut inc, "switch load balancer edited", true);
    nb.lb(
        "lb_rt",
        &[("10.211.0.1:80", "10.0.0.11:80")],
        &["sx0"],
        &["lr1"],
    );
    check(&mut nb, &mut inc, "router load balancer added", false);
    // A router's load balancer edited alone (no router row changes): its VIPs reach the
    // gateway port's `Port_Binding` (`nat-addresses`), which the fast path does not patch.
    let on_lr0: Vec<uuid::Uuid> = nb
        .snapshot()
        .logical_router()
        .values()
        .filter(|r| r.name == "lr0")
        .flat_map(|r| r.load_balancer.iter().map(|l| l.uuid()))
        .collect();
    assert!(!on_lr0.is_empty(), "the world's router has a load balancer");
    nb.set(
        "Load_Balancer",
        on_lr0[0],
        "vips",
        json!(["map", [["172.16.0.77:80", "10.0.0.11:80"]]]),
    );
    check(&mut nb, &mut inc, "router load balancer edited", false);
    nb.lsp_with(
        "sx0",
        "sx0-child",
        json!({"parent_name": "sx0-vm1", "tag_request": 0, "addresses": ["set", ["0a:00:00:09:00:55"]]}),
    );
    check(&mut nb, &mut inc, "container port", false);
    // (Switch port names are unique in NB; a router port's is not theirs to take.)
    nb.vif("sx1", "lr1-sx0", "0a:00:00:09:01:66", false);
    check(&mut nb, &mut inc, "a name a router port holds", false);
}
