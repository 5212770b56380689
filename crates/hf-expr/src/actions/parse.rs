//! The action parser: text to [`Action`]s.

use super::{
    ACTION_NAMES, Action, Backend, CtCommit, CtLbArgs, LbBackend, LogArgs, NESTED, NO_ARG_FNS,
    NatKind, NatTarget, NextArgs, OptValue, Pipeline, RESULT_FNS, ResultFn, TemplateBackend,
    TemplatePort,
};
use crate::ast::{FieldRef, Value};
use crate::constant::{Constant, Format};
use crate::diag::{ErrorKind, ParseError, Result, Span};
use crate::lexer::Tok;
use crate::parser::Cursor;

/// Parses action text. An empty text (or one that is only comments) is an empty list.
pub fn parse_actions_text(src: &str) -> Result<Vec<Action>> {
    let mut c = Cursor::new(src)?;
    let v = parse_list(&mut c, &Tok::End)?;
    Ok(v)
}

fn parse_list(c: &mut Cursor, end: &Tok) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    // `drop;` is a valid list on its own (the same as an empty one) but combines with nothing.
    if matches!(c.peek(), Tok::Ident(s) if s == "drop") && *c.peek_at(1) == Tok::Semicolon {
        let span = c.bump().span;
        c.bump();
        if c.peek() != end {
            return Err(ParseError::new(
                ErrorKind::Syntax,
                c.span(),
                "`drop;` must be the only action in its list",
            )
            .with_help("remove `drop;`: a list without an output action drops the packet anyway"));
        }
        out.push(Action::Drop { span });
        return Ok(out);
    }
    while c.peek() != end {
        if *c.peek() == Tok::End {
            return Err(c.error("`}`"));
        }
        let a = parse_action(c)?;
        c.expect(&Tok::Semicolon, "`;`")?;
        out.push(a);
    }
    Ok(out)
}

fn syntax(span: Span, msg: impl Into<String>) -> ParseError {
    ParseError::new(ErrorKind::Syntax, span, msg)
}

fn parse_action(c: &mut Cursor) -> Result<Action> {
    let start = c.span();
    let Tok::Ident(name) = c.peek().clone() else {
        return Err(c.error("an action"));
    };
    let next = c.peek_at(1).clone();
    let mk = |c: &Cursor| start.to(c.prev_span());
    if next == Tok::Semicolon {
        let span = c.span();
        let simple = match name.as_str() {
            "next" => Some(Action::Next {
                args: NextArgs::Plain,
                span,
            }),
            "output" => Some(Action::Output { span }),
            "ct_next" => Some(Action::CtNext { span }),
            "ct_clear" => Some(Action::CtClear { span }),
            "ct_commit_nat" => Some(Action::CtCommitNat { span }),
            "ct_snat_to_vip" => Some(Action::CtSnatToVip { span }),
            "igmp" => Some(Action::Igmp { span }),
            "handle_dhcpv6_reply" => Some(Action::HandleDhcpv6Reply { span }),
            "ct_commit" => Some(Action::CtCommit {
                args: CtCommit::Bare,
                span,
            }),
            "ct_lb" | "ct_lb_mark" => Some(Action::CtLb {
                mark: name == "ct_lb_mark",
                args: None,
                span,
            }),
            _ => nat_kind(&name).map(|kind| Action::CtNat {
                kind,
                target: None,
                span,
            }),
        };
        if let Some(a) = simple {
            c.bump();
            return Ok(a);
        }
        if name == "drop" {
            return Err(ParseError::new(
                ErrorKind::Syntax,
                span,
                "`drop;` must be the only action in its list",
            )
            .with_help("remove `drop;`: a list without an output action drops the packet anyway"));
        }
    }
    if next == Tok::LBrace {
        if let Some((_, kind)) = NESTED.iter().find(|(n, _)| *n == name) {
            c.bump();
            let body = parse_block(c)?;
            return Ok(Action::Nested {
                kind: *kind,
                body,
                span: mk(c),
            });
        }
        if name == "ct_commit" {
            c.bump();
            let body = parse_block(c)?;
            return Ok(Action::CtCommit {
                args: CtCommit::Block(body),
                span: mk(c),
            });
        }
    }
    if next == Tok::LParen && ACTION_NAMES.contains(&name.as_str()) {
        c.bump();
        c.bump();
        let a = parse_call(c, &name, start)?;
        return Ok(a);
    }
    if ACTION_NAMES.contains(&name.as_str()) {
        c.bump();
        return Err(c.error(match next {
            Tok::LBrace => "`;` or `(` (this action takes no `{ }` block)",
            _ => "`;`",
        }));
    }
    if matches!(next, Tok::Semicolon | Tok::LParen | Tok::LBrace) {
        let e = ParseError::new(
            ErrorKind::UnknownAction,
            start,
            format!("unknown action `{name}`"),
        );
        return Err(match suggest_action(&name) {
            Some(s) => e.with_help(format!("did you mean `{s}`?")),
            None => e.with_help("see ovn-sb(5), Logical_Flow actions"),
        });
    }
    // A field statement.
    let dst = c.field_ref()?;
    match c.peek().clone() {
        Tok::Decrement => {
            c.bump();
            if dst.name != "ip.ttl" || dst.sub.is_some() {
                return Err(ParseError::new(
                    ErrorKind::Type,
                    dst.span,
                    format!("`--` applies only to `ip.ttl`, not `{dst}`"),
                ));
            }
            Ok(Action::DecTtl { span: mk(c) })
        }
        Tok::Exchange => {
            c.bump();
            let b = c.field_ref()?;
            Ok(Action::Exchange {
                a: dst,
                b,
                span: mk(c),
            })
        }
        Tok::Assign => {
            c.bump();
            parse_assign_rhs(c, dst, start)
        }
        Tok::Eq => Err(c.error("`=` (assignment is `=`, `==` is for matches)")),
        _ => Err(c.error("`=`, `<->` or `--`")),
    }
}

