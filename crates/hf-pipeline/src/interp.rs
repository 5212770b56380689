//! The interpreter: one walk of the logical tables that records what it does as `Op`s, and one
//! function, `Runner::exec_op`, that performs an op. The full walk, the cached path and trace
//! all execute ops through that same function; the cached path just skips the table lookups.
//!
//! # Segments, recirculation and wildcards
//!
//! A walk starts at a *resume point* (datapath, pipeline, table) with the context as it is. It
//! ends where the packet leaves the pipeline or at a conntrack action that continues in the next
//! table (`ct_next`, `ct_snat`/`ct_dnat`, `ct_lb*`, `ct_commit_nat`): there conntrack runs and the
//! continuation is a new segment, looked up (or walked) with the context after conntrack, like
//! OVS's recirculation. While walking, every field the walk's decisions depended on is
//! "examined": classifier lookups report the bits their subtables hashed, and control decisions
//! (which port, which zone, TTL expiry, whether a reply can be built) report the fields they read.
//! A field written by an action is tracked: a constant write takes those bits out of the key,
//! and a value moved from another field makes a later examination un-wildcard the source. A
//! segment whose decisions depended on something outside its start context (a packet length,
//! state after a nested recirculation) is not cached.

mod ct;

use std::time::Duration;

use hf_conntrack::{Conntrack, CtAction, CtResult, Masked, NatRange};
use hf_expr::actions::{NatKind, NestedKind};
use hf_expr::constant::width_mask;
use hf_expr::symbols::FIELDS;
use hf_wire::{ip_proto, reply, tcp_flags};

use crate::cache::Cache;
use crate::classifier::Examine;
use crate::learn::Learned;
use crate::packet::{Bits, Ctx, NF, slot};
use crate::program::{CAct, DatapathKind, EGRESS, INGRESS, Loc, Program};
use crate::stateful::{AFF_PORT, AFF_REG4, AFF_XXREG0, AFF_XXREG1};
use crate::trace::{Trace, TraceFlow, TraceRecord};
use crate::{Destination, Outputs};
use ct::nat_notes;

/// Table lookups one segment may make (OVS bounds resubmits the same way).
pub const MAX_STEPS: u32 = 4096;
/// Nesting of resubmits, clones and floods within a segment.
pub const MAX_DEPTH: u32 = 64;
/// Recirculations per packet.
pub const MAX_RECIRC: u32 = 16;
/// `resume` of an op that does not recirculate.
pub(crate) const NO_RESUME: u32 = u32::MAX;

const OPAQUE: u64 = 1 << 63;

/// One recorded effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A data action from the program's arena.
    Act(u32),
    /// A conntrack action in `zone`; with a resume point, the continuation runs after it.
    /// `hint` is the cache's hint slot for the continuation (`cache::NO_HINT` until the op is
    /// cached; see `cache`).
    Ct {
        zone: u16,
        act: u32,
        resume: u32,
        hint: u32,
        /// `act` is a plain `ct_next` (a lookup with no action data): resolved when recorded,
        /// so a replay runs it without reading the program's action arena.
        lookup_only: bool,
    },
    /// Set a port slot (flood members).
    SetPort { slot: u8, key: u32 },
    /// Cross a patch port into datapath `dp` with `inport`.
    EnterDp { dp: u32, inport: u32 },
    /// Enter the egress pipeline: the registers are cleared (only the port keys would travel
    /// through a tunnel, so OVN clears them locally too).
    EnterEgress,
    /// Save the context (clone, flood, packet generation).
    Save,
    /// Restore the last saved context.
    Restore,
    /// Replace the packet by a generated one.
    Generate(NestedKind),
    /// Send the current frame.
    Emit(Destination),
    /// A plain field write (`CAct::Set`) whose field, value and mask the cache copied into its
    /// own table when it stored the op (index into it): only cached ops are of this kind.
    SetConst(u32),
}

pub(crate) fn resume_id(dp: u32, pipe: u8, table: u8) -> u32 {
    (dp << 9) | (u32::from(pipe) << 8) | u32::from(table)
}

fn resume_parts(r: u32) -> (u32, u8, u8) {
    (r >> 9, ((r >> 8) & 1) as u8, r as u8)
}

fn full(field: usize) -> u128 {
    match FIELDS.get(field) {
        Some(d) if d.string => u128::from(u32::MAX),
        Some(d) => width_mask(d.width),
        None => 0,
    }
}

/// The state of one segment walk: its wildcards, its recorded ops, and what each field's current
/// value derives from.
#[derive(Debug)]
pub(crate) struct Walk {
    pub wc: [u128; NF],
    written: [u128; NF],
    deps: [u64; NF],
    saved: Vec<([u128; NF], [u64; NF])>,
    pstack: Vec<u64>,
    pub ops: Vec<Op>,
    pub cacheable: bool,
    steps: u32,
}

impl Examine for Walk {
    fn examine(&mut self, field: usize, mask: u128) {
        let Some(d) = self.deps.get(field).copied() else {
            return;
        };
        if d & OPAQUE != 0 {
            self.cacheable = false;
        }
        self.wc[field] |= mask & !self.written[field];
        let mut rest = d & !OPAQUE;
        while rest != 0 {
            let g = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if g < NF {
                self.wc[g] = full(g);
            }
        }
    }
}

impl Walk {
    fn new() -> Walk {
        Walk {
            wc: [0; NF],
            written: [0; NF],
            deps: [0; NF],
            saved: Vec::new(),
            pstack: Vec::new(),
            ops: Vec::new(),
            cacheable: true,
            steps: 0,
        }
    }

    /// What a read of `field` depends on.
    fn source(&self, field: usize) -> u64 {
        if field >= NF {
            return 0;
        }
        let own = if self.written[field] & full(field) == full(field) {
            0
        } else {
            1u64 << field
        };
        self.deps[field] | own
    }

    fn set_const(&mut self, field: usize, mask: u128) {
        if field < NF {
            self.written[field] |= mask;
            if self.written[field] & full(field) == full(field) {
                self.deps[field] = 0;
            }
        }
    }

    fn derive(&mut self, dst: usize, mask: u128, from: u64) {
        if dst < NF {
            self.written[dst] |= mask;
            self.deps[dst] |= from;
        }
    }

