//! An [`Outcome`] as text (ovn-trace's `--detailed`, `--summary` and `--minimal` styles) and
//! as JSON of the shape scripts rely on (documented in the README):
//!
//! ```json
//! {"verdict": {"outputs": ["vm2"], "nat": [{"action": "ct_snat_in_czone", "field": "ip4.src",
//!   "value": "198.51.100.51"}], "drop": null},
//!  "stages": [{"datapath": "sw0", "pipeline": "ingress", "table": 0, "stage":
//!   "ls_in_check_port_sec", "priority": 50, "match": "...", "actions": "...", "uuid": "...",
//!   "flow_id": "...", "stage_hint": "...", "nb": "...", "effects": ["..."]}, ...]}
//! ```
//!
//! `outputs` is empty exactly when `drop` is an object `{"stage": ..., "reason": ...}`.
//!
//! What it does not do: look NB rows up (the caller passes a lookup from stage-hint to a
//! description, as ovn-detrace does).

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::engine::{Outcome, stage_of};

/// Which text styles to print (ovn-trace prints each asked for, detailed when none is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Styles {
    /// `--detailed`.
    pub detailed: bool,
    /// `--summary`.
    pub summary: bool,
    /// `--minimal`.
    pub minimal: bool,
}

/// A lookup from a flow's stage-hint to its NB origin (`ACL from-lport 1001 ...`).
pub type NbLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn nb_of(hint: Option<&String>, nb: Option<NbLookup<'_>>) -> Option<String> {
    let h = hint?;
    nb.and_then(|f| f(h))
}

/// The JSON document.
pub fn json(o: &Outcome, nb: Option<NbLookup<'_>>) -> Value {
    let stages: Vec<Value> = o
        .trace
        .records
        .iter()
        .map(|r| {
            let f = r.flow.as_ref();
            json!({
                "datapath": r.datapath,
                "pipeline": r.pipeline,
                "table": r.table,
                "stage": stage_of(r),
                "priority": f.map(|f| f.priority),
                "match": f.map(|f| f.matches.as_str()),
                "actions": f.map(|f| f.actions.as_str()),
                "uuid": f.and_then(|f| f.sb_uuid.as_deref()),
                "flow_id": f.map(|f| f.id.to_string()),
                "stage_hint": f.and_then(|f| f.stage_hint.as_deref()),
                "nb": nb_of(f.and_then(|f| f.stage_hint.as_ref()), nb),
                "effects": r.effects,
            })
        })
        .collect();
    json!({
        "verdict": {
            "outputs": o.outputs.iter().map(|x| x.port.as_str()).collect::<Vec<_>>(),
            "nat": o.nat.iter().map(|n| json!({
                "action": n.action, "field": n.field, "value": n.value,
            })).collect::<Vec<_>>(),
            "drop": o.drop.as_ref().map(|d| json!({"stage": d.stage, "reason": d.reason})),
        },
        "stages": stages,
    })
}

fn short(u: Option<&str>) -> String {
    u.map(|u| u.get(..8).unwrap_or(u).to_string())
        .unwrap_or_else(|| "-".into())
}

