//! An append-only vector in fixed-size `Arc`-shared segments: what a program's action and flow
//! arenas are, so that [`crate::Program::recompile`] copies a pointer per segment instead of
//! every entry, and appending clones at most the last, partly filled segment.

use std::ops::Index;
use std::sync::Arc;

const SHIFT: usize = 10;
const SEG: usize = 1 << SHIFT;

#[derive(Debug)]
pub(crate) struct Arena<T> {
    segs: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena {
            segs: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Clone for Arena<T> {
    fn clone(&self) -> Self {
        Arena {
            segs: self.segs.clone(),
            len: self.len,
        }
    }
}

impl<T: Clone> Arena<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.segs.get(i >> SHIFT)?.get(i & (SEG - 1))
    }

    pub(crate) fn push(&mut self, v: T) {
        if self.len & (SEG - 1) == 0 {
            self.segs.push(Arc::new(Vec::with_capacity(SEG)));
        }
        if let Some(last) = self.segs.last_mut() {
            // A last segment shared with an older program is copied once, at its full
            // capacity (a copy of only its length would grow again at the next push).
            if Arc::get_mut(last).is_none() {
                let mut own = Vec::with_capacity(SEG);
                own.extend_from_slice(last);
                *last = Arc::new(own);
            }
            if let Some(seg) = Arc::get_mut(last) {
                seg.push(v);
                self.len += 1;
            }
        }
    }

    pub(crate) fn extend(&mut self, it: impl IntoIterator<Item = T>) {
        for v in it {
            self.push(v);
        }
    }
}

impl<T: Clone> Index<usize> for Arena<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        match self.get(i) {
            Some(v) => v,
            None => panic!("arena index {i} out of range (len {})", self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_shared_clones() {
        let mut a: Arena<u32> = Arena::default();
        a.extend(0..(SEG as u32 * 2 + 5));
        let b = a.clone();
        assert!(Arc::ptr_eq(&a.segs[0], &b.segs[0]));
        // Appending clones only the last, partly filled segment, at its full capacity.
        a.push(7);
        assert_eq!(a.segs[2].capacity(), SEG);
        assert_eq!(a[SEG * 2 + 5], 7);
        assert!(Arc::ptr_eq(&a.segs[1], &b.segs[1]));
        assert!(!Arc::ptr_eq(&a.segs[2], &b.segs[2]));
        // The clone is unchanged.
        assert_eq!(b.len(), SEG * 2 + 5);
        assert_eq!(b.get(SEG * 2 + 5), None);
        assert_eq!(b[SEG + 3], SEG as u32 + 3);
    }
}
