//! The lexer: text to tokens with spans. Numbers, addresses and masks are recognised here, as in
//! OVN, so `10.0.0.0/24`, `fe80::1` and `00:00:00:00:00:01/ff:ff:ff:00:00:00` are single tokens.

use crate::constant::{Constant, Format, Mask};
use crate::diag::{ErrorKind, ParseError, Result, Span};
use std::net::{Ipv4Addr, Ipv6Addr};

/// One token.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Tok {
    /// A name: letters, digits, `_` and `.`, not starting with a digit.
    Ident(String),
    /// A numeric constant, possibly masked.
    Const(Constant),
    /// A JSON string, decoded.
    Str(String),
    /// `$name`: an address set.
    AddrSet(String),
    /// `@name`: a port group.
    PortGroup(String),
    /// `^name`: a chassis template variable.
    Template(String),
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `[`
    LSquare,
    /// `]`
    RSquare,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `!`
    Not,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `..`
    Ellipsis,
    /// `,`
    Comma,
    /// `;`
    Semicolon,
    /// `=`
    Assign,
    /// `<->`
    Exchange,
    /// `--`
    Decrement,
    /// `:`
    Colon,
    /// `-`
    Minus,
    /// End of input.
    End,
}

impl Tok {
    /// How the token is quoted in error messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Const(c) => format!("`{c}`"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::AddrSet(s) => format!("`${s}`"),
            Tok::PortGroup(s) => format!("`@{s}`"),
            Tok::Template(s) => format!("`^{s}`"),
            Tok::End => "end of input".to_string(),
            other => format!("`{}`", other.punct()),
        }
    }

    fn punct(&self) -> &'static str {
        match self {
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::LSquare => "[",
            Tok::RSquare => "]",
            Tok::Eq => "==",
            Tok::Ne => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::Not => "!",
            Tok::And => "&&",
            Tok::Or => "||",
            Tok::Ellipsis => "..",
            Tok::Comma => ",",
            Tok::Semicolon => ";",
            Tok::Assign => "=",
            Tok::Exchange => "<->",
            Tok::Decrement => "--",
            Tok::Colon => ":",
            Tok::Minus => "-",
            _ => "?",
        }
    }
}

/// A token and where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// The token.
    pub tok: Tok,
    /// Its span.
    pub span: Span,
}

fn is_id1(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'.'
}

fn is_idn(c: u8) -> bool {
    is_id1(c) || c.is_ascii_digit()
}

