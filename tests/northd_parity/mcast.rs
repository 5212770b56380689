//! Issue 21's learned multicast groups against real ovn-northd: seeded NBs with two snooping
//! switches behind router `lr0` (sometimes `mcast_relay`), eight ports, sometimes a localnet
//! port, a port with `options:mcast_flood`, a small `mcast_table_size`,
//! `mcast_flood_unregistered`, the querier's timers and addresses (`IP_Multicast`, also of
//! `sw2`, which does not snoop); then `IGMP_Group` rows inserted one at a time into both SBs as
//! ovn-controller writes them (address, datapath, chassis, ports by UUID): IPv4 and IPv6
//! groups, link-local ones, the same group from several chassis, `mrouters` entries, ports
//! that are flood ports or router ports; then rows' ports changed, a holdfast restart, and
//! rows deleted, and the switches' snooping options changed. After every step the SB tables (`Multicast_Group` with its tunnel keys
//! included) and every logical flow must be equal, the relaying router's included.

use std::process::Command;

use super::oracle::{Backend, Env};
use super::{common, env_num, holdfast_start, nbctl_wait, stop, words};

/// The NB of `seed`, and whether `lr0` relays.
fn nb_steps(seed: u64) -> (Vec<Vec<String>>, bool) {
    let mut rnd = super::draw(seed);
    let n = 10 + seed % 40;
    let relay = rnd(2) == 0;
    // sw2 does not snoop: its IP_Multicast row says so, with the defaults.
    let mut s: Vec<Vec<String>> = vec![words(
        "ls-add sw0 -- ls-add sw1 -- ls-add sw2 -- lr-add lr0",
    )];
    for sw in 0..2 {
        s.push(words(&format!(
            "lrp-add lr0 lr0-sw{sw} 00:00:00:00:ff:0{sw} 10.{n}.{sw}.1/24 fd00:{n}:{sw}::1/64 -- lsp-add sw{sw} sw{sw}-lr0 -- lsp-set-type sw{sw}-lr0 router -- lsp-set-addresses sw{sw}-lr0 router -- lsp-set-options sw{sw}-lr0 router-port=lr0-sw{sw}"
        )));
        let mut oc = vec!["other_config:mcast_snoop=true".to_string()];
        if rnd(3) == 0 {
            oc.push("other_config:mcast_flood_unregistered=true".into());
        }
        if rnd(3) == 0 {
            oc.push(format!("other_config:mcast_table_size={}", 1 + rnd(3)));
        }
        if rnd(2) == 0 {
            oc.push("other_config:mcast_querier=false".into());
        }
        // The IP_Multicast columns: in range, clamped (idle 15..3600, query 1..3600),
        // unparsable (the default).
        const IDLE: [&str; 5] = ["5", "30", "4000", "abc", "300"];
        const QUERY: [&str; 4] = ["0", "7", "5000", "x"];
        if rnd(2) == 0 {
            oc.push(format!(
                "other_config:mcast_idle_timeout={}",
                IDLE[rnd(5) as usize]
            ));
        }
        if rnd(2) == 0 {
            oc.push(format!(
                "other_config:mcast_query_interval={}",
                QUERY[rnd(4) as usize]
            ));
        }
        if rnd(2) == 0 {
            oc.push("other_config:mcast_query_max_response=3".into());
        }
        if rnd(2) == 0 {
            oc.push(format!(
                "other_config:mcast_eth_src=\"00:00:00:00:0{sw}:fe\""
            ));
            oc.push(format!("other_config:mcast_ip4_src=10.{n}.{sw}.254"));
            oc.push(format!("other_config:mcast_ip6_src=\"fe80::{sw}fe\""));
        }
        let mut cmd = vec![
            "set".to_string(),
            "logical_switch".into(),
            format!("sw{sw}"),
        ];
        cmd.extend(oc);
        s.push(cmd);
    }
    for i in 0..8u64 {
        let sw = i % 2;
        s.push(words(&format!(
            "lsp-add sw{sw} p{i} -- lsp-set-addresses p{i} 0a:00:00:{n:02x}:0{sw}:{i:02x}"
        )));
    }
    if rnd(2) == 0 {
        s.push(words(
            "lsp-add sw0 ln0 -- lsp-set-type ln0 localnet -- lsp-set-addresses ln0 unknown -- lsp-set-options ln0 network_name=phys",
        ));
    }
    if rnd(2) == 0 {
        s.push(words(&format!(
            "set logical_switch_port p{} options:mcast_flood=true",
            rnd(8)
        )));
    }
    if rnd(3) == 0 {
        s.push(words(&format!(
            "set logical_switch_port p{} options:mcast_flood_reports=true",
            rnd(8)
        )));
    }
    if relay {
        s.push(words("set logical_router lr0 options:mcast_relay=true"));
    }
    if rnd(3) == 0 {
        s.push(words(
            "set logical_router_port lr0-sw1 options:mcast_flood=true",
        ));
    }
    (s, relay)
}

