//! The few system calls an AF_PACKET port makes, as small safe functions over `libc`.
//!
//! Every `unsafe` block of the port lives here, each with the reason it is sound. Nothing here
//! knows about frames or offloads: it moves bytes and integers and returns `io::Error`s, which the
//! port turns into [`super::PortError`]s naming the interface and the call.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use libc::{c_int, c_void};

/// The most frames one `recvmmsg`/`sendmmsg` moves (a port's batch is at most this).
pub(super) const MAX_BATCH: usize = 64;

/// Bytes of control data one received frame may carry: `CMSG_SPACE(sizeof(tpacket_auxdata))` is
/// 40 on 64-bit Linux; room for one more small message.
const CMSG_BUF: usize = 64;

/// One frame's control-message buffer, aligned as `struct cmsghdr` requires.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(super) struct CmsgBuf(pub(super) [u8; CMSG_BUF]);

fn cvt(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)`: protocol 0, so the socket
/// sees no frame until it is bound to an interface with a protocol.
pub(super) fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a non-negative result is a new descriptor we own.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(fd, level, opt, &val, sizeof val)` for a plain value (an int or a C struct).
pub(super) fn setsockopt<T: Copy>(
    fd: BorrowedFd<'_>,
    level: c_int,
    opt: c_int,
    val: &T,
) -> io::Result<()> {
    // SAFETY: the pointer and length describe `val`, a live `Copy` value the kernel only reads.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (val as *const T).cast::<c_void>(),
            size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `getsockopt` of an int option.
pub(super) fn getsockopt_int(fd: BorrowedFd<'_>, level: c_int, opt: c_int) -> io::Result<c_int> {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: the pointers describe `v` and `len`, live locals the kernel writes within bounds.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&mut v as *mut c_int).cast::<c_void>(),
            &mut len,
        )
    })?;
    Ok(v)
}

