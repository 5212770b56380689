//! How many threads a translation may use ([`Parallelism`]), and the two ways it uses them:
//! mapping a slice to results in the slice's order ([`map`]), and changing every element of
//! a slice in place ([`for_each_mut`]).
//!
//! # What it does
//!
//! Work is cut into contiguous blocks that the threads take in turn (`std::thread::scope`);
//! the results are put back in the input's order, so what comes out does not depend on the
//! number of threads or on which thread ran which block: a translation with any
//! [`Parallelism`] equals the sequential one exactly (the tests in `par_tests` check it over
//! seeded random SBs).
//!
//! # What it does not do
//!
//! No pool: threads live for one call (a cold start or a full pass, where a spawn is
//! nothing beside the work). It does not decide how many threads to use: the caller's shell
//! does (the controller daemon: the available cores); the default is the calling thread only.
//! Small inputs run on the calling thread.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The threads a translation may use (the calling thread included). `Parallelism::default()`
/// (and `Parallelism::threads(0 or 1)`) runs everything on the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Parallelism(usize);

impl Default for Parallelism {
    fn default() -> Self {
        Parallelism(1)
    }
}

impl Parallelism {
    /// Everything on the calling thread.
    pub const SEQUENTIAL: Parallelism = Parallelism(1);

    /// Up to `n` threads (0 counts as 1).
    pub fn threads(n: usize) -> Parallelism {
        Parallelism(n.max(1))
    }

    /// The number of threads.
    pub fn get(self) -> usize {
        self.0
    }
}

/// Inputs shorter than this run on the calling thread (tests: every input, so that their
/// small SBs are cut into many blocks).
#[cfg(not(test))]
const MIN_PARALLEL: usize = 64;
#[cfg(test)]
const MIN_PARALLEL: usize = 1;
/// The smallest block.
#[cfg(not(test))]
const MIN_BLOCK: usize = 16;
#[cfg(test)]
const MIN_BLOCK: usize = 1;

/// The block size for `len` items over `threads` threads: several blocks per thread, so that
/// uneven blocks (a datapath with many more ports, rows that parse slowly) even out.
fn block(len: usize, threads: usize) -> usize {
    (len / (threads * 8)).clamp(MIN_BLOCK, 4096)
}

/// `items.iter().map(f).collect()`, on up to `par` threads; the results in `items`' order.
pub(crate) fn map<T, R, F>(par: Parallelism, items: &[T], f: F) -> Vec<R>
where
    T: Sync,
    R: Send,
    F: Fn(&T) -> R + Sync,
{
    let threads = par.get().min(items.len().div_ceil(MIN_PARALLEL));
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let size = block(items.len(), threads);
    let blocks = items.len().div_ceil(size);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<R>)> = Vec::new();
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            if b >= blocks {
                return done;
            }
            let end = ((b + 1) * size).min(items.len());
            done.push((b, items[b * size..end].iter().map(&f).collect()));
        }
    };
    let mut parts: Vec<(usize, Vec<R>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut parts = work();
        for h in handles {
            match h.join() {
                Ok(p) => parts.extend(p),
                // A panic in `f` on another thread is `f`'s panic here.
                Err(e) => std::panic::resume_unwind(e),
            }
        }
        parts
    });
    parts.sort_unstable_by_key(|(b, _)| *b);
    let mut out = Vec::with_capacity(items.len());
    for (_, p) in parts {
        out.extend(p);
    }
    out
}

/// `items.iter_mut().for_each(f)` on up to `par` threads (each element is changed by exactly
/// one thread, so the result does not depend on the order).
pub(crate) fn for_each_mut<T, F>(par: Parallelism, items: &mut [T], f: F)
where
    T: Send,
    F: Fn(&mut T) + Sync,
{
    let threads = par.get().min(items.len());
    if threads <= 1 {
        items.iter_mut().for_each(f);
        return;
    }
    // Blocks handed out in turn, as in `map`.
    let size = items.len().div_ceil(threads * 8).max(1);
    let blocks: Vec<&mut [T]> = items.chunks_mut(size).collect();
    let queue = std::sync::Mutex::new(blocks);
    let work = || {
        loop {
            let b = match queue.lock() {
                Ok(mut q) => q.pop(),
                Err(e) => e.into_inner().pop(),
            };
            let Some(b) = b else {
                return;
            };
            b.iter_mut().for_each(&f);
        }
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        work();
        for h in handles {
            if let Err(e) = h.join() {
                std::panic::resume_unwind(e);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_the_order_whatever_the_threads() {
        let items: Vec<u64> = (0..10_007).collect();
        let want: Vec<u64> = items.iter().map(|x| x * x + 1).collect();
        for t in [1, 2, 3, 8] {
            assert_eq!(map(Parallelism::threads(t), &items, |x| x * x + 1), want);
        }
        assert!(map(Parallelism::threads(4), &[] as &[u64], |x| *x).is_empty());
    }

    #[test]
    fn for_each_mut_changes_every_element_once() {
        for t in [1, 2, 5] {
            let mut v: Vec<u64> = (0..1_001).collect();
            for_each_mut(Parallelism::threads(t), &mut v, |x| *x += 7);
            assert_eq!(v, (7..1_008).collect::<Vec<u64>>());
        }
    }
}
