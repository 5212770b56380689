//! The record: what every simulated connection saw, serialised canonically.
//!
//! # What it does
//!
//! Plain data, filled by [`super::host::Host`] (each host keeps a [`HostRecord`], snapshot with
//! `Host::record`) and collected by the world into a [`Record`] together with link counters and
//! world events. Every map is a `BTreeMap`, every number an integer (times in microseconds of
//! virtual time), so [`Record::to_json`] gives identical bytes for identical runs.
//!
//! Names are stable and readable: a TCP connection opened by host `a` to `10.0.0.3:5001` is
//! `tcp:a->10.0.0.3:5001#1` (the `#n` counts a host's outgoing connections); the same connection
//! at the accepting host `b` is `tcp:b:5001<-10.0.0.1:49152`. Pings are `ping:a->10.0.0.3#1`, UDP
//! exchanges `udp:a->10.0.0.3:7#1`, UDP echo servers `udp-echo:b:7`.
//!
//! # What it does not do
//!
//! It does not judge: outcomes are facts (`complete`, `reset`, `timed-out`, `closed-early`,
//! `running`); tests
//! decide what is acceptable. It keeps no packet traces.

use std::collections::BTreeMap;

use serde::Serialize;

use super::link::LinkCounters;

/// Gaps longer than this count as a stall in [`TcpRecord::stalls_over_200ms`].
pub const STALL_THRESHOLD_US: u64 = 200_000;

/// The whole simulation's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Record {
    /// The seed of the run.
    pub seed: u64,
    /// Per host, by host name.
    pub hosts: BTreeMap<String, HostRecord>,
    /// Per link, by link name.
    pub links: BTreeMap<String, LinkCounters>,
    /// World events in order: (virtual time in µs, what happened).
    pub events: Vec<(u64, String)>,
}

impl Record {
    /// An empty record for a run with `seed`.
    pub fn new(seed: u64) -> Record {
        Record {
            seed,
            ..Record::default()
        }
    }

    /// Canonical JSON (pretty, keys in `BTreeMap` order, integers only): the same run gives the
    /// same bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain structs of integers, strings and BTreeMaps cannot fail.
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Where two serialised records first differ: the line number and both lines (None when
    /// they are identical), for reproducibility failures that say what changed.
    pub fn first_difference(a: &[u8], b: &[u8]) -> Option<String> {
        let (sa, sb) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
        let mut la = sa.lines();
        let mut lb = sb.lines();
        let mut n = 1;
        loop {
            match (la.next(), lb.next()) {
                (None, None) => return None,
                (x, y) if x == y => n += 1,
                (x, y) => {
                    return Some(format!(
                        "line {n}: {} | {}",
                        x.unwrap_or("<end>"),
                        y.unwrap_or("<end>")
                    ));
                }
            }
        }
    }

    /// Every TCP connection of every host, as (host, connection name, record).
    pub fn tcp(&self) -> impl Iterator<Item = (&str, &str, &TcpRecord)> {
        self.hosts
            .iter()
            .flat_map(|(h, r)| r.tcp.iter().map(move |(n, t)| (h.as_str(), n.as_str(), t)))
    }
}

impl HostRecord {
    /// One line per connection, ping, UDP session and DHCP client, for people (the sandbox
    /// prints these).
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(d) = &self.dhcp {
            out.push(format!("dhcp: {}", d.summary()));
        }
        for (n, p) in &self.pings {
            out.push(format!("{n}: {}", p.summary()));
        }
        for (n, u) in &self.udp {
            out.push(format!("{n}: {}", u.summary()));
        }
        for (n, t) in &self.tcp {
            out.push(format!("{n}: {}", t.summary()));
        }
        out
    }
}