fn suggest_action(name: &str) -> Option<&'static str> {
    ACTION_NAMES
        .iter()
        .copied()
        .find(|n| n.starts_with(name) || name.starts_with(n) || levenshtein1(n, name))
}

fn levenshtein1(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let p = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let s = a[p..]
        .iter()
        .rev()
        .zip(b[p..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    a.len().max(b.len()) - p - s <= 1
}

fn nat_kind(name: &str) -> Option<NatKind> {
    Some(match name {
        "ct_dnat" => NatKind::Dnat,
        "ct_snat" => NatKind::Snat,
        "ct_dnat_in_czone" => NatKind::DnatInCzone,
        "ct_snat_in_czone" => NatKind::SnatInCzone,
        _ => return None,
    })
}

fn parse_block(c: &mut Cursor) -> Result<Vec<Action>> {
    c.expect(&Tok::LBrace, "`{`")?;
    c.enter()?;
    let body = parse_list(c, &Tok::RBrace)?;
    c.expect(&Tok::RBrace, "`}`")?;
    c.depth -= 1;
    Ok(body)
}

fn parse_assign_rhs(c: &mut Cursor, dst: FieldRef, start: Span) -> Result<Action> {
    if let Tok::Ident(name) = c.peek().clone() {
        let call = *c.peek_at(1) == Tok::LParen;
        if call {
            if let Some((_, f)) = NO_ARG_FNS.iter().find(|(n, _)| *n == name) {
                c.bump();
                c.bump();
                c.expect(&Tok::RParen, &format!("`)` ({name}() takes no arguments)"))?;
                return Ok(Action::Result {
                    dst,
                    func: f.clone(),
                    span: start.to(c.prev_span()),
                });
            }
            if RESULT_FNS.contains(&name.as_str()) {
                c.bump();
                c.bump();
                return parse_result_call(c, dst, &name, start);
            }
            let e = ParseError::new(
                ErrorKind::UnknownAction,
                c.span(),
                format!("unknown function `{name}()`"),
            );
            return Err(e.with_help("functions that store a result: lookup_arp, lookup_nd, get_fdb, lookup_fdb, put_dhcp_opts, put_dhcpv6_opts, put_nd_ra_opts, dns_lookup, chk_lb_hairpin, check_pkt_larger, select, ..."));
        }
        let src = c.field_ref()?;
        return Ok(Action::Move {
            dst,
            src,
            span: start.to(c.prev_span()),
        });
    }
    match c.term() {
        Some(t) => match t.value {
            Value::AddrSet(_) | Value::PortGroup(_) => Err(ParseError::new(
                ErrorKind::Type,
                t.span,
                "a set cannot be assigned to a field",
            )),
            value => Ok(Action::Assign {
                dst,
                value,
                span: start.to(c.prev_span()),
            }),
        },
        None => Err(c.error("a constant, string, field or function")),
    }
}

fn args_fields(c: &mut Cursor, n: usize) -> Result<Vec<FieldRef>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        if i > 0 {
            c.expect(&Tok::Comma, "`,`")?;
        }
        v.push(c.field_ref()?);
    }
    c.expect(&Tok::RParen, "`)`")?;
    Ok(v)
}

