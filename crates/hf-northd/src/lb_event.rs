//! Empty load-balancer events (`ls_in_pre_lb` and `lr_in_dnat`, priority 130): a VIP without
//! backends, on a load balancer with `options:event=true` or with `NB_Global
//! options:controller_event=true` (deprecated, still honoured by 23.03), and without
//! `options:reject=true`, raises `trigger_event(event = "empty_lb_backends", ...)` for every
//! new packet to it, which the controller turns into a `Controller_Event` row (CMS's such as
//! Kubernetes' idling use it). The flow's CoPP protocol is `event-elb` ([`crate::copp`]).

use std::net::IpAddr;

use hf_expr::Action;
use hf_expr::ast::Expr;
use uuid::Uuid;

use crate::build::{and, eq_num, f, pred};
use crate::topo::Topo;

/// A router's VIP without backends that raises events.
#[derive(Clone, Debug)]
pub struct EventVip {
    /// The load balancer row.
    pub lb: Uuid,
    /// Owner of the flow.
    pub owner: crate::flow::Owner,
    /// The VIP.
    pub ip: IpAddr,
    /// Its port.
    pub port: Option<u16>,
    /// `tcp`, `udp` or `sctp`.
    pub proto: &'static str,
    /// The NB key (`10.0.0.1:80`).
    pub key: String,
}

/// Whether load balancer row `lb` raises empty-backend events.
pub fn enabled(topo: &Topo<'_>, lb: &hf_model::nb::LoadBalancer) -> bool {
    let on = |v: Option<&String>| v.is_some_and(|v| v == "true");
    on(lb.options.get("event"))
        || topo
            .nb
            .nb_global()
            .values()
            .next()
            .is_some_and(|g| on(g.options.get("controller_event")))
}

/// The event flow's match and actions for VIP `ip`[:`port`] of load balancer `lb`.
pub fn flow(lb: Uuid, ip: IpAddr, port: Option<u16>, proto: &str) -> (Expr, Vec<Action>) {
    let mut m = vec![crate::lr::act::ip_dst(ip), pred(proto)];
    let vip = match port {
        Some(p) => {
            m.push(eq_num(f(&format!("{proto}.dst")), p.into()));
            match ip {
                IpAddr::V4(a) => format!("{a}:{p}"),
                IpAddr::V6(a) => format!("[{a}]:{p}"),
            }
        }
        None => ip.to_string(),
    };
    let args = vec![
        ("event".to_string(), "empty_lb_backends".to_string()),
        ("vip".to_string(), vip),
        ("protocol".to_string(), proto.to_string()),
        ("load_balancer".to_string(), lb.to_string()),
    ];
    (
        and(m),
        vec![Action::TriggerEvent {
            args,
            span: hf_expr::Span::default(),
        }],
    )
}
