//! SB snapshot + chassis → [`ProgramSpec`]: the translation every holdfast chassis (and
//! `holdfast trace`) runs.
//!
//! # What it does
//!
//! - `Datapath_Binding` → one [`DatapathSpec`] each, ordered by tunnel key: a switch when
//!   `external_ids:logical-switch` is set, a router when `external_ids:logical-router` is;
//!   named by `external_ids:name` (else the UUID).
//! - `Port_Binding` of every type real northd 23.03 writes → [`hf_pipeline::PortSpec`]s whose location,
//!   residency, extra chassis and activation state follow ovn-controller's `binding.c` and
//!   `physical.c` (see [`ports`]). Without a chassis every port is resident, as in ovn-trace.
//! - `Multicast_Group` → [`hf_pipeline::GroupSpec`]s; `Address_Set` and `Port_Group` → the program's sets
//!   (SB port groups are per datapath in 23.03, `<datapath key>_<name>`; see [`sets`]).
//! - `Logical_Flow` (with `Logical_DP_Group`: compiled for every member datapath) → flows
//!   with their identity (`external_ids:hf-flow-id`, else pipeline + stage name + priority +
//!   match, never a UUID or the `stage-hint`: [`flows::flow_identity`], `docs/flow-identity.md`),
//!   stage name, SB UUID and stage hint. Text that does not parse stays in the program as a
//!   flow with a parse error, which compilation reports per flow.
//! - `MAC_Binding` and `Static_MAC_Binding` → neighbours; `FDB` → the program's FDB;
//!   `Load_Balancer` VIPs → the program's per-datapath VIPs (for `ct_snat_to_vip`);
//!   `Chassis`/`Encap` → the chassis table ([`ChassisEntry`]); `DNS` → the per-datapath
//!   records `dns_lookup()` answers from (see [`dns`]).
//! - Conntrack zones by stable name (`lsp/<port>` for switch ports, `lr/<router>/dnat` and
//!   `lr/<router>/snat`, and `ls/<switch>/snat` for `ct_snat_to_vip`), never zone 0,
//!   deterministic; existing assignments given in
//!   [`Extra::zones`] are kept (see [`zones`]).
//!
//! A row that does not translate (bad key, unknown reference, unparsable address) is left out
//! with a [`Diagnostic`] naming table, UUID and reason; the rest translates.
//!
//! # What it does not do
//!
//! No I/O. It does not claim ports: a VIF counts as bound where `Port_Binding.chassis` says,
//! or, while nothing has claimed it, where `requested_chassis` asks (the controller that would
//! claim it). Load balancers' backends need nothing here (23.03's flows carry them inline).
//! Chassis template variables (`^name`) are substituted with the chassis's
//! `Chassis_Template_Var` values; without a chassis, or for a name the chassis does not
//! define, they stay and the flow is a per-flow error (ovn-controller skips such flows too).

pub mod cache;
pub mod dns;
pub mod flows;
pub mod incremental;
pub mod par;
pub mod ports;
pub mod sets;
#[cfg(test)]
pub(crate) mod test_rng;
pub mod zones;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use hf_model::SbSnapshot;
use hf_model::sb;
use hf_pipeline::{DatapathKind, DatapathSpec, ProgramSpec};
use uuid::Uuid;

/// What to translate for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TranslateOptions {
    /// The chassis we translate for; `None` = every port resident (ovn-trace's default).
    pub chassis: Option<String>,
}

/// Further inputs of [`translate_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extra {
    /// Translate only the datapaths the chassis needs ([`needed_datapaths`]), as
    /// ovn-controller installs only those. Ignored without a chassis.
    pub only_needed: bool,
    /// Zone assignments to keep (name → zone), e.g. the datapath's zone map.
    pub zones: BTreeMap<String, u16>,
    /// Local port ids to keep (logical port → id), e.g. the previous translation's
    /// [`Translation::local_ports`]: a port keeps its id, a new port takes the lowest id no
    /// entry names, so one port added or removed changes no other port's id (see
    /// [`ports::assign_local`]). Empty: 1.. in name order.
    pub local_ids: BTreeMap<String, u32>,
    /// The chassis whose BFD sessions with this one are up, while BFD runs: a
    /// `chassisredirect` port's gateway is then the first live one by priority
    /// ([`ports::ha_live_top`]); `None`: the claimed (or highest-priority) gateway.
    pub ha_up: Option<BTreeSet<String>>,
}

/// A row that did not translate, or translated with a caveat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The SB table.
    pub table: &'static str,
    /// The row.
    pub uuid: Uuid,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} row {}: {}", self.table, self.uuid, self.reason)
    }
}

