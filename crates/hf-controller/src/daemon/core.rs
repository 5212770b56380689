//! The controller core: SB (one [`Replica`] of [`SbSnapshot`] with conditional monitoring) and
//! the local datapath (the `hf_datapath::proto` stream) in, SB writes and programs out.
//!
//! # What it does
//!
//! - Registers `Chassis`/`Encap`/`Chassis_Private` ([`super::chassis`]), and again when they
//!   disappear (a rebuilt database).
//! - Once the datapath's hello has named the local ports: claims their `Port_Binding`s and
//!   releases the ones that went away ([`super::binding`]); writes learned neighbours to
//!   `MAC_Binding` ([`super::neigh`]). One SB transaction in flight at a time; its operations
//!   are built from the view when it is sent, so nothing is written twice.
//! - LB health checks ([`super::svc`]): sends a version-6 datapath the `Service_Monitor`s of
//!   the local ports (whenever they change) and writes the statuses it reports.
//! - BFD to router ports' next hops ([`hop_bfd`]): sends a version-9 datapath the SB `BFD`
//!   rows whose port is resident here and writes the states it reports into `BFD.status`.
//! - Keeps the monitor conditions at what the view says this chassis needs
//!   ([`super::monitor`]).
//! - Translates incrementally ([`crate::Incremental`], fed the replica's change sets; only
//!   the needed datapaths, the datapath's zone map kept), builds the message reusing the
//!   untouched datapaths' messages (shared, see [`push`]) and pushes a [`ProgramMsg`]
//!   (whole or as a delta) atomically, only with a complete view: the replica
//!   is in sync, the conditions are at their fixpoint and answered, SB has its `SB_Global`
//!   and our `Chassis`, and the datapath's hello has come. One program in flight at a time. A
//!   translation whose content equals what the datapath runs is not pushed (a restarted
//!   controller against an unchanged SB pushes nothing).
//! - Zones: names the translation no longer has stay in the zone map (with their numbers,
//!   which are not reused) until their logical object is really gone from SB — a port with no
//!   `Port_Binding` left on a datapath this chassis monitors (or whose datapath is gone), a
//!   switch or router with no `Datapath_Binding` — for [`Tuning::flush_grace`] of complete
//!   views; then one [`ToDatapath::FlushZones`]. A UUID change never flushes anything: zones
//!   are by name. A restarted controller watches by name (monitor conditions) the ports of
//!   `lsp/` zones the datapath holds that no program it knows has (held by its predecessor),
//!   so those are judged and flushed too, one grace after its first complete view.
//! - Zones exhausted ([`crate::translate::zones::EXHAUSTED`]): the translation is not pushed,
//!   the running program stays; logged once, in [`Controller::status`] and in
//!   `Chassis_Private.external_ids:holdfast-zone-error` until a translation has every zone.
//! - `nb_cfg`: once the datapath answered `Installed` for a program translated at
//!   `SB_Global.nb_cfg` N (or the translation at N equals what runs), `Chassis_Private.nb_cfg`
//!   becomes N with `nb_cfg_timestamp`, so `ovn-nbctl --wait=hv` returns.
//! - Flow errors: see [`super::lastgood`]; logged once per cause, in [`Controller::status`]
//!   and in `Chassis_Private.external_ids`.
//! - A view that lost every datapath while the datapath still has local ports and runs a
//!   program with datapaths (a database being rebuilt) is held for `flush_grace` before it is
//!   pushed, so a rebuild that repopulates SB in time changes nothing in the datapath.
//!
//! # Call contract
//!
//! After every `handle_*` call drain, in order: [`Controller::poll_sb_close`] (close the SB
//! connection; do not report it as disconnected), [`Controller::poll_sb_transmit`],
//! [`Controller::poll_sb_connect`] (dial that remote index, then
//! [`Controller::handle_sb_connected`] or [`Controller::handle_sb_disconnected`]),
//! [`Controller::poll_dp_transmit`], [`Controller::poll_log`], and then
//! [`Controller::poll_timeout`]. `now` is monotonic (never goes backwards).
//!
//! # What it does not do
//!
//! No sockets, no clock: the shell or the simulator moves bytes and supplies `now` (and the
//! wall-clock offset for SB timestamps, [`Tuning::wall_offset_ms`]). No live-migration
//! driving (a `PortActivated` is logged), no `external`/`l2gateway` claims (see
//! [`super::binding`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hf_datapath::proto::{
    self, DatapathMsg, Decoder, FromDatapath, LocalPort, LocationMsg, PROTOCOL_VERSION, ProgramMsg,
    ToDatapath,
};
use hf_model::SbSnapshot;
use hf_ovsdb_net::client::{
    Config as ReplicaConfig, Event, Model, Replica, TableSelect, TxnId, TxnOutcome,
};
use serde_json::Value;
use uuid::Uuid;

use hf_datapath::stopwatch::Stopwatches;

use super::chassis::{self, Identity};
use super::lastgood::LastGood;
use super::{binding, monitor, neigh};
use crate::Incremental;

// Program pushes and the datapath's answers to them.
#[path = "ha.rs"]
mod ha;
#[path = "hop_bfd.rs"]
mod hop_bfd;
#[path = "mcast.rs"]
mod mcast;
#[path = "meters.rs"]
mod meters;
#[path = "mirror.rs"]
mod mirror;
pub use mirror::local_mirrors;
#[path = "push.rs"]
mod push;
#[path = "ra.rs"]
mod ra;
#[path = "write.rs"]
mod write;

use write::WriteState;

/// What the controller is (the API of issue 11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `Chassis.name` (`--system-id`).
    pub chassis: String,
    /// `Chassis.hostname`.
    pub hostname: String,
    /// `Encap.type` (`geneve`).
    pub encap_type: String,
    /// `Encap.ip`.
    pub encap_ip: String,
    /// Monitor every SB row (`ovn-monitor-all=true`) instead of conditional monitoring.
    pub monitor_all: bool,
}

/// Settings beyond [`ControllerConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// How many SB remotes the shell can dial (a cluster's members).
    pub remotes: usize,
    /// Use only a clustered SB's leader. Off by default, as ovn-controller's SB IDL
    /// (`ovsdb_idl_set_leader_only(.., false)`): a chassis reads from any connected,
    /// up-to-date member, and its writes (`Chassis_Private`, bindings) are forwarded to the
    /// leader by the member. Only northd needs the leader.
    pub leader_only: bool,
    /// Dial the SB remotes in a shuffled order (OVS's default `shuffle_remotes`), so that the
    /// chassis of a deployment spread over a cluster's members. The order is seeded by the
    /// chassis name: stable for one chassis, different between chassis, and deterministic in
    /// the simulator. `false`: in the order given.
    pub shuffle_remotes: bool,
    /// The SB replica's inactivity probe (None: never).
    pub probe_interval_ms: Option<u64>,
    /// How long an object must stay gone (over complete views) before its zones are flushed,
    /// and how long a view without any datapath is held back.
    pub flush_grace: Duration,
    /// Wall-clock milliseconds at `now` = 0 (for `nb_cfg_timestamp` and `MAC_Binding.timestamp`).
    pub wall_offset_ms: i64,
    /// The feature level this controller advertises (`Chassis.other_config:holdfast-features`)
    /// and parses (`holdfast controller --feature-level`; default the newest). A flow using a
    /// construct outside it is, for this controller, a flow it cannot parse: the program says
    /// the level ([`ProgramMsg::feature_level`]) and the datapath treats such text as a syntax
    /// error, with the same last-good fallback and report. Below `hf-2` the SB layout is the
    /// older one too: `Port_Group` rows are taken by their names as written (a 20.06
    /// controller does not know per-datapath rows, so `@pg` finds nothing).
    pub feature_level: hf_expr::Level,
    /// Test hook (incident B's control case): `false` hands the datapath no last good versions,
    /// so a flow that does not parse has nothing to fall back to (a naive controller).
    pub keep_last_good: bool,
    /// Send program changes as deltas against the running program (protocol version 4;
    /// default). `false` sends every program whole (tests compare the two).
    pub program_deltas: bool,
    /// Build each program message reusing the previous build's messages of the datapaths the
    /// translation did not touch (`program_msg_reusing`; default). `false` builds every
    /// message whole (`program_msg`; tests compare the two).
    pub incremental_messages: bool,
    /// The threads a full translation (cold start, resync) uses; the result does not depend
    /// on it (`holdfast controller --n-threads`; default here: the calling thread only).
    pub translate_threads: crate::Parallelism,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            remotes: 1,
            leader_only: false,
            shuffle_remotes: true,
            probe_interval_ms: Some(5_000),
            flush_grace: Duration::from_secs(5),
            wall_offset_ms: 0,
            feature_level: newest_level(),
            keep_last_good: true,
            program_deltas: true,
            incremental_messages: true,
            translate_threads: crate::Parallelism::SEQUENTIAL,
        }
    }
}

