//! DNS answers as ovn-controller's pinctrl builds them for `dns_lookup()`.
//!
//! # What it does
//!
//! - [`parse_query`]: the first question of a DNS query (QR clear, QDCOUNT ≥ 1): its name
//!   (lowercased, labels joined by dots, as pinctrl looks it up), type and where it ends.
//!   Types A, AAAA, ANY and PTR are answered; others are [`DnsError::Unsupported`].
//! - [`answer`] (or [`answer_query`] for a query already parsed): given the record value for the name (SB `DNS.records`: space-separated
//!   addresses for A/AAAA/ANY, a host name for PTR), builds the response: the request's
//!   Ethernet, IP and UDP headers (lengths and checksums fixed; UDP checksum 0 over IPv4 and
//!   computed over IPv6), the header with QR set, ANCOUNT = the answers, and one answer per
//!   matching address (A for IPv4, AAAA for IPv6; ANY gives both, IPv4 first), or one PTR answer, class
//!   IN, TTL 3600, the owner name written out in full. `ls_in_dns_response`'s flow swaps the
//!   addresses and ports afterwards.
//!
//! # What it does not do
//!
//! No recursion, no compression pointers in the question (pinctrl does not follow them
//! either: such a query is not answered), no EDNS. Deliberate differences from pinctrl: the
//! response carries only the first question (QDCOUNT = 1) and no authority or additional
//! records (NSCOUNT = ARCOUNT = 0); pinctrl copies the rest of the query after the header
//! and keeps NSCOUNT, which puts its answers after any additional record the query had.
//!
//! # Invariants
//!
//! No input panics; a query that cannot be answered is an error and `out` is unchanged.

use std::net::IpAddr;

use crate::bytes::u16_at;
use crate::dhcp::{check_layout, copy_l2_l3, fix_l4_checksum6};
use crate::parse::{Parsed, ip_proto};

/// Query types answered.
pub mod qtype {
    /// A.
    pub const A: u16 = 1;
    /// PTR.
    pub const PTR: u16 = 12;
    /// AAAA.
    pub const AAAA: u16 = 28;
    /// ANY.
    pub const ANY: u16 = 255;
}

/// TTL of every answer (OVN's `DNS_DEFAULT_RR_TTL`).
pub const TTL: u32 = 3600;

/// Why a query was not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DnsError {
    /// Not a DNS query over UDP, or malformed.
    #[error("not a DNS query that can be answered: {0}")]
    BadQuery(&'static str),
    /// A query type other than A, AAAA, ANY and PTR.
    #[error("DNS query type {0} is not answered")]
    Unsupported(u16),
    /// No record for the name.
    #[error("no DNS record for {0}")]
    NoRecord(String),
    /// The record has nothing of the asked type, or does not parse.
    #[error("DNS record for {name} has no answer of type {qtype}")]
    NoAnswer {
        /// The name.
        name: String,
        /// The type asked.
        qtype: u16,
    },
}

/// The first question of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The name, lowercased, without the trailing dot.
    pub name: String,
    /// QTYPE.
    pub qtype: u16,
    /// The encoded name (labels and the final zero), as it appears in the query.
    pub name_wire: Vec<u8>,
}

/// Parses the DNS message `m` (a UDP payload).
pub fn parse_query(m: &[u8]) -> Result<Query, DnsError> {
    if m.len() < 12 {
        return Err(DnsError::BadQuery("truncated DNS header"));
    }
    if m[2] & 0x80 != 0 {
        return Err(DnsError::BadQuery("a response, not a query"));
    }
    if u16_at(m, 4) == Some(0) {
        return Err(DnsError::BadQuery("no question"));
    }
    let mut at = 12;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = usize::from(*m.get(at).ok_or(DnsError::BadQuery("truncated name"))?);
        if len == 0 {
            at += 1;
            break;
        }
        if len > 63 {
            return Err(DnsError::BadQuery("compressed or over-long label"));
        }
        let l = m
            .get(at + 1..at + 1 + len)
            .ok_or(DnsError::BadQuery("truncated label"))?;
        labels.push(String::from_utf8_lossy(l).to_ascii_lowercase());
        at += 1 + len;
    }
    let qtype = u16_at(m, at).ok_or(DnsError::BadQuery("no QTYPE"))?;
    u16_at(m, at + 2).ok_or(DnsError::BadQuery("no QCLASS"))?;
    if !matches!(qtype, qtype::A | qtype::AAAA | qtype::ANY | qtype::PTR) {
        return Err(DnsError::Unsupported(qtype));
    }
    Ok(Query {
        name: labels.join("."),
        qtype,
        name_wire: m[12..at].to_vec(),
    })
}

