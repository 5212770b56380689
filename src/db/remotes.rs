//! The remotes `holdfast db` listens on, as ovsdb-server manages them: the `--remote`
//! strings (plus `ovsdb-server/add-remote`), where `db:DB,TABLE,COLUMN` stands for the
//! remotes named in a database (strings, or references to `Connection`-like rows with
//! `target` and `inactivity_probe`), followed as the database changes; and the TLS settings
//! (`--private-key`, `--certificate`, `--ca-cert`, `--ssl-protocols`, `--ssl-ciphers`), each
//! a value or a `db:DB,TABLE,COLUMN` reference resolved the same way.
//!
//! `pssl:` remotes listen like `ptcp:` ones; their connections are accepted with the TLS
//! configuration built from the resolved settings ([`ResolvedTls::load`]) and refused, with a
//! log line, while there is none (as ovsdb-server, which listens and then refuses the
//! handshake while its `SSL` row is empty).
//!
//! What it does not do: active remotes (`tcp:`/`unix:`/`ssl:` targets that connect out) are
//! refused with a logged error naming them; `--bootstrap-ca-cert` is used as the CA
//! certificate when its file exists, but a missing one is not bootstrapped from the first
//! peer (an error names it); rows with `read_only=true`
//! or an RBAC `role` are refused (never served with more access than they grant);
//! `max_backoff` and `other_config` (dscp) do not apply to passive remotes here. The rows'
//! `is_connected` and `status` (`bound_port`, `n_connections`) are written as ovsdb-server
//! does, without its `sec_since_*` keys.
// An I/O shell: it binds sockets through hf-ovsdb-net's server.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};

use hf_ovsdb::{Atom, Database};
use hf_ovsdb_net::serve::{Remote, Server};
use hf_ovsdb_net::server::Core;

/// A parsed `db:DB,TABLE,COLUMN` reference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DbRef {
    /// Database name.
    pub db: String,
    /// Table name.
    pub table: String,
    /// Column name.
    pub column: String,
}

impl DbRef {
    /// Parse `db:DB,TABLE,COLUMN`; None when `s` does not start with `db:`.
    pub fn parse(s: &str) -> Option<Result<DbRef, String>> {
        let rest = s.strip_prefix("db:")?;
        let parts: Vec<&str> = rest.split(',').collect();
        Some(match parts.as_slice() {
            [db, table, column] if !db.is_empty() && !table.is_empty() && !column.is_empty() => {
                Ok(DbRef {
                    db: db.to_string(),
                    table: table.to_string(),
                    column: column.to_string(),
                })
            }
            _ => Err(format!(
                "\"{s}\": a database reference is db:DATABASE,TABLE,COLUMN"
            )),
        })
    }

    /// Check that the database, table and column exist: their (table, column) indexes.
    pub fn check(&self, db: Option<&Database>) -> Result<(usize, usize), String> {
        let db = db.ok_or_else(|| format!("db:{}: no database named {}", self.db, self.db))?;
        let t = db
            .schema
            .table_index(&self.table)
            .ok_or_else(|| format!("db:{}: no table named {}", self.text(), self.table))?;
        let c = db.schema.tables[t]
            .column_index(&self.column)
            .ok_or_else(|| format!("db:{}: no column named {}", self.text(), self.column))?;
        Ok((t, c))
    }

    fn text(&self) -> String {
        format!("{},{},{}", self.db, self.table, self.column)
    }
}

/// One concrete remote wanted, with its inactivity probe (None: the default; Some(None):
/// probes disabled, as `inactivity_probe=0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The remote text (`ptcp:6641:0.0.0.0`, `punix:PATH`).
    pub target: String,
    /// From the row's `inactivity_probe`.
    pub probe: Option<Option<u64>>,
    /// The row it came from (table index, row UUID), when a referenced row.
    pub row: Option<(usize, hf_ovsdb::Uuid)>,
    /// Why the row's settings cannot be honoured (`read_only`, RBAC `role`): the remote is
    /// then not served at all, rather than served with more access than the row grants.
    pub refuse: Option<String>,
    /// Settings of the row that are not applied (logged once).
    pub warn: Option<String>,
}

