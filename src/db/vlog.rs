//! OVS-style logging for `holdfast db` / `ovsdb-server`: `-v`/`--verbose=SPEC`,
//! `--log-file`, `vlog/list`, `vlog/set`, `vlog/reopen`, `vlog/close`, on top of `tracing`.
//!
//! Three destinations as in OVS: `console` (stderr), `syslog` (datagrams to `/dev/log`) and
//! `file` (`--log-file`), each with a level per module (`off`, `emer`, `err`, `warn`, `info`,
//! `dbg`). Modules are holdfast's, named in OVS's style, each covering some tracing targets
//! (see [`MODULES`]). Lines look like OVS's: `2026-12-01T10:24:33.015Z|00001|vlog|INFO|text`
//! in the file, the same without milliseconds on the console. Never any terminal colour codes.
//!
//! What it does not do: OVS's custom log patterns (`PATTERN:dest:pattern`), syslog facilities
//! (`FACILITY:name`), or rate limiting; a spec using them is refused with an error naming it.
// The logging shell writes to files and sockets and reads the clock.
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_subscriber::layer::{Context, Layer};

/// Log levels, most severe first (OVS's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing.
    Off = 0,
    /// Emergencies only.
    Emer = 1,
    /// Errors.
    Err = 2,
    /// Warnings.
    Warn = 3,
    /// Information.
    Info = 4,
    /// Debugging.
    Dbg = 5,
}

