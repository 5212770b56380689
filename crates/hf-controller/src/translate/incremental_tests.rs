//! [`Incremental`] against [`translate_with`] over seeded random changes of every table the
//! translation reads, and `touched` against a per-datapath comparison.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use hf_model::sb::{self, Delta};
use hf_model::{RowDelta, RowRef, SbSnapshot, Table};
use std::sync::Arc;
use uuid::Uuid;

use super::{Incremental, compare};
use crate::program_msg::{LastGoodLookup, NoLastGood, program_msg, program_msg_reusing};
use crate::translate::flows::{FlowForm, TEXT_FORM};
use crate::translate::{Extra, Rest, TranslateOptions, Translation, translate_with};
use hf_datapath::proto::ProgramMsg;

use crate::translate::test_rng::Rng;

fn u(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// Datapaths 1..=8: odd ones switches, 8 a router, the rest switches too.
const DPS: u128 = 8;
const PORTS: u128 = 40;
const CHASSIS: &[u128] = &[70, 72];
const MATCHES: &[&str] = &[
    "1",
    "ip4",
    "ip4.dst == ^vip",
    "inport == \"p1\"",
    "eth.dst == 00:00:00:00:00:01",
    "ip4 &&& x",
    "tcp.dst == 80",
];
const ACTIONS: &[&str] = &["next;", "drop;", "outport = \"p1\"; output;", "nxt;"];

fn dp_row(n: u128, key: i64) -> sb::DatapathBinding {
    let mut ids = BTreeMap::new();
    let kind = if n == DPS {
        "logical-router"
    } else {
        "logical-switch"
    };
    ids.insert(kind.to_string(), u(n + 50).to_string());
    ids.insert("name".to_string(), format!("dp{n}"));
    sb::DatapathBinding {
        uuid: u(n),
        external_ids: ids.into(),
        tunnel_key: key,
        ..Default::default()
    }
}

fn random_dp(r: &mut Rng) -> RowRef<sb::DatapathBinding> {
    RowRef::new(u(1 + r.below(DPS as usize) as u128))
}

fn random_chassis(r: &mut Rng) -> Option<RowRef<sb::Chassis>> {
    match r.below(4) {
        0 => None,
        1 => Some(RowRef::new(u(CHASSIS[1]))),
        _ => Some(RowRef::new(u(CHASSIS[0]))),
    }
}

/// A random port: VIFs (bound, requested, migrating), patch ports peering other ports,
/// localnet, localport, chassisredirect, l3gateway and an unsupported type.
fn random_port(r: &mut Rng, n: u128) -> sb::PortBinding {
    let mut pb = sb::PortBinding {
        uuid: u(1000 + n),
        datapath: random_dp(r),
        logical_port: format!("p{}", r.below(PORTS as usize + 5)),
        tunnel_key: [1 + r.below(12) as i64, 40000][usize::from(r.chance(30))],
        ..Default::default()
    };
    pb.mac
        .insert(format!("00:00:00:00:00:{:02x} 10.0.0.{}", n, n));
    match r.below(12) {
        0..=4 => {
            if r.chance(2) {
                pb.chassis = random_chassis(r);
            } else {
                pb.requested_chassis = random_chassis(r);
            }
            if r.chance(5) {
                pb.additional_chassis
                    .insert(RowRef::new(u(CHASSIS[r.below(2)])));
                if r.chance(2) {
                    pb.options
                        .insert("activation-strategy".into(), "rarp".into());
                }
            }
        }
        5..=7 => {
            pb.type_ = "patch".into();
            if !r.chance(6) {
                pb.options
                    .insert("peer".into(), format!("p{}", r.below(PORTS as usize + 5)));
            }
        }
        8 => {
            pb.type_ = "localnet".into();
            pb.options.insert("network_name".into(), "phys".into());
        }
        9 => {
            pb.type_ = "chassisredirect".into();
            pb.chassis = random_chassis(r);
            pb.options
                .insert("distributed-port".into(), format!("p{}", r.below(10)));
        }
        10 => {
            pb.type_ = "l3gateway".into();
            pb.options
                .insert("l3gateway-chassis".into(), r.pick(&["hv1", "hv2"]).into());
            pb.options
                .insert("peer".into(), format!("p{}", r.below(PORTS as usize)));
        }
        _ => pb.type_ = r.pick(&["localport", "vtep"]).into(),
    }
    if r.chance(8) {
        pb.nat_addresses
            .insert("00:00:00:00:01:01 172.16.0.1 is_chassis_resident(\"p1\")".into());
    }
    pb
}

fn random_group(r: &mut Rng, n: u128, s: &SbSnapshot) -> sb::MulticastGroup {
    let dp = random_dp(r);
    let mut ports: BTreeSet<RowRef<sb::PortBinding>> = s
        .port_binding_all_by_datapath(dp)
        .filter(|_| r.chance(2))
        .map(|p| RowRef::new(p.uuid))
        .collect();
    if r.chance(6) {
        ports.insert(RowRef::new(u(1000 + r.below(PORTS as usize) as u128)));
    }
    sb::MulticastGroup {
        uuid: u(3000 + n),
        datapath: dp,
        name: r.pick(&["_MC_flood", "_MC_unknown", "_MC_mrouter"]).into(),
        ports,
        tunnel_key: match r.below(10) {
            0 => 5,
            1 => 1 + r.below(12) as i64,
            _ => 32768 + r.below(3) as i64,
        },
    }
}

fn random_flow(r: &mut Rng, n: u128) -> sb::LogicalFlow {
    let mut ids = BTreeMap::new();
    ids.insert(
        "stage-name".to_string(),
        r.pick(&["ls_in_a", "ls_in_b"]).to_string(),
    );
    let group = r.chance(3);
    sb::LogicalFlow {
        uuid: u(n),
        logical_datapath: (!group).then(|| random_dp(r)),
        logical_dp_group: group.then(|| RowRef::new(u(100 + r.below(3) as u128))),
        match_: r.pick(MATCHES).into(),
        actions: r.pick(ACTIONS).into(),
        pipeline: if r.chance(2) {
            sb::LogicalFlowPipeline::Ingress
        } else {
            sb::LogicalFlowPipeline::Egress
        },
        table_id: if r.chance(10) { 300 } else { r.below(3) as i64 },
        priority: [0, 50, 100][r.below(3)],
        external_ids: ids.into(),
        ..Default::default()
    }
}

fn random_dp_group(r: &mut Rng, n: u128) -> sb::LogicalDpGroup {
    sb::LogicalDpGroup {
        uuid: u(n),
        datapaths: (1..=DPS)
            .filter(|_| r.chance(2))
            .map(|d| RowRef::new(u(d)))
            .collect(),
    }
}

fn random_row(r: &mut Rng, table: usize, n: u128, s: &SbSnapshot, d: &mut Delta) {
    let ip = format!("10.0.{}.{}", r.below(2), r.below(4));
    let mac = r
        .pick(&["00:00:00:00:00:0a", "00:00:00:00:00:0b", "bad"])
        .to_string();
    match table {
        0 => d.address_set.push(RowDelta::Insert(sb::AddressSet {
            uuid: u(n),
            name: r.pick(&["as1", "as2"]).into(),
            addresses: [ip.clone(), r.pick(&["10.1.0.0/16", "x y"]).to_string()].into(),
        })),
        1 => d.port_group.push(RowDelta::Insert(sb::PortGroup {
            uuid: u(n),
            name: format!("{}_pg", 1 + r.below(DPS as usize + 1)),
            ports: [format!("p{}", r.below(PORTS as usize))].into(),
        })),
        2 => d.mac_binding.push(RowDelta::Insert(sb::MacBinding {
            uuid: u(n),
            datapath: random_dp(r),
            ip,
            logical_port: format!("p{}", r.below(PORTS as usize)),
            mac,
            ..Default::default()
        })),
        3 => d
            .static_mac_binding
            .push(RowDelta::Insert(sb::StaticMacBinding {
                uuid: u(n),
                datapath: random_dp(r),
                ip,
                logical_port: format!("p{}", r.below(PORTS as usize)),
                mac,
                override_dynamic_mac: r.chance(2),
            })),
        4 => d.fdb.push(RowDelta::Insert(sb::Fdb {
            uuid: u(n),
            dp_key: 1 + r.below(DPS as usize) as i64,
            port_key: 1 + r.below(12) as i64,
            mac,
        })),
        5 => d.load_balancer.push(RowDelta::Insert(sb::LoadBalancer {
            uuid: u(n),
            datapaths: [random_dp(r)].into(),
            datapath_group: r
                .chance(2)
                .then(|| RowRef::new(u(100 + r.below(3) as u128))),
            vips: [(format!("{ip}:80"), "10.9.0.1:8080".to_string())].into(),
            protocol: r
                .chance(6)
                .then(|| sb::LoadBalancerProtocol::Other("icmp".into())),
            ..Default::default()
        })),
        6 => d.dns.push(RowDelta::Insert(sb::Dns {
            uuid: u(n),
            datapaths: [random_dp(r), RowRef::new(u(99))]
                .into_iter()
                .take(1 + usize::from(r.chance(5)))
                .collect(),
            records: [(r.pick(&["A.example", "b.example"]).to_string(), ip)].into(),
            ..Default::default()
        })),
        7 => d
            .multicast_group
            .push(RowDelta::Insert(random_group(r, n, s))),
        _ => d.port_binding.push(RowDelta::Insert(random_port(r, n))),
    }
}

fn chassis_rows(d: &mut Delta) {
    for (i, c) in CHASSIS.iter().enumerate() {
        d.encap.push(RowDelta::Insert(sb::Encap {
            uuid: u(c + 1),
            chassis_name: format!("hv{}", i + 1),
            ip: format!("192.168.0.{}", i + 1),
            type_: sb::EncapType::Geneve,
            ..Default::default()
        }));
        d.chassis.push(RowDelta::Insert(sb::Chassis {
            uuid: u(*c),
            name: format!("hv{}", i + 1),
            encaps: [RowRef::new(u(c + 1))].into(),
            ..Default::default()
        }));
    }
    d.chassis_template_var
        .push(RowDelta::Insert(sb::ChassisTemplateVar {
            uuid: u(71),
            chassis: "hv1".into(),
            variables: [("vip".to_string(), "10.0.0.9".to_string())].into(),
        }));
}

fn start(r: &mut Rng) -> SbSnapshot {
    let mut d = Delta {
        datapath_binding: (1..=DPS)
            .map(|n| RowDelta::Insert(dp_row(n, n as i64)))
            .collect(),
        ..Delta::default()
    };
    chassis_rows(&mut d);
    d.logical_dp_group = (100..103)
        .map(|n| RowDelta::Insert(random_dp_group(r, n)))
        .collect();
    d.logical_flow = (5000..5080)
        .map(|n| RowDelta::Insert(random_flow(r, n)))
        .collect();
    d.port_binding = (0..PORTS)
        .map(|n| RowDelta::Insert(random_port(r, n)))
        .collect();
    let mut s = SbSnapshot::new();
    s.apply(&d);
    let mut d = Delta::default();
    for t in 0..8 {
        for k in 0..3 {
            random_row(r, t, 20_000 + (t as u128) * 100 + k, &s, &mut d);
        }
    }
    s.apply(&d);
    s
}

/// Deletes, updates (a fresh random row under the same UUID) or inserts one row of `table`.
fn change<T: Table + Clone>(
    r: &mut Rng,
    rows: &BTreeMap<Uuid, T>,
    fresh: impl FnOnce(&mut Rng, Uuid) -> T,
    next: &mut u128,
) -> RowDelta<T> {
    let pick = (!rows.is_empty()).then(|| rows.values().nth(r.below(rows.len())).cloned());
    match (r.below(3), pick.flatten()) {
        (0, Some(old)) => RowDelta::Delete(old),
        (1, Some(old)) => {
            let new = fresh(r, old.uuid());
            RowDelta::Update { old, new }
        }
        _ => {
            *next += 1;
            RowDelta::Insert(fresh(r, u(*next)))
        }
    }
}

/// One random change to one table the translation reads.
fn mutate(r: &mut Rng, s: &SbSnapshot, next: &mut u128) -> Delta {
    let mut d = Delta::default();
    match r.below(40) {
        0..=9 | 38..=39 => d.logical_flow.push(change(
            r,
            s.logical_flow(),
            |r, id| sb::LogicalFlow {
                uuid: id,
                ..random_flow(r, 0)
            },
            next,
        )),
        10..=17 => d.port_binding.push(change(
            r,
            s.port_binding(),
            |r, id| sb::PortBinding {
                uuid: id,
                ..random_port(r, id.as_u128() % 1000)
            },
            next,
        )),
        18..=19 => d.multicast_group.push(change(
            r,
            s.multicast_group(),
            |r, id| sb::MulticastGroup {
                uuid: id,
                ..random_group(r, 0, s)
            },
            next,
        )),
        20..=21 => {
            let g = u(100 + r.below(3) as u128);
            let old = s.logical_dp_group()[&g].clone();
            d.logical_dp_group.push(RowDelta::Update {
                old,
                new: random_dp_group(r, g.as_u128()),
            });
        }
        22..=35 => {
            let table = r.below(7);
            let mut one = Delta::default();
            random_row(r, table, 0, s, &mut one);
            macro_rules! any {
                ($f:ident) => {{
                    let RowDelta::Insert(row) = one.$f.remove(0) else {
                        unreachable!()
                    };
                    d.$f.push(change(
                        r,
                        s.$f(),
                        |_, id| {
                            let mut row = row.clone();
                            row.uuid = id;
                            row
                        },
                        next,
                    ))
                }};
            }
            match table {
                0 => any!(address_set),
                1 => any!(port_group),
                2 => any!(mac_binding),
                3 => any!(static_mac_binding),
                4 => any!(fdb),
                5 => any!(load_balancer),
                _ => any!(dns),
            }
        }
        36 => {
            let old = s.chassis_template_var()[&u(71)].clone();
            let mut new = old.clone();
            new.variables.insert(
                "vip".into(),
                r.pick(&["10.0.0.9", "10.0.0.10", "bad"]).into(),
            );
            d.chassis_template_var.push(RowDelta::Update { old, new });
        }
        _ => {
            // A chassis's bridge mappings, or a datapath's key.
            if r.chance(2) {
                let old = s.chassis()[&u(CHASSIS[0])].clone();
                let mut new = old.clone();
                new.other_config.insert(
                    "ovn-bridge-mappings".into(),
                    r.pick(&["phys:br-ex", "other:br-x", ""]).into(),
                );
                d.chassis.push(RowDelta::Update { old, new });
            } else {
                let n = 1 + r.below(DPS as usize) as u128;
                let old = s.datapath_binding()[&u(n)].clone();
                let new = dp_row(n, [n as i64, 0, 20][r.below(3)]);
                d.datapath_binding.push(RowDelta::Update { old, new });
            }
        }
    }
    d
}

/// A translation as text, without `touched` and with its sets in name order.
fn norm(t: &Translation) -> String {
    let mut t = t.clone();
    t.touched = None;
    t.renumbered = BTreeSet::new();
    t.flow_edits = None;
    let sets = std::mem::take(&mut t.spec.sets);
    let a: BTreeMap<_, _> = sets.addr_sets.into_iter().collect();
    let p: BTreeMap<_, _> = sets.port_groups.into_iter().collect();
    format!("{t:#?}\n{a:#?}\n{p:#?}")
}

/// The first part outside datapaths that differs (`real`) but is not claimed.
fn rest_missing(real: Rest, claimed: Rest) -> Option<&'static str> {
    let parts = [
        ("sets", real.sets, claimed.sets),
        ("chassis", real.chassis, claimed.chassis),
        ("neighbours", real.neighbours, claimed.neighbours),
        ("lb_vips", real.lb_vips, claimed.lb_vips),
        ("dns", real.dns, claimed.dns),
        ("zones", real.zones, claimed.zones),
        ("migrations", real.migrations, claimed.migrations),
    ];
    parts.into_iter().find(|p| p.1 && !p.2).map(|p| p.0)
}

