//! The connection table: a slab of entries, a hash index over both directions' tuples, the
//! unestablished FIFO used for eviction, per-zone counts, and the per-packet entry point.

use std::hash::BuildHasher;
use std::time::Duration;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use hf_wire::{NatRewrite, Parsed, ip_proto};

use crate::action::{CommitRefused, CtAction, CtResult, CtState};
use crate::config::Config;
use crate::slab::Slab;
use crate::tcp::{TcpConn, TcpState, TcpVerdict};
use crate::timer::Wheel;
use crate::tuple::{Extracted, Tuple, extract};

/// "No entry" in intrusive links.
pub(crate) const NIL: u32 = u32::MAX;
/// Link kinds: the timer-wheel slot list and the unestablished FIFO.
pub(crate) const L_TIMER: usize = 0;
pub(crate) const L_UNEST: usize = 1;

/// Entry flags.
pub(crate) const F_LIVE: u8 = 0x01;
pub(crate) const F_SEEN_REPLY: u8 = 0x02;
pub(crate) const F_ASSURED: u8 = 0x04;
pub(crate) const F_SNAT: u8 = 0x08;
pub(crate) const F_DNAT: u8 = 0x10;
pub(crate) const F_CLAIM: u8 = 0x20;
/// The reply tuple is the original's inverse (no translation): one index slot serves both.
pub(crate) const F_SHARED: u8 = 0x40;

/// One connection, laid out for the hit path: three cache lines, aligned to a line, with what a
/// packet in the original direction reads in the first two (the tuple it is compared with,
/// flags, expiry and mark in the first; label and TCP state in the second) and the reply tuple
/// and the intrusive links after them. The benchmark's budget is 256 bytes of heap per
/// connection (192 here plus the index slot).
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub(crate) struct Entry {
    // Line 0.
    pub orig: Tuple,
    pub flags: u8,
    /// The timer-wheel slot the entry is linked into.
    pub slot: u16,
    pub mark: u32,
    /// Absolute expiry in milliseconds of the caller's clock.
    pub expires: u64,
    pub owner: u32,
    // Line 1.
    pub label: [u64; 2],
    pub tcp: TcpConn,
    // Line 2 (the reply tuple's first bytes end line 1).
    pub reply: Tuple,
    /// `[kind][prev, next]`.
    pub links: [[u32; 2]; 2],
}

// The layout the comment above promises.
const _: () = {
    assert!(std::mem::size_of::<Entry>() == 192);
    assert!(std::mem::offset_of!(Entry, expires) + 8 <= 64);
    assert!(std::mem::offset_of!(Entry, owner) + 4 <= 64);
    assert!(std::mem::offset_of!(Entry, label) >= 64);
    assert!(std::mem::offset_of!(Entry, tcp) + std::mem::size_of::<TcpConn>() <= 128);
};

impl Entry {
    pub fn live(&self) -> bool {
        self.flags & F_LIVE != 0
    }

    pub fn label(&self) -> u128 {
        u128::from(self.label[0]) | u128::from(self.label[1]) << 64
    }

    pub fn set_label(&mut self, v: u128) {
        self.label = [v as u64, (v >> 64) as u64];
    }

    pub fn tuple(&self, dir: usize) -> &Tuple {
        if dir == 0 { &self.orig } else { &self.reply }
    }
}

/// Head and tail of an intrusive list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListHead {
    pub head: u32,
    pub tail: u32,
}

impl ListHead {
    pub const EMPTY: ListHead = ListHead {
        head: NIL,
        tail: NIL,
    };
}

pub(crate) fn list_push_back(entries: &mut Slab, l: &mut ListHead, kind: usize, i: u32) {
    entries[i as usize].links[kind] = [l.tail, NIL];
    if l.tail == NIL {
        l.head = i;
    } else {
        entries[l.tail as usize].links[kind][1] = i;
    }
    l.tail = i;
}

