//! The datapath's real interfaces: one AF_PACKET port per interface the local database
//! attaches (`Interface external_ids:iface-id`), opened, watched and closed as the database
//! and the kernel change, with what was seen of each for the write-back
//! ([`hf_datapath::local::Observed`]).
//!
//! Frames with offload metadata (a partial checksum, a segmentation super-frame) go through the
//! core whole when it can carry them ([`Datapath::handle_port_frame_offload`]) and leave with
//! their metadata for the device that sends them; otherwise (a migration watching the ports)
//! they are completed or segmented in software first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::task::{Context, Poll};
use std::time::Duration;

use hf_datapath::local::{Observed, Plan};
use hf_datapath::port::{AfPacket, AfPacketConfig, FramePort, PortError, RxMeta, TxFrame, TxMeta};
use hf_datapath::{Datapath, PortHandle};
use hf_wire::offload::{self, Offload};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Frames at least this long (super-frames) are sent at once rather than queued and copied.
const DIRECT_SEND: usize = 16 << 10;

/// Frames received per port per wake-up before the other ports get their turn.
const BUDGET: usize = 256;

/// A descriptor tokio watches (the port owns it).
struct Watched(RawFd);

impl AsRawFd for Watched {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

struct Device {
    /// Declared before `port`: deregistered before the port closes its descriptor.
    afd: AsyncFd<Watched>,
    port: AfPacket,
    iface_id: String,
    handle: PortHandle,
    /// Frames left after the budget ran out: serve again without waiting.
    pending: bool,
    /// Frames to send, back to back, with their lengths and offloads: sent in batches once
    /// the core's transmits are drained ([`Devices::flush`]).
    tx: Vec<u8>,
    tx_lens: Vec<(usize, Offload)>,
}

/// The open interfaces, and what the database wants.
#[derive(Default)]
pub struct Devices {
    /// Open devices, by interface name.
    open: BTreeMap<String, Device>,
    /// Logical port → interface name, for transmits.
    by_port: HashMap<String, String>,
    /// What the plan attaches: interface name → (logical port, MAC).
    wanted: BTreeMap<String, (String, Option<[u8; 6]>)>,
    /// Interfaces on the bridge without a logical port: looked at, not opened.
    unbound: BTreeSet<String>,
    /// Why an attached interface is not open (OVS's wording), by interface name.
    failed: BTreeMap<String, String>,
    /// Something changed that the database should hear.
    changed: bool,
    /// Segments of a super-frame, reused.
    segs: offload::Segments,
    /// Send errors met while the core's transmits were drained, handled after.
    send_errors: Vec<(String, PortError)>,
    /// Frames dropped because an interface's send buffer was full.
    pub tx_full_dropped: u64,
}

impl Devices {
    /// Takes a new plan: closes what it no longer attaches, opens what it newly does.
    pub fn apply(&mut self, plan: &Plan, dp: &mut Datapath) {
        self.wanted = plan
            .attached()
            .map(|(n, id, mac)| (n.to_string(), (id.to_string(), mac)))
            .collect();
        self.unbound = plan
            .interfaces
            .values()
            .filter(|p| p.role == hf_datapath::local::Role::Unbound)
            .map(|p| p.name.clone())
            .collect();
        let gone: Vec<String> = self
            .open
            .iter()
            .filter(|(n, d)| self.wanted.get(*n).is_none_or(|(id, _)| *id != d.iface_id))
            .map(|(n, _)| n.clone())
            .collect();
        for n in gone {
            self.close(&n, dp, "detached");
        }
        self.failed.retain(|n, _| self.wanted.contains_key(n));
        self.retry(dp);
        self.changed = true;
    }