/// Last good answers that never change during a run (so a message built earlier stays
/// valid): a flow whose identity hashes even has one of five texts as its last good version
/// (one of them a text the random flows have too, so some equal the current text).
struct FixedLastGood(Vec<(Arc<str>, Arc<str>)>);

impl FixedLastGood {
    fn new() -> Self {
        FixedLastGood(
            ["1", "ip4", "tcp", "udp", "arp"]
                .iter()
                .map(|m| (Arc::from(*m), Arc::from("next;")))
                .collect(),
        )
    }
}

impl LastGoodLookup for FixedLastGood {
    fn last_good(&self, datapath: &str, id: &str) -> Option<(&Arc<str>, &Arc<str>)> {
        let h = datapath
            .bytes()
            .chain(id.bytes())
            .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
        let (m, a) = self.0.get((h / 2 % 5) as usize).filter(|_| h % 2 == 0)?;
        Some((m, a))
    }
}

/// What went wrong first.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    Differs(usize),
    MsgDiffers(usize),
    NotTouched(usize, String),
}

/// `t` as [`FlowForm::Text`] holds it: every flow from text has the parse left out.
pub(crate) fn as_text_form(t: &Translation) -> Translation {
    let mut t = t.clone();
    for d in &mut t.spec.datapaths {
        for f in d.flows.iter_mut().filter(|f| f.source.is_some()) {
            f.matches = std::sync::Arc::new(hf_expr::Expr::Bool(false));
            f.actions = std::sync::Arc::from([]);
            f.parse_error = Some(TEXT_FORM.into());
        }
    }
    t
}