/// Splits `src` into tokens, ending with [`Tok::End`].
pub fn tokenize(src: &str) -> Result<Vec<Token>> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::with_capacity(src.len() / 3 + 1);
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let next = b.get(i + 1).copied().unwrap_or(0);
        if c == b'/' && next == b'/' {
            i = src[i..].find('\n').map_or(b.len(), |n| i + n);
            continue;
        }
        if c == b'/' && next == b'*' {
            match src[i + 2..].find("*/") {
                Some(n) => i += n + 4,
                None => {
                    return Err(ParseError::new(
                        ErrorKind::Lex,
                        Span::new(i, b.len()),
                        "unterminated comment",
                    )
                    .with_help("close it with `*/`"));
                }
            }
            continue;
        }
        let punct = match (c, next) {
            (b'<', b'-') if b.get(i + 2) == Some(&b'>') => Some((Tok::Exchange, 3)),
            (b'=', b'=') => Some((Tok::Eq, 2)),
            (b'!', b'=') => Some((Tok::Ne, 2)),
            (b'<', b'=') => Some((Tok::Le, 2)),
            (b'>', b'=') => Some((Tok::Ge, 2)),
            (b'&', b'&') => Some((Tok::And, 2)),
            (b'|', b'|') => Some((Tok::Or, 2)),
            (b'.', b'.') => Some((Tok::Ellipsis, 2)),
            (b'-', b'-') => Some((Tok::Decrement, 2)),
            (b':', n) if n != b':' => Some((Tok::Colon, 1)),
            _ => None,
        };
        let tok = if let Some((t, n)) = punct {
            i += n;
            t
        } else if c == b'"' {
            let (s, n) = lex_string(src, i)?;
            i = n;
            Tok::Str(s)
        } else if c == b'$' || c == b'@' || c == b'^' {
            let mut j = i + 1;
            while j < b.len() && is_idn(b[j]) {
                j += 1;
            }
            if j == i + 1 || b[i + 1].is_ascii_digit() {
                let what = match c {
                    b'$' => "an address set",
                    b'@' => "a port group",
                    _ => "a template variable",
                };
                return Err(ParseError::new(
                    ErrorKind::Lex,
                    Span::new(i, j.max(i + 1)),
                    format!("`{}` must be followed by {what} name", c as char),
                ));
            }
            let name = src[i + 1..j].to_string();
            i = j;
            match c {
                b'$' => Tok::AddrSet(name),
                b'@' => Tok::PortGroup(name),
                _ => Tok::Template(name),
            }
        } else if c.is_ascii_digit()
            || c == b':'
            || (c.is_ascii_hexdigit() && looks_like_address(b, i))
        {
            let (k, n) = lex_masked_constant(src, i)?;
            i = n;
            Tok::Const(k)
        } else if is_id1(c) {
            let mut j = i + 1;
            while j < b.len() && is_idn(b[j]) {
                j += 1;
            }
            let name = src[i..j].to_string();
            i = j;
            Tok::Ident(name)
        } else {
            i += 1;
            match c {
                b'(' => Tok::LParen,
                b')' => Tok::RParen,
                b'{' => Tok::LBrace,
                b'}' => Tok::RBrace,
                b'[' => Tok::LSquare,
                b']' => Tok::RSquare,
                b'<' => Tok::Lt,
                b'>' => Tok::Gt,
                b'!' => Tok::Not,
                b',' => Tok::Comma,
                b';' => Tok::Semicolon,
                b'=' => Tok::Assign,
                b'-' => Tok::Minus,
                _ => {
                    let ch = src[start..].chars().next().unwrap_or('?');
                    return Err(ParseError::new(
                        ErrorKind::Lex,
                        Span::new(start, start + ch.len_utf8()),
                        format!("unexpected character `{}`", ch.escape_default()),
                    ));
                }
            }
        };
        out.push(Token {
            tok,
            span: Span::new(start, i),
        });
    }
    out.push(Token {
        tok: Tok::End,
        span: Span::new(b.len(), b.len()),
    });
    Ok(out)
}

/// The run of characters that may make up an address: hex digits, `:` and `.`.
fn addr_run(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < b.len() && (b[j].is_ascii_hexdigit() || b[j] == b':' || b[j] == b'.') {
        j += 1;
    }
    j
}

/// Whether a word starting with a hex letter is an IPv6 or Ethernet address rather than a name.
fn looks_like_address(b: &[u8], i: usize) -> bool {
    let j = addr_run(b, i);
    if j < b.len() && is_idn(b[j]) {
        return false;
    }
    let s = std::str::from_utf8(&b[i..j]).unwrap_or("");
    s.contains(':') && (parse_mac(s).is_some() || s.parse::<Ipv6Addr>().is_ok())
}

/// Parses an Ethernet address as the logical-flow language (and OVS's `eth_addr_from_string`)
/// writes it: six colon-separated groups of one or two hex digits (`0:0:0:0:0:1`,
/// `0a:00:00:00:00:01`); its 48 bits in the low end of the result.
pub fn parse_mac(s: &str) -> Option<u128> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return None;
    }
    let mut v: u128 = 0;
    for p in parts {
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        v = (v << 8) | u128::from(u8::from_str_radix(p, 16).ok()?);
    }
    Some(v)
}

