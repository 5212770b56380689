//! Port security: `check_in_port_sec()` and `check_out_port_sec()`.
//!
//! In OVN 23.03 northd only calls the two functions (`reg0[15] = check_in_port_sec();` in
//! `ls_in_check_port_sec`, `check_out_port_sec()` in `ls_out_check_port_sec`); ovn-controller
//! turns each port's `Port_Binding.port_security` into OpenFlow tables (`consider_port_sec_flows`
//! in controller/lflow.c). This module implements the same decisions as one function per
//! direction over a parsed entry list. The result is 1 when the packet *fails* port security
//! (northd drops on `reg0[15] == 1`) and 0 when it passes or the port has no port security.
//!
//! Each entry is `MAC [IP[/PLEN] ...]`. An address whose host part is zero (`10.0.0.0/24`)
//! admits the whole subnet, any other (`10.0.0.5/24`) only itself, as ovn-controller does.
//!
//! Ingress (what the port may send), per entry whose MAC is `eth.src`:
//! - no IPs: anything, except ARP whose `arp.sha` is not the MAC and IPv6 ND NA whose `nd.tll`
//!   is neither zero nor the MAC;
//! - ARP: `arp.sha` is the MAC and `arp.spa` is one of the IPv4 addresses (any `arp.spa` when
//!   the entry has no IPv4 address and no IPv6 address; none when it has only IPv6);
//! - IPv4: `ip4.src` is one of the IPv4 addresses, or a DHCP discover (0.0.0.0:68 →
//!   255.255.255.255:67);
//! - IPv6: `ip6.src` is one of the IPv6 addresses or the MAC's link-local address, or `::`
//!   sending MLD reports (131, 143) or a neighbour solicitation to `ff02::/16`; NS must carry
//!   `nd.sll` zero or the MAC, NA `nd.tll` zero or the MAC and `nd.target` one of the addresses;
//! - anything else (non-IP, non-ARP) only from an entry without IPs.
//!
//! Egress (what the port may receive), per entry whose MAC is `eth.dst`: anything when the
//! entry has no IPs; IPv4 to one of its IPv4 addresses (or a subnet broadcast, 255.255.255.255,
//! 224.0.0.0/4); IPv6 to one of its IPv6 addresses, the link-local address or `ff00::/8`; other
//! EtherTypes pass.
//!
//! What it does not do: it does not read `Port_Binding.port_security` itself (the caller puts
//! the strings in [`crate::PortSpec::port_security`]), and a malformed entry is a compile error
//! naming the port rather than being skipped.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::packet::{Ctx, slot};

/// One `port_security` entry, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PsEntry {
    pub mac: u128,
    /// (address, mask): the mask is all ones for a host address.
    pub v4: Vec<(u32, u32, u32)>,
    pub v6: Vec<(u128, u128)>,
    pub lla: u128,
}

/// The EUI-64 link-local address of a MAC (`in6_generate_lla`).
pub(crate) fn lla(mac: u128) -> u128 {
    let b = (mac as u64).to_be_bytes();
    let mut a = [0u8; 16];
    a[0] = 0xfe;
    a[1] = 0x80;
    a[8] = b[2] ^ 0x02;
    a[9] = b[3];
    a[10] = b[4];
    a[11] = 0xff;
    a[12] = 0xfe;
    a[13] = b[5];
    a[14] = b[6];
    a[15] = b[7];
    u128::from_be_bytes(a)
}

/// Parses one `port_security` string: `MAC [IP[/PLEN] ...]`.
pub(crate) fn parse_entry(s: &str) -> Result<PsEntry, String> {
    let mut words = s.split_whitespace();
    let m = words
        .next()
        .ok_or_else(|| "empty port_security entry".to_string())?;
    let mac =
        hf_expr::lexer::parse_mac(m).ok_or_else(|| format!("`{m}` is not an Ethernet address"))?;
    let mut e = PsEntry {
        mac,
        v4: Vec::new(),
        v6: Vec::new(),
        lla: lla(mac),
    };
    for w in words {
        let (a, plen) = match w.split_once('/') {
            Some((a, p)) => (
                a,
                Some(
                    p.parse::<u32>()
                        .map_err(|_| format!("`{w}`: bad prefix length"))?,
                ),
            ),
            None => (w, None),
        };
        if let Ok(ip) = a.parse::<Ipv4Addr>() {
            let plen = plen.unwrap_or(32);
            if plen > 32 {
                return Err(format!("`{w}`: prefix longer than 32"));
            }
            let mask = if plen == 0 {
                0
            } else {
                u32::MAX << (32 - plen)
            };
            let ip = u32::from(ip);
            let bcast = ip | !mask;
            e.v4.push((ip, if ip & !mask == 0 { mask } else { u32::MAX }, bcast));
        } else if let Ok(ip) = a.parse::<Ipv6Addr>() {
            let plen = plen.unwrap_or(128);
            if plen > 128 {
                return Err(format!("`{w}`: prefix longer than 128"));
            }
            let mask = if plen == 0 {
                0
            } else {
                u128::MAX << (128 - plen)
            };
            let ip = u128::from(ip);
            e.v6.push((ip, if ip & !mask == 0 { mask } else { u128::MAX }));
        } else {
            return Err(format!("`{w}` is not an IP address"));
        }
    }
    Ok(e)
}

/// The slots a port-security decision reads (for the flow cache's wildcards).
pub(crate) const READS: [usize; 18] = [
    slot::ETH_SRC,
    slot::ETH_DST,
    slot::ETH_TYPE,
    slot::IP_PROTO,
    slot::IP_TTL,
    slot::IP4_SRC,
    slot::IP4_DST,
    slot::IP6_SRC,
    slot::IP6_DST,
    slot::ARP_SPA,
    slot::ARP_SHA,
    slot::UDP_SRC,
    slot::UDP_DST,
    slot::ICMP6_TYPE,
    slot::ICMP6_CODE,
    slot::ND_TARGET,
    slot::ND_SLL,
    slot::ND_TLL,
];

