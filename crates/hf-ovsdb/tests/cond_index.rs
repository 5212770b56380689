//! The condition index ([`hf_ovsdb::cond_index::CondIndex`]) never changes what a monitor
//! reports: for random monitor conditions and random row changes, the updates computed from
//! the index's candidates equal the updates computed by evaluating every condition on every
//! change (the naive path, which follows ovsdb-server's semantics and is compared against it in
//! hf-ovsdb-net's tests).
//!
//! The row index ([`hf_ovsdb::row_index`]) never changes what a monitor's initial contents or
//! a `monitor_cond_change` report: for random rows, commits and conditions they equal a scan
//! of every row, and a datapath's condition reads that datapath's rows only.

use std::sync::Arc;

use hf_ovsdb::cond_index::CondIndex;
use hf_ovsdb::datum::Datum;
use hf_ovsdb::db::{Row, RowChange, TxnDelta};
use hf_ovsdb::schema::{ColumnRef, Schema};
use hf_ovsdb::{Database, Monitor, MonitorVersion, Uuid};
use serde_json::{Value, json};

const SCHEMA: &str = r#"{"name": "T", "version": "1.0.0", "tables": {
  "Flow": {"isRoot": true, "columns": {
    "dp": {"type": {"key": "uuid", "min": 0, "max": 1}},
    "dps": {"type": {"key": "uuid", "min": 0, "max": "unlimited"}},
    "name": {"type": "string"},
    "tags": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
    "n": {"type": "integer"}}},
  "Other": {"isRoot": true, "columns": {"dp": {"type": {"key": "uuid", "min": 0, "max": 1}}}}}}"#;

const COLS: [&str; 5] = ["dp", "dps", "name", "tags", "n"];

/// splitmix64: a seeded, reproducible source.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn dp(i: usize) -> String {
    format!("00000000-0000-4000-8000-0000000000{i:02x}")
}

fn row_uuid(i: usize) -> Uuid {
    Uuid::parse_str(&format!("10000000-0000-4000-8000-0000000000{i:02x}")).expect("uuid")
}

fn uuid_json(i: usize) -> Value {
    json!(["uuid", dp(i)])
}

fn random_clause(r: &mut Rng) -> Value {
    let u = |r: &mut Rng| uuid_json(r.below(4));
    let names = ["a", "b", "c"];
    match r.below(17) {
        0 => json!(true),
        1 => json!(false),
        2 | 3 => json!(["dp", "==", u(r)]),
        4 => json!(["dp", "==", ["set", []]]),
        5 => json!(["dp", "!=", u(r)]),
        6 => json!(["dp", "includes", u(r)]),
        7 => json!(["dp", "excludes", u(r)]),
        8 => {
            let i = r.below(4);
            let j = (i + 1 + r.below(3)) % 4;
            json!(["dps", "includes", ["set", [uuid_json(i), uuid_json(j)]]])
        }
        9 => json!(["dps", "==", ["set", [u(r)]]]),
        10 => json!(["dps", "includes", ["set", []]]),
        11 => json!(["name", "==", r.pick(&names)]),
        12 => json!(["name", "!=", r.pick(&names)]),
        13 => json!([
            "tags",
            "includes",
            ["map", [[r.pick(&["k1", "k2"]), r.pick(&["v1", "v2"])]]]
        ]),
        14 => json!(["tags", "excludes", ["map", [["k1", r.pick(&["v1", "v2"])]]]]),
        15 => json!(["n", r.pick(&["<", ">=", "=="]), r.below(3)]),
        _ => json!(["_uuid", "==", ["uuid", row_uuid(r.below(6)).to_string()]]),
    }
}

fn random_monitor(r: &mut Rng, schema: &Schema) -> Monitor {
    let mut req = json!({"columns": COLS});
    if r.below(5) != 0 {
        let n = r.below(4);
        req["where"] = Value::Array((0..n).map(|_| random_clause(r)).collect());
    }
    let mut reqs = json!({"Flow": [req]});
    if r.below(3) == 0 {
        reqs["Other"] = json!([{"where": [["dp", "==", uuid_json(r.below(4))]]}]);
    }
    Monitor::from_json(schema, &reqs, MonitorVersion::V2).expect("valid monitor request")
}

