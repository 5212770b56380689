//! The feature registry: every language feature and every SB-layout feature, named, with the
//! holdfast level that introduced it (what chassis negotiate) and the OVN release that introduced
//! it (what `holdfast lflow check --features` uses on dumps from real OVN).
//!
//! `hf-1` is deliberately OVN 20.06's language and layout, the spellings incident B's old
//! controllers understood (`ct_commit(...)`, global port groups); `hf-2` adds everything up to
//! OVN 23.03. Releases for constructs newer than OVS 2.12 come from the table in
//! `reference/OVN.md` section 2 where it names them, and otherwise from the release notes as best
//! known; each is one line in [`REGISTRY`].
//!
//! Checking a tree against a [`FeatureSet`] reports the first construct outside it, naming the
//! feature and its levels. [`lower_actions`] and [`lower_expr`] rewrite constructs that have an
//! older spelling into it (for example the block form of `ct_commit` into `ct_commit(...)`).

use crate::actions::{Action, CtCommit, CtLbArgs, NatTarget, ResultFn};
use crate::ast::{Expr, FieldRef, Subscript, Value};
use crate::constant::{Constant, Format, Mask, width_mask};
use crate::diag::{ErrorKind, ParseError, Result, Span};
use crate::symbols::{SymbolKind, SymbolTable};
use std::fmt;

/// A holdfast feature level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Level {
    /// OVN 20.06's language and SB layout.
    Hf1,
    /// Everything up to OVN 23.03.
    Hf2,
}

impl Level {
    /// Every level, oldest first.
    pub const ALL: [Level; 2] = [Level::Hf1, Level::Hf2];

    /// `hf-1`, `hf-2`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Hf1 => "hf-1",
            Level::Hf2 => "hf-2",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An OVN (or, before 20.03, OVS) release: `2.6`, `20.09`, `23.03`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OvnRelease {
    /// Major version (2 for OVS-era releases, the year for OVN ones).
    pub major: u8,
    /// Minor version.
    pub minor: u8,
}

impl OvnRelease {
    /// A release.
    pub const fn new(major: u8, minor: u8) -> Self {
        Self { major, minor }
    }

    /// Parses `20.09`, `v20.09`, `ovn-20.09` or `2.12`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim_start_matches("ovn-").trim_start_matches('v');
        let (a, b) = s.split_once('.')?;
        Some(Self::new(a.parse().ok()?, b.parse().ok()?))
    }
}

impl fmt::Display for OvnRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.major < 20 {
            write!(f, "{}.{}", self.major, self.minor)
        } else {
            write!(f, "{}.{:02}", self.major, self.minor)
        }
    }
}

/// What a feature is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FeatureKind {
    /// Syntax or symbols in matches.
    Match,
    /// An action or action syntax.
    Action,
    /// The layout of SB rows (not visible in flow text).
    SbLayout,
}

/// How a construct can be served to a chassis that lacks the feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lowering {
    /// Part of the oldest level: nothing to lower.
    Base,
    /// An older spelling or design exists; the text says which.
    Older(&'static str),
    /// No older spelling: northd must fail closed for chassis without it.
    Needed,
}

/// One entry of the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Feature {
    /// The name chassis advertise in `other_config:holdfast-features`.
    pub name: &'static str,
    /// Kind.
    pub kind: FeatureKind,
    /// The holdfast level that introduced it.
    pub hf: Level,
    /// The OVN release that introduced it.
    pub ovn: OvnRelease,
    /// What it is.
    pub summary: &'static str,
    /// How to serve chassis without it.
    pub lowering: Lowering,
}

const fn feat(
    name: &'static str,
    kind: FeatureKind,
    major: u8,
    minor: u8,
    summary: &'static str,
    lowering: Lowering,
) -> Feature {
    let ovn = OvnRelease::new(major, minor);
    let hf = if major < 20 || (major == 20 && minor <= 6) {
        Level::Hf1
    } else {
        Level::Hf2
    };
    Feature {
        name,
        kind,
        hf,
        ovn,
        summary,
        lowering,
    }
}

use FeatureKind::{Action as A, Match as M, SbLayout as L};
use Lowering::{Base, Needed, Older};