fn v4_in(e: &PsEntry, a: u128) -> bool {
    let a = a as u32;
    e.v4.iter().any(|&(ip, mask, _)| a & mask == ip & mask)
}

fn v6_in(e: &PsEntry, a: u128) -> bool {
    e.v6.iter().any(|&(ip, mask)| a & mask == ip & mask)
}

/// The ND checks of `in_port_sec_nd`: true when allowed.
fn nd_ok(e: &PsEntry, f: &[u128]) -> bool {
    let icmp6 = f[slot::IP_PROTO] == 58;
    let nd = icmp6 && f[slot::ICMP6_CODE] == 0 && f[slot::IP_TTL] == 255;
    if nd && f[slot::ICMP6_TYPE] == 135 {
        let sll = f[slot::ND_SLL];
        return sll == 0 || sll == e.mac;
    }
    if nd && f[slot::ICMP6_TYPE] == 136 {
        let tll = f[slot::ND_TLL];
        if tll != 0 && tll != e.mac {
            return false;
        }
        let t = f[slot::ND_TARGET];
        return e.v6.is_empty() || v6_in(e, t) || t == e.lla;
    }
    true
}

/// `check_in_port_sec()`: 1 when the packet fails.
pub(crate) fn check_in(ps: &[PsEntry], ctx: &Ctx) -> bool {
    if ps.is_empty() {
        return false;
    }
    let f = &ctx.f;
    let allowed = ps.iter().filter(|e| e.mac == f[slot::ETH_SRC]).any(|e| {
        let no_ip = e.v4.is_empty() && e.v6.is_empty();
        match f[slot::ETH_TYPE] {
            0x0806 => {
                if f[slot::ARP_SHA] != e.mac {
                    return false;
                }
                if e.v4.is_empty() {
                    return e.v6.is_empty();
                }
                v4_in(e, f[slot::ARP_SPA])
            }
            0x0800 => {
                no_ip
                    || (!e.v4.is_empty()
                        && (v4_in(e, f[slot::IP4_SRC])
                            || (f[slot::IP_PROTO] == 17
                                && f[slot::IP4_SRC] == 0
                                && f[slot::IP4_DST] == 0xffff_ffff
                                && f[slot::UDP_SRC] == 68
                                && f[slot::UDP_DST] == 67)))
            }
            0x86dd => {
                if no_ip {
                    return nd_ok(e, f);
                }
                if e.v6.is_empty() {
                    return false;
                }
                let src = f[slot::IP6_SRC];
                if v6_in(e, src) || src == e.lla {
                    return nd_ok(e, f);
                }
                let icmp6 = f[slot::IP_PROTO] == 58 && f[slot::ICMP6_CODE] == 0;
                let ff02 = f[slot::IP6_DST] >> 112 == 0xff02;
                if src == 0 && ff02 && icmp6 {
                    return match f[slot::ICMP6_TYPE] {
                        131 | 143 => true,
                        135 => nd_ok(e, f),
                        _ => false,
                    };
                }
                false
            }
            _ => no_ip,
        }
    });
    !allowed
}

/// `check_out_port_sec()`: 1 when the packet fails.
pub(crate) fn check_out(ps: &[PsEntry], ctx: &Ctx) -> bool {
    if ps.is_empty() {
        return false;
    }
    let f = &ctx.f;
    let allowed = ps.iter().filter(|e| e.mac == f[slot::ETH_DST]).any(|e| {
        if e.v4.is_empty() && e.v6.is_empty() {
            return true;
        }
        match f[slot::ETH_TYPE] {
            0x0800 => {
                let d = f[slot::IP4_DST] as u32;
                !e.v4.is_empty()
                    && (v4_in(e, u128::from(d))
                        || e.v4.iter().any(|&(_, _, b)| b == d)
                        || d == u32::MAX
                        || d >> 28 == 0xe)
            }
            0x86dd => {
                let d = f[slot::IP6_DST];
                !e.v6.is_empty() && (v6_in(e, d) || d == e.lla || d >> 120 == 0xff)
            }
            _ => true,
        }
    });
    !allowed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_entries_and_rejects_garbage() {
        let e = parse_entry("00:00:00:00:00:01 10.0.0.5 10.1.0.0/16 fd00::5/64").expect("parses");
        assert_eq!(e.mac, 1);
        assert_eq!(e.v4[0].1, u32::MAX);
        assert_eq!(e.v4[1].1, 0xffff_0000);
        assert_eq!(e.v6[0].1, u128::MAX);
        assert!(parse_entry("zz:00:00:00:00:01").is_err());
        assert!(parse_entry("00:00:00:00:00:01 10.0.0.1/40").is_err());
        assert!(parse_entry("00:00:00:00:00:01 bogus").is_err());
        assert!(parse_entry("").is_err());
        // OVN writes and accepts one-digit groups; a sign is not a hex digit.
        assert_eq!(
            parse_entry("0:0:0:0:0:1 10.0.0.5")
                .expect("short groups")
                .mac,
            1
        );
        assert!(parse_entry("+f:00:00:00:00:01").is_err());
    }

    #[test]
    fn link_local_is_eui64() {
        let mac = 0x0a00_2700_0001u128;
        assert_eq!(
            Ipv6Addr::from(lla(mac)),
            "fe80::800:27ff:fe00:1".parse::<Ipv6Addr>().expect("ip")
        );
    }
}
