//! Row-level view of the SB tables northd writes besides `Logical_Flow`, read straight from a
//! database with `ovsdb-client transact` (no holdfast code between the server and the text),
//! keyed by names and with every UUID reference replaced by the referenced row's name, so two
//! SBs written by different northds compare column by column.
//!
//! [`dump`] gives `table → key → column → value text`; [`diff`] lists what differs. Names
//! made from datapath tunnel keys are shown with the datapath's name (`<sw0>_pg_web`), and
//! what each northd allocates its own way (port and datapath tunnel keys, the random
//! `mac_prefix` and `svc_monitor_mac`) is compared only with `HF_KEYS=1`.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;

use serde_json::Value;

use crate::common::run_ok;

/// `table → row key → column → value`.
pub type Tables = BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>;

/// The tables compared and the columns northd does not own (written by ovn-controller or the
/// test's bindings, or bookkeeping).
const TABLES: &[(&str, &[&str])] = &[
    (
        "SB_Global",
        &["nb_cfg", "connections", "ssl", "ipsec", "external_ids"],
    ),
    ("Datapath_Binding", &[]),
    (
        "Port_Binding",
        &[
            "chassis",
            "up",
            "encap",
            "additional_chassis",
            "additional_encap",
            "virtual_parent",
            "gateway_chassis",
        ],
    ),
    ("Multicast_Group", &[]),
    ("Port_Group", &[]),
    ("Address_Set", &[]),
    ("Load_Balancer", &[]),
    ("DNS", &[]),
    ("DHCP_Options", &[]),
    ("DHCPv6_Options", &[]),
    ("HA_Chassis_Group", &[]),
    ("HA_Chassis", &[]),
    ("Logical_DP_Group", &[]),
    ("Meter_Band", &[]),
    ("Meter", &[]),
    ("Chassis_Template_Var", &[]),
    ("Mirror", &[]),
    ("Service_Monitor", &[]),
    // `seq_no` is the controllers' (a flush request).
    ("IP_Multicast", &["seq_no"]),
    // The controllers' rows: compared for the stale ones northd deletes.
    ("IGMP_Group", &[]),
    // `disc` is random in ovn-northd (holdfast's is checked positive by the BFD test).
    ("BFD", &["disc"]),
];

fn select(remote: &str, table: &str) -> Vec<serde_json::Map<String, Value>> {
    let txn = serde_json::json!(["OVN_Southbound", {"op": "select", "table": table, "where": []}]);
    let out = run_ok(
        Command::new("ovsdb-client")
            .arg("transact")
            .arg(remote)
            .arg(txn.to_string()),
    );
    let v: Value = serde_json::from_str(&out).expect("ovsdb-client transact reply");
    v[0]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("select {table}: {out}"))
        .iter()
        .filter_map(|r| r.as_object().cloned())
        .collect()
}

fn uuid_of(r: &serde_json::Map<String, Value>) -> String {
    r["_uuid"][1].as_str().unwrap_or_default().to_string()
}

