//! The northd core: what `holdfast northd` does between two replicas (NB as
//! [`hf_model::NbSnapshot`], SB as the lean [`SbView`]), without sockets or clocks.
//!
//! - Active/standby through the SB lock `ovn_northd` (the lock real ovn-northd takes, so the
//!   two never both write). A standby follows both databases and writes nothing; `pause`
//!   gives the lock up (as ovn-northd does) and `resume` asks for it again.
//! - On an NB change (or a `Chassis` change, or `inc-engine/recompute`): a compile with the
//!   tunnel keys SB has, through [`crate::incremental::Incremental`] (the NB change sets since
//!   the last compile rebuild only the datapaths they touch; the first compile, a resync, a
//!   features change and `inc-engine/recompute` are full ones), then one SB transaction built by [`crate::sync::diff_ops`]
//!   against the view at send time, over the SB identities the compiles since the last sync
//!   changed ([`crate::sync::Scope`]); a full diff of every row instead on the first sync,
//!   after an SB change that is not northd's echo, a `Chassis` change, a resync, a failure,
//!   `inc-engine/recompute`, and every [`Config::full_diff_interval_ms`]; one transaction in flight at a time, and changes that
//!   arrive meanwhile are coalesced into the next. A transaction with nothing to write is not
//!   sent (restarting against an unchanged NB writes nothing).
//! - `NB_Global.nb_cfg` goes to `SB_Global.nb_cfg` in the transaction that writes the matching
//!   flows; once SB shows it, `NB_Global.sb_cfg` (and `sb_cfg_timestamp`) follow; `hv_cfg`
//!   (and its timestamp) is the minimum `Chassis_Private.nb_cfg` over non-remote chassis (the
//!   NB's own `nb_cfg` when there is none), as OVN 23.03 computes it. `Logical_Switch_Port.up`
//!   follows `Port_Binding.up`/`chassis` as 23.03 sets it.
//! - Dynamic addresses: before a compile, [`crate::ipam::plan`] decides
//!   `Logical_Switch_Port.dynamic_addresses` over NB (and `NB_Global.options:mac_prefix` is
//!   written when NB lacks it, as ovn-northd writes its random one); when something is to be
//!   written, that NB transaction goes first and the compile (and the SB sync, so that
//!   `nb_cfg` never reaches SB before the addresses) waits for it, then reads the addresses
//!   from NB. A standby writes nothing and compiles what NB holds.
//! - Diagnostics of each compile are logged once when they appear and once when they go
//!   away, and kept for `status`.
//!
//! Call contract: feed each replica's events to [`Northd::handle_nb_event`] /
//! [`Northd::handle_sb_event`], then call [`Northd::poll`] (with both replicas) and drain
//! [`Northd::poll_log`]. `now` is the replicas' millisecond clock; `wall_ms` the wall clock
//! for the `*_timestamp` columns.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use hf_expr::FeatureSet;
use hf_model::NbSnapshot;
use hf_ovsdb_net::client::{Event, OpsText, Replica, TxnId, TxnOutcome};
use serde_json::{Value, json};
use uuid::Uuid;

use super::sbview::SbView;
use crate::diag::Diagnostic;
use crate::features::{self, SbChassisView};
use crate::output::SbDesired;
use crate::sync::{Scope, SyncInput, SyncStats, diff_ops_text};
use crate::tables::mac_binding;
use crate::{Keys, Options};

/// The SB lock every northd takes (the same name as real ovn-northd's).
pub const LOCK_NAME: &str = "ovn_northd";

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Start paused (`--dry-run`).
    pub paused: bool,
    /// Seed for the UUIDs of inserted rows.
    pub seed: u64,
    /// How often (ms of the core's clock) the sync diffs every row northd owns rather than
    /// only the identities NB changes touched, repairing what other SB writers changed
    /// unseen; `None`: never (only after foreign SB writes, resyncs, failures and
    /// `inc-engine/recompute`). Default [`FULL_DIFF_INTERVAL_MS`].
    pub full_diff_interval_ms: Option<u64>,
}

/// The default period of the full SB diff: 5 minutes. The scoped diff already falls back to
/// a full one after any SB change northd did not write itself, so the period only bounds how
/// long an unseen drift (a foreign write mistaken for northd's echo) can last; a full diff
/// costs about 100 ms of CPU at 100k flows.
pub const FULL_DIFF_INTERVAL_MS: u64 = 300_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            paused: false,
            seed: 0x9e37_79b9_7f4a_7c15,
            full_diff_interval_ms: Some(FULL_DIFF_INTERVAL_MS),
        }
    }
}

/// What this northd is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Holds the lock and writes.
    Active,
    /// Follows; another northd holds the lock (or the lock is not granted yet).
    Standby,
    /// Paused by `pause` or `--dry-run`.
    Paused,
}

impl Role {
    /// As `status` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
            Role::Paused => "paused",
        }
    }
}

/// How severe a log line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Information.
    Info,
    /// Something the operator should look at.
    Warn,
    /// A failure.
    Err,
}

/// Counters.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Compiles run.
    pub compiles: u64,
    /// SB transactions committed (with something in them).
    pub sb_commits: u64,
    /// SB transactions not sent because they had nothing to write.
    pub sb_unchanged: u64,
    /// NB transactions committed.
    pub nb_commits: u64,
    /// What the last committed SB transaction did.
    pub last_sync: SyncStats,
    /// Flows the last compile built (before grouping).
    pub last_flows_built: usize,
    /// Datapaths the last compile rebuilt (every datapath for a full compile).
    pub last_rebuilt: usize,
    /// SB diffs over every row northd owns (the first, after foreign SB writes, resyncs,
    /// failures, `inc-engine/recompute`, and periodically).
    pub full_diffs: u64,
    /// SB diffs over the identities NB changes touched only.
    pub scoped_diffs: u64,
    /// Identities the last scoped diff compared.
    pub last_scope: usize,
    /// Compiles that patched the last topology and non-flow tables (plain VIF changes)
    /// instead of building them anew.
    pub topo_patched: u64,
}

