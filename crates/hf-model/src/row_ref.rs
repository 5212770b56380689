//! Typed references between rows.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use uuid::Uuid;

use crate::table::Table;

/// A reference to a row of table `T`: the UUID of a column whose schema type has
/// `refTable`. It does not keep the row alive or prove it exists; look it up in a snapshot
/// ([`crate::NbSnapshot::get`]). The nil UUID is what a scalar reference column holds by
/// default.
pub struct RowRef<T> {
    uuid: Uuid,
    target: PhantomData<fn() -> T>,
}

impl<T> RowRef<T> {
    /// A reference to row `uuid`.
    pub const fn new(uuid: Uuid) -> Self {
        RowRef {
            uuid,
            target: PhantomData,
        }
    }

    /// The referenced row's UUID.
    pub const fn uuid(self) -> Uuid {
        self.uuid
    }
}

impl<T> From<Uuid> for RowRef<T> {
    fn from(uuid: Uuid) -> Self {
        RowRef::new(uuid)
    }
}

impl<T> Clone for RowRef<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RowRef<T> {}

impl<T> Default for RowRef<T> {
    fn default() -> Self {
        RowRef::new(Uuid::nil())
    }
}

impl<T> PartialEq for RowRef<T> {
    fn eq(&self, other: &Self) -> bool {
        self.uuid == other.uuid
    }
}
impl<T> Eq for RowRef<T> {}

impl<T> PartialOrd for RowRef<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for RowRef<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.uuid.cmp(&other.uuid)
    }
}

impl<T> Hash for RowRef<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.uuid.hash(state);
    }
}

impl<T: Table> fmt::Debug for RowRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", T::NAME, self.uuid)
    }
}

impl<T> fmt::Display for RowRef<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.uuid, f)
    }
}
