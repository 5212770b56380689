//! What [`super::translate_cached`] keeps between translations of successive SB snapshots.
//!
//! # What it does
//!
//! - `Logical_Flow`: every row's parse result ([`super::flows::flow_spec_with`]: a
//!   [`FlowSpec`] or the reason the row is left out), keyed by UUID and kept with what the
//!   translation reads of the row it came from ([`RowKey`]: match, actions, pipeline, table,
//!   priority, datapath, datapath group and the `stage-name`, `stage-hint` and `hf-flow-id`
//!   external ids; not the other external ids, `controller_meter` nor `tags`, which no flow
//!   depends on, and whose copy cost more than the rest of the cache). A row equal to it in
//!   those and translated with the same chassis template variables reuses the result; any
//!   other row is parsed again.
//!   Rows not seen in a translation are forgotten at the next one. In
//!   [`super::flows::FlowForm::Text`] (nothing parsed) only the row is kept, not its result:
//!   building the flow again costs less than keeping it. The row's match and actions are the
//!   replica's `Arc<str>`s, not copies.
//! - Whole datapaths, when the caller gives the last translation back
//!   ([`TranslateCache::recycle`]): a datapath whose rows are the same ones, in the same
//!   order, every one unchanged, takes its (already sorted) flows from it without a copy.
//!
//! # What it does not do
//!
//! It does not decide anything: which rows go to which datapath, ports, sets, zones and the
//! rest are computed afresh each time from the snapshot, so the cached translation equals
//! [`super::translate_with`]'s exactly (the tests below check it over seeded random SB
//! changes, and that deliberately broken reuse rules are caught).

use std::collections::{BTreeMap, HashMap, HashSet};

use hf_model::sb;
use hf_pipeline::FlowSpec;
use uuid::Uuid;

use super::Diagnostic;

/// Everything [`super::translate_cached`] keeps between calls. Start with
/// [`TranslateCache::default`]; one cache per chassis translated for.
#[derive(Debug, Default, Clone)]
pub struct TranslateCache {
    pub(crate) flows: FlowCache,
    /// The threads a translation with this cache uses.
    pub(crate) par: super::Parallelism,
}

impl TranslateCache {
    /// An empty cache.
    pub fn new() -> TranslateCache {
        TranslateCache::default()
    }

    /// Forgets everything (but the parallelism).
    pub fn clear(&mut self) {
        *self = TranslateCache {
            par: self.par,
            ..TranslateCache::default()
        };
    }

    /// Translations with this cache run on up to `par` threads (default: the calling thread
    /// only); the result does not depend on it.
    pub fn set_parallelism(&mut self, par: super::Parallelism) {
        self.par = par;
    }

    /// Translations with this cache hold their flows in `form` (default
    /// [`super::flows::FlowForm::Parsed`]); a change of form forgets every kept parse.
    pub fn set_flow_form(&mut self, form: super::flows::FlowForm) {
        if form != self.flows.form {
            self.flows = FlowCache {
                form,
                ..FlowCache::default()
            };
        }
    }

    /// The form translations with this cache hold their flows in.
    pub fn flow_form(&self) -> super::flows::FlowForm {
        self.flows.form
    }

    /// (rows reused, rows parsed) by the last translation.
    pub fn last_counts(&self) -> (usize, usize) {
        (self.flows.hits, self.flows.misses)
    }

    /// Datapaths whose flows the last translation took whole from a recycled translation.
    pub fn last_reused_datapaths(&self) -> usize {
        self.flows.dps_reused
    }

    /// Gives back the [`super::Translation`] the last [`super::translate_cached`] call with
    /// this cache returned, unchanged, once the caller is done with it: its datapaths' flows
    /// are kept, so that the next translation takes a datapath whose rows are the same,
    /// unchanged, whole (no copy, no sort). Optional: without it every row still reuses its
    /// parse.
    pub fn recycle(&mut self, t: super::Translation) {
        let mut spec = t.spec;
        self.flows.recycled.clear();
        for (uuid, &i) in &t.datapath_index {
            if let Some(d) = spec.datapaths.get_mut(i) {
                self.flows
                    .recycled
                    .insert(*uuid, std::mem::take(&mut d.flows));
            }
        }
        self.flows.recycled_rows = std::mem::take(&mut self.flows.rows_now);
    }
}

