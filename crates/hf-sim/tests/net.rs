//! hf-sim's network pieces on their own: two smoltcp hosts joined by a plain in-memory L2 wire
//! (two one-way links, no switch), driven on virtual time. What is asserted is what the hosts'
//! real TCP/UDP/ICMP stacks (smoltcp) saw, and that the record is reproducible.
// The helpers below (outside #[test] fns) unwrap freely: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hf_sim::net::frames::{self, Class};
use hf_sim::net::tcp::ENDLESS;
use hf_sim::net::{
    Direction, Host, HostConfig, Link, LinkConfig, Record, Rng, TcpRecord, Transfer,
};

const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const MB: u64 = 1 << 20;

/// Two hosts and the two links between them: the test's own trivial wire.
struct Pair {
    a: Host,
    b: Host,
    ab: Link,
    ba: Link,
    now: Duration,
    /// Every frame host `a` sent, and every frame delivered to `b`, for checks that look at
    /// raw bytes.
    a_sent: Vec<Vec<u8>>,
    b_got: Vec<Vec<u8>>,
    seed: u64,
    /// Answer a's ARP requests for b on b's behalf (as OVN's ARP responder does), so b never
    /// hears from a before a's first packet.
    proxy_arp: bool,
    /// Send a's next this many data segments twice (a network that duplicates).
    duplicate_data: u32,
}

impl Pair {
    fn new(seed: u64, link: LinkConfig) -> Pair {
        let root = Rng::new(seed);
        let a = Host::new(
            HostConfig::new("a", [0x02, 0, 0, 0, 0, 1], root.fork("host-a").next_u64())
                .with_ipv4(A4, 24, None)
                .with_ipv6(A6, 64, None),
            Duration::ZERO,
        )
        .unwrap();
        let b = Host::new(
            HostConfig::new("b", [0x02, 0, 0, 0, 0, 2], root.fork("host-b").next_u64())
                .with_ipv4(B4, 24, None)
                .with_ipv6(B6, 64, None),
            Duration::ZERO,
        )
        .unwrap();
        Pair {
            a,
            b,
            ab: Link::new(link.clone(), root.fork("link-ab")),
            ba: Link::new(link, root.fork("link-ba")),
            now: Duration::ZERO,
            a_sent: Vec::new(),
            b_got: Vec::new(),
            seed,
            proxy_arp: false,
            duplicate_data: 0,
        }
    }

    fn flush(&mut self) {
        while let Some(f) = self.a.poll_transmit() {
            self.a_sent.push(f.clone());
            let arp_for_b = f.len() >= 42
                && f[12..14] == [0x08, 0x06]
                && f[20..22] == [0, 1]
                && f[38..42] == B4.octets();
            if self.proxy_arp && arp_for_b {
                // ARP reply, byte by byte: b's MAC for B4, to a.
                let mut r = f[6..12].to_vec();
                r.extend_from_slice(&[2, 0, 0, 0, 0, 2, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 2]);
                r.extend_from_slice(&[2, 0, 0, 0, 0, 2]);
                r.extend_from_slice(&B4.octets());
                r.extend_from_slice(&f[22..32]);
                r.resize(60, 0);
                self.ba.send(r, self.now);
                continue;
            }
            if self.duplicate_data > 0
                && matches!(frames::classify(&f), Class::Tcp(s) if s.payload_len > 0)
            {
                self.duplicate_data -= 1;
                self.ab.send(f.clone(), self.now);
            }
            self.ab.send(f, self.now);
        }
        while let Some(f) = self.b.poll_transmit() {
            self.ba.send(f, self.now);
        }
    }

