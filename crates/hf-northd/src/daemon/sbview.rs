//! The lean southbound view northd keeps ([`SbView`]): an [`hf_ovsdb_net::client::Model`] of
//! only the tables and columns northd reads or writes. Small tables are held as hf-model's
//! typed rows; `Logical_Flow` (100k rows at 500 switches × 40 ports) is held lean
//! ([`LeanFlow`]: its `hf-flow-id`, references, scalar columns, hashes of `match` and
//! `actions`, and its small `external_ids` map, since update2 sends map diffs), so that the
//! sync can tell whether a row equals the desired one without keeping its text.
//!
//! What it does not do: keep flow text (so it cannot print a flow), or hold controller-only
//! tables (Encap, FDB, ...) other than `IGMP_Group`, which it reads. `MAC_Binding` and `Static_MAC_Binding` are held as
//! row → datapath only, so that deleting a datapath deletes what refers to it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use hf_model::ModelError;
use hf_model::Table;
use hf_model::sb;
use hf_ovsdb::{Atom, Datum};
use hf_ovsdb_net::client::model::{Feed, FeedError};
use hf_ovsdb_net::client::{Model, TableSelect};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::flow::{FlowId, fnv1a64};

/// One `Logical_Flow`, lean.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeanFlow {
    /// `external_ids:hf-flow-id`, parsed (None: not written by holdfast northd).
    pub id: Option<FlowId>,
    /// `logical_datapath`.
    pub logical_datapath: Option<Uuid>,
    /// `logical_dp_group`.
    pub logical_dp_group: Option<Uuid>,
    /// `pipeline` is `egress`.
    pub egress: bool,
    /// `table_id` (0..=32 in the schema; anything else reads as -1, never equal to a wanted one).
    pub table_id: i16,
    /// `priority` (0..=65535 in the schema; anything else reads as -1).
    pub priority: i32,
    /// FNV-1a of `match`.
    pub match_hash: u64,
    /// FNV-1a of `actions`.
    pub actions_hash: u64,
    /// `controller_meter`.
    pub controller_meter: Option<Box<str>>,
    /// `external_ids`, sorted by key, packed into one string (`key US value RS ...`, the
    /// ASCII unit and record separators): one allocation instead of two per entry. Read it
    /// with [`LeanFlow::external_ids`].
    pub external_ids_packed: Box<str>,
}

impl Default for LeanFlow {
    fn default() -> Self {
        LeanFlow {
            id: None,
            logical_datapath: None,
            logical_dp_group: None,
            egress: false,
            table_id: 0,
            priority: 0,
            match_hash: fnv1a64(b""),
            actions_hash: fnv1a64(b""),
            controller_meter: None,
            external_ids_packed: "".into(),
        }
    }
}

/// Separators of [`LeanFlow::external_ids_packed`].
const US: char = '\u{1f}';
const RS: char = '\u{1e}';

/// The hash the view keeps of a `match` or `actions` text.
pub fn text_hash(s: &str) -> u64 {
    fnv1a64(s.as_bytes())
}

/// One `MAC_Binding`, as much as the sync and ageing need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MacBindingRef {
    /// `datapath`.
    pub datapath: Uuid,
    /// `timestamp` (ms since the epoch).
    pub timestamp: i64,
}

/// What changed in one update: the tables touched and the number of row changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SbChanges {
    /// Tables with at least one changed row.
    pub tables: BTreeSet<&'static str>,
    /// Row changes.
    pub rows: usize,
    /// Whether a row or column northd writes changed (not only controller-owned ones:
    /// `Chassis`, `Chassis_Private`, `MAC_Binding`, `Port_Binding`'s `chassis`, `up`,
    /// `additional_chassis`).
    pub northd_rows: bool,
    /// The rows of northd's root tables that changed (so the daemon can tell the echo of its
    /// own transaction from somebody else's write). Rows of `Logical_DP_Group` and
    /// `HA_Chassis` (not root: the server collects them) are not listed.
    pub northd_uuids: Vec<Uuid>,
    /// The `logical_port` of every `Port_Binding` that changed, before and after (what a
    /// port's NB `up` follows).
    pub port_names: BTreeSet<String>,
}

impl SbChanges {
    /// Whether `table` changed.
    pub fn touches(&self, table: &str) -> bool {
        self.tables.contains(table)
    }
}

