//! [`AfPacket`]: a [`FramePort`] on a Linux `AF_PACKET` socket bound to one interface.
//!
//! # What it does
//!
//! - `SOCK_RAW` socket, created with protocol 0 (deaf until bound) and bound to the interface's
//!   index for `ETH_P_ALL`, so it never sees another interface's frames; nonblocking; the
//!   interface is made promiscuous for the socket's lifetime (`PACKET_MR_PROMISC`, counted by the
//!   kernel), so frames to any MAC arrive.
//! - `PACKET_IGNORE_OUTGOING`: frames sent on the interface (ours, or the host's) are not read
//!   back. Needs Linux 4.20; an older kernel is [`PortError::Unsupported`] at open.
//! - Batched receive with `recvmmsg` into per-port buffers (no allocation per frame), batched send
//!   with `sendmmsg` (header arrays on the stack).
//! - `PACKET_AUXDATA`: when the kernel had taken a VLAN tag out of a frame
//!   (`TP_STATUS_VLAN_VALID`, with its TPID when `TP_STATUS_VLAN_TPID_VALID`), the tag is put back
//!   as a tag header after the MAC addresses before the datapath sees the frame. Each buffer keeps
//!   4 bytes of headroom so this moves 12 bytes, not the frame.
//! - `PACKET_VNET_HDR` (on by default): every frame carries its `virtio_net_hdr` both ways, typed
//!   as [`Offload`], so a 64 KiB TCP super-frame with a partial checksum crosses the datapath as
//!   one frame and is segmented (if at all) by the kernel of the device that sends it on. With it
//!   off ([`AfPacketConfig::vnet_hdr`]), frames given offload metadata to send are completed and
//!   segmented in software ([`hf_wire::offload`]).
//!
//! # Why `recvmmsg`/`sendmmsg` and not TPACKET_V3 rings
//!
//! With `PACKET_VNET_HDR` a bulk TCP flow arrives as 64 KiB super-frames, so the per-frame cost a
//! ring saves (one system call per batch rather than none) is spread over ~45 wire segments per
//! frame and is not where the time goes (the copy is, and both copy once). Rings would also need
//! every slot sized for a 64 KiB frame (TPACKET_V2) or a block-retire timer that adds latency to
//! sparse traffic (TPACKET_V3), a TX ring that TPACKET_V3 does not have, and `mmap`ed state that
//! a hitless restart would have to re-map in the new process; a plain socket descriptor passes
//! over `SCM_RIGHTS` as it is ([`AfPacket::adopt`]). Small-frame rates are where a ring would
//! win; AF_XDP is the planned answer there, behind the same trait.
//!
//! # What it does not do
//!
//! No threads, no waiting (except [`AfPacket::wait_readable`], for simple loops and tests), no
//! rtnetlink. The socket lives in the network namespace of the thread that opened it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use hf_wire::offload::{self, Offload, Segments, VIRTIO_NET_HDR_LEN};

use super::sys::{self, MAX_BATCH, RxBufs, RxDone, TxSlice};
use super::{FramePort, PortError, PortStats, RxMeta, TxFrame, TxMeta, VLAN_HLEN, VlanTag};

/// The longest frame a receive buffer holds: a 64 KiB super-frame plus its L2 headers.
const RX_FRAME_MAX: usize = 65_536 + 64;
/// One receive buffer: headroom for a VLAN tag, then the frame, rounded to a cache line.
const RX_SLOT: usize = (VLAN_HLEN + RX_FRAME_MAX).next_multiple_of(64);

/// How an [`AfPacket`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Frames per `recvmmsg` (1 to 64). Each costs a 64 KiB buffer.
    pub batch: usize,
    /// Exchange `virtio_net_hdr` offload metadata with the kernel (`PACKET_VNET_HDR`).
    pub vnet_hdr: bool,
    /// Make the interface promiscuous while the port is open.
    pub promisc: bool,
    /// Socket receive buffer in bytes (set with `SO_RCVBUFFORCE` when privileged).
    pub rcvbuf: usize,
    /// Socket send buffer in bytes (set with `SO_SNDBUFFORCE` when privileged).
    pub sndbuf: usize,
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            batch: 32,
            vnet_hdr: true,
            promisc: true,
            rcvbuf: 4 << 20,
            sndbuf: 4 << 20,
        }
    }
}

/// An `AF_PACKET` port on one interface. See the module documentation.
pub struct AfPacket {
    name: String,
    fd: OwnedFd,
    ifindex: u32,
    mtu: u32,
    vnet: bool,
    gone: bool,
    rx: RxBufs,
    seg: Segments,
    stats: PortStats,
}

