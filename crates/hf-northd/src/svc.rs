//! Load balancer health checks, as ovn-northd 23.03 plans them (`ovn_lb_svc_create`,
//! `build_lb_vip_actions`, `build_lswitch_arp_nd_service_monitor`): from NB's
//! `Load_Balancer.health_check` and `ip_port_mappings`, and the `Service_Monitor.status`
//! controllers wrote to SB, a [`SvcPlan`]:
//!
//! - one `Service_Monitor` per (logical port, backend IP, backend port, protocol) that some VIP
//!   with a health check balances to, when `ip_port_mappings` maps the backend IP (`[ip]` for
//!   IPv6) to `lport:src_ip`, the port exists and is enabled; its `options` are the check's,
//!   its `src_ip` the mapping's, its `src_mac` `SB_Global.options:svc_monitor_mac`. A monitor
//!   whose port is not up in SB and whose status is `online` is set `offline` (as ovn-northd
//!   does);
//! - per VIP with a health check, the backends `ct_lb_mark(backends=...)` lists: those with a
//!   monitor whose status is unset or `online` (a backend without a monitor is left out, as in
//!   ovn-northd); none left: the VIP drops (or rejects with `options:reject=true`);
//! - the ARP (IPv4) / ND (IPv6) responder for each mapping's source IP on the switch of its
//!   port, answering with `svc_monitor_mac` (priority 110 of `ls_in_arp_rsp`).
//!
//! It reads NB directly, not the [`crate::topo::Topo`]: the incremental compiler plans before
//! it knows whether the topology is patched or rebuilt, and a plan that differs from the last
//! one makes the compile a full one (so a status change recompiles every datapath; monitors
//! change rarely). Bad rows are diagnostics in the plan (compared with it).
//!
//! What 23.03 has not and this does not do: the `lport:src_ip:az` mapping form (OVN 24.03's
//! interconnection monitors; here it is a diagnostic), SCTP and template load balancers (a
//! diagnostic each, no monitor). What it does not do: probe (the controller's job).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hf_model::{NbSnapshot, nb};
use uuid::Uuid;

use crate::addr::parse_ip_port;
use crate::diag::{Diagnostic, Diags};

/// A `Service_Monitor`'s identity (SB's index): logical port, backend IP (as ovn-northd prints
/// it), backend port, protocol (`tcp` or `udp`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SvcKey {
    /// `logical_port`.
    pub logical_port: String,
    /// `ip`.
    pub ip: String,
    /// `port`.
    pub port: u16,
    /// `protocol`.
    pub protocol: String,
}

/// What SB holds of a monitor northd reads: its status and whether its port is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SvcSeen {
    /// `Service_Monitor.status` (`online`, `offline`, `error`).
    pub status: String,
    /// `Port_Binding.up` of its logical port.
    pub port_up: bool,
}

/// One `Service_Monitor` row as northd writes it (status aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonRow {
    /// `options`: the health check's.
    pub options: BTreeMap<String, String>,
    /// `src_ip`: the mapping's source IP.
    pub src_ip: String,
    /// `src_mac`: `svc_monitor_mac`.
    pub src_mac: String,
    /// Write `status=offline` (SB says `online` but the port is not up).
    pub force_offline: bool,
}

/// One ARP/ND responder for a monitor's source IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Responder {
    /// The load balancer it is for (the flow's owner and hint).
    pub lb: Uuid,
    /// Its name.
    pub lb_name: String,
}

/// A backend: IP and port (as the VIP's flows list it).
pub type Backend = (IpAddr, Option<u16>);

/// The health checks' part of a compile. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SvcPlan {
    /// `svc_monitor_mac` in force.
    pub mac: String,
    /// `Service_Monitor` rows.
    pub monitors: BTreeMap<SvcKey, MonRow>,
    /// (load balancer, VIP key as written) → the backends its flows list, for VIPs with a
    /// health check.
    pub active: BTreeMap<(Uuid, String), Vec<Backend>>,
    /// (switch name, source IP) → the responder (the first load balancer by name wins when
    /// several map the same source on one switch; the flows are equal but for the hint).
    pub responders: BTreeMap<(String, IpAddr), Responder>,
    /// Diagnostics about health checks and mappings.
    pub diags: Vec<Diagnostic>,
}

