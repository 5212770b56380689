//! The controller core against the sans-I/O OVSDB server (`hf_ovsdb_net::server::Core`, NB and
//! SB with holdfast's schemas), holdfast northd's core compiling NB into that SB, and
//! `hf_datapath::Datapath` cores as the chassis's datapaths: no sockets, no threads, a virtual
//! clock, deterministic. The oracles are the SB rows the server holds, the programs and zone
//! maps the datapaths hold, and `NB_Global.hv_cfg` as northd computes it.
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use hf_controller::daemon::{Controller, ControllerConfig, Level, Tuning};
use hf_datapath::{Datapath, DatapathConfig};
use hf_model::{NbSnapshot, SbSnapshot};
use hf_northd::daemon::{Config as NorthdConfig, Northd, SbView};
use hf_ovsdb_net::client::{Config as ReplicaConfig, Replica, TableSelect};
use hf_ovsdb_net::server::{self, Core, Output, SessionId};
use serde_json::{Value, json};

const WALL0: i64 = 1_700_000_000_000;

fn snow(t: Duration) -> server::Now {
    server::Now {
        mono_ms: t.as_millis() as u64,
        wall_ms: WALL0 as u64 + t.as_millis() as u64,
    }
}

fn ms(t: Duration) -> u64 {
    t.as_millis() as u64
}

fn new_core(seed: u64) -> Core {
    let mut core = Core::new(
        server::Config {
            probe_interval_ms: None,
            ..server::Config::default()
        },
        seed,
    );
    for s in [hf_model::nb::schema(), hf_model::sb::schema()] {
        let db = hf_ovsdb::Database::new(Arc::clone(s), seed);
        core.add_database(db, None, vec![]).unwrap();
    }
    core
}

struct NorthdNode {
    nd: Northd,
    nb: Replica<NbSnapshot>,
    sb: Replica<SbView>,
    nb_sid: Option<SessionId>,
    sb_sid: Option<SessionId>,
}

struct Chassis {
    name: String,
    ctl: Option<Controller>,
    sid: Option<SessionId>,
    dp: Datapath,
    logs: Vec<(Level, String)>,
}

#[derive(Clone, Copy)]
enum Target {
    NorthdNb,
    NorthdSb,
    Ctl(usize),
    Writer,
}

struct Net {
    core: Core,
    t: Duration,
    writer: SessionId,
    next_id: u64,
    northd: Option<NorthdNode>,
    chassis: Vec<Chassis>,
    routes: BTreeMap<SessionId, Target>,
    /// Controllers send program deltas (`Tuning::program_deltas`).
    deltas: bool,
    /// Controllers build messages reusing untouched datapaths (`Tuning::incremental_messages`).
    reuse: bool,
    /// Chassis whose SB transaction replies are held back (a slow SB commit), and the replies.
    hold_replies: BTreeSet<usize>,
    held: Vec<(usize, Vec<u8>)>,
}

fn replica_cfg(tables: Vec<TableSelect>) -> ReplicaConfig {
    ReplicaConfig {
        tables,
        probe_interval_ms: None,
        ..ReplicaConfig::default()
    }
}

fn ctl_config(name: &str, ip: &str) -> ControllerConfig {
    ControllerConfig {
        chassis: name.into(),
        hostname: format!("{name}.example"),
        encap_type: "geneve".into(),
        encap_ip: ip.into(),
        monitor_all: false,
    }
}

fn new_controller(name: &str, ip: &str, t: Duration) -> Controller {
    new_controller_deltas(name, ip, t, true)
}

fn new_controller_deltas(name: &str, ip: &str, t: Duration, deltas: bool) -> Controller {
    new_controller_with(name, ip, t, deltas, true)
}

fn new_controller_with(name: &str, ip: &str, t: Duration, deltas: bool, reuse: bool) -> Controller {
    Controller::with_tuning(
        ctl_config(name, ip),
        Tuning {
            probe_interval_ms: None,
            wall_offset_ms: WALL0,
            program_deltas: deltas,
            incremental_messages: reuse,
            ..Tuning::default()
        },
        t,
    )
}

impl Net {
    fn new() -> Net {
        let mut core = new_core(7);
        let writer = core.connect(snow(Duration::ZERO));
        let mut net = Net {
            core,
            t: Duration::ZERO,
            writer,
            next_id: 1,
            northd: None,
            chassis: Vec::new(),
            routes: BTreeMap::from([(writer, Target::Writer)]),
            deltas: true,
            reuse: true,
            hold_replies: BTreeSet::new(),
            held: Vec::new(),
        };
        net.nb(json!([{"op": "insert", "table": "NB_Global", "row": {}}]));
        net.sb(json!([{"op": "insert", "table": "SB_Global", "row": {}}]));
        net.start_northd();
        net
    }

    fn start_northd(&mut self) {
        let mut sb = Replica::new(replica_cfg(SbView::tables()), ms(self.t));
        let mut nd = Northd::new(NorthdConfig {
            paused: false,
            seed: 99,
            ..NorthdConfig::default()
        });
        nd.start(&mut sb);
        self.northd = Some(NorthdNode {
            nd,
            nb: Replica::new(replica_cfg(Vec::new()), ms(self.t)),
            sb,
            nb_sid: None,
            sb_sid: None,
        });
        self.run();
    }

    fn stop_northd(&mut self) {
        if let Some(n) = self.northd.take() {
            for s in [n.nb_sid, n.sb_sid].into_iter().flatten() {
                self.core.disconnect(s);
                self.routes.remove(&s);
            }
        }
        self.run();
    }

    /// A chassis with a datapath holding `ports` and a controller connected to both.
    fn add_chassis(&mut self, name: &str, ip: [u8; 4], ports: &[&str]) -> usize {
        let mut dp = Datapath::new(DatapathConfig::new(name, IpAddr::V4(Ipv4Addr::from(ip))));
        for (i, p) in ports.iter().enumerate() {
            dp.add_port(p, Some([0x0a, 0, 0, ip[3], 0, i as u8 + 1]));
        }
        self.chassis.push(Chassis {
            name: name.into(),
            ctl: None,
            sid: None,
            dp,
            logs: Vec::new(),
        });
        let i = self.chassis.len() - 1;
        self.start_controller(i);
        i
    }

    fn start_controller(&mut self, i: usize) {
        let ip = match &self.chassis[i].dp.config().tunnel_ip {
            IpAddr::V4(a) => a.to_string(),
            IpAddr::V6(a) => a.to_string(),
        };
        let c = &mut self.chassis[i];
        let mut ctl = new_controller_with(&c.name, &ip, self.t, self.deltas, self.reuse);
        c.dp.handle_control_connected(self.t);
        ctl.handle_dp_connected(self.t);
        c.ctl = Some(ctl);
        self.run();
    }

    fn stop_controller(&mut self, i: usize) {
        let c = &mut self.chassis[i];
        c.ctl = None;
        if let Some(s) = c.sid.take() {
            self.core.disconnect(s);
            self.routes.remove(&s);
        }
        c.dp.handle_control_disconnected(self.t);
        self.run();
    }

    fn ctl(&self, i: usize) -> &Controller {
        self.chassis[i].ctl.as_ref().unwrap()
    }

    /// Moves every message until nothing moves.
    fn run(&mut self) {
        for _ in 0..20_000 {
            let t = self.t;
            let mut moved = false;
            if let Some(n) = &mut self.northd {
                moved |= pump_replica(
                    &mut self.core,
                    &mut self.routes,
                    &mut n.nb,
                    &mut n.nb_sid,
                    Target::NorthdNb,
                    t,
                );
                moved |= pump_replica(
                    &mut self.core,
                    &mut self.routes,
                    &mut n.sb,
                    &mut n.sb_sid,
                    Target::NorthdSb,
                    t,
                );
                while let Some(e) = n.nb.poll_event() {
                    n.nd.handle_nb_event(e);
                }
                while let Some(e) = n.sb.poll_event() {
                    n.nd.handle_sb_event(e);
                }
                n.nd.poll(&mut n.nb, &mut n.sb, ms(t), WALL0 + ms(t) as i64);
                while n.nd.poll_log().is_some() {}
                moved |= pump_replica(
                    &mut self.core,
                    &mut self.routes,
                    &mut n.nb,
                    &mut n.nb_sid,
                    Target::NorthdNb,
                    t,
                );
                moved |= pump_replica(
                    &mut self.core,
                    &mut self.routes,
                    &mut n.sb,
                    &mut n.sb_sid,
                    Target::NorthdSb,
                    t,
                );
            }
            let mut tunnelled = Vec::new();
            for (i, c) in self.chassis.iter_mut().enumerate() {
                let Some(ctl) = c.ctl.as_mut() else {
                    while c.dp.poll_control_transmit().is_some() {}
                    continue;
                };
                if ctl.poll_sb_close().is_some()
                    && let Some(s) = c.sid.take()
                {
                    self.core.disconnect(s);
                    self.routes.remove(&s);
                }
                while let Some(b) = ctl.poll_sb_transmit() {
                    moved = true;
                    if let Some(s) = c.sid {
                        self.core
                            .handle(s, serde_json::from_slice(&b).unwrap(), snow(t));
                    }
                }
                if ctl.poll_sb_connect().is_some() {
                    moved = true;
                    let s = self.core.connect(snow(t));
                    self.routes.insert(s, Target::Ctl(i));
                    c.sid = Some(s);
                    ctl.handle_sb_connected(t);
                }
                while let Some(b) = ctl.poll_dp_transmit() {
                    moved = true;
                    c.dp.handle_control_bytes(&b, t);
                }
                while let Some(b) = c.dp.poll_control_transmit() {
                    moved = true;
                    ctl.handle_dp_bytes(&b, t);
                }
                while let Some(l) = ctl.poll_log() {
                    c.logs.push(l);
                }
                while c.dp.poll_log().is_some() {}
                // Geneve between the datapaths (BFD between gateways); frames out of ports
                // go nowhere.
                let src = c.dp.config().tunnel_ip;
                while let Some(x) = c.dp.poll_transmit() {
                    if let hf_datapath::Transmit::Tunnel { dst, payload } = x {
                        tunnelled.push((src, dst, payload));
                    }
                }
            }
            for (src, dst, payload) in std::mem::take(&mut tunnelled) {
                if let Some(c) = self
                    .chassis
                    .iter_mut()
                    .find(|c| c.dp.config().tunnel_ip == dst)
                {
                    moved = true;
                    c.dp.handle_tunnel(src, &payload, t);
                }
            }
            let out: Vec<Output> = self.core.poll_output().collect();
            for o in out {
                moved = true;
                match o {
                    Output::Send(s, b) => self.deliver(s, &b, t),
                    Output::Close(s, _) => self.closed(s, t),
                    Output::Log(_) => {}
                }
            }
            if !moved {
                return;
            }
        }
        panic!("the network never settles");
    }

