//! Database schemas (`.ovsschema`), parsed and validated (RFC 7047 section 3.2).

use hashbrown::HashMap;

use serde_json::Value;

use crate::atom::describe_json;
use crate::datum::Datum;
use crate::error::{OvsdbError, Result};
use crate::types::ColumnType;

/// A validated database schema.
#[derive(Debug, Clone)]
pub struct Schema {
    /// Database name.
    pub name: String,
    /// `x.y.z` version.
    pub version: String,
    /// Optional checksum string.
    pub cksum: Option<String>,
    /// Tables in name order.
    pub tables: Vec<TableSchema>,
    by_name: HashMap<String, usize>,
    json: Value,
}

/// One table.
#[derive(Debug, Clone)]
pub struct TableSchema {
    /// Table name.
    pub name: String,
    /// User columns (not `_uuid`/`_version`), in name order.
    pub columns: Vec<ColumnSchema>,
    by_name: HashMap<String, usize>,
    /// Maximum number of rows.
    pub max_rows: Option<u64>,
    /// Rows live without strong references to them.
    pub is_root: bool,
    /// Each index: column indexes whose combined values must be unique.
    pub indexes: Vec<Vec<usize>>,
    /// Each column's default value, computed once (inserts and file records use them per row).
    defaults: Vec<Datum>,
    /// Columns whose default value breaks the column's own constraints (an enum or range that
    /// excludes it), computed once: an insert must give these.
    invalid_defaults: Vec<usize>,
    /// Some column holds references (strong or weak), computed once for the commit path.
    has_refs: bool,
    /// Some column holds weak references.
    has_weak_refs: bool,
}

/// One column.
#[derive(Debug, Clone)]
pub struct ColumnSchema {
    /// Column name.
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
    /// Not persisted.
    pub ephemeral: bool,
    /// May be changed after insertion.
    pub mutable: bool,
}

/// A column named in a request: a user column or one of the two special ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnRef {
    /// `_uuid`.
    Uuid,
    /// `_version`.
    Version,
    /// A user column by index.
    User(usize),
}

fn valid_id(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl Schema {
    /// Parse and validate a schema from its JSON text.
    pub fn parse(text: &str) -> Result<Self> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| OvsdbError::syntax(format!("schema is not valid JSON: {e}")))?;
        Self::from_json(&v)
    }

    /// Parse and validate a schema.
    pub fn from_json(v: &Value) -> Result<Self> {
        let obj = v
            .as_object()
            .ok_or_else(|| OvsdbError::syntax("schema must be a JSON object"))?;
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| OvsdbError::syntax("schema needs a \"name\" string"))?
            .to_string();
        if !valid_id(&name) {
            return Err(OvsdbError::syntax(format!(
                "\"{name}\" is not a valid database name"
            )));
        }
        let version = match obj.get("version") {
            Some(Value::String(s)) => {
                let parts: Vec<&str> = s.split('.').collect();
                if parts.len() != 3 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
                    return Err(OvsdbError::syntax(format!(
                        "schema version \"{s}\" is not in x.y.z form"
                    )));
                }
                s.clone()
            }
            None => String::new(),
            Some(other) => {
                return Err(OvsdbError::syntax(format!(
                    "schema version must be a string, not {}",
                    describe_json(other)
                )));
            }
        };
        let cksum = obj.get("cksum").and_then(Value::as_str).map(str::to_string);
        let tables_json = obj
            .get("tables")
            .and_then(Value::as_object)
            .ok_or_else(|| OvsdbError::syntax("schema needs a \"tables\" object"))?;
        for k in obj.keys() {
            if !matches!(k.as_str(), "name" | "version" | "cksum" | "tables" | "doc") {
                return Err(OvsdbError::syntax(format!(
                    "unexpected member \"{k}\" in schema"
                )));
            }
        }
        let mut names: Vec<&String> = tables_json.keys().collect();
        names.sort();
        let by_name: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, n)| ((*n).clone(), i))
            .collect();
        let mut tables = Vec::with_capacity(names.len());
        for tname in names {
            let t = TableSchema::from_json(tname, &tables_json[tname])
                .map_err(|e| e.context(format!("table {tname}")))?;
            tables.push(t);
        }
        // Resolve references.
        for t in &mut tables {
            for c in &mut t.columns {
                for bt in std::iter::once(&mut c.ty.key).chain(c.ty.value.as_mut()) {
                    if let Some(rt) = &bt.ref_table {
                        let idx = by_name.get(rt).copied().ok_or_else(|| {
                            OvsdbError::syntax(format!(
                                "column {} of table {} refers to undefined table {rt}",
                                c.name, t.name
                            ))
                        })?;
                        bt.ref_table_index = Some(idx);
                    }
                }
            }
        }
        // Schemas written before isRoot existed: every table is a root.
        if !tables.iter().any(|t| t.is_root) {
            for t in &mut tables {
                t.is_root = true;
            }
        }
        Ok(Schema {
            name,
            version,
            cksum,
            tables,
            by_name,
            json: v.clone(),
        })
    }

    /// The schema as JSON (what `get_schema` returns).
    pub fn to_json(&self) -> &Value {
        &self.json
    }

    /// Table index by name.
    pub fn table_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Table by name.
    pub fn table(&self, name: &str) -> Option<&TableSchema> {
        self.table_index(name).map(|i| &self.tables[i])
    }

    /// Table index by name, or the error ovsdb-server gives for an unknown table.
    pub fn require_table(&self, name: &str) -> Result<usize> {
        self.table_index(name)
            .ok_or_else(|| OvsdbError::syntax(format!("no table named {name}")))
    }
}

