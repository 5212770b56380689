//! Compiling a [`ProgramSpec`] into a [`Program`], whole or one datapath at a time.
//!
//! What it does:
//! - Structural checks first (patch peers, duplicate keys and local ids, Geneve's tunnel-key
//!   limits): these fail the whole program with a [`CompileError`].
//! - Every flow on its own: a flow whose text did not parse, whose match does not normalise or
//!   names an unknown address set / port group, or whose actions the pipeline cannot execute,
//!   becomes a [`FlowError`] and is left out; the rest of the program compiles.
//! - `is_chassis_resident(P)` is resolved against every datapath's ports (router flows name
//!   switch ports and `cr-` ports), from [`crate::PortSpec::resident`] (not from the location:
//!   a localport or an additional chassis's copy is local without being resident).
//! - [`Program::recompile`] reuses the compiled tables (`Arc`-shared) of every datapath whose
//!   flows, port names/keys, referenced sets and referenced residency did not change, and
//!   changes the others in place where it can (`patch_dp`): flows that did not change keep
//!   their rules, the rest are removed or compiled alone, and the result equals a fresh
//!   compile (docs/program-deltas.md, "Flow by flow").
//!
//! What it does not do: decide where ports live or which zones they get (the translation in
//! `hf-controller` does), or keep a last good version of a flow that stopped compiling (the
//! controller does, keyed by [`crate::FlowId`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use hf_expr::actions::Pipeline as Pipe;
use hf_expr::normalize::{Atom, Limits, Normalizer};
use hf_expr::{Sets, SymbolTable};

use crate::act_compile::{ActCompiler, UNSUPPORTED, compile_conj};
use crate::classifier::{Classifier, FastMap};
use crate::program::{
    CAct, CompileError, CompileOptions, Counted, DatapathSpec, Dp, DpCode, EGRESS, FlowError,
    FlowErrorKind, FlowInfo, FlowRefs, INGRESS, Loc, Port, PortLocation, PortsFrom, Program,
    ProgramSpec, Slot, ip_u128,
};
use crate::reparse::Reparse;

/// Geneve's limits (ovn-architecture(7), "Tunnel Encapsulations").
const MAX_DP_KEY: u32 = (1 << 24) - 1;
const MAX_PORT_KEY: u32 = (1 << 15) - 1;
pub(crate) const MIN_GROUP_KEY: u32 = 1 << 15;
const MAX_GROUP_KEY: u32 = (1 << 16) - 1;

