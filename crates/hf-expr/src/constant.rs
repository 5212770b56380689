//! Constants: 128-bit values that remember how they were written (decimal, hex, IPv4, IPv6,
//! Ethernet) so that printing gives back text of the same form.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// How a constant was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// `80`
    Decimal,
    /// `0x800`
    Hex,
    /// `10.0.0.1`
    Ipv4,
    /// `fe80::1`
    Ipv6,
    /// `00:00:00:00:00:01`
    Mac,
}

/// The mask of a masked constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mask {
    /// A CIDR prefix length (`/24`), for IPv4 and IPv6 constants.
    Prefix(u8),
    /// An explicit mask in some format (`/0xff`, `/ff:ff:ff:00:00:00`).
    Bits(u128, Format),
}

/// An integer constant, possibly masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Constant {
    /// The value.
    pub value: u128,
    /// How it prints.
    pub format: Format,
    /// The mask, if any.
    pub mask: Option<Mask>,
}

/// A mask of the top `prefix` bits of a `width`-bit value.
pub fn prefix_mask(width: u32, prefix: u8) -> u128 {
    let prefix = u32::from(prefix).min(width);
    if prefix == 0 {
        0
    } else {
        let ones = if prefix >= 128 {
            u128::MAX
        } else {
            (1u128 << prefix) - 1
        };
        ones << (width - prefix)
    }
}

/// All ones in the low `width` bits.
pub fn width_mask(width: u32) -> u128 {
    if width >= 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    }
}

impl Constant {
    /// An unmasked constant.
    pub const fn new(value: u128, format: Format) -> Self {
        Self {
            value,
            format,
            mask: None,
        }
    }

    /// A decimal constant.
    pub const fn dec(value: u128) -> Self {
        Self::new(value, Format::Decimal)
    }

    /// An IPv4 address.
    pub fn ipv4(a: Ipv4Addr) -> Self {
        Self::new(u128::from(u32::from(a)), Format::Ipv4)
    }

    /// An IPv6 address.
    pub fn ipv6(a: Ipv6Addr) -> Self {
        Self::new(u128::from(a), Format::Ipv6)
    }

    /// The mask as bits for a field of `width` bits (all ones when unmasked).
    pub fn mask_bits(&self, width: u32) -> u128 {
        match self.mask {
            None => width_mask(width),
            Some(Mask::Bits(m, _)) => m,
            Some(Mask::Prefix(p)) => {
                let w = if self.format == Format::Ipv4 { 32 } else { 128 };
                prefix_mask(w, p)
            }
        }
    }

    /// The width of field the constant needs, as OVN reckons it: the mask's width when masked;
    /// otherwise 32, 128 or 48 bits for an address, and the value's significant bits for a number.
    pub fn bits_needed(&self) -> u32 {
        let significant = |v: u128| 128 - v.leading_zeros();
        if self.mask.is_some() {
            return significant(self.mask_bits(128) | self.value);
        }
        match self.format {
            Format::Ipv4 => 32,
            Format::Ipv6 => 128,
            Format::Mac => 48,
            _ => significant(self.value),
        }
    }
}

fn write_value(f: &mut fmt::Formatter<'_>, value: u128, format: Format) -> fmt::Result {
    match format {
        Format::Decimal => write!(f, "{value}"),
        Format::Hex => write!(f, "{value:#x}"),
        Format::Ipv4 => write!(f, "{}", Ipv4Addr::from(value as u32)),
        Format::Ipv6 => write!(f, "{}", Ipv6Addr::from(value)),
        Format::Mac => {
            let b = (value as u64).to_be_bytes();
            write!(
                f,
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                b[2], b[3], b[4], b[5], b[6], b[7]
            )
        }
    }
}

impl fmt::Display for Constant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_value(f, self.value, self.format)?;
        match self.mask {
            None => Ok(()),
            Some(Mask::Prefix(p)) => write!(f, "/{p}"),
            Some(Mask::Bits(m, fm)) => {
                f.write_str("/")?;
                write_value(f, m, fm)
            }
        }
    }
}
