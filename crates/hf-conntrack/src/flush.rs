//! Flushing connections by zone and by owner (incident D: zone 0 belongs to the host and is
//! never flushed; a controller flushes only what it committed).

use crate::action::Owner;
use crate::table::Conntrack;

/// Why a flush was refused. Nothing was removed.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlushError {
    /// Zone 0 is the host's: holdfast never flushes it.
    #[error("zone 0 belongs to the host and is never flushed")]
    ZoneZero,
    /// Flushing by owner needs a real owner tag ([`Owner::NONE`] would match every untagged
    /// connection).
    #[error("flushing by owner needs an owner tag")]
    NoOwner,
}

impl Conntrack {
    fn flush_where(&mut self, pred: impl Fn(u16, u32) -> bool) -> usize {
        let mut n = 0;
        for i in 0..self.entries.len() {
            let e = &self.entries[i];
            if e.live() && pred(e.orig.zone, e.owner) {
                self.remove(i as u32);
                n += 1;
            }
        }
        n
    }

    /// Removes every connection in `zone`; returns how many. Zone 0 is refused.
    pub fn flush_zone(&mut self, zone: u16) -> Result<usize, FlushError> {
        if zone == 0 {
            return Err(FlushError::ZoneZero);
        }
        Ok(self.flush_where(|z, _| z == zone))
    }

    /// Removes every connection committed with `owner`, in any zone but zone 0; returns how
    /// many. [`Owner::NONE`] is refused.
    pub fn flush_owner(&mut self, owner: Owner) -> Result<usize, FlushError> {
        if owner == Owner::NONE {
            return Err(FlushError::NoOwner);
        }
        Ok(self.flush_where(|z, o| z != 0 && o == owner.0))
    }
}