/// The northd core. See the module documentation.
pub struct Northd {
    cfg: Config,
    paused: bool,
    active: bool,
    /// NB (or what compile reads from SB) changed since the last compile.
    compile_due: bool,
    /// SB may differ from the desired state.
    sync_due: bool,
    /// NB-side values (sb_cfg, hv_cfg, LSP up) may need writing.
    nb_side_due: bool,
    /// The ports whose `up` may have changed since the last NB-side pass (their NB row or
    /// their `Port_Binding` changed); None: every port (a resync, a failed write, a chassis
    /// change). A port add then costs one port's look, not a walk over every port.
    up_dirty: Option<BTreeSet<String>>,
    /// The last compile's keys from SB ([`compile_options`]), kept up to date by the
    /// `Port_Binding` names in `keys_dirty` (None: made anew from every SB row at the next
    /// compile: after a resync or a `Datapath_Binding` or `Chassis` change). A port add then
    /// re-reads one port's binding, not 20k.
    keys: Option<Keys>,
    keys_dirty: BTreeSet<String>,
    /// A sync transaction failed: the next one waits until this time (`now`, ms), so a
    /// transaction the server keeps refusing is retried once a second, not in a loop.
    sync_failed: bool,
    sync_retry_at: u64,
    sync_failures: u64,
    desired: Option<Arc<SbDesired>>,
    sb_txn: Option<(TxnId, Arc<Mutex<SyncStats>>)>,
    /// The rows the last SB transaction wrote: the first SB change made only of them is its
    /// echo, which needs no new diff (see [`Northd::handle_sb_event`]).
    echo: Option<Arc<Mutex<std::collections::HashSet<Uuid>>>>,
    nb_txn: Option<TxnId>,
    /// Dynamic addresses may need writing (NB changed, the lock was taken); the NB
    /// transaction writing them; how many were sent since the last compile (a plan that does
    /// not settle stops holding compiles back after a few).
    ipam_due: bool,
    ipam_txn: Option<TxnId>,
    ipam_rounds: u32,
    /// How many `Logical_Switch_Port` rows have a dynamic entry or `dynamic_addresses`
    /// (None: not counted since the last NB resync). While none has, an NB change that adds
    /// none and leaves `NB_Global.options` alone cannot give the address plan anything to
    /// do, and the plan (a pass over every port) is not run: a port add at 500x40 spent 11%
    /// of northd's CPU in it.
    dynamic_rows: Option<usize>,
    /// The last negotiation: features, and whether a chassis is unsupported (then port
    /// bindings decide which datapaths are frozen, so they trigger compiles).
    features: FeatureSet,
    any_unsupported: bool,
    /// The last match text of each ACL that parsed in this run (`Keys::acl_last_good`).
    acl_last_good: BTreeMap<Uuid, String>,
    /// `NB_Global.external_ids` entries negotiation reports (`holdfast-unsupported-chassis:*`).
    report: BTreeMap<String, String>,
    /// MAC_Binding ageing: due now, or at this wall-clock time; the deletion in flight.
    age_due: bool,
    age_at: Option<i64>,
    age_txn: Option<TxnId>,
    diagnostics: Vec<Diagnostic>,
    log: VecDeque<(Level, String)>,
    rng: Arc<Mutex<u64>>,
    stats: Stats,
    /// The incremental compiler and the NB changes since its last update (`None`: unknown,
    /// the next compile is a full one).
    inc: crate::incremental::Incremental,
    pending: Option<Vec<hf_model::NbDelta>>,
    /// The SB identities the compiles since the last sync changed (`None`: the next sync
    /// diffs everything).
    scope: Option<Scope>,
    /// When (the core's clock, ms) the next full diff is due.
    full_diff_at: Option<u64>,
    /// Whether the `Resynced` event of each replica's current session has been handled. A
    /// replica is synced as soon as its core has the rows, before its shell hands the event
    /// over: [`Northd::poll`] waits for the event, so that the compile it triggers is the
    /// only one (a cold start compiled the same NB twice, once before the event and once for
    /// it).
    nb_seen: bool,
    sb_seen: bool,
}

/// Past this many NB change sets between two compiles (a standby follows NB without
/// compiling) the next compile is a full one rather than replaying them all.
const MAX_PENDING: usize = 256;

impl std::fmt::Debug for Northd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Northd")
            .field("role", &self.role())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A UUID (version 4 layout) from a xorshift generator.
fn next_uuid(state: &mut u64) -> Uuid {
    let mut next = || {
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        x
    };
    let (a, b) = (next(), next());
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    uuid::Builder::from_bytes(bytes)
        .with_version(uuid::Version::Random)
        .with_variant(uuid::Variant::RFC4122)
        .into_uuid()
}

impl Northd {
    /// A core; call [`Northd::start`] with the SB replica before anything else.
    pub fn new(cfg: Config) -> Northd {
        Northd {
            paused: cfg.paused,
            rng: Arc::new(Mutex::new(cfg.seed | 1)),
            cfg,
            active: false,
            compile_due: true,
            sync_due: true,
            nb_side_due: true,
            up_dirty: None,
            keys: None,
            keys_dirty: BTreeSet::new(),
            sync_failed: false,
            sync_retry_at: 0,
            sync_failures: 0,
            desired: None,
            sb_txn: None,
            echo: None,
            nb_txn: None,
            ipam_due: true,
            ipam_txn: None,
            ipam_rounds: 0,
            dynamic_rows: None,
            features: FeatureSet::all(),
            any_unsupported: false,
            acl_last_good: BTreeMap::new(),
            report: BTreeMap::new(),
            age_due: true,
            age_at: None,
            age_txn: None,
            diagnostics: Vec::new(),
            log: VecDeque::new(),
            stats: Stats::default(),
            inc: crate::incremental::Incremental::new(),
            pending: None,
            scope: None,
            full_diff_at: None,
            nb_seen: false,
            sb_seen: false,
        }
    }

    /// Asks for the lock (unless paused).
    pub fn start(&mut self, sb: &mut Replica<SbView>) {
        if !self.paused {
            sb.lock(LOCK_NAME);
        }
        if self.cfg.paused {
            self.say(
                Level::Info,
                "started paused (--dry-run): nothing is written until `resume`".into(),
            );
        }
    }

    /// The role.
    pub fn role(&self) -> Role {
        if self.paused {
            Role::Paused
        } else if self.active {
            Role::Active
        } else {
            Role::Standby
        }
    }

    /// The diagnostics of the last compile.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// `status`'s answer.
    pub fn status(&self) -> String {
        let mut s = format!("Status: {}\n", self.role().name());
        if !self.diagnostics.is_empty() {
            s.push_str(&format!("Diagnostics ({}):\n", self.diagnostics.len()));
            for d in &self.diagnostics {
                s.push_str(&format!("  {d}\n"));
            }
        }
        s
    }

    /// `pause`: stop writing and give the lock up.
    pub fn pause(&mut self, sb: &mut Replica<SbView>) {
        if !self.paused {
            self.paused = true;
            self.active = false;
            sb.unlock();
            self.say(Level::Info, "paused: lock released".into());
        }
    }

    /// `resume`: ask for the lock again and catch up.
    pub fn resume(&mut self, sb: &mut Replica<SbView>) {
        if self.paused {
            self.paused = false;
            self.compile_due = true;
            self.sync_due = true;
            self.nb_side_due = true;
            self.up_dirty = None;
            self.ipam_due = true;
            sb.lock(LOCK_NAME);
            self.say(Level::Info, "resumed".into());
        }
    }

    /// Breaks a dependency rule, for the oracles' own tests.
    #[cfg(test)]
    pub(crate) fn break_for_test(&mut self, b: crate::incremental::Broken) {
        self.inc.broken = Some(b);
    }

    /// The keys the next compile starts from, when kept (tests: they must equal
    /// [`compile_options`]'s from the whole view).
    #[cfg(test)]
    pub(crate) fn kept_keys_for_test(&self, sb: &SbView) -> Option<Keys> {
        let mut k = self.keys.clone()?;
        refresh_port_keys(&mut k, sb, &self.keys_dirty).then_some(k)
    }

