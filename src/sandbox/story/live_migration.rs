//! The `live-migration` story: incident C, on either topology. The external network is a
//! provider network (`physnet1`), so a VM's traffic to the external host leaves from whichever
//! chassis its NAT is applied on.
//!
//! 1. The CMS's part, through NB: on the default topology a distributed `dnat_and_snat` gives
//!    the first VM ([`FIP`], external MAC [`FIP_MAC`], `logical_port` the VM) its own egress
//!    address wherever it runs; `ovnk-l2` has no such thing (OVN-Kubernetes SNATs egress to the
//!    node's own address), so the CMS adds none there. On both, a Neutron-style security group
//!    on its port (IPv4 from it allowed with allow-related, any other IP from it and every IP to
//!    it dropped), so the VM's inbound traffic passes only as part of a connection conntrack
//!    knows.
//! 2. Warm-up pings, then two paced, verified TCP streams: a download from the external host
//!    (the VM connects to port 80) and an east-west stream to a VM on another hypervisor (and
//!    another switch where there is one).
//! 3. The VM live-migrates to the second hypervisor and back (`World::migrate` with the
//!    default plan: 200 ms pre-copy, a 30 ms pause, a RARP on resume, the CMS's final step
//!    100 ms after the resume). After each, the story checks that both streams moved on and
//!    whether the external host had to reset segments from an endpoint it had no connection
//!    with (the VM's, under another address).
//! 4. The streams stop; per connection: bytes verified, the longest stall, retransmissions
//!    (fast and timeouts), duplicates, resets and the address the far end saw (and, for the
//!    download, the endpoints the external host reset); per migration: chassis, pause, what
//!    the datapaths moved and held.
//!
//! The story fails on a reset, a retransmission timeout, more than one fast retransmit per
//! migration, a stall of [`STALL_LIMIT`] or more, an unverified byte, a stream without
//! progress after a migration, a migration that did not complete, or a change of the address
//! the external host saw (it must be the VM's egress address: [`FIP`] on the default topology,
//! its first node's on `ovnk-l2`, with the same port, on one connection throughout, and no
//! segment of the VM's may reach it from elsewhere). On `ovnk-l2` it fails by design: the VM's
//! egress moves to the new node's address, the external host resets what it gets from there,
//! and the download breaks, as in incident C; the verdict says so.

use std::time::Duration;

use hf_sim::world::streams::{DEFAULT_STREAM_PORT, Stream, StreamKind, StreamReport, StreamSpec};

use super::{STEP_LIMIT, Sandbox, Verdict};
use crate::sandbox::args::TopologyKind;
use crate::sandbox::sim::migration_line;
use crate::sandbox::topology::{Design, Topology, Vm};

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

/// The external host's resets of endpoints it had no connection with, as it saw them after a
/// migration: (migration number, chassis the VM went to, endpoint, resets).
type Strays = Vec<(usize, String, String, u64)>;

