//! The holdfast side: the same SB through holdfast's chassis in process —
//! `hf_controller::translate` for the same chassis name (only the datapaths it needs, as the
//! controller daemon does), `program_msg`, and a sans-I/O [`Datapath`] with the same local
//! ports (the VIFs by name, the localnet port under its logical port name). Its clock is
//! virtual: each packet advances it by a millisecond.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use hf_controller::program_msg::{NoLastGood, program_msg};
use hf_controller::translate::{Extra, TranslateOptions, translate_with};
use hf_datapath::{Datapath, DatapathConfig, Transmit};
use hf_model::SbSnapshot;

use crate::real::{CHASSIS, ENCAP_IP};

pub struct OurSide {
    dp: Datapath,
    now: Duration,
    /// Logical port name → the real interface name it stands for.
    names: BTreeMap<String, String>,
}

impl OurSide {
    /// `ports`: (logical port, real interface).
    pub fn start(sb: &SbSnapshot, ports: &[(String, String)]) -> OurSide {
        let t = translate_with(
            sb,
            &TranslateOptions {
                chassis: Some(CHASSIS.into()),
            },
            &Extra {
                only_needed: true,
                ..Extra::default()
            },
        );
        assert!(
            t.diagnostics.is_empty(),
            "translation diagnostics: {:?}",
            t.diagnostics
        );
        let nb_cfg = sb.sb_global_row().map_or(0, |g| g.nb_cfg);
        let build = program_msg(&t, CHASSIS, 1, nb_cfg, &BTreeMap::new(), &NoLastGood);
        assert!(
            build.skipped.is_empty(),
            "skipped flows: {:?}",
            build.skipped
        );
        let ip: IpAddr = ENCAP_IP.parse().unwrap();
        let mut dp = Datapath::new(DatapathConfig::new(CHASSIS, ip));
        for (lp, _) in ports {
            dp.add_port(lp, None);
        }
        let errs = dp.install(build.msg).expect("install");
        assert!(errs.is_empty(), "flow errors: {errs:?}");
        OurSide {
            dp,
            now: Duration::from_secs(1),
            names: ports.iter().cloned().collect(),
        }
    }

    /// A frame into logical port `lp`'s interface; what comes out, per real interface name.
    pub fn send(&mut self, lp: &str, frame: &[u8]) -> BTreeMap<String, Vec<Vec<u8>>> {
        self.now += Duration::from_millis(1);
        self.dp.handle_timeout(self.now);
        self.dp.handle_port_frame(lp, frame, self.now);
        let mut out: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        while let Some(t) = self.dp.poll_transmit() {
            match t {
                Transmit::Port { port, frame } => {
                    let iface = self.names.get(&port).cloned().unwrap_or(port);
                    if !crate::wire::is_garp(&frame) {
                        out.entry(iface).or_default().push(frame);
                    }
                }
                Transmit::Tunnel { dst, payload } => {
                    out.entry(format!("tunnel:{dst}"))
                        .or_default()
                        .push(payload);
                }
                Transmit::Mirror { dst, payload } => {
                    out.entry(format!("mirror:{dst}"))
                        .or_default()
                        .push(payload);
                }
            }
        }
        out
    }

    /// A what-if trace of `frame` into `lp` on the current state, for a failure report.
    pub fn trace(&mut self, lp: &str, frame: &[u8]) -> String {
        self.dp
            .trace_port_frame(lp, frame, self.now)
            .unwrap_or_default()
    }

    /// Conntrack entries, for a failure report.
    pub fn conntrack(&self) -> String {
        let zones: Vec<String> = self
            .dp
            .zones()
            .iter()
            .map(|(n, z)| format!("{n}={z}"))
            .collect();
        let entries = self
            .dp
            .dump_conntrack(None, self.now)
            .map(|v| v.join("\n"))
            .unwrap_or_else(|e| e);
        format!("zones: {}\n{entries}", zones.join(" "))
    }
}
