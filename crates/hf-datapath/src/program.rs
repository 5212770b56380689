//! [`ProgramMsg`] (the controller's program as text and names) → [`hf_pipeline::ProgramSpec`]
//! → a compiled [`hf_pipeline::Program`].
//!
//! # What it does
//!
//! - Every flow's SB text is parsed with [`FlowSpec::from_text`]. When it does not parse and
//!   the message carries the flow's `last_good` text, that text is parsed instead and the flow
//!   is reported with `kept_last_good: true`. The same holds for per-flow *compile* errors
//!   (unknown set, unsupported action, ...): such a flow is compiled again from `last_good`.
//!   When a flow still has no version that runs because of the language (a syntax error, or
//!   a construct outside the program's feature level: version skew), its datapath is held: if
//!   the previous
//!   program had that datapath ([`compile_cached_holding`]), the whole datapath keeps the flows
//!   it ran (every error of it reported with `held: true`; the caller keeps those flows as what
//!   runs). With nothing to hold, a flow without a usable version is left out and reported
//!   with `kept_last_good: false` (the rest of the program runs) — unless it is in a security
//!   stage ([`is_security_stage`]: port security and ACLs), where `drop;` over `1` runs at its
//!   table and priority instead (fail closed, reported with `failed_closed: true`). See
//!   `docs/flow-identity.md`, "Flows a controller cannot parse". [`ProgramMsg::no_last_good`]
//!   (a test hook) turns the fallback and the holding off.
//! - [`ProgramMsg::feature_level`]: the controller's feature level. A flow text (or last good
//!   text) that parses but uses a construct outside it is a syntax error for this program,
//!   exactly as for a controller of that level that could not parse it (incident B): same
//!   fallback, same report. The cause names the construct, the feature and the level, never
//!   the flow, so one cause covers every flow it hits.
//! - Ports: [`LocationMsg::Local`] names a local port of the datapath (its `iface-id`); the
//!   caller's `local` map gives its numeric id. A local name the datapath does not have (yet)
//!   is [`PortLocation::Unbound`] until the port appears (the datapath then compiles again).
//! - Address sets: each member is parsed as a logical-flow constant (as `hf-controller`'s
//!   translation does); port groups are taken as they are.
//! - [`SpecCache`] (what `Datapath` uses): the parsed flows of the running program per
//!   datapath; a new program's datapath whose flows are the same (identity, text, table,
//!   priority, pipeline, stage, last good version) is not parsed again, and the datapaths it
//!   did parse are exactly the ones [`Program::recompile`] must not reuse.
//! - No flow keeps its parse trees ([`FlowSpec::drop_trees`]): a flow is parsed to decide
//!   (syntax, feature level, last good, fail closed), and the compile parses its text again
//!   when it compiles it. The cache holds what was decided, not the trees.
//! - Structural problems (a zone map containing zone 0 or missing a zone the program uses,
//!   an unparsable IP in the neighbour, VIP or chassis tables, an unparsable address-set
//!   member, the pipeline's own [`hf_pipeline::CompileError`]s) are an `Err(String)`: the
//!   datapath answers `Rejected` and keeps the previous program.
//!
//! # What it does not do
//!
//! No I/O, no decisions about where ports live (the controller's translation makes them).
//! DNS records ([`ProgramMsg::dns`]) go to [`ProgramSpec::dns`] as they are; the replies
//! themselves (DHCP, DNS, RA) are built by the pipeline in packet-in mode.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use hf_conntrack::Owner;
use hf_expr::actions::Pipeline as Pipe;
use hf_expr::features::{FeatureSet, used_by_actions, used_by_expr};
use hf_expr::lexer::{Tok, tokenize};
use hf_expr::{Constant, Expr, Sets};
use hf_pipeline::{
    CompileOptions, DatapathKind, DatapathSpec, DnsSpec, FdbSpec, FlowError, FlowErrorKind, FlowId,
    FlowSpec, GroupSpec, LbVipSpec, Neighbour, PortKind, PortLocation, PortSpec, Program,
    ProgramSpec,
};

use crate::proto::{DatapathMsg, FlowErrorMsg, FlowMsg, LocationMsg, PortMsg, ProgramMsg};

/// Parses one address-set member as a logical-flow constant (an IPv4/IPv6 address or prefix,
/// a MAC, a number).
pub fn parse_address(s: &str) -> Result<Constant, String> {
    let toks = tokenize(s).map_err(|e| e.to_string())?;
    match toks.iter().map(|t| &t.tok).collect::<Vec<_>>().as_slice() {
        [Tok::Const(c)] | [Tok::Const(c), Tok::End] => Ok(*c),
        _ => Err(format!("\"{s}\" is not an address")),
    }
}

/// `s` as an IP address; `what` names it in the error (made only then: a program has
/// thousands of neighbours and VIPs, parsed on every install).
fn parse_ip(what: impl FnOnce() -> String, s: &str) -> Result<IpAddr, String> {
    s.parse::<IpAddr>()
        .map_err(|_| format!("{}: \"{s}\" is not an IP address", what()))
}

/// Which text a flow of the spec was built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Used {
    Primary,
    LastGood,
}

/// Where each spec flow came from: (datapath index, flow index) → (message flow, text used).
///
/// Every message flow gives exactly one spec flow at its own index, so this is, per datapath,
/// which text each flow's spec was built from (a vector, not a map: a program of 157k flows
/// builds it on every install). A view of the build's per-datapath [`CacheMeta`] (not a copy:
/// a datapath taken from the cache costs nothing here).
#[derive(Debug, Clone, Copy)]
struct Origins<'a>(&'a [(bool, CacheMeta)]);

impl Origins<'_> {
    /// (message flow, text used) of spec flow `fi` of datapath `di`.
    fn get(&self, &(di, fi): &(usize, usize)) -> Option<(usize, Used)> {
        self.0.get(di)?.1.used.get(fi).map(|u| (fi, *u))
    }
}

/// The language a program's flows may use ([`ProgramMsg::feature_level`]).
#[derive(Debug, Clone, PartialEq)]
struct LevelCheck {
    set: FeatureSet,
    name: String,
}

/// The program's feature level: `None` for every feature; an unknown level is structural
/// (the program is rejected, naming the known levels).
fn level_of(msg: &ProgramMsg) -> Result<Option<LevelCheck>, String> {
    level_named(msg.feature_level.as_deref())
}

fn level_named(level: Option<&str>) -> Result<Option<LevelCheck>, String> {
    match level {
        None => Ok(None),
        Some(l) => FeatureSet::parse(l)
            .map(|set| {
                Some(LevelCheck {
                    set,
                    name: l.to_string(),
                })
            })
            .map_err(|e| format!("program feature level \"{l}\": {e}")),
    }
}

/// Whether a stage enforces security (port security, ACLs): OVN's stage names
/// (`ls_in_check_port_sec`, `ls_in_apply_port_sec`, `ls_out_check_port_sec`,
/// `ls_out_apply_port_sec`, the older `ls_in_port_sec_*`/`ls_out_port_sec_*`, every
/// `ls_in_acl*`/`ls_out_acl*`), as hf-northd's `render::is_security`. A flow there that runs
/// no version of itself fails closed.
pub fn is_security_stage(stage: &str) -> bool {
    stage.starts_with("ls_in_acl")
        || stage.starts_with("ls_out_acl")
        || stage.starts_with("ls_in_port_sec")
        || stage.starts_with("ls_out_port_sec")
        || matches!(
            stage,
            "ls_in_check_port_sec"
                | "ls_in_apply_port_sec"
                | "ls_out_check_port_sec"
                | "ls_out_apply_port_sec"
        )
}

/// What runs instead of a security flow with no version that compiles: `drop;` over `1` at
/// its table and priority. The datapath cannot know what a text it could not parse matched,
/// so it drops everything that reaches that priority of the stage.
fn fail_closed_spec(f: &FlowMsg) -> FlowSpec {
    flow_spec(f, (&Arc::from("1"), &Arc::from("drop;")), None)
}

/// The spec of message flow `f` from `text` (its own or its last good one). Every string is
/// the message's allocation, shared (not copied).
fn flow_spec(f: &FlowMsg, text: (&Arc<str>, &Arc<str>), level: Option<&LevelCheck>) -> FlowSpec {
    let pipe = if f.egress {
        Pipe::Egress
    } else {
        Pipe::Ingress
    };
    let mut fs = FlowSpec::from_shared_text(pipe, f.table, f.priority, text.0, text.1);
    set_identity(&mut fs, f);
    if let Some(l) = level
        && fs.parse_error.is_none()
    {
        let outside = |u: &hf_expr::features::Use| !l.set.contains(u.feature.name);
        let bad = used_by_expr(&fs.matches)
            .into_iter()
            .find(outside)
            .map(|u| ("match", u))
            .or_else(|| {
                used_by_actions(&fs.actions)
                    .into_iter()
                    .find(outside)
                    .map(|u| ("actions", u))
            });
        if let Some((what, u)) = bad {
            let f = u.feature;
            fs.parse_error = Some(
                format!(
                    "{what}: {} needs feature `{}` (holdfast level {}, OVN {}); this controller \
                     parses feature level {}",
                    f.summary, f.name, f.hf, f.ovn, l.name
                )
                .into(),
            );
            fs.matches = Arc::new(Expr::Bool(false));
            fs.actions = Arc::from([]);
        }
    }
    // The trees were needed for the decisions above; the compile parses the text again, so
    // that a program's ~150k trees never live at once (nor in the cache between compiles).
    fs.drop_trees();
    fs
}

