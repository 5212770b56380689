//! hf-ovsdb: the RFC 7047 data model, sans-I/O.
//!
//! What it does: parses and validates `.ovsschema` files ([`Schema`]); atoms and datums with
//! every type constraint ([`Atom`], [`Datum`], [`ColumnType`]); conditions and mutations;
//! whole transactions with every RFC 7047 operation and the commit-time rules (strong and weak
//! references, garbage collection of unreferenced non-root rows, `maxRows`, unique `indexes`)
//! ([`txn::execute`]); monitors in the three notification formats ([`Monitor`]); the `_Server`
//! database; and OVSDB's standalone file format ([`file`]).
//!
//! What it does not do: sockets, threads, files or clocks. Callers pass requests, bytes and
//! time in and act on what it returns; `hf-ovsdb-net` is the I/O shell.
//!
//! Invariants: a [`Database`] only ever holds rows that satisfy its schema and referential
//! integrity; [`txn::execute`] never changes committed rows (it returns a [`TxnDelta`] that the
//! caller applies after persisting it), so a failed write loses nothing.
//!
//! Error kinds and their wire spellings are those of RFC 7047 and ovsdb-server ([`ErrorKind`]).

pub mod atom;
pub mod cond_index;
pub mod condition;
pub mod datum;
pub mod db;
pub mod error;
pub mod file;
pub mod monitor;
pub mod mutation;
pub mod row_index;
pub mod schema;
pub mod server_db;
pub mod txn;
pub mod types;

pub use atom::{Atom, AtomicType};
pub use datum::Datum;
pub use db::{Database, Row, RowChange, TxnDelta, UuidGen};
pub use error::{ErrorKind, OvsdbError};
pub use monitor::{Monitor, MonitorVersion};
pub use schema::{ColumnRef, ColumnSchema, Schema, TableSchema};
pub use types::{BaseType, ColumnType, RefType};
pub use uuid::Uuid;
