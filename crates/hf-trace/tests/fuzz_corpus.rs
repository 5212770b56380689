//! Replays the committed fuzz corpus (`fuzz/corpus/microflow/`) through the entry point the
//! cargo-fuzz target calls, so CI on stable checks that no seed panics or breaks a property.
// A test reads files.
#![allow(clippy::disallowed_methods)]

use std::path::Path;

#[test]
fn replay_fuzz_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/microflow");
    let mut n = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let data = std::fs::read(&path).expect("read seed");
        let result = std::panic::catch_unwind(|| hf_trace::fuzzing::microflow(&data));
        assert!(
            result.is_ok(),
            "seed {} failed: {:?}",
            path.display(),
            String::from_utf8_lossy(&data)
        );
        n += 1;
    }
    assert!(n >= 100, "only {n} seeds in {}", dir.display());
}
