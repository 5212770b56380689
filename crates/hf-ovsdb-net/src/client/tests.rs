//! The session core under a virtual clock: against holdfast's own server core in memory (a
//! quinn-style `Pair`), and against scripted fake servers for what holdfast's server never
//! does (unknown methods, cluster members that are not the leader, silence).

use std::sync::Arc;

use hf_model::nb::LogicalSwitch;
use hf_model::{NbSnapshot, Table};
use serde_json::{Value, json};

use super::txn::{wait_absent, wait_unchanged};
use super::*;
use crate::server::{self, Core, Output, SessionId};

fn now(ms: u64) -> server::Now {
    server::Now {
        mono_ms: ms,
        wall_ms: 1_000_000 + ms,
    }
}

fn cfg() -> Config {
    Config {
        tables: vec![TableSelect::all("Logical_Switch")],
        probe_interval_ms: Some(1_000),
        ..Config::default()
    }
}

struct Peer {
    r: Replica<NbSnapshot>,
    sid: Option<SessionId>,
    events: Vec<Event<NbSnapshot>>,
}

/// Replicas and holdfast's server core on one virtual clock.
struct Net {
    core: Core,
    up: bool,
    t: u64,
    peers: Vec<Peer>,
    writer: SessionId,
    next_id: u64,
}

impl Net {
    fn new(n: usize) -> Self {
        let mut core = Core::new(
            server::Config {
                probe_interval_ms: None,
                ..server::Config::default()
            },
            3,
        );
        let db = hf_ovsdb::Database::new(Arc::clone(hf_model::nb::schema()), 9);
        core.add_database(db, None, vec![]).unwrap();
        let writer = core.connect(now(0));
        let mut net = Net {
            core,
            up: true,
            t: 0,
            peers: (0..n)
                .map(|_| Peer {
                    r: Replica::new(cfg(), 0),
                    sid: None,
                    events: Vec::new(),
                })
                .collect(),
            writer,
            next_id: 1000,
        };
        net.run();
        net
    }

