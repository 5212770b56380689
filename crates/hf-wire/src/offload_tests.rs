//! Tests of [`crate::offload`]: checksums checked by a reference sum written here (64-bit
//! accumulator, folded once at the end: a different algorithm from `checksum.rs`) and by smoltcp,
//! segments checked field by field against the super-frame they came from, and arbitrary bytes
//! with arbitrary metadata that must never panic. The byte-for-byte comparison with the kernel's
//! own segmentation is in `hf-datapath/tests/afpacket.rs` (it needs root and a veth pair).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use smoltcp::wire::{IpAddress, Ipv4Packet, TcpPacket, UdpPacket};

use super::*;

const SRC4: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 3);
const DST4: Ipv4Addr = Ipv4Addr::new(10, 9, 8, 7);
const SRC6: Ipv6Addr = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 3);
const DST6: Ipv6Addr = Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 7);

const FIN: u8 = 0x01;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const CWR: u8 = 0x80;

/// The reference one's-complement sum: words into a u64, folded once at the end.
fn ref_sum(chunks: &[&[u8]]) -> u16 {
    let mut all = Vec::new();
    for c in chunks {
        all.extend_from_slice(c);
    }
    if all.len() % 2 == 1 {
        all.push(0);
    }
    let mut s: u64 = 0;
    for w in all.chunks(2) {
        s += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        _ => panic!("mixed families"),
    }
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p
}

/// A frame as a Linux sender hands it to a device with offloads on: Ethernet (optionally one
/// 802.1Q tag), IPv4 or IPv6, TCP (with a timestamp option) or UDP, and the L4 checksum field
/// holding the pseudo-header sum (a partial checksum). Returns the frame and its L4 offset.
fn super_frame(
    v6: bool,
    tcp: bool,
    vlan: bool,
    flags: u8,
    payload: &[u8],
    ip_id: u16,
) -> (Vec<u8>, usize) {
    let mut f = vec![0x02, 0, 0, 0, 0, 0xb, 0x02, 0, 0, 0, 0, 0xa];
    if vlan {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
    }
    f.extend_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
    let l3 = f.len();
    let proto = if tcp { 6 } else { 17 };
    let l4_hdr = if tcp { 32 } else { 8 };
    let l4_len = l4_hdr + payload.len();
    if v6 {
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend_from_slice(&SRC6.octets());
        f.extend_from_slice(&DST6.octets());
    } else {
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&ip_id.to_be_bytes());
        f.extend_from_slice(&[0x40, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&SRC4.octets());
        f.extend_from_slice(&DST4.octets());
        let cs = !ref_sum(&[&f[l3..l3 + 20]]);
        f[l3 + 10..l3 + 12].copy_from_slice(&cs.to_be_bytes());
    }
    let l4 = f.len();
    f.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]); // ports 40000 -> 5001
    if tcp {
        f.extend_from_slice(&0xfffff000u32.to_be_bytes()); // wraps during the stream
        f.extend_from_slice(&0x01020304u32.to_be_bytes());
        f.extend_from_slice(&[0x80, flags, 0x01, 0xf5, 0, 0, 0, 0]);
        f.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    } else {
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    }
    f.extend_from_slice(payload);
    let (s, d): (IpAddr, IpAddr) = if v6 {
        (SRC6.into(), DST6.into())
    } else {
        (SRC4.into(), DST4.into())
    };
    let ps = ref_sum(&[&pseudo(s, d, proto, l4_len)]);
    let at = l4 + if tcp { 16 } else { 6 };
    f[at..at + 2].copy_from_slice(&ps.to_be_bytes());
    (f, l4)
}

