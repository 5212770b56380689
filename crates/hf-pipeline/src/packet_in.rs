//! Packet-in actions done in the datapath: `put_dhcp_opts`, `put_dhcpv6_opts`, `dns_lookup`
//! and `put_nd_ra_opts`.
//!
//! OVN sends these packets to ovn-controller (pinctrl), which builds the reply and resumes the
//! pipeline with it. holdfast does the same work in the pipeline itself, without a round trip,
//! when [`crate::Pipeline::set_packet_in`] is on.

/// Counts of packet-in work: replies built and requests that could not be answered (the result
/// bit was set to 0), per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketInStats {
    /// DHCPv4 OFFER/ACK/NAK built.
    pub dhcp4_replies: u64,
    /// DHCPv6 ADVERTISE/REPLY built.
    pub dhcp6_replies: u64,
    /// DNS answers built.
    pub dns_replies: u64,
    /// Router advertisements built.
    pub ra_replies: u64,
    /// Requests that got no reply (bad or unsupported request, no record, nothing to answer).
    pub failures: u64,
}

impl PacketInStats {
    /// Replies of every kind.
    pub fn replies(&self) -> u64 {
        self.dhcp4_replies + self.dhcp6_replies + self.dns_replies + self.ra_replies
    }
}
