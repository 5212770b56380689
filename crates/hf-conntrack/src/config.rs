//! Configuration: capacity, limits, liberal mode and per-state timeouts.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tcp::TcpState;

/// Per-state timeouts. The defaults are Linux's (`nf_conntrack_*_timeout*` sysctls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeouts {
    /// TCP SYN_SENT and SYN_SENT2 (120 s).
    pub tcp_syn_sent: Duration,
    /// TCP SYN_RECV (60 s).
    pub tcp_syn_recv: Duration,
    /// TCP ESTABLISHED (5 days).
    pub tcp_established: Duration,
    /// TCP FIN_WAIT (120 s).
    pub tcp_fin_wait: Duration,
    /// TCP CLOSE_WAIT (60 s).
    pub tcp_close_wait: Duration,
    /// TCP LAST_ACK (30 s).
    pub tcp_last_ack: Duration,
    /// TCP TIME_WAIT (120 s).
    pub tcp_time_wait: Duration,
    /// TCP CLOSE (10 s).
    pub tcp_close: Duration,
    /// UDP before a reply was seen (30 s).
    pub udp_unreplied: Duration,
    /// UDP once a reply was seen (120 s).
    pub udp_replied: Duration,
    /// ICMP queries (30 s).
    pub icmp: Duration,
    /// Any other protocol (600 s).
    pub generic: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            tcp_syn_sent: s(120),
            tcp_syn_recv: s(60),
            tcp_established: s(432_000),
            tcp_fin_wait: s(120),
            tcp_close_wait: s(60),
            tcp_last_ack: s(30),
            tcp_time_wait: s(120),
            tcp_close: s(10),
            udp_unreplied: s(30),
            udp_replied: s(120),
            icmp: s(30),
            generic: s(600),
        }
    }
}

impl Timeouts {
    pub(crate) fn tcp(&self, s: TcpState) -> Duration {
        match s {
            TcpState::None | TcpState::SynSent | TcpState::SynSent2 => self.tcp_syn_sent,
            TcpState::SynRecv => self.tcp_syn_recv,
            TcpState::Established => self.tcp_established,
            TcpState::FinWait => self.tcp_fin_wait,
            TcpState::CloseWait => self.tcp_close_wait,
            TcpState::LastAck => self.tcp_last_ack,
            TcpState::TimeWait => self.tcp_time_wait,
            TcpState::Close => self.tcp_close,
        }
    }
}

/// How a [`crate::Conntrack`] behaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The global cap on connections. At the cap a new commit evicts the oldest unestablished
    /// connection; when every connection is established the commit is refused.
    pub max_connections: usize,
    /// The limit for zones without their own (`None`: only the global cap applies).
    pub default_zone_limit: Option<u32>,
    /// Accept out-of-window TCP segments (Linux's `nf_conntrack_tcp_be_liberal`).
    pub tcp_liberal: bool,
    /// Per-state timeouts.
    pub timeouts: Timeouts,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_connections: 1 << 20,
            default_zone_limit: None,
            tcp_liberal: false,
            timeouts: Timeouts::default(),
        }
    }
}
