//! Shared pieces of the NAT stages: a NAT flow's priority (OVN 23.03's longest-prefix
//! ordering, and OVN 24.09's `300 + priority` for rows with a `match`), the extra conditions
//! a row adds (`allowed_ext_ips`, the 24.09 `match`) and its `exempted_ext_ips` bypass.

use hf_expr::ast::Expr;

use crate::build::{addr_set, and, eq, f};
use crate::lr::act::ipf;
use crate::lr::ctx::{Nat, Rtr};

/// OVN 24.09's offset for NAT rows with a `match`.
pub const MATCH_OFFSET: i64 = 300;

/// The priority of a NAT row's SNAT (`dnat == false`) or DNAT flow.
pub fn priority(r: &Rtr, n: &Nat, dnat: bool) -> u16 {
    if n.extra.is_some() {
        return MATCH_OFFSET
            .saturating_add(n.priority)
            .clamp(0, i64::from(u16::MAX) - 3) as u16;
    }
    if dnat {
        return 100;
    }
    let mut p = u16::from(n.plen()) + 1;
    if !r.gw_router && r.dgp.is_some() {
        p += 128;
    }
    p
}

/// The row's extra conditions: `ip.dst == $allowed` (SNAT) or `ip.src == $allowed` (DNAT),
/// and the 24.09 `match`.
pub fn extra(n: &Nat, dnat: bool) -> Vec<Expr> {
    let mut v = Vec::new();
    if let Some(a) = &n.allowed {
        v.push(eq(
            f(&format!(
                "{}.{}",
                ipf(n.v6()),
                if dnat { "src" } else { "dst" }
            )),
            addr_set(a),
        ));
    }
    if let Some(e) = &n.extra {
        v.push(e.clone());
    }
    v
}

/// The exemption condition (`ip.dst == $exempted` for SNAT, `ip.src` for DNAT), ANDed to a
/// copy of the flow's match at priority + 2 with `next;`. As in OVN, `allowed_ext_ips` wins
/// when both are set.
pub fn exempt(n: &Nat, dnat: bool, base: &Expr) -> Option<Expr> {
    if n.allowed.is_some() {
        return None;
    }
    let e = n.exempted.as_ref()?;
    Some(and([
        base.clone(),
        eq(
            f(&format!(
                "{}.{}",
                ipf(n.v6()),
                if dnat { "src" } else { "dst" }
            )),
            addr_set(e),
        ),
    ]))
}

/// `ip4.dst = A; next;` / `ip6.src = A; next;`: stateless translation.
pub fn rewrite(field: &str, a: std::net::IpAddr) -> Vec<hf_expr::Action> {
    vec![
        hf_expr::Action::assign(f(field), crate::lr::act::ipv(a)),
        hf_expr::Action::next(),
    ]
}
