//! The SB write round, a part of the controller core ([`super::Controller`]): the one SB
//! transaction in flight at a time that registers the chassis, claims and releases port
//! bindings ([`super::super::binding`]), writes learned neighbours and FDB entries, and
//! reports `nb_cfg` and flow errors; built from the view when it is sent, so nothing is
//! written twice. The bindings it looks at are the claim candidates kept from each change set
//! (`bind_cands`), not every `Port_Binding` of the view.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use hf_model::SbSnapshot;
use serde_json::Value;
use uuid::Uuid;

use super::super::chassis::{self, Identity};
use super::super::{binding, neigh};
use super::Controller;

/// What the SB write transaction is built from (shared with the replica's builder).
#[derive(Debug, Clone)]
pub(super) struct WriteState {
    pub(super) id: Identity,
    pub(super) dp_ready: bool,
    pub(super) local: BTreeSet<String>,
    pub(super) up: BTreeSet<String>,
    pub(super) neigh: neigh::Pending,
    pub(super) fdb: neigh::PendingFdb,
    pub(super) vports: BTreeMap<String, String>,
    /// Ports the datapath activated here (a migration's destination): written to SB as
    /// `options:additional-chassis-activated`.
    pub(super) activated: BTreeSet<String>,
    pub(super) nb_cfg: Option<i64>,
    pub(super) wall_ms: i64,
    pub(super) flow_report: BTreeMap<String, String>,
    /// Zones exhausted ([`crate::translate::zones::EXHAUSTED`]): `holdfast-zone-error`.
    pub(super) zone_error: Option<String>,
    /// The `Port_Binding` rows the claims may act on ([`binding::candidates`]) as of the
    /// round that built this state; `None`: found anew from the view.
    pub(super) cands: Option<Arc<[Uuid]>>,
}

fn write_ops(sb: &SbSnapshot, st: &WriteState) -> Vec<Value> {
    let mut ops = chassis::registration_ops(sb, &st.id);
    let Some(ours) = chassis::our_chassis(sb, &st.id.name) else {
        return ops;
    };
    let mut report = st.flow_report.clone();
    if let Some(e) = &st.zone_error {
        report.insert(chassis::ZONE_ERROR_KEY.to_string(), e.clone());
    }
    ops.extend(chassis::private_ops(
        sb,
        &st.id.name,
        st.nb_cfg,
        st.wall_ms,
        &report,
    ));
    if st.dp_ready {
        ops.extend(binding::binding_ops(sb, &claimant(st, ours)));
    }
    ops.extend(neigh::neighbour_ops(sb, &st.neigh, st.wall_ms));
    ops.extend(neigh::fdb_ops(sb, &st.fdb));
    ops
}

/// Whether the write round would claim or release ports in a way that moves them in the
/// translation (a translation waits for it: the program then has the ports where the claim
/// puts them, instead of one push before and one after). A claim the translation already
/// assumed (a VIF requested here, [`binding::claims_move_ports`]) is not waited for: its
/// program is installed while the claim is on its way.
fn claims_pending(sb: &SbSnapshot, st: &WriteState) -> bool {
    let Some(ours) = chassis::our_chassis(sb, &st.id.name) else {
        return false;
    };
    st.dp_ready && binding::claims_move_ports(sb, &claimant(st, ours))
}

/// The claims' view of the write state.
fn claimant(st: &WriteState, ours: Uuid) -> binding::Claimant<'_> {
    binding::Claimant {
        ours,
        name: &st.id.name,
        hostname: &st.id.hostname,
        local: &st.local,
        up: &st.up,
        vports: &st.vports,
        activated: &st.activated,
        cands: st.cands.as_deref(),
    }
}

