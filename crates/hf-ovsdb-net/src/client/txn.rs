//! Transactions of the replica: built from the replica's view by a caller's closure, sent when
//! the replica is in sync, retried when optimistic concurrency says the view was stale.
//!
//! # Retries and at-most-once
//!
//! A transaction is a [`TxnBuilder`]: a closure from the replica's rows to operations. The
//! builder guards what it read with `wait` operations ([`wait_unchanged`], [`wait_absent`], or
//! its own), so the server refuses to commit it against rows that changed meanwhile.
//!
//! - A `wait` that fails (`"timed out"`: the view was stale) is a conflict: the transaction is
//!   rebuilt and resent once the replica has applied a newer update (or after
//!   [`super::Config::txn_retry_ms`], whichever comes first), at most
//!   [`super::Config::max_txn_attempts`] times.
//! - A connection lost between sending and the reply leaves the outcome unknown: the leader may
//!   have committed it just before dying. The replica never resends the same operations;
//!   after the next sync (which brings the commit, if there was one) it calls the builder
//!   again. A builder that writes something non-idempotent makes the write conditional on the
//!   replica's view *and* guards it with a `wait`: e.g. "insert the row named X unless the
//!   replica holds one" plus [`wait_absent`] on that name. The guard covers a member that lags
//!   behind the commit; the check on the view turns the retry into a no-op
//!   ([`TxnOutcome::Unchanged`]) when the first attempt did commit. This is how the Raft test
//!   shows that no acknowledged transaction is lost and none is applied twice.
//! - Any other error fails the transaction ([`TxnOutcome::Failed`]).

use serde_json::{Value, json};

/// Builds a transaction's operations (without the database name) from the replica's view.
pub type TxnBuilder<M> = Box<dyn FnMut(&M) -> Vec<Value> + Send>;

/// Builds a transaction's operations as JSON text (see [`OpsText`]); for transactions too
/// large to build as `Value` trees (northd's cold SB is 100k operations).
pub type TextTxnBuilder<M> = Box<dyn FnMut(&M) -> OpsText + Send>;

/// How a queued transaction is built.
pub(crate) enum Build<M> {
    /// Operations as JSON trees.
    Json(TxnBuilder<M>),
    /// Operations as JSON text.
    Text(TextTxnBuilder<M>),
}

/// A transaction's operations (without the database name) as JSON text, comma-separated, each
/// appended by its writer; sent as written, never held as a `Value` tree.
///
/// Each operation must be exactly one JSON object: the writer is the caller's (e.g. northd
/// writes rows straight from its own), and debug builds check every operation parses.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OpsText {
    text: Vec<u8>,
    len: usize,
}

impl OpsText {
    /// No operations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append an operation given as a tree (for the few small ones a caller builds so).
    pub fn push_value(&mut self, op: &Value) {
        self.push_with(|out| {
            // Serialising a Value into a Vec cannot fail.
            let _ = serde_json::to_writer(out, op);
        });
    }

    /// Append an operation `write` writes as JSON text (one object).
    pub fn push_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        if self.len > 0 {
            self.text.push(b',');
        }
        let start = self.text.len();
        write(&mut self.text);
        debug_assert!(
            serde_json::from_slice::<serde_json::Map<String, Value>>(&self.text[start..]).is_ok(),
            "an operation written as text is not one JSON object: {}",
            String::from_utf8_lossy(&self.text[start..])
        );
        self.len += 1;
    }

    /// Append `other`'s operations after these.
    pub fn append(&mut self, other: OpsText) {
        if other.len == 0 {
            return;
        }
        if self.len > 0 {
            self.text.push(b',');
        }
        self.text.extend_from_slice(&other.text);
        self.len += other.len;
    }

    /// How many operations.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The operations' text, comma-separated (no brackets).
    pub fn as_bytes(&self) -> &[u8] {
        &self.text
    }

    /// The operations as trees (tests and diagnostics).
    pub fn to_values(&self) -> Result<Vec<Value>, serde_json::Error> {
        let mut text = Vec::with_capacity(self.text.len() + 2);
        text.push(b'[');
        text.extend_from_slice(&self.text);
        text.push(b']');
        serde_json::from_slice(&text)
    }
}

