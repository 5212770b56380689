//! Service monitors (LB health checks), the controller's part: which SB `Service_Monitor`
//! rows this chassis probes, and writing the status its datapath finds.
//!
//! - A monitor is probed here when its `logical_port` is a local port (as pinctrl probes the
//!   monitors of ports bound to its chassis). The backend's MAC is resolved as pinctrl does:
//!   the `Port_Binding.mac` entry listing the monitor's IP (or the first entry without IPs),
//!   else a `MAC_Binding` of the port for that IP; a monitor whose MAC cannot be resolved is
//!   not probed. The list goes to the datapath ([`ToDatapath::SvcMonitors`], protocol version
//!   6) whenever it changes; the datapath runs the probes ([`hf_datapath::svc`]).
//! - The datapath reports status changes ([`hf_datapath::proto::FromDatapath::SvcStatus`]);
//!   the write round sets `Service_Monitor.status` where it differs (only on changes, as
//!   pinctrl writes it).
//!
//! Why the datapath probes (rather than this core through packet injection): the probes and
//! their replies are datapath traffic (the replies arrive through the pipeline's
//! `handle_svc_check`), the datapath already has the ports, the clock and the frame builders,
//! and it keeps probing while the controller restarts, as it keeps forwarding.
//!
//! [`ToDatapath::SvcMonitors`]: hf_datapath::proto::ToDatapath::SvcMonitors

use std::collections::{BTreeMap, BTreeSet};

use hf_datapath::proto::SvcMonitorMsg;
use hf_model::SbSnapshot;
use serde_json::{Value, json};

/// A monitor's identity: (logical port, IP, port, protocol).
pub type Key = (String, String, u16, String);

/// Status writes waiting for the view to show them.
pub type Pending = BTreeMap<Key, String>;

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut n = 0;
    for (i, part) in s.split(':').enumerate() {
        if i >= 6 || part.is_empty() || part.len() > 2 {
            return None;
        }
        out[i] = u8::from_str_radix(part, 16).ok()?;
        n += 1;
    }
    (n == 6).then_some(out)
}

fn same_ip(a: &str, b: &std::net::IpAddr) -> bool {
    let a = a.split('/').next().unwrap_or(a);
    a.parse::<std::net::IpAddr>().is_ok_and(|x| x == *b)
}

/// The backend MAC of `ip` on port `lport` (see the module documentation), `pbs` the port
/// bindings by name.
fn backend_mac(
    sb: &SbSnapshot,
    pbs: &BTreeMap<&str, Vec<&hf_model::sb::PortBinding>>,
    lport: &str,
    ip: &std::net::IpAddr,
) -> Option<[u8; 6]> {
    for pb in pbs.get(lport).into_iter().flatten() {
        for entry in &pb.mac {
            let mut words = entry.split_whitespace();
            let Some(mac) = words.next().and_then(parse_mac) else {
                continue;
            };
            let ips: Vec<&str> = words.collect();
            if ips.is_empty() || ips.iter().any(|w| same_ip(w, ip)) {
                return Some(mac);
            }
        }
    }
    sb.mac_binding()
        .values()
        .find(|m| m.logical_port == lport && same_ip(&m.ip, ip))
        .and_then(|m| parse_mac(&m.mac))
}

