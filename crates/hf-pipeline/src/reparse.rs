//! Parsing a kept flow's text again when it is compiled, once per text and compiling thread.
//!
//! A datapath keeps its flows without parse trees ([`FlowSpec::drop_trees`]); the compile
//! parses each one again ([`FlowSpec::trees`]). A datapath group's flow is one text (one
//! shared allocation) in every datapath of the group, so a cold compile of 500 switches would
//! parse it 500 times. [`Reparse`] remembers the trees of the texts it parsed last, keyed by
//! the texts' allocations, so each compiling thread parses such a text once.
//!
//! What it does not do: hold every tree at once (it forgets everything when it is full, so a
//! compile's peak holds at most [`CAP`] flows' trees per thread), or compare texts by content
//! (two equal texts in different allocations are parsed twice, as they were before).

use std::collections::HashMap;
use std::sync::Arc;

use hf_expr::{Action, Expr};

use crate::program::FlowSpec;

/// How many parses one compiling thread remembers: several switches' worth of a datapath
/// group's flows (about 150 each at 500 switches), and far fewer trees than a program's.
pub(crate) const CAP: usize = 4096;

/// A flow's match and action trees.
pub(crate) type Trees = (Arc<Expr>, Arc<[Action]>);

/// A remembered parse, with the texts whose addresses key it (held, so that an address stays
/// that text's while the entry lives).
struct Parsed {
    _texts: (Arc<str>, Arc<str>),
    trees: Trees,
}

/// Recent parses of one compiling thread.
#[derive(Default)]
pub(crate) struct Reparse {
    /// By the addresses of the match and actions texts.
    memo: HashMap<(usize, usize), Parsed>,
    /// How many texts this thread parsed (the memo's misses).
    pub(crate) parsed: usize,
}

impl Reparse {
    /// `fs`'s trees: its own when it holds them, else a remembered parse of its texts, else
    /// [`FlowSpec::trees`] (remembered for the next flow with the same texts).
    pub(crate) fn trees(&mut self, fs: &FlowSpec) -> Result<Trees, String> {
        let Some(t) = fs.source.as_ref().filter(|_| !fs.has_trees()) else {
            return fs.trees();
        };
        let key = (
            Arc::as_ptr(&t.matches).cast::<u8>() as usize,
            Arc::as_ptr(&t.actions).cast::<u8>() as usize,
        );
        if let Some(Parsed { trees: (m, a), .. }) = self.memo.get(&key) {
            return Ok((Arc::clone(m), Arc::clone(a)));
        }
        let trees = fs.trees()?;
        self.parsed += 1;
        if self.memo.len() >= CAP {
            self.memo.clear();
        }
        let parsed = Parsed {
            _texts: (Arc::clone(&t.matches), Arc::clone(&t.actions)),
            trees: (Arc::clone(&trees.0), Arc::clone(&trees.1)),
        };
        self.memo.insert(key, parsed);
        Ok(trees)
    }
}