/// The database name of a `db:` reference (empty when malformed).
fn r_db(s: &str) -> String {
    s.strip_prefix("db:")
        .and_then(|r| r.split(',').next())
        .unwrap_or_default()
        .to_string()
}

fn string_of(a: &Atom) -> Option<&str> {
    match a {
        Atom::String(s) => Some(s),
        _ => None,
    }
}

fn int_of(a: &Atom) -> Option<i64> {
    match a {
        Atom::Integer(i) => Some(*i),
        _ => None,
    }
}

/// The remotes a `db:` reference names now (OVS's `query_db_remotes`): each string of a
/// string column, or each referenced row's `target` with its `inactivity_probe`.
pub fn query_remotes(r: &DbRef, db: &Database) -> Result<Vec<Wanted>, String> {
    let (ti, ci) = r.check(Some(db))?;
    let col = &db.schema.tables[ti].columns[ci];
    let mut out = Vec::new();
    if col.ty.value.is_some() {
        return Err(format!(
            "db:{}: column {} is a map, not a set of remotes",
            r.text(),
            r.column
        ));
    }
    match (col.ty.key.ref_table_index, &col.ty.key.atomic) {
        (Some(rt), _) => {
            let target_ts = &db.schema.tables[rt];
            let target_col = target_ts.column_index("target").ok_or_else(|| {
                format!(
                    "db:{}: referenced table {} has no target column",
                    r.text(),
                    target_ts.name
                )
            })?;
            let probe_col = target_ts.column_index("inactivity_probe");
            let read_only_col = target_ts.column_index("read_only");
            let role_col = target_ts.column_index("role");
            let other_col = target_ts.column_index("other_config");
            for row in db.tables[ti].rows.values() {
                for a in &row.cols[ci].keys {
                    let Atom::Uuid(u) = a else { continue };
                    let Some(crow) = db.row(rt, u) else { continue };
                    let Some(target) = crow.cols[target_col].keys.first().and_then(string_of)
                    else {
                        continue;
                    };
                    let probe = probe_col
                        .and_then(|pc| crow.cols[pc].keys.first().and_then(int_of))
                        .map(|ms| (ms > 0).then_some(ms as u64));
                    let read_only = read_only_col
                        .is_some_and(|c| crow.cols[c].keys.first() == Some(&Atom::Boolean(true)));
                    let role = role_col
                        .and_then(|c| crow.cols[c].keys.first().and_then(string_of))
                        .filter(|r| !r.is_empty());
                    let refuse = if read_only {
                        Some(format!(
                            "{target}: read_only=true connections are not supported by holdfast db; not listening"
                        ))
                    } else {
                        role.map(|r| {
                            format!(
                                "{target}: role \"{r}\" (OVSDB RBAC) is not supported by holdfast db; not listening"
                            )
                        })
                    };
                    let warn = other_col
                        .filter(|c| !crow.cols[*c].keys.is_empty())
                        .map(|c| {
                            let keys: Vec<&str> =
                                crow.cols[c].keys.iter().filter_map(string_of).collect();
                            format!(
                                "{target}: other_config {keys:?} (e.g. dscp) is not applied by holdfast db"
                            )
                        });
                    out.push(Wanted {
                        target: target.to_string(),
                        probe,
                        row: Some((rt, *u)),
                        refuse,
                        warn,
                    });
                }
            }
        }
        (None, hf_ovsdb::AtomicType::String) => {
            for row in db.tables[ti].rows.values() {
                for a in &row.cols[ci].keys {
                    if let Some(s) = string_of(a) {
                        out.push(Wanted {
                            target: s.to_string(),
                            probe: None,
                            row: None,
                            refuse: None,
                            warn: None,
                        });
                    }
                }
            }
        }
        _ => {
            return Err(format!(
                "db:{}: column {} holds neither strings nor row references",
                r.text(),
                r.column
            ));
        }
    }
    out.sort_by(|a, b| a.target.cmp(&b.target));
    out.dedup_by(|a, b| a.target == b.target);
    Ok(out)
}

