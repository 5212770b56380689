//! The program the northd-shaped tests and the `pipeline` benchmark share: what ovn-northd 23.03
//! emits (in OVN's stage numbering and `reg`/`flags` conventions) for a switch `sw0` with one VM
//! (`vm1`, 10.0.0.2) behind a stateful ACL (allow-related from the VM, default drop towards it),
//! a router `lr0` that SNATs 10.0.0.0/24 to 172.16.0.100, and an external switch `ext` whose
//! localnet port `ln` reaches the server 172.16.0.50. Not part of the stable API.

use std::net::{IpAddr, Ipv4Addr};

use Pipe::{Egress as E, Ingress as I};
use hf_conntrack::Owner;
use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_expr::actions::Pipeline as Pipe;

use crate::{DatapathKind, DatapathSpec, FlowSpec, Neighbour, PortLocation, PortSpec, ProgramSpec};

pub const VM_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const LR_IN_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];
pub const LR_EXT_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0xfe];
pub const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
pub const VM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const SNAT: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 100);
pub const SERVER: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 50);
pub const VM_PORT: u32 = 1;
pub const LOCALNET: u32 = 2;
pub const VM_ZONE: u16 = 1;
pub const SNAT_ZONE: u16 = 4;

pub type F<'a> = (Pipe, u8, u16, &'a str, &'a str);

