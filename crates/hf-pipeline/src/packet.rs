//! The packet context: the frame, its parse, and every field a logical flow can read or write,
//! indexed by hf-expr's [`FieldId`](hf_expr::symbols::FieldId) so that matching uses exactly the
//! normaliser's field semantics.
//!
//! Header fields are written through to the frame at once (with incremental checksum updates),
//! so the frame, the [`Parsed`] conntrack reads and the field array never disagree.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hf_expr::constant::width_mask;
use hf_expr::symbols::FIELDS;
use hf_wire::{EthAddr, NatRewrite, Parsed, checksum_adjust, ip_proto};

/// Number of field slots: one per hf-expr field.
pub(crate) const NF: usize = 45;

/// Per slot, the bits a field holds (a width of 0, a port slot, holds a 32-bit key): computed
/// once so that a write does not look the width up and build the mask every time.
const WIDTH_MASKS: [u128; NF] = {
    let mut m = [0u128; NF];
    let mut i = 0;
    while i < NF {
        let width = if i < FIELDS.len() { FIELDS[i].width } else { 0 };
        m[i] = if width == 0 {
            u32::MAX as u128
        } else if width >= 128 {
            u128::MAX
        } else {
            (1u128 << width) - 1
        };
        i += 1;
    }
    m
};

/// Field slots (hf-expr's `FIELDS` order; `tests::slots_match_hf_expr` checks them).
#[allow(dead_code)] // the full map: some slots are named for readers and tests only
pub(crate) mod slot {
    pub const INPORT: usize = 0;
    pub const OUTPORT: usize = 1;
    pub const XXREG0: usize = 2;
    pub const XXREG1: usize = 3;
    pub const XREG4: usize = 4;
    pub const FLAGS: usize = 5;
    pub const ETH_SRC: usize = 7;
    pub const ETH_DST: usize = 8;
    pub const ETH_TYPE: usize = 9;
    pub const VLAN_TCI: usize = 10;
    pub const IP_PROTO: usize = 11;
    pub const IP_DSCP: usize = 12;
    pub const IP_ECN: usize = 13;
    pub const IP_TTL: usize = 14;
    pub const IP_FRAG: usize = 15;
    pub const IP4_SRC: usize = 16;
    pub const IP4_DST: usize = 17;
    pub const IP6_SRC: usize = 18;
    pub const IP6_DST: usize = 19;
    pub const IP6_LABEL: usize = 20;
    pub const ARP_OP: usize = 21;
    pub const ARP_SPA: usize = 22;
    pub const ARP_TPA: usize = 23;
    pub const ARP_SHA: usize = 24;
    pub const ARP_THA: usize = 25;
    pub const TCP_SRC: usize = 26;
    pub const TCP_DST: usize = 27;
    pub const TCP_FLAGS: usize = 28;
    pub const UDP_SRC: usize = 29;
    pub const UDP_DST: usize = 30;
    pub const SCTP_SRC: usize = 31;
    pub const SCTP_DST: usize = 32;
    pub const ICMP4_TYPE: usize = 33;
    pub const ICMP4_CODE: usize = 34;
    pub const ICMP6_TYPE: usize = 35;
    pub const ICMP6_CODE: usize = 36;
    pub const ND_TARGET: usize = 37;
    pub const ND_SLL: usize = 38;
    pub const ND_TLL: usize = 39;
    pub const CT_MARK: usize = 40;
    pub const CT_LABEL: usize = 41;
    pub const CT_STATE: usize = 42;
    /// `icmp4.frag_mtu` and `icmp6.frag_mtu`: written into the ICMP header, never matched.
    pub const ICMP4_FRAG_MTU: usize = 43;
    pub const ICMP6_FRAG_MTU: usize = 44;
    /// First and last slot read from packet headers.
    pub const HEADER_FIRST: usize = ETH_SRC;
    pub const HEADER_LAST: usize = ND_TLL;
}

/// A bit range of a field: what an action reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Bits {
    pub field: u8,
    pub lo: u8,
    pub width: u8,
}

