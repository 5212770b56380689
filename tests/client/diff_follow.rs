//! The replica against real `ovsdb-server` as the oracle (issue 8): seeded random NB
//! transactions that change optional columns (`enabled`, `tag_request`, `up`,
//! `dynamic_addresses`, `parent_name`, `ha_chassis_group`), sets, maps, and strong references
//! (ports garbage-collected when their switch drops them) go to a standalone `ovsdb-server` and
//! to a three-member Raft cluster; after every step the replica (`hf_ovsdb_net::client`,
//! following with update3/update2 diffs) must equal a fresh dump of the server.
//!
//! `HF_DIFF_SEED` picks the seed (a fixed default otherwise); a failure prints it, the step and
//! the rows that differ.

use std::collections::BTreeMap;
use std::time::Duration;

use hf_model::{NbSnapshot, Table};
use hf_ovsdb::Datum;
use serde_json::{Map, Value, json};

use crate::common::{Rpc, nb_schema, require};
use crate::procs;

const TABLES: &[&str] = &["Logical_Switch", "Logical_Switch_Port", "HA_Chassis_Group"];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// One random value for an LSP column (`None`: the column is left out).
fn lsp_value(r: &mut Rng, col: &str) -> Value {
    let empty = json!(["set", []]);
    match col {
        "enabled" | "up" => match r.below(3) {
            0 => empty,
            1 => json!(true),
            _ => json!(false),
        },
        "tag_request" => match r.below(3) {
            0 => empty,
            _ => json!(r.below(6)),
        },
        "dynamic_addresses" | "parent_name" => match r.below(3) {
            0 => empty,
            _ => json!(r.pick(&["0a:00:00:00:00:01", "parent", "x"])),
        },
        "type" => json!(r.pick(&["", "router", "localnet"])),
        "addresses" => {
            let n = r.below(3);
            let mut v: Vec<&str> = (0..n)
                .map(|_| r.pick(&["router", "unknown", "dynamic", "0a:00:00:00:00:02 10.0.0.2"]))
                .collect();
            v.sort_unstable();
            v.dedup();
            json!(["set", v])
        }
        "options" | "external_ids" => {
            let n = r.below(3);
            let mut keys: Vec<&str> = (0..n).map(|_| r.pick(&["a", "b", "c"])).collect();
            keys.sort_unstable();
            keys.dedup();
            let pairs: Vec<Value> = keys
                .into_iter()
                .map(|k| json!([k, r.pick(&["1", "2", "3"])]))
                .collect();
            json!(["map", pairs])
        }
        other => unreachable!("{other}"),
    }
}

const LSP_COLS: [&str; 10] = [
    "enabled",
    "up",
    "tag_request",
    "dynamic_addresses",
    "parent_name",
    "type",
    "addresses",
    "options",
    "external_ids",
    "enabled",
];

fn step(r: &mut Rng, i: usize) -> Vec<Value> {
    let sw = format!("sw{}", r.below(3));
    let lsp = format!("p{}", r.below(8));
    let mut row = Map::new();
    for _ in 0..1 + r.below(3) {
        let c = LSP_COLS[r.below(LSP_COLS.len() as u64) as usize];
        row.insert(c.to_string(), lsp_value(r, c));
    }
    match r.below(10) {
        // A new port on a switch (the switch created when missing is a separate step).
        0..=2 => {
            row.insert("name".into(), json!(lsp));
            vec![
                json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "np", "row": row}),
                json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", sw]],
                       "mutations": [["ports", "insert", ["named-uuid", "np"]]]}),
            ]
        }
        3 => vec![json!({"op": "insert", "table": "Logical_Switch", "row": {"name": sw}})],
        // Updates of optional columns, sets and maps.
        4..=6 => vec![
            json!({"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", lsp]], "row": row}),
        ],
        // An HA group made and set, or the reference cleared (the group stays: root table).
        7 => {
            if r.below(2) == 0 {
                vec![
                    json!({"op": "insert", "table": "HA_Chassis_Group", "uuid-name": "g",
                           "row": {"name": format!("g{i}")}}),
                    json!({"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", lsp]],
                           "row": {"ha_chassis_group": ["named-uuid", "g"]}}),
                ]
            } else {
                vec![
                    json!({"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", lsp]],
                           "row": {"ha_chassis_group": ["set", []]}}),
                ]
            }
        }
        // A switch drops all its ports (garbage-collected) or is deleted.
        8 => vec![
            json!({"op": "update", "table": "Logical_Switch", "where": [["name", "==", sw]], "row": {"ports": ["set", []]}}),
        ],
        _ => {
            vec![json!({"op": "delete", "table": "Logical_Switch", "where": [["name", "==", sw]]})]
        }
    }
}

/// `{uuid: row}` with every column of `T`, from the replica.
fn model_rows<T: Table, K: ToString>(rows: &BTreeMap<K, T>) -> BTreeMap<String, Value> {
    rows.iter()
        .map(|(u, r)| (u.to_string(), Value::Object(r.to_json_row())))
        .collect()
}

