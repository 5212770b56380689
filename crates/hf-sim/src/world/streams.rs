//! Streams: long-running, verified traffic between two hosts of the world, started and stopped
//! by name, measured from both ends. What `holdfast sandbox`'s `sandbox/stream` runs, and what
//! a migration or restart test watches.
//!
//! # What it does
//!
//! - TCP ([`StreamKind::Tcp`]): the client connects to the server's port and the pattern of
//!   [`crate::net::tcp`] flows from client to server (upload) or server to client (download),
//!   paced to [`StreamSpec::tcp_rate_bps`], as an [`ENDLESS`] transfer: it runs until
//!   [`World::stop_stream`] stops the source, which then closes once what it wrote is
//!   acknowledged; the sink verifies every byte and takes the FIN as the end.
//! - UDP ([`StreamKind::Udp`]): the client sends a datagram every
//!   [`StreamSpec::udp_interval`] to the server's echo port and checks every echo byte for
//!   byte; requests unanswered for [`crate::net::host::PING_TIMEOUT`] are lost.
//! - [`World::stream_report`]: both ends' records folded into one [`StreamReport`]: bytes,
//!   verified bytes, the longest stall (the larger of the two ends' in-order progress gaps),
//!   retransmissions (fast and timeouts), duplicates, resets, lost datagrams, and the address
//!   the server saw the client as (SNAT shows there).
//!
//! # What it does not do
//!
//! Keep the streams: a [`Stream`] is a handle its caller owns; the records stay in the hosts,
//! so a report can be made at any time, also after the stream stopped. It judges nothing.

use std::net::IpAddr;
use std::time::Duration;

use serde::Serialize;

use super::World;
use crate::net::host::HostError;
use crate::net::tcp::{Direction, ENDLESS, Transfer};
use crate::net::{TcpRecord, record::UdpRecord};

/// A TCP stream's default rate: 10 Mbit/s.
pub const DEFAULT_TCP_RATE_BPS: u64 = 10_000_000;
/// A UDP stream's default interval between requests (100 per second).
pub const DEFAULT_UDP_INTERVAL: Duration = Duration::from_millis(10);
/// Payload bytes of a UDP stream's datagrams.
pub const UDP_DATAGRAM_LEN: usize = 200;
/// The server port when none is given (iperf3's).
pub const DEFAULT_STREAM_PORT: u16 = 5201;

/// What a stream carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StreamKind {
    /// A paced, verified byte pattern over one TCP connection.
    Tcp,
    /// A paced request/echo exchange of UDP datagrams.
    Udp,
}

impl StreamKind {
    /// `tcp` or `udp`.
    pub fn name(self) -> &'static str {
        match self {
            StreamKind::Tcp => "tcp",
            StreamKind::Udp => "udp",
        }
    }
}

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// The stream's name (the caller's; the world does not keep it).
    pub name: String,
    /// TCP or UDP.
    pub kind: StreamKind,
    /// The connecting host (its logical port's name).
    pub client: String,
    /// The accepting host; it starts listening on `port` if it does not yet.
    pub server: String,
    /// The server's port.
    pub port: u16,
    /// TCP only: the server sends, the client receives.
    pub download: bool,
    /// TCP: the source's rate in bits per second.
    pub tcp_rate_bps: u64,
    /// UDP: time between requests.
    pub udp_interval: Duration,
}

impl StreamSpec {
    /// An upload (TCP) or exchange (UDP) from `client` to `server` on [`DEFAULT_STREAM_PORT`]
    /// at the default rate.
    pub fn new(name: &str, kind: StreamKind, client: &str, server: &str) -> StreamSpec {
        StreamSpec {
            name: name.to_string(),
            kind,
            client: client.to_string(),
            server: server.to_string(),
            port: DEFAULT_STREAM_PORT,
            download: false,
            tcp_rate_bps: DEFAULT_TCP_RATE_BPS,
            udp_interval: DEFAULT_UDP_INTERVAL,
        }
    }
}

