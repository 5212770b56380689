//! Type checking of matches and actions against a [`SymbolTable`].
//!
//! Every error points at the token at fault and, where it can, says what would be valid.

use crate::actions::{Action, CtCommit, CtLbArgs, NatTarget, OptValue, ResultFn};
use crate::ast::{Expr, FieldRef, RelOp, Rhs, Term, Value};
use crate::constant::Constant;
use crate::diag::{ErrorKind, ParseError, Result, Span};
use crate::symbols::{FieldId, Symbol, SymbolKind, SymbolTable};

/// A field reference resolved against the symbol table.
#[derive(Clone, Copy, Debug)]
pub struct Resolved<'a> {
    /// The symbol named.
    pub symbol: &'a Symbol,
    /// The underlying field and bit range, unless the symbol is a predicate.
    pub bits: Option<(FieldId, u32, u32)>,
    /// Width in bits after subscripting (0 for strings).
    pub width: u32,
}

impl Resolved<'_> {
    /// Whether it is a string field.
    pub fn is_string(&self) -> bool {
        self.symbol.string
    }
}

fn err(kind: ErrorKind, span: Span, msg: impl Into<String>) -> ParseError {
    ParseError::new(kind, span, msg)
}

/// Resolves `f` to its field and bits.
pub fn resolve<'a>(symtab: &'a SymbolTable, f: &FieldRef) -> Result<Resolved<'a>> {
    let Some(symbol) = symtab.get(&f.name) else {
        let e = err(
            ErrorKind::UnknownSymbol,
            f.span,
            format!("unknown field `{}`", f.name),
        );
        return Err(match symtab.suggest(&f.name) {
            Some(s) => e.with_help(format!("did you mean `{s}`?")),
            None => e.with_help("see ovn-sb(5) for the fields a logical flow may use"),
        });
    };
    let (base, lo0, width) = match &symbol.kind {
        SymbolKind::Field(id) => (Some(*id), 0, symbol.width),
        SymbolKind::Subfield { field, lo, hi } => (Some(*field), *lo, hi - lo + 1),
        SymbolKind::Predicate(_) => (None, 0, 1),
    };
    let Some(sub) = f.sub else {
        return Ok(Resolved {
            symbol,
            bits: base.map(|b| (b, lo0, lo0 + width.max(1) - 1)),
            width,
        });
    };
    if base.is_none() {
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!("predicate `{}` cannot be subscripted", f.name),
        ));
    }
    if symbol.string {
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!("string field `{}` cannot be subscripted", f.name),
        ));
    }
    let (lo, hi) = sub.bounds();
    if !symbol.ordinal && (lo != 0 || hi + 1 != width) {
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!("cannot select bits of nominal field `{}`", f.name),
        )
        .with_help("only ordinal (maskable) fields have subfields"));
    }
    if hi >= width {
        return Err(err(
            ErrorKind::Width,
            f.span,
            format!(
                "bit {hi} is out of range for `{}`, which is {width} bits wide",
                f.name
            ),
        )
        .with_help(format!("bits are numbered 0 to {}", width - 1)));
    }
    Ok(Resolved {
        symbol,
        bits: base.map(|b| (b, lo0 + lo, lo0 + hi)),
        width: hi - lo + 1,
    })
}

/// Type-checks a match.
pub fn check_match(symtab: &SymbolTable, e: &Expr) -> Result<()> {
    check_expr(symtab, e, false)
}

