//! Diagnostics about NB content: one per bad row, naming the table, the row and the reason.
//! A bad row is left out of what northd writes (or written in a safe reduced form, which the
//! diagnostic says); everything else compiles on.

use std::fmt;

use uuid::Uuid;

/// One problem with one NB row.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Diagnostic {
    /// The NB table (`Logical_Switch_Port`).
    pub table: &'static str,
    /// The row's UUID.
    pub row: Uuid,
    /// The row's name (or another human handle: a NAT's `type logical_ip external_ip`).
    pub name: String,
    /// What is wrong, and what northd did about it.
    pub reason: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.row.simple().to_string();
        write!(
            f,
            "{} {:?} ({}): {}",
            self.table,
            self.name,
            &short[..8.min(short.len())],
            self.reason
        )
    }
}

/// Collects diagnostics during a compile.
#[derive(Debug, Default, Clone)]
pub struct Diags(pub Vec<Diagnostic>);

impl Diags {
    /// Records one.
    pub fn push(
        &mut self,
        table: &'static str,
        row: Uuid,
        name: impl Into<String>,
        reason: impl Into<String>,
    ) {
        self.0.push(Diagnostic {
            table,
            row,
            name: name.into(),
            reason: reason.into(),
        });
    }
}
