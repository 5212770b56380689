//! Meters and ACL logs, a part of the controller core ([`super::Controller`]): the meters of
//! the SB view (`Meter` rows and the flows' `controller_meter`) sent to a version-6 datapath
//! when they change, and the bound on ACL log lines kept for the shell.
//!
//! It does not enforce meters (the datapath's pipeline does, `hf_pipeline::meter`) or format
//! log lines (the datapath does, `hf_datapath::acl_log`).

use hf_datapath::proto::{self, ToDatapath};
use hf_model::sb::{Delta, LogicalFlow};
use hf_model::{RowDelta, SbSnapshot};

use super::{Controller, Level};

impl Controller {
    /// Sends the datapath the meters of the SB view when they changed (or since its hello):
    /// SB `Meter` rows and every flow's `controller_meter` by flow identity.
    pub(super) fn sync_meters(&mut self) {
        if !self.dp_hello || self.dp_version < 6 || !std::mem::take(&mut self.meters_due) {
            return;
        }
        let m = meters_msg(self.sb.model());
        if self.meters_sent.as_ref() == Some(&m) {
            return;
        }
        if !m.meters.is_empty() || self.meters_sent.is_some() {
            self.say(
                Level::Info,
                format!(
                    "meters: {} to the datapath, {} flow(s) with a controller meter",
                    m.meters.len(),
                    m.flow_meters.len()
                ),
            );
        }
        self.send_dp(&ToDatapath::Meters(m.clone()));
        self.meters_sent = Some(m);
    }
}

/// Whether change set `d` can change [`meters_msg`]: a `Meter` or `Meter_Band` row, or a
/// flow that has (or had) a `controller_meter` (most flow changes have none, and the message
/// is built from every flow).
pub(super) fn touches_meters(d: &Delta) -> bool {
    let metered = |f: &LogicalFlow| f.controller_meter.is_some();
    !d.meter.is_empty()
        || !d.meter_band.is_empty()
        || d.logical_flow.iter().any(|r| match r {
            RowDelta::Insert(f) | RowDelta::Delete(f) => metered(f),
            RowDelta::Update { old, new } => metered(old) || metered(new),
        })
}

/// ACL log lines kept for the shell at most (a flood beyond it is dropped, as a full
/// packet-in queue drops).
pub(super) const MAX_ACL_LOGS: usize = 10_000;

/// The meters a chassis runs, from SB: `Meter` rows with their bands, and the flows with a
/// `controller_meter` (by the identity the program gives them).
pub fn meters_msg(sb: &SbSnapshot) -> proto::MetersMsg {
    let meters = sb
        .meter()
        .values()
        .map(|m| {
            let mut bands: Vec<(u64, u64)> = m
                .bands
                .iter()
                .filter_map(|b| sb.meter_band().get(&b.uuid()))
                .map(|b| {
                    (
                        u64::try_from(b.rate).unwrap_or(0),
                        u64::try_from(b.burst_size).unwrap_or(0),
                    )
                })
                .collect();
            bands.sort_unstable();
            proto::MeterMsg {
                name: m.name.clone(),
                pktps: m.unit.as_str() == "pktps",
                bands,
            }
        })
        .collect();
    let mut flow_meters: Vec<(String, String)> = sb
        .logical_flow()
        .values()
        .filter_map(|lf| {
            let m = lf.controller_meter.as_ref()?;
            let (id, _, _) = crate::translate::flows::flow_identity(lf);
            Some((id.0.to_string(), m.clone()))
        })
        .collect();
    flow_meters.sort_unstable();
    proto::MetersMsg {
        meters,
        flow_meters,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(meter: Option<&str>) -> LogicalFlow {
        LogicalFlow {
            controller_meter: meter.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    #[allow(clippy::field_reassign_with_default)]
    fn only_meter_rows_and_metered_flows_make_the_message_due() {
        let mut d = Delta::default();
        d.logical_flow = vec![RowDelta::Insert(flow(None))];
        assert!(!touches_meters(&d), "a plain flow");
        d.logical_flow.push(RowDelta::Update {
            old: flow(Some("m")),
            new: flow(None),
        });
        assert!(touches_meters(&d), "a flow that lost its meter");
        let mut d = Delta::default();
        d.logical_flow = vec![RowDelta::Delete(flow(Some("m")))];
        assert!(touches_meters(&d), "a metered flow gone");
        let mut d = Delta::default();
        d.meter = vec![RowDelta::Insert(hf_model::sb::Meter::default())];
        assert!(touches_meters(&d), "a meter");
    }
}
