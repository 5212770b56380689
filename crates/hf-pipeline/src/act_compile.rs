//! Lowering one flow: its normalised match conjunctions into classifier rules
//! ([`compile_conj`]) and its actions into [`CAct`]s in the action arena ([`ActCompiler`]).
//!
//! It resolves field references to bit ranges and port names to keys (through the caller's
//! lookup), and names every action it cannot lower (an [`UNSUPPORTED`] message, which
//! [`crate::Program::compile`] reports as a flow error). It does not normalise matches
//! (hf-expr's normaliser does) nor decide which flows or datapaths are compiled
//! (`compile.rs` does).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::sync::Arc;

use hf_conntrack::{Masked, NatRange};
use hf_expr::actions::{CtCommit, NextArgs, Pipeline, ResultFn};
use hf_expr::constant::Format;
use hf_expr::normalize::Atom;
use hf_expr::{Action, Constant, FieldRef, SymbolTable, Value};

use crate::classifier::{Conj, Test};
use crate::packet::{Bits, slot};
use crate::program::{CAct, EGRESS, INGRESS};

/// A normalised conjunction as a classifier rule; `None` when it can never match.
pub(crate) fn compile_conj(
    c: &hf_expr::normalize::Conj,
    port_key: &dyn Fn(&str) -> Option<u32>,
    resident: &dyn Fn(&str) -> bool,
) -> Option<Conj> {
    let mut masked: Vec<(u8, u128, u128)> = Vec::new();
    let mut residual = Vec::new();
    let mut add = |field: u8, value: u128, mask: u128| -> bool {
        match masked.iter_mut().find(|(f, _, _)| *f == field) {
            Some((_, m, v)) => {
                // Overlapping bits must agree, or the conjunction is empty.
                if (*v ^ value) & *m & mask != 0 {
                    return false;
                }
                *v = (*v & *m) | (value & mask);
                *m |= mask;
                true
            }
            None => {
                masked.push((field, mask, value & mask));
                true
            }
        }
    };
    for a in &c.atoms {
        match atom_test(a, port_key, resident) {
            Test::Bits { field, value, mask } => {
                if mask != 0 && !add(field, value, mask) {
                    return None;
                }
            }
            Test::Port {
                slot,
                key,
                positive: true,
            } => {
                if !add(slot, u128::from(key), u128::from(u32::MAX)) {
                    return None;
                }
            }
            Test::Const(false) => return None,
            Test::Const(true) => {}
            t => residual.push(t),
        }
    }
    masked.sort_by_key(|(f, _, _)| *f);
    let dims = c
        .dims
        .iter()
        .map(|d| d.iter().map(|a| atom_test(a, port_key, resident)).collect())
        .collect();
    Some(Conj {
        masked,
        residual,
        dims,
    })
}

fn atom_test(
    a: &Atom,
    port_key: &dyn Fn(&str) -> Option<u32>,
    resident: &dyn Fn(&str) -> bool,
) -> Test {
    match a {
        Atom::Bits { field, value, mask } => Test::Bits {
            field: field.0 as u8,
            value: *value,
            mask: *mask,
        },
        Atom::Str {
            field,
            value,
            positive,
        } => match port_key(value) {
            Some(key) => Test::Port {
                slot: field.0 as u8,
                key,
                positive: *positive,
            },
            // An unknown port: equality never holds, inequality for every port.
            None => Test::Const(!positive),
        },
        Atom::Resident { port, positive } => Test::Const(resident(port) == *positive),
        // A set whose contents are unknown is empty (as in hf-expr's reference evaluator).
        Atom::Set { positive, .. } => Test::Const(!positive),
        _ => Test::Const(false),
    }
}

/// Prefix of the action compiler's message for an action the pipeline does not execute.
pub(crate) const UNSUPPORTED: &str = "unsupported action: ";

