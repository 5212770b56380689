//! Addresses as NB writes them: `Logical_Switch_Port.addresses` / `port_security` entries
//! (`"MAC [IP...]"`), router port `mac` + `networks`, NAT and LB addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// An Ethernet address as 48 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub u64);

impl Mac {
    /// Parses `xx:xx:xx:xx:xx:xx` (one or two hex digits per group, as OVN accepts).
    pub fn parse(s: &str) -> Option<Mac> {
        let mut v: u64 = 0;
        let mut n = 0;
        for part in s.split(':') {
            if part.is_empty() || part.len() > 2 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            v = (v << 8) | u64::from_str_radix(part, 16).ok()?;
            n += 1;
        }
        (n == 6).then_some(Mac(v))
    }

    /// The bytes.
    pub fn octets(self) -> [u8; 6] {
        let b = self.0.to_be_bytes();
        [b[2], b[3], b[4], b[5], b[6], b[7]]
    }

    /// Multicast bit set.
    pub fn is_multicast(self) -> bool {
        self.octets()[0] & 1 == 1
    }

    /// The IPv6 link-local address derived from it (EUI-64).
    pub fn ipv6_lla(self) -> Ipv6Addr {
        let o = self.octets();
        Ipv6Addr::from([
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            o[0] ^ 2,
            o[1],
            o[2],
            0xff,
            0xfe,
            o[3],
            o[4],
            o[5],
        ])
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = self.octets();
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            o[0], o[1], o[2], o[3], o[4], o[5]
        )
    }
}

/// One `addresses` (or `port_security`) entry: a MAC and the IPs after it, each with the
/// prefix length of the network it is in (32/128 when written without one).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LportAddresses {
    /// The MAC (`None` for an entry that is only IPs, which NB does not allow for VIFs).
    pub mac: Option<Mac>,
    /// IPv4 addresses.
    pub ipv4: Vec<Ipv4Net>,
    /// IPv6 addresses.
    pub ipv6: Vec<Ipv6Net>,
}

impl LportAddresses {
    /// Parses `"MAC IP IP/PLEN ..."`. Errors name the word that is wrong.
    pub fn parse(s: &str) -> Result<LportAddresses, String> {
        let mut words = s.split_whitespace();
        let first = words.next().ok_or("empty address entry")?;
        let mac =
            Mac::parse(first).ok_or_else(|| format!("{first:?} is not an Ethernet address"))?;
        let mut out = LportAddresses {
            mac: Some(mac),
            ..Default::default()
        };
        for w in words {
            match parse_net(w) {
                Some(IpNet::V4(n)) => out.ipv4.push(n),
                Some(IpNet::V6(n)) => out.ipv6.push(n),
                None => return Err(format!("{w:?} is not an IP address")),
            }
        }
        Ok(out)
    }

    /// True when it has an IPv4 or IPv6 address.
    pub fn has_ip(&self) -> bool {
        !self.ipv4.is_empty() || !self.ipv6.is_empty()
    }
}

/// Parses `IP` (host prefix) or `IP/PLEN`, keeping the host bits (as OVN's networks do).
pub fn parse_net(s: &str) -> Option<IpNet> {
    if let Ok(n) = s.parse::<IpNet>() {
        return Some(n);
    }
    match s.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => Ipv4Net::new(a, 32).ok().map(IpNet::V4),
        IpAddr::V6(a) => Ipv6Net::new(a, 128).ok().map(IpNet::V6),
    }
}

/// Parses a bare IPv4 address.
pub fn parse_ip4(s: &str) -> Option<Ipv4Addr> {
    s.parse().ok()
}

/// Parses an `IP` or `[IPv6]` with an optional `:port` (load balancer VIPs and backends).
pub fn parse_ip_port(s: &str) -> Option<(IpAddr, Option<u16>)> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, tail) = rest.split_once(']')?;
        let ip: Ipv6Addr = ip.parse().ok()?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(p.parse().ok()?),
            None if tail.is_empty() => None,
            None => return None,
        };
        return Some((IpAddr::V6(ip), port));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some((ip, None));
    }
    let (ip, port) = s.rsplit_once(':')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    Some((IpAddr::V4(ip), Some(port.parse().ok()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nb_address_entries() {
        let a = LportAddresses::parse("0a:0:0:0:0:1 10.0.0.2 fd00::2/64").unwrap();
        assert_eq!(a.mac, Some(Mac(0x0a00_0000_0001)));
        assert_eq!(a.ipv4[0].to_string(), "10.0.0.2/32");
        assert_eq!(a.ipv6[0].to_string(), "fd00::2/64");
        assert!(LportAddresses::parse("zz 10.0.0.1").is_err());
        assert!(LportAddresses::parse("0a:00:00:00:00:01 10.0.0.300").is_err());
        assert_eq!(Mac(0x0a00_0000_0001).to_string(), "0a:00:00:00:00:01");
        assert_eq!(
            Mac(0x0a00_0000_0001).ipv6_lla().to_string(),
            "fe80::800:ff:fe00:1"
        );
    }

    #[test]
    fn parses_lb_endpoints() {
        assert_eq!(
            parse_ip_port("10.0.0.1:80"),
            Some(("10.0.0.1".parse().unwrap(), Some(80)))
        );
        assert_eq!(
            parse_ip_port("[fd00::1]:80"),
            Some(("fd00::1".parse().unwrap(), Some(80)))
        );
        assert_eq!(
            parse_ip_port("10.0.0.1"),
            Some(("10.0.0.1".parse().unwrap(), None))
        );
        assert_eq!(parse_ip_port("10.0.0.1:x"), None);
    }
}
