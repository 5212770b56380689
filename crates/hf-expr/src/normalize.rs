//! Normalisation: a checked match becomes what a classifier consumes.
//!
//! The result is a disjunction of conjunctions ([`Normalized`]). Each conjunction ([`Conj`]) is a
//! list of masked per-field tests ([`Atom`]) that must all hold, plus zero or more *dimensions*:
//! lists of alternative atoms of which at least one must hold. Dimensions are OVN's conjunctive
//! match: `ip4.src == $big && tcp.dst == {1, 2, 3}` stays `|big| + 3` atoms instead of
//! `|big| * 3` conjunctions. A classifier implements a conjunction with dimensions either with
//! conjunction ids (OpenFlow `conjunction(id, k/n)`) or by expanding them itself.
//!
//! Semantics follow OVN: negation is pushed into the comparisons, and every comparison then
//! carries its field's prerequisites, positively (`tcp.dst == 80` means `tcp.dst == 80 &&
//! ip.proto == 6 && (eth.type == 0x800 || eth.type == 0x86dd)`, and `!(tcp.dst == 80)` means
//! `tcp.dst != 80 && ip.proto == 6 && ...`; `!ct.est` means `ct.trk && !ct.est`). `!=` on a
//! masked value becomes one single-bit test per mask bit, and ordered relations become prefix
//! (masked) ranges.

use crate::ast::{Expr, FieldRef, RelOp, Rhs, Term, Value};
use crate::constant::{Constant, width_mask};
use crate::diag::{ErrorKind, ParseError, Result, Span};
use crate::symbols::{FieldId, SymbolKind, SymbolTable, field};
use crate::typecheck::resolve;
use std::collections::HashMap;
use std::fmt;

/// The contents of address sets and port groups, by name. A name that is missing is a set of
/// unknown contents: normalisation keeps it as an [`Atom::Set`] test.
#[derive(Clone, Debug, Default)]
pub struct Sets {
    /// Address sets (including port groups' `_ip4`/`_ip6` sets), by name without `$`.
    pub addr_sets: HashMap<String, Vec<Constant>>,
    /// Port groups, by name without `@`: logical port names.
    pub port_groups: HashMap<String, Vec<String>>,
}

/// Bounds that keep normalisation polynomial.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Cross products up to this size are multiplied out; larger ones become dimensions.
    pub max_cross: usize,
    /// More conjunctions than this is an error.
    pub max_conj: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_cross: 64,
            max_conj: 100_000,
        }
    }
}

impl Limits {
    /// Small bounds for fuzzing.
    pub fn fuzz() -> Self {
        Self {
            max_cross: 16,
            max_conj: 4096,
        }
    }
}

/// One test.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Atom {
    /// `(field & mask) == value`.
    Bits {
        /// Field.
        field: FieldId,
        /// Value (only bits under `mask`).
        value: u128,
        /// Mask.
        mask: u128,
    },
    /// A string field equals (or, `positive: false`, differs from) a port name.
    Str {
        /// Field (`inport` or `outport`).
        field: FieldId,
        /// Port name.
        value: String,
        /// Equal or different.
        positive: bool,
    },
    /// `is_chassis_resident(port)` or its negation.
    Resident {
        /// Port.
        port: String,
        /// Holds or not.
        positive: bool,
    },
    /// Bits `lo..=hi` of a field are (not) in a set whose contents are unknown here.
    Set {
        /// Field.
        field: FieldId,
        /// Lowest bit.
        lo: u32,
        /// Highest bit.
        hi: u32,
        /// `$name`, `@name` or `^name`, as written.
        name: String,
        /// In the set or not.
        positive: bool,
    },
}

/// A conjunction: all atoms, and one alternative of each dimension.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Conj {
    /// Tests that must all hold.
    pub atoms: Vec<Atom>,
    /// Conjunctive-match dimensions: at least one atom of each must hold.
    pub dims: Vec<Vec<Atom>>,
}

/// A disjunction of conjunctions. No conjunctions: never matches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Normalized {
    /// The conjunctions.
    pub disjuncts: Vec<Conj>,
}

impl Normalized {
    /// Total number of atoms, dimensions included: the classifier's cost.
    pub fn atom_count(&self) -> usize {
        self.disjuncts
            .iter()
            .map(|c| c.atoms.len() + c.dims.iter().map(Vec::len).sum::<usize>())
            .sum()
    }
}

type Dnf = Vec<Conj>;

