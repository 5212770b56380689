//! Spans and the one error type of the crate, rendered like rustc's diagnostics.

use std::fmt;

/// A byte range in the text being parsed.
///
/// Spans never take part in equality or hashing: two syntax trees are equal when they say the
/// same thing, wherever their text came from. That is what makes print→parse comparable.
#[derive(Clone, Copy, Default, Eq)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// A span from `start` to `end`.
    pub const fn new(start: usize, end: usize) -> Self {
        Self { start, end }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

impl PartialEq for Span {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::hash::Hash for Span {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// What went wrong, by class. The golden tables cover every class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The text cannot be split into tokens (bad number, unterminated string, stray character).
    Lex,
    /// The tokens do not form a match or an action list.
    Syntax,
    /// A name that is not in the symbol table.
    UnknownSymbol,
    /// An action name that does not exist.
    UnknownAction,
    /// A well-formed construct applied to the wrong kind of field or value.
    Type,
    /// A constant that does not fit where it is used.
    Width,
    /// Parsing under a feature level met a construct outside it.
    Feature,
    /// A lowering was asked for a construct that has no older spelling.
    Lowering,
    /// Normalisation met something it cannot expand (for example an unknown set's contents).
    Normalize,
}

impl ErrorKind {
    /// The lower-case name used in the golden tables.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Lex => "lex",
            ErrorKind::Syntax => "syntax",
            ErrorKind::UnknownSymbol => "unknown-symbol",
            ErrorKind::UnknownAction => "unknown-action",
            ErrorKind::Type => "type",
            ErrorKind::Width => "width",
            ErrorKind::Feature => "feature",
            ErrorKind::Lowering => "lowering",
            ErrorKind::Normalize => "normalize",
        }
    }
}

/// An error in match or action text, pointing at the offending token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    /// The class of error.
    pub kind: ErrorKind,
    /// Where in the text.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// What would be valid instead, when there is something useful to say.
    pub help: Option<String>,
}

impl ParseError {
    /// A new error without help.
    pub fn new(kind: ErrorKind, span: Span, message: impl Into<String>) -> Self {
        Self {
            kind,
            span,
            message: message.into(),
            help: None,
        }
    }

    /// Adds a `help:` line.
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Renders the error against its source text, rustc style:
    ///
    /// ```text
    /// error[type]: ...
    ///  --> match:1:5
    ///   |
    /// 1 | tcp.dst < "x"
    ///   |           ^^^
    ///   = help: ...
    /// ```
    pub fn render(&self, src: &str, origin: &str) -> String {
        let mut start = self.span.start.min(src.len());
        while !src.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = self.span.end.clamp(start, src.len());
        while !src.is_char_boundary(end) {
            end += 1;
        }
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line_no = src[..start].matches('\n').count() + 1;
        let line = &src[line_start..line_end];
        let col = src[line_start..start].chars().count();
        let width = src[start..end.min(line_end)].chars().count().max(1);
        let gutter = line_no.to_string().len();
        let pad = " ".repeat(gutter);
        let mut out = format!(
            "error[{}]: {}\n{pad}--> {origin}:{line_no}:{}\n{pad} |\n{line_no} | {line}\n{pad} | {}{}\n",
            self.kind.name(),
            self.message,
            col + 1,
            " ".repeat(col),
            "^".repeat(width)
        );
        if let Some(help) = &self.help {
            out.push_str(&format!("{pad} = help: {help}\n"));
        }
        out
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = ParseError> = std::result::Result<T, E>;
