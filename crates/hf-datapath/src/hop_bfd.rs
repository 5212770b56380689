//! BFD from logical router ports to their next hops (SB `BFD`, which northd writes from NB
//! `BFD` for static routes with `bfd`), run by the datapath as ovn-controller's pinctrl runs
//! it: the controller names the sessions whose router port is resident on this chassis
//! ([`crate::proto::ToDatapath::HopBfd`]), the datapath sends the control packets into the
//! router's ingress pipeline from that port (so the logical router routes them, resolves the
//! next hop and sends them wherever that port's traffic goes), takes what `handle_bfd_msg()`
//! punts, and reports state changes ([`crate::proto::FromDatapath::HopBfdStatus`]) for the
//! controller to write into SB `BFD.status` (from which northd takes routes out and in).
//!
//! # What it does (pinctrl's `bfd_monitor_*` and `pinctrl_handle_bfd_msg`, 23.03)
//!
//! - One session per SB row, keyed by (next hop, UDP source port); discriminator, timers and
//!   source port from the row. A new session starts `Down` (`AdminDown` while SB says
//!   `admin_down`, which sends nothing); SB turning `admin_down` stops it, turning anything
//!   else starts it again from `Down`, neither reported as a change.
//! - Control packets: Ethernet from the port's MAC to broadcast (the router's ARP resolution
//!   rewrites it), IPv4/IPv6 from the port's address to the next hop with TTL/hop limit 255,
//!   UDP from the row's `src_port` to 3784, every max(`min_tx`, the peer's required RX) less up
//!   to 25 % jitter; none while the peer asks for no packets (required RX 0), in demand mode,
//!   or `AdminDown`.
//! - Receive: the checks of RFC 5880 §6.8.6 ([`Control::parse`], and Poll with Final
//!   refused); the session is the one with the packet's source address and Your
//!   Discriminator, or, when Your Discriminator is 0 (a peer in `Down` that has not heard from
//!   us), the only session with that source address (RFC 5880 §6.8.6 allows selecting by
//!   address; pinctrl drops such packets and waits for the peer to learn ours). The state
//!   machine is pinctrl's: `Down` → `Init` on the peer's `Down`, → `Up` on its `Init`; `Init`
//!   → `Up` on `Init` or `Up`; any `Init`/`Up` → `Down` on the peer's `AdminDown` or `Down`
//!   (from `Up`). Detection time: the peer's multiplier × max(its desired TX, our required
//!   RX); 30 s until the first packet. A Poll is answered with a Final at once; a state change
//!   sends at once too (pinctrl waits for the next interval; the handshake is faster so).
//! - Status changes are reported at once (pinctrl batches them: ten changes or 5 s).
//! - A takeover hands the sessions to the new process ([`HopBfd::export`],
//!   [`HopBfd::import`]), which runs them on as they were: the next hops see nothing.
//!
//! # What it does not do
//!
//! No authentication, echo mode or demand mode of our own (a peer's demand mode stops our
//! packets, as in pinctrl); interval changes take effect without a poll sequence.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bfd::{BFD_PORT, BfdState, Control};

/// The detection time before the peer's first packet (pinctrl's initial 30 s).
const FIRST_DETECT: Duration = Duration::from_secs(30);

/// One session the controller asks for (an SB `BFD` row whose port is resident here).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HopBfdMsg {
    /// SB `BFD.logical_port` (the router port).
    pub logical_port: String,
    /// The next hop (`dst_ip`).
    pub dst_ip: IpAddr,
    /// `src_port`.
    pub src_port: u16,
    /// `disc` (ours).
    pub disc: u32,
    /// `min_tx`, ms.
    pub min_tx_ms: u32,
    /// `min_rx`, ms.
    pub min_rx_ms: u32,
    /// `detect_mult`.
    pub mult: u8,
    /// SB `status` is `admin_down`.
    pub admin_down: bool,
    /// The router datapath's tunnel key.
    pub datapath: u32,
    /// The router port's tunnel key.
    pub port: u32,
    /// The router port's MAC.
    pub src_mac: [u8; 6],
    /// The router port's address in the next hop's family.
    pub src_ip: IpAddr,
}

/// A session's state for the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopBfdStatusMsg {
    /// SB `BFD.logical_port`.
    pub logical_port: String,
    /// `dst_ip`.
    pub dst_ip: IpAddr,
    /// `src_port`.
    pub src_port: u16,
    /// The state.
    pub state: BfdState,
}

impl HopBfdStatusMsg {
    /// SB `BFD.status` for the state.
    pub fn status(&self) -> &'static str {
        status_text(self.state)
    }
}

/// SB `BFD.status` for `s`.
pub fn status_text(s: BfdState) -> &'static str {
    match s {
        BfdState::AdminDown => "admin_down",
        BfdState::Down => "down",
        BfdState::Init => "init",
        BfdState::Up => "up",
    }
}

