//! Gateway failover, the controller's part ([`super::Controller`]): which chassis its datapath
//! runs BFD with (ovn-controller's `bfd_calculate_chassis`: a gateway of an HA chassis group of
//! two or more runs it with the group's other gateways and its `ref_chassis`; a `ref_chassis`
//! with the group's gateways), the timers (`SB_Global options:bfd-min-rx`, `bfd-min-tx`,
//! `bfd-mult`), the set of chassis whose sessions are up (the translation places every
//! `chassisredirect` port on its first live gateway, `crate::translate::ports::ha_live_top`,
//! and the claims follow), and the gratuitous ARPs a gateway sends when it becomes active for
//! a port: the `nat_addresses` of the switch-side patch port, out of the switch's `localnet`
//! ports, as pinctrl announces them.
//!
//! It does not run BFD (the datapath does, `hf_datapath::bfd`) or send the ARPs (the datapath
//! does, on [`ToDatapath::Garps`]).

use std::collections::BTreeSet;
use std::net::IpAddr;

use hf_datapath::bfd::{BfdState, BfdStatusMsg, BfdTimers};
use hf_datapath::proto::{self, AnnounceMsg, BfdMsg, ToDatapath};
use hf_model::SbSnapshot;
use hf_model::sb::Delta;

use super::{Controller, Level};

/// The BFD peers of chassis `me` (name and tunnel IP), sorted.
pub fn bfd_peers(sb: &SbSnapshot, me: &str) -> Vec<(String, IpAddr)> {
    let Some(mine) = sb.chassis_by_name(me).map(|c| c.uuid) else {
        return Vec::new();
    };
    let mut names: BTreeSet<String> = BTreeSet::new();
    for g in sb.ha_chassis_group().values() {
        let members: Vec<(uuid::Uuid, String)> = g
            .ha_chassis
            .iter()
            .filter_map(|h| sb.get(*h)?.chassis)
            .filter_map(|c| sb.get(c).map(|r| (r.uuid, r.name.clone())))
            .collect();
        if members.len() < 2 {
            continue;
        }
        let is_gw = members.iter().any(|m| m.0 == mine);
        let refs: Vec<&hf_model::sb::Chassis> =
            g.ref_chassis.iter().filter_map(|c| sb.get(*c)).collect();
        if is_gw {
            names.extend(members.iter().map(|m| m.1.clone()));
            names.extend(
                refs.iter()
                    .filter(|c| c.other_config.get("is-remote").is_none_or(|v| v != "true"))
                    .map(|c| c.name.clone()),
            );
        } else if refs.iter().any(|c| c.uuid == mine) {
            names.extend(members.iter().map(|m| m.1.clone()));
        }
    }
    names.remove(me);
    names
        .into_iter()
        .filter_map(|n| {
            let c = sb.chassis_by_name(&n)?;
            let ip = c
                .encaps
                .iter()
                .filter_map(|e| sb.get(*e))
                .find(|e| e.type_.as_str() == "geneve")
                .and_then(|e| e.ip.parse::<IpAddr>().ok())?;
            Some((n, ip))
        })
        .collect()
}

/// The timers SB asks for (`SB_Global options`), else OVS's defaults.
pub fn bfd_timers(sb: &SbSnapshot) -> BfdTimers {
    let d = BfdTimers::default();
    let opt = |k: &str| {
        sb.sb_global_row()
            .and_then(|g| g.options.get(k))
            .and_then(|v| v.parse::<u32>().ok())
    };
    BfdTimers {
        min_rx_ms: opt("bfd-min-rx").unwrap_or(d.min_rx_ms),
        min_tx_ms: opt("bfd-min-tx").unwrap_or(d.min_tx_ms),
        mult: opt("bfd-mult")
            .and_then(|m| u8::try_from(m).ok())
            .unwrap_or(d.mult),
    }
}

/// Whether change set `d` can change the BFD peers or timers.
pub(super) fn touches_bfd(d: &Delta) -> bool {
    !d.ha_chassis_group.is_empty()
        || !d.ha_chassis.is_empty()
        || !d.chassis.is_empty()
        || !d.encap.is_empty()
        || !d.sb_global.is_empty()
}

/// The `chassisredirect` ports whose gateway this chassis is, with `up` as the live set.
fn active_here(sb: &SbSnapshot, me: &str, up: Option<&BTreeSet<String>>) -> BTreeSet<String> {
    let Some(ours) = sb.chassis_by_name(me).map(|c| c.uuid) else {
        return BTreeSet::new();
    };
    sb.port_binding()
        .values()
        .filter(|p| p.type_ == "chassisredirect")
        .filter(|p| crate::translate::ports::ha_active(sb, p, ours, up))
        .map(|p| p.logical_port.clone())
        .collect()
}

