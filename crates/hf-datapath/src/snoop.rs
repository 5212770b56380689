//! Multicast snooping (IGMP and MLD) for the switches of SB `IP_Multicast` with `enabled`:
//! the datapath learns which local ports joined which groups from the messages the pipeline's
//! `igmp` action punts ([`hf_pipeline::Event::Igmp`]), forgets them on leaves and after the
//! idle timeout, is the querier, and reports each switch's groups to the controller
//! ([`McastGroupsMsg`]), which writes them as SB `IGMP_Group` rows for northd to merge into
//! `Multicast_Group`s. This is what ovn-controller 23.03's pinctrl does with OVS's
//! `mcast-snooping` (`pinctrl_ip_mcast_handle`, `ip_mcast_querier_run`, `ip_mcast_sync`).
//!
//! # What it does
//!
//! - IGMPv1/v2 reports join, IGMPv2 leaves leave; an IGMPv3 report's records each join, but
//!   `MODE_IS_INCLUDE`/`CHANGE_TO_INCLUDE_MODE` with no source, which leave (OVS's reading:
//!   no source filtering). MLDv1 reports and dones, MLDv2 reports the same way. The checksum
//!   must verify (a bad one is counted in the warning, as pinctrl logs it).
//! - A query heard on a port (IGMP, or MLD from a non-unspecified source) makes it a
//!   multicast-router port (`IGMP_Group` address `mrouters`) for 180 s (OVS's
//!   `MCAST_MROUTER_PORT_IDLE_TIME`); a router port does not also join groups (OVS: "avoid
//!   duplicate packets").
//! - Link-local groups (224.0.0.0/24, ff02::1) are not learned (northd floods them anyway).
//! - A membership lasts `idle_timeout` from its last report. A switch holds at most
//!   `table_size` groups: a new one when full evicts the group refreshed least recently.
//! - The querier: with `querier` and `eth_src` set, every `query_interval` an IGMPv3 general
//!   query from `eth_src`/`ip4_src` to 224.0.0.1 (when `ip4_src` parses) and an MLDv2 one from
//!   `ip6_src` to ff02::1 (when it parses), max response `query_max_resp`, out of every local
//!   port of the switch (pinctrl sends to `_MC_flood` with the local-only flag). The first goes
//!   out as soon as the switch is configured.
//! - A change of `IP_Multicast.seq_no` (`ovn-sbctl ip-multicast-flush`) flushes the switch's
//!   groups and multicast-router ports.
//! - The groups the controller read back from SB ([`McastCfgMsg::known`]) seed an empty
//!   switch once (a restarted datapath keeps what its chassis had learned, each for a fresh
//!   idle timeout) so that a restart does not withdraw every group until the next reports.
//!
//! # What it does not do
//!
//! No I/O, no clock. Queries skip the egress pipeline (pinctrl's go through it: egress ACLs
//! could drop them there). Reports are not forwarded to learned multicast-router ports
//! (pinctrl's `ip_mcast_forward_report`; northd's `mcast_flood_reports` ports do get them),
//! nor queries flooded (`ip_mcast_forward_query`). Source lists are ignored, as OVS does. The
//! querier does not step back when another querier is heard (nor does pinctrl's).
//!
//! # Call contract
//!
//! [`Snooper::set`] with the controller's configuration (switches not listed stop snooping);
//! [`Snooper::handle`] for each punted frame; [`Snooper::poll`] when
//! [`Snooper::poll_timeout`] is due and after `set`/`handle`: it returns the queries to send
//! and the switches whose groups changed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long a port stays a multicast-router port after a query (OVS's
/// `MCAST_MROUTER_PORT_IDLE_TIME`).
pub const MROUTER_IDLE: Duration = Duration::from_secs(180);

/// The `IGMP_Group.address` of a switch's multicast-router ports.
pub const MROUTERS: &str = "mrouters";