/// What the translation reads of a `Logical_Flow` row (see the module): a cached result holds
/// for a row that [`RowKey::is`] this. Compact, as there is one per `Logical_Flow` row (100k
/// at 500 switches): the pipeline as a byte, the three external ids in one allocation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowKey {
    /// The replica's shared allocations.
    match_: std::sync::Arc<str>,
    actions: std::sync::Arc<str>,
    table_id: i64,
    priority: i64,
    logical_datapath: Option<Uuid>,
    logical_dp_group: Option<Uuid>,
    /// [`PIPE_EGRESS`], [`PIPE_INGRESS`], [`PIPE_OTHER`] (the value then leads `ids`) or
    /// [`PIPE_UNKNOWN`].
    pipeline: u8,
    /// `external_ids:stage-name`, `stage-hint`, `hf-flow-id` ([`ids_text`]).
    ids: Box<str>,
}

/// [`RowKey::pipeline`]'s values.
const PIPE_EGRESS: u8 = 0;
const PIPE_INGRESS: u8 = 1;
const PIPE_OTHER: u8 = 2;
const PIPE_UNKNOWN: u8 = 3;

/// The external ids a flow's translation reads ([`super::flows::flow_identity`]).
const READ_IDS: [&str; 3] = ["stage-name", "stage-hint", "hf-flow-id"];

/// `lf`'s pipeline as [`RowKey::pipeline`] holds it, and the text that goes first in its
/// `ids` (a value the schema does not list).
fn pipe_of(lf: &sb::LogicalFlow) -> (u8, Option<&str>) {
    match &lf.pipeline {
        sb::LogicalFlowPipeline::Egress => (PIPE_EGRESS, None),
        sb::LogicalFlowPipeline::Ingress => (PIPE_INGRESS, None),
        sb::LogicalFlowPipeline::Other(v) => (PIPE_OTHER, Some(v)),
        // A variant this code does not know: never equal, so never reused.
        _ => (PIPE_UNKNOWN, None),
    }
}

/// The texts a key compares besides match and actions, in one string: an unlisted pipeline
/// value first, then the [`READ_IDS`], each either absent (`\u{1}`) or present (`\u{2}`, its
/// length in bytes, `:`, the value). Length-prefixed, so a value holding the marker bytes
/// cannot make two different rows write the same text.
fn write_ids(lf: &sb::LogicalFlow, out: &mut String) {
    use std::fmt::Write as _;
    let (_, other) = pipe_of(lf);
    let ids = READ_IDS
        .iter()
        .map(|k| lf.external_ids.get(*k).map(String::as_str));
    for p in std::iter::once(other).chain(ids) {
        match p {
            None => out.push('\u{1}'),
            Some(v) => {
                // (Writing to a String cannot fail.)
                let _ = write!(out, "\u{2}{}:{v}", v.len());
            }
        }
    }
}

fn ids_text(lf: &sb::LogicalFlow) -> Box<str> {
    let mut out = String::new();
    write_ids(lf, &mut out);
    out.into()
}

/// Whether `ids` ([`ids_text`] of some row) is `lf`'s: written into a per-thread buffer, so
/// a translation's comparisons allocate nothing once it has grown.
fn same_ids(ids: &str, lf: &sb::LogicalFlow) -> bool {
    thread_local! {
        static BUF: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        buf.clear();
        write_ids(lf, buf);
        *buf == ids
    })
}

impl RowKey {
    pub(crate) fn of(lf: &sb::LogicalFlow) -> RowKey {
        RowKey {
            match_: std::sync::Arc::clone(&lf.match_),
            actions: std::sync::Arc::clone(&lf.actions),
            table_id: lf.table_id,
            priority: lf.priority,
            logical_datapath: lf.logical_datapath.map(|r| r.uuid()),
            logical_dp_group: lf.logical_dp_group.map(|r| r.uuid()),
            pipeline: pipe_of(lf).0,
            ids: ids_text(lf),
        }
    }