/// What one host saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostRecord {
    /// Frames and bytes handed to the host.
    pub frames_in: u64,
    pub bytes_in: u64,
    /// Frames and bytes the host sent.
    pub frames_out: u64,
    pub bytes_out: u64,
    /// Frames the host could not parse as Ethernet (counted, not fatal).
    pub malformed_in: u64,
    /// Frames that arrived while the host was paused (dropped).
    pub dropped_while_paused: u64,
    /// TCP connections by name.
    pub tcp: BTreeMap<String, TcpRecord>,
    /// Ping sessions by name.
    pub pings: BTreeMap<String, PingRecord>,
    /// UDP request/response sessions by name.
    pub udp: BTreeMap<String, UdpRecord>,
    /// UDP echo servers by name.
    pub udp_servers: BTreeMap<String, UdpServerRecord>,
    /// TCP RST segments received that matched no connection of the record.
    pub stray_resets_in: u64,
    /// TCP RST segments the host sent to a remote endpoint none of its connections has, by that
    /// endpoint (`ip:port`): its stack's answers to segments that matched no socket, e.g. a
    /// connection's segments arriving from another address after a SNAT changed under it.
    pub strays_reset: BTreeMap<String, u64>,
    /// The DHCPv4 client, when the host uses one.
    pub dhcp: Option<DhcpRecord>,
    /// ARP/RARP announcements the host sent (after a migration).
    pub announcements: u64,
    /// IPv6 router advertisements the host received, decoded by smoltcp.
    pub router_adverts: Vec<RouterAdvert>,
    /// IGMP messages the host received, decoded by smoltcp.
    pub igmp_in: Vec<IgmpSeen>,
}

/// One IGMP message a host received.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IgmpSeen {
    /// `query`, `report` or `leave`.
    pub kind: &'static str,
    /// The IPv4 source.
    pub src: String,
}

/// One router advertisement a host received.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RouterAdvert {
    /// When (simulated time, ms).
    pub at_ms: u64,
    /// The Ethernet and IPv6 source.
    pub src_mac: String,
    pub src_ip: String,
    /// Router lifetime (s), managed and other flags.
    pub lifetime: u16,
    pub managed: bool,
    pub other: bool,
    /// The prefix information options, `prefix/len`, with the autonomous flag.
    pub prefixes: Vec<(String, bool)>,
    /// The MTU option, if any.
    pub mtu: Option<u32>,
}