    /// How many ports are counted dynamic (tests).
    #[cfg(test)]
    pub(crate) fn dynamic_rows_for_test(&self) -> Option<usize> {
        self.dynamic_rows
    }

    /// Takes the next SB change of only `rows` for this core's own echo (tests: the race in
    /// which another writer's change to rows northd just wrote goes unseen).
    #[cfg(test)]
    pub(crate) fn expect_echo_for_test(&mut self, rows: &[Uuid]) {
        self.echo = Some(Arc::new(Mutex::new(rows.iter().copied().collect())));
    }

    /// `inc-engine/recompute`: compile and sync everything at the next poll.
    pub fn recompute(&mut self) {
        self.pending = None;
        self.scope = None;
        self.compile_due = true;
        self.sync_due = true;
        self.nb_side_due = true;
        self.up_dirty = None;
        self.ipam_due = true;
    }

    /// The next log line.
    pub fn poll_log(&mut self) -> Option<(Level, String)> {
        self.log.pop_front()
    }

    fn say(&mut self, l: Level, s: String) {
        self.log.push_back((l, s));
    }

    /// One NB replica event.
    pub fn handle_nb_event(&mut self, ev: Event<NbSnapshot>) {
        match ev {
            Event::Changes(d) => {
                // Every change set keeps the dynamic rows counted.
                let ipam_moves = self.ipam_may_move(&d);
                // Northd's own NB writes (sb_cfg, hv_cfg, LSP up) change nothing in SB; a new
                // nb_cfg needs a sync (it goes to SB_Global), anything else a compile.
                if self.prefix_echo(&d) {
                    // The last compile already used this prefix (SB's), so NB now holds what
                    // it compiled from: the incremental compiler need not hear of it (a
                    // change to NB_Global's options would make its next compile full: the
                    // first port add after a cold start took 206 ms instead of ~10).
                } else if needs_compile(&d) {
                    if let Some(p) = &mut self.pending {
                        if p.len() < MAX_PENDING {
                            p.push(d.clone());
                        } else {
                            self.pending = None;
                        }
                    }
                    self.compile_due = true;
                    self.sync_due = true;
                    if ipam_moves {
                        self.ipam_due = true;
                    }
                } else if d.nb_global.iter().any(|r| match r {
                    hf_model::RowDelta::Update { old, new } => old.nb_cfg != new.nb_cfg,
                    _ => true,
                }) {
                    self.sync_due = true;
                }
                if let Some(dirty) = &mut self.up_dirty {
                    for r in &d.logical_switch_port {
                        match r {
                            hf_model::RowDelta::Insert(n) => {
                                dirty.insert(n.name.clone());
                            }
                            hf_model::RowDelta::Delete(o) => {
                                dirty.insert(o.name.clone());
                            }
                            hf_model::RowDelta::Update { old, new } => {
                                dirty.insert(old.name.clone());
                                dirty.insert(new.name.clone());
                            }
                        }
                    }
                }
                self.nb_side_due = true;
            }
            Event::Resynced { .. } => {
                self.dynamic_rows = None;
                self.nb_seen = true;
                self.pending = None;
                self.ipam_due = true;
                self.compile_due = true;
                self.sync_due = true;
                self.nb_side_due = true;
                self.up_dirty = None;
            }
            Event::TxnDone { id, outcome, .. } if Some(id) == self.nb_txn => {
                self.nb_txn = None;
                match outcome {
                    TxnOutcome::Committed(_) => self.stats.nb_commits += 1,
                    TxnOutcome::Unchanged => {}
                    TxnOutcome::Failed(e) => {
                        self.nb_side_due = true;
                        self.up_dirty = None;
                        self.say(Level::Warn, format!("NB transaction failed: {e}"));
                    }
                    other => self.say(Level::Warn, format!("NB transaction: {other:?}")),
                }
            }
            Event::TxnDone { id, outcome, .. } if Some(id) == self.ipam_txn => {
                self.ipam_txn = None;
                match outcome {
                    TxnOutcome::Committed(_) => self.stats.nb_commits += 1,
                    TxnOutcome::Unchanged => {}
                    // Compiled with what NB holds; the next NB change tries again.
                    TxnOutcome::Failed(e) => self.say(
                        Level::Warn,
                        format!("NB transaction (dynamic addresses) failed: {e}"),
                    ),
                    other => self.say(
                        Level::Warn,
                        format!("NB transaction (dynamic addresses): {other:?}"),
                    ),
                }
            }
            Event::Disconnected { remote, reason } => {
                self.nb_seen = false;
                self.say(Level::Info, format!("NB remote {remote}: {reason}"));
            }
            Event::Warning(w) => self.say(Level::Warn, format!("NB: {w}")),
            _ => {}
        }
    }

    /// Whether change set `d` may give the address plan something to do (see
    /// [`Northd::dynamic_rows`], which this keeps counted).
    fn ipam_may_move(&mut self, d: &hf_model::NbDelta) -> bool {
        let dynamic = |p: &hf_model::nb::LogicalSwitchPort| {
            p.dynamic_addresses.is_some() || p.addresses.iter().any(|a| crate::ipam::is_dynamic(a))
        };
        for r in &d.logical_switch_port {
            let (before, after) = (
                r.before().is_some_and(dynamic),
                r.after().is_some_and(dynamic),
            );
            if let Some(n) = &mut self.dynamic_rows {
                *n = (*n + usize::from(after)).saturating_sub(usize::from(before));
            }
        }
        let options = d.nb_global.iter().any(|r| match r {
            hf_model::RowDelta::Update { old, new } => old.options != new.options,
            _ => true,
        });
        // A change that took the last dynamic entry away still runs the plan once (so a
        // `dynamic_addresses` column left behind is cleared).
        options
            || self.dynamic_rows != Some(0)
            || d.logical_switch_port
                .iter()
                .any(|r| r.before().is_some_and(dynamic))
    }

    /// Whether `d` is only `NB_Global.options:mac_prefix` set to the prefix the last compile
    /// gave SB (besides the handshake columns): northd's own write of it.
    fn prefix_echo(&self, d: &hf_model::NbDelta) -> bool {
        let Some(want) = self
            .desired
            .as_ref()
            .and_then(|s| s.sb_options.get("mac_prefix"))
        else {
            return false;
        };
        d.len() == d.nb_global.len()
            && !d.nb_global.is_empty()
            && d.nb_global.iter().all(|r| match r {
                hf_model::RowDelta::Update { old, new } => {
                    let mut a = crate::incremental::with_handshake_of(old, new);
                    a.options = new.options.clone();
                    let mut o = old.options.clone();
                    o.insert("mac_prefix".to_string(), want.clone());
                    a == *new && o == new.options && old.nb_cfg == new.nb_cfg
                }
                _ => false,
            })
    }

