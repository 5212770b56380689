//! The match syntax tree. Built by [`crate::parse_match`] or by hand (northd); printed by its
//! `Display` impl into text that parses back to the same tree.

use crate::constant::Constant;
use crate::diag::Span;

/// `[n]` or `[lo..hi]` after a field name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Subscript {
    /// `f[n]`
    Bit(u32),
    /// `f[lo..hi]`, both inclusive.
    Range(u32, u32),
}

impl Subscript {
    /// (lowest bit, highest bit), inclusive.
    pub fn bounds(self) -> (u32, u32) {
        match self {
            Subscript::Bit(b) => (b, b),
            Subscript::Range(l, h) => (l, h),
        }
    }
}

/// A reference to a symbol, possibly subscripted: `tcp.dst`, `reg0[1]`, `xxreg0[0..47]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldRef {
    /// The symbol's name.
    pub name: String,
    /// The subscript, if any.
    pub sub: Option<Subscript>,
    /// Where it was written.
    pub span: Span,
}

impl FieldRef {
    /// A field without subscript.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            sub: None,
            span: Span::default(),
        }
    }

    /// A field with a bit range.
    pub fn bits(name: impl Into<String>, lo: u32, hi: u32) -> Self {
        Self {
            name: name.into(),
            sub: Some(if lo == hi {
                Subscript::Bit(lo)
            } else {
                Subscript::Range(lo, hi)
            }),
            span: Span::default(),
        }
    }
}

/// A value on the right of a relation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Value {
    /// An integer constant, possibly masked.
    Const(Constant),
    /// A string.
    Str(String),
    /// `$name`: an address set, or a port group's `_ip4`/`_ip6` set.
    AddrSet(String),
    /// `@name`: a port group.
    PortGroup(String),
    /// `^name`: a chassis template variable (OVN 23.03).
    Template(String),
}

/// A value with its span.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    /// The value.
    pub value: Value,
    /// Where it was written.
    pub span: Span,
}

impl Term {
    /// A term without a span.
    pub fn new(value: Value) -> Self {
        Self {
            value,
            span: Span::default(),
        }
    }
}

/// The right-hand side of a relation: a value or a set `{...}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rhs {
    /// One value.
    One(Term),
    /// `{a, b, ...}`
    Set(Vec<Term>),
}

impl Rhs {
    /// The values, one or many.
    pub fn terms(&self) -> &[Term] {
        match self {
            Rhs::One(t) => std::slice::from_ref(t),
            Rhs::Set(v) => v,
        }
    }
}

/// A relational operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RelOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl RelOp {
    /// The operator's text.
    pub fn as_str(self) -> &'static str {
        match self {
            RelOp::Eq => "==",
            RelOp::Ne => "!=",
            RelOp::Lt => "<",
            RelOp::Le => "<=",
            RelOp::Gt => ">",
            RelOp::Ge => ">=",
        }
    }

    /// The operator with its operands swapped (`a < b` is `b > a`).
    pub fn flip(self) -> Self {
        match self {
            RelOp::Lt => RelOp::Gt,
            RelOp::Le => RelOp::Ge,
            RelOp::Gt => RelOp::Lt,
            RelOp::Ge => RelOp::Le,
            o => o,
        }
    }

    /// The negated operator (`!(a < b)` is `a >= b`).
    pub fn negate(self) -> Self {
        match self {
            RelOp::Eq => RelOp::Ne,
            RelOp::Ne => RelOp::Eq,
            RelOp::Lt => RelOp::Ge,
            RelOp::Le => RelOp::Gt,
            RelOp::Gt => RelOp::Le,
            RelOp::Ge => RelOp::Lt,
        }
    }
}

/// A match expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Expr {
    /// The literals `1` (true) and `0` (false).
    Bool(bool),
    /// A one-bit field or a predicate named on its own: `ct.est`, `tcp`, `reg0[3]`.
    Field(FieldRef),
    /// `!e`
    Not(Box<Expr>),
    /// `a && b && ...` (at least two operands, none of them an `And`).
    And(Vec<Expr>),
    /// `a || b || ...` (at least two operands, none of them an `Or`).
    Or(Vec<Expr>),
    /// `field OP value` or `field OP {set}`.
    Cmp {
        /// The field.
        field: FieldRef,
        /// The operator.
        op: RelOp,
        /// The value(s).
        rhs: Rhs,
    },
    /// `low OP field OP high`, each `OP` being `<` or `<=` (or both `>`/`>=`).
    Range {
        /// The field in the middle.
        field: FieldRef,
        /// The first constant.
        low: Term,
        /// The operator after `low`.
        low_op: RelOp,
        /// The operator before `high`.
        high_op: RelOp,
        /// The last constant.
        high: Term,
    },
    /// `is_chassis_resident("port")`.
    ChassisResident {
        /// The logical port.
        port: String,
        /// Where it was written.
        span: Span,
    },
}

impl Expr {
    /// `field == value`.
    pub fn eq(field: FieldRef, value: Value) -> Expr {
        Expr::Cmp {
            field,
            op: RelOp::Eq,
            rhs: Rhs::One(Term::new(value)),
        }
    }

    /// The conjunction of `parts`, flattened; `1` when empty.
    pub fn and(parts: Vec<Expr>) -> Expr {
        Self::join(parts, true)
    }

    /// The disjunction of `parts`, flattened; `0` when empty.
    pub fn or(parts: Vec<Expr>) -> Expr {
        Self::join(parts, false)
    }

    fn join(parts: Vec<Expr>, and: bool) -> Expr {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            match (p, and) {
                (Expr::And(v), true) | (Expr::Or(v), false) => out.extend(v),
                (p, _) => out.push(p),
            }
        }
        match out.len() {
            0 => Expr::Bool(and),
            1 => out.pop().unwrap_or(Expr::Bool(and)),
            _ if and => Expr::And(out),
            _ => Expr::Or(out),
        }
    }
}
