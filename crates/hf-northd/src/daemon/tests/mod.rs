//! The core on a virtual clock against hf-ovsdb-net's server core in memory (NB and SB with
//! holdfast's schemas): no sockets, no threads, deterministic. An observer replica of the
//! whole SB counts the SB transactions the northds commit.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb_net::client::{Config as ReplicaConfig, Event, Replica, TableSelect};
use hf_ovsdb_net::server::{self, Core, Output, SessionId};
use serde_json::{Value, json};

use super::core::compile_options;
use super::*;

fn now(ms: u64) -> server::Now {
    server::Now {
        mono_ms: ms,
        wall_ms: 1_700_000_000_000 + ms,
    }
}

fn replica_cfg(tables: Vec<TableSelect>) -> ReplicaConfig {
    ReplicaConfig {
        tables,
        probe_interval_ms: None,
        ..ReplicaConfig::default()
    }
}

/// One replica's link to the server: its session, and replies held back (to keep a
/// transaction in flight).
struct Link {
    sid: Option<SessionId>,
    hold: bool,
    held: VecDeque<Vec<u8>>,
}

impl Link {
    fn new() -> Link {
        Link {
            sid: None,
            hold: false,
            held: VecDeque::new(),
        }
    }
}

struct Node {
    nd: Northd,
    nb: Replica<NbSnapshot>,
    sb: Replica<SbView>,
    nb_link: Link,
    sb_link: Link,
    alive: bool,
    /// Most SB transactions this node had pending at once.
    max_pending: usize,
    /// Poll the core once before handing it the NB replica's events, as the daemon's shell
    /// may (it polls after any event, while the other replica's are still queued).
    late_nb_events: bool,
}

struct Sim {
    core: Core,
    t: u64,
    nodes: Vec<Node>,
    obs: Replica<SbSnapshot>,
    obs_link: Link,
    /// SB change sets the observer received.
    obs_changes: usize,
    writer: SessionId,
    next_id: u64,
}

/// Moves one replica's output to the server; true when something moved.
fn pump<M: hf_ovsdb_net::client::Model>(
    core: &mut Core,
    r: &mut Replica<M>,
    link: &mut Link,
    t: u64,
) -> bool {
    let mut moved = false;
    if r.poll_close().is_some()
        && let Some(s) = link.sid.take()
    {
        core.disconnect(s);
    }
    if let Some(remote) = r.poll_connect() {
        moved = true;
        link.sid = Some(core.connect(now(t)));
        link.held.clear();
        r.handle_connected(remote, t);
    }
    while let Some(b) = r.poll_transmit() {
        moved = true;
        if let Some(s) = link.sid {
            // As holdfast db reads it: a transact split into its operations' texts.
            core.handle_bytes(s, &b, now(t)).unwrap();
        }
    }
    if !link.hold {
        while let Some(b) = link.held.pop_front() {
            moved = true;
            r.handle_bytes(&b, t);
        }
    }
    moved
}

impl Sim {
    fn new(nodes: usize) -> Sim {
        let mut core = Core::new(
            server::Config {
                probe_interval_ms: None,
                ..server::Config::default()
            },
            7,
        );
        for s in [hf_model::nb::schema(), hf_model::sb::schema()] {
            let db = hf_ovsdb::Database::new(Arc::clone(s), 11);
            core.add_database(db, None, vec![]).unwrap();
        }
        let writer = core.connect(now(0));
        let mut sim = Sim {
            core,
            t: 0,
            nodes: Vec::new(),
            obs: Replica::new(replica_cfg(Vec::new()), 0),
            obs_link: Link::new(),
            obs_changes: 0,
            writer,
            next_id: 1,
        };
        sim.nb(json!([{"op": "insert", "table": "NB_Global", "row": {}}]));
        sim.sb(json!([{"op": "insert", "table": "SB_Global", "row": {}}]));
        for i in 0..nodes {
            sim.add_node(i as u64);
        }
        sim.run();
        sim
    }

    fn add_node(&mut self, seed: u64) {
        let mut sb = Replica::new(replica_cfg(SbView::tables()), self.t);
        let mut nd = Northd::new(Config {
            paused: false,
            seed: seed + 1,
            ..Config::default()
        });
        nd.start(&mut sb);
        self.nodes.push(Node {
            nd,
            nb: Replica::new(replica_cfg(Vec::new()), self.t),
            sb,
            nb_link: Link::new(),
            sb_link: Link::new(),
            alive: true,
            max_pending: 0,
            late_nb_events: false,
        });
    }