fn t() -> Dnf {
    vec![Conj::default()]
}

/// A reusable normaliser: caches predicate and prerequisite expansions across calls.
#[derive(Debug)]
pub struct Normalizer<'a> {
    symtab: &'a SymbolTable,
    limits: Limits,
    cache: HashMap<(&'static str, bool), Dnf>,
}

/// Normalises one match (convenience for [`Normalizer`]).
pub fn normalize(
    symtab: &SymbolTable,
    e: &Expr,
    sets: &Sets,
    limits: &Limits,
) -> Result<Normalized> {
    Normalizer::new(symtab, *limits).normalize(e, sets)
}

fn too_big(n: usize, limits: &Limits) -> ParseError {
    ParseError::new(
        ErrorKind::Normalize,
        Span::default(),
        format!(
            "normalised match would need {n} or more conjunctions (limit {})",
            limits.max_conj
        ),
    )
}

impl<'a> Normalizer<'a> {
    /// A normaliser over `symtab`.
    pub fn new(symtab: &'a SymbolTable, limits: Limits) -> Self {
        Self {
            symtab,
            limits,
            cache: HashMap::new(),
        }
    }

    /// Normalises a type-checked match.
    pub fn normalize(&mut self, e: &Expr, sets: &Sets) -> Result<Normalized> {
        let mut d = self.norm(e, false, sets)?;
        for c in &mut d {
            c.atoms.sort();
            for dim in &mut c.dims {
                dim.sort();
                dim.dedup();
            }
        }
        d.sort_by(|a, b| a.atoms.cmp(&b.atoms));
        d.dedup();
        Ok(Normalized { disjuncts: d })
    }

    fn norm(&mut self, e: &Expr, neg: bool, sets: &Sets) -> Result<Dnf> {
        match e {
            Expr::Bool(b) => Ok(if *b != neg { t() } else { Vec::new() }),
            Expr::Not(x) => self.norm(x, !neg, sets),
            Expr::And(v) | Expr::Or(v) => {
                let mut parts = Vec::with_capacity(v.len());
                for x in v {
                    parts.push(self.norm(x, neg, sets)?);
                }
                if matches!(e, Expr::And(_)) != neg {
                    self.and_all(parts)
                } else {
                    self.or_all(parts)
                }
            }
            Expr::ChassisResident { port, .. } => Ok(vec![Conj {
                atoms: vec![Atom::Resident {
                    port: port.clone(),
                    positive: !neg,
                }],
                dims: Vec::new(),
            }]),
            Expr::Field(f) => {
                // A bare field means `f != 0` (for one bit, `f == 1`).
                let zero = Rhs::One(Term::new(Value::Const(Constant::dec(0))));
                self.cmp(f, RelOp::Ne, &zero, neg, sets)
            }
            Expr::Cmp { field, op, rhs } => self.cmp(field, *op, rhs, neg, sets),
            Expr::Range {
                field,
                low,
                low_op,
                high_op,
                high,
            } => {
                // low OP field  ==  field OP' low
                let a = Expr::Cmp {
                    field: field.clone(),
                    op: low_op.flip(),
                    rhs: Rhs::One(low.clone()),
                };
                let b = Expr::Cmp {
                    field: field.clone(),
                    op: *high_op,
                    rhs: Rhs::One(high.clone()),
                };
                self.norm(&Expr::And(vec![a, b]), neg, sets)
            }
        }
    }

    fn cached(&mut self, name: &'static str, neg: bool, e: &Expr, sets: &Sets) -> Result<Dnf> {
        if let Some(d) = self.cache.get(&(name, neg)) {
            return Ok(d.clone());
        }
        let d = self.norm(e, neg, sets)?;
        self.cache.insert((name, neg), d.clone());
        Ok(d)
    }

    fn cmp(&mut self, f: &FieldRef, op: RelOp, rhs: &Rhs, neg: bool, sets: &Sets) -> Result<Dnf> {
        let symtab = self.symtab;
        let r = resolve(symtab, f)?;
        let sym = r.symbol;
        if let SymbolKind::Predicate(exp) = &sym.kind {
            // `pred == 1`, `pred != 0`, ...: a boolean.
            let v = match rhs.terms().first().map(|t| &t.value) {
                Some(Value::Const(c)) => c.value,
                _ => 1,
            };
            let truth = (v == 1) == (op == RelOp::Eq);
            return self.cached(sym.name, neg == truth, exp, sets);
        }
        let effective = if neg { op.negate() } else { op };
        let mut core = self.relation(&r, effective, rhs, sets)?;
        // Prerequisites hold whatever the test: OVN pushes `!` into the comparison while parsing
        // and adds prerequisites afterwards, so `!ct.est` is `ct.trk && !ct.est`.
        if let Some(p) = &sym.prereq {
            let pd = self.cached(sym.name, false, p, sets)?;
            core = self.and_all(vec![core, pd])?;
        }
        Ok(core)
    }