    /// One SB replica event.
    pub fn handle_sb_event(&mut self, ev: Event<SbView>) {
        match ev {
            Event::Changes(c) => {
                // Chassis: features and requested-chassis references; everything but
                // Chassis_Private: rows northd writes.
                if c.touches("Chassis") || (self.any_unsupported && c.touches("Port_Binding")) {
                    self.compile_due = true;
                    // Chassis references (requested-chassis, HA groups) resolve anew.
                    self.scope = None;
                }
                if c.touches("MAC_Binding") {
                    self.age_due = true;
                }
                // BFD: a session's status (the controllers') changes routes and NB's status.
                if c.touches("BFD") {
                    self.compile_due = true;
                    self.nb_side_due = true;
                }
                // Health checks: a monitor's status, or its port going up or down, changes
                // which backends the VIP lists ([`crate::svc`]).
                if c.touches("Service_Monitor")
                    || c.touches("IGMP_Group")
                    || (c.touches("Port_Binding")
                        && self.desired.as_ref().is_some_and(|d| {
                            d.service_monitors
                                .keys()
                                .any(|k| c.port_names.contains(&k.logical_port))
                        }))
                {
                    self.compile_due = true;
                }
                // Controllers' writes (chassis, up, Chassis_Private, MAC_Binding) need no
                // sync: only a change to a row or column northd writes does.
                // The echo of northd's own transaction (a change made only of rows it just
                // wrote) is consumed once without a diff; anything else is diffed. A foreign
                // write to those very rows that arrives first is taken for the echo, and the
                // real echo then triggers the diff that corrects it.
                if c.northd_rows {
                    let echo = self.echo.as_ref().is_some_and(|e| {
                        e.lock().is_ok_and(|e| {
                            !e.is_empty() && c.northd_uuids.iter().all(|u| e.contains(u))
                        })
                    });
                    if echo {
                        self.echo = None;
                    } else {
                        // Another writer: only a full diff sees what it changed.
                        self.sync_due = true;
                        self.scope = None;
                    }
                }
                // The keys read datapath bindings, port bindings and chassis names.
                if c.touches("Chassis") || c.touches("Datapath_Binding") {
                    self.keys = None;
                } else {
                    self.keys_dirty.extend(c.port_names.iter().cloned());
                }
                // `up` reads the port's binding and its chassis (`is-remote`).
                if c.touches("Chassis") {
                    self.up_dirty = None;
                } else if let Some(dirty) = &mut self.up_dirty {
                    dirty.extend(c.port_names.iter().cloned());
                }
                self.nb_side_due = true;
            }
            Event::Resynced { .. } => {
                self.sb_seen = true;
                self.compile_due = true;
                self.sync_due = true;
                self.nb_side_due = true;
                self.up_dirty = None;
                self.keys = None;
                self.scope = None;
            }
            Event::LockAcquired(_) => {
                self.active = true;
                self.ipam_due = true;
                self.sync_due = true;
                self.nb_side_due = true;
                self.up_dirty = None;
                self.say(
                    Level::Info,
                    "ovn-northd lock acquired. This ovn-northd instance is now active.".into(),
                );
            }
            Event::LockLost(_) => {
                if self.active {
                    self.say(
                        Level::Info,
                        "ovn-northd lock lost. This ovn-northd instance is now on standby.".into(),
                    );
                }
                self.active = false;
            }
            Event::TxnDone { id, outcome, .. }
                if self.sb_txn.as_ref().is_some_and(|t| t.0 == id) =>
            {
                let Some((_, st)) = self.sb_txn.take() else {
                    return;
                };
                match outcome {
                    TxnOutcome::Committed(_) => {
                        self.stats.sb_commits += 1;
                        self.sync_failures = 0;
                        if let Ok(s) = st.lock() {
                            self.stats.last_sync = s.clone();
                        }
                        self.nb_side_due = true;
                    }
                    TxnOutcome::Unchanged => {
                        self.stats.sb_unchanged += 1;
                        self.echo = None;
                    }
                    TxnOutcome::Failed(e) => {
                        self.echo = None;
                        self.sync_due = true;
                        self.scope = None;
                        self.sync_failed = true;
                        self.sync_failures += 1;
                        // Logged once per distinct failure streak, with a running count.
                        if self.sync_failures == 1 || self.sync_failures.is_power_of_two() {
                            self.say(
                                Level::Warn,
                                format!(
                                    "SB transaction failed ({} in a row): {e}",
                                    self.sync_failures
                                ),
                            );
                        }
                    }
                    other => {
                        self.sync_due = true;
                        self.sync_failed = true;
                        self.scope = None;
                        self.say(Level::Warn, format!("SB transaction: {other:?}"));
                    }
                }
            }
            Event::TxnDone { id, outcome, .. } if Some(id) == self.age_txn => {
                self.age_txn = None;
                if let TxnOutcome::Failed(e) = outcome {
                    self.age_due = true;
                    self.say(
                        Level::Warn,
                        format!("MAC_Binding ageing transaction failed: {e}"),
                    );
                }
            }
            Event::Disconnected { remote, reason } => {
                self.sb_seen = false;
                self.say(Level::Info, format!("SB remote {remote}: {reason}"));
            }
            Event::Warning(w) => self.say(Level::Warn, format!("SB: {w}")),
            _ => {}
        }
    }

    /// Does what is due: compile, sync SB, write NB's handshake columns.
    pub fn poll(
        &mut self,
        nb: &mut Replica<NbSnapshot>,
        sb: &mut Replica<SbView>,
        now: u64,
        wall_ms: i64,
    ) {
        if std::mem::take(&mut self.sync_failed) {
            self.sync_retry_at = now.saturating_add(1000);
        }
        if !nb.is_synced() || !sb.is_synced() || !self.nb_seen || !self.sb_seen {
            return;
        }
        if self.full_diff_at.is_some_and(|t| now >= t) {
            self.full_diff_at = None;
            self.scope = None;
            self.sync_due = true;
        }
        // Dynamic addresses first: the compile reads them from NB.
        if self.active && !self.paused {
            if self.ipam_txn.is_some() {
                return;
            }
            if self.dynamic_rows.is_none() {
                let dynamic = nb
                    .model()
                    .logical_switch_port()
                    .values()
                    .filter(|p| {
                        p.dynamic_addresses.is_some()
                            || p.addresses.iter().any(|a| crate::ipam::is_dynamic(a))
                    })
                    .count();
                self.dynamic_rows = Some(dynamic);
            }
            if std::mem::take(&mut self.ipam_due) && self.ipam_rounds < MAX_IPAM_ROUNDS {
                let prefix = crate::tables::global::mac_prefix(nb.model(), &sb_options(sb.model()));
                if !ipam_ops(nb.model(), &prefix).is_empty() {
                    self.ipam_rounds += 1;
                    if self.ipam_rounds == MAX_IPAM_ROUNDS {
                        self.say(
                            Level::Warn,
                            "dynamic addresses did not settle after several NB transactions; compiling with what NB holds".into(),
                        );
                    }
                    self.ipam_txn = Some(
                        nb.transact(Box::new(move |view: &NbSnapshot| ipam_ops(view, &prefix))),
                    );
                    return;
                }
            }
        }
        // Compiles run in standby too, so that diagnostics show and a takeover is quick.
        if self.compile_due && (self.active || self.desired.is_none()) {
            self.compile(nb.model(), sb.model());
        }
        if !self.active || self.paused {
            return;
        }
        let mut synced = false;
        if self.sync_due && self.sb_txn.is_none() && now >= self.sync_retry_at {
            self.sync_due = false;
            if self.scope.is_none() || self.full_diff_at.is_none() {
                self.full_diff_at = self
                    .cfg
                    .full_diff_interval_ms
                    .map(|i| now.saturating_add(i));
            }
            self.start_sync(nb.model(), sb);
            // Sent (not finished at once as unchanged): its answer polls again.
            synced = sb.pending_txns() > 0;
        }
        // The NB side walks every port (`up`): not before the SB transaction just queued is
        // on its way. Its answer (`TxnDone`) polls again.
        if self.nb_side_due && self.nb_txn.is_none() && !synced {
            self.nb_side_due = false;
            self.start_nb_side(nb, sb.model(), wall_ms);
        }
        if (self.age_due || self.age_at.is_some_and(|t| wall_ms >= t)) && self.age_txn.is_none() {
            self.age_due = false;
            self.start_ageing(nb.model(), sb, wall_ms);
        }
    }

