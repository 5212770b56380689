//! Findings as text (rustc's diagnostic shape, no colour) and as JSON.
//!
//! Text, per finding:
//! ```text
//! error[snat-internal]: snat on gateway router GR_node1 (on chassis node1) rewrites ...
//!   --> NB NAT 6f0c...-... (GR_node1 snat 10.129.0.9 -> 10.6.158.12)
//!   = note: internal peers then see 10.6.158.12 instead of the real source, ...
//!   = help: set exempted_ext_ips to an address set holding 10.6.158.0/24 ...
//! ```
//! then a blank line, and at the end one summary line ([`summary`]).
//!
//! JSON: `{"findings": [{"code", "severity", "table", "row", "name", "message", "why",
//! "fix", "db"}], "errors": N, "warnings": N}`.

use serde_json::{Value, json};

use crate::{Finding, counts};

/// The summary line: `check: 2 errors, 1 warning` or `check: no findings`.
pub fn summary(findings: &[Finding]) -> String {
    let (e, w) = counts(findings);
    if e + w == 0 {
        return "check: no findings".to_string();
    }
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    format!("check: {}, {}", plural(e, "error"), plural(w, "warning"))
}

/// The text report, ending with the summary line and a newline.
pub fn render_text(findings: &[Finding]) -> String {
    let mut s = String::new();
    for f in findings {
        s.push_str(&format!(
            "{}[{}]: {}\n  --> {} {} {} ({})\n  = note: {}\n  = help: {}\n\n",
            f.severity.as_str(),
            f.code.as_str(),
            f.message,
            f.source.as_str(),
            f.table,
            f.row,
            f.name,
            f.why,
            f.fix
        ));
    }
    s.push_str(&summary(findings));
    s.push('\n');
    s
}

/// The JSON report.
pub fn render_json(findings: &[Finding]) -> Value {
    let (e, w) = counts(findings);
    json!({
        "findings": findings.iter().map(|f| json!({
            "code": f.code.as_str(),
            "severity": f.severity.as_str(),
            "db": f.source.as_str(),
            "table": f.table,
            "row": f.row,
            "name": f.name,
            "message": f.message,
            "why": f.why,
            "fix": f.fix,
        })).collect::<Vec<_>>(),
        "errors": e,
        "warnings": w,
    })
}
