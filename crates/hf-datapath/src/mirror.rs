//! Port mirroring: SB `Mirror` sessions (OVN 23.03's "tap-as-a-service"), done as
//! ovn-controller 23.03 has OVS do them.
//!
//! # What OVN does, and what this does the same
//!
//! For every local port whose `Port_Binding.mirror_rules` names a `Mirror`, ovn-controller
//! makes an OVS mirror on the integration bridge: `select_src_port` (the port's `from-lport`
//! sessions: every frame the port sends, as it sent it, whatever the pipeline then does with
//! it) or `select_dst_port` (`to-lport`: every frame delivered to the port, as delivered), with
//! a tunnel port as output: `type=gre` or `type=erspan` with `remote_ip=<sink>`,
//! `key=<index>` and, for ERSPAN, `erspan_ver=1`, `erspan_idx=<index>`. This module does what
//! OVS then sends ([`ToDatapath::Mirrors`] configures it; frames leave as
//! [`crate::Transmit::Mirror`], the IP payload for protocol 47 to the sink):
//!
//! - GRE: flags with the key bit (no checksum, no sequence number), protocol `0x6558`
//!   (transparent Ethernet bridging), the key = the index; then the frame.
//! - ERSPAN type II (version 1): GRE with the sequence bit (a per-session sequence number
//!   from 0), protocol `0x88be`; an 8-byte ERSPAN header: version 1, VLAN 0, COS 0, En 0,
//!   T 0, session ID = the index (10 bits), reserved, and the index field. OVS reads
//!   `erspan_idx` in hexadecimal while ovn-controller writes the index in decimal, so index
//!   10 reaches the collector as index 0x10: that is what a collector behind OVN sees, so it
//!   is what this sends. An index whose session ID does not fit 10 bits sends nothing (OVS
//!   drops the packet in the tunnel push), and one whose decimal text is no 20-bit hex number
//!   is an interface OVS refuses; both are warnings here, named, and send nothing.
//! - One copy per session per packet (OVS's mirror bitmap): a broadcast delivered to two
//!   ports of one `to-lport` session is sent to the sink once.
//! - At most 32 sessions per chassis (OVS's `MAX_MIRRORS` per bridge); more is a warning.
//!
//! # What it does not do
//!
//! The outer IP header is the shell's (the daemon sends through a raw GRE socket; the kernel
//! routes and fills it); the simulator hands the payload to the sink's host. Frames carried
//! with offload metadata are completed in software first while any session is configured
//! ([`Datapath`]'s offload pass-through is off), so a copy is always a whole frame.
//!
//! [`ToDatapath::Mirrors`]: crate::proto::ToDatapath::Mirrors

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use hf_pipeline::Destination;
use hf_wire::offload::Offload;

use crate::core::{Datapath, Level, PortState, TxDesc, TxTo};
use crate::proto::{MirrorFilter, MirrorKind, MirrorMsg};

/// OVS's limit of mirrors per bridge.
pub const MAX_SESSIONS: usize = 32;

/// GRE flag bits (RFC 2890).
const GRE_KEY: u16 = 0x2000;
const GRE_SEQ: u16 = 0x1000;
/// Transparent Ethernet bridging.
const ETH_P_TEB: u16 = 0x6558;
/// ERSPAN type II.
const ETH_P_ERSPAN: u16 = 0x88be;
/// The largest header: GRE with a sequence number (8) and ERSPAN type II (8).
pub const MAX_HEADER: usize = 16;

/// One running session.
#[derive(Debug, Clone)]
struct Session {
    name: String,
    kind: MirrorKind,
    sink: IpAddr,
    /// The GRE key (GRE) or the session ID (ERSPAN).
    key: u32,
    /// ERSPAN's index field.
    erspan_idx: u32,
    /// ERSPAN's next sequence number.
    seq: u32,
    /// Frames sent to the sink.
    sent: u64,
}

/// A session's figures ([`Datapath::mirror_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorStats {
    /// `Mirror.name`.
    pub name: String,
    /// The sink.
    pub sink: IpAddr,
    /// Frames sent to it.
    pub sent: u64,
}

/// The mirror sessions of a datapath.
#[derive(Debug, Default)]
pub(crate) struct Mirrors {
    /// As the controller sent them.
    cfg: Vec<MirrorMsg>,
    sessions: Vec<Session>,
    /// Local port id → the sessions (bit `i`: `sessions[i]`) copying what it sends.
    from: HashMap<u32, u32>,
    /// Local port id → the sessions copying what it is delivered.
    to: HashMap<u32, u32>,
    /// A delivered frame copied out of the transmit buffer (reused: no allocation per copy).
    scratch: Vec<u8>,
}

