//! Versioned export and import of connections (state handoff to a new datapath process, live
//! migration to another chassis), and read-only views of connections.
//!
//! An export is plain serde data with an explicit [`CtExport::version`]; the caller picks the
//! encoding. Expiry travels as time remaining, so the two sides' clocks need not agree. Import
//! checks the version, can remap zones (the destination's zone for a logical name may differ),
//! replaces connections with the same tuples (the newer state wins: a final delta after a
//! pre-copy), ignores zone limits (handed-over connections must not be lost) but respects the
//! global cap by evicting unestablished connections.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::action::Owner;
use crate::table::{
    Conntrack, Entry, F_ASSURED, F_DNAT, F_LIVE, F_SEEN_REPLY, F_SNAT, NIL, TimeoutTable, ms,
    timeout_of,
};
use crate::tcp::{TcpConn, TcpPeer, TcpState};
use crate::tuple::Tuple;

/// The export format's version. Bump it on any change to [`CtExport`] or what it contains.
pub const EXPORT_VERSION: u32 = 1;

/// A set of exported connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CtExport {
    /// Must equal [`EXPORT_VERSION`] to import.
    pub version: u32,
    /// The connections.
    pub conns: Vec<ConnState>,
}

/// TCP tracking state of an exported connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpExport {
    /// The state.
    pub state: TcpState,
    /// Window tracking, `[original, reply]`.
    pub peers: [TcpPeer; 2],
}

/// One connection, as exported and as shown by [`Conntrack::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnState {
    /// Original-direction tuple (its zone is the connection's zone).
    pub orig: Tuple,
    /// Reply-direction tuple (differs from `orig.invert()` under NAT).
    pub reply: Tuple,
    /// `ct_mark`.
    pub mark: u32,
    /// `ct_label`.
    pub label: u128,
    /// Who committed it.
    pub owner: Owner,
    /// Milliseconds until it expires.
    pub expires_in_ms: u64,
    /// A reply was seen.
    pub seen_reply: bool,
    /// Established (TCP handshake done, or a reply seen): not evicted at the cap.
    pub assured: bool,
    /// Source NAT.
    pub snat: bool,
    /// Destination NAT.
    pub dnat: bool,
    /// TCP state (TCP only).
    pub tcp: Option<TcpExport>,
}

/// Which connections to export.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Every connection.
    pub all: bool,
    /// Every connection in these zones (a migrating port's own zone).
    pub zones: Vec<u16>,
    /// Connections in a zone whose tuples involve an address (router SNAT/DNAT entries of a
    /// migrating port's addresses), as `(zone, address)`.
    pub addresses: Vec<(u16, IpAddr)>,
    /// Only connections a packet or commit touched at or after this time (the final delta of a
    /// migration after its pre-copy). Removals are not reported: a connection that ended since
    /// stays on the receiving side until it times out there.
    pub touched_since: Option<Duration>,
}

impl Selection {
    /// Everything.
    pub fn everything() -> Selection {
        Selection {
            all: true,
            ..Selection::default()
        }
    }

    /// Adds a whole zone.
    #[must_use]
    pub fn zone(mut self, zone: u16) -> Selection {
        self.zones.push(zone);
        self
    }

    /// Adds the connections in `zone` that involve `addr` in either direction.
    #[must_use]
    pub fn address(mut self, zone: u16, addr: IpAddr) -> Selection {
        self.addresses.push((zone, addr));
        self
    }

    /// Adds the condition that a connection was touched at or after `t`.
    #[must_use]
    pub fn touched_since(mut self, t: Duration) -> Selection {
        self.touched_since = Some(t);
        self
    }

    fn matches(&self, e: &Entry, tmo: &TimeoutTable) -> bool {
        // Every touch sets `expires = now + timeout(state)`, so the last touch is recoverable
        // without storing it.
        if let Some(t) = self.touched_since
            && e.expires.saturating_sub(timeout_of(e, tmo)) < ms(t)
        {
            return false;
        }
        let z = e.orig.zone;
        self.all
            || self.zones.contains(&z)
            || self
                .addresses
                .iter()
                .any(|&(az, a)| az == z && (e.orig.involves(a) || e.reply.involves(a)))
    }
}

