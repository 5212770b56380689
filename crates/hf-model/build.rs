//! Generates `nb.rs`, `sb.rs` and `vswitch.rs` in OUT_DIR from `schemas/ovn-nb.ovsschema`,
//! `schemas/ovn-sb.ovsschema` and `schemas/vswitch.ovsschema`: one typed struct, one column enum and one enum per string-enum
//! column for every table, plus the `Snapshot`, `Delta` and `AnyRow` types of the database.
//!
//! The schema is parsed with hf-ovsdb itself, so the generated column order is exactly the one
//! hf-ovsdb's `Row::cols` uses (names sorted).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hf_ovsdb::{AtomicType, BaseType, ColumnSchema, ColumnType, RefType, Schema, TableSchema};

/// One database: schema file, module, and its lookup indexes beyond by-name ones, as
/// (table, column). A scalar string column gives a by-value index; a reference column gives a
/// parent index (from a referenced row to the rows that refer to it). Every table with a
/// scalar string `name` column gets a by-name index too.
type Database = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const DATABASES: [Database; 3] = [
    (
        "ovn-nb.ovsschema",
        "nb",
        &[
            // Parents: which switch, router or port group holds a row. northd's flow identity
            // names a NAT row by its router and an ACL by its switch or port group.
            ("Logical_Switch", "ports"),
            ("Logical_Switch", "acls"),
            ("Logical_Switch", "qos_rules"),
            ("Logical_Switch", "load_balancer"),
            ("Logical_Router", "ports"),
            ("Logical_Router", "nat"),
            ("Logical_Router", "static_routes"),
            ("Logical_Router", "policies"),
            ("Logical_Router", "load_balancer"),
            ("Port_Group", "ports"),
            ("Port_Group", "acls"),
            ("Logical_Router_Port", "gateway_chassis"),
            ("HA_Chassis_Group", "ha_chassis"),
        ],
    ),
    (
        "ovn-sb.ovsschema",
        "sb",
        &[
            ("Port_Binding", "logical_port"),
            ("Port_Binding", "datapath"),
            ("Port_Binding", "chassis"),
            // A chassis's claims act on its gateway ports and the rows it holds, found by
            // these rather than by a walk over every binding (hf-controller's
            // `binding::candidates`).
            ("Port_Binding", "type"),
            ("Port_Binding", "additional_chassis"),
            ("Logical_Flow", "logical_datapath"),
            ("Logical_Flow", "logical_dp_group"),
            ("Multicast_Group", "datapath"),
            ("Chassis", "encaps"),
        ],
    ),
    // A chassis's local database (the subset of Open vSwitch's it reads and writes): which
    // port and bridge hold an interface.
    (
        "vswitch.ovsschema",
        "vswitch",
        &[("Bridge", "ports"), ("Port", "interfaces")],
    ),
];

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "do", "dyn", "else",
    "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop",
    "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref", "return", "self",
    "Self", "static", "struct", "super", "trait", "true", "try", "type", "typeof", "unsafe",
    "unsized", "use", "virtual", "where", "while", "yield", "abstract", "become",
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let schemas = manifest.join("../../schemas");
    for (file, module, extra) in DATABASES {
        let path = schemas.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let path = path
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let schema =
            Schema::parse(&text).unwrap_or_else(|e| panic!("{} is invalid: {e}", path.display()));
        let code = Gen::new(&schema, module, file, &path, extra).module();
        let dst = out.join(format!("{module}.rs"));
        std::fs::write(&dst, code).unwrap_or_else(|e| panic!("writing {}: {e}", dst.display()));
        rustfmt(&dst);
    }
}

/// Scalar string columns held as `Arc<str>` instead of `String`: long texts that the readers
/// share rather than copy (the controller's translation, its program messages and its last
/// good store hold a `Logical_Flow`'s match and actions as the replica's own allocation).
const SHARED_TEXT: &[(&str, &str)] = &[("Logical_Flow", "match"), ("Logical_Flow", "actions")];

fn is_shared_text(t: &TableSchema, c: &ColumnSchema) -> bool {
    c.ty.is_scalar()
        && SHARED_TEXT
            .iter()
            .any(|&(tn, cn)| t.name == tn && c.name == cn)
}

/// Format the generated file when rustfmt is at hand, so that it reads like the rest of the
/// code; without rustfmt it stays valid, only less pretty.
fn rustfmt(path: &Path) {
    let rustfmt = std::env::var("RUSTFMT").unwrap_or_else(|_| "rustfmt".into());
    let _ = std::process::Command::new(rustfmt)
        .args(["--edition", "2024"])
        .arg(path)
        .status();
}