/// northd's view of SB.
#[derive(Debug, Default)]
pub struct SbView {
    /// `SB_Global`.
    pub sb_global: BTreeMap<Uuid, sb::SbGlobal>,
    /// `Chassis`.
    pub chassis: BTreeMap<Uuid, sb::Chassis>,
    /// `Chassis_Private`.
    pub chassis_private: BTreeMap<Uuid, sb::ChassisPrivate>,
    /// `Datapath_Binding`.
    pub datapath_binding: BTreeMap<Uuid, sb::DatapathBinding>,
    /// `Port_Binding` (the columns of [`SbView::tables`]).
    pub port_binding: BTreeMap<Uuid, sb::PortBinding>,
    /// `Multicast_Group`.
    pub multicast_group: BTreeMap<Uuid, sb::MulticastGroup>,
    /// `Port_Group`.
    pub port_group: BTreeMap<Uuid, sb::PortGroup>,
    /// `Address_Set`.
    pub address_set: BTreeMap<Uuid, sb::AddressSet>,
    /// `DNS`.
    pub dns: BTreeMap<Uuid, sb::Dns>,
    /// `DHCP_Options`.
    pub dhcp_options: BTreeMap<Uuid, sb::DhcpOptions>,
    /// `DHCPv6_Options`.
    pub dhcpv6_options: BTreeMap<Uuid, sb::Dhcpv6Options>,
    /// `Load_Balancer`.
    pub load_balancer: BTreeMap<Uuid, sb::LoadBalancer>,
    /// `Service_Monitor` (northd writes all but `status`, which it reads).
    pub service_monitor: BTreeMap<Uuid, sb::ServiceMonitor>,
    /// `IGMP_Group`: the controllers' learned multicast groups (northd only reads them; see
    /// [`crate::tables::igmp`]).
    pub igmp_group: BTreeMap<Uuid, sb::IgmpGroup>,
    /// `HA_Chassis`.
    pub ha_chassis: BTreeMap<Uuid, sb::HaChassis>,
    /// `Mirror`.
    pub mirror: BTreeMap<Uuid, sb::Mirror>,
    /// `IP_Multicast`: the switches' snooping configuration northd writes for controllers.
    pub ip_multicast: BTreeMap<Uuid, sb::IpMulticast>,
    /// `BFD`: sessions to router ports' next hops (northd writes all but the controllers'
    /// `status`, which it reads).
    pub bfd: BTreeMap<Uuid, sb::Bfd>,
    /// `Chassis_Template_Var`.
    pub chassis_template_var: BTreeMap<Uuid, sb::ChassisTemplateVar>,
    /// `Meter`.
    pub meter: BTreeMap<Uuid, sb::Meter>,
    /// `Meter_Band`.
    pub meter_band: BTreeMap<Uuid, sb::MeterBand>,
    /// `HA_Chassis_Group`.
    pub ha_chassis_group: BTreeMap<Uuid, sb::HaChassisGroup>,
    /// `Logical_DP_Group`.
    pub logical_dp_group: BTreeMap<Uuid, sb::LogicalDpGroup>,
    /// `Logical_Flow`, lean.
    pub logical_flow: HashMap<Uuid, LeanFlow>,
    /// `Logical_Flow` rows by `hf-flow-id`, kept by the replica's updates (a view built by
    /// hand has none; see [`SbView::flow_index_complete`]).
    pub(crate) flow_index: HashMap<FlowId, Vec<Uuid>>,
    /// Rows of `logical_flow` the index has seen (with an id or without).
    pub(crate) flow_index_rows: usize,
    /// `Port_Binding` rows by `logical_port`, kept by the replica's updates (a view built by
    /// hand has none; see [`SbView::port_bindings_named`]).
    pub(crate) pb_by_name: HashMap<String, Vec<Uuid>>,
    /// Rows of `port_binding` the name index has seen.
    pub(crate) pb_index_rows: usize,
    /// `MAC_Binding`: row → (datapath, timestamp).
    pub mac_binding: HashMap<Uuid, MacBindingRef>,
    /// `Static_MAC_Binding`: row → datapath.
    pub static_mac_binding: HashMap<Uuid, Uuid>,
}

/// Tables of the view and the columns monitored (`None`: every column).
const TABLES: &[(&str, Option<&[&str]>)] = &[
    ("SB_Global", None),
    (
        "Chassis",
        Some(&["name", "hostname", "other_config", "external_ids"]),
    ),
    (
        "Chassis_Private",
        Some(&["name", "chassis", "nb_cfg", "nb_cfg_timestamp"]),
    ),
    ("Datapath_Binding", None),
    (
        "Port_Binding",
        Some(&[
            "logical_port",
            "datapath",
            "tunnel_key",
            "type",
            "options",
            "mac",
            "parent_port",
            "tag",
            "nat_addresses",
            "external_ids",
            "requested_chassis",
            "requested_additional_chassis",
            "ha_chassis_group",
            "port_security",
            "mirror_rules",
            "chassis",
            "additional_chassis",
            "up",
        ]),
    ),
    ("Multicast_Group", None),
    ("Port_Group", None),
    ("Address_Set", None),
    ("DNS", None),
    ("DHCP_Options", None),
    ("DHCPv6_Options", None),
    ("Load_Balancer", None),
    ("Service_Monitor", None),
    ("IGMP_Group", None),
    ("HA_Chassis", Some(&["chassis", "priority", "external_ids"])),
    ("Chassis_Template_Var", None),
    ("Mirror", None),
    ("IP_Multicast", None),
    ("BFD", None),
    ("Meter", None),
    ("Meter_Band", None),
    (
        "HA_Chassis_Group",
        Some(&["name", "ha_chassis", "ref_chassis"]),
    ),
    ("Logical_DP_Group", None),
    (
        "Logical_Flow",
        Some(&[
            "logical_datapath",
            "logical_dp_group",
            "pipeline",
            "table_id",
            "priority",
            "match",
            "actions",
            "external_ids",
            "controller_meter",
        ]),
    ),
    ("MAC_Binding", Some(&["datapath", "timestamp"])),
    ("Static_MAC_Binding", Some(&["datapath"])),
];

