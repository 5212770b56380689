//! Fuzzes `holdfast trace`'s microflow parser and frame builder: no input may panic, errors
//! carry a caret, accepted microflows build frames that parse back (see
//! `hf_trace::fuzzing::microflow`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hf_trace::fuzzing::microflow(data);
});