/// The monitors of `local` ports, sorted, and the ones left out (why, in words).
pub fn local_monitors(
    sb: &SbSnapshot,
    local: &BTreeSet<String>,
) -> (Vec<SvcMonitorMsg>, Vec<String>) {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    if sb.service_monitor().is_empty() {
        return (out, bad);
    }
    // One pass over the bindings, for the monitored local ports only.
    let wanted: BTreeSet<&str> = sb
        .service_monitor()
        .values()
        .map(|m| m.logical_port.as_str())
        .filter(|p| local.contains(*p))
        .collect();
    let mut pbs: BTreeMap<&str, Vec<&hf_model::sb::PortBinding>> = BTreeMap::new();
    if !wanted.is_empty() {
        for pb in sb.port_binding().values() {
            if let Some(n) = wanted.get(pb.logical_port.as_str()) {
                pbs.entry(n).or_default().push(pb);
            }
        }
    }
    for m in sb.service_monitor().values() {
        if !local.contains(&m.logical_port) {
            continue;
        }
        let (Ok(port), Ok(ip)) = (u16::try_from(m.port), m.ip.parse::<std::net::IpAddr>()) else {
            bad.push(format!(
                "service monitor {}/{}:{}: bad ip or port; not probed",
                m.logical_port, m.ip, m.port
            ));
            continue;
        };
        let Some(src_mac) = parse_mac(&m.src_mac) else {
            bad.push(format!(
                "service monitor {}/{}:{}: src_mac {:?} does not parse; not probed",
                m.logical_port, m.ip, m.port, m.src_mac
            ));
            continue;
        };
        let Some(dst_mac) = backend_mac(sb, &pbs, &m.logical_port, &ip) else {
            bad.push(format!(
                "service monitor {}/{}:{}: no MAC for {} on the port (Port_Binding.mac or MAC_Binding); not probed",
                m.logical_port, m.ip, m.port, m.ip
            ));
            continue;
        };
        out.push(SvcMonitorMsg {
            logical_port: m.logical_port.clone(),
            ip: m.ip.clone(),
            port,
            protocol: m
                .protocol
                .as_ref()
                .map_or_else(|| "tcp".to_string(), |p| p.as_str().to_string()),
            src_mac,
            src_ip: m.src_ip.clone(),
            dst_mac,
            options: m.options.clone().into(),
        });
    }
    out.sort_by(|a, b| {
        (&a.logical_port, &a.ip, a.port, &a.protocol).cmp(&(
            &b.logical_port,
            &b.ip,
            b.port,
            &b.protocol,
        ))
    });
    bad.sort();
    (out, bad)
}

fn key_of(m: &hf_model::sb::ServiceMonitor) -> Option<Key> {
    Some((
        m.logical_port.clone(),
        m.ip.clone(),
        u16::try_from(m.port).ok()?,
        m.protocol
            .as_ref()
            .map_or_else(|| "tcp".to_string(), |p| p.as_str().to_string()),
    ))
}

/// Whether the view shows `status` for `key` (or no longer has the monitor: nothing to write).
pub fn written(sb: &SbSnapshot, key: &Key, status: &str) -> bool {
    sb.service_monitor()
        .values()
        .filter(|m| key_of(m).as_ref() == Some(key))
        .all(|m| m.status.as_ref().is_some_and(|s| s.as_str() == status))
}

/// The operations setting the pending statuses that differ from the view's.
pub fn status_ops(sb: &SbSnapshot, pending: &Pending) -> Vec<Value> {
    if pending.is_empty() {
        return Vec::new();
    }
    let mut ops = Vec::new();
    for m in sb.service_monitor().values() {
        let Some(k) = key_of(m) else {
            continue;
        };
        let Some(want) = pending.get(&k) else {
            continue;
        };
        if m.status.as_ref().is_some_and(|s| s.as_str() == want) {
            continue;
        }
        ops.push(json!({"op": "update", "table": "Service_Monitor",
            "where": [["_uuid", "==", ["uuid", m.uuid.to_string()]]],
            "row": {"status": want}}));
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(parse_mac("0a:00:00:00:00:01"), Some([10, 0, 0, 0, 0, 1]));
        assert_eq!(parse_mac("0a:00:00:00:00"), None);
        assert_eq!(parse_mac("0a:00:00:00:00:01:02"), None);
        assert_eq!(parse_mac("zz:00:00:00:00:01"), None);
        assert!(same_ip(
            "10.0.0.3/24",
            &"10.0.0.3".parse().unwrap_or(std::net::IpAddr::from([0; 4]))
        ));
    }
}