    /// Moves every message and runs every core until nothing moves.
    fn run(&mut self) {
        for _ in 0..2_000 {
            let t = self.t;
            let mut moved = false;
            for n in self.nodes.iter_mut().filter(|n| n.alive) {
                moved |= pump(&mut self.core, &mut n.nb, &mut n.nb_link, t);
                moved |= pump(&mut self.core, &mut n.sb, &mut n.sb_link, t);
                if n.late_nb_events {
                    while let Some(e) = n.sb.poll_event() {
                        n.nd.handle_sb_event(e);
                    }
                    n.nd.poll(&mut n.nb, &mut n.sb, t, 1_700_000_000_000 + t as i64);
                }
                while let Some(e) = n.nb.poll_event() {
                    n.nd.handle_nb_event(e);
                }
                while let Some(e) = n.sb.poll_event() {
                    n.nd.handle_sb_event(e);
                }
                n.nd.poll(&mut n.nb, &mut n.sb, t, 1_700_000_000_000 + t as i64);
                n.max_pending = n.max_pending.max(n.sb.pending_txns());
                while n.nd.poll_log().is_some() {}
                moved |= pump(&mut self.core, &mut n.nb, &mut n.nb_link, t);
                moved |= pump(&mut self.core, &mut n.sb, &mut n.sb_link, t);
            }
            moved |= pump(&mut self.core, &mut self.obs, &mut self.obs_link, t);
            while let Some(e) = self.obs.poll_event() {
                if matches!(e, Event::Changes(_)) {
                    self.obs_changes += 1;
                }
            }
            let out: Vec<Output> = self.core.poll_output().collect();
            for o in out {
                if let Output::Send(s, b) = o {
                    moved = true;
                    self.deliver(s, b);
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the simulation never settles");
    }

    fn deliver(&mut self, s: SessionId, b: Vec<u8>) {
        let t = self.t;
        let links = self
            .nodes
            .iter_mut()
            .flat_map(|n| {
                [
                    (&mut n.nb_link, Target::Nb(&mut n.nb)),
                    (&mut n.sb_link, Target::Sb(&mut n.sb)),
                ]
            })
            .chain([(&mut self.obs_link, Target::Obs(&mut self.obs))]);
        for (link, r) in links {
            if link.sid == Some(s) {
                if link.hold {
                    link.held.push_back(b);
                } else {
                    match r {
                        Target::Nb(r) => r.handle_bytes(&b, t),
                        Target::Sb(r) => r.handle_bytes(&b, t),
                        Target::Obs(r) => r.handle_bytes(&b, t),
                    }
                }
                return;
            }
        }
    }

    fn advance(&mut self, ms: u64) {
        self.t += ms;
        for n in self.nodes.iter_mut().filter(|n| n.alive) {
            n.nb.handle_timeout(self.t);
            n.sb.handle_timeout(self.t);
        }
        self.obs.handle_timeout(self.t);
        self.core.tick(now(self.t));
        self.run();
    }

    fn txn(&mut self, db: &str, ops: Value) -> Value {
        self.next_id += 1;
        let mut params = vec![json!(db)];
        params.extend(ops.as_array().unwrap().iter().cloned());
        self.core.handle(
            self.writer,
            json!({"method": "transact", "params": params, "id": self.next_id}),
            now(self.t),
        );
        let mut reply = Value::Null;
        let out: Vec<Output> = self.core.poll_output().collect();
        for o in out {
            if let Output::Send(s, b) = o {
                if s == self.writer {
                    reply = serde_json::from_slice(&b).unwrap();
                } else {
                    self.deliver(s, b);
                }
            }
        }
        let failed = !reply["error"].is_null()
            || reply["result"]
                .as_array()
                .is_none_or(|r| r.iter().any(|o| o.get("error").is_some()));
        assert!(!failed, "transaction failed: {reply}");
        reply
    }

    fn nb(&mut self, ops: Value) -> Value {
        self.txn("OVN_Northbound", ops)
    }

    fn sb(&mut self, ops: Value) -> Value {
        self.txn("OVN_Southbound", ops)
    }

    /// `ovn-nbctl --wait=sb`'s half: bump nb_cfg with `ops`; returns the new nb_cfg.
    fn nb_with_cfg(&mut self, mut ops: Vec<Value>) -> i64 {
        ops.push(json!({"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [["nb_cfg", "+=", 1]]}));
        self.nb(Value::Array(ops));
        self.db_nb().nb_global().values().next().unwrap().nb_cfg
    }

    fn db_nb(&self) -> NbSnapshot {
        NbSnapshot::from_db(self.core.database("OVN_Northbound").unwrap()).unwrap()
    }

    fn db_sb(&self) -> SbSnapshot {
        SbSnapshot::from_db(self.core.database("OVN_Southbound").unwrap()).unwrap()
    }

    fn kill(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        n.alive = false;
        for l in [&mut n.nb_link, &mut n.sb_link] {
            if let Some(s) = l.sid.take() {
                self.core.disconnect(s);
            }
        }
        self.run();
    }
}

enum Target<'a> {
    Nb(&'a mut Replica<NbSnapshot>),
    Sb(&'a mut Replica<SbView>),
    Obs(&'a mut Replica<SbSnapshot>),
}

fn lsp_ops(sw: &str, port: &str, n: u8) -> Vec<Value> {
    let label = format!("p_{}", port.replace('-', "_"));
    vec![
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": label,
            "row": {"name": port, "addresses": format!("00:00:00:00:00:{n:02x} 10.0.0.{n}")}}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", sw]],
            "mutations": [["ports", "insert", ["set", [["named-uuid", label]]]]]}),
    ]
}

/// SB as a fresh compile of NB wants it, by identity and text.
fn assert_complete(sim: &Sim) {
    let nb = sim.db_nb();
    let sb = sim.db_sb();
    let view = SbView {
        datapath_binding: sb.datapath_binding().clone(),
        port_binding: sb.port_binding().clone(),
        ..Default::default()
    };
    let c = crate::compile(&nb, &compile_options(&view));
    let want: BTreeMap<String, (String, String)> =
        c.sb.flows
            .iter()
            .map(|(id, f)| {
                (
                    id.to_string(),
                    (f.match_.to_string(), f.actions.to_string()),
                )
            })
            .collect();
    let have: BTreeMap<String, (String, String)> = sb
        .logical_flow()
        .values()
        .map(|f| {
            (
                f.external_ids
                    .get("hf-flow-id")
                    .cloned()
                    .unwrap_or_default(),
                (f.match_.to_string(), f.actions.to_string()),
            )
        })
        .collect();
    assert_eq!(
        have.len(),
        sb.logical_flow().len(),
        "flows without or with duplicate ids"
    );
    assert_eq!(have, want);
    let pbs: Vec<String> = sb
        .port_binding()
        .values()
        .map(|p| p.logical_port.clone())
        .collect();
    let mut pbs = pbs;
    pbs.sort();
    assert_eq!(pbs, c.sb.ports.keys().cloned().collect::<Vec<_>>());
}

#[test]
fn cold_start_then_one_port_in_one_transaction() {
    let mut sim = Sim::new(1);
    let cfg = sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw1"}}),
    ]);
    sim.run();
    let g = sim.db_nb().nb_global().values().next().unwrap().clone();
    assert_eq!((g.nb_cfg, g.sb_cfg), (cfg, cfg), "sb_cfg follows nb_cfg");
    assert!(g.sb_cfg_timestamp > 0);
    assert_eq!(sim.db_sb().sb_global().values().next().unwrap().nb_cfg, cfg);
    assert_complete(&sim);
    assert_eq!(sim.nodes[0].nd.role(), Role::Active);
    // One port: one SB transaction (flows, binding and nb_cfg together).
    let before = sim.obs_changes;
    let commits = sim.nodes[0].nd.stats().sb_commits;
    let unchanged = sim.nodes[0].nd.stats().sb_unchanged;
    let cfg = sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    assert_eq!(sim.nodes[0].nd.stats().sb_commits, commits + 1);
    // The echo of that transaction is recognised: no second diff.
    assert_eq!(
        sim.nodes[0].nd.stats().sb_unchanged,
        unchanged,
        "the echo was diffed"
    );
    assert_eq!(
        sim.obs_changes,
        before + 1,
        "SB changed in more than one transaction"
    );
    assert_eq!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg, cfg);
    assert_complete(&sim);
    let last = sim.nodes[0].nd.stats().last_sync.clone();
    assert_eq!(last.deleted, 0, "adding a port deleted rows: {last:?}");
    // The new binding is written up=false, and the LSP follows it.
    let nb = sim.db_nb();
    let lsp = nb.logical_switch_port().values().next().unwrap();
    assert_eq!(lsp.up, Some(false));
    // A controller's write (a binding's `up`) is followed on the NB side, never diffed
    // against the desired SB: no SB transaction is even built.
    let pb = sim.db_sb().port_binding().values().next().unwrap().uuid;
    let s = sim.nodes[0].nd.stats().clone();
    sim.sb(json!([{"op": "update", "table": "Port_Binding",
        "where": [["_uuid", "==", ["uuid", pb.to_string()]]], "row": {"up": true}}]));
    sim.run();
    let s2 = sim.nodes[0].nd.stats();
    assert_eq!(
        (s2.sb_commits, s2.sb_unchanged),
        (s.sb_commits, s.sb_unchanged)
    );
}

#[test]
fn a_cold_start_compiles_once_when_the_nb_sync_event_comes_late() {
    let mut sim = Sim::new(0);
    sim.nb(json!([{"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}]));
    sim.nb(Value::Array(lsp_ops("sw0", "p1", 1)));
    sim.add_node(0);
    // The core is polled while the NB replica is synced but its `Resynced` is still queued.
    sim.nodes[0].late_nb_events = true;
    sim.run();
    assert_eq!(sim.nodes[0].nd.role(), Role::Active);
    assert_complete(&sim);
    assert_eq!(
        sim.nodes[0].nd.stats().compiles,
        1,
        "the same NB compiled again for its sync event"
    );
}

#[test]
fn changes_during_a_transaction_are_coalesced_into_the_next() {
    let mut sim = Sim::new(1);
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
    ]);
    sim.run();
    let commits = sim.nodes[0].nd.stats().sb_commits;
    // Hold the server's answers to northd's SB session: its transaction stays in flight.
    sim.nodes[0].sb_link.hold = true;
    sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    assert_eq!(sim.nodes[0].sb.pending_txns(), 1);
    for (i, p) in ["p2", "p3", "p4"].iter().enumerate() {
        sim.nb_with_cfg(lsp_ops("sw0", p, 2 + i as u8));
        sim.run();
        assert_eq!(
            sim.nodes[0].sb.pending_txns(),
            1,
            "a second transaction went out"
        );
    }
    sim.nodes[0].sb_link.hold = false;
    let cfg = sim.db_nb().nb_global().values().next().unwrap().nb_cfg;
    sim.run();
    assert_eq!(sim.nodes[0].max_pending, 1);
    assert_eq!(
        sim.nodes[0].nd.stats().sb_commits,
        commits + 2,
        "three changes during the first transaction were not written as one"
    );
    assert_eq!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg, cfg);
    assert_complete(&sim);
}

#[test]
fn one_active_the_other_takes_over_and_a_restart_writes_nothing() {
    let mut sim = Sim::new(2);
    let roles: Vec<Role> = sim.nodes.iter().map(|n| n.nd.role()).collect();
    assert!(
        roles.contains(&Role::Active) && roles.contains(&Role::Standby),
        "{roles:?}"
    );
    let a = roles.iter().position(|r| *r == Role::Active).unwrap();
    let b = 1 - a;
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
    ]);
    sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    assert!(sim.nodes[a].nd.stats().sb_commits >= 1);
    assert_eq!(sim.nodes[b].nd.stats().sb_commits, 0, "the standby wrote");
    assert_eq!(
        sim.nodes[b].nd.stats().nb_commits,
        0,
        "the standby wrote NB"
    );
    sim.kill(a);
    sim.advance(10);
    assert_eq!(sim.nodes[b].nd.role(), Role::Active);
    let cfg = sim.nb_with_cfg(lsp_ops("sw0", "p2", 2));
    sim.run();
    assert_eq!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg, cfg);
    assert_complete(&sim);
    // A new northd next to the active one, and then alone: it writes nothing.
    sim.kill(b);
    let before = sim.obs_changes;
    sim.add_node(99);
    sim.run();
    sim.advance(10);
    let n = sim.nodes.last().unwrap();
    assert_eq!(n.nd.role(), Role::Active);
    assert_eq!(n.nd.stats().sb_commits, 0);
    assert!(n.nd.stats().sb_unchanged >= 1, "it never tried");
    assert_eq!(
        sim.obs_changes, before,
        "a restart against an unchanged NB changed SB"
    );
}

