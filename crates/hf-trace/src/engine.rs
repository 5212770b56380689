//! One packet through the program: the frame a microflow describes enters the ingress pipeline
//! of its `inport`'s datapath and runs through `hf_pipeline::Pipeline::trace_with`, the walk the
//! datapath itself runs, with conntrack on a scratch table of its own (what the walk commits
//! its later lookups see; nothing outlives the trace) and ovn-trace's `--ct`/`--lb-dst`
//! overrides.
//!
//! The [`Outcome`] names what the packet did: every table visited (with the flow's stage, SB
//! UUID, identity and NB stage-hint), the logical ports its copies reached (patch ports are
//! crossed, so a switch → router → switch path ends at the far VIF; a flood or multicast group
//! lists every member reached), the NAT applied (each rewritten L3/L4 address or port of an
//! output against the input, with the conntrack NAT action that did it), and, when nothing
//! was output, the stage that dropped it and why.
//!
//! What it does not do: fetch or translate SB (the shell and `hf-controller` do), or keep
//! state between traces other than the compiled program.

use std::collections::BTreeMap;
use std::time::Duration;

use hf_conntrack::Conntrack;
use hf_pipeline::{
    CompileError, Destination, FlowError, Ingress, Outputs, Pipeline, PortLocation, Program,
    ProgramSpec, Trace, WhatIf,
};

use crate::frame;
use crate::microflow::Microflow;

/// A logical port reached by a copy of the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The logical port.
    pub port: String,
    /// Its datapath.
    pub datapath: String,
    /// The remote chassis (the translation's numbering) when the copy leaves through a tunnel.
    pub chassis: Option<u32>,
    /// That chassis' name, when the session knows it ([`Session::set_chassis_names`]).
    pub chassis_name: Option<String>,
    /// The frame as it leaves.
    pub frame: Vec<u8>,
}

/// One NAT rewrite seen on an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nat {
    /// The action that did it (`ct_snat_in_czone`, `ct_dnat`, `ct_lb_mark`, ...; `set_field`
    /// for a stateless rewrite by assignment).
    pub action: String,
    /// The field (`ip4.src`, `tcp.dst`, ...).
    pub field: String,
    /// Its new value.
    pub value: String,
}

/// Why the packet reached no port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The stage of the last table visited (`ls_in_acl`, ...; `table N` without a stage name).
    pub stage: String,
    /// What happened there.
    pub reason: String,
}

/// What one trace found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The microflow text.
    pub microflow: String,
    /// The datapath it entered.
    pub datapath: String,
    /// Its ingress port.
    pub inport: String,
    /// Every table visited.
    pub trace: Trace,
    /// The copies that left, in the order they were sent.
    pub outputs: Vec<Output>,
    /// NAT applied to what left.
    pub nat: Vec<Nat>,
    /// Set when nothing left.
    pub drop: Option<Dropped>,
}

/// Why a trace could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The microflow names no `inport`.
    #[error("microflow does not specify ingress port")]
    NoInport,
    /// The named datapath is not in the program.
    #[error("unknown datapath \"{0}\"")]
    UnknownDatapath(String),
    /// The inport is not a port of any datapath (or not of the one named).
    #[error("unknown port \"{port}\"{}", .datapath.as_ref().map(|d| format!(" on datapath \"{d}\"")).unwrap_or_default())]
    UnknownPort {
        /// The port.
        port: String,
        /// The datapath it was looked up on.
        datapath: Option<String>,
    },
    /// The inport is not bound on the traced chassis, so no packet can enter there.
    #[error(
        "port \"{0}\" is not bound on this chassis (trace from one of its ports, or without --chassis)"
    )]
    NotLocal(String),
    /// The pipeline refused the frame.
    #[error("{0}")]
    Process(String),
}

/// A compiled program ready to trace many packets.
#[derive(Debug)]
pub struct Session {
    pipeline: Pipeline,
    ports: BTreeMap<String, (String, PortLocation)>,
    by_local: BTreeMap<u32, (String, String)>,
    by_key: BTreeMap<(u32, u32), (String, String)>,
    datapaths: Vec<String>,
    chassis_names: BTreeMap<u32, String>,
    /// Flows that did not compile (the rest did; the trace goes on without them).
    pub flow_errors: Vec<FlowError>,
}