fn verdict_lines(o: &Outcome, out: &mut String, indent: &str) {
    for x in &o.outputs {
        let via = match (&x.chassis_name, x.chassis) {
            (Some(n), _) => format!(" via tunnel to chassis {n}"),
            (None, Some(c)) => format!(" via tunnel to chassis #{c}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{indent}output(\"{}\"); /* datapath \"{}\"{via} */",
            x.port, x.datapath
        );
    }
    for n in &o.nat {
        let _ = writeln!(out, "{indent}{}: {} = {};", n.action, n.field, n.value);
    }
    if let Some(d) = &o.drop {
        let _ = writeln!(out, "{indent}drop; /* {}: {} */", d.stage, d.reason);
    }
}

/// The text, in each style asked for (detailed when none is).
pub fn text(o: &Outcome, styles: Styles, nb: Option<NbLookup<'_>>) -> String {
    let mut s = styles;
    if !s.detailed && !s.summary && !s.minimal {
        s.detailed = true;
    }
    let multiple = u8::from(s.detailed) + u8::from(s.summary) + u8::from(s.minimal) > 1;
    let mut out = format!("# {}\n", o.microflow);
    if s.detailed {
        if multiple {
            out.push_str("# Detailed trace.\n");
        }
        detailed(o, nb, &mut out);
    }
    if s.summary {
        if multiple {
            out.push_str("# Summary trace.\n");
        }
        summary(o, &mut out);
    }
    if s.minimal {
        if multiple {
            out.push_str("# Minimal trace.\n");
        }
        verdict_lines(o, &mut out, "");
    }
    out
}

fn segments(o: &Outcome) -> Vec<(String, &'static str, Vec<&hf_pipeline::TraceRecord>)> {
    let mut segs: Vec<(String, &'static str, Vec<&hf_pipeline::TraceRecord>)> = Vec::new();
    for r in &o.trace.records {
        match segs.last_mut() {
            Some((d, p, v)) if *d == r.datapath && *p == r.pipeline => v.push(r),
            _ => segs.push((r.datapath.clone(), r.pipeline, vec![r])),
        }
    }
    segs
}

/// An effect that only restates the flow's actions in the pipeline's internal form (register
/// writes, port and pipeline changes, emits): left out of the text, kept in the JSON.
fn is_raw_op(e: &str) -> bool {
    [
        "Some(",
        "EnterEgress",
        "EnterDp",
        "Emit(",
        "SetPort",
        "Set {",
        "Move",
    ]
    .iter()
    .any(|p| e.starts_with(p))
}

/// `ct zone 10: Some(CtLb { ... }) (then recirculate)` → `ct zone 10 (then recirculate)`:
/// the flow's actions already say which conntrack action ran.
fn short_effect(e: &str) -> String {
    match (e.strip_prefix("ct zone "), e.find(": Some(")) {
        (Some(_), Some(i)) => {
            let tail = if e.ends_with(" (then recirculate)") {
                " (then recirculate)"
            } else {
                ""
            };
            format!("{}{tail}", &e[..i])
        }
        _ => e.to_string(),
    }
}

fn detailed(o: &Outcome, nb: Option<NbLookup<'_>>, out: &mut String) {
    for (i, (dp, pipe, recs)) in segments(o).into_iter().enumerate() {
        let head = if i == 0 {
            format!("{pipe}(dp=\"{dp}\", inport=\"{}\")", o.inport)
        } else {
            format!("{pipe}(dp=\"{dp}\")")
        };
        let _ = writeln!(out, "{head}\n{}", "-".repeat(head.len()));
        for r in recs {
            match &r.flow {
                Some(f) => {
                    let _ = writeln!(
                        out,
                        "{:2}. {}: {}, priority {}, uuid {}",
                        r.table,
                        stage_of(r),
                        f.matches,
                        f.priority,
                        short(f.sb_uuid.as_deref())
                    );
                    if let Some(n) = nb_of(f.stage_hint.as_ref(), nb) {
                        let _ = writeln!(out, "    /* {n} */");
                    }
                    let _ = writeln!(out, "    {}", f.actions);
                }
                None => {
                    let _ = writeln!(out, "{:2}. {}: no match", r.table, stage_of(r));
                }
            }
            for e in r.effects.iter().filter(|e| !is_raw_op(e)) {
                let _ = writeln!(out, "    * {}", short_effect(e));
            }
        }
        out.push('\n');
    }
    verdict_lines(o, out, "");
}

fn summary(o: &Outcome, out: &mut String) {
    let mut depth = 0usize;
    for (i, (dp, pipe, recs)) in segments(o).into_iter().enumerate() {
        let pad = "    ".repeat(depth);
        if i == 0 {
            let _ = writeln!(out, "{pad}{pipe}(dp=\"{dp}\", inport=\"{}\") {{", o.inport);
        } else {
            let _ = writeln!(out, "{pad}{pipe}(dp=\"{dp}\") {{");
        }
        // As ovn-trace's summary: stages that only continue are left out.
        for r in recs {
            if let Some(f) = &r.flow
                && f.actions.trim() != "next;"
            {
                let _ = writeln!(out, "{pad}    {}", f.actions);
            }
        }
        depth += 1;
    }
    let pad = "    ".repeat(depth);
    verdict_lines(o, out, &pad);
    for d in (0..depth).rev() {
        let _ = writeln!(out, "{}}};", "    ".repeat(d));
    }
}
