//! Replays the committed corpus of the `client_stream` fuzz target, and throws random and
//! mutated bytes at the client replica's session core.

use std::path::PathBuf;

#[test]
fn client_stream_corpus_replays_without_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/client_stream");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("corpus directory") {
        let data = std::fs::read(e.expect("entry").path()).expect("read");
        hf_ovsdb_net::fuzzing::client_stream(&data);
        n += 1;
    }
    assert!(n >= 5, "the corpus has its seeds ({n} files)");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
        hf_ovsdb_net::fuzzing::client_stream(&data);
    }

    /// Flip a byte of a valid handshake followed by updates.
    #[test]
    fn mutated_sessions_never_panic(pos in 0usize..2000, byte in proptest::prelude::any::<u8>()) {
        let mut d = vec![1u8, 255];
        d.extend_from_slice(hf_ovsdb_net::fuzzing::CLIENT_HANDSHAKE.as_bytes());
        d.extend_from_slice(br#"{"id":null,"method":"update3","params":["hf-replica","6f0b2a2e-0000-4000-8000-0000000000e2",{"Logical_Switch":{"6f0b2a2e-0000-4000-8000-0000000000a1":{"modify":{"other_config":["map",[["a","b"]]]}}}}]}"#);
        let p = pos % d.len();
        d[p] = byte;
        hf_ovsdb_net::fuzzing::client_stream(&d);
    }
}
