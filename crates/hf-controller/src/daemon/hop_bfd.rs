//! BFD from logical router ports to their next hops, the controller's part
//! ([`super::Controller`]): which SB `BFD` rows this chassis runs, and writing the state its
//! datapath finds into `BFD.status` (from which northd takes the routes that use a session out
//! and puts them back).
//!
//! - A row is run here when its router port is resident here, as pinctrl decides
//!   (`bfd_monitor_run`, 23.03): the port's binding has a `peer` that exists, and the port is
//!   an `l3gateway` port bound to this chassis or its `cr-<port>` is active here (the
//!   highest-priority live gateway, with the live set BFD between chassis gives). The session
//!   sends from the port: its MAC and its address in the next hop's family from
//!   `Port_Binding.mac`, the router's and the port's tunnel keys. A row that cannot be run
//!   (a next hop or timer that does not parse, no address of the next hop's family) is a
//!   warning naming it, never skipped without a word.
//! - The list goes to a version-9 datapath ([`ToDatapath::HopBfd`]) whenever it changes; an
//!   older datapath runs none of them, which is a warning per session, once.
//! - The datapath reports states ([`FromDatapath::HopBfdStatus`]): every session after each
//!   list, then each change. The write round sets `BFD.status` where it differs, except on a
//!   row whose status is `admin_down` (set by the operator through NB; pinctrl never overwrites
//!   it either).
//!
//! [`FromDatapath::HopBfdStatus`]: hf_datapath::proto::FromDatapath::HopBfdStatus

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use hf_datapath::hop_bfd::{HopBfdMsg, HopBfdStatusMsg};
use hf_datapath::proto::{self, ToDatapath};
use hf_model::SbSnapshot;
use hf_model::sb::{self, BfdStatus};
use serde_json::{Value, json};

use super::{Controller, Level};

/// A session's identity: (router port, next hop, UDP source port).
pub(super) type Key = (String, IpAddr, u16);

/// Status writes waiting for the view to show them.
pub(super) type Pending = BTreeMap<Key, &'static str>;

/// The port's MAC and its first address of `dst`'s family, from `Port_Binding.mac` entries
/// ("MAC IP/PLEN...").
fn source_of(pb: &sb::PortBinding, dst: &IpAddr) -> Option<([u8; 6], IpAddr)> {
    pb.mac.iter().find_map(|entry| {
        let mut words = entry.split_whitespace();
        let mac = crate::translate::flows::parse_mac(words.next()?)?;
        let ip = words
            .filter_map(|w| w.split('/').next()?.parse::<IpAddr>().ok())
            .find(|ip| ip.is_ipv4() == dst.is_ipv4())?;
        Some((mac, ip))
    })
}

/// Whether `pb` (the port of an SB `BFD` row) is resident on chassis `ours`, with `up` the
/// live gateways BFD between chassis found (pinctrl's test: an `l3gateway` port bound here, or
/// its `cr-` port active here).
fn resident(
    sb: &SbSnapshot,
    pb: &sb::PortBinding,
    ours: uuid::Uuid,
    up: Option<&BTreeSet<String>>,
) -> bool {
    if pb.type_ == "l3gateway" && pb.chassis.is_some_and(|c| c.uuid() == ours) {
        return true;
    }
    let cr = format!("cr-{}", pb.logical_port);
    sb.port_binding_all_by_logical_port(&cr).any(|p| {
        p.type_ == "chassisredirect" && crate::translate::ports::ha_active(sb, p, ours, up)
    })
}

/// The SB `BFD` rows chassis `me` runs, sorted, and the ones it cannot run (why, in words).
pub(super) fn resident_sessions(
    sb: &SbSnapshot,
    me: &str,
    up: Option<&BTreeSet<String>>,
) -> (Vec<HopBfdMsg>, Vec<String>) {
    let (mut out, mut bad) = (Vec::new(), Vec::new());
    if sb.bfd().is_empty() {
        return (out, bad);
    }
    let Some(ours) = sb.chassis_by_name(me).map(|c| c.uuid) else {
        return (out, bad);
    };
    for b in sb.bfd().values() {
        let Some(pb) = sb.port_binding_all_by_logical_port(&b.logical_port).next() else {
            continue;
        };
        let peered = pb
            .options
            .get("peer")
            .is_some_and(|p| sb.port_binding_all_by_logical_port(p).next().is_some());
        if !peered || !resident(sb, pb, ours, up) {
            continue;
        }
        let what = format!("BFD session from {} to {}", b.logical_port, b.dst_ip);
        let Ok(dst_ip) = b.dst_ip.parse::<IpAddr>() else {
            bad.push(format!("{what}: dst_ip is not an address; not run"));
            continue;
        };
        let timers = (
            u16::try_from(b.src_port),
            u32::try_from(b.disc),
            u32::try_from(b.min_tx),
            u32::try_from(b.min_rx),
            u8::try_from(b.detect_mult),
        );
        let (Ok(src_port), Ok(disc), Ok(min_tx_ms), Ok(min_rx_ms), Ok(mult)) = timers else {
            bad.push(format!(
                "{what}: src_port {}, disc {}, min_tx {}, min_rx {} or detect_mult {} out of range; not run",
                b.src_port, b.disc, b.min_tx, b.min_rx, b.detect_mult
            ));
            continue;
        };
        let Some((src_mac, src_ip)) = source_of(pb, &dst_ip) else {
            bad.push(format!(
                "{what}: the port's Port_Binding.mac has no {} address to send from; not run",
                if dst_ip.is_ipv4() { "IPv4" } else { "IPv6" }
            ));
            continue;
        };
        let Some(dp) = sb.get(pb.datapath) else {
            continue;
        };
        let (Ok(datapath), Ok(port)) = (u32::try_from(dp.tunnel_key), u32::try_from(pb.tunnel_key))
        else {
            bad.push(format!("{what}: tunnel keys out of range; not run"));
            continue;
        };
        out.push(HopBfdMsg {
            logical_port: b.logical_port.clone(),
            dst_ip,
            src_port,
            disc,
            min_tx_ms,
            min_rx_ms,
            mult,
            admin_down: b.status == BfdStatus::AdminDown,
            datapath,
            port,
            src_mac,
            src_ip,
        });
    }
    out.sort();
    bad.sort();
    (out, bad)
}

