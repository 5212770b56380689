//! The symbol table: every field, subfield and predicate of OVN 23.03's logical-flow language,
//! with widths, level of measurement (ordinal or nominal), prerequisites and writability.
//!
//! Fields are the classifier's vocabulary ([`FieldId`]); subfields are bit ranges of fields
//! (`reg0` is `xxreg0[96..127]`, `ct.est` is `ct_state[1]`); predicates are shorthand for
//! expressions (`tcp` is `ip.proto == 6`).

use crate::ast::Expr;
use std::collections::HashMap;

/// Index of a field in [`FIELDS`]: what normalised matches are keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldId(pub u16);

/// A field of the packet or its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDef {
    /// The field's name.
    pub name: &'static str,
    /// Width in bits (0 for strings).
    pub width: u32,
    /// Ordinal (maskable, all relations) or nominal (only `==`, positively).
    pub ordinal: bool,
    /// A string field (`inport`, `outport`).
    pub string: bool,
    /// Whether actions may assign it.
    pub writable: bool,
    /// Prerequisite expression, if any.
    pub prereq: Option<&'static str>,
}

const fn f(
    name: &'static str,
    width: u32,
    ordinal: bool,
    prereq: Option<&'static str>,
) -> FieldDef {
    FieldDef {
        name,
        width,
        ordinal,
        string: false,
        writable: true,
        prereq,
    }
}

const fn ro(mut d: FieldDef) -> FieldDef {
    d.writable = false;
    d
}

/// Every field, in [`FieldId`] order.
pub const FIELDS: &[FieldDef] = &[
    FieldDef {
        name: "inport",
        width: 0,
        ordinal: false,
        string: true,
        writable: true,
        prereq: None,
    },
    FieldDef {
        name: "outport",
        width: 0,
        ordinal: false,
        string: true,
        writable: true,
        prereq: None,
    },
    f("xxreg0", 128, true, None),
    f("xxreg1", 128, true, None),
    f("xreg4", 64, true, None),
    f("flags", 32, true, None),
    f("pkt.mark", 32, true, None),
    f("eth.src", 48, true, None),
    f("eth.dst", 48, true, None),
    ro(f("eth.type", 16, false, None)),
    f("vlan.tci", 16, true, None),
    ro(f("ip.proto", 8, false, Some("ip"))),
    f("ip.dscp", 6, false, Some("ip")),
    f("ip.ecn", 2, false, Some("ip")),
    f("ip.ttl", 8, false, Some("ip")),
    ro(f("ip.frag", 8, true, Some("ip"))),
    f("ip4.src", 32, true, Some("ip4")),
    f("ip4.dst", 32, true, Some("ip4")),
    f("ip6.src", 128, true, Some("ip6")),
    f("ip6.dst", 128, true, Some("ip6")),
    f("ip6.label", 20, true, Some("ip6")),
    f("arp.op", 16, false, Some("arp")),
    f("arp.spa", 32, true, Some("arp")),
    f("arp.tpa", 32, true, Some("arp")),
    f("arp.sha", 48, true, Some("arp")),
    f("arp.tha", 48, true, Some("arp")),
    f("tcp.src", 16, true, Some("tcp")),
    f("tcp.dst", 16, true, Some("tcp")),
    ro(f("tcp.flags", 12, true, Some("tcp"))),
    f("udp.src", 16, true, Some("udp")),
    f("udp.dst", 16, true, Some("udp")),
    f("sctp.src", 16, true, Some("sctp")),
    f("sctp.dst", 16, true, Some("sctp")),
    f("icmp4.type", 8, false, Some("icmp4")),
    f("icmp4.code", 8, false, Some("icmp4")),
    f("icmp6.type", 8, false, Some("icmp6")),
    f("icmp6.code", 8, false, Some("icmp6")),
    f("nd.target", 128, true, Some("nd")),
    f("nd.sll", 48, true, Some("nd_ns")),
    f("nd.tll", 48, true, Some("nd_na")),
    ro(f("ct_mark", 32, true, Some("ct.trk"))),
    ro(f("ct_label", 128, true, Some("ct.trk"))),
    ro(f("ct_state", 8, true, None)),
    // OVN fields: assignable inside icmp4_error/icmp6_error, never matched.
    f("icmp4.frag_mtu", 16, false, Some("icmp4")),
    f("icmp6.frag_mtu", 32, false, Some("icmp6")),
];

