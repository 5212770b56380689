//! A hand-written program shaped like ovn-northd 23.03's output for one switch (`sw0`, a VM with a
//! stateful ACL), one router (`lr0`, SNAT of 10.0.0.0/24 to 172.16.0.100) and an external switch
//! (`ext`, with a localnet port): a TCP exchange with SNAT both ways, the stateful ACL dropping
//! traffic it never allowed, and trace output that matches what the datapath did.

use std::net::Ipv4Addr;
use std::time::Duration;

use hf_conntrack::{Config, Conntrack, CtState};
use hf_pipeline::example::*;
use hf_pipeline::{Destination, Ingress, Outputs, Pipeline, Program};
use hf_wire::{checksums_valid, parse, tcp_flags};

struct World {
    pipe: Pipeline,
    ct: Conntrack,
    out: Outputs,
    now: Duration,
}

impl World {
    fn new() -> World {
        World {
            pipe: Pipeline::new(Program::compile_strict(&spec()).expect("program compiles")),
            ct: Conntrack::new(Config::default()),
            out: Outputs::default(),
            now: Duration::from_secs(1),
        }
    }

    /// Sends a frame in and returns what came out, checking cached and full-walk agreement is
    /// left to the differential test; here each packet is run through the cache.
    fn send(&mut self, port: u32, f: &[u8]) -> Vec<(Destination, Vec<u8>)> {
        self.now += Duration::from_millis(1);
        if std::env::var("HF_TRACE").is_ok() {
            let t = self.pipe.trace(
                &self.ct,
                Ingress::Local(port),
                f,
                self.now,
                &mut Outputs::default(),
            );
            eprintln!("{}", t.map(|t| t.to_string()).unwrap_or_default());
        }
        self.pipe
            .process(
                &mut self.ct,
                Ingress::Local(port),
                f,
                self.now,
                &mut self.out,
            )
            .expect("frame processed");
        self.out.iter().map(|(d, b)| (d, b.to_vec())).collect()
    }
}

fn only(out: &[(Destination, Vec<u8>)], to: u32) -> hf_wire::Parsed {
    assert_eq!(out.len(), 1, "expected one frame, got {out:?}");
    assert_eq!(out[0].0, Destination::Local(to));
    let p = parse(&out[0].1, 0, 0).expect("output parses");
    assert!(
        checksums_valid(&out[0].1, &p),
        "checksums of the output frame"
    );
    p
}

#[test]
fn tcp_exchange_through_snat_both_ways() {
    let mut w = World::new();
    let vm = |port| (VM_MAC, VM, port);
    let server_in = |p| (SERVER_MAC, SERVER, p);
    // The client's SYN leaves through the localnet port, source-NATed.
    let syn = frame(
        vm(40000),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::SYN,
        (1000, 0),
        0,
    );
    let out = w.send(VM_PORT, &syn);
    let p = only(&out, LOCALNET);
    assert_eq!(p.key.ip4_src, SNAT);
    assert_eq!(p.key.ip4_dst, SERVER);
    assert_eq!(p.key.tp_dst, 80);
    assert_eq!(p.key.eth_src.0, LR_EXT_MAC);
    assert_eq!(p.key.eth_dst.0, SERVER_MAC, "get_arp resolved the next hop");
    assert_eq!(p.key.ip_ttl, 63, "the router decremented the TTL");
    let nat_port = p.key.tp_src;
    assert!(w.ct.zone_count(VM_ZONE) == 1 && w.ct.zone_count(SNAT_ZONE) == 1);

    // The SYN-ACK comes back to the SNAT address and is un-SNATed to the VM.
    let to_snat = (LR_EXT_MAC, SNAT, nat_port);
    let synack = frame(
        server_in(80),
        to_snat,
        tcp_flags::SYN | tcp_flags::ACK,
        (5000, 1001),
        0,
    );
    let out = w.send(LOCALNET, &synack);
    let p = only(&out, VM_PORT);
    assert_eq!((p.key.ip4_dst, p.key.tp_dst), (VM, 40000));
    assert_eq!(p.key.ip4_src, SERVER);
    assert_eq!(p.key.eth_dst.0, VM_MAC);
    assert_eq!(p.key.eth_src.0, LR_IN_MAC);

    // Data and ACKs both ways, then FIN from each side.
    let steps: [(bool, u16, (u32, u32), usize); 6] = [
        (true, tcp_flags::ACK, (1001, 5001), 0),
        (true, tcp_flags::ACK | tcp_flags::PSH, (1001, 5001), 100),
        (false, tcp_flags::ACK, (5001, 1101), 0),
        (false, tcp_flags::ACK | tcp_flags::PSH, (5001, 1101), 200),
        (true, tcp_flags::FIN | tcp_flags::ACK, (1101, 5201), 0),
        (false, tcp_flags::FIN | tcp_flags::ACK, (5201, 1102), 0),
    ];
    for (i, (outbound, flags, sa, len)) in steps.into_iter().enumerate() {
        if outbound {
            let f = frame(vm(40000), (LR_IN_MAC, SERVER, 80), flags, sa, len);
            let p = only(&w.send(VM_PORT, &f), LOCALNET);
            assert_eq!((p.key.ip4_src, p.key.tp_src), (SNAT, nat_port), "step {i}");
            assert_eq!(p.tcp.payload_len as usize, len, "step {i}");
        } else {
            let f = frame(server_in(80), to_snat, flags, sa, len);
            let p = only(&w.send(LOCALNET, &f), VM_PORT);
            assert_eq!((p.key.ip4_dst, p.key.tp_dst), (VM, 40000), "step {i}");
        }
    }
    // The last ACK closes the connection in both zones' state machines.
    let last = frame(
        vm(40000),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::ACK,
        (1102, 5202),
        0,
    );
    only(&w.send(VM_PORT, &last), LOCALNET);
    let conns: Vec<_> = w.ct.connections(w.now).collect();
    assert_eq!(
        conns.len(),
        2,
        "one connection in the VM's zone, one in the SNAT zone"
    );
    // Later packets of the connection were served by the flow cache.
    assert!(w.pipe.cache_len() > 0);
}