/// `Logical_Switch` → `LogicalSwitch`, `DHCPv6_Options` → `Dhcpv6Options`, `ACL` → `Acl`.
fn camel(name: &str) -> String {
    let mut out = String::new();
    for part in name.split(['_', '-']).filter(|p| !p.is_empty()) {
        let mut cs = part.chars();
        if let Some(first) = cs.next() {
            out.extend(first.to_uppercase());
            out.extend(cs.flat_map(char::to_lowercase));
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    out
}

/// `Logical_Switch` → `logical_switch`.
fn snake(name: &str) -> String {
    name.to_lowercase()
}

/// A column name as a field name (`type` → `type_`).
fn field(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

/// One line per table: `template` with `{Table}` (schema name, quoted), `{Ty}` (Rust type) and
/// `{tn}` (snake-case field) replaced.
fn each_table(o: &mut String, tables: &[TableSchema], template: &str) {
    for t in tables {
        let line = template
            .replace("{Table}", &format!("{:?}", t.name))
            .replace("{Name}", &t.name)
            .replace("{Ty}", &camel(&t.name))
            .replace("{tn}", &snake(&t.name));
        o.push_str(&line);
        o.push('\n');
    }
}

/// How a column is held in Rust.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Scalar,
    Optional,
    Set,
    Map,
}

impl Kind {
    fn of(ty: &ColumnType) -> Self {
        if ty.is_map() {
            Kind::Map
        } else if ty.is_scalar() {
            Kind::Scalar
        } else if ty.is_optional() {
            Kind::Optional
        } else {
            Kind::Set
        }
    }

    fn reader(self) -> &'static str {
        match self {
            Kind::Scalar => "scalar",
            Kind::Optional => "optional",
            Kind::Set => "set",
            Kind::Map => "map",
        }
    }
}

/// A lookup index of a snapshot: by a scalar string column's value, or by the row a reference
/// column points at (a parent index).
struct IndexDef<'a> {
    table: &'a TableSchema,
    column: &'a ColumnSchema,
}

impl IndexDef<'_> {
    /// The snapshot field and method name: `logical_switch_by_name`.
    fn name(&self) -> String {
        format!("{}_by_{}", snake(&self.table.name), self.column.name)
    }

    /// The referenced table, for a parent index.
    fn target(&self) -> Option<&str> {
        self.column.ty.key.ref_table.as_deref()
    }

    /// The index's keys of row `r`, as an iterator expression.
    fn keys(&self) -> String {
        let f = field(&self.column.name);
        match (self.target(), Kind::of(&self.column.ty)) {
            (None, _) => format!("std::iter::once(r.{f}.clone())"),
            (Some(_), Kind::Scalar) => format!("std::iter::once(r.{f}.uuid())"),
            (Some(_), _) => format!("r.{f}.iter().map(|t| t.uuid())"),
        }
    }
}

/// A string enum of one column's key or value.
struct EnumDef {
    name: String,
    table: String,
    column: String,
    values: Vec<String>,
}

struct Gen<'a> {
    schema: &'a Schema,
    module: &'a str,
    file: &'a str,
    path: &'a Path,
    extra_indexes: &'a [(&'a str, &'a str)],
    out: String,
}

impl<'a> Gen<'a> {
    fn new(
        schema: &'a Schema,
        module: &'a str,
        file: &'a str,
        path: &'a Path,
        extra_indexes: &'a [(&'a str, &'a str)],
    ) -> Self {
        Gen {
            schema,
            module,
            file,
            path,
            extra_indexes,
            out: String::new(),
        }
    }

    fn line(&mut self, s: &str) {
        self.out.push_str(s);
        self.out.push('\n');
    }

    /// The enum name for a base type of a column, if it is a string enum.
    fn enum_name(
        t: &TableSchema,
        c: &ColumnSchema,
        bt: &BaseType,
        is_value: bool,
    ) -> Option<String> {
        if bt.atomic != AtomicType::String || bt.enum_values.is_none() {
            return None;
        }
        let suffix = if is_value { "Value" } else { "" };
        Some(format!("{}{}{suffix}", camel(&t.name), camel(&c.name)))
    }

    fn base_type(t: &TableSchema, c: &ColumnSchema, bt: &BaseType, is_value: bool) -> String {
        if let Some(e) = Self::enum_name(t, c, bt, is_value) {
            return e;
        }
        match bt.atomic {
            AtomicType::String if is_shared_text(t, c) => "Arc<str>".into(),
            AtomicType::String => "String".into(),
            AtomicType::Integer => "i64".into(),
            AtomicType::Real => "f64".into(),
            AtomicType::Boolean => "bool".into(),
            AtomicType::Uuid => match &bt.ref_table {
                Some(rt) => format!("RowRef<{}>", camel(rt)),
                None => "Uuid".into(),
            },
        }
    }

    fn field_type(t: &TableSchema, c: &ColumnSchema) -> String {
        let k = Self::base_type(t, c, &c.ty.key, false);
        let unordered = c.ty.key.atomic == AtomicType::Real;
        match Kind::of(&c.ty) {
            Kind::Scalar => k,
            Kind::Optional => format!("Option<{k}>"),
            Kind::Set => {
                assert!(
                    !unordered,
                    "{}.{}: sets of reals are not supported",
                    t.name, c.name
                );
                format!("BTreeSet<{k}>")
            }
            Kind::Map => {
                assert!(
                    !unordered,
                    "{}.{}: maps keyed by reals are not supported",
                    t.name, c.name
                );
                let v = c.ty.value.as_ref().expect("map has a value type");
                format!("SmallMap<{k}, {}>", Self::base_type(t, c, v, true))
            }
        }
    }

