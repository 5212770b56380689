//! Parsing, NAT rewrites and Geneve decapsulation never allocate (a counting global allocator
//! watches them); only the builders write into a caller's `Vec`.

use std::net::{IpAddr, Ipv4Addr};

use hf_wire::geneve::{self, OvnMetadata, PortKeys, TunnelOuter};
use hf_wire::{EthAddr, NatRewrite, apply_nat, ip_proto, parse, reply};

#[global_allocator]
static GLOBAL: hf_wire::fuzzing::CountingAlloc = hf_wire::fuzzing::CountingAlloc;

#[test]
fn parse_rewrite_and_decapsulate_do_not_allocate() {
    let (a, b): (IpAddr, IpAddr) = (
        Ipv4Addr::new(10, 0, 0, 1).into(),
        Ipv4Addr::new(10, 0, 0, 2).into(),
    );
    // UDP 0x1234 -> 53, length 12, checksum filled in by the builder.
    let udp = [0x12, 0x34, 0x00, 0x35, 0, 12, 0, 0, 1, 2, 3, 4];
    let mut frame = Vec::new();
    reply::ip_packet(
        &mut frame,
        EthAddr([2, 0, 0, 0, 0, 1]),
        EthAddr([2, 0, 0, 0, 0, 2]),
        a,
        b,
        ip_proto::UDP,
        &udp,
    )
    .expect("one family");
    let outer = TunnelOuter {
        eth_src: EthAddr([2, 0, 0, 0, 0, 3]),
        eth_dst: EthAddr([2, 0, 0, 0, 0, 4]),
        src: Ipv4Addr::new(192, 0, 2, 1).into(),
        dst: Ipv4Addr::new(192, 0, 2, 2).into(),
        udp_src: 40000,
        ttl: 64,
    };
    let meta = OvnMetadata {
        datapath: 7,
        ports: Some(PortKeys {
            ingress: 1,
            egress: 2,
        }),
    };
    let mut tunnelled = Vec::new();
    geneve::encapsulate(&mut tunnelled, &outer, &meta, &frame).expect("encapsulates");
    let rw = NatRewrite {
        src: Some(Ipv4Addr::new(198, 51, 100, 1).into()),
        sport: Some(2000),
        ..NatRewrite::default()
    };
    let before = hf_wire::fuzzing::allocations();
    let mut rewritten = 0;
    for _ in 0..1000 {
        let mut p = parse(&frame, 1, 7).expect("parses");
        apply_nat(&mut frame, &mut p, &rw).expect("rewrites");
        rewritten += usize::from(p.key.tp_src == 2000);
        let d = geneve::decapsulate(&tunnelled).expect("decapsulates");
        assert_eq!(d.meta, meta);
    }
    assert_eq!(
        hf_wire::fuzzing::allocations() - before,
        0,
        "the per-packet path allocated"
    );
    assert_eq!(rewritten, 1000);
}