#[test]
fn stateful_acl_drops_what_it_never_allowed() {
    let mut w = World::new();
    // A "reply" from the outside to the VM's real address, for a connection the VM never
    // opened: routed by lr0, it reaches the VM's to-lport ACL as ct.new (or invalid) and drops.
    let fake = frame(
        (SERVER_MAC, SERVER, 80),
        (LR_EXT_MAC, VM, 40001),
        tcp_flags::SYN | tcp_flags::ACK,
        (7000, 1),
        0,
    );
    assert!(
        w.send(LOCALNET, &fake).is_empty(),
        "unsolicited reply dropped"
    );
    // A new connection from the outside is dropped as well, and never committed.
    let syn_in = frame(
        (SERVER_MAC, SERVER, 5555),
        (LR_EXT_MAC, VM, 22),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    assert!(
        w.send(LOCALNET, &syn_in).is_empty(),
        "ct.new from outside dropped"
    );
    assert_eq!(
        w.ct.zone_count(VM_ZONE),
        0,
        "nothing committed for dropped traffic"
    );

    // The same kind of packet passes once the VM opened the connection (allow-related): the
    // drop above was the ACL's doing, not a routing accident.
    let syn = frame(
        (VM_MAC, VM, 40001),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    let p = only(&w.send(VM_PORT, &syn), LOCALNET);
    let nat_port = p.key.tp_src;
    let reply = frame(
        (SERVER_MAC, SERVER, 80),
        (LR_EXT_MAC, SNAT, nat_port),
        tcp_flags::SYN | tcp_flags::ACK,
        (7000, 2),
        0,
    );
    only(&w.send(LOCALNET, &reply), VM_PORT);
    // And the trace of the dropped packet names the ACL flow that dropped it.
    let t = w
        .pipe
        .trace(
            &w.ct,
            Ingress::Local(LOCALNET),
            &syn_in,
            w.now,
            &mut Outputs::default(),
        )
        .expect("trace");
    let last = t.records.last().expect("records");
    assert_eq!(
        (last.datapath.as_str(), last.pipeline, last.table),
        ("sw0", "egress", 4)
    );
    assert_eq!(last.flow.as_ref().map(|f| f.priority), Some(1001));
}

#[test]
fn trace_shows_the_walk_without_changing_state() {
    let mut w = World::new();
    let syn = frame(
        (VM_MAC, VM, 40002),
        (LR_IN_MAC, SERVER, 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    let mut out = Outputs::default();
    let t = w
        .pipe
        .trace(&w.ct, Ingress::Local(VM_PORT), &syn, w.now, &mut out)
        .expect("trace");
    assert!(w.ct.is_empty(), "trace committed nothing");
    // The trace's outputs are what processing the packet produces.
    let traced: Vec<_> = out.iter().map(|(d, b)| (d, b.to_vec())).collect();
    assert_eq!(traced, w.send(VM_PORT, &syn));
    let text = t.to_string();
    assert!(
        text.contains("sw0 ingress table 6 priority 100: reg0[0] == 1 => ct_next;"),
        "{text}"
    );
    assert!(text.contains("lr0 egress table 3 priority 153"), "{text}");
    let snat = t
        .records
        .iter()
        .find(|r| r.datapath == "lr0" && r.pipeline == "egress" && r.table == 3)
        .expect("snat stage");
    assert!(
        snat.effects
            .iter()
            .any(|e| e.contains(&format!("{:?}", CtState::TRK | CtState::NEW)))
    );
}

#[test]
fn arp_request_for_an_unknown_next_hop() {
    let mut w = World::new();
    // The VM's route towards an unknown external host: get_arp finds nothing, so the router
    // sends an ARP request for it out of the localnet port instead of the packet.
    let other = Ipv4Addr::new(172, 16, 0, 77);
    let f = frame(
        (VM_MAC, VM, 40003),
        (LR_IN_MAC, other, 80),
        tcp_flags::SYN,
        (1, 0),
        0,
    );
    let out = w.send(VM_PORT, &f);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].0, Destination::Local(LOCALNET));
    let p = parse(&out[0].1, 0, 0).expect("arp parses");
    assert_eq!(p.key.eth_type, 0x0806);
    assert_eq!(p.key.arp_op, 1);
    assert_eq!((p.key.arp_spa, p.key.arp_tpa), (SNAT, other));
    assert_eq!(p.key.eth_dst.0, [0xff; 6]);
}
