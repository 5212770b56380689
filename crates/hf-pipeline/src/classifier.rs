//! One logical table as a tuple-space-search classifier (OVS's `classifier.c` without tries).
//!
//! Each normalised conjunction becomes a rule: its positive bit tests form a (mask, value) over
//! the field slots, and rules with the same mask share a subtable, a hash map from the masked
//! values to the rules (highest priority first). The tests a mask cannot express (`!=` on a
//! port, conjunctive-match dimensions) are checked after the hash hit. Subtables are visited in
//! order of their highest priority, and the search stops once no later subtable can beat the
//! best match so far.
//!
//! Rules carry a rank (their flow's place in the datapath's flow list): among rules of one
//! priority the lower rank comes first in a hash list, and subtables of one best priority are
//! visited lowest rank first. A fresh compile inserts in rank order, so this is insertion
//! order; [`Classifier::insert`] and [`Classifier::remove_flows`] keep it when a recompile
//! changes a table in place, so the table equals the one a fresh compile of the resulting
//! flow list builds.
//!
//! Every subtable visited reports the fields it hashed to the caller's [`Examine`], which is how
//! the walk accumulates a megaflow's wildcards: a lookup's result depends only on the bits it
//! examined.

use std::collections::HashMap;

use crate::packet::NF;

/// Receives the bits a lookup consulted.
pub(crate) trait Examine {
    /// `mask` bits of field slot `field` influenced the result.
    fn examine(&mut self, field: usize, mask: u128);
}

/// One test that is not part of the subtable's mask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Test {
    /// `(f & mask) == value`.
    Bits { field: u8, value: u128, mask: u128 },
    /// The port slot holds (or does not hold) `key`.
    Port { slot: u8, key: u32, positive: bool },
    /// A constant (resolved `is_chassis_resident`, unknown sets).
    Const(bool),
}

impl Test {
    fn eval(&self, f: &[u128; NF], wc: &mut impl Examine) -> bool {
        match *self {
            Test::Bits { field, value, mask } => {
                wc.examine(usize::from(field), mask);
                f.get(usize::from(field))
                    .is_some_and(|v| v & mask == value & mask)
            }
            Test::Port {
                slot,
                key,
                positive,
            } => {
                wc.examine(usize::from(slot), u128::from(u32::MAX));
                (f.get(usize::from(slot)).copied() == Some(u128::from(key))) == positive
            }
            Test::Const(b) => b,
        }
    }
}

/// A compiled conjunction: the masked part plus the residual tests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conj {
    /// (field, mask, value), sorted by field, masks nonzero.
    pub masked: Vec<(u8, u128, u128)>,
    /// Tests checked after the hash hit.
    pub residual: Vec<Test>,
    /// Conjunctive-match dimensions: one test of each must hold.
    pub dims: Vec<Vec<Test>>,
}

#[derive(Debug, Clone)]
struct Rule {
    prio: u16,
    flow: u32,
    /// The flow's place in its datapath's flow list (ties between equal priorities).
    rank: Rank,
    /// Shared: a table that a program change edits is copied from the running program's
    /// (copy on write), and its rules' values go with it without an allocation each.
    values: std::sync::Arc<[u128]>,
    /// Tests beyond the masked values (`None`: none, as for most rules: one pointer instead of
    /// two empty boxed slices in every rule).
    more: Option<Box<MoreTests>>,
}

/// A rule's residual tests and conjunctive-match dimensions.
#[derive(Debug, Clone)]
struct MoreTests {
    residual: Box<[Test]>,
    dims: Box<[Box<[Test]>]>,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A fast hasher for small trusted keys (port keys, neighbour tuples): one multiply per word.
/// Keys come from the program or the packet, never chosen to collide by a remote peer more than
/// the packet fields a classifier hashes anyway.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.0 = mix(self.0, u128::from(u64::from_le_bytes(w)));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = mix(self.0, u128::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(self.0, u128::from(v));
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = mix(self.0, v);
    }
}

/// A hash map with [`MixHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<MixHasher>>;

