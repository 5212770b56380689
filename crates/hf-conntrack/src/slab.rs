//! Entry storage that grows in fixed chunks: growing never copies entries (a `Vec` would move
//! hundreds of megabytes at a million connections) and never leaves more than one chunk unused.

use std::ops::{Index, IndexMut};

use crate::table::Entry;

const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Entries addressed by `u32` slot numbers.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    chunks: Vec<Vec<Entry>>,
    len: usize,
}

impl Slab {
    /// Slots ever used (live or free).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Appends an entry in a new slot.
    pub fn push(&mut self, e: Entry) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(c) = self.chunks.last_mut() {
            c.push(e);
            self.len += 1;
        }
    }

    /// Every slot in order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.chunks.iter().flatten()
    }
}

impl Index<usize> for Slab {
    type Output = Entry;
    // Always inlined: an out-of-line call per packet (the hot path's entry access) cost more
    // than the two loads it makes.
    #[inline(always)]
    fn index(&self, i: usize) -> &Entry {
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }
}

impl IndexMut<usize> for Slab {
    #[inline(always)]
    fn index_mut(&mut self, i: usize) -> &mut Entry {
        &mut self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }
}
