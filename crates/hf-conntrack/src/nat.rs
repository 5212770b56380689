//! NAT: choosing a connection's reply tuple (with port allocation that never collides) and the
//! header rewrites that translate each direction.
//!
//! Uniqueness: a source-NAT connection's reply tuple (peer address and port, external address and
//! port, protocol) is claimed across all zones, and a candidate is taken only when no
//! connection in the zone owns it as a tuple and no connection anywhere claims it. So an
//! external `ip:port:proto:peer` is never handed to two connections.

use std::net::IpAddr;

use hf_wire::NatRewrite;

use crate::action::{CommitRefused, NatRange, NatRequest};
use crate::table::{Conntrack, Entry, F_DNAT, F_SNAT};
use crate::tuple::{Tuple, addr16};

/// Ports SNAT picks from when the range does not name any.
const EPHEMERAL: (u16, u16) = (1024, 65535);
/// Upper bound on candidates tried per commit, so exhaustion costs bounded work.
const MAX_ATTEMPTS: u64 = 1 << 17;

fn addr_range(r: &NatRange, v6: bool) -> Result<(u128, u128), CommitRefused> {
    if r.addr_min.is_ipv6() != v6 || r.addr_max.is_ipv6() != v6 {
        return Err(CommitRefused::NatRange);
    }
    let (lo, hi) = (
        u128::from_be_bytes(addr16(r.addr_min)),
        u128::from_be_bytes(addr16(r.addr_max)),
    );
    if hi < lo {
        return Err(CommitRefused::NatRange);
    }
    Ok((lo, hi))
}

fn port_range(r: &NatRange) -> Option<(u16, u16)> {
    (r.port_min != 0 || r.port_max != 0).then(|| (r.port_min, r.port_max.max(r.port_min)))
}

