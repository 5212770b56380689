//! IPAM against an in-memory NB (hf-ovsdb's executor over holdfast's NB schema). The values
//! expected here are what real ovn-northd 23.03 writes for the same NB; the parity test
//! (`tests/northd_parity.rs`, `dynamic_addresses`) checks them against the real daemon.

use std::sync::Arc;

use hf_model::NbSnapshot;
use hf_ovsdb::Database;
use hf_ovsdb::txn::{NoLocks, TxnOutcome, execute};
use serde_json::{Value, json};

use super::*;

const PREFIX: [u8; 3] = [0x0a, 0x00, 0x00];

struct Nb {
    db: Database,
}

impl Nb {
    fn new() -> Nb {
        let mut nb = Nb {
            db: Database::new(Arc::clone(hf_model::nb::schema()), 7),
        };
        nb.txn(vec![
            json!({"op": "insert", "table": "NB_Global", "row": {}}),
        ]);
        nb
    }

    fn txn(&mut self, ops: Vec<Value>) -> Uuid {
        match execute(&mut self.db, &ops, &NoLocks) {
            TxnOutcome::Commit { results, delta } => {
                self.db.apply(&delta);
                results
                    .iter()
                    .find_map(|r| {
                        r.get("uuid")
                            .and_then(|u| u.get(1))
                            .and_then(|u| u.as_str())
                    })
                    .and_then(|u| u.parse().ok())
                    .unwrap_or_default()
            }
            other => panic!("NB transaction {ops:?} failed: {other:?}"),
        }
    }

    fn snap(&self) -> NbSnapshot {
        NbSnapshot::from_db(&self.db).expect("NB snapshot")
    }

    fn ls(&mut self, name: &str, oc: &[(&str, &str)]) {
        let m: Vec<Value> = oc.iter().map(|(k, v)| json!([k, v])).collect();
        self.txn(vec![json!({"op": "insert", "table": "Logical_Switch",
            "row": {"name": name, "other_config": ["map", m]}})]);
    }

    fn lsp(&mut self, ls: &str, name: &str, addrs: &[&str]) -> Uuid {
        self.txn(vec![
            json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p",
                "row": {"name": name, "addresses": ["set", addrs]}}),
            json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", ls]],
                "mutations": [["ports", "insert", ["named-uuid", "p"]]]}),
        ])
    }

    /// Runs [`plan`] and writes its result, as the daemon does; returns the writes.
    fn run(&mut self) -> BTreeMap<Uuid, Option<String>> {
        let p = plan(&self.snap(), PREFIX);
        for (u, v) in &p.writes {
            let v = match v {
                Some(s) => json!(s),
                None => json!(["set", []]),
            };
            self.txn(vec![json!({"op": "update", "table": "Logical_Switch_Port",
                "where": [["_uuid", "==", ["uuid", u.to_string()]]],
                "row": {"dynamic_addresses": v}})]);
        }
        p.writes
    }

    fn dyn_of(&self, u: Uuid) -> Option<String> {
        self.snap()
            .logical_switch_port()
            .get(&u)
            .and_then(|p| p.dynamic_addresses.clone())
    }

    /// Adds a port and runs, as one `ovn-nbctl --wait=sb lsp-add` + `lsp-set-addresses`.
    fn add(&mut self, ls: &str, name: &str, addrs: &[&str]) -> Option<String> {
        let u = self.lsp(ls, name, addrs);
        self.run();
        assert!(self.run().is_empty(), "a second run writes nothing");
        self.dyn_of(u)
    }
}

#[test]
fn dynamic_entries_parse_as_ovn_reads_them() {
    assert_eq!(request("dynamic"), Some(Request::default()));
    assert_eq!(
        request("0a:00:00:00:00:09 dynamic").and_then(|r| r.mac),
        Mac::parse("0a:00:00:00:00:09")
    );
    assert_eq!(
        request("dynamic 10.0.0.9").and_then(|r| r.ip4),
        Some("10.0.0.9".parse().unwrap())
    );
    assert!(request("dynamic fd00::9").is_some_and(|r| r.ip6.is_some() && r.ip4.is_none()));
    assert!(request("dynamic 10.0.0.9 fd00::9").is_some_and(|r| r.ip6.is_some()));
    assert_eq!(request("0a:00:00:00:00:09 10.0.0.9"), None);
    assert_eq!(request("dynamic x"), None);
    assert_eq!(request("router"), None);
}

