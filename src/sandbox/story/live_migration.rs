//! The `live-migration` story: incident C on the default topology. The external network is a
//! provider network (`physnet1`), so a VM's traffic to the external host leaves from whichever
//! chassis its NAT is applied on.
//!
//! 1. The CMS's part, through NB: a distributed `dnat_and_snat` gives the first VM ([`FIP`],
//!    external MAC [`FIP_MAC`], `logical_port` the VM) its own egress address wherever it
//!    runs, and a Neutron-style security group on its port (IPv4 from it allowed with
//!    allow-related, any other IP from it and every IP to it dropped), so the VM's inbound
//!    traffic passes only as part of a connection conntrack knows.
//! 2. Warm-up pings, then two paced, verified TCP streams: a download from the external host
//!    (the VM connects to port 80) and an east-west stream to a VM on another switch and
//!    another hypervisor.
//! 3. The VM live-migrates to the second hypervisor and back (`World::migrate` with the
//!    default plan: 200 ms pre-copy, a 30 ms pause, a RARP on resume, the CMS's final step
//!    100 ms after the resume).
//! 4. The streams stop; per connection: bytes verified, the longest stall, retransmissions
//!    (fast and timeouts), duplicates, resets and the address the far end saw; per migration:
//!    chassis, pause, what the datapaths moved and held.
//!
//! The story fails on a reset, a retransmission timeout, more than one fast retransmit per
//! migration, a stall of [`STALL_LIMIT`] or more, an unverified byte, a migration that did not
//! complete, or a change of the address the external host saw (it must be [`FIP`], with the
//! same port, on one connection throughout).

use std::time::Duration;

use hf_sim::world::streams::{DEFAULT_STREAM_PORT, Stream, StreamKind, StreamReport, StreamSpec};

use super::{STEP_LIMIT, Sandbox};
use crate::sandbox::sim::migration_line;
use crate::sandbox::topology::Vm;

/// The migrating VM's own external address (its floating IP) and the MAC it answers for.
pub const FIP: &str = "172.16.0.50";
/// The floating IP's external MAC (`external_mac`).
pub const FIP_MAC: &str = "02:00:00:00:ee:01";
/// The external host's port the VM downloads from.
const DOWNLOAD_PORT: u16 = 80;
/// A stall this long or longer fails the story (the VM pauses for 30 ms).
const STALL_LIMIT: Duration = Duration::from_millis(50);
/// How long the streams run before the first migration and after each.
const BETWEEN: Duration = Duration::from_millis(300);

/// One of the story's connections.
struct Conn {
    /// `download` or `east-west`.
    label: &'static str,
    /// How it is printed before its results.
    what: String,
    stream: Stream,
    /// The far end (the server).
    far: String,
}

