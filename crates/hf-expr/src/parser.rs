//! The match parser (and the token cursor the action parser shares).
//!
//! Grammar (ovn-sb(5)): `||` and `&&` may not be mixed without parentheses; `!` applied to a
//! relation needs parentheses; constants may come first; `a <= f <= b` is a range.

use crate::ast::{Expr, FieldRef, RelOp, Rhs, Subscript, Term, Value};
use crate::constant::{Constant, Format};
use crate::diag::{ErrorKind, ParseError, Result, Span};
use crate::lexer::{Tok, Token, tokenize};

/// Deepest nesting of parentheses and blocks accepted (keeps recursion bounded on any input).
pub const MAX_DEPTH: usize = 64;

/// A cursor over tokens.
#[derive(Debug)]
pub(crate) struct Cursor {
    toks: Vec<Token>,
    pos: usize,
    pub(crate) depth: usize,
}

impl Cursor {
    pub(crate) fn new(src: &str) -> Result<Self> {
        Ok(Self {
            toks: tokenize(src)?,
            pos: 0,
            depth: 0,
        })
    }

    pub(crate) fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    pub(crate) fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    pub(crate) fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span
    }

    pub(crate) fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1).min(self.toks.len() - 1)].span
    }

    /// Consumes the current token and returns it (tokens are never revisited, so it is moved
    /// out rather than cloned; its span stays behind for [`Cursor::prev_span`]).
    pub(crate) fn bump(&mut self) -> Token {
        let last = self.toks.len() - 1;
        if self.pos < last {
            let slot = &mut self.toks[self.pos];
            let span = slot.span;
            self.pos += 1;
            std::mem::replace(
                slot,
                Token {
                    tok: Tok::End,
                    span,
                },
            )
        } else {
            self.toks[last].clone()
        }
    }

    pub(crate) fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.bump();
            true
        } else {
            false
        }
    }

    pub(crate) fn error(&self, expected: &str) -> ParseError {
        ParseError::new(
            ErrorKind::Syntax,
            self.span(),
            format!(
                "syntax error at {}: expected {expected}",
                self.peek().describe()
            ),
        )
    }

    pub(crate) fn expect(&mut self, t: &Tok, what: &str) -> Result<Span> {
        if self.peek() == t {
            Ok(self.bump().span)
        } else {
            Err(self.error(what))
        }
    }

    pub(crate) fn ident(&mut self, what: &str) -> Result<(String, Span)> {
        match self.peek() {
            Tok::Ident(_) => {
                let t = self.bump();
                match t.tok {
                    Tok::Ident(s) => Ok((s, t.span)),
                    _ => Err(self.error(what)),
                }
            }
            _ => Err(self.error(what)),
        }
    }

    pub(crate) fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ParseError::new(
                ErrorKind::Syntax,
                self.span(),
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    /// A field reference: a name and an optional subscript.
    pub(crate) fn field_ref(&mut self) -> Result<FieldRef> {
        let (name, span) = self.ident("a field name")?;
        self.field_rest(name, span)
    }

    pub(crate) fn field_rest(&mut self, name: String, span: Span) -> Result<FieldRef> {
        let mut sub = None;
        let mut end = span;
        if self.eat(&Tok::LSquare) {
            let lo = self.small_int("a bit index")?;
            sub = Some(if self.eat(&Tok::Ellipsis) {
                let hi = self.small_int("the last bit index")?;
                if hi < lo {
                    return Err(ParseError::new(
                        ErrorKind::Syntax,
                        self.prev_span(),
                        format!("bit range `[{lo}..{hi}]` is backwards"),
                    )
                    .with_help(format!("write `[{hi}..{lo}]`")));
                }
                Subscript::Range(lo, hi)
            } else {
                Subscript::Bit(lo)
            });
            end = self.expect(&Tok::RSquare, "`]`")?;
        }
        Ok(FieldRef {
            name,
            sub,
            span: span.to(end),
        })
    }

    pub(crate) fn small_int(&mut self, what: &str) -> Result<u32> {
        match self.peek() {
            Tok::Const(c)
                if c.mask.is_none() && matches!(c.format, Format::Decimal | Format::Hex) =>
            {
                let v = c.value;
                let span = self.span();
                self.bump();
                u32::try_from(v).map_err(|_| {
                    ParseError::new(
                        ErrorKind::Width,
                        span,
                        format!("{v} is too large for {what}"),
                    )
                })
            }
            _ => Err(self.error(what)),
        }
    }

    /// A single value: constant, string, `$set`, `@group` or `^template`.
    pub(crate) fn term(&mut self) -> Option<Term> {
        let value = match self.peek() {
            Tok::Const(c) => Value::Const(*c),
            Tok::Str(s) => Value::Str(s.clone()),
            Tok::AddrSet(s) => Value::AddrSet(s.clone()),
            Tok::PortGroup(s) => Value::PortGroup(s.clone()),
            Tok::Template(s) => Value::Template(s.clone()),
            _ => return None,
        };
        let span = self.bump().span;
        Some(Term { value, span })
    }
}

