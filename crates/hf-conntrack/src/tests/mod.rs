//! hf-conntrack's tests, one module per concern. Helpers build real frames with `hf-wire`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use hf_wire::{Parsed, parse, tcp_flags};

use crate::fuzzing::{Seg, icmp_echo, tcp_frame, udp_frame};
use crate::*;

mod lifecycle;
mod nat;
mod props;
mod tcp;

pub(crate) const SYN: u16 = tcp_flags::SYN;
pub(crate) const ACK: u16 = tcp_flags::ACK;
pub(crate) const FIN: u16 = tcp_flags::FIN;
pub(crate) const RST: u16 = tcp_flags::RST;

pub(crate) fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    Ipv4Addr::new(a, b, c, d).into()
}

pub(crate) fn v6(last: u16) -> IpAddr {
    Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, last).into()
}

pub(crate) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(crate) fn parsed(frame: &[u8]) -> Parsed {
    parse(frame, 0, 0).expect("test frames parse")
}

/// One TCP endpoint pair with sequence numbers, for writing exchanges tersely.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tcp {
    pub a: IpAddr,
    pub ap: u16,
    pub b: IpAddr,
    pub bp: u16,
    /// Next sequence number of each side.
    pub seq: [u32; 2],
}

impl Tcp {
    pub fn new(a: IpAddr, ap: u16, b: IpAddr, bp: u16) -> Tcp {
        Tcp {
            a,
            ap,
            b,
            bp,
            seq: [1_000, 500_000],
        }
    }

    /// A segment from side `from` (0 = a, 1 = b) with `len` payload bytes; advances its
    /// sequence number and acknowledges everything the other side sent.
    pub fn seg(&mut self, from: usize, flags: u16, len: usize) -> Vec<u8> {
        let (src, sport, dst, dport) = if from == 0 {
            (self.a, self.ap, self.b, self.bp)
        } else {
            (self.b, self.bp, self.a, self.ap)
        };
        let seq = self.seq[from];
        let ack = if flags & ACK != 0 {
            self.seq[1 - from]
        } else {
            0
        };
        let adv = len as u32 + u32::from(flags & (SYN | FIN) != 0);
        self.seq[from] = seq.wrapping_add(adv);
        tcp_frame(&Seg::new(
            (src, sport),
            (dst, dport),
            flags,
            (seq, ack),
            len,
        ))
    }

    pub fn tuple(&self, zone: u16) -> Tuple {
        Tuple::new(zone, 6, self.a, self.ap, self.b, self.bp)
    }
}

pub(crate) fn udp(src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> Parsed {
    parsed(&udp_frame(src, sport, dst, dport))
}

pub(crate) fn echo(src: IpAddr, dst: IpAddr, id: u16, reply: bool) -> Parsed {
    parsed(&icmp_echo(src, dst, id, reply))
}

pub(crate) fn commit() -> CtAction {
    CtAction::commit(Owner(1))
}

/// Runs `frame` through zone `zone` and checks the table's invariants afterwards.
pub(crate) fn run(
    ct: &mut Conntrack,
    zone: u16,
    frame: &[u8],
    now: Duration,
    act: &CtAction,
) -> CtResult {
    let r = ct.process(zone, &parsed(frame), now, act);
    crate::fuzzing::check_invariants(ct).expect("invariants hold");
    r
}

#[test]
fn fuzz_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/conntrack");
    let entries = std::fs::read_dir(&dir).expect("the conntrack corpus is committed");
    let mut n = 0;
    for e in entries {
        let path = e.expect("dir entry").path();
        crate::fuzzing::conntrack(&std::fs::read(&path).expect("corpus file"));
        n += 1;
    }
    assert!(n > 0, "empty corpus at {}", dir.display());
}

#[test]
fn an_entry_fits_the_memory_budget() {
    // bytes_per_entry's goal is 256: one slab entry plus one to three 8-byte index slots at the
    // index's load factor (at most 3 × 8 / 0.875, about 28 bytes). The entry is three cache lines
    // (see `Entry`); growing it past 192 bytes needs a new look at that budget.
    let size = std::mem::size_of::<crate::table::Entry>();
    assert!(size <= 192, "Entry is {size} bytes");
    assert_eq!(
        std::mem::align_of::<crate::table::Entry>(),
        64,
        "Entry is line-aligned"
    );
}
