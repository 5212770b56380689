//! SB `BFD` rows, keyed by (logical port, dst IP): inserted, updated column by column (the
//! columns northd owns; `external_ids` and `options` are left alone), deleted when NB has no
//! such session (see [`crate::bfd`]).

use serde_json::{Value, json};

use super::{Ops, Scope, by_key, visit};
use crate::daemon::sbview::SbView;
use crate::output::SbDesired;

/// The insert operations for an SB holding none of northd's rows.
pub(super) fn insert_ops(d: &SbDesired, ops: &mut Vec<Value>) {
    for ((lport, dst), r) in &d.bfd {
        ops.push(json!({"op": "insert", "table": "BFD", "row": {
            "logical_port": lport, "dst_ip": dst, "src_port": r.src_port, "disc": r.disc,
            "status": r.status, "min_tx": r.min_tx, "min_rx": r.min_rx,
            "detect_mult": r.detect_mult}}));
    }
}

/// The diff's operations for `BFD`.
pub(super) fn diff(o: &mut Ops<'_>, sb: &SbView, d: &SbDesired, scope: Option<&Scope>) {
    use hf_model::sb as s;
    let (old, dups) = by_key(sb.bfd.values(), |r| {
        Some((r.logical_port.clone(), r.dst_ip.clone()))
    });
    for (key, want) in visit(&d.bfd, scope.map(|s| &s.bfd)) {
        let prev = old.get(key).copied();
        let mut new = prev.cloned().unwrap_or_else(|| s::Bfd {
            uuid: o.fresh(),
            logical_port: key.0.clone(),
            dst_ip: key.1.clone(),
            src_port: want.src_port,
            disc: want.disc,
            ..Default::default()
        });
        new.status = s::BfdStatus::from_wire(&want.status);
        new.min_tx = want.min_tx;
        new.min_rx = want.min_rx;
        new.detect_mult = want.detect_mult;
        o.put(&new, prev);
    }
    if scope.is_none() {
        for r in dups {
            o.delete(r);
        }
    }
    let mut stale: Vec<&s::Bfd> = match scope {
        None => old
            .iter()
            .filter(|(k, _)| !d.bfd.contains_key(*k))
            .map(|(_, r)| *r)
            .collect(),
        Some(sc) => sc
            .bfd
            .iter()
            .filter(|k| !d.bfd.contains_key(*k))
            .filter_map(|k| old.get(k).copied())
            .collect(),
    };
    stale.sort_by_key(|r| r.uuid);
    for r in stale {
        o.delete(r);
    }
}
