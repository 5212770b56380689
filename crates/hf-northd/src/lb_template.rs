//! Load balancer templates (`Load_Balancer options:template=true`), built as ovn-northd 23.03
//! builds them: VIPs and backends are written as `^variable`s that each chassis expands from
//! its `Chassis_Template_Var` before it parses a flow, so one SB flow serves every chassis
//! with that chassis's own addresses.
//!
//! What 23.03 (lib/lb.c, northd/northd.c) does and holdfast does alike:
//! - `options:address-family` (`ipv4`, the default, or `ipv6`) says which family the VIPs
//!   are; a VIP key is `^vip[:^port|:port]` (at most two `:`-separated parts, so an IPv6
//!   literal is not a template VIP) and its backends are `^ip[:^port|:port]` or `^backends`
//!   (a variable a chassis expands to a list of `ip:port`), or, failing that form, explicit
//!   `ip:port` backends of the VIP's family (23.03.1).
//! - The flows are those of an ordinary VIP with the variables written in: `ls_in_pre_stateful`
//!   (`reg1 = ^vip; reg2[0..15] = ^port; ct_lb_mark;`), `ls_in_lb` and `lr_in_dnat`
//!   (`ct_lb_mark(backends=<the NB value as written>)`, with `skip_snat`/`force_snat` on
//!   routers), `lr_in_defrag`, `lr_out_undnat` on distributed routers with a gateway port, the
//!   empty-backend event flows (`ls_in_pre_lb`, `lr_in_dnat` 130) and the `lr_out_snat`
//!   `skip_snat_for_lb` flow. A template's VIPs count for `has_lb_vip`.
//! - Skipped for templates, as in 23.03: health checks (no `Service_Monitor`, see
//!   [`crate::svc`]), `options:add_route` (forced off), `lr_in_unsnat` 120 (no NAT external
//!   IP is a template), neighbour responder `reachable` (forced to `none`, the templates'
//!   default), ARP/ND forwarding flows for the VIPs on attached switches (a template does
//!   not parse as an address).
//! - SB `Load_Balancer.vips` of an IPv6 template has each template VIP in brackets
//!   (`[^vip]:^port`), as ovn-controller expects ([`sb_vips`]).
//!
//! Each malformed part gets one named diagnostic and nothing is silently dropped:
//! [`BAD_FAMILY`] (ovn-northd silently takes anything but `ipv4` as IPv6; so does holdfast,
//! and says so), [`BAD_VIP`] (ovn-northd's "Failed to initialize LB VIP" warning; holdfast
//! also leaves out a VIP whose parts are neither `^variable`, a number nor an address of the
//! family, which ovn-northd writes into flows no chassis can parse), [`BAD_BACKENDS`] (the
//! "invalid backend: template (...) OR explicit (...)" warning), and the options 23.03 warns
//! about or holdfast does not build for templates ([`option_diagnostics`]).
//!
//! Checked by `tests/northd_parity/templates.rs` (real ovn-northd 23.03 on the same seeded
//! NBs: SB tables and every logical flow equal) and by the controller test
//! `template_lb_balances_to_chassis_backends` in `tests/northd_controller.rs`.

use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::actions::{Backend, CtLbArgs, LbBackend, TemplateBackend, TemplatePort};
use hf_expr::ast::{Expr, Value};
use hf_expr::constant::Constant;
use hf_model::nb;
use uuid::Uuid;

use crate::diag::Diags;

/// `options:address-family` is neither `ipv4` nor `ipv6`.
pub const BAD_FAMILY: &str =
    "is neither ipv4 nor ipv6; as ovn-northd 23.03 does, the template's VIPs are taken as IPv6";
