//! Registers and logical flags, typed: every use northd makes of a register is a [`Reg`]
//! variant with its place, so no stage writes a register by name and no two uses that can be
//! live in the same pipeline at once share bits (checked by `uses_do_not_overlap`).
//!
//! Placements follow OVN 23.03's conventions (`reg0[0]` is the defrag bit, `reg9[2]` the
//! neighbour lookup result, ...) so that `ovn-sbctl lflow-list` reads the same to an operator;
//! nothing outside northd depends on them except through the flows themselves.

use hf_expr::ast::FieldRef;

/// Where a use lives: register (or `xreg`/`xxreg`) name and bit range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// `reg0`, `xxreg1`, `flags`...
    pub reg: &'static str,
    /// Lowest bit.
    pub lo: u32,
    /// Highest bit (inclusive); `None` for the whole register.
    pub hi: Option<u32>,
}

impl Place {
    const fn bit(reg: &'static str, b: u32) -> Self {
        Place {
            reg,
            lo: b,
            hi: Some(b),
        }
    }
    const fn range(reg: &'static str, lo: u32, hi: u32) -> Self {
        Place {
            reg,
            lo,
            hi: Some(hi),
        }
    }
    const fn whole(reg: &'static str) -> Self {
        Place {
            reg,
            lo: 0,
            hi: None,
        }
    }

    /// The bits in the 32-bit register space `reg0`..`reg9` (xxreg0 = reg0..reg3, xreg0 =
    /// reg0..reg1), as (first 32-bit register, lowest bit, highest bit) over a 128/64/32-bit
    /// register; for `flags` and other named fields `None`.
    #[cfg_attr(not(test), allow(dead_code))]
    fn span(&self) -> Option<(u32, u32)> {
        let (base, width) = if let Some(n) = self.reg.strip_prefix("xxreg") {
            (n.parse::<u32>().ok()? * 4, 128)
        } else if let Some(n) = self.reg.strip_prefix("xreg") {
            (n.parse::<u32>().ok()? * 2, 64)
        } else if let Some(n) = self.reg.strip_prefix("reg") {
            (n.parse::<u32>().ok()?, 32)
        } else {
            return None;
        };
        let hi = self.hi.unwrap_or(width - 1);
        // Big-endian word order: bit 0 of xxreg0 is bit 0 of reg3.
        let words = width / 32;
        let top = base + words - 1;
        let abs = |bit: u32| (top - bit / 32) * 32 + bit % 32;
        let (a, b) = (abs(self.lo), abs(hi));
        Some((a.min(b), a.max(b)))
    }
}

/// Which pipelines a use can be live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Switch pipelines.
    Switch,
    /// Router pipelines.
    Router,
}

macro_rules! regs {
    ($( $variant:ident : $scope:ident, $place:expr, $doc:literal; )*) => {
        /// A register use.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Reg {
            $( #[doc = $doc] $variant, )*
        }
        impl Reg {
            /// Every use.
            pub const ALL: &'static [Reg] = &[ $( Reg::$variant, )* ];
            /// Where it lives.
            pub const fn place(self) -> Place {
                match self { $( Reg::$variant => $place, )* }
            }
            /// Which pipelines use it.
            pub const fn scope(self) -> Scope {
                match self { $( Reg::$variant => Scope::$scope, )* }
            }
        }
    };
}