pub(crate) fn list_unlink(entries: &mut Slab, l: &mut ListHead, kind: usize, i: u32) {
    let [prev, next] = entries[i as usize].links[kind];
    if prev == NIL {
        l.head = next;
    } else {
        entries[prev as usize].links[kind][1] = next;
    }
    if next == NIL {
        l.tail = prev;
    } else {
        entries[next as usize].links[kind][0] = prev;
    }
    entries[i as usize].links[kind] = [NIL, NIL];
}

/// Counters for observability.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections created by commits and imports.
    pub created: u64,
    /// Connections removed by expiry.
    pub expired: u64,
    /// Unestablished connections evicted at the global cap.
    pub evicted: u64,
    /// Commits refused (limits, NAT exhaustion, tuple conflicts).
    pub refused: u64,
    /// Packets that got `inv`.
    pub invalid: u64,
}

/// A userspace connection tracker with zones and NAT. See the crate documentation for the call
/// contract.
#[derive(Debug)]
pub struct Conntrack {
    pub(crate) cfg: Config,
    pub(crate) entries: Slab,
    pub(crate) free: Vec<u32>,
    /// Tuple index: `(hash32 << 32) | (slot << 1) | direction`. Keeping the hash in the value
    /// means growing the table never reads the slab.
    pub(crate) index: HashTable<u64>,
    /// SNAT claims: reply tuples with the zone zeroed, so an external address/port/peer is handed
    /// to at most one connection across all zones.
    pub(crate) claims: HashTable<u64>,
    pub(crate) hasher: DefaultHashBuilder,
    pub(crate) len: usize,
    pub(crate) zone_counts: Vec<u32>,
    /// Connections with SNAT or DNAT, per zone. In a zone without any, a new connection's
    /// reply tuple (the inverse of a tuple nobody owns) cannot be taken, so its lookup is skipped.
    pub(crate) nat_zone_counts: Vec<u32>,
    pub(crate) zone_limits: HashMap<u16, u32>,
    pub(crate) unest: ListHead,
    pub(crate) wheel: Wheel,
    pub(crate) stats: Stats,
    pub(crate) tmo: TimeoutTable,
}

/// What the read-only phase decided; the write phase carries it out.
#[derive(Debug)]
enum Plan {
    /// Nothing to change: the result is final.
    Done(CtResult),
    /// An existing connection; `tcp` is its new TCP state when it changed.
    Hit {
        idx: u32,
        dir: usize,
        tcp: Option<TcpConn>,
    },
    /// An ICMP error related to an existing connection.
    Related { idx: u32, dir: usize },
    /// Create a connection (commit on a miss).
    Create(Create),
}

#[derive(Debug)]
struct Create {
    orig: Tuple,
    reply: Tuple,
    /// The tuples' hashes, computed while looking them up.
    hashes: (u32, u32),
    nat_flags: u8,
    tcp: Option<TcpConn>,
    /// An expired or reopened entry with the same tuple, to remove first.
    stale: Option<u32>,
    /// The unestablished entry to evict at the global cap.
    victim: Option<u32>,
}

/// A 32-bit hash as the 64 bits hashbrown wants: its low bits pick the bucket and its top seven
/// the control byte, both taken from the 32 bits (independent up to 2^25 buckets).
#[inline]
pub(crate) fn spread(h: u32) -> u64 {
    u64::from(h) << 32 | u64::from(h)
}

pub(crate) fn ms(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(d.subsec_millis()))
}

/// Timeouts in milliseconds, indexed as [`timeout_of`] does: TCP states by number, then UDP unreplied,
/// UDP replied, ICMP, other.
pub(crate) type TimeoutTable = [u64; 14];

fn timeout_table(t: &crate::config::Timeouts) -> TimeoutTable {
    let mut out = [0; 14];
    for (i, slot) in out.iter_mut().enumerate().take(10) {
        if let Some(s) = TcpState::from_u8(i as u8) {
            *slot = ms(t.tcp(s));
        }
    }
    out[10] = ms(t.udp_unreplied);
    out[11] = ms(t.udp_replied);
    out[12] = ms(t.icmp);
    out[13] = ms(t.generic);
    out
}

