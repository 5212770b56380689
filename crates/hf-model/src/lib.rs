//! hf-model: typed OVN northbound and southbound rows, snapshots and change sets, generated at
//! build time from `schemas/ovn-nb.ovsschema` and `schemas/ovn-sb.ovsschema`, and the same for
//! the part of a chassis's local Open vSwitch database it uses ([`vswitch`], from
//! `schemas/vswitch.ovsschema`). Sans-I/O.
//!
//! This is the one vocabulary northd, controller, datapath, check and trace share: nobody else
//! defines NB, SB or local-database row types.
//!
//! What it does:
//! - [`nb`] and [`sb`]: one struct per table (`nb::LogicalSwitch`, `nb::Nat`,
//!   `sb::PortBinding`, ...) with `uuid` and one typed field per column (string → `String`,
//!   integer → `i64`, real → `f64`, boolean → `bool`, reference → [`RowRef<T>`], other uuid →
//!   `Uuid`; optional columns → `Option`, sets → `BTreeSet`, maps → `BTreeMap`), one enum per
//!   string-enum column (`nb::AclAction::AllowRelated`), and one column enum per table
//!   (`nb::LogicalSwitchColumn::Name`) for `where`/`columns` lists. Every row type implements
//!   [`Table`]: conversion from an [`hf_ovsdb::Row`] and back, and to the JSON row objects of
//!   `insert`/`update` operations.
//! - `nb::Snapshot`/`sb::Snapshot` ([`NbSnapshot`], [`SbSnapshot`]): every row by UUID in
//!   `BTreeMap`s (deterministic iteration) with lookup indexes, built from an
//!   [`hf_ovsdb::Database`] or from the `<table-updates2>` JSON a client receives. Indexes:
//!   by name for every table with a `name` column (`logical_switch_by_name`), by value
//!   (`port_binding_by_logical_port`), and by parent for the references consumers follow
//!   backwards (`logical_router_by_nat`: the router holding a NAT row; `port_group_by_acls`;
//!   `port_binding_all_by_datapath`); the list is `DATABASES` in `build.rs`. Each has a
//!   unique form (`None` when several rows match) and an `_all_by_` form.
//! - `nb::Delta`/`sb::Delta` ([`NbDelta`], [`SbDelta`]): per table a list of [`RowDelta`]s,
//!   from an [`hf_ovsdb::TxnDelta`] or from `apply_updates2`; a snapshot applies them.
//! - For code that handles tables by name or generically: `nb::AnyRow` (a row of any table),
//!   `nb::for_each_table` with a `nb::TableVisitor` (once per table type), `nb::schema()`
//!   (holdfast's parsed schema), and the same in [`sb`].
//!
//! What it does not do: talk to a server (that is `hf-ovsdb-net`'s replica, which feeds
//! `apply_updates2`), check referential integrity or schema constraints (the server does),
//! or interpret column contents (`options`, `match` strings stay strings).
//!
//! Conversion rules, for peers whose schema differs from holdfast's:
//! - tables and columns are matched by name: a column the peer lacks (OVN 23.03 has no
//!   `NAT.match`) takes its default; tables and columns holdfast does not know are skipped;
//! - a string enum value holdfast's schema does not list is kept as the enum's `Other` variant
//!   (so one new value from a newer peer never makes a snapshot unusable, and it survives a
//!   round trip); [`Table::check_known`] turns it into [`ModelError::UnknownEnum`] for callers
//!   that must refuse it;
//! - a value of the wrong type or with the wrong number of elements is a
//!   [`ModelError::Column`] naming table, column and row UUID.
//!
//! Invariants: a snapshot's indexes always agree with its rows (only `apply` changes either);
//! `to_datums` returns one datum per column in holdfast's schema order (names sorted), which is
//! the order of [`hf_ovsdb::Row::cols`] for a database of that schema.

mod convert;
mod error;
mod row_ref;
pub mod small_map;
mod table;
mod update;

pub use error::ModelError;
pub use row_ref::RowRef;
pub use small_map::{SmallMap, StrMap};
pub use table::{Column, RowDelta, Table};

/// holdfast's `OVN_Northbound` tables (generated from `schemas/ovn-nb.ovsschema`): OVN 23.03's
/// NB 7.0.0 plus the extensions listed in `schemas/README.md` (`NAT.match`, `NAT.priority`).
pub mod nb {
    include!(concat!(env!("OUT_DIR"), "/nb.rs"));
}

/// holdfast's `OVN_Southbound` tables (generated from `schemas/ovn-sb.ovsschema`): OVN 23.03's
/// SB 20.27.0.
pub mod sb {
    include!(concat!(env!("OUT_DIR"), "/sb.rs"));
}

/// The chassis's local database (`Open_vSwitch`, the subset in `schemas/vswitch.tables`):
/// `Open_vSwitch`, `Bridge`, `Port` and `Interface` rows.
pub mod vswitch {
    include!(concat!(env!("OUT_DIR"), "/vswitch.rs"));
}

pub use nb::{Delta as NbDelta, Snapshot as NbSnapshot};
pub use sb::{Delta as SbDelta, Snapshot as SbSnapshot};
pub use vswitch::{Delta as VswitchDelta, Snapshot as VswitchSnapshot};
