//! NB builders: each function returns one OVSDB transaction (a list of operations on
//! `OVN_Northbound`) that does what the matching `ovn-nbctl` command does: switches, ports
//! with addresses and port security, routers and their ports, the patch between a switch
//! and a router port, gateway chassis, NAT (snat, dnat, dnat_and_snat), load balancers on
//! switches and routers, ACLs, DHCP options on a port.
//!
//! The operations are plain JSON, so the same scenario can be applied to the world's own
//! database ([`super::World::nb`]) or to a real `ovsdb-server` (`ovsdb-client transact`),
//! which is how the real-ovn-northd tests share the scenarios of the holdfast-northd ones.
//!
//! What it does not do: check that the names exist (the database refuses a transaction
//! whose `where` matches no row only where OVSDB would, which is never for `mutate`; a
//! scenario that names a missing switch builds nothing for it, as a wrong `ovn-nbctl`
//! script would fail: use [`super::World::nb`], which reports a mutation that matched no row).

use serde_json::{Value, json};

/// One transaction's operations.
pub type Txn = Vec<Value>;

fn label(prefix: &str, name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{prefix}_{s}")
}

fn omap(pairs: &[(&str, &str)]) -> Value {
    json!([
        "map",
        pairs.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()
    ])
}

fn sset(items: &[&str]) -> Value {
    json!(["set", items])
}

fn add_to(table: &str, name: &str, column: &str, named: &str) -> Value {
    json!({"op": "mutate", "table": table, "where": [["name", "==", name]],
        "mutations": [[column, "insert", ["set", [["named-uuid", named]]]]]})
}

/// A row-count check: the transaction fails unless exactly one `table` row is named `name`.
fn must_exist(table: &str, name: &str) -> Value {
    json!({"op": "wait", "table": table, "where": [["name", "==", name]], "columns": ["name"],
        "until": "==", "rows": [{"name": name}], "timeout": 0})
}

/// `ovn-nbctl ls-add NAME`.
pub fn switch(name: &str) -> Txn {
    vec![json!({"op": "insert", "table": "Logical_Switch", "row": {"name": name}})]
}

/// Options of a switch port.
#[derive(Debug, Clone, Default)]
pub struct PortOpts<'a> {
    /// `port_security` = the addresses.
    pub port_security: bool,
    /// `options:requested-chassis`.
    pub requested_chassis: Option<&'a str>,
    /// An external host (`external_ids:hf-sim-external=true`): the world puts it on a 1 ms
    /// link.
    pub external: bool,
}

/// `ovn-nbctl lsp-add SW NAME -- lsp-set-addresses NAME ADDRESSES` (and port security,
/// `requested-chassis`).
pub fn port(sw: &str, name: &str, addresses: &str, o: PortOpts<'_>) -> Txn {
    let l = label("lsp", name);
    let mut row = json!({"name": name, "addresses": addresses});
    if o.port_security {
        row["port_security"] = json!(addresses);
    }
    if let Some(c) = o.requested_chassis {
        row["options"] = omap(&[("requested-chassis", c)]);
    }
    if o.external {
        row["external_ids"] = omap(&[("hf-sim-external", "true")]);
    }
    vec![
        must_exist("Logical_Switch", sw),
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": l, "row": row}),
        add_to("Logical_Switch", sw, "ports", &l),
    ]
}

/// A VM's or pod's port: [`port`] with addresses `MAC IP`, port security on them and
/// `requested-chassis=CHASSIS`.
pub fn vif(sw: &str, name: &str, mac: &str, ip: &str, chassis: &str) -> Txn {
    port(
        sw,
        name,
        &format!("{mac} {ip}"),
        PortOpts {
            port_security: true,
            requested_chassis: Some(chassis),
            ..PortOpts::default()
        },
    )
}

/// `ovn-nbctl lsp-set-options NAME requested-chassis=CHASSIS` (other options kept).
pub fn set_requested_chassis(name: &str, chassis: &str) -> Txn {
    vec![
        must_exist("Logical_Switch_Port", name),
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", name]],
            "mutations": [["options", "delete", ["set", ["requested-chassis"]]]]}),
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", name]],
            "mutations": [["options", "insert", omap(&[("requested-chassis", chassis)])]]}),
    ]
}

