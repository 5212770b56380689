//! Active/standby through the SB lock `ovn_northd`: two holdfast northds, exactly one writes;
//! kill -9 the active one and the other takes over with SB complete (compared with a fresh
//! in-process compile of the same NB); and holdfast northd on standby behind a real
//! ovn-northd holding the lock, taking over when it dies.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb_net::client::{Client, Config, Model, parse_remotes};

use crate::common::{self, run_ok};
use crate::fixture::{Backend, Dbs, NorthdProc, PidDaemon, wait_for};

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-appctl",
];

/// Replicate a whole database once.
pub fn replicate<M: Model + Clone>(remote: &str) -> M {
    replicated(remote, M::clone)
}

/// Replicate a whole database once and look at it with `f`.
pub fn replicated<M: Model, R>(remote: &str, f: impl FnOnce(&M) -> R) -> R {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (c, _ev) = Client::<M>::spawn(parse_remotes(remote), Config::default());
        assert!(
            c.wait_until(Duration::from_secs(30), |r| r.is_synced())
                .await,
            "the replica of {remote} never synced"
        );
        c.with(|r| f(r.model()))
    })
}

/// SB is exactly what northd owes NB: a compile from scratch of NB (with the tunnel keys and
/// chassis features SB shows, as the daemon reads them) and a full diff against SB, every row
/// and column of every table northd owns (flows, datapaths, port bindings, multicast groups,
/// port groups, address sets, load balancers, `SB_Global`, ...), asks for no operation.
/// Independent of the daemon's incremental state: nothing of it is read.
pub fn assert_no_full_diff(nb_remote: &str, sb_remote: &str) {
    use hf_northd::daemon::{SbView, core::compile_options};
    use hf_northd::{features, sync};
    let nb: NbSnapshot = replicate(nb_remote);
    let ops = replicated(sb_remote, |sb: &SbView| {
        let mut opts = compile_options(sb);
        let chassis = features::SbChassisView::from_parts(
            sb.chassis.values(),
            &sb.datapath_binding,
            sb.port_binding.values(),
        );
        features::negotiate(&chassis, &nb, &features::Policy::default()).apply(&mut opts);
        let c = hf_northd::compile(&nb, &opts);
        let input = sync::SyncInput {
            desired: &c.sb,
            nb_cfg: nb.nb_global().values().next().map_or(0, |g| g.nb_cfg),
            scope: None,
        };
        let mut n = 0u128;
        sync::diff_ops(&input, sb, &mut || {
            n += 1;
            uuid::Uuid::from_u128(n)
        })
        .0
    });
    let shown: Vec<String> = ops.iter().take(6).map(|o| o.to_string()).collect();
    assert!(
        ops.is_empty(),
        "SB differs from a fresh compile of NB: a full diff wants {} operations, first:\n{}",
        ops.len(),
        shown.join("\n")
    );
}

/// A flow as compared: (pipeline, table, priority, match, actions).
type FlowText = (String, i64, i64, String, String);

/// SB's flows by hf-flow-id; flows without one are counted apart.
pub fn sb_flows(sb: &SbSnapshot) -> (BTreeMap<String, FlowText>, usize) {
    let mut m = BTreeMap::new();
    let mut without = 0;
    for f in sb.logical_flow().values() {
        let t = (
            f.pipeline.as_str().to_string(),
            f.table_id,
            f.priority,
            f.match_.to_string(),
            f.actions.to_string(),
        );
        match f.external_ids.get("hf-flow-id") {
            Some(id) => {
                assert!(
                    m.insert(id.clone(), t).is_none(),
                    "two flows with hf-flow-id {id}"
                );
            }
            None => without += 1,
        }
    }
    (m, without)
}