impl Bits {
    /// The mask of these bits within the field.
    pub(crate) fn mask(self) -> u128 {
        let w = if self.width == 0 {
            128
        } else {
            u32::from(self.width)
        };
        width_mask(w).checked_shl(u32::from(self.lo)).unwrap_or(0)
    }
}

/// The per-packet state: frame, parse and field values.
///
/// The frame is the caller's received frame, unchanged, until something writes to it: only then
/// is it copied into `frame` (`owned`; see `Runner::own_frame`). A packet that is forwarded as
/// it came (most of them) is parsed in place and copied once, into the output.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    /// The field slots. Write them through [`Ctx::set`], [`Ctx::write_masked`] and the other
    /// methods here, which keep `dirty`; a direct write may only store zero.
    pub f: [u128; NF],
    /// Bit `i` set when `f[i]` may be nonzero (clear means zero): [`Ctx::load`] zeroes only
    /// these slots (those the last run wrote and the new headers do not overwrite) instead of
    /// all 45 of them.
    pub dirty: u64,
    pub parsed: Parsed,
    /// The current frame when `owned`; stale otherwise (the received frame is current).
    pub frame: Vec<u8>,
    /// Whether `frame` holds the current frame.
    pub owned: bool,
    /// The original-direction tuple of the connection the last conntrack action found
    /// (`ct_nw_dst`, `ct_tp_dst`, ...), for `ct_snat_to_vip`.
    pub ct_orig: Option<hf_conntrack::Tuple>,
}

/// Whether a write to slot `field` may change the frame (header slots and the ICMP MTUs).
#[inline(always)]
pub(crate) fn in_frame(field: usize) -> bool {
    (slot::HEADER_FIRST..=slot::HEADER_LAST).contains(&field) || field >= slot::ICMP4_FRAG_MTU
}

/// The bit of slot `i` in [`Ctx::dirty`].
#[inline(always)]
const fn bit(i: usize) -> u64 {
    1 << i
}

// One bit per slot in [`Ctx::dirty`].
const _: () = assert!(NF <= 64);

/// The header slots' bits in [`Ctx::dirty`].
const HEADERS: u64 = (bit(slot::HEADER_LAST + 1) - 1) & !(bit(slot::HEADER_FIRST) - 1);

