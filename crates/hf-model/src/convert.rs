//! Conversions between datums and Rust values, used by the generated row types.

use std::collections::BTreeSet;
use std::sync::Arc;

use hf_ovsdb::{Atom, AtomicType, Datum, Row, TableSchema};
use uuid::Uuid;

use crate::error::ModelError;
use crate::row_ref::RowRef;

/// A Rust type that holds one OVSDB atom.
pub(crate) trait Atomic: Sized + Default {
    /// The atomic type on the wire.
    const TYPE: AtomicType;
    /// The value of `a`, or `None` if `a` has another type.
    fn from_atom(a: &Atom) -> Option<Self>;
    /// The atom.
    fn to_atom(&self) -> Atom;
}

impl Atomic for String {
    const TYPE: AtomicType = AtomicType::String;
    fn from_atom(a: &Atom) -> Option<Self> {
        a.as_str().map(str::to_string)
    }
    fn to_atom(&self) -> Atom {
        Atom::String(Arc::from(self.as_str()))
    }
}

/// A shared string: decoding takes the atom's own allocation (`Atom::String` is an
/// `Arc<str>`), encoding hands it back, so neither copies the text.
impl Atomic for Arc<str> {
    const TYPE: AtomicType = AtomicType::String;
    fn from_atom(a: &Atom) -> Option<Self> {
        match a {
            Atom::String(s) => Some(Arc::clone(s)),
            _ => None,
        }
    }
    fn to_atom(&self) -> Atom {
        Atom::String(Arc::clone(self))
    }
}

impl Atomic for i64 {
    const TYPE: AtomicType = AtomicType::Integer;
    fn from_atom(a: &Atom) -> Option<Self> {
        a.as_integer()
    }
    fn to_atom(&self) -> Atom {
        Atom::Integer(*self)
    }
}

impl Atomic for f64 {
    const TYPE: AtomicType = AtomicType::Real;
    fn from_atom(a: &Atom) -> Option<Self> {
        match a {
            Atom::Real(r) => Some(*r),
            _ => None,
        }
    }
    fn to_atom(&self) -> Atom {
        Atom::Real(*self)
    }
}

impl Atomic for bool {
    const TYPE: AtomicType = AtomicType::Boolean;
    fn from_atom(a: &Atom) -> Option<Self> {
        match a {
            Atom::Boolean(b) => Some(*b),
            _ => None,
        }
    }
    fn to_atom(&self) -> Atom {
        Atom::Boolean(*self)
    }
}

impl Atomic for Uuid {
    const TYPE: AtomicType = AtomicType::Uuid;
    fn from_atom(a: &Atom) -> Option<Self> {
        a.as_uuid()
    }
    fn to_atom(&self) -> Atom {
        Atom::Uuid(*self)
    }
}

impl<T> Atomic for RowRef<T> {
    const TYPE: AtomicType = AtomicType::Uuid;
    fn from_atom(a: &Atom) -> Option<Self> {
        a.as_uuid().map(RowRef::new)
    }
    fn to_atom(&self) -> Atom {
        Atom::Uuid(self.uuid())
    }
}

/// Reads the columns of one row by name, for the generated `from_row`.
#[derive(Debug)]
pub(crate) struct RowReader<'a> {
    table: &'static str,
    ts: &'a TableSchema,
    row: &'a Row,
}

impl<'a> RowReader<'a> {
    /// A reader for `row` of table `ts`, converting into table `table` of holdfast's schema.
    pub(crate) fn new(table: &'static str, ts: &'a TableSchema, row: &'a Row) -> Self {
        RowReader { table, ts, row }
    }

    fn err(&self, column: &str, detail: String) -> ModelError {
        ModelError::Column {
            table: self.table.to_string(),
            column: column.to_string(),
            uuid: self.row.uuid,
            detail,
        }
    }

    /// The column's datum; `None` when the row's schema lacks the column.
    fn datum(&self, column: &str) -> Result<Option<&'a Datum>, ModelError> {
        let Some(i) = self.ts.column_index(column) else {
            return Ok(None);
        };
        self.row
            .cols
            .get(i)
            .map(Some)
            .ok_or_else(|| self.err(column, "row has fewer columns than its schema".into()))
    }

    fn atom<T: Atomic>(&self, column: &str, a: &Atom) -> Result<T, ModelError> {
        T::from_atom(a).ok_or_else(|| {
            self.err(
                column,
                format!(
                    "expected {} but found {} {a}",
                    T::TYPE.name(),
                    a.atomic_type().name()
                ),
            )
        })
    }

    fn no_values(&self, column: &str, d: &Datum) -> Result<(), ModelError> {
        if d.values.is_empty() {
            Ok(())
        } else {
            Err(self.err(column, "expected a set but found a map".into()))
        }
    }

    /// A column with exactly one value.
    pub(crate) fn scalar<T: Atomic>(&self, column: &str) -> Result<T, ModelError> {
        let Some(d) = self.datum(column)? else {
            return Ok(T::default());
        };
        self.no_values(column, d)?;
        match d.keys.as_slice() {
            [a] => self.atom(column, a),
            other => Err(self.err(
                column,
                format!("expected exactly one value but found {}", other.len()),
            )),
        }
    }

    /// A column with zero or one value.
    pub(crate) fn optional<T: Atomic>(&self, column: &str) -> Result<Option<T>, ModelError> {
        let Some(d) = self.datum(column)? else {
            return Ok(None);
        };
        self.no_values(column, d)?;
        match d.keys.as_slice() {
            [] => Ok(None),
            [a] => self.atom(column, a).map(Some),
            other => Err(self.err(
                column,
                format!("expected at most one value but found {}", other.len()),
            )),
        }
    }

    /// A set column.
    pub(crate) fn set<T: Atomic + Ord>(&self, column: &str) -> Result<BTreeSet<T>, ModelError> {
        let Some(d) = self.datum(column)? else {
            return Ok(BTreeSet::new());
        };
        self.no_values(column, d)?;
        d.keys.iter().map(|a| self.atom(column, a)).collect()
    }

    /// A map column.
    pub(crate) fn map<K: Atomic + Ord, V: Atomic>(
        &self,
        column: &str,
    ) -> Result<crate::SmallMap<K, V>, ModelError> {
        let Some(d) = self.datum(column)? else {
            return Ok(crate::SmallMap::new());
        };
        if d.values.len() != d.keys.len() {
            return Err(self.err(column, "expected a map but found a set".into()));
        }
        d.pairs()
            .map(|(k, v)| Ok((self.atom(column, k)?, self.atom(column, v)?)))
            .collect()
    }
}

/// The datum of a scalar column.
pub(crate) fn scalar_datum<T: Atomic>(v: &T) -> Datum {
    Datum::scalar(v.to_atom())
}

/// The datum of an optional column.
pub(crate) fn optional_datum<T: Atomic>(v: &Option<T>) -> Datum {
    match v {
        Some(v) => Datum::scalar(v.to_atom()),
        None => Datum::empty(),
    }
}

/// The datum of a set column.
pub(crate) fn set_datum<T: Atomic>(v: &BTreeSet<T>) -> Datum {
    Datum::set_from(v.iter().map(Atomic::to_atom).collect())
}

/// The datum of a map column.
pub(crate) fn map_datum<K: Atomic, V: Atomic>(v: &crate::SmallMap<K, V>) -> Datum {
    Datum::map_from(v.iter().map(|(k, v)| (k.to_atom(), v.to_atom())).collect())
}