fn col(schema: &Schema, t: usize, name: &str) -> usize {
    match schema.tables[t].column_ref(name).expect("column") {
        ColumnRef::User(c) => c,
        _ => unreachable!("user column"),
    }
}

fn random_row(r: &mut Rng, schema: &Schema, uuid: Uuid, version: u64) -> Arc<Row> {
    let ts = &schema.tables[0];
    let mut cols: Vec<Datum> = ts.defaults().to_vec();
    let mut no_named = |_: &str| -> hf_ovsdb::error::Result<Uuid> { unreachable!() };
    let mut set = |name: &str, v: Value| {
        let c = col(schema, 0, name);
        cols[c] = Datum::from_json(&ts.columns[c].ty, &v, &mut no_named).expect("datum");
    };
    if r.below(4) != 0 {
        set("dp", uuid_json(r.below(4)));
    }
    let k = r.below(3);
    let mut dps: Vec<Value> = (0..k).map(|_| uuid_json(r.below(4))).collect();
    dps.sort_by_key(|v| v.to_string());
    dps.dedup();
    set("dps", json!(["set", dps]));
    set("name", json!(r.pick(&["a", "b", "c"])));
    let mut tags = Vec::new();
    if r.below(2) == 0 {
        tags.push(json!(["k1", r.pick(&["v1", "v2"])]));
    }
    if r.below(2) == 0 {
        tags.push(json!(["k2", r.pick(&["v1", "v2"])]));
    }
    set("tags", json!(["map", tags]));
    set("n", json!(r.below(3)));
    Arc::new(Row {
        uuid,
        version: Uuid::from_u128(u128::from(version)),
        cols,
    })
}

fn other_row(r: &mut Rng, uuid: Uuid, version: u64) -> Arc<Row> {
    let d = Datum::from_json(
        &hf_ovsdb::ColumnType::scalar(hf_ovsdb::AtomicType::Uuid),
        &uuid_json(r.below(4)),
        &mut |_| unreachable!(),
    )
    .expect("datum");
    Arc::new(Row {
        uuid,
        version: Uuid::from_u128(u128::from(version)),
        cols: vec![d],
    })
}

fn random_delta(r: &mut Rng, schema: &Schema) -> TxnDelta {
    let mut version = 1u64;
    let mut v = || {
        version += 1;
        version
    };
    let mut flows = Vec::new();
    for i in 0..6 {
        let u = row_uuid(i);
        let (old, new) = match r.below(4) {
            0 => continue,
            1 => (None, Some(random_row(r, schema, u, v()))),
            2 => (Some(random_row(r, schema, u, v())), None),
            _ => {
                let old = random_row(r, schema, u, v());
                // Sometimes only one column moves (e.g. the row changes datapath).
                let new = if r.below(2) == 0 {
                    let mut n = (*old).clone();
                    let c = col(schema, 0, "dp");
                    n.cols[c] = random_row(r, schema, u, 0).cols[c].clone();
                    n.version = Uuid::from_u128(u128::from(v()));
                    Arc::new(n)
                } else {
                    random_row(r, schema, u, v())
                };
                (Some(old), Some(new))
            }
        };
        flows.push(RowChange { uuid: u, old, new });
    }
    let mut tables = Vec::new();
    if !flows.is_empty() {
        tables.push((0, flows));
    }
    if r.below(2) == 0 {
        let u = row_uuid(9);
        let (a, b) = (other_row(r, u, v()), other_row(r, u, v()));
        tables.push((
            1,
            vec![RowChange {
                uuid: u,
                old: Some(a),
                new: Some(b),
            }],
        ));
    }
    TxnDelta {
        tables,
        ..Default::default()
    }
}