    /// When [`Northd::poll`] wants to run again for a timer (wall clock, ms), if ever.
    pub fn poll_wall_timeout(&self) -> Option<i64> {
        self.age_at
    }

    fn start_ageing(&mut self, nb: &NbSnapshot, sb: &mut Replica<SbView>, wall_ms: i64) {
        let view = sb.model();
        let names: std::collections::HashMap<Uuid, &str> = view
            .datapath_binding
            .values()
            .filter_map(|d| d.external_ids.get("name").map(|n| (d.uuid, n.as_str())))
            .collect();
        let entries: Vec<mac_binding::Entry> = view
            .mac_binding
            .iter()
            .filter_map(|(u, m)| {
                names.get(&m.datapath).map(|n| mac_binding::Entry {
                    uuid: *u,
                    datapath: (*n).to_string(),
                    timestamp: m.timestamp,
                })
            })
            .collect();
        let a = mac_binding::age(nb, &self.features, &entries, wall_ms);
        self.age_at = a.next_in_ms.map(|d| wall_ms.saturating_add(d));
        if a.delete.is_empty() {
            return;
        }
        self.say(
            Level::Info,
            format!("MAC_Binding ageing: deleting {} rows", a.delete.len()),
        );
        let rows = a.delete;
        self.age_txn = Some(sb.transact(Box::new(move |v: &SbView| {
            let mut ops: Vec<Value> = rows
                .iter()
                .filter(|u| v.mac_binding.contains_key(u))
                .map(|u| {
                    json!({"op": "delete", "table": "MAC_Binding",
                        "where": [["_uuid", "==", ["uuid", u.to_string()]]]})
                })
                .collect();
            if !ops.is_empty() {
                ops.insert(0, json!({"op": "assert", "lock": LOCK_NAME}));
            }
            ops
        })));
    }

    fn compile(&mut self, nb: &NbSnapshot, sb: &SbView) {
        self.compile_due = false;
        self.ipam_rounds = 0;
        self.sync_due = true;
        let kept = self
            .keys
            .take()
            .and_then(|mut k| refresh_port_keys(&mut k, sb, &self.keys_dirty).then_some(k));
        let base = match kept {
            Some(keys) => Options {
                keys,
                ..Default::default()
            },
            None => compile_options(sb),
        };
        self.keys_dirty.clear();
        let (mut opts, neg) = negotiate(base, nb, sb);
        opts.keys.svc = svc_seen(sb);
        (opts.keys.igmp, opts.keys.mc_keys) = igmp_seen(sb);
        opts.keys.bfd = bfd_seen(sb);
        opts.keys.acl_last_good = std::mem::take(&mut self.acl_last_good);
        self.features = neg.features;
        self.any_unsupported = neg.unsupported().next().is_some();
        let report = neg.report();
        if report != self.report {
            self.report = report;
            self.nb_side_due = true;
        }
        // The last desired state goes back to the incremental compiler (a copy when a sync
        // still holds it), then the NB changes since: the result equals a full compile, and
        // the compiler names the flow and non-flow identities it changed.
        if let Some(old) = self.desired.take().map(|d| match Arc::try_unwrap(d) {
            Ok(sb) => sb,
            Err(d) => (*d).clone(),
        }) {
            self.inc.restore(old);
        }
        let pending = self.pending.replace(Vec::new());
        let c = self.inc.update(nb, pending.as_deref(), &opts);
        opts.keys.acl_last_good = BTreeMap::new();
        self.keys = Some(std::mem::take(&mut opts.keys));
        // The SB identities this compile may have changed, for the next sync.
        match (
            self.inc.changed(),
            self.inc.non_flow_changed(),
            &mut self.scope,
        ) {
            (Some(flows), Some(rest), Some(scope)) => {
                let mut s = rest.clone();
                s.flows = flows.iter().copied().collect();
                #[cfg(test)]
                if self.inc.broken == Some(crate::incremental::Broken::ScopeWithoutPorts) {
                    s.ports.clear();
                }
                scope.merge(s);
            }
            _ => self.scope = None,
        }
        self.stats.compiles += 1;
        self.stats.last_rebuilt = self.inc.rebuilt();
        self.stats.topo_patched += u64::from(self.inc.patched());
        self.stats.last_flows_built = c.flows_built;
        // Diagnostics: log those that appear and those that go away.
        let old: BTreeSet<&Diagnostic> = self.diagnostics.iter().collect();
        let new: BTreeSet<&Diagnostic> = c.diagnostics.iter().collect();
        let mut lines = Vec::new();
        for d in new.difference(&old) {
            lines.push((Level::Warn, format!("{d}")));
        }
        for d in old.difference(&new) {
            lines.push((Level::Info, format!("resolved: {d}")));
        }
        for l in lines {
            self.log.push_back(l);
        }
        self.diagnostics = c.diagnostics;
        self.acl_last_good = c.acl_last_good;
        self.desired = Some(Arc::new(c.sb));
    }