    /// `lf` reads the same (no allocation).
    pub(crate) fn is(&self, lf: &sb::LogicalFlow) -> bool {
        *self.match_ == *lf.match_
            && *self.actions == *lf.actions
            && self.pipeline != PIPE_UNKNOWN
            && self.pipeline == pipe_of(lf).0
            && self.table_id == lf.table_id
            && self.priority == lf.priority
            && self.logical_datapath == lf.logical_datapath.map(|r| r.uuid())
            && self.logical_dp_group == lf.logical_dp_group.map(|r| r.uuid())
            && same_ids(&self.ids, lf)
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// What the translation read of the row.
    row: RowKey,
    /// Its result; `None` for a flow translated in [`super::flows::FlowForm::Text`], which
    /// is cheaper to build again than to keep (no parse), so that only the row is kept to
    /// tell which datapaths are unchanged.
    /// (Boxed: a [`FlowSpec`] inline made every entry, text-form ones too, twice as large.)
    parsed: Option<Box<Result<FlowSpec, String>>>,
}

/// Parsed `Logical_Flow` rows by UUID.
#[derive(Debug, Default, Clone)]
pub(crate) struct FlowCache {
    /// The entries of the previous translation (taken from as rows are met).
    old: HashMap<Uuid, Entry>,
    /// The entries of this translation.
    new: HashMap<Uuid, Entry>,
    /// The template variables the entries were parsed with.
    vars: BTreeMap<String, String>,
    hits: usize,
    misses: usize,
    dps_reused: usize,
    /// Per datapath (SB UUID): the rows (UUIDs, in translation order) the last translation
    /// placed in it.
    rows_now: HashMap<Uuid, Vec<Uuid>>,
    /// A recycled translation's flows per datapath, and the rows they were made of.
    recycled: HashMap<Uuid, Vec<FlowSpec>>,
    recycled_rows: HashMap<Uuid, Vec<Uuid>>,
    /// The form the entries (and translations with this cache) hold flows in.
    pub(crate) form: super::flows::FlowForm,
    /// Tests only: a deliberately wrong reuse rule, to show the equivalence test catches a
    /// broken rule: 1 = a row whose actions changed counts as unchanged; 2 = a datapath is
    /// reused whole without checking that it has the same rows.
    #[cfg(test)]
    pub(crate) broken: u8,
}

impl FlowCache {
    /// Starts a translation with these template variables: what the last one saw becomes
    /// the reusable set (everything, when the variables changed, is parsed again).
    pub(crate) fn begin(&mut self, vars: &BTreeMap<String, String>) {
        // Rows the last translation did not meet are gone from the SB (or not needed).
        let mut last = std::mem::take(&mut self.new);
        if *vars != self.vars {
            last.clear();
            self.recycled.clear();
            self.recycled_rows.clear();
            self.vars = vars.clone();
        }
        self.old = last;
        self.hits = 0;
        self.misses = 0;
        self.dps_reused = 0;
    }

    /// The datapaths (translation indexes) whose flows can be taken whole from the recycled
    /// translation: the same rows, in the same order, every one unchanged. Takes them out;
    /// forgets the rest of the recycled flows.
    pub(crate) fn reusable_datapaths(
        &mut self,
        rows: &[(&sb::LogicalFlow, Vec<usize>, Option<Diagnostic>)],
        index: &BTreeMap<Uuid, usize>,
    ) -> BTreeMap<usize, Vec<FlowSpec>> {
        let uuid_of: HashMap<usize, Uuid> = index.iter().map(|(u, &i)| (i, *u)).collect();
        let mut now: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
        let mut dirty: HashSet<usize> = HashSet::new();
        for (lf, targets, _) in rows {
            let unchanged = self
                .old
                .get(&lf.uuid)
                .is_some_and(|e| self.same(&e.row, lf));
            for d in targets {
                if !unchanged {
                    dirty.insert(*d);
                }
                if let Some(u) = uuid_of.get(d) {
                    now.entry(*u).or_default().push(lf.uuid);
                }
            }
        }
        let mut out = BTreeMap::new();
        let mut recycled = std::mem::take(&mut self.recycled);
        let recycled_rows = std::mem::take(&mut self.recycled_rows);
        for (&i, u) in &uuid_of {
            if dirty.contains(&i) {
                continue;
            }
            let empty = Vec::new();
            let rows_now = now.get(u).unwrap_or(&empty);
            #[cfg(test)]
            let check = self.broken != 2;
            #[cfg(not(test))]
            let check = true;
            if check && recycled_rows.get(u).unwrap_or(&empty) != rows_now {
                continue;
            }
            if let Some(flows) = recycled.remove(u) {
                out.insert(i, flows);
            }
        }
        self.dps_reused = out.len();
        self.rows_now = now;
        out
    }

