//! Programs: the typed input ([`ProgramSpec`]) and its compiled form ([`Program`]).
//!
//! Compilation normalises every match with hf-expr (address sets and port groups resolved
//! through [`Sets`]), resolves port names to keys and fields to bit ranges, and builds one
//! [`Classifier`] per (datapath, pipeline, table). Actions become [`CAct`]s in one arena so that
//! cached action lists can point at them by index. This module holds the types; compiling is
//! in `compile.rs` (programs, datapaths) and `act_compile.rs` (one flow's rules and actions).

use std::fmt;
use std::net::IpAddr;
use std::ops::Range;
use std::sync::Arc;

use hf_conntrack::{Masked, NatRange, Owner};
use hf_expr::actions::{NatKind, NestedKind, Pipeline};
use hf_expr::{Action, Expr, Sets, SymbolTable};

use crate::classifier::{Classifier, FastMap};
use crate::packet::Bits;

/// Where a logical port lives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PortLocation {
    /// Bound on this chassis to the datapath's port with this id (a VIF or a localnet port).
    Local(u32),
    /// Bound on another chassis, reached through a Geneve tunnel.
    Remote {
        /// The remote chassis (the caller's numbering).
        chassis: u32,
    },
    /// A patch port: its peer is the named port of another datapath (switch ↔ router).
    Patch {
        /// The peer port's name.
        peer: String,
    },
    /// Not bound anywhere: output to it drops.
    #[default]
    Unbound,
    /// A `chassisredirect` port resident on this chassis: output to it continues in the egress
    /// pipeline with `outport` set to the named distributed gateway port of the same datapath
    /// (OVN's physical table 38 for local `chassisredirect` ports).
    Redirect {
        /// The distributed gateway port (`options:distributed-port`).
        port: String,
    },
}

/// What a logical port is (`Port_Binding.type`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PortKind {
    /// A VIF (`""`).
    #[default]
    Vif,
    /// `patch`.
    Patch,
    /// `l3gateway`.
    L3Gateway,
    /// `chassisredirect`.
    ChassisRedirect,
    /// `localnet`.
    Localnet,
    /// `localport`.
    Localport,
    /// `virtual`.
    Virtual,
    /// `external`.
    External,
    /// `l2gateway`.
    L2Gateway,
    /// `vtep`.
    Vtep,
    /// `remote` (OVN interconnection).
    Remote,
    /// Anything else, as written.
    Other(String),
}

impl PortKind {
    /// The kind named by `Port_Binding.type`.
    pub fn from_sb(t: &str) -> PortKind {
        match t {
            "" => PortKind::Vif,
            "patch" => PortKind::Patch,
            "l3gateway" => PortKind::L3Gateway,
            "chassisredirect" => PortKind::ChassisRedirect,
            "localnet" => PortKind::Localnet,
            "localport" => PortKind::Localport,
            "virtual" => PortKind::Virtual,
            "external" => PortKind::External,
            "l2gateway" => PortKind::L2Gateway,
            "vtep" => PortKind::Vtep,
            "remote" => PortKind::Remote,
            o => PortKind::Other(o.to_string()),
        }
    }
}

/// A logical port.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSpec {
    /// The logical port name (what `inport == "..."` says).
    pub name: String,
    /// Its tunnel key within the datapath (nonzero; Geneve carries 15 bits).
    pub key: u32,
    /// Where it lives.
    pub location: PortLocation,
    /// The conntrack zone of a switch port (`lsp/<port>`), resolved by the caller.
    pub zone: u16,
    /// Its type.
    pub kind: PortKind,
    /// `is_chassis_resident()` holds for it (as ovn-controller answers it: where
    /// `Port_Binding.chassis` is this chassis; a local location alone does not make a port
    /// resident, e.g. a localport or a port whose additional chassis this is).
    pub resident: bool,
    /// Other chassis the port is also bound to (`requested_chassis` with several names,
    /// `additional_chassis`): output to it also sends one tunnel copy to each of them.
    pub also_remote: Vec<u32>,
    /// The port starts inactive on this chassis (a migration destination with
    /// `options:activation-strategy`), and which frames of its own activate it: see
    /// [`crate::Pipeline::set_port_active`]. `None`: active.
    pub activation: Option<Activation>,
    /// `Port_Binding.mac`: `MAC [IP...]`, `unknown`, `router`, as written.
    pub addresses: Vec<String>,
    /// `Port_Binding.port_security`, as written.
    pub port_security: Vec<String>,
}

/// The frames that activate a port waiting on this chassis (`options:activation-strategy`, a
/// comma list: `rarp` since OVN 22.09, `garp` and `na` since 25.09).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Activation {
    /// A RARP (ethertype 0x8035), what QEMU sends after a migration.
    pub rarp: bool,
    /// A gratuitous ARP (sender address = target address).
    pub garp: bool,
    /// An IPv6 neighbour advertisement.
    pub na: bool,
}

impl Activation {
    /// RARP only (OVN 22.09's one strategy).
    pub const RARP: Activation = Activation {
        rarp: true,
        garp: false,
        na: false,
    };

