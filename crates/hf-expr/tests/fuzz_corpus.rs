//! Replays the committed fuzz corpus (`fuzz/corpus/expr/`) through the same entry point the
//! cargo-fuzz target calls, so CI on stable checks that no seed panics.

use std::path::Path;

#[test]
fn replay_fuzz_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/expr");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let data = std::fs::read(&path).expect("read seed");
        let result =
            std::panic::catch_unwind(|| hf_expr::fuzz_one(hf_expr::SymbolTable::shared(), &data));
        assert!(
            result.is_ok(),
            "seed {} panicked: {:?}",
            path.display(),
            String::from_utf8_lossy(&data)
        );
        n += 1;
    }
    assert!(n >= 100, "only {n} seeds in {}", dir.display());
}
