//! Microflows: ovn-trace's way of naming one packet, an expression in the logical-flow language
//! that constrains fields to values (`inport == "vm1" && eth.src == 00:00:00:00:00:01 && ip4 &&
//! ip4.src == 10.0.0.2 && ip.ttl == 64`).
//!
//! As `expr_parse_microflow` in OVN's lib/expr.c does: the text is parsed and type-checked
//! (errors point at the bad token), prerequisites are added, the result is normalised, and it
//! must be one conjunction of masked equalities (a disjunction is "ambiguous", an empty one
//! "contradictory"). Fields it does not constrain are zero, as in ovn-trace (so give `ip.ttl`
//! for anything that crosses a router). Port names are kept as names; the caller resolves them.
//!
//! What it does not do: resolve `$address_set` or `@port_group` references (a microflow that
//! uses one is refused by name), constrain registers, flags or conntrack fields (refused by
//! name: the frame is a real packet and the pipeline's metadata starts at zero; conntrack
//! states come from `--ct`), or build the frame (that is [`crate::frame`]).

use std::collections::BTreeMap;

use hf_expr::normalize::{Atom, Limits, Normalizer};
use hf_expr::symbols::{FieldId, field, field_id};
use hf_expr::{ParseError, Sets, SymbolTable};

/// The fields a frame carries (everything else is pipeline metadata).
const FRAME_PREFIXES: &[&str] = &[
    "eth.",
    "vlan.",
    "ip.",
    "ip4.",
    "ip6.",
    "arp.",
    "tcp.",
    "udp.",
    "sctp.",
    "icmp4.type",
    "icmp4.code",
    "icmp6.type",
    "icmp6.code",
    "nd.",
];

/// One packet, as a microflow constrains it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Microflow {
    /// The text it was parsed from.
    pub text: String,
    /// `inport`, when given.
    pub inport: Option<String>,
    /// `outport`, when given (refused by [`parse`]: the pipeline chooses it).
    pub outport: Option<String>,
    /// Integer fields by id: (value, mask of the bits the microflow set).
    pub fields: BTreeMap<u16, (u128, u128)>,
}

/// Why a microflow was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MicroflowError {
    /// The text does not parse or type-check; `rendered` has the caret under the bad token.
    #[error("{rendered}")]
    Syntax {
        /// The diagnostic.
        error: ParseError,
        /// It rendered against the text (`error[...]: ...`, the line and a caret).
        rendered: String,
    },
    /// It does not describe exactly one packet.
    #[error("{0}")]
    Constraints(String),
}

impl Microflow {
    /// The value of integer field `name` (0 when the microflow leaves it unconstrained or the
    /// name is not a field).
    pub fn get(&self, name: &str) -> u128 {
        field_id(name)
            .and_then(|id| self.fields.get(&id.0))
            .map_or(0, |&(v, _)| v)
    }

    /// Whether the microflow constrains any bit of `name`.
    pub fn has(&self, name: &str) -> bool {
        field_id(name).is_some_and(|id| self.fields.contains_key(&id.0))
    }

    /// The microflow with integer field `name` set to `value` (whole field).
    pub fn with(mut self, name: &str, value: u128) -> Self {
        if let Some(id) = field_id(name) {
            let w = field(id).width;
            let m = if w >= 128 {
                u128::MAX
            } else {
                (1u128 << w) - 1
            };
            self.fields.insert(id.0, (value & m, m));
        }
        self
    }
}