/// Runs `steps` random change sets (each 1..=3 changes); the first failure.
fn run(
    seed: u64,
    steps: usize,
    broken: u8,
    opts: &TranslateOptions,
    needed: bool,
) -> Option<Failure> {
    run_in(seed, steps, broken, opts, needed, FlowForm::Parsed)
}

/// [`run`] with the incremental translator holding flows in `form`. In
/// [`FlowForm::Text`], each translation must equal the full (parsed) one with the parses
/// left out, and its program message the parsed translation's.
fn run_in(
    seed: u64,
    steps: usize,
    broken: u8,
    opts: &TranslateOptions,
    needed: bool,
    form: FlowForm,
) -> Option<Failure> {
    let mut r = Rng(seed);
    let mut s = start(&mut r);
    let mut inc = Incremental::new();
    inc.set_flow_form(form);
    inc.broken = broken;
    let mut next: u128 = 50_000;
    let mut prev: Option<Translation> = None;
    let mut prev_msg: Option<ProgramMsg> = None;
    // A daemon's zone map: every zone translated, names gone kept until flushed.
    let mut held: BTreeMap<String, u16> = BTreeMap::new();
    let (mut fulls, mut incrementals) = (0, 0);
    let fixed_lg = FixedLastGood::new();
    // Datapath messages edited flow by flow from the previous message.
    let mut edited = 0;
    let (mut touched, mut datapaths, mut zones_from_last) = (0, 0, 0);
    for step in 0..steps {
        // Half of the seeds keep zones as a daemon does, half do not; two thirds keep local
        // port ids as a daemon does (the last translation's), a third number them afresh.
        let keep_ids = !seed.is_multiple_of(3);
        let extra = Extra {
            only_needed: needed,
            zones: if seed.is_multiple_of(2) {
                held.clone()
            } else {
                BTreeMap::new()
            },
            local_ids: if keep_ids {
                inc.local_ids().cloned().unwrap_or_default()
            } else {
                BTreeMap::new()
            },
            ha_up: None,
        };
        let parsed = translate_with(&s, opts, &extra);
        let want = match form {
            FlowForm::Parsed => parsed,
            FlowForm::Text => {
                // The message the datapath gets is the parsed translation's.
                let a = program_msg(&parsed, "hv1", 1, 0, &BTreeMap::new(), &NoLastGood);
                let text = as_text_form(&parsed);
                let b = program_msg(&text, "hv1", 1, 0, &BTreeMap::new(), &NoLastGood);
                if a.msg != b.msg || !b.skipped.is_empty() {
                    return Some(Failure::MsgDiffers(step));
                }
                text
            }
        };
        let got = inc.translate(&s, opts, &extra);
        if norm(&want) != norm(&got) {
            if std::env::var("HF_DEBUG").is_ok() {
                let (a, b) = (norm(&want), norm(&got));
                for (x, y) in a.lines().zip(b.lines()).filter(|(x, y)| x != y).take(10) {
                    eprintln!("want {x}\ngot  {y}");
                }
                eprintln!("stats {:?}", inc.stats());
            }
            return Some(Failure::Differs(step));
        }
        if inc.stats().full {
            fulls += 1;
        } else {
            incrementals += 1;
            zones_from_last += usize::from(inc.stats().zones_from_last);
            touched += got.touched.as_ref().map_or(0, |t| t.datapaths.len());
            datapaths += got.spec.datapaths.len();
        }
        if let Some(p) = &prev {
            let real = compare(p, &got);
            let Some(claimed) = &got.touched else {
                return Some(Failure::NotTouched(step, "touched is None".into()));
            };
            if let Some(n) = real.datapaths.difference(&claimed.datapaths).next() {
                return Some(Failure::NotTouched(step, n.clone()));
            }
            if let Some(part) = rest_missing(real.rest, claimed.rest) {
                return Some(Failure::NotTouched(step, format!("rest: {part}")));
            }
            // Kept local ids are kept: no datapath is renumbered, every surviving local
            // port has the id it had.
            if keep_ids {
                if let Some(n) = got.renumbered.iter().next() {
                    return Some(Failure::NotTouched(step, format!("renumbered {n}")));
                }
                if let Some((n, _)) = (got.local_ports.iter())
                    .find(|(n, id)| p.local_ports.get(*n).is_some_and(|was| was != *id))
                {
                    return Some(Failure::NotTouched(step, format!("local id of {n} moved")));
                }
            }
            // Renumbered datapaths differ only in local ids.
            for n in &got.renumbered {
                let strip = |t: &Translation| {
                    t.spec.datapaths.iter().find(|d| &d.name == n).map(|d| {
                        let mut d = d.clone();
                        for p in &mut d.ports {
                            if let hf_pipeline::PortLocation::Local(_) = p.location {
                                p.location = hf_pipeline::PortLocation::Local(0);
                            }
                        }
                        d
                    })
                };
                if strip(p) != strip(&got) {
                    return Some(Failure::NotTouched(step, format!("renumbered {n}")));
                }
            }
        }
        // The program message reusing the last one equals the one built afresh.
        let retained: BTreeMap<String, u16> = if step % 3 == 0 {
            [("lsp/gone".to_string(), 7)].into()
        } else {
            BTreeMap::new()
        };
        // Half of the seeds with last good versions (the same answers all along).
        let lg: &dyn LastGoodLookup = if seed.is_multiple_of(2) {
            &fixed_lg
        } else {
            &NoLastGood
        };
        let full = program_msg(&got, "hv1", step as u64, 0, &retained, lg);
        if let Some(pm) = prev_msg.take() {
            if let Some(e) = &got.flow_edits {
                edited += e
                    .keys()
                    .filter(|n| pm.datapaths.iter().any(|d| &d.name == *n))
                    .count();
            }
            let reused = program_msg_reusing(&got, "hv1", step as u64, 0, &retained, lg, pm);
            if reused.msg != full.msg {
                if std::env::var("HF_DEBUG").is_ok() {
                    for (a, b) in reused.msg.datapaths.iter().zip(&full.msg.datapaths) {
                        if a != b {
                            eprintln!("edited {a:#?}\nbuilt {b:#?}");
                            break;
                        }
                    }
                }
                return Some(Failure::MsgDiffers(step));
            }
            prev_msg = Some(reused.msg);
        } else {
            prev_msg = Some(full.msg);
        }
        held.extend(want.zones.iter().map(|(n, z)| (n.clone(), *z)));
        let gone: Vec<String> = held
            .keys()
            .filter(|n| !want.zones.contains_key(*n))
            .cloned()
            .collect();
        if !gone.is_empty() && r.chance(4) {
            held.remove(&gone[r.below(gone.len())]);
        }
        prev = Some(want);
        inc.recycle(got);
        for _ in 0..1 + r.below(3) {
            let d = mutate(&mut r, &s, &mut next);
            s.apply(&d);
            inc.changed(&d);
        }
    }
    // Most translations were incremental, and messages were edited flow by flow.
    assert!(
        incrementals > fulls,
        "seed {seed}: {incrementals} incremental, {fulls} full"
    );
    assert!(
        edited * 4 > incrementals,
        "seed {seed}: {edited} datapath messages edited in {incrementals} incremental steps"
    );
    // With zones kept (even seeds), `touched` names a few datapaths, not all of them, and
    // zones are mostly assigned from the last assignment.
    if seed.is_multiple_of(2) {
        assert!(
            zones_from_last * 2 > incrementals,
            "seed {seed}: zones from the last assignment {zones_from_last} times of {incrementals}"
        );
        assert!(
            touched * 2 < datapaths,
            "seed {seed}: {touched} of {datapaths} datapaths touched"
        );
    }
    if std::env::var("HF_DEBUG").is_ok() {
        eprintln!(
            "seed {seed}: {incrementals} incremental ({zones_from_last} with zones from the \
             last), {fulls} full, {touched}/{datapaths} touched"
        );
    }
    None
}