/// [`crate::proto::ToDatapath::Mcast`]: one snooping switch with local ports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McastCfgMsg {
    /// The switch (datapath name).
    pub datapath: String,
    /// `IP_Multicast.querier`.
    pub querier: bool,
    /// `table_size`: most groups kept.
    pub table_size: u64,
    /// `idle_timeout`, seconds.
    pub idle_timeout: u64,
    /// `query_interval`, seconds.
    pub query_interval: u64,
    /// `query_max_resp`, seconds.
    pub query_max_resp: u64,
    /// `eth_src`, `ip4_src`, `ip6_src` as SB has them (empty: unset).
    pub eth_src: String,
    /// `ip4_src`.
    pub ip4_src: String,
    /// `ip6_src`.
    pub ip6_src: String,
    /// The switch's local ports (queries go out of them).
    pub ports: Vec<String>,
    /// This chassis's `IGMP_Group` rows of the switch (seeds, see the module doc).
    pub known: Vec<McastGroupMsg>,
    /// `IP_Multicast.seq_no`: a change flushes the switch's groups (`ovn-sbctl
    /// ip-multicast-flush`).
    pub seq_no: i64,
}

/// One group of a switch and its local member ports (`address` [`MROUTERS`] for the
/// multicast-router ports).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct McastGroupMsg {
    /// The group's address as OVN writes it (`239.1.1.1`, `ff0e::1`) or `mrouters`.
    pub address: String,
    /// Local logical ports, sorted.
    pub ports: Vec<String>,
}

/// [`crate::proto::FromDatapath::McastGroups`]: every group of one switch, after a change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McastGroupsMsg {
    /// The switch.
    pub datapath: String,
    /// Its groups (none: the switch has no member left, or stopped snooping).
    pub groups: Vec<McastGroupMsg>,
}

/// A query to send out of a local port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The local port.
    pub port: String,
    /// The Ethernet frame.
    pub frame: Vec<u8>,
}

/// What a message asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Join(IpAddr),
    Leave(IpAddr),
    Query,
}

/// Where pinctrl sends an IGMP/MLD message on after snooping it (the `igmp` action consumes
/// the packet): a report or leave to the switch's multicast routers (`_MC_mrouter_flood`:
/// ports facing relay routers and `mcast_flood_reports` ports), a query to the whole L2
/// domain (`_MC_flood_l2`), so that hosts behind the switch hear an outside querier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward {
    /// Nowhere (the switch does not snoop here).
    Nowhere,
    /// A report or leave: to `_MC_mrouter_flood`.
    Mrouters,
    /// A query: to `_MC_flood_l2`.
    FloodL2,
}

impl Forward {
    /// The multicast group it goes to.
    pub fn group(self) -> Option<&'static str> {
        match self {
            Forward::Nowhere => None,
            Forward::Mrouters => Some("_MC_mrouter_flood"),
            Forward::FloodL2 => Some("_MC_flood_l2"),
        }
    }
}

#[derive(Debug)]
struct Switch {
    cfg: McastCfgMsg,
    eth_src: Option<[u8; 6]>,
    ip4_src: Option<Ipv4Addr>,
    ip6_src: Option<Ipv6Addr>,
    /// group → port → expiry.
    groups: BTreeMap<IpAddr, BTreeMap<String, Duration>>,
    /// port → expiry.
    mrouters: BTreeMap<String, Duration>,
    next_query: Option<Duration>,
}

impl Switch {
    fn idle(&self) -> Duration {
        Duration::from_secs(self.cfg.idle_timeout.max(1))
    }

    fn querier_on(&self) -> bool {
        self.cfg.querier
            && self.eth_src.is_some()
            && (self.ip4_src.is_some() || self.ip6_src.is_some())
    }

