//! The `txn100` profiling driver with mimalloc as the global allocator, to measure what the
//! allocator alone changes on the batched-transaction path.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "txn100.rs"]
mod txn100;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    txn100::main()
}
