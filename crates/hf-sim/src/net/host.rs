//! A simulated host: a smoltcp `Interface` (Ethernet) on an in-memory device, with the
//! applications the simulator's scenarios use, and the record of what they saw.
//!
//! # What it does
//!
//! - Addressing: static IPv4/IPv6 addresses and default gateways, or a DHCPv4 client (smoltcp's
//!   `dhcpv4::Socket`; every accepted lease goes to the record, the address and default route are
//!   applied to the interface). smoltcp answers ARP, NDP and ICMP echo itself.
//! - Ping: [`Host::ping`] sends `count` ICMP(v6) echo requests, one per `interval`, and records
//!   RTTs; an answer later than [`PING_TIMEOUT`] after the last request left the host is no
//!   longer waited for (a request smoltcp holds for ARP/ND counts as leaving at most
//!   [`UNSENT_WAIT`] after it was queued).
//! - UDP: [`Host::listen_udp_echo`] echoes every datagram back; [`Host::udp_exchange`] sends
//!   `count` datagrams and checks every echo byte for byte.
//! - TCP: [`Host::listen_tcp`] accepts any number of connections on a port (a fresh listening
//!   socket replaces each one that accepted); [`Host::start_transfer`] opens a connection that
//!   uploads or downloads a verified byte pattern ([`super::tcp`]).
//! - Announcements after a migration: [`Host::announce_rarp`], [`Host::announce_garp`]; a
//!   migration's downtime: [`Host::pause`] / [`Host::resume`].
//! - Analysis of its own egress and ingress ([`super::frames`]): retransmissions and resets per
//!   connection, DHCP messages sent.
//!
//! The host is sans-I/O: [`Host::handle_frame`] / [`Host::handle_timeout`] take `now`, frames
//! leave through [`Host::poll_transmit`], [`Host::poll_timeout`] says when to call back. smoltcp
//! runs on `Instant::from_micros(now)`, its random seed comes from the host's [`Rng`].
//!
//! # What it does not do
//!
//! No DHCPv6, no SLAAC (IPv6 addresses are static), no DNS client, no IP fragmentation, no
//! congestion control beyond smoltcp's window (no `socket-tcp-reno`/`cubic`). A frame that is not
//! Ethernet is counted in `malformed_in` and dropped. IPv4 neighbours are resolved per
//! neighbour by [`super::arp`] in front of smoltcp; IPv6 neighbour discovery is smoltcp's own, with
//! its limits (one unanswered lookup silences other new neighbours for a second; a reply to an
//! unknown sender is dropped while it solicits).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use smoltcp::iface::{
    Config, Interface, PollIngressSingleResult, PollResult, SocketHandle, SocketSet,
};
use smoltcp::phy::Device;
use smoltcp::socket::{dhcpv4, icmp, tcp, udp};
use smoltcp::time::Instant;
use smoltcp::wire::{
    DhcpMessageType, EthernetAddress, HardwareAddress, Icmpv4Packet, Icmpv4Repr, Icmpv6Packet,
    Icmpv6Repr, IpAddress, IpCidr, IpEndpoint, Ipv4Cidr,
};

use super::arp::{self, Resolver};
use super::config::Wire;
pub use super::config::{DEFAULT_TCP_BUFFER, HostConfig, HostError};
use super::frames::{self, Class, FlowTracker};
use super::record::{
    DhcpLease, DhcpRecord, HostRecord, PingRecord, TcpRecord, UdpRecord, UdpServerRecord,
};
use super::rng::Rng;
use super::tcp::{Conn, Direction, Transfer, fill_pattern};

/// How long a ping or UDP session waits for answers after its last request.
pub const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a ping or UDP session waits for requests smoltcp still holds (next hop unresolved)
/// before it counts them as left: Linux's three ARP probes a second apart.
pub const UNSENT_WAIT: Duration = Duration::from_secs(3);
/// Upper bound on smoltcp poll rounds per call (a safety net; one round sends at most one segment
/// per socket).
const MAX_ROUNDS: usize = 100_000;
const FIRST_EPHEMERAL: u16 = 49152;

/// The timing a ping or UDP session keeps: one request per `interval`, when each was queued,
/// when the last one left the host.
#[derive(Debug)]
struct Pacing {
    interval: Duration,
    next_at: Duration,
    /// When request `seq` was queued, by sequence number.
    sent_at: Vec<Duration>,
    last_emitted: Option<Duration>,
}

impl Pacing {
    /// The first request is due at `now`.
    fn new(interval: Duration, now: Duration) -> Pacing {
        Pacing {
            interval,
            next_at: now,
            sent_at: Vec::new(),
            last_emitted: None,
        }
    }

    /// Whether another of `count` requests (`sent` so far) is due at `now`.
    fn due(&self, sent: u64, count: u64, now: Duration) -> bool {
        sent < count && self.next_at <= now
    }

    /// A request was queued at `now`; the next is due one interval later.
    fn queued(&mut self, now: Duration) {
        self.sent_at.push(now);
        self.next_at = now + self.interval;
    }

    /// The round trip in µs of an answer at `now` to request `seq`; `None` for a request never
    /// sent.
    fn rtt_us(&self, seq: usize, now: Duration) -> Option<u64> {
        self.sent_at.get(seq).map(|&t| us(now.saturating_sub(t)))
    }

    /// When the session stops waiting: [`PING_TIMEOUT`] after the last request left the host,
    /// or after [`UNSENT_WAIT`] more for requests still held (`emitted` of them left).
    fn deadline(&self, emitted: u64) -> Duration {
        let last_queued = self.sent_at.last().copied().unwrap_or_default();
        match self.last_emitted {
            Some(e) if emitted >= self.sent_at.len() as u64 => e.max(last_queued) + PING_TIMEOUT,
            _ => last_queued + UNSENT_WAIT + PING_TIMEOUT,
        }
    }

    /// When the session next needs the host: its next request, or when it stops waiting.
    fn wake(&self, sent: u64, count: u64, emitted: u64) -> Duration {
        if sent < count {
            self.next_at
        } else {
            self.deadline(emitted)
        }
    }

    /// Whether the session is over at `now`: every request sent, and all answered or the wait
    /// is over.
    fn over(&self, now: Duration, sent: u64, count: u64, answered: u64, emitted: u64) -> bool {
        sent >= count && (answered >= count || now >= self.deadline(emitted))
    }
}

#[derive(Debug)]
struct EchoSession {
    handle: SocketHandle,
    local: SocketAddr,
    dst: IpAddr,
    port: u16,
    len: usize,
    pacing: Pacing,
    rec: UdpRecord,
    key: u32,
    /// When the last echo arrived (or the session started).
    last_echo: Duration,
    /// Requests already judged answered or lost by [`PING_TIMEOUT`].
    judged: usize,
}

