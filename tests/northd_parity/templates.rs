//! Load balancer templates (`Load_Balancer options:template=true`) against real ovn-northd:
//! seeded NBs with two switches behind distributed router `lr0` (a gateway port on `gw1`) and
//! a gateway router `gr0` (`options:chassis=gw1`) with its own switch; template load
//! balancers made with real `ovn-nbctl --template lb-add` (IPv4 and IPv6 address families,
//! TCP and UDP, VIPs `^vip:^port`, `^vip:PORT` and `^vip`, backends `^backends`,
//! `^ip:^port,...` and explicit IPv6 ones; some with `skip_snat`, no backends (dropped, or
//! `reject`ed), `event`, `selection_fields`; routers with `lb_force_snat_ip`) on switches, on `lr0` and on `gr0`, mixed with ordinary load
//! balancers; `nat-addresses=router` on the gateway port's peer; `Chassis_Template_Var` rows for the chassis; and malformed rows ovn-northd
//! warns about (an `address-family` that is neither, a VIP of three parts). After every step
//! the SB tables (`Load_Balancer` and `Chassis_Template_Var` among them) and every logical
//! flow must be equal, and holdfast must have named each malformed row.
//! `HF_TEMPLATE_SEEDS` (default 3) NBs from `HF_PARITY_SEED` (default 9300);
//! `HF_TEMPLATE_SHOW=1` prints holdfast's flows that name a variable, and the NB steps.

use std::process::Command;

use super::oracle::{Backend, Env};
use super::{Step, common, env_num, holdfast_start, nbctl_wait, stop, words};

fn step(parts: &[&str]) -> Step {
    parts.iter().map(|s| s.to_string()).collect()
}

/// The fixed part: switches `sw0`, `sw1` on `lr0` (gateway port `lr0-ext` on `gw1` through
/// `ext`), gateway router `gr0` with `sw2`, and VIFs on each switch.
fn topology(n: u64) -> Vec<Step> {
    let mut s = vec![words(
        "ls-add sw0 -- ls-add sw1 -- ls-add sw2 -- ls-add ext -- lr-add lr0 -- lr-add gr0",
    )];
    for (sw, lr, net) in [("sw0", "lr0", 0), ("sw1", "lr0", 1), ("sw2", "gr0", 2)] {
        s.push(words(&format!(
            "lrp-add {lr} {lr}-{sw} 00:00:00:00:{n:02x}:0{net} 10.{n}.{net}.1/24 fd00:{n}:{net}::1/64 -- lsp-add {sw} {sw}-{lr} -- lsp-set-type {sw}-{lr} router -- lsp-set-addresses {sw}-{lr} router -- lsp-set-options {sw}-{lr} router-port={lr}-{sw}"
        )));
        for i in 0..2u64 {
            s.push(step(&[
                "lsp-add",
                sw,
                &format!("{sw}-p{i}"),
                "--",
                "lsp-set-addresses",
                &format!("{sw}-p{i}"),
                &format!(
                    "0a:00:00:{n:02x}:0{net}:{i:02x} 10.{n}.{net}.{} fd00:{n}:{net}::{}",
                    10 + i,
                    10 + i
                ),
            ]));
        }
    }
    s.push(words(&format!(
        "lrp-add lr0 lr0-ext 00:00:00:00:{n:02x}:fe 172.16.{n}.1/24 -- lsp-add ext ext-lr0 -- lsp-set-type ext-lr0 router -- lsp-set-addresses ext-lr0 router -- lsp-set-options ext-lr0 router-port=lr0-ext -- lrp-set-gateway-chassis lr0-ext gw1 10"
    )));
    s.push(words("set logical_router gr0 options:chassis=gw1"));
    // The router's addresses announced on `ext`: 23.03 lists its template VIPs too.
    s.push(words(
        "lsp-set-options ext-lr0 router-port=lr0-ext nat-addresses=router",
    ));
    s
}

