//! `DNS`: one SB row per NB `DNS` row that some switch lists in `dns_records`, with the
//! switches as `datapaths`, the records with their values lowercased (23.03: lookups are
//! case-insensitive) and `external_ids:dns_id` = the NB UUID (DNS rows have no name). The
//! switch's `ls_in_dns_lookup` flows make ovn-controller answer from these rows.

use std::collections::BTreeMap;

use crate::output::{DnsRow, SbDesired};
use crate::stage::DpKind;
use crate::topo::Topo;

/// Adds the DNS rows.
pub fn build(topo: &Topo<'_>, sb: &mut SbDesired) {
    for d in topo.datapaths.iter().filter(|d| d.kind == DpKind::Switch) {
        let Some(ls) = topo.nb.logical_switch().get(&d.nb) else {
            continue;
        };
        for dns in ls.dns_records.iter().filter_map(|r| topo.nb.get(*r)) {
            let row = sb
                .dns
                .entry(dns.uuid.to_string())
                .or_insert_with(|| DnsRow {
                    records: dns
                        .records
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_lowercase()))
                        .collect(),
                    external_ids: BTreeMap::from([("dns_id".to_string(), dns.uuid.to_string())]),
                    ..Default::default()
                });
            row.datapaths.insert(d.name.clone());
        }
    }
}