/// A started stream: the handle [`World::stop_stream`] and [`World::stream_report`] take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stream {
    spec: StreamSpec,
    /// The client's TCP connection or UDP session in its host's record.
    client_conn: String,
    started_at: Duration,
    stopped_at: Option<Duration>,
}

impl Stream {
    /// What was started.
    pub fn spec(&self) -> &StreamSpec {
        &self.spec
    }

    /// The client's TCP connection or UDP session name in its host's record.
    pub fn client_conn(&self) -> &str {
        &self.client_conn
    }

    /// Virtual time it started.
    pub fn started_at(&self) -> Duration {
        self.started_at
    }

    /// Virtual time it was stopped, once it was.
    pub fn stopped_at(&self) -> Option<Duration> {
        self.stopped_at
    }
}

/// A stream as both its ends saw it. Integers only (times in µs), so it serialises
/// canonically.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamReport {
    /// The stream's name.
    pub name: String,
    /// `tcp` or `udp`.
    pub kind: StreamKind,
    /// Client and server hosts, and the server's port.
    pub client: String,
    pub server: String,
    pub port: u16,
    /// `upload` (client → server), `download` (server → client) or `echo` (UDP).
    pub direction: String,
    /// `running`; `stopping` (stopped, the ends not final yet); `stopped` (every byte written
    /// arrived verified and both ends closed cleanly); or how it broke: `reset`, `timed-out`,
    /// `closed-early`, `error: ...` (the TCP outcome of the end that broke).
    pub state: String,
    /// TCP: pattern bytes the receiving end got in order. UDP: payload bytes echoed back.
    pub bytes: u64,
    /// TCP: of those, bytes that matched the pattern. UDP: payload bytes of echoes that matched
    /// their request byte for byte.
    pub verified: u64,
    /// The longest gap in progress (µs): TCP, the larger of the receiver's gap between in-order
    /// arrivals and the sender's gap between acknowledgements; UDP, between echoes. A gap still
    /// open counts.
    pub stall_max_us: u64,
    /// TCP segments either end sent again.
    pub retransmitted: u64,
    /// Of those, segments of fast-retransmit episodes.
    pub fast_retransmits: u64,
    /// Retransmission timeouts at either end.
    pub timeouts: u64,
    /// TCP: data segments either end received whose bytes it had already received in order.
    /// UDP: echoes received twice.
    pub duplicates: u64,
    /// TCP RSTs either end received.
    pub resets: u64,
    /// UDP: requests unanswered after [`crate::net::host::PING_TIMEOUT`]; None for TCP.
    pub lost: Option<u64>,
    /// The client's address and port as the server saw them (after any SNAT); None before the
    /// server saw the stream.
    pub peer_saw: Option<String>,
}

impl StreamReport {
    /// Nothing more will change: stopped, or broken.
    pub fn is_final(&self) -> bool {
        self.state != "running" && self.state != "stopping"
    }
}

fn host_error(what: &str, e: HostError) -> String {
    format!("{what}: {e}")
}

