//! BFD between chassis over the Geneve tunnels (RFC 5880 asynchronous mode), run by the
//! datapath as OVS runs it on the tunnel ports ovn-controller enables it on, so that the
//! controller knows which gateways it can reach ([`crate::proto::ToDatapath::Bfd`] names the
//! peers, [`crate::proto::FromDatapath::BfdStatus`] reports their states).
//!
//! # What it does
//!
//! - One session per peer chassis (its tunnel IP), with OVS's defaults as ovn-controller
//!   leaves them: desired min TX 100 ms, required min RX 1000 ms, detect multiplier 3 (SB
//!   `SB_Global options:bfd-min-rx`, `bfd-min-tx`, `bfd-mult` override them, as in
//!   ovn-controller). Discriminators are per session, never 0.
//! - The state machine of RFC 5880 §6.8.6: Down → Init on a Down from the peer, → Up on Init or
//!   Up; Up → Down on the peer's Down or AdminDown, or when nothing came within the detection
//!   time (the peer's multiplier × max(our required RX, its desired TX)): diagnostic 1, "control
//!   detection time expired".
//! - Packets as OVS sends them on a tunnel: Ethernet to `00:23:20:00:00:01`, IPv4 169.254.1.1 →
//!   169.254.1.0 with TTL 255, UDP to 3784 from a port in 49152–65535, inside Geneve with VNI 0,
//!   no OVN option and the OAM flag; sent every negotiated interval (max of our desired TX and
//!   the peer's required RX; 1 s while not Up, as RFC 5880 §6.8.3 asks), less a deterministic
//!   jitter of up to 25 %.
//!
//! # What it does not do
//!
//! No authentication, echo mode, demand mode or poll sequences (interval changes take effect
//! at once); one session per peer IP. BFD on logical router ports (SB `BFD`, static routes'
//! next hops) is [`crate::hop_bfd`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// OVS's BFD destination MAC on tunnels.
pub const BFD_DST_MAC: [u8; 6] = [0x00, 0x23, 0x20, 0x00, 0x00, 0x01];
/// BFD's UDP port (single hop).
pub const BFD_PORT: u16 = 3784;

/// A session's state (RFC 5880 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum BfdState {
    /// AdminDown (0).
    AdminDown,
    /// Down (1).
    Down,
    /// Init (2).
    Init,
    /// Up (3).
    Up,
}

impl BfdState {
    fn code(self) -> u8 {
        match self {
            BfdState::AdminDown => 0,
            BfdState::Down => 1,
            BfdState::Init => 2,
            BfdState::Up => 3,
        }
    }

    fn from_code(c: u8) -> BfdState {
        match c & 3 {
            0 => BfdState::AdminDown,
            1 => BfdState::Down,
            2 => BfdState::Init,
            _ => BfdState::Up,
        }
    }
}

/// A session's timers (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdTimers {
    /// Desired min TX interval.
    pub min_tx_ms: u32,
    /// Required min RX interval.
    pub min_rx_ms: u32,
    /// Detect multiplier.
    pub mult: u8,
}

impl Default for BfdTimers {
    /// OVS's defaults (ovn-controller sets none unless SB asks).
    fn default() -> Self {
        BfdTimers {
            min_tx_ms: 100,
            min_rx_ms: 1000,
            mult: 3,
        }
    }
}

/// A parsed BFD control packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    /// Diagnostic code.
    pub diag: u8,
    /// The sender's state.
    pub state: BfdState,
    /// Detect multiplier.
    pub mult: u8,
    /// My discriminator (the sender's).
    pub my_disc: u32,
    /// Your discriminator (ours, as the sender knows it; 0 when unknown).
    pub your_disc: u32,
    /// Desired min TX (µs).
    pub min_tx_us: u32,
    /// Required min RX (µs).
    pub min_rx_us: u32,
}

