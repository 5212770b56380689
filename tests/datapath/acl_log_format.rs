//! `hf_datapath::acl_log::flow_format` against Open vSwitch's own `flow_format`, as
//! `ovs-ofctl parse-pcap` prints it (the same function ovn-controller's `acl_log` lines use
//! for the packet): generated packets of every kind the formatter knows (ARP, RARP, IPv4 with
//! options and fragments, IPv6 with extension headers and fragments, TCP with every flag
//! combination's shape, UDP, SCTP, ICMP, ICMPv6 echo and neighbour discovery, IGMP, VLAN
//! tags, truncated headers, other EtherTypes) go through both; every line must be equal but for
//! `in_port=ANY,`, which parse-pcap prints and a packet-in's headers do not carry.

use std::process::Command;

const E: [u8; 12] = [0x50, 0x54, 0, 0, 0, 2, 0x50, 0x54, 0, 0, 0, 1];

/// The simulator's seeded generator, with the two draws the packets need.
struct Rng(hf_sim::net::Rng);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.0.next_u64() as u8).collect()
    }
}

fn l4(r: &mut Rng, proto: u8, v6: bool) -> Vec<u8> {
    match proto {
        6 => {
            let mut t = r.bytes(20);
            t[12] = 5 << 4 | (r.below(2) as u8);
            t[13] = r.next() as u8;
            t
        }
        17 => {
            let mut u = r.bytes(8);
            u[4..6].copy_from_slice(&8u16.to_be_bytes());
            u
        }
        132 => r.bytes(16),
        1 => {
            let mut i = r.bytes(8);
            i[0] = [0u8, 3, 8, 11][r.below(4) as usize];
            i
        }
        58 if v6 => {
            let kind = [128u8, 129, 135, 136, 1][r.below(5) as usize];
            let mut i = vec![kind, 0, 0, 0, 0, 0, 0, 0];
            if kind == 135 || kind == 136 {
                i.extend(r.bytes(16));
                if r.below(2) == 0 {
                    let opt = if kind == 135 { 1 } else { 2 };
                    i.extend([opt, 1]);
                    i.extend(r.bytes(6));
                }
            }
            i
        }
        2 => {
            let mut g = r.bytes(8);
            g[0] = [0x11u8, 0x16, 0x17][r.below(3) as usize];
            g
        }
        _ => {
            let n = r.below(12) as usize;
            r.bytes(n)
        }
    }
}

fn ipv4(r: &mut Rng) -> Vec<u8> {
    let proto = [6u8, 17, 132, 1, 2, 47][r.below(6) as usize];
    let opts = if r.below(4) == 0 { 4 } else { 0 };
    let payload = l4(r, proto, false);
    let ihl = 20 + opts;
    let mut h = vec![0u8; ihl];
    h[0] = 0x40 | (ihl / 4) as u8;
    h[1] = r.next() as u8;
    h[2..4].copy_from_slice(&((ihl + payload.len()) as u16).to_be_bytes());
    let frag: u16 = match r.below(6) {
        0 => 0x2000,
        1 => 0x2000 | (r.below(100) as u16 + 1),
        2 => r.below(100) as u16 + 1,
        3 => 0x4000,
        _ => 0,
    };
    h[6..8].copy_from_slice(&frag.to_be_bytes());
    h[8] = r.next() as u8;
    h[9] = proto;
    h[12..20].copy_from_slice(&r.bytes(8));
    h.extend(payload);
    h
}

fn ipv6(r: &mut Rng) -> Vec<u8> {
    let proto = [6u8, 17, 132, 58, 47][r.below(5) as usize];
    let mut payload = l4(r, proto, true);
    let mut nh = proto;
    match r.below(5) {
        0 => {
            // Hop-by-hop options.
            let mut x = vec![nh, 0];
            x.extend(r.bytes(6));
            x.extend(payload);
            payload = x;
            nh = 0;
        }
        1 => {
            // A fragment header: first or later.
            let off: u16 = if r.below(2) == 0 { 1 } else { 8 << 3 | 1 };
            let mut x = vec![nh, 0];
            x.extend(off.to_be_bytes());
            x.extend(r.bytes(4));
            x.extend(payload);
            payload = x;
            nh = 44;
        }
        _ => {}
    }
    let w: u32 = 6 << 28 | (r.next() as u32 & 0x0fff_ffff);
    let mut h = w.to_be_bytes().to_vec();
    h.extend((payload.len() as u16).to_be_bytes());
    h.push(nh);
    h.push(r.next() as u8);
    h.extend(r.bytes(32));
    h.extend(payload);
    h
}

fn arp(r: &mut Rng) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4, 0, [1u8, 2, 3, 4][r.below(4) as usize]];
    a.extend(r.bytes(20));
    a
}

fn packet(r: &mut Rng) -> Vec<u8> {
    let mut f = E.to_vec();
    if r.below(5) == 0 {
        f.extend([0x81, 0x00]);
        f.extend((r.next() as u16).to_be_bytes());
    }
    let (ety, mut body): (u16, Vec<u8>) = match r.below(10) {
        0..=3 => (0x0800, ipv4(r)),
        4..=6 => (0x86dd, ipv6(r)),
        7 => (0x0806, arp(r)),
        8 => (0x8035, arp(r)),
        _ => (0x88cc, r.bytes(10)),
    };
    if r.below(12) == 0 {
        // Truncated.
        let keep = r.below(body.len() as u64 + 1) as usize;
        body.truncate(keep);
    }
    f.extend(ety.to_be_bytes());
    f.extend(body);
    f
}

#[test]
fn acl_log_flow_format_is_ovs_flow_format() {
    if !crate::common::require("acl_log_flow_format_is_ovs_flow_format", &["ovs-ofctl"]) {
        return;
    }
    let mut r = Rng(hf_sim::net::Rng::new(2112));
    let packets: Vec<Vec<u8>> = (0..3000).map(|_| packet(&mut r)).collect();
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("p.pcap");
    std::fs::write(&pcap, crate::common::pcap(&packets)).unwrap();
    let out = crate::common::run_ok(Command::new("ovs-ofctl").arg("parse-pcap").arg(&pcap));
    let theirs: Vec<String> = out
        .lines()
        .map(|l| l.replacen("in_port=ANY,", "", 1))
        .collect();
    assert_eq!(theirs.len(), packets.len(), "one line per packet");
    let mut bad = Vec::new();
    for (i, (p, t)) in packets.iter().zip(&theirs).enumerate() {
        let ours = hf_datapath::acl_log::flow_format(p);
        if &ours != t {
            bad.push(format!(
                "packet {i} ({}):\n  ovs:      {t}\n  holdfast: {ours}",
                p.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ));
        }
    }
    eprintln!(
        "acl_log flow format: {} packets, {} differ",
        packets.len(),
        bad.len()
    );
    assert!(
        bad.is_empty(),
        "{} of {} differ:\n{}",
        bad.len(),
        packets.len(),
        bad.iter().take(15).cloned().collect::<Vec<_>>().join("\n")
    );
}
