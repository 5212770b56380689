//! `sandbox`: established TCP between two chassis through Geneve, in memory, on one core.
//!
//! Two `hf_datapath::Datapath`s run `hf_datapath::example`'s program: one logical switch
//! across two chassis with a stateful policy at both ends (the sender's ingress commits in its
//! port's zone, the receiver's egress in its own). N TCP connections from `vm1` (chassis A) to
//! `vm2` (chassis B) are established through the datapaths themselves (handshakes both ways),
//! then data segments round-robin over the connections go in at A's port, out of A as a Geneve
//! payload, into B's tunnel input, and out of B's port. One delivered frame = two datapath runs
//! (each: parse, flow cache, conntrack, output), Geneve encapsulation and decapsulation, and the
//! datapath's output queues.
//!
//! - `cached_established_tcp/...`: frames per second delivered at B's port (goal: 5 Mpps).
//! - `cached_established_tcp_allocs_per_frame`, `..._cache_lookups_per_frame`,
//!   `..._cache_probes_per_frame`, `..._cache_chained_per_frame`,
//!   `..._cache_first_hinted_per_frame`: allocation calls, hashed flow-cache lookups (at most
//!   one per chassis, for the segment before the conntrack recirculation; none once the
//!   resume point's hint serves it), hash tables those lookups probed (one per lookup),
//!   continuations after conntrack found through the recirculating op's hint instead of a
//!   lookup (one per chassis), and first segments found through their resume point's hint
//!   (one per chassis), per delivered frame.
//!
//! Frames enter A through the port's handle ([`Datapath::port_handle`], looked up once), as a
//! port's receive loop would hold it.
//!
//! The loop patches the connection's source port (with an incremental checksum update) into a
//! hot frame template, as a freshly received frame would be. Allocation calls in the loop are
//! counted.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_datapath::example::{self, VM1_IP, VM2_IP, program};
use hf_datapath::proto::{FromDatapath, PROTOCOL_VERSION, ToDatapath, encode};
use hf_datapath::{Datapath, PortHandle, TransmitRef};
use hf_wire::tcp_flags;

use super::conntrack::{clocks_note, timed};
use crate::{Opts, Report};

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];

const TCP_SPORT: usize = 34;
const TCP_CSUM: usize = 50;

fn chassis(hv: u32) -> anyhow::Result<Datapath> {
    let mut dp = example::chassis(hv, IPS);
    dp.handle_control_connected(Duration::ZERO);
    let hello = ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: format!("hv{hv}"),
    };
    let prog = ToDatapath::Program(Box::new(program(1, hv, IPS)));
    for m in [hello, prog] {
        dp.handle_control_bytes(&encode(&m)?, Duration::ZERO);
    }
    let mut dec = hf_datapath::proto::Decoder::<FromDatapath>::new();
    while let Some(b) = dp.poll_control_transmit() {
        dec.push(&b);
    }
    let mut installed = false;
    while let Some(m) = dec.next_msg()? {
        if let FromDatapath::Installed { flow_errors, .. } = &m {
            anyhow::ensure!(flow_errors.is_empty(), "flow errors: {flow_errors:?}");
            installed = true;
        }
    }
    anyhow::ensure!(installed, "chassis hv{hv}: program not installed");
    Ok(dp)
}

/// Carries `frame` from `from`'s port through the tunnel to the other chassis; returns the
/// number of frames that came out of a port.
fn carry(dps: &mut [Datapath; 2], from: usize, port: &str, frame: &[u8], now: Duration) -> usize {
    dps[from].handle_port_frame(port, frame, now);
    deliver(dps, from, now)
}

/// [`carry`] for a frame on a port found by [`Datapath::port_handle`] (what a port's receive
/// loop holds: the name is looked up once, not per frame).
fn carry_at(
    dps: &mut [Datapath; 2],
    from: usize,
    port: PortHandle,
    frame: &[u8],
    now: Duration,
) -> usize {
    dps[from].handle_port_frame_at(port, frame, now);
    deliver(dps, from, now)
}

/// Moves what `from` transmitted through the tunnel to the other chassis; returns the number
/// of frames that came out of a port.
fn deliver(dps: &mut [Datapath; 2], from: usize, now: Duration) -> usize {
    let mut delivered = 0;
    let (a, b) = dps.split_at_mut(1);
    let (src, dst) = if from == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    };
    src.drain_transmit(|t| match t {
        TransmitRef::Tunnel { payload, .. } => dst.handle_tunnel(IPS[from], payload, now),
        TransmitRef::Port { .. } => delivered += 1,
        TransmitRef::Mirror { .. } => {}
    });
    dst.drain_transmit(|t| {
        if let TransmitRef::Port { frame, .. } = t {
            black_box(frame);
            delivered += 1;
        }
    });
    delivered
}

