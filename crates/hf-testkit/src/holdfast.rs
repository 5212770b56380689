//! holdfast itself on real interfaces: the central databases and northd ([`Central`]) and
//! chassis namespaces with their local OVS database and daemons ([`Chassis`]), set up as an
//! operator or a CNI would (real `ovn-nbctl` and `ovs-vsctl`), for benchmarks and tests that
//! need a working holdfast network rather than one of its parts.
//!
//! The caller names the `holdfast` binary (a test has `CARGO_BIN_EXE_holdfast`, a benchmark the
//! one built beside it). Every process is spawned in a namespace of the caller's [`Lab`], so the
//! lab stops it; every file lives in the lab's directory.
//!
//! What a chassis is: a namespace with a local database made from OVS's own
//! `vswitch.ovsschema`, served by `holdfast db`, configured with `ovs-vsctl` (system-id,
//! ovn-remote, ovn-encap-type/ip, `br-int`), and `holdfast datapath` + `holdfast controller`
//! given only that database (plus the control socket and their files). A VM's interface is
//! plugged with `ovs-vsctl add-port br-int TAP -- set Interface TAP external_ids:iface-id=PORT`
//! ([`Chassis::plug`]); [`Chassis::wait_installed`] waits for `ovn-installed="true"`, as
//! OVN-Kubernetes' CNI does.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cmd::{self, DEFAULT_TIMEOUT};
use crate::{KitError, Lab, Netns, Proc, Result};

/// OVS's schema for a chassis's local database.
pub const VSWITCH_SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";

/// How long a daemon's socket may take to appear.
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| KitError::Invalid(format!("path {} is not UTF-8", p.display())))
}

fn wait_path(p: &Path) -> Result<()> {
    cmd::wait_until(
        START_TIMEOUT,
        || format!("{} to appear", p.display()),
        || p.exists(),
    )
}

/// The central databases (NB and SB in one `holdfast db`) and `holdfast northd`, on unix
/// sockets in the lab's directory (every namespace reaches them).
#[derive(Debug)]
pub struct Central {
    /// The NB's remote (`unix:PATH`).
    pub nb: String,
    /// The SB's remote (the same server).
    pub sb: String,
    db: Proc,
    northd: Proc,
}

impl Central {
    /// Start `holdfast db` and `holdfast northd` in `ns`.
    pub fn start(lab: &Lab, ns: &Netns, holdfast: &Path) -> Result<Central> {
        let bin = path_str(holdfast)?;
        let dir = lab.dir();
        let sock = dir.join("ovnsb.sock");
        let data = dir.join("central");
        let db_ctl = dir.join("central-db.ctl");
        let db = ns.spawn(
            "central-db",
            &[
                bin,
                "db",
                "--data-dir",
                path_str(&data)?,
                "--remote",
                &format!("punix:{}", sock.display()),
                "--unixctl",
                path_str(&db_ctl)?,
            ],
        )?;
        wait_path(&sock)?;
        let remote = format!("unix:{}", sock.display());
        let northd_ctl = dir.join("northd.ctl");
        let northd = ns.spawn(
            "northd",
            &[
                bin,
                "northd",
                &format!("--ovnnb-db={remote}"),
                &format!("--ovnsb-db={remote}"),
                "--unixctl",
                path_str(&northd_ctl)?,
            ],
        )?;
        Ok(Central {
            nb: remote.clone(),
            sb: remote,
            db,
            northd,
        })
    }

    /// `ovn-nbctl --db=NB ARGS...`; its stdout.
    pub fn nbctl(&self, args: &[&str]) -> Result<String> {
        cmd::run(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .arg("--timeout=30")
                .args(args),
            DEFAULT_TIMEOUT,
        )
    }

    /// `ovn-nbctl` with `cmds` in one transaction (joined with `--`), as a CMS writes its
    /// state at once.
    pub fn nbctl_all(&self, cmds: &[&[&str]]) -> Result<String> {
        let mut args = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            if i > 0 {
                args.push("--");
            }
            args.extend_from_slice(c);
        }
        self.nbctl(&args)
    }

    /// Incident D's rebuild: northd and the databases stop, their files are deleted, and both
    /// start again empty (the CMS then writes the same names, with new UUIDs).
    pub fn rebuild(&mut self, lab: &Lab, ns: &Netns, holdfast: &Path) -> Result<()> {
        self.northd.stop();
        self.db.stop();
        let data = lab.dir().join("central");
        std::fs::remove_dir_all(&data)
            .map_err(|e| KitError::io(format!("removing {}", data.display()), e))?;
        let _ = std::fs::remove_file(lab.dir().join("ovnsb.sock"));
        *self = Central::start(lab, ns, holdfast)?;
        Ok(())
    }

    /// The central processes (`holdfast db`, `holdfast northd`).
    pub fn procs(&self) -> [&Proc; 2] {
        [&self.db, &self.northd]
    }
}