/// (name, field, lowest bit, highest bit, prerequisite). Registers overlay the wide registers as
/// ovn-sb(5) says: `reg0` is the most significant word of `xxreg0`.
const SUBFIELDS: &[(&str, &str, u32, u32, Option<&str>)] = &[
    ("reg0", "xxreg0", 96, 127, None),
    ("reg1", "xxreg0", 64, 95, None),
    ("reg2", "xxreg0", 32, 63, None),
    ("reg3", "xxreg0", 0, 31, None),
    ("reg4", "xxreg1", 96, 127, None),
    ("reg5", "xxreg1", 64, 95, None),
    ("reg6", "xxreg1", 32, 63, None),
    ("reg7", "xxreg1", 0, 31, None),
    ("reg8", "xreg4", 32, 63, None),
    ("reg9", "xreg4", 0, 31, None),
    ("xreg0", "xxreg0", 64, 127, None),
    ("xreg1", "xxreg0", 0, 63, None),
    ("xreg2", "xxreg1", 64, 127, None),
    ("xreg3", "xxreg1", 0, 63, None),
    ("flags.loopback", "flags", 0, 0, None),
    ("flags.force_snat_for_dnat", "flags", 2, 2, None),
    ("flags.force_snat_for_lb", "flags", 3, 3, None),
    ("flags.skip_snat_for_lb", "flags", 9, 9, None),
    ("flags.use_snat_zone", "flags", 11, 11, None),
    ("eth.mcast", "eth.dst", 40, 40, None),
    // RARP uses ARP's layout: the same fields under another prerequisite.
    ("rarp.op", "arp.op", 0, 15, Some("rarp")),
    ("rarp.spa", "arp.spa", 0, 31, Some("rarp")),
    ("rarp.tpa", "arp.tpa", 0, 31, Some("rarp")),
    ("rarp.sha", "arp.sha", 0, 47, Some("rarp")),
    ("rarp.tha", "arp.tha", 0, 47, Some("rarp")),
    ("vlan.present", "vlan.tci", 12, 12, None),
    ("vlan.pcp", "vlan.tci", 13, 15, Some("vlan.present")),
    ("vlan.vid", "vlan.tci", 0, 11, Some("vlan.present")),
    ("ip.is_frag", "ip.frag", 0, 0, Some("ip")),
    ("ip.later_frag", "ip.frag", 1, 1, Some("ip")),
    ("ct.new", "ct_state", 0, 0, Some("ct.trk")),
    ("ct.est", "ct_state", 1, 1, Some("ct.trk")),
    ("ct.rel", "ct_state", 2, 2, Some("ct.trk")),
    ("ct.rpl", "ct_state", 3, 3, Some("ct.trk")),
    ("ct.inv", "ct_state", 4, 4, Some("ct.trk")),
    ("ct.trk", "ct_state", 5, 5, None),
    ("ct.snat", "ct_state", 6, 6, Some("ct.trk")),
    ("ct.dnat", "ct_state", 7, 7, Some("ct.trk")),
    ("ct_mark.blocked", "ct_mark", 0, 0, None),
    ("ct_mark.natted", "ct_mark", 1, 1, None),
    ("ct_mark.skip_snat", "ct_mark", 2, 2, None),
    ("ct_mark.force_snat", "ct_mark", 3, 3, None),
    ("ct_mark.ecmp_reply_port", "ct_mark", 16, 31, None),
    ("ct_label.blocked", "ct_label", 0, 0, None),
    ("ct_label.natted", "ct_label", 1, 1, None),
    ("ct_label.skip_snat", "ct_label", 2, 2, None),
    ("ct_label.force_snat", "ct_label", 3, 3, None),
    ("ct_label.ecmp_reply_eth", "ct_label", 32, 79, None),
    ("ct_label.ecmp_reply_port", "ct_label", 80, 95, None),
    ("ct_label.label", "ct_label", 96, 127, None),
];

