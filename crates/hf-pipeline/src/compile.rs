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
//!   flows, port names/keys, referenced sets and referenced residency did not change.
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
    FlowErrorKind, FlowInfo, INGRESS, Loc, Port, PortLocation, Program, ProgramSpec, ip_u128,
};

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
        Program::build(spec, None, &[], &CompileOptions::default())
    }

    /// [`Program::compile`] with `opts` (worker threads). The program is the same whatever the
    /// options.
    pub fn compile_with(
        spec: &ProgramSpec,
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, None, &[], opts)
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
        Program::build(spec, Some(self), changed, &CompileOptions::default())
    }

    /// [`Program::recompile`] with `opts` (worker threads for the datapaths it compiles).
    pub fn recompile_with(
        &self,
        spec: &ProgramSpec,
        changed: &[&str],
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        Program::build(spec, Some(self), changed, opts)
    }

    /// How many datapaths the compile that made this program compiled (the rest it took from
    /// the previous program).
    pub fn compiled_datapaths(&self) -> usize {
        self.compiled
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
        opts: &CompileOptions,
    ) -> Result<(Program, Vec<FlowError>), CompileError> {
        let mut prog = Program {
            compiled: 0,
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
        let mut names: HashMap<&str, (u32, u32)> = HashMap::new();
        let mut dp_names: HashMap<&str, u32> = HashMap::new();
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
        for (i, d) in spec.datapaths.iter().enumerate() {
            let dup = |id| CompileError::Duplicate {
                datapath: d.name.clone(),
                id,
            };
            // Name to key within this datapath (the first port of a name, as a scan would find).
            let mut key_of: HashMap<&str, u32> = HashMap::new();
            for p in &d.ports {
                key_of.entry(p.name.as_str()).or_insert(p.key);
            }
            let mut ports = FastMap::default();
            for p in &d.ports {
                let loc = match &p.location {
                    PortLocation::Local(id) => {
                        if prog.local.insert(*id, (i as u32, p.key)).is_some() {
                            return Err(dup(*id));
                        }
                        if let Some(a) = p.activation {
                            prog.inactive.push((*id, a));
                        }
                        Loc::Local(*id)
                    }
                    PortLocation::Remote { chassis } => Loc::Remote(*chassis),
                    PortLocation::Patch { peer } => match names.get(peer.as_str()) {
                        Some(&(dp, port)) => Loc::Patch { dp, port },
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
            let mut groups = FastMap::default();
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
            let vips = vips_of.remove(d.name.as_str()).unwrap_or_default();
            let snat_zone = snat_of.get(d.name.as_str()).copied();
            prog.dps.push(Dp {
                name: d.name.clone(),
                key: d.tunnel_key,
                kind: d.kind,
                ports,
                groups,
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
        let old_dps: HashMap<&str, &Dp> = old
            .map(|o| o.dps.iter().map(|d| (d.name.as_str(), d)).collect())
            .unwrap_or_default();
        let old_counters = prog.counters.len();
        let mut reused_keys: HashSet<u32> = HashSet::new();
        // Whether a set resolves as before, asked once per set (many datapaths name one set).
        let mut same_sets: HashMap<&str, bool> = HashMap::new();
        let mut todo: Vec<(usize, Vec<(String, u32)>)> = Vec::new();
        for (i, d) in spec.datapaths.iter().enumerate() {
            if let (Some(o), Some(od)) = (old, old_dps.get(d.name.as_str()))
                && od.key == d.tunnel_key
                && !changed.contains(&d.name.as_str())
                && same_names_keys(&od.tables.names, d)
                && od
                    .tables
                    .resident_refs
                    .iter()
                    .all(|(p, r)| resident.contains(p.as_str()) == *r)
                && od.tables.set_refs.iter().all(|s| {
                    *same_sets
                        .entry(s.as_str())
                        .or_insert_with(|| same_set(s, &o.sets, &spec.sets))
                })
            {
                prog.dps[i].tables = od.tables.clone();
                reused_keys.insert(d.tunnel_key);
                continue;
            }
            todo.push((i, names_keys(d)));
        }
        prog.compiled = todo.len();
        let flows: usize = todo
            .iter()
            .map(|(i, _)| spec.datapaths[*i].flows.len())
            .sum();
        let threads = if flows < opts.min_parallel_flows {
            1
        } else {
            opts.threads
        };
        let units = compile_units(spec, todo.iter(), &resident, threads);
        for ((i, _), unit) in todo.iter().zip(units) {
            prog.dps[*i].tables = Arc::new(append_unit(&mut prog, unit));
        }
        let all_errors = prog
            .dps
            .iter()
            .flat_map(|d| d.tables.errors.iter().cloned())
            .collect();
        // Counters of the old program's flows that were not reused belong to dead flows.
        for c in prog.counters.iter_mut().take(old_counters) {
            if !reused_keys.contains(&c.dp) {
                c.live = false;
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

/// `$name` / `@name` resolve the same way in both set collections.
fn same_set(s: &str, a: &Sets, b: &Sets) -> bool {
    if let Some(n) = s.strip_prefix('$') {
        a.addr_sets.get(n) == b.addr_sets.get(n)
    } else if let Some(n) = s.strip_prefix('@') {
        a.port_groups.get(n) == b.port_groups.get(n)
    } else {
        true
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
struct Unit {
    code: DpCode,
    acts: Vec<CAct>,
    flows: Vec<FlowInfo>,
    counters: Vec<Counted>,
}

/// Compiles the datapaths `todo` names (index, names and keys), on up to `threads` worker
/// threads; the units come back in `todo`'s order, whatever the thread count (each datapath's
/// unit depends only on the spec, never on what another thread compiled).
fn compile_units<'a>(
    spec: &ProgramSpec,
    todo: impl ExactSizeIterator<Item = &'a (usize, Vec<(String, u32)>)>,
    resident: &HashSet<&str>,
    threads: usize,
) -> Vec<Unit> {
    let todo: Vec<&(usize, Vec<(String, u32)>)> = todo.collect();
    let one = |norm: &mut Normalizer<'_>, j: usize| {
        let (i, names) = todo[j];
        compile_dp(norm, spec, &spec.datapaths[*i], resident, names.clone())
    };
    let new_norm = || Normalizer::new(SymbolTable::shared(), Limits::default());
    let threads = threads.clamp(1, todo.len().max(1));
    if threads == 1 {
        let mut norm = new_norm();
        return (0..todo.len()).map(|j| one(&mut norm, j)).collect();
    }
    // Thread `t` compiles datapaths t, t + threads, ... (a fixed split: which thread compiles
    // what never depends on timing); results go to their own slot, so the order is the
    // sequential one.
    let mut slots: Vec<Option<Unit>> = (0..todo.len()).map(|_| None).collect();
    let n = todo.len();
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let one = &one;
                sc.spawn(move || {
                    let mut norm = new_norm();
                    (t..n)
                        .step_by(threads)
                        .map(|j| (j, one(&mut norm, j)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok(done) => {
                    for (j, u) in done {
                        slots[j] = Some(u);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    slots.into_iter().flatten().collect()
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
        t.rebase(flow_off);
    }
    code
}

/// Compiles one datapath's flows into fresh tables and arena entries of its own.
fn compile_dp(
    norm: &mut Normalizer<'_>,
    spec: &ProgramSpec,
    d: &DatapathSpec,
    resident: &HashSet<&str>,
    names: Vec<(String, u32)>,
) -> Unit {
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
    let is_resident = |name: &str| resident.contains(name);
    let mut code = DpCode::default();
    let (mut acts, mut flows, mut counters) = (Vec::new(), Vec::new(), Vec::new());
    let mut resident_refs: HashSet<(String, bool)> = HashSet::new();
    let mut set_refs: HashSet<String> = HashSet::new();
    for fs in &d.flows {
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
            stage: fs.stage.clone(),
            sb_uuid: fs.sb_uuid.clone(),
            kind,
            message,
        };
        if let Some(e) = &fs.parse_error {
            code.errors.push(err(FlowErrorKind::Syntax, e.clone()));
            continue;
        }
        // Sets named by the match, found or not: a change to them recompiles this datapath.
        collect_sets(&fs.matches, &mut set_refs);
        let matches = with_action_prereqs(&fs.matches, &fs.actions);
        let n = match norm.normalize(&matches, &spec.sets) {
            Ok(n) => n,
            Err(e) => {
                code.errors.push(err(FlowErrorKind::Match, e.to_string()));
                continue;
            }
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
            code.errors.push(err(
                FlowErrorKind::UnknownSet,
                format!("unknown address set or port group {}", unknown.join(", ")),
            ));
            continue;
        }
        for c in &n.disjuncts {
            for a in c.atoms.iter().chain(c.dims.iter().flatten()) {
                if let Atom::Resident { port, .. } = a {
                    resident_refs.insert((port.clone(), is_resident(port)));
                }
            }
        }
        let mark = acts.len();
        let counter_base = counters.len() as u32;
        let mut cx = ActCompiler::new(&port_key, pipe, fs.table, d.tunnel_key, &mut acts);
        cx.switch = matches!(d.kind, crate::DatapathKind::Switch);
        cx.counter_base = counter_base;
        let listed = cx.list(&fs.actions);
        let counted = std::mem::take(&mut cx.counted);
        let acts = match listed {
            Ok(a) => a,
            Err(m) => {
                acts.truncate(mark);
                let (kind, m) = match m.strip_prefix(UNSUPPORTED) {
                    Some(rest) => (FlowErrorKind::Unsupported, rest.to_string()),
                    None => (FlowErrorKind::Action, m),
                };
                code.errors.push(err(kind, m));
                continue;
            }
        };
        let flow = flows.len() as u32;
        counters.extend(counted.into_iter().map(|name| Counted {
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
                fs.matches.to_string().into(),
                hf_expr::printer::actions_to_string(&fs.actions).into(),
            ),
        };
        flows.push(FlowInfo {
            priority: fs.priority,
            matches,
            actions,
            acts,
            id: fs.id.clone(),
            stage: fs.stage.clone(),
            sb_uuid: fs.sb_uuid.clone(),
            stage_hint: fs.stage_hint.clone(),
        });
        let tables = &mut code.tables[usize::from(pipe)];
        let t = usize::from(fs.table);
        if tables.len() <= t {
            tables.resize_with(t + 1, Classifier::default);
        }
        for c in &n.disjuncts {
            if let Some(conj) = compile_conj(c, &port_key, &is_resident) {
                tables[t].insert(fs.priority, flow, conj);
            }
        }
    }
    for t in code.tables.iter_mut().flatten() {
        t.finish();
    }
    code.flow_count = flows.len();
    code.resident_refs = resident_refs.into_iter().collect();
    code.resident_refs.sort();
    code.set_refs = set_refs.into_iter().collect();
    code.set_refs.sort();
    code.names = names;
    Unit {
        code,
        acts,
        flows,
        counters,
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