impl Program {
    /// Compiles `spec`. A flow that does not compile is reported in the returned list and left
    /// out; structural problems (unknown patch peers, duplicate keys, tunnel keys outside
    /// Geneve's limits) fail the whole program.
    pub fn compile(spec: &ProgramSpec) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, None, &[], &[], &CompileOptions::default())
    }

    /// [`Program::compile`] with `opts` (worker threads). The program is the same whatever the
    /// options.
    pub fn compile_with(
        spec: &ProgramSpec,
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, None, &[], &[], opts)
    }

    /// Like [`Program::compile`], but the first flow error fails the program
    /// ([`CompileError::Flow`]). For tests and hand-written programs.
    pub fn compile_strict(spec: &ProgramSpec) -> Result<Program, CompileError> {
        let (p, errs) = Program::compile(spec)?;
        match errs.into_iter().next() {
            Some(e) => Err(CompileError::Flow(Box::new(e))),
            None => Ok(p),
        }
    }

    /// Compiles `spec` again, reusing this program's compiled tables for every datapath that
    /// keeps its name and tunnel key (wherever it now is in the list), is not named in
    /// `changed` (the datapaths whose flows changed) and whose port and group names/keys,
    /// referenced address sets and port groups, and the residency of the ports its flows ask
    /// about, are unchanged. The returned errors cover the whole program (reused datapaths keep
    /// theirs).
    pub fn recompile(
        &self,
        spec: &ProgramSpec,
        changed: &[&str],
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, Some(self), changed, &[], &CompileOptions::default())
    }

    /// [`Program::recompile`] with `opts` (worker threads for the datapaths it compiles).
    pub fn recompile_with(
        &self,
        spec: &ProgramSpec,
        changed: &[&str],
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, Some(self), changed, &[], opts)
    }

    /// [`Program::recompile_with`] for a caller that knows which datapaths' ports and groups
    /// did not change: `same_ports[i] == true` promises that `spec.datapaths[i]`'s ports and
    /// groups equal the ones this program's datapath of the same name was built from (the
    /// datapath's spec cache knows this for every datapath a delta did not name whose local
    /// ports resolve as before). Such a datapath shares its port and group maps without the
    /// port-by-port comparison [`Program::recompile`] makes (its patch peers are still
    /// resolved again). A shorter slice, or `false`, compares as [`Program::recompile`] does.
    /// A wrong promise gives a wrong program: the promise is the caller's to keep.
    pub fn recompile_knowing(
        &self,
        spec: &ProgramSpec,
        changed: &[&str],
        same_ports: &[bool],
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, Some(self), changed, same_ports, opts)
    }

    /// How many datapaths the compile that made this program compiled (the rest it took from
    /// the previous program).
    pub fn compiled_datapaths(&self) -> usize {
        self.compiled
    }

    /// How many of [`Program::compiled_datapaths`] were changed in place, flow by flow (their
    /// unchanged flows kept their compiled rules), rather than compiled whole.
    pub fn patched_datapaths(&self) -> usize {
        self.patched
    }

    /// How many flows' texts the compile that made this program parsed again (flows kept
    /// without trees, [`crate::FlowSpec::drop_trees`]; a text held by several datapaths, as a
    /// datapath group's flow is, is parsed once per compiling thread).
    pub fn parsed_flows(&self) -> usize {
        self.parsed_flows
    }

    /// How many flows the compile that made this program compiled (every flow of a datapath
    /// compiled whole, the new or changed flows of one changed in place).
    pub fn compiled_flows(&self) -> usize {
        self.compiled_flows
    }

    /// Number of logical flows compiled (live ones).
    pub fn flow_count(&self) -> usize {
        self.dps.iter().map(|d| d.tables.flow_count).sum()
    }

    /// The flow errors of the whole program.
    pub fn flow_errors(&self) -> impl Iterator<Item = &FlowError> + '_ {
        self.dps.iter().flat_map(|d| d.tables.errors.iter())
    }

    /// How many datapaths' tables are shared with `other`'s datapath of the same name (the same
    /// `Arc`): what [`Program::recompile`] reused.
    pub fn shared_datapaths(&self, other: &Program) -> usize {
        let theirs: HashMap<&str, &Arc<DpCode>> = other
            .dps
            .iter()
            .map(|d| (d.name.as_str(), &d.tables))
            .collect();
        self.dps
            .iter()
            .filter(|d| {
                theirs
                    .get(d.name.as_str())
                    .is_some_and(|t| Arc::ptr_eq(&d.tables, t))
            })
            .count()
    }

    /// Whether datapath `name`'s compiled tables are the same allocation in both programs.
    pub fn datapath_shared_with(&self, other: &Program, name: &str) -> bool {
        let find = |p: &Program| {
            p.dps
                .iter()
                .find(|d| d.name == name)
                .map(|d| d.tables.clone())
        };
        match (find(self), find(other)) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a, &b),
            _ => false,
        }
    }

    fn build(
        spec: &ProgramSpec,
        old: Option<&Program>,
        changed: &[&str],
        same_ports: &[bool],
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        let mut prog = Program {
            compiled: 0,
            patched: 0,
            compiled_flows: 0,
            parsed_flows: 0,
            dps: Vec::new(),
            acts: Default::default(),
            flows: Default::default(),
            local: FastMap::default(),
            by_key: FastMap::default(),
            neighbours: Vec::new(),
            fdb: Vec::new(),
            counters: Vec::new(),
            owner: spec.owner,
            inactive: Vec::new(),
            sets: spec.sets.clone(),
            dns: FastMap::default(),
        };
        // Per datapath name, looked up once each (not a scan of the lists per datapath).
        let mut vips_of: HashMap<&str, Vec<(u128, bool, u16, u8)>> = HashMap::new();
        for v in &spec.lb_vips {
            let (ip, v6) = ip_u128(v.ip);
            vips_of
                .entry(v.datapath.as_str())
                .or_default()
                .push((ip, v6, v.port, v.proto));
        }
        let mut snat_of: HashMap<&str, u16> = HashMap::new();
        for (n, z) in &spec.switch_snat_zones {
            // The first entry of a name wins, as a scan would find.
            snat_of.entry(n.as_str()).or_insert(*z);
        }
        // Ports first: patch peers may point forward.
        let all_ports: usize = spec.datapaths.iter().map(|d| d.ports.len()).sum();
        // Names come from the program (trusted): the fast hasher (one multiply per word).
        let mut names: FastMap<&str, (u32, u32)> =
            FastMap::with_capacity_and_hasher(all_ports, Default::default());
        let mut dp_names: FastMap<&str, u32> =
            FastMap::with_capacity_and_hasher(spec.datapaths.len(), Default::default());
        let mut resident: HashSet<&str> = HashSet::new();
        for (i, d) in spec.datapaths.iter().enumerate() {
            check_keys(d)?;
            dp_names.insert(&d.name, i as u32);
            if let Some(prev) = prog.by_key.insert(d.tunnel_key, i as u32) {
                return Err(CompileError::DuplicateDatapath {
                    a: spec.datapaths[prev as usize].name.clone(),
                    b: d.name.clone(),
                    key: d.tunnel_key,
                });
            }
            for p in &d.ports {
                names.insert(&p.name, (i as u32, p.key));
                if p.resident {
                    resident.insert(&p.name);
                }
            }
        }
        // The old program's port and group maps, shared where a datapath's ports and groups
        // are what they were built from (any old program: they do not live in its arenas).
        let old_maps: FastMap<&str, &Dp> = old
            .map(|o| o.dps.iter().map(|d| (d.name.as_str(), d)).collect())
            .unwrap_or_default();
        prog.dps.reserve_exact(spec.datapaths.len());
        for (i, d) in spec.datapaths.iter().enumerate() {
            let dup = |id| CompileError::Duplicate {
                datapath: d.name.clone(),
                id,
            };
            let vips = vips_of.remove(d.name.as_str()).unwrap_or_default();
            let snat_zone = snat_of.get(d.name.as_str()).copied();
            let promised = same_ports.get(i).copied().unwrap_or(false);
            if let Some(od) = old_maps.get(d.name.as_str()).filter(|od| {
                (promised || (od.from.ports == d.ports && od.from.groups == d.groups))
                    && od
                        .from
                        .patches
                        .iter()
                        .all(|(peer, dp, port)| names.get(peer.as_str()) == Some(&(*dp, *port)))
            }) {
                for &(id, key, activation) in &od.from.local {
                    if prog.local.insert(id, (i as u32, key)).is_some() {
                        return Err(dup(id));
                    }
                    if let Some(a) = activation {
                        prog.inactive.push((id, a));
                    }
                }
                prog.dps.push(Dp {
                    name: d.name.clone(),
                    key: d.tunnel_key,
                    kind: d.kind,
                    ports: od.ports.clone(),
                    groups: od.groups.clone(),
                    from: od.from.clone(),
                    vips,
                    snat_zone,
                    tables: Arc::new(DpCode::default()),
                });
                continue;
            }
            let mut local = Vec::new();
            let mut patches = Vec::new();
            // Name to key within this datapath (the first port of a name, as a scan would find).
            let mut key_of: HashMap<&str, u32> = HashMap::new();
            for p in &d.ports {
                key_of.entry(p.name.as_str()).or_insert(p.key);
            }
            let mut ports = FastMap::with_capacity_and_hasher(d.ports.len(), Default::default());
            for p in &d.ports {
                let loc = match &p.location {
                    PortLocation::Local(id) => {
                        if prog.local.insert(*id, (i as u32, p.key)).is_some() {
                            return Err(dup(*id));
                        }
                        if let Some(a) = p.activation {
                            prog.inactive.push((*id, a));
                        }
                        local.push((*id, p.key, p.activation));
                        Loc::Local(*id)
                    }
                    PortLocation::Remote { chassis } => Loc::Remote(*chassis),
                    PortLocation::Patch { peer } => match names.get(peer.as_str()) {
                        Some(&(dp, port)) => {
                            patches.push((peer.clone(), dp, port));
                            Loc::Patch { dp, port }
                        }
                        None => {
                            return Err(CompileError::UnknownPeer {
                                port: p.name.clone(),
                                peer: peer.clone(),
                            });
                        }
                    },
                    PortLocation::Redirect { port } => match key_of.get(port.as_str()) {
                        Some(&key) => Loc::Redirect(key),
                        None => {
                            return Err(CompileError::UnknownPeer {
                                port: p.name.clone(),
                                peer: port.clone(),
                            });
                        }
                    },
                    PortLocation::Unbound => Loc::Unbound,
                };
                if p.key == 0 || ports.contains_key(&p.key) {
                    return Err(dup(p.key));
                }
                let mut also_remote = p.also_remote.clone();
                also_remote.sort_unstable();
                also_remote.dedup();
                if let Loc::Remote(c) = loc {
                    also_remote.retain(|x| *x != c);
                }
                let ps = p
                    .port_security
                    .iter()
                    .map(|e| crate::port_sec::parse_entry(e))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|message| CompileError::PortSecurity {
                        port: p.name.clone(),
                        message,
                    })?;
                ports.insert(
                    p.key,
                    Port {
                        name: p.name.clone(),
                        loc,
                        zone: p.zone,
                        also_remote,
                        ps,
                    },
                );
            }
            let mut groups = FastMap::with_capacity_and_hasher(d.groups.len(), Default::default());
            for g in &d.groups {
                if ports.contains_key(&g.key) || groups.contains_key(&g.key) {
                    return Err(dup(g.key));
                }
                let mut members: Vec<u32> = g
                    .members
                    .iter()
                    .filter_map(|m| key_of.get(m.as_str()).copied())
                    .collect();
                members.sort_unstable();
                members.dedup();
                groups.insert(g.key, members);
            }
            prog.dps.push(Dp {
                name: d.name.clone(),
                key: d.tunnel_key,
                kind: d.kind,
                ports: Arc::new(ports),
                groups: Arc::new(groups),
                from: Arc::new(PortsFrom {
                    ports: d.ports.clone(),
                    groups: d.groups.clone(),
                    local,
                    patches,
                }),
                vips,
                snat_zone,
                tables: Arc::new(DpCode::default()),
            });
        }
        // Reuse: the old arenas are kept as a prefix so reused tables' indexes stay valid.
        // When too much of the old arena is garbage, compile everything afresh.
        let old = old.filter(|o| {
            let live: usize = o.dps.iter().map(|d| d.tables.flow_count).sum();
            o.flows.len() <= 2 * live.max(64)
        });
        if let Some(o) = old {
            prog.acts = o.acts.clone();
            prog.flows = o.flows.clone();
            // Counted actions of reused tables keep their counter numbers.
            prog.counters = o.counters.clone();
        }
        // The old program's datapaths by identity (name), wherever they were.
        let old_dps: FastMap<&str, &Dp> = old
            .map(|o| o.dps.iter().map(|d| (d.name.as_str(), d)).collect())
            .unwrap_or_default();
        let old_counters = prog.counters.len();
        let mut reused_keys: HashSet<u32> = HashSet::new();
        // Whether a set resolves as before in a datapath.
        let empty = Sets::default();
        let mut set_changes = SetChanges::new(old.map_or(&empty, |o| &o.sets), &spec.sets);
        let mut todo: Vec<(usize, Names)> = Vec::new();
        for (i, d) in spec.datapaths.iter().enumerate() {
            if let Some(od) = old_dps.get(d.name.as_str())
                && od.key == d.tunnel_key
                && !changed.contains(&d.name.as_str())
                // Maps shared with the old datapath were built from equal ports and groups,
                // so its tables' names are this spec's (no per-port lookup).
                && (Arc::ptr_eq(&prog.dps[i].from, &od.from)
                    || same_names_keys(&od.tables.names, d))
                && od
                    .tables
                    .resident_refs
                    .iter()
                    .all(|(p, r)| resident.contains(p.as_str()) == *r)
                && od
                    .tables
                    .set_refs
                    .iter()
                    .all(|s| set_changes.same_for(s, &od.tables.names))
            {
                prog.dps[i].tables = od.tables.clone();
                reused_keys.insert(d.tunnel_key);
                continue;
            }
            // The old datapath's names when they are this one's (a patch compares them).
            let names = old_dps
                .get(d.name.as_str())
                .filter(|od| same_names_keys(&od.tables.names, d))
                .map_or_else(|| names_keys(d).into(), |od| od.tables.names.clone());
            todo.push((i, names));
        }
        prog.compiled = todo.len();
        // Datapaths the old program had (same key, same kind): changed in place, flow by flow,
        // where that is worth it; the rest compile whole.
        let mut patched: HashMap<u32, HashSet<u32>> = HashMap::new();
        let pgs = PgMembers::default();
        if old.is_some() {
            let mut w = Worker::new();
            let mut whole = Vec::with_capacity(todo.len());
            for (i, names) in todo {
                let d = &spec.datapaths[i];
                let od = old_dps
                    .get(d.name.as_str())
                    .filter(|od| od.key == d.tunnel_key)
                    .map(|od| od.tables.clone())
                    .filter(|c| c.switch == matches!(d.kind, crate::DatapathKind::Switch));
                let p = od.and_then(|c| {
                    patch_dp(
                        &mut prog,
                        &mut w,
                        (spec, d, &resident, &pgs),
                        (&c, names.clone()),
                        &mut set_changes,
                    )
                });
                match p {
                    Some(p) => {
                        prog.patched += 1;
                        prog.compiled_flows += p.compiled;
                        patched.insert(d.tunnel_key, p.removed);
                        prog.dps[i].tables = Arc::new(p.code);
                    }
                    None => whole.push((i, names)),
                }
            }
            prog.parsed_flows += w.parses.parsed;
            todo = whole;
        }
        let flows: usize = todo
            .iter()
            .map(|(i, _)| spec.datapaths[*i].flows.len())
            .sum();
        let threads = if flows < opts.min_parallel_flows {
            1
        } else {
            opts.threads
        };
        prog.compiled_flows += flows;
        let (units, parsed) = compile_units(spec, todo.iter(), &resident, &pgs, threads);
        prog.parsed_flows += parsed;
        for ((i, _), unit) in todo.iter().zip(units) {
            prog.dps[*i].tables = Arc::new(append_unit(&mut prog, unit));
        }
        let all_errors = prog
            .dps
            .iter()
            .flat_map(|d| d.tables.errors.iter().cloned())
            .collect();
        // Counters of the old program's flows that were not reused belong to dead flows.
        // Counters of the flows a datapath changed in place dropped are dead too.
        for c in prog.counters.iter_mut().take(old_counters) {
            match patched.get(&c.dp) {
                Some(removed) => {
                    if removed.contains(&c.flow) {
                        c.live = false;
                    }
                }
                None => {
                    if !reused_keys.contains(&c.dp) {
                        c.live = false;
                    }
                }
            }
        }
        for n in &spec.neighbours {
            let Some(&dpi) = dp_names.get(n.datapath.as_str()) else {
                continue;
            };
            let Some(p) = spec.datapaths[dpi as usize]
                .ports
                .iter()
                .find(|p| p.name == n.port)
            else {
                continue;
            };
            let (ip, v6) = ip_u128(n.ip);
            let mac = n.mac.iter().fold(0u128, |a, b| (a << 8) | u128::from(*b));
            prog.neighbours
                .push((spec.datapaths[dpi as usize].tunnel_key, p.key, ip, v6, mac));
        }
        for e in &spec.fdb {
            let Some(&dpi) = dp_names.get(e.datapath.as_str()) else {
                continue;
            };
            let d = &spec.datapaths[dpi as usize];
            let Some(p) = d.ports.iter().find(|p| p.name == e.port) else {
                continue;
            };
            let mac = e.mac.iter().fold(0u128, |a, b| (a << 8) | u128::from(*b));
            prog.fdb.push((d.tunnel_key, mac, p.key));
        }
        for e in &spec.dns {
            let Some(&dpi) = dp_names.get(e.datapath.as_str()) else {
                return Err(CompileError::UnknownDnsDatapath(e.datapath.clone()));
            };
            let recs = prog
                .dns
                .entry(spec.datapaths[dpi as usize].tunnel_key)
                .or_default();
            for (name, value) in &e.records {
                recs.entry(name.to_ascii_lowercase())
                    .or_insert_with(|| value.clone());
            }
        }
        Ok((prog, all_errors))
    }
}