impl Sandbox {
    /// The `live-migration` story (see the module doc); its verdict.
    pub(super) fn live_migration_story(&mut self) -> Verdict {
        self.p.progress(5, "running the live-migration story");
        self.p.result(
            "results (simulated time: 10 Gb/s links, 50 us between chassis, 1 ms to the external host):",
        );
        let t = self.topo.clone();
        let failed = |why: &str| Verdict::Failed(Some(why.to_string()));
        let Some(cast) = self.cast() else {
            return failed("the topology lacks the story's hosts");
        };
        let (h1, h2) = (cast.first.chassis.clone(), cast.neighbour.chassis.clone());
        let vm = cast.first.clone();
        let Some(peer) = east_west_peer(&t, &vm, &h2) else {
            self.p
                .result("  FAILED: the topology has no VM on another hypervisor");
            return failed("no east-west peer");
        };
        let ext = t.ext_host.clone();
        let egress = match self.cms_steps(&vm) {
            Ok(ip) => ip,
            Err(e) => {
                self.p
                    .result(&format!("  FAILED: the CMS's NB steps: {e:#}"));
                return failed("the CMS's NB steps failed");
            }
        };
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
                    return failed(&format!("{label}: cannot start"));
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
            return failed("the streams did not get going");
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
        let mut strays: Strays = Vec::new();
        let mut known = self.sim.strays_reset(&ext.name);
        let mut migrations = 0u64;
        for (i, to) in [h2.as_str(), h1.as_str()].into_iter().enumerate() {
            let n = i + 1;
            let bytes_before: Vec<u64> = conns
                .iter()
                .map(|c| self.sim.stream_report(&c.stream).bytes)
                .collect();
            match self.sim.migrate_whole(&vm.name, to) {
                Ok(m) => {
                    migrations += 1;
                    self.p
                        .result(&format!("  migration {n}: {}", migration_line(&m)));
                    if m.outcome != "completed" {
                        failures.push(format!(
                            "migration {n} ({} -> {}) ended {:?}, not completed",
                            m.from, m.to, m.outcome
                        ));
                    }
                }
                Err(e) => {
                    self.p.result(&format!("  migration {n}: FAILED: {e:#}"));
                    failures.push(format!("migration {n} to {to}: {e:#}"));
                    break;
                }
            }
            self.sim.run_for(BETWEEN);
            for ((c, before), bytes) in conns.iter().zip(&seen).zip(&bytes_before) {
                let r = self.sim.stream_report(&c.stream);
                // The far ends see the VM as they did before: same address, same port.
                if r.peer_saw != *before {
                    failures.push(format!(
                        "{}: after migration {n} {} saw {} instead of {}",
                        c.label,
                        c.far,
                        r.peer_saw.as_deref().unwrap_or("nothing"),
                        before.as_deref().unwrap_or("nothing")
                    ));
                }
                if r.state == "running" && r.bytes == *bytes {
                    failures.push(format!(
                        "{}: no progress from migration {n} on ({} bytes, {} ms after it)",
                        c.label,
                        r.bytes,
                        BETWEEN.as_millis()
                    ));
                }
            }
            // Segments of the VM's that reached the external host from an endpoint it never
            // had a connection with, reset there.
            let now = self.sim.strays_reset(&ext.name);
            for (endpoint, count) in &now {
                let new = count.saturating_sub(known.get(endpoint).copied().unwrap_or(0));
                if new > 0 {
                    strays.push((n, to.to_string(), endpoint.clone(), new));
                }
            }
            known = now;
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
        let mut download_broke: Option<String> = None;
        for (c, before) in conns.iter().zip(&seen) {
            let r = self.sim.stream_report(&c.stream);
            let reset_there = if c.far == ext.name && !strays.is_empty() {
                let each: Vec<String> = strays
                    .iter()
                    .map(|(n, to, ep, k)| {
                        format!(
                            "after migration {n} (to {to}) segments from {}, which it reset {k} \
                             times",
                            endpoint(&t, ep)
                        )
                    })
                    .collect();
                format!(", then {}", each.join(", then "))
            } else {
                String::new()
            };
            self.p.result(&format!(
                "  {}: {}; {} saw {}{}{reset_there}",
                c.label,
                connection_results(&r),
                c.far,
                r.peer_saw.as_deref().unwrap_or("nothing"),
                if r.peer_saw == *before && reset_there.is_empty() {
                    " throughout"
                } else {
                    ""
                }
            ));
            let fs = connection_failures(&r, migrations);
            if c.far == ext.name && download_broke.is_none() {
                download_broke = download_summary(&r, &fs, &strays, &vm, &t);
            }
            failures.extend(fs.into_iter().map(|f| format!("{}: {f}", c.label)));
        }
        // The external host saw the VM's egress address, only one connection from it, and
        // nothing of the VM's from anywhere else.
        if let Some((c, before)) = conns.iter().zip(&seen).find(|(c, _)| c.far == ext.name) {
            let want = format!("{egress}:");
            if !before.as_deref().is_some_and(|s| s.starts_with(&want)) {
                failures.push(format!(
                    "{}: {} saw {} instead of the VM's egress address {egress}",
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
            for (n, to, ep, count) in &strays {
                failures.push(format!(
                    "{}: after migration {n} (to {to}) {} got segments from {}, an endpoint it \
                     had no connection with, and reset them ({count} resets)",
                    c.label,
                    ext.name,
                    endpoint(&t, ep)
                ));
            }
        }
        for f in &failures {
            self.p.result(&format!("  FAILED: {f}"));
        }
        if failures.is_empty() {
            return Verdict::Ok;
        }
        if t.kind() == TopologyKind::OvnkL2 {
            self.p.result(&format!(
                "  expected on {}: OVN-Kubernetes SNATs a VM's egress to its node's own \
                 address, so after a migration {}'s segments reach {} from the new node's \
                 address, which no connection there has (incident C); --topology default gives \
                 the VM its own egress address and keeps the download",
                t.kind().name(),
                vm.name,
                ext.name
            ));
        }
        let why = download_broke.unwrap_or_else(|| failures[0].clone());
        let more = failures.len() - 1;
        Verdict::Failed(Some(if more > 0 {
            format!(
                "{why}; {more} more failure{} above",
                if more == 1 { "" } else { "s" }
            )
        } else {
            why
        }))
    }

    /// The CMS's NB steps before the story: the VM's floating IP where the topology has them,
    /// and its security group; then `--wait=hv`. Returns the address the external host should
    /// see for the VM throughout.
    fn cms_steps(&mut self, vm: &Vm) -> anyhow::Result<String> {
        let t = self.topo.clone();
        let egress = match t.floating_ip(vm, FIP, FIP_MAC) {
            Some(txn) => {
                self.sim.nb(txn)?;
                self.p.result(&format!(
                    "  cms: dnat_and_snat {FIP} <-> {} ({}), external_mac {FIP_MAC}, applied on \
                     {}'s chassis: its own egress address",
                    vm.ip, vm.name, vm.name
                ));
                FIP.to_string()
            }
            None => {
                let e = t.egress(&vm.chassis).ok_or_else(|| {
                    anyhow::anyhow!("{} has no way out of {}", vm.name, vm.chassis)
                })?;
                self.p.result(&format!(
                    "  cms: no floating IP (OVN-Kubernetes has none): {}'s egress is SNATed by \
                     its node's gateway router, {}, to {}",
                    vm.name, e.at, e.ip
                ));
                e.ip
            }
        };
        for txn in t.security_group(vm) {
            self.sim.nb(txn)?;
        }
        let rules: Vec<String> = Topology::security_group_rules(&vm.name)
            .iter()
            .map(|(dir, prio, m, action)| format!("{dir} {prio} '{m}' {action}"))
            .collect();
        self.p.result(&format!(
            "  cms: security group on {} (ACLs on {}): {}",
            vm.name,
            vm.switch,
            rules.join(", ")
        ));
        self.sim.sync_hv(STEP_LIMIT)?;
        Ok(egress)
    }
}

/// The east-west peer of `vm`: on another hypervisor, on another switch where the topology has
/// one, and on one the VM never runs on (it goes to `h2` and back) when there is one.
fn east_west_peer(t: &Topology, vm: &Vm, h2: &str) -> Option<Vm> {
    t.vms
        .iter()
        .filter(|v| v.chassis != vm.chassis)
        .min_by_key(|v| (v.switch == vm.switch, v.chassis == h2))
        .cloned()
}

/// `ep` (`ip:port`) for people: `172.16.0.12:49152 (hv2's node address)` when it is a node's
/// address on `ovnk-l2`.
fn endpoint(t: &Topology, ep: &str) -> String {
    let ip = ep.rsplit_once(':').map_or(ep, |(ip, _)| ip);
    match &t.design {
        Design::OvnkL2(o) => o.node_with_ip(ip).map_or_else(
            || ep.to_string(),
            |n| format!("{ep} ({}'s node address)", n.chassis),
        ),
        Design::Distributed(_) => ep.to_string(),
    }
}

/// How the download broke, in a few words, if it did: the endpoint the external host reset
/// (the VM's segments under another address), else the connection's own failures.
fn download_summary(
    r: &StreamReport,
    failures: &[String],
    strays: &Strays,
    vm: &Vm,
    t: &Topology,
) -> Option<String> {
    match strays.first() {
        Some((n, to, ep, _)) => Some(format!(
            "the download {}: after migration {n} to {to} {}'s segments reached the external \
             host from {}, and it reset them",
            if r.resets > 0 { "was reset" } else { "broke" },
            vm.name,
            endpoint(t, ep)
        )),
        None if !failures.is_empty() => Some(format!("the download: {}", failures.join(", "))),
        None => None,
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
