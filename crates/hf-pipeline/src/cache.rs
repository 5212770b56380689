//! The megaflow cache: per resume point, a tuple-space table of (mask, masked context) → the ops a
//! walk performed. A walk's wildcards say which bits of the segment's start context its result
//! depended on; every packet that agrees on those bits gets the same ops (conntrack still runs on
//! each packet, and each recirculation is its own lookup). Entries carry the program generation
//! they were made under; an entry from an older generation is a miss (the walk that follows
//! overwrites it in place).
//!
//! Ops live in one append-only arena and entries point at a range of it, so a replay reads ops by
//! index without holding a borrow (or a reference count) while nested recirculations install new
//! entries. Clearing is deferred to [`Cache::maintain`], called between packets, so an index never
//! dangles during a replay. A plain field write enters the arena as its own copy
//! (`Op::SetConst`, in a flat table beside the arena), so most of a replay reads no program
//! action.
//!
//! # One lookup per packet, not per recirculation
//!
//! Each recirculating conntrack op in the arena owns a *hint* slot: the entry (mask table, index)
//! its continuation was last found in. A replayed continuation first checks that entry against
//! the context after conntrack (its masked values and its generation, the same test a hashed
//! lookup ends with, but no hash and no table walk); only when it does not match is the
//! continuation looked up, and the hint is pointed at what that lookup found. Any current entry
//! of the resume point whose masked values equal the context's is a correct answer (every
//! context an entry covers gets the same ops), so a hint that went stale (a mask table moved by
//! the busiest-first reordering, an entry overwritten in place) can only miss, never answer
//! wrongly. In the established-traffic case (one connection state, many connections) the
//! continuation is found through the hint every time: one hashed lookup per packet per chassis.

use crate::arena::Arena;
use crate::classifier::{IdMap, mix};
use crate::interp::{NO_RESUME, Op};
use crate::packet::NF;
use crate::program::CAct;

/// Odd per-slot multipliers for [`MaskTable::hash`] (splitmix64 of the slot number, forced odd).
const SLOT_KEYS: [u64; NF] = {
    let mut k = [0u64; NF];
    let mut i = 0;
    while i < NF {
        let mut z = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        k[i] = (z ^ (z >> 31)) | 1;
        i += 1;
    }
    k
};

/// Entries at which the cache starts over (OVS's datapath flow limit, in spirit).
pub(crate) const MAX_ENTRIES: usize = 200_000;
/// Arena size (ops, including those of replaced entries) at which the cache starts over.
pub(crate) const MAX_OPS: usize = 1 << 23;

/// One megaflow. Its masked values live in its table's flat `values` (at `index * fields`), so
/// a probe reads the table's arrays and no per-entry allocation.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// The next entry with the same hash ([`NIL`] ends the chain).
    next: u32,
    start: u32,
    len: u32,
    generation: u64,
}

/// A plain field write as [`Op::SetConst`] replays it.
#[derive(Debug, Clone, Copy)]
struct SetConst {
    value: u128,
    mask: u128,
    field: u8,
}

/// "No entry" in [`Entry::next`] and in a hint.
const NIL: u32 = u32::MAX;

/// "No hint slot": what a recorded (not yet cached) conntrack op carries.
pub(crate) const NO_HINT: u32 = u32::MAX;

/// The hint of a run's first segment: its resume point's own slot ([`Dpcls::first`]).
pub(crate) const FIRST_HINT: u32 = u32::MAX - 1;

/// Masked fields a [`Hint`] copies inline (a key with more, or with a field wider than 64
/// bits, is referred to instead).
const HINT_FIELDS: usize = 4;

/// `Hint::n` of a hint that refers to its entry (mask table, index) instead of copying it.
const HINT_REF: u8 = u8::MAX;

/// Where a segment's entry was last found, for the next packet to try first: a recirculating
/// op's continuation (one slot per such op in the arena), or a resume point's first segment
/// ([`Dpcls::first`]). It is a *copy* of the entry (its generation, its masked fields and
/// values, its ops' range), so trying it reads this record and the context only: no mask table,
/// no entry array, no values array (a chain of dependent loads). The copy is exactly the entry's
/// own test: a current-generation entry whose masked values equal the context's is a correct
/// answer, and the ops an entry named under the current generation stay in the arena (only a
/// clear, which drops the hints too, removes them). A key with more than [`HINT_FIELDS`]
/// fields, or one wider than 64 bits, is referred to by (mask table, entry) as before
/// ([`HINT_REF`]).
#[derive(Debug, Clone, Copy)]
struct Hint {
    generation: u64,
    start: u32,
    len: u32,
    /// The entry (mask table, index) the hint was taken from; [`NIL`] when never.
    mask: u32,
    entry: u32,
    /// Fields copied into `fields`/`keys`, or [`HINT_REF`].
    n: u8,
    fields: [u8; HINT_FIELDS],
    /// (mask, masked value) of each copied field's low 64 bits.
    keys: [(u64, u64); HINT_FIELDS],
}

