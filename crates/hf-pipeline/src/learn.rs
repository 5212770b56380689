//! State the pipeline learns while forwarding, outside conntrack: the FDB (`put_fdb`,
//! `lookup_fdb`, `get_fdb`), the ECMP next-hop table (`commit_ecmp_nh`, `chk_ecmp_nh`,
//! `chk_ecmp_nh_mac`), LB affinity sessions (`commit_lb_aff`, `chk_lb_aff`) and the
//! `bind_vport` bindings seen (changes become [`crate::Event`]s).
//!
//! Keys use datapath *tunnel keys* and port keys, so the state survives a program swap as
//! OVN's learned flows survive a recompute.
//!
//! Timeouts follow ovn-controller's learn actions: an ECMP entry lives 20 s idle and 30 s at
//! most; an affinity entry lives `timeout` seconds idle. A lookup that finds an entry refreshes
//! its idle time (OpenFlow `learn` flows behave that way). Time is the `now` of each packet.
//!
//! What it does not do: it never expires the FDB (OVN 23.03's FDB has no aging), and it keeps
//! at most [`MAX_ENTRIES`] entries per table (new ones are refused past that; the refusal is
//! counted in [`LearnStats`]).

use std::time::Duration;

use crate::classifier::FastMap;

/// Entries per learned table.
pub const MAX_ENTRIES: usize = 1 << 16;

const ECMP_IDLE: Duration = Duration::from_secs(20);
const ECMP_HARD: Duration = Duration::from_secs(30);

/// Counts of the learned tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LearnStats {
    /// FDB entries.
    pub fdb: usize,
    /// ECMP next-hop entries (both directions).
    pub ecmp: usize,
    /// LB affinity sessions.
    pub lb_affinity: usize,
    /// Entries refused because a table was full.
    pub refused: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct EcmpKey {
    pub dp: u32,
    /// `Some(eth.src)` for the "same direction" table (`chk_ecmp_nh_mac`), `None` for the
    /// reply table (`chk_ecmp_nh`).
    pub mac: Option<u128>,
    pub v6: bool,
    pub src: u128,
    pub dst: u128,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AffKey {
    pub dp: u32,
    pub v6: bool,
    pub client: u128,
    pub vip: u128,
    pub proto: u8,
    pub vip_port: u16,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct AffVal {
    pub backend: u128,
    pub port: u16,
    pub timeout: Duration,
    pub used: Duration,
}

/// The learned state of a [`crate::Pipeline`].
#[derive(Debug, Default)]
pub(crate) struct Learned {
    pub fdb: FastMap<(u32, u128), u32>,
    pub ecmp: FastMap<EcmpKey, (Duration, Duration)>,
    pub aff: FastMap<AffKey, AffVal>,
    /// `bind_vport` bindings seen: (datapath key, vport key) → parent key.
    pub vports: FastMap<(u32, u32), u32>,
    pub refused: u64,
}

pub(crate) fn mac_bytes(v: u128) -> [u8; 6] {
    let b = (v as u64).to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

impl Learned {
    /// Learns `mac` behind `port`; true when that changed the table.
    pub(crate) fn put_fdb(&mut self, dp: u32, mac: u128, port: u32) -> bool {
        if self.fdb.get(&(dp, mac)) == Some(&port) {
            return false;
        }
        if self.fdb.len() >= MAX_ENTRIES && !self.fdb.contains_key(&(dp, mac)) {
            self.refused += 1;
            return false;
        }
        self.fdb.insert((dp, mac), port);
        true
    }

    pub(crate) fn ecmp_commit(&mut self, k: EcmpKey, now: Duration) {
        let full = self.ecmp.len() >= MAX_ENTRIES;
        match self.ecmp.get_mut(&k) {
            Some(e) if now.saturating_sub(e.0) < ECMP_HARD => e.1 = now,
            Some(e) => *e = (now, now),
            None if full => self.refused += 1,
            None => {
                self.ecmp.insert(k, (now, now));
            }
        }
    }

    /// Whether `k` is learned and alive; a hit refreshes it when `touch`.
    pub(crate) fn ecmp_check(&mut self, k: &EcmpKey, now: Duration, touch: bool) -> bool {
        let Some(e) = self.ecmp.get_mut(k) else {
            return false;
        };
        let alive = now.saturating_sub(e.0) < ECMP_HARD && now.saturating_sub(e.1) < ECMP_IDLE;
        if alive && touch {
            e.1 = now;
        }
        alive
    }

    pub(crate) fn aff_commit(&mut self, k: AffKey, v: AffVal) {
        if self.aff.len() >= MAX_ENTRIES && !self.aff.contains_key(&k) {
            self.refused += 1;
            return;
        }
        self.aff.insert(k, v);
    }

    pub(crate) fn aff_check(&mut self, k: &AffKey, now: Duration, touch: bool) -> Option<AffVal> {
        let e = self.aff.get_mut(k)?;
        if now.saturating_sub(e.used) >= e.timeout {
            return None;
        }
        if touch {
            e.used = now;
        }
        Some(*e)
    }

    /// Drops expired ECMP and affinity entries.
    pub(crate) fn expire(&mut self, now: Duration) {
        self.ecmp.retain(|_, e| {
            now.saturating_sub(e.0) < ECMP_HARD && now.saturating_sub(e.1) < ECMP_IDLE
        });
        self.aff
            .retain(|_, e| now.saturating_sub(e.used) < e.timeout);
    }

    pub(crate) fn stats(&self) -> LearnStats {
        LearnStats {
            fdb: self.fdb.len(),
            ecmp: self.ecmp.len(),
            lb_affinity: self.aff.len(),
            refused: self.refused,
        }
    }
}
