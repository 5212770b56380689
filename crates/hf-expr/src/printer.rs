//! Printing: every syntax tree prints to text that parses back to an equal tree.

use crate::actions::{
    Action, CtCommit, CtLbArgs, LbBackend, NextArgs, OptValue, Pipeline, ResultFn, TemplatePort,
};
use crate::ast::{Expr, FieldRef, Rhs, Subscript, Term, Value};
use crate::constant::Format;
use std::fmt::{self, Display, Write};

/// Writes `s` as a JSON string.
pub fn write_str_lit(f: &mut impl Write, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

impl Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        match self.sub {
            None => Ok(()),
            Some(Subscript::Bit(b)) => write!(f, "[{b}]"),
            Some(Subscript::Range(l, h)) => write!(f, "[{l}..{h}]"),
        }
    }
}

impl Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Const(c) => write!(f, "{c}"),
            Value::Str(s) => write_str_lit(f, s),
            Value::AddrSet(s) => write!(f, "${s}"),
            Value::PortGroup(s) => write!(f, "@{s}"),
            Value::Template(s) => write!(f, "^{s}"),
        }
    }
}

impl Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl Display for Rhs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rhs::One(t) => t.fmt(f),
            Rhs::Set(v) => {
                f.write_char('{')?;
                for (i, t) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    t.fmt(f)?;
                }
                f.write_char('}')
            }
        }
    }
}

fn atomic(e: &Expr) -> bool {
    matches!(
        e,
        Expr::Bool(_) | Expr::Field(_) | Expr::Not(_) | Expr::ChassisResident { .. }
    )
}

impl Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Bool(b) => f.write_str(if *b { "1" } else { "0" }),
            Expr::Field(r) => r.fmt(f),
            Expr::Not(e) if atomic(e) => write!(f, "!{e}"),
            Expr::Not(e) => write!(f, "!({e})"),
            Expr::And(v) | Expr::Or(v) => {
                let sep = if matches!(self, Expr::And(_)) {
                    " && "
                } else {
                    " || "
                };
                for (i, e) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(sep)?;
                    }
                    // Parenthesize anything that is not atomic or a relation.
                    if matches!(e, Expr::And(_) | Expr::Or(_)) {
                        write!(f, "({e})")?;
                    } else {
                        e.fmt(f)?;
                    }
                }
                Ok(())
            }
            Expr::Cmp { field, op, rhs } => write!(f, "{field} {} {rhs}", op.as_str()),
            Expr::Range {
                field,
                low,
                low_op,
                high_op,
                high,
            } => write!(
                f,
                "{low} {} {field} {} {high}",
                low_op.as_str(),
                high_op.as_str()
            ),
            Expr::ChassisResident { port, .. } => {
                f.write_str("is_chassis_resident(")?;
                write_str_lit(f, port)?;
                f.write_char(')')
            }
        }
    }
}

impl Display for OptValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptValue::Const(c) => write!(f, "{c}"),
            OptValue::Str(s) => write_str_lit(f, s),
            OptValue::Field(r) => r.fmt(f),
            OptValue::Set(v) => {
                f.write_char('{')?;
                for (i, x) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    x.fmt(f)?;
                }
                f.write_char('}')
            }
        }
    }
}

fn pipeline(p: Pipeline) -> &'static str {
    match p {
        Pipeline::Ingress => "ingress",
        Pipeline::Egress => "egress",
    }
}

/// Prints an action list: each action followed by `;`, separated by spaces.
pub fn actions_to_string(actions: &[Action]) -> String {
    let mut s = String::new();
    let _ = write_list(&mut s, actions);
    s
}

fn write_list(f: &mut impl Write, actions: &[Action]) -> fmt::Result {
    for (i, a) in actions.iter().enumerate() {
        if i > 0 {
            f.write_char(' ')?;
        }
        write!(f, "{a};")?;
    }
    Ok(())
}

fn write_block(f: &mut impl Write, body: &[Action]) -> fmt::Result {
    if body.is_empty() {
        return f.write_str(" { }");
    }
    f.write_str(" { ")?;
    write_list(f, body)?;
    f.write_str(" }")
}

fn write_fields(f: &mut fmt::Formatter<'_>, name: &str, args: &[&FieldRef]) -> fmt::Result {
    write!(f, "{name}(")?;
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        a.fmt(f)?;
    }
    f.write_char(')')
}