    /// A short description of a column type for the field's doc comment.
    fn describe(c: &ColumnSchema) -> String {
        fn base(bt: &BaseType) -> String {
            let mut s = bt.atomic.name().to_string();
            if let Some(rt) = &bt.ref_table {
                let kind = if bt.ref_type == RefType::Weak {
                    "weak"
                } else {
                    "strong"
                };
                s = format!("{kind} reference to `{rt}`");
            }
            if let Some(e) = &bt.enum_values {
                let vals: Vec<String> = e.iter().map(|a| a.to_string()).collect();
                s = format!("{s}, one of {}", vals.join(", "));
            }
            if bt.min_integer.is_some() || bt.max_integer.is_some() {
                let lo = bt.min_integer.map(|v| v.to_string()).unwrap_or_default();
                let hi = bt.max_integer.map(|v| v.to_string()).unwrap_or_default();
                s = format!("{s} in {lo}..={hi}");
            }
            if let Some(n) = bt.max_length {
                s = format!("{s} of at most {n} characters");
            }
            s
        }
        let ty = &c.ty;
        let max = if ty.max == usize::MAX {
            "unlimited".to_string()
        } else {
            ty.max.to_string()
        };
        let mut d = match Kind::of(ty) {
            Kind::Scalar => base(&ty.key),
            Kind::Optional => format!("optional {}", base(&ty.key)),
            Kind::Set => format!("set of {} ({}..{max})", base(&ty.key), ty.min),
            Kind::Map => format!(
                "map from {} to {} ({}..{max})",
                base(&ty.key),
                base(ty.value.as_ref().expect("map value")),
                ty.min
            ),
        };
        if c.ephemeral {
            d.push_str("; ephemeral");
        }
        if !c.mutable {
            d.push_str("; immutable");
        }
        d
    }

    fn enums(&self) -> Vec<EnumDef> {
        let mut out = Vec::new();
        for t in &self.schema.tables {
            for c in &t.columns {
                for (bt, is_value) in [(Some(&c.ty.key), false), (c.ty.value.as_ref(), true)] {
                    let Some(bt) = bt else { continue };
                    let Some(name) = Self::enum_name(t, c, bt, is_value) else {
                        continue;
                    };
                    let values = bt
                        .enum_values
                        .as_ref()
                        .expect("enum values")
                        .iter()
                        .map(|a| a.as_str().expect("string enum").to_string())
                        .collect();
                    out.push(EnumDef {
                        name,
                        table: t.name.clone(),
                        column: c.name.clone(),
                        values,
                    });
                }
            }
        }
        out
    }