    fn relation(
        &mut self,
        r: &crate::typecheck::Resolved<'_>,
        op: RelOp,
        rhs: &Rhs,
        sets: &Sets,
    ) -> Result<Dnf> {
        let Some((fid, lo, hi)) = r.bits else {
            return Ok(t());
        };
        let width = hi - lo + 1;
        if let Rhs::One(Term {
            value: Value::Const(c),
            ..
        }) = rhs
        {
            return self.constant(fid, lo, width, op, c);
        }
        let mut parts: Vec<Dnf> = Vec::new();
        for term in rhs.terms() {
            match &term.value {
                Value::Const(c) => parts.push(self.constant(fid, lo, width, op, c)?),
                Value::Str(s) => parts.push(str_atom(fid, s, op)),
                Value::AddrSet(name) => match sets.addr_sets.get(name) {
                    Some(list) => {
                        let mut sub = Vec::with_capacity(list.len());
                        for c in list {
                            sub.push(self.constant(fid, lo, width, op, c)?);
                        }
                        parts.push(if op == RelOp::Ne {
                            self.and_all(sub)?
                        } else {
                            self.or_all(sub)?
                        });
                    }
                    None => parts.push(set_atom(fid, lo, hi, format!("${name}"), op)),
                },
                Value::PortGroup(name) => match sets.port_groups.get(name) {
                    Some(list) => {
                        let sub: Vec<Dnf> = list.iter().map(|p| str_atom(fid, p, op)).collect();
                        parts.push(if op == RelOp::Ne {
                            self.and_all(sub)?
                        } else {
                            self.or_all(sub)?
                        });
                    }
                    None => parts.push(set_atom(fid, lo, hi, format!("@{name}"), op)),
                },
                Value::Template(name) => parts.push(set_atom(fid, lo, hi, format!("^{name}"), op)),
            }
        }
        if op == RelOp::Ne {
            self.and_all(parts)
        } else {
            self.or_all(parts)
        }
    }

    fn constant(
        &mut self,
        fid: FieldId,
        lo: u32,
        width: u32,
        op: RelOp,
        c: &Constant,
    ) -> Result<Dnf> {
        let wm = width_mask(width);
        let m = c.mask_bits(width) & wm;
        let v = c.value & m;
        let bits = |value: u128, mask: u128| Atom::Bits {
            field: fid,
            value: value << lo,
            mask: mask << lo,
        };
        let single = |a: Atom| Conj {
            atoms: vec![a],
            dims: Vec::new(),
        };
        Ok(match op {
            RelOp::Eq if m == 0 => t(),
            RelOp::Eq => vec![single(bits(v, m))],
            RelOp::Ne => (0..width)
                .filter(|i| m >> i & 1 == 1)
                .map(|i| single(bits(!v & (1 << i), 1 << i)))
                .collect(),
            _ => {
                let x = c.value & wm;
                let (a, b) = match op {
                    RelOp::Lt if x == 0 => return Ok(Vec::new()),
                    RelOp::Lt => (0, x - 1),
                    RelOp::Le => (0, x),
                    RelOp::Gt if x == wm => return Ok(Vec::new()),
                    RelOp::Gt => (x + 1, wm),
                    _ => (x, wm),
                };
                let mut out = Vec::new();
                range_prefixes(a, b, width, &mut |val, mask| {
                    out.push(single(bits(val, mask)))
                });
                if out.len() == 1
                    && out[0]
                        .atoms
                        .first()
                        .is_some_and(|a| matches!(a, Atom::Bits { mask: 0, .. }))
                {
                    return Ok(t());
                }
                out
            }
        })
    }

    fn or_all(&self, mut parts: Vec<Dnf>) -> Result<Dnf> {
        if parts.len() == 1 {
            return Ok(parts.pop().unwrap_or_default());
        }
        let total: usize = parts.iter().map(Vec::len).sum();
        if total > self.limits.max_conj {
            return Err(too_big(total, &self.limits));
        }
        let mut out = Vec::with_capacity(total);
        for p in parts {
            out.extend(p);
        }
        Ok(out)
    }

