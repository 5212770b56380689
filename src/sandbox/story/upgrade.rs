//! The `upgrade` story: incident B, a rolling upgrade of holdfast's own control plane, on
//! either topology (the world of `hf_sim::world::incident_b`, on the sandbox's hosts).
//!
//! 1. Every controller restarts at feature level `hf-1` (OVN 20.06's language and SB layout);
//!    northd then writes only `hf-1` constructs.
//! 2. The CMS adds a Neutron-style security group (`incident_b::security_group`): the first VM
//!    in `pg_web`, the other VMs of its switch in `pg_clients`; `pg_web` admits TCP to port
//!    5201 from the clients (allow-related), drops the rest; the clients receive only what is
//!    related. Each client starts a paced, verified TCP stream to the server, across chassis.
//! 3. Forced: `NB_Global options:ignore_chassis_features=true`. northd writes the newer form
//!    (`ct_commit { ... }`, `ct_mark.blocked`, per-datapath port groups) that the `hf-1`
//!    controllers cannot parse; each keeps its last good flows (the switch held whole where the
//!    newer form has flows with no older version) and reports every cause once. Then the
//!    option is removed and the older form comes back.
//! 4. The upgrade, controllers first: each chassis's controller restarts at `hf-2`, one by
//!    one; northd's SB form must change only once every chassis advertises `hf-2`. Then
//!    northd restarts.
//! 5. The streams stop; per stream: bytes verified, retransmissions, resets.
//!
//! One report line per step: what was done, each chassis's advertised level, the SB form,
//! parse errors per chassis (and how many run their last good version or failed closed),
//! resets, retransmissions and bytes so far. The story fails on a reset, a retransmission, an
//! unverified byte, a stream that made no progress during a step, a parse error during the
//! upgrade (steps 1, 2, 4), a forced step where some chassis did not report its errors or
//! did not run its last good flows, or an SB form that changed before every chassis had `hf-2`.

use std::time::Duration;

use hf_expr::Level;
use hf_sim::world::incident_b::{self, PORT, RATE_BPS, Step, at};
use hf_sim::world::streams::{Stream, StreamKind, StreamSpec};

use super::{STEP_LIMIT, Sandbox, Verdict, check_findings};

/// How long each step lets the streams run before it is recorded.
const STEP_RUN: Duration = Duration::from_secs(1);