    fn deliver(&mut self, s: SessionId, b: &[u8], t: Duration) {
        match self.routes.get(&s).copied() {
            Some(Target::NorthdNb) => {
                if let Some(n) = &mut self.northd {
                    n.nb.handle_bytes(b, ms(t));
                }
            }
            Some(Target::NorthdSb) => {
                if let Some(n) = &mut self.northd {
                    n.sb.handle_bytes(b, ms(t));
                }
            }
            Some(Target::Ctl(i)) => {
                if self.hold_replies.contains(&i) && is_reply(b) {
                    self.held.push((i, b.to_vec()));
                    return;
                }
                if let Some(c) = self.chassis[i].ctl.as_mut() {
                    c.handle_sb_bytes(b, t);
                }
            }
            Some(Target::Writer) | None => {}
        }
    }

    /// Delivers the held SB replies and stops holding them.
    fn release_replies(&mut self) {
        self.hold_replies.clear();
        let t = self.t;
        for (i, b) in std::mem::take(&mut self.held) {
            if let Some(c) = self.chassis[i].ctl.as_mut() {
                c.handle_sb_bytes(&b, t);
            }
        }
        self.run();
    }

    fn closed(&mut self, s: SessionId, t: Duration) {
        match self.routes.remove(&s) {
            Some(Target::Ctl(i)) => {
                self.chassis[i].sid = None;
                if let Some(c) = self.chassis[i].ctl.as_mut() {
                    c.handle_sb_disconnected(t);
                }
            }
            Some(Target::NorthdNb) => {
                if let Some(n) = &mut self.northd {
                    n.nb_sid = None;
                    n.nb.handle_disconnected(ms(t));
                }
            }
            Some(Target::NorthdSb) => {
                if let Some(n) = &mut self.northd {
                    n.sb_sid = None;
                    n.sb.handle_disconnected(ms(t));
                }
            }
            _ => {}
        }
    }

    /// Lets `d` of virtual time pass, in steps of 100 ms.
    fn advance(&mut self, d: Duration) {
        let end = self.t + d;
        while self.t < end {
            self.t = (self.t + Duration::from_millis(100)).min(end);
            let t = self.t;
            if let Some(n) = &mut self.northd {
                n.nb.handle_timeout(ms(t));
                n.sb.handle_timeout(ms(t));
            }
            for c in &mut self.chassis {
                c.dp.handle_timeout(t);
                if let Some(ctl) = c.ctl.as_mut() {
                    ctl.handle_timeout(t);
                }
            }
            self.core.tick(snow(t));
            self.run();
        }
    }

    fn txn(&mut self, db: &str, ops: Value) -> Value {
        self.next_id += 1;
        let mut params = vec![json!(db)];
        params.extend(ops.as_array().unwrap().iter().cloned());
        self.core.handle(
            self.writer,
            json!({"method": "transact", "params": params, "id": self.next_id}),
            snow(self.t),
        );
        let mut reply = Value::Null;
        let out: Vec<Output> = self.core.poll_output().collect();
        let t = self.t;
        for o in out {
            if let Output::Send(s, b) = o {
                if s == self.writer {
                    reply = serde_json::from_slice(&b).unwrap();
                } else {
                    self.deliver(s, &b, t);
                }
            }
        }
        let failed = !reply["error"].is_null()
            || reply["result"]
                .as_array()
                .is_none_or(|r| r.iter().any(|o| o.get("error").is_some()));
        assert!(!failed, "transaction failed: {reply}");
        self.run();
        reply
    }

    fn nb(&mut self, ops: Value) -> Value {
        self.txn("OVN_Northbound", ops)
    }

    fn sb(&mut self, ops: Value) -> Value {
        self.txn("OVN_Southbound", ops)
    }

    fn db_nb(&self) -> NbSnapshot {
        NbSnapshot::from_db(self.core.database("OVN_Northbound").unwrap()).unwrap()
    }

    fn db_sb(&self) -> SbSnapshot {
        SbSnapshot::from_db(self.core.database("OVN_Southbound").unwrap()).unwrap()
    }

    /// `ovn-nbctl --wait=hv`'s other half: bump `nb_cfg`, return it.
    fn bump_nb_cfg(&mut self) -> i64 {
        self.nb(json!([{"op": "mutate", "table": "NB_Global", "where": [],
            "mutations": [["nb_cfg", "+=", 1]]}]));
        self.db_nb().nb_global().values().next().unwrap().nb_cfg
    }
}

/// Whether bytes from the server are a reply (to a transaction), not an update or a request.
fn is_reply(b: &[u8]) -> bool {
    serde_json::from_slice::<Value>(b)
        .is_ok_and(|v| v.get("method").is_none() && v.get("id").is_some_and(|i| !i.is_null()))
}

fn pump_replica<M: hf_ovsdb_net::client::Model>(
    core: &mut Core,
    routes: &mut BTreeMap<SessionId, Target>,
    r: &mut Replica<M>,
    sid: &mut Option<SessionId>,
    target: Target,
    t: Duration,
) -> bool {
    let mut moved = false;
    if r.poll_close().is_some()
        && let Some(s) = sid.take()
    {
        core.disconnect(s);
        routes.remove(&s);
    }
    while let Some(b) = r.poll_transmit() {
        moved = true;
        if let Some(s) = *sid {
            core.handle(s, serde_json::from_slice(&b).unwrap(), snow(t));
        }
    }
    if let Some(remote) = r.poll_connect() {
        moved = true;
        let s = core.connect(snow(t));
        routes.insert(s, target);
        *sid = Some(s);
        r.handle_connected(remote, ms(t));
    }
    moved
}

/// The NB topology: ls0 (vm1, vm2) and ls1 (vm3) joined by router lr0; ls2 (vm9) alone.
fn topology_ops() -> Value {
    let mut ops = Vec::new();
    let lsp = |name: &str, n: u8, net: u8| {
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": format!("p_{name}"),
            "row": {"name": name,
                    "addresses": format!("00:00:00:00:{net:02x}:{n:02x} 10.0.{net}.{n}")}})
    };
    ops.push(lsp("vm1", 11, 0));
    ops.push(lsp("vm2", 12, 0));
    ops.push(lsp("vm3", 13, 1));
    ops.push(lsp("vm9", 19, 2));
    for (sw, rp) in [("ls0", "lr0-ls0"), ("ls1", "lr0-ls1")] {
        ops.push(json!({"op": "insert", "table": "Logical_Switch_Port",
            "uuid-name": format!("p_{sw}_rtr"),
            "row": {"name": format!("{sw}-lr0"), "type": "router", "addresses": "router",
                    "options": ["map", [["router-port", rp]]]}}));
    }
    ops.push(json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "ls0",
        "ports": ["set", [["named-uuid", "p_vm1"], ["named-uuid", "p_vm2"], ["named-uuid", "p_ls0_rtr"]]]}}));
    ops.push(
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "ls1",
        "ports": ["set", [["named-uuid", "p_vm3"], ["named-uuid", "p_ls1_rtr"]]]}}),
    );
    ops.push(
        json!({"op": "insert", "table": "Logical_Switch", "row": {"name": "ls2",
        "ports": ["set", [["named-uuid", "p_vm9"]]]}}),
    );
    ops.push(
        json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "rp0",
        "row": {"name": "lr0-ls0", "mac": "00:00:00:00:ff:01", "networks": "10.0.0.1/24"}}),
    );
    ops.push(
        json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "rp1",
        "row": {"name": "lr0-ls1", "mac": "00:00:00:00:ff:02", "networks": "10.0.1.1/24"}}),
    );
    ops.push(
        json!({"op": "insert", "table": "Logical_Router", "row": {"name": "lr0",
        "ports": ["set", [["named-uuid", "rp0"], ["named-uuid", "rp1"]]]}}),
    );
    Value::Array(ops)
}

/// hv1 (vm1) and hv2 (vm2, vm3, vm9) on the topology, settled.
fn two_chassis() -> Net {
    two_chassis_deltas(true)
}

fn two_chassis_deltas(deltas: bool) -> Net {
    let mut net = Net::new();
    net.deltas = deltas;
    net.nb(topology_ops());
    net.add_chassis("hv1", [192, 168, 0, 1], &["vm1"]);
    net.add_chassis("hv2", [192, 168, 0, 2], &["vm2", "vm3", "vm9"]);
    net.advance(Duration::from_secs(1));
    net
}

fn dp_names(dp: &Datapath) -> BTreeSet<String> {
    dp.program()
        .map(|p| p.datapaths.iter().map(|d| d.name.clone()).collect())
        .unwrap_or_default()
}

fn pb<'a>(sb: &'a SbSnapshot, port: &str) -> &'a hf_model::sb::PortBinding {
    sb.port_binding_all_by_logical_port(port).next().unwrap()
}