#[test]
fn pause_releases_the_lock_and_resume_catches_up() {
    let mut sim = Sim::new(1);
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
    ]);
    sim.run();
    let n = &mut sim.nodes[0];
    n.nd.pause(&mut n.sb);
    assert_eq!(n.nd.role(), Role::Paused);
    assert!(n.nd.status().starts_with("Status: paused"));
    let cfg = sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    assert!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg < cfg);
    // The lock is free while paused: a second northd becomes active.
    sim.add_node(5);
    sim.run();
    assert_eq!(sim.nodes[1].nd.role(), Role::Active);
    assert_eq!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg, cfg);
    sim.kill(1);
    let cfg = sim.nb_with_cfg(lsp_ops("sw0", "p2", 2));
    let n = &mut sim.nodes[0];
    n.nd.resume(&mut n.sb);
    sim.run();
    assert_eq!(sim.nodes[0].nd.role(), Role::Active);
    assert_eq!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg, cfg);
    assert_complete(&sim);
}

#[test]
fn rows_northd_does_not_want_are_deleted_and_controller_columns_kept() {
    let mut sim = Sim::new(1);
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
    ]);
    sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    let sb = sim.db_sb();
    let dp = *sb.datapath_binding().keys().next().unwrap();
    let pb = sb.port_binding().values().next().unwrap().uuid;
    // A flow without hf-flow-id (as real ovn-northd writes them), a stray port group, and
    // the controller's `up` on the binding.
    sim.sb(json!([
        {"op": "insert", "table": "Logical_Flow", "row": {"logical_datapath": ["uuid", dp.to_string()],
            "pipeline": "ingress", "table_id": 0, "priority": 1, "match": "1", "actions": "drop;"}},
        {"op": "insert", "table": "Port_Group", "row": {"name": "stray", "ports": "x"}},
        {"op": "update", "table": "Port_Binding", "where": [["_uuid", "==", ["uuid", pb.to_string()]]],
            "row": {"up": true}},
    ]));
    sim.run();
    let sb = sim.db_sb();
    assert!(sb.port_group().values().all(|g| g.name != "stray"));
    assert!(
        sb.logical_flow()
            .values()
            .all(|f| f.external_ids.contains_key("hf-flow-id")),
        "a flow without hf-flow-id survived"
    );
    assert_eq!(
        sb.port_binding()[&pb].up,
        Some(true),
        "northd wrote a controller column"
    );
    assert_complete(&sim);
    // A flow whose text someone changed is set back, in place (same UUID, one column).
    let (fu, f) = sb
        .logical_flow()
        .iter()
        .next()
        .map(|(u, f)| (*u, f.clone()))
        .unwrap();
    sim.sb(json!([{"op": "update", "table": "Logical_Flow",
        "where": [["_uuid", "==", ["uuid", fu.to_string()]]], "row": {"actions": "drop;"}}]));
    sim.run();
    let sb = sim.db_sb();
    assert_eq!(sb.logical_flow()[&fu].actions, f.actions);
    assert_eq!(sim.nodes[0].nd.stats().last_sync.updated, 1);
    assert_eq!(sim.nodes[0].nd.stats().last_sync.inserted, 0);
}

