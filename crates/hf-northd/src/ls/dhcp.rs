//! `ls_in_dhcp_options` and `ls_in_dhcp_response`: native DHCPv4 and DHCPv6 from the port's
//! `dhcpv4_options` / `dhcpv6_options` rows, as 23.03 writes them. A port's DHCPDISCOVER
//! (and renewals to the server or broadcast) from its own MAC get `put_dhcp_opts(offerip =
//! its address in the row's `cidr`, the row's options sorted by name, `netmask` from the
//! cidr, `hostname` from `options:hostname`)`; a successful one is answered from `server_mac`
//! / `server_id`. DHCPv6 solicitations get `put_dhcpv6_opts(ia_addr = ..., ...)` (no
//! `ia_addr` with `dhcpv6_stateless=true`) and are answered from the link-local address of
//! `server_id`.
//!
//! Option values are NB text in the logical-flow language (`10.0.0.1`, `{8.8.8.8, 8.8.4.4}`,
//! `"example.org"`); each is tokenised with hf-expr's lexer into a typed value. A row missing
//! a required option, or with a value that does not read, is a diagnostic naming the row and
//! the port gets no DHCP flows. So is an option real ovn-controller would not parse (a name
//! missing from the SB code tables of [`crate::tables::dhcp`], or a number where its type
//! wants a string or the other way round): ovn-northd writes such a flow as it is and the
//! controller drops it, so the port gets no native DHCP either way. Not compiled: `external`
//! ports (they need an HA chassis group). The code tables themselves are written by
//! [`crate::tables::dhcp`].

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use hf_expr::Action;
use hf_expr::actions::{OptValue, ResultFn};
use hf_expr::ast::Expr;
use hf_expr::lexer::{Tok, tokenize};
use hf_model::nb;
use ipnet::{Ipv4Net, Ipv6Net};

use super::Sw;
use super::act::{loopback, next, output};
use super::arp_rsp::lsp_addrs;
use crate::addr::Mac;
use crate::build::{always, and, bit, eq, eq_num, f, in_set, inport, ip4, ip6, mac, num, pred};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::regs::Reg;
use crate::stage::Stage;
use crate::topo::{PortIdx, PortKind};

/// Reads one option value (NB text) as a typed value.
pub fn opt_value(text: &str) -> Result<OptValue, String> {
    let toks = tokenize(text).map_err(|e| e.to_string())?;
    let toks: Vec<&Tok> = toks
        .iter()
        .map(|t| &t.tok)
        .filter(|t| **t != Tok::End)
        .collect();
    let one = |t: &Tok| match t {
        Tok::Const(c) => Some(OptValue::Const(*c)),
        Tok::Str(s) => Some(OptValue::Str(s.clone())),
        _ => None,
    };
    match toks.as_slice() {
        [t] => one(t).ok_or_else(|| format!("{text:?} is not a constant or a string")),
        [Tok::LBrace, inner @ .., Tok::RBrace] => {
            let mut v = Vec::new();
            for t in inner {
                if **t == Tok::Comma {
                    continue;
                }
                v.push(one(t).ok_or_else(|| format!("{text:?}: a set of constants or strings"))?);
            }
            Ok(OptValue::Set(v))
        }
        _ => Err(format!(
            "{text:?} is not a constant, a string or a set of them"
        )),
    }
}

/// Why ovn-controller would not parse `name = value` in `put_dhcp(v6)_opts` (as 23.03's
/// action parser checks it), if it would not.
fn unparsable(v6: bool, name: &str, value: &OptValue) -> Option<String> {
    let Some(ty) = crate::tables::dhcp::type_of(v6, name) else {
        return Some(format!(
            "is not a DHCP{} option ovn-controller knows",
            if v6 { "v6" } else { "v4" }
        ));
    };
    let items: Vec<&OptValue> = match value {
        OptValue::Set(v) => v.iter().collect(),
        one => vec![one],
    };
    let strings = items
        .iter()
        .filter(|v| matches!(v, OptValue::Str(_)))
        .count();
    if strings != 0 && strings != items.len() {
        return Some("mixes strings and numbers".into());
    }
    match ty {
        "host_id" => None,
        "str" | "domains" if strings == 0 => Some(format!("(type {ty}) needs a string")),
        "str" | "domains" => None,
        _ if strings != 0 => Some(format!("(type {ty}) needs a number or address")),
        _ => None,
    }
}