    /// Parses `options:activation-strategy`: a comma list of `rarp`, `garp`, `na`. Unknown
    /// names are returned apart (the caller reports them); `None` when no known name is left.
    pub fn parse(list: &str) -> (Option<Activation>, Vec<String>) {
        let mut a = Activation::default();
        let mut unknown = Vec::new();
        for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match s {
                "rarp" => a.rarp = true,
                "garp" => a.garp = true,
                "na" => a.na = true,
                other => unknown.push(other.to_string()),
            }
        }
        ((a.rarp || a.garp || a.na).then_some(a), unknown)
    }

    /// Whether `frame` (an Ethernet frame the port sent) activates it.
    pub fn activates(&self, frame: &[u8]) -> bool {
        let et = frame.get(12..14);
        if self.rarp && et == Some(&[0x80, 0x35][..]) {
            return true;
        }
        if self.garp
            && et == Some(&[0x08, 0x06][..])
            && let (Some(spa), Some(tpa)) = (frame.get(28..32), frame.get(38..42))
        {
            return spa == tpa;
        }
        // IPv6 (no extension headers), ICMPv6 type 136.
        self.na
            && et == Some(&[0x86, 0xdd][..])
            && frame.get(20) == Some(&58)
            && frame.get(54) == Some(&136)
    }

    /// The names, comma-separated (as the option writes them).
    pub fn names(&self) -> String {
        let mut v = Vec::new();
        for (on, n) in [(self.rarp, "rarp"), (self.garp, "garp"), (self.na, "na")] {
            if on {
                v.push(n);
            }
        }
        v.join(",")
    }
}

/// A learned FDB entry (SB `FDB`): `mac` is behind `port` of `datapath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdbSpec {
    /// Datapath name.
    pub datapath: String,
    /// Logical port name.
    pub port: String,
    /// The MAC.
    pub mac: [u8; 6],
}

/// A load-balancer VIP applied to a datapath (SB `Load_Balancer.vips` keys, per datapath in
/// `Load_Balancer.datapaths`): what `ct_snat_to_vip` matches the connection's original
/// destination against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbVipSpec {
    /// Datapath name.
    pub datapath: String,
    /// The VIP.
    pub ip: IpAddr,
    /// Its port (0 for a VIP without a port).
    pub port: u16,
    /// IP protocol (6, 17 or 132).
    pub proto: u8,
}

/// DNS records of one datapath (an SB `DNS` row whose `datapaths` include it): what
/// `dns_lookup()` answers from in packet-in mode ([`crate::Pipeline::set_packet_in`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DnsSpec {
    /// Datapath name.
    pub datapath: String,
    /// Name (lowercase, as SB stores it) → its addresses, space separated (`A`/`AAAA`
    /// answers), or for a reverse name (`4.0.0.10.in-addr.arpa`) the host name it maps to
    /// (`PTR` answers), as written in SB `DNS.records`.
    pub records: std::collections::BTreeMap<String, String>,
}

/// A multicast group such as `_MC_flood`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// Its name.
    pub name: String,
    /// Its key (OVN uses keys from 32768).
    pub key: u32,
    /// Member port names.
    pub members: Vec<String>,
}

/// What a datapath is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatapathKind {
    /// A logical switch: conntrack zones are per port.
    Switch,
    /// A logical router with its DNAT (also the common zone) and SNAT zones
    /// (`lr/<router>/dnat`, `lr/<router>/snat`).
    Router {
        /// DNAT zone: `ct_next`, `ct_dnat`, `ct_lb*`, `ct_commit`, the `_in_czone` forms.
        dnat_zone: u16,
        /// SNAT zone: `ct_snat`.
        snat_zone: u16,
    },
}

/// A flow's stable identity: `external_ids:hf-flow-id` when northd wrote one, else derived
/// from what the flow *is* in its datapath (DESIGN "Flow identity"; the rule is written in
/// `docs/flow-identity.md`). The controller keys "last good version" by it (with the datapath
/// name).
///
/// The derived form ([`FlowId::derived`]) never involves a UUID or the `stage-hint` (a UUID
/// prefix, so an NB rebuild would change it), and always involves the priority (two flows of
/// one stage with one match at two priorities are two flows). Two flows of one datapath that
/// agree on pipeline, stage (or table), priority and match but differ in actions get the same
/// derived identity: they cannot be told apart, and the controller gives neither a last good
/// version.
///
/// Shared, not copied: a flow of a datapath group carries one identity allocation into every
/// datapath it applies to (and into the compiled program's flow table).
/// Compared by pointer first (see [`same_text`]).
#[derive(Debug, Clone, Eq, PartialOrd, Ord, Default)]
pub struct FlowId(pub Arc<str>);

impl PartialEq for FlowId {
    fn eq(&self, o: &FlowId) -> bool {
        same_text(&self.0, &o.0)
    }
}

impl std::hash::Hash for FlowId {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // As the text's (equal identities are equal texts).
        self.0.hash(h)
    }
}

/// Equal texts, by pointer first: the shared texts of one flow in two programs or messages
/// are one allocation (std's `Arc` compares pointers first only for sized types, so an
/// `Arc<str>` compare is a `memcmp` of the whole text, run per flow of every changed datapath).
pub fn same_text(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

/// [`same_text`] of two optional texts.
pub fn same_opt_text(a: &Option<Arc<str>>, b: &Option<Arc<str>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => same_text(a, b),
        (None, None) => true,
        _ => false,
    }
}