    /// Lookup indexes: by-name ones, then the database's extra ones.
    fn indexes(&self) -> Vec<IndexDef<'a>> {
        let mut out = Vec::new();
        for t in &self.schema.tables {
            if let Some(c) = t.column_index("name").map(|i| &t.columns[i])
                && c.ty.is_scalar()
                && c.ty.key.atomic == AtomicType::String
            {
                out.push(IndexDef {
                    table: t,
                    column: c,
                });
            }
        }
        for (tn, cn) in self.extra_indexes {
            let t = self
                .schema
                .table(tn)
                .unwrap_or_else(|| panic!("index on unknown table {tn} of {}", self.file));
            let c = &t.columns[t
                .column_index(cn)
                .unwrap_or_else(|| panic!("index on unknown column {tn}.{cn}"))];
            let ok = !c.ty.is_map()
                && (c.ty.key.ref_table.is_some()
                    || (c.ty.is_scalar() && c.ty.key.atomic == AtomicType::String));
            assert!(
                ok,
                "{tn}.{cn}: indexes need a scalar string or a reference column"
            );
            out.push(IndexDef {
                table: t,
                column: c,
            });
        }
        out
    }

    fn module(mut self) -> String {
        let s = self.schema;
        self.line(&format!(
            "// Generated by hf-model's build.rs (module `{}`) from {} ({} {}).\n\
             // Do not edit: change the schema (schemas/{}) or the generator.",
            self.module,
            self.path.display(),
            s.name,
            s.version,
            self.file.replace(".ovsschema", ".tables")
        ));
        self.line(
            "\nuse std::collections::{BTreeMap, BTreeSet};\n\
             use std::sync::{Arc, OnceLock};\n\n\
             use hf_ovsdb::{Atom, Database, Datum, Row, Schema, TableSchema, TxnDelta};\n\
             use serde_json::{Map, Value};\n\
             use uuid::Uuid;\n\n\
             use crate::convert::{Atomic, RowReader, map_datum, optional_datum, scalar_datum, set_datum};\n\
             use crate::small_map::SmallMap;\n\
             use crate::update::{Index, apply_rows, apply_rows_owned, table_changes, table_updates2, table_updates2_owned};\n\
             use crate::{Column, ModelError, RowDelta, RowRef, Table};\n",
        );
        self.line(&format!(
            "/// The text of holdfast's `{}` schema (`schemas/{}`).\n\
             pub const SCHEMA_TEXT: &str = include_str!({:?});\n",
            s.name,
            self.file,
            self.path.display().to_string()
        ));
        self.line(&format!(
            "/// holdfast's `{name}` schema, parsed once.\n\
             pub fn schema() -> &'static Arc<Schema> {{\n\
             static SCHEMA: OnceLock<Arc<Schema>> = OnceLock::new();\n\
             SCHEMA.get_or_init(|| {{\n\
             // The build script parsed this very text with the same parser, so it cannot fail.\n\
             Arc::new(Schema::parse(SCHEMA_TEXT).expect(\"schema parsed at build time\"))\n\
             }})\n}}\n",
            name = s.name
        ));
        for e in self.enums() {
            self.enum_def(&e);
        }
        for (i, t) in s.tables.iter().enumerate() {
            self.table(i, t);
        }
        self.any_row();
        self.snapshot();
        self.delta();
        self.out
    }

    fn enum_def(&mut self, e: &EnumDef) {
        let mut variants: Vec<String> = e.values.iter().map(|v| camel(v)).collect();
        variants.sort();
        variants.dedup();
        assert_eq!(
            variants.len(),
            e.values.len(),
            "{}.{}: enum values collide as Rust names",
            e.table,
            e.column
        );
        assert!(
            !variants.iter().any(|v| v == "Other"),
            "{}.{}: a value named other",
            e.table,
            e.column
        );
        let name = &e.name;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "/// Values of `{}.{}`.\n///\n\
             /// A value this schema does not list (from a newer peer) is kept as `Other`, so that\n\
             /// converting a row never fails on it and the value survives a round trip; callers\n\
             /// that must refuse it use `Table::check_known`. The default is the empty string,\n\
             /// OVSDB's default for a string column, which the schema does not allow: set it.\n\
             #[derive(Debug, Clone)]\n#[non_exhaustive]\npub enum {name} {{",
            e.table, e.column
        );
        for v in &e.values {
            let _ = writeln!(o, "    /// `{v}`.\n    {},", camel(v));
        }
        let _ = writeln!(
            o,
            "    /// A value the schema does not list, as received.\n    Other(String),\n}}\n"
        );
        let _ = writeln!(o, "impl {name} {{");
        let all: Vec<String> = e
            .values
            .iter()
            .map(|v| format!("Self::{}", camel(v)))
            .collect();
        let _ = writeln!(
            o,
            "    /// Every value the schema lists, in the schema's (sorted) order.\n\
             pub const ALL: &'static [{name}] = &[{}];\n",
            all.join(", ")
        );
        let _ = writeln!(
            o,
            "    /// The wire spelling.\n    pub fn as_str(&self) -> &str {{\n        match self {{"
        );
        for v in &e.values {
            let _ = writeln!(o, "            Self::{} => {v:?},", camel(v));
        }
        let _ = writeln!(o, "            Self::Other(s) => s,\n        }}\n    }}\n");
        let _ = writeln!(
            o,
            "    /// The value spelled `s` on the wire (`Other` when the schema does not list it).\n\
             pub fn from_wire(s: &str) -> Self {{\n        match s {{"
        );
        for v in &e.values {
            let _ = writeln!(o, "            {v:?} => Self::{},", camel(v));
        }
        let _ = writeln!(
            o,
            "            other => Self::Other(other.to_string()),\n        }}\n    }}\n"
        );
        let _ = writeln!(
            o,
            "    /// The value, if the schema does not list it.\n\
             pub fn unknown(&self) -> Option<&str> {{\n\
             match self {{\n Self::Other(s) => Some(s),\n _ => None,\n }}\n }}\n}}\n"
        );
        let _ = writeln!(
            o,
            "impl Default for {name} {{\n fn default() -> Self {{\n Self::Other(String::new())\n }}\n}}\n\n\
             impl PartialEq for {name} {{\n fn eq(&self, other: &Self) -> bool {{\n self.as_str() == other.as_str()\n }}\n}}\n\
             impl Eq for {name} {{}}\n\n\
             impl PartialOrd for {name} {{\n fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {{\n Some(self.cmp(other))\n }}\n}}\n\n\
             /// Ordered by wire spelling, as OVSDB orders string atoms.\n\
             impl Ord for {name} {{\n fn cmp(&self, other: &Self) -> std::cmp::Ordering {{\n self.as_str().cmp(other.as_str())\n }}\n}}\n\n\
             impl std::hash::Hash for {name} {{\n fn hash<H: std::hash::Hasher>(&self, state: &mut H) {{\n self.as_str().hash(state);\n }}\n}}\n\n\
             impl std::fmt::Display for {name} {{\n fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {{\n f.write_str(self.as_str())\n }}\n}}\n\n\
             impl From<&str> for {name} {{\n fn from(s: &str) -> Self {{\n Self::from_wire(s)\n }}\n}}\n\n\
             impl Atomic for {name} {{\n const TYPE: hf_ovsdb::AtomicType = hf_ovsdb::AtomicType::String;\n\
             fn from_atom(a: &Atom) -> Option<Self> {{\n a.as_str().map(Self::from_wire)\n }}\n\
             fn to_atom(&self) -> Atom {{\n Atom::string(self.as_str())\n }}\n}}\n"
        );
        self.out.push_str(&o);
    }

    fn table(&mut self, index: usize, t: &TableSchema) {
        let ty = camel(&t.name);
        let col_ty = format!("{ty}Column");
        let mut o = String::new();
        let mut attrs = Vec::new();
        if t.is_root {
            attrs.push("root".to_string());
        }
        if let Some(n) = t.max_rows {
            attrs.push(format!("at most {n} row(s)"));
        }
        for ix in &t.indexes {
            let names: Vec<&str> = ix.iter().map(|c| t.columns[*c].name.as_str()).collect();
            attrs.push(format!("unique ({})", names.join(", ")));
        }
        let attrs = if attrs.is_empty() {
            String::new()
        } else {
            format!(" ({})", attrs.join("; "))
        };
        let _ = writeln!(
            o,
            "/// A row of `{}`{attrs}.\n#[derive(Debug, Clone, PartialEq)]\npub struct {ty} {{\n    /// `_uuid`.\n    pub uuid: Uuid,",
            t.name
        );
        for c in &t.columns {
            let _ = writeln!(
                o,
                "    /// `{}`: {}.\n    pub {}: {},",
                c.name,
                Self::describe(c),
                field(&c.name),
                Self::field_type(t, c)
            );
        }
        let _ = writeln!(o, "}}\n");

        // Default: OVSDB's default row (a set or map with at least one element holds one
        // default element, as OVSDB's default datum does).
        let _ = writeln!(
            o,
            "/// Every column at OVSDB's default (what `insert` gives a column it does not name).\n\
             impl Default for {ty} {{\n fn default() -> Self {{\n Self {{\n uuid: Uuid::nil(),"
        );
        for c in &t.columns {
            let value = match Kind::of(&c.ty) {
                Kind::Set | Kind::Map if c.ty.min > 0 => {
                    "[Default::default()].into_iter().collect()"
                }
                _ => "Default::default()",
            };
            let _ = writeln!(o, "            {}: {value},", field(&c.name));
        }
        let _ = writeln!(o, "        }}\n    }}\n}}\n");

        // Column enum.
        assert!(
            !t.columns.iter().any(|c| camel(&c.name) == "Uuid"),
            "{}: a column named uuid clashes with the _uuid column identifier",
            t.name
        );
        let _ = writeln!(
            o,
            "/// The columns of `{}`.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\n#[non_exhaustive]\npub enum {col_ty} {{\n    /// `_uuid`.\n    Uuid,",
            t.name
        );
        for c in &t.columns {
            let _ = writeln!(o, "    /// `{}`.\n    {},", c.name, camel(&c.name));
        }
        let _ = writeln!(o, "}}\n");
        let all: Vec<String> = t
            .columns
            .iter()
            .map(|c| format!("Self::{}", camel(&c.name)))
            .collect();
        let _ = writeln!(
            o,
            "impl Column for {col_ty} {{\n    const ALL: &'static [Self] = &[{}];\n\n    fn name(self) -> &'static str {{\n        match self {{\n            Self::Uuid => \"_uuid\",",
            all.join(", ")
        );
        for c in &t.columns {
            let _ = writeln!(o, "            Self::{} => {:?},", camel(&c.name), c.name);
        }
        let _ = writeln!(
            o,
            "        }}\n    }}\n\n    fn index(self) -> Option<usize> {{\n        match self {{\n            Self::Uuid => None,"
        );
        for (i, c) in t.columns.iter().enumerate() {
            let _ = writeln!(o, "            Self::{} => Some({i}),", camel(&c.name));
        }
        let _ = writeln!(o, "        }}\n    }}\n}}\n");

        // Table impl.
        let _ = writeln!(
            o,
            "impl Table for {ty} {{\n    const NAME: &'static str = {:?};\n    type Column = {col_ty};\n\n\
             fn uuid(&self) -> Uuid {{\n self.uuid\n }}\n\n\
             fn schema() -> &'static TableSchema {{\n &schema().tables[{index}]\n }}\n\n\
             fn from_row(ts: &TableSchema, row: &Row) -> Result<Self, ModelError> {{\n\
             let r = RowReader::new(Self::NAME, ts, row);\n Ok(Self {{\n uuid: row.uuid,",
            t.name
        );
        for c in &t.columns {
            let _ = writeln!(
                o,
                "            {}: r.{}({:?})?,",
                field(&c.name),
                Kind::of(&c.ty).reader(),
                c.name
            );
        }
        let _ = writeln!(
            o,
            "        }})\n    }}\n\n    fn to_datums(&self) -> Vec<Datum> {{\n        vec!["
        );
        for c in &t.columns {
            let _ = writeln!(
                o,
                "            {}_datum(&self.{}),",
                Kind::of(&c.ty).reader(),
                field(&c.name)
            );
        }
        let _ = writeln!(
            o,
            "        ]\n    }}\n\n    fn column_datum(&self, column: {col_ty}) -> Datum {{\n        match column {{\n            {col_ty}::Uuid => Datum::scalar(Atom::Uuid(self.uuid)),"
        );
        for c in &t.columns {
            let _ = writeln!(
                o,
                "            {col_ty}::{} => {}_datum(&self.{}),",
                camel(&c.name),
                Kind::of(&c.ty).reader(),
                field(&c.name)
            );
        }
        let _ = writeln!(
            o,
            "        }}\n    }}\n\n    fn unknown_values(&self) -> Vec<({col_ty}, String)> {{"
        );
        let mut checks = Vec::new();
        for c in &t.columns {
            let f = field(&c.name);
            let v = format!("{col_ty}::{}", camel(&c.name));
            let push = format!("out.push(({v}, u.to_string()));");
            if Self::enum_name(t, c, &c.ty.key, false).is_some() {
                checks.push(match Kind::of(&c.ty) {
                    Kind::Scalar => format!("if let Some(u) = self.{f}.unknown() {{ {push} }}"),
                    Kind::Optional => {
                        format!("if let Some(u) = self.{f}.as_ref().and_then(|v| v.unknown()) {{ {push} }}")
                    }
                    Kind::Set => format!("for u in self.{f}.iter().filter_map(|v| v.unknown()) {{ {push} }}"),
                    Kind::Map => format!("for u in self.{f}.keys().filter_map(|v| v.unknown()) {{ {push} }}"),
                });
            }
            if let Some(vt) = &c.ty.value
                && Self::enum_name(t, c, vt, true).is_some()
            {
                checks.push(format!(
                    "for u in self.{f}.values().filter_map(|v| v.unknown()) {{ {push} }}"
                ));
            }
        }
        if checks.is_empty() {
            let _ = writeln!(o, "        Vec::new()");
        } else {
            let _ = writeln!(o, "        let mut out = Vec::new();");
            for ch in checks {
                let _ = writeln!(o, "        {ch}");
            }
            let _ = writeln!(o, "        out");
        }
        let _ = writeln!(o, "    }}\n}}\n");
        self.out.push_str(&o);
    }

    fn any_row(&mut self) {
        let s = self.schema;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "/// A row of any table of `{}`, for code that handles tables by name.\n\
             #[derive(Debug, Clone, PartialEq)]\n#[non_exhaustive]\n\
             #[allow(clippy::large_enum_variant, reason = \"rows are moved rarely; boxing would cost every access\")]\n\
             pub enum AnyRow {{",
            s.name
        );
        each_table(
            &mut o,
            &s.tables,
            "    /// A `{Name}` row.\n    {Ty}({Ty}),",
        );
        let _ = writeln!(
            o,
            "}}\n\n/// Run `$body` with `$r` bound to the typed row inside an `AnyRow`.\nmacro_rules! any_row_dispatch {{\n    ($any:expr, $r:ident => $body:expr) => {{\n        match $any {{"
        );
        each_table(&mut o, &s.tables, "            AnyRow::{Ty}($r) => $body,");
        let _ = writeln!(o, "        }}\n    }};\n}}\n");
        let _ = writeln!(
            o,
            "impl AnyRow {{\n\
             /// Convert `row` of table `ts` (by its name); `None` for a table this schema lacks.\n\
             pub fn from_row(ts: &TableSchema, row: &Row) -> Result<Option<Self>, ModelError> {{\n\
             Ok(Some(match ts.name.as_str() {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "            {Table} => Self::{Ty}({Ty}::from_row(ts, row)?),",
        );
        let _ = writeln!(
            o,
            "            _ => return Ok(None),\n        }}))\n    }}\n\n\
             /// Parse a JSON row object of table `table`; `None` for a table this schema lacks.\n\
             pub fn from_json_row(table: &str, uuid: Uuid, row: &Map<String, Value>) -> Result<Option<Self>, ModelError> {{\n\
             Ok(Some(match table {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "            {Table} => Self::{Ty}({Ty}::from_json_row(uuid, row)?),",
        );
        let _ = writeln!(
            o,
            "            _ => return Ok(None),\n        }}))\n    }}\n\n\
             /// A row of table `table` with every column at its default; `None` for a table this\n\
             /// schema lacks.\n\
             pub fn default_for(table: &str) -> Option<Self> {{\n Some(match table {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "            {Table} => Self::{Ty}({Ty}::default()),",
        );
        let _ = writeln!(
            o,
            "            _ => return None,\n        }})\n    }}\n\n\
             /// The table's name.\n pub fn table(&self) -> &'static str {{\n any_row_dispatch!(self, r => table_name_of(r))\n }}\n\n\
             /// `_uuid`.\n pub fn uuid(&self) -> Uuid {{\n any_row_dispatch!(self, r => r.uuid)\n }}\n\n\
             /// One datum per column, in schema order.\n pub fn to_datums(&self) -> Vec<Datum> {{\n any_row_dispatch!(self, r => r.to_datums())\n }}\n\n\
             /// The row, with version `version`.\n pub fn to_row(&self, version: Uuid) -> Row {{\n any_row_dispatch!(self, r => r.to_row(version))\n }}\n\n\
             /// Every column as a JSON row object.\n pub fn to_json_row(&self) -> Map<String, Value> {{\n any_row_dispatch!(self, r => r.to_json_row())\n }}\n\n\
             /// See [`Table::check_known`].\n pub fn check_known(&self) -> Result<(), ModelError> {{\n any_row_dispatch!(self, r => r.check_known())\n }}\n}}\n\n\
             fn table_name_of<T: Table>(_: &T) -> &'static str {{\n T::NAME\n}}\n"
        );
        self.out.push_str(&o);
    }

    fn snapshot(&mut self) {
        let s = self.schema;
        let indexes = self.indexes();
        let mut o = String::new();
        let _ = writeln!(
            o,
            "/// Every row of every table of `{name}`, typed, in UUID order, with lookup indexes that\n\
             /// [`Snapshot::apply`] keeps consistent. Build it from a database ([`Snapshot::from_db`]) or\n\
             /// feed it the `<table-updates2>` a client receives ([`Snapshot::apply_updates2`]).\n\
             #[derive(Debug, Clone, Default, PartialEq)]\npub struct Snapshot {{",
            name = s.name
        );
        each_table(&mut o, &s.tables, "    {tn}: BTreeMap<Uuid, {Ty}>,");
        for ix in &indexes {
            let key = if ix.target().is_some() {
                "Uuid"
            } else {
                "String"
            };
            let _ = writeln!(o, "    {}: Index<{key}>,", ix.name());
        }
        let _ = writeln!(
            o,
            "}}\n\nimpl Snapshot {{\n    /// An empty snapshot.\n    pub fn new() -> Self {{\n        Self::default()\n    }}\n"
        );
        each_table(
            &mut o,
            &s.tables,
            "    /// The rows of `{Name}`.\n    pub fn {tn}(&self) -> &BTreeMap<Uuid, {Ty}> {\n        &self.{tn}\n    }\n",
        );
        for t in s.tables.iter().filter(|t| t.max_rows == Some(1)) {
            let _ = writeln!(
                o,
                "    /// The `{}` row (the table holds at most one), if there is one.\n\
                 pub fn {tn}_row(&self) -> Option<&{}> {{\n self.{tn}.values().next()\n }}\n",
                t.name,
                camel(&t.name),
                tn = snake(&t.name)
            );
        }
        for ix in &indexes {
            let (t, cn, tn, ty, name) = (
                &ix.table.name,
                &ix.column.name,
                snake(&ix.table.name),
                camel(&ix.table.name),
                ix.name(),
            );
            let (arg, what, key) = match ix.target() {
                Some(target) => (
                    format!("RowRef<{}>", camel(target)),
                    format!("refers to `target` (a `{target}` row) in `{cn}`"),
                    "&target.uuid()",
                ),
                None => ("&str".to_string(), format!("`{cn}` is `target`"), "target"),
            };
            let _ = writeln!(
                o,
                "    /// The `{t}` row that {what}; `None` when no row or several rows do\n\
                 /// (see [`Snapshot::{tn}_all_by_{cn}`]).\n\
                 pub fn {name}(&self, target: {arg}) -> Option<&{ty}> {{\n\
                 self.{name}.unique({key}).and_then(|u| self.{tn}.get(&u))\n }}\n\n\
                 /// Every `{t}` row that {what}, in UUID order.\n\
                 pub fn {tn}_all_by_{cn}(&self, target: {arg}) -> impl Iterator<Item = &{ty}> + use<'_> {{\n\
                 self.{name}.get({key}).filter_map(|u| self.{tn}.get(&u))\n }}\n"
            );
        }
        let _ = writeln!(
            o,
            "    /// The row `r` refers to, if the snapshot holds it.\n\
             pub fn get<T: SnapshotTable>(&self, r: RowRef<T>) -> Option<&T> {{\n T::rows(self).get(&r.uuid())\n }}\n\n\
             /// The rows of table `T`.\n\
             pub fn rows<T: SnapshotTable>(&self) -> &BTreeMap<Uuid, T> {{\n T::rows(self)\n }}\n\n\
             /// Total number of rows.\n pub fn len(&self) -> usize {{\n {}\n }}\n\n\
             /// No rows at all.\n pub fn is_empty(&self) -> bool {{\n self.len() == 0\n }}\n\n\
             /// Every row of `db` (whose schema may be another version of this one: tables and\n\
             /// columns are matched by name, missing columns take their defaults).\n\
             pub fn from_db(db: &Database) -> Result<Self, ModelError> {{\n\
             let mut s = Self::default();\n s.apply(&Delta::from_txn(&db.schema, &db.snapshot_delta())?);\n Ok(s)\n }}\n\n\
             /// Apply a change set (from [`Delta::from_txn`], [`Snapshot::apply_updates2`] or a\n\
             /// producer such as northd). Inserts replace a row with the same UUID; deletes of\n\
             /// rows the snapshot lacks are ignored.\n\
             pub fn apply(&mut self, delta: &Delta) {{",
            s.tables
                .iter()
                .map(|t| format!("self.{}.len()", snake(&t.name)))
                .collect::<Vec<_>>()
                .join(" + ")
        );
        let apply_tables = |o: &mut String, apply: &str, arg: &str| {
            for t in &s.tables {
                let tn = snake(&t.name);
                let mine: Vec<&IndexDef> = indexes
                    .iter()
                    .filter(|ix| ix.table.name == t.name)
                    .collect();
                if mine.is_empty() {
                    let _ = writeln!(
                        o,
                        "        {apply}(&mut self.{tn}, {arg}delta.{tn}, |_, _| {{}});"
                    );
                    continue;
                }
                let _ = writeln!(
                    o,
                    "        {apply}(&mut self.{tn}, {arg}delta.{tn}, |r, add| {{"
                );
                for ix in mine {
                    let _ = writeln!(
                        o,
                        "            for key in {} {{ self.{}.set(key, r.uuid, add); }}",
                        ix.keys(),
                        ix.name()
                    );
                }
                let _ = writeln!(o, "        }});");
            }
        };
        apply_tables(&mut o, "apply_rows", "&");
        let _ = writeln!(
            o,
            "    }}\n\n\
             /// [`Snapshot::apply`] consuming the change set: rows are moved in, not cloned.\n\
             pub fn apply_owned(&mut self, delta: Delta) {{"
        );
        apply_tables(&mut o, "apply_rows_owned", "");
        let _ = writeln!(
            o,
            "    }}\n\n\
             /// Apply a `<table-updates2>` object (the `update2`/`update3` notification's updates, or\n\
             /// the reply to `monitor_cond`), as ovsdb-server(7) describes it: `initial` and `insert`\n\
             /// rows (missing columns take their defaults), `modify` with column diffs, `delete`.\n\
             /// Returns what changed. All or nothing: on error the snapshot is unchanged. Tables\n\
             /// and columns this schema lacks are skipped.\n\
             pub fn apply_updates2(&mut self, updates: &Value) -> Result<Delta, ModelError> {{\n\
             let tables = updates.as_object().ok_or_else(|| ModelError::Update {{\n\
             at: None,\n detail: \"expected an object of table updates\".into(),\n }})?;\n\
             let mut delta = Delta::default();\n\
             for (name, rows) in tables {{\n match name.as_str() {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "                {Table} => delta.{tn} = table_updates2(&self.{tn}, rows)?,",
        );
        let _ = writeln!(
            o,
            "                _ => {{}}\n            }}\n        }}\n        self.apply(&delta);\n        Ok(delta)\n    }}\n\n\
             /// [`Snapshot::apply_updates2`] consuming `updates` and keeping no change set: each\n\
             /// row's JSON is freed once typed and the typed rows are moved in, not cloned. For\n\
             /// loading a large reply; returns the number of row changes. All or nothing.\n\
             pub fn load_updates2(&mut self, updates: Value) -> Result<usize, ModelError> {{\n\
             let Value::Object(tables) = updates else {{\n\
             return Err(ModelError::Update {{\n\
             at: None,\n detail: \"expected an object of table updates\".into(),\n }});\n }};\n\
             let mut delta = Delta::default();\n\
             for (name, rows) in tables {{\n match name.as_str() {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "                {Table} => delta.{tn} = table_updates2_owned(&self.{tn}, rows)?,",
        );
        let _ = writeln!(
            o,
            "                _ => {{}}\n            }}\n        }}\n        let n = delta.len();\n        self.apply_owned(delta);\n        Ok(n)\n    }}\n\n\
             /// Types one batch of one table's row updates (`{{uuid: update}}`, a part of a\n\
             /// `<table-updates2>` that arrives in batches) into `delta` without applying it:\n\
             /// each row's JSON is freed once typed. Apply the whole `delta` with\n\
             /// [`Snapshot::apply`] once every batch is in, so that a large update is all or\n\
             /// nothing and never exists as one JSON tree. A table this schema lacks is skipped.\n\
             pub fn stage_updates2(&self, delta: &mut Delta, table: &str, rows: Value) -> Result<(), ModelError> {{\n\
             match table {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "                {Table} => delta.{tn}.extend(table_updates2_owned(&self.{tn}, rows)?),",
        );
        let _ = writeln!(
            o,
            "                _ => {{}}\n            }}\n        Ok(())\n    }}\n}}\n"
        );
        let _ = writeln!(
            o,
            "/// The tables of a [`Snapshot`] and a [`Delta`], for generic lookups.\n\
             pub trait SnapshotTable: Table {{\n\
             /// This table's rows in `s`.\n fn rows(s: &Snapshot) -> &BTreeMap<Uuid, Self>;\n\
             /// This table's changes in `d`.\n fn changes(d: &Delta) -> &[RowDelta<Self>];\n}}\n"
        );
        let _ = writeln!(
            o,
            "/// Something to do with each table type of this schema (see [`for_each_table`]).\n\
             pub trait TableVisitor {{\n\
             /// Called once per table.\n fn visit<T: SnapshotTable>(&mut self);\n}}\n\n\
             /// Call `visitor.visit::<T>()` for every table `T`, in schema order.\n\
             pub fn for_each_table(visitor: &mut impl TableVisitor) {{"
        );
        each_table(&mut o, &s.tables, "    visitor.visit::<{Ty}>();");
        let _ = writeln!(o, "}}\n");
        each_table(
            &mut o,
            &s.tables,
            "impl SnapshotTable for {Ty} {\n fn rows(s: &Snapshot) -> &BTreeMap<Uuid, Self> {\n &s.{tn}\n }\n fn changes(d: &Delta) -> &[RowDelta<Self>] {\n &d.{tn}\n }\n}\n",
        );
        self.out.push_str(&o);
    }

    fn delta(&mut self) {
        let s = self.schema;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "/// The typed row changes to `{}`, per table (a table's list is in the order the changes\n\
             /// were received; each row appears at most once).\n\
             #[derive(Debug, Clone, Default, PartialEq)]\npub struct Delta {{",
            s.name
        );
        each_table(
            &mut o,
            &s.tables,
            "    /// Changes to `{Name}`.\n    pub {tn}: Vec<RowDelta<{Ty}>>,",
        );
        let sum = s
            .tables
            .iter()
            .map(|t| format!("self.{}.len()", snake(&t.name)))
            .collect::<Vec<_>>()
            .join(" + ");
        let _ = writeln!(
            o,
            "}}\n\nimpl Delta {{\n\
             /// No row changed.\n pub fn is_empty(&self) -> bool {{\n self.len() == 0\n }}\n\n\
             /// Number of row changes.\n pub fn len(&self) -> usize {{\n {sum}\n }}\n\n\
             /// The changes to table `T`.\n pub fn changes<T: SnapshotTable>(&self) -> &[RowDelta<T>] {{\n T::changes(self)\n }}\n\n\
             /// The names of the tables with changes, in schema order.\n pub fn changed_tables(&self) -> Vec<&'static str> {{\n let mut out = Vec::new();"
        );
        each_table(
            &mut o,
            &s.tables,
            "        if !self.{tn}.is_empty() { out.push({Table}); }",
        );
        let _ = writeln!(
            o,
            "        out\n    }}\n\n\
             /// The operations of one transaction that makes these changes (see [`RowDelta::to_op`]),\n\
             /// table by table in schema order. OVSDB checks references when the transaction\n\
             /// commits, so the order of the operations does not matter.\n\
             pub fn to_ops(&self) -> Vec<Value> {{\n let mut out = Vec::with_capacity(self.len());"
        );
        each_table(
            &mut o,
            &s.tables,
            "        out.extend(self.{tn}.iter().filter_map(RowDelta::to_op));",
        );
        let _ = writeln!(
            o,
            "        out\n    }}\n\n\
             /// The typed form of a transaction's changes to a database of `schema` (another version\n\
             /// of this schema is fine: tables and columns are matched by name). Changes that touch\n\
             /// only columns this schema lacks are dropped.\n\
             pub fn from_txn(schema: &Schema, delta: &TxnDelta) -> Result<Self, ModelError> {{\n\
             let mut out = Self::default();\n\
             for (t, changes) in &delta.tables {{\n\
             let Some(ts) = schema.tables.get(*t) else {{ continue }};\n\
             match ts.name.as_str() {{"
        );
        each_table(
            &mut o,
            &s.tables,
            "                {Table} => out.{tn}.extend(table_changes(ts, changes)?),",
        );
        let _ = writeln!(
            o,
            "                _ => {{}}\n            }}\n        }}\n        Ok(out)\n    }}\n}}"
        );
        self.out.push_str(&o);
    }
}
