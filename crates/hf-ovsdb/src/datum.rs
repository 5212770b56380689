//! Datums: the value of one column, a sorted set of atoms or a map from atoms to atoms.
//!
//! Invariant: `keys` is sorted and free of duplicates; for maps `values[i]` belongs to
//! `keys[i]`, for sets `values` is empty. Every constructor that takes outside input sorts and
//! checks, so code that holds a `Datum` can rely on it.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::atom::{Atom, describe_json};
use crate::error::{OvsdbError, Result};
use crate::types::ColumnType;

/// The value of one column.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Datum {
    /// Set elements, or map keys; sorted, unique.
    pub keys: Vec<Atom>,
    /// Map values, parallel to `keys`; empty for sets.
    pub values: Vec<Atom>,
}

// By hand: most datums copied (a row's column defaults, on every insert) are empty sets, and
// an empty `Vec`'s clone is not free.
impl Clone for Datum {
    fn clone(&self) -> Self {
        Datum {
            keys: if self.keys.is_empty() {
                Vec::new()
            } else {
                self.keys.clone()
            },
            values: if self.values.is_empty() {
                Vec::new()
            } else {
                self.values.clone()
            },
        }
    }
}

impl Datum {
    /// The empty set or map.
    pub fn empty() -> Self {
        Datum {
            keys: Vec::new(),
            values: Vec::new(),
        }
    }

    /// A one-element set.
    pub fn scalar(a: Atom) -> Self {
        Datum {
            keys: vec![a],
            values: Vec::new(),
        }
    }

    /// A set from already sorted, unique elements.
    pub fn set_from_sorted(keys: Vec<Atom>) -> Self {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        Datum {
            keys,
            values: Vec::new(),
        }
    }

    /// A map from already sorted, unique keys.
    pub fn map_from_sorted(keys: Vec<Atom>, values: Vec<Atom>) -> Self {
        debug_assert!(keys.windows(2).all(|w| w[0] < w[1]) && keys.len() == values.len());
        Datum { keys, values }
    }

    /// A set from any elements (sorted and deduplicated here).
    pub fn set_from(mut keys: Vec<Atom>) -> Self {
        keys.sort();
        keys.dedup();
        Datum {
            keys,
            values: Vec::new(),
        }
    }

    /// A map from pairs; later duplicates of a key are dropped.
    pub fn map_from(mut pairs: Vec<(Atom, Atom)>) -> Self {
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        let (keys, values) = pairs.into_iter().unzip();
        Datum { keys, values }
    }

    /// Number of elements (pairs for maps).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The only element of a scalar/optional column.
    pub fn first(&self) -> Option<&Atom> {
        self.keys.first()
    }

    /// Whether the set contains `a` (for maps: whether `a` is a key).
    pub fn contains(&self, a: &Atom) -> bool {
        self.keys.binary_search(a).is_ok()
    }

    /// The value for map key `k`.
    pub fn get(&self, k: &Atom) -> Option<&Atom> {
        self.keys
            .binary_search(k)
            .ok()
            .and_then(|i| self.values.get(i))
    }

    /// Iterate (key, value) pairs of a map.
    pub fn pairs(&self) -> impl Iterator<Item = (&Atom, &Atom)> {
        self.keys.iter().zip(self.values.iter())
    }

    /// Parse the wire form for a column of type `ty`, checking every constraint of the type.
    pub fn from_json(
        ty: &ColumnType,
        v: &Value,
        named: &mut dyn FnMut(&str) -> Result<Uuid>,
    ) -> Result<Self> {
        let d = Self::from_json_unchecked(ty, v, named)?;
        // A value of the wrong size is malformed ("syntax error", as ovsdb-server says); a
        // mutation whose result has the wrong size violates a constraint (`check_size`).
        d.check_size(ty)
            .map_err(|e| OvsdbError::syntax(e.details))?;
        d.check_atoms(ty)?;
        Ok(d)
    }