    fn and_all(&self, parts: Vec<Dnf>) -> Result<Dnf> {
        if parts.iter().any(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let mut base = Conj::default();
        let mut multis = Vec::new();
        for p in parts {
            if p.len() == 1 {
                let Some(c) = p.into_iter().next() else {
                    continue;
                };
                base.atoms.extend(c.atoms);
                base.dims.extend(c.dims);
            } else {
                multis.push(p);
            }
        }
        let Some(mut base) = simplify(base) else {
            return Ok(Vec::new());
        };
        // Prune each disjunction against what is already known, and factor out the atoms all of
        // its conjunctions share, so that `ip4.src == {...}` under `ip4` is a plain list of
        // alternatives again (and can become a conjunctive-match dimension).
        let mut reduced = Vec::with_capacity(multis.len());
        for p in multis {
            let mut kept: Vec<Conj> = Vec::with_capacity(p.len());
            for mut c in p {
                if c.atoms.iter().any(|a| !compatible(&base.atoms, a)) {
                    continue;
                }
                c.atoms.retain(|a| !implied(&base.atoms, a));
                kept.push(c);
            }
            if kept.is_empty() {
                return Ok(Vec::new());
            }
            if kept.iter().any(|c| c.atoms.is_empty() && c.dims.is_empty()) {
                continue; // one alternative is already true
            }
            let common: Vec<Atom> = kept[0]
                .atoms
                .iter()
                .filter(|a| kept.iter().all(|c| c.atoms.contains(a)))
                .cloned()
                .collect();
            if !common.is_empty() {
                for c in &mut kept {
                    c.atoms.retain(|a| !common.contains(a));
                }
                base.atoms.extend(common);
                match simplify(base) {
                    Some(b) => base = b,
                    None => return Ok(Vec::new()),
                }
            }
            if kept.len() == 1 {
                let Some(c) = kept.pop() else { continue };
                base.atoms.extend(c.atoms);
                base.dims.extend(c.dims);
                match simplify(base) {
                    Some(b) => base = b,
                    None => return Ok(Vec::new()),
                }
            } else {
                reduced.push(kept);
            }
        }
        let product = reduced
            .iter()
            .fold(1usize, |acc, p| acc.saturating_mul(p.len()));
        let mut cross = Vec::new();
        if product <= self.limits.max_cross {
            cross = reduced;
        } else {
            for p in reduced {
                let simple = p.iter().all(|c| c.atoms.len() == 1 && c.dims.is_empty());
                if simple {
                    base.dims.push(
                        p.into_iter()
                            .filter_map(|c| c.atoms.into_iter().next())
                            .collect(),
                    );
                } else {
                    cross.push(p);
                }
            }
        }
        let mut acc: Vec<Conj> = Vec::new();
        if let Some(c) = simplify(base) {
            acc.push(c);
        }
        for p in cross {
            let n = acc.len().saturating_mul(p.len());
            if n > self.limits.max_conj {
                return Err(too_big(n, &self.limits));
            }
            let mut next = Vec::with_capacity(n);
            for a in &acc {
                for b in &p {
                    let mut c = a.clone();
                    c.atoms.extend(b.atoms.iter().cloned());
                    c.dims.extend(b.dims.iter().cloned());
                    if let Some(c) = simplify(c) {
                        next.push(c);
                    }
                }
            }
            acc = next;
        }
        Ok(acc)
    }
}

/// Whether `a` adds nothing to `atoms`.
fn implied(atoms: &[Atom], a: &Atom) -> bool {
    match a {
        Atom::Bits { field, value, mask } => atoms.iter().any(|x| {
            matches!(x, Atom::Bits { field: f, value: v, mask: m }
                if f == field && m & mask == *mask && (v ^ value) & mask == 0)
        }),
        _ => atoms.contains(a),
    }
}

fn str_atom(fid: FieldId, s: &str, op: RelOp) -> Dnf {
    vec![Conj {
        atoms: vec![Atom::Str {
            field: fid,
            value: s.to_string(),
            positive: op != RelOp::Ne,
        }],
        dims: Vec::new(),
    }]
}

fn set_atom(fid: FieldId, lo: u32, hi: u32, name: String, op: RelOp) -> Dnf {
    vec![Conj {
        atoms: vec![Atom::Set {
            field: fid,
            lo,
            hi,
            name,
            positive: op != RelOp::Ne,
        }],
        dims: Vec::new(),
    }]
}

/// Calls `emit(value, mask)` for the minimal set of prefixes covering `[a, b]` in `width` bits.
pub fn range_prefixes(a: u128, b: u128, width: u32, emit: &mut impl FnMut(u128, u128)) {
    let wm = width_mask(width);
    let mut lo = a;
    loop {
        if lo > b {
            return;
        }
        // The largest block starting at `lo` that fits in [lo, b].
        let mut size_bits = if lo == 0 {
            width
        } else {
            lo.trailing_zeros().min(width)
        };
        while size_bits > 0 {
            let span = if size_bits >= 128 {
                u128::MAX
            } else {
                (1u128 << size_bits) - 1
            };
            if lo.checked_add(span).is_some_and(|end| end <= b) {
                break;
            }
            size_bits -= 1;
        }
        let span = if size_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << size_bits) - 1
        };
        emit(lo, wm & !span);
        match lo.checked_add(span).and_then(|x| x.checked_add(1)) {
            Some(n) if n <= wm && lo + span < b => lo = n,
            _ => return,
        }
    }
}