/// Every feature. Index order is stable within a build; names are the stable identity.
pub const REGISTRY: &[Feature] = &[
    // Matches.
    feat("addr-set", M, 2, 6, "`$address_set` in matches", Base),
    feat(
        "is-chassis-resident",
        M,
        2,
        7,
        "`is_chassis_resident(\"port\")`",
        Base,
    ),
    feat(
        "port-group",
        M,
        2,
        10,
        "`@port_group` and `$pg_ip4`/`$pg_ip6`",
        Base,
    ),
    feat(
        "mld-predicates",
        M,
        20,
        3,
        "`mldv1`, `mldv2`, `ip6.mcast_*` predicates",
        Base,
    ),
    feat(
        "ct-label-ecmp-reply",
        M,
        20,
        12,
        "`ct_label.ecmp_reply_eth`, `ct_label.ecmp_reply_port`",
        Needed,
    ),
    feat(
        "flags-skip-snat-for-lb",
        M,
        20,
        12,
        "`flags.skip_snat_for_lb`",
        Needed,
    ),
    feat(
        "ip4-src-mcast",
        M,
        21,
        3,
        "`ip4.src_mcast` predicate",
        Older("`ip4.src[28..31] == 0xe`"),
    ),
    feat(
        "ct-label-nat-flags",
        M,
        21,
        3,
        "`ct_label.natted`, `.skip_snat`, `.force_snat`",
        Needed,
    ),
    feat(
        "flags-use-snat-zone",
        M,
        21,
        12,
        "`flags.use_snat_zone`",
        Needed,
    ),
    feat(
        "ct-label-label",
        M,
        22,
        3,
        "`ct_label.label` (ACL labels)",
        Needed,
    ),
    feat(
        "ct-mark-subfields",
        M,
        22,
        6,
        "`ct_mark.blocked`, `.natted`, `.skip_snat`, `.force_snat`, `.ecmp_reply_port`",
        Older("the same bits of `ct_label` (`ct_label.blocked`, ...)"),
    ),
    feat("rarp-fields", M, 22, 12, "`rarp.*` fields", Needed),
    feat(
        "template-var",
        M,
        23,
        3,
        "`^template` chassis template variables",
        Needed,
    ),
    // Actions.
    feat("ct-nat", A, 2, 6, "`ct_dnat`, `ct_snat`", Base),
    feat(
        "ct-lb",
        A,
        2,
        6,
        "`ct_lb` (deprecated, removed after OVN 26.03)",
        Base,
    ),
    feat("set-queue", A, 2, 6, "`set_queue(N)`", Base),
    feat("push-pop", A, 2, 6, "`push(f)`, `pop(f)`", Base),
    feat("ct-clear", A, 2, 7, "`ct_clear`", Base),
    feat("dns-lookup", A, 2, 8, "`R = dns_lookup()`", Base),
    feat("put-nd-ra-opts", A, 2, 8, "`R = put_nd_ra_opts(...)`", Base),
    feat("log", A, 2, 8, "`log(...)`", Base),
    feat("nd-ns", A, 2, 8, "`nd_ns { }`", Base),
    feat("tcp-reset", A, 2, 10, "`tcp_reset { }`", Base),
    feat("nd-na-router", A, 2, 10, "`nd_na_router { }`", Base),
    feat("set-meter", A, 2, 10, "`set_meter(rate[, burst])`", Base),
    feat(
        "lookup-neighbor",
        A,
        2,
        11,
        "`R = lookup_arp(...)`, `R = lookup_nd(...)`",
        Base,
    ),
    feat(
        "icmp-error",
        A,
        2,
        12,
        "`icmp4_error { }`, `icmp6_error { }`, `icmp4.frag_mtu`",
        Base,
    ),
    feat(
        "check-pkt-larger",
        A,
        2,
        12,
        "`R = check_pkt_larger(L)`",
        Base,
    ),
    feat("trigger-event", A, 2, 12, "`trigger_event(...)`", Base),
    feat("igmp", A, 2, 12, "`igmp;`", Base),
    feat("bind-vport", A, 2, 12, "`bind_vport(V, P)`", Base),
    feat("select", A, 20, 3, "`R = select(...)`", Base),
    feat("handle-svc-check", A, 20, 3, "`handle_svc_check(P)`", Base),
    feat("fwd-group", A, 20, 3, "`fwd_group(...)`", Base),
    feat(
        "ct-lb-backends",
        A,
        20,
        3,
        "`ct_lb(backends=...; hash_fields=...)`",
        Older("`ct_lb(ip:port, ...)` without hash_fields"),
    ),
    feat(
        "handle-dhcpv6-reply",
        A,
        20,
        6,
        "`handle_dhcpv6_reply`",
        Base,
    ),
    feat(
        "ct-commit-block",
        A,
        20,
        9,
        "`ct_commit { ... }` (block form)",
        Older("`ct_commit(ct_mark=V/M, ct_label=V/M)` when the block only sets constants"),
    ),
    feat("sctp-abort", A, 20, 9, "`sctp_abort { }`", Needed),
    feat("reject", A, 20, 12, "`reject { }`", Needed),
    feat(
        "lb-hairpin",
        A,
        20,
        12,
        "`R = chk_lb_hairpin()`, `R = chk_lb_hairpin_reply()`, `ct_snat_to_vip;`",
        Needed,
    ),
    feat(
        "lookup-neighbor-ip",
        A,
        20,
        12,
        "`R = lookup_arp_ip(...)`, `R = lookup_nd_ip(...)`",
        Needed,
    ),
    feat("handle-bfd-msg", A, 21, 3, "`handle_bfd_msg()`", Needed),
    feat(
        "fdb",
        A,
        21,
        3,
        "`put_fdb`, `R = lookup_fdb(...)`, `P = get_fdb(...)`",
        Needed,
    ),
    feat(
        "ecmp-symmetric-reply",
        A,
        21,
        3,
        "`commit_ecmp_nh`, `chk_ecmp_nh`, `chk_ecmp_nh_mac`",
        Needed,
    ),
    feat(
        "ct-lb-flags",
        A,
        21,
        6,
        "`skip_snat`/`force_snat` in `ct_lb(...)`",
        Needed,
    ),
    feat(
        "ct-nat-in-czone",
        A,
        21,
        12,
        "`ct_dnat_in_czone`, `ct_snat_in_czone`",
        Needed,
    ),
    feat(
        "ct-nat-port-range",
        A,
        21,
        12,
        "`ct_snat(IP, LO-HI)` port ranges and flags",
        Needed,
    ),
    feat(
        "check-port-sec",
        A,
        22,
        6,
        "`R = check_in_port_sec()`, `R = check_out_port_sec()`",
        Needed,
    ),
    feat(
        "ct-lb-mark",
        A,
        22,
        6,
        "`ct_lb_mark`",
        Older("`ct_lb` with `ct_label` bits"),
    ),
    feat("ct-commit-nat", A, 22, 12, "`ct_commit_nat`", Needed),
    feat(
        "lb-affinity",
        A,
        22,
        12,
        "`R = chk_lb_aff()`, `commit_lb_aff(...)`",
        Needed,
    ),
    feat("sample", A, 22, 12, "`sample(...)`", Needed),
    // SB layout.
    feat(
        "port-group-per-datapath",
        L,
        20,
        9,
        "SB `Port_Group` rows per datapath (named `<dp-key>_<name>`), as OVN 20.09 made them",
        Older("one global SB `Port_Group` row per NB port group"),
    ),
    feat(
        "logical-dp-groups",
        L,
        21,
        3,
        "`Logical_Flow.logical_dp_group` (flows shared by datapath groups)",
        Older("one `Logical_Flow` row per datapath"),
    ),
    feat(
        "ct-no-masked-label",
        L,
        22,
        6,
        "chassis feature `ct-no-masked-label`",
        Older("`ct_label`-based NAT flags"),
    ),
    feat(
        "mac-binding-timestamp",
        L,
        22,
        12,
        "`MAC_Binding.timestamp`",
        Older("no MAC binding ageing"),
    ),
    feat(
        "fdb-timestamp",
        L,
        23,
        3,
        "`FDB.timestamp`",
        Older("no FDB ageing"),
    ),
    feat(
        "ls-dpg-column",
        L,
        23,
        3,
        "`Logical_DP_Group` for switch and router load balancers",
        Older("per-datapath load balancer rows"),
    ),
    feat(
        "chassis-template-var",
        L,
        23,
        3,
        "the `Chassis_Template_Var` table",
        Needed,
    ),
];