    /// Runs the two hosts and links until `done` holds or `limit` of virtual time passed.
    /// Returns whether `done` held.
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) -> bool {
        let end = self.now + limit;
        let mut steps = 0u64;
        loop {
            self.flush();
            while let Some(f) = self.ab.poll_deliver(self.now) {
                self.b.handle_frame(&f, self.now);
                self.b_got.push(f);
                self.flush();
            }
            while let Some(f) = self.ba.poll_deliver(self.now) {
                self.a.handle_frame(&f, self.now);
                self.flush();
            }
            if self.a.poll_timeout(self.now).is_some_and(|t| t <= self.now) {
                self.a.handle_timeout(self.now);
            }
            if self.b.poll_timeout(self.now).is_some_and(|t| t <= self.now) {
                self.b.handle_timeout(self.now);
            }
            self.flush();
            if done(self) {
                return true;
            }
            // Next event strictly after now (a host asking for "now" again is served 1 µs
            // later, which bounds the loop).
            let after = self.now + Duration::from_micros(1);
            let next = [
                self.a.poll_timeout(after),
                self.b.poll_timeout(after),
                self.ab.next_deadline().map(|t| t.max(after)),
                self.ba.next_deadline().map(|t| t.max(after)),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t <= end => self.now = t,
                _ => {
                    self.now = end;
                    return done(self);
                }
            }
            steps += 1;
            assert!(steps < 5_000_000, "simulation does not converge");
        }
    }

    fn record(&self) -> Record {
        let mut r = Record::new(self.seed);
        r.hosts.insert("a".into(), self.a.record(self.now));
        r.hosts.insert("b".into(), self.b.record(self.now));
        r.links.insert("a->b".into(), self.ab.counters().clone());
        r.links.insert("b->a".into(), self.ba.counters().clone());
        r
    }

    /// The server-side record of the (only) connection host `b` accepted from `client`.
    fn server_side(&self, client: &TcpRecord) -> TcpRecord {
        let names: Vec<String> = self
            .b
            .tcp_names()
            .into_iter()
            .filter(|n| n.ends_with(&format!("<-{}", client.local)))
            .collect();
        assert_eq!(
            names.len(),
            1,
            "one server-side connection for {}",
            client.local
        );
        self.b.tcp_record(&names[0], self.now).unwrap()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn ping_is_answered_over_ipv4_and_ipv6() {
    let mut p = Pair::new(1, LinkConfig::cluster());
    // One after the other, a second apart: smoltcp rate-limits neighbour discovery per interface
    // (a second unknown neighbour within 1 s of the first lookup waits), see hf_sim::net::host.
    let n4 = p.a.ping(IpAddr::V4(B4), 3, ms(10), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    p.run_until(Duration::from_secs(1), |_| false);
    let n6 = p.a.ping(IpAddr::V6(B6), 3, ms(10), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    for n in [&n4, &n6] {
        let r = p.a.ping_record(n).unwrap();
        assert_eq!(
            (r.sent, r.emitted, r.answered, r.bad_replies),
            (3, 3, 3, 0),
            "{n}: {r:?}"
        );
        // Two one-way trips of 50 µs plus serialisation; the first also waits for ARP/ND.
        let rtts: Vec<u64> = r.rtt_us.iter().map(|x| x.unwrap()).collect();
        assert!(rtts[1] >= 100 && rtts[1] < 200, "{n}: rtts {rtts:?}");
        assert!(rtts[0] >= rtts[1], "{n}: rtts {rtts:?}");
    }
}

#[test]
fn ping_to_a_missing_address_times_out_unanswered() {
    let mut p = Pair::new(1, LinkConfig::cluster());
    let n =
        p.a.ping(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 2, ms(10), p.now)
            .unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    let r = p.a.ping_record(&n).unwrap();
    // Nobody answers ARP for .9: smoltcp never lets the requests out.
    assert_eq!((r.sent, r.emitted, r.answered), (2, 0, 0), "{r:?}");
    assert!(r.done);
    assert!(
        r.summary().starts_with("0 of 2 answered (0 left the host)"),
        "{}",
        r.summary()
    );
}

#[test]
fn a_ping_held_for_arp_is_waited_for_from_when_it_leaves() {
    let mut p = Pair::new(1, LinkConfig::cluster());
    // a's first ARP requests are lost (1.5 s of a cut wire); the one after gets through.
    p.ab.set_config(LinkConfig::cluster().with_loss_ppm(1_000_000));
    let n = p.a.ping(IpAddr::V4(B4), 1, ms(10), p.now).unwrap();
    p.run_until(ms(1500), |_| false);
    assert_eq!(p.a.ping_record(&n).unwrap().emitted, 0);
    assert!(!p.a.ping_record(&n).unwrap().done);
    p.ab.set_config(LinkConfig::cluster());
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    let r = p.a.ping_record(&n).unwrap();
    assert_eq!((r.emitted, r.answered), (1, 1), "{r:?}");
    // ping's RTT counts from the request, so it includes the wait for ARP.
    assert!(r.rtt_us[0].unwrap() >= 1_500_000, "{r:?}");
}

#[test]
fn udp_echo_is_answered_byte_for_byte() {
    let mut p = Pair::new(2, LinkConfig::cluster());
    p.b.listen_udp_echo(7).unwrap();
    let n =
        p.a.udp_exchange(IpAddr::V4(B4), 7, 5, ms(10), 1000, p.now)
            .unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    let r = p.a.udp_record(&n).unwrap();
    assert_eq!(
        (r.sent, r.emitted, r.answered, r.bad_replies),
        (5, 5, 5, 0),
        "{r:?}"
    );
    let rec = p.record();
    let srv = &rec.hosts["b"].udp_servers["udp-echo:b:7"];
    assert_eq!((srv.received, srv.replied), (5, 5));
    assert_eq!(srv.peers, std::slice::from_ref(&r.local));
}

fn transfer_10mb(seed: u64, link: LinkConfig) -> (Pair, String) {
    let mut p = Pair::new(seed, link);
    p.b.listen_tcp(5001).unwrap();
    let n =
        p.a.start_transfer(IpAddr::V4(B4), 5001, 10 * MB, p.now)
            .unwrap();
    let done = p.run_until(Duration::from_secs(120), |p| {
        p.a.tcp_record(&n, p.now).unwrap().completed_us.is_some()
    });
    assert!(done, "{:#?}", p.a.tcp_record(&n, p.now));
    // Let the closing handshake finish.
    p.run_until(ms(200), |_| false);
    (p, n)
}

#[test]
fn ten_mb_over_a_lossless_link_arrive_verified_without_retransmission() {
    let (p, n) = transfer_10mb(3, LinkConfig::cluster());
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(n, "tcp:a->10.0.0.2:5001#1");
    assert_eq!(c.outcome, "complete", "{c:#?}");
    assert_eq!(c.bytes_acked, 10 * MB);
    assert_eq!(c.retransmitted_segments, 0, "{c:#?}");
    assert_eq!(c.resets_received, 0);
    let s = p.server_side(&c);
    assert_eq!(s.outcome, "complete", "{s:#?}");
    assert_eq!(s.direction, "upload");
    assert_eq!((s.bytes_received, s.bytes_verified), (10 * MB, 10 * MB));
    assert_eq!(s.pattern_errors, 0);
    assert_eq!(s.retransmitted_segments, 0);
    assert_eq!((s.duplicates, c.duplicates), (0, 0), "{s:#?}");
    // 10 MiB at 10 Gb/s is about 8.4 ms on the wire; allow for the handshake and acks.
    let took = c.completed_us.unwrap() - c.started_us;
    assert!((8_000..50_000).contains(&took), "took {took} µs");
    assert!(s.stall_max_us < 5_000, "{s:#?}");
    assert_eq!(s.stalls_over_200ms, 0);
}

#[test]
fn one_percent_loss_still_completes_with_retransmissions_and_is_reproducible() {
    let lossy = LinkConfig::cluster().with_loss_ppm(10_000);
    let (p, n) = transfer_10mb(4, lossy.clone());
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(c.outcome, "complete", "{c:#?}");
    assert!(c.retransmitted_segments > 0, "{c:#?}");
    let s = p.server_side(&c);
    assert_eq!((s.bytes_verified, s.pattern_errors), (10 * MB, 0), "{s:#?}");
    assert!(p.record().links["a->b"].lost_frames > 0);
    // An oracle independent of the host's own segment analysis: the link is FIFO and only
    // loses, so walking what a sent against what b got finds every lost frame; every lost
    // payload byte must have been sent again.
    let mut got = p.b_got.iter().peekable();
    let mut lost_payload = 0u64;
    for f in &p.a_sent {
        if got.peek() == Some(&f) {
            got.next();
        } else if f.len() > 54 && f[12..14] == [0x08, 0x00] && f[23] == 6 {
            let ip_len = u64::from(u16::from_be_bytes([f[16], f[17]]));
            let ihl = u64::from(f[14] & 0x0f) * 4;
            let doff = u64::from(f[14 + ihl as usize + 12] >> 4) * 4;
            lost_payload += ip_len - ihl - doff;
        }
    }
    assert!(got.next().is_none(), "b got a frame a never sent");
    assert!(lost_payload > 0);
    assert!(
        c.retransmitted_bytes >= lost_payload,
        "{} lost payload bytes, {} retransmitted: {c:#?}",
        lost_payload,
        c.retransmitted_bytes
    );

    // The same seed gives the same record, byte for byte; another seed a different one.
    let first = p.record().to_json();
    let (again, _) = transfer_10mb(4, lossy.clone());
    assert_eq!(first, again.record().to_json());
    let (other, _) = transfer_10mb(5, lossy);
    assert_ne!(first, other.record().to_json());
}

#[test]
fn concurrent_transfers_both_ways_and_over_ipv6_all_verify() {
    let mut p = Pair::new(6, LinkConfig::cluster());
    p.b.listen_tcp(5001).unwrap();
    let mut names = Vec::new();
    for i in 0..4u64 {
        let dir = if i % 2 == 0 {
            Direction::Upload
        } else {
            Direction::Download
        };
        let dst = if i < 2 {
            IpAddr::V4(B4)
        } else {
            IpAddr::V6(B6)
        };
        let t = Transfer {
            direction: dir,
            bytes: MB + i,
            rate: None,
        };
        names.push(p.a.start_transfer_with(dst, 5001, t, p.now).unwrap());
    }
    assert!(p.run_until(Duration::from_secs(10), |p| p.a.idle()));
    p.run_until(ms(100), |_| false);
    for (i, n) in names.iter().enumerate() {
        let c = p.a.tcp_record(n, p.now).unwrap();
        assert_eq!(c.outcome, "complete", "{c:#?}");
        let s = p.server_side(&c);
        assert_eq!(s.outcome, "complete", "{s:#?}");
        let (sink, source) = if i % 2 == 0 { (&s, &c) } else { (&c, &s) };
        assert_eq!(sink.bytes_verified, MB + i as u64, "{sink:#?}");
        assert_eq!(sink.pattern_errors, 0);
        assert_eq!(source.bytes_acked, MB + i as u64, "{source:#?}");
    }
    assert!(names[2].starts_with("tcp:a->[fd00::2]:5001#"), "{names:?}");
}

#[test]
fn a_paced_download_through_an_outage_records_the_stall() {
    let mut p = Pair::new(7, LinkConfig::cluster());
    p.b.listen_tcp(80).unwrap();
    // 1 MB/s for 2 MB: two seconds of steady traffic.
    let t = Transfer {
        direction: Direction::Download,
        bytes: 2_000_000,
        rate: Some(1_000_000),
    };
    let n =
        p.a.start_transfer_with(IpAddr::V4(B4), 80, t, p.now)
            .unwrap();
    p.run_until(ms(500), |_| false);
    let mid = p.a.tcp_record(&n, p.now).unwrap();
    assert!(
        (400_000..=520_000).contains(&mid.bytes_verified),
        "paced to 1 MB/s: {mid:#?}"
    );
    // The sink sees the pacing (a 1460-byte segment every 1.46 ms); the source, whose gaps only
    // count while data is unacknowledged, sees about one round trip.
    assert!(mid.stall_max_us < 10_000, "{mid:#?}");
    let src = p.server_side(&mid);
    assert!(src.stall_max_us < 1_000, "{src:#?}");
    assert!(
        mid.summary().starts_with("client running: "),
        "{}",
        mid.summary()
    );
    // Cut the wire both ways for 300 ms (every frame lost), then restore it.
    let cut = LinkConfig::cluster().with_loss_ppm(1_000_000);
    p.ab.set_config(cut.clone());
    p.ba.set_config(cut);
    p.run_until(ms(300), |_| false);
    p.ab.set_config(LinkConfig::cluster());
    p.ba.set_config(LinkConfig::cluster());
    assert!(p.run_until(Duration::from_secs(20), |p| p.a.idle()));
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(c.outcome, "complete", "{c:#?}");
    assert_eq!((c.bytes_verified, c.pattern_errors), (2_000_000, 0));
    assert!(c.stall_max_us >= 300_000, "{c:#?}");
    assert!(c.stalls_over_200ms >= 1, "{c:#?}");
    let s = p.server_side(&c);
    assert!(s.retransmitted_segments > 0, "{s:#?}");
    // Nothing came back during the outage, so no duplicate ACK asked for a retransmission:
    // the source's timer did (and backed off while the wire stayed cut).
    assert!(s.retransmission_timeouts >= 2, "{s:#?}");
    assert_eq!(s.fast_retransmits, 0, "{s:#?}");
    assert_eq!(s.timeout_retransmits, s.retransmitted_segments, "{s:#?}");
}

#[test]
fn an_aborted_peer_shows_as_a_reset() {
    let mut p = Pair::new(8, LinkConfig::cluster());
    p.b.listen_tcp(5001).unwrap();
    let t = Transfer {
        direction: Direction::Upload,
        bytes: 10 * MB,
        rate: Some(1_000_000),
    };
    let n =
        p.a.start_transfer_with(IpAddr::V4(B4), 5001, t, p.now)
            .unwrap();
    p.run_until(ms(100), |_| false);
    let c = p.a.tcp_record(&n, p.now).unwrap();
    let server =
        p.b.tcp_names()
            .into_iter()
            .find(|s| s.ends_with(&c.local))
            .unwrap();
    p.b.abort_tcp(&server).unwrap();
    p.run_until(ms(100), |_| false);
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(c.outcome, "reset", "{c:#?}");
    assert!(c.resets_received >= 1);
    assert_eq!(c.state, "CLOSED");
    let s = p.b.tcp_record(&server, p.now).unwrap();
    assert!(s.resets_sent >= 1, "{s:#?}");
}

#[test]
fn the_dhcp_client_sends_a_discover() {
    let mut p = Pair::new(9, LinkConfig::cluster());
    p.a = Host::new(
        HostConfig::new("a", [0x02, 0, 0, 0, 0, 1], 99).with_dhcp4(),
        p.now,
    )
    .unwrap();
    p.run_until(ms(2500), |_| false);
    // Look at the raw bytes: Ethernet broadcast, IPv4, UDP 68 → 67, BOOTREQUEST, the DHCP magic
    // cookie, option 53 (message type) = 1 (DISCOVER).
    let discover = p.a_sent.iter().find(|f| {
        f.len() > 282
            && f[..6] == [0xff; 6]
            && f[12..14] == [0x08, 0x00]
            && f[23] == 17
            && f[34..36] == 68u16.to_be_bytes()
            && f[36..38] == 67u16.to_be_bytes()
            && f[42] == 1
            && f[278..282] == [0x63, 0x82, 0x53, 0x63]
            && f[282..].windows(3).any(|w| w == [53, 1, 1])
    });
    assert!(
        discover.is_some(),
        "no DHCPDISCOVER among {} frames",
        p.a_sent.len()
    );
    let d = p.a.dhcp_record().unwrap();
    // One at start, then one per second (HostConfig::dhcp_retry).
    assert_eq!(d.discovers_sent, 3, "{d:?}");
    assert_eq!(d.summary(), "no lease yet after 3 DISCOVER, 0 REQUEST");
    assert!(d.leases.is_empty());
    assert_eq!(p.a.ipv4(), None);
}

#[test]
fn bad_configuration_and_input_are_named_errors_not_panics() {
    let e = Host::new(
        HostConfig::new("x", [0x01, 0, 0, 0, 0, 1], 1),
        Duration::ZERO,
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a unicast"), "{e}");
    let e = Host::new(
        HostConfig::new("x", [0x02, 0, 0, 0, 0, 1], 1)
            .with_dhcp4()
            .with_ipv4(A4, 24, None),
        Duration::ZERO,
    )
    .unwrap_err();
    assert!(e.to_string().contains("both"), "{e}");
    let mut p = Pair::new(10, LinkConfig::cluster());
    // Garbage and truncated frames are counted and dropped.
    p.b.handle_frame(&[1, 2, 3], p.now);
    p.b.handle_frame(&[0u8; 60], p.now);
    let mut trunc = vec![0xffu8; 6];
    trunc.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45]);
    p.b.handle_frame(&trunc, p.now);
    assert_eq!(p.b.record(p.now).malformed_in, 1);
    assert!(matches!(
        p.b.listen_tcp(1).and_then(|_| p.b.listen_tcp(1)),
        Err(hf_sim::net::HostError::PortInUse(1))
    ));
    // No source address for IPv6 on a v4-only host.
    let mut h = Host::new(
        HostConfig::new("v4", [0x02, 0, 0, 0, 0, 7], 1).with_ipv4(A4, 24, None),
        Duration::ZERO,
    )
    .unwrap();
    assert!(h.ping(IpAddr::V6(B6), 1, ms(1), Duration::ZERO).is_err());
    // Ping still works after the garbage.
    let n = p.a.ping(IpAddr::V4(B4), 1, ms(1), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(2), |p| p.a.idle()));
    assert_eq!(p.a.ping_record(&n).unwrap().answered, 1);
}

/// The DHCP message type (option 53) of a raw client frame to port 67, if it is one.
fn dhcp_client_type(f: &[u8]) -> Option<u8> {
    if f.len() < 283 || f[12..14] != [0x08, 0x00] || f[23] != 17 || f[36..38] != [0, 67] {
        return None;
    }
    let mut i = 282;
    while i + 1 < f.len() && f[i] != 255 {
        if f[i] == 0 {
            i += 1;
            continue;
        }
        let len = usize::from(f[i + 1]);
        if f[i] == 53 && len == 1 {
            return f.get(i + 2).copied();
        }
        i += 2 + len;
    }
    None
}

/// A DHCP server reply written byte by byte here (not with any holdfast or smoltcp encoder):
/// server 10.0.0.2 offers 10.0.0.77/24 with router 10.0.0.2 and a 3600 s lease.
fn dhcp_server_reply(req: &[u8], msg_type: u8, with_mask: bool) -> Vec<u8> {
    let client_mac = &req[6..12];
    let mut bootp = vec![0u8; 240];
    bootp[0] = 2; // BOOTREPLY
    bootp[1] = 1;
    bootp[2] = 6;
    bootp[4..8].copy_from_slice(&req[46..50]); // xid
    bootp[16..20].copy_from_slice(&[10, 0, 0, 77]); // yiaddr
    bootp[28..34].copy_from_slice(client_mac);
    bootp[236..240].copy_from_slice(&[0x63, 0x82, 0x53, 0x63]);
    bootp.extend_from_slice(&[53, 1, msg_type, 54, 4, 10, 0, 0, 2]);
    if with_mask {
        bootp.extend_from_slice(&[1, 4, 255, 255, 255, 0]);
    }
    bootp.extend_from_slice(&[3, 4, 10, 0, 0, 2, 51, 4, 0, 0, 0x0e, 0x10, 255]);
    let udp_len = 8 + bootp.len();
    let mut udp = vec![0, 67, 0, 68];
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    udp.extend_from_slice(&bootp);
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 2, 255, 255, 255, 255,
    ];
    ip[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    let mut sum = 0u32;
    for w in ip.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = client_mac.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp);
    f
}

