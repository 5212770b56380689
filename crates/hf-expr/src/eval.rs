//! Reference evaluation of matches against a packet, directly from the syntax tree (with
//! prerequisites and predicate expansions), and of normalised matches. Used by tests to check
//! that normalisation preserves meaning, and by `hf-pipeline`'s tests as an oracle.

use crate::ast::{Expr, FieldRef, RelOp, Rhs, Value};
use crate::constant::width_mask;
use crate::normalize::{Atom, Normalized, Sets};
use crate::symbols::{FIELDS, FieldId, SymbolKind, SymbolTable};
use crate::typecheck::resolve;

/// A packet's fields and context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// Integer fields, indexed by [`FieldId`].
    pub values: Vec<u128>,
    /// `inport` and `outport`.
    pub ports: [String; 2],
    /// Ports resident on this chassis.
    pub resident: Vec<String>,
}

impl Default for Packet {
    fn default() -> Self {
        Self {
            values: vec![0; FIELDS.len()],
            ports: [String::new(), String::new()],
            resident: Vec::new(),
        }
    }
}

impl Packet {
    /// Sets a field by name; false when there is no such integer field.
    pub fn set(&mut self, name: &str, value: u128) -> bool {
        match crate::symbols::field_id(name) {
            Some(id) => {
                self.values[id.0 as usize] = value & width_mask(FIELDS[id.0 as usize].width);
                true
            }
            None => false,
        }
    }

    fn get(&self, id: FieldId) -> u128 {
        self.values.get(id.0 as usize).copied().unwrap_or(0)
    }

    fn port(&self, id: FieldId) -> &str {
        self.ports.get(id.0 as usize).map_or("", String::as_str)
    }
}

/// Evaluates a type-checked match. Unknown sets are empty.
///
/// Negation is pushed into the comparisons and each comparison then requires its field's
/// prerequisites, as OVN does: `!(tcp.dst == 80)` holds for TCP packets to other ports only.
pub fn eval_expr(symtab: &SymbolTable, e: &Expr, p: &Packet, sets: &Sets) -> bool {
    eval(symtab, e, false, p, sets)
}

fn eval(symtab: &SymbolTable, e: &Expr, neg: bool, p: &Packet, sets: &Sets) -> bool {
    match e {
        Expr::Bool(b) => *b != neg,
        Expr::Not(x) => eval(symtab, x, !neg, p, sets),
        Expr::And(v) if !neg => v.iter().all(|x| eval(symtab, x, neg, p, sets)),
        Expr::And(v) => v.iter().any(|x| eval(symtab, x, neg, p, sets)),
        Expr::Or(v) if !neg => v.iter().any(|x| eval(symtab, x, neg, p, sets)),
        Expr::Or(v) => v.iter().all(|x| eval(symtab, x, neg, p, sets)),
        Expr::ChassisResident { port, .. } => p.resident.contains(port) != neg,
        Expr::Field(f) => relation(symtab, f, neg, p, sets, &|x, _| x != 0, &|_| false),
        Expr::Cmp { field, op, rhs } => {
            let test = |x: u128, width: u32| -> bool {
                let hit = |v: &Value| -> bool {
                    match v {
                        Value::Const(c) => {
                            let m = c.mask_bits(width) & width_mask(width);
                            match op {
                                RelOp::Eq | RelOp::Ne => x & m == c.value & m,
                                RelOp::Lt => x < c.value,
                                RelOp::Le => x <= c.value,
                                RelOp::Gt => x > c.value,
                                RelOp::Ge => x >= c.value,
                            }
                        }
                        Value::AddrSet(n) => sets.addr_sets.get(n).is_some_and(|l| {
                            l.iter().any(|c| {
                                let m = c.mask_bits(width) & width_mask(width);
                                x & m == c.value & m
                            })
                        }),
                        _ => false,
                    }
                };
                match (op, rhs) {
                    (RelOp::Ne, _) => !rhs.terms().iter().any(|t| hit(&t.value)),
                    (_, Rhs::One(t)) => hit(&t.value),
                    (_, Rhs::Set(v)) => v.iter().any(|t| hit(&t.value)),
                }
            };
            let stest = |s: &str| -> bool {
                let hit = rhs.terms().iter().any(|t| match &t.value {
                    Value::Str(v) => v == s,
                    Value::PortGroup(g) => sets
                        .port_groups
                        .get(g)
                        .is_some_and(|l| l.iter().any(|x| x == s)),
                    _ => false,
                });
                if *op == RelOp::Ne { !hit } else { hit }
            };
            relation(symtab, field, neg, p, sets, &test, &stest)
        }
        Expr::Range {
            field,
            low,
            low_op,
            high_op,
            high,
        } => {
            let val = |t: &crate::ast::Term| match &t.value {
                Value::Const(c) => c.value,
                _ => 0,
            };
            let (a, b) = (val(low), val(high));
            let test = |x: u128, _| {
                let first = match low_op {
                    RelOp::Lt => a < x,
                    RelOp::Le => a <= x,
                    RelOp::Gt => a > x,
                    _ => a >= x,
                };
                let second = match high_op {
                    RelOp::Lt => x < b,
                    RelOp::Le => x <= b,
                    RelOp::Gt => x > b,
                    _ => x >= b,
                };
                first && second
            };
            relation(symtab, field, neg, p, sets, &test, &|_| false)
        }
    }
}

/// Evaluates a use of `f`: the (possibly negated) test on its bits, and, positively, its
/// prerequisites.
fn relation(
    symtab: &SymbolTable,
    f: &FieldRef,
    neg: bool,
    p: &Packet,
    sets: &Sets,
    test: &dyn Fn(u128, u32) -> bool,
    stest: &dyn Fn(&str) -> bool,
) -> bool {
    let Ok(r) = resolve(symtab, f) else {
        return false;
    };
    let holds = match (&r.symbol.kind, r.bits) {
        (SymbolKind::Predicate(e), _) => {
            // `pred OP v` is `pred` or `!pred`: evaluate the expansion with the negation pushed
            // into it.
            let want_true = test(1, 1);
            let want_false = test(0, 1);
            match (want_true, want_false) {
                (true, true) => !neg,
                (false, false) => neg,
                (true, false) => eval(symtab, e, neg, p, sets),
                (false, true) => eval(symtab, e, !neg, p, sets),
            }
        }
        (_, Some((id, _, _))) if r.symbol.string => stest(p.port(id)) != neg,
        (_, Some((id, lo, hi))) => {
            let w = hi - lo + 1;
            test((p.get(id) >> lo) & width_mask(w), w) != neg
        }
        _ => false,
    };
    holds
        && r.symbol
            .prereq
            .as_ref()
            .is_none_or(|pre| eval(symtab, pre, false, p, sets))
}

fn eval_atom(a: &Atom, p: &Packet) -> bool {
    match a {
        Atom::Bits { field, value, mask } => p.get(*field) & mask == *value & mask,
        Atom::Str {
            field,
            value,
            positive,
        } => (p.port(*field) == value) == *positive,
        Atom::Resident { port, positive } => p.resident.contains(port) == *positive,
        Atom::Set { positive, .. } => !positive,
    }
}

/// Evaluates a normalised match.
pub fn eval_normalized(n: &Normalized, p: &Packet) -> bool {
    n.disjuncts.iter().any(|c| {
        c.atoms.iter().all(|a| eval_atom(a, p))
            && c.dims.iter().all(|d| d.iter().any(|a| eval_atom(a, p)))
    })
}
