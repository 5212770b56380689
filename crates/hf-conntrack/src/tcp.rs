//! TCP connection tracking: Linux's `nf_conntrack_proto_tcp` state table and its window
//! tracking (`tcp_in_window`, after Guido van Rooij's "Real Stateful TCP Packet Filtering in IP
//! Filter"), with the same liberal mode.
//!
//! Every packet of a tracked connection goes through [`TcpConn::update`] with its direction. The
//! verdict says whether the packet fits the connection: in-state and (unless liberal) in-window.

use hf_wire::{TcpSegment, tcp_flags};
use serde::{Deserialize, Serialize};

/// TCP conntrack states, as Linux names them.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum TcpState {
    /// Before the first packet.
    None = 0,
    /// SYN seen.
    SynSent = 1,
    /// SYN-ACK seen.
    SynRecv = 2,
    /// Handshake completed.
    Established = 3,
    /// FIN seen in one direction.
    FinWait = 4,
    /// ACK of the FIN seen.
    CloseWait = 5,
    /// FIN seen in the other direction too.
    LastAck = 6,
    /// Last ACK seen.
    TimeWait = 7,
    /// RST seen.
    Close = 8,
    /// Simultaneous open: SYN seen from both sides.
    SynSent2 = 9,
}

use TcpState as S;

const ALL: [TcpState; 10] = [
    S::None,
    S::SynSent,
    S::SynRecv,
    S::Established,
    S::FinWait,
    S::CloseWait,
    S::LastAck,
    S::TimeWait,
    S::Close,
    S::SynSent2,
];

impl TcpState {
    pub(crate) fn from_u8(v: u8) -> Option<TcpState> {
        ALL.get(usize::from(v)).copied()
    }
}

/// What the state table says for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    To(TcpState),
    /// sIG: accept, change nothing.
    Ignore,
    /// sIV: invalid.
    Invalid,
}

use Next::{Ignore as IG, Invalid as IV};
const SS: Next = Next::To(S::SynSent);
const SR: Next = Next::To(S::SynRecv);
const ES: Next = Next::To(S::Established);
const FW: Next = Next::To(S::FinWait);
const CW: Next = Next::To(S::CloseWait);
const LA: Next = Next::To(S::LastAck);
const TW: Next = Next::To(S::TimeWait);
const CL: Next = Next::To(S::Close);
const S2: Next = Next::To(S::SynSent2);