    fn report(&self) -> Vec<McastGroupMsg> {
        let mut out: Vec<McastGroupMsg> = self
            .groups
            .iter()
            .filter(|(_, ports)| !ports.is_empty())
            .map(|(g, ports)| McastGroupMsg {
                address: g.to_string(),
                ports: ports.keys().cloned().collect(),
            })
            .collect();
        if !self.mrouters.is_empty() {
            out.push(McastGroupMsg {
                address: MROUTERS.into(),
                ports: self.mrouters.keys().cloned().collect(),
            });
        }
        out
    }
}

/// The snooping switches of this chassis. See the module documentation.
#[derive(Debug, Default)]
pub struct Snooper {
    switches: BTreeMap<String, Switch>,
    /// Switches whose groups changed since the last [`Snooper::poll`] (or that stopped).
    dirty: BTreeSet<String>,
    /// Messages that did not parse or verify, since start.
    pub bad: u64,
    /// The earliest expiry or query of any switch, kept by [`Snooper::refresh_deadline`]
    /// after every change (the datapath asks for it after every batch of packets).
    deadline: Option<Duration>,
}

impl Snooper {
    /// Whether no switch snoops here.
    pub fn is_empty(&self) -> bool {
        self.switches.is_empty()
    }

    /// Takes the controller's configuration; returns warnings (addresses that do not parse).
    pub fn set(&mut self, cfgs: Vec<McastCfgMsg>, now: Duration) -> Vec<String> {
        let mut warn = Vec::new();
        let listed: BTreeSet<String> = cfgs.iter().map(|c| c.datapath.clone()).collect();
        let gone: Vec<String> = self
            .switches
            .keys()
            .filter(|k| !listed.contains(*k))
            .cloned()
            .collect();
        for g in gone {
            self.switches.remove(&g);
            self.dirty.insert(g);
        }
        for cfg in cfgs {
            let parse_src = |text: &str, what: &str, warn: &mut Vec<String>| -> Option<IpAddr> {
                if text.is_empty() {
                    return None;
                }
                let a = text.parse::<IpAddr>().ok();
                if a.is_none() {
                    warn.push(format!(
                        "IP_Multicast of {}: {what} \"{text}\" is not an address; the querier does not send from it",
                        cfg.datapath
                    ));
                }
                a
            };
            let ip4_src = match parse_src(&cfg.ip4_src, "ip4_src", &mut warn) {
                Some(IpAddr::V4(a)) => Some(a),
                _ => None,
            };
            let ip6_src = match parse_src(&cfg.ip6_src, "ip6_src", &mut warn) {
                Some(IpAddr::V6(a)) => Some(a),
                _ => None,
            };
            let eth_src = crate::local::parse_mac(&cfg.eth_src);
            if cfg.querier && eth_src.is_none() && !cfg.eth_src.is_empty() {
                warn.push(format!(
                    "IP_Multicast of {}: eth_src \"{}\" is not an Ethernet address; no queries",
                    cfg.datapath, cfg.eth_src
                ));
            }
            // A switch met for the first time (a datapath that starts empty) takes the seeds.
            let fresh = !self.switches.contains_key(&cfg.datapath);
            let sw = self
                .switches
                .entry(cfg.datapath.clone())
                .or_insert_with(|| Switch {
                    cfg: McastCfgMsg::default(),
                    eth_src: None,
                    ip4_src: None,
                    ip6_src: None,
                    groups: BTreeMap::new(),
                    mrouters: BTreeMap::new(),
                    next_query: None,
                });
            sw.eth_src = eth_src;
            sw.ip4_src = ip4_src;
            sw.ip6_src = ip6_src;
            let interval_changed = sw.cfg.query_interval != cfg.query_interval;
            // `ip-multicast-flush`: everything learned goes (pinctrl's `needs_flush`).
            if !fresh && sw.cfg.seq_no != cfg.seq_no {
                sw.groups.clear();
                sw.mrouters.clear();
                self.dirty.insert(cfg.datapath.clone());
            }
            sw.cfg = cfg;
            // Members of ports that left the chassis go.
            let ports: BTreeSet<&String> = sw.cfg.ports.iter().collect();
            let before = sw.report();
            for members in sw.groups.values_mut() {
                members.retain(|p, _| ports.contains(p));
            }
            sw.groups.retain(|_, m| !m.is_empty());
            sw.mrouters.retain(|p, _| ports.contains(p));
            if fresh {
                let expiry = now + sw.idle();
                for g in std::mem::take(&mut sw.cfg.known) {
                    let members = g.ports.into_iter().filter(|p| ports.contains(p));
                    if g.address == MROUTERS {
                        sw.mrouters.extend(members.map(|p| (p, now + MROUTER_IDLE)));
                    } else if let Ok(a) = g.address.parse::<IpAddr>() {
                        sw.groups
                            .entry(a)
                            .or_default()
                            .extend(members.map(|p| (p, expiry)));
                    }
                }
                sw.groups.retain(|_, m| !m.is_empty());
            }
            sw.cfg.known.clear();
            if !sw.querier_on() {
                sw.next_query = None;
            } else if sw.next_query.is_none() || interval_changed {
                sw.next_query = Some(now);
            }
            if fresh || sw.report() != before {
                self.dirty.insert(sw.cfg.datapath.clone());
            }
        }
        self.refresh_deadline();
        warn
    }