/// Looks a feature up by name.
pub fn feature(name: &str) -> Option<&'static Feature> {
    REGISTRY.iter().find(|f| f.name == name)
}

fn index(name: &str) -> usize {
    REGISTRY.iter().position(|f| f.name == name).unwrap_or(0)
}

const _: () = assert!(REGISTRY.len() <= 128, "FeatureSet is a 128-bit set");

/// A set of features.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FeatureSet(u128);

impl FeatureSet {
    /// Every feature.
    pub fn all() -> Self {
        Self(width_mask(REGISTRY.len() as u32))
    }

    /// The features of a holdfast level.
    pub fn level(level: Level) -> Self {
        Self::filter(|f| f.hf <= level)
    }

    /// The features of an OVN release.
    pub fn ovn(release: OvnRelease) -> Self {
        Self::filter(|f| f.ovn <= release)
    }

    fn filter(p: impl Fn(&Feature) -> bool) -> Self {
        let mut s = 0;
        for (i, f) in REGISTRY.iter().enumerate() {
            if p(f) {
                s |= 1u128 << i;
            }
        }
        Self(s)
    }

    /// Whether `name` is in the set (unknown names are not).
    pub fn contains(&self, name: &str) -> bool {
        REGISTRY
            .iter()
            .position(|f| f.name == name)
            .is_some_and(|i| self.0 & (1 << i) != 0)
    }

