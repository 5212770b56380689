//! `flow-unparsable` and `chassis-unsupported` (incident B).
//!
//! Each chassis' feature set is what `hf_northd::features::negotiate` computes from its
//! `Chassis` row (`other_config:holdfast-features`, or OVN's own flags for a real
//! `ovn-controller`), so check and northd agree exactly. Every SB `Logical_Flow` is parsed
//! once with hf-expr (as a controller does) and its features collected; a chassis cannot parse
//! a flow that does not parse at all, or that uses a feature outside its set, or (SB layout)
//! that sits in a `Logical_DP_Group` without `logical-dp-groups`, or names a port group SB has
//! only per datapath without `port-group-per-datapath`. Scope: every flow, not only the
//! chassis' local datapaths (any datapath becomes local when a port binds there).
//!
//! What chassis report themselves is read too: `Chassis_Private.external_ids`
//! `holdfast-flow-errors=<n>` and `holdfast-flow-error-N=<cause> (<n> flows)` (holdfast
//! controllers write them).
//!
//! A chassis below the oldest served level is reported once as `chassis-unsupported` (northd
//! freezes its datapaths) and not again as `flow-unparsable`; northd's own report
//! (`NB_Global.external_ids:holdfast-unsupported-chassis:<name>`) is read too.

use std::collections::BTreeSet;

use hf_expr::FeatureSet;
use hf_model::{NbSnapshot, SbSnapshot, sb};
use hf_northd::features::{REPORT_PREFIX, SbChassisView, Source as FeatSource, negotiate};

use crate::{Code, Finding, Options, Severity, Source, excerpt};

/// One flow, parsed once.
struct Parsed<'a> {
    flow: &'a sb::LogicalFlow,
    /// Why nobody can parse it.
    error: Option<String>,
    /// (feature name, the text around its use).
    uses: Vec<(&'static str, String)>,
    /// Port groups it names.
    port_groups: BTreeSet<String>,
}

fn around(text: &str, start: usize, end: usize) -> String {
    let s = text
        .char_indices()
        .map(|(i, _)| i)
        .take_while(|i| *i <= start.saturating_sub(20))
        .last()
        .unwrap_or(0);
    let tail = text.get(s..).unwrap_or(text);
    let shown = excerpt(tail, (end.saturating_sub(s)).clamp(30, 70));
    if s > 0 { format!("...{shown}") } else { shown }
}

fn parse(flow: &sb::LogicalFlow) -> Parsed<'_> {
    let symtab = hf_expr::SymbolTable::shared();
    let mut p = Parsed {
        flow,
        error: None,
        uses: Vec::new(),
        port_groups: BTreeSet::new(),
    };
    match hf_expr::parse_match(symtab, &flow.match_) {
        Ok(e) => {
            for u in hf_expr::features::used_by_expr(&e) {
                p.uses.push((
                    u.feature.name,
                    around(&flow.match_, u.span.start, u.span.end),
                ));
                if u.feature.name == "port-group"
                    && let Some(name) = flow.match_.get(u.span.start..u.span.end)
                {
                    p.port_groups
                        .insert(name.trim_start_matches('@').to_string());
                }
            }
        }
        Err(e) => p.error = Some(format!("match `{}`: {e}", excerpt(&flow.match_, 60))),
    }
    match hf_expr::parse_actions(symtab, &flow.actions) {
        Ok(a) => {
            for u in hf_expr::features::used_by_actions(&a) {
                p.uses.push((
                    u.feature.name,
                    around(&flow.actions, u.span.start, u.span.end),
                ));
            }
        }
        Err(e) => {
            if p.error.is_none() {
                p.error = Some(format!("actions `{}`: {e}", excerpt(&flow.actions, 60)));
            }
        }
    }
    p
}

/// Why a chassis with `set` cannot use `p`, if it cannot.
fn cause(p: &Parsed<'_>, set: &FeatureSet, pg_names: &BTreeSet<&str>) -> Option<String> {
    if let Some(e) = &p.error {
        return Some(format!("does not parse: {e}"));
    }
    if let Some((name, at)) = p.uses.iter().find(|(n, _)| !set.contains(n)) {
        return Some(format!(
            "uses {} at `{at}`",
            hf_northd::features::describe(name)
        ));
    }
    if p.flow.logical_dp_group.is_some() && !set.contains("logical-dp-groups") {
        return Some(format!(
            "is written for a datapath group: {}",
            hf_northd::features::describe("logical-dp-groups")
        ));
    }
    if !set.contains("port-group-per-datapath")
        && let Some(pg) = p
            .port_groups
            .iter()
            .find(|g| !pg_names.contains(g.as_str()))
    {
        return Some(format!(
            "names port group @{pg}, which SB has only per datapath: {}",
            hf_northd::features::describe("port-group-per-datapath")
        ));
    }
    None
}