impl std::fmt::Debug for AfPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacket")
            .field("name", &self.name)
            .field("ifindex", &self.ifindex)
            .field("mtu", &self.mtu)
            .field("vnet_hdr", &self.vnet)
            .field("batch", &self.rx.batch())
            .field("gone", &self.gone)
            .finish()
    }
}

/// What a failed send means for the frame and the batch.
enum TxFail {
    /// The send buffer is full: the frame was not consumed.
    Full,
    /// The kernel refused this frame alone (too big, bad metadata, device queue full): it is
    /// dropped and the batch goes on.
    Frame(PortError),
    /// The port cannot send now (link down) or ever (gone), or an unexpected error.
    Port(PortError),
}

impl AfPacket {
    /// Opens a port on interface `name` of the calling thread's network namespace with the
    /// default configuration (`PACKET_VNET_HDR` on, batches of 32).
    pub fn open(name: &str) -> Result<AfPacket, PortError> {
        AfPacket::open_with(name, AfPacketConfig::default())
    }

    /// Opens a port on interface `name` with `cfg`.
    pub fn open_with(name: &str, cfg: AfPacketConfig) -> Result<AfPacket, PortError> {
        if !sys::valid_name(name) {
            return Err(PortError::BadName { name: name.into() });
        }
        let io_err = |call: &'static str| {
            move |source: io::Error| PortError::Io {
                name: name.into(),
                call,
                source,
            }
        };
        let missing = |call: &'static str| {
            move |source: io::Error| match source.raw_os_error() {
                Some(libc::ENODEV) => PortError::NoSuchInterface { name: name.into() },
                _ => PortError::Io {
                    name: name.into(),
                    call,
                    source,
                },
            }
        };
        let unsupported = |what: &'static str| {
            move |source: io::Error| PortError::Unsupported {
                name: name.into(),
                what,
                source,
            }
        };
        let fd = sys::packet_socket().map_err(io_err("socket(AF_PACKET, SOCK_RAW)"))?;
        let b = fd.as_fd();
        let ifindex = sys::if_index(b, name).map_err(missing("ioctl(SIOCGIFINDEX)"))?;
        let one: libc::c_int = 1;
        sys::setsockopt(b, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
            .map_err(unsupported("PACKET_IGNORE_OUTGOING"))?;
        sys::setsockopt(b, libc::SOL_PACKET, libc::PACKET_AUXDATA, &one)
            .map_err(io_err("setsockopt(PACKET_AUXDATA)"))?;
        if cfg.vnet_hdr {
            sys::setsockopt(b, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
                .map_err(unsupported("PACKET_VNET_HDR"))?;
        }
        set_buf(b, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, cfg.rcvbuf)
            .map_err(io_err("setsockopt(SO_RCVBUF)"))?;
        set_buf(b, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, cfg.sndbuf)
            .map_err(io_err("setsockopt(SO_SNDBUF)"))?;
        sys::bind_all(b, ifindex).map_err(missing("bind(ETH_P_ALL)"))?;
        if cfg.promisc {
            sys::add_promisc(b, ifindex).map_err(missing("setsockopt(PACKET_ADD_MEMBERSHIP)"))?;
        }
        let mtu = sys::if_mtu(b, name).map_err(missing("ioctl(SIOCGIFMTU)"))?;
        Ok(AfPacket::assemble(name.into(), fd, ifindex, mtu, cfg))
    }

    /// Takes over an `AF_PACKET` socket opened (by [`AfPacket::open`], in this or another
    /// process, e.g. received over `SCM_RIGHTS` in a hitless restart) and already bound to an
    /// interface. Its options (promiscuity, ignore-outgoing, auxdata, vnet header) are the
    /// socket's and are kept; `cfg` gives the batch size only.
    pub fn adopt(fd: OwnedFd, cfg: AfPacketConfig) -> Result<AfPacket, PortError> {
        let unnamed = |call: &'static str| {
            move |source: io::Error| PortError::Io {
                name: "(adopted socket)".into(),
                call,
                source,
            }
        };
        let b = fd.as_fd();
        let ifindex = sys::bound_ifindex(b).map_err(unnamed("getsockname"))?;
        let name = sys::if_name(b, ifindex).map_err(|source| match source.raw_os_error() {
            Some(libc::ENODEV) => PortError::Gone {
                name: "(adopted socket)".into(),
                ifindex,
            },
            _ => unnamed("ioctl(SIOCGIFNAME)")(source),
        })?;
        let vnet = sys::getsockopt_int(b, libc::SOL_PACKET, libc::PACKET_VNET_HDR)
            .map_err(unnamed("getsockopt(PACKET_VNET_HDR)"))?
            != 0;
        let mtu = sys::if_mtu(b, &name).map_err(|source| PortError::Io {
            name: name.clone(),
            call: "ioctl(SIOCGIFMTU)",
            source,
        })?;
        Ok(AfPacket::assemble(
            name,
            fd,
            ifindex,
            mtu,
            AfPacketConfig {
                vnet_hdr: vnet,
                ..cfg
            },
        ))
    }

    fn assemble(name: String, fd: OwnedFd, ifindex: u32, mtu: u32, cfg: AfPacketConfig) -> Self {
        AfPacket {
            name,
            fd,
            ifindex,
            mtu,
            vnet: cfg.vnet_hdr,
            gone: false,
            rx: RxBufs::new(cfg.batch.clamp(1, MAX_BATCH), RX_SLOT, VLAN_HLEN),
            seg: Segments::new(),
            stats: PortStats::default(),
        }
    }

    /// Gives up the socket (for handing it to another process); see [`AfPacket::adopt`].
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// True when the socket exchanges offload metadata with the kernel (`PACKET_VNET_HDR`).
    pub fn vnet_hdr(&self) -> bool {
        self.vnet
    }

    /// Reads the interface MTU again (after an `ip link set mtu`) and returns it.
    pub fn refresh_mtu(&mut self) -> Result<u32, PortError> {
        self.check()?;
        self.mtu = sys::if_mtu(self.fd.as_fd(), &self.name)
            .map_err(|e| self.io("ioctl(SIOCGIFMTU)", e))?;
        Ok(self.mtu)
    }

    /// `Ok` while the interface the port is bound to exists; [`PortError::Gone`] once it was
    /// deleted or moved out of the namespace.
    pub fn check(&self) -> Result<(), PortError> {
        if self.gone {
            return Err(self.gone_err());
        }
        match sys::if_name(self.fd.as_fd(), self.ifindex) {
            Ok(_) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Err(self.gone_err()),
            Err(e) => Err(self.io("ioctl(SIOCGIFNAME)", e)),
        }
    }

    /// Waits up to `timeout` (forever with `None`) until frames or an error event are waiting.
    /// For simple loops and tests; an event loop waits on [`FramePort::fd`] instead.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, PortError> {
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        match sys::poll_one(self.fd.as_fd(), libc::POLLIN, ms) {
            Ok(ev) => Ok(ev != 0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            Err(e) => Err(self.io("poll", e)),
        }
    }

    fn gone_err(&self) -> PortError {
        PortError::Gone {
            name: self.name.clone(),
            ifindex: self.ifindex,
        }
    }

    fn io(&self, call: &'static str, source: io::Error) -> PortError {
        PortError::Io {
            name: self.name.clone(),
            call,
            source,
        }
    }

    /// Turns a socket error into the port event it means: `ENETDOWN`, `ENXIO` and `ENODEV` are
    /// what a socket reports when its interface goes down or away; which one it was is asked of
    /// the kernel (does the index still exist?).
    fn classify(&mut self, call: &'static str, e: io::Error) -> PortError {
        match e.raw_os_error() {
            Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV) => match self.check() {
                Ok(()) => PortError::LinkDown {
                    name: self.name.clone(),
                },
                Err(err) => {
                    self.gone = err.is_gone();
                    err
                }
            },
            _ => self.io(call, e),
        }
    }

    fn tx_fail(&mut self, call: &'static str, e: io::Error, len: usize) -> TxFail {
        match e.raw_os_error() {
            Some(libc::EAGAIN) => TxFail::Full,
            Some(libc::EMSGSIZE) => {
                // The MTU may have changed under us; report the current one.
                if let Ok(m) = sys::if_mtu(self.fd.as_fd(), &self.name) {
                    self.mtu = m;
                }
                TxFail::Frame(PortError::FrameTooBig {
                    name: self.name.clone(),
                    len,
                    max: self.max_frame(),
                })
            }
            Some(libc::EINVAL | libc::ENOBUFS) => TxFail::Frame(self.io(call, e)),
            _ => TxFail::Port(self.classify(call, e)),
        }
    }

    /// Sends one frame whose offload metadata the socket cannot carry: completes its checksum
    /// and segments it in software, then sends the pieces. `Ok(false)`: the send buffer filled
    /// before the first piece went (the frame was not consumed).
    fn send_software(&mut self, frame: &[u8], off: &Offload) -> Result<bool, TxFail> {
        // The segment buffer is lent out so the send loop can borrow the port mutably.
        let mut seg = std::mem::take(&mut self.seg);
        let r = self.send_segments(frame, off, &mut seg);
        self.seg = seg;
        r
    }

    fn send_segments(
        &mut self,
        frame: &[u8],
        off: &Offload,
        seg: &mut Segments,
    ) -> Result<bool, TxFail> {
        if let Err(source) = offload::segment(frame, off, seg) {
            return Err(TxFail::Frame(PortError::Offload {
                name: self.name.clone(),
                source,
            }));
        }
        self.stats.tx_software_offload += 1;
        let mut slices = [TxSlice {
            vnet: None,
            frame: &[],
        }; MAX_BATCH];
        let total = seg.len();
        // Segments taken from the front (sent or refused one by one), and of those refused.
        let (mut sent, mut dropped) = (0, 0);
        while sent < total {
            let mut k = 0;
            for (s, f) in slices.iter_mut().zip(seg.iter().skip(sent)) {
                s.frame = f;
                k += 1;
            }
            match sys::send_many(self.fd.as_fd(), &slices[..k]) {
                Ok(0) => break,
                Ok(m) => {
                    for s in &slices[..m] {
                        self.stats.tx_frames += 1;
                        self.stats.tx_bytes += s.frame.len() as u64;
                    }
                    sent += m;
                }
                Err(e) => {
                    let len = slices[0].frame.len();
                    match self.tx_fail("sendmmsg", e, len) {
                        TxFail::Full if sent == 0 => return Ok(false),
                        // Part of the frame went out: the rest is dropped, the frame consumed.
                        TxFail::Full => break,
                        TxFail::Frame(_) => {
                            sent += 1;
                            dropped += 1;
                        }
                        fail @ TxFail::Port(_) => return Err(fail),
                    }
                }
            }
        }
        self.stats.tx_dropped += (total - sent.min(total) + dropped) as u64;
        Ok(true)
    }
}