impl EchoSession {
    /// The record as of `now`: the stall includes a gap still open while requests are
    /// outstanding.
    fn snapshot(&self, now: Duration) -> UdpRecord {
        let mut r = self.rec.clone();
        if !r.done && r.sent > r.answered {
            r.stall_max_us = r.stall_max_us.max(us(now.saturating_sub(self.last_echo)));
        }
        r
    }
}

#[derive(Debug)]
struct PingSession {
    handle: SocketHandle,
    dst: IpAddr,
    pacing: Pacing,
    rec: PingRecord,
}

#[derive(Debug)]
struct TcpEntry {
    handle: Option<SocketHandle>,
    local: SocketAddr,
    remote: SocketAddr,
    conn: Conn,
}

/// A simulated host.
pub struct Host {
    cfg: HostConfig,
    iface: Interface,
    dev: Wire,
    sockets: SocketSet<'static>,
    rng: Rng,
    outbox: VecDeque<Vec<u8>>,
    next_port: u16,
    client_seq: u64,
    listeners: BTreeMap<u16, SocketHandle>,
    /// Listening ports that accept only these peer addresses ([`Host::listen_tcp_from`]).
    allowed_peers: BTreeMap<u16, Vec<IpAddr>>,
    tcp: BTreeMap<String, TcpEntry>,
    pings: BTreeMap<String, PingSession>,
    ping_seq: u64,
    udp: BTreeMap<String, EchoSession>,
    udp_seq: u64,
    udp_servers: BTreeMap<u16, (SocketHandle, UdpServerRecord)>,
    dhcp: Option<(SocketHandle, DhcpRecord)>,
    /// Lease time of the last DHCPACK seen.
    dhcp_lease_s: Option<u32>,
    flows: FlowTracker,
    rec: HostRecord,
    wake: Option<Duration>,
    now: Duration,
    paused: bool,
    /// Per-neighbour ARP in front of smoltcp ([`super::arp`]).
    resolver: Resolver,
    /// The IPv4 default gateway in use (static or from DHCP).
    gateway4: Option<Ipv4Addr>,
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("name", &self.cfg.name)
            .field("mac", &EthernetAddress(self.cfg.mac))
            .field("addresses", &self.iface.ip_addrs())
            .field("tcp", &self.tcp.keys().collect::<Vec<_>>())
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

fn instant(now: Duration) -> Instant {
    Instant::from_micros(i64::try_from(now.as_micros()).unwrap_or(i64::MAX))
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The EUI-64 link-local address of `mac` (fe80::/64, universal/local bit flipped).
pub fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::new(
        0xfe80,
        0,
        0,
        0,
        u16::from_be_bytes([mac[0] ^ 0x02, mac[1]]),
        u16::from_be_bytes([mac[2], 0xff]),
        u16::from_be_bytes([0xfe, mac[3]]),
        u16::from_be_bytes([mac[4], mac[5]]),
    )
}

fn smol_duration(d: Duration) -> smoltcp::time::Duration {
    smoltcp::time::Duration::from_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn from_instant(t: Instant) -> Duration {
    Duration::from_micros(u64::try_from(t.total_micros()).unwrap_or(0))
}

fn to_ip(a: IpAddress) -> IpAddr {
    match a {
        IpAddress::Ipv4(v) => IpAddr::V4(v),
        IpAddress::Ipv6(v) => IpAddr::V6(v),
    }
}

fn to_sock(e: IpEndpoint) -> SocketAddr {
    SocketAddr::new(to_ip(e.addr), e.port)
}

impl Host {
    /// A host on `cfg`, its interface up at `now`.
    pub fn new(cfg: HostConfig, now: Duration) -> Result<Host, HostError> {
        let m = cfg.mac;
        if m[0] & 1 != 0 || m == [0; 6] {
            return Err(HostError::Config(format!(
                "MAC {} of host {} is not a unicast address",
                EthernetAddress(m),
                cfg.name
            )));
        }
        if cfg.dhcp4 && cfg.ipv4.is_some() {
            return Err(HostError::Config(format!(
                "host {} has both a static IPv4 address and DHCP",
                cfg.name
            )));
        }
        if cfg.mtu < 576 || cfg.mtu > 65_000 {
            return Err(HostError::Config(format!(
                "MTU {} of host {} is outside 576..=65000",
                cfg.mtu, cfg.name
            )));
        }
        if cfg.ipv6.len() + usize::from(cfg.ipv4.is_some() || cfg.dhcp4) > 7 {
            return Err(HostError::Config(format!(
                "host {} has more than 7 addresses",
                cfg.name
            )));
        }
        let rng = Rng::new(cfg.seed);
        let mut dev = Wire {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            mtu: cfg.mtu,
        };
        let mut icfg = Config::new(HardwareAddress::Ethernet(EthernetAddress(m)));
        icfg.random_seed = rng.fork("smoltcp").next_u64();
        let mut iface = Interface::new(icfg, &mut dev, instant(now));
        let mut addrs: Vec<IpCidr> = Vec::new();
        if let Some((a, p)) = cfg.ipv4 {
            addrs.push(IpCidr::new(IpAddress::Ipv4(a), p));
        }
        for (a, p) in &cfg.ipv6 {
            addrs.push(IpCidr::new(IpAddress::Ipv6(*a), *p));
        }
        // Like any IPv6 host, a link-local address (EUI-64 from the MAC) unless one is given.
        if !cfg.ipv6.is_empty() && !cfg.ipv6.iter().any(|(a, _)| a.is_unicast_link_local()) {
            addrs.push(IpCidr::new(IpAddress::Ipv6(link_local(m)), 64));
        }
        for a in &addrs {
            if a.prefix_len()
                > if a.address().version() == smoltcp::wire::IpVersion::Ipv4 {
                    32
                } else {
                    128
                }
            {
                return Err(HostError::Config(format!(
                    "prefix length of {a} is too long"
                )));
            }
        }
        iface.update_ip_addrs(|v| {
            for a in addrs {
                let _ = v.push(a);
            }
        });
        if let Some(g) = cfg.gateway4 {
            iface
                .routes_mut()
                .add_default_ipv4_route(g)
                .map_err(|e| HostError::Config(format!("IPv4 gateway {g}: {e:?}")))?;
        }
        if let Some(g) = cfg.gateway6 {
            iface
                .routes_mut()
                .add_default_ipv6_route(g)
                .map_err(|e| HostError::Config(format!("IPv6 gateway {g}: {e:?}")))?;
        }
        let mut sockets = SocketSet::new(Vec::new());
        let dhcp = if cfg.dhcp4 {
            let mut d = dhcpv4::Socket::new();
            let retry = smol_duration(cfg.dhcp_retry);
            let mut rc = dhcpv4::RetryConfig::default();
            rc.discover_timeout = retry;
            rc.initial_request_timeout = retry;
            d.set_retry_config(rc);
            let h = sockets.add(d);
            Some((h, DhcpRecord::default()))
        } else {
            None
        };
        let mut host = Host {
            cfg,
            iface,
            dev,
            sockets,
            rng,
            outbox: VecDeque::new(),
            next_port: FIRST_EPHEMERAL,
            client_seq: 0,
            listeners: BTreeMap::new(),
            allowed_peers: BTreeMap::new(),
            tcp: BTreeMap::new(),
            pings: BTreeMap::new(),
            ping_seq: 0,
            udp: BTreeMap::new(),
            udp_seq: 0,
            udp_servers: BTreeMap::new(),
            dhcp,
            dhcp_lease_s: None,
            flows: FlowTracker::default(),
            rec: HostRecord::default(),
            wake: None,
            now,
            paused: false,
            resolver: Resolver::default(),
            gateway4: None,
        };
        host.gateway4 = host.cfg.gateway4;
        host.rec.dhcp = host.dhcp.as_ref().map(|(_, r)| r.clone());
        host.service(now);
        Ok(host)
    }

    /// The host's name.
    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// The host's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.cfg.mac
    }

    /// The host's configuration.
    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// The IPv4 address in use (static or leased).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.iface.ipv4_addr()
    }

