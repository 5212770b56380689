//! [`SmallMap`]: how a typed row holds a map column (`external_ids`, `options`, ...).
//!
//! An OVN row's maps hold a handful of entries. A `BTreeMap` allocates a 544-byte node for
//! its first entry, so 100k `Logical_Flow` rows with three `external_ids` each held ~55 MB of
//! nodes in a controller's replica. A `SmallMap` is its entries sorted by key in one shared
//! slice (`Arc<[(K, V)]>`, none for an empty map: 16 bytes inline), with the lookups of a
//! `BTreeMap`: binary search by key, iteration in key order. A clone shares the entries, so a
//! change set that holds the same rows as the snapshot (a large update's) does not copy every
//! row's maps; a change to a shared map copies it first. Inserting or removing one entry is
//! O(n); build a map with [`FromIterator`] (later pairs win, as `BTreeMap` inserts do) instead
//! of entry by entry.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A map with few entries, sorted by key (see the module doc).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SmallMap<K, V> {
    /// Never `Some` of an empty slice, so that equal maps compare equal.
    entries: Option<Arc<[(K, V)]>>,
}

impl<K, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap { entries: None }
    }
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for SmallMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// The entries of a [`SmallMap`] by reference, in key order.
pub type Iter<'a, K, V> =
    std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

fn pair<K, V>(e: &(K, V)) -> (&K, &V) {
    (&e.0, &e.1)
}

impl<K, V> SmallMap<K, V> {
    /// An empty map (no allocation).
    pub fn new() -> Self {
        Self::default()
    }

    /// The map of `sorted` (sorted by key, no key twice).
    fn of_sorted(sorted: Vec<(K, V)>) -> Self {
        SmallMap {
            entries: (!sorted.is_empty()).then(|| sorted.into()),
        }
    }

    fn slice(&self) -> &[(K, V)] {
        self.entries.as_deref().unwrap_or(&[])
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_none()
    }

    /// The entries in key order.
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.slice().iter().map(pair as fn(&(K, V)) -> (&K, &V))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + ExactSizeIterator + Clone {
        self.slice().iter().map(|(k, _)| k)
    }

    /// The values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator + Clone {
        self.slice().iter().map(|(_, v)| v)
    }
}

impl<K: Clone, V: Clone> SmallMap<K, V> {
    /// The entries, to change (copied when the slice is shared).
    fn take_vec(&mut self) -> Vec<(K, V)> {
        self.entries.take().map(|a| a.to_vec()).unwrap_or_default()
    }

    /// Keeps the entries `f` answers true for.
    pub fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        let mut v = self.take_vec();
        v.retain_mut(|(k, val)| f(k, val));
        *self = Self::of_sorted(v);
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, k: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.slice().binary_search_by(|(x, _)| x.borrow().cmp(k))
    }

    /// The value of key `k`.
    pub fn get<Q: Ord + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(k).ok().map(|i| &self.slice()[i].1)
    }

    /// Whether key `k` is in.
    pub fn contains_key<Q: Ord + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(k).is_ok()
    }
}

impl<K: Ord + Clone, V: Clone> SmallMap<K, V> {
    /// The value of key `k`, to change (the entries are copied first when shared).
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(k).ok()?;
        let entries = Arc::make_mut(self.entries.as_mut()?);
        Some(&mut entries[i].1)
    }

    /// Sets `k` to `v`; returns the value it replaced.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => {
                let entries = Arc::make_mut(self.entries.as_mut()?);
                Some(std::mem::replace(&mut entries[i].1, v))
            }
            Err(i) => {
                let mut e = self.take_vec();
                e.insert(i, (k, v));
                *self = Self::of_sorted(e);
                None
            }
        }
    }

    /// Removes key `k`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let i = self.find(k).ok()?;
        let mut e = self.take_vec();
        let (_, v) = e.remove(i);
        *self = Self::of_sorted(e);
        Some(v)
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SmallMap<K, V> {
    /// Later pairs with an equal key replace earlier ones, as `BTreeMap`'s inserts do.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(it: I) -> Self {
        let mut v: Vec<(K, V)> = it.into_iter().collect();
        // Stable: of equal keys the last stays last, and is the one kept.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(v.len());
        for e in v {
            match out.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => out.push(e),
            }
        }
        Self::of_sorted(out)
    }
}

impl<K: Ord + Clone, V: Clone> Extend<(K, V)> for SmallMap<K, V> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, it: I) {
        let old = self.take_vec();
        *self = old.into_iter().chain(it).collect();
    }
}

impl<K: Clone, V: Clone> IntoIterator for SmallMap<K, V> {
    type Item = (K, V);
    type IntoIter = std::vec::IntoIter<(K, V)>;