/// The seed of a chassis's SB remote order: FNV-1a of its name.
fn name_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The newest feature level this build knows (the controller's default).
pub fn newest_level() -> hf_expr::Level {
    hf_expr::Level::ALL
        .last()
        .copied()
        .unwrap_or(hf_expr::Level::Hf1)
}

/// How severe a log line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Detail.
    Debug,
    /// Information.
    Info,
    /// Something the operator should look at.
    Warn,
    /// A failure.
    Err,
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Translations run.
    pub translations: u64,
    /// Programs pushed.
    pub programs_pushed: u64,
    /// Translations not pushed because they equal what the datapath runs.
    pub programs_unchanged: u64,
    /// Programs the datapath installed.
    pub programs_installed: u64,
    /// Programs the datapath rejected.
    pub programs_rejected: u64,
    /// `FlushZones` requests sent, and zone names in them.
    pub flush_requests: u64,
    /// Zone names flushed.
    pub zones_flushed: u64,
    /// SB write transactions sent.
    pub sb_writes: u64,
    /// SB write transactions that failed.
    pub sb_write_failures: u64,
    /// Of `programs_pushed`, those sent as a delta against the running program (protocol
    /// version 4); the others went whole.
    pub deltas_pushed: u64,
    /// Deltas the datapath did not apply because it does not run their base (then the whole
    /// program follows).
    pub deltas_refused: u64,
    /// Bytes of the last program or delta frame sent.
    pub last_push_bytes: u64,
    /// Datapath messages a build took from the previous build as they were (shared, not
    /// built again): see [`Tuning::incremental_messages`].
    pub datapath_messages_reused: u64,
}

/// The controller core. See the module documentation.
pub struct Controller {
    cfg: ControllerConfig,
    tuning: Tuning,
    sb: Replica<SbSnapshot>,
    sb_dialing: Option<usize>,
    shared: Arc<Mutex<WriteState>>,
    txn: Option<TxnId>,
    /// The transaction in flight claims or releases ports.
    txn_claims: bool,
    write_due: bool,
    write_retry_at: Option<Duration>,
    last_write_error: Option<String>,
    /// Conditions as last set, and whether the last computation changed none.
    conds: BTreeMap<&'static str, Option<Vec<Value>>>,
    conds_settled: bool,
    /// The view or the local ports changed since the conditions were last computed.
    conds_due: bool,
    /// The datapaths the conditions were computed for (every one with `monitor_all`).
    monitored: BTreeSet<Uuid>,
    /// `monitored` may differ from what [`monitor::local_datapaths`] gives now (`false`:
    /// only `Logical_DP_Group` rows changed since, and the conditions take `monitored` as it
    /// is instead of walking the view again).
    dps_stale: bool,
    /// The ports the conditions watch by name ([`monitor::watch_ports`]).
    watched_orphans: BTreeSet<String>,
    /// `zones` or `zone_dp` changed since `watched_orphans` was computed (the walk over every
    /// zone is made only then, not on every input).
    orphans_dirty: bool,
    /// [`binding::candidates`] of the view, kept up to date from each change set and, at each
    /// write round, for the port names whose local or virtual state changed (`None`: found
    /// anew at the next write round, after a resync or a change of our `Chassis` row): a
    /// write round then costs the rows this chassis has, without a lookup per local port
    /// name.
    bind_cands: Option<BTreeSet<Uuid>>,
    /// The candidates a change set or a write named since the last write round (`None`:
    /// unknown, every candidate is looked at): any other candidate's claim is as the last
    /// round found it, unless its port name is among the changed `claim_prev` inputs.
    claim_dirty: Option<BTreeSet<Uuid>>,
    /// The claims' inputs as the last write round read them.
    claim_prev: Option<write::ClaimInputs>,
    // The datapath link.
    dp_connected: bool,
    dp_dec: Decoder<FromDatapath>,
    dp_out: VecDeque<Vec<u8>>,
    dp_hello: bool,
    /// The datapath's protocol version (from its hello).
    dp_version: u32,
    /// The version this controller's hello says: [`PROTOCOL_VERSION`], one less after each
    /// refusal by an older datapath (which refuses newer versions), down to
    /// [`proto::MIN_PROTOCOL_VERSION`]; back to [`PROTOCOL_VERSION`] after a session that
    /// was accepted ends (the datapath may have been upgraded meanwhile).
    hello_version: u32,
    /// The service monitors last sent to the datapath ([`super::svc`]); `None`: not yet on
    /// this session.
    svc_sent: Option<Vec<proto::SvcMonitorMsg>>,
    /// Why monitors were left out, as last logged.
    svc_bad: Vec<String>,
    /// The monitors' inputs changed (`Service_Monitor`, `Port_Binding`, `MAC_Binding`, the
    /// local ports): the next step computes the list again.
    svc_due: bool,
    /// The meters last sent to the datapath (`None`: none since its hello).
    meters_sent: Option<proto::MetersMsg>,
    /// The meters' inputs changed (`Meter`, `Meter_Band`, a flow with a `controller_meter`, a
    /// resync, a datapath hello): the next step builds the message again.
    meters_due: bool,
    /// The BFD peers and timers last sent to the datapath ([`ha`]; `None`: none since its
    /// hello).
    bfd_sent: Option<proto::BfdMsg>,
    /// Their inputs changed.
    bfd_due: bool,
    /// The chassis whose BFD sessions are up, while BFD runs (the translation's
    /// `Extra::ha_up`).
    ha_up: Option<BTreeSet<String>>,
    /// The mirror sessions last sent to the datapath ([`mirror`]; `None`: none since its
    /// hello).
    mirrors_sent: Option<Vec<proto::MirrorMsg>>,
    /// Their inputs changed (`Mirror`, a binding with mirror rules, the local ports, a resync,
    /// a datapath hello).
    mirrors_due: bool,
    /// What was left out of them, as last logged.
    mirrors_bad: Vec<String>,
    /// The snooping switches last sent to the datapath, without seeds ([`mcast`]; `None`:
    /// none since its hello).
    mcast_sent: Option<Vec<hf_datapath::snoop::McastCfgMsg>>,
    /// Their inputs changed (`IP_Multicast`, a binding, a resync, a datapath hello).
    mcast_due: bool,
    /// An older datapath was told about once.
    mcast_warned: bool,
    /// The periodic router advertisements last sent to the datapath ([`ra`]).
    ras_sent: Option<Vec<hf_datapath::ra::PeriodicRaMsg>>,
    /// Their inputs changed.
    ras_due: bool,
    /// What could not be composed, as last logged.
    ras_bad: Vec<String>,
    /// An older datapath was told about once.
    ras_warned: bool,
    /// The next-hop BFD sessions last sent to the datapath ([`hop_bfd`]; `None`: not yet on
    /// this connection).
    hop_bfd_sent: Option<Vec<hf_datapath::hop_bfd::HopBfdMsg>>,
    /// Their inputs (SB `BFD`, bindings, the live gateways) changed since they were last
    /// looked at.
    hop_bfd_due: bool,
    /// Sessions that could not be composed, as last logged.
    hop_bfd_bad: Vec<String>,
    /// Sessions an older datapath does not run, already warned about.
    hop_bfd_warned: BTreeSet<(String, std::net::IpAddr)>,
    /// ACL log lines from the datapath, for the shell to write (`acl_log` module).
    acl_logs: VecDeque<String>,
    dp_ports: BTreeMap<String, LocalPort>,
    zones: BTreeMap<String, u16>,
    running: Option<ProgramMsg>,
    /// The program `running` replaced at the last `Installed`, dropped at the end of the step
    /// (after the write round that reports its successor's `nb_cfg` is sent): freeing the
    /// replaced datapaths' flows is not on the way to the report.
    retired: Option<ProgramMsg>,
    /// Whether the datapath runs `running` exactly (so a delta against it applies): false
    /// after it held a datapath at earlier flows or refused a delta's base, until a whole
    /// program is installed.
    delta_ok: bool,
    inflight: BTreeMap<u64, ProgramMsg>,
    /// The last program message built, before the edits a push makes (kept sets, feature
    /// level): what the next build reuses untouched datapaths from. Its datapaths are shared
    /// with `running` and `inflight`. `None`: the next build is whole (no build yet, or a
    /// translation since was not built, so `touched` no longer says what differs from it).
    last_build: Option<ProgramMsg>,
    generation: u64,
    translate_due: bool,
    gone_since: BTreeMap<String, Duration>,
    /// The datapath each `lsp/<port>` zone's port was last seen on.
    zone_dp: BTreeMap<String, String>,
    flushing: BTreeSet<String>,
    empty_since: Option<Duration>,
    /// Neighbours of a rebuilt SB's datapaths, written again ([`neigh::Restore`]).
    neigh_restore: neigh::Restore,
    lastgood: LastGood,
    /// Sets kept for last good versions (logged when they change).
    kept_sets: Vec<String>,
    installed_nb_cfg: Option<i64>,
    /// Bumped whenever the installed ports ([`Controller::installed_ports`]) are set anew.
    pub(super) installed_version: u64,
    /// The last translation and what it was made of; fed every change set since.
    translate_cache: Incremental,
    /// What may differ between the running program and the latest translation's (the union
    /// of the translations' [`crate::Touched`] since the one `running` was built from), the
    /// hint for [`proto::between`] and for the unchanged check. `None`: unknown (after a
    /// hello, a refused or rejected push, a push with flow errors): compare everything.
    touched_since_running: Option<crate::Touched>,
    /// The last translation's diagnostics, in its order (those not in the previous list are
    /// logged).
    diagnostics: Vec<String>,
    /// Why the last translation was not pushed: objects without a zone.
    zone_error: Option<String>,
    log: VecDeque<(Level, String)>,
    now: Duration,
    stats: Stats,
    /// Stage stopwatches ([`STAGES`]) and what they measure from.
    sw: Stopwatches,
    stage_clock: Option<hf_datapath::stopwatch::Clock>,
    /// When the first change set the translation has not seen yet came.
    change_at: Option<Duration>,
    /// Why the change at `change_at` is waiting (a `wait-*` stage), first reason seen.
    wait_reason: Option<&'static str>,
    /// The CPU the replica spent on the last SB input (decoding and applying it): recorded as
    /// `sb-apply` when that input brought the change at `change_at`.
    sb_apply: Duration,
    /// Per pushed generation: when it was sent, and the change it carries.
    sent_at: BTreeMap<u64, (Duration, Option<Duration>)>,
    /// An `nb_cfg` to report: since when (installed or found unchanged), its change, its value.
    nb_cfg_since: Option<(Duration, Option<Duration>, i64)>,
    /// The write in flight: when it was sent, whether it claims, and the `nb_cfg` report it
    /// carries (its change).
    txn_t: Option<(Duration, bool, Option<Option<Duration>>)>,
}