    /// Every address in use, with prefix length.
    pub fn addresses(&self) -> Vec<(IpAddr, u8)> {
        self.iface
            .ip_addrs()
            .iter()
            .map(|c| (to_ip(c.address()), c.prefix_len()))
            .collect()
    }

    // ---------------------------------------------------------------- the sans-I/O surface

    /// A frame arrives from the network at `now` (dropped and counted while paused).
    pub fn handle_frame(&mut self, frame: &[u8], now: Duration) {
        self.now = self.now.max(now);
        if self.paused {
            self.rec.dropped_while_paused += 1;
            return;
        }
        self.rec.frames_in += 1;
        self.rec.bytes_in += frame.len() as u64;
        if let Some(ra) = mcast::router_advert(frame, now) {
            self.rec.router_adverts.push(ra);
        }
        if let Some(m) = mcast::igmp_message(frame) {
            self.rec.igmp_in.push(m);
        }
        match frames::classify(frame) {
            Class::Malformed => {
                self.rec.malformed_in += 1;
                return;
            }
            Class::Tcp(s) if !self.flows.ingress(&s) && s.rst => {
                self.rec.stray_resets_in += 1;
            }
            Class::Dhcp(d) if !d.from_client && d.client_mac == self.cfg.mac => {
                self.dhcp_seen(&d);
            }
            _ => {}
        }
        let now = self.now;
        if let Some(a) = arp::parse(frame) {
            let ours = self.has_ipv4(a.target_ip);
            let on_link = self.on_link4(a.sender_ip);
            self.resolver.learn(&a, ours, on_link, now);
        } else if let Some((src, dst)) = arp::ipv4_addrs(frame)
            && self.has_ipv4(dst)
            && let Some(nh) = self.next_hop4(src)
            && !self.resolver.is_known(nh, now)
        {
            // smoltcp would drop its own reply for want of `nh`'s MAC: resolve it first.
            self.resolver.hold(nh, frame.to_vec(), now);
            self.ask(nh);
            self.service(now);
            return;
        }
        self.feed(frame.to_vec());
        self.service(now);
    }

    /// Hands one frame to smoltcp and lets the applications see each packet's effect.
    fn feed(&mut self, frame: Vec<u8>) {
        self.dev.rx.push_back(frame);
        let t = instant(self.now);
        while self
            .iface
            .poll_ingress_single(t, &mut self.dev, &mut self.sockets)
            != PollIngressSingleResult::None
        {
            self.apps(self.now);
        }
    }

    fn has_ipv4(&self, ip: Ipv4Addr) -> bool {
        self.iface
            .ip_addrs()
            .iter()
            .any(|c| c.address() == IpAddress::Ipv4(ip))
    }

    fn on_link4(&self, ip: Ipv4Addr) -> bool {
        self.iface.ip_addrs().iter().any(|c| match c {
            IpCidr::Ipv4(c) => c.contains_addr(&ip) && c.address() != ip,
            _ => false,
        })
    }

    /// The neighbour a packet to `dst` goes to: `dst` on link, else the gateway.
    fn next_hop4(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if dst.is_broadcast() || dst.is_multicast() || dst.is_unspecified() || self.has_ipv4(dst) {
            return None;
        }
        if self.on_link4(dst) {
            Some(dst)
        } else {
            self.gateway4.filter(|g| self.on_link4(*g))
        }
    }

    /// Sends an ARP request for `nh` unless it is known or was asked for within a second.
    fn ask(&mut self, nh: Ipv4Addr) {
        let now = self.now;
        let Some(spa) = self.iface.get_source_address_ipv4(&nh) else {
            return;
        };
        if self.resolver.should_ask(nh, now) {
            self.emit(arp::request(self.cfg.mac, spa, nh));
        }
    }

    /// Resolves the next hop towards `dst` ahead of an application's first packet.
    fn prepare(&mut self, dst: IpAddr) {
        if let IpAddr::V4(d) = dst
            && let Some(nh) = self.next_hop4(d)
        {
            self.ask(nh);
        }
    }

