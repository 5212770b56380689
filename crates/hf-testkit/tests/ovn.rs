//! The real-OVN fixtures against real OVN 23.03 / OVS 3.1: a central compiles an NB, a real
//! chassis claims its port, a Raft cluster elects, loses and regains members, and every
//! daemon is gone once its handle drops.

use std::path::Path;
use std::time::Duration;

use hf_testkit::Result;
use hf_testkit::cmd::{alive, wait_until};
use hf_testkit::ovn::{
    CENTRAL_TOOLS, CHASSIS_TOOLS, Central, ChassisOpts, Daemon, RealChassis, SB_SCHEMA, raft,
    require,
};

/// Every pid of `daemons`, for checking they are gone later.
fn pids<'a>(daemons: impl IntoIterator<Item = &'a Daemon>) -> Vec<i32> {
    daemons.into_iter().filter_map(Daemon::pid).collect()
}

fn assert_gone(pids: &[i32]) {
    for &p in pids {
        let r = wait_until(
            Duration::from_secs(10),
            || format!("pid {p} to exit"),
            || !alive(p),
        );
        assert!(r.is_ok(), "{r:?}");
    }
}

#[test]
fn a_central_compiles_the_nb_and_stops_on_drop() -> Result<()> {
    if !require(
        "a_central_compiles_the_nb_and_stops_on_drop",
        &[CENTRAL_TOOLS],
    ) {
        return Ok(());
    }
    let c = Central::start()?;
    c.nbctl(&["ls-add", "sw0"])?;
    c.nbctl(&["lsp-add", "sw0", "vm1"])?;
    c.sync()?;
    let dp = c.sbctl(&[
        "--bare",
        "--columns=external_ids",
        "list",
        "Datapath_Binding",
    ])?;
    assert!(dp.contains("sw0"), "{dp}");
    let backup = c.sb_backup()?;
    assert!(
        backup.starts_with(b"OVSDB JSON"),
        "{}",
        String::from_utf8_lossy(&backup[..40])
    );
    assert!(backup.len() > 1000);
    let bad = Central::transact(
        &c.nb,
        "OVN_Northbound",
        &[serde_json::json!(
        {"op": "insert", "table": "No_Such_Table", "row": {}})],
    );
    assert!(bad.is_err(), "{bad:?}");
    let all = pids(c.servers().map(|s| &s.daemon).into_iter().chain(c.northd()));
    assert_eq!(all.len(), 3);
    let dir = c.dir().to_path_buf();
    drop(c);
    assert_gone(&all);
    assert!(!dir.exists());
    Ok(())
}

#[test]
fn a_real_chassis_claims_its_port() -> Result<()> {
    if !require(
        "a_real_chassis_claims_its_port",
        &[CENTRAL_TOOLS, CHASSIS_TOOLS],
    ) {
        return Ok(());
    }
    let c = Central::start()?;
    c.nbctl(&["ls-add", "sw0"])?;
    c.nbctl(&["lsp-add", "sw0", "vm1"])?;
    c.nbctl(&["lsp-set-addresses", "vm1", "02:00:00:00:00:01 10.0.0.11"])?;
    let ch = RealChassis::start(
        c.dir(),
        &ChassisOpts {
            name: "hv1",
            sb: &c.sb,
            encap_ip: "127.0.0.2",
            vifs: &["vm1".to_string()],
        },
    )?;
    let claimed = wait_until(
        Duration::from_secs(30),
        || {
            format!(
                "hv1 to claim vm1; ovn-controller's log:\n{}",
                ch.controller_log()
            )
        },
        || {
            c.sbctl(&[
                "--bare",
                "--columns=chassis",
                "find",
                "Port_Binding",
                "logical_port=vm1",
            ])
            .is_ok_and(|s| !s.trim().is_empty())
        },
    );
    assert!(claimed.is_ok(), "{claimed:?}");
    assert!(ch.openflow_flows()? > 10);
    assert!(ch.appctl(&["version"])?.contains("ovn-controller"));
    let all = pids(
        ["ovsdb-server", "ovs-vswitchd", "ovn-controller"]
            .map(|n| ch.daemon(n).unwrap_or_else(|| panic!("no {n}"))),
    );
    assert_eq!(all.len(), 3);
    drop(ch);
    assert_gone(&all);
    Ok(())
}

#[test]
fn a_raft_cluster_loses_and_regains_its_leader() -> Result<()> {
    if !require(
        "a_raft_cluster_loses_and_regains_its_leader",
        &[CENTRAL_TOOLS, &["ovs-appctl"]],
    ) {
        return Ok(());
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cl = raft::Cluster::start(dir.path(), "m", Path::new(SB_SCHEMA), "OVN_Southbound", 3)?;
    let old = cl.kill_leader()?;
    let new = cl.leader()?;
    assert_ne!(old, new);
    assert!(!cl.alive().contains(&cl.members[old].unix()));
    cl.rejoin()?;
    let (from, to) = cl.transfer_leadership()?;
    assert_ne!(from, to);
    let all: Vec<i32> = cl.members.iter().filter_map(raft::Member::pid).collect();
    assert_eq!(all.len(), 3);
    drop(cl);
    assert_gone(&all);
    let solo_dir = dir.path().join("solo");
    std::fs::create_dir(&solo_dir).expect("mkdir");
    let solo = raft::standalone(&solo_dir, Path::new(SB_SCHEMA))?;
    assert!(solo.pid().is_some_and(alive));
    Ok(())
}