impl SvcPlan {
    /// The backends of `vip` (its key as written) of load balancer `lb` when the VIP has a
    /// health check; `None`: every backend is used.
    pub fn active(&self, lb: Uuid, vip: &str) -> Option<&[Backend]> {
        if self.active.is_empty() {
            return None;
        }
        self.active.get(&(lb, vip.to_string())).map(Vec::as_slice)
    }

    /// Responders on switch `sw`.
    pub fn responders_on<'a>(
        &'a self,
        sw: &'a str,
    ) -> impl Iterator<Item = (IpAddr, &'a Responder)> + 'a {
        self.responders
            .iter()
            .filter(move |((s, _), _)| s == sw)
            .map(|((_, ip), r)| (*ip, r))
    }
}

/// Where a mapping's logical port is.
enum PortAt {
    /// A switch port: (switch name, enabled).
    Switch(String, bool),
    /// A router port.
    Router,
}

/// Plans the health checks of `nb` given what SB holds of the monitors (`seen`) and the
/// `SB_Global.options` SB holds (for `svc_monitor_mac`).
pub fn plan(
    nb: &NbSnapshot,
    seen: &BTreeMap<SvcKey, SvcSeen>,
    sb_options: &BTreeMap<String, String>,
) -> SvcPlan {
    let mut lbs: Vec<&nb::LoadBalancer> = nb
        .load_balancer()
        .values()
        .filter(|lb| !lb.health_check.is_empty())
        .collect();
    if lbs.is_empty() {
        return SvcPlan::default();
    }
    lbs.sort_by(|a, b| (&a.name, a.uuid).cmp(&(&b.name, b.uuid)));
    let mut out = SvcPlan {
        mac: crate::tables::global::svc_monitor_mac(nb, sb_options),
        ..Default::default()
    };
    let mut diags = Diags::default();
    // The ports the mappings name, found once.
    let wanted: BTreeSet<&str> = lbs
        .iter()
        .flat_map(|lb| lb.ip_port_mappings.values())
        .filter_map(|v| v.split_once(':').map(|(p, _)| p))
        .collect();
    let mut ports: BTreeMap<&str, PortAt> = BTreeMap::new();
    if !wanted.is_empty() {
        let mut switches: Vec<&nb::LogicalSwitch> = nb.logical_switch().values().collect();
        switches.sort_by(|a, b| (&a.name, a.uuid).cmp(&(&b.name, b.uuid)));
        for sw in switches {
            for p in sw.ports.iter().filter_map(|r| nb.get(*r)) {
                if let Some(n) = wanted.get(p.name.as_str()) {
                    ports.entry(n).or_insert_with(|| {
                        PortAt::Switch(sw.name.clone(), p.enabled.unwrap_or(true))
                    });
                }
            }
        }
        for p in nb.logical_router_port().values() {
            if let Some(n) = wanted.get(p.name.as_str()) {
                ports.entry(n).or_insert(PortAt::Router);
            }
        }
    }
    for lb in lbs {
        plan_lb(lb, nb, seen, &ports, &mut out, &mut diags);
    }
    out.diags = diags.0;
    out.diags.sort();
    out.diags.dedup();
    out
}

