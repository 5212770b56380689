//! Offloaded frames through the datapath whole ([`Datapath::handle_port_frame_offload`]): a TCP
//! super-frame with a partial checksum, as an AF_PACKET port with `PACKET_VNET_HDR` receives
//! it from a VM, runs through the pipeline once (here through a rewrite of its destination
//! address, which must land on the partial checksum's pseudo-header sum) and leaves for the
//! tunnel with its metadata; cut into segments ([`hf_datapath::offload::complete`]), every
//! segment verifies (checksums checked by hf-wire's verifier, a different code path from the
//! incremental NAT update) and the payload arrives whole and in order. The same frame given
//! whole through `drain_transmit` comes out as the same segments.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_datapath::example::{self, VM1_IP, VM2_MAC};
use hf_datapath::proto::{FlowMsg, ToDatapath, encode};
use hf_datapath::{Datapath, TransmitRef};
use hf_wire::offload::{Csum, Gso, GsoKind, Offload, Segments};
use hf_wire::tcp_flags::{ACK, PSH};

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];
const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);
const MSS: u16 = 1000;

/// hv1 with the example program and a flow that rewrites traffic for VIP to vm2.
fn chassis() -> Datapath {
    let mut dp = example::chassis(1, IPS);
    let mut p = example::program(1, 1, IPS);
    Arc::make_mut(&mut p.datapaths[0]).flows.push(
        FlowMsg {
            table: 0,
            priority: 200,
            matches: format!("ip4.dst == {VIP}").into(),
            actions: "ip4.dst = 10.0.0.2; next;".into(),
            id: "rewrite".into(),
            ..Default::default()
        }
        .into(),
    );
    dp.handle_control_connected(Duration::ZERO);
    for m in [
        ToDatapath::Hello {
            version: hf_datapath::proto::PROTOCOL_VERSION,
            chassis: "hv1".into(),
        },
        ToDatapath::Program(Box::new(p)),
    ] {
        dp.handle_control_bytes(&encode(&m).unwrap(), Duration::ZERO);
    }
    while dp.poll_control_transmit().is_some() {}
    assert_eq!(dp.generation(), 1);
    dp
}

/// vm1 → VIP: a super-frame of `segments` MSS-sized pieces with a patterned payload, its TCP
/// checksum partial (the pseudo-header sum, as Linux leaves it), and its metadata.
fn super_frame(segments: usize) -> (Vec<u8>, Vec<u8>, Offload) {
    let n = segments * usize::from(MSS);
    let mut f = tcp_frame(&Seg::new(
        (VM1_IP.into(), 40000),
        (VIP.into(), 80),
        ACK | PSH,
        (1000, 5000),
        n,
    ));
    f[0..6].copy_from_slice(&VM2_MAC);
    let payload: Vec<u8> = (0..n).map(|i| (i * 7 + i / 253) as u8).collect();
    let l4 = 34;
    f[l4 + 20..].copy_from_slice(&payload);
    let ps = hf_wire::pseudo_header_sum(VM1_IP.into(), VIP.into(), 6, (20 + n) as u32);
    let mut folded = ps;
    while folded > 0xffff {
        folded = (folded & 0xffff) + (folded >> 16);
    }
    f[l4 + 16..l4 + 18].copy_from_slice(&(folded as u16).to_be_bytes());
    let o = Offload {
        csum: Csum::Partial {
            start: l4 as u16,
            offset: 16,
        },
        gso: Some(Gso {
            kind: GsoKind::TcpV4,
            size: MSS,
            hdr_len: (l4 + 20) as u16,
            ecn: false,
        }),
    };
    (f, payload, o)
}

/// The segments' inner frames out of `dp`, by `drain_transmit_offload` + `complete` (`carried`)
/// or by `drain_transmit`.
fn segments_out(dp: &mut Datapath, carried: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut emit = |t: TransmitRef<'_>| {
        if let TransmitRef::Tunnel { payload, .. } = t {
            let g = hf_wire::geneve::GenevePacket::new_checked(payload).unwrap();
            out.push(payload[g.header_len()..].to_vec());
        }
    };
    if carried {
        let mut segs = Segments::new();
        let mut offloads = 0;
        dp.drain_transmit_offload(|t, o| {
            if o.is_none() {
                emit(t)
            } else {
                offloads += 1;
                if let TransmitRef::Tunnel { payload, .. } = t {
                    let g = hf_wire::geneve::GenevePacket::new_checked(payload).unwrap();
                    assert_partial_field(&payload[g.header_len()..], o);
                }
                assert!(hf_datapath::offload::complete(t, o, &mut segs, &mut emit));
            }
        });
        assert_eq!(
            offloads, 1,
            "the super-frame left as one frame with its metadata"
        );
    } else {
        dp.drain_transmit(&mut emit);
    }
    out
}