#[test]
fn the_next_ipv4_is_the_lowest_free_and_the_mac_follows_it() {
    let mut nb = Nb::new();
    nb.ls(
        "sw",
        &[
            ("subnet", "10.0.0.0/24"),
            ("exclude_ips", "10.0.0.3 10.0.0.5..10.0.0.6"),
        ],
    );
    nb.lsp("sw", "st", &["0a:00:00:00:00:ff 10.0.0.2"]);
    assert_eq!(
        nb.add("sw", "a", &["dynamic"]).as_deref(),
        Some("0a:00:00:00:00:05 10.0.0.4")
    );
    assert_eq!(
        nb.add("sw", "b", &["dynamic"]).as_deref(),
        Some("0a:00:00:00:00:08 10.0.0.7")
    );
    // A static MAC keeps it; the IPv4 is still assigned.
    assert_eq!(
        nb.add("sw", "c", &["02:00:00:00:00:01 dynamic"]).as_deref(),
        Some("02:00:00:00:00:01 10.0.0.8")
    );
    // Asked-for IPv4: taken as given; the MAC derives from it.
    assert_eq!(
        nb.add("sw", "d", &["dynamic 10.0.0.100"]).as_deref(),
        Some("0a:00:00:00:00:65 10.0.0.100")
    );
}

#[test]
fn a_taken_mac_moves_to_the_next_one() {
    let mut nb = Nb::new();
    nb.ls("sw", &[("subnet", "10.0.0.0/24")]);
    // The MAC 10.0.0.2 would get (low bits + 1 = 3) is a static one, on another switch too.
    nb.ls("other", &[]);
    nb.lsp("other", "st", &["0a:00:00:00:00:03"]);
    assert_eq!(
        nb.add("sw", "a", &["dynamic"]).as_deref(),
        Some("0a:00:00:00:00:04 10.0.0.2")
    );
}

#[test]
fn ipv6_is_the_eui64_of_the_mac_and_mac_only_assigns_a_mac() {
    let mut nb = Nb::new();
    nb.ls("v6", &[("ipv6_prefix", "fd00:1::")]);
    assert_eq!(
        nb.add("v6", "a", &["dynamic"]).as_deref(),
        Some("0a:00:00:00:00:01 fd00:1::800:ff:fe00:1")
    );
    nb.ls(
        "both",
        &[("subnet", "192.168.1.0/24"), ("ipv6_prefix", "fd00:2::/64")],
    );
    assert_eq!(
        nb.add("both", "b", &["dynamic"]).as_deref(),
        Some("0a:00:00:a8:01:03 192.168.1.2 fd00:2::800:ff:fea8:103")
    );
    nb.ls("mac", &[("mac_only", "true")]);
    assert_eq!(
        nb.add("mac", "c", &["dynamic"]).as_deref(),
        Some("0a:00:00:00:00:02")
    );
}

#[test]
fn assignments_are_kept_reassigned_on_conflict_and_cleared() {
    let mut nb = Nb::new();
    nb.ls("sw", &[("subnet", "10.0.0.0/24")]);
    let a = nb.lsp("sw", "a", &["dynamic"]);
    nb.run();
    assert_eq!(nb.dyn_of(a).as_deref(), Some("0a:00:00:00:00:03 10.0.0.2"));
    // A static port takes the address: the dynamic one moves, keeping its MAC.
    nb.lsp("sw", "st", &["0a:00:00:00:00:aa 10.0.0.2"]);
    nb.run();
    assert_eq!(nb.dyn_of(a).as_deref(), Some("0a:00:00:00:00:03 10.0.0.3"));
    // An excluded address moves it too.
    nb.txn(vec![
        json!({"op": "mutate", "table": "Logical_Switch", "where": [],
        "mutations": [["other_config", "insert", ["map", [["exclude_ips", "10.0.0.3"]]]]]}),
    ]);
    nb.run();
    assert_eq!(nb.dyn_of(a).as_deref(), Some("0a:00:00:00:00:03 10.0.0.4"));
    // A subnet change reassigns the IPv4.
    nb.txn(vec![
        json!({"op": "update", "table": "Logical_Switch", "where": [],
        "row": {"other_config": ["map", [["subnet", "10.1.0.0/16"]]]}}),
    ]);
    nb.run();
    assert_eq!(nb.dyn_of(a).as_deref(), Some("0a:00:00:00:00:03 10.1.0.2"));
    // No subnet any more: the column goes.
    nb.txn(vec![
        json!({"op": "update", "table": "Logical_Switch", "where": [],
        "row": {"other_config": ["map", []]}}),
    ]);
    nb.run();
    assert_eq!(nb.dyn_of(a), None);
}

#[test]
fn a_port_that_stops_being_dynamic_loses_its_column() {
    let mut nb = Nb::new();
    nb.ls("sw", &[("subnet", "10.0.0.0/24")]);
    let a = nb.lsp("sw", "a", &["dynamic"]);
    nb.run();
    assert!(nb.dyn_of(a).is_some());
    nb.txn(vec![json!({"op": "update", "table": "Logical_Switch_Port",
        "where": [["name", "==", "a"]], "row": {"addresses": ["set", ["0a:00:00:00:00:09"]]}})]);
    nb.run();
    assert_eq!(nb.dyn_of(a), None);
}