pub(crate) struct ActCompiler<'a> {
    symtab: &'static SymbolTable,
    port_key: &'a dyn Fn(&str) -> Option<u32>,
    pipe: u8,
    table: u8,
    /// The datapath's tunnel key (what [`CAct`]s' `dp` fields hold).
    dp: u32,
    /// The datapath is a switch (`chk_lb_aff` loads IPv6 backends into `xxreg0` there).
    pub(crate) switch: bool,
    arena: &'a mut Vec<CAct>,
    /// Counters already in the program; this flow's are numbered from here.
    pub(crate) counter_base: u32,
    /// Names of this flow's counted actions, in counter order.
    pub(crate) counted: Vec<&'static str>,
}

fn const_ip(c: &Constant) -> IpAddr {
    match c.format {
        Format::Ipv6 => IpAddr::V6(Ipv6Addr::from(c.value)),
        _ => IpAddr::V4(Ipv4Addr::from(c.value as u32)),
    }
}

impl ActCompiler<'_> {
    pub(crate) fn new<'a>(
        port_key: &'a dyn Fn(&str) -> Option<u32>,
        pipe: u8,
        table: u8,
        dp: u32,
        arena: &'a mut Vec<CAct>,
    ) -> ActCompiler<'a> {
        ActCompiler {
            symtab: SymbolTable::shared(),
            port_key,
            pipe,
            table,
            dp,
            switch: false,
            arena,
            counter_base: 0,
            counted: Vec::new(),
        }
    }

    fn bits(&self, f: &FieldRef) -> Result<Bits, String> {
        let r = hf_expr::typecheck::resolve(self.symtab, f).map_err(|e| e.to_string())?;
        match r.bits {
            Some((fid, lo, hi)) if r.symbol.string => {
                let _ = (lo, hi);
                Ok(Bits {
                    field: fid.0 as u8,
                    lo: 0,
                    width: 32,
                })
            }
            Some((fid, lo, hi)) if hi >= lo && hi < 128 => Ok(Bits {
                field: fid.0 as u8,
                lo: lo as u8,
                width: (hi - lo + 1).min(128) as u8,
            }),
            _ => Err(format!("`{}` is not a field", f.name)),
        }
    }

    pub(crate) fn list(&mut self, actions: &[Action]) -> Result<Range<u32>, String> {
        let mut out = Vec::with_capacity(actions.len());
        // `select` continues in the next table (OVN's group buckets resubmit there); the
        // interpreter does that (`interp`), so nothing is appended here.
        for a in actions {
            if let Some(halt) = punt_kind(a) {
                out.push(CAct::CtrlPunt { halt });
            }
            out.push(self.one(a)?);
        }
        let start = self.arena.len() as u32;
        self.arena.extend(out);
        Ok(start..self.arena.len() as u32)
    }

    fn one(&mut self, a: &Action) -> Result<CAct, String> {
        Ok(match a {
            Action::Next { args, .. } => {
                let (pipeline, table) = match *args {
                    NextArgs::Plain => (self.pipe, u32::from(self.table) + 1),
                    NextArgs::Table(t) => (self.pipe, t),
                    NextArgs::Named { pipeline, table } => (
                        match pipeline {
                            Some(Pipeline::Egress) => EGRESS,
                            Some(_) => INGRESS,
                            None => self.pipe,
                        },
                        table.unwrap_or(u32::from(self.table) + 1),
                    ),
                    _ => (self.pipe, u32::from(self.table) + 1),
                };
                CAct::Next {
                    pipeline,
                    table: table.min(255) as u8,
                }
            }
            Action::Output { .. } => CAct::Output,
            Action::Drop { .. } => CAct::Drop,
            Action::Assign { dst, value, .. } => {
                let b = self.bits(dst)?;
                let v = match value {
                    Value::Const(c) => c.value,
                    Value::Str(s) => u128::from((self.port_key)(s).unwrap_or(0)),
                    _ => return Err("sets cannot be assigned".into()),
                };
                CAct::Set {
                    field: b.field,
                    value: v.checked_shl(u32::from(b.lo)).unwrap_or(0) & b.mask(),
                    mask: b.mask(),
                }
            }
            Action::Move { dst, src, .. } => CAct::Move {
                dst: self.bits(dst)?,
                src: self.bits(src)?,
            },
            Action::Exchange { a, b, .. } => CAct::Exchange {
                a: self.bits(a)?,
                b: self.bits(b)?,
            },
            Action::Push { field, .. } => CAct::Push(self.bits(field)?),
            Action::Pop { field, .. } => CAct::Pop(self.bits(field)?),
            Action::DecTtl { .. } => CAct::DecTtl,
            Action::CtNext { .. } => CAct::CtNext,
            Action::CtCommit { args, .. } => {
                let (mut mark, mut label) = (None::<Masked<u32>>, None::<Masked<u128>>);
                let mut moves = Vec::new();
                match args {
                    CtCommit::Bare => {}
                    CtCommit::Legacy { mark: m, label: l } => {
                        mark = m.map(|c| Masked {
                            value: c.value as u32,
                            mask: c.mask_bits(32) as u32,
                        });
                        label = l.map(|c| Masked {
                            value: c.value,
                            mask: c.mask_bits(128),
                        });
                    }
                    CtCommit::Block(body) => {
                        for b in body {
                            // `ct_label.label = reg3;`, `ct_label.ecmp_reply_eth = eth.src;`:
                            // the value is read from the packet when the commit runs.
                            if let Action::Move { dst, src, .. } = b {
                                let (d, s) = (self.bits(dst)?, self.bits(src)?);
                                if !matches!(usize::from(d.field), slot::CT_MARK | slot::CT_LABEL) {
                                    return Err("ct_commit { } sets ct_mark or ct_label".into());
                                }
                                moves.push((d, s));
                                continue;
                            }
                            let Action::Assign {
                                dst,
                                value: Value::Const(c),
                                ..
                            } = b
                            else {
                                return Err(
                                    "ct_commit { } takes assignments to ct_mark and ct_label"
                                        .into(),
                                );
                            };
                            let bits = self.bits(dst)?;
                            let v = c.value.checked_shl(u32::from(bits.lo)).unwrap_or(0);
                            match usize::from(bits.field) {
                                slot::CT_MARK => {
                                    let m = mark.get_or_insert(Masked { value: 0, mask: 0 });
                                    m.value |= (v & bits.mask()) as u32;
                                    m.mask |= bits.mask() as u32;
                                }
                                slot::CT_LABEL => {
                                    let m = label.get_or_insert(Masked { value: 0, mask: 0 });
                                    m.value |= v & bits.mask();
                                    m.mask |= bits.mask();
                                }
                                _ => return Err("ct_commit { } sets ct_mark or ct_label".into()),
                            }
                        }
                    }
                    _ => {}
                }
                CAct::CtCommit {
                    mark,
                    label: label.map(Box::new),
                    moves: moves.into(),
                }
            }
            Action::CtNat { kind, target, .. } => CAct::CtNat {
                kind: *kind,
                target: target.as_ref().map(|t| {
                    let ip = const_ip(&t.addr);
                    let (lo, hi) = t.ports.unwrap_or((0, 0));
                    NatRange {
                        addr_min: ip,
                        addr_max: ip,
                        port_min: lo,
                        port_max: hi.max(lo),
                    }
                }),
            },
            Action::CtClear { .. } => CAct::CtClear,
            Action::CtCommitNat { .. } => CAct::CtCommitNat,
            Action::CtLb { mark, args, .. } => {
                let hash = match args.as_ref().and_then(|a| a.hash_fields.as_deref()) {
                    Some(h) => hash_slots(h)?,
                    None => Vec::new(),
                };
                let flag = match args.as_ref().and_then(|a| a.flag.as_deref()) {
                    None => 0,
                    Some("skip_snat") => 4,
                    Some("force_snat") => 8,
                    Some(other) => return Err(format!("ct_lb: unknown flag `{other}`")),
                };
                let mut backends = Vec::new();
                for b in args.iter().flat_map(|a| &a.backends) {
                    match b {
                        hf_expr::actions::LbBackend::Addr(b) => {
                            backends.push((const_ip(&b.ip), b.port.unwrap_or(0)))
                        }
                        other => {
                            return Err(format!(
                                "ct_lb: backend `{}` is a template variable the chassis did not expand",
                                hf_expr::printer::actions_to_string(&[Action::CtLb {
                                    mark: *mark,
                                    args: Some(hf_expr::actions::CtLbArgs {
                                        backends: vec![other.clone()],
                                        hash_fields: None,
                                        flag: None,
                                        legacy: false,
                                    }),
                                    span: hf_expr::Span::default(),
                                }])
                            ));
                        }
                    }
                }
                CAct::CtLb {
                    mark: *mark,
                    backends: backends.into(),
                    hash: hash.into(),
                    flag,
                }
            }
            Action::Nested { kind, body, .. } => {
                let body = self.list(body)?;
                CAct::Nested { kind: *kind, body }
            }
            Action::GetArp { port, ip, .. } => CAct::GetNeigh {
                dp: self.dp,
                v6: false,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
            },
            Action::GetNd { port, ip, .. } => CAct::GetNeigh {
                dp: self.dp,
                v6: true,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
            },
            Action::PutArp { port, ip, mac, .. } => CAct::PutNeigh {
                dp: self.dp,
                v6: false,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
                mac: self.bits(mac)?,
            },
            Action::PutNd { port, ip, mac, .. } => CAct::PutNeigh {
                dp: self.dp,
                v6: true,
                port: self.bits(port)?,
                ip: self.bits(ip)?,
                mac: self.bits(mac)?,
            },
            Action::Result { dst, func, .. } => {
                let dst = self.bits(dst)?;
                match func {
                    ResultFn::LookupArp { port, ip, mac }
                    | ResultFn::LookupNd { port, ip, mac } => CAct::LookupNeigh {
                        dp: self.dp,
                        v6: matches!(func, ResultFn::LookupNd { .. }),
                        dst,
                        port: self.bits(port)?,
                        ip: self.bits(ip)?,
                        mac: Some(self.bits(mac)?),
                    },
                    ResultFn::LookupArpIp { port, ip } | ResultFn::LookupNdIp { port, ip } => {
                        CAct::LookupNeigh {
                            dp: self.dp,
                            v6: matches!(func, ResultFn::LookupNdIp { .. }),
                            dst,
                            port: self.bits(port)?,
                            ip: self.bits(ip)?,
                            mac: None,
                        }
                    }
                    ResultFn::ChkLbHairpin => CAct::ChkLbHairpin {
                        dst,
                        reply: false,
                        dp: self.dp,
                    },
                    ResultFn::ChkLbHairpinReply => CAct::ChkLbHairpin {
                        dst,
                        reply: true,
                        dp: self.dp,
                    },
                    ResultFn::CheckPktLarger { len } => CAct::CheckPktLarger { dst, len: *len },
                    ResultFn::CheckInPortSec | ResultFn::CheckOutPortSec => CAct::PortSec {
                        dst,
                        out: matches!(func, ResultFn::CheckOutPortSec),
                        dp: self.dp,
                    },
                    ResultFn::LookupFdb { port, mac } => CAct::LookupFdb {
                        dp: self.dp,
                        dst,
                        port: self.bits(port)?,
                        mac: self.bits(mac)?,
                    },
                    ResultFn::GetFdb { mac } => CAct::GetFdb {
                        dp: self.dp,
                        dst,
                        mac: self.bits(mac)?,
                    },
                    ResultFn::ChkEcmpNh | ResultFn::ChkEcmpNhMac => CAct::ChkEcmpNh {
                        dp: self.dp,
                        dst,
                        mac: matches!(func, ResultFn::ChkEcmpNhMac),
                    },
                    ResultFn::ChkLbAff => CAct::ChkLbAff {
                        dp: self.dp,
                        dst,
                        switch: self.switch,
                    },
                    ResultFn::PutDhcpOpts { .. }
                    | ResultFn::PutNdRaOpts { .. }
                    | ResultFn::DnsLookup => {
                        let req = crate::packet_in::Request::compile(func, self.dp)?;
                        CAct::PacketIn {
                            dst,
                            fallback: u8::from(!matches!(func, ResultFn::DnsLookup)),
                            req: Box::new(req),
                            name: func.name(),
                            counter: self.count(func.name()),
                        }
                    }
                    other => {
                        return Err(format!("{UNSUPPORTED}{}", other.name()));
                    }
                }
            }
            Action::Select { dst, choices, .. } => CAct::Select {
                dst: self.bits(dst)?,
                choices: choices
                    .iter()
                    .map(|(v, w)| (*v, w.unwrap_or(100).max(1)))
                    .collect(),
            },
            Action::PutFdb { port, mac, .. } => CAct::PutFdb {
                dp: self.dp,
                port: self.bits(port)?,
                mac: self.bits(mac)?,
            },
            Action::SetQueue { .. } => self.counted_act("set_queue"),
            Action::SetMeter { rate, burst, .. } => CAct::SetMeter {
                counter: self.count("set_meter"),
                rate: *rate,
                burst: burst.unwrap_or(0),
            },
            Action::Log { args, .. } => CAct::Log {
                counter: self.count("log"),
                name: args.name.as_deref().map(Arc::from),
                severity: severity(args.severity.as_deref())?,
                verdict: verdict(args.verdict.as_deref())?,
                meter: args.meter.as_deref().map(Arc::from),
                egress: self.pipe == EGRESS,
            },
            Action::Sample { .. } => self.counted_act("sample"),
            Action::TriggerEvent { .. } => self.counted_act("trigger_event"),
            Action::Igmp { .. } => CAct::Igmp {
                dp: self.dp,
                counter: self.count("igmp"),
            },
            Action::HandleSvcCheck { port, .. } => CAct::SvcCheck {
                dp: self.dp,
                port: self.bits(port)?,
                counter: self.count("handle_svc_check"),
            },
            Action::HandleDhcpv6Reply { .. } => self.counted_act("handle_dhcpv6_reply"),
            Action::HandleBfdMsg { .. } => CAct::Bfd {
                dp: self.dp,
                counter: self.count("handle_bfd_msg"),
            },
            Action::CtSnatToVip { .. } => CAct::CtSnatToVip { dp: self.dp },
            Action::CommitEcmpNh { ipv6, proto, .. } => CAct::CommitEcmpNh {
                dp: self.dp,
                v6: *ipv6,
                proto: proto_number(proto)?,
            },
            Action::CommitLbAff {
                vip,
                backend,
                proto,
                timeout,
                ..
            } => {
                let (vip, vip_port) = ip_port(vip)?;
                let (backend, backend_port) = ip_port(backend)?;
                if vip.is_ipv4() != backend.is_ipv4() {
                    return Err("commit_lb_aff: VIP and backend of different families".into());
                }
                CAct::CommitLbAff {
                    dp: self.dp,
                    vip,
                    vip_port,
                    backend,
                    backend_port,
                    // OVN omits `proto=` for a VIP without a port.
                    proto: if proto.is_empty() {
                        0
                    } else {
                        proto_number(proto)?
                    },
                    timeout: *timeout,
                }
            }
            Action::BindVport { vport, parent, .. } => CAct::BindVport {
                dp: self.dp,
                vport: (self.port_key)(vport)
                    .ok_or_else(|| format!("bind_vport: unknown port `{vport}`"))?,
                parent: self.bits(parent)?,
                counter: self.count("bind_vport"),
            },
            Action::FwdGroup { ports, .. } => {
                let keys = ports
                    .iter()
                    .map(|p| {
                        (self.port_key)(p)
                            .ok_or_else(|| format!("fwd_group: unknown child port `{p}`"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                if keys.is_empty() {
                    return Err("fwd_group without child ports".into());
                }
                CAct::FwdGroup { ports: keys }
            }
            other => {
                return Err(format!(
                    "{UNSUPPORTED}{}",
                    hf_expr::printer::actions_to_string(std::slice::from_ref(other))
                ));
            }
        })
    }

    /// Registers a counter for this flow.
    fn count(&mut self, name: &'static str) -> u32 {
        self.counted.push(name);
        self.counter_base + self.counted.len() as u32 - 1
    }

    fn counted_act(&mut self, name: &'static str) -> CAct {
        CAct::Count {
            name,
            counter: self.count(name),
        }
    }
}

/// Whether `a` is a controller action in OVN (ovn-controller sends the packet to pinctrl),
/// and if so whether the packet continues only through the controller (`true`: a metered-out
/// packet is dropped). `log` is metered by its own meter (see [`CAct::Log`]).
fn punt_kind(a: &Action) -> Option<bool> {
    match a {
        Action::Nested { kind, .. } if *kind != hf_expr::actions::NestedKind::Clone => Some(false),
        Action::PutArp { .. }
        | Action::PutNd { .. }
        | Action::TriggerEvent { .. }
        | Action::Igmp { .. }
        | Action::HandleBfdMsg { .. }
        | Action::HandleSvcCheck { .. }
        | Action::HandleDhcpv6Reply { .. }
        | Action::BindVport { .. } => Some(false),
        Action::Result {
            func: ResultFn::PutDhcpOpts { .. } | ResultFn::PutNdRaOpts { .. } | ResultFn::DnsLookup,
            ..
        } => Some(true),
        _ => None,
    }
}

/// `log`'s `severity` (default `info`, as ovn-northd writes it).
fn severity(s: Option<&str>) -> Result<&'static str, String> {
    Ok(match s.unwrap_or("info") {
        "alert" => "alert",
        "warning" => "warning",
        "notice" => "notice",
        "info" => "info",
        "debug" => "debug",
        other => return Err(format!("log: unknown severity `{other}`")),
    })
}

/// `log`'s `verdict` (`allow` when absent, as ovn-controller's encoding defaults it).
fn verdict(v: Option<&str>) -> Result<&'static str, String> {
    Ok(match v.unwrap_or("allow") {
        "allow" => "allow",
        "drop" => "drop",
        "reject" => "reject",
        other => return Err(format!("log: unknown verdict `{other}`")),
    })
}

/// `tcp`/`udp`/`sctp` (as `commit_ecmp_nh` and `commit_lb_aff` spell them) → IP protocol.
fn proto_number(p: &str) -> Result<u8, String> {
    match p {
        "tcp" | "6" => Ok(6),
        "udp" | "17" => Ok(17),
        "sctp" | "132" => Ok(132),
        other => Err(format!("unknown protocol `{other}`")),
    }
}

/// `IP`, `IP:PORT` or `[IP6]:PORT`.
fn ip_port(s: &str) -> Result<(IpAddr, u16), String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip, 0));
    }
    let bad = || format!("`{s}` is not IP[:PORT]");
    let (ip, port) = match s.strip_prefix('[') {
        Some(rest) => {
            let (ip, port) = rest.split_once("]:").ok_or_else(bad)?;
            (ip, port)
        }
        None => s.rsplit_once(':').ok_or_else(bad)?,
    };
    Ok((
        ip.parse().map_err(|_| bad())?,
        port.parse().map_err(|_| bad())?,
    ))
}