fn check_expr(symtab: &SymbolTable, e: &Expr, negated: bool) -> Result<()> {
    match e {
        Expr::Bool(_) | Expr::ChassisResident { .. } => Ok(()),
        Expr::Not(inner) => check_expr(symtab, inner, !negated),
        Expr::And(v) | Expr::Or(v) => v.iter().try_for_each(|x| check_expr(symtab, x, negated)),
        Expr::Field(f) => {
            let r = resolve(symtab, f)?;
            if r.is_string() {
                return Err(err(
                    ErrorKind::Type,
                    f.span,
                    format!("string field `{}` cannot be used as a boolean", f.name),
                )
                .with_help(format!(
                    "compare it with a port name, e.g. `{} == \"lp1\"`",
                    f.name
                )));
            }
            // A bare field means `f != 0`; OVN insists on writing that out for multibit
            // fields, except under `!` (where `!reg0` reads naturally as `reg0 == 0`).
            if r.width != 1 && !negated {
                return Err(err(
                    ErrorKind::Type,
                    f.span,
                    format!(
                        "`{}` is {} bits wide and cannot be used as a boolean",
                        f.name, r.width
                    ),
                )
                .with_help(format!(
                    "an explicit `{} != 0` is required to test a multibit field against 0",
                    f.name
                )));
            }
            if r.symbol.positive_only && negated {
                return Err(nominal_predicate(f));
            }
            Ok(())
        }
        Expr::Cmp { field, op, rhs } => check_cmp(symtab, field, *op, rhs, negated),
        Expr::Range {
            field, low, high, ..
        } => {
            let r = resolve(symtab, field)?;
            if !r.symbol.ordinal || r.bits.is_none() {
                return Err(err(
                    ErrorKind::Type,
                    field.span,
                    format!("range test on nominal field `{}`", field.name),
                )
                .with_help("only ordinal fields can be compared with `<`, `<=`, `>`, `>=`"));
            }
            for t in [low, high] {
                check_ordinal_const(&r, field, t)?;
            }
            Ok(())
        }
    }
}

fn nominal_predicate(f: &FieldRef) -> ParseError {
    let n = &f.name;
    err(
        ErrorKind::Type,
        f.span,
        format!("nominal predicate `{n}` may only be tested positively (taking enclosing `!` into account)"),
    )
    .with_help(format!("write `{n}` or `{n} == 1`, not `!{n}` or `{n} == 0`; match the alternatives positively instead"))
}

fn check_ordinal_const(r: &Resolved<'_>, field: &FieldRef, t: &Term) -> Result<()> {
    match &t.value {
        Value::Const(c) if c.mask.is_none() => check_width(r, field, c, t.span),
        Value::Const(_) => Err(err(
            ErrorKind::Type,
            t.span,
            "a masked constant cannot be used with `<`, `<=`, `>` or `>=`",
        )),
        Value::Template(_) => Ok(()),
        _ => Err(err(
            ErrorKind::Type,
            t.span,
            "`<`, `<=`, `>` and `>=` need an integer constant",
        )),
    }
}

fn check_width(r: &Resolved<'_>, field: &FieldRef, c: &Constant, span: Span) -> Result<()> {
    let need = c.bits_needed();
    if need > r.width {
        return Err(err(
            ErrorKind::Width,
            span,
            format!(
                "constant `{c}` needs {need} bits but `{}` is {} bits wide",
                display_field(field),
                r.width
            ),
        ));
    }
    Ok(())
}

fn display_field(f: &FieldRef) -> String {
    f.to_string()
}

fn check_cmp(
    symtab: &SymbolTable,
    field: &FieldRef,
    op: RelOp,
    rhs: &Rhs,
    negated: bool,
) -> Result<()> {
    let r = resolve(symtab, field)?;
    let effective = if negated { op.negate() } else { op };
    let is_pred = r.bits.is_none();
    if !matches!(op, RelOp::Eq | RelOp::Ne) {
        if let Rhs::Set(_) = rhs {
            return Err(err(
                ErrorKind::Type,
                field.span,
                format!(
                    "a set can only be compared with `==` or `!=`, not `{}`",
                    op.as_str()
                ),
            ));
        }
        if !r.symbol.ordinal || is_pred {
            return Err(err(
                ErrorKind::Type,
                field.span,
                format!(
                    "only `==` and `!=` may be used with nominal field `{}`",
                    field.name
                ),
            )
            .with_help("nominal fields (ports, eth.type, ip.proto, ...) have no order"));
        }
    }
    if !r.symbol.ordinal && !is_pred && effective == RelOp::Ne {
        return Err(err(
            ErrorKind::Type,
            field.span,
            format!(
                "nominal field `{}` may only be tested for equality (taking enclosing `!` into account)",
                field.name
            ),
        )
        .with_help("match the values you want with `==` and a set, e.g. `inport == {\"a\", \"b\"}`"));
    }
    for t in rhs.terms() {
        check_value(&r, field, op, t)?;
        if let (true, Value::Const(c)) = (r.symbol.positive_only, &t.value) {
            let positive = ((c.value & 1 == 1) != (op == RelOp::Ne)) != negated;
            if !positive {
                return Err(nominal_predicate(field));
            }
        }
    }
    Ok(())
}