impl Controller {
    pub(super) fn write_round(&mut self, now: Duration) {
        if !self.write_due || self.txn.is_some() || self.write_retry_at.is_some_and(|r| now < r) {
            return;
        }
        self.write_due = false;
        // Neighbours and FDB entries already in the view are done; then one copy of the state
        // to write from.
        let sb = self.sb.model();
        let st = self.with_state(|st| {
            st.neigh.retain(|(d, p, ip), mac| {
                !neigh::datapath_by_name(sb, d).is_none_or(|u| neigh::written(sb, u, p, ip, mac))
            });
            st.fdb
                .retain(|(d, mac), p| !neigh::fdb_written(sb, d, mac, p));
            st.clone()
        });
        let cands = self.candidates(&st);
        let st = WriteState {
            cands: cands.clone(),
            ..st
        };
        self.with_state(|s| s.cands = cands);
        let ops = write_ops(self.sb.model(), &st);
        if ops.is_empty() {
            return;
        }
        // (For the `claim-commit` stopwatch: the write claims or releases a port.)
        let claims = ops.iter().any(|o| {
            o["table"] == "Port_Binding"
                && (o["row"].get("chassis").is_some()
                    || o["mutations"]
                        .as_array()
                        .is_some_and(|m| m.iter().any(|x| x[0] == "additional_chassis")))
        });
        self.txn_claims = claims_pending(self.sb.model(), &st);
        // The `nb_cfg` report this write carries (timed from when it was due).
        // (The stage clock: the CPU since the event came counts.)
        let sent = self.tick().max(now);
        let report = match (self.nb_cfg_since, st.nb_cfg) {
            (Some((since, change, n)), Some(m)) if m >= n => {
                self.sw
                    .record("nb-cfg-write-wait", sent.saturating_sub(since));
                self.nb_cfg_since = None;
                Some(change)
            }
            _ => None,
        };
        self.txn_t = Some((sent, claims, report));
        let shared = Arc::clone(&self.shared);
        self.stats.sb_writes += 1;
        // The ops are sent as built when the write goes out at once (the usual case); a
        // later attempt builds them again from the state as it is then.
        self.txn = Some(self.sb.transact_built(
            ops,
            Box::new(move |sb: &SbSnapshot| {
                let st = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
                write_ops(sb, &st)
            }),
        ));
    }

    /// The rows the claims may act on (see `bind_cands`), found anew when not known.
    fn candidates(&mut self, st: &WriteState) -> Option<Arc<[Uuid]>> {
        let sb = self.sb.model();
        let ours = chassis::our_chassis(sb, &self.cfg.chassis)?;
        let fresh = || -> BTreeSet<Uuid> {
            binding::candidates(sb, ours, &st.local, &st.vports)
                .iter()
                .map(|pb| pb.uuid)
                .collect()
        };
        let cands = match self.bind_cands.take() {
            Some(c) => {
                debug_assert_eq!(c, fresh(), "bind_cands drifted from the view");
                c
            }
            None => fresh(),
        };
        let out: Arc<[Uuid]> = cands.iter().copied().collect();
        self.bind_cands = Some(cands);
        Some(out)
    }

    /// Keeps `bind_cands` up to date with change set `d` (applied to the view already).
    pub(super) fn note_candidates(&mut self, d: &hf_model::SbDelta) {
        if self.bind_cands.is_none() {
            return;
        }
        if !d.chassis.is_empty() {
            // Our own row may have come, gone or been replaced.
            self.bind_cands = None;
            return;
        }
        if d.port_binding.is_empty() {
            return;
        }
        let Some(ours) = chassis::our_chassis(self.sb.model(), &self.cfg.chassis) else {
            self.bind_cands = None;
            return;
        };
        let shared = Arc::clone(&self.shared);
        let st = shared.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cands) = self.bind_cands.as_mut() else {
            return;
        };
        for r in &d.port_binding {
            let (uuid, now) = match r {
                hf_model::RowDelta::Insert(pb) => (pb.uuid, Some(pb)),
                hf_model::RowDelta::Update { new, .. } => (new.uuid, Some(new)),
                hf_model::RowDelta::Delete(pb) => (pb.uuid, None),
            };
            cands.remove(&uuid);
            if now.is_some_and(|pb| binding::is_candidate(pb, ours, &st.local, &st.vports)) {
                cands.insert(uuid);
            }
        }
    }
}
