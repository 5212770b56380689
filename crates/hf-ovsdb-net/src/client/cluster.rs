//! What the replica knows about the server it talks to: the `_Server` `Database` row of its
//! database (ovsdb-server(5)), and the rules that decide whether a member is good enough.

use hf_ovsdb::{Atom, Datum, Schema};
use serde_json::{Map, Value};
use uuid::Uuid;

/// The `_Server` `Database` row of the replicated database, as far as the replica cares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerInfo {
    /// `standalone`, `clustered` or `relay`.
    pub model: String,
    /// Whether the member is connected to its cluster (always true for standalone).
    pub connected: bool,
    /// Whether the member is the cluster's leader (always true for standalone).
    pub leader: bool,
    /// The Raft log index the member has applied (clustered only).
    pub index: Option<i64>,
    /// The cluster's id (clustered only).
    pub cid: Option<Uuid>,
    /// The member's server id (clustered only).
    pub sid: Option<Uuid>,
}

/// Why a member is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemberRejection {
    /// The server does not serve the database at all.
    #[error("the server does not serve the database")]
    NoDatabase,
    /// The member lost contact with its cluster.
    #[error("the member is not connected to its cluster")]
    NotConnected,
    /// Writes go to the leader and this member is not it.
    #[error("the member is not the leader")]
    NotLeader,
    /// The member has applied less of the log than the replica has already seen elsewhere.
    #[error("the member is behind (index {index} < {seen})")]
    Behind {
        /// The member's index.
        index: i64,
        /// The highest index the replica saw.
        seen: i64,
    },
}

/// The `_Server` row as typed datums, updated by `update2` row updates.
#[derive(Debug, Default)]
pub(crate) struct ServerRow {
    row: Option<(Uuid, Vec<Datum>)>,
}

impl ServerRow {
    /// Apply a `<table-updates2>` of the `_Server` monitor. Returns false on malformed input.
    pub(crate) fn apply(&mut self, schema: &Schema, updates: &Value) -> bool {
        let Some(ts) = schema.tables.first() else {
            return false;
        };
        let Some(rows) = updates.get("Database").and_then(Value::as_object) else {
            return updates.is_object();
        };
        for (uuid, upd) in rows {
            let Ok(uuid) = hf_ovsdb::atom::parse_uuid(uuid) else {
                return false;
            };
            let Some((kind, body)) = upd.as_object().and_then(|o| o.iter().next()) else {
                return false;
            };
            let parse = |name: &str, v: &Value| -> Option<(usize, Datum)> {
                let i = ts.column_index(name)?;
                let mut no = |_: &str| Err(hf_ovsdb::OvsdbError::syntax("named-uuid"));
                let d = Datum::from_json_unchecked(&ts.columns[i].ty, v, &mut no).ok()?;
                Some((i, d))
            };
            match kind.as_str() {
                "initial" | "insert" => {
                    let mut cols: Vec<Datum> =
                        ts.columns.iter().map(|c| c.ty.default_datum()).collect();
                    for (name, v) in body.as_object().unwrap_or(&Map::new()) {
                        if let Some((i, d)) = parse(name, v) {
                            cols[i] = d;
                        }
                    }
                    self.row = Some((uuid, cols));
                }
                "modify" => {
                    let Some((u, cols)) = &mut self.row else {
                        return false;
                    };
                    if *u != uuid {
                        continue;
                    }
                    for (name, v) in body.as_object().unwrap_or(&Map::new()) {
                        if let Some((i, d)) = parse(name, v) {
                            cols[i] = cols[i].apply_diff(&d, &ts.columns[i].ty);
                        }
                    }
                }
                "delete" => {
                    if self.row.as_ref().is_some_and(|(u, _)| *u == uuid) {
                        self.row = None;
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// The typed view; `None` when the server has no row for the database.
    pub(crate) fn info(&self, schema: &Schema) -> Option<ServerInfo> {
        let (_, cols) = self.row.as_ref()?;
        let ts = schema.tables.first()?;
        let col = |name: &str| ts.column_index(name).and_then(|i| cols.get(i));
        let first = |name: &str| col(name).and_then(Datum::first).cloned();
        Some(ServerInfo {
            model: first("model")
                .and_then(|a| a.as_str().map(str::to_string))
                .unwrap_or_default(),
            connected: matches!(first("connected"), Some(Atom::Boolean(true))),
            leader: matches!(first("leader"), Some(Atom::Boolean(true))),
            index: first("index").and_then(|a| a.as_integer()),
            cid: first("cid").and_then(|a| a.as_uuid()),
            sid: first("sid").and_then(|a| a.as_uuid()),
        })
    }
}

/// Whether a member described by `info` may serve the replica (ovsdb-idl's rules): connected
/// to its cluster, the leader when `leader_only`, and not behind the highest log index seen so
/// far (of the same cluster: the caller resets `seen_index` when the cluster id changes).
pub(crate) fn judge(
    info: Option<&ServerInfo>,
    leader_only: bool,
    seen_index: i64,
) -> Result<(), MemberRejection> {
    let Some(info) = info else {
        return Err(MemberRejection::NoDatabase);
    };
    if info.model != "clustered" {
        return Ok(());
    }
    if !info.connected {
        return Err(MemberRejection::NotConnected);
    }
    if leader_only && !info.leader {
        return Err(MemberRejection::NotLeader);
    }
    if let Some(index) = info.index
        && index < seen_index
    {
        return Err(MemberRejection::Behind {
            index,
            seen: seen_index,
        });
    }
    Ok(())
}