/// Merges atoms on the same field and prunes dimensions; `None` when the conjunction is false.
fn simplify(mut c: Conj) -> Option<Conj> {
    let mut atoms: Vec<Atom> = Vec::with_capacity(c.atoms.len());
    let mut pending: Vec<Atom> = std::mem::take(&mut c.atoms);
    loop {
        for a in pending.drain(..) {
            if !add_atom(&mut atoms, a) {
                return None;
            }
        }
        let mut changed = false;
        let mut dims = Vec::with_capacity(c.dims.len());
        for dim in std::mem::take(&mut c.dims) {
            let kept: Vec<Atom> = dim.into_iter().filter(|a| compatible(&atoms, a)).collect();
            match kept.len() {
                0 => return None,
                1 => {
                    pending.extend(kept);
                    changed = true;
                }
                _ => dims.push(kept),
            }
        }
        c.dims = dims;
        if !changed {
            break;
        }
    }
    c.atoms = atoms;
    Some(c)
}

/// Whether `a` can hold together with all of `atoms` (the test [`add_atom`] makes, without
/// building anything).
fn compatible(atoms: &[Atom], a: &Atom) -> bool {
    atoms.iter().all(|x| match (x, a) {
        (
            Atom::Bits {
                field: f1,
                value: v1,
                mask: m1,
            },
            Atom::Bits {
                field: f2,
                value: v2,
                mask: m2,
            },
        ) => f1 != f2 || (v1 ^ v2) & m1 & m2 == 0,
        (
            Atom::Str {
                field: f1,
                value: v1,
                positive: p1,
            },
            Atom::Str {
                field: f2,
                value: v2,
                positive: p2,
            },
        ) => f1 != f2 || if v1 == v2 { p1 == p2 } else { !(*p1 && *p2) },
        (
            Atom::Resident {
                port: a1,
                positive: p1,
            },
            Atom::Resident {
                port: a2,
                positive: p2,
            },
        ) => a1 != a2 || p1 == p2,
        _ => true,
    })
}

