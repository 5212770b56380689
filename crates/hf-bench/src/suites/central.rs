//! Real OVN daemons for the suites that measure against them (`ovsdb-client`, `trace`,
//! `controller`): the gen_topo "central" they start (hf-testkit's [`Central`]: NB and SB
//! `ovsdb-server`s, `ovn-northd` compiling the NB that `shared/bench/gen_topo.py` builds), and
//! the daemon helpers of hf-testkit under the names the suites use. It does not measure
//! anything itself.
// A benchmark is an I/O shell: it starts processes.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use hf_testkit::ovn::{CENTRAL_TOOLS, OvsdbServer};
pub use hf_testkit::ovn::{Central, Daemon, NB_SCHEMA, SB_SCHEMA, daemon_args};

use crate::Report;

/// The Python OVS's IDL and gen_topo run under.
pub const PYTHON: &str = "/usr/bin/python3";

/// Runs `cmd` (however long it takes: a benchmark's commands may run for minutes); its
/// stdout, or an error with its status and stderr.
pub fn ok(cmd: &mut Command) -> anyhow::Result<String> {
    Ok(hf_testkit::cmd::run(cmd, hf_testkit::cmd::NO_TIMEOUT)?)
}

/// A `Vm*` figure (`VmHWM`, `VmRSS`) of the process whose pid is in `pidfile`, in MB.
pub fn vm_mb(pidfile: &Path, field: &str) -> anyhow::Result<f64> {
    let pid = hf_testkit::cmd::read_pidfile(pidfile)
        .with_context(|| format!("no pid in {}", pidfile.display()))?;
    Ok(hf_testkit::ovn::vm_bytes(pid, field)? as f64 / (1024.0 * 1024.0))
}

/// A fresh `ovsdb-server` on `dir/name.db` with `schema`; the daemon and its remote.
pub fn server(dir: &Path, name: &str, schema: &str) -> anyhow::Result<(Daemon, String)> {
    let s = OvsdbServer::create(dir, name, Path::new(schema))?;
    Ok((s.daemon, s.remote))
}

/// `shared/bench/gen_topo.py`, when it is there.
pub fn gen_topo() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // crates/hf-bench → the repository → its sibling `shared/`.
    [
        manifest.join("../../../shared/bench/gen_topo.py"),
        PathBuf::from("/work/shared/bench/gen_topo.py"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// Runs gen_topo.py (`topo`) for the `n` switches × `p` ports topology on `central`'s NB and
/// waits until its northd has compiled it into the SB.
pub fn build_topo(
    report: &Report,
    central: &Central,
    topo: &Path,
    n: usize,
    p: usize,
) -> anyhow::Result<()> {
    let t = Instant::now();
    ok(Command::new(PYTHON).arg(topo).args([
        "--n",
        &n.to_string(),
        "--p",
        &p.to_string(),
        "--db",
        &central.nb,
        "--wait",
        "sb",
    ]))
    .context("gen_topo.py")?;
    report.note(&format!(
        "built the {n}x{p} NB and ovn-northd's SB in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// NB and SB ovsdb-servers holding the gen_topo NB of `n` switches × `p` ports and the SB real
/// ovn-northd compiled from it (northd is stopped once the SB is written). `Ok(None)` (with a
/// `skipped:` note) when a tool in `tools` (besides the ones this needs) or gen_topo.py is
/// missing. Stopped and removed on drop.
///
/// `HF_BENCH_CENTRAL_DBS=<dir>` serves copies of `<dir>/nb.db` and `<dir>/sb.db` (an earlier
/// run's), for comparing builds on the same data without rebuilding it for minutes.
pub fn gen_topo_central(
    report: &mut Report,
    n: usize,
    p: usize,
    tools: &[&str],
) -> anyhow::Result<Option<Central>> {
    for tool in CENTRAL_TOOLS.iter().chain(tools) {
        if !hf_testkit::cmd::have_tool(tool) {
            report.note(&format!(
                "skipped: {tool} is not installed (needs OVN's packages)"
            ));
            return Ok(None);
        }
    }
    let Some(topo) = gen_topo() else {
        report.note("skipped: shared/bench/gen_topo.py not found");
        return Ok(None);
    };
    if let Some(src) = std::env::var_os("HF_BENCH_CENTRAL_DBS") {
        let src = PathBuf::from(src);
        let c = Central::from_files(&src.join("nb.db"), &src.join("sb.db"))
            .context("HF_BENCH_CENTRAL_DBS")?;
        report.note(&format!("reused the databases in {}", src.display()));
        return Ok(Some(c));
    }
    let mut c = Central::start()?;
    build_topo(report, &c, &topo, n, p)?;
    c.stop_northd()?;
    Ok(Some(c))
}
