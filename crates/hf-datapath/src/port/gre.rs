//! Mirror copies out to their sinks: GRE (and ERSPAN in GRE) over IP raw sockets, one per
//! address family, opened on first use. The kernel routes each packet and writes its IP header
//! (protocol 47), as it does for OVS's kernel GRE and ERSPAN ports.
//!
//! What it does not do: anything without `CAP_NET_RAW` (the socket cannot be opened; every
//! send then fails with that error, which the shell logs once per sink).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};

use super::sys;

/// The sockets mirror copies leave by.
#[derive(Debug, Default)]
pub struct GreSender {
    v4: Option<OwnedFd>,
    v6: Option<OwnedFd>,
}

impl GreSender {
    /// Sends `payload` (GRE header onwards) to `dst`.
    pub fn send(&mut self, dst: IpAddr, payload: &[u8]) -> io::Result<()> {
        let (slot, domain) = match dst {
            IpAddr::V4(_) => (&mut self.v4, libc::AF_INET),
            IpAddr::V6(_) => (&mut self.v6, libc::AF_INET6),
        };
        if slot.is_none() {
            *slot = Some(sys::ip_raw_socket(domain, libc::IPPROTO_GRE)?);
        }
        match slot {
            Some(fd) => sys::sendto_ip(fd.as_fd(), payload, dst),
            None => Err(io::Error::other("no GRE socket")),
        }
    }
}
