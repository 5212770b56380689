//! The action syntax tree and its parser: every action ovn-northd 23.03 emits and every action
//! holdfast's northd emits. Parsing and typing only; executing actions belongs to `hf-pipeline`.

use crate::ast::{FieldRef, Value};
use crate::constant::Constant;
use crate::diag::Span;

mod parse;

pub use parse::parse_actions_text;

/// `ingress` or `egress`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pipeline {
    /// The ingress pipeline.
    Ingress,
    /// The egress pipeline.
    Egress,
}

/// The arguments of `next`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NextArgs {
    /// `next;`
    Plain,
    /// `next(N);`
    Table(u32),
    /// `next(pipeline=P, table=N);` with either part optional.
    Named {
        /// The pipeline, if given.
        pipeline: Option<Pipeline>,
        /// The table, if given.
        table: Option<u32>,
    },
}

/// The three spellings of `ct_commit`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CtCommit {
    /// `ct_commit;`
    Bare,
    /// `ct_commit { ct_mark.blocked = 1; ... };` (OVN 20.09 and later).
    Block(Vec<Action>),
    /// `ct_commit(ct_mark=V[/M], ct_label=V[/M]);` (OVN 20.06 and earlier).
    Legacy {
        /// The value (and mask) for `ct_mark`.
        mark: Option<Constant>,
        /// The value (and mask) for `ct_label`.
        label: Option<Constant>,
    },
}

/// Which NAT action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NatKind {
    /// `ct_dnat`
    Dnat,
    /// `ct_snat`
    Snat,
    /// `ct_dnat_in_czone`
    DnatInCzone,
    /// `ct_snat_in_czone`
    SnatInCzone,
}

impl NatKind {
    /// The action's name.
    pub fn name(self) -> &'static str {
        match self {
            NatKind::Dnat => "ct_dnat",
            NatKind::Snat => "ct_snat",
            NatKind::DnatInCzone => "ct_dnat_in_czone",
            NatKind::SnatInCzone => "ct_snat_in_czone",
        }
    }
}

/// `IP[, PORT-PORT][, flag...]` of a NAT action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NatTarget {
    /// The address to translate to.
    pub addr: Constant,
    /// A port range.
    pub ports: Option<(u16, u16)>,
    /// `random`, `hash`, `persistent`.
    pub flags: Vec<String>,
}

/// One load-balancer backend: `ip[:port]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backend {
    /// The address.
    pub ip: Constant,
    /// The port.
    pub port: Option<u16>,
}

/// The port of a template backend: a number, or `^variable`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TemplatePort {
    /// `:80`
    Num(u16),
    /// `:^port` (the variable's name, without `^`).
    Var(String),
}

/// One backend of a load balancer template (OVN 23.03, `Load_Balancer options:template=true`):
/// `^ip[:^port|:port]`, or `^backends` that a chassis expands to a list of `ip:port`. Each
/// chassis substitutes its `Chassis_Template_Var` values in the flow's text before parsing
/// it, so a template backend is never executed as such.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TemplateBackend {
    /// The variable's name, without `^`.
    pub ip: String,
    /// The port, if any.
    pub port: Option<TemplatePort>,
}

/// One backend of `ct_lb`/`ct_lb_mark`: an address, or a template.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LbBackend {
    /// `ip[:port]`, `[ip6]:port`.
    Addr(Backend),
    /// `^ip[:^port|:port]`.
    Template(TemplateBackend),
}

/// Arguments of `ct_lb`/`ct_lb_mark`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CtLbArgs {
    /// The backends.
    pub backends: Vec<LbBackend>,
    /// `hash_fields="..."`.
    pub hash_fields: Option<String>,
    /// `skip_snat` or `force_snat`.
    pub flag: Option<String>,
    /// Written in the old `ct_lb(ip:port, ...)` form, without `backends=`.
    pub legacy: bool,
}