/// A frame to run through a router's ingress pipeline from one of its ports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inject {
    /// The router datapath's tunnel key.
    pub datapath: u32,
    /// The port's tunnel key.
    pub port: u32,
    /// The Ethernet frame.
    pub frame: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    cfg: HopBfdMsg,
    state: BfdState,
    remote_disc: u32,
    /// The peer's required min RX, ms (1 before it spoke: pinctrl's RFC 5880 p. 29 start).
    remote_min_rx_ms: u32,
    remote_demand: bool,
    detect: Duration,
    last_rx: Duration,
    next_tx: Duration,
    tx_count: u64,
}

impl Session {
    fn can_send(&self) -> bool {
        self.remote_min_rx_ms != 0 && self.state != BfdState::AdminDown && !self.remote_demand
    }

    fn detect_at(&self) -> Option<Duration> {
        matches!(self.state, BfdState::Init | BfdState::Up)
            .then_some(self.last_rx.saturating_add(self.detect))
    }
}

/// The sessions of a datapath as a takeover hands them to the new process
/// ([`crate::proto::FromDatapath::ExportedSessions`]): `next_tx` is an offset from the
/// export, `last_rx` how long before it (the two processes' clocks do not share an origin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopBfdExport {
    sessions: Vec<Session>,
}

impl HopBfdExport {
    /// How many sessions it holds.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// The sessions of a datapath.
#[derive(Debug, Default)]
pub struct HopBfd {
    sessions: BTreeMap<(IpAddr, u16), Session>,
    /// Sessions whose state changed since the last [`HopBfd::take_changes`].
    changed: Vec<(IpAddr, u16)>,
    /// Control packets dropped (malformed or for no session), for counters and tests.
    pub dropped: u64,
}

impl HopBfd {
    /// The sessions as they are at `now`, for a new process ([`HopBfd::import`]).
    pub fn export(&self, now: Duration) -> HopBfdExport {
        HopBfdExport {
            sessions: self
                .sessions
                .values()
                .map(|s| Session {
                    next_tx: s.next_tx.saturating_sub(now),
                    last_rx: now.saturating_sub(s.last_rx),
                    ..s.clone()
                })
                .collect(),
        }
    }

    /// Takes over exported sessions at `now` (this process's clock), each in the state it
    /// had with its discriminators and timers: the next hops see nothing change. Replaces
    /// every session this one ran; the controller's next list is applied to them as usual.
    pub fn import(&mut self, e: HopBfdExport, now: Duration) {
        self.sessions = e
            .sessions
            .into_iter()
            .map(|s| {
                (
                    (s.cfg.dst_ip, s.cfg.src_port),
                    Session {
                        next_tx: now.saturating_add(s.next_tx),
                        last_rx: now.saturating_sub(s.last_rx),
                        ..s
                    },
                )
            })
            .collect();
        self.changed = self.sessions.keys().copied().collect();
    }

    /// Whether no session runs.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Takes the controller's sessions (all of them: one not in `list` stops).
    pub fn set(&mut self, list: Vec<HopBfdMsg>, now: Duration) {
        let mut keep = BTreeMap::new();
        for m in list {
            let key = (m.dst_ip, m.src_port);
            let s = match self.sessions.remove(&key) {
                Some(mut s) => {
                    if m.admin_down && s.state != BfdState::AdminDown {
                        s.state = BfdState::AdminDown;
                        s.remote_disc = 0;
                    } else if !m.admin_down && s.state == BfdState::AdminDown {
                        s.state = BfdState::Down;
                        s.remote_disc = 0;
                        s.next_tx = now;
                    }
                    s.cfg = m;
                    s
                }
                None => Session {
                    state: if m.admin_down {
                        BfdState::AdminDown
                    } else {
                        BfdState::Down
                    },
                    cfg: m,
                    remote_disc: 0,
                    remote_min_rx_ms: 1,
                    remote_demand: false,
                    detect: FIRST_DETECT,
                    last_rx: now,
                    next_tx: now,
                    tx_count: 0,
                },
            };
            keep.insert(key, s);
        }
        self.sessions = keep;
        self.changed.retain(|k| self.sessions.contains_key(k));
    }

    /// Every session's state (what a new controller is told).
    pub fn statuses(&self) -> Vec<HopBfdStatusMsg> {
        self.sessions.values().map(status_of).collect()
    }

    /// The sessions whose state changed since the last call.
    pub fn take_changes(&mut self) -> Vec<HopBfdStatusMsg> {
        let mut keys = std::mem::take(&mut self.changed);
        keys.sort();
        keys.dedup();
        keys.iter()
            .filter_map(|k| self.sessions.get(k))
            .map(status_of)
            .collect()
    }

