//! Mutations (RFC 7047 section 5.1, `mutate` operation).

use serde_json::Value;
use uuid::Uuid;

use crate::atom::{Atom, AtomicType, describe_json};
use crate::datum::Datum;
use crate::error::{ErrorKind, OvsdbError, Result};
use crate::schema::{ColumnRef, TableSchema};
use crate::types::ColumnType;

/// A mutator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutator {
    /// `+=`
    Add,
    /// `-=`
    Sub,
    /// `*=`
    Mul,
    /// `/=`
    Div,
    /// `%=`
    Mod,
    /// `insert`
    Insert,
    /// `delete`
    Delete,
}

/// One parsed mutation.
#[derive(Debug, Clone)]
pub struct Mutation {
    /// Column index.
    pub column: usize,
    /// What to do.
    pub mutator: Mutator,
    /// The argument.
    pub arg: Datum,
    /// For `delete` on a map: the argument is a set of keys rather than a map.
    pub arg_is_keys: bool,
}

impl Mutation {
    /// Parse `[column, mutator, value]`.
    pub fn from_json(
        table: &TableSchema,
        v: &Value,
        named: &mut dyn FnMut(&str) -> Result<Uuid>,
    ) -> Result<Self> {
        let [col, m, arg] = v.as_array().map(Vec::as_slice).unwrap_or_default() else {
            return Err(OvsdbError::syntax(format!(
                "mutation must be [column, mutator, value], not {}",
                describe_json(v)
            )));
        };
        let cname = col
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("mutation column must be a string"))?;
        let column = match table.column_ref(cname)? {
            ColumnRef::User(i) => i,
            _ => {
                return Err(OvsdbError::constraint(format!(
                    "cannot mutate column {cname}"
                )));
            }
        };
        let cs = &table.columns[column];
        if !cs.mutable {
            return Err(OvsdbError::constraint(format!(
                "cannot mutate immutable column {cname} in table {}",
                table.name
            )));
        }
        let mname = m
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("mutator must be a string"))?;
        let mutator = match mname {
            "+=" => Mutator::Add,
            "-=" => Mutator::Sub,
            "*=" => Mutator::Mul,
            "/=" => Mutator::Div,
            "%=" => Mutator::Mod,
            "insert" => Mutator::Insert,
            "delete" => Mutator::Delete,
            _ => return Err(OvsdbError::syntax(format!("unknown mutator \"{mname}\""))),
        };
        let ty = &cs.ty;
        let mut loose = ty.clone();
        loose.min = 0;
        loose.max = usize::MAX;
        let (arg, arg_is_keys) = match mutator {
            Mutator::Insert => (Datum::from_json_unchecked(&loose, arg, named)?, false),
            Mutator::Delete => {
                let is_map_arg = arg
                    .as_array()
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                    .is_some_and(|s| s == "map");
                if ty.is_map() && !is_map_arg {
                    let keys_ty = ColumnType {
                        key: ty.key.clone(),
                        value: None,
                        min: 0,
                        max: usize::MAX,
                    };
                    (Datum::from_json_unchecked(&keys_ty, arg, named)?, true)
                } else {
                    (Datum::from_json_unchecked(&loose, arg, named)?, false)
                }
            }
            _ => {
                if ty.is_map() || !matches!(ty.key.atomic, AtomicType::Integer | AtomicType::Real) {
                    return Err(OvsdbError::syntax(format!(
                        "type mismatch: mutator \"{mname}\" requires an integer or real column, \
                         but column {cname} is not"
                    )));
                }
                if mutator == Mutator::Mod && ty.key.atomic != AtomicType::Integer {
                    return Err(OvsdbError::syntax(format!(
                        "type mismatch: \"%=\" requires an integer column, but column {cname} is real"
                    )));
                }
                let d = Datum::from_json(&ColumnType::scalar(ty.key.atomic), arg, named)?;
                (d, false)
            }
        };
        Ok(Mutation {
            column,
            mutator,
            arg,
            arg_is_keys,
        })
    }

    /// Apply to `d`, a value of column type `ty`, and check the result against the type.
    pub fn apply(&self, ty: &ColumnType, d: &mut Datum) -> Result<()> {
        match self.mutator {
            Mutator::Insert => {
                self.arg.check_atoms(ty)?;
                d.union(&self.arg, ty.is_map());
            }
            Mutator::Delete => d.subtract(&self.arg, ty.is_map(), self.arg_is_keys),
            _ => {
                let Some(operand) = self.arg.first() else {
                    return Err(OvsdbError::syntax("arithmetic mutation needs a value"));
                };
                let mut out = Vec::with_capacity(d.keys.len());
                for a in &d.keys {
                    out.push(arith(self.mutator, a, operand)?);
                }
                let n = out.len();
                let nd = Datum::set_from(out);
                if nd.len() != n {
                    return Err(OvsdbError::constraint(
                        "result of the arithmetic mutation contains duplicate values",
                    ));
                }
                nd.check_atoms(ty)?;
                *d = nd;
            }
        }
        d.check_size(ty)
    }
}

fn arith(m: Mutator, a: &Atom, b: &Atom) -> Result<Atom> {
    let range = || {
        OvsdbError::new(
            ErrorKind::Range,
            "result of arithmetic mutation is out of range",
        )
    };
    let domain = || OvsdbError::new(ErrorKind::Domain, "division by zero");
    match (a, b) {
        (Atom::Integer(x), Atom::Integer(y)) => {
            let r = match m {
                Mutator::Add => x.checked_add(*y).ok_or_else(range)?,
                Mutator::Sub => x.checked_sub(*y).ok_or_else(range)?,
                Mutator::Mul => x.checked_mul(*y).ok_or_else(range)?,
                Mutator::Div => {
                    if *y == 0 {
                        return Err(domain());
                    }
                    x.checked_div(*y).ok_or_else(range)?
                }
                _ => {
                    if *y == 0 {
                        return Err(domain());
                    }
                    x.checked_rem(*y).ok_or_else(range)?
                }
            };
            Ok(Atom::Integer(r))
        }
        (Atom::Real(x), Atom::Real(y)) => {
            let r = match m {
                Mutator::Add => x + y,
                Mutator::Sub => x - y,
                Mutator::Mul => x * y,
                _ => {
                    if *y == 0.0 {
                        return Err(domain());
                    }
                    x / y
                }
            };
            if !r.is_finite() {
                return Err(range());
            }
            Ok(Atom::Real(r))
        }
        _ => Err(OvsdbError::syntax("type mismatch in arithmetic mutation")),
    }
}
