//! NB origins of flows, as ovn-detrace names them: a flow's `external_ids:stage-hint` is the
//! first 8 hex digits of the NB row it exists for (an ACL, a switch or router port, a NAT row,
//! a load balancer, a router policy or static route, a switch or router), and [`Origins`] maps
//! it back to a one-line description of that row.
//!
//! What it does not do: fetch NB (the shell replicates it when `--ovnnb-db` is given).

use hf_model::NbSnapshot;

/// NB rows by UUID text, with their descriptions.
#[derive(Debug, Clone, Default)]
pub struct Origins {
    rows: Vec<(String, String)>,
}

impl Origins {
    /// Describes every row of the tables flows are hinted with.
    pub fn new(nb: &NbSnapshot) -> Origins {
        let mut rows = Vec::new();
        for (u, a) in nb.acl() {
            rows.push((
                u.to_string(),
                format!(
                    "ACL: {}, priority={}, match=({}), action={}",
                    a.direction, a.priority, a.match_, a.action
                ),
            ));
        }
        for (u, p) in nb.logical_switch_port() {
            rows.push((u.to_string(), format!("Logical_Switch_Port: {}", p.name)));
        }
        for (u, p) in nb.logical_router_port() {
            rows.push((u.to_string(), format!("Logical_Router_Port: {}", p.name)));
        }
        for (u, n) in nb.nat() {
            rows.push((
                u.to_string(),
                format!(
                    "NAT: {}, external_ip={}, logical_ip={}",
                    n.type_, n.external_ip, n.logical_ip
                ),
            ));
        }
        for (u, l) in nb.load_balancer() {
            rows.push((u.to_string(), format!("Load_Balancer: {}", l.name)));
        }
        for (u, p) in nb.logical_router_policy() {
            rows.push((
                u.to_string(),
                format!(
                    "Logical_Router_Policy: priority={}, match=({}), action={}",
                    p.priority, p.match_, p.action
                ),
            ));
        }
        for (u, r) in nb.logical_router_static_route() {
            rows.push((
                u.to_string(),
                format!(
                    "Logical_Router_Static_Route: {} via {}",
                    r.ip_prefix, r.nexthop
                ),
            ));
        }
        for (u, s) in nb.logical_switch() {
            rows.push((u.to_string(), format!("Logical_Switch: {}", s.name)));
        }
        for (u, r) in nb.logical_router() {
            rows.push((u.to_string(), format!("Logical_Router: {}", r.name)));
        }
        rows.sort();
        Origins { rows }
    }

    /// The row a stage-hint names (the first whose UUID starts with it); `None` when no row or
    /// the hint is too short to mean one.
    pub fn lookup(&self, hint: &str) -> Option<String> {
        let h = hint.trim().to_ascii_lowercase();
        if h.len() < 8 {
            return None;
        }
        let i = self.rows.partition_point(|(u, _)| u.as_str() < h.as_str());
        self.rows
            .get(i)
            .filter(|(u, _)| u.starts_with(&h))
            .map(|(_, d)| d.clone())
    }
}
