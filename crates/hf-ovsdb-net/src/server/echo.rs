//! Monitor updates ("echoes" of committed transactions) decided under the core's lock and
//! encoded outside it.
//!
//! What it does: at commit, the core finds through a [`CondIndex`] which distinct monitor specs
//! may report which row changes (work proportional to the changed rows and the monitors that
//! care, not rows × monitors), and queues one [`PendingUpdate`] per monitor. A pending update
//! holds only shared, immutable things: the committed delta (`Arc`'d rows), the monitor spec
//! as it was at commit, and the selected change indices. Whoever sends it (the connection's
//! writer in [`crate::serve`], or [`super::Core::poll_output`] for sans-I/O callers) encodes
//! it; monitors with the same spec share one encoding ([`Echo`]). An update no other session
//! shares can be encoded in parts ([`PendingUpdate::encode_parts`]), which the shell writes as
//! they are made.
//!
//! What it does not do: change what is reported. The index only narrows the candidates; the
//! monitor's own evaluation ([`Monitor::updates_selected`]) decides, as before.

use std::sync::{Arc, OnceLock};

use hf_ovsdb::cond_index::CondIndex;
use hf_ovsdb::{Monitor, MonitorVersion, Schema, TxnDelta};

use crate::jsonrpc::notification_bytes_raw;

/// One committed delta as one monitor spec sees it; encoded at most once.
pub struct Echo {
    schema: Arc<Schema>,
    delta: Arc<TxnDelta>,
    monitor: Arc<Monitor>,
    /// Per delta table, the indices of the changes the index found for this spec.
    rows: Vec<Vec<u32>>,
    bytes: OnceLock<Option<Vec<u8>>>,
}

impl std::fmt::Debug for Echo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Echo")
            .field("candidate_rows", &self.candidate_rows())
            .field("encoded", &self.is_encoded())
            .finish()
    }
}

impl Echo {
    /// How many row changes may be reported (an upper bound on the update's rows).
    pub fn candidate_rows(&self) -> usize {
        self.rows.iter().map(Vec::len).sum()
    }

    /// Whether the `<table-updates>` text has been made yet.
    pub fn is_encoded(&self) -> bool {
        self.bytes.get().is_some()
    }

    /// The `<table-updates>` (or `<table-updates2>`) JSON text; None when nothing is reported.
    pub fn updates(&self) -> Option<&[u8]> {
        self.bytes
            .get_or_init(|| {
                // Sized up front (about a Logical_Flow row's text per candidate): a
                // 38 MB echo grown by doubling would touch twice its size in fresh pages.
                let mut out = Vec::with_capacity(64 + self.candidate_rows() * 384);
                self.monitor
                    .write_updates_selected(&self.schema, &self.delta, Some(&self.rows), &mut out)
                    .then_some(out)
            })
            .as_deref()
    }
}

/// A monitor notification for one session, not yet encoded.
#[derive(Debug, Clone)]
pub struct PendingUpdate {
    echo: Arc<Echo>,
    version: MonitorVersion,
    /// The monitor id, as JSON text.
    id: String,
    /// The transaction id, as JSON text (update3 only).
    txn: String,
}

impl PartialEq for PendingUpdate {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.echo, &o.echo) && self.id == o.id && self.txn == o.txn
    }
}

impl PendingUpdate {
    /// The whole notification message; None when the transaction changed nothing this monitor
    /// reports (then nothing is sent).
    pub fn encode(&self) -> Option<Vec<u8>> {
        let u = self.echo.updates()?;
        let id = self.id.as_bytes();
        Some(match self.version {
            MonitorVersion::V1 => notification_bytes_raw("update", &[id, u]),
            MonitorVersion::V2 => notification_bytes_raw("update2", &[id, u]),
            MonitorVersion::V3 => notification_bytes_raw("update3", &[id, self.txn.as_bytes(), u]),
        })
    }

