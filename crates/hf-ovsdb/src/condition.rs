//! Conditions (`where` clauses, RFC 7047 section 5.1) and their evaluation.

use std::cmp::Ordering;

use serde_json::Value;
use uuid::Uuid;

use crate::atom::{Atom, AtomicType, describe_json};
use crate::datum::Datum;
use crate::db::Row;
use crate::error::{OvsdbError, Result};
use crate::schema::{ColumnRef, TableSchema};
use crate::types::ColumnType;

/// A comparison function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>=`
    Ge,
    /// `>`
    Gt,
    /// `includes`
    Includes,
    /// `excludes`
    Excludes,
}

impl Function {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "<" => Function::Lt,
            "<=" => Function::Le,
            "==" => Function::Eq,
            "!=" => Function::Ne,
            ">=" => Function::Ge,
            ">" => Function::Gt,
            "includes" => Function::Includes,
            "excludes" => Function::Excludes,
            _ => return None,
        })
    }
}

/// One clause: a column compared with a value, or a boolean constant (monitor conditions).
#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    /// Constant true or false.
    Const(bool),
    /// `[column, function, value]`.
    Compare {
        /// The column.
        column: ColumnRef,
        /// The function.
        function: Function,
        /// The value.
        arg: Datum,
    },
}

/// The type of `_uuid` and `_version`.
pub fn uuid_column_type() -> &'static ColumnType {
    static T: std::sync::OnceLock<ColumnType> = std::sync::OnceLock::new();
    T.get_or_init(|| ColumnType::scalar(AtomicType::Uuid))
}

impl Clause {
    /// Parse one `<condition>` (or, if `allow_bool`, a JSON boolean).
    pub fn from_json(
        table: &TableSchema,
        v: &Value,
        allow_bool: bool,
        named: &mut dyn FnMut(&str) -> Result<Uuid>,
    ) -> Result<Self> {
        if allow_bool && let Some(b) = v.as_bool() {
            return Ok(Clause::Const(b));
        }
        let [col, func, arg] = v.as_array().map(Vec::as_slice).unwrap_or_default() else {
            return Err(OvsdbError::syntax(format!(
                "condition must be [column, function, value], not {}",
                describe_json(v)
            )));
        };
        let cname = col
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("condition column must be a string"))?;
        let column = table.column_ref(cname)?;
        let fname = func
            .as_str()
            .ok_or_else(|| OvsdbError::syntax("condition function must be a string"))?;
        let function = Function::parse(fname).ok_or_else(|| {
            OvsdbError::syntax(format!("unknown function \"{fname}\" in condition"))
        })?;
        let ty = table.column_type(column, uuid_column_type());
        match function {
            Function::Lt | Function::Le | Function::Gt | Function::Ge
                if (!(ty.is_scalar() || ty.is_optional())
                    || !matches!(ty.key.atomic, AtomicType::Integer | AtomicType::Real)) =>
            {
                return Err(OvsdbError::syntax(format!(
                    "type mismatch: \"{fname}\" requires an integer or real column, but {cname} is not"
                )));
            }
            _ => {}
        }
        // includes/excludes (and == on sets) may name any number of elements.
        let mut loose = ty.clone();
        loose.min = 0;
        loose.max = usize::MAX;
        let arg = match function {
            Function::Includes | Function::Excludes => {
                Datum::from_json_unchecked(&loose, arg, named)?
            }
            Function::Eq | Function::Ne => {
                let d = Datum::from_json_unchecked(&loose, arg, named)?;
                d.check_atoms(ty)?;
                d
            }
            _ => Datum::from_json(&ColumnType::scalar(ty.key.atomic), arg, named)?,
        };
        Ok(Clause::Compare {
            column,
            function,
            arg,
        })
    }

    /// Evaluate against a row.
    pub fn eval(&self, row: &Row) -> bool {
        let Clause::Compare {
            column,
            function,
            arg,
        } = self
        else {
            return matches!(self, Clause::Const(true));
        };
        let tmp;
        let val: &Datum = match column {
            ColumnRef::User(i) => &row.cols[*i],
            ColumnRef::Uuid => {
                tmp = Datum::scalar(Atom::Uuid(row.uuid));
                &tmp
            }
            ColumnRef::Version => {
                tmp = Datum::scalar(Atom::Uuid(row.version));
                &tmp
            }
        };
        match function {
            Function::Eq => val == arg,
            Function::Ne => val != arg,
            Function::Includes => includes(val, arg),
            Function::Excludes => excludes(val, arg),
            Function::Lt | Function::Le | Function::Gt | Function::Ge => {
                let (Some(a), Some(b)) = (val.first(), arg.first()) else {
                    return false;
                };
                let o = a.cmp(b);
                match function {
                    Function::Lt => o == Ordering::Less,
                    Function::Le => o != Ordering::Greater,
                    Function::Gt => o == Ordering::Greater,
                    _ => o != Ordering::Less,
                }
            }
        }
    }

    /// If this clause is `_uuid == X`, the X.
    pub fn uuid_eq(&self) -> Option<Uuid> {
        match self {
            Clause::Compare {
                column: ColumnRef::Uuid,
                function: Function::Eq,
                arg,
            } if arg.len() == 1 => arg.keys[0].as_uuid(),
            _ => None,
        }
    }
}

