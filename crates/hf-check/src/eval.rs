//! A conservative three-valued evaluator of a match over a *set* of packets: does every
//! packet from a source network to a destination network satisfy it ([`Tri::True`]), none
//! ([`Tri::False`]), or cannot it tell ([`Tri::Unknown`])? Used for `NAT.match` (OVN 24.09's
//! column, holdfast's schema extension): a row whose match is `False` for a cluster-internal
//! network does not rewrite traffic to it.
//!
//! Decided: `ip4.dst`/`ip4.src`/`ip6.dst`/`ip6.src` compared with `==`/`!=` against constants
//! (with prefixes or bit masks), sets of them and NB address sets (`$name`); the predicates
//! `ip`, `ip4`, `ip6`; `!`, `&&`, `||` (Kleene logic); `1`/`0`. A field of the other family is
//! `False` (its prerequisite fails), as in OVN. Anything else (ports, ordering operators,
//! subscripts, port groups, `$pg_ip4`-style derived sets, `is_chassis_resident`) is `Unknown`.
//!
//! What it does not do: evaluate a single packet (the pipeline does) or decide a match that
//! is `Unknown` by splitting networks.

use hf_expr::ast::{Expr, RelOp, Term, Value};
use hf_expr::constant::{Mask, prefix_mask, width_mask};
use ipnet::IpNet;

use crate::net::bits;

/// A three-valued truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tri {
    /// For every packet.
    True,
    /// For none.
    False,
    /// Cannot tell.
    Unknown,
}

impl Tri {
    fn not(self) -> Tri {
        match self {
            Tri::True => Tri::False,
            Tri::False => Tri::True,
            Tri::Unknown => Tri::Unknown,
        }
    }

    fn from_bool(b: bool) -> Tri {
        if b { Tri::True } else { Tri::False }
    }
}

/// The packets: any source in `src`, any destination in `dst` (the same family).
pub struct Facts<'a> {
    /// Sources.
    pub src: IpNet,
    /// Destinations.
    pub dst: IpNet,
    /// An address set's addresses by name (`None`: unknown set).
    pub sets: &'a dyn Fn(&str) -> Option<Vec<IpNet>>,
}

impl std::fmt::Debug for Facts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Facts")
            .field("src", &self.src)
            .field("dst", &self.dst)
            .finish_non_exhaustive()
    }
}

/// Evaluates `e` over the packets of `facts`.
pub fn eval(e: &Expr, facts: &Facts<'_>) -> Tri {
    let v4 = facts.dst.addr().is_ipv4();
    match e {
        Expr::Bool(b) => Tri::from_bool(*b),
        Expr::Not(x) => eval(x, facts).not(),
        Expr::And(v) => {
            let mut acc = Tri::True;
            for x in v {
                match eval(x, facts) {
                    Tri::False => return Tri::False,
                    Tri::Unknown => acc = Tri::Unknown,
                    Tri::True => {}
                }
            }
            acc
        }
        Expr::Or(v) => {
            let mut acc = Tri::False;
            for x in v {
                match eval(x, facts) {
                    Tri::True => return Tri::True,
                    Tri::Unknown => acc = Tri::Unknown,
                    Tri::False => {}
                }
            }
            acc
        }
        Expr::Field(f) if f.sub.is_none() => match f.name.as_str() {
            "ip" => Tri::True,
            "ip4" => Tri::from_bool(v4),
            "ip6" => Tri::from_bool(!v4),
            _ => Tri::Unknown,
        },
        Expr::Cmp { field, op, rhs } if field.sub.is_none() => {
            let (fam_v4, net) = match field.name.as_str() {
                "ip4.dst" => (true, &facts.dst),
                "ip4.src" => (true, &facts.src),
                "ip6.dst" => (false, &facts.dst),
                "ip6.src" => (false, &facts.src),
                _ => return Tri::Unknown,
            };
            if fam_v4 != v4 {
                // The field's prerequisite (ip4 / ip6) fails for every packet.
                return Tri::False;
            }
            let width = if v4 { 32 } else { 128 };
            let mut any = Tri::False;
            for t in rhs.terms() {
                let r = term(t, net, width, facts);
                any = match (any, r) {
                    (Tri::True, _) | (_, Tri::True) => Tri::True,
                    (Tri::Unknown, _) | (_, Tri::Unknown) => Tri::Unknown,
                    _ => Tri::False,
                };
            }
            match op {
                RelOp::Eq => any,
                RelOp::Ne => any.not(),
                _ => Tri::Unknown,
            }
        }
        _ => Tri::Unknown,
    }
}