/// The DNS message in `frame`'s UDP payload and where the UDP header starts.
fn payload<'a>(frame: &'a [u8], p: &Parsed) -> Result<(usize, &'a [u8]), DnsError> {
    if p.key.ip_proto != ip_proto::UDP {
        return Err(DnsError::BadQuery("not UDP"));
    }
    check_layout(frame, p).map_err(DnsError::BadQuery)?;
    let l4 = usize::from(p.layout.l4);
    let udp_len = usize::from(u16_at(frame, l4 + 4).unwrap_or(0));
    let end = usize::from(p.layout.end)
        .min(frame.len())
        .min(l4.saturating_add(udp_len));
    let m = frame
        .get(l4 + 8..end)
        .ok_or(DnsError::BadQuery("truncated UDP header"))?;
    Ok((l4, m))
}

/// The query in `frame` (a UDP packet), parsed.
pub fn query_of(frame: &[u8], p: &Parsed) -> Result<Query, DnsError> {
    parse_query(payload(frame, p)?.1)
}

/// `name` as RFC 1035 labels.
fn encode_name(name: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for l in name.trim_end_matches('.').split('.') {
        if l.is_empty() || l.len() > 63 {
            return None;
        }
        out.push(l.len() as u8);
        out.extend_from_slice(l.as_bytes());
    }
    out.push(0);
    (out.len() <= 255).then_some(out)
}

/// Builds the response to the query in `frame` from `record` (the value SB holds for the
/// query's name), appending the frame to `out`. Returns the number of answers.
pub fn answer(out: &mut Vec<u8>, frame: &[u8], p: &Parsed, record: &str) -> Result<u16, DnsError> {
    let q = query_of(frame, p)?;
    answer_query(out, frame, p, &q, record)
}

/// [`answer`] for a query the caller already has from [`query_of`] on the same frame (it is
/// not parsed again). A `q` that does not fit `frame` is [`DnsError::BadQuery`].
pub fn answer_query(
    out: &mut Vec<u8>,
    frame: &[u8],
    p: &Parsed,
    q: &Query,
    record: &str,
) -> Result<u16, DnsError> {
    let (l4, m) = payload(frame, p)?;
    let question = m
        .get(12..12 + q.name_wire.len() + 4)
        .ok_or(DnsError::BadQuery("the query is not this frame's"))?;
    let mut answers: Vec<u8> = Vec::new();
    let mut count: u16 = 0;
    let mut rr = |ty: u16, data: &[u8]| {
        answers.extend_from_slice(&q.name_wire);
        answers.extend_from_slice(&ty.to_be_bytes());
        answers.extend_from_slice(&1u16.to_be_bytes());
        answers.extend_from_slice(&TTL.to_be_bytes());
        answers.extend_from_slice(&(data.len() as u16).to_be_bytes());
        answers.extend_from_slice(data);
        // Saturates rather than overflows on a huge record: such an answer does not fit a frame
        // and is refused below.
        count = count.saturating_add(1);
    };
    let no_answer = || DnsError::NoAnswer {
        name: q.name.clone(),
        qtype: q.qtype,
    };
    if q.qtype == qtype::PTR {
        let name = encode_name(record.trim()).ok_or_else(no_answer)?;
        rr(qtype::PTR, &name);
    } else {
        let mut addrs = Vec::new();
        for w in record.split_whitespace() {
            // pinctrl's extract_ip_addresses accepts a prefix length too.
            let a = w.split('/').next().unwrap_or(w);
            addrs.push(a.parse::<IpAddr>().map_err(|_| no_answer())?);
        }
        // As pinctrl: every IPv4 answer, then every IPv6 one.
        if matches!(q.qtype, qtype::A | qtype::ANY) {
            for a in &addrs {
                if let IpAddr::V4(v4) = a {
                    rr(qtype::A, &v4.octets());
                }
            }
        }
        if matches!(q.qtype, qtype::AAAA | qtype::ANY) {
            for a in &addrs {
                if let IpAddr::V6(v6) = a {
                    rr(qtype::AAAA, &v6.octets());
                }
            }
        }
    }
    if count == 0 {
        return Err(no_answer());
    }
    let mut l4b = Vec::with_capacity(8 + 12 + q.name_wire.len() + 4 + answers.len());
    l4b.extend_from_slice(&frame[l4..l4 + 8]);
    l4b.extend_from_slice(&m[..12]);
    l4b[8 + 2] |= 0x80;
    l4b[8 + 4..8 + 6].copy_from_slice(&1u16.to_be_bytes());
    l4b[8 + 6..8 + 8].copy_from_slice(&count.to_be_bytes());
    l4b[8 + 8..8 + 12].fill(0);
    l4b.extend_from_slice(question);
    l4b.extend_from_slice(&answers);
    if !crate::dhcp::fits(p, l4b.len()) {
        return Err(DnsError::BadQuery("the answer would not fit a frame"));
    }
    let udp_len = l4b.len() as u16;
    l4b[4..6].copy_from_slice(&udp_len.to_be_bytes());
    l4b[6..8].copy_from_slice(&[0, 0]);
    let l4_out = copy_l2_l3(out, frame, p, &l4b, None);
    if p.key.is_ipv6() {
        fix_l4_checksum6(out, p, l4_out, ip_proto::UDP, 6);
    }
    Ok(count)
}
