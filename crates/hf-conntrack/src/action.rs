//! The per-packet API's vocabulary: what the pipeline asks ([`CtAction`]) and what it gets back
//! ([`CtResult`], [`CtState`]), mirroring OVS's `ct()` action (ovs-actions(7)).

use std::net::IpAddr;

use hf_wire::NatRewrite;
use serde::{Deserialize, Serialize};

use crate::tuple::Tuple;

/// `ct_state` bits, with OVS's values (ovs-fields(7), `ct_state`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct CtState(pub u8);

impl CtState {
    /// `new`: the start of a new connection (no reply seen yet, or not committed).
    pub const NEW: CtState = CtState(0x01);
    /// `est`: part of a connection that has seen traffic in both directions.
    pub const EST: CtState = CtState(0x02);
    /// `rel`: related to an existing connection (ICMP errors).
    pub const REL: CtState = CtState(0x04);
    /// `rpl`: in the reply direction.
    pub const RPL: CtState = CtState(0x08);
    /// `inv`: invalid: conntrack could not make sense of it.
    pub const INV: CtState = CtState(0x10);
    /// `trk`: conntrack has seen the packet.
    pub const TRK: CtState = CtState(0x20);
    /// `snat`: the connection is source-NATed and NAT was applied.
    pub const SNAT: CtState = CtState(0x40);
    /// `dnat`: the connection is destination-NATed and NAT was applied.
    pub const DNAT: CtState = CtState(0x80);

    /// True when every bit of `other` is set.
    pub fn contains(self, other: CtState) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union of two sets of bits.
    #[must_use]
    pub fn with(self, other: CtState) -> CtState {
        CtState(self.0 | other.0)
    }
}

impl std::ops::BitOr for CtState {
    type Output = CtState;
    fn bitor(self, rhs: CtState) -> CtState {
        self.with(rhs)
    }
}

impl std::fmt::Debug for CtState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const NAMES: [&str; 8] = ["new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"];
        let mut first = true;
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// A masked update: `field = (field & !mask) | (value & mask)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Masked<T> {
    /// The bits to write.
    pub value: T,
    /// Which bits to write.
    pub mask: T,
}

impl Masked<u32> {
    /// Sets the whole field.
    pub fn all(value: u32) -> Self {
        Masked {
            value,
            mask: u32::MAX,
        }
    }
    pub(crate) fn apply(&self, old: u32) -> u32 {
        (old & !self.mask) | (self.value & self.mask)
    }
}

impl Masked<u128> {
    /// Sets the whole field.
    pub fn all(value: u128) -> Self {
        Masked {
            value,
            mask: u128::MAX,
        }
    }
    pub(crate) fn apply(&self, old: u128) -> u128 {
        (old & !self.mask) | (self.value & self.mask)
    }
}

/// A NAT target range, as in `nat(src=ADDR[-ADDR][:PORT[-PORT]])`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatRange {
    /// First address of the range.
    pub addr_min: IpAddr,
    /// Last address of the range (same family, not below `addr_min`).
    pub addr_max: IpAddr,
    /// First port; `port_min == 0 && port_max == 0` means "keep the port if it is free, otherwise
    /// pick one from 1024-65535" for SNAT and "keep the port" for DNAT.
    pub port_min: u16,
    /// Last port.
    pub port_max: u16,
}

impl NatRange {
    /// One address, ports unchanged where possible.
    pub fn addr(a: IpAddr) -> NatRange {
        NatRange {
            addr_min: a,
            addr_max: a,
            port_min: 0,
            port_max: 0,
        }
    }

    /// One address and one port (DNAT to a backend).
    pub fn addr_port(a: IpAddr, port: u16) -> NatRange {
        NatRange {
            addr_min: a,
            addr_max: a,
            port_min: port,
            port_max: port,
        }
    }
}

