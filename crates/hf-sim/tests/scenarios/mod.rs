//! The acceptance scenarios, shared by two drivers: `tests/world.rs` (holdfast northd in the
//! world) and `tests/real_northd.rs` (real ovn-northd's SB loaded into the world). A scenario
//! is an NB (a list of transactions from `hf_sim::world::nb`), the chassis, and a check that
//! drives traffic and asserts what the hosts' stacks saw.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_sim::net::record::DhcpRecord;
use hf_sim::world::World;
use hf_sim::world::nb::{self, Nat, PortOpts, Txn};

pub mod meters;
pub mod mirrors;

/// One scenario.
pub struct Scenario {
    /// Its name.
    pub name: &'static str,
    /// Chassis names (chassis `i` gets `hf_sim::world::encap_ip(i)`).
    pub chassis: Vec<&'static str>,
    /// The NB, as transactions.
    pub nb: Vec<Txn>,
    /// Traffic and assertions.
    pub check: fn(&mut World),
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("a test address")
}

pub fn vm(sw: &str, name: &str, n: u8, net: &str, chassis: &'static str) -> Txn {
    nb::port(
        sw,
        name,
        &format!("00:00:00:00:00:{n:02x} {net}.{}", n + 10),
        PortOpts {
            port_security: true,
            requested_chassis: Some(chassis),
            ..PortOpts::default()
        },
    )
}

/// VM n has MAC 00:00:00:00:00:0n and address .(10+n).
/// sw0 10.0.0.0/24 (vm1 on hv1, vm2 on hv1, vm4 on hv2) and sw1 10.0.1.0/24 (vm3 on hv1,
/// vm5 on hv2), joined by router lr0; no gateway.
pub fn base() -> Vec<Txn> {
    vec![
        nb::switch("sw0"),
        nb::switch("sw1"),
        nb::router("lr0"),
        nb::router_port("lr0", "lr0-sw0", "00:00:00:00:ff:01", &["10.0.0.1/24"]),
        nb::router_port("lr0", "lr0-sw1", "00:00:00:00:ff:02", &["10.0.1.1/24"]),
        nb::patch("sw0", "sw0-lr0", "lr0-sw0"),
        nb::patch("sw1", "sw1-lr0", "lr0-sw1"),
        vm("sw0", "vm1", 1, "10.0.0", "hv1"),
        vm("sw0", "vm2", 2, "10.0.0", "hv1"),
        vm("sw1", "vm3", 3, "10.0.1", "hv1"),
        vm("sw0", "vm4", 4, "10.0.0", "hv2"),
        vm("sw1", "vm5", 5, "10.0.1", "hv2"),
    ]
}

/// `base` with conntrack on the transfers' path and a port to delete: vm1 (sw0) and vm3 (sw1)
/// have a Neutron-style security group (IPv4 out allowed with allow-related, IPv4 in dropped
/// unless related), so the replies of `start_transfers`' connections pass only through their
/// zones' conntrack entries.
pub fn stateful_base() -> Vec<Txn> {
    let mut t = base();
    for (sw, vm) in [("sw0", "vm1"), ("sw1", "vm3")] {
        t.push(nb::acl(
            sw,
            "from-lport",
            1002,
            &format!("inport == \"{vm}\" && ip4"),
            "allow-related",
        ));
        t.push(nb::acl(
            sw,
            "to-lport",
            1001,
            &format!("outport == \"{vm}\" && ip4"),
            "drop",
        ));
    }
    t
}