fn includes(val: &Datum, arg: &Datum) -> bool {
    if val.values.is_empty() && !arg.values.is_empty() {
        return false;
    }
    if arg.values.is_empty() {
        arg.keys.iter().all(|k| val.contains(k))
    } else {
        arg.pairs().all(|(k, v)| val.get(k) == Some(v))
    }
}

fn excludes(val: &Datum, arg: &Datum) -> bool {
    if arg.values.is_empty() {
        arg.keys.iter().all(|k| !val.contains(k))
    } else {
        arg.pairs().all(|(k, v)| val.get(k) != Some(v))
    }
}

/// A `where` clause of a transaction operation: a conjunction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Where {
    /// All must hold.
    pub clauses: Vec<Clause>,
}

impl Where {
    /// Parse `[<condition>*]`.
    pub fn from_json(
        table: &TableSchema,
        v: &Value,
        named: &mut dyn FnMut(&str) -> Result<Uuid>,
    ) -> Result<Self> {
        let arr = v.as_array().ok_or_else(|| {
            OvsdbError::syntax(format!(
                "\"where\" must be an array, not {}",
                describe_json(v)
            ))
        })?;
        let clauses = arr
            .iter()
            .map(|c| Clause::from_json(table, c, false, named))
            .collect::<Result<_>>()?;
        Ok(Where { clauses })
    }

    /// Every clause holds.
    pub fn eval(&self, row: &Row) -> bool {
        self.clauses.iter().all(|c| c.eval(row))
    }

    /// A `_uuid == X` clause, for direct lookup.
    pub fn uuid_eq(&self) -> Option<Uuid> {
        self.clauses.iter().find_map(Clause::uuid_eq)
    }
}

/// A monitor condition: a disjunction (a row matches if any clause holds; no clauses means
/// true, as ovsdb-server(7) specifies for `monitor_cond`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MonitorCondition {
    /// Any may hold; empty means every row.
    pub clauses: Vec<Clause>,
}

impl MonitorCondition {
    /// Parse `[<condition or boolean>*]`.
    pub fn from_json(table: &TableSchema, v: &Value) -> Result<Self> {
        let arr = v.as_array().ok_or_else(|| {
            OvsdbError::syntax(format!(
                "\"where\" must be an array, not {}",
                describe_json(v)
            ))
        })?;
        let mut no_named = |n: &str| -> Result<Uuid> {
            Err(OvsdbError::syntax(format!(
                "named-uuid \"{n}\" is not allowed in a monitor condition"
            )))
        };
        let clauses = arr
            .iter()
            .map(|c| Clause::from_json(table, c, true, &mut no_named))
            .collect::<Result<_>>()?;
        Ok(MonitorCondition { clauses })
    }

    /// Whether `row` matches.
    pub fn eval(&self, row: &Row) -> bool {
        self.clauses.is_empty() || self.clauses.iter().any(|c| c.eval(row))
    }
}