impl FlowId {
    /// The identity of a flow with `external_ids:hf-flow-id`.
    pub fn hf(id: &str) -> FlowId {
        FlowId(format!("hf-flow-id:{id}").into())
    }

    /// The fallback identity of a flow without `hf-flow-id` (real ovn-northd's): pipeline,
    /// stage name (the table number when the flow has none: stage names survive a release
    /// that inserts a table, numbers do not), priority and match text.
    pub fn derived(
        pipeline: Pipeline,
        stage: &str,
        table: u8,
        priority: u16,
        matches: &str,
    ) -> FlowId {
        let pipe = if pipeline == Pipeline::Egress {
            "egress"
        } else {
            "ingress"
        };
        if stage.is_empty() {
            FlowId(format!("{pipe}|table={table}|{priority}|{matches}").into())
        } else {
            FlowId(format!("{pipe}|{stage}|{priority}|{matches}").into())
        }
    }
}

impl fmt::Display for FlowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The SB text a flow was parsed from (what traces print). Shared, not copied, by the
/// compiled program's flow table and by every clone of the spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowText {
    /// The match, as written.
    pub matches: Arc<str>,
    /// The actions, as written.
    pub actions: Arc<str>,
}

/// One logical flow.
///
/// A flow parsed from its [`FlowSpec::source`] text may hold no trees
/// ([`FlowSpec::drop_trees`]): its match and actions are parsed again from that text when it
/// is compiled ([`FlowSpec::trees`]). A datapath keeps its running program's flows that way,
/// so that ~150k parse trees are not held between compiles (a recompile compiles only new and
/// changed flows).
#[derive(Debug, Clone)]
pub struct FlowSpec {
    /// Ingress or egress.
    pub pipeline: Pipeline,
    /// Table number within the pipeline.
    pub table: u8,
    /// Priority (higher wins).
    pub priority: u16,
    /// The match. Shared: a datapath that parses one text for many flows (a datapath group's
    /// flow in each of its datapaths) holds one tree.
    pub matches: Arc<Expr>,
    /// The actions (shared as the match is).
    pub actions: Arc<[Action]>,
    /// Stable identity.
    pub id: FlowId,
    /// `external_ids:stage-name` (empty when unknown). Like the identity, UUID and hint,
    /// shared by every copy of the flow (a datapath group's flow is one allocation for all
    /// its datapaths).
    pub stage: Arc<str>,
    /// The SB `Logical_Flow` UUID.
    pub sb_uuid: Option<Arc<str>>,
    /// `external_ids:stage-hint`: the NB row behind the flow.
    pub stage_hint: Option<Arc<str>>,
    /// The text it came from, when it came from text.
    pub source: Option<FlowText>,
    /// Why the text did not parse: [`Program::compile`] reports it as this flow's error and
    /// leaves the flow out. A fixed reason (a flow translated as text only, say) is borrowed, so
    /// a reason shared by every flow costs no allocation per flow.
    pub parse_error: Option<std::borrow::Cow<'static, str>>,
}

/// The stand-ins a flow without trees holds ([`FlowSpec::drop_trees`]): one allocation shared
/// by every such flow, told apart by address.
static NO_TREES: std::sync::LazyLock<(Arc<Expr>, Arc<[Action]>)> =
    std::sync::LazyLock::new(|| (Arc::new(Expr::Bool(false)), Arc::from([])));

/// Equal flows: the same place, identity, metadata, text and parse result. A flow without
/// trees equals one with them when their source texts are equal (its trees are that text's
/// parse).
impl PartialEq for FlowSpec {
    fn eq(&self, o: &FlowSpec) -> bool {
        let trees = !self.has_trees()
            || !o.has_trees()
            || (self.matches == o.matches && self.actions == o.actions);
        self.pipeline == o.pipeline
            && self.table == o.table
            && self.priority == o.priority
            && trees
            && self.id == o.id
            && self.stage == o.stage
            && self.sb_uuid == o.sb_uuid
            && self.stage_hint == o.stage_hint
            && self.source == o.source
            && self.parse_error == o.parse_error
    }
}

impl FlowSpec {
    /// Drops the match and action trees of a flow parsed from its source text without error
    /// (they are parsed again from the text when it is compiled); other flows keep theirs.
    pub fn drop_trees(&mut self) {
        if self.source.is_some() && self.parse_error.is_none() {
            self.matches = Arc::clone(&NO_TREES.0);
            self.actions = Arc::clone(&NO_TREES.1);
        }
    }

    /// Whether it holds its trees ([`FlowSpec::drop_trees`]).
    pub fn has_trees(&self) -> bool {
        !Arc::ptr_eq(&self.matches, &NO_TREES.0)
    }

    /// The match and action trees: its own, or parsed again from its source text when it
    /// holds none. `Err` names the part that does not parse (not for a flow whose trees were
    /// dropped: its text parsed before, and parsing is deterministic).
    pub fn trees(&self) -> Result<(Arc<Expr>, Arc<[Action]>), String> {
        if self.has_trees() {
            return Ok((Arc::clone(&self.matches), Arc::clone(&self.actions)));
        }
        let Some(t) = &self.source else {
            return Err("a flow without trees or text".into());
        };
        let symtab = SymbolTable::shared();
        let m = hf_expr::parse_match(symtab, &t.matches).map_err(|e| format!("match: {e}"))?;
        let a = hf_expr::parse_actions(symtab, &t.actions).map_err(|e| format!("actions: {e}"))?;
        Ok((Arc::new(m), a.into()))
    }
}