fn int_arg(c: &mut Cursor, what: &str, max: u128) -> Result<u128> {
    match c.peek() {
        Tok::Const(k) if k.mask.is_none() && matches!(k.format, Format::Decimal | Format::Hex) => {
            let v = k.value;
            let span = c.bump().span;
            if v > max {
                return Err(ParseError::new(
                    ErrorKind::Width,
                    span,
                    format!("{v} is out of range for {what} (at most {max})"),
                ));
            }
            Ok(v)
        }
        _ => Err(c.error(what)),
    }
}

fn string_arg(c: &mut Cursor, what: &str) -> Result<String> {
    match c.peek().clone() {
        Tok::Str(s) => {
            c.bump();
            Ok(s)
        }
        _ => Err(c.error(what)),
    }
}

fn key(c: &mut Cursor) -> Result<(String, Span)> {
    let k = c.ident("a `key=value` argument")?;
    c.expect(&Tok::Assign, "`=`")?;
    Ok(k)
}

fn ident_or_string(c: &mut Cursor, what: &str) -> Result<String> {
    match c.peek().clone() {
        Tok::Ident(s) | Tok::Str(s) => {
            c.bump();
            Ok(s)
        }
        _ => Err(c.error(what)),
    }
}

/// `tcp`, `udp` or `sctp`, bare or quoted.
fn proto_arg(c: &mut Cursor) -> Result<String> {
    let v = ident_or_string(c, "`tcp`, `udp` or `sctp`")?;
    if !["tcp", "udp", "sctp"].contains(&v.as_str()) {
        return Err(ParseError::new(
            ErrorKind::Type,
            c.prev_span(),
            format!("unknown protocol `{v}`"),
        )
        .with_help("proto= takes `tcp`, `udp` or `sctp`"));
    }
    Ok(v)
}

fn parse_result_call(c: &mut Cursor, dst: FieldRef, name: &str, start: Span) -> Result<Action> {
    let func = match name {
        "lookup_arp" | "lookup_nd" => {
            let mut a = args_fields(c, 3)?.into_iter();
            let (port, ip, mac) = (next_f(&mut a), next_f(&mut a), next_f(&mut a));
            if name == "lookup_arp" {
                ResultFn::LookupArp { port, ip, mac }
            } else {
                ResultFn::LookupNd { port, ip, mac }
            }
        }
        "lookup_arp_ip" | "lookup_nd_ip" => {
            let mut a = args_fields(c, 2)?.into_iter();
            let (port, ip) = (next_f(&mut a), next_f(&mut a));
            if name == "lookup_arp_ip" {
                ResultFn::LookupArpIp { port, ip }
            } else {
                ResultFn::LookupNdIp { port, ip }
            }
        }
        "get_fdb" => {
            let mut a = args_fields(c, 1)?.into_iter();
            ResultFn::GetFdb {
                mac: next_f(&mut a),
            }
        }
        "lookup_fdb" => {
            let mut a = args_fields(c, 2)?.into_iter();
            let (port, mac) = (next_f(&mut a), next_f(&mut a));
            ResultFn::LookupFdb { port, mac }
        }
        "put_dhcp_opts" | "put_dhcpv6_opts" | "put_nd_ra_opts" => {
            let mut opts = Vec::new();
            while *c.peek() != Tok::RParen {
                if !opts.is_empty() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let (k, _) = key(c)?;
                opts.push((k, opt_value(c, 0)?));
            }
            c.bump();
            if name == "put_nd_ra_opts" {
                ResultFn::PutNdRaOpts { opts }
            } else {
                ResultFn::PutDhcpOpts {
                    v6: name == "put_dhcpv6_opts",
                    opts,
                }
            }
        }
        "check_pkt_larger" => {
            let len = int_arg(c, "a packet length", u128::from(u32::MAX))? as u32;
            c.expect(&Tok::RParen, "`)`")?;
            ResultFn::CheckPktLarger { len }
        }
        _ => {
            // select
            let mut choices = Vec::new();
            while *c.peek() != Tok::RParen {
                if !choices.is_empty() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let v = int_arg(c, "a choice (0 to 65535)", 65535)? as u16;
                let w = if c.eat(&Tok::Assign) {
                    Some(int_arg(c, "a weight (1 to 65535)", 65535)? as u16)
                } else {
                    None
                };
                choices.push((v, w));
            }
            c.bump();
            return Ok(Action::Select {
                dst,
                choices,
                span: start.to(c.prev_span()),
            });
        }
    };
    Ok(Action::Result {
        dst,
        func,
        span: start.to(c.prev_span()),
    })
}

