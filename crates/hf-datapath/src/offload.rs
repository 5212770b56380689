//! Offloaded frames carried through the datapath whole: a TCP super-frame (a segmentation
//! offload, up to 64 KiB) or a frame whose L4 checksum is still partial, as an AF_PACKET port
//! with `PACKET_VNET_HDR` receives them, runs through the pipeline once and leaves with its
//! offload metadata ([`hf_wire::offload::Offload`]) for the device (or the shell) that sends it.
//!
//! A partial checksum field holds the folded pseudo-header sum, not a checksum. The pipeline's
//! NAT adjusts checksums incrementally (RFC 1624) as if the field held a complete checksum, so
//! the field is complemented before the pipeline and complemented back on every output: the
//! adjustment then lands on the pseudo-header sum, as Linux's `inet_proto_csum_replace4` does
//! for `CHECKSUM_PARTIAL`.
//!
//! An output carries the input's metadata when it is the input forwarded: its length differs
//! by whole VLAN tags at most, and (TCP) its sequence number is the input's. Anything else the
//! pipeline made from it (a reject's RST, an ICMP error) is whole already and carries none.
//!
//! What it does not do: carry offloads while a migration watches or holds the ports' frames
//! (the frame is then completed in software first: [`Datapath::handle_port_frame_offload`]
//! returns false), or segment (that is the sending device's, or [`complete`]'s for a tunnel
//! or an in-memory port).

use std::time::Duration;

use hf_wire::offload::{Csum, Gso, Offload, Segments};

use crate::core::{Datapath, PortHandle, TransmitRef};

/// The offloaded frame being processed.
#[derive(Debug, Default)]
pub(crate) struct RxOffload {
    /// Its metadata (none: a whole frame).
    pub(crate) meta: Offload,
    /// Its length.
    len: usize,
    /// Its TCP sequence number, when it is TCP.
    seq: Option<[u8; 4]>,
    /// A copy of it with the checksum field complemented (reused).
    scratch: Vec<u8>,
}

/// The L4 protocol's checksum offset for TCP (the field sits 16 bytes into the header).
const TCP_CSUM_OFFSET: u16 = 16;

impl Datapath {
    /// [`Datapath::handle_port_frame_at`] for a frame with offload metadata (`meta` not
    /// none), processed whole: its outputs carry the metadata ([`Datapath::drain_transmit_offload`]).
    /// Returns false, doing nothing, when the frame cannot be carried so (a migration watches
    /// the ports' frames, or the metadata does not fit the frame): the caller completes it in
    /// software and hands over the segments.
    pub fn handle_port_frame_offload(
        &mut self,
        port: PortHandle,
        frame: &[u8],
        meta: &Offload,
        now: Duration,
    ) -> bool {
        if !self.offload_passthrough_ok() {
            return false;
        }
        let mut scratch = std::mem::take(&mut self.rx_offload.scratch);
        scratch.clear();
        scratch.extend_from_slice(frame);
        let seq = match meta.csum {
            Csum::Partial { start, offset } => {
                let at = usize::from(start) + usize::from(offset);
                let Some(field) = scratch.get_mut(at..at + 2) else {
                    self.rx_offload.scratch = scratch;
                    return false;
                };
                field[0] = !field[0];
                field[1] = !field[1];
                let s = usize::from(start);
                (offset == TCP_CSUM_OFFSET)
                    .then(|| scratch.get(s + 4..s + 8))
                    .flatten()
                    .and_then(|b| b.try_into().ok())
            }
            _ => None,
        };
        if meta.gso.is_some() && seq.is_none() {
            // A super-frame is told apart from what the pipeline makes of it by its TCP
            // sequence number (UDP super-frames are rare): segmented first.
            self.rx_offload.scratch = scratch;
            return false;
        }
        self.rx_offload.meta = *meta;
        self.rx_offload.len = scratch.len();
        self.rx_offload.seq = seq;
        self.handle_port_frame_at(port, &scratch, now);
        self.rx_offload.meta = Offload::default();
        self.rx_offload.scratch = scratch;
        true
    }

