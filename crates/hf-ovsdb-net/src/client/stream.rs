//! Reading received messages without building one JSON tree per message: [`Envelope`] splits a
//! JSON-RPC message into its members as raw JSON text borrowed from the framed bytes, and
//! [`load_table_updates2`] feeds a `<table-updates2>` text to a [`Model`] row by row
//! ([`Model::load_rows`], a batch at a time), so that a monitor reply of tens of megabytes never exists as a
//! `serde_json::Value` tree (several times its byte size): only the bytes and one row's small
//! tree at a time.
//!
//! What this does not do: it does not stream update notifications (they are applied with a
//! change set, as a whole; see `session.rs`), and it does not make the load all or nothing by
//! itself: the session only streams into an empty replica and empties it again on error.

use std::collections::{HashMap, HashSet};

use hf_model::ModelError;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::model::{FeedError, LOAD_BATCH, Model, RowSink};

/// A JSON-RPC message's members, each as raw JSON text (`None`: the member is absent; a JSON
/// `null` is `Some("null")`). Other members are ignored, as [`crate::jsonrpc::Message`] does.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    pub id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub error: Option<&'a RawValue>,
}

fn present<'de, D: de::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl<'a> Envelope<'a> {
    /// Split a framed message (a JSON object; anything else is an error naming what it is).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// The whole message as a JSON tree, for [`crate::jsonrpc::Message::from_json`].
    pub fn to_value(&self) -> Result<Value, String> {
        let mut m = Map::new();
        for (k, v) in [
            ("id", self.id),
            ("method", self.method),
            ("params", self.params),
            ("result", self.result),
            ("error", self.error),
        ] {
            if let Some(raw) = v {
                m.insert(k.to_string(), parse(raw)?);
            }
        }
        Ok(Value::Object(m))
    }

    /// The id of a successful reply (a message with `result`, without `method`, whose
    /// `error` is absent or null) when it is an unsigned integer.
    pub fn reply_id(&self) -> Option<u64> {
        if self.method.is_some() || self.error.is_some_and(|e| e.get() != "null") {
            return None;
        }
        self.result?;
        self.id?.get().parse().ok()
    }
}

/// One member's tree.
pub(crate) fn parse(raw: &RawValue) -> Result<Value, String> {
    serde_json::from_str(raw.get()).map_err(|e| e.to_string())
}

/// Load the `<table-updates2>` `text` into `model` in batches with [`Model::load_rows`];
/// returns the number of row entries. On error, the rows loaded before it stay loaded: the
/// caller discards the model.
pub(crate) fn load_table_updates2<M: Model>(model: &mut M, text: &str) -> Result<usize, FeedError> {
    for_each_batch(text, &mut |table, rows| model.load_rows(table, rows))
}

/// Read the `<table-updates2>` `text`, calling `sink` with every batch of at most
/// [`LOAD_BATCH`] row updates of one table; returns the number of row updates.
pub(crate) fn for_each_batch(text: &str, sink: &mut RowSink<'_>) -> Result<usize, FeedError> {
    let mut stash = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let r = Tables {
        sink,
        stash: &mut stash,
    }
    .deserialize(&mut de)
    .and_then(|n| de.end().map(|()| n));
    match (r, stash) {
        (_, Some(e)) => Err(FeedError::Model(e)),
        (Ok(n), None) => Ok(n),
        (Err(e), None) => Err(FeedError::Json(e.to_string())),
    }
}

/// The seed of the outer object (`{table: {uuid: row-update2}}`).
struct Tables<'m, 's> {
    sink: &'m mut RowSink<'s>,
    stash: &'m mut Option<ModelError>,
}

impl<'de> DeserializeSeed<'de> for Tables<'_, '_> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Tables<'_, '_> {
    type Value = usize;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object of table updates")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut n = 0;
        // The rows named so far, by table (a table may be named twice, as JSON allows).
        let mut seen: HashMap<String, HashSet<u128>> = HashMap::new();
        while let Some(table) = map.next_key::<String>()? {
            let seen = seen.entry(table.clone()).or_default();
            n += map.next_value_seed(Rows {
                table: &table,
                sink: &mut *self.sink,
                stash: &mut *self.stash,
                seen,
            })?;
        }
        Ok(n)
    }
}

/// The seed of one table's rows (`{uuid: row-update2}`).
struct Rows<'m, 's> {
    table: &'m str,
    sink: &'m mut RowSink<'s>,
    stash: &'m mut Option<ModelError>,
    /// The table's rows named so far in this `<table-updates2>`: a row named twice is
    /// malformed (a tree keeps the last silently; batches would report two changes of one
    /// row, or the second insert of a row as a model error).
    seen: &'m mut HashSet<u128>,
}