fn options(
    d: &nb::DhcpOptions,
    v6: bool,
    skip: &[&str],
    extra: &BTreeMap<String, String>,
    diags: &mut Diags,
    port: &str,
) -> Option<Vec<(String, OptValue)>> {
    let mut all: BTreeMap<&str, &str> = d
        .options
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for (k, v) in extra {
        all.insert(k, v);
    }
    let mut out = Vec::with_capacity(all.len());
    for (k, v) in all {
        match opt_value(v) {
            Ok(x) => {
                if let Some(why) = unparsable(v6, k, &x) {
                    diags.push(
                        "DHCP_Options",
                        d.uuid,
                        d.cidr.clone(),
                        format!("option {k} {why}; port {port} gets no native DHCP"),
                    );
                    return None;
                }
                out.push((k.to_string(), x));
            }
            Err(e) => {
                diags.push(
                    "DHCP_Options",
                    d.uuid,
                    d.cidr.clone(),
                    format!("option {k}: {e}; port {port} gets no native DHCP"),
                );
                return None;
            }
        }
    }
    Some(out)
}

fn put_opts(v6: bool, opts: Vec<(String, OptValue)>) -> Vec<Action> {
    vec![
        Action::Result {
            dst: Reg::DhcpOptsResult.field(),
            func: ResultFn::PutDhcpOpts { v6, opts },
            span: hf_expr::Span::default(),
        },
        next(),
    ]
}

fn v4(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags, p: PortIdx, d: &nb::DhcpOptions) {
    let port = sw.port(p);
    let Ok(cidr) = d.cidr.parse::<Ipv4Net>() else {
        diags.push(
            "DHCP_Options",
            d.uuid,
            d.cidr.clone(),
            format!(
                "cidr {:?} is not IPv4/PLEN; port {} gets no native DHCP",
                d.cidr, port.name
            ),
        );
        return;
    };
    let o = &d.options;
    let (Some(server), Some(smac), Some(_)) = (
        o.get("server_id").and_then(|s| s.parse::<Ipv4Addr>().ok()),
        o.get("server_mac").and_then(|s| Mac::parse(s)),
        o.get("lease_time"),
    ) else {
        diags.push(
            "DHCP_Options",
            d.uuid,
            d.cidr.clone(),
            format!(
                "server_id, server_mac and lease_time are required (server_id an IPv4 address, server_mac a MAC); port {} gets no native DHCP",
                port.name
            ),
        );
        return;
    };
    let mut extra = BTreeMap::new();
    extra.insert("netmask".to_string(), cidr.netmask().to_string());
    if let Some(h) = port.options.get("hostname") {
        // OVN passes the text on as it is (an operator writes `"name"`); a bare word is taken
        // as the string it obviously is.
        let v = if opt_value(h).is_ok() {
            h.clone()
        } else {
            format!("{h:?}")
        };
        extra.insert("hostname".to_string(), v);
    }
    for a in lsp_addrs(sw, p) {
        let Some(offer) = a.v4.iter().copied().find(|ip| cidr.contains(ip)) else {
            continue;
        };
        let Some(mut opts) = options(d, false, &["server_mac"], &extra, diags, &port.name) else {
            return;
        };
        opts.insert(
            0,
            (
                "offerip".to_string(),
                OptValue::Const(hf_expr::Constant::ipv4(offer)),
            ),
        );
        let base = || vec![inport(&port.name), eq(f("eth.src"), mac(a.mac))];
        let udp = || vec![eq_num(f("udp.src"), 68), eq_num(f("udp.dst"), 67)];
        let mut discover = base();
        discover.extend([
            eq(f("ip4.src"), ip4(Ipv4Addr::UNSPECIFIED)),
            eq(f("ip4.dst"), ip4(Ipv4Addr::BROADCAST)),
        ]);
        discover.extend(udp());
        let mut renew = base();
        renew.extend([
            eq(f("ip4.src"), ip4(offer)),
            in_set(f("ip4.dst"), [ip4(server), ip4(Ipv4Addr::BROADCAST)]),
        ]);
        renew.extend(udp());
        let mut answer = base();
        answer.push(pred("ip4"));
        answer.extend(udp());
        answer.push(bit(Reg::DhcpOptsResult.field()));
        let owner = || Owner::Port(port.name.clone());
        for (disc, m) in [("dhcp4 discover", discover), ("dhcp4 renew", renew)] {
            sw.owned(
                out,
                Stage::LsInDhcpOptions,
                100,
                owner(),
                disc,
                Some(d.uuid),
                and(m),
                put_opts(false, opts.clone()),
                None,
            );
        }
        sw.owned(
            out,
            Stage::LsInDhcpResponse,
            100,
            owner(),
            "dhcp4",
            Some(d.uuid),
            and(answer),
            vec![
                Action::move_field(f("eth.dst"), f("eth.src")),
                Action::assign(f("eth.src"), mac(smac)),
                Action::assign(f("ip4.src"), ip4(server)),
                Action::assign(f("udp.src"), num(67)),
                Action::assign(f("udp.dst"), num(68)),
                Action::move_field(f("outport"), f("inport")),
                loopback(),
                output(),
            ],
            None,
        );
        return;
    }
}

