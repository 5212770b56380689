//! `acl-broken`: an ACL whose match does not parse, and what northd did with it.
//!
//! The match is parsed as holdfast northd's ACL stage parses it (`hf_expr::parse_match` with
//! the shared symbol table, in `hf_northd::ls::index`). What happened is read from SB:
//! - holdfast northd marks the flows it emits for a broken drop/reject ACL with
//!   `Logical_Flow.external_ids:hf-acl-broken` = `last-good` (its last good version, kept
//!   while northd runs) or `fail-closed` (everything in the ACL's port group or switch, in its
//!   direction, dropped); those flows carry the ACL's `stage-hint` (its UUID's first 8 hex
//!   digits);
//! - without a marker, under holdfast northd (flows carry `hf-flow-id`) the ACL is left out;
//!   under real `ovn-northd` the text is written and every `ovn-controller` rejects the flow,
//!   so the ACL is absent too. An absent allow ACL lets lower-priority ACLs decide; an absent
//!   drop/reject ACL opens what it closed.
//!
//! Severity: error for drop/reject, warning for the allow actions.
//!
//! What it does not do: type-check against anything but OVN's symbol table, or check ACLs for
//! meaning (shadowed or redundant rules).

use std::collections::BTreeMap;

use hf_model::{NbSnapshot, SbSnapshot, nb};

use crate::{Code, Finding, Severity, Source, excerpt};

/// The SB marker key: holdfast northd's own constant, so the two cannot drift apart.
pub use hf_northd::render::ACL_BROKEN_KEY as MARKER;

/// Adds the findings; `holdfast`: holdfast northd wrote SB's flows.
pub fn check(nb: &NbSnapshot, sb: &SbSnapshot, holdfast: bool, out: &mut Vec<Finding>) {
    let symtab = hf_expr::SymbolTable::shared();
    // ACL UUID -> what holds it.
    let mut holders: BTreeMap<uuid::Uuid, Vec<String>> = BTreeMap::new();
    for ls in nb.logical_switch().values() {
        for a in &ls.acls {
            holders
                .entry(a.uuid())
                .or_default()
                .push(format!("switch {}", ls.name));
        }
    }
    for pg in nb.port_group().values() {
        for a in &pg.acls {
            holders
                .entry(a.uuid())
                .or_default()
                .push(format!("port group {}", pg.name));
        }
    }
    // stage-hint -> markers.
    let mut markers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for f in sb.logical_flow().values() {
        if let (Some(m), Some(h)) = (f.external_ids.get(MARKER), f.external_ids.get("stage-hint")) {
            markers.entry(h.as_str()).or_default().push(m.as_str());
        }
    }
    for acl in nb.acl().values() {
        let Err(e) = hf_expr::parse_match(symtab, &acl.match_) else {
            continue;
        };
        let Some(held) = holders.get(&acl.uuid) else {
            // Not referenced: the server garbage-collects it (ACL is not a root table).
            continue;
        };
        let drop = matches!(acl.action, nb::AclAction::Drop | nb::AclAction::Reject);
        let dir = acl.direction.as_str();
        let holder = held.join(", ");
        let hint = acl.uuid.simple().to_string();
        let hint = hint.get(..8).unwrap_or_default();
        let marks = markers.get(hint).cloned().unwrap_or_default();
        let what = if marks.contains(&"fail-closed") {
            format!(
                "holdfast northd fails closed: it drops all {dir} traffic of {holder} until the match is fixed"
            )
        } else if marks.contains(&"last-good") {
            "holdfast northd keeps the ACL's last good version while it runs; a restarted northd fails closed (drops all of its traffic in this direction)".to_string()
        } else if holdfast {
            if drop {
                "holdfast northd leaves it out, so what it dropped is allowed".to_string()
            } else {
                "holdfast northd leaves it out, so lower-priority ACLs decide what it allowed"
                    .to_string()
            }
        } else if drop {
            "ovn-northd writes the text and every ovn-controller rejects the flow, so the ACL is absent and what it dropped is allowed (a drop ACL that is absent opens the port group)".to_string()
        } else {
            "ovn-northd writes the text and every ovn-controller rejects the flow, so the ACL is absent and lower-priority ACLs decide what it allowed".to_string()
        };
        out.push(Finding {
            code: Code::AclBroken,
            severity: if drop {
                Severity::Error
            } else {
                Severity::Warning
            },
            source: Source::Nb,
            table: "ACL".into(),
            row: acl.uuid.to_string(),
            name: format!(
                "{holder} {dir} priority {} {} `{}`",
                acl.priority,
                acl.action.as_str(),
                excerpt(&acl.match_, 50)
            ),
            message: format!(
                "the match of this {} ACL does not parse: {e}; {what}",
                acl.action.as_str()
            ),
            why: if drop {
                "traffic the ACL is meant to stop may pass, or traffic it should not touch is dropped".into()
            } else {
                "traffic the ACL is meant to allow may be dropped by lower-priority ACLs".into()
            },
            fix: format!(
                "correct the match (`holdfast lflow normalize '<match>'` shows the error), e.g. `ovn-nbctl set ACL {} match='\"...\"'`",
                acl.uuid
            ),
        });
    }
}