fn partial(l4: usize, tcp: bool) -> Csum {
    Csum::Partial {
        start: l4 as u16,
        offset: if tcp { 16 } else { 6 },
    }
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// The L4 checksum of `f` verifies, by the reference sum and by smoltcp.
fn l4_valid(f: &[u8], l3: usize, l4: usize, v6: bool, tcp: bool) -> bool {
    let (s, d): (IpAddr, IpAddr) = if v6 {
        let a: [u8; 16] = f[l3 + 8..l3 + 24].try_into().unwrap();
        let b: [u8; 16] = f[l3 + 24..l3 + 40].try_into().unwrap();
        (Ipv6Addr::from(a).into(), Ipv6Addr::from(b).into())
    } else {
        let a: [u8; 4] = f[l3 + 12..l3 + 16].try_into().unwrap();
        let b: [u8; 4] = f[l3 + 16..l3 + 20].try_into().unwrap();
        (Ipv4Addr::from(a).into(), Ipv4Addr::from(b).into())
    };
    let proto = if tcp { 6 } else { 17 };
    let seg = &f[l4..];
    let ours = ref_sum(&[&pseudo(s, d, proto, seg.len()), seg]) == 0xffff;
    let (sa, da) = (IpAddress::from(s), IpAddress::from(d));
    let theirs = if tcp {
        TcpPacket::new_checked(seg)
            .unwrap()
            .verify_checksum(&sa, &da)
    } else {
        UdpPacket::new_checked(seg)
            .unwrap()
            .verify_checksum(&sa, &da)
    };
    assert_eq!(ours, theirs, "reference sum and smoltcp disagree");
    ours
}

#[test]
fn virtio_header_round_trips_and_decodes_kernel_layout() {
    let o = Offload {
        csum: Csum::Partial {
            start: 34,
            offset: 16,
        },
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: 1448,
            hdr_len: 66,
            ecn: true,
        }),
    };
    let h = o.to_virtio_hdr();
    // struct virtio_net_hdr { u8 flags; u8 gso_type; u16 hdr_len, gso_size, csum_start,
    // csum_offset; }, host byte order.
    let mut want = vec![1u8, 0x81];
    for v in [66u16, 1448, 34, 16] {
        want.extend_from_slice(&v.to_ne_bytes());
    }
    assert_eq!(h.as_slice(), want.as_slice());
    assert_eq!(Offload::from_virtio_hdr(&h), Ok(o));
    for o in [
        Offload::NONE,
        Offload {
            csum: Csum::Valid,
            gso: None,
        },
        Offload {
            csum: partial(54, false),
            gso: Some(Gso {
                kind: GsoKind::UdpL4,
                size: 1000,
                hdr_len: 62,
                ecn: false,
            }),
        },
        Offload {
            csum: partial(54, true),
            gso: Some(Gso {
                kind: GsoKind::TcpV6,
                size: 1428,
                hdr_len: 86,
                ecn: false,
            }),
        },
    ] {
        assert_eq!(Offload::from_virtio_hdr(&o.to_virtio_hdr()), Ok(o));
    }
    assert_eq!(
        Offload::from_virtio_hdr(&[0, 3, 0, 0, 0, 0, 0, 0, 0, 0]),
        Err(OffloadError::UnsupportedGso(3))
    );
    assert_eq!(
        Offload::from_virtio_hdr(&[0; 9]),
        Err(OffloadError::HeaderTruncated)
    );
    assert!(Offload::NONE.is_none());
    assert!(
        Offload {
            csum: Csum::Valid,
            gso: None
        }
        .is_none()
    );
    assert!(!o.is_none());
    let s = o.shifted(4);
    assert_eq!(
        s.csum,
        Csum::Partial {
            start: 38,
            offset: 16
        }
    );
    assert_eq!(s.gso.map(|g| g.hdr_len), Some(70));
}

#[test]
fn complete_checksum_finishes_partial_checksums() {
    for (v6, tcp, vlan) in [
        (false, true, false),
        (true, true, false),
        (false, false, true),
        (true, false, true),
        (false, true, true),
    ] {
        for len in [0, 1, 2, 3, 100, 1459] {
            let (mut f, l4) = super_frame(v6, tcp, vlan, ACK | PSH, &pattern(len), 7);
            let l3 = if vlan { 18 } else { 14 };
            assert!(!l4_valid(&f, l3, l4, v6, tcp) || len == 0);
            let off = Offload {
                csum: partial(l4, tcp),
                gso: None,
            };
            complete_checksum(&mut f, &off).unwrap();
            assert!(l4_valid(&f, l3, l4, v6, tcp), "v6={v6} tcp={tcp} len={len}");
        }
    }
    // Other states leave the bytes alone; a field past the end is an error, not a panic.
    let (f0, l4) = super_frame(false, true, false, ACK, b"abc", 1);
    let mut f = f0.clone();
    for csum in [Csum::None, Csum::Valid] {
        complete_checksum(&mut f, &Offload { csum, gso: None }).unwrap();
        assert_eq!(f, f0);
    }
    let bad = Offload {
        csum: Csum::Partial {
            start: l4 as u16,
            offset: f.len() as u16,
        },
        gso: None,
    };
    assert_eq!(
        complete_checksum(&mut f, &bad),
        Err(OffloadError::CsumOutOfFrame)
    );
    assert_eq!(f, f0);
}

