//! Transaction semantics against a small schema with every rule in play.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::schema::Schema;

const SCHEMA: &str = r#"{
  "name": "T", "version": "1.0.0",
  "tables": {
    "Root": {"isRoot": true, "maxRows": 3, "columns": {
      "name": {"type": "string"},
      "kids": {"type": {"key": {"type": "uuid", "refTable": "Kid"}, "min": 0, "max": "unlimited"}},
      "fav": {"type": {"key": {"type": "uuid", "refTable": "Kid", "refType": "weak"}, "min": 0, "max": 1}},
      "n": {"type": {"key": {"type": "integer", "minInteger": 0, "maxInteger": 100}}},
      "color": {"type": {"key": {"type": "string", "enum": ["set", ["red", "blue"]]}, "min": 0, "max": 1}},
      "tags": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
      "fixed": {"type": "string", "mutable": false}
    }, "indexes": [["name"]]},
    "Kid": {"columns": {
      "name": {"type": "string"},
      "buddies": {"type": {"key": {"type": "uuid", "refTable": "Kid", "refType": "weak"}, "min": 0, "max": "unlimited"}}
    }}
  }
}"#;

fn db() -> Database {
    Database::new(Arc::new(Schema::parse(SCHEMA).unwrap()), 1)
}

fn run(db: &mut Database, ops: Value) -> std::result::Result<Vec<Value>, (ErrorKind, Vec<Value>)> {
    let ops = ops.as_array().unwrap().clone();
    match execute(db, &ops, &NoLocks) {
        TxnOutcome::Commit { results, delta } => {
            db.apply(&delta);
            Ok(results)
        }
        TxnOutcome::Failed { results, error } => Err((error.kind, results)),
        TxnOutcome::Blocked { .. } => panic!("blocked"),
    }
}

fn count(db: &Database, table: &str) -> usize {
    db.tables[db.schema.table_index(table).unwrap()].rows.len()
}

fn uuid_of(r: &Value) -> String {
    r["uuid"][1].as_str().unwrap().to_string()
}

#[test]
fn insert_with_named_uuid_forward_reference() {
    let mut d = db();
    let r = run(
        &mut d,
        json!([
            {"op": "insert", "table": "Root", "row": {"name": "a", "kids": ["named-uuid", "k"]}},
            {"op": "insert", "table": "Kid", "uuid-name": "k", "row": {"name": "kid"}}
        ]),
    )
    .unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(count(&d, "Kid"), 1);
    let kid = uuid_of(&r[1]);
    let sel = run(&mut d, json!([{"op": "select", "table": "Root", "where": [["name", "==", "a"]], "columns": ["kids"]}])).unwrap();
    assert_eq!(sel[0]["rows"][0]["kids"], json!(["uuid", kid]));
}

#[test]
fn unreferenced_non_root_rows_are_collected() {
    let mut d = db();
    run(
        &mut d,
        json!([{"op": "insert", "table": "Kid", "row": {"name": "orphan"}}]),
    )
    .unwrap();
    assert_eq!(
        count(&d, "Kid"),
        0,
        "an orphan in a non-root table is garbage"
    );
    run(
        &mut d,
        json!([
            {"op": "insert", "table": "Root", "row": {"name": "a", "kids": ["named-uuid", "k"]}},
            {"op": "insert", "table": "Kid", "uuid-name": "k", "row": {"name": "kid"}}
        ]),
    )
    .unwrap();
    assert_eq!(count(&d, "Kid"), 1);
    run(
        &mut d,
        json!([{"op": "update", "table": "Root", "where": [], "row": {"kids": ["set", []]}}]),
    )
    .unwrap();
    assert_eq!(
        count(&d, "Kid"),
        0,
        "dropping the last strong reference collects the row"
    );
}

#[test]
fn deleting_a_strongly_referenced_row_is_an_integrity_violation() {
    let mut d = db();
    run(
        &mut d,
        json!([
            {"op": "insert", "table": "Root", "row": {"name": "a", "kids": ["named-uuid", "k"]}},
            {"op": "insert", "table": "Kid", "uuid-name": "k", "row": {"name": "kid"}}
        ]),
    )
    .unwrap();
    let (kind, results) = run(
        &mut d,
        json!([{"op": "delete", "table": "Kid", "where": []}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::ReferentialIntegrity);
    assert_eq!(
        results.len(),
        2,
        "commit errors add one element after the op results"
    );
    assert_eq!(results[1]["error"], "referential integrity violation");
    assert_eq!(count(&d, "Kid"), 1);
}

#[test]
fn dangling_strong_reference_is_rejected() {
    let mut d = db();
    let (kind, _) = run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "a",
        "kids": ["uuid", "8b7f2b9a-0000-4000-8000-000000000000"]}}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::ReferentialIntegrity);
}