    /// A frame `igmp` punted from `port` of switch `dp`. An error names what was wrong.
    pub fn handle(
        &mut self,
        dp: &str,
        port: &str,
        frame: &[u8],
        now: Duration,
    ) -> Result<Forward, String> {
        let Some(sw) = self.switches.get_mut(dp) else {
            // Not snooping here (IP_Multicast says disabled, or no local port): as pinctrl,
            // ignored.
            return Ok(Forward::Nowhere);
        };
        let ops = match parse(frame) {
            Ok(o) => o,
            Err(e) => {
                self.bad += 1;
                return Err(format!("multicast snooping on {dp}, port {port}: {e}"));
            }
        };
        let forward = if ops.iter().any(|o| matches!(o, Op::Query)) {
            Forward::FloodL2
        } else {
            Forward::Mrouters
        };
        // Whether a (group, port) came or went: a refreshed membership changes no report.
        let mut changed = false;
        for op in ops {
            match op {
                Op::Query => {
                    changed |= sw
                        .mrouters
                        .insert(port.to_string(), now + MROUTER_IDLE)
                        .is_none();
                    // A router port is not also a member.
                    for m in sw.groups.values_mut() {
                        changed |= m.remove(port).is_some();
                    }
                    sw.groups.retain(|_, m| !m.is_empty());
                }
                Op::Join(g) if link_local(g) || sw.mrouters.contains_key(port) => {}
                Op::Join(g) => {
                    if !sw.groups.contains_key(&g) && sw.groups.len() as u64 >= sw.cfg.table_size {
                        // Full: the group refreshed least recently makes room.
                        let lru = sw
                            .groups
                            .iter()
                            .min_by_key(|(_, m)| m.values().max().copied())
                            .map(|(a, _)| *a);
                        match lru {
                            Some(a) => {
                                sw.groups.remove(&a);
                                changed = true;
                            }
                            None => continue,
                        }
                    }
                    let expiry = now + sw.idle();
                    changed |= sw
                        .groups
                        .entry(g)
                        .or_default()
                        .insert(port.to_string(), expiry)
                        .is_none();
                }
                Op::Leave(g) => {
                    if let Some(m) = sw.groups.get_mut(&g) {
                        changed |= m.remove(port).is_some();
                        if m.is_empty() {
                            sw.groups.remove(&g);
                        }
                    }
                }
            }
        }
        if changed {
            self.dirty.insert(dp.to_string());
        }
        self.refresh_deadline();
        Ok(forward)
    }

    /// Recomputes [`Snooper::poll_timeout`]'s answer (after a change: not per packet).
    fn refresh_deadline(&mut self) {
        self.deadline = self
            .switches
            .values()
            .flat_map(|s| {
                s.groups
                    .values()
                    .flat_map(|m| m.values().copied())
                    .chain(s.mrouters.values().copied())
                    .chain(s.next_query)
            })
            .min();
    }

