//! `holdfast check`: the preflight. The I/O shell around `hf-check`: reads NB and SB once with
//! the client replica (any OVSDB server, holdfast's or OVN's, any northd's output), reads the
//! zone map of each live `holdfast datapath` named with `--datapath-ctl` over its unixctl
//! socket (`ct-zone-list`), runs the checks and prints the findings.
//!
//! What it does not do: write anything, follow changes (it reads one consistent view and
//! exits), or talk to controllers (a controller's socket is refused by name: `check` reads
//! the datapath, which owns the zone map).

// The shell is where sockets and the clock live.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use hf_check::{LiveDatapath, Options, Severity};
use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb_net::client::{Client, Config, Event, Model, TableSelect, parse_remotes};

use crate::db::shell::{ClientTlsArgs, check_db_remotes, ovn_rundir};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// rustc-style diagnostics and a summary line.
    Text,
    /// One JSON object: `{"findings": [{"code", "severity", "table", "row", "name",
    /// "message", "why", "fix", "db"}], "errors": N, "warnings": N}`.
    Json,
}

/// `holdfast check`.
#[derive(Debug, Args)]
#[command(after_long_help = FINDINGS_HELP)]
pub struct CheckArgs {
    /// The NB database: unix:PATH, tcp:IP:PORT or ssl:IP:PORT, a comma list for a cluster
    /// (default: $OVN_NB_DB, else unix:$OVN_RUNDIR/ovnnb_db.sock).
    #[arg(long = "ovnnb-db", env = "OVN_NB_DB", value_name = "DATABASE")]
    pub ovnnb_db: Option<String>,
    /// The SB database (default: $OVN_SB_DB, else unix:$OVN_RUNDIR/ovnsb_db.sock).
    #[arg(long = "ovnsb-db", env = "OVN_SB_DB", value_name = "DATABASE")]
    pub ovnsb_db: Option<String>,
    /// A live `holdfast datapath`'s unixctl socket: its zone map is checked too. Repeat for
    /// several chassis. A controller's socket is refused.
    #[arg(long = "datapath-ctl", value_name = "PATH")]
    pub datapath_ctl: Vec<PathBuf>,
    /// Exit with status 1 on warnings too.
    #[arg(long)]
    pub strict: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Seconds to wait for each database (and datapath) before giving up (exit status 2).
    #[arg(long, default_value_t = 10.0, value_name = "SECS", value_parser = parse_secs)]
    pub timeout: f64,
    /// TLS for ssl: databases (OVN's -p/-c/-C).
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

const FINDINGS_HELP: &str = "\
Findings (code, severity):
  snat-internal        error    a NAT row rewrites traffic to a cluster-internal destination
                                (switch subnets, router networks, chassis encap IPs, NB_Global
                                options:holdfast-cluster-cidrs); scoped rows (exempted_ext_ips,
                                allowed_ext_ips, match) are not reported (incident A)
  flow-unparsable      error    flows a chassis cannot parse at its negotiated feature level,
                                and flow errors chassis report in Chassis_Private (incident B)
  chassis-unsupported  error    a chassis below northd's oldest served level (incident B)
  zone-risk            warning  a router requests zone 0 or shares a requested zone (incident D)
                       error    a live datapath maps zone 0, or one zone to two names
  egress-moves         warning  a port's SNAT address changes when it moves chassis (incident C)
  acl-broken           error    a drop/reject ACL whose match does not parse
                       warning  an allow ACL whose match does not parse

Exit status: 0 no errors (and no warnings with --strict), 1 findings, 2 a database or datapath
could not be read.";

/// `--timeout`: seconds, a number (`nan` would make the clamp below, and then `Duration`,
/// panic).
/// A `--timeout` value: a finite number of seconds, at least 0 (NaN or infinity would panic
/// in `Duration::from_secs_f64`). Shared with `holdfast trace`.
pub(crate) fn parse_secs(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..1e9).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds (e.g. 10 or 0.5; 0 to 1e9)"
        )),
    }
}

/// Exit status when the inputs cannot be read.
const UNREADABLE: u8 = 2;

/// Runs the command; the exit code.
pub fn run(a: CheckArgs) -> anyhow::Result<std::process::ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let read = rt.block_on(read_all(&a));
    let (nb, sb, live) = match read {
        Ok(x) => x,
        Err(e) => {
            eprintln!("holdfast check: {e:#}");
            return Ok(std::process::ExitCode::from(UNREADABLE));
        }
    };
    let findings = hf_check::check(&nb, &sb, &live, &Options::default());
    let mut out = std::io::stdout().lock();
    match a.format {
        Format::Text => out.write_all(hf_check::render_text(&findings).as_bytes())?,
        Format::Json => writeln!(out, "{}", hf_check::render_json(&findings))?,
    }
    out.flush()?;
    let fail = findings
        .iter()
        .any(|f| f.severity == Severity::Error || a.strict);
    Ok(std::process::ExitCode::from(u8::from(fail)))
}

fn default_db(arg: &Option<String>, sock: &str) -> String {
    arg.clone()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| format!("unix:{}", ovn_rundir().join(sock).display()))
}