    /// Parse the wire form without the size check (mutation arguments may be any size).
    pub fn from_json_unchecked(
        ty: &ColumnType,
        v: &Value,
        named: &mut dyn FnMut(&str) -> Result<Uuid>,
    ) -> Result<Self> {
        if let Some(vt) = &ty.value {
            let pairs = match v.as_array().map(Vec::as_slice) {
                Some([Value::String(tag), Value::Array(pairs)]) if tag == "map" => pairs,
                _ => {
                    return Err(OvsdbError::syntax(format!(
                        "expected [\"map\", [...]] but found {}",
                        describe_json(v)
                    )));
                }
            };
            let mut out = Vec::with_capacity(pairs.len());
            for p in pairs {
                match p.as_array().map(Vec::as_slice) {
                    Some([k, val]) => out.push((
                        Atom::from_json(ty.key.atomic, k, named)?,
                        Atom::from_json(vt.atomic, val, named)?,
                    )),
                    _ => {
                        return Err(OvsdbError::syntax(format!(
                            "map element must be a [key, value] pair, not {}",
                            describe_json(p)
                        )));
                    }
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            if out.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(OvsdbError::new(
                    crate::ErrorKind::Generic,
                    "map contains duplicate key",
                ));
            }
            let (keys, values) = out.into_iter().unzip();
            return Ok(Datum { keys, values });
        }
        let mut keys = match v.as_array().map(Vec::as_slice) {
            Some([Value::String(tag), Value::Array(elems)]) if tag == "set" => {
                let mut keys = Vec::with_capacity(elems.len());
                for e in elems {
                    keys.push(Atom::from_json(ty.key.atomic, e, named)?);
                }
                keys
            }
            _ => vec![Atom::from_json(ty.key.atomic, v, named)?],
        };
        keys.sort();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(OvsdbError::new(
                crate::ErrorKind::Generic,
                "set contains duplicate value",
            ));
        }
        Ok(Datum {
            keys,
            values: Vec::new(),
        })
    }

    /// The wire form. One-element sets print as a bare atom, as ovsdb-server prints them.
    pub fn to_json(&self, ty: &ColumnType) -> Value {
        if ty.is_map() {
            let pairs: Vec<Value> = self
                .pairs()
                .map(|(k, v)| Value::Array(vec![k.to_json(), v.to_json()]))
                .collect();
            json!(["map", pairs])
        } else if self.keys.len() == 1 {
            self.keys[0].to_json()
        } else {
            let elems: Vec<Value> = self.keys.iter().map(Atom::to_json).collect();
            json!(["set", elems])
        }
    }

