//! What northd wants SB to hold, keyed by identity (names and flow ids, never UUIDs): the
//! boundary between compiling and syncing. [`crate::render`] makes it from a compile; the sync
//! ([`crate::sync`]) turns the difference between it and the SB it sees into a transaction.
//!
//! References between rows are by key too: a flow names its datapaths, a port binding its
//! datapath, a multicast group its ports. The sync resolves keys to UUIDs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::flow::FlowId;

/// One `Datapath_Binding`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DpRow {
    /// `tunnel_key`.
    pub tunnel_key: u32,
    /// `external_ids` (`name`, `logical-switch`/`logical-router` = NB UUID, ...).
    pub external_ids: BTreeMap<String, String>,
    /// `load_balancers` (deprecated in 23.03; kept empty) — LB names when the older layout
    /// is served.
    pub load_balancers: BTreeSet<String>,
}

/// One `Port_Binding`, only the columns northd owns (the controller owns `chassis`, `up`,
/// `encap`, `additional_chassis`, `virtual_parent`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PortRow {
    /// `datapath`, by datapath name.
    pub datapath: String,
    /// `tunnel_key`.
    pub tunnel_key: u32,
    /// `type`.
    pub type_: String,
    /// `options`.
    pub options: BTreeMap<String, String>,
    /// `mac`.
    pub mac: BTreeSet<String>,
    /// `parent_port`.
    pub parent_port: Option<String>,
    /// `tag`.
    pub tag: Option<i64>,
    /// `nat_addresses`.
    pub nat_addresses: BTreeSet<String>,
    /// `external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// `requested_chassis`, by chassis name (resolved to a `Chassis` row by the sync).
    pub requested_chassis: Option<String>,
    /// `requested_additional_chassis`, by chassis name.
    pub requested_additional_chassis: BTreeSet<String>,
    /// `gateway_chassis` is not written (23.03 uses `ha_chassis_group`); the HA chassis group
    /// of a chassis-redirect port: (group name, [(chassis, priority)]).
    pub ha_chassis_group: Option<(String, Vec<(String, i64)>)>,
    /// `ref_chassis` of that HA chassis group, by chassis name: the chassis where ports of
    /// the switches around the router (and routers linked to it) are bound (23.03 writes it
    /// for groups of more than one chassis; gateways run BFD to these).
    pub ha_ref_chassis: BTreeSet<String>,
    /// The switches whose bound ports' chassis belong in that `ref_chassis` too: the sync
    /// adds the chassis SB shows them bound to, so a claim needs a sync, not a compile.
    pub ha_ref_datapaths: BTreeSet<String>,
    /// `port_security`.
    pub port_security: BTreeSet<String>,
    /// `mirror_rules`, by mirror name (resolved to SB `Mirror` rows by the sync).
    pub mirror_rules: BTreeSet<String>,
}

/// One `Mirror` (keyed by `name`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MirrorRow {
    /// `filter`: `from-lport` or `to-lport`.
    pub filter: String,
    /// `index` (the tunnel key of the mirror's GRE or ERSPAN packets).
    pub index: i64,
    /// `sink`: where mirrored packets go.
    pub sink: String,
    /// `type`: `gre` or `erspan`.
    pub type_: String,
}

/// Where a flow is written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlowDps {
    /// `logical_datapath`.
    One(String),
    /// `logical_dp_group`: these datapaths (sorted).
    Group(Vec<String>),
}

/// One `Logical_Flow`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRow {
    /// Where.
    pub dps: FlowDps,
    /// `ingress`/`egress`.
    pub pipeline: &'static str,
    /// `table_id`.
    pub table_id: u8,
    /// `priority`.
    pub priority: u16,
    /// `match` (shared with the incremental compiler's shapes: one copy of each text).
    pub match_: Arc<str>,
    /// `actions` (shared likewise).
    pub actions: Arc<str>,
    /// `external_ids`: `stage-name`, `stage-hint` where there is an NB row, `hf-flow-id`,
    /// and `hf-acl-broken` on an ACL's stand-in (compact: no text until written).
    pub external_ids: FlowExtIds,
    /// `controller_meter`.
    pub controller_meter: Option<String>,
}

/// A `Logical_Flow`'s `external_ids` as northd writes them, held compact (40 bytes, no
/// allocation; each of 100k flows had a map of four to eight strings): the stage, the hint's
/// and the identity's hex digits inline, the ACL stand-in's mark. Read like the map
/// ([`FlowExtIds::get`], [`FlowExtIds::iter`] in key order);
/// [`FlowExtIds::to_map`] makes the texts where a row is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowExtIds {
    stage: crate::stage::Stage,
    /// `stage-hint`: the NB row's UUID's first 8 hex digits.
    hint: Option<[u8; 8]>,
    /// `hf-flow-id`: 16 hex digits.
    id: [u8; 16],
    acl_broken: Option<crate::ls::index::AclBroken>,
}