/// Binds a packet socket to `ifindex` for all protocols (`ETH_P_ALL`).
pub(super) fn bind_all(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data for which all-zero bytes are a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as c_int;
    // SAFETY: the pointer and length describe `sll`, a live local the kernel only reads.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `PACKET_ADD_MEMBERSHIP` with `PACKET_MR_PROMISC`: the interface is promiscuous while the
/// socket lives (a count the kernel keeps, so other users are not disturbed).
pub(super) fn add_promisc(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<()> {
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as c_int,
        mr_type: libc::PACKET_MR_PROMISC as u16,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
}

/// An `ifreq` naming `name`, or `None` when it cannot be an interface name.
fn ifreq(name: &str) -> Option<libc::ifreq> {
    let b = name.as_bytes();
    if b.is_empty() || b.len() >= libc::IFNAMSIZ || b.contains(&0) {
        return None;
    }
    // SAFETY: ifreq is plain data (a name array and a union of plain fields); all-zero bytes are
    // a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    Some(r)
}

/// True when `name` can be an interface name.
pub(super) fn valid_name(name: &str) -> bool {
    ifreq(name).is_some()
}

/// Runs one interface `ioctl` on `fd` (answered in the socket's network namespace).
fn ifioctl(fd: BorrowedFd<'_>, req: libc::c_ulong, r: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: the SIOCGIF* requests used here read and write only within the `ifreq` `r` points
    // to, which is live and exclusively borrowed.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req, r as *mut libc::ifreq) }).map(drop)
}

fn named(name: &str) -> io::Result<libc::ifreq> {
    ifreq(name).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `SIOCGIFINDEX`: the index of `name`.
pub(super) fn if_index(fd: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    let mut r = named(name)?;
    ifioctl(fd, libc::SIOCGIFINDEX, &mut r)?;
    // SAFETY: SIOCGIFINDEX succeeded, so the kernel wrote the union's ifindex member.
    Ok(unsafe { r.ifr_ifru.ifru_ifindex } as u32)
}

/// `SIOCGIFMTU`: the MTU of `name`.
pub(super) fn if_mtu(fd: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    let mut r = named(name)?;
    ifioctl(fd, libc::SIOCGIFMTU, &mut r)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the union's mtu member.
    Ok(unsafe { r.ifr_ifru.ifru_mtu }.max(0) as u32)
}

/// `SIOCGIFFLAGS`: the interface flags of `name` (`IFF_UP`, `IFF_RUNNING`, ...).
pub(super) fn if_flags(fd: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    let mut r = named(name)?;
    ifioctl(fd, libc::SIOCGIFFLAGS, &mut r)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel wrote the union's flags member.
    Ok(u32::from(unsafe { r.ifr_ifru.ifru_flags } as u16))
}

/// `SIOCGIFNAME`: the name of the interface with index `ifindex` (`ENODEV` when there is none).
pub(super) fn if_name(fd: BorrowedFd<'_>, ifindex: u32) -> io::Result<String> {
    // SAFETY: ifreq is plain data; all-zero bytes are a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    r.ifr_ifru.ifru_ifindex = ifindex as c_int;
    ifioctl(fd, libc::SIOCGIFNAME, &mut r)?;
    let bytes: Vec<u8> = r
        .ifr_name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `getsockname` of a packet socket: the interface index it is bound to.
pub(super) fn bound_ifindex(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: sockaddr_ll is plain data; all-zero bytes are a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: the pointers describe `sll` and `len`; the kernel writes at most `len` bytes.
    cvt(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut sll as *mut libc::sockaddr_ll).cast::<libc::sockaddr>(),
            &mut len,
        )
    })?;
    if i32::from(sll.sll_family) != libc::AF_PACKET {
        return Err(io::Error::from_raw_os_error(libc::ENOTSOCK));
    }
    Ok(sll.sll_ifindex.max(0) as u32)
}

/// `poll` on one descriptor for `events`, waiting up to `timeout_ms` (-1: forever). Returns the
/// events that occurred (0 on timeout).
pub(super) fn poll_one(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    // SAFETY: one live, exclusively borrowed pollfd.
    cvt(unsafe { libc::poll(&mut p, 1, timeout_ms) })?;
    Ok(p.revents)
}

/// Receive buffers for one `recvmmsg`: per frame, the virtio-net header, the frame (after
/// `headroom` bytes kept free for a VLAN tag put back) and its control messages.
pub(super) struct RxBufs {
    pub(super) data: Vec<u8>,
    pub(super) vnet: Vec<[u8; hf_wire::offload::VIRTIO_NET_HDR_LEN]>,
    pub(super) cmsg: Vec<CmsgBuf>,
    pub(super) slot: usize,
    pub(super) headroom: usize,
}

/// What `recvmmsg` reported for one frame.
#[derive(Clone, Copy, Default)]
pub(super) struct RxDone {
    /// Bytes written: the virtio-net header (when enabled) plus the frame.
    pub(super) len: usize,
    /// `msg_flags` (`MSG_TRUNC`, `MSG_CTRUNC`).
    pub(super) flags: c_int,
    /// Bytes of control data.
    pub(super) cmsg_len: usize,
}

impl RxBufs {
    pub(super) fn new(batch: usize, slot: usize, headroom: usize) -> RxBufs {
        RxBufs {
            data: vec![0; batch * slot],
            vnet: vec![[0; hf_wire::offload::VIRTIO_NET_HDR_LEN]; batch],
            cmsg: vec![CmsgBuf([0; CMSG_BUF]); batch],
            slot,
            headroom,
        }
    }

    pub(super) fn batch(&self) -> usize {
        self.vnet.len()
    }
}

/// One nonblocking `recvmmsg` into `bufs`; fills `done[..n]` and returns `n` (0 when nothing is
/// waiting, `EAGAIN`).
pub(super) fn recv_many(
    fd: BorrowedFd<'_>,
    bufs: &mut RxBufs,
    vnet: bool,
    done: &mut [RxDone; MAX_BATCH],
) -> io::Result<usize> {
    let n = bufs.batch().min(MAX_BATCH);
    // SAFETY: mmsghdr and iovec are plain data (pointers and integers); all-zero is valid.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut iovs: [[libc::iovec; 2]; MAX_BATCH] = unsafe { std::mem::zeroed() };
    let (slot, head) = (bufs.slot, bufs.headroom);
    let frames = bufs.data.chunks_exact_mut(slot);
    for (i, ((frame, vh), cm)) in frames
        .zip(bufs.vnet.iter_mut())
        .zip(bufs.cmsg.iter_mut())
        .take(n)
        .enumerate()
    {
        let body = &mut frame[head..];
        iovs[i] = [
            libc::iovec {
                iov_base: vh.as_mut_ptr().cast(),
                iov_len: vh.len(),
            },
            libc::iovec {
                iov_base: body.as_mut_ptr().cast(),
                iov_len: body.len(),
            },
        ];
        let m = &mut hdrs[i].msg_hdr;
        m.msg_iov = if vnet {
            iovs[i].as_mut_ptr()
        } else {
            iovs[i][1..].as_mut_ptr()
        };
        m.msg_iovlen = if vnet { 2 } else { 1 };
        m.msg_control = cm.0.as_mut_ptr().cast();
        m.msg_controllen = cm.0.len();
    }
    // SAFETY: hdrs[..n] point at iovecs and buffers (frames, headers, control buffers) that are
    // live and exclusively borrowed for this call, with their true lengths; the kernel writes
    // within them and into hdrs' length and flag fields only. No timeout pointer.
    let r = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        };
    }
    let r = (r as usize).min(n);
    for (d, h) in done.iter_mut().zip(&hdrs).take(r) {
        *d = RxDone {
            len: h.msg_len as usize,
            flags: h.msg_hdr.msg_flags,
            cmsg_len: h.msg_hdr.msg_controllen.min(CMSG_BUF),
        };
    }
    Ok(r)
}

