//! Incremental sync, seen by an SB monitor the test owns (the client replica, full typed rows
//! with before and after): adding one VIF port with real `ovn-nbctl --wait=sb` changes exactly
//! the rows derived from it; restarting northd against an unchanged NB writes nothing; a NB
//! rebuilt with new UUIDs and the same names keeps tunnel keys and flow identities and
//! rewrites no flow text; a foreign write to the DHCP code tables is undone.
//!
//! The assertions are about identity and minimality, so they hold for any compile: as stages
//! and tables grow, more rows take part, and each must still be explained by the new port.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use hf_model::{RowDelta, SbDelta, SbSnapshot};
use hf_ovsdb_net::client::{Client, Config, Event};

use crate::common::{self, run_ok};
use crate::fixture::{Backend, Dbs, NorthdProc, wait_for};
use crate::ha::replicate;

const TOOLS: &[&str] = &[
    "ovsdb-server",
    "ovsdb-tool",
    "ovn-nbctl",
    "ovn-sbctl",
    "ovn-appctl",
];

/// An SB replica running in the background, collecting every change set.
struct SbMonitor {
    client: Client<SbSnapshot>,
    rx: tokio::sync::mpsc::UnboundedReceiver<Event<SbSnapshot>>,
    // Last: the runtime drives the client; dropped after it.
    _rt: tokio::runtime::Runtime,
}

impl SbMonitor {
    fn start(remote: &str) -> SbMonitor {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (client, rx) = rt.block_on(async {
            let (c, rx) = Client::<SbSnapshot>::spawn(vec![remote.to_string()], Config::default());
            assert!(
                c.wait_until(Duration::from_secs(30), |r| r.is_synced())
                    .await
            );
            (c, rx)
        });
        let mut m = SbMonitor {
            client,
            rx,
            _rt: rt,
        };
        m.drain();
        m
    }

    /// Every change set received since the last call.
    fn drain(&mut self) -> Vec<SbDelta> {
        let mut out = Vec::new();
        while let Ok(ev) = self.rx.try_recv() {
            if let Event::Changes(d) = ev {
                out.push(d);
            }
        }
        out
    }

    fn has_port(&self, name: &str) -> bool {
        self.client.with(|r| {
            r.model()
                .port_binding()
                .values()
                .any(|p| p.logical_port == name)
        })
    }

    fn sb_nb_cfg(&self) -> i64 {
        self.client.with(|r| {
            r.model()
                .sb_global()
                .values()
                .next()
                .map_or(0, |g| g.nb_cfg)
        })
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("hf-northd-inc-")
        .tempdir()
        .expect("tempdir")
}

/// The NB every test here starts from: two switches joined by a router, VIFs, a port group
/// with an ACL and its address sets, a load balancer.
const NB: &[&[&str]] = &[
    &["ls-add", "sw0"],
    &["ls-add", "sw1"],
    &["lr-add", "lr0"],
    &[
        "lrp-add",
        "lr0",
        "lr0-sw0",
        "00:00:00:00:ff:01",
        "10.0.0.254/24",
    ],
    &[
        "lrp-add",
        "lr0",
        "lr0-sw1",
        "00:00:00:00:ff:02",
        "10.0.1.254/24",
    ],
    &["lsp-add", "sw0", "sw0-lr0"],
    &["lsp-set-type", "sw0-lr0", "router"],
    &["lsp-set-addresses", "sw0-lr0", "router"],
    &["lsp-set-options", "sw0-lr0", "router-port=lr0-sw0"],
    &["lsp-add", "sw1", "sw1-lr0"],
    &["lsp-set-type", "sw1-lr0", "router"],
    &["lsp-set-addresses", "sw1-lr0", "router"],
    &["lsp-set-options", "sw1-lr0", "router-port=lr0-sw1"],
    &["lsp-add", "sw0", "p1"],
    &["lsp-set-addresses", "p1", "00:00:00:00:00:01 10.0.0.1"],
    &["lsp-set-port-security", "p1", "00:00:00:00:00:01 10.0.0.1"],
    &["lsp-add", "sw0", "p2"],
    &["lsp-set-addresses", "p2", "00:00:00:00:00:02 10.0.0.2"],
    &["lsp-add", "sw1", "q1"],
    &["lsp-set-addresses", "q1", "00:00:00:00:01:01 10.0.1.1"],
    &["pg-add", "pg1", "p1", "q1"],
    &[
        "acl-add",
        "pg1",
        "to-lport",
        "1000",
        "outport == @pg1 && ip4.src == $pg1_ip4",
        "allow-related",
    ],
    &[
        "acl-add",
        "pg1",
        "to-lport",
        "900",
        "outport == @pg1 && ip4",
        "drop",
    ],
    &[
        "lb-add",
        "lb0",
        "10.0.0.100:80",
        "10.0.0.1:8080,10.0.0.2:8080",
        "tcp",
    ],
    &["ls-lb-add", "sw0", "lb0"],
];

fn build_nb(dbs: &Dbs) {
    let mut c = dbs.nbctl();
    for (i, cmd) in NB.iter().enumerate() {
        if i > 0 {
            c.arg("--");
        }
        c.args(*cmd);
    }
    run_ok(&mut c);
}

fn lsp_uuid(dbs: &Dbs, name: &str) -> String {
    run_ok(
        dbs.nbctl()
            .args(["get", "Logical_Switch_Port", name, "_uuid"]),
    )
    .trim()
    .to_string()
}

/// One row delta: (before, after).
fn pairs<T: Clone>(v: &[RowDelta<T>]) -> Vec<(Option<T>, Option<T>)> {
    v.iter()
        .map(|d| match d {
            RowDelta::Insert(n) => (None, Some(n.clone())),
            RowDelta::Update { old, new } => (Some(old.clone()), Some(new.clone())),
            RowDelta::Delete(o) => (Some(o.clone()), None),
        })
        .collect()
}

#[test]
fn one_port_changes_exactly_its_rows_and_a_restart_writes_nothing() {
    if !common::require("northd incremental", TOOLS) {
        return;
    }
    let dir = tempdir();
    let dbs = Dbs::start(dir.path(), Backend::Holdfast);
    build_nb(&dbs);
    let mut n = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &[]);
    run_ok(dbs.nbctl().args(["--wait=sb", "sync"]));
    let mut mon = SbMonitor::start(&dbs.sb);
    let before = replicate::<SbSnapshot>(&dbs.sb);