fn chassis_uuid(sb: &SbSnapshot, name: &str) -> uuid::Uuid {
    sb.chassis_by_name(name).unwrap().uuid
}

fn private<'a>(sb: &'a SbSnapshot, name: &str) -> &'a hf_model::sb::ChassisPrivate {
    sb.chassis_private()
        .values()
        .find(|p| p.name == name)
        .unwrap()
}

#[test]
fn registers_claims_and_programs_only_its_datapaths() {
    let net = two_chassis();
    let sb = net.db_sb();
    // Registration rows, as ovn-controller writes them, plus holdfast's features.
    for (name, ip) in [("hv1", "192.168.0.1"), ("hv2", "192.168.0.2")] {
        let ch = sb.chassis_by_name(name).unwrap();
        assert_eq!(ch.hostname, format!("{name}.example"));
        let encaps: Vec<_> = ch.encaps.iter().map(|e| sb.get(*e).unwrap()).collect();
        assert_eq!(encaps.len(), 1);
        assert_eq!(encaps[0].type_.as_str(), "geneve");
        assert_eq!(encaps[0].ip, ip);
        assert_eq!(encaps[0].chassis_name, name);
        assert_eq!(ch.other_config["port-up-notif"], "true");
        assert_eq!(ch.other_config["mac-binding-timestamp"], "true");
        assert_eq!(ch.other_config["ovn-monitor-all"], "false");
        assert_eq!(
            ch.other_config["holdfast-features"],
            hf_expr::FeatureSet::level(hf_expr::Level::Hf2).to_list()
        );
        let p = private(&sb, name);
        assert_eq!(p.chassis.map(|c| c.uuid()), Some(ch.uuid));
    }
    // Claims: each VIF on the chassis whose datapath has it, and up once installed.
    let (h1, h2) = (chassis_uuid(&sb, "hv1"), chassis_uuid(&sb, "hv2"));
    for (port, ch) in [("vm1", h1), ("vm2", h2), ("vm3", h2), ("vm9", h2)] {
        assert_eq!(pb(&sb, port).chassis.map(|c| c.uuid()), Some(ch), "{port}");
        assert_eq!(pb(&sb, port).up, Some(true), "{port}");
    }
    // Programs: hv1 needs ls0, lr0 (through the patch) and ls1, never ls2.
    let want1: BTreeSet<String> = ["ls0", "lr0", "ls1"].map(String::from).into();
    assert_eq!(dp_names(&net.chassis[0].dp), want1);
    let want2: BTreeSet<String> = ["ls0", "lr0", "ls1", "ls2"].map(String::from).into();
    assert_eq!(dp_names(&net.chassis[1].dp), want2);
    // Conditional monitoring: hv1's view holds no row of ls2.
    let view = net.ctl(0).sb().model();
    let ls2 = view
        .datapath_binding()
        .values()
        .find(|d| d.external_ids.get("name").map(String::as_str) == Some("ls2"))
        .unwrap()
        .uuid;
    assert!(
        view.logical_flow()
            .values()
            .all(|f| f.logical_datapath.map(|d| d.uuid()) != Some(ls2)),
        "hv1 received logical flows of ls2"
    );
    assert!(
        view.port_binding_all_by_logical_port("vm9")
            .next()
            .is_none()
    );
    assert!(view.logical_flow().len() < sb.logical_flow().len());
    // The program's ports: vm1 local by name, vm2 remote at hv2's chassis id.
    let p = net.chassis[0].dp.program().unwrap();
    let ls0 = p.datapaths.iter().find(|d| d.name == "ls0").unwrap();
    let loc = |n: &str| {
        ls0.ports
            .iter()
            .find(|p| p.name == n)
            .unwrap()
            .location
            .clone()
    };
    assert_eq!(
        loc("vm1"),
        hf_datapath::proto::LocationMsg::Local("vm1".into())
    );
    let hv2_id = p.chassis_table.iter().find(|c| c.name == "hv2").unwrap().id;
    assert_eq!(loc("vm2"), hf_datapath::proto::LocationMsg::Remote(hv2_id));
    assert!(
        p.chassis_table
            .iter()
            .any(|c| c.name == "hv2" && c.ip == "192.168.0.2")
    );
    // Zones: never 0, distinct, and the datapath holds the same map.
    let zones = net.chassis[0].dp.zones();
    assert!(!zones.is_empty() && !zones.values().any(|z| *z == 0));
    assert_eq!(zones.values().collect::<BTreeSet<_>>().len(), zones.len());
    assert_eq!(zones, net.ctl(0).zones());
    // Nothing failed to compile.
    assert!(
        net.chassis[0].dp.flow_errors().is_empty(),
        "{:?}",
        net.chassis[0].dp.flow_errors()
    );
}

#[test]
fn nb_cfg_is_reported_after_install() {
    let mut net = two_chassis();
    let n = net.bump_nb_cfg();
    net.advance(Duration::from_millis(500));
    let sb = net.db_sb();
    for name in ["hv1", "hv2"] {
        let p = private(&sb, name);
        assert_eq!(p.nb_cfg, n, "{name}");
        assert!(p.nb_cfg_timestamp >= WALL0, "{name}");
    }
    assert_eq!(net.db_nb().nb_global().values().next().unwrap().hv_cfg, n);
    // A port added with nb_cfg bumped: reported only once the program with it is installed.
    net.chassis[0]
        .dp
        .add_port("vm4", Some([0x0a, 0, 0, 1, 0, 9]));
    net.run();
    let pushed = net.ctl(0).stats().programs_pushed;
    let mut ops = topology_port("ls0", "vm4", 14);
    ops.push(json!({"op": "mutate", "table": "NB_Global", "where": [],
        "mutations": [["nb_cfg", "+=", 1]]}));
    net.nb(Value::Array(ops));
    net.advance(Duration::from_millis(500));
    let n2 = net.db_nb().nb_global().values().next().unwrap().nb_cfg;
    assert_eq!(n2, n + 1);
    assert_eq!(net.db_nb().nb_global().values().next().unwrap().hv_cfg, n2);
    let p = net.chassis[0].dp.program().unwrap();
    assert!(p.nb_cfg >= n2);
    assert!(p.datapaths.iter().any(|d| {
        d.ports.iter().any(|x| {
            x.name == "vm4" && x.location == hf_datapath::proto::LocationMsg::Local("vm4".into())
        })
    }));
    let sb = net.db_sb();
    assert_eq!(
        pb(&sb, "vm4").chassis.map(|c| c.uuid()),
        Some(chassis_uuid(&sb, "hv1"))
    );
    // One program for the new port: the translation waited for the claim.
    assert_eq!(
        net.ctl(0).stats().programs_pushed,
        pushed + 1,
        "{:?}",
        net.ctl(0).stats()
    );
}

/// A port requested here (`options:requested-chassis`) is already placed here by the
/// translation, so its claim is pipelined with the install: while the claim's commit is on
/// its way (the SB replies to this chassis held back), the datapath already runs the port as
/// local; `nb_cfg` is reported only after the claim committed (one write at a time, as
/// ovn-controller); the claim's echo brings no second push. A controller that waited for the
/// claim before translating would show the datapath without the port while the reply is held.
#[test]
fn a_requested_port_is_installed_while_its_claim_commits() {
    let mut net = two_chassis();
    net.chassis[0]
        .dp
        .add_port("vm4", Some([0x0a, 0, 0, 1, 0, 9]));
    net.run();
    let n = net.bump_nb_cfg();
    net.advance(Duration::from_millis(500));
    assert_eq!(private(&net.db_sb(), "hv1").nb_cfg, n);
    let pushed = net.ctl(0).stats().programs_pushed;
    let translations = net.ctl(0).stats().translations;
    net.hold_replies.insert(0);
    let mut ops = topology_port("ls0", "vm4", 14);
    ops[0]["row"]["options"] = json!(["map", [["requested-chassis", "hv1"]]]);
    ops.push(json!({"op": "mutate", "table": "NB_Global", "where": [],
        "mutations": [["nb_cfg", "+=", 1]]}));
    net.nb(Value::Array(ops));
    net.run();
    let local = |net: &Net| {
        net.chassis[0].dp.program().is_some_and(|p| {
            p.datapaths.iter().any(|d| {
                d.ports.iter().any(|x| {
                    x.name == "vm4"
                        && x.location == hf_datapath::proto::LocationMsg::Local("vm4".into())
                })
            })
        })
    };
    assert!(
        local(&net),
        "the datapath does not run vm4 while its claim commits: {:?}",
        net.ctl(0).stats()
    );
    assert!(!net.held.is_empty(), "no SB reply was held");
    // The claim is in SB (the server committed it); its reply has not come.
    let sb = net.db_sb();
    assert_eq!(
        pb(&sb, "vm4").chassis.map(|c| c.uuid()),
        Some(chassis_uuid(&sb, "hv1"))
    );
    assert_eq!(
        private(&sb, "hv1").nb_cfg,
        n,
        "nb_cfg reported before the claim committed"
    );
    net.release_replies();
    net.advance(Duration::from_millis(500));
    let sb = net.db_sb();
    assert_eq!(private(&sb, "hv1").nb_cfg, n + 1);
    assert_eq!(pb(&sb, "vm4").up, Some(true));
    assert!(local(&net));
    let s = net.ctl(0).stats();
    assert_eq!(s.programs_pushed, pushed + 1, "{s:?}");
    // The claim's echo changed nothing the translation outputs: not translated again.
    assert_eq!(s.translations, translations + 1, "{s:?}");
    let sw = net.ctl(0).stopwatch();
    for stage in [
        // The parts of the input that brought the port (its CPU before the translation).
        "sb-apply",
        "sb-change-note",
        "conditions",
        "write-round",
        "claim-commit",
        "datapath-install",
        "nb-cfg-commit",
        "change-to-nb-cfg",
    ] {
        assert!(
            sw.samples(stage) >= 1,
            "{stage}: {}",
            sw.show(None).unwrap()
        );
    }
}