#[test]
fn weak_references_vanish_with_their_target() {
    let mut d = db();
    let r = run(&mut d, json!([
        {"op": "insert", "table": "Root", "row": {"name": "a", "kids": ["named-uuid", "k"], "fav": ["named-uuid", "k"]}},
        {"op": "insert", "table": "Kid", "uuid-name": "k", "row": {"name": "kid"}}
    ]))
    .unwrap();
    let kid = uuid_of(&r[1]);
    let sel = run(
        &mut d,
        json!([{"op": "select", "table": "Root", "where": [], "columns": ["fav"]}]),
    )
    .unwrap();
    assert_eq!(sel[0]["rows"][0]["fav"], json!(["uuid", kid]));
    run(
        &mut d,
        json!([{"op": "update", "table": "Root", "where": [], "row": {"kids": ["set", []]}}]),
    )
    .unwrap();
    let sel = run(
        &mut d,
        json!([{"op": "select", "table": "Root", "where": [], "columns": ["fav"]}]),
    )
    .unwrap();
    assert_eq!(
        sel[0]["rows"][0]["fav"],
        json!(["set", []]),
        "weak ref removed when its target was collected"
    );
}

#[test]
fn index_uniqueness_and_swaps() {
    let mut d = db();
    run(&mut d, json!([{"op": "insert", "table": "Root", "row": {"name": "a"}}, {"op": "insert", "table": "Root", "row": {"name": "b"}}])).unwrap();
    let (kind, _) = run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "a"}}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::Constraint);
    // Renaming a → c and inserting a in one transaction is fine.
    run(
        &mut d,
        json!([
            {"op": "update", "table": "Root", "where": [["name", "==", "a"]], "row": {"name": "c"}},
            {"op": "insert", "table": "Root", "row": {"name": "a"}}
        ]),
    )
    .unwrap();
    assert_eq!(count(&d, "Root"), 3);
}

#[test]
fn max_rows_is_enforced() {
    let mut d = db();
    run(&mut d, json!([{"op": "insert", "table": "Root", "row": {"name": "a"}}, {"op": "insert", "table": "Root", "row": {"name": "b"}}, {"op": "insert", "table": "Root", "row": {"name": "c"}}])).unwrap();
    let (kind, _) = run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "d"}}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::Constraint);
}

#[test]
fn constraints_on_values() {
    let mut d = db();
    let cases = [
        (json!({"name": "a", "n": 101}), ErrorKind::Constraint),
        (
            json!({"name": "a", "color": "green"}),
            ErrorKind::Constraint,
        ),
        (json!({"name": "a", "n": "x"}), ErrorKind::Syntax),
        (json!({"name": "a", "nope": 1}), ErrorKind::Syntax),
        (
            json!({"name": "a", "_uuid": ["uuid", "8b7f2b9a-0000-4000-8000-000000000000"]}),
            ErrorKind::Syntax,
        ),
    ];
    for (row, want) in cases {
        let (kind, results) = run(
            &mut d,
            json!([{"op": "insert", "table": "Root", "row": row}]),
        )
        .unwrap_err();
        assert_eq!(kind, want, "row {row}");
        assert_eq!(results[0]["error"], want.as_str());
    }
    assert_eq!(count(&d, "Root"), 0);
}

