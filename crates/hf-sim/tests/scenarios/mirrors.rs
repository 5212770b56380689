//! Issue 21's mirror behaviour: NB `Mirror` sessions attached to ports (what Neutron's
//! tap-as-a-service does with `ovn-nbctl mirror-add` / `lsp-attach-mirror`) deliver copies to
//! collectors on the underlay.
//!
//! - A `gre` / `from-lport` session on vm1 (hv1): every frame vm1 sends reaches the collector
//!   once, as vm1 sent it, even a datagram its ACL drops; nothing delivered to vm1 does.
//! - An `erspan` / `to-lport` session on vm4 (hv2): every frame delivered to vm4 arrives as
//!   delivered: routed from vm3 it has the router's source MAC and a TTL one lower; the ERSPAN
//!   sequence numbers run from 0 without a gap, and the index field carries what OVS makes of
//!   ovn-controller's `erspan_idx` (index 10 read as hex: 0x10).
//! - Detached, the port's copies stop.
//!
//! The GRE and ERSPAN headers are read here by hand (RFC 2890 and ERSPAN type II), not by the
//! datapath's code.

use std::net::IpAddr;
use std::time::Duration;

use hf_sim::world::nb::Txn;
use hf_sim::world::{Collected, World};
use serde_json::json;

use super::{Scenario, base, ip, udp_ok, wait_ready};

const GRE_SINK: &str = "172.31.0.9";
const ERSPAN_SINK: &str = "172.31.0.10";

/// An NB `Mirror` attached to `lsp` (`ovn-nbctl mirror-add` + `lsp-attach-mirror`).
fn mirror_on(lsp: &str, name: &str, kind: &str, filter: &str, sink: &str, index: i64) -> Txn {
    vec![
        json!({"op": "insert", "table": "Mirror", "uuid-name": "m",
            "row": {"name": name, "type": kind, "filter": filter, "sink": sink, "index": index}}),
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", lsp]],
            "mutations": [["mirror_rules", "insert", ["set", [["named-uuid", "m"]]]]]}),
    ]
}

fn drop_acl(sw: &str, match_: &str) -> Txn {
    vec![
        json!({"op": "insert", "table": "ACL", "uuid-name": "acl",
            "row": {"direction": "from-lport", "priority": 1001, "match": match_,
                "action": "drop"}}),
        json!({"op": "mutate", "table": "Logical_Switch", "where": [["name", "==", sw]],
            "mutations": [["acls", "insert", ["set", [["named-uuid", "acl"]]]]]}),
    ]
}