    fn all_opaque(&mut self) {
        self.deps = [OPAQUE; NF];
    }
}

/// Conntrack, for real or "what if".
#[derive(Debug)]
pub(crate) enum CtHandle<'a> {
    Live(&'a mut Conntrack),
    WhatIf(&'a Conntrack),
}

impl CtHandle<'_> {
    /// A shorter-lived handle to the same table.
    pub(crate) fn reborrow(&mut self) -> CtHandle<'_> {
        match self {
            CtHandle::Live(c) => CtHandle::Live(c),
            CtHandle::WhatIf(c) => CtHandle::WhatIf(c),
        }
    }
}

/// How a run uses the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Cached,
    Uncached,
    Trace,
}

/// Per-pipeline scratch space, reused across packets so the cached path does not allocate.
#[derive(Debug)]
pub(crate) struct Scratch {
    pub ctx: Ctx,
    stack: Vec<Ctx>,
    pool: Vec<Vec<u8>>,
    vstack: Vec<u128>,
    pub(crate) build: Vec<u8>,
}

impl Scratch {
    pub(crate) fn new() -> Scratch {
        Scratch {
            ctx: Ctx::new(),
            stack: Vec::new(),
            pool: Vec::new(),
            vstack: Vec::new(),
            build: Vec::new(),
        }
    }

    pub(crate) fn reset(&mut self) {
        while let Some(c) = self.stack.pop() {
            self.pool.push(c.frame);
        }
        self.vstack.clear();
    }
}

/// The neighbour table: (datapath, port key, address, IPv6) → MAC.
/// Neighbour bindings by (datapath tunnel key, port key, IP, v6), as the FDB is keyed.
pub(crate) type Neighbours = crate::classifier::FastMap<(u32, u32, u128, bool), u128>;

/// One packet's run.
pub(crate) struct Runner<'a> {
    pub prog: &'a Program,
    /// The received frame: the current frame until the context owns a copy
    /// ([`Runner::own_frame`]).
    pub input: &'a [u8],
    pub neigh: &'a mut Neighbours,
    pub state: &'a mut Learned,
    pub counters: &'a mut [u64],
    pub generation: &'a mut u64,
    pub cache: &'a mut Cache,
    pub scr: &'a mut Scratch,
    pub ct: CtHandle<'a>,
    pub now: Duration,
    pub out: &'a mut Outputs,
    pub trace: Option<&'a mut Trace>,
    pub mode: Mode,
    pub segments: u32,
    pub hits: u32,
    /// Trace-only overrides (`--ct`, `--lb-dst`).
    pub what_if: Option<crate::whatif::Cursor<'a>>,
    /// Events for the caller (learned neighbours).
    pub events: &'a mut Vec<crate::Event>,
    /// Local ports whose traffic is held ([`crate::Pipeline::set_port_held`]).
    pub held: &'a std::collections::BTreeSet<u32>,
    /// Packet-in mode ([`crate::Pipeline::set_packet_in`]).
    pub packet_in: bool,
    /// What packet-in actions did.
    pub pin_stats: &'a mut crate::PacketInStats,
    /// The chassis's meters ([`crate::meter`]).
    pub meters: &'a mut crate::meter::Meters,
    /// A meter dropped the packet: nothing more of it runs or is sent.
    pub halted: bool,
    /// The flow whose actions the walk is running (for its controller meter).
    pub cur_flow: u32,
    /// The controller meter a walk found for the `log` about to run (one without its own).
    pub log_meter: Option<std::sync::Arc<str>>,
}

enum Flow {
    /// Continue with the next action of the enclosing list.
    Continue,
    /// This flow's actions are done.
    Done,
    /// Go to another table (a tail `next`).
    Tail(u8, u8),
}