#[test]
fn frozen_datapaths_keep_their_flows_exactly() {
    let mut sim = Sim::new(1);
    for (sw, n) in [("sw0", 1u8), ("sw1", 2)] {
        sim.nb_with_cfg(vec![
            json!({"op": "insert", "table": "Logical_Switch", "row": {"name": sw}}),
        ]);
        sim.nb_with_cfg(lsp_ops(sw, &format!("{sw}-p"), n));
    }
    sim.run();
    let sb = sim.db_sb();
    let dp_of = |sb: &SbSnapshot, name: &str| {
        sb.datapath_binding()
            .values()
            .find(|d| d.external_ids.get("name").is_some_and(|n| n == name))
            .unwrap()
            .uuid
    };
    let (sw0, sw1) = (dp_of(&sb, "sw0"), dp_of(&sb, "sw1"));
    let pb = sb
        .port_binding()
        .values()
        .find(|p| p.logical_port == "sw0-p")
        .unwrap()
        .uuid;
    // A chassis advertising nothing (below the oldest served level) with sw0's port bound.
    sim.sb(json!([
        {"op": "insert", "table": "Encap", "uuid-name": "e",
         "row": {"type": "geneve", "ip": "127.0.0.9", "chassis_name": "old"}},
        {"op": "insert", "table": "Chassis", "uuid-name": "c",
         "row": {"name": "old", "encaps": ["named-uuid", "e"],
                 "other_config": ["map", [["holdfast-features", ""]]]}},
        {"op": "update", "table": "Port_Binding", "where": [["_uuid", "==", ["uuid", pb.to_string()]]],
         "row": {"chassis": ["named-uuid", "c"]}},
    ]));
    sim.run();
    assert!(
        sim.nodes[0].nd.status().contains("old"),
        "the chassis is not reported: {}",
        sim.nodes[0].nd.status()
    );
    let flows_on = |sb: &SbSnapshot, dp: uuid::Uuid| -> BTreeMap<uuid::Uuid, (String, String)> {
        sb.logical_flow()
            .values()
            .filter(|f| {
                f.logical_datapath.map(|d| d.uuid()) == Some(dp)
                    || f.logical_dp_group.is_some_and(|g| {
                        sb.logical_dp_group()
                            .get(&g.uuid())
                            .is_some_and(|g| g.datapaths.iter().any(|d| d.uuid() == dp))
                    })
            })
            .map(|f| (f.uuid, (f.match_.to_string(), f.actions.to_string())))
            .collect()
    };
    let frozen_before = flows_on(&sim.db_sb(), sw0);
    let other_before = flows_on(&sim.db_sb(), sw1);
    assert!(!frozen_before.is_empty());
    // New ports on both switches: sw1's flows follow, sw0's stay exactly as they were.
    let cfg = sim.nb_with_cfg(lsp_ops("sw0", "sw0-q", 3));
    sim.nb_with_cfg(lsp_ops("sw1", "sw1-q", 4));
    sim.run();
    let sb = sim.db_sb();
    assert_eq!(
        flows_on(&sb, sw0),
        frozen_before,
        "a frozen datapath's flows changed"
    );
    assert_ne!(
        flows_on(&sb, sw1),
        other_before,
        "the other datapath was not synced"
    );
    assert!(
        sb.port_binding()
            .values()
            .any(|p| p.logical_port == "sw0-q")
    );
    assert!(sim.db_nb().nb_global().values().next().unwrap().sb_cfg >= cfg);
    // The chassis leaves: sw0 is synced again.
    let ch = sim.db_sb().chassis().keys().next().copied().unwrap();
    sim.sb(json!([{"op": "delete", "table": "Chassis", "where": [["_uuid", "==", ["uuid", ch.to_string()]]]}]));
    sim.run();
    assert_complete(&sim);
}