/// Parses made during one spec build, by text allocation: a flow whose match and actions are
/// the allocations of a flow parsed before (a datapath group's flow in its next datapath: the
/// decoder shares equal texts, see [`crate::intern`]) takes that parse's outcome (its error,
/// or none: the trees themselves are not kept, see [`FlowSpec::drop_trees`]), with its own
/// identity, stage, UUID and hint. Keyed by address, so only texts the message
/// keeps alive during the build are looked up.
#[derive(Default)]
struct Parses(HashMap<(usize, usize), FlowSpec>);

impl Parses {
    /// [`flow_spec`] of `f` from `text`, through the memo.
    fn flow_spec(
        &mut self,
        f: &FlowMsg,
        text: (&Arc<str>, &Arc<str>),
        level: Option<&LevelCheck>,
    ) -> FlowSpec {
        let key = (
            Arc::as_ptr(text.0).cast::<u8>() as usize,
            Arc::as_ptr(text.1).cast::<u8>() as usize,
        );
        let Some(p) = self.0.get(&key) else {
            let fs = flow_spec(f, text, level);
            self.0.insert(key, fs.clone());
            return fs;
        };
        let mut fs = p.clone();
        // The same pipeline, table and priority are not implied by the text: set them too.
        fs.pipeline = if f.egress {
            Pipe::Egress
        } else {
            Pipe::Ingress
        };
        fs.table = f.table;
        fs.priority = f.priority;
        set_identity(&mut fs, f);
        fs
    }
}

/// `f`'s identity, stage, UUID and hint on its spec (shared allocations).
fn set_identity(fs: &mut FlowSpec, f: &FlowMsg) {
    fs.id = FlowId(f.id.clone());
    fs.stage = f.stage.clone();
    fs.sb_uuid = f.sb_uuid.clone();
    fs.stage_hint = f.stage_hint.clone();
}

/// What a datapath's flows parsed to, besides the specs themselves.
#[derive(Debug, Default)]
struct CacheMeta {
    /// Per message flow: which text its spec was built from.
    used: Vec<Used>,
    /// The message flows that have a `last_good` text, whole (compared whole); the others
    /// are compared against the spec's own fields and source text.
    last_good: LastGoods,
    /// The syntax errors reported for it (`kept_last_good: true`).
    syntax: Vec<FlowErrorMsg>,
}

/// The flows of a datapath that carry a `last_good` text, by index in the message's list,
/// ascending. Sparse: a controller sends last good texts for the few flows that changed text
/// lately, and a slot per flow (136 bytes, mostly `None`) cost ~21 MB at 157k flows.
#[derive(Debug, Default, Clone)]
struct LastGoods(Vec<(u32, Arc<FlowMsg>)>);

impl LastGoods {
    /// The flows of `flows` with a `last_good` text.
    fn of(flows: &[Arc<FlowMsg>]) -> LastGoods {
        LastGoods(
            (0u32..)
                .zip(flows)
                .filter(|(_, f)| f.last_good.is_some())
                .map(|(i, f)| (i, f.clone()))
                .collect(),
        )
    }

    /// Flow `i`, when it has a `last_good` text.
    fn get(&self, i: usize) -> Option<&FlowMsg> {
        let i = u32::try_from(i).ok()?;
        self.0
            .binary_search_by_key(&i, |(at, _)| *at)
            .ok()
            .and_then(|k| self.0.get(k))
            .map(|(_, f)| &**f)
    }
}

/// One datapath's parsed flows, ports and groups, kept from the last program compiled.
#[derive(Debug, Clone)]
struct ParsedDp {
    flows: Vec<FlowSpec>,
    /// Its ports as built (locations resolved against the `local` map of the time).
    ports: Vec<PortSpec>,
    groups: Vec<GroupSpec>,
    used: Vec<Used>,
    last_good: LastGoods,
    syntax: Vec<FlowErrorMsg>,
}

impl ParsedDp {
    /// Whether `flows` would parse to exactly these specs: same identity, table, priority,
    /// pipeline, stage, SB uuid, stage hint and text (and the whole message for flows with a
    /// last good version).
    fn matches(&self, flows: &[Arc<FlowMsg>]) -> bool {
        flows.len() == self.flows.len()
            && flows
                .iter()
                .zip(&self.flows)
                .zip(&self.used)
                .enumerate()
                .all(|(i, ((f, s), u))| match self.last_good.get(i) {
                    Some(whole) => *whole == **f,
                    None => *u == Used::Primary && same_parse(f, s),
                })
    }
}

/// Whether message flow `f` parses to spec `s` (parsed from its own text): same identity,
/// place, priority, metadata and text.
fn same_parse(f: &FlowMsg, s: &FlowSpec) -> bool {
    use crate::proto::{same_opt_text, same_text};
    f.last_good.is_none()
        && f.egress == (s.pipeline == Pipe::Egress)
        && f.table == s.table
        && f.priority == s.priority
        && same_text(&f.id, &s.id.0)
        && same_text(&f.stage, &s.stage)
        && same_opt_text(&f.sb_uuid, &s.sb_uuid)
        && same_opt_text(&f.stage_hint, &s.stage_hint)
        && s.source
            .as_ref()
            .is_some_and(|t| same_text(&t.matches, &f.matches) && same_text(&t.actions, &f.actions))
}

/// The cached parse of a datapath whose flows changed: each flow parsed from its own text (no
/// last good version involved) can be taken once by a message flow it equals
/// ([`same_parse`]), so that only new and changed flows are parsed again.
struct Reusable {
    flows: Vec<Option<FlowSpec>>,
    /// Where the next flow most likely is (the lists mostly keep their order).
    next: usize,
    /// Identity → indexes, made once the look-ahead missed [`Reusable::LOOK_AHEAD_MISSES`]
    /// times (the order changed more than a few flows' insertion or removal explains).
    by_id: Option<HashMap<Arc<str>, Vec<usize>>>,
    /// Misses looked up by the look-ahead so far.
    misses: usize,
}

impl Reusable {
    /// How many cached flows after the expected place a miss looks at.
    const LOOK_AHEAD: usize = 64;
    /// How many misses are looked up ahead before the identities are indexed.
    const LOOK_AHEAD_MISSES: usize = 16;

    fn new(c: ParsedDp) -> Reusable {
        let flows = c
            .flows
            .into_iter()
            .zip(&c.used)
            .enumerate()
            .map(|(i, (s, u))| (*u == Used::Primary && c.last_good.get(i).is_none()).then_some(s))
            .collect();
        Reusable {
            flows,
            next: 0,
            by_id: None,
            misses: 0,
        }
    }

    fn take(&mut self, f: &FlowMsg) -> Option<FlowSpec> {
        if f.last_good.is_some() {
            return None;
        }
        let at = self.next;
        if self
            .flows
            .get(at)
            .and_then(Option::as_ref)
            .is_some_and(|s| same_parse(f, s))
        {
            self.next = at + 1;
            return self.flows.get_mut(at).and_then(Option::take);
        }
        let flows = &self.flows;
        if self.misses < Self::LOOK_AHEAD_MISSES {
            // A flow inserted here, or cached flows at `next` removed: the next few cached
            // flows tell, without indexing the datapath's identities (a delta's change of one
            // flow in a datapath of 31k must not cost a pass over them).
            self.misses += 1;
            let end = flows.len().min(at + Self::LOOK_AHEAD);
            let i = (at..end).find(|&i| {
                flows
                    .get(i)
                    .and_then(Option::as_ref)
                    .is_some_and(|s| same_parse(f, s))
            })?;
            self.next = i + 1;
            return self.flows.get_mut(i).and_then(Option::take);
        }
        let by_id = self.by_id.get_or_insert_with(|| {
            let mut m: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
            for (i, s) in flows.iter().enumerate() {
                if let Some(s) = s {
                    m.entry(s.id.0.clone()).or_default().push(i);
                }
            }
            m
        });
        let i = by_id.get(&*f.id).and_then(|v| {
            v.iter().copied().find(|&i| {
                flows
                    .get(i)
                    .and_then(Option::as_ref)
                    .is_some_and(|s| same_parse(f, s))
            })
        })?;
        self.next = i + 1;
        self.flows.get_mut(i).and_then(Option::take)
    }
}

