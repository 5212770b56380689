//! Incident B's world (`../shared/incidents/002`), shared by `tests/incidents.rs` and the
//! sandbox's `upgrade` scenario: a rolling upgrade of the control plane while TCP runs through
//! a Neutron-style security group (stateful ACLs on port groups), with holdfast's own
//! controllers started at the older feature level `hf-1`.
//!
//! - [`world`]: chassis hv1, hv2, hv3, every controller at `hf-1`; one switch `ls1`
//!   (10.0.1.0/24) with the server [`SERVER`] on hv1 in port group `pg_web` and the clients
//!   [`CLIENTS`] on hv2 and hv3 in `pg_clients`. `pg_web` admits TCP to [`PORT`] from
//!   `$pg_clients_ip4` (allow-related) and drops every other IPv4 packet to it; its own
//!   egress is allowed (allow-related). `pg_clients` may send anything (allow-related) and
//!   receives only what is related; everything else to it is dropped.
//! - [`start_streams`]: one paced TCP upload per client to the server, through both groups.
//! - [`sb_form`]: the language level northd's SB is written in (the newest feature level any
//!   flow text or the `Port_Group` layout needs); [`advertised`]: each chassis's advertised
//!   level; [`flow_errors`]: each chassis's flow errors (its controller's count, and its
//!   `Chassis_Private.external_ids`); [`Step`]: one line of an upgrade's report.
//!
//! What it does not do: assert anything (its users do), or upgrade (the users restart
//! controllers and northd in the order they test).

use std::collections::BTreeMap;
use std::time::Duration;

use hf_expr::features::{FeatureSet, Level, used_by_actions, used_by_expr};
use hf_expr::{SymbolTable, parse_actions, parse_match};
use hf_model::SbSnapshot;
use serde_json::json;

use crate::world::World;
use crate::world::chassis::ChassisTuning;
use crate::world::nb::{self, Txn};
use crate::world::streams::{Stream, StreamKind, StreamReport, StreamSpec};

/// The chassis.
pub const CHASSIS: [&str; 3] = ["hv1", "hv2", "hv3"];
/// The server (port group `pg_web`, on hv1).
pub const SERVER: &str = "web1";
/// The clients (port group `pg_clients`, on hv2 and hv3).
pub const CLIENTS: [&str; 2] = ["client1", "client2"];
/// The server's TCP port, the only one the security group admits.
pub const PORT: u16 = 5201;
/// The streams' pace (bits per second): slow enough that pacing, not the window, sets it.
pub const RATE_BPS: u64 = 4_000_000;

fn acl(pg: &str, label: &str, direction: &str, priority: i64, m: &str, action: &str) -> Txn {
    vec![
        json!({"op": "insert", "table": "ACL", "uuid-name": label,
            "row": {"direction": direction, "priority": priority, "match": m, "action": action}}),
        json!({"op": "mutate", "table": "Port_Group", "where": [["name", "==", pg]],
            "mutations": [["acls", "insert", ["set", [["named-uuid", label]]]]]}),
    ]
}

/// The NB ports: the switch and the three ports (the security group comes after them,
/// [`security_group`]).
pub fn topology() -> Vec<Txn> {
    let mut t = vec![nb::switch("ls1")];
    for (name, mac, ip, chassis) in [
        (SERVER, "00:00:00:00:01:01", "10.0.1.10", "hv1"),
        (CLIENTS[0], "00:00:00:00:01:02", "10.0.1.20", "hv2"),
        (CLIENTS[1], "00:00:00:00:01:03", "10.0.1.30", "hv3"),
    ] {
        t.push(nb::vif("ls1", name, mac, ip, chassis));
    }
    t
}