/// One chassis, numbered for [`hf_pipeline::PortLocation::Remote`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChassisEntry {
    /// The number used in `PortLocation::Remote { chassis }` (1-based, by name order).
    pub id: u32,
    /// `Chassis.name`.
    pub name: String,
    /// `Chassis.hostname`.
    pub hostname: String,
    /// The preferred encapsulation's type (`geneve` first, then `stt`, `vxlan`), or empty.
    pub encap_type: String,
    /// Its IP, or empty.
    pub ip: String,
    /// Every encapsulation as (type, IP).
    pub encaps: Vec<(String, String)>,
}

/// The result of [`translate`].
#[derive(Debug, Clone, Default)]
pub struct Translation {
    /// The program description.
    pub spec: ProgramSpec,
    /// Per-row diagnostics (a row that does not translate: table, uuid, reason).
    pub diagnostics: Vec<Diagnostic>,
    /// Chassis table: name → numeric id used in PortLocation::Remote + encap type/IP.
    pub chassis: Vec<ChassisEntry>,
    /// Local port ids given to the ports bound here (logical port name → id in
    /// [`hf_pipeline::PortLocation::Local`]): those of [`Extra::local_ids`] kept, the others
    /// the lowest free ones in name order.
    pub local_ports: BTreeMap<String, u32>,
    /// Conntrack zones by stable name.
    pub zones: BTreeMap<String, u16>,
    /// SB datapath UUID → index in `spec.datapaths`.
    pub datapath_index: BTreeMap<Uuid, usize>,
    /// Local ports in a live migration.
    pub migrations: Vec<ports::MigrationSpec>,
    /// What may differ from the previous translation of the same translator
    /// ([`Incremental`]); `None` = unknown (compare everything), as from [`translate_with`].
    pub touched: Option<Touched>,
    /// Datapaths of `touched` whose only difference is the numbering of their local ports
    /// ([`hf_pipeline::PortLocation::Local`] ids: without [`Extra::local_ids`] holding the
    /// previous ids, a local port added or removed elsewhere renumbers the ones after it). A program message names local ports, so it is the same
    /// for them ([`crate::program_msg::program_msg_reusing`] reuses them).
    pub renumbered: BTreeSet<String>,
    /// How the flows of each datapath of `touched` changed, when known (from an
    /// [`Incremental`] step; `None` from a full translation): a touched datapath not in the
    /// map has the previous translation's flows, one in it those minus
    /// [`FlowEdit::removed`] plus the flows at [`FlowEdit::added`]. A program message edits
    /// its previous datapath messages by them ([`crate::program_msg::program_msg_reusing`]).
    pub flow_edits: Option<BTreeMap<String, FlowEdit>>,
}

/// What may differ between a translation and the previous one ([`Translation::touched`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    /// Datapath names whose ports, groups or flows may differ from the previous translation
    /// (including datapaths added or removed).
    pub datapaths: BTreeSet<String>,
    /// Which parts outside datapaths may differ.
    pub rest: Rest,
}

/// The parts of a translation outside its datapaths, each of which may differ
/// ([`Touched::rest`]). Local port ids are not among them: they appear only in the ports of
/// datapaths (a datapath whose ports' ids changed is in [`Touched::datapaths`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rest {
    /// Address sets and port groups.
    pub sets: bool,
    /// The chassis table.
    pub chassis: bool,
    /// Neighbours and the FDB.
    pub neighbours: bool,
    /// Load balancer VIPs.
    pub lb_vips: bool,
    /// DNS records.
    pub dns: bool,
    /// The zone map and the switches' SNAT zones.
    pub zones: bool,
    /// Local ports in a live migration.
    pub migrations: bool,
}

impl Rest {
    /// Every part.
    pub const ALL: Rest = Rest {
        sets: true,
        chassis: true,
        neighbours: true,
        lb_vips: true,
        dns: true,
        zones: true,
        migrations: true,
    };

    /// Whether any part may differ.
    pub fn any(&self) -> bool {
        *self != Rest::default()
    }
}

impl std::ops::BitOrAssign for Rest {
    fn bitor_assign(&mut self, o: Rest) {
        self.sets |= o.sets;
        self.chassis |= o.chassis;
        self.neighbours |= o.neighbours;
        self.lb_vips |= o.lb_vips;
        self.dns |= o.dns;
        self.zones |= o.zones;
        self.migrations |= o.migrations;
    }
}

impl Translation {
    /// The chassis entry named `name`.
    pub fn chassis_by_name(&self, name: &str) -> Option<&ChassisEntry> {
        self.chassis.iter().find(|c| c.name == name)
    }
}

/// Translates `sb` for `opts.chassis` (every datapath; fresh zones).
pub fn translate(sb: &SbSnapshot, opts: &TranslateOptions) -> Translation {
    translate_with(sb, opts, &Extra::default())
}