impl TableSchema {
    fn from_json(name: &str, v: &Value) -> Result<Self> {
        if !valid_id(name) || name.starts_with('_') {
            return Err(OvsdbError::syntax(format!(
                "\"{name}\" is not a valid table name"
            )));
        }
        let obj = v
            .as_object()
            .ok_or_else(|| OvsdbError::syntax("table must be an object"))?;
        let cols = obj
            .get("columns")
            .and_then(Value::as_object)
            .ok_or_else(|| OvsdbError::syntax("table needs a \"columns\" object"))?;
        let mut cnames: Vec<&String> = cols.keys().collect();
        cnames.sort();
        let mut columns = Vec::with_capacity(cnames.len());
        for cname in &cnames {
            if !valid_id(cname) || cname.starts_with('_') {
                return Err(OvsdbError::syntax(format!(
                    "\"{cname}\" is not a valid column name"
                )));
            }
            let c = cols[cname.as_str()]
                .as_object()
                .ok_or_else(|| OvsdbError::syntax(format!("column {cname} must be an object")))?;
            let ty =
                ColumnType::from_json(c.get("type").ok_or_else(|| {
                    OvsdbError::syntax(format!("column {cname} needs a \"type\""))
                })?)
                .map_err(|e| e.context(format!("column {cname}")))?;
            let flag = |k: &str, default: bool| -> Result<bool> {
                match c.get(k) {
                    None => Ok(default),
                    Some(Value::Bool(b)) => Ok(*b),
                    Some(_) => Err(OvsdbError::syntax(format!(
                        "column {cname}: \"{k}\" must be a boolean"
                    ))),
                }
            };
            for k in c.keys() {
                if !matches!(k.as_str(), "type" | "ephemeral" | "mutable" | "doc") {
                    return Err(OvsdbError::syntax(format!(
                        "column {cname}: unexpected member \"{k}\""
                    )));
                }
            }
            columns.push(ColumnSchema {
                name: (*cname).clone(),
                ty,
                ephemeral: flag("ephemeral", false)?,
                mutable: flag("mutable", true)?,
            });
        }
        let by_name: HashMap<String, usize> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        let max_rows = match obj.get("maxRows") {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| OvsdbError::syntax("maxRows must be a positive integer"))?,
            ),
        };
        let is_root = match obj.get("isRoot") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(OvsdbError::syntax("isRoot must be a boolean")),
        };
        let mut indexes = Vec::new();
        if let Some(ix) = obj.get("indexes") {
            let arr = ix
                .as_array()
                .ok_or_else(|| OvsdbError::syntax("indexes must be an array"))?;
            for one in arr {
                let cols_json = one.as_array().ok_or_else(|| {
                    OvsdbError::syntax("an index must be an array of column names")
                })?;
                if cols_json.is_empty() {
                    return Err(OvsdbError::syntax("an index must name at least one column"));
                }
                let mut idx = Vec::new();
                for c in cols_json {
                    let cname = c
                        .as_str()
                        .ok_or_else(|| OvsdbError::syntax("index column must be a string"))?;
                    let ci = by_name.get(cname).copied().ok_or_else(|| {
                        OvsdbError::syntax(format!("index names unknown column {cname}"))
                    })?;
                    if columns[ci].ephemeral {
                        return Err(OvsdbError::syntax(format!(
                            "ephemeral column {cname} cannot be indexed"
                        )));
                    }
                    idx.push(ci);
                }
                indexes.push(idx);
            }
        }
        for k in obj.keys() {
            if !matches!(
                k.as_str(),
                "columns" | "maxRows" | "isRoot" | "indexes" | "doc"
            ) {
                return Err(OvsdbError::syntax(format!(
                    "unexpected member \"{k}\" in table"
                )));
            }
        }
        let defaults: Vec<Datum> = columns.iter().map(|c| c.ty.default_datum()).collect();
        let invalid_defaults = (0..columns.len())
            .filter(|&c| defaults[c].check_atoms(&columns[c].ty).is_err())
            .collect();
        let has_refs = columns.iter().any(|c| c.ty.has_refs());
        let has_weak_refs = columns.iter().any(|c| c.ty.has_weak_refs());
        Ok(TableSchema {
            name: name.to_string(),
            columns,
            by_name,
            max_rows,
            is_root,
            indexes,
            defaults,
            invalid_defaults,
            has_refs,
            has_weak_refs,
        })
    }

    /// Whether any column holds references.
    pub fn has_refs(&self) -> bool {
        self.has_refs
    }

    /// Whether any column holds weak references.
    pub fn has_weak_refs(&self) -> bool {
        self.has_weak_refs
    }

    /// Every column's default value, in column order (a new row's contents).
    pub fn defaults(&self) -> &[Datum] {
        &self.defaults
    }

    /// The columns whose default value breaks their own constraints (see
    /// [`Datum::check_atoms`]): an insert that leaves one of them at its default fails.
    pub fn invalid_defaults(&self) -> &[usize] {
        &self.invalid_defaults
    }

    /// A user column's index.
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// Resolve a column name, including `_uuid` and `_version`.
    pub fn column_ref(&self, name: &str) -> Result<ColumnRef> {
        match name {
            "_uuid" => Ok(ColumnRef::Uuid),
            "_version" => Ok(ColumnRef::Version),
            _ => self.column_index(name).map(ColumnRef::User).ok_or_else(|| {
                OvsdbError::syntax(format!(
                    "{name} is not a valid column name in table {}",
                    self.name
                ))
            }),
        }
    }

    /// The type of a column reference (`_uuid`/`_version` are scalar UUIDs).
    pub fn column_type<'a>(&'a self, c: ColumnRef, uuid_ty: &'a ColumnType) -> &'a ColumnType {
        match c {
            ColumnRef::User(i) => &self.columns[i].ty,
            _ => uuid_ty,
        }
    }
}