fn next_f(it: &mut impl Iterator<Item = FieldRef>) -> FieldRef {
    it.next().unwrap_or_else(|| FieldRef::new(""))
}

fn opt_value(c: &mut Cursor, depth: usize) -> Result<OptValue> {
    match c.peek().clone() {
        Tok::Const(k) => {
            c.bump();
            Ok(OptValue::Const(k))
        }
        Tok::Str(s) => {
            c.bump();
            Ok(OptValue::Str(s))
        }
        Tok::Ident(_) => Ok(OptValue::Field(c.field_ref()?)),
        Tok::LBrace if depth == 0 => {
            c.bump();
            let mut v = Vec::new();
            while *c.peek() != Tok::RBrace {
                v.push(opt_value(c, 1)?);
                c.eat(&Tok::Comma);
            }
            c.bump();
            Ok(OptValue::Set(v))
        }
        _ => Err(c.error("an option value")),
    }
}

fn pipeline(c: &mut Cursor) -> Result<Pipeline> {
    match c.peek() {
        Tok::Ident(s) if s == "ingress" => {
            c.bump();
            Ok(Pipeline::Ingress)
        }
        Tok::Ident(s) if s == "egress" => {
            c.bump();
            Ok(Pipeline::Egress)
        }
        _ => Err(c.error("`ingress` or `egress`")),
    }
}

fn ip_const(c: &mut Cursor, what: &str) -> Result<Constant> {
    match c.peek() {
        Tok::Const(k) if matches!(k.format, Format::Ipv4 | Format::Ipv6) && k.mask.is_none() => {
            let k = *k;
            c.bump();
            Ok(k)
        }
        _ => Err(c.error(what)),
    }
}

fn port(c: &mut Cursor) -> Result<u16> {
    Ok(int_arg(c, "a port number", 65535)? as u16)
}

fn backend(c: &mut Cursor) -> Result<LbBackend> {
    if let Tok::Template(ip) = c.peek().clone() {
        c.bump();
        let port = if c.eat(&Tok::Colon) {
            if let Tok::Template(p) = c.peek().clone() {
                c.bump();
                Some(TemplatePort::Var(p))
            } else {
                Some(TemplatePort::Num(port(c)?))
            }
        } else {
            None
        };
        return Ok(LbBackend::Template(TemplateBackend { ip, port }));
    }
    address_backend(c).map(LbBackend::Addr)
}

fn address_backend(c: &mut Cursor) -> Result<Backend> {
    if c.eat(&Tok::LSquare) {
        let ip = ip_const(c, "an IPv6 address")?;
        c.expect(&Tok::RSquare, "`]`")?;
        c.expect(&Tok::Colon, "`:` and a port")?;
        return Ok(Backend {
            ip,
            port: Some(port(c)?),
        });
    }
    let ip = ip_const(c, "a backend address")?;
    let port = if ip.format == Format::Ipv4 && c.eat(&Tok::Colon) {
        Some(port(c)?)
    } else {
        None
    };
    Ok(Backend { ip, port })
}

