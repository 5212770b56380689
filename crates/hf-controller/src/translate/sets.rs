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

use hf_expr::Constant;
use hf_expr::lexer::{Tok, tokenize};
use hf_model::SbSnapshot;

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
        let mut list = Vec::with_capacity(a.addresses.len());
        for addr in &a.addresses {
            match parse_address(addr) {
                Ok(c) => list.push(c),
                Err(e) => t.diagnostics.push(Diagnostic {
                    table: "Address_Set",
                    uuid: a.uuid,
                    reason: format!("address set {}: {e}: left out", a.name),
                }),
            }
        }
        t.spec.sets.addr_sets.insert(a.name.clone(), list);
    }
    let keys: std::collections::BTreeSet<String> = t
        .spec
        .datapaths
        .iter()
        .map(|d| d.tunnel_key.to_string())
        .collect();
    let all_keys: std::collections::BTreeSet<String> = sb
        .datapath_binding()
        .values()
        .map(|d| d.tunnel_key.to_string())
        .collect();
    for pg in sb.port_group().values() {
        let (name, ours) = match pg.name.split_once('_') {
            Some((k, rest))
                if !rest.is_empty()
                    && k.bytes().all(|b| b.is_ascii_digit())
                    && all_keys.contains(k) =>
            {
                (rest.to_string(), keys.contains(k))
            }
            _ => (pg.name.clone(), true),
        };
        let entry = t.spec.sets.port_groups.entry(name).or_default();
        if ours {
            entry.extend(pg.ports.iter().cloned());
            entry.sort();
            entry.dedup();
        }
    }
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