async fn read_all(a: &CheckArgs) -> anyhow::Result<(NbSnapshot, SbSnapshot, Vec<LiveDatapath>)> {
    let nb_db = default_db(&a.ovnnb_db, "ovnnb_db.sock");
    let sb_db = default_db(&a.ovnsb_db, "ovnsb_db.sock");
    let (nb_remotes, sb_remotes) = (parse_remotes(&nb_db), parse_remotes(&sb_db));
    check_db_remotes("--ovnnb-db", &nb_remotes)?;
    check_db_remotes("--ovnsb-db", &sb_remotes)?;
    let all: Vec<String> = nb_remotes.iter().chain(&sb_remotes).cloned().collect();
    let tls = a.tls.client_config(&all)?;
    let timeout = Duration::from_secs_f64(a.timeout.clamp(0.1, 3600.0));
    let nb_tables = [
        "NB_Global",
        "Logical_Switch",
        "Logical_Switch_Port",
        "Logical_Router",
        "Logical_Router_Port",
        "Logical_Router_Static_Route",
        "Gateway_Chassis",
        "HA_Chassis_Group",
        "NAT",
        "Address_Set",
        "Port_Group",
        "ACL",
    ];
    let sb_tables = [
        "Chassis",
        "Chassis_Private",
        "Encap",
        "Datapath_Binding",
        "Port_Binding",
        "Port_Group",
        "Logical_Flow",
    ];
    let (nb, sb) = tokio::join!(
        load::<NbSnapshot>(
            "--ovnnb-db",
            &nb_db,
            nb_remotes,
            &nb_tables,
            tls.clone(),
            timeout
        ),
        load::<SbSnapshot>("--ovnsb-db", &sb_db, sb_remotes, &sb_tables, tls, timeout),
    );
    let mut live = Vec::new();
    for p in &a.datapath_ctl {
        live.push(read_datapath(p, timeout)?);
    }
    Ok((nb?, sb?, live))
}

/// One consistent copy of `tables` of the database at `remotes`.
async fn load<M: Model + Clone>(
    option: &str,
    db: &str,
    remotes: Vec<String>,
    tables: &[&str],
    tls: Option<std::sync::Arc<hf_ovsdb_net::tls::ClientConfig>>,
    timeout: Duration,
) -> anyhow::Result<M> {
    let cfg = Config {
        tables: tables.iter().map(|t| TableSelect::all(t)).collect(),
        leader_only: false,
        backoff_min_ms: 50,
        backoff_max_ms: 500,
        ..Config::default()
    };
    let (client, mut events) = Client::<M>::spawn_tls(remotes, cfg, tls);
    let ok = client.wait_until(timeout, |r| r.is_synced()).await;
    let mut why = None;
    while let Ok(e) = events.try_recv() {
        match e {
            Event::Disconnected { reason, .. } => why = Some(reason),
            Event::Warning(w) => eprintln!("holdfast check: {option} {db}: {w}"),
            _ => {}
        }
    }
    if !ok {
        bail!(
            "{option} {db}: cannot read the database within {:.1}s ({})",
            timeout.as_secs_f64(),
            why.unwrap_or_else(|| "no answer".into())
        );
    }
    Ok(client.with(|r| r.model().clone()))
}

/// One unixctl request (OVS's JSON-RPC over a unix socket); the reply's text.
fn unixctl(path: &std::path::Path, method: &str, timeout: Duration) -> anyhow::Result<String> {
    let mut s = std::os::unix::net::UnixStream::connect(path)
        .with_context(|| format!("--datapath-ctl {}: cannot connect", path.display()))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let req = serde_json::json!({"method": method, "params": [], "id": 0});
    s.write_all(req.to_string().as_bytes())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = s
            .read(&mut chunk)
            .with_context(|| format!("--datapath-ctl {}: no answer to {method}", path.display()))?;
        if n == 0 {
            bail!(
                "--datapath-ctl {}: the socket closed before answering {method}",
                path.display()
            );
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut it = serde_json::Deserializer::from_slice(&buf).into_iter::<serde_json::Value>();
        match it.next() {
            Some(Ok(v)) => {
                if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
                    bail!("--datapath-ctl {}: {method}: {e}", path.display());
                }
                return Ok(v
                    .get("result")
                    .and_then(|r| r.as_str())
                    .unwrap_or_default()
                    .to_string());
            }
            Some(Err(e)) if e.is_eof() => continue,
            Some(Err(e)) => bail!(
                "--datapath-ctl {}: not a unixctl answer: {e}",
                path.display()
            ),
            None => continue,
        }
    }
}

/// A datapath's zone map.
fn read_datapath(path: &std::path::Path, timeout: Duration) -> anyhow::Result<LiveDatapath> {
    let cmds = unixctl(path, "list-commands", timeout)?;
    let has = |c: &str| cmds.lines().any(|l| l.split_whitespace().next() == Some(c));
    if !has("datapath/migrations") && !has("dpctl/dump-conntrack") {
        bail!(
            "--datapath-ctl {}: not a holdfast datapath's socket (it has no datapath/* commands{}); name the datapath's --unixctl socket",
            path.display(),
            if has("ct-zone-list") {
                "; a controller's?"
            } else {
                ""
            }
        );
    }
    let text = unixctl(path, "ct-zone-list", timeout)?;
    let mut zones = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut w = line.split_whitespace();
        match (
            w.next(),
            w.next().and_then(|z| z.parse::<u16>().ok()),
            w.next(),
        ) {
            (Some(name), Some(zone), None) => zones.push((name.to_string(), zone)),
            _ => bail!(
                "--datapath-ctl {}: ct-zone-list line {}: {line:?} is not \"NAME ZONE\"",
                path.display(),
                i + 1
            ),
        }
    }
    Ok(LiveDatapath {
        name: path.display().to_string(),
        zones,
    })
}