impl Runner<'_> {
    /// Copies the received frame into the context before its first write (see [`Ctx`]). Every
    /// path that may change the frame calls this first: data actions, conntrack rewrites,
    /// packet generation.
    #[inline]
    pub(crate) fn own_frame(&mut self) {
        self.scr.ctx.own(self.input);
    }

    /// Runs the segment that starts at `resume` with the current context: from the cache when it
    /// has an entry, otherwise by walking (and then caching the walk when it can).
    ///
    /// # The flat replay
    ///
    /// A cached segment that ends in a plain `ct_next` that recirculates (the established
    /// flow's shape: some writes, conntrack, the continuation) is not replayed through
    /// [`Runner::exec_op`] and a nested `run_segment`: conntrack runs here, the continuation's
    /// entry is tried through the op's hint (a copy of the entry, see `cache`) and its ops are
    /// replayed by the same loop. Only a miss leaves the loop, for the same lookup and walk the
    /// nested call would have made.
    pub(crate) fn run_segment(&mut self, resume: u32, rdepth: u32, hint: u32) {
        if rdepth > MAX_RECIRC {
            self.note("recirculation limit reached: dropped".into());
            return;
        }
        self.segments += 1;
        if self.mode == Mode::Cached
            && let Some((start, len)) =
                self.cache
                    .lookup(resume, &self.scr.ctx.f, *self.generation, hint)
        {
            self.hits += 1;
            let (mut k, mut end) = (start, start.saturating_add(len));
            let mut rdepth = rdepth;
            while k < end {
                let Some(op) = self.cache.op(k) else {
                    break;
                };
                k += 1;
                // Header and register writes are most of a replay: done here, as `exec_op` does
                // them, without a call into its large frame.
                match op {
                    // A plain field write (most of a replay), from the cache's own table: no
                    // read of the program's arena, no call into `exec_act`'s frame.
                    Op::SetConst(j) => {
                        if let Some((field, value, mask)) = self.cache.set_const(j) {
                            if crate::packet::in_frame(field) {
                                self.own_frame();
                            }
                            self.scr.ctx.write_masked(field, value, mask)
                        }
                    }
                    Op::Act(i) => match self.prog.acts.get(i as usize) {
                        Some(CAct::Set { field, value, mask }) => {
                            if crate::packet::in_frame(usize::from(*field)) {
                                self.own_frame();
                            }
                            self.scr
                                .ctx
                                .write_masked(usize::from(*field), *value, *mask)
                        }
                        Some(a) => {
                            self.exec_act(a);
                            if self.halted {
                                return;
                            }
                        }
                        None => {}
                    },
                    // The output, as `exec_op` does it, without a call into its frame.
                    Op::Emit(dest) => self.emit(dest),
                    // The segment's last op recirculates after a plain lookup: the flat replay
                    // (conntrack, then the continuation in this loop).
                    Op::Ct {
                        zone,
                        resume: next,
                        hint: next_hint,
                        lookup_only: true,
                        ..
                    } if k == end
                        && next != NO_RESUME
                        && rdepth < MAX_RECIRC
                        && self.trace.is_none()
                        && self.what_if.is_none() =>
                    {
                        self.exec_ct_next(zone);
                        rdepth += 1;
                        self.segments += 1;
                        match self
                            .cache
                            .lookup(next, &self.scr.ctx.f, *self.generation, next_hint)
                        {
                            Some((s, l)) => {
                                self.hits += 1;
                                (k, end) = (s, s.saturating_add(l));
                            }
                            None => {
                                self.walk_segment(next, rdepth);
                                return;
                            }
                        }
                    }
                    _ => {
                        self.exec_op(&op, rdepth);
                        // A meter that refused the packet in a recirculation this op ran
                        // stops the rest (another flood copy, say), as it stops the walk.
                        if self.halted {
                            return;
                        }
                    }
                }
            }
            return;
        }
        self.walk_segment(resume, rdepth);
    }

    /// Walks the segment that starts at `resume` (a cache miss, or an uncached run) and caches
    /// the walk when it can.
    fn walk_segment(&mut self, resume: u32, rdepth: u32) {
        let start = self.scr.ctx.f;
        let gen_at_start = *self.generation;
        let mut w = Walk::new();
        let (dp, pipe, table) = resume_parts(resume);
        self.walk_tables(&mut w, dp, pipe, table, 0, rdepth);
        // A walk a meter halted (here or in a recirculation it ran) stopped short: its ops are
        // not the segment's.
        if self.mode == Mode::Cached
            && w.cacheable
            && !self.halted
            && *self.generation == gen_at_start
        {
            self.cache
                .insert(resume, &w.wc, &start, &w.ops, gen_at_start, &self.prog.acts);
        }
    }

    pub(crate) fn note(&mut self, s: String) {
        if let Some(t) = self.trace.as_deref_mut() {
            match t.records.last_mut() {
                Some(r) => r.effects.push(s),
                None => t.records.push(TraceRecord {
                    datapath: String::new(),
                    pipeline: "",
                    table: 0,
                    flow: None,
                    effects: vec![s],
                }),
            }
        }
    }

    /// Records and performs `op`.
    fn record(&mut self, w: &mut Walk, op: Op, rdepth: u32) -> bool {
        w.ops.push(op);
        if self.trace.is_some() {
            self.note(self.describe(&op));
        }
        self.exec_op(&op, rdepth)
    }

    fn describe(&self, op: &Op) -> String {
        match op {
            Op::Act(i) => format!("{:?}", self.prog.acts.get(*i as usize)),
            Op::Ct {
                zone, act, resume, ..
            } => format!(
                "ct zone {zone}: {:?}{}",
                self.prog.acts.get(*act as usize),
                if *resume == NO_RESUME {
                    ""
                } else {
                    " (then recirculate)"
                }
            ),
            other => format!("{other:?}"),
        }
    }

    fn walk_tables(
        &mut self,
        w: &mut Walk,
        dp: u32,
        mut pipe: u8,
        mut table: u8,
        depth: u32,
        rdepth: u32,
    ) {
        let prog = self.prog;
        let Some(d) = prog.dps.get(dp as usize) else {
            return;
        };
        loop {
            if self.halted {
                return;
            }
            w.steps += 1;
            if w.steps > MAX_STEPS {
                self.note("lookup limit reached: dropped".into());
                return;
            }
            let hit = d.tables.tables[usize::from(pipe & 1)]
                .get(usize::from(table))
                .and_then(|c| c.lookup(&self.scr.ctx.f, w));
            if let Some(t) = self.trace.as_deref_mut() {
                t.records.push(TraceRecord {
                    datapath: d.name.clone(),
                    pipeline: if pipe == INGRESS { "ingress" } else { "egress" },
                    table,
                    flow: hit
                        .and_then(|(f, _)| prog.flows.get(f as usize))
                        .map(|f| TraceFlow {
                            priority: f.priority,
                            matches: f.matches.to_string(),
                            actions: f.actions.to_string(),
                            id: f.id.clone(),
                            stage: f.stage.to_string(),
                            sb_uuid: f.sb_uuid.as_deref().map(str::to_string),
                            stage_hint: f.stage_hint.as_deref().map(str::to_string),
                        }),
                    effects: Vec::new(),
                });
            }
            let Some((flow, _)) = hit else {
                self.note("no flow matched: dropped".into());
                return;
            };
            let acts = prog.flows[flow as usize].acts.clone();
            let outer = std::mem::replace(&mut self.cur_flow, flow);
            let done = self.exec_list(w, dp, pipe, table, acts, depth, rdepth);
            self.cur_flow = outer;
            match done {
                Flow::Tail(p, t) => {
                    pipe = p;
                    table = t;
                }
                Flow::Continue | Flow::Done => return,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn exec_list(
        &mut self,
        w: &mut Walk,
        dp: u32,
        pipe: u8,
        table: u8,
        acts: std::ops::Range<u32>,
        depth: u32,
        rdepth: u32,
    ) -> Flow {
        let prog = self.prog;
        let last = acts.end.saturating_sub(1);
        let mut skip = false;
        for i in acts {
            if self.halted {
                w.cacheable = false;
                return Flow::Done;
            }
            let Some(act) = prog.acts.get(i as usize) else {
                return Flow::Done;
            };
            if std::mem::take(&mut skip) {
                continue;
            }
            match act {
                CAct::CtrlPunt { halt } => {
                    if let Some(m) = self.punt_meter() {
                        // The meter's answer changes from packet to packet.
                        w.cacheable = false;
                        if !self.charge(&m) {
                            self.note(format!("controller meter {m} over its rate: punt left out"));
                            if *halt {
                                self.halted = true;
                                return Flow::Done;
                            }
                            skip = true;
                        }
                    }
                }
                CAct::Log { meter: None, .. } => {
                    if let Some(m) = self.punt_meter() {
                        w.cacheable = false;
                        self.log_meter = Some(m);
                    }
                    self.record(w, Op::Act(i), rdepth);
                }
                CAct::Next { pipeline, table: t } => {
                    if i == last {
                        return Flow::Tail(*pipeline, *t);
                    }
                    if depth < MAX_DEPTH {
                        self.walk_tables(w, dp, *pipeline, *t, depth + 1, rdepth);
                    }
                }
                CAct::Output => self.output(w, dp, pipe, depth, rdepth),
                // `R = select(...)` is a group whose buckets load R and resubmit to the next
                // table (ovn-trace's `execute_select` continues there too): northd writes no
                // `next;` after it.
                CAct::Select { .. } => {
                    self.track(w, act);
                    self.record(w, Op::Act(i), rdepth);
                    let next = table.saturating_add(1);
                    if i == last {
                        return Flow::Tail(pipe, next);
                    }
                    if depth < MAX_DEPTH {
                        self.walk_tables(w, dp, pipe, next, depth + 1, rdepth);
                    }
                }
                CAct::Drop => return Flow::Done,
                CAct::DecTtl => {
                    w.examine(slot::IP_TTL, 0xff);
                    w.examine(slot::ETH_TYPE, 0xffff);
                    let ttl = self.scr.ctx.f[slot::IP_TTL];
                    let ip = matches!(self.scr.ctx.f[slot::ETH_TYPE], 0x800 | 0x86dd);
                    if !ip || ttl <= 1 {
                        self.note("TTL expired: dropped".into());
                        return Flow::Done;
                    }
                    self.record(w, Op::Act(i), rdepth);
                }
                CAct::CtSnatToVip { .. } => {
                    self.record_ct(w, dp, pipe, act, i, NO_RESUME, rdepth);
                    // Whether the hairpin SNAT applies depends on the connection, which the
                    // segment's key does not describe.
                    for s in [
                        slot::IP4_SRC,
                        slot::IP6_SRC,
                        slot::TCP_SRC,
                        slot::UDP_SRC,
                        slot::SCTP_SRC,
                    ] {
                        w.derive(s, full(s), OPAQUE);
                    }
                }
                CAct::FwdGroup { ports } => {
                    for g in FIVE_TUPLE {
                        w.examine(g, full(g));
                    }
                    let pick = (five_tuple_hash(&self.scr.ctx) % ports.len() as u64) as usize;
                    let key = ports.get(pick).copied().unwrap_or(0);
                    self.record(
                        w,
                        Op::SetPort {
                            slot: slot::OUTPORT as u8,
                            key,
                        },
                        rdepth,
                    );
                    w.set_const(slot::OUTPORT, full(slot::OUTPORT));
                    self.output(w, dp, pipe, depth, rdepth);
                }
                CAct::CtCommit { .. } => {
                    self.record_ct(w, dp, pipe, act, i, NO_RESUME, rdepth);
                }
                a if a.recirculates() => {
                    let resume = resume_id(dp, pipe, table.saturating_add(1));
                    self.record_ct(w, dp, pipe, act, i, resume, rdepth);
                    // The continuation changed the context in ways this segment's key does not
                    // describe.
                    w.all_opaque();
                    return Flow::Done;
                }
                CAct::Nested { kind, body } => {
                    if depth >= MAX_DEPTH {
                        continue;
                    }
                    let body = body.clone();
                    if *kind != NestedKind::Clone && !self.can_generate(w, *kind) {
                        self.note(format!(
                            "{} cannot answer this packet: skipped",
                            kind.name()
                        ));
                        continue;
                    }
                    if *kind == NestedKind::SctpAbort
                        || (*kind == NestedKind::Reject && self.scr.ctx.f[slot::IP_PROTO] == 132)
                    {
                        // The answer depends on the SCTP chunk, which no field describes.
                        w.cacheable = false;
                    }
                    self.record(w, Op::Save, rdepth);
                    w.saved.push((w.written, w.deps));
                    if *kind != NestedKind::Clone {
                        self.record(w, Op::Generate(*kind), rdepth);
                        let mut from = 0;
                        for h in slot::HEADER_FIRST..=slot::HEADER_LAST {
                            from |= w.source(h);
                        }
                        for h in slot::HEADER_FIRST..=slot::HEADER_LAST {
                            w.written[h] = full(h);
                            w.deps[h] = from;
                        }
                    }
                    if let Flow::Tail(p, t) =
                        self.exec_list(w, dp, pipe, table, body, depth + 1, rdepth)
                    {
                        self.walk_tables(w, dp, p, t, depth + 1, rdepth);
                    }
                    self.record(w, Op::Restore, rdepth);
                    if let Some((wr, de)) = w.saved.pop() {
                        w.written = wr;
                        w.deps = de;
                    }
                }
                _ => {
                    self.track(w, act);
                    self.record(w, Op::Act(i), rdepth);
                    if self.halted {
                        w.cacheable = false;
                        return Flow::Done;
                    }
                }
            }
        }
        Flow::Continue
    }

    /// The controller meter of the flow the walk is in, if any.
    fn punt_meter(&self) -> Option<std::sync::Arc<str>> {
        if self.meters.no_flow_meters() {
            return None;
        }
        let f = self.prog.flows.get(self.cur_flow as usize)?;
        self.meters.flow_meter(&f.id)
    }

    /// Charges this packet to named meter `m` (traces charge nothing and pass).
    pub(crate) fn charge(&mut self, m: &std::sync::Arc<str>) -> bool {
        if self.mode == Mode::Trace {
            return true;
        }
        let len = if self.scr.ctx.owned {
            self.scr.ctx.frame.len()
        } else {
            self.input.len()
        };
        self.meters
            .allow(&crate::meter::MeterKey::Named(m.clone()), len, self.now)
    }

    /// Updates the walk's dependency tracking for a data action about to run.
    fn track(&mut self, w: &mut Walk, act: &CAct) {
        let f = |b: &Bits| usize::from(b.field);
        match act {
            CAct::Set { field, mask, .. } => w.set_const(usize::from(*field), *mask),
            CAct::Move { dst, src } => {
                let s = w.source(f(src));
                w.derive(f(dst), dst.mask(), s);
            }
            CAct::Exchange { a, b } => {
                let (sa, sb) = (w.source(f(a)), w.source(f(b)));
                w.derive(f(a), a.mask(), sb);
                w.derive(f(b), b.mask(), sa);
            }
            CAct::Push(b) => {
                let s = w.source(f(b));
                w.pstack.push(s);
            }
            CAct::Pop(b) => {
                let s = w.pstack.pop().unwrap_or(0);
                w.derive(f(b), b.mask(), s);
            }
            CAct::CtClear => {
                for s in [slot::CT_STATE, slot::CT_MARK, slot::CT_LABEL] {
                    w.set_const(s, full(s));
                }
            }
            CAct::GetNeigh { port, ip, .. } => {
                let s = w.source(f(port)) | w.source(f(ip));
                w.set_const(slot::ETH_DST, full(slot::ETH_DST));
                w.derive(slot::ETH_DST, full(slot::ETH_DST), s);
            }
            CAct::LookupNeigh {
                dst, port, ip, mac, ..
            } => {
                let mut s = w.source(f(port)) | w.source(f(ip));
                if let Some(m) = mac {
                    s |= w.source(f(m));
                }
                w.derive(f(dst), dst.mask(), s);
            }
            CAct::ChkLbHairpin { dst, dp, .. } => {
                // The VIP check reads the connection's original tuple, which no field holds.
                let mut s = match self.prog.dp_by_key(*dp) {
                    Some(d) if !d.vips.is_empty() => OPAQUE,
                    _ => 0,
                };
                for g in [
                    slot::CT_STATE,
                    slot::CT_MARK,
                    slot::CT_LABEL,
                    slot::IP4_SRC,
                    slot::IP4_DST,
                    slot::IP6_SRC,
                    slot::IP6_DST,
                    slot::ETH_TYPE,
                ] {
                    s |= w.source(g);
                }
                w.derive(f(dst), dst.mask(), s);
            }
            CAct::Select { dst, .. } => {
                let mut s = 0;
                for g in FIVE_TUPLE {
                    s |= w.source(g);
                }
                w.derive(f(dst), dst.mask(), s);
            }
            CAct::CheckPktLarger { dst, .. } => w.derive(f(dst), dst.mask(), OPAQUE),
            // Every reply is punted with its bytes: never cached.
            CAct::SvcCheck { .. } | CAct::Igmp { .. } | CAct::Bfd { .. } => w.cacheable = false,
            CAct::PacketIn { dst, .. } => {
                w.set_const(f(dst), dst.mask());
                if self.packet_in {
                    // The reply (and whether there is one) depends on the payload, which no
                    // field describes: such a walk is never cached (see `packet_in`).
                    w.cacheable = false;
                }
            }
            CAct::PortSec { dst, out, .. } => {
                let mut s = w.source(if *out { slot::OUTPORT } else { slot::INPORT });
                for g in crate::port_sec::READS {
                    s |= w.source(g);
                }
                w.derive(f(dst), dst.mask(), s);
            }
            // Learned state changes under the cache: a later decision on these results makes
            // the segment uncacheable (the actions themselves rerun on every replay).
            CAct::LookupFdb { dst, .. }
            | CAct::GetFdb { dst, .. }
            | CAct::ChkEcmpNh { dst, .. } => w.derive(f(dst), dst.mask(), OPAQUE),
            CAct::ChkLbAff { dst, .. } => {
                w.derive(f(dst), dst.mask(), OPAQUE);
                for b in [AFF_REG4, AFF_XXREG0, AFF_XXREG1, AFF_PORT] {
                    w.derive(f(&b), b.mask(), OPAQUE);
                }
            }
            _ => {}
        }
    }

    /// Records conntrack action `i` (`act`) of datapath `dp` in its zone, resuming at `resume`.
    #[allow(clippy::too_many_arguments)]
    fn record_ct(
        &mut self,
        w: &mut Walk,
        dp: u32,
        pipe: u8,
        act: &CAct,
        i: u32,
        resume: u32,
        rdepth: u32,
    ) {
        let zone = self.zone(w, dp, pipe, act);
        self.record(
            w,
            Op::Ct {
                zone,
                act: i,
                resume,
                hint: crate::cache::NO_HINT,
                lookup_only: matches!(act, CAct::CtNext),
            },
            rdepth,
        );
    }

    /// The zone a conntrack action of datapath `dp` uses.
    fn zone(&mut self, w: &mut Walk, dp: u32, pipe: u8, act: &CAct) -> u16 {
        let Some(d) = self.prog.dps.get(dp as usize) else {
            return 0;
        };
        match d.kind {
            DatapathKind::Router {
                dnat_zone,
                snat_zone,
            } => match act {
                CAct::CtNat {
                    kind: NatKind::Snat,
                    ..
                }
                | CAct::CtSnatToVip { .. } => snat_zone,
                _ => dnat_zone,
            },
            _ if matches!(act, CAct::CtSnatToVip { .. }) && d.snat_zone.is_some() => {
                d.snat_zone.unwrap_or(0)
            }
            _ => {
                let s = if pipe == INGRESS {
                    slot::INPORT
                } else {
                    slot::OUTPORT
                };
                w.examine(s, full(s));
                let key = self.scr.ctx.f[s] as u32;
                d.ports.get(&key).map_or(0, |p| p.zone)
            }
        }
    }

    /// Whether the builder for `kind` accepts the current packet (examining what it checks).
    fn can_generate(&mut self, w: &mut Walk, kind: NestedKind) -> bool {
        for s in [
            slot::ETH_TYPE,
            slot::IP_PROTO,
            slot::IP_FRAG,
            slot::TCP_FLAGS,
            slot::ICMP4_TYPE,
            slot::ICMP6_TYPE,
        ] {
            w.examine(s, full(s));
        }
        let f = &self.scr.ctx.f;
        let (v4, v6) = (f[slot::ETH_TYPE] == 0x800, f[slot::ETH_TYPE] == 0x86dd);
        let l4 = f[slot::IP_FRAG] & 2 == 0;
        let tcp = f[slot::IP_PROTO] == u128::from(ip_proto::TCP) && l4;
        let rst = f[slot::TCP_FLAGS] & u128::from(tcp_flags::RST) != 0;
        match kind {
            NestedKind::Arp | NestedKind::Icmp4 | NestedKind::Icmp4Error => v4,
            NestedKind::NdNs | NestedKind::Icmp6 | NestedKind::Icmp6Error => v6,
            NestedKind::NdNa | NestedKind::NdNaRouter => {
                v6 && f[slot::IP_PROTO] == u128::from(ip_proto::ICMPV6)
                    && f[slot::ICMP6_TYPE] == 135
            }
            NestedKind::TcpReset => (v4 || v6) && tcp && !rst,
            // Whether the packet's first chunk is an ABORT is not a field: see `exec_list`.
            NestedKind::SctpAbort => (v4 || v6) && l4 && f[slot::IP_PROTO] == 132,
            // A destination unreachable is not answered (ovn-trace: "avoid recirculation").
            NestedKind::Reject => {
                let unreach = (v4
                    && f[slot::IP_PROTO] == u128::from(ip_proto::ICMP)
                    && f[slot::ICMP4_TYPE] == 3)
                    || (v6
                        && f[slot::IP_PROTO] == u128::from(ip_proto::ICMPV6)
                        && f[slot::ICMP6_TYPE] == 1);
                (v4 || v6) && !(tcp && rst) && !unreach
            }
            _ => false,
        }
    }

    /// [`crate::Ingress::Output`]: the output stage at once, with the context's ports (not
    /// cached: the chassis's own forwards are rare).
    pub(crate) fn output_now(&mut self, dp: u32) {
        self.segments += 1;
        let mut w = Walk::new();
        self.output(&mut w, dp, INGRESS, 0, 0);
    }

    fn output(&mut self, w: &mut Walk, dp: u32, pipe: u8, depth: u32, rdepth: u32) {
        let prog = self.prog;
        let Some(d) = prog.dps.get(dp as usize) else {
            return;
        };
        w.examine(slot::OUTPORT, full(slot::OUTPORT));
        w.examine(slot::INPORT, full(slot::INPORT));
        w.examine(slot::FLAGS, 1);
        let f = &self.scr.ctx.f;
        let (inport, outport) = (f[slot::INPORT] as u32, f[slot::OUTPORT] as u32);
        let loopback = f[slot::FLAGS] & 1 != 0;
        if depth >= MAX_DEPTH {
            return;
        }
        if let Some(members) = d.groups.get(&outport) {
            if pipe != INGRESS {
                self.note("output to a group in egress: dropped".into());
                return;
            }
            // One copy per remote chassis, with the group as outport: the receiving chassis
            // delivers it to its own members (OVN's remote output table, then local output).
            let mut chassis: Vec<u32> = Vec::new();
            for &m in members {
                if let Some(p) = d.ports.get(&m) {
                    if let Loc::Remote(c) = p.loc {
                        chassis.push(c);
                    }
                    chassis.extend(p.also_remote.iter().copied());
                }
            }
            chassis.sort_unstable();
            chassis.dedup();
            for c in chassis {
                let dest = Destination::Tunnel {
                    chassis: c,
                    datapath: d.key,
                    inport,
                    outport,
                };
                self.record(w, Op::Emit(dest), rdepth);
            }
            for &m in members {
                if m == inport && !loopback {
                    continue;
                }
                if d.ports
                    .get(&m)
                    .is_some_and(|p| matches!(p.loc, Loc::Remote(_)))
                {
                    continue;
                }
                self.record(w, Op::Save, rdepth);
                w.saved.push((w.written, w.deps));
                self.record(
                    w,
                    Op::SetPort {
                        slot: slot::OUTPORT as u8,
                        key: m,
                    },
                    rdepth,
                );
                w.set_const(slot::OUTPORT, full(slot::OUTPORT));
                self.deliver_local(w, dp, INGRESS, inport, m, depth, rdepth);
                self.record(w, Op::Restore, rdepth);
                if let Some((wr, de)) = w.saved.pop() {
                    w.written = wr;
                    w.deps = de;
                }
            }
            return;
        }
        // OVN checks loopback between the pipelines (before egress runs), not at egress output.
        let remote = d
            .ports
            .get(&outport)
            .is_some_and(|p| matches!(p.loc, Loc::Remote(_)));
        if pipe == INGRESS && !remote && inport == outport && !loopback {
            self.note("output to the input port without flags.loopback: dropped".into());
            return;
        }
        self.deliver(w, dp, pipe, inport, outport, depth, rdepth);
    }

    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        w: &mut Walk,
        dp: u32,
        pipe: u8,
        inport: u32,
        outport: u32,
        depth: u32,
        rdepth: u32,
    ) {
        let prog = self.prog;
        let Some(d) = prog.dps.get(dp as usize) else {
            return;
        };
        let Some(port) = d.ports.get(&outport) else {
            self.note(format!("output to unknown port {outport}: dropped"));
            return;
        };
        // A port bound to several chassis: a tunnel copy to each other chassis (from the
        // ingress pipeline only: a packet that came from a tunnel never goes back into one).
        if pipe == INGRESS {
            for &c in &port.also_remote {
                let dest = Destination::Tunnel {
                    chassis: c,
                    datapath: d.key,
                    inport,
                    outport,
                };
                self.record(w, Op::Emit(dest), rdepth);
            }
        }
        self.deliver_local(w, dp, pipe, inport, outport, depth, rdepth);
    }

    /// [`Runner::deliver`] without the extra copies for ports bound to several chassis.
    #[allow(clippy::too_many_arguments)]
    fn deliver_local(
        &mut self,
        w: &mut Walk,
        dp: u32,
        pipe: u8,
        inport: u32,
        outport: u32,
        depth: u32,
        rdepth: u32,
    ) {
        let prog = self.prog;
        let Some(d) = prog.dps.get(dp as usize) else {
            return;
        };
        let Some(port) = d.ports.get(&outport) else {
            self.note(format!("output to unknown port {outport}: dropped"));
            return;
        };
        match (&port.loc, pipe) {
            (Loc::Remote(_), EGRESS) => {
                // Only a packet that arrived from a tunnel runs egress for a remote port.
                self.note(format!(
                    "port {} is on another chassis and the packet came from a tunnel: dropped",
                    port.name
                ));
            }
            (Loc::Remote(chassis), _) => {
                let dest = Destination::Tunnel {
                    chassis: *chassis,
                    datapath: d.key,
                    inport,
                    outport,
                };
                self.record(w, Op::Emit(dest), rdepth);
            }
            (Loc::Redirect(to), INGRESS) => {
                self.record(
                    w,
                    Op::SetPort {
                        slot: slot::OUTPORT as u8,
                        key: *to,
                    },
                    rdepth,
                );
                w.set_const(slot::OUTPORT, full(slot::OUTPORT));
                self.record(w, Op::EnterEgress, rdepth);
                for s in REGISTERS {
                    w.set_const(s, full(s));
                }
                self.walk_tables(w, dp, EGRESS, 0, depth + 1, rdepth);
            }
            (Loc::Redirect(_), _) => {
                self.note(format!(
                    "output to chassisredirect port {} in egress: dropped",
                    port.name
                ));
            }
            // A held port: the frame comes out as it would enter the port's egress pipeline,
            // for the caller to replay later (traces run egress as usual).
            (Loc::Local(id), INGRESS) if self.held.contains(id) && self.mode != Mode::Trace => {
                let dest = Destination::Held {
                    local: *id,
                    datapath: d.key,
                    inport,
                    outport,
                };
                self.record(w, Op::Emit(dest), rdepth);
            }
            (_, INGRESS) => {
                self.record(w, Op::EnterEgress, rdepth);
                for s in REGISTERS {
                    w.set_const(s, full(s));
                }
                self.walk_tables(w, dp, EGRESS, 0, depth + 1, rdepth);
            }
            (Loc::Local(id), _) => {
                self.record(w, Op::Emit(Destination::Local(*id)), rdepth);
            }
            (
                Loc::Patch {
                    dp: pdp,
                    port: pport,
                },
                _,
            ) => {
                self.record(
                    w,
                    Op::EnterDp {
                        dp: *pdp,
                        inport: *pport,
                    },
                    rdepth,
                );
                for s in 0..NF {
                    if !(slot::HEADER_FIRST..=slot::HEADER_LAST).contains(&s) && s != 6 {
                        w.set_const(s, full(s));
                    }
                }
                self.walk_tables(w, *pdp, INGRESS, 0, depth + 1, rdepth);
            }
            (Loc::Unbound, _) => self.note(format!("port {} is unbound: dropped", port.name)),
        }
    }

    /// The frame as it is now (rewritten, or the input) out to `dest`.
    #[inline(always)]
    fn emit(&mut self, dest: Destination) {
        if self.halted {
            return;
        }
        let frame = if self.scr.ctx.owned {
            &self.scr.ctx.frame
        } else {
            self.input
        };
        self.out.push(dest, frame)
    }

    /// Performs one op. The one implementation of every effect, whether walking or replaying.
    pub(crate) fn exec_op(&mut self, op: &Op, rdepth: u32) -> bool {
        match *op {
            Op::Act(i) => {
                if let Some(a) = self.prog.acts.get(i as usize) {
                    self.exec_act(a);
                }
            }
            Op::Ct {
                zone,
                act,
                resume,
                hint,
                lookup_only,
            } => {
                // The specialised lookup on the cached path only: the full walk (the reference
                // the differential tests hold the cached path to) and traces keep the generic one.
                let r = if lookup_only && self.mode == Mode::Cached && self.what_if.is_none() {
                    self.exec_ct_next(zone)
                } else {
                    self.exec_ct(zone, act)
                };
                if self.trace.is_some()
                    && let Some(r) = r
                {
                    self.note(format!(
                        "  ct_state={:?} ct_mark={:#x} ct_label={:#x}{}",
                        r.state,
                        r.mark,
                        r.label,
                        r.refused
                            .map_or(String::new(), |e| format!(" (commit refused: {e})"))
                    ));
                    // The rewrite conntrack applied to the packet (a commit applies none), so a
                    // trace can say what NAT did rather than guess it from the headers.
                    let applied = !matches!(
                        self.prog.acts.get(act as usize),
                        Some(CAct::CtCommit { .. }) | None
                    );
                    if applied {
                        for n in nat_notes(&r.rewrite) {
                            self.note(n);
                        }
                    }
                }
                if resume != NO_RESUME {
                    self.run_segment(resume, rdepth + 1, hint);
                }
            }
            Op::SetPort { slot: s, key } => {
                self.scr
                    .ctx
                    .write_masked(usize::from(s), u128::from(key), u128::from(u32::MAX));
            }
            Op::EnterDp { inport, .. } => {
                // Every slot but the headers and slot 6 is cleared: two contiguous runs (slot 6
                // sits just before the headers), not a test per slot.
                const _: () = assert!(slot::HEADER_FIRST == 7 && slot::HEADER_LAST < NF);
                let f = &mut self.scr.ctx.f;
                f[..6].fill(0);
                f[slot::HEADER_LAST + 1..].fill(0);
                self.scr.ctx.set(slot::INPORT, u128::from(inport));
                self.scr.ctx.ct_orig = None;
            }
            Op::EnterEgress => {
                for s in REGISTERS {
                    self.scr.ctx.f[s] = 0;
                }
            }
            Op::Save => {
                let mut frame = self.scr.pool.pop().unwrap_or_default();
                frame.clear();
                // A frame not yet copied is the received one, which nothing changes.
                let owned = self.scr.ctx.owned;
                if owned {
                    frame.extend_from_slice(&self.scr.ctx.frame);
                }
                self.scr.stack.push(Ctx {
                    f: self.scr.ctx.f,
                    dirty: self.scr.ctx.dirty,
                    parsed: self.scr.ctx.parsed,
                    frame,
                    owned,
                    ct_orig: self.scr.ctx.ct_orig,
                });
            }
            Op::Restore => {
                if let Some(saved) = self.scr.stack.pop() {
                    let old = std::mem::replace(&mut self.scr.ctx, saved);
                    self.scr.pool.push(old.frame);
                }
            }
            Op::Generate(kind) => {
                self.own_frame();
                return self.generate(kind);
            }
            Op::SetConst(j) => {
                if let Some((field, value, mask)) = self.cache.set_const(j) {
                    if crate::packet::in_frame(field) {
                        self.own_frame();
                    }
                    self.scr.ctx.write_masked(field, value, mask)
                }
            }
            Op::Emit(dest) => self.emit(dest),
        }
        true
    }

    #[inline]
    fn exec_act(&mut self, act: &CAct) {
        // Any data action may write a header (the replay's plain field writes check first).
        self.own_frame();
        if let CAct::PacketIn { .. } = act {
            return self.exec_packet_in(act);
        }
        if matches!(
            act,
            CAct::Count { .. }
                | CAct::Log { .. }
                | CAct::SetMeter { .. }
                | CAct::CtrlPunt { .. }
                | CAct::PortSec { .. }
                | CAct::PutFdb { .. }
                | CAct::LookupFdb { .. }
                | CAct::GetFdb { .. }
                | CAct::CommitEcmpNh { .. }
                | CAct::ChkEcmpNh { .. }
                | CAct::CommitLbAff { .. }
                | CAct::ChkLbAff { .. }
                | CAct::BindVport { .. }
                | CAct::SvcCheck { .. }
                | CAct::Igmp { .. }
                | CAct::Bfd { .. }
        ) {
            return self.exec_stateful(act);
        }
        let ctx = &mut self.scr.ctx;
        match act {
            CAct::Set { field, value, mask } => {
                ctx.write_masked(usize::from(*field), *value, *mask)
            }
            CAct::Move { dst, src } => {
                let v = ctx.read(*src);
                ctx.write(*dst, v);
            }
            CAct::Exchange { a, b } => {
                let (va, vb) = (ctx.read(*a), ctx.read(*b));
                ctx.write(*a, vb);
                ctx.write(*b, va);
            }
            CAct::Push(b) => {
                let v = ctx.read(*b);
                self.scr.vstack.push(v);
            }
            CAct::Pop(b) => {
                let v = self.scr.vstack.pop().unwrap_or(0);
                self.scr.ctx.write(*b, v);
            }
            CAct::DecTtl => {
                let t = ctx.f[slot::IP_TTL];
                ctx.write_masked(slot::IP_TTL, t.saturating_sub(1), 0xff);
            }
            CAct::CtClear => {
                for s in [slot::CT_STATE, slot::CT_MARK, slot::CT_LABEL] {
                    ctx.f[s] = 0;
                }
                ctx.ct_orig = None;
            }
            CAct::GetNeigh { v6, port, ip, dp } => {
                let k = (*dp, ctx.read(*port) as u32, ctx.read(*ip), *v6);
                let mac = self.neigh.get(&k).copied().unwrap_or(0);
                ctx.write_masked(slot::ETH_DST, mac, full(slot::ETH_DST));
            }
            CAct::PutNeigh {
                v6,
                port,
                ip,
                mac,
                dp,
            } => {
                let k = (*dp, ctx.read(*port) as u32, ctx.read(*ip), *v6);
                let m = ctx.read(*mac);
                if self.mode != Mode::Trace && self.neigh.get(&k) != Some(&m) {
                    self.neigh.insert(k, m);
                    // Cached walks may have read the old binding.
                    *self.generation += 1;
                    if let Some(e) = crate::Event::neighbour(self.prog, k, m) {
                        self.events.push(e);
                    }
                }
            }
            CAct::LookupNeigh {
                v6,
                dst,
                port,
                ip,
                mac,
                dp,
            } => {
                let k = (*dp, ctx.read(*port) as u32, ctx.read(*ip), *v6);
                let found = match (self.neigh.get(&k), mac) {
                    (Some(m), Some(want)) => *m == ctx.read(*want),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                ctx.write(*dst, u128::from(found));
            }
            CAct::ChkLbHairpin { dst, reply, dp } => {
                let st = ctx.f[slot::CT_STATE] as u8;
                let natted = st & 0x80 != 0 || ctx.f[slot::CT_MARK] & 2 != 0;
                let rpl = st & 0x08 != 0;
                let same = ctx.ip_pair().is_some_and(|(s, d)| s == d);
                let vip = match self.prog.dp_by_key(*dp) {
                    Some(d) if !d.vips.is_empty() => ctx.ct_orig.is_some_and(|o| {
                        let a = u128::from_be_bytes(o.dst);
                        let a = if o.v6 { a } else { a & 0xffff_ffff };
                        d.vips.iter().any(|&(ip, v6, port, proto)| {
                            ip == a
                                && v6 == o.v6
                                && (port == 0 || (port == o.dport && proto == o.proto))
                        })
                    }),
                    _ => true,
                };
                let hit = natted && same && (rpl == *reply) && vip;
                ctx.write(*dst, u128::from(hit));
            }
            CAct::Select { dst, choices } => {
                let total: u32 = choices.iter().map(|(_, w)| u32::from(*w)).sum();
                if total > 0 {
                    let mut pick = (five_tuple_hash(ctx) % u64::from(total)) as u32;
                    for (v, w) in choices {
                        if pick < u32::from(*w) {
                            ctx.write(*dst, u128::from(*v));
                            break;
                        }
                        pick -= u32::from(*w);
                    }
                }
            }
            CAct::CheckPktLarger { dst, len } => {
                let l = ctx.frame.len().saturating_sub(14) as u64;
                ctx.write(*dst, u128::from(l > u64::from(*len)));
            }
            _ => {}
        }
    }

    pub(crate) fn count(&mut self, counter: u32) {
        if self.mode != Mode::Trace
            && let Some(c) = self.counters.get_mut(counter as usize)
        {
            *c += 1;
        }
    }
}

const REGISTERS: [usize; 3] = [slot::XXREG0, slot::XXREG1, slot::XREG4];

const FIVE_TUPLE: [usize; 12] = [
    slot::IP4_SRC,
    slot::IP4_DST,
    slot::IP6_SRC,
    slot::IP6_DST,
    slot::IP_PROTO,
    slot::ETH_TYPE,
    slot::TCP_SRC,
    slot::TCP_DST,
    slot::UDP_SRC,
    slot::UDP_DST,
    slot::SCTP_SRC,
    slot::SCTP_DST,
];

fn five_tuple_hash(ctx: &Ctx) -> u64 {
    FIVE_TUPLE.iter().fold(0x2545_f491_4f6c_dd1d, |h, s| {
        crate::classifier::mix(h, ctx.f[*s])
    })
}