    /// Keeps `lf`'s entry (an unchanged row all of whose datapaths were reused) for the next
    /// translation; the reason it does not translate, if it does not.
    pub(crate) fn keep(&mut self, lf: &sb::LogicalFlow) -> Option<String> {
        let e = self.old.remove(&lf.uuid)?;
        self.hits += 1;
        let err = e
            .parsed
            .as_ref()
            .and_then(|p| p.as_ref().as_ref().err().cloned());
        self.new.insert(lf.uuid, e);
        err
    }

    /// Whether a cached row's result holds for `lf`: every column the translation reads equal.
    fn same(&self, cached: &RowKey, lf: &sb::LogicalFlow) -> bool {
        #[cfg(test)]
        if self.broken == 1 {
            return RowKey {
                actions: lf.actions.clone(),
                ..cached.clone()
            }
            .is(lf);
        }
        cached.is(lf)
    }

    /// The parse result of `lf` when the row is unchanged since it was parsed (kept for the
    /// next translation); `None` when it must be parsed ([`FlowCache::store`] then keeps it).
    pub(crate) fn lookup(&mut self, lf: &sb::LogicalFlow) -> Option<Result<FlowSpec, String>> {
        let e = match self.old.remove(&lf.uuid) {
            Some(e) if self.same(&e.row, lf) => e,
            _ => return None,
        };
        // (A text-form flow is built again, and kept by `store`.)
        let out = Result::clone(e.parsed.as_deref()?);
        self.hits += 1;
        #[cfg(test)]
        let e = Entry {
            row: RowKey::of(lf),
            ..e
        };
        self.new.insert(lf.uuid, e);
        Some(out)
    }