    /// Adds a feature by name; false when the name is unknown.
    pub fn insert(&mut self, name: &str) -> bool {
        match REGISTRY.iter().position(|f| f.name == name) {
            Some(i) => {
                self.0 |= 1 << i;
                true
            }
            None => false,
        }
    }

    /// The features in the set, in registry order.
    pub fn iter(&self) -> impl Iterator<Item = &'static Feature> + '_ {
        REGISTRY
            .iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, f)| f)
    }

    /// Parses `hf-1`, `hf-2`, `ovn-20.06` or `20.06`, `all`, or a comma list of any of those and
    /// feature names (the union).
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let mut set = Self::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let add = if item == "all" {
                Self::all()
            } else if let Some(l) = Level::ALL.iter().find(|l| l.name() == item) {
                Self::level(*l)
            } else if let Some(r) = OvnRelease::parse(item) {
                Self::ovn(r)
            } else if let Some(f) = feature(item) {
                Self(1 << index(f.name))
            } else {
                return Err(format!(
                    "unknown feature or level `{item}` (levels: hf-1, hf-2; releases like 20.06; features: {})",
                    REGISTRY
                        .iter()
                        .map(|f| f.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            set.0 |= add.0;
        }
        Ok(set)
    }

    /// The features in both sets: what northd may emit for a group of chassis.
    #[must_use]
    pub fn intersection(&self, other: &FeatureSet) -> FeatureSet {
        FeatureSet(self.0 & other.0)
    }

    /// The features in either set.
    #[must_use]
    pub fn union(&self, other: &FeatureSet) -> FeatureSet {
        FeatureSet(self.0 | other.0)
    }

    /// The newest holdfast level whose every feature is in the set, if any.
    pub fn level_covered(&self) -> Option<Level> {
        Level::ALL
            .iter()
            .rev()
            .copied()
            .find(|l| FeatureSet::level(*l).0 & !self.0 == 0)
    }

    /// The advertisement string: names joined by commas.
    pub fn to_list(&self) -> String {
        self.iter().map(|f| f.name).collect::<Vec<_>>().join(",")
    }
}

/// A use of a feature at a place in the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Use {
    /// The feature.
    pub feature: &'static Feature,
    /// Where.
    pub span: Span,
}

fn push(out: &mut Vec<Use>, name: &str, span: Span) {
    if let Some(f) = feature(name) {
        out.push(Use { feature: f, span });
    }
}

fn field_features(f: &FieldRef, out: &mut Vec<Use>) {
    let n = f.name.as_str();
    let name = match n {
        "ct_label.ecmp_reply_eth" | "ct_label.ecmp_reply_port" => "ct-label-ecmp-reply",
        "flags.skip_snat_for_lb" => "flags-skip-snat-for-lb",
        "ip4.src_mcast" => "ip4-src-mcast",
        "ct_label.natted" | "ct_label.skip_snat" | "ct_label.force_snat" => "ct-label-nat-flags",
        "flags.use_snat_zone" => "flags-use-snat-zone",
        "ct_label.label" => "ct-label-label",
        "mldv1" | "mldv2" => "mld-predicates",
        "icmp4.frag_mtu" | "icmp6.frag_mtu" => "icmp-error",
        _ if n.starts_with("ct_mark.") => "ct-mark-subfields",
        _ if n.starts_with("rarp.") => "rarp-fields",
        _ if n.starts_with("ip6.mcast") => "mld-predicates",
        _ => return,
    };
    push(out, name, f.span);
}

fn value_features(v: &Value, span: Span, out: &mut Vec<Use>) {
    match v {
        Value::AddrSet(_) => push(out, "addr-set", span),
        Value::PortGroup(_) => push(out, "port-group", span),
        Value::Template(_) => push(out, "template-var", span),
        _ => {}
    }
}

/// Every feature a match uses, with where.
pub fn used_by_expr(e: &Expr) -> Vec<Use> {
    let mut out = Vec::new();
    expr_features(e, &mut out);
    out
}