/// Why a session cannot run, or `None`; `(key, erspan_idx)` when it can.
fn check(m: &MirrorMsg) -> Result<(IpAddr, u32, u32), String> {
    let sink: IpAddr = m.sink.trim().parse().map_err(|_| {
        format!(
            "mirror {}: sink {:?} is not an IP address: nothing is mirrored to it",
            m.name, m.sink
        )
    })?;
    let key = u32::try_from(m.index).map_err(|_| {
        format!(
            "mirror {}: index {} is not a 32-bit GRE key: nothing is mirrored",
            m.name, m.index
        )
    })?;
    if m.kind == MirrorKind::Gre {
        return Ok((sink, key, 0));
    }
    if key > 0x3ff {
        return Err(format!(
            "mirror {}: ERSPAN's session ID is 10 bits and the index is {key}: OVS sends \
             nothing for such a session, nor does this datapath (use an index below 1024)",
            m.name
        ));
    }
    // ovn-controller writes erspan_idx in decimal; OVS reads it in hexadecimal.
    match u32::from_str_radix(&key.to_string(), 16) {
        Ok(idx) if idx <= 0xf_ffff => Ok((sink, key, idx)),
        _ => Err(format!(
            "mirror {}: OVS reads ovn-controller's erspan_idx {key:?} as hexadecimal, which \
             does not fit ERSPAN's 20-bit index: OVS refuses the interface and nothing is \
             mirrored, nor is it here",
            m.name
        )),
    }
}

impl Mirrors {
    /// Whether no session runs.
    pub(crate) fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Replaces the sessions; returns warnings for what cannot run.
    pub(crate) fn set(
        &mut self,
        mut list: Vec<MirrorMsg>,
        ports: &BTreeMap<String, PortState>,
    ) -> Vec<String> {
        list.sort();
        list.dedup();
        let mut bad = Vec::new();
        let old: HashMap<String, Session> = self
            .sessions
            .drain(..)
            .map(|s| (s.name.clone(), s))
            .collect();
        let mut kept = Vec::new();
        for m in &list {
            let (sink, key, erspan_idx) = match check(m) {
                Ok(x) => x,
                Err(e) => {
                    bad.push(e);
                    continue;
                }
            };
            if self.sessions.len() == MAX_SESSIONS {
                bad.push(format!(
                    "mirror {}: more than {MAX_SESSIONS} mirror sessions on one chassis (OVS's \
                     limit per bridge): not mirrored",
                    m.name
                ));
                continue;
            }
            // A session that goes on keeps its sequence number and counts.
            let (seq, sent) = old
                .get(&m.name)
                .filter(|o| o.kind == m.kind && o.key == key && o.sink == sink)
                .map_or((0, 0), |o| (o.seq, o.sent));
            self.sessions.push(Session {
                name: m.name.clone(),
                kind: m.kind,
                sink,
                key,
                erspan_idx,
                seq,
                sent,
            });
            kept.push(m.clone());
        }
        self.cfg = kept;
        self.rebind(ports);
        bad
    }

    /// Maps the sessions' ports to local port ids (again after a port comes or goes).
    pub(crate) fn rebind(&mut self, ports: &BTreeMap<String, PortState>) {
        self.from.clear();
        self.to.clear();
        for (i, m) in self.cfg.iter().enumerate() {
            let bit = 1u32 << i;
            let map = match m.filter {
                MirrorFilter::FromLport => &mut self.from,
                MirrorFilter::ToLport => &mut self.to,
            };
            for p in &m.ports {
                if let Some(st) = ports.get(p) {
                    *map.entry(st.id).or_default() |= bit;
                }
            }
        }
    }

    /// The sessions copying what local port `id` sends.
    pub(crate) fn sent_by(&self, id: u32) -> u32 {
        if self.from.is_empty() {
            return 0;
        }
        self.from.get(&id).copied().unwrap_or(0)
    }

    /// The sessions copying what local port `id` is delivered.
    pub(crate) fn delivered_to(&self, id: u32) -> u32 {
        if self.to.is_empty() {
            return 0;
        }
        self.to.get(&id).copied().unwrap_or(0)
    }

    /// Writes session `i`'s header into `out` (advancing its sequence number) and returns its
    /// length and the sink; `None` for no such session.
    fn header(&mut self, i: usize, out: &mut [u8; MAX_HEADER]) -> Option<(usize, IpAddr)> {
        let s = self.sessions.get_mut(i)?;
        s.sent += 1;
        Some(match s.kind {
            MirrorKind::Gre => {
                out[0..2].copy_from_slice(&GRE_KEY.to_be_bytes());
                out[2..4].copy_from_slice(&ETH_P_TEB.to_be_bytes());
                out[4..8].copy_from_slice(&s.key.to_be_bytes());
                (8, s.sink)
            }
            MirrorKind::Erspan => {
                out[0..2].copy_from_slice(&GRE_SEQ.to_be_bytes());
                out[2..4].copy_from_slice(&ETH_P_ERSPAN.to_be_bytes());
                out[4..8].copy_from_slice(&s.seq.to_be_bytes());
                s.seq = s.seq.wrapping_add(1);
                // Version 1, VLAN 0.
                out[8..10].copy_from_slice(&0x1000u16.to_be_bytes());
                // COS 0, En 0, T 0, session ID.
                out[10..12].copy_from_slice(&((s.key & 0x3ff) as u16).to_be_bytes());
                // Reserved 0, index.
                out[12..16].copy_from_slice(&(s.erspan_idx & 0xf_ffff).to_be_bytes());
                (16, s.sink)
            }
        })
    }