#[test]
fn mac_bindings_age_on_the_wall_clock() {
    let mut sim = Sim::new(1);
    sim.nb_with_cfg(vec![json!({"op": "insert", "table": "Logical_Router",
        "row": {"name": "lr0", "options": ["map", [["mac_binding_age_threshold", "2"]]]}})]);
    sim.run();
    let dp = sim
        .db_sb()
        .datapath_binding()
        .values()
        .find(|d| d.external_ids.get("name").is_some_and(|n| n == "lr0"))
        .unwrap()
        .uuid;
    let wall = 1_700_000_000_000 + sim.t as i64;
    let mb = |ip: &str, ts: i64| {
        json!({"op": "insert", "table": "MAC_Binding", "row": {"logical_port": "lr0-p",
            "ip": ip, "mac": "00:00:00:00:00:09", "datapath": ["uuid", dp.to_string()],
            "timestamp": ts}})
    };
    sim.sb(json!([mb("10.0.0.1", wall - 5_000), mb("10.0.0.2", wall)]));
    sim.run();
    let ips = |sim: &Sim| -> Vec<String> {
        let mut v: Vec<String> = sim
            .db_sb()
            .mac_binding()
            .values()
            .map(|m| m.ip.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ips(&sim), ["10.0.0.2"], "the old binding did not age out");
    sim.advance(1_000);
    assert_eq!(ips(&sim), ["10.0.0.2"], "the young binding aged too early");
    sim.advance(1_500);
    assert!(
        ips(&sim).is_empty(),
        "the binding did not age once past the threshold"
    );
}

#[test]
fn an_activation_the_controller_wrote_survives_northd_while_the_port_has_additional_chassis() {
    let mut sim = Sim::new(1);
    // Two chassis, so `requested-chassis=hv1,hv2` resolves.
    for (n, ip) in [("hv1", "192.168.0.1"), ("hv2", "192.168.0.2")] {
        sim.sb(json!([
            {"op": "insert", "table": "Encap", "uuid-name": "e",
                "row": {"type": "geneve", "ip": ip, "chassis_name": n}},
            {"op": "insert", "table": "Chassis",
                "row": {"name": n, "hostname": n, "encaps": ["named-uuid", "e"]}},
        ]));
    }
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
    ]);
    let mut ops = lsp_ops("sw0", "vm1", 1);
    ops[0]["row"]["options"] = json!([
        "map",
        [
            ["requested-chassis", "hv1,hv2"],
            ["activation-strategy", "rarp"]
        ]
    ]);
    sim.nb_with_cfg(ops);
    sim.run();
    let pb = |sim: &Sim| {
        sim.db_sb()
            .port_binding()
            .values()
            .find(|p| p.logical_port == "vm1")
            .cloned()
            .expect("vm1 bound")
    };
    assert_eq!(pb(&sim).requested_additional_chassis.len(), 1);
    // The destination's controller records the activation, as ovn-controller does.
    let u = pb(&sim).uuid.to_string();
    sim.sb(
        json!([{"op": "mutate", "table": "Port_Binding", "where": [["_uuid", "==", ["uuid", u]]],
        "mutations": [["options", "insert",
            ["map", [["additional-chassis-activated", "hv2"]]]]]}]),
    );
    sim.run();
    // An NB change that makes northd rewrite the binding's options keeps it.
    sim.nb_with_cfg(vec![json!({"op": "mutate", "table": "Logical_Switch_Port",
        "where": [["name", "==", "vm1"]],
        "mutations": [["options", "insert", ["map", [["foo", "bar"]]]]]})]);
    sim.run();
    let p = pb(&sim);
    assert_eq!(
        p.options.get("foo").map(String::as_str),
        Some("bar"),
        "northd rewrote options"
    );
    assert_eq!(
        p.options
            .get("additional-chassis-activated")
            .map(String::as_str),
        Some("hv2"),
        "northd dropped the controller's activation: {:?}",
        p.options
    );
    // Once the CMS names the destination alone, the flag goes (no additional chassis).
    sim.nb_with_cfg(vec![
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", "vm1"]],
            "mutations": [["options", "delete", ["set", ["requested-chassis"]]]]}),
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", "vm1"]],
            "mutations": [["options", "insert", ["map", [["requested-chassis", "hv2"]]]]]}),
    ]);
    sim.run();
    assert!(
        !pb(&sim)
            .options
            .contains_key("additional-chassis-activated"),
        "{:?}",
        pb(&sim).options
    );
}

