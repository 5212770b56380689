//! Entry points for the fuzz targets in `fuzz/` (and for replaying their corpora as tests).
//! They must never panic, whatever the bytes.

use std::sync::Arc;

use hf_ovsdb::{Database, Schema};

use crate::framing::Framer;
use crate::server::{Config, Core, Now, Output};

/// A schema with every feature transactions exercise: strong and weak references, a non-root
/// table (garbage collection), an index, maxRows, enums, ranges, maps.
pub const SCHEMA: &str = r#"{"name": "F", "version": "1.0.0", "tables": {
  "R": {"isRoot": true, "maxRows": 50, "indexes": [["name"]], "columns": {
    "name": {"type": "string"},
    "n": {"type": {"key": {"type": "integer", "minInteger": -5, "maxInteger": 1000}}},
    "x": {"type": {"key": "real", "min": 0, "max": 1}},
    "b": {"type": "boolean"},
    "e": {"type": {"key": {"type": "string", "enum": ["set", ["a", "b", "c"]]}, "min": 0, "max": "unlimited"}},
    "m": {"type": {"key": "string", "value": {"type": "integer", "maxInteger": 9}, "min": 0, "max": "unlimited"}},
    "kids": {"type": {"key": {"type": "uuid", "refTable": "K"}, "min": 0, "max": 4}},
    "fav": {"type": {"key": {"type": "uuid", "refTable": "K", "refType": "weak"}, "min": 0, "max": 1}},
    "fixed": {"type": "string", "mutable": false}}},
  "K": {"columns": {
    "v": {"type": {"key": {"type": "string", "maxLength": 8}}},
    "peer": {"type": {"key": {"type": "uuid", "refTable": "K", "refType": "weak"}, "value": "integer", "min": 0, "max": "unlimited"}}}}}}"#;

/// What one run did, so that corpus replays can check the seeds reach deep.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunStats {
    /// Messages the server sent to the fuzzed client.
    pub replies: usize,
    /// Update notifications the monitoring client received (committed changes).
    pub updates: usize,
}

/// Feed `data` to a server core as one client's byte stream (split at a data-dependent point,
/// so framing across reads is exercised), with a second client monitoring everything.
///
/// Twice, on two cores: once as the server reads it ([`Framer::next_raw`],
/// [`Core::handle_bytes`]: `transact` requests split into operation texts) and once through
/// the tree path ([`Framer::next_message`], [`Core::handle`]); both must send the same bytes.
pub fn rpc_stream(data: &[u8]) -> RunStats {
    let (stats, split) = rpc_stream_via(data, true);
    let (_, tree) = rpc_stream_via(data, false);
    assert!(
        split == tree,
        "the split transact path answered differently from the tree path"
    );
    stats
}

fn rpc_stream_via(data: &[u8], split_path: bool) -> (RunStats, Vec<(u64, Vec<u8>)>) {
    let mut stats = RunStats::default();
    let mut sent = Vec::new();
    let schema = match Schema::parse(SCHEMA) {
        Ok(s) => s,
        // The schema is a constant with its own unit test.
        Err(e) => panic!("fuzzing schema is invalid: {e}"),
    };
    let mut core = Core::new(Config::default(), 1);
    if core
        .add_database(Database::new(Arc::new(schema), 2), None, vec![])
        .is_err()
    {
        return (stats, sent);
    }
    let now = Now {
        mono_ms: 0,
        wall_ms: 0,
    };
    let watcher = core.connect(now);
    core.handle(
        watcher,
        serde_json::json!({"method": "monitor_cond_since", "params": ["F", "w", {"R": [{}], "K": [{}]}, "00000000-0000-0000-0000-000000000000"], "id": 1}),
        now,
    );
    let sid = core.connect(now);
    let mut framer = Framer::new(1 << 20);
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    for chunk in [&data[..split], &data[split..]] {
        framer.push(chunk);
        loop {
            let handled = if split_path {
                match framer.next_raw() {
                    None => break,
                    Some(Ok((_, bytes))) => core.handle_bytes(sid, &bytes, now).is_ok(),
                    Some(Err(_)) => false,
                }
            } else {
                match framer.next_message() {
                    None => break,
                    Some(Ok(v)) => {
                        core.handle(sid, v, now);
                        true
                    }
                    Some(Err(_)) => false,
                }
            };
            if !handled {
                return (stats, sent);
            }
            for o in core.poll_output() {
                if let Output::Send(to, bytes) = o {
                    // Everything the server sends must itself be valid JSON.
                    let v = serde_json::from_slice::<serde_json::Value>(&bytes);
                    assert!(v.is_ok(), "the server sent invalid JSON");
                    if to == sid {
                        stats.replies += 1;
                    } else if v.is_ok_and(|v| v["method"] == "update3") {
                        stats.updates += 1;
                    }
                    sent.push((to, bytes));
                }
            }
        }
    }
    core.tick(Now {
        mono_ms: 1 << 40,
        wall_ms: 0,
    });
    core.disconnect(sid);
    let _ = core.poll_output().count();
    (stats, sent)
}