/// A port add travels as a delta (protocol version 4): every push after the first is one, its
/// frame is a small fraction of the whole program's, and what the datapaths run afterwards is
/// exactly what controllers sending whole programs give them (the same simulation without
/// deltas).
#[test]
fn a_port_add_travels_as_a_small_delta_and_runs_what_a_whole_program_gives() {
    let run = |deltas: bool| {
        let mut net = two_chassis_deltas(deltas);
        let s0 = net.ctl(0).stats().clone();
        let whole = hf_datapath::proto::encode(&hf_datapath::proto::ToDatapath::Program(Box::new(
            net.chassis[0].dp.program().unwrap().clone(),
        )))
        .unwrap()
        .len() as u64;
        net.chassis[0]
            .dp
            .add_port("vm4", Some([0x0a, 0, 0, 1, 0, 9]));
        net.nb(Value::Array(topology_port("ls0", "vm4", 14)));
        net.advance(Duration::from_millis(500));
        (net, s0, whole)
    };
    let (a, s0, whole) = run(true);
    let s = a.ctl(0).stats();
    let pushed = s.programs_pushed - s0.programs_pushed;
    assert!(pushed >= 1, "{s:?}");
    assert_eq!(s.deltas_pushed - s0.deltas_pushed, pushed, "{s:?}");
    assert_eq!(s.deltas_refused, 0, "{s:?}");
    assert!(
        s.last_push_bytes > 0 && s.last_push_bytes * 4 < whole,
        "delta of {} bytes against a whole program of {whole}",
        s.last_push_bytes
    );
    let p = a.chassis[0].dp.program().unwrap();
    assert!(p.datapaths.iter().any(|d| {
        d.ports.iter().any(|x| {
            x.name == "vm4" && x.location == hf_datapath::proto::LocationMsg::Local("vm4".into())
        })
    }));
    assert_eq!(a.ctl(0).running_program(), Some(p));
    let (b, ..) = run(false);
    assert_eq!(b.ctl(0).stats().deltas_pushed, 0);
    for i in 0..2 {
        assert_eq!(
            a.chassis[i].dp.program(),
            b.chassis[i].dp.program(),
            "{}: the program after deltas differs from the whole programs'",
            a.chassis[i].name
        );
        assert_eq!(a.chassis[i].dp.zones(), b.chassis[i].dp.zones());
    }
}

/// A datapath that runs another program than the controller thinks (replaced behind its back,
/// here by an import with another generation) answers the delta with BaseMismatch; the
/// controller then sends the whole program, which installs.
#[test]
fn a_refused_delta_base_brings_the_whole_program() {
    let mut net = two_chassis();
    let t = net.t;
    let mut s = net.chassis[0].dp.export_state(t);
    if let Some(p) = s.program.as_mut() {
        p.generation += 100;
    }
    net.chassis[0].dp.import_state(s, t).unwrap();
    let s0 = net.ctl(0).stats().clone();
    net.chassis[0]
        .dp
        .add_port("vm4", Some([0x0a, 0, 0, 1, 0, 9]));
    net.nb(Value::Array(topology_port("ls0", "vm4", 14)));
    net.advance(Duration::from_millis(500));
    let s1 = net.ctl(0).stats();
    assert_eq!(s1.deltas_refused - s0.deltas_refused, 1, "{s1:?}");
    assert!(
        s1.programs_pushed - s1.deltas_pushed > s0.programs_pushed - s0.deltas_pushed,
        "no whole program followed: {s1:?}"
    );
    let p = net.chassis[0].dp.program().unwrap();
    assert!(
        p.datapaths
            .iter()
            .any(|d| d.ports.iter().any(|x| x.name == "vm4"))
    );
    assert_eq!(net.ctl(0).running_program(), Some(p));
}

fn topology_port(sw: &str, name: &str, n: u8) -> Vec<Value> {
    vec![
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "newp",
            "row": {"name": name, "addresses": format!("00:00:00:00:00:{n:02x} 10.0.0.{n}")}}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", sw]],
            "mutations": [["ports", "insert", ["set", [["named-uuid", "newp"]]]]]}),
    ]
}

/// Adds port vm0 to ls0 after the others have their zones: it gets the next free zone, not the
/// one a fresh allocation in name order would give it (before vm1's), so every chassis's zone
/// map differs from the canonical one (checked). A controller that ignored the datapath's map
/// and allocated afresh would move zones.
/// Deletes logical switch port `name` from `switch` in NB.
fn delete_lsp(net: &mut Net, switch: &str, name: &str) {
    let uuid = net
        .db_nb()
        .logical_switch_port()
        .values()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} is in NB"))
        .uuid;
    net.nb(
        json!([{"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", switch]],
        "mutations": [["ports", "delete", ["set", [["uuid", uuid.to_string()]]]]]}]),
    );
}

fn add_late_port(net: &mut Net) {
    net.nb(Value::Array(topology_port("ls0", "vm0", 10)));
    net.advance(Duration::from_secs(1));
    for c in &net.chassis {
        let z = c.dp.zones();
        assert!(z.contains_key("lsp/vm0"), "{}: {z:?}", c.name);
        let canon: BTreeMap<String, u16> = z.keys().cloned().zip(1u16..).collect();
        assert_ne!(z, &canon, "{}: the zone map is the canonical one", c.name);
    }
}

#[test]
fn restart_with_the_same_datapath_pushes_nothing_and_keeps_zones() {
    let mut net = two_chassis();
    add_late_port(&mut net);
    let zones = net.chassis[0].dp.zones().clone();
    let generation = net.chassis[0].dp.generation();
    net.stop_controller(0);
    // The datapath keeps its program meanwhile.
    assert_eq!(net.chassis[0].dp.generation(), generation);
    net.advance(Duration::from_secs(1));
    net.start_controller(0);
    net.advance(Duration::from_secs(10));
    let c = net.ctl(0);
    assert!(c.dp_ready() && c.sb_synced());
    assert_eq!(c.stats().programs_pushed, 0, "{:?}", c.stats());
    assert_eq!(c.stats().deltas_pushed, 0, "{:?}", c.stats());
    assert!(c.stats().programs_unchanged >= 1);
    assert_eq!(c.stats().flush_requests, 0);
    assert_eq!(net.chassis[0].dp.generation(), generation);
    assert_eq!(net.chassis[0].dp.zones(), &zones);
    // And it still follows SB: nb_cfg is reported without a new program.
    let n = net.bump_nb_cfg();
    net.advance(Duration::from_millis(500));
    let sb = net.db_sb();
    let p = private(&sb, "hv1");
    assert_eq!(p.nb_cfg, n);
}

/// Local port ids are kept, not renumbered: ports added to hv1 in an order other than name
/// order, one deleted, one added after it, give ids that depend on the order of the changes
/// (checked: not the name-order ones), and no other port's id moves at any step. The ids never
/// leave the controller (the program names local ports), so a restarted controller, which
/// numbers its ports afresh in name order, still finds the datapath running exactly its
/// program: it pushes nothing. Then a port add moves no id of the new numbering either.
#[test]
fn a_restart_with_local_ids_out_of_name_order_pushes_nothing() {
    let mut net = two_chassis();
    let ids = |net: &Net| net.ctl(0).local_port_ids().cloned().unwrap_or_default();
    let mut seen: Vec<BTreeMap<String, u32>> = vec![ids(&net)];
    let add = |net: &mut Net, name: &str, n: u8| {
        net.chassis[0]
            .dp
            .add_port(name, Some([0x0a, 0, 0, 1, 0, n]));
        net.nb(Value::Array(topology_port("ls0", name, n)));
        net.advance(Duration::from_secs(1));
    };
    for (name, n) in [("vm7", 17), ("vm5", 15), ("vm6", 16)] {
        add(&mut net, name, n);
        seen.push(ids(&net));
    }
    delete_lsp(&mut net, "ls0", "vm5");
    // (Past the zone's grace: its flush is not what is tested here.)
    net.advance(Duration::from_secs(10));
    seen.push(ids(&net));
    add(&mut net, "vm4", 14);
    seen.push(ids(&net));
    // Every step keeps the ids of the ports that stay.
    for w in seen.windows(2) {
        for (n, id) in &w[1] {
            assert!(w[0].get(n).is_none_or(|was| was == id), "{n} moved: {w:?}");
        }
    }
    let ours: BTreeMap<String, u32> = [("vm1", 1), ("vm4", 3), ("vm6", 4), ("vm7", 2)]
        .map(|(n, i)| (n.to_string(), i))
        .into();
    assert_eq!(ids(&net), ours, "{seen:?}");
    let canonical: BTreeMap<String, u32> = ours.keys().cloned().zip(1u32..).collect();
    assert_ne!(ours, canonical);
    let generation = net.chassis[0].dp.generation();
    let program = net.chassis[0].dp.program().cloned();
    net.stop_controller(0);
    net.advance(Duration::from_secs(1));
    net.start_controller(0);
    net.advance(Duration::from_secs(10));
    let c = net.ctl(0);
    assert!(c.dp_ready() && c.sb_synced());
    assert_eq!(c.stats().programs_pushed, 0, "{:?}", c.stats());
    assert!(c.stats().programs_unchanged >= 1, "{:?}", c.stats());
    assert_eq!(net.chassis[0].dp.generation(), generation);
    assert_eq!(net.chassis[0].dp.program().cloned(), program);
    assert_eq!(ids(&net), canonical);
    // From the new numbering on, a port add moves nothing either.
    add(&mut net, "vm3a", 18);
    let after = ids(&net);
    assert!(
        canonical.iter().all(|(n, id)| after.get(n) == Some(id)),
        "{after:?}"
    );
    assert_eq!(after.get("vm3a"), Some(&5));
    assert_eq!(
        net.ctl(0).stats().deltas_pushed,
        1,
        "{:?}",
        net.ctl(0).stats()
    );
}

