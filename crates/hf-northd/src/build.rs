//! Small constructors for the match trees stages build (hf-expr's `Action` has its own).

use std::net::{Ipv4Addr, Ipv6Addr};

use hf_expr::ast::{Expr, FieldRef, RelOp, Rhs, Term, Value};
use hf_expr::constant::{Constant, Format, Mask};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::addr::Mac;

/// A field by name (`eth.src`, `reg0`).
pub fn f(name: &str) -> FieldRef {
    FieldRef::new(name)
}

/// A predicate or 1-bit field standing alone (`ip4`, `ct.est`, `reg0[7]`).
pub fn pred(name: &str) -> Expr {
    Expr::Field(FieldRef::new(name))
}

/// A 1-bit field reference (`reg0[7]`) as a match term.
pub fn bit(field: FieldRef) -> Expr {
    Expr::Field(field)
}

/// `!e`.
pub fn not(e: Expr) -> Expr {
    Expr::Not(Box::new(e))
}

/// `a && b && ...`.
pub fn and(parts: impl IntoIterator<Item = Expr>) -> Expr {
    Expr::and(parts.into_iter().collect())
}

/// `a || b || ...`.
pub fn or(parts: impl IntoIterator<Item = Expr>) -> Expr {
    Expr::or(parts.into_iter().collect())
}

/// `1` (matches everything).
pub fn always() -> Expr {
    Expr::Bool(true)
}

/// `field == value`.
pub fn eq(field: FieldRef, value: Value) -> Expr {
    Expr::eq(field, value)
}

/// `field != value`.
pub fn ne(field: FieldRef, value: Value) -> Expr {
    Expr::Cmp {
        field,
        op: RelOp::Ne,
        rhs: Rhs::One(Term::new(value)),
    }
}

/// `field == {v1, v2, ...}`.
pub fn in_set(field: FieldRef, values: impl IntoIterator<Item = Value>) -> Expr {
    let mut terms: Vec<Term> = values.into_iter().map(Term::new).collect();
    let rhs = if terms.len() == 1 {
        match terms.pop() {
            Some(t) => Rhs::One(t),
            None => Rhs::Set(terms),
        }
    } else {
        Rhs::Set(terms)
    };
    Expr::Cmp {
        field,
        op: RelOp::Eq,
        rhs,
    }
}

/// `field == "port"` (strings: port names).
pub fn eq_str(field: &str, s: &str) -> Expr {
    eq(f(field), Value::Str(s.to_string()))
}

/// `inport == "port"`.
pub fn inport(p: &str) -> Expr {
    eq_str("inport", p)
}

/// `outport == "port"`.
pub fn outport(p: &str) -> Expr {
    eq_str("outport", p)
}

/// `field == N` (decimal).
pub fn eq_num(field: FieldRef, n: u128) -> Expr {
    eq(field, num(n))
}

/// A decimal constant.
pub fn num(n: u128) -> Value {
    Value::Const(Constant::dec(n))
}

/// A hex constant (`0x1`).
pub fn hex(n: u128) -> Value {
    Value::Const(Constant::new(n, Format::Hex))
}

/// A string value.
pub fn s(v: &str) -> Value {
    Value::Str(v.to_string())
}

/// An Ethernet address constant.
pub fn mac(m: Mac) -> Value {
    Value::Const(Constant::new(u128::from(m.0), Format::Mac))
}

/// An IPv4 address constant.
pub fn ip4(a: Ipv4Addr) -> Value {
    Value::Const(Constant::ipv4(a))
}

/// An IPv6 address constant.
pub fn ip6(a: Ipv6Addr) -> Value {
    Value::Const(Constant::ipv6(a))
}

/// An IPv4 network constant (`10.0.0.0/24`), host bits cleared.
pub fn net4(n: Ipv4Net) -> Value {
    let mut c = Constant::ipv4(n.network());
    if n.prefix_len() < 32 {
        c.mask = Some(Mask::Prefix(n.prefix_len()));
    }
    Value::Const(c)
}

/// An IPv4 network constant that keeps its prefix length even for a host (`/32`), as
/// ovn-northd prints a route's prefix.
pub fn net4_len(n: Ipv4Net) -> Value {
    let mut c = Constant::ipv4(n.network());
    c.mask = Some(Mask::Prefix(n.prefix_len()));
    Value::Const(c)
}

/// `field == {values}`, braces kept for one value too (as ovn-northd writes some sets).
pub fn set_braced(field: FieldRef, values: impl IntoIterator<Item = Value>) -> Expr {
    Expr::Cmp {
        field,
        op: RelOp::Eq,
        rhs: Rhs::Set(values.into_iter().map(Term::new).collect()),
    }
}

/// An IPv6 network constant, host bits cleared.
pub fn net6(n: Ipv6Net) -> Value {
    let mut c = Constant::ipv6(n.network());
    if n.prefix_len() < 128 {
        c.mask = Some(Mask::Prefix(n.prefix_len()));
    }
    Value::Const(c)
}

/// An IP network of either family.
pub fn net(n: IpNet) -> Value {
    match n {
        IpNet::V4(n) => net4(n),
        IpNet::V6(n) => net6(n),
    }
}

/// An address set reference (`$name`).
pub fn addr_set(name: &str) -> Value {
    Value::AddrSet(name.to_string())
}

/// A port group reference (`@name`).
pub fn port_group(name: &str) -> Value {
    Value::PortGroup(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_print_as_ovn_text() {
        let m = Mac::parse("0a:00:00:00:00:01").unwrap();
        let e = and([
            inport("lsp1"),
            eq(f("eth.src"), mac(m)),
            pred("ip4"),
            eq(f("ip4.dst"), net4("10.0.0.0/24".parse().unwrap())),
        ]);
        assert_eq!(
            e.to_string(),
            "inport == \"lsp1\" && eth.src == 0a:00:00:00:00:01 && ip4 && ip4.dst == 10.0.0.0/24"
        );
        let set = in_set(
            f("ip6.dst"),
            [
                ip6("fd00::1".parse().unwrap()),
                ip6("fd00::2".parse().unwrap()),
            ],
        );
        assert_eq!(set.to_string(), "ip6.dst == {fd00::1, fd00::2}");
    }
}
