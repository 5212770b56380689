//! `Meter` and `Meter_Band`, as ovn-northd 23.03's `sync_meters` writes them: one SB meter
//! per NB `Meter` (same name, unit and bands), plus, for every ACL whose `meter` names a
//! `fair` meter, a copy of that meter named `<meter>__<ACL UUID>`, so each ACL's log is limited
//! on its own (the ACL's `log()` names the copy, see [`crate::ls::index::acl_log_meter`]).
//!
//! What it does not do: check that meters are used (OVN writes every NB meter). A name shared
//! by two NB meters is a diagnostic; the first by UUID is written.

use crate::diag::Diags;
use crate::ls::index::{acl_log_meter, fair_meters};
use crate::output::{MeterRow, SbDesired};
use crate::topo::Topo;

/// Fills `sb.meters`.
pub fn build(topo: &Topo<'_>, sb: &mut SbDesired, diags: &mut Diags) {
    let nb = topo.nb;
    let row_of = |m: &hf_model::nb::Meter| MeterRow {
        unit: m.unit.as_str().to_string(),
        bands: m
            .bands
            .iter()
            .filter_map(|b| nb.meter_band().get(&b.uuid()))
            .map(|b| (b.action.as_str().to_string(), b.rate, b.burst_size))
            .collect(),
    };
    for m in nb.meter().values() {
        if sb.meters.contains_key(&m.name) {
            diags.push(
                "Meter",
                m.uuid,
                &m.name,
                "another Meter has the same name; this one is not written to SB",
            );
            continue;
        }
        sb.meters.insert(m.name.clone(), row_of(m));
    }
    let fair = fair_meters(topo);
    for acl in nb.acl().values() {
        let (Some(base), Some(name)) = (acl.meter.as_ref(), acl_log_meter(acl, &fair)) else {
            continue;
        };
        if &name == base {
            continue;
        }
        if let Some(row) = sb.meters.get(base.as_str()).cloned() {
            sb.meters.insert(name, row);
        }
    }
}