    /// Keeps `parsed`, the parse of `lf` that [`FlowCache::lookup`] did not have.
    pub(crate) fn store(&mut self, lf: &sb::LogicalFlow, parsed: &Result<FlowSpec, String>) {
        self.misses += 1;
        let parsed = match (self.form, parsed) {
            (super::flows::FlowForm::Text, Ok(_)) => None,
            (_, p) => Some(Box::new(p.clone())),
        };
        self.new.insert(
            lf.uuid,
            Entry {
                row: RowKey::of(lf),
                parsed,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    //! `translate_cached` against `translate_with` over seeded random SB changes.
    #![allow(clippy::unwrap_used)]

    use std::collections::{BTreeMap, BTreeSet};

    use hf_model::sb::{self, Delta};
    use hf_model::{RowDelta, RowRef, SbSnapshot};
    use uuid::Uuid;

    use crate::translate::{
        Extra, TranslateCache, TranslateOptions, translate_cached, translate_with,
    };

    use crate::translate::flows::FlowForm;
    use crate::translate::incremental::tests::as_text_form;
    use crate::translate::test_rng::Rng;

    fn u(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    const DPS: u128 = 6;
    const MATCHES: &[&str] = &[
        "1",
        "ip4",
        "ip4.dst == ^vip",
        "inport == \"p1\"",
        "eth.dst == 00:00:00:00:00:01",
        "ip4 &&& x",
        "tcp.dst == 80",
    ];
    const ACTIONS: &[&str] = &[
        "next;",
        "drop;",
        "outport = \"p1\"; output;",
        "ct_next;",
        "nxt;",
    ];

    fn random_flow(r: &mut Rng, n: u128) -> sb::LogicalFlow {
        let mut ids = BTreeMap::new();
        ids.insert(
            "stage-name".to_string(),
            r.pick(&["ls_in_a", "ls_in_b"]).to_string(),
        );
        if r.below(3) == 0 {
            ids.insert("stage-hint".to_string(), format!("{:x}", r.below(4)));
        }
        let group = r.below(3) == 0;
        sb::LogicalFlow {
            uuid: u(n),
            logical_datapath: (!group).then(|| RowRef::new(u(1 + r.below(DPS as usize) as u128))),
            logical_dp_group: group.then(|| RowRef::new(u(100 + r.below(2) as u128))),
            match_: r.pick(MATCHES).into(),
            actions: r.pick(ACTIONS).into(),
            pipeline: if r.below(2) == 0 {
                sb::LogicalFlowPipeline::Ingress
            } else {
                sb::LogicalFlowPipeline::Egress
            },
            // Table 300 cannot be a flow: its row is left out with a diagnostic.
            table_id: [0, 1, 2, 300][r.below(4)],
            priority: [0, 50, 100][r.below(3)],
            external_ids: ids.into(),
            ..Default::default()
        }
    }

    fn group(r: &mut Rng, n: u128) -> sb::LogicalDpGroup {
        sb::LogicalDpGroup {
            uuid: u(n),
            datapaths: (1..=DPS)
                .filter(|_| r.below(2) == 0)
                .map(|d| RowRef::new(u(d)))
                .collect::<BTreeSet<_>>(),
        }
    }

    fn start(r: &mut Rng) -> SbSnapshot {
        let datapath_binding = (1..=DPS)
            .map(|n| {
                let mut ids = BTreeMap::new();
                ids.insert("logical-switch".to_string(), u(n + 50).to_string());
                ids.insert("name".to_string(), format!("sw{n}"));
                RowDelta::Insert(sb::DatapathBinding {
                    uuid: u(n),
                    external_ids: ids.into(),
                    tunnel_key: n as i64,
                    ..Default::default()
                })
            })
            .collect();
        let mut d = Delta {
            datapath_binding,
            ..Delta::default()
        };
        d.port_binding = vec![RowDelta::Insert(sb::PortBinding {
            uuid: u(60),
            datapath: RowRef::new(u(1)),
            logical_port: "p1".into(),
            tunnel_key: 1,
            ..Default::default()
        })];
        d.chassis = vec![RowDelta::Insert(sb::Chassis {
            uuid: u(70),
            name: "hv1".into(),
            ..Default::default()
        })];
        d.chassis_template_var = vec![RowDelta::Insert(sb::ChassisTemplateVar {
            uuid: u(71),
            chassis: "hv1".into(),
            variables: [("vip".to_string(), "10.0.0.9".to_string())].into(),
        })];
        d.logical_dp_group = vec![
            RowDelta::Insert(group(r, 100)),
            RowDelta::Insert(group(r, 101)),
        ];
        d.logical_flow = (1000..1060)
            .map(|n| RowDelta::Insert(random_flow(r, n)))
            .collect();
        let mut s = SbSnapshot::new();
        s.apply(&d);
        s
    }

    /// One random change: a flow edited, added or removed, a group's members or the
    /// template variable changed.
    fn mutate(r: &mut Rng, s: &mut SbSnapshot, next: &mut u128) {
        let mut d = Delta::default();
        let flows: Vec<sb::LogicalFlow> = s.logical_flow().values().cloned().collect();
        let old = flows[r.below(flows.len())].clone();
        let mut new = old.clone();
        match r.below(10) {
            0 => new.match_ = r.pick(MATCHES).into(),
            1 => new.actions = r.pick(ACTIONS).into(),
            2 => new.priority = [0, 50, 100, 7][r.below(4)],
            3 => new.table_id = r.below(4) as i64,
            4 => {
                new.logical_dp_group = None;
                new.logical_datapath = Some(RowRef::new(u(1 + r.below(DPS as usize) as u128)));
            }
            5 => {
                new.external_ids
                    .insert("stage-hint".into(), format!("{:x}", r.below(4)));
            }
            6 => {
                d.logical_flow.push(RowDelta::Insert(random_flow(r, *next)));
                *next += 1;
            }
            7 => d.logical_flow.push(RowDelta::Delete(old.clone())),
            8 => {
                let g = 100 + r.below(2) as u128;
                let old_g = s.logical_dp_group()[&u(g)].clone();
                d.logical_dp_group.push(RowDelta::Update {
                    old: old_g,
                    new: group(r, g),
                });
            }
            _ => {
                let old_v = s.chassis_template_var()[&u(71)].clone();
                let mut new_v = old_v.clone();
                new_v.variables.insert(
                    "vip".into(),
                    r.pick(&["10.0.0.9", "10.0.0.10", "bad"]).into(),
                );
                d.chassis_template_var.push(RowDelta::Update {
                    old: old_v,
                    new: new_v,
                });
            }
        }
        if new != old {
            d.logical_flow.push(RowDelta::Update { old, new });
        }
        s.apply(&d);
    }

    /// A row key reads the same as another row exactly when every column the translation reads
    /// is equal: checked against the plain tuple of those columns over rows whose pipeline
    /// and external ids are drawn from texts that hold the key's own marker and length
    /// characters, absent and empty values, and unlisted pipelines.
    #[test]
    fn a_row_key_reads_the_same_exactly_when_the_columns_are_equal() {
        const TEXTS: &[&str] = &[
            "", "a", "\u{1}", "\u{2}", "\u{2}1:a", "1:", "a\u{1}", "12:x", "ls_in_a",
        ];
        let mut r = Rng(11);
        let random_row = |r: &mut Rng| {
            let mut ids = BTreeMap::new();
            for k in ["stage-name", "stage-hint", "hf-flow-id", "other"] {
                if r.chance(2) {
                    ids.insert(k.to_string(), r.pick(TEXTS).to_string());
                }
            }
            sb::LogicalFlow {
                pipeline: match r.below(4) {
                    0 => sb::LogicalFlowPipeline::Ingress,
                    1 => sb::LogicalFlowPipeline::Egress,
                    _ => sb::LogicalFlowPipeline::Other(r.pick(TEXTS).to_string()),
                },
                external_ids: ids.into(),
                ..Default::default()
            }
        };
        let reads = |lf: &sb::LogicalFlow| {
            let id = |k: &str| lf.external_ids.get(k).cloned();
            (
                lf.pipeline.clone(),
                id("stage-name"),
                id("stage-hint"),
                id("hf-flow-id"),
            )
        };
        let (mut same, mut differ) = (0, 0);
        for _ in 0..20_000 {
            let a = random_row(&mut r);
            let b = if r.chance(3) {
                a.clone()
            } else {
                random_row(&mut r)
            };
            let want = reads(&a) == reads(&b);
            assert_eq!(super::RowKey::of(&a).is(&b), want, "{a:?} against {b:?}");
            if want {
                same += 1;
            } else {
                differ += 1;
            }
        }
        assert!(same > 1000 && differ > 1000, "{same} same, {differ} differ");
        // An id other than the three read does not matter.
        let a = random_row(&mut r);
        let mut b = a.clone();
        b.external_ids.insert("other".into(), "changed".into());
        assert!(super::RowKey::of(&a).is(&b));
    }

    /// Runs `steps` random changes; returns the first step whose cached translation differs.
    fn first_difference(seed: u64, steps: usize, broken: u8) -> Option<usize> {
        first_difference_in(seed, steps, broken, FlowForm::Parsed)
    }

    /// [`first_difference`] with the cache in `form` (the text form compared with the full
    /// translation without its parses).
    fn first_difference_in(seed: u64, steps: usize, broken: u8, form: FlowForm) -> Option<usize> {
        let mut r = Rng(seed);
        let mut s = start(&mut r);
        let mut cache = TranslateCache::new();
        cache.set_flow_form(form);
        cache.flows.broken = broken;
        let mut next = 2000;
        let opts = TranslateOptions {
            chassis: Some("hv1".into()),
        };
        let (mut reused, mut parsed, mut whole) = (0, 0, 0);
        for step in 0..steps {
            let extra = Extra::default();
            let want = translate_with(&s, &opts, &extra);
            let want = match form {
                FlowForm::Parsed => want,
                FlowForm::Text => as_text_form(&want),
            };
            let got = translate_cached(&s, &opts, &extra, &mut cache);
            if format!("{:?}", want) != format!("{:?}", got) {
                return Some(step);
            }
            if step > 0 {
                reused += cache.last_counts().0;
                parsed += cache.last_counts().1;
                whole += cache.last_reused_datapaths();
            }
            // Odd seeds give the translations back: datapaths are then reused whole.
            if seed % 2 == 1 {
                cache.recycle(got);
            }
            for _ in 0..1 + r.below(3) {
                mutate(&mut r, &mut s, &mut next);
            }
        }
        // The cache did its work: most rows were reused (a template variable change parses
        // everything again; the text form keeps rows, not flows, so it reuses whole datapaths
        // only).
        if form == FlowForm::Parsed {
            assert!(reused > 4 * parsed, "{reused} rows reused, {parsed} parsed");
        }
        assert_eq!(seed % 2 == 1, whole > 0, "{whole} datapaths reused whole");
        None
    }

    #[test]
    fn cached_translation_equals_the_full_one_over_random_changes() {
        for seed in [1, 2, 3, 4, 5, 6] {
            assert_eq!(first_difference(seed, 80, 0), None, "seed {seed}");
        }
    }

    #[test]
    fn a_text_form_cached_translation_equals_the_full_one_without_its_parses() {
        for seed in [1, 2, 3, 4, 5, 6] {
            assert_eq!(
                first_difference_in(seed, 80, 0, FlowForm::Text),
                None,
                "seed {seed}"
            );
        }
        assert!(first_difference_in(1, 80, 1, FlowForm::Text).is_some());
    }

    /// A datapath group's flow is one row: every datapath's copy of it holds the row's one
    /// identity, stage, UUID and hint allocation (and the parsed form one match tree), in both
    /// forms, fresh and cached. (The equality of the shared and the naive representation is
    /// the tests above: the translations compare equal by value.) Not with a recycled
    /// translation: a datapath taken whole keeps its previous copies, whose allocations a
    /// text-form row rebuilt for the other datapaths does not share (equal values, two
    /// allocations until that datapath changes).
    #[test]
    fn a_groups_flow_copies_share_one_identity() {
        for form in [FlowForm::Parsed, FlowForm::Text] {
            let mut r = Rng(7);
            let mut s = start(&mut r);
            let mut next = 2000;
            let mut cache = TranslateCache::new();
            cache.set_flow_form(form);
            let opts = TranslateOptions {
                chassis: Some("hv1".into()),
            };
            let mut checked = 0;
            for _ in 0..10 {
                let t = translate_cached(&s, &opts, &Extra::default(), &mut cache);
                let mut by_uuid: BTreeMap<&str, Vec<&hf_pipeline::FlowSpec>> = BTreeMap::new();
                for d in &t.spec.datapaths {
                    for f in &d.flows {
                        let key = f.sb_uuid.as_deref().unwrap_or_default();
                        by_uuid.entry(key).or_default().push(f);
                    }
                }
                for copies in by_uuid.values().filter(|c| c.len() > 1) {
                    let a = copies[0];
                    for b in &copies[1..] {
                        let same =
                            |x: Option<&std::sync::Arc<str>>, y: Option<&std::sync::Arc<str>>| {
                                match (x, y) {
                                    (Some(x), Some(y)) => std::sync::Arc::ptr_eq(x, y),
                                    (None, None) => true,
                                    _ => false,
                                }
                            };
                        assert!(std::sync::Arc::ptr_eq(&a.id.0, &b.id.0), "{form:?}");
                        assert!(std::sync::Arc::ptr_eq(&a.stage, &b.stage), "{form:?}");
                        assert!(same(a.sb_uuid.as_ref(), b.sb_uuid.as_ref()), "{form:?}");
                        assert!(
                            same(a.stage_hint.as_ref(), b.stage_hint.as_ref()),
                            "{form:?}"
                        );
                        assert!(std::sync::Arc::ptr_eq(&a.matches, &b.matches), "{form:?}");
                        checked += 1;
                    }
                }
                drop(t);
                for _ in 0..2 {
                    mutate(&mut r, &mut s, &mut next);
                }
            }
            assert!(checked > 100, "{form:?}: {checked} group copies checked");
        }
    }

    #[test]
    fn a_broken_reuse_rule_is_caught() {
        // Reusing a row whose actions changed must show up as a difference, with and
        // without whole datapaths reused (odd seeds recycle).
        assert!(first_difference(1, 80, 1).is_some());
        assert!(first_difference(2, 80, 1).is_some());
        // So must reusing a datapath whose rows are not the same ones.
        assert!(first_difference(1, 80, 2).is_some());
        assert!(first_difference(3, 80, 2).is_some());
    }
}