/// Segments `payload_len` bytes of `v6`/`tcp` with `mss` and checks every field of every segment
/// against the super-frame.
fn check_segmentation(v6: bool, tcp: bool, vlan: bool, payload_len: usize, mss: u16, flags: u8) {
    let payload = pattern(payload_len);
    let ip_id = 0xfffe; // wraps
    let (f, l4) = super_frame(v6, tcp, vlan, flags, &payload, ip_id);
    let l3 = if vlan { 18 } else { 14 };
    let hdr = l4 + if tcp { 32 } else { 8 };
    let kind = match (tcp, v6) {
        (true, false) => GsoKind::TcpV4,
        (true, true) => GsoKind::TcpV6,
        (false, _) => GsoKind::UdpL4,
    };
    let off = Offload {
        csum: partial(l4, tcp),
        gso: Some(Gso {
            kind,
            size: mss,
            hdr_len: hdr as u16,
            ecn: false,
        }),
    };
    let mut out = Segments::new();
    let n = segment(&f, &off, &mut out).unwrap();
    let want = payload_len.div_ceil(usize::from(mss)).max(1);
    assert_eq!((n, out.len()), (want, want));
    let mut joined = Vec::new();
    for (i, s) in out.iter().enumerate() {
        let body = &s[hdr..];
        let expect_len = (payload_len - joined.len()).min(usize::from(mss));
        assert_eq!(body.len(), expect_len, "segment {i}");
        joined.extend_from_slice(body);
        // L2 unchanged.
        assert_eq!(s[..l3], f[..l3]);
        if v6 {
            assert_eq!(s[l3..l3 + 4], f[l3..l3 + 4]);
            let plen = u16::from_be_bytes([s[l3 + 4], s[l3 + 5]]);
            assert_eq!(usize::from(plen), s.len() - l3 - 40);
            assert_eq!(s[l3 + 6..l4], f[l3 + 6..l4]);
        } else {
            let ip = Ipv4Packet::new_checked(&s[l3..]).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(!ref_sum(&[&s[l3..l3 + 20]]), 0);
            assert_eq!(usize::from(ip.total_len()), s.len() - l3);
            assert_eq!(ip.ident(), ip_id.wrapping_add(i as u16));
            assert_eq!(s[l3 + 6..l3 + 10], f[l3 + 6..l3 + 10]);
            assert_eq!(s[l3 + 12..l4], f[l3 + 12..l4]);
        }
        assert!(l4_valid(s, l3, l4, v6, tcp), "segment {i} checksum");
        assert_eq!(s[l4..l4 + 4], f[l4..l4 + 4]);
        if tcp {
            let seq = u32::from_be_bytes(s[l4 + 4..l4 + 8].try_into().unwrap());
            assert_eq!(
                seq,
                0xfffff000u32.wrapping_add((i * usize::from(mss)) as u32)
            );
            let fl = s[l4 + 13];
            let last = i + 1 == n;
            assert_eq!(fl & CWR != 0, i == 0 && flags & CWR != 0, "CWR on {i}");
            assert_eq!(fl & FIN != 0, last && flags & FIN != 0, "FIN on {i}");
            assert_eq!(fl & PSH != 0, last && flags & PSH != 0, "PSH on {i}");
            assert_eq!(fl & ACK, flags & ACK);
            assert_eq!(s[l4 + 8..l4 + 13], f[l4 + 8..l4 + 13]);
            assert_eq!(s[l4 + 14..l4 + 16], f[l4 + 14..l4 + 16]);
            assert_eq!(s[l4 + 18..hdr], f[l4 + 18..hdr]);
        } else {
            let len = u16::from_be_bytes([s[l4 + 4], s[l4 + 5]]);
            assert_eq!(usize::from(len), s.len() - l4);
            assert_ne!(s[l4 + 6..l4 + 8], [0, 0]);
        }
    }
    assert_eq!(joined, payload);
}