fn v6(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags, p: PortIdx, d: &nb::DhcpOptions) {
    let port = sw.port(p);
    let Ok(cidr) = d.cidr.parse::<Ipv6Net>() else {
        diags.push(
            "DHCP_Options",
            d.uuid,
            d.cidr.clone(),
            format!(
                "cidr {:?} is not IPv6/PLEN; port {} gets no native DHCPv6",
                d.cidr, port.name
            ),
        );
        return;
    };
    let Some(smac) = d.options.get("server_id").and_then(|s| Mac::parse(s)) else {
        diags.push(
            "DHCP_Options",
            d.uuid,
            d.cidr.clone(),
            format!(
                "server_id (a MAC) is required; port {} gets no native DHCPv6",
                port.name
            ),
        );
        return;
    };
    let stateless = d
        .options
        .get("dhcpv6_stateless")
        .is_some_and(|v| v == "true");
    for a in lsp_addrs(sw, p) {
        let Some(offer) = a.v6.iter().copied().find(|ip| cidr.contains(ip)) else {
            continue;
        };
        let Some(mut opts) = options(
            d,
            true,
            &["dhcpv6_stateless"],
            &BTreeMap::new(),
            diags,
            &port.name,
        ) else {
            return;
        };
        if !stateless {
            opts.insert(
                0,
                (
                    "ia_addr".to_string(),
                    OptValue::Const(hf_expr::Constant::ipv6(offer)),
                ),
            );
        }
        let mut m: Vec<Expr> = vec![
            inport(&port.name),
            eq(f("eth.src"), mac(a.mac)),
            eq(
                f("ip6.dst"),
                ip6("ff02::1:2".parse::<Ipv6Addr>().expect("constant address")),
            ),
            eq_num(f("udp.src"), 546),
            eq_num(f("udp.dst"), 547),
        ];
        let owner = || Owner::Port(port.name.clone());
        sw.owned(
            out,
            Stage::LsInDhcpOptions,
            100,
            owner(),
            "dhcp6",
            Some(d.uuid),
            and(m.clone()),
            put_opts(true, opts),
            None,
        );
        m.push(bit(Reg::DhcpOptsResult.field()));
        sw.owned(
            out,
            Stage::LsInDhcpResponse,
            100,
            owner(),
            "dhcp6",
            Some(d.uuid),
            and(m),
            vec![
                Action::move_field(f("eth.dst"), f("eth.src")),
                Action::assign(f("eth.src"), mac(smac)),
                Action::move_field(f("ip6.dst"), f("ip6.src")),
                Action::assign(f("ip6.src"), ip6(smac.ipv6_lla())),
                Action::assign(f("udp.src"), num(547)),
                Action::assign(f("udp.dst"), num(546)),
                Action::move_field(f("outport"), f("inport")),
                loopback(),
                output(),
            ],
            None,
        );
        return;
    }
}

/// Writes both stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    for stage in [Stage::LsInDhcpOptions, Stage::LsInDhcpResponse] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
    }
    let nb = sw.topo.nb;
    for p in sw.ports {
        let port = sw.port(*p);
        if !port.enabled || matches!(port.kind, PortKind::SwitchRouter { .. }) {
            continue;
        }
        let Some(lsp) = nb.logical_switch_port().get(&port.nb) else {
            continue;
        };
        if lsp.dhcpv4_options.is_none() && lsp.dhcpv6_options.is_none() {
            continue;
        }
        if matches!(&port.kind, PortKind::OtherLsp(t) if t == "external") {
            diags.push(
                "Logical_Switch_Port",
                port.nb,
                &port.name,
                "native DHCP for external ports (through an HA chassis group) is not compiled by holdfast northd",
            );
            continue;
        }
        if let Some(d) = lsp.dhcpv4_options.and_then(|r| nb.get(r)) {
            v4(sw, out, diags, *p, d);
        }
        if let Some(d) = lsp.dhcpv6_options.and_then(|r| nb.get(r)) {
            v6(sw, out, diags, *p, d);
        }
    }
}
