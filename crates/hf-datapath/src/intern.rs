//! Decoding a program message's flow texts once: within one [`Scope`] (a frame's decode),
//! every flow string field marked `deserialize_with` these functions that equals one decoded
//! before is the same `Arc<str>` allocation.
//!
//! # What it does
//!
//! A flow of a datapath group travels once per datapath it applies to (the wire format keeps
//! each datapath's flow list whole). Decoded naively, each copy is its own allocation of the
//! match, actions, identity, stage, UUID and hint: a datapath group of 500 switches is 500
//! copies of each. Inside a [`Scope`] equal strings are decoded into one allocation, which the
//! spec cache and the compiled program then share (they clone the `Arc`, never the text).
//!
//! # What it does not do
//!
//! It does not change the wire format (a string is a string), nor what a message means: an
//! interned message is `==` to the naive one (`intern_tests`). Outside a scope (another thread,
//! or a decode not wrapped in one) strings are decoded as plain allocations. The table lives
//! only as long as the scope: nothing is kept between frames. The hash is a fast
//! non-keyed one: the strings come from this chassis's own controller over a local socket.

use std::cell::RefCell;
use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Deserializer};

/// A word-at-a-time multiply-rotate hasher for strings.
#[derive(Debug, Default, Clone, Copy)]
struct TextHasher(u64);

impl Hasher for TextHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = (h ^ u64::from_le_bytes(w))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29);
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w) ^ (bytes.len() as u64).rotate_left(56))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
        self.0 = h ^ (h >> 31);
    }
}

type Table = HashSet<Arc<str>, BuildHasherDefault<TextHasher>>;

thread_local! {
    /// The open scope's table (`None`: no scope on this thread).
    static TABLE: RefCell<Option<Table>> = const { RefCell::new(None) };
}

/// While alive, flow strings decoded on this thread are shared by content (see the module).
/// Scopes do not nest: an inner one is a no-op, the outer one's table stays.
#[derive(Debug)]
pub struct Scope {
    /// This scope opened the table (and closes it when dropped).
    owner: bool,
}

impl Scope {
    /// Opens a scope on this thread.
    pub fn new() -> Scope {
        let owner = TABLE.with(|t| {
            let mut t = t.borrow_mut();
            if t.is_some() {
                false
            } else {
                *t = Some(Table::default());
                true
            }
        });
        Scope { owner }
    }
}

impl Default for Scope {
    fn default() -> Self {
        Scope::new()
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if self.owner {
            TABLE.with(|t| t.borrow_mut().take());
        }
    }
}

/// `s` as a shared allocation: the scope's equal string if there is one (else `s`, now
/// remembered); outside a scope, a new allocation.
pub fn intern(s: &str) -> Arc<str> {
    TABLE.with(|t| match t.borrow_mut().as_mut() {
        Some(table) => match table.get(s) {
            Some(a) => Arc::clone(a),
            None => {
                let a: Arc<str> = Arc::from(s);
                table.insert(Arc::clone(&a));
                a
            }
        },
        None => Arc::from(s),
    })
}

/// Visits a string without allocating it first (the interned copy is the only one).
struct Text;

impl serde::de::Visitor<'_> for Text {
    type Value = Arc<str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Arc<str>, E> {
        Ok(intern(v))
    }
}

/// An interned string (see [`arc`]); for `Option` and tuples.
struct Interned(Arc<str>);

impl<'de> Deserialize<'de> for Interned {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Text).map(Interned)
    }
}

/// A string, decoded through [`intern`] (`#[serde(deserialize_with = "...")]`).
pub fn arc<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<str>, D::Error> {
    d.deserialize_str(Text)
}

/// An optional string, decoded through [`intern`].
pub fn opt_arc<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Arc<str>>, D::Error> {
    Ok(Option::<Interned>::deserialize(d)?.map(|s| s.0))
}

/// A flow's last good text: its match and its actions.
pub type TextPair = (Arc<str>, Arc<str>);

/// An optional pair of strings (a flow's last good text), decoded through [`intern`].
pub fn opt_pair<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TextPair>, D::Error> {
    Ok(Option::<(Interned, Interned)>::deserialize(d)?.map(|(m, a)| (m.0, a.0)))
}