/// Actions that replace the packet (or copy it) and run a nested list on the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NestedKind {
    /// `arp { }`
    Arp,
    /// `nd_ns { }`
    NdNs,
    /// `nd_na { }`
    NdNa,
    /// `nd_na_router { }`
    NdNaRouter,
    /// `icmp4 { }`
    Icmp4,
    /// `icmp4_error { }`
    Icmp4Error,
    /// `icmp6 { }`
    Icmp6,
    /// `icmp6_error { }`
    Icmp6Error,
    /// `tcp_reset { }`
    TcpReset,
    /// `sctp_abort { }`
    SctpAbort,
    /// `reject { }`
    Reject,
    /// `clone { }`
    Clone,
}

pub(crate) const NESTED: &[(&str, NestedKind)] = &[
    ("arp", NestedKind::Arp),
    ("nd_ns", NestedKind::NdNs),
    ("nd_na", NestedKind::NdNa),
    ("nd_na_router", NestedKind::NdNaRouter),
    ("icmp4", NestedKind::Icmp4),
    ("icmp4_error", NestedKind::Icmp4Error),
    ("icmp6", NestedKind::Icmp6),
    ("icmp6_error", NestedKind::Icmp6Error),
    ("tcp_reset", NestedKind::TcpReset),
    ("sctp_abort", NestedKind::SctpAbort),
    ("reject", NestedKind::Reject),
    ("clone", NestedKind::Clone),
];

impl NestedKind {
    /// The action's name.
    pub fn name(self) -> &'static str {
        NESTED
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }
}

/// A value of a DHCP or RA option.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OptValue {
    /// A constant.
    Const(Constant),
    /// A string.
    Str(String),
    /// `{a, b, ...}`
    Set(Vec<OptValue>),
    /// A field.
    Field(FieldRef),
}

/// The functions whose result is stored in a field: `R = f(...)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultFn {
    /// `lookup_arp(P, A, M)`
    LookupArp {
        /// Port.
        port: FieldRef,
        /// IPv4 address.
        ip: FieldRef,
        /// Ethernet address.
        mac: FieldRef,
    },
    /// `lookup_arp_ip(P, A)`
    LookupArpIp {
        /// Port.
        port: FieldRef,
        /// IPv4 address.
        ip: FieldRef,
    },
    /// `lookup_nd(P, A, M)`
    LookupNd {
        /// Port.
        port: FieldRef,
        /// IPv6 address.
        ip: FieldRef,
        /// Ethernet address.
        mac: FieldRef,
    },
    /// `lookup_nd_ip(P, A)`
    LookupNdIp {
        /// Port.
        port: FieldRef,
        /// IPv6 address.
        ip: FieldRef,
    },
    /// `get_fdb(M)`: the port learnt for a MAC.
    GetFdb {
        /// Ethernet address.
        mac: FieldRef,
    },
    /// `lookup_fdb(P, M)`
    LookupFdb {
        /// Port.
        port: FieldRef,
        /// Ethernet address.
        mac: FieldRef,
    },
    /// `put_dhcp_opts(...)` or `put_dhcpv6_opts(...)`.
    PutDhcpOpts {
        /// DHCPv6.
        v6: bool,
        /// The options, in order.
        opts: Vec<(String, OptValue)>,
    },
    /// `put_nd_ra_opts(...)`
    PutNdRaOpts {
        /// The options, in order.
        opts: Vec<(String, OptValue)>,
    },
    /// `dns_lookup()`
    DnsLookup,
    /// `chk_lb_hairpin()`
    ChkLbHairpin,
    /// `chk_lb_hairpin_reply()`
    ChkLbHairpinReply,
    /// `check_in_port_sec()`
    CheckInPortSec,
    /// `check_out_port_sec()`
    CheckOutPortSec,
    /// `check_pkt_larger(L)`
    CheckPktLarger {
        /// Length in bytes.
        len: u32,
    },
    /// `chk_ecmp_nh_mac()`
    ChkEcmpNhMac,
    /// `chk_ecmp_nh()`
    ChkEcmpNh,
    /// `chk_lb_aff()`
    ChkLbAff,
}