impl SbView {
    /// The `Logical_Flow` rows whose `hf-flow-id` is `id`.
    pub fn flows_with_id(&self, id: FlowId) -> &[Uuid] {
        self.flow_index.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Whether the flow index covers every `Logical_Flow` row (it does when the view is fed
    /// by updates only, as the replica does; a scoped diff needs it).
    pub fn flow_index_complete(&self) -> bool {
        self.flow_index_rows == self.logical_flow.len()
    }

    /// The `Port_Binding` rows whose `logical_port` is `name`, in UUID order; None when the
    /// name index does not cover every row (a view built by hand).
    pub fn port_bindings_named(&self, name: &str) -> Option<Vec<&sb::PortBinding>> {
        if self.pb_index_rows != self.port_binding.len() {
            return None;
        }
        let mut rows: Vec<&sb::PortBinding> = self
            .pb_by_name
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|u| self.port_binding.get(u))
            .collect();
        rows.sort_by_key(|p| p.uuid);
        Some(rows)
    }

    /// Applies `Port_Binding` changes, keeping the name index; the names before and after go
    /// to `names`.
    fn apply_port_bindings(
        &mut self,
        p: Pending<sb::PortBinding>,
        names: &mut BTreeSet<String>,
    ) -> usize {
        let n = p.len();
        for (u, r) in p {
            if let Some(old) = self.port_binding.remove(&u) {
                self.pb_index_rows -= 1;
                if let Some(v) = self.pb_by_name.get_mut(&old.logical_port) {
                    v.retain(|x| *x != u);
                    if v.is_empty() {
                        self.pb_by_name.remove(&old.logical_port);
                    }
                }
                names.insert(old.logical_port);
            }
            if let Some(r) = r {
                self.pb_index_rows += 1;
                self.pb_by_name
                    .entry(r.logical_port.clone())
                    .or_default()
                    .push(u);
                names.insert(r.logical_port.clone());
                self.port_binding.insert(u, r);
            }
        }
        n
    }

    fn apply_flows(&mut self, p: Pending<LeanFlow>) -> usize {
        let n = p.len();
        for (u, r) in p {
            if let Some(old) = self.logical_flow.remove(&u) {
                self.flow_index_rows -= 1;
                if let Some(id) = old.id
                    && let Some(v) = self.flow_index.get_mut(&id)
                {
                    v.retain(|x| *x != u);
                    if v.is_empty() {
                        self.flow_index.remove(&id);
                    }
                }
            }
            if let Some(r) = r {
                self.flow_index_rows += 1;
                if let Some(id) = r.id {
                    self.flow_index.entry(id).or_default().push(u);
                }
                self.logical_flow.insert(u, r);
            }
        }
        n
    }

    /// The monitor selection: only the tables and columns the view keeps.
    pub fn tables() -> Vec<TableSelect> {
        TABLES
            .iter()
            .map(|(t, cols)| TableSelect {
                name: (*t).to_string(),
                columns: cols.map(|c| c.iter().map(|s| (*s).to_string()).collect()),
                condition: None,
            })
            .collect()
    }

    /// The one `SB_Global` row (the first, if there are several).
    pub fn global(&self) -> Option<&sb::SbGlobal> {
        self.sb_global.values().next()
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.sb_global.len()
            + self.chassis.len()
            + self.chassis_private.len()
            + self.datapath_binding.len()
            + self.port_binding.len()
            + self.multicast_group.len()
            + self.port_group.len()
            + self.address_set.len()
            + self.dns.len()
            + self.dhcp_options.len()
            + self.dhcpv6_options.len()
            + self.load_balancer.len()
            + self.service_monitor.len()
            + self.igmp_group.len()
            + self.ha_chassis.len()
            + self.meter.len()
            + self.chassis_template_var.len()
            + self.mirror.len()
            + self.ip_multicast.len()
            + self.bfd.len()
            + self.meter_band.len()
            + self.ha_chassis_group.len()
            + self.logical_dp_group.len()
            + self.logical_flow.len()
            + self.mac_binding.len()
            + self.static_mac_binding.len()
    }

    /// Whether the view holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn upd_err(at: impl Into<String>, detail: impl Into<String>) -> ModelError {
    ModelError::Update {
        at: Some(at.into()),
        detail: detail.into(),
    }
}

fn no_named(n: &str) -> Result<Uuid, hf_ovsdb::OvsdbError> {
    Err(hf_ovsdb::OvsdbError::syntax(format!(
        "named-uuid \"{n}\" outside a transaction"
    )))
}

fn parse_col(
    ts: &hf_ovsdb::TableSchema,
    table: &str,
    uuid: Uuid,
    name: &str,
    v: &Value,
) -> Result<Option<(usize, Datum)>, ModelError> {
    let Some(i) = ts.column_index(name) else {
        return Ok(None);
    };
    Datum::from_json_unchecked(&ts.columns[i].ty, v, &mut no_named)
        .map(|d| Some((i, d)))
        .map_err(|e| ModelError::Column {
            table: table.to_string(),
            column: name.to_string(),
            uuid,
            detail: e.details,
        })
}

/// One row update: (kind, body).
fn one_member<'a>(
    table: &str,
    uuid_text: &str,
    u: &'a Value,
) -> Result<(&'a str, &'a Value), ModelError> {
    let mut it = u.as_object().into_iter().flatten();
    match (it.next(), it.next()) {
        (Some((k, v)), None) => Ok((k.as_str(), v)),
        _ => Err(upd_err(
            format!("{table} row {uuid_text}"),
            "a row update must be an object with exactly one member",
        )),
    }
}

/// A pending change to one table: row → new value (None: deleted).
type Pending<R> = Vec<(Uuid, Option<R>)>;

/// Typed table: the changes `updates` (one table's `<table-updates2>`, plus the view's own
/// `replace` member) makes.
fn typed_changes<T: Table>(
    rows: &BTreeMap<Uuid, T>,
    updates: &Value,
) -> Result<Pending<T>, ModelError> {
    let obj = updates
        .as_object()
        .ok_or_else(|| upd_err(T::NAME, "expected an object of row updates"))?;
    let ts = T::schema();
    let mut out = Vec::with_capacity(obj.len());
    for (uuid_text, u) in obj {
        let uuid = hf_ovsdb::atom::parse_uuid(uuid_text)
            .map_err(|_| upd_err(T::NAME, format!("{uuid_text:?} is not a UUID")))?;
        let (kind, body) = one_member(T::NAME, uuid_text, u)?;
        match kind {
            "initial" | "insert" | "replace" => {
                let m = body
                    .as_object()
                    .ok_or_else(|| upd_err(T::NAME, format!("{kind} must be a row")))?;
                if kind != "replace" && rows.contains_key(&uuid) {
                    return Err(ModelError::Row {
                        table: T::NAME.into(),
                        uuid,
                        detail: format!("{kind} of a row the view already holds"),
                    });
                }
                out.push((uuid, Some(T::from_json_row(uuid, m)?)));
            }
            "modify" => {
                let m = body
                    .as_object()
                    .ok_or_else(|| upd_err(T::NAME, "modify must be a row diff"))?;
                let old = rows.get(&uuid).ok_or_else(|| ModelError::Row {
                    table: T::NAME.into(),
                    uuid,
                    detail: "modify of a row the view lacks".into(),
                })?;
                let mut row = old.to_row(Uuid::nil());
                for (name, v) in m {
                    if let Some((i, diff)) = parse_col(ts, T::NAME, uuid, name, v)? {
                        row.cols[i] = row.cols[i].apply_diff(&diff, &ts.columns[i].ty);
                    }
                }
                out.push((uuid, Some(T::from_row(ts, &row)?)));
            }
            "delete" => out.push((uuid, None)),
            other => return Err(upd_err(T::NAME, format!("unknown row update {other:?}"))),
        }
    }
    Ok(out)
}