/// SB holds exactly what a fresh compile of NB (with SB's tunnel keys) asks for: every flow by
/// identity and text, every datapath and port binding by name.
pub fn assert_sb_complete(nb_remote: &str, sb_remote: &str) {
    let nb: NbSnapshot = replicate(nb_remote);
    let sb: SbSnapshot = replicate(sb_remote);
    let mut opts = hf_northd::Options::default();
    for d in sb.datapath_binding().values() {
        if let Some(n) = d.external_ids.get("name") {
            opts.keys.datapaths.insert(n.clone(), d.tunnel_key as u32);
        }
    }
    for p in sb.port_binding().values() {
        opts.keys
            .ports
            .insert(p.logical_port.clone(), p.tunnel_key as u32);
    }
    let c = hf_northd::compile(&nb, &opts);
    let want: BTreeMap<String, FlowText> =
        c.sb.flows
            .iter()
            .map(|(id, f)| {
                (
                    id.to_string(),
                    (
                        f.pipeline.to_string(),
                        i64::from(f.table_id),
                        i64::from(f.priority),
                        f.match_.to_string(),
                        f.actions.to_string(),
                    ),
                )
            })
            .collect();
    let (have, without) = sb_flows(&sb);
    assert_eq!(without, 0, "SB has flows without hf-flow-id");
    assert!(!want.is_empty());
    if have != want {
        let missing: Vec<_> = want
            .iter()
            .filter(|(k, v)| have.get(*k) != Some(v))
            .take(5)
            .collect();
        let extra: Vec<_> = have
            .iter()
            .filter(|(k, v)| want.get(*k) != Some(v))
            .take(5)
            .collect();
        panic!(
            "SB flows differ from a fresh compile ({} vs {}): missing {missing:?}, extra {extra:?}",
            have.len(),
            want.len()
        );
    }
    let dps: Vec<String> = sb
        .datapath_binding()
        .values()
        .filter_map(|d| d.external_ids.get("name").cloned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(dps, c.sb.datapaths.keys().cloned().collect::<Vec<_>>());
    let pbs: std::collections::BTreeSet<String> = sb
        .port_binding()
        .values()
        .map(|p| p.logical_port.clone())
        .collect();
    assert_eq!(pbs, c.sb.ports.keys().cloned().collect());
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hf-northd-ha-")
        .tempdir()
        .expect("tempdir")
}

fn add_port(dbs: &Dbs, sw: &str, p: &str, n: u8) {
    run_ok(dbs.nbctl().args([
        "--wait=sb",
        "lsp-add",
        sw,
        p,
        "--",
        "lsp-set-addresses",
        p,
        &format!("00:00:00:00:01:{n:02x} 10.0.1.{n}"),
    ]));
}

#[test]
fn two_northds_exactly_one_writes_and_the_other_takes_over() {
    if !common::require("northd active/standby", TOOLS) {
        return;
    }
    let dir = tempdir();
    let dbs = Dbs::start(dir.path(), Backend::Holdfast);
    let mut a = NorthdProc::start(dir.path(), "a", &dbs.nb, &dbs.sb, &[]);
    let mut b = NorthdProc::start(dir.path(), "b", &dbs.nb, &dbs.sb, &[]);
    let roles = |a: &NorthdProc, b: &NorthdProc| {
        let mut r = [a.status(), b.status()];
        r.sort();
        r
    };
    assert!(
        wait_for(Duration::from_secs(10), || roles(&a, &b)
            == ["Status: active", "Status: standby"]),
        "roles: {:?}",
        roles(&a, &b)
    );
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw0"]));
    add_port(&dbs, "sw0", "p1", 1);
    let (active, standby) = if a.status() == "Status: active" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(active.counter("sb-commits") >= 1);
    assert_eq!(standby.counter("sb-commits"), 0, "the standby wrote SB");
    assert_eq!(standby.counter("nb-commits"), 0, "the standby wrote NB");
    active.kill9();
    assert!(
        wait_for(Duration::from_secs(15), || standby.status()
            == "Status: active"),
        "the standby never took over: {}",
        standby.log_text()
    );
    add_port(&dbs, "sw0", "p2", 2);
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw1"]));
    add_port(&dbs, "sw1", "p3", 3);
    assert!(standby.counter("sb-commits") >= 1);
    assert_sb_complete(&dbs.nb, &dbs.sb);
}

#[test]
fn standby_behind_real_ovn_northd() {
    if !common::require(
        "northd behind ovn-northd",
        &[TOOLS, &["ovn-northd"]].concat(),
    ) {
        return;
    }
    let dir = tempdir();
    let d = dir.path();
    let dbs = Dbs::start(d, Backend::Ovsdb);
    run_ok(
        Command::new("ovn-northd")
            .arg("--detach")
            .arg("--no-chdir")
            .arg(format!("--pidfile={}", d.join("ovn-northd.pid").display()))
            .arg(format!("--log-file={}", d.join("ovn-northd.log").display()))
            .arg(format!("--unixctl={}", d.join("ovn-northd.ctl").display()))
            .arg(format!("--ovnnb-db={}", dbs.nb))
            .arg(format!("--ovnsb-db={}", dbs.sb)),
    );
    let real = PidDaemon::adopt(d, "ovn-northd");
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw0"]));
    let ours = NorthdProc::start(d, "hf", &dbs.nb, &dbs.sb, &[]);
    assert!(wait_for(Duration::from_secs(10), || {
        ours.appctl(&["sb-connection-status"]).trim() == "connected"
    }));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ours.status(), "Status: standby");
    add_port(&dbs, "sw0", "p1", 1);
    assert_eq!(
        ours.counter("sb-commits"),
        0,
        "holdfast wrote while ovn-northd held the lock"
    );
    let (with_id, without) = sb_flows(&replicate::<SbSnapshot>(&dbs.sb));
    assert!(
        with_id.is_empty() && without > 0,
        "SB is not real ovn-northd's"
    );
    real.kill9().unwrap();
    assert!(
        wait_for(Duration::from_secs(15), || ours.status()
            == "Status: active"),
        "holdfast never took over from ovn-northd: {}",
        ours.log_text()
    );
    add_port(&dbs, "sw0", "p2", 2);
    // Every flow real ovn-northd wrote (no hf-flow-id) is gone, and SB is holdfast's whole.
    assert_sb_complete(&dbs.nb, &dbs.sb);
}

/// The database server dies (SIGKILL) and comes back on the same files: northd reconnects,
/// takes the lock again and carries on; SB stays complete.
#[test]
fn survives_a_database_restart() {
    if !common::require("northd db restart", TOOLS) {
        return;
    }
    let dir = tempdir();
    let mut dbs = Dbs::start(dir.path(), Backend::Holdfast);
    let n = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &[]);
    run_ok(dbs.nbctl().args(["--wait=sb", "ls-add", "sw0"]));
    add_port(&dbs, "sw0", "p1", 1);
    dbs.restart_holdfast();
    assert!(
        wait_for(Duration::from_secs(20), || {
            n.appctl(&["sb-connection-status"]).trim() == "connected"
                && n.status() == "Status: active"
        }),
        "northd did not come back: {}",
        n.log_text()
    );
    add_port(&dbs, "sw0", "p2", 2);
    assert_sb_complete(&dbs.nb, &dbs.sb);
}
