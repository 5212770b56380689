//! Real frame devices the datapath's shell drives: the [`FramePort`] trait and its AF_PACKET
//! implementation, [`AfPacket`]; and [`GreSender`], the raw GRE sockets mirror copies leave by.
//!
//! # What it does
//!
//! A [`FramePort`] moves whole Ethernet frames between the datapath and one kernel interface (a
//! VM's tap, a pod's veth, a NIC): a file descriptor to wait on for readiness, a batched receive
//! that hands each frame to a callback without allocating, single and batched sends, and what the
//! shell needs to know about the link (index, MTU, up or down). Frames come with their offload
//! metadata ([`hf_wire::offload::Offload`]: partial checksums and segmentation of super-frames) so
//! that large TCP segments cross the datapath whole, and with any VLAN tag the kernel had moved out
//! of the frame put back in.
//!
//! # What it does not do
//!
//! No pipeline, no flow cache, no threads and no event loop: the shell owns the loop (it waits on
//! [`FramePort::fd`], calls [`FramePort::recv_batch`], runs the core, sends what the core
//! transmits). No rtnetlink: a port learns that its interface went down or away from the errors
//! the kernel gives its socket and from `ioctl`s on that socket. Not AF_XDP (a later port behind
//! the same trait).
//!
//! # Lifecycle of a port (appear, disappear, come back)
//!
//! - Opening a name that does not exist is [`PortError::NoSuchInterface`].
//! - An interface set down makes the next receive or send return [`PortError::LinkDown`] once;
//!   the socket stays bound and frames flow again when the link comes up (the kernel re-attaches
//!   it). [`FramePort::link_up`] polls the state.
//! - An interface deleted (or moved to another namespace) makes the next receive or send return
//!   [`PortError::Gone`]; the socket never sees a frame again and its descriptor stops being
//!   readable (no busy loop). The shell drops the port; when an interface of that name appears
//!   again (with a new index), [`AfPacket::open`] attaches to it.
//!
//! # MTU
//!
//! A port accepts frames up to [`FramePort::max_frame`] (MTU + the 14-byte Ethernet header, + 4
//! for a frame carrying an 802.1Q tag); longer frames are legal only as super-frames marked for
//! segmentation ([`TxMeta::offload`]). For ports whose traffic leaves through a Geneve tunnel, the
//! VM-facing MTU is [`hf_wire::geneve::inner_mtu`] of the underlay's (58 bytes less over IPv4, 78
//! over IPv6).

mod afpacket;
mod gre;
mod sys;

use std::os::fd::BorrowedFd;

pub use hf_wire::offload::{Csum, Gso, GsoKind, Offload, OffloadError};

pub use self::afpacket::{AfPacket, AfPacketConfig};
pub use self::gre::GreSender;

/// The Ethernet header's length, which an MTU does not count.
pub const ETH_HLEN: usize = 14;
/// An 802.1Q / 802.1ad tag's length.
pub const VLAN_HLEN: usize = 4;

/// A VLAN tag the kernel had taken out of a received frame (hardware or software VLAN
/// acceleration), which the port put back in front of the frame's ethertype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// The tag protocol: 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub tpid: u16,
    /// Priority, DEI and VLAN id.
    pub tci: u16,
}

impl VlanTag {
    /// The 12-bit VLAN id.
    pub fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }
}

/// What a port knows about a received frame besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// Checksum and segmentation state. Offsets in it are relative to the frame as handed to the
    /// callback (with the VLAN tag back in).
    pub offload: Offload,
    /// The tag the port re-inserted, if the kernel had stripped one (already in the frame).
    pub vlan: Option<VlanTag>,
}

impl RxMeta {
    /// The metadata to send this frame on unchanged (a relay's case).
    pub fn to_tx(&self) -> TxMeta {
        TxMeta {
            offload: self.offload,
        }
    }
}

/// What a port needs to know about a frame to send besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxMeta {
    /// Checksum and segmentation still to be done by whoever puts the frame on a wire. A port
    /// that cannot hand them to the kernel does them in software ([`hf_wire::offload`]).
    pub offload: Offload,
}

/// One frame of a [`FramePort::send_batch`].
#[derive(Debug, Clone, Copy)]
pub struct TxFrame<'a> {
    /// The complete Ethernet frame.
    pub frame: &'a [u8],
    /// Its metadata.
    pub meta: TxMeta,
}

/// Counters a port keeps (monotonic since it was opened).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Frames handed to the receive callback.
    pub rx_frames: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Frames received with a VLAN tag the port put back.
    pub rx_vlan_restored: u64,
    /// Frames dropped because they did not fit a receive buffer.
    pub rx_truncated: u64,
    /// Frames dropped because their offload header could not be decoded.
    pub rx_bad_offload: u64,
    /// Frames the kernel accepted for sending.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// Frames of a batch the kernel refused one by one (too big, bad metadata) and that were
    /// dropped so the rest of the batch could go.
    pub tx_dropped: u64,
    /// Super-frames segmented (or partial checksums completed) in software because the port
    /// does not pass offload metadata to the kernel.
    pub tx_software_offload: u64,
}