    /// Move every message until nothing moves.
    fn run(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            for i in 0..self.peers.len() {
                let p = &mut self.peers[i];
                if p.r.poll_close().is_some()
                    && let Some(s) = p.sid.take()
                {
                    self.core.disconnect(s);
                }
                if let Some(r) = p.r.poll_connect() {
                    moved = true;
                    if self.up {
                        p.sid = Some(self.core.connect(now(self.t)));
                        p.r.handle_connected(r, self.t);
                    } else {
                        p.r.handle_disconnected(self.t);
                    }
                }
                while let Some(b) = p.r.poll_transmit() {
                    moved = true;
                    if let Some(s) = p.sid {
                        let v: Value = serde_json::from_slice(&b).unwrap();
                        self.core.handle(s, v, now(self.t));
                    }
                }
                while let Some(e) = p.r.poll_event() {
                    p.events.push(e);
                }
            }
            let out: Vec<Output> = self.core.poll_output().collect();
            for o in out {
                match o {
                    Output::Send(s, b) => {
                        if let Some(p) = self.peers.iter_mut().find(|p| p.sid == Some(s)) {
                            moved = true;
                            p.r.handle_bytes(&b, self.t);
                        }
                    }
                    Output::Close(s, _) => {
                        if let Some(p) = self.peers.iter_mut().find(|p| p.sid == Some(s)) {
                            p.sid = None;
                            p.r.handle_disconnected(self.t);
                        }
                    }
                    Output::Log(_) => {}
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the network never settles");
    }

    fn advance(&mut self, ms: u64) {
        self.t += ms;
        for p in &mut self.peers {
            p.r.handle_timeout(self.t);
        }
        self.core.tick(now(self.t));
        self.run();
    }

    /// Cut peer `i`'s connection (both ends notice).
    fn cut(&mut self, i: usize) {
        if let Some(s) = self.peers[i].sid.take() {
            self.core.disconnect(s);
            self.peers[i].r.handle_disconnected(self.t);
        }
        self.run();
    }

    fn transact(&mut self, ops: Value) -> Value {
        self.next_id += 1;
        let mut params = vec![json!("OVN_Northbound")];
        params.extend(ops.as_array().unwrap().iter().cloned());
        self.core.handle(
            self.writer,
            json!({"method": "transact", "params": params, "id": self.next_id}),
            now(self.t),
        );
        let mut reply = Value::Null;
        let out: Vec<Output> = self.core.poll_output().collect();
        for o in out {
            match o {
                Output::Send(s, b) if s == self.writer => {
                    reply = serde_json::from_slice(&b).unwrap();
                }
                Output::Send(s, b) => {
                    if let Some(p) = self.peers.iter_mut().find(|p| p.sid == Some(s)) {
                        p.r.handle_bytes(&b, self.t);
                    }
                }
                _ => {}
            }
        }
        self.run();
        reply
    }

    fn add_switch(&mut self, name: &str) -> Value {
        self.transact(json!([{"op": "insert", "table": "Logical_Switch", "row": {"name": name}}]))
    }

    fn names(&self, i: usize) -> Vec<String> {
        let mut v: Vec<String> = self.peers[i]
            .r
            .model()
            .logical_switch()
            .values()
            .map(|s| s.name.clone())
            .collect();
        v.sort();
        v
    }

    fn take_events(&mut self, i: usize) -> Vec<Event<NbSnapshot>> {
        std::mem::take(&mut self.peers[i].events)
    }
}

#[test]
fn follows_inserts_updates_deletes() {
    let mut net = Net::new(1);
    assert!(net.peers[0].r.is_synced());
    assert_eq!(net.peers[0].r.method(), Some(MonitorMethod::Since));
    net.add_switch("a");
    net.add_switch("b");
    assert_eq!(net.names(0), ["a", "b"]);
    net.transact(json!([{"op": "update", "table": "Logical_Switch",
        "where": [["name", "==", "a"]], "row": {"name": "a2"}}]));
    assert_eq!(net.names(0), ["a2", "b"]);
    net.transact(json!([{"op": "delete", "table": "Logical_Switch",
        "where": [["name", "==", "b"]]}]));
    assert_eq!(net.names(0), ["a2"]);
    let changes: usize = net
        .take_events(0)
        .iter()
        .map(|e| match e {
            Event::Changes(d) => d.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(changes, 4, "two inserts, one update, one delete");
}

#[test]
fn resync_after_outage_transfers_only_missed_changes() {
    let mut net = Net::new(1);
    for i in 0..10 {
        net.add_switch(&format!("s{i}"));
    }
    net.take_events(0);
    net.up = false;
    net.cut(0);
    net.add_switch("late1");
    net.add_switch("late2");
    net.up = true;
    net.advance(100);
    assert!(net.peers[0].r.is_synced());
    let ev = net.take_events(0);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::Resynced {
                full: false,
                rows: 2,
                initial: false
            }
        )),
        "{ev:?}"
    );
    assert_eq!(net.names(0).len(), 12);
}

#[test]
fn full_resync_reports_only_real_changes() {
    let mut net = Net::new(1);
    net.add_switch("keep");
    net.add_switch("gone");
    net.take_events(0);
    net.up = false;
    net.cut(0);
    net.transact(json!([{"op": "delete", "table": "Logical_Switch",
        "where": [["name", "==", "gone"]]}]));
    // A condition changed while disconnected: the server must send everything.
    net.peers[0].r.set_condition("Logical_Switch", None);
    net.up = true;
    net.advance(100);
    let ev = net.take_events(0);
    let full = ev.iter().find_map(|e| match e {
        Event::Resynced { full, rows, .. } => Some((*full, *rows)),
        _ => None,
    });
    assert_eq!(full, Some((true, 1)));
    let changes: Vec<usize> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Changes(d) => Some(d.len()),
            _ => None,
        })
        .collect();
    assert_eq!(changes, [1], "one delete, the kept row untouched: {ev:?}");
    assert_eq!(net.names(0), ["keep"]);
}

