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
use crate::copp_nb::extras;
use crate::topo::Topology;
use crate::{flows, tables};

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