/// A template VIP key is not `^vip[:^port|:port]`.
pub const BAD_VIP: &str = "should be a template of the form: '^vip_variable[:^port_variable|:port]' (ovn-northd 23.03: \"Failed to initialize LB VIP\"); the VIP is left out";
/// A template VIP's backends are neither templates nor explicit backends.
pub const BAD_BACKENDS: &str = "backends are neither templates of the form '^backendip_variable[:^port_variable|:port]' nor explicit IP:port backends of the VIP's family (ovn-northd 23.03: \"invalid backend: template (...) OR explicit (...)\"); the VIP is left out";

/// Whether `lb` is a template load balancer.
pub fn is_template(lb: &nb::LoadBalancer) -> bool {
    lb.options.get("template").is_some_and(|v| v == "true")
}

/// An address part of a template VIP or backend: `^variable` or a literal address.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addr {
    /// `^name` (the name without `^`).
    Var(String),
    /// A literal address.
    Ip(IpAddr),
}

impl Addr {
    /// The value in a match or an assignment.
    pub fn value(&self) -> Value {
        match self {
            Addr::Var(n) => Value::Template(n.clone()),
            Addr::Ip(IpAddr::V4(a)) => crate::build::ip4(*a),
            Addr::Ip(IpAddr::V6(a)) => crate::build::ip6(*a),
        }
    }

    fn text(&self) -> String {
        match self {
            Addr::Var(n) => format!("^{n}"),
            Addr::Ip(ip) => ip.to_string(),
        }
    }
}

/// A port part: `^variable` or a number.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Port {
    /// `^name`.
    Var(String),
    /// A port number.
    Num(u16),
}

impl Port {
    /// The value in a match or an assignment.
    pub fn value(&self) -> Value {
        match self {
            Port::Var(n) => Value::Template(n.clone()),
            Port::Num(p) => crate::build::num(u128::from(*p)),
        }
    }

    fn text(&self) -> String {
        match self {
            Port::Var(n) => format!("^{n}"),
            Port::Num(p) => p.to_string(),
        }
    }

    fn action(&self) -> TemplatePort {
        match self {
            Port::Var(n) => TemplatePort::Var(n.clone()),
            Port::Num(p) => TemplatePort::Num(*p),
        }
    }
}

/// One VIP of a template load balancer.
#[derive(Clone, Debug)]
pub struct TemplateVip {
    /// The NB row.
    pub lb: Uuid,
    /// Its name (the flows' owner).
    pub name: String,
    /// The NB key as written (`^vip:^port`), the flows' discriminator.
    pub key: String,
    /// `options:address-family` is not `ipv4`.
    pub v6: bool,
    /// The VIP.
    pub ip: Addr,
    /// Its port.
    pub port: Option<Port>,
    /// The backends, each as (address, port).
    pub backends: Vec<(Addr, Option<Port>)>,
    /// `tcp`, `udp` or `sctp`.
    pub proto: &'static str,
    /// `options:reject=true`.
    pub reject: bool,
    /// Empty-backend events ([`crate::lb_event::enabled`]).
    pub event: bool,
    /// `options:skip_snat=true`.
    pub skip_snat: bool,
    /// `selection_fields` as `hash_fields` (router: `tp_src`/`tp_dst` spelled per protocol).
    pub hash_fields: Option<String>,
}