/// The controller's stopwatches (`stopwatch/show`), for one change on its way from SB to the
/// chassis's `nb_cfg`: from the change set's arrival to the translation's start (a wait), the
/// CPU of the input that brought it (`sb-apply`: the replica decoding and applying the update;
/// `sb-change-note`: the change set handed to the translation cache; `conditions`: monitor
/// conditions recomputed; `write-round`: the claim and status write built and sent), and
/// the part of it spent on each reason (`wait-*`: the datapath's hello, a program in flight, a
/// claim that moves a port, conditions changing); the translation; its review (diagnostics,
/// zones the translation no longer has, zones exhausted); building and sending the
/// message (CPU; with the shell's clock), and of it assembling the message (reusing untouched
/// datapaths) and the bookkeeping before the comparison with what runs (last build copy, kept
/// sets, port notes); from sending it to the datapath's `Installed`; handling `Installed` (the
/// last good store, CPU); from there to the
/// `nb_cfg` write being sent (a wait: another write in flight) and to its commit; a write that
/// claims or releases a port to its commit; and the whole way.
pub const STAGES: &[&str] = &[
    "sb-change-to-translate",
    "sb-apply",
    "sb-change-note",
    "conditions",
    "write-round",
    "wait-datapath",
    "wait-program-in-flight",
    "wait-claim",
    "wait-conditions",
    "wait-neighbours",
    "translate",
    "translation-review",
    "message-assemble",
    "message-bookkeeping",
    "message-build",
    "datapath-install",
    "installed-bookkeeping",
    "nb-cfg-write-wait",
    "nb-cfg-commit",
    "claim-commit",
    "change-to-nb-cfg",
];

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("chassis", &self.cfg.chassis)
            .field("generation", &self.generation)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Controller {
    /// A core with default [`Tuning`].
    pub fn new(cfg: ControllerConfig, now: Duration) -> Controller {
        Self::with_tuning(cfg, Tuning::default(), now)
    }

    /// A core with explicit [`Tuning`].
    pub fn with_tuning(cfg: ControllerConfig, tuning: Tuning, now: Duration) -> Controller {
        let id = Identity {
            name: cfg.chassis.clone(),
            hostname: cfg.hostname.clone(),
            encap_type: cfg.encap_type.clone(),
            encap_ip: cfg.encap_ip.clone(),
            monitor_all: cfg.monitor_all,
            features: hf_expr::FeatureSet::level(tuning.feature_level).to_list(),
        };
        let conds = monitor::conditions(
            &SbSnapshot::default(),
            &cfg.chassis,
            &BTreeSet::new(),
            cfg.monitor_all,
        );
        let tables = <SbSnapshot as Model>::table_names()
            .into_iter()
            .map(|t| TableSelect {
                name: t.to_string(),
                columns: None,
                condition: conds.get(t).cloned().flatten(),
            })
            .collect();
        let sb = Replica::new(
            ReplicaConfig {
                remotes: tuning.remotes.max(1),
                tables,
                leader_only: tuning.leader_only,
                shuffle_seed: tuning.shuffle_remotes.then(|| name_seed(&cfg.chassis)),
                probe_interval_ms: tuning.probe_interval_ms,
                ..ReplicaConfig::default()
            },
            ms(now),
        );
        let shared = Arc::new(Mutex::new(WriteState {
            id,
            dp_ready: false,
            local: BTreeSet::new(),
            up: BTreeSet::new(),
            neigh: BTreeMap::new(),
            fdb: BTreeMap::new(),
            vports: BTreeMap::new(),
            svc: BTreeMap::new(),
            hop_bfd: BTreeMap::new(),
            igmp: BTreeMap::new(),
            activated: BTreeSet::new(),
            nb_cfg: None,
            wall_ms: tuning.wall_offset_ms + now.as_millis() as i64,
            flow_report: BTreeMap::new(),
            zone_error: None,
            cands: None,
            ha_up: None,
        }));
        let mut c = Controller {
            cfg,
            tuning,
            sb,
            sb_dialing: None,
            shared,
            txn: None,
            txn_claims: false,
            write_due: true,
            write_retry_at: None,
            last_write_error: None,
            conds,
            conds_settled: false,
            conds_due: true,
            dps_stale: true,
            monitored: BTreeSet::new(),
            watched_orphans: BTreeSet::new(),
            orphans_dirty: true,
            bind_cands: None,
            claim_dirty: None,
            claim_prev: None,
            dp_connected: false,
            dp_dec: Decoder::new(),
            dp_out: VecDeque::new(),
            dp_hello: false,
            dp_version: 0,
            hello_version: PROTOCOL_VERSION,
            svc_sent: None,
            svc_bad: Vec::new(),
            svc_due: true,
            bfd_sent: None,
            bfd_due: true,
            ha_up: None,
            mirrors_sent: None,
            mirrors_due: true,
            mirrors_bad: Vec::new(),
            mcast_sent: None,
            mcast_due: true,
            mcast_warned: false,
            ras_sent: None,
            ras_due: true,
            ras_bad: Vec::new(),
            ras_warned: false,
            hop_bfd_sent: None,
            hop_bfd_due: true,
            hop_bfd_bad: Vec::new(),
            hop_bfd_warned: BTreeSet::new(),
            meters_sent: None,
            meters_due: true,
            acl_logs: VecDeque::new(),
            dp_ports: BTreeMap::new(),
            zones: BTreeMap::new(),
            running: None,
            retired: None,
            delta_ok: true,
            inflight: BTreeMap::new(),
            last_build: None,
            generation: 0,
            translate_due: true,
            gone_since: BTreeMap::new(),
            zone_dp: BTreeMap::new(),
            flushing: BTreeSet::new(),
            empty_since: None,
            neigh_restore: neigh::Restore::default(),
            lastgood: LastGood::default(),
            kept_sets: Vec::new(),
            installed_nb_cfg: None,
            installed_version: 0,
            translate_cache: Incremental::default(),
            touched_since_running: None,
            diagnostics: Vec::new(),
            zone_error: None,
            log: VecDeque::new(),
            now,
            stats: Stats::default(),
            sw: Stopwatches::new(STAGES),
            stage_clock: None,
            change_at: None,
            wait_reason: None,
            sb_apply: Duration::ZERO,
            sent_at: BTreeMap::new(),
            nb_cfg_since: None,
            txn_t: None,
        };
        c.translate_cache
            .set_parallelism(c.tuning.translate_threads);
        // The datapath parses the flows' text; the controller never reads a parse tree.
        c.translate_cache
            .set_flow_form(crate::translate::flows::FlowForm::Text);
        c.say(
            Level::Info,
            format!(
                "holdfast controller for chassis {} ({} {}), {} monitoring, feature level {}",
                c.cfg.chassis,
                c.cfg.encap_type,
                c.cfg.encap_ip,
                if c.cfg.monitor_all {
                    "full"
                } else {
                    "conditional"
                },
                c.tuning.feature_level
            ),
        );
        c
    }

    // ---- SB ----

    /// The SB remote to dial now.
    pub fn poll_sb_connect(&mut self) -> Option<usize> {
        let r = self.sb.poll_connect();
        if r.is_some() {
            self.sb_dialing = r;
        }
        r
    }

    /// The SB connection is to be closed (the core already forgot it).
    pub fn poll_sb_close(&mut self) -> Option<String> {
        self.sb.poll_close()
    }

    /// The dial of [`Controller::poll_sb_connect`] succeeded.
    pub fn handle_sb_connected(&mut self, now: Duration) {
        let r = self.sb_dialing.take().unwrap_or(0);
        self.sb.handle_connected(r, ms(now));
        self.step(now);
    }

    /// Bytes from SB.
    pub fn handle_sb_bytes(&mut self, data: &[u8], now: Duration) {
        let t = self.tick();
        self.sb.handle_bytes(data, ms(now));
        self.sb_apply = self.tick().saturating_sub(t);
        self.step(now);
        self.sb_apply = Duration::ZERO;
    }

    /// The SB connection ended or could not be made.
    pub fn handle_sb_disconnected(&mut self, now: Duration) {
        self.sb_dialing = None;
        self.sb.handle_disconnected(ms(now));
        self.step(now);
    }

    /// Bytes to write to SB.
    pub fn poll_sb_transmit(&mut self) -> Option<Vec<u8>> {
        self.sb.poll_transmit()
    }

    // ---- the datapath ----

    /// The control connection to the datapath is up: the hello goes out.
    pub fn handle_dp_connected(&mut self, now: Duration) {
        self.dp_connected = true;
        self.dp_hello = false;
        self.dp_dec = Decoder::new();
        self.dp_out.clear();
        self.inflight.clear();
        self.send_dp(&ToDatapath::Hello {
            version: self.hello_version,
            chassis: self.cfg.chassis.clone(),
        });
        self.step(now);
    }

    /// Bytes from the datapath.
    pub fn handle_dp_bytes(&mut self, data: &[u8], now: Duration) {
        if !self.dp_connected {
            return;
        }
        self.now = now;
        self.dp_dec.push(data);
        loop {
            match self.dp_dec.next_msg() {
                Ok(Some(m)) => self.dp_message(m, now),
                Ok(None) => break,
                Err(e) => {
                    self.say(
                        Level::Err,
                        format!("datapath connection: {e}; waiting for a reconnect"),
                    );
                    self.dp_lost();
                    break;
                }
            }
        }
        self.step(now);
    }

    /// The control connection ended. The datapath keeps forwarding with what it runs.
    pub fn handle_dp_disconnected(&mut self, now: Duration) {
        if self.dp_hello {
            self.hello_version = PROTOCOL_VERSION;
        }
        if self.dp_connected {
            self.say(
                Level::Warn,
                "datapath disconnected; it keeps forwarding with its last program".into(),
            );
        }
        self.dp_lost();
        self.step(now);
    }

    /// Bytes to write to the datapath.
    pub fn poll_dp_transmit(&mut self) -> Option<Vec<u8>> {
        self.dp_out.pop_front()
    }

    /// Whether the datapath connection is up and its hello came.
    pub fn dp_ready(&self) -> bool {
        self.dp_connected && self.dp_hello
    }

    /// Sends a request to the datapath (counters, conntrack dumps: the answers are logged).
    pub fn request_dp(&mut self, msg: ToDatapath) -> bool {
        if !self.dp_ready() {
            return false;
        }
        self.send_dp(&msg);
        true
    }

    // ---- time ----

    /// When [`Controller::handle_timeout`] wants to be called.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let mut t = self.sb.poll_timeout().map(Duration::from_millis);
        let mut at = |x: Duration| t = Some(t.map_or(x, |t| t.min(x)));
        if let Some(r) = self.write_retry_at {
            at(r);
        }
        for since in self.gone_since.values() {
            at(*since + self.tuning.flush_grace);
        }
        if let Some(e) = self.empty_since {
            at(e + self.tuning.flush_grace);
        }
        if let Some(d) = self.neigh_restore.deadline() {
            at(d);
        }
        t
    }

    /// Time has passed.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.sb.handle_timeout(ms(now));
        if self.write_retry_at.is_some_and(|r| now >= r) {
            self.write_retry_at = None;
            self.write_due = true;
        }
        let grace = self.tuning.flush_grace;
        if self.gone_since.values().any(|s| now >= *s + grace)
            || self.empty_since.is_some_and(|s| now >= s + grace)
            || self.neigh_restore.deadline().is_some_and(|d| now >= d)
        {
            self.translate_due = true;
        }
        self.step(now);
    }

    // ---- introspection ----

    /// The next log line.
    pub fn poll_log(&mut self) -> Option<(Level, String)> {
        self.log.pop_front()
    }

    /// The next ACL log line from the datapath: the text ovn-controller's `acl_log` module
    /// writes at INFO (the shell logs it under that module).
    pub fn poll_acl_log(&mut self) -> Option<String> {
        self.acl_logs.pop_front()
    }

    /// The SB replica (its model is the controller's view).
    pub fn sb(&self) -> &Replica<SbSnapshot> {
        &self.sb
    }

    /// The zone map as the datapath holds it (name → zone).
    pub fn zones(&self) -> &BTreeMap<String, u16> {
        &self.zones
    }

    /// The program the datapath runs (its hello's, or the last one it installed).
    pub fn running_program(&self) -> Option<&ProgramMsg> {
        self.running.as_ref()
    }

    /// The last generation pushed (or taken over from the datapath).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The datapath's local ports.
    pub fn local_ports(&self) -> impl Iterator<Item = &str> {
        self.dp_ports.keys().map(String::as_str)
    }

    /// The logical ports whose flows the datapath runs here (what SB `Port_Binding.up` and the
    /// local database's `ovn-installed` say).
    pub fn installed_ports(&self) -> BTreeSet<String> {
        self.with_state(|st| st.up.clone())
    }

    /// Changes whenever [`Controller::installed_ports`] may have: a shell that mirrors the set
    /// copies it only then.
    pub fn installed_ports_version(&self) -> u64 {
        self.installed_version
    }

    /// The `nb_cfg` the datapath runs a program for.
    pub fn installed_nb_cfg(&self) -> Option<i64> {
        self.installed_nb_cfg
    }

    /// Last good versions and flow errors.
    pub fn flow_errors(&self) -> &LastGood {
        &self.lastgood
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The stage stopwatches ([`STAGES`]).
    pub fn stopwatch(&self) -> &Stopwatches {
        &self.sw
    }

    /// The stage stopwatches, to reset them.
    pub fn stopwatch_mut(&mut self) -> &mut Stopwatches {
        &mut self.sw
    }

    /// Installs the clock the CPU stages (`translate`, `message-build`) are timed with (the
    /// shell's monotonic clock, on the same origin as `now`). Without one they read the
    /// event's `now`, so they show 0 (the simulator).
    pub fn set_stage_clock(&mut self, clock: hf_datapath::stopwatch::Clock) {
        self.stage_clock = Some(clock);
    }

    /// The stage clock's time (or the event's `now`).
    pub(super) fn tick(&self) -> Duration {
        self.stage_clock.map_or(self.now, |c| c())
    }

    /// Whether SB is connected and in sync.
    pub fn sb_synced(&self) -> bool {
        self.sb.is_synced()
    }

    /// Translate (and push if anything changed) at the next chance: everything afresh, as
    /// ovn-controller's `recompute` does.
    pub fn recompute(&mut self, now: Duration) {
        self.translate_cache.everything();
        self.translate_due = true;
        self.write_due = true;
        self.step(now);
    }

    /// `debug/status`'s text.
    pub fn status(&self) -> String {
        let sb = self.sb.model();
        let registered = chassis::our_chassis(sb, &self.cfg.chassis).is_some();
        let mut s = format!(
            "Chassis: {} ({})\n",
            self.cfg.chassis,
            if registered {
                "registered"
            } else {
                "not registered"
            }
        );
        s.push_str(&format!(
            "SB: {}{}\n",
            if self.sb.is_synced() {
                "connected, in sync"
            } else {
                "not connected"
            },
            if self.cfg.monitor_all {
                ", monitoring all rows"
            } else if self.conds_settled && !self.sb.conditions_pending() {
                ", conditional monitoring settled"
            } else {
                ", conditional monitoring changing"
            }
        ));
        s.push_str(&format!(
            "Datapath: {}, {} local port(s)\n",
            if self.dp_ready() {
                "connected"
            } else if self.dp_connected {
                "connected, waiting for its hello"
            } else {
                "not connected"
            },
            self.dp_ports.len()
        ));
        match &self.running {
            Some(p) => s.push_str(&format!(
                "Program: generation {} (nb_cfg {}), {} datapath(s), {} flow(s){}\n",
                p.generation,
                p.nb_cfg,
                p.datapaths.len(),
                p.datapaths.iter().map(|d| d.flows.len()).sum::<usize>(),
                if self.inflight.is_empty() {
                    ""
                } else {
                    "; a newer one is being installed"
                }
            )),
            None => s.push_str("Program: none\n"),
        }
        s.push_str(&format!(
            "Reported nb_cfg: {}\n",
            self.installed_nb_cfg
                .map_or_else(|| "none".to_string(), |n| n.to_string())
        ));
        s.push_str(&format!("Zones: {}\n", self.zones.len()));
        s.push_str(&format!(
            "Feature level: {}{}\n",
            self.tuning.feature_level,
            if self.tuning.keep_last_good {
                ""
            } else {
                " (last good versions disabled: test hook)"
            }
        ));
        if let Some(e) = &self.zone_error {
            s.push_str(&format!("Zone error: {e}\n"));
        }
        let causes = self.lastgood.causes();
        s.push_str(&format!(
            "Flow errors: {} flow(s), {} cause(s); {} on their last good version, {} failed closed\n",
            self.lastgood.error_count(),
            causes.len(),
            self.lastgood.kept_count(),
            self.lastgood.failed_closed_count()
        ));
        for (c, (n, first)) in &causes {
            s.push_str(&format!(
                "  {c}: {n} flow(s) (first: flow {} on datapath {}); {}\n",
                first.id,
                first.datapath,
                self.lastgood.instead_summary(c)
            ));
        }
        let held = self.lastgood.held_datapaths();
        if !held.is_empty() {
            s.push_str(&format!(
                "Datapaths held at their last good flows: {}\n",
                held.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        let amb = self.lastgood.ambiguous();
        if !amb.is_empty() {
            s.push_str(&format!(
                "Flows without a distinct identity (no last good version kept): {}\n",
                amb.len()
            ));
        }
        if !self.diagnostics.is_empty() {
            s.push_str(&format!("Diagnostics ({}):\n", self.diagnostics.len()));
            for d in self.diagnostics.iter().take(20) {
                s.push_str(&format!("  {d}\n"));
            }
        }
        s
    }

    // ---- internals ----

    fn say(&mut self, l: Level, s: String) {
        self.log.push_back((l, s));
    }

    /// Warns each of `now` not in `before` (what was left out of a list sent to the datapath,
    /// as last logged); returns `now` to keep.
    pub(super) fn warn_new(&mut self, before: &[String], now: Vec<String>) -> Vec<String> {
        for b in now.iter().filter(|b| !before.contains(b)) {
            self.log.push_back((Level::Warn, b.clone()));
        }
        now
    }

    fn send_dp(&mut self, m: &ToDatapath) {
        match proto::encode(m) {
            Ok(b) => self.dp_out.push_back(b),
            Err(e) => self.say(Level::Err, format!("cannot encode a datapath message: {e}")),
        }
    }

    fn dp_lost(&mut self) {
        self.dp_connected = false;
        self.dp_hello = false;
        self.svc_sent = None;
        self.hop_bfd_sent = None;
        self.dp_out.clear();
        self.inflight.clear();
        self.flushing.clear();
        self.with_state(|st| st.dp_ready = false);
    }

    fn with_state<R>(&self, f: impl FnOnce(&mut WriteState) -> R) -> R {
        let mut g = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    fn local_set(&self) -> BTreeSet<String> {
        self.dp_ports.keys().cloned().collect()
    }

    fn dp_message(&mut self, m: FromDatapath, now: Duration) {
        match m {
            FromDatapath::Hello {
                version,
                chassis,
                ports,
                zones,
                program,
            } => {
                if !proto::speaks(version) {
                    self.say(
                        Level::Err,
                        format!(
                            "datapath speaks control protocol version {version}, this controller {}..={PROTOCOL_VERSION}: not using it",
                            proto::MIN_PROTOCOL_VERSION
                        ),
                    );
                    self.dp_lost();
                    return;
                }
                if chassis != self.cfg.chassis {
                    self.say(
                        Level::Warn,
                        format!(
                            "datapath is named {chassis}, this controller's chassis is {}",
                            self.cfg.chassis
                        ),
                    );
                }
                self.dp_hello = true;
                self.dp_version = version;
                self.svc_sent = None;
                self.meters_sent = None;
                self.meters_due = true;
                self.mirrors_sent = None;
                self.mirrors_due = true;
                self.mcast_sent = None;
                self.mcast_due = true;
                self.ras_sent = None;
                self.ras_due = true;
                self.bfd_sent = None;
                self.bfd_due = true;
                self.hop_bfd_sent = None;
                self.hop_bfd_due = true;
                self.touched_since_running = None;
                self.last_build = None;
                // The hello's program is what the datapath keeps: a delta against it applies
                // (the datapath answers BaseMismatch if it holds a datapath at other flows).
                self.delta_ok = true;
                self.dp_ports = ports.into_iter().map(|p| (p.name.clone(), p)).collect();
                self.zones = zones;
                self.orphans_dirty = true;
                if let Some(p) = program {
                    self.note_ports(p.datapaths.iter().map(|d| &**d));
                    self.generation = self.generation.max(p.generation);
                    self.lastgood.seed(&p);
                    self.running = Some(*p);
                } else {
                    self.running = None;
                }
                self.say(
                    Level::Info,
                    format!(
                        "datapath connected: {} local port(s), {} zone(s), {}",
                        self.dp_ports.len(),
                        self.zones.len(),
                        self.running.as_ref().map_or_else(
                            || "no program".to_string(),
                            |p| format!("running generation {}", p.generation)
                        )
                    ),
                );
                let local = self.local_set();
                let up = self
                    .running
                    .as_ref()
                    .map(installed_local)
                    .unwrap_or_default();
                self.with_state(|st| {
                    st.dp_ready = true;
                    st.activated.retain(|p| local.contains(p));
                    st.local = local;
                    st.up = up;
                });
                self.installed_version += 1;
                self.conds_due = true;
                self.dps_stale = true;
                self.translate_due = true;
                self.write_due = true;
            }
            FromDatapath::Installed {
                generation,
                flow_errors,
            } => self.on_installed(generation, flow_errors),
            FromDatapath::BaseMismatch {
                generation,
                base,
                running,
                reason,
            } => self.on_base_mismatch(generation, base, running, reason),
            FromDatapath::Rejected { generation, reason } => self.on_rejected(generation, reason),
            FromDatapath::PortAdded(p) => {
                self.say(Level::Info, format!("local port {} added", p.name));
                self.dp_ports.insert(p.name.clone(), p);
                self.local_changed();
            }
            FromDatapath::PortRemoved { name } => {
                self.say(Level::Info, format!("local port {name} removed"));
                self.dp_ports.remove(&name);
                self.local_changed();
            }
            FromDatapath::Learned(v) => {
                let sb = self.sb.model();
                let mut dropped = Vec::new();
                let mut add = Vec::new();
                for n in v {
                    match neigh::datapath_by_name(sb, &n.datapath) {
                        Some(d) if self.cfg.monitor_all || self.monitored.contains(&d) => {
                            add.push((
                                (n.datapath.clone(), n.port.clone(), n.ip.clone()),
                                neigh::mac_text(&n.mac),
                            ));
                        }
                        _ => dropped.push(format!("{} {} on {}", n.ip, n.port, n.datapath)),
                    }
                }
                if !dropped.is_empty() {
                    self.say(
                        Level::Warn,
                        format!(
                            "learned neighbour(s) on datapaths this chassis does not monitor, not written to MAC_Binding: {}",
                            dropped.join(", ")
                        ),
                    );
                }
                if !add.is_empty() {
                    self.with_state(|st| st.neigh.extend(add));
                    self.write_due = true;
                }
            }
            FromDatapath::LearnedFdb(v) => {
                let add: Vec<_> = v
                    .into_iter()
                    .map(|f| ((f.datapath, neigh::mac_text(&f.mac)), f.port))
                    .collect();
                if !add.is_empty() {
                    self.with_state(|st| st.fdb.extend(add));
                    self.write_due = true;
                }
            }
            FromDatapath::BfdStatus(v) => self.bfd_status(v),
            FromDatapath::HopBfdStatus(v) => self.hop_bfd_status(v),
            FromDatapath::McastGroups(v) => self.mcast_groups(v),
            FromDatapath::SvcStatus(v) => {
                for s in &v {
                    self.say(
                        Level::Info,
                        format!(
                            "service monitor {} {}:{} ({}) is {}",
                            s.logical_port, s.ip, s.port, s.protocol, s.status
                        ),
                    );
                }
                self.with_state(|st| {
                    for s in v {
                        st.svc
                            .insert((s.logical_port, s.ip, s.port, s.protocol), s.status);
                    }
                });
                self.write_due = true;
            }
            FromDatapath::VportBound {
                datapath,
                vport,
                parent,
            } => {
                self.say(
                    Level::Info,
                    format!(
                        "virtual port {vport} bound here through {parent} (datapath {datapath})"
                    ),
                );
                self.with_state(|st| st.vports.insert(vport, parent));
                self.write_due = true;
            }
            FromDatapath::PortActivated { port } => {
                self.say(
                    Level::Info,
                    format!(
                        "port {port} activated on this chassis; recording it in SB \
                         (Port_Binding options:additional-chassis-activated)"
                    ),
                );
                self.with_state(|st| st.activated.insert(port));
                self.write_due = true;
            }
            FromDatapath::Flushed { names, entries } => {
                self.orphans_dirty = true;
                for n in &names {
                    self.zones.remove(n);
                    self.zone_dp.remove(n);
                    self.flushing.remove(n);
                    self.gone_since.remove(n);
                }
                self.stats.zones_flushed += names.len() as u64;
                self.conds_due = true;
                self.dps_stale = true;
                self.say(
                    Level::Info,
                    format!(
                        "flushed conntrack zone(s) {} ({entries} entries)",
                        names.join(", ")
                    ),
                );
                self.translate_due = true;
            }
            FromDatapath::Conntrack(lines) => {
                self.say(
                    Level::Info,
                    format!("conntrack ({} entries):\n{}", lines.len(), lines.join("\n")),
                );
            }
            FromDatapath::Counters(c) => {
                self.say(Level::Info, format!("datapath counters: {c:?}"));
            }
            FromDatapath::Exported(_) => {
                self.say(Level::Info, "datapath exported its state".into());
            }
            FromDatapath::Pong { .. } => {}
            FromDatapath::AclLog(lines) => {
                for l in lines {
                    if self.acl_logs.len() < meters::MAX_ACL_LOGS {
                        self.acl_logs.push_back(l);
                    }
                }
            }
            FromDatapath::Error { message } => {
                self.say(Level::Warn, format!("datapath: {message}"));
                // Refused before its hello: an older datapath; the next session says an older
                // version (every message this controller sends below it encodes the same).
                if !self.dp_hello
                    && message.contains("protocol version")
                    && self.hello_version > proto::MIN_PROTOCOL_VERSION
                {
                    self.hello_version -= 1;
                    self.say(
                        Level::Info,
                        format!(
                            "the datapath refused control protocol version {}; the next session says {}",
                            self.hello_version + 1,
                            self.hello_version
                        ),
                    );
                }
            }
            // Only a takeover (datapath to datapath) carries sockets; a controller never asks.
            FromDatapath::HandOver { .. } | FromDatapath::ExportedSessions(_) => {
                self.say(
                    Level::Warn,
                    "datapath: an unrequested takeover message (HandOver or ExportedSessions): ignored".into(),
                );
            }
        }
        let _ = now;
    }

    /// Remembers which datapath each port of `p` is on (for [`Controller::gone`]).
    pub(super) fn note_ports<'a>(&mut self, datapaths: impl Iterator<Item = &'a DatapathMsg>) {
        for d in datapaths {
            for port in d.ports.iter() {
                let fresh = self
                    .zone_dp
                    .insert(
                        crate::translate::zones::port_zone_name(&port.name),
                        d.name.clone(),
                    )
                    .is_none();
                // A zone that was an orphan has a datapath now.
                self.orphans_dirty |= fresh && self.watched_orphans.contains(&port.name);
            }
        }
    }

    fn local_changed(&mut self) {
        self.svc_due = true;
        self.mirrors_due = true;
        self.mcast_due = true;
        self.ras_due = true;
        let local = self.local_set();
        self.with_state(|st| {
            // A port that left this chassis is activated again only by a new announcement.
            st.activated.retain(|p| local.contains(p));
            st.local = local;
        });
        self.write_due = true;
        self.conds_due = true;
        self.dps_stale = true;
        self.translate_due = true;
    }

    /// Everything that follows an input.
    fn step(&mut self, now: Duration) {
        self.now = now;
        let wall = self.tuning.wall_offset_ms + now.as_millis() as i64;
        self.with_state(|st| st.wall_ms = wall);
        // The parts of `sb-change-to-translate` (CPU, with the stage clock), recorded for the
        // input that brings a change the translation has not seen.
        let had = self.change_at.is_some();
        let t0 = self.tick();
        while let Some(ev) = self.sb.poll_event() {
            self.sb_event(ev, now);
        }
        let fresh = !had && self.change_at.is_some();
        let t1 = self.tick();
        if fresh {
            self.sw.record("sb-apply", self.sb_apply);
            self.sw.record("sb-change-note", t1.saturating_sub(t0));
        }
        if self.sb.is_synced() {
            self.update_conditions();
            let t2 = self.tick();
            self.write_round(now);
            let t3 = self.tick();
            if fresh {
                self.sw.record("conditions", t2.saturating_sub(t1));
                self.sw.record("write-round", t3.saturating_sub(t2));
            }
            self.maybe_push(now);
            self.svc_round();
            self.sync_meters();
            self.sync_mirrors();
            self.sync_mcast();
            self.sync_ras();
            self.sync_bfd();
            self.sync_hop_bfd();
        }
        self.retired = None;
    }

    /// Sends the datapath the monitors of the local ports when they changed (version-6
    /// datapaths only; see [`super::svc`]).
    fn svc_round(&mut self) {
        if !self.dp_hello || self.dp_version < proto::SVC_VERSION {
            return;
        }
        if !std::mem::take(&mut self.svc_due) && self.svc_sent.is_some() {
            return;
        }
        let sb = self.sb.model();
        if sb.service_monitor().is_empty() && self.svc_sent.as_ref().is_some_and(Vec::is_empty) {
            return;
        }
        let (list, bad) = super::svc::local_monitors(sb, &self.local_set());
        if bad != self.svc_bad {
            let before = std::mem::take(&mut self.svc_bad);
            self.svc_bad = self.warn_new(&before, bad);
        }
        if self.svc_sent.as_ref() != Some(&list) {
            self.send_dp(&ToDatapath::SvcMonitors(list.clone()));
            self.svc_sent = Some(list);
        }
    }

    fn sb_event(&mut self, ev: Event<SbSnapshot>, now: Duration) {
        match ev {
            Event::Connected { remote, method } => self.say(
                Level::Info,
                format!("SB: connected to remote {remote} ({})", method.name()),
            ),
            Event::Resynced {
                full,
                rows,
                initial,
            } => {
                // A sync that sent everything replaced the view (its change set, when there
                // is one, came before).
                if full || initial {
                    self.translate_cache.everything();
                }
                self.bind_cands = None;
                self.claim_dirty = None;
                self.say(
                    Level::Debug,
                    format!("SB: in sync ({rows} rows, full={full})"),
                );
                self.conds_due = true;
                self.dps_stale = true;
                self.translate_due = true;
                self.write_due = true;
                self.svc_due = true;
                self.meters_due = true;
                self.mirrors_due = true;
                self.mcast_due = true;
                self.ras_due = true;
                self.hop_bfd_due = true;
                self.bfd_due = true;
            }
            Event::Changes(d) => {
                if meters::touches_meters(&d) {
                    self.meters_due = true;
                }
                if mirror::touches_mirrors(&d) {
                    self.mirrors_due = true;
                }
                let local_pb = d.port_binding.iter().any(|r| {
                    let (hf_model::RowDelta::Insert(p)
                    | hf_model::RowDelta::Delete(p)
                    | hf_model::RowDelta::Update { new: p, .. }) = r;
                    self.dp_ports.contains_key(&p.logical_port)
                });
                if mcast::touches_mcast(&d, local_pb) {
                    self.mcast_due = true;
                }
                if ra::touches_ras(&d, local_pb) {
                    self.ras_due = true;
                }
                if !d.bfd.is_empty()
                    || (!self.sb.model().bfd().is_empty()
                        && (!d.port_binding.is_empty()
                            || !d.datapath_binding.is_empty()
                            || !d.chassis.is_empty()))
                {
                    self.hop_bfd_due = true;
                }
                if ha::touches_bfd(&d) {
                    self.bfd_due = true;
                }
                if !d.service_monitor.is_empty()
                    || !d.port_binding.is_empty()
                    || !d.mac_binding.is_empty()
                {
                    self.svc_due = true;
                }
                self.restore_neighbours(&d, now);
                self.note_candidates(&d);
                // Our own status writes (`Chassis_Private`, `Port_Binding.up`) change nothing
                // the translation or the conditions read; our claims of ports the translation
                // already placed here (see `claims_pending`) change nothing it outputs: the
                // translation sees them, but none is run for them.
                // The conditions are computed again only when the change can move them.
                let kind = change_kind(&d);
                if kind != ChangeKind::Status && !(self.conds_due && self.dps_stale) {
                    let local = self.local_set();
                    let moves = if self.cfg.monitor_all {
                        monitor::Move::Datapaths
                    } else {
                        monitor::may_move(
                            self.sb.model(),
                            &d,
                            &self.cfg.chassis,
                            &local,
                            &self.monitored,
                        )
                    };
                    match moves {
                        monitor::Move::Datapaths => {
                            self.conds_due = true;
                            self.dps_stale = true;
                        }
                        // The groups' clauses alone: over the datapaths as they are.
                        monitor::Move::Groups => self.conds_due = true,
                        monitor::Move::Nothing => {}
                    }
                }
                match kind {
                    ChangeKind::Status => {}
                    ChangeKind::Neutral => {
                        self.translate_cache.changed(&d);
                    }
                    ChangeKind::Translate => {
                        self.translate_cache.changed(&d);
                        self.translate_due = true;
                        self.change_at.get_or_insert(now);
                    }
                }
                self.write_due = true;
            }
            Event::Disconnected { remote, reason } => {
                self.say(Level::Warn, format!("SB: remote {remote}: {reason}"));
            }
            Event::TxnDone { id, outcome, .. } => {
                if self.txn == Some(id) {
                    self.txn = None;
                    if let Some((sent, claims, report)) = self.txn_t.take()
                        && !matches!(outcome, TxnOutcome::Failed(_))
                    {
                        if claims {
                            self.sw.record("claim-commit", now.saturating_sub(sent));
                        }
                        if let Some(change) = report {
                            self.sw.record("nb-cfg-commit", now.saturating_sub(sent));
                            if let Some(c) = change {
                                self.sw.record("change-to-nb-cfg", now.saturating_sub(c));
                            }
                        }
                    }
                }
                self.write_due = true;
                match outcome {
                    TxnOutcome::Failed(e) => {
                        // Logged once per distinct error while it repeats (retried each second).
                        let e = e.to_string();
                        if self.last_write_error.as_deref() != Some(e.as_str()) {
                            self.say(
                                Level::Warn,
                                format!("SB write failed: {e}; retrying every second"),
                            );
                            self.last_write_error = Some(e);
                        }
                        self.stats.sb_write_failures += 1;
                        self.write_retry_at = Some(now + Duration::from_secs(1));
                        // The retry looks at every candidate again.
                        self.claim_dirty = None;
                    }
                    _ => {
                        if self.last_write_error.take().is_some() {
                            self.say(Level::Info, "SB write succeeded again".into());
                        }
                    }
                }
            }
            Event::Warning(w) => self.say(Level::Warn, format!("SB: {w}")),
            _ => {}
        }
    }

    fn update_conditions(&mut self) {
        // The ports watched by name follow the zones the datapath holds, not SB.
        // (`orphans_dirty` is set by every change that can move them: checked in debug builds.)
        debug_assert!(
            self.orphans_dirty || self.orphan_ports() == self.watched_orphans,
            "orphan zones moved without orphans_dirty"
        );
        if !self.conds_due && self.orphans_dirty {
            self.orphans_dirty = false;
            let orphans = self.orphan_ports();
            if orphans != self.watched_orphans {
                self.conds_due = true;
                self.dps_stale = true;
            }
        }
        if !self.conds_due {
            return;
        }
        self.conds_due = false;
        let sb = self.sb.model();
        let local = self.local_set();
        let monitored = if self.cfg.monitor_all {
            sb.datapath_binding().keys().copied().collect()
        } else if self.dps_stale {
            monitor::local_datapaths(sb, &self.cfg.chassis, &local)
        } else {
            debug_assert_eq!(
                self.monitored,
                monitor::local_datapaths(sb, &self.cfg.chassis, &local),
                "the local datapaths moved without dps_stale"
            );
            std::mem::take(&mut self.monitored)
        };
        self.dps_stale = false;
        let mut want = monitor::conditions_over(
            sb,
            &self.cfg.chassis,
            &local,
            self.cfg.monitor_all,
            &monitored,
        );
        self.monitored = monitored;
        let orphans = self.orphan_ports();
        self.orphans_dirty = false;
        monitor::watch_ports(&mut want, &orphans);
        self.watched_orphans = orphans;
        let mut changed = Vec::new();
        for (t, c) in want {
            if self.conds.get(t) != Some(&c) {
                self.sb.set_condition(t, c.clone());
                self.conds.insert(t, c);
                changed.push(t);
            }
        }
        if !changed.is_empty() {
            self.say(
                Level::Debug,
                format!(
                    "SB monitor conditions changed: {} ({} datapath(s) monitored)",
                    changed.join(", "),
                    self.monitored.len()
                ),
            );
        }
        let changed = !changed.is_empty();
        self.conds_settled = !changed;
        // A change is checked once more (the rows it brings may change it again).
        self.conds_due = changed;
        self.dps_stale = changed;
    }

    /// Neighbours of rebuilt datapaths written again (see [`neigh::Restore`]).
    fn restore_neighbours(&mut self, d: &hf_model::SbDelta, now: Duration) {
        let (all, monitored) = (self.cfg.monitor_all, &self.monitored);
        let add = self
            .neigh_restore
            .note(self.sb.model(), d, now, self.tuning.flush_grace, |u| {
                all || monitored.contains(&u)
            });
        if add.is_empty() {
            return;
        }
        self.say(
            Level::Info,
            format!(
                "SB: {} neighbour(s) of rebuilt datapath(s) written to MAC_Binding again; programs wait for them",
                add.len()
            ),
        );
        self.with_state(|st| st.neigh.extend(add));
        self.write_due = true;
    }

    /// Whether a program must wait for neighbours being written again.
    fn neighbours_restoring(&mut self, now: Duration) -> bool {
        self.neigh_restore.waiting(self.sb.model(), now)
    }

    /// Whether the view is complete enough to translate from.
    fn view_complete(&self) -> bool {
        let sb = self.sb.model();
        self.sb.is_synced()
            && !self.sb.conditions_pending()
            && self.conds_settled
            && sb.sb_global_row().is_some()
            && chassis::our_chassis(sb, &self.cfg.chassis).is_some()
    }

    /// The ports whose `lsp/<port>` zones the datapath holds while no program this controller
    /// knows has them (a previous controller held them through their grace and was restarted):
    /// watched by name ([`monitor::watch_ports`]) so that [`Controller::gone`] can tell.
    fn orphan_ports(&self) -> BTreeSet<String> {
        self.zones
            .keys()
            .filter(|n| !self.zone_dp.contains_key(*n))
            .filter_map(|n| n.strip_prefix("lsp/"))
            .map(str::to_string)
            .collect()
    }

    /// Whether the logical object behind zone `name` is gone from SB (the view is complete).
    fn gone(&self, name: &str) -> bool {
        let sb = self.sb.model();
        if let Some(port) = name.strip_prefix("lsp/") {
            if sb.port_binding_all_by_logical_port(port).next().is_some() {
                return false;
            }
            return match self.zone_dp.get(name) {
                // An orphan: watched by name, so no row in a complete view means gone.
                None => true,
                Some(d) => match neigh::datapath_by_name(sb, d) {
                    None => true,
                    Some(u) => self.cfg.monitor_all || self.monitored.contains(&u),
                },
            };
        }
        let dp = name
            .strip_prefix("lr/")
            .or_else(|| name.strip_prefix("ls/"))
            .and_then(|r| r.rsplit_once('/'))
            .map(|(d, _)| d);
        match dp {
            Some(d) => neigh::datapath_by_name(sb, d).is_none(),
            None => false,
        }
    }
}

/// What a change set asks of the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChangeKind {
    /// Only `Chassis_Private` rows and `Port_Binding.up`: nothing.
    Status,
    /// Besides those, only claims the translation already assumed
    /// ([`binding::placement_neutral`]): the translation is told, but not run.
    Neutral,
    /// Anything else: a translation.
    Translate,
}

fn change_kind(d: &hf_model::sb::Delta) -> ChangeKind {
    let mut up_only = 0;
    let mut neutral = 0;
    for r in &d.port_binding {
        let hf_model::RowDelta::Update { old, new } = r else {
            continue;
        };
        // Only a row whose `up` or `chassis` changed is copied to compare the rest.
        if old.up == new.up && old.chassis == new.chassis {
            up_only += usize::from(old == new);
        } else if old.chassis == new.chassis {
            let mut o = old.clone();
            o.up = new.up;
            up_only += usize::from(o == *new);
        } else {
            neutral += usize::from(binding::placement_neutral(old, new));
        }
    }
    if d.len() == d.chassis_private.len() + up_only {
        ChangeKind::Status
    } else if d.len() == d.chassis_private.len() + up_only + neutral {
        ChangeKind::Neutral
    } else {
        ChangeKind::Translate
    }
}

/// The ports a program has as local.
fn installed_local(p: &ProgramMsg) -> BTreeSet<String> {
    p.datapaths
        .iter()
        .flat_map(|d| d.ports.iter())
        .filter_map(|p| match &p.location {
            LocationMsg::Local(n) => Some(n.clone()),
            _ => None,
        })
        .collect()
}
