//! Real OVN daemons for the suites that measure against them (`ovsdb-client`, `trace`): a
//! `--detach --pidfile --unixctl --log-file` daemon stopped by pid on drop, and the gen_topo
//! "central" both suites start (NB and SB `ovsdb-server`s, `ovn-northd` compiling the NB that
//! `shared/bench/gen_topo.py` builds). It does not measure anything itself.
// A benchmark is an I/O shell: it starts processes.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::Report;

/// The Python OVS's IDL and gen_topo run under.
pub const PYTHON: &str = "/usr/bin/python3";
/// Real OVN 23.03's NB schema.
pub const NB_SCHEMA: &str = "/usr/share/ovn/ovn-nb.ovsschema";
/// Real OVN 23.03's SB schema.
pub const SB_SCHEMA: &str = "/usr/share/ovn/ovn-sb.ovsschema";

/// A daemon started with `--detach --pidfile`, stopped on drop.
pub struct Daemon(pub PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(p) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").arg(p.trim()).status();
        }
    }
}

/// Runs `cmd`; its stdout, or an error with its stderr.
pub fn ok(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The options every OVS/OVN daemon gets: detached, files `dir/name.{pid,log,ctl}`.
pub fn daemon_args(dir: &Path, name: &str) -> Vec<String> {
    vec![
        "--detach".into(),
        "--no-chdir".into(),
        format!("--pidfile={}", dir.join(format!("{name}.pid")).display()),
        format!("--log-file={}", dir.join(format!("{name}.log")).display()),
        format!("--unixctl={}", dir.join(format!("{name}.ctl")).display()),
    ]
}

/// A fresh `ovsdb-server` on `dir/name.db` with `schema`; the daemon and its remote.
pub fn server(dir: &Path, name: &str, schema: &str) -> anyhow::Result<(Daemon, String)> {
    let db = dir.join(format!("{name}.db"));
    ok(Command::new("ovsdb-tool")
        .arg("create")
        .arg(&db)
        .arg(schema))?;
    let sock = dir.join(format!("{name}.sock"));
    ok(Command::new("ovsdb-server")
        .args(daemon_args(dir, name))
        .arg(format!("--remote=punix:{}", sock.display()))
        .arg(&db))?;
    Ok((
        Daemon(dir.join(format!("{name}.pid"))),
        format!("unix:{}", sock.display()),
    ))
}

fn gen_topo() -> Option<PathBuf> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // crates/hf-bench → the repository → its sibling `shared/`.
    [
        manifest.join("../../../shared/bench/gen_topo.py"),
        PathBuf::from("/work/shared/bench/gen_topo.py"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// NB and SB ovsdb-servers holding the gen_topo NB and the SB real ovn-northd compiled from
/// it (northd is stopped once the SB is written). Stopped and removed on drop.
pub struct Central {
    /// NB remote (`unix:...`).
    pub nb: String,
    /// SB remote (`unix:...`).
    pub sb: String,
    _servers: [Daemon; 2],
    /// The temporary directory (last field: dropped after the daemons are stopped).
    pub dir: tempfile::TempDir,
}

impl Central {
    /// Builds the `n` switches × `p` ports topology. `Ok(None)` (with a `skipped:` note) when
    /// a tool in `tools` (besides the ones this needs) or gen_topo.py is missing.
    pub fn gen_topo(
        report: &mut Report,
        n: usize,
        p: usize,
        tools: &[&str],
    ) -> anyhow::Result<Option<Central>> {
        for tool in ["ovsdb-server", "ovsdb-tool", "ovn-northd", "ovn-nbctl"]
            .iter()
            .chain(tools)
        {
            if Command::new("sh")
                .arg("-c")
                .arg(format!("command -v {tool}"))
                .output()
                .map_or(true, |o| !o.status.success())
            {
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
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        // Reuse databases built by an earlier run (copies of its `nb.db` and `sb.db`), for
        // comparing builds on the same data without rebuilding it for minutes.
        if let Some(src) = std::env::var_os("HF_BENCH_CENTRAL_DBS") {
            let src = PathBuf::from(src);
            let mut servers = Vec::new();
            for name in ["nb", "sb"] {
                let db = d.join(format!("{name}.db"));
                std::fs::copy(src.join(format!("{name}.db")), &db)
                    .with_context(|| format!("HF_BENCH_CENTRAL_DBS: {name}.db"))?;
                let sock = d.join(format!("{name}.sock"));
                ok(Command::new("ovsdb-server")
                    .args(daemon_args(d, name))
                    .arg(format!("--remote=punix:{}", sock.display()))
                    .arg(&db))?;
                servers.push((
                    Daemon(d.join(format!("{name}.pid"))),
                    format!("unix:{}", sock.display()),
                ));
            }
            report.note(&format!("reused the databases in {}", src.display()));
            let (sb_server, sb) = servers.pop().context("sb")?;
            let (nb_server, nb) = servers.pop().context("nb")?;
            return Ok(Some(Central {
                nb,
                sb,
                _servers: [nb_server, sb_server],
                dir,
            }));
        }
        let (nb_server, nb) = server(d, "nb", NB_SCHEMA)?;
        let (sb_server, sb) = server(d, "sb", SB_SCHEMA)?;
        ok(Command::new("ovn-northd")
            .args(daemon_args(d, "northd"))
            .arg(format!("--ovnnb-db={nb}"))
            .arg(format!("--ovnsb-db={sb}")))?;
        let northd = Daemon(d.join("northd.pid"));
        let t = Instant::now();
        ok(Command::new(PYTHON)
            .arg(&topo)
            .arg("--n")
            .arg(n.to_string())
            .arg("--p")
            .arg(p.to_string())
            .arg("--db")
            .arg(&nb)
            .arg("--wait")
            .arg("sb"))?;
        report.note(&format!(
            "built the {n}x{p} NB and ovn-northd's SB in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        drop(northd);
        Ok(Some(Central {
            nb,
            sb,
            _servers: [nb_server, sb_server],
            dir,
        }))
    }
}