impl Default for FlowSpec {
    fn default() -> Self {
        FlowSpec {
            pipeline: Pipeline::Ingress,
            table: 0,
            priority: 0,
            matches: Arc::new(Expr::Bool(true)),
            actions: Arc::from([]),
            id: FlowId::default(),
            stage: Arc::from(""),
            sb_uuid: None,
            stage_hint: None,
            source: None,
            parse_error: None,
        }
    }
}

impl FlowSpec {
    /// Parses SB text for a flow.
    pub fn parse(
        pipeline: Pipeline,
        table: u8,
        priority: u16,
        matches: &str,
        actions: &str,
    ) -> Result<FlowSpec, hf_expr::ParseError> {
        let symtab = SymbolTable::shared();
        Ok(FlowSpec {
            pipeline,
            table,
            priority,
            matches: Arc::new(hf_expr::parse_match(symtab, matches)?),
            actions: hf_expr::parse_actions(symtab, actions)?.into(),
            source: Some(FlowText {
                matches: matches.into(),
                actions: actions.into(),
            }),
            ..FlowSpec::default()
        })
    }

    /// A flow from SB text that never fails: text that does not parse is kept with its
    /// [`FlowSpec::parse_error`], which compilation reports as a per-flow error.
    pub fn from_text(
        pipeline: Pipeline,
        table: u8,
        priority: u16,
        matches: &str,
        actions: &str,
    ) -> FlowSpec {
        FlowSpec::from_shared_text(
            pipeline,
            table,
            priority,
            &Arc::from(matches),
            &Arc::from(actions),
        )
    }

    /// [`FlowSpec::from_text`] keeping the caller's text allocations as its
    /// [`FlowSpec::source`] (no copy of the text).
    pub fn from_shared_text(
        pipeline: Pipeline,
        table: u8,
        priority: u16,
        matches: &Arc<str>,
        actions: &Arc<str>,
    ) -> FlowSpec {
        let symtab = SymbolTable::shared();
        let source = Some(FlowText {
            matches: Arc::clone(matches),
            actions: Arc::clone(actions),
        });
        let parsed = hf_expr::parse_match(symtab, matches)
            .map_err(|e| format!("match: {e}"))
            .and_then(|m| {
                hf_expr::parse_actions(symtab, actions)
                    .map(|a| (m, a))
                    .map_err(|e| format!("actions: {e}"))
            });
        match parsed {
            Ok((m, a)) => FlowSpec {
                pipeline,
                table,
                priority,
                matches: Arc::new(m),
                actions: a.into(),
                source,
                ..FlowSpec::default()
            },
            Err(e) => FlowSpec {
                pipeline,
                table,
                priority,
                matches: Arc::new(Expr::Bool(false)),
                source,
                parse_error: Some(e.into()),
                ..FlowSpec::default()
            },
        }
    }
}

/// A logical datapath.
#[derive(Debug, Clone, PartialEq)]
pub struct DatapathSpec {
    /// Its name (for errors and traces).
    pub name: String,
    /// Its tunnel key (the Geneve VNI).
    pub tunnel_key: u32,
    /// Switch or router.
    pub kind: DatapathKind,
    /// Ports.
    pub ports: Vec<PortSpec>,
    /// Multicast groups.
    pub groups: Vec<GroupSpec>,
    /// Flows of both pipelines.
    pub flows: Vec<FlowSpec>,
}

/// A known neighbour (MAC_Binding): `ip` is at `mac` behind `port` of `datapath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Datapath name.
    pub datapath: String,
    /// Logical port name.
    pub port: String,
    /// The address.
    pub ip: IpAddr,
    /// Its Ethernet address.
    pub mac: [u8; 6],
}

/// Everything a [`Program`] is built from.
#[derive(Debug, Clone, Default)]
pub struct ProgramSpec {
    /// The datapaths.
    pub datapaths: Vec<DatapathSpec>,
    /// Initial neighbour table.
    pub neighbours: Vec<Neighbour>,
    /// Address sets and port groups.
    pub sets: Sets,
    /// The owner recorded on connections this program commits.
    pub owner: Owner,
    /// Initial FDB (SB `FDB` rows).
    pub fdb: Vec<FdbSpec>,
    /// Load-balancer VIPs per datapath (for `ct_snat_to_vip`).
    pub lb_vips: Vec<LbVipSpec>,
    /// Per switch (by name), its SNAT zone (`ls/<switch>/snat`): the zone `ct_snat_to_vip`
    /// commits the hairpin SNAT in. A switch without one uses the port's zone.
    pub switch_snat_zones: Vec<(String, u16)>,
    /// DNS records per datapath (SB `DNS`), for `dns_lookup()` in packet-in mode. Several
    /// entries may name one datapath; for a name in more than one, the first entry wins.
    pub dns: Vec<DnsSpec>,
}

