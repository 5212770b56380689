//! The changes a cluster makes besides a port add, measured on a chassis from the outside after
//! its port adds, the same way for ovn-controller and for the holdfast daemons: a port delete
//! (median over the added ports), an ACL added to a port group of up to [`PG_PORTS`] ports
//! spread over every switch (median of [`ACLS`]), and [`BULK`] ports added, then deleted, in one
//! NB transaction (once each).
//!
//! Each is timed from the SB server holding northd's result (`SB_Global.nb_cfg` reaching the
//! `nb_cfg` of the change, which northd writes with it) until the chassis reports that `nb_cfg`
//! in `Chassis_Private` (ovn-controller once the OpenFlow flows are in ovs-vswitchd; holdfast once
//! the datapath answered `Installed`). northd's own time is not counted. Setting up the port group
//! and removing it again are not timed.
// A benchmark is an I/O shell: it reads the clock and starts processes.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::chassis::{Measured, Poller, SbState};
use super::{ADDS, CHASSIS, Central, batch, finish_child, median, ms, new_port, sv};
use crate::Report;

/// Ports added (and deleted) in one transaction.
pub(super) const BULK: usize = 100;
/// Ports in the port group the ACLs are added to (fewer when the topology has fewer).
pub(super) const PG_PORTS: usize = 500;
/// ACLs added, one at a time (the median is reported).
const ACLS: usize = 3;

/// The figures, in ms.
#[derive(Debug, Clone, Copy)]
pub(super) struct Changes {
    /// `lsp-del` of one port of the chassis (median over the [`ADDS`] added ports).
    pub(super) port_delete_ms: f64,
    /// `acl-add` on the port group (median of [`ACLS`]).
    pub(super) acl_pg_ms: f64,
    /// [`BULK`] ports of the chassis added in one transaction.
    pub(super) bulk_add_ms: f64,
    /// ... and deleted in one transaction.
    pub(super) bulk_delete_ms: f64,
}

impl Changes {
    /// The lines, as `(name without the size tag, value)`.
    pub(super) fn lines(&self, pg: usize) -> [(String, f64); 4] {
        [
            ("port_delete".to_string(), self.port_delete_ms),
            (format!("acl_add_pg{pg}"), self.acl_pg_ms),
            (format!("port_add_{BULK}_one_txn"), self.bulk_add_ms),
            (format!("port_delete_{BULK}_one_txn"), self.bulk_delete_ms),
        ]
    }
}

/// The [`BULK`] ports of `side` (see [`new_port`]): names, spread round-robin over the
/// chassis's switches (`ls0`, `ls10`, ...), with their `lsp-add` commands.
pub(super) fn bulk_ports(side: u8, n: usize) -> Vec<(String, Vec<String>)> {
    let switches: Vec<usize> = (0..n).step_by(10).collect();
    (0..BULK)
        .map(|k| {
            let name = format!("bulk-{side}-{k}");
            let ls = format!("ls{}", switches[k % switches.len()]);
            let addr = format!(
                "0a:fd:{side:02x}:00:{:02x}:{:02x} 10.253.{side}.{}",
                k / 256,
                k % 256,
                k + 1
            );
            let cmds = vec![
                sv(&["lsp-add", &ls, &name]),
                sv(&["lsp-set-addresses", &name, &addr]),
                sv(&[
                    "lsp-set-options",
                    &name,
                    &format!("requested-chassis={CHASSIS}"),
                ]),
            ];
            (name, batch(cmds))
        })
        .collect()
}

/// The port group's members: gen_topo's VIFs taken switch by switch (`ls0-p0`, `ls1-p0`, ...,
/// then `ls0-p1`, ...), so that [`PG_PORTS`] ports at 500×40 are one on every switch.
pub(super) fn pg_members(n: usize, p: usize) -> Vec<String> {
    (0..p)
        .flat_map(|j| (0..n).map(move |i| format!("ls{i}-p{j}")))
        .take(PG_PORTS)
        .collect()
}