    fn start_sync(&mut self, nb: &NbSnapshot, sb: &mut Replica<SbView>) {
        let Some(desired) = self.desired.clone() else {
            return;
        };
        // The nb_cfg written is that of the NB the desired state was compiled from: `poll`
        // compiles first when NB changed in a way that matters, so it is NB's current one.
        let nb_cfg = nb.nb_global().values().next().map_or(0, |g| g.nb_cfg);
        let stats = Arc::new(Mutex::new(SyncStats::default()));
        let st = stats.clone();
        let rng = self.rng.clone();
        // The scope goes with this transaction; the next one gathers anew.
        let scope = self.scope.replace(Scope::default());
        match &scope {
            Some(s) => {
                self.stats.scoped_diffs += 1;
                self.stats.last_scope = s.len();
            }
            None => self.stats.full_diffs += 1,
        }
        let echo = Arc::new(Mutex::new(std::collections::HashSet::new()));
        self.echo = Some(echo.clone());
        let id = sb.transact_text(Box::new(move |view: &SbView| {
            let mut guard = match rng.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            let mut fresh = || next_uuid(&mut guard);
            let (written, s) = diff_ops_text(
                &SyncInput {
                    desired: &desired,
                    nb_cfg,
                    scope: scope.as_ref(),
                },
                view,
                &mut fresh,
            );
            if let Ok(mut g) = st.lock() {
                *g = s;
            }
            if let Ok(mut e) = echo.lock() {
                e.clear();
                e.extend(written.rows.iter().copied());
            }
            if written.ops.is_empty() {
                return OpsText::new();
            }
            // Only the lock's owner may write (as ovn-northd's IDL asserts it): a northd that
            // lost the lock cannot commit a transaction it built before.
            let mut ops = OpsText::new();
            ops.push_value(&json!({"op": "assert", "lock": LOCK_NAME}));
            ops.append(written.ops);
            ops.push_value(&json!({"op": "comment", "comment": "holdfast northd"}));
            ops
        }));
        self.sb_txn = Some((id, stats));
    }

    fn start_nb_side(&mut self, nb: &mut Replica<NbSnapshot>, sb: &SbView, wall_ms: i64) {
        let dirty = self.up_dirty.replace(BTreeSet::new());
        let mut plan = nb_side(nb.model(), sb, dirty.as_ref());
        if let Some(g) = nb.model().nb_global().values().next() {
            let have: BTreeMap<&String, &String> = g
                .external_ids
                .iter()
                .filter(|(k, _)| k.starts_with(features::REPORT_PREFIX))
                .collect();
            let want: BTreeMap<&String, &String> = self.report.iter().collect();
            if have != want {
                plan.report = Some(self.report.clone());
            }
        }
        if plan.is_empty() {
            return;
        }
        let id = nb.transact(Box::new(move |view: &NbSnapshot| {
            plan_ops(&plan, view, wall_ms)
        }));
        self.nb_txn = Some(id);
    }
}

/// Whether an NB change can change the compile: everything except northd's own handshake
/// columns (`NB_Global`'s `nb_cfg`, `sb_cfg`, `hv_cfg` and their timestamps) and
/// `Logical_Switch_Port.up`, which a sync without a compile handles.
pub fn needs_compile(d: &hf_model::NbDelta) -> bool {
    use hf_model::RowDelta;
    let mut cheap = 0;
    for r in &d.nb_global {
        if let RowDelta::Update { old, new } = r
            && crate::incremental::with_handshake_of(old, new) == *new
        {
            cheap += 1;
        }
    }
    for r in &d.logical_switch_port {
        if let RowDelta::Update { old, new } = r {
            let mut a = old.clone();
            a.up = new.up;
            if a == *new {
                cheap += 1;
            }
        }
    }
    cheap < d.len()
}

/// NB transactions of dynamic addresses in a row (with no compile between) after which the
/// daemon compiles with what NB holds rather than wait for the plan to settle.
const MAX_IPAM_ROUNDS: u32 = 4;

/// `SB_Global.options` as SB holds them.
fn sb_options(sb: &SbView) -> BTreeMap<String, String> {
    sb.sb_global
        .values()
        .next()
        .map(|g| g.options.clone().into())
        .unwrap_or_default()
}

/// The NB operations that write the dynamic addresses [`crate::ipam::plan`] decides over
/// `nb`, and `NB_Global.options:mac_prefix` when NB does not hold `prefix` (the prefix in
/// force, [`crate::tables::global::mac_prefix`]); empty when nothing is to be written.
fn ipam_ops(nb: &NbSnapshot, prefix: &str) -> Vec<Value> {
    let mut ops = Vec::new();
    if let Some(g) = nb.nb_global().values().next()
        && g.options.get("mac_prefix").map(String::as_str) != Some(prefix)
    {
        ops.push(
            json!({"op": "mutate", "table": "NB_Global", "where": uuid_where(g.uuid),
            "mutations": [["options", "delete", ["set", ["mac_prefix"]]],
                          ["options", "insert", ["map", [["mac_prefix", prefix]]]]]}),
        );
    }
    let plan = crate::ipam::plan(nb, crate::tables::global::prefix_bytes(prefix));
    for (u, v) in plan.writes {
        let v = match v {
            Some(s) => json!(s),
            None => json!(["set", []]),
        };
        ops.push(json!({"op": "update", "table": "Logical_Switch_Port",
            "where": uuid_where(u), "row": {"dynamic_addresses": v}}));
    }
    ops
}

/// What compile reads from SB: tunnel keys by name.
pub fn compile_options(sb: &SbView) -> Options {
    let mut keys = Keys {
        ports: hashbrown::HashMap::with_capacity(sb.port_binding.len()),
        ..Default::default()
    };
    for d in sb.datapath_binding.values() {
        if let (Some(n), Ok(k)) = (d.external_ids.get("name"), u32::try_from(d.tunnel_key)) {
            keys.datapaths.entry(n.clone()).or_insert(k);
            if let Some(u) = ["logical-switch", "logical-router"]
                .iter()
                .find_map(|c| d.external_ids.get(*c).and_then(|u| u.parse().ok()))
            {
                keys.nb_rows.insert(n.clone(), u);
            }
        }
    }
    for p in sb.port_binding.values() {
        add_port_keys(&mut keys, p, sb);
    }
    if let Some(g) = sb.sb_global.values().next() {
        keys.sb_options = g.options.clone().into();
    }
    keys.svc = svc_seen(sb);
    (keys.igmp, keys.mc_keys) = igmp_seen(sb);
    keys.bfd = bfd_seen(sb);
    Options {
        keys,
        ..Default::default()
    }
}

/// SB `BFD` rows (see [`crate::bfd`]).
fn bfd_seen(sb: &SbView) -> Vec<crate::bfd::BfdSeen> {
    let mut v: Vec<crate::bfd::BfdSeen> = sb
        .bfd
        .values()
        .map(|b| crate::bfd::BfdSeen {
            logical_port: b.logical_port.clone(),
            dst_ip: b.dst_ip.clone(),
            src_port: b.src_port,
            disc: b.disc,
            status: b.status.as_str().to_string(),
        })
        .collect();
    v.sort();
    v
}