fn ids_of<R>(p: &Pending<R>) -> impl Iterator<Item = Uuid> + '_ {
    p.iter().map(|(u, _)| *u)
}

fn apply_pending<R>(rows: &mut BTreeMap<Uuid, R>, p: Pending<R>) -> usize {
    let n = p.len();
    for (u, r) in p {
        match r {
            Some(r) => {
                rows.insert(u, r);
            }
            None => {
                rows.remove(&u);
            }
        }
    }
    n
}

fn str_of(a: &Atom) -> &str {
    match a {
        Atom::String(s) => s,
        _ => "",
    }
}

fn uuid_of(d: &Datum) -> Option<Uuid> {
    match d.first() {
        Some(Atom::Uuid(u)) => Some(*u),
        _ => None,
    }
}

fn int_of(d: &Datum) -> i64 {
    match d.first() {
        Some(Atom::Integer(i)) => *i,
        _ => 0,
    }
}

fn opt_uuid_datum(u: Option<Uuid>) -> Datum {
    u.map_or_else(Datum::empty, |u| Datum::scalar(Atom::Uuid(u)))
}

impl LeanFlow {
    /// Sets one column from its datum (a whole value).
    fn set(&mut self, col: &str, d: &Datum) {
        match col {
            "logical_datapath" => self.logical_datapath = uuid_of(d),
            "logical_dp_group" => self.logical_dp_group = uuid_of(d),
            "pipeline" => self.egress = d.first().is_some_and(|a| str_of(a) == "egress"),
            "table_id" => self.table_id = i16::try_from(int_of(d)).unwrap_or(-1),
            "priority" => self.priority = i32::try_from(int_of(d)).unwrap_or(-1),
            "match" => self.match_hash = text_hash(d.first().map_or("", str_of)),
            "actions" => self.actions_hash = text_hash(d.first().map_or("", str_of)),
            "controller_meter" => self.controller_meter = d.first().map(|a| str_of(a).into()),
            "external_ids" => {
                let mut packed = String::new();
                for (i, (k, v)) in d.pairs().enumerate() {
                    if i > 0 {
                        packed.push(RS);
                    }
                    packed.push_str(str_of(k));
                    packed.push(US);
                    packed.push_str(str_of(v));
                }
                let clean = d
                    .pairs()
                    .all(|(k, v)| !str_of(k).contains([US, RS]) && !str_of(v).contains([US, RS]));
                self.external_ids_packed = packed.into_boxed_str();
                // A map the packing cannot hold exactly is not one northd wrote: the flow
                // counts as foreign (no identity), so the sync replaces it.
                self.id = if clean {
                    self.external_id("hf-flow-id").and_then(FlowId::parse)
                } else {
                    None
                };
            }
            _ => {}
        }
    }

    /// The current datum of a column that update2 sends as a diff (sets and maps).
    fn datum(&self, col: &str) -> Option<Datum> {
        Some(match col {
            "logical_datapath" => opt_uuid_datum(self.logical_datapath),
            "logical_dp_group" => opt_uuid_datum(self.logical_dp_group),
            "controller_meter" => self
                .controller_meter
                .as_ref()
                .map_or_else(Datum::empty, |m| Datum::scalar(Atom::String((&**m).into()))),
            "external_ids" => Datum::map_from_sorted(
                self.external_ids()
                    .map(|(k, _)| Atom::String(k.into()))
                    .collect(),
                self.external_ids()
                    .map(|(_, v)| Atom::String(v.into()))
                    .collect(),
            ),
            _ => return None,
        })
    }

    /// `external_ids`, by key order.
    pub fn external_ids(&self) -> impl Iterator<Item = (&str, &str)> {
        self.external_ids_packed
            .split(RS)
            .filter(|e| !e.is_empty())
            .map(|e| e.split_once(US).unwrap_or((e, "")))
    }

