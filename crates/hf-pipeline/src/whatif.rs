//! What-if overrides for [`crate::Pipeline::trace_with`], the knobs `holdfast trace` gives an
//! operator as ovn-trace does: `--ct=FLAGS` forces the `ct_state` that successive conntrack
//! lookups return, and `--lb-dst=IP[:PORT]` picks the load-balancer backend.
//!
//! A forced state is an assumption about the connection, so a `ct_snat(IP)`/`ct_dnat(IP)` under
//! one rewrites the packet to its target when the scratch table has no connection to do it (as
//! ovn-trace does), unless the forced state is `inv`.
//!
//! What it does not do: change conntrack (trace never does) or apply outside tracing.

use std::net::IpAddr;

/// Overrides for one traced packet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WhatIf {
    /// `ct_state` bits (OVS's `CS_*`: new 0x01, est 0x02, rel 0x04, rpl 0x08, inv 0x10,
    /// trk 0x20, snat 0x40, dnat 0x80) given to successive conntrack lookups (`ct_next`,
    /// `ct_dnat`/`ct_snat` and their `_in_czone` forms, `ct_lb`/`ct_lb_mark`; not the commits).
    /// When they run out, lookups return what the scratch conntrack table says.
    pub ct_states: Vec<u8>,
    /// The backend `ct_lb`/`ct_lb_mark` choose when it is one of theirs (the port, when given,
    /// must match too); otherwise they choose by hash as the datapath does.
    pub lb_dst: Option<(IpAddr, Option<u16>)>,
}

/// Where a traced packet is in its [`WhatIf`].
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    w: &'a WhatIf,
    next: usize,
    /// `--lb-dst` was chosen from a backend list (ovn-trace then forgets it).
    lb_used: bool,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(w: &'a WhatIf) -> Self {
        Cursor {
            w,
            next: 0,
            lb_used: false,
        }
    }

    /// The next forced state, if any is left (consumed).
    pub(crate) fn forced_ct_state(&mut self) -> Option<u8> {
        let s = self.w.ct_states.get(self.next).copied()?;
        self.next += 1;
        Some(s)
    }

    /// The index of the backend `--lb-dst` names, if it is one of `backends` (once: as in
    /// ovn-trace, a destination chosen from a list is not used again).
    pub(crate) fn lb_pick(&mut self, backends: &[(IpAddr, u16)]) -> Option<usize> {
        if self.lb_used {
            return None;
        }
        let (ip, port) = self.w.lb_dst?;
        let i = backends
            .iter()
            .position(|&(b, p)| b == ip && port.is_none_or(|want| want == p))?;
        self.lb_used = true;
        Some(i)
    }

    /// ovn-trace's `--lb-dst` for a `ct_lb`/`ct_lb_mark` without backends (the "apply the
    /// existing NAT" lookup): the destination it names, for a packet of its family, until one
    /// was chosen from a backend list.
    pub(crate) fn lb_dst_unlisted(&self, v6: bool) -> Option<(IpAddr, u16)> {
        if self.lb_used {
            return None;
        }
        let (ip, port) = self.w.lb_dst?;
        (ip.is_ipv6() == v6).then_some((ip, port.unwrap_or(0)))
    }
}