pub(crate) const NO_ARG_FNS: &[(&str, ResultFn)] = &[
    ("dns_lookup", ResultFn::DnsLookup),
    ("chk_lb_hairpin", ResultFn::ChkLbHairpin),
    ("chk_lb_hairpin_reply", ResultFn::ChkLbHairpinReply),
    ("check_in_port_sec", ResultFn::CheckInPortSec),
    ("check_out_port_sec", ResultFn::CheckOutPortSec),
    ("chk_ecmp_nh_mac", ResultFn::ChkEcmpNhMac),
    ("chk_ecmp_nh", ResultFn::ChkEcmpNh),
    ("chk_lb_aff", ResultFn::ChkLbAff),
];

pub(crate) const RESULT_FNS: &[&str] = &[
    "lookup_arp",
    "lookup_arp_ip",
    "lookup_nd",
    "lookup_nd_ip",
    "get_fdb",
    "lookup_fdb",
    "put_dhcp_opts",
    "put_dhcpv6_opts",
    "put_nd_ra_opts",
    "check_pkt_larger",
    "select",
];

impl ResultFn {
    /// The function's name.
    pub fn name(&self) -> &'static str {
        match self {
            ResultFn::LookupArp { .. } => "lookup_arp",
            ResultFn::LookupArpIp { .. } => "lookup_arp_ip",
            ResultFn::LookupNd { .. } => "lookup_nd",
            ResultFn::LookupNdIp { .. } => "lookup_nd_ip",
            ResultFn::GetFdb { .. } => "get_fdb",
            ResultFn::LookupFdb { .. } => "lookup_fdb",
            ResultFn::PutDhcpOpts { v6: false, .. } => "put_dhcp_opts",
            ResultFn::PutDhcpOpts { v6: true, .. } => "put_dhcpv6_opts",
            ResultFn::PutNdRaOpts { .. } => "put_nd_ra_opts",
            ResultFn::CheckPktLarger { .. } => "check_pkt_larger",
            other => NO_ARG_FNS
                .iter()
                .find(|(_, f)| f == other)
                .map_or("?", |(n, _)| n),
        }
    }
}

/// `log(...)` arguments.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LogArgs {
    /// `name="..."`
    pub name: Option<String>,
    /// `severity=alert|warning|notice|info|debug`
    pub severity: Option<String>,
    /// `verdict=allow|drop|reject`
    pub verdict: Option<String>,
    /// `meter="..."`
    pub meter: Option<String>,
}

