//! `Mirror`, as ovn-northd 23.03's `sync_mirrors` writes it: one SB row per NB `Mirror`, by
//! name, with its `filter`, `index`, `sink` and `type`; each switch port's `mirror_rules` name
//! them ([`crate::tables::port`]). Chassis do the mirroring (a holdfast chassis reports a
//! mirrored local port as not mirrored: its datapath has no GRE/ERSPAN output yet).
//!
//! Two NB mirrors with one name: the first by UUID is written, the other is a diagnostic.

use crate::diag::Diags;
use crate::output::{MirrorRow, SbDesired};
use crate::topo::Topo;

/// Fills `sb.mirrors`.
pub fn build(topo: &Topo<'_>, sb: &mut SbDesired, diags: &mut Diags) {
    for m in topo.nb.mirror().values() {
        if sb.mirrors.contains_key(&m.name) {
            diags.push(
                "Mirror",
                m.uuid,
                &m.name,
                "another Mirror has the same name; this one is not written to SB",
            );
            continue;
        }
        sb.mirrors.insert(
            m.name.clone(),
            MirrorRow {
                filter: m.filter.as_str().to_string(),
                index: m.index,
                sink: m.sink.clone(),
                type_: m.type_.as_str().to_string(),
            },
        );
    }
}