/// A spec built by [`build_spec`], with where its flows came from.
#[derive(Debug)]
struct Built {
    spec: ProgramSpec,
    errors: Vec<FlowErrorMsg>,
    /// Per datapath: taken from the cache, and its parse metadata.
    meta: Vec<(bool, CacheMeta)>,
    /// Flows parsed (not taken from the cache).
    parsed_flows: usize,
    /// Per datapath: its ports and groups are the cached ones, every local location resolved
    /// as before (taken unchanged from the last compile, so the compile need not compare them:
    /// [`Program::recompile_knowing`]).
    same_ports: Vec<bool>,
}

/// The parsed flows of the last program compiled, per datapath, so that a new program whose
/// datapath carries the same flows is not parsed again, and the datapaths whose flows changed
/// are known exactly (the ones not taken from the cache).
///
/// It holds what [`SpecCache::compile`] last compiled successfully; the `prev` program handed
/// to the next [`SpecCache::compile`] must be that program (the datapath's running one). A
/// failed build or compile empties it (the next program is then parsed whole and the caller's
/// own list of changed datapaths is used).
#[derive(Debug, Default, Clone)]
pub struct SpecCache {
    dps: HashMap<String, ParsedDp>,
    valid: bool,
    /// The feature level of the program the cached flows were parsed for (`None`: nothing
    /// compiled yet). Another level parses every flow again.
    level: Option<Option<String>>,
    /// The datapaths whose flows the last successful compile parsed (not taken from here).
    parsed: Vec<String>,
    /// How many flows the last successful compile parsed (the rest came from here).
    parsed_flows: usize,
    /// How compiles through it run (worker threads).
    opts: CompileOptions,
    /// The address sets and port groups of the last program compiled (`None`: not known).
    sets: Option<Sets>,
    /// Ports activated here ([`SpecCache::set_active`]).
    active: BTreeSet<String>,
}

/// What may differ between the cached program and a new one (a delta's changes): everything
/// else is taken from the cache without being compared.
#[derive(Debug, Clone, Copy)]
pub struct Knowing<'a> {
    /// Datapaths changed or added.
    pub datapaths: &'a BTreeSet<String>,
    /// Address sets added, changed or removed.
    pub address_sets: &'a BTreeSet<String>,
    /// Port groups added, changed or removed.
    pub port_groups: &'a BTreeSet<String>,
}

/// A spec built with a [`SpecCache`], waiting for [`SpecCache::compile`].
#[derive(Debug)]
pub struct CachedSpec {
    built: Built,
    /// The cache held the previous program's flows when this was built.
    was_valid: bool,
}

impl CachedSpec {
    /// The spec.
    pub fn spec(&self) -> &ProgramSpec {
        &self.built.spec
    }

    /// Flows that did not parse and run their last good version instead.
    pub fn reported(&self) -> &[FlowErrorMsg] {
        &self.built.errors
    }

    /// How many datapaths' flows came from the cache (not parsed again).
    pub fn reused(&self) -> usize {
        self.built.meta.iter().filter(|(hit, _)| *hit).count()
    }

    /// The datapaths whose flows changed since the cached program (parsed again), when the
    /// cache held that program; `None` when it did not (nothing is known).
    pub fn changed(&self) -> Option<Vec<&str>> {
        self.was_valid.then(|| {
            self.built
                .spec
                .datapaths
                .iter()
                .zip(&self.built.meta)
                .filter(|(_, (hit, _))| !hit)
                .map(|(d, _)| d.name.as_str())
                .collect()
        })
    }
}

impl SpecCache {
    /// An empty cache.
    pub fn new() -> SpecCache {
        SpecCache::default()
    }

    /// An empty cache whose compiles run with `opts` (worker threads; the result is the
    /// same for every value).
    pub fn with_options(opts: CompileOptions) -> SpecCache {
        SpecCache {
            opts,
            ..SpecCache::default()
        }
    }

    /// Whether it holds the flows of the last program compiled through it.
    pub fn is_valid(&self) -> bool {
        self.valid
    }

    /// The datapaths (names) whose flows the last successful compile through this cache parsed
    /// again, in program order: the ones it did not take from here.
    pub fn last_parsed(&self) -> &[String] {
        &self.parsed
    }

    /// How many flows the last successful compile through this cache parsed: in the datapaths
    /// of [`SpecCache::last_parsed`], only the new and changed flows (the others' parses are
    /// taken from here one by one).
    pub fn last_parsed_flows(&self) -> usize {
        self.parsed_flows
    }

    /// Forgets everything (the running program was replaced another way).
    pub fn clear(&mut self) {
        self.dps.clear();
        self.valid = false;
        self.level = None;
        self.sets = None;
    }

    /// The ports activated on this chassis (a RARP, GARP or NA, or the controller's
    /// `SetPortActive`) while the program still says they wait: `is_chassis_resident()` holds
    /// for them from the activation on, as ovn-controller counts a port resident once it has
    /// claimed it, before SB says `additional-chassis-activated`. (Without it, the frames a
    /// migrated VM sends between its activation and the controller's next program would miss
    /// its distributed NAT.) Returns whether the set changed; the next build uses it.
    pub fn set_active(&mut self, active: &BTreeSet<String>) -> bool {
        if self.active == *active {
            return false;
        }
        self.active.clone_from(active);
        true
    }

    /// [`to_spec`] reusing the cached specs of datapaths whose flows did not change. Takes
    /// the cached entries out: hand the result to [`SpecCache::compile`], which puts them
    /// back on success.
    pub fn build(
        &mut self,
        msg: &ProgramMsg,
        local: &BTreeMap<String, u32>,
    ) -> Result<CachedSpec, String> {
        let mut was_valid = std::mem::take(&mut self.valid);
        let mut old = std::mem::take(&mut self.dps);
        if self.level.as_ref() != Some(&msg.feature_level) {
            // Another language: every flow is parsed again and every datapath counts as
            // changed (identical texts may now fail, or now succeed).
            old.clear();
            was_valid = true;
        }
        self.sets = None;
        match build_spec(msg, local, &self.active, Some(&mut old), None, None) {
            Ok(built) => Ok(CachedSpec { built, was_valid }),
            Err(e) => {
                self.restore(old, was_valid);
                Err(e)
            }
        }
    }

    /// [`SpecCache::build`] for a program known to differ from the cached one only in the
    /// datapaths, address sets and port groups `may_differ` names (a delta's changes): the
    /// other datapaths take their cached flows, ports and groups without comparing them (only
    /// local port locations are resolved again), and the other sets are not parsed again. When
    /// the cache does not hold the previous program (or the feature level changed) this is
    /// [`SpecCache::build`].
    pub fn build_knowing(
        &mut self,
        msg: &ProgramMsg,
        local: &BTreeMap<String, u32>,
        may_differ: Knowing<'_>,
    ) -> Result<CachedSpec, String> {
        if !self.valid || self.level.as_ref() != Some(&msg.feature_level) {
            return self.build(msg, local);
        }
        self.valid = false;
        let mut old = std::mem::take(&mut self.dps);
        let sets = self.sets.take();
        match build_spec(
            msg,
            local,
            &self.active,
            Some(&mut old),
            Some(may_differ),
            sets,
        ) {
            Ok(built) => Ok(CachedSpec {
                built,
                was_valid: true,
            }),
            Err(e) => {
                self.restore(old, true);
                Err(e)
            }
        }
    }

    /// A build failed (the running program stays): the entries it had not used yet go back
    /// (what it took out is parsed again next time, and counts as changed).
    fn restore(&mut self, old: HashMap<String, ParsedDp>, was_valid: bool) {
        self.dps = old;
        self.valid = was_valid;
    }

    /// Compiles a spec from [`SpecCache::build`] (the same `msg`), sharing tables with `prev`
    /// for every datapath that did not change. `changed` adds datapaths the caller knows
    /// changed (needed only when the cache was not valid, see [`CachedSpec::changed`]).
    pub fn compile(
        &mut self,
        msg: &ProgramMsg,
        built: CachedSpec,
        prev: Option<&Program>,
        changed: &[&str],
    ) -> Result<(Program, Vec<FlowErrorMsg>), String> {
        self.compile_holding(msg, built, prev, None, changed)
            .map(|c| (c.program, c.errors))
    }

    /// [`SpecCache::compile`] that may hold datapaths at the flows they ran in `prev_msg`
    /// (the message `prev` was compiled from; see [`Compiled::held`]).
    pub fn compile_holding(
        &mut self,
        msg: &ProgramMsg,
        built: CachedSpec,
        prev: Option<&Program>,
        prev_msg: Option<&ProgramMsg>,
        changed: &[&str],
    ) -> Result<Compiled, String> {
        self.compile_prev(msg, built, prev, PrevProgram::from_msg(prev_msg), changed)
    }

