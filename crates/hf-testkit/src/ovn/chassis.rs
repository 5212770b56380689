//! [`RealChassis`]: ovn-controller over ovs-vswitchd's dummy datapath.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Daemon, VSWITCH_SCHEMA, create_db, daemon_args, in_rundir};
use crate::cmd::{self, DEFAULT_TIMEOUT};
use crate::{KitError, Result};

/// Who a [`RealChassis`] is.
#[derive(Debug, Clone)]
pub struct ChassisOpts<'a> {
    /// `external_ids:system-id` (the chassis name); also `hostname=host-NAME`.
    pub name: &'a str,
    /// `external_ids:ovn-remote`: the SB remote.
    pub sb: &'a str,
    /// `external_ids:ovn-encap-ip` (Geneve).
    pub encap_ip: &'a str,
    /// Dummy interfaces on `br-int`, each with `external_ids:iface-id` = its own name.
    pub vifs: &'a [String],
}

/// A real chassis in `PARENT/chassis-NAME/`: its own `Open_vSwitch` database (`conf.db`,
/// served on `db.sock`), `ovs-vswitchd --enable-dummy=override` with `br-int` (secure fail
/// mode) and one dummy interface per VIF, and `ovn-controller`. Every OVS/OVN tool it runs
/// has its run directories there ([`in_rundir`]). Stopped on drop, controller first.
#[derive(Debug)]
pub struct RealChassis {
    dir: PathBuf,
    db: String,
    daemons: Vec<Daemon>,
}

impl Drop for RealChassis {
    fn drop(&mut self) {
        while let Some(d) = self.daemons.pop() {
            drop(d);
        }
    }
}

impl RealChassis {
    /// Everything but the controller: the database, `br-int` with the VIFs, ovs-vswitchd.
    pub fn prepare(parent: &Path, o: &ChassisOpts<'_>) -> Result<RealChassis> {
        let dir = parent.join(format!("chassis-{}", o.name));
        std::fs::create_dir_all(&dir)
            .map_err(|e| KitError::io(format!("creating {}", dir.display()), e))?;
        let conf = dir.join("conf.db");
        create_db(&conf, Path::new(VSWITCH_SCHEMA))?;
        let sock = dir.join("db.sock");
        let mut c = RealChassis {
            db: format!("unix:{}", sock.display()),
            dir: dir.clone(),
            daemons: Vec::new(),
        };
        let mut server = Command::new("ovsdb-server");
        in_rundir(&mut server, &dir)
            .arg(format!("--remote=punix:{}", sock.display()))
            .arg(&conf);
        c.daemons.push(Daemon::start(&dir, "ovsdb-server", server)?);
        c.vsctl(["init"])?;
        let mut cmds: Vec<String> = [
            "set",
            "open_vswitch",
            ".",
            &format!("external_ids:system-id={}", o.name),
            &format!("external_ids:hostname=host-{}", o.name),
            &format!("external_ids:ovn-remote={}", o.sb),
            "external_ids:ovn-encap-type=geneve",
            &format!("external_ids:ovn-encap-ip={}", o.encap_ip),
            "--",
            "add-br",
            "br-int",
            "--",
            "set",
            "bridge",
            "br-int",
            "fail-mode=secure",
            "other-config:disable-in-band=true",
        ]
        .map(String::from)
        .to_vec();
        for v in o.vifs {
            cmds.push("--".into());
            cmds.extend(RealChassis::iface_cmd(v));
        }
        c.vsctl(&cmds)?;
        let mut vswitchd = Command::new("ovs-vswitchd");
        in_rundir(&mut vswitchd, &dir)
            .arg("--enable-dummy=override")
            .arg(&c.db);
        c.daemons
            .push(Daemon::start(&dir, "ovs-vswitchd", vswitchd)?);
        Ok(c)
    }

    /// [`RealChassis::prepare`], then [`RealChassis::start_controller`].
    pub fn start(parent: &Path, o: &ChassisOpts<'_>) -> Result<RealChassis> {
        let mut c = RealChassis::prepare(parent, o)?;
        c.start_controller()?;
        Ok(c)
    }

    /// Start `ovn-controller` on the chassis's database.
    pub fn start_controller(&mut self) -> Result<()> {
        // ovn-controller 23.03 has no --unixctl: its control socket goes to OVN_RUNDIR (this
        // directory) as ovn-controller.<pid>.ctl.
        let mut args = daemon_args(&self.dir, "ovn-controller");
        args.retain(|a| !a.starts_with("--unixctl="));
        cmd::run(
            in_rundir(&mut Command::new("ovn-controller"), &self.dir)
                .args(args)
                .arg(&self.db),
            DEFAULT_TIMEOUT,
        )?;
        self.daemons
            .push(Daemon::adopt(&self.dir, "ovn-controller"));
        Ok(())
    }

    /// `add-port br-int V -- set interface V external_ids:iface-id=V`: one `ovs-vsctl`
    /// command (join several with `--`).
    pub fn iface_cmd(v: &str) -> Vec<String> {
        [
            "add-port",
            "br-int",
            v,
            "--",
            "set",
            "interface",
            v,
            &format!("external_ids:iface-id={v}"),
        ]
        .map(String::from)
        .to_vec()
    }

    /// `ovs-vsctl --db=DB --no-wait ARGS...`; its stdout.
    pub fn vsctl<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&self, args: I) -> Result<String> {
        cmd::run(
            in_rundir(&mut Command::new("ovs-vsctl"), &self.dir)
                .arg(format!("--db={}", self.db))
                .arg("--no-wait")
                .args(args),
            DEFAULT_TIMEOUT,
        )
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its `Open_vSwitch` database's remote (`unix:DIR/db.sock`).
    pub fn db(&self) -> &str {
        &self.db
    }

    /// The daemon named `name` (`ovsdb-server`, `ovs-vswitchd`, `ovn-controller`).
    pub fn daemon(&self, name: &str) -> Option<&Daemon> {
        self.daemons.iter().find(|d| d.name() == name)
    }

    /// ovn-controller's pid.
    pub fn controller_pid(&self) -> Result<i32> {
        self.daemon("ovn-controller")
            .and_then(Daemon::pid)
            .ok_or_else(|| {
                KitError::Invalid(format!(
                    "no ovn-controller running in {}",
                    self.dir.display()
                ))
            })
    }

    /// `ovn-appctl -t ovn-controller ARGS...`; its stdout.
    pub fn appctl(&self, args: &[&str]) -> Result<String> {
        let ctl = self
            .dir
            .join(format!("ovn-controller.{}.ctl", self.controller_pid()?));
        cmd::run(
            in_rundir(&mut Command::new("ovn-appctl"), &self.dir)
                .arg("-t")
                .arg(ctl)
                .args(args),
            DEFAULT_TIMEOUT,
        )
    }

    /// ovn-controller's log so far.
    pub fn controller_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("ovn-controller.log")).unwrap_or_default()
    }

    /// How many OpenFlow flows `br-int` holds (`ovs-ofctl dump-aggregate`).
    pub fn openflow_flows(&self) -> Result<usize> {
        let out = cmd::run(
            in_rundir(&mut Command::new("ovs-ofctl"), &self.dir)
                .arg("dump-aggregate")
                .arg(format!("unix:{}", self.dir.join("br-int.mgmt").display())),
            DEFAULT_TIMEOUT,
        )?;
        out.split("flow_count=")
            .nth(1)
            .and_then(|n| n.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| KitError::Parse {
                what: "ovs-ofctl dump-aggregate".into(),
                detail: out.clone(),
            })
    }
}
