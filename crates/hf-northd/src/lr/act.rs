//! Action and match constructors the router stages share (typed trees, no text).

use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::actions::{Backend, CtLbArgs, LbBackend, NatKind, NatTarget, NestedKind, ResultFn};
use hf_expr::ast::{Expr, FieldRef, RelOp, Rhs, Term, Value};
use hf_expr::constant::Constant;
use ipnet::IpNet;

use crate::addr::Mac;
use crate::build::{eq, f, ip4, ip6, mac, net, num};
use crate::regs::{NEXT_HOP_IPV6, Reg, SRC_IPV6, field_of};

/// A field.
pub fn fl(name: &str) -> FieldRef {
    f(name)
}

/// `dst = value;`
pub fn set(dst: &str, v: Value) -> Action {
    Action::assign(f(dst), v)
}

/// `reg = value;` for a [`Reg`].
pub fn set_reg(r: Reg, v: Value) -> Action {
    Action::assign(r.field(), v)
}

/// `dst = src;`
pub fn mv(dst: FieldRef, src: FieldRef) -> Action {
    Action::move_field(dst, src)
}

/// `a <-> b;`
pub fn swap(a: &str, b: &str) -> Action {
    Action::Exchange {
        a: f(a),
        b: f(b),
        span: Default::default(),
    }
}

/// `ip.ttl--;`
pub fn dec_ttl() -> Action {
    Action::DecTtl {
        span: Default::default(),
    }
}

/// An IP constant.
pub fn ipv(a: IpAddr) -> Value {
    match a {
        IpAddr::V4(a) => ip4(a),
        IpAddr::V6(a) => ip6(a),
    }
}

/// `ip4` or `ip6` by family.
pub fn ipf(v6: bool) -> &'static str {
    if v6 { "ip6" } else { "ip4" }
}

/// `ip4.dst == A` / `ip6.dst == A`.
pub fn ip_dst(a: IpAddr) -> Expr {
    eq(f(&format!("{}.dst", ipf(a.is_ipv6()))), ipv(a))
}

/// `ip4.src == A` / `ip6.src == A`.
pub fn ip_src(a: IpAddr) -> Expr {
    eq(f(&format!("{}.src", ipf(a.is_ipv6()))), ipv(a))
}

/// `ip4.src == NET` / `ip6.src == NET` (a host network prints as an address).
pub fn ip_src_net(n: IpNet) -> Expr {
    eq(f(&format!("{}.src", ipf(n.addr().is_ipv6()))), net(n))
}

/// `field == {a, b}`, always written as a set (as OVN writes router address lists).
pub fn set_of(field: &str, vals: Vec<Value>) -> Expr {
    Expr::Cmp {
        field: f(field),
        op: RelOp::Eq,
        rhs: Rhs::Set(vals.into_iter().map(Term::new).collect()),
    }
}

/// `field == 0` style numeric match with a `==`.
pub fn eqn(field: &str, n: u128) -> Expr {
    eq(f(field), num(n))
}

/// `reg == n`.
pub fn reg_eq(r: Reg, n: u128) -> Expr {
    eq(r.field(), num(n))
}

/// The next-hop register of a family (`reg0` / `xxreg0`).
pub fn nh_reg(v6: bool) -> FieldRef {
    if v6 {
        field_of(NEXT_HOP_IPV6)
    } else {
        Reg::NextHopIpv4.field()
    }
}

/// The source register of a family (`reg1` / `xxreg1`).
pub fn src_reg(v6: bool) -> FieldRef {
    if v6 {
        field_of(SRC_IPV6)
    } else {
        Reg::SrcIpv4.field()
    }
}

/// A MAC value.
pub fn macv(m: Mac) -> Value {
    mac(m)
}

/// A `ct_snat`/`ct_dnat`(`_in_czone`) action.
pub fn ct_nat(kind: NatKind, target: Option<IpAddr>, ports: Option<(u16, u16)>) -> Action {
    Action::CtNat {
        kind,
        target: target.map(|a| NatTarget {
            addr: match a {
                IpAddr::V4(a) => Constant::ipv4(a),
                IpAddr::V6(a) => Constant::ipv6(a),
            },
            ports,
            flags: Vec::new(),
        }),
        span: Default::default(),
    }
}

/// `ct_lb_mark(backends=...[; flag]);`
pub fn ct_lb_mark(backends: &[(IpAddr, Option<u16>)], flag: Option<&str>) -> Action {
    Action::CtLb {
        mark: true,
        args: Some(CtLbArgs {
            backends: backends
                .iter()
                .map(|(ip, port)| {
                    LbBackend::Addr(Backend {
                        ip: match ip {
                            IpAddr::V4(a) => Constant::ipv4(*a),
                            IpAddr::V6(a) => Constant::ipv6(*a),
                        },
                        port: *port,
                    })
                })
                .collect(),
            hash_fields: None,
            flag: flag.map(str::to_string),
            legacy: false,
        }),
        span: Default::default(),
    }
}

/// `ct_lb_mark(backends=...[; hash_fields="..."][; flag]);`
pub fn ct_lb_mark_hashed(
    backends: &[(IpAddr, Option<u16>)],
    hash: Option<&str>,
    flag: Option<&str>,
) -> Action {
    let mut a = ct_lb_mark(backends, flag);
    if let Action::CtLb {
        args: Some(args), ..
    } = &mut a
    {
        args.hash_fields = hash.map(str::to_string);
    }
    a
}

/// `kind { body };`
pub fn nested(kind: NestedKind, body: Vec<Action>) -> Action {
    Action::nested(kind, body)
}

/// `dst = func;`
pub fn result(dst: FieldRef, func: ResultFn) -> Action {
    Action::Result {
        dst,
        func,
        span: Default::default(),
    }
}

/// `ct_commit_nat;`
pub fn ct_commit_nat() -> Action {
    Action::CtCommitNat {
        span: Default::default(),
    }
}

/// `ct_clear;`
pub fn ct_clear() -> Action {
    Action::CtClear {
        span: Default::default(),
    }
}

/// `next;`
pub fn next() -> Action {
    Action::next()
}

/// `drop;`
pub fn drop() -> Vec<Action> {
    vec![Action::drop()]
}

/// `output;`
pub fn output() -> Action {
    Action::output()
}

/// `outport = "p";`
pub fn set_outport(p: &str) -> Action {
    set("outport", Value::Str(p.to_string()))
}

/// `flags.loopback = 1;`
pub fn loopback() -> Action {
    set("flags.loopback", num(1))
}