impl Conntrack {
    /// An empty table.
    pub fn new(cfg: Config) -> Conntrack {
        Conntrack {
            tmo: timeout_table(&cfg.timeouts),
            cfg,
            entries: Slab::default(),
            free: Vec::new(),
            index: HashTable::new(),
            claims: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            len: 0,
            zone_counts: vec![0; 1 << 16],
            nat_zone_counts: vec![0; 1 << 16],
            zone_limits: HashMap::new(),
            unest: ListHead::EMPTY,
            wheel: Wheel::new(),
            stats: Stats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Number of connections (including expired ones not yet collected by
    /// [`Conntrack::handle_timeout`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no connections.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Connections in `zone`.
    pub fn zone_count(&self, zone: u16) -> u32 {
        self.zone_counts[usize::from(zone)]
    }

    /// Sets (or with `None` clears) `zone`'s connection limit. Existing connections stay; new
    /// commits in the zone are refused while it is at its limit.
    pub fn set_zone_limit(&mut self, zone: u16, limit: Option<u32>) {
        match limit {
            Some(l) => {
                self.zone_limits.insert(zone, l);
            }
            None => {
                self.zone_limits.remove(&zone);
            }
        }
    }

    /// `zone`'s effective limit.
    pub fn zone_limit(&self, zone: u16) -> Option<u32> {
        if self.zone_limits.is_empty() {
            return self.cfg.default_zone_limit;
        }
        self.zone_limits
            .get(&zone)
            .copied()
            .or(self.cfg.default_zone_limit)
    }

    /// The hash of `t`'s direction-independent form (the smaller of `t` and its inverse), so a
    /// connection without translation needs one index slot for both directions.
    #[inline]
    pub(crate) fn hash(&self, t: &Tuple) -> u32 {
        use std::hash::Hasher;
        // The same bytes `Tuple::hash` feeds for the smaller of `t` and its inverse, fed without
        // building the inverse.
        let (src, dst, sport, dport) = if t.le_inverse() {
            (t.src, t.dst, t.sport, t.dport)
        } else if t.is_icmp() {
            (t.dst, t.src, t.sport, t.dport)
        } else {
            (t.dst, t.src, t.dport, t.sport)
        };
        let mut h = self.hasher.build_hasher();
        h.write_u128(u128::from_ne_bytes(src));
        h.write_u128(u128::from_ne_bytes(dst));
        h.write_u64(
            u64::from(sport)
                | u64::from(dport) << 16
                | u64::from(t.zone) << 32
                | u64::from(t.proto) << 48
                | u64::from(t.v6) << 56,
        );
        (h.finish() >> 32) as u32
    }

    pub(crate) fn claim_hash(&self, t: &Tuple) -> u32 {
        self.hash(&Tuple { zone: 0, ..*t })
    }

    /// Finds the entry owning `t`: its index and direction.
    pub(crate) fn find(&self, t: &Tuple) -> Option<(u32, usize)> {
        self.find_h(t, self.hash(t))
    }

    /// [`Conntrack::find`] with the tuple's hash already computed.
    #[inline]
    pub(crate) fn find_h(&self, t: &Tuple, h: u32) -> Option<(u32, usize)> {
        let entries = &self.entries;
        // The direction is decided by the compare that found the entry (not by comparing the
        // tuple with the entry's again).
        let mut dir = 0;
        let owns = |v: &u64| {
            let e = &entries[(*v as u32 >> 1) as usize];
            if (*v >> 32) as u32 != h {
                return false;
            }
            let d = (*v & 1) as usize;
            if e.tuple(d) == t {
                dir = d;
                true
            } else if e.flags & F_SHARED != 0 && e.reply == *t {
                dir = 1;
                true
            } else {
                false
            }
        };
        let idx = self.index.find(spread(h), owns).map(|&v| v as u32 >> 1)?;
        Some((idx, dir))
    }

    /// The connection claiming `t` as its SNAT reply tuple, in any zone.
    pub(crate) fn claimer(&self, t: &Tuple) -> Option<u32> {
        if self.claims.is_empty() {
            return None;
        }
        let entries = &self.entries;
        let key = Tuple { zone: 0, ..*t };
        let h = self.claim_hash(t);
        let same = |v: &u64| {
            let reply = entries[*v as u32 as usize].reply;
            (*v >> 32) as u32 == h && Tuple { zone: 0, ..reply } == key
        };
        self.claims.find(spread(h), same).map(|&v| v as u32)
    }

    pub(crate) fn claimed(&self, t: &Tuple) -> bool {
        self.claimer(t).is_some()
    }

    /// The per-packet entry point: runs `pkt` through conntrack in `zone` as OVS's `ct()` action
    /// does and says what the pipeline should see and rewrite. Never allocates on the hit path;
    /// a commit may grow the table.
    pub fn process(&mut self, zone: u16, pkt: &Parsed, now: Duration, act: &CtAction) -> CtResult {
        let now = ms(now);
        // The hit's result is built once, in place of the return value (an `Option<CtResult>`
        // coming back from the hot path was built, then copied out: ~130 bytes per packet).
        if let Some((idx, dir)) = self.tcp_hit(zone, pkt, now) {
            return self.execute_hit(idx, dir, None, now, act);
        }
        self.process_planned(zone, pkt, now, act)
    }

    /// [`Conntrack::process`] without its TCP hot path (`now` in milliseconds): every packet
    /// planned, then the plan executed. The reference the hot path is tested against.
    #[inline(always)]
    fn process_planned(&mut self, zone: u16, pkt: &Parsed, now: u64, act: &CtAction) -> CtResult {
        match self.plan(zone, pkt, now, act) {
            Plan::Done(r) => {
                if r.state.contains(CtState::INV) {
                    self.stats.invalid += 1;
                }
                if r.refused.is_some() {
                    self.stats.refused += 1;
                }
                r
            }
            Plan::Hit { idx, dir, tcp } => self.execute_hit(idx, dir, tcp, now, act),
            Plan::Related { idx, dir } => self.result(idx, dir, act, true),
            Plan::Create(c) => self.execute_create(zone, c, now, act),
        }
    }

    /// The hot path of [`Conntrack::process`]: a TCP segment of a live connection that its
    /// state machine accepts, updated in place (the plan's copy of the connection, updated and
    /// moved back, stalled on store forwarding). Anything else (no entry, expired, a segment
    /// the state machine ignores, refuses or that reopens the connection, a LAND packet) is
    /// `None` with the entry as it was, and [`Conntrack::process`] plans it as before, to the
    /// same result. A hit is the (entry, direction) whose TCP state was updated; the caller
    /// executes the rest of the hit.
    #[inline(always)]
    fn tcp_hit(&mut self, zone: u16, p: &Parsed, now: u64) -> Option<(u32, usize)> {
        let Extracted::Own { tuple, .. } = extract(zone, p) else {
            return None;
        };
        if tuple.proto != ip_proto::TCP
            || (u128::from_ne_bytes(tuple.src) == u128::from_ne_bytes(tuple.dst)
                && tuple.sport == tuple.dport)
        {
            return None;
        }
        let (idx, dir) = self.find_h(&tuple, self.hash(&tuple))?;
        let liberal = self.cfg.tcp_liberal;
        let e = &mut self.entries[idx as usize];
        if e.expires <= now {
            return None;
        }
        let saved = e.tcp;
        if matches!(
            e.tcp.update(dir, &p.tcp, p.key.tcp_flags, liberal),
            TcpVerdict::Valid
        ) {
            return Some((idx, dir));
        }
        e.tcp = saved;
        None
    }

    /// What [`Conntrack::process`] would return, without changing anything (for `trace`).
    /// A commit that would evict or replace an entry reports the new connection as created.
    pub fn peek(&self, zone: u16, pkt: &Parsed, now: Duration, act: &CtAction) -> CtResult {
        let now = ms(now);
        match self.plan(zone, pkt, now, act) {
            Plan::Done(r) => r,
            Plan::Hit { idx, dir, .. } => {
                let mut r = self.result(idx, dir, act, false);
                if act.commit {
                    let e = &self.entries[idx as usize];
                    r.mark = act.mark.map_or(e.mark, |m| m.apply(e.mark));
                    r.label = act.label.map_or(e.label(), |m| m.apply(e.label()));
                }
                r
            }
            Plan::Related { idx, dir } => self.result(idx, dir, act, true),
            Plan::Create(c) => {
                let flags = c.nat_flags;
                new_result(zone, &c.orig, &c.reply, flags, act)
            }
        }
    }

    #[inline(always)]
    fn plan(&self, zone: u16, p: &Parsed, now: u64, act: &CtAction) -> Plan {
        let invalid = Plan::Done(CtResult::untracked(zone, CtState::TRK | CtState::INV));
        let (tuple, query_reply) = match extract(zone, p) {
            Extracted::Invalid => return invalid,
            Extracted::Related(t) => {
                return match self.find(&t) {
                    Some((idx, dir)) if self.entries[idx as usize].expires > now => {
                        Plan::Related { idx, dir }
                    }
                    _ => invalid,
                };
            }
            Extracted::Own { tuple, query_reply } => (tuple, query_reply),
        };
        // `tuple == tuple.invert()` without building the inverted tuple (the hot path).
        if u128::from_ne_bytes(tuple.src) == u128::from_ne_bytes(tuple.dst)
            && (tuple.is_icmp() || tuple.sport == tuple.dport)
        {
            // Source and destination are the same endpoint (a LAND packet): both directions would
            // be one tuple, so no connection can describe it.
            return invalid;
        }
        let is_tcp = tuple.proto == ip_proto::TCP;
        let flags = p.key.tcp_flags;
        let mut stale = None;
        let h_orig = self.hash(&tuple);
        if let Some((idx, dir)) = self.find_h(&tuple, h_orig) {
            let e = &self.entries[idx as usize];
            if e.expires <= now {
                stale = Some(idx);
            } else if !is_tcp {
                return Plan::Hit {
                    idx,
                    dir,
                    tcp: None,
                };
            } else {
                let mut c = e.tcp;
                match c.update(dir, &p.tcp, flags, self.cfg.tcp_liberal) {
                    TcpVerdict::Valid => {
                        return Plan::Hit {
                            idx,
                            dir,
                            tcp: Some(c),
                        };
                    }
                    TcpVerdict::Ignored => {
                        return Plan::Hit {
                            idx,
                            dir,
                            tcp: None,
                        };
                    }
                    TcpVerdict::Invalid => {
                        let mut r = self.result(idx, dir, &CtAction::default(), false);
                        r.state = CtState::TRK | CtState::INV;
                        return Plan::Done(r);
                    }
                    TcpVerdict::Reopen => stale = Some(idx),
                }
            }
        }
        // A miss: is this a packet that may start a connection?
        let tcp = if is_tcp {
            match TcpConn::new(&p.tcp, flags) {
                Some(mut c) => match c.update(0, &p.tcp, flags, true) {
                    TcpVerdict::Valid => Some(c),
                    _ => return invalid,
                },
                None => return invalid,
            }
        } else {
            None
        };
        if query_reply {
            return invalid;
        }
        let new = Plan::Done(CtResult::untracked(zone, CtState::TRK | CtState::NEW));
        if !act.commit {
            return new;
        }
        let refuse = |why| {
            let mut r = CtResult::untracked(zone, CtState::TRK | CtState::NEW);
            r.refused = Some(why);
            Plan::Done(r)
        };
        let stale_here = stale.map_or(0, |s| u32::from(self.entries[s as usize].orig.zone == zone));
        if let Some(limit) = self.zone_limit(zone)
            && self.zone_count(zone) - stale_here >= limit
        {
            return refuse(CommitRefused::ZoneLimit);
        }
        let mut victim = None;
        if self.len - usize::from(stale.is_some()) >= self.cfg.max_connections {
            let mut v = self.unest.head;
            if Some(v) == stale && v != NIL {
                v = self.entries[v as usize].links[L_UNEST][1];
            }
            if v == NIL {
                return refuse(CommitRefused::TableFull);
            }
            victim = Some(v);
        }
        let (reply, nat_flags, h_reply) = match self.alloc_reply(&tuple, act.nat.as_ref(), stale) {
            Ok(x) => x,
            Err(why) => return refuse(why),
        };
        Plan::Create(Create {
            orig: tuple,
            reply,
            hashes: (h_orig, h_reply),
            nat_flags,
            tcp,
            stale,
            victim,
        })
    }

    #[inline(always)]
    fn execute_hit(
        &mut self,
        idx: u32,
        dir: usize,
        tcp: Option<TcpConn>,
        now: u64,
        act: &CtAction,
    ) -> CtResult {
        let tmo = &self.tmo;
        let e = &mut self.entries[idx as usize];
        if dir == 1 {
            e.flags |= F_SEEN_REPLY;
        }
        if let Some(c) = tcp {
            e.tcp = c;
        }
        let assured = e.flags & F_SEEN_REPLY != 0
            && (e.orig.proto != ip_proto::TCP || e.tcp.state == TcpState::Established);
        if act.commit {
            if let Some(m) = act.mark {
                e.mark = m.apply(e.mark);
            }
            if let Some(l) = act.label {
                let v = l.apply(e.label());
                e.set_label(v);
            }
        }
        e.expires = now.saturating_add(timeout_of(e, tmo));
        if assured && e.flags & F_ASSURED == 0 {
            e.flags |= F_ASSURED;
            list_unlink(&mut self.entries, &mut self.unest, L_UNEST, idx);
        }
        self.result(idx, dir, act, false)
    }

    fn execute_create(&mut self, zone: u16, c: Create, now: u64, act: &CtAction) -> CtResult {
        if let Some(s) = c.stale {
            self.remove(s);
        }
        if let Some(v) = c.victim {
            self.remove(v);
            self.stats.evicted += 1;
        }
        let mut e = Entry {
            orig: c.orig,
            reply: c.reply,
            label: [0; 2],
            expires: 0,
            tcp: c.tcp.unwrap_or(TcpConn {
                state: TcpState::None,
                peers: Default::default(),
            }),
            mark: act.mark.map_or(0, |m| m.apply(0)),
            owner: act.owner.0,
            links: [[NIL; 2]; 2],
            slot: 0,
            flags: F_LIVE | c.nat_flags,
        };
        e.set_label(act.label.map_or(0, |m| m.apply(0)));
        e.expires = now.saturating_add(timeout_of(&e, &self.tmo));
        self.insert_hashed(e, c.hashes);
        self.stats.created += 1;
        new_result(zone, &c.orig, &c.reply, c.nat_flags, act)
    }

    /// Links a new entry into every structure. The caller has checked limits and tuples.
    pub(crate) fn insert(&mut self, e: Entry) -> u32 {
        let hashes = (self.hash(&e.orig), self.hash(&e.reply));
        self.insert_hashed(e, hashes)
    }

    /// [`Conntrack::insert`] with the tuples' hashes already computed.
    fn insert_hashed(&mut self, mut e: Entry, (h0, h1): (u32, u32)) -> u32 {
        let claim = e.flags & F_SNAT != 0;
        let nat = e.flags & (F_SNAT | F_DNAT) != 0;
        let shared = e.reply == e.orig.invert();
        if shared {
            e.flags |= F_SHARED;
        }
        if claim {
            e.flags |= F_CLAIM;
        }
        let ch = self.claim_hash(&e.reply);
        let zone = usize::from(e.orig.zone);
        let assured = e.flags & F_ASSURED != 0;
        let expires = e.expires;
        let idx = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = e;
                i
            }
            None => {
                self.entries.push(e);
                (self.entries.len() - 1) as u32
            }
        };
        let rehash = |v: &u64| spread((*v >> 32) as u32);
        let val = |h: u32, low: u32| u64::from(h) << 32 | u64::from(low);
        self.index
            .insert_unique(spread(h0), val(h0, idx << 1), rehash);
        if !shared {
            self.index
                .insert_unique(spread(h1), val(h1, (idx << 1) | 1), rehash);
        }
        if claim {
            self.claims.insert_unique(spread(ch), val(ch, idx), rehash);
        }
        self.zone_counts[zone] += 1;
        if nat {
            self.nat_zone_counts[zone] += 1;
        }
        self.len += 1;
        if !assured {
            list_push_back(&mut self.entries, &mut self.unest, L_UNEST, idx);
        }
        self.wheel_insert(idx, expires);
        idx
    }

    /// Unlinks and frees entry `idx`.
    pub(crate) fn remove(&mut self, idx: u32) {
        let i = idx as usize;
        if !self.entries[i].live() {
            return;
        }
        let (orig, reply) = (self.entries[i].orig, self.entries[i].reply);
        let h0 = self.hash(&orig);
        if let Ok(o) = self.index.find_entry(spread(h0), |&v| v as u32 == idx << 1) {
            o.remove();
        }
        if self.entries[i].flags & F_SHARED == 0 {
            let h1 = self.hash(&reply);
            let slot = (idx << 1) | 1;
            if let Ok(o) = self.index.find_entry(spread(h1), |&v| v as u32 == slot) {
                o.remove();
            }
        }
        if self.entries[i].flags & F_CLAIM != 0 {
            let ch = self.claim_hash(&reply);
            if let Ok(o) = self.claims.find_entry(spread(ch), |&v| v as u32 == idx) {
                o.remove();
            }
        }
        if self.entries[i].flags & F_ASSURED == 0 {
            list_unlink(&mut self.entries, &mut self.unest, L_UNEST, idx);
        }
        self.wheel_remove(idx);
        self.zone_counts[usize::from(orig.zone)] -= 1;
        if self.entries[i].flags & (F_SNAT | F_DNAT) != 0 {
            self.nat_zone_counts[usize::from(orig.zone)] -= 1;
        }
        self.len -= 1;
        self.entries[i].flags = 0;
        self.free.push(idx);
    }

    /// The result for a packet of an existing connection in direction `dir`.
    #[inline(always)]
    fn result(&self, idx: u32, dir: usize, act: &CtAction, related: bool) -> CtResult {
        let e = &self.entries[idx as usize];
        let mut state = CtState::TRK;
        if related {
            state = state | CtState::REL;
        } else if dir == 1 || e.flags & F_SEEN_REPLY != 0 {
            state = state | CtState::EST;
        } else {
            state = state | CtState::NEW;
        }
        if dir == 1 {
            state = state | CtState::RPL;
        }
        let nat = act.nat.is_some() && e.flags & (F_SNAT | F_DNAT) != 0;
        if nat {
            state = state | nat_bits(e.flags, dir);
        }
        // Built in place, the rewrite filled in afterwards: a rewrite built on the stack first
        // was copied in with loads narrower than its stores, and stalled.
        let mut r = CtResult {
            state,
            zone: e.orig.zone,
            mark: e.mark,
            label: e.label(),
            rewrite: NatRewrite::default(),
            orig: Some(e.orig),
            refused: None,
        };
        if nat {
            r.rewrite = if related {
                crate::nat::related_rewrite(e, dir)
            } else {
                crate::nat::rewrite(e, dir)
            };
        }
        r
    }
}

/// `snat`/`dnat` bits for a packet in direction `dir` of a connection with NAT `flags`: the bit
/// names the header the rewrite changes (so a reply of an SNAT connection gets `dnat`, as in OVS).
fn nat_bits(flags: u8, dir: usize) -> CtState {
    let (s, d) = (flags & F_SNAT != 0, flags & F_DNAT != 0);
    let (s, d) = if dir == 0 { (s, d) } else { (d, s) };
    let mut b = CtState(0);
    if s {
        b = b | CtState::SNAT;
    }
    if d {
        b = b | CtState::DNAT;
    }
    b
}

fn new_result(zone: u16, orig: &Tuple, reply: &Tuple, nat_flags: u8, act: &CtAction) -> CtResult {
    let mut state = CtState::TRK | CtState::NEW;
    let mut rewrite = NatRewrite::default();
    if act.nat.is_some() && nat_flags & (F_SNAT | F_DNAT) != 0 {
        state = state | nat_bits(nat_flags, 0);
        rewrite = crate::nat::rewrite_tuples(orig, reply, 0);
    }
    CtResult {
        state,
        zone,
        mark: act.mark.map_or(0, |m| m.apply(0)),
        label: act.label.map_or(0, |m| m.apply(0)),
        rewrite,
        orig: Some(*orig),
        refused: None,
    }
}

pub(crate) fn timeout_of(e: &Entry, t: &TimeoutTable) -> u64 {
    let slot = match e.orig.proto {
        ip_proto::TCP => e.tcp.state as usize,
        ip_proto::UDP if e.flags & F_SEEN_REPLY != 0 => 11,
        ip_proto::UDP => 10,
        ip_proto::ICMP | ip_proto::ICMPV6 => 12,
        _ => 13,
    };
    t[slot]
}

#[cfg(test)]
mod hot_path_tests {
    use super::*;
    use crate::fuzzing::{Seg, tcp_frame};
    use std::net::IpAddr;

