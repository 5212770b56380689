//! Which hosts the NB asks for, and how each is configured: one host per VIF port (`type`
//! empty) whose `addresses` name a MAC and an IPv4 address (or a MAC alone with
//! `dhcpv4_options`: the host takes DHCP). Its prefix and gateway come from the router port
//! patched to the same switch whose network contains the address (else a /24 with no
//! gateway).
//!
//! A port whose first entry asks for dynamic addresses (`dynamic`, `MAC dynamic`, ...) gets its
//! host once northd has written `dynamic_addresses`, with that MAC (and that IPv4, or DHCP).
//!
//! What it does not do: IPv6 hosts, `unknown` addresses, several addresses per port (the first
//! MAC and IPv4 address are used), container (`parent_name`) ports.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use hf_model::NbSnapshot;

use crate::net::{Host, HostConfig, Rng};

/// A host the NB asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    /// Its MAC.
    pub mac: [u8; 6],
    /// A static address, prefix and gateway; `None` with `dhcp`.
    pub ipv4: Option<(Ipv4Addr, u8, Option<Ipv4Addr>)>,
    /// Take the address by DHCP.
    pub dhcp: bool,
    /// The first chassis of `options:requested-chassis`.
    pub requested_chassis: Option<String>,
    /// `external_ids:hf-sim-external=true`: on a 1 ms link.
    pub external: bool,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut n = 0;
    for (i, p) in s.split(':').enumerate() {
        if i >= 6 || p.len() != 2 {
            return None;
        }
        m[i] = u8::from_str_radix(p, 16).ok()?;
        n += 1;
    }
    (n == 6).then_some(m)
}

fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = s.split_once('/')?;
    let p: u8 = p.parse().ok()?;
    (p <= 32).then_some(())?;
    Some((a.parse().ok()?, p))
}

fn contains(net: Ipv4Addr, prefix: u8, ip: Ipv4Addr) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    };
    u32::from(net) & mask == u32::from(ip) & mask
}

/// The hosts the NB asks for, by logical port name.
pub fn wanted(nb: &NbSnapshot) -> BTreeMap<String, HostSpec> {
    let mut out = BTreeMap::new();
    for ls in nb.logical_switch().values() {
        let ports: Vec<_> = ls
            .ports
            .iter()
            .filter_map(|r| nb.logical_switch_port().get(&r.uuid()))
            .collect();
        // (network, prefix, router address) of every router port patched to this switch.
        let mut nets = Vec::new();
        for p in &ports {
            if p.type_ != "router" {
                continue;
            }
            let Some(lrp) = p.options.get("router-port") else {
                continue;
            };
            let Some(lrp) = nb.logical_router_port_by_name(lrp) else {
                continue;
            };
            for n in &lrp.networks {
                if let Some((a, pl)) = parse_cidr(n) {
                    nets.push((a, pl));
                }
            }
        }
        for p in &ports {
            if !p.type_.is_empty() || p.parent_name.is_some() {
                continue;
            }
            let Some(mut addr) = p.addresses.iter().next() else {
                continue;
            };
            if hf_northd::ipam::is_dynamic(addr) {
                match &p.dynamic_addresses {
                    Some(d) => addr = d,
                    None => continue,
                }
            }
            let mut words = addr.split_whitespace();
            let Some(mac) = words.next().and_then(parse_mac) else {
                continue;
            };
            let ip = words.find_map(|w| w.parse::<Ipv4Addr>().ok());
            let dhcp = p.dhcpv4_options.is_some();
            let ipv4 = match (ip, dhcp) {
                (_, true) => None,
                (Some(ip), false) => {
                    Some(match nets.iter().find(|(a, pl)| contains(*a, *pl, ip)) {
                        Some((a, pl)) => (ip, *pl, Some(*a)),
                        None => (ip, 24, None),
                    })
                }
                (None, false) => continue,
            };
            let requested_chassis = p
                .options
                .get("requested-chassis")
                .and_then(|c| c.split(',').next())
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty());
            let external = p
                .external_ids
                .get("hf-sim-external")
                .is_some_and(|v| v == "true");
            out.insert(
                p.name.clone(),
                HostSpec {
                    mac,
                    ipv4,
                    dhcp,
                    requested_chassis,
                    external,
                },
            );
        }
    }
    out
}

impl HostSpec {
    /// Builds the host for port `lsp`.
    pub fn build(&self, lsp: &str, mut rng: Rng, now: Duration) -> Result<Host, String> {
        let mut cfg = HostConfig::new(lsp, self.mac, rng.next_u64());
        if self.dhcp {
            cfg = cfg.with_dhcp4();
        } else if let Some((ip, p, gw)) = self.ipv4 {
            cfg = cfg.with_ipv4(ip, p, gw);
        }
        Host::new(cfg, now).map_err(|e| format!("host {lsp}: {e:?}"))
    }
}