fn hex_digits<const N: usize>(v: u64) -> [u8; N] {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; N];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = D[((v >> (4 * (N - 1 - i))) & 0xf) as usize];
    }
    buf
}

fn ascii(b: &[u8]) -> &str {
    // Only hex digits are stored.
    std::str::from_utf8(b).unwrap_or_default()
}

impl FlowExtIds {
    /// The ids of flow `id` of `stage`, from NB row `hint` (when there is one), standing in
    /// for a broken ACL when `acl_broken` is set.
    pub fn new(
        stage: crate::stage::Stage,
        hint: Option<&uuid::Uuid>,
        id: FlowId,
        acl_broken: Option<crate::ls::index::AclBroken>,
    ) -> FlowExtIds {
        FlowExtIds {
            stage,
            hint: hint.map(|u| {
                let b = u.as_bytes();
                hex_digits::<8>(u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
            }),
            id: hex_digits::<16>(id.0),
            acl_broken,
        }
    }

    /// The (key, value) pairs in key order, as a `BTreeMap<String, String>` lists them.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        [
            self.acl_broken
                .map(|m| (crate::render::ACL_BROKEN_KEY, m.as_str())),
            Some(("hf-flow-id", ascii(&self.id))),
            self.hint.as_ref().map(|h| ("stage-hint", ascii(h))),
            Some(("stage-name", self.stage.name())),
        ]
        .into_iter()
        .flatten()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// Whether `key` is there.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The texts, as the column holds them.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// One `Multicast_Group`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McRow {
    /// `tunnel_key` (32768..).
    pub tunnel_key: u32,
    /// `ports`, by logical port name.
    pub ports: BTreeSet<String>,
}

/// One `Load_Balancer`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LbRow {
    /// `vips`.
    pub vips: BTreeMap<String, String>,
    /// `protocol`.
    pub protocol: Option<String>,
    /// `options`.
    pub options: BTreeMap<String, String>,
    /// `external_ids`.
    pub external_ids: BTreeMap<String, String>,
    /// `ls_datapath_group` / `datapaths`: switch datapaths by name.
    pub datapaths: BTreeSet<String>,
    /// Write `datapaths` as a `Logical_DP_Group` in `datapath_group` (chassis feature
    /// `ls-dpg-column`, as 23.03 does) rather than in the `datapaths` column.
    pub dp_group: bool,
}

/// One `DNS` row (`external_ids:dns_id` is the NB row's UUID, as 23.03 writes it: DNS rows have
/// no name).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DnsRow {
    /// `records`, values lowercased (DNS lookups are case-insensitive).
    pub records: BTreeMap<String, String>,
    /// `datapaths`: the switches listing it, by name.
    pub datapaths: BTreeSet<String>,
    /// `external_ids` (`dns_id`).
    pub external_ids: BTreeMap<String, String>,
}

/// One `DHCP_Options` or `DHCPv6_Options` row (keyed by `name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DhcpOptRow {
    /// `code`.
    pub code: u8,
    /// `type` (`ipv4`, `str`, `mac`, ...).
    pub type_: &'static str,
}

/// One `Meter` (keyed by `name`) with its `Meter_Band`s.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MeterRow {
    /// `unit`: `kbps` or `pktps`.
    pub unit: String,
    /// `bands`: (`action`, `rate`, `burst_size`), sorted.
    pub bands: BTreeSet<(String, i64, i64)>,
}

/// One `IP_Multicast` row (keyed by its switch): the snooping configuration controllers read.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IpMcastRow {
    /// `enabled` (`other_config:mcast_snoop`).
    pub enabled: bool,
    /// `querier` (`mcast_querier`, default true).
    pub querier: bool,
    /// `table_size` (`mcast_table_size`, default 2048).
    pub table_size: i64,
    /// `idle_timeout` in seconds (`mcast_idle_timeout`, default 300, clamped to 15..3600).
    pub idle_timeout: i64,
    /// `query_interval` in seconds (`mcast_query_interval`, default half the idle timeout,
    /// clamped to 1..3600).
    pub query_interval: i64,
    /// `query_max_resp` in seconds (`mcast_query_max_response`, default 1).
    pub query_max_resp: i64,
    /// `eth_src`, `ip4_src`, `ip6_src` when the switch sets them (`mcast_eth_src`, ...). Like
    /// 23.03, a value once written stays when the option goes away.
    pub eth_src: Option<String>,
    /// `ip4_src`.
    pub ip4_src: Option<String>,
    /// `ip6_src`.
    pub ip6_src: Option<String>,
}