/// The `nat` part of a `ct()` action. `Some(NatRequest::default())` is plain `nat`: apply the
/// connection's existing translation. The ranges are used only when a `commit` creates the
/// connection (as in OVS, an existing connection keeps the translation it was committed with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NatRequest {
    /// `nat(src=...)`: source NAT.
    pub src: Option<NatRange>,
    /// `nat(dst=...)`: destination NAT.
    pub dst: Option<NatRange>,
}

/// Who committed a connection: a tag the controller chooses (e.g. its id). [`Owner::NONE`] is
/// the absence of a tag. Flushing by owner removes exactly the connections committed with it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct Owner(pub u32);

impl Owner {
    /// No owner.
    pub const NONE: Owner = Owner(0);
}

/// One `ct()` action: what the pipeline asks conntrack to do with a packet in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtAction {
    /// `commit`: create the connection if it does not exist, and apply `mark`/`label`.
    pub commit: bool,
    /// `nat(...)`: apply (and on commit, set up) address translation.
    pub nat: Option<NatRequest>,
    /// `exec(set_field:...->ct_mark)`, applied only with `commit`.
    pub mark: Option<Masked<u32>>,
    /// `exec(set_field:...->ct_label)`, applied only with `commit`.
    pub label: Option<Masked<u128>>,
    /// The owner recorded on a connection this action creates.
    pub owner: Owner,
}

impl CtAction {
    /// `ct(zone=Z)`: look up only.
    pub fn lookup() -> CtAction {
        CtAction::default()
    }

    /// `ct(commit, zone=Z)`.
    pub fn commit(owner: Owner) -> CtAction {
        CtAction {
            commit: true,
            owner,
            ..CtAction::default()
        }
    }

    /// Adds plain `nat` (apply the existing translation).
    #[must_use]
    pub fn with_nat(mut self) -> CtAction {
        self.nat.get_or_insert_with(NatRequest::default);
        self
    }

    /// Adds `nat(src=range)`.
    #[must_use]
    pub fn snat(mut self, range: NatRange) -> CtAction {
        self.nat.get_or_insert_with(NatRequest::default).src = Some(range);
        self
    }

    /// Adds `nat(dst=range)`.
    #[must_use]
    pub fn dnat(mut self, range: NatRange) -> CtAction {
        self.nat.get_or_insert_with(NatRequest::default).dst = Some(range);
        self
    }
}

/// Why a `commit` did not create a connection. The packet still gets `trk|new`; the pipeline
/// decides (OVN drops such packets in its stateful stages).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum CommitRefused {
    /// The zone's connection limit is reached.
    #[error("the zone's connection limit is reached")]
    ZoneLimit,
    /// The table is at its global cap and holds no unestablished connection to evict.
    #[error("the table is full of established connections")]
    TableFull,
    /// No free address/port in the NAT range for this peer.
    #[error("no free NAT address and port")]
    NatExhausted,
    /// The NAT range does not match the packet's address family, or is empty.
    #[error("the NAT range is invalid for this packet")]
    NatRange,
    /// Another connection already owns this connection's reply tuple.
    #[error("the reply tuple belongs to another connection")]
    TupleTaken,
}

/// What conntrack says about one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtResult {
    /// `ct_state`.
    pub state: CtState,
    /// `ct_zone`.
    pub zone: u16,
    /// `ct_mark` of the connection (0 when there is none).
    pub mark: u32,
    /// `ct_label` of the connection (0 when there is none).
    pub label: u128,
    /// Header changes to apply with [`hf_wire::apply_nat`] (empty without `nat` or NAT).
    pub rewrite: NatRewrite,
    /// The connection's original-direction tuple (`ct_nw_src`, `ct_tp_dst`, ...), if tracked.
    pub orig: Option<Tuple>,
    /// Set when `commit` was asked but no connection was created.
    pub refused: Option<CommitRefused>,
}

impl CtResult {
    pub(crate) fn untracked(zone: u16, state: CtState) -> CtResult {
        CtResult {
            state,
            zone,
            mark: 0,
            label: 0,
            rewrite: NatRewrite::default(),
            orig: None,
            refused: None,
        }
    }
}
