//! Parsing, NAT rewrites and Geneve decapsulation never allocate (a counting global allocator
//! watches them); only the builders write into a caller's `Vec`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};

use hf_wire::geneve::{self, OvnMetadata, PortKeys, TunnelOuter};
use hf_wire::{EthAddr, NatRewrite, apply_nat, ip_proto, parse, reply};

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards every call to `System` unchanged; the thread-local counter is bookkeeping
// (a `const` thread-local `Cell` never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
    let before = ALLOCS.with(Cell::get);
    let mut rewritten = 0;
    for _ in 0..1000 {
        let mut p = parse(&frame, 1, 7).expect("parses");
        apply_nat(&mut frame, &mut p, &rw).expect("rewrites");
        rewritten += usize::from(p.key.tp_src == 2000);
        let d = geneve::decapsulate(&tunnelled).expect("decapsulates");
        assert_eq!(d.meta, meta);
    }
    assert_eq!(
        ALLOCS.with(Cell::get) - before,
        0,
        "the per-packet path allocated"
    );
    assert_eq!(rewritten, 1000);
}