/// The load balancers of `seed`: template ones and ordinary ones, attached at random.
fn lbs(seed: u64, n: u64) -> Vec<Step> {
    let mut rnd = super::draw(seed);
    let mut s = Vec::new();
    // Force SNAT for load-balanced traffic on one router or the other (`force_snat` flows).
    match rnd(3) {
        0 => s.push(words(
            "set logical_router gr0 options:lb_force_snat_ip=router_ip",
        )),
        1 => s.push(words(&format!(
            "set logical_router lr0 options:lb_force_snat_ip=172.16.{n}.100"
        ))),
        _ => {}
    }
    let count = 4 + rnd(3);
    for j in 0..count {
        let v6 = rnd(3) == 0;
        let proto = if rnd(2) == 0 { "tcp" } else { "udp" };
        let name = format!("tlb{j}");
        let (vip, with_port) = match rnd(4) {
            0 => (format!("^vip{j}"), false),
            1 => (format!("^vip{j}:{}", 80 + j), true),
            _ => (format!("^vip{j}:^vport{j}"), true),
        };
        let empty = rnd(4) == 0;
        let reject = empty && rnd(2) == 0;
        let backends = if empty {
            String::new()
        } else {
            match rnd(4) {
                0 if with_port => format!("^bip{j}a:^bport{j}a,^bip{j}b:8080"),
                1 if with_port && v6 => format!("[fd00:{n}:0::10]:80,[fd00:{n}:1::11]:80"),
                _ => format!("^backends{j}"),
            }
        };
        let mut cmd = vec![
            "--template".to_string(),
            "lb-add".into(),
            name.clone(),
            vip,
            backends,
        ];
        // lb-add takes a protocol only with a port, and the family only after a protocol.
        if with_port {
            cmd.push(proto.into());
            if v6 {
                cmd.push("ipv6".into());
            }
        }
        s.push(cmd);
        if v6 && !with_port {
            s.push(words(&format!(
                "set load_balancer {name} options:address-family=ipv6"
            )));
        }
        if reject {
            s.push(words(&format!(
                "set load_balancer {name} options:reject=true"
            )));
        }
        if rnd(3) == 0 {
            s.push(words(&format!(
                "set load_balancer {name} options:event=true"
            )));
        }
        if rnd(4) == 0 {
            s.push(words(&format!(
                "set load_balancer {name} options:skip_snat=true"
            )));
        }
        if rnd(4) == 0 {
            s.push(words(&format!(
                "set load_balancer {name} selection_fields=ip_src,tp_dst"
            )));
        }
        s.push(attach(&mut rnd, &name));
    }
    // Ordinary load balancers beside them.
    for j in 0..1 + rnd(2) {
        let name = format!("plb{j}");
        s.push(step(&[
            "lb-add",
            &name,
            &format!("10.{n}.9.{}:80", j + 1),
            &format!("10.{n}.0.10:8080,10.{n}.1.11:8080"),
            "tcp",
        ]));
        s.push(attach(&mut rnd, &name));
    }
    // A template row 23.03 warns about: a family that is neither, and a VIP of three parts.
    if rnd(2) == 0 {
        s.push(step(&[
            "create",
            "load_balancer",
            "name=tbad",
            "protocol=tcp",
            "options:template=true",
            "options:address-family=ip6",
            "vips={\"^badvip:^badport\"=\"^badbackends\", \"^x:^y:^z\"=\"^w\"}",
        ]));
        s.push(words("ls-lb-add sw1 tbad -- lr-lb-add lr0 tbad"));
    }
    s
}

fn attach(rnd: &mut impl FnMut(u64) -> u64, name: &str) -> Step {
    words(&match rnd(5) {
        0 => format!("ls-lb-add sw0 {name}"),
        1 => format!("ls-lb-add sw0 {name} -- ls-lb-add sw1 {name} -- lr-lb-add lr0 {name}"),
        2 => format!("lr-lb-add lr0 {name}"),
        3 => format!("ls-lb-add sw2 {name} -- lr-lb-add gr0 {name}"),
        _ => format!("ls-lb-add sw1 {name} -- lr-lb-add gr0 {name} -- lr-lb-add lr0 {name}"),
    })
}

/// Per-chassis values for every variable the load balancers name.
fn template_vars(seed: u64, n: u64) -> Vec<Step> {
    let mut out = Vec::new();
    for (c, (chassis, _)) in super::topo::CHASSIS.iter().enumerate() {
        let mut cmd = vec![
            "create".to_string(),
            "Chassis_Template_Var".into(),
            format!("chassis={chassis}"),
        ];
        for j in 0..7u64 {
            let h = 10 + (seed + c as u64) % 2;
            cmd.push(format!("variables:vip{j}=\"10.{n}.8.{}\"", j + 1));
            cmd.push(format!("variables:vport{j}=\"{}\"", 8000 + j));
            cmd.push(format!(
                "variables:backends{j}=\"10.{n}.0.{h}:80,10.{n}.1.{h}:80\""
            ));
            cmd.push(format!("variables:bip{j}a=\"10.{n}.0.{h}\""));
            cmd.push(format!("variables:bport{j}a=\"{}\"", 9000 + j));
            cmd.push(format!("variables:bip{j}b=\"10.{n}.1.{h}\""));
        }
        out.push(cmd);
    }
    out
}

/// NB load balancer UUID → name in `env`.
fn lb_names(env: &Env) -> Vec<(String, String)> {
    let out = common::run_ok(Command::new("ovn-nbctl").args([
        &format!("--db={}", env.nb),
        "--format=csv",
        "--data=bare",
        "--no-headings",
        "--columns=_uuid,name",
        "list",
        "Load_Balancer",
    ]));
    out.lines()
        .filter_map(|l| {
            let (u, n) = l.split_once(',')?;
            Some((u.to_string(), n.to_string()))
        })
        .collect()
}