#[test]
fn rebuilt_databases_with_new_uuids_flush_nothing_and_keep_zones() {
    let mut net = two_chassis();
    add_late_port(&mut net);
    let before: Vec<BTreeMap<String, u16>> =
        net.chassis.iter().map(|c| c.dp.zones().clone()).collect();
    let old_sb = net.db_sb();
    // Rebuild: a fresh server (other UUIDs) with the same NB; the controllers reconnect (and
    // restart) at once and see an SB with only SB_Global until northd comes back a second later.
    net.stop_northd();
    let sids: Vec<SessionId> = net.chassis.iter().filter_map(|c| c.sid).collect();
    net.core = new_core(12345);
    net.routes.clear();
    net.writer = net.core.connect(snow(net.t));
    net.routes.insert(net.writer, Target::Writer);
    for (i, c) in net.chassis.iter_mut().enumerate() {
        c.sid = None;
        if let Some(ctl) = c.ctl.as_mut() {
            ctl.handle_sb_disconnected(net.t);
        }
        let _ = i;
    }
    let _ = sids;
    // Every controller restarts too (OVN-Kubernetes's upgrade restarts ovn-controller): the new
    // ones learn the zones from their datapaths only.
    for i in 0..net.chassis.len() {
        net.stop_controller(i);
        net.start_controller(i);
    }
    net.nb(json!([{"op": "insert", "table": "NB_Global", "row": {}}]));
    net.sb(json!([{"op": "insert", "table": "SB_Global", "row": {}}]));
    net.nb(topology_ops());
    net.nb(Value::Array(topology_port("ls0", "vm0", 10)));
    net.advance(Duration::from_secs(1));
    net.start_northd();
    net.advance(Duration::from_secs(10));
    let new_sb = net.db_sb();
    let old_dp: BTreeSet<_> = old_sb.datapath_binding().keys().collect();
    assert!(
        new_sb
            .datapath_binding()
            .keys()
            .all(|u| !old_dp.contains(u)),
        "the rebuilt SB must have new UUIDs"
    );
    for (i, c) in net.chassis.iter().enumerate() {
        let ctl = c.ctl.as_ref().unwrap();
        assert_eq!(ctl.stats().flush_requests, 0, "{}", c.name);
        assert_eq!(c.dp.zones(), &before[i], "{}", c.name);
        assert!(ctl.sb_synced() && ctl.dp_ready());
    }
    // Re-registered and re-claimed on the new SB.
    let h1 = chassis_uuid(&new_sb, "hv1");
    assert_eq!(pb(&new_sb, "vm1").chassis.map(|c| c.uuid()), Some(h1));
    assert_eq!(dp_names(&net.chassis[0].dp).len(), 3);
}

#[test]
fn a_deleted_port_has_its_zone_flushed_once() {
    let mut net = two_chassis();
    for c in &net.chassis {
        assert!(c.dp.zones().contains_key("lsp/vm2"), "{}", c.name);
    }
    let zone_vm1 = net.chassis[0].dp.zones()["lsp/vm1"];
    // Delete vm2 from NB (its local port stays on hv2's datapath: only SB decides).
    delete_lsp(&mut net, "ls0", "vm2");
    // The controllers see the deletion at once (no latency in this harness); the zone is held
    // for exactly the grace (5 s), then flushed at the next tick (100 ms).
    let deleted = net.t;
    let grace = Tuning::default().flush_grace;
    let flushed_at = flushed_at(&mut net, "lsp/vm2", Duration::from_secs(11));
    for (c, at) in net.chassis.iter().zip(&flushed_at) {
        let held = at.expect("flushed") - deleted;
        assert!(
            held >= grace && held <= grace + TICK,
            "{}: held {held:?}, not within [{grace:?}, {grace:?} + {TICK:?}]",
            c.name
        );
    }
    for c in &net.chassis {
        let ctl = c.ctl.as_ref().unwrap();
        assert!(!c.dp.zones().contains_key("lsp/vm2"), "{}", c.name);
        assert_eq!(ctl.stats().flush_requests, 1, "{}", c.name);
        assert_eq!(ctl.stats().zones_flushed, 1, "{}", c.name);
        assert!(!ctl.zones().contains_key("lsp/vm2"));
    }
    net.advance(Duration::from_secs(10));
    for c in &net.chassis {
        assert_eq!(
            c.ctl.as_ref().unwrap().stats().flush_requests,
            1,
            "{}",
            c.name
        );
    }
    // The other zones did not move.
    assert_eq!(net.chassis[0].dp.zones()["lsp/vm1"], zone_vm1);
}

/// The harness's poll interval ([`Net::advance`]'s step).
const TICK: Duration = Duration::from_millis(100);

/// Advances tick by tick up to `limit`; per chassis, when `zone` left its datapath's zone map.
fn flushed_at(net: &mut Net, zone: &str, limit: Duration) -> Vec<Option<Duration>> {
    let mut at = vec![None; net.chassis.len()];
    let end = net.t + limit;
    while net.t < end {
        net.advance(TICK);
        for (i, c) in net.chassis.iter().enumerate() {
            if at[i].is_none() && !c.dp.zones().contains_key(zone) {
                at[i] = Some(net.t);
            }
        }
    }
    at
}

/// A zone held through its grace when the controller restarts is not leaked: the restarted
/// controller learns from the datapath's zone map that the port is gone (it watches the name
/// in SB) and flushes it one grace after its own first complete view (it does not know how
/// long the old one had waited). The other zones stay.
#[test]
fn a_zone_held_across_a_controller_restart_is_flushed_after_the_grace() {
    let mut net = two_chassis();
    let before: Vec<BTreeMap<String, u16>> =
        net.chassis.iter().map(|c| c.dp.zones().clone()).collect();
    delete_lsp(&mut net, "ls0", "vm2");
    net.advance(Duration::from_secs(2));
    for i in 0..net.chassis.len() {
        assert!(net.chassis[i].dp.zones().contains_key("lsp/vm2"));
        net.stop_controller(i);
        net.start_controller(i);
    }
    let restarted = net.t;
    let grace = Tuning::default().flush_grace;
    let at = flushed_at(&mut net, "lsp/vm2", Duration::from_secs(12));
    for (i, c) in net.chassis.iter().enumerate() {
        let ctl = c.ctl.as_ref().unwrap();
        let held = at[i].unwrap_or_else(|| {
            panic!(
                "{}: lsp/vm2 leaked after the restart: {:?}\n{}",
                c.name,
                c.dp.zones(),
                ctl.status()
            )
        }) - restarted;
        assert!(
            held >= grace && held <= grace + TICK,
            "{}: flushed {held:?} after the restart, not within [{grace:?}, {grace:?} + {TICK:?}]",
            c.name
        );
        assert_eq!(ctl.stats().flush_requests, 1, "{}", c.name);
        assert_eq!(ctl.stats().zones_flushed, 1, "{}", c.name);
        let mut want = before[i].clone();
        want.remove("lsp/vm2");
        assert_eq!(c.dp.zones(), &want, "{}", c.name);
    }
}

/// Zones exhausted: no program with a zone-less object is pushed (never zone 0); the
/// controller says so in its status and in `Chassis_Private`, and recovers once zones are
/// freed (here: the names that held them belong to routers that do not exist, flushed after
/// the grace).
#[test]
fn exhausted_zones_fail_closed_and_are_reported() {
    let mut net = two_chassis();
    net.stop_controller(0);
    // A new datapath process whose zone map (from local storage) holds every zone.
    let old = &net.chassis[0].dp;
    let mut zones: BTreeMap<String, u16> = BTreeMap::new();
    for z in 1..=u16::MAX {
        zones.insert(format!("lr/ghost{z}/dnat"), z);
    }
    let mut cfg = DatapathConfig::new("hv1", old.config().tunnel_ip);
    cfg.zones = zones;
    let mut dp = Datapath::new(cfg);
    for p in old.ports() {
        dp.add_port(&p.name, p.mac);
    }
    net.chassis[0].dp = dp;
    net.start_controller(0);
    net.advance(Duration::from_secs(1));
    let c = &net.chassis[0];
    assert!(
        c.dp.program().is_none(),
        "a program was pushed without zones"
    );
    let status = c.ctl.as_ref().unwrap().status();
    assert!(
        status.contains("Zone error: zone-exhausted: no conntrack zone for"),
        "{status}"
    );
    assert!(
        c.logs
            .iter()
            .any(|(l, s)| *l == Level::Err && s.starts_with("zone-exhausted")),
        "{:?}",
        c.logs
    );
    let sb = net.db_sb();
    let pr = private(&sb, "hv1");
    assert!(
        pr.external_ids
            .get("holdfast-zone-error")
            .is_some_and(|e| e.starts_with("zone-exhausted")),
        "{:?}",
        pr.external_ids
    );
    // The ghosts are gone from SB: flushed after the grace, and the program goes in.
    net.advance(Duration::from_secs(6));
    let c = &net.chassis[0];
    let p = c.dp.program().expect("a program once zones are free");
    assert!(p.zones.values().all(|z| *z != 0));
    assert!(!c.ctl.as_ref().unwrap().status().contains("Zone error"));
    let sb = net.db_sb();
    let pr = private(&sb, "hv1");
    assert!(!pr.external_ids.contains_key("holdfast-zone-error"));
}