/// The `tpacket_auxdata` among a frame's control messages, if there is one. Parsed from the
/// bytes (no pointer casts): `struct cmsghdr` is `{ size_t len; int level; int type; }`, data at
/// `CMSG_ALIGN(sizeof(struct cmsghdr))`, each message padded to `size_t` alignment.
pub(super) fn auxdata(cmsg: &[u8]) -> Option<libc::tpacket_auxdata> {
    const W: usize = size_of::<usize>();
    const HDR: usize = (W + 8).next_multiple_of(W);
    let mut at = 0;
    while let Some(h) = cmsg.get(at..at + HDR) {
        let len = usize::from_ne_bytes(h[..W].try_into().ok()?);
        let level = c_int::from_ne_bytes(h[W..W + 4].try_into().ok()?);
        let ty = c_int::from_ne_bytes(h[W + 4..W + 8].try_into().ok()?);
        if len < HDR {
            return None;
        }
        let data = cmsg.get(at + HDR..at + len)?;
        if level == libc::SOL_PACKET && ty == libc::PACKET_AUXDATA && data.len() >= 20 {
            let u32_at =
                |o: usize| u32::from_ne_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
            let u16_at = |o: usize| u16::from_ne_bytes([data[o], data[o + 1]]);
            return Some(libc::tpacket_auxdata {
                tp_status: u32_at(0),
                tp_len: u32_at(4),
                tp_snaplen: u32_at(8),
                tp_mac: u16_at(12),
                tp_net: u16_at(14),
                tp_vlan_tci: u16_at(16),
                tp_vlan_tpid: u16_at(18),
            });
        }
        at += len.next_multiple_of(W);
    }
    None
}

/// One frame to send: an optional virtio-net header and the frame.
#[derive(Clone, Copy)]
pub(super) struct TxSlice<'a> {
    pub(super) vnet: Option<&'a [u8]>,
    pub(super) frame: &'a [u8],
}

/// One nonblocking `sendmmsg` of up to [`MAX_BATCH`] frames; returns how many the kernel took.
/// An error is returned only when the first frame fails (the kernel's convention).
pub(super) fn send_many(fd: BorrowedFd<'_>, frames: &[TxSlice<'_>]) -> io::Result<usize> {
    let n = frames.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    // SAFETY: mmsghdr and iovec are plain data (pointers and integers); all-zero is valid.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut iovs: [[libc::iovec; 2]; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for (i, f) in frames.iter().take(n).enumerate() {
        let mut k = 0;
        for part in [f.vnet, Some(f.frame)].into_iter().flatten() {
            iovs[i][k] = libc::iovec {
                iov_base: part.as_ptr() as *mut c_void,
                iov_len: part.len(),
            };
            k += 1;
        }
        hdrs[i].msg_hdr.msg_iov = iovs[i].as_mut_ptr();
        hdrs[i].msg_hdr.msg_iovlen = k;
    }
    // SAFETY: hdrs[..n] point at iovecs over slices borrowed for this call with their true
    // lengths; the kernel only reads them (the `*mut` is the C signature) and writes hdrs' length
    // fields.
    let r = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `socket(domain, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, proto)`: an IP raw socket (the
/// kernel writes the IP header) for one protocol, such as GRE for mirror copies.
pub(super) fn ip_raw_socket(domain: c_int, proto: c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers; a non-negative result is a new descriptor we own.
    let fd = cvt(unsafe {
        libc::socket(
            domain,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            proto,
        )
    })?;
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `sendto(fd, buf, 0, dst)` on an IP raw socket (the port field of `dst` is unused).
pub(super) fn sendto_ip(fd: BorrowedFd<'_>, buf: &[u8], dst: std::net::IpAddr) -> io::Result<()> {
    let r = match dst {
        std::net::IpAddr::V4(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `buf` and `sa` are live for the call and their lengths are theirs.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    buf.as_ptr().cast::<c_void>(),
                    buf.len(),
                    0,
                    (&sa as *const libc::sockaddr_in).cast::<libc::sockaddr>(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            }
        }
        std::net::IpAddr::V6(a) => {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: 0,
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: `buf` and `sa` are live for the call and their lengths are theirs.
            unsafe {
                libc::sendto(
                    fd.as_raw_fd(),
                    buf.as_ptr().cast::<c_void>(),
                    buf.len(),
                    0,
                    (&sa as *const libc::sockaddr_in6).cast::<libc::sockaddr>(),
                    size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            }
        }
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
