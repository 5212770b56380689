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
