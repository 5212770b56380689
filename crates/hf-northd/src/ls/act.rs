//! Small constructors for the actions and matches switch stages repeat (typed, no text).

use hf_expr::Action;
use hf_expr::Span;
use hf_expr::actions::{NatKind, NestedKind, ResultFn};
use hf_expr::ast::{Expr, FieldRef};

use crate::build::{eq_num, f, num, s};
use crate::regs::Reg;

/// `next;`
pub fn next() -> Action {
    Action::next()
}

/// `output;`
pub fn output() -> Action {
    Action::output()
}

/// `REG = V;` for a register use.
pub fn set(r: Reg, v: u128) -> Action {
    Action::assign(r.field(), num(v))
}

/// `REG == V` for a register use.
pub fn is(r: Reg, v: u128) -> Expr {
    eq_num(r.field(), v)
}

/// `outport = "P";`
pub fn set_outport(p: &str) -> Action {
    Action::assign(f("outport"), s(p))
}

/// `outport = "P"; output;`
pub fn to_port(p: &str) -> Vec<Action> {
    vec![set_outport(p), output()]
}

/// `flags.loopback = 1;`
pub fn loopback() -> Action {
    Action::assign(f("flags.loopback"), num(1))
}

/// `a <-> b;`
pub fn exchange(a: &str, b: &str) -> Action {
    Action::Exchange {
        a: f(a),
        b: f(b),
        span: Span::default(),
    }
}

/// `DST = FUNC;`
pub fn result(dst: FieldRef, func: ResultFn) -> Action {
    Action::Result {
        dst,
        func,
        span: Span::default(),
    }
}

/// `ct_snat;`
pub fn ct_snat() -> Action {
    Action::CtNat {
        kind: NatKind::Snat,
        target: None,
        span: Span::default(),
    }
}

/// `ct_lb_mark;` (render lowers it to `ct_lb;` for older chassis).
pub fn ct_lb_mark() -> Action {
    Action::CtLb {
        mark: true,
        args: None,
        span: Span::default(),
    }
}

/// `ct_commit;`
pub fn ct_commit_bare() -> Action {
    Action::CtCommit {
        args: hf_expr::actions::CtCommit::Bare,
        span: Span::default(),
    }
}

/// `clone { body };`
pub fn clone(body: Vec<Action>) -> Action {
    Action::nested(NestedKind::Clone, body)
}

/// `field == {v1, ...}`, written as a set even with one member (as OVN writes some matches).
pub fn set_of(field: &str, values: impl IntoIterator<Item = hf_expr::Value>) -> hf_expr::ast::Expr {
    hf_expr::ast::Expr::Cmp {
        field: f(field),
        op: hf_expr::RelOp::Eq,
        rhs: hf_expr::Rhs::Set(values.into_iter().map(hf_expr::Term::new).collect()),
    }
}