impl World {
    /// Starts a stream (see the module doc); the server starts listening on the port if it
    /// does not yet. Errors name what was wrong: an unknown host, a host without an IPv4
    /// address, a zero rate or interval, a UDP download.
    pub fn start_stream(&mut self, spec: StreamSpec) -> Result<Stream, String> {
        let what = format!("stream {}", spec.name);
        for h in [&spec.client, &spec.server] {
            if !self.hosts.contains_key(h) {
                return Err(format!("{what}: no host named {h:?}"));
            }
        }
        if spec.client == spec.server {
            return Err(format!(
                "{what}: client and server are both {}: give two hosts",
                spec.client
            ));
        }
        let dst = self
            .host(&spec.server)
            .and_then(|h| h.ipv4())
            .ok_or_else(|| format!("{what}: host {} has no IPv4 address (yet)", spec.server))?;
        let now = self.now;
        let client_conn = match spec.kind {
            StreamKind::Tcp => {
                if spec.tcp_rate_bps < 8 {
                    return Err(format!(
                        "{what}: a rate of {} bit/s is less than a byte per second",
                        spec.tcp_rate_bps
                    ));
                }
                match self.host_slot(&spec.server)?.listen_tcp(spec.port) {
                    Ok(()) | Err(HostError::PortInUse(_)) => {}
                    Err(e) => return Err(host_error(&what, e)),
                }
                let t = Transfer {
                    direction: if spec.download {
                        Direction::Download
                    } else {
                        Direction::Upload
                    },
                    bytes: ENDLESS,
                    rate: Some(spec.tcp_rate_bps / 8),
                };
                self.host_slot(&spec.client)?
                    .start_transfer_with(IpAddr::V4(dst), spec.port, t, now)
                    .map_err(|e| host_error(&what, e))?
            }
            StreamKind::Udp => {
                if spec.download {
                    return Err(format!(
                        "{what}: download is for TCP streams (a UDP stream is a request/echo \
                         exchange, both ways)"
                    ));
                }
                if spec.udp_interval.is_zero() {
                    return Err(format!("{what}: the interval between requests is zero"));
                }
                match self.host_slot(&spec.server)?.listen_udp_echo(spec.port) {
                    Ok(()) | Err(HostError::PortInUse(_)) => {}
                    Err(e) => return Err(host_error(&what, e)),
                }
                self.host_slot(&spec.client)?
                    .udp_stream(
                        IpAddr::V4(dst),
                        spec.port,
                        spec.udp_interval,
                        UDP_DATAGRAM_LEN,
                        now,
                    )
                    .map_err(|e| host_error(&what, e))?
            }
        };
        self.event(format!(
            "{what} started: {} {} -> {}:{} ({client_conn})",
            spec.kind.name(),
            spec.client,
            spec.server,
            spec.port
        ));
        self.settle();
        Ok(Stream {
            spec,
            client_conn,
            started_at: now,
            stopped_at: None,
        })
    }

    /// Stops a stream: TCP, the source writes nothing more and closes once what it wrote is
    /// acknowledged; UDP, no more requests (the session is done once the last echoes came or
    /// timed out). Its report becomes final once both ends are (see
    /// [`StreamReport::is_final`]).
    pub fn stop_stream(&mut self, s: &mut Stream) -> Result<(), String> {
        let what = format!("stream {}", s.spec.name);
        if s.stopped_at.is_some() {
            return Err(format!("{what} is stopped already"));
        }
        match s.spec.kind {
            StreamKind::Tcp if s.spec.download => {
                let conn = self.server_conn(s).ok_or_else(|| {
                    format!(
                        "{what}: the server {} has not read the stream's request yet, so it \
                         cannot stop sending; try again in a moment",
                        s.spec.server
                    )
                })?;
                self.host_slot(&s.spec.server)?
                    .stop_transfer(&conn)
                    .map_err(|e| host_error(&what, e))?;
            }
            StreamKind::Tcp => self
                .host_slot(&s.spec.client)?
                .stop_transfer(&s.client_conn)
                .map_err(|e| host_error(&what, e))?,
            StreamKind::Udp => self
                .host_slot(&s.spec.client)?
                .stop_udp(&s.client_conn)
                .map_err(|e| host_error(&what, e))?,
        }
        s.stopped_at = Some(self.now);
        self.event(format!("{what} stopped"));
        self.settle();
        Ok(())
    }

    /// The server's end of a TCP stream: the connection on the server's port carrying the
    /// client's pattern key.
    fn server_conn(&self, s: &Stream) -> Option<String> {
        let key = self.host(&s.spec.client)?.transfer_key(&s.client_conn)?;
        let server = self.host(&s.spec.server)?;
        let prefix = format!("tcp:{}:{}<-", s.spec.server, s.spec.port);
        server
            .tcp_names()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .find(|n| server.transfer_key(n) == Some(key))
    }