/// Everything northd writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbDesired {
    /// `Datapath_Binding` by datapath name.
    pub datapaths: BTreeMap<String, DpRow>,
    /// `Port_Binding` by `logical_port`.
    pub ports: BTreeMap<String, PortRow>,
    /// `Logical_Flow` by identity.
    pub flows: BTreeMap<FlowId, FlowRow>,
    /// `Multicast_Group` by (datapath name, group name).
    pub mcgroups: BTreeMap<(String, String), McRow>,
    /// `Port_Group` by name (`<dp-key>_<name>` per datapath in the 20.09+ layout): port names.
    pub port_groups: BTreeMap<String, BTreeSet<String>>,
    /// `Address_Set` by name: addresses.
    pub address_sets: BTreeMap<String, BTreeSet<String>>,
    /// `Load_Balancer` by name.
    pub load_balancers: BTreeMap<String, LbRow>,
    /// `DNS` by NB `DNS` row UUID (its `dns_id`).
    pub dns: BTreeMap<String, DnsRow>,
    /// `Mirror` by name (NB's, as 23.03 copies them).
    pub mirrors: BTreeMap<String, MirrorRow>,
    /// `Chassis_Template_Var` by `chassis`: its `variables` (NB's, as 23.03 copies them).
    pub template_vars: BTreeMap<String, BTreeMap<String, String>>,
    /// `Meter` by name: NB's meters and the ACLs' own copies of `fair` ones.
    pub meters: BTreeMap<String, MeterRow>,
    /// `IP_Multicast` by switch (datapath name).
    pub ip_multicast: BTreeMap<String, IpMcastRow>,
    /// `BFD` by (logical port, dst IP) ([`crate::bfd`]).
    pub bfd: BTreeMap<(String, String), crate::bfd::BfdRow>,
    /// `DHCP_Options` by name: the DHCPv4 option codes ovn-controller parses with.
    pub dhcp_options: BTreeMap<String, DhcpOptRow>,
    /// `DHCPv6_Options` by name.
    pub dhcpv6_options: BTreeMap<String, DhcpOptRow>,
    /// `Service_Monitor` by its index (logical port, IP, port, protocol): what
    /// [`crate::svc`] planned; `status` is the controllers' (northd writes it only to set a
    /// monitor whose port is down `offline`).
    pub service_monitors: BTreeMap<crate::svc::SvcKey, crate::svc::MonRow>,
    /// `SB_Global.options` northd owns (`mac_prefix`, `svc_monitor_mac`, `max_tunid`, ...).
    pub sb_options: BTreeMap<String, String>,
    /// Datapaths whose flows the sync must leave exactly as SB has them (fail closed: a
    /// chassis below the oldest served feature level keeps running the flows it last got).
    pub frozen_datapaths: BTreeSet<String>,
}

impl SbDesired {
    /// Every distinct datapath group the flows use.
    pub fn dp_groups(&self) -> BTreeSet<&[String]> {
        self.flows
            .values()
            .filter_map(|f| match &f.dps {
                FlowDps::Group(g) => Some(g.as_slice()),
                FlowDps::One(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ls::index::AclBroken;
    use crate::stage::Stage;

    /// The map northd wrote before `FlowExtIds` (session 9's `render::insert`).
    fn old_map(
        stage: Stage,
        hint: Option<uuid::Uuid>,
        id: FlowId,
        mark: Option<AclBroken>,
    ) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("stage-name".to_string(), stage.name().to_string());
        if let Some(h) = hint {
            m.insert(
                "stage-hint".to_string(),
                h.simple().to_string()[..8].to_string(),
            );
        }
        m.insert("hf-flow-id".to_string(), id.to_string());
        if let Some(m2) = mark {
            m.insert(
                crate::render::ACL_BROKEN_KEY.to_string(),
                m2.as_str().to_string(),
            );
        }
        m
    }

    #[test]
    fn compact_external_ids_read_and_write_as_the_map_did() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let stages = [
            Stage::LsInAcl,
            Stage::LsInCheckPortSec,
            Stage::LrInArpResolve,
        ];
        for i in 0..200 {
            let stage = stages[i % stages.len()];
            let hint = (i % 3 != 0).then(|| uuid::Uuid::from_u64_pair(next(), next()));
            // Small identities too: leading zeros are written.
            let id = FlowId(if i % 5 == 0 { next() >> 40 } else { next() });
            let mark = match i % 7 {
                0 => Some(AclBroken::LastGood),
                1 => Some(AclBroken::FailClosed),
                _ => None,
            };
            let want = old_map(stage, hint, id, mark);
            let got = FlowExtIds::new(stage, hint.as_ref(), id, mark);
            assert_eq!(got.to_map(), want, "case {i}");
            // In the map's key order (the sync compares pair by pair with SB's).
            let pairs: Vec<(&str, &str)> = got.iter().collect();
            let want_pairs: Vec<(&str, &str)> =
                want.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            assert_eq!(pairs, want_pairs, "case {i}");
            for (k, v) in &want {
                assert_eq!(got.get(k), Some(v.as_str()));
            }
            assert_eq!(got.get("source"), None);
        }
    }
}