    fn stats(&self) -> Vec<MirrorStats> {
        self.sessions
            .iter()
            .map(|s| MirrorStats {
                name: s.name.clone(),
                sink: s.sink,
                sent: s.sent,
            })
            .collect()
    }
}

impl Datapath {
    /// [`crate::proto::ToDatapath::Mirrors`]: replaces the mirror sessions.
    pub fn set_mirrors(&mut self, list: Vec<MirrorMsg>) {
        let n = list.len();
        for bad in self.mirror.set(list, &self.ports) {
            self.log(Level::Warn, bad);
        }
        self.log(
            Level::Info,
            format!(
                "mirrors: {} session(s) of {n} running",
                self.mirror.sessions.len()
            ),
        );
    }

    /// The running mirror sessions and what each sent.
    pub fn mirror_stats(&self) -> Vec<MirrorStats> {
        self.mirror.stats()
    }

    /// Copies `frame` to every session of `mask` not in `done` (then in it): each copy is
    /// queued behind its session's header, for the session's sink.
    pub(crate) fn mirror_copy(&mut self, mask: u32, done: &mut u32, id: u32, frame: &[u8]) {
        let mut left = mask & !*done;
        while left != 0 {
            let i = left.trailing_zeros() as usize;
            left &= left - 1;
            *done |= 1 << i;
            let mut hdr = [0u8; MAX_HEADER];
            let Some((n, sink)) = self.mirror.header(i, &mut hdr) else {
                continue;
            };
            self.outs.push_frame(Destination::Local(id), frame);
            let at = self.outs.first() + self.outs.len() - 1;
            let frame_at = if self.outs.prepend(at, &hdr[..n]).is_some() {
                at
            } else {
                // No headroom left before it: a copy with the header in front.
                let mut v = Vec::with_capacity(n + frame.len());
                v.extend_from_slice(&hdr[..n]);
                v.extend_from_slice(frame);
                self.outs.push_frame(Destination::Local(id), &v);
                self.outs.first() + self.outs.len() - 1
            };
            self.tx.push_back(TxDesc {
                to: TxTo::Mirror(sink),
                frame: frame_at,
                offload: Offload::default(),
            });
        }
    }

    /// Copies frame `i` of the transmit buffer (going out of local port `id`) to the
    /// `to-lport` sessions of the port not in `done`.
    pub(crate) fn mirror_delivered(&mut self, id: u32, i: usize, done: &mut u32) {
        let mask = self.mirror.delivered_to(id);
        if mask & !*done == 0 {
            return;
        }
        // The frame moves when the buffer grows: copy it first (into the reused scratch).
        let mut f = std::mem::take(&mut self.mirror.scratch);
        f.clear();
        f.extend_from_slice(self.outs.frame(i).map_or(&[][..], |(_, b)| b));
        self.mirror_copy(mask, done, id, &f);
        self.mirror.scratch = f;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: MirrorKind, index: i64) -> MirrorMsg {
        MirrorMsg {
            name: "m".into(),
            kind,
            filter: MirrorFilter::FromLport,
            sink: "192.0.2.9".into(),
            index,
            ports: vec!["p".into()],
        }
    }

    #[test]
    fn erspan_index_is_read_as_ovs_reads_it() {
        assert_eq!(check(&msg(MirrorKind::Erspan, 10)).map(|x| x.2), Ok(0x10));
        assert_eq!(check(&msg(MirrorKind::Erspan, 5)).map(|x| x.2), Ok(5));
        assert!(check(&msg(MirrorKind::Erspan, 1024)).is_err());
        assert_eq!(check(&msg(MirrorKind::Gre, 70000)).map(|x| x.1), Ok(70000));
        assert!(check(&msg(MirrorKind::Gre, -1)).is_err());
        let mut bad = msg(MirrorKind::Gre, 1);
        bad.sink = "collector".into();
        assert!(check(&bad).is_err_and(|e| e.contains("not an IP address")));
    }

    #[test]
    fn headers_are_gre_and_erspan_type_two() {
        let mut m = Mirrors::default();
        let bad = m.set(
            vec![
                MirrorMsg {
                    name: "a".into(),
                    ..msg(MirrorKind::Gre, 7)
                },
                MirrorMsg {
                    name: "b".into(),
                    ..msg(MirrorKind::Erspan, 12)
                },
            ],
            &BTreeMap::new(),
        );
        assert!(bad.is_empty(), "{bad:?}");
        let mut h = [0u8; MAX_HEADER];
        let (n, _) = m.header(0, &mut h).expect("session a");
        assert_eq!(&h[..n], &[0x20, 0, 0x65, 0x58, 0, 0, 0, 7]);
        for seq in 0..2u8 {
            let (n, _) = m.header(1, &mut h).expect("session b");
            assert_eq!(
                &h[..n],
                &[
                    0x10, 0, 0x88, 0xbe, 0, 0, 0, seq, 0x10, 0, 0, 12, 0, 0, 0, 0x12
                ]
            );
        }
    }
}