/// The first non-empty string in a column (OVS's `query_db_string`, for the TLS settings).
pub fn query_string(r: &DbRef, db: &Database) -> Result<Option<String>, String> {
    let (ti, ci) = r.check(Some(db))?;
    let ts = &db.schema.tables[ti];
    if ts.columns[ci].ty.key.atomic != hf_ovsdb::AtomicType::String
        || ts.columns[ci].ty.value.is_some()
    {
        return Err(format!(
            "db:{}: column {} is not a string",
            r.text(),
            r.column
        ));
    }
    let mut rows: Vec<_> = db.tables[ti].rows.values().collect();
    rows.sort_by_key(|r| r.uuid);
    Ok(rows.iter().find_map(|row| {
        row.cols[ci]
            .keys
            .first()
            .and_then(string_of)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }))
}

/// Why a concrete remote cannot be served, or the parsed passive remote.
pub fn parse_passive(target: &str) -> Result<Remote, String> {
    for active in ["tcp:", "unix:", "ssl:"] {
        if target.starts_with(active) {
            return Err(format!(
                "{target}: active remotes (connecting out to a client) are not supported by holdfast db; use a passive remote (ptcp:, pssl:, punix:)"
            ));
        }
    }
    target.parse::<Remote>()
}

/// A remote's probe setting: its row's, or for unix sockets none at all (ovsdb-server does
/// not probe local clients: a unix socket cannot silently lose its peer); otherwise the
/// configured default.
fn default_probe(r: &Remote, probe: Option<Option<u64>>) -> Option<Option<u64>> {
    match (probe, r) {
        (None, Remote::Unix(_)) => Some(None),
        (p, _) => p,
    }
}

/// TLS settings, each either a value or a database reference.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    /// `--private-key`.
    pub private_key: Option<String>,
    /// `--certificate`.
    pub certificate: Option<String>,
    /// `--ca-cert`.
    pub ca_cert: Option<String>,
    /// `--bootstrap-ca-cert`.
    pub bootstrap_ca_cert: Option<String>,
    /// `--ssl-protocols`.
    pub protocols: Option<String>,
    /// `--ssl-ciphers`.
    pub ciphers: Option<String>,
}

/// TLS settings with `db:` references resolved: file names (private key, certificate, CA
/// certificate) and the protocol and cipher lists, for the TLS listener.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedTls {
    /// Private key file.
    pub private_key: Option<String>,
    /// Certificate file.
    pub certificate: Option<String>,
    /// CA certificate file.
    pub ca_cert: Option<String>,
    /// Bootstrap CA certificate file.
    pub bootstrap_ca_cert: Option<String>,
    /// Protocol list.
    pub protocols: Option<String>,
    /// Cipher list.
    pub ciphers: Option<String>,
}

