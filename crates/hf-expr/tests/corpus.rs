//! The real corpus: every logical flow real ovn-northd 23.03 emitted for a realistic NB (built by
//! `tests/ovn_corpus.sh`) parses, type-checks, normalises and round-trips through the printer.
//! The committed dumps are checked always; the live test regenerates one with real OVN.

use hf_expr::features::{self, FeatureSet, OvnRelease};
use hf_expr::lflow_list::{Flow, parse_dump};
use hf_expr::normalize::{Limits, Normalizer, Sets};
use hf_expr::{SymbolTable, actions, parse_actions, parse_match, parser, printer};
use std::path::Path;
use std::process::Command;

const FIXTURES: &[&str] = &[
    "ovn-23.03-lflows.txt",
    "ovn-23.03-lflows-legacy-chassis.txt",
];

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Checks every flow; returns the failures as readable lines.
fn check_all(flows: &[Flow]) -> Vec<String> {
    let symtab = SymbolTable::shared();
    let mut norm = Normalizer::new(symtab, Limits::default());
    let mut bad = Vec::new();
    for f in flows {
        let whe = format!(
            "line {} ({} {} table={})",
            f.line, f.datapath, f.stage, f.table
        );
        match parse_match(symtab, &f.match_text) {
            Ok(e) => {
                let printed = e.to_string();
                match parser::parse_match_text(&printed) {
                    Ok(again) if again == e => {}
                    other => bad.push(format!("{whe}: match round trip: {printed} -> {other:?}")),
                }
                if let Err(err) = norm.normalize(&e, &Sets::default()) {
                    bad.push(format!("{whe}: normalize: {err}"));
                }
            }
            Err(err) => bad.push(format!(
                "{whe}: match\n{}",
                err.render(&f.match_text, "match")
            )),
        }
        match parse_actions(symtab, &f.actions) {
            Ok(a) => {
                let printed = printer::actions_to_string(&a);
                match actions::parse_actions_text(&printed) {
                    Ok(again) if again == a => {}
                    other => bad.push(format!("{whe}: actions round trip: {printed} -> {other:?}")),
                }
            }
            Err(err) => bad.push(format!(
                "{whe}: actions\n{}",
                err.render(&f.actions, "action")
            )),
        }
    }
    bad
}

#[test]
fn committed_dumps_parse_typecheck_normalise_and_round_trip() {
    for name in FIXTURES {
        let (flows, errors) = parse_dump(&fixture(name));
        assert!(errors.is_empty(), "{name}: unreadable lines: {errors:?}");
        assert!(flows.len() > 800, "{name}: only {} flows", flows.len());
        let bad = check_all(&flows);
        assert!(
            bad.is_empty(),
            "{name}: {} failures:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
}

#[test]
fn every_corpus_flow_is_classified_by_ovn_release() {
    let symtab = SymbolTable::shared();
    let mut seen = std::collections::BTreeSet::new();
    for name in FIXTURES {
        let (flows, _) = parse_dump(&fixture(name));
        for f in &flows {
            let e = parse_match(symtab, &f.match_text).expect("match");
            let a = parse_actions(symtab, &f.actions).expect("actions");
            let uses = [features::used_by_expr(&e), features::used_by_actions(&a)].concat();
            let rel = features::required_release(&uses);
            assert!(
                rel <= OvnRelease::new(23, 3),
                "line {}: needs {rel}",
                f.line
            );
            // The classification is exact: the flow passes under its release and, when it needs
            // more than the oldest, fails under the release just before.
            let ok = FeatureSet::ovn(rel);
            assert!(
                features::check_expr(&e, &ok).is_ok() && features::check_actions(&a, &ok).is_ok()
            );
            if let Some(u) = uses.iter().max_by_key(|u| u.feature.ovn) {
                let mut older = FeatureSet::ovn(rel);
                let _ = u;
                older = FeatureSet::parse(
                    &older
                        .iter()
                        .filter(|f| f.ovn < rel)
                        .map(|f| f.name)
                        .collect::<Vec<_>>()
                        .join(","),
                )
                .expect("names");
                assert!(
                    features::check_expr(&e, &older).is_err()
                        || features::check_actions(&a, &older).is_err(),
                    "line {}: passes below {rel}",
                    f.line
                );
            }
            seen.insert(rel);
        }
    }
    // A 23.03 corpus uses features of many releases, including the block form of ct_commit.
    assert!(seen.contains(&OvnRelease::new(20, 9)), "{seen:?}");
    assert!(seen.len() >= 5, "{seen:?}");
}

fn ovn_available() -> bool {
    [
        "ovsdb-server",
        "ovsdb-tool",
        "ovn-northd",
        "ovn-nbctl",
        "ovn-sbctl",
    ]
    .iter()
    .all(|b| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {b}"))
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn live_ovn_23_03_corpus() {
    if !ovn_available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but real OVN (ovsdb-server, ovn-northd, ovn-nbctl, ovn-sbctl) is missing"
        );
        eprintln!("skipping live_ovn_23_03_corpus: real OVN binaries are not installed");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ovn_corpus.sh");
    for variant in ["", "legacy"] {
        let out = Command::new("bash")
            .arg(&script)
            .arg(variant)
            .output()
            .expect("run ovn_corpus.sh");
        assert!(
            out.status.success(),
            "ovn_corpus.sh {variant} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let (flows, errors) = parse_dump(&text);
        assert!(errors.is_empty(), "unreadable lines: {errors:?}");
        assert!(flows.len() > 800, "only {} flows", flows.len());
        let bad = check_all(&flows);
        assert!(
            bad.is_empty(),
            "{} failures:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
}