#[test]
fn condition_change_at_run_time() {
    let mut net = Net::new(1);
    net.add_switch("a");
    net.add_switch("b");
    net.peers[0]
        .r
        .set_condition("Logical_Switch", Some(vec![json!(["name", "==", "a"])]));
    net.run();
    assert_eq!(net.names(0), ["a"]);
    net.add_switch("c");
    assert_eq!(net.names(0), ["a"]);
    net.peers[0].r.set_condition("Logical_Switch", None);
    net.run();
    assert_eq!(net.names(0), ["a", "b", "c"]);
}

#[test]
fn backoff_doubles_while_the_server_is_down_and_resets_after_sync() {
    let mut net = Net::new(1);
    net.up = false;
    net.cut(0);
    // Immediate redial after losing a synced session, then 100, 200, 400, ... ms.
    let mut waits = Vec::new();
    for _ in 0..5 {
        let next = net.peers[0].r.poll_timeout().unwrap();
        waits.push(next - net.t);
        net.t = next;
        net.peers[0].r.handle_timeout(net.t);
        net.run();
    }
    assert_eq!(waits[..5], [100, 200, 400, 800, 1_600]);
    net.up = true;
    let next = net.peers[0].r.poll_timeout().unwrap();
    assert_eq!(next - net.t, 3_200);
    net.advance(3_200);
    assert!(net.peers[0].r.is_synced());
    net.up = false;
    net.cut(0);
    let next = net.peers[0].r.poll_timeout().unwrap();
    assert_eq!(next - net.t, 100, "backoff reset by the sync");
}

#[test]
fn wait_conflict_is_retried_on_the_caught_up_view() {
    let mut net = Net::new(1);
    net.add_switch("x");
    // A stale builder: it renames "x" guarded by the row's value it sees.
    net.peers[0].r.transact(Box::new(|m: &NbSnapshot| {
        let Some(ls) = m.logical_switch_by_name("x").cloned() else {
            return vec![];
        };
        let mut new = ls.clone();
        new.other_config.insert("n".into(), "1".into());
        let mut ops = vec![wait_unchanged(&ls)];
        ops.extend(new.update_op(&ls));
        ops
    }));
    // Before the replica's transaction reaches the server, another client changes the row.
    let sent: Vec<Vec<u8>> = std::iter::from_fn(|| net.peers[0].r.poll_transmit()).collect();
    net.transact(json!([{"op": "mutate", "table": "Logical_Switch",
        "where": [["name", "==", "x"]], "mutations": [["external_ids", "insert", ["map", [["k", "v"]]]]]}]));
    let sid = net.peers[0].sid.unwrap();
    for b in sent {
        net.core
            .handle(sid, serde_json::from_slice(&b).unwrap(), now(net.t));
    }
    net.run();
    let done: Vec<_> = net
        .take_events(0)
        .into_iter()
        .filter_map(|e| match e {
            Event::TxnDone {
                outcome, attempts, ..
            } => Some((outcome, attempts)),
            _ => None,
        })
        .collect();
    assert_eq!(done.len(), 1);
    assert!(matches!(done[0].0, TxnOutcome::Committed(_)), "{done:?}");
    assert_eq!(done[0].1, 2, "one conflict, one retry");
    let ls = net.peers[0].r.model().logical_switch_by_name("x").unwrap();
    assert_eq!(ls.other_config.get("n").map(String::as_str), Some("1"));
    assert_eq!(ls.external_ids.get("k").map(String::as_str), Some("v"));
    assert_eq!(
        net.peers[0].r.stats().txns_retried,
        1,
        "{:?}",
        net.peers[0].r.stats()
    );
}

/// An insert of switch `name` (nothing when it exists).
fn insert_switch_op(name: &str) -> Vec<Value> {
    vec![json!({"op": "insert", "table": "Logical_Switch", "row": {"name": name}})]
}

