//! Address arithmetic over `ipnet`: containment, overlap, an example host of a network, and the
//! first address of a network that a list of networks leaves uncovered. Parsing of NB strings is
//! `hf_northd::addr`'s (one parser for northd, check and the controller).
//!
//! What it does not do: merge or subtract networks in general (only what the checks need).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

pub use hf_northd::addr::parse_net;

/// `s` as a network with the host bits cleared (`10.0.0.1/24` -> `10.0.0.0/24`).
pub fn parse_subnet(s: &str) -> Option<IpNet> {
    parse_net(s.trim()).map(|n| n.trunc())
}

/// The address as a 128-bit number in its family's width.
pub fn bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The family's width in bits.
pub fn width(a: IpAddr) -> u32 {
    if a.is_ipv4() { 32 } else { 128 }
}

fn from_bits(v4: bool, b: u128) -> Option<IpAddr> {
    if v4 {
        u32::try_from(b).ok().map(|b| IpAddr::V4(Ipv4Addr::from(b)))
    } else {
        Some(IpAddr::V6(Ipv6Addr::from(b)))
    }
}

/// The same family.
pub fn same_family(a: &IpNet, b: &IpNet) -> bool {
    a.addr().is_ipv4() == b.addr().is_ipv4()
}

/// `inner` lies within `outer`.
pub fn covers(outer: &IpNet, inner: &IpNet) -> bool {
    same_family(outer, inner) && outer.contains(inner)
}

/// The two share an address.
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    same_family(a, b) && (a.contains(b) || b.contains(a))
}

/// A host of `n` to name as an example: its first host (`10.0.0.1` of `10.0.0.0/24`), or the
/// address itself for a /32, /31 (/128, /127).
pub fn example_host(n: &IpNet) -> IpAddr {
    let w = width(n.addr());
    let base = bits(n.network());
    if u32::from(n.prefix_len()) + 1 >= w {
        return n.addr();
    }
    from_bits(n.addr().is_ipv4(), base + 1).unwrap_or(n.addr())
}

/// The first host of `n` (as [`example_host`] picks hosts) that no network of `cover` holds;
/// `None` when they hold all of `n`.
pub fn first_uncovered(n: &IpNet, cover: &[IpNet]) -> Option<IpAddr> {
    let v4 = n.addr().is_ipv4();
    let end = bits(n.broadcast());
    let mut cand = bits(example_host(n));
    // Each step jumps past one covering network, so this ends within cover.len() + 1 steps.
    for _ in 0..=cover.len() {
        let a = from_bits(v4, cand)?;
        let holder = cover
            .iter()
            .filter(|c| c.addr().is_ipv4() == v4 && c.contains(&a))
            .map(|c| bits(c.broadcast()))
            .max();
        match holder {
            None => return Some(a),
            Some(last) if last >= end => return None,
            Some(last) => cand = last + 1,
        }
    }
    None
}

/// The first address `a` and `b` share, as an example.
pub fn first_common(a: &IpNet, b: &IpNet) -> Option<IpAddr> {
    if !overlaps(a, b) {
        return None;
    }
    let smaller = if a.prefix_len() >= b.prefix_len() {
        a
    } else {
        b
    };
    Some(example_host(smaller))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> IpNet {
        parse_subnet(s).unwrap()
    }

    #[test]
    fn first_uncovered_jumps_past_covers() {
        let net = n("10.6.158.0/24");
        assert_eq!(
            first_uncovered(&net, &[]),
            Some("10.6.158.1".parse().unwrap())
        );
        assert_eq!(first_uncovered(&net, &[n("10.6.0.0/16")]), None);
        assert_eq!(
            first_uncovered(&net, &[n("10.6.158.0/25")]),
            Some("10.6.158.128".parse().unwrap())
        );
        assert_eq!(
            first_uncovered(&net, &[n("10.6.158.0/25"), n("10.6.158.128/25")]),
            None
        );
        // A cover of the other family covers nothing.
        assert!(first_uncovered(&net, &[n("::/0")]).is_some());
        // A host.
        assert_eq!(
            first_uncovered(&n("192.168.0.7/32"), &[]),
            Some("192.168.0.7".parse().unwrap())
        );
        assert_eq!(
            first_uncovered(&n("192.168.0.7"), &[n("192.168.0.0/24")]),
            None
        );
    }

    #[test]
    fn overlap_and_examples() {
        assert!(overlaps(&n("10.0.0.0/8"), &n("10.1.0.0/16")));
        assert!(!overlaps(&n("10.0.0.0/8"), &n("11.0.0.0/8")));
        assert_eq!(
            first_common(&n("10.0.0.0/8"), &n("10.1.0.0/16")),
            Some("10.1.0.1".parse().unwrap())
        );
        assert_eq!(example_host(&n("fd00::/64")).to_string(), "fd00::1");
    }
}