impl Level {
    fn parse(s: &str) -> Option<Level> {
        Some(match s.to_ascii_lowercase().as_str() {
            "off" => Level::Off,
            "emer" => Level::Emer,
            "err" => Level::Err,
            "warn" => Level::Warn,
            "info" => Level::Info,
            "dbg" => Level::Dbg,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Level::Off => "OFF",
            Level::Emer => "EMER",
            Level::Err => "ERR",
            Level::Warn => "WARN",
            Level::Info => "INFO",
            Level::Dbg => "DBG",
        }
    }

    fn from_tracing(l: &tracing::Level) -> Level {
        match *l {
            tracing::Level::ERROR => Level::Err,
            tracing::Level::WARN => Level::Warn,
            tracing::Level::INFO => Level::Info,
            _ => Level::Dbg,
        }
    }
}

/// Destinations, in `vlog/list`'s column order.
pub const DESTINATIONS: [&str; 3] = ["console", "syslog", "file"];
const CONSOLE: usize = 0;
const SYSLOG: usize = 1;
const FILE: usize = 2;

/// holdfast's log modules (OVS's names where the job is the same) and the tracing target
/// prefixes each covers; the longest matching prefix wins, anything else is `ovsdb_server`.
pub const MODULES: &[(&str, &[&str])] = &[
    ("acl_log", &["acl_log"]),
    ("controller", &["holdfast::controller", "hf_controller"]),
    ("daemon_unix", &["holdfast::db::daemon"]),
    ("datapath", &["holdfast::datapath", "hf_datapath"]),
    (
        "jsonrpc",
        &[
            "hf_ovsdb_net::serve",
            "hf_ovsdb_net::framing",
            "hf_ovsdb_net::jsonrpc",
        ],
    ),
    ("northd", &["holdfast::northd", "hf_northd"]),
    ("ovsdb", &["hf_ovsdb"]),
    ("ovsdb_cs", &["hf_ovsdb_net::client"]),
    ("ovsdb_file", &["hf_ovsdb_net::storage", "hf_ovsdb::file"]),
    ("ovsdb_jsonrpc_server", &["hf_ovsdb_net::server"]),
    ("ovsdb_server", &["holdfast"]),
    ("remotes", &["holdfast::db::remotes"]),
    ("unixctl", &["holdfast::db::unixctl"]),
    ("vlog", &["holdfast::db::vlog"]),
];
const DEFAULT_MODULE: usize = 10;

fn module_of(target: &str) -> usize {
    let mut best = (DEFAULT_MODULE, 0);
    for (i, (_, prefixes)) in MODULES.iter().enumerate() {
        for p in *prefixes {
            let matches =
                target == *p || (target.starts_with(p) && target[p.len()..].starts_with("::"));
            if matches && p.len() > best.1 {
                best = (i, p.len());
            }
        }
    }
    best.0
}

struct State {
    /// levels[module][destination]
    levels: Vec<[Level; 3]>,
    file_path: Option<PathBuf>,
    file: Option<std::fs::File>,
    syslog: Option<std::os::unix::net::UnixDatagram>,
    program: String,
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();
/// The most verbose level any (module, destination) has: a lock-free fast reject.
static MAX: AtomicU8 = AtomicU8::new(Level::Info as u8);
static SEQ: AtomicU64 = AtomicU64::new(0);

fn state() -> std::sync::MutexGuard<'static, State> {
    let m = STATE.get_or_init(|| {
        Mutex::new(State {
            levels: vec![[Level::Info, Level::Off, Level::Info]; MODULES.len()],
            file_path: None,
            file: None,
            syslog: None,
            program: "ovsdb-server".into(),
        })
    });
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn recompute_max(st: &State) {
    let m = st
        .levels
        .iter()
        .flat_map(|l| l.iter())
        .copied()
        .max()
        .unwrap_or(Level::Off);
    MAX.store(m as u8, Ordering::Relaxed);
}

/// Apply one `-v` spec (`module:destination:level` in any order, any part optional, `any`
/// as a wildcard; empty means `any:any:dbg`). Errors name the word that is not understood.
pub fn set(spec: &str) -> Result<(), String> {
    let mut st = state();
    apply(&mut st, spec)?;
    recompute_max(&st);
    Ok(())
}

fn apply(st: &mut State, spec: &str) -> Result<(), String> {
    let mut module: Option<usize> = None;
    let mut dest: Option<usize> = None;
    let mut level: Option<Level> = None;
    let words: Vec<&str> = spec
        .split([':', ' ', ','])
        .filter(|w| !w.is_empty())
        .collect();
    if let Some(first) = words.first() {
        let f = first.to_ascii_lowercase();
        if f == "pattern" {
            return Err(format!(
                "\"{spec}\": custom log patterns (PATTERN:destination:pattern) are not supported by holdfast"
            ));
        }
        if f == "facility" {
            return Err(format!(
                "\"{spec}\": syslog facilities (FACILITY:name) are not supported by holdfast"
            ));
        }
    }
    for w in words {
        let lw = w.to_ascii_lowercase();
        if lw == "any" {
            continue;
        }
        if let Some(d) = DESTINATIONS.iter().position(|d| *d == lw) {
            dest = Some(d);
        } else if let Some(l) = Level::parse(&lw) {
            level = Some(l);
        } else if let Some(m) = MODULES.iter().position(|(n, _)| *n == lw) {
            module = Some(m);
        } else {
            return Err(format!("no destination, level, or module \"{w}\""));
        }
    }
    let level = level.unwrap_or(Level::Dbg);
    for (mi, levels) in st.levels.iter_mut().enumerate() {
        if module.is_some_and(|m| m != mi) {
            continue;
        }
        for (di, l) in levels.iter_mut().enumerate() {
            if dest.is_none_or(|d| d == di) {
                *l = level;
            }
        }
    }
    Ok(())
}

/// The program name used in syslog lines.
pub fn set_program(name: &str) {
    state().program = name.to_string();
}

/// Send log lines to `path` too (appending; created when missing).
pub fn open_file(path: &Path) -> Result<(), String> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open log file {}: {e}", path.display()))?;
    {
        let mut st = state();
        st.file = Some(f);
        st.file_path = Some(path.to_path_buf());
    }
    tracing::info!("opened log file {}", path.display());
    Ok(())
}

/// Reopen the log file without logging that it was opened (the monitor, after each wait).
pub fn resume_file() {
    let mut st = state();
    if let Some(p) = st.file_path.clone() {
        st.file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok();
    }
}

/// `vlog/reopen`: reopen the log file (after logrotate moved it).
pub fn reopen() -> Result<(), String> {
    let path = state().file_path.clone();
    match path {
        Some(p) => open_file(&p),
        None => Err("Logging to file not configured".into()),
    }
}

/// Close the log file but remember its name (OVS's monitor does so while it waits, so that a
/// rotated log is not held open); [`reopen`] opens it again.
pub fn suspend_file() {
    state().file = None;
}

/// `vlog/close`: stop writing to the log file.
pub fn close() {
    let mut st = state();
    st.file = None;
    st.file_path = None;
}

/// Use syslog (`/dev/log`) when some module logs there; an unreachable syslog is reported.
fn ensure_syslog(st: &mut State) {
    if st.syslog.is_some() || st.levels.iter().all(|l| l[SYSLOG] == Level::Off) {
        return;
    }
    let s =
        std::os::unix::net::UnixDatagram::unbound().and_then(|s| s.connect("/dev/log").map(|()| s));
    match s {
        Ok(s) => st.syslog = Some(s),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "warning: syslog logging requested but /dev/log is unreachable: {e}"
            );
            for l in &mut st.levels {
                l[SYSLOG] = Level::Off;
            }
        }
    }
}

/// Console logging off (after detaching, stderr is /dev/null).
pub fn console_off() {
    let mut st = state();
    for l in &mut st.levels {
        l[CONSOLE] = Level::Off;
    }
    recompute_max(&st);
}

/// `vlog/list`, formatted as OVS prints it.
pub fn list() -> String {
    let st = state();
    let mut out = String::from(
        "                 console    syslog    file\n                 -------    ------    ------\n",
    );
    let mut rows: Vec<(&str, [Level; 3])> = MODULES
        .iter()
        .zip(st.levels.iter())
        .map(|((n, _), l)| (*n, *l))
        .collect();
    rows.sort_by_key(|r| r.0);
    for (name, l) in rows {
        out.push_str(&format!(
            "{name:<16}  {:>4}       {:>4}       {:>4}\n",
            l[CONSOLE].name(),
            l[SYSLOG].name(),
            l[FILE].name()
        ));
    }
    out
}