/// Why a port operation failed. Every variant names the interface; I/O errors also name the call.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// There is no interface of that name (in the calling thread's network namespace).
    #[error("{name}: no such interface")]
    NoSuchInterface {
        /// The interface name.
        name: String,
    },
    /// The name cannot be an interface name (empty, too long, or with a NUL byte).
    #[error("{name:?}: not a valid interface name")]
    BadName {
        /// The name as given.
        name: String,
    },
    /// The interface the port was bound to was deleted or left the namespace. The port is dead:
    /// drop it, and open a new one when the interface is back.
    #[error("{name}: interface (index {ifindex}) is gone")]
    Gone {
        /// The interface name.
        name: String,
        /// The index it had.
        ifindex: u32,
    },
    /// The interface is down. The port stays usable: frames flow again once it is up.
    #[error("{name}: link is down")]
    LinkDown {
        /// The interface name.
        name: String,
    },
    /// A frame is longer than the interface takes and is not marked for segmentation.
    #[error("{name}: frame of {len} bytes is longer than the {max} the interface takes")]
    FrameTooBig {
        /// The interface name.
        name: String,
        /// The frame's length.
        len: usize,
        /// The longest frame the interface takes ([`FramePort::max_frame`]).
        max: usize,
    },
    /// The frame's offload metadata does not match its bytes, so it could not be completed or
    /// segmented in software, or the kernel refused it (`EINVAL`).
    #[error("{name}: offload metadata does not fit the frame: {source}")]
    Offload {
        /// The interface name.
        name: String,
        /// What did not fit.
        source: OffloadError,
    },
    /// The kernel lacks something the port needs (e.g. `PACKET_IGNORE_OUTGOING`, Linux 4.20).
    #[error("{name}: {what} is not supported by this kernel: {source}")]
    Unsupported {
        /// The interface name.
        name: String,
        /// The feature.
        what: &'static str,
        /// The kernel's answer.
        source: std::io::Error,
    },
    /// Any other failed system call.
    #[error("{name}: {call}: {source}")]
    Io {
        /// The interface name.
        name: String,
        /// The call (and option) that failed, e.g. `setsockopt(PACKET_AUXDATA)`.
        call: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl PortError {
    /// True for [`PortError::Gone`]: the port will never work again.
    pub fn is_gone(&self) -> bool {
        matches!(self, PortError::Gone { .. })
    }
}

/// A frame device the datapath's shell drives.
///
/// # Call contract
///
/// Register [`FramePort::fd`] for readability with the event loop. When it is readable, call
/// [`FramePort::recv_batch`] until it returns `Ok(0)` (or at most a budget of calls, to stay fair
/// between ports): each call hands up to a batch of frames to the callback, in arrival order, and
/// the frame slice is only valid during the callback (copy what must outlive it). Send with
/// [`FramePort::send`] or, for several frames, [`FramePort::send_batch`]. Ports never block.
/// [`PortError::LinkDown`] and [`PortError::Gone`] are events, not failures of the datapath: the
/// first pauses the port, the second ends it.
pub trait FramePort: std::fmt::Debug + Send {
    /// The interface name.
    fn name(&self) -> &str;

    /// The descriptor to wait on: readable when frames (or an error event) are waiting.
    fn fd(&self) -> BorrowedFd<'_>;

    /// The interface index the port is bound to.
    fn ifindex(&self) -> u32;

    /// The interface MTU (L3 bytes) when the port was opened or last refreshed.
    fn mtu(&self) -> u32;

    /// The longest frame the port sends or receives without segmentation: MTU + Ethernet header
    /// (a frame carrying an 802.1Q tag may be 4 bytes longer).
    fn max_frame(&self) -> usize {
        self.mtu() as usize + ETH_HLEN
    }

    /// True when the interface is administratively up and has carrier. `Err(Gone)` when it no
    /// longer exists.
    fn link_up(&self) -> Result<bool, PortError>;

    /// Receives up to one batch of waiting frames, calling `f` for each, and returns how many it
    /// took from the device, including any it dropped as malformed (counted in [`PortStats`]):
    /// 0 means nothing was waiting. Never blocks.
    fn recv_batch(&mut self, f: &mut dyn FnMut(&[u8], &RxMeta)) -> Result<usize, PortError>;

    /// Sends one frame. `Ok(false)` when the socket's send buffer is full (the frame was not
    /// sent; wait for writability or drop it).
    fn send(&mut self, frame: &[u8], meta: &TxMeta) -> Result<bool, PortError>;

    /// Sends frames in order and returns how many were consumed from the front: sent, or dropped
    /// one by one because the kernel refused that frame alone (counted in
    /// [`PortStats::tx_dropped`]). Fewer than `frames.len()` means the send buffer is full.
    fn send_batch(&mut self, frames: &[TxFrame<'_>]) -> Result<usize, PortError>;

    /// The port's counters.
    fn stats(&self) -> PortStats;
}
