//! The per-packet path must not allocate: lookups of established connections (both
//! directions, with NAT rewrites), related ICMP errors and invalid packets are counted with a
//! counting global allocator. Commits may allocate (the table grows).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hf_conntrack::fuzzing::{Seg, tcp_frame};
use hf_conntrack::{Config, Conntrack, CtAction, CtState, NatRange, Owner};
use hf_wire::{parse, tcp_flags};

#[global_allocator]
static GLOBAL: hf_wire::fuzzing::CountingAlloc = hf_wire::fuzzing::CountingAlloc;

fn allocs() -> usize {
    hf_wire::fuzzing::allocations()
}

fn seg(
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    flags: u16,
    seq: u32,
    ack: u32,
) -> Vec<u8> {
    tcp_frame(&Seg::new((src, sport), (dst, dport), flags, (seq, ack), 10))
}

#[test]
fn lookups_related_and_invalid_packets_do_not_allocate() {
    let mut ct = Conntrack::new(Config::default());
    let now = Duration::from_secs(1);
    let server: IpAddr = Ipv4Addr::new(203, 0, 113, 1).into();
    let ext: IpAddr = Ipv4Addr::new(198, 51, 100, 1).into();
    let mut hot = Vec::new();
    for i in 0..1_000u16 {
        let client: IpAddr = Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8).into();
        let act = CtAction::commit(Owner(1)).snat(NatRange::addr(ext));
        let syn = parse(
            &seg(client, 1000 + i, server, 80, tcp_flags::SYN, 1, 0),
            0,
            0,
        )
        .expect("ok");
        let r = ct.process(1, &syn, now, &act);
        let port = r.rewrite.sport.unwrap_or(1000 + i);
        let synack = seg(
            server,
            80,
            ext,
            port,
            tcp_flags::SYN | tcp_flags::ACK,
            100,
            2,
        );
        ct.process(1, &parse(&synack, 0, 0).expect("ok"), now, &act.with_nat());
        let ack = seg(client, 1000 + i, server, 80, tcp_flags::ACK, 2, 101);
        let back = seg(server, 80, ext, port, tcp_flags::ACK, 101, 2);
        hot.push(parse(&ack, 0, 0).expect("ok"));
        hot.push(parse(&back, 0, 0).expect("ok"));
    }
    let junk = parse(&seg(server, 1, server, 2, tcp_flags::FIN, 5, 0), 0, 0).expect("ok");
    // An ICMP error from a router about the first connection's translated SYN.
    let sent = seg(ext, 1000, server, 80, tcp_flags::SYN, 1, 0);
    let mut err = Vec::new();
    let router = Ipv4Addr::new(192, 0, 2, 254);
    let sent_p = parse(&sent, 0, 0).expect("ok");
    hf_wire::reply::icmp4_error(&mut err, &sent, &sent_p, router, 3, 1, 0).expect("ip");
    let related = parse(&err, 0, 0).expect("ok");
    let nat = CtAction::lookup().with_nat();
    let before = allocs();
    let mut established = 0;
    for _ in 0..5 {
        for p in &hot {
            let r = ct.process(1, p, now, &nat);
            established += usize::from(r.state.contains(CtState::EST) && !r.rewrite.is_empty());
        }
        let r = ct.process(1, &junk, now, &nat);
        assert!(r.state.contains(CtState::INV));
        let r = ct.process(1, &related, now, &nat);
        assert!(r.state.contains(CtState::REL), "{:?}", r.state);
        ct.peek(1, &hot[0], now, &nat);
    }
    assert_eq!(allocs() - before, 0, "the per-packet path allocated");
    assert_eq!(established, 10_000);
}