    // One VIF, its addresses, and membership of the port group.
    run_ok(dbs.nbctl().args([
        "--wait=sb",
        "lsp-add",
        "sw0",
        "p9",
        "--",
        "lsp-set-addresses",
        "p9",
        "00:00:00:00:00:09 10.0.0.9",
        "--",
        "pg-set-ports",
        "pg1",
        "p1",
        "q1",
        "p9",
    ]));
    let nb_cfg = dbs.nb_global("nb_cfg");
    assert!(wait_for(Duration::from_secs(10), || mon.has_port("p9")
        && mon.sb_nb_cfg() == nb_cfg));
    std::thread::sleep(Duration::from_millis(300));
    let deltas = mon.drain();
    assert!(!deltas.is_empty(), "the monitor saw no change");
    let hint = lsp_uuid(&dbs, "p9")[..8].to_string();
    let mut pb_inserted = Vec::new();
    let mut p9_pb = None;
    let mut unexplained: Vec<String> = Vec::new();
    let mut flows_changed = 0;
    for d in &deltas {
        for (o, nw) in pairs(&d.port_binding) {
            match (o, nw) {
                (None, Some(p)) => {
                    p9_pb = Some(p.uuid);
                    pb_inserted.push(p.logical_port.clone());
                }
                (o, nw) => unexplained.push(format!("Port_Binding {o:?} -> {nw:?}")),
            }
        }
    }
    assert_eq!(pb_inserted, ["p9"], "Port_Binding inserts");
    let p9_pb = p9_pb.unwrap();
    for d in &deltas {
        for (o, nw) in pairs(&d.logical_flow) {
            flows_changed += 1;
            let hints: BTreeSet<Option<&String>> = [&o, &nw]
                .iter()
                .filter_map(|r| r.as_ref().map(|f| f.external_ids.get("stage-hint")))
                .collect();
            if hints != BTreeSet::from([Some(&hint)]) {
                unexplained.push(format!(
                    "Logical_Flow not derived from p9 ({hint}): {:?} -> {:?}",
                    o.map(|f| (f.external_ids, f.match_, f.actions)),
                    nw.map(|f| (f.external_ids, f.match_, f.actions))
                ));
            }
        }
        for (o, nw) in pairs(&d.multicast_group) {
            let ok = match (&o, &nw) {
                (Some(o), Some(n)) => {
                    let mut with = o.ports.clone();
                    with.insert(p9_pb.into());
                    n.ports == with && !o.ports.contains(&p9_pb.into()) && n.name == o.name
                }
                _ => false,
            };
            if !ok {
                unexplained.push(format!("Multicast_Group {o:?} -> {nw:?}"));
            }
        }
        for (o, nw) in pairs(&d.port_group) {
            let ok = match (&o, &nw) {
                (Some(o), Some(n)) => {
                    let mut with = o.ports.clone();
                    with.insert("p9".into());
                    n.ports == with && !o.ports.contains("p9")
                }
                (None, Some(n)) => n.ports == BTreeSet::from(["p9".to_string()]),
                _ => false,
            };
            if !ok {
                unexplained.push(format!("Port_Group {o:?} -> {nw:?}"));
            }
        }
        for (o, nw) in pairs(&d.address_set) {
            let ok = match (&o, &nw) {
                (Some(o), Some(n)) => {
                    let added: Vec<&String> = n.addresses.difference(&o.addresses).collect();
                    o.addresses.is_subset(&n.addresses)
                        && added.len() == 1
                        && added[0].starts_with("10.0.0.9")
                }
                _ => false,
            };
            if !ok {
                unexplained.push(format!("Address_Set {o:?} -> {nw:?}"));
            }
        }
        // SB_Global: only nb_cfg (the --wait=sb handshake).
        for (o, nw) in pairs(&d.sb_global) {
            let ok = matches!((&o, &nw), (Some(o), Some(n)) if {
                let mut x = o.clone();
                x.nb_cfg = n.nb_cfg;
                x == *n
            });
            if !ok {
                unexplained.push(format!("SB_Global {o:?} -> {nw:?}"));
            }
        }
        let others = d.len()
            - d.port_binding.len()
            - d.logical_flow.len()
            - d.multicast_group.len()
            - d.port_group.len()
            - d.address_set.len()
            - d.sb_global.len();
        if others > 0 {
            unexplained.push(format!("{others} changes in other tables: {d:?}"));
        }
    }
    let count = |f: &dyn Fn(&SbDelta) -> usize| deltas.iter().map(f).sum::<usize>();
    eprintln!(
        "adding p9 changed {flows_changed} flows, {} multicast groups, {} port groups, {} address sets, {} port bindings ({} SB flows before)",
        count(&|d| d.multicast_group.len()),
        count(&|d| d.port_group.len()),
        count(&|d| d.address_set.len()),
        count(&|d| d.port_binding.len()),
        before.logical_flow().len()
    );
    assert!(
        unexplained.is_empty(),
        "rows changed that adding p9 does not explain ({} flows changed):\n{}",
        flows_changed,
        unexplained.join("\n")
    );
    // And nothing that existed before was rewritten without a reason: every flow of `before`
    // that is still there has the same UUID (no delete + insert of an unchanged flow).
    let after = replicate::<SbSnapshot>(&dbs.sb);
    let by_id = |s: &SbSnapshot| -> BTreeMap<String, (uuid::Uuid, String, String)> {
        s.logical_flow()
            .values()
            .filter_map(|f| {
                f.external_ids.get("hf-flow-id").map(|id| {
                    (
                        id.clone(),
                        (f.uuid, f.match_.to_string(), f.actions.to_string()),
                    )
                })
            })
            .collect()
    };
    let (b, a) = (by_id(&before), by_id(&after));
    for (id, (u, m, act)) in &b {
        if let Some((u2, m2, a2)) = a.get(id)
            && m == m2
            && act == a2
        {
            assert_eq!(u, u2, "flow {id} was deleted and inserted again unchanged");
        }
    }