fn expr_features(e: &Expr, out: &mut Vec<Use>) {
    match e {
        Expr::Bool(_) => {}
        Expr::Field(f) => field_features(f, out),
        Expr::Not(x) => expr_features(x, out),
        Expr::And(v) | Expr::Or(v) => v.iter().for_each(|x| expr_features(x, out)),
        Expr::Cmp { field, rhs, .. } => {
            field_features(field, out);
            for t in rhs.terms() {
                value_features(&t.value, t.span, out);
            }
        }
        Expr::Range {
            field, low, high, ..
        } => {
            field_features(field, out);
            value_features(&low.value, low.span, out);
            value_features(&high.value, high.span, out);
        }
        Expr::ChassisResident { span, .. } => push(out, "is-chassis-resident", *span),
    }
}

/// Every feature an action list uses, with where.
pub fn used_by_actions(actions: &[Action]) -> Vec<Use> {
    let mut out = Vec::new();
    for a in actions {
        action_features(a, &mut out);
    }
    out
}

fn action_features(a: &Action, out: &mut Vec<Use>) {
    use crate::actions::NestedKind as N;
    match a {
        Action::Assign { dst, value, span } => {
            field_features(dst, out);
            value_features(value, *span, out);
        }
        Action::Move { dst, src, .. } => {
            field_features(dst, out);
            field_features(src, out);
        }
        Action::Exchange { a: x, b, .. } => {
            field_features(x, out);
            field_features(b, out);
        }
        Action::Push { field, span } | Action::Pop { field, span } => {
            push(out, "push-pop", *span);
            field_features(field, out);
        }
        Action::CtCommit { args, span } => match args {
            CtCommit::Block(body) => {
                push(out, "ct-commit-block", *span);
                body.iter().for_each(|x| action_features(x, out));
            }
            CtCommit::Legacy { .. } | CtCommit::Bare => {}
        },
        Action::CtNat { kind, target, span } => {
            use crate::actions::NatKind as K;
            match kind {
                K::Dnat | K::Snat => push(out, "ct-nat", *span),
                K::DnatInCzone | K::SnatInCzone => push(out, "ct-nat-in-czone", *span),
            }
            if let Some(NatTarget { ports, flags, .. }) = target
                && (ports.is_some() || !flags.is_empty())
            {
                push(out, "ct-nat-port-range", *span);
            }
        }
        Action::CtClear { span } => push(out, "ct-clear", *span),
        Action::CtCommitNat { span } => push(out, "ct-commit-nat", *span),
        Action::CtSnatToVip { span } => push(out, "lb-hairpin", *span),
        Action::CtLb { mark, args, span } => {
            push(out, if *mark { "ct-lb-mark" } else { "ct-lb" }, *span);
            if let Some(CtLbArgs {
                legacy,
                flag,
                hash_fields,
                backends,
            }) = args
            {
                if !legacy || hash_fields.is_some() {
                    push(out, "ct-lb-backends", *span);
                }
                if flag.is_some() {
                    push(out, "ct-lb-flags", *span);
                }
                // A load balancer template's backends (`^backends`).
                if backends
                    .iter()
                    .any(|b| matches!(b, crate::actions::LbBackend::Template(_)))
                {
                    push(out, "template-var", *span);
                }
            }
        }
        Action::Nested { kind, body, span } => {
            let name = match kind {
                N::NdNs => Some("nd-ns"),
                N::NdNaRouter => Some("nd-na-router"),
                N::Icmp4Error | N::Icmp6Error => Some("icmp-error"),
                N::TcpReset => Some("tcp-reset"),
                N::SctpAbort => Some("sctp-abort"),
                N::Reject => Some("reject"),
                _ => None,
            };
            if let Some(n) = name {
                push(out, n, *span);
            }
            body.iter().for_each(|x| action_features(x, out));
        }
        Action::GetArp { port, ip, .. } | Action::GetNd { port, ip, .. } => {
            field_features(port, out);
            field_features(ip, out);
        }
        Action::PutArp { port, ip, mac, .. } | Action::PutNd { port, ip, mac, .. } => {
            field_features(port, out);
            field_features(ip, out);
            field_features(mac, out);
        }
        Action::PutFdb { span, .. } => push(out, "fdb", *span),
        Action::Result { dst, func, span } => {
            field_features(dst, out);
            let name = match func {
                ResultFn::LookupArp { .. } | ResultFn::LookupNd { .. } => "lookup-neighbor",
                ResultFn::LookupArpIp { .. } | ResultFn::LookupNdIp { .. } => "lookup-neighbor-ip",
                ResultFn::GetFdb { .. } | ResultFn::LookupFdb { .. } => "fdb",
                ResultFn::PutDhcpOpts { .. } => return,
                ResultFn::PutNdRaOpts { .. } => "put-nd-ra-opts",
                ResultFn::DnsLookup => "dns-lookup",
                ResultFn::ChkLbHairpin | ResultFn::ChkLbHairpinReply => "lb-hairpin",
                ResultFn::CheckInPortSec | ResultFn::CheckOutPortSec => "check-port-sec",
                ResultFn::CheckPktLarger { .. } => "check-pkt-larger",
                ResultFn::ChkEcmpNhMac | ResultFn::ChkEcmpNh => "ecmp-symmetric-reply",
                ResultFn::ChkLbAff => "lb-affinity",
            };
            push(out, name, *span);
        }
        Action::Select { span, .. } => push(out, "select", *span),
        Action::SetQueue { span, .. } => push(out, "set-queue", *span),
        Action::SetMeter { span, .. } => push(out, "set-meter", *span),
        Action::Log { span, .. } => push(out, "log", *span),
        Action::FwdGroup { span, .. } => push(out, "fwd-group", *span),
        Action::TriggerEvent { span, .. } => push(out, "trigger-event", *span),
        Action::Igmp { span } => push(out, "igmp", *span),
        Action::HandleDhcpv6Reply { span } => push(out, "handle-dhcpv6-reply", *span),
        Action::HandleBfdMsg { span } => push(out, "handle-bfd-msg", *span),
        Action::BindVport { span, .. } => push(out, "bind-vport", *span),
        Action::HandleSvcCheck { span, .. } => push(out, "handle-svc-check", *span),
        Action::CommitEcmpNh { span, .. } => push(out, "ecmp-symmetric-reply", *span),
        Action::CommitLbAff { span, .. } => push(out, "lb-affinity", *span),
        Action::Sample { span, .. } => push(out, "sample", *span),
        _ => {}
    }
}

