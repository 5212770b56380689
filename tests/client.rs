//! The OVSDB client replica against `holdfast db`, real `ovsdb-server` (standalone and a
//! three-member Raft cluster) and itself (locks): issue 3's acceptance, as one test binary.
// Integration tests are I/O shells: they read the clock and spawn threads.
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "client/diff_follow.rs"]
mod diff_follow;
#[path = "client/follow.rs"]
mod follow;
#[path = "client/lock.rs"]
mod lock;
#[path = "client/procs.rs"]
mod procs;
#[path = "client/raft.rs"]
mod raft;
#[path = "client/stream_load.rs"]
mod stream_load;
