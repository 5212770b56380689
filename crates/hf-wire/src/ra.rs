//! IPv6 Router Advertisements as OVN builds them for `put_nd_ra_opts`.
//!
//! # What it does
//!
//! - [`RaOpts::encode`]: the action's options (OVN 23.03's `nd_ra_opts` table: `addr_mode`,
//!   `router_preference`, `slla`, `prefix`, `mtu`, `rdnss`, `dnssl`, `route_info`) → the
//!   ICMPv6 Router Advertisement message OVN's action encoder prepares: hop limit 255, router
//!   lifetime 65535 s, reachable time and retransmit timer 0, the M flag for
//!   `dhcpv6_stateful`, the O flag for `dhcpv6_stateless`, the preference bits, then one
//!   option per argument in order: source link-layer address, MTU, prefix information
//!   (on-link, autonomous unless the M flag is set by then, infinite lifetimes), RDNSS and
//!   DNSSL (infinite lifetime), route information (RFC 4191).
//! - [`reply`]: answers a Router Solicitation (ICMPv6 type 133 code 0) with that message: the
//!   solicitation's Ethernet and IPv6 headers, payload length and checksum fixed for its
//!   addresses. `lr_in_nd_ra_response`'s flow then sets the addresses.
//!
//! # What it does not do
//!
//! No periodic (unsolicited) advertisements of its own: `holdfast controller` composes those
//! with [`RaOpts::encode`] from the router port's options and the datapath sends them on its
//! timer (`hf_datapath::ra`). Unknown options, values of the wrong kind and strings that do not encode
//! are a [`RaError`] naming the option.
//!
//! # Invariants
//!
//! No input panics; a packet that is not a solicitation is an error and `out` is unchanged.

use std::net::Ipv6Addr;

use crate::dhcp::{Arg, check_layout, copy_l2_l3, encode_domains, fix_l4_checksum6};
use crate::parse::{Parsed, ip_proto};

/// Option names `put_nd_ra_opts` knows.
pub const RA_OPTIONS: &[&str] = &[
    "addr_mode",
    "router_preference",
    "slla",
    "prefix",
    "mtu",
    "rdnss",
    "dnssl",
    "route_info",
];

/// Why an option could not be encoded or a packet not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RaError {
    /// The action names an option OVN does not know.
    #[error("unknown IPv6 ND RA option \"{0}\"")]
    UnknownOption(String),
    /// The option's value is not what it needs.
    #[error("IPv6 ND RA option {name}: {reason}")]
    BadValue {
        /// The option.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The packet is not a Router Solicitation.
    #[error("not a router solicitation")]
    NotSolicitation,
}

fn bad(name: &str, reason: impl Into<String>) -> RaError {
    RaError::BadValue {
        name: name.to_string(),
        reason: reason.into(),
    }
}

/// The Router Advertisement of one `put_nd_ra_opts` (the ICMPv6 message, checksum 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RaOpts {
    /// The ICMPv6 message.
    pub message: Vec<u8>,
}

const M_FLAG: u8 = 0x80;
const O_FLAG: u8 = 0x40;
const PRF_HIGH: u8 = 0x08;
const PRF_LOW: u8 = 0x18;
const PRF_RESET_MASK: u8 = 0xe7;

fn string<'a>(name: &str, v: &'a [Arg]) -> Result<&'a str, RaError> {
    match v {
        [Arg::Str(s)] => Ok(s),
        _ => Err(bad(name, "requires one string value")),
    }
}

fn ipv6s(name: &str, v: &[Arg]) -> Result<Vec<(Ipv6Addr, Option<u8>)>, RaError> {
    if v.is_empty() {
        return Err(bad(name, "no value"));
    }
    v.iter()
        .map(|a| match a {
            Arg::Num { value, prefix } => Ok((Ipv6Addr::from(*value), *prefix)),
            Arg::Str(_) => Err(bad(name, "requires IPv6 addresses")),
        })
        .collect()
}

fn num(name: &str, v: &[Arg], max: u128) -> Result<u128, RaError> {
    match v {
        [
            Arg::Num {
                value,
                prefix: None,
            },
        ] if *value <= max => Ok(*value),
        _ => Err(bad(name, format!("requires one number up to {max}"))),
    }
}