fn check_value(r: &Resolved<'_>, field: &FieldRef, op: RelOp, t: &Term) -> Result<()> {
    let is_pred = r.bits.is_none();
    match &t.value {
        Value::Str(_) | Value::PortGroup(_) if r.is_string() => Ok(()),
        Value::Template(_) => Ok(()),
        Value::PortGroup(g) => Err(err(
            ErrorKind::Type,
            t.span,
            format!("port group `@{g}` can only be compared with `inport` or `outport`"),
        )
        .with_help(format!("for its addresses use `${g}_ip4` or `${g}_ip6`"))),
        Value::Str(_) => Err(err(
            ErrorKind::Type,
            t.span,
            format!(
                "`{}` is an integer field and cannot be compared with a string",
                field.name
            ),
        )),
        _ if r.is_string() => Err(err(
            ErrorKind::Type,
            t.span,
            format!(
                "`{}` is a string field: compare it with a quoted port name or `@port_group`",
                field.name
            ),
        )),
        Value::AddrSet(_) if is_pred => Err(err(
            ErrorKind::Type,
            t.span,
            format!(
                "predicate `{}` can only be compared with 0 or 1",
                field.name
            ),
        )),
        Value::AddrSet(_) => Ok(()),
        Value::Const(c) => {
            if is_pred {
                if c.mask.is_some() || c.value > 1 {
                    return Err(err(
                        ErrorKind::Type,
                        t.span,
                        format!(
                            "predicate `{}` can only be compared with 0 or 1",
                            field.name
                        ),
                    ));
                }
                return Ok(());
            }
            if c.mask.is_some() {
                if !r.symbol.ordinal {
                    return Err(err(
                        ErrorKind::Type,
                        t.span,
                        format!(
                            "nominal field `{}` cannot be matched with a mask",
                            field.name
                        ),
                    ));
                }
                if !matches!(op, RelOp::Eq | RelOp::Ne) {
                    return Err(err(
                        ErrorKind::Type,
                        t.span,
                        "a masked constant can only be compared with `==` or `!=`",
                    ));
                }
            }
            check_width(r, field, c, t.span)
        }
    }
}

// ----- actions ------------------------------------------------------------------------------------

/// Where an action list sits, which decides what it may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    Top,
    CtCommit,
}

/// Type-checks an action list.
pub fn check_actions(symtab: &SymbolTable, actions: &[Action]) -> Result<()> {
    check_list(symtab, actions, Ctx::Top)
}

fn check_list(symtab: &SymbolTable, actions: &[Action], ctx: Ctx) -> Result<()> {
    actions
        .iter()
        .try_for_each(|a| check_action(symtab, a, ctx))
}

fn lvalue<'a>(symtab: &'a SymbolTable, f: &FieldRef, ctx: Ctx) -> Result<Resolved<'a>> {
    let r = resolve(symtab, f)?;
    if r.bits.is_none() {
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!("predicate `{}` cannot be assigned", f.name),
        ));
    }
    let ct_field = f.name.starts_with("ct_mark") || f.name.starts_with("ct_label");
    if ctx == Ctx::CtCommit {
        if !ct_field {
            return Err(err(
                ErrorKind::Type,
                f.span,
                format!("`{}` cannot be set inside `ct_commit {{ }}`", f.name),
            )
            .with_help("only `ct_mark`, `ct_label` and their subfields may be set there"));
        }
        return Ok(r);
    }
    if !r.symbol.writable {
        let e = err(
            ErrorKind::Type,
            f.span,
            format!("field `{}` is read-only", f.name),
        );
        return Err(if ct_field {
            e.with_help("set it inside `ct_commit { ... }`")
        } else {
            e
        });
    }
    Ok(r)
}

fn rvalue<'a>(symtab: &'a SymbolTable, f: &FieldRef) -> Result<Resolved<'a>> {
    let r = resolve(symtab, f)?;
    if r.bits.is_none() {
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!("predicate `{}` cannot be used as a value", f.name),
        ));
    }
    Ok(r)
}

fn same_type(a: &Resolved<'_>, af: &FieldRef, b: &Resolved<'_>, bf: &FieldRef) -> Result<()> {
    if a.is_string() != b.is_string() {
        return Err(err(
            ErrorKind::Type,
            af.span.to(bf.span),
            format!("`{af}` and `{bf}` must both be strings or both be integers"),
        ));
    }
    if a.width != b.width {
        return Err(err(
            ErrorKind::Width,
            af.span.to(bf.span),
            format!("`{af}` is {} bits but `{bf}` is {} bits", a.width, b.width),
        )
        .with_help("use subfields of equal width, e.g. `reg0[0..15] = tcp.dst`"));
    }
    Ok(())
}