    /// Opens the wanted interfaces that are not open (at start, after a plan, every second).
    pub fn retry(&mut self, dp: &mut Datapath) {
        let todo: Vec<(String, String, Option<[u8; 6]>)> = self
            .wanted
            .iter()
            .filter(|(n, _)| !self.open.contains_key(*n))
            .map(|(n, (id, mac))| (n.clone(), id.clone(), *mac))
            .collect();
        for (name, iface_id, mac) in todo {
            match AfPacket::open(&name) {
                Ok(port) => self.adopt(name, iface_id, mac, port, dp),
                Err(e) => {
                    let why = ovs_error(&name, &e);
                    if self.failed.get(&name) != Some(&why) {
                        tracing::warn!("{why}");
                        self.failed.insert(name, why);
                        self.changed = true;
                    }
                }
            }
        }
    }

    /// Serves an open `port` for `iface_id` (opened here, or taken over).
    pub fn adopt(
        &mut self,
        name: String,
        iface_id: String,
        mac: Option<[u8; 6]>,
        port: AfPacket,
        dp: &mut Datapath,
    ) {
        // SAFETY: the descriptor is the port's, which the `Device` below holds as long as this
        // `AsyncFd` (declared first, so dropped first) and never replaces.
        let registered = unsafe {
            AsyncFd::register_with_interest(Watched(port.fd().as_raw_fd()), Interest::READABLE)
        };
        let afd = match registered {
            Ok(a) => a,
            Err(e) => {
                let e = e.into_parts().1;
                let why = format!("could not watch network device {name} ({e})");
                tracing::warn!("{why}");
                self.failed.insert(name, why);
                self.changed = true;
                return;
            }
        };
        dp.add_port(&iface_id, mac);
        let Some(handle) = dp.port_handle(&iface_id) else {
            return;
        };
        tracing::info!(
            "{name}: attached to logical port {iface_id} (ifindex {}, mtu {})",
            port.ifindex(),
            port.mtu()
        );
        self.failed.remove(&name);
        self.by_port.insert(iface_id.clone(), name.clone());
        self.open.insert(
            name,
            Device {
                afd,
                port,
                iface_id,
                handle,
                pending: true,
                tx: Vec::new(),
                tx_lens: Vec::new(),
            },
        );
        self.changed = true;
    }

    fn close(&mut self, name: &str, dp: &mut Datapath, why: &str) {
        if let Some(d) = self.open.remove(name) {
            tracing::info!("{name}: {why}; logical port {} removed", d.iface_id);
            self.by_port.remove(&d.iface_id);
            dp.remove_port(&d.iface_id);
            self.changed = true;
        }
    }

    /// Whether any wanted interface is not open (the shell retries every second).
    pub fn missing(&self) -> bool {
        self.wanted.keys().any(|n| !self.open.contains_key(n))
    }

    /// Whether something the database should hear changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// The interface that has frames waiting (cancel safe).
    pub fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<String> {
        if let Some((n, _)) = self.open.iter().find(|(_, d)| d.pending) {
            return Poll::Ready(n.clone());
        }
        for (n, d) in &self.open {
            if let Poll::Ready(Ok(mut g)) = d.afd.poll_read_ready(cx) {
                g.clear_ready();
                return Poll::Ready(n.clone());
            }
        }
        Poll::Pending
    }