/// The updates of every monitor, computed through the index's candidates.
fn indexed_updates(schema: &Schema, monitors: &[Monitor], delta: &TxnDelta) -> Vec<Option<Value>> {
    let index = CondIndex::build(
        schema.tables.len(),
        monitors.iter().enumerate().map(|(i, m)| (i as u32, m)),
    );
    let mut rows: Vec<Vec<Vec<u32>>> = vec![vec![Vec::new(); delta.tables.len()]; monitors.len()];
    let mut cand = Vec::new();
    for (di, (t, changes)) in delta.tables.iter().enumerate() {
        for (ci, ch) in changes.iter().enumerate() {
            cand.clear();
            index.candidates(*t, ch, &mut cand);
            for &m in &cand {
                rows[m as usize][di].push(ci as u32);
            }
        }
    }
    monitors
        .iter()
        .zip(&rows)
        .map(|(m, r)| m.updates_selected(schema, delta, Some(r)))
        .collect()
}

#[test]
fn indexed_matching_equals_naive_evaluation_on_random_conditions_and_changes() {
    let schema = Schema::parse(SCHEMA).expect("schema");
    let mut reported = 0;
    for seed in 0..400u64 {
        let mut r = Rng(seed);
        let monitors: Vec<Monitor> = (0..1 + r.below(8))
            .map(|_| random_monitor(&mut r, &schema))
            .collect();
        let delta = random_delta(&mut r, &schema);
        let naive: Vec<Option<Value>> = monitors
            .iter()
            .map(|m| m.updates(&schema, &delta))
            .collect();
        let indexed = indexed_updates(&schema, &monitors, &delta);
        for (k, (a, b)) in naive.iter().zip(&indexed).enumerate() {
            assert_eq!(
                a, b,
                "seed {seed}, monitor {k}: {:?}\ndelta: {delta:?}",
                monitors[k].tables
            );
        }
        reported += naive.iter().filter(|u| u.is_some()).count();
    }
    // The cases are not vacuous: many monitors report something.
    assert!(reported > 300, "only {reported} monitors reported anything");
}

#[test]
fn a_row_moving_between_datapaths_reaches_both_and_no_other_datapath() {
    let schema = Schema::parse(SCHEMA).expect("schema");
    let mon = |i: usize| {
        Monitor::from_json(
            &schema,
            &json!({"Flow": [{"columns": ["dp"], "where": [["dp", "==", uuid_json(i)]]}]}),
            MonitorVersion::V2,
        )
        .expect("monitor")
    };
    let monitors = [mon(0), mon(1), mon(2)];
    let index = CondIndex::build(2, monitors.iter().enumerate().map(|(i, m)| (i as u32, m)));
    let c = col(&schema, 0, "dp");
    let mut r = Rng(1);
    let u = row_uuid(0);
    let mut old = (*random_row(&mut r, &schema, u, 1)).clone();
    let mut no_named = |_: &str| -> hf_ovsdb::error::Result<Uuid> { unreachable!() };
    let ty = &schema.tables[0].columns[c].ty;
    old.cols[c] = Datum::from_json(ty, &uuid_json(0), &mut no_named).expect("datum");
    let mut new = old.clone();
    new.cols[c] = Datum::from_json(ty, &uuid_json(1), &mut no_named).expect("datum");
    let ch = RowChange {
        uuid: u,
        old: Some(Arc::new(old)),
        new: Some(Arc::new(new)),
    };
    let mut cand = Vec::new();
    index.candidates(0, &ch, &mut cand);
    // The old datapath's monitor must see the row leave, the new one's see it arrive, and the
    // third datapath's monitor is not even looked at.
    assert_eq!(cand, vec![0, 1]);
    let delta = TxnDelta {
        tables: vec![(0, vec![ch])],
        ..Default::default()
    };
    let ups = indexed_updates(&schema, &monitors, &delta);
    let key = u.to_string();
    assert_eq!(
        ups[0].as_ref().map(|v| &v["Flow"][&key]),
        Some(&json!({"delete": null}))
    );
    assert!(
        ups[1]
            .as_ref()
            .is_some_and(|v| v["Flow"][&key].get("insert").is_some())
    );
    assert_eq!(ups[2], None);
}

// ---- The row index: initial contents and condition changes read only candidate rows ----------