fn sbctl(env: &Env, args: &[&str]) -> String {
    common::run_ok(
        Command::new("ovn-sbctl")
            .arg(format!("--db={}", env.sb))
            .args(args),
    )
}

fn uuid_of(env: &Env, table: &str, cond: &str) -> String {
    sbctl(env, &["--bare", "--columns=_uuid", "find", table, cond])
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// One `IGMP_Group` row as the test writes it: (switch, address, chassis, ports).
type Row = (String, String, String, Vec<String>);

/// Inserts `r` into `env`'s SB, returning the row's UUID.
fn insert(env: &Env, r: &Row) -> String {
    let dp = uuid_of(
        env,
        "Datapath_Binding",
        &format!("external_ids:name={}", r.0),
    );
    let ch = uuid_of(env, "Chassis", &format!("name={}", r.2));
    let ports: Vec<String> =
        r.3.iter()
            .map(|p| uuid_of(env, "Port_Binding", &format!("logical_port={p}")))
            .collect();
    let mut args = vec![
        "create".to_string(),
        "IGMP_Group".into(),
        format!("address=\"{}\"", r.1),
        format!("datapath={dp}"),
        format!("chassis={ch}"),
    ];
    if !ports.is_empty() {
        args.push(format!("ports={}", ports.join(",")));
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    sbctl(env, &a).trim().to_string()
}

fn set_ports(env: &Env, row: &str, ports: &[String]) {
    let us: Vec<String> = ports
        .iter()
        .map(|p| uuid_of(env, "Port_Binding", &format!("logical_port={p}")))
        .collect();
    let mut args = vec![
        "clear".to_string(),
        "IGMP_Group".into(),
        row.to_string(),
        "ports".into(),
    ];
    if !us.is_empty() {
        args = vec![
            "set".to_string(),
            "IGMP_Group".into(),
            row.to_string(),
            format!("ports={}", us.join(",")),
        ];
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    sbctl(env, &a);
}

/// [`super::compare_sbs`]; returns (learned groups in A, flows compared).
///
/// One allowance: when a switch learned more groups of a family than its
/// `mcast_table_size`, which of them get a priority-90 flow is ovn-northd's hash order over
/// `hash_pointer(datapath)` (a heap address: it differs from run to run), so for such a switch
/// and family only the number of group flows is compared (equal to the table size on both).
fn compare(a: &Env, b: &Env, what: &str, bad: &mut Vec<String>) -> (usize, usize) {
    let mut mine = Vec::new();
    let (ta, flows) = super::compare_sbs(a, b, what, &mut mine);
    if !mine.is_empty() {
        let group_flow = |f: &super::FlowKey| -> Option<(String, &'static str)> {
            if f.1 != "ls_in_l2_lkup" || f.2 != 90 {
                return None;
            }
            ["ip4", "ip6"]
                .into_iter()
                .find(|fam| {
                    f.3.starts_with(&format!("eth.mcast && {fam} && {fam}.dst == "))
                })
                .map(|fam| (f.0.clone(), fam))
        };
        let count = |env: &Env| {
            let mut n: std::collections::BTreeMap<(String, &'static str), u64> = Default::default();
            for f in super::flow_set(&super::flows::load_sb(&env.sb)) {
                if let Some(k) = group_flow(&f) {
                    *n.entry(k).or_default() += 1;
                }
            }
            n
        };
        let (na, nb) = (count(a), count(b));
        let full: Vec<&(String, &str)> = na
            .iter()
            .filter(|(k, n)| {
                let size = ta
                    .get("IP_Multicast")
                    .and_then(|t| t.get(&k.0))
                    .and_then(|r| r.get("table_size"))
                    .and_then(|v| v.parse::<u64>().ok());
                nb.get(*k) == Some(*n) && size == Some(**n)
            })
            .map(|(k, _)| k)
            .collect();
        mine.retain(|l| {
            !full.iter().any(|(sw, fam)| {
                l.contains(&format!(
                    "(\"{sw}\", \"ls_in_l2_lkup\", 90, \"eth.mcast && {fam} && {fam}.dst =="
                ))
            })
        });
    }
    bad.extend(mine);
    let learned = ta
        .get("Multicast_Group")
        .map_or(0, |t| t.keys().filter(|k| !k.contains("/_MC_")).count());
    (learned, flows)
}

const ADDRS: &[&str] = &[
    "239.1.1.1",
    "239.1.1.2",
    "232.5.5.5",
    "224.0.0.251",
    "ff0e::1:1",
    "ff05::abcd",
    "ff02::1:3",
    "ff02::1",
    "mrouters",
];

#[test]
fn learned_multicast_groups_match_real_northd() {
    if !common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9000);
    let seeds = env_num("HF_MCAST_SEEDS", 4);
    let mut bad = Vec::new();
    let (mut groups_seen, mut flows_compared, mut rows_written) = (0usize, 0usize, 0usize);
    let mut purged = 0;
    for seed in first..first + seeds {
        let a = Env::start(Backend::OvsdbServer);
        let b = Env::start_with(Backend::OvsdbServer, false);
        for env in [&a, &b] {
            super::register_chassis(env);
        }
        let mut hf = holdfast_start(&b, "hf-northd");
        let (steps, _relay) = nb_steps(seed);
        for st in steps {
            for env in [&a, &b] {
                nbctl_wait(env, &st);
            }
        }
        compare(&a, &b, &format!("seed {seed} NB"), &mut bad);
        let mut rnd = super::draw(seed ^ 0x3c3c);
        let mut written: Vec<(Row, String, String)> = Vec::new();
        for k in 0..8 {
            let sw = rnd(2);
            let addr = ADDRS[rnd(ADDRS.len() as u64) as usize].to_string();
            let chassis = super::topo::CHASSIS[rnd(4) as usize].0.to_string();
            let mut ports: Vec<String> = Vec::new();
            for _ in 0..1 + rnd(3) {
                let p = match rnd(8) {
                    0 => format!("sw{sw}-lr0"),
                    _ => format!("p{}", sw + 2 * rnd(4)),
                };
                if !ports.contains(&p) {
                    ports.push(p);
                }
            }
            let row: Row = (format!("sw{sw}"), addr, chassis, ports);
            // SB's index: one row per (address, datapath, chassis).
            if written
                .iter()
                .any(|(w, _, _)| w.0 == row.0 && w.1 == row.1 && w.2 == row.2)
            {
                continue;
            }
            let ua = insert(&a, &row);
            let ub = insert(&b, &row);
            rows_written += 1;
            super::settle(&a, &b);
            let (g, f) = compare(&a, &b, &format!("seed {seed} row {k} {row:?}"), &mut bad);
            groups_seen = groups_seen.max(g);
            flows_compared += f;
            written.push((row, ua, ub));
        }
        // Ports change (a receiver leaves, another joins).
        for (i, (row, ua, ub)) in written.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
            let sw = &row.0[2..];
            let ports = vec![format!("p{}", sw.parse::<u64>().unwrap_or(0) + 2 * rnd(4))];
            set_ports(&a, ua, &ports);
            set_ports(&b, ub, &ports);
            super::settle(&a, &b);
            compare(
                &a,
                &b,
                &format!("seed {seed} ports of row {i} → {ports:?}"),
                &mut bad,
            );
        }
        stop(hf);
        hf = holdfast_start(&b, "hf-northd-2");
        super::settle(&a, &b);
        compare(&a, &b, &format!("seed {seed} after restart"), &mut bad);
        // Snooping configuration changes: a source address removed (23.03 keeps the last one
        // written in IP_Multicast), the timers changed, snooping turned off.
        for st in [
            "remove logical_switch sw0 other_config mcast_eth_src",
            "set logical_switch sw1 other_config:mcast_idle_timeout=60 other_config:mcast_querier=False",
            "set logical_switch sw2 other_config:mcast_snoop=true other_config:mcast_ip4_src=192.0.2.1",
            "remove logical_switch sw0 other_config mcast_snoop",
        ] {
            for env in [&a, &b] {
                nbctl_wait(env, &words(st));
            }
            compare(&a, &b, &format!("seed {seed} {st}"), &mut bad);
        }
        // Rows go (receivers time out).
        for (i, (_, ua, ub)) in written.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            sbctl(&a, &["destroy", "IGMP_Group", ua]);
            sbctl(&b, &["destroy", "IGMP_Group", ub]);
            super::settle(&a, &b);
            compare(&a, &b, &format!("seed {seed} row {i} deleted"), &mut bad);
        }
        // A chassis with rows goes (its controller crashed): its rows lose their chassis and
        // northd purges them.
        let left: Vec<&Row> = written
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, (r, _, _))| r)
            .collect();
        if let Some(r) = left.first() {
            for env in [&a, &b] {
                sbctl(env, &["chassis-del", &r.2]);
            }
            super::settle(&a, &b);
            let (t, _) = super::compare_sbs(
                &a,
                &b,
                &format!("seed {seed} chassis-del {}", r.2),
                &mut bad,
            );
            let stale = t
                .get("IGMP_Group")
                .is_some_and(|g| g.keys().any(|k| k.ends_with('@') || k.ends_with("@[]")));
            assert!(
                !stale,
                "ovn-northd left a stale row: {:?}",
                t.get("IGMP_Group")
            );
            purged += 1;
        }
        drop(hf);
    }
    assert!(purged > 0, "no chassis was deleted");
    eprintln!(
        "learned multicast: {seeds} NBs, {rows_written} IGMP_Group rows, up to {groups_seen} learned groups at once, {flows_compared} flows of real ovn-northd compared, {} differences",
        bad.len()
    );
    assert!(
        groups_seen > 0 && flows_compared > 0,
        "nothing was compared"
    );
    super::assert_no_differences(&bad);
}