impl Sandbox {
    /// The `live-migration` story (see the module doc); whether every check held.
    pub(super) fn live_migration_story(&mut self) -> bool {
        self.p.progress(5, "running the live-migration story");
        self.p.result(
            "results (simulated time: 10 Gb/s links, 50 us between chassis, 1 ms to the external host):",
        );
        let t = self.topo.clone();
        let (h1, h2) = (t.hypervisors[0].clone(), t.hypervisors[1].clone());
        let Some(vm) = t.vm_on("ls1", &h1).cloned() else {
            self.p
                .result("  FAILED: the topology has no VM on ls1 on the first hypervisor");
            return false;
        };
        // The east-west peer: another switch, another hypervisor; one the VM never runs on
        // when there is one.
        let others = || {
            t.vms
                .iter()
                .filter(|v| v.switch != vm.switch && v.chassis != vm.chassis)
        };
        let Some(peer) = others()
            .find(|v| v.chassis != h2)
            .or_else(|| others().next())
            .cloned()
        else {
            self.p
                .result("  FAILED: the topology has no VM on another switch and hypervisor");
            return false;
        };
        let ext = t.ext_host.clone();
        if let Err(e) = self.cms_steps(&vm) {
            self.p
                .result(&format!("  FAILED: the CMS's NB steps: {e:#}"));
            return false;
        }
        self.warm_up_with(&[
            (vm.name.clone(), ext.ip.clone()),
            (vm.name.clone(), peer.ip.clone()),
        ]);

        let specs = [
            (
                "download",
                StreamSpec {
                    port: DOWNLOAD_PORT,
                    download: true,
                    ..StreamSpec::new("download", StreamKind::Tcp, &vm.name, &ext.name)
                },
                format!(
                    "download {} ({}:{DOWNLOAD_PORT}) -> {}",
                    ext.name, ext.ip, vm.name
                ),
            ),
            (
                "east-west",
                StreamSpec {
                    port: DEFAULT_STREAM_PORT,
                    ..StreamSpec::new("east-west", StreamKind::Tcp, &vm.name, &peer.name)
                },
                format!(
                    "east-west {} -> {} ({}:{DEFAULT_STREAM_PORT}, {} on {})",
                    vm.name, peer.name, peer.ip, peer.switch, peer.chassis
                ),
            ),
        ];
        let mut conns = Vec::new();
        for (label, spec, what) in specs {
            let far = spec.server.clone();
            let rate = spec.tcp_rate_bps;
            match self.sim.start_stream(spec) {
                Ok(stream) => conns.push(Conn {
                    label,
                    what: format!("{what}, paced at {} Mbit/s", rate / 1_000_000),
                    stream,
                    far,
                }),
                Err(e) => {
                    self.p
                        .result(&format!("  FAILED: {what}: cannot start: {e:#}"));
                    return false;
                }
            }
        }
        let moving = |s: &super::Sim, c: &Conn| {
            let r = s.stream_report(&c.stream);
            r.bytes > 0 && r.peer_saw.is_some()
        };
        if !self
            .sim
            .run_until(STEP_LIMIT, |s| conns.iter().all(|c| moving(s, c)))
        {
            for c in &conns {
                let r = self.sim.stream_report(&c.stream);
                self.p.result(&format!(
                    "  FAILED: {}: did not get going ({}, {} bytes)",
                    c.what, r.state, r.bytes
                ));
            }
            return false;
        }
        self.sim.run_for(BETWEEN);
        let seen: Vec<Option<String>> = conns
            .iter()
            .map(|c| self.sim.stream_report(&c.stream).peer_saw)
            .collect();
        for (c, saw) in conns.iter().zip(&seen) {
            self.p.result(&format!(
                "  {}: {} sees {} as {}",
                c.what,
                c.far,
                vm.name,
                saw.as_deref().unwrap_or("?")
            ));
        }

        let mut failures: Vec<String> = Vec::new();
        let mut migrations = 0u64;
        for (i, to) in [h2.as_str(), h1.as_str()].into_iter().enumerate() {
            match self.sim.migrate_whole(&vm.name, to) {
                Ok(m) => {
                    migrations += 1;
                    self.p
                        .result(&format!("  migration {}: {}", i + 1, migration_line(&m)));
                    if m.outcome != "completed" {
                        failures.push(format!(
                            "migration {} ({} -> {}) ended {:?}, not completed",
                            i + 1,
                            m.from,
                            m.to,
                            m.outcome
                        ));
                    }
                }
                Err(e) => {
                    self.p
                        .result(&format!("  migration {}: FAILED: {e:#}", i + 1));
                    failures.push(format!("migration {} to {to}: {e:#}", i + 1));
                    break;
                }
            }
            self.sim.run_for(BETWEEN);
            // The far ends see the VM as they did before: same address, same port.
            for (c, before) in conns.iter().zip(&seen) {
                let now = self.sim.stream_report(&c.stream).peer_saw;
                if now != *before {
                    failures.push(format!(
                        "{}: after migration {} {} saw {} instead of {}",
                        c.label,
                        i + 1,
                        c.far,
                        now.as_deref().unwrap_or("nothing"),
                        before.as_deref().unwrap_or("nothing")
                    ));
                }
            }
        }

        for c in &mut conns {
            if let Err(e) = self.sim.stop_stream(&mut c.stream) {
                failures.push(format!("{}: cannot stop it: {e:#}", c.label));
            }
        }
        let finished = self.sim.run_until(STEP_LIMIT, |s| {
            conns.iter().all(|c| s.stream_report(&c.stream).is_final())
        });
        if !finished {
            failures.push(format!(
                "the streams did not finish within {STEP_LIMIT:?} of being stopped"
            ));
        }
        for (c, before) in conns.iter().zip(&seen) {
            let r = self.sim.stream_report(&c.stream);
            self.p.result(&format!(
                "  {}: {}; {} saw {}{}",
                c.label,
                connection_results(&r),
                c.far,
                r.peer_saw.as_deref().unwrap_or("nothing"),
                if r.peer_saw == *before {
                    " throughout"
                } else {
                    ""
                }
            ));
            failures.extend(
                connection_failures(&r, migrations)
                    .into_iter()
                    .map(|f| format!("{}: {f}", c.label)),
            );
        }
        // The external host saw the VM's own address, and only one connection from it.
        if let Some((c, before)) = conns.iter().zip(&seen).find(|(c, _)| c.far == ext.name) {
            let want = format!("{FIP}:");
            if !before.as_deref().is_some_and(|s| s.starts_with(&want)) {
                failures.push(format!(
                    "{}: {} saw {} instead of the VM's own address {FIP}",
                    c.label,
                    ext.name,
                    before.as_deref().unwrap_or("nothing")
                ));
            }
            let accepted = self.sim.accepted(&ext.name, DOWNLOAD_PORT);
            if accepted != 1 {
                failures.push(format!(
                    "{}: {} accepted {accepted} connections on port {DOWNLOAD_PORT}, not one \
                     (it saw the VM under another address or port)",
                    c.label, ext.name
                ));
            }
        }
        for f in &failures {
            self.p.result(&format!("  FAILED: {f}"));
        }
        failures.is_empty()
    }