/// (name, expansion, prerequisite).
const PREDICATES: &[(&str, &str)] = &[
    ("eth.bcast", "eth.dst == ff:ff:ff:ff:ff:ff"),
    ("eth.mcastv6", "eth.dst[32..47] == 0x3333"),
    ("ip4", "eth.type == 0x800"),
    ("ip6", "eth.type == 0x86dd"),
    ("ip", "ip4 || ip6"),
    ("ip4.src_mcast", "ip4.src[28..31] == 0xe"),
    ("ip4.mcast", "ip4.dst[28..31] == 0xe"),
    (
        "ip6.mcast_rsvd",
        "ip6.dst[116..127] == 0xff0 && ip6.dst[0..111] == 0x0",
    ),
    ("ip6.mcast_all_nodes", "ip6.dst == ff02::1"),
    ("ip6.mcast_all_rtrs", "ip6.dst == ff02::2"),
    ("ip6.mcast_sol_node", "ip6.dst == ff02::1:ff00:0/104"),
    (
        "ip6.mcast_flood",
        "eth.mcastv6 && (ip6.mcast_rsvd || ip6.mcast_all_nodes || ip6.mcast_all_rtrs)",
    ),
    ("ip6.mcast", "eth.mcastv6 && ip6.dst[120..127] == 0xff"),
    ("icmp4", "ip4 && ip.proto == 1"),
    ("icmp6", "ip6 && ip.proto == 58"),
    ("icmp", "icmp4 || icmp6"),
    ("igmp", "ip4 && ip.proto == 2"),
    ("ip.first_frag", "ip.is_frag && !ip.later_frag"),
    ("arp", "eth.type == 0x806"),
    ("rarp", "eth.type == 0x8035"),
    (
        "nd",
        "icmp6.type == {135, 136} && icmp6.code == 0 && ip.ttl == 255",
    ),
    (
        "nd_ns",
        "icmp6.type == 135 && icmp6.code == 0 && ip.ttl == 255",
    ),
    (
        "nd_na",
        "icmp6.type == 136 && icmp6.code == 0 && ip.ttl == 255",
    ),
    (
        "nd_rs",
        "icmp6.type == 133 && icmp6.code == 0 && ip.ttl == 255",
    ),
    (
        "nd_ra",
        "icmp6.type == 134 && icmp6.code == 0 && ip.ttl == 255",
    ),
    (
        "nd_ns_mcast",
        "ip6.mcast && icmp6.type == 135 && icmp6.code == 0 && ip.ttl == 255",
    ),
    (
        "mldv1",
        "ip6.src == fe80::/10 && icmp6.type == {130, 131, 132}",
    ),
    ("mldv2", "ip6.src == fe80::/10 && icmp6.type == 143"),
    ("tcp", "ip.proto == 6"),
    ("udp", "ip.proto == 17"),
    ("sctp", "ip.proto == 132"),
];

/// What a symbol is.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum SymbolKind {
    /// A whole field.
    Field(FieldId),
    /// Bits `lo..=hi` of a field.
    Subfield {
        /// The field.
        field: FieldId,
        /// Lowest bit.
        lo: u32,
        /// Highest bit.
        hi: u32,
    },
    /// Shorthand for an expression.
    Predicate(Box<Expr>),
}

/// One entry of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Symbol {
    /// The name.
    pub name: &'static str,
    /// What it is.
    pub kind: SymbolKind,
    /// Width in bits: 1 for predicates, 0 for strings.
    pub width: u32,
    /// Ordinal (all relations, subscripts) or nominal.
    pub ordinal: bool,
    /// String-typed.
    pub string: bool,
    /// Assignable by actions.
    pub writable: bool,
    /// The prerequisite, parsed.
    pub prereq: Option<Box<Expr>>,
    /// A nominal predicate (its expansion tests a nominal field, like `ip4`'s `eth.type`): it
    /// may only be tested positively (`ip4`, `ip4 == 1`, never `!ip4` or `ip4 == 0`).
    pub positive_only: bool,
}

/// FNV-1a: symbol names are short and trusted-length, and lookups are on the parser's hot path.
#[derive(Clone, Copy, Debug, Default)]
struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type FnvMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

/// The symbol table. Build once with [`SymbolTable::ovn`] (or use [`SymbolTable::shared`]).
#[derive(Clone, Debug)]
pub struct SymbolTable {
    symbols: FnvMap<&'static str, Symbol>,
    names: Vec<&'static str>,
}

fn must_parse(text: &'static str) -> Box<Expr> {
    // The table's own texts are fixed and covered by a unit test; a failure here would be a bug in
    // this file, never an input error.
    Box::new(crate::parser::parse_match_text(text).unwrap_or(Expr::Bool(false)))
}