#[test]
fn segments_tcp_over_ipv4_and_ipv6() {
    for v6 in [false, true] {
        for vlan in [false, true] {
            check_segmentation(v6, true, vlan, 4000, 1000, ACK | PSH | FIN | CWR);
            check_segmentation(v6, true, vlan, 4344, 1448, ACK | PSH);
            check_segmentation(v6, true, vlan, 2501, 1000, ACK | CWR);
            check_segmentation(v6, true, vlan, 999, 1000, ACK | FIN);
            check_segmentation(v6, true, vlan, 0, 1000, ACK | FIN);
            check_segmentation(v6, true, vlan, 65000, 1428, ACK | PSH);
        }
    }
}

#[test]
fn segments_udp_l4_over_ipv4_and_ipv6() {
    for v6 in [false, true] {
        check_segmentation(v6, false, false, 3000, 1000, 0);
        check_segmentation(v6, false, true, 2999, 1472, 0);
        check_segmentation(v6, false, false, 1, 1000, 0);
    }
}

#[test]
fn without_gso_segment_copies_and_completes() {
    let (f, l4) = super_frame(false, false, false, 0, &pattern(300), 5);
    let off = Offload {
        csum: partial(l4, false),
        gso: None,
    };
    let mut out = Segments::new();
    assert_eq!(segment(&f, &off, &mut out), Ok(1));
    let s = out.get(0).unwrap();
    assert_eq!(s.len(), f.len());
    assert!(l4_valid(s, 14, l4, false, false));
    assert_eq!(out.get(1), None);
}

#[test]
fn mismatched_requests_are_errors() {
    let mut out = Segments::new();
    let (f4, l4) = super_frame(false, true, false, ACK, &pattern(3000), 1);
    let (f6, l6) = super_frame(true, true, false, ACK, &pattern(3000), 1);
    let gso = |kind, size| {
        Some(Gso {
            kind,
            size,
            hdr_len: 0,
            ecn: false,
        })
    };
    let case = |f: &[u8], csum, g, out: &mut Segments| segment(f, &Offload { csum, gso: g }, out);
    assert_eq!(
        case(&f6, partial(l6, true), gso(GsoKind::TcpV4, 1000), &mut out),
        Err(OffloadError::Mismatch)
    );
    assert_eq!(
        case(&f4, partial(l4, true), gso(GsoKind::TcpV6, 1000), &mut out),
        Err(OffloadError::Mismatch)
    );
    assert_eq!(
        case(&f4, partial(l4, true), gso(GsoKind::UdpL4, 1000), &mut out),
        Err(OffloadError::Mismatch)
    );
    assert_eq!(
        case(&f4, partial(l4, true), gso(GsoKind::TcpV4, 0), &mut out),
        Err(OffloadError::ZeroSize)
    );
    assert_eq!(
        case(
            &f4,
            partial(l4 + 4, true),
            gso(GsoKind::TcpV4, 100),
            &mut out
        ),
        Err(OffloadError::Mismatch)
    );
    let mut frag = f4.clone();
    frag[14 + 6] = 0x20; // MF
    assert_eq!(
        case(
            &frag,
            partial(l4, true),
            gso(GsoKind::TcpV4, 1000),
            &mut out
        ),
        Err(OffloadError::Mismatch)
    );
    assert_eq!(
        case(
            &f4[..l4 + 10],
            Csum::None,
            gso(GsoKind::TcpV4, 1000),
            &mut out
        ),
        Err(OffloadError::Truncated)
    );
    // Without a partial checksum the L4 header is found from the IP header.
    assert_eq!(
        case(&f4, Csum::None, gso(GsoKind::TcpV4, 1000), &mut out),
        Ok(3)
    );
    assert!(out.iter().all(|s| l4_valid(s, 14, l4, false, true)));
}