fn relop(t: &Tok) -> Option<RelOp> {
    Some(match t {
        Tok::Eq => RelOp::Eq,
        Tok::Ne => RelOp::Ne,
        Tok::Lt => RelOp::Lt,
        Tok::Le => RelOp::Le,
        Tok::Gt => RelOp::Gt,
        Tok::Ge => RelOp::Ge,
        _ => return None,
    })
}

/// Parses match text into a syntax tree without consulting a symbol table.
pub fn parse_match_text(src: &str) -> Result<Expr> {
    let mut c = Cursor::new(src)?;
    let e = parse_or_and(&mut c)?;
    if *c.peek() != Tok::End {
        let msg = match c.peek() {
            Tok::RParen => "an operator or end of input (unbalanced `)`)",
            _ => "`&&`, `||` or end of input",
        };
        let e = c.error(msg);
        return Err(if *c.peek() == Tok::Assign {
            e.with_help("comparisons are written `==`; `=` assigns, in actions")
        } else {
            e
        });
    }
    Ok(e)
}

fn parse_or_and(c: &mut Cursor) -> Result<Expr> {
    c.enter()?;
    let first = parse_not(c)?;
    let op = c.peek().clone();
    let result = if op == Tok::And || op == Tok::Or {
        let mut parts = vec![first];
        while *c.peek() == op {
            c.bump();
            parts.push(parse_not(c)?);
        }
        let other = if op == Tok::And { Tok::Or } else { Tok::And };
        if *c.peek() == other {
            return Err(ParseError::new(
                ErrorKind::Syntax,
                c.span(),
                "`&&` and `||` must be parenthesized when used together",
            )
            .with_help("add parentheses to say which binds first, e.g. `(a && b) || c`"));
        }
        if op == Tok::And {
            Expr::and(parts)
        } else {
            Expr::or(parts)
        }
    } else {
        first
    };
    c.depth -= 1;
    Ok(result)
}

fn parse_not(c: &mut Cursor) -> Result<Expr> {
    if *c.peek() == Tok::Not {
        let bang = c.bump().span;
        c.enter()?;
        let parenthesized = *c.peek() == Tok::LParen;
        let inner = parse_not(c)?;
        c.depth -= 1;
        if !parenthesized && matches!(inner, Expr::Cmp { .. } | Expr::Range { .. }) {
            return Err(ParseError::new(
                ErrorKind::Syntax,
                bang.to(c.prev_span()),
                "`!` applied to a relation must be parenthesized",
            )
            .with_help("write `!(a == b)`, or `a != b`"));
        }
        return Ok(Expr::Not(Box::new(inner)));
    }
    parse_primary(c)
}