/// `ovn-nbctl lsp-set-options`-style edit of some keys: `set` are written (replacing those
/// keys), `remove` are deleted; other options are kept.
pub fn set_port_options(name: &str, set: &[(&str, &str)], remove: &[&str]) -> Txn {
    let keys: Vec<&str> = set
        .iter()
        .map(|(k, _)| *k)
        .chain(remove.iter().copied())
        .collect();
    vec![
        must_exist("Logical_Switch_Port", name),
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", name]],
            "mutations": [["options", "delete", sset(&keys)]]}),
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", name]],
            "mutations": [["options", "insert", omap(set)]]}),
    ]
}

/// `ovn-nbctl lsp-add SW NAME -- lsp-set-type NAME localnet -- lsp-set-addresses NAME unknown
/// -- lsp-set-options NAME network_name=NET`: the switch's way onto provider network `net`.
pub fn localnet(sw: &str, name: &str, net: &str) -> Txn {
    let l = label("lsp", name);
    vec![
        must_exist("Logical_Switch", sw),
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": l,
            "row": {"name": name, "type": "localnet", "addresses": "unknown",
                    "options": omap(&[("network_name", net)])}}),
        add_to("Logical_Switch", sw, "ports", &l),
    ]
}

/// `ovn-nbctl set Logical_Router ROUTER options:KEY=VALUE...`: `set` written (replacing those
/// keys), other options kept.
pub fn set_router_options(router: &str, set: &[(&str, &str)]) -> Txn {
    let keys: Vec<&str> = set.iter().map(|(k, _)| *k).collect();
    vec![
        must_exist("Logical_Router", router),
        json!({"op": "mutate", "table": "Logical_Router", "where": [["name", "==", router]],
            "mutations": [["options", "delete", sset(&keys)]]}),
        json!({"op": "mutate", "table": "Logical_Router", "where": [["name", "==", router]],
            "mutations": [["options", "insert", omap(set)]]}),
    ]
}

/// `ovn-nbctl lr-add NAME`.
pub fn router(name: &str) -> Txn {
    vec![json!({"op": "insert", "table": "Logical_Router", "row": {"name": name}})]
}

/// `ovn-nbctl lrp-add ROUTER NAME MAC NETWORKS...`.
pub fn router_port(router: &str, name: &str, mac: &str, networks: &[&str]) -> Txn {
    let l = label("lrp", name);
    vec![
        must_exist("Logical_Router", router),
        json!({"op": "insert", "table": "Logical_Router_Port", "uuid-name": l,
            "row": {"name": name, "mac": mac, "networks": sset(networks)}}),
        add_to("Logical_Router", router, "ports", &l),
    ]
}

/// The switch side of a switch–router patch: `ovn-nbctl lsp-add SW NAME -- lsp-set-type NAME
/// router -- lsp-set-addresses NAME router -- lsp-set-options NAME router-port=LRP`.
pub fn patch(sw: &str, name: &str, lrp: &str) -> Txn {
    let l = label("lsp", name);
    vec![
        must_exist("Logical_Switch", sw),
        must_exist("Logical_Router_Port", lrp),
        json!({"op": "insert", "table": "Logical_Switch_Port", "uuid-name": l,
            "row": {"name": name, "type": "router", "addresses": "router",
                "options": omap(&[("router-port", lrp)])}}),
        add_to("Logical_Switch", sw, "ports", &l),
    ]
}

/// `ovn-nbctl lrp-set-gateway-chassis LRP CHASSIS PRIORITY`.
pub fn gateway_chassis(lrp: &str, chassis: &str, priority: i64) -> Txn {
    let name = format!("{lrp}-{chassis}");
    let l = label("gc", &name);
    vec![
        must_exist("Logical_Router_Port", lrp),
        json!({"op": "insert", "table": "Gateway_Chassis", "uuid-name": l,
            "row": {"name": name, "chassis_name": chassis, "priority": priority}}),
        add_to("Logical_Router_Port", lrp, "gateway_chassis", &l),
    ]
}

/// A NAT rule (`ovn-nbctl lr-nat-add ROUTER TYPE EXTERNAL_IP LOGICAL_IP [LOGICAL_PORT EXTERNAL_MAC]`).
#[derive(Debug, Clone)]
pub struct Nat<'a> {
    /// `snat`, `dnat` or `dnat_and_snat`.
    pub kind: &'a str,
    /// The external address.
    pub external_ip: &'a str,
    /// The logical address (or network, for snat).
    pub logical_ip: &'a str,
    /// Distributed NAT: the port and its external MAC.
    pub logical_port: Option<(&'a str, &'a str)>,
}