/// One chassis: its namespace, local database and daemons.
#[derive(Debug)]
pub struct Chassis {
    name: String,
    ns: Netns,
    holdfast: PathBuf,
    /// The local database's remote (`unix:PATH`).
    conf: String,
    dir: PathBuf,
    db: Proc,
    datapath: Option<Proc>,
    controller: Option<Proc>,
    /// Datapath processes started (each gets its own process name).
    restarts: u32,
}

impl Chassis {
    /// Start chassis `name` in `ns`: its local database (system-id `name`, ovn-remote `sb`,
    /// Geneve from `encap_ip`, which must be an address of `ns`), `br-int`, then `holdfast
    /// datapath` and `holdfast controller`.
    pub fn start(
        lab: &Lab,
        ns: &Netns,
        holdfast: &Path,
        name: &str,
        encap_ip: &str,
        sb: &str,
    ) -> Result<Chassis> {
        let bin = path_str(holdfast)?;
        let dir = lab.dir().join(name);
        std::fs::create_dir_all(&dir)
            .map_err(|e| KitError::io(format!("creating {}", dir.display()), e))?;
        let file = dir.join("conf.db");
        cmd::run(
            Command::new(holdfast)
                .args(["db", "create"])
                .arg(&file)
                .arg(VSWITCH_SCHEMA),
            DEFAULT_TIMEOUT,
        )?;
        let sock = dir.join("db.sock");
        let ctl = dir.join("db.ctl");
        let db = ns.spawn(
            &format!("{name}-db"),
            &[
                bin,
                "db",
                "--remote",
                &format!("punix:{}", sock.display()),
                "--unixctl",
                path_str(&ctl)?,
                path_str(&file)?,
            ],
        )?;
        wait_path(&sock)?;
        let mut c = Chassis {
            name: name.to_string(),
            ns: ns.clone(),
            holdfast: holdfast.to_path_buf(),
            conf: format!("unix:{}", sock.display()),
            dir,
            db,
            datapath: None,
            controller: None,
            restarts: 0,
        };
        // No datapath runs yet: nothing would follow next_cfg.
        c.vsctl(&["--no-wait", "init"])?;
        c.vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            &format!("external_ids:system-id={name}"),
            &format!("external_ids:ovn-remote={sb}"),
            "external_ids:ovn-encap-type=geneve",
            &format!("external_ids:ovn-encap-ip={encap_ip}"),
        ])?;
        c.vsctl(&["--no-wait", "add-br", "br-int"])?;
        c.start_datapath()?;
        c.start_controller()?;
        Ok(c)
    }

    /// The chassis's name (its system-id).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its namespace.
    pub fn ns(&self) -> &Netns {
        &self.ns
    }

    /// Its local database's remote (`unix:PATH`).
    pub fn conf(&self) -> &str {
        &self.conf
    }

    /// `ovs-vsctl --db=LOCAL ARGS...`; its stdout.
    pub fn vsctl(&self, args: &[&str]) -> Result<String> {
        cmd::run(
            Command::new("ovs-vsctl")
                .arg(format!("--db={}", self.conf))
                .arg("--timeout=30")
                .args(args),
            DEFAULT_TIMEOUT,
        )
    }

    fn file(&self, f: &str) -> String {
        self.dir.join(f).display().to_string()
    }

    fn start_datapath(&mut self) -> Result<()> {
        self.spawn_datapath(&[])
    }

    fn spawn_datapath(&mut self, extra: &[&str]) -> Result<()> {
        let mut args = vec![
            self.holdfast.display().to_string(),
            "datapath".into(),
            self.conf.clone(),
            format!("--control=punix:{}", self.file("dp.sock")),
            format!("--zones-file={}", self.file("zones.json")),
            format!("--unixctl={}", self.file("dp.ctl")),
            format!("--log-file={}", self.file("dp.log")),
            // Live migration's state channel, on the encap IP (peers dial the same port).
            "--state-listen=ptcp:6690".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        self.restarts += 1;
        let name = format!("{}-datapath{}", self.name, self.restarts);
        self.datapath = Some(self.ns.spawn(&name, &argv)?);
        wait_path(&self.dir.join("dp.sock"))
    }

    /// A hitless datapath restart: a new `holdfast datapath --takeover` takes the running
    /// one's place; returns the old process (it exits once it handed over).
    pub fn take_over_datapath(&mut self) -> Result<Option<Proc>> {
        let old = self.datapath.take();
        self.spawn_datapath(&["--takeover"])?;
        Ok(old)
    }

    /// Stops the controller and starts it again.
    pub fn restart_controller(&mut self) -> Result<()> {
        if let Some(mut p) = self.controller.take() {
            p.stop();
        }
        self.start_controller()
    }

    /// The chassis's directory (its local database, logs and sockets: `dp.ctl`, `ctl.ctl`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn start_controller(&mut self) -> Result<()> {
        let args = [
            self.holdfast.display().to_string(),
            "controller".into(),
            self.conf.clone(),
            format!("--datapath=unix:{}", self.file("dp.sock")),
            format!("--unixctl={}", self.file("ctl.ctl")),
            format!("--log-file={}", self.file("ctl.log")),
        ];
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        self.controller = Some(self.ns.spawn(&format!("{}-controller", self.name), &argv)?);
        Ok(())
    }

    /// `ovs-vsctl add-port br-int TAP -- set Interface TAP external_ids:iface-id=PORT`, as
    /// OVN-Kubernetes' CNI and os-vif plug an interface.
    pub fn plug(&self, tap: &str, port: &str) -> Result<()> {
        self.vsctl(&[
            "add-port",
            "br-int",
            tap,
            "--",
            "set",
            "Interface",
            tap,
            &format!("external_ids:iface-id={port}"),
        ])
        .map(drop)
    }

    /// Wait until the controller marked `tap` `ovn-installed="true"` (its flows run).
    pub fn wait_installed(&self, tap: &str, timeout: Duration) -> Result<()> {
        cmd::wait_until(
            timeout,
            || {
                format!(
                    "Interface {tap} external_ids:ovn-installed on {}",
                    self.name
                )
            },
            || {
                self.vsctl(&["get", "Interface", tap, "external_ids"])
                    .is_ok_and(|s| s.contains("ovn-installed=\"true\""))
            },
        )
    }

    /// The `holdfast datapath` process (for its pid: a profiler attaches to it).
    pub fn datapath(&self) -> Option<&Proc> {
        self.datapath.as_ref()
    }

    /// The `holdfast controller` process.
    pub fn controller(&self) -> Option<&Proc> {
        self.controller.as_ref()
    }

    /// The local `holdfast db` process.
    pub fn db(&self) -> &Proc {
        &self.db
    }

    /// The datapath's and the controller's log files, each under a header line.
    pub fn logs(&self) -> String {
        ["dp.log", "ctl.log"]
            .iter()
            .map(|f| {
                format!(
                    "--- {} {f}\n{}",
                    self.name,
                    std::fs::read_to_string(self.dir.join(f)).unwrap_or_default()
                )
            })
            .collect()
    }
}

