//! `snat-internal` (incident A): a NAT row whose SNAT half (`snat`, `dnat_and_snat`) rewrites
//! the source of traffic to a cluster-internal destination ([`crate::topo::Internal`]).
//!
//! Which destinations a row really rewrites, as OVN applies it:
//! - on a gateway router (`options:chassis`), everything it forwards from `logical_ip`: a
//!   destination counts when the router routes it out of a port other than the one
//!   `logical_ip` is reached through (a destination behind the sources' own port never reaches
//!   the router from them); when no port reaches `logical_ip`, every routed destination counts;
//! - on a distributed router, only what leaves through its gateway port (`gateway_port`, else
//!   the only one, else the one whose network holds `external_ip`, as northd picks it);
//! - on a router with neither, nothing (northd reports the row; no NAT is done).
//!
//! A destination is then out of scope when `allowed_ext_ips` is set and holds none of it (OVN:
//! `allowed_ext_ips` wins over `exempted_ext_ips`), when `exempted_ext_ips` covers it, or when
//! the row's `match` (24.09) is false for it ([`crate::eval`]); a match that cannot be decided
//! counts as "may rewrite", and the message says so.
//!
//! What it does not do: pure `dnat` rows (they rewrite destinations, not sources), router
//! policies, `lb_force_snat_ip`/`snat-ip` options.

use std::net::IpAddr;

use hf_model::nb;
use ipnet::IpNet;

use crate::eval::{Facts, Tri, eval};
use crate::net::{first_common, first_uncovered, overlaps, parse_net, parse_subnet, same_family};
use crate::topo::{Internal, Lookup, Router, Topo};
use crate::{Code, Finding, Severity, Source};

/// An internal network a row rewrites traffic to.
#[derive(Clone, Debug)]
struct Hit<'t> {
    internal: &'t Internal,
    example: IpAddr,
    /// The row's `match` could not be decided for it.
    maybe: bool,
}

/// The networks of an address set (entries that are not networks left out).
fn nets_of(s: &nb::AddressSet) -> Vec<IpNet> {
    s.addresses.iter().filter_map(|a| parse_subnet(a)).collect()
}

fn set_nets(
    nb: &hf_model::NbSnapshot,
    r: Option<hf_model::RowRef<nb::AddressSet>>,
) -> Option<Vec<IpNet>> {
    nb.get(r?).map(nets_of)
}

/// Adds the findings.
pub fn check(t: &Topo<'_>, out: &mut Vec<Finding>) {
    if !t.bad_cidrs.is_empty() {
        let g = t.nb.nb_global().values().next();
        out.push(Finding {
            code: Code::SnatInternal,
            severity: Severity::Warning,
            source: Source::Nb,
            table: "NB_Global".into(),
            row: g.map(|g| g.uuid.to_string()).unwrap_or_default(),
            name: "options:holdfast-cluster-cidrs".into(),
            message: format!(
                "holdfast-cluster-cidrs lists {} that {} not a network; {} ignored",
                t.bad_cidrs
                    .iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", "),
                if t.bad_cidrs.len() == 1 { "is" } else { "are" },
                if t.bad_cidrs.len() == 1 { "it is" } else { "they are" },
            ),
            why: "NAT rows are checked against the networks listed, so traffic to an ignored host network is not checked".into(),
            fix: "write each entry as IP/PLEN, comma-separated: `ovn-nbctl set NB_Global . options:holdfast-cluster-cidrs=\"10.6.158.0/24,10.0.0.0/16\"`".into(),
        });
    }
    for r in &t.routers {
        for n in r.row.nat.iter().filter_map(|x| t.nb.get(*x)) {
            if let Some(f) = row(t, r, n) {
                out.push(f);
            }
        }
    }
}