impl Hint {
    const NONE: Hint = Hint {
        generation: 0,
        start: 0,
        len: 0,
        mask: NIL,
        entry: NIL,
        n: HINT_REF,
        fields: [0; HINT_FIELDS],
        keys: [(0, 0); HINT_FIELDS],
    };

    /// A hint for entry `entry` of mask table `mask` (`m`), copied when its key fits.
    fn of(m: &MaskTable, mask: usize, entry: usize, e: &Entry) -> Hint {
        let mut h = Hint {
            generation: e.generation,
            start: e.start,
            len: e.len,
            mask: mask as u32,
            entry: entry as u32,
            ..Hint::NONE
        };
        let n = m.keyed.len();
        let Some(vals) = m.values.get(entry * n..entry * n + n) else {
            return h;
        };
        if n > HINT_FIELDS || m.keyed.iter().any(|k| k.hi != 0) {
            return h;
        }
        for (i, (k, &v)) in m.keyed.iter().zip(vals).enumerate() {
            h.fields[i] = k.field as u8;
            h.keys[i] = (k.lo, v as u64);
        }
        h.n = n as u8;
        h
    }

    /// Whether the copied entry covers `f` under `generation` (never for a referring hint).
    #[inline(always)]
    fn covers(&self, f: &[u128; NF], generation: u64) -> bool {
        if self.generation != generation || self.n > HINT_FIELDS as u8 {
            return false;
        }
        let n = usize::from(self.n);
        self.fields[..n]
            .iter()
            .zip(&self.keys[..n])
            .all(|(&field, &(mask, value))| {
                (f.get(usize::from(field)).copied().unwrap_or(0) as u64) & mask == value
            })
    }
}

/// One masked field of a [`MaskTable`], in the form the per-packet path reads it.
#[derive(Debug, Clone, Copy)]
struct Keyed {
    field: usize,
    /// The mask's low and high 64 bits.
    lo: u64,
    hi: u64,
    /// The slot's [`SLOT_KEYS`] multiplier.
    key: u64,
}

/// The low and high 64 bits of `f[field]` and'ed with `k`'s mask, read as two 64-bit words: the
/// slots were just written as two 64-bit stores, and a 128-bit load of them cannot be forwarded
/// from the store buffer (it waits for both stores to retire).
#[inline(always)]
fn masked(f: &[u128; NF], k: &Keyed) -> (u64, u64) {
    let v = f.get(k.field).copied().unwrap_or(0);
    ((v as u64) & k.lo, ((v >> 64) as u64) & k.hi)
}

#[derive(Debug)]
struct MaskTable {
    fields: Box<[(u8, u128)]>,
    /// `fields` with each slot's [`SLOT_KEYS`] multiplier looked up once, for [`MaskTable::hash`].
    keyed: Box<[Keyed]>,
    /// Hash → first entry of its chain.
    map: IdMap<u32>,
    entries: Vec<Entry>,
    /// Entry `i`'s masked values at `i * fields.len()`.
    values: Vec<u128>,
    hits: u64,
}

impl MaskTable {
    fn new(fields: Box<[(u8, u128)]>) -> MaskTable {
        let keyed = fields
            .iter()
            .map(|&(field, mask)| Keyed {
                field: usize::from(field),
                lo: mask as u64,
                hi: (mask >> 64) as u64,
                key: SLOT_KEYS[usize::from(field) % NF],
            })
            .collect();
        MaskTable {
            fields,
            keyed,
            map: IdMap::default(),
            entries: Vec::new(),
            values: Vec::new(),
            hits: 0,
        }
    }

    /// Whether entry `i`'s masked values are `f`'s.
    #[inline(always)]
    fn matches(&self, i: usize, f: &[u128; NF]) -> bool {
        let n = self.keyed.len();
        let Some(vals) = self.values.get(i * n..i * n + n) else {
            return false;
        };
        self.keyed.iter().zip(vals).all(|(k, &v)| {
            let (lo, hi) = masked(f, k);
            (lo ^ v as u64) | (hi ^ (v >> 64) as u64) == 0
        })
    }

    /// The entry `f` falls into, if any. A table with one entry is compared without hashing
    /// (a packet whose masked values equal the entry's has its hash; one that does not misses
    /// either way).
    #[inline]
    fn find(&self, f: &[u128; NF]) -> Option<usize> {
        if self.entries.len() == 1 {
            return self.matches(0, f).then_some(0);
        }
        let mut i = *self.map.get(&self.hash(f))?;
        while i != NIL {
            if self.matches(i as usize, f) {
                return Some(i as usize);
            }
            i = self.entries.get(i as usize)?.next;
        }
        None
    }