/// What an import does with a connection already in the table that holds one of an imported
/// connection's tuples (or its SNAT claim).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ImportPolicy {
    /// The imported state wins over whatever holds its tuples (a process handoff: the table
    /// is the old process's).
    #[default]
    Replace,
    /// Live migration: an entry for the *same* connection (the same original and reply
    /// tuples) is replaced by the newer state (a delta after the pre-copy), but a different
    /// connection of the destination that holds one of the tuples or the SNAT claim is kept, and
    /// the imported one is refused as a [`ImportReport::collided`]: a NAT allocation that moves
    /// never takes over one the destination already handed out.
    SameConnection,
}

/// Why an import was refused as a whole.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The export was written by an incompatible version.
    #[error("export version {found} is not {expected}")]
    Version {
        /// The version in the export.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Connections added.
    pub imported: usize,
    /// Existing connections replaced because they shared a tuple or SNAT claim.
    pub replaced: usize,
    /// Entries skipped as inconsistent (mismatched tuples, missing TCP state).
    pub malformed: usize,
    /// Entries skipped because the table was full of established connections.
    pub refused: usize,
    /// Entries skipped because another connection of this table holds one of their tuples or
    /// their SNAT claim ([`ImportPolicy::SameConnection`]).
    pub collided: usize,
}

fn conn_state(e: &Entry, now: u64) -> ConnState {
    ConnState {
        orig: e.orig,
        reply: e.reply,
        mark: e.mark,
        label: e.label(),
        owner: Owner(e.owner),
        expires_in_ms: e.expires.saturating_sub(now),
        seen_reply: e.flags & F_SEEN_REPLY != 0,
        assured: e.flags & F_ASSURED != 0,
        snat: e.flags & F_SNAT != 0,
        dnat: e.flags & F_DNAT != 0,
        tcp: (e.orig.proto == hf_wire::ip_proto::TCP).then_some(TcpExport {
            state: e.tcp.state,
            peers: e.tcp.peers,
        }),
    }
}

impl CtExport {
    /// The index of the first connection an import would skip as malformed (mismatched
    /// tuples, missing TCP state), if any: a caller that must import all or nothing checks it
    /// first.
    pub fn first_malformed(&self) -> Option<usize> {
        self.conns.iter().position(|c| !well_formed(c))
    }
}

fn well_formed(c: &ConnState) -> bool {
    let (o, r) = (&c.orig, &c.reply);
    o.zone == r.zone
        && o != r
        && o.proto == r.proto
        && o.v6 == r.v6
        && (o.proto == hf_wire::ip_proto::TCP) == c.tcp.is_some()
        && c.tcp.is_none_or(|t| t.peers.iter().all(|p| p.scale <= 14))
}

impl Conntrack {
    /// The connection owning tuple `t` (either direction), if live at `now`.
    pub fn get(&self, t: &Tuple, now: Duration) -> Option<ConnState> {
        let now = ms(now);
        let (idx, _) = self.find(t)?;
        let e = &self.entries[idx as usize];
        (e.expires > now).then(|| conn_state(e, now))
    }

