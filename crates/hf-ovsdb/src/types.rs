//! Column types: base types with their constraints, and key/value/min/max column types.

use serde_json::{Map, Value, json};

use crate::atom::{Atom, AtomicType, describe_json};
use crate::datum::Datum;
use crate::error::{OvsdbError, Result};

/// Strong references keep their target alive and cannot dangle; weak ones vanish with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefType {
    /// Strong reference.
    Strong,
    /// Weak reference.
    Weak,
}

/// A base type: an atomic type plus its constraints.
#[derive(Debug, Clone, PartialEq)]
pub struct BaseType {
    /// The atomic type.
    pub atomic: AtomicType,
    /// Allowed values, sorted, when the schema gives an `enum`.
    pub enum_values: Option<Vec<Atom>>,
    /// Integer range.
    pub min_integer: Option<i64>,
    /// Integer range.
    pub max_integer: Option<i64>,
    /// Real range.
    pub min_real: Option<f64>,
    /// Real range.
    pub max_real: Option<f64>,
    /// String length range, in UTF-8 characters.
    pub min_length: Option<u64>,
    /// String length range, in UTF-8 characters.
    pub max_length: Option<u64>,
    /// For UUIDs: the table referenced.
    pub ref_table: Option<String>,
    /// Index of `ref_table` in the schema (resolved when the schema is loaded).
    pub ref_table_index: Option<usize>,
    /// Strong or weak.
    pub ref_type: RefType,
}

impl BaseType {
    /// An unconstrained base type.
    pub fn simple(atomic: AtomicType) -> Self {
        BaseType {
            atomic,
            enum_values: None,
            min_integer: None,
            max_integer: None,
            min_real: None,
            max_real: None,
            min_length: None,
            max_length: None,
            ref_table: None,
            ref_table_index: None,
            ref_type: RefType::Strong,
        }
    }

