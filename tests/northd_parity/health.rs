//! Issue 21's LB health checks against real ovn-northd: seeded NBs with load balancers on
//! switches and routers, TCP and UDP, IPv4 and IPv6 VIPs with `Load_Balancer_Health_Check`
//! rows and `ip_port_mappings` (some backends unmapped, some mappings bad, some ports
//! disabled), applied with `--wait=sb` to an NB served to real ovn-northd and to one served
//! to holdfast northd; then monitors set `offline` and `online` with `ovn-sbctl` on both sides
//! (ports up or not), a holdfast restart, and checks removed. After every step
//! `Service_Monitor` (and the other SB tables) and every logical flow must be equal.

use std::collections::BTreeSet;
use std::process::Command;

use super::oracle::{Backend, Env};
use super::{Step, common, env_num, holdfast_start, nbctl_wait, stop, words};

/// The MAC both NBs set, so `Service_Monitor.src_mac` and the responders compare.
const SVC_MAC: &str = "0a:00:00:00:5e:01";

fn step(parts: &[&str]) -> Step {
    parts.iter().map(|s| s.to_string()).collect()
}

/// The NB of `seed`: two switches behind router `lr0`, eight ports with IPv4 and IPv6
/// addresses, and two to four load balancers with health checks.
fn nb_steps(seed: u64) -> Vec<Step> {
    let mut rnd = super::draw(seed);
    let n = 10 + seed % 40;
    let mut s: Vec<Step> = vec![
        words(&format!(
            "set NB_Global . options:svc_monitor_mac={SVC_MAC}"
        )),
        words("ls-add sw0 -- ls-add sw1 -- lr-add lr0"),
    ];
    for sw in 0..2 {
        s.push(words(&format!(
            "lrp-add lr0 lr0-sw{sw} 00:00:00:00:ff:0{sw} 10.{n}.{sw}.1/24 fd00:{n}:{sw}::1/64 -- lsp-add sw{sw} sw{sw}-lr0 -- lsp-set-type sw{sw}-lr0 router -- lsp-set-addresses sw{sw}-lr0 router -- lsp-set-options sw{sw}-lr0 router-port=lr0-sw{sw}"
        )));
    }
    // Ports p0..p7: pI on sw(I % 2), 10.n.sw.(10+I), fd00:n:sw::(10+I).
    let addr4 = |i: u64| format!("10.{n}.{}.{}", i % 2, 10 + i);
    let addr6 = |i: u64| format!("fd00:{n}:{}::{}", i % 2, 10 + i);
    for i in 0..8u64 {
        let sw = i % 2;
        s.push(step(&[
            "lsp-add",
            &format!("sw{sw}"),
            &format!("p{i}"),
            "--",
            "lsp-set-addresses",
            &format!("p{i}"),
            &format!("0a:00:00:{n:02x}:0{sw}:{i:02x} {} {}", addr4(i), addr6(i)),
        ]));
    }
    if rnd(2) == 0 {
        s.push(words(&format!("lsp-set-enabled p{} disabled", rnd(8))));
    }
    let lbs = 2 + rnd(3);
    for j in 0..lbs {
        let v6 = rnd(3) == 0;
        let proto = if rnd(2) == 0 { "tcp" } else { "udp" };
        let vip = if v6 {
            format!("[fd00:{n}:9::{}]:80", j + 1)
        } else {
            format!("10.{n}.9.{}:80", j + 1)
        };
        let mut picked: Vec<u64> = Vec::new();
        for _ in 0..2 + rnd(3) {
            let i = rnd(8);
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        let backends: Vec<String> = picked
            .iter()
            .map(|i| {
                if v6 {
                    format!("[{}]:{}", addr6(*i), 8080 + j)
                } else {
                    format!("{}:{}", addr4(*i), 8080 + j)
                }
            })
            .collect();
        let name = format!("lb{j}");
        s.push(step(&["lb-add", &name, &vip, &backends.join(","), proto]));
        // The check: sometimes also one for a VIP the LB does not have.
        let mut hc = vec![
            "--id=@hc".to_string(),
            "create".into(),
            "Load_Balancer_Health_Check".into(),
            format!("vip=\"{vip}\""),
            format!("options:interval={}", 1 + rnd(10)),
            format!("options:timeout={}", 1 + rnd(30)),
            format!("options:success_count={}", 1 + rnd(4)),
            format!("options:failure_count={}", 1 + rnd(4)),
            "--".into(),
            "add".into(),
            "Load_Balancer".into(),
            name.clone(),
            "health_check".into(),
            "@hc".into(),
        ];
        if rnd(4) == 0 {
            hc.extend(
                [
                    "--",
                    "--id=@hc2",
                    "create",
                    "Load_Balancer_Health_Check",
                    "vip=\"10.99.99.99:1\"",
                    "--",
                    "add",
                    "Load_Balancer",
                    &name,
                    "health_check",
                    "@hc2",
                ]
                .map(str::to_string),
            );
        }
        s.push(hc);
        for i in &picked {
            let sw = i % 2;
            let (key, src) = if v6 {
                (format!("\"[{}]\"", addr6(*i)), format!("fd00:{n}:{sw}::fe"))
            } else {
                (addr4(*i), format!("10.{n}.{sw}.254"))
            };
            let value = match rnd(10) {
                // Unmapped: left out of the VIP.
                0 => continue,
                1 => format!("p{i}"),
                2 => format!("nosuch:{src}"),
                3 if !v6 => format!("p{i}:{src}:az1"),
                _ => format!("p{i}:{src}"),
            };
            s.push(vec![
                "set".into(),
                "load_balancer".into(),
                name.clone(),
                format!("ip_port_mappings:{key}=\"{value}\""),
            ]);
        }
        match rnd(3) {
            0 => s.push(words(&format!("ls-lb-add sw{} {name}", rnd(2)))),
            1 => s.push(words(&format!("lr-lb-add lr0 {name}"))),
            _ => s.push(words(&format!(
                "ls-lb-add sw0 {name} -- ls-lb-add sw1 {name} -- lr-lb-add lr0 {name}"
            ))),
        }
        if rnd(3) == 0 {
            s.push(words(&format!(
                "set load_balancer {name} options:reject=true"
            )));
        }
    }
    s
}

/// `Service_Monitor` rows of `env`'s SB: (logical_port, ip, port).
fn monitors(env: &Env) -> Vec<(String, String, String)> {
    let out = common::run_ok(Command::new("ovn-sbctl").args([
        &format!("--db={}", env.sb),
        "--format=csv",
        "--data=bare",
        "--no-headings",
        "--columns=logical_port,ip,port",
        "list",
        "Service_Monitor",
    ]));
    let mut v: Vec<(String, String, String)> = out
        .lines()
        .filter_map(|l| {
            let mut it = l.split(',');
            Some((
                it.next()?.to_string(),
                it.next()?.to_string(),
                it.next()?.to_string(),
            ))
        })
        .collect();
    v.sort();
    v
}

/// Sets `status` of the monitor (lport, ip, port) in `env`'s SB.
fn set_status(env: &Env, m: &(String, String, String), status: &str) {
    let uuids = common::run_ok(Command::new("ovn-sbctl").args([
        &format!("--db={}", env.sb),
        "--bare",
        "--columns=_uuid",
        "find",
        "Service_Monitor",
        &format!("logical_port={}", m.0),
        &format!("ip=\"{}\"", m.1),
        &format!("port={}", m.2),
    ]));
    for u in uuids.split_whitespace() {
        common::run_ok(Command::new("ovn-sbctl").args([
            &format!("--db={}", env.sb),
            "set",
            "Service_Monitor",
            u,
            &format!("status={status}"),
        ]));
    }
}

/// [`super::compare_sbs`]; returns (`Service_Monitor` rows in A, flows compared).
fn compare(a: &Env, b: &Env, what: &str, bad: &mut Vec<String>) -> (usize, usize) {
    let (ta, flows) = super::compare_sbs(a, b, what, bad);
    (ta.get("Service_Monitor").map_or(0, |t| t.len()), flows)
}

#[test]
fn health_checks_match_real_northd() {
    if !common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9000);
    let seeds = env_num("HF_HEALTH_SEEDS", 4);
    let mut bad = Vec::new();
    let (mut monitors_seen, mut flows_compared, mut status_steps) = (0usize, 0usize, 0usize);
    let mut v6_monitors = 0usize;
    for seed in first..first + seeds {
        let a = Env::start(Backend::OvsdbServer);
        let b = Env::start_with(Backend::OvsdbServer, false);
        for env in [&a, &b] {
            super::register_chassis(env);
        }
        let mut hf = holdfast_start(&b, "hf-northd");
        for st in nb_steps(seed) {
            for env in [&a, &b] {
                nbctl_wait(env, &st);
            }
        }
        let (m, f) = compare(&a, &b, &format!("seed {seed} NB"), &mut bad);
        monitors_seen += m;
        v6_monitors += monitors(&a).iter().filter(|m| m.1.contains(':')).count();
        flows_compared += f;
        // Monitors go offline and online; some ports come up (an online monitor whose port
        // is down is set offline by northd).
        let mons = monitors(&a);
        if mons != monitors(&b) {
            bad.push(format!(
                "seed {seed}: monitors differ:\n  ovn-northd: {mons:?}\n  holdfast:   {:?}",
                monitors(&b)
            ));
        }
        let mut rnd = super::draw(seed ^ 0x5eed);
        let ports: BTreeSet<&String> = mons.iter().map(|m| &m.0).collect();
        for p in ports.iter().filter(|_| rnd(3) != 0) {
            for env in [&a, &b] {
                common::run_ok(Command::new("ovn-sbctl").args([
                    &format!("--db={}", env.sb),
                    "set",
                    "Port_Binding",
                    p,
                    "up=true",
                ]));
            }
        }
        super::settle(&a, &b);
        compare(&a, &b, &format!("seed {seed} ports up"), &mut bad);
        for round in 0..6 {
            if mons.is_empty() {
                break;
            }
            let m = &mons[rnd(mons.len() as u64) as usize];
            let status = ["offline", "online", "offline", "error"][rnd(4) as usize];
            for env in [&a, &b] {
                set_status(env, m, status);
            }
            super::settle(&a, &b);
            status_steps += 1;
            compare(
                &a,
                &b,
                &format!("seed {seed} round {round} {m:?} {status}"),
                &mut bad,
            );
            if round == 2 {
                // Restarted: status kept, nothing written.
                stop(hf);
                hf = holdfast_start(&b, "hf-northd-2");
                super::settle(&a, &b);
                compare(&a, &b, &format!("seed {seed} after restart"), &mut bad);
            }
        }
        // Every monitor offline: VIPs drop or reject.
        for m in &mons {
            for env in [&a, &b] {
                set_status(env, m, "offline");
            }
        }
        super::settle(&a, &b);
        compare(&a, &b, &format!("seed {seed} all offline"), &mut bad);
        // The checks go: monitors deleted, every backend used again.
        for env in [&a, &b] {
            nbctl_wait(env, &words("clear load_balancer lb0 health_check"));
        }
        super::settle(&a, &b);
        compare(&a, &b, &format!("seed {seed} lb0 check cleared"), &mut bad);
        drop(hf);
    }
    eprintln!(
        "health checks: {seeds} NBs, {monitors_seen} Service_Monitor rows ({v6_monitors} IPv6), {status_steps} status changes, {flows_compared} flows of real ovn-northd compared, {} differences",
        bad.len()
    );
    assert!(
        monitors_seen > 0 && flows_compared > 0,
        "nothing was compared"
    );
    super::assert_no_differences(&bad);
}
