//! `egress-moves` (incident C): a VIF port whose SNAT source address would change if it moved
//! to another chassis.
//!
//! The shape found: OVN-Kubernetes' layer-2 design, a switch with several gateway routers on
//! it, each bound to its own chassis (`options:chassis`) with its own `snat`/`dnat_and_snat`
//! `external_ip` for the port's address; the port leaves through the gateway router of the
//! chassis it runs on, so a migration changes its source address. A port with its own
//! distributed `dnat_and_snat` (`logical_port` and `external_mac`), which follows it, is left
//! out. A distributed router's gateway SNAT is centralised on its gateway chassis and does not
//! depend on where the port runs, so it is not reported.
//!
//! What it does not do: follow routers behind routers (a port behind a cluster router whose
//! default route leads to per-node gateway routers is OVN-Kubernetes' layer-3 design, where
//! pods do not migrate).

use std::collections::BTreeMap;

use hf_model::nb;

use crate::net::{parse_net, parse_subnet};
use crate::topo::Topo;
use crate::{Code, Finding, Severity, Source};

/// Adds the findings.
pub fn check(t: &Topo<'_>, out: &mut Vec<Finding>) {
    let nb = t.nb;
    // Ports with their own distributed egress.
    let mut own: std::collections::BTreeSet<&str> = Default::default();
    for n in nb.nat().values() {
        if n.type_ == nb::NatType::DnatAndSnat
            && n.external_mac.as_deref().is_some_and(|m| !m.is_empty())
            && let Some(lp) = n.logical_port.as_deref().filter(|l| !l.is_empty())
        {
            own.insert(lp);
        }
    }
    // By switch and port name, so the report reads in order.
    let mut switches: Vec<&nb::LogicalSwitch> = nb.logical_switch().values().collect();
    switches.sort_by(|a, b| (&a.name, a.uuid).cmp(&(&b.name, b.uuid)));
    for ls in switches {
        // The gateway routers on this switch.
        let grs: Vec<_> = t
            .routers
            .iter()
            .filter(|r| r.is_gateway_router())
            .filter(|r| {
                r.ports
                    .iter()
                    .any(|p| p.switch.is_some_and(|s| s.uuid == ls.uuid))
            })
            .collect();
        if grs.len() < 2 {
            continue;
        }
        let mut ports: Vec<&nb::LogicalSwitchPort> =
            ls.ports.iter().filter_map(|r| nb.get(*r)).collect();
        ports.sort_by(|a, b| (&a.name, a.uuid).cmp(&(&b.name, b.uuid)));
        for p in ports {
            if !p.type_.is_empty() || own.contains(p.name.as_str()) {
                continue;
            }
            let ips: Vec<std::net::IpAddr> = p
                .addresses
                .iter()
                .chain(p.dynamic_addresses.iter())
                .flat_map(|a| a.split_whitespace().skip(1))
                .filter_map(parse_net)
                .map(|n| n.addr())
                .collect();
            let Some(ip) = ips.first() else { continue };
            // (chassis -> (router, external_ip)) for the SNAT rows covering the address.
            let mut egress: BTreeMap<&str, (&str, String)> = BTreeMap::new();
            for r in &grs {
                let Some(ch) = r.gw_chassis else { continue };
                let nat = r
                    .row
                    .nat
                    .iter()
                    .filter_map(|x| nb.get(*x))
                    .filter(|n| matches!(n.type_, nb::NatType::Snat | nb::NatType::DnatAndSnat))
                    .filter_map(|n| parse_subnet(&n.logical_ip).map(|l| (n, l)))
                    .filter(|(_, l)| l.contains(ip))
                    // The most specific row wins, as OVN orders SNAT flows.
                    .max_by_key(|(_, l)| l.prefix_len());
                if let Some((n, _)) = nat {
                    egress.insert(ch, (&r.row.name, n.external_ip.trim().to_string()));
                }
            }
            let mut addrs: Vec<&str> = egress.values().map(|(_, e)| e.as_str()).collect();
            addrs.sort();
            addrs.dedup();
            if egress.len() < 2 || addrs.len() < 2 {
                continue;
            }
            let list: Vec<String> = egress
                .iter()
                .map(|(ch, (r, e))| format!("{e} on {ch} ({r})"))
                .collect();
            out.push(Finding {
                code: Code::EgressMoves,
                severity: Severity::Warning,
                source: Source::Nb,
                table: "Logical_Switch_Port".into(),
                row: p.uuid.to_string(),
                name: format!("{} on {}", p.name, ls.name),
                message: format!(
                    "port {} ({ip}) on switch {} leaves through the gateway router of whichever chassis it runs on, and each SNATs it to another address: {}",
                    p.name,
                    ls.name,
                    list.join(", ")
                ),
                why: "a live migration changes the source address of its connections to the outside, so every established TCP session breaks (incident C)".into(),
                fix: format!(
                    "give it an egress address that follows it: a dnat_and_snat row with logical_port={} and external_mac on a distributed router (`ovn-nbctl lr-nat-add ROUTER dnat_and_snat EXTERNAL_IP {ip} {} MAC`)",
                    p.name, p.name
                ),
            });
        }
    }
}
