//! The incremental compiler's retention over repeated changes: a loop of VIF adds and
//! deletes, port group membership changes and ACL adds and deletes, each compiled through
//! [`Incremental`] with its result given back (as the daemon does), must leave the live heap
//! where it was. What is measured is this test binary's own heap (a counting global
//! allocator over the system one), so a state that keeps something per change (a port, a
//! shape group, an identity's rows, a diagnostic) shows as growth; the allocator's own
//! retention (RSS) is the benchmark's business (`hf-bench northd`).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Nb, generator_like};
use hf_northd::Options;
use hf_northd::incremental::Incremental;
use serde_json::json;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to the system allocator with the caller's layout; the counter
// is only arithmetic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
            LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One cycle of changes that leaves NB as it found it (but for new row UUIDs and names):
/// a VIF added to `sw1` and joined to `pg_loop`, an ACL on `pg_loop`, then all three undone.
fn cycle(nb: &mut Nb, inc: &mut Incremental, opts: &Options, k: usize) {
    let mut step = |nb: &mut Nb, f: &mut dyn FnMut(&mut Nb)| {
        nb.record = Some(Vec::new());
        f(nb);
        let deltas = nb.record.take().unwrap_or_default();
        let snap = nb.snapshot();
        let c = inc.update(&snap, Some(&deltas), opts);
        assert!(
            inc.changed().is_some() && inc.patched(),
            "cycle {k}: every change here takes the incremental fast path"
        );
        inc.restore(c.sb);
    };
    let name = format!("loop-{k}");
    let mut port = uuid::Uuid::nil();
    step(nb, &mut |nb| {
        port = nb.vif(
            "sw1",
            &name,
            &format!("0a:00:00:5e:{:02x}:{:02x} 10.0.1.200", k / 256, k % 256),
            true,
        );
    });
    step(nb, &mut |nb| {
        nb.set(
            "Port_Group",
            pg_uuid(nb),
            "ports",
            json!(["set", [["uuid", port.to_string()]]]),
        )
    });
    let mut acl = uuid::Uuid::nil();
    step(nb, &mut |nb| {
        acl = nb.acl_pg(
            "pg_loop",
            "to-lport",
            1200,
            &format!("outport == @pg_loop && tcp.dst == {}", 1000 + k % 100),
            "allow-related",
        );
    });
    step(nb, &mut |nb| {
        nb.delete("ACL", acl, Some(("Port_Group", "acls")));
    });
    step(nb, &mut |nb| {
        nb.set("Port_Group", pg_uuid(nb), "ports", json!(["set", []]))
    });
    step(nb, &mut |nb| {
        nb.delete(
            "Logical_Switch_Port",
            port,
            Some(("Logical_Switch", "ports")),
        );
    });
}

fn pg_uuid(nb: &Nb) -> uuid::Uuid {
    nb.snapshot()
        .port_group_by_name("pg_loop")
        .map(|p| p.uuid)
        .unwrap_or_default()
}

#[test]
fn repeated_changes_leave_the_incremental_state_as_large_as_it_was() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    nb.pg("pg_loop", &[]);
    let opts = Options::default();
    let mut inc = Incremental::new();
    let c = inc.update(&nb.snapshot(), None, &opts);
    inc.restore(c.sb);
    // Warm up (collections reach their working size), then measure over many cycles.
    let warm = 60;
    for k in 0..warm {
        cycle(&mut nb, &mut inc, &opts, k);
    }
    let (before, blocks_before) = (
        LIVE.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    );
    let cycles = 300;
    for k in warm..warm + cycles {
        cycle(&mut nb, &mut inc, &opts, k);
    }
    let (after, blocks_after) = (
        LIVE.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    );
    let blocks = blocks_after as i64 - blocks_before as i64;
    eprintln!(
        "over {cycles} cycles: live heap {before} → {after} bytes, live blocks \
         {blocks_before} → {blocks_after} ({blocks:+})"
    );
    // Blocks, not bytes: a hash map keyed by flow identity doubles its table once when the
    // tombstones of the identities that came and went fill it (a few hundred kB here, at a
    // moment that depends on its random hasher), which is one block before and after. Anything
    // kept per change (a port, a shape, an identity's rows, a diagnostic, a name) is at least
    // one block per cycle: 300 here.
    assert!(
        blocks < 30,
        "the incremental state keeps {blocks} more heap blocks after {cycles} cycles of \
         changes that leave NB as it was ({before} → {after} bytes)"
    );
}
