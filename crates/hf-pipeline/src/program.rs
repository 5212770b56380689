//! Programs: the typed input ([`ProgramSpec`]) and its compiled form ([`Program`]).
//!
//! Compilation normalises every match with hf-expr (address sets and port groups resolved
//! through [`Sets`]), resolves port names to keys and fields to bit ranges, and builds one
//! [`Classifier`] per (datapath, pipeline, table). Actions become [`CAct`]s in one arena so that
//! cached action lists can point at them by index.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use hf_conntrack::{Masked, NatRange, Owner};
use hf_expr::actions::{CtCommit, NatKind, NestedKind, NextArgs, Pipeline, ResultFn};
use hf_expr::constant::Format;
use hf_expr::normalize::{Atom, Limits, Normalizer};
use hf_expr::{Action, Constant, Expr, FieldRef, Sets, SymbolTable, Value};

use crate::classifier::{Classifier, Conj, FastMap, Test};
use crate::packet::{Bits, slot};

/// Where a logical port lives.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    Unbound,
}

/// A logical port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSpec {
    /// The logical port name (what `inport == "..."` says).
    pub name: String,
    /// Its tunnel key within the datapath (nonzero).
    pub key: u32,
    /// Where it lives.
    pub location: PortLocation,
    /// The conntrack zone of a switch port (`lsp/<port>`), resolved by the caller.
    pub zone: u16,
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

/// One logical flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    /// Ingress or egress.
    pub pipeline: Pipeline,
    /// Table number within the pipeline.
    pub table: u8,
    /// Priority (higher wins).
    pub priority: u16,
    /// The match.
    pub matches: Expr,
    /// The actions.
    pub actions: Vec<Action>,
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
            matches: hf_expr::parse_match(symtab, matches)?,
            actions: hf_expr::parse_actions(symtab, actions)?,
        })
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
}

/// Why a program did not compile.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// A match did not normalise (or names an unknown field).
    #[error("datapath {datapath}, table {table}, priority {priority}: {message}")]
    Match {
        /// Datapath name.
        datapath: String,
        /// Table.
        table: u8,
        /// Priority.
        priority: u16,
        /// What went wrong.
        message: String,
    },
    /// An action names an unknown field, a predicate, or an impossible value.
    #[error("datapath {datapath}, table {table}, priority {priority}: action: {message}")]
    Action {
        /// Datapath name.
        datapath: String,
        /// Table.
        table: u8,
        /// Priority.
        priority: u16,
        /// What went wrong.
        message: String,
    },
    /// A patch port's peer does not exist.
    #[error("port {port}: unknown patch peer {peer}")]
    UnknownPeer {
        /// The port.
        port: String,
        /// The missing peer.
        peer: String,
    },
    /// Two logical ports claim the same local port id, or a port key is used twice.
    #[error("datapath {datapath}: port key or local id {id} used twice")]
    Duplicate {
        /// Datapath name.
        datapath: String,
        /// The key or id.
        id: u32,
    },
}

/// Which pipeline (internal, `Copy` and indexable).
pub(crate) const INGRESS: u8 = 0;
pub(crate) const EGRESS: u8 = 1;