impl<'de> DeserializeSeed<'de> for Rows<'_, '_> {
    type Value = usize;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Rows<'_, '_> {
    type Value = usize;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "an object of row updates of table {}", self.table)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        let mut n = 0;
        let mut batch = Map::new();
        loop {
            let next = map.next_key::<String>()?;
            let last = next.is_none();
            if let Some(uuid) = next {
                // A key that is not a UUID is reported by the typing, with its place.
                if let Ok(u) = hf_ovsdb::atom::parse_uuid(&uuid)
                    && !self.seen.insert(u.as_u128())
                {
                    return Err(de::Error::custom(format!(
                        "row {uuid} of table {} is named twice in one update",
                        self.table
                    )));
                }
                let row: Value = map.next_value()?;
                batch.insert(uuid, row);
                n += 1;
            }
            if batch.len() >= LOAD_BATCH || (last && !batch.is_empty()) {
                let rows = std::mem::take(&mut batch);
                if let Err(e) = (self.sink)(self.table, rows) {
                    *self.stash = Some(e);
                    return Err(de::Error::custom("the model refused a row"));
                }
            }
            if last {
                return Ok(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use hf_model::NbSnapshot;
    use serde_json::{Value, json};

    use crate::client::{Config, Replica};

    /// The schema and `_Server` replies of `fuzzing::CLIENT_HANDSHAKE` (ids 1 and 2).
    const HANDSHAKE: &str = r#"{"id":1,"result":{"name":"OVN_Northbound","tables":{"Logical_Switch":{},"NB_Global":{},"Logical_Switch_Port":{}}},"error":null}{"id":2,"result":{"Database":{"6f0b2a2e-0000-4000-8000-000000000001":{"initial":{"name":"OVN_Northbound","model":"standalone","connected":true,"leader":true}}}},"error":null}"#;

    /// A replica fed the handshake and then `reply` as the answer to its monitor request
    /// (id 3), cut into `chunk`-byte reads.
    fn fed(reply: &[u8], initial_changes: bool, chunk: usize) -> Replica<NbSnapshot> {
        let mut r: Replica<NbSnapshot> = Replica::new(
            Config {
                initial_changes,
                ..Config::default()
            },
            0,
        );
        let remote = r.poll_connect().unwrap();
        r.handle_connected(remote, 0);
        r.handle_bytes(HANDSHAKE.as_bytes(), 1);
        for c in reply.chunks(chunk) {
            r.handle_bytes(c, 2);
        }
        r
    }

    fn reply(updates: &str) -> Vec<u8> {
        format!(
            r#"{{"id":3,"error":null,"result":[false,"6f0b2a2e-0000-4000-8000-0000000000e1",{updates}]}}"#
        )
        .into_bytes()
    }

    fn uuid(i: usize) -> String {
        format!("6f0b2a2e-0000-4000-8000-{i:012x}")
    }

    /// Seeded rows of several column kinds: strings, optional integers and booleans, sets,
    /// maps, and strong references.
    fn updates(seed: u64, n: usize) -> Value {
        let mut x = seed;
        let mut next = move || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 33
        };
        let mut ls = serde_json::Map::new();
        let mut lsp = serde_json::Map::new();
        for i in 0..n {
            let ports: Vec<Value> = (0..next() % 4)
                .map(|j| {
                    let u = uuid(1000 + i * 4 + j as usize);
                    let tag = if next() % 2 == 0 {
                        json!(["set", []])
                    } else {
                        json!(next() % 4095)
                    };
                    lsp.insert(
                        u.clone(),
                        json!({"initial": {
                            "name": format!("p{i}-{j}"),
                            "addresses": ["set", [format!("0a:00:00:00:00:{:02x} 10.0.0.{j}", i % 256)]],
                            "enabled": if next() % 2 == 0 { json!(true) } else { json!(["set", []]) },
                            "tag_request": tag,
                            "options": ["map", [["k", format!("{}", next())]]],
                        }}),
                    );
                    json!(["uuid", u])
                })
                .collect();
            ls.insert(
                uuid(i),
                json!({"initial": {
                    "name": format!("sw{i}"),
                    "ports": ["set", ports],
                    "other_config": ["map", [["subnet", "10.0.0.0/24"], ["n", format!("{}", next())]]],
                }}),
            );
        }
        json!({"Logical_Switch": ls, "Logical_Switch_Port": lsp})
    }

    #[test]
    fn streamed_first_sync_equals_the_tree_paths() {
        let u = updates(7, 40);
        let bytes = reply(&u.to_string());
        let mut want = NbSnapshot::default();
        want.load_updates2(u.clone()).unwrap();
        assert!(want.len() > 40);
        for chunk in [bytes.len(), 4096, 7] {
            let streamed = fed(&bytes, false, chunk);
            assert!(streamed.is_synced(), "chunk {chunk}");
            assert_eq!(*streamed.model(), want, "chunk {chunk}");
            assert_eq!(streamed.stats().rows_received as usize, want.len());
            assert_eq!(
                streamed.last_txn_id(),
                Some("6f0b2a2e-0000-4000-8000-0000000000e1")
            );
        }
        // `initial_changes` takes the tree path (a change set is wanted): the same replica.
        let tree = fed(&bytes, true, bytes.len());
        assert_eq!(*tree.model(), want);
    }

    #[test]
    fn malformed_replies_fail_cleanly_and_leave_the_replica_empty() {
        let good = format!(r#""{}":{{"initial":{{"name":"a"}}}}"#, uuid(1));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (reply("[]"), "malformed monitor reply"),
            (reply(r#"{"Logical_Switch":5}"#), "malformed monitor reply"),
            (
                reply(&format!(
                    r#"{{"Logical_Switch":{{{good},"nope":{{"initial":{{}}}}}}}}"#
                )),
                "cannot apply the monitor reply",
            ),
            (
                reply(&format!(
                    r#"{{"Logical_Switch":{{{good},"{}":{{"initial":{{"name":5}}}}}}}}"#,
                    uuid(2)
                )),
                "cannot apply the monitor reply",
            ),
            (
                reply(&format!(
                    r#"{{"NB_Global":{{}},"Logical_Switch":{{{good}}},"Logical_Switch_Port":{{"{}":{{"initial":{{"name":"p"}},"delete":null}}}}}}"#,
                    uuid(3)
                )),
                "cannot apply the monitor reply",
            ),
            (
                br#"{"id":3,"error":null,"result":[false,"x"]}"#.to_vec(),
                "malformed monitor_cond_since reply",
            ),
            (
                br#"{"id":3,"error":null,"result":{"a":1}}"#.to_vec(),
                "malformed monitor_cond_since reply",
            ),
            (
                reply(&format!(
                    r#"{{"Logical_Switch":{{{good},"x":{{"initial":tru}}}}}}"#
                )),
                "bad stream: malformed JSON",
            ),
            (
                reply(r#"{"Logical_Switch":{"a":{"initial":{"name":"\u12"}}}}"#),
                "bad stream: malformed JSON",
            ),
            (
                [
                    &br#"{"id":3,"error":null,"result":[false,"x",{"Logical_Switch":{"a":{"initial":{"name":""#[..],
                    b"\xff",
                    br#""}}}}]}"#,
                ]
                .concat(),
                "bad stream: malformed JSON",
            ),
        ];
        for (i, (bytes, want)) in cases.iter().enumerate() {
            let mut r = fed(bytes, false, bytes.len());
            let why = r.poll_close();
            assert!(
                why.as_deref().is_some_and(|w| w.contains(want)),
                "case {i}: {:?} closed with {why:?}, want {want:?}",
                String::from_utf8_lossy(bytes)
            );
            assert!(!r.is_synced(), "case {i}");
            assert_eq!(r.model().len(), 0, "case {i}: the replica must stay empty");
            assert_eq!(r.last_txn_id(), None, "case {i}");
        }
    }

    /// An `update3` of the replica's monitor carrying `updates`.
    fn update3(updates: &Value) -> Vec<u8> {
        format!(
            r#"{{"id":null,"method":"update3","params":["hf-replica","6f0b2a2e-0000-4000-8000-0000000000e2",{updates}]}}"#
        )
        .into_bytes()
    }

    #[test]
    fn large_updates_apply_batch_by_batch_like_the_tree_path() {
        let base = updates(3, 20);
        let mut r = fed(&reply(&base.to_string()), false, usize::MAX);
        assert!(r.is_synced());
        // More than a mebibyte: inserts, modifies and deletes of switches and ports.
        let mut ls = serde_json::Map::new();
        let pad = "x".repeat(300);
        for i in 0..4000 {
            ls.insert(
                uuid(100_000 + i),
                json!({"insert": {"name": format!("big{i}"), "external_ids": ["map", [["pad", pad]]]}}),
            );
        }
        ls.insert(uuid(0), json!({"modify": {"name": "renamed"}}));
        ls.insert(uuid(1), json!({"delete": null}));
        let u = json!({"Logical_Switch": ls});
        let bytes = update3(&u);
        assert!(bytes.len() > super::super::session_stream_min());
        let mut want = r.model().clone();
        let delta = want.apply_updates2(&u).unwrap();
        while r.poll_event().is_some() {}
        for c in bytes.chunks(65536) {
            r.handle_bytes(c, 3);
        }
        assert_eq!(r.poll_close(), None);
        assert_eq!(*r.model(), want);
        assert_eq!(
            r.last_txn_id(),
            Some("6f0b2a2e-0000-4000-8000-0000000000e2")
        );
        let got: Vec<_> = std::iter::from_fn(|| r.poll_event())
            .filter_map(|e| match e {
                crate::client::Event::Changes(d) => Some(d),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0], delta,
            "the change set is the tree path's, in its order"
        );

        // A bad row anywhere: nothing applied, the session starts over.
        let before = r.model().clone();
        let mut bad = u.clone();
        bad["Logical_Switch"][uuid(100_000 + 2_000)] = json!({"insert": {"name": 5}});
        r.handle_bytes(&update3(&bad), 4);
        let why = r.poll_close().unwrap_or_default();
        assert!(why.contains("cannot apply an update"), "{why}");
        assert_eq!(*r.model(), before, "all or nothing");
        assert_eq!(r.last_txn_id(), None);
    }

    /// A staged update changes nothing until it is applied, and then what the tree path
    /// changes, with the tree path's change set.
    #[test]
    fn a_staged_update_is_applied_only_by_apply_staged() {
        use crate::client::{Model, Staged};
        let base = updates(5, 30);
        let mut staged = NbSnapshot::default();
        staged.apply_updates2(&base).unwrap();
        let mut direct = staged.clone();
        let before = staged.clone();
        let mut ls = serde_json::Map::new();
        for i in 0..600 {
            ls.insert(
                uuid(200_000 + i),
                json!({"insert": {"name": format!("new{i}")}}),
            );
        }
        ls.insert(uuid(0), json!({"modify": {"name": "renamed"}}));
        ls.insert(uuid(1), json!({"delete": null}));
        let u = json!({"Logical_Switch": ls});
        let feed_of = |u: &Value| {
            let text = u.to_string();
            move |sink: &mut crate::client::model::RowSink<'_>| super::for_each_batch(&text, sink)
        };
        let want = direct.apply_updates2(&u).unwrap();
        let Staged::Pending(d) = staged.stage_updates2_batches(&mut feed_of(&u)).unwrap() else {
            panic!("a typed snapshot stages");
        };
        assert_eq!(staged, before, "staging changes nothing");
        assert_eq!(d, want);
        staged.apply_staged(&d).unwrap();
        assert_eq!(staged, direct);
        assert_ne!(staged, before);
    }

    #[test]
    fn a_row_named_twice_in_one_large_update_is_refused_whole() {
        // The second mention right after the first (one batch), or after more rows than a
        // batch holds.
        for at in [1, 3000] {
            row_named_twice_at(at);
        }
    }

    fn row_named_twice_at(at: usize) {
        let mut r = fed(&reply(&updates(5, 10).to_string()), false, usize::MAX);
        assert!(r.is_synced());
        while r.poll_event().is_some() {}
        let before = r.model().clone();
        let pad = "y".repeat(400);
        let mut rows: Vec<String> = (0..3000)
            .map(|i| {
                format!(
                    r#""{}":{{"insert":{{"name":"n{i}","external_ids":["map",[["pad","{pad}"]]]}}}}"#,
                    uuid(200_000 + i)
                )
            })
            .collect();
        rows.insert(
            at,
            format!(r#""{}":{{"insert":{{"name":"again"}}}}"#, uuid(200_000)),
        );
        let text = format!(r#"{{"Logical_Switch":{{{}}}}}"#, rows.join(","));
        let bytes = format!(
            r#"{{"id":null,"method":"update3","params":["hf-replica","6f0b2a2e-0000-4000-8000-0000000000e3",{text}]}}"#
        );
        assert!(bytes.len() > super::super::session_stream_min());
        r.handle_bytes(bytes.as_bytes(), 5);
        let why = r.poll_close().unwrap_or_default();
        assert!(why.contains("named twice in one update"), "at {at}: {why}");
        assert_eq!(*r.model(), before, "at {at}: all or nothing");
        let changes = std::iter::from_fn(|| r.poll_event())
            .filter(|e| matches!(e, crate::client::Event::Changes(_)))
            .count();
        assert_eq!(changes, 0, "at {at}: no change reported");
    }
}
