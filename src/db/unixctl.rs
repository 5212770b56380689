//! The unixctl server of `holdfast db` / `ovsdb-server`: JSON-RPC 1.0 over a unix socket, as
//! `ovs-appctl`/`ovn-appctl` speak it (OVS's lib/unixctl.c): a request
//! `{"method": CMD, "params": [ARG...], "id": N}` gets `{"id": N, "result": TEXT, "error":
//! null}` or `{"id": N, "error": TEXT}`, texts ending in a newline unless empty.
//!
//! Commands: `exit`, `version`, `list-commands`, `memory/show`, `ovsdb-server/compact [DB]`,
//! `ovsdb-server/list-dbs`, `ovsdb-server/add-remote`, `ovsdb-server/remove-remote`,
//! `ovsdb-server/list-remotes`, `ovsdb-server/reconnect`, `ovsdb-server/sync-status`,
//! `vlog/list`, `vlog/set`, `vlog/reopen`, `vlog/close`. Anything else is refused with
//! ovsdb-server's "is not a valid command" error.
//!
//! What it does not do: ovsdb-server's replication (`sync-*`, `*-active-ovsdb-server`),
//! `add-db`/`remove-db`, coverage counters or transaction logging; those commands are not
//! listed and are refused by name.
// An I/O shell: sockets and tasks.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hf_ovsdb_net::framing::Framer;
use hf_ovsdb_net::serve::Server;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use super::remotes::Remotes;
use super::shell;

/// What the commands act on.
#[derive(Debug)]
pub struct Ctx {
    /// The OVSDB server.
    pub server: Server,
    /// Its remotes.
    pub remotes: Arc<tokio::sync::Mutex<Remotes>>,
    /// Told when `exit` is requested.
    pub exit: tokio::sync::mpsc::UnboundedSender<()>,
    /// `version`'s answer (without the newline).
    pub version: String,
}

/// ovsdb-server's own commands (with [`COMMON`]).
const COMMANDS: &[Command] = &[
    ("exit", "", 0, 0),
    ("memory/show", "", 0, 0),
    ("ovsdb-server/add-remote", "REMOTE", 1, 1),
    ("ovsdb-server/compact", "", 0, usize::MAX),
    ("ovsdb-server/list-dbs", "", 0, 0),
    ("ovsdb-server/list-remotes", "", 0, 0),
    ("ovsdb-server/reconnect", "", 0, 0),
    ("ovsdb-server/remove-remote", "REMOTE", 1, 1),
    ("ovsdb-server/sync-status", "", 0, 0),
];

/// The commands every holdfast daemon serves besides its own: `list-commands`, `version` and
/// `vlog/*` (answered by [`super::shell::vlog_command`]).
pub(crate) const COMMON: &[Command] = &[
    ("list-commands", "", 0, 0),
    ("version", "", 0, 0),
    ("vlog/close", "", 0, 0),
    ("vlog/list", "", 0, 0),
    ("vlog/reopen", "", 0, 0),
    (
        "vlog/set",
        "{spec | PATTERN:destination:pattern}",
        1,
        usize::MAX,
    ),
];

/// The socket path ovsdb-server uses when `--unixctl` is not given.
pub fn default_path(rundir: &Path, program: &str) -> PathBuf {
    rundir.join(format!("{program}.{}.ctl", std::process::id()))
}

/// Listen on `path` (replacing a stale socket) and serve commands until the runtime ends.
pub fn start(path: &Path, ctx: Arc<Ctx>) -> std::io::Result<()> {
    let exit = ctx.exit.clone();
    listen(
        path,
        move |m| {
            let ctx = ctx.clone();
            async move {
                let (reply, exit) = handle(m, &ctx).await;
                reply.map(|r| (r, exit))
            }
        },
        move || {
            let _ = exit.send(());
        },
    )
}