/// Host `a` with a DHCP client, and a test-made server answering its DISCOVER and REQUEST.
fn dhcp_run(with_mask: bool) -> Pair {
    let mut p = Pair::new(11, LinkConfig::cluster());
    p.a = Host::new(
        HostConfig::new("a", [0x02, 0, 0, 0, 0, 1], 99).with_dhcp4(),
        p.now,
    )
    .unwrap();
    p.run_until(ms(3000), |_| false);
    for _ in 0..3 {
        let frames: Vec<Vec<u8>> = std::mem::take(&mut p.a_sent);
        for f in frames {
            let reply = match dhcp_client_type(&f) {
                Some(1) => dhcp_server_reply(&f, 2, with_mask),
                Some(3) => dhcp_server_reply(&f, 5, with_mask),
                _ => continue,
            };
            p.a.handle_frame(&reply, p.now);
        }
        p.run_until(ms(100), |_| false);
    }
    p
}

#[test]
fn a_hand_built_dhcp_server_configures_the_host_which_then_pings() {
    let mut p = dhcp_run(true);
    let d = p.a.dhcp_record().unwrap().clone();
    assert_eq!(d.leases.len(), 1, "{d:#?}");
    let l = &d.leases[0];
    assert_eq!(
        (
            l.address.as_str(),
            l.router.as_deref(),
            l.server.as_str(),
            l.lease_s
        ),
        ("10.0.0.77/24", Some("10.0.0.2"), "10.0.0.2", Some(3600))
    );
    assert!(d.offers_received >= 1 && d.acks_received >= 1, "{d:#?}");
    assert!(d.unusable.is_empty(), "{d:#?}");
    assert_eq!(p.a.ipv4(), Some(Ipv4Addr::new(10, 0, 0, 77)));
    // The leased address works: b answers a's ping.
    let n = p.a.ping(IpAddr::V4(B4), 2, ms(10), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(3), |p| p.a.idle()));
    assert_eq!(p.a.ping_record(&n).unwrap().answered, 2);
}