fn hv1() -> TranslateOptions {
    TranslateOptions {
        chassis: Some("hv1".into()),
    }
}

#[test]
fn incremental_translation_equals_the_full_one_over_random_changes() {
    for seed in 1..=8 {
        assert_eq!(
            run(seed, 150, 0, &hv1(), true),
            None,
            "seed {seed}, needed only"
        );
    }
    for seed in 11..=13 {
        assert_eq!(
            run(seed, 100, 0, &hv1(), false),
            None,
            "seed {seed}, every datapath"
        );
        assert_eq!(
            run(seed, 100, 0, &TranslateOptions::default(), false),
            None,
            "seed {seed}, no chassis"
        );
    }
}

#[test]
fn a_text_form_translation_equals_the_parsed_one_without_its_parses() {
    // Full passes (template variables, chassis) and steps alike, with and without zones kept.
    for seed in 1..=6 {
        assert_eq!(
            run_in(seed, 150, 0, &hv1(), true, FlowForm::Text),
            None,
            "seed {seed}, needed only"
        );
    }
    assert_eq!(
        run_in(
            11,
            100,
            0,
            &TranslateOptions::default(),
            false,
            FlowForm::Text
        ),
        None,
        "no chassis"
    );
    // The text form holds no parse tree: every flow's match and actions are empty.
    let mut r = Rng(3);
    let s = start(&mut r);
    let mut inc = Incremental::new();
    inc.set_flow_form(FlowForm::Text);
    let t = inc.translate(&s, &hv1(), &Extra::default());
    let flows: Vec<_> = t.spec.datapaths.iter().flat_map(|d| &d.flows).collect();
    assert!(flows.len() > 20, "{} flows", flows.len());
    assert!(flows.iter().all(|f| f.actions.is_empty()
        && *f.matches == hf_expr::Expr::Bool(false)
        && f.parse_error.as_deref() == Some(TEXT_FORM)));
    // Compiled directly, a text-form program reports every flow instead of running them
    // (the datapaths' flows alone: the random ports may clash).
    let spec = hf_pipeline::ProgramSpec {
        datapaths: (t.spec.datapaths.iter())
            .map(|d| hf_pipeline::DatapathSpec {
                ports: Vec::new(),
                groups: Vec::new(),
                ..d.clone()
            })
            .collect(),
        ..hf_pipeline::ProgramSpec::default()
    };
    let (_, errors) = hf_pipeline::Program::compile(&spec).unwrap();
    assert_eq!(errors.len(), flows.len());
}

