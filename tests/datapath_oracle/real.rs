//! The real side: real `ovsdb-server`s and `ovn-northd` ([`Central`]), and ONE real chassis
//! ([`RealChassis`]: `ovs-vswitchd --enable-dummy=override` under real `ovn-controller`) with
//! every VIF a dummy interface on `br-int` and the provider network a dummy interface `phys0`
//! on `br-phys` (`ovn-bridge-mappings=phys:br-phys`). Every dummy interface writes what it
//! transmits to `IFACE.pcap` (`options:tx_pcap`). Packets enter with `netdev-dummy/receive`,
//! sent over one connection to ovs-vswitchd's unixctl socket (JSON-RPC, as `ovs-appctl` does).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hf_model::SbSnapshot;
use hf_testkit::ovn::{Central, ChassisOpts, RealChassis};

use crate::wire::is_garp;

/// The chassis name: the generator's gateway chassis, so `options:chassis=gw1` and the
/// gateway chassis of the distributed router's port name this chassis.
pub const CHASSIS: &str = "gw1";
/// Its encap IP (no tunnels are used: there is one chassis).
pub const ENCAP_IP: &str = "127.0.0.11";
/// The dummy interface on the provider bridge that the localnet port reaches.
pub const PHYS_IFACE: &str = "phys0";

/// How long a packet's outputs may take to come out when fewer than holdfast's have (pinctrl's
/// packet-ins go through ovn-controller: seconds on a loaded 2-core machine; one run of 4 had
/// a difference that did not come back, suspected to be such a late packet-in). Only a real
/// difference waits this long.
const PINCTRL_DEADLINE: Duration = Duration::from_secs(15);

pub struct RealSide {
    /// Dropped first: ovn-controller and ovs-vswitchd stop before the databases.
    pub chassis: RealChassis,
    pub central: Central,
    /// Interface name → (pcap path, bytes consumed).
    pcaps: BTreeMap<String, (PathBuf, u64)>,
    ctl: UnixStream,
    next_id: u64,
}

impl RealSide {
    /// Start everything, write the NB (`nb` commands in one `ovn-nbctl` run), and wait until
    /// the chassis has claimed `vifs` and installed the flows of the current NB
    /// (`--wait=hv sync`). The SB as ovn-controller left it is returned.
    pub fn start(
        nb: &[Vec<String>],
        vifs: &[String],
        expect_bound: &[String],
    ) -> (RealSide, SbSnapshot) {
        let central = Central::start().expect("central");
        let mut args: Vec<String> = vec!["--timeout=60".into()];
        for (i, c) in nb.iter().enumerate() {
            if i > 0 {
                args.push("--".into());
            }
            args.extend(c.iter().cloned());
        }
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        central.nbctl(&a).expect("ovn-nbctl batch");
        central.sync().expect("--wait=sb sync");
        let sb = central.sb.clone();
        let mut chassis = RealChassis::prepare(
            &central.path("."),
            &ChassisOpts {
                name: CHASSIS,
                sb: &sb,
                encap_ip: ENCAP_IP,
                vifs,
            },
        )
        .expect("real chassis");
        let dir = chassis.dir().to_path_buf();
        let mut cmds: Vec<String> = vec![
            "set".into(),
            "open_vswitch".into(),
            ".".into(),
            "external_ids:ovn-bridge-mappings=phys:br-phys".into(),
            "--".into(),
            "add-br".into(),
            "br-phys".into(),
            "--".into(),
            "add-port".into(),
            "br-phys".into(),
            PHYS_IFACE.into(),
        ];
        let mut pcaps = BTreeMap::new();
        for v in vifs.iter().map(String::as_str).chain([PHYS_IFACE]) {
            let p = dir.join(format!("{v}.pcap"));
            cmds.extend([
                "--".into(),
                "set".into(),
                "interface".into(),
                v.into(),
                format!("options:tx_pcap={}", p.display()),
            ]);
            pcaps.insert(v.to_string(), (p, 24u64));
        }
        chassis.vsctl(&cmds).expect("ovs-vsctl");
        chassis.start_controller().expect("ovn-controller");
        let t0 = Instant::now();
        let snap = loop {
            central
                .nbctl(&["--timeout=60", "--wait=hv", "sync"])
                .expect("--wait=hv sync");
            let snap = crate::tp_flows::load_sb(&sb);
            let unbound: Vec<&String> = expect_bound
                .iter()
                .filter(|p| {
                    !snap
                        .port_binding()
                        .values()
                        .any(|b| &b.logical_port == *p && b.chassis.is_some())
                })
                .collect();
            if unbound.is_empty() {
                break snap;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "ports never claimed by {CHASSIS}: {unbound:?}\n{}",
                chassis.controller_log()
            );
            std::thread::sleep(Duration::from_millis(200));
        };
        let ctl_path = chassis.daemon("ovs-vswitchd").expect("ovs-vswitchd").ctl();
        let ctl = UnixStream::connect(&ctl_path).expect("ovs-vswitchd unixctl");
        ctl.set_read_timeout(Some(Duration::from_secs(10))).ok();
        (
            RealSide {
                chassis,
                central,
                pcaps,
                ctl,
                next_id: 1,
            },
            snap,
        )
    }