/// On a ready [`stateful_base`] world: deletes vm2 (which no transfer uses) and waits until
/// its zone is flushed, so the zone map is not the one a fresh allocation gives (lowest free
/// zone in name order): checked for vm3 (a transfer's client) on hv1. A restarted controller
/// that ignored the datapath's map would move vm3's zone and lose its connections' conntrack
/// entries.
pub fn make_zones_uncanonical(w: &mut World) {
    let nb = w.nb_snapshot().expect("nb");
    let vm2 = nb
        .logical_switch_port()
        .values()
        .find(|p| p.name == "vm2")
        .expect("vm2")
        .uuid;
    w.nb(vec![
        serde_json::json!({"op": "mutate", "table": "Logical_Switch",
        "where": [["name", "==", "sw0"]],
        "mutations": [["ports", "delete", ["set", [["uuid", vm2.to_string()]]]]]}),
    ])
    .expect("delete vm2");
    let ok = w.run_until(
        |w| {
            w.chassis()
                .iter()
                .all(|c| !c.datapath().zones().contains_key("lsp/vm2"))
        },
        Duration::from_secs(30),
    );
    assert!(ok, "lsp/vm2 not flushed: {}", w.take_log().join("\n"));
    let zones = w
        .chassis_by_name("hv1")
        .expect("hv1")
        .datapath()
        .zones()
        .clone();
    let canon = hf_sim::world::incident_d::canonical_zones(zones.keys());
    assert_ne!(zones["lsp/vm3"], canon["lsp/vm3"], "{zones:?}");
}

/// The conntrack entries in zone `name` on `chassis`.
pub fn zone_entries(w: &World, chassis: &str, name: &str) -> u32 {
    let dp = w.chassis_by_name(chassis).expect("chassis").datapath();
    dp.zones()
        .get(name)
        .map_or(0, |z| dp.conntrack().zone_count(*z))
}

/// `base` plus a gateway: lr0-public 172.16.0.1/24 on switch `public`, gateway chassis gw1,
/// an external host `ext` (172.16.0.100, on gw1, 1 ms away).
pub fn with_gateway() -> Vec<Txn> {
    let mut t = base();
    t.extend([
        nb::switch("public"),
        nb::router_port("lr0", "lr0-public", "00:00:00:00:ff:10", &["172.16.0.1/24"]),
        nb::gateway_chassis("lr0-public", "gw1", 20),
        nb::patch("public", "public-lr0", "lr0-public"),
        nb::port(
            "public",
            "ext",
            "00:00:00:00:10:64 172.16.0.100",
            PortOpts {
                requested_chassis: Some("gw1"),
                external: true,
                ..PortOpts::default()
            },
        ),
    ]);
    t
}

/// Runs until every host's port is bound where its host is and every chassis installed a
/// program, then a little longer for ARP and gateway learning.
pub fn wait_ready(w: &mut World) {
    let ok = w.run_until(|w| w.ports_ready(), Duration::from_secs(30));
    let log = w.take_log();
    assert!(
        ok,
        "the world did not get ready in 30 s of virtual time; log:\n{}",
        log.join("\n")
    );
    w.run_for(Duration::from_millis(200));
}

/// Pings `dst` `n` times from `from` and asserts every one was answered.
/// smoltcp drops the packet that triggers its ARP request (and sends no ARP request at all
/// for a second after any other one: its neighbour cache has one global "silent time"), and an
/// OVN router drops the packet that triggers its own (`arp { ... }` replaces it); so warm-up
/// pings (not counted) go first, until one is answered or three seconds passed.
pub fn ping_ok(w: &mut World, from: &str, dst: &str, n: u16) {
    for _ in 0..3 {
        let Ok(warm) = w.ping(from, ip(dst), 2, Duration::from_millis(50)) else {
            break;
        };
        w.run_for(Duration::from_millis(1100));
        if w.host(from)
            .and_then(|h| h.ping_record(&warm))
            .is_some_and(|r| r.answered > 0)
        {
            break;
        }
    }
    let name = w
        .ping(from, ip(dst), n, Duration::from_millis(10))
        .expect("ping starts");
    w.run_for(Duration::from_millis(50 + 10 * u64::from(n)) + Duration::from_secs(1));
    let r = w
        .host(from)
        .and_then(|h| h.ping_record(&name))
        .cloned()
        .expect("ping record");
    assert_eq!(
        (r.answered, r.bad_replies, r.send_errors),
        (u64::from(n), 0, 0),
        "{from} -> {dst}: {r:?}\nlog:\n{}\nchassis: {:?}\ntrace of {from}'s last frame:\n{}",
        w.take_log().join("\n"),
        w.record().chassis,
        w.trace_last(from, 0).unwrap_or_else(|e| e)
    );
}

