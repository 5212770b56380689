//! The streamed first sync (the monitor reply read row by row into the model, no whole-reply
//! JSON tree) against the tree path, on real `ovsdb-server` output: seeded NB and SB rows of
//! every column kind (strings, integers, booleans, enums, optional values, sets, maps, strong
//! and weak references) go into a standalone `ovsdb-server`; a replica that streams
//! (`Config::default()`) and one that takes the tree path (`initial_changes: true`, which
//! applies the reply with a change set) must hold equal models with every row.

use std::path::Path;
use std::time::Duration;

use hf_model::{NbSnapshot, SbSnapshot};
use hf_ovsdb_net::client::{Client, Config, Model};
use serde_json::{Value, json};

use crate::common::{Rpc, require};
use crate::procs;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
    /// An optional column: empty or `f`'s value.
    fn opt(&mut self, f: impl FnOnce(&mut Self) -> Value) -> Value {
        if self.below(2) == 0 {
            json!(["set", []])
        } else {
            f(self)
        }
    }
}

fn map(r: &mut Rng, keys: &[&str]) -> Value {
    let mut pairs = Vec::new();
    for k in keys {
        if r.below(2) == 0 {
            pairs.push(json!([k, format!("v{}", r.below(100))]));
        }
    }
    json!(["map", pairs])
}

fn nb_ops(r: &mut Rng) -> Vec<Value> {
    let mut ops = vec![json!("OVN_Northbound")];
    ops.push(json!({"op": "insert", "table": "NB_Global", "row": {
        "options": ["map", [["mac_prefix", "0a:00:00"], ["northd_probe_interval", "5000"]]],
        "nb_cfg": 7,
    }}));
    for s in 0..12 {
        let mut ports = Vec::new();
        for p in 0..r.below(6) {
            let name = format!("lsp{s}_{p}");
            ops.push(json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": name, "row": {
                "name": name,
                "type": (["", "router", "localnet", "localport"][r.below(4) as usize]),
                "addresses": ["set", [format!("0a:00:00:00:{s:02x}:{p:02x} 10.{s}.0.{p}")]],
                "port_security": ["set", if r.below(2) == 0 { vec![] } else { vec![format!("0a:00:00:00:{s:02x}:{p:02x}")] }],
                "enabled": r.opt(|r| json!(r.below(2) == 0)),
                "tag_request": r.opt(|r| json!(r.below(4095))),
                "dynamic_addresses": r.opt(|_| json!("0a:00:00:00:00:01")),
                "options": map(r, &["router-port", "requested-chassis", "qos_burst"]),
                "external_ids": map(r, &["neutron:port_name", "owner"]),
            }}));
            ports.push(json!(["named-uuid", name]));
        }
        let mut acls = Vec::new();
        for a in 0..r.below(4) {
            let name = format!("acl{s}_{a}");
            ops.push(
                json!({"op": "insert", "table": "ACL", "uuid-name": name, "row": {
                    "priority": 1000 + r.below(30000),
                    "direction": if r.below(2) == 0 { "from-lport" } else { "to-lport" },
                    "match": format!("ip4.src == 10.{s}.0.{a} && tcp.dst == {}", r.below(65535)),
                    "action": (["allow", "allow-related", "drop", "reject"][r.below(4) as usize]),
                    "log": r.below(2) == 0,
                    "severity": r.opt(|_| json!("info")),
                    "name": r.opt(|_| json!(format!("n{a}"))),
                    "label": r.below(1000),
                    "options": map(r, &["log-related"]),
                }}),
            );
            acls.push(json!(["named-uuid", name]));
        }
        ops.push(json!({"op": "insert", "table": "Logical_Switch", "row": {
            "name": format!("ls{s}"),
            "ports": ["set", ports],
            "acls": ["set", acls],
            "other_config": map(r, &["subnet", "exclude_ips", "mcast_snoop"]),
        }}));
    }
    for i in 0..5 {
        ops.push(json!({"op": "insert", "table": "Address_Set", "row": {
            "name": format!("as{i}"),
            "addresses": ["set", (0..r.below(5)).map(|j| format!("10.9.{i}.{j}")).collect::<Vec<_>>()],
        }}));
        ops.push(json!({"op": "insert", "table": "Load_Balancer", "row": {
            "name": format!("lb{i}"),
            "vips": ["map", [[format!("172.16.0.{i}:80"), format!("10.0.0.{i}:8080,10.0.1.{i}:8080")]]],
            "protocol": r.opt(|_| json!("udp")),
            "options": map(r, &["reject", "hairpin_snat_ip"]),
        }}));
        ops.push(json!({"op": "insert", "table": "QoS", "row": {
            "priority": r.below(32767),
            "direction": "from-lport",
            "match": "ip4",
            "bandwidth": ["map", [["rate", 1 + r.below(1000)], ["burst", 1 + r.below(100)]]],
            "action": ["map", [["dscp", r.below(64)]]],
        }}));
    }
    let mut lrps = Vec::new();
    for p in 0..4 {
        let name = format!("lrp{p}");
        ops.push(
            json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": name, "row": {
                "name": name,
                "mac": format!("0a:00:00:00:ff:{p:02x}"),
                "networks": ["set", [format!("10.{p}.0.1/24"), format!("fd00:{p}::1/64")]],
                "enabled": r.opt(|_| json!(true)),
            }}),
        );
        lrps.push(json!(["named-uuid", name]));
    }
    ops.push(json!({"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "route", "row": {
        "ip_prefix": "0.0.0.0/0", "nexthop": "10.0.0.254", "policy": r.opt(|_| json!("src-ip")),
    }}));
    ops.push(json!({"op": "insert", "table": "Logical_Router", "row": {
        "name": "lr0", "ports": ["set", lrps], "static_routes": ["named-uuid", "route"],
        "options": map(r, &["chassis", "always_learn_from_arp_request"]),
    }}));
    ops
}