#[test]
fn router_addresses_and_the_broadcast_address_are_never_given() {
    let mut nb = Nb::new();
    nb.ls("sw", &[("subnet", "10.0.0.0/30")]);
    nb.txn(vec![
        json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": "rp",
            "row": {"name": "rp", "mac": "00:00:00:00:ff:01", "networks": ["set", ["10.0.0.2/30"]]}}),
        json!({"op": "insert", "table": "Logical_Router", "row": {"name": "r",
            "ports": ["set", [["named-uuid", "rp"]]]}}),
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p",
            "row": {"name": "sw-rp", "type": "router", "addresses": ["set", ["router"]],
                "options": ["map", [["router-port", "rp"]]]}}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", "sw"]],
            "mutations": [["ports", "insert", ["named-uuid", "p"]]]}),
    ]);
    // .1 is taken as the first address, .2 by the router, .3 is the broadcast address.
    assert_eq!(
        nb.add("sw", "a", &["dynamic"]).as_deref(),
        Some("0a:00:00:00:00:01")
    );
}

#[test]
fn bad_options_are_named() {
    let mut nb = Nb::new();
    nb.ls(
        "sw",
        &[
            ("subnet", "10.0.0.0"),
            ("ipv6_prefix", "fd00::/48"),
            ("exclude_ips", "x"),
        ],
    );
    let snap = nb.snap();
    let ls = snap.logical_switch().values().next().unwrap();
    let (c, problems) = SwitchConfig::parse(&ls.other_config);
    assert!(!c.enabled());
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("other_config:subnet \"10.0.0.0\""));
    assert!(problems[1].contains("must be /64"));
    let (_, problems) = SwitchConfig::parse(
        &[
            ("subnet", "10.0.0.0/24"),
            ("exclude_ips", "10.0.0.9 10.1.0.1 x 10.0.0.20"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("not in the subnet"), "{problems:?}");
    // Up to the word that does not parse: 10.0.0.9 is excluded, 10.0.0.20 is not.
    let (ranges, err) = parse_excludes("10.0.0.9 x 10.0.0.20", 0x0a00_0001, 255);
    assert_eq!(ranges, vec![(0x0a00_0009, 0x0a00_0009)]);
    assert!(err.is_some_and(|e| e.contains("\"x\"")));
}

#[test]
fn the_pool_merges_ranges_and_finds_the_lowest_gap() {
    let mut p = Pool4::new(1, 255);
    p.take_range(1, 3);
    p.take(5);
    assert_eq!(p.first_free(), Some(1 + 3));
    p.take_range(3, 4);
    assert_eq!(p.first_free(), Some(1 + 5));
    assert_eq!(p.taken.len(), 1, "{:?}", p.taken);
    p.take_range(0, 254);
    assert_eq!(p.first_free(), None, "the broadcast address is never free");
}

#[test]
fn the_compile_names_unusable_options_and_dynamic_ports_that_get_nothing() {
    let mut nb = Nb::new();
    nb.ls(
        "bad",
        &[("subnet", "10.0.0.0/33"), ("exclude_ips", "10.0.0.5")],
    );
    nb.ls("plain", &[]);
    nb.lsp("plain", "p", &["dynamic"]);
    nb.lsp("bad", "q", &["dynamic", "0a:00:00:00:00:01 dynamic"]);
    let c = crate::compile(&nb.snap(), &crate::Options::default());
    let has = |table: &str, name: &str, what: &str| {
        c.diagnostics
            .iter()
            .any(|d| d.table == table && d.name == name && d.reason.contains(what))
    };
    assert!(
        has(
            "Logical_Switch",
            "bad",
            "other_config:subnet \"10.0.0.0/33\": prefix length 33 is above 32"
        ),
        "{:#?}",
        c.diagnostics
    );
    assert!(has(
        "Logical_Switch_Port",
        "p",
        "switch \"plain\" sets none of other_config:subnet"
    ));
    assert!(has(
        "Logical_Switch_Port",
        "q",
        "more than one dynamic entry"
    ));
    assert!(has("Logical_Switch_Port", "q", "switch \"bad\" sets none"));
    // Nothing is assigned on either switch, and no other diagnostic says so twice.
    assert!(nb.run().is_empty());
}

#[test]
fn the_compile_uses_what_dynamic_addresses_holds() {
    let mut nb = Nb::new();
    nb.ls("sw", &[("subnet", "10.0.0.0/24")]);
    let a = nb.lsp("sw", "a", &["dynamic"]);
    let flows = |nb: &Nb| -> String {
        let c = crate::compile(&nb.snap(), &crate::Options::default());
        assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
        c.sb.flows
            .values()
            .map(|f| format!("{} {}\n", f.match_, f.actions))
            .collect()
    };
    // Not yet assigned: no address for the port.
    assert!(!flows(&nb).contains("0a:00:00:00:00:03"));
    nb.run();
    assert_eq!(nb.dyn_of(a).as_deref(), Some("0a:00:00:00:00:03 10.0.0.2"));
    let f = flows(&nb);
    assert!(f.contains("eth.dst == 0a:00:00:00:00:03"), "{f}");
    assert!(f.contains("arp.tpa == 10.0.0.2"), "{f}");
}