fn lex_masked_constant(src: &str, i: usize) -> Result<(Constant, usize)> {
    let (mut k, mut n) = lex_constant(src, i)?;
    let b = src.as_bytes();
    if n < b.len() && b[n] == b'/' && !src[n..].starts_with("//") && !src[n..].starts_with("/*") {
        let (m, end) = lex_constant(src, n + 1).map_err(|e| {
            ParseError::new(
                ErrorKind::Lex,
                Span::new(n, e.span.end),
                "bad mask after `/`",
            )
            .with_help("a mask is a constant in the same form, or a prefix length")
        })?;
        let span = Span::new(i, end);
        let mask = if m.format == Format::Decimal && matches!(k.format, Format::Ipv4 | Format::Ipv6)
        {
            let max = if k.format == Format::Ipv4 { 32 } else { 128 };
            if m.value > max {
                return Err(ParseError::new(
                    ErrorKind::Lex,
                    span,
                    format!("prefix length {} exceeds {max}", m.value),
                ));
            }
            Mask::Prefix(m.value as u8)
        } else {
            if m.value | k.value != m.value {
                return Err(ParseError::new(
                    ErrorKind::Lex,
                    span,
                    "value has 1-bits where the mask has 0-bits",
                )
                .with_help("clear the value's bits outside the mask"));
            }
            Mask::Bits(m.value, m.format)
        };
        if let Mask::Prefix(p) = mask {
            let w = if k.format == Format::Ipv4 { 32 } else { 128 };
            let bits = crate::constant::prefix_mask(w, p);
            if k.value & !bits != 0 {
                return Err(ParseError::new(
                    ErrorKind::Lex,
                    span,
                    "address has 1-bits outside the prefix",
                )
                .with_help(format!(
                    "write the network address, e.g. `{}`",
                    Constant {
                        value: k.value & bits,
                        format: k.format,
                        mask: Some(mask)
                    }
                )));
            }
        }
        k.mask = Some(mask);
        n = end;
    }
    Ok((k, n))
}

fn lex_constant(src: &str, i: usize) -> Result<(Constant, usize)> {
    let b = src.as_bytes();
    let bad =
        |end: usize, msg: String| Err(ParseError::new(ErrorKind::Lex, Span::new(i, end), msg));
    if i >= b.len() {
        return bad(i, "expected a constant".into());
    }
    // Hexadecimal.
    if src[i..].starts_with("0x") || src[i..].starts_with("0X") {
        let mut j = i + 2;
        while j < b.len() && b[j].is_ascii_hexdigit() {
            j += 1;
        }
        if j == i + 2 {
            return bad(j, "`0x` must be followed by hex digits".into());
        }
        let digits = src[i + 2..j].trim_start_matches('0');
        if digits.len() > 32 {
            return bad(j, "hexadecimal constant wider than 128 bits".into());
        }
        if j < b.len() && is_idn(b[j]) {
            return bad(
                j + 1,
                format!("invalid hexadecimal constant `{}`", &src[i..=j]),
            );
        }
        let value = if digits.is_empty() {
            0
        } else {
            u128::from_str_radix(digits, 16).unwrap_or(0)
        };
        return Ok((Constant::new(value, Format::Hex), j));
    }
    let run_end = addr_run(b, i);
    let run = &src[i..run_end];
    if run.contains(':') {
        if let Some(v) = parse_mac(run) {
            return Ok((Constant::new(v, Format::Mac), run_end));
        }
        if let Ok(a) = run.parse::<Ipv6Addr>() {
            return Ok((Constant::new(u128::from(a), Format::Ipv6), run_end));
        }
    }
    // IPv4: digits and dots.
    let mut j = i;
    while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
        j += 1;
    }
    // `0..15` is two integers and an ellipsis, not an address.
    let dotted = &src[i..j];
    let dots = dotted.bytes().filter(|&d| d == b'.').count();
    let ellipsis = dotted.as_bytes().windows(2).any(|w| w == b"..");
    if dots == 3 && !ellipsis {
        return match dotted.parse::<Ipv4Addr>() {
            Ok(a) if !(j < b.len() && is_idn(b[j])) => {
                Ok((Constant::new(u128::from(u32::from(a)), Format::Ipv4), j))
            }
            _ => bad(j, format!("invalid IPv4 address `{}`", &src[i..j])),
        };
    }
    let mut j = i;
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    if j == i {
        // Not a number at all: quote the whole (possibly multi-byte) character.
        let end = run_end.max(i + src[i..].chars().next().map_or(1, char::len_utf8));
        return bad(end, format!("invalid constant `{}`", &src[i..end]));
    }
    if j < b.len() && (is_id1(b[j]) && b[j] != b'.' || b[j] == b':') {
        let mut k = j;
        while k < b.len() && (is_idn(b[k]) || b[k] == b':') {
            k += 1;
        }
        return bad(k, format!("invalid numeric constant `{}`", &src[i..k]));
    }
    if j < b.len() && b[j] == b'.' && !src[j..].starts_with("..") {
        let mut k = j;
        while k < b.len() && (b[k].is_ascii_digit() || b[k] == b'.') {
            k += 1;
        }
        return bad(k, format!("invalid numeric constant `{}`", &src[i..k])).map_err(
            |e: ParseError| e.with_help("an IPv4 address has four parts, e.g. `10.0.0.1`"),
        );
    }
    match src[i..j].parse::<u128>() {
        Ok(v) => Ok((Constant::new(v, Format::Decimal), j)),
        Err(_) => bad(j, "decimal constant wider than 128 bits".into()),
    }
}