/// Writes the header slots of `k` (over whatever they held) and returns the mask of the slots
/// it wrote, in [`Ctx::dirty`]'s form. Every header slot it does not write is left alone: the
/// caller zeroes those that may be nonzero.
#[inline(always)]
fn set_headers(f: &mut [u128; NF], k: &hf_wire::FlowKey) -> u64 {
    use slot::*;
    let mut w = bit(ETH_SRC) | bit(ETH_DST) | bit(ETH_TYPE) | bit(VLAN_TCI);
    f[ETH_SRC] = mac(k.eth_src);
    f[ETH_DST] = mac(k.eth_dst);
    f[ETH_TYPE] = u128::from(k.eth_type);
    f[VLAN_TCI] = u128::from(k.vlan_tci);
    let ip = k.is_ipv4() || k.is_ipv6();
    if ip {
        f[IP_PROTO] = u128::from(k.ip_proto);
        f[IP_DSCP] = u128::from(k.ip_tos >> 2);
        f[IP_ECN] = u128::from(k.ip_tos & 3);
        f[IP_TTL] = u128::from(k.ip_ttl);
        f[IP_FRAG] = u128::from(k.ip_frag);
        w |= bit(IP_PROTO) | bit(IP_DSCP) | bit(IP_ECN) | bit(IP_TTL) | bit(IP_FRAG);
    }
    if k.is_ipv4() {
        f[IP4_SRC] = u128::from(u32::from(k.ip4_src));
        f[IP4_DST] = u128::from(u32::from(k.ip4_dst));
        w |= bit(IP4_SRC) | bit(IP4_DST);
    }
    if k.is_ipv6() {
        w |= bit(IP6_SRC) | bit(IP6_DST) | bit(IP6_LABEL) | bit(ND_TARGET);
        w |= bit(ND_SLL) | bit(ND_TLL);
        f[IP6_SRC] = u128::from(k.ip6_src);
        f[IP6_DST] = u128::from(k.ip6_dst);
        f[IP6_LABEL] = u128::from(k.ip6_label);
        f[ND_TARGET] = u128::from(k.nd_target);
        f[ND_SLL] = mac(k.nd_sll);
        f[ND_TLL] = mac(k.nd_tll);
    }
    if matches!(k.eth_type, 0x0806 | 0x8035) {
        w |= bit(ARP_OP) | bit(ARP_SPA) | bit(ARP_TPA) | bit(ARP_SHA) | bit(ARP_THA);
        f[ARP_OP] = u128::from(k.arp_op);
        f[ARP_SPA] = u128::from(u32::from(k.arp_spa));
        f[ARP_TPA] = u128::from(u32::from(k.arp_tpa));
        f[ARP_SHA] = mac(k.arp_sha);
        f[ARP_THA] = mac(k.arp_tha);
    }
    if ip {
        let (s, d) = (u128::from(k.tp_src), u128::from(k.tp_dst));
        match k.ip_proto {
            ip_proto::TCP => {
                f[TCP_SRC] = s;
                f[TCP_DST] = d;
                f[TCP_FLAGS] = u128::from(k.tcp_flags);
                w |= bit(TCP_SRC) | bit(TCP_DST) | bit(TCP_FLAGS);
            }
            ip_proto::UDP => {
                f[UDP_SRC] = s;
                f[UDP_DST] = d;
                w |= bit(UDP_SRC) | bit(UDP_DST);
            }
            ip_proto::SCTP => {
                f[SCTP_SRC] = s;
                f[SCTP_DST] = d;
                w |= bit(SCTP_SRC) | bit(SCTP_DST);
            }
            ip_proto::ICMP if k.is_ipv4() => {
                f[ICMP4_TYPE] = u128::from(k.icmp_type);
                f[ICMP4_CODE] = u128::from(k.icmp_code);
                w |= bit(ICMP4_TYPE) | bit(ICMP4_CODE);
            }
            ip_proto::ICMPV6 if k.is_ipv6() => {
                f[ICMP6_TYPE] = u128::from(k.icmp_type);
                f[ICMP6_CODE] = u128::from(k.icmp_code);
                w |= bit(ICMP6_TYPE) | bit(ICMP6_CODE);
            }
            _ => {}
        }
    }
    w
}

#[inline(always)]
fn mac(e: EthAddr) -> u128 {
    let b = e.0;
    u128::from(u64::from_be_bytes([
        0, 0, b[0], b[1], b[2], b[3], b[4], b[5],
    ]))
}

