//! JSON-RPC framing and every OVSDB method (transactions in particular) on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    hf_ovsdb_net::fuzzing::rpc_stream(data);
});