/// A network with a gateway, built on [`Central`] and [`Chassis`]: chassis `hv1`, `hv2` and the
/// gateway chassis `gw1` on one underlay bridge (`192.168.100.1..3`, Geneve between them);
/// switch `ls1` (`10.0.1.0/24`) behind router `lr0`, whose gateway port `lr0-ext`
/// (`172.16.0.1/24`) is on `gw1` with the router's SNAT to `172.16.0.100` for `10.0.0.0/16`; the
/// provider network `physnet1` (switch `ext`, localnet port `ln-ext`, the router port with
/// `nat-addresses=router`) reaches the external namespace `ext` (`172.16.0.10/24`), plugged on
/// `gw1` as the localnet port (holdfast's datapath attaches a provider network so). VMs are
/// added with [`GatewayNet::vm`].
#[derive(Debug)]
pub struct GatewayNet {
    /// The central databases and northd.
    pub central: Central,
    /// `hv1`, `hv2`, `gw1`.
    pub chassis: Vec<Chassis>,
    /// The external namespace.
    pub ext: Netns,
}

/// The VMs' MTU under Geneve over a 1500-byte underlay.
pub const VM_MTU: u32 = 1400;

impl GatewayNet {
    /// Builds it (the NB in one transaction, as a CMS writes its state).
    pub fn build(lab: &Lab, holdfast: &Path) -> Result<GatewayNet> {
        let cns = lab.netns("central")?;
        let central = Central::start(lab, &cns, holdfast)?;
        let cmds: &[&[&str]] = &[
            &["ls-add", "ls1"],
            &["ls-add", "ext"],
            &["lr-add", "lr0"],
            &[
                "lrp-add",
                "lr0",
                "lr0-ls1",
                "02:00:00:00:01:01",
                "10.0.1.1/24",
            ],
            &[
                "lrp-add",
                "lr0",
                "lr0-ext",
                "02:00:00:00:ee:01",
                "172.16.0.1/24",
            ],
            &["lrp-set-gateway-chassis", "lr0-ext", "gw1"],
            &["lsp-add", "ls1", "ls1-lr0"],
            &["lsp-set-type", "ls1-lr0", "router"],
            &["lsp-set-addresses", "ls1-lr0", "router"],
            &["lsp-set-options", "ls1-lr0", "router-port=lr0-ls1"],
            &["lsp-add", "ext", "ext-lr0"],
            &["lsp-set-type", "ext-lr0", "router"],
            &["lsp-set-addresses", "ext-lr0", "router"],
            &[
                "lsp-set-options",
                "ext-lr0",
                "router-port=lr0-ext",
                "nat-addresses=router",
            ],
            &["lsp-add", "ext", "ln-ext"],
            &["lsp-set-type", "ln-ext", "localnet"],
            &["lsp-set-addresses", "ln-ext", "unknown"],
            &["lsp-set-options", "ln-ext", "network_name=physnet1"],
            &["lr-nat-add", "lr0", "snat", "172.16.0.100", "10.0.0.0/16"],
        ];
        central.nbctl_all(cmds)?;
        let ul = lab.netns("underlay")?;
        ul.ip(&["link", "add", "br0", "type", "bridge"])?;
        ul.link_up("br0")?;
        let mut chassis = Vec::new();
        for (i, name) in ["hv1", "hv2", "gw1"].iter().enumerate() {
            let ns = lab.netns(name)?;
            lab.veth((&ns, "underlay"), (&ul, name))?;
            ul.ip(&["link", "set", name, "master", "br0"])?;
            let ip = format!("192.168.100.{}", i + 1);
            ns.addr_add("underlay", &format!("{ip}/24"))?;
            chassis.push(Chassis::start(lab, &ns, holdfast, name, &ip, &central.sb)?);
        }
        let ext = lab.netns("ext")?;
        lab.veth((&ext, "eth0"), (chassis[2].ns(), "physnet"))?;
        ext.addr_add("eth0", "172.16.0.10/24")?;
        chassis[2].plug("physnet", "ln-ext")?;
        Ok(GatewayNet {
            central,
            chassis,
            ext,
        })
    }