fn parse_primary(c: &mut Cursor) -> Result<Expr> {
    if matches!(c.peek(), Tok::Ident(_)) {
        let t = c.bump();
        let Tok::Ident(name) = t.tok else {
            return Err(c.error("a field"));
        };
        return parse_ident_primary(c, name, t.span);
    }
    match c.peek() {
        Tok::LParen => {
            c.bump();
            let e = parse_or_and(c)?;
            c.expect(&Tok::RParen, "`)`")?;
            Ok(e)
        }
        Tok::Const(_) | Tok::Str(_) | Tok::AddrSet(_) | Tok::PortGroup(_) | Tok::Template(_) => {
            parse_const_first(c)
        }
        Tok::LBrace => {
            Err(c.error("a field or constant (a set `{...}` must follow a relational operator)"))
        }
        _ => Err(c.error("a field, constant, `!` or `(`")),
    }
}

fn parse_ident_primary(c: &mut Cursor, name: String, span: Span) -> Result<Expr> {
    match name.as_str() {
        "is_chassis_resident" if *c.peek() == Tok::LParen => {
            let start = span;
            c.bump();
            let port = match c.bump() {
                Token {
                    tok: Tok::Str(s), ..
                } => s,
                t => {
                    return Err(ParseError::new(
                        ErrorKind::Type,
                        t.span,
                        format!(
                            "is_chassis_resident() takes a port name string, not {}",
                            t.tok.describe()
                        ),
                    )
                    .with_help("write is_chassis_resident(\"PORT\")"));
                }
            };
            let end = c.expect(&Tok::RParen, "`)`")?;
            Ok(Expr::ChassisResident {
                port,
                span: start.to(end),
            })
        }
        _ => {
            let field = c.field_rest(name, span)?;
            let Some(op) = relop(c.peek()) else {
                return Ok(Expr::Field(field));
            };
            c.bump();
            let rhs = parse_rhs(c)?;
            Ok(Expr::Cmp { field, op, rhs })
        }
    }
}

fn parse_const_first(c: &mut Cursor) -> Result<Expr> {
    {
        {
            let low = c.term().ok_or_else(|| c.error("a constant"))?;
            let Some(op) = relop(c.peek()) else {
                return match low.value {
                    Value::Const(Constant {
                        value: v @ (0 | 1),
                        format: Format::Decimal,
                        mask: None,
                    }) => Ok(Expr::Bool(v == 1)),
                    Value::Const(_) => Err(ParseError::new(
                        ErrorKind::Syntax,
                        low.span,
                        "a constant on its own must be 0 or 1",
                    )
                    .with_help("compare it with a field, e.g. `tcp.dst == 80`")),
                    _ => Err(c.error("a relational operator after a value")),
                };
            };
            c.bump();
            let field = c.field_ref()?;
            if let Some(op2) = relop(c.peek()) {
                let ok = matches!((op, op2), (RelOp::Lt | RelOp::Le, RelOp::Lt | RelOp::Le))
                    || matches!((op, op2), (RelOp::Gt | RelOp::Ge, RelOp::Gt | RelOp::Ge));
                if !ok {
                    return Err(ParseError::new(
                        ErrorKind::Syntax,
                        c.span(),
                        "range tests must use `<`/`<=` on both sides or `>`/`>=` on both sides",
                    ));
                }
                c.bump();
                let high = c
                    .term()
                    .ok_or_else(|| c.error("a constant to end the range"))?;
                return Ok(Expr::Range {
                    field,
                    low,
                    low_op: op,
                    high_op: op2,
                    high,
                });
            }
            Ok(Expr::Cmp {
                field,
                op: op.flip(),
                rhs: Rhs::One(low),
            })
        }
    }
}

fn parse_rhs(c: &mut Cursor) -> Result<Rhs> {
    if *c.peek() == Tok::LBrace {
        let open = c.bump().span;
        let mut v = Vec::new();
        while *c.peek() != Tok::RBrace {
            let t = c.term().ok_or_else(|| c.error("a constant or `}`"))?;
            v.push(t);
            c.eat(&Tok::Comma);
        }
        let close = c.bump().span;
        if v.is_empty() {
            return Err(
                ParseError::new(ErrorKind::Syntax, open.to(close), "empty set `{}`")
                    .with_help("a set needs at least one value"),
            );
        }
        return Ok(Rhs::Set(v));
    }
    c.term()
        .map(Rhs::One)
        .ok_or_else(|| c.error("a constant, string, set or `$name`/`@name`"))
}