    /// When [`Snooper::poll`] next has work (an expiry or a query).
    pub fn poll_timeout(&self) -> Option<Duration> {
        if !self.dirty.is_empty() {
            return Some(Duration::ZERO);
        }
        self.deadline
    }

    /// Expires memberships, builds the queries due, and returns them with every switch whose
    /// groups changed since the last poll.
    pub fn poll(&mut self, now: Duration) -> (Vec<Query>, Vec<McastGroupsMsg>) {
        let mut queries = Vec::new();
        for (name, sw) in &mut self.switches {
            let before = sw.groups.len() + sw.mrouters.len();
            let mut n = 0;
            for m in sw.groups.values_mut() {
                let l = m.len();
                m.retain(|_, exp| *exp > now);
                n += l - m.len();
            }
            sw.groups.retain(|_, m| !m.is_empty());
            sw.mrouters.retain(|_, exp| *exp > now);
            if n > 0 || sw.groups.len() + sw.mrouters.len() != before {
                self.dirty.insert(name.clone());
            }
            if let (Some(t), Some(mac)) = (sw.next_query, sw.eth_src)
                && t <= now
            {
                let resp = sw.cfg.query_max_resp;
                let mut frames = Vec::new();
                if let Some(src) = sw.ip4_src {
                    frames.push(igmp_query(mac, src, resp));
                }
                if let Some(src) = sw.ip6_src {
                    frames.push(mld_query(mac, src, resp));
                }
                for p in &sw.cfg.ports {
                    for f in &frames {
                        queries.push(Query {
                            port: p.clone(),
                            frame: f.clone(),
                        });
                    }
                }
                sw.next_query = Some(now + Duration::from_secs(sw.cfg.query_interval.max(1)));
            }
        }
        let changed = std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|d| McastGroupsMsg {
                groups: self
                    .switches
                    .get(&d)
                    .map(Switch::report)
                    .unwrap_or_default(),
                datapath: d,
            })
            .collect();
        self.refresh_deadline();
        (queries, changed)
    }

    /// Every snooping switch's groups.
    pub fn groups(&self) -> Vec<McastGroupsMsg> {
        self.switches
            .iter()
            .map(|(d, s)| McastGroupsMsg {
                datapath: d.clone(),
                groups: s.report(),
            })
            .collect()
    }
}

impl crate::Datapath {
    /// [`crate::proto::ToDatapath::Mcast`]: the snooping switches; every switch's groups go
    /// to the controller at once.
    pub(crate) fn set_mcast(&mut self, list: Vec<McastCfgMsg>, now: Duration) {
        let n = list.len();
        for w in self.snoop.set(list, now) {
            self.log(crate::Level::Warn, w);
        }
        self.log(
            crate::Level::Info,
            format!("multicast snooping on {n} switch(es)"),
        );
        // Every switch's groups below: the changed ones among them.
        let (queries, _) = self.snoop.poll(now);
        self.queue_queries(queries, now);
        let all = self.snoop.groups();
        self.send_mcast(all);
    }

    /// Each query out of its local port through the port's egress pipeline, as pinctrl's
    /// packet-out into the output tables (no inport): to-lport ACLs and port security apply.
    fn queue_queries(&mut self, queries: Vec<Query>, now: Duration) {
        for q in queries {
            let Some(id) = self.ports.get(&q.port).map(|p| p.id) else {
                continue;
            };
            if let Some((datapath, port)) = self.pipeline.local_port(id) {
                let from = hf_pipeline::Ingress::Output {
                    datapath,
                    inport: 0,
                    outport: port,
                };
                self.run(from, &q.frame, now, false);
            }
        }
    }