/// Whether every / no address of `net` equals `value` under `mask`.
fn masked(net: &IpNet, value: u128, mask: u128, width: u32) -> Tri {
    let n = prefix_mask(width, net.prefix_len());
    let a = bits(net.network());
    if (a ^ value) & mask & n != 0 {
        Tri::False
    } else if mask & !n & width_mask(width) == 0 {
        Tri::True
    } else {
        Tri::Unknown
    }
}

fn term(t: &Term, net: &IpNet, width: u32, facts: &Facts<'_>) -> Tri {
    match &t.value {
        Value::Const(c) => {
            let mask = match c.mask {
                None => width_mask(width),
                Some(Mask::Prefix(p)) => prefix_mask(width, p),
                Some(Mask::Bits(b, _)) => b & width_mask(width),
                Some(_) => return Tri::Unknown,
            };
            masked(net, c.value, mask, width)
        }
        Value::AddrSet(name) => match (facts.sets)(name) {
            Some(nets) => {
                let mut acc = Tri::False;
                for s in nets.iter().filter(|s| s.addr().is_ipv4() == (width == 32)) {
                    match masked(
                        net,
                        bits(s.network()),
                        prefix_mask(width, s.prefix_len()),
                        width,
                    ) {
                        Tri::True => return Tri::True,
                        Tri::Unknown => acc = Tri::Unknown,
                        Tri::False => {}
                    }
                }
                acc
            }
            None => Tri::Unknown,
        },
        _ => Tri::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::parse_subnet;

    fn ev(m: &str, src: &str, dst: &str) -> Tri {
        let e = hf_expr::parse_match(hf_expr::SymbolTable::shared(), m).unwrap();
        let sets = |n: &str| (n == "internal").then(|| vec![parse_subnet("10.6.0.0/16").unwrap()]);
        eval(
            &e,
            &Facts {
                src: parse_subnet(src).unwrap(),
                dst: parse_subnet(dst).unwrap(),
                sets: &sets,
            },
        )
    }

    #[test]
    fn destination_prefixes() {
        let pod = "10.129.0.9/32";
        assert_eq!(
            ev("ip4.dst != 10.6.158.0/24", pod, "10.6.158.0/24"),
            Tri::False
        );
        assert_eq!(ev("ip4.dst != 10.6.158.0/24", pod, "8.8.8.0/24"), Tri::True);
        // Half of the network is excluded: cannot tell for the whole.
        assert_eq!(
            ev("ip4.dst != 10.6.158.0/25", pod, "10.6.158.0/24"),
            Tri::Unknown
        );
        assert_eq!(
            ev("ip4.dst == {1.1.1.1, 10.6.0.0/16}", pod, "10.6.158.0/24"),
            Tri::True
        );
        assert_eq!(
            ev("!(ip4.dst == $internal)", pod, "10.6.158.0/24"),
            Tri::False
        );
        assert_eq!(
            ev("ip4.dst != $unknown", pod, "10.6.158.0/24"),
            Tri::Unknown
        );
        // A bit mask: the third octet's low bit.
        assert_eq!(
            ev("ip4.dst == 0.0.1.0/0.0.1.0", pod, "10.6.158.0/24"),
            Tri::False
        );
    }

    #[test]
    fn sources_families_and_logic() {
        assert_eq!(
            ev("ip4.src == 10.128.0.0/14", "10.129.0.9/32", "10.6.158.0/24"),
            Tri::True
        );
        assert_eq!(
            ev("ip6.dst == ::/0", "10.129.0.9/32", "10.6.158.0/24"),
            Tri::False
        );
        assert_eq!(ev("ip6", "10.129.0.9/32", "10.6.158.0/24"), Tri::False);
        assert_eq!(
            ev("tcp.dst == 80", "10.129.0.9/32", "10.6.158.0/24"),
            Tri::Unknown
        );
        assert_eq!(
            ev(
                "tcp.dst == 80 && ip4.dst != 10.6.0.0/16",
                "10.129.0.9/32",
                "10.6.158.0/24"
            ),
            Tri::False
        );
        assert_eq!(
            ev(
                "tcp.dst == 80 || ip4.dst == 10.6.0.0/16",
                "10.129.0.9/32",
                "10.6.158.0/24"
            ),
            Tri::True
        );
        assert_eq!(
            ev(
                "tcp.dst == 80 || ip4.dst != 10.6.0.0/16",
                "10.129.0.9/32",
                "10.6.158.0/24"
            ),
            Tri::Unknown
        );
    }
}
