//! Issue 21's multicast: IGMP snooping on switch `sw0` (`mcast_snoop=true`, the querier on
//! with a 20 s idle timeout and queries every 5 s) across two chassis. The hosts are smoltcp
//! stacks: their IGMPv2 reports, leaves and answers to queries are smoltcp's, not holdfast's.
//!
//! - vm2 (hv1) and vm4 (hv2) join 239.1.1.1; vm6 (hv2) and vm7 (hv1) on the same switch, and
//!   vm3/vm5 on sw1 behind the router, do not. Each chassis's datapath learns its members,
//!   its controller writes them as SB `IGMP_Group` rows, northd merges them into the
//!   `Multicast_Group` "239.1.1.1", and a stream from vm1 reaches vm2 and vm4 only.
//! - A minute later (three idle timeouts) the groups are still there: the datapaths' queries
//!   were answered.
//! - `ovn-sbctl ip-multicast-flush sw0`: both rows go, and come back with the answers to the
//!   next query.
//! - vm4 leaves: hv2's row goes, the stream reaches vm2 only.
//! - hv1's datapath restarts (a new process, nothing learned): the chassis's `IGMP_Group` row
//!   seeds it, so the stream still reaches vm2.
//! - The querier off, nobody reports again: vm2's membership times out after the idle
//!   timeout and the group is gone; the stream reaches no one (unregistered multicast is not
//!   flooded on a snooping switch).
//!
//! Checked to fail: with the `igmp` action not punted (the pipeline's event dropped) no
//! `IGMP_Group` row appears; with queries not sent the groups expire within the first minute.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_sim::world::{NorthdMode, World, WorldConfig, nb};
use serde_json::json;

use super::scenarios::vm;

const GROUP: IpAddr = IpAddr::V4(Ipv4Addr::new(239, 1, 1, 1));
const PORT: u16 = 5000;

fn snoop_options(querier: bool) -> nb::Txn {
    snoop_on("sw0", querier)
}

fn snoop_on(sw: &str, querier: bool) -> nb::Txn {
    vec![
        json!({"op": "update", "table": "Logical_Switch", "where": [["name", "==", sw]],
        "row": {"other_config": ["map", [
            ["mcast_snoop", "true"],
            ["mcast_querier", if querier { "true" } else { "false" }],
            ["mcast_idle_timeout", "20"],
            ["mcast_query_interval", "5"],
            ["mcast_eth_src", "0a:00:00:00:ff:fe"],
            ["mcast_ip4_src", "10.0.0.254"]]]}}),
    ]
}

fn world() -> World {
    let mut w = World::new(WorldConfig {
        seed: 2121,
        chassis: vec!["hv1".into(), "hv2".into()],
        northd: NorthdMode::Holdfast,
    })
    .expect("world");
    let mut t = vec![
        nb::switch("sw0"),
        nb::switch("sw1"),
        nb::router("lr0"),
        nb::router_port("lr0", "lr0-sw0", "00:00:00:00:ff:01", &["10.0.0.1/24"]),
        nb::router_port("lr0", "lr0-sw1", "00:00:00:00:ff:02", &["10.0.1.1/24"]),
        nb::patch("sw0", "sw0-lr0", "lr0-sw0"),
        nb::patch("sw1", "sw1-lr0", "lr0-sw1"),
        vm("sw0", "vm1", 1, "10.0.0", "hv1"),
        vm("sw0", "vm2", 2, "10.0.0", "hv1"),
        vm("sw0", "vm7", 7, "10.0.0", "hv1"),
        vm("sw0", "vm4", 4, "10.0.0", "hv2"),
        vm("sw0", "vm6", 6, "10.0.0", "hv2"),
        vm("sw1", "vm3", 3, "10.0.1", "hv1"),
        vm("sw1", "vm5", 5, "10.0.1", "hv2"),
    ];
    t.push(snoop_options(true));
    w.nb_all(t).expect("NB");
    let ready = w.run_until(|w| w.ports_ready(), Duration::from_secs(30));
    assert!(ready, "not ready: {}", w.take_log().join("\n"));
    w
}

const RECEIVERS: [&str; 6] = ["vm2", "vm4", "vm6", "vm7", "vm3", "vm5"];