    // Restart against the unchanged NB: no SB transaction at all.
    n.stop();
    mon.drain();
    let n2 = NorthdProc::start(dir.path(), "northd2", &dbs.nb, &dbs.sb, &[]);
    assert!(
        wait_for(Duration::from_secs(10), || {
            n2.status() == "Status: active" && n2.counter("sb-unchanged") >= 1
        }),
        "the restarted northd never finished a sync: {}",
        n2.log_text()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(n2.counter("sb-commits"), 0, "the restarted northd wrote SB");
    assert_eq!(n2.counter("nb-commits"), 0, "the restarted northd wrote NB");
    let changes = mon.drain();
    assert!(
        changes.is_empty(),
        "SB changed after a restart: {changes:?}"
    );

    // A foreign write to the DHCP code tables (a row deleted, a code changed, an unknown
    // option added) is undone, as ovn-northd does: ovn-controller parses DHCP with them.
    let codes = || -> Vec<String> {
        let mut v: Vec<String> = run_ok(dbs.sbctl().args([
            "-f",
            "csv",
            "--no-headings",
            "--columns=name,code,type",
            "list",
            "DHCP_Options",
        ]))
        .lines()
        .map(str::to_string)
        .collect();
        v.sort();
        v
    };
    let want = codes();
    assert!(
        want.iter()
            .any(|l| l == "mtu,26,\"uint16\"" || l == "mtu,26,uint16"),
        "{want:?}"
    );
    let uuid_of = |name: &str| {
        run_ok(dbs.sbctl().args([
            "--bare",
            "--columns=_uuid",
            "find",
            "DHCP_Options",
            &format!("name={name}"),
        ]))
        .trim()
        .to_string()
    };
    let (mtu, t1) = (uuid_of("mtu"), uuid_of("T1"));
    run_ok(dbs.sbctl().args([
        "destroy",
        "DHCP_Options",
        &mtu,
        "--",
        "set",
        "DHCP_Options",
        &t1,
        "code=57",
        "--",
        "create",
        "DHCP_Options",
        "name=bogus",
        "code=200",
        "type=str",
    ]));
    // (northd may undo it before the test can look: its SB commit shows it did.)
    assert!(
        wait_for(Duration::from_secs(10), || codes() == want
            && n2.counter("sb-commits") >= 1),
        "DHCP_Options not restored: {:?} ({} SB commits)\n{}",
        codes(),
        n2.counter("sb-commits"),
        n2.log_text()
    );
}

/// Datapath tunnel keys by name, port tunnel keys by name, flows by identity (UUID, text).
type Keys = (
    BTreeMap<String, i64>,
    BTreeMap<String, i64>,
    BTreeMap<String, (String, String)>,
);

fn keys_of(sb: &SbSnapshot) -> Keys {
    let dps = sb
        .datapath_binding()
        .values()
        .filter_map(|d| {
            d.external_ids
                .get("name")
                .map(|n| (n.clone(), d.tunnel_key))
        })
        .collect();
    let pbs = sb
        .port_binding()
        .values()
        .map(|p| (p.logical_port.clone(), p.tunnel_key))
        .collect();
    let flows = sb
        .logical_flow()
        .values()
        .filter_map(|f| {
            f.external_ids
                .get("hf-flow-id")
                .map(|id| (id.clone(), (f.match_.to_string(), f.actions.to_string())))
        })
        .collect();
    (dps, pbs, flows)
}

#[test]
fn rebuilt_nb_keeps_tunnel_keys_and_flow_identities() {
    if !common::require("northd rebuild", TOOLS) {
        return;
    }
    let dir = tempdir();
    let mut dbs = Dbs::start(dir.path(), Backend::Holdfast);
    build_nb(&dbs);
    let mut n = NorthdProc::start(dir.path(), "northd", &dbs.nb, &dbs.sb, &[]);
    run_ok(dbs.nbctl().args(["--wait=sb", "sync"]));
    let old_uuid = lsp_uuid(&dbs, "p1");
    n.stop();
    let first = keys_of(&replicate::<SbSnapshot>(&dbs.sb));
    dbs.stop();
    // A fresh NB (new UUIDs, same names) next to the same SB.
    let dbs = Dbs::start_named(dir.path(), Backend::Holdfast, "nb2.db");
    build_nb(&dbs);
    assert_ne!(
        lsp_uuid(&dbs, "p1"),
        old_uuid,
        "the rebuilt NB has the old UUIDs"
    );
    let mut mon = SbMonitor::start(&dbs.sb);
    let _n = NorthdProc::start(dir.path(), "northd2", &dbs.nb, &dbs.sb, &[]);
    run_ok(dbs.nbctl().args(["--wait=sb", "sync"]));
    std::thread::sleep(Duration::from_millis(300));
    let second = keys_of(&replicate::<SbSnapshot>(&dbs.sb));
    assert_eq!(first.0, second.0, "datapath tunnel keys changed");
    assert_eq!(first.1, second.1, "port tunnel keys changed");
    assert_eq!(
        first.2.keys().collect::<Vec<_>>(),
        second.2.keys().collect::<Vec<_>>(),
        "flow identities changed"
    );
    // No flow was inserted or deleted, and a rewritten flow changed only its stage-hint (the
    // NB UUID it points at).
    for d in mon.drain() {
        for (o, nw) in pairs(&d.logical_flow) {
            let (Some(o), Some(nw)) = (o, nw) else {
                panic!("a flow was inserted or deleted by the rebuild");
            };
            let mut x = o.clone();
            x.external_ids.insert(
                "stage-hint".into(),
                nw.external_ids
                    .get("stage-hint")
                    .cloned()
                    .unwrap_or_default(),
            );
            if !nw.external_ids.contains_key("stage-hint") {
                x.external_ids.remove("stage-hint");
            }
            assert_eq!(x, nw, "a flow changed more than its stage-hint");
        }
        for (o, nw) in pairs(&d.port_binding) {
            assert!(
                o.is_some() && nw.is_some(),
                "a port binding was inserted or deleted"
            );
        }
        for (o, nw) in pairs(&d.datapath_binding) {
            let (Some(o), Some(nw)) = (o, nw) else {
                panic!("a datapath binding was inserted or deleted");
            };
            assert_eq!(o.tunnel_key, nw.tunnel_key);
        }
    }
}
