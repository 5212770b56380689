//! Skipping a test that cannot run here, or failing it under CI.

use crate::cmd::have_tool;

/// Whether this is a CI run (`CI=true`): there, a missing dependency fails the test.
pub fn is_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Say why `test` cannot run: under `CI=true` this panics with the reason; otherwise it prints
/// one line `SKIP: <test>: <why>` on stderr and returns false (so `if !... { return }` reads
/// well).
pub fn skip_or_fail(test: &str, why: &str) -> bool {
    let msg = format!("{test}: {why}");
    if is_ci() {
        panic!("{msg} (CI=true: a missing dependency fails, never skips)");
    }
    eprintln!("SKIP: {msg}");
    false
}

/// Whether the process is root, as network namespaces need. When it is not: see
/// [`skip_or_fail`]; `why` says what the test needs root for.
pub fn require_root(test: &str, why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip_or_fail(
        test,
        &format!("needs root ({why}); run it as root, as CI does"),
    )
}

/// Whether every tool is on PATH (or, for an absolute path, exists). When one is missing: see
/// [`skip_or_fail`].
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !have_tool(t)).collect();
    if missing.is_empty() {
        return true;
    }
    skip_or_fail(
        test,
        &format!(
            "missing {} (scripts/test.sh installs them)",
            missing.join(", ")
        ),
    )
}