/// The controllers' `IGMP_Group` rows resolved to names (rows without chassis, datapath or a
/// known datapath are left out), and the keys of the learned `Multicast_Group` rows SB holds
/// (see [`crate::tables::igmp`]).
#[allow(clippy::type_complexity)]
fn igmp_seen(
    sb: &SbView,
) -> (
    Vec<crate::tables::igmp::IgmpSeen>,
    BTreeMap<(String, String), u32>,
) {
    let dp_name = |u: &Uuid| {
        sb.datapath_binding
            .get(u)
            .and_then(|d| d.external_ids.get("name").cloned())
    };
    let mut rows = Vec::new();
    for g in sb.igmp_group.values() {
        let (Some(dp), Some(ch)) = (g.datapath.and_then(|d| dp_name(&d.uuid())), g.chassis) else {
            continue;
        };
        let chassis = sb
            .chassis
            .get(&ch.uuid())
            .map_or_else(|| ch.uuid().to_string(), |c| c.name.clone());
        let mut ports: Vec<String> = g
            .ports
            .iter()
            .filter_map(|p| {
                sb.port_binding
                    .get(&p.uuid())
                    .map(|b| b.logical_port.clone())
            })
            .collect();
        ports.sort();
        rows.push(crate::tables::igmp::IgmpSeen {
            datapath: dp,
            address: g.address.clone(),
            chassis,
            ports,
        });
    }
    rows.sort();
    let mut keys = BTreeMap::new();
    for m in sb.multicast_group.values() {
        let (Some(dp), Ok(k)) = (dp_name(&m.datapath.uuid()), u32::try_from(m.tunnel_key)) else {
            continue;
        };
        if k >= crate::tables::igmp::MIN_KEY {
            keys.insert((dp, m.name.clone()), k);
        }
    }
    (rows, keys)
}

/// The `Service_Monitor` rows with a status, and whether their ports are up (what the health
/// checks' plan reads; see [`crate::svc`]).
fn svc_seen(sb: &SbView) -> BTreeMap<crate::svc::SvcKey, crate::svc::SvcSeen> {
    let mut out = BTreeMap::new();
    for m in sb.service_monitor.values() {
        let Some(status) = &m.status else {
            continue;
        };
        let Ok(port) = u16::try_from(m.port) else {
            continue;
        };
        let up = match sb.port_bindings_named(&m.logical_port) {
            Some(pbs) => pbs.iter().any(|p| p.up == Some(true)),
            None => sb
                .port_binding
                .values()
                .any(|p| p.logical_port == m.logical_port && p.up == Some(true)),
        };
        out.insert(
            crate::svc::SvcKey {
                logical_port: m.logical_port.clone(),
                ip: m.ip.clone(),
                port,
                protocol: m
                    .protocol
                    .as_ref()
                    .map_or_else(|| "tcp".to_string(), |p| p.as_str().to_string()),
            },
            crate::svc::SvcSeen {
                status: status.as_str().to_string(),
                port_up: up,
            },
        );
    }
    out
}

/// `p`'s entries in `keys`, unless a binding of the same name earlier in UUID order gave them.
fn add_port_keys(keys: &mut Keys, p: &hf_model::sb::PortBinding, sb: &SbView) {
    if let Ok(k) = u32::try_from(p.tunnel_key) {
        keys.ports.entry(p.logical_port.clone()).or_insert(k);
    }
    if let Some(t) = p.tag {
        keys.tags.entry(p.logical_port.clone()).or_insert(t);
    }
    if let Some(q) = p
        .options
        .get("qdisc_queue_id")
        .and_then(|q| q.parse::<u32>().ok())
    {
        keys.queue_ids.entry(p.logical_port.clone()).or_insert(q);
    }
    if let Some(c) = p.chassis.and_then(|c| sb.chassis.get(&c.uuid())) {
        keys.bound_chassis
            .entry(p.logical_port.clone())
            .or_insert_with(|| c.name.clone());
    }
}

/// Brings the keys of a previous [`compile_options`] up to date with `sb` when only the
/// `Port_Binding` rows named in `names` changed since (and `SB_Global`, whose options are
/// read again): each name's entries are made again from its bindings. False (and `keys` as
/// it was) when the view's name index cannot say which bindings a name has.
fn refresh_port_keys(keys: &mut Keys, sb: &SbView, names: &BTreeSet<String>) -> bool {
    let mut rows = Vec::with_capacity(names.len());
    for n in names {
        match sb.port_bindings_named(n) {
            Some(pbs) => rows.push((n, pbs)),
            None => return false,
        }
    }
    for (n, pbs) in rows {
        keys.ports.remove(n.as_str());
        keys.tags.remove(n.as_str());
        keys.queue_ids.remove(n.as_str());
        keys.bound_chassis.remove(n.as_str());
        for p in pbs {
            add_port_keys(keys, p, sb);
        }
    }
    keys.sb_options = sb
        .sb_global
        .values()
        .next()
        .map(|g| g.options.clone().into())
        .unwrap_or_default();
    true
}

/// [`compile_options`] with the chassis' feature negotiation applied, as the daemon compiles,
/// and the negotiation.
#[cfg(test)]
pub(crate) fn negotiated_options(nb: &NbSnapshot, sb: &SbView) -> (Options, features::Negotiated) {
    negotiate(compile_options(sb), nb, sb)
}

/// `opts` with the chassis' feature negotiation applied, and the negotiation.
fn negotiate(mut opts: Options, nb: &NbSnapshot, sb: &SbView) -> (Options, features::Negotiated) {
    let view = SbChassisView::from_parts(
        sb.chassis.values(),
        &sb.datapath_binding,
        sb.port_binding.values(),
    );
    let neg = features::negotiate(&view, nb, &features::Policy::default());
    neg.apply(&mut opts);
    (opts, neg)
}

/// The NB writes due: values computed from SB, applied against the NB view at send time.
#[derive(Clone, Debug, Default)]
pub(crate) struct NbPlan {
    /// Create NB_Global.
    create_global: bool,
    /// `sb_cfg` (SB_Global.nb_cfg as SB shows it).
    sb_cfg: Option<i64>,
    /// `hv_cfg` and its timestamp.
    hv_cfg: Option<(i64, i64)>,
    /// `nb_cfg` to stamp `nb_cfg_timestamp` for (it reached SB).
    nb_cfg_seen: Option<i64>,
    /// LSP UUID → `up`.
    pub(crate) ups: Vec<(Uuid, bool)>,
    /// The `NB_Global.external_ids` negotiation report: exactly these prefixed keys.
    report: Option<BTreeMap<String, String>>,
    /// NB `BFD` row → the `status` to write ([`crate::bfd::BfdPlan::nb_status`]).
    bfd_status: BTreeMap<Uuid, String>,
}

impl NbPlan {
    fn is_empty(&self) -> bool {
        !self.create_global
            && self.sb_cfg.is_none()
            && self.hv_cfg.is_none()
            && self.nb_cfg_seen.is_none()
            && self.ups.is_empty()
            && self.report.is_none()
            && self.bfd_status.is_empty()
    }
}