/// A compiled action. Nested bodies are ranges of the program's action arena.
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
        label: Option<Masked<u128>>,
    },
    /// `ct_snat`/`ct_dnat` (and `_in_czone`), with or without a target.
    CtNat {
        kind: NatKind,
        target: Option<NatRange>,
    },
    /// `ct_commit_nat`.
    CtCommitNat,
    /// `ct_lb`/`ct_lb_mark`; no backends means "existing connections only".
    CtLb {
        mark: bool,
        backends: Vec<(IpAddr, u16)>,
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
    ChkLbHairpin {
        dst: Bits,
        reply: bool,
    },
    Select {
        dst: Bits,
        choices: Vec<(u16, u16)>,
    },
    CheckPktLarger {
        dst: Bits,
        len: u32,
    },
    /// A result function holdfast does not model (DHCP, DNS, FDB, ...): `R = 0`.
    ResultZero {
        dst: Bits,
        #[allow(dead_code)] // shown by traces through Debug
        name: &'static str,
    },
    /// An action with no effect on forwarding (`log`, `set_queue`, `sample`, ...).
    Nop(#[allow(dead_code)] &'static str),
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
    Patch { dp: u32, port: u32 },
    Unbound,
}

#[derive(Debug, Clone)]
pub(crate) struct Port {
    pub name: String,
    pub loc: Loc,
    pub zone: u16,
}

#[derive(Debug)]
pub(crate) struct Dp {
    pub name: String,
    pub key: u32,
    pub kind: DatapathKind,
    pub ports: FastMap<u32, Port>,
    pub groups: FastMap<u32, Vec<u32>>,
    /// `tables[pipeline][table]`.
    pub tables: [Vec<Classifier>; 2],
}

/// What a trace shows of a flow.
#[derive(Debug, Clone)]
pub(crate) struct FlowInfo {
    pub priority: u16,
    pub matches: String,
    pub actions: String,
    pub acts: Range<u32>,
}

/// A compiled program. Immutable; hand it to [`crate::Pipeline::new`] or
/// [`crate::Pipeline::set_program`].
#[derive(Debug)]
pub struct Program {
    pub(crate) dps: Vec<Dp>,
    pub(crate) acts: Vec<CAct>,
    pub(crate) flows: Vec<FlowInfo>,
    /// Local port id → (datapath index, port key).
    pub(crate) local: FastMap<u32, (u32, u32)>,
    /// Datapath tunnel key → index.
    pub(crate) by_key: FastMap<u32, u32>,
    pub(crate) neighbours: Vec<(u32, u32, u128, bool, u128)>,
    pub(crate) owner: Owner,
}

impl Program {
    /// Compiles `spec`.
    pub fn compile(spec: &ProgramSpec) -> Result<Program, CompileError> {
        let symtab = SymbolTable::shared();
        let mut prog = Program {
            dps: Vec::new(),
            acts: Vec::new(),
            flows: Vec::new(),
            local: FastMap::default(),
            by_key: FastMap::default(),
            neighbours: Vec::new(),
            owner: spec.owner,
        };
        // Ports first: patch peers may point forward.
        let mut names: HashMap<String, (u32, u32)> = HashMap::new();
        let mut dp_names: HashMap<&str, u32> = HashMap::new();
        for (i, d) in spec.datapaths.iter().enumerate() {
            dp_names.insert(&d.name, i as u32);
            prog.by_key.insert(d.tunnel_key, i as u32);
            for p in &d.ports {
                names.insert(p.name.clone(), (i as u32, p.key));
            }
        }
        for (i, d) in spec.datapaths.iter().enumerate() {
            let dup = |id| CompileError::Duplicate {
                datapath: d.name.clone(),
                id,
            };
            let mut ports = FastMap::default();
            for p in &d.ports {
                let loc = match &p.location {
                    PortLocation::Local(id) => {
                        if prog.local.insert(*id, (i as u32, p.key)).is_some() {
                            return Err(dup(*id));
                        }
                        Loc::Local(*id)
                    }
                    PortLocation::Remote { chassis } => Loc::Remote(*chassis),
                    PortLocation::Patch { peer } => match names.get(peer) {
                        Some(&(dp, port)) => Loc::Patch { dp, port },
                        None => {
                            return Err(CompileError::UnknownPeer {
                                port: p.name.clone(),
                                peer: peer.clone(),
                            });
                        }
                    },
                    PortLocation::Unbound => Loc::Unbound,
                };
                if p.key == 0 || ports.contains_key(&p.key) {
                    return Err(dup(p.key));
                }
                ports.insert(
                    p.key,
                    Port {
                        name: p.name.clone(),
                        loc,
                        zone: p.zone,
                    },
                );
            }
            let mut groups = FastMap::default();
            for g in &d.groups {
                let mut members: Vec<u32> = g
                    .members
                    .iter()
                    .filter_map(|m| d.ports.iter().find(|p| &p.name == m).map(|p| p.key))
                    .collect();
                members.sort_unstable();
                members.dedup();
                groups.insert(g.key, members);
            }
            prog.dps.push(Dp {
                name: d.name.clone(),
                key: d.tunnel_key,
                kind: d.kind,
                ports,
                groups,
                tables: [Vec::new(), Vec::new()],
            });
        }
        let mut norm = Normalizer::new(symtab, Limits::default());
        for (i, d) in spec.datapaths.iter().enumerate() {
            let port_key = |name: &str| -> Option<u32> {
                d.ports
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| p.key)
                    .or_else(|| d.groups.iter().find(|g| g.name == name).map(|g| g.key))
            };
            let resident = |name: &str| -> bool {
                d.ports
                    .iter()
                    .any(|p| p.name == name && matches!(p.location, PortLocation::Local(_)))
            };
            for fs in &d.flows {
                let merr = |message: String| CompileError::Match {
                    datapath: d.name.clone(),
                    table: fs.table,
                    priority: fs.priority,
                    message,
                };
                let aerr = |message: String| CompileError::Action {
                    datapath: d.name.clone(),
                    table: fs.table,
                    priority: fs.priority,
                    message,
                };
                let n = norm
                    .normalize(&fs.matches, &spec.sets)
                    .map_err(|e| merr(e.to_string()))?;
                let pipe = match fs.pipeline {
                    Pipeline::Egress => EGRESS,
                    _ => INGRESS,
                };
                let mut cx = ActCompiler {
                    symtab,
                    port_key: &port_key,
                    pipe,
                    table: fs.table,
                    dp: i as u32,
                    arena: &mut prog.acts,
                };
                let acts = cx.list(&fs.actions).map_err(aerr)?;
                let flow = prog.flows.len() as u32;
                prog.flows.push(FlowInfo {
                    priority: fs.priority,
                    matches: fs.matches.to_string(),
                    actions: hf_expr::printer::actions_to_string(&fs.actions),
                    acts,
                });
                let tables = &mut prog.dps[i].tables[usize::from(pipe)];
                let t = usize::from(fs.table);
                if tables.len() <= t {
                    tables.resize_with(t + 1, Classifier::default);
                }
                for c in &n.disjuncts {
                    if let Some(conj) = compile_conj(c, &port_key, &resident) {
                        tables[t].insert(fs.priority, flow, conj);
                    }
                }
            }
        }
        for dp in &mut prog.dps {
            for t in dp.tables.iter_mut().flatten() {
                t.finish();
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
            prog.neighbours.push((dpi, p.key, ip, v6, mac));
        }
        Ok(prog)
    }

    /// Number of logical flows.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }
}

pub(crate) fn ip_u128(ip: IpAddr) -> (u128, bool) {
    match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), false),
        IpAddr::V6(a) => (u128::from(a), true),
    }
}

