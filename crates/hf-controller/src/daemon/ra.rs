//! Periodic router advertisements, the controller's part ([`super::Controller`]): the router
//! ports whose `Port_Binding.options` say `ipv6_ra_send_periodic=true` (northd writes them
//! from `ipv6_ra_configs`) and whose peer switch has local ports get their advertisement
//! composed here, as pinctrl's `ipv6_ra_update_config` reads the options and `ipv6_ra_send`
//! builds the packet (the ICMPv6 message is `put_nd_ra_opts`'s, from
//! [`hf_wire::ra::RaOpts`]: source link-layer address, MTU when set, the prefixes, RDNSS,
//! DNSSL, route information; hop limit 255, router lifetime 65535 s), sent from
//! `ipv6_ra_src_eth`/`ipv6_ra_src_addr` to 33:33:00:00:00:01/ff02::1. The datapath sends them
//! on its timer (`hf_datapath::ra`).
//!
//! A port whose options do not compose (no or a bad address mode, source address or MAC, a
//! bad prefix) is a warning naming it and sends nothing, as pinctrl's `VLOG_WARN`s.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};

use hf_datapath::proto::{self, ToDatapath};
use hf_datapath::ra::PeriodicRaMsg;
use hf_model::SbSnapshot;
use hf_model::sb::Delta;
use hf_wire::dhcp::Arg;

use super::{Controller, Level};