    /// [`SpecCache::compile_holding`] with the previous program as a [`PrevProgram`].
    pub fn compile_prev(
        &mut self,
        msg: &ProgramMsg,
        built: CachedSpec,
        prev: Option<&Program>,
        prev_msg: PrevProgram<'_>,
        changed: &[&str],
    ) -> Result<Compiled, String> {
        let mut names: Vec<String> = changed.iter().map(|s| s.to_string()).collect();
        if let Some(c) = built.changed() {
            names.extend(c.into_iter().map(str::to_string));
        }
        let parsed: Vec<String> = built
            .built
            .spec
            .datapaths
            .iter()
            .zip(&built.built.meta)
            .filter(|(_, (hit, _))| !hit)
            .map(|(d, _)| d.name.clone())
            .collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let Built {
            spec,
            errors,
            meta,
            parsed_flows,
            same_ports,
        } = built.built;
        let CompileOutcome {
            prog,
            reported,
            spec,
            swapped,
            held,
        } = compile_built(
            msg,
            spec,
            Origins(&meta),
            errors,
            prev,
            prev_msg,
            (&refs, &same_ports),
            &self.opts,
        )?;
        self.sets = Some(spec.sets);
        for ((d, (_, m)), di) in spec.datapaths.into_iter().zip(meta).zip(0..) {
            if swapped.contains(&di) {
                continue;
            }
            self.dps.insert(
                d.name,
                ParsedDp {
                    flows: d.flows,
                    ports: d.ports,
                    groups: d.groups,
                    used: m.used,
                    last_good: m.last_good,
                    syntax: m.syntax,
                },
            );
        }
        self.valid = true;
        self.level = Some(msg.feature_level.clone());
        self.parsed = parsed;
        self.parsed_flows = parsed_flows;
        Ok(Compiled {
            program: prog,
            errors: reported,
            held,
        })
    }
}

/// The program the running one was compiled from, for holding a datapath at the flows it ran
/// ([`Compiled::held`]).
#[derive(Debug, Clone, Copy)]
pub enum PrevProgram<'a> {
    /// None (nothing is held).
    None,
    /// This message.
    Msg(&'a ProgramMsg),
    /// The running message changed in place by a delta: `now` is the result, `undo` holds what
    /// the delta replaced.
    Delta {
        /// The message after the delta.
        now: &'a ProgramMsg,
        /// What the delta replaced.
        undo: &'a crate::delta::Undo,
    },
}

impl<'a> PrevProgram<'a> {
    fn from_msg(m: Option<&'a ProgramMsg>) -> PrevProgram<'a> {
        m.map_or(PrevProgram::None, PrevProgram::Msg)
    }

    fn is_none(&self) -> bool {
        matches!(self, PrevProgram::None)
    }

    /// The flows datapath `name` ran, if it ran.
    pub fn flows_of(&self, name: &str) -> Option<std::borrow::Cow<'a, [Arc<FlowMsg>]>> {
        let find = |m: &'a ProgramMsg| {
            m.datapaths
                .iter()
                .find(|d| d.name == name)
                .map(|d| std::borrow::Cow::Borrowed(d.flows.as_slice()))
        };
        match *self {
            PrevProgram::None => None,
            PrevProgram::Msg(m) => find(m),
            PrevProgram::Delta { now, undo } => match undo.prev_flows(name, now) {
                crate::delta::PrevFlows::Same => find(now),
                crate::delta::PrevFlows::Absent => None,
                crate::delta::PrevFlows::Were(f) => Some(f),
            },
        }
    }

    /// Its feature level.
    fn level(&self) -> Option<LevelCheck> {
        match *self {
            PrevProgram::None => None,
            PrevProgram::Msg(m) => level_of(m).ok().flatten(),
            PrevProgram::Delta { undo, .. } => {
                level_named(undo.prev_feature_level()).ok().flatten()
            }
        }
    }
}

/// A compiled program with its flow errors and the datapaths held at what they ran before.
#[derive(Debug)]
pub struct Compiled {
    /// The program.
    pub program: Program,
    /// Every flow error.
    pub errors: Vec<FlowErrorMsg>,
    /// Datapaths held at the flows they ran in the previous message: the caller keeps those
    /// flows (not the new message's) as what runs, so the next hold and a restarted
    /// controller's hello see them.
    pub held: Vec<String>,
}

/// [`compile_cached`] that may hold a datapath at the flows it ran in `prev_msg` (the
/// message `prev` was compiled from): when some flow of the datapath has no version that
/// compiles (its text and its last good text fail), the whole datapath keeps running what
/// it ran, and its errors are reported with `held: true`.
pub fn compile_cached_holding(
    msg: &ProgramMsg,
    local: &BTreeMap<String, u32>,
    prev: Option<&Program>,
    prev_msg: Option<&ProgramMsg>,
    cache: &mut SpecCache,
    changed: &[&str],
) -> Result<Compiled, String> {
    let built = cache.build(msg, local)?;
    cache.compile_holding(msg, built, prev, prev_msg, changed)
}

/// [`compile_changed`] through `cache`: unchanged datapaths are not parsed again, and the
/// datapaths whose flows changed are the ones the cache did not have (plus `changed`).
pub fn compile_cached(
    msg: &ProgramMsg,
    local: &BTreeMap<String, u32>,
    prev: Option<&Program>,
    cache: &mut SpecCache,
    changed: &[&str],
) -> Result<(Program, Vec<FlowErrorMsg>), String> {
    let built = cache.build(msg, local)?;
    cache.compile(msg, built, prev, changed)
}

/// Checks the zone map: never zone 0, and every zone the program uses is in it.
pub fn check_zones(msg: &ProgramMsg) -> Result<(), String> {
    if let Some((name, _)) = msg.zones.iter().find(|(_, z)| **z == 0) {
        return Err(format!(
            "zone map gives zone 0 to \"{name}\": zone 0 belongs to the host"
        ));
    }
    // A bit per zone (8 KiB): every port of the program is looked up on every install.
    let mut known = vec![0u64; 1 << 10];
    for z in msg.zones.values() {
        known[usize::from(*z >> 6)] |= 1 << (z & 63);
    }
    let has = |z: u16| known[usize::from(z >> 6)] & (1 << (z & 63)) != 0;
    let need = |z: u16, what: &dyn Fn() -> String| {
        if z != 0 && !has(z) {
            Err(format!(
                "{} uses zone {z}, which is not in the zone map",
                what()
            ))
        } else {
            Ok(())
        }
    };
    for d in &msg.datapaths {
        if let Some((dn, sn)) = d.router_zones {
            if dn == 0 || sn == 0 {
                return Err(format!("router {}: zone 0 belongs to the host", d.name));
            }
            need(dn, &|| format!("router {} (DNAT)", d.name))?;
            need(sn, &|| format!("router {} (SNAT)", d.name))?;
        }
        for p in d.ports.iter() {
            // A switch port's conntrack (stateful ACLs, LB) runs in its own zone; a router's
            // ports use the router's zones.
            if d.router_zones.is_none() && p.zone == 0 {
                return Err(format!(
                    "port {} of switch {}: zone 0 belongs to the host; every switch port needs \
                     a zone of its own from the zone map (\"lsp/{}\")",
                    p.name, d.name, p.name
                ));
            }
            need(p.zone, &|| format!("port {} of {}", p.name, d.name))?;
        }
    }
    for (sw, z) in &msg.switch_snat_zones {
        if *z == 0 {
            return Err(format!("switch {sw}: SNAT zone 0 belongs to the host"));
        }
        need(*z, &|| format!("switch {sw} (SNAT)"))?;
    }
    Ok(())
}