/// A datapath's (name, key) of ports and groups, sorted ([`names_keys`]).
type Names = Arc<[(String, u32)]>;

fn names_keys(d: &DatapathSpec) -> Vec<(String, u32)> {
    let mut v: Vec<(String, u32)> = d
        .ports
        .iter()
        .map(|p| (p.name.clone(), p.key))
        .chain(d.groups.iter().map(|g| (g.name.clone(), g.key)))
        .collect();
    v.sort();
    v
}

/// Whether `names` (sorted, from [`names_keys`]) are `d`'s ports and groups, without building
/// the list again (a recompile asks this of every datapath).
fn same_names_keys(names: &[(String, u32)], d: &DatapathSpec) -> bool {
    let has = |n: &str, k: u32| {
        names
            .binary_search_by(|(x, y)| (x.as_str(), *y).cmp(&(n, k)))
            .is_ok()
    };
    // Names and keys are unique within a datapath that compiled (duplicates are an error).
    names.len() == d.ports.len() + d.groups.len()
        && d.ports.iter().all(|p| has(&p.name, p.key))
        && d.groups.iter().all(|g| has(&g.name, g.key))
}

/// How one set (`$name` / `@name`) changed between two set collections.
enum SetChange<'a> {
    /// Resolves the same way.
    Same,
    /// An address set that changed, or a set that came or went.
    Whole,
    /// A port group in both whose members differ: the names that came or went.
    Members(Vec<&'a str>),
}