/// Parses a microflow (see the module docs). `origin` names the text in diagnostics.
pub fn parse(text: &str, origin: &str) -> Result<Microflow, MicroflowError> {
    let symtab = SymbolTable::shared();
    let syntax = |e: ParseError| MicroflowError::Syntax {
        rendered: e.render(text, origin),
        error: e,
    };
    let expr = hf_expr::parse_match(symtab, text).map_err(syntax)?;
    let norm = Normalizer::new(symtab, Limits::default())
        .normalize(&expr, &Sets::default())
        .map_err(syntax)?;
    let conj = match norm.disjuncts.as_slice() {
        [] => {
            return Err(MicroflowError::Constraints(
                "Constraints are contradictory.".into(),
            ));
        }
        [c] if c.dims.is_empty() => c,
        _ => {
            return Err(MicroflowError::Constraints(format!(
                "Constraints are ambiguous: {text}. A microflow names one packet: give one \
                 value per field (for example ip4 rather than ip, and ip4.src == 10.0.0.1 \
                 rather than a set or a range)."
            )));
        }
    };
    let mut m = Microflow {
        text: text.to_string(),
        ..Microflow::default()
    };
    for atom in &conj.atoms {
        match atom {
            Atom::Bits {
                field: FieldId(id),
                value,
                mask,
            } => {
                let name = field(FieldId(*id)).name;
                if !FRAME_PREFIXES.iter().any(|p| name.starts_with(p)) {
                    let hint = if name.starts_with("ct_") {
                        " (give conntrack states with --ct)"
                    } else {
                        ""
                    };
                    return Err(MicroflowError::Constraints(format!(
                        "{name}: a microflow describes a packet on the wire; registers and \
                         metadata start at zero and cannot be constrained{hint}"
                    )));
                }
                let e = m.fields.entry(*id).or_insert((0, 0));
                e.0 = (e.0 & !mask) | (value & mask);
                e.1 |= mask;
            }
            Atom::Str {
                field: f,
                value,
                positive: true,
            } => {
                let name = field(*f).name;
                let slot = if name == "inport" {
                    &mut m.inport
                } else {
                    &mut m.outport
                };
                *slot = Some(value.clone());
            }
            Atom::Str { field: f, .. } => {
                return Err(MicroflowError::Constraints(format!(
                    "Constraints are ambiguous: {text}. {} != names no one port.",
                    field(*f).name
                )));
            }
            // ovn-trace evaluates is_chassis_resident() in a microflow as true.
            Atom::Resident { positive: true, .. } => {}
            Atom::Resident {
                positive: false, ..
            } => {
                return Err(MicroflowError::Constraints(
                    "Constraints are contradictory: !is_chassis_resident() in a microflow.".into(),
                ));
            }
            Atom::Set { name, .. } => {
                return Err(MicroflowError::Constraints(format!(
                    "{name}: a microflow cannot use an address set or port group; write the \
                     value itself"
                )));
            }
            _ => {
                return Err(MicroflowError::Constraints(format!(
                    "a constraint of {text} is not supported in a microflow"
                )));
            }
        }
    }
    if let Some(o) = &m.outport {
        return Err(MicroflowError::Constraints(format!(
            "outport == \"{o}\": a microflow enters at its inport and the pipeline chooses \
             the output port; leave outport out"
        )));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_ports() {
        let m = parse(
            r#"inport == "vm1" && eth.src == 00:00:00:00:00:01 && ip4.src == 10.0.0.2 && ip.ttl == 64 && tcp.dst == 80"#,
            "microflow",
        )
        .unwrap();
        assert_eq!(m.inport.as_deref(), Some("vm1"));
        assert_eq!(m.get("eth.type"), 0x800);
        assert_eq!(m.get("ip.proto"), 6);
        assert_eq!(m.get("ip4.src"), 0x0a00_0002);
        assert_eq!(m.get("ip.ttl"), 64);
        assert_eq!(m.get("tcp.dst"), 80);
        assert_eq!(m.get("eth.src"), 1);
    }

    #[test]
    fn ambiguous_and_contradictory() {
        let e = parse("ip", "microflow").unwrap_err();
        assert!(e.to_string().contains("ambiguous"), "{e}");
        let e = parse("ip4 && ip6", "microflow").unwrap_err();
        assert!(e.to_string().contains("contradictory"), "{e}");
    }

    #[test]
    fn metadata_is_refused_by_name() {
        let e = parse(r#"inport == "a" && reg0 == 1"#, "microflow").unwrap_err();
        assert!(e.to_string().starts_with("xxreg0"), "{e}");
        let e = parse(r#"inport == "a" && ct.est"#, "microflow").unwrap_err();
        assert!(e.to_string().contains("--ct"), "{e}");
    }

    #[test]
    fn caret_under_the_bad_token() {
        let e = parse(r#"inport == "a" && ip4.srcc == 1.2.3.4"#, "microflow").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("ip4.srcc"), "{s}");
        let lines: Vec<&str> = s.lines().collect();
        let caret = lines.iter().find(|l| l.contains('^')).unwrap();
        let src = lines.iter().find(|l| l.contains("ip4.srcc ==")).unwrap();
        assert_eq!(caret.find('^'), src.find("ip4.srcc"), "{s}");
    }
}