    /// VM `name` on `ls1` with `mac` and `ip` (`10.0.1.X`): its logical port, its namespace on
    /// chassis `on` (0: hv1, 1: hv2) behind tap `tap`, plugged, and installed.
    pub fn vm(
        &self,
        lab: &Lab,
        name: &str,
        on: usize,
        tap: &str,
        mac: &str,
        ip: &str,
    ) -> Result<Netns> {
        self.central.nbctl_all(&[
            &["lsp-add", "ls1", name],
            &["lsp-set-addresses", name, &format!("{mac} {ip}")],
        ])?;
        let c = self
            .chassis
            .get(on)
            .ok_or_else(|| KitError::Invalid(format!("no chassis {on}")))?;
        let vm = lab.vm(
            name,
            c.ns(),
            tap,
            &crate::VmIface {
                mac: Some(mac.into()),
                addrs: vec![format!("{ip}/24")],
                gateway: Some("10.0.1.1".into()),
                mtu: Some(VM_MTU),
                ..crate::VmIface::default()
            },
        )?;
        c.plug(tap, name)?;
        c.wait_installed(tap, Duration::from_secs(60))?;
        Ok(vm)
    }

    /// The daemons' logs of every chassis.
    pub fn logs(&self) -> String {
        self.chassis.iter().map(Chassis::logs).collect()
    }
}
