//! `holdfast lflow check|normalize`, over a reader and a writer (the binary only parses
//! arguments and opens files).

use crate::features::{self, FeatureSet, OvnRelease};
use crate::lflow_list::parse_dump;
use crate::normalize::{Limits, Normalizer, Sets};
use crate::{SymbolTable, actions, parser, typecheck};
use std::collections::BTreeMap;
use std::io::{self, Read, Write};

/// The outcome of checking one flow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowReport {
    /// The oldest OVN release whose language covers the flow (when it parses).
    pub release: Option<OvnRelease>,
    /// The first error, rendered, if any.
    pub error: Option<String>,
}

/// Checks one flow's match and actions under `allowed` (all features when `None`).
pub fn check_flow(
    symtab: &SymbolTable,
    match_text: &str,
    action_text: &str,
    allowed: Option<&FeatureSet>,
) -> FlowReport {
    let m = parser::parse_match_text(match_text)
        .and_then(|e| typecheck::check_match(symtab, &e).map(|()| e));
    let a = actions::parse_actions_text(action_text)
        .and_then(|a| typecheck::check_actions(symtab, &a).map(|()| a));
    let (e, a) = match (m, a) {
        (Ok(e), Ok(a)) => (e, a),
        (m, a) => {
            // Report both halves when both fail.
            let mut error = String::new();
            if let Err(err) = m {
                error.push_str(&err.render(match_text, "match"));
            }
            if let Err(err) = a {
                error.push_str(&err.render(action_text, "action"));
            }
            return FlowReport {
                release: None,
                error: Some(error),
            };
        }
    };
    let uses = [features::used_by_expr(&e), features::used_by_actions(&a)].concat();
    let release = features::required_release(&uses);
    let error = allowed.and_then(|set| {
        if let Err(err) = features::check_expr(&e, set) {
            return Some(err.render(match_text, "match"));
        }
        features::check_actions(&a, set)
            .err()
            .map(|err| err.render(action_text, "action"))
    });
    FlowReport {
        release: Some(release),
        error,
    }
}

/// `holdfast lflow check`: reads an `ovn-sbctl lflow-list` dump from `input`, reports every flow
/// that fails to parse, type-check or fit `features`, and ends with a count. Returns the exit
/// status: 0 when every flow passes, 1 when any fails, 2 on a usage error.
pub fn check(
    features: Option<&str>,
    mut input: impl Read,
    out: &mut impl Write,
) -> io::Result<i32> {
    let allowed = match features.map(FeatureSet::parse).transpose() {
        Ok(a) => a,
        Err(msg) => {
            writeln!(out, "error: --features: {msg}")?;
            return Ok(2);
        }
    };
    let mut text = String::new();
    if let Err(e) = input.read_to_string(&mut text) {
        writeln!(out, "error: cannot read the dump: {e}")?;
        return Ok(2);
    }
    let symtab = SymbolTable::shared();
    let (flows, dump_errors) = parse_dump(&text);
    let mut errors = 0usize;
    for e in &dump_errors {
        errors += 1;
        writeln!(out, "error: {e}")?;
    }
    let mut by_release: BTreeMap<OvnRelease, usize> = BTreeMap::new();
    for f in &flows {
        let r = check_flow(symtab, &f.match_text, &f.actions, allowed.as_ref());
        if let Some(rel) = r.release {
            *by_release.entry(rel).or_default() += 1;
        }
        if let Some(err) = r.error {
            errors += 1;
            writeln!(
                out,
                "flow at line {}: datapath \"{}\" {} table={} ({}) priority={}",
                f.line, f.datapath, f.pipeline, f.table, f.stage, f.priority
            )?;
            for l in err.lines() {
                writeln!(out, "    {l}")?;
            }
        }
    }
    if !by_release.is_empty() {
        let parts: Vec<String> = by_release
            .iter()
            .map(|(r, n)| format!("{r}: {n}"))
            .collect();
        writeln!(
            out,
            "flows by the OVN release that introduced what they use: {}",
            parts.join(", ")
        )?;
    }
    let under = features
        .map(|f| format!(" under features {f}"))
        .unwrap_or_default();
    writeln!(out, "checked {} flows{under}: {errors} errors", flows.len())?;
    Ok(i32::from(errors > 0))
}

/// `holdfast lflow normalize 'MATCH'`: prints the normalised form, or the error. Returns the exit
/// status.
pub fn normalize(match_text: &str, out: &mut impl Write) -> io::Result<i32> {
    let symtab = SymbolTable::shared();
    let e = match crate::parse_match(symtab, match_text) {
        Ok(e) => e,
        Err(err) => {
            write!(out, "{}", err.render(match_text, "match"))?;
            return Ok(1);
        }
    };
    match Normalizer::new(symtab, Limits::default()).normalize(&e, &Sets::default()) {
        Ok(n) => {
            write!(out, "{n}")?;
            Ok(0)
        }
        Err(err) => {
            write!(out, "{}", err.render(match_text, "match"))?;
            Ok(1)
        }
    }
}