/// One action.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// `next;`, `next(N);`, `next(pipeline=P, table=N);`
    Next {
        /// Arguments.
        args: NextArgs,
        /// Span.
        span: Span,
    },
    /// `output;`
    Output {
        /// Span.
        span: Span,
    },
    /// `drop;`, which is only valid as the whole of an action list.
    Drop {
        /// Span.
        span: Span,
    },
    /// `field = constant;` or `field = "string";`
    Assign {
        /// Destination.
        dst: FieldRef,
        /// Value.
        value: Value,
        /// Span.
        span: Span,
    },
    /// `field1 = field2;`
    Move {
        /// Destination.
        dst: FieldRef,
        /// Source.
        src: FieldRef,
        /// Span.
        span: Span,
    },
    /// `field1 <-> field2;`
    Exchange {
        /// One side.
        a: FieldRef,
        /// The other.
        b: FieldRef,
        /// Span.
        span: Span,
    },
    /// `push(field);`
    Push {
        /// Field.
        field: FieldRef,
        /// Span.
        span: Span,
    },
    /// `pop(field);`
    Pop {
        /// Field.
        field: FieldRef,
        /// Span.
        span: Span,
    },
    /// `ip.ttl--;`
    DecTtl {
        /// Span.
        span: Span,
    },
    /// `ct_next;`
    CtNext {
        /// Span.
        span: Span,
    },
    /// `ct_commit` in any of its spellings.
    CtCommit {
        /// Form and arguments.
        args: CtCommit,
        /// Span.
        span: Span,
    },
    /// `ct_dnat`, `ct_snat`, `ct_dnat_in_czone`, `ct_snat_in_czone`, with or without a target.
    CtNat {
        /// Which.
        kind: NatKind,
        /// Target address.
        target: Option<NatTarget>,
        /// Span.
        span: Span,
    },
    /// `ct_clear;`
    CtClear {
        /// Span.
        span: Span,
    },
    /// `ct_snat_to_vip;`
    CtSnatToVip {
        /// Span.
        span: Span,
    },
    /// `ct_commit_nat;`
    CtCommitNat {
        /// Span.
        span: Span,
    },
    /// `ct_lb` (`mark: false`) or `ct_lb_mark` (`mark: true`).
    CtLb {
        /// `ct_lb_mark`.
        mark: bool,
        /// Arguments.
        args: Option<CtLbArgs>,
        /// Span.
        span: Span,
    },
    /// `arp {}`, `icmp4 {}`, `reject {}`, `clone {}` ...
    Nested {
        /// Which.
        kind: NestedKind,
        /// The nested actions.
        body: Vec<Action>,
        /// Span.
        span: Span,
    },
    /// `get_arp(P, A);`
    GetArp {
        /// Port.
        port: FieldRef,
        /// Address.
        ip: FieldRef,
        /// Span.
        span: Span,
    },
    /// `put_arp(P, A, M);`
    PutArp {
        /// Port.
        port: FieldRef,
        /// Address.
        ip: FieldRef,
        /// MAC.
        mac: FieldRef,
        /// Span.
        span: Span,
    },
    /// `get_nd(P, A);`
    GetNd {
        /// Port.
        port: FieldRef,
        /// Address.
        ip: FieldRef,
        /// Span.
        span: Span,
    },
    /// `put_nd(P, A, M);`
    PutNd {
        /// Port.
        port: FieldRef,
        /// Address.
        ip: FieldRef,
        /// MAC.
        mac: FieldRef,
        /// Span.
        span: Span,
    },
    /// `put_fdb(P, M);`
    PutFdb {
        /// Port.
        port: FieldRef,
        /// MAC.
        mac: FieldRef,
        /// Span.
        span: Span,
    },
    /// `R = f(...);`
    Result {
        /// Where the result goes.
        dst: FieldRef,
        /// The function.
        func: ResultFn,
        /// Span.
        span: Span,
    },
    /// `R = select(N1[=W1], N2[=W2], ...);`
    Select {
        /// Where the result goes.
        dst: FieldRef,
        /// (value, weight).
        choices: Vec<(u16, Option<u16>)>,
        /// Span.
        span: Span,
    },
    /// `set_queue(N);`
    SetQueue {
        /// Queue number.
        queue: u16,
        /// Span.
        span: Span,
    },
    /// `set_meter(rate[, burst]);`
    SetMeter {
        /// kbps.
        rate: u64,
        /// kbps.
        burst: Option<u64>,
        /// Span.
        span: Span,
    },
    /// `log(...);`
    Log {
        /// Arguments.
        args: LogArgs,
        /// Span.
        span: Span,
    },
    /// `fwd_group(liveness=B, childports="p1", "p2");`
    FwdGroup {
        /// Liveness.
        liveness: Option<bool>,
        /// Child ports.
        ports: Vec<String>,
        /// Span.
        span: Span,
    },
    /// `trigger_event(event = "...", key = "...", ...);`
    TriggerEvent {
        /// (key, value) pairs in order, `event` first.
        args: Vec<(String, String)>,
        /// Span.
        span: Span,
    },
    /// `igmp;`
    Igmp {
        /// Span.
        span: Span,
    },
    /// `handle_bfd_msg();`
    HandleBfdMsg {
        /// Span.
        span: Span,
    },
    /// `handle_dhcpv6_reply;`
    HandleDhcpv6Reply {
        /// Span.
        span: Span,
    },
    /// `bind_vport("V", P);`
    BindVport {
        /// The virtual port.
        vport: String,
        /// The parent port field.
        parent: FieldRef,
        /// Span.
        span: Span,
    },
    /// `handle_svc_check(P);`
    HandleSvcCheck {
        /// Port.
        port: FieldRef,
        /// Span.
        span: Span,
    },
    /// `commit_ecmp_nh(ipv6 = B, proto = P);`
    CommitEcmpNh {
        /// IPv6.
        ipv6: bool,
        /// `tcp`, `udp` or `sctp`.
        proto: String,
        /// Span.
        span: Span,
    },
    /// `commit_lb_aff(vip = "...", backend = "...", [proto = P,] timeout = N);` (`proto`
    /// exactly when the VIP has a port; empty otherwise).
    CommitLbAff {
        /// VIP `ip:port`.
        vip: String,
        /// Backend `ip:port`.
        backend: String,
        /// Protocol.
        proto: String,
        /// Seconds.
        timeout: u32,
        /// Span.
        span: Span,
    },
    /// `sample(probability=N, collector_set=N, obs_domain=N, obs_point=N);`
    Sample {
        /// (key, value) in order.
        args: Vec<(String, Constant)>,
        /// Span.
        span: Span,
    },
}