regs! {
    // Switch pipelines: reg0 bits.
    CtDefrag: Switch, Place::bit("reg0", 0), "REGBIT_CONNTRACK_DEFRAG: send to conntrack before the ACLs/LB.";
    CtCommit: Switch, Place::bit("reg0", 1), "REGBIT_CONNTRACK_COMMIT: commit in `*_stateful`.";
    CtNat: Switch, Place::bit("reg0", 2), "REGBIT_CONNTRACK_NAT: `ct_lb_mark` in pre-stateful.";
    DhcpOptsResult: Switch, Place::bit("reg0", 3), "REGBIT_DHCP_OPTS_RESULT.";
    DnsLookupResult: Switch, Place::bit("reg0", 4), "REGBIT_DNS_LOOKUP_RESULT.";
    Hairpin: Switch, Place::bit("reg0", 6), "REGBIT_HAIRPIN.";
    AclHintAllowNew: Switch, Place::bit("reg0", 7), "REGBIT_ACL_HINT_ALLOW_NEW.";
    AclHintAllow: Switch, Place::bit("reg0", 8), "REGBIT_ACL_HINT_ALLOW.";
    AclHintDrop: Switch, Place::bit("reg0", 9), "REGBIT_ACL_HINT_DROP.";
    AclHintBlock: Switch, Place::bit("reg0", 10), "REGBIT_ACL_HINT_BLOCK.";
    LkupFdb: Switch, Place::bit("reg0", 11), "REGBIT_LKUP_FDB.";
    HairpinReply: Switch, Place::bit("reg0", 12), "REGBIT_HAIRPIN_REPLY.";
    AclLabel: Switch, Place::bit("reg0", 13), "REGBIT_ACL_LABEL.";
    FromRamp: Switch, Place::bit("reg0", 14), "REGBIT_FROM_RAMP.";
    PortSecDrop: Switch, Place::bit("reg0", 15), "REGBIT_PORT_SEC_DROP.";
    AclStateless: Switch, Place::bit("reg0", 16), "REGBIT_ACL_STATELESS.";
    AclHintAllowRel: Switch, Place::bit("reg0", 17), "REGBIT_ACL_HINT_ALLOW_REL.";
    OrigDipIpv4: Switch, Place::whole("reg1"), "REG_ORIG_DIP_IPV4: the LB VIP before DNAT.";
    OrigTpDport: Switch, Place::range("reg2", 0, 15), "REG_ORIG_TP_DPORT: the LB port before DNAT.";
    AclLabelValue: Switch, Place::whole("reg3"), "REG_LABEL: the ACL label to commit.";
    // Router pipelines.
    EgressLoopback: Router, Place::bit("reg9", 0), "REGBIT_EGRESS_LOOPBACK.";
    PktLarger: Router, Place::bit("reg9", 1), "REGBIT_PKT_LARGER.";
    LookupNeighborResult: Router, Place::bit("reg9", 2), "REGBIT_LOOKUP_NEIGHBOR_RESULT.";
    LookupNeighborIpResult: Router, Place::bit("reg9", 3), "REGBIT_LOOKUP_NEIGHBOR_IP_RESULT.";
    DstNatIpLocal: Router, Place::bit("reg9", 4), "REGBIT_DST_NAT_IP_LOCAL.";
    KnownEcmpNh: Router, Place::bit("reg9", 5), "REGBIT_KNOWN_ECMP_NH.";
    OrigTpDportRouter: Router, Place::range("reg9", 16, 31), "REG_ORIG_TP_DPORT_ROUTER.";
    InportEthAddr: Router, Place::range("xreg0", 0, 47), "REG_INPORT_ETH_ADDR: the inport's MAC, set in admission.";
    NextHopIpv4: Router, Place::whole("reg0"), "REG_NEXT_HOP_IPV4 (IPv4 packets only).";
    SrcIpv4: Router, Place::whole("reg1"), "REG_SRC_IPV4 (IPv4 packets only).";
    EcmpGroupId: Router, Place::range("reg8", 0, 15), "REG_ECMP_GROUP_ID.";
    EcmpMemberId: Router, Place::range("reg8", 16, 31), "REG_ECMP_MEMBER_ID.";
    RouteTableId: Router, Place::whole("reg7"), "REG_ROUTE_TABLE_ID.";
    KnownLbSession: Router, Place::bit("reg9", 6), "REGBIT_KNOWN_LB_SESSION: chk_lb_aff() found an affinity entry (lb_aff_check → lb_aff_learn/dnat).";
    LbAffBackendIp4: Router, Place::whole("reg4"), "REG_LB_AFF_BACKEND_IP4: the backend chk_lb_aff() remembered (IPv6: xxreg1).";
    LbAffMatchPort: Router, Place::range("reg8", 0, 15), "REG_LB_AFF_MATCH_PORT: the remembered backend's port.";
    NdRaOptsResult: Router, Place::bit("reg0", 5), "REGBIT_ND_RA_OPTS_RESULT: put_nd_ra_opts() succeeded (nd_ra_options → nd_ra_response, before routing).";
}