/// The slots of an OpenFlow `fields(...)` list as `ct_lb_mark(...; hash_fields="...")` gives it.
fn hash_slots(list: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for f in list.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let slots: &[usize] = match f {
            "eth_src" => &[slot::ETH_SRC],
            "eth_dst" => &[slot::ETH_DST],
            "ip_src" => &[slot::IP4_SRC, slot::IP6_SRC],
            "ip_dst" => &[slot::IP4_DST, slot::IP6_DST],
            "ipv6_src" => &[slot::IP6_SRC],
            "ipv6_dst" => &[slot::IP6_DST],
            "nw_src" => &[slot::IP4_SRC],
            "nw_dst" => &[slot::IP4_DST],
            "ip_proto" | "nw_proto" => &[slot::IP_PROTO],
            "tp_src" => &[slot::TCP_SRC, slot::UDP_SRC, slot::SCTP_SRC],
            "tp_dst" => &[slot::TCP_DST, slot::UDP_DST, slot::SCTP_DST],
            "tcp_src" => &[slot::TCP_SRC],
            "tcp_dst" => &[slot::TCP_DST],
            "udp_src" => &[slot::UDP_SRC],
            "udp_dst" => &[slot::UDP_DST],
            "sctp_src" => &[slot::SCTP_SRC],
            "sctp_dst" => &[slot::SCTP_DST],
            other => return Err(format!("hash_fields: unknown field `{other}`")),
        };
        out.extend(slots.iter().map(|&s| s as u8));
    }
    if out.is_empty() {
        return Err("hash_fields is empty".into());
    }
    Ok(out)
}