impl Session {
    /// Compiles `spec`. A flow that does not compile is a [`FlowError`] in
    /// [`Session::flow_errors`]; only structural errors fail.
    pub fn new(spec: &ProgramSpec) -> Result<Session, CompileError> {
        let (prog, flow_errors) = Program::compile(spec)?;
        let mut s = Session {
            pipeline: Pipeline::new(prog),
            ports: BTreeMap::new(),
            by_local: BTreeMap::new(),
            by_key: BTreeMap::new(),
            datapaths: Vec::new(),
            chassis_names: BTreeMap::new(),
            flow_errors,
        };
        s.index(spec);
        Ok(s)
    }

    /// Replaces the program by `spec`'s, recompiling only the datapaths named in `changed`
    /// (those whose spec may differ from the last one's, such as an incremental translation's
    /// touched datapaths, and those `Program::recompile` finds affected); the rest keep their
    /// compiled tables. The session keeps no copy of the spec: the caller says what changed.
    pub fn update(&mut self, spec: &ProgramSpec, changed: &[&str]) -> Result<(), CompileError> {
        let (prog, errors) = self.pipeline.program().recompile(spec, changed)?;
        self.pipeline.set_program(prog);
        self.flow_errors = errors;
        self.index(spec);
        Ok(())
    }

    fn index(&mut self, spec: &ProgramSpec) {
        let s = self;
        s.ports.clear();
        s.by_local.clear();
        s.by_key.clear();
        s.datapaths.clear();
        for d in &spec.datapaths {
            s.datapaths.push(d.name.clone());
            for p in &d.ports {
                s.ports
                    .insert(p.name.clone(), (d.name.clone(), p.location.clone()));
                if let PortLocation::Local(id) = p.location {
                    s.by_local.insert(id, (p.name.clone(), d.name.clone()));
                }
                s.by_key
                    .insert((d.tunnel_key, p.key), (p.name.clone(), d.name.clone()));
            }
        }
    }

    /// Names the chassis of [`hf_pipeline::PortLocation::Remote`] ids in outputs.
    pub fn set_chassis_names(&mut self, names: BTreeMap<u32, String>) {
        self.chassis_names = names;
    }

    /// The datapaths' names.
    pub fn datapaths(&self) -> &[String] {
        &self.datapaths
    }

    /// The datapath a port is on.
    pub fn port_datapath(&self, port: &str) -> Option<&str> {
        self.ports.get(port).map(|(d, _)| d.as_str())
    }

    /// Traces `mf` entering `datapath` (None: its inport's datapath, as ovn-trace).
    pub fn trace(
        &mut self,
        datapath: Option<&str>,
        mf: &Microflow,
        what_if: &WhatIf,
    ) -> Result<Outcome, TraceError> {
        let inport = mf.inport.clone().ok_or(TraceError::NoInport)?;
        if let Some(d) = datapath
            && !self.datapaths.iter().any(|n| n == d)
        {
            return Err(TraceError::UnknownDatapath(d.to_string()));
        }
        let (dp, loc) = match self.ports.get(&inport) {
            Some((dp, loc)) if datapath.is_none_or(|d| d == dp) => (dp.clone(), loc.clone()),
            _ => {
                return Err(TraceError::UnknownPort {
                    port: inport,
                    datapath: datapath.map(str::to_string),
                });
            }
        };
        let PortLocation::Local(id) = loc else {
            return Err(TraceError::NotLocal(inport));
        };
        let input = frame::build(mf);
        let mut out = Outputs::default();
        // A scratch conntrack table for this packet alone: what the walk commits, its later
        // lookups see (the reply to a ping of a router port); nothing outlives the trace.
        let mut scratch = Conntrack::new(hf_conntrack::Config::default());
        let trace = self
            .pipeline
            .trace_scratch(
                &mut scratch,
                Ingress::Local(id),
                &input,
                Duration::from_secs(1),
                &mut out,
                what_if,
            )
            .map_err(|e| TraceError::Process(e.to_string()))?;
        let mut outputs = Vec::new();
        for (d, f) in out.iter() {
            let (name, chassis) = match d {
                Destination::Local(id) => (self.by_local.get(&id).cloned(), None),
                Destination::Tunnel {
                    chassis,
                    datapath,
                    outport,
                    ..
                } => (
                    self.by_key.get(&(datapath, outport)).cloned(),
                    Some(chassis),
                ),
                #[allow(unreachable_patterns)]
                _ => (None, None),
            };
            let (port, datapath) =
                name.unwrap_or_else(|| (format!("{d:?}"), String::from("(unknown)")));
            outputs.push(Output {
                port,
                datapath,
                chassis_name: chassis.and_then(|c| self.chassis_names.get(&c).cloned()),
                chassis,
                frame: f.to_vec(),
            });
        }
        let nat = nat_of(&trace);
        let drop = if outputs.is_empty() {
            Some(drop_of(&trace))
        } else {
            None
        };
        Ok(Outcome {
            microflow: mf.text.clone(),
            datapath: dp,
            inport,
            trace,
            outputs,
            nat,
            drop,
        })
    }
}