/// Builds the spec. Flow texts that do not parse fall back to `last_good` (reported in the
/// returned list); flows that do not parse at all stay in the spec with their parse error (the
/// compiler reports them).
fn build_spec(
    msg: &ProgramMsg,
    local: &BTreeMap<String, u32>,
    active: &BTreeSet<String>,
    mut old: Option<&mut HashMap<String, ParsedDp>>,
    may_differ: Option<Knowing<'_>>,
    old_sets: Option<Sets>,
) -> Result<Built, String> {
    check_zones(msg)?;
    let level = level_of(msg)?;
    let level = level.as_ref();
    let mut hits = Vec::with_capacity(msg.datapaths.len());
    let mut misses = Vec::new();
    let mut spec = ProgramSpec {
        owner: Owner(msg.owner),
        ..ProgramSpec::default()
    };
    let mut errors = Vec::new();
    let mut parsed_flows = 0;
    let mut parses = Parses::default();
    let mut same_ports = Vec::with_capacity(msg.datapaths.len());
    for d in &msg.datapaths {
        let kind = match d.router_zones {
            None => DatapathKind::Switch,
            Some((dnat_zone, snat_zone)) => DatapathKind::Router {
                dnat_zone,
                snat_zone,
            },
        };
        let mut entry = old.as_deref_mut().and_then(|c| c.remove(&d.name));
        // Known unchanged (and of the same lengths, a cheap guard): taken without comparing.
        let trusted = entry.as_ref().is_some_and(|c| {
            may_differ.is_some_and(|m| !m.datapaths.contains(&d.name))
                && c.flows.len() == d.flows.len()
                && c.ports.len() == d.ports.len()
                && c.groups.len() == d.groups.len()
        });
        let kept = match &mut entry {
            Some(c) if trusted => {
                Some((std::mem::take(&mut c.ports), std::mem::take(&mut c.groups)))
            }
            _ => None,
        };
        let (ports, groups) = match kept {
            Some((mut ports, groups)) => {
                // The local map is not the delta's: local locations are resolved again, and so
                // is the residency of ports activated here.
                let mut moved = false;
                for (p, m) in ports.iter_mut().zip(d.ports.iter()) {
                    if let LocationMsg::Local(iface) = &m.location {
                        let loc = local
                            .get(iface)
                            .map_or(PortLocation::Unbound, |&id| PortLocation::Local(id));
                        if p.location != loc {
                            p.location = loc;
                            moved = true;
                        }
                    }
                    let resident = resident(m, active);
                    if p.resident != resident {
                        p.resident = resident;
                        moved = true;
                    }
                }
                // Unchanged ports and groups: the compile may share their maps unchecked.
                same_ports.push(!moved);
                (ports, groups)
            }
            None => {
                same_ports.push(false);
                (ports_of(d, local, active), groups_of(d))
            }
        };
        // A datapath whose flows changed still takes each unchanged flow's parse from the
        // cache (`rest`); only the new and changed flows are parsed.
        let (cached, mut rest) = match entry {
            Some(c) if trusted || c.matches(&d.flows) => (Some(c), None),
            other => (None, other.map(Reusable::new)),
        };
        let flows = match cached {
            Some(c) => {
                errors.extend(c.syntax.iter().cloned());
                hits.push(Some(CacheMeta {
                    used: c.used,
                    last_good: c.last_good,
                    syntax: c.syntax,
                }));
                c.flows
            }
            None => {
                let mut flows = Vec::with_capacity(d.flows.len());
                let mut used_all = Vec::with_capacity(d.flows.len());
                let mut syntax = Vec::new();
                for (mi, f) in d.flows.iter().enumerate() {
                    if let Some(fs) = rest.as_mut().and_then(|r| r.take(f)) {
                        debug_assert_eq!(flows.len(), mi);
                        used_all.push(Used::Primary);
                        flows.push(fs);
                        continue;
                    }
                    parsed_flows += 1;
                    let mut fs = parses.flow_spec(f, (&f.matches, &f.actions), level);
                    let mut used = Used::Primary;
                    if let Some(err) = fs.parse_error.clone()
                        && let Some((m, a)) = &f.last_good
                        && !msg.no_last_good
                    {
                        let lg = parses.flow_spec(f, (m, a), level);
                        if lg.parse_error.is_none() {
                            syntax.push(FlowErrorMsg {
                                id: f.id.to_string(),
                                datapath: d.name.clone(),
                                reason: format!("syntax: {err}"),
                                kept_last_good: true,
                                failed_closed: false,
                                held: false,
                            });
                            fs = lg;
                            used = Used::LastGood;
                        }
                    }
                    debug_assert_eq!(flows.len(), mi);
                    used_all.push(used);
                    flows.push(fs);
                }
                errors.extend(syntax.iter().cloned());
                hits.push(None);
                misses.push(CacheMeta {
                    used: used_all,
                    last_good: LastGoods::of(&d.flows),
                    syntax,
                });
                flows
            }
        };
        spec.datapaths.push(DatapathSpec {
            name: d.name.clone(),
            tunnel_key: d.tunnel_key,
            kind,
            ports,
            groups,
            flows,
        });
    }
    for n in &msg.neighbours {
        spec.neighbours.push(Neighbour {
            datapath: n.datapath.clone(),
            port: n.port.clone(),
            ip: parse_ip(|| format!("neighbour on {} {}", n.datapath, n.port), &n.ip)?,
            mac: n.mac,
        });
    }
    spec.sets = sets_of(msg, may_differ, old_sets)?;
    spec.fdb = msg
        .fdb
        .iter()
        .map(|f| FdbSpec {
            datapath: f.datapath.clone(),
            port: f.port.clone(),
            mac: f.mac,
        })
        .collect();
    for v in &msg.lb_vips {
        spec.lb_vips.push(LbVipSpec {
            datapath: v.datapath.clone(),
            ip: parse_ip(|| format!("load-balancer VIP on {}", v.datapath), &v.ip)?,
            port: v.port,
            proto: v.proto,
        });
    }
    spec.switch_snat_zones = msg.switch_snat_zones.clone();
    spec.dns = msg
        .dns
        .iter()
        .map(|d| DnsSpec {
            datapath: d.datapath.clone(),
            records: d.records.clone(),
        })
        .collect();
    for c in &msg.chassis_table {
        parse_ip(|| format!("chassis {} (id {})", c.name, c.id), &c.ip)?;
    }
    // Cache metadata in datapath order: a hit's, or the next miss's.
    let mut misses = misses.into_iter();
    let meta = hits
        .into_iter()
        .map(|h| match h {
            Some(m) => (true, m),
            None => (false, misses.next().unwrap_or_default()),
        })
        .collect();
    Ok(Built {
        spec,
        errors,
        meta,
        parsed_flows,
        same_ports,
    })
}

/// Whether `is_chassis_resident()` holds for port `m` here: as the program says, or, for a
/// local port waiting for its activation, once it was activated here ([`SpecCache::set_active`]).
fn resident(m: &PortMsg, active: &BTreeSet<String>) -> bool {
    m.resident
        || (m.activation.is_some()
            && matches!(m.location, LocationMsg::Local(_))
            && active.contains(&m.name))
}

/// A datapath's ports as the spec has them, local locations resolved through `local`.
fn ports_of(
    d: &DatapathMsg,
    local: &BTreeMap<String, u32>,
    active: &BTreeSet<String>,
) -> Vec<PortSpec> {
    d.ports
        .iter()
        .map(|p| PortSpec {
            name: p.name.clone(),
            key: p.key,
            location: match &p.location {
                LocationMsg::Local(iface) => match local.get(iface) {
                    Some(&id) => PortLocation::Local(id),
                    None => PortLocation::Unbound,
                },
                LocationMsg::Remote(chassis) => PortLocation::Remote { chassis: *chassis },
                LocationMsg::Patch(peer) => PortLocation::Patch { peer: peer.clone() },
                LocationMsg::Unbound => PortLocation::Unbound,
                LocationMsg::Redirect(port) => PortLocation::Redirect { port: port.clone() },
            },
            zone: p.zone,
            kind: PortKind::from_sb(&p.kind),
            resident: resident(p, active),
            also_remote: p.also_remote.clone(),
            activation: p.activation.map(Into::into),
            addresses: p.addresses.clone(),
            port_security: p.port_security.clone(),
        })
        .collect()
}

/// A datapath's multicast groups as the spec has them.
fn groups_of(d: &DatapathMsg) -> Vec<GroupSpec> {
    d.groups
        .iter()
        .map(|g| GroupSpec {
            name: g.name.clone(),
            key: g.key,
            members: g.members.clone(),
        })
        .collect()
}

/// The program's address sets (members parsed) and port groups. With `old` (the cached
/// program's) and `knowing`, only the sets `knowing` names are parsed again; the others are
/// taken from `old`, and the ones `msg` no longer has are dropped.
fn sets_of(
    msg: &ProgramMsg,
    knowing: Option<Knowing<'_>>,
    old: Option<Sets>,
) -> Result<Sets, String> {
    let parse = |name: &str, members: &[String]| {
        members
            .iter()
            .map(|m| parse_address(m).map_err(|e| format!("address set {name}: {e}")))
            .collect::<Result<Vec<_>, _>>()
    };
    let (Some(k), Some(mut sets)) = (knowing, old) else {
        let mut sets = Sets::default();
        for (name, members) in &msg.address_sets {
            sets.addr_sets.insert(name.clone(), parse(name, members)?);
        }
        for (name, ports) in &msg.port_groups {
            sets.port_groups.insert(name.clone(), ports.clone());
        }
        return Ok(sets);
    };
    sets.addr_sets
        .retain(|n, _| msg.address_sets.contains_key(n));
    for (name, members) in &msg.address_sets {
        if k.address_sets.contains(name) || !sets.addr_sets.contains_key(name) {
            sets.addr_sets.insert(name.clone(), parse(name, members)?);
        }
    }
    sets.port_groups
        .retain(|n, _| msg.port_groups.contains_key(n));
    for (name, ports) in &msg.port_groups {
        if k.port_groups.contains(name) || !sets.port_groups.contains_key(name) {
            sets.port_groups.insert(name.clone(), ports.clone());
        }
    }
    Ok(sets)
}