fn parse_call(c: &mut Cursor, name: &str, start: Span) -> Result<Action> {
    let fin = |c: &mut Cursor| -> Result<Span> {
        c.expect(&Tok::RParen, "`)`")?;
        Ok(start.to(c.prev_span()))
    };
    match name {
        "next" => {
            let args = if matches!(c.peek(), Tok::Const(_)) {
                NextArgs::Table(int_arg(c, "a table number", 255)? as u32)
            } else {
                let mut pipe = None;
                let mut table = None;
                loop {
                    let (k, ks) = key(c)?;
                    match k.as_str() {
                        "pipeline" if pipe.is_none() => pipe = Some(pipeline(c)?),
                        "table" if table.is_none() => {
                            table = Some(int_arg(c, "a table number", 255)? as u32)
                        }
                        _ => {
                            return Err(syntax(ks, format!("unexpected `{k}=` in next()"))
                                .with_help("next() takes `pipeline=ingress|egress` and `table=N`, each once"));
                        }
                    }
                    if !c.eat(&Tok::Comma) {
                        break;
                    }
                }
                NextArgs::Named {
                    pipeline: pipe,
                    table,
                }
            };
            Ok(Action::Next {
                args,
                span: fin(c)?,
            })
        }
        "ct_commit" => {
            let (mut mark, mut label) = (None, None);
            while *c.peek() != Tok::RParen {
                if mark.is_some() || label.is_some() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let (k, ks) = key(c)?;
                let v = match c.peek() {
                    Tok::Const(k) => *k,
                    _ => return Err(c.error("a constant (value[/mask])")),
                };
                c.bump();
                match k.as_str() {
                    "ct_mark" if mark.is_none() => mark = Some(v),
                    "ct_label" if label.is_none() => label = Some(v),
                    _ => {
                        return Err(syntax(ks, format!("unexpected `{k}=` in ct_commit()"))
                            .with_help("ct_commit() takes `ct_mark=` and `ct_label=`, each once"));
                    }
                }
            }
            Ok(Action::CtCommit {
                args: CtCommit::Legacy { mark, label },
                span: fin(c)?,
            })
        }
        _ if nat_kind(name).is_some() => {
            let kind = nat_kind(name).unwrap_or(NatKind::Dnat);
            let addr = ip_const(c, "an IPv4 or IPv6 address")?;
            let mut ports = None;
            let mut flags = Vec::new();
            while c.eat(&Tok::Comma) {
                if let Tok::Ident(f) = c.peek().clone() {
                    c.bump();
                    flags.push(f);
                } else {
                    let lo = port(c)?;
                    let hi = if c.eat(&Tok::Minus) { port(c)? } else { lo };
                    ports = Some((lo, hi));
                }
            }
            Ok(Action::CtNat {
                kind,
                target: Some(NatTarget { addr, ports, flags }),
                span: fin(c)?,
            })
        }
        "ct_lb" | "ct_lb_mark" => {
            let mut args = CtLbArgs {
                backends: Vec::new(),
                hash_fields: None,
                flag: None,
                legacy: true,
            };
            if matches!(c.peek(), Tok::Ident(s) if s == "backends") {
                c.bump();
                c.expect(&Tok::Assign, "`=`")?;
                args.legacy = false;
            }
            loop {
                args.backends.push(backend(c)?);
                if !c.eat(&Tok::Comma) {
                    break;
                }
            }
            while !args.legacy && c.eat(&Tok::Semicolon) {
                let (k, ks) = c.ident("`hash_fields=`, `skip_snat` or `force_snat`")?;
                match k.as_str() {
                    "hash_fields" if args.hash_fields.is_none() => {
                        c.expect(&Tok::Assign, "`=`")?;
                        args.hash_fields = Some(string_arg(c, "a quoted list of fields")?);
                    }
                    "skip_snat" | "force_snat" if args.flag.is_none() => args.flag = Some(k),
                    _ => return Err(syntax(ks, format!("unexpected `{k}` in {name}()"))),
                }
            }
            Ok(Action::CtLb {
                mark: name == "ct_lb_mark",
                args: Some(args),
                span: fin(c)?,
            })
        }
        "push" | "pop" => {
            let field = c.field_ref()?;
            let span = fin(c)?;
            Ok(if name == "push" {
                Action::Push { field, span }
            } else {
                Action::Pop { field, span }
            })
        }
        "get_arp" | "get_nd" => {
            let mut a = args_fields(c, 2)?.into_iter();
            let (port, ip) = (next_f(&mut a), next_f(&mut a));
            let span = start.to(c.prev_span());
            Ok(if name == "get_arp" {
                Action::GetArp { port, ip, span }
            } else {
                Action::GetNd { port, ip, span }
            })
        }
        "put_arp" | "put_nd" => {
            let mut a = args_fields(c, 3)?.into_iter();
            let (port, ip, mac) = (next_f(&mut a), next_f(&mut a), next_f(&mut a));
            let span = start.to(c.prev_span());
            Ok(if name == "put_arp" {
                Action::PutArp {
                    port,
                    ip,
                    mac,
                    span,
                }
            } else {
                Action::PutNd {
                    port,
                    ip,
                    mac,
                    span,
                }
            })
        }
        "put_fdb" => {
            let mut a = args_fields(c, 2)?.into_iter();
            let (port, mac) = (next_f(&mut a), next_f(&mut a));
            Ok(Action::PutFdb {
                port,
                mac,
                span: start.to(c.prev_span()),
            })
        }
        "set_queue" => {
            let queue = int_arg(c, "a queue number (0 to 61440)", 61440)? as u16;
            Ok(Action::SetQueue {
                queue,
                span: fin(c)?,
            })
        }
        "set_meter" => {
            let rate = int_arg(c, "a rate in kbps", u128::from(u64::MAX))? as u64;
            let burst = if c.eat(&Tok::Comma) {
                Some(int_arg(c, "a burst in kbps", u128::from(u64::MAX))? as u64)
            } else {
                None
            };
            Ok(Action::SetMeter {
                rate,
                burst,
                span: fin(c)?,
            })
        }
        "log" => {
            let mut args = LogArgs::default();
            while *c.peek() != Tok::RParen {
                if args != LogArgs::default() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let (k, ks) = key(c)?;
                let slot = match k.as_str() {
                    "name" => &mut args.name,
                    "severity" => &mut args.severity,
                    "verdict" => &mut args.verdict,
                    "meter" => &mut args.meter,
                    _ => {
                        return Err(syntax(ks, format!("unknown log() argument `{k}`"))
                            .with_help("log() takes name=, severity=, verdict= and meter="));
                    }
                };
                let v = ident_or_string(c, "a value")?;
                let ok = match k.as_str() {
                    "severity" => {
                        ["alert", "warning", "notice", "info", "debug"].contains(&v.as_str())
                    }
                    "verdict" => ["allow", "drop", "reject"].contains(&v.as_str()),
                    _ => true,
                };
                if !ok || slot.is_some() {
                    return Err(ParseError::new(
                        ErrorKind::Type,
                        c.prev_span(),
                        format!("invalid or repeated log() {k} `{v}`"),
                    )
                    .with_help(
                        "severity is alert|warning|notice|info|debug; verdict is allow|drop|reject",
                    ));
                }
                *slot = Some(v);
            }
            Ok(Action::Log {
                args,
                span: fin(c)?,
            })
        }
        "fwd_group" => {
            let mut liveness = None;
            let mut ports = Vec::new();
            if matches!(c.peek(), Tok::Ident(s) if s == "liveness") {
                key(c)?;
                let v = ident_or_string(c, "`true` or `false`")?;
                liveness = Some(match v.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(c.error("`true` or `false`")),
                });
                c.expect(&Tok::Comma, "`,`")?;
            }
            let (k, ks) = key(c)?;
            if k != "childports" {
                return Err(syntax(ks, "expected `childports=`"));
            }
            loop {
                ports.push(string_arg(c, "a port name string")?);
                if !c.eat(&Tok::Comma) {
                    break;
                }
            }
            Ok(Action::FwdGroup {
                liveness,
                ports,
                span: fin(c)?,
            })
        }
        "trigger_event" => {
            let mut args = Vec::new();
            while *c.peek() != Tok::RParen {
                if !args.is_empty() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let (k, ks) = key(c)?;
                if args.is_empty() && k != "event" {
                    return Err(syntax(ks, "trigger_event() starts with `event=`"));
                }
                args.push((k, string_arg(c, "a quoted string")?));
            }
            if args.is_empty() {
                return Err(c.error("`event=`"));
            }
            Ok(Action::TriggerEvent {
                args,
                span: fin(c)?,
            })
        }
        "bind_vport" => {
            let vport = string_arg(c, "the virtual port's name")?;
            c.expect(&Tok::Comma, "`,`")?;
            let parent = c.field_ref()?;
            Ok(Action::BindVport {
                vport,
                parent,
                span: fin(c)?,
            })
        }
        "handle_bfd_msg" => Ok(Action::HandleBfdMsg { span: fin(c)? }),
        "handle_svc_check" => {
            let port = c.field_ref()?;
            Ok(Action::HandleSvcCheck {
                port,
                span: fin(c)?,
            })
        }
        "commit_ecmp_nh" => {
            let (mut ipv6, mut proto) = (None, None);
            while *c.peek() != Tok::RParen {
                if ipv6.is_some() || proto.is_some() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let (k, ks) = key(c)?;
                match k.as_str() {
                    "ipv6" => {
                        ipv6 = Some(match ident_or_string(c, "`true` or `false`")?.as_str() {
                            "true" => true,
                            "false" => false,
                            _ => {
                                return Err(syntax(c.prev_span(), "ipv6= takes `true` or `false`"));
                            }
                        });
                    }
                    "proto" => proto = Some(proto_arg(c)?),
                    _ => {
                        return Err(syntax(
                            ks,
                            format!("unknown commit_ecmp_nh() argument `{k}`"),
                        ));
                    }
                }
            }
            let span = fin(c)?;
            match (ipv6, proto) {
                (Some(ipv6), Some(proto)) => Ok(Action::CommitEcmpNh { ipv6, proto, span }),
                _ => Err(syntax(span, "commit_ecmp_nh() needs ipv6= and proto=")),
            }
        }
        "commit_lb_aff" => {
            let (mut vip, mut backend, mut proto, mut timeout) = (None, None, None, None);
            let mut first = true;
            while *c.peek() != Tok::RParen {
                if !first {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                first = false;
                let (k, ks) = key(c)?;
                match k.as_str() {
                    "vip" => vip = Some(string_arg(c, "a quoted ip:port")?),
                    "backend" => backend = Some(string_arg(c, "a quoted ip:port")?),
                    "proto" => proto = Some(proto_arg(c)?),
                    "timeout" => {
                        timeout =
                            Some(int_arg(c, "a timeout in seconds", u128::from(u32::MAX))? as u32)
                    }
                    _ => {
                        return Err(syntax(
                            ks,
                            format!("unknown commit_lb_aff() argument `{k}`"),
                        ));
                    }
                }
            }
            let span = fin(c)?;
            // OVN writes `proto=` exactly when the VIP has a port; it is optional here.
            match (vip, backend, proto, timeout) {
                (Some(vip), Some(backend), proto, Some(timeout)) => Ok(Action::CommitLbAff {
                    vip,
                    backend,
                    proto: proto.unwrap_or_default(),
                    timeout,
                    span,
                }),
                _ => Err(syntax(
                    span,
                    "commit_lb_aff() needs vip=, backend= and timeout= (and proto= when the VIP has a port)",
                )),
            }
        }
        "sample" => {
            let mut args = Vec::new();
            while *c.peek() != Tok::RParen {
                if !args.is_empty() {
                    c.expect(&Tok::Comma, "`,` or `)`")?;
                }
                let (k, _) = key(c)?;
                let v = match c.peek() {
                    Tok::Const(k) if k.mask.is_none() => *k,
                    _ => return Err(c.error("an integer")),
                };
                c.bump();
                args.push((k, v));
            }
            Ok(Action::Sample {
                args,
                span: fin(c)?,
            })
        }
        _ => Err(ParseError::new(
            ErrorKind::Syntax,
            start,
            format!("`{name}` takes no parenthesized arguments"),
        )),
    }
}