fn write_opts(f: &mut fmt::Formatter<'_>, opts: &[(String, OptValue)]) -> fmt::Result {
    for (i, (k, v)) in opts.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{k} = {v}")?;
    }
    Ok(())
}

fn write_lb(f: &mut fmt::Formatter<'_>, a: &CtLbArgs) -> fmt::Result {
    if !a.legacy {
        f.write_str("backends=")?;
    }
    for (i, b) in a.backends.iter().enumerate() {
        if i > 0 {
            f.write_char(',')?;
        }
        match b {
            LbBackend::Addr(b) => match (b.ip.format, b.port) {
                (Format::Ipv6, Some(p)) => write!(f, "[{}]:{p}", b.ip)?,
                (_, Some(p)) => write!(f, "{}:{p}", b.ip)?,
                (_, None) => write!(f, "{}", b.ip)?,
            },
            LbBackend::Template(t) => {
                write!(f, "^{}", t.ip)?;
                match &t.port {
                    Some(TemplatePort::Num(p)) => write!(f, ":{p}")?,
                    Some(TemplatePort::Var(p)) => write!(f, ":^{p}")?,
                    None => {}
                }
            }
        }
    }
    if !a.legacy {
        if let Some(h) = &a.hash_fields {
            f.write_str("; hash_fields=")?;
            write_str_lit(f, h)?;
        }
        if let Some(flag) = &a.flag {
            write!(f, "; {flag}")?;
        }
    }
    Ok(())
}

impl Display for ResultFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.name();
        match self {
            ResultFn::LookupArp { port, ip, mac } | ResultFn::LookupNd { port, ip, mac } => {
                write_fields(f, name, &[port, ip, mac])
            }
            ResultFn::LookupArpIp { port, ip } | ResultFn::LookupNdIp { port, ip } => {
                write_fields(f, name, &[port, ip])
            }
            ResultFn::GetFdb { mac } => write_fields(f, name, &[mac]),
            ResultFn::LookupFdb { port, mac } => write_fields(f, name, &[port, mac]),
            ResultFn::PutDhcpOpts { opts, .. } | ResultFn::PutNdRaOpts { opts } => {
                write!(f, "{name}(")?;
                write_opts(f, opts)?;
                f.write_char(')')
            }
            ResultFn::CheckPktLarger { len } => write!(f, "{name}({len})"),
            _ => write!(f, "{name}()"),
        }
    }
}

