//! Golden tables in the spirit of OVN's action tests (`tests/ovn.at`): input → normalised form,
//! printed form, or the exact error (class, span, message, help).
//!
//! Each file under `tests/golden/` is a list of cases:
//!
//! ```text
//! ## match tcp.dst == 80
//! <expected lines>
//!
//! ## actions@hf-1 ct_commit { ct_mark.blocked = 1; };
//! <expected lines>
//! ```
//!
//! Modes: `match` (normalised form), `actions` (printed form), `match@SET` / `actions@SET`
//! (parse under a feature set; `ok` or the error), `lower@SET` (the lowered actions). Errors print
//! as `error[class] @start..end: message` and an optional `help: ...` line. `HF_BLESS=1` rewrites
//! the files with the actual output (review the diff before committing).

use hf_expr::features::{self, FeatureSet};
use hf_expr::normalize::{Limits, Normalizer, Sets};
use hf_expr::{
    ParseError, SymbolTable, parse_actions, parse_actions_with, parse_match, parse_match_with,
    printer,
};
use std::fmt::Write;
use std::path::Path;

fn err_text(e: &ParseError) -> String {
    let mut s = format!(
        "error[{}] @{}..{}: {}",
        e.kind.name(),
        e.span.start,
        e.span.end,
        e.message
    );
    if let Some(h) = &e.help {
        let _ = write!(s, "\nhelp: {h}");
    }
    s
}

fn run_case(mode: &str, input: &str) -> String {
    let symtab = SymbolTable::shared();
    let (mode, set) = match mode.split_once('@') {
        Some((m, s)) => (
            m,
            Some(FeatureSet::parse(s).expect("feature set in golden file")),
        ),
        None => (mode, None),
    };
    match (mode, set) {
        ("match", None) => match parse_match(symtab, input) {
            Ok(e) => {
                match Normalizer::new(symtab, Limits::default()).normalize(&e, &Sets::default()) {
                    Ok(n) => n.to_string().trim_end().to_string(),
                    Err(e) => err_text(&e),
                }
            }
            Err(e) => err_text(&e),
        },
        ("actions", None) => match parse_actions(symtab, input) {
            Ok(a) if a.is_empty() => "formats as: <empty: drops the packet>".into(),
            Ok(a) => format!("formats as: {}", printer::actions_to_string(&a)),
            Err(e) => err_text(&e),
        },
        ("match", Some(s)) => match parse_match_with(symtab, input, &s) {
            Ok(_) => "ok".into(),
            Err(e) => err_text(&e),
        },
        ("actions", Some(s)) => match parse_actions_with(symtab, input, &s) {
            Ok(_) => "ok".into(),
            Err(e) => err_text(&e),
        },
        ("lower", Some(s)) => {
            match parse_actions(symtab, input).and_then(|a| features::lower_actions(&a, &s)) {
                Ok(a) => format!("lowers to: {}", printer::actions_to_string(&a)),
                Err(e) => err_text(&e),
            }
        }
        ("lowermatch", Some(s)) => {
            match parse_match(symtab, input).and_then(|e| features::lower_expr(&e, &s)) {
                Ok(e) => format!("lowers to: {e}"),
                Err(e) => err_text(&e),
            }
        }
        _ => panic!("unknown golden mode `{mode}`"),
    }
}

struct Case {
    header: String,
    mode: String,
    input: String,
    expected: String,
}

fn parse_file(text: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            let (mode, input) = h.split_once(' ').unwrap_or((h, ""));
            cases.push(Case {
                header: line.to_string(),
                mode: mode.to_string(),
                input: input.to_string(),
                expected: String::new(),
            });
        } else if let Some(c) = cases.last_mut()
            && !line.is_empty()
        {
            if !c.expected.is_empty() {
                c.expected.push('\n');
            }
            c.expected.push_str(line);
        }
    }
    cases
}

#[test]
fn golden_tables() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let bless = std::env::var("HF_BLESS").is_ok_and(|v| v == "1");
    let mut total = 0;
    let mut errors = 0;
    let mut failures = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("golden dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read golden file");
        let prologue: String = text
            .lines()
            .take_while(|l| !l.starts_with("## "))
            .map(|l| format!("{l}\n"))
            .collect();
        let mut blessed = prologue;
        for c in parse_file(&text) {
            total += 1;
            let actual = run_case(&c.mode, &c.input);
            if actual.starts_with("error[") {
                errors += 1;
            }
            if actual != c.expected {
                failures.push(format!(
                    "{}: {}\n--- expected\n{}\n--- actual\n{}",
                    path.display(),
                    c.header,
                    c.expected,
                    actual
                ));
            }
            let _ = write!(blessed, "{}\n{}\n\n", c.header, actual);
        }
        if bless {
            std::fs::write(&path, blessed.trim_end().to_string() + "\n").expect("bless");
        }
    }
    assert!(total >= 150, "only {total} golden cases");
    assert!(errors >= 50, "only {errors} error cases");
    assert!(
        failures.is_empty() || bless,
        "{} of {total} golden cases differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