#[test]
fn a_bad_flow_keeps_its_last_good_version_and_is_reported_once() {
    let mut net = two_chassis();
    // northd would repair SB: stop it, then break two flows of ls0 the same way.
    net.stop_northd();
    let sb = net.db_sb();
    let ls0 = sb
        .datapath_binding()
        .values()
        .find(|d| d.external_ids.get("name").map(String::as_str) == Some("ls0"))
        .unwrap()
        .uuid;
    let mut victims: Vec<&hf_model::sb::LogicalFlow> = sb
        .logical_flow()
        .values()
        .filter(|f| {
            f.logical_datapath.map(|d| d.uuid()) == Some(ls0)
                && &*f.actions == "next;"
                && f.external_ids.contains_key("hf-flow-id")
        })
        .collect();
    victims.sort_by_key(|f| f.uuid);
    assert!(victims.len() >= 2);
    let victims: Vec<(uuid::Uuid, String)> = victims[..2]
        .iter()
        .map(|f| (f.uuid, f.external_ids["hf-flow-id"].clone()))
        .collect();
    let ops: Vec<Value> = victims
        .iter()
        .map(|(u, _)| {
            json!({"op": "update", "table": "Logical_Flow",
                "where": [["_uuid", "==", ["uuid", u.to_string()]]],
                "row": {"actions": "frobnicate(reg0);"}})
        })
        .collect();
    net.sb(Value::Array(ops));
    net.advance(Duration::from_secs(1));
    let c = &net.chassis[0];
    // The datapath runs the last good text of both.
    let errs = c.dp.flow_errors();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs.iter().all(|e| e.kept_last_good), "{errs:?}");
    let p = c.dp.program().unwrap();
    for (_, id) in &victims {
        let f = p
            .datapaths
            .iter()
            .flat_map(|d| d.flows.iter())
            .find(|f| *f.id == *format!("hf-flow-id:{id}"))
            .unwrap();
        assert_eq!(&*f.actions, "frobnicate(reg0);");
        assert_eq!(f.last_good.as_ref().map(|(_, a)| &**a), Some("next;"));
    }
    // Logged once per distinct cause, with the count.
    let ctl = c.ctl.as_ref().unwrap();
    let causes = ctl.flow_errors().causes();
    let lines: Vec<&String> = c
        .logs
        .iter()
        .filter(|(l, s)| *l == Level::Warn && s.starts_with("flow error:"))
        .map(|(_, s)| s)
        .collect();
    assert_eq!(lines.len(), causes.len(), "{lines:?}");
    assert!(
        causes.len() == 1 && lines[0].contains("2 flow(s)"),
        "{lines:?}"
    );
    assert!(
        ctl.status().contains("Flow errors: 2 flow(s), 1 cause(s)"),
        "{}",
        ctl.status()
    );
    // And in Chassis_Private.external_ids.
    let sb = net.db_sb();
    let pr = private(&sb, "hv1");
    assert_eq!(
        pr.external_ids
            .get("holdfast-flow-errors")
            .map(String::as_str),
        Some("2")
    );
    assert!(pr.external_ids["holdfast-flow-error-1"].ends_with("(2 flows)"));
    // More time and more SB changes do not log it again.
    let n = net.db_sb().sb_global().values().next().unwrap().nb_cfg;
    net.sb(json!([{"op": "update", "table": "SB_Global", "where": [],
        "row": {"nb_cfg": n + 1}}]));
    net.advance(Duration::from_secs(5));
    let c = &net.chassis[0];
    let again = c
        .logs
        .iter()
        .filter(|(_, s)| s.starts_with("flow error:"))
        .count();
    assert_eq!(again, 1);
    // Repairing the text clears the report.
    for (u, _) in &victims {
        net.sb(json!([{"op": "update", "table": "Logical_Flow",
            "where": [["_uuid", "==", ["uuid", u.to_string()]]], "row": {"actions": "next;"}}]));
    }
    net.advance(Duration::from_secs(1));
    let sb = net.db_sb();
    let pr = private(&sb, "hv1");
    assert!(!pr.external_ids.contains_key("holdfast-flow-errors"));
    assert!(net.chassis[0].dp.flow_errors().is_empty());
}

#[test]
fn a_deleted_chassis_row_is_registered_again() {
    let mut net = two_chassis();
    let sb = net.db_sb();
    let h1 = chassis_uuid(&sb, "hv1");
    let pr = private(&sb, "hv1").uuid;
    net.sb(json!([
        {"op": "delete", "table": "Chassis_Private", "where": [["_uuid", "==", ["uuid", pr.to_string()]]]},
        {"op": "delete", "table": "Chassis", "where": [["_uuid", "==", ["uuid", h1.to_string()]]]}
    ]));
    net.advance(Duration::from_secs(1));
    let sb = net.db_sb();
    let again = chassis_uuid(&sb, "hv1");
    assert_ne!(again, h1);
    assert!(
        sb.chassis_private()
            .values()
            .any(|p| p.name == "hv1" && p.chassis.map(|c| c.uuid()) == Some(again))
    );
    assert_eq!(pb(&sb, "vm1").chassis.map(|c| c.uuid()), Some(again));
}

#[test]
fn a_learned_neighbour_is_written_to_mac_binding() {
    let mut net = two_chassis();
    // vm1 sends lr0 an ARP reply (as if answering the router's request); lr0 learns vm1
    // (put_arp) in hv1's datapath, which reports it; the controller writes MAC_Binding.
    let vm1_mac = [0u8, 0, 0, 0, 0, 11];
    let rtr_mac = [0u8, 0, 0, 0, 0xff, 1];
    let mut frame = Vec::new();
    frame.extend_from_slice(&rtr_mac);
    frame.extend_from_slice(&vm1_mac);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2]);
    frame.extend_from_slice(&vm1_mac);
    frame.extend_from_slice(&[10, 0, 0, 11]);
    frame.extend_from_slice(&rtr_mac);
    frame.extend_from_slice(&[10, 0, 0, 1]);
    let t = net.t;
    net.chassis[0].dp.handle_port_frame("vm1", &frame, t);
    net.run();
    net.advance(Duration::from_millis(500));
    let sb = net.db_sb();
    let lr0 = sb
        .datapath_binding()
        .values()
        .find(|d| d.external_ids.get("name").map(String::as_str) == Some("lr0"))
        .unwrap()
        .uuid;
    let rows: Vec<_> = sb
        .mac_binding()
        .values()
        .filter(|m| m.ip == "10.0.0.11")
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "{:?}\n{:?}\n{:?}",
        sb.mac_binding(),
        net.chassis[0].logs,
        net.chassis[0].dp.counters()
    );
    assert_eq!(rows[0].mac, "00:00:00:00:00:0b");
    assert_eq!(rows[0].logical_port, "lr0-ls0");
    assert_eq!(rows[0].datapath.uuid(), lr0);
    assert!(rows[0].timestamp >= WALL0);
    // The same neighbour again writes nothing new.
    let ts = rows[0].timestamp;
    net.chassis[0].dp.handle_port_frame("vm1", &frame, net.t);
    net.advance(Duration::from_millis(500));
    let sb = net.db_sb();
    let rows: Vec<_> = sb
        .mac_binding()
        .values()
        .filter(|m| m.ip == "10.0.0.11")
        .collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].timestamp, ts);
}

#[test]
fn requested_chassis_and_additional_chassis_are_respected() {
    let mut net = two_chassis();
    // vm5 exists on both datapaths; NB asks for hv2 first, then hv1 as the additional chassis.
    net.chassis[0]
        .dp
        .add_port("vm5", Some([0x0a, 0, 0, 1, 0, 5]));
    net.chassis[1]
        .dp
        .add_port("vm5", Some([0x0a, 0, 0, 2, 0, 5]));
    let mut ops = topology_port("ls0", "vm5", 15);
    ops[0]["row"]["options"] = json!(["map", [["requested-chassis", "hv2,hv1"]]]);
    net.nb(Value::Array(ops));
    net.advance(Duration::from_secs(1));
    let sb = net.db_sb();
    let (h1, h2) = (chassis_uuid(&sb, "hv1"), chassis_uuid(&sb, "hv2"));
    let p = pb(&sb, "vm5");
    assert_eq!(p.chassis.map(|c| c.uuid()), Some(h2));
    let extra: Vec<_> = p.additional_chassis.iter().map(|c| c.uuid()).collect();
    assert_eq!(extra, vec![h1]);
    // Requested on hv2 only: hv1 lets go.
    net.nb(
        json!([{"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", "vm5"]],
        "row": {"options": ["map", [["requested-chassis", "hv2"]]]}}]),
    );
    net.advance(Duration::from_secs(1));
    let sb = net.db_sb();
    let p = pb(&sb, "vm5");
    assert_eq!(p.chassis.map(|c| c.uuid()), Some(h2));
    assert!(p.additional_chassis.is_empty());
    // The local port leaves hv2: released.
    net.chassis[1].dp.remove_port("vm5");
    net.run();
    net.advance(Duration::from_secs(1));
    let sb = net.db_sb();
    assert_eq!(pb(&sb, "vm5").chassis, None);
    assert_eq!(pb(&sb, "vm5").up, Some(false));
}