fn key_of(b: &sb::Bfd) -> Option<Key> {
    Some((
        b.logical_port.clone(),
        b.dst_ip.parse().ok()?,
        u16::try_from(b.src_port).ok()?,
    ))
}

/// Whether the view no longer needs `status` written for `key`: every row of the session
/// shows it or is `admin_down` (or the session is gone).
pub(super) fn written(sb: &SbSnapshot, key: &Key, status: &str) -> bool {
    sb.bfd()
        .values()
        .filter(|b| key_of(b).as_ref() == Some(key))
        .all(|b| b.status == BfdStatus::AdminDown || b.status.as_str() == status)
}

/// The operations setting the pending statuses that differ from the view's (never over
/// `admin_down`).
pub(super) fn status_ops(sb: &SbSnapshot, pending: &Pending) -> Vec<Value> {
    if pending.is_empty() {
        return Vec::new();
    }
    sb.bfd()
        .values()
        .filter(|b| b.status != BfdStatus::AdminDown)
        .filter_map(|b| {
            let want = *pending.get(&key_of(b)?)?;
            (b.status.as_str() != want).then(|| {
                json!({"op": "update", "table": "BFD",
                    "where": [["_uuid", "==", ["uuid", b.uuid.to_string()]]],
                    "row": {"status": want}})
            })
        })
        .collect()
}

impl Controller {
    /// Sends a version-9 datapath the sessions resident here when they changed; warns, once
    /// per session, those an older datapath does not run.
    pub(super) fn sync_hop_bfd(&mut self) {
        if !self.dp_hello || !std::mem::take(&mut self.hop_bfd_due) {
            return;
        }
        let (list, bad) =
            resident_sessions(self.sb.model(), &self.cfg.chassis, self.ha_up.as_ref());
        if bad != self.hop_bfd_bad {
            let before = std::mem::take(&mut self.hop_bfd_bad);
            self.hop_bfd_bad = self.warn_new(&before, bad);
        }
        if self.dp_version < proto::HOP_BFD_VERSION {
            let sessions: BTreeSet<(String, IpAddr)> = list
                .iter()
                .map(|m| (m.logical_port.clone(), m.dst_ip))
                .collect();
            let new: Vec<String> = sessions
                .difference(&self.hop_bfd_warned)
                .map(|(p, d)| format!("{p} to {d}"))
                .collect();
            if !new.is_empty() {
                self.say(
                    Level::Warn,
                    format!(
                        "the datapath speaks control protocol version {}, BFD to next hops needs {}: not run: {} (their SB status stays as northd wrote it; static routes that use them stay down)",
                        self.dp_version,
                        proto::HOP_BFD_VERSION,
                        new.join(", ")
                    ),
                );
            }
            self.hop_bfd_warned = sessions;
            return;
        }
        if self.hop_bfd_sent.as_ref() == Some(&list) {
            return;
        }
        if !list.is_empty() || self.hop_bfd_sent.as_ref().is_some_and(|l| !l.is_empty()) {
            let names: Vec<String> = list
                .iter()
                .map(|m| format!("{} to {}", m.logical_port, m.dst_ip))
                .collect();
            self.say(
                Level::Info,
                format!("bfd: next-hop sessions [{}]", names.join(", ")),
            );
        }
        self.send_dp(&ToDatapath::HopBfd(list.clone()));
        self.hop_bfd_sent = Some(list);
    }

    /// The datapath's next-hop session states: written to SB `BFD.status`.
    pub(super) fn hop_bfd_status(&mut self, list: Vec<HopBfdStatusMsg>) {
        for s in &list {
            self.say(
                Level::Info,
                format!(
                    "bfd: session from {} to {} (source port {}) is {}",
                    s.logical_port,
                    s.dst_ip,
                    s.src_port,
                    s.status()
                ),
            );
        }
        self.with_state(|st| {
            for s in list {
                let status = s.status();
                st.hop_bfd
                    .insert((s.logical_port, s.dst_ip, s.src_port), status);
            }
        });
        self.write_due = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pb_with(mac: &[&str]) -> sb::PortBinding {
        sb::PortBinding {
            mac: mac.iter().map(|s| (*s).to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn source_address_in_the_next_hops_family() {
        let pb = pb_with(&["00:00:00:00:ff:01 172.16.0.1/24 fd00::1/64"]);
        let v4: IpAddr = [172, 16, 0, 10].into();
        let v6: IpAddr = "fd00::10".parse().unwrap_or(v4);
        assert_eq!(
            source_of(&pb, &v4),
            Some(([0, 0, 0, 0, 0xff, 1], [172, 16, 0, 1].into()))
        );
        assert_eq!(source_of(&pb, &v6).map(|s| s.1.is_ipv6()), Some(true));
        let only4 = pb_with(&["00:00:00:00:ff:01 172.16.0.1/24"]);
        assert_eq!(source_of(&only4, &v6), None);
        assert_eq!(source_of(&pb_with(&["router"]), &v4), None);
    }
}