fn plan_lb(
    lb: &nb::LoadBalancer,
    nb: &NbSnapshot,
    seen: &BTreeMap<SvcKey, SvcSeen>,
    ports: &BTreeMap<&str, PortAt>,
    out: &mut SvcPlan,
    diags: &mut Diags,
) {
    let mac = out.mac.clone();
    let mut say = |reason: String| diags.push("Load_Balancer", lb.uuid, &lb.name, reason);
    let protocol = match &lb.protocol {
        None | Some(nb::LoadBalancerProtocol::Tcp) => "tcp",
        Some(nb::LoadBalancerProtocol::Udp) => "udp",
        Some(nb::LoadBalancerProtocol::Sctp) => {
            say("health_check: SCTP load balancers have no health checks (as in OVN 23.03); no Service_Monitor is made and every backend is used".into());
            return;
        }
        // The protocol itself is reported where the VIPs are compiled.
        Some(_) => return,
    };
    if lb.options.get("template").is_some_and(|v| v == "true") {
        say("health_check: template load balancers have no health checks (as in OVN 23.03); no Service_Monitor is made".into());
        return;
    }
    // The checks in the set's order (by UUID); the first for a VIP is used, as in ovn-northd.
    let checks: Vec<&nb::LoadBalancerHealthCheck> =
        lb.health_check.iter().filter_map(|r| nb.get(*r)).collect();
    for hc in &checks {
        if !lb.vips.contains_key(&hc.vip) {
            say(format!(
                "health_check {}: vip {:?} is no VIP of this load balancer (written exactly as the `vips` key); it checks nothing",
                hc.uuid, hc.vip
            ));
        }
    }
    for (key, backends) in &lb.vips {
        let Some(hc) = checks.iter().find(|h| h.vip == *key) else {
            continue;
        };
        let Some((vip, _)) = parse_ip_port(key) else {
            continue;
        };
        let mut list = Vec::new();
        let mut ok = true;
        for b in backends.split(',').map(str::trim).filter(|b| !b.is_empty()) {
            match parse_ip_port(b) {
                Some((ip, port)) if ip.is_ipv4() == vip.is_ipv4() => list.push((ip, port)),
                // Reported where the VIP is compiled.
                _ => ok = false,
            }
        }
        if !ok {
            continue;
        }
        let mut active = Vec::new();
        for (ip, port) in list {
            let mkey = match ip {
                IpAddr::V4(a) => a.to_string(),
                IpAddr::V6(a) => format!("[{a}]"),
            };
            let Some(mapping) = lb.ip_port_mappings.get(&mkey) else {
                say(format!(
                    "health_check of VIP {key:?}: backend {mkey} has no ip_port_mappings entry (\"{mkey}\"=\"LPORT:SOURCE_IP\"); it is not monitored and, as in ovn-northd, left out of the VIP"
                ));
                continue;
            };
            let Some((lport, src)) = mapping.split_once(':') else {
                say(format!(
                    "ip_port_mappings {mkey:?}={mapping:?} is not LPORT:SOURCE_IP; backend {mkey} of VIP {key:?} is not monitored and left out of the VIP"
                ));
                continue;
            };
            let src_ip = src
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .unwrap_or(src)
                .parse::<IpAddr>();
            let Ok(src_ip) = src_ip else {
                let az = if src.matches(':').count() == 1 && src.contains('.') {
                    " (the LPORT:SOURCE_IP:AZ form is OVN 24.03's, for interconnection; 23.03 and holdfast do not have it)"
                } else {
                    ""
                };
                say(format!(
                    "ip_port_mappings {mkey:?}={mapping:?}: source IP {src:?} does not parse{az}; backend {mkey} of VIP {key:?} is not monitored and left out of the VIP"
                ));
                continue;
            };
            let Some(at) = ports.get(lport) else {
                say(format!(
                    "ip_port_mappings {mkey:?}={mapping:?}: no logical port {lport:?}; backend {mkey} of VIP {key:?} is not monitored and left out of the VIP"
                ));
                continue;
            };
            let (sw, enabled) = match at {
                PortAt::Switch(sw, e) => (sw, *e),
                PortAt::Router => {
                    say(format!(
                        "ip_port_mappings {mkey:?}={mapping:?}: {lport:?} is a router port, not the switch port of the backend; backend {mkey} of VIP {key:?} is not monitored and left out of the VIP"
                    ));
                    continue;
                }
            };
            out.responders
                .entry((sw.clone(), src_ip))
                .or_insert_with(|| Responder {
                    lb: lb.uuid,
                    lb_name: lb.name.clone(),
                });
            if !enabled {
                continue;
            }
            let skey = SvcKey {
                logical_port: lport.to_string(),
                ip: ip.to_string(),
                port: port.unwrap_or(0),
                protocol: protocol.to_string(),
            };
            let s = seen.get(&skey);
            let force_offline = s.is_some_and(|s| s.status == "online" && !s.port_up);
            let status = if force_offline {
                Some("offline")
            } else {
                s.map(|s| s.status.as_str())
            };
            // The last check written wins in ovn-northd (hash order); here the first, by
            // load balancer name.
            out.monitors.entry(skey).or_insert_with(|| MonRow {
                options: hc.options.clone().into(),
                src_ip: src_ip.to_string(),
                src_mac: mac.clone(),
                force_offline,
            });
            if status.is_none_or(|s| s == "online") {
                active.push((ip, port));
            }
        }
        out.active.insert((lb.uuid, key.clone()), active);
    }
}