fn sb_ops(r: &mut Rng) -> Vec<Value> {
    let mut ops = vec![json!("OVN_Southbound")];
    for c in 0..4 {
        let encap = format!("encap{c}");
        ops.push(
            json!({"op": "insert", "table": "Encap", "uuid-name": encap, "row": {
                "type": "geneve", "ip": format!("192.168.0.{c}"), "chassis_name": format!("ch{c}"),
                "options": ["map", [["csum", "true"]]],
            }}),
        );
        ops.push(json!({"op": "insert", "table": "Chassis", "row": {
            "name": format!("ch{c}"), "hostname": format!("host{c}"),
            "encaps": ["named-uuid", encap],
            "other_config": map(r, &["datapath-type", "iface-types"]),
        }}));
    }
    for d in 0..8 {
        let dp = format!("dp{d}");
        ops.push(
            json!({"op": "insert", "table": "Datapath_Binding", "uuid-name": dp, "row": {
                "tunnel_key": d + 1,
                "external_ids": ["map", [["name", format!("ls{d}")]]],
            }}),
        );
        for p in 0..r.below(5) {
            ops.push(json!({"op": "insert", "table": "Port_Binding", "row": {
                "logical_port": format!("p{d}_{p}"), "datapath": ["named-uuid", dp],
                "tunnel_key": p + 1, "mac": ["set", [format!("0a:00:00:00:{d:02x}:{p:02x} 10.{d}.0.{p}")]],
                "type": (["", "patch", "localnet"][r.below(3) as usize]),
                "options": map(r, &["peer", "network_name"]),
                "up": r.opt(|r| json!(r.below(2) == 0)),
            }}));
        }
        for f in 0..10 + r.below(20) {
            ops.push(json!({"op": "insert", "table": "Logical_Flow", "row": {
                "logical_datapath": ["named-uuid", dp],
                "pipeline": if r.below(2) == 0 { "ingress" } else { "egress" },
                "table_id": r.below(30), "priority": r.below(65535),
                "match": format!("inport == \"p{d}_{f}\" && eth.src == 0a:00:00:00:00:{f:02x}"),
                "actions": "next;",
                "external_ids": ["map", [["stage-name", "ls_in_port_sec_l2"], ["source", "northd.c:5000"]]],
                "tags": map(r, &["in_out_port"]),
            }}));
        }
    }
    ops
}

fn sync<M: Model + Clone>(remote: &str, initial_changes: bool) -> M {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (c, _ev) = Client::<M>::spawn(
            vec![remote.to_string()],
            Config {
                initial_changes,
                ..Config::default()
            },
        );
        assert!(
            c.wait_until(Duration::from_secs(60), |r| r.is_synced())
                .await,
            "{} replica (initial_changes: {initial_changes}) never synced",
            M::DATABASE
        );
        c.with(|r| r.model().clone())
    })
}

fn check<M: Model + Clone + PartialEq>(schema: &Path, ops: Vec<Value>, min_rows: usize) {
    let dir = tempfile::tempdir().unwrap();
    let m = procs::standalone(dir.path(), schema);
    let remote = m.remote();
    let mut rpc = Rpc::connect(&remote["tcp:".len()..]);
    let reply = rpc.call("transact", Value::Array(ops)).expect("transact");
    assert!(
        reply["error"].is_null()
            && reply["result"]
                .as_array()
                .is_some_and(|a| a.iter().all(|r| r.get("error").is_none())),
        "the seeded transaction failed: {reply}"
    );
    let streamed: M = sync(&remote, false);
    let tree: M = sync(&remote, true);
    assert!(
        streamed.row_count() >= min_rows,
        "{}: only {} rows",
        M::DATABASE,
        streamed.row_count()
    );
    assert_eq!(streamed.row_count(), tree.row_count(), "{}", M::DATABASE);
    assert!(
        streamed == tree,
        "{}: the streamed replica differs from the tree path's",
        M::DATABASE
    );
}

#[test]
fn streamed_first_sync_equals_the_tree_path_on_ovsdb_server() {
    let nb = Path::new("/usr/share/ovn/ovn-nb.ovsschema");
    let sb = Path::new("/usr/share/ovn/ovn-sb.ovsschema");
    if !require(
        "streamed_first_sync_equals_the_tree_path_on_ovsdb_server",
        &[
            "ovsdb-server",
            "ovsdb-tool",
            nb.to_str().unwrap(),
            sb.to_str().unwrap(),
        ],
    ) {
        return;
    }
    let mut r = Rng(std::env::var("HF_STREAM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(31));
    check::<NbSnapshot>(nb, nb_ops(&mut r), 40);
    check::<SbSnapshot>(sb, sb_ops(&mut r), 100);
}