/// Translates `sb` for `opts.chassis` with the further inputs in `extra`.
pub fn translate_with(sb: &SbSnapshot, opts: &TranslateOptions, extra: &Extra) -> Translation {
    translate_inner(sb, opts, extra, None)
}

/// [`translate_with`] on up to `par` threads (per datapath, per flow row): the same result,
/// exactly, whatever the number of threads.
pub fn translate_par(
    sb: &SbSnapshot,
    opts: &TranslateOptions,
    extra: &Extra,
    par: Parallelism,
) -> Translation {
    translate_marked(sb, opts, extra, None, par, &mut Vec::new())
}

/// [`translate_with`] keeping what it can between calls in `cache` (see [`cache`]): the same
/// result, exactly, without parsing again the `Logical_Flow` rows that did not change. It uses
/// the cache's threads ([`TranslateCache::set_parallelism`]).
pub fn translate_cached(
    sb: &SbSnapshot,
    opts: &TranslateOptions,
    extra: &Extra,
    cache: &mut TranslateCache,
) -> Translation {
    translate_inner(sb, opts, extra, Some(cache))
}

pub use cache::TranslateCache;
pub use incremental::FlowEdit;
pub use incremental::Incremental;
pub use par::Parallelism;

fn translate_inner(
    sb: &SbSnapshot,
    opts: &TranslateOptions,
    extra: &Extra,
    cache: Option<&mut TranslateCache>,
) -> Translation {
    let par = cache.as_ref().map_or(Parallelism::SEQUENTIAL, |c| c.par);
    translate_marked(sb, opts, extra, cache, par, &mut Vec::new())
}

/// [`translate_inner`], noting in `marks` where each section's diagnostics end (datapaths,
/// ports, groups, sets, flows, neighbours and FDB, load balancers, DNS; zones run to the end).
pub(crate) fn translate_marked(
    sb: &SbSnapshot,
    opts: &TranslateOptions,
    extra: &Extra,
    cache: Option<&mut TranslateCache>,
    par: Parallelism,
    marks: &mut Vec<usize>,
) -> Translation {
    let mut t = Translation {
        chassis: chassis_table(sb),
        ..Translation::default()
    };
    let chassis = opts.chassis.as_deref();
    if let Some(c) = chassis
        && t.chassis_by_name(c).is_none()
    {
        t.diagnostics.push(Diagnostic {
            table: "Chassis",
            uuid: Uuid::nil(),
            reason: format!("chassis {c} is not in the Chassis table: no port is bound to it"),
        });
    }
    let wanted: Option<BTreeSet<Uuid>> = match chassis {
        Some(c) if extra.only_needed => Some(needed_datapaths(sb, c)),
        _ => None,
    };
    // Datapaths, by tunnel key.
    let mut dps: Vec<&sb::DatapathBinding> = sb
        .datapath_binding()
        .values()
        .filter(|d| wanted.as_ref().is_none_or(|w| w.contains(&d.uuid)))
        .collect();
    dps.sort_by_key(|d| (d.tunnel_key, d.uuid));
    let mut keys_seen: BTreeMap<i64, Uuid> = BTreeMap::new();
    for d in dps {
        let diag = |reason: String| Diagnostic {
            table: "Datapath_Binding",
            uuid: d.uuid,
            reason,
        };
        if !(1..=(1 << 24) - 1).contains(&d.tunnel_key) {
            t.diagnostics.push(diag(format!(
                "tunnel_key {} is outside Geneve's 24-bit range 1..=16777215",
                d.tunnel_key
            )));
            continue;
        }
        if let Some(other) = keys_seen.insert(d.tunnel_key, d.uuid) {
            t.diagnostics.push(diag(format!(
                "tunnel_key {} is also used by datapath {other}",
                d.tunnel_key
            )));
            continue;
        }
        let name = datapath_name(d);
        let kind = if d.external_ids.contains_key("logical-router") {
            DatapathKind::Router {
                dnat_zone: 0,
                snat_zone: 0,
            }
        } else if d.external_ids.contains_key("logical-switch") {
            DatapathKind::Switch
        } else {
            t.diagnostics.push(diag(
                "neither external_ids:logical-switch nor external_ids:logical-router is set".into(),
            ));
            continue;
        };
        t.datapath_index.insert(d.uuid, t.spec.datapaths.len());
        t.spec.datapaths.push(DatapathSpec {
            name,
            tunnel_key: d.tunnel_key as u32,
            kind,
            ports: Vec::new(),
            groups: Vec::new(),
            flows: Vec::new(),
        });
    }
    marks.push(t.diagnostics.len());
    ports::translate_ports(
        sb,
        chassis,
        extra.ha_up.as_ref(),
        &extra.local_ids,
        &mut t,
        marks,
        par,
    );
    sets::translate_sets(sb, &mut t);
    marks.push(t.diagnostics.len());
    flows::translate_flows(sb, chassis, &mut t, cache.map(|c| &mut c.flows), par);
    marks.push(t.diagnostics.len());
    flows::translate_neighbours(sb, &mut t);
    marks.push(t.diagnostics.len());
    flows::translate_lbs(sb, chassis, &mut t);
    marks.push(t.diagnostics.len());
    dns::translate_dns(sb, &mut t);
    marks.push(t.diagnostics.len());
    let requested = zones::requested(sb, &mut t);
    zones::assign(&mut t, &requested, &extra.zones);
    t.spec.owner = hf_conntrack::Owner(1);
    t
}