#[test]
fn bad_datapath_bytes_are_errors_not_panics() {
    use hf_datapath::proto::{FromDatapath, encode};
    let t = Duration::ZERO;
    let mut c = new_controller("hv1", "192.168.0.1", t);
    c.handle_dp_connected(t);
    assert!(c.poll_dp_transmit().is_some(), "the hello goes out");
    // A frame whose length is absurd, then one that does not decode: an error each, no panic.
    c.handle_dp_bytes(&u32::MAX.to_be_bytes(), t);
    assert!(!c.dp_ready());
    let logs: Vec<_> = std::iter::from_fn(|| c.poll_log()).collect();
    assert!(
        logs.iter()
            .any(|(l, s)| *l == Level::Err && s.contains("datapath connection")),
        "{logs:?}"
    );
    c.handle_dp_connected(t);
    c.handle_dp_bytes(&[0, 0, 0, 3, 0xff, 0xfe, 0xfd], t);
    assert!(!c.dp_ready());
    // A datapath that speaks another version is not used.
    c.handle_dp_connected(t);
    let hello = FromDatapath::Hello {
        version: hf_datapath::proto::PROTOCOL_VERSION + 1,
        chassis: "hv1".into(),
        ports: vec![],
        zones: BTreeMap::new(),
        program: None,
    };
    c.handle_dp_bytes(&encode(&hello).unwrap(), t);
    assert!(!c.dp_ready());
    let logs: Vec<_> = std::iter::from_fn(|| c.poll_log()).collect();
    assert!(
        logs.iter()
            .any(|(l, s)| *l == Level::Err && s.contains("protocol version")),
        "{logs:?}"
    );
    // And the right one is.
    c.handle_dp_connected(t);
    let hello = FromDatapath::Hello {
        version: hf_datapath::proto::PROTOCOL_VERSION,
        chassis: "hv1".into(),
        ports: vec![],
        zones: BTreeMap::new(),
        program: None,
    };
    c.handle_dp_bytes(&encode(&hello).unwrap(), t);
    assert!(c.dp_ready());
    // Garbage from SB before anything is connected changes nothing.
    c.handle_sb_bytes(b"}{ not json", t);
    assert!(!c.sb_synced());
}

#[test]
fn gateway_ports_are_claimed_by_the_active_gateway() {
    let mut net = two_chassis();
    // lr0-ls1 becomes a distributed gateway port on hv2 (priority 20).
    net.nb(json!([
        {"op": "insert", "table": "Gateway_Chassis", "uuid-name": "g2",
         "row": {"name": "lr0-ls1-hv2", "chassis_name": "hv2", "priority": 20}},
        {"op": "mutate", "table": "Logical_Router_Port", "where": [["name", "==", "lr0-ls1"]],
         "mutations": [["gateway_chassis", "insert", ["set", [["named-uuid", "g2"]]]]]}
    ]));
    net.advance(Duration::from_secs(1));
    let sb = net.db_sb();
    let cr = sb
        .port_binding()
        .values()
        .find(|p| p.type_ == "chassisredirect")
        .unwrap_or_else(|| panic!("no chassisredirect port: {:?}", sb.port_binding()));
    let name = cr.logical_port.clone();
    assert_eq!(cr.chassis.map(|c| c.uuid()), Some(chassis_uuid(&sb, "hv2")));
    // hv1 with a higher priority takes over; hv2 lets go.
    net.nb(json!([
        {"op": "insert", "table": "Gateway_Chassis", "uuid-name": "g1",
         "row": {"name": "lr0-ls1-hv1", "chassis_name": "hv1", "priority": 30}},
        {"op": "mutate", "table": "Logical_Router_Port", "where": [["name", "==", "lr0-ls1"]],
         "mutations": [["gateway_chassis", "insert", ["set", [["named-uuid", "g1"]]]]]}
    ]));
    // (BFD between the two gateways comes up first: 1 s packets while down.)
    net.advance(Duration::from_secs(4));
    let sb = net.db_sb();
    assert_eq!(
        pb(&sb, &name).chassis.map(|c| c.uuid()),
        Some(chassis_uuid(&sb, "hv1"))
    );
    // And the programs agree: resident on hv1, remote on hv2.
    let port = |i: usize| {
        net.chassis[i]
            .dp
            .program()
            .unwrap()
            .datapaths
            .iter()
            .flat_map(|d| d.ports.iter())
            .find(|p| p.name == name)
            .cloned()
            .unwrap()
    };
    assert!(port(0).resident);
    assert!(!port(1).resident);
}

#[test]
fn a_refused_sb_write_is_logged_once_and_retried() {
    let mut net = two_chassis();
    // hv3 claims hv1's tunnel IP: the Encap (type, ip) index refuses its registration.
    let i = net.add_chassis("hv3", [192, 168, 0, 1], &[]);
    net.advance(Duration::from_secs(5));
    let c = &net.chassis[i];
    let ctl = c.ctl.as_ref().unwrap();
    assert!(net.db_sb().chassis_by_name("hv3").is_none());
    assert!(ctl.stats().sb_write_failures >= 3, "{:?}", ctl.stats());
    let lines = c
        .logs
        .iter()
        .filter(|(l, s)| *l == Level::Warn && s.starts_with("SB write failed"))
        .count();
    assert_eq!(lines, 1, "{:?}", c.logs);
    assert!(ctl.status().contains("Chassis: hv3 (not registered)"));
}

/// A translation that is not pushed still changed what the datapath must get: the next push's
/// delta hint is the union of every translation's `touched` since the running program, not
/// only the latest one's. Here the held translation (zones exhausted by a port on ls1) also
/// adds an ACL on ls0; the next translation only takes the ls1 port away again (it touches
/// ls1, not ls0). A controller that kept only the latest translation's `touched` would compare
/// and send ls1 alone: the ACL would never reach the datapath (or the push would be skipped
/// as unchanged).
#[test]
fn a_change_in_a_translation_that_was_not_pushed_reaches_the_datapath() {
    let mut net = two_chassis();
    net.stop_controller(0);
    // A new datapath process whose zone map holds every zone but the ones hv1's objects have
    // now: the running program fits, any new object does not.
    let old = &net.chassis[0].dp;
    let mut zones = old.zones().clone();
    let taken: BTreeSet<u16> = zones.values().copied().collect();
    for z in (1..=u16::MAX).filter(|z| !taken.contains(z)) {
        zones.insert(format!("lr/ghost{z}/dnat"), z);
    }
    let mut cfg = DatapathConfig::new("hv1", old.config().tunnel_ip);
    cfg.zones = zones;
    let mut dp = Datapath::new(cfg);
    for p in old.ports() {
        dp.add_port(&p.name, p.mac);
    }
    net.chassis[0].dp = dp;
    net.start_controller(0);
    // Less than the grace: the ghosts stay.
    net.advance(Duration::from_secs(1));
    let acl_on_ls0 = |net: &Net| {
        net.chassis[0].dp.program().is_some_and(|p| {
            p.datapaths
                .iter()
                .any(|d| d.name == "ls0" && d.flows.iter().any(|f| f.matches.contains("10.9.9.9")))
        })
    };
    assert!(
        net.chassis[0].dp.program().is_some(),
        "no program installed"
    );
    assert!(!acl_on_ls0(&net));
    let s0 = net.ctl(0).stats().clone();
    // Held: an ACL on ls0 and a port on ls1 that gets no zone.
    let mut ops = vec![
        json!({"op": "insert", "table": "ACL", "uuid-name": "acl",
            "row": {"direction": "from-lport", "priority": 1001,
                    "match": "ip4.src == 10.9.9.9", "action": "drop"}}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "ls0"]],
            "mutations": [["acls", "insert", ["set", [["named-uuid", "acl"]]]]]}),
    ];
    ops.extend(topology_port("ls1", "vm5", 15));
    net.nb(Value::Array(ops));
    let s1 = net.ctl(0).stats().clone();
    assert!(s1.translations > s0.translations, "{s1:?}");
    assert_eq!(s1.programs_pushed, s0.programs_pushed, "{s1:?}");
    assert!(
        net.ctl(0).status().contains("Zone error: zone-exhausted"),
        "{}",
        net.ctl(0).status()
    );
    assert!(!acl_on_ls0(&net));
    // The port goes again: zones suffice, and the ACL must arrive with this push.
    delete_lsp(&mut net, "ls1", "vm5");
    let s2 = net.ctl(0).stats().clone();
    assert!(
        s2.deltas_pushed > s1.deltas_pushed,
        "not pushed as a delta: {s2:?}"
    );
    assert!(
        acl_on_ls0(&net),
        "the ACL of the held translation did not reach the datapath"
    );
    assert_eq!(
        net.ctl(0).running_program(),
        net.chassis[0].dp.program(),
        "the controller's idea of the running program is not what runs"
    );
}

/// A seeded SplitMix64 (the property test below).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One random SB change for `net` (northd stopped), chosen from `a`'s view (the two nets
/// hold the same rows; flows are found again by identity): a flow's match or actions set to
/// another text (sometimes one that does not compile, so last good versions come into play),
/// a flow removed, a flow added, or an address set changed.
fn random_sb_op(rng: &mut Rng, a: &SbSnapshot, net: &Net, step: usize) -> Value {
    let flows: Vec<&hf_model::sb::LogicalFlow> = {
        let mut v: Vec<_> = a
            .logical_flow()
            .values()
            .filter(|f| f.external_ids.contains_key("hf-flow-id") && f.logical_datapath.is_some())
            .collect();
        v.sort_by_key(|f| f.external_ids["hf-flow-id"].clone());
        v
    };
    let pick = flows[rng.below(flows.len())];
    let id = pick.external_ids["hf-flow-id"].clone();
    let sb = net.db_sb();
    let uuid = sb
        .logical_flow()
        .values()
        .find(|f| f.external_ids.get("hf-flow-id") == Some(&id))
        .unwrap()
        .uuid;
    let by_uuid = json!([["_uuid", "==", ["uuid", uuid.to_string()]]]);
    const ACTIONS: [&str; 4] = ["next;", "drop;", "reg0 = 1; next;", "frobnicate(reg0);"];
    const MATCHES: [&str; 4] = ["1", "ip4", "ip4.src == 10.9.9.9", "ip4 &&"];
    match rng.below(6) {
        0 | 1 => json!([{"op": "update", "table": "Logical_Flow", "where": by_uuid,
            "row": {"actions": ACTIONS[rng.below(ACTIONS.len())]}}]),
        2 => json!([{"op": "update", "table": "Logical_Flow", "where": by_uuid,
            "row": {"match": MATCHES[rng.below(MATCHES.len())]}}]),
        3 => json!([{"op": "delete", "table": "Logical_Flow", "where": by_uuid}]),
        4 => {
            let dp = pick.logical_datapath.map(|d| d.uuid()).unwrap();
            json!([{"op": "insert", "table": "Logical_Flow",
                "row": {"logical_datapath": ["uuid", dp.to_string()],
                        "pipeline": "ingress", "table_id": pick.table_id,
                        "priority": 7, "match": format!("reg1 == {step}"),
                        "actions": ACTIONS[rng.below(3)],
                        "external_ids": ["map", [["hf-flow-id", format!("rnd{step}")],
                                                 ["stage-name", "ls_in_acl"]]]}}])
        }
        _ => json!([{"op": "insert", "table": "Address_Set",
            "row": {"name": format!("as{step}"), "addresses": ["set", ["10.1.1.1"]]}}]),
    }
}