impl TemplateVip {
    /// `ip4`/`ip6`.
    pub fn family(&self) -> &'static str {
        if self.v6 { "ip6" } else { "ip4" }
    }

    /// `ip4.dst == ^vip` / `ip6.dst == ^vip`.
    pub fn dst(&self) -> Expr {
        crate::build::eq(
            crate::build::f(&format!("{}.dst", self.family())),
            self.ip.value(),
        )
    }

    /// `PROTO.dst == ^port`, when the VIP has a port.
    pub fn port_dst(&self) -> Option<Expr> {
        self.port
            .as_ref()
            .map(|p| crate::build::eq(crate::build::f(&format!("{}.dst", self.proto)), p.value()))
    }

    /// `ct_lb_mark(backends=...[; hash_fields="..."][; flag]);`.
    pub fn ct_lb_mark(&self, flag: Option<&str>) -> Action {
        let backends = self
            .backends
            .iter()
            .map(|(ip, port)| match (ip, port) {
                (Addr::Var(n), p) => LbBackend::Template(TemplateBackend {
                    ip: n.clone(),
                    port: p.as_ref().map(Port::action),
                }),
                // Literal addresses come with a literal port or none ([`parse_backend`]).
                (Addr::Ip(a), p) => LbBackend::Addr(Backend {
                    ip: match a {
                        IpAddr::V4(a) => Constant::ipv4(*a),
                        IpAddr::V6(a) => Constant::ipv6(*a),
                    },
                    port: match p {
                        Some(Port::Num(n)) => Some(*n),
                        _ => None,
                    },
                }),
            })
            .collect();
        Action::CtLb {
            mark: true,
            args: Some(CtLbArgs {
                backends,
                hash_fields: self.hash_fields.clone(),
                flag: flag.map(str::to_string),
                legacy: false,
            }),
            span: hf_expr::Span::default(),
        }
    }

    /// The empty-backend event flow (match, actions), as [`crate::lb_event::flow`] for an
    /// ordinary VIP: `vip = "^vip:^port"` (`[^vip]:^port` for IPv6).
    pub fn event_flow(&self) -> (Expr, Vec<Action>) {
        let mut m = vec![self.dst(), crate::build::pred(self.proto)];
        let vip = match &self.port {
            Some(p) => {
                m.extend(self.port_dst());
                if self.v6 {
                    format!("[{}]:{}", self.ip.text(), p.text())
                } else {
                    format!("{}:{}", self.ip.text(), p.text())
                }
            }
            None => self.ip.text(),
        };
        let args = vec![
            ("event".to_string(), "empty_lb_backends".to_string()),
            ("vip".to_string(), vip),
            ("protocol".to_string(), self.proto.to_string()),
            ("load_balancer".to_string(), self.lb.to_string()),
        ];
        (
            crate::build::and(m),
            vec![Action::TriggerEvent {
                args,
                span: hf_expr::Span::default(),
            }],
        )
    }
}

/// Whether the template load balancer's VIPs are IPv6 (`options:address-family`), with a
/// diagnostic for a value that is neither `ipv4` nor `ipv6`.
fn family_v6(lb: &nb::LoadBalancer, diags: &mut Diags) -> bool {
    match lb.options.get("address-family").map(String::as_str) {
        None | Some("ipv4") => false,
        Some("ipv6") => true,
        Some(other) => {
            diags.push(
                "Load_Balancer",
                lb.uuid,
                &lb.name,
                format!("options:address-family={other:?} {BAD_FAMILY}"),
            );
            true
        }
    }
}

