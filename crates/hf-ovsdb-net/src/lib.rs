//! hf-ovsdb-net: OVSDB over streams.
//!
//! What it does: JSON-RPC 1.0 framing of back-to-back JSON values ([`framing`]) and message
//! classification ([`jsonrpc`]); the OVSDB server: a sans-I/O protocol core ([`server::Core`],
//! every method of RFC 7047 and ovsdb-server(7): transactions, the three monitor kinds,
//! `monitor_cond_change`, locks, `echo` both ways, `_Server`) with database files
//! ([`storage`]) and a tokio shell ([`serve`]) that listens on `ptcp:`/`pssl:`/`punix:` remotes
//! and applies backpressure; TLS with OVS's options and mutual authentication ([`tls`]) for
//! `pssl:` listeners and the client replica's `ssl:` remotes.
//!
//! What it does not do: the database semantics themselves (those are `hf-ovsdb`), or
//! clustering (holdfast scales out on a real `ovsdb-server` Raft cluster instead).

pub mod client;
pub mod framing;
#[doc(hidden)]
pub mod fuzzing;
pub mod jsonrpc;
pub mod serve;
pub mod server;
pub mod storage;
pub mod tls;
