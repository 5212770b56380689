//! Service monitors (LB health checks): the datapath probes the backends of the monitors the
//! controller hands it ([`crate::proto::ToDatapath::SvcMonitors`]: those whose logical ports
//! are bound on this chassis) and reports status changes
//! ([`crate::proto::FromDatapath::SvcStatus`]), which the controller writes to SB
//! `Service_Monitor.status`; northd then drops offline backends from the VIPs.
//!
//! # What it does
//!
//! One state machine per monitor, as ovn-controller's pinctrl runs it (`svc_monitors_run`):
//!
//! - A probe goes out of the backend's local port, from `src_mac`/`src_ip` to the backend's
//!   MAC and IP: TCP: a SYN from a fresh source port and sequence number; UDP: an 8-byte
//!   datagram from a source port kept for the monitor.
//! - Replies reach it through the pipeline's `handle_svc_check` ([`Prober::handle_reply`]):
//!   TCP: a SYN-ACK acknowledging the probe counts a success (and is answered with a RST so
//!   the backend frees the connection), a RST a failure; UDP: an ICMP/ICMPv6 port unreachable
//!   quoting the probe counts a failure.
//! - No reply within `timeout`: a failure for TCP, a success for UDP.
//! - The next probe goes `interval` after the last outcome. After `success_count` successes
//!   (`failure_count` failures) since the status was last set, the status becomes `online`
//!   (`offline`); like pinctrl, each counter is reset only when it sets the status.
//! - Options as pinctrl reads them: `interval` (s, default 5), `timeout` (s, default 3),
//!   `success_count` and `failure_count` (default 1).
//!
//! So a TCP backend whose service closes (answering RSTs) is `offline` at most
//! `interval × failure_count` after its last good probe; one that vanishes (no answer at all)
//! at most `interval × failure_count + timeout`.
//!
//! # What it does not do
//!
//! No I/O and no clock: `now` comes in, frames and status changes go out. It does not
//! resolve MACs (the controller sends the backend's) or write SB.
//!
//! Differences from pinctrl: source ports and sequence numbers come from a seeded generator
//! (deterministic under the simulator), and the RST answering a SYN-ACK carries the sequence
//! number the SYN-ACK acknowledged (pinctrl's is one past it, which a strict stack ignores).
//!
//! # Call contract
//!
//! [`Prober::set`] with the controller's list (states of monitors still listed are kept);
//! [`Prober::handle_reply`] for each punted frame; [`Prober::poll`] when
//! [`Prober::poll_timeout`] is due (and after `set`/`handle_reply`), sending the frames it
//! returns out of the named local ports and reporting the status changes.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use hf_wire::EthAddr;
use hf_wire::ip_proto;

use crate::proto::{SvcMonitorMsg, SvcStatusMsg};

/// A monitor's identity: (logical port, IP, port, protocol).
type Key = (String, String, u16, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Init,
    Waiting,
    Online,
    Offline,
}

#[derive(Debug, Clone)]
struct Mon {
    msg: SvcMonitorMsg,
    ip: IpAddr,
    src_ip: IpAddr,
    udp: bool,
    interval: Duration,
    timeout: Duration,
    success_count: u32,
    failure_count: u32,
    state: State,
    /// `None`: not known yet.
    status: Option<bool>,
    n_success: u32,
    n_failures: u32,
    next_send: Duration,
    wait_until: Duration,
    seq: u32,
    tp_src: u16,
}

/// A frame to send out of a local port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The local port (the monitor's logical port).
    pub port: String,
    /// The Ethernet frame.
    pub frame: Vec<u8>,
}

/// The monitors of this chassis. See the module documentation.
#[derive(Debug)]
pub struct Prober {
    mons: BTreeMap<Key, Mon>,
    rng: u64,
    /// Frames to send (probes and RSTs), drained by [`Prober::poll`].
    out: Vec<Probe>,
}

impl Default for Prober {
    fn default() -> Self {
        Prober {
            mons: BTreeMap::new(),
            rng: 0x853c_49e6_748f_ea9b,
            out: Vec::new(),
        }
    }
}

fn opt(o: &BTreeMap<String, String>, k: &str, default: u32) -> u32 {
    o.get(k)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(default)
}

fn key_of(m: &SvcMonitorMsg) -> Key {
    (
        m.logical_port.clone(),
        m.ip.clone(),
        m.port,
        m.protocol.clone(),
    )
}

impl Prober {
    /// Whether any monitor runs.
    pub fn is_empty(&self) -> bool {
        self.mons.is_empty()
    }

