//! A hand-written program shared by the datapath's tests, the `holdfast datapath` daemon test
//! and the `sandbox` benchmark: one logical switch `sw0` (tunnel key 1) spread over two chassis,
//! `vm1` (key 1, MAC 02:00:00:00:00:01, 10.0.0.1) on chassis 1 and `vm2` (key 2,
//! MAC 02:00:00:00:00:02, 10.0.0.2) on chassis 2, with a stateful policy in OVN's shape:
//! connections from `vm1` are committed (allow-related), new connections from `vm2` drop,
//! and the egress pipeline commits what it delivers in the destination port's zone. Not part
//! of the stable API.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use crate::proto::{ChassisMsg, DatapathMsg, FlowMsg, GroupMsg, LocationMsg, PortMsg, ProgramMsg};

/// `vm1`'s MAC.
pub const VM1_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// `vm2`'s MAC.
pub const VM2_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// `vm1`'s IP.
pub const VM1_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// `vm2`'s IP.
pub const VM2_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// `vm1`'s zone (`lsp/vm1`).
pub const VM1_ZONE: u16 = 1;
/// `vm2`'s zone (`lsp/vm2`).
pub const VM2_ZONE: u16 = 2;

fn f(egress: bool, table: u8, priority: u16, m: &str, a: &str) -> FlowMsg {
    FlowMsg {
        egress,
        table,
        priority,
        matches: m.into(),
        actions: a.into(),
        id: format!("{}|{table}|{priority}|{m}", if egress { "E" } else { "I" }).into(),
        stage: format!("{}_{table}", if egress { "ls_out" } else { "ls_in" }).into(),
        ..FlowMsg::default()
    }
}

/// The flows of `sw0`.
pub fn flows() -> Vec<FlowMsg> {
    let l2 = |mac: [u8; 6], port: &str| {
        f(
            false,
            2,
            50,
            &format!(
                "eth.dst == {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
            ),
            &format!("outport = \"{port}\"; output;"),
        )
    };
    vec![
        f(false, 0, 100, "ip", "ct_next;"),
        f(false, 0, 0, "1", "next;"),
        f(false, 1, 65535, "ct.inv", "drop;"),
        f(false, 1, 65534, "ct.est", "next;"),
        f(
            false,
            1,
            100,
            "ct.new && inport == \"vm1\"",
            "ct_commit { }; next;",
        ),
        f(false, 1, 90, "ct.new", "drop;"),
        f(false, 1, 0, "1", "next;"),
        l2(VM1_MAC, "vm1"),
        l2(VM2_MAC, "vm2"),
        f(
            false,
            2,
            70,
            "eth.mcast",
            "outport = \"_MC_flood\"; output;",
        ),
        f(true, 0, 100, "ip", "ct_next;"),
        f(true, 0, 0, "1", "next;"),
        f(true, 1, 65535, "ct.inv", "drop;"),
        f(true, 1, 65534, "ct.est", "next;"),
        f(true, 1, 100, "ct.new", "ct_commit { }; next;"),
        f(true, 1, 0, "1", "next;"),
        f(true, 2, 0, "1", "output;"),
    ]
}

/// The datapath of chassis `hv` (1 or 2; `hv1`/`hv2`, tunnel IP `ips[hv - 1]`) with its VM's
/// port (`vm1` or `vm2`, with its MAC) and no controller or program yet.
pub fn chassis(hv: u32, ips: [IpAddr; 2]) -> crate::Datapath {
    let (name, mac, ip) = if hv == 1 {
        ("vm1", VM1_MAC, ips[0])
    } else {
        ("vm2", VM2_MAC, ips[1])
    };
    let mut dp = crate::Datapath::new(crate::DatapathConfig::new(&format!("hv{hv}"), ip));
    dp.add_port(name, Some(mac));
    dp
}

/// The program for chassis `hv` (1 or 2; `hv1`/`hv2`) with the two chassis's tunnel IPs.
pub fn program(generation: u64, hv: u32, ips: [IpAddr; 2]) -> ProgramMsg {
    let port = |name: &str, key: u32, home: u32, zone: u16, mac: [u8; 6], ip: Ipv4Addr| PortMsg {
        name: name.into(),
        key,
        location: if home == hv {
            LocationMsg::Local(name.into())
        } else {
            LocationMsg::Remote(home)
        },
        zone,
        resident: home == hv,
        addresses: vec![format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} {ip}",
            mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
        )],
        ..PortMsg::default()
    };
    let zones: BTreeMap<String, u16> = [
        ("lsp/vm1".to_string(), VM1_ZONE),
        ("lsp/vm2".to_string(), VM2_ZONE),
    ]
    .into();
    ProgramMsg {
        generation,
        chassis: format!("hv{hv}"),
        nb_cfg: generation as i64,
        datapaths: vec![
            DatapathMsg {
                name: "sw0".into(),
                tunnel_key: 1,
                router_zones: None,
                ports: vec![
                    port("vm1", 1, 1, VM1_ZONE, VM1_MAC, VM1_IP),
                    port("vm2", 2, 2, VM2_ZONE, VM2_MAC, VM2_IP),
                ]
                .into(),
                groups: vec![GroupMsg {
                    name: "_MC_flood".into(),
                    key: 32768,
                    members: vec!["vm1".into(), "vm2".into()],
                }]
                .into(),
                flows: flows().into_iter().map(Into::into).collect(),
            }
            .into(),
        ],
        zones,
        chassis_table: (1..=2u32)
            .map(|id| ChassisMsg {
                id,
                name: format!("hv{id}"),
                encap_type: "geneve".into(),
                ip: ips[id as usize - 1].to_string(),
            })
            .collect(),
        owner: 1,
        ..ProgramMsg::default()
    }
}