impl Controller {
    /// Sends the datapath the periodic advertisements when they changed (or since its hello).
    pub(super) fn sync_ras(&mut self) {
        if !self.dp_hello || !std::mem::take(&mut self.ras_due) {
            return;
        }
        let (list, bad) = local_ras(self.sb.model(), &self.local_set());
        let before = std::mem::take(&mut self.ras_bad);
        self.ras_bad = self.warn_new(&before, bad);
        if self.dp_version < proto::MCAST_VERSION {
            if !list.is_empty() && !self.ras_warned {
                self.ras_warned = true;
                self.say(
                    Level::Warn,
                    format!(
                        "the datapath speaks control protocol version {}, periodic router advertisements need {}: router ports {} advertise nothing here",
                        self.dp_version,
                        proto::MCAST_VERSION,
                        list.iter()
                            .map(|r| r.router_port.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
            return;
        }
        if self.ras_sent.as_ref() == Some(&list) {
            return;
        }
        if !list.is_empty() || self.ras_sent.is_some() {
            self.say(
                Level::Info,
                format!(
                    "periodic router advertisements: {} router port(s) to the datapath",
                    list.len()
                ),
            );
        }
        self.send_dp(&ToDatapath::PeriodicRas(list.clone()));
        self.ras_sent = Some(list);
    }
}

/// Whether change set `d` can change [`local_ras`]: the binding of a local port (`local_pb`
/// says whether `d` has one), or one that asks (or asked) for periodic advertisements.
pub(super) fn touches_ras(d: &Delta, local_pb: bool) -> bool {
    if local_pb {
        return true;
    }
    use hf_model::RowDelta;
    let periodic = |p: &hf_model::sb::PortBinding| p.options.get("ipv6_ra_send_periodic").is_some();
    d.port_binding.iter().any(|r| match r {
        RowDelta::Insert(p) | RowDelta::Delete(p) => periodic(p),
        RowDelta::Update { old, new } => periodic(old) || periodic(new),
    })
}

fn int(o: &BTreeMap<String, String>, k: &str, def: i64) -> i64 {
    o.get(k).and_then(|v| v.parse().ok()).unwrap_or(def)
}

/// The advertisements of router ports whose peer switch has `local` ports, sorted by router
/// port, and what could not be composed (in words).
pub fn local_ras(sb: &SbSnapshot, local: &BTreeSet<String>) -> (Vec<PeriodicRaMsg>, Vec<String>) {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    let periodic: Vec<&hf_model::sb::PortBinding> = sb
        .port_binding()
        .values()
        .filter(|p| {
            p.options
                .get("ipv6_ra_send_periodic")
                .is_some_and(|v| v == "true")
        })
        .collect();
    if periodic.is_empty() {
        return (out, bad);
    }
    // Local ports by datapath.
    let mut ports: BTreeMap<uuid::Uuid, Vec<String>> = BTreeMap::new();
    for p in local {
        for pb in sb.port_binding_all_by_logical_port(p) {
            ports.entry(pb.datapath.uuid()).or_default().push(p.clone());
        }
    }
    for pb in periodic {
        let Some(peer) = pb
            .options
            .get("peer")
            .and_then(|p| sb.port_binding_all_by_logical_port(p).next())
        else {
            continue;
        };
        let Some(ps) = ports.get(&peer.datapath.uuid()) else {
            continue;
        };
        let o: BTreeMap<String, String> = pb
            .options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match compose(&o) {
            Ok(frame) => {
                let max = int(&o, "ipv6_ra_max_interval", 600);
                let min_def = if max >= 9 { max / 3 } else { max * 3 / 4 };
                let min = int(&o, "ipv6_ra_min_interval", min_def);
                let mut ps = ps.clone();
                ps.sort();
                ps.dedup();
                out.push(PeriodicRaMsg {
                    router_port: pb.logical_port.clone(),
                    ports: ps,
                    frame,
                    min_interval: u32::try_from(min.max(0)).unwrap_or(u32::MAX),
                    max_interval: u32::try_from(max.max(0)).unwrap_or(u32::MAX),
                });
            }
            Err(e) => bad.push(format!(
                "router port {}: periodic router advertisements not sent: {e}",
                pb.logical_port
            )),
        }
    }
    out.sort_by(|a, b| a.router_port.cmp(&b.router_port));
    out.dedup_by(|a, b| a.router_port == b.router_port);
    bad.sort();
    (out, bad)
}

/// The advertisement's Ethernet frame from the router port's options.
fn compose(o: &BTreeMap<String, String>) -> Result<Vec<u8>, String> {
    let mode = o
        .get("ipv6_ra_address_mode")
        .ok_or("no ipv6_ra_address_mode")?;
    if !matches!(
        mode.as_str(),
        "slaac" | "dhcpv6_stateful" | "dhcpv6_stateless"
    ) {
        return Err(format!(
            "address mode {mode:?} is not slaac, dhcpv6_stateful or dhcpv6_stateless"
        ));
    }
    let eth = o
        .get("ipv6_ra_src_eth")
        .and_then(|m| crate::translate::flows::parse_mac(m))
        .ok_or("ipv6_ra_src_eth is missing or not an Ethernet address")?;
    let src: Ipv6Addr = o
        .get("ipv6_ra_src_addr")
        .and_then(|a| a.parse().ok())
        .ok_or("ipv6_ra_src_addr is missing or not an IPv6 address")?;
    let num = |v: u128| Arg::Num {
        value: v,
        prefix: None,
    };
    let mac = eth.iter().fold(0u128, |a, b| (a << 8) | u128::from(*b));
    let mut args: Vec<(String, Vec<Arg>)> = vec![
        ("addr_mode".into(), vec![Arg::Str(mode.clone())]),
        (
            "router_preference".into(),
            vec![Arg::Str(o.get("ipv6_ra_prf").cloned().unwrap_or_default())],
        ),
        ("slla".into(), vec![num(mac)]),
    ];
    let mtu = int(o, "ipv6_ra_mtu", 0);
    if mtu > 0 {
        args.push(("mtu".into(), vec![num(mtu as u128)]));
    }
    let mut prefixes = Vec::new();
    for p in o
        .get("ipv6_ra_prefixes")
        .map(String::as_str)
        .unwrap_or("")
        .split_whitespace()
    {
        let net = p
            .split_once('/')
            .and_then(|(a, l)| Some((a.parse::<Ipv6Addr>().ok()?, l.parse::<u8>().ok()?)))
            .filter(|(_, l)| *l <= 128)
            .ok_or_else(|| format!("ipv6_ra_prefixes entry {p:?} is not an IPv6 prefix"))?;
        prefixes.push(Arg::Num {
            value: u128::from(net.0),
            prefix: Some(net.1),
        });
    }
    if !prefixes.is_empty() {
        args.push(("prefix".into(), prefixes));
    }
    if let Some(r) = o.get("ipv6_ra_rdnss") {
        let a: Ipv6Addr = r
            .parse()
            .map_err(|_| format!("ipv6_ra_rdnss {r:?} is not an IPv6 address"))?;
        args.push(("rdnss".into(), vec![num(u128::from(a))]));
    }
    if let Some(d) = o.get("ipv6_ra_dnssl") {
        args.push(("dnssl".into(), vec![Arg::Str(d.clone())]));
    }
    if let Some(r) = o.get("ipv6_ra_route_info") {
        args.push(("route_info".into(), vec![Arg::Str(r.clone())]));
    }
    let mut msg = hf_wire::ra::RaOpts::encode(&args)
        .map_err(|e| e.to_string())?
        .message;
    let dst = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let sum = hf_wire::pseudo_header_sum(IpAddr::V6(src), IpAddr::V6(dst), 58, msg.len() as u32);
    let c = !hf_wire::sum_with(sum, &msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(54 + msg.len());
    f.extend_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    f.extend_from_slice(&eth);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    f.extend_from_slice(&[58, 255]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&msg);
    Ok(f)
}
