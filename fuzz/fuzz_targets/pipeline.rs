//! Random programs and packets through hf-pipeline, cached path against full walk: no panic, and
//! both paths agree on outputs and conntrack effects.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hf_pipeline::fuzzing::differential(data);
});