/// The unixctl transport every holdfast daemon shares: listens on `path` (replacing a stale
/// socket) and hands each JSON-RPC message of each connection to `handle`, which answers
/// `None` (no reply: a notification) or the reply and whether the daemon exits once it is
/// written (then `on_exit` runs). A connection that breaks the framing is closed with a log
/// line; the listener keeps serving.
pub(crate) fn listen<H, F, E>(path: &Path, handle: H, on_exit: E) -> std::io::Result<()>
where
    H: Fn(Value) -> F + Send + Sync + Clone + 'static,
    F: std::future::Future<Output = Option<(Value, bool)>> + Send + 'static,
    E: Fn() + Send + Sync + Clone + 'static,
{
    if path.exists() {
        let _ = std::fs::remove_file(path);
    }
    let l = UnixListener::bind(path)?;
    tokio::spawn(async move {
        loop {
            match l.accept().await {
                Ok((s, _)) => {
                    tokio::spawn(connection(s, handle.clone(), on_exit.clone()));
                }
                Err(e) => {
                    tracing::warn!("unixctl accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    });
    Ok(())
}

async fn connection<H, F, E>(mut s: tokio::net::UnixStream, handle: H, on_exit: E)
where
    H: Fn(Value) -> F,
    F: std::future::Future<Output = Option<(Value, bool)>>,
    E: Fn(),
{
    let mut framer = Framer::new(1 << 20);
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match s.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        framer.push(&buf[..n]);
        while let Some(m) = framer.next_message() {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!("unixctl: protocol error: {e}; closing the connection");
                    return;
                }
            };
            let Some((reply, exit)) = handle(m).await else {
                continue;
            };
            if s.write_all(reply.to_string().as_bytes()).await.is_err() {
                return;
            }
            let _ = s.flush().await;
            if exit {
                on_exit();
            }
        }
    }
}

/// OVS terminates non-empty reply texts with a newline.
fn body(s: String) -> String {
    if s.is_empty() || s.ends_with('\n') {
        s
    } else {
        s + "\n"
    }
}

/// A unixctl command table row: (name, usage, min args, max args), sorted by name as
/// `list-commands` prints them.
pub(crate) type Command = (&'static str, &'static str, usize, usize);

/// The parts of one well-formed request: id, method and its string arguments.
pub(crate) struct Request {
    pub id: Value,
    pub method: String,
    pub args: Vec<String>,
}

/// Checks one JSON-RPC message against `commands` and [`COMMON`] as OVS's lib/unixctl.c does. `Ok` is a
/// request to run; `Err(Some(reply))` is the error reply to send instead; `Err(None)` a message
/// that gets no reply (a notification or a message without a method), logged here.
pub(crate) fn parse_request(m: Value, commands: &[Command]) -> Result<Request, Option<Value>> {
    let id = m.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = m.get("method").and_then(Value::as_str) else {
        tracing::warn!("unixctl: message without a method: {m}");
        return Err(None);
    };
    let method = method.to_string();
    if id.is_null() {
        tracing::warn!("unixctl: notification {method} ignored (requests need an id)");
        return Err(None);
    }
    let Some(params) = m.get("params").and_then(Value::as_array) else {
        return Err(Some(error(&id, "\"params\" must be an array".into())));
    };
    let mut args = Vec::with_capacity(params.len());
    for p in params {
        match p.as_str() {
            Some(s) => args.push(s.to_string()),
            None => {
                let text = format!("\"{method}\" command has non-string argument");
                return Err(Some(error(&id, text)));
            }
        }
    }
    tracing::debug!("received request {method}{args:?}, id={id}");
    let Some(&(_, _, min, max)) = commands.iter().chain(COMMON).find(|c| c.0 == method) else {
        let text = format!(
            "\"{method}\" is not a valid command (use \"list-commands\" to see a list of valid commands)"
        );
        return Err(Some(error(&id, text)));
    };
    if args.len() < min {
        let text = format!("\"{method}\" command requires at least {min} arguments");
        return Err(Some(error(&id, text)));
    }
    if args.len() > max {
        let text = format!("\"{method}\" command takes at most {max} arguments");
        return Err(Some(error(&id, text)));
    }
    Ok(Request { id, method, args })
}

/// The reply to request `id` whose command gave `r`.
pub(crate) fn reply(id: &Value, r: Result<String, String>) -> Value {
    match r {
        Ok(text) => json!({"id": id, "result": body(text), "error": null}),
        Err(text) => error(id, text),
    }
}

/// `list-commands`' answer for `commands` and [`COMMON`], sorted by name.
pub(crate) fn list_commands(commands: &[Command]) -> String {
    let mut all: Vec<&Command> = commands.iter().chain(COMMON).collect();
    all.sort_by_key(|c| c.0);
    let mut s = String::from("The available commands are:\n");
    for (name, usage, _, _) in all {
        s.push_str(&format!("  {name:<23} {usage}\n"));
    }
    s
}

/// One request → (reply, whether to exit after sending it). Notifications get no reply.
async fn handle(m: Value, ctx: &Ctx) -> (Option<Value>, bool) {
    let q = match parse_request(m, COMMANDS) {
        Ok(q) => q,
        Err(reply) => return (reply, false),
    };
    let exit = q.method == "exit";
    let r = run(&q.method, &q.args, ctx).await;
    (Some(reply(&q.id, r)), exit)
}

fn error(id: &Value, text: String) -> Value {
    json!({"id": id, "error": body(text)})
}

async fn run(method: &str, args: &[String], ctx: &Ctx) -> Result<String, String> {
    match method {
        "exit" => Ok(String::new()),
        "version" => Ok(ctx.version.clone()),
        "list-commands" => Ok(list_commands(COMMANDS)),
        "memory/show" => {
            let report = ctx.server.with_core(|c, _| c.memory_report());
            Ok(report
                .iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(" "))
        }
        "ovsdb-server/list-dbs" => {
            let mut names = ctx.server.with_core(|c, _| c.database_names());
            names.sort();
            Ok(names.iter().map(|n| format!("{n}\n")).collect())
        }
        "ovsdb-server/compact" => {
            let names: Vec<Option<&str>> = if args.is_empty() {
                vec![None]
            } else {
                args.iter().map(|a| Some(a.as_str())).collect()
            };
            let mut errors = Vec::new();
            for n in names {
                let r = ctx.server.with_core(|c, now| c.compact_database(n, now));
                match r {
                    Ok(done) => {
                        for d in done {
                            tracing::info!("compacting {d} database by user request");
                        }
                    }
                    Err(e) => errors.push(e.to_string()),
                }
            }
            if errors.is_empty() {
                Ok(String::new())
            } else {
                Err(errors.join("\n"))
            }
        }
        "ovsdb-server/list-remotes" => {
            let r = ctx.remotes.lock().await;
            Ok(r.configured.iter().map(|s| format!("{s}\n")).collect())
        }
        "ovsdb-server/add-remote" => {
            let remote = &args[0];
            ctx.server
                .with_core(|c, _| Remotes::validate(remote, c))
                .map_err(|e| format!("{remote}: {e}"))?;
            let mut r = ctx.remotes.lock().await;
            r.configured.insert(remote.clone());
            r.reconcile(&ctx.server).await;
            Ok(String::new())
        }
        "ovsdb-server/remove-remote" => {
            let mut r = ctx.remotes.lock().await;
            if !r.configured.remove(&args[0]) {
                return Err("no such remote".into());
            }
            r.reconcile(&ctx.server).await;
            Ok(String::new())
        }
        "ovsdb-server/reconnect" => {
            ctx.server.disconnect_all();
            Ok(String::new())
        }
        // holdfast db never replicates from another server: always the active one.
        "ovsdb-server/sync-status" => Ok("state: active".into()),
        other => shell::vlog_command(other, args)
            .unwrap_or_else(|| Err(format!("\"{other}\" is not implemented"))),
    }
}
