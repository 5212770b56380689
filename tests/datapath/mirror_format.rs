//! Mirror copies (`hf_datapath::mirror`) read by tcpdump, a decoder that shares nothing with
//! holdfast: generated TCP segments from `vm1` go through the example program with a GRE
//! session (`from-lport`, key 7) and an ERSPAN session (`from-lport`, index 10) on the port;
//! each copy, wrapped in an Ethernet/IPv4 header to its sink, must read back in tcpdump as GRE
//! with the key (or the sequence number, counting from 0 per session) and the right protocol,
//! and the GRE copy's inner frame as exactly the segment `vm1` sent (addresses, ports, flags,
//! sequence number, length).
//!
//! Not checked here: the 8 bytes of ERSPAN's own header (tcpdump 4.99 prints ERSPAN in GRE as
//! an unknown protocol); `hf_datapath::mirror`'s unit test checks their layout.

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use hf_datapath::Transmit;
use hf_datapath::example::{self, VM1_IP, VM1_MAC, VM2_IP, VM2_MAC};
use hf_datapath::proto::{MirrorFilter, MirrorKind, MirrorMsg};

const IPS: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
    IpAddr::V4(Ipv4Addr::new(192, 168, 0, 2)),
];
const GRE_SINK: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);
const ERSPAN_SINK: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// Ethernet + IPv4 (protocol 47) to `dst` around a GRE payload.
fn outer(dst: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0xaa, 0x55, 0xaa, 0x55, 0, 9, 0xaa, 0x55, 0xaa, 0x55, 0, 1, 8, 0,
    ];
    let mut ip = vec![0x45, 0];
    ip.extend(((20 + payload.len()) as u16).to_be_bytes());
    ip.extend([0, 0, 0x40, 0, 64, 47, 0, 0, 192, 168, 0, 1]);
    ip.extend(dst.octets());
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend(ip);
    f.extend(payload);
    f
}

#[test]
fn mirror_copies_read_back_in_tcpdump() {
    if !crate::common::require("mirror_copies_read_back_in_tcpdump", &["tcpdump"]) {
        return;
    }
    let mut dp = example::chassis(1, IPS);
    let errs = dp.install(example::program(1, 1, IPS)).expect("install");
    assert!(errs.is_empty(), "{errs:?}");
    let session = |name: &str, kind, sink: Ipv4Addr, index| MirrorMsg {
        name: name.into(),
        kind,
        filter: MirrorFilter::FromLport,
        sink: sink.to_string(),
        index,
        ports: vec!["vm1".into()],
    };
    dp.set_mirrors(vec![
        session("tap-gre", MirrorKind::Gre, GRE_SINK, 7),
        session("tap-er", MirrorKind::Erspan, ERSPAN_SINK, 10),
    ]);
    let mut r = hf_sim::net::Rng::new(2121);
    let mut sent = Vec::new();
    let mut copies: Vec<(IpAddr, Vec<u8>)> = Vec::new();
    for i in 0..300u64 {
        let sport = 1024 + (r.next_u64() % 60000) as u16;
        let flags = [0x02u16, 0x10, 0x18, 0x11, 0x04][(r.next_u64() % 5) as usize];
        let seq = r.next_u64() as u32;
        let len = (r.next_u64() % 1400) as usize;
        let f = example_frame(sport, flags, seq, len);
        dp.handle_port_frame("vm1", &f, Duration::from_millis(1000 + i));
        while let Some(t) = dp.poll_transmit() {
            if let Transmit::Mirror { dst, payload } = t {
                copies.push((dst, payload));
            }
        }
        sent.push((sport, flags, seq, len));
    }
    assert_eq!(copies.len(), 600, "two copies of each of 300 segments");
    let frames: Vec<Vec<u8>> = copies
        .iter()
        .map(|(d, p)| match d {
            IpAddr::V4(a) => outer(*a, p),
            IpAddr::V6(_) => panic!("IPv6 sink"),
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.pcap");
    std::fs::write(&file, crate::common::pcap(&frames)).unwrap();
    let out = crate::common::run_ok(
        Command::new("tcpdump")
            .args(["-r"])
            .arg(&file)
            .args(["-nn", "-v", "-e", "-S"]),
    );
    // One record: its header line, the GRE line, and for GRE the inner frame's two lines.
    let lines: Vec<&str> = out.lines().collect();
    let mut records: Vec<Vec<&str>> = Vec::new();
    for l in lines {
        if !l.starts_with(' ') && !l.starts_with('\t') {
            records.push(Vec::new());
        }
        if let Some(r) = records.last_mut() {
            r.push(l.trim());
        }
    }
    assert_eq!(records.len(), 600, "tcpdump read {} records", records.len());
    let (mut bad, mut er_seq) = (Vec::new(), 0u32);
    for (i, rec) in records.iter().enumerate() {
        let text = rec.join(" | ");
        let (sport, flags, seq, len) = sent[i / 2];
        let want: Vec<String> = if copies[i].0 == IpAddr::V4(GRE_SINK) {
            let tf = match flags {
                0x02 => "[S]",
                0x10 => "[.]",
                0x18 => "[P.]",
                0x11 => "[F.]",
                _ => "[R]",
            };
            vec![
                format!(
                    "192.168.0.1 > {GRE_SINK}: GREv0, Flags [key present], key=0x7, proto TEB (0x6558)"
                ),
                format!(
                    "{} > {}, ethertype IPv4 (0x0800)",
                    fmt_mac(&VM1_MAC),
                    fmt_mac(&VM2_MAC)
                ),
                format!("{VM1_IP}.{sport} > {VM2_IP}.80: Flags {tf}, cksum "),
                "(correct)".to_string(),
                format!("seq {seq}"),
                format!("length {len}"),
            ]
        } else {
            er_seq += 1;
            vec![format!(
                "192.168.0.1 > {ERSPAN_SINK}: GREv0, Flags [sequence# present], seq {}, proto unknown (0x88be)",
                er_seq - 1
            )]
        };
        if let Some(w) = want.iter().find(|w| !text.contains(w.as_str())) {
            bad.push(format!("copy {i}: wanted {w:?} in\n  {text}"));
        }
    }
    eprintln!(
        "mirror format: 300 segments, 600 copies read by tcpdump, {} differ",
        bad.len()
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A TCP segment vm1 → vm2:80 (the example program's switch forwards it).
fn example_frame(sport: u16, flags: u16, seq: u32, len: usize) -> Vec<u8> {
    hf_pipeline::example::frame(
        (VM1_MAC, VM1_IP, sport),
        (VM2_MAC, VM2_IP, 80),
        flags,
        (seq, 1),
        len,
    )
}