    /// The next frame the host sends.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.outbox.pop_front()
    }

    /// When the host wants [`Host::handle_timeout`] called (never earlier than `now`).
    pub fn poll_timeout(&self, now: Duration) -> Option<Duration> {
        if self.paused {
            return None;
        }
        self.wake.map(|w| w.max(now))
    }

    /// Timers: retransmissions, pings, pacing, DHCP.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.now = self.now.max(now);
        if !self.paused {
            self.service(self.now);
        }
    }

    /// Pauses the host (a VM stopped for the last step of a live migration): no timers run,
    /// arriving frames are dropped (`dropped_while_paused`), nothing is sent. Frames already
    /// queued for [`Host::poll_transmit`] are kept.
    pub fn pause(&mut self, now: Duration) {
        self.now = self.now.max(now);
        self.paused = true;
    }

    /// Resumes a paused host at `now`: its stack catches up on every timer that passed (TCP
    /// retransmissions, pings due), as a resumed VM does.
    pub fn resume(&mut self, now: Duration) {
        self.now = self.now.max(now);
        self.paused = false;
        self.service(self.now);
    }

    /// True while paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    // ---------------------------------------------------------------- applications

    fn alloc_port(&mut self) -> u16 {
        loop {
            let p = self.next_port;
            self.next_port = if p == u16::MAX {
                FIRST_EPHEMERAL
            } else {
                p + 1
            };
            if !self.listeners.contains_key(&p) && !self.udp_servers.contains_key(&p) {
                return p;
            }
        }
    }

    fn source_for(&mut self, dst: IpAddr) -> Result<IpAddr, HostError> {
        let src = match dst {
            IpAddr::V4(d) => self.iface.get_source_address_ipv4(&d).map(IpAddr::V4),
            IpAddr::V6(d) => self
                .iface
                .ipv6_addr()
                .map(|_| IpAddr::V6(self.iface.get_source_address_ipv6(&d))),
        };
        src.ok_or_else(|| {
            HostError::Config(format!(
                "host {} has no source address for {dst}",
                self.cfg.name
            ))
        })
    }

    /// Accepts TCP connections on `port` (any number; each is recorded as it arrives).
    pub fn listen_tcp(&mut self, port: u16) -> Result<(), HostError> {
        if self.listeners.contains_key(&port) {
            return Err(HostError::PortInUse(port));
        }
        let h = self.new_listener(port)?;
        self.listeners.insert(port, h);
        self.service(self.now);
        Ok(())
    }

    /// Stops accepting TCP connections on `port` (a service that stops): the listener goes, so
    /// a SYN to the port is answered with a RST by the stack. Connections already accepted
    /// carry on. False when nothing listened there.
    pub fn unlisten_tcp(&mut self, port: u16) -> bool {
        self.allowed_peers.remove(&port);
        match self.listeners.remove(&port) {
            Some(h) => {
                self.sockets.get_mut::<tcp::Socket>(h).abort();
                self.service(self.now);
                self.sockets.remove(h);
                true
            }
            None => false,
        }
    }

    /// Accepts TCP connections on `port` from `peers` only, as a server that checks its
    /// client's identity (mutual TLS bound to the client's address, as etcd's peer checks in
    /// incident A): a connection from any other address is accepted by TCP, then aborted
    /// (RST) once established and recorded with the outcome `refused: peer <ip> is not an allowed client`.
    pub fn listen_tcp_from(&mut self, port: u16, peers: &[IpAddr]) -> Result<(), HostError> {
        self.listen_tcp(port)?;
        self.allowed_peers.insert(port, peers.to_vec());
        Ok(())
    }

    fn new_tcp_socket(&self) -> tcp::Socket<'static> {
        let n = self.cfg.tcp_buffer;
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0u8; n]),
            tcp::SocketBuffer::new(vec![0u8; n]),
        );
        s.set_nagle_enabled(false);
        s.set_timeout(self.cfg.tcp_timeout.map(smol_duration));
        s
    }

    fn new_listener(&mut self, port: u16) -> Result<SocketHandle, HostError> {
        let mut s = self.new_tcp_socket();
        s.listen(port)
            .map_err(|e| HostError::Socket(format!("listen on {port}: {e}")))?;
        Ok(self.sockets.add(s))
    }

    /// Opens a TCP connection to `dst:port` uploading `bytes` of pattern at full speed; returns
    /// the connection's record name.
    pub fn start_transfer(
        &mut self,
        dst: IpAddr,
        port: u16,
        bytes: u64,
        now: Duration,
    ) -> Result<String, HostError> {
        self.start_transfer_with(
            dst,
            port,
            Transfer {
                direction: Direction::Upload,
                bytes,
                rate: None,
            },
            now,
        )
    }

    /// Opens a TCP connection to `dst:port` for transfer `t`; returns the record name
    /// (`tcp:HOST->DST:PORT#N`).
    pub fn start_transfer_with(
        &mut self,
        dst: IpAddr,
        port: u16,
        t: Transfer,
        now: Duration,
    ) -> Result<String, HostError> {
        self.now = self.now.max(now);
        let src = self.source_for(dst)?;
        self.prepare(dst);
        let lport = self.alloc_port();
        let mut s = self.new_tcp_socket();
        let remote = SocketAddr::new(dst, port);
        s.connect(
            self.iface.context(),
            IpEndpoint::new(IpAddress::from(dst), port),
            IpEndpoint::new(IpAddress::from(src), lport),
        )
        .map_err(|e| HostError::Socket(format!("connect to {remote}: {e}")))?;
        let h = self.sockets.add(s);
        self.client_seq += 1;
        let name = format!("tcp:{}->{}#{}", self.cfg.name, remote, self.client_seq);
        let local = SocketAddr::new(src, lport);
        let rec = TcpRecord {
            local: local.to_string(),
            remote: remote.to_string(),
            ..TcpRecord::default()
        };
        let key = self.rng.next_u32();
        let mut conn = Conn::client(rec, t, key, self.now);
        conn.set_timeout_armed(self.cfg.tcp_timeout.is_some());
        self.tcp.insert(
            name.clone(),
            TcpEntry {
                handle: Some(h),
                local,
                remote,
                conn,
            },
        );
        self.service(self.now);
        Ok(name)
    }

    /// Echoes UDP datagrams received on `port`.
    pub fn listen_udp_echo(&mut self, port: u16) -> Result<(), HostError> {
        if self.udp_servers.contains_key(&port) {
            return Err(HostError::PortInUse(port));
        }
        let mut s = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0u8; 65536]),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0u8; 65536]),
        );
        s.bind(port)
            .map_err(|e| HostError::Socket(format!("bind UDP {port}: {e}")))?;
        let h = self.sockets.add(s);
        self.udp_servers
            .insert(port, (h, UdpServerRecord::default()));
        Ok(())
    }

    /// Sends `count` UDP datagrams of `len` bytes (at least 12) to `dst:port`, one per
    /// `interval`, and checks the echoes; returns the session's record name.
    pub fn udp_exchange(
        &mut self,
        dst: IpAddr,
        port: u16,
        count: u16,
        interval: Duration,
        len: usize,
        now: Duration,
    ) -> Result<String, HostError> {
        self.udp_session(dst, port, u64::from(count), interval, len, now)
    }

    /// Like [`Host::udp_exchange`], but the requests go on until [`Host::stop_udp`] (the
    /// record's `count` is `u64::MAX` until then, and its `rtt_us` grows with every request).
    pub fn udp_stream(
        &mut self,
        dst: IpAddr,
        port: u16,
        interval: Duration,
        len: usize,
        now: Duration,
    ) -> Result<String, HostError> {
        self.udp_session(dst, port, u64::MAX, interval, len, now)
    }

    /// Stops a UDP session: no request after those sent; it is done once their echoes came or
    /// [`PING_TIMEOUT`] passed.
    pub fn stop_udp(&mut self, name: &str) -> Result<(), HostError> {
        let p = self
            .udp
            .get_mut(name)
            .ok_or_else(|| HostError::Unknown(format!("UDP session {name}")))?;
        p.rec.count = p.rec.count.min(p.rec.sent);
        self.service(self.now);
        Ok(())
    }

    fn udp_session(
        &mut self,
        dst: IpAddr,
        port: u16,
        count: u64,
        interval: Duration,
        len: usize,
        now: Duration,
    ) -> Result<String, HostError> {
        self.now = self.now.max(now);
        let src = self.source_for(dst)?;
        self.prepare(dst);
        let len = len.clamp(12, 8192);
        let lport = self.alloc_port();
        let mut s = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0u8; 65536]),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0u8; 65536]),
        );
        s.bind(IpEndpoint::new(IpAddress::from(src), lport))
            .map_err(|e| HostError::Socket(format!("bind UDP {lport}: {e}")))?;
        let h = self.sockets.add(s);
        self.udp_seq += 1;
        let name = format!(
            "udp:{}->{}#{}",
            self.cfg.name,
            SocketAddr::new(dst, port),
            self.udp_seq
        );
        let rec = UdpRecord {
            dst: SocketAddr::new(dst, port).to_string(),
            local: SocketAddr::new(src, lport).to_string(),
            count,
            // A bounded session's slots exist from the start; an endless one's grow.
            rtt_us: if count == u64::MAX {
                Vec::new()
            } else {
                vec![None; usize::try_from(count).unwrap_or(0)]
            },
            ..UdpRecord::default()
        };
        let key = self.rng.next_u32();
        self.udp.insert(
            name.clone(),
            EchoSession {
                handle: h,
                local: SocketAddr::new(src, lport),
                dst,
                port,
                len,
                pacing: Pacing::new(interval, self.now),
                rec,
                key,
                last_echo: self.now,
                judged: 0,
            },
        );
        self.service(self.now);
        Ok(name)
    }

    /// Sends `count` echo requests to `dst`, one per `interval`; returns the session's record
    /// name (`ping:HOST->DST#N`).
    pub fn ping(
        &mut self,
        dst: IpAddr,
        count: u16,
        interval: Duration,
        now: Duration,
    ) -> Result<String, HostError> {
        self.now = self.now.max(now);
        self.source_for(dst)?;
        self.prepare(dst);
        let mut s = icmp::Socket::new(
            icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 64], vec![0u8; 16384]),
            icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 64], vec![0u8; 16384]),
        );
        self.ping_seq += 1;
        let ident = (self.rng.next_u32() as u16) ^ (self.ping_seq as u16);
        s.bind(icmp::Endpoint::Ident(ident))
            .map_err(|e| HostError::Socket(format!("bind ICMP ident {ident}: {e}")))?;
        let h = self.sockets.add(s);
        let name = format!("ping:{}->{}#{}", self.cfg.name, dst, self.ping_seq);
        let rec = PingRecord {
            dst: dst.to_string(),
            ident,
            count: u64::from(count),
            rtt_us: vec![None; usize::from(count)],
            ..PingRecord::default()
        };
        self.pings.insert(
            name.clone(),
            PingSession {
                handle: h,
                dst,
                pacing: Pacing::new(interval, self.now),
                rec,
            },
        );
        self.service(self.now);
        Ok(name)
    }

    /// Queues a RARP announcement (what QEMU sends after a migration).
    pub fn announce_rarp(&mut self) {
        self.rec.announcements += 1;
        self.emit(frames::rarp_announce(self.cfg.mac));
    }

    /// Queues a gratuitous ARP for the host's IPv4 address; false when it has none.
    pub fn announce_garp(&mut self) -> bool {
        let Some(ip) = self.iface.ipv4_addr() else {
            return false;
        };
        self.rec.announcements += 1;
        self.emit(frames::garp_announce(self.cfg.mac, ip));
        true
    }

    /// Sets (or clears) the TCP timeout of one connection; see [`HostConfig::tcp_timeout`].
    pub fn set_tcp_timeout(
        &mut self,
        name: &str,
        timeout: Option<Duration>,
    ) -> Result<(), HostError> {
        let e = self
            .tcp
            .get_mut(name)
            .ok_or_else(|| HostError::Unknown(format!("TCP connection {name}")))?;
        if let Some(h) = e.handle {
            self.sockets
                .get_mut::<tcp::Socket>(h)
                .set_timeout(timeout.map(smol_duration));
            e.conn.set_timeout_armed(timeout.is_some());
        }
        self.service(self.now);
        Ok(())
    }

    /// Restarts the DHCPv4 client from DISCOVER (the address stays until a new lease replaces
    /// it); false when the host has no DHCP client.
    pub fn dhcp_restart(&mut self) -> bool {
        let Some((h, _)) = self.dhcp else {
            return false;
        };
        self.sockets.get_mut::<dhcpv4::Socket>(h).reset();
        self.service(self.now);
        true
    }

    /// Aborts a TCP connection (sends RST), as a crashing application would.
    pub fn abort_tcp(&mut self, name: &str) -> Result<(), HostError> {
        let e = self
            .tcp
            .get(name)
            .ok_or_else(|| HostError::Unknown(format!("TCP connection {name}")))?;
        if let Some(h) = e.handle {
            self.sockets.get_mut::<tcp::Socket>(h).abort();
        }
        self.service(self.now);
        Ok(())
    }

    // ---------------------------------------------------------------- state

    /// A TCP connection's record as of `now`.
    pub fn tcp_record(&self, name: &str, now: Duration) -> Option<TcpRecord> {
        self.tcp.get(name).map(|e| self.tcp_snapshot(e, now))
    }

    /// Names of every TCP connection (client and server side), sorted.
    pub fn tcp_names(&self) -> Vec<String> {
        self.tcp.keys().cloned().collect()
    }

    /// A ping session's record.
    pub fn ping_record(&self, name: &str) -> Option<&PingRecord> {
        self.pings.get(name).map(|p| &p.rec)
    }

    /// A UDP session's record (its stall without a gap still open; see
    /// [`Host::udp_record_at`]).
    pub fn udp_record(&self, name: &str) -> Option<&UdpRecord> {
        self.udp.get(name).map(|p| &p.rec)
    }

    /// A UDP session's record as of `now`.
    pub fn udp_record_at(&self, name: &str, now: Duration) -> Option<UdpRecord> {
        self.udp.get(name).map(|p| p.snapshot(now))
    }

    /// The pattern key of TCP connection `name` (both ends of a connection have the same; a
    /// server knows it once it has read the client's header).
    pub fn transfer_key(&self, name: &str) -> Option<u32> {
        self.tcp.get(name)?.conn.key()
    }

    /// Stops the transfer of TCP connection `name`, whose source this end must be (the client
    /// of an upload, the server of a download): nothing more is written, the connection closes
    /// once what was written is acknowledged, and an [`super::tcp::ENDLESS`] sink takes that
    /// as the end.
    pub fn stop_transfer(&mut self, name: &str) -> Result<(), HostError> {
        let e = self
            .tcp
            .get_mut(name)
            .ok_or_else(|| HostError::Unknown(format!("TCP connection {name}")))?;
        if !e.conn.stop() {
            return Err(HostError::Unknown(format!(
                "source of the pattern on TCP connection {name} (this end receives it)"
            )));
        }
        self.service(self.now);
        Ok(())
    }

    /// The UDP echo server's record on `port`.
    pub fn udp_server_record(&self, port: u16) -> Option<&UdpServerRecord> {
        self.udp_servers.get(&port).map(|(_, r)| r)
    }

    /// The DHCP client's record (None without DHCP).
    pub fn dhcp_record(&self) -> Option<&DhcpRecord> {
        self.dhcp.as_ref().map(|(_, r)| r)
    }

    /// True when every ping and UDP session is done and every TCP connection this host opened
    /// completed or closed.
    pub fn idle(&self) -> bool {
        self.pings.values().all(|p| p.rec.done)
            && self.udp.values().all(|p| p.rec.done)
            && self
                .tcp
                .values()
                .filter(|e| e.conn.rec.role == "client")
                .all(|e| e.conn.rec.completed_us.is_some() || e.conn.is_closed())
    }

    /// Everything the host saw, as of `now`.
    pub fn record(&self, now: Duration) -> HostRecord {
        let mut r = self.rec.clone();
        r.tcp = self
            .tcp
            .iter()
            .map(|(n, e)| (n.clone(), self.tcp_snapshot(e, now)))
            .collect();
        r.pings = self
            .pings
            .iter()
            .map(|(n, p)| (n.clone(), p.rec.clone()))
            .collect();
        r.udp = self
            .udp
            .iter()
            .map(|(n, p)| (n.clone(), p.snapshot(now)))
            .collect();
        r.udp_servers = self
            .udp_servers
            .iter()
            .map(|(port, (_, s))| (format!("udp-echo:{}:{port}", self.cfg.name), s.clone()))
            .collect();
        r.dhcp = self.dhcp.as_ref().map(|(_, d)| d.clone());
        r
    }

    fn tcp_snapshot(&self, e: &TcpEntry, now: Duration) -> TcpRecord {
        let mut r = e.conn.snapshot(now);
        if let Some(f) = self.flows.get(e.local, e.remote) {
            r.retransmitted_segments = f.retransmitted_segments;
            r.retransmitted_bytes = f.retransmitted_bytes;
            r.fast_retransmits = f.fast_retransmits;
            r.timeout_retransmits = f.timeout_retransmits;
            r.retransmission_timeouts = f.retransmission_timeouts;
            r.duplicates = f.duplicates;
            r.data_segments_sent = f.data_segments;
            r.resets_received = f.resets_received;
            r.resets_sent = f.resets_sent;
        }
        if r.outcome == "closed-early" {
            if r.resets_received > 0 {
                r.outcome = "reset".into();
            } else if e.conn.closed_unasked_with_timeout() {
                r.outcome = "timed-out".into();
            }
        }
        r
    }

    // ---------------------------------------------------------------- the engine

    /// A frame smoltcp sent: its ARP requests that duplicate ours are dropped.
    fn push_out(&mut self, f: Vec<u8>) {
        if let Some(a) = arp::parse(&f)
            && a.op == 1
            && a.sender_mac == self.cfg.mac
            && self.resolver.is_duplicate(a.target_ip, self.now)
        {
            return;
        }
        self.emit(f);
    }

    /// A frame leaves the host.
    fn emit(&mut self, f: Vec<u8>) {
        self.rec.frames_out += 1;
        self.rec.bytes_out += f.len() as u64;
        match frames::classify(&f) {
            Class::Tcp(s) => {
                if s.rst
                    && !self
                        .tcp
                        .values()
                        .any(|e| e.local == s.src && e.remote == s.dst)
                {
                    *self.rec.strays_reset.entry(s.dst.to_string()).or_default() += 1;
                }
                self.flows.egress(&s);
            }
            Class::EchoRequest { ident, .. } => {
                for p in self.pings.values_mut() {
                    if p.rec.ident == ident && !p.rec.done {
                        p.rec.emitted += 1;
                        p.pacing.last_emitted = Some(self.now);
                    }
                }
            }
            Class::Udp { src, dst } => {
                for p in self.udp.values_mut() {
                    if p.local == src && dst == SocketAddr::new(p.dst, p.port) && !p.rec.done {
                        p.rec.emitted += 1;
                        p.pacing.last_emitted = Some(self.now);
                    }
                }
            }
            Class::Dhcp(m) if m.from_client => {
                if let Some((_, d)) = self.dhcp.as_mut() {
                    match m.message_type {
                        DhcpMessageType::Discover => d.discovers_sent += 1,
                        DhcpMessageType::Request => d.requests_sent += 1,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        self.outbox.push_back(f);
    }

    /// A DHCP server message for this host: counted, and checked for what smoltcp's client
    /// silently ignores.
    fn dhcp_seen(&mut self, m: &frames::Dhcp) {
        let Some((_, d)) = self.dhcp.as_mut() else {
            return;
        };
        let mut bad = |why: &str| *d.unusable.entry(why.to_string()).or_insert(0) += 1;
        match m.message_type {
            DhcpMessageType::Offer => {
                d.offers_received += 1;
                if m.server_identifier.is_none() {
                    bad("OFFER without server identifier (option 54)");
                }
                if m.your_ip.is_unspecified() || m.your_ip.is_broadcast() {
                    bad("OFFER without a unicast yiaddr");
                }
            }
            DhcpMessageType::Ack => {
                d.acks_received += 1;
                if m.server_identifier.is_none() {
                    bad("ACK without server identifier (option 54)");
                }
                match m.subnet_mask {
                    None => bad("ACK without subnet mask (option 1)"),
                    Some(mask)
                        if u32::from(mask).leading_ones() != u32::from(mask).count_ones() =>
                    {
                        bad("ACK with a non-contiguous subnet mask")
                    }
                    Some(_) => {}
                }
                self.dhcp_lease_s = m.lease_duration;
            }
            DhcpMessageType::Nak => d.naks_received += 1,
            _ => {}
        }
    }

    /// Runs the applications and smoltcp until nothing moves, then computes the next wake-up.
    fn service(&mut self, now: Duration) {
        for nh in self.resolver.held_next_hops() {
            self.ask(nh);
        }
        for f in self.resolver.release(now) {
            self.feed(f);
        }
        let t = instant(now);
        for _ in 0..MAX_ROUNDS {
            let app = self.apps(now);
            let r = self.iface.poll_egress(t, &mut self.dev, &mut self.sockets);
            let sent = !self.dev.tx.is_empty();
            while let Some(f) = self.dev.tx.pop_front() {
                self.push_out(f);
            }
            if !app && r == PollResult::None && !sent {
                break;
            }
        }
        let mut wake = self
            .iface
            .poll_at(t, &self.sockets)
            .map(|i| from_instant(i).max(now));
        let mut at = |d: Option<Duration>| {
            if let Some(d) = d {
                wake = Some(wake.map_or(d, |w| w.min(d)));
            }
        };
        for p in self.pings.values() {
            if !p.rec.done {
                at(Some(p.pacing.wake(p.rec.sent, p.rec.count, p.rec.emitted)));
            }
        }
        for p in self.udp.values() {
            if !p.rec.done {
                at(Some(p.pacing.wake(p.rec.sent, p.rec.count, p.rec.emitted)));
            }
        }
        for e in self.tcp.values() {
            // A paced source whose socket cannot take more (the peer's window is closed) waits
            // for an ACK, which smoltcp's own poll time covers: asking for its pacing time too
            // would spin the clock a microsecond at a time.
            let room = e.handle.is_some_and(|h| {
                let s = self.sockets.get::<tcp::Socket>(h);
                s.send_queue() < s.send_capacity()
            });
            if room {
                at(e.conn.wake_at());
            }
        }
        at(self.resolver.next_deadline());
        // Everything due at `now` was just done: a deadline at or before `now` (smoltcp asking to
        // be polled "now" again) is served a microsecond later, so virtual time always advances.
        self.wake = wake.map(|w| w.max(now + Duration::from_micros(1)));
    }

    /// One round of every application; true when anything moved.
    fn apps(&mut self, now: Duration) -> bool {
        let mut moved = false;
        moved |= self.dhcp_step(now);
        moved |= self.accept_step(now);
        moved |= self.tcp_step(now);
        moved |= self.ping_step(now);
        moved |= self.udp_step(now);
        moved |= self.udp_server_step();
        moved
    }

    fn dhcp_step(&mut self, now: Duration) -> bool {
        let Some((h, _)) = self.dhcp else {
            return false;
        };
        enum Ev {
            Up(Ipv4Cidr, Option<Ipv4Addr>, Vec<Ipv4Addr>, Ipv4Addr),
            Down,
        }
        let ev = match self.sockets.get_mut::<dhcpv4::Socket>(h).poll() {
            None => return false,
            Some(dhcpv4::Event::Configured(c)) => Ev::Up(
                c.address,
                c.router,
                c.dns_servers.iter().copied().collect(),
                c.server.address,
            ),
            Some(dhcpv4::Event::Deconfigured) => Ev::Down,
        };
        let rec = match self.dhcp.as_mut() {
            Some((_, r)) => r,
            None => return false,
        };
        match ev {
            Ev::Up(addr, router, dns, server) => {
                rec.leases.push(DhcpLease {
                    at_us: us(now),
                    address: addr.to_string(),
                    router: router.map(|r| r.to_string()),
                    dns_servers: dns.iter().map(|d| d.to_string()).collect(),
                    server: server.to_string(),
                    lease_s: self.dhcp_lease_s,
                });
                self.iface.update_ip_addrs(|v| {
                    v.retain(|a| !matches!(a, IpCidr::Ipv4(_)));
                    let _ = v.push(IpCidr::Ipv4(addr));
                });
                self.gateway4 = router;
                match router {
                    Some(r) => {
                        let _ = self.iface.routes_mut().add_default_ipv4_route(r);
                    }
                    None => {
                        self.iface.routes_mut().remove_default_ipv4_route();
                    }
                }
            }
            Ev::Down => {
                rec.deconfigured += 1;
                self.gateway4 = None;
                self.iface
                    .update_ip_addrs(|v| v.retain(|a| !matches!(a, IpCidr::Ipv4(_))));
                self.iface.routes_mut().remove_default_ipv4_route();
            }
        }
        true
    }

    fn accept_step(&mut self, now: Duration) -> bool {
        let mut moved = false;
        let ports: Vec<u16> = self.listeners.keys().copied().collect();
        for port in ports {
            let Some(&h) = self.listeners.get(&port) else {
                continue;
            };
            let s = self.sockets.get::<tcp::Socket>(h);
            if s.state() == tcp::State::Listen {
                continue;
            }
            let (Some(local), Some(remote)) = (s.local_endpoint(), s.remote_endpoint()) else {
                continue;
            };
            let (local, remote) = (to_sock(local), to_sock(remote));
            // A fresh listener takes the port over; the accepted socket becomes a connection.
            match self.new_listener(port) {
                Ok(nh) => {
                    self.listeners.insert(port, nh);
                }
                Err(_) => {
                    self.listeners.remove(&port);
                }
            }
            let base = format!("tcp:{}:{port}<-{remote}", self.cfg.name);
            let mut name = base.clone();
            let mut n = 1;
            while self.tcp.contains_key(&name) {
                n += 1;
                name = format!("{base}#{n}");
            }
            let rec = TcpRecord {
                local: local.to_string(),
                remote: remote.to_string(),
                ..TcpRecord::default()
            };
            let mut conn = Conn::server(rec, now);
            conn.set_timeout_armed(self.cfg.tcp_timeout.is_some());
            if let Some(peers) = self.allowed_peers.get(&port)
                && !peers.contains(&remote.ip())
            {
                conn.refuse(&format!("peer {} is not an allowed client", remote.ip()));
            }
            self.tcp.insert(
                name,
                TcpEntry {
                    handle: Some(h),
                    local,
                    remote,
                    conn,
                },
            );
            moved = true;
        }
        moved
    }

    fn tcp_step(&mut self, now: Duration) -> bool {
        let mut moved = false;
        for e in self.tcp.values_mut() {
            let Some(h) = e.handle else { continue };
            let sock = self.sockets.get_mut::<tcp::Socket>(h);
            moved |= e.conn.step(sock, now);
            if e.conn.is_closed() {
                self.sockets.remove(h);
                e.handle = None;
            }
        }
        moved
    }

    fn ping_step(&mut self, now: Duration) -> bool {
        let mut moved = false;
        let caps = self.dev.capabilities().checksum;
        for p in self.pings.values_mut() {
            if p.rec.done {
                continue;
            }
            let src6 = match p.dst {
                IpAddr::V6(d) => Some(self.iface.get_source_address_ipv6(&d)),
                IpAddr::V4(_) => None,
            };
            let sock = self.sockets.get_mut::<icmp::Socket>(p.handle);
            // Replies.
            while let Ok((data, _from)) = sock.recv() {
                moved = true;
                let reply = match p.dst {
                    IpAddr::V4(_) => Icmpv4Packet::new_checked(data)
                        .ok()
                        .and_then(|pk| Icmpv4Repr::parse(&pk, &caps).ok())
                        .and_then(|r| match r {
                            Icmpv4Repr::EchoReply {
                                ident,
                                seq_no,
                                data,
                            } => Some((ident, seq_no, data.to_vec())),
                            _ => None,
                        }),
                    IpAddr::V6(d) => {
                        let src = src6.unwrap_or(Ipv6Addr::UNSPECIFIED);
                        Icmpv6Packet::new_checked(data)
                            .ok()
                            .and_then(|pk| Icmpv6Repr::parse(&d, &src, &pk, &caps).ok())
                            .and_then(|r| match r {
                                Icmpv6Repr::EchoReply {
                                    ident,
                                    seq_no,
                                    data,
                                } => Some((ident, seq_no, data.to_vec())),
                                _ => None,
                            })
                    }
                };
                let Some((ident, seq, data)) = reply else {
                    continue;
                };
                let i = usize::from(seq);
                let Some(rtt) = p
                    .pacing
                    .rtt_us(i, now)
                    .filter(|_| ident == p.rec.ident && data == ping_payload(p.rec.ident, seq))
                else {
                    p.rec.bad_replies += 1;
                    continue;
                };
                if p.rec.rtt_us[i].is_some() {
                    p.rec.duplicates += 1;
                    continue;
                }
                p.rec.rtt_us[i] = Some(rtt);
                p.rec.answered += 1;
            }
            // Requests.
            while p.pacing.due(p.rec.sent, p.rec.count, now) {
                let seq = p.rec.sent as u16;
                let payload = ping_payload(p.rec.ident, seq);
                let ok = match p.dst {
                    IpAddr::V4(d) => {
                        let repr = Icmpv4Repr::EchoRequest {
                            ident: p.rec.ident,
                            seq_no: seq,
                            data: &payload,
                        };
                        match sock.send(repr.buffer_len(), IpAddress::Ipv4(d)) {
                            Ok(buf) => {
                                repr.emit(&mut Icmpv4Packet::new_unchecked(buf), &caps);
                                true
                            }
                            Err(_) => false,
                        }
                    }
                    IpAddr::V6(d) => {
                        let repr = Icmpv6Repr::EchoRequest {
                            ident: p.rec.ident,
                            seq_no: seq,
                            data: &payload,
                        };
                        let src = src6.unwrap_or(Ipv6Addr::UNSPECIFIED);
                        match sock.send(repr.buffer_len(), IpAddress::Ipv6(d)) {
                            Ok(buf) => {
                                repr.emit(&src, &d, &mut Icmpv6Packet::new_unchecked(buf), &caps);
                                true
                            }
                            Err(_) => false,
                        }
                    }
                };
                if !ok {
                    p.rec.send_errors += 1;
                }
                p.pacing.queued(now);
                p.rec.sent += 1;
                moved = true;
            }
            let r = &p.rec;
            if p.pacing.over(now, r.sent, r.count, r.answered, r.emitted) {
                p.rec.done = true;
                moved = true;
            }
        }
        moved
    }

    fn udp_step(&mut self, now: Duration) -> bool {
        let mut moved = false;
        for p in self.udp.values_mut() {
            if p.rec.done {
                continue;
            }
            let sock = self.sockets.get_mut::<udp::Socket>(p.handle);
            while let Ok((data, meta)) = sock.recv() {
                moved = true;
                if to_sock(meta.endpoint) != SocketAddr::new(p.dst, p.port) || data.len() < 12 {
                    p.rec.bad_replies += 1;
                    continue;
                }
                let seq = u32::from_be_bytes([data[4], data[5], data[6], data[7]]);
                let i = seq as usize;
                let Some(rtt) = p
                    .pacing
                    .rtt_us(i, now)
                    .filter(|_| data == udp_payload(p.key, seq, p.len))
                else {
                    p.rec.bad_replies += 1;
                    continue;
                };
                if p.rec.rtt_us[i].is_some() {
                    p.rec.duplicates += 1;
                    continue;
                }
                p.rec.rtt_us[i] = Some(rtt);
                p.rec.answered += 1;
                if i < p.judged {
                    // Judged lost, and came after all.
                    p.rec.lost = p.rec.lost.saturating_sub(1);
                }
                let gap = us(now.saturating_sub(p.last_echo));
                p.rec.stall_max_us = p.rec.stall_max_us.max(gap);
                p.last_echo = now;
            }
            while p.pacing.due(p.rec.sent, p.rec.count, now) {
                let seq = p.rec.sent as u32;
                if p.rec.rtt_us.len() <= seq as usize {
                    p.rec.rtt_us.push(None);
                }
                let payload = udp_payload(p.key, seq, p.len);
                let dst = IpEndpoint::new(IpAddress::from(p.dst), p.port);
                if sock.send_slice(&payload, dst).is_err() {
                    p.rec.send_errors += 1;
                }
                p.pacing.queued(now);
                p.rec.sent += 1;
                moved = true;
            }
            // Requests unanswered PING_TIMEOUT after they were queued are lost.
            while let Some(&at) = p.pacing.sent_at.get(p.judged) {
                if at + PING_TIMEOUT > now {
                    break;
                }
                if p.rec.rtt_us.get(p.judged).is_some_and(Option::is_none) {
                    p.rec.lost += 1;
                }
                p.judged += 1;
            }
            let r = &p.rec;
            if p.pacing.over(now, r.sent, r.count, r.answered, r.emitted) {
                p.rec.done = true;
                p.rec.lost = p.rec.sent - p.rec.answered;
                moved = true;
            }
        }
        moved
    }

    fn udp_server_step(&mut self) -> bool {
        let mut moved = false;
        for (h, rec) in self.udp_servers.values_mut() {
            let sock = self.sockets.get_mut::<udp::Socket>(*h);
            while let Ok((data, meta)) = sock.recv().map(|(d, m)| (d.to_vec(), m)) {
                moved = true;
                rec.received += 1;
                let peer = to_sock(meta.endpoint).to_string();
                if !rec.peers.contains(&peer) {
                    rec.peers.push(peer);
                }
                let reply = udp::UdpMetadata {
                    endpoint: meta.endpoint,
                    local_address: meta.local_address,
                    meta: Default::default(),
                };
                if sock.send_slice(&data, reply).is_ok() {
                    rec.replied += 1;
                }
            }
        }
        moved
    }
}

/// The payload of ping `seq` of session `ident`: 56 bytes like `ping`'s default.
fn ping_payload(ident: u16, seq: u16) -> Vec<u8> {
    let mut v = vec![0u8; 56];
    fill_pattern(u32::from(ident) << 16 | u32::from(seq), 0, &mut v);
    v
}

/// The payload of UDP datagram `seq` of a session with `key`: key, seq, length, then pattern.
fn udp_payload(key: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[..4].copy_from_slice(&key.to_be_bytes());
    v[4..8].copy_from_slice(&seq.to_be_bytes());
    v[8..12].copy_from_slice(&(len as u32).to_be_bytes());
    fill_pattern(key ^ seq, 12, &mut v[12..]);
    v
}

#[path = "host_mcast.rs"]
mod mcast;
