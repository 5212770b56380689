//! Fuzzes hf-expr with arbitrary text as a match and as actions: no input may panic, and
//! whatever parses must print back to the same tree (see `hf_expr::fuzz_one`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hf_expr::fuzz_one(hf_expr::SymbolTable::shared(), data);
});