/// The SB flows built for NB row `acl` (their `stage-hint`): (match, `hf-acl-broken`).
fn acl_flows(sim: &Sim, acl: uuid::Uuid) -> Vec<(String, Option<String>)> {
    let hint = acl.simple().to_string()[..8].to_string();
    let mut v: Vec<(String, Option<String>)> = sim
        .db_sb()
        .logical_flow()
        .values()
        .filter(|f| f.external_ids.get("stage-hint") == Some(&hint))
        .map(|f| {
            (
                f.match_.to_string(),
                f.external_ids.get("hf-acl-broken").cloned(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_running_northd_keeps_an_acls_last_good_match_and_a_restarted_one_fails_closed() {
    let mut sim = Sim::new(1);
    let mut ops = vec![json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}})];
    ops.extend(lsp_ops("sw0", "p1", 1));
    ops.push(json!({"op": "insert", "table": "ACL", "uuid-name": "a1",
        "row": {"direction": "to-lport", "priority": 1000, "action": "drop",
                "match": "outport == @pg1 && tcp.dst == 22"}}));
    ops.push(
        json!({"op": "insert", "table": "Port_Group", "row": {"name": "pg1",
        "ports": ["set", [["named-uuid", "p_p1"]]], "acls": ["set", [["named-uuid", "a1"]]]}}),
    );
    sim.nb_with_cfg(ops);
    sim.run();
    let acl = sim.db_nb().acl().values().next().unwrap().uuid;
    let good = acl_flows(&sim, acl);
    assert!(!good.is_empty());
    assert!(
        good.iter()
            .all(|(m, mark)| m.contains("tcp.dst == 22") && mark.is_none())
    );
    // An edit breaks the match: the flows stay as they were, marked.
    sim.nb_with_cfg(vec![json!({"op": "update", "table": "ACL", "where": [],
        "row": {"match": "outport == @pg1 && tcp.dst = = 22"}})]);
    sim.run();
    let kept = acl_flows(&sim, acl);
    assert_eq!(
        kept.iter().map(|(m, _)| m).collect::<Vec<_>>(),
        good.iter().map(|(m, _)| m).collect::<Vec<_>>()
    );
    assert!(
        kept.iter()
            .all(|(_, mark)| mark.as_deref() == Some("last-good"))
    );
    // Another unrelated NB change does not lose it.
    sim.nb_with_cfg(lsp_ops("sw0", "p2", 2));
    sim.run();
    assert_eq!(acl_flows(&sim, acl), kept);
    // A restarted northd never saw it parse: it fails closed.
    sim.kill(0);
    sim.add_node(9);
    sim.run();
    let closed = acl_flows(&sim, acl);
    assert!(!closed.is_empty());
    assert!(
        closed.iter().all(|(m, mark)| m.contains("outport == @pg1")
            && !m.contains("tcp.dst")
            && mark.as_deref() == Some("fail-closed")),
        "{closed:?}"
    );
}

mod drift;
mod random_sync;

#[test]
fn the_first_dynamic_port_gets_its_address_and_static_ports_cost_no_address_plan() {
    // A switch with a subnet and static ports only: while no port is dynamic, northd skips
    // the address plan; the first `dynamic` port (and a later one) still get addresses, and
    // deleting them leaves the plan skipped again.
    let mut sim = Sim::new(1);
    sim.nb_with_cfg(vec![json!({"op": "insert", "table": "Logical_Switch",
        "row": {"name": "sw0", "other_config": ["map", [["subnet", "10.0.0.0/24"]]]}})]);
    sim.nb_with_cfg(lsp_ops("sw0", "static1", 5));
    sim.run();
    let assigned = |sim: &Sim, name: &str| {
        sim.db_nb()
            .logical_switch_port_by_name(name)
            .and_then(|p| p.dynamic_addresses.clone())
    };
    for (i, name) in ["dyn1", "dyn2"].iter().enumerate() {
        let mut ops = lsp_ops("sw0", name, 10 + i as u8);
        ops[0]["row"]["addresses"] = json!("dynamic");
        sim.nb_with_cfg(ops);
        sim.run();
        let a = assigned(&sim, name).unwrap_or_else(|| panic!("{name} got no address"));
        assert!(a.contains("10.0.0."), "{name}: {a}");
    }
    sim.nb(json!([
        {"op": "mutate", "table": "Logical_Switch", "where": [],
            "mutations": [["ports", "delete", ["set", [
                ["uuid", sim.db_nb().logical_switch_port_by_name("dyn1").map(|p| p.uuid.to_string()).unwrap_or_default()],
                ["uuid", sim.db_nb().logical_switch_port_by_name("dyn2").map(|p| p.uuid.to_string()).unwrap_or_default()]]]]]},
        {"op": "delete", "table": "Logical_Switch_Port", "where": [["name", "==", "dyn1"]]},
        {"op": "delete", "table": "Logical_Switch_Port", "where": [["name", "==", "dyn2"]]},
    ]));
    sim.run();
    assert_eq!(sim.nodes[0].nd.dynamic_rows_for_test(), Some(0));
    sim.nb_with_cfg(lsp_ops("sw0", "static2", 6));
    sim.run();
    assert_eq!(sim.nodes[0].nd.dynamic_rows_for_test(), Some(0));
    assert!(assigned(&sim, "static2").is_none());
}

#[test]
fn the_first_port_add_after_a_cold_start_on_a_populated_nb_is_incremental() {
    // northd starts on an NB that already holds the switches (it compiles before it takes the
    // lock, then writes `mac_prefix`): its own write must not make the next compile full.
    let mut sim = Sim::new(0);
    sim.nb_with_cfg(vec![
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw0"}}),
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw1"}}),
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "sw2"}}),
    ]);
    sim.add_node(0);
    sim.run();
    assert!(
        sim.db_nb()
            .nb_global()
            .values()
            .next()
            .is_some_and(|g| g.options.contains_key("mac_prefix")),
        "northd wrote no mac_prefix"
    );
    sim.nb_with_cfg(lsp_ops("sw0", "p1", 1));
    sim.run();
    assert_complete(&sim);
    assert_eq!(sim.nodes[0].nd.stats().last_rebuilt, 1, "a full compile");
    // That compile built the topology anew (the cold one saw SB without any key); the next
    // port add patches it.
    let patched = sim.nodes[0].nd.stats().topo_patched;
    sim.nb_with_cfg(lsp_ops("sw1", "p2", 2));
    sim.run();
    assert_complete(&sim);
    assert_eq!(sim.nodes[0].nd.stats().topo_patched, patched + 1);
}