#[test]
fn immutable_columns_cannot_be_updated_or_mutated() {
    let mut d = db();
    run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "a", "fixed": "x"}}]),
    )
    .unwrap();
    let (kind, _) = run(
        &mut d,
        json!([{"op": "update", "table": "Root", "where": [], "row": {"fixed": "y"}}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::Constraint);
}

#[test]
fn mutations() {
    let mut d = db();
    run(&mut d, json!([{"op": "insert", "table": "Root", "row": {"name": "a", "n": 5, "tags": ["map", [["k", "v"]]]}}])).unwrap();
    let r = run(&mut d, json!([{"op": "mutate", "table": "Root", "where": [], "mutations": [
        ["n", "+=", 10], ["n", "*=", 2], ["tags", "insert", ["map", [["k", "ignored"], ["j", "w"]]]]]}]))
    .unwrap();
    assert_eq!(r[0]["count"], 1);
    let sel = run(
        &mut d,
        json!([{"op": "select", "table": "Root", "where": [], "columns": ["n", "tags"]}]),
    )
    .unwrap();
    assert_eq!(sel[0]["rows"][0]["n"], 30);
    assert_eq!(
        sel[0]["rows"][0]["tags"],
        json!(["map", [["j", "w"], ["k", "v"]]])
    );
    run(&mut d, json!([{"op": "mutate", "table": "Root", "where": [], "mutations": [["tags", "delete", ["set", ["k"]]]]}])).unwrap();
    let sel = run(
        &mut d,
        json!([{"op": "select", "table": "Root", "where": [], "columns": ["tags"]}]),
    )
    .unwrap();
    assert_eq!(sel[0]["rows"][0]["tags"], json!(["map", [["j", "w"]]]));
    let (kind, _) = run(
        &mut d,
        json!([{"op": "mutate", "table": "Root", "where": [], "mutations": [["n", "/=", 0]]}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::Domain);
    let (kind, _) = run(
        &mut d,
        json!([{"op": "mutate", "table": "Root", "where": [], "mutations": [["n", "+=", 1000]]}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::Constraint, "result outside maxInteger");
    let (kind, _) = run(&mut d, json!([{"op": "mutate", "table": "Root", "where": [], "mutations": [["n", "+=", i64::MAX]]}])).unwrap_err();
    assert_eq!(kind, ErrorKind::Range);
}

#[test]
fn wait_abort_comment_assert_and_duplicate_names() {
    let mut d = db();
    run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "a"}}]),
    )
    .unwrap();
    run(&mut d, json!([{"op": "wait", "timeout": 0, "table": "Root", "where": [], "columns": ["name"], "until": "==", "rows": [{"name": "a"}]}])).unwrap();
    let (kind, _) = run(&mut d, json!([{"op": "wait", "timeout": 0, "table": "Root", "where": [], "columns": ["name"], "until": "==", "rows": [{"name": "b"}]}])).unwrap_err();
    assert_eq!(kind, ErrorKind::TimedOut);
    let (kind, _) = run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "z"}}, {"op": "abort"}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::Aborted);
    assert_eq!(count(&d, "Root"), 1, "aborted insert is not committed");
    let (kind, _) = run(&mut d, json!([{"op": "assert", "lock": "l"}])).unwrap_err();
    assert_eq!(kind, ErrorKind::NotOwner);
    let (kind, _) = run(
        &mut d,
        json!([
        {"op": "insert", "table": "Kid", "uuid-name": "x", "row": {}},
        {"op": "insert", "table": "Kid", "uuid-name": "x", "row": {}}]),
    )
    .unwrap_err();
    assert_eq!(kind, ErrorKind::DuplicateUuidName);
    let ops = json!([{"op": "comment", "comment": "hello"}, {"op": "insert", "table": "Root", "row": {"name": "q"}}]);
    match execute(&mut d, ops.as_array().unwrap(), &NoLocks) {
        TxnOutcome::Commit { delta, .. } => assert_eq!(delta.comment.as_deref(), Some("hello")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn blocked_wait_with_timeout() {
    let mut d = db();
    struct Wait;
    impl TxnEnv for Wait {
        fn owns_lock(&self, _: &str) -> bool {
            false
        }
    }
    let ops = json!([{"op": "wait", "timeout": 1000, "table": "Root", "where": [], "columns": ["name"], "until": "==", "rows": [{"name": "a"}]}]);
    assert!(matches!(
        execute(&mut d, ops.as_array().unwrap(), &Wait),
        TxnOutcome::Blocked {
            timeout_ms: Some(1000)
        }
    ));
}

#[test]
fn update_with_no_effect_produces_no_change() {
    let mut d = db();
    run(
        &mut d,
        json!([{"op": "insert", "table": "Root", "row": {"name": "a"}}]),
    )
    .unwrap();
    let ops = json!([{"op": "update", "table": "Root", "where": [], "row": {"name": "a"}}]);
    match execute(&mut d, ops.as_array().unwrap(), &NoLocks) {
        TxnOutcome::Commit { results, delta } => {
            assert_eq!(results[0]["count"], 1);
            assert!(delta.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_operations_name_the_problem() {
    let mut d = db();
    for (op, needle) in [
        (json!({"op": "frobnicate"}), "unknown operation"),
        (json!({"op": "insert"}), "table"),
        (
            json!({"op": "select", "table": "Nope", "where": []}),
            "no table named Nope",
        ),
        (
            json!({"op": "select", "table": "Root", "where": [["name", "~", "a"]]}),
            "unknown function",
        ),
        (json!(42), "must be an object"),
    ] {
        let (kind, results) = run(&mut d, json!([op])).unwrap_err();
        assert_eq!(kind, ErrorKind::Syntax);
        let details = results[0]["details"].as_str().unwrap();
        assert!(
            details.contains(needle),
            "{details} should mention {needle}"
        );
    }
}