fn row(t: &Topo<'_>, r: &Router<'_>, n: &nb::Nat) -> Option<Finding> {
    let kind = match n.type_ {
        nb::NatType::Snat => "snat",
        nb::NatType::DnatAndSnat => "dnat_and_snat",
        _ => return None,
    };
    let logical = parse_subnet(&n.logical_ip)?;
    let external = parse_net(n.external_ip.trim())?;
    // Which ports carry rewritten traffic.
    let (gw_ports, source_ports) = if r.is_gateway_router() {
        let src = match t.route(r, logical.network()) {
            Lookup::Ports(p) => p,
            Lookup::Dropped => Default::default(),
        };
        (None, src)
    } else {
        let dgps = r.gateway_ports();
        let chosen = match n.gateway_port.and_then(|g| t.nb.get(g)) {
            Some(g) => r.port_index(&g.name),
            None if dgps.len() == 1 => dgps.first().copied(),
            None => dgps.iter().copied().find(|i| {
                r.ports[*i]
                    .nets
                    .iter()
                    .any(|x| x.contains(&external.addr()))
            }),
        };
        (Some(chosen?), Default::default())
    };
    let allowed = n
        .allowed_ext_ips
        .map(|a| set_nets(t.nb, Some(a)).unwrap_or_default());
    let exempted = if allowed.is_some() {
        Vec::new()
    } else {
        set_nets(t.nb, n.exempted_ext_ips).unwrap_or_default()
    };
    let extra = if n.match_.trim().is_empty() {
        None
    } else {
        // As northd parses it; a match that does not parse makes northd leave the row out.
        Some(hf_expr::parse_match(hf_expr::SymbolTable::shared(), &n.match_).ok()?)
    };
    let sets = |name: &str| t.nb.address_set_by_name(name).map(nets_of);
    let mut hits = Vec::new();
    for i in t.internal.iter().filter(|i| same_family(&i.net, &logical)) {
        let example = match &allowed {
            Some(a) => match a.iter().find_map(|x| first_common(x, &i.net)) {
                Some(e) => e,
                None => continue,
            },
            None => match first_uncovered(&i.net, &exempted) {
                Some(e) => e,
                None => continue,
            },
        };
        // Is the example routed through the NAT? (An address of the router itself is not
        // forwarded.)
        let own = r
            .ports
            .iter()
            .any(|p| p.nets.iter().any(|x| x.addr() == example));
        let rewritten = !own
            && match (t.route(r, example), gw_ports) {
                (Lookup::Dropped, _) => false,
                (Lookup::Ports(p), Some(dgp)) => p.contains(&dgp),
                (Lookup::Ports(p), None) => {
                    source_ports.is_empty() || p.iter().any(|x| !source_ports.contains(x))
                }
            };
        if !rewritten {
            continue;
        }
        let mut maybe = false;
        if let Some(e) = &extra {
            // The part of the internal network still in question.
            let dst = match &allowed {
                Some(a) => a
                    .iter()
                    .find(|x| overlaps(x, &i.net))
                    .map(|x| {
                        if x.prefix_len() > i.net.prefix_len() {
                            *x
                        } else {
                            i.net
                        }
                    })
                    .unwrap_or(i.net),
                None => i.net,
            };
            let facts = Facts {
                src: logical,
                dst,
                sets: &sets,
            };
            match eval(e, &facts) {
                Tri::False => continue,
                Tri::True => {}
                // Undecided for the whole network: decided for the example alone, it is a
                // sure hit; otherwise a possible one.
                Tri::Unknown => {
                    let host = IpNet::from(example);
                    maybe = eval(e, &Facts { dst: host, ..facts }) != Tri::True;
                }
            }
        }
        hits.push(Hit {
            internal: i,
            example,
            maybe,
        });
    }
    let first = hits.first()?;
    let name = format!(
        "{} {kind} {} -> {}",
        r.row.name,
        n.logical_ip.trim(),
        n.external_ip.trim()
    );
    let how = match (r.gw_chassis, gw_ports) {
        (Some(c), _) => format!("gateway router {} (on chassis {c})", r.row.name),
        (None, Some(p)) => format!(
            "distributed router {}'s gateway port {}",
            r.row.name, r.ports[p].row.name
        ),
        (None, None) => r.row.name.clone(),
    };
    let more = if hits.len() > 1 {
        format!(
            "; also {}",
            hits[1..]
                .iter()
                .take(3)
                .map(|h| format!("{} ({})", h.internal.net, h.internal.what))
                .collect::<Vec<_>>()
                .join(", ")
        ) + &if hits.len() > 4 {
            format!(" and {} more", hits.len() - 4)
        } else {
            String::new()
        }
    } else {
        String::new()
    };
    let maybe = if first.maybe {
        format!(
            " (its match `{}` cannot be decided for all of {}, so it may rewrite some of it)",
            crate::excerpt(n.match_.trim(), 60),
            first.internal.net
        )
    } else {
        String::new()
    };
    let nets: Vec<String> = hits.iter().map(|h| h.internal.net.to_string()).collect();
    let scoped_by = if allowed.is_some() {
        "allowed_ext_ips holds internal destinations; list only external networks in it".to_string()
    } else {
        format!(
            "set exempted_ext_ips to an address set holding {} (`ovn-nbctl create Address_Set name=internal addresses='\"{}\"'`, then `ovn-nbctl set NAT {} exempted_ext_ips=<its uuid>`), or allowed_ext_ips to only the external networks, or a match (OVN 24.09, holdfast) such as `{}.dst != {}`",
            nets.join(", "),
            nets.join("\",\""),
            n.uuid,
            if logical.addr().is_ipv4() {
                "ip4"
            } else {
                "ip6"
            },
            first.internal.net,
        )
    };
    Some(Finding {
        code: Code::SnatInternal,
        severity: Severity::Error,
        source: Source::Nb,
        table: "NAT".into(),
        row: n.uuid.to_string(),
        name,
        message: format!(
            "{kind} on {how} rewrites traffic from {} to cluster-internal destinations, e.g. {} in {} ({}){maybe}{more}",
            n.logical_ip.trim(),
            first.example,
            first.internal.net,
            first.internal.what,
        ),
        why: format!(
            "internal peers then see {} instead of the real source, which breaks source-checking traffic such as etcd's mTLS and network policy (incident A)",
            n.external_ip.trim()
        ),
        fix: scoped_by,
    })
}