/// A normalised conjunction as a classifier rule; `None` when it can never match.
fn compile_conj(
    c: &hf_expr::normalize::Conj,
    port_key: &dyn Fn(&str) -> Option<u32>,
    resident: &dyn Fn(&str) -> bool,
) -> Option<Conj> {
    let mut masked: Vec<(u8, u128, u128)> = Vec::new();
    let mut residual = Vec::new();
    let mut add = |field: u8, value: u128, mask: u128| -> bool {
        match masked.iter_mut().find(|(f, _, _)| *f == field) {
            Some((_, m, v)) => {
                // Overlapping bits must agree, or the conjunction is empty.
                if (*v ^ value) & *m & mask != 0 {
                    return false;
                }
                *v = (*v & *m) | (value & mask);
                *m |= mask;
                true
            }
            None => {
                masked.push((field, mask, value & mask));
                true
            }
        }
    };
    for a in &c.atoms {
        match atom_test(a, port_key, resident) {
            Test::Bits { field, value, mask } => {
                if mask != 0 && !add(field, value, mask) {
                    return None;
                }
            }
            Test::Port {
                slot,
                key,
                positive: true,
            } => {
                if !add(slot, u128::from(key), u128::from(u32::MAX)) {
                    return None;
                }
            }
            Test::Const(false) => return None,
            Test::Const(true) => {}
            t => residual.push(t),
        }
    }
    masked.sort_by_key(|(f, _, _)| *f);
    let dims = c
        .dims
        .iter()
        .map(|d| d.iter().map(|a| atom_test(a, port_key, resident)).collect())
        .collect();
    Some(Conj {
        masked,
        residual,
        dims,
    })
}

fn atom_test(
    a: &Atom,
    port_key: &dyn Fn(&str) -> Option<u32>,
    resident: &dyn Fn(&str) -> bool,
) -> Test {
    match a {
        Atom::Bits { field, value, mask } => Test::Bits {
            field: field.0 as u8,
            value: *value,
            mask: *mask,
        },
        Atom::Str {
            field,
            value,
            positive,
        } => match port_key(value) {
            Some(key) => Test::Port {
                slot: field.0 as u8,
                key,
                positive: *positive,
            },
            // An unknown port: equality never holds, inequality for every port.
            None => Test::Const(!positive),
        },
        Atom::Resident { port, positive } => Test::Const(resident(port) == *positive),
        // A set whose contents are unknown is empty (as in hf-expr's reference evaluator).
        Atom::Set { positive, .. } => Test::Const(!positive),
        _ => Test::Const(false),
    }
}