/// A Neutron-style security group over existing switch ports: port groups `pg_web`
/// (`server`) and `pg_clients` (`clients`) and their ACLs. `pg_web` admits TCP to [`PORT`]
/// from `$pg_clients_ip4` (allow-related) and drops every other IPv4 packet to it, its egress
/// allowed (allow-related); `pg_clients` may send anything (allow-related) and receives only
/// what is related. One transaction. Errors name a port NB does not have.
pub fn security_group(
    nb: &hf_model::NbSnapshot,
    server: &str,
    clients: &[&str],
) -> Result<Txn, String> {
    let uuid = |name: &str| {
        nb.logical_switch_port()
            .values()
            .find(|p| p.name == name)
            .map(|p| json!(["uuid", p.uuid.to_string()]))
            .ok_or_else(|| format!("security group: NB has no switch port named {name:?}"))
    };
    let web = vec![uuid(server)?];
    let cl = clients
        .iter()
        .map(|c| uuid(c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut t: Txn = vec![
        json!({"op": "insert", "table": "Port_Group", "row": {"name": "pg_web",
            "ports": ["set", web]}}),
        json!({"op": "insert", "table": "Port_Group", "row": {"name": "pg_clients",
            "ports": ["set", cl]}}),
    ];
    for (pg, label, dir, prio, m, action) in [
        (
            "pg_web",
            "acl_web_in",
            "to-lport",
            1002,
            format!("outport == @pg_web && ip4 && ip4.src == $pg_clients_ip4 && tcp.dst == {PORT}"),
            "allow-related",
        ),
        (
            "pg_web",
            "acl_web_drop",
            "to-lport",
            1001,
            "outport == @pg_web && ip4".to_string(),
            "drop",
        ),
        (
            "pg_web",
            "acl_web_out",
            "from-lport",
            1002,
            "inport == @pg_web && ip4".to_string(),
            "allow-related",
        ),
        (
            "pg_clients",
            "acl_clients_out",
            "from-lport",
            1002,
            "inport == @pg_clients && ip4".to_string(),
            "allow-related",
        ),
        (
            "pg_clients",
            "acl_clients_drop",
            "to-lport",
            1001,
            "outport == @pg_clients && ip4".to_string(),
            "drop",
        ),
    ] {
        t.extend(acl(pg, label, dir, prio, &m, action));
    }
    Ok(t)
}

/// `NB_Global options:ignore_chassis_features` set to `on` (`true`) or removed.
pub fn ignore_chassis_features(on: bool) -> Txn {
    if on {
        vec![json!({"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [["options", "insert",
                ["map", [["ignore_chassis_features", "true"]]]]]})]
    } else {
        vec![json!({"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [["options", "delete", ["set", ["ignore_chassis_features"]]]]})]
    }
}

/// Controllers at `level`, with last good versions.
pub fn at(level: Level) -> ChassisTuning {
    ChassisTuning {
        feature_level: level,
        keep_last_good: true,
    }
}

/// The world, ready: every controller restarted at `hf-1` before NB is written, every port
/// bound. Panics when it does not come up within 30 s of virtual time (a broken build).
pub fn world(seed: u64) -> World {
    let mut w = World::holdfast(seed, &CHASSIS);
    for c in CHASSIS {
        w.restart_controller_with(c, at(Level::Hf1))
            .expect("chassis");
    }
    w.nb_all(topology()).expect("NB");
    let sg = security_group(&w.nb_snapshot().expect("NB"), SERVER, &CLIENTS).expect("ports");
    w.nb(sg).expect("NB");
    w.await_ports_ready("the world");
    w.run_for(Duration::from_millis(200));
    w
}

/// One paced TCP upload from each client to the server; runs until they are going. Panics
/// when they do not get going (a broken build).
pub fn start_streams(w: &mut World) -> Vec<Stream> {
    let mut out = Vec::new();
    for c in CLIENTS {
        let mut spec = StreamSpec::new(&format!("{c}-web"), StreamKind::Tcp, c, SERVER);
        spec.port = PORT;
        spec.tcp_rate_bps = RATE_BPS;
        out.push(w.start_stream(spec).expect("stream"));
    }
    w.run_for(Duration::from_millis(500));
    for s in &out {
        let r = w.stream_report(s);
        assert!(
            r.bytes > 0 && r.state == "running",
            "{} did not get going: {r:?}\nlog:\n{}",
            s.spec().name,
            w.take_log().join("\n")
        );
    }
    out
}

/// The newest feature level one SB flow text needs (`None`: it does not parse at all).
pub fn flow_level(m: &str, a: &str) -> Option<Level> {
    let symtab = SymbolTable::shared();
    let m = parse_match(symtab, m).ok()?;
    let a = parse_actions(symtab, a).ok()?;
    let mut uses = used_by_expr(&m);
    uses.extend(used_by_actions(&a));
    Some(
        uses.iter()
            .map(|u| u.feature.hf)
            .max()
            .unwrap_or(Level::Hf1),
    )
}

/// The level northd's SB is written in: the newest any flow text needs, and `hf-2` when
/// `Port_Group` rows are per datapath (`<key>_<name>`, OVN 20.09's layout).
pub fn sb_form(sb: &SbSnapshot) -> Level {
    let keys: Vec<String> = sb
        .datapath_binding()
        .values()
        .map(|d| format!("{}_", d.tunnel_key))
        .collect();
    let per_dp = sb
        .port_group()
        .values()
        .any(|pg| keys.iter().any(|k| pg.name.starts_with(k.as_str())));
    let mut level = if per_dp { Level::Hf2 } else { Level::Hf1 };
    for lf in sb.logical_flow().values() {
        level = level.max(flow_level(&lf.match_, &lf.actions).unwrap_or(Level::Hf2));
    }
    level
}

/// Each chassis's advertised level (`Chassis.other_config:holdfast-features`, the newest
/// level it covers; `None` when it advertises none).
pub fn advertised(sb: &SbSnapshot) -> BTreeMap<String, Option<Level>> {
    sb.chassis()
        .values()
        .map(|c| {
            let l = c
                .other_config
                .get("holdfast-features")
                .and_then(|f| FeatureSet::parse(f).ok())
                .and_then(|s| s.level_covered());
            (c.name.clone(), l)
        })
        .collect()
}

/// A chassis's flow errors as its controller counts them, and its
/// `Chassis_Private.external_ids` `holdfast-flow-error*` keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowErrors {
    /// The controller's count (0 while no controller runs).
    pub count: usize,
    /// Of those, flows running their last good version.
    pub kept: usize,
    /// Of those, flows that failed closed.
    pub failed_closed: usize,
    /// The `Chassis_Private.external_ids` keys that start with `holdfast-flow-error`.
    pub reported: BTreeMap<String, String>,
}

/// [`FlowErrors`] of every chassis.
pub fn flow_errors(w: &World) -> BTreeMap<String, FlowErrors> {
    let sb = w.sb_snapshot().unwrap_or_default();
    w.chassis()
        .iter()
        .map(|c| {
            let lg = c.controller().map(|ctl| ctl.flow_errors());
            let reported = sb
                .chassis_private()
                .values()
                .find(|p| p.name == c.name())
                .map(|p| {
                    p.external_ids
                        .iter()
                        .filter(|(k, _)| k.starts_with("holdfast-flow-error"))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            (
                c.name().to_string(),
                FlowErrors {
                    count: lg.map_or(0, |l| l.error_count()),
                    kept: lg.map_or(0, |l| l.kept_count()),
                    failed_closed: lg.map_or(0, |l| l.failed_closed_count()),
                    reported,
                },
            )
        })
        .collect()
}

/// One step of an upgrade, as its report prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What was done.
    pub what: String,
    /// Each chassis's advertised level.
    pub advertised: BTreeMap<String, Option<Level>>,
    /// The level SB is written in.
    pub sb_form: Level,
    /// Each chassis's flow errors.
    pub errors: BTreeMap<String, FlowErrors>,
    /// The streams as they are.
    pub streams: Vec<StreamReport>,
}

impl Step {
    /// Records the world after `what`.
    pub fn record(w: &World, what: &str, streams: &[Stream]) -> Step {
        let sb = w.sb_snapshot().unwrap_or_default();
        Step {
            what: what.to_string(),
            advertised: advertised(&sb),
            sb_form: sb_form(&sb),
            errors: flow_errors(w),
            streams: streams.iter().map(|s| w.stream_report(s)).collect(),
        }
    }

    /// Flow errors over every chassis.
    pub fn parse_errors(&self) -> usize {
        self.errors.values().map(|e| e.count).sum()
    }

    /// Resets over every stream.
    pub fn resets(&self) -> u64 {
        self.streams.iter().map(|s| s.resets).sum()
    }

    /// Retransmitted segments over every stream.
    pub fn retransmitted(&self) -> u64 {
        self.streams.iter().map(|s| s.retransmitted).sum()
    }

    /// One report line: `what: advertised hv1=hf-1 ...; SB form hf-1; parse errors 0; resets
    /// 0; retransmitted 0; bytes N`.
    pub fn line(&self) -> String {
        let adv: Vec<String> = self
            .advertised
            .iter()
            .map(|(c, l)| format!("{c}={}", l.map_or("none", |l| l.name())))
            .collect();
        let errs: Vec<String> = self
            .errors
            .iter()
            .filter(|(_, e)| e.count > 0)
            .map(|(c, e)| {
                format!(
                    "{c}: {} ({} on last good, {} failed closed)",
                    e.count, e.kept, e.failed_closed
                )
            })
            .collect();
        format!(
            "{}: advertised {}; SB form {}; parse errors {}{}; resets {}; retransmitted {}; bytes {}",
            self.what,
            adv.join(" "),
            self.sb_form,
            self.parse_errors(),
            if errs.is_empty() {
                String::new()
            } else {
                format!(" [{}]", errs.join(", "))
            },
            self.resets(),
            self.retransmitted(),
            self.streams.iter().map(|s| s.bytes).sum::<u64>()
        )
    }
}
