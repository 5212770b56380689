//! MAC_Binding ageing as 23.03's `mac-binding-aging.c` does it, as a pure function: which
//! `MAC_Binding` rows to delete now, and when to look again. The daemon calls [`age`] with
//! its wall clock (milliseconds since the epoch, the unit of `MAC_Binding.timestamp`) and
//! deletes the rows it returns.
//!
//! Rules: only when every chassis has `mac-binding-timestamp` (else nothing ages); a router's
//! `options:mac_binding_age_threshold` (seconds; absent, 0 or unparsable means never) applies
//! to the rows of its datapath; a row whose age is at least the threshold is deleted; a row
//! with a timestamp in the future is left alone. `NB_Global options:mac_binding_removal_limit`
//! caps deletions per run; when the cap is reached the next run is 5 s later (OVN's bulk
//! removal delay). Rows are visited by datapath name, then oldest first, so the choice under
//! a cap is deterministic.

use std::collections::BTreeMap;

use hf_expr::FeatureSet;
use hf_model::NbSnapshot;
use uuid::Uuid;

/// OVN's `MAC_BINDING_BULK_REMOVAL_DELAY_MSEC`.
pub const BULK_REMOVAL_DELAY_MS: i64 = 5000;

/// One `MAC_Binding` row, as much as ageing needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The row's UUID.
    pub uuid: Uuid,
    /// Its datapath's name (`Datapath_Binding.external_ids:name`).
    pub datapath: String,
    /// `timestamp` (ms since the epoch).
    pub timestamp: i64,
}

/// What to do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ageing {
    /// Rows to delete.
    pub delete: Vec<Uuid>,
    /// Run again after this many milliseconds (`None`: nothing left to age).
    pub next_in_ms: Option<i64>,
}

fn threshold_ms(opts: &hf_model::SmallMap<String, String>) -> Option<i64> {
    // smap_get_uint: an unsigned integer; anything else is 0 (never).
    let s: u64 = opts.get("mac_binding_age_threshold")?.trim().parse().ok()?;
    let ms = i64::try_from(s.checked_mul(1000)?).ok()?;
    (ms > 0).then_some(ms)
}

/// The rows of `entries` to delete at `now_ms`, and when to run next.
pub fn age(nb: &NbSnapshot, features: &FeatureSet, entries: &[Entry], now_ms: i64) -> Ageing {
    let mut out = Ageing::default();
    if !features.contains("mac-binding-timestamp") {
        return out;
    }
    let limit: usize = nb
        .nb_global()
        .values()
        .next()
        .and_then(|g| g.options.get("mac_binding_removal_limit"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut thresholds: BTreeMap<&str, i64> = BTreeMap::new();
    for lr in nb.logical_router().values() {
        if let Some(t) = threshold_ms(&lr.options) {
            thresholds.insert(lr.name.as_str(), t);
        }
    }
    let mut rows: Vec<&Entry> = entries
        .iter()
        .filter(|e| thresholds.contains_key(e.datapath.as_str()))
        .collect();
    rows.sort_by(|a, b| {
        (a.datapath.as_str(), a.timestamp, a.uuid).cmp(&(b.datapath.as_str(), b.timestamp, b.uuid))
    });
    let mut next = i64::MAX;
    for e in rows {
        let threshold = thresholds[e.datapath.as_str()];
        let elapsed = now_ms.saturating_sub(e.timestamp);
        if elapsed < 0 {
            continue;
        }
        if elapsed >= threshold {
            out.delete.push(e.uuid);
            if limit > 0 && out.delete.len() == limit {
                next = BULK_REMOVAL_DELAY_MS;
                break;
            }
        } else {
            next = next.min(threshold - elapsed);
        }
    }
    out.next_in_ms = (next < i64::MAX).then_some(next);
    out
}
