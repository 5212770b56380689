//! Real ovn-northd on holdfast db (NB and SB), with changes to optional columns in the workload:
//! `Logical_Switch_Port.enabled` false → true → empty → false and `tag_request` on a child port.
//! northd's C IDL decodes every update2 diff; had holdfast sent a set difference for a one-value
//! column (the bug issue 8 fixed), northd would see the stale value and these assertions about
//! its SB output would fail.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{HoldfastDb, nb_schema, require, run_ok, sb_schema};

/// A detached real ovn-northd, stopped by its pidfile on drop.
struct Northd(std::path::PathBuf);

impl Drop for Northd {
    fn drop(&mut self) {
        if let Ok(p) = std::fs::read_to_string(&self.0)
            && let Ok(pid) = p.trim().parse::<i32>()
        {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}

/// Whether SB lets `port` in: northd 23.03 writes a flow in `ls_in_check_port_sec` that matches
/// `inport == "PORT"` only for a disabled port (`enabled` false), to drop what it sends.
fn admits(sb: &str, port: &str) -> bool {
    let out = run_ok(Command::new("ovn-sbctl").args([
        sb,
        "--columns=match",
        "find",
        "Logical_Flow",
        "external_ids:stage-name=ls_in_check_port_sec",
    ]));
    !out.contains(&format!("inport == \\\"{port}\\\""))
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn real_northd_follows_optional_column_changes() {
    if !require(
        "real_northd_follows_optional_column_changes",
        &["ovn-northd", "ovn-nbctl", "ovn-sbctl"],
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let nbdir = dir.join("nb");
    let sbdir = dir.join("sb");
    std::fs::create_dir_all(&nbdir).unwrap();
    std::fs::create_dir_all(&sbdir).unwrap();
    let nbdb = HoldfastDb::start(&nbdir, &[("nb.db", &nb_schema())], &[]);
    let sbdb = HoldfastDb::start(&sbdir, &[("sb.db", &sb_schema())], &[]);
    let pidfile = dir.join("northd.pid");
    run_ok(Command::new("ovn-northd").args([
        format!("--ovnnb-db={}", nbdb.unix),
        format!("--ovnsb-db={}", sbdb.unix),
        "--detach".into(),
        "--no-chdir".into(),
        format!("--pidfile={}", pidfile.display()),
        format!("--log-file={}", dir.join("northd.log").display()),
        format!("--unixctl={}", dir.join("northd.ctl").display()),
    ]));
    let _northd = Northd(pidfile);
    let nb = format!("--db={}", nbdb.unix);
    let sb = format!("--db={}", sbdb.unix);
    let nbctl = |args: &[&str]| {
        let mut a = vec![nb.as_str(), "--timeout=30", "--wait=sb"];
        a.extend_from_slice(args);
        run_ok(Command::new("ovn-nbctl").args(&a))
    };

    nbctl(&["ls-add", "sw0"]);
    nbctl(&["lsp-add", "sw0", "p1"]);
    nbctl(&["lsp-add", "sw0", "parent"]);
    wait_for("p1 admitted (enabled empty)", || admits(&sb, "p1"));

    // enabled: false → true → empty → false, each seen by northd.
    nbctl(&["lsp-set-enabled", "p1", "disabled"]);
    wait_for("p1 refused (enabled=false)", || !admits(&sb, "p1"));
    nbctl(&["lsp-set-enabled", "p1", "enabled"]);
    wait_for("p1 admitted (enabled=true)", || admits(&sb, "p1"));
    nbctl(&["clear", "Logical_Switch_Port", "p1", "enabled"]);
    nbctl(&["lsp-set-enabled", "p1", "disabled"]);
    wait_for("p1 refused again", || !admits(&sb, "p1"));
    assert_eq!(
        run_ok(Command::new("ovn-nbctl").args([
            nb.as_str(),
            "get",
            "Logical_Switch_Port",
            "p1",
            "enabled"
        ]))
        .trim(),
        "false"
    );

    // tag_request on a child port: northd copies the requested tag into NB `tag` and SB
    // Port_Binding.tag; changing the request before a tag is assigned is seen as the new value.
    nbctl(&["lsp-add", "sw0", "child", "parent", "5"]);
    let tag = |db: &str, table: &str, port_col: &str| {
        run_ok(
            Command::new(if table == "Port_Binding" {
                "ovn-sbctl"
            } else {
                "ovn-nbctl"
            })
            .args([
                db,
                "--bare",
                "--columns=tag",
                "find",
                table,
                &format!("{port_col}=child"),
            ]),
        )
        .trim()
        .to_string()
    };
    wait_for("NB tag 5", || {
        tag(&nb, "Logical_Switch_Port", "name") == "5"
    });
    wait_for("SB tag 5", || {
        tag(&sb, "Port_Binding", "logical_port") == "5"
    });
    // Clearing the request and the tag, then asking for another tag: the optional column goes
    // 5 → empty → 7 and northd must assign 7 (a stale 5 would be kept).
    nbctl(&["clear", "Logical_Switch_Port", "child", "tag_request"]);
    nbctl(&["clear", "Logical_Switch_Port", "child", "tag"]);
    nbctl(&["set", "Logical_Switch_Port", "child", "tag_request=7"]);
    wait_for("NB tag 7", || {
        tag(&nb, "Logical_Switch_Port", "name") == "7"
    });
    wait_for("SB tag 7", || {
        tag(&sb, "Port_Binding", "logical_port") == "7"
    });
}