    /// Random TCP segments (seeded; random flags, sequence and acknowledgement numbers,
    /// windows, both directions, a few connections, some starting mid-stream) through
    /// `process` (with its in-place hot path) and through the planned path alone: the same
    /// result for every segment and the same connections at the end. Half-open connections
    /// receive segments the state machine refuses after learning from them: the hot path must
    /// leave such a connection as it was.
    #[test]
    fn the_tcp_hot_path_equals_the_planned_path() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let flags = [
            0x02, 0x12, 0x10, 0x18, 0x11, 0x04, 0x14, 0x01, 0x00, 0x03, 0x10, 0x18,
        ];
        let act = CtAction {
            commit: true,
            ..CtAction::default()
        };
        for liberal in [false, true] {
            let cfg = Config {
                tcp_liberal: liberal,
                ..Config::default()
            };
            let mut hot = Conntrack::new(cfg.clone());
            let mut planned = Conntrack::new(cfg);
            let mut now = 0u64;
            let mut seqs = [[1000u32, 5000u32]; 4];
            let mut hot_hits = 0;
            for step in 0..20_000 {
                now += next() % 50;
                let c = (next() % 4) as usize;
                let dir = (next() % 2) as usize;
                let (src, dst) = if dir == 0 { (a, b) } else { (b, a) };
                let (sport, dport) = if dir == 0 {
                    (40_000 + c as u16, 80)
                } else {
                    (80, 40_000 + c as u16)
                };
                let f = flags[(next() % flags.len() as u64) as usize];
                // Mostly plausible numbers (in the window), sometimes anything.
                let wild = next() % 8 == 0;
                let seq = if wild { next() as u32 } else { seqs[c][dir] };
                let ack = if wild {
                    next() as u32
                } else {
                    seqs[c][1 - dir]
                };
                let payload = (next() % 3) as usize * 100;
                if !wild {
                    seqs[c][dir] = seq.wrapping_add(payload as u32 + u32::from(f & 0x03 != 0));
                }
                let mut s = Seg::new((src, sport), (dst, dport), f, (seq, ack), payload);
                s.win = (next() % 4) as u16 * 20_000;
                let frame = tcp_frame(&s);
                let Ok(p) = hf_wire::parse(&frame, 0, 0) else {
                    continue;
                };
                let before = hot.stats.invalid;
                let r1 = hot.process(1, &p, Duration::from_millis(now), &act);
                let r2 = planned.process_planned(1, &p, now, &act);
                assert_eq!(r1, r2, "step {step}: {s:?}");
                assert_eq!(
                    hot.stats.invalid - before,
                    u64::from(r1.state.contains(CtState::INV))
                );
                if r1.state.contains(CtState::EST) {
                    hot_hits += 1;
                }
            }
            let t = Duration::from_millis(now);
            let c1: Vec<_> = hot.connections(t).collect();
            let c2: Vec<_> = planned.connections(t).collect();
            assert_eq!(c1, c2);
            assert!(hot_hits > 1000, "{hot_hits}");
        }
    }
}