/// A hash map keyed by an already-mixed `u64`.
pub(crate) type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Mixes one masked value into a running hash.
#[inline]
pub(crate) fn mix(h: u64, v: u128) -> u64 {
    let x = (v as u64) ^ ((v >> 64) as u64).rotate_left(29);
    (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(31) ^ (h >> 17)
}

#[derive(Debug, Clone)]
struct Subtable {
    fields: Box<[(u8, u128)]>,
    max_prio: u16,
    /// The lowest rank of its rules (subtables of one `max_prio` are visited in this order).
    min_rank: Rank,
    /// Rule indexes by hash (inline up to 2: copying a table copies no list of one or two).
    map: IdMap<smallvec::SmallVec<[u32; 2]>>,
}

impl Subtable {
    fn hash_values(&self, values: &[u128]) -> u64 {
        values.iter().fold(0x51_7cc1_b727_220a, |h, v| mix(h, *v))
    }
}

/// Where a rule sits among rules of equal priority: its flow's place in the datapath's flow
/// list (an order key, gaps allowed), then which disjunct of the flow's match it is.
pub(crate) type Rank = (u64, u32);

/// A logical table.
#[derive(Debug, Default, Clone)]
pub(crate) struct Classifier {
    subtables: Vec<Subtable>,
    rules: Vec<Rule>,
}

impl Classifier {
    /// How many rules it holds (a flow's match gives one per disjunct).
    #[cfg(test)]
    pub(crate) fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// Adds a rule for `flow` at `prio`, `rank` being the flow's place in its datapath's flow
    /// list and the disjunct's in the flow (among equal priorities the lower rank wins). Call [`Classifier::finish`] after
    /// the inserts.
    pub(crate) fn insert(&mut self, prio: u16, flow: u32, rank: Rank, conj: Conj) {
        let fields: Box<[(u8, u128)]> = conj.masked.iter().map(|&(f, m, _)| (f, m)).collect();
        let values: std::sync::Arc<[u128]> = conj.masked.iter().map(|&(_, m, v)| v & m).collect();
        let st = match self.subtables.iter().position(|s| s.fields == fields) {
            Some(i) => i,
            None => {
                self.subtables.push(Subtable {
                    fields,
                    max_prio: 0,
                    min_rank: (u64::MAX, u32::MAX),
                    map: IdMap::default(),
                });
                self.subtables.len() - 1
            }
        };
        let id = self.rules.len() as u32;
        let sub = &mut self.subtables[st];
        let h = sub.hash_values(&values);
        sub.max_prio = sub.max_prio.max(prio);
        sub.min_rank = sub.min_rank.min(rank);
        self.rules.push(Rule {
            prio,
            flow,
            rank,
            values,
            more: (!conj.residual.is_empty() || !conj.dims.is_empty()).then(|| {
                Box::new(MoreTests {
                    residual: conj.residual.into(),
                    dims: conj.dims.into_iter().map(Into::into).collect(),
                })
            }),
        });
        let rules = &self.rules;
        let list = sub.map.entry(h).or_default();
        // Highest priority first; lower rank first among equals.
        let key = |r: &u32| {
            let r = &rules[*r as usize];
            (std::cmp::Reverse(r.prio), r.rank)
        };
        let at = list.partition_point(|r| key(r) <= (std::cmp::Reverse(prio), rank));
        list.insert(at, id);
    }

    /// Removes every rule of the flows in `flows` (program flow indexes), keeping the others'
    /// order; subtables left empty go, and the others' best priority and lowest rank are
    /// recomputed. Call [`Classifier::finish`] afterwards. Returns how many rules went.
    pub(crate) fn remove_flows(&mut self, flows: &std::collections::HashSet<u32>) -> usize {
        if flows.is_empty() {
            return 0;
        }
        // Old rule id → new id (u32::MAX: removed).
        let mut new_id = Vec::with_capacity(self.rules.len());
        let mut next = 0u32;
        for r in &self.rules {
            if flows.contains(&r.flow) {
                new_id.push(u32::MAX);
            } else {
                new_id.push(next);
                next += 1;
            }
        }
        let removed = self.rules.len() - next as usize;
        if removed == 0 {
            return 0;
        }
        self.rules.retain(|r| !flows.contains(&r.flow));
        let rules = &self.rules;
        for sub in &mut self.subtables {
            sub.map.retain(|_, list| {
                list.retain_mut(|r| {
                    *r = new_id[*r as usize];
                    *r != u32::MAX
                });
                !list.is_empty()
            });
            sub.max_prio = 0;
            sub.min_rank = (u64::MAX, u32::MAX);
            for r in sub.map.values().flatten() {
                let r = &rules[*r as usize];
                sub.max_prio = sub.max_prio.max(r.prio);
                sub.min_rank = sub.min_rank.min(r.rank);
            }
        }
        self.subtables.retain(|s| !s.map.is_empty());
        removed
    }

    /// Adds `off` to every rule's flow index (the datapath's flows moved to `off..` of the
    /// program's flow arena).
    pub(crate) fn rebase(&mut self, off: u32) {
        for r in &mut self.rules {
            r.flow += off;
        }
    }

    /// Orders subtables by their best priority, then by their lowest rank (for a fresh
    /// compile: the order they were made in). Call after inserts and removals.
    pub(crate) fn finish(&mut self) {
        self.subtables
            .sort_by_key(|s| (std::cmp::Reverse(s.max_prio), s.min_rank));
    }

    /// Gives back the slack the inserts' growth left in the rule vector. The hash maps keep
    /// theirs: a full map would grow (rehash whole) on the first insert of a patch.
    pub(crate) fn shrink(&mut self) {
        self.rules.shrink_to_fit();
        self.subtables.shrink_to_fit();
    }

    /// Every subtable (in visiting order) with its hash lists (in list order) as text, with
    /// `flow` naming a rule's flow: where rules sit in the rule vector and their rank values
    /// are left out, the orders they make are kept (tests compare programs compiled different
    /// ways, fresh or changed in place, with it).
    pub(crate) fn describe(&self, flow: &dyn Fn(u32) -> String) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.subtables {
            out.push(format!("subtable {:?} max {}", s.fields, s.max_prio));
            let mut lists: Vec<_> = s.map.iter().collect();
            lists.sort_by_key(|(h, _)| **h);
            for (h, list) in lists {
                out.push(format!("  hash {h:x}"));
                for r in list {
                    let r = &self.rules[*r as usize];
                    out.push(format!(
                        "    rule prio {} flow [{}] values {:?} residual {:?} dims {:?}",
                        r.prio,
                        flow(r.flow),
                        r.values,
                        r.more.as_ref().map_or(&[][..], |m| &m.residual[..]),
                        r.more.as_ref().map_or(&[][..], |m| &m.dims[..])
                    ));
                }
            }
        }
        out.push(format!("rules {}", self.rules.len()));
        out
    }

    /// Number of subtables (distinct masks).
    #[cfg(test)]
    pub(crate) fn subtable_count(&self) -> usize {
        self.subtables.len()
    }

    /// The flow of the highest-priority rule matching `f`, with its priority.
    pub(crate) fn lookup(&self, f: &[u128; NF], wc: &mut impl Examine) -> Option<(u32, u16)> {
        let mut best: Option<(u32, u16)> = None;
        for sub in &self.subtables {
            if best.is_some_and(|(_, p)| p >= sub.max_prio) {
                break;
            }
            let mut h = 0x51_7cc1_b727_220a;
            for &(field, mask) in sub.fields.iter() {
                wc.examine(usize::from(field), mask);
                h = mix(h, f.get(usize::from(field)).copied().unwrap_or(0) & mask);
            }
            let Some(list) = sub.map.get(&h) else {
                continue;
            };
            for &r in list {
                let rule = &self.rules[r as usize];
                if best.is_some_and(|(_, p)| p >= rule.prio) {
                    break;
                }
                let hit = sub
                    .fields
                    .iter()
                    .zip(rule.values.iter())
                    .all(|(&(fi, m), v)| f.get(usize::from(fi)).copied().unwrap_or(0) & m == *v)
                    && rule.more.as_ref().is_none_or(|m| {
                        m.residual.iter().all(|t| t.eval(f, wc))
                            && m.dims.iter().all(|d| {
                                // Evaluate every alternative so the examined bits do not
                                // depend on order.
                                d.iter().fold(false, |any, t| t.eval(f, wc) | any)
                            })
                    });
                if hit {
                    best = Some((rule.flow, rule.prio));
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Wc([u128; NF]);
    impl Examine for Wc {
        fn examine(&mut self, field: usize, mask: u128) {
            self.0[field] |= mask;
        }
    }

    fn conj(masked: &[(u8, u128, u128)]) -> Conj {
        Conj {
            masked: masked.to_vec(),
            ..Conj::default()
        }
    }

    #[test]
    fn highest_priority_wins_and_masks_are_reported() {
        let mut c = Classifier::default();
        c.insert(10, 1, (1, 0), conj(&[(17, 0xffff_ff00, 0x0a00_0000)]));
        c.insert(20, 2, (2, 0), conj(&[(17, 0xffff_ffff, 0x0a00_0005)]));
        c.insert(0, 3, (3, 0), conj(&[]));
        c.finish();
        assert_eq!(c.subtable_count(), 3);
        let mut f = [0u128; NF];
        f[17] = 0x0a00_0005;
        let mut wc = Wc([0; NF]);
        assert_eq!(c.lookup(&f, &mut wc), Some((2, 20)));
        // The exact subtable matched first; nothing lower could win, so /24 was not consulted.
        assert_eq!(wc.0[17], 0xffff_ffff);
        f[17] = 0x0a00_0007;
        assert_eq!(c.lookup(&f, &mut Wc([0; NF])), Some((1, 10)));
        f[17] = 0x0b00_0007;
        assert_eq!(c.lookup(&f, &mut Wc([0; NF])), Some((3, 0)));
    }

    #[test]
    fn residual_port_tests_and_dimensions() {
        let mut c = Classifier::default();
        c.insert(
            5,
            7,
            (1, 0),
            Conj {
                masked: vec![],
                residual: vec![Test::Port {
                    slot: 1,
                    key: 3,
                    positive: false,
                }],
                dims: vec![vec![
                    Test::Bits {
                        field: 27,
                        value: 80,
                        mask: 0xffff,
                    },
                    Test::Bits {
                        field: 27,
                        value: 443,
                        mask: 0xffff,
                    },
                ]],
            },
        );
        c.finish();
        let mut f = [0u128; NF];
        f[27] = 443;
        assert_eq!(c.lookup(&f, &mut Wc([0; NF])), Some((7, 5)));
        f[1] = 3;
        assert_eq!(c.lookup(&f, &mut Wc([0; NF])), None);
        f[1] = 4;
        f[27] = 22;
        assert_eq!(c.lookup(&f, &mut Wc([0; NF])), None);
    }
}