/// IPv6 alternatives share the IPv4 uses' registers on purpose (a packet is one or the other).
/// xxreg0 (next hop v6) covers reg0..reg3, xxreg1 (source v6) reg4..reg7.
pub const NEXT_HOP_IPV6: Place = Place::whole("xxreg0");
/// See [`NEXT_HOP_IPV6`].
pub const SRC_IPV6: Place = Place::whole("xxreg1");
/// Switch pipelines: REG_ORIG_DIP_IPV6, the IPv6 LB VIP before DNAT (xxreg1 = reg4..reg7, clear
/// of every switch [`Reg`] use in reg0..reg3).
pub const ORIG_DIP_IPV6: Place = Place::whole("xxreg1");
/// Switch pipelines: all of reg0, cleared at once by a reject ACL before it turns the packet
/// around (every reg0 flag is dead from there on).
pub const REG0_ALL: Place = Place::whole("reg0");

impl Reg {
    /// The field, for matches and actions (`reg0[7]`, `reg1`, `xreg0[0..47]`).
    pub fn field(self) -> FieldRef {
        let p = self.place();
        match p.hi {
            None => FieldRef::new(p.reg),
            Some(hi) => FieldRef::bits(p.reg, p.lo, hi),
        }
    }
}

/// The field of a place outside the [`Reg`] table ([`NEXT_HOP_IPV6`], [`SRC_IPV6`]).
pub fn field_of(p: Place) -> FieldRef {
    match p.hi {
        None => FieldRef::new(p.reg),
        Some(hi) => FieldRef::bits(p.reg, p.lo, hi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No two uses of the same scope share a bit, except the pairs listed (which are never
    /// live at once).
    #[test]
    fn uses_do_not_overlap() {
        // (a, b): b reuses a's bits in a later stage, after a is dead.
        const SHARED: &[(Reg, Reg)] = &[
            // The inport's MAC (admission..ip_input) is dead before the next hop is chosen.
            (Reg::InportEthAddr, Reg::NextHopIpv4),
            (Reg::InportEthAddr, Reg::SrcIpv4),
            // The RA result bit is set and read in nd_ra_options/response, after the inport's
            // MAC was last read (ip_input) and before routing writes the next hop.
            (Reg::InportEthAddr, Reg::NdRaOptsResult),
            (Reg::NextHopIpv4, Reg::NdRaOptsResult),
            // LB affinity (lb_aff_check..dnat) ends before routing sets the ECMP group.
            (Reg::LbAffMatchPort, Reg::EcmpGroupId),
        ];
        for (i, a) in Reg::ALL.iter().enumerate() {
            for b in &Reg::ALL[i + 1..] {
                if a.scope() != b.scope() {
                    continue;
                }
                let (Some((a0, a1)), Some((b0, b1))) = (a.place().span(), b.place().span()) else {
                    continue;
                };
                let overlap = a0 <= b1 && b0 <= a1;
                let allowed = SHARED.contains(&(*a, *b)) || SHARED.contains(&(*b, *a));
                assert!(!overlap || allowed, "{a:?} and {b:?} share bits");
            }
        }
    }

    #[test]
    fn fields_print_as_ovn_writes_them() {
        assert_eq!(Reg::CtDefrag.field().to_string(), "reg0[0]");
        assert_eq!(Reg::OrigDipIpv4.field().to_string(), "reg1");
        assert_eq!(Reg::InportEthAddr.field().to_string(), "xreg0[0..47]");
    }
}