/// Sets a socket buffer size, privileged first (above the sysctl limit), then unprivileged.
fn set_buf(
    fd: BorrowedFd<'_>,
    force: libc::c_int,
    plain: libc::c_int,
    bytes: usize,
) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    sys::setsockopt(fd, libc::SOL_SOCKET, force, &v)
        .or_else(|_| sys::setsockopt(fd, libc::SOL_SOCKET, plain, &v))
}

impl FramePort for AfPacket {
    fn name(&self) -> &str {
        &self.name
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn ifindex(&self) -> u32 {
        self.ifindex
    }

    fn mtu(&self) -> u32 {
        self.mtu
    }

    fn link_up(&self) -> Result<bool, PortError> {
        self.check()?;
        let b = self.fd.as_fd();
        let name = match sys::if_name(b, self.ifindex) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => return Err(self.gone_err()),
            Err(e) => return Err(self.io("ioctl(SIOCGIFNAME)", e)),
        };
        let flags = sys::if_flags(b, &name).map_err(|e| self.io("ioctl(SIOCGIFFLAGS)", e))?;
        let want = (libc::IFF_UP | libc::IFF_RUNNING) as u32;
        Ok(flags & want == want)
    }

    /// Returns how many frames were taken from the socket (those dropped as truncated or with an
    /// undecodable offload header included, and counted in [`PortStats`]): 0 means none waited.
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8], &RxMeta)) -> Result<usize, PortError> {
        if self.gone {
            return Err(self.gone_err());
        }
        let mut done = [RxDone::default(); MAX_BATCH];
        let n = match sys::recv_many(self.fd.as_fd(), &mut self.rx, self.vnet, &mut done) {
            Ok(n) => n,
            Err(e) => return Err(self.classify("recvmmsg", e)),
        };
        let vlen = if self.vnet { VIRTIO_NET_HDR_LEN } else { 0 };
        let (slot, head) = (self.rx.slot, self.rx.headroom);
        for (i, d) in done.iter().take(n).enumerate() {
            if d.flags & libc::MSG_TRUNC != 0 {
                self.stats.rx_truncated += 1;
                continue;
            }
            let Some(flen) = d.len.checked_sub(vlen) else {
                self.stats.rx_bad_offload += 1;
                continue;
            };
            let mut off = if self.vnet {
                match Offload::from_virtio_hdr(&self.rx.vnet[i]) {
                    Ok(o) => o,
                    Err(_) => {
                        self.stats.rx_bad_offload += 1;
                        continue;
                    }
                }
            } else {
                Offload::NONE
            };
            let aux = sys::auxdata(&self.rx.cmsg[i].0[..d.cmsg_len]);
            let buf = &mut self.rx.data[i * slot..(i + 1) * slot];
            let flen = flen.min(slot - head);
            let mut start = head;
            let mut vlan = None;
            if let Some(a) = aux
                && a.tp_status & libc::TP_STATUS_VLAN_VALID != 0
                && flen >= 12
            {
                let tpid = if a.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                    a.tp_vlan_tpid
                } else {
                    0x8100
                };
                let tag = VlanTag {
                    tpid,
                    tci: a.tp_vlan_tci,
                };
                // Move the MAC addresses into the headroom and put the tag after them.
                buf.copy_within(head..head + 12, head - VLAN_HLEN);
                buf[head + 8..head + 10].copy_from_slice(&tpid.to_be_bytes());
                buf[head + 10..head + 12].copy_from_slice(&tag.tci.to_be_bytes());
                start = head - VLAN_HLEN;
                off = off.shifted(VLAN_HLEN as u16);
                vlan = Some(tag);
                self.stats.rx_vlan_restored += 1;
            }
            let frame = &buf[start..head + flen];
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += frame.len() as u64;
            f(frame, &RxMeta { offload: off, vlan });
        }
        Ok(n)
    }

    fn send(&mut self, frame: &[u8], meta: &TxMeta) -> Result<bool, PortError> {
        if self.gone {
            return Err(self.gone_err());
        }
        let r = if !self.vnet && !meta.offload.is_none() {
            self.send_software(frame, &meta.offload)
        } else {
            let hdr = meta.offload.to_virtio_hdr();
            let s = TxSlice {
                vnet: self.vnet.then_some(&hdr[..]),
                frame,
            };
            match sys::send_many(self.fd.as_fd(), &[s]) {
                Ok(1) => {
                    self.stats.tx_frames += 1;
                    self.stats.tx_bytes += frame.len() as u64;
                    Ok(true)
                }
                Ok(_) => Ok(false),
                Err(e) => match self.tx_fail("sendmsg", e, frame.len()) {
                    TxFail::Full => Ok(false),
                    fail => Err(fail),
                },
            }
        };
        match r {
            Ok(sent) => Ok(sent),
            Err(TxFail::Full) => Ok(false),
            Err(TxFail::Frame(e) | TxFail::Port(e)) => Err(e),
        }
    }

    fn send_batch(&mut self, frames: &[TxFrame<'_>]) -> Result<usize, PortError> {
        if self.gone {
            return Err(self.gone_err());
        }
        let mut hdrs = [[0u8; VIRTIO_NET_HDR_LEN]; MAX_BATCH];
        let mut done = 0;
        while done < frames.len() {
            let first = &frames[done];
            if !self.vnet && !first.meta.offload.is_none() {
                match self.send_software(first.frame, &first.meta.offload) {
                    Ok(true) => done += 1,
                    Ok(false) | Err(TxFail::Full) => return Ok(done),
                    Err(TxFail::Frame(_)) => {
                        self.stats.tx_dropped += 1;
                        done += 1;
                    }
                    Err(TxFail::Port(e)) => return Err(e),
                }
                continue;
            }
            // The longest run of frames that go to the kernel as they are.
            let run = frames[done..]
                .iter()
                .take(MAX_BATCH)
                .take_while(|f| self.vnet || f.meta.offload.is_none())
                .count();
            if self.vnet {
                for (h, f) in hdrs.iter_mut().zip(&frames[done..done + run]) {
                    *h = f.meta.offload.to_virtio_hdr();
                }
            }
            let mut slices = [TxSlice {
                vnet: None,
                frame: &[],
            }; MAX_BATCH];
            for ((s, f), h) in slices.iter_mut().zip(&frames[done..done + run]).zip(&hdrs) {
                *s = TxSlice {
                    vnet: self.vnet.then_some(&h[..]),
                    frame: f.frame,
                };
            }
            match sys::send_many(self.fd.as_fd(), &slices[..run]) {
                Ok(0) => return Ok(done),
                Ok(m) => {
                    for f in &frames[done..done + m] {
                        self.stats.tx_frames += 1;
                        self.stats.tx_bytes += f.frame.len() as u64;
                    }
                    done += m;
                }
                Err(e) => match self.tx_fail("sendmmsg", e, first.frame.len()) {
                    TxFail::Full => return Ok(done),
                    TxFail::Frame(_) => {
                        self.stats.tx_dropped += 1;
                        done += 1;
                    }
                    TxFail::Port(e) => return Err(e),
                },
            }
        }
        Ok(done)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}