    /// Expiries and queries; changed groups to the controller.
    pub(crate) fn run_mcast(&mut self, now: Duration) {
        let (queries, changed) = self.snoop.poll(now);
        self.queue_queries(queries, now);
        if !changed.is_empty() {
            for c in &changed {
                self.log(
                    crate::Level::Info,
                    format!(
                        "multicast groups of {}: {}",
                        c.datapath,
                        if c.groups.is_empty() {
                            "none".to_string()
                        } else {
                            c.groups
                                .iter()
                                .map(|g| format!("{} [{}]", g.address, g.ports.join(" ")))
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                );
            }
            self.send_mcast(changed);
        }
    }

    /// Group reports go only to a controller that speaks them (version 8).
    fn send_mcast(&mut self, g: Vec<McastGroupsMsg>) {
        if !g.is_empty()
            && self
                .control
                .as_ref()
                .is_some_and(|c| c.ready() && c.version() >= crate::proto::MCAST_VERSION)
        {
            self.send(&crate::proto::FromDatapath::McastGroups(g));
        }
    }
}

/// 224.0.0.0/24 and ff02::1: never learned.
fn link_local(a: IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v) => v == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// What an IGMP or MLD message asks, or what is wrong with it.
fn parse(frame: &[u8]) -> Result<Vec<Op>, String> {
    let p = hf_wire::parse(frame, 0, 0).map_err(|e| format!("does not parse: {e:?}"))?;
    let (l3, mut l4, end) = (
        usize::from(p.layout.l3),
        usize::from(p.layout.l4),
        usize::from(p.layout.end),
    );
    // The parser gives no L4 offset for protocols it does not know (IGMP): after the IPv4
    // header.
    if l4 == 0 && p.key.eth_type == 0x0800 && p.key.ip_proto == 2 {
        l4 = l3 + usize::from(frame.get(l3).map_or(0, |b| b & 0xf)) * 4;
    }
    if l4 == 0 || end <= l4 || end > frame.len() {
        return Err("no IGMP/MLD header".into());
    }
    let msg = &frame[l4..end];
    match (p.key.eth_type, p.key.ip_proto) {
        (0x0800, 2) => {
            if hf_wire::checksum(msg) != 0 {
                return Err("bad IGMP checksum".into());
            }
            igmp(msg)
        }
        (0x86dd, 58) => {
            let sum = hf_wire::pseudo_header_sum(
                IpAddr::V6(p.key.ip6_src),
                IpAddr::V6(p.key.ip6_dst),
                58,
                msg.len() as u32,
            );
            if !hf_wire::sum_with(sum, msg) != 0 {
                return Err("bad MLD checksum".into());
            }
            mld(msg, p.key.ip6_src)
        }
        (t, proto) => Err(format!(
            "neither IGMP nor MLD (ethertype {t:#06x}, protocol {proto})"
        )),
    }
}

fn v4(b: &[u8], at: usize) -> Option<IpAddr> {
    let o: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(o)))
}

fn v6(b: &[u8], at: usize) -> Option<IpAddr> {
    let o: [u8; 16] = b.get(at..at + 16)?.try_into().ok()?;
    Some(IpAddr::V6(Ipv6Addr::from(o)))
}

fn igmp(m: &[u8]) -> Result<Vec<Op>, String> {
    let short = || "IGMP message too short".to_string();
    let ty = *m.first().ok_or_else(short)?;
    Ok(match ty {
        0x11 => vec![Op::Query],
        0x12 | 0x16 => vec![Op::Join(v4(m, 4).ok_or_else(short)?)],
        0x17 => vec![Op::Leave(v4(m, 4).ok_or_else(short)?)],
        0x22 => records(m, 4)?,
        other => return Err(format!("IGMP type {other:#04x} is not snooped")),
    })
}