/// RFC 4191 route information from OVN's `route_info` string: `PRF-PREFIX/LEN,...` with PRF
/// one of `HIGH`, `LOW` or anything else for medium.
fn route_info(out: &mut Vec<u8>, name: &str, s: &str) -> Result<(), RaError> {
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (prf, route) = entry
            .split_once('-')
            .ok_or_else(|| bad(name, format!("\"{entry}\" is not PRF-PREFIX/LEN")))?;
        let flags = match prf {
            "HIGH" => PRF_HIGH,
            "LOW" => PRF_LOW,
            _ => 0,
        };
        let (addr, plen) = route.split_once('/').unwrap_or((route, "128"));
        let addr: Ipv6Addr = addr
            .parse()
            .map_err(|_| bad(name, format!("\"{route}\" is not an IPv6 prefix")))?;
        let plen: u8 = plen
            .parse()
            .ok()
            .filter(|p| *p <= 128)
            .ok_or_else(|| bad(name, format!("\"{route}\" has a bad prefix length")))?;
        let words = usize::from(plen).div_ceil(64);
        out.extend_from_slice(&[24, 1 + words as u8, plen, flags]);
        out.extend_from_slice(&u32::MAX.to_be_bytes());
        let masked = if plen == 0 {
            0
        } else {
            u128::from(addr) & (u128::MAX << (128 - u32::from(plen)))
        };
        out.extend_from_slice(&masked.to_be_bytes()[..words * 8]);
    }
    Ok(())
}

impl RaOpts {
    /// Encodes `put_nd_ra_opts`'s arguments (name → values).
    pub fn encode(args: &[(String, Vec<Arg>)]) -> Result<RaOpts, RaError> {
        let mut m = vec![134, 0, 0, 0, 255, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0];
        for (name, v) in args {
            match name.as_str() {
                "addr_mode" => match string(name, v)? {
                    "dhcpv6_stateful" => m[5] |= M_FLAG,
                    "dhcpv6_stateless" => m[5] |= O_FLAG,
                    _ => {}
                },
                "router_preference" => match string(name, v)? {
                    "LOW" => m[5] |= PRF_LOW,
                    "HIGH" => m[5] |= PRF_HIGH,
                    _ => {}
                },
                "slla" => {
                    let mac = num(name, v, (1 << 48) - 1)? as u64;
                    m.extend_from_slice(&[1, 1]);
                    m.extend_from_slice(&mac.to_be_bytes()[2..]);
                }
                "mtu" => {
                    let mtu = num(name, v, u128::from(u32::MAX))? as u32;
                    m.extend_from_slice(&[5, 1, 0, 0]);
                    m.extend_from_slice(&mtu.to_be_bytes());
                }
                "prefix" => {
                    for (a, plen) in ipv6s(name, v)? {
                        let plen = plen.ok_or_else(|| bad(name, "requires PREFIX/LEN"))?;
                        let mut la = 0x80;
                        if m[5] & M_FLAG == 0 {
                            la |= 0x40;
                        }
                        m.extend_from_slice(&[3, 4, plen, la]);
                        m.extend_from_slice(&u32::MAX.to_be_bytes());
                        m.extend_from_slice(&u32::MAX.to_be_bytes());
                        m.extend_from_slice(&[0; 4]);
                        m.extend_from_slice(&a.octets());
                    }
                }
                "rdnss" => {
                    let a = ipv6s(name, v)?;
                    // The option length counts 8-byte units: 1 for the header, 2 an address.
                    let len = a
                        .len()
                        .checked_mul(2)
                        .and_then(|l| u8::try_from(l + 1).ok())
                        .ok_or_else(|| bad(name, "too many addresses"))?;
                    m.extend_from_slice(&[25, len, 0, 0]);
                    m.extend_from_slice(&u32::MAX.to_be_bytes());
                    for (a, _) in a {
                        m.extend_from_slice(&a.octets());
                    }
                }
                "dnssl" => {
                    let mut names =
                        encode_domains(string(name, v)?, false).map_err(|e| bad(name, e))?;
                    while (8 + names.len()) % 8 != 0 {
                        names.push(0);
                    }
                    let len =
                        u8::try_from((8 + names.len()) / 8).map_err(|_| bad(name, "too long"))?;
                    m.extend_from_slice(&[31, len, 0, 0]);
                    m.extend_from_slice(&u32::MAX.to_be_bytes());
                    m.extend_from_slice(&names);
                }
                "route_info" => route_info(&mut m, name, string(name, v)?)?,
                _ => return Err(RaError::UnknownOption(name.clone())),
            }
        }
        // RFC 4191 §2.2: no preference when the router lifetime is 0.
        if m[6] == 0 && m[7] == 0 {
            m[5] &= PRF_RESET_MASK;
        }
        Ok(RaOpts { message: m })
    }
}

/// Answers the Router Solicitation in `frame` with `ra`, appending the frame to `out`.
pub fn reply(out: &mut Vec<u8>, frame: &[u8], p: &Parsed, ra: &RaOpts) -> Result<usize, RaError> {
    let k = &p.key;
    if !k.is_ipv6() || k.ip_proto != ip_proto::ICMPV6 || k.icmp_type != 133 || k.icmp_code != 0 {
        return Err(RaError::NotSolicitation);
    }
    check_layout(frame, p).map_err(|_| RaError::NotSolicitation)?;
    if !crate::dhcp::fits(p, ra.message.len()) {
        return Err(RaError::NotSolicitation);
    }
    let start = out.len();
    let l4 = copy_l2_l3(out, frame, p, &ra.message, None);
    fix_l4_checksum6(out, p, l4, ip_proto::ICMPV6, 2);
    Ok(out.len() - start)
}