    /// Receives what `name` has waiting (up to the budget) into the core.
    pub fn receive(&mut self, name: &str, dp: &mut Datapath, now: Duration) {
        let Some(d) = self.open.get_mut(name) else {
            return;
        };
        let handle = d.handle;
        let segs = &mut self.segs;
        let mut got = 0;
        let mut result = Ok(());
        while got < BUDGET {
            let r = d.port.recv_batch(&mut |frame: &[u8], meta: &RxMeta| {
                deliver(dp, handle, frame, meta, segs, now);
            });
            match r {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        d.pending = got >= BUDGET;
        if let Err(e) = result {
            self.port_error(name, e, dp);
        }
    }

    fn port_error(&mut self, name: &str, e: PortError, dp: &mut Datapath) {
        if e.is_gone() {
            self.failed.insert(
                name.to_string(),
                format!("network device {name} is gone ({e})"),
            );
            self.close(name, dp, "the interface is gone");
        } else if matches!(e, PortError::LinkDown { .. }) {
            // Frames flow again when it is up; the write-back says it is down.
            self.changed = true;
        } else {
            tracing::warn!("{e}");
        }
    }

    /// Queues `frame` for the interface attached to logical port `port` (sent by
    /// [`Devices::flush`]); false when no interface is (an in-memory port).
    pub fn send(&mut self, port: &str, frame: &[u8], offload: &Offload) -> bool {
        let Some(name) = self.by_port.get(port) else {
            return false;
        };
        let Some(d) = self.open.get_mut(name) else {
            return false;
        };
        if frame.len() < DIRECT_SEND {
            d.tx.extend_from_slice(frame);
            d.tx_lens.push((frame.len(), *offload));
            return true;
        }
        // A super-frame goes at once (one system call carries it whole; queueing would copy
        // it again), after what waits for the same interface, to keep the order.
        let (_, (dropped, error)) = flush_one(d);
        self.tx_full_dropped += dropped;
        if let Some(e) = error {
            self.send_errors.push((name.clone(), e));
        }
        match d.port.send(frame, &TxMeta { offload: *offload }) {
            Ok(true) => {}
            Ok(false) => self.tx_full_dropped += 1,
            Err(e) => self.send_errors.push((name.clone(), e)),
        }
        true
    }

    /// Sends the queued frames, a batch (`sendmmsg`) per interface. What a full send buffer
    /// refuses is dropped, as a NIC's full queue drops; errors are handled by
    /// [`Devices::handle_send_errors`].
    pub fn flush(&mut self) {
        for (name, d) in &mut self.open {
            let (_, (dropped, error)) = flush_one(d);
            self.tx_full_dropped += dropped;
            if let Some(e) = error {
                self.send_errors.push((name.clone(), e));
            }
        }
    }

    /// The errors of the last sends.
    pub fn handle_send_errors(&mut self, dp: &mut Datapath) {
        for (name, e) in std::mem::take(&mut self.send_errors) {
            self.port_error(&name, e, dp);
        }
    }

    /// [`Devices::observed`] when `wanted`, else nothing (no system calls on the fast path).
    pub fn observed_if(&self, wanted: bool) -> (BTreeMap<String, Observed>, BTreeSet<String>) {
        if wanted {
            self.observed()
        } else {
            (BTreeMap::new(), BTreeSet::new())
        }
    }

    /// What was seen of every attached interface (for the write-back), and the ones that
    /// failed.
    pub fn observed(&self) -> (BTreeMap<String, Observed>, BTreeSet<String>) {
        let mut seen = BTreeMap::new();
        for (n, d) in &self.open {
            let up = d.port.link_up().unwrap_or(false);
            seen.insert(
                n.clone(),
                Observed {
                    ifindex: Some(d.port.ifindex()),
                    mac: read_mac(n),
                    mtu: Some(d.port.mtu()),
                    admin_up: read_admin_up(n).unwrap_or(up),
                    link_up: up,
                    error: None,
                },
            );
        }
        let mut failed: BTreeSet<String> = self.failed.keys().cloned().collect();
        for n in &self.unbound {
            let o = match read_ifindex(n) {
                Some(ifindex) => Observed {
                    ifindex: Some(ifindex),
                    mac: read_mac(n),
                    mtu: read_u32(n, "mtu"),
                    admin_up: read_admin_up(n).unwrap_or(false),
                    link_up: std::fs::read_to_string(format!("/sys/class/net/{n}/operstate"))
                        .is_ok_and(|s| s.trim() == "up"),
                    error: None,
                },
                None => {
                    failed.insert(n.clone());
                    Observed {
                        error: Some(format!(
                            "could not open network device {n} (No such device)"
                        )),
                        ..Observed::default()
                    }
                }
            };
            seen.insert(n.clone(), o);
        }
        for (n, why) in &self.failed {
            seen.insert(
                n.clone(),
                Observed {
                    error: Some(why.clone()),
                    ..Observed::default()
                },
            );
        }
        (seen, failed)
    }

    /// The open ports' descriptors with their logical port and interface, for a takeover.
    pub fn handles(&self) -> Vec<(String, String, RawFd)> {
        self.open
            .iter()
            .map(|(n, d)| (d.iface_id.clone(), n.clone(), d.port.fd().as_raw_fd()))
            .collect()
    }

    /// A port taken over from the previous process.
    pub fn adopt_fd(&mut self, port: String, ifname: String, fd: OwnedFd, dp: &mut Datapath) {
        match AfPacket::adopt(fd, AfPacketConfig::default()) {
            Ok(p) if p.name() == ifname => {
                self.wanted.insert(ifname.clone(), (port.clone(), None));
                self.adopt(ifname, port, None, p, dp)
            }
            Ok(p) => tracing::warn!(
                "--takeover: port {port}: the socket passed for {ifname} is bound to {}: closed",
                p.name()
            ),
            Err(e) => tracing::warn!("--takeover: port {port} ({ifname}): {e}: closed"),
        }
    }
}

/// Sends what waits for `d`, a batch (`sendmmsg`) at a time: how many went, and (how many a
/// full send buffer dropped, the error that stopped it).
fn flush_one(d: &mut Device) -> (usize, (u64, Option<PortError>)) {
    if d.tx_lens.is_empty() {
        return (0, (0, None));
    }
    let Device {
        port, tx, tx_lens, ..
    } = d;
    let mut frames: Vec<TxFrame<'_>> = Vec::with_capacity(tx_lens.len());
    let mut at = 0;
    for &(len, offload) in tx_lens.iter() {
        frames.push(TxFrame {
            frame: &tx[at..at + len],
            meta: TxMeta { offload },
        });
        at += len;
    }
    let mut sent = 0;
    let mut error = None;
    while sent < frames.len() {
        match port.send_batch(&frames[sent..]) {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let dropped = (frames.len() - sent) as u64;
    drop(frames);
    tx.clear();
    tx_lens.clear();
    (sent, (dropped, error))
}

/// Hands one received frame to the core, whole: a partial checksum completed, a super-frame
/// cut into segments, in software.
fn deliver(
    dp: &mut Datapath,
    handle: PortHandle,
    frame: &[u8],
    meta: &RxMeta,
    segs: &mut offload::Segments,
    now: Duration,
) {
    let o = &meta.offload;
    if o.is_none() {
        return dp.handle_port_frame_at(handle, frame, now);
    }
    // Whole through the pipeline when the datapath can carry it; else segments.
    if dp.handle_port_frame_offload(handle, frame, o, now) {
        return;
    }
    match offload::segment(frame, o, segs) {
        Ok(_) => {
            for s in segs.iter() {
                dp.handle_port_frame_at(handle, s, now);
            }
        }
        Err(_) => {
            // Not decodable as offloaded: the pipeline sees it as it came (it counts drops).
            dp.handle_port_frame_at(handle, frame, now)
        }
    }
}

/// OVS's words for an interface that cannot be opened.
fn ovs_error(name: &str, e: &PortError) -> String {
    match e {
        PortError::NoSuchInterface { .. } => {
            format!("could not open network device {name} (No such device)")
        }
        other => format!("could not open network device {name} ({other})"),
    }
}

fn read_mac(name: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    hf_datapath::local::parse_mac(s.trim())
}

fn read_u32(name: &str, what: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/{what}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn read_ifindex(name: &str) -> Option<u32> {
    read_u32(name, "ifindex")
}

fn read_admin_up(name: &str) -> Option<bool> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{name}/flags")).ok()?;
    let flags = u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()?;
    Some(flags & 1 != 0)
}