impl TlsSettings {
    fn fields(&self) -> [(&'static str, &Option<String>); 6] {
        [
            ("--private-key", &self.private_key),
            ("--certificate", &self.certificate),
            ("--ca-cert", &self.ca_cert),
            ("--bootstrap-ca-cert", &self.bootstrap_ca_cert),
            ("--ssl-protocols", &self.protocols),
            ("--ssl-ciphers", &self.ciphers),
        ]
    }

    /// Check the syntax of every `db:` reference and that it names a served column.
    pub fn check(&self, core: &Core) -> Result<(), String> {
        for (flag, v) in self.fields() {
            if let Some(v) = v
                && let Some(r) = DbRef::parse(v)
            {
                let r = r.map_err(|e| format!("{flag}: {e}"))?;
                r.check(core.database(&r.db))
                    .map_err(|e| format!("{flag}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Whether some setting is a `db:` reference (then resolved, and re-resolved, as the
    /// database changes; an unusable setting is logged, not fatal, since the `SSL` row may be
    /// filled in later, as with ovsdb-server under `ovn-ctl`).
    pub fn is_dynamic(&self) -> bool {
        self.fields()
            .iter()
            .any(|(_, v)| v.as_deref().is_some_and(|v| v.starts_with("db:")))
    }

    /// The start-up check of settings given as plain values (files and strings): load them
    /// now, so that a bad file, a key that does not match its certificate, an option missing
    /// for a `pssl:` remote on the command line (`pssl`: its text), or a protocol or cipher
    /// rustls does not implement fails at start-up, naming it. With `db:` references
    /// ([`Self::is_dynamic`]) nothing is loaded here.
    pub fn check_static(&self, pssl: Option<&str>) -> Result<(), String> {
        if self.is_dynamic() {
            return Ok(());
        }
        let plain = ResolvedTls {
            private_key: self.private_key.clone(),
            certificate: self.certificate.clone(),
            ca_cert: self.ca_cert.clone(),
            bootstrap_ca_cert: self.bootstrap_ca_cert.clone(),
            protocols: self.protocols.clone(),
            ciphers: self.ciphers.clone(),
        };
        match plain.load() {
            Ok(Some(_)) => Ok(()),
            Ok(None) => match pssl {
                Some(r) => Err(format!(
                    "TLS needs --private-key, --certificate and --ca-cert together (for the pssl: remote {r}): missing --private-key, --certificate, --ca-cert"
                )),
                None => Ok(()),
            },
            Err(e) => Err(e),
        }
    }

    /// Resolve with the databases as they are now.
    pub fn resolve(&self, core: &Core) -> Result<ResolvedTls, String> {
        let get = |flag: &str, v: &Option<String>| -> Result<Option<String>, String> {
            let Some(v) = v else { return Ok(None) };
            match DbRef::parse(v) {
                None => Ok(Some(v.clone())),
                Some(r) => {
                    let r = r.map_err(|e| format!("{flag}: {e}"))?;
                    let db = core
                        .database(&r.db)
                        .ok_or_else(|| format!("{flag}: no database named {}", r.db))?;
                    query_string(&r, db).map_err(|e| format!("{flag}: {e}"))
                }
            }
        };
        Ok(ResolvedTls {
            private_key: get("--private-key", &self.private_key)?,
            certificate: get("--certificate", &self.certificate)?,
            ca_cert: get("--ca-cert", &self.ca_cert)?,
            bootstrap_ca_cert: get("--bootstrap-ca-cert", &self.bootstrap_ca_cert)?,
            protocols: get("--ssl-protocols", &self.protocols)?,
            ciphers: get("--ssl-ciphers", &self.ciphers)?,
        })
    }
}

impl ResolvedTls {
    /// The CA certificate file: `--ca-cert`, else `--bootstrap-ca-cert` when its file exists
    /// (ovsdb-server uses it then); a missing bootstrap file is an error, as holdfast does not
    /// fetch the CA certificate from the first peer.
    fn ca_file(&self) -> Result<Option<&str>, String> {
        match (&self.ca_cert, &self.bootstrap_ca_cert) {
            (Some(c), _) => Ok(Some(c)),
            (None, Some(b)) if std::path::Path::new(b).exists() => Ok(Some(b)),
            (None, Some(b)) => Err(format!(
                "--bootstrap-ca-cert {b}: no such file, and holdfast does not bootstrap the CA certificate from a peer; give --ca-cert"
            )),
            (None, None) => Ok(None),
        }
    }

    /// Build the TLS settings: None when no key, certificate or CA certificate is set (the
    /// protocol and cipher strings are still checked, so that a typo is not carried along);
    /// an error naming what is missing when only some are, or naming the file or string that
    /// cannot be used.
    pub fn load(&self) -> Result<Option<hf_ovsdb_net::tls::TlsSettings>, String> {
        let ca = self.ca_file()?;
        match (&self.private_key, &self.certificate, ca) {
            (Some(k), Some(c), Some(ca)) => {
                let files = hf_ovsdb_net::tls::TlsFiles {
                    private_key: k.into(),
                    certificate: c.into(),
                    ca_cert: ca.into(),
                    protocols: self.protocols.clone(),
                    ciphers: self.ciphers.clone(),
                };
                hf_ovsdb_net::tls::TlsSettings::load(&files)
                    .map(Some)
                    .map_err(|e| e.to_string())
            }
            (None, None, None) => {
                let mut w = Vec::new();
                hf_ovsdb_net::tls::parse_protocols(self.protocols.as_deref(), &mut w)
                    .map_err(|e| e.to_string())?;
                if let Some(c) = &self.ciphers {
                    hf_ovsdb_net::tls::parse_ciphers(c).map_err(|e| e.to_string())?;
                }
                Ok(None)
            }
            (k, c, ca) => {
                let missing: Vec<&str> = [
                    ("--private-key", k.is_none()),
                    ("--certificate", c.is_none()),
                    ("--ca-cert", ca.is_none()),
                ]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect();
                Err(format!(
                    "TLS needs --private-key, --certificate and --ca-cert together: missing {}",
                    missing.join(", ")
                ))
            }
        }
    }

    /// The modification times of the files named (a change reloads them, as OVS rereads
    /// key and certificate files that changed).
    pub fn mtimes(&self) -> Vec<Option<std::time::SystemTime>> {
        [
            &self.private_key,
            &self.certificate,
            &self.ca_cert,
            &self.bootstrap_ca_cert,
        ]
        .iter()
        .map(|f| {
            f.as_ref()
                .and_then(|f| std::fs::metadata(f).ok())
                .and_then(|m| m.modified().ok())
        })
        .collect()
    }
}

/// A status row: (database, table index, row UUID).
type RowKey = (String, usize, hf_ovsdb::Uuid);
/// What was written to a status row: `is_connected` and the `status` map.
type RowStatus = (bool, Vec<(String, String)>);

/// The configured remote strings and what is listening for them.
#[derive(Debug, Default)]
pub struct Remotes {
    /// As given (`--remote`, `add-remote`), `db:` references included: `list-remotes`.
    pub configured: BTreeSet<String>,
    /// Concrete remotes listening now, by target text.
    listening: BTreeMap<String, Remote>,
    /// Errors already logged (target → message), so each is logged once per change.
    reported: BTreeMap<String, String>,
    /// The databases' last transaction ids when last reconciled.
    seen: Vec<(String, hf_ovsdb::Uuid)>,
    /// Some wanted remote failed to listen at the last reconcile (retried periodically, as
    /// ovsdb-server retries).
    pub failing: bool,
    /// Rows whose `is_connected`/`status` this server maintains: (database, table index,
    /// row) → target, and the status last written.
    rows: BTreeMap<RowKey, String>,
    /// Notes already logged about settings that are not applied.
    warned: BTreeSet<String>,
    /// Keys reported during the current reconcile; older reports are forgotten.
    round: BTreeSet<String>,
    written: BTreeMap<RowKey, RowStatus>,
}

impl Remotes {
    /// Check one configured remote string: a passive remote or a valid `db:` reference.
    pub fn validate(s: &str, core: &Core) -> Result<(), String> {
        match DbRef::parse(s) {
            Some(r) => r?.check(core.database(&r_db(s))).map(|_| ()),
            None => parse_passive(s).map(|_| ()),
        }
    }

    /// Record the remotes bound at startup (plain `--remote`s).
    pub fn started(&mut self, target: &str, r: Remote) {
        self.listening.insert(target.to_string(), r);
    }

    /// Whether some database changed since the last reconcile (cheap: one id per database).
    pub fn changed(&self, server: &Server) -> bool {
        let now = server.with_core(|c, _| {
            c.database_names()
                .into_iter()
                .filter_map(|n| c.last_txn_id(&n).map(|t| (n, t)))
                .collect::<Vec<_>>()
        });
        now != self.seen
    }

    /// Make the listening set match the configuration and the databases. Errors for single
    /// remotes are logged (once per distinct error), not fatal.
    pub async fn reconcile(&mut self, server: &Server) {
        self.seen = server.with_core(|c, _| {
            c.database_names()
                .into_iter()
                .filter_map(|n| c.last_txn_id(&n).map(|t| (n, t)))
                .collect()
        });
        self.failing = false;
        self.rows.clear();
        let mut wanted: BTreeMap<String, Option<Option<u64>>> = BTreeMap::new();
        let configured: Vec<String> = self.configured.iter().cloned().collect();
        for s in &configured {
            match DbRef::parse(s) {
                None => {
                    wanted.insert(s.clone(), None);
                }
                Some(Err(e)) => self.report(s, e),
                Some(Ok(r)) => {
                    let res = server.with_core(|c, _| match c.database(&r.db) {
                        Some(db) => query_remotes(&r, db),
                        None => Err(format!("{s}: no database named {}", r.db)),
                    });
                    match res {
                        Ok(ws) => {
                            for w in ws {
                                if let Some((t, u)) = w.row {
                                    self.rows.insert((r.db.clone(), t, u), w.target.clone());
                                }
                                if let Some(note) = w.warn
                                    && self.warned.insert(note.clone())
                                {
                                    tracing::warn!("{note}");
                                }
                                if let Some(why) = w.refuse {
                                    self.report(&w.target, why);
                                    continue;
                                }
                                wanted.insert(w.target, w.probe);
                            }
                        }
                        Err(e) => self.report(s, e),
                    }
                }
            }
        }
        // Remove what is no longer wanted.
        let gone: Vec<String> = self
            .listening
            .keys()
            .filter(|t| !wanted.contains_key(*t))
            .cloned()
            .collect();
        for t in gone {
            if let Some(r) = self.listening.remove(&t) {
                server.remove_remote(&r);
            }
        }
        let round = std::mem::take(&mut self.round);
        self.reported
            .retain(|t, _| round.contains(t) || wanted.contains_key(t));
        for (target, probe) in wanted {
            if let Some(r) = self.listening.get(&target) {
                server.set_remote_probe(r, default_probe(r, probe));
                continue;
            }
            let r = match parse_passive(&target) {
                Ok(r) => r,
                Err(e) => {
                    self.report(&target, e);
                    continue;
                }
            };
            match server.add_remote(&r).await {
                Ok(bound) => {
                    tracing::info!("{target}: listening on {bound}");
                    server.set_remote_probe(&r, default_probe(&r, probe));
                    self.reported.remove(&target);
                    self.listening.insert(target, r);
                }
                Err(e) => {
                    self.failing = true;
                    self.report(&target, format!("{target}: listen failed: {e}"));
                }
            }
        }
    }

    /// Write `is_connected` and `status` (`bound_port`, `n_connections`) of the rows that
    /// named the remotes, as ovsdb-server does, when they changed since last written.
    pub fn update_status(&mut self, server: &Server) {
        let mut writes = Vec::new();
        for (key, target) in &self.rows {
            let (sessions, port) = match self.listening.get(target) {
                Some(r) => {
                    let n = server.remote_sessions(r).unwrap_or(0);
                    let port = server
                        .remotes()
                        .into_iter()
                        .find(|(rr, _)| rr == r)
                        .and_then(|(_, bound)| {
                            bound
                                .strip_prefix("tcp:")
                                .or_else(|| bound.strip_prefix("ssl:"))
                                .and_then(|b| b.rsplit(':').next().map(str::to_string))
                        });
                    (n, port)
                }
                None => (0, None),
            };
            let mut status = Vec::new();
            if let Some(p) = port {
                status.push(("bound_port".to_string(), p));
            }
            if sessions > 1 {
                status.push(("n_connections".to_string(), sessions.to_string()));
            }
            let now = (sessions > 0, status);
            if self.written.get(key) != Some(&now) {
                writes.push((key.clone(), now));
            }
        }
        self.written.retain(|k, _| self.rows.contains_key(k));
        for ((db, t, u), (connected, status)) in writes {
            let ok = server.with_core(|c, now| {
                let Some(d) = c.database(&db) else {
                    return false;
                };
                let ts = &d.schema.tables[t];
                if ts.column_index("is_connected").is_none() || ts.column_index("status").is_none()
                {
                    return false;
                }
                let pairs: Vec<serde_json::Value> = status
                    .iter()
                    .map(|(k, v)| serde_json::json!([k, v]))
                    .collect();
                let txn = serde_json::json!({
                    "method": "transact",
                    "id": "holdfast-remote-status",
                    "params": [db, {
                        "op": "update",
                        "table": ts.name,
                        "where": [["_uuid", "==", ["uuid", u.to_string()]]],
                        "row": {"is_connected": connected, "status": ["map", pairs]},
                    }],
                });
                // An internal session: its reply is dropped (no connection carries it).
                let sid = c.connect(now);
                c.handle(sid, txn, now);
                c.disconnect(sid);
                true
            });
            if ok {
                self.written.insert((db, t, u), (connected, status));
            }
        }
    }

    fn report(&mut self, key: &str, msg: String) {
        self.round.insert(key.to_string());
        if self.reported.get(key) != Some(&msg) {
            tracing::error!("{msg}");
            self.reported.insert(key.to_string(), msg);
        }
    }
}
