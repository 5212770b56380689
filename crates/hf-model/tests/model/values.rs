//! Values generated from a schema: the non-default values of the round-trip test and the
//! random transactions of the consistency test.

use hf_ovsdb::{Atom, AtomicType, BaseType, ColumnType, Datum, Uuid};

/// A small deterministic RNG (splitmix64), so failures reproduce.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// How many distinct non-default atoms `bt` has (capped at 3).
pub fn distinct(bt: &BaseType) -> usize {
    match (&bt.enum_values, bt.atomic) {
        (Some(e), _) => e.len().min(3),
        (None, AtomicType::Boolean) => 2,
        (None, AtomicType::Integer) => match (bt.min_integer, bt.max_integer) {
            (Some(lo), Some(hi)) => usize::try_from(hi - lo).unwrap_or(3).min(3),
            _ => 3,
        },
        _ => 3,
    }
}

/// The `i`-th atom of `bt` (0 ≤ i < distinct(bt)), none of them the type's default atom
/// (except booleans' second value). `tag` varies strings between columns.
pub fn nth_atom(bt: &BaseType, i: usize, tag: &str) -> Atom {
    if let Some(e) = &bt.enum_values {
        return e[e.len() - 1 - i].clone();
    }
    match bt.atomic {
        AtomicType::Integer => {
            let i = i as i64;
            match (bt.min_integer, bt.max_integer) {
                (_, Some(hi)) => Atom::Integer(hi - i),
                (Some(lo), None) => Atom::Integer(lo + 1 + i),
                (None, None) => Atom::Integer(7 + i),
            }
        }
        AtomicType::Real => Atom::Real(1.5 + i as f64),
        AtomicType::Boolean => Atom::Boolean(i == 0),
        AtomicType::String => Atom::string(&format!("{tag}-{i}")),
        AtomicType::Uuid => Atom::Uuid(Uuid::from_u128(0xabc0 + i as u128)),
    }
}

/// A datum of `ty` that differs from its default: one value for scalars and optionals, up to
/// two elements for sets and maps.
pub fn non_default(ty: &ColumnType, tag: &str) -> Datum {
    let n = distinct(&ty.key).min(ty.max).clamp(1, 2);
    match &ty.value {
        None => Datum::set_from((0..n).map(|i| nth_atom(&ty.key, i, tag)).collect()),
        Some(vt) => Datum::map_from(
            (0..n)
                .map(|i| {
                    let v = nth_atom(vt, i % distinct(vt).max(1), &format!("{tag}-v"));
                    (nth_atom(&ty.key, i, tag), v)
                })
                .collect(),
        ),
    }
}

/// A random atom of `bt` that satisfies its constraints (references are the caller's job).
pub fn random_atom(bt: &BaseType, rng: &mut Rng) -> Atom {
    if let Some(e) = &bt.enum_values {
        return e[rng.below(e.len())].clone();
    }
    match bt.atomic {
        AtomicType::Integer => {
            let lo = bt.min_integer.unwrap_or(-5);
            let hi = bt.max_integer.unwrap_or(lo + 20).min(lo + 20);
            Atom::Integer(lo + rng.below(usize::try_from(hi - lo + 1).unwrap_or(1)) as i64)
        }
        AtomicType::Real => Atom::Real(rng.below(100) as f64 / 4.0),
        AtomicType::Boolean => Atom::Boolean(rng.chance(50)),
        AtomicType::String => {
            let words = ["a", "b", "c", "sw0", "10.0.0.1", "x y", ""];
            let s = words[rng.below(words.len())];
            let max = bt.max_length.unwrap_or(u64::MAX) as usize;
            Atom::string(&s.chars().take(max).collect::<String>())
        }
        AtomicType::Uuid => Atom::Uuid(Uuid::from_u128(u128::from(rng.next()))),
    }
}
