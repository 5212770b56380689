//! hf-model's tests: one binary, a module per concern.

mod model {
    mod consistency;
    mod errors;
    mod lookups;
    mod roundtrip;
    pub mod values;
}
