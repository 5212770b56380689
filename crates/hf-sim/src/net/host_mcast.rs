//! Multicast on a simulated host: joining and leaving groups with smoltcp's own IGMPv2 (and,
//! for IPv6 groups, MLDv2) reports and leaves, which smoltcp also sends in answer to queries.
//! The reports are smoltcp's, not holdfast's: an independent implementation of the protocol
//! holdfast snoops.

use std::net::IpAddr;

use super::{Host, HostError};

impl Host {
    /// Joins multicast group `group` (smoltcp sends the report at once).
    pub fn join_group(&mut self, group: IpAddr) -> Result<(), HostError> {
        self.iface
            .join_multicast_group(group)
            .map_err(|e| HostError::Socket(format!("join {group}: {e}")))?;
        self.service(self.now);
        Ok(())
    }

    /// Leaves multicast group `group` (smoltcp sends the leave at once).
    pub fn leave_group(&mut self, group: IpAddr) -> Result<(), HostError> {
        self.iface
            .leave_multicast_group(group)
            .map_err(|e| HostError::Socket(format!("leave {group}: {e}")))?;
        self.service(self.now);
        Ok(())
    }

    /// Whether the host listens to `group`.
    pub fn in_group(&self, group: IpAddr) -> bool {
        self.iface.has_multicast_group(group)
    }
}

/// The router advertisement in `frame`, decoded by smoltcp (IPv6 without extension headers,
/// checksum verified), if it is one.
pub(super) fn router_advert(
    frame: &[u8],
    now: std::time::Duration,
) -> Option<super::super::record::RouterAdvert> {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetFrame, EthernetProtocol, Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv6Packet,
        NdiscPrefixInfoFlags, NdiscRepr, NdiscRouterFlags,
    };
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv6 {
        return None;
    }
    let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Icmpv6 {
        return None;
    }
    let icmp = Icmpv6Packet::new_checked(ip.payload()).ok()?;
    let repr = Icmpv6Repr::parse(
        &ip.src_addr(),
        &ip.dst_addr(),
        &icmp,
        &ChecksumCapabilities::default(),
    )
    .ok()?;
    let Icmpv6Repr::Ndisc(NdiscRepr::RouterAdvert {
        router_lifetime,
        flags,
        prefix_info,
        mtu,
        ..
    }) = repr
    else {
        return None;
    };
    let prefixes = prefix_info
        .iter()
        .map(|p| {
            (
                format!("{}/{}", p.prefix, p.prefix_len),
                p.flags.contains(NdiscPrefixInfoFlags::ADDRCONF),
            )
        })
        .collect();
    Some(super::super::record::RouterAdvert {
        at_ms: now.as_millis() as u64,
        src_mac: eth.src_addr().to_string(),
        src_ip: ip.src_addr().to_string(),
        lifetime: router_lifetime.secs() as u16,
        managed: flags.contains(NdiscRouterFlags::MANAGED),
        other: flags.contains(NdiscRouterFlags::OTHER),
        prefixes,
        mtu,
    })
}