#[test]
fn a_dhcp_ack_without_subnet_mask_is_named_not_silently_ignored() {
    let p = dhcp_run(false);
    let d = p.a.dhcp_record().unwrap();
    assert!(d.leases.is_empty(), "{d:#?}");
    assert_eq!(p.a.ipv4(), None);
    assert!(
        d.unusable
            .contains_key("ACK without subnet mask (option 1)"),
        "{d:#?}"
    );
    assert!(
        d.summary().contains("ACK without subnet mask"),
        "{}",
        d.summary()
    );
}

#[test]
fn paced_transfers_on_a_lossless_link_never_retransmit() {
    // What "loses no packet" tests elsewhere rely on: smoltcp's delayed ACK (10 ms) and minimum
    // RTO (10 ms) must not make a clean path look lossy, at any rate.
    let mut p = Pair::new(12, LinkConfig::cluster());
    p.b.listen_tcp(5001).unwrap();
    let mut names = Vec::new();
    for rate in [10_000u64, 100_000, 1_000_000, 4_000_000] {
        for direction in [Direction::Upload, Direction::Download] {
            let t = Transfer {
                direction,
                bytes: rate,
                rate: Some(rate),
            };
            names.push(
                p.a.start_transfer_with(IpAddr::V4(B4), 5001, t, p.now)
                    .unwrap(),
            );
        }
    }
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    p.run_until(ms(100), |_| false);
    for n in &names {
        let c = p.a.tcp_record(n, p.now).unwrap();
        let s = p.server_side(&c);
        for r in [&c, &s] {
            assert_eq!(r.outcome, "complete", "{r:#?}");
            assert_eq!(r.retransmitted_segments, 0, "{n}: {r:#?}");
            assert_eq!(r.resets_received, 0, "{n}: {r:#?}");
        }
        // One second at the paced rate, give or take the handshake.
        let took = c.completed_us.unwrap() - c.started_us;
        assert!((990_000..1_100_000).contains(&took), "{n}: took {took} µs");
    }
}

