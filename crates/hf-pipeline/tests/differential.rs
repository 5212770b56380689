//! The judge of the flow cache: for random programs and packets, the cached path (running a
//! program a recompile changed in place) and the full walk (a fresh compile) give the same
//! output frames and the same conntrack effects
//! ([`hf_pipeline::fuzzing::differential`] runs both and compares after every packet), and the
//! fuzz target's committed corpus replays without a panic.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cached_path_equals_full_walk(data in proptest::collection::vec(any::<u8>(), 40..600)) {
        hf_pipeline::fuzzing::differential(&data);
    }
}

/// The differential check has teeth: over many seeds the random programs do forward, recirculate
/// and hit the cache, find continuations through hints and refuse hints that do not match (a
/// generator that only dropped would make the property vacuous).
#[test]
fn random_programs_exercise_the_cache() {
    let mut stats = hf_pipeline::fuzzing::Coverage::default();
    let mut seed = 0x1234_5678_u64;
    for _ in 0..300 {
        let data: Vec<u8> = (0..400)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        stats.add(&hf_pipeline::fuzzing::differential_with_coverage(&data));
    }
    eprintln!("{stats:?}");
    assert!(stats.outputs > 100, "{stats:?}");
    assert!(stats.cache_hits > 100, "{stats:?}");
    assert!(stats.recirculations > 50, "{stats:?}");
    // Continuations found through hints, and hints refused (the case a hint trusted blindly
    // would get wrong).
    assert!(stats.chained > 1000, "{stats:?}");
    assert!(stats.hint_refused > 100, "{stats:?}");
    // First segments found through their resume point's hint (the flat path's first step), and
    // programs swapped (a port removed) under the cache, after every connection expired.
    assert!(stats.first_hinted > 1000, "{stats:?}");
    assert!(stats.swapped > 100, "{stats:?}");
    assert!(stats.connections > 10, "{stats:?}");
    assert!(stats.learned > 10, "{stats:?}");
    assert!(stats.counted > 10, "{stats:?}");
    // The cached side's programs were changed in place (not compiled whole).
    assert!(stats.patched > 100, "{stats:?}");
}

#[test]
fn replay_fuzz_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pipeline");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let data = std::fs::read(&path).expect("read seed");
        let r = std::panic::catch_unwind(|| hf_pipeline::fuzzing::differential(&data));
        assert!(r.is_ok(), "seed {} panicked", path.display());
        n += 1;
    }
    assert!(n >= 50, "only {n} seeds in {}", dir.display());
}

/// Writes the seed corpus for the `pipeline` fuzz target. Run by hand when the generator changes:
/// `cargo test -p hf-pipeline --test differential write_corpus -- --ignored`.
#[test]
#[ignore = "writes fuzz/corpus/pipeline; run by hand when the seeds change"]
fn write_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pipeline");
    std::fs::create_dir_all(&dir).expect("corpus dir");
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..64 {
        let len = 40 + (i * 37) % 500;
        let data: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        std::fs::write(dir.join(format!("seed-{i:02}")), &data).expect("write seed");
    }
}

/// A case the property found: a flood whose egress logs, recirculates (`ct_next`) and meters
/// each copy. The meter refusing the first copy stops the packet; the cached replay went on to
/// the next copy (one ACL log line and one `set_meter` hit more than the full walk).
#[test]
fn set_meter_counted_once_per_packet() {
    let data = [
        0u8, 75, 0, 0, 1, 0, 0, 1, 238, 1, 4, 157, 1, 57, 0, 0, 0, 134, 0, 0, 0, 0, 0, 0, 0, 58,
        71, 110, 0, 0, 196, 4, 5, 0, 0, 0, 0, 0, 0, 1, 0, 29, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 55, 0, 0, 0,
        0, 5, 0, 0, 2, 0, 2, 0, 30, 0, 32, 0, 74, 0, 0, 0, 103, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 14,
    ];
    let mut data = data.to_vec();
    data.resize(186, 0);
    hf_pipeline::fuzzing::differential(&data);
}