    /// Sum of per-field products with per-slot odd constants, then one mix: the products do not
    /// depend on each other, so the CPU overlaps them (a serial mix chain is latency-bound).
    #[inline]
    fn hash(&self, f: &[u128; NF]) -> u64 {
        let mut acc = 0u64;
        for k in self.keyed.iter() {
            let (lo, hi) = masked(f, k);
            let x = lo ^ hi.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
            acc = acc.wrapping_add(x.wrapping_mul(k.key));
        }
        mix(0x9ae1_6a3b_2f90_404f, u128::from(acc))
    }
}

#[derive(Debug)]
struct Dpcls {
    masks: Vec<MaskTable>,
    /// Where the resume point's first segment (a run's [`FIRST_HINT`] lookup) was last found.
    first: Hint,
}

impl Default for Dpcls {
    fn default() -> Dpcls {
        Dpcls {
            masks: Vec::new(),
            first: Hint::NONE,
        }
    }
}

/// The cache.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    /// Indexed by resume point (datapath << 9 | pipeline << 8 | table).
    by_resume: Vec<Dpcls>,
    entries: usize,
    arena: Vec<Op>,
    /// One slot per recirculating op in `arena` (see the module documentation).
    hints: Vec<Hint>,
    /// The (field, value, mask) of each [`Op::SetConst`] in `arena`: a replay's plain field
    /// writes read them here, one flat table, instead of from the program's segmented arena.
    consts: Vec<SetConst>,
    clear_pending: bool,
    stats: CacheStats,
}

/// How the cache's lookups went: what `hf-bench` reports per frame and the tests bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Hashed lookups: a segment whose entry was not found through its hint (a first segment
    /// or a continuation whose hint missed).
    pub lookups: u64,
    /// Hash tables probed by those lookups (mask tables of the megaflow layer).
    pub probes: u64,
    /// Continuations after a conntrack recirculation found through the recirculating op's hint:
    /// one entry compared, no hash, no probe.
    pub chained: u64,
    /// Hints tried whose entry did not cover the context (a hashed lookup followed).
    pub hint_refused: u64,
    /// First segments of a run found through their resume point's hint (the entry the last
    /// first segment there was found in): one copied entry compared, no hash, no probe.
    pub first_hinted: u64,
}

impl Cache {
    /// The ops for the segment at `resume` given the context `f`, if a current entry covers it.
    /// `hint` is the hint slot of the recirculating op this segment continues, [`FIRST_HINT`]
    /// for the first segment of a run (the resume point's own slot), or [`NO_HINT`]: the entry
    /// it names is tried first, and it is pointed at what a hashed lookup finds.
    #[inline(always)]
    pub(crate) fn lookup(
        &mut self,
        resume: u32,
        f: &[u128; NF],
        generation: u64,
        hint: u32,
    ) -> Option<(u32, u32)> {
        // The copy: one record and the context, inline in the replay loop (the established
        // flow's every lookup); anything else out of line.
        let d = self.by_resume.get(resume as usize)?;
        let h = if hint == FIRST_HINT {
            Some(&d.first)
        } else {
            self.hints.get(hint as usize)
        };
        if let Some(h) = h
            && h.covers(f, generation)
        {
            if hint == FIRST_HINT {
                self.stats.first_hinted += 1;
            } else {
                self.stats.chained += 1;
            }
            return Some((h.start, h.len));
        }
        self.lookup_slow(resume, f, generation, hint)
    }

    /// [`Cache::lookup`] when the hint's copy does not cover `f`: a referring hint's entry,
    /// then the hashed lookup.
    #[inline(never)]
    fn lookup_slow(
        &mut self,
        resume: u32,
        f: &[u128; NF],
        generation: u64,
        hint: u32,
    ) -> Option<(u32, u32)> {
        let d = self.by_resume.get_mut(resume as usize)?;
        let h = if hint == FIRST_HINT {
            Some(&d.first)
        } else {
            self.hints.get(hint as usize)
        };
        if let Some(h) = h {
            // A referring hint: the entry itself.
            if h.n == HINT_REF
                && let Some(m) = d.masks.get_mut(h.mask as usize)
                && let Some(e) = m.entries.get(h.entry as usize).copied()
                && e.generation == generation
                && m.matches(h.entry as usize, f)
            {
                if hint == FIRST_HINT {
                    self.stats.first_hinted += 1;
                } else {
                    self.stats.chained += 1;
                }
                m.hits += 1;
                return Some((e.start, e.len));
            }
            if h.entry != NIL {
                self.stats.hint_refused += 1;
            }
        }
        self.stats.lookups += 1;
        for i in 0..d.masks.len() {
            self.stats.probes += 1;
            let m = &mut d.masks[i];
            let Some(j) = m.find(f) else {
                continue;
            };
            let e = m.entries[j];
            if e.generation != generation {
                // Made under an older program or neighbour table: never replayed (the next
                // insert of these values overwrites it), and another mask may still hold a
                // current entry.
                continue;
            }
            m.hits += 1;
            let fresh = Hint::of(m, i, j, &e);
            // Keep the busiest masks first, as OVS's dpcls does.
            let mut at = i;
            if i > 0 && d.masks[i].hits > d.masks[i - 1].hits.saturating_mul(2) {
                d.masks.swap(i, i - 1);
                at = i - 1;
            }
            let fresh = Hint {
                mask: at as u32,
                ..fresh
            };
            if hint == FIRST_HINT {
                d.first = fresh;
            } else if let Some(h) = self.hints.get_mut(hint as usize) {
                *h = fresh;
            }
            return Some((e.start, e.len));
        }
        None
    }

