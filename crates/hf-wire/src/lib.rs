//! `hf-wire`: packet views and builders for holdfast's datapath.
//!
//! # Layer
//!
//! The bottom of the datapath stack, below `hf-conntrack` and `hf-pipeline`. It turns bytes into a
//! [`FlowKey`] (what a classifier matches on) plus the offsets and TCP details that conntrack and
//! NAT need ([`Parsed`]), rewrites headers for NAT with incremental checksum updates
//! ([RFC 1624](https://www.rfc-editor.org/rfc/rfc1624)), builds the packets OVN's actions generate
//! (ARP requests and replies, ICMP echo replies and errors, TCP resets, ND solicitations and
//! advertisements), builds the replies ovn-controller's pinctrl builds for packet-in actions
//! (DHCPv4/DHCPv6 in [`dhcp`], DNS in [`dns`], router advertisements in [`ra`]), and
//! encapsulates/decapsulates Geneve as OVN uses it ([`geneve`]), and types the offload metadata
//! (partial checksums, segmentation) a packet socket reports beside a frame, with the software
//! fallback that completes checksums and segments super-frames ([`offload`]).
//!
//! # What it does not do
//!
//! No I/O, no clock, no allocation on the parse and rewrite paths (the builders write into a
//! caller-supplied `Vec<u8>`). It does not verify IPv4/L4 checksums on input (like OVS, the
//! datapath forwards what it receives) and does not reassemble fragments: a non-first fragment has
//! no L4 fields, and [`FlowKey::ip_frag`] says so.
//!
//! # Invariants
//!
//! - Parsing untrusted bytes never panics: every read goes through a length-checked helper, and
//!   truncated or malformed headers are a [`ParseError`] (a small `Copy` value).
//! - A [`Parsed`] value's offsets lie inside the frame it was parsed from; [`nat::apply_nat`] checks
//!   the frame length again before it writes, so a mismatched frame is an error, not a panic.
//! - Checksums stay valid: a rewrite of a packet whose checksums verified leaves checksums that
//!   verify (property-tested).
//!
//! # Views and representations
//!
//! smoltcp separates a checked view over bytes (`Packet`) from a value holding only valid fields
//! (`Repr`). Here the per-packet path is one pass, [`parse`], that checks every length it reads
//! and returns [`Parsed`], a `Copy` value (the representation) with the offsets of each header, so
//! later steps (conntrack, [`apply_nat`], the builders) never re-walk the frame. [`geneve`] has
//! the full pair: [`geneve::GenevePacket`] (no accessor panics after `new_checked`) and
//! [`geneve::GeneveRepr`].
//!
//! [`FlowKey`] is plain `Copy` data with one field per matchable header field (OVS's `struct
//! flow`, without registers): the pipeline keeps its registers, metadata and conntrack results in
//! its own packet context next to it, and a megaflow cache can mask and hash it directly.
//!
//! # Call contract
//!
//! `parse(frame, in_port, metadata)` once per received frame; keep the [`Parsed`] next to the frame
//! and hand both to [`nat::apply_nat`] when conntrack returns a rewrite. Builders in [`reply`] take
//! the request's [`Parsed`] and append a complete Ethernet frame to `out`.

mod checksum;
pub mod dhcp;
pub mod dns;
pub mod geneve;
mod key;
pub mod nat;
pub mod offload;
mod parse;
pub mod ra;
pub mod reply;

pub use checksum::{checksum, checksum_adjust, checksums_valid, pseudo_header_sum, sum_with};
pub use key::{EthAddr, FlowKey, frag, tcp_flags};
pub use nat::{NatRewrite, RewriteError, apply_nat};
pub use parse::{InnerHeaders, Layout, Parsed, TcpSegment, ethertype, ip_proto, parse, parse_into};

/// The header a [`ParseError`] is about.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// 802.1Q / 802.1ad tag.
    Vlan,
    /// ARP for IPv4 over Ethernet.
    Arp,
    /// IPv4 header.
    Ipv4,
    /// IPv6 header or one of its extension headers.
    Ipv6,
    /// TCP header.
    Tcp,
    /// UDP header.
    Udp,
    /// SCTP common header.
    Sctp,
    /// ICMPv4 header.
    Icmp,
    /// ICMPv6 header, including Neighbor Discovery.
    Icmpv6,
    /// Geneve header or options.
    Geneve,
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "VLAN",
            Layer::Arp => "ARP",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Tcp => "TCP",
            Layer::Udp => "UDP",
            Layer::Sctp => "SCTP",
            Layer::Icmp => "ICMP",
            Layer::Icmpv6 => "ICMPv6",
            Layer::Geneve => "Geneve",
        };
        f.write_str(s)
    }
}

/// Why a frame could not be parsed. Small and `Copy`: it is built on the untrusted-byte path.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ParseError {
    /// The frame ends inside this header.
    #[error("frame truncated in the {0} header")]
    Truncated(Layer),
    /// This header holds a value no valid packet has (bad version, length field, option length).
    #[error("malformed {0} header")]
    Malformed(Layer),
    /// The frame is valid but not what the operation expects (e.g. decapsulating a non-Geneve frame).
    #[error("not a {0} packet")]
    Unexpected(Layer),
}

/// Read helpers over untrusted bytes: each returns `None` instead of panicking.
pub(crate) mod bytes {
    #[inline]
    pub(crate) fn u8_at(b: &[u8], at: usize) -> Option<u8> {
        b.get(at).copied()
    }

    #[inline]
    pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        let s = b.get(at..at.checked_add(2)?)?;
        Some(u16::from_be_bytes([s[0], s[1]]))
    }

    #[inline]
    pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        let s = b.get(at..at.checked_add(4)?)?;
        Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    #[inline]
    pub(crate) fn array_at<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
        let s = b.get(at..at.checked_add(N)?)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Some(out)
    }
}

#[doc(hidden)]
pub mod fuzzing;

#[cfg(test)]
mod tests;