/// The daemon's message build reusing untouched datapaths' messages
/// (`Tuning::incremental_messages`, `program_msg_reusing`) gives what building every message
/// whole (`program_msg`) gives: two identical clusters, one controller kind each, take the
/// same seeded random SB changes, and after every step each chassis's running program (the
/// controller's, and the datapath's) is the same in both. Flow texts change under a stable
/// identity and sometimes do not compile, so the last good answers change between builds of
/// datapaths the next translation does not touch (the reusing build must not keep their stale
/// `last_good` fields).
#[test]
fn incremental_messages_equal_whole_builds_over_random_changes() {
    let cluster = |reuse: bool| {
        let mut net = Net::new();
        net.reuse = reuse;
        net.nb(topology_ops());
        net.add_chassis("hv1", [192, 168, 0, 1], &["vm1"]);
        net.add_chassis("hv2", [192, 168, 0, 2], &["vm2", "vm3", "vm9"]);
        net.advance(Duration::from_secs(1));
        net.stop_northd();
        net
    };
    let mut reused = 0;
    for seed in 1..=3u64 {
        let mut a = cluster(true);
        let mut b = cluster(false);
        let mut rng = Rng(seed);
        for step in 0..30 {
            let view = a.db_sb();
            let mut r2 = Rng(rng.0);
            let op_a = random_sb_op(&mut rng, &view, &a, step);
            let op_b = random_sb_op(&mut r2, &view, &b, step);
            a.sb(op_a.clone());
            b.sb(op_b);
            a.advance(Duration::from_millis(200));
            b.advance(Duration::from_millis(200));
            for i in 0..2 {
                let what = format!(
                    "seed {seed}, step {step}, {}, after {op_a}",
                    a.chassis[i].name
                );
                assert_eq!(
                    a.ctl(i).running_program(),
                    b.ctl(i).running_program(),
                    "{what}: the controller's program differs from the whole build's"
                );
                assert_eq!(
                    a.chassis[i].dp.program(),
                    b.chassis[i].dp.program(),
                    "{what}: the datapath's program differs"
                );
                assert_eq!(a.chassis[i].dp.flow_errors(), b.chassis[i].dp.flow_errors());
            }
        }
        for i in 0..2 {
            assert!(
                a.ctl(i).stats().programs_pushed > 5,
                "{:?}",
                a.ctl(i).stats()
            );
            assert_eq!(b.ctl(i).stats().datapath_messages_reused, 0);
            reused += a.ctl(i).stats().datapath_messages_reused;
        }
    }
    assert!(
        reused > 0,
        "the reusing build never reused a datapath's message"
    );
}

/// Each flow text is held once by the controller: after a port add (some datapaths built
/// again, the others reused), every flow of the running program has its texts shared with the
/// last good store (the same allocation, not an equal copy).
#[test]
fn flow_texts_are_held_once_by_the_program_and_the_last_good_store() {
    use hf_controller::program_msg::LastGoodLookup;
    let mut net = two_chassis();
    net.chassis[0]
        .dp
        .add_port("vm4", Some([0x0a, 0, 0, 1, 0, 9]));
    net.nb(Value::Array(topology_port("ls0", "vm4", 14)));
    net.advance(Duration::from_millis(500));
    let ctl = net.ctl(0);
    assert!(
        ctl.stats().datapath_messages_reused > 0,
        "{:?}",
        ctl.stats()
    );
    let p = ctl.running_program().unwrap();
    let lg = ctl.flow_errors();
    let mut shared = 0;
    for d in &p.datapaths {
        for f in &d.flows {
            if let Some((m, a)) = lg.last_good(&d.name, &f.id) {
                assert!(
                    Arc::ptr_eq(m, &f.matches) && Arc::ptr_eq(a, &f.actions),
                    "flow {} of {}: the store holds its own copy",
                    f.id,
                    d.name
                );
                shared += 1;
            }
        }
    }
    assert!(shared > 100, "{shared} flows in the store");
}

/// A `Logical_DP_Group` row that arrives alone (no port or datapath changed) moves the
/// `Logical_Flow` condition: the flows of a new group naming a local datapath reach the
/// program (the conditions are computed again over the local datapaths as they were), and a
/// group of remote datapaths brings nothing.
#[test]
fn a_new_datapath_group_brings_its_flows() {
    let mut net = two_chassis();
    // northd would take the rows out again: stop it.
    net.stop_northd();
    let sb = net.db_sb();
    let dp = |name: &str| {
        sb.datapath_binding()
            .values()
            .find(|d| d.external_ids.get("name").map(String::as_str) == Some(name))
            .unwrap()
            .uuid
    };
    let (ls0, ls2) = (dp("ls0"), dp("ls2"));
    let flow = |group: &str, ip: &str| {
        json!({"op": "insert", "table": "Logical_Flow",
            "row": {"logical_dp_group": ["named-uuid", group], "pipeline": "ingress",
                    "table_id": 0, "priority": 1,
                    "match": format!("ip4.dst == {ip}"), "actions": "drop;",
                    "external_ids": ["map", [["stage-name", "ls_in_check_port_sec"]]]}})
    };
    net.sb(json!([
        {"op": "insert", "table": "Logical_DP_Group", "uuid-name": "g_here",
         "row": {"datapaths": ["set", [["uuid", ls0.to_string()], ["uuid", ls2.to_string()]]]}},
        {"op": "insert", "table": "Logical_DP_Group", "uuid-name": "g_away",
         "row": {"datapaths": ["set", [["uuid", ls2.to_string()]]]}},
        flow("g_here", "203.0.113.77"),
        flow("g_away", "203.0.113.88"),
    ]));
    net.advance(Duration::from_secs(1));
    let p = net.chassis[0].dp.program().unwrap();
    let holds = |dp: &str, ip: &str| {
        p.datapaths
            .iter()
            .filter(|d| d.name == dp)
            .flat_map(|d| d.flows.iter())
            .any(|f| f.matches.contains(ip))
    };
    assert!(
        holds("ls0", "203.0.113.77"),
        "the group's flow did not reach hv1's ls0"
    );
    assert!(
        !p.datapaths
            .iter()
            .flat_map(|d| d.flows.iter())
            .any(|f| f.matches.contains("203.0.113.88")),
        "a group of datapaths hv1 does not need brought its flow"
    );
    let view = net.ctl(0).sb().model();
    assert!(
        view.logical_flow()
            .values()
            .all(|f| !f.match_.contains("203.0.113.88")),
        "hv1 monitors the flows of a group it does not need"
    );
}

/// An older datapath (control protocol version 5, before the service monitors) refuses a
/// version-6 hello: the controller's next session says 5 and is served (without health
/// checks); after that session ends it tries its own version again.
#[test]
fn an_older_datapath_is_greeted_with_its_version() {
    use hf_datapath::proto::{Decoder, FromDatapath, PROTOCOL_VERSION, ToDatapath, encode};
    let t = Duration::ZERO;
    let mut c = new_controller("hv1", "192.168.0.1", t);
    let sent = |c: &mut Controller| {
        let mut dec: Decoder<ToDatapath> = Decoder::new();
        let mut v = Vec::new();
        while let Some(b) = c.poll_dp_transmit() {
            dec.push(&b);
            while let Some(m) = dec.next_msg().expect("decodes") {
                v.push(m);
            }
        }
        v
    };
    let hello_version = |c: &mut Controller| {
        sent(c).into_iter().find_map(|m| match m {
            ToDatapath::Hello { version, .. } => Some(version),
            _ => None,
        })
    };
    c.handle_dp_connected(t);
    assert_eq!(hello_version(&mut c), Some(PROTOCOL_VERSION));
    let refusal = FromDatapath::Error {
        message: format!(
            "controller speaks protocol version {PROTOCOL_VERSION}, this datapath speaks 4..=5"
        ),
    };
    c.handle_dp_bytes(&encode(&refusal).unwrap(), t);
    c.handle_dp_disconnected(t);
    c.handle_dp_connected(t);
    assert_eq!(hello_version(&mut c), Some(PROTOCOL_VERSION - 1));
    let hello = FromDatapath::Hello {
        version: PROTOCOL_VERSION - 1,
        chassis: "hv1".into(),
        ports: vec![],
        zones: BTreeMap::new(),
        program: None,
    };
    c.handle_dp_bytes(&encode(&hello).unwrap(), t);
    assert!(c.dp_ready());
    // Nothing a version-5 datapath cannot decode: no service monitor list.
    for m in sent(&mut c) {
        assert!(!matches!(m, ToDatapath::SvcMonitors(_)), "{m:?}");
    }
    c.handle_dp_disconnected(t);
    c.handle_dp_connected(t);
    assert_eq!(hello_version(&mut c), Some(PROTOCOL_VERSION));
}
