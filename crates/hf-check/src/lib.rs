//! `hf-check`: the core of `holdfast check`, the preflight. Sans-I/O.
//!
//! Layer: above `hf-model` (the NB/SB vocabulary), `hf-expr` (the logical-flow language and its
//! feature registry) and `hf-northd` (feature negotiation, address parsers); below the
//! `holdfast check` shell, the sandbox's stories and the incident tests, which read databases
//! and sockets and hand this crate what they read.
//!
//! What it does: [`check`] takes an NB snapshot, an SB snapshot and the zone maps of live
//! datapaths, and returns [`Finding`]s: what in them would break established connections, each
//! naming the row, why it matters and how to fix it. [`render_text`] prints them like rustc's
//! diagnostics, [`render_json`] as one JSON object. The findings, by [`Code`]:
//!
//! | code | severity | incident | what |
//! |---|---|---|---|
//! | `snat-internal` | error | A | a NAT row that rewrites traffic to a cluster-internal destination ([`snat`]) |
//! | `flow-unparsable` | error | B | flows a chassis cannot parse, computed and as chassis report them ([`flows`]) |
//! | `chassis-unsupported` | error | B | a chassis below northd's oldest served level ([`flows`]) |
//! | `zone-risk` | warning (NB), error (live) | D | zone 0 requested or mapped, a zone shared by two names ([`zones`]) |
//! | `egress-moves` | warning | C | a port whose SNAT source changes when it moves to another chassis ([`egress`]) |
//! | `acl-broken` | error (drop/reject), warning (allow) | B | an ACL whose match does not parse, and what northd did with it ([`acl`]) |
//!
//! What it does not do: read databases or sockets (the shell does), decide exit statuses (the
//! shell does, from [`Severity`]), change anything, or re-implement northd or the controller: it
//! calls `hf_northd::features::negotiate` and `hf_expr`'s parser and feature checks, so it agrees
//! with them by construction. Its routing model (see [`topo`]) is deliberately small: connected
//! networks and static routes of the main route table; router policies are not followed.
//!
//! Invariants: no input makes it panic; the output is a function of the inputs (rows are walked
//! in the snapshots' `BTreeMap` order), so two runs on the same databases print the same text.

pub mod acl;
pub mod egress;
pub mod eval;
pub mod flows;
pub mod net;
mod render;
pub mod snat;
pub mod topo;
pub mod zones;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use hf_model::{NbSnapshot, SbSnapshot};

pub use render::{render_json, render_text, summary};

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Code {
    /// A NAT row rewrites traffic to a cluster-internal destination (incident A).
    SnatInternal,
    /// Flows some chassis cannot parse (incident B).
    FlowUnparsable,
    /// A chassis below northd's oldest served feature level (incident B).
    ChassisUnsupported,
    /// A conntrack zone identity at risk (incident D).
    ZoneRisk,
    /// A port whose egress address changes when it moves (incident C).
    EgressMoves,
    /// An ACL whose match does not parse.
    AclBroken,
}

impl Code {
    /// Every code, in the order findings are produced.
    pub const ALL: [Code; 6] = [
        Code::SnatInternal,
        Code::FlowUnparsable,
        Code::ChassisUnsupported,
        Code::ZoneRisk,
        Code::EgressMoves,
        Code::AclBroken,
    ];

    /// The code as printed (`snat-internal`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::SnatInternal => "snat-internal",
            Code::FlowUnparsable => "flow-unparsable",
            Code::ChassisUnsupported => "chassis-unsupported",
            Code::ZoneRisk => "zone-risk",
            Code::EgressMoves => "egress-moves",
            Code::AclBroken => "acl-broken",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// Connections break (or will, on the next change): exit status 1.
    Error,
    /// A risk: exit status 1 only with `--strict`.
    Warning,
}

impl Severity {
    /// `error` or `warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// Where a finding's row lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// The northbound database.
    Nb,
    /// The southbound database.
    Sb,
    /// A live datapath's zone map.
    Datapath,
}

impl Source {
    /// `NB`, `SB` or `datapath`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Nb => "NB",
            Source::Sb => "SB",
            Source::Datapath => "datapath",
        }
    }
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What it is about.
    pub code: Code,
    /// How bad.
    pub severity: Severity,
    /// The database (or live datapath) of the row.
    pub source: Source,
    /// The row's table (`NAT`, `Chassis`, ...; `zone map` for a live datapath).
    pub table: String,
    /// The row's UUID (a live datapath: its unixctl socket).
    pub row: String,
    /// A human name for the row (`GR_node1 snat 10.129.0.9 -> 10.6.158.12`).
    pub name: String,
    /// What is wrong, with an example.
    pub message: String,
    /// Why it matters, in one sentence.
    pub why: String,
    /// How to fix it.
    pub fix: String,
}

/// One live datapath's facts, as its unixctl socket gives them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveDatapath {
    /// How to name it in findings (its unixctl socket path).
    pub name: String,
    /// `ct-zone-list`: every (zone name, zone) in its zone map, as listed (a name may appear
    /// twice only if the datapath is broken; that is reported too).
    pub zones: Vec<(String, u16)>,
}

/// Settings.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Options {
    /// Feature negotiation's policy (the oldest served level); the default is holdfast
    /// northd's.
    pub policy: hf_northd::features::Policy,
}

/// Every finding about `nb`, `sb` and `live`, in [`Code::ALL`] order and, within a code, in a
/// fixed order (rows by UUID; ports by switch and port name).
pub fn check(
    nb: &NbSnapshot,
    sb: &SbSnapshot,
    live: &[LiveDatapath],
    opts: &Options,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let topo = topo::Topo::new(nb, sb);
    let holdfast = written_by_holdfast_northd(sb);
    snat::check(&topo, &mut out);
    flows::check(nb, sb, opts, holdfast, &mut out);
    zones::check(nb, sb, live, &mut out);
    egress::check(&topo, &mut out);
    acl::check(nb, sb, holdfast, &mut out);
    out
}

/// Holdfast northd wrote SB's flows (they carry `external_ids:hf-flow-id`); otherwise real
/// `ovn-northd` did (or there are none).
fn written_by_holdfast_northd(sb: &SbSnapshot) -> bool {
    sb.logical_flow()
        .values()
        .any(|f| f.external_ids.contains_key("hf-flow-id"))
}

/// Counts by severity: (errors, warnings).
pub fn counts(findings: &[Finding]) -> (usize, usize) {
    let e = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    (e, findings.len() - e)
}

/// Findings by code (for callers that want one kind).
pub fn by_code(findings: &[Finding]) -> BTreeMap<Code, Vec<&Finding>> {
    let mut m: BTreeMap<Code, Vec<&Finding>> = BTreeMap::new();
    for f in findings {
        m.entry(f.code).or_default().push(f);
    }
    m
}

/// Shortens `s` to at most `n` characters, marking the cut with `...`.
pub(crate) fn excerpt(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}