    /// Every connection live at `now`, in table order (deterministic for a given history).
    pub fn connections(&self, now: Duration) -> impl Iterator<Item = ConnState> + '_ {
        let now = ms(now);
        self.entries
            .iter()
            .filter(move |e| e.live() && e.expires > now)
            .map(move |e| conn_state(e, now))
    }

    /// Whether a connection other than (`orig`, `reply`) holds one of those tuples (or, for an
    /// SNAT connection, the claim on `reply`).
    fn held_by_other(&self, orig: &Tuple, reply: &Tuple, snat: bool) -> bool {
        let other = |idx: u32| {
            let e = &self.entries[idx as usize];
            !(e.orig == *orig && e.reply == *reply)
        };
        [orig, reply]
            .into_iter()
            .any(|t| self.find(t).is_some_and(|(idx, _)| other(idx)))
            || (snat && self.claimer(reply).is_some_and(other))
    }

    /// Removes the connection owning tuple `t` (either direction); whether there was one. What
    /// a migration source does with the connections it handed over, once the port is gone.
    pub fn remove_connection(&mut self, t: &Tuple) -> bool {
        match self.find(t) {
            Some((idx, _)) => {
                self.remove(idx);
                true
            }
            None => false,
        }
    }

    /// Exports the connections `sel` selects that are live at `now`.
    pub fn export(&self, sel: &Selection, now: Duration) -> CtExport {
        let n = ms(now);
        CtExport {
            version: EXPORT_VERSION,
            conns: self
                .entries
                .iter()
                .filter(|e| e.live() && e.expires > n && sel.matches(e, &self.tmo))
                .map(|e| conn_state(e, n))
                .collect(),
        }
    }

    /// Imports `data`, moving each connection to zone `remap(zone)`. See the module docs for
    /// the rules. Fails as a whole only on a version mismatch.
    pub fn import(
        &mut self,
        data: &CtExport,
        remap: impl Fn(u16) -> u16,
        now: Duration,
    ) -> Result<ImportReport, ImportError> {
        self.import_with(data, |z| Some(remap(z)), now, ImportPolicy::Replace)
    }

    /// [`Conntrack::import`] with a [`ImportPolicy`], and a zone map that may refuse a zone
    /// (`None`: the connection is skipped and counted as malformed).
    pub fn import_with(
        &mut self,
        data: &CtExport,
        remap: impl Fn(u16) -> Option<u16>,
        now: Duration,
        policy: ImportPolicy,
    ) -> Result<ImportReport, ImportError> {
        if data.version != EXPORT_VERSION {
            return Err(ImportError::Version {
                found: data.version,
                expected: EXPORT_VERSION,
            });
        }
        let now = ms(now);
        let mut rep = ImportReport::default();
        for c in &data.conns {
            if !well_formed(c) {
                rep.malformed += 1;
                continue;
            }
            let Some(zone) = remap(c.orig.zone) else {
                rep.malformed += 1;
                continue;
            };
            let orig = Tuple { zone, ..c.orig };
            let reply = Tuple { zone, ..c.reply };
            if policy == ImportPolicy::SameConnection && self.held_by_other(&orig, &reply, c.snat) {
                rep.collided += 1;
                continue;
            }
            // The newer state wins: drop whatever holds these tuples or this SNAT claim.
            for t in [orig, reply] {
                while let Some((idx, _)) = self.find(&t) {
                    self.remove(idx);
                    rep.replaced += 1;
                }
            }
            if c.snat {
                while let Some(idx) = self.claimer(&reply) {
                    self.remove(idx);
                    rep.replaced += 1;
                }
            }
            if self.len >= self.cfg.max_connections {
                let v = self.unest.head;
                if v == NIL {
                    rep.refused += 1;
                    continue;
                }
                self.remove(v);
                self.stats.evicted += 1;
            }
            let mut flags = F_LIVE;
            for (on, f) in [
                (c.seen_reply, F_SEEN_REPLY),
                (c.assured, F_ASSURED),
                (c.snat, F_SNAT),
                (c.dnat, F_DNAT),
            ] {
                if on {
                    flags |= f;
                }
            }
            let mut e = Entry {
                orig,
                reply,
                label: [0; 2],
                expires: now.saturating_add(c.expires_in_ms),
                tcp: c.tcp.map_or(
                    TcpConn {
                        state: TcpState::None,
                        peers: Default::default(),
                    },
                    |t| TcpConn {
                        state: t.state,
                        peers: t.peers,
                    },
                ),
                mark: c.mark,
                owner: c.owner.0,
                links: [[NIL; 2]; 2],
                slot: 0,
                flags,
            };
            e.set_label(c.label);
            self.insert(e);
            self.stats.created += 1;
            rep.imported += 1;
        }
        Ok(rep)
    }
}
