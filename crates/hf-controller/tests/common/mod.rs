//! What the tests that run real OVN add to hf-testkit's [`Central`]: the SB that real
//! ovsdb-server serves, read into an [`SbSnapshot`].
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use hf_model::SbSnapshot;
pub use hf_testkit::ovn::Central;
pub use hf_testkit::require_tools as require;

/// The SB of a [`Central`] as a snapshot.
pub trait SbOf {
    /// The SB as real ovsdb-server serves it now (call after [`Central::sync`]).
    fn sb_snapshot(&self) -> SbSnapshot;
}

impl SbOf for Central {
    fn sb_snapshot(&self) -> SbSnapshot {
        load_snapshot(&self.sb_backup().unwrap())
    }
}

/// Reads an OVSDB standalone database file's bytes into an SB snapshot.
pub fn load_snapshot(data: &[u8]) -> SbSnapshot {
    let mut reader = hf_ovsdb::file::RecordReader::new(data);
    let first = reader
        .next()
        .expect("schema record")
        .expect("schema record parses");
    let schema = hf_ovsdb::Schema::from_json(&first.json).expect("schema");
    let mut db = hf_ovsdb::Database::new(Arc::new(schema), 1);
    for (i, rec) in reader.enumerate() {
        // `ovsdb-client backup` writes whole records: a bad one is a failure, not the end.
        let rec =
            rec.unwrap_or_else(|e| panic!("SB backup: record {} after the schema: {e}", i + 1));
        let delta = hf_ovsdb::file::record_delta(&mut db, &rec.json).expect("record");
        db.apply(&delta);
    }
    SbSnapshot::from_db(&db).expect("SB snapshot")
}