#[test]
fn geneve_overhead_fills_the_underlay_mtu_exactly() {
    use crate::geneve::{self, OvnMetadata, PortKeys, TunnelOuter};
    assert_eq!(geneve::overhead(false), 58);
    assert_eq!(geneve::overhead(true), 78);
    for (v6, underlay) in [(false, 1500u32), (true, 1500), (false, 9000), (true, 1280)] {
        let mtu = geneve::inner_mtu(underlay, v6) as usize;
        // The largest inner frame: the VM's MTU plus its Ethernet header.
        let inner = vec![0u8; mtu + 14];
        let (src, dst): (IpAddr, IpAddr) = if v6 {
            (SRC6.into(), DST6.into())
        } else {
            (SRC4.into(), DST4.into())
        };
        let outer = TunnelOuter {
            eth_src: crate::EthAddr([2, 0, 0, 0, 0, 1]),
            eth_dst: crate::EthAddr([2, 0, 0, 0, 0, 2]),
            src,
            dst,
            udp_src: 49152,
            ttl: 64,
        };
        let meta = OvnMetadata {
            datapath: 5,
            ports: Some(PortKeys {
                ingress: 1,
                egress: 2,
            }),
        };
        let mut out = Vec::new();
        geneve::encapsulate(&mut out, &outer, &meta, &inner).unwrap();
        // The outer L3 packet is what the underlay MTU bounds.
        assert_eq!(
            out.len() - 14,
            underlay as usize,
            "v6={v6} underlay={underlay}"
        );
    }
    assert_eq!(geneve::inner_mtu(40, false), 0);
}

fn arb_offload() -> impl Strategy<Value = Offload> {
    let csum = prop_oneof![
        Just(Csum::None),
        Just(Csum::Valid),
        (any::<u16>(), any::<u16>()).prop_map(|(start, offset)| Csum::Partial { start, offset }),
        (0u16..80, prop_oneof![Just(6u16), Just(16)])
            .prop_map(|(start, offset)| Csum::Partial { start, offset }),
    ];
    let kind = prop_oneof![
        Just(GsoKind::TcpV4),
        Just(GsoKind::TcpV6),
        Just(GsoKind::UdpL4)
    ];
    let gso = proptest::option::of((kind, 0u16..300, any::<u16>(), any::<bool>()).prop_map(
        |(kind, size, hdr_len, ecn)| Gso {
            kind,
            size,
            hdr_len,
            ecn,
        },
    ));
    (csum, gso).prop_map(|(csum, gso)| Offload { csum, gso })
}

proptest! {
    #[test]
    fn arbitrary_bytes_and_metadata_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..400),
        off in arb_offload(),
        hdr in proptest::collection::vec(any::<u8>(), 0..12),
    ) {
        let _ = Offload::from_virtio_hdr(&hdr);
        let mut f = data.clone();
        let _ = complete_checksum(&mut f, &off);
        let mut out = Segments::new();
        if let Ok(n) = segment(&data, &off, &mut out) {
            prop_assert_eq!(n, out.len());
        }
    }

    /// Arbitrary bytes behind valid-looking headers: the headers are what segment reads.
    #[test]
    fn arbitrary_tails_of_real_headers_never_panic(
        v6 in any::<bool>(), tcp in any::<bool>(), vlan in any::<bool>(),
        len in 0usize..3000, cut in 0usize..3100, mss in 1u16..1600,
        off in arb_offload(),
    ) {
        let (f, l4) = super_frame(v6, tcp, vlan, ACK | PSH, &pattern(len), 9);
        let whole = cut >= f.len();
        let f = &f[..cut.min(f.len())];
        let mut out = Segments::new();
        let _ = segment(f, &off, &mut out);
        let kind = match (tcp, v6) {
            (true, false) => GsoKind::TcpV4,
            (true, true) => GsoKind::TcpV6,
            (false, _) => GsoKind::UdpL4,
        };
        let good = Offload {
            csum: partial(l4, tcp),
            gso: Some(Gso { kind, size: mss, hdr_len: 0, ecn: false }),
        };
        // A truncated frame whose payload fits one segment goes as it is (its length fields
        // still claim the bytes that were cut); segmented ones get fresh lengths.
        if let Ok(n) = segment(f, &good, &mut out) && (whole || n > 1) {
            let l3 = if vlan { 18 } else { 14 };
            prop_assert_eq!(n, out.len());
            for s in out.iter() {
                prop_assert!(l4_valid(s, l3, l4, v6, tcp));
            }
        }
    }

    #[test]
    fn any_payload_and_mss_segment_correctly(
        v6 in any::<bool>(), tcp in any::<bool>(), len in 0usize..6000, mss in 1u16..2000,
        flags in any::<u8>(),
    ) {
        check_segmentation(v6, tcp, false, len, mss, flags & (FIN | PSH | CWR | ACK));
    }
}