/// [`super::compare_sbs`], with the load balancer UUID an event flow names
/// (`load_balancer = "<NB UUID>"`, different in the two NBs) taken as the row's name.
fn compare(a: &Env, b: &Env, what: &str, bad: &mut Vec<String>) -> usize {
    let mut found = Vec::new();
    let (_, flows) = super::compare_sbs(a, b, what, &mut found);
    let named = |line: &str, env: &Env| {
        lb_names(env).iter().fold(line.to_string(), |l, (u, n)| {
            l.replace(u, &format!("<lb {n}>"))
        })
    };
    let only_a: Vec<String> = found
        .iter()
        .filter_map(|l| {
            l.split_once("flow only in ovn-northd: ")
                .map(|(_, f)| named(f, a))
        })
        .collect();
    let only_b: Vec<String> = found
        .iter()
        .filter_map(|l| {
            l.split_once("flow only in holdfast: ")
                .map(|(_, f)| named(f, b))
        })
        .collect();
    for l in found {
        let same = match (
            l.split_once("flow only in ovn-northd: "),
            l.split_once("flow only in holdfast: "),
        ) {
            (Some((_, f)), _) => only_b.contains(&named(f, a)),
            (_, Some((_, f))) => only_a.contains(&named(f, b)),
            _ => false,
        };
        if !same {
            bad.push(l);
        }
    }
    flows
}

/// holdfast northd's diagnostics (`status`), one per line.
fn diagnostics(env: &Env, name: &str) -> Vec<String> {
    let ctl = env.dir.join(format!("{name}.ctl"));
    let status = common::run_ok(Command::new("ovn-appctl").arg("-t").arg(&ctl).arg("status"));
    status
        .lines()
        .filter(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn load_balancer_templates_match_real_northd() {
    if !common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9300);
    let seeds = env_num("HF_TEMPLATE_SEEDS", 3);
    let mut bad = Vec::new();
    let (mut flows, mut template_flows, mut bad_rows) = (0usize, 0usize, 0usize);
    for seed in first..first + seeds {
        let n = 10 + seed % 40;
        let a = Env::start(Backend::OvsdbServer);
        let b = Env::start_with(Backend::OvsdbServer, false);
        for env in [&a, &b] {
            super::register_chassis(env);
        }
        let hf = holdfast_start(&b, "hf-northd");
        let mut steps = topology(n);
        steps.extend(template_vars(seed, n));
        steps.extend(lbs(seed, n));
        for st in &steps {
            for env in [&a, &b] {
                nbctl_wait(env, st);
            }
        }
        super::settle(&a, &b);
        flows += compare(&a, &b, &format!("seed {seed}"), &mut bad);
        template_flows += super::flows::load_sb(&a.sb)
            .logical_flow()
            .values()
            .filter(|f| f.match_.contains('^') || f.actions.contains('^'))
            .count();
        if std::env::var("HF_TEMPLATE_SHOW").is_ok() {
            let sb = super::flows::load_sb(&b.sb);
            let mut shown: Vec<String> = sb
                .logical_flow()
                .values()
                .filter(|f| f.match_.contains('^') || f.actions.contains('^'))
                .map(|f| {
                    format!(
                        "{} {} | {} | {}",
                        f.external_ids
                            .get("stage-name")
                            .cloned()
                            .unwrap_or_default(),
                        f.priority,
                        f.match_,
                        f.actions
                    )
                })
                .collect();
            shown.sort();
            for l in shown {
                eprintln!("  {l}");
            }
            for l in &steps {
                eprintln!("  step {l:?}");
            }
        }
        let diags = diagnostics(&b, "hf-northd");
        if steps.iter().any(|s| s.iter().any(|w| w == "name=tbad")) {
            bad_rows += 1;
            for want in [holdfast_diag_family(), holdfast_diag_vip()] {
                if !diags.iter().any(|d| d.contains("tbad") && d.contains(want)) {
                    bad.push(format!(
                        "seed {seed}: no diagnostic {want:?} for tbad in {diags:#?}"
                    ));
                }
            }
        }
        // A variable changes on one chassis: SB follows on both sides.
        for env in [&a, &b] {
            nbctl_wait(
                env,
                &step(&[
                    "set",
                    "Chassis_Template_Var",
                    "hv1",
                    &format!("variables:vip0=\"10.{n}.7.1\""),
                ]),
            );
        }
        super::settle(&a, &b);
        flows += compare(&a, &b, &format!("seed {seed} var changed"), &mut bad);
        stop(hf);
    }
    eprintln!(
        "templates: {seeds} NBs, {flows} flows of real ovn-northd compared ({template_flows} naming a template variable), {bad_rows} with malformed templates, {} differences",
        bad.len()
    );
    assert!(template_flows > 0, "no flow named a template variable");
    super::assert_no_differences(&bad);
}

fn holdfast_diag_family() -> &'static str {
    "is neither ipv4 nor ipv6"
}

fn holdfast_diag_vip() -> &'static str {
    "should be a template of the form"
}