#[test]
fn built_ops_go_out_as_given_until_the_model_moves() {
    let mut net = Net::new(1);
    // Sent at once: the caller's ops, not the builder's.
    net.peers[0].r.transact_built(
        insert_switch_op("given"),
        Box::new(|_: &NbSnapshot| insert_switch_op("rebuilt")),
    );
    net.run();
    assert_eq!(net.names(0), ["given"]);
    // Queued while disconnected, and the model moves before it goes out: built again.
    net.up = false;
    net.cut(0);
    net.peers[0].r.transact_built(
        insert_switch_op("stale"),
        Box::new(|_: &NbSnapshot| insert_switch_op("fresh")),
    );
    net.add_switch("other");
    net.up = true;
    net.advance(60_000);
    assert_eq!(net.names(0), ["fresh", "given", "other"]);
}

#[test]
fn unknown_outcome_is_rebuilt_not_resent() {
    let mut net = Net::new(1);
    let build = |m: &NbSnapshot| {
        if m.logical_switch_by_name("once").is_some() {
            return vec![];
        }
        let ls = LogicalSwitch {
            name: "once".into(),
            ..LogicalSwitch::default()
        };
        vec![
            wait_absent("Logical_Switch", json!([["name", "==", "once"]])),
            ls.insert_op(),
        ]
    };
    net.peers[0].r.transact(Box::new(build));
    // The server commits, but the connection dies before the reply arrives.
    let sid = net.peers[0].sid.unwrap();
    let sent: Vec<Vec<u8>> = std::iter::from_fn(|| net.peers[0].r.poll_transmit()).collect();
    for b in sent {
        net.core
            .handle(sid, serde_json::from_slice(&b).unwrap(), now(net.t));
    }
    let _lost: Vec<Output> = net.core.poll_output().collect();
    net.cut(0);
    net.advance(1);
    let done: Vec<_> = net
        .take_events(0)
        .into_iter()
        .filter_map(|e| match e {
            Event::TxnDone { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(done, [TxnOutcome::Unchanged]);
    assert_eq!(net.names(0), ["once"], "applied exactly once");
}

#[test]
fn lock_is_handed_over_when_the_holder_goes() {
    let mut net = Net::new(2);
    net.peers[0].r.lock("northd");
    net.run();
    net.peers[1].r.lock("northd");
    net.run();
    assert!(net.peers[0].r.has_lock());
    assert!(!net.peers[1].r.has_lock());
    net.up = false;
    net.cut(0);
    assert!(!net.peers[0].r.has_lock());
    assert!(net.peers[1].r.has_lock(), "handed over");
    net.up = true;
    net.advance(100);
    assert!(net.peers[0].r.is_synced());
    assert!(!net.peers[0].r.has_lock(), "still exactly one holder");
    net.peers[0].r.steal("northd");
    net.run();
    assert!(net.peers[0].r.has_lock());
    assert!(!net.peers[1].r.has_lock(), "stolen");
    let lost = net
        .take_events(1)
        .iter()
        .filter(|e| matches!(e, Event::LockLost(_)))
        .count();
    assert_eq!(lost, 1);
}

#[test]
fn silent_server_is_probed_then_dropped() {
    let mut net = Net::new(1);
    // Active session: an echo goes out after 1 s of silence and the server answers.
    net.advance(1_000);
    assert!(net.peers[0].r.is_synced());
    assert_eq!(net.peers[0].r.stats().probe_timeouts, 0);
    // Now the server goes silent: messages to it vanish.
    let sid = net.peers[0].sid.take().unwrap();
    net.up = false;
    net.advance(1_000);
    net.advance(1_000);
    assert_eq!(net.peers[0].r.stats().probe_timeouts, 1);
    let _ = sid;
    assert!(!net.peers[0].r.is_synced());
}

// ---- scripted fake servers ----

/// A fake server: answers each request from a script.
type Script = Box<dyn FnMut(&str, &[Value]) -> Option<Value>>;

struct Fake {
    r: Replica<NbSnapshot>,
    scripts: Vec<Script>,
    at: Option<usize>,
    t: u64,
    events: Vec<Event<NbSnapshot>>,
    sent_methods: Vec<String>,
}

impl Fake {
    fn new(scripts: Vec<Script>) -> Self {
        let mut c = cfg();
        c.remotes = scripts.len();
        let mut f = Fake {
            r: Replica::new(c, 0),
            scripts,
            at: None,
            t: 0,
            events: Vec::new(),
            sent_methods: Vec::new(),
        };
        f.run();
        f
    }

    fn run(&mut self) {
        for _ in 0..1000 {
            let mut moved = false;
            if self.r.poll_close().is_some() {
                self.at = None;
            }
            if let Some(r) = self.r.poll_connect() {
                moved = true;
                self.at = Some(r);
                self.r.handle_connected(r, self.t);
            }
            while let Some(b) = self.r.poll_transmit() {
                moved = true;
                let v: Value = serde_json::from_slice(&b).unwrap();
                let Some(at) = self.at else { continue };
                let method = v["method"].as_str().unwrap_or("").to_string();
                if v["id"].is_null() || method.is_empty() {
                    continue;
                }
                self.sent_methods.push(format!("{at}:{method}"));
                let params = v["params"].as_array().cloned().unwrap_or_default();
                if let Some(reply) = (self.scripts[at])(&method, &params) {
                    let mut reply = reply;
                    reply["id"] = v["id"].clone();
                    self.r.handle_bytes(reply.to_string().as_bytes(), self.t);
                }
            }
            while let Some(e) = self.r.poll_event() {
                self.events.push(e);
            }
            if !moved {
                return;
            }
        }
        panic!("never settles");
    }

    fn notify(&mut self, n: Value) {
        self.r.handle_bytes(n.to_string().as_bytes(), self.t);
        self.run();
    }
}

fn schema_reply() -> Value {
    json!({"result": {"name": "OVN_Northbound", "tables": {"Logical_Switch": {}}}, "error": null})
}

fn server_row(model: &str, leader: bool, index: i64) -> Value {
    json!({"Database": {"6f0b2a2e-0000-4000-8000-000000000001": {"initial": {
        "name": "OVN_Northbound", "model": model, "connected": true, "leader": leader,
        "index": index, "cid": ["uuid", "6f0b2a2e-0000-4000-8000-0000000000cc"]}}}})
}

const LS1: &str = "6f0b2a2e-0000-4000-8000-0000000000a1";

#[test]
fn falls_back_from_monitor_cond_since_to_monitor_cond_to_monitor() {
    let script: Script = Box::new(|method, _| match method {
        "get_schema" => Some(schema_reply()),
        "monitor_cond" if false => None,
        "monitor_cond_since" => Some(json!({"error": "unknown method", "result": null})),
        "monitor_cond" => Some(json!({"error": "unknown method", "result": null})),
        "monitor" => Some(json!({"result": {"Logical_Switch": {LS1: {"new": {"name": "sw"}}}}})),
        _ => Some(json!({"result": {}})),
    });
    let mut f = Fake::new(vec![script]);
    assert_eq!(f.r.method(), Some(MonitorMethod::Plain));
    assert_eq!(f.r.stats().fallbacks, 2);
    assert!(
        f.sent_methods
            .windows(3)
            .any(|w| w == ["0:monitor_cond_since", "0:monitor_cond", "0:monitor"]),
        "{:?}",
        f.sent_methods
    );
    assert_eq!(f.r.model().logical_switch().len(), 1);
    // RFC 7047 update: a modify carries the full new row.
    f.notify(
        json!({"id": null, "method": "update", "params": ["hf-replica",
        {"Logical_Switch": {LS1: {"old": {"name": "sw"}, "new": {"name": "sw2"}}}}]}),
    );
    assert!(f.r.model().logical_switch_by_name("sw2").is_some());
    f.notify(
        json!({"id": null, "method": "update", "params": ["hf-replica",
        {"Logical_Switch": {LS1: {"old": {"name": "sw2"}}}}]}),
    );
    assert!(f.r.model().logical_switch().is_empty());
}

#[test]
fn other_errors_do_not_fall_back() {
    let script: Script = Box::new(|method, _| match method {
        "get_schema" => Some(schema_reply()),
        "monitor_cond_since" => Some(json!({"error": {"error": "syntax error"}, "result": null})),
        _ => Some(json!({"result": {}})),
    });
    let f = Fake::new(vec![script]);
    assert!(!f.r.is_synced());
    assert_eq!(f.r.stats().fallbacks, 0);
    let conds = f
        .sent_methods
        .iter()
        .filter(|m| *m == "0:monitor_cond")
        .count();
    assert_eq!(conds, 1, "only the _Server monitor: {:?}", f.sent_methods);
}

/// A cluster member: `leader` decides whether it is acceptable to a leader-only replica.
fn member(leader: bool, index: i64) -> Script {
    Box::new(move |method, params| match method {
        "get_schema" => Some(schema_reply()),
        "monitor_cond" if params.first() == Some(&json!("_Server")) => {
            Some(json!({"result": server_row("clustered", leader, index)}))
        }
        "monitor_cond_since" => Some(
            json!({"result": [false, "6f0b2a2e-0000-4000-8000-0000000000e1",
            {"Logical_Switch": {LS1: {"initial": {"name": "sw"}}}}]}),
        ),
        _ => Some(json!({"result": {}})),
    })
}

#[test]
fn prefers_the_leader_and_follows_leader_changes() {
    let mut f = Fake::new(vec![member(false, 10), member(true, 10), member(true, 10)]);
    assert_eq!(f.r.synced_remote(), Some(1), "remote 0 is a follower");
    assert_eq!(f.r.stats().members_rejected, 1);
    assert_eq!(f.r.server().map(|s| s.leader), Some(true));
    // Remote 1 loses the leadership: the replica moves on to remote 2.
    f.notify(
        json!({"id": null, "method": "update2", "params": ["hf-server",
        {"Database": {"6f0b2a2e-0000-4000-8000-000000000001": {"modify": {"leader": false}}}}]}),
    );
    assert_eq!(f.r.synced_remote(), Some(2));
    assert_eq!(f.r.model().logical_switch().len(), 1);
}

#[test]
fn skips_members_that_fall_behind() {
    let mut c = cfg();
    c.remotes = 2;
    c.leader_only = false;
    let mut f = Fake::new(vec![member(true, 50), member(false, 40)]);
    f.r = Replica::new(c, 0);
    f.run();
    assert_eq!(f.r.synced_remote(), Some(0));
    f.notify(
        json!({"id": null, "method": "update2", "params": ["hf-server",
        {"Database": {"6f0b2a2e-0000-4000-8000-000000000001": {"modify": {"connected": false}}}}]}),
    );
    // Remote 1 is at index 40 < 50: behind, rejected; the round ends in a backoff.
    assert!(!f.r.is_synced());
    assert!(f.r.stats().members_rejected >= 2, "{:?}", f.r.stats());
    assert!(f.r.poll_timeout().is_some());
}

#[test]
fn garbage_from_the_server_drops_the_session_without_panic() {
    let script: Script = Box::new(|method, _| match method {
        "get_schema" => Some(schema_reply()),
        "monitor_cond_since" => {
            Some(json!({"result": [true, 5, {"Logical_Switch": {"zzz": {"modify": 1}}}]}))
        }
        _ => Some(json!({"result": {}})),
    });
    let f = Fake::new(vec![script]);
    assert!(!f.r.is_synced());
    assert!(
        f.events
            .iter()
            .any(|e| matches!(e, Event::Disconnected { .. }))
    );
}

#[test]
fn condition_changed_while_the_monitor_request_is_out() {
    let mut net = Net::new(1);
    net.add_switch("a");
    net.add_switch("b");
    net.up = false;
    net.cut(0);
    net.up = true;
    // Dial, but stop before the monitor reply comes back.
    let t = net.peers[0].r.poll_timeout().unwrap();
    net.peers[0].r.handle_timeout(t);
    let r = net.peers[0].r.poll_connect().unwrap();
    let sid = net.core.connect(now(t));
    net.peers[0].sid = Some(sid);
    net.peers[0].r.handle_connected(r, t);
    net.peers[0]
        .r
        .set_condition("Logical_Switch", Some(vec![json!(["name", "==", "b"])]));
    net.run();
    assert!(net.peers[0].r.is_synced());
    assert_eq!(net.names(0), ["b"], "the new condition applies once synced");
}

#[test]
fn first_sync_changes_only_when_asked() {
    let mut net = Net::new(2);
    net.add_switch("a");
    net.peers[1].r = Replica::new(
        Config {
            initial_changes: true,
            ..cfg()
        },
        0,
    );
    net.peers[1].sid = None;
    net.peers[0].r = Replica::new(cfg(), 0);
    net.peers[0].sid = None;
    net.take_events(0);
    net.take_events(1);
    net.run();
    let changes = |evs: &[Event<NbSnapshot>]| {
        evs.iter()
            .filter(|e| matches!(e, Event::Changes(_)))
            .count()
    };
    let (e0, e1) = (net.take_events(0), net.take_events(1));
    assert_eq!(changes(&e0), 0, "{e0:?}");
    assert_eq!(changes(&e1), 1, "{e1:?}");
    assert!(e0.iter().any(|e| matches!(
        e,
        Event::Resynced {
            initial: true,
            rows: 1,
            full: true
        }
    )));
    assert_eq!(net.names(0), ["a"]);
    assert_eq!(net.names(1), ["a"]);
}

#[test]
fn shuffled_remotes_spread_over_the_members_and_a_lost_member_passes_to_the_next_in_order() {
    let order = |seed: Option<u64>| {
        remote_order(&Config {
            remotes: 3,
            shuffle_seed: seed,
            ..cfg()
        })
    };
    assert_eq!(order(None), [0, 1, 2], "no seed: the order given");
    let mut firsts = [0usize; 3];
    for seed in 0..300u64 {
        let o = order(Some(seed));
        let mut sorted = o.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2], "seed {seed}: {o:?} is not a permutation");
        firsts[o[0]] += 1;
    }
    // 300 clients over 3 members: each member is the first choice of a fair share.
    assert!(firsts.iter().all(|n| *n >= 70), "first choices {firsts:?}");
    // A seed whose order differs from both the given order and "the one after the last".
    let seed = (0..100u64)
        .find(|s| {
            let o = order(Some(*s));
            o[0] != 0 && o[1] != (o[0] + 1) % 3
        })
        .expect("such a seed");
    let o = order(Some(seed));
    // Three followers: a replica that is not leader-only syncs on the first of its order.
    let mut f = Fake::new(vec![
        member(false, 10),
        member(false, 10),
        member(false, 10),
    ]);
    f.r = Replica::new(
        Config {
            remotes: 3,
            leader_only: false,
            shuffle_seed: Some(seed),
            ..cfg()
        },
        0,
    );
    f.at = None;
    f.run();
    assert_eq!(f.r.remote_order(), o.as_slice());
    assert_eq!(f.r.synced_remote(), Some(o[0]), "{o:?}");
    assert_eq!(f.r.stats().members_rejected, 0);
    assert_eq!(f.r.model().logical_switch().len(), 1);
    // The member goes away: the next one in the order, not the next index.
    f.r.handle_disconnected(f.t);
    f.at = None;
    f.run();
    assert_eq!(f.r.synced_remote(), Some(o[1]), "{o:?}");
}
