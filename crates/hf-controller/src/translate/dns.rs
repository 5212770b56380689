//! SB `DNS` → [`hf_pipeline::DnsSpec`]s: the records `dns_lookup()` answers from.
//!
//! Each `DNS` row gives its `records` (name → addresses, or a reverse name → host name) to every
//! datapath in its `datapaths` that is part of the translation, as ovn-controller's pinctrl
//! keys its DNS cache by datapath tunnel key. Names are lowercased (SB stores them in
//! lowercase; pinctrl lowercases the query). Rows are taken in UUID order, so when two rows
//! of one datapath define the same name the answer is deterministic (the row with the smaller
//! UUID wins).
//!
//! It does not check that the values parse as addresses: a value `dns_lookup` cannot use is
//! a lookup failure at run time, as in pinctrl. A datapath the translation left out (one the
//! chassis does not need, with `only_needed`) gets no records; a reference to a datapath that
//! does not exist is a [`super::Diagnostic`].

use std::collections::BTreeMap;

use hf_model::SbSnapshot;
use hf_pipeline::DnsSpec;

use super::{Diagnostic, Translation};

/// Adds one [`DnsSpec`] per (row, translated datapath) to `t.spec.dns`.
pub fn translate_dns(sb: &SbSnapshot, t: &mut Translation) {
    for row in sb.dns().values() {
        let records: BTreeMap<String, String> = row
            .records
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        for d in &row.datapaths {
            let uuid = d.uuid();
            if sb.datapath_binding().get(&uuid).is_none() {
                t.diagnostics.push(Diagnostic {
                    table: "DNS",
                    uuid: row.uuid,
                    reason: format!("datapath {uuid} does not exist: left out for it"),
                });
                continue;
            }
            let Some(dp) = t
                .datapath_index
                .get(&uuid)
                .and_then(|&i| t.spec.datapaths.get(i))
            else {
                continue;
            };
            t.spec.dns.push(DnsSpec {
                datapath: dp.name.clone(),
                records: records.clone(),
            });
        }
    }
}
