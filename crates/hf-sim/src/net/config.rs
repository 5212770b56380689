//! A simulated host's configuration, its errors, and the in-memory Ethernet device between
//! smoltcp and the simulator.
//!
//! # What it does
//!
//! [`HostConfig`] (with builders) says who the host is: MAC, static addresses or DHCPv4, MTU,
//! TCP buffers and timeout, seed. [`HostError`] names what was refused. `Wire` is the smoltcp
//! `Device`: frames in from [`super::host::Host::handle_frame`], frames out to its outbox.
//!
//! # What it does not do
//!
//! No I/O: the device is two in-memory queues; checksums are computed and verified by smoltcp.

use std::collections::VecDeque;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

/// Default TCP socket buffer (each direction); large enough for a 10 Gb/s × 100 µs path.
pub const DEFAULT_TCP_BUFFER: usize = 256 * 1024;

/// A host's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Host name (used in record names).
    pub name: String,
    pub mac: [u8; 6],
    /// Static IPv4 address and prefix length.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    pub gateway4: Option<Ipv4Addr>,
    /// Static IPv6 addresses and prefix lengths.
    pub ipv6: Vec<(Ipv6Addr, u8)>,
    pub gateway6: Option<Ipv6Addr>,
    /// Get the IPv4 address by DHCP (then `ipv4`/`gateway4` must be None).
    pub dhcp4: bool,
    /// IP MTU (the Ethernet frame may be 14 bytes longer).
    pub mtu: usize,
    /// TCP buffer per direction per connection.
    pub tcp_buffer: usize,
    /// DHCPv4: time between DISCOVERs, and the first REQUEST timeout (smoltcp's default is
    /// 10 s/5 s; hosts here start before their port is bound, so they retry faster).
    pub dhcp_retry: Duration,
    /// TCP timeout of every new connection (smoltcp's `set_timeout`: the connection is dropped
    /// when the peer stays silent this long while data or a SYN is outstanding); None = retry
    /// for ever (the default, so outages of any length are survivable and visible as stalls).
    pub tcp_timeout: Option<Duration>,
    /// Seed of the host's random stream (smoltcp's ISNs, ports of pings).
    pub seed: u64,
}

impl HostConfig {
    /// A host with no address yet (add one with the `with_*` methods).
    pub fn new(name: &str, mac: [u8; 6], seed: u64) -> HostConfig {
        HostConfig {
            name: name.to_string(),
            mac,
            ipv4: None,
            gateway4: None,
            ipv6: Vec::new(),
            gateway6: None,
            dhcp4: false,
            mtu: 1500,
            tcp_buffer: DEFAULT_TCP_BUFFER,
            dhcp_retry: Duration::from_secs(1),
            tcp_timeout: None,
            seed,
        }
    }

    /// A static IPv4 address and optional default gateway.
    pub fn with_ipv4(mut self, addr: Ipv4Addr, prefix: u8, gateway: Option<Ipv4Addr>) -> Self {
        self.ipv4 = Some((addr, prefix));
        self.gateway4 = gateway;
        self
    }

    /// A static IPv6 address; `gateway` replaces the default IPv6 gateway when given.
    pub fn with_ipv6(mut self, addr: Ipv6Addr, prefix: u8, gateway: Option<Ipv6Addr>) -> Self {
        self.ipv6.push((addr, prefix));
        if gateway.is_some() {
            self.gateway6 = gateway;
        }
        self
    }

    /// IPv4 by DHCP.
    pub fn with_dhcp4(mut self) -> Self {
        self.dhcp4 = true;
        self
    }

    /// A TCP timeout for every connection (see [`HostConfig::tcp_timeout`]).
    pub fn with_tcp_timeout(mut self, timeout: Duration) -> Self {
        self.tcp_timeout = Some(timeout);
        self
    }

    /// Another IP MTU.
    pub fn with_mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }
}

/// Why a host operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// The configuration is unusable (what and why).
    Config(String),
    /// A port is already in use by this host.
    PortInUse(u16),
    /// smoltcp refused (what it said).
    Socket(String),
    /// No such session or connection.
    Unknown(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Config(s) => write!(f, "host configuration: {s}"),
            HostError::PortInUse(p) => write!(f, "port {p} already in use on this host"),
            HostError::Socket(s) => write!(f, "socket: {s}"),
            HostError::Unknown(s) => write!(f, "unknown {s}"),
        }
    }
}

impl std::error::Error for HostError {}

/// The in-memory Ethernet device between smoltcp and the simulator.
#[derive(Debug)]
pub(crate) struct Wire {
    pub(crate) rx: VecDeque<Vec<u8>>,
    pub(crate) tx: VecDeque<Vec<u8>>,
    pub(crate) mtu: usize,
}

#[derive(Debug)]
pub(crate) struct RxToken(Vec<u8>);

impl phy::RxToken for RxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(&self.0)
    }
}

#[derive(Debug)]
pub(crate) struct TxToken<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.0.push_back(buf);
        r
    }
}

impl Device for Wire {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _t: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let f = self.rx.pop_front()?;
        Some((RxToken(f), TxToken(&mut self.tx)))
    }

    fn transmit(&mut self, _t: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = self.mtu + 14;
        c
    }
}