fn mld(m: &[u8], src: Ipv6Addr) -> Result<Vec<Op>, String> {
    let short = || "MLD message too short".to_string();
    let ty = *m.first().ok_or_else(short)?;
    Ok(match ty {
        130 if src.is_unspecified() => Vec::new(),
        130 => vec![Op::Query],
        131 => vec![Op::Join(v6(m, 8).ok_or_else(short)?)],
        132 => vec![Op::Leave(v6(m, 8).ok_or_else(short)?)],
        143 => records(m, 16)?,
        other => return Err(format!("ICMPv6 type {other} is not MLD")),
    })
}

/// An IGMPv3 (`alen` 4) or MLDv2 (16) report's group records.
fn records(m: &[u8], alen: usize) -> Result<Vec<Op>, String> {
    let short = || {
        format!(
            "{}v{} report truncated",
            if alen == 4 { "IGMP" } else { "MLD" },
            if alen == 4 { 3 } else { 2 }
        )
    };
    let n = be16(m, 6).ok_or_else(short)?;
    let mut at = 8;
    let mut out = Vec::new();
    for _ in 0..n {
        let ty = *m.get(at).ok_or_else(short)?;
        let aux = usize::from(*m.get(at + 1).ok_or_else(short)?) * 4;
        let nsrc = usize::from(be16(m, at + 2).ok_or_else(short)?);
        let g = if alen == 4 {
            v4(m, at + 4)
        } else {
            v6(m, at + 4)
        }
        .ok_or_else(short)?;
        // MODE_IS_INCLUDE (1) / CHANGE_TO_INCLUDE_MODE (3) with no source: a leave.
        out.push(if nsrc == 0 && (ty == 1 || ty == 3) {
            Op::Leave(g)
        } else {
            Op::Join(g)
        });
        at += 4 + alen + nsrc * alen + aux;
        if at > m.len() {
            return Err(short());
        }
    }
    Ok(out)
}

/// An IGMPv3 general query (RFC 3376 §4.1) to 224.0.0.1, TTL 1, router alert.
fn igmp_query(mac: [u8; 6], src: Ipv4Addr, max_resp_s: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 24 + 12);
    f.extend_from_slice(&[0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_len: u16 = 24 + 12;
    let mut ip = vec![0x46, 0xc0];
    ip.extend_from_slice(&ip_len.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 1, 2, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&[224, 0, 0, 1]);
    ip.extend_from_slice(&[0x94, 0x04, 0, 0]);
    let c = hf_wire::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    // Max response in tenths of a second (pinctrl: `query_max_resp_s * 10` in one byte), QQIC
    // the same.
    let code = (max_resp_s.saturating_mul(10)).min(255) as u8;
    let mut q = vec![0x11, code, 0, 0, 0, 0, 0, 0, 0, code, 0, 0];
    let c = hf_wire::checksum(&q);
    q[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&q);
    f
}

/// An MLDv2 general query (RFC 3810 §5.1) to ff02::1, hop limit 1, router alert.
fn mld_query(mac: [u8; 6], src: Ipv6Addr, max_resp_s: u64) -> Vec<u8> {
    let dst = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let mut f = Vec::with_capacity(14 + 40 + 8 + 28);
    f.extend_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
    f.extend_from_slice(&mac);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    let payload: u16 = 8 + 28;
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&payload.to_be_bytes());
    f.extend_from_slice(&[0, 1]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    // Hop-by-hop: router alert (MLD), PadN.
    f.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
    let resp = (max_resp_s.saturating_mul(1000)).min(u64::from(u16::MAX)) as u16;
    let qqic = max_resp_s.min(255) as u8;
    let mut q = vec![130, 0, 0, 0];
    q.extend_from_slice(&resp.to_be_bytes());
    q.extend_from_slice(&[0, 0]);
    q.extend_from_slice(&[0; 16]);
    q.extend_from_slice(&[0, qqic, 0, 0]);
    let sum = hf_wire::pseudo_header_sum(IpAddr::V6(src), IpAddr::V6(dst), 58, q.len() as u32);
    let c = !hf_wire::sum_with(sum, &q);
    q[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&q);
    f
}

#[cfg(test)]
#[path = "snoop_tests.rs"]
mod tests;