/// The newest OVN release among the features used: the oldest release that can parse the text.
pub fn required_release(uses: &[Use]) -> OvnRelease {
    uses.iter()
        .map(|u| u.feature.ovn)
        .max()
        .unwrap_or(OvnRelease::new(2, 5))
}

fn feature_error(u: &Use) -> ParseError {
    let f = u.feature;
    let e = ParseError::new(
        ErrorKind::Feature,
        u.span,
        format!(
            "{} needs feature `{}` (holdfast level {}, OVN {}), which is outside the allowed features",
            f.summary, f.name, f.hf, f.ovn
        ),
    );
    match f.lowering {
        Lowering::Older(how) => e.with_help(format!("older spelling: {how}")),
        _ => e.with_help("no older spelling exists; chassis below this level cannot run this flow"),
    }
}

fn check_uses(uses: &[Use], set: &FeatureSet) -> Result<()> {
    match uses.iter().find(|u| !set.contains(u.feature.name)) {
        Some(u) => Err(feature_error(u)),
        None => Ok(()),
    }
}

/// Rejects the first construct of a match outside `set`.
pub fn check_expr(e: &Expr, set: &FeatureSet) -> Result<()> {
    check_uses(&used_by_expr(e), set)
}

/// Rejects the first construct of an action list outside `set`.
pub fn check_actions(a: &[Action], set: &FeatureSet) -> Result<()> {
    check_uses(&used_by_actions(a), set)
}

// ----- lowering -----------------------------------------------------------------------------------

fn rename_ct_mark(f: &FieldRef) -> FieldRef {
    match f.name.strip_prefix("ct_mark.") {
        Some(rest) => FieldRef {
            name: format!("ct_label.{rest}"),
            sub: f.sub,
            span: f.span,
        },
        None => f.clone(),
    }
}

/// Rewrites a match into the spellings `target` understands (`ct_mark.*` subfields into the
/// same `ct_label` bits when `ct-mark-subfields` is missing, `ip4.src_mcast` into its expansion
/// when `ip4-src-mcast` is), then checks what is left.
pub fn lower_expr(e: &Expr, target: &FeatureSet) -> Result<Expr> {
    let mut lowered = if target.contains("ct-mark-subfields") {
        e.clone()
    } else {
        map_fields(e, &rename_ct_mark)
    };
    if !target.contains("ip4-src-mcast") {
        lowered = expand_src_mcast(&lowered);
    }
    check_expr(&lowered, target).map_err(as_lowering)?;
    Ok(lowered)
}