    /// Append the wire form to `out`, identical to `to_json(ty).to_string()`.
    pub fn write_json(&self, ty: &ColumnType, out: &mut Vec<u8>) {
        if ty.is_map() {
            out.extend_from_slice(b"[\"map\",[");
            for (i, (k, v)) in self.pairs().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.push(b'[');
                k.write_json(out);
                out.push(b',');
                v.write_json(out);
                out.push(b']');
            }
            out.extend_from_slice(b"]]");
        } else if self.keys.len() == 1 {
            self.keys[0].write_json(out);
        } else {
            out.extend_from_slice(b"[\"set\",[");
            for (i, k) in self.keys.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                k.write_json(out);
            }
            out.extend_from_slice(b"]]");
        }
    }

    /// Check element count and every atom against `ty`.
    pub fn check(&self, ty: &ColumnType) -> Result<()> {
        self.check_atoms(ty)?;
        self.check_size(ty)
    }

    /// Check the element count against `ty`'s min and max.
    pub fn check_size(&self, ty: &ColumnType) -> Result<()> {
        let n = self.keys.len();
        if n < ty.min || n > ty.max {
            let max = if ty.max == usize::MAX {
                "unlimited".to_string()
            } else {
                ty.max.to_string()
            };
            return Err(OvsdbError::constraint(format!(
                "{n} values when type requires between {} and {max}",
                ty.min
            )));
        }
        Ok(())
    }

    /// Check every atom against the key and value base types.
    pub fn check_atoms(&self, ty: &ColumnType) -> Result<()> {
        for k in &self.keys {
            ty.key.check(k)?;
        }
        if let Some(vt) = &ty.value {
            for v in &self.values {
                vt.check(v)?;
            }
        }
        Ok(())
    }

    /// Set union, or for maps: add pairs whose key is not present yet (RFC 7047 "insert").
    pub fn union(&mut self, other: &Datum, is_map: bool) {
        if is_map {
            let mut pairs: Vec<(Atom, Atom)> =
                self.keys.drain(..).zip(self.values.drain(..)).collect();
            for (k, v) in other.pairs() {
                if pairs.binary_search_by(|p| p.0.cmp(k)).is_err() {
                    pairs.push((k.clone(), v.clone()));
                }
            }
            *self = Datum::map_from(pairs);
        } else {
            let mut keys = std::mem::take(&mut self.keys);
            keys.extend(other.keys.iter().cloned());
            *self = Datum::set_from(keys);
        }
    }

    /// Set difference. For maps, `other` may be a map (remove pairs that match exactly) or a set
    /// of keys (remove those keys) (RFC 7047 "delete").
    pub fn subtract(&mut self, other: &Datum, is_map: bool, other_is_keys: bool) {
        if !is_map {
            self.keys.retain(|k| !other.contains(k));
            return;
        }
        let mut keys = Vec::with_capacity(self.keys.len());
        let mut values = Vec::with_capacity(self.values.len());
        for (k, v) in self.keys.drain(..).zip(self.values.drain(..)) {
            let remove = if other_is_keys {
                other.contains(&k)
            } else {
                other.get(&k) == Some(&v)
            };
            if !remove {
                keys.push(k);
                values.push(v);
            }
        }
        self.keys = keys;
        self.values = values;
    }

    /// The difference `old` → `new` as update2/update3 and `_is_diff` records encode it (OVS's
    /// `ovsdb_datum_diff`): a column whose type holds at most one element (scalar, optional
    /// value, map of at most one pair: `max` 1) gives the NEW value, also when it is empty;
    /// sets that can hold more give the elements to toggle (symmetric difference); such maps give
    /// removed keys with their old value, added keys and keys whose value changed with their new
    /// value.
    pub fn diff(old: &Datum, new: &Datum, ty: &ColumnType) -> Datum {
        if !ty.is_composite() {
            return new.clone();
        }
        if !ty.is_map() {
            let mut keys = Vec::new();
            let (mut i, mut j) = (0, 0);
            while i < old.keys.len() || j < new.keys.len() {
                match (old.keys.get(i), new.keys.get(j)) {
                    (Some(a), Some(b)) if a == b => {
                        i += 1;
                        j += 1;
                    }
                    (Some(a), Some(b)) if a < b => {
                        keys.push(a.clone());
                        i += 1;
                    }
                    (Some(_), Some(b)) => {
                        keys.push(b.clone());
                        j += 1;
                    }
                    (Some(a), None) => {
                        keys.push(a.clone());
                        i += 1;
                    }
                    (None, Some(b)) => {
                        keys.push(b.clone());
                        j += 1;
                    }
                    (None, None) => break,
                }
            }
            return Datum {
                keys,
                values: Vec::new(),
            };
        }
        let mut keys = Vec::new();
        let mut values = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < old.keys.len() || j < new.keys.len() {
            match (old.keys.get(i), new.keys.get(j)) {
                (Some(a), Some(b)) if a == b => {
                    if old.values[i] != new.values[j] {
                        keys.push(b.clone());
                        values.push(new.values[j].clone());
                    }
                    i += 1;
                    j += 1;
                }
                (Some(a), Some(b)) if a < b => {
                    keys.push(a.clone());
                    values.push(old.values[i].clone());
                    i += 1;
                }
                (Some(_), Some(b)) => {
                    keys.push(b.clone());
                    values.push(new.values[j].clone());
                    j += 1;
                }
                (Some(a), None) => {
                    keys.push(a.clone());
                    values.push(old.values[i].clone());
                    i += 1;
                }
                (None, Some(b)) => {
                    keys.push(b.clone());
                    values.push(new.values[j].clone());
                    j += 1;
                }
                (None, None) => break,
            }
        }
        Datum { keys, values }
    }

    /// Apply a difference produced by [`Datum::diff`] (or received from a peer, or read from
    /// an `_is_diff` file record), as OVS's `ovsdb_datum_apply_diff_in_place` does: for a type
    /// of at most one element the diff is the new value; for larger sets each element of the
    /// diff is toggled; for larger maps a diff key that is absent is added, one present with
    /// the same value is removed, and one present with another value takes the diff's value.
    /// The size of the result is not checked (see [`Datum::try_apply_diff`]).
    pub fn apply_diff(&self, diff: &Datum, ty: &ColumnType) -> Datum {
        if !ty.is_composite() {
            return diff.clone();
        }
        if !ty.is_map() {
            let mut keys: Vec<Atom> = Vec::with_capacity(self.keys.len() + diff.keys.len());
            for k in &self.keys {
                if !diff.contains(k) {
                    keys.push(k.clone());
                }
            }
            for k in &diff.keys {
                if !self.contains(k) {
                    keys.push(k.clone());
                }
            }
            return Datum::set_from(keys);
        }
        let mut pairs: Vec<(Atom, Atom)> = Vec::with_capacity(self.keys.len() + diff.keys.len());
        for (k, v) in self.pairs() {
            match diff.get(k) {
                None => pairs.push((k.clone(), v.clone())),
                Some(dv) if dv == v => {} // removed
                Some(dv) => pairs.push((k.clone(), dv.clone())),
            }
        }
        for (k, v) in diff.pairs() {
            if !self.contains(k) {
                pairs.push((k.clone(), v.clone()));
            }
        }
        Datum::map_from(pairs)
    }

    /// [`Datum::apply_diff`], refusing a result whose element count `ty` does not allow (a diff
    /// that does not fit the value it is applied to).
    pub fn try_apply_diff(&self, diff: &Datum, ty: &ColumnType) -> Result<Datum> {
        let d = self.apply_diff(diff, ty);
        d.check_size(ty).map_err(|e| {
            OvsdbError::constraint(format!(
                "applying a diff gives a value of the wrong size: {}",
                e.details
            ))
        })?;
        Ok(d)
    }

    /// Every UUID this datum holds in a position `ty` marks as a reference, with the referenced
    /// table index and whether the reference is strong.
    pub fn for_each_ref(&self, ty: &ColumnType, mut f: impl FnMut(Uuid, usize, bool)) {
        if let Some(t) = ty.key.ref_table_index {
            let strong = ty.key.ref_type == crate::types::RefType::Strong;
            for k in &self.keys {
                if let Atom::Uuid(u) = k {
                    f(*u, t, strong);
                }
            }
        }
        if let Some(vt) = &ty.value
            && let Some(t) = vt.ref_table_index
        {
            let strong = vt.ref_type == crate::types::RefType::Strong;
            for v in &self.values {
                if let Atom::Uuid(u) = v {
                    f(*u, t, strong);
                }
            }
        }
    }

    /// Remove every reference for which `dangling` is true (weak-reference clean-up). For maps,
    /// a pair is removed when either side dangles. Returns whether anything was removed.
    pub fn remove_refs(&mut self, ty: &ColumnType, dangling: &dyn Fn(Uuid) -> bool) -> bool {
        let key_ref = ty.key.ref_table_index.is_some();
        let val_ref = ty
            .value
            .as_ref()
            .is_some_and(|v| v.ref_table_index.is_some());
        let is_dangling = |a: &Atom| matches!(a, Atom::Uuid(u) if dangling(*u));
        let before = self.keys.len();
        if ty.is_map() {
            let mut keys = Vec::with_capacity(before);
            let mut values = Vec::with_capacity(before);
            for (k, v) in self.keys.drain(..).zip(self.values.drain(..)) {
                if (key_ref && is_dangling(&k)) || (val_ref && is_dangling(&v)) {
                    continue;
                }
                keys.push(k);
                values.push(v);
            }
            self.keys = keys;
            self.values = values;
        } else if key_ref {
            self.keys.retain(|k| !is_dangling(k));
        }
        self.keys.len() != before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::atom::AtomicType;

    fn no_named(n: &str) -> Result<Uuid> {
        Err(OvsdbError::syntax(format!("no named-uuid {n}")))
    }

    fn set_ty() -> ColumnType {
        ColumnType::from_json(&json!({"key": "string", "min": 0, "max": "unlimited"})).unwrap()
    }
    fn map_ty() -> ColumnType {
        ColumnType::from_json(
            &json!({"key": "string", "value": "string", "min": 0, "max": "unlimited"}),
        )
        .unwrap()
    }

    #[test]
    fn set_parses_sorted_and_prints_single_as_atom() {
        let d = Datum::from_json(&set_ty(), &json!(["set", ["b", "a"]]), &mut no_named).unwrap();
        assert_eq!(d.keys, vec![Atom::string("a"), Atom::string("b")]);
        let one = Datum::from_json(&set_ty(), &json!("x"), &mut no_named).unwrap();
        assert_eq!(one.to_json(&set_ty()), json!("x"));
        assert_eq!(d.to_json(&set_ty()), json!(["set", ["a", "b"]]));
    }

    #[test]
    fn duplicates_are_ovsdb_errors_as_ovsdb_server_says() {
        let e =
            Datum::from_json(&set_ty(), &json!(["set", ["a", "a"]]), &mut no_named).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Generic);
        let e = Datum::from_json(
            &map_ty(),
            &json!(["map", [["a", "1"], ["a", "2"]]]),
            &mut no_named,
        )
        .unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Generic);
    }

    #[test]
    fn size_limits_are_checked() {
        let ty = ColumnType::from_json(&json!({"key": "integer", "min": 1, "max": 2})).unwrap();
        assert!(Datum::from_json(&ty, &json!(["set", []]), &mut no_named).is_err());
        assert!(Datum::from_json(&ty, &json!(["set", [1, 2, 3]]), &mut no_named).is_err());
        assert!(Datum::from_json(&ty, &json!(["set", [1, 2]]), &mut no_named).is_ok());
    }

    #[test]
    fn diff_then_apply_restores_new() {
        let m = map_ty();
        let old =
            Datum::from_json(&m, &json!(["map", [["a", "1"], ["b", "2"]]]), &mut no_named).unwrap();
        let new =
            Datum::from_json(&m, &json!(["map", [["b", "3"], ["c", "4"]]]), &mut no_named).unwrap();
        let d = Datum::diff(&old, &new, &m);
        assert_eq!(old.apply_diff(&d, &m), new);
        let s = set_ty();
        let old = Datum::from_json(&s, &json!(["set", ["a", "b"]]), &mut no_named).unwrap();
        let new = Datum::from_json(&s, &json!(["set", ["b", "c"]]), &mut no_named).unwrap();
        let d = Datum::diff(&old, &new, &s);
        assert_eq!(d.keys, vec![Atom::string("a"), Atom::string("c")]);
        assert_eq!(old.apply_diff(&d, &s), new);
    }

    #[test]
    fn diff_of_at_most_one_element_is_the_new_value() {
        let opt_bool =
            ColumnType::from_json(&json!({"key": "boolean", "min": 0, "max": 1})).unwrap();
        let parse = |ty: &ColumnType, v: Value| Datum::from_json(ty, &v, &mut no_named).unwrap();
        let (f, t, e) = (
            parse(&opt_bool, json!(false)),
            parse(&opt_bool, json!(true)),
            parse(&opt_bool, json!(["set", []])),
        );
        assert_eq!(
            Datum::diff(&f, &t, &opt_bool).to_json(&opt_bool),
            json!(true)
        );
        assert_eq!(f.apply_diff(&t, &opt_bool), t);
        assert_eq!(
            Datum::diff(&t, &e, &opt_bool).to_json(&opt_bool),
            json!(["set", []])
        );
        assert_eq!(t.apply_diff(&e, &opt_bool), e);
        assert_eq!(e.apply_diff(&f, &opt_bool), f);
        let opt_int = ColumnType::from_json(
            &json!({"key": {"type": "integer", "minInteger": 0, "maxInteger": 4095}, "min": 0, "max": 1}),
        )
        .unwrap();
        let five = parse(&opt_int, json!(5));
        let none = parse(&opt_int, json!(["set", []]));
        assert_eq!(
            Datum::diff(&five, &none, &opt_int).to_json(&opt_int),
            json!(["set", []])
        );
        assert_eq!(five.apply_diff(&none, &opt_int), none);
        // A map of at most one pair is not composite either.
        let map1 =
            ColumnType::from_json(&json!({"key": "string", "value": "string", "min": 0, "max": 1}))
                .unwrap();
        let a = parse(&map1, json!(["map", [["k", "1"]]]));
        let b = parse(&map1, json!(["map", [["k", "2"]]]));
        assert_eq!(Datum::diff(&a, &b, &map1), b);
        assert_eq!(a.apply_diff(&b, &map1), b);
    }

    #[test]
    fn composite_diffs_and_sizes() {
        let parse = |ty: &ColumnType, v: Value| Datum::from_json(ty, &v, &mut no_named).unwrap();
        let m = map_ty();
        let old = parse(&m, json!(["map", [["a", "1"], ["b", "2"], ["c", "3"]]]));
        let new = parse(&m, json!(["map", [["a", "1"], ["b", "9"], ["d", "4"]]]));
        // Changed value: key with the new value; removed: old value; added: new value.
        assert_eq!(
            Datum::diff(&old, &new, &m).to_json(&m),
            json!(["map", [["b", "9"], ["c", "3"], ["d", "4"]]])
        );
        // Emptying a set gives the old elements; the diff of equal values is empty.
        let s = set_ty();
        let ab = parse(&s, json!(["set", ["a", "b"]]));
        let empty = Datum::empty();
        assert_eq!(Datum::diff(&ab, &empty, &s), ab);
        assert_eq!(ab.apply_diff(&ab, &s), empty);
        assert!(Datum::diff(&ab, &ab, &s).is_empty());
        // A bounded set's diff may exceed its maximum; the applied result may not.
        let b2 = ColumnType::from_json(&json!({"key": "integer", "min": 0, "max": 2})).unwrap();
        let x = parse(&b2, json!(["set", [1, 2]]));
        let y = parse(&b2, json!(["set", [3, 4]]));
        let d = Datum::diff(&x, &y, &b2);
        assert_eq!(d.len(), 4);
        assert_eq!(x.try_apply_diff(&d, &b2).unwrap(), y);
        assert!(Datum::empty().try_apply_diff(&d, &b2).is_err());
    }

    #[test]
    fn write_json_matches_to_json() {
        let m = map_ty();
        let d = Datum::from_json(
            &m,
            &json!(["map", [["a\"b", "\u{1}é"], ["c", "d"]]]),
            &mut no_named,
        )
        .unwrap();
        let mut out = Vec::new();
        d.write_json(&m, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), d.to_json(&m).to_string());
        let r =
            ColumnType::from_json(&json!({"key": "real", "min": 0, "max": "unlimited"})).unwrap();
        let d = Datum::from_json(&r, &json!(["set", [1.0, 2.5, -0.0001]]), &mut no_named).unwrap();
        let mut out = Vec::new();
        d.write_json(&r, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), d.to_json(&r).to_string());
        let u =
            ColumnType::from_json(&json!({"key": "uuid", "min": 0, "max": "unlimited"})).unwrap();
        let d = Datum::from_json(
            &u,
            &json!([
                "set",
                [
                    ["uuid", "8b7f2b9a-0000-4000-8000-00000000000a"],
                    ["uuid", "8b7f2b9a-0000-4000-8000-00000000000b"]
                ]
            ]),
            &mut no_named,
        )
        .unwrap();
        let mut out = Vec::new();
        d.write_json(&u, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), d.to_json(&u).to_string());
    }

    #[test]
    fn wrong_atom_type_is_a_syntax_error() {
        let ty = ColumnType::scalar(AtomicType::Integer);
        let e = Datum::from_json(&ty, &json!("x"), &mut no_named).unwrap_err();
        assert_eq!(e.kind, crate::ErrorKind::Syntax);
        assert!(e.details.contains("expected integer"));
    }

    proptest::proptest! {
        #[test]
        fn prop_map_diff_roundtrip(a in proptest::collection::btree_map("[a-d]", "[0-2]", 0..5),
                                   b in proptest::collection::btree_map("[a-d]", "[0-2]", 0..5)) {
            let m = map_ty();
            let mk = |x: &std::collections::BTreeMap<String, String>| Datum::map_from(
                x.iter().map(|(k, v)| (Atom::string(k), Atom::string(v))).collect());
            let (old, new) = (mk(&a), mk(&b));
            let d = Datum::diff(&old, &new, &m);
            proptest::prop_assert_eq!(old.apply_diff(&d, &m), new);
        }
    }
}