    /// The `external_ids` value of `key`.
    pub fn external_id(&self, key: &str) -> Option<&str> {
        self.external_ids().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

fn flow_changes(
    rows: &HashMap<Uuid, LeanFlow>,
    updates: &Value,
) -> Result<Pending<LeanFlow>, ModelError> {
    const T: &str = "Logical_Flow";
    let obj = updates
        .as_object()
        .ok_or_else(|| upd_err(T, "expected an object of row updates"))?;
    let ts = sb::LogicalFlow::schema();
    let mut out = Vec::with_capacity(obj.len());
    for (uuid_text, u) in obj {
        let uuid = hf_ovsdb::atom::parse_uuid(uuid_text)
            .map_err(|_| upd_err(T, format!("{uuid_text:?} is not a UUID")))?;
        let (kind, body) = one_member(T, uuid_text, u)?;
        match kind {
            "initial" | "insert" | "replace" => {
                let m = body
                    .as_object()
                    .ok_or_else(|| upd_err(T, format!("{kind} must be a row")))?;
                let mut f = LeanFlow::default();
                for (name, v) in m {
                    if let Some((_, d)) = parse_col(ts, T, uuid, name, v)? {
                        f.set(name, &d);
                    }
                }
                out.push((uuid, Some(f)));
            }
            "modify" => {
                let m = body
                    .as_object()
                    .ok_or_else(|| upd_err(T, "modify must be a row diff"))?;
                let mut f = rows.get(&uuid).cloned().ok_or_else(|| ModelError::Row {
                    table: T.into(),
                    uuid,
                    detail: "modify of a row the view lacks".into(),
                })?;
                for (name, v) in m {
                    if let Some((i, diff)) = parse_col(ts, T, uuid, name, v)? {
                        let d = match f.datum(name) {
                            Some(old) => old.apply_diff(&diff, &ts.columns[i].ty),
                            None => diff,
                        };
                        f.set(name, &d);
                    }
                }
                out.push((uuid, Some(f)));
            }
            "delete" => out.push((uuid, None)),
            other => return Err(upd_err(T, format!("unknown row update {other:?}"))),
        }
    }
    Ok(out)
}

fn dp_ref_changes(table: &str, updates: &Value) -> Result<Pending<Uuid>, ModelError> {
    let obj = updates
        .as_object()
        .ok_or_else(|| upd_err(table, "expected an object of row updates"))?;
    let mut out = Vec::new();
    for (uuid_text, u) in obj {
        let uuid = hf_ovsdb::atom::parse_uuid(uuid_text)
            .map_err(|_| upd_err(table, format!("{uuid_text:?} is not a UUID")))?;
        let (kind, body) = one_member(table, uuid_text, u)?;
        if kind == "delete" {
            out.push((uuid, None));
            continue;
        }
        // `datapath` is a scalar reference: a modify carries its new value.
        if let Some(d) = body
            .get("datapath")
            .and_then(|v| v.get(1))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
        {
            out.push((uuid, Some(d)));
        }
    }
    Ok(out)
}

fn mac_changes(
    rows: &HashMap<Uuid, MacBindingRef>,
    updates: &Value,
) -> Result<Pending<MacBindingRef>, ModelError> {
    const T: &str = "MAC_Binding";
    let obj = updates
        .as_object()
        .ok_or_else(|| upd_err(T, "expected an object of row updates"))?;
    let mut out = Vec::new();
    for (uuid_text, u) in obj {
        let uuid = hf_ovsdb::atom::parse_uuid(uuid_text)
            .map_err(|_| upd_err(T, format!("{uuid_text:?} is not a UUID")))?;
        let (kind, body) = one_member(T, uuid_text, u)?;
        if kind == "delete" {
            out.push((uuid, None));
            continue;
        }
        // Both columns are scalars: a modify carries their new values.
        let mut m = if kind == "modify" {
            rows.get(&uuid).copied().unwrap_or_default()
        } else {
            MacBindingRef::default()
        };
        if let Some(d) = body
            .get("datapath")
            .and_then(|v| v.get(1))
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
        {
            m.datapath = d;
        }
        if let Some(t) = body.get("timestamp").and_then(Value::as_i64) {
            m.timestamp = t;
        }
        out.push((uuid, Some(m)));
    }
    Ok(out)
}

/// Every change of one `<table-updates2>`, computed before any is applied (all or nothing).
#[derive(Default)]
struct AllPending {
    sb_global: Pending<sb::SbGlobal>,
    chassis: Pending<sb::Chassis>,
    chassis_private: Pending<sb::ChassisPrivate>,
    datapath_binding: Pending<sb::DatapathBinding>,
    port_binding: Pending<sb::PortBinding>,
    multicast_group: Pending<sb::MulticastGroup>,
    port_group: Pending<sb::PortGroup>,
    address_set: Pending<sb::AddressSet>,
    dns: Pending<sb::Dns>,
    dhcp_options: Pending<sb::DhcpOptions>,
    dhcpv6_options: Pending<sb::Dhcpv6Options>,
    load_balancer: Pending<sb::LoadBalancer>,
    service_monitor: Pending<sb::ServiceMonitor>,
    igmp_group: Pending<sb::IgmpGroup>,
    ha_chassis: Pending<sb::HaChassis>,
    meter: Pending<sb::Meter>,
    chassis_template_var: Pending<sb::ChassisTemplateVar>,
    mirror: Pending<sb::Mirror>,
    ip_multicast: Pending<sb::IpMulticast>,
    bfd: Pending<sb::Bfd>,
    meter_band: Pending<sb::MeterBand>,
    ha_chassis_group: Pending<sb::HaChassisGroup>,
    logical_dp_group: Pending<sb::LogicalDpGroup>,
    logical_flow: Pending<LeanFlow>,
    mac_binding: Pending<MacBindingRef>,
    static_mac_binding: Pending<Uuid>,
}

impl SbView {
    fn pending_of(&self, table: &str, u: &Value, p: &mut AllPending) -> Result<(), ModelError> {
        match table {
            "SB_Global" => p.sb_global.extend(typed_changes(&self.sb_global, u)?),
            "Chassis" => p.chassis.extend(typed_changes(&self.chassis, u)?),
            "Chassis_Private" => p
                .chassis_private
                .extend(typed_changes(&self.chassis_private, u)?),
            "Datapath_Binding" => p
                .datapath_binding
                .extend(typed_changes(&self.datapath_binding, u)?),
            "Port_Binding" => p.port_binding.extend(typed_changes(&self.port_binding, u)?),
            "Multicast_Group" => p
                .multicast_group
                .extend(typed_changes(&self.multicast_group, u)?),
            "Port_Group" => p.port_group.extend(typed_changes(&self.port_group, u)?),
            "Address_Set" => p.address_set.extend(typed_changes(&self.address_set, u)?),
            "DNS" => p.dns.extend(typed_changes(&self.dns, u)?),
            "DHCP_Options" => p.dhcp_options.extend(typed_changes(&self.dhcp_options, u)?),
            "DHCPv6_Options" => p
                .dhcpv6_options
                .extend(typed_changes(&self.dhcpv6_options, u)?),
            "Load_Balancer" => p
                .load_balancer
                .extend(typed_changes(&self.load_balancer, u)?),
            "Service_Monitor" => p
                .service_monitor
                .extend(typed_changes(&self.service_monitor, u)?),
            "IGMP_Group" => p.igmp_group.extend(typed_changes(&self.igmp_group, u)?),
            "HA_Chassis" => p.ha_chassis.extend(typed_changes(&self.ha_chassis, u)?),
            "Meter" => p.meter.extend(typed_changes(&self.meter, u)?),
            "Mirror" => p.mirror.extend(typed_changes(&self.mirror, u)?),
            "IP_Multicast" => p.ip_multicast.extend(typed_changes(&self.ip_multicast, u)?),
            "BFD" => p.bfd.extend(typed_changes(&self.bfd, u)?),
            "Chassis_Template_Var" => p
                .chassis_template_var
                .extend(typed_changes(&self.chassis_template_var, u)?),
            "Meter_Band" => p.meter_band.extend(typed_changes(&self.meter_band, u)?),
            "HA_Chassis_Group" => p
                .ha_chassis_group
                .extend(typed_changes(&self.ha_chassis_group, u)?),
            "Logical_DP_Group" => p
                .logical_dp_group
                .extend(typed_changes(&self.logical_dp_group, u)?),
            "Logical_Flow" => p.logical_flow.extend(flow_changes(&self.logical_flow, u)?),
            "MAC_Binding" => p.mac_binding.extend(mac_changes(&self.mac_binding, u)?),
            "Static_MAC_Binding" => p.static_mac_binding.extend(dp_ref_changes(table, u)?),
            _ => {}
        }
        Ok(())
    }

    fn apply_all(&mut self, p: AllPending) -> SbChanges {
        let mut c = SbChanges::default();
        // A controller's status write is not northd's row changing.
        let status_only = |old: &sb::ServiceMonitor, new: &sb::ServiceMonitor| {
            let mut o = old.clone();
            o.status = new.status.clone();
            o == *new
        };
        let controller_only = |old: &sb::PortBinding, new: &sb::PortBinding| {
            let mut o = old.clone();
            o.chassis = new.chassis;
            o.up = new.up;
            o.additional_chassis = new.additional_chassis.clone();
            o == *new
        };
        c.northd_rows = !p.sb_global.is_empty()
            || !p.datapath_binding.is_empty()
            || p.port_binding
                .iter()
                .any(|(u, r)| match (self.port_binding.get(u), r) {
                    (Some(old), Some(new)) => !controller_only(old, new),
                    _ => true,
                })
            || !p.multicast_group.is_empty()
            || !p.port_group.is_empty()
            || !p.address_set.is_empty()
            || !p.load_balancer.is_empty()
            || p.service_monitor
                .iter()
                .any(|(u, r)| match (self.service_monitor.get(u), r) {
                    (Some(old), Some(new)) => !status_only(old, new),
                    _ => true,
                })
            || !p.dhcp_options.is_empty()
            || !p.dhcpv6_options.is_empty()
            || !p.dns.is_empty()
            || !p.ha_chassis.is_empty()
            || !p.meter.is_empty()
            || !p.chassis_template_var.is_empty()
            || !p.mirror.is_empty()
            || !p.ip_multicast.is_empty()
            || !p.bfd.is_empty()
            || !p.meter_band.is_empty()
            || !p.ha_chassis_group.is_empty()
            || !p.logical_dp_group.is_empty()
            || !p.logical_flow.is_empty()
            || !p.static_mac_binding.is_empty();
        if c.northd_rows {
            c.northd_uuids.extend(ids_of(&p.sb_global));
            c.northd_uuids.extend(ids_of(&p.datapath_binding));
            c.northd_uuids.extend(ids_of(&p.port_binding));
            c.northd_uuids.extend(ids_of(&p.multicast_group));
            c.northd_uuids.extend(ids_of(&p.port_group));
            c.northd_uuids.extend(ids_of(&p.address_set));
            c.northd_uuids.extend(ids_of(&p.load_balancer));
            c.northd_uuids.extend(ids_of(&p.service_monitor));
            c.northd_uuids.extend(ids_of(&p.dhcp_options));
            c.northd_uuids.extend(ids_of(&p.dhcpv6_options));
            c.northd_uuids.extend(ids_of(&p.dns));
            c.northd_uuids.extend(ids_of(&p.ha_chassis_group));
            c.northd_uuids.extend(ids_of(&p.meter));
            c.northd_uuids.extend(ids_of(&p.chassis_template_var));
            c.northd_uuids.extend(ids_of(&p.mirror));
            c.northd_uuids.extend(ids_of(&p.ip_multicast));
            c.northd_uuids.extend(ids_of(&p.bfd));
            c.northd_uuids.extend(ids_of(&p.logical_flow));
            c.northd_uuids.extend(ids_of(&p.static_mac_binding));
        }
        let mut note = |t: &'static str, n: usize| {
            if n > 0 {
                c.tables.insert(t);
                c.rows += n;
            }
        };
        note("SB_Global", apply_pending(&mut self.sb_global, p.sb_global));
        note("Chassis", apply_pending(&mut self.chassis, p.chassis));
        note(
            "Chassis_Private",
            apply_pending(&mut self.chassis_private, p.chassis_private),
        );
        note(
            "Datapath_Binding",
            apply_pending(&mut self.datapath_binding, p.datapath_binding),
        );
        let mut names = BTreeSet::new();
        let n = self.apply_port_bindings(p.port_binding, &mut names);
        note("Port_Binding", n);
        note(
            "Multicast_Group",
            apply_pending(&mut self.multicast_group, p.multicast_group),
        );
        note(
            "Port_Group",
            apply_pending(&mut self.port_group, p.port_group),
        );
        note(
            "Address_Set",
            apply_pending(&mut self.address_set, p.address_set),
        );
        note("DNS", apply_pending(&mut self.dns, p.dns));
        note(
            "DHCP_Options",
            apply_pending(&mut self.dhcp_options, p.dhcp_options),
        );
        note(
            "DHCPv6_Options",
            apply_pending(&mut self.dhcpv6_options, p.dhcpv6_options),
        );
        note(
            "Load_Balancer",
            apply_pending(&mut self.load_balancer, p.load_balancer),
        );
        note(
            "Service_Monitor",
            apply_pending(&mut self.service_monitor, p.service_monitor),
        );
        note(
            "IGMP_Group",
            apply_pending(&mut self.igmp_group, p.igmp_group),
        );
        note(
            "HA_Chassis",
            apply_pending(&mut self.ha_chassis, p.ha_chassis),
        );
        note(
            "HA_Chassis_Group",
            apply_pending(&mut self.ha_chassis_group, p.ha_chassis_group),
        );
        note("Meter", apply_pending(&mut self.meter, p.meter));
        note("Mirror", apply_pending(&mut self.mirror, p.mirror));
        note(
            "IP_Multicast",
            apply_pending(&mut self.ip_multicast, p.ip_multicast),
        );
        note("BFD", apply_pending(&mut self.bfd, p.bfd));
        note(
            "Chassis_Template_Var",
            apply_pending(&mut self.chassis_template_var, p.chassis_template_var),
        );
        note(
            "Meter_Band",
            apply_pending(&mut self.meter_band, p.meter_band),
        );
        note(
            "Logical_DP_Group",
            apply_pending(&mut self.logical_dp_group, p.logical_dp_group),
        );
        note("Logical_Flow", self.apply_flows(p.logical_flow));
        c.port_names = names;
        note(
            "MAC_Binding",
            apply_hash(&mut self.mac_binding, p.mac_binding),
        );
        note(
            "Static_MAC_Binding",
            apply_hash(&mut self.static_mac_binding, p.static_mac_binding),
        );
        c
    }

    fn uuids_of(&self, table: &str) -> Vec<Uuid> {
        fn k<R>(m: &BTreeMap<Uuid, R>) -> Vec<Uuid> {
            m.keys().copied().collect()
        }
        match table {
            "SB_Global" => k(&self.sb_global),
            "Chassis" => k(&self.chassis),
            "Chassis_Private" => k(&self.chassis_private),
            "Datapath_Binding" => k(&self.datapath_binding),
            "Port_Binding" => k(&self.port_binding),
            "Multicast_Group" => k(&self.multicast_group),
            "Port_Group" => k(&self.port_group),
            "Address_Set" => k(&self.address_set),
            "DNS" => k(&self.dns),
            "DHCP_Options" => k(&self.dhcp_options),
            "DHCPv6_Options" => k(&self.dhcpv6_options),
            "Load_Balancer" => k(&self.load_balancer),
            "Service_Monitor" => k(&self.service_monitor),
            "IGMP_Group" => k(&self.igmp_group),
            "HA_Chassis" => k(&self.ha_chassis),
            "Meter" => k(&self.meter),
            "Chassis_Template_Var" => k(&self.chassis_template_var),
            "Mirror" => k(&self.mirror),
            "IP_Multicast" => k(&self.ip_multicast),
            "BFD" => k(&self.bfd),
            "Meter_Band" => k(&self.meter_band),
            "HA_Chassis_Group" => k(&self.ha_chassis_group),
            "Logical_DP_Group" => k(&self.logical_dp_group),
            "Logical_Flow" => self.logical_flow.keys().copied().collect(),
            "MAC_Binding" => self.mac_binding.keys().copied().collect(),
            "Static_MAC_Binding" => self.static_mac_binding.keys().copied().collect(),
            _ => Vec::new(),
        }
    }
}

fn apply_hash<R>(rows: &mut HashMap<Uuid, R>, p: Pending<R>) -> usize {
    let n = p.len();
    for (u, r) in p {
        match r {
            Some(r) => {
                rows.insert(u, r);
            }
            None => {
                rows.remove(&u);
            }
        }
    }
    n
}

impl Model for SbView {
    type Delta = SbChanges;
    const DATABASE: &'static str = "OVN_Southbound";