/// Why a program did not compile as a whole (structural errors; a bad flow is a
/// [`FlowError`] instead).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// A patch port's peer does not exist.
    #[error("port {port}: unknown patch peer {peer}")]
    UnknownPeer {
        /// The port.
        port: String,
        /// The missing peer.
        peer: String,
    },
    /// A `port_security` entry does not parse.
    #[error("port {port}: port_security: {message}")]
    PortSecurity {
        /// The port.
        port: String,
        /// What went wrong.
        message: String,
    },
    /// Two logical ports claim the same local port id, or a port key is used twice.
    #[error("datapath {datapath}: port key or local id {id} used twice")]
    Duplicate {
        /// Datapath name.
        datapath: String,
        /// The key or id.
        id: u32,
    },
    /// A tunnel key does not fit Geneve's option (24-bit datapath keys, 15-bit port keys,
    /// 16-bit multicast group keys with the top bit set).
    #[error("datapath {datapath}: {what} tunnel key {key} is outside Geneve's range {range}")]
    TunnelKey {
        /// Datapath name.
        datapath: String,
        /// What carries the key (`datapath`, `port NAME`, `multicast group NAME`).
        what: String,
        /// The key.
        key: u32,
        /// The allowed range.
        range: &'static str,
    },
    /// [`ProgramSpec::dns`] names a datapath the program does not have.
    #[error("DNS records for unknown datapath {0}")]
    UnknownDnsDatapath(String),
    /// Two datapaths share a tunnel key.
    #[error("datapaths {a} and {b} share tunnel key {key}")]
    DuplicateDatapath {
        /// One datapath.
        a: String,
        /// The other.
        b: String,
        /// The key.
        key: u32,
    },
    /// [`Program::compile_strict`]: a flow did not compile.
    #[error("{0}")]
    Flow(Box<FlowError>),
}

/// What kind of problem a [`FlowError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FlowErrorKind {
    /// The SB text does not parse (lexer, parser or type errors).
    Syntax,
    /// The match does not normalise (too large, impossible field use).
    Match,
    /// The match names an address set, port group or template variable that does not exist.
    UnknownSet,
    /// An action names an unknown field or has an impossible argument.
    Action,
    /// An action the pipeline does not execute.
    Unsupported,
}