    /// Takes the controller's list: new monitors start (their first probe at the next
    /// [`Prober::poll`]), listed ones keep their state (their options updated), others stop.
    /// Monitors whose addresses do not parse are left out and returned.
    pub fn set(&mut self, list: Vec<SvcMonitorMsg>) -> Vec<String> {
        let mut bad = Vec::new();
        let mut next = BTreeMap::new();
        for msg in list {
            let key = key_of(&msg);
            let (Ok(ip), Ok(src_ip)) = (msg.ip.parse::<IpAddr>(), msg.src_ip.parse::<IpAddr>())
            else {
                bad.push(format!(
                    "service monitor {}/{}:{}: ip {:?} or src_ip {:?} does not parse; not probed",
                    msg.logical_port, msg.ip, msg.port, msg.ip, msg.src_ip
                ));
                continue;
            };
            if ip.is_ipv4() != src_ip.is_ipv4() {
                bad.push(format!(
                    "service monitor {}/{}:{}: src_ip {} is not of the backend's family; not probed",
                    msg.logical_port, msg.ip, msg.port, msg.src_ip
                ));
                continue;
            }
            let o = &msg.options;
            let interval = Duration::from_secs(u64::from(opt(o, "interval", 5)));
            let timeout = Duration::from_secs(u64::from(opt(o, "timeout", 3)));
            let success_count = opt(o, "success_count", 1);
            let failure_count = opt(o, "failure_count", 1);
            let udp = msg.protocol == "udp";
            let m = match self.mons.remove(&key) {
                Some(mut m) => {
                    m.msg = msg;
                    m.ip = ip;
                    m.src_ip = src_ip;
                    m.interval = interval;
                    m.timeout = timeout;
                    m.success_count = success_count;
                    m.failure_count = failure_count;
                    m
                }
                None => Mon {
                    msg,
                    ip,
                    src_ip,
                    udp,
                    interval,
                    timeout,
                    success_count,
                    failure_count,
                    state: State::Init,
                    status: None,
                    n_success: 0,
                    n_failures: 0,
                    next_send: Duration::ZERO,
                    wait_until: Duration::ZERO,
                    seq: 0,
                    tp_src: 0,
                },
            };
            next.insert(key, m);
        }
        self.mons = next;
        bad
    }

    /// Every monitor whose status is known.
    pub fn statuses(&self) -> Vec<SvcStatusMsg> {
        self.mons
            .values()
            .filter_map(|m| m.status.map(|s| status_msg(m, s)))
            .collect()
    }