    /// [`PendingUpdate::encode`] in parts of about `part` bytes, each given to `send` as soon as
    /// it is made (the first starts the message, the last ends it), so a large update's first
    /// bytes can go out while the rest is encoded and the whole text never exists at once. The
    /// parts joined are exactly `encode`'s bytes. An update whose text other sessions share
    /// (its [`Echo`] is pending for them too, or already made) is encoded whole, once, and sent
    /// as one part. Returns false, sending nothing, when nothing is reported.
    pub fn encode_parts(self, part: usize, send: &mut dyn FnMut(Vec<u8>)) -> bool {
        if self.echo.is_encoded() || Arc::strong_count(&self.echo) > 1 {
            return match self.encode() {
                Some(b) => {
                    send(b);
                    true
                }
                None => false,
            };
        }
        // As `notification_bytes_raw` frames it.
        let method = match self.version {
            MonitorVersion::V1 => "update",
            MonitorVersion::V2 => "update2",
            MonitorVersion::V3 => "update3",
        };
        let mut head = format!(
            "{{\"id\":null,\"method\":\"{method}\",\"params\":[{},",
            self.id
        );
        if self.version == MonitorVersion::V3 {
            head.push_str(&self.txn);
            head.push(',');
        }
        let mut head = Some(head.into_bytes());
        let e = &self.echo;
        let mut out = Vec::with_capacity(part.saturating_add(part / 8).min(64 << 20));
        let any = e.monitor.write_updates_parts(
            &e.schema,
            &e.delta,
            Some(&e.rows),
            &mut out,
            part,
            &mut |o: &mut Vec<u8>| {
                let fresh = Vec::with_capacity(part.saturating_add(part / 8).min(64 << 20));
                let body = std::mem::replace(o, fresh);
                send(match head.take() {
                    Some(mut h) => {
                        h.extend_from_slice(&body);
                        h
                    }
                    None => body,
                });
            },
        );
        if !any {
            return false;
        }
        let mut last = head.take().unwrap_or_default();
        last.extend_from_slice(&out);
        last.extend_from_slice(b"]}");
        send(last);
        true
    }

    /// Whether the shared update text has been made (by this or another session's sender).
    pub fn is_encoded(&self) -> bool {
        self.echo.is_encoded()
    }

    /// A rough size in bytes, for backpressure before the update is encoded.
    pub fn size_hint(&self) -> usize {
        64 + self.echo.candidate_rows() * 128
    }

    /// Whether encoding may take long enough to deserve its own thread.
    pub fn is_large(&self) -> bool {
        !self.is_encoded() && self.echo.candidate_rows() > 256
    }
}

/// The distinct monitor specs of one database and the index over their conditions; rebuilt
/// when a monitor is added, removed or changes its conditions.
pub(super) struct Specs {
    /// Spec key → spec number.
    pub by_key: hashbrown::HashMap<String, u32>,
    /// Spec number → the monitor (any of those sharing the spec).
    pub monitors: Vec<Arc<Monitor>>,
    pub index: CondIndex,
}

impl Specs {
    pub fn build<'a>(
        n_tables: usize,
        monitors: impl Iterator<Item = (&'a str, &'a Arc<Monitor>)>,
    ) -> Self {
        let mut by_key = hashbrown::HashMap::new();
        let mut list: Vec<Arc<Monitor>> = Vec::new();
        for (k, m) in monitors {
            if !by_key.contains_key(k) {
                by_key.insert(k.to_string(), list.len() as u32);
                list.push(m.clone());
            }
        }
        let index = CondIndex::build(
            n_tables,
            list.iter().enumerate().map(|(i, m)| (i as u32, &**m)),
        );
        Specs {
            by_key,
            monitors: list,
            index,
        }
    }

    /// One [`Echo`] per spec that may report something of `delta`.
    pub fn echoes(&self, schema: &Arc<Schema>, delta: &Arc<TxnDelta>) -> Vec<Option<Arc<Echo>>> {
        let mut rows: Vec<Option<Vec<Vec<u32>>>> = vec![None; self.monitors.len()];
        let mut cand = Vec::new();
        for (di, (t, changes)) in delta.tables.iter().enumerate() {
            if !self.index.watches(*t) {
                continue;
            }
            for (ci, ch) in changes.iter().enumerate() {
                cand.clear();
                self.index.candidates(*t, ch, &mut cand);
                for &s in &cand {
                    let r = rows[s as usize]
                        .get_or_insert_with(|| vec![Vec::new(); delta.tables.len()]);
                    r[di].push(ci as u32);
                }
            }
        }
        rows.into_iter()
            .zip(&self.monitors)
            .map(|(r, m)| {
                r.map(|rows| {
                    Arc::new(Echo {
                        schema: schema.clone(),
                        delta: delta.clone(),
                        monitor: m.clone(),
                        rows,
                        bytes: OnceLock::new(),
                    })
                })
            })
            .collect()
    }
}

/// A pending update of `echo` for a monitor with id `id` (JSON text).
pub(super) fn pending(
    echo: &Arc<Echo>,
    version: MonitorVersion,
    id: String,
    txn: &str,
) -> PendingUpdate {
    PendingUpdate {
        echo: echo.clone(),
        version,
        id,
        txn: txn.to_string(),
    }
}