/// One TCP connection, from one end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TcpRecord {
    /// "client" (this host connected) or "server" (this host accepted).
    pub role: String,
    /// "upload" (client → server) or "download" (server → client); empty until a server has read
    /// the client's header.
    pub direction: String,
    /// Local and remote endpoint, `ip:port` (`[ip]:port` for IPv6).
    pub local: String,
    pub remote: String,
    /// Pattern bytes this end is to send (source) or expects (sink).
    pub bytes_expected: u64,
    /// Pattern bytes written into the socket (source).
    pub bytes_sent: u64,
    /// Pattern bytes acknowledged by the peer (source).
    pub bytes_acked: u64,
    /// Pattern bytes received in order (sink).
    pub bytes_received: u64,
    /// Received bytes that matched the pattern (sink).
    pub bytes_verified: u64,
    /// Received bytes that did not match the pattern, plus header errors.
    pub pattern_errors: u64,
    /// Offset of the first wrong byte, if any.
    pub first_error_offset: Option<u64>,
    /// Virtual times (µs): opened, established, all bytes acknowledged/verified, socket closed.
    pub started_us: u64,
    pub established_us: Option<u64>,
    pub completed_us: Option<u64>,
    pub closed_us: Option<u64>,
    /// The longest gap (µs) between two steps of in-order progress, including a gap still open:
    /// at a source, between acknowledgements while written data was unacknowledged; at a sink,
    /// between in-order arrivals while bytes were still expected (so a paced source's pacing
    /// interval shows at its sink). DESIGN measures a migration's stall at the external peer.
    pub stall_max_us: u64,
    /// How many such gaps exceeded [`STALL_THRESHOLD_US`].
    pub stalls_over_200ms: u64,
    /// TCP segments with RST received on this connection.
    pub resets_received: u64,
    /// TCP segments with RST this end sent on this connection.
    pub resets_sent: u64,
    /// Segments this end sent whose sequence range had been sent before, and their bytes.
    pub retransmitted_segments: u64,
    pub retransmitted_bytes: u64,
    /// Of `retransmitted_segments`, those of fast-retransmit episodes: the sender went back to
    /// its oldest unacknowledged byte after the third duplicate ACK (RFC 5681), and every
    /// segment it sent again in that go-back-N burst. Seen from this end's own frames (see
    /// [`super::frames`]).
    pub fast_retransmits: u64,
    /// Of `retransmitted_segments`, those of timeout episodes: retransmissions no duplicate
    /// ACKs asked for (the sender's retransmission timer fired), with their go-back-N burst.
    /// `fast_retransmits + timeout_retransmits == retransmitted_segments`.
    pub timeout_retransmits: u64,
    /// Retransmission timeouts: how many timeout episodes began (a backoff that sends the same
    /// segment again is another one).
    pub retransmission_timeouts: u64,
    /// Data segments this end received whose every byte it had already received in order (a
    /// retransmission of something that had arrived, or a copy the network made); counted
    /// from this end's ingress frames.
    pub duplicates: u64,
    /// Segments this end sent carrying data (SYN and FIN count as one byte).
    pub data_segments_sent: u64,
    /// The socket's state (smoltcp's names: ESTABLISHED, TIME-WAIT, CLOSED, ...).
    pub state: String,
    /// `complete` (every byte acknowledged/verified), `running`, `reset` (closed by an RST),
    /// `timed-out` (closed by the host's TCP timeout), `closed-early` (closed before every byte
    /// went through, without RST) or `error: ...` (pattern or header error; this end aborted).
    pub outcome: String,
}

/// A ping session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PingRecord {
    /// Destination address.
    pub dst: String,
    /// ICMP identifier used.
    pub ident: u16,
    /// Requests to send, sent, answered.
    pub count: u64,
    pub sent: u64,
    pub answered: u64,
    /// Requests that actually left the host (smoltcp holds a request while it resolves the next
    /// hop; 0 with `sent` > 0 means ARP/ND never succeeded).
    pub emitted: u64,
    /// Round-trip time per sequence number in µs, from when the request was queued, as `ping`
    /// measures (None: no answer yet / lost).
    pub rtt_us: Vec<Option<u64>>,
    /// Replies whose payload differed from the request, or duplicates.
    pub bad_replies: u64,
    pub duplicates: u64,
    /// Requests that could not be sent (no route, no source address).
    pub send_errors: u64,
    /// True once every request was answered or timed out.
    pub done: bool,
}

/// A UDP request/response session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UdpRecord {
    /// Destination and local endpoint.
    pub dst: String,
    pub local: String,
    pub count: u64,
    pub sent: u64,
    pub answered: u64,
    /// Datagrams that actually left the host (see [`PingRecord::emitted`]).
    pub emitted: u64,
    pub rtt_us: Vec<Option<u64>>,
    pub bad_replies: u64,
    pub duplicates: u64,
    pub send_errors: u64,
    /// Requests whose echo had not come [`super::host::PING_TIMEOUT`] after they were queued
    /// (once the session is done: every request never answered).
    pub lost: u64,
    /// The longest gap (µs) between two echoes arriving (from the first request to the first
    /// echo for the first gap), including a gap still open while requests are outstanding.
    pub stall_max_us: u64,
    pub done: bool,
}

/// A UDP echo server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UdpServerRecord {
    pub received: u64,
    pub replied: u64,
    /// Distinct peers (ip:port) seen, in order of first datagram.
    pub peers: Vec<String>,
}

