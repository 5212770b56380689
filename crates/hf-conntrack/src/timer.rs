//! The timer wheel that expires connections, driven by the caller's `now`.
//!
//! One slot per second, 4,096 slots (a lap of about 68 minutes). An entry sits in the slot of
//! the tick its expiry rounds up to. Refreshing an entry only moves its expiry, not the entry: when
//! the wheel reaches the slot it re-files entries whose expiry moved on (or which are a lap or more
//! ahead), and removes the rest. So the per-packet cost of a refresh is one store.

use std::time::Duration;

use crate::table::{Conntrack, L_TIMER, ListHead, NIL, list_push_back, list_unlink, ms};

/// Milliseconds per tick.
pub(crate) const TICK_MS: u64 = 1000;
/// Slots per lap.
pub(crate) const SLOTS: u64 = 4096;
/// `Entry::slot` of an entry that is in no slot list (being processed).
const NO_SLOT: u16 = u16::MAX;

#[derive(Debug)]
pub(crate) struct Wheel {
    slots: Vec<ListHead>,
    /// The next tick to process.
    cursor: u64,
}

impl Wheel {
    pub(crate) fn new() -> Wheel {
        Wheel {
            slots: vec![ListHead::EMPTY; SLOTS as usize],
            cursor: 0,
        }
    }
}

impl Conntrack {
    pub(crate) fn wheel_insert(&mut self, idx: u32, expires: u64) {
        let tick = expires.div_ceil(TICK_MS).max(self.wheel.cursor);
        let slot = (tick % SLOTS) as usize;
        self.entries[idx as usize].slot = slot as u16;
        list_push_back(&mut self.entries, &mut self.wheel.slots[slot], L_TIMER, idx);
    }

    pub(crate) fn wheel_remove(&mut self, idx: u32) {
        let slot = self.entries[idx as usize].slot;
        if slot != NO_SLOT {
            let l = &mut self.wheel.slots[usize::from(slot)];
            list_unlink(&mut self.entries, l, L_TIMER, idx);
        }
    }

    /// Removes every connection whose timeout has passed at `now`; returns how many. Call it when
    /// [`Conntrack::poll_timeout`] says (more often is harmless). `now` must not go backwards.
    /// Packets never see an expired connection either way: a lookup that finds one treats it as
    /// gone.
    pub fn handle_timeout(&mut self, now: Duration) -> usize {
        let now = ms(now);
        let now_tick = now / TICK_MS;
        if now_tick < self.wheel.cursor {
            return 0;
        }
        let start = self.wheel.cursor;
        let span = (now_tick - start + 1).min(SLOTS);
        let mut expired = 0;
        for t in start..start + span {
            let s = (t % SLOTS) as usize;
            let list = std::mem::replace(&mut self.wheel.slots[s], ListHead::EMPTY);
            let mut i = list.head;
            while i != NIL {
                let e = &mut self.entries[i as usize];
                let next = e.links[L_TIMER][1];
                e.links[L_TIMER] = [NIL, NIL];
                e.slot = NO_SLOT;
                if e.expires <= now {
                    self.remove(i);
                    expired += 1;
                } else {
                    let exp = e.expires;
                    self.wheel_insert(i, exp);
                }
                i = next;
            }
        }
        self.wheel.cursor = now_tick + 1;
        self.stats.expired += expired as u64;
        expired
    }

    /// When [`Conntrack::handle_timeout`] next has work: the start of the next unprocessed
    /// second, or `None` when the table is empty.
    pub fn poll_timeout(&self) -> Option<Duration> {
        (self.len > 0).then(|| Duration::from_millis(self.wheel.cursor * TICK_MS))
    }
}

impl Conntrack {
    /// First entry in timer slot `slot` (for invariant checks).
    pub(crate) fn wheel_head(&self, slot: usize) -> u32 {
        self.wheel.slots[slot].head
    }
}