/// The gratuitous ARPs for the addresses of `cr`: the switch-side patch port facing its
/// distributed port lists them in `nat_addresses` ("MAC IP... [is_chassis_resident(...)]");
/// they go out of every `localnet` port of that switch.
pub fn garps_for(sb: &SbSnapshot, cr: &str) -> Vec<AnnounceMsg> {
    let Some(dgp) = sb
        .port_binding_all_by_logical_port(cr)
        .find_map(|p| p.options.get("distributed-port").cloned())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for patch in sb
        .port_binding()
        .values()
        .filter(|p| p.type_ == "patch" && p.options.get("peer") == Some(&dgp))
    {
        let vias: Vec<String> = sb
            .port_binding_all_by_datapath(patch.datapath)
            .filter(|p| p.type_ == "localnet")
            .map(|p| p.logical_port.clone())
            .collect();
        for entry in &patch.nat_addresses {
            if entry.contains("is_chassis_resident(")
                && !entry.contains(&format!("\"{cr}\""))
                && !entry.contains(&format!("({cr})"))
            {
                continue;
            }
            let mut words = entry.split_whitespace();
            let Some(mac) = words.next().and_then(parse_mac) else {
                continue;
            };
            for ip in words.filter(|w| w.parse::<std::net::Ipv4Addr>().is_ok()) {
                for via in &vias {
                    out.push(AnnounceMsg {
                        mac,
                        ip: ip.to_string(),
                        via: via.clone(),
                    });
                }
            }
        }
    }
    out
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

impl Controller {
    /// Sends the datapath the BFD peers and timers when they changed (version-7 datapaths).
    /// (SB `BFD` rows, sessions from router ports to next hops, are [`super::hop_bfd`].)
    pub(super) fn sync_bfd(&mut self) {
        if !self.dp_hello
            || self.dp_version < proto::MIRROR_VERSION
            || !std::mem::take(&mut self.bfd_due)
        {
            return;
        }
        let sb = self.sb.model();
        let m = BfdMsg {
            peers: bfd_peers(sb, &self.cfg.chassis),
            timers: bfd_timers(sb),
        };
        if self.bfd_sent.as_ref() == Some(&m) {
            return;
        }
        if !m.peers.is_empty() || self.bfd_sent.is_some() {
            let names: Vec<&str> = m.peers.iter().map(|p| p.0.as_str()).collect();
            self.say(
                Level::Info,
                format!("bfd: sessions with [{}]", names.join(", ")),
            );
        }
        if m.peers.is_empty() {
            self.set_ha_up(None);
        }
        self.send_dp(&ToDatapath::Bfd(m.clone()));
        self.bfd_sent = Some(m);
    }

    /// The datapath's BFD states: the live set moves `chassisredirect` ports; a port whose
    /// gateway this chassis becomes is announced.
    pub(super) fn bfd_status(&mut self, list: Vec<BfdStatusMsg>) {
        let running = self.bfd_sent.as_ref().is_some_and(|m| !m.peers.is_empty());
        let up: BTreeSet<String> = list
            .iter()
            .filter(|s| s.state == BfdState::Up)
            .map(|s| s.chassis.clone())
            .collect();
        self.set_ha_up(running.then_some(up));
    }

    fn set_ha_up(&mut self, up: Option<BTreeSet<String>>) {
        if self.ha_up == up {
            return;
        }
        let sb = self.sb.model();
        let before = active_here(sb, &self.cfg.chassis, self.ha_up.as_ref());
        let after = active_here(sb, &self.cfg.chassis, up.as_ref());
        let garps: Vec<AnnounceMsg> = after
            .difference(&before)
            .flat_map(|cr| garps_for(sb, cr))
            .collect();
        self.say(
            Level::Info,
            format!(
                "bfd: live gateways now {:?}; active here: {:?}",
                up.as_ref().map(|u| u.iter().cloned().collect::<Vec<_>>()),
                after
            ),
        );
        self.ha_up = up.clone();
        // The gateway moved: next-hop sessions from its ports move with it.
        self.hop_bfd_due = true;
        self.with_state(|st| st.ha_up = up);
        self.translate_due = true;
        self.write_due = true;
        if !garps.is_empty() && self.dp_version >= proto::MIRROR_VERSION {
            self.say(
                Level::Info,
                format!("gateway takeover: {} gratuitous ARP(s)", garps.len()),
            );
            self.send_dp(&ToDatapath::Garps(garps));
        }
    }
}