    /// (The entries are copied when the slice is shared.)
    fn into_iter(mut self) -> Self::IntoIter {
        self.take_vec().into_iter()
    }
}

impl<'a, K, V> IntoIterator for &'a SmallMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Ord, V> From<BTreeMap<K, V>> for SmallMap<K, V> {
    fn from(m: BTreeMap<K, V>) -> Self {
        Self::of_sorted(m.into_iter().collect())
    }
}

impl<K: Ord, V, const N: usize> From<[(K, V); N]> for SmallMap<K, V> {
    fn from(a: [(K, V); N]) -> Self {
        a.into_iter().collect()
    }
}

impl<K: Ord + Clone, V: Clone> From<SmallMap<K, V>> for BTreeMap<K, V> {
    fn from(m: SmallMap<K, V>) -> Self {
        m.into_iter().collect()
    }
}

impl<K: Ord + Borrow<Q>, Q: Ord + ?Sized, V> std::ops::Index<&Q> for SmallMap<K, V> {
    type Output = V;

    /// The value of a key that is in (panics otherwise, as `BTreeMap`'s index does: for
    /// tests and keys known present, never for input).
    fn index(&self, k: &Q) -> &V {
        match self.get(k) {
            Some(v) => v,
            None => panic!("key not in the map"),
        }
    }
}

/// Lookups by `&str` that `SmallMap<String, String>` (a typed row's map) and
/// `BTreeMap<String, String>` share, for helpers that read options from either.
pub trait StrMap {
    /// The value of key `k`.
    fn get_str(&self, k: &str) -> Option<&str>;
}

impl StrMap for SmallMap<String, String> {
    fn get_str(&self, k: &str) -> Option<&str> {
        self.get(k).map(String::as_str)
    }
}

impl StrMap for BTreeMap<String, String> {
    fn get_str(&self, k: &str) -> Option<&str> {
        self.get(k).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `BTreeMap` over seeded random operations.
    #[test]
    fn behaves_as_a_btreemap() {
        let mut x: u64 = 7;
        let mut next = move |n: u64| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % n
        };
        for _ in 0..200 {
            let init: Vec<(u8, u32)> = (0..next(8))
                .map(|_| (next(10) as u8, next(100) as u32))
                .collect();
            let mut b: BTreeMap<u8, u32> = init.iter().copied().collect();
            let mut s: SmallMap<u8, u32> = init.iter().copied().collect();
            // A clone taken now and then: changes to `s` never show in it.
            let (mut kept, mut kept_b) = (s.clone(), b.clone());
            for _ in 0..30 {
                let k = next(10) as u8;
                if next(4) == 0 {
                    (kept, kept_b) = (s.clone(), b.clone());
                }
                match next(6) {
                    0 => {
                        let v = next(100) as u32;
                        assert_eq!(s.insert(k, v), b.insert(k, v));
                    }
                    1 => assert_eq!(s.remove(&k), b.remove(&k)),
                    2 => {
                        s.retain(|k, v| !(*k as u32 + *v).is_multiple_of(3));
                        b.retain(|k, v| !(*k as u32 + *v).is_multiple_of(3));
                    }
                    3 => {
                        let more = [(k, 1), (k.wrapping_add(1), 2), (k, 3)];
                        s.extend(more);
                        b.extend(more);
                    }
                    4 => {
                        let v = next(100) as u32;
                        if let Some(x) = s.get_mut(&k) {
                            *x = v;
                        }
                        if let Some(x) = b.get_mut(&k) {
                            *x = v;
                        }
                    }
                    _ => assert_eq!(s.get(&k), b.get(&k)),
                }
                assert!(
                    kept.iter().eq(kept_b.iter()),
                    "a clone changed with the map"
                );
                assert_eq!(s.len(), b.len());
                assert_eq!(s.is_empty(), b.is_empty());
                assert!(s.iter().eq(b.iter()));
                assert_eq!(format!("{s:?}"), format!("{b:?}"));
                assert_eq!(SmallMap::from(b.clone()), s);
            }
        }
    }

    /// A clone shares the entries (a row cloned into a change set copies no map), and an
    /// emptied map is the empty map (equal, and holding nothing).
    #[test]
    fn a_clone_shares_its_entries() {
        let m: SmallMap<String, String> = [("a".to_string(), "1".to_string())].into();
        let c = m.clone();
        let (Some(x), Some(y)) = (&m.entries, &c.entries) else {
            panic!("a map with an entry holds a slice");
        };
        assert!(Arc::ptr_eq(x, y));
        let mut e = m.clone();
        assert_eq!(e.remove("a").as_deref(), Some("1"));
        assert!(e.entries.is_none());
        assert_eq!(e, SmallMap::new());
        assert_eq!(m.len(), 1);
    }
}