    fn apply_updates2(&mut self, updates: &Value) -> Result<SbChanges, ModelError> {
        let obj = updates.as_object().ok_or_else(|| ModelError::Update {
            at: None,
            detail: "expected an object of tables".into(),
        })?;
        let mut p = AllPending::default();
        for (t, u) in obj {
            self.pending_of(t, u, &mut p)?;
        }
        Ok(self.apply_all(p))
    }

    fn load_updates2(&mut self, updates: Value) -> Result<usize, ModelError> {
        let Value::Object(obj) = updates else {
            return Err(ModelError::Update {
                at: None,
                detail: "expected an object of tables".into(),
            });
        };
        // Table by table, freeing each table's JSON once it is applied.
        let mut n = 0;
        for (t, u) in obj {
            let mut p = AllPending::default();
            self.pending_of(&t, &u, &mut p)?;
            drop(u);
            n += self.apply_all(p).rows;
        }
        // (The first sync's changes are not reported; the consumer recompiles after it.)
        Ok(n)
    }

    fn apply_updates2_batches(&mut self, feed: &mut Feed<'_>) -> Result<SbChanges, FeedError> {
        // Typed batch by batch: a large update (northd's own flows coming back) never
        // exists as one JSON tree.
        let mut p = AllPending::default();
        feed(&mut |t, rows| self.pending_of(t, &Value::Object(rows), &mut p))?;
        Ok(self.apply_all(p))
    }

