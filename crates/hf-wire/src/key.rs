//! The flow key: every header field a classifier matches on, as plain `Copy` data.

use std::net::{Ipv4Addr, Ipv6Addr};

/// A 48-bit Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthAddr(pub [u8; 6]);

impl EthAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: EthAddr = EthAddr([0xff; 6]);
    /// `00:00:00:00:00:00`.
    pub const ZERO: EthAddr = EthAddr([0; 6]);

    /// True for group (multicast and broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl std::fmt::Display for EthAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let a = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            a[0], a[1], a[2], a[3], a[4], a[5]
        )
    }
}

/// Bits of [`FlowKey::ip_frag`], as OVS defines `nw_frag`.
pub mod frag {
    /// The packet is a fragment (first or later).
    pub const ANY: u8 = 1;
    /// The packet is a non-first fragment: it carries no L4 header.
    pub const LATER: u8 = 2;
}

/// Bits of [`FlowKey::tcp_flags`] (the 12 low bits of TCP's offset/flags word).
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
    /// ECE.
    pub const ECE: u16 = 0x040;
    /// CWR.
    pub const CWR: u16 = 0x080;
    /// NS (nonce sum, RFC 3540).
    pub const NS: u16 = 0x100;
}

/// Every field a logical-flow classifier can match on, filled by [`crate::parse`].
///
/// Fields that the frame does not carry are zero (e.g. `tp_src` of an ARP packet). `eth_type` is
/// the type after any VLAN tag; `vlan_tci` follows OVS: the CFI bit (`0x1000`) is set when a tag is
/// present, so `0` means untagged. For ICMP, `icmp_type`/`icmp_code` hold the header's type and
/// code and `tp_src`/`tp_dst` are zero; the echo identifier is in [`crate::Parsed::icmp_id`].
/// `in_port` and `metadata` are the caller's (the port the frame arrived on, the datapath key);
/// the pipeline keeps registers and conntrack state in its own context, not here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The port the frame arrived on (the caller's numbering).
    pub in_port: u32,
    /// Caller-defined metadata (OVN: the logical datapath key).
    pub metadata: u64,
    /// Ethernet source.
    pub eth_src: EthAddr,
    /// Ethernet destination.
    pub eth_dst: EthAddr,
    /// Ethertype after VLAN tags.
    pub eth_type: u16,
    /// The outermost VLAN TCI with the CFI bit forced on when present; 0 when untagged.
    pub vlan_tci: u16,
    /// IPv4 source (zero unless `eth_type` is IPv4).
    pub ip4_src: Ipv4Addr,
    /// IPv4 destination.
    pub ip4_dst: Ipv4Addr,
    /// IPv6 source (unspecified unless `eth_type` is IPv6).
    pub ip6_src: Ipv6Addr,
    /// IPv6 destination.
    pub ip6_dst: Ipv6Addr,
    /// IPv6 flow label (20 bits).
    pub ip6_label: u32,
    /// IP protocol / final IPv6 next header.
    pub ip_proto: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ip_ttl: u8,
    /// IPv4 TOS / IPv6 traffic class: DSCP in the high 6 bits, ECN in the low 2.
    pub ip_tos: u8,
    /// Fragment bits, see [`frag`].
    pub ip_frag: u8,
    /// TCP/UDP/SCTP source port.
    pub tp_src: u16,
    /// TCP/UDP/SCTP destination port.
    pub tp_dst: u16,
    /// TCP flags, see [`tcp_flags`].
    pub tcp_flags: u16,
    /// ICMP / ICMPv6 type.
    pub icmp_type: u8,
    /// ICMP / ICMPv6 code.
    pub icmp_code: u8,
    /// ARP opcode (1 request, 2 reply).
    pub arp_op: u16,
    /// ARP sender protocol address.
    pub arp_spa: Ipv4Addr,
    /// ARP target protocol address.
    pub arp_tpa: Ipv4Addr,
    /// ARP sender hardware address.
    pub arp_sha: EthAddr,
    /// ARP target hardware address.
    pub arp_tha: EthAddr,
    /// ND target address (NS and NA).
    pub nd_target: Ipv6Addr,
    /// ND source link-layer address option (NS).
    pub nd_sll: EthAddr,
    /// ND target link-layer address option (NA).
    pub nd_tll: EthAddr,
}

impl Default for FlowKey {
    fn default() -> Self {
        FlowKey::new(0, 0)
    }
}

impl FlowKey {
    /// An empty key for a frame that arrived on `in_port` with `metadata`.
    pub fn new(in_port: u32, metadata: u64) -> FlowKey {
        FlowKey {
            in_port,
            metadata,
            eth_src: EthAddr::ZERO,
            eth_dst: EthAddr::ZERO,
            eth_type: 0,
            vlan_tci: 0,
            ip4_src: Ipv4Addr::UNSPECIFIED,
            ip4_dst: Ipv4Addr::UNSPECIFIED,
            ip6_src: Ipv6Addr::UNSPECIFIED,
            ip6_dst: Ipv6Addr::UNSPECIFIED,
            ip6_label: 0,
            ip_proto: 0,
            ip_ttl: 0,
            ip_tos: 0,
            ip_frag: 0,
            tp_src: 0,
            tp_dst: 0,
            tcp_flags: 0,
            icmp_type: 0,
            icmp_code: 0,
            arp_op: 0,
            arp_spa: Ipv4Addr::UNSPECIFIED,
            arp_tpa: Ipv4Addr::UNSPECIFIED,
            arp_sha: EthAddr::ZERO,
            arp_tha: EthAddr::ZERO,
            nd_target: Ipv6Addr::UNSPECIFIED,
            nd_sll: EthAddr::ZERO,
            nd_tll: EthAddr::ZERO,
        }
    }

    /// True when the key describes an IPv4 packet.
    pub fn is_ipv4(&self) -> bool {
        self.eth_type == crate::ethertype::IPV4
    }

    /// True when the key describes an IPv6 packet.
    pub fn is_ipv6(&self) -> bool {
        self.eth_type == crate::ethertype::IPV6
    }

    /// True when a VLAN tag is present.
    pub fn vlan_present(&self) -> bool {
        self.vlan_tci & 0x1000 != 0
    }

    /// The VLAN id (12 bits), zero when untagged.
    pub fn vlan_vid(&self) -> u16 {
        self.vlan_tci & 0x0fff
    }

    /// The VLAN priority code point.
    pub fn vlan_pcp(&self) -> u8 {
        (self.vlan_tci >> 13) as u8
    }

    /// The IP source as an address of either family; `None` for non-IP frames.
    pub fn ip_src(&self) -> Option<std::net::IpAddr> {
        if self.is_ipv4() {
            Some(self.ip4_src.into())
        } else if self.is_ipv6() {
            Some(self.ip6_src.into())
        } else {
            None
        }
    }

    /// The IP destination as an address of either family; `None` for non-IP frames.
    pub fn ip_dst(&self) -> Option<std::net::IpAddr> {
        if self.is_ipv4() {
            Some(self.ip4_dst.into())
        } else if self.is_ipv6() {
            Some(self.ip6_dst.into())
        } else {
            None
        }
    }
}