/// Flows for a datapath, plus OVN's implicit shape: every table without a priority-0 flow gets
/// `next;` (the last table of each pipeline `output;`).
pub fn flows(list: &[F<'_>], n_in: u8, n_out: u8) -> Vec<FlowSpec> {
    // The texts are this module's own and covered by its tests; one that failed to parse would
    // show up as a missing flow there.
    let mut out: Vec<FlowSpec> = list
        .iter()
        .filter_map(|&(p, t, prio, m, a)| FlowSpec::parse(p, t, prio, m, a).ok())
        .collect();
    for (pipe, n) in [(Pipe::Ingress, n_in), (Pipe::Egress, n_out)] {
        for t in 0..n {
            if !list.iter().any(|f| f.0 == pipe && f.1 == t && f.2 == 0) {
                let a = if t + 1 == n { "output;" } else { "next;" };
                out.extend(FlowSpec::parse(pipe, t, 0, "1", a).ok());
            }
        }
    }
    out
}

pub fn port(name: &str, key: u32, location: PortLocation, zone: u16) -> PortSpec {
    PortSpec {
        name: name.into(),
        key,
        location,
        zone,
        ..PortSpec::default()
    }
}

pub fn patch(peer: &str) -> PortLocation {
    PortLocation::Patch { peer: peer.into() }
}

pub fn sw0_flows() -> Vec<FlowSpec> {
    flows(
        &[
            // ls_in_check_port_sec / ls_in_apply_port_sec, as northd 23.03 writes them (the
            // checks come from vm1's port_security).
            (I, 0, 100, "vlan.present", "drop;"),
            (I, 0, 100, "eth.src[40]", "drop;"),
            (I, 0, 50, "1", "reg0[15] = check_in_port_sec(); next;"),
            (I, 1, 50, "reg0[15] == 1", "drop;"),
            (I, 1, 0, "1", "next;"),
            // ls_in_pre_acl: VIF traffic goes to conntrack (REGBIT_CONNTRACK_DEFRAG).
            (I, 4, 100, "ip && inport == \"vm1\"", "reg0[0] = 1; next;"),
            // ls_in_pre_stateful
            (I, 6, 100, "reg0[0] == 1", "ct_next;"),
            // ls_in_acl: established replies pass, invalid and blocked drop, allow-related
            // commits new connections (REGBIT_CONNTRACK_COMMIT = reg0[1]).
            (
                I,
                8,
                65535,
                "ct.inv || (ct.est && ct.rpl && ct_mark.blocked == 1)",
                "drop;",
            ),
            (
                I,
                8,
                65535,
                "ct.est && !ct.rel && !ct.new && !ct.inv && ct.rpl && ct_mark.blocked == 0",
                "next;",
            ),
            (
                I,
                8,
                2002,
                "((ct.new && !ct.est) || (!ct.new && ct.est && !ct.rpl && ct_mark.blocked == 1)) && (inport == \"vm1\" && ip4 && tcp)",
                "reg0[1] = 1; next;",
            ),
            (
                I,
                8,
                2002,
                "!ct.new && ct.est && !ct.rpl && ct_mark.blocked == 0 && (inport == \"vm1\" && ip4 && tcp)",
                "next;",
            ),
            (I, 8, 1001, "inport == \"vm1\" && ip4", "drop;"),
            // ls_in_stateful
            (
                I,
                18,
                100,
                "reg0[1] == 1",
                "ct_commit { ct_mark.blocked = 0; }; next;",
            ),
            // ls_in_l2_lkup
            (
                I,
                25,
                50,
                "eth.dst == 02:00:00:00:00:fe",
                "outport = \"sw0-lr0\"; output;",
            ),
            (
                I,
                25,
                50,
                "eth.dst == 02:00:00:00:00:01",
                "outport = \"vm1\"; output;",
            ),
            (I, 25, 70, "eth.mcast", "outport = \"_MC_flood\"; output;"),
            (I, 25, 0, "1", "drop;"),
            // ls_out_pre_acl / ls_out_pre_stateful
            (E, 0, 100, "ip && outport == \"vm1\"", "reg0[0] = 1; next;"),
            (E, 2, 100, "reg0[0] == 1", "ct_next;"),
            // ls_out_acl: to-lport default drop for the VM, except replies of allowed
            // connections.
            (
                E,
                4,
                65535,
                "ct.inv || (ct.est && ct.rpl && ct_mark.blocked == 1)",
                "drop;",
            ),
            (
                E,
                4,
                65535,
                "ct.est && !ct.rel && !ct.new && !ct.inv && ct.rpl && ct_mark.blocked == 0",
                "next;",
            ),
            (E, 4, 1001, "outport == \"vm1\" && ip4", "drop;"),
            // ls_out_apply_port_sec
            (E, 9, 0, "1", "output;"),
        ],
        27,
        10,
    )
}

pub fn lr0_flows() -> Vec<FlowSpec> {
    flows(
        &[
            // lr_in_admission
            (
                I,
                0,
                50,
                "eth.dst == 02:00:00:00:00:fe && inport == \"lr0-sw0\"",
                "xreg0[0..47] = 02:00:00:00:00:fe; next;",
            ),
            (
                I,
                0,
                50,
                "eth.dst == 02:00:00:00:01:fe && inport == \"lr0-ext\"",
                "xreg0[0..47] = 02:00:00:00:01:fe; next;",
            ),
            (I, 0, 0, "1", "drop;"),
            // lr_in_lookup_neighbor / lr_in_learn_neighbor
            (I, 1, 0, "1", "reg9[2] = 1; next;"),
            (I, 2, 90, "reg9[2] == 1", "next;"),
            // lr_in_ip_input: TTL expiry.
            (I, 3, 30, "ip4 && ip.ttl == {0, 1}", "drop;"),
            // lr_in_unsnat
            (I, 4, 90, "ip && ip4.dst == 172.16.0.100", "ct_snat;"),
            // lr_in_ip_routing_pre / lr_in_ip_routing
            (I, 12, 0, "1", "reg7 = 0; next;"),
            (
                I,
                13,
                74,
                "ip4.dst == 10.0.0.0/24",
                "ip.ttl--; reg8[0..15] = 0; reg0 = ip4.dst; reg1 = 10.0.0.1; eth.src = 02:00:00:00:00:fe; outport = \"lr0-sw0\"; flags.loopback = 1; next;",
            ),
            (
                I,
                13,
                74,
                "ip4.dst == 172.16.0.0/24",
                "ip.ttl--; reg8[0..15] = 0; reg0 = ip4.dst; reg1 = 172.16.0.100; eth.src = 02:00:00:00:01:fe; outport = \"lr0-ext\"; flags.loopback = 1; next;",
            ),
            (I, 13, 0, "1", "drop;"),
            (I, 14, 150, "reg8[0..15] == 0", "next;"),
            (I, 15, 0, "1", "reg8[0..15] = 0; next;"),
            (I, 16, 150, "reg8[0..15] == 0", "next;"),
            // lr_in_arp_resolve
            (
                I,
                17,
                100,
                "outport == \"lr0-sw0\" && reg0 == 10.0.0.2",
                "eth.dst = 02:00:00:00:00:01; next;",
            ),
            (I, 17, 0, "ip4", "get_arp(outport, reg0); next;"),
            // lr_in_arp_request
            (
                I,
                21,
                100,
                "eth.dst == 00:00:00:00:00:00 && ip4",
                "arp { eth.dst = ff:ff:ff:ff:ff:ff; arp.spa = reg1; arp.tpa = reg0; arp.op = 1; output; };",
            ),
            // lr_out_snat
            (
                E,
                3,
                153,
                "ip && ip4.src == 10.0.0.0/24 && outport == \"lr0-ext\"",
                "ct_snat(172.16.0.100);",
            ),
            // lr_out_delivery
            (E, 6, 100, "outport == \"lr0-sw0\"", "output;"),
            (E, 6, 100, "outport == \"lr0-ext\"", "output;"),
            (E, 6, 0, "1", "drop;"),
        ],
        22,
        7,
    )
}

pub fn ext_flows() -> Vec<FlowSpec> {
    flows(
        &[
            (
                I,
                25,
                50,
                "eth.dst == 02:00:00:00:01:fe",
                "outport = \"ext-lr0\"; output;",
            ),
            (I, 25, 0, "1", "outport = \"ln\"; output;"),
        ],
        27,
        10,
    )
}

pub fn spec() -> ProgramSpec {
    ProgramSpec {
        datapaths: vec![
            DatapathSpec {
                name: "sw0".into(),
                tunnel_key: 1,
                kind: DatapathKind::Switch,
                ports: vec![
                    PortSpec {
                        port_security: vec!["02:00:00:00:00:01 10.0.0.2".into()],
                        ..port("vm1", 1, PortLocation::Local(VM_PORT), VM_ZONE)
                    },
                    port("sw0-lr0", 2, patch("lr0-sw0"), 2),
                ],
                groups: Vec::new(),
                flows: sw0_flows(),
            },
            DatapathSpec {
                name: "lr0".into(),
                tunnel_key: 2,
                kind: DatapathKind::Router {
                    dnat_zone: 3,
                    snat_zone: SNAT_ZONE,
                },
                ports: vec![
                    port("lr0-sw0", 1, patch("sw0-lr0"), 0),
                    port("lr0-ext", 2, patch("ext-lr0"), 0),
                ],
                groups: Vec::new(),
                flows: lr0_flows(),
            },
            DatapathSpec {
                name: "ext".into(),
                tunnel_key: 3,
                kind: DatapathKind::Switch,
                ports: vec![
                    port("ext-lr0", 1, patch("lr0-ext"), 0),
                    port("ln", 2, PortLocation::Local(LOCALNET), 5),
                ],
                groups: Vec::new(),
                flows: ext_flows(),
            },
        ],
        neighbours: vec![Neighbour {
            datapath: "lr0".into(),
            port: "lr0-ext".into(),
            ip: SERVER.into(),
            mac: SERVER_MAC,
        }],
        sets: hf_expr::Sets::default(),
        owner: Owner(9),
        ..ProgramSpec::default()
    }
}

pub fn frame(
    src: ([u8; 6], Ipv4Addr, u16),
    dst: ([u8; 6], Ipv4Addr, u16),
    flags: u16,
    seq_ack: (u32, u32),
    len: usize,
) -> Vec<u8> {
    let mut f = tcp_frame(&Seg::new(
        (IpAddr::V4(src.1), src.2),
        (IpAddr::V4(dst.1), dst.2),
        flags,
        seq_ack,
        len,
    ));
    f[0..6].copy_from_slice(&dst.0);
    f[6..12].copy_from_slice(&src.0);
    f
}
