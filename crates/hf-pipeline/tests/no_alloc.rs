//! The cached path must not allocate: established TCP packets both ways through the
//! northd-shaped program (switch ACL → router SNAT → external switch), counted with a counting
//! global allocator once the cache and the scratch buffers are warm.

use std::time::Duration;

use hf_conntrack::{Config, Conntrack};
use hf_pipeline::example::*;
use hf_pipeline::{Destination, Ingress, Outputs, Pipeline, Program};
use hf_wire::tcp_flags;

#[global_allocator]
static GLOBAL: hf_wire::fuzzing::CountingAlloc = hf_wire::fuzzing::CountingAlloc;

#[test]
fn established_packets_on_the_cached_path_do_not_allocate() {
    let mut pipe = Pipeline::new(Program::compile_strict(&spec()).expect("compiles"));
    let mut ct = Conntrack::new(Config::default());
    let mut out = Outputs::default();
    let now = Duration::from_secs(1);
    let mut frames = Vec::new();
    for i in 0..50u16 {
        let vm = (VM_MAC, VM, 20_000 + i);
        let gw = (LR_IN_MAC, SERVER, 80);
        let syn = frame(vm, gw, tcp_flags::SYN, (1, 0), 0);
        pipe.process(&mut ct, Ingress::Local(VM_PORT), &syn, now, &mut out)
            .expect("syn");
        let (_, f) = out.iter().next().expect("syn forwarded");
        let nat = (
            LR_EXT_MAC,
            SNAT,
            hf_wire::parse(f, 0, 0).expect("parses").key.tp_src,
        );
        let server = (SERVER_MAC, SERVER, 80);
        let synack = frame(server, nat, tcp_flags::SYN | tcp_flags::ACK, (9, 2), 0);
        pipe.process(&mut ct, Ingress::Local(LOCALNET), &synack, now, &mut out)
            .expect("syn-ack");
        frames.push((VM_PORT, frame(vm, gw, tcp_flags::ACK, (2, 10), 20)));
        frames.push((LOCALNET, frame(server, nat, tcp_flags::ACK, (10, 2), 20)));
    }
    // Warm: every segment cached, buffers at their final size.
    for _ in 0..2 {
        for (port, f) in &frames {
            pipe.process(&mut ct, Ingress::Local(*port), f, now, &mut out)
                .expect("warm");
        }
    }
    let stats0 = pipe.cache_stats();
    let before = hf_wire::fuzzing::allocations();
    let mut delivered = 0;
    let mut segments = 0u64;
    for _ in 0..5 {
        for (port, f) in &frames {
            let r = pipe
                .process(&mut ct, Ingress::Local(*port), f, now, &mut out)
                .expect("cached");
            assert_eq!(r.cache_hits, r.segments, "every segment from the cache");
            segments += u64::from(r.segments);
            delivered += out
                .iter()
                .filter(|(d, _)| matches!(d, Destination::Local(_)))
                .count();
        }
    }
    assert_eq!(delivered, 5 * frames.len());
    assert_eq!(hf_wire::fuzzing::allocations() - before, 0);
    // At most one hashed lookup per packet (its first segment, unless its resume point's hint
    // covers it), probing one hash table (the busiest mask first); every continuation after
    // conntrack found through its op's hint.
    let stats = pipe.cache_stats();
    let runs = 5 * frames.len() as u64;
    let (lookups, chained) = (
        stats.lookups - stats0.lookups,
        stats.chained - stats0.chained,
    );
    assert!(segments > runs, "the traffic recirculates");
    // (Or none: the first segment found through its resume point's hint.)
    assert_eq!(
        lookups + (stats.first_hinted - stats0.first_hinted),
        runs,
        "one hashed lookup or first-segment hint per packet"
    );
    assert_eq!(chained, segments - runs, "every continuation chained");
    assert_eq!(
        stats.probes - stats0.probes,
        lookups,
        "one probe per lookup"
    );
}