    /// `None` while ovs-vswitchd runs; else its emergency log lines (an assertion).
    pub fn aborted(&self) -> Option<String> {
        let d = self.chassis.daemon("ovs-vswitchd")?;
        if d.is_running() {
            return None;
        }
        let emer: Vec<String> = d
            .log()
            .lines()
            .filter(|l| l.contains("|EMER|") || l.contains("|ERR|"))
            .map(String::from)
            .collect();
        Some(format!("ovs-vswitchd is gone: {}", emer.join("\n")))
    }

    /// `netdev-dummy/receive IFACE HEX`.
    pub fn inject(&mut self, iface: &str, frame: &[u8]) {
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        if let Some(Err(e)) = self.vswitchd_appctl("netdev-dummy/receive", &[iface, &hex]) {
            panic!("netdev-dummy/receive {iface}: {e}");
        }
    }

    /// An `ovs-appctl` command to ovs-vswitchd over the open connection: `None` when
    /// ovs-vswitchd is gone ([`RealSide::aborted`] says why), else its reply or error.
    pub fn vswitchd_appctl(
        &mut self,
        method: &str,
        params: &[&str],
    ) -> Option<Result<serde_json::Value, serde_json::Value>> {
        let id = self.next_id;
        self.next_id += 1;
        let req = serde_json::json!({"id": id, "method": method, "params": params});
        self.ctl.write_all(req.to_string().as_bytes()).ok()?;
        let mut de =
            serde_json::Deserializer::from_reader(&mut self.ctl).into_iter::<serde_json::Value>();
        let reply = de.next()?.ok()?;
        Some(match reply.get("error") {
            Some(e) if !e.is_null() => Err(e.clone()),
            _ => Ok(reply.get("result").cloned().unwrap_or_default()),
        })
    }

    /// Frames transmitted since the last call, per interface in order (gratuitous ARPs left
    /// out, see [`is_garp`]).
    pub fn take_outputs(&mut self) -> BTreeMap<String, Vec<Vec<u8>>> {
        let mut out: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for (iface, (path, off)) in self.pcaps.iter_mut() {
            let Ok(mut f) = std::fs::File::open(&*path) else {
                continue;
            };
            let mut buf = Vec::new();
            if f.read_to_end(&mut buf).is_err() {
                continue;
            }
            let mut o = *off as usize;
            while o + 16 <= buf.len() {
                let incl = u32::from_le_bytes(buf[o + 8..o + 12].try_into().unwrap()) as usize;
                if o + 16 + incl > buf.len() {
                    break;
                }
                let frame = buf[o + 16..o + 16 + incl].to_vec();
                o += 16 + incl;
                if !is_garp(&frame) {
                    out.entry(iface.clone()).or_default().push(frame);
                }
            }
            *off = o as u64;
        }
        out
    }

    /// Inject `frame` and collect what comes out: wait until at least `expect` frames came
    /// out and nothing more for a quiet period (pinctrl's packet-ins are asynchronous), or
    /// until [`PINCTRL_DEADLINE`] when fewer arrive.
    pub fn send(
        &mut self,
        iface: &str,
        frame: &[u8],
        expect: usize,
    ) -> BTreeMap<String, Vec<Vec<u8>>> {
        self.inject(iface, frame);
        let start = Instant::now();
        let mut got: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        let mut last_change = Instant::now();
        let quiet = Duration::from_millis(if expect == 0 { 80 } else { 15 });
        loop {
            std::thread::sleep(Duration::from_millis(2));
            let new = self.take_outputs();
            if !new.is_empty() {
                last_change = Instant::now();
                for (k, v) in new {
                    got.entry(k).or_default().extend(v);
                }
            }
            let n: usize = got.values().map(Vec::len).sum();
            if n >= expect && last_change.elapsed() >= quiet && start.elapsed() >= quiet {
                return got;
            }
            if start.elapsed() > PINCTRL_DEADLINE {
                return got;
            }
        }
    }
}
