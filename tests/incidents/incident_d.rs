//! Incident D (`004`): OVN-Kubernetes moved to its interconnect model, which rebuilt NB and SB
//! (same names, new UUIDs); ovn-controller restarted, decided it owned conntrack zone 0 (where
//! the gateway routers' SNAT lives, `options:snat-ct-zone=0`, shared with the host) and flushed
//! it; established connections through the SNAT broke for 40-50 s. Here, in the deterministic
//! simulator: holdfast refuses zone 0 (the router's SNAT gets a zone by name, and a diagnostic
//! says so), and the same rebuild with every controller restarted keeps the zone map, flushes
//! nothing and keeps the TCP download through the SNAT and the upload through a load balancer
//! VIP on the node's address (the router's DNAT). The control case flushes the router's zones
//! as ovn-controller did and the download breaks.

use std::time::Duration;

use hf_sim::net::TcpRecord;
use hf_sim::world::World;
use hf_sim::world::incident_d::{
    self, DNAT_ZONE, EXT, NODE_IP, NODES, POD, ROUTER, SNAT_ZONE, canonical_zones,
};

const BYTES: u64 = 6_000_000;
/// The external host's upload to the pod through the VIP.
const UP_BYTES: u64 = 4_000_000;

/// The external host's record of the download (the warm-up's is another, smaller one).
fn far_end(w: &World) -> Option<TcpRecord> {
    w.tcp_records(EXT)
        .into_iter()
        .find(|r| r.role == "server" && r.bytes_expected == BYTES)
}

/// The pod's record of the upload through the VIP.
fn vip_server(w: &World) -> Option<TcpRecord> {
    w.tcp_records(POD)
        .into_iter()
        .find(|r| r.role == "server" && r.bytes_expected == UP_BYTES)
}

fn summary(w: &World, conn: &str) -> String {
    format!(
        "{POD} {conn}: {:?}\n{EXT}: {:?}",
        w.tcp_record(POD, conn),
        far_end(w)
    )
}

/// The world, checked to be the case where a naive controller differs: the router's SNAT zone
/// is not where a fresh allocation would put it, and it is not zone 0.
fn world(seed: u64) -> World {
    let w = incident_d::world(seed);
    let hv1 = w
        .chassis_by_name("hv1")
        .expect("hv1")
        .datapath()
        .zones()
        .clone();
    let canon = canonical_zones(hv1.keys());
    assert_ne!(hv1[SNAT_ZONE], 0, "zone 0 is the host's");
    assert_ne!(
        hv1[SNAT_ZONE], canon[SNAT_ZONE],
        "the router's SNAT zone must not be the canonical one, or a controller that ignored the \
         datapath's zone map would pass: {hv1:?}"
    );
    w
}

#[test]
fn a_router_asking_for_zone_0_gets_a_zone_by_name_and_a_diagnostic() {
    let w = world(41);
    let sb = w.sb_snapshot().expect("sb");
    assert!(
        sb.datapath_binding().values().any(|d| {
            d.external_ids.get("name").map(String::as_str) == Some(ROUTER)
                && d.external_ids.get("snat-ct-zone").map(String::as_str) == Some("0")
        }),
        "northd copies the request into SB"
    );
    let c = w.chassis_by_name("hv1").expect("hv1");
    assert!(c.datapath().zones()[SNAT_ZONE] > 0);
    let status = c.controller().expect("controller").status();
    assert!(
        status.contains(&format!(
            "router {ROUTER} asks for conntrack zone 0 (options:snat-ct-zone=0)"
        )) && status.contains(SNAT_ZONE),
        "{status}"
    );
    // `holdfast check` warns about the request before it ships, naming the router; with the
    // live datapath's zone map it finds no zone 0 and no zone shared by two names.
    let nb = w.nb_snapshot().expect("nb");
    let live = hf_check::LiveDatapath {
        name: "hv1".into(),
        zones: c
            .datapath()
            .zones()
            .iter()
            .map(|(n, z)| (n.clone(), *z))
            .collect(),
    };
    let found = hf_check::check(&nb, &sb, &[live], &hf_check::Options::default());
    let risk: Vec<&hf_check::Finding> = found
        .iter()
        .filter(|f| f.code == hf_check::Code::ZoneRisk)
        .collect();
    assert!(!risk.is_empty(), "{found:#?}");
    assert!(
        risk.iter()
            .all(|f| f.severity == hf_check::Severity::Warning
                && f.table == "Logical_Router"
                && f.message.contains("zone 0")),
        "{risk:#?}"
    );
    assert!(risk.iter().any(|f| f.name.contains(ROUTER)), "{risk:#?}");
}

