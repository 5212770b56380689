//! `hf-expr`: OVN's logical-flow match/action language, typed, normalised and versioned.
//!
//! The southbound database speaks the language of ovn-sb(5) `Logical_Flow`. This crate is
//! holdfast's one implementation of it:
//!
//! - [`lexer`] and [`parser`] turn match text into an [`Expr`]; [`actions`] turns action text into
//!   a list of [`Action`]s. Both trees are plain data that northd can also build by hand.
//! - [`symbols`] is the symbol table (every symbol OVN 23.03 defines); [`typecheck`] checks trees
//!   against it and reports [`ParseError`]s that point at the token at fault and render like
//!   rustc's diagnostics ([`ParseError::render`]).
//! - [`normalize`] turns a checked match into what a classifier consumes: a disjunction of
//!   conjunctions of masked per-field tests, with sets resolved and large cross products kept as
//!   conjunctive-match dimensions instead of being multiplied out.
//! - [`printer`] prints every tree back to text that parses to the same tree.
//! - [`features`] is the feature registry shared by northd and the controller: every language and
//!   SB-layout feature with its holdfast level and the OVN release that introduced it, checks
//!   that reject what lies outside a level, and lowerings to older spellings.
//! - [`lflow_list`] reads `ovn-sbctl lflow-list` output and [`cli`] implements
//!   `holdfast lflow check|normalize` over a reader and a writer.
//!
//! ```
//! use hf_expr::{Action, Constant, Expr, FieldRef, SymbolTable, Value};
//! use hf_expr::normalize::{Limits, Normalizer, Sets};
//! use hf_expr::printer::actions_to_string;
//!
//! let symtab = SymbolTable::shared();
//! // A controller: parse and type-check SB text, normalise the match for the classifier.
//! let m = hf_expr::parse_match(symtab, "ip4.src == {10.0.0.1, 10.0.0.2} && tcp.dst == 80").unwrap();
//! let n = Normalizer::new(symtab, Limits::default()).normalize(&m, &Sets::default()).unwrap();
//! assert_eq!(n.disjuncts.len(), 2);
//!
//! // northd: build typed trees and print them as SB text.
//! let actions = vec![
//!     Action::ct_commit_block(vec![Action::assign(
//!         FieldRef::new("ct_label.blocked"),
//!         Value::Const(Constant::dec(0)),
//!     )]),
//!     Action::next(),
//! ];
//! let text = actions_to_string(&actions);
//! assert_eq!(text, "ct_commit { ct_label.blocked = 0; }; next;");
//! assert_eq!(hf_expr::parse_actions(symtab, &text).unwrap(), actions);
//!
//! // Speaking down to an hf-1 chassis (incident B): the block form has an older spelling.
//! let old = hf_expr::features::lower_actions(&actions, &hf_expr::FeatureSet::level(hf_expr::Level::Hf1)).unwrap();
//! assert_eq!(actions_to_string(&old), "ct_commit(ct_label=0x0/0x1); next;");
//! # let _ = Expr::Bool(true);
//! ```
//!
//! What it does not do: execute actions (that is `hf-pipeline`), talk to databases, or read
//! files, sockets or clocks (the CLI helper takes a reader and a writer). No input makes it
//! panic; recursion is bounded by [`parser::MAX_DEPTH`].

pub mod actions;
pub mod ast;
pub mod cli;
pub mod constant;
pub mod diag;
pub mod eval;
pub mod features;
pub mod lexer;
pub mod lflow_list;
pub mod normalize;
pub mod parser;
pub mod printer;
pub mod symbols;
pub mod typecheck;

pub use actions::Action;
pub use ast::{Expr, FieldRef, RelOp, Rhs, Subscript, Term, Value};
pub use constant::{Constant, Format, Mask};
pub use diag::{ErrorKind, ParseError, Span};
pub use features::{Feature, FeatureSet, Level};
pub use normalize::{Normalized, Sets};
pub use symbols::SymbolTable;

/// Parses and type-checks match text.
pub fn parse_match(symtab: &SymbolTable, text: &str) -> Result<Expr, ParseError> {
    let e = parser::parse_match_text(text)?;
    typecheck::check_match(symtab, &e)?;
    Ok(e)
}

/// Parses and type-checks action text.
pub fn parse_actions(symtab: &SymbolTable, text: &str) -> Result<Vec<Action>, ParseError> {
    let a = actions::parse_actions_text(text)?;
    typecheck::check_actions(symtab, &a)?;
    Ok(a)
}

/// Parses and type-checks match text, rejecting anything outside `features`.
pub fn parse_match_with(
    symtab: &SymbolTable,
    text: &str,
    features: &FeatureSet,
) -> Result<Expr, ParseError> {
    let e = parse_match(symtab, text)?;
    features::check_expr(&e, features)?;
    Ok(e)
}

/// Parses and type-checks action text, rejecting anything outside `features`.
pub fn parse_actions_with(
    symtab: &SymbolTable,
    text: &str,
    features: &FeatureSet,
) -> Result<Vec<Action>, ParseError> {
    let a = parse_actions(symtab, text)?;
    features::check_actions(&a, features)?;
    Ok(a)
}

/// The entry point of the fuzz target (and of its corpus replay): parses `data` as a match and
/// as actions, and when they parse, checks that printing round-trips and that normalisation
/// does not fail unexpectedly. Panics only when an invariant is broken.
pub fn fuzz_one(symtab: &SymbolTable, data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parser::parse_match_text(text) {
        Err(err) => {
            let _ = err.render(text, "match");
        }
        Ok(e) => fuzz_match(symtab, e),
    }
    match actions::parse_actions_text(text) {
        Err(err) => {
            let _ = err.render(text, "action");
        }
        Ok(a) => fuzz_actions(symtab, a),
    }
}

fn fuzz_match(symtab: &SymbolTable, e: Expr) {
    let printed = e.to_string();
    let again = parser::parse_match_text(&printed);
    assert_eq!(
        again.as_ref(),
        Ok(&e),
        "match print→parse changed the tree: {printed}"
    );
    match typecheck::check_match(symtab, &e) {
        Ok(()) => {
            let _ = features::used_by_expr(&e);
            let _ = features::lower_expr(&e, &FeatureSet::level(Level::Hf1));
            let _ = normalize::normalize(symtab, &e, &Sets::default(), &normalize::Limits::fuzz());
        }
        Err(err) => {
            let _ = err.render(&printed, "match");
        }
    }
}

fn fuzz_actions(symtab: &SymbolTable, a: Vec<Action>) {
    let printed = printer::actions_to_string(&a);
    let again = actions::parse_actions_text(&printed);
    assert_eq!(
        again.as_ref(),
        Ok(&a),
        "actions print→parse changed the tree: {printed}"
    );
    if let Err(err) = typecheck::check_actions(symtab, &a) {
        let _ = err.render(&printed, "action");
    }
    let _ = features::used_by_actions(&a);
    let _ = features::lower_actions(&a, &FeatureSet::level(Level::Hf1));
}