    /// Installs the ops of a walk from `start` whose decisions examined `wc`.
    pub(crate) fn insert(
        &mut self,
        resume: u32,
        wc: &[u128; NF],
        start: &[u128; NF],
        ops: &[Op],
        generation: u64,
        acts: &Arena<CAct>,
    ) {
        if self.entries >= MAX_ENTRIES || self.arena.len() >= MAX_OPS {
            self.clear_pending = true;
        }
        let (Ok(at), Ok(len)) = (u32::try_from(self.arena.len()), u32::try_from(ops.len())) else {
            return;
        };
        // Each recirculating op gets its hint slot as it enters the arena, and each plain
        // field write its copy of the write.
        let (hints, consts) = (&mut self.hints, &mut self.consts);
        self.arena.extend(ops.iter().map(|&op| match op {
            Op::Act(i) => match (acts.get(i as usize), u32::try_from(consts.len())) {
                (Some(&CAct::Set { field, value, mask }), Ok(j)) => {
                    consts.push(SetConst { value, mask, field });
                    Op::SetConst(j)
                }
                _ => op,
            },
            Op::Ct {
                zone,
                act,
                resume,
                hint: _,
                lookup_only,
            } if resume != NO_RESUME => {
                let hint = u32::try_from(hints.len()).unwrap_or(NO_HINT);
                hints.push(Hint::NONE);
                Op::Ct {
                    zone,
                    act,
                    resume,
                    hint,
                    lookup_only,
                }
            }
            op => op,
        }));
        let fields: Box<[(u8, u128)]> = wc
            .iter()
            .enumerate()
            .filter(|(_, m)| **m != 0)
            .map(|(i, m)| (i as u8, *m))
            .collect();
        let i = resume as usize;
        if self.by_resume.len() <= i {
            self.by_resume.resize_with(i + 1, Dpcls::default);
        }
        let d = &mut self.by_resume[i];
        let mi = match d.masks.iter().position(|m| m.fields == fields) {
            Some(i) => i,
            None => {
                d.masks.push(MaskTable::new(fields));
                d.masks.len() - 1
            }
        };
        let m = &mut d.masks[mi];
        let found = m.find(start);
        match found {
            Some(j) => {
                let e = &mut m.entries[j];
                (e.start, e.len) = (at, len);
                e.generation = generation;
            }
            None => {
                let Ok(j) = u32::try_from(m.entries.len()) else {
                    return;
                };
                let h = m.hash(start);
                let head = m.map.entry(h).or_insert(NIL);
                m.entries.push(Entry {
                    next: *head,
                    start: at,
                    len,
                    generation,
                });
                *head = j;
                let vals = m
                    .fields
                    .iter()
                    .map(|&(f, mask)| start[usize::from(f)] & mask);
                m.values.extend(vals);
                self.entries += 1;
            }
        }
    }

    /// The (field, value, mask) of [`Op::SetConst`] `j`.
    #[inline]
    pub(crate) fn set_const(&self, j: u32) -> Option<(usize, u128, u128)> {
        let c = self.consts.get(j as usize)?;
        Some((usize::from(c.field), c.value, c.mask))
    }

    /// The op at `i` of the arena.
    #[inline]
    pub(crate) fn op(&self, i: u32) -> Option<Op> {
        self.arena.get(i as usize).copied()
    }

    /// Drops every entry. Not during a replay: use between packets.
    pub(crate) fn clear(&mut self) {
        self.by_resume.clear();
        self.arena.clear();
        self.hints.clear();
        self.consts.clear();
        self.entries = 0;
        self.clear_pending = false;
    }

    /// Performs a deferred clear. Call between packets.
    pub(crate) fn maintain(&mut self) {
        if self.clear_pending {
            self.clear();
        }
    }

    /// Lookup counters since the pipeline was made.
    pub(crate) fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries
    }
}