/// Install the layer as the global subscriber.
pub fn install() {
    use tracing_subscriber::prelude::*;
    {
        let mut st = state();
        ensure_syslog(&mut st);
        recompute_max(&st);
    }
    let _ = tracing_subscriber::registry().with(VlogLayer).try_init();
}

/// Re-check syslog after settings changed.
pub fn refresh() {
    let mut st = state();
    ensure_syslog(&mut st);
    recompute_max(&st);
}

struct VlogLayer;

impl<S: tracing::Subscriber> Layer<S> for VlogLayer {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        // Levels change at run time (vlog/set): decide per event.
        Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>, _: Context<'_, S>) -> bool {
        (Level::from_tracing(meta.level()) as u8) <= MAX.load(Ordering::Relaxed)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        let level = Level::from_tracing(meta.level());
        let module = module_of(meta.target());
        let mut st = state();
        let levels = st.levels[module];
        if levels.iter().all(|l| level > *l) {
            return;
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
        let (date, ms) = utc_now();
        let name = MODULES[module].0;
        let body = format!("{seq:05}|{name}|{}|{}", level.name(), text.0);
        if level <= levels[CONSOLE] {
            let _ = writeln!(std::io::stderr(), "{date}Z|{body}");
        }
        if level <= levels[FILE]
            && let Some(f) = &mut st.file
        {
            let _ = writeln!(f, "{date}.{ms:03}Z|{body}");
        }
        if level <= levels[SYSLOG]
            && let Some(s) = &st.syslog
        {
            // facility daemon (3) * 8 + severity
            let sev = match level {
                Level::Emer => 0,
                Level::Err => 3,
                Level::Warn => 4,
                Level::Info => 6,
                _ => 7,
            };
            let msg = format!(
                "<{}>{}[{}]: {body}",
                24 + sev,
                st.program,
                std::process::id()
            );
            let _ = s.send(msg.as_bytes());
        }
    }
}

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            if self.0.is_empty() {
                self.0 = format!("{value:?}");
            } else {
                self.0 = format!("{value:?} {}", self.0);
            }
        } else {
            if !self.0.is_empty() {
                self.0.push(' ');
            }
            self.0.push_str(&format!("{}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            if !self.0.is_empty() {
                self.0.push(' ');
            }
            self.0.push_str(&format!("{}={value}", field.name()));
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SS` in UTC, and the milliseconds.
fn utc_now() -> (String, u64) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = if month <= 2 { y + 1 } else { y };
    (
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        ),
        u64::from(d.subsec_millis()),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn module_mapping_prefers_longest_prefix() {
        assert_eq!(MODULES[module_of("holdfast::db::unixctl")].0, "unixctl");
        assert_eq!(MODULES[module_of("holdfast::db")].0, "ovsdb_server");
        assert_eq!(MODULES[module_of("hf_ovsdb_net::serve")].0, "jsonrpc");
        assert_eq!(MODULES[module_of("hf_ovsdb_net::storage")].0, "ovsdb_file");
        assert_eq!(MODULES[module_of("hf_ovsdb_netx")].0, "ovsdb_server");
        assert_eq!(MODULES[DEFAULT_MODULE].0, "ovsdb_server");
        assert_eq!(
            MODULES[module_of("holdfast::datapath::takeover")].0,
            "datapath"
        );
        assert_eq!(MODULES[module_of("hf_controller::daemon")].0, "controller");
        assert_eq!(MODULES[module_of("acl_log")].0, "acl_log");
    }

    #[test]
    fn specs_parse_like_ovs() {
        let mut st = State {
            levels: vec![[Level::Info, Level::Off, Level::Info]; MODULES.len()],
            file_path: None,
            file: None,
            syslog: None,
            program: String::new(),
        };
        apply(&mut st, "console:off").unwrap();
        assert!(
            st.levels
                .iter()
                .all(|l| l[CONSOLE] == Level::Off && l[FILE] == Level::Info)
        );
        apply(&mut st, "unixctl:file:dbg").unwrap();
        let unixctl = MODULES.iter().position(|m| m.0 == "unixctl").unwrap();
        assert_eq!(st.levels[unixctl][FILE], Level::Dbg);
        assert_eq!(st.levels[0][FILE], Level::Info);
        apply(&mut st, "").unwrap();
        assert!(st.levels.iter().all(|l| l.iter().all(|x| *x == Level::Dbg)));
        assert_eq!(
            apply(&mut st, "bogus").unwrap_err(),
            "no destination, level, or module \"bogus\""
        );
        assert!(
            apply(&mut st, "PATTERN:file:%m")
                .unwrap_err()
                .contains("not supported")
        );
    }
}