/// The DHCPv4 client.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DhcpRecord {
    /// DHCPDISCOVER and DHCPREQUEST messages the host sent.
    pub discovers_sent: u64,
    pub requests_sent: u64,
    /// DHCPOFFER, DHCPACK and DHCPNAK messages for this host's MAC it received.
    pub offers_received: u64,
    pub acks_received: u64,
    pub naks_received: u64,
    /// Server messages the client must ignore, by reason (e.g. an ACK without a subnet mask,
    /// which smoltcp's client drops), with counts: so a lease that never comes has a cause.
    pub unusable: BTreeMap<String, u64>,
    /// Every configuration the client accepted, in order.
    pub leases: Vec<DhcpLease>,
    /// How often the configuration was lost.
    pub deconfigured: u64,
}

fn ms3(us: u64) -> String {
    format!("{}.{:03} ms", us / 1000, us % 1000)
}

impl TcpRecord {
    /// The address of the other end, as this end saw it (`remote` without its port).
    pub fn remote_ip(&self) -> &str {
        self.remote
            .rsplit_once(':')
            .map_or(&self.remote, |(ip, _)| ip)
    }

    /// One line for people: outcome, bytes, retransmissions, resets, longest stall.
    pub fn summary(&self) -> String {
        let bytes = if self.role == "client" && self.direction == "upload"
            || self.role == "server" && self.direction == "download"
        {
            format!(
                "{}/{} bytes acknowledged",
                self.bytes_acked, self.bytes_expected
            )
        } else {
            format!(
                "{}/{} bytes verified, {} wrong",
                self.bytes_verified, self.bytes_expected, self.pattern_errors
            )
        };
        format!(
            "{} {}: {bytes}, {} retransmitted segments, {} resets received, longest stall {}, state {}",
            self.role,
            self.outcome,
            self.retransmitted_segments,
            self.resets_received,
            ms3(self.stall_max_us),
            self.state
        )
    }
}

impl PingRecord {
    /// One line for people: answered/sent and the RTT range.
    pub fn summary(&self) -> String {
        let rtts: Vec<u64> = self.rtt_us.iter().flatten().copied().collect();
        let range = match (rtts.iter().min(), rtts.iter().max()) {
            (Some(lo), Some(hi)) => format!(", rtt {}..{}", ms3(*lo), ms3(*hi)),
            _ => String::new(),
        };
        format!(
            "{} of {} answered ({} left the host){range}{}",
            self.answered,
            self.sent,
            self.emitted,
            if self.bad_replies > 0 {
                format!(", {} bad replies", self.bad_replies)
            } else {
                String::new()
            }
        )
    }
}

impl UdpRecord {
    /// One line for people: answered/sent and bad replies.
    pub fn summary(&self) -> String {
        format!(
            "{} of {} echoed, {} bad replies",
            self.answered, self.sent, self.bad_replies
        )
    }
}

impl DhcpRecord {
    /// One line for people: the last lease or what was sent.
    pub fn summary(&self) -> String {
        match self.leases.last() {
            Some(l) => format!(
                "leased {} (router {}) from {} after {} DISCOVER, {} REQUEST",
                l.address,
                l.router.as_deref().unwrap_or("none"),
                l.server,
                self.discovers_sent,
                self.requests_sent
            ),
            None => {
                let mut s = format!(
                    "no lease yet after {} DISCOVER, {} REQUEST",
                    self.discovers_sent, self.requests_sent
                );
                for (why, n) in &self.unusable {
                    s.push_str(&format!("; {n}× {why}"));
                }
                s
            }
        }
    }
}

/// One accepted DHCPv4 configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DhcpLease {
    pub at_us: u64,
    /// Address with prefix length, `10.0.0.5/24`.
    pub address: String,
    pub router: Option<String>,
    pub dns_servers: Vec<String>,
    pub server: String,
    /// Lease time (option 51) of the last ACK seen before this configuration, in seconds.
    pub lease_s: Option<u32>,
}