/// `n` UDP requests from `from` to the echo server on `to` (`dst:port`), all answered.
pub fn udp_ok(w: &mut World, from: &str, to: &str, dst: &str, port: u16, n: u16) {
    let _ = w.udp_listen(to, port);
    // The first datagram may be dropped for ARP, as a ping: warm up.
    let _ = w.udp(from, ip(dst), port, 2, 64);
    w.run_for(Duration::from_millis(1100));
    let name = w.udp(from, ip(dst), port, n, 512).expect("udp starts");
    w.run_for(Duration::from_secs(1));
    let r = w
        .host(from)
        .and_then(|h| h.udp_record(&name))
        .cloned()
        .expect("udp record");
    assert_eq!(
        (r.answered, r.bad_replies, r.send_errors),
        (u64::from(n), 0, 0),
        "{from} -> {dst}:{port}: {r:?}"
    );
}

/// Pings `dst` and asserts nothing came back.
pub fn ping_fails(w: &mut World, from: &str, dst: &str) {
    let name = w
        .ping(from, ip(dst), 3, Duration::from_millis(10))
        .expect("ping starts");
    w.run_for(Duration::from_secs(2));
    let r = w
        .host(from)
        .and_then(|h| h.ping_record(&name))
        .cloned()
        .expect("ping record");
    assert!(r.sent > 0, "{from} -> {dst}: no request sent: {r:?}");
    assert_eq!(r.answered, 0, "{from} -> {dst} should be dropped: {r:?}");
}

/// A TCP upload of `bytes` from `from` to `dst:port` (the host on `to` listens), run to
/// completion; returns the client's and the server's record.
pub fn tcp_ok(
    w: &mut World,
    from: &str,
    to: &str,
    dst: &str,
    port: u16,
    bytes: u64,
) -> (hf_sim::net::TcpRecord, hf_sim::net::TcpRecord) {
    let _ = w.tcp_listen(to, port);
    let name = w
        .tcp_transfer(from, ip(dst), port, bytes)
        .expect("transfer starts");
    let done = w.run_until(
        |w| {
            w.tcp_record(from, &name)
                .is_some_and(|r| r.outcome != "running")
        },
        Duration::from_secs(20),
    );
    let c = w.tcp_record(from, &name).expect("client record");
    assert!(
        done && c.outcome == "complete",
        "{from} -> {dst}:{port}: {c:?}\nlog:\n{}",
        w.take_log().join("\n")
    );
    assert_eq!(c.bytes_acked, bytes, "{c:?}");
    let s = server_of(w, to, &c.local)
        .unwrap_or_else(|| panic!("{to} has no server connection from {}", c.local));
    s_ok(&s, bytes);
    (c, s)
}

fn s_ok(s: &hf_sim::net::TcpRecord, bytes: u64) {
    assert_eq!(
        (s.bytes_received, s.bytes_verified, s.pattern_errors),
        (bytes, bytes, 0),
        "{s:?}"
    );
}

/// The server-side record on `lsp` whose remote is `remote` (as the server sees it: after
/// NAT the client's address is not its own), or the only one when `remote` is empty.
pub fn server_of(w: &World, lsp: &str, remote: &str) -> Option<hf_sim::net::TcpRecord> {
    let h = w.host(lsp)?;
    let rec = h.record(w.now());
    let servers: Vec<_> = rec
        .tcp
        .values()
        .filter(|t| t.role == "server")
        .cloned()
        .collect();
    servers
        .iter()
        .find(|t| t.remote == remote)
        .cloned()
        .or_else(|| (servers.len() == 1).then(|| servers[0].clone()))
}

