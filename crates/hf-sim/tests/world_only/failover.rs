//! Issue 21's gateway failover: incident C's network with a second gateway chassis for the
//! router's gateway port (`gw1` priority 20, `gw2` priority 10). Every chassis's datapath runs
//! BFD with the gateways over the tunnels; `gw1` is active. A paced download from the external
//! host to `vm2` runs through the gateway's SNAT when `gw1` is killed (its datapath and
//! controller gone, its tunnels silent): `gw2`'s BFD session with it times out, `gw2` takes
//! the `cr-` port, claims it in SB and announces the router's addresses with gratuitous ARPs
//! on the provider network; the other chassis move their traffic to `gw2` by their own BFD
//! view. The takeover time is measured from the kill and asserted against BFD's detection time
//! (3 × 1 s with OVS's defaults, after a last packet up to 1 s before the kill); new
//! connections through the gateway work after it. A running upload from the VM goes on (gw2's
//! conntrack picks its next segment up mid-stream and SNATs it to the same address and port);
//! a running download stalls (the external host's segments reach gw2 before anything from the
//! VM re-creates the entry they need), which is reported, not hidden.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_sim::net::{Direction, HostConfig, Transfer};
use hf_sim::world::incident_c::{self, EXT, EXT_IP};
use hf_sim::world::{NorthdMode, World, WorldConfig, nb};

const VM: &str = "vm2";

/// The chassis holding `cr-lr0-ext` in SB.
fn holder(w: &World) -> Option<String> {
    let sb = w.sb_snapshot().ok()?;
    let pb = sb
        .port_binding()
        .values()
        .find(|p| p.logical_port == "cr-lr0-ext")?;
    let c = pb.chassis?;
    sb.get(c).map(|c| c.name.clone())
}

fn world() -> World {
    let mut w = World::new(WorldConfig {
        seed: 21,
        chassis: ["hv1", "hv2", "hv3", "gw1", "gw2"]
            .iter()
            .map(|c| c.to_string())
            .collect(),
        northd: NorthdMode::Holdfast,
    })
    .expect("world");
    let mut t = incident_c::topology();
    t.push(nb::gateway_chassis("lr0-ext", "gw2", 10));
    w.nb_all(t).expect("NB");
    w.add_net_host(
        "physnet1",
        EXT,
        HostConfig::new(EXT, [0, 0, 0, 0, 0x10, 0x0a], 0xe).with_ipv4(
            EXT_IP,
            24,
            Some(Ipv4Addr::new(172, 16, 0, 1)),
        ),
    )
    .expect("external host");
    let ready = w.run_until(|w| w.ports_ready(), Duration::from_secs(30));
    assert!(ready, "not ready: {}", w.take_log().join("\n"));
    w
}

/// The world once gw1 holds `cr-lr0-ext` (BFD up: 1 s packets while down), with the external
/// host listening on port 80 and `VM` having reached it.
fn gw1_active() -> World {
    let mut w = world();
    let up = w.run_until(
        |w| holder(w).as_deref() == Some("gw1"),
        Duration::from_secs(10),
    );
    assert!(up, "gw1 never held cr-lr0-ext: {:?}", holder(&w));
    w.run_for(Duration::from_secs(3));
    w.tcp_listen(EXT, 80).expect("listen");
    w.ping(VM, IpAddr::V4(EXT_IP), 2, Duration::from_millis(20))
        .expect("ping");
    w.run_for(Duration::from_millis(1500));
    w
}

fn download(w: &mut World, bytes: u64) -> String {
    transfer(w, bytes, Direction::Download)
}

fn transfer(w: &mut World, bytes: u64, direction: Direction) -> String {
    w.tcp_start(
        VM,
        IpAddr::V4(EXT_IP),
        80,
        Transfer {
            direction,
            bytes,
            rate: Some(incident_c::RATE),
        },
    )
    .expect("download")
}

