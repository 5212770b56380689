//! The `db-rebuild` story (`rebuild` is its alias): incident D, on either topology (by default
//! `ovnk-l2`, OVN-Kubernetes's shared gateway).
//!
//! 1. The CMS's part, through NB: every router whose SNAT takes the VMs' traffic to the
//!    external host (`GR_<node>` on `ovnk-l2`, the distributed router on the default topology)
//!    gets `options:snat-ct-zone=0`, as OVN-Kubernetes sets on its gateway routers so their
//!    SNAT shares the host's conntrack zone. holdfast never uses zone 0: the router's SNAT zone
//!    (`lr/<router>/snat`) gets a zone by name, and the controllers' translation diagnostic
//!    says so; the story prints both, and fails if a zone map holds zone 0 or the diagnostic
//!    is missing.
//! 2. The disruption story's transfers (across chassis, and through SNAT to the external host)
//!    while every controller stops, NB and SB are rebuilt (every row again with a new UUID and
//!    the same name, as OVN-Kubernetes's interconnect migration does) and every controller
//!    starts against them.
//! 3. The report: the full zone map of every chassis before and after (they must be the same),
//!    the flushes (none), and per transfer bytes verified, retransmissions and resets.
//!
//! What it does not do: flush anything itself (the control case, a flush like ovn-controller
//! 23.03's, is `tests/incidents/incident_d.rs`'s).

use std::collections::BTreeMap;

use hf_sim::world::nb;

use super::{STEP_LIMIT, Sandbox, Verdict, check_findings};
use crate::sandbox::args::Scenario;
use crate::sandbox::topology::Design;

impl Sandbox {
    /// The routers whose SNAT the external traffic goes through.
    fn snat_routers(&self) -> Vec<(String, Vec<String>)> {
        match &self.topo.design {
            Design::Distributed(d) => vec![(d.router.to_string(), self.topo.chassis())],
            Design::OvnkL2(o) => o
                .nodes
                .iter()
                .map(|n| (n.router.clone(), vec![n.chassis.clone()]))
                .collect(),
        }
    }

    /// Step 1: the routers ask for zone 0; whether holdfast refused it and said so.
    fn request_zone_0(&mut self) -> bool {
        let routers = self.snat_routers();
        for (r, _) in &routers {
            if let Err(e) = self
                .sim
                .nb(nb::set_router_options(r, &[("snat-ct-zone", "0")]))
            {
                self.p.result(&format!(
                    "  {r}: FAILED: could not set options:snat-ct-zone=0: {e:#}"
                ));
                return false;
            }
        }
        if let Err(e) = self.sim.sync_hv(STEP_LIMIT) {
            self.p.result(&format!(
                "  FAILED: the chassis did not install options:snat-ct-zone=0: {e:#}"
            ));
            return false;
        }
        let zones = self.sim.zones();
        let mut ok = true;
        for (r, chassis) in &routers {
            let name = format!("lr/{r}/snat");
            for ch in chassis {
                let zone = zones.get(ch).and_then(|(m, _)| m.get(&name)).copied();
                let status = self.sim.controller_status(ch).unwrap_or_default();
                let want = format!("router {r} asks for conntrack zone 0");
                let diag = status
                    .lines()
                    .find_map(|l| l.find(&want).map(|i| l[i..].trim_end().to_string()));
                match (zone, diag) {
                    (Some(z), Some(d)) if z != 0 => self.p.result(&format!(
                        "  {r} asks for zone 0 (options:snat-ct-zone=0): refused, {name} is zone \
                         {z} on {ch}; {ch}'s controller says: {d}"
                    )),
                    (z, d) => {
                        ok = false;
                        self.p.result(&format!(
                            "  {r} on {ch}: FAILED: {name} is {}, diagnostic {}",
                            z.map_or_else(
                                || "not in the zone map".to_string(),
                                |z| { format!("zone {z}") }
                            ),
                            d.as_deref().unwrap_or("missing")
                        ));
                    }
                }
            }
        }
        for (ch, (m, _)) in &zones {
            if let Some((n, _)) = m.iter().find(|(_, z)| **z == 0) {
                ok = false;
                self.p
                    .result(&format!("  {ch}: FAILED: {n} has zone 0, the host's"));
            }
        }
        ok
    }

    /// Every controller stopped, both databases rebuilt, every controller started: what was
    /// done (the line starts with the rebuild's), and whether it all happened.
    pub(super) fn rebuild_with_restarts(&mut self) -> (String, bool) {
        let chassis = self.topo.chassis();
        let mut ok = true;
        for ch in &chassis {
            if let Err(e) = self.sim.stop_controller(ch) {
                ok = false;
                self.p
                    .result(&format!("  stop controller {ch}: FAILED: {e:#}"));
            }
        }
        let (done, rebuilt) = self.rebuild();
        for ch in &chassis {
            if let Err(e) = self.sim.start_controller(ch) {
                ok = false;
                self.p
                    .result(&format!("  start controller {ch}: FAILED: {e:#}"));
            }
        }
        (
            format!(
                "{done}, every controller ({}) stopped before and started after,",
                chassis.join(", ")
            ),
            ok && rebuilt,
        )
    }

    /// The `db-rebuild` story (see the module doc); its verdict.
    pub(super) fn db_rebuild_story(&mut self) -> Verdict {
        self.p.progress(5, "running the db-rebuild story");
        self.p
            .result("the SNAT routers ask for the host's conntrack zone:");
        if !self.request_zone_0() {
            return Verdict::Failed(Some("zone 0 was not refused with a diagnostic".into()));
        }
        // The preflight sees the requests before they ship.
        match check_findings(self.sim.world(), hf_check::Code::ZoneRisk) {
            Ok(found) => {
                if found.is_empty() {
                    return Verdict::Failed(Some(
                        "holdfast check did not warn about the zone-0 requests".into(),
                    ));
                }
                self.p.result("holdfast check on this NB and SB:");
                for f in &found {
                    self.p.result(&format!(
                        "  {}[{}]: {}",
                        f.severity.as_str(),
                        f.code.as_str(),
                        f.message
                    ));
                }
            }
            Err(e) => {
                return Verdict::Failed(Some(format!("the databases could not be read: {e}")));
            }
        }
        let before = self.sim.zones();
        let ok = self.disruption_story(Scenario::DbRebuild);
        let after = self.sim.zones();
        self.p
            .result("zone maps (name=zone), before and after the rebuild:");
        let mut same = true;
        for (ch, (b, fb)) in &before {
            let (a, fa) = after.get(ch).cloned().unwrap_or_default();
            self.p.result(&format!("  {ch} before: {}", map_text(b)));
            self.p.result(&format!(
                "  {ch} after:  {}{}",
                map_text(&a),
                if &a == b {
                    " (identical)"
                } else {
                    " (CHANGED)"
                }
            ));
            self.p
                .result(&format!("  {ch} flushes: {}", fa.saturating_sub(*fb)));
            same &= &a == b && fa == *fb;
        }
        match (ok, same) {
            (true, true) => Verdict::Ok,
            (_, false) => Verdict::Failed(Some("a zone map changed or a zone was flushed".into())),
            (false, true) => Verdict::Failed(None),
        }
    }
}

fn map_text(m: &BTreeMap<String, u16>) -> String {
    m.iter()
        .map(|(n, z)| format!("{n}={z}"))
        .collect::<Vec<_>>()
        .join(" ")
}