pub fn run(opts: &Opts, report: &mut Report) -> anyhow::Result<()> {
    let (n_conn, n_frames) = if opts.tiny {
        (100u16, 20_000usize)
    } else {
        (1_000u16, 3_000_000)
    };
    let mut dps = [chassis(1)?, chassis(2)?];
    let now = Duration::from_secs(1);
    let seg = |from1: bool, port: u16, flags: u16, seq: (u32, u32), payload: usize| {
        let (v1, v2) = ((IpAddr::V4(VM1_IP), port), (IpAddr::V4(VM2_IP), 80));
        let mut f = if from1 {
            tcp_frame(&Seg::new(v1, v2, flags, seq, payload))
        } else {
            tcp_frame(&Seg::new(v2, v1, flags, seq, payload))
        };
        if !from1 {
            let (a, b) = f.split_at_mut(6);
            a.swap_with_slice(&mut b[..6]);
        }
        f
    };
    for i in 0..n_conn {
        let port = 10_000 + i;
        let steps = [
            (0, "vm1", seg(true, port, tcp_flags::SYN, (1000, 0), 0)),
            (
                1,
                "vm2",
                seg(
                    false,
                    port,
                    tcp_flags::SYN | tcp_flags::ACK,
                    (5000, 1001),
                    0,
                ),
            ),
            (0, "vm1", seg(true, port, tcp_flags::ACK, (1001, 5001), 0)),
        ];
        for (from, p, f) in steps {
            let n = carry(&mut dps, from, p, &f, now);
            anyhow::ensure!(n == 1, "handshake of connection {i}: {n} frames delivered");
        }
    }
    let entries: u64 = dps.iter().map(|d| d.counters().conntrack_entries).sum();
    anyhow::ensure!(
        entries == 2 * u64::from(n_conn),
        "handshakes left {entries} connections, expected {}",
        2 * n_conn
    );
    let mut template = seg(
        true,
        10_000,
        tcp_flags::ACK | tcp_flags::PSH,
        (1001, 5001),
        64,
    );
    let vm1 = dps[0]
        .port_handle("vm1")
        .ok_or_else(|| anyhow::anyhow!("chassis hv1 has no port vm1"))?;
    let mut pass = |dps: &mut [Datapath; 2], n: usize| {
        let mut delivered = 0usize;
        for k in 0..n {
            let port = 10_000 + (k % usize::from(n_conn)) as u16;
            let old = [template[TCP_SPORT], template[TCP_SPORT + 1]];
            let new = port.to_be_bytes();
            let cs = u16::from_be_bytes([template[TCP_CSUM], template[TCP_CSUM + 1]]);
            let cs = hf_wire::checksum_adjust(cs, &old, &new);
            template[TCP_SPORT..TCP_SPORT + 2].copy_from_slice(&new);
            template[TCP_CSUM..TCP_CSUM + 2].copy_from_slice(&cs.to_be_bytes());
            delivered += carry_at(dps, 0, vm1, black_box(&template), now);
        }
        delivered
    };
    // Warm up, then time.
    pass(&mut dps, 4 * usize::from(n_conn));
    let a0 = crate::alloc::allocations();
    let s0 = dps.each_ref().map(|d| d.pipeline().cache_stats());
    let (delivered, took) = timed(|| pass(&mut dps, n_frames));
    let allocs = crate::alloc::allocations() - a0;
    let s1 = dps.each_ref().map(|d| d.pipeline().cache_stats());
    let (lookups, probes, chained, first) = (0..2).fold((0, 0, 0, 0), |(l, p, c, h), i| {
        (
            l + s1[i].lookups - s0[i].lookups,
            p + s1[i].probes - s0[i].probes,
            c + s1[i].chained - s0[i].chained,
            h + s1[i].first_hinted - s0[i].first_hinted,
        )
    });
    anyhow::ensure!(
        delivered == n_frames,
        "delivered {delivered} of {n_frames} frames"
    );
    let pps = n_frames as f64 / took.secs();
    report.result(
        &format!(
            "cached_established_tcp/2-chassis-geneve,ls-stateful-both-ends,{n_conn}-established-conns,round-robin,a-to-b,64B-payload"
        ),
        pps,
        "pps",
    );
    report.result(
        "cached_established_tcp_allocs_per_frame",
        allocs as f64 / n_frames as f64,
        "allocs",
    );
    report.result(
        "cached_established_tcp_cache_lookups_per_frame",
        lookups as f64 / n_frames as f64,
        "lookups",
    );
    report.result(
        "cached_established_tcp_cache_probes_per_frame",
        probes as f64 / n_frames as f64,
        "probes",
    );
    report.result(
        "cached_established_tcp_cache_chained_per_frame",
        chained as f64 / n_frames as f64,
        "continuations",
    );
    report.result(
        "cached_established_tcp_cache_first_hinted_per_frame",
        first as f64 / n_frames as f64,
        "first segments",
    );
    clocks_note(report, "cached_established_tcp", n_frames as f64, took);
    let c = dps[1].counters();
    report.note(&format!(
        "cached_established_tcp: goal 5,000,000 pps per core and 0 allocations per frame; B: {} cache hits, {} misses",
        c.cache_hits, c.cache_misses
    ));
    Ok(())
}