pub(crate) fn nb_side(nb: &NbSnapshot, sb: &SbView, dirty: Option<&BTreeSet<String>>) -> NbPlan {
    let mut plan = NbPlan::default();
    let Some(g) = nb.nb_global().values().next() else {
        plan.create_global = true;
        return plan;
    };
    if !nb.bfd().is_empty() {
        // NB's statuses follow SB's rows as this plan wants them: ovn-northd writes both from
        // one snapshot and runs again only when both are in. Written before SB shows the plan's
        // rows, a status (`down` for `admin_down`) would reach the next compile with SB still
        // stale (the controller's `init`), which would copy that back to NB.
        let seen = bfd_seen(sb);
        let p = crate::bfd::plan(nb, &seen);
        let rows: BTreeSet<(&str, &str, &str)> = seen
            .iter()
            .map(|s| (&*s.logical_port, &*s.dst_ip, &*s.status))
            .collect();
        let sb_in =
            p.sb.iter()
                .all(|((port, dst), r)| rows.contains(&(&**port, &**dst, &*r.status)));
        if sb_in {
            plan.bfd_status = p.nb_status;
        }
    }
    let sb_cfg = sb.global().map_or(0, |s| s.nb_cfg);
    if sb_cfg != 0 && g.sb_cfg != sb_cfg {
        plan.sb_cfg = Some(sb_cfg);
        if sb_cfg == g.nb_cfg {
            plan.nb_cfg_seen = Some(sb_cfg);
        }
    }
    // hv_cfg: the minimum nb_cfg over non-remote chassis; NB's own nb_cfg without any.
    let mut hv = g.nb_cfg;
    let mut ts = 0;
    for cp in sb.chassis_private.values() {
        let remote = cp
            .chassis
            .and_then(|c| sb.chassis.get(&c.uuid()))
            .is_some_and(|c| c.other_config.get("is-remote").is_some_and(|v| v == "true"));
        if remote {
            continue;
        }
        if cp.nb_cfg < hv {
            hv = cp.nb_cfg;
            ts = cp.nb_cfg_timestamp;
        } else if cp.nb_cfg == hv && cp.nb_cfg_timestamp > ts {
            ts = cp.nb_cfg_timestamp;
        }
    }
    if g.hv_cfg != hv {
        plan.hv_cfg = Some((hv, ts));
    }
    // Logical_Switch_Port.up, as 23.03: router ports are up; others when bound to a chassis
    // and the controller says so (a remote chassis' ports are up once bound). Only the ports
    // named in `dirty` when given (and SB's name index covers every binding), else all.
    // Of several bindings with one name, the last in UUID order counts.
    // Each name's bindings, read once (None when the view's name index cannot say).
    let named: Option<Vec<(&String, Vec<&hf_model::sb::PortBinding>)>> = dirty.and_then(|d| {
        d.iter()
            .map(|n| sb.port_bindings_named(n).map(|pbs| (n, pbs)))
            .collect()
    });
    if let Some(named) = named {
        for (name, pbs) in named {
            let Some(pb) = pbs.last() else { continue };
            for lsp in nb.logical_switch_port_all_by_name(name) {
                lsp_up(&mut plan, lsp, pb, sb);
            }
        }
        return plan;
    }
    let pbs: std::collections::HashMap<&str, &hf_model::sb::PortBinding> = sb
        .port_binding
        .values()
        .map(|p| (p.logical_port.as_str(), p))
        .collect();
    for lsp in nb.logical_switch_port().values() {
        if let Some(pb) = pbs.get(lsp.name.as_str()) {
            lsp_up(&mut plan, lsp, pb, sb);
        }
    }
    plan
}

/// Adds `lsp`'s `up` to `plan` when it differs from what its binding `pb` says.
fn lsp_up(
    plan: &mut NbPlan,
    lsp: &hf_model::nb::LogicalSwitchPort,
    pb: &hf_model::sb::PortBinding,
    sb: &SbView,
) {
    let up = if lsp.type_ == "router" {
        true
    } else if let Some(c) = pb.chassis {
        let remote = sb
            .chassis
            .get(&c.uuid())
            .is_some_and(|c| c.other_config.get("is-remote").is_some_and(|v| v == "true"));
        remote || pb.up == Some(true)
    } else {
        false
    };
    if lsp.up != Some(up) {
        plan.ups.push((lsp.uuid, up));
    }
}

fn uuid_where(u: Uuid) -> Value {
    json!([["_uuid", "==", ["uuid", u.to_string()]]])
}

fn plan_ops(plan: &NbPlan, nb: &NbSnapshot, wall_ms: i64) -> Vec<Value> {
    let mut ops = Vec::new();
    let Some(g) = nb.nb_global().values().next() else {
        if plan.create_global {
            ops.push(json!({"op": "insert", "table": "NB_Global", "row": {}}));
        }
        return ops;
    };
    let mut row = serde_json::Map::new();
    if let Some(c) = plan.sb_cfg
        && g.sb_cfg != c
    {
        row.insert("sb_cfg".into(), json!(c));
        row.insert("sb_cfg_timestamp".into(), json!(wall_ms));
    }
    if let Some(c) = plan.nb_cfg_seen
        && g.nb_cfg == c
    {
        row.insert("nb_cfg_timestamp".into(), json!(wall_ms));
    }
    if let Some((c, ts)) = plan.hv_cfg
        && g.hv_cfg != c
    {
        row.insert("hv_cfg".into(), json!(c));
        row.insert("hv_cfg_timestamp".into(), json!(ts));
    }
    if !row.is_empty() {
        ops.push(
            json!({"op": "update", "table": "NB_Global", "where": uuid_where(g.uuid), "row": row}),
        );
    }
    if let Some(want) = &plan.report {
        // Mutations, so that other external_ids keys are never touched: delete the prefixed
        // keys that are wrong or stale, then insert the missing ones.
        let stale: Vec<&String> = g
            .external_ids
            .iter()
            .filter(|(k, v)| k.starts_with(features::REPORT_PREFIX) && want.get(*k) != Some(*v))
            .map(|(k, _)| k)
            .collect();
        let missing: Vec<Value> = want
            .iter()
            .filter(|(k, v)| g.external_ids.get(*k) != Some(*v))
            .map(|(k, v)| json!([k, v]))
            .collect();
        let mut muts = Vec::new();
        if !stale.is_empty() {
            muts.push(json!(["external_ids", "delete", ["set", stale]]));
        }
        if !missing.is_empty() {
            muts.push(json!(["external_ids", "insert", ["map", missing]]));
        }
        if !muts.is_empty() {
            ops.push(
                json!({"op": "mutate", "table": "NB_Global", "where": uuid_where(g.uuid),
                "mutations": muts}),
            );
        }
    }
    for (u, up) in &plan.ups {
        if nb
            .logical_switch_port()
            .get(u)
            .is_some_and(|l| l.up != Some(*up))
        {
            ops.push(json!({"op": "update", "table": "Logical_Switch_Port",
                "where": uuid_where(*u), "row": {"up": up}}));
        }
    }
    for (u, st) in &plan.bfd_status {
        if nb
            .bfd()
            .get(u)
            .is_some_and(|b| b.status.as_ref().map(|s| s.as_str()) != Some(st.as_str()))
        {
            ops.push(json!({"op": "update", "table": "BFD",
                "where": uuid_where(*u), "row": {"status": st}}));
        }
    }
    ops
}