impl Control {
    /// The 24 bytes of the packet.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[0] = (1 << 5) | (self.diag & 0x1f);
        b[1] = self.state.code() << 6;
        b[2] = self.mult;
        b[3] = 24;
        b[4..8].copy_from_slice(&self.my_disc.to_be_bytes());
        b[8..12].copy_from_slice(&self.your_disc.to_be_bytes());
        b[12..16].copy_from_slice(&self.min_tx_us.to_be_bytes());
        b[16..20].copy_from_slice(&self.min_rx_us.to_be_bytes());
        b
    }

    /// Parses a control packet, checking what RFC 5880 §6.8.6 says to discard on.
    pub fn parse(b: &[u8]) -> Result<Control, &'static str> {
        if b.len() < 24 {
            return Err("shorter than 24 bytes");
        }
        if b[0] >> 5 != 1 {
            return Err("not version 1");
        }
        let len = usize::from(b[3]);
        if len < 24 || len > b.len() {
            return Err("bad length");
        }
        if b[1] & 0x04 != 0 {
            return Err("authentication is not supported");
        }
        let mult = b[2];
        if mult == 0 {
            return Err("detect multiplier 0");
        }
        if b[1] & 0x01 != 0 {
            return Err("multipoint bit set");
        }
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let c = Control {
            diag: b[0] & 0x1f,
            state: BfdState::from_code(b[1] >> 6),
            mult,
            my_disc: word(4),
            your_disc: word(8),
            min_tx_us: word(12),
            min_rx_us: word(16),
        };
        if c.my_disc == 0 {
            return Err("my discriminator 0");
        }
        if c.your_disc == 0 && !matches!(c.state, BfdState::Down | BfdState::AdminDown) {
            return Err("your discriminator 0 in state Init or Up");
        }
        Ok(c)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    name: String,
    ip: IpAddr,
    state: BfdState,
    diag: u8,
    my_disc: u32,
    your_disc: u32,
    /// The peer's desired TX and required RX (µs), detect multiplier.
    remote_min_tx_us: u32,
    remote_min_rx_us: u32,
    remote_mult: u8,
    src_port: u16,
    next_tx: Duration,
    /// When the detection time runs out (None: not armed).
    detect_at: Option<Duration>,
    tx_count: u64,
}

/// The BFD sessions of a datapath.
#[derive(Debug, Default)]
pub struct Bfd {
    timers: BfdTimers,
    sessions: BTreeMap<IpAddr, Session>,
    next_disc: u32,
    /// States changed since the last [`Bfd::take_changed`].
    changed: bool,
}

/// The sessions of a datapath as a takeover hands them to the new process
/// ([`crate::proto::FromDatapath::ExportedSessions`]): times are offsets from the export
/// (the two processes' clocks do not share an origin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdExport {
    timers: BfdTimers,
    next_disc: u32,
    sessions: Vec<Session>,
}

impl BfdExport {
    /// How many sessions it holds.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

/// One session's state, for the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BfdStatusMsg {
    /// The peer chassis.
    pub chassis: String,
    /// Its tunnel IP.
    pub ip: IpAddr,
    /// The session's state.
    pub state: BfdState,
}

pub(crate) fn jitter(disc: u32, n: u64) -> u64 {
    // A deterministic 0..25 % (the simulator replays); RFC 5880 §6.8.7 asks for 0..25 %.
    let mut z = u64::from(disc) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (z >> 33) % 25
}

impl Bfd {
    /// The sessions as they are at `now`, for a new process ([`Bfd::import`]).
    pub fn export(&self, now: Duration) -> BfdExport {
        BfdExport {
            timers: self.timers,
            next_disc: self.next_disc,
            sessions: self
                .sessions
                .values()
                .map(|s| Session {
                    next_tx: s.next_tx.saturating_sub(now),
                    detect_at: s.detect_at.map(|d| d.saturating_sub(now)),
                    ..s.clone()
                })
                .collect(),
        }
    }

    /// Takes over exported sessions at `now` (this process's clock): each goes on in the
    /// state it had, with its discriminators, source port and timers, so that the peers see
    /// nothing change. Replaces every session this one ran.
    pub fn import(&mut self, e: BfdExport, now: Duration) {
        self.timers = e.timers;
        self.next_disc = e.next_disc;
        self.sessions = e
            .sessions
            .into_iter()
            .map(|s| {
                (
                    s.ip,
                    Session {
                        next_tx: now.saturating_add(s.next_tx),
                        detect_at: s.detect_at.map(|d| now.saturating_add(d)),
                        ..s
                    },
                )
            })
            .collect();
        self.changed = true;
    }

