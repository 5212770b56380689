//! The AF_PACKET port against the real kernel (root only; a `SKIP:` line otherwise, a failure
//! under `CI=true`). Every test makes its own network namespaces joined by veth pairs and opens
//! its ports on threads inside them, so nothing is created in, or sent to, the host's namespace.
//!
//! Covered: frames both ways, our own sends never read back, promiscuity held while open, the MTU
//! limit as a typed error; VLAN tags (802.1Q and 802.1ad) the kernel stripped put back; kernel TCP
//! between two namespaces through a relay of two ports that keeps the offload metadata (64 KiB
//! super-frames and partial checksums cross whole), the same relay failing when it drops the
//! metadata, and a relay whose second port segments in software; the kernel's own segmentation
//! and checksum completion compared byte for byte with `hf_wire::offload`; an interface set down
//! and up, deleted and re-created, and a missing one. `relay_throughput` (ignored) measures.

#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

#[path = "afpacket/netns.rs"]
mod netns;

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hf_datapath::port::{
    AfPacket, AfPacketConfig, Csum, FramePort, GsoKind, PortError, RxMeta, TxFrame, TxMeta, VlanTag,
};
use hf_wire::offload::{self, Segments};
use netns::{Netns, root_or_skip, tcp_transfer};

/// A local-experimental ethertype for the test's own frames, so stray kernel frames are ignored.
const ETH_TEST: u16 = 0x88b5;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn open_in(ns: &Netns, dev: &str) -> AfPacket {
    open_cfg(ns, dev, AfPacketConfig::default())
}

fn open_cfg(ns: &Netns, dev: &str, cfg: AfPacketConfig) -> AfPacket {
    ns.run(|| AfPacket::open_with(dev, cfg))
        .unwrap_or_else(|e| panic!("open {dev} in {}: {e}", ns.name))
}

/// New namespaces without IPv6 on new interfaces (no router solicitations or DAD in the way).
fn quiet_ns() -> Netns {
    let ns = Netns::new();
    ns.exec("sysctl", &["-qw", "net.ipv6.conf.default.disable_ipv6=1"]);
    ns
}

/// A frame of ours: to a MAC nobody has, from `02:..:tag`, `len` bytes in all.
fn test_frame(tag: u8, i: u16, len: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 0x99, 2, 0, 0, 0, 0, tag];
    f.extend_from_slice(&ETH_TEST.to_be_bytes());
    f.extend_from_slice(&[tag, (i >> 8) as u8, i as u8]);
    while f.len() < len {
        f.push((f.len() as u8).wrapping_mul(31) ^ tag);
    }
    f
}

/// The ethertype after any tags.
fn inner_type(f: &[u8]) -> u16 {
    let mut at = 12;
    while let Some(t) = f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]])) {
        if t != 0x8100 && t != 0x88a8 {
            return t;
        }
        at += 4;
    }
    0
}

fn wait_link_up(p: &AfPacket) {
    let t0 = Instant::now();
    while !p.link_up().unwrap() {
        assert!(t0.elapsed() < secs(3), "{} did not come up", p.name());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Receives on `p` until `want` frames passing `keep` arrived or `limit` passed, then keeps
/// listening for `linger` (to catch frames that must not come).
fn collect(
    p: &mut AfPacket,
    keep: impl Fn(&[u8]) -> bool,
    want: usize,
    limit: Duration,
    linger: Duration,
) -> Vec<(Vec<u8>, RxMeta)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + limit;
    let mut end = deadline;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        if got.len() >= want && end == deadline {
            end = now + linger;
        }
        if p.wait_readable(Some(end - now)).unwrap() {
            p.recv_batch(&mut |f, m| {
                if keep(f) {
                    got.push((f.to_vec(), *m));
                }
            })
            .unwrap();
        }
    }
    got
}