/// Adds `a` to `atoms`, merging; false on contradiction.
fn add_atom(atoms: &mut Vec<Atom>, a: Atom) -> bool {
    match a {
        Atom::Bits { mask: 0, .. } => true,
        Atom::Bits { field, value, mask } => {
            for x in atoms.iter_mut() {
                if let Atom::Bits {
                    field: f2,
                    value: v2,
                    mask: m2,
                } = x
                    && *f2 == field
                {
                    if (*v2 ^ value) & *m2 & mask != 0 {
                        return false;
                    }
                    *v2 |= value;
                    *m2 |= mask;
                    return true;
                }
            }
            atoms.push(Atom::Bits { field, value, mask });
            true
        }
        Atom::Str {
            field,
            ref value,
            positive,
        } => {
            for x in atoms.iter() {
                if let Atom::Str {
                    field: f2,
                    value: v2,
                    positive: p2,
                } = x
                    && *f2 == field
                {
                    let same = v2 == value;
                    if (positive && *p2 && !same) || (same && positive != *p2) {
                        return false;
                    }
                    if same {
                        return true;
                    }
                }
            }
            atoms.push(a);
            true
        }
        Atom::Resident { ref port, positive } => {
            for x in atoms.iter() {
                if let Atom::Resident {
                    port: p2,
                    positive: q,
                } = x
                    && p2 == port
                {
                    return *q == positive;
                }
            }
            atoms.push(a);
            true
        }
        Atom::Set { .. } => {
            if !atoms.contains(&a) {
                atoms.push(a);
            }
            true
        }
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Bits {
                field: id,
                value,
                mask,
            } => {
                let d = field(*id);
                let w = d.width;
                if *mask == width_mask(w) {
                    write!(f, "{} == {value:#x}", d.name)
                } else {
                    write!(f, "{} == {value:#x}/{mask:#x}", d.name)
                }
            }
            Atom::Str {
                field: id,
                value,
                positive,
            } => {
                write!(
                    f,
                    "{} {} ",
                    field(*id).name,
                    if *positive { "==" } else { "!=" }
                )?;
                crate::printer::write_str_lit(f, value)
            }
            Atom::Resident { port, positive } => {
                if !positive {
                    f.write_str("!")?;
                }
                f.write_str("is_chassis_resident(")?;
                crate::printer::write_str_lit(f, port)?;
                f.write_str(")")
            }
            Atom::Set {
                field: id,
                lo,
                hi,
                name,
                positive,
            } => {
                let d = field(*id);
                let op = if *positive { "in" } else { "not in" };
                if *lo == 0 && *hi + 1 == d.width.max(1) || d.string {
                    write!(f, "{} {op} {name}", d.name)
                } else {
                    write!(f, "{}[{lo}..{hi}] {op} {name}", d.name)
                }
            }
        }
    }
}

impl fmt::Display for Normalized {
    /// One conjunction per line; dimensions as `conjunction(a | b | ...)`; `0` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.disjuncts.is_empty() {
            return f.write_str("0\n");
        }
        for c in &self.disjuncts {
            let mut parts: Vec<String> = c.atoms.iter().map(ToString::to_string).collect();
            for d in &c.dims {
                let alts: Vec<String> = d.iter().map(ToString::to_string).collect();
                parts.push(format!("conjunction({})", alts.join(" | ")));
            }
            if parts.is_empty() {
                parts.push("1".into());
            }
            writeln!(f, "{}", parts.join(" && "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SymbolTable;

    fn prefixes(a: u128, b: u128, w: u32) -> Vec<(u128, u128)> {
        let mut v = Vec::new();
        range_prefixes(a, b, w, &mut |x, m| v.push((x, m)));
        v
    }

    #[test]
    fn large_sets_become_dimensions_not_cross_products() {
        let symtab = SymbolTable::shared();
        let mut sets = Sets::default();
        let big: Vec<Constant> = (0..10_000u128)
            .map(|i| Constant::new(0x0a00_0000 + i, crate::constant::Format::Ipv4))
            .collect();
        sets.addr_sets.insert("big".into(), big);
        sets.port_groups
            .insert("pg".into(), (0..50).map(|i| format!("p{i}")).collect());
        let e = crate::parse_match(
            symtab,
            "outport == @pg && ip4 && ip4.src == $big && tcp.dst == {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}",
        )
        .expect("parses");
        let n = Normalizer::new(symtab, Limits::default())
            .normalize(&e, &sets)
            .expect("normalises");
        // 50 x 10,000 x 10 = 5,000,000 conjunctions if multiplied out; as dimensions it stays
        // one conjunction with about 10,060 atoms.
        assert_eq!(n.disjuncts.len(), 1, "{}", n.disjuncts.len());
        assert_eq!(n.disjuncts[0].dims.len(), 3);
        assert!(n.atom_count() < 10_100, "{}", n.atom_count());
    }

    #[test]
    fn ranges_become_minimal_prefix_covers() {
        assert_eq!(prefixes(0, 1023, 16), vec![(0, 0xfc00)]);
        assert_eq!(
            prefixes(5432, 5440, 16),
            vec![(0x1538, 0xfff8), (0x1540, 0xffff)]
        );
        assert_eq!(prefixes(0, 0xffff, 16), vec![(0, 0)]);
        assert_eq!(prefixes(0, u128::MAX, 128), vec![(0, 0)]);
        // Every value in range is covered exactly once, nothing outside is.
        for (a, b) in [(3u128, 200u128), (1, 254), (17, 17)] {
            let p = prefixes(a, b, 8);
            for x in 0u128..256 {
                let hits = p.iter().filter(|(v, m)| x & m == *v).count();
                assert_eq!(hits, usize::from((a..=b).contains(&x)), "{x} in [{a},{b}]");
            }
        }
    }
}