impl SymbolTable {
    /// The symbols of OVN 23.03.
    pub fn ovn() -> Self {
        let mut symbols = FnvMap::default();
        let mut names = Vec::new();
        let mut add = |s: Symbol| {
            names.push(s.name);
            symbols.insert(s.name, s);
        };
        for (i, d) in FIELDS.iter().enumerate() {
            add(Symbol {
                name: d.name,
                kind: SymbolKind::Field(FieldId(i as u16)),
                width: d.width,
                ordinal: d.ordinal,
                string: d.string,
                writable: d.writable,
                prereq: d.prereq.map(must_parse),
                positive_only: false,
            });
        }
        for &(name, field, lo, hi, prereq) in SUBFIELDS {
            let id = field_id(field).unwrap_or(FieldId(0));
            let d = &FIELDS[id.0 as usize];
            add(Symbol {
                name,
                kind: SymbolKind::Subfield { field: id, lo, hi },
                width: hi - lo + 1,
                // Subfields are ordinal; a whole-field alias (`rarp.op`) keeps its field's level.
                ordinal: d.ordinal || lo != 0 || hi + 1 != d.width,
                string: false,
                writable: d.writable && !name.starts_with("ct."),
                prereq: prereq.or(d.prereq).map(must_parse),
                positive_only: false,
            });
        }
        for &(name, text) in PREDICATES {
            add(Symbol {
                name,
                kind: SymbolKind::Predicate(must_parse(text)),
                width: 1,
                ordinal: false,
                string: false,
                writable: false,
                prereq: None,
                positive_only: false,
            });
        }
        names.sort_unstable();
        // A predicate is nominal when its expansion tests a nominal field or a nominal
        // predicate; expansions only name earlier entries, so one pass in order suffices.
        for &(name, _) in PREDICATES {
            let nominal = match symbols.get(name).map(|s| &s.kind) {
                Some(SymbolKind::Predicate(e)) => tests_nominal(&symbols, e),
                _ => false,
            };
            if let Some(s) = symbols.get_mut(name) {
                s.positive_only = nominal;
            }
        }
        Self { symbols, names }
    }

    /// A process-wide table of OVN 23.03's symbols, built on first use.
    pub fn shared() -> &'static SymbolTable {
        static TABLE: std::sync::OnceLock<SymbolTable> = std::sync::OnceLock::new();
        TABLE.get_or_init(SymbolTable::ovn)
    }

    /// Looks a symbol up.
    pub fn get(&self, name: &str) -> Option<&Symbol> {
        self.symbols.get(name)
    }

    /// Every symbol name, sorted.
    pub fn names(&self) -> &[&'static str] {
        &self.names
    }

    /// The closest known name, for "did you mean" help.
    pub fn suggest(&self, name: &str) -> Option<&'static str> {
        self.names
            .iter()
            .map(|n| (edit_distance(n, name), *n))
            .filter(|(d, n)| *d <= 2.max(n.len() / 4))
            .min()
            .map(|(_, n)| n)
    }
}

fn tests_nominal(symbols: &FnvMap<&'static str, Symbol>, e: &Expr) -> bool {
    let sym_nominal = |name: &str| {
        symbols.get(name).is_some_and(|s| match s.kind {
            SymbolKind::Predicate(_) => s.positive_only,
            _ => !s.ordinal,
        })
    };
    match e {
        Expr::Field(f) => sym_nominal(&f.name),
        Expr::Cmp { field, .. } | Expr::Range { field, .. } => sym_nominal(&field.name),
        Expr::Not(x) => tests_nominal(symbols, x),
        Expr::And(v) | Expr::Or(v) => v.iter().any(|x| tests_nominal(symbols, x)),
        _ => false,
    }
}

/// The [`FieldId`] of a field name.
pub fn field_id(name: &str) -> Option<FieldId> {
    FIELDS
        .iter()
        .position(|d| d.name == name)
        .map(|i| FieldId(i as u16))
}

/// The definition of a field.
pub fn field(id: FieldId) -> &'static FieldDef {
    &FIELDS[(id.0 as usize).min(FIELDS.len() - 1)]
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_expansion_and_prerequisite_parses() {
        for (name, text) in PREDICATES {
            assert!(
                crate::parser::parse_match_text(text).is_ok(),
                "{name}: {text}"
            );
        }
        for d in FIELDS {
            if let Some(p) = d.prereq {
                assert!(crate::parser::parse_match_text(p).is_ok(), "{}", d.name);
            }
        }
    }

    #[test]
    fn registers_overlay_wide_registers() {
        let t = SymbolTable::ovn();
        let reg0 = t.get("reg0").expect("reg0");
        assert_eq!(
            reg0.kind,
            SymbolKind::Subfield {
                field: field_id("xxreg0").expect("x"),
                lo: 96,
                hi: 127
            }
        );
        assert_eq!(t.get("xxreg1").expect("xxreg1").width, 128);
        assert_eq!(t.suggest("tcp.dts"), Some("tcp.dst"));
        // Predicates over nominal fields may only be tested positively; others are boolean.
        for (name, nominal) in [
            ("ip4", true),
            ("ip", true),
            ("tcp", true),
            ("nd_ns", true),
            ("icmp", true),
            ("ip.later_frag", false),
            ("eth.bcast", false),
            ("ip4.mcast", false),
        ] {
            assert_eq!(t.get(name).expect(name).positive_only, nominal, "{name}");
        }
    }
}