/// `ip4.src_mcast` is `ip4.src[28..31] == 0xe`.
fn expand_src_mcast(e: &Expr) -> Expr {
    let expansion = || Expr::Cmp {
        field: FieldRef::bits("ip4.src", 28, 31),
        op: crate::ast::RelOp::Eq,
        rhs: crate::ast::Rhs::One(crate::ast::Term::new(Value::Const(Constant::new(
            0xe,
            Format::Hex,
        )))),
    };
    match e {
        Expr::Field(f) if f.name == "ip4.src_mcast" && f.sub.is_none() => expansion(),
        // `ip4.src_mcast == 1`, `!= 0`, `== 0`, `!= 1`.
        Expr::Cmp {
            field,
            op,
            rhs:
                crate::ast::Rhs::One(crate::ast::Term {
                    value: Value::Const(c),
                    ..
                }),
        } if field.name == "ip4.src_mcast" && field.sub.is_none() => {
            if (c.value == 1) == (*op == crate::ast::RelOp::Eq) {
                expansion()
            } else {
                Expr::Not(Box::new(expansion()))
            }
        }
        Expr::Not(x) => Expr::Not(Box::new(expand_src_mcast(x))),
        Expr::And(v) => Expr::And(v.iter().map(expand_src_mcast).collect()),
        Expr::Or(v) => Expr::Or(v.iter().map(expand_src_mcast).collect()),
        other => other.clone(),
    }
}

fn as_lowering(mut e: ParseError) -> ParseError {
    e.kind = ErrorKind::Lowering;
    e.message = format!("cannot lower: {}", e.message);
    e
}

fn map_fields(e: &Expr, m: &impl Fn(&FieldRef) -> FieldRef) -> Expr {
    match e {
        Expr::Field(f) => Expr::Field(m(f)),
        Expr::Not(x) => Expr::Not(Box::new(map_fields(x, m))),
        Expr::And(v) => Expr::And(v.iter().map(|x| map_fields(x, m)).collect()),
        Expr::Or(v) => Expr::Or(v.iter().map(|x| map_fields(x, m)).collect()),
        Expr::Cmp { field, op, rhs } => Expr::Cmp {
            field: m(field),
            op: *op,
            rhs: rhs.clone(),
        },
        Expr::Range {
            field,
            low,
            low_op,
            high_op,
            high,
        } => Expr::Range {
            field: m(field),
            low: low.clone(),
            low_op: *low_op,
            high_op: *high_op,
            high: high.clone(),
        },
        other => other.clone(),
    }
}

/// Rewrites an action list into the spellings `target` understands, then checks what is left:
/// `ct_mark.*` subfields become `ct_label.*` without `ct-mark-subfields`; `ct_lb_mark` becomes
/// `ct_lb` without `ct-lb-mark`; `ct_lb(backends=...)` without hash fields or flags becomes
/// `ct_lb(ip:port, ...)` without `ct-lb-backends`; the block form of `ct_commit` becomes `ct_commit(ct_mark=V/M,
/// ct_label=V/M)` without `ct-commit-block` (when the block only assigns constants).
pub fn lower_actions(actions: &[Action], target: &FeatureSet) -> Result<Vec<Action>> {
    let mut out = Vec::with_capacity(actions.len());
    for a in actions {
        out.push(lower_action(a, target)?);
    }
    check_actions(&out, target).map_err(as_lowering)?;
    Ok(out)
}

fn lower_action(a: &Action, target: &FeatureSet) -> Result<Action> {
    let rename = !target.contains("ct-mark-subfields");
    Ok(match a {
        Action::Assign { dst, value, span } if rename => Action::Assign {
            dst: rename_ct_mark(dst),
            value: value.clone(),
            span: *span,
        },
        Action::Move { dst, src, span } if rename => Action::Move {
            dst: rename_ct_mark(dst),
            src: rename_ct_mark(src),
            span: *span,
        },
        Action::CtLb { mark, args, span } => {
            let mark = *mark && target.contains("ct-lb-mark");
            let mut args = args.clone();
            // `backends=` without hash fields or flags has the old positional spelling.
            if let Some(a) = &mut args
                && !target.contains("ct-lb-backends")
                && a.hash_fields.is_none()
                && a.flag.is_none()
            {
                a.legacy = true;
            }
            Action::CtLb {
                mark,
                args,
                span: *span,
            }
        }
        Action::Nested { kind, body, span } => Action::Nested {
            kind: *kind,
            body: body
                .iter()
                .map(|x| lower_action(x, target))
                .collect::<Result<_>>()?,
            span: *span,
        },
        Action::CtCommit {
            args: CtCommit::Block(body),
            span,
        } => {
            let body: Vec<Action> = body
                .iter()
                .map(|x| lower_action(x, target))
                .collect::<Result<_>>()?;
            if target.contains("ct-commit-block") {
                Action::CtCommit {
                    args: CtCommit::Block(body),
                    span: *span,
                }
            } else {
                Action::CtCommit {
                    args: block_to_legacy(&body, *span)?,
                    span: *span,
                }
            }
        }
        other => other.clone(),
    })
}