    /// The CMS's NB steps before the story: the VM's floating IP and its security group; then
    /// `--wait=hv`.
    fn cms_steps(&mut self, vm: &Vm) -> anyhow::Result<()> {
        let t = self.topo.clone();
        self.sim.nb(t.floating_ip(vm, FIP, FIP_MAC))?;
        self.p.result(&format!(
            "  cms: dnat_and_snat {FIP} <-> {} ({}), external_mac {FIP_MAC}, applied on {}'s \
             chassis: its own egress address",
            vm.ip, vm.name, vm.name
        ));
        for txn in t.security_group(vm) {
            self.sim.nb(txn)?;
        }
        let rules: Vec<String> = super::Topology::security_group_rules(&vm.name)
            .iter()
            .map(|(dir, prio, m, action)| format!("{dir} {prio} '{m}' {action}"))
            .collect();
        self.p.result(&format!(
            "  cms: security group on {} (ACLs on {}): {}",
            vm.name,
            vm.switch,
            rules.join(", ")
        ));
        self.sim.sync_hv(STEP_LIMIT)
    }
}

/// A connection's results: bytes, verified, stall, retransmissions, duplicates, resets.
fn connection_results(r: &StreamReport) -> String {
    format!(
        "{} bytes, {} verified, longest stall {:.2} ms, retransmissions {} fast / {} timeouts, \
         {} duplicates, {} resets ({})",
        r.bytes,
        r.verified,
        r.stall_max_us as f64 / 1000.0,
        r.fast_retransmits,
        r.timeouts,
        r.duplicates,
        r.resets,
        r.state
    )
}

/// Why a connection fails the story, if it does: a reset, a retransmission timeout, more than
/// one fast retransmit per migration, a stall of [`STALL_LIMIT`] or more, an unverified byte, or
/// an end other than a clean stop.
fn connection_failures(r: &StreamReport, migrations: u64) -> Vec<String> {
    let mut f = Vec::new();
    if r.resets > 0 {
        f.push(format!("{} resets", r.resets));
    }
    if r.timeouts > 0 {
        f.push(format!("{} retransmission timeouts", r.timeouts));
    }
    if r.fast_retransmits > migrations {
        f.push(format!(
            "{} fast retransmits in {migrations} migrations (at most one per migration)",
            r.fast_retransmits
        ));
    }
    let limit = u64::try_from(STALL_LIMIT.as_micros()).unwrap_or(u64::MAX);
    if r.stall_max_us >= limit {
        f.push(format!(
            "a stall of {:.2} ms ({} ms or more)",
            r.stall_max_us as f64 / 1000.0,
            STALL_LIMIT.as_millis()
        ));
    }
    if r.bytes == 0 || r.verified != r.bytes {
        f.push(format!("{} of {} bytes verified", r.verified, r.bytes));
    }
    if r.state != "stopped" {
        f.push(format!("ended {:?}, not stopped cleanly", r.state));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> StreamReport {
        StreamReport {
            name: "download".into(),
            kind: StreamKind::Tcp,
            client: "vm1".into(),
            server: "ext1".into(),
            port: 80,
            direction: "download".into(),
            state: "stopped".into(),
            bytes: 1000,
            verified: 1000,
            stall_max_us: 31_000,
            retransmitted: 0,
            fast_retransmits: 0,
            timeouts: 0,
            duplicates: 0,
            resets: 0,
            lost: None,
            peer_saw: Some("172.16.0.50:49152".into()),
        }
    }

    #[test]
    fn a_clean_connection_passes() {
        assert!(connection_failures(&report(), 2).is_empty());
        let r = StreamReport {
            fast_retransmits: 2,
            ..report()
        };
        assert!(connection_failures(&r, 2).is_empty());
    }

    #[test]
    fn each_failure_is_named() {
        let cases: Vec<(StreamReport, &str)> = vec![
            (
                StreamReport {
                    resets: 1,
                    ..report()
                },
                "1 resets",
            ),
            (
                StreamReport {
                    timeouts: 1,
                    ..report()
                },
                "retransmission timeouts",
            ),
            (
                StreamReport {
                    fast_retransmits: 3,
                    ..report()
                },
                "3 fast retransmits in 2 migrations",
            ),
            (
                StreamReport {
                    stall_max_us: 50_000,
                    ..report()
                },
                "a stall of 50.00 ms",
            ),
            (
                StreamReport {
                    verified: 999,
                    ..report()
                },
                "999 of 1000 bytes verified",
            ),
            (
                StreamReport {
                    state: "reset".into(),
                    ..report()
                },
                "ended \"reset\"",
            ),
        ];
        for (r, want) in cases {
            let f = connection_failures(&r, 2);
            assert_eq!(f.len(), 1, "{f:?}");
            assert!(f[0].contains(want), "{f:?} lacks {want:?}");
        }
    }
}