#[test]
fn a_closed_port_resets_and_a_silent_path_times_out() {
    let mut p = Pair::new(13, LinkConfig::cluster());
    // Nobody listens on 9: b's stack answers the SYN with an RST.
    let refused = p.a.start_transfer(IpAddr::V4(B4), 9, 1000, p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(2), |p| p.a.idle()));
    let r = p.a.tcp_record(&refused, p.now).unwrap();
    assert_eq!(
        (r.outcome.as_str(), r.state.as_str()),
        ("reset", "CLOSED"),
        "{r:#?}"
    );
    assert_eq!(r.established_us, None);
    assert!(r.resets_received >= 1);

    // SYNs into the void (a → b loses everything): with a 3 s timeout the attempt ends as
    // timed-out, after retransmitting its SYN; without one it keeps trying.
    p.b.listen_tcp(5001).unwrap();
    p.ab.set_config(LinkConfig::cluster().with_loss_ppm(1_000_000));
    let silent =
        p.a.start_transfer(IpAddr::V4(B4), 5001, 1000, p.now)
            .unwrap();
    let forever =
        p.a.start_transfer(IpAddr::V4(B4), 5001, 1000, p.now)
            .unwrap();
    p.a.set_tcp_timeout(&silent, Some(Duration::from_secs(3)))
        .unwrap();
    p.run_until(Duration::from_secs(10), |_| false);
    let r = p.a.tcp_record(&silent, p.now).unwrap();
    assert_eq!(r.outcome, "timed-out", "{r:#?}");
    assert!(r.retransmitted_segments >= 1, "{r:#?}");
    assert!(r.closed_us.unwrap() >= 3_000_000, "{r:#?}");
    let r = p.a.tcp_record(&forever, p.now).unwrap();
    assert_eq!(
        (r.outcome.as_str(), r.state.as_str()),
        ("running", "SYN-SENT"),
        "{r:#?}"
    );
    assert!(!p.a.idle());
    assert!(p.a.set_tcp_timeout("tcp:nope", None).is_err());
}