#[test]
fn frames_both_ways_never_read_back_and_mtu() {
    if !root_or_skip("frames_both_ways_never_read_back_and_mtu") {
        return;
    }
    let a = quiet_ns();
    let r = quiet_ns();
    a.veth("a0", "a1", Some(&r));
    let mut p0 = open_in(&a, "a0");
    let mut p1 = open_in(&r, "a1");
    // A second port on a1 (as during a datapath takeover, or the host sending on the interface):
    // the kernel never loops a socket's own sends back to it, but another socket's outgoing
    // frames it does deliver, unless PACKET_IGNORE_OUTGOING.
    let mut p1b = open_in(&r, "a1");
    assert!(p0.ifindex() > 0 && p1.ifindex() > 0);
    assert!(p1.vnet_hdr());
    // IFF_RUNNING follows the carrier through the kernel's link watch, a moment after "up".
    wait_link_up(&p1);
    assert!(
        r.ip(&["-d", "link", "show", "a1"])
            .contains("promiscuity 2"),
        "each port makes its interface promiscuous"
    );
    assert_eq!((p1.mtu(), p1.max_frame()), (1500, 1514));

    // p1 -> p0 in one batch (sizes up to the largest untagged frame), p0 -> p1 one by one.
    let mut from1: Vec<Vec<u8>> = (0..20)
        .map(|i| test_frame(1, i, 60 + 70 * i as usize))
        .collect();
    from1.push(test_frame(1, 20, p1.max_frame()));
    let batch: Vec<TxFrame<'_>> = from1
        .iter()
        .map(|f| TxFrame {
            frame: f,
            meta: TxMeta::default(),
        })
        .collect();
    assert_eq!(p1.send_batch(&batch).unwrap(), from1.len());
    let from0: Vec<Vec<u8>> = (0..20).map(|i| test_frame(0, i, 100)).collect();
    for f in &from0 {
        assert!(p0.send(f, &TxMeta::default()).unwrap());
    }
    let ours = |f: &[u8]| inner_type(f) == ETH_TEST;
    let got0 = collect(
        &mut p0,
        ours,
        from1.len(),
        secs(3),
        Duration::from_millis(300),
    );
    let got1 = collect(
        &mut p1,
        ours,
        from0.len(),
        secs(3),
        Duration::from_millis(300),
    );
    let got1b = collect(
        &mut p1b,
        ours,
        from0.len(),
        secs(3),
        Duration::from_millis(100),
    );
    // Each side received exactly the other's frames, in order, and none of its own.
    let bytes = |g: &[(Vec<u8>, RxMeta)]| g.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>();
    assert_eq!(bytes(&got0), from1);
    assert_eq!(bytes(&got1), from0);
    assert_eq!(
        bytes(&got1b),
        from0,
        "a1's outgoing frames are not read back on a1"
    );
    assert!(got0.iter().all(|(_, m)| m.vlan.is_none()));
    let s1 = p1.stats();
    assert_eq!(s1.tx_frames, from1.len() as u64);
    assert_eq!(
        s1.tx_bytes,
        from1.iter().map(|f| f.len() as u64).sum::<u64>()
    );

    // One byte over the MTU is a typed error, not a kernel errno; a tagged frame may be 4 longer.
    match p1.send(&test_frame(1, 99, 1515), &TxMeta::default()) {
        Err(PortError::FrameTooBig { len, max, name }) => {
            assert_eq!((len, max, name.as_str()), (1515, 1514, "a1"))
        }
        other => panic!("expected FrameTooBig, got {other:?}"),
    }
    let mut tagged = test_frame(1, 100, 1518);
    tagged.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
    tagged.truncate(1518);
    assert!(p1.send(&tagged, &TxMeta::default()).unwrap());
    let got = collect(&mut p0, ours, 1, secs(3), Duration::ZERO);
    assert_eq!(
        bytes(&got),
        vec![tagged],
        "a tagged frame crosses with its tag"
    );
    assert_eq!(
        got[0].1.vlan,
        Some(VlanTag {
            tpid: 0x8100,
            tci: 7
        })
    );

    drop((p1, p1b));
    // (Polled: a child another test is spawning may hold the sockets until its exec.)
    let t0 = Instant::now();
    while !r
        .ip(&["-d", "link", "show", "a1"])
        .contains("promiscuity 0")
    {
        assert!(
            t0.elapsed() < secs(3),
            "closing the ports ends their promiscuity"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn vlan_tags_the_kernel_stripped_are_put_back() {
    if !root_or_skip("vlan_tags_the_kernel_stripped_are_put_back") {
        return;
    }
    // Tagged frames sent into a0 arrive at a1, whose receive path moves the outer tag out of the
    // frame (`skb_vlan_untag`) before packet sockets see it; the port must put it back. (This
    // kernel has no 8021q module, so the frames are sent raw rather than from a VLAN device.)
    let a = quiet_ns();
    let r = quiet_ns();
    a.veth("a0", "a1", Some(&r));
    let mut p0 = open_in(&a, "a0");
    let mut p = open_in(&r, "a1");
    let tag = |f: &mut Vec<u8>, tpid: u16, tci: u16| {
        let [t0, t1] = tpid.to_be_bytes();
        let [c0, c1] = tci.to_be_bytes();
        f.splice(12..12, [t0, t1, c0, c1]);
    };
    let mut q = test_frame(1, 1, 200);
    tag(&mut q, 0x8100, 0x2064); // priority 1, VLAN 100
    let mut ad = test_frame(1, 2, 200);
    tag(&mut ad, 0x88a8, 200);
    let mut qinq = test_frame(1, 3, 200);
    tag(&mut qinq, 0x8100, 300);
    tag(&mut qinq, 0x88a8, 30);
    let mut prio = test_frame(1, 4, 200);
    tag(&mut prio, 0x8100, 0xa000); // priority-tagged, VLAN 0
    let sent = [q, ad, qinq, prio];
    for f in &sent {
        assert!(p0.send(f, &TxMeta::default()).unwrap());
    }
    let ours = |f: &[u8]| inner_type(f) == ETH_TEST;
    let got = collect(
        &mut p,
        ours,
        sent.len(),
        secs(3),
        Duration::from_millis(100),
    );
    let frames: Vec<Vec<u8>> = got.iter().map(|(f, _)| f.clone()).collect();
    assert_eq!(
        frames, sent,
        "every frame arrives with its tags, byte for byte"
    );
    let tags: Vec<Option<(u16, u16)>> = got
        .iter()
        .map(|(_, m)| m.vlan.map(|t| (t.tpid, t.tci)))
        .collect();
    assert_eq!(
        tags,
        [
            Some((0x8100, 0x2064)),
            Some((0x88a8, 200)),
            Some((0x88a8, 30)),
            Some((0x8100, 0xa000))
        ],
        "the kernel stripped the outer tag of each (so the port did put it back)"
    );
    assert_eq!(got[0].1.vlan.map(|t| t.vid()), Some(100));
    assert_eq!(p.stats().rx_vlan_restored, 4);

    // A tagged TCP super-frame with a partial checksum: the offsets in its metadata are the
    // kernel's (untagged) ones plus the tag the port put back, so they still point at TCP.
    let (f, off) = tagged_tcp_super_frame();
    assert!(p0.send(&f, &TxMeta { offload: off }).unwrap());
    let tcp = |f: &[u8]| inner_type(f) == 0x0800;
    let got = collect(&mut p, tcp, 1, secs(3), Duration::ZERO);
    let (g, m) = &got[0];
    assert_eq!(g, &f);
    assert_eq!(m.offload.csum, off.csum, "csum_start moved with the tag");
    assert_eq!(
        m.offload.gso.map(|g| (g.kind, g.size)),
        Some((GsoKind::TcpV4, 1000))
    );
    let mut segs = Segments::new();
    assert_eq!(offload::segment(g, &m.offload, &mut segs), Ok(3));
}

/// An 802.1Q-tagged IPv4/TCP frame with 3000 bytes of payload, its TCP checksum field holding
/// the pseudo-header sum, and the metadata that says so (segments of 1000).
fn tagged_tcp_super_frame() -> (Vec<u8>, hf_wire::offload::Offload) {
    use hf_wire::offload::{Gso, Offload};
    let payload = 3000usize;
    let mut f = vec![
        2, 0, 0, 0, 0, 0x99, 2, 0, 0, 0, 0, 1, 0x81, 0, 0, 42, 0x08, 0x00,
    ];
    let l3 = f.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((40 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let ipcs = hf_wire::checksum(&f[l3..]);
    f[l3 + 10..l3 + 12].copy_from_slice(&ipcs.to_be_bytes());
    let l4 = f.len();
    f.extend_from_slice(&[
        0x9c, 0x40, 0x13, 0x89, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18, 1, 0,
    ]);
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend((0..payload).map(|i| i as u8));
    let src = std::net::IpAddr::from([10, 0, 0, 1]);
    let dst = std::net::IpAddr::from([10, 0, 0, 2]);
    let mut ps = hf_wire::pseudo_header_sum(src, dst, 6, (20 + payload) as u32);
    while ps > 0xffff {
        ps = (ps & 0xffff) + (ps >> 16);
    }
    f[l4 + 16..l4 + 18].copy_from_slice(&(ps as u16).to_be_bytes());
    let off = Offload {
        csum: Csum::Partial {
            start: l4 as u16,
            offset: 16,
        },
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1000,
            hdr_len: (l4 + 20) as u16,
            ecn: false,
        }),
    };
    (f, off)
}

#[derive(Debug, Default, Clone, Copy)]
struct RelayStats {
    frames: u64,
    gso: u64,
    partial: u64,
    too_big: u64,
    other_errors: u64,
    full: u64,
}

/// A thread relaying frames between two ports until stopped.
struct Relay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<(RelayStats, AfPacket, AfPacket)>>,
}

impl Relay {
    /// Relays between `x` and `y`, passing on the offload metadata `keep` says.
    fn start(x: AfPacket, y: AfPacket, keep: Keep) -> Relay {
        Relay::start_with(x, y, keep, false)
    }

    /// With `batched`, each received batch is copied out and sent with one `send_batch` (what a
    /// datapath does); otherwise each frame is sent from the receive buffer with `send`.
    fn start_with(mut x: AfPacket, mut y: AfPacket, keep: Keep, batched: bool) -> Relay {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut st = RelayStats::default();
            let mut buf = Batch::default();
            while !flag.load(Ordering::Relaxed) {
                let mut fds = [x.fd().as_raw_fd(), y.fd().as_raw_fd()].map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                // SAFETY: two live pollfds, exclusively borrowed for the call.
                unsafe { libc::poll(fds.as_mut_ptr(), 2, 50) };
                if fds[0].revents != 0 {
                    match batched {
                        true => pump_batched(&mut x, &mut y, keep, &mut st, &mut buf),
                        false => pump(&mut x, &mut y, keep, &mut st),
                    }
                }
                if fds[1].revents != 0 {
                    match batched {
                        true => pump_batched(&mut y, &mut x, keep, &mut st, &mut buf),
                        false => pump(&mut y, &mut x, keep, &mut st),
                    }
                }
            }
            (st, x, y)
        });
        Relay {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> (RelayStats, AfPacket, AfPacket) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What offload metadata a test relay passes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// All of it.
    All,
    /// The checksum state only: super-frames are sent as if they were one frame.
    Csum,
    /// None: every frame is sent as if it were complete.
    Nothing,
}

/// Counts a received frame and returns the metadata to send it with.
fn relay_meta(m: &RxMeta, keep: Keep, st: &mut RelayStats) -> TxMeta {
    st.frames += 1;
    st.gso += u64::from(m.offload.gso.is_some());
    st.partial += u64::from(matches!(m.offload.csum, Csum::Partial { .. }));
    let mut meta = m.to_tx();
    match keep {
        Keep::All => {}
        Keep::Csum => meta.offload.gso = None,
        Keep::Nothing => meta = TxMeta::default(),
    }
    meta
}

/// A batch copied out of the receive buffers.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    frames: Vec<(usize, usize, TxMeta)>,
}

fn pump_batched(
    from: &mut AfPacket,
    to: &mut AfPacket,
    keep: Keep,
    st: &mut RelayStats,
    b: &mut Batch,
) {
    for _ in 0..16 {
        b.bytes.clear();
        b.frames.clear();
        let n = from
            .recv_batch(&mut |f, m| {
                let meta = relay_meta(m, keep, st);
                let at = b.bytes.len();
                b.bytes.extend_from_slice(f);
                b.frames.push((at, b.bytes.len(), meta));
            })
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        let tx: Vec<TxFrame<'_>> = b
            .frames
            .iter()
            .map(|&(s, e, meta)| TxFrame {
                frame: &b.bytes[s..e],
                meta,
            })
            .collect();
        let mut done = 0;
        while done < tx.len() {
            match to.send_batch(&tx[done..]) {
                Ok(0) => {
                    st.full += (tx.len() - done) as u64;
                    break;
                }
                Ok(k) => done += k,
                Err(_) => {
                    st.other_errors += 1;
                    break;
                }
            }
        }
    }
}

fn pump(from: &mut AfPacket, to: &mut AfPacket, keep: Keep, st: &mut RelayStats) {
    for _ in 0..16 {
        let n = from
            .recv_batch(&mut |f, m| {
                let meta = relay_meta(m, keep, st);
                match to.send(f, &meta) {
                    Ok(true) => {}
                    Ok(false) => st.full += 1,
                    Err(PortError::FrameTooBig { .. }) => st.too_big += 1,
                    Err(_) => st.other_errors += 1,
                }
            })
            .unwrap_or(0);
        if n == 0 {
            break;
        }
    }
}

/// Namespaces A and B, each with one end of a veth pair whose other end is in R, where the relay
/// runs: A 10.79.0.1 <-> a0|a1 <-> relay <-> b1|b0 <-> B 10.79.0.2. The endpoints verify
/// checksums (`rx off`: a veth otherwise trusts any frame a packet socket sent).
struct Three {
    a: Netns,
    r: Netns,
    b: Netns,
}

fn three(endpoint_features: &[&str]) -> Three {
    let (a, r, b) = (quiet_ns(), quiet_ns(), quiet_ns());
    a.veth("a0", "a1", Some(&r));
    b.veth("b0", "b1", Some(&r));
    for (ns, dev, addr) in [(&a, "a0", "10.79.0.1/24"), (&b, "b0", "10.79.0.2/24")] {
        ns.ip(&["addr", "add", addr, "dev", dev]);
        let mut f = vec!["rx", "off"];
        f.extend_from_slice(endpoint_features);
        ns.ethtool_k(dev, &f);
    }
    Three { a, r, b }
}

#[test]
fn kernel_tcp_through_a_relay_keeps_offloads_whole() {
    if !root_or_skip("kernel_tcp_through_a_relay_keeps_offloads_whole") {
        return;
    }
    let t = three(&[]);
    let relay = Relay::start(open_in(&t.r, "a1"), open_in(&t.r, "b1"), Keep::All);
    let r = tcp_transfer(&t.a, &t.b, "10.79.0.2", 32 << 20, secs(60));
    let (st, x, _) = relay.finish();
    r.unwrap_or_else(|e| panic!("transfer through the relay failed: {e}; relay {st:?}"));
    // The proof that metadata crossed: super-frames longer than the MTU and partial checksums
    // were relayed, and the kernel took every one.
    assert!(st.gso > 0 && st.partial > 0, "{st:?}");
    assert_eq!((st.too_big, st.other_errors), (0, 0), "{st:?}");
    assert!(x.stats().rx_bytes > 32 << 20);
}

#[test]
fn the_same_relay_without_offload_metadata_fails() {
    if !root_or_skip("the_same_relay_without_offload_metadata_fails") {
        return;
    }
    // Without any metadata, partial checksums go out as if complete and the endpoint drops them
    // (the handshake already fails); with the checksum state but not the segmentation, the
    // super-frames are refused as longer than the MTU.
    for keep in [Keep::Nothing, Keep::Csum] {
        let t = three(&[]);
        let relay = Relay::start(open_in(&t.r, "a1"), open_in(&t.r, "b1"), keep);
        let r = tcp_transfer(&t.a, &t.b, "10.79.0.2", 4 << 20, secs(4));
        let (st, _, _) = relay.finish();
        assert!(
            r.is_err(),
            "a relay keeping {keep:?} must break TCP; {st:?}"
        );
        match keep {
            Keep::Nothing => assert!(st.partial > 0, "{st:?}"),
            _ => assert!(st.gso > 0 && st.too_big > 0, "{st:?}"),
        }
    }
}

#[test]
fn a_port_without_vnet_hdr_segments_in_software() {
    if !root_or_skip("a_port_without_vnet_hdr_segments_in_software") {
        return;
    }
    // A sends super-frames with partial checksums; b1 cannot pass metadata to the kernel, so the
    // port completes and segments them. B sends complete frames (its tx offloads are off).
    let t = three(&[]);
    t.b.ethtool_k("b0", &["tx", "off", "tso", "off", "gso", "off"]);
    let plain = AfPacketConfig {
        vnet_hdr: false,
        ..AfPacketConfig::default()
    };
    let relay = Relay::start(open_in(&t.r, "a1"), open_cfg(&t.r, "b1", plain), Keep::All);
    let r = tcp_transfer(&t.a, &t.b, "10.79.0.2", 8 << 20, secs(60));
    let (st, _, y) = relay.finish();
    r.unwrap_or_else(|e| panic!("transfer failed: {e}; relay {st:?}, b1 {:?}", y.stats()));
    assert!(st.gso > 0, "{st:?}");
    assert!(y.stats().tx_software_offload > 0, "{:?}", y.stats());
    assert_eq!(y.stats().tx_dropped, 0);
}

/// The TCP (port 5001) or UDP (port 5002) frames of the test streams.
fn stream_frame(f: &[u8]) -> bool {
    let (l4, proto) = match inner_type(f) {
        0x0800 => (14 + usize::from(f[14] & 0xf) * 4, f[23]),
        0x86dd => (54, f[20]),
        _ => return false,
    };
    let dport = f
        .get(l4 + 2..l4 + 4)
        .map(|b| u16::from_be_bytes([b[0], b[1]]));
    matches!((proto, dport), (6, Some(5001)) | (17, Some(5002)))
}

#[test]
fn kernel_segmentation_and_checksums_match_hf_wire() {
    if !root_or_skip("kernel_segmentation_and_checksums_match_hf_wire") {
        return;
    }
    // Sender S (offloads on) -> s0|s1 in K, where a port captures super-frames with their
    // metadata. Each is then sent on k0 (no TSO, no checksum offload: the kernel segments and
    // completes in software) and what arrives on k1 is compared with hf_wire::offload.
    let s = Netns::new();
    let k = Netns::new();
    s.veth("s0", "s1", Some(&k));
    k.veth("k0", "k1", None);
    k.ethtool_k(
        "k0",
        &[
            "tx",
            "off",
            "tso",
            "off",
            "gso",
            "off",
            "tx-udp-segmentation",
            "off",
        ],
    );
    s.ip(&["addr", "add", "10.80.0.1/24", "dev", "s0"]);
    k.ip(&["addr", "add", "10.80.0.2/24", "dev", "s1"]);
    s.ip(&["addr", "add", "fd80::1/64", "dev", "s0", "nodad"]);
    k.ip(&["addr", "add", "fd80::2/64", "dev", "s1", "nodad"]);
    let cap = open_in(&k, "s1");
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let capture = std::thread::spawn(move || {
        let mut cap = cap;
        let mut got = Vec::new();
        while !flag.load(Ordering::Relaxed) {
            if cap.wait_readable(Some(Duration::from_millis(20))).unwrap() {
                cap.recv_batch(&mut |f, m| {
                    if stream_frame(f) && !m.offload.is_none() && got.len() < 400 {
                        got.push((f.to_vec(), *m));
                    }
                })
                .unwrap();
            }
        }
        got
    });
    tcp_transfer(&s, &k, "10.80.0.2", 1 << 20, secs(30)).unwrap();
    tcp_transfer(&s, &k, "[fd80::2]", 1 << 20, secs(30)).unwrap();
    s.run(|| {
        let u = UdpSocket::bind("10.80.0.1:0").unwrap();
        let seg: libc::c_int = 1200;
        // SAFETY: setsockopt(UDP_SEGMENT = 103) with a pointer to a live int and its size.
        let rc = unsafe {
            libc::setsockopt(
                u.as_raw_fd(),
                libc::SOL_UDP,
                103,
                (&seg as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
        let payload: Vec<u8> = (0..7000u32).map(|i| (i * 13) as u8).collect();
        u.send_to(&payload, "10.80.0.2:5002").unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let frames = capture.join().unwrap();
    let kinds = |k: GsoKind| {
        frames
            .iter()
            .filter(|(_, m)| m.offload.gso.map(|g| g.kind) == Some(k))
            .count()
    };
    assert!(kinds(GsoKind::TcpV4) > 0, "no TCPv4 super-frame captured");
    assert!(kinds(GsoKind::TcpV6) > 0, "no TCPv6 super-frame captured");
    assert!(kinds(GsoKind::UdpL4) > 0, "no UDP-L4 super-frame captured");
    assert!(
        frames.iter().any(|(_, m)| m.offload.gso.is_none()),
        "no checksum-only frame captured"
    );

    let mut tx = open_in(&k, "k0");
    let mut rx = open_in(&k, "k1");
    let mut ours = Segments::new();
    let (mut segmented, mut compared) = (0, 0);
    for (f, m) in frames.iter().take(120) {
        let n = offload::segment(f, &m.offload, &mut ours).unwrap();
        assert!(tx.send(f, &m.to_tx()).unwrap());
        let theirs = collect(&mut rx, stream_frame, n, secs(3), Duration::from_millis(20));
        let theirs: Vec<&[u8]> = theirs.iter().map(|(f, _)| f.as_slice()).collect();
        let ours: Vec<&[u8]> = ours.iter().collect();
        assert_eq!(theirs.len(), n, "segments of a {:?} frame", m.offload);
        for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
            assert_eq!(
                t, o,
                "segment {i} of {n} of a {:?} frame differs",
                m.offload
            );
        }
        segmented += usize::from(n > 1);
        compared += n;
    }
    assert!(segmented > 0 && compared > segmented);
    eprintln!("compared {compared} frames ({segmented} super-frames) with the kernel's");
}

#[test]
fn interface_down_deleted_and_back() {
    if !root_or_skip("interface_down_deleted_and_back") {
        return;
    }
    let r = quiet_ns();
    r.veth("g0", "g1", None);
    match r.run(|| AfPacket::open("nope0")) {
        Err(PortError::NoSuchInterface { name }) => assert_eq!(name, "nope0"),
        other => panic!("expected NoSuchInterface, got {other:?}"),
    }
    assert!(matches!(
        AfPacket::open("a-name-far-too-long-for-linux"),
        Err(PortError::BadName { .. })
    ));
    // The port a datapath takeover would receive over SCM_RIGHTS: adopted from a bare socket.
    let fd = open_cfg(&r, "g1", AfPacketConfig::default()).into_fd();
    let mut p = AfPacket::adopt(fd, AfPacketConfig::default()).unwrap();
    assert_eq!((p.name(), p.vnet_hdr(), p.mtu()), ("g1", true, 1500));
    let mut q = open_in(&r, "g1");
    let mut s = open_in(&r, "g0");
    let old = p.ifindex();
    let ours = |f: &[u8]| inner_type(f) == ETH_TEST;

    // Down: one LinkDown event, the port stays; up again: frames flow on the same port.
    r.ip(&["link", "set", "g1", "down"]);
    assert!(p.wait_readable(Some(secs(2))).unwrap());
    match p.recv_batch(&mut |_, _| {}) {
        Err(PortError::LinkDown { name }) => assert_eq!(name, "g1"),
        other => panic!("expected LinkDown, got {other:?}"),
    }
    assert!(!p.link_up().unwrap());
    r.ip(&["link", "set", "g1", "up"]);
    wait_link_up(&p);
    // (q saw the same LinkDown; read it off so it does not count below.)
    let _ = q.recv_batch(&mut |_, _| {});
    assert!(s.send(&test_frame(5, 1, 80), &TxMeta::default()).unwrap());
    assert_eq!(collect(&mut p, ours, 1, secs(3), Duration::ZERO).len(), 1);

    // Deleted: Gone, on receive and on send, every time after; no readiness left to spin on.
    r.ip(&["link", "del", "g0"]);
    assert!(p.wait_readable(Some(secs(2))).unwrap());
    let e = p.recv_batch(&mut |_, _| {}).unwrap_err();
    assert!(
        matches!(&e, PortError::Gone { name, ifindex } if name == "g1" && *ifindex == old),
        "{e:?}"
    );
    assert!(p.recv_batch(&mut |_, _| {}).unwrap_err().is_gone());
    assert!(!p.wait_readable(Some(Duration::from_millis(200))).unwrap());
    assert!(p.link_up().unwrap_err().is_gone());
    let e = q
        .send(&test_frame(6, 1, 80), &TxMeta::default())
        .unwrap_err();
    assert!(e.is_gone(), "{e:?}");
    assert!(
        e.to_string().contains("g1"),
        "errors name the interface: {e}"
    );

    // Back with the same name and a new index: a new port works.
    r.veth("g0", "g1", None);
    let mut p2 = open_in(&r, "g1");
    let mut s2 = open_in(&r, "g0");
    assert_ne!(p2.ifindex(), old);
    assert!(s2.send(&test_frame(7, 1, 80), &TxMeta::default()).unwrap());
    let got = collect(&mut p2, ours, 1, secs(3), Duration::ZERO);
    assert_eq!(got.len(), 1);
    drop(s);
}

/// The number after `"key":` in `s`.
fn json_num(s: &str, key: &str) -> f64 {
    let k = format!("\"{key}\":");
    let at = s
        .find(&k)
        .unwrap_or_else(|| panic!("no {key} in iperf3's JSON"))
        + k.len();
    let num: String = s[at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
        .collect();
    num.parse().unwrap()
}

/// TCP: the receiver's rate in Gb/s.
fn iperf(client: &Netns, server: &Netns, ip: &str) -> f64 {
    let _srv = server.spawn("iperf3", &["-s", "-1", "-p", "5201"]);
    std::thread::sleep(Duration::from_millis(400));
    let json = client.exec("iperf3", &["-c", ip, "-p", "5201", "-t", "5", "-J"]);
    let at = json.find("\"sum_received\"").unwrap();
    json_num(&json[at..], "bits_per_second") / 1e9
}

/// UDP with 60-byte payloads (64-byte frames with the FCS), sent as fast as one sender can:
/// datagrams received per second, in thousands.
fn iperf_udp_kpps(client: &Netns, server: &Netns, ip: &str) -> f64 {
    let _srv = server.spawn("iperf3", &["-s", "-1", "-p", "5201"]);
    std::thread::sleep(Duration::from_millis(400));
    let args = [
        "-c", ip, "-p", "5201", "-t", "5", "-u", "-b", "0", "-l", "60", "-J",
    ];
    let json = client.exec("iperf3", &args);
    // The run's totals are the last "sum" before "sum_sent" (earlier ones are per interval).
    let end = json.rfind("\"sum_sent\"").unwrap();
    let sum = &json[json[..end].rfind("\"sum\":").unwrap()..end];
    let got = json_num(sum, "packets") - json_num(sum, "lost_packets");
    got / json_num(sum, "seconds") / 1e3
}

/// Throughput figures, not assertions: `cargo test --release -p hf-datapath --test afpacket --
/// --ignored relay_throughput --nocapture`.
#[test]
#[ignore]
fn relay_throughput() {
    if !root_or_skip("relay_throughput") {
        return;
    }
    // Direct veth between A and B, offloads on and off.
    for feats in [&[][..], &["tx", "off", "tso", "off", "gso", "off"][..]] {
        let (a, b) = (quiet_ns(), quiet_ns());
        a.veth("a0", "b0", Some(&b));
        a.ip(&["addr", "add", "10.79.0.1/24", "dev", "a0"]);
        b.ip(&["addr", "add", "10.79.0.2/24", "dev", "b0"]);
        if !feats.is_empty() {
            a.ethtool_k("a0", feats);
            b.ethtool_k("b0", feats);
        }
        let g = iperf(&a, &b, "10.79.0.2");
        let on = feats.is_empty();
        println!(
            "direct veth, offloads {}: {g:.2} Gb/s",
            if on { "on" } else { "off" }
        );
        if on {
            let k = iperf_udp_kpps(&a, &b, "10.79.0.2");
            println!("direct veth, 60-byte UDP payloads: {k:.0} kpps received");
        }
    }
    // Through the relay: vnet_hdr on (offloads cross), and off with the endpoints' offloads off.
    for (vnet, batched) in [(true, false), (true, true), (false, true)] {
        let feats: &[&str] = if vnet {
            &[]
        } else {
            &["tx", "off", "tso", "off", "gso", "off"]
        };
        let t = three(feats);
        let cfg = AfPacketConfig {
            vnet_hdr: vnet,
            ..AfPacketConfig::default()
        };
        let (x, y) = (open_cfg(&t.r, "a1", cfg), open_cfg(&t.r, "b1", cfg));
        let relay = Relay::start_with(x, y, Keep::All, batched);
        let g = iperf(&t.a, &t.b, "10.79.0.2");
        let k = iperf_udp_kpps(&t.a, &t.b, "10.79.0.2");
        let (st, _, _) = relay.finish();
        println!(
            "relay ({}), vnet_hdr {}: {g:.2} Gb/s ({} frames relayed, {} super-frames); \
             60-byte UDP payloads: {k:.0} kpps received",
            if batched {
                "send_batch"
            } else {
                "send per frame"
            },
            if vnet {
                "on"
            } else {
                "off, endpoint offloads off"
            },
            st.frames,
            st.gso
        );
    }
}
