//! Meters, control-plane protection and ACL log meters against real ovn-northd 23.03
//! (issue 21, "Meters, CoPP and ACL logging"): the SB `Meter`/`Meter_Band` rows (NB meters and
//! the ACLs' own copies of `fair` ones) and every flow's `controller_meter` and `log()` meter.
//!
//! On generated topologies the same `ovn-nbctl` commands add three meters (pktps, kbps with
//! burst, and a `fair` one), a CoPP row metering all 16 control protocols on `sw0`, `ext` and
//! the router, a second CoPP row on `sw1` (one protocol naming a meter that does not exist),
//! logged ACLs (fair and plain meters, drop, allow-related, reject, unmetered) and load
//! balancers without backends (one rejecting, with `controller_event` on, one raising events).
//! Compared: the two SBs' tables as `tables::dump` reads them and every flow as (datapath,
//! stage, priority, match, actions, controller_meter), with each NB ACL's UUID (inside fair
//! meter names) replaced by the ACL's direction, priority and match.

use std::collections::{BTreeMap, BTreeSet};

use hf_model::SbSnapshot;

use super::{both, env_num, nb_of};
use crate::oracle::Env;
use crate::topo::Topology;
use crate::{flows, tables};

/// Every proto OVN 23.03 knows.
const PROTOS: &[&str] = &[
    "arp",
    "arp-resolve",
    "dhcpv4-opts",
    "dhcpv6-opts",
    "dns",
    "event-elb",
    "icmp4-error",
    "icmp6-error",
    "igmp",
    "nd-na",
    "nd-ns",
    "nd-ns-resolve",
    "nd-ra-opts",
    "tcp-reset",
    "reject",
    "bfd",
];

