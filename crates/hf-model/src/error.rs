//! The one error type of hf-model.

use uuid::Uuid;

/// Why a row, a database or an update could not be turned into typed rows.
///
/// Every variant names the table, and where there is one the row UUID and the column, so that
/// a consumer can report the offending row and keep going with the others.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A column's value does not have the type holdfast's schema gives it (wrong atomic type,
    /// wrong number of values, a set where a map belongs, or a constraint violated).
    #[error("table {table}, row {uuid}, column {column}: {detail}")]
    Column {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// The row.
        uuid: Uuid,
        /// What is wrong.
        detail: String,
    },
    /// A string enum column holds a value holdfast's schema does not list (from a newer peer).
    /// Conversions keep such values as the enum's `Other` variant; this error comes from the
    /// generated `check_known` methods, for callers that must refuse them.
    #[error("table {table}, row {uuid}, column {column}: unknown value {value:?}")]
    UnknownEnum {
        /// Table name.
        table: String,
        /// Column name.
        column: String,
        /// The row.
        uuid: Uuid,
        /// The value as received.
        value: String,
    },
    /// An update does not fit the snapshot it is applied to (a modify or delete of a row the
    /// snapshot does not hold, an insert of one it already holds).
    #[error("table {table}, row {uuid}: {detail}")]
    Row {
        /// Table name.
        table: String,
        /// The row.
        uuid: Uuid,
        /// What is wrong.
        detail: String,
    },
    /// A `<table-updates2>` value that is not shaped as ovsdb-server(7) describes.
    #[error("malformed table-updates2{}: {detail}", at.as_ref().map(|a| format!(" at {a}")).unwrap_or_default())]
    Update {
        /// Where in the update: `TABLE` or `TABLE row UUID`.
        at: Option<String>,
        /// What is wrong.
        detail: String,
    },
}

impl ModelError {
    /// A malformed update at `at`.
    pub(crate) fn update(at: impl Into<String>, detail: impl Into<String>) -> Self {
        ModelError::Update {
            at: Some(at.into()),
            detail: detail.into(),
        }
    }
}
