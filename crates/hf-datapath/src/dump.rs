//! Conntrack entries as text, in `ovs-appctl dpctl/dump-conntrack`'s style:
//! `tcp,orig=(src=A,dst=B,sport=P,dport=Q),reply=(...),zone=Z,mark=M,labels=0xL,protoinfo=(state=S)`.
//!
//! What it does not do: print timeouts (OVS prints them only with `-m`) or helpers.

use std::fmt::Write as _;
use std::time::Duration;

use hf_conntrack::{ConnState, Conntrack, TcpState, Tuple};
use hf_wire::ip_proto;

fn proto_name(t: &Tuple) -> String {
    match (t.proto, t.v6) {
        (ip_proto::TCP, false) => "tcp".into(),
        (ip_proto::TCP, true) => "tcp6".into(),
        (ip_proto::UDP, false) => "udp".into(),
        (ip_proto::UDP, true) => "udp6".into(),
        (ip_proto::ICMP, _) => "icmp".into(),
        (ip_proto::ICMPV6, _) => "icmpv6".into(),
        (132, false) => "sctp".into(),
        (132, true) => "sctp6".into(),
        (p, _) => format!("proto={p}"),
    }
}

fn tuple_text(t: &Tuple, reply_dir: bool) -> String {
    let mut s = format!("src={},dst={}", t.src_ip(), t.dst_ip());
    if t.is_icmp() {
        // `dport` holds the request type; a reply direction shows the reply type.
        let ty = match (t.proto, reply_dir, t.dport) {
            (ip_proto::ICMP, true, 8) => 0,
            (ip_proto::ICMP, true, q) => q + 1,
            (_, true, 128) => 129,
            (_, _, q) => q,
        };
        let _ = write!(s, ",id={},type={ty},code=0", t.sport);
    } else if t.sport != 0 || t.dport != 0 {
        let _ = write!(s, ",sport={},dport={}", t.sport, t.dport);
    }
    s
}

fn tcp_state(s: TcpState) -> &'static str {
    match s {
        TcpState::None => "CLOSED",
        TcpState::SynSent | TcpState::SynSent2 => "SYN_SENT",
        TcpState::SynRecv => "SYN_RECV",
        TcpState::Established => "ESTABLISHED",
        TcpState::FinWait => "FIN_WAIT_1",
        TcpState::CloseWait => "CLOSE_WAIT",
        TcpState::LastAck => "LAST_ACK",
        TcpState::TimeWait => "TIME_WAIT",
        TcpState::Close => "CLOSE",
        _ => "UNKNOWN",
    }
}

/// One connection as a line.
pub fn line(c: &ConnState) -> String {
    let mut s = format!(
        "{},orig=({}),reply=({})",
        proto_name(&c.orig),
        tuple_text(&c.orig, false),
        tuple_text(&c.reply, true)
    );
    if c.orig.zone != 0 {
        let _ = write!(s, ",zone={}", c.orig.zone);
    }
    if c.mark != 0 {
        let _ = write!(s, ",mark={}", c.mark);
    }
    if c.label != 0 {
        let _ = write!(s, ",labels={:#x}", c.label);
    }
    if let Some(t) = &c.tcp {
        let _ = write!(s, ",protoinfo=(state={})", tcp_state(t.state));
    }
    s
}

/// Every live connection (of `zone` when given), one line each, sorted.
pub fn dump(ct: &Conntrack, zone: Option<u16>, now: Duration) -> Vec<String> {
    let mut v: Vec<String> = ct
        .connections(now)
        .filter(|c| zone.is_none_or(|z| c.orig.zone == z))
        .map(|c| line(&c))
        .collect();
    v.sort();
    v
}