struct ActCompiler<'a> {
    symtab: &'static SymbolTable,
    port_key: &'a dyn Fn(&str) -> Option<u32>,
    pipe: u8,
    table: u8,
    dp: u32,
    arena: &'a mut Vec<CAct>,
}

fn const_ip(c: &Constant) -> IpAddr {
    match c.format {
        Format::Ipv6 => IpAddr::V6(Ipv6Addr::from(c.value)),
        _ => IpAddr::V4(Ipv4Addr::from(c.value as u32)),
    }
}

impl ActCompiler<'_> {
    fn bits(&self, f: &FieldRef) -> Result<Bits, String> {
        let r = hf_expr::typecheck::resolve(self.symtab, f).map_err(|e| e.to_string())?;
        match r.bits {
            Some((fid, lo, hi)) if r.symbol.string => {
                let _ = (lo, hi);
                Ok(Bits {
                    field: fid.0 as u8,
                    lo: 0,
                    width: 32,
                })
            }
            Some((fid, lo, hi)) if hi >= lo && hi < 128 => Ok(Bits {
                field: fid.0 as u8,
                lo: lo as u8,
                width: (hi - lo + 1).min(128) as u8,
            }),
            _ => Err(format!("`{}` is not a field", f.name)),
        }
    }

    fn list(&mut self, actions: &[Action]) -> Result<Range<u32>, String> {
        let mut out = Vec::with_capacity(actions.len());
        for a in actions {
            out.push(self.one(a)?);
        }
        let start = self.arena.len() as u32;
        self.arena.extend(out);
        Ok(start..self.arena.len() as u32)
    }

    fn one(&mut self, a: &Action) -> Result<CAct, String> {
        Ok(match a {
            Action::Next { args, .. } => {
                let (pipeline, table) = match *args {
                    NextArgs::Plain => (self.pipe, u32::from(self.table) + 1),
                    NextArgs::Table(t) => (self.pipe, t),
                    NextArgs::Named { pipeline, table } => (
                        match pipeline {
                            Some(Pipeline::Egress) => EGRESS,
                            Some(_) => INGRESS,
                            None => self.pipe,
                        },
                        table.unwrap_or(u32::from(self.table) + 1),
                    ),
                    _ => (self.pipe, u32::from(self.table) + 1),
                };
                CAct::Next {
                    pipeline,
                    table: table.min(255) as u8,
                }
            }
            Action::Output { .. } => CAct::Output,
            Action::Drop { .. } => CAct::Drop,
            Action::Assign { dst, value, .. } => {
                let b = self.bits(dst)?;
                let v = match value {
                    Value::Const(c) => c.value,
                    Value::Str(s) => u128::from((self.port_key)(s).unwrap_or(0)),
                    _ => return Err("sets cannot be assigned".into()),
                };
                CAct::Set {
                    field: b.field,
                    value: v.checked_shl(u32::from(b.lo)).unwrap_or(0) & b.mask(),
                    mask: b.mask(),
                }
            }
            Action::Move { dst, src, .. } => CAct::Move {
                dst: self.bits(dst)?,
                src: self.bits(src)?,
            },
            Action::Exchange { a, b, .. } => CAct::Exchange {
                a: self.bits(a)?,
                b: self.bits(b)?,
            },
            Action::Push { field, .. } => CAct::Push(self.bits(field)?),
            Action::Pop { field, .. } => CAct::Pop(self.bits(field)?),
            Action::DecTtl { .. } => CAct::DecTtl,
            Action::CtNext { .. } => CAct::CtNext,
            Action::CtCommit { args, .. } => {
                let (mut mark, mut label) = (None::<Masked<u32>>, None::<Masked<u128>>);
                match args {
                    CtCommit::Bare => {}
                    CtCommit::Legacy { mark: m, label: l } => {
                        mark = m.map(|c| Masked {
                            value: c.value as u32,
                            mask: c.mask_bits(32) as u32,
                        });
                        label = l.map(|c| Masked {
                            value: c.value,
                            mask: c.mask_bits(128),
                        });
                    }
                    CtCommit::Block(body) => {
                        for b in body {
                            let Action::Assign {
                                dst,
                                value: Value::Const(c),
                                ..
                            } = b
                            else {
                                return Err("ct_commit { } takes constant assignments".into());
                            };
                            let bits = self.bits(dst)?;
                            let v = c.value.checked_shl(u32::from(bits.lo)).unwrap_or(0);
                            match usize::from(bits.field) {
                                slot::CT_MARK => {
                                    let m = mark.get_or_insert(Masked { value: 0, mask: 0 });
                                    m.value |= (v & bits.mask()) as u32;
                                    m.mask |= bits.mask() as u32;
                                }
                                slot::CT_LABEL => {
                                    let m = label.get_or_insert(Masked { value: 0, mask: 0 });
                                    m.value |= v & bits.mask();
                                    m.mask |= bits.mask();
                                }
                                _ => return Err("ct_commit { } sets ct_mark or ct_label".into()),
                            }
                        }
                    }
                    _ => {}
                }
                CAct::CtCommit { mark, label }
            }
            Action::CtNat { kind, target, .. } => CAct::CtNat {
                kind: *kind,
                target: target.as_ref().map(|t| {
                    let ip = const_ip(&t.addr);
                    let (lo, hi) = t.ports.unwrap_or((0, 0));
                    NatRange {
                        addr_min: ip,
                        addr_max: ip,
                        port_min: lo,
                        port_max: hi.max(lo),
                    }
                }),
            },
            Action::CtClear { .. } => CAct::CtClear,
            Action::CtCommitNat { .. } => CAct::CtCommitNat,
            Action::CtLb { mark, args, .. } => CAct::CtLb {
                mark: *mark,
                backends: args
                    .as_ref()
                    .map(|a| {
                        a.backends
                            .iter()
                            .map(|b| (const_ip(&b.ip), b.port.unwrap_or(0)))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            Action::Nested { kind, body, .. } => {
                let body = self.list(body)?;
                CAct::Nested { kind: *kind, body }
            }
            Action::GetArp { port, ip, .. } => CAct::GetNeigh {
                dp: self.dp,
                v6: false,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
            },
            Action::GetNd { port, ip, .. } => CAct::GetNeigh {
                dp: self.dp,
                v6: true,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
            },
            Action::PutArp { port, ip, mac, .. } => CAct::PutNeigh {
                dp: self.dp,
                v6: false,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
                mac: self.bits(mac)?,
            },
            Action::PutNd { port, ip, mac, .. } => CAct::PutNeigh {
                dp: self.dp,
                v6: true,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
                mac: self.bits(mac)?,
            },
            Action::Result { dst, func, .. } => {
                let dst = self.bits(dst)?;
                match func {
                    ResultFn::LookupArp { port, ip, mac }
                    | ResultFn::LookupNd { port, ip, mac } => CAct::LookupNeigh {
                        dp: self.dp,
                        v6: matches!(func, ResultFn::LookupNd { .. }),
                        dst,
                        port: self.bits(port)?,
                        ip: self.bits(ip)?,
                        mac: Some(self.bits(mac)?),
                    },
                    ResultFn::LookupArpIp { port, ip } | ResultFn::LookupNdIp { port, ip } => {
                        CAct::LookupNeigh {
                            dp: self.dp,
                            v6: matches!(func, ResultFn::LookupNdIp { .. }),
                            dst,
                            port: self.bits(port)?,
                            ip: self.bits(ip)?,
                            mac: None,
                        }
                    }
                    ResultFn::ChkLbHairpin => CAct::ChkLbHairpin { dst, reply: false },
                    ResultFn::ChkLbHairpinReply => CAct::ChkLbHairpin { dst, reply: true },
                    ResultFn::CheckPktLarger { len } => CAct::CheckPktLarger { dst, len: *len },
                    other => CAct::ResultZero {
                        dst,
                        name: other.name(),
                    },
                }
            }
            Action::Select { dst, choices, .. } => CAct::Select {
                dst: self.bits(dst)?,
                choices: choices
                    .iter()
                    .map(|(v, w)| (*v, w.unwrap_or(100).max(1)))
                    .collect(),
            },
            Action::PutFdb { .. } => CAct::Nop("put_fdb"),
            Action::SetQueue { .. } => CAct::Nop("set_queue"),
            Action::SetMeter { .. } => CAct::Nop("set_meter"),
            Action::Log { .. } => CAct::Nop("log"),
            Action::Sample { .. } => CAct::Nop("sample"),
            Action::TriggerEvent { .. } => CAct::Nop("trigger_event"),
            Action::CtSnatToVip { .. } => CAct::Nop("ct_snat_to_vip"),
            Action::CommitEcmpNh { .. } => CAct::Nop("commit_ecmp_nh"),
            Action::CommitLbAff { .. } => CAct::Nop("commit_lb_aff"),
            _ => CAct::Nop("unsupported action"),
        })
    }
}