/// `ovn-nbctl lr-nat-add`.
pub fn nat(router: &str, n: Nat<'_>) -> Txn {
    let l = label(
        "nat",
        &format!("{router}_{}_{}_{}", n.kind, n.external_ip, n.logical_ip),
    );
    let mut row = json!({"type": n.kind, "external_ip": n.external_ip, "logical_ip": n.logical_ip});
    if let Some((p, m)) = n.logical_port {
        row["logical_port"] = json!(p);
        row["external_mac"] = json!(m);
    }
    vec![
        must_exist("Logical_Router", router),
        json!({"op": "insert", "table": "NAT", "uuid-name": l, "row": row}),
        add_to("Logical_Router", router, "nat", &l),
    ]
}

/// `ovn-nbctl lb-add NAME VIP BACKENDS PROTOCOL`, then `ls-lb-add`/`lr-lb-add` on each of
/// `switches` and `routers`.
pub fn load_balancer(
    name: &str,
    vip: &str,
    backends: &[&str],
    protocol: &str,
    switches: &[&str],
    routers: &[&str],
) -> Txn {
    let l = label("lb", name);
    let mut ops = vec![
        json!({"op": "insert", "table": "Load_Balancer", "uuid-name": l,
        "row": {"name": name, "protocol": protocol,
            "vips": omap(&[(vip, &backends.join(","))])}}),
    ];
    for s in switches {
        ops.push(must_exist("Logical_Switch", s));
        ops.push(add_to("Logical_Switch", s, "load_balancer", &l));
    }
    for r in routers {
        ops.push(must_exist("Logical_Router", r));
        ops.push(add_to("Logical_Router", r, "load_balancer", &l));
    }
    ops
}

/// A `Load_Balancer_Health_Check` for `vip` (as the `vips` key is written) of load balancer
/// `lb` with `options` (`interval`, `timeout`, `success_count`, `failure_count`), and the
/// `ip_port_mappings` entries (`backend IP` → `LPORT:SOURCE_IP`).
pub fn health_check(
    lb: &str,
    vip: &str,
    options: &[(&str, &str)],
    mappings: &[(&str, &str)],
) -> Txn {
    let l = label("hc", lb);
    vec![
        must_exist("Load_Balancer", lb),
        json!({"op": "insert", "table": "Load_Balancer_Health_Check", "uuid-name": l,
            "row": {"vip": vip, "options": omap(options)}}),
        json!({"op": "mutate", "table": "Load_Balancer", "where": [["name", "==", lb]],
            "mutations": [["health_check", "insert", ["set", [["named-uuid", l]]]],
                          ["ip_port_mappings", "insert", omap(mappings)]]}),
    ]
}

/// `ovn-nbctl acl-add SW DIRECTION PRIORITY MATCH ACTION` (`from-lport`/`to-lport`;
/// `allow-related`, `allow`, `drop`, `reject`).
pub fn acl(sw: &str, direction: &str, priority: i64, match_: &str, action: &str) -> Txn {
    let l = label("acl", &format!("{sw}_{direction}_{priority}"));
    vec![
        must_exist("Logical_Switch", sw),
        json!({"op": "insert", "table": "ACL", "uuid-name": l,
            "row": {"direction": direction, "priority": priority, "match": match_, "action": action}}),
        add_to("Logical_Switch", sw, "acls", &l),
    ]
}

/// `ovn-nbctl dhcp-options-create CIDR -- dhcp-options-set-options ... -- lsp-set-dhcpv4-options
/// PORT ...`: a DHCP_Options row for `cidr` with `options` (`router`, `server_id`, `server_mac`,
/// `lease_time`, ...), used by `port`.
pub fn dhcpv4(port: &str, cidr: &str, options: &[(&str, &str)]) -> Txn {
    let l = label("dhcp", port);
    vec![
        must_exist("Logical_Switch_Port", port),
        json!({"op": "insert", "table": "DHCP_Options", "uuid-name": l,
            "row": {"cidr": cidr, "options": omap(options)}}),
        json!({"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", port]],
            "row": {"dhcpv4_options": ["named-uuid", l]}}),
    ]
}

/// `ovn-nbctl --wait=hv sync`'s first half: bump `NB_Global.nb_cfg`.
pub fn bump_nb_cfg() -> Txn {
    vec![json!({"op": "mutate", "table": "NB_Global", "where": [],
        "mutations": [["nb_cfg", "+=", 1]]})]
}