#[test]
fn a_paused_host_drops_what_arrives_and_catches_up_on_resume() {
    let mut p = Pair::new(14, LinkConfig::cluster());
    p.b.listen_tcp(5001).unwrap();
    let t = Transfer {
        direction: Direction::Download,
        bytes: 1_000_000,
        rate: Some(2_000_000),
    };
    let n =
        p.a.start_transfer_with(IpAddr::V4(B4), 5001, t, p.now)
            .unwrap();
    p.run_until(ms(200), |_| false);
    // b (the source) stops for DESIGN's 30 ms of migration downtime.
    p.b.pause(p.now);
    assert!(p.b.is_paused());
    assert_eq!(p.b.poll_timeout(p.now), None);
    p.run_until(ms(30), |_| false);
    p.b.resume(p.now);
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(
        (c.outcome.as_str(), c.bytes_verified),
        ("complete", 1_000_000),
        "{c:#?}"
    );
    // The sink (a) saw the pause as a stall of at least 30 ms, and b dropped what a sent meanwhile.
    assert!(
        c.stall_max_us >= 30_000 && c.stall_max_us < 200_000,
        "{c:#?}"
    );
    assert!(p.b.record(p.now).dropped_while_paused > 0);
}

/// `frame` (Ethernet, IPv4, TCP) with its TCP source port changed to `port`, checksum fixed.
fn with_tcp_src_port(frame: &[u8], port: u16) -> Vec<u8> {
    use smoltcp::wire::{IpAddress, Ipv4Packet, TcpPacket};
    let mut f = frame.to_vec();
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let hl = usize::from(ip.header_len());
    let mut tcp = TcpPacket::new_checked(&mut f[14 + hl..]).unwrap();
    tcp.set_src_port(port);
    tcp.fill_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst));
    f
}

#[test]
fn segments_from_an_endpoint_without_a_connection_are_reset_and_recorded() {
    let mut p = Pair::new(16, LinkConfig::cluster());
    p.b.listen_tcp(5001).unwrap();
    let n = p.a.start_transfer(IpAddr::V4(B4), 5001, MB, p.now).unwrap();
    p.run_until(ms(1), |_| false);
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert!(c.established_us.is_some(), "{c:#?}");
    assert!(
        p.b.record(p.now).strays_reset.is_empty(),
        "the connection's own segments are no strays"
    );
    // One of a's data segments, as if its source port had changed under it (a SNAT moving to
    // another address or port): b has no connection from there and answers with a reset.
    let seg = p
        .a_sent
        .iter()
        .rev()
        .find(|f| matches!(frames::classify(f), Class::Tcp(s) if s.payload_len > 0))
        .unwrap()
        .clone();
    let Class::Tcp(s) = frames::classify(&seg) else {
        unreachable!("a TCP segment")
    };
    let other = s.src.port() + 1000;
    p.b.handle_frame(&with_tcp_src_port(&seg, other), p.now);
    p.run_until(ms(1), |_| false);
    let strays = p.b.record(p.now).strays_reset;
    assert_eq!(
        strays.into_iter().collect::<Vec<_>>(),
        [(format!("{A4}:{other}"), 1)],
        "b reset the stranger once, by its endpoint"
    );
    // The real connection is not the stranger: it goes on.
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(c.outcome, "complete", "{c:#?}");
}