/// The stage name a record's flow carries, else `table N`.
pub fn stage_of(r: &hf_pipeline::TraceRecord) -> String {
    match &r.flow {
        Some(f) if !f.stage.is_empty() => f.stage.clone(),
        _ => format!("{} table {}", r.pipeline, r.table),
    }
}

fn drop_of(trace: &Trace) -> Dropped {
    let Some(last) = trace.records.last() else {
        return Dropped {
            stage: String::new(),
            reason: "the pipeline visited no table".into(),
        };
    };
    let reason = last
        .effects
        .iter()
        .rev()
        .find(|e| e.contains("drop"))
        .cloned()
        .or_else(|| {
            last.flow.as_ref().and_then(|f| {
                let a = f.actions.trim();
                matches!(a, "" | "drop;" | "drop" | "/* drop */")
                    .then(|| format!("the flow drops (\"{a}\")"))
            })
        })
        .unwrap_or_else(|| match &last.flow {
            Some(f) => format!("no output after \"{}\"", f.actions),
            None => "no flow matched".into(),
        });
    Dropped {
        stage: stage_of(last),
        reason,
    }
}

const NAT_WORDS: &[&str] = &[
    "ct_snat_to_vip",
    "ct_snat_in_czone",
    "ct_dnat_in_czone",
    "ct_snat",
    "ct_dnat",
    "ct_lb_mark",
    "ct_lb",
    "ct_commit_nat",
];

/// The NAT conntrack applied on the walk: every `  nat FIELD=VALUE` note the pipeline writes
/// after a conntrack action that rewrote the packet, named by the NAT action of the flow that
/// ran it (so a router's own rewrites, such as an echo reply swapping addresses or a generated
/// ICMP error, are not NAT; and NAT on a generated packet is).
fn nat_of(trace: &Trace) -> Vec<Nat> {
    let mut nat = Vec::new();
    for r in &trace.records {
        for e in &r.effects {
            let Some((field, value)) = e
                .trim_start()
                .strip_prefix("nat ")
                .and_then(|x| x.split_once('='))
            else {
                continue;
            };
            let src = field.ends_with(".src");
            let action = r
                .flow
                .as_ref()
                .and_then(|f| {
                    NAT_WORDS.iter().copied().find(|w| {
                        let side = if src {
                            w.contains("snat")
                        } else {
                            w.contains("dnat")
                        };
                        f.actions.contains(w)
                            && (side || w.starts_with("ct_lb") || *w == "ct_commit_nat")
                    })
                })
                .unwrap_or(if src { "ct_snat" } else { "ct_dnat" })
                .to_string();
            let field = match field.strip_prefix("l4.") {
                Some(side) => format!("{}.{side}", l4_name(trace)),
                None => field.to_string(),
            };
            let n = Nat {
                action,
                field,
                value: value.to_string(),
            };
            if !nat.contains(&n) {
                nat.push(n);
            }
        }
    }
    nat
}

/// `tcp`, `udp` or `sctp` for port rewrites, from the first flow naming one.
fn l4_name(trace: &Trace) -> &'static str {
    for r in &trace.records {
        if let Some(f) = &r.flow {
            for p in ["tcp", "udp", "sctp"] {
                if f.matches.contains(p) {
                    return p;
                }
            }
        }
    }
    "l4"
}