/// Which sets changed between the old program's and the new spec's collections, asked once
/// per set (many datapaths name one set) and answered per datapath: a port group is compiled
/// with only the members its datapath has ([`sets_for_dp`]), so a member that came or went
/// in another datapath changes nothing here (a port joining a 500-switch group recompiles
/// the flows naming it in its own switch only).
struct SetChanges<'a> {
    old: &'a Sets,
    new: &'a Sets,
    memo: HashMap<String, SetChange<'a>>,
}

impl<'a> SetChanges<'a> {
    fn new(old: &'a Sets, new: &'a Sets) -> SetChanges<'a> {
        SetChanges {
            old,
            new,
            memo: HashMap::new(),
        }
    }

    fn change(old: &'a Sets, new: &'a Sets, set: &str) -> SetChange<'a> {
        if let Some(n) = set.strip_prefix('$') {
            if old.addr_sets.get(n) == new.addr_sets.get(n) {
                SetChange::Same
            } else {
                SetChange::Whole
            }
        } else if let Some(n) = set.strip_prefix('@') {
            match (old.port_groups.get(n), new.port_groups.get(n)) {
                (a, b) if a == b => SetChange::Same,
                (Some(a), Some(b)) => {
                    let a_set: HashSet<&str> = a.iter().map(String::as_str).collect();
                    let b_set: HashSet<&str> = b.iter().map(String::as_str).collect();
                    let diff: Vec<&str> = a_set.symmetric_difference(&b_set).copied().collect();
                    if diff.is_empty() {
                        // The same members in another order: the order of the
                        // disjunction is compiled in, so compile again.
                        SetChange::Whole
                    } else {
                        SetChange::Members(diff)
                    }
                }
                _ => SetChange::Whole,
            }
        } else {
            SetChange::Same
        }
    }

    /// Whether `set` compiles the same way now in a datapath whose ports and groups are
    /// `names` (sorted, [`names_keys`]).
    fn same_for(&mut self, set: &str, names: &[(String, u32)]) -> bool {
        let (old, new) = (self.old, self.new);
        if !self.memo.contains_key(set) {
            let c = Self::change(old, new, set);
            self.memo.insert(set.to_string(), c);
        }
        let Some(c) = self.memo.get(set) else {
            return false;
        };
        match c {
            SetChange::Same => true,
            SetChange::Whole => false,
            SetChange::Members(diff) => !diff.iter().any(|m| {
                *m == "none" || names.binary_search_by(|(x, _)| x.as_str().cmp(m)).is_ok()
            }),
        }
    }
}

fn check_keys(d: &DatapathSpec) -> Result<(), CompileError> {
    let bad = |what: String, key: u32, range: &'static str| CompileError::TunnelKey {
        datapath: d.name.clone(),
        what,
        key,
        range,
    };
    if d.tunnel_key == 0 || d.tunnel_key > MAX_DP_KEY {
        return Err(bad("datapath".into(), d.tunnel_key, "1..=16777215"));
    }
    for p in &d.ports {
        if p.key == 0 || p.key > MAX_PORT_KEY {
            return Err(bad(format!("port {}", p.name), p.key, "1..=32767"));
        }
    }
    for g in &d.groups {
        if !(MIN_GROUP_KEY..=MAX_GROUP_KEY).contains(&g.key) {
            return Err(bad(
                format!("multicast group {}", g.name),
                g.key,
                "32768..=65535",
            ));
        }
    }
    Ok(())
}

/// One datapath compiled on its own: its tables and the arena entries it adds, numbered from 0
/// (flows, actions and counters alike); [`append_unit`] moves them into the program.
#[derive(Default)]
struct Unit {
    code: DpCode,
    acts: Vec<CAct>,
    flows: Vec<FlowInfo>,
    counters: Vec<Counted>,
}

/// What one compiling thread keeps from flow to flow: the normaliser (with its cache) and
/// the trees of the texts it parsed last.
struct Worker<'a> {
    norm: Normalizer<'a>,
    parses: Reparse,
}

impl Worker<'_> {
    fn new() -> Self {
        Worker {
            norm: Normalizer::new(SymbolTable::shared(), Limits::default()),
            parses: Reparse::default(),
        }
    }
}