    /// Whether no session runs.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Replaces the peers (chassis name, tunnel IP) and timers; a peer that stays keeps its
    /// session.
    pub fn set(&mut self, peers: &[(String, IpAddr)], timers: BfdTimers, now: Duration) {
        // Intervals travel in µs in 32 bits: at most 4,294 s (SB options are the operator's).
        let ms = |v: u32| v.clamp(1, u32::MAX / 1000);
        self.timers = BfdTimers {
            min_tx_ms: ms(timers.min_tx_ms),
            min_rx_ms: ms(timers.min_rx_ms),
            mult: timers.mult.max(1),
        };
        let keep: BTreeMap<IpAddr, &String> = peers.iter().map(|(n, ip)| (*ip, n)).collect();
        let before = self.sessions.len();
        self.sessions.retain(|ip, _| keep.contains_key(ip));
        self.changed |= before != self.sessions.len();
        for (ip, name) in keep {
            if let Some(s) = self.sessions.get_mut(&ip) {
                s.name = name.clone();
                continue;
            }
            self.next_disc = self.next_disc.wrapping_add(1).max(1);
            let disc = self.next_disc ^ 0x5a00_0000;
            let src_port = 49152 + (disc % 16384) as u16;
            self.sessions.insert(
                ip,
                Session {
                    name: name.clone(),
                    ip,
                    state: BfdState::Down,
                    diag: 0,
                    my_disc: disc,
                    your_disc: 0,
                    remote_min_tx_us: 0,
                    remote_min_rx_us: 1,
                    remote_mult: 0,
                    src_port,
                    next_tx: now,
                    detect_at: None,
                    tx_count: 0,
                },
            );
            self.changed = true;
        }
    }

    /// Every session's state.
    pub fn statuses(&self) -> Vec<BfdStatusMsg> {
        self.sessions
            .values()
            .map(|s| BfdStatusMsg {
                chassis: s.name.clone(),
                ip: s.ip,
                state: s.state,
            })
            .collect()
    }

    /// Whether a state changed (or the peers did) since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// When [`Bfd::poll`] next has work.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.sessions
            .values()
            .flat_map(|s| [Some(s.next_tx), s.detect_at])
            .flatten()
            .min()
    }

    /// Expires detection times and returns the control packets due: (peer IP, UDP payload,
    /// UDP source port).
    pub fn poll(&mut self, now: Duration) -> Vec<(IpAddr, [u8; 24], u16)> {
        let mut out = Vec::new();
        let t = self.timers;
        for s in self.sessions.values_mut() {
            if s.detect_at.is_some_and(|d| d <= now) {
                s.detect_at = None;
                if s.state != BfdState::Down {
                    s.state = BfdState::Down;
                    s.diag = 1;
                    s.your_disc = 0;
                    self.changed = true;
                }
            }
            if s.next_tx <= now {
                out.push((s.ip, control_of(s, t).to_bytes(), s.src_port));
                s.tx_count += 1;
                let base_us = if s.state == BfdState::Up {
                    u64::from(t.min_tx_ms) * 1000
                } else {
                    1_000_000u64.max(u64::from(t.min_tx_ms) * 1000)
                }
                .max(u64::from(s.remote_min_rx_us));
                let us = base_us - base_us * jitter(s.my_disc, s.tx_count) / 100;
                s.next_tx = now + Duration::from_micros(us.max(1));
            }
        }
        out
    }

    /// A control packet from `src`: runs the state machine (RFC 5880 §6.8.6).
    pub fn receive(&mut self, src: IpAddr, c: &Control, now: Duration) -> Result<(), &'static str> {
        let t = self.timers;
        let Some(s) = self.sessions.get_mut(&src) else {
            return Err("no session with this peer");
        };
        if c.your_disc != 0 && c.your_disc != s.my_disc {
            return Err("your discriminator is not this session's");
        }
        s.your_disc = c.my_disc;
        s.remote_min_tx_us = c.min_tx_us;
        s.remote_min_rx_us = c.min_rx_us;
        s.remote_mult = c.mult;
        let before = s.state;
        match (s.state, c.state) {
            (st, BfdState::AdminDown) if st != BfdState::Down => {
                s.state = BfdState::Down;
                s.diag = 3;
            }
            (_, BfdState::AdminDown) => {}
            (BfdState::Down, BfdState::Down) => s.state = BfdState::Init,
            (BfdState::Down, BfdState::Init) | (BfdState::Init, BfdState::Init | BfdState::Up) => {
                s.state = BfdState::Up;
                s.diag = 0;
            }
            (BfdState::Up, BfdState::Down) => {
                s.state = BfdState::Down;
                s.diag = 3;
            }
            _ => {}
        }
        if s.state != before {
            self.changed = true;
            // Answer a state change at once (the peer's handshake moves on).
            s.next_tx = now;
        }
        // Detection time: the peer's multiplier × max(our required RX, its desired TX).
        let every = u64::from(t.min_rx_ms) * 1000;
        let det = u64::from(c.mult) * every.max(u64::from(c.min_tx_us));
        s.detect_at = Some(now + Duration::from_micros(det));
        Ok(())
    }
}