    /// When [`Prober::poll`] next has work.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.mons
            .values()
            .map(|m| match m.state {
                State::Init => Duration::ZERO,
                // pinctrl's "now > wait_time": due just after.
                State::Waiting => m.wait_until + Duration::from_millis(1),
                State::Online | State::Offline => m.next_send,
            })
            .min()
    }

    fn random(&mut self) -> u32 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// Runs every monitor's state machine at `now`: the frames to send and the status
    /// changes.
    pub fn poll(&mut self, now: Duration) -> (Vec<Probe>, Vec<SvcStatusMsg>) {
        let mut changes = Vec::new();
        let keys: Vec<Key> = self.mons.keys().cloned().collect();
        for k in keys {
            let Some(mut m) = self.mons.remove(&k) else {
                continue;
            };
            let old = m.status;
            match m.state {
                State::Init => self.send_probe(&mut m, now),
                State::Waiting => {
                    if now > m.wait_until {
                        if m.udp {
                            m.n_success += 1;
                            m.state = State::Online;
                        } else {
                            m.n_failures += 1;
                            m.state = State::Offline;
                        }
                        m.next_send = now + m.interval;
                    }
                }
                State::Online | State::Offline => {}
            }
            match m.state {
                State::Online => {
                    if m.n_success >= m.success_count {
                        m.status = Some(true);
                        m.n_success = 0;
                    }
                    if now >= m.next_send {
                        self.send_probe(&mut m, now);
                    }
                }
                State::Offline => {
                    if m.n_failures >= m.failure_count {
                        m.status = Some(false);
                        m.n_failures = 0;
                    }
                    if now >= m.next_send {
                        self.send_probe(&mut m, now);
                    }
                }
                State::Init | State::Waiting => {}
            }
            if m.status != old
                && let Some(s) = m.status
            {
                changes.push(status_msg(&m, s));
            }
            self.mons.insert(k, m);
        }
        (std::mem::take(&mut self.out), changes)
    }

    fn send_probe(&mut self, m: &mut Mon, now: Duration) {
        if m.udp {
            if m.tp_src == 0 {
                m.tp_src = 32768 + (self.random() % 28232) as u16;
            }
            let mut l4 = Vec::with_capacity(16);
            l4.extend_from_slice(&m.tp_src.to_be_bytes());
            l4.extend_from_slice(&m.msg.port.to_be_bytes());
            l4.extend_from_slice(&16u16.to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
            l4.extend_from_slice(&[0; 8]);
            self.emit(m, ip_proto::UDP, &l4);
        } else {
            m.seq = self.random();
            m.tp_src = 32768 + (self.random() % 28232) as u16;
            let l4 = tcp(m.tp_src, m.msg.port, m.seq, 0, 0x02);
            self.emit(m, ip_proto::TCP, &l4);
        }
        m.wait_until = now + m.timeout;
        m.state = State::Waiting;
    }

    fn emit(&mut self, m: &Mon, proto: u8, l4: &[u8]) {
        let mut frame = Vec::with_capacity(80);
        if hf_wire::reply::ip_packet(
            &mut frame,
            EthAddr(m.msg.src_mac),
            EthAddr(m.msg.dst_mac),
            m.src_ip,
            m.ip,
            proto,
            l4,
        )
        .is_ok()
        {
            self.out.push(Probe {
                port: m.msg.logical_port.clone(),
                frame,
            });
        }
    }

    /// A frame `handle_svc_check` punted from logical port `port`: a reply to a probe, or
    /// nothing this prober knows (ignored). Run [`Prober::poll`] after it.
    pub fn handle_reply(&mut self, port: &str, frame: &[u8], now: Duration) {
        let Ok(p) = hf_wire::parse(frame, 0, 0) else {
            return;
        };
        let k = &p.key;
        let src = match k.eth_type {
            0x0800 => IpAddr::V4(k.ip4_src),
            0x86dd => IpAddr::V6(k.ip6_src),
            _ => return,
        };
        if k.ip_proto == ip_proto::TCP && p.has_l4() {
            let Some(m) = self.mons.values_mut().find(|m| {
                !m.udp && m.msg.logical_port == port && m.ip == src && m.msg.port == k.tp_src
            }) else {
                return;
            };
            if k.tp_dst != m.tp_src || p.tcp.ack != m.seq.wrapping_add(1) {
                return;
            }
            let (syn, rst, ack) = (
                k.tcp_flags & 0x02 != 0,
                k.tcp_flags & 0x04 != 0,
                k.tcp_flags & 0x10 != 0,
            );
            if syn && ack {
                m.n_success += 1;
                m.state = State::Online;
                m.next_send = now + m.interval;
                // Free the backend's half-open connection.
                let l4 = tcp(
                    m.tp_src,
                    m.msg.port,
                    p.tcp.ack,
                    p.tcp.seq.wrapping_add(1),
                    0x14,
                );
                let m = m.clone();
                self.emit(&m, ip_proto::TCP, &l4);
            } else if rst {
                m.n_failures += 1;
                m.state = State::Offline;
                m.next_send = now + m.interval;
            }
            return;
        }
        // UDP: ICMP destination/port unreachable quoting the probe.
        let unreachable = match k.eth_type {
            0x0800 => k.ip_proto == ip_proto::ICMP && k.icmp_type == 3 && k.icmp_code == 3,
            _ => k.ip_proto == ip_proto::ICMPV6 && k.icmp_type == 1 && k.icmp_code == 4,
        };
        let Some(inner) = p.inner.filter(|_| unreachable) else {
            return;
        };
        if inner.proto != ip_proto::UDP {
            return;
        }
        if let Some(m) = self.mons.values_mut().find(|m| {
            m.udp
                && m.msg.logical_port == port
                && m.ip == inner.dst
                && m.msg.port == inner.tp_dst
                && m.tp_src == inner.tp_src
        }) {
            m.n_failures += 1;
            m.state = State::Offline;
            m.next_send = now + m.interval;
        }
    }
}

fn status_msg(m: &Mon, online: bool) -> SvcStatusMsg {
    SvcStatusMsg {
        logical_port: m.msg.logical_port.clone(),
        ip: m.msg.ip.clone(),
        port: m.msg.port,
        protocol: m.msg.protocol.clone(),
        status: if online { "online" } else { "offline" }.to_string(),
    }
}

