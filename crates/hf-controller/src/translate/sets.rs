//! `Address_Set` and `Port_Group` → the program's [`hf_expr::Sets`].
//!
//! - Address sets are global: each address is parsed as a logical-flow constant (an IPv4 or
//!   IPv6 address or prefix, a MAC, a number); one that does not parse is left out with a
//!   diagnostic.
//! - Since OVN 20.09 northd writes one SB `Port_Group` per (port group, datapath), named
//!   `<datapath tunnel key>_<name>` and holding only that datapath's ports; ovn-controller
//!   parses a datapath's flows against its own rows (lib/expr.c looks `@name` up as
//!   `<key>_<name>`). Here the rows of every translated datapath are united under `name`,
//!   which matches the same packets: a flow of datapath D only ever compares `inport`/`outport`
//!   with D's ports, and names of other datapaths' ports never equal them. Rows without a
//!   datapath prefix (older northds) are taken as they are.
//! - [`port_groups_as_written`]: every row under its own name, as a controller that predates
//!   per-datapath rows (OVN 20.06, holdfast `hf-1`) reads them.

use std::collections::{BTreeMap, BTreeSet};

use hf_expr::Constant;
use hf_expr::lexer::{Tok, tokenize};
use hf_model::SbSnapshot;
use uuid::Uuid;

use super::{Diagnostic, Translation};

/// Parses one address-set element as a constant.
pub fn parse_address(s: &str) -> Result<Constant, String> {
    let toks = tokenize(s).map_err(|e| e.to_string())?;
    match toks.iter().map(|t| &t.tok).collect::<Vec<_>>().as_slice() {
        [Tok::Const(c)] | [Tok::Const(c), Tok::End] => Ok(*c),
        _ => Err(format!("\"{s}\" is not an address")),
    }
}

pub(crate) fn translate_sets(sb: &SbSnapshot, t: &mut Translation) {
    for a in sb.address_set().values() {
        let list = address_set(a, &mut t.diagnostics);
        t.spec.sets.addr_sets.insert(a.name.clone(), list);
    }
    let keys = DpKeys::new(sb, t);
    for pg in sb.port_group().values() {
        let (name, ours) = keys.name_of(&pg.name);
        let entry = t.spec.sets.port_groups.entry(name).or_default();
        if ours {
            entry.extend(pg.ports.iter().cloned());
            entry.sort();
            entry.dedup();
        }
    }
}

/// One address set's constants; the addresses that do not parse go to `diags`.
fn address_set(a: &hf_model::sb::AddressSet, diags: &mut Vec<Diagnostic>) -> Vec<Constant> {
    let mut list = Vec::with_capacity(a.addresses.len());
    for addr in &a.addresses {
        match parse_address(addr) {
            Ok(c) => list.push(c),
            Err(e) => diags.push(Diagnostic {
                table: "Address_Set",
                uuid: a.uuid,
                reason: format!("address set {}: {e}: left out", a.name),
            }),
        }
    }
    list
}

/// The datapath tunnel keys that prefix SB port group names: every datapath's, and the
/// translated ones'.
pub(crate) struct DpKeys {
    ours: BTreeSet<String>,
    all: BTreeSet<String>,
}

impl DpKeys {
    pub(crate) fn new(sb: &SbSnapshot, t: &Translation) -> DpKeys {
        DpKeys {
            ours: t
                .spec
                .datapaths
                .iter()
                .map(|d| d.tunnel_key.to_string())
                .collect(),
            all: sb
                .datapath_binding()
                .values()
                .map(|d| d.tunnel_key.to_string())
                .collect(),
        }
    }

    /// The group name a row named `row` counts under, and whether its ports count here.
    pub(crate) fn name_of(&self, row: &str) -> (String, bool) {
        match row.split_once('_') {
            Some((k, rest))
                if !rest.is_empty()
                    && k.bytes().all(|b| b.is_ascii_digit())
                    && self.all.contains(k) =>
            {
                (rest.to_string(), self.ours.contains(k))
            }
            _ => (row.to_string(), true),
        }
    }
}

/// [`translate_sets`] for changed rows only: the address sets named `as_names` (whose rows
/// `as_rows` changed; their diagnostics, by row, in `diags`) and the port groups whose SB rows
/// are or were named `pg_rows`. Whether any set changed.
pub(crate) fn update_sets(
    sb: &SbSnapshot,
    t: &mut Translation,
    as_rows: &BTreeSet<Uuid>,
    as_names: &BTreeSet<String>,
    pg_rows: &BTreeSet<String>,
    diags: &mut BTreeMap<Uuid, Vec<Diagnostic>>,
) -> bool {
    let mut changed = false;
    for u in as_rows {
        diags.remove(u);
        if let Some(a) = sb.address_set().get(u) {
            let mut d = Vec::new();
            address_set(a, &mut d);
            if !d.is_empty() {
                diags.insert(*u, d);
            }
        }
    }
    for n in as_names {
        // The row with the greatest UUID wins, as in a pass in UUID order.
        let row = sb.address_set_all_by_name(n).max_by_key(|a| a.uuid);
        let new = row.map(|a| address_set(a, &mut Vec::new()));
        let old = match new {
            Some(list) => t.spec.sets.addr_sets.insert(n.clone(), list),
            None => t.spec.sets.addr_sets.remove(n),
        };
        changed |= old.as_ref() != t.spec.sets.addr_sets.get(n);
    }
    let keys = DpKeys::new(sb, t);
    let names: BTreeSet<String> = pg_rows.iter().map(|r| keys.name_of(r).0).collect();
    for n in names {
        // Every row counting under `n`: named `n`, or `<key>_n` for a datapath key.
        let mut rows: Vec<&hf_model::sb::PortGroup> = sb.port_group_all_by_name(&n).collect();
        for k in &keys.all {
            rows.extend(sb.port_group_all_by_name(&format!("{k}_{n}")));
        }
        let mut entry: Option<Vec<String>> = None;
        for pg in rows {
            let (name, ours) = keys.name_of(&pg.name);
            if name != n {
                continue;
            }
            let e = entry.get_or_insert_with(Vec::new);
            if ours {
                e.extend(pg.ports.iter().cloned());
            }
        }
        let old = match entry {
            Some(mut e) => {
                e.sort();
                e.dedup();
                t.spec.sets.port_groups.insert(n.clone(), e)
            }
            None => t.spec.sets.port_groups.remove(&n),
        };
        changed |= old.as_ref() != t.spec.sets.port_groups.get(&n);
    }
    changed
}

/// Every SB `Port_Group` row under the name it is written with (`1_pg_web` stays
/// `1_pg_web`): how a controller without the `port-group-per-datapath` layout (OVN 20.06,
/// holdfast `hf-1`) sees them, so a flow's `@pg_web` finds no group when northd wrote
/// per-datapath rows (incident B's "expecting port group name").
pub fn port_groups_as_written(sb: &SbSnapshot) -> std::collections::HashMap<String, Vec<String>> {
    sb.port_group()
        .values()
        .map(|pg| {
            let mut ports: Vec<String> = pg.ports.iter().cloned().collect();
            ports.sort();
            (pg.name.clone(), ports)
        })
        .collect()
}
