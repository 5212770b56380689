//! Conntrack fed arbitrary packets and operations; invariants checked after each step.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hf_conntrack::fuzzing::conntrack(data);
});
