//! Replays the committed corpus of the `ovsdb_rpc` fuzz target (CI has only the stable
//! toolchain, so the corpus runs as a test), and throws random bytes at the same entry point.

use std::path::PathBuf;

#[test]
fn ovsdb_rpc_corpus_replays_without_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/ovsdb_rpc");
    let mut n = 0;
    let mut total = hf_ovsdb_net::fuzzing::RunStats::default();
    for e in std::fs::read_dir(&dir).expect("corpus directory") {
        let path = e.expect("entry").path();
        let data = std::fs::read(&path).expect("read");
        let s = hf_ovsdb_net::fuzzing::rpc_stream(&data);
        if path
            .file_name()
            .is_some_and(|f| f == "insert_named" || f == "delete_gc" || f == "mutate_wait")
        {
            assert!(
                s.updates > 0,
                "seed {} commits changes the monitor sees: {s:?}",
                path.display()
            );
        }
        total.replies += s.replies;
        total.updates += s.updates;
        n += 1;
    }
    assert!(n >= 5, "the corpus has its seeds ({n} files)");
    assert!(total.replies >= 20, "the seeds get replies: {total:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        hf_ovsdb_net::fuzzing::rpc_stream(&data);
    }

    /// Mutated seeds reach deeper than random bytes: flip bytes of a real transaction.
    #[test]
    fn mutated_transactions_never_panic(pos in 0usize..400, byte in proptest::prelude::any::<u8>(), cut in 0usize..400) {
        let seed = br#"{"method":"transact","params":["F",{"op":"insert","table":"R","uuid-name":"r","row":{"name":"a","kids":["named-uuid","k"],"m":["map",[["x",1]]]}},{"op":"insert","table":"K","uuid-name":"k","row":{"v":"kid"}},{"op":"mutate","table":"R","where":[["name","==","a"]],"mutations":[["n","+=",1]]}],"id":1}"#;
        let mut d = seed.to_vec();
        let p = pos % d.len();
        d[p] = byte;
        d.truncate(cut.max(10).min(d.len()));
        hf_ovsdb_net::fuzzing::rpc_stream(&d);
        hf_ovsdb_net::fuzzing::rpc_stream(seed);
    }
}
