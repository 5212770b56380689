//! Frame parsing, NAT rewrites, reply builders and Geneve decapsulation on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hf_wire::fuzzing::wire(data);
});