/// A GRE or ERSPAN copy, decoded.
#[derive(Debug)]
struct Copy {
    /// GRE key (GRE) or None.
    key: Option<u32>,
    /// (sequence, session ID, index) for ERSPAN.
    erspan: Option<(u32, u16, u32)>,
    frame: Vec<u8>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn decode(c: &Collected) -> Copy {
    let p = &c.payload;
    assert!(p.len() >= 8, "short GRE packet {p:02x?}");
    let flags = be16(p, 0);
    let proto = be16(p, 2);
    assert_eq!(
        flags & 0x8007,
        0,
        "checksum bit or version set: {flags:#06x}"
    );
    let mut at = 4;
    let key = (flags & 0x2000 != 0).then(|| {
        at += 4;
        be32(p, at - 4)
    });
    let seq = (flags & 0x1000 != 0).then(|| {
        at += 4;
        be32(p, at - 4)
    });
    match proto {
        0x6558 => Copy {
            key,
            erspan: None,
            frame: p[at..].to_vec(),
        },
        0x88be => {
            let ver = p[at] >> 4;
            assert_eq!(ver, 1, "ERSPAN version");
            let session = be16(p, at + 2) & 0x3ff;
            let index = be32(p, at + 4) & 0xf_ffff;
            Copy {
                key,
                erspan: Some((seq.expect("ERSPAN has a sequence number"), session, index)),
                frame: p[at + 8..].to_vec(),
            }
        }
        other => panic!("GRE protocol {other:#06x}"),
    }
}

/// (source MAC, IPv4 source, IPv4 destination, TTL, UDP destination port) of a frame.
fn udp4(f: &[u8]) -> Option<([u8; 6], IpAddr, IpAddr, u8, u16)> {
    if f.len() < 42 || be16(f, 12) != 0x0800 || f[23] != 17 {
        return None;
    }
    let ihl = usize::from(f[14] & 0xf) * 4;
    let src: [u8; 4] = f[26..30].try_into().ok()?;
    let dst: [u8; 4] = f[30..34].try_into().ok()?;
    Some((
        f[6..12].try_into().ok()?,
        IpAddr::from(src),
        IpAddr::from(dst),
        f[22],
        be16(f, 14 + ihl + 2),
    ))
}

fn copies(w: &World, sink: &str) -> Vec<(String, Copy)> {
    w.collected(ip(sink))
        .iter()
        .map(|c| (c.chassis.clone(), decode(c)))
        .collect()
}

/// The copies at `sink` of UDP datagrams to port `dport`.
fn udp_copies(w: &World, sink: &str, dport: u16) -> Vec<([u8; 6], IpAddr, IpAddr, u8)> {
    copies(w, sink)
        .iter()
        .filter_map(|(_, c)| udp4(&c.frame))
        .filter(|u| u.4 == dport)
        .map(|u| (u.0, u.1, u.2, u.3))
        .collect()
}

const VM1_MAC: [u8; 6] = [0, 0, 0, 0, 0, 1];
const LR0_SW0_MAC: [u8; 6] = [0, 0, 0, 0, 0xff, 1];

pub fn mirrors() -> Scenario {
    let mut nbt = base();
    nbt.extend([
        mirror_on("vm1", "tap-gre", "gre", "from-lport", GRE_SINK, 7),
        mirror_on("vm4", "tap-erspan", "erspan", "to-lport", ERSPAN_SINK, 10),
        drop_acl("sw0", "inport == \"vm1\" && udp.dst == 99"),
    ]);
    Scenario {
        name: "mirrors",
        chassis: vec!["hv1", "hv2"],
        nb: nbt,
        check: |w| {
            w.add_collector(ip(GRE_SINK));
            w.add_collector(ip(ERSPAN_SINK));
            wait_ready(w);
            // 50 datagrams vm1 -> vm4 (echoed back), after a warm-up of 2.
            udp_ok(w, "vm1", "vm4", "10.0.0.14", 8, 50);
            let gre = copies(w, GRE_SINK);
            assert!(
                !gre.is_empty(),
                "no GRE copies; log:\n{}",
                w.take_log().join("\n")
            );
            for (chassis, c) in &gre {
                assert_eq!(chassis, "hv1", "vm1's copies come from its chassis");
                assert_eq!((c.key, c.erspan.is_some()), (Some(7), false), "GRE key 7");
                // Only what vm1 sent: its source MAC on every copy.
                assert_eq!(
                    &c.frame[6..12],
                    &VM1_MAC,
                    "a copy of a frame vm1 did not send"
                );
            }
            let sent = udp_copies(w, GRE_SINK, 8);
            assert_eq!(
                sent.len(),
                52,
                "vm1's 52 datagrams to port 8, each copied once"
            );
            let vm1 = (VM1_MAC, ip("10.0.0.11"), ip("10.0.0.14"), 64);
            assert!(sent.iter().all(|u| *u == vm1), "{sent:?}");
            // Delivered to vm4 and copied to the ERSPAN sink, in order, from hv2.
            let er = copies(w, ERSPAN_SINK);
            let delivered = udp_copies(w, ERSPAN_SINK, 8);
            assert_eq!(delivered.len(), 52, "vm4 was delivered 52 datagrams");
            for (i, (chassis, c)) in er.iter().enumerate() {
                assert_eq!(chassis, "hv2");
                assert_eq!(c.key, None, "ERSPAN carries no GRE key");
                assert_eq!(c.erspan, Some((i as u32, 10, 0x10)), "copy {i}");
            }
            // A datagram vm1's ACL drops is still copied: the port sent it.
            let before = er.len();
            let _ = w.udp("vm1", ip("10.0.0.14"), 99, 5, 64);
            w.run_for(Duration::from_secs(1));
            assert_eq!(
                udp_copies(w, GRE_SINK, 99).len(),
                5,
                "dropped datagrams copied"
            );
            assert_eq!(
                copies(w, ERSPAN_SINK).len(),
                before,
                "nothing was delivered"
            );
            // Routed from vm3 (sw1, hv1) to vm4: copied as delivered.
            udp_ok(w, "vm3", "vm4", "10.0.0.14", 9, 20);
            let routed = udp_copies(w, ERSPAN_SINK, 9);
            assert_eq!(routed.len(), 22, "{routed:?}");
            let want = (LR0_SW0_MAC, ip("10.0.1.13"), ip("10.0.0.14"), 63);
            assert!(routed.iter().all(|u| *u == want), "{routed:?}");
            assert!(
                udp_copies(w, GRE_SINK, 9).is_empty(),
                "vm3's traffic is not vm1's"
            );
            eprintln!(
                "mirrors: GRE sink got {} copies ({} of vm1's datagrams), ERSPAN sink {} ({} delivered to vm4, {} routed)",
                copies(w, GRE_SINK).len(),
                udp_copies(w, GRE_SINK, 8).len() + udp_copies(w, GRE_SINK, 99).len(),
                copies(w, ERSPAN_SINK).len(),
                delivered.len(),
                routed.len()
            );
            // Detached: vm1's copies stop.
            detach(w, "vm1");
            let n = copies(w, GRE_SINK).len();
            udp_ok(w, "vm1", "vm4", "10.0.0.14", 10, 10);
            assert_eq!(copies(w, GRE_SINK).len(), n, "copies after the detach");
            assert_eq!(
                udp_copies(w, ERSPAN_SINK, 10).len(),
                12,
                "vm4's session goes on"
            );
        },
    }
}

/// `lsp-detach-mirror`: in NB and, when nothing compiles NB (real northd's static SB), in SB.
fn detach(w: &mut World, lsp: &str) {
    w.nb(vec![
        json!({"op": "update", "table": "Logical_Switch_Port", "where": [["name", "==", lsp]],
            "row": {"mirror_rules": ["set", []]}}),
    ])
    .expect("detach in NB");
    w.run_for(Duration::from_secs(1));
    let ruled = w
        .sb_snapshot()
        .expect("SB")
        .port_binding()
        .values()
        .any(|p| p.logical_port == lsp && !p.mirror_rules.is_empty());
    if ruled {
        w.sb(vec![
            json!({"op": "update", "table": "Port_Binding", "where": [["logical_port", "==", lsp]],
                "row": {"mirror_rules": ["set", []]}}),
        ])
        .expect("detach in SB");
        w.run_for(Duration::from_secs(1));
    }
}
