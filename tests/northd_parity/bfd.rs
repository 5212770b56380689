//! Issue 21's BFD on logical router ports against real ovn-northd: router `lr0` with three
//! ports (IPv4 and IPv6), NB `BFD` rows created plain and through `lr-route-add --bfd`,
//! static routes that name them (and one whose next hop is not the session's), a second
//! session on a port, custom timers; then the controllers' part played in SB (`status`
//! `up`, `down`, `init`), NB set to `admin_down` and back, a session deleted, holdfast
//! restarted. After every step: the SB tables with `BFD` (all but `disc`, which ovn-northd
//! draws at random: holdfast's must be non-zero), every logical flow, and NB's `BFD.status`
//! must be equal.

use std::collections::BTreeMap;
use std::process::Command;

use super::oracle::{Backend, Env};
use super::{common, env_num, holdfast_start, nbctl_wait, stop, words};

fn sbctl(env: &Env, args: &[&str]) -> String {
    common::run_ok(
        Command::new("ovn-sbctl")
            .arg(format!("--db={}", env.sb))
            .args(args),
    )
}

fn nbctl(env: &Env, args: &[&str]) -> String {
    common::run_ok(
        Command::new("ovn-nbctl")
            .arg(format!("--db={}", env.nb))
            .args(args),
    )
}

/// NB `BFD` rows: (logical port, dst IP) → status.
fn nb_status(env: &Env) -> BTreeMap<(String, String), String> {
    let out = nbctl(
        env,
        &[
            "--bare",
            "--format=csv",
            "--columns=logical_port,dst_ip,status",
            "list",
            "BFD",
        ],
    );
    out.lines()
        .filter_map(|l| {
            let mut c = l.split(',');
            Some((
                (c.next()?.to_string(), c.next()?.to_string()),
                c.next().unwrap_or("").to_string(),
            ))
        })
        .collect()
}

/// The SB `BFD` row of (port, dst) in `env`, by UUID.
fn sb_row(env: &Env, port: &str, dst: &str) -> String {
    sbctl(
        env,
        &[
            "--bare",
            "--columns=_uuid",
            "find",
            "BFD",
            &format!("logical_port={port}"),
            &format!("dst_ip=\"{dst}\""),
        ],
    )
    .trim()
    .to_string()
}

fn settle(a: &Env, b: &Env) {
    // NB status written back, then SB again: a few rounds.
    for _ in 0..3 {
        super::settle(a, b);
    }
}

fn compare(a: &Env, b: &Env, what: &str, bad: &mut Vec<String>) -> usize {
    settle(a, b);
    let (ta, flows) = super::compare_sbs(a, b, what, bad);
    let (sa, sb) = (nb_status(a), nb_status(b));
    if sa != sb {
        bad.push(format!(
            "{what}: NB BFD status {sa:?} (ovn-northd) vs {sb:?} (holdfast)"
        ));
    }
    let discs = sbctl(b, &["--bare", "--columns=disc", "list", "BFD"]);
    for d in discs.split_whitespace() {
        if d.parse::<i64>().map_or(true, |d| d <= 0) {
            bad.push(format!("{what}: holdfast BFD disc {d:?} is not positive"));
        }
    }
    ta.get("BFD").map_or(0, |t| t.len()) + flows
}