/// A TCP header without options (checksum filled in by `ip_packet`).
fn tcp(src: u16, dst: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut h = Vec::with_capacity(20);
    h.extend_from_slice(&src.to_be_bytes());
    h.extend_from_slice(&dst.to_be_bytes());
    h.extend_from_slice(&seq.to_be_bytes());
    h.extend_from_slice(&ack.to_be_bytes());
    h.push(5 << 4);
    h.push(flags);
    h.extend_from_slice(&65160u16.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(proto: &str) -> SvcMonitorMsg {
        let mut options = BTreeMap::new();
        options.insert("interval".to_string(), "2".to_string());
        options.insert("timeout".to_string(), "1".to_string());
        options.insert("failure_count".to_string(), "2".to_string());
        SvcMonitorMsg {
            logical_port: "p1".into(),
            ip: "10.0.0.3".into(),
            port: 80,
            protocol: proto.into(),
            src_mac: [0x0a, 0, 0, 0, 0, 1],
            src_ip: "10.0.0.254".into(),
            dst_mac: [0x0a, 0, 0, 0, 0, 3],
            options,
        }
    }

    /// The backend's answer to `probe`: SYN-ACK or RST.
    fn answer(probe: &[u8], flags: u8) -> Vec<u8> {
        let p = hf_wire::parse(probe, 0, 0).expect("probe parses");
        let l4 = tcp(80, p.key.tp_src, 1000, p.tcp.seq.wrapping_add(1), flags);
        let mut f = Vec::new();
        hf_wire::reply::ip_packet(
            &mut f,
            p.key.eth_dst,
            p.key.eth_src,
            IpAddr::V4(p.key.ip4_dst),
            IpAddr::V4(p.key.ip4_src),
            ip_proto::TCP,
            &l4,
        )
        .expect("builds");
        f
    }

    #[test]
    fn tcp_online_then_offline_after_failure_count_resets() {
        let mut pr = Prober::default();
        assert!(pr.set(vec![msg("tcp")]).is_empty());
        let s = Duration::from_secs;
        let (out, ch) = pr.poll(s(0));
        assert_eq!(out.len(), 1);
        assert!(ch.is_empty());
        pr.handle_reply("p1", &answer(&out[0].frame, 0x12), s(0));
        let (out, ch) = pr.poll(s(0));
        assert_eq!(out.len(), 1, "the SYN-ACK is answered with a RST");
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].status, "online");
        // Service closed: RSTs.
        let mut t = s(2);
        let mut offline_at = None;
        for _ in 0..4 {
            assert_eq!(pr.poll_timeout(), Some(t));
            let (out, _) = pr.poll(t);
            assert_eq!(out.len(), 1);
            pr.handle_reply("p1", &answer(&out[0].frame, 0x14), t);
            let (_, ch) = pr.poll(t);
            if let Some(c) = ch.first() {
                assert_eq!(c.status, "offline");
                offline_at = Some(t);
                break;
            }
            t += s(2);
        }
        assert_eq!(offline_at, Some(s(4)), "two failures, one interval apart");
    }

    #[test]
    fn tcp_silence_is_a_failure_after_the_timeout_and_udp_silence_a_success() {
        for (proto, want) in [("tcp", "offline"), ("udp", "online")] {
            let mut pr = Prober::default();
            let mut m = msg(proto);
            m.options.insert("failure_count".into(), "1".into());
            pr.set(vec![m]);
            let (out, _) = pr.poll(Duration::ZERO);
            assert_eq!(out.len(), 1);
            let due = pr.poll_timeout().expect("waiting");
            assert_eq!(due, Duration::from_millis(1001));
            let (_, ch) = pr.poll(due);
            assert_eq!(ch.len(), 1, "{proto}");
            assert_eq!(ch[0].status, want, "{proto}");
        }
    }

    #[test]
    fn udp_port_unreachable_quoting_the_probe_is_a_failure() {
        let mut pr = Prober::default();
        let mut m = msg("udp");
        m.options.insert("failure_count".into(), "1".into());
        pr.set(vec![m]);
        let (out, _) = pr.poll(Duration::ZERO);
        assert_eq!(out.len(), 1);
        let probe = &out[0].frame;
        let p = hf_wire::parse(probe, 0, 0).expect("probe parses");
        assert_eq!((p.key.ip_proto, p.key.tp_dst), (ip_proto::UDP, 80));
        let mut icmp = Vec::new();
        hf_wire::reply::icmp4_error(
            &mut icmp,
            probe,
            &p,
            std::net::Ipv4Addr::new(10, 0, 0, 3),
            3,
            3,
            0,
        )
        .expect("builds");
        // Another port's quote is not this monitor's.
        pr.handle_reply("p2", &icmp, Duration::from_millis(5));
        let (_, ch) = pr.poll(Duration::from_millis(5));
        assert!(ch.is_empty());
        pr.handle_reply("p1", &icmp, Duration::from_millis(5));
        let (_, ch) = pr.poll(Duration::from_millis(5));
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].status, "offline");
    }

    #[test]
    fn a_reply_for_another_probe_or_garbage_changes_nothing() {
        let mut pr = Prober::default();
        pr.set(vec![msg("tcp")]);
        let (out, _) = pr.poll(Duration::ZERO);
        let mut f = answer(&out[0].frame, 0x12);
        pr.handle_reply("p2", &f, Duration::ZERO);
        pr.handle_reply("p1", &[1, 2, 3], Duration::ZERO);
        // Another acknowledgement number.
        let last = f.len() - 12;
        f[last] ^= 0xff;
        pr.handle_reply("p1", &f, Duration::ZERO);
        let (_, ch) = pr.poll(Duration::ZERO);
        assert!(ch.is_empty());
    }
}