    /// The stream as both its ends see it now.
    pub fn stream_report(&self, s: &Stream) -> StreamReport {
        let mut r = StreamReport {
            name: s.spec.name.clone(),
            kind: s.spec.kind,
            client: s.spec.client.clone(),
            server: s.spec.server.clone(),
            port: s.spec.port,
            direction: String::new(),
            state: if s.stopped_at.is_some() {
                "stopping".into()
            } else {
                "running".into()
            },
            bytes: 0,
            verified: 0,
            stall_max_us: 0,
            retransmitted: 0,
            fast_retransmits: 0,
            timeouts: 0,
            duplicates: 0,
            resets: 0,
            lost: None,
            peer_saw: None,
        };
        match s.spec.kind {
            StreamKind::Tcp => {
                r.direction = if s.spec.download {
                    "download".into()
                } else {
                    "upload".into()
                };
                let client = self.tcp_record(&s.spec.client, &s.client_conn);
                let server = self
                    .server_conn(s)
                    .and_then(|n| self.tcp_record(&s.spec.server, &n));
                self.fold_tcp(&mut r, s, client.as_ref(), server.as_ref());
            }
            StreamKind::Udp => {
                r.direction = "echo".into();
                let rec = self
                    .host(&s.spec.client)
                    .and_then(|h| h.udp_record_at(&s.client_conn, self.now));
                if let Some(u) = rec {
                    self.fold_udp(&mut r, s, &u);
                }
            }
        }
        r
    }

    fn fold_tcp(
        &self,
        r: &mut StreamReport,
        s: &Stream,
        client: Option<&TcpRecord>,
        server: Option<&TcpRecord>,
    ) {
        let ends: Vec<&TcpRecord> = client.into_iter().chain(server).collect();
        let sink = if s.spec.download { client } else { server };
        if let Some(k) = sink {
            r.bytes = k.bytes_received;
            r.verified = k.bytes_verified;
        }
        for e in &ends {
            r.stall_max_us = r.stall_max_us.max(e.stall_max_us);
            r.retransmitted += e.retransmitted_segments;
            r.fast_retransmits += e.fast_retransmits;
            r.timeouts += e.retransmission_timeouts;
            r.duplicates += e.duplicates;
            r.resets += e.resets_received;
        }
        r.peer_saw = server.map(|k| k.remote.clone());
        // A broken end says how it broke; both ends complete after a stop is a clean end.
        let broken = ends
            .iter()
            .map(|e| e.outcome.as_str())
            .find(|o| !matches!(*o, "running" | "complete" | ""));
        if let Some(o) = broken {
            r.state = o.to_string();
        } else if s.stopped_at.is_some()
            && ends.len() == 2
            && ends.iter().all(|e| e.outcome == "complete")
        {
            r.state = "stopped".into();
        }
    }

    fn fold_udp(&self, r: &mut StreamReport, s: &Stream, u: &UdpRecord) {
        let len = UDP_DATAGRAM_LEN as u64;
        r.bytes = u.answered * len;
        r.verified = u.answered * len;
        r.stall_max_us = u.stall_max_us;
        r.duplicates = u.duplicates;
        r.lost = Some(u.lost);
        // The echo server's peers: the one with the client's port (SNAT keeps ports it can),
        // else the last new one.
        let lport = u.local.rsplit_once(':').map(|(_, p)| p);
        r.peer_saw = self
            .host(&s.spec.server)
            .and_then(|h| h.udp_server_record(s.spec.port))
            .and_then(|rec| {
                rec.peers
                    .iter()
                    .find(|p| p.rsplit_once(':').map(|(_, q)| q) == lport)
                    .or(rec.peers.last())
                    .cloned()
            });
        if u.done {
            r.state = "stopped".into();
        }
    }
}