    /// Parse a `<base-type>`.
    pub fn from_json(v: &Value) -> Result<Self> {
        if let Some(name) = v.as_str() {
            return AtomicType::from_name(name)
                .map(BaseType::simple)
                .ok_or_else(|| OvsdbError::syntax(format!("unknown atomic type \"{name}\"")));
        }
        let obj = v.as_object().ok_or_else(|| {
            OvsdbError::syntax(format!(
                "base type must be a string or object, not {}",
                describe_json(v)
            ))
        })?;
        let type_name = obj
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| OvsdbError::syntax("base type object needs a \"type\" string"))?;
        let atomic = AtomicType::from_name(type_name)
            .ok_or_else(|| OvsdbError::syntax(format!("unknown atomic type \"{type_name}\"")))?;
        let mut bt = BaseType::simple(atomic);
        for (k, val) in obj {
            let int = || {
                val.as_i64()
                    .ok_or_else(|| OvsdbError::syntax(format!("\"{k}\" must be an integer")))
            };
            match k.as_str() {
                "type" => {}
                "enum" => {
                    let set_type = ColumnType {
                        key: BaseType::simple(atomic),
                        value: None,
                        min: 1,
                        max: usize::MAX,
                    };
                    let d = Datum::from_json(&set_type, val, &mut |n| {
                        Err(OvsdbError::syntax(format!(
                            "named-uuid \"{n}\" not allowed in enum"
                        )))
                    })?;
                    bt.enum_values = Some(d.keys);
                }
                "minInteger" if atomic == AtomicType::Integer => bt.min_integer = Some(int()?),
                "maxInteger" if atomic == AtomicType::Integer => bt.max_integer = Some(int()?),
                "minReal" if atomic == AtomicType::Real => {
                    bt.min_real = Some(
                        val.as_f64()
                            .ok_or_else(|| OvsdbError::syntax("minReal must be a number"))?,
                    )
                }
                "maxReal" if atomic == AtomicType::Real => {
                    bt.max_real = Some(
                        val.as_f64()
                            .ok_or_else(|| OvsdbError::syntax("maxReal must be a number"))?,
                    )
                }
                "minLength" if atomic == AtomicType::String => {
                    bt.min_length = Some(
                        u64::try_from(int()?)
                            .map_err(|_| OvsdbError::syntax("minLength must not be negative"))?,
                    )
                }
                "maxLength" if atomic == AtomicType::String => {
                    bt.max_length = Some(
                        u64::try_from(int()?)
                            .map_err(|_| OvsdbError::syntax("maxLength must not be negative"))?,
                    )
                }
                "refTable" if atomic == AtomicType::Uuid => {
                    bt.ref_table = Some(
                        val.as_str()
                            .ok_or_else(|| OvsdbError::syntax("refTable must be a string"))?
                            .to_string(),
                    )
                }
                "refType" if atomic == AtomicType::Uuid => {
                    bt.ref_type = match val.as_str() {
                        Some("strong") => RefType::Strong,
                        Some("weak") => RefType::Weak,
                        _ => {
                            return Err(OvsdbError::syntax(
                                "refType must be \"strong\" or \"weak\"",
                            ));
                        }
                    }
                }
                other => {
                    return Err(OvsdbError::syntax(format!(
                        "unexpected member \"{other}\" in a base type of type {}",
                        atomic.name()
                    )));
                }
            }
        }
        if let (Some(lo), Some(hi)) = (bt.min_integer, bt.max_integer)
            && lo > hi
        {
            return Err(OvsdbError::syntax("minInteger exceeds maxInteger"));
        }
        if let (Some(lo), Some(hi)) = (bt.min_length, bt.max_length)
            && lo > hi
        {
            return Err(OvsdbError::syntax("minLength exceeds maxLength"));
        }
        Ok(bt)
    }

    /// The schema spelling (a bare string when unconstrained).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), json!(self.atomic.name()));
        if let Some(e) = &self.enum_values {
            let set: Vec<Value> = e.iter().map(Atom::to_json).collect();
            m.insert("enum".into(), json!(["set", set]));
        }
        if let Some(v) = self.min_integer {
            m.insert("minInteger".into(), json!(v));
        }
        if let Some(v) = self.max_integer {
            m.insert("maxInteger".into(), json!(v));
        }
        if let Some(v) = self.min_real {
            m.insert("minReal".into(), json!(v));
        }
        if let Some(v) = self.max_real {
            m.insert("maxReal".into(), json!(v));
        }
        if let Some(v) = self.min_length {
            m.insert("minLength".into(), json!(v));
        }
        if let Some(v) = self.max_length {
            m.insert("maxLength".into(), json!(v));
        }
        if let Some(t) = &self.ref_table {
            m.insert("refTable".into(), json!(t));
            if self.ref_type == RefType::Weak {
                m.insert("refType".into(), json!("weak"));
            }
        }
        if m.len() == 1 {
            json!(self.atomic.name())
        } else {
            Value::Object(m)
        }
    }

    /// Check an atom against this base type's constraints.
    pub fn check(&self, a: &Atom) -> Result<()> {
        if let Some(e) = &self.enum_values
            && e.binary_search(a).is_err()
        {
            let allowed: Vec<String> = e.iter().map(|x| x.to_string()).collect();
            return Err(OvsdbError::constraint(format!(
                "{a} is not one of the allowed values ({})",
                allowed.join(", ")
            )));
        }
        match a {
            Atom::Integer(i)
                if (self.min_integer.is_some_and(|lo| *i < lo)
                    || self.max_integer.is_some_and(|hi| *i > hi)) =>
            {
                return Err(OvsdbError::constraint(format!(
                    "{i} is not in the valid range {}..{}",
                    self.min_integer.map_or("".into(), |v| v.to_string()),
                    self.max_integer.map_or("".into(), |v| v.to_string())
                )));
            }
            Atom::Real(r)
                if (self.min_real.is_some_and(|lo| *r < lo)
                    || self.max_real.is_some_and(|hi| *r > hi)) =>
            {
                return Err(OvsdbError::constraint(format!(
                    "{r} is not in the valid range"
                )));
            }
            Atom::String(s) if (self.min_length.is_some() || self.max_length.is_some()) => {
                let n = s.chars().count() as u64;
                if self.min_length.is_some_and(|lo| n < lo)
                    || self.max_length.is_some_and(|hi| n > hi)
                {
                    return Err(OvsdbError::constraint(format!(
                        "\"{s}\" length {n} is not in the valid range"
                    )));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// A column's type: key, optional value (a map), and how many elements it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnType {
    /// Key type (the element type of a set).
    pub key: BaseType,
    /// Value type, for maps.
    pub value: Option<BaseType>,
    /// Minimum element count (0 or 1).
    pub min: usize,
    /// Maximum element count; `usize::MAX` for "unlimited".
    pub max: usize,
}

impl ColumnType {
    /// A plain scalar of `atomic`.
    pub fn scalar(atomic: AtomicType) -> Self {
        ColumnType {
            key: BaseType::simple(atomic),
            value: None,
            min: 1,
            max: 1,
        }
    }

    /// Parse a `<type>`.
    pub fn from_json(v: &Value) -> Result<Self> {
        if v.is_string() {
            return Ok(ColumnType {
                key: BaseType::from_json(v)?,
                value: None,
                min: 1,
                max: 1,
            });
        }
        let obj = v.as_object().ok_or_else(|| {
            OvsdbError::syntax(format!(
                "column type must be a string or object, not {}",
                describe_json(v)
            ))
        })?;
        let mut key = None;
        let mut value = None;
        let mut min = 1usize;
        let mut max = 1usize;
        for (k, val) in obj {
            match k.as_str() {
                "key" => key = Some(BaseType::from_json(val)?),
                "value" => value = Some(BaseType::from_json(val)?),
                "min" => {
                    min = val
                        .as_u64()
                        .filter(|m| *m <= 1)
                        .ok_or_else(|| OvsdbError::syntax("\"min\" must be 0 or 1"))?
                        as usize
                }
                "max" => {
                    max = match val {
                        Value::String(s) if s == "unlimited" => usize::MAX,
                        _ => val
                            .as_u64()
                            .filter(|m| *m >= 1)
                            .and_then(|m| usize::try_from(m).ok())
                            .ok_or_else(|| {
                                OvsdbError::syntax(
                                    "\"max\" must be a positive integer or \"unlimited\"",
                                )
                            })?,
                    }
                }
                other => {
                    return Err(OvsdbError::syntax(format!(
                        "unexpected member \"{other}\" in a column type"
                    )));
                }
            }
        }
        let key = key.ok_or_else(|| OvsdbError::syntax("column type object needs \"key\""))?;
        if min > max {
            return Err(OvsdbError::syntax("\"min\" exceeds \"max\""));
        }
        Ok(ColumnType {
            key,
            value,
            min,
            max,
        })
    }

    /// The schema spelling.
    pub fn to_json(&self) -> Value {
        if self.value.is_none() && self.min == 1 && self.max == 1 {
            let k = self.key.to_json();
            if k.is_string() {
                return k;
            }
        }
        let mut m = Map::new();
        m.insert("key".into(), self.key.to_json());
        if let Some(v) = &self.value {
            m.insert("value".into(), v.to_json());
        }
        if self.min != 1 {
            m.insert("min".into(), json!(self.min));
        }
        if self.max != 1 {
            m.insert(
                "max".into(),
                if self.max == usize::MAX {
                    json!("unlimited")
                } else {
                    json!(self.max)
                },
            );
        }
        Value::Object(m)
    }

    /// A map (has a value type).
    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }

    /// Whether a value of this type can hold more than one element (OVSDB's "composite"
    /// types). Diffs (update2, update3, `_is_diff` file records) carry the new value for a
    /// column that is not composite (scalars, optional values, maps of at most one pair) and
    /// the element-wise difference only for composite ones.
    pub fn is_composite(&self) -> bool {
        self.max > 1
    }

    /// Exactly one non-map element.
    pub fn is_scalar(&self) -> bool {
        self.value.is_none() && self.min == 1 && self.max == 1
    }

    /// Zero or one non-map element.
    pub fn is_optional(&self) -> bool {
        self.value.is_none() && self.min == 0 && self.max == 1
    }

    /// Whether any atom of this type is a reference (key or value).
    pub fn has_refs(&self) -> bool {
        self.key.ref_table.is_some() || self.value.as_ref().is_some_and(|v| v.ref_table.is_some())
    }

    /// Whether the key or value is a weak reference.
    pub fn has_weak_refs(&self) -> bool {
        let weak = |b: &BaseType| b.ref_table.is_some() && b.ref_type == RefType::Weak;
        weak(&self.key) || self.value.as_ref().is_some_and(weak)
    }

    /// The default datum: one default atom for min 1, empty otherwise.
    pub fn default_datum(&self) -> Datum {
        if self.min == 0 {
            Datum::empty()
        } else {
            let k = self.key.atomic.default_atom();
            match &self.value {
                Some(v) => Datum::map_from_sorted(vec![k], vec![v.atomic.default_atom()]),
                None => Datum::set_from_sorted(vec![k]),
            }
        }
    }
}
