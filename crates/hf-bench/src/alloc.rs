//! A counting global allocator: live heap bytes, their peak and the number of allocation calls,
//! so suites can report heap growth (conntrack's bytes per entry, the client replica's initial
//! sync) and allocation rates without an external profiler. Counting costs a few relaxed atomic
//! operations per allocation.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The allocator: mimalloc (what the `holdfast` binary uses) plus counters.
#[derive(Debug)]
pub struct Counting;

/// Bytes currently allocated through the global allocator.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// The largest `LIVE` since the last [`reset_peak`].
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Allocation calls (alloc, alloc_zeroed, realloc) so far.
static CALLS: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every method forwards to `MiMalloc` with the caller's arguments unchanged, so the
// `GlobalAlloc` contract is `MiMalloc`'s; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

/// Bytes currently allocated.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Allocation calls made so far (a per-packet path that allocates shows up as a rate).
pub fn allocations() -> usize {
    CALLS.load(Ordering::Relaxed)
}

/// Reset the peak to the current live size; returns it.
pub fn reset_peak() -> usize {
    let l = live_bytes();
    PEAK.store(l, Ordering::Relaxed);
    l
}

/// The peak of live heap bytes since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Raises the peak to at least `v` (a nested measurement puts back the outer one's peak).
pub fn raise_peak(v: usize) {
    PEAK.fetch_max(v, Ordering::Relaxed);
}