/// One random transaction against `db`'s committed rows (inserts, deletes and modifications of
/// rows 0..12 of Flow, whose `old` is the committed row), applied to every database in `dbs`.
fn random_commit(r: &mut Rng, schema: &Schema, dbs: &mut [&mut Database], version: &mut u64) {
    let mut flows = Vec::new();
    for i in 0..12 {
        let u = row_uuid(i);
        let cur = dbs[0].row(0, &u).cloned();
        *version += 1;
        let (old, new) = match (r.below(3), cur) {
            (0, _) => continue,
            (1, Some(c)) => (Some(c), None),
            (_, cur) => {
                let new = match &cur {
                    // Sometimes only the datapath moves.
                    Some(c) if r.below(2) == 0 => {
                        let mut n = (**c).clone();
                        let k = col(schema, 0, "dp");
                        n.cols[k] = random_row(r, schema, u, 0).cols[k].clone();
                        n.version = Uuid::from_u128(u128::from(*version));
                        Arc::new(n)
                    }
                    _ => random_row(r, schema, u, *version),
                };
                (cur, Some(new))
            }
        };
        flows.push(RowChange { uuid: u, old, new });
    }
    let delta = TxnDelta {
        tables: vec![(0, flows)],
        ..Default::default()
    };
    for db in dbs.iter_mut() {
        db.apply(&delta);
    }
}

/// The rows of `Flow` a condition matches, by evaluating it on every row.
fn matching(db: &Database, m: &Monitor) -> std::collections::BTreeSet<String> {
    db.tables[0]
        .rows
        .values()
        .filter(|row| m.tables[0].condition.eval(row))
        .map(|row| row.uuid.to_string())
        .collect()
}