fn lex_string(src: &str, start: usize) -> Result<(String, usize)> {
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        let pos = start + 1 + off;
        match c {
            '"' => return Ok((out, pos + 1)),
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                match e {
                    '"' => out.push('"'),
                    '\\' => out.push('\\'),
                    '/' => out.push('/'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'u' => {
                        let hex: String = (0..4)
                            .filter_map(|_| chars.next().map(|(_, h)| h))
                            .collect();
                        let ch = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                        match ch {
                            Some(ch) if hex.len() == 4 => out.push(ch),
                            _ => {
                                return Err(ParseError::new(
                                    ErrorKind::Lex,
                                    Span::new(pos, pos + 2 + hex.len()),
                                    "bad `\\u` escape in string",
                                ));
                            }
                        }
                    }
                    other => {
                        return Err(ParseError::new(
                            ErrorKind::Lex,
                            Span::new(pos, pos + 1 + other.len_utf8()),
                            format!("bad escape `\\{}` in string", other.escape_default()),
                        )
                        .with_help(
                            "strings use JSON escapes: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX",
                        ));
                    }
                }
            }
            c if (c as u32) < 0x20 => {
                return Err(ParseError::new(
                    ErrorKind::Lex,
                    Span::new(pos, pos + 1),
                    "control character in string",
                ));
            }
            c => out.push(c),
        }
    }
    Err(ParseError::new(
        ErrorKind::Lex,
        Span::new(start, src.len()),
        "unterminated string",
    )
    .with_help("close the string with `\"`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s)
            .expect("lexes")
            .into_iter()
            .map(|t| t.tok)
            .collect()
    }

    #[test]
    fn addresses_starting_with_letters_are_constants_and_names_are_not() {
        assert!(matches!(
            toks("fe80::1")[0],
            Tok::Const(Constant {
                format: Format::Ipv6,
                ..
            })
        ));
        assert!(matches!(
            toks("aef0::11")[0],
            Tok::Const(Constant {
                format: Format::Ipv6,
                ..
            })
        ));
        assert!(matches!(
            toks("ff:ff:ff:ff:ff:ff")[0],
            Tok::Const(Constant {
                format: Format::Mac,
                ..
            })
        ));
        assert_eq!(toks("dead")[0], Tok::Ident("dead".into()));
        assert_eq!(toks("face.b")[0], Tok::Ident("face.b".into()));
    }

    #[test]
    fn backends_ranges_and_ports_split_where_ovn_splits_them() {
        let t = toks("10.0.0.11:8080,[aef0::11]:80 reg0[0..15] 1-2");
        let kinds: Vec<String> = t.iter().map(Tok::describe).collect();
        assert_eq!(
            kinds,
            [
                "`10.0.0.11`",
                "`:`",
                "`8080`",
                "`,`",
                "`[`",
                "`aef0::11`",
                "`]`",
                "`:`",
                "`80`",
                "`reg0`",
                "`[`",
                "`0`",
                "`..`",
                "`15`",
                "`]`",
                "`1`",
                "`-`",
                "`2`",
                "end of input"
            ]
        );
    }

    #[test]
    fn masks_and_prefixes() {
        let Tok::Const(c) = &toks("10.0.0.0/8")[0] else {
            panic!()
        };
        assert_eq!(c.mask, Some(Mask::Prefix(8)));
        let Tok::Const(c) = &toks("0x10/0xf0")[0] else {
            panic!()
        };
        assert_eq!(c.mask, Some(Mask::Bits(0xf0, Format::Hex)));
        assert_eq!(
            tokenize("1 // c\n /* d */ 2").map(|v| v.len()).ok(),
            Some(3)
        );
    }

    #[test]
    fn strings_decode_json_escapes() {
        assert_eq!(toks(r#""a\"b\\c\u00e9""#)[0], Tok::Str("a\"b\\cé".into()));
        assert_eq!(
            tokenize("\"\\u12\"").map_err(|e| e.kind),
            Err(ErrorKind::Lex)
        );
    }
}