/// A cheap deterministic mix for spreading starting points.
fn mix(t: &Tuple) -> u64 {
    let s = u128::from_be_bytes(t.src) as u64;
    let d = u128::from_be_bytes(t.dst) as u64;
    let x = s
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(d.rotate_left(17))
        .wrapping_add(u64::from(t.sport) << 32 | u64::from(t.dport));
    (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
}

impl Conntrack {
    /// `t`'s hash when `t` is free to be a new connection's reply tuple. `ignore` is an entry
    /// about to be removed (an expired or reopened connection with the same tuple).
    fn reply_free(&self, t: &Tuple, ignore: Option<u32>) -> Option<u32> {
        let h = self.hash(t);
        match self.find_h(t, h) {
            Some((idx, _)) if Some(idx) != ignore => return None,
            _ => {}
        }
        (!self.claimed(t) || ignore.is_some_and(|i| self.entries[i as usize].reply == *t))
            .then_some(h)
    }

    /// The reply tuple for a new connection `orig` under `nat`, the NAT flags, and the reply
    /// tuple's hash.
    pub(crate) fn alloc_reply(
        &self,
        orig: &Tuple,
        nat: Option<&NatRequest>,
        ignore: Option<u32>,
    ) -> Result<(Tuple, u8, u32), CommitRefused> {
        let mut reply = orig.invert();
        let mut flags = 0;
        let icmp = orig.is_icmp();
        let req = nat.copied().unwrap_or_default();
        if let Some(r) = req.dst {
            let (lo, hi) = addr_range(&r, orig.v6)?;
            let n = hi - lo + 1;
            let pick = lo + u128::from(mix(orig)) % n;
            reply.src = pick.to_be_bytes();
            if let (Some((pmin, pmax)), false) = (port_range(&r), icmp) {
                let span = u64::from(pmax - pmin) + 1;
                reply.sport = pmin + (mix(orig) % span) as u16;
            }
            if reply.src != orig.dst || reply.sport != orig.dport {
                flags |= F_DNAT;
            }
        }
        let Some(r) = req.src else {
            if flags == 0
                && self.nat_zone_counts[usize::from(orig.zone)] == 0
                && !self.claimed(&reply)
            {
                // No translation here and none in the zone: the reply tuple is the inverse of
                // `orig`, which nobody owns, so no connection can own the reply tuple either.
                return Ok((reply, flags, self.hash(&reply)));
            }
            // Nothing is chosen without SNAT: the reply tuple is fixed, and only a connection of
            // this zone can hold it. An SNAT claim of another zone is no conflict (a gateway
            // router's SNAT zone and the zone of the port behind it track the same translated
            // connection, as Linux and OVS do); claims only keep SNAT allocations apart.
            let h = self.hash(&reply);
            return match self.find_h(&reply, h) {
                Some((idx, _)) if Some(idx) != ignore => Err(CommitRefused::TupleTaken),
                _ if reply == *orig => Err(CommitRefused::TupleTaken),
                _ => Ok((reply, flags, h)),
            };
        };
        let (lo, hi) = addr_range(&r, orig.v6)?;
        let n_addrs = hi - lo + 1;
        // For ICMP queries the identifier (reply.sport) plays the port's role.
        let orig_port = orig.sport;
        let (pmin, pmax, keep) = match port_range(&r) {
            Some((a, b)) => (a, b, (a..=b).contains(&orig_port)),
            None => (EPHEMERAL.0, EPHEMERAL.1, true),
        };
        let n_ports = u64::from(pmax - pmin) + 1;
        let h = mix(orig);
        let a0 = u128::from(h) % n_addrs;
        let p0 = (h >> 20) % n_ports;
        let mut attempts = 0u64;
        let mut cand = reply;
        let mut a = 0u128;
        while a < n_addrs && attempts < MAX_ATTEMPTS {
            cand.dst = (lo + (a0 + a) % n_addrs).to_be_bytes();
            let ports = std::iter::once(orig_port)
                .filter(|_| keep)
                .chain((0..n_ports).map(|k| pmin + ((p0 + k) % n_ports) as u16));
            for port in ports {
                attempts += 1;
                if attempts > MAX_ATTEMPTS {
                    break;
                }
                if icmp {
                    cand.sport = port;
                } else {
                    cand.dport = port;
                }
                if cand == *orig {
                    continue;
                }
                if let Some(h) = self.reply_free(&cand, ignore) {
                    // Even an identity mapping is flagged (and so claimed): the external
                    // address/port must not go to a connection in another zone.
                    return Ok((cand, flags | F_SNAT, h));
                }
            }
            a += 1;
        }
        Err(CommitRefused::NatExhausted)
    }
}

/// The rewrite that makes a packet with tuple `cur` look like the inverse of `other`.
pub(crate) fn rewrite_tuples(orig: &Tuple, reply: &Tuple, dir: usize) -> NatRewrite {
    let (cur, other) = if dir == 0 {
        (orig, reply)
    } else {
        (reply, orig)
    };
    let target = other.invert();
    let mut rw = NatRewrite::default();
    if target.src != cur.src {
        rw.src = Some(target.src_ip());
    }
    if target.dst != cur.dst {
        rw.dst = Some(target.dst_ip());
    }
    if target.sport != cur.sport {
        rw.sport = Some(target.sport);
    }
    if !cur.is_icmp() && target.dport != cur.dport {
        rw.dport = Some(target.dport);
    }
    rw
}

/// The rewrite for a packet of `e` in direction `dir`.
pub(crate) fn rewrite(e: &Entry, dir: usize) -> NatRewrite {
    rewrite_tuples(&e.orig, &e.reply, dir)
}

/// The rewrite for an ICMP error travelling in direction `dir` of `e`: the outer addresses as
/// that direction translates them, and the quoted packet (which travelled the other way, already
/// translated) back to how its sender sent it.
pub(crate) fn related_rewrite(e: &Entry, dir: usize) -> NatRewrite {
    let outer = rewrite(e, dir);
    let (cur, other) = if dir == 0 {
        (&e.orig, &e.reply)
    } else {
        (&e.reply, &e.orig)
    };
    let quoted = cur.invert();
    let mut rw = NatRewrite {
        src: outer.src,
        dst: outer.dst,
        ..NatRewrite::default()
    };
    let ip = |b: [u8; 16]| -> IpAddr { Tuple { src: b, ..*other }.src_ip() };
    if quoted.src != other.src {
        rw.inner_src = Some(ip(other.src));
    }
    if quoted.dst != other.dst {
        rw.inner_dst = Some(ip(other.dst));
    }
    if quoted.sport != other.sport {
        rw.inner_sport = Some(other.sport);
    }
    if !other.is_icmp() && quoted.dport != other.dport {
        rw.inner_dport = Some(other.dport);
    }
    rw
}