#[cfg(test)]
mod intern_tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use super::{Scope, intern};
    use crate::proto::{self, DatapathMsg, FlowMsg, ProgramMsg, ToDatapath};

    /// A little deterministic generator (no dependency).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }

        fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
            v[self.below(v.len() as u64) as usize]
        }
    }

    const TEXTS: &[&str] = &[
        "1",
        "ip4",
        "inport == \"p1\"",
        "next;",
        "drop;",
        "ls_in_acl",
        "",
        "ip4.dst == 10.0.0.1 && tcp.dst == 80",
        "outport = \"p2\"; output;",
    ];

    fn random_program(seed: u64) -> ProgramMsg {
        let mut r = Rng(seed);
        let mut msg = ProgramMsg::default();
        for d in 0..1 + r.below(6) {
            let mut dp = DatapathMsg {
                name: format!("dp{d}"),
                tunnel_key: d as u32 + 1,
                ..DatapathMsg::default()
            };
            for _ in 0..r.below(20) {
                let opt = |r: &mut Rng| (r.below(2) == 0).then(|| Arc::from(r.pick(TEXTS)));
                dp.flows.push(Arc::new(FlowMsg {
                    egress: r.below(2) == 0,
                    table: r.below(30) as u8,
                    priority: r.below(200) as u16,
                    matches: r.pick(TEXTS).into(),
                    actions: r.pick(TEXTS).into(),
                    id: r.pick(TEXTS).into(),
                    stage: r.pick(TEXTS).into(),
                    sb_uuid: opt(&mut r),
                    stage_hint: opt(&mut r),
                    last_good: (r.below(3) == 0)
                        .then(|| (Arc::from(r.pick(TEXTS)), Arc::from(r.pick(TEXTS)))),
                }));
            }
            msg.datapaths.push(Arc::new(dp));
        }
        msg
    }

    fn decode(frame: &[u8]) -> ProgramMsg {
        let mut dec = proto::Decoder::<ToDatapath>::new();
        dec.push(frame);
        match dec.next_msg() {
            Ok(Some(ToDatapath::Program(m))) => *m,
            other => panic!("decoding gave {other:?}"),
        }
    }

    /// Every flow string of `m`, in order.
    fn strings(m: &ProgramMsg) -> Vec<&Arc<str>> {
        let mut out = Vec::new();
        for d in &m.datapaths {
            for f in &d.flows {
                out.extend([&f.matches, &f.actions, &f.id, &f.stage]);
                out.extend(f.sb_uuid.iter().chain(&f.stage_hint));
                out.extend(f.last_good.iter().flat_map(|(a, b)| [a, b]));
            }
        }
        out
    }

    /// Decoding (which interns) gives the message that was sent, over random programs; equal
    /// strings of one frame are one allocation, and without a scope they are not.
    #[test]
    fn an_interned_decode_equals_the_message_sent_and_shares_equal_texts() {
        let mut shared_seen = 0;
        for seed in 0..40 {
            let msg = random_program(seed);
            let frame = proto::encode(&ToDatapath::Program(Box::new(msg.clone()))).unwrap();
            let got = decode(&frame);
            assert_eq!(got, msg, "seed {seed}");
            let all = strings(&got);
            for (i, a) in all.iter().enumerate() {
                for b in &all[i + 1..] {
                    assert_eq!(a == b, Arc::ptr_eq(a, b), "seed {seed}: {a:?} vs {b:?}");
                    shared_seen += usize::from(a == b);
                }
            }
        }
        assert!(
            shared_seen > 1000,
            "the programs repeat texts ({shared_seen})"
        );
    }

    #[test]
    fn a_scope_shares_and_ends() {
        let (a, b) = {
            let _s = Scope::new();
            let _inner = Scope::new();
            (intern("next;"), intern(&String::from("next;")))
        };
        assert!(Arc::ptr_eq(&a, &b));
        // The scope is closed (the inner one did not close it early, nor leave it open).
        let (c, d) = (intern("next;"), intern("next;"));
        assert!(!Arc::ptr_eq(&c, &d));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c, a);
    }
}