/// `TABLE[dir][flag index][state]`, Linux's `tcp_conntracks`. Flag index: SYN, SYN-ACK, FIN,
/// ACK, RST, none. States in [`TcpState`] order.
const TABLE: [[[Next; 10]; 6]; 2] = [
    [
        /* syn    */ [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2],
        /* synack */ [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
    [
        /* syn    */ [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        /* synack */ [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        /* fin    */ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /* ack    */ [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        /* rst    */ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /* none   */ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

fn flag_index(flags: u16) -> usize {
    if flags & tcp_flags::RST != 0 {
        4
    } else if flags & tcp_flags::SYN != 0 {
        if flags & tcp_flags::ACK != 0 { 1 } else { 0 }
    } else if flags & tcp_flags::FIN != 0 {
        2
    } else if flags & tcp_flags::ACK != 0 {
        3
    } else {
        5
    }
}

/// Flag combinations no valid segment carries (Linux's `tcp_valid_flags`).
fn flags_valid(flags: u16) -> bool {
    use tcp_flags::*;
    let f = flags & (FIN | SYN | RST | ACK | URG | PSH);
    matches!(
        f & !PSH,
        x if x == SYN
            || x == SYN | URG
            || x == SYN | ACK
            || x == RST
            || x == RST | ACK
            || x == FIN | ACK
            || x == FIN | ACK | URG
            || x == ACK
            || x == ACK | URG
    )
}

/// Per-direction window state (Linux's `ip_ct_tcp_state`), exported with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TcpPeer {
    /// Highest sequence number sent + length.
    pub end: u32,
    /// Highest acceptable sequence end (ack + window from the other side).
    pub maxend: u32,
    /// Largest window seen.
    pub maxwin: u32,
    /// Highest ACK sent.
    pub maxack: u32,
    /// Window scale shift.
    pub scale: u8,
    /// Window-scale, SACK, liberal, max-ack-set and close-initiator bits.
    pub flags: u8,
}

const F_WSCALE: u8 = 0x01;
const F_SACK: u8 = 0x02;
const F_LIBERAL: u8 = 0x04;
const F_MAXACK: u8 = 0x08;
const F_CLOSE_INIT: u8 = 0x10;

fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

impl TcpPeer {
    fn set_options(&mut self, seg: &TcpSegment) {
        if let Some(s) = seg.wscale {
            self.scale = s.min(14);
            self.flags |= F_WSCALE;
        } else {
            self.scale = 0;
            self.flags &= !F_WSCALE;
        }
        if seg.sack_permitted {
            self.flags |= F_SACK;
        }
    }
}

/// A TCP connection's tracking state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TcpConn {
    pub state: TcpState,
    /// `[original, reply]`.
    pub peers: [TcpPeer; 2],
}

/// The outcome of [`TcpConn::update`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TcpVerdict {
    /// The packet fits; the state may have changed.
    Valid,
    /// The packet fits but changes nothing (Linux's "ignore" transitions).
    Ignored,
    /// The packet does not fit (wrong state or out of window).
    Invalid,
    /// A SYN on a closed/time-wait connection: the old connection ends, a new one starts.
    Reopen,
}

impl TcpConn {
    /// The state of a connection whose first packet is `seg` with `flags` (Linux's `tcp_new`),
    /// or `None` when such a packet cannot start a connection. Picked-up (mid-stream)
    /// connections are tracked liberally in both directions, as their windows are unknown.
    pub fn new(seg: &TcpSegment, flags: u16) -> Option<TcpConn> {
        if !flags_valid(flags) {
            return None;
        }
        let Next::To(_) = TABLE[0][flag_index(flags)][S::None as usize] else {
            return None;
        };
        let mut c = TcpConn {
            state: S::None,
            peers: [TcpPeer::default(); 2],
        };
        let syn = flags & tcp_flags::SYN != 0;
        let p = &mut c.peers[0];
        p.end = seg_end(seg, flags);
        if syn {
            p.maxwin = u32::from(seg.window).max(1);
            p.maxend = p.end;
            p.set_options(seg);
        } else {
            p.maxwin = u32::from(seg.window).max(1);
            p.maxend = p.end.wrapping_add(p.maxwin);
            c.peers[0].flags = F_SACK | F_LIBERAL;
            c.peers[1].flags = F_SACK | F_LIBERAL;
        }
        Some(c)
    }

    /// Runs one packet in direction `dir` (0 original, 1 reply) through the state table and the
    /// window check. `liberal` accepts out-of-window packets (without learning from them).
    pub fn update(
        &mut self,
        dir: usize,
        seg: &TcpSegment,
        flags: u16,
        liberal: bool,
    ) -> TcpVerdict {
        if !flags_valid(flags) {
            return TcpVerdict::Invalid;
        }
        let dir = dir & 1;
        let old = self.state;
        let next = TABLE[dir][flag_index(flags)][old as usize];
        let new = match next {
            Next::Invalid => return TcpVerdict::Invalid,
            Next::Ignore => return TcpVerdict::Ignored,
            Next::To(s) => s,
        };
        if new == S::SynSent && old >= S::TimeWait {
            return TcpVerdict::Reopen;
        }
        let liberal = liberal || self.peers[dir].flags & F_LIBERAL != 0;
        if !self.in_window(dir, old, seg, flags) && !liberal {
            return TcpVerdict::Invalid;
        }
        if new == S::FinWait && old != S::FinWait {
            self.peers[dir].flags |= F_CLOSE_INIT;
        }
        self.state = new;
        TcpVerdict::Valid
    }

    /// Linux's `tcp_in_window`: checks the segment against the windows and learns from it when it
    /// fits. Returns whether it fits.
    fn in_window(&mut self, dir: usize, state: TcpState, seg: &TcpSegment, flags: u16) -> bool {
        let syn = flags & tcp_flags::SYN != 0;
        let rst = flags & tcp_flags::RST != 0;
        let ackf = flags & tcp_flags::ACK != 0;
        let [a, b] = &mut self.peers;
        let (s, r) = if dir == 0 { (a, b) } else { (b, a) };
        let mut seq = seg.seq;
        let mut ack = seg.ack;
        let mut end = seg_end(seg, flags);
        let win = u32::from(seg.window);
        if s.maxwin == 0 {
            // First packet in this direction.
            if syn {
                s.end = end;
                s.maxend = end;
                s.maxwin = win.max(1);
                s.set_options(seg);
                if !(s.flags & F_WSCALE != 0 && r.flags & F_WSCALE != 0) {
                    s.scale = 0;
                    r.scale = 0;
                }
                if !ackf {
                    // A SYN without ACK (simultaneous open): nothing to check yet.
                    return true;
                }
            } else {
                s.end = end;
                s.maxwin = (win << s.scale.min(14)).max(1);
                s.maxend = end.wrapping_add(s.maxwin);
                if r.maxwin == 0 {
                    r.end = ack;
                    r.maxend = ack;
                }
            }
        } else if ((state == S::SynSent && dir == 0) || (state == S::SynRecv && dir == 1))
            && after(end, s.end)
        {
            // A retransmitted SYN (or SYN-ACK) with a new initial sequence number.
            s.end = end;
            s.maxend = end;
            s.maxwin = win.max(1);
            s.set_options(seg);
        }
        if !ackf || (rst && ack == 0) {
            ack = r.end;
        }
        let sack = ack;
        if rst && seq == 0 && state == S::SynSent {
            seq = s.end;
            end = s.end;
        }
        if seq == end && (!rst || (seq == 0 && state == S::SynSent)) {
            seq = s.end;
            end = s.end;
        }
        let maxackwin = if s.maxwin == 0 { 66000 } else { s.maxwin };
        let fits = before(seq, s.maxend.wrapping_add(1))
            && after(end, s.end.wrapping_sub(r.maxwin).wrapping_sub(1))
            && before(sack, r.end.wrapping_add(1))
            && after(sack, r.end.wrapping_sub(maxackwin).wrapping_sub(1));
        if !fits {
            return false;
        }
        let win = if syn { win } else { win << s.scale.min(14) };
        if s.maxwin < win {
            s.maxwin = win;
        }
        if after(end, s.end) {
            s.end = end;
        }
        if ackf {
            if s.flags & F_MAXACK == 0 {
                s.maxack = ack;
                s.flags |= F_MAXACK;
            } else if after(ack, s.maxack) {
                s.maxack = ack;
            }
        }
        if r.maxwin != 0 && after(end, s.maxend) {
            r.maxwin = r.maxwin.wrapping_add(end.wrapping_sub(s.maxend));
        }
        if after(sack.wrapping_add(win), r.maxend.wrapping_sub(1)) {
            r.maxend = sack.wrapping_add(win);
            if win == 0 {
                r.maxend = r.maxend.wrapping_add(1);
            }
        }
        true
    }
}

/// Sequence number after the segment (SYN and FIN count one each).
fn seg_end(seg: &TcpSegment, flags: u16) -> u32 {
    seg.seq
        .wrapping_add(u32::from(seg.payload_len))
        .wrapping_add(u32::from(flags & tcp_flags::SYN != 0))
        .wrapping_add(u32::from(flags & tcp_flags::FIN != 0))
}
