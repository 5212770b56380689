//! `hf-conntrack`: holdfast's userspace connection tracker.
//!
//! # Layer
//!
//! A sans-I/O core between `hf-wire` (which parses packets and applies rewrites) and
//! `hf-pipeline` (whose `ct_next`, `ct_commit`, `ct_snat`/`ct_dnat` and `ct_lb_mark` actions call
//! it). The datapath, the simulator and `holdfast trace` all run this same code.
//!
//! # What it does
//!
//! - Tracks TCP (Linux's state table with window tracking, and a liberal mode), UDP and ICMP
//!   (pseudo-states), ICMP errors as related traffic, per zone (`u16`).
//! - Keeps `ct_mark` (`u32`), `ct_label` (`u128`) and an [`Owner`] tag per connection.
//! - Translates addresses: SNAT, DNAT and both, choosing ports so that an external
//!   `address:port:protocol:peer` is never handed to two connections, in any zone.
//! - Expires connections on a timer wheel with Linux's default per-state timeouts.
//! - Bounds memory: per-zone limits and a global cap at which the oldest unestablished
//!   connection is evicted (a SYN flood cannot push out established connections).
//! - Flushes by zone or by owner, never zone 0; exports and imports connections (versioned serde
//!   data, with zone remapping) for process handoff and live migration.
//!
//! # What it does not do
//!
//! No clock, no threads, no sockets, no packet bytes: it reads an [`hf_wire::Parsed`] and returns
//! an [`hf_wire::NatRewrite`] for the caller to apply. No IP defragmentation (fragments get `inv`),
//! no ALGs (FTP, SIP), no SCTP state machine (SCTP and other protocols are tracked by their
//! tuple with the generic 600 s timeout, and SCTP ports are not translated), no `force`, no
//! expectation tables, and no per-zone timeout policies. A migration's final delta
//! ([`Selection::touched_since`]) carries what changed since the pre-copy but not what ended.
//!
//! # Memory and speed
//!
//! A connection costs one 192-byte slab entry (three cache lines, aligned; a packet in the
//! original direction reads two of them) plus one 8-byte index slot (the index hashes the
//! direction-independent form of a tuple, so both directions of an untranslated connection share
//! it; a translated one has two, plus an SNAT claim), about 210 bytes of heap at a million
//! connections; the per-packet path (lookups, rewrites,
//! related and invalid packets) never allocates (`tests/no_alloc.rs`). `hf-bench conntrack`
//! measures both.
//!
//! # Invariants
//!
//! - Each live connection is found by both its tuples (one shared index slot without NAT, two
//!   with), and no tuple belongs to two connections in a zone; an SNAT reply tuple is claimed once
//!   across all zones.
//! - A lookup never returns a connection whose timeout has passed, whether or not
//!   [`Conntrack::handle_timeout`] has collected it yet.
//! - A packet without `commit` never creates a connection.
//! - Zone 0 is never flushed.
//! - A packet from an endpoint to itself (a LAND packet) is `inv`: both directions would be one
//!   tuple.
//!
//! # Call contract
//!
//! Per packet, the pipeline calls [`Conntrack::process`]`(zone, &parsed, now, &action)` once per
//! `ct()` action, with the packet as the pipeline currently sees it (after earlier rewrites), and
//! then applies `result.rewrite` with [`hf_wire::apply_nat`] when it is not empty. `result.state`
//! is `ct_state`; `mark`, `label` and `orig` are `ct_mark`, `ct_label` and the `ct_nw_*`/`ct_tp_*`
//! fields. [`Conntrack::peek`] answers the same question without changing anything (`trace`).
//! `now` is any monotonic clock's reading as a [`std::time::Duration`] since a fixed origin; it must
//! not go backwards. The datapath calls [`Conntrack::handle_timeout`] when
//! [`Conntrack::poll_timeout`] says. Everything else (limits, flush, export, import) is control
//! traffic between packets.
//!
//! # OVN's conntrack actions in terms of [`CtAction`]
//!
//! What `ovn-controller` would compile each logical action into (ovn-sb(5), ovs-actions(7)), so
//! the pipeline interpreter calls [`Conntrack::process`] with the same meaning:
//!
//! | logical action | `ct()` | [`CtAction`] |
//! |---|---|---|
//! | `ct_next` | `ct(zone=Z)` | `CtAction::lookup()` |
//! | `ct_commit { ct_mark.x = v; ct_label.y = w; }` | `ct(commit, zone=Z, exec(set_field...))` | `CtAction { mark: Some(Masked {..}), label: .., ..CtAction::commit(owner) }` |
//! | `ct_dnat` (no argument, un-DNAT replies) / `ct_snat` | `ct(zone=Z, nat)` | `CtAction::lookup().with_nat()` |
//! | `ct_dnat(IP[:PORT])` | `ct(commit, zone=Z, nat(dst=IP[:PORT]))` | `CtAction::commit(o).dnat(NatRange::addr_port(ip, port))` |
//! | `ct_snat(IP[:PORTS])` | `ct(commit, zone=Z, nat(src=IP[:PORTS]))` | `CtAction::commit(o).snat(NatRange {..})` |
//! | `ct_lb_mark(backends=...)` | `ct(commit, zone=Z, nat(dst=BACKEND))` for a new connection, `ct(nat)` for an existing one | the pipeline picks the backend (`select`), then `commit(o).dnat(..)`; an established connection keeps its backend whatever the range says |
//! | `ct_commit_nat` / `*_in_czone` | `ct(commit, nat)` in the chosen zone | `CtAction::commit(o).with_nat()` with that zone |
//!
//! `ct_state`'s `new`/`est`/`rel`/`rpl`/`inv`/`trk`/`snat`/`dnat` bits come back in
//! [`CtResult::state`] with OVS's values; a connection is `new` in the original direction until a
//! reply is seen, as in the kernel and OVS datapaths. `ct_clear` is the pipeline forgetting the
//! result; conntrack keeps no per-packet state.
//!
//! ```
//! use std::time::Duration;
//! use hf_conntrack::{Config, Conntrack, CtAction, CtState, Owner};
//! # let frame = hf_conntrack::fuzzing::example_syn();
//! let mut ct = Conntrack::new(Config::default());
//! let pkt = hf_wire::parse(&frame, 1, 0).expect("a TCP SYN");
//! let now = Duration::from_secs(1);
//! // ct_next: lookup only. A new connection is `trk|new` and nothing is created.
//! let r = ct.process(5, &pkt, now, &CtAction::lookup());
//! assert!(r.state.contains(CtState::TRK | CtState::NEW));
//! assert!(ct.is_empty());
//! // ct_commit: now it exists.
//! ct.process(5, &pkt, now, &CtAction::commit(Owner(7)));
//! assert_eq!(ct.len(), 1);
//! ```

#![deny(clippy::iter_over_hash_type)]

mod action;
mod config;
mod export;
mod flush;
mod nat;
mod slab;
mod table;
mod tcp;
mod timer;
mod tuple;

pub use action::{CommitRefused, CtAction, CtResult, CtState, Masked, NatRange, NatRequest, Owner};
pub use config::{Config, Timeouts};
pub use export::{
    ConnState, CtExport, EXPORT_VERSION, ImportError, ImportPolicy, ImportReport, Selection,
    TcpExport,
};
pub use flush::FlushError;
pub use table::{Conntrack, Stats};
pub use tcp::{TcpPeer, TcpState};
pub use tuple::Tuple;

#[doc(hidden)]
pub mod fuzzing;

#[cfg(test)]
mod tests;
