//! A translation on several threads against the sequential one, over the seeded random SBs
//! and changes of the incremental tests: the same [`Translation`] and a byte-equal program
//! frame, with and without a cache, and through [`Incremental`]'s full passes.

use std::collections::BTreeMap;

use hf_datapath::proto::{self, ToDatapath};

use super::{hv1, mutate, norm, start};
use crate::program_msg::{NoLastGood, program_msg};
use crate::translate::test_rng::Rng;
use crate::translate::{
    Extra, Incremental, Parallelism, TranslateCache, TranslateOptions, Translation,
    translate_cached, translate_par, translate_with,
};

/// The program frame a controller would push for `t`.
fn frame(t: &Translation) -> Vec<u8> {
    let m = program_msg(t, "hv1", 1, 0, &BTreeMap::new(), &NoLastGood).msg;
    proto::encode(&ToDatapath::Program(Box::new(m))).unwrap()
}

/// Runs `steps` random change sets; the first step (and how) where a parallel translation
/// differs from the sequential one.
fn first_difference(
    seed: u64,
    steps: usize,
    opts: &TranslateOptions,
    needed: bool,
) -> Option<String> {
    let mut r = Rng(seed);
    let mut s = start(&mut r);
    let mut next: u128 = 50_000;
    let threads = [2, 3, 7];
    let mut caches: Vec<TranslateCache> = threads
        .iter()
        .map(|&n| {
            let mut c = TranslateCache::new();
            c.set_parallelism(Parallelism::threads(n));
            c
        })
        .collect();
    let mut inc = Incremental::new();
    inc.set_parallelism(Parallelism::threads(3));
    for step in 0..steps {
        let extra = Extra {
            only_needed: needed,
            zones: BTreeMap::new(),
            local_ids: Default::default(),
            ha_up: None,
        };
        let want = translate_with(&s, opts, &extra);
        let (want_text, want_frame) = (norm(&want), frame(&want));
        for (&n, cache) in threads.iter().zip(&mut caches) {
            let got = translate_par(&s, opts, &extra, Parallelism::threads(n));
            if norm(&got) != want_text || frame(&got) != want_frame {
                return Some(format!("step {step}: translate_par on {n} threads"));
            }
            let got = translate_cached(&s, opts, &extra, cache);
            if norm(&got) != want_text || frame(&got) != want_frame {
                return Some(format!("step {step}: translate_cached on {n} threads"));
            }
            cache.recycle(got);
        }
        // Every fourth step a full pass of the incremental translator.
        if step % 4 == 0 {
            inc.everything();
        }
        let got = inc.translate(&s, opts, &extra);
        if norm(&got) != want_text || frame(&got) != want_frame {
            return Some(format!("step {step}: Incremental on 3 threads"));
        }
        inc.recycle(got);
        for _ in 0..1 + r.below(3) {
            let d = mutate(&mut r, &s, &mut next);
            s.apply(&d);
            inc.changed(&d);
        }
    }
    None
}

#[test]
fn a_parallel_translation_equals_the_sequential_one() {
    for seed in 1..=4 {
        assert_eq!(
            first_difference(seed, 40, &hv1(), true),
            None,
            "seed {seed}"
        );
    }
    for seed in 11..=12 {
        assert_eq!(
            first_difference(seed, 30, &hv1(), false),
            None,
            "seed {seed}"
        );
        let none = TranslateOptions::default();
        assert_eq!(
            first_difference(seed, 30, &none, false),
            None,
            "seed {seed}"
        );
    }
}