fn cmd(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// What the test adds to a generated topology.
pub fn extras(t: &Topology) -> Vec<Vec<String>> {
    let mut c = vec![
        cmd(&["meter-add", "m-pkt", "drop", "10", "pktps", "5"]),
        cmd(&["meter-add", "m-kbps", "drop", "2000", "kbps", "300"]),
        cmd(&["--fair", "meter-add", "m-fair", "drop", "3", "pktps"]),
    ];
    let meters = ["m-pkt", "m-kbps", "m-fair"];
    for (i, p) in PROTOS.iter().enumerate() {
        c.push(cmd(&["copp-add", "copp0", p, meters[i % meters.len()]]));
    }
    c.push(cmd(&["ls-copp-add", "copp0", "sw0"]));
    c.push(cmd(&["ls-copp-add", "copp0", "ext"]));
    c.push(cmd(&["lr-copp-add", "copp0", "lr0"]));
    if t.n_switches > 1 {
        c.push(cmd(&["copp-add", "copp1", "arp", "m-pkt"]));
        c.push(cmd(&["copp-add", "copp1", "reject", "m-fair"]));
        c.push(cmd(&["copp-add", "copp1", "dhcpv4-opts", "m-none"]));
        c.push(cmd(&["ls-copp-add", "copp1", "sw1"]));
    }
    c.extend([
        cmd(&[
            "--log",
            "--meter=m-fair",
            "--name=fair-drop",
            "--severity=alert",
            "acl-add",
            "sw0",
            "from-lport",
            "1005",
            "tcp.dst == 23",
            "drop",
        ]),
        cmd(&[
            "--log",
            "--meter=m-fair",
            "--name=fair-allow",
            "acl-add",
            "sw0",
            "to-lport",
            "1006",
            "udp.dst == 5353",
            "allow-related",
        ]),
        cmd(&[
            "--log",
            "--meter=m-pkt",
            "acl-add",
            "sw0",
            "from-lport",
            "1007",
            "tcp.dst == 24",
            "reject",
        ]),
        cmd(&[
            "--log",
            "--severity=debug",
            "acl-add",
            "sw0",
            "from-lport",
            "1008",
            "tcp.dst == 25",
            "allow",
        ]),
        cmd(&[
            "create",
            "Load_Balancer",
            "name=lb-rej",
            "protocol=tcp",
            "vips:\"10.0.0.240:80\"=\"\"",
            "options:reject=true",
        ]),
        cmd(&["ls-lb-add", "sw0", "lb-rej"]),
        cmd(&["lr-lb-add", "lr0", "lb-rej"]),
        cmd(&[
            "create",
            "Load_Balancer",
            "name=lb-ev",
            "protocol=tcp",
            "vips:\"10.0.0.241:80\"=\"\"",
        ]),
        cmd(&["ls-lb-add", "sw0", "lb-ev"]),
        cmd(&["lr-lb-add", "lr0", "lb-ev"]),
        cmd(&["set", "NB_Global", ".", "options:controller_event=true"]),
    ]);
    c
}

/// NB ACL UUID → `direction/priority/match`, load balancer UUID → `lb:NAME` (they appear in
/// fair meter names and `trigger_event` arguments).
fn acl_names(env: &Env) -> BTreeMap<String, String> {
    let nb = nb_of(env);
    let mut m: BTreeMap<String, String> = nb
        .acl()
        .values()
        .map(|a| {
            (
                a.uuid.to_string(),
                format!("{}/{}/{}", a.direction.as_str(), a.priority, a.match_),
            )
        })
        .collect();
    m.extend(
        nb.load_balancer()
            .values()
            .map(|l| (l.uuid.to_string(), format!("lb:{}", l.name))),
    );
    m
}

fn rename(s: &str, acls: &BTreeMap<String, String>) -> String {
    let mut out = s.to_string();
    for (u, n) in acls {
        if out.contains(u.as_str()) {
            out = out.replace(u.as_str(), &format!("<{n}>"));
        }
    }
    out
}

/// Every flow with a meter (a `controller_meter` or a `log(meter=...)`) as
/// (datapath, stage, priority, match, actions, controller_meter), ACL UUIDs renamed; and how
/// many flows there are in all.
fn metered_flows(
    sb: &SbSnapshot,
    acls: &BTreeMap<String, String>,
) -> (BTreeSet<(super::FlowKey, String)>, usize) {
    let all = super::flow_set_with(sb, true);
    let n = all.len();
    let set = all
        .into_iter()
        .filter(|(k, m)| !m.is_empty() || k.4.contains("meter="))
        .map(|(mut k, m)| {
            k.4 = rename(&k.4, acls);
            (k, m)
        })
        .collect();
    (set, n)
}

#[test]
fn copp_meters_match_real_northd() {
    if !crate::common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9000);
    let seeds = env_num("HF_COPP_SEEDS", 3);
    let mut bad = Vec::new();
    let (mut metered, mut meters, mut flows_seen) = (0usize, 0usize, 0usize);
    let mut protos_seen = BTreeSet::new();
    for seed in first..first + seeds {
        let mut t = Topology::generate(seed, 0);
        t.nb.extend(tables::production_extras(&t));
        t.nb.extend(extras(&t));
        let (a, b, filled) = both(&t);
        let (na, nb) = (acl_names(&a), acl_names(&b));
        // Tables: Meter keys carry ACL UUIDs.
        let dump = |env: &Env, acls: &BTreeMap<String, String>| {
            let mut d = tables::dump(&env.sb);
            if let Some(m) = d.remove("Meter") {
                d.insert(
                    "Meter".into(),
                    m.into_iter().map(|(k, v)| (rename(&k, acls), v)).collect(),
                );
            }
            d
        };
        let (ta, tb) = (dump(&a, &na), dump(&b, &nb));
        meters += ta["Meter"].len();
        // Only the meter tables: the others have their own tests (`northd_tables_match_real_northd`).
        for l in tables::diff(&ta, &tb) {
            if l.starts_with("Meter") && !tables::allowed(&l) {
                bad.push(format!("seed {seed}: {l}"));
            }
        }
        let (sa, sbb) = (flows::load_sb(&a.sb), flows::load_sb(&b.sb));
        let ((fa, n), (fb, _)) = (metered_flows(&sa, &na), metered_flows(&sbb, &nb));
        flows_seen += n;
        metered += fa.len();
        for (k, m) in &fa {
            if !m.is_empty() {
                protos_seen.insert(k.1.clone());
            }
        }
        for f in fa.difference(&fb) {
            bad.push(format!(
                "seed {seed}: metered flow only in ovn-northd: {f:?}"
            ));
        }
        for f in fb.difference(&fa) {
            bad.push(format!("seed {seed}: metered flow only in holdfast: {f:?}"));
        }
        // The one meter that does not exist is named, nothing else about CoPP or meters.
        for d in &filled.diagnostics {
            let about = d.contains("copp") || d.contains("Meter") || d.contains("meter");
            if about && !d.contains("m-none") {
                bad.push(format!("seed {seed}: unexpected diagnostic: {d}"));
            }
        }
        if t.n_switches > 1 && !filled.diagnostics.iter().any(|d| d.contains("m-none")) {
            bad.push(format!(
                "seed {seed}: no diagnostic for copp1's missing meter m-none: {:?}",
                filled.diagnostics
            ));
        }
    }
    eprintln!(
        "copp/meters: {seeds} topologies, {meters} SB meters, {metered} metered flows of {flows_seen} (stages {protos_seen:?}), {} differences",
        bad.len()
    );
    assert!(metered > 0 && meters > 0, "nothing metered was compared");
    assert!(
        bad.is_empty(),
        "{} differences:\n{}",
        bad.len(),
        bad.iter().take(60).cloned().collect::<Vec<_>>().join("\n")
    );
}