fn to_mac(v: u128) -> [u8; 6] {
    let b = (v as u64).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

impl Ctx {
    pub(crate) fn new() -> Ctx {
        Ctx {
            f: [0; NF],
            dirty: 0,
            parsed: Parsed {
                key: hf_wire::FlowKey::default(),
                layout: hf_wire::Layout::default(),
                tcp: hf_wire::TcpSegment::default(),
                icmp_id: 0,
                inner: None,
            },
            frame: Vec::new(),
            owned: false,
            ct_orig: None,
        }
    }

    /// Resets every field and loads the headers of `self.parsed` (the parse is already in
    /// place: the received frame was parsed into the context, and is the current frame until
    /// written).
    pub(crate) fn load(&mut self) {
        debug_assert!(self.dirty_covers(), "a nonzero slot without its dirty bit");
        self.owned = false;
        self.ct_orig = None;
        let w = set_headers(&mut self.f, &self.parsed.key);
        // What the last run left that the new headers did not overwrite (the slots are
        // disjoint from `w`, so the order does not matter). The metadata before the headers
        // and the slots after them are a few inline stores each when any of them is dirty
        // (a run nearly always writes some); a header slot only when the last packet had a
        // header this one has not (a loop, but rarely entered).
        let stale = self.dirty & !w;
        if stale & (bit(slot::HEADER_FIRST) - 1) != 0 {
            self.f[..slot::HEADER_FIRST].fill(0);
        }
        if stale & !(bit(slot::HEADER_LAST + 1) - 1) != 0 {
            self.f[slot::HEADER_LAST + 1..].fill(0);
        }
        let mut z = stale & HEADERS;
        while z != 0 {
            let i = z.trailing_zeros() as usize;
            if let Some(v) = self.f.get_mut(i) {
                *v = 0;
            }
            z &= z - 1;
        }
        self.dirty = w;
    }

    /// Writes `v` into slot `i` whole (no width mask, no write-through to the frame): for
    /// metadata slots such as the ports.
    #[inline(always)]
    pub(crate) fn set(&mut self, i: usize, v: u128) {
        if let Some(s) = self.f.get_mut(i) {
            *s = v;
            self.dirty |= bit(i);
        }
    }

    /// Whether every nonzero slot has its `dirty` bit (the invariant [`Ctx::load`] relies on).
    pub(crate) fn dirty_covers(&self) -> bool {
        self.f
            .iter()
            .enumerate()
            .all(|(i, v)| *v == 0 || self.dirty & bit(i) != 0)
    }

    /// Copies the received frame `input` into `frame` before the first write to it (see
    /// `owned`); nothing when the frame is already the context's own.
    pub(crate) fn own(&mut self, input: &[u8]) {
        if !self.owned {
            self.frame.clear();
            self.frame.extend_from_slice(input);
            self.owned = true;
        }
    }

    /// Loads a recirculating conntrack action's result: `ct_state`, `ct_mark`, `ct_label`,
    /// the connection's original direction, and its NAT rewrite of the frame (which must be
    /// owned when the rewrite is not empty).
    pub(crate) fn load_ct(&mut self, r: &hf_conntrack::CtResult) {
        self.f[slot::CT_STATE] = u128::from(r.state.0);
        self.f[slot::CT_MARK] = u128::from(r.mark);
        self.f[slot::CT_LABEL] = r.label;
        self.dirty |= bit(slot::CT_STATE) | bit(slot::CT_MARK) | bit(slot::CT_LABEL);
        self.ct_orig = r.orig;
        self.rewrite(&r.rewrite);
    }

    /// (Re)loads the header slots from `self.parsed`, leaving metadata alone.
    pub(crate) fn load_headers(&mut self) {
        self.f[slot::HEADER_FIRST..=slot::HEADER_LAST].fill(0);
        self.dirty &= !HEADERS;
        self.dirty |= set_headers(&mut self.f, &self.parsed.key);
    }
    /// Reads `b`'s bits, shifted down.
    pub(crate) fn read(&self, b: Bits) -> u128 {
        let v = self.f.get(usize::from(b.field)).copied().unwrap_or(0);
        (v & b.mask()) >> b.lo
    }

    /// Writes `value` (unshifted) into `b`'s bits and through to the frame.
    #[inline]
    pub(crate) fn write(&mut self, b: Bits, value: u128) {
        let m = b.mask();
        let v = value.checked_shl(u32::from(b.lo)).unwrap_or(0) & m;
        self.write_masked(usize::from(b.field), v, m);
    }

    /// `field = (field & !mask) | value` and through to the frame.
    #[inline]
    pub(crate) fn write_masked(&mut self, field: usize, value: u128, mask: u128) {
        let Some(old) = self.f.get(field).copied() else {
            return;
        };
        let wm = WIDTH_MASKS[field];
        let new = ((old & !mask) | (value & mask)) & wm;
        self.f[field] = new;
        self.dirty |= bit(field);
        if new != old && in_frame(field) {
            self.write_header(field, old, new);
        }
    }

    fn write_header(&mut self, field: usize, old: u128, new: u128) {
        use slot::*;
        let l3 = usize::from(self.parsed.layout.l3);
        let l4 = usize::from(self.parsed.layout.l4);
        let v4 = self.parsed.key.is_ipv4();
        let v6 = self.parsed.key.is_ipv6();
        let arp = matches!(self.parsed.key.eth_type, 0x0806 | 0x8035);
        match field {
            ETH_DST => {
                self.put(0, &to_mac(new));
                self.parsed.key.eth_dst = EthAddr(to_mac(new));
            }
            ETH_SRC => {
                self.put(6, &to_mac(new));
                self.parsed.key.eth_src = EthAddr(to_mac(new));
            }
            IP_TTL if v4 => {
                self.put_ip4_byte(l3 + 8, new as u8);
                self.parsed.key.ip_ttl = new as u8;
            }
            IP_TTL if v6 => {
                self.put(l3 + 7, &[new as u8]);
                self.parsed.key.ip_ttl = new as u8;
            }
            IP_DSCP | IP_ECN if v4 => {
                let tos = ((self.f[IP_DSCP] as u8) << 2) | (self.f[IP_ECN] as u8 & 3);
                self.put_ip4_byte(l3 + 1, tos);
                self.parsed.key.ip_tos = tos;
            }
            IP4_SRC | IP4_DST if v4 => {
                let a = IpAddr::V4(Ipv4Addr::from(new as u32));
                let rw = if field == IP4_SRC {
                    NatRewrite {
                        src: Some(a),
                        ..NatRewrite::default()
                    }
                } else {
                    NatRewrite {
                        dst: Some(a),
                        ..NatRewrite::default()
                    }
                };
                self.rewrite(&rw);
            }
            IP6_SRC | IP6_DST if v6 => {
                let a = IpAddr::V6(Ipv6Addr::from(new));
                let rw = if field == IP6_SRC {
                    NatRewrite {
                        src: Some(a),
                        ..NatRewrite::default()
                    }
                } else {
                    NatRewrite {
                        dst: Some(a),
                        ..NatRewrite::default()
                    }
                };
                self.rewrite(&rw);
            }
            TCP_SRC | UDP_SRC | SCTP_SRC if l4 != 0 => {
                self.rewrite(&NatRewrite {
                    sport: Some(new as u16),
                    ..NatRewrite::default()
                });
            }
            TCP_DST | UDP_DST | SCTP_DST if l4 != 0 => {
                self.rewrite(&NatRewrite {
                    dport: Some(new as u16),
                    ..NatRewrite::default()
                });
            }
            ICMP4_TYPE | ICMP6_TYPE | ICMP4_CODE | ICMP6_CODE if l4 != 0 => {
                let at = l4 + usize::from(matches!(field, ICMP4_CODE | ICMP6_CODE));
                if let Some(byte) = self.frame.get(at).copied() {
                    let cs_at = l4 + 2;
                    if let Some(cs) = self.frame.get(cs_at..cs_at + 2) {
                        let cs = u16::from_be_bytes([cs[0], cs[1]]);
                        let (o, n) = if at == l4 {
                            ([byte, self.frame[l4 + 1]], [new as u8, self.frame[l4 + 1]])
                        } else {
                            ([self.frame[l4], byte], [self.frame[l4], new as u8])
                        };
                        let cs = checksum_adjust(cs, &o, &n);
                        self.put(cs_at, &cs.to_be_bytes());
                    }
                    self.put(at, &[new as u8]);
                    if at == l4 {
                        self.parsed.key.icmp_type = new as u8;
                    } else {
                        self.parsed.key.icmp_code = new as u8;
                    }
                }
            }
            ARP_OP if arp => {
                self.put(l3 + 6, &(new as u16).to_be_bytes());
                self.parsed.key.arp_op = new as u16;
            }
            ARP_SHA if arp => {
                self.put(l3 + 8, &to_mac(new));
                self.parsed.key.arp_sha = EthAddr(to_mac(new));
            }
            ARP_SPA if arp => {
                self.put(l3 + 14, &(new as u32).to_be_bytes());
                self.parsed.key.arp_spa = Ipv4Addr::from(new as u32);
            }
            ARP_THA if arp => {
                self.put(l3 + 18, &to_mac(new));
                self.parsed.key.arp_tha = EthAddr(to_mac(new));
            }
            ARP_TPA if arp => {
                self.put(l3 + 24, &(new as u32).to_be_bytes());
                self.parsed.key.arp_tpa = Ipv4Addr::from(new as u32);
            }
            // The MTU of "fragmentation needed" (ICMPv4 3/4: bytes 6-7) and "packet too big"
            // (ICMPv6 2: bytes 4-7), which northd sets inside `icmp4_error`/`icmp6_error`.
            ICMP4_FRAG_MTU | ICMP6_FRAG_MTU if l4 != 0 => {
                let mut bytes = (new as u32).to_be_bytes();
                let (at, n) = if field == ICMP4_FRAG_MTU {
                    bytes[..2].copy_from_slice(&(new as u16).to_be_bytes());
                    (l4 + 6, 2)
                } else {
                    (l4 + 4, 4)
                };
                let icmp = (field == ICMP4_FRAG_MTU && v4 && self.parsed.key.ip_proto == 1)
                    || (field == ICMP6_FRAG_MTU && v6 && self.parsed.key.ip_proto == 58);
                let mut o = [0u8; 4];
                if icmp && let Some(old) = self.frame.get(at..at + n) {
                    o[..n].copy_from_slice(old);
                    let cs_at = l4 + 2;
                    if let Some(cs) = self.frame.get(cs_at..cs_at + 2) {
                        let cs = u16::from_be_bytes([cs[0], cs[1]]);
                        let cs = checksum_adjust(cs, &o[..n], &bytes[..n]);
                        self.put(cs_at, &cs.to_be_bytes());
                    }
                    self.put(at, &bytes[..n]);
                }
            }
            // VLAN, ND options and flow labels are matched but not rewritten in the frame.
            _ => {
                let _ = old;
            }
        }
    }

    fn put(&mut self, at: usize, bytes: &[u8]) {
        debug_assert!(self.owned, "a frame write before the frame was copied");
        if let Some(dst) = self.frame.get_mut(at..at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
    }

    /// Writes one byte of an IPv4 header and updates its checksum.
    fn put_ip4_byte(&mut self, at: usize, new: u8) {
        let l3 = usize::from(self.parsed.layout.l3);
        let even = at & !1;
        let (Some(w), Some(cs)) = (
            self.frame.get(even..even + 2),
            self.frame.get(l3 + 10..l3 + 12),
        ) else {
            return;
        };
        let old = [w[0], w[1]];
        let mut neww = old;
        neww[at - even] = new;
        let cs = checksum_adjust(u16::from_be_bytes([cs[0], cs[1]]), &old, &neww);
        self.put(even, &neww);
        self.put(l3 + 10, &cs.to_be_bytes());
    }

    /// Applies a NAT-style rewrite to frame and parse, then reloads the header slots it touches.
    #[inline(always)]
    pub(crate) fn rewrite(&mut self, rw: &NatRewrite) {
        // The test inline, the work out of line: most conntrack results rewrite nothing.
        if !rw.is_empty() {
            self.rewrite_nonempty(rw);
        }
    }

    #[inline(never)]
    fn rewrite_nonempty(&mut self, rw: &NatRewrite) {
        debug_assert!(self.owned, "a rewrite before the frame was copied");
        if hf_wire::apply_nat(&mut self.frame, &mut self.parsed, rw).is_ok() {
            self.reload_l3_l4();
        }
    }

    fn reload_l3_l4(&mut self) {
        use slot::*;
        let k = self.parsed.key;
        self.dirty |= bit(IP4_SRC) | bit(IP4_DST) | bit(IP6_SRC) | bit(IP6_DST);
        self.dirty |= bit(TCP_SRC) | bit(TCP_DST) | bit(UDP_SRC) | bit(UDP_DST);
        self.dirty |= bit(SCTP_SRC) | bit(SCTP_DST);
        if k.is_ipv4() {
            self.f[IP4_SRC] = u128::from(u32::from(k.ip4_src));
            self.f[IP4_DST] = u128::from(u32::from(k.ip4_dst));
        } else if k.is_ipv6() {
            self.f[IP6_SRC] = u128::from(k.ip6_src);
            self.f[IP6_DST] = u128::from(k.ip6_dst);
        }
        let (s, d) = (u128::from(k.tp_src), u128::from(k.tp_dst));
        match k.ip_proto {
            ip_proto::TCP => (self.f[TCP_SRC], self.f[TCP_DST]) = (s, d),
            ip_proto::UDP => (self.f[UDP_SRC], self.f[UDP_DST]) = (s, d),
            ip_proto::SCTP => (self.f[SCTP_SRC], self.f[SCTP_DST]) = (s, d),
            _ => {}
        }
    }

    /// The IP source and destination, in the packet's family.
    pub(crate) fn ip_pair(&self) -> Option<(IpAddr, IpAddr)> {
        Some((self.parsed.key.ip_src()?, self.parsed.key.ip_dst()?))
    }
}

#[cfg(test)]
mod tests {
    use super::slot::*;
    use super::*;

    /// Loading a packet into a context that ran others (other shapes, registers, conntrack
    /// results, NAT-reloaded headers) gives exactly the fields a fresh context gets: `load`'s
    /// partial zeroing leaves nothing behind.
    #[test]
    fn load_leaves_nothing_of_the_last_packet() {
        use hf_conntrack::fuzzing::{Seg, tcp_frame, udp_frame};
        let (a4, b4) = (
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        );
        let (a6, b6) = (
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
        );
        let frames = [
            udp_frame(a6, 5353, b6, 53),
            tcp_frame(&Seg::new((a4, 1000), (b4, 80), 0x12, (7, 9), 10)),
            udp_frame(a4, 68, b4, 67),
            tcp_frame(&Seg::new((a6, 1000), (b6, 443), 0x02, (1, 0), 0)),
            udp_frame(a6, 5353, b6, 53),
        ];
        let mut ctx = Ctx::new();
        for (n, fr) in frames.iter().cycle().take(12).enumerate() {
            let parsed = hf_wire::parse(fr, 3, 1).expect("test frame parses");
            ctx.parsed = parsed;
            ctx.load();
            let mut fresh = Ctx::new();
            fresh.parsed = parsed;
            fresh.load();
            assert_eq!(
                ctx.f, fresh.f,
                "packet {n}: slots left from the last packet"
            );
            assert!(
                ctx.dirty_covers(),
                "packet {n}: a nonzero slot without its bit"
            );
            // What a run writes: ports, registers, flags, a conntrack result, a header.
            ctx.set(INPORT, 7 + n as u128);
            ctx.set(OUTPORT, 9);
            ctx.write_masked(XXREG0, u128::MAX, u128::MAX);
            ctx.write_masked(XREG4 + n % 2, 0x55, 0xff);
            ctx.write_masked(FLAGS, 1, 1);
            ctx.write_masked(ICMP4_FRAG_MTU, 1400, u128::MAX);
            ctx.load_ct(&hf_conntrack::CtResult {
                state: hf_conntrack::CtState(0x21),
                zone: 1,
                mark: 5,
                label: 1 << 100,
                rewrite: NatRewrite::default(),
                orig: None,
                refused: None,
            });
            ctx.f[CT_LABEL] = 0;
            ctx.write_masked(CT_LABEL, 0xabc, u128::MAX);
            ctx.reload_l3_l4();
            assert!(ctx.dirty_covers(), "packet {n}: a write without its bit");
        }
    }

    #[test]
    fn slots_match_hf_expr() {
        assert_eq!(FIELDS.len(), NF);
        for (s, name) in [
            (INPORT, "inport"),
            (OUTPORT, "outport"),
            (XXREG0, "xxreg0"),
            (XREG4, "xreg4"),
            (FLAGS, "flags"),
            (ETH_SRC, "eth.src"),
            (ETH_TYPE, "eth.type"),
            (IP_TTL, "ip.ttl"),
            (IP_FRAG, "ip.frag"),
            (IP4_DST, "ip4.dst"),
            (IP6_LABEL, "ip6.label"),
            (ARP_THA, "arp.tha"),
            (TCP_FLAGS, "tcp.flags"),
            (SCTP_DST, "sctp.dst"),
            (ICMP6_CODE, "icmp6.code"),
            (ND_TLL, "nd.tll"),
            (CT_MARK, "ct_mark"),
            (CT_LABEL, "ct_label"),
            (CT_STATE, "ct_state"),
        ] {
            assert_eq!(FIELDS[s].name, name);
        }
    }
}