fn keys(v: &Value, table: &str) -> std::collections::BTreeSet<String> {
    v.get(table)
        .and_then(Value::as_object)
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn initial_contents_and_condition_changes_through_the_row_index_equal_a_scan() {
    let schema = Arc::new(Schema::parse(SCHEMA).expect("schema"));
    let (mut lookups, mut changed, mut kept_clauses) = (0, 0, 0);
    for seed in 0..300u64 {
        let mut r = Rng(seed);
        // `indexed` grows row indexes as monitors arrive and keeps them through later
        // commits; `plain` never gets one (every read is a scan).
        let mut indexed = Database::new(schema.clone(), 1);
        let mut plain = Database::new(schema.clone(), 1);
        let mut version = 1;
        for _round in 0..4 {
            random_commit(
                &mut r,
                &schema,
                &mut [&mut indexed, &mut plain],
                &mut version,
            );
            let mut m = random_monitor(&mut r, &schema);
            m.index_rows(&mut indexed);
            let init = m.initial(&indexed);
            assert_eq!(init, m.initial(&plain), "seed {seed}: initial contents");
            assert_eq!(keys(&init, "Flow"), matching(&plain, &m), "seed {seed}");
            // A condition change: the rows entering or leaving, against the scan's answer.
            let n = r.below(4);
            let w = Value::Array((0..n).map(|_| random_clause(&mut r)).collect());
            let before = matching(&plain, &m);
            let mut m2 = m.clone();
            let got = m
                .change_conditions(&mut indexed, &json!({"Flow": [{"where": w}]}))
                .expect("valid condition change")
                .unwrap_or_else(|| json!({}));
            let after = matching(&plain, &m);
            let want: std::collections::BTreeSet<String> =
                before.symmetric_difference(&after).cloned().collect();
            assert_eq!(keys(&got, "Flow"), want, "seed {seed}: condition change");
            let mut fresh = Database::new(schema.clone(), 1);
            fresh.apply(&plain.snapshot_delta());
            let same = m2
                .change_conditions(&mut fresh, &json!({"Flow": [{"where": w}]}))
                .expect("valid condition change")
                .unwrap_or_else(|| json!({}));
            assert_eq!(got, same, "seed {seed}: condition change rows");
            changed += want.len();
            // A second change that keeps some of those clauses, drops others and adds new
            // ones (a trace or a controller widening its datapaths): only the clauses that
            // differ are read, and the rows that change sides are still the scan's.
            let Value::Array(kept) = &w else {
                unreachable!()
            };
            let mut w2: Vec<Value> = kept.iter().filter(|_| r.below(3) > 0).cloned().collect();
            for _ in 0..r.below(3) {
                w2.push(random_clause(&mut r));
            }
            if r.below(2) == 0 {
                w2.reverse();
            }
            let before = matching(&plain, &m);
            let got = m
                .change_conditions(&mut indexed, &json!({"Flow": [{"where": w2}]}))
                .expect("valid condition change")
                .unwrap_or_else(|| json!({}));
            let after = matching(&plain, &m);
            let want: std::collections::BTreeSet<String> =
                before.symmetric_difference(&after).cloned().collect();
            assert_eq!(
                keys(&got, "Flow"),
                want,
                "seed {seed}: narrowed condition change"
            );
            kept_clauses += usize::from(!kept.is_empty() && !w2.is_empty());
        }
        lookups += indexed.row_index_stats().0;
    }
    // Not vacuous: many reads went through the index, and condition changes moved rows.
    assert!(lookups > 300, "only {lookups} indexed reads");
    assert!(changed > 300, "only {changed} rows entered or left");
    assert!(
        kept_clauses > 300,
        "only {kept_clauses} changes kept clauses"
    );
}

#[test]
fn a_datapath_condition_reads_its_rows_and_not_the_table() {
    let schema = Arc::new(Schema::parse(SCHEMA).expect("schema"));
    let mut db = Database::new(schema.clone(), 1);
    let c = col(&schema, 0, "dp");
    let ty = &schema.tables[0].columns[c].ty;
    let mut r = Rng(7);
    // 200 flows spread over 4 datapaths (50 each).
    let rows: Vec<RowChange> = (0..200u128)
        .map(|i| {
            let u = Uuid::from_u128(0x2000 + i);
            let mut row = (*random_row(&mut r, &schema, u, 1)).clone();
            row.cols[c] = Datum::from_json(ty, &uuid_json(i as usize % 4), &mut |_| unreachable!())
                .expect("datum");
            RowChange {
                uuid: u,
                old: None,
                new: Some(Arc::new(row)),
            }
        })
        .collect();
    db.apply(&TxnDelta {
        tables: vec![(0, rows)],
        ..Default::default()
    });
    let mut m = Monitor::from_json(
        &schema,
        &json!({"Flow": [{"columns": ["dp"], "where": [["dp", "==", uuid_json(1)]]}]}),
        MonitorVersion::V2,
    )
    .expect("monitor");
    m.index_rows(&mut db);
    assert_eq!(keys(&m.initial(&db), "Flow").len(), 50);
    // One lookup, no scan, and only the datapath's 50 rows looked at.
    assert_eq!(db.row_index_stats(), (1, 0, 50));
    let up = m
        .change_conditions(
            &mut db,
            &json!({"Flow": [{"where": [["dp", "==", uuid_json(1)], ["dp", "==", uuid_json(2)]]}]}),
        )
        .expect("change")
        .expect("rows enter");
    assert_eq!(keys(&up, "Flow").len(), 50);
    // Only the added clause's rows (datapath 2) can change sides: 50 candidates, no scan
    // (datapath 1's rows, matched by a clause both conditions hold, are not read again).
    assert_eq!(db.row_index_stats(), (2, 0, 100));
    // Dropping a clause reads only its rows: datapath 1's leave.
    let up = m
        .change_conditions(
            &mut db,
            &json!({"Flow": [{"where": [["dp", "==", uuid_json(2)]]}]}),
        )
        .expect("change")
        .expect("rows leave");
    assert_eq!(keys(&up, "Flow").len(), 50);
    assert_eq!(db.row_index_stats(), (3, 0, 150));
    // The same clauses in another order: nothing read, nothing sent.
    let none = m
        .change_conditions(
            &mut db,
            &json!({"Flow": [{"where": [["dp", "==", uuid_json(2)]]}]}),
        )
        .expect("change");
    assert!(none.is_none());
    assert_eq!(db.row_index_stats(), (3, 0, 150));
    // A condition the index cannot answer scans, and says so.
    m.change_conditions(
        &mut db,
        &json!({"Flow": [{"where": [["dp", "!=", uuid_json(1)]]}]}),
    )
    .expect("change");
    assert_eq!(db.row_index_stats().1, 1);
}

/// A monitor of any version, with a random column list (or none: every column and
/// `_version`), random `select` and, for monitor_cond versions, random conditions.
fn random_monitor_any(r: &mut Rng, schema: &Schema) -> Monitor {
    let version = *r.pick(&[MonitorVersion::V1, MonitorVersion::V2, MonitorVersion::V3]);
    let mut req = json!({});
    if r.below(3) != 0 {
        let mut cols: Vec<&str> = COLS.iter().copied().filter(|_| r.below(2) == 0).collect();
        if r.below(2) == 0 {
            cols.push("_version");
        }
        req["columns"] = json!(cols);
    }
    if r.below(2) == 0 {
        let b = |r: &mut Rng| r.below(3) != 0;
        req["select"] = json!({"initial": b(r), "insert": b(r), "delete": b(r), "modify": b(r)});
    }
    if version != MonitorVersion::V1 && r.below(3) != 0 {
        let n = r.below(3);
        req["where"] = Value::Array((0..n).map(|_| random_clause(r)).collect());
    }
    let mut reqs = json!({"Flow": [req]});
    if r.below(2) == 0 {
        reqs["Other"] = json!([{}]);
    }
    Monitor::from_json(schema, &reqs, version).expect("valid monitor request")
}

/// The echo the server sends is written straight from the rows
/// (`Monitor::write_updates_selected`); the tree form (`updates_selected`, the old encoder) is
/// the reference: for random monitors of every version and random changes, with and without
/// the index's selection, the text parses to the same tree, and "nothing" is the same.
#[test]
fn written_updates_mean_the_tree_updates_on_random_monitors_and_changes() {
    let schema = Schema::parse(SCHEMA).expect("schema");
    let mut reported = 0;
    for seed in 0..600u64 {
        let mut r = Rng(seed ^ 0x5eed);
        let m = random_monitor_any(&mut r, &schema);
        let delta = random_delta(&mut r, &schema);
        let every: Vec<Vec<u32>> = delta
            .tables
            .iter()
            .map(|(_, c)| (0..c.len() as u32).filter(|_| r.below(4) != 0).collect())
            .collect();
        for rows in [None, Some(every.as_slice())] {
            let tree = m.updates_selected(&schema, &delta, rows);
            let mut out = b"prefix".to_vec();
            let written = m.write_updates_selected(&schema, &delta, rows, &mut out);
            assert_eq!(written, tree.is_some(), "seed {seed}: {:?}", m.tables);
            assert_eq!(&out[..6], b"prefix", "seed {seed}: the text is appended");
            if let Some(tree) = &tree {
                let text: Value = serde_json::from_slice(&out[6..]).expect("valid JSON");
                assert_eq!(&text, tree, "seed {seed}: {:?}\ndelta: {delta:?}", m.tables);
                reported += 1;
            } else {
                assert_eq!(out.len(), 6, "seed {seed}: nothing written");
            }
            // In parts (as the server streams a large echo): the parts and the rest, joined,
            // mean the same tree; nothing is flushed when nothing is reported.
            for part in [1, 40, 300] {
                let mut joined = b"prefix".to_vec();
                let mut rest = Vec::new();
                let mut flushes = 0;
                let written = m.write_updates_parts(
                    &schema,
                    &delta,
                    rows,
                    &mut rest,
                    part,
                    &mut |o: &mut Vec<u8>| {
                        flushes += 1;
                        joined.append(o);
                    },
                );
                joined.extend_from_slice(&rest);
                assert_eq!(written, tree.is_some(), "seed {seed}, part {part}");
                match &tree {
                    Some(tree) => {
                        let text: Value = serde_json::from_slice(&joined[6..])
                            .unwrap_or_else(|e| panic!("seed {seed}, part {part}: {e}"));
                        assert_eq!(&text, tree, "seed {seed}, part {part}");
                        if part == 1 {
                            assert!(flushes > 0, "seed {seed}: never flushed");
                        }
                    }
                    None => assert_eq!((flushes, joined.len()), (0, 6), "seed {seed}"),
                }
            }
        }
    }
    assert!(reported > 400, "only {reported} updates reported anything");
}