#[test]
fn a_rebuild_with_every_controller_restarted_keeps_tcp_through_the_snat() {
    let mut w = world(42);
    let conn = incident_d::start_download(&mut w, BYTES);
    let far = far_end(&w).expect("the external host's record");
    assert!(
        far.remote.starts_with(&format!("{NODE_IP}:")),
        "the external host sees the node's address (the SNAT): {}",
        far.remote
    );
    let dp = w.chassis_by_name("hv1").expect("hv1").datapath();
    let snat = dp.zones()[SNAT_ZONE];
    assert!(
        dp.conntrack().zone_count(snat) > 0,
        "the download's SNAT entry is in {SNAT_ZONE}"
    );
    let up = incident_d::start_vip_upload(&mut w, UP_BYTES);
    let dp = w.chassis_by_name("hv1").expect("hv1").datapath();
    assert!(
        dp.conntrack().zone_count(dp.zones()[DNAT_ZONE]) > 0,
        "the VIP's DNAT entry is in {DNAT_ZONE}"
    );
    let before = incident_d::zone_maps(&w);
    let flushes_before = w.record().chassis;
    let uuids: Vec<_> = w
        .sb_snapshot()
        .expect("sb")
        .datapath_binding()
        .keys()
        .copied()
        .collect();
    w.run_for(Duration::from_millis(500));
    incident_d::rebuild_and_restart(&mut w).expect("rebuild");
    let mid = w.tcp_record(POD, &conn).expect("record").bytes_received;
    assert!(
        mid > 0 && mid < BYTES / 2,
        "the rebuild came mid-download ({mid} bytes)"
    );
    let done = w.run_until(
        |w| {
            w.tcp_record(POD, &conn)
                .is_some_and(|r| r.outcome != "running")
                && w.tcp_record(EXT, &up)
                    .is_some_and(|r| r.outcome != "running")
        },
        Duration::from_secs(30),
    );
    let sum = format!(
        "{}\n{EXT} {up}: {:?}\n{POD}: {:?}",
        summary(&w, &conn),
        w.tcp_record(EXT, &up),
        vip_server(&w)
    );
    assert!(done, "the download or the upload did not finish:\n{sum}");
    let sb = w.sb_snapshot().expect("sb");
    assert!(
        !sb.datapath_binding().is_empty()
            && sb.datapath_binding().keys().all(|u| !uuids.contains(u)),
        "the rebuilt SB has new UUIDs"
    );
    assert_eq!(incident_d::zone_maps(&w), before, "the zone maps changed");
    let rec = w.record();
    for n in NODES {
        assert_eq!(
            rec.chassis[n].flushes, flushes_before[n].flushes,
            "{n} flushed: {:?}",
            rec.chassis[n].flushed
        );
        assert!(
            w.chassis_by_name(n)
                .and_then(|c| c.controller())
                .is_some_and(|c| c.stats().flush_requests == 0),
            "{n}'s restarted controller asked for a flush"
        );
    }
    let pod = w.tcp_record(POD, &conn).expect("record");
    let ext = far_end(&w).expect("the external host's record");
    let client = w.tcp_record(EXT, &up).expect("record");
    let server = vip_server(&w).expect("the pod's record of the upload");
    assert_eq!(
        (client.outcome.as_str(), server.bytes_verified),
        ("complete", UP_BYTES),
        "{sum}"
    );
    for (who, r) in [(POD, &pod), (EXT, &ext), (EXT, &client), (POD, &server)] {
        assert_eq!(
            r.resets_received + r.resets_sent,
            0,
            "{who}: a reset\n{sum}"
        );
        assert_eq!(r.retransmission_timeouts, 0, "{who}: a timeout\n{sum}");
    }
    assert_eq!(
        (pod.outcome.as_str(), pod.bytes_verified),
        ("complete", BYTES),
        "{sum}"
    );
}

/// The control case: the same rebuild, and the router's zones flushed the way ovn-controller
/// 23.03 flushed zone 0 after it: the download breaks. As in the incident, the far end speaks
/// first after the flush (the external host streams the download): its segments to the node's
/// address match no SNAT entry and are dropped at the router, so it stalls in retransmission
/// timeouts (in this seeded run for the whole 30 s). (An upload through the single-backend VIP
/// would survive such a flush: a mid-stream segment is DNATed to the same backend again.)
#[test]
fn the_same_rebuild_with_the_routers_zones_flushed_breaks_the_download() {
    let mut w = world(42);
    let conn = incident_d::start_download(&mut w, BYTES);
    w.run_for(Duration::from_millis(500));
    incident_d::rebuild_and_restart(&mut w).expect("rebuild");
    let flushed =
        incident_d::naive_flush(&mut w, "hv1", &[SNAT_ZONE, DNAT_ZONE]).expect("naive flush");
    assert!(
        flushed > 0,
        "the router's zones held the download's entries"
    );
    w.run_until(
        |w| {
            w.tcp_record(POD, &conn)
                .is_some_and(|r| r.outcome != "running")
        },
        Duration::from_secs(30),
    );
    let sum = summary(&w, &conn);
    let pod = w.tcp_record(POD, &conn).expect("record");
    let ext = far_end(&w);
    let broke = pod.outcome != "complete"
        || pod.resets_received + pod.resets_sent > 0
        || ext.is_some_and(|r| {
            r.resets_received + r.resets_sent > 0 || r.retransmission_timeouts > 0
        })
        || pod.stalls_over_200ms > 0;
    assert!(broke, "the flush did not hurt the download:\n{sum}");
}
