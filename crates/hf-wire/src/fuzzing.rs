//! Entry points shared by the fuzz targets (`fuzz/fuzz_targets/wire.rs`) and the corpus-replay
//! test, so CI runs exactly what the fuzzer runs. Not part of the stable API.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{EthAddr, NatRewrite, apply_nat, geneve, parse, reply};

/// Feeds `data` through every entry point that takes untrusted bytes: parsing, NAT rewrites
/// (checked to keep the parse stable), reply builders and Geneve decapsulation. Panics only on a
/// bug: an invariant that does not hold.
pub fn wire(data: &[u8]) {
    let _ = geneve::decapsulate(data);
    let Ok(mut p) = parse(data, 1, 2) else {
        return;
    };
    let mut out = Vec::new();
    let _ = reply::arp_reply(&mut out, &p.key, EthAddr([2, 0, 0, 0, 0, 1]));
    let _ = reply::echo_reply(&mut out, data, &p);
    let _ = reply::nd_na(&mut out, &p.key, EthAddr([2, 0, 0, 0, 0, 1]), true);
    let _ = reply::icmp4_error(&mut out, data, &p, Ipv4Addr::new(10, 0, 0, 1), 3, 3, 0);
    let _ = reply::tcp_reset(&mut out, &p);
    let _ = reply::icmp6_error(&mut out, data, &p, Ipv6Addr::LOCALHOST, 1, 4, 0);
    packet_in(data, &p);
    let v6 = p.key.is_ipv6();
    let (a, b): (IpAddr, IpAddr) = if v6 {
        (
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 9).into(),
            Ipv6Addr::LOCALHOST.into(),
        )
    } else {
        (
            Ipv4Addr::new(192, 0, 2, 9).into(),
            Ipv4Addr::new(198, 51, 100, 7).into(),
        )
    };
    let inner_v6 = p.inner.is_some_and(|i| i.src.is_ipv6());
    let inner_addr: IpAddr = if inner_v6 {
        b
    } else {
        Ipv4Addr::new(203, 0, 113, 5).into()
    };
    let rw = NatRewrite {
        src: Some(a),
        dst: Some(b),
        sport: Some(4242),
        dport: Some(80),
        inner_src: p.inner.map(|_| inner_addr),
        inner_dport: p.inner.filter(|i| i.l4 != 0).map(|_| 4242),
        ..NatRewrite::default()
    };
    for rw in [
        rw,
        NatRewrite {
            src: Some(a),
            ..NatRewrite::default()
        },
    ] {
        let mut frame = data.to_vec();
        let mut q = p;
        if apply_nat(&mut frame, &mut q, &rw).is_ok() {
            // A rewritten frame parses to the rewritten key.
            let again = parse(&frame, 1, 2).expect("a rewritten frame parses");
            assert_eq!(again.key, q.key, "rewrite and re-parse disagree");
        }
    }
    let mut frame = data.to_vec();
    let _ = apply_nat(&mut frame, &mut p, &NatRewrite::default());
}

thread_local! {
    static ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A global allocator that counts allocations per thread, for tests that prove a path does
/// not allocate (`#[global_allocator] static A: CountingAlloc = CountingAlloc;`).
#[derive(Debug)]
pub struct CountingAlloc;

// SAFETY: every call is forwarded to `System` unchanged; the thread-local counter is only
// bookkeeping (a `const` thread-local `Cell` never allocates).
unsafe impl std::alloc::GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's layout is passed through.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from `System.alloc` with `layout`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

/// Allocations made by this thread through [`CountingAlloc`] so far.
pub fn allocations() -> usize {
    ALLOCATIONS.with(std::cell::Cell::get)
}

/// The packet-in builders: whatever they build must parse again (the pipeline continues with
/// it); a refusal writes nothing.
fn packet_in(data: &[u8], p: &crate::Parsed) {
    use crate::dhcp::{Arg, Dhcp4Opts, Dhcp6Opt, Dhcp6Opts};
    let n = |v: u128| {
        vec![Arg::Num {
            value: v,
            prefix: None,
        }]
    };
    let Ok(o4) = Dhcp4Opts::encode(&[
        ("offerip".into(), n(0x0a00_000b)),
        ("router".into(), n(0x0a00_0001)),
        ("lease_time".into(), n(3600)),
    ]) else {
        panic!("fixed DHCPv4 options encode");
    };
    let o6 = Dhcp6Opts {
        opts: vec![
            Dhcp6Opt::ServerId([0, 0, 0, 0, 0xff, 1]),
            Dhcp6Opt::IaAddr(Ipv6Addr::LOCALHOST),
            Dhcp6Opt::DomainSearch(b"\x03ovn\x03org\x00".to_vec()),
        ],
    };
    let ra = crate::ra::RaOpts::encode(&[("mtu".into(), n(1450))]).unwrap_or_default();
    let check = |out: &mut Vec<u8>, ok: bool| {
        if ok {
            assert!(parse(out, 1, 2).is_ok(), "a packet-in reply does not parse");
        } else {
            assert!(out.is_empty(), "a refused packet-in request wrote bytes");
        }
        out.clear();
    };
    let mut out = Vec::new();
    let ok = crate::dhcp::reply4(&mut out, data, p, &o4).is_ok();
    check(&mut out, ok);
    let ok = crate::dhcp::reply6(&mut out, data, p, &o6).is_ok();
    check(&mut out, ok);
    let ok = crate::dns::answer(&mut out, data, p, "10.0.0.1 fd00::1").is_ok();
    check(&mut out, ok);
    let ok = crate::ra::reply(&mut out, data, p, &ra).is_ok();
    check(&mut out, ok);
}
