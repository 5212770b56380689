//! The world's database seams: external sessions (the sandbox's bridge) speak JSON-RPC bytes,
//! bad input is a named error, builders that name a missing row fail, and a database file
//! that is not OVSDB's is refused with a reason.

use std::time::Duration;

use hf_sim::world::db::load_database_file;
use hf_sim::world::nb::{self, PortOpts};
use hf_sim::world::{NorthdMode, World, WorldConfig};
use serde_json::{Value, json};

fn world() -> World {
    World::new(WorldConfig {
        seed: 1,
        chassis: vec!["hv1".into()],
        northd: NorthdMode::Holdfast,
    })
    .expect("world")
}

fn replies(w: &mut World, sid: u64) -> Vec<Value> {
    let mut f = hf_ovsdb_net::framing::Framer::new(1 << 20);
    while let Some(b) = w.db_poll_output(sid) {
        f.push(&b);
    }
    std::iter::from_fn(|| f.next_message())
        .map(|m| m.expect("server sends JSON"))
        .collect()
}

#[test]
fn external_session_lists_and_transacts_in_pieces() {
    let mut w = world();
    let sid = w.db_connect();
    let req = json!({"method": "list_dbs", "params": [], "id": 1}).to_string();
    // Split mid-message: the framer reassembles it.
    let (a, b) = req.as_bytes().split_at(7);
    w.db_input(sid, a).expect("first half");
    assert!(replies(&mut w, sid).is_empty());
    w.db_input(sid, b).expect("second half");
    let r = replies(&mut w, sid);
    let dbs = r[0]["result"].as_array().expect("list");
    assert!(
        dbs.contains(&json!("OVN_Northbound")) && dbs.contains(&json!("OVN_Southbound")),
        "{r:?}"
    );
    // A switch added through the external session is compiled by northd into SB.
    let txn = json!({"method": "transact", "id": 2, "params": ["OVN_Northbound",
        {"op": "insert", "table": "Logical_Switch", "row": {"name": "ext-sw"}}]});
    w.db_input(sid, txn.to_string().as_bytes())
        .expect("transact");
    w.run_for(Duration::from_millis(100));
    let r = replies(&mut w, sid);
    assert!(
        r.iter()
            .any(|m| m["id"] == json!(2) && m["error"].is_null()),
        "{r:?}"
    );
    let sb = w.sb_snapshot().expect("sb");
    assert!(
        sb.datapath_binding()
            .values()
            .any(|d| d.external_ids.get("name").map(String::as_str) == Some("ext-sw")),
        "northd did not bind ext-sw"
    );
    w.db_disconnect(sid);
    assert!(w.db_is_closed(sid));
}

#[test]
fn external_garbage_is_a_named_error_and_closes_only_that_session() {
    let mut w = world();
    let bad = w.db_connect();
    let good = w.db_connect();
    let e = w.db_input(bad, b"hello").expect_err("not JSON");
    assert!(
        e.contains("unexpected byte") && e.contains("offset 0"),
        "{e}"
    );
    assert!(w.db_is_closed(bad));
    w.db_input(good, br#"{"method":"echo","params":[],"id":"x"}"#)
        .expect("echo");
    let r = replies(&mut w, good);
    assert_eq!(r[0]["id"], json!("x"), "{r:?}");
    assert!(w.db_input(999, b"{}").is_err());
}

#[test]
fn builder_on_a_missing_switch_fails() {
    let mut w = world();
    let e = w
        .nb(nb::port(
            "no-such-switch",
            "p1",
            "00:00:00:00:00:01 10.0.0.5",
            PortOpts::default(),
        ))
        .expect_err("missing switch");
    assert!(e.contains("transaction failed"), "{e}");
    assert!(
        w.nb_snapshot()
            .expect("nb")
            .logical_switch_port()
            .is_empty()
    );
}

#[test]
fn auto_attach_follows_nb() {
    let mut w = world();
    w.nb(nb::switch("s")).expect("switch");
    w.nb(nb::port(
        "s",
        "p1",
        "00:00:00:00:00:01 10.0.0.5",
        PortOpts::default(),
    ))
    .expect("port");
    // A port without addresses, and a router-type port, get no host.
    w.nb(nb::port("s", "p2", "", PortOpts::default()))
        .expect("port");
    assert!(w.host("p1").is_some() && w.host("p2").is_none());
    assert_eq!(
        w.host("p1").and_then(|h| h.ipv4()),
        Some("10.0.0.5".parse().expect("ip"))
    );
    assert_eq!(w.host_chassis("p1"), Some("hv1"));
    // Deleting the switch garbage-collects its ports (non-root rows).
    w.nb(vec![
        json!({"op": "delete", "table": "Logical_Switch", "where": [["name", "==", "s"]]}),
    ])
    .expect("delete switch");
    assert!(
        w.host("p1").is_none(),
        "the host of a deleted port stays attached"
    );
}

#[test]
fn database_file_errors_name_the_problem() {
    let e = load_database_file(b"").expect_err("empty");
    assert!(e.contains("empty"), "{e}");
    let e = load_database_file(b"OVSDB JSON 2 0000000000000000000000000000000000000000\n{}\n")
        .expect_err("bad");
    assert!(!e.is_empty());
}

#[test]
fn move_port_nb_refuses_keeps_the_host_where_it_was() {
    let mut w = World::new(WorldConfig {
        seed: 1,
        chassis: vec!["hv1".into(), "hv2".into()],
        northd: NorthdMode::Holdfast,
    })
    .expect("world");
    // A host on a port NB does not know: NB refuses requested-chassis for it.
    let cfg = hf_sim::net::HostConfig::new("ghost", [0x0a, 0, 0, 0, 0, 0x42], 7);
    w.add_host_config("hv1", "ghost", cfg, false)
        .expect("attach");
    let e = w.move_port("ghost", "hv2").expect_err("no such NB port");
    assert!(e.contains("ghost"), "{e}");
    assert_eq!(
        w.host_chassis("ghost"),
        Some("hv1"),
        "the host was lost: {e}"
    );
    assert!(w.host("ghost").is_some());
}
