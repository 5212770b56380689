//! Atoms: the scalar values of RFC 7047 (integer, real, boolean, string, uuid).

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::{OvsdbError, Result};

/// The five atomic types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AtomicType {
    /// 64-bit signed integer.
    Integer,
    /// IEEE double.
    Real,
    /// true/false.
    Boolean,
    /// UTF-8 string.
    String,
    /// A row reference or plain UUID.
    Uuid,
}

impl AtomicType {
    /// Parse the schema spelling.
    pub fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "integer" => AtomicType::Integer,
            "real" => AtomicType::Real,
            "boolean" => AtomicType::Boolean,
            "string" => AtomicType::String,
            "uuid" => AtomicType::Uuid,
            _ => return None,
        })
    }

    /// The schema spelling.
    pub fn name(self) -> &'static str {
        match self {
            AtomicType::Integer => "integer",
            AtomicType::Real => "real",
            AtomicType::Boolean => "boolean",
            AtomicType::String => "string",
            AtomicType::Uuid => "uuid",
        }
    }

    /// The value a column of this type takes when a row is inserted without it.
    pub fn default_atom(self) -> Atom {
        match self {
            AtomicType::Integer => Atom::Integer(0),
            AtomicType::Real => Atom::Real(0.0),
            AtomicType::Boolean => Atom::Boolean(false),
            AtomicType::String => Atom::String(Arc::from("")),
            AtomicType::Uuid => Atom::Uuid(Uuid::nil()),
        }
    }
}

/// One scalar value. Strings are reference-counted so that copying rows inside a transaction is
/// cheap.
#[derive(Debug, Clone)]
pub enum Atom {
    /// An integer.
    Integer(i64),
    /// A real.
    Real(f64),
    /// A boolean.
    Boolean(bool),
    /// A string.
    String(Arc<str>),
    /// A UUID.
    Uuid(Uuid),
}

impl Atom {
    /// This atom's type.
    pub fn atomic_type(&self) -> AtomicType {
        match self {
            Atom::Integer(_) => AtomicType::Integer,
            Atom::Real(_) => AtomicType::Real,
            Atom::Boolean(_) => AtomicType::Boolean,
            Atom::String(_) => AtomicType::String,
            Atom::Uuid(_) => AtomicType::Uuid,
        }
    }

    /// A string atom.
    pub fn string(s: &str) -> Atom {
        Atom::String(Arc::from(s))
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }

    /// The UUID, if this is one.
    pub fn as_uuid(&self) -> Option<Uuid> {
        match self {
            Atom::Uuid(u) => Some(*u),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The wire form.
    pub fn to_json(&self) -> Value {
        match self {
            Atom::Integer(i) => json!(i),
            Atom::Real(r) => real_to_json(*r),
            Atom::Boolean(b) => json!(b),
            Atom::String(s) => Value::String(s.to_string()),
            Atom::Uuid(u) => json!(["uuid", u.to_string()]),
        }
    }

    /// Append the wire form to `out` (the same text `to_json().to_string()` gives, without
    /// building a `Value`).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        match self {
            Atom::Integer(i) => {
                let _ = write!(out, "{i}");
            }
            // serde_json's float formatting, so the text is identical to `to_json`'s.
            Atom::Real(_) => {
                let _ = serde_json::to_writer(&mut *out, &self.to_json());
            }
            Atom::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Atom::String(s) => {
                let _ = serde_json::to_writer(&mut *out, &**s);
            }
            Atom::Uuid(u) => {
                out.extend_from_slice(b"[\"uuid\",\"");
                let mut buf = [0u8; 36];
                out.extend_from_slice(u.hyphenated().encode_lower(&mut buf).as_bytes());
                out.extend_from_slice(b"\"]");
            }
        }
    }

    /// Parse the wire form of an atom of type `ty`. `named` resolves `["named-uuid", NAME]`
    /// (only inside transactions); without it a named UUID is a syntax error.
    pub fn from_json(
        ty: AtomicType,
        v: &Value,
        named: &mut dyn FnMut(&str) -> Result<Uuid>,
    ) -> Result<Atom> {
        let bad = || {
            OvsdbError::syntax(format!(
                "expected {} but found {}",
                ty.name(),
                describe_json(v)
            ))
        };
        match ty {
            AtomicType::Integer => match v {
                Value::Number(n) => n.as_i64().map(Atom::Integer).ok_or_else(bad),
                _ => Err(bad()),
            },
            AtomicType::Real => match v {
                Value::Number(n) => n.as_f64().map(Atom::Real).ok_or_else(bad),
                _ => Err(bad()),
            },
            AtomicType::Boolean => v.as_bool().map(Atom::Boolean).ok_or_else(bad),
            AtomicType::String => v.as_str().map(Atom::string).ok_or_else(bad),
            AtomicType::Uuid => match v.as_array().map(Vec::as_slice) {
                Some([Value::String(tag), Value::String(s)]) if tag == "uuid" => {
                    parse_uuid(s).map(Atom::Uuid)
                }
                Some([Value::String(tag), Value::String(s)]) if tag == "named-uuid" => {
                    named(s).map(Atom::Uuid)
                }
                _ => Err(bad()),
            },
        }
    }
}

/// Parse a UUID in its 36-character text form, with a syntax error naming the text.
pub fn parse_uuid(s: &str) -> Result<Uuid> {
    if s.len() != 36 {
        return Err(OvsdbError::syntax(format!("\"{s}\" is not a valid UUID")));
    }
    Uuid::parse_str(s).map_err(|_| OvsdbError::syntax(format!("\"{s}\" is not a valid UUID")))
}

/// Reals that are whole numbers still print with a fraction, as ovsdb-server does, so that a
/// client never reads a real back as an integer.
fn real_to_json(r: f64) -> Value {
    serde_json::Number::from_f64(r)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// A short description of a JSON value for error messages.
pub fn describe_json(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..s.floor_char_boundary(57)])
    } else {
        s
    }
}

impl PartialEq for Atom {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Atom {}

impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Atom::Integer(a), Atom::Integer(b)) => a.cmp(b),
            (Atom::Real(a), Atom::Real(b)) => a.total_cmp(b),
            (Atom::Boolean(a), Atom::Boolean(b)) => a.cmp(b),
            (Atom::String(a), Atom::String(b)) => a.cmp(b),
            (Atom::Uuid(a), Atom::Uuid(b)) => a.cmp(b),
            _ => self.atomic_type().cmp(&other.atomic_type()),
        }
    }
}

impl std::hash::Hash for Atom {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Atom::Integer(i) => i.hash(state),
            Atom::Real(r) => r.to_bits().hash(state),
            Atom::Boolean(b) => b.hash(state),
            Atom::String(s) => s.hash(state),
            Atom::Uuid(u) => u.hash(state),
        }
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Integer(i) => write!(f, "{i}"),
            Atom::Real(r) => write!(f, "{r}"),
            Atom::Boolean(b) => write!(f, "{b}"),
            Atom::String(s) => write!(f, "{s:?}"),
            Atom::Uuid(u) => write!(f, "{u}"),
        }
    }
}