    /// When [`HopBfd::poll`] next has work.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.sessions
            .values()
            .flat_map(|s| [s.can_send().then_some(s.next_tx), s.detect_at()])
            .flatten()
            .min()
    }

    /// Expires detection times and returns the control packets due.
    pub fn poll(&mut self, now: Duration) -> Vec<Inject> {
        let mut out = Vec::new();
        for (k, s) in self.sessions.iter_mut() {
            if s.detect_at().is_some_and(|d| d <= now) {
                s.state = BfdState::Down;
                s.remote_disc = 0;
                self.changed.push(*k);
            }
            if !s.can_send() || s.next_tx > now {
                continue;
            }
            out.extend(packet(s, false));
            s.tx_count += 1;
            let every_us = u64::from(s.cfg.min_tx_ms.max(s.remote_min_rx_ms)) * 1000;
            let us = every_us - every_us * crate::bfd::jitter(s.cfg.disc, s.tx_count) / 100;
            s.next_tx = now + Duration::from_micros(us.max(1000));
        }
        out
    }

    /// A control packet (`payload`, the UDP payload) from `src`: the state machine; a Final
    /// to send at once when it carried a Poll.
    pub fn receive(
        &mut self,
        src: IpAddr,
        payload: &[u8],
        now: Duration,
    ) -> Result<Option<Inject>, &'static str> {
        let c = Control::parse(payload)?;
        let flags = payload.get(1).map_or(0, |b| b & 0x3f);
        let (poll, fin, demand) = (flags & 0x20 != 0, flags & 0x10 != 0, flags & 0x02 != 0);
        if poll && fin {
            return Err("Poll and Final both set");
        }
        let key = if c.your_disc != 0 {
            self.sessions
                .iter()
                .find(|(k, s)| k.0 == src && s.cfg.disc == c.your_disc)
                .map(|(k, _)| *k)
        } else {
            let mut of_src = self.sessions.keys().filter(|k| k.0 == src);
            match (of_src.next(), of_src.next()) {
                (Some(k), None) => Some(*k),
                _ => None,
            }
        };
        let Some(key) = key else {
            return Err("no session with this source address and discriminator");
        };
        let Some(s) = self.sessions.get_mut(&key) else {
            return Err("no session with this source address and discriminator");
        };
        s.remote_disc = c.my_disc;
        let remote_min_tx_ms = c.min_tx_us / 1000;
        s.remote_min_rx_ms = c.min_rx_us / 1000;
        s.detect = Duration::from_millis(
            u64::from(c.mult) * u64::from(remote_min_tx_ms.max(s.cfg.min_rx_ms)),
        );
        let before = s.state;
        if s.state != BfdState::AdminDown {
            s.last_rx = now;
            s.state = match (s.state, c.state) {
                (BfdState::Init | BfdState::Up, BfdState::AdminDown) => BfdState::Down,
                (BfdState::Down, BfdState::Down) => BfdState::Init,
                (BfdState::Down, BfdState::Init) => BfdState::Up,
                (BfdState::Init, BfdState::Init | BfdState::Up) => BfdState::Up,
                (BfdState::Up, BfdState::Down) => BfdState::Down,
                (st, _) => st,
            };
        }
        if s.state == BfdState::Down && before != BfdState::Down {
            s.remote_disc = 0;
        }
        if s.state == BfdState::Up && demand {
            s.remote_demand = true;
        } else if !demand {
            s.remote_demand = false;
        }
        if s.state != before {
            self.changed.push(key);
            s.next_tx = now;
        }
        Ok(if poll { packet(s, true) } else { None })
    }
}

fn status_of(s: &Session) -> HopBfdStatusMsg {
    HopBfdStatusMsg {
        logical_port: s.cfg.logical_port.clone(),
        dst_ip: s.cfg.dst_ip,
        src_port: s.cfg.src_port,
        state: s.state,
    }
}