/// A device (the kernel, for a `PACKET_VNET_HDR` port) finishes a partial checksum from the
/// field as it is: it must hold the folded pseudo-header sum of the frame as it leaves, the
/// rewritten destination included.
fn assert_partial_field(f: &[u8], o: &Offload) {
    let Csum::Partial { start, offset } = o.csum else {
        panic!("not partial: {o:?}")
    };
    let (s, at) = (usize::from(start), usize::from(start + offset));
    let src = Ipv4Addr::new(f[26], f[27], f[28], f[29]);
    let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
    let mut want = hf_wire::pseudo_header_sum(src.into(), dst.into(), 6, (f.len() - s) as u32);
    while want > 0xffff {
        want = (want & 0xffff) + (want >> 16);
    }
    let got = u16::from_be_bytes([f[at], f[at + 1]]);
    assert_eq!(
        got, want as u16,
        "the partial checksum field after the rewrite"
    );
}

fn check(segments: &[Vec<u8>], payload: &[u8], n: usize) {
    assert_eq!(segments.len(), n);
    let mut got = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        let p = hf_wire::parse(s, 0, 0).unwrap();
        assert!(
            hf_wire::checksums_valid(s, &p),
            "segment {i}'s checksums do not verify"
        );
        assert_eq!(&s[30..34], &[10, 0, 0, 2], "segment {i} not rewritten");
        let seq = u32::from_be_bytes(s[38..42].try_into().unwrap());
        assert_eq!(seq, 1000 + (i * usize::from(MSS)) as u32);
        got.extend_from_slice(&s[54..]);
    }
    assert_eq!(got, payload, "the payload arrived whole and in order");
}

/// The rewrite itself keeps a whole frame's checksums right (what the offloaded frame's
/// adjustment rides on).
#[test]
fn the_rewrite_keeps_a_whole_frames_checksums() {
    let mut dp = chassis();
    let f = tcp_frame(&Seg::new(
        (VM1_IP.into(), 40000),
        (VIP.into(), 80),
        ACK | PSH,
        (1000, 5000),
        100,
    ));
    let mut f = f;
    f[0..6].copy_from_slice(&VM2_MAC);
    dp.handle_port_frame("vm1", &f, Duration::from_millis(1));
    let out = segments_out(&mut dp, false);
    assert_eq!(out.len(), 1);
    let p = hf_wire::parse(&out[0], 0, 0).unwrap();
    assert!(hf_wire::checksums_valid(&out[0], &p));
    assert_eq!(&out[0][30..34], &[10, 0, 0, 2]);
}

#[test]
fn a_super_frame_crosses_the_pipeline_whole_and_its_segments_verify() {
    let mut dp = chassis();
    let port = dp.port_handle("vm1").unwrap();
    let (f, payload, o) = super_frame(5);
    let misses = dp.counters().cache_misses + dp.counters().cache_hits;
    assert!(dp.handle_port_frame_offload(port, &f, &o, Duration::from_millis(1)));
    // One walk for the whole super-frame.
    assert_eq!(
        dp.counters().cache_misses + dp.counters().cache_hits,
        misses + 1
    );
    check(&segments_out(&mut dp, true), &payload, 5);
    // drain_transmit hands the same frame over as whole segments.
    let (f, payload, o) = super_frame(3);
    assert!(dp.handle_port_frame_offload(port, &f, &o, Duration::from_millis(2)));
    let segs = segments_out(&mut dp, false);
    // The second frame continues the first's sequence numbers only in the test's numbering.
    assert_eq!(segs.len(), 3);
    for s in &segs {
        let p = hf_wire::parse(s, 0, 0).unwrap();
        assert!(hf_wire::checksums_valid(s, &p));
    }
    let got: Vec<u8> = segs.iter().flat_map(|s| s[54..].to_vec()).collect();
    assert_eq!(got, payload);
}