/// Feed `data` to a client replica (NB model) as a server's byte stream. When the first byte is
/// even, a valid handshake comes first (schema, a standalone `_Server` row, an empty
/// `monitor_cond_since` reply) so that the bytes reach a synced session with a lock request and
/// a transaction outstanding; otherwise the handshake itself gets the bytes. The stream is split
/// at a data-dependent point, and time advances between the pieces (probes, backoff, retries).
pub fn client_stream(data: &[u8]) {
    use crate::client::{Config, Replica};
    use hf_model::NbSnapshot;

    let mut r: Replica<NbSnapshot> = Replica::new(
        Config {
            remotes: 2,
            ..Config::default()
        },
        0,
    );
    let Some(remote) = r.poll_connect() else {
        return;
    };
    r.handle_connected(remote, 0);
    r.lock("fuzz");
    r.transact(Box::new(|m: &NbSnapshot| {
        if m.logical_switch().len() > 3 {
            return vec![];
        }
        vec![serde_json::json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "f"}})]
    }));
    if data.first().is_some_and(|b| b % 2 == 0) {
        r.handle_bytes(CLIENT_HANDSHAKE.as_bytes(), 1);
    }
    let split = data.get(1).map_or(0, |b| usize::from(*b)).min(data.len());
    let mut now = 2;
    for chunk in [&data[..split], &data[split..]] {
        r.handle_bytes(chunk, now);
        now += 3_000;
        r.handle_timeout(now);
        while r.poll_transmit().is_some() {}
        while r.poll_event().is_some() {}
        let _ = r.poll_close();
        if let Some(next) = r.poll_connect() {
            r.handle_connected(next, now);
        }
        let _ = r.poll_timeout();
    }
    r.set_condition(
        "Logical_Switch",
        Some(vec![serde_json::json!(["name", "==", "x"])]),
    );
    r.handle_disconnected(now + 1);
    r.handle_timeout(now + 100_000);
    while r.poll_event().is_some() {}
}

/// A valid start of a session for [`client_stream`].
pub const CLIENT_HANDSHAKE: &str = r#"{"id":1,"result":{"name":"OVN_Northbound","tables":{"Logical_Switch":{},"NB_Global":{}}},"error":null}{"id":2,"result":{"Database":{"6f0b2a2e-0000-4000-8000-000000000001":{"initial":{"name":"OVN_Northbound","model":"standalone","connected":true,"leader":true}}}},"error":null}{"id":3,"result":[false,"6f0b2a2e-0000-4000-8000-0000000000e1",{"Logical_Switch":{"6f0b2a2e-0000-4000-8000-0000000000a1":{"initial":{"name":"sw","ports":["set",[]],"other_config":["map",[["a","b"]]]}}}}],"error":null}"#;

#[cfg(test)]
mod tests {
    #[test]
    fn fuzz_schema_parses() {
        hf_ovsdb::Schema::parse(super::SCHEMA).unwrap();
    }
}