/// A session's control packet as a frame for its router's pipeline.
fn packet(s: &Session, fin: bool) -> Option<Inject> {
    let c = Control {
        diag: 0,
        state: s.state,
        mult: s.cfg.mult,
        my_disc: s.cfg.disc,
        your_disc: s.remote_disc,
        min_tx_us: s.cfg.min_tx_ms.saturating_mul(1000),
        min_rx_us: s.cfg.min_rx_ms.saturating_mul(1000),
    };
    let mut bfd = c.to_bytes();
    if fin {
        bfd[1] |= 0x10;
    }
    let mut udp = Vec::with_capacity(8 + bfd.len());
    udp.extend_from_slice(&s.cfg.src_port.to_be_bytes());
    udp.extend_from_slice(&BFD_PORT.to_be_bytes());
    udp.extend_from_slice(&((8 + bfd.len()) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(&bfd);
    let mut frame = Vec::with_capacity(14 + 40 + udp.len());
    hf_wire::reply::ip_packet_ttl(
        &mut frame,
        (hf_wire::EthAddr(s.cfg.src_mac), hf_wire::EthAddr::BROADCAST),
        (s.cfg.src_ip, s.cfg.dst_ip),
        hf_wire::ip_proto::UDP,
        &udp,
        255,
    )
    .ok()?;
    Some(Inject {
        datapath: s.cfg.datapath,
        port: s.cfg.port,
        frame,
    })
}

/// The source address and UDP payload of a BFD frame (IPv4 or IPv6, UDP to 3784, TTL/hop
/// limit 255 as RFC 5881 §5 requires of single-hop BFD).
pub fn control_of(frame: &[u8]) -> Result<(IpAddr, &[u8]), &'static str> {
    let p = hf_wire::parse(frame, 0, 0).map_err(|_| "not a parsable frame")?;
    let k = &p.key;
    if k.ip_proto != hf_wire::ip_proto::UDP || !p.has_l4() || k.tp_dst != BFD_PORT {
        return Err("not UDP to port 3784");
    }
    if k.ip_ttl != 255 {
        return Err("TTL/hop limit is not 255 (single-hop BFD)");
    }
    let src = match k.eth_type {
        hf_wire::ethertype::IPV4 => IpAddr::V4(k.ip4_src),
        hf_wire::ethertype::IPV6 => IpAddr::V6(k.ip6_src),
        _ => return Err("not IP"),
    };
    let l4 = usize::from(p.layout.l4);
    let end = usize::from(p.layout.end).min(frame.len());
    frame
        .get(l4 + 8..end)
        .map(|b| (src, b))
        .ok_or("UDP payload cut short")
}

impl crate::Datapath {
    /// [`crate::proto::ToDatapath::HopBfd`]: the sessions; every state goes to the controller
    /// at once.
    pub(crate) fn set_hop_bfd(&mut self, list: Vec<HopBfdMsg>, now: Duration) {
        let n = list.len();
        if n != self.hop_bfd.statuses().len() {
            self.log(crate::Level::Info, format!("bfd: {n} next-hop session(s)"));
        }
        self.hop_bfd.set(list, now);
        self.hop_bfd.take_changes();
        let all = self.hop_bfd.statuses();
        self.send_hop_bfd(all);
        self.run_hop_bfd(now);
    }

    fn send_hop_bfd(&mut self, s: Vec<HopBfdStatusMsg>) {
        if self
            .control
            .as_ref()
            .is_some_and(|c| c.ready() && c.version() >= crate::proto::HOP_BFD_VERSION)
        {
            self.send(&crate::proto::FromDatapath::HopBfdStatus(s));
        }
    }

    /// Sends the control packets due through the routers' pipelines, expires detection times
    /// and reports state changes.
    pub(crate) fn run_hop_bfd(&mut self, now: Duration) {
        if self.hop_bfd.is_empty() {
            return;
        }
        for i in self.hop_bfd.poll(now) {
            self.inject(i, now);
        }
        let changes = self.hop_bfd.take_changes();
        if !changes.is_empty() {
            for c in &changes {
                self.log(
                    crate::Level::Info,
                    format!("bfd: {} to {} is {}", c.logical_port, c.dst_ip, c.status()),
                );
            }
            self.send_hop_bfd(changes);
        }
    }

    /// What `handle_bfd_msg()` punted.
    pub(crate) fn hop_bfd_receive(&mut self, port: &str, frame: &[u8], now: Duration) {
        let (src, payload) = match control_of(frame) {
            Ok(x) => x,
            Err(e) => {
                self.hop_bfd.dropped += 1;
                self.log_once(
                    crate::Level::Warn,
                    format_args!("hopbfd:{port}:{e}"),
                    || format!("BFD packet on {port}: {e}: dropped"),
                );
                return;
            }
        };
        match self.hop_bfd.receive(src, payload, now) {
            Ok(Some(fin)) => self.inject(fin, now),
            Ok(None) => {}
            Err(e) => {
                self.hop_bfd.dropped += 1;
                self.log_once(crate::Level::Warn, format_args!("hopbfd:{src}:{e}"), || {
                    format!("BFD packet from {src} on {port}: {e}: dropped")
                });
            }
        }
    }

    /// Runs `i`'s frame through its router's ingress pipeline from its port.
    fn inject(&mut self, i: Inject, now: Duration) {
        let from = hf_pipeline::Ingress::Injected {
            datapath: i.datapath,
            inport: i.port,
        };
        self.run(from, &i.frame, now, false);
    }
}

#[cfg(test)]
#[path = "hop_bfd_tests.rs"]
mod tests;