/// Server connections on `lsp`.
pub fn servers(w: &World, lsp: &str) -> Vec<hf_sim::net::TcpRecord> {
    w.host(lsp)
        .map(|h| {
            h.record(w.now())
                .tcp
                .values()
                .filter(|t| t.role == "server")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// A TCP connection attempt that must not establish.
pub fn tcp_fails(w: &mut World, from: &str, to: &str, dst: &str, port: u16) {
    let _ = w.tcp_listen(to, port);
    let name = w
        .tcp_transfer(from, ip(dst), port, 1000)
        .expect("transfer starts");
    w.run_for(Duration::from_secs(3));
    let c = w.tcp_record(from, &name).expect("client record");
    assert!(
        c.established_us.is_none(),
        "{from} -> {dst}:{port} should not connect: {c:?}"
    );
}

/// Starts uploads vm1 -> vm4 (across the tunnel) and vm3 -> vm5 (routed, across), returns
/// (host, connection) pairs.
pub fn start_transfers(w: &mut World, bytes: u64) -> Vec<(&'static str, String)> {
    w.tcp_listen("vm4", 7000).expect("listen");
    w.tcp_listen("vm5", 7001).expect("listen");
    let a = w
        .tcp_transfer("vm1", ip("10.0.0.14"), 7000, bytes)
        .expect("starts");
    let b = w
        .tcp_transfer("vm3", ip("10.0.1.15"), 7001, bytes)
        .expect("starts");
    vec![("vm1", a), ("vm3", b)]
}

pub fn finish(w: &mut World, conns: &[(&str, String)], bytes: u64) {
    let ok = w.run_until(
        |w| {
            conns
                .iter()
                .all(|(h, n)| w.tcp_record(h, n).is_some_and(|r| r.outcome != "running"))
        },
        Duration::from_secs(30),
    );
    assert!(ok, "transfers did not finish: {}", w.take_log().join("\n"));
    for (h, n) in conns {
        let r = w.tcp_record(h, n).expect("record");
        assert_eq!(
            (r.outcome.as_str(), r.bytes_acked),
            ("complete", bytes),
            "{h}: {r:?}"
        );
        // Not one segment had to be sent twice: nothing was lost.
        assert_eq!(r.retransmitted_segments, 0, "{h}: {r:?}");
        assert_eq!((r.resets_received, r.resets_sent), (0, 0), "{h}: {r:?}");
    }
    for (lsp, rec) in &w.record().net.hosts {
        for (n, t) in &rec.tcp {
            assert_eq!(t.retransmitted_segments, 0, "{lsp} {n}: {t:?}");
            assert_eq!(t.pattern_errors, 0, "{lsp} {n}: {t:?}");
        }
    }
}

// ---- the scenarios ----

pub fn l2() -> Scenario {
    Scenario {
        name: "l2",
        chassis: vec!["hv1", "hv2"],
        nb: base(),
        check: |w| {
            wait_ready(w);
            ping_ok(w, "vm1", "10.0.0.12", 3);
            udp_ok(w, "vm1", "vm2", "10.0.0.12", 5353, 5);
            tcp_ok(w, "vm1", "vm2", "10.0.0.12", 5001, 200_000);
        },
    }
}

pub fn l3() -> Scenario {
    Scenario {
        name: "l3",
        chassis: vec!["hv1", "hv2"],
        nb: base(),
        check: |w| {
            wait_ready(w);
            ping_ok(w, "vm1", "10.0.0.1", 2);
            ping_ok(w, "vm1", "10.0.1.13", 3);
            udp_ok(w, "vm1", "vm5", "10.0.1.15", 5353, 5);
            let (c, _) = tcp_ok(w, "vm1", "vm3", "10.0.1.13", 5001, 200_000);
            assert!(c.local.starts_with("10.0.0.11:"), "{c:?}");
        },
    }
}

pub fn cross_chassis() -> Scenario {
    Scenario {
        name: "cross_chassis",
        chassis: vec!["hv1", "hv2"],
        nb: base(),
        check: |w| {
            wait_ready(w);
            let before = w.record().chassis;
            ping_ok(w, "vm1", "10.0.0.14", 3);
            tcp_ok(w, "vm1", "vm4", "10.0.0.14", 5001, 500_000);
            // Routed and across: vm1 (sw0, hv1) -> vm5 (sw1, hv2).
            tcp_ok(w, "vm1", "vm5", "10.0.1.15", 5002, 200_000);
            let after = w.record().chassis;
            for c in ["hv1", "hv2"] {
                assert!(
                    after[c].tx_tunnel > before[c].tx_tunnel + 100
                        && after[c].rx_tunnel > before[c].rx_tunnel + 100,
                    "{c}: tunnel counters before {:?} after {:?}",
                    before[c],
                    after[c]
                );
            }
        },
    }
}

pub fn acl() -> Scenario {
    let mut nbt = base();
    nbt.extend([
        nb::acl(
            "sw0",
            "to-lport",
            1001,
            "outport == \"vm2\" && tcp.dst == 80",
            "allow-related",
        ),
        nb::acl("sw0", "to-lport", 1000, "outport == \"vm2\" && ip4", "drop"),
        nb::acl(
            "sw0",
            "from-lport",
            1000,
            "inport == \"vm2\" && ip4",
            "drop",
        ),
    ]);
    Scenario {
        name: "acl",
        chassis: vec!["hv1", "hv2"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            // Allowed to port 80, and the replies pass vm2's from-lport drop (established).
            tcp_ok(w, "vm1", "vm2", "10.0.0.12", 80, 100_000);
            // Both ways through the same ACLs across chassis: vm4 (hv2) to vm2:80.
            tcp_ok(w, "vm4", "vm2", "10.0.0.12", 80, 100_000);
            tcp_fails(w, "vm1", "vm2", "10.0.0.12", 81);
            ping_fails(w, "vm1", "10.0.0.12");
            // vm2 may not start anything.
            tcp_fails(w, "vm2", "vm1", "10.0.0.11", 5001);
            // Others are untouched.
            ping_ok(w, "vm1", "10.0.0.14", 2);
        },
    }
}

pub fn snat() -> Scenario {
    let mut nbt = with_gateway();
    nbt.push(nb::nat(
        "lr0",
        Nat {
            kind: "snat",
            external_ip: "172.16.0.10",
            logical_ip: "10.0.0.0/24",
            logical_port: None,
        },
    ));
    Scenario {
        name: "snat",
        chassis: vec!["hv1", "hv2", "gw1"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            ping_ok(w, "vm1", "172.16.0.100", 3);
            let _ = w.tcp_listen("ext", 8080);
            for vm in ["vm1", "vm4"] {
                let name = w
                    .tcp_transfer(vm, ip("172.16.0.100"), 8080, 100_000)
                    .expect("starts");
                let ok = w.run_until(
                    |w| {
                        w.tcp_record(vm, &name)
                            .is_some_and(|r| r.outcome != "running")
                    },
                    Duration::from_secs(20),
                );
                let c = w.tcp_record(vm, &name).expect("record");
                assert!(
                    ok && c.outcome == "complete",
                    "{vm}: {c:?}\n{}",
                    w.take_log().join("\n")
                );
            }
            let s = servers(w, "ext");
            assert_eq!(s.len(), 2, "{s:?}");
            for r in &s {
                assert!(
                    r.remote.starts_with("172.16.0.10:"),
                    "ext saw {} instead of the SNAT address",
                    r.remote
                );
                s_ok(r, 100_000);
            }
        },
    }
}

pub fn dnat_fip() -> Scenario {
    let mut nbt = with_gateway();
    nbt.push(nb::nat(
        "lr0",
        Nat {
            kind: "dnat",
            external_ip: "172.16.0.30",
            logical_ip: "10.0.0.14",
            logical_port: None,
        },
    ));
    nbt.push(nb::nat(
        "lr0",
        Nat {
            kind: "dnat_and_snat",
            external_ip: "172.16.0.20",
            logical_ip: "10.0.0.12",
            logical_port: None,
        },
    ));
    Scenario {
        name: "dnat_fip",
        chassis: vec!["hv1", "hv2", "gw1"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            // The floating IP: in to vm2, which sees the external host's own address.
            let (c, s) = tcp_ok(w, "ext", "vm2", "172.16.0.20", 80, 100_000);
            assert!(s.remote.starts_with("172.16.0.100:"), "{s:?} / {c:?}");
            // And out from vm2, which the external host sees as the floating IP.
            w.tcp_listen("ext", 9001).expect("listen");
            let name = w
                .tcp_transfer("vm2", ip("172.16.0.100"), 9001, 50_000)
                .expect("starts");
            let ok = w.run_until(
                |w| {
                    w.tcp_record("vm2", &name)
                        .is_some_and(|r| r.outcome != "running")
                },
                Duration::from_secs(20),
            );
            let c = w.tcp_record("vm2", &name).expect("record");
            assert!(ok && c.outcome == "complete", "{c:?}");
            let s = servers(w, "ext");
            assert!(
                s.iter()
                    .any(|r| r.remote.starts_with("172.16.0.20:") && r.bytes_verified == 50_000),
                "{s:?}"
            );
            // Plain DNAT to vm4 (on hv2).
            let (_, s) = tcp_ok(w, "ext", "vm4", "172.16.0.30", 80, 50_000);
            assert!(s.remote.starts_with("172.16.0.100:"), "{s:?}");
        },
    }
}

pub fn load_balancer() -> Scenario {
    let mut nbt = base();
    nbt.push(nb::load_balancer(
        "lb0",
        "10.0.0.100:80",
        &["10.0.0.12:8080", "10.0.0.14:8080", "10.0.1.15:8080"],
        "tcp",
        &["sw0"],
        &["lr0"],
    ));
    Scenario {
        name: "load_balancer",
        chassis: vec!["hv1", "hv2"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            for b in ["vm2", "vm4", "vm5"] {
                w.tcp_listen(b, 8080).expect("listen");
            }
            let mut names = Vec::new();
            for _ in 0..24 {
                names.push(
                    w.tcp_transfer("vm1", ip("10.0.0.100"), 80, 5_000)
                        .expect("starts"),
                );
                w.run_for(Duration::from_millis(2));
            }
            let ok = w.run_until(
                |w| {
                    names.iter().all(|n| {
                        w.tcp_record("vm1", n)
                            .is_some_and(|r| r.outcome != "running")
                    })
                },
                Duration::from_secs(20),
            );
            for n in &names {
                let c = w.tcp_record("vm1", n).expect("record");
                assert!(ok && c.outcome == "complete", "{c:?}");
            }
            let mut total = 0;
            for b in ["vm2", "vm4", "vm5"] {
                let s = servers(w, b);
                assert!(!s.is_empty(), "backend {b} got no connection");
                for r in &s {
                    s_ok(r, 5_000);
                    assert!(r.remote.starts_with("10.0.0.11:"), "{r:?}");
                }
                total += s.len();
            }
            assert_eq!(total, 24);
        },
    }
}

/// DHCPv4 options for `port` on sw0 (10.0.0.0/24, the router at 10.0.0.1).
fn sw0_dhcp(port: &str) -> Txn {
    nb::dhcpv4(
        port,
        "10.0.0.0/24",
        &[
            ("router", "10.0.0.1"),
            ("server_id", "10.0.0.1"),
            ("server_mac", "00:00:00:00:ff:01"),
            ("lease_time", "3600"),
        ],
    )
}

/// Runs until `host` holds a DHCP lease (20 s at most, else the test fails with the log);
/// its DHCP record.
fn wait_lease(w: &mut World, host: &str) -> DhcpRecord {
    let got = w.run_until(
        |w| {
            w.host(host)
                .and_then(|h| h.dhcp_record())
                .is_some_and(|d| !d.leases.is_empty())
        },
        Duration::from_secs(20),
    );
    let d = w.host(host).and_then(|h| h.dhcp_record()).cloned();
    assert!(got, "no lease: {d:?}\n{}", w.take_log().join("\n"));
    d.expect("record")
}

pub fn dhcp() -> Scenario {
    let mut nbt = base();
    nbt.push(nb::port(
        "sw0",
        "vm6",
        "00:00:00:00:00:06 10.0.0.16",
        PortOpts {
            requested_chassis: Some("hv2"),
            ..PortOpts::default()
        },
    ));
    nbt.push(sw0_dhcp("vm6"));
    Scenario {
        name: "dhcp",
        chassis: vec!["hv1", "hv2"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            let d = wait_lease(w, "vm6");
            assert_eq!(d.leases[0].address, "10.0.0.16/24", "{d:?}");
            assert_eq!(d.leases[0].router.as_deref(), Some("10.0.0.1"), "{d:?}");
            assert_eq!(
                w.host("vm6").and_then(|h| h.ipv4()),
                Some(Ipv4Addr::new(10, 0, 0, 16))
            );
            ping_ok(w, "vm6", "10.0.0.1", 2);
            ping_ok(w, "vm6", "10.0.1.13", 2);
        },
    }
}

/// Issue 21: a port with `addresses=dynamic` on a switch with `other_config:subnet` (and
/// `exclude_ips`) gets its address from northd's IPAM, written to NB, and its host takes it by
/// DHCP, then reaches the router and the other switch; a `dynamic 10.0.0.30` port (a dynamic
/// MAC) gets a host with that address. Two more dynamic ports come one after the other and the
/// first leaves, so the second holds an address a fresh assignment would not give it: a
/// northd restart and rebuilt databases (new UUIDs) keep every assignment, and the hosts
/// keep talking.
pub fn dhcp_dynamic() -> Scenario {
    let mut nbt = base();
    nbt.push(vec![
        serde_json::json!({"op": "update", "table": "Logical_Switch",
        "where": [["name", "==", "sw0"]],
        "row": {"other_config": ["map", [["subnet", "10.0.0.0/24"],
            ["exclude_ips", "10.0.0.2..10.0.0.20"]]]}}),
    ]);
    nbt.push(nb::port(
        "sw0",
        "vm7",
        "dynamic",
        PortOpts {
            requested_chassis: Some("hv2"),
            ..PortOpts::default()
        },
    ));
    nbt.push(nb::port(
        "sw0",
        "vm8",
        "dynamic 10.0.0.30",
        PortOpts {
            requested_chassis: Some("hv1"),
            ..PortOpts::default()
        },
    ));
    nbt.push(sw0_dhcp("vm7"));
    Scenario {
        name: "dhcp_dynamic",
        chassis: vec!["hv1", "hv2"],
        nb: nbt,
        check: |w| {
            wait_ready(w);
            let d = wait_lease(w, "vm7");
            let nb = w.nb_snapshot().expect("NB");
            let dynamic = nb
                .logical_switch_port()
                .values()
                .find(|p| p.name == "vm7")
                .and_then(|p| p.dynamic_addresses.clone())
                .expect("northd wrote dynamic_addresses");
            // The lowest address past the excluded ones, as ovn-northd gives it (the MAC
            // follows the address: its low 24 bits plus one).
            let mac = &dynamic[..dynamic.find(' ').expect("MAC IP")];
            assert!(mac.ends_with(":00:00:16"), "{dynamic}");
            assert_eq!(&dynamic[mac.len()..], " 10.0.0.21", "{dynamic}");
            assert_eq!(d.leases[0].address, "10.0.0.21/24", "{d:?}");
            assert_eq!(d.leases[0].router.as_deref(), Some("10.0.0.1"), "{d:?}");
            assert_eq!(
                w.host("vm7").and_then(|h| h.ipv4()),
                Some(Ipv4Addr::new(10, 0, 0, 21))
            );
            ping_ok(w, "vm7", "10.0.0.1", 2);
            ping_ok(w, "vm7", "10.0.1.13", 2);
            let assigned = |w: &World| -> Vec<Option<String>> {
                let nb = w.nb_snapshot().expect("NB");
                ["vm7", "vm8"]
                    .iter()
                    .map(|n| {
                        nb.logical_switch_port()
                            .values()
                            .find(|p| p.name == *n)
                            .and_then(|p| p.dynamic_addresses.clone())
                    })
                    .collect()
            };
            let before = assigned(w);
            assert!(
                before[1]
                    .as_deref()
                    .is_some_and(|d| d.ends_with(":00:00:1f 10.0.0.30")),
                "{before:?}"
            );
            ping_ok(w, "vm7", "10.0.0.30", 2);
            for vm in ["vm9", "vm10"] {
                w.nb(nb::port("sw0", vm, "dynamic", PortOpts::default()))
                    .expect("add port");
                w.run_for(Duration::from_millis(500));
            }
            let nb0 = w.nb_snapshot().expect("NB");
            let vm9 = nb0
                .logical_switch_port()
                .values()
                .find(|p| p.name == "vm9")
                .expect("vm9")
                .uuid;
            let held = |w: &World| {
                w.nb_snapshot()
                    .expect("NB")
                    .logical_switch_port()
                    .values()
                    .find(|p| p.name == "vm10")
                    .and_then(|p| p.dynamic_addresses.clone())
            };
            assert!(
                held(w).is_some_and(|d| d.ends_with(" 10.0.0.23")),
                "{:?}",
                held(w)
            );
            w.nb(vec![
                serde_json::json!({"op": "mutate", "table": "Logical_Switch",
                    "where": [["name", "==", "sw0"]],
                    "mutations": [["ports", "delete", ["uuid", vm9.to_string()]]]}),
                serde_json::json!({"op": "delete", "table": "Logical_Switch_Port",
                    "where": [["_uuid", "==", ["uuid", vm9.to_string()]]]}),
            ])
            .expect("delete vm9");
            w.run_for(Duration::from_millis(500));
            let before: Vec<Option<String>> = assigned(w).into_iter().chain([held(w)]).collect();
            assert!(
                before[2]
                    .as_deref()
                    .is_some_and(|d| d.ends_with(" 10.0.0.23")),
                "{before:?}"
            );
            let assigned = |w: &World| -> Vec<Option<String>> {
                assigned(w).into_iter().chain([held(w)]).collect()
            };
            w.restart_northd().expect("restart northd");
            w.run_for(Duration::from_secs(1));
            assert_eq!(assigned(w), before, "a northd restart moved addresses");
            w.rebuild_databases().expect("rebuild");
            w.run_for(Duration::from_secs(1));
            assert_eq!(assigned(w), before, "rebuilt databases moved addresses");
            wait_ready(w);
            ping_ok(w, "vm7", "10.0.0.30", 2);
        },
    }
}

/// Both controllers restarted while TCP transfers cross the tunnel, with conntrack on their
/// path (security groups on both clients, [`stateful_base`]): no segment retransmitted, no
/// reset, zone maps unchanged, nothing flushed; the datapaths forward meanwhile.
pub fn restarts() -> Scenario {
    Scenario {
        name: "restarts",
        chassis: vec!["hv1", "hv2"],
        nb: stateful_base(),
        check: |w| {
            wait_ready(w);
            let before = w.record().chassis;
            let bytes = 20_000_000;
            let conns = start_transfers(w, bytes);
            w.run_for(Duration::from_millis(3));
            for z in ["lsp/vm1", "lsp/vm3"] {
                assert!(zone_entries(w, "hv1", z) > 0, "no conntrack in {z}");
            }
            w.restart_controller("hv1").expect("restart");
            w.run_for(Duration::from_millis(2));
            w.restart_controller("hv2").expect("restart");
            for (h, n) in &conns {
                let r = w.tcp_record(h, n).expect("record");
                assert!(
                    r.bytes_acked > 0 && r.bytes_acked < bytes,
                    "{h} not mid-transfer: {r:?}"
                );
            }
            finish(w, &conns, bytes);
            let after = w.record().chassis;
            for c in ["hv1", "hv2"] {
                assert_eq!(after[c].zones, before[c].zones, "{c}: zone map changed");
                assert_eq!(
                    after[c].flushes, before[c].flushes,
                    "{c}: {:?}",
                    after[c].flushed
                );
                assert_eq!(after[c].restarts.0, 1);
            }
        },
    }
}

/// The scenarios both drivers run.
pub fn all() -> Vec<Scenario> {
    vec![
        l2(),
        l3(),
        cross_chassis(),
        acl(),
        snat(),
        dnat_fip(),
        load_balancer(),
        dhcp(),
    ]
}