impl Sandbox {
    /// The `upgrade` story (see the module doc); its verdict.
    pub(super) fn upgrade_story(&mut self) -> Verdict {
        self.p.progress(5, "running the upgrade story (incident B)");
        let failed = |why: &str| Verdict::Failed(Some(why.to_string()));
        let Some(cast) = self.cast() else {
            return failed("the topology lacks the story's hosts");
        };
        let server = cast.first.clone();
        let clients: Vec<_> = self
            .topo
            .vms
            .iter()
            .filter(|v| v.switch == server.switch && v.chassis != server.chassis)
            .take(2)
            .cloned()
            .collect();
        if clients.is_empty() {
            return failed("no VM on the server's switch on another hypervisor");
        }
        let chassis = self.topo.chassis();
        // 1. Every controller at hf-1.
        for c in &chassis {
            if let Err(e) = self.sim.restart_controller_with(c, at(Level::Hf1)) {
                self.p
                    .result(&format!("  FAILED: restarting {c} at hf-1: {e:#}"));
                return failed("a controller did not restart");
            }
        }
        // Settled: a chassis that met the newer form before the others restarted was held
        // at its last good flows for that moment (logged, resolved once northd wrote hf-1).
        self.sim.run_for(STEP_RUN);
        self.flush_log();
        // 2. The security group and the streams.
        let names: Vec<&str> = clients.iter().map(|v| v.name.as_str()).collect();
        let sg = self
            .sim
            .world()
            .nb_snapshot()
            .and_then(|nb| incident_b::security_group(&nb, &server.name, &names));
        match sg
            .map_err(|e| anyhow::anyhow!(e))
            .and_then(|t| self.sim.nb(t))
        {
            Ok(()) => self.p.result(&format!(
                "cms: security group: {} in pg_web (TCP {PORT} from pg_clients, allow-related; \
                 the rest dropped), {} in pg_clients (egress allow-related, ingress related only)",
                server.name,
                names.join(", ")
            )),
            Err(e) => {
                self.p
                    .result(&format!("  FAILED: the security group: {e:#}"));
                return failed("the CMS's NB steps failed");
            }
        }
        let mut streams: Vec<Stream> = Vec::new();
        for c in &clients {
            let spec = StreamSpec {
                port: PORT,
                tcp_rate_bps: RATE_BPS,
                ..StreamSpec::new(
                    &format!("{}-{}", c.name, server.name),
                    StreamKind::Tcp,
                    &c.name,
                    &server.name,
                )
            };
            match self.sim.start_stream(spec) {
                Ok(s) => {
                    self.p.result(&format!(
                        "stream {} -> {} ({}:{PORT}, {} -> {}), paced at {} Mbit/s",
                        c.name,
                        server.name,
                        server.ip,
                        c.chassis,
                        server.chassis,
                        RATE_BPS / 1_000_000
                    ));
                    streams.push(s);
                }
                Err(e) => {
                    self.p.result(&format!(
                        "  FAILED: stream {} -> {}: {e:#}",
                        c.name, server.name
                    ));
                    return failed("a stream did not start");
                }
            }
        }
        let mut problems: Vec<String> = Vec::new();
        let mut last_bytes = 0u64;
        let mut record =
            |s: &mut Sandbox, what: &str, upgrade: bool, problems: &mut Vec<String>| {
                s.sim.run_for(STEP_RUN);
                let log = s.sim.take_log();
                let errors_logged = log.iter().filter(|l| l.contains("|flow error: ")).count();
                for l in &log {
                    s.p.log(l);
                }
                let step = Step::record(s.sim.world(), what, &streams);
                s.p.result(&format!("  {}", step.line()));
                let bytes: u64 = step.streams.iter().map(|r| r.bytes).sum();
                if bytes <= last_bytes {
                    problems.push(format!("no progress at \"{what}\""));
                }
                last_bytes = bytes;
                if step.resets() > 0 || step.retransmitted() > 0 {
                    problems.push(format!("resets or retransmissions at \"{what}\""));
                }
                if upgrade && (step.parse_errors() > 0 || errors_logged > 0) {
                    problems.push(format!("parse errors at \"{what}\""));
                }
                step
            };
        self.p.result("steps:");
        let start = record(self, "start: every controller at hf-1", true, &mut problems);
        if start.sb_form != Level::Hf1 {
            problems.push("the SB form is not hf-1 with every chassis at hf-1".into());
        }
        // 3. Forced, and taken back.
        if let Err(e) = self.sim.nb(incident_b::ignore_chassis_features(true)) {
            self.p.result(&format!("  FAILED: {e:#}"));
            return failed("NB write failed");
        }
        let forced = record(self, "ignore_chassis_features=true", false, &mut problems);
        let reporting = forced
            .errors
            .values()
            .filter(|e| {
                e.count > 0 && e.kept == e.count && e.reported.contains_key("holdfast-flow-errors")
            })
            .count();
        if forced.sb_form != Level::Hf2 || reporting == 0 {
            problems
                .push("the forced newer form was not reported and run on last good flows".into());
        }
        for (c, e) in &forced.errors {
            if e.count > 0 && e.kept != e.count {
                problems.push(format!(
                    "{c}: flows without a last good version when forced"
                ));
            }
        }
        // What the preflight says of the forced form: every hf-1 chassis cannot parse it.
        if let Ok(found) = check_findings(self.sim.world(), hf_check::Code::FlowUnparsable) {
            let named: Vec<&str> = chassis
                .iter()
                .filter(|c| found.iter().any(|f| f.name == **c))
                .map(String::as_str)
                .collect();
            self.p.result(&format!(
                "  holdfast check: {} flow-unparsable finding(s), naming {}",
                found.len(),
                if named.is_empty() {
                    "no chassis".to_string()
                } else {
                    named.join(", ")
                }
            ));
            if named.len() != chassis.len() {
                problems.push("holdfast check did not name every hf-1 chassis".into());
            }
        } else {
            problems.push("the databases could not be read for holdfast check".into());
        }
        if let Err(e) = self.sim.nb(incident_b::ignore_chassis_features(false)) {
            self.p.result(&format!("  FAILED: {e:#}"));
            return failed("NB write failed");
        }
        record(self, "ignore_chassis_features removed", true, &mut problems);
        // 4. Controllers first, then northd.
        for (i, c) in chassis.iter().enumerate() {
            if let Err(e) = self.sim.restart_controller_with(c, at(Level::Hf2)) {
                self.p
                    .result(&format!("  FAILED: restarting {c} at hf-2: {e:#}"));
                return failed("a controller did not restart");
            }
            let step = record(self, &format!("{c} at hf-2"), true, &mut problems);
            let want = if i + 1 == chassis.len() {
                Level::Hf2
            } else {
                Level::Hf1
            };
            if step.sb_form != want {
                problems.push(format!(
                    "SB form {} after {c} (expected {want})",
                    step.sb_form
                ));
            }
        }
        if let Err(e) = self.sim.restart_northd() {
            self.p
                .result(&format!("  FAILED: restarting northd: {e:#}"));
            return failed("northd did not restart");
        }
        record(self, "northd restarted", true, &mut problems);
        // 5. The streams' results.
        for s in &mut streams {
            if let Err(e) = self.sim.stop_stream(s) {
                problems.push(format!("stopping {}: {e:#}", s.spec().name));
            }
        }
        let done = self.sim.run_until(STEP_LIMIT, |sim| {
            streams.iter().all(|s| sim.stream_report(s).is_final())
        });
        self.p.result("results:");
        for s in &streams {
            let r = self.sim.stream_report(s);
            self.p.result(&format!(
                "  {}: {} bytes, {} verified, {} retransmitted, {} resets ({})",
                r.name, r.bytes, r.verified, r.retransmitted, r.resets, r.state
            ));
            if r.state != "stopped" || r.bytes != r.verified || r.bytes == 0 {
                problems.push(format!("{} ended {}", r.name, r.state));
            }
        }
        if !done {
            problems.push("the streams did not finish".into());
        }
        if problems.is_empty() {
            Verdict::Ok
        } else {
            for p in &problems {
                self.p.result(&format!("  FAILED: {p}"));
            }
            Verdict::Failed(problems.first().cloned())
        }
    }
}
