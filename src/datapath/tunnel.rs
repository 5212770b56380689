//! Offloaded frames into the Geneve tunnel: a TCP super-frame the pipeline carried whole
//! ([`hf_datapath::offload`]) is cut into segments once, each behind the same Geneve header,
//! and handed to the kernel as one UDP GSO send (`UDP_SEGMENT`): the kernel makes the datagrams
//! (and their UDP checksums), one system call for up to 64 of them instead of one each.
//! Where the kernel refuses UDP GSO, or the buffer is full, the datagrams go one by one.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use hf_wire::offload::{Offload, Segments};
use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrStorage, sendmsg};

/// The kernel's limit of datagrams per UDP GSO send (`UDP_MAX_SEGMENTS`).
const MAX_SEGMENTS: usize = 64;

/// The largest UDP GSO send (an IP packet's worth of payload).
const MAX_BYTES: usize = 65_000;

/// Reused buffers for [`send`].
#[derive(Default)]
pub struct TunnelTx {
    segs: Segments,
    buf: Vec<u8>,
    /// UDP GSO refused by the kernel once: datagrams go one by one from then on.
    no_gso: bool,
    /// Sends that went as UDP GSO, and the datagrams in them.
    pub gso_sends: u64,
    pub gso_datagrams: u64,
}

/// Sends `payload` (Geneve header + inner super-frame with `o`) to `to` on `udp` as datagrams of
/// one segment each. Returns the datagrams it could not send now (a full buffer), for the caller
/// to queue; `Err` when the metadata does not fit the frame.
pub fn send(
    tx: &mut TunnelTx,
    udp: &tokio::net::UdpSocket,
    to: SocketAddr,
    payload: &[u8],
    o: &Offload,
) -> Result<Vec<Vec<u8>>, ()> {
    let (hdr, inner) = hf_datapath::offload::split_geneve(payload).ok_or(())?;
    let hlen = hdr.len();
    hf_wire::offload::segment(inner, o, &mut tx.segs).map_err(|_| ())?;
    let mut left = Vec::new();
    let n = tx.segs.len();
    let mut i = 0;
    while i < n {
        // A run of equal-sized datagrams (the last may be shorter), within the kernel's limits.
        let size = tx.segs.get(i).map_or(0, <[u8]>::len);
        let mut j = i + 1;
        while j < n
            && j - i < MAX_SEGMENTS
            && (j - i + 1) * (hlen + size) <= MAX_BYTES
            && tx.segs.get(j).map_or(0, <[u8]>::len) == size
        {
            j += 1;
        }
        // The next one may be shorter (the super-frame's tail) and still end this run.
        if j < n
            && j - i < MAX_SEGMENTS
            && (j - i + 1) * (hlen + size) <= MAX_BYTES
            && tx.segs.get(j).map_or(0, <[u8]>::len) < size
        {
            j += 1;
        }
        tx.buf.clear();
        for k in i..j {
            tx.buf.extend_from_slice(hdr);
            tx.buf.extend_from_slice(tx.segs.get(k).unwrap_or_default());
        }
        let sent = j - i > 1 && !tx.no_gso && gso_send(tx, udp, to, hlen + size);
        if sent {
            tx.gso_sends += 1;
            tx.gso_datagrams += (j - i) as u64;
        } else {
            for k in i..j {
                let mut d = Vec::with_capacity(hlen + size);
                d.extend_from_slice(hdr);
                d.extend_from_slice(tx.segs.get(k).unwrap_or_default());
                match udp.try_send_to(&d, to) {
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => left.push(d),
                    Err(e) => tracing::warn!("Geneve to {to}: {e}"),
                }
            }
        }
        i = j;
    }
    Ok(left)
}

/// One UDP GSO send of `tx.buf` in datagrams of `gso` bytes; false when it did not go (the
/// caller sends them one by one).
fn gso_send(tx: &mut TunnelTx, udp: &tokio::net::UdpSocket, to: SocketAddr, gso: usize) -> bool {
    let Ok(size) = u16::try_from(gso) else {
        return false;
    };
    let addr = SockaddrStorage::from(to);
    let iov = [IoSlice::new(&tx.buf)];
    let cmsg = [ControlMessage::UdpGsoSegments(&size)];
    match sendmsg(udp.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), Some(&addr)) {
        Ok(_) => true,
        Err(nix::errno::Errno::EAGAIN) => false,
        Err(e) => {
            tracing::info!(
                "Geneve to {to}: UDP GSO refused ({e}): datagrams go one by one from now on"
            );
            tx.no_gso = true;
            false
        }
    }
}