#[test]
fn ipv6_hosts_have_a_link_local_address_that_answers() {
    let mut p = Pair::new(15, LinkConfig::cluster());
    let ll = hf_sim::net::host::link_local([0x02, 0, 0, 0, 0, 2]);
    assert_eq!(ll, "fe80::ff:fe00:2".parse::<Ipv6Addr>().unwrap());
    assert!(
        p.b.addresses().contains(&(IpAddr::V6(ll), 64)),
        "{:?}",
        p.b.addresses()
    );
    let n = p.a.ping(IpAddr::V6(ll), 2, ms(10), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(3), |p| p.a.idle()));
    assert_eq!(p.a.ping_record(&n).unwrap().answered, 2);
}

/// A bit of everything on a jittery, lossy wire.
fn mixed_run(seed: u64) -> Vec<u8> {
    let link = LinkConfig::cluster()
        .with_loss_ppm(5_000)
        .with_jitter(Duration::from_micros(30));
    let mut p = Pair::new(seed, link);
    p.b.listen_tcp(5001).unwrap();
    p.b.listen_udp_echo(7).unwrap();
    p.a.ping(IpAddr::V4(B4), 20, ms(5), p.now).unwrap();
    p.a.udp_exchange(IpAddr::V4(B4), 7, 20, ms(5), 300, p.now)
        .unwrap();
    for i in 0..3u64 {
        let t = Transfer {
            direction: if i == 1 {
                Direction::Download
            } else {
                Direction::Upload
            },
            bytes: 300_000 + i,
            rate: (i == 2).then_some(1_000_000),
        };
        p.a.start_transfer_with(IpAddr::V4(B4), 5001, t, p.now)
            .unwrap();
    }
    assert!(p.run_until(Duration::from_secs(30), |p| p.a.idle()));
    p.run_until(ms(100), |_| false);
    p.record().to_json()
}

#[test]
fn a_mixed_run_is_byte_for_byte_reproducible() {
    let a = mixed_run(21);
    let b = mixed_run(21);
    assert_eq!(Record::first_difference(&a, &b), None);
    assert_eq!(a, b);
    let c = mixed_run(22);
    assert!(Record::first_difference(&a, &c).is_some());
    // Integers only: no float can vary between platforms.
    let text = String::from_utf8(a).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    fn no_floats(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Number(n) => n.is_u64() || n.is_i64(),
            serde_json::Value::Array(a) => a.iter().all(no_floats),
            serde_json::Value::Object(o) => o.values().all(no_floats),
            _ => true,
        }
    }
    assert!(no_floats(&v));
}

#[test]
fn a_host_pinged_by_a_stranger_answers_the_first_ping() {
    // OVN answers ARP for its ports, so a VM's first packet from a peer comes from a stranger:
    // smoltcp alone would drop its echo reply while it ARPs; the host resolves first instead.
    let mut p = Pair::new(16, LinkConfig::cluster());
    p.proxy_arp = true;
    let n = p.a.ping(IpAddr::V4(B4), 3, ms(1), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(3), |p| p.a.idle()));
    let r = p.a.ping_record(&n).unwrap();
    assert_eq!((r.emitted, r.answered), (3, 3), "{r:?}");
    assert!(r.rtt_us.iter().all(|t| t.unwrap() < 1_000), "{r:?}");
    // b asked for a exactly once, itself.
    let b_arps = p
        .b_got
        .iter()
        .filter(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06])
        .count();
    assert_eq!(b_arps, 1, "one ARP reply from a reached b");
}

#[test]
fn two_new_neighbours_at_once_do_not_wait_for_each_other() {
    // smoltcp silences every new neighbour for a second after one lookup goes unanswered; the
    // host resolves per neighbour like Linux, one request a second each.
    let mut p = Pair::new(17, LinkConfig::cluster());
    let ghost =
        p.a.ping(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 1, ms(1), p.now)
            .unwrap();
    let real = p.a.ping(IpAddr::V4(B4), 2, ms(1), p.now).unwrap();
    assert!(p.run_until(Duration::from_secs(6), |p| p.a.idle()));
    let r = p.a.ping_record(&real).unwrap();
    assert_eq!(r.answered, 2, "{r:?}");
    assert!(r.rtt_us[0].unwrap() < 1_000, "{r:?}");
    assert_eq!(p.a.ping_record(&ghost).unwrap().answered, 0);
    // Requests for the ghost: one a second while the ping waits, never a duplicate.
    let asks: Vec<&Vec<u8>> = p
        .a_sent
        .iter()
        .filter(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[38..42] == [10, 0, 0, 9])
        .collect();
    assert!(
        (3..=5).contains(&asks.len()),
        "{} requests for 10.0.0.9",
        asks.len()
    );
}

/// Every data segment the network delivers twice reaches the receiver as a duplicate of bytes it
/// had received in order; the sender's own frames show no retransmission.
#[test]
fn a_segment_the_network_copies_is_a_duplicate_at_the_receiver() {
    let mut p = Pair::new(21, LinkConfig::cluster());
    p.b.listen_tcp(5001).unwrap();
    p.duplicate_data = 3;
    let n =
        p.a.start_transfer(IpAddr::V4(B4), 5001, 64 * 1024, p.now)
            .unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    let c = p.a.tcp_record(&n, p.now).unwrap();
    let s = p.server_side(&c);
    assert_eq!(c.outcome, "complete", "{c:#?}");
    assert_eq!(
        (s.bytes_verified, s.pattern_errors),
        (64 * 1024, 0),
        "{s:#?}"
    );
    assert_eq!(
        p.duplicate_data, 0,
        "the transfer had fewer than 3 data segments to copy"
    );
    assert_eq!(s.duplicates, 3, "{s:#?}");
    assert_eq!(c.retransmitted_segments, 0, "{c:#?}");
}