/// The steps of `seed`: NB commands, or SB status writes (`sb:PORT:DST:STATUS`).
fn steps(seed: u64) -> Vec<Vec<String>> {
    let mut rnd = super::draw(seed);
    let mut s: Vec<Vec<String>> = vec![
        words("lr-add lr0 -- lrp-add lr0 lrp0 00:00:00:00:ff:01 10.0.0.1/24 fd00::1/64"),
        words("lrp-add lr0 lrp1 00:00:00:00:ff:02 192.168.1.1/24"),
        words("lrp-add lr0 lrp2 00:00:00:00:ff:03 172.31.0.1/24"),
        words("create BFD logical_port=lrp0 dst_ip=10.0.0.2"),
        words("--bfd lr-route-add lr0 172.16.0.0/24 10.0.0.2"),
    ];
    // `--bfd` finds the session by its next hop (ovn-nbctl 23.03 creates none without an
    // output port): the sessions are made first.
    if rnd(2) == 0 {
        // Its own timers, and no route of its own.
        s.push(words(
            "create BFD logical_port=lrp1 dst_ip=192.168.1.2 min_tx=500 min_rx=700 detect_mult=3",
        ));
        s.push(words("lr-route-add lr0 10.99.0.0/16 192.168.1.2"));
    } else {
        s.push(words("create BFD logical_port=lrp1 dst_ip=192.168.1.2"));
        s.push(words("--bfd lr-route-add lr0 10.99.0.0/16 192.168.1.2"));
    }
    s.push(words("create BFD logical_port=lrp0 dst_ip=\"fd00::2\""));
    s.push(words("--bfd lr-route-add lr0 fd99::/64 fd00::2"));
    s.push(words("lr-route-add lr0 10.50.0.0/16 172.31.0.2"));
    s.push(vec!["sb:lrp0:10.0.0.2:up".into()]);
    s.push(vec!["sb:lrp1:192.168.1.2:up".into()]);
    s.push(vec![format!(
        "sb:lrp0:10.0.0.2:{}",
        ["down", "init", "up"][rnd(3) as usize]
    )]);
    s.push(words("set BFD . status=admin_down").into_iter().collect());
    s
}

#[test]
fn bfd_sessions_match_real_northd() {
    if !common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9100);
    let seeds = env_num("HF_BFD_SEEDS", 3);
    let mut bad = Vec::new();
    let mut compared = 0usize;
    for seed in first..first + seeds {
        let a = Env::start(Backend::OvsdbServer);
        let b = Env::start_with(Backend::OvsdbServer, false);
        for env in [&a, &b] {
            super::register_chassis(env);
        }
        let mut hf = holdfast_start(&b, "hf-northd");
        for (i, st) in steps(seed).into_iter().enumerate() {
            let what = format!("seed {seed} step {i} {st:?}");
            if let Some(sb) = st[0].strip_prefix("sb:") {
                let parts: Vec<&str> = sb.split(':').collect();
                let (port, dst, status) = (
                    parts[0],
                    parts[1..parts.len() - 1].join(":"),
                    parts[parts.len() - 1],
                );
                for env in [&a, &b] {
                    let u = sb_row(env, port, &dst);
                    if !u.is_empty() {
                        sbctl(env, &["set", "BFD", &u, &format!("status={status}")]);
                    }
                }
            } else if st[0] == "set" && st[1] == "BFD" {
                // Every NB session to admin_down, by UUID in each NB.
                for env in [&a, &b] {
                    let ids = nbctl(env, &["--bare", "--columns=_uuid", "list", "BFD"]);
                    for u in ids.split_whitespace() {
                        nbctl(env, &["set", "BFD", u, "status=admin_down"]);
                    }
                }
            } else {
                for env in [&a, &b] {
                    nbctl_wait(env, &st);
                }
            }
            compared += compare(&a, &b, &what, &mut bad);
        }
        stop(hf);
        hf = holdfast_start(&b, "hf-northd-2");
        compared += compare(&a, &b, &format!("seed {seed} after restart"), &mut bad);
        // A session goes (its route's `bfd` reference with it).
        for env in [&a, &b] {
            let u = nbctl(
                env,
                &[
                    "--bare",
                    "--columns=_uuid",
                    "find",
                    "BFD",
                    "logical_port=lrp0",
                    "dst_ip=\"10.0.0.2\"",
                ],
            );
            nbctl(env, &["destroy", "BFD", u.trim()]);
        }
        compared += compare(&a, &b, &format!("seed {seed} session deleted"), &mut bad);
        drop(hf);
    }
    eprintln!(
        "bfd: {seeds} NBs, {compared} rows and flows of real ovn-northd compared, {} differences",
        bad.len()
    );
    assert!(compared > 0, "nothing was compared");
    super::assert_no_differences(&bad);
}