/// Constructors for the actions northd builds most, without spans.
impl Action {
    /// `next;`
    pub fn next() -> Action {
        Action::Next {
            args: NextArgs::Plain,
            span: Span::default(),
        }
    }

    /// `next(pipeline=P, table=N);`
    pub fn next_table(pipeline: Option<Pipeline>, table: u32) -> Action {
        Action::Next {
            args: NextArgs::Named {
                pipeline,
                table: Some(table),
            },
            span: Span::default(),
        }
    }

    /// `output;`
    pub fn output() -> Action {
        Action::Output {
            span: Span::default(),
        }
    }

    /// `drop;` (valid only as the whole list).
    pub fn drop() -> Action {
        Action::Drop {
            span: Span::default(),
        }
    }

    /// `dst = value;`
    pub fn assign(dst: FieldRef, value: Value) -> Action {
        Action::Assign {
            dst,
            value,
            span: Span::default(),
        }
    }

    /// `dst = src;`
    pub fn move_field(dst: FieldRef, src: FieldRef) -> Action {
        Action::Move {
            dst,
            src,
            span: Span::default(),
        }
    }

    /// `ct_commit { body };`
    pub fn ct_commit_block(body: Vec<Action>) -> Action {
        Action::CtCommit {
            args: CtCommit::Block(body),
            span: Span::default(),
        }
    }

    /// `ct_next;`
    pub fn ct_next() -> Action {
        Action::CtNext {
            span: Span::default(),
        }
    }

    /// A nested action: `kind { body };`
    pub fn nested(kind: NestedKind, body: Vec<Action>) -> Action {
        Action::Nested {
            kind,
            body,
            span: Span::default(),
        }
    }
}

/// Every action keyword, for "did you mean" help.
pub const ACTION_NAMES: &[&str] = &[
    "next",
    "output",
    "drop",
    "push",
    "pop",
    "ct_next",
    "ct_commit",
    "ct_dnat",
    "ct_snat",
    "ct_dnat_in_czone",
    "ct_snat_in_czone",
    "ct_clear",
    "ct_snat_to_vip",
    "ct_commit_nat",
    "ct_lb",
    "ct_lb_mark",
    "arp",
    "nd_ns",
    "nd_na",
    "nd_na_router",
    "icmp4",
    "icmp4_error",
    "icmp6",
    "icmp6_error",
    "tcp_reset",
    "sctp_abort",
    "reject",
    "clone",
    "get_arp",
    "put_arp",
    "get_nd",
    "put_nd",
    "put_fdb",
    "set_queue",
    "set_meter",
    "log",
    "fwd_group",
    "trigger_event",
    "igmp",
    "handle_dhcpv6_reply",
    "handle_bfd_msg",
    "bind_vport",
    "handle_svc_check",
    "commit_ecmp_nh",
    "commit_lb_aff",
    "sample",
];