/// On a lossy wire most losses are repaired by fast retransmits (later segments arrive and
/// their duplicate ACKs ask for the hole); every retransmitted segment is one kind or the other.
#[test]
fn losses_in_a_busy_stream_are_mostly_fast_retransmits() {
    let (p, n) = transfer_10mb(4, LinkConfig::cluster().with_loss_ppm(10_000));
    let c = p.a.tcp_record(&n, p.now).unwrap();
    assert_eq!(c.outcome, "complete", "{c:#?}");
    assert!(c.fast_retransmits > 0, "{c:#?}");
    assert_eq!(
        c.fast_retransmits + c.timeout_retransmits,
        c.retransmitted_segments,
        "{c:#?}"
    );
    let s = p.server_side(&c);
    // smoltcp goes back N: what it sends again after the hole had mostly arrived already.
    assert!(s.duplicates > 0, "{s:#?}");
}

/// An endless transfer runs until its source is stopped, both ways; then both ends complete
/// with every byte written verified. The receiving end cannot stop it.
#[test]
fn endless_transfers_stop_cleanly_at_their_source() {
    let mut p = Pair::new(22, LinkConfig::cluster());
    p.b.listen_tcp(5201).unwrap();
    let mut names = Vec::new();
    for direction in [Direction::Upload, Direction::Download] {
        let t = Transfer {
            direction,
            bytes: ENDLESS,
            rate: Some(1_250_000),
        };
        names.push(
            p.a.start_transfer_with(IpAddr::V4(B4), 5201, t, p.now)
                .unwrap(),
        );
    }
    p.run_until(ms(200), |_| false);
    let up = p.a.tcp_record(&names[0], p.now).unwrap();
    let down = p.a.tcp_record(&names[1], p.now).unwrap();
    assert_eq!(
        (up.outcome.as_str(), down.outcome.as_str()),
        ("running", "running")
    );
    assert!(
        up.bytes_acked > 100_000 && down.bytes_verified > 100_000,
        "{up:#?} {down:#?}"
    );
    // The sinks refuse; the sources stop.
    assert!(p.a.stop_transfer(&names[1]).is_err());
    let server_name = |p: &Pair, c: &TcpRecord, client: &str| {
        p.b.tcp_names()
            .into_iter()
            .find(|n| {
                n.ends_with(&format!("<-{}", c.local))
                    && p.b.transfer_key(n) == p.a.transfer_key(client)
            })
            .unwrap()
    };
    let down_server = server_name(&p, &down, &names[1]);
    let up_server = server_name(&p, &up, &names[0]);
    let e = p.b.stop_transfer(&up_server).unwrap_err().to_string();
    assert!(e.contains("this end receives"), "{e}");
    p.a.stop_transfer(&names[0]).unwrap();
    p.b.stop_transfer(&down_server).unwrap();
    assert!(p.run_until(Duration::from_secs(5), |p| p.a.idle()));
    p.run_until(ms(100), |_| false);
    for n in &names {
        let c = p.a.tcp_record(n, p.now).unwrap();
        let s = p.server_side(&c);
        for r in [&c, &s] {
            assert_eq!(r.outcome, "complete", "{n}: {r:#?}");
            assert_eq!(
                (r.retransmitted_segments, r.resets_received),
                (0, 0),
                "{r:#?}"
            );
        }
        let (sink, source) = if c.direction == "upload" {
            (&s, &c)
        } else {
            (&c, &s)
        };
        assert_eq!(sink.bytes_verified, sink.bytes_expected, "{sink:#?}");
        assert_eq!(sink.bytes_expected, source.bytes_expected);
        assert_eq!(source.bytes_acked, source.bytes_expected, "{source:#?}");
        assert!(sink.bytes_verified > 200_000, "{sink:#?}");
    }
}

/// A UDP stream runs until stopped; on a lossy wire its lost requests are counted, and once
/// it is done every request is either answered or lost.
#[test]
fn a_udp_stream_counts_what_it_lost() {
    let mut p = Pair::new(23, LinkConfig::cluster().with_loss_ppm(50_000));
    p.b.listen_udp_echo(7).unwrap();
    let n =
        p.a.udp_stream(IpAddr::V4(B4), 7, ms(1), 200, p.now)
            .unwrap();
    p.run_until(Duration::from_secs(2), |_| false);
    let mid = p.a.udp_record_at(&n, p.now).unwrap();
    assert!(!mid.done && mid.sent > 1500, "{}", mid.sent);
    // Requests older than the 1 s timeout are judged: about 1 in 10 lost (a request or its
    // echo, 5% each way).
    assert!(
        mid.lost > 30 && mid.lost < 300,
        "{} lost of {}",
        mid.lost,
        mid.sent
    );
    p.a.stop_udp(&n).unwrap();
    assert!(p.run_until(Duration::from_secs(3), |p| p.a.idle()));
    let r = p.a.udp_record_at(&n, p.now).unwrap();
    assert!(r.done);
    assert_eq!(r.count, r.sent);
    assert_eq!(
        r.answered + r.lost,
        r.sent,
        "{} {} {}",
        r.answered,
        r.lost,
        r.sent
    );
    assert_eq!(r.rtt_us.len() as u64, r.sent);
    assert_eq!(r.bad_replies, 0);
    // A lost request or echo leaves a gap of at least two intervals between echoes.
    assert!(r.stall_max_us >= 2_000, "{}", r.stall_max_us);
}