#[test]
fn flow_texts_are_the_replicas_own_allocations() {
    // The text of a flow goes from the replica's row to the translation and the program
    // message without a copy (in both forms); only a substituted template is new text.
    let mut r = Rng(5);
    let s = start(&mut r);
    for form in [FlowForm::Parsed, FlowForm::Text] {
        let mut inc = Incremental::new();
        inc.set_flow_form(form);
        let t = inc.translate(&s, &hv1(), &Extra::default());
        let msg = program_msg(&t, "hv1", 1, 0, &BTreeMap::new(), &NoLastGood).msg;
        let (mut shared, mut substituted) = (0, 0);
        for f in msg.datapaths.iter().flat_map(|d| &d.flows) {
            let uuid: Uuid = f.sb_uuid.as_deref().unwrap().parse().unwrap();
            let row = &s.logical_flow()[&uuid];
            assert!(
                std::sync::Arc::ptr_eq(&row.actions, &f.actions),
                "{form:?} {f:?}"
            );
            if row.match_.contains('^') {
                assert_ne!(*row.match_, *f.matches);
                substituted += 1;
            } else {
                assert!(
                    std::sync::Arc::ptr_eq(&row.match_, &f.matches),
                    "{form:?} {f:?}"
                );
                shared += 1;
            }
        }
        assert!(
            shared > 20 && substituted > 0,
            "{shared} shared, {substituted} substituted"
        );
    }
}

#[test]
fn a_removed_dependency_rule_is_caught() {
    // Port_Binding changes that do not re-translate their datapath's groups.
    assert!((1..=8).any(|seed| run(seed, 150, 1, &hv1(), true).is_some()));
    // DP group changes that do not re-translate their flows.
    assert!((1..=8).any(|seed| run(seed, 150, 2, &hv1(), true).is_some()));
}

#[path = "par_tests.rs"]
mod par_tests;