    /// Whether outputs can carry an input's offload: nothing looks at or holds the frames
    /// (a migration's tracking, trims or held ports copy frames without their metadata).
    fn offload_passthrough_ok(&self) -> bool {
        !self.ports_arriving()
            && self.mig.stopped.is_empty()
            && self.tracking.is_empty()
            && self.trim.is_empty()
            && !self.handed_over
            && self.mirror.is_empty()
    }

    /// The metadata output `i` of the frame being processed carries, its checksum field
    /// complemented back; none for a whole input, and for a frame the pipeline made.
    pub(crate) fn out_offload(&mut self, i: usize) -> Offload {
        let rx = &self.rx_offload;
        if rx.meta.is_none() {
            return Offload::default();
        }
        let Some((_, out)) = self.outs.frame(i) else {
            return Offload::default();
        };
        let delta = out.len() as isize - rx.len as isize;
        if delta % 4 != 0 || delta.abs() > 8 {
            return Offload::default();
        }
        let Some(meta) = shift(rx.meta, delta) else {
            return Offload::default();
        };
        let Csum::Partial { start, offset } = meta.csum else {
            return meta;
        };
        let s = usize::from(start);
        let at = s + usize::from(offset);
        if let Some(seq) = rx.seq
            && out.get(s + 4..s + 8) != Some(&seq[..])
        {
            return Offload::default();
        }
        match self.outs.frame_mut(i).and_then(|f| f.get_mut(at..at + 2)) {
            Some(field) => {
                field[0] = !field[0];
                field[1] = !field[1];
                meta
            }
            None => Offload::default(),
        }
    }
}

/// `o` for a frame `delta` bytes longer (VLAN tags pushed) or shorter (popped) before its L3
/// header.
fn shift(o: Offload, delta: isize) -> Option<Offload> {
    if delta >= 0 {
        return Some(o.shifted(u16::try_from(delta).ok()?));
    }
    let d = u16::try_from(-delta).ok()?;
    let mut o = o;
    if let Csum::Partial { start, .. } = &mut o.csum {
        *start = start.checked_sub(d)?;
    }
    if let Some(Gso { hdr_len, .. }) = &mut o.gso {
        *hdr_len = hdr_len.saturating_sub(d);
    }
    Some(o)
}

/// A tunnel payload as its Geneve header and inner frame; none when it is not Geneve.
pub fn split_geneve(payload: &[u8]) -> Option<(&[u8], &[u8])> {
    let hlen = hf_wire::geneve::GenevePacket::new_checked(payload)
        .ok()?
        .header_len();
    (hlen <= payload.len()).then(|| payload.split_at(hlen))
}

/// Hands `t` to `f` whole: a partial checksum completed, a super-frame cut into segments (for
/// a tunnel, the inner frame's, each behind the Geneve header). For consumers that cannot pass
/// offloads on ([`Datapath::drain_transmit`]).
/// Returns false when the metadata does not fit the frame (nothing was handed over).
pub fn complete(
    t: TransmitRef<'_>,
    o: &Offload,
    segs: &mut Segments,
    f: &mut impl FnMut(TransmitRef<'_>),
) -> bool {
    match t {
        TransmitRef::Port { port, frame } => {
            if hf_wire::offload::segment(frame, o, segs).is_err() {
                return false;
            }
            for s in segs.iter() {
                f(TransmitRef::Port { port, frame: s });
            }
        }
        // Mirror copies are whole frames (no pass-through while a session runs).
        TransmitRef::Mirror { .. } => {
            if !o.is_none() {
                return false;
            }
            f(t);
        }
        TransmitRef::Tunnel { dst, payload } => {
            let Some((hdr, inner)) = split_geneve(payload) else {
                return false;
            };
            if hf_wire::offload::segment(inner, o, segs).is_err() {
                return false;
            }
            let mut buf = Vec::with_capacity(hdr.len() + 1514);
            for s in segs.iter() {
                buf.clear();
                buf.extend_from_slice(hdr);
                buf.extend_from_slice(s);
                f(TransmitRef::Tunnel { dst, payload: &buf });
            }
        }
    }
    true
}
