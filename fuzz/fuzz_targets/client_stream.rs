//! The client replica's session core on arbitrary server bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hf_ovsdb_net::fuzzing::client_stream(data);
});