    fn delta_len(delta: &SbChanges) -> usize {
        delta.rows
    }

    fn row_count(&self) -> usize {
        self.len()
    }

    fn updates_to(
        &self,
        rows: &Map<String, Value>,
        complete: &[String],
    ) -> Result<Value, ModelError> {
        // Rows given in full replace what the view holds (the view's own `replace` member:
        // comparing a full row with a lean one is what the sync does, not the replica);
        // `null` deletes; rows of complete tables the server did not send are deleted.
        let mut out = Map::new();
        for (t, _) in TABLES {
            let given = rows.get(*t).and_then(Value::as_object);
            let mut tu = Map::new();
            if let Some(given) = given {
                for (u, r) in given {
                    if r.is_null() {
                        tu.insert(u.clone(), json!({"delete": null}));
                    } else {
                        tu.insert(u.clone(), json!({ "replace": r }));
                    }
                }
            }
            if complete.iter().any(|c| c == t) {
                for u in self.uuids_of(t) {
                    let s = u.to_string();
                    if !given.is_some_and(|g| g.contains_key(&s)) {
                        tu.insert(s, json!({"delete": null}));
                    }
                }
            }
            // A delete of a row the view lacks is dropped (typed_changes would accept it).
            if !tu.is_empty() {
                out.insert((*t).to_string(), Value::Object(tu));
            }
        }
        Ok(Value::Object(out))
    }

