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
    /// Service monitor statuses the datapath found, until the view shows them.
    pub(super) svc: super::super::svc::Pending,
    /// Next-hop BFD states the datapath found, until the view shows them.
    pub(super) hop_bfd: super::hop_bfd::Pending,
    /// Learned multicast groups by switch, until the view shows them as our `IGMP_Group`s.
    pub(super) igmp: super::mcast::Pending,
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
    /// The chassis whose BFD sessions are up, while BFD runs: gateways claim by it.
    pub(super) ha_up: Option<BTreeSet<String>>,
}

/// What a row's claim is made from besides the row itself and our `Chassis` row: a round
/// looks again only at the rows of port names whose part of it changed since the last round.
#[derive(Debug)]
pub(super) struct ClaimInputs {
    dp_ready: bool,
    name: String,
    hostname: String,
    local: BTreeSet<String>,
    up: BTreeSet<String>,
    vports: BTreeMap<String, String>,
    activated: BTreeSet<String>,
    ha_up: Option<BTreeSet<String>>,
}

impl ClaimInputs {
    fn of(st: &WriteState) -> ClaimInputs {
        ClaimInputs {
            dp_ready: st.dp_ready,
            name: st.id.name.clone(),
            hostname: st.id.hostname.clone(),
            local: st.local.clone(),
            up: st.up.clone(),
            vports: st.vports.clone(),
            activated: st.activated.clone(),
            ha_up: st.ha_up.clone(),
        }
    }

    /// The port names whose local, up, virtual or activated state differs between `self` and
    /// `st`; `None` when the chassis's own inputs changed (every row then).
    fn changed_names(&self, st: &WriteState) -> Option<BTreeSet<String>> {
        if self.dp_ready != st.dp_ready
            || self.name != st.id.name
            || self.hostname != st.id.hostname
            || self.ha_up != st.ha_up
        {
            return None;
        }
        let mut names: BTreeSet<String> = BTreeSet::new();
        for (a, b) in [
            (&self.local, &st.local),
            (&self.up, &st.up),
            (&self.activated, &st.activated),
        ] {
            names.extend(a.symmetric_difference(b).cloned());
        }
        let (a, b) = (&self.vports, &st.vports);
        names.extend(
            a.iter()
                .filter(|(k, v)| b.get(*k) != Some(v))
                .chain(b.iter().filter(|(k, v)| a.get(*k) != Some(v)))
                .map(|(k, _)| k.clone()),
        );
        Some(names)
    }
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
    ops.extend(super::super::svc::status_ops(sb, &st.svc));
    ops.extend(super::hop_bfd::status_ops(sb, &st.hop_bfd));
    ops.extend(super::mcast::igmp_ops(sb, &st.id.name, &st.igmp));
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
        ha_up: st.ha_up.as_ref(),
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
            st.svc.retain(|k, s| !super::super::svc::written(sb, k, s));
            st.hop_bfd.retain(|k, s| !super::hop_bfd::written(sb, k, s));
            let me = st.id.name.clone();
            st.igmp.retain(|d, g| !super::mcast::written(sb, &me, d, g));
            st.clone()
        });
        // The claims' inputs that moved since the last round: their rows are looked at again.
        let names = self
            .claim_prev
            .as_ref()
            .and_then(|p| ClaimInputs::changed_names(p, &st));
        if names.is_none() {
            self.claim_dirty = None;
        }
        let cands = self.candidates(&st, names.as_ref());
        let rows = self.claim_rows(cands.as_ref(), names.as_ref());
        self.with_state(|s| s.cands = cands.clone());
        let st = WriteState { cands: rows, ..st };
        let ops = write_ops(self.sb.model(), &st);
        #[cfg(debug_assertions)]
        {
            let every = WriteState {
                cands: cands.clone(),
                ..st.clone()
            };
            debug_assert_eq!(
                ops,
                write_ops(self.sb.model(), &every),
                "the rows a write round looked at left out a row with a write"
            );
        }
        // A row written (or to be written again when the write fails) is looked at again;
        // every other row it looked at stays as the view has it until a change names it.
        let wrote_bindings = ops.iter().any(|o| o["table"] == "Port_Binding");
        self.claim_dirty = match (&st.cands, wrote_bindings) {
            (_, false) => Some(BTreeSet::new()),
            (Some(rows), true) => Some(rows.iter().copied().collect()),
            (None, true) => None,
        };
        self.claim_prev = Some(ClaimInputs::of(&st));
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

    /// The rows the claims may act on (see `bind_cands`), found anew when not known; the rows
    /// of the port names in `names` (whose local, virtual, up or activated state changed
    /// since the last round) are checked again.
    fn candidates(
        &mut self,
        st: &WriteState,
        names: Option<&BTreeSet<String>>,
    ) -> Option<Arc<[Uuid]>> {
        let sb = self.sb.model();
        let ours = chassis::our_chassis(sb, &self.cfg.chassis)?;
        let fresh = || -> BTreeSet<Uuid> {
            binding::candidates(sb, ours, &st.local, &st.vports)
                .iter()
                .map(|pb| pb.uuid)
                .collect()
        };
        let cands = match (self.bind_cands.take(), names) {
            (Some(mut c), Some(names)) => {
                for pb in names
                    .iter()
                    .flat_map(|n| sb.port_binding_all_by_logical_port(n))
                {
                    c.remove(&pb.uuid);
                    if binding::is_candidate(pb, ours, &st.local, &st.vports) {
                        c.insert(pb.uuid);
                    }
                }
                debug_assert_eq!(c, fresh(), "bind_cands drifted from the view");
                c
            }
            _ => fresh(),
        };
        let out: Arc<[Uuid]> = cands.iter().copied().collect();
        self.bind_cands = Some(cands);
        Some(out)
    }

    /// The candidates a write round looks at (in their order): those a change set or a
    /// write named since the last round (`claim_dirty`), those of the port names in `names`,
    /// and the gateway ports (whose claim reads other tables); every candidate when the last
    /// round's rows are not known.
    fn claim_rows(
        &self,
        cands: Option<&Arc<[Uuid]>>,
        names: Option<&BTreeSet<String>>,
    ) -> Option<Arc<[Uuid]>> {
        let (cands, names, Some(dirty)) = (cands?, names, &self.claim_dirty) else {
            return cands.cloned();
        };
        let sb = self.sb.model();
        let mut look: BTreeSet<Uuid> = dirty.clone();
        look.extend(
            names
                .into_iter()
                .flatten()
                .flat_map(|n| sb.port_binding_all_by_logical_port(n))
                .chain(
                    ["chassisredirect", "l3gateway"]
                        .into_iter()
                        .flat_map(|t| sb.port_binding_all_by_type(t)),
                )
                .map(|pb| pb.uuid),
        );
        Some(cands.iter().copied().filter(|u| look.contains(u)).collect())
    }

    /// Keeps `bind_cands` and `claim_dirty` up to date with change set `d` (applied to the
    /// view already).
    pub(super) fn note_candidates(&mut self, d: &hf_model::SbDelta) {
        if !d.chassis.is_empty() {
            self.claim_dirty = None;
        } else if let Some(dirty) = self.claim_dirty.as_mut() {
            dirty.extend(d.port_binding.iter().map(|r| match r {
                hf_model::RowDelta::Insert(pb) | hf_model::RowDelta::Delete(pb) => pb.uuid,
                hf_model::RowDelta::Update { new, .. } => new.uuid,
            }));
        }
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