fn stage(f: &sb::LogicalFlow) -> String {
    let pipe = match &f.pipeline {
        sb::LogicalFlowPipeline::Ingress => "ingress",
        sb::LogicalFlowPipeline::Egress => "egress",
        sb::LogicalFlowPipeline::Other(s) => s.as_str(),
        _ => "?",
    };
    match f.external_ids.get("stage-name") {
        Some(s) => format!("{s} ({pipe} table {})", f.table_id),
        None => format!("{pipe} table {}", f.table_id),
    }
}

/// Adds the findings; `holdfast_northd`: holdfast northd wrote SB's flows.
pub fn check(
    nb: &NbSnapshot,
    sb: &SbSnapshot,
    opts: &Options,
    holdfast_northd: bool,
    out: &mut Vec<Finding>,
) {
    let view = SbChassisView::from_snapshot(sb);
    let neg = negotiate(&view, nb, &opts.policy);
    let mut unsupported: BTreeSet<String> = BTreeSet::new();
    for (name, c) in &neg.chassis {
        let Some(reason) = &c.unsupported else {
            continue;
        };
        unsupported.insert(name.clone());
        out.push(unsupported_finding(
            "Chassis",
            Source::Sb,
            c.uuid.to_string(),
            name,
            reason,
        ));
    }
    if let Some(g) = nb.nb_global().values().next() {
        for (k, reason) in &g.external_ids {
            let Some(name) = k.strip_prefix(REPORT_PREFIX) else {
                continue;
            };
            if unsupported.insert(name.to_string()) {
                let (table, source, row) = match neg.chassis.get(name) {
                    Some(c) => ("Chassis", Source::Sb, c.uuid.to_string()),
                    None => ("NB_Global", Source::Nb, g.uuid.to_string()),
                };
                out.push(unsupported_finding(
                    table,
                    source,
                    row,
                    name,
                    &format!("northd reports: {reason}"),
                ));
            }
        }
    }

    let parsed: Vec<Parsed<'_>> = sb.logical_flow().values().map(parse).collect();
    let pg_names: BTreeSet<&str> = sb.port_group().values().map(|g| g.name.as_str()).collect();
    // Flows nobody can parse, when there is no chassis to name.
    let counted: Vec<_> = neg
        .chassis
        .iter()
        .filter(|(n, c)| c.source != FeatSource::Remote && !unsupported.contains(*n))
        .collect();
    if counted.is_empty() {
        let bad: Vec<&Parsed<'_>> = parsed.iter().filter(|p| p.error.is_some()).collect();
        if let Some(first) = bad.first() {
            out.push(Finding {
                code: Code::FlowUnparsable,
                severity: Severity::Error,
                source: Source::Sb,
                table: "Logical_Flow".into(),
                row: first.flow.uuid.to_string(),
                name: stage(first.flow),
                message: format!(
                    "{} of {} flows do not parse, e.g. in {}: {}",
                    bad.len(),
                    parsed.len(),
                    stage(first.flow),
                    first.error.clone().unwrap_or_default()
                ),
                why: "every chassis will reject them, so whatever they carry (ACLs, conntrack, forwarding) is missing".into(),
                fix: "find the NB row behind the flow (its stage-hint) and correct it; `holdfast lflow check` explains each error".into(),
            });
        }
    }
    // One pass per distinct feature set.
    let mut groups: Vec<(FeatureSet, Vec<&str>)> = Vec::new();
    for (name, c) in &counted {
        match groups.iter_mut().find(|(s, _)| *s == c.features) {
            Some((_, v)) => v.push(name.as_str()),
            None => groups.push((c.features, vec![name.as_str()])),
        }
    }
    for (set, chassis) in &groups {
        let failing: Vec<(&Parsed<'_>, String)> = parsed
            .iter()
            .filter_map(|p| cause(p, set, &pg_names).map(|c| (p, c)))
            .collect();
        let Some((first, why)) = failing.first() else {
            continue;
        };
        for name in chassis {
            let Some(c) = neg.chassis.get(*name) else {
                continue;
            };
            let from = match &c.source {
                FeatSource::Advertised => format!(
                    "other_config:holdfast-features={}",
                    view.chassis
                        .iter()
                        .find(|r| r.uuid == c.uuid)
                        .and_then(|r| r.other_config.get("holdfast-features"))
                        .map(String::as_str)
                        .unwrap_or_default()
                ),
                FeatSource::OvnFlags(rel) => format!("ovn-controller flags: OVN {rel}"),
                FeatSource::Remote => "remote".into(),
            };
            let broken = failing.iter().filter(|(p, _)| p.error.is_some()).count();
            let fix = if broken == failing.len() {
                "these flows parse for no chassis: correct the NB rows behind them (a flow's external_ids:stage-hint is its NB row's UUID prefix); `holdfast lflow check` explains each error".to_string()
            } else if neg.ignored {
                "remove NB_Global options:ignore_chassis_features=true so northd lowers its flows to what every chassis understands (`ovn-nbctl remove NB_Global . options ignore_chassis_features`), or upgrade this chassis' controller".to_string()
            } else if holdfast_northd {
                "holdfast northd lowers flows to what every chassis advertises: check that it runs and has seen this chassis (`ovn-appctl -t ovn-northd status`), or upgrade this chassis' controller".to_string()
            } else {
                "upgrade this chassis' controller: the northd that wrote these flows (not holdfast's) does not negotiate holdfast feature levels".to_string()
            };
            out.push(Finding {
                code: Code::FlowUnparsable,
                severity: Severity::Error,
                source: Source::Sb,
                table: "Chassis".into(),
                row: c.uuid.to_string(),
                name: (*name).to_string(),
                message: format!(
                    "chassis {name} ({from}) cannot parse {} of {} flows{}, e.g. {} priority {}{} (match `{}`, actions `{}`): the flow {why}",
                    failing.len(),
                    parsed.len(),
                    if broken > 0 && broken < failing.len() {
                        format!(" ({broken} of them parse for no chassis)")
                    } else {
                        String::new()
                    },
                    stage(first.flow),
                    first.flow.priority,
                    first
                        .flow
                        .external_ids
                        .get("stage-hint")
                        .map(|h| format!(" from NB row {h}..."))
                        .unwrap_or_default(),
                    excerpt(&first.flow.match_, 60),
                    excerpt(&first.flow.actions, 60),
                ),
                why: "its controller leaves those flows out (or keeps an older version), so the ACLs and conntrack state they carry vanish on that chassis (incident B)".into(),
                fix,
            });
        }
    }
    // What chassis report.
    for cp in sb.chassis_private().values() {
        // A count the controller reports (0: none, or not a number).
        let count = |k: &str| -> u64 {
            cp.external_ids
                .get(k)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let n = count("holdfast-flow-errors");
        if n == 0 {
            continue;
        }
        let mut causes: Vec<(u32, &str)> = cp
            .external_ids
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("holdfast-flow-error-")
                    .and_then(|i| i.parse::<u32>().ok())
                    .map(|i| (i, v.as_str()))
            })
            .collect();
        causes.sort();
        let first = causes
            .first()
            .map(|(_, c)| format!(", first cause: {c}"))
            .unwrap_or_default();
        // How the controller runs them (`docs/flow-identity.md`): last good versions, failed
        // closed (dropped), whole datapaths held at the flows they ran.
        let kept = count("holdfast-flow-errors-last-good");
        let closed = count("holdfast-flow-errors-failed-closed");
        let held = count("holdfast-flow-errors-held-datapaths");
        let mut how = Vec::new();
        if kept > 0 {
            how.push(format!("{kept} run their last good version"));
        }
        if closed > 0 {
            how.push(format!("{closed} failed closed (dropped)"));
        }
        if held > 0 {
            how.push(format!(
                "{held} datapath{} held at the flows {} ran (NB changes to {} wait)",
                if held == 1 { "" } else { "s" },
                if held == 1 { "it" } else { "they" },
                if held == 1 { "it" } else { "them" },
            ));
        }
        let how = if how.is_empty() {
            String::new()
        } else {
            format!(": {}", how.join("; "))
        };
        out.push(Finding {
            code: Code::FlowUnparsable,
            severity: Severity::Error,
            source: Source::Sb,
            table: "Chassis_Private".into(),
            row: cp.uuid.to_string(),
            name: cp.name.clone(),
            message: format!(
                "chassis {} reports {n} flows it could not compile ({} causes){how}{first}",
                cp.name,
                causes.len().max(1)
            ),
            why: "those flows run in their last good version or not at all, so changes to them do not reach that chassis (incident B)".into(),
            fix: format!(
                "see the controller's log on {} for each cause; upgrade it or correct the NB rows behind the flows",
                cp.name
            ),
        });
    }
}

fn unsupported_finding(
    table: &str,
    source: Source,
    row: String,
    name: &str,
    reason: &str,
) -> Finding {
    Finding {
        code: Code::ChassisUnsupported,
        severity: Severity::Error,
        source,
        table: table.into(),
        row,
        name: name.to_string(),
        message: format!("chassis {name} is {reason}"),
        why: "northd freezes the flows of every datapath it runs, so NB changes (new ports, ACLs, NAT) do not reach them until it is upgraded (incident B)".into(),
        fix: format!("upgrade the controller on {name} to a release that advertises at least the oldest served level (hf-1)"),
    }
}