impl FlowErrorKind {
    /// A short name (`syntax`, `match`, `unknown-set`, `action`, `unsupported`).
    pub fn as_str(self) -> &'static str {
        match self {
            FlowErrorKind::Syntax => "syntax",
            FlowErrorKind::Match => "match",
            FlowErrorKind::UnknownSet => "unknown-set",
            FlowErrorKind::Action => "action",
            FlowErrorKind::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for FlowErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One flow that did not compile; the rest of the program did. Names the flow (datapath,
/// pipeline, table, priority, identity, stage, SB UUID) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "datapath {datapath}, {pipeline} table {table}{} priority {priority}{}: {kind}: {message} (flow {id})",
    stage_suffix(stage),
    uuid_suffix(sb_uuid.as_deref())
)]
pub struct FlowError {
    /// Datapath name.
    pub datapath: String,
    /// `ingress` or `egress`.
    pub pipeline: &'static str,
    /// Table.
    pub table: u8,
    /// Priority.
    pub priority: u16,
    /// The flow's identity.
    pub id: FlowId,
    /// Its stage name.
    pub stage: String,
    /// Its SB UUID.
    pub sb_uuid: Option<String>,
    /// What kind of problem.
    pub kind: FlowErrorKind,
    /// What went wrong.
    pub message: String,
}

fn stage_suffix(stage: &str) -> String {
    if stage.is_empty() {
        ",".into()
    } else {
        format!(" ({stage}),")
    }
}

fn uuid_suffix(u: Option<&str>) -> String {
    u.map_or(String::new(), |u| format!(", lflow {u}"))
}

/// Which pipeline (internal, `Copy` and indexable).
pub(crate) const INGRESS: u8 = 0;
pub(crate) const EGRESS: u8 = 1;

/// A compiled action. Nested bodies are ranges of the program's action arena. A `dp` field
/// holds the datapath's tunnel key, not its index: a datapath's compiled code does not depend on
/// its position in the program, so a recompile reuses it wherever the datapath moved.
#[derive(Debug, Clone)]
pub(crate) enum CAct {
    Next {
        pipeline: u8,
        table: u8,
    },
    Output,
    Drop,
    Set {
        field: u8,
        value: u128,
        mask: u128,
    },
    Move {
        dst: Bits,
        src: Bits,
    },
    Exchange {
        a: Bits,
        b: Bits,
    },
    Push(Bits),
    Pop(Bits),
    DecTtl,
    /// `ct_next`: lookup, then continue in the next table.
    CtNext,
    /// `ct_commit`: commit with mark/label updates; the packet continues unchanged.
    CtCommit {
        mark: Option<Masked<u32>>,
        /// Boxed, as the lists below: every action of a program is as large as the largest
        /// variant (48 bytes, a `Set`'s two 128-bit words), and a label's two words would
        /// double that.
        label: Option<Box<Masked<u128>>>,
        /// `ct_mark`/`ct_label` bits (destination) loaded from packet fields (source).
        moves: Box<[(Bits, Bits)]>,
    },
    /// `ct_snat`/`ct_dnat` (and `_in_czone`), with or without a target.
    CtNat {
        kind: NatKind,
        target: Option<NatRange>,
    },
    /// `ct_commit_nat`.
    CtCommitNat,
    /// `ct_lb`/`ct_lb_mark`; no backends means "existing connections only". `hash` lists the
    /// slots of `hash_fields` (empty: the 5-tuple); `flag` is the `skip_snat`/`force_snat` bit
    /// committed into `ct_mark`/`ct_label` beside `natted`.
    CtLb {
        mark: bool,
        backends: Box<[(IpAddr, u16)]>,
        hash: Box<[u8]>,
        flag: u32,
    },
    /// `ct_snat_to_vip`: when the connection was DNATed to a backend of one of this datapath's
    /// VIPs, SNAT it to that VIP (hairpin) in the datapath's SNAT zone.
    CtSnatToVip {
        dp: u32,
    },
    CtClear,
    Nested {
        kind: NestedKind,
        body: Range<u32>,
    },
    GetNeigh {
        dp: u32,
        v6: bool,
        port: Bits,
        ip: Bits,
    },
    PutNeigh {
        dp: u32,
        v6: bool,
        port: Bits,
        ip: Bits,
        mac: Bits,
    },
    LookupNeigh {
        dp: u32,
        v6: bool,
        dst: Bits,
        port: Bits,
        ip: Bits,
        mac: Option<Bits>,
    },
    /// `chk_lb_hairpin()`/`chk_lb_hairpin_reply()`: DNATed, source == destination, and (when
    /// the datapath has load-balancer VIPs) the connection's original destination is one of
    /// them, as ovn-controller's hairpin flows and ovn-trace check.
    ChkLbHairpin {
        dst: Bits,
        reply: bool,
        dp: u32,
    },
    Select {
        dst: Bits,
        choices: Vec<(u16, u16)>,
    },
    CheckPktLarger {
        dst: Bits,
        len: u32,
    },
    /// `put_dhcp_opts`, `put_dhcpv6_opts`, `put_nd_ra_opts`, `dns_lookup`: in packet-in mode
    /// the packet becomes the reply and `dst` says whether it could be built; otherwise `dst`
    /// gets `fallback` as ovn-trace models it (see [`crate::packet_in`]). Each hit is counted.
    PacketIn {
        dst: Bits,
        req: Box<crate::packet_in::Request>,
        fallback: u8,
        #[allow(dead_code)] // shown by traces through Debug
        name: &'static str,
        counter: u32,
    },
    /// `R = check_in_port_sec()` / `R = check_out_port_sec()`.
    PortSec {
        dst: Bits,
        out: bool,
        dp: u32,
    },
    /// `put_fdb(P, M)`.
    PutFdb {
        dp: u32,
        port: Bits,
        mac: Bits,
    },
    /// `R = lookup_fdb(P, M)`: 1 when `M` was learned on `P`.
    LookupFdb {
        dp: u32,
        dst: Bits,
        port: Bits,
        mac: Bits,
    },
    /// `R = get_fdb(M)`: the port key learned for `M`, or 0.
    GetFdb {
        dp: u32,
        dst: Bits,
        mac: Bits,
    },
    /// `commit_ecmp_nh(ipv6 = B, proto = P)`.
    CommitEcmpNh {
        dp: u32,
        v6: bool,
        proto: u8,
    },
    /// `R = chk_ecmp_nh_mac()` (`mac`) or `R = chk_ecmp_nh()`.
    ChkEcmpNh {
        dp: u32,
        dst: Bits,
        mac: bool,
    },
    /// `commit_lb_aff(vip = "V:VP", backend = "B:BP", proto = P, timeout = T)`.
    CommitLbAff {
        dp: u32,
        vip: IpAddr,
        vip_port: u16,
        backend: IpAddr,
        backend_port: u16,
        proto: u8,
        timeout: u32,
    },
    /// `R = chk_lb_aff()`: on a hit also loads the backend into `reg4` (IPv4), `xxreg0`
    /// (IPv6, switch) or `xxreg1` (IPv6, router) and its port into `reg8[0..15]`.
    ChkLbAff {
        dp: u32,
        dst: Bits,
        switch: bool,
    },
    /// `bind_vport("V", P)`: reported as an event; forwarding is unchanged.
    BindVport {
        dp: u32,
        vport: u32,
        parent: Bits,
        counter: u32,
    },
    /// `handle_svc_check(P)`: the packet (a reply to a service monitor's probe) is punted to
    /// the chassis's monitor logic as an [`crate::Event::SvcCheck`]; forwarding ends here for
    /// it as in OVN (the action is the flow's last).
    SvcCheck {
        dp: u32,
        port: Bits,
        counter: u32,
    },
    /// `igmp;`: the packet (an IGMP or MLD message) is punted to the chassis's snooping logic
    /// as an [`crate::Event::Igmp`] with its logical inport; the flow's later actions go on.
    Igmp {
        dp: u32,
        counter: u32,
    },
    /// `handle_bfd_msg();`: the packet (a BFD control packet to a router port's address) is
    /// punted to the chassis's BFD sessions as an [`crate::Event::Bfd`]; later actions go on.
    Bfd {
        dp: u32,
        counter: u32,
    },
    /// `fwd_group(childports=...)`: output to one child port chosen by the 5-tuple hash.
    FwdGroup {
        ports: Vec<u32>,
    },
    /// `log(...)`: an [`crate::Event::AclLog`] unless its meter (or, without one, its flow's
    /// controller meter) is over the rate; counted.
    Log {
        counter: u32,
        name: Option<Arc<str>>,
        severity: &'static str,
        verdict: &'static str,
        meter: Option<Arc<str>>,
        /// The flow is in the egress pipeline (`to-lport`).
        egress: bool,
    },
    /// `set_meter(rate, burst)` (kbps): a packet over the rate is dropped; counted.
    SetMeter {
        counter: u32,
        rate: u64,
        burst: u64,
    },
    /// Put before each controller action (packet generation, `put_arp`/`put_nd`, packet-in
    /// replies, events): a walk that meets it while its flow has a controller meter asks the
    /// meter, is not cached, and skips the next action when the meter is over the rate
    /// (`halt`: drops the packet instead). Never recorded as an op.
    CtrlPunt {
        halt: bool,
    },
    /// An action with no effect on forwarding whose hits are counted:
    /// `sample`, `trigger_event`, `set_queue`, `handle_dhcpv6_reply` (the controller's
    /// packet-in handler; ovn-trace does nothing for it either).
    Count {
        #[allow(dead_code)] // shown by traces through Debug
        name: &'static str,
        counter: u32,
    },
}

impl CAct {
    /// Whether this action ends the segment with a conntrack recirculation.
    pub(crate) fn recirculates(&self) -> bool {
        matches!(
            self,
            CAct::CtNext | CAct::CtNat { .. } | CAct::CtCommitNat | CAct::CtLb { .. }
        )
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Loc {
    Local(u32),
    Remote(u32),
    Patch {
        dp: u32,
        port: u32,
    },
    /// A resident `chassisredirect` port: continue in egress with this port key.
    Redirect(u32),
    Unbound,
}

#[derive(Debug, Clone)]
pub(crate) struct Port {
    pub name: String,
    pub loc: Loc,
    pub zone: u16,
    pub ps: Vec<crate::port_sec::PsEntry>,
    /// Further chassis that get a tunnel copy of what is output to the port.
    pub also_remote: Vec<u32>,
}

/// One datapath's compiled flows: shared (by `Arc`) between programs when a recompile leaves
/// the datapath alone, and its tables shared table by table when a recompile changes some of
/// its flows in place (see `compile.rs`).
#[derive(Debug, Default, Clone)]
pub(crate) struct DpCode {
    /// `tables[pipeline][table]`.
    pub tables: [Vec<Arc<Classifier>>; 2],
    /// The flows that did not compile.
    pub errors: Vec<FlowError>,
    /// Port names its flows ask `is_chassis_resident` about, with the answer compiled in.
    pub resident_refs: Vec<(String, bool)>,
    /// Address sets and port groups its flows name (`$x`, `@x`).
    pub set_refs: Vec<String>,
    /// (name, key) of its ports and groups when compiled, sorted: names in flows resolve to
    /// them (shared by the next compile when they did not change).
    pub names: Arc<[(String, u32)]>,
    /// Arena entries (flows) it owns.
    pub flow_count: usize,
    /// Compiled for a switch (compiled actions differ between switches and routers).
    pub switch: bool,
    /// Per flow of the datapath's spec list, in order: what it became.
    pub slots: Vec<Slot>,
}

/// What one flow of a datapath's spec list became.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// Its place among the datapath's flows: increasing along the list, with gaps, so that a
    /// flow inserted in place gets a rank between its neighbours' (the classifier's tie-break
    /// between equal priorities).
    pub rank: u64,
    /// Its entry in the program's flow arena; [`Slot::ERROR`] when it did not compile (its
    /// error is in [`DpCode::errors`]).
    pub flow: u32,
    /// Sets its match names and residency answers it compiled in (`None`: neither); shared by
    /// the programs that keep the flow (a patched recompile clones the slots it keeps).
    pub refs: Option<Arc<FlowRefs>>,
}

impl Slot {
    /// [`Slot::flow`] of a flow that did not compile.
    pub const ERROR: u32 = u32::MAX;
}

/// The address sets / port groups a flow names and the residency answers it compiled in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FlowRefs {
    pub sets: Vec<String>,
    pub resident: Vec<(String, bool)>,
}

/// What a datapath's port and group maps were built from: its spec's ports and groups, its
/// local ports (which go into the program's own map) and its patch peers as resolved (the
/// one part that depends on other datapaths). A later build whose spec has the same ports
/// and groups, and whose peers resolve the same, shares the maps instead of building them.
#[derive(Debug, Default)]
pub(crate) struct PortsFrom {
    pub ports: Vec<PortSpec>,
    pub groups: Vec<GroupSpec>,
    /// (local id, port key, activation), in port order.
    pub local: Vec<(u32, u32, Option<Activation>)>,
    /// (peer name, its datapath index, its key).
    pub patches: Vec<(String, u32, u32)>,
}

#[derive(Debug)]
pub(crate) struct Dp {
    pub name: String,
    pub key: u32,
    pub kind: DatapathKind,
    pub ports: Arc<FastMap<u32, Port>>,
    pub groups: Arc<FastMap<u32, Vec<u32>>>,
    /// What `ports` and `groups` were built from (shared with them).
    pub from: Arc<PortsFrom>,
    /// Load-balancer VIPs: (address, IPv6, port, protocol).
    pub vips: Vec<(u128, bool, u16, u8)>,
    /// The zone `ct_snat_to_vip` uses on a switch.
    pub snat_zone: Option<u16>,
    /// `tables[pipeline][table]` and what they were compiled from.
    pub tables: std::sync::Arc<DpCode>,
}

/// What a trace shows of a flow.
#[derive(Debug, Clone)]
pub(crate) struct FlowInfo {
    /// [`INGRESS`] or [`EGRESS`].
    pub pipe: u8,
    pub table: u8,
    pub priority: u16,
    /// The spec's text, shared with it.
    pub matches: Arc<str>,
    pub actions: Arc<str>,
    pub acts: Range<u32>,
    pub id: FlowId,
    pub stage: Arc<str>,
    pub sb_uuid: Option<Arc<str>>,
    pub stage_hint: Option<Arc<str>>,
}

/// A compiled program. Immutable; hand it to [`crate::Pipeline::new`] or
/// [`crate::Pipeline::set_program`].
#[derive(Debug)]
pub struct Program {
    pub(crate) dps: Vec<Dp>,
    pub(crate) acts: crate::arena::Arena<CAct>,
    pub(crate) flows: crate::arena::Arena<FlowInfo>,
    /// Local port id → (datapath index, port key).
    pub(crate) local: FastMap<u32, (u32, u32)>,
    /// Datapath tunnel key → index.
    pub(crate) by_key: FastMap<u32, u32>,
    /// Initial neighbours: (datapath tunnel key, port key, IP, v6, MAC).
    pub(crate) neighbours: Vec<(u32, u32, u128, bool, u128)>,
    /// Initial FDB: (datapath tunnel key, MAC, port key).
    pub(crate) fdb: Vec<(u32, u128, u32)>,
    /// Counted actions, indexed by the `counter` of their `CAct`.
    pub(crate) counters: Vec<Counted>,
    pub(crate) owner: Owner,
    /// Local port ids that start inactive, with what activates them.
    pub(crate) inactive: Vec<(u32, Activation)>,
    /// The sets the flows were compiled against (to see which datapaths a change touches).
    pub(crate) sets: Sets,
    /// How many datapaths the build that made it compiled (the others were reused).
    pub(crate) compiled: usize,
    /// How many of those it changed in place (flow by flow) rather than compiling whole.
    pub(crate) patched: usize,
    /// How many flows the build that made it compiled (in whole and changed datapaths).
    pub(crate) compiled_flows: usize,
    /// How many flows' texts it parsed again (see [`Program::parsed_flows`]).
    pub(crate) parsed_flows: usize,
    /// DNS records by datapath tunnel key (from [`ProgramSpec::dns`]), for `dns_lookup()`.
    pub(crate) dns: FastMap<u32, std::collections::BTreeMap<String, String>>,
}

/// How to compile: what the caller (an I/O shell) decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileOptions {
    /// Worker threads for compiling datapaths (1: on the caller's thread). The program is the
    /// same for every value.
    pub threads: usize,
    /// Fewer flows than this to compile run on the caller's thread whatever `threads` says
    /// (starting workers costs more than a change's few datapaths, on a loaded machine most).
    pub min_parallel_flows: usize,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            threads: 1,
            min_parallel_flows: 4096,
        }
    }
}

