//! The error kinds RFC 7047 names, with their exact wire spellings.

use serde_json::{Value, json};

/// An RFC 7047 (or ovsdb-server) error kind. `as_str` is the exact string clients match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Malformed request or operation.
    Syntax,
    /// A transaction deleted a row still referenced, or referenced a row that does not exist.
    ReferentialIntegrity,
    /// A value or row count outside the schema's constraints, or a duplicate index key.
    Constraint,
    /// Memory or another resource ran out.
    ResourcesExhausted,
    /// The database file could not be written.
    Io,
    /// Two inserts used the same `uuid-name`.
    DuplicateUuidName,
    /// Division by zero in a mutation.
    Domain,
    /// A mutation's result is out of range.
    Range,
    /// A `wait` operation's condition did not hold in time.
    TimedOut,
    /// The operation is not supported.
    NotSupported,
    /// The transaction contained an `abort`.
    Aborted,
    /// `assert` of a lock the session does not own.
    NotOwner,
    /// A database name the server does not serve.
    UnknownDatabase,
    /// A JSON-RPC method the server does not implement (exact string the IDL falls back on).
    UnknownMethod,
    /// A monitor id that does not exist or is already in use.
    UnknownMonitor,
    /// The transaction was canceled.
    Canceled,
    /// An error ovsdb-server reports without a more specific class, e.g. a set or map value
    /// with a duplicate element (`"ovsdb error"`).
    Generic,
}

impl ErrorKind {
    /// The exact wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Syntax => "syntax error",
            ErrorKind::ReferentialIntegrity => "referential integrity violation",
            ErrorKind::Constraint => "constraint violation",
            ErrorKind::ResourcesExhausted => "resources exhausted",
            ErrorKind::Io => "I/O error",
            ErrorKind::DuplicateUuidName => "duplicate uuid-name",
            ErrorKind::Domain => "domain error",
            ErrorKind::Range => "range error",
            ErrorKind::TimedOut => "timed out",
            ErrorKind::NotSupported => "not supported",
            ErrorKind::Aborted => "aborted",
            ErrorKind::NotOwner => "not owner",
            ErrorKind::UnknownDatabase => "unknown database",
            ErrorKind::UnknownMethod => "unknown method",
            ErrorKind::UnknownMonitor => "unknown monitor",
            ErrorKind::Canceled => "canceled",
            ErrorKind::Generic => "ovsdb error",
        }
    }
}

/// An OVSDB error: a kind and a human-readable detail naming what was wrong and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {details}", kind.as_str())]
pub struct OvsdbError {
    /// The RFC 7047 kind.
    pub kind: ErrorKind,
    /// What was wrong, and where (table, column, operation index).
    pub details: String,
}

impl OvsdbError {
    /// An error of `kind` with `details`.
    pub fn new(kind: ErrorKind, details: impl Into<String>) -> Self {
        OvsdbError {
            kind,
            details: details.into(),
        }
    }

    /// A syntax error.
    pub fn syntax(details: impl Into<String>) -> Self {
        Self::new(ErrorKind::Syntax, details)
    }

    /// A constraint violation.
    pub fn constraint(details: impl Into<String>) -> Self {
        Self::new(ErrorKind::Constraint, details)
    }

    /// Prefix the details with context (e.g. the column being parsed).
    pub fn context(mut self, ctx: impl std::fmt::Display) -> Self {
        self.details = format!("{ctx}: {}", self.details);
        self
    }

    /// The `{"error": ..., "details": ...}` object RFC 7047 puts in results.
    pub fn to_json(&self) -> Value {
        json!({"error": self.kind.as_str(), "details": self.details})
    }
}

/// Shorthand.
pub type Result<T, E = OvsdbError> = std::result::Result<T, E>;