/// Compiles the datapaths `todo` names (index, names and keys), on up to `threads` worker
/// threads; the units come back in `todo`'s order, whatever the thread count (each datapath's
/// unit depends only on the spec, never on what another thread compiled). Also: how many
/// flows' texts the threads parsed.
fn compile_units<'a>(
    spec: &ProgramSpec,
    todo: impl ExactSizeIterator<Item = &'a (usize, Names)>,
    resident: &HashSet<&str>,
    pgs: &PgMembers,
    threads: usize,
) -> (Vec<Unit>, usize) {
    let todo: Vec<&(usize, Names)> = todo.collect();
    let one = |w: &mut Worker<'_>, j: usize| {
        let (i, names) = todo[j];
        compile_dp(w, spec, &spec.datapaths[*i], resident, pgs, names.clone())
    };
    let threads = threads.clamp(1, todo.len().max(1));
    if threads == 1 {
        let mut w = Worker::new();
        let units = (0..todo.len()).map(|j| one(&mut w, j)).collect();
        return (units, w.parses.parsed);
    }
    // Thread `t` compiles datapaths t, t + threads, ... (a fixed split: which thread compiles
    // what never depends on timing); results go to their own slot, so the order is the
    // sequential one.
    let mut slots: Vec<Option<Unit>> = (0..todo.len()).map(|_| None).collect();
    let mut parsed = 0;
    let n = todo.len();
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let one = &one;
                sc.spawn(move || {
                    let mut w = Worker::new();
                    let done = (t..n)
                        .step_by(threads)
                        .map(|j| (j, one(&mut w, j)))
                        .collect::<Vec<_>>();
                    (done, w.parses.parsed)
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok((done, p)) => {
                    parsed += p;
                    for (j, u) in done {
                        slots[j] = Some(u);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    (slots.into_iter().flatten().collect(), parsed)
}

/// Appends a unit's actions, flows and counters to the program's arenas, moving every index it
/// holds (nested action ranges, a flow's actions, counter numbers, the tables' flows) by where
/// they land.
fn append_unit(prog: &mut Program, unit: Unit) -> DpCode {
    let act_off = prog.acts.len() as u32;
    let flow_off = prog.flows.len() as u32;
    let ctr_off = prog.counters.len() as u32;
    prog.acts.extend(unit.acts.into_iter().map(|mut a| {
        match &mut a {
            CAct::Nested { body, .. } => *body = body.start + act_off..body.end + act_off,
            CAct::PacketIn { counter, .. }
            | CAct::BindVport { counter, .. }
            | CAct::Log { counter, .. }
            | CAct::SetMeter { counter, .. }
            | CAct::SvcCheck { counter, .. }
            | CAct::Igmp { counter, .. }
            | CAct::Bfd { counter, .. }
            | CAct::Count { counter, .. } => *counter += ctr_off,
            _ => {}
        }
        a
    }));
    prog.flows.extend(unit.flows.into_iter().map(|mut f| {
        f.acts = f.acts.start + act_off..f.acts.end + act_off;
        f
    }));
    prog.counters.extend(unit.counters.into_iter().map(|mut c| {
        c.flow += flow_off;
        c
    }));
    let mut code = unit.code;
    for t in code.tables.iter_mut().flatten() {
        Arc::make_mut(t).rebase(flow_off);
    }
    for s in &mut code.slots {
        if s.flow != Slot::ERROR {
            s.flow += flow_off;
        }
    }
    code
}

/// The rank of the flow at `j` in its datapath's list in a fresh compile: gaps of 2^16 leave
/// room for flows a recompile inserts in place between two kept ones.
fn rank_of(j: usize) -> u64 {
    (j as u64 + 1) << 16
}

/// What compiling one flow needs of its datapath.
struct DpCx<'a> {
    spec: &'a ProgramSpec,
    d: &'a DatapathSpec,
    resident: &'a HashSet<&'a str>,
    pgs: &'a PgMembers,
    names: &'a [(String, u32)],
}

/// One flow compiled: where its rules go and the rules (flow index local to its [`Unit`]).
struct NewFlow {
    pipe: u8,
    table: u8,
    priority: u16,
    flow: u32,
    conjs: Vec<crate::classifier::Conj>,
}

/// Compiles `fs` into `unit`'s arenas (not its tables): the flow's rules, or why it did not
/// compile; and the sets and residency answers its match names (also for a flow that did not
/// compile past its match).
fn compile_flow(
    w: &mut Worker<'_>,
    cx: &DpCx<'_>,
    fs: &crate::program::FlowSpec,
    unit: &mut Unit,
) -> (Result<NewFlow, FlowError>, Option<Arc<FlowRefs>>) {
    let d = cx.d;
    let names = cx.names;
    // "none" is key 0, as in ovn-controller's and ovn-trace's port lookup (northd's
    // `outport = get_fdb(eth.dst)` then `outport == "none"` relies on it).
    let port_key = |name: &str| -> Option<u32> {
        if name == "none" {
            return Some(0);
        }
        names
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()
            .map(|j| names[j].1)
    };
    let is_resident = |name: &str| cx.resident.contains(name);
    let pipe = match fs.pipeline {
        Pipe::Egress => EGRESS,
        _ => INGRESS,
    };
    let err = |kind: FlowErrorKind, message: String| FlowError {
        datapath: d.name.clone(),
        pipeline: if pipe == EGRESS { "egress" } else { "ingress" },
        table: fs.table,
        priority: fs.priority,
        id: fs.id.clone(),
        stage: fs.stage.to_string(),
        sb_uuid: fs.sb_uuid.as_deref().map(str::to_string),
        kind,
        message,
    };
    if let Some(e) = &fs.parse_error {
        return (Err(err(FlowErrorKind::Syntax, e.to_string())), None);
    }
    // A flow kept without trees is parsed again here, on the compiling thread (once per text
    // and thread: `Reparse`), and its trees are dropped again with the thread's memo.
    let (fs_matches, fs_actions) = match w.parses.trees(fs) {
        Ok(t) => t,
        Err(e) => return (Err(err(FlowErrorKind::Syntax, e)), None),
    };
    let mut refs = FlowRefs::default();
    // Sets named by the match, found or not: a change to them recompiles this flow.
    let mut sets = HashSet::new();
    collect_sets(&fs_matches, &mut sets);
    refs.sets = sets.into_iter().collect();
    refs.sets.sort();
    let shared = |r: FlowRefs| (r != FlowRefs::default()).then(|| Arc::new(r));
    let matches = with_action_prereqs(&fs_matches, &fs_actions);
    // A port group is expanded to the members this datapath has (see `sets_for_dp`).
    let local_sets;
    let sets = if refs.sets.iter().any(|s| s.starts_with('@')) {
        local_sets = sets_for_dp(&refs.sets, &cx.spec.sets, cx.names, cx.pgs);
        &local_sets
    } else {
        &cx.spec.sets
    };
    let n = match w.norm.normalize(&matches, sets) {
        Ok(n) => n,
        Err(e) => return (Err(err(FlowErrorKind::Match, e.to_string())), shared(refs)),
    };
    let unknown: Vec<&str> = n
        .disjuncts
        .iter()
        .flat_map(|c| c.atoms.iter().chain(c.dims.iter().flatten()))
        .filter_map(|a| match a {
            Atom::Set { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !unknown.is_empty() {
        let e = err(
            FlowErrorKind::UnknownSet,
            format!("unknown address set or port group {}", unknown.join(", ")),
        );
        return (Err(e), shared(refs));
    }
    let mut resident = HashSet::new();
    for c in &n.disjuncts {
        for a in c.atoms.iter().chain(c.dims.iter().flatten()) {
            if let Atom::Resident { port, .. } = a {
                resident.insert((port.clone(), is_resident(port)));
            }
        }
    }
    refs.resident = resident.into_iter().collect();
    refs.resident.sort();
    let refs = shared(refs);
    let acts = &mut unit.acts;
    let mark = acts.len();
    let counter_base = unit.counters.len() as u32;
    let mut cx_act = ActCompiler::new(&port_key, pipe, fs.table, d.tunnel_key, acts);
    cx_act.switch = matches!(d.kind, crate::DatapathKind::Switch);
    cx_act.counter_base = counter_base;
    let listed = cx_act.list(&fs_actions);
    let counted = std::mem::take(&mut cx_act.counted);
    let act_range = match listed {
        Ok(a) => a,
        Err(m) => {
            unit.acts.truncate(mark);
            let (kind, m) = match m.strip_prefix(UNSUPPORTED) {
                Some(rest) => (FlowErrorKind::Unsupported, rest.to_string()),
                None => (FlowErrorKind::Action, m),
            };
            return (Err(err(kind, m)), refs);
        }
    };
    let flow = unit.flows.len() as u32;
    unit.counters
        .extend(counted.into_iter().map(|name| Counted {
            dp: d.tunnel_key,
            pipe,
            table: fs.table,
            flow,
            name,
            live: true,
        }));
    let (matches, actions) = match &fs.source {
        Some(t) => (t.matches.clone(), t.actions.clone()),
        None => (
            fs_matches.to_string().into(),
            hf_expr::printer::actions_to_string(&fs_actions).into(),
        ),
    };
    unit.flows.push(FlowInfo {
        pipe,
        table: fs.table,
        priority: fs.priority,
        matches,
        actions,
        acts: act_range,
        id: fs.id.clone(),
        stage: fs.stage.clone(),
        sb_uuid: fs.sb_uuid.clone(),
        stage_hint: fs.stage_hint.clone(),
    });
    let conjs = n
        .disjuncts
        .iter()
        .filter_map(|c| compile_conj(c, &port_key, &is_resident))
        .collect();
    let nf = NewFlow {
        pipe,
        table: fs.table,
        priority: fs.priority,
        flow,
        conjs,
    };
    (Ok(nf), refs)
}

/// Inserts a compiled flow's rules into `tables` (growing them to its table), ranked `rank`.
fn insert_flow(tables: &mut [Vec<Arc<Classifier>>; 2], nf: NewFlow, flow: u32, rank: u64) {
    let tables = &mut tables[usize::from(nf.pipe)];
    let t = usize::from(nf.table);
    if tables.len() <= t {
        tables.resize_with(t + 1, Default::default);
    }
    let table = Arc::make_mut(&mut tables[t]);
    for (k, conj) in nf.conjs.into_iter().enumerate() {
        table.insert(nf.priority, flow, (rank, k as u32), conj);
    }
}

/// The datapath-wide unions of its slots' sets and residency answers (sorted, as
/// [`DpCode::set_refs`] and [`DpCode::resident_refs`] hold them).
fn union_refs(slots: &[Slot]) -> (Vec<String>, Vec<(String, bool)>) {
    let mut sets = std::collections::BTreeSet::new();
    let mut resident = std::collections::BTreeSet::new();
    for r in slots.iter().filter_map(|s| s.refs.as_deref()) {
        sets.extend(r.sets.iter().cloned());
        resident.extend(r.resident.iter().cloned());
    }
    (sets.into_iter().collect(), resident.into_iter().collect())
}

/// A datapath changed in place by [`patch_dp`]: its code, and the old program's flows it
/// dropped (their counters die).
struct Patched {
    code: DpCode,
    removed: HashSet<u32>,
    compiled: usize,
}

/// Whether a flow already compiled (`fi`, from the old program) is what `fs` compiles to, as
/// far as its own content goes: same place, priority, identity, metadata and text.
fn same_flow(fi: &FlowInfo, fs: &crate::program::FlowSpec) -> bool {
    let pipe = match fs.pipeline {
        Pipe::Egress => EGRESS,
        _ => INGRESS,
    };
    let Some(t) = &fs.source else {
        return false;
    };
    use crate::program::{same_opt_text, same_text};
    fs.parse_error.is_none()
        && fi.pipe == pipe
        && fi.table == fs.table
        && fi.priority == fs.priority
        && same_text(&fi.matches, &t.matches)
        && same_text(&fi.actions, &t.actions)
        && fi.id == fs.id
        && same_text(&fi.stage, &fs.stage)
        && same_opt_text(&fi.sb_uuid, &fs.sb_uuid)
        && same_opt_text(&fi.stage_hint, &fs.stage_hint)
}

/// Recompiles datapath `d` by changing `old` (its code in the old program, whose arenas are
/// `prog`'s prefix) in place: flows kept (same content, in the same relative order, naming
/// no port, set or residency answer that changed) keep their rules and arena entries; the
/// others' rules are removed and the new flows compiled alone and inserted at their place in
/// the list's order. The result equals a fresh compile of `d` (`compile_tests.rs` checks it).
/// `None` when that is not worth it or not possible (more flows to compile than to keep, no
/// rank left between two kept flows, a changed name the text search cannot see): the caller
/// compiles `d` whole.
#[allow(clippy::too_many_arguments)]
fn patch_dp(
    prog: &mut Program,
    w: &mut Worker<'_>,
    (spec, d, resident, pgs): (&ProgramSpec, &DatapathSpec, &HashSet<&str>, &PgMembers),
    (old, names): (&DpCode, Names),
    set_changes: &mut SetChanges<'_>,
) -> Option<Patched> {
    // Text that, in a kept flow, means it compiles differently now: names whose key changed
    // (or that came or went), ports whose residency changed, sets whose content changed.
    let mut tokens: Vec<&str> = Vec::new();
    // (The same list when the caller found the names unchanged: nothing to compare.)
    let (mut i, mut j) = if Arc::ptr_eq(&old.names, &names) {
        (old.names.len(), names.len())
    } else {
        (0, 0)
    };
    while i < old.names.len() || j < names.len() {
        match (old.names.get(i), names.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                tokens.push(&a.0);
                i += 1;
            }
            (Some(_), Some(b)) | (None, Some(b)) => {
                tokens.push(&b.0);
                j += 1;
            }
            (Some(a), None) => {
                tokens.push(&a.0);
                i += 1;
            }
            (None, None) => break,
        }
    }
    // Port groups expand to member names: any name change may change a flow naming one.
    let names_changed = !tokens.is_empty();
    // Residency answers and sets are found through each flow's references (its slot's
    // `refs`: exactly what its match names), not by searching its text.
    let resident_changed: HashSet<&str> = old
        .resident_refs
        .iter()
        .filter(|(p, r)| resident.contains(p.as_str()) != *r)
        .map(|(p, _)| p.as_str())
        .collect();
    // Sets that compile differently here (a port group's members in this datapath).
    let sets_changed: HashSet<&str> = old
        .set_refs
        .iter()
        .filter(|s| !set_changes.same_for(s, &names))
        .map(String::as_str)
        .collect();
    // A name written with escapes in the text is not found by searching for it.
    if tokens.iter().any(|t| t.contains(['"', '\\'])) {
        return None;
    }
    // Which old slot each new flow keeps (in increasing order, by construction).
    let olds = &old.slots;
    let stale = |x: usize, fi: &FlowInfo| {
        let refs = olds[x].refs.as_deref();
        let names_set =
            |f: &dyn Fn(&str) -> bool| refs.is_some_and(|r| r.sets.iter().any(|s| f(s)));
        (names_changed && names_set(&|s| s.starts_with('@')))
            || (!sets_changed.is_empty() && names_set(&|s| sets_changed.contains(s)))
            || (!resident_changed.is_empty()
                && refs.is_some_and(|r| {
                    r.resident
                        .iter()
                        .any(|(p, _)| resident_changed.contains(p.as_str()))
                }))
            || tokens
                .iter()
                .any(|t| fi.matches.contains(t) || fi.actions.contains(t))
    };
    let info = |x: usize| prog.flows.get(olds[x].flow as usize);
    let mut plan: Vec<Option<usize>> = Vec::with_capacity(d.flows.len());
    let mut by_id: Option<HashMap<&crate::FlowId, Vec<usize>>> = None;
    // Misses looked up in the next `LOOK_AHEAD` old slots before indexing by identity.
    const LOOK_AHEAD: usize = 64;
    const LOOK_AHEAD_MISSES: usize = 16;
    let mut misses = 0;
    let mut k = 0;
    for fs in &d.flows {
        let same_at = |x: usize| info(x).is_some_and(|fi| same_flow(fi, fs));
        let hit = if k < olds.len() && same_at(k) {
            Some(k)
        } else if misses < LOOK_AHEAD_MISSES {
            // A flow inserted here, or the old flows at `k` removed: the next few old slots
            // tell (no index of the datapath's identities for a change of a few flows).
            misses += 1;
            (k..olds.len().min(k + LOOK_AHEAD)).find(|&x| same_at(x))
        } else {
            let map = by_id.get_or_insert_with(|| {
                let mut m: HashMap<&crate::FlowId, Vec<usize>> = HashMap::new();
                for x in 0..olds.len() {
                    if let Some(fi) = info(x) {
                        m.entry(&fi.id).or_default().push(x);
                    }
                }
                m
            });
            map.get(&fs.id)
                .and_then(|v| v.iter().copied().find(|&x| x >= k && same_at(x)))
        };
        match hit {
            Some(x) => {
                k = x + 1;
                let keep = info(x).is_some_and(|fi| !stale(x, fi));
                plan.push(keep.then_some(x));
            }
            None => plan.push(None),
        }
    }
    let kept = plan.iter().flatten().count();
    let fresh = plan.len() - kept;
    if fresh > kept {
        return None;
    }
    // Ranks: kept flows keep theirs; a run of new flows is spread between its neighbours'.
    let mut ranks = vec![0u64; plan.len()];
    let mut at = 0;
    while at < plan.len() {
        if let Some(x) = plan[at] {
            ranks[at] = olds[x].rank;
            at += 1;
            continue;
        }
        let end = (at..plan.len())
            .find(|&e| plan[e].is_some())
            .unwrap_or(plan.len());
        let lo = if at == 0 { 0 } else { ranks[at - 1] };
        let run = (end - at) as u64;
        let hi = match plan.get(end).copied().flatten() {
            Some(x) => olds[x].rank,
            None => lo.checked_add((run + 1) << 16)?,
        };
        let step = hi.checked_sub(lo)? / (run + 1);
        if step == 0 {
            return None;
        }
        for (t, r) in ranks[at..end].iter_mut().enumerate() {
            *r = lo + step * (t as u64 + 1);
        }
        at = end;
    }
    // The old flows not kept: their rules go.
    let mut kept_old = vec![false; olds.len()];
    for x in plan.iter().flatten() {
        kept_old[*x] = true;
    }
    let mut removed: HashSet<u32> = HashSet::new();
    let mut by_table: HashMap<(u8, u8), HashSet<u32>> = HashMap::new();
    for (x, s) in olds.iter().enumerate() {
        if kept_old[x] || s.flow == Slot::ERROR {
            continue;
        }
        if let Some(fi) = prog.flows.get(s.flow as usize) {
            removed.insert(s.flow);
            by_table
                .entry((fi.pipe, fi.table))
                .or_default()
                .insert(s.flow);
        }
    }
    let mut tables = old.tables.clone();
    let mut touched: HashSet<(u8, u8)> = HashSet::new();
    for ((pipe, table), flows) in &by_table {
        if let Some(t) = tables[usize::from(*pipe)].get_mut(usize::from(*table)) {
            Arc::make_mut(t).remove_flows(flows);
            touched.insert((*pipe, *table));
        }
    }
    // The new flows, compiled alone, then moved into the program's arenas.
    let cx = DpCx {
        spec,
        d,
        resident,
        pgs,
        names: &names,
    };
    let mut unit = Unit::default();
    let mut news = Vec::with_capacity(fresh);
    for (fs, p) in d.flows.iter().zip(&plan) {
        if p.is_none() {
            news.push(compile_flow(w, &cx, fs, &mut unit));
        }
    }
    let flow_off = prog.flows.len() as u32;
    append_unit(prog, unit);
    let mut news = news.into_iter();
    let mut errors = Vec::new();
    let mut slots = Vec::with_capacity(plan.len());
    for (p, rank) in plan.iter().zip(ranks) {
        let slot = match p {
            Some(x) => olds[*x].clone(),
            None => {
                let (res, refs) = news.next()?;
                let flow = match res {
                    Ok(nf) => {
                        let flow = nf.flow + flow_off;
                        touched.insert((nf.pipe, nf.table));
                        insert_flow(&mut tables, nf, flow, rank);
                        flow
                    }
                    Err(e) => {
                        errors.push(e);
                        Slot::ERROR
                    }
                };
                Slot { rank, flow, refs }
            }
        };
        slots.push(slot);
    }
    // As many tables per pipeline as a fresh compile makes: up to the last one a compiled
    // flow is in.
    let mut len = [0usize; 2];
    for s in slots.iter().filter(|s| s.flow != Slot::ERROR) {
        if let Some(fi) = prog.flows.get(s.flow as usize) {
            let l = &mut len[usize::from(fi.pipe & 1)];
            *l = (*l).max(usize::from(fi.table) + 1);
        }
    }
    for (pipe, t) in tables.iter_mut().enumerate() {
        t.resize_with(len[pipe], Default::default);
    }
    for (pipe, table) in touched {
        if let Some(t) = tables[usize::from(pipe & 1)].get_mut(usize::from(table)) {
            Arc::make_mut(t).finish();
        }
    }
    let (set_refs, resident_refs) = union_refs(&slots);
    let code = DpCode {
        tables,
        errors,
        resident_refs,
        set_refs,
        names,
        flow_count: slots.iter().filter(|s| s.flow != Slot::ERROR).count(),
        switch: matches!(d.kind, crate::DatapathKind::Switch),
        slots,
    };
    Some(Patched {
        code,
        removed,
        compiled: fresh,
    })
}

/// Compiles one datapath's flows into fresh tables and arena entries of its own.
fn compile_dp(
    w: &mut Worker<'_>,
    spec: &ProgramSpec,
    d: &DatapathSpec,
    resident: &HashSet<&str>,
    pgs: &PgMembers,
    names: Names,
) -> Unit {
    let cx = DpCx {
        spec,
        d,
        resident,
        pgs,
        names: &names,
    };
    let mut unit = Unit::default();
    let mut tables: [Vec<Arc<Classifier>>; 2] = Default::default();
    let mut slots = Vec::with_capacity(d.flows.len());
    for (j, fs) in d.flows.iter().enumerate() {
        let rank = rank_of(j);
        let (res, refs) = compile_flow(w, &cx, fs, &mut unit);
        let flow = match res {
            Ok(nf) => {
                let flow = nf.flow;
                insert_flow(&mut tables, nf, flow, rank);
                flow
            }
            Err(e) => {
                unit.code.errors.push(e);
                Slot::ERROR
            }
        };
        slots.push(Slot { rank, flow, refs });
    }
    for t in tables.iter_mut().flatten() {
        let t = Arc::make_mut(t);
        t.finish();
        // A fresh table is kept as long as the datapath does not change: without the slack
        // its growth left (a patched one is copied on write, at its length, anyway).
        t.shrink();
    }
    slots.shrink_to_fit();
    let (set_refs, resident_refs) = union_refs(&slots);
    let code = &mut unit.code;
    code.tables = tables;
    code.flow_count = unit.flows.len();
    code.resident_refs = resident_refs;
    code.set_refs = set_refs;
    code.names = names;
    code.switch = matches!(d.kind, crate::DatapathKind::Switch);
    code.slots = slots;
    unit
}

/// The sets a flow names (`refs`: `$name`, `@name`), with every port group cut down to the
/// members the flow's datapath has (its port and group `names`, in their order, and `none`,
/// which is key 0 everywhere). Exact: a name the datapath does not
/// have compiles to a test that never holds (`inport == "x"`) or always holds
/// (`inport != "x"`), so leaving it out of the group's disjunction (or conjunction) changes
/// no lookup. It keeps a flow on a port group of every switch (an ACL on a 500-port group)
/// from expanding 500 names in each of 500 datapaths, as ovn-controller's per-datapath
/// `Port_Group` rows do (`<tunnel key>_<name>`). A set `refs` names that `all` lacks stays
/// missing (the flow's unknown-set error).
fn sets_for_dp(refs: &[String], all: &Sets, names: &[(String, u32)], pgs: &PgMembers) -> Sets {
    let mut out = Sets::default();
    for r in refs {
        if let Some(n) = r.strip_prefix('$') {
            if let Some(v) = all.addr_sets.get(n) {
                out.addr_sets.insert(n.to_string(), v.clone());
            }
        } else if let Some(n) = r.strip_prefix('@')
            && let Some(members) = pgs.of(all, n)
        {
            // The datapath's names (tens) looked up in the group (up to thousands).
            let mut mine: Vec<String> = names
                .iter()
                .filter(|(x, _)| members.contains(x.as_str()))
                .map(|(x, _)| x.clone())
                .collect();
            if members.contains("none") {
                mine.push("none".into());
            }
            out.port_groups.insert(n.to_string(), mine);
        }
    }
    out
}

/// Port groups' members as sets, made once per compile for the groups its flows name
/// (shared by the worker threads).
#[derive(Default)]
struct PgMembers(std::sync::Mutex<HashMap<String, Arc<HashSet<String>>>>);

impl PgMembers {
    /// Group `name`'s members in `all`, `None` when it has no such group.
    fn of(&self, all: &Sets, name: &str) -> Option<Arc<HashSet<String>>> {
        let members = all.port_groups.get(name)?;
        // A poisoned lock (a worker panicked) only loses the memo.
        let mut memo = match self.0.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        if let Some(m) = memo.get(name) {
            return Some(m.clone());
        }
        let m = Arc::new(members.iter().cloned().collect::<HashSet<String>>());
        memo.insert(name.to_string(), m.clone());
        Some(m)
    }
}

fn collect_sets(e: &hf_expr::Expr, out: &mut HashSet<String>) {
    use hf_expr::{Expr, Value};
    match e {
        Expr::Not(x) => collect_sets(x, out),
        Expr::And(v) | Expr::Or(v) => v.iter().for_each(|x| collect_sets(x, out)),
        Expr::Cmp { rhs, .. } => {
            for t in rhs.terms() {
                match &t.value {
                    Value::AddrSet(n) => {
                        out.insert(format!("${n}"));
                    }
                    Value::PortGroup(n) => {
                        out.insert(format!("@{n}"));
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// `matches` and the prerequisites of the fields the flow's top-level actions assign, move
/// or exchange, as ovn-controller adds them (`ovnacts_parse`'s prerequisites; those inside
/// nested actions are dropped, as OVN does): northd writes two flows with one match whose
/// actions alone tell IPv4 from IPv6 (`ls_in_dns_response`'s `ip4.src <-> ip4.dst` and
/// `ip6.src <-> ip6.dst`).
fn with_action_prereqs(matches: &hf_expr::Expr, actions: &[hf_expr::Action]) -> hf_expr::Expr {
    use hf_expr::{Action, Expr};
    let symtab = SymbolTable::shared();
    let mut prereqs: Vec<Expr> = Vec::new();
    let mut add = |f: &hf_expr::FieldRef| {
        if let Some(p) = symtab.get(&f.name).and_then(|s| s.prereq.as_deref())
            && !prereqs.contains(p)
        {
            prereqs.push(p.clone());
        }
    };
    for a in actions {
        match a {
            Action::Assign { dst, .. } => add(dst),
            Action::Move { dst, src, .. } => {
                add(dst);
                add(src);
            }
            Action::Exchange { a, b, .. } => {
                add(a);
                add(b);
            }
            _ => {}
        }
    }
    if prereqs.is_empty() {
        return matches.clone();
    }
    let mut all = Vec::new();
    for e in std::iter::once(matches.clone()).chain(prereqs) {
        match e {
            Expr::And(v) => all.extend(v),
            Expr::Bool(true) => {}
            e => all.push(e),
        }
    }
    match all.len() {
        0 => Expr::Bool(true),
        1 => all.pop().unwrap_or(Expr::Bool(true)),
        _ => Expr::And(all),
    }
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