/// [`ProgramMsg`] → [`ProgramSpec`], with the flows whose text did not parse replaced by their
/// last good text where there is one (listed with `kept_last_good: true`). Flows that still do
/// not parse stay in the spec with their parse error; [`compile`] reports them.
pub fn to_spec(
    msg: &ProgramMsg,
    local: &BTreeMap<String, u32>,
) -> Result<(ProgramSpec, Vec<FlowErrorMsg>), String> {
    build_spec(msg, local, &BTreeSet::new(), None, None, None).map(|b| (b.spec, b.errors))
}

fn error_msg(e: &FlowError, kept: bool) -> FlowErrorMsg {
    FlowErrorMsg {
        id: e.id.0.to_string(),
        datapath: e.datapath.clone(),
        reason: format!("{}: {}", e.kind, e.message),
        kept_last_good: kept,
        failed_closed: false,
        held: false,
    }
}

/// Finds the spec flow a [`FlowError`] is about.
fn locate(spec: &ProgramSpec, e: &FlowError) -> Option<(usize, usize)> {
    let di = spec.datapaths.iter().position(|d| d.name == e.datapath)?;
    let egress = e.pipeline == "egress";
    let fi = spec.datapaths[di].flows.iter().position(|f| {
        f.id == e.id
            && f.table == e.table
            && f.priority == e.priority
            && (f.pipeline == Pipe::Egress) == egress
    })?;
    Some((di, fi))
}

/// Compiles `msg` for a datapath whose local ports have the ids in `local`, sharing the
/// unchanged datapaths' tables with `prev` when given. Flows that fail (to parse or to compile)
/// run their `last_good` text when it compiles; every failure is in the returned list.
pub fn compile(
    msg: &ProgramMsg,
    local: &BTreeMap<String, u32>,
    prev: Option<&Program>,
) -> Result<(Program, Vec<FlowErrorMsg>), String> {
    compile_changed(msg, local, prev, &[])
}

/// [`compile`] for a new program: `changed` names the datapaths whose flows differ from the
/// ones `prev` was compiled from (their tables are never reused; see
/// [`Program::recompile`]). [`compile`] passes none, which is right only when the flows are
/// the same (a port change).
pub fn compile_changed(
    msg: &ProgramMsg,
    local: &BTreeMap<String, u32>,
    prev: Option<&Program>,
    changed: &[&str],
) -> Result<(Program, Vec<FlowErrorMsg>), String> {
    let b = build_spec(msg, local, &BTreeSet::new(), None, None, None)?;
    compile_built(
        msg,
        b.spec,
        Origins(&b.meta),
        b.errors,
        prev,
        PrevProgram::None,
        (changed, &[]),
        &CompileOptions::default(),
    )
    .map(|o| (o.prog, o.reported))
}

/// What [`compile_built`] returns besides the program and the errors.
struct CompileOutcome {
    prog: Program,
    reported: Vec<FlowErrorMsg>,
    spec: ProgramSpec,
    /// Datapaths (indexes) whose spec flows are not the message's parse: not to be cached.
    swapped: BTreeSet<usize>,
    /// Datapaths (names) held at the flows they ran before.
    held: Vec<String>,
}

/// One error of a compile: the spec flow it leaves without a running version (None: a
/// version runs, or the flow is not found), the report, and whether it is a language error.
type Outcome = (Option<(usize, usize)>, FlowErrorMsg, bool);

/// One message flow's spec as it ran: its text, else its last good text when that parses.
fn ran_spec(f: &FlowMsg, level: Option<&LevelCheck>) -> FlowSpec {
    let fs = flow_spec(f, (&f.matches, &f.actions), level);
    if fs.parse_error.is_some()
        && let Some((m, a)) = &f.last_good
    {
        let lg = flow_spec(f, (m, a), level);
        if lg.parse_error.is_none() {
            return lg;
        }
    }
    fs
}