/// The name of a datapath: `external_ids:name`, else its UUID.
pub fn datapath_name(d: &sb::DatapathBinding) -> String {
    d.external_ids
        .get("name")
        .cloned()
        .unwrap_or_else(|| d.uuid.to_string())
}

fn chassis_table(sb: &SbSnapshot) -> Vec<ChassisEntry> {
    let mut rows: Vec<&sb::Chassis> = sb.chassis().values().collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.uuid.cmp(&b.uuid)));
    rows.dedup_by(|a, b| a.name == b.name);
    rows.iter()
        .enumerate()
        .map(|(i, c)| {
            let mut encaps: Vec<(String, String)> = c
                .encaps
                .iter()
                .filter_map(|e| sb.get(*e))
                .map(|e| (e.type_.as_str().to_string(), e.ip.clone()))
                .collect();
            let rank = |t: &str| match t {
                "geneve" => 0,
                "stt" => 1,
                "vxlan" => 2,
                _ => 3,
            };
            encaps.sort_by(|a, b| rank(&a.0).cmp(&rank(&b.0)).then(a.cmp(b)));
            let (encap_type, ip) = encaps.first().cloned().unwrap_or_default();
            ChassisEntry {
                id: i as u32 + 1,
                name: c.name.clone(),
                hostname: c.hostname.clone(),
                encap_type,
                ip,
                encaps,
            }
        })
        .collect()
}

/// Datapaths (SB Datapath_Binding UUIDs) a chassis needs: its local ports' datapaths and what
/// patch ports reach from them (transitively).
pub fn needed_datapaths(sb: &SbSnapshot, chassis: &str) -> BTreeSet<Uuid> {
    let Some(ch) = sb.chassis_by_name(chassis).map(|c| c.uuid) else {
        return BTreeSet::new();
    };
    let mut start = BTreeSet::new();
    for pb in sb.port_binding().values() {
        if ports::bound_on(sb, pb, ch, chassis) {
            start.insert(pb.datapath.uuid());
        }
    }
    needed_from(sb, chassis, start)
}

/// The datapaths reached from `start` (datapaths with ports bound to `chassis`).
pub(crate) fn needed_from(sb: &SbSnapshot, chassis: &str, start: BTreeSet<Uuid>) -> BTreeSet<Uuid> {
    let mut out = BTreeSet::new();
    for d in start {
        if out.contains(&d) {
            continue;
        }
        out.extend(walk(sb, d, Some(chassis)));
    }
    out
}

/// Datapaths reachable from one datapath through patch ports (for trace's widening fetch).
/// `l3gateway` ports count as patch ports (ovn-trace's view: every port resident).
pub fn reachable_datapaths(sb: &SbSnapshot, from: Uuid) -> BTreeSet<Uuid> {
    walk(sb, from, None)
}

/// Breadth-first over patch (and, where resident, l3gateway) peers.
fn walk(sb: &SbSnapshot, from: Uuid, chassis: Option<&str>) -> BTreeSet<Uuid> {
    let mut seen = BTreeSet::new();
    let mut q = VecDeque::new();
    if sb.datapath_binding().contains_key(&from) {
        seen.insert(from);
        q.push_back(from);
    }
    while let Some(d) = q.pop_front() {
        for pb in sb.port_binding_all_by_datapath(d.into()) {
            let crosses = match pb.type_.as_str() {
                "patch" => true,
                "l3gateway" => chassis.is_none_or(|c| {
                    pb.options.get("l3gateway-chassis").map(String::as_str) == Some(c)
                }),
                _ => false,
            };
            if !crosses {
                continue;
            }
            let Some(peer) = pb.options.get("peer") else {
                continue;
            };
            for p in sb.port_binding_all_by_logical_port(peer) {
                let pd = p.datapath.uuid();
                if sb.datapath_binding().contains_key(&pd) && seen.insert(pd) {
                    q.push_back(pd);
                }
            }
        }
    }
    seen
}