fn string_port(symtab: &SymbolTable, f: &FieldRef) -> Result<()> {
    let r = rvalue(symtab, f)?;
    if !r.is_string() {
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!(
                "`{}` must be a string field naming a logical port (e.g. `inport`)",
                f.name
            ),
        ));
    }
    Ok(())
}

fn int_width(symtab: &SymbolTable, f: &FieldRef, widths: &[u32], what: &str) -> Result<()> {
    let r = rvalue(symtab, f)?;
    if r.is_string() || !widths.contains(&r.width) {
        let ws: Vec<String> = widths.iter().map(|w| w.to_string()).collect();
        return Err(err(
            ErrorKind::Type,
            f.span,
            format!(
                "{what} must be a {}-bit field, but `{f}` is {}",
                ws.join(" or "),
                describe_width(&r)
            ),
        ));
    }
    Ok(())
}

fn describe_width(r: &Resolved<'_>) -> String {
    if r.is_string() {
        "a string".to_string()
    } else {
        format!("{} bits", r.width)
    }
}

fn check_action(symtab: &SymbolTable, a: &Action, ctx: Ctx) -> Result<()> {
    match a {
        Action::Assign { dst, value, span } => {
            let r = lvalue(symtab, dst, ctx)?;
            match value {
                Value::Str(_) if r.is_string() => Ok(()),
                Value::Str(_) => Err(err(
                    ErrorKind::Type,
                    *span,
                    format!("`{dst}` is an integer field and cannot be assigned a string"),
                )),
                _ if r.is_string() => Err(err(
                    ErrorKind::Type,
                    *span,
                    format!("`{dst}` is a string field: assign a quoted port name"),
                )),
                Value::Const(c) => {
                    if c.mask.is_some() && ctx != Ctx::CtCommit {
                        return Err(err(
                            ErrorKind::Type,
                            *span,
                            "a masked constant can only be assigned inside `ct_commit`",
                        ));
                    }
                    check_width(&r, dst, c, *span)
                }
                Value::Template(_) => Ok(()),
                _ => Err(err(
                    ErrorKind::Type,
                    *span,
                    "only a constant or a field can be assigned",
                )),
            }
        }
        Action::Move { dst, src, .. } => {
            let d = lvalue(symtab, dst, ctx)?;
            let s = rvalue(symtab, src)?;
            same_type(&d, dst, &s, src)
        }
        Action::Exchange { a: x, b: y, .. } => {
            let d = lvalue(symtab, x, ctx)?;
            let s = lvalue(symtab, y, ctx)?;
            same_type(&d, x, &s, y)
        }
        Action::Push { field, .. } => rvalue(symtab, field).map(|_| ()),
        Action::Pop { field, .. } => lvalue(symtab, field, ctx).map(|_| ()),
        Action::CtCommit {
            args: CtCommit::Block(body),
            ..
        } => check_list(symtab, body, Ctx::CtCommit),
        Action::CtCommit {
            args: CtCommit::Legacy { mark, .. },
            span,
        } => {
            if let Some(m) = mark
                && m.bits_needed() > 32
            {
                return Err(err(
                    ErrorKind::Width,
                    *span,
                    format!("ct_mark value `{m}` exceeds 32 bits"),
                ));
            }
            // `ct_label` is 128 bits: every constant fits.
            Ok(())
        }
        Action::CtNat {
            target: Some(NatTarget { addr, ports, .. }),
            span,
            ..
        } => {
            if !matches!(
                addr.format,
                crate::constant::Format::Ipv4 | crate::constant::Format::Ipv6
            ) || addr.mask.is_some()
            {
                return Err(err(
                    ErrorKind::Type,
                    *span,
                    format!("`{addr}` is not an IPv4 or IPv6 address"),
                ));
            }
            if let Some((lo, hi)) = ports
                && (lo > hi || *lo == 0)
            {
                return Err(err(
                    ErrorKind::Type,
                    *span,
                    format!("invalid port range {lo}-{hi}"),
                ));
            }
            Ok(())
        }
        Action::CtLb {
            args: Some(CtLbArgs { backends, .. }),
            span,
            ..
        } => {
            for b in backends.iter().filter_map(|b| match b {
                crate::actions::LbBackend::Addr(b) => Some(b),
                // A chassis expands templates before it parses the flow.
                _ => None,
            }) {
                if !matches!(
                    b.ip.format,
                    crate::constant::Format::Ipv4 | crate::constant::Format::Ipv6
                ) {
                    return Err(err(
                        ErrorKind::Type,
                        *span,
                        format!("backend `{}` is not an IP address", b.ip),
                    ));
                }
            }
            Ok(())
        }
        Action::Nested { body, .. } => check_list(symtab, body, Ctx::Top),
        Action::GetArp { port, ip, .. } | Action::GetNd { port, ip, .. } => {
            string_port(symtab, port)?;
            let w: &[u32] = if matches!(a, Action::GetArp { .. }) {
                &[32]
            } else {
                &[128]
            };
            int_width(symtab, ip, w, "the address")
        }
        Action::PutArp { port, ip, mac, .. } | Action::PutNd { port, ip, mac, .. } => {
            string_port(symtab, port)?;
            let w: &[u32] = if matches!(a, Action::PutArp { .. }) {
                &[32]
            } else {
                &[128]
            };
            int_width(symtab, ip, w, "the address")?;
            int_width(symtab, mac, &[48], "the Ethernet address")
        }
        Action::PutFdb { port, mac, .. } => {
            string_port(symtab, port)?;
            int_width(symtab, mac, &[48], "the Ethernet address")
        }
        Action::BindVport { parent, .. } | Action::HandleSvcCheck { port: parent, .. } => {
            string_port(symtab, parent)
        }
        Action::Result { dst, func, span } => check_result(symtab, dst, func, *span),
        Action::Select { dst, choices, span } => {
            let r = lvalue(symtab, dst, ctx)?;
            if r.is_string() {
                return Err(err(ErrorKind::Type, dst.span, "select() stores an integer"));
            }
            if choices.len() < 2 {
                return Err(err(
                    ErrorKind::Syntax,
                    *span,
                    "select() needs at least two choices",
                ));
            }
            for (v, _) in choices {
                if u32::from(*v) >= (1u32 << r.width.min(16)) && r.width < 16 {
                    return Err(err(
                        ErrorKind::Width,
                        *span,
                        format!("choice {v} does not fit in `{dst}` ({} bits)", r.width),
                    ));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn check_result(symtab: &SymbolTable, dst: &FieldRef, func: &ResultFn, span: Span) -> Result<()> {
    let r = lvalue(symtab, dst, Ctx::Top)?;
    let want_bit = !matches!(func, ResultFn::GetFdb { .. });
    if want_bit && (r.is_string() || r.width != 1) {
        return Err(err(
            ErrorKind::Type,
            dst.span,
            format!(
                "`{}` stores its result in a 1-bit field, but `{dst}` is {}",
                func.name(),
                describe_width(&r)
            ),
        )
        .with_help("use a one-bit subfield, e.g. `reg0[3]`"));
    }
    match func {
        ResultFn::GetFdb { mac } => {
            if !r.is_string() {
                return Err(err(
                    ErrorKind::Type,
                    dst.span,
                    "get_fdb() stores a port name: assign it to `outport`",
                ));
            }
            int_width(symtab, mac, &[48], "the Ethernet address")
        }
        ResultFn::LookupArp { port, ip, mac } | ResultFn::LookupNd { port, ip, mac } => {
            string_port(symtab, port)?;
            let w: &[u32] = if matches!(func, ResultFn::LookupArp { .. }) {
                &[32]
            } else {
                &[128]
            };
            int_width(symtab, ip, w, "the address")?;
            int_width(symtab, mac, &[48], "the Ethernet address")
        }
        ResultFn::LookupArpIp { port, ip } | ResultFn::LookupNdIp { port, ip } => {
            string_port(symtab, port)?;
            let w: &[u32] = if matches!(func, ResultFn::LookupArpIp { .. }) {
                &[32]
            } else {
                &[128]
            };
            int_width(symtab, ip, w, "the address")
        }
        ResultFn::LookupFdb { port, mac } => {
            string_port(symtab, port)?;
            int_width(symtab, mac, &[48], "the Ethernet address")
        }
        ResultFn::PutDhcpOpts { opts, .. } | ResultFn::PutNdRaOpts { opts } => {
            for (name, v) in opts {
                if let OptValue::Field(f) = v {
                    rvalue(symtab, f)?;
                }
                if name.is_empty() {
                    return Err(err(ErrorKind::Syntax, span, "option without a name"));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