/// Datagrams each host has received on `PORT` so far.
fn received(w: &World) -> Vec<(&'static str, u64)> {
    RECEIVERS
        .iter()
        .map(|h| {
            let n = w
                .host(h)
                .and_then(|x| x.udp_server_record(PORT))
                .map_or(0, |r| r.received);
            (*h, n)
        })
        .collect()
}

/// Sends `n` datagrams from vm1 to the group; what each host received of them.
fn stream(w: &mut World, n: u16) -> Vec<(&'static str, u64)> {
    let before = received(w);
    w.udp("vm1", GROUP, PORT, n, 64).expect("send");
    w.run_for(Duration::from_secs(1));
    received(w)
        .into_iter()
        .zip(before)
        .map(|((h, a), (_, b))| (h, a - b))
        .collect()
}

fn only(got: &[(&'static str, u64)], want: &[&str], n: u64) {
    for (h, k) in got {
        let expect = if want.contains(h) { n } else { 0 };
        assert_eq!(*k, expect, "{h} received {k} of {n}: {got:?}");
    }
}

/// `IGMP_Group` rows as (chassis, address, ports), sorted.
fn igmp_rows(w: &World) -> Vec<(String, String, Vec<String>)> {
    let sb = w.sb_snapshot().expect("SB");
    let mut out: Vec<(String, String, Vec<String>)> = sb
        .igmp_group()
        .values()
        .map(|g| {
            let ch = g
                .chassis
                .and_then(|c| sb.get(c))
                .map_or_else(String::new, |c| c.name.clone());
            let mut ports: Vec<String> = g
                .ports
                .iter()
                .filter_map(|p| sb.get(*p).map(|p| p.logical_port.clone()))
                .collect();
            ports.sort();
            (ch, g.address.clone(), ports)
        })
        .collect();
    out.sort();
    out
}

fn row_uuids(w: &World) -> Vec<String> {
    let sb = w.sb_snapshot().expect("SB");
    sb.igmp_group().keys().map(|u| u.to_string()).collect()
}

fn row(ch: &str, addr: &str, ports: &[&str]) -> (String, String, Vec<String>) {
    (
        ch.into(),
        addr.into(),
        ports.iter().map(|p| p.to_string()).collect(),
    )
}

/// The SB UUID of datapath `name`, as text.
fn dp_uuid(w: &World, name: &str) -> Option<String> {
    w.sb_snapshot()
        .ok()?
        .datapath_binding()
        .values()
        .find(|d| d.external_ids.get("name").is_some_and(|n| n == name))
        .map(|d| d.uuid.to_string())
}

/// The ports of datapath `dp`'s `Multicast_Group` "239.1.1.1", sorted.
fn group_ports(w: &World, dp: &str) -> Option<Vec<String>> {
    let dp = dp_uuid(w, dp)?;
    let sb = w.sb_snapshot().ok()?;
    let g = sb
        .multicast_group()
        .values()
        .find(|g| g.name == "239.1.1.1" && g.datapath.uuid().to_string() == dp)?;
    let mut p: Vec<String> = g
        .ports
        .iter()
        .filter_map(|p| sb.get(*p).map(|p| p.logical_port.clone()))
        .collect();
    p.sort();
    Some(p)
}

/// `ovn-sbctl ip-multicast-flush SW`: `IP_Multicast.seq_no` one up.
fn flush(w: &mut World, sw: &str) {
    let dp = dp_uuid(w, sw).expect("datapath");
    w.sb(vec![json!({"op": "mutate", "table": "IP_Multicast",
        "where": [["datapath", "==", ["uuid", dp]]],
        "mutations": [["seq_no", "+=", 1]]})])
        .expect("flush");
}

/// The world's log lines about multicast.
fn log_of(w: &mut World) -> String {
    w.take_log()
        .into_iter()
        .filter(|l| l.contains("ulticast") || l.contains("IGMP") || l.contains("snoop"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_multicast_stream_reaches_only_joined_receivers() {
    let mut w = world();
    for h in RECEIVERS {
        w.udp_listen(h, PORT).expect("listen");
    }
    for h in ["vm2", "vm4"] {
        w.host_mut(h)
            .expect("host")
            .join_group(GROUP)
            .expect("join");
    }
    let joined = w.run_until(
        |w| group_ports(w, "sw0").is_some_and(|p| p == ["vm2", "vm4"]),
        Duration::from_secs(10),
    );
    assert!(
        joined,
        "no group: IGMP_Group {:?}\n{}",
        igmp_rows(&w),
        w.take_log().join("\n")
    );
    assert_eq!(
        igmp_rows(&w),
        vec![
            row("hv1", "239.1.1.1", &["vm2"]),
            row("hv2", "239.1.1.1", &["vm4"])
        ]
    );
    let t_join = w.now();
    only(&stream(&mut w, 20), &["vm2", "vm4"], 20);
    // Three idle timeouts later: still joined (the queries were answered).
    w.run_for(Duration::from_secs(60));
    assert_eq!(
        group_ports(&w, "sw0"),
        Some(vec!["vm2".into(), "vm4".into()]),
        "{}",
        log_of(&mut w)
    );
    only(&stream(&mut w, 20), &["vm2", "vm4"], 20);
    eprintln!(
        "multicast: joined in SB {:?} after the reports; still joined {:?} later",
        t_join,
        w.now() - t_join
    );
    // `ovn-sbctl ip-multicast-flush sw0` (IP_Multicast.seq_no + 1): the rows go, and come
    // back with the answers to the next query.
    flush(&mut w, "sw0");
    let flushed = w.run_until(|w| igmp_rows(w).is_empty(), Duration::from_secs(2));
    assert!(flushed, "not flushed: {:?}", igmp_rows(&w));
    let back = w.run_until(
        |w| group_ports(w, "sw0").is_some_and(|p| p == ["vm2", "vm4"]),
        Duration::from_secs(10),
    );
    assert!(
        back,
        "not learned again after the flush: {:?}",
        igmp_rows(&w)
    );
    // vm4 leaves.
    w.host_mut("vm4")
        .expect("vm4")
        .leave_group(GROUP)
        .expect("leave");
    let left = w.run_until(
        |w| group_ports(w, "sw0").is_some_and(|p| p == ["vm2"]),
        Duration::from_secs(10),
    );
    assert!(left, "vm4 still in the group: {:?}", igmp_rows(&w));
    assert_eq!(igmp_rows(&w), vec![row("hv1", "239.1.1.1", &["vm2"])]);
    only(&stream(&mut w, 20), &["vm2"], 20);
    // hv1's datapath restarts: its row seeds the new process, which keeps it (the same row:
    // never deleted and written again).
    let before = row_uuids(&w);
    w.restart_datapath("hv1").expect("restart");
    let ready = w.run_until(|w| w.ports_ready(), Duration::from_secs(30));
    assert!(ready, "not ready after the restart");
    w.run_for(Duration::from_secs(2));
    assert_eq!(igmp_rows(&w), vec![row("hv1", "239.1.1.1", &["vm2"])]);
    assert_eq!(
        row_uuids(&w),
        before,
        "hv1's row was withdrawn and written again"
    );
    only(&stream(&mut w, 20), &["vm2"], 20);
    // No more queries: vm2's membership times out.
    w.nb(snoop_options(false)).expect("querier off");
    let t0 = w.now();
    let gone = w.run_until(|w| group_ports(w, "sw0").is_none(), Duration::from_secs(40));
    assert!(gone, "the group did not time out: {:?}", igmp_rows(&w));
    let took = w.now() - t0;
    assert!(
        took <= Duration::from_secs(21),
        "timed out after {took:?}, idle timeout 20 s"
    );
    assert!(igmp_rows(&w).is_empty(), "{:?}", igmp_rows(&w));
    only(&stream(&mut w, 20), &[], 20);
    eprintln!("multicast: the group timed out {took:?} after the last query");
}

/// `mcast_relay=true` on lr0 and snooping on sw1 too: vm5 (sw1, hv2) joins, and vm1's stream
/// (sw0) reaches it through the router besides vm2 on sw0; vm3 (sw1,
/// not joined) gets nothing.
#[test]
fn the_router_relays_a_group_to_the_switches_that_joined_it() {
    let mut w = world();
    w.nb_all(vec![
        snoop_on("sw1", true),
        vec![
            json!({"op": "update", "table": "Logical_Router", "where": [["name", "==", "lr0"]],
            "row": {"options": ["map", [["mcast_relay", "true"]]]}}),
        ],
    ])
    .expect("relay");
    w.run_for(Duration::from_secs(1));
    for h in RECEIVERS {
        w.udp_listen(h, PORT).expect("listen");
    }
    for h in ["vm2", "vm5"] {
        w.host_mut(h)
            .expect("host")
            .join_group(GROUP)
            .expect("join");
    }
    let relayed = w.run_until(|w| group_ports(w, "lr0").is_some(), Duration::from_secs(10));
    assert!(relayed, "no relay group on lr0: {:?}", igmp_rows(&w));
    only(&stream(&mut w, 20), &["vm2", "vm5"], 20);
    eprintln!("multicast relay: vm1 (sw0) → vm2 (sw0) and vm5 (sw1, through lr0)");
}

/// The IGMP messages host `h` received from `src`, by kind (smoltcp decodes them).
fn igmp_from(w: &World, h: &str, src: &str) -> Vec<&'static str> {
    w.host(h)
        .map(|x| x.record(w.now()).igmp_in)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.src == src)
        .map(|m| m.kind)
        .collect()
}

/// What pinctrl does with what `igmp` consumes: vm6 (hv2) faces a multicast router
/// (`options:mcast_flood_reports=true`, so in `_MC_mrouter_flood`): vm2's (hv1) report on
/// joining reaches it across the tunnel and no other host of sw0 (snooping: reports go to
/// multicast routers only). vm6 then sends a query, as an outside querier: it reaches every
/// other host of sw0 on both chassis (`_MC_flood_l2`) and none of sw1's, and vm2's answer
/// reaches vm6.
#[test]
fn reports_reach_multicast_routers_and_queries_every_host() {
    let mut w = world();
    w.nb_all(vec![vec![
        json!({"op": "mutate", "table": "Logical_Switch_Port", "where": [["name", "==", "vm6"]],
        "mutations": [["options", "insert", ["map", [["mcast_flood_reports", "true"]]]]]}),
    ]])
    .expect("mrouter port");
    w.run_for(Duration::from_secs(2));
    w.host_mut("vm2")
        .expect("host")
        .join_group(GROUP)
        .expect("join");
    let (vm2, vm6) = ("10.0.0.12", "10.0.0.16");
    // smoltcp's report on joining, or its answer to the querier's next query.
    let seen = w.run_until(
        |w| igmp_from(w, "vm6", vm2).contains(&"report"),
        Duration::from_secs(10),
    );
    assert!(
        seen,
        "vm2's report did not reach the multicast router port vm6: {:?} (all: {:?})\n{}",
        igmp_from(&w, "vm6", vm2),
        w.host("vm6").map(|x| x.record(w.now()).igmp_in),
        log_of(&mut w)
    );
    for h in ["vm1", "vm4", "vm7", "vm3", "vm5"] {
        assert_eq!(
            igmp_from(&w, h, vm2),
            Vec::<&str>::new(),
            "{h} saw vm2's report"
        );
    }
    let reports_before = igmp_from(&w, "vm6", vm2).len();
    assert!(w.host_mut("vm6").expect("host").send_igmp_query());
    w.run_for(Duration::from_secs(12));
    for h in ["vm1", "vm2", "vm4", "vm7"] {
        assert_eq!(
            igmp_from(&w, h, vm6),
            ["query"],
            "{h}: vm6's query\n{}",
            log_of(&mut w)
        );
    }
    for h in ["vm3", "vm5"] {
        assert_eq!(igmp_from(&w, h, vm6), Vec::<&str>::new(), "{h} is on sw1");
    }
    assert!(
        igmp_from(&w, "vm6", vm2).len() > reports_before,
        "vm2 did not answer vm6's query: {:?}",
        igmp_from(&w, "vm6", vm2)
    );
    eprintln!(
        "multicast routers: vm2's report reached vm6 only; vm6's query reached vm1, vm2, vm4, vm7 and vm2 answered it"
    );
}

/// The querier's queries go out through each port's egress pipeline, as pinctrl's do: a
/// to-lport ACL dropping IGMP to vm7 keeps them from vm7 (hv1) while vm1 (hv1) and vm4 (hv2)
/// still get them.
#[test]
fn querier_queries_cross_the_egress_pipeline() {
    let mut w = world();
    w.nb_all(vec![nb::acl(
        "sw0",
        "to-lport",
        1001,
        "outport == \"vm7\" && igmp",
        "drop",
    )])
    .expect("ACL");
    w.run_for(Duration::from_secs(2));
    let querier = "10.0.0.254";
    let before: Vec<usize> = ["vm1", "vm4", "vm7"]
        .iter()
        .map(|h| igmp_from(&w, h, querier).len())
        .collect();
    w.run_for(Duration::from_secs(11));
    let after: Vec<usize> = ["vm1", "vm4", "vm7"]
        .iter()
        .map(|h| igmp_from(&w, h, querier).len())
        .collect();
    assert!(
        after[0] >= before[0] + 2 && after[1] >= before[1] + 2 && after[2] == before[2],
        "queries to vm1, vm4, vm7 before {before:?} after {after:?}"
    );
}

/// Periodic router advertisements: `lr0-sw0` gets fd00:1::1/64 and `ipv6_ra_configs`
/// `address_mode=slaac send_periodic=true min_interval=3 max_interval=6`. Every host on sw0 (on
/// both chassis) receives an advertisement from the router port every 3 to 6 s, as smoltcp
/// decodes it: from the port's MAC and link-local address, router lifetime 65535, prefix
/// fd00:1::/64 autonomous; sw1's hosts receive none. Switched to `dhcpv6_stateful`, the
/// advertisements say "managed" and the prefix is not autonomous.
#[test]
fn router_ports_advertise_periodically_to_their_switch() {
    let mut w = world();
    let lrp = |cfg: &[(&str, &str)]| {
        vec![json!({"op": "update", "table": "Logical_Router_Port",
            "where": [["name", "==", "lr0-sw0"]],
            "row": {"networks": ["set", ["10.0.0.1/24", "fd00:1::1/64"]],
                "ipv6_ra_configs": ["map", cfg.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()]}})]
    };
    w.nb(lrp(&[
        ("address_mode", "slaac"),
        ("send_periodic", "true"),
        ("min_interval", "3"),
        ("max_interval", "6"),
    ]))
    .expect("RA config");
    w.run_for(Duration::from_secs(1));
    let t0 = w.now();
    w.run_for(Duration::from_secs(60));
    let sw0 = ["vm1", "vm2", "vm7", "vm4", "vm6"];
    for h in sw0 {
        let ras: Vec<_> = w
            .host(h)
            .expect("host")
            .record(w.now())
            .router_adverts
            .into_iter()
            .filter(|r| r.at_ms >= t0.as_millis() as u64)
            .collect();
        assert!(
            (10..=21).contains(&ras.len()),
            "{h}: {} advertisements in 60 s, want one every 3-6 s: {:?}\n{}",
            ras.len(),
            ras.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
            w.take_log().join("\n")
        );
        for p in ras.windows(2) {
            let gap = p[1].at_ms - p[0].at_ms;
            assert!((2_999..=6_001).contains(&gap), "{h}: {gap} ms between two");
        }
        let r = &ras[0];
        assert_eq!(r.src_mac, "00-00-00-00-ff-01", "{r:?}");
        assert_eq!(r.src_ip, "fe80::200:ff:fe00:ff01", "{r:?}");
        assert_eq!(r.lifetime, 65535);
        assert!(!r.managed && !r.other, "{r:?}");
        assert_eq!(r.prefixes, vec![("fd00:1::/64".to_string(), true)]);
    }
    for h in ["vm3", "vm5"] {
        let n = w
            .host(h)
            .expect("host")
            .record(w.now())
            .router_adverts
            .len();
        assert_eq!(n, 0, "{h} is not on sw0");
    }
    // DHCPv6 stateful: managed, the prefix on-link only.
    w.nb(lrp(&[
        ("address_mode", "dhcpv6_stateful"),
        ("send_periodic", "true"),
        ("min_interval", "3"),
        ("max_interval", "6"),
    ]))
    .expect("RA config");
    w.run_for(Duration::from_secs(1));
    let t1 = w.now().as_millis() as u64;
    w.run_for(Duration::from_secs(10));
    let rec = w.host("vm4").expect("vm4").record(w.now());
    let last = rec
        .router_adverts
        .iter()
        .rfind(|r| r.at_ms >= t1)
        .expect("an advertisement after the change");
    assert!(last.managed, "{last:?}");
    assert_eq!(last.prefixes, vec![("fd00:1::/64".to_string(), false)]);
    eprintln!(
        "periodic RAs: {} to vm4 in {} s",
        rec.router_adverts.len(),
        (w.now() - t0).as_secs()
    );
}