/// Measures the changes on `ch` (which ran its [`ADDS`] port adds of `side` already).
#[allow(clippy::too_many_arguments)]
pub(super) fn measure(
    report: &Report,
    central: &Central,
    ch: &mut dyn Measured,
    poll: &mut Poller,
    label: &str,
    side: u8,
    (n, p): (usize, usize),
    timeout: Duration,
) -> anyhow::Result<Changes> {
    let bulk = bulk_ports(side, n);
    let names: Vec<String> = bulk.iter().map(|(nm, _)| nm.clone()).collect();
    ch.prepare_ports(&names)?;
    std::thread::sleep(Duration::from_millis(300));
    let ch: &dyn Measured = ch;
    let run = |poll: &mut Poller, what: &str, cmds: &[String]| -> anyhow::Result<f64> {
        timed(central, poll, ch, label, what, cmds, timeout)
    };

    let mut deletes = Vec::new();
    for k in 0..ADDS {
        let (name, _) = new_port(side, k);
        deletes.push(run(
            poll,
            &format!("lsp-del {name}"),
            &sv(&["lsp-del", &name]),
        )?);
    }

    let members = pg_members(n, p);
    let pg = format!("pg_bench{side}");
    let mut create = vec!["pg-add".to_string(), pg.clone()];
    create.extend(members.iter().cloned());
    // Untimed, but waited for: the chassis holds the group before the ACLs come.
    run(poll, &format!("pg-add {pg}"), &create)?;
    // The stage stopwatches over the ACLs alone (reset before them).
    let _ = ch.stopwatch(true);
    let mut acls = Vec::new();
    for k in 0..ACLS {
        let m = format!("outport == @{pg} && ip4 && tcp.dst == {}", 8000 + k);
        acls.push(run(
            poll,
            &format!("acl-add {pg} #{k}"),
            &sv(&["acl-add", &pg, "to-lport", "1001", &m, "allow-related"]),
        )?);
    }
    if let Some(sw) = ch.stopwatch(false) {
        report.note(&format!("{label} over the {ACLS} ACLs on {pg}:\n{sw}"));
    }
    run(poll, &format!("pg-del {pg}"), &sv(&["pg-del", &pg]))?;

    let add: Vec<Vec<String>> = bulk.iter().map(|(_, c)| c.clone()).collect();
    let bulk_add_ms = run(poll, &format!("{BULK} lsp-add"), &batch(add))?;
    let del = batch(names.iter().map(|nm| sv(&["lsp-del", nm])));
    let bulk_delete_ms = run(poll, &format!("{BULK} lsp-del"), &del)?;

    let c = Changes {
        port_delete_ms: median(deletes),
        acl_pg_ms: median(acls),
        bulk_add_ms,
        bulk_delete_ms,
    };
    report.note(&format!(
        "{label} changes, from SB to the chassis's nb_cfg: port delete {:.1} ms (median of {ADDS}), \
         ACL on a {}-port group {:.1} ms (median of {ACLS}), {BULK} ports in one txn: add {:.1} ms, delete {:.1} ms",
        c.port_delete_ms,
        members.len(),
        c.acl_pg_ms,
        c.bulk_add_ms,
        c.bulk_delete_ms
    ));
    Ok(c)
}

/// Runs `ovn-nbctl --wait=sb CMDS` and times it from SB holding the result to the chassis
/// reporting it (see the module doc).
fn timed(
    central: &Central,
    poll: &mut Poller,
    ch: &dyn Measured,
    label: &str,
    what: &str,
    cmds: &[String],
    timeout: Duration,
) -> anyhow::Result<f64> {
    let mut child = central.nbctl_child(Some("sb"), cmds)?;
    let mut polls: Vec<(Instant, SbState)> = Vec::new();
    let mut target = None;
    let deadline = Instant::now() + timeout;
    loop {
        let st = poll.state("")?;
        let now = Instant::now();
        polls.push((now, st));
        // Once ovn-nbctl --wait=sb returned, SB_Global.nb_cfg is the change's.
        if target.is_none() && child.try_wait()?.is_some() {
            target = Some(poll.state("")?.sb_cfg);
        }
        if let Some(tg) = target
            && st.chassis_cfg.is_some_and(|c| c >= tg)
        {
            break;
        }
        if now > deadline {
            let _ = child.kill();
            bail!(
                "{label}: timed out after {timeout:?} waiting for {what}; log tail:\n{}",
                ch.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    finish_child(child, what)?;
    let tg = target.context("target")?;
    let first = |f: &dyn Fn(&SbState) -> bool| polls.iter().find(|(_, s)| f(s)).map(|(t, _)| *t);
    let at_server = first(&|s| s.sb_cfg >= tg).context("SB_Global.nb_cfg never reached")?;
    let cfg_at = first(&|s| s.chassis_cfg.is_some_and(|c| c >= tg))
        .context("the chassis's nb_cfg never reached")?;
    Ok(ms(cfg_at.saturating_duration_since(at_server)))
}