fn control_of(s: &Session, t: BfdTimers) -> Control {
    Control {
        diag: s.diag,
        state: s.state,
        mult: t.mult,
        my_disc: s.my_disc,
        your_disc: s.your_disc,
        // While not Up, at least 1 s (RFC 5880 §6.8.3).
        min_tx_us: if s.state == BfdState::Up {
            t.min_tx_ms * 1000
        } else {
            (t.min_tx_ms * 1000).max(1_000_000)
        },
        min_rx_us: t.min_rx_ms * 1000,
    }
}

/// The Ethernet frame OVS sends a BFD control packet in on a tunnel.
pub fn frame(src_mac: [u8; 6], src_port: u16, payload: &[u8; 24]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + 20 + 8 + 24);
    f.extend_from_slice(&BFD_DST_MAC);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + 8 + 24) as u16;
    let mut ip = [
        0x45, 0xc0, 0, 0, 0, 0, 0x40, 0, 255, 17, 0, 0, 169, 254, 1, 1, 169, 254, 1, 0,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let sum = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = !(((sum & 0xffff) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src_port.to_be_bytes());
    f.extend_from_slice(&BFD_PORT.to_be_bytes());
    f.extend_from_slice(&(8u16 + 24).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// The control packet in `f` if it is a BFD frame (IPv4 UDP to 3784), else `None`.
pub fn control_in(f: &[u8]) -> Option<&[u8]> {
    if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[23] != 17 {
        return None;
    }
    let ihl = usize::from(f[14] & 0xf) * 4;
    let udp = f.get(14 + ihl..)?;
    if udp.len() < 8 || u16::from_be_bytes([udp[2], udp[3]]) != BFD_PORT {
        return None;
    }
    udp.get(8..)
}

impl crate::Datapath {
    /// [`crate::proto::ToDatapath::Bfd`]: the peers and timers; the states go to the
    /// controller at once.
    pub(crate) fn set_bfd(&mut self, m: crate::proto::BfdMsg, now: Duration) {
        self.bfd.set(&m.peers, m.timers, now);
        self.log(
            crate::Level::Info,
            format!("bfd: {} session(s)", m.peers.len()),
        );
        self.bfd.take_changed();
        self.send_bfd_status();
        self.run_bfd(now);
    }

    /// Sends the controller every session's state (version-7 controllers only).
    fn send_bfd_status(&mut self) {
        if self
            .control
            .as_ref()
            .is_some_and(|c| c.ready() && c.version() >= crate::proto::MIRROR_VERSION)
        {
            let s = self.bfd.statuses();
            self.send(&crate::proto::FromDatapath::BfdStatus(s));
        }
    }

    /// Sends the control packets due, expires detection times, repeats gratuitous ARPs.
    pub(crate) fn run_bfd(&mut self, now: Duration) {
        if !self.garps.is_empty() {
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.garps)
                .into_iter()
                .partition(|g| g.0 <= now);
            self.garps = later;
            for (_, f, port) in due {
                if let Some(id) = self.ports.get(&port).map(|p| p.id) {
                    self.queue_port_frame(id, &f);
                }
            }
        }
        if self.bfd.is_empty() {
            return;
        }
        let mac = self.bfd_mac();
        for (ip, bytes, sport) in self.bfd.poll(now) {
            let f = frame(mac, sport, &bytes);
            self.queue_tunnel_oam(ip, &f);
        }
        if self.bfd.take_changed() {
            for st in self.bfd.statuses() {
                self.log(
                    crate::Level::Info,
                    format!("bfd: {} ({}) is {:?}", st.chassis, st.ip, st.state),
                );
            }
            self.send_bfd_status();
        }
    }

    /// A BFD control packet from `src` inside Geneve.
    pub(crate) fn bfd_receive(&mut self, src: IpAddr, payload: &[u8], now: Duration) {
        let r = Control::parse(payload).and_then(|c| self.bfd.receive(src, &c, now));
        if let Err(e) = r {
            self.counters.dropped += 1;
            self.log_once(crate::Level::Warn, format_args!("bfd:{src}:{e}"), || {
                format!("BFD packet from {src}: {e}: dropped")
            });
        }
        self.run_bfd(now);
    }

    /// The source MAC of this chassis's BFD frames (locally administered, from its tunnel IP).
    fn bfd_mac(&self) -> [u8; 6] {
        match self.cfg.tunnel_ip {
            IpAddr::V4(a) => {
                let o = a.octets();
                [0x02, 0x23, o[0], o[1], o[2], o[3]]
            }
            IpAddr::V6(a) => {
                let o = a.octets();
                [0x02, 0x23, o[12], o[13], o[14], o[15]]
            }
        }
    }

    /// Queues `frame` into the tunnel to `ip` behind a Geneve header with VNI 0, the OAM flag
    /// and no OVN option (how OVS sends BFD on a tunnel port).
    fn queue_tunnel_oam(&mut self, ip: IpAddr, frame: &[u8]) {
        use hf_wire::geneve::{GeneveRepr, OvnMetadata};
        let repr = GeneveRepr {
            meta: OvnMetadata {
                datapath: 0,
                ports: None,
            },
            oam: true,
        };
        self.outs
            .push_frame(hf_pipeline::Destination::Local(0), frame);
        let at = self.outs.first() + self.outs.len() - 1;
        let at = crate::core::encapsulate(&mut self.outs, at, &repr);
        self.outs.keep();
        self.tx.push_back(crate::core::TxDesc {
            to: crate::core::TxTo::Tunnel(ip),
            frame: at,
            offload: hf_wire::offload::Offload::default(),
        });
    }

    /// [`crate::proto::ToDatapath::Garps`]: each gratuitous ARP now and 2, 6, 14 and 30 s later
    /// (pinctrl's `send_garp_rarp`: five announcements, the gap doubling from 2 s).
    pub(crate) fn send_garps(&mut self, list: Vec<crate::proto::AnnounceMsg>, now: Duration) {
        for a in list {
            let Ok(ip) = a.ip.parse::<std::net::Ipv4Addr>() else {
                self.log(
                    crate::Level::Warn,
                    format!("gratuitous ARP for {:?}: not an IPv4 address", a.ip),
                );
                continue;
            };
            let f = crate::migrate::garp(a.mac, ip);
            for d in GARP_AT_MS {
                self.garps
                    .push((now + Duration::from_millis(d), f.clone(), a.via.clone()));
            }
        }
        self.run_bfd(now);
    }
}

/// When a gateway's gratuitous ARPs go out after it takes over, ms (pinctrl's backoff).
pub const GARP_AT_MS: [u64; 5] = [0, 2000, 6000, 14000, 30000];

#[cfg(test)]
mod tests {
    use super::*;

    /// A gateway's gratuitous ARPs leave by the localnet port at 0, 2, 6, 14 and 30 s (pinctrl's
    /// five announcements), then stop.
    #[test]
    fn gratuitous_arps_back_off_like_pinctrl() {
        let mut dp = crate::Datapath::new(crate::DatapathConfig::new("gw1", [192, 0, 2, 1].into()));
        dp.add_port("ln-ext", None);
        dp.send_garps(
            vec![crate::proto::AnnounceMsg {
                mac: [0, 0, 0, 0, 0x10, 1],
                ip: "172.16.0.1".into(),
                via: "ln-ext".into(),
            }],
            Duration::ZERO,
        );
        let mut sent = Vec::new();
        let mut now = Duration::ZERO;
        while now <= Duration::from_secs(60) {
            dp.handle_timeout(now);
            while let Some(t) = dp.poll_transmit() {
                if let crate::Transmit::Port { port, frame } = t {
                    assert_eq!(port, "ln-ext");
                    // ARP request, sender = target = the address.
                    assert_eq!(&frame[12..14], &[0x08, 0x06]);
                    assert_eq!(&frame[28..32], &[172, 16, 0, 1]);
                    assert_eq!(&frame[38..42], &[172, 16, 0, 1]);
                    sent.push(now.as_millis());
                }
            }
            now += Duration::from_millis(250);
        }
        assert_eq!(sent, vec![0, 2000, 6000, 14000, 30000]);
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 0, 2));

    /// Runs two sessions against each other until `until`, delivering while `link` says so;
    /// returns the states' history (time, a's state, b's state) at changes.
    fn run(
        a: &mut Bfd,
        b: &mut Bfd,
        from: Duration,
        until: Duration,
        link: impl Fn(Duration) -> bool,
    ) -> Vec<(Duration, BfdState, BfdState)> {
        let mut now = from;
        let mut hist = Vec::new();
        let st = |x: &Bfd| x.statuses()[0].state;
        while now <= until {
            for (_, bytes, _) in a.poll(now) {
                if link(now) {
                    let c = Control::parse(&bytes).expect("our packet parses");
                    b.receive(A, &c, now).expect("accepted");
                }
            }
            for (_, bytes, _) in b.poll(now) {
                if link(now) {
                    let c = Control::parse(&bytes).expect("our packet parses");
                    a.receive(B, &c, now).expect("accepted");
                }
            }
            let s = (st(a), st(b));
            if hist
                .last()
                .is_none_or(|h: &(Duration, BfdState, BfdState)| (h.1, h.2) != s)
            {
                hist.push((now, s.0, s.1));
            }
            now += Duration::from_millis(10);
        }
        hist
    }

    #[test]
    fn sessions_come_up_and_detect_a_silent_peer_in_three_seconds() {
        let (mut a, mut b) = (Bfd::default(), Bfd::default());
        a.set(&[("b".into(), B)], BfdTimers::default(), Duration::ZERO);
        b.set(&[("a".into(), A)], BfdTimers::default(), Duration::ZERO);
        let h = run(
            &mut a,
            &mut b,
            Duration::ZERO,
            Duration::from_secs(5),
            |_| true,
        );
        let last = h.last().expect("history");
        assert_eq!((last.1, last.2), (BfdState::Up, BfdState::Up), "{h:?}");
        assert!(last.0 < Duration::from_secs(2), "up late: {h:?}");
        // The link goes silent at 10 s: down 3 s (mult × required min RX) after the last
        // packet, which came within the 1 s TX interval (the peer's required min RX) before.
        let h = run(
            &mut a,
            &mut b,
            Duration::from_secs(5),
            Duration::from_secs(20),
            |t| t < Duration::from_secs(10),
        );
        let down = h
            .iter()
            .find(|x| x.1 == BfdState::Down)
            .expect("a went down");
        assert!(
            down.0 >= Duration::from_millis(12_000) && down.0 <= Duration::from_millis(13_010),
            "detected at {:?}",
            down.0
        );
        // Back: up again.
        let h = run(
            &mut a,
            &mut b,
            Duration::from_secs(20),
            Duration::from_secs(25),
            |_| true,
        );
        let last = h.last().expect("history");
        assert_eq!((last.1, last.2), (BfdState::Up, BfdState::Up), "{h:?}");
    }

    #[test]
    fn huge_or_zero_timers_are_clamped_not_overflowed() {
        let mut a = Bfd::default();
        let t = BfdTimers {
            min_tx_ms: u32::MAX,
            min_rx_ms: 0,
            mult: 0,
        };
        a.set(&[("b".into(), B)], t, Duration::ZERO);
        let sent = a.poll(Duration::ZERO);
        let c = Control::parse(&sent[0].1).expect("parses");
        assert_eq!((c.min_tx_us, c.min_rx_us, c.mult), (4_294_967_000, 1000, 1));
    }

    #[test]
    fn bad_packets_are_refused() {
        let c = Control {
            diag: 0,
            state: BfdState::Up,
            mult: 3,
            my_disc: 7,
            your_disc: 0,
            min_tx_us: 1,
            min_rx_us: 1,
        };
        assert!(
            Control::parse(&c.to_bytes()).is_err(),
            "Up with your_disc 0"
        );
        let mut b = c.to_bytes();
        b[0] = 2 << 5;
        assert!(Control::parse(&b).is_err(), "version 2");
        assert!(Control::parse(&b[..10]).is_err());
        let ok = Control {
            state: BfdState::Down,
            ..c
        };
        assert_eq!(Control::parse(&ok.to_bytes()), Ok(ok));
        let f = frame([2, 0, 0, 0, 0, 1], 49153, &ok.to_bytes());
        assert_eq!(control_in(&f), Some(&ok.to_bytes()[..]));
    }
}