    fn table_names() -> Vec<&'static str> {
        TABLES.iter().map(|(t, _)| *t).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_follow_update2_diffs() {
        let mut v = SbView::default();
        let u = "11111111-1111-1111-1111-111111111111";
        let dp = "22222222-2222-2222-2222-222222222222";
        v.apply_updates2(&json!({"Logical_Flow": {u: {"insert": {
            "logical_datapath": ["uuid", dp], "pipeline": "egress", "table_id": 3,
            "priority": 100, "match": "ip4", "actions": "next;",
            "external_ids": ["map", [["hf-flow-id", "00000000000000ab"], ["stage-name", "x"]]]}}}}))
            .unwrap();
        let f = &v.logical_flow[&u.parse().unwrap()];
        assert_eq!(f.id, Some(FlowId(0xab)));
        assert!(f.egress);
        assert_eq!(f.match_hash, text_hash("ip4"));
        // A map diff: stage-name changes, stage-hint is added, the id stays.
        let c = v
            .apply_updates2(&json!({"Logical_Flow": {u: {"modify": {
                "match": "ip6",
                "external_ids": ["map", [["stage-name", "y"], ["stage-hint", "abc"]]],
                "logical_datapath": ["uuid", dp]}}}}))
            .unwrap();
        assert_eq!(c.rows, 1);
        let f = &v.logical_flow[&u.parse().unwrap()];
        assert_eq!(f.match_hash, text_hash("ip6"));
        assert_eq!(f.external_id("stage-name"), Some("y"));
        assert_eq!(f.external_id("stage-hint"), Some("abc"));
        assert_eq!(f.id, Some(FlowId(0xab)));
        // An optional column's diff is its new value (OVS's ovsdb_datum_diff).
        assert_eq!(f.logical_datapath, Some(dp.parse().unwrap()));
        v.apply_updates2(
            &json!({"Logical_Flow": {u: {"modify": {"logical_datapath": ["set", []]}}}}),
        )
        .unwrap();
        assert_eq!(v.logical_flow[&u.parse().unwrap()].logical_datapath, None);
        // An error leaves the view unchanged (all or nothing).
        let before = v.logical_flow.clone();
        assert!(
            v.apply_updates2(&json!({"Logical_Flow": {u: {"delete": null}},
                "Port_Binding": {"33333333-3333-3333-3333-333333333333": {"modify": {}}}}))
                .is_err()
        );
        assert_eq!(v.logical_flow, before);
    }

    #[test]
    fn batches_apply_like_one_tree_and_all_or_nothing() {
        let dp = "22222222-2222-2222-2222-222222222222";
        let mut flows = Map::new();
        for i in 0..7 {
            flows.insert(
                format!("11111111-1111-1111-1111-{i:012}"),
                json!({"insert": {"logical_datapath": ["uuid", dp], "pipeline": "ingress",
                    "table_id": i, "priority": 10 * i, "match": format!("reg0 == {i}"),
                    "actions": "next;"}}),
            );
        }
        let mut dps = Map::new();
        dps.insert(dp.into(), json!({"insert": {"tunnel_key": 5}}));
        let tree = json!({"Logical_Flow": flows.clone(), "Datapath_Binding": dps.clone()});
        let mut a = SbView::default();
        let ca = a.apply_updates2(&tree).unwrap();
        // The same update as batches of three rows.
        let batches = |extra: Option<(&str, Map<String, Value>)>| {
            let mut out: Vec<(String, Map<String, Value>)> = Vec::new();
            let rows: Vec<_> = flows.clone().into_iter().collect();
            for c in rows.chunks(3) {
                out.push(("Logical_Flow".into(), c.iter().cloned().collect()));
            }
            out.push(("Datapath_Binding".into(), dps.clone()));
            if let Some((t, m)) = extra {
                out.push((t.into(), m));
            }
            out
        };
        let mut b = SbView::default();
        let all = batches(None);
        let cb = b
            .apply_updates2_batches(&mut |sink| {
                for (t, m) in all.clone() {
                    sink(&t, m).map_err(FeedError::Model)?;
                }
                Ok(8)
            })
            .unwrap();
        assert_eq!(a.logical_flow, b.logical_flow);
        assert_eq!(a.datapath_binding, b.datapath_binding);
        assert_eq!(b.logical_flow.len(), 7);
        assert_eq!(ca.rows, cb.rows);
        // A bad row in the last batch: nothing of the earlier batches is applied.
        let mut bad = Map::new();
        bad.insert(
            "33333333-3333-3333-3333-333333333333".into(),
            json!({"modify": {}}),
        );
        let all = batches(Some(("Port_Binding", bad)));
        let mut c = SbView::default();
        let r = c.apply_updates2_batches(&mut |sink| {
            for (t, m) in all.clone() {
                sink(&t, m).map_err(FeedError::Model)?;
            }
            Ok(9)
        });
        assert!(r.is_err());
        assert!(c.logical_flow.is_empty() && c.datapath_binding.is_empty());
    }
}