/// `^name` → the name, when it is one the flow language lexes as a template variable.
fn var(s: &str) -> Option<String> {
    let n = s.strip_prefix('^')?;
    let mut b = n.bytes();
    let first = b.next()?;
    let ok = (first.is_ascii_alphabetic() || first == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.');
    ok.then(|| n.to_string())
}

fn addr(s: &str, v6: bool) -> Option<Addr> {
    if let Some(n) = var(s) {
        return Some(Addr::Var(n));
    }
    let ip: IpAddr = s.parse().ok()?;
    (ip.is_ipv6() == v6).then_some(Addr::Ip(ip))
}

fn port(s: &str) -> Option<Port> {
    if let Some(n) = var(s) {
        return Some(Port::Var(n));
    }
    s.parse::<u16>().ok().filter(|p| *p > 0).map(Port::Num)
}

/// Splits on `:` as strtok does (empty parts dropped); `None` for more than two parts.
fn two_parts(s: &str) -> Option<(&str, Option<&str>)> {
    let mut it = s.split(':').filter(|p| !p.is_empty());
    let first = it.next()?;
    let second = it.next();
    if it.next().is_some() {
        return None;
    }
    Some((first, second))
}

/// One template backend (`^ip[:^port|:port]`); `Err` when it has more than two parts
/// (`Ok(None)`: two parts holdfast cannot write, see [`BAD_BACKENDS`]).
fn parse_backend(s: &str, v6: bool) -> Result<Option<(Addr, Option<Port>)>, ()> {
    let (ip, p) = two_parts(s).ok_or(())?;
    let Some(ip) = addr(ip, v6) else {
        return Ok(None);
    };
    let p = match p {
        None => None,
        Some(p) => match port(p) {
            Some(p) => Some(p),
            None => return Ok(None),
        },
    };
    // A literal address with a variable port has no spelling in `ct_lb_mark`'s grammar.
    if matches!((&ip, &p), (Addr::Ip(_), Some(Port::Var(_)))) {
        return Ok(None);
    }
    Ok(Some((ip, p)))
}

/// 23.03.1's backends of a template VIP: the template form, else explicit backends.
fn parse_backends(value: &str, v6: bool, vip_port: bool) -> Option<Vec<(Addr, Option<Port>)>> {
    let atoms: Vec<&str> = value.split(',').filter(|a| !a.is_empty()).collect();
    let template: Result<Vec<_>, ()> = atoms.iter().map(|a| parse_backend(a, v6)).collect();
    match template {
        Ok(list) => list.into_iter().collect(),
        Err(()) => atoms
            .iter()
            .map(|a| {
                let (ip, p) = crate::addr::parse_ip_port(a)?;
                (ip.is_ipv6() == v6 && p.is_some() == vip_port)
                    .then_some((Addr::Ip(ip), p.map(Port::Num)))
            })
            .collect(),
    }
}

/// The VIPs of template load balancer `lb` (its NB key order), with a diagnostic for each
/// malformed one and for each option templates do not have ([`option_diagnostics`]).
pub fn parse(
    lb: &nb::LoadBalancer,
    proto: &'static str,
    event: bool,
    diags: &mut Diags,
) -> Vec<TemplateVip> {
    let v6 = family_v6(lb, diags);
    option_diagnostics(lb, diags);
    // 23.03 spells `tp_src`/`tp_dst` per protocol when the row names one.
    let named = lb.protocol.is_some();
    let hash_fields = (!lb.selection_fields.is_empty()).then(|| {
        lb.selection_fields
            .iter()
            .map(|f| match f.as_str() {
                "tp_src" if named => format!("{proto}_src"),
                "tp_dst" if named => format!("{proto}_dst"),
                other => other.to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    });
    let mut out = Vec::new();
    for (k, v) in &lb.vips {
        let parsed = two_parts(k).and_then(|(ip, p)| {
            let ip = addr(ip, v6)?;
            let p = match p {
                None => None,
                Some(p) => Some(port(p)?),
            };
            Some((ip, p))
        });
        let Some((ip, p)) = parsed else {
            diags.push(
                "Load_Balancer",
                lb.uuid,
                &lb.name,
                format!("template VIP {k:?} {BAD_VIP}"),
            );
            continue;
        };
        let Some(backends) = parse_backends(v, v6, p.is_some()) else {
            diags.push(
                "Load_Balancer",
                lb.uuid,
                &lb.name,
                format!("template VIP {k:?}: {v:?}: {BAD_BACKENDS}"),
            );
            continue;
        };
        out.push(TemplateVip {
            lb: lb.uuid,
            name: lb.name.clone(),
            key: k.clone(),
            v6,
            ip,
            port: p,
            backends,
            proto,
            reject: lb.options.get("reject").is_some_and(|x| x == "true"),
            event,
            skip_snat: lb.options.get("skip_snat").is_some_and(|x| x == "true"),
            hash_fields: hash_fields.clone(),
        });
    }
    out
}

/// Diagnostics for the options templates do not have: `add_route` and neighbour responder
/// `reachable` (23.03 warns and forces them off / to `none`), `all` and `affinity_timeout`
/// (not built by holdfast for templates). Health checks are reported by [`crate::svc`].
fn option_diagnostics(lb: &nb::LoadBalancer, diags: &mut Diags) {
    let mut say = |m: &str| diags.push("Load_Balancer", lb.uuid, &lb.name, m.to_string());
    if lb.options.get("add_route").is_some_and(|v| v == "true") {
        say(
            "options:add_route: a template load balancer does not support add_route (ovn-northd 23.03 forces it to disabled)",
        );
    }
    match lb.options.get("neighbor_responder").map(String::as_str) {
        None | Some("none") => {}
        Some("all") => say(
            "options:neighbor_responder=all on a template load balancer is not built by holdfast northd (the router answers no ARP/ND for template VIPs)",
        ),
        Some(other) => say(&format!(
            "options:neighbor_responder={other:?} is not valid for a template load balancer (ovn-northd 23.03 forces it to none)"
        )),
    }
    if lb.options.contains_key("affinity_timeout") {
        say(
            "options:affinity_timeout on a template load balancer is not compiled by holdfast northd; the VIPs balance without affinity",
        );
    }
}

/// SB `Load_Balancer.vips` of template `lb`: the NB VIPs, with the VIP of each IPv6 template
/// key in brackets (`[^vip]:^port`, 23.03's `template_vips`), only its VIPs that parse.
pub fn sb_vips(lb: &nb::LoadBalancer) -> Option<std::collections::BTreeMap<String, String>> {
    if !is_template(lb) || lb.options.get("address-family").is_none_or(|f| f == "ipv4") {
        return None;
    }
    let mut out = std::collections::BTreeMap::new();
    let mut quiet = Diags::default();
    for v in parse(lb, "tcp", false, &mut quiet) {
        let key = match (&v.ip, &v.port) {
            (Addr::Var(_), p) => format!(
                "[{}]{}",
                v.ip.text(),
                p.as_ref()
                    .map(|p| format!(":{}", p.text()))
                    .unwrap_or_default()
            ),
            (Addr::Ip(_), _) => v.key.clone(),
        };
        if let Some(val) = lb.vips.get(&v.key) {
            out.insert(key, val.clone());
        }
    }
    Some(out)
}

/// The VIP addresses of template `lb` as written (`^vip`, or a literal), those that parse.
pub fn vip_texts(lb: &nb::LoadBalancer) -> Vec<String> {
    let mut quiet = Diags::default();
    parse(lb, "tcp", false, &mut quiet)
        .into_iter()
        .map(|v| v.ip.text())
        .collect()
}

/// Router flows' backends as a match: `(ip4.src == ^b && tcp.src == ^p) || ...`.
pub fn backends_src(v: &TemplateVip) -> Expr {
    let fam = v.family();
    crate::build::or(v.backends.iter().map(|(ip, p)| {
        let mut m = vec![crate::build::eq(
            crate::build::f(&format!("{fam}.src")),
            ip.value(),
        )];
        if let Some(p) = p {
            m.push(crate::build::eq(
                crate::build::f(&format!("{}.src", v.proto)),
                p.value(),
            ));
        }
        crate::build::and(m)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts() {
        assert_eq!(two_parts("^vip:^port"), Some(("^vip", Some("^port"))));
        assert_eq!(two_parts("^vip"), Some(("^vip", None)));
        assert_eq!(two_parts("[fd00::1]:80"), None);
        assert_eq!(
            parse_backends("^b1:^p1,^b2:80", false, true),
            Some(vec![
                (Addr::Var("b1".into()), Some(Port::Var("p1".into()))),
                (Addr::Var("b2".into()), Some(Port::Num(80))),
            ])
        );
        // IPv6 explicit backends: the template form fails (more than two parts).
        assert_eq!(
            parse_backends("[fd00::2]:80", true, true),
            Some(vec![(
                Addr::Ip("fd00::2".parse().unwrap()),
                Some(Port::Num(80))
            )])
        );
        assert_eq!(parse_backends("a:b:c", false, true), None);
        assert_eq!(parse_backends("foo", false, false), None);
    }
}