fn render(v: &Value, names: &HashMap<String, String>) -> String {
    match v {
        Value::Array(a) if a.len() == 2 && a[0] == "uuid" => {
            let u = a[1].as_str().unwrap_or_default();
            names
                .get(u)
                .cloned()
                .unwrap_or_else(|| format!("<{}>", &u[..8.min(u.len())]))
        }
        Value::Array(a) if a.len() == 2 && a[0] == "set" => {
            let mut items: Vec<String> = a[1]
                .as_array()
                .map(|x| x.iter().map(|e| render(e, names)).collect())
                .unwrap_or_default();
            items.sort();
            format!("[{}]", items.join(", "))
        }
        Value::Array(a) if a.len() == 2 && a[0] == "map" => {
            let mut items: Vec<String> = a[1]
                .as_array()
                .map(|x| {
                    x.iter()
                        .map(|kv| format!("{}={}", render(&kv[0], names), render(&kv[1], names)))
                        .collect()
                })
                .unwrap_or_default();
            items.sort();
            format!("{{{}}}", items.join(", "))
        }
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn ext_id(r: &serde_json::Map<String, Value>, key: &str) -> Option<String> {
    r.get("external_ids")?[1]
        .as_array()?
        .iter()
        .find(|kv| kv[0] == key)
        .and_then(|kv| kv[1].as_str().map(str::to_string))
}

/// Every compared table of the SB at `remote`.
pub fn dump(remote: &str) -> Tables {
    let rows: BTreeMap<&str, Vec<serde_json::Map<String, Value>>> = TABLES
        .iter()
        .map(|(t, _)| (*t, select(remote, t)))
        .chain(std::iter::once(("Chassis", select(remote, "Chassis"))))
        .collect();
    // Names of referenced rows.
    let mut names: HashMap<String, String> = HashMap::new();
    let s = |r: &serde_json::Map<String, Value>, c: &str| {
        r.get(c)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    for r in &rows["Chassis"] {
        names.insert(uuid_of(r), s(r, "name"));
    }
    for r in &rows["Datapath_Binding"] {
        names.insert(uuid_of(r), ext_id(r, "name").unwrap_or_else(|| uuid_of(r)));
    }
    for r in &rows["Port_Binding"] {
        names.insert(uuid_of(r), s(r, "logical_port"));
    }
    for r in &rows["Mirror"] {
        names.insert(uuid_of(r), format!("mirror:{}", s(r, "name")));
    }
    for r in &rows["HA_Chassis"] {
        let ch = render(&r["chassis"], &names);
        names.insert(uuid_of(r), format!("{ch}@{}", r["priority"]));
    }
    for r in &rows["HA_Chassis_Group"] {
        names.insert(uuid_of(r), s(r, "name"));
    }
    // Bands have no name: by what they say.
    for r in &rows["Meter_Band"] {
        names.insert(
            uuid_of(r),
            format!("{}/{}/{}", s(r, "action"), r["rate"], r["burst_size"]),
        );
    }
    for r in &rows["Logical_DP_Group"] {
        let dps = render(&r["datapaths"], &names);
        names.insert(uuid_of(r), format!("dpg{dps}"));
    }
    // Datapath tunnel keys → names, so names derived from keys (`<key>_<pg>`,
    // `_rtr_lb_<key>_ip4`) compare across two SBs whose keys differ.
    let by_key: HashMap<String, String> = rows["Datapath_Binding"]
        .iter()
        .map(|r| (r["tunnel_key"].to_string(), names[&uuid_of(r)].clone()))
        .collect();
    let keyed = |n: String| -> String {
        if let Some(rest) = n.strip_prefix("_rtr_lb_")
            && let Some((k, tail)) = rest.split_once('_')
            && let Some(d) = by_key.get(k)
        {
            return format!("_rtr_lb_<{d}>_{tail}");
        }
        if let Some((k, tail)) = n.split_once('_')
            && let Some(d) = by_key.get(k)
        {
            return format!("<{d}>_{tail}");
        }
        n
    };
    let mut out = Tables::new();
    for (table, skip) in TABLES {
        let t = out.entry(table.to_string()).or_default();
        for r in &rows[table] {
            let key = match *table {
                "SB_Global" => "SB_Global".to_string(),
                "Datapath_Binding" => names[&uuid_of(r)].clone(),
                "Port_Binding" => s(r, "logical_port"),
                "Multicast_Group" => {
                    format!("{}/{}", render(&r["datapath"], &names), s(r, "name"))
                }
                "HA_Chassis" | "Logical_DP_Group" | "Meter_Band" => names[&uuid_of(r)].clone(),
                "Chassis_Template_Var" => s(r, "chassis"),
                "Port_Group" | "Address_Set" => keyed(s(r, "name")),
                // By SB's index.
                "Service_Monitor" => format!(
                    "{} {}:{} {}",
                    s(r, "logical_port"),
                    s(r, "ip"),
                    r["port"],
                    render(&r["protocol"], &names)
                ),
                "IP_Multicast" => render(&r["datapath"], &names),
                "BFD" => format!("{} {}", s(r, "logical_port"), s(r, "dst_ip")),
                "IGMP_Group" => format!(
                    "{}/{}@{}",
                    render(&r["datapath"], &names),
                    s(r, "address"),
                    render(&r["chassis"], &names)
                ),
                // DNS rows have no name: by their switches.
                "DNS" => format!("dns{}", render(&r["datapaths"], &names)),
                _ => s(r, "name"),
            };
            let mut cols = BTreeMap::new();
            for (c, v) in r {
                if c == "_uuid" || c == "_version" || skip.contains(&c.as_str()) {
                    continue;
                }
                if c == "name" && matches!(*table, "Port_Group" | "Address_Set") {
                    continue;
                }
                // Tunnel keys of datapaths and ports are allocated in each northd's own
                // order; random MACs are random. Compared only with HF_KEYS=1.
                let arbitrary = (c == "tunnel_key"
                    && matches!(*table, "Datapath_Binding" | "Port_Binding"))
                    || (key == "svc_monitor_mac" && c == "addresses");
                if arbitrary && std::env::var("HF_KEYS").is_err() {
                    continue;
                }
                let mut text = if *table == "Port_Binding" && c == "nat_addresses" {
                    render(&sorted_nat_addresses(v), &names)
                } else {
                    render(v, &names)
                };
                if *table == "SB_Global" && c == "options" && std::env::var("HF_KEYS").is_err() {
                    text = text
                        .split(", ")
                        .filter(|kv| {
                            !kv.trim_start_matches('{').starts_with("\"mac_prefix\"")
                                && !kv
                                    .trim_start_matches('{')
                                    .starts_with("\"svc_monitor_mac\"")
                        })
                        .collect::<Vec<_>>()
                        .join(", ");
                }
                cols.insert(c.clone(), text);
            }
            let mut k = key.clone();
            let mut n = 1;
            while t.contains_key(&k) {
                n += 1;
                k = format!("{key}#{n}");
            }
            t.insert(k, cols);
        }
    }
    out
}

/// One line per difference: `table key: only in A`, `... only in B`, or `column: A → B`.
/// Values of UUID-valued external ids (`logical-switch`, ...) differ between two NBs and are
/// compared by presence only.
pub fn diff(a: &Tables, b: &Tables) -> Vec<String> {
    let mut lines = Vec::new();
    let empty = BTreeMap::new();
    let tables: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for table in tables {
        let ra = a.get(table).unwrap_or(&empty);
        let rb = b.get(table).unwrap_or(&empty);
        for (k, ca) in ra {
            let Some(cb) = rb.get(k) else {
                lines.push(format!("{table} {k}: only in ovn-northd (-) {ca:?}"));
                continue;
            };
            let cols: std::collections::BTreeSet<&String> = ca.keys().chain(cb.keys()).collect();
            for c in cols {
                let (va, vb) = (
                    ca.get(c).map(|v| normalise_uuids(v)),
                    cb.get(c).map(|v| normalise_uuids(v)),
                );
                if va != vb {
                    lines.push(format!(
                        "{table} {k} {c}: {} (ovn-northd) vs {} (holdfast)",
                        ca.get(c).map(String::as_str).unwrap_or("<none>"),
                        cb.get(c).map(String::as_str).unwrap_or("<none>")
                    ));
                }
            }
        }
        for (k, cb) in rb.iter().filter(|(k, _)| !ra.contains_key(*k)) {
            lines.push(format!("{table} {k}: only in holdfast (+) {cb:?}"));
        }
    }
    lines
}

/// UUID texts (36 characters, hex and dashes) replaced by `<uuid>`.
fn normalise_uuids(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if i + 36 <= b.len() && is_uuid(&s[i..i + 36]) {
            out.push_str("<uuid>");
            i += 36;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

fn is_uuid(s: &str) -> bool {
    s.bytes().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => c == b'-',
        _ => c.is_ascii_hexdigit(),
    })
}

/// Differences every comparison allows, with why: `HA_Chassis_Group.ref_chassis` depends on
/// where ports are bound (holdfast's compile does not see bindings), and `Logical_DP_Group`
/// rows follow how each northd groups its flows (compared by `northd_flow_diff`).
pub fn allowed(line: &str) -> bool {
    (line.starts_with("HA_Chassis_Group ") && line.contains(" ref_chassis: "))
        || line.starts_with("Logical_DP_Group ")
}

/// `ovn-nbctl` commands that add to a generated topology what the generator lacks but
/// production NBs have, for the non-flow tables: container ports with `tag_request`
/// (allocated and fixed), `nat-addresses=router`, `requested-chassis` for live migration,
/// an external port with an HA chassis group, localport and virtual ports, a disabled port,
/// neutron names, multicast options, `vlan-passthru`, router `snat-ct-zone` and
/// `always_learn_from_arp_request`, requested tunnel keys (sw0 77, ctr3 99), periodic IPv6 router advertisements, a load balancer group, an LB answering neighbour
/// requests for all its VIPs.
pub fn production_extras(t: &crate::topo::Topology) -> Vec<Vec<String>> {
    let vm = |i: usize| t.vifs[i % t.vifs.len()].name.clone();
    let sw0: Vec<String> = t
        .vifs
        .iter()
        .filter(|v| v.switch == 0)
        .map(|v| v.name.clone())
        .collect();
    let parent = sw0[0].clone();
    let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut cmds = dhcp_extras(t, &parent);
    cmds.extend(vec![
        c(&["lsp-add", "sw0", "ctr1", &parent, "0"]),
        c(&["lsp-set-addresses", "ctr1", "02:00:00:00:0c:01 10.0.0.201"]),
        c(&["lsp-add", "sw0", "ctr2", &parent, "0"]),
        c(&["lsp-add", "sw0", "ctr3", &parent, "7"]),
        periodic_ra(),
        // Port mirrors (GRE to-lport and ERSPAN from-lport) on a VIF.
        c(&[
            "mirror-add",
            "mirror-gre",
            "gre",
            "7",
            "to-lport",
            "192.0.2.7",
        ]),
        c(&[
            "mirror-add",
            "mirror-erspan",
            "erspan",
            "8",
            "from-lport",
            "192.0.2.8",
        ]),
        c(&["lsp-attach-mirror", &vm(1), "mirror-gre"]),
        c(&["lsp-attach-mirror", &vm(1), "mirror-erspan"]),
        // Chassis template variables (copied to SB by chassis name).
        c(&[
            "create",
            "Chassis_Template_Var",
            "chassis=hv1",
            "variables:vip=10.0.0.77",
            "variables:backends=\"10.0.0.10:80,10.0.0.11:80\"",
        ]),
        c(&[
            "create",
            "Chassis_Template_Var",
            "chassis=hv2",
            "variables:vip=10.0.0.78",
        ]),
        // One DNS row on sw0 (values are lowercased in SB).
        c(&[
            "--id=@dns",
            "create",
            "DNS",
            "records:vm0.example.org=10.0.0.10",
            "records:www.example.org=\"10.0.0.11 FD00::B\"",
        ]),
        c(&["add", "logical_switch", "sw0", "dns_records", "@dns"]),
        // QoS queues: a bound VIF (per chassis) and the localnet port (its own space).
        c(&[
            "set",
            "logical_switch_port",
            &vm(0),
            "options:qos_max_rate=1000000",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            "ln-ext",
            "options:qos_burst=10000",
        ]),
        // An explicit NAT address list on an internal switch's router port (announced where
        // the router's first gateway port is).
        c(&[
            "set",
            "logical_switch_port",
            "sw0-lr0",
            "options:nat-addresses=\"02:00:00:00:00:01 10.0.0.99\"",
        ]),
        // A load balancer group on sw0 and on the router; an LB with a neighbour responder
        // for all its VIPs on the router.
        c(&[
            "--id=@glb",
            "create",
            "Load_Balancer",
            "name=lb-grouped",
            "protocol=tcp",
            "vips:\"10.0.0.250:80\"=\"10.0.0.10:80\"",
        ]),
        c(&[
            "--id=@lbg",
            "create",
            "Load_Balancer_Group",
            "name=lbg1",
            "load_balancer=@glb",
        ]),
        c(&[
            "add",
            "logical_switch",
            "sw0",
            "load_balancer_group",
            "@lbg",
        ]),
        c(&[
            "add",
            "logical_router",
            "lr0",
            "load_balancer_group",
            "@lbg",
        ]),
        c(&[
            "--id=@alb",
            "create",
            "Load_Balancer",
            "name=lb-all",
            "protocol=udp",
            "options:neighbor_responder=all",
            "vips:\"198.18.0.5:53\"=\"10.0.0.10:53\"",
        ]),
        c(&["add", "logical_router", "lr0", "load_balancer", "@alb"]),
        c(&[
            "set",
            "logical_switch",
            "sw0",
            "other_config:requested-tnl-key=77",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            "ctr3",
            "options:requested-tnl-key=99",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            "ext-lr0",
            "options:nat-addresses=router",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            &vm(1),
            "options:requested-chassis=hv1,hv2",
            "options:activation-strategy=rarp",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            &vm(0),
            "external_ids:neutron\\:port_name=port-zero",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            &vm(2),
            "options:mcast_flood=true",
            "options:mcast_flood_reports=true",
        ]),
        c(&["lsp-set-enabled", &vm(3), "disabled"]),
        c(&[
            "set",
            "logical_switch",
            "sw0",
            "external_ids:neutron\\:network_name=net-zero",
            "other_config:vlan-passthru=true",
        ]),
        c(&[
            "set",
            "logical_router",
            "lr0",
            "options:mcast_relay=true",
            "options:snat-ct-zone=5",
            "options:always_learn_from_arp_request=false",
            "external_ids:neutron\\:router_name=router-zero",
        ]),
        c(&["lsp-add", "sw0", "lport0"]),
        c(&["lsp-set-type", "lport0", "localport"]),
        c(&[
            "lsp-set-addresses",
            "lport0",
            "02:00:00:00:0d:01 10.0.0.222",
        ]),
        c(&["lsp-add", "sw0", "virt0"]),
        c(&["lsp-set-type", "virt0", "virtual"]),
        c(&["lsp-set-addresses", "virt0", "02:00:00:00:0e:01 10.0.0.240"]),
        c(&[
            "lsp-set-options",
            "virt0",
            "virtual-ip=10.0.0.240",
            &format!("virtual-parents={parent}"),
        ]),
        c(&[
            "--id=@hc1",
            "create",
            "HA_Chassis",
            "chassis_name=gw1",
            "priority=30",
        ]),
        c(&[
            "--id=@hc2",
            "create",
            "HA_Chassis",
            "chassis_name=gw2",
            "priority=20",
        ]),
        c(&[
            "--id=@hg",
            "create",
            "HA_Chassis_Group",
            "name=hg-ext",
            "ha_chassis=[@hc1,@hc2]",
        ]),
        c(&["lsp-add", "ext", "extport0"]),
        c(&["lsp-set-type", "extport0", "external"]),
        c(&[
            "lsp-set-addresses",
            "extport0",
            "02:00:00:00:0f:01 172.16.0.77",
        ]),
        c(&[
            "set",
            "logical_switch_port",
            "extport0",
            "ha_chassis_group=@hg",
        ]),
    ]);
    cmds
}

/// Native DHCPv4 and DHCPv6 on `port` (a VIF of sw0; given an IPv6 address in `fd00::/64`
/// when its topology has none), with options of every value type ovn-controller encodes.
pub fn dhcp_extras(t: &crate::topo::Topology, port: &str) -> Vec<Vec<String>> {
    let c = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let vif = t
        .vifs
        .iter()
        .find(|v| v.name == port)
        .expect("the DHCP port is a VIF");
    let mut cmds = Vec::new();
    if vif.ip6.is_none() {
        cmds.push(c(&[
            "lsp-set-addresses",
            port,
            &format!("{} {} fd00::d1", vif.mac, vif.ip4),
        ]));
    }
    cmds.extend([
        c(&[
            "--id=@dhcp4",
            "create",
            "DHCP_Options",
            "cidr=10.0.0.0/24",
            "options:server_id=10.0.0.1",
            "options:server_mac=02:00:00:00:00:fe",
            "options:lease_time=3600",
            "options:router=10.0.0.1",
            r#"options:dns_server="{8.8.8.8, 8.8.4.4}""#,
            r#"options:domain_name="\"example.org\"""#,
            "options:mtu=1442",
            "options:default_ttl=64",
            "options:T1=1800",
            "options:ip_forward_enable=1",
            r#"options:classless_static_route="{30.0.0.0/24,10.0.0.10, 0.0.0.0/0,10.0.0.1}""#,
            r#"options:domain_search_list="\"a.example.org,b.example.org\"""#,
            r#"options:tftp_server="\"tftp.example.org\"""#,
            r#"options:bootfile_name_alt="\"ipxe.efi\"""#,
            "options:next_server=10.0.0.2",
        ]),
        c(&["set", "logical_switch_port", port, "dhcpv4_options=@dhcp4"]),
        c(&[
            "--id=@dhcp6",
            "create",
            "DHCP_Options",
            r#"cidr="fd00::/64""#,
            r#"options:server_id="02:00:00:00:00:fe""#,
            r#"options:dns_server="{fd00::53}""#,
            r#"options:domain_search="\"example.org\"""#,
        ]),
        c(&["set", "logical_switch_port", port, "dhcpv6_options=@dhcp6"]),
    ]);
    cmds
}

/// Periodic IPv6 router advertisements (and prefix delegation) on the router's port to sw0.
pub fn periodic_ra() -> Vec<String> {
    [
        "set",
        "logical_router_port",
        "lr0-sw0",
        "ipv6_ra_configs:address_mode=slaac",
        "ipv6_ra_configs:send_periodic=true",
        "ipv6_ra_configs:max_interval=100",
        "ipv6_ra_configs:mtu=1400",
        "ipv6_ra_configs:rdnss=fd00::53",
        "options:prefix_delegation=true",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `nat_addresses` entries with their IP addresses sorted: each entry is one lport-addresses
/// string (`MAC IP... [is_chassis_resident(...)]`) whose IP order is the order each northd
/// happens to visit NAT rows in (ovn-controller reads them as a set).
fn sorted_nat_addresses(v: &Value) -> Value {
    let one = |s: &str| -> String {
        let words: Vec<&str> = s.split_whitespace().collect();
        let Some((mac, rest)) = words.split_first() else {
            return s.to_string();
        };
        let (mut ips, tail): (Vec<&str>, Vec<&str>) = rest
            .iter()
            .partition(|w| !w.starts_with("is_chassis_resident"));
        ips.sort();
        std::iter::once(*mac)
            .chain(ips)
            .chain(tail)
            .collect::<Vec<_>>()
            .join(" ")
    };
    match v {
        Value::String(s) => Value::String(one(s)),
        Value::Array(a) if a.len() == 2 && a[0] == "set" => serde_json::json!([
            "set",
            a[1].as_array()
                .map(|x| {
                    x.iter()
                        .map(|e| Value::String(one(e.as_str().unwrap_or_default())))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        ]),
        other => other.clone(),
    }
}
