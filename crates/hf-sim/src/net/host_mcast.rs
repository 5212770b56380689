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

    /// Sends an IGMPv2 general query (to 224.0.0.1, TTL 1), as a multicast router outside
    /// OVN does; false when the host has no IPv4 address. Built with smoltcp's IGMP emitter.
    pub fn send_igmp_query(&mut self) -> bool {
        use smoltcp::wire::{
            EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IgmpPacket, IgmpRepr,
            IgmpVersion, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr,
        };
        let Some(src) = self.iface.ipv4_addr() else {
            return false;
        };
        let igmp = IgmpRepr::MembershipQuery {
            max_resp_time: smoltcp::time::Duration::from_secs(10),
            group_addr: Ipv4Address::UNSPECIFIED,
            version: IgmpVersion::Version2,
        };
        let dst = Ipv4Address::new(224, 0, 0, 1);
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Igmp,
            payload_len: igmp.buffer_len(),
            hop_limit: 1,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress(self.cfg.mac),
            dst_addr: EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + igmp.buffer_len()];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut f);
        let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
        ip.emit(&mut p, &smoltcp::phy::ChecksumCapabilities::default());
        igmp.emit(&mut IgmpPacket::new_unchecked(p.payload_mut()));
        self.emit(buf);
        true
    }
}

/// The IGMP message in `frame`, decoded by smoltcp (checksum verified), if it is one.
pub(super) fn igmp_message(frame: &[u8]) -> Option<super::super::record::IgmpSeen> {
    use smoltcp::wire::{
        EthernetFrame, EthernetProtocol, IgmpPacket, IgmpRepr, IpProtocol, Ipv4Packet,
    };
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Igmp {
        return None;
    }
    let p = IgmpPacket::new_checked(ip.payload()).ok()?;
    let kind = match IgmpRepr::parse(&p).ok()? {
        IgmpRepr::MembershipQuery { .. } => "query",
        IgmpRepr::MembershipReport { .. } => "report",
        IgmpRepr::LeaveGroup { .. } => "leave",
    };
    Some(super::super::record::IgmpSeen {
        kind,
        src: ip.src_addr().to_string(),
    })
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