/// Where a counted action is: datapath tunnel key, pipeline, table, flow index, action name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted {
    pub dp: u32,
    pub pipe: u8,
    pub table: u8,
    pub flow: u32,
    pub name: &'static str,
    /// False once a recompile replaced the flow's datapath tables.
    pub live: bool,
}

/// Hits of one counted action (`log`, `set_meter`, `sample`, `trigger_event`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionHits {
    /// Datapath name.
    pub datapath: String,
    /// `ingress` or `egress`.
    pub pipeline: &'static str,
    /// Table.
    pub table: u8,
    /// The flow's priority.
    pub priority: u16,
    /// The flow's match, as text.
    pub matches: String,
    /// The action's name.
    pub action: &'static str,
    /// Packets that ran it.
    pub hits: u64,
}

impl Program {
    /// The datapath with tunnel key `key`.
    #[inline]
    pub(crate) fn dp_by_key(&self, key: u32) -> Option<&Dp> {
        self.dps.get(*self.by_key.get(&key)? as usize)
    }

    /// Every counted action with its hit count from `hits` (indexed like `counters`).
    pub(crate) fn action_hits(&self, hits: &[u64]) -> Vec<ActionHits> {
        self.counters
            .iter()
            .zip(hits)
            .filter(|(c, _)| c.live)
            .filter_map(|(c, &hits)| {
                let f = self.flows.get(c.flow as usize)?;
                Some(ActionHits {
                    datapath: self.dp_by_key(c.dp)?.name.clone(),
                    pipeline: if c.pipe == INGRESS {
                        "ingress"
                    } else {
                        "egress"
                    },
                    table: c.table,
                    priority: f.priority,
                    matches: f.matches.to_string(),
                    action: c.name,
                    hits,
                })
            })
            .collect()
    }
}

pub(crate) fn ip_u128(ip: IpAddr) -> (u128, bool) {
    match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), false),
        IpAddr::V6(a) => (u128::from(a), true),
    }
}