impl Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Next { args, .. } => match args {
                NextArgs::Plain => f.write_str("next"),
                NextArgs::Table(t) => write!(f, "next({t})"),
                NextArgs::Named { pipeline: p, table } => {
                    f.write_str("next(")?;
                    if let Some(p) = p {
                        write!(f, "pipeline={}", pipeline(*p))?;
                        if table.is_some() {
                            f.write_str(", ")?;
                        }
                    }
                    if let Some(t) = table {
                        write!(f, "table={t}")?;
                    }
                    f.write_char(')')
                }
            },
            Action::Output { .. } => f.write_str("output"),
            Action::Drop { .. } => f.write_str("drop"),
            Action::Assign { dst, value, .. } => write!(f, "{dst} = {value}"),
            Action::Move { dst, src, .. } => write!(f, "{dst} = {src}"),
            Action::Exchange { a, b, .. } => write!(f, "{a} <-> {b}"),
            Action::Push { field, .. } => write!(f, "push({field})"),
            Action::Pop { field, .. } => write!(f, "pop({field})"),
            Action::DecTtl { .. } => f.write_str("ip.ttl--"),
            Action::CtNext { .. } => f.write_str("ct_next"),
            Action::CtCommit { args, .. } => match args {
                CtCommit::Bare => f.write_str("ct_commit"),
                CtCommit::Block(body) => {
                    f.write_str("ct_commit")?;
                    write_block(f, body)
                }
                CtCommit::Legacy { mark, label } => {
                    f.write_str("ct_commit(")?;
                    if let Some(m) = mark {
                        write!(f, "ct_mark={m}")?;
                        if label.is_some() {
                            f.write_str(", ")?;
                        }
                    }
                    if let Some(l) = label {
                        write!(f, "ct_label={l}")?;
                    }
                    f.write_char(')')
                }
            },
            Action::CtNat { kind, target, .. } => {
                f.write_str(kind.name())?;
                if let Some(t) = target {
                    write!(f, "({}", t.addr)?;
                    if let Some((lo, hi)) = t.ports {
                        write!(f, ", {lo}-{hi}")?;
                    }
                    for fl in &t.flags {
                        write!(f, ", {fl}")?;
                    }
                    f.write_char(')')?;
                }
                Ok(())
            }
            Action::CtClear { .. } => f.write_str("ct_clear"),
            Action::CtCommitNat { .. } => f.write_str("ct_commit_nat"),
            Action::CtSnatToVip { .. } => f.write_str("ct_snat_to_vip"),
            Action::CtLb { mark, args, .. } => {
                f.write_str(if *mark { "ct_lb_mark" } else { "ct_lb" })?;
                if let Some(a) = args {
                    f.write_char('(')?;
                    write_lb(f, a)?;
                    f.write_char(')')?;
                }
                Ok(())
            }
            Action::Nested { kind, body, .. } => {
                f.write_str(kind.name())?;
                write_block(f, body)
            }
            Action::GetArp { port, ip, .. } => write_fields(f, "get_arp", &[port, ip]),
            Action::GetNd { port, ip, .. } => write_fields(f, "get_nd", &[port, ip]),
            Action::PutArp { port, ip, mac, .. } => write_fields(f, "put_arp", &[port, ip, mac]),
            Action::PutNd { port, ip, mac, .. } => write_fields(f, "put_nd", &[port, ip, mac]),
            Action::PutFdb { port, mac, .. } => write_fields(f, "put_fdb", &[port, mac]),
            Action::Result { dst, func, .. } => write!(f, "{dst} = {func}"),
            Action::Select { dst, choices, .. } => {
                write!(f, "{dst} = select(")?;
                for (i, (v, w)) in choices.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                    if let Some(w) = w {
                        write!(f, "={w}")?;
                    }
                }
                f.write_char(')')
            }
            Action::SetQueue { queue, .. } => write!(f, "set_queue({queue})"),
            Action::SetMeter { rate, burst, .. } => match burst {
                Some(b) => write!(f, "set_meter({rate}, {b})"),
                None => write!(f, "set_meter({rate})"),
            },
            Action::Log { args, .. } => {
                f.write_str("log(")?;
                let mut first = true;
                for (k, v, quoted) in [
                    ("name", &args.name, true),
                    ("severity", &args.severity, false),
                    ("verdict", &args.verdict, false),
                    ("meter", &args.meter, true),
                ] {
                    if let Some(v) = v {
                        if !first {
                            f.write_str(", ")?;
                        }
                        first = false;
                        write!(f, "{k}=")?;
                        if quoted {
                            write_str_lit(f, v)?;
                        } else {
                            f.write_str(v)?;
                        }
                    }
                }
                f.write_char(')')
            }
            Action::FwdGroup {
                liveness, ports, ..
            } => {
                f.write_str("fwd_group(")?;
                if let Some(l) = liveness {
                    write!(f, "liveness={l}, ")?;
                }
                f.write_str("childports=")?;
                for (i, p) in ports.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_str_lit(f, p)?;
                }
                f.write_char(')')
            }
            Action::TriggerEvent { args, .. } => {
                f.write_str("trigger_event(")?;
                for (i, (k, v)) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k} = ")?;
                    write_str_lit(f, v)?;
                }
                f.write_char(')')
            }
            Action::Igmp { .. } => f.write_str("igmp"),
            Action::HandleDhcpv6Reply { .. } => f.write_str("handle_dhcpv6_reply"),
            Action::HandleBfdMsg { .. } => f.write_str("handle_bfd_msg()"),
            Action::BindVport { vport, parent, .. } => {
                f.write_str("bind_vport(")?;
                write_str_lit(f, vport)?;
                write!(f, ", {parent})")
            }
            Action::HandleSvcCheck { port, .. } => write!(f, "handle_svc_check({port})"),
            Action::CommitEcmpNh { ipv6, proto, .. } => {
                write!(f, "commit_ecmp_nh(ipv6 = {ipv6}, proto = {proto})")
            }
            Action::CommitLbAff {
                vip,
                backend,
                proto,
                timeout,
                ..
            } => {
                f.write_str("commit_lb_aff(vip = ")?;
                write_str_lit(f, vip)?;
                f.write_str(", backend = ")?;
                write_str_lit(f, backend)?;
                if !proto.is_empty() {
                    write!(f, ", proto = {proto}")?;
                }
                write!(f, ", timeout = {timeout})")
            }
            Action::Sample { args, .. } => {
                f.write_str("sample(")?;
                for (i, (k, v)) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}={v}")?;
                }
                f.write_char(')')
            }
        }
    }
}