/// The combined (value, mask) a `ct_commit { }` block writes to `ct_mark` and `ct_label`, if it
/// only assigns constants: later assignments override earlier ones bit by bit.
pub fn ct_commit_block_effect(body: &[Action]) -> Option<((u128, u128), (u128, u128))> {
    let symtab = SymbolTable::shared();
    let mut mark = (0u128, 0u128);
    let mut label = (0u128, 0u128);
    for a in body {
        let Action::Assign {
            dst,
            value: Value::Const(c),
            ..
        } = a
        else {
            return None;
        };
        let sym = symtab.get(&dst.name)?;
        let (base, lo0, width) = match sym.kind {
            SymbolKind::Field(_) => (dst.name.as_str(), 0, sym.width),
            SymbolKind::Subfield { lo, hi, .. } => (
                if dst.name.starts_with("ct_mark") {
                    "ct_mark"
                } else {
                    "ct_label"
                },
                lo,
                hi - lo + 1,
            ),
            SymbolKind::Predicate(_) => return None,
        };
        let (lo, w) = match dst.sub {
            None => (lo0, width),
            Some(Subscript::Bit(b)) => (lo0 + b, 1),
            Some(Subscript::Range(l, h)) => (lo0 + l, h - l + 1),
        };
        let cmask = c.mask_bits(w) & width_mask(w);
        let (v, m) = ((c.value & cmask).checked_shl(lo)?, cmask.checked_shl(lo)?);
        let slot = match base {
            "ct_mark" => &mut mark,
            "ct_label" => &mut label,
            _ => return None,
        };
        slot.0 = (slot.0 & !m) | v;
        slot.1 |= m;
    }
    Some((mark, label))
}

fn block_to_legacy(body: &[Action], span: Span) -> Result<CtCommit> {
    let Some((mark, label)) = ct_commit_block_effect(body) else {
        return Err(ParseError::new(
            ErrorKind::Lowering,
            span,
            "cannot lower `ct_commit { ... }`: the old `ct_commit(...)` form only takes constants",
        )
        .with_help(
            "this block copies a field; chassis below feature `ct-commit-block` cannot run it",
        ));
    };
    let konst = |(v, m): (u128, u128), width: u32| {
        (m != 0).then(|| Constant {
            value: v,
            format: Format::Hex,
            mask: (m != width_mask(width)).then_some(Mask::Bits(m, Format::Hex)),
        })
    };
    Ok(match (konst(mark, 32), konst(label, 128)) {
        (None, None) => CtCommit::Bare,
        (mark, label) => CtCommit::Legacy { mark, label },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_print_and_order() {
        assert_eq!(OvnRelease::parse("v20.09"), Some(OvnRelease::new(20, 9)));
        assert_eq!(OvnRelease::parse("ovn-2.12"), Some(OvnRelease::new(2, 12)));
        assert_eq!(OvnRelease::new(20, 9).to_string(), "20.09");
        assert_eq!(OvnRelease::new(2, 6).to_string(), "2.6");
        assert!(OvnRelease::new(2, 12) < OvnRelease::new(20, 3));
        assert_eq!(OvnRelease::parse("twenty"), None);
    }

    #[test]
    fn set_operations_and_levels() {
        let hf1 = FeatureSet::level(Level::Hf1);
        let hf2 = FeatureSet::level(Level::Hf2);
        assert_eq!(hf1.intersection(&hf2), hf1);
        assert_eq!(hf1.union(&hf2), hf2);
        assert_eq!(hf2, FeatureSet::all());
        assert_eq!(hf2.level_covered(), Some(Level::Hf2));
        assert_eq!(hf1.level_covered(), Some(Level::Hf1));
        let mut partial = hf1;
        assert!(partial.insert("ct-commit-block"));
        assert!(!partial.insert("no-such-feature"));
        assert_eq!(partial.level_covered(), Some(Level::Hf1));
        assert_eq!(FeatureSet::default().level_covered(), None);
        // A chassis advertising its list round-trips through the advertisement string.
        assert_eq!(FeatureSet::parse(&partial.to_list()), Ok(partial));
    }
}