/// The compile step: per-flow last good versions for flows that fail, then datapaths held at
/// what they ran before (`prev_msg`) where a flow still has no version, then fail-closed
/// drops for security flows with no version in datapaths that cannot be held.
#[allow(clippy::too_many_arguments)]
fn compile_built(
    msg: &ProgramMsg,
    mut spec: ProgramSpec,
    origins: Origins<'_>,
    mut reported: Vec<FlowErrorMsg>,
    prev: Option<&Program>,
    prev_msg: PrevProgram<'_>,
    (changed, same_ports): (&[&str], &[bool]),
    opts: &CompileOptions,
) -> Result<CompileOutcome, String> {
    let level = level_of(msg)?;
    let (mut prog, errs) = match prev {
        Some(p) => p.recompile_knowing(&spec, changed, same_ports, opts),
        None => Program::compile_with(&spec, opts),
    }
    .map_err(|e| e.to_string())?;
    // Flows whose primary text failed to compile and that have a last good version.
    let mut retry = Vec::new();
    for e in &errs {
        if let Some((di, fi)) = locate(&spec, e)
            && let Some((mi, Used::Primary)) = origins.get(&(di, fi))
            && let Some(lg) = &msg.datapaths[di].flows[mi].last_good
            && !msg.no_last_good
        {
            retry.push((di, fi, mi, lg.clone(), e.clone()));
        }
    }
    // Every datapath whose spec is swapped below is compiled again, cached or not.
    let mut dps = BTreeSet::new();
    let run = |spec: &ProgramSpec, dps: &BTreeSet<usize>| {
        let mut names: Vec<&str> = changed.to_vec();
        names.extend(dps.iter().map(|&di| spec.datapaths[di].name.as_str()));
        match prev {
            Some(p) => p.recompile_knowing(spec, &names, same_ports, opts),
            None => Program::compile_with(spec, opts),
        }
        .map_err(|e| e.to_string())
    };
    // Every error, with the spec flow it leaves without a running version (None: a version
    // runs, or the flow is not found).
    // Whether the error is the language's (a text that does not parse, or not at the
    // program's feature level: version skew) rather than the content's (an unknown set, an
    // action that cannot run).
    let syntax = |e: &FlowError| e.kind == FlowErrorKind::Syntax;
    let mut outcome: Vec<Outcome> = Vec::new();
    if retry.is_empty() {
        outcome.extend(
            errs.iter()
                .map(|e| (locate(&spec, e), error_msg(e, false), syntax(e))),
        );
    } else {
        let mut swapped = BTreeMap::new();
        for (di, fi, mi, (m, a), e) in retry {
            let f = &msg.datapaths[di].flows[mi];
            spec.datapaths[di].flows[fi] = flow_spec(f, (&m, &a), level.as_ref());
            swapped.insert((di, fi), e);
            dps.insert(di);
        }
        let (p2, errs2) = run(&spec, &dps)?;
        prog = p2;
        let still_bad: BTreeSet<(usize, usize)> =
            errs2.iter().filter_map(|e| locate(&spec, e)).collect();
        for (pos, e) in &swapped {
            // The primary failed; the last good version runs unless it failed too.
            let kept = !still_bad.contains(pos);
            outcome.push(((!kept).then_some(*pos), error_msg(e, kept), syntax(e)));
        }
        for e in &errs2 {
            match locate(&spec, e) {
                Some(pos) if swapped.contains_key(&pos) => {}
                pos => outcome.push((pos, error_msg(e, false), syntax(e))),
            }
        }
    }
    // Flows with no running version, by datapath.
    let no_version: BTreeSet<(usize, usize)> = outcome
        .iter()
        .filter(|(_, m, _)| !m.kept_last_good)
        .filter_map(|(pos, _, _)| *pos)
        .collect();
    // A datapath that ran before is held at what it ran when one of its flows has no version
    // because of the language (version skew: mixing two pipeline designs, the parsable flows
    // of the new one and the old one's last good versions, is not sound). A flow whose content
    // fails (an unknown set, say) does not hold its datapath: it fails alone, below.
    let language: BTreeSet<usize> = outcome
        .iter()
        .filter(|(_, m, syn)| !m.kept_last_good && *syn)
        .filter_map(|(pos, _, _)| pos.map(|(di, _)| di))
        .collect();
    let mut held: BTreeSet<usize> = BTreeSet::new();
    if !msg.no_last_good && !language.is_empty() && !prev_msg.is_none() {
        let old_level = prev_msg.level();
        // The flows as they ran: at this program's level when it has one.
        let lvl = level.as_ref().or(old_level.as_ref());
        for &di in &language {
            let name = &spec.datapaths[di].name;
            if let Some(old_flows) = prev_msg.flows_of(name)
                && held.insert(di)
            {
                spec.datapaths[di].flows = old_flows.iter().map(|f| ran_spec(f, lvl)).collect();
                dps.insert(di);
            }
        }
    }
    // Security flows with no version, in datapaths not held, fail closed.
    let closing: BTreeSet<(usize, usize)> = no_version
        .iter()
        .filter(|(di, _)| !held.contains(di))
        .filter(|pos| {
            origins
                .get(pos)
                .is_some_and(|(mi, _)| is_security_stage(&msg.datapaths[pos.0].flows[mi].stage))
        })
        .copied()
        .collect();
    for &(di, fi) in &closing {
        if let Some((mi, _)) = origins.get(&(di, fi)) {
            spec.datapaths[di].flows[fi] = fail_closed_spec(&msg.datapaths[di].flows[mi]);
            dps.insert(di);
        }
    }
    // Previous flows of held datapaths that no longer compile (a set they name is gone, say):
    // reported, never silently absent.
    let mut lost = Vec::new();
    if !closing.is_empty() || !held.is_empty() {
        let (p3, errs3) = run(&spec, &dps)?;
        prog = p3;
        let mut bad = BTreeSet::new();
        for e in &errs3 {
            match locate(&spec, e) {
                Some((di, _)) if held.contains(&di) => lost.push(error_msg(e, false)),
                Some(pos) => {
                    bad.insert(pos);
                }
                None => {}
            }
        }
        for (pos, m, _) in &mut outcome {
            if let Some(p) = pos
                && closing.contains(p)
                && !bad.contains(p)
            {
                m.failed_closed = true;
            }
        }
    }
    let held_names: Vec<String> = held
        .iter()
        .map(|&di| spec.datapaths[di].name.clone())
        .collect();
    // Every error of a held datapath: its previous flows run.
    for e in reported
        .iter_mut()
        .chain(outcome.iter_mut().map(|(_, m, _)| m))
    {
        if held_names.contains(&e.datapath) {
            e.held = true;
            e.kept_last_good = true;
            e.failed_closed = false;
        }
    }
    reported.extend(outcome.into_iter().map(|(_, m, _)| m));
    // Held, but this previous flow runs no version: left out.
    reported.extend(lost.into_iter().map(|e| FlowErrorMsg { held: true, ..e }));
    Ok(CompileOutcome {
        prog,
        reported,
        spec,
        swapped: dps,
        held: held_names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{DatapathMsg, PortMsg};

    fn msg(flows: Vec<FlowMsg>) -> ProgramMsg {
        ProgramMsg {
            generation: 1,
            chassis: "hv1".into(),
            datapaths: vec![
                DatapathMsg {
                    name: "sw0".into(),
                    tunnel_key: 1,
                    ports: vec![PortMsg {
                        name: "p1".into(),
                        key: 1,
                        location: LocationMsg::Local("p1".into()),
                        zone: 1,
                        ..PortMsg::default()
                    }]
                    .into(),
                    flows: flows.into_iter().map(Arc::new).collect(),
                    ..DatapathMsg::default()
                }
                .into(),
            ],
            zones: [("lsp/p1".to_string(), 1)].into(),
            ..ProgramMsg::default()
        }
    }

    fn flow(id: &str, m: &str, a: &str, lg: Option<(&str, &str)>) -> FlowMsg {
        FlowMsg {
            matches: m.into(),
            actions: a.into(),
            id: id.into(),
            last_good: lg.map(|(m, a)| (m.into(), a.into())),
            ..FlowMsg::default()
        }
    }

    #[test]
    fn bad_text_falls_back_to_last_good() {
        let local = [("p1".to_string(), 7)].into();
        let m = msg(vec![
            flow("a", "ip4 &&& x", "next;", Some(("ip4", "next;"))),
            flow("b", "ip4 &&& x", "next;", None),
            flow(
                "c",
                "$nosuchset == ip4.src",
                "next;",
                Some(("ip6", "next;")),
            ),
            flow("d", "ip4", "next;", None),
        ]);
        let (prog, errs) = compile(&m, &local, None).unwrap();
        let by_id: BTreeMap<_, _> = errs.iter().map(|e| (e.id.as_str(), e)).collect();
        assert!(by_id["a"].kept_last_good, "{errs:?}");
        assert!(!by_id["b"].kept_last_good, "{errs:?}");
        assert!(by_id["c"].kept_last_good, "{errs:?}");
        assert!(!by_id.contains_key("d"));
        assert_eq!(errs.len(), 3);
        // a, c (as last good) and d compiled.
        assert_eq!(prog.flow_count(), 3);
    }

    #[test]
    fn the_spec_cache_reports_what_a_fresh_compile_reports() {
        let local = [("p1".to_string(), 7)].into();
        let m = msg(vec![
            flow("a", "ip4 &&& x", "next;", Some(("ip4", "next;"))),
            flow("b", "ip4 &&& x", "next;", None),
            flow(
                "c",
                "$nosuchset == ip4.src",
                "next;",
                Some(("ip6", "next;")),
            ),
            flow("d", "ip4", "next;", None),
        ]);
        let (fresh, want) = compile(&m, &local, None).unwrap();
        let mut cache = SpecCache::new();
        let (p1, e1) = compile_cached(&m, &local, None, &mut cache, &[]).unwrap();
        assert_eq!(e1, want);
        assert!(cache.is_valid());
        // The same message again: taken from the cache (c was swapped after a compile error,
        // so its datapath is parsed again), same program and errors.
        let built = cache.build(&m, &local).unwrap();
        assert_eq!(built.reported().len(), 1, "{:?}", built.reported());
        let (p2, e2) = cache.compile(&m, built, Some(&p1), &[]).unwrap();
        assert_eq!(e2, want);
        assert_eq!(p2.flow_count(), fresh.flow_count());
        // Without the compile-error swap the datapath comes from the cache and is reused.
        let m2 = msg(vec![
            flow("a", "ip4 &&& x", "next;", Some(("ip4", "next;"))),
            flow("d", "ip4", "next;", None),
        ]);
        let (p3, _) = compile_cached(&m2, &local, Some(&p2), &mut cache, &[]).unwrap();
        let built = cache.build(&m2, &local).unwrap();
        assert_eq!(built.reused(), 1);
        assert_eq!(built.changed(), Some(vec![]));
        let (p4, e4) = cache.compile(&m2, built, Some(&p3), &[]).unwrap();
        assert!(p4.datapath_shared_with(&p3, "sw0"));
        assert_eq!(e4.len(), 1);
        assert!(e4[0].kept_last_good);
        // A structural error found while building keeps the cache (the running program
        // stays, and the cache still holds its flows): the running message again is taken
        // from it whole.
        let mut bad = m2.clone();
        bad.zones.insert("lsp/x".into(), 0);
        assert!(compile_cached(&bad, &local, Some(&p4), &mut cache, &[]).is_err());
        assert!(cache.is_valid());
        assert_eq!(cache.build(&m2, &local).unwrap().changed(), Some(vec![]));
        // An error found by the compiler (after the build took the entries out) empties it:
        // nothing is known afterwards.
        let mut cache2 = SpecCache::new();
        let (p5, _) = compile_cached(&m2, &local, None, &mut cache2, &[]).unwrap();
        let mut dup = m2.clone();
        let mut second = (*dup.datapaths[0]).clone();
        second.name = "sw1".into();
        dup.datapaths.push(second.into());
        assert!(compile_cached(&dup, &local, Some(&p5), &mut cache2, &[]).is_err());
        assert!(!cache2.is_valid());
        assert_eq!(cache2.build(&m2, &local).unwrap().changed(), None);
    }

    #[test]
    fn constructs_outside_the_feature_level_are_syntax_errors_with_the_same_fallback() {
        let local = [("p1".to_string(), 7)].into();
        let newer = "ct_commit { ct_mark.blocked = 0; }; next;";
        let older = "ct_commit(ct_label=0/1); next;";
        let mut m = msg(vec![
            flow("a", "ip4", newer, Some(("ip4", older))),
            flow("b", "ip4 && ct_mark.blocked == 1", "next;", None),
            flow("c", "ip4", older, None),
        ]);
        // Every feature: everything compiles.
        let (all, errs) = compile(&m, &local, None).unwrap();
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(all.flow_count(), 3);
        // hf-1: `a` runs its last good text, `b` has none (and is no security flow: left out).
        m.feature_level = Some("hf-1".into());
        let (prog, errs) = compile(&m, &local, None).unwrap();
        let by_id: BTreeMap<_, _> = errs.iter().map(|e| (e.id.as_str(), e)).collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(by_id["a"].kept_last_good, "{errs:?}");
        assert!(
            by_id["a"].reason.starts_with("syntax: actions: "),
            "{errs:?}"
        );
        assert!(by_id["a"].reason.contains("`ct-commit-block`"), "{errs:?}");
        assert!(by_id["a"].reason.contains("feature level hf-1"), "{errs:?}");
        assert!(!by_id["b"].kept_last_good && !by_id["b"].failed_closed);
        assert!(
            by_id["b"].reason.contains("`ct-mark-subfields`"),
            "{errs:?}"
        );
        assert_eq!(prog.flow_count(), 2);
        // A last good text outside the level is no last good version.
        Arc::make_mut(&mut Arc::make_mut(&mut m.datapaths[0]).flows[0]).last_good =
            Some(("ip4".into(), newer.into()));
        let (_, errs) = compile(&m, &local, None).unwrap();
        assert!(errs.iter().all(|e| !e.kept_last_good), "{errs:?}");
        // The cache parses again when the level changes (same texts).
        let mut cache = SpecCache::new();
        m.feature_level = None;
        let (p1, e1) = compile_cached(&m, &local, None, &mut cache, &[]).unwrap();
        assert!(e1.is_empty());
        m.feature_level = Some("hf-1".into());
        let built = cache.build(&m, &local).unwrap();
        assert_eq!(built.reused(), 0);
        assert_eq!(built.changed(), Some(vec!["sw0"]));
        let (_, e2) = cache.compile(&m, built, Some(&p1), &[]).unwrap();
        assert_eq!(e2.len(), 2, "{e2:?}");
        // An unknown level is structural, naming the known ones.
        m.feature_level = Some("hf-9".into());
        let e = compile(&m, &local, None).unwrap_err();
        assert!(e.contains("hf-9") && e.contains("hf-1, hf-2"), "{e}");
    }

    #[test]
    fn security_flows_with_no_version_that_compiles_fail_closed() {
        let local = [("p1".to_string(), 7)].into();
        let acl = |id: &str, stage: &str, m: &str, lg| FlowMsg {
            stage: stage.into(),
            priority: 1000,
            ..flow(id, m, "next;", lg)
        };
        let m = msg(vec![
            // No last good: fails closed.
            acl("a", "ls_out_acl_eval", "ip4 &&& x", None),
            // Its last good version runs: not failed closed.
            acl("b", "ls_in_acl", "ip4 &&& x", Some(("ip4", "next;"))),
            // Not a security stage: left out.
            acl("c", "ls_in_l2_lkup", "ip4 &&& x", None),
            // A compile error (unknown port group) in port security, no last good.
            acl("d", "ls_in_check_port_sec", "inport == @nope", None),
        ]);
        let (prog, errs) = compile(&m, &local, None).unwrap();
        let by_id: BTreeMap<_, _> = errs.iter().map(|e| (e.id.as_str(), e)).collect();
        assert!(
            by_id["a"].failed_closed && !by_id["a"].kept_last_good,
            "{errs:?}"
        );
        assert!(
            by_id["b"].kept_last_good && !by_id["b"].failed_closed,
            "{errs:?}"
        );
        assert!(
            !by_id["c"].failed_closed && !by_id["c"].kept_last_good,
            "{errs:?}"
        );
        assert!(by_id["d"].failed_closed, "{errs:?}");
        // a and d as drops, b as its last good version; c is left out.
        assert_eq!(prog.flow_count(), 3);
        assert!(is_security_stage("ls_in_port_sec_l2"));
        assert!(!is_security_stage("ls_in_pre_acl"));
    }

    #[test]
    fn a_datapath_with_a_flow_outside_the_language_is_held_at_what_it_ran() {
        let local = [("p1".to_string(), 7)].into();
        let acl = |id: &str, m: &str, a: &str| FlowMsg {
            stage: "ls_in_acl".into(),
            priority: 1000,
            ..flow(id, m, a, None)
        };
        let mut old = msg(vec![acl("a", "ip4", "ct_commit(ct_label=0/1); next;")]);
        old.feature_level = Some("hf-1".into());
        let mut cache = SpecCache::new();
        let (p1, e1) = compile_cached(&old, &local, None, &mut cache, &[]).unwrap();
        assert!(e1.is_empty(), "{e1:?}");
        // The newer design: `a` respelled (no last good sent: a naive message), and a new flow
        // `b` with no older version.
        let mut new = msg(vec![
            acl("a", "ip4", "ct_commit { ct_mark.blocked = 0; }; next;"),
            acl("b", "ip4 && ct_mark.blocked == 1", "drop;"),
        ]);
        new.feature_level = Some("hf-1".into());
        new.generation = 2;
        let c =
            compile_cached_holding(&new, &local, Some(&p1), Some(&old), &mut cache, &[]).unwrap();
        assert_eq!(c.held, vec!["sw0".to_string()]);
        assert_eq!(c.errors.len(), 2, "{:?}", c.errors);
        assert!(
            c.errors
                .iter()
                .all(|e| e.held && e.kept_last_good && !e.failed_closed)
        );
        // The old flow runs: one flow, not a fail-closed drop and not the new ones.
        assert_eq!(c.program.flow_count(), 1);
        // Without a previous program there is nothing to hold: both fail closed.
        let fresh = compile(&new, &local, None).unwrap().1;
        assert!(
            fresh.iter().all(|e| e.failed_closed && !e.held),
            "{fresh:?}"
        );
        // A content error (an unknown port group) does not hold the datapath: it fails alone.
        let mut content = msg(vec![
            acl("a", "ip4", "ct_commit(ct_label=0/1); next;"),
            acl("c", "inport == @nope", "next;"),
        ]);
        content.feature_level = Some("hf-1".into());
        let mut cache = SpecCache::new();
        let (p1, _) = compile_cached(&old, &local, None, &mut cache, &[]).unwrap();
        let c = compile_cached_holding(&content, &local, Some(&p1), Some(&old), &mut cache, &[])
            .unwrap();
        assert!(c.held.is_empty(), "{:?}", c.errors);
        assert!(
            c.errors.len() == 1 && c.errors[0].failed_closed,
            "{:?}",
            c.errors
        );
        // The naive hook holds nothing.
        new.no_last_good = true;
        let mut cache = SpecCache::new();
        let (p1, _) = compile_cached(&old, &local, None, &mut cache, &[]).unwrap();
        let c =
            compile_cached_holding(&new, &local, Some(&p1), Some(&old), &mut cache, &[]).unwrap();
        assert!(c.held.is_empty());
        assert!(c.errors.iter().all(|e| e.failed_closed), "{:?}", c.errors);
    }

    #[test]
    fn a_previous_flow_that_no_longer_compiles_in_a_held_datapath_is_reported() {
        let local = [("p1".to_string(), 7)].into();
        let acl = |id: &str, m: &str, a: &str| FlowMsg {
            stage: "ls_in_acl".into(),
            priority: 1000,
            ..flow(id, m, a, None)
        };
        let mut old = msg(vec![
            acl("a", "ip4", "ct_commit(ct_label=0/1); next;"),
            acl("g", "outport == @pg_deny", "drop;"),
        ]);
        old.port_groups.insert("pg_deny".into(), vec!["p1".into()]);
        old.feature_level = Some("hf-1".into());
        let mut cache = SpecCache::new();
        let (p1, e1) = compile_cached(&old, &local, None, &mut cache, &[]).unwrap();
        assert!(e1.is_empty(), "{e1:?}");
        // `a` respelled outside hf-1 holds sw0; the new program no longer has `pg_deny`, so
        // the held datapath's previous flow `g` does not compile: it must be reported.
        let mut new = msg(vec![acl(
            "a",
            "ip4",
            "ct_commit { ct_mark.blocked = 0; }; next;",
        )]);
        new.feature_level = Some("hf-1".into());
        new.generation = 2;
        let c =
            compile_cached_holding(&new, &local, Some(&p1), Some(&old), &mut cache, &[]).unwrap();
        assert_eq!(c.held, vec!["sw0".to_string()]);
        let g = c.errors.iter().find(|e| e.id == "g");
        assert!(
            g.is_some_and(|e| e.held && !e.kept_last_good && e.reason.contains("pg_deny")),
            "{:?}",
            c.errors
        );
        assert_eq!(c.program.flow_count(), 1);
    }

    #[test]
    fn zone_zero_and_unknown_zones_are_structural() {
        let local = BTreeMap::new();
        let mut m = msg(vec![]);
        m.zones.insert("lsp/x".into(), 0);
        assert!(compile(&m, &local, None).unwrap_err().contains("zone 0"));
        let mut m = msg(vec![]);
        m.zones.clear();
        assert!(
            compile(&m, &local, None)
                .unwrap_err()
                .contains("not in the zone map")
        );
    }

    #[test]
    fn a_switch_port_in_zone_0_is_refused_by_name() {
        let local = BTreeMap::new();
        let mut m = msg(vec![]);
        assert!(compile(&m, &local, None).is_ok());
        Arc::make_mut(&mut Arc::make_mut(&mut m.datapaths[0]).ports)[0].zone = 0;
        let e = compile(&m, &local, None).unwrap_err();
        assert!(
            e.contains("port p1 of switch sw0: zone 0 belongs to the host"),
            "{e}"
        );
    }
}

#[cfg(test)]
#[path = "spec_cache_tests.rs"]
mod spec_cache_tests;