/// Identifies a transaction queued with [`super::Replica::transact`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxnId(pub u64);

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TxnOutcome {
    /// Committed; the server's per-operation results.
    Committed(Vec<Value>),
    /// The builder had nothing to do (e.g. a retry found its change already made).
    Unchanged,
    /// Refused.
    Failed(TxnError),
}

/// Why a transaction failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxnError {
    /// A `wait` timed out: the view it was built from was stale (retried until the attempts
    /// run out).
    #[error("conflict: {0}")]
    Conflict(String),
    /// An operation or the commit failed.
    #[error("{0}")]
    Refused(String),
    /// The reply was not what RFC 7047 says.
    #[error("malformed reply: {0}")]
    Malformed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TxnState {
    /// To be built and sent when the replica is in sync.
    Queued,
    /// Out, waiting for the reply; `updates` updates had been applied when it was built.
    Sent { updates: u64 },
    /// Lost a `wait`: resend once more than `updates` updates were applied (the view moved
    /// on since the transaction was built), or at `at`.
    WaitRetry { updates: u64, at: u64 },
}

pub(crate) struct PendingTxn<M> {
    pub(crate) id: TxnId,
    pub(crate) build: Build<M>,
    pub(crate) attempts: u32,
    pub(crate) state: TxnState,
    /// Operations the caller built already from the model as it was when the transaction
    /// was queued (at this many applied updates): sent instead of running `build` when the
    /// model has not moved since (see [`crate::client::Replica::transact_built`]).
    pub(crate) first: Option<(u64, Vec<serde_json::Value>)>,
}

/// Sort a `transact` reply into success, conflict or failure.
pub(crate) fn classify_reply(result: Result<Value, Value>) -> Result<Vec<Value>, TxnError> {
    let results = match result {
        Ok(Value::Array(a)) => a,
        Ok(other) => return Err(TxnError::Malformed(other.to_string())),
        Err(e) => return Err(TxnError::Refused(e.to_string())),
    };
    for r in &results {
        if let Some(err) = r.get("error").and_then(Value::as_str) {
            let details = r.get("details").and_then(Value::as_str).unwrap_or("");
            let text = if details.is_empty() {
                err.to_string()
            } else {
                format!("{err}: {details}")
            };
            return Err(if err == "timed out" {
                TxnError::Conflict(text)
            } else {
                TxnError::Refused(text)
            });
        }
    }
    Ok(results)
}

/// A `wait` that holds when the rows of `table` matching `where_` are exactly `rows` (in the
/// given `columns`), checked at once (`timeout` 0).
pub fn wait_rows(table: &str, where_: Value, columns: &[&str], rows: Vec<Value>) -> Value {
    json!({"op": "wait", "table": table, "timeout": 0, "where": where_,
           "columns": columns, "until": "==", "rows": rows})
}

/// A `wait` that holds when no row of `table` matches `where_`.
pub fn wait_absent(table: &str, where_: Value) -> Value {
    wait_rows(table, where_, &["_uuid"], vec![])
}

/// A `wait` that holds when `row` still has exactly the values the replica shows.
pub fn wait_unchanged<T: hf_model::Table>(row: &T) -> Value {
    let cols: Vec<&str> = T::schema()
        .columns
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    wait_rows(
        T::NAME,
        json!([["_uuid", "==", ["uuid", row.uuid().to_string()]]]),
        &cols,
        vec![Value::Object(row.to_json_row())],
    )
}

/// A `comment` operation (ovsdb-server logs it with the transaction).
pub fn comment(text: &str) -> Value {
    json!({"op": "comment", "comment": text})
}