#[test]
fn a_killed_gateway_is_replaced_by_the_standby() {
    let mut w = gw1_active();
    let name = download(&mut w, 100_000_000);
    let up_name = transfer(&mut w, 100_000_000, Direction::Upload);
    w.run_for(Duration::from_secs(3));
    let before = w.tcp_record(VM, &name).expect("record");
    let up_before = w.tcp_record(VM, &up_name).expect("record");
    assert!(
        before.bytes_received > 1_000_000,
        "the download runs through gw1: {before:?}"
    );
    // Kill the active gateway (the log from here on).
    let _ = w.take_log();
    let t0 = w.now();
    w.kill_chassis("gw1").expect("kill");
    let took = w.run_until(
        |w| holder(w).as_deref() == Some("gw2"),
        Duration::from_secs(20),
    );
    let takeover = w.now() - t0;
    let log = w.take_log();
    assert!(
        took,
        "gw2 never took cr-lr0-ext over (holder {:?}); log:\n{}",
        holder(&w),
        log.join("\n")
    );
    let garps = log
        .iter()
        .filter(|l| l.contains("gratuitous ARP"))
        .cloned()
        .collect::<Vec<_>>();
    // Detection: 3 s after gw1's last packet, which came at most 1 s before the kill.
    assert!(
        takeover >= Duration::from_secs(2) && takeover <= Duration::from_millis(3500),
        "takeover after {takeover:?}"
    );
    assert!(!garps.is_empty(), "gw2 announced nothing: {log:?}");
    // The old connection: report what became of it.
    w.run_for(Duration::from_secs(10));
    let after = w.tcp_record(VM, &name).expect("record");
    let resumed = after.bytes_received > before.bytes_received + 1_000_000;
    let up_after = w.tcp_record(VM, &up_name).expect("record");
    let up_resumed = up_after.bytes_acked > up_before.bytes_acked + 1_000_000;
    // The upload (the VM sends) goes on through gw2: its first segment there is picked up by
    // conntrack mid-stream (as Linux's does) and SNATed to the same address and port.
    assert!(
        up_resumed && up_after.resets_received == 0,
        "the upload through the gateway: {up_before:?} -> {up_after:?}"
    );
    // A new connection through gw2's SNAT works.
    let fresh = download(&mut w, 200_000);
    w.run_for(Duration::from_secs(5));
    let f = w.tcp_record(VM, &fresh).expect("record");
    assert_eq!(
        f.bytes_verified, 200_000,
        "a new connection after the takeover: {f:?}"
    );
    eprintln!(
        "failover: gw1 killed at {:?}; gw2 took cr-lr0-ext over after {takeover:?} ({}); the running download {} (received {} → {} bytes, longest stall {} ms, resets {}); a new connection moved 200,000 bytes",
        t0,
        garps.join("; "),
        if resumed { "went on" } else { "did not go on" },
        before.bytes_received,
        after.bytes_received,
        after.stall_max_us / 1000,
        after.resets_received
    );
    eprintln!(
        "failover: the running upload {} (acknowledged {} → {} bytes, longest stall {} ms, resets {})",
        if up_resumed {
            "went on"
        } else {
            "did not go on"
        },
        up_before.bytes_acked,
        up_after.bytes_acked,
        up_after.stall_max_us / 1000,
        up_after.resets_received
    );
}

/// The active gateway's datapath restarted (a hitless takeover, as an upgrade does it) while a
/// download runs through its SNAT: its BFD sessions go on in the new process, so no chassis
/// sees it go down: `cr-lr0-ext` stays on gw1 at every step, no chassis changes its live set,
/// and the download goes on without a reset. (Started again `Down`, gw1's sessions would tell
/// gw2 and the hypervisors it is down: gw2 would take the port for a second and back.)
#[test]
fn a_gateway_datapath_restart_moves_no_gateway() {
    let mut w = gw1_active();
    let name = download(&mut w, 100_000_000);
    w.run_for(Duration::from_secs(3));
    let before = w.tcp_record(VM, &name).expect("record");
    let _ = w.take_log();
    w.restart_datapath("gw1").expect("handoff");
    let mut holders = Vec::new();
    for _ in 0..80 {
        w.run_for(Duration::from_millis(100));
        holders.push(holder(&w));
    }
    let log = w.take_log();
    let moved: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("live gateways now") || l.contains("gratuitous ARP"))
        .collect();
    assert!(
        holders.iter().all(|h| h.as_deref() == Some("gw1")) && moved.is_empty(),
        "the gateway moved: holders {holders:?}; {moved:?}"
    );
    let after = w.tcp_record(VM, &name).expect("record");
    assert!(
        after.bytes_received > before.bytes_received + 1_000_000 && after.resets_received == 0,
        "the download through the restarted gateway: {before:?} -> {after:?}"
    );
    eprintln!(
        "gateway datapath restart: cr-lr0-ext stayed on gw1; the download went on ({} → {} bytes, longest stall {} ms)",
        before.bytes_received,
        after.bytes_received,
        after.stall_max_us / 1000
    );
}
