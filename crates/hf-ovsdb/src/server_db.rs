//! The `_Server` database (ovsdb-server(5)): one `Database` row per served database, which OVS's
//! IDL clients read before anything else (model, whether it is connected, whether this server
//! is the leader, the schema text).

use std::sync::Arc;

use crate::atom::Atom;
use crate::datum::Datum;
use crate::db::{Database, Row, RowChange, TxnDelta};
use crate::schema::Schema;

/// The `_Server` schema, version 1.2.0 as ovsdb-server 3.1 serves it.
pub const SERVER_SCHEMA: &str = r#"{
  "name": "_Server",
  "version": "1.2.0",
  "tables": {
    "Database": {
      "columns": {
        "name": {"type": "string"},
        "model": {"type": {"key": {"type": "string", "enum": ["set", ["clustered", "relay", "standalone"]]}}},
        "connected": {"type": "boolean"},
        "leader": {"type": "boolean"},
        "schema": {"type": {"key": "string", "min": 0}},
        "cid": {"type": {"key": "uuid", "min": 0}},
        "sid": {"type": {"key": "uuid", "min": 0}},
        "index": {"type": {"key": "integer", "min": 0}}
      }
    }
  }
}"#;

/// The parsed `_Server` schema.
pub fn server_schema() -> Arc<Schema> {
    match Schema::parse(SERVER_SCHEMA) {
        Ok(s) => Arc::new(s),
        // The text above is a constant checked by a unit test.
        Err(e) => panic!("built-in _Server schema is invalid: {e}"),
    }
}

/// The delta that inserts a `Database` row describing a standalone database with `schema`.
pub fn database_row(server: &mut Database, schema: &Schema) -> TxnDelta {
    let ts = &server.schema.tables[0];
    let uuid = server.uuids.next_uuid();
    let version = server.uuids.next_uuid();
    let mut cols: Vec<Datum> = ts.defaults().to_vec();
    let set = |cols: &mut Vec<Datum>, name: &str, a: Atom| {
        if let Some(i) = ts.column_index(name) {
            cols[i] = Datum::scalar(a);
        }
    };
    set(&mut cols, "name", Atom::string(&schema.name));
    set(&mut cols, "model", Atom::string("standalone"));
    set(&mut cols, "connected", Atom::Boolean(true));
    set(&mut cols, "leader", Atom::Boolean(true));
    set(
        &mut cols,
        "schema",
        Atom::string(&schema.to_json().to_string()),
    );
    TxnDelta {
        tables: vec![(
            0,
            vec![RowChange {
                uuid,
                old: None,
                new: Some(Arc::new(Row {
                    uuid,
                    version,
                    cols,
                })),
            }],
        )],
        comment: None,
        durable: false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn server_schema_parses() {
        let s = super::server_schema();
        assert_eq!(s.name, "_Server");
        assert_eq!(s.tables[0].columns.len(), 8);
    }
}
