//! Every logical flow real ovn-northd 23.03 writes compiles: for the parity topologies and for
//! the committed corpus's NB (`crates/hf-expr/tests/ovn_corpus.sh`, with chassis advertising
//! 23.03's features and with legacy chassis), the SB is replicated with the client replica,
//! translated for no chassis (every port resident) and for one chassis, and compiled with
//! `Program::compile`: no per-row diagnostic, no per-flow error. The test prints how often each
//! action and function occurs in the flows compiled.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hf_controller::translate::{TranslateOptions, translate};
use hf_model::SbSnapshot;
use hf_ovsdb_net::client::{Client, Config};

/// Replicate the whole SB at `remote`.
pub fn load_sb(remote: &str) -> SbSnapshot {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (c, _ev) = Client::<SbSnapshot>::spawn(
            vec![remote.to_string()],
            Config {
                leader_only: false,
                ..Config::default()
            },
        );
        assert!(
            c.wait_until(Duration::from_secs(60), |r| r.is_synced())
                .await,
            "the SB replica of {remote} never synced"
        );
        c.with(|r| r.model().clone())
    })
}

/// Count the actions (statement heads) and functions (`x = f(...)`) in an actions text.
pub fn count_actions(actions: &str, counts: &mut BTreeMap<String, usize>) {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    // Split into statements at `;`, `{` and `}` outside quotes and parentheses.
    let mut cur = String::new();
    let (mut in_quote, mut parens) = (false, 0usize);
    let mut stmts = Vec::new();
    for ch in actions.chars() {
        match ch {
            '"' => in_quote = !in_quote,
            '(' if !in_quote => parens += 1,
            ')' if !in_quote => parens = parens.saturating_sub(1),
            ';' | '{' | '}' if !in_quote && parens == 0 => {
                stmts.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    stmts.push(cur);
    for s in stmts {
        let s = s.trim();
        if s.is_empty() {
            continue;
        }
        if s.starts_with("/*") {
            continue;
        }
        if s.ends_with("--") {
            *counts.entry("(decrement)".into()).or_default() += 1;
            continue;
        }
        if s.contains("<->") {
            *counts.entry("(exchange)".into()).or_default() += 1;
            continue;
        }
        if let Some((_, rhs)) = s.split_once('=') {
            let f = ident(rhs.trim());
            if !f.is_empty() && rhs.trim()[f.len()..].starts_with('(') {
                *counts.entry(format!("{f}()")).or_default() += 1;
            } else {
                *counts.entry("(assignment)".into()).or_default() += 1;
            }
            continue;
        }
        if s.contains("<->") {
            *counts.entry("(exchange)".into()).or_default() += 1;
            continue;
        }
        let a = ident(s);
        if !a.is_empty() && !a.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            *counts.entry(a).or_default() += 1;
        }
    }
}

/// Translate and compile `sb`; return the failures (diagnostics and flow errors) as text and
/// add the actions of every flow to `counts`.
pub fn compile_all(
    what: &str,
    sb: &SbSnapshot,
    chassis: Option<&str>,
    counts: &mut BTreeMap<String, usize>,
) -> (usize, Vec<String>) {
    let t = translate(
        sb,
        &TranslateOptions {
            chassis: chassis.map(str::to_string),
        },
    );
    let mut bad: Vec<String> = t
        .diagnostics
        .iter()
        .map(|d| format!("{what} (chassis {chassis:?}): diagnostic {d:?}"))
        .collect();
    match hf_pipeline::Program::compile(&t.spec) {
        Ok((prog, errs)) => {
            bad.extend(
                errs.iter()
                    .map(|e| format!("{what} (chassis {chassis:?}): {e}")),
            );
            for lf in sb.logical_flow().values() {
                count_actions(&lf.actions, counts);
            }
            (prog.flow_count(), bad)
        }
        Err(e) => {
            bad.push(format!("{what} (chassis {chassis:?}): program error: {e}"));
            (0, bad)
        }
    }
}

/// The corpus NB built by hf-expr's script, its SB copied out (`HF_CORPUS_SB_COPY`) and served
/// by a real ovsdb-server.
pub fn corpus_sb(dir: &Path, variant: &str) -> crate::common::OvsdbServer {
    let script = crate::common::repo().join("crates/hf-expr/tests/ovn_corpus.sh");
    let copy = dir.join(format!("corpus-{variant}.db"));
    // The script prints lflow-list (large): discard it rather than fill a pipe nobody reads.
    let status = Command::new("bash")
        .arg(&script)
        .args((variant == "legacy").then_some("legacy"))
        .env("HF_CORPUS_SB_COPY", &copy)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run ovn_corpus.sh");
    assert!(status.success(), "ovn_corpus.sh {variant} failed: {status}");
    crate::common::OvsdbServer::serve(dir, &format!("corpus-{variant}"), &[copy], &[]).unwrap()
}