/// `{uuid: row}` with every column of `T`, from a select on the server, in the same form.
fn dump_rows<T: Table>(rpc: &mut Rpc) -> BTreeMap<String, Value> {
    let r = rpc
        .call(
            "transact",
            json!(["OVN_Northbound", {"op": "select", "table": T::NAME, "where": []}]),
        )
        .expect("select");
    let ts = T::schema();
    let mut out = BTreeMap::new();
    for row in r["result"][0]["rows"].as_array().expect("rows") {
        let u = row["_uuid"][1].as_str().expect("_uuid").to_string();
        let mut m = Map::new();
        for c in &ts.columns {
            let mut no = |n: &str| Err(hf_ovsdb::OvsdbError::syntax(format!("named {n}")));
            let d = Datum::from_json(&c.ty, &row[&c.name], &mut no).expect("server value");
            m.insert(c.name.clone(), d.to_json(&c.ty));
        }
        out.insert(u, Value::Object(m));
    }
    out
}

type Rows = [BTreeMap<String, Value>; 3];

fn model_all(m: &NbSnapshot) -> Rows {
    [
        model_rows(m.logical_switch()),
        model_rows(m.logical_switch_port()),
        model_rows(m.ha_chassis_group()),
    ]
}

fn dump_all(rpc: &mut Rpc) -> Rows {
    [
        dump_rows::<hf_model::nb::LogicalSwitch>(rpc),
        dump_rows::<hf_model::nb::LogicalSwitchPort>(rpc),
        dump_rows::<hf_model::nb::HaChassisGroup>(rpc),
    ]
}

fn differences(a: &Rows, b: &Rows) -> String {
    let mut out = String::new();
    for (t, (x, y)) in TABLES.iter().zip(a.iter().zip(b.iter())) {
        for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
            if x.get(k) != y.get(k) {
                out.push_str(&format!(
                    "  {t} {k}:\n    replica: {}\n    server:  {}\n",
                    x.get(k).map_or("(none)".into(), Value::to_string),
                    y.get(k).map_or("(none)".into(), Value::to_string)
                ));
            }
        }
    }
    out
}

/// Drive `steps` random transactions through `writer` (`IP:PORT`) while a replica of
/// `remotes` follows; the replica must equal a dump after every step.
async fn follow(what: &str, remotes: Vec<String>, writer: String, seed: u64, steps: usize) {
    let (c, _events) = procs::replica::<NbSnapshot>(remotes, TABLES, false);
    procs::until(&c, "first sync", |r| r.is_synced()).await;
    let mut rpc = tokio::task::spawn_blocking(move || Rpc::connect(&writer))
        .await
        .unwrap();
    let mut r = Rng(seed);
    let mut changes = 0;
    for i in 0..steps {
        let mut ops = vec![json!("OVN_Northbound")];
        ops.extend(step(&mut r, i));
        let shown = Value::Array(ops.clone()).to_string();
        let (rpc2, reply, want) = tokio::task::spawn_blocking(move || {
            let reply = rpc.call("transact", Value::Array(ops)).expect("transact");
            let want = dump_all(&mut rpc);
            (rpc, reply, want)
        })
        .await
        .unwrap();
        rpc = rpc2;
        if reply["result"]
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x.get("error").is_none()))
        {
            changes += 1;
        }
        let want2 = want.clone();
        let ok = c
            .wait_until(Duration::from_secs(20), move |r| {
                r.is_synced() && model_all(r.model()) == want2
            })
            .await;
        if !ok {
            let got = c.with(|r| model_all(r.model()));
            panic!(
                "{what}: the replica differs from the server after step {i} \
                 (HF_DIFF_SEED={seed}):\n  transaction: {shown}\n  reply: {reply}\n{}",
                differences(&got, &want)
            );
        }
    }
    assert!(
        changes > steps / 3,
        "{what}: only {changes} of {steps} transactions committed: the workload is too weak"
    );
    eprintln!(
        "{what}: replica equal to the server after each of {steps} steps ({changes} commits)"
    );
}

fn seed() -> u64 {
    std::env::var("HF_DIFF_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_260_802)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_equals_ovsdb_server_after_every_step() {
    if !require(
        "replica_equals_ovsdb_server_after_every_step",
        &["ovsdb-server", "ovsdb-tool"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let m = procs::standalone(dir.path(), &nb_schema());
    let addr = format!("127.0.0.1:{}", m.port);
    follow(
        "standalone ovsdb-server",
        vec![m.remote()],
        addr,
        seed(),
        600,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_equals_raft_cluster_after_every_step() {
    if !require(
        "replica_equals_raft_cluster_after_every_step",
        &["ovsdb-server", "ovsdb-tool", "ovs-appctl"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let members = procs::cluster(dir.path(), &nb_schema(), "OVN_Northbound", 3);
    let remotes: Vec<String> = members.iter().map(procs::Member::remote).collect();
    // Write through one member, follow whichever member the replica picks.
    let addr = format!("127.0.0.1:{}", members[1].port);
    follow("3-member Raft cluster", remotes, addr, seed() ^ 0x5eed, 300).await;
}
