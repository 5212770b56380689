//! Differential test: holdfast db against real `ovsdb-server` (the oracle).
//!
//! A seeded generator makes random transactions (insert, update, mutate, delete, select, with
//! some that must fail: constraint violations, bad references, `maxRows`, duplicate index
//! values, `abort`) over a test schema holding every column type class: scalars, optional
//! values, bounded and unbounded sets, maps (with changed values, bounded, of at most one
//! pair), weak and strong references (garbage collection of unreferenced non-root rows, weak
//! references removed when their target goes), enums, ranged integers, constrained strings, root
//! and non-root tables. The same transactions go to both servers, each on its own unix socket in
//! a tempdir, over raw JSON-RPC connections that also hold a `monitor` (update), a
//! `monitor_cond` (update2), a conditional `monitor_cond` and a `monitor_cond_since` (update3).
//! Compared, with UUIDs mapped by insertion order: every reply (results, and error classes: the
//! `error` string), every notification, and a dump after every step. At the end each server's
//! database file is loaded by the other (and by itself again) and must give the same dump.
//!
//! A fixed test replays the issue's own case on OVN's NB schema (`enabled`, `tag_request`).
//!
//! `HF_DIFF_SEED=N` runs one seed (`HF_DIFF_STEPS` steps); by default a fixed seed and two
//! more run. A failure prints the seed and the shortest step sequence found that still fails.

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::common::*;

const SCHEMA: &str = r#"{
  "name": "Diff",
  "version": "1.0.0",
  "tables": {
    "Root": {
      "isRoot": true,
      "indexes": [["name"]],
      "columns": {
        "name": {"type": "string"},
        "i": {"type": {"key": {"type": "integer", "minInteger": 0, "maxInteger": 100}}},
        "b": {"type": {"key": "boolean", "min": 0, "max": 1}},
        "tag": {"type": {"key": {"type": "integer", "minInteger": 1, "maxInteger": 4095}, "min": 0, "max": 1}},
        "e": {"type": {"key": {"type": "string", "enum": ["set", ["a", "b", "c"]]}}},
        "oe": {"type": {"key": {"type": "string", "enum": ["set", ["x", "y"]]}, "min": 0, "max": 1}},
        "s": {"type": {"key": {"type": "string", "maxLength": 4}}},
        "r": {"type": {"key": "real", "min": 0, "max": 1}},
        "u": {"type": {"key": "uuid", "min": 0, "max": 1}},
        "bs": {"type": {"key": {"type": "integer", "minInteger": 0, "maxInteger": 9}, "min": 0, "max": 3}},
        "one": {"type": {"key": "integer", "min": 1, "max": 3}},
        "us": {"type": {"key": "string", "min": 0, "max": "unlimited"}},
        "m": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
        "mi": {"type": {"key": "integer", "value": {"type": "integer", "minInteger": 0, "maxInteger": 3}, "min": 0, "max": 2}},
        "m1": {"type": {"key": "string", "value": "string", "min": 0, "max": 1}},
        "strong": {"type": {"key": {"type": "uuid", "refTable": "Child"}, "min": 0, "max": "unlimited"}},
        "weak": {"type": {"key": {"type": "uuid", "refTable": "Leaf", "refType": "weak"}, "min": 0, "max": "unlimited"}},
        "wopt": {"type": {"key": {"type": "uuid", "refTable": "Leaf", "refType": "weak"}, "min": 0, "max": 1}},
        "wmap": {"type": {"key": "string", "value": {"type": "uuid", "refTable": "Leaf", "refType": "weak"}, "min": 0, "max": "unlimited"}}
      }
    },
    "Child": {
      "columns": {
        "v": {"type": "integer"},
        "lref": {"type": {"key": {"type": "uuid", "refTable": "Leaf", "refType": "weak"}, "min": 0, "max": 1}},
        "tags": {"type": {"key": "string", "min": 0, "max": "unlimited"}}
      }
    },
    "Leaf": {
      "isRoot": true,
      "maxRows": 5,
      "columns": {
        "n": {"type": "integer"}
      }
    }
  }
}"#;

const DB: &str = "Diff";
const TABLES: [&str; 3] = ["Root", "Child", "Leaf"];
const BOGUS: &str = "00000000-dead-4000-8000-0000000000ff";
const PLAIN_UUIDS: [&str; 3] = [
    "11111111-0000-4000-8000-000000000001",
    "22222222-0000-4000-8000-000000000002",
    "33333333-0000-4000-8000-000000000003",
];

// --- a seeded generator of symbolic transactions ----------------------------------------------

/// SplitMix64: small, seeded, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// A value in a transaction that names a row: rendered per server from the rows it inserted.
#[derive(Debug, Clone)]
enum Sym {
    /// Plain JSON.
    J(Value),
    /// `["uuid", U]` of the k-th row inserted into a table (or a bogus UUID if there is none).
    Row(&'static str, u64),
    /// `["set", [...]]` of such values.
    Set(Vec<Sym>),
    /// `["map", [[k, v], ...]]` with symbolic values.
    Map(Vec<(Value, Sym)>),
    /// An object of symbolic values.
    Obj(Vec<(String, Sym)>),
    /// An array of symbolic values.
    Arr(Vec<Sym>),
}

/// One transaction: its operations, symbolic.
type Step = Vec<Sym>;

struct Gen {
    rng: Rng,
    /// Inserts attempted per table (the range references are drawn from).
    inserted: HashMap<&'static str, u64>,
}

fn j(v: Value) -> Sym {
    Sym::J(v)
}

fn obj(members: Vec<(&str, Sym)>) -> Sym {
    Sym::Obj(
        members
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

impl Gen {
    fn new(seed: u64) -> Self {
        Gen {
            rng: Rng(seed),
            inserted: HashMap::new(),
        }
    }

    fn row_ref(&mut self, table: &'static str) -> Sym {
        let n = self.inserted.get(table).copied().unwrap_or(0);
        // Mostly recent rows (more of them still exist), sometimes any, rarely none at all.
        let k = if n == 0 || self.rng.chance(3) {
            n + 3
        } else if self.rng.chance(60) {
            n.saturating_sub(1 + self.rng.below(6))
        } else {
            self.rng.below(n)
        };
        Sym::Row(table, k)
    }

    fn name(&mut self) -> Value {
        json!(format!("n{}", self.rng.below(14)))
    }

    fn set_of(&mut self, elems: Vec<Value>) -> Value {
        if elems.len() == 1 && self.rng.chance(50) {
            elems.into_iter().next().unwrap_or(Value::Null)
        } else {
            json!(["set", elems])
        }
    }

    fn distinct_ints(&mut self, n: usize, lo: i64, hi: i64) -> Vec<Value> {
        let mut v: Vec<i64> = Vec::new();
        for _ in 0..n * 3 {
            if v.len() == n {
                break;
            }
            let x = self.rng.int(lo, hi);
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v.into_iter().map(|x| json!(x)).collect()
    }

    fn distinct_strs(&mut self, n: usize, pool: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for _ in 0..n * 3 {
            if v.len() == n {
                break;
            }
            let x = self.rng.pick(pool).to_string();
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v
    }

    fn str_map(&mut self, max: usize) -> Value {
        let n = self.rng.below(max as u64 + 1) as usize;
        let keys = self.distinct_strs(n, &["k0", "k1", "k2", "k3", "k4"]);
        let pairs: Vec<Value> = keys
            .into_iter()
            .map(|k| json!([k, self.rng.pick(&["v0", "v1", "v2"])]))
            .collect();
        json!(["map", pairs])
    }

    /// A value for Root column `c`; `bad` allows values the schema forbids.
    fn root_value(&mut self, c: &str, bad: bool) -> Sym {
        let r = &mut self.rng;
        let bad = bad && r.chance(15);
        let v = match c {
            "name" => return j(self.name()),
            "i" => json!(if bad { r.int(-3, 104) } else { r.int(0, 100) }),
            "b" => match r.below(3) {
                0 => json!(["set", []]),
                1 => json!(true),
                _ => json!(false),
            },
            "tag" => match r.below(4) {
                0 => json!(["set", []]),
                _ if bad => json!(0),
                _ => json!(r.int(1, 6)),
            },
            "e" => json!(if bad { "z" } else { r.pick(&["a", "b", "c"]) }),
            "oe" => match r.below(3) {
                0 => json!(["set", []]),
                _ => json!(r.pick(&["x", "y"])),
            },
            "s" => json!(if bad {
                "toolong"
            } else {
                r.pick(&["", "a", "ab", "abcd"])
            }),
            "r" => match r.below(3) {
                0 => json!(["set", []]),
                _ => json!(r.int(-8, 8) as f64 * 0.25 + 0.5),
            },
            "u" => match r.below(3) {
                0 => json!(["set", []]),
                _ => json!(["uuid", r.pick(&PLAIN_UUIDS)]),
            },
            "bs" => {
                let n = if bad { 4 } else { self.rng.below(4) as usize };
                let e = self.distinct_ints(n, 0, 9);
                self.set_of(e)
            }
            "one" => {
                let n = if bad {
                    0
                } else {
                    1 + self.rng.below(3) as usize
                };
                let e = self.distinct_ints(n, 0, 3);
                self.set_of(e)
            }
            "us" => {
                let n = self.rng.below(4) as usize;
                let e = self
                    .distinct_strs(n, &["a", "b", "c", "d", "e"])
                    .into_iter()
                    .map(Value::String)
                    .collect();
                self.set_of(e)
            }
            "m" => self.str_map(4),
            "mi" => {
                let n = if bad { 3 } else { self.rng.below(3) as usize };
                let keys = self.distinct_ints(n, 0, 4);
                let pairs: Vec<Value> = keys
                    .into_iter()
                    .map(|k| json!([k, self.rng.int(0, 3)]))
                    .collect();
                json!(["map", pairs])
            }
            "m1" => self.str_map(1),
            "strong" => {
                let n = self.rng.below(3);
                return Sym::Set(self.refs("Child", n, bad));
            }
            "weak" => {
                let n = self.rng.below(3);
                return Sym::Set(self.refs("Leaf", n, bad));
            }
            "wopt" => {
                if self.rng.chance(30) {
                    json!(["set", []])
                } else {
                    return self.row_ref("Leaf");
                }
            }
            "wmap" => {
                let n = self.rng.below(3) as usize;
                let keys = self.distinct_strs(n, &["p", "q", "r"]);
                let pairs = keys
                    .into_iter()
                    .map(|k| (json!(k), self.row_ref("Leaf")))
                    .collect();
                return Sym::Map(pairs);
            }
            other => unreachable!("column {other}"),
        };
        j(v)
    }

    /// Values for `cols`, at most one of them possibly invalid: which of several faults in one
    /// row ovsdb-server reports first depends on its hash order of the row's members.
    fn row_values(&mut self, cols: &[&'static str]) -> Vec<(String, Sym)> {
        let bad = self.rng.below(cols.len() as u64) as usize;
        cols.iter()
            .enumerate()
            .map(|(i, c)| (c.to_string(), self.root_value(c, i == bad)))
            .collect()
    }

    /// `n` references into `table`, distinct unless `dup`.
    fn refs(&mut self, table: &'static str, n: u64, dup: bool) -> Vec<Sym> {
        let mut out: Vec<Sym> = Vec::new();
        let mut seen = Vec::new();
        for _ in 0..n {
            let r = self.row_ref(table);
            if let Sym::Row(_, k) = r
                && !dup
            {
                if seen.contains(&k) {
                    continue;
                }
                seen.push(k);
            }
            out.push(r);
        }
        out
    }

    fn root_columns(&mut self, n: usize) -> Vec<&'static str> {
        const COLS: [&str; 19] = [
            "name", "i", "b", "tag", "e", "oe", "s", "r", "u", "bs", "one", "us", "m", "mi", "m1",
            "strong", "weak", "wopt", "wmap",
        ];
        let mut v: Vec<&'static str> = Vec::new();
        for _ in 0..n * 3 {
            if v.len() == n {
                break;
            }
            let c = COLS[self.rng.below(COLS.len() as u64) as usize];
            if !v.contains(&c) {
                v.push(c);
            }
        }
        v
    }

    fn root_where(&mut self) -> Sym {
        match self.rng.below(5) {
            0 | 1 => j(json!([["name", "==", self.name()]])),
            2 => {
                let r = self.row_ref("Root");
                Sym::Arr(vec![Sym::Arr(vec![j(json!("_uuid")), j(json!("==")), r])])
            }
            3 => j(json!([["i", "<", self.rng.int(0, 40)]])),
            _ => j(json!([["b", "==", true], ["e", "!=", "c"]])),
        }
    }

    fn insert_root(&mut self, ops: &mut Vec<Sym>) {
        let ncols = 1 + self.rng.below(7) as usize;
        let mut cols = self.root_columns(ncols);
        if !cols.contains(&"name") {
            cols.insert(0, "name");
        }
        // The enum's default ("") is not one of its values: an insert must give it.
        if !cols.contains(&"e") && !self.rng.chance(4) {
            cols.push("e");
        }
        let mut row = self.row_values(&cols);
        if self.rng.chance(40) {
            // A child in the same transaction, referenced by name (and maybe existing ones).
            let cname = format!("c{}", ops.len());
            ops.push(obj(vec![
                ("op", j(json!("insert"))),
                ("table", j(json!("Child"))),
                ("uuid-name", j(json!(cname))),
                (
                    "row",
                    obj(vec![
                        ("v", j(json!(self.rng.int(0, 9)))),
                        ("lref", self.row_ref("Leaf")),
                    ]),
                ),
            ]));
            *self.inserted.entry("Child").or_default() += 1;
            row.retain(|(c, _)| c != "strong");
            let mut refs = vec![j(json!(["named-uuid", cname]))];
            if self.rng.chance(30) {
                refs.push(self.row_ref("Child"));
            }
            row.push(("strong".into(), Sym::Set(refs)));
        }
        ops.push(obj(vec![
            ("op", j(json!("insert"))),
            ("table", j(json!("Root"))),
            ("row", Sym::Obj(row)),
        ]));
        *self.inserted.entry("Root").or_default() += 1;
    }

    fn mutation(&mut self) -> Sym {
        let r = &mut self.rng;
        let m = match r.below(13) {
            0 => json!(["i", r.pick(&["+=", "-=", "*=", "/=", "%="]), r.int(1, 30)]),
            1 => json!(["bs", "insert", ["set", self.distinct_ints(2, 0, 9)]]),
            2 => json!(["bs", "delete", ["set", self.distinct_ints(2, 0, 9)]]),
            3 => json!(["us", "insert", self.rng.pick(&["a", "f", "g"])]),
            4 => json!(["us", "delete", ["set", ["a", "b", "c"]]]),
            5 => json!(["m", "insert", self.str_map(2)]),
            6 => json!(["m", "delete", ["set", ["k0", "k1"]]]),
            7 => json!(["m", "delete", self.str_map(2)]),
            8 => json!([
                "mi",
                "insert",
                ["map", [[self.rng.int(0, 4), self.rng.int(0, 3)]]]
            ]),
            9 => json!([
                "one",
                self.rng.pick(&["insert", "delete"]),
                self.rng.int(0, 3)
            ]),
            10 => {
                let c = self.row_ref("Child");
                return Sym::Arr(vec![j(json!("strong")), j(json!("delete")), c]);
            }
            11 => {
                let l = self.row_ref("Leaf");
                return Sym::Arr(vec![j(json!("weak")), j(json!("insert")), l]);
            }
            _ => json!(["tag", "insert", self.rng.int(1, 3)]),
        };
        j(m)
    }

    fn step(&mut self) -> Step {
        let mut ops = Vec::new();
        let n = 1 + self.rng.below(3);
        for _ in 0..n {
            match self.rng.below(100) {
                0..=21 => self.insert_root(&mut ops),
                22..=43 => {
                    let ncols = 1 + self.rng.below(4) as usize;
                    let cols = self.root_columns(ncols);
                    let row = self.row_values(&cols);
                    ops.push(obj(vec![
                        ("op", j(json!("update"))),
                        ("table", j(json!("Root"))),
                        ("where", self.root_where()),
                        ("row", Sym::Obj(row)),
                    ]));
                }
                44..=59 => {
                    let n = 1 + self.rng.below(2);
                    let muts = (0..n).map(|_| self.mutation()).collect();
                    ops.push(obj(vec![
                        ("op", j(json!("mutate"))),
                        ("table", j(json!("Root"))),
                        ("where", self.root_where()),
                        ("mutations", Sym::Arr(muts)),
                    ]));
                }
                60..=66 => ops.push(obj(vec![
                    ("op", j(json!("delete"))),
                    ("table", j(json!("Root"))),
                    ("where", self.root_where()),
                ])),
                67..=74 => {
                    ops.push(obj(vec![
                        ("op", j(json!("insert"))),
                        ("table", j(json!("Leaf"))),
                        ("row", j(json!({"n": self.rng.int(0, 5)}))),
                    ]));
                    *self.inserted.entry("Leaf").or_default() += 1;
                }
                75..=80 => {
                    let w = if self.rng.chance(50) {
                        j(json!([["n", "==", self.rng.int(0, 5)]]))
                    } else {
                        let l = self.row_ref("Leaf");
                        Sym::Arr(vec![Sym::Arr(vec![j(json!("_uuid")), j(json!("==")), l])])
                    };
                    // First in its transaction: ovsdb-server 3.1 leaves a weak reference
                    // dangling when a row that holds it was modified by an earlier operation
                    // of the transaction that deletes its target (the referring row is
                    // assessed before the deletion is). holdfast removes it, as RFC 7047 says.
                    ops.insert(
                        0,
                        obj(vec![
                            ("op", j(json!("delete"))),
                            ("table", j(json!("Leaf"))),
                            ("where", w),
                        ]),
                    );
                }
                81..=86 => {
                    let c = self.row_ref("Child");
                    let row = if self.rng.chance(50) {
                        obj(vec![("lref", self.row_ref("Leaf"))])
                    } else {
                        obj(vec![
                            ("v", j(json!(self.rng.int(0, 9)))),
                            ("tags", j(json!(["set", ["t1", "t2"]]))),
                        ])
                    };
                    ops.push(obj(vec![
                        ("op", j(json!("update"))),
                        ("table", j(json!("Child"))),
                        (
                            "where",
                            Sym::Arr(vec![Sym::Arr(vec![j(json!("_uuid")), j(json!("==")), c])]),
                        ),
                        ("row", row),
                    ]));
                }
                87..=89 => {
                    // An unreferenced child: garbage-collected at commit.
                    ops.push(obj(vec![
                        ("op", j(json!("insert"))),
                        ("table", j(json!("Child"))),
                        ("row", j(json!({"v": 1}))),
                    ]));
                    *self.inserted.entry("Child").or_default() += 1;
                }
                90..=93 => {
                    // A strong reference to a row that does not exist.
                    ops.push(obj(vec![
                        ("op", j(json!("update"))),
                        ("table", j(json!("Root"))),
                        ("where", self.root_where()),
                        ("row", j(json!({"strong": ["uuid", BOGUS]}))),
                    ]));
                }
                94..=97 => ops.push(j(json!({"op": "select", "table": "Root",
                    "where": [["i", ">=", self.rng.int(0, 100)]],
                    "columns": ["name", "i", "b", "tag", "bs", "m", "strong", "weak", "wopt"]}))),
                _ => ops.push(j(json!({"op": "abort"}))),
            }
        }
        ops
    }
}

// --- servers and raw JSON-RPC connections ----------------------------------------------------

/// A JSON-RPC connection over a unix socket.
struct Conn {
    stream: UnixStream,
    framer: hf_ovsdb_net::framing::Framer,
    next_id: u64,
    pending: Vec<Value>,
}

impl Conn {
    fn connect(path: &Path) -> Result<Self, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("connect {}: {e}", path.display()));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            stream,
            framer: hf_ovsdb_net::framing::Framer::new(1 << 30),
            next_id: 1,
            pending: Vec::new(),
        })
    }

    fn recv(&mut self) -> Result<Value, String> {
        let mut buf = [0u8; 65536];
        loop {
            if let Some(m) = self.framer.next_message() {
                return m.map_err(|e| format!("bad message: {e:?}"));
            }
            match std::io::Read::read(&mut self.stream, &mut buf) {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => self.framer.push(&buf[..n]),
                // A read on a socket with a timeout is never restarted after a signal or a
                // stop/continue of the process (signal(7)): EINTR is not a closed connection.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// Call and wait for the reply; notifications that arrive meanwhile are kept.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"method": method, "params": params, "id": id});
        std::io::Write::write_all(&mut self.stream, msg.to_string().as_bytes())
            .map_err(|e| format!("write: {e}"))?;
        loop {
            let m = self.recv()?;
            if m.get("id") == Some(&json!(id)) && m.get("method").is_none() {
                return Ok(m);
            }
            if m.get("method") == Some(&json!("echo")) {
                continue;
            }
            self.pending.push(m);
        }
    }

    /// Every notification sent before the server answered an echo sent now.
    fn fence(&mut self) -> Result<Vec<Value>, String> {
        self.call("echo", json!(["fence"]))?;
        Ok(std::mem::take(&mut self.pending))
    }
}

/// Which server.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Holdfast,
    Ovsdb,
}

/// A running server of either kind on `dir/sock`.
struct Server {
    kind: Kind,
    dir: PathBuf,
    file: PathBuf,
    hf: Option<HoldfastDb>,
    ovs_pidfile: Option<PathBuf>,
}

impl Server {
    fn sock(&self) -> PathBuf {
        match self.kind {
            Kind::Holdfast => self.dir.join("db.sock"),
            Kind::Ovsdb => self.dir.join("ovs.sock"),
        }
    }

    /// Serve `file` (created from the schema when missing).
    fn start(kind: Kind, dir: &Path, file: &Path) -> Result<Self, String> {
        Self::start_with(kind, dir, file, SCHEMA)
    }

    /// Serve `file` (created from `schema_text` when missing).
    fn start_with(kind: Kind, dir: &Path, file: &Path, schema_text: &str) -> Result<Self, String> {
        let schema = dir.join("test.ovsschema");
        std::fs::write(&schema, schema_text).map_err(|e| e.to_string())?;
        let mut s = Server {
            kind,
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
            hf: None,
            ovs_pidfile: None,
        };
        match kind {
            Kind::Holdfast => {
                let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("hf.db");
                s.hf = Some(HoldfastDb::start(dir, &[(name, &schema)], &[]));
            }
            Kind::Ovsdb => {
                if !file.exists() {
                    run_ok(
                        Command::new("ovsdb-tool")
                            .arg("create")
                            .arg(file)
                            .arg(&schema),
                    );
                }
                let pidfile = dir.join("ovs.pid");
                let out = run(
                    Command::new("ovsdb-server")
                        .arg("--detach")
                        .arg("--no-chdir")
                        .arg(format!("--pidfile={}", pidfile.display()))
                        .arg(format!("--log-file={}", dir.join("ovs.log").display()))
                        .arg(format!("--unixctl={}", dir.join("ovs.ctl").display()))
                        .arg(format!("--remote=punix:{}", s.sock().display()))
                        .arg(file),
                    Duration::from_secs(30),
                );
                s.ovs_pidfile = Some(pidfile);
                if !out.status.success() {
                    return Err(format!(
                        "ovsdb-server failed on {}: {}",
                        file.display(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
        }
        Ok(s)
    }

    /// Stop the server and wait until it has exited.
    fn stop(&mut self) {
        if let Some(mut h) = self.hf.take() {
            h.kill9();
        }
        if let Some(p) = self.ovs_pidfile.take()
            && let Ok(pid) = std::fs::read_to_string(&p)
        {
            let pid = pid.trim().to_string();
            let _ = Command::new("kill").arg(&pid).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One server under test with its connections and the names of the rows it made.
struct Side {
    server: Server,
    txn: Conn,
    /// update, update2, conditional update2, update3.
    monitors: Vec<Conn>,
    /// UUID text → name by insertion order (`Root#3`).
    names: HashMap<String, String>,
    /// Per table, the UUIDs of rows inserted by committed transactions, in order.
    rows: HashMap<&'static str, Vec<String>>,
}

const MONITORS: [&str; 4] = [
    "monitor",
    "monitor_cond",
    "monitor_cond(where)",
    "monitor_cond_since",
];

impl Side {
    fn open(server: Server) -> Result<Self, String> {
        let sock = server.sock();
        let txn = Conn::connect(&sock)?;
        let all: Value = TABLES
            .iter()
            .map(|t| (t.to_string(), json!([{}])))
            .collect::<Map<_, _>>()
            .into();
        let mut cond = all.clone();
        cond["Root"] = json!([{"where": [["i", ">", 50]]}]);
        let mut monitors = Vec::new();
        for (i, m) in MONITORS.iter().enumerate() {
            let mut c = Conn::connect(&sock)?;
            let params = match i {
                0 => json!([DB, "m0", all]),
                1 => json!([DB, "m1", all]),
                2 => json!([DB, "m2", cond]),
                _ => json!([DB, "m3", all, "00000000-0000-0000-0000-000000000000"]),
            };
            let method = m.trim_end_matches("(where)");
            let r = c.call(method, params)?;
            if !r["error"].is_null() {
                return Err(format!("{m} failed: {r}"));
            }
            monitors.push(c);
        }
        Ok(Side {
            server,
            txn,
            monitors,
            names: HashMap::new(),
            rows: HashMap::new(),
        })
    }

    fn render(&self, s: &Sym) -> Value {
        match s {
            Sym::J(v) => v.clone(),
            Sym::Row(t, k) => {
                // A row that does not exist: a UUID no row has, distinct per index.
                let u = self
                    .rows
                    .get(t)
                    .and_then(|v| v.get(*k as usize))
                    .cloned()
                    .unwrap_or_else(|| format!("00000000-dead-4000-8000-{k:012x}"));
                json!(["uuid", u])
            }
            Sym::Set(xs) => json!(["set", xs.iter().map(|x| self.render(x)).collect::<Vec<_>>()]),
            Sym::Map(xs) => json!([
                "map",
                xs.iter()
                    .map(|(k, v)| json!([k, self.render(v)]))
                    .collect::<Vec<_>>()
            ]),
            Sym::Obj(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), self.render(v))).collect())
            }
            Sym::Arr(xs) => Value::Array(xs.iter().map(|x| self.render(x)).collect()),
        }
    }

    /// Run one step; returns the reply's `result` (or the whole reply if it has none).
    fn transact(&mut self, step_no: usize, step: &Step) -> Result<Value, String> {
        let mut params = vec![json!(DB)];
        let ops: Vec<Value> = step.iter().map(|s| self.render(s)).collect();
        params.extend(ops.iter().cloned());
        let reply = self.txn.call("transact", Value::Array(params))?;
        let Some(results) = reply["result"].as_array() else {
            return Ok(reply);
        };
        let ok = results.len() == ops.len() && results.iter().all(|r| r.get("error").is_none());
        for (i, (op, r)) in ops.iter().zip(results).enumerate() {
            if op["op"] != "insert" {
                continue;
            }
            let Some(u) = r["uuid"][1].as_str() else {
                continue;
            };
            let table = TABLES
                .iter()
                .copied()
                .find(|t| op["table"] == *t)
                .unwrap_or("?");
            let name = if ok {
                let v = self.rows.entry(table).or_default();
                v.push(u.to_string());
                format!("{table}#{}", v.len() - 1)
            } else {
                format!("aborted{step_no}.{i}")
            };
            self.names.insert(u.to_string(), name);
        }
        Ok(reply["result"].clone())
    }

    fn dump(&mut self) -> Result<Value, String> {
        let ops: Vec<Value> = std::iter::once(json!(DB))
            .chain(
                TABLES
                    .iter()
                    .map(|t| json!({"op": "select", "table": t, "where": []})),
            )
            .collect();
        let r = self.txn.call("transact", Value::Array(ops))?;
        let mut out = Map::new();
        for (t, res) in TABLES
            .iter()
            .zip(r["result"].as_array().cloned().unwrap_or_default())
        {
            let mut rows = res["rows"]
                .as_array()
                .cloned()
                .ok_or(format!("dump: {r}"))?;
            for row in &mut rows {
                if let Some(o) = row.as_object_mut() {
                    o.remove("_version");
                }
            }
            out.insert(t.to_string(), json!({"rows": rows}));
        }
        Ok(canon(&Value::Object(out), &self.names))
    }
}

/// The comparable form of a value from one server: its UUIDs replaced by names, set and map
/// elements and dumped rows sorted, the transaction ids of update3 blanked.
fn canon(v: &Value, names: &HashMap<String, String>) -> Value {
    let name = |s: &str| names.get(s).cloned().unwrap_or_else(|| s.to_string());
    match v {
        Value::String(s) => Value::String(name(s)),
        Value::Array(a) => {
            let mut a: Vec<Value> = a.iter().map(|x| canon(x, names)).collect();
            let tagged = a.len() == 2 && (a[0] == "set" || a[0] == "map");
            if tagged && let Value::Array(el) = &mut a[1] {
                el.sort_by_key(Value::to_string);
            }
            Value::Array(a)
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let mut x = canon(x, names);
                    if k == "rows"
                        && let Value::Array(rows) = &mut x
                    {
                        rows.sort_by_key(Value::to_string); // rows of a select
                    }
                    if k == "_version" {
                        x = json!("<version>"); // each server makes its own
                    }
                    (name(k), x)
                })
                .collect(),
        ),
        // ovsdb-server prints reals as "%.15g" (2.0 as 2); holdfast keeps a fraction and every
        // digit. Both are the same JSON number to a client; compare them as such.
        Value::Number(n) => n
            .as_f64()
            .and_then(|f| format!("{f:.14e}").parse::<f64>().ok())
            .map_or_else(|| v.clone(), |f| json!(f)),
        other => other.clone(),
    }
}

/// The comparable form of a reply's results: errors reduced to their class.
fn canon_result(v: &Value, names: &HashMap<String, String>) -> Value {
    let mut v = canon(v, names);
    if let Some(a) = v.as_array_mut() {
        for r in a {
            if let Some(e) = r.get("error").cloned() {
                *r = json!({"error": e});
            }
        }
    }
    v
}

fn canon_notes(notes: &[Value], names: &HashMap<String, String>) -> Value {
    Value::Array(
        notes
            .iter()
            .map(|n| {
                let mut n = canon(n, names);
                if n["method"] == "update3" && n["params"][1].is_string() {
                    n["params"][1] = json!("<txn-id>");
                }
                n.as_object_mut().map(|o| o.remove("id"));
                n
            })
            .collect(),
    )
}

// --- one run, and the search for a short failing sequence -----------------------------------

fn mismatch(what: &str, a: &Value, b: &Value) -> String {
    format!(
        "{what} differ\n  holdfast:     {}\n  ovsdb-server: {}",
        serde_json::to_string(a).unwrap_or_default(),
        serde_json::to_string(b).unwrap_or_default()
    )
}

/// Run `steps` on fresh servers; Err(step index, what differs). `files` also checks the file
/// swap at the end.
fn run_steps(steps: &[Step], files: bool) -> Result<(), (usize, String)> {
    let tmp = tempfile::tempdir().map_err(|e| (0, e.to_string()))?;
    let (hd, od) = (tmp.path().join("hf"), tmp.path().join("ovs"));
    for d in [&hd, &od] {
        std::fs::create_dir_all(d).map_err(|e| (0, e.to_string()))?;
    }
    let start = |k, d: &Path, f: &str| Server::start(k, d, &d.join(f)).and_then(Side::open);
    let mut hf = start(Kind::Holdfast, &hd, "hf.db").map_err(|e| (0, e))?;
    let mut ovs = start(Kind::Ovsdb, &od, "ovs.db").map_err(|e| (0, e))?;
    let fail = |i: usize| move |e: String| (i, e);
    // Initial monitor contents are empty on both; check they are still in step.
    for (i, step) in steps.iter().enumerate() {
        let a = hf.transact(i, step).map_err(fail(i))?;
        let b = ovs.transact(i, step).map_err(fail(i))?;
        let (ca, cb) = (canon_result(&a, &hf.names), canon_result(&b, &ovs.names));
        if ca != cb {
            return Err((
                i,
                mismatch(
                    "transaction replies",
                    &canon(&a, &hf.names),
                    &canon(&b, &ovs.names),
                ),
            ));
        }
        if i % 25 == 24 {
            // Rows enter and leave the conditional monitor when its condition changes.
            let cond = json!(["m2", "m2", {"Root": [{"where": [["i", ">", (i * 37) % 100]]}]}]);
            let a = hf.monitors[2]
                .call("monitor_cond_change", cond.clone())
                .map_err(fail(i))?;
            let b = ovs.monitors[2]
                .call("monitor_cond_change", cond)
                .map_err(fail(i))?;
            let (mut a, mut b) = (canon(&a, &hf.names), canon(&b, &ovs.names));
            for v in [&mut a, &mut b] {
                v.as_object_mut().map(|o| o.remove("id"));
            }
            if a != b {
                return Err((i, mismatch("monitor_cond_change replies", &a, &b)));
            }
        }
        for (m, kind) in MONITORS.iter().enumerate() {
            let na = hf.monitors[m].fence().map_err(fail(i))?;
            let nb = ovs.monitors[m].fence().map_err(fail(i))?;
            let (na, nb) = (canon_notes(&na, &hf.names), canon_notes(&nb, &ovs.names));
            if na != nb {
                return Err((i, mismatch(&format!("{kind} notifications"), &na, &nb)));
            }
        }
        let (da, db) = (hf.dump().map_err(fail(i))?, ovs.dump().map_err(fail(i))?);
        if da != db {
            return Err((i, mismatch("dumps", &da, &db)));
        }
    }
    if !files {
        return Ok(());
    }
    // Failures of the file phase are reported at index `steps.len()`.
    let end = steps.len();
    let fail = |e: String| (end, e);
    let want = ovs.dump().map_err(fail)?;
    let (hf_names, ovs_names) = (hf.names.clone(), ovs.names.clone());
    let (hf_file, ovs_file) = (hf.server.file.clone(), ovs.server.file.clone());
    drop(hf);
    drop(ovs);
    // Both files carry column diffs (`_is_diff` records), so reading them is what is tested.
    if steps.len() >= 50 {
        for f in [&hf_file, &ovs_file] {
            let bytes = std::fs::read(f).map_err(|e| fail(e.to_string()))?;
            let diffs = hf_ovsdb::file::RecordReader::new(&bytes)
                .filter_map(Result::ok)
                .filter(|r| r.json.get("_is_diff") == Some(&json!(true)))
                .count();
            if diffs == 0 {
                return Err((end, format!("{} has no _is_diff record", f.display())));
            }
        }
    }
    // Each file in the other server, and in its own again.
    for (kind, file, names, what) in [
        (
            Kind::Ovsdb,
            &hf_file,
            &hf_names,
            "holdfast's file served by ovsdb-server",
        ),
        (
            Kind::Holdfast,
            &ovs_file,
            &ovs_names,
            "ovsdb-server's file served by holdfast",
        ),
        (
            Kind::Holdfast,
            &hf_file,
            &hf_names,
            "holdfast's file served by holdfast again",
        ),
    ] {
        let d = tmp.path().join(format!("swap-{}", what.len()));
        std::fs::create_dir_all(&d).map_err(|e| fail(e.to_string()))?;
        let f = d.join(if kind == Kind::Ovsdb {
            "ovs.db"
        } else {
            "hf.db"
        });
        std::fs::copy(file, &f).map_err(|e| fail(e.to_string()))?;
        let mut side = start(
            kind,
            &d,
            f.file_name().and_then(|n| n.to_str()).unwrap_or("x"),
        )
        .map_err(|e| fail(format!("{what}: {e}")))?;
        side.names = names.clone();
        let got = side.dump().map_err(fail)?;
        if got != want {
            return Err((end, mismatch(what, &got, &want)));
        }
    }
    Ok(())
}

fn steps_for(seed: u64, n: usize) -> Vec<Step> {
    let mut g = Gen::new(seed);
    (0..n).map(|_| g.step()).collect()
}

fn show(steps: &[Step]) -> String {
    // Rendered as the holdfast side would see them with no rows: symbolic rows as `Table#k`.
    fn sym(s: &Sym) -> Value {
        match s {
            Sym::J(v) => v.clone(),
            Sym::Row(t, k) => json!(["uuid", format!("{t}#{k}")]),
            Sym::Set(xs) => json!(["set", xs.iter().map(sym).collect::<Vec<_>>()]),
            Sym::Map(xs) => json!([
                "map",
                xs.iter()
                    .map(|(k, v)| json!([k, sym(v)]))
                    .collect::<Vec<_>>()
            ]),
            Sym::Obj(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), sym(v))).collect()),
            Sym::Arr(xs) => Value::Array(xs.iter().map(sym).collect()),
        }
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| format!("  {i}: {}\n", Value::Array(s.iter().map(sym).collect())))
        .collect()
}

/// Remove steps while the run still fails, within a time budget. `files`: the failure is in
/// the file phase (only then is that phase run for each candidate).
fn shrink(mut steps: Vec<Step>, budget: Duration, files: bool) -> (Vec<Step>, String) {
    let deadline = Instant::now() + budget;
    let mut why = match run_steps(&steps, files) {
        Err((i, e)) => {
            steps.truncate(i + 1);
            e
        }
        Ok(()) => return (steps, "(did not fail again: flaky?)".into()),
    };
    let mut chunk = steps.len().div_ceil(2).max(1);
    while chunk >= 1 && Instant::now() < deadline {
        let mut i = 0;
        let mut progressed = false;
        while i < steps.len() && Instant::now() < deadline {
            let mut cand = steps.clone();
            cand.drain(i..(i + chunk).min(cand.len()));
            match run_steps(&cand, files) {
                Err((k, e)) if !cand.is_empty() && (!files || k == cand.len()) => {
                    cand.truncate(k + 1);
                    steps = cand;
                    why = e;
                    progressed = true;
                }
                _ => i += chunk,
            }
        }
        if !progressed {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    (steps, why)
}

fn differential(seed: u64, n: usize) {
    let steps = steps_for(seed, n);
    let started = Instant::now();
    if let Err((i, why)) = run_steps(&steps, true) {
        let budget = Duration::from_secs(env_u64("HF_DIFF_SHRINK_SECS").unwrap_or(60));
        let files = i >= steps.len();
        let (short, why2) = shrink(steps[..(i + 1).min(steps.len())].to_vec(), budget, files);
        let at = if files {
            "in the file phase".to_string()
        } else {
            format!("at step {i}")
        };
        panic!(
            "differential test failed: HF_DIFF_SEED={seed} HF_DIFF_STEPS={n}, {at}:\n{why}\n\
             shortest sequence found ({} steps), failing with:\n{why2}\n{}",
            short.len(),
            show(&short)
        );
    }
    eprintln!(
        "differential seed {seed}: {n} transactions identical in {:?}",
        started.elapsed()
    );
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn steps_per_seed() -> usize {
    env_u64("HF_DIFF_STEPS").map_or(1000, |n| n as usize)
}

#[test]
fn differential_vs_ovsdb_server() {
    if !require(
        "differential_vs_ovsdb_server",
        &["ovsdb-server", "ovsdb-tool"],
    ) {
        return;
    }
    let seed = env_u64("HF_DIFF_SEED").unwrap_or(20_260_801);
    differential(seed, steps_per_seed());
}

#[test]
fn differential_vs_ovsdb_server_more_seeds() {
    if std::env::var("HF_DIFF_SEED").is_ok()
        || !require(
            "differential_vs_ovsdb_server_more_seeds",
            &["ovsdb-server", "ovsdb-tool"],
        )
    {
        return;
    }
    for seed in [7, 1_234_567] {
        differential(seed, steps_per_seed());
    }
}

/// The issue's own reproduction, on OVN's NB schema: `enabled` false -> true -> empty and
/// `tag_request` 5 -> empty, seen by a raw `monitor_cond` on holdfast exactly as ovsdb-server
/// sends them, and a file ovsdb-server wrote with those changes served by holdfast unchanged.
#[test]
fn optional_columns_as_ovsdb_server_sends_and_writes_them() {
    if !require(
        "optional_columns_as_ovsdb_server_sends_and_writes_them",
        &["ovsdb-server", "ovsdb-tool"],
    ) {
        return;
    }
    let nb = std::fs::read_to_string(nb_schema()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut seen: Vec<Vec<Value>> = Vec::new();
    for kind in [Kind::Ovsdb, Kind::Holdfast] {
        let d = tmp.path().join(format!("{kind:?}"));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("nb.db");
        let mut srv = Server::start_with(kind, &d, &f, &nb).unwrap();
        let mut w = Conn::connect(&srv.sock()).unwrap();
        let mut m = Conn::connect(&srv.sock()).unwrap();
        let cols = json!({"Logical_Switch_Port": [{"columns": ["enabled", "tag_request"]}]});
        m.call("monitor_cond", json!(["OVN_Northbound", "m", cols]))
            .unwrap();
        let r = w
            .call(
                "transact",
                json!(["OVN_Northbound",
                    {"op": "insert", "table": "Logical_Switch_Port", "uuid-name": "p",
                     "row": {"name": "p1", "enabled": false, "tag_request": 5}},
                    {"op": "insert", "table": "Logical_Switch", "row": {"name": "s1", "ports": ["named-uuid", "p"]}}]),
            )
            .unwrap();
        assert!(r["result"][1]["uuid"].is_array(), "{r}");
        let mut notes = Vec::new();
        for row in [
            json!({"enabled": true}),
            json!({"enabled": ["set", []], "tag_request": ["set", []]}),
        ] {
            let r = w
                .call(
                    "transact",
                    json!(["OVN_Northbound", {"op": "update", "table": "Logical_Switch_Port",
                        "where": [["name", "==", "p1"]], "row": row}]),
                )
                .unwrap();
            assert_eq!(r["result"][0]["count"], 1, "{r}");
            for n in m.fence().unwrap() {
                let rows = n["params"][1]["Logical_Switch_Port"].as_object().cloned();
                notes.extend(rows.into_iter().flat_map(|o| o.into_values()));
            }
        }
        seen.push(notes);
        srv.stop();
        files.push(f);
    }
    let want = vec![
        json!({"insert": {"enabled": false, "tag_request": 5}}),
        json!({"modify": {"enabled": true}}),
        json!({"modify": {"enabled": ["set", []], "tag_request": ["set", []]}}),
    ];
    assert_eq!(seen[0], want, "ovsdb-server's update2 (the oracle)");
    assert_eq!(seen[1], want, "holdfast's update2");
    // ovsdb-server's file (with its `_is_diff` records) served by holdfast.
    let d = tmp.path().join("swap");
    std::fs::create_dir_all(&d).unwrap();
    let f = d.join("nb.db");
    std::fs::copy(&files[0], &f).unwrap();
    let srv = Server::start_with(Kind::Holdfast, &d, &f, &nb).unwrap();
    let mut c = Conn::connect(&srv.sock()).unwrap();
    let r = c
        .call(
            "transact",
            json!(["OVN_Northbound", {"op": "select", "table": "Logical_Switch_Port",
                "where": [], "columns": ["name", "enabled", "tag_request"]}]),
        )
        .unwrap();
    assert_eq!(
        r["result"][0]["rows"],
        json!([{"name": "p1", "enabled": ["set", []], "tag_request": ["set", []]}])
    );
}

/// `holdfast db` writes column diffs by default and whole values with
/// `--disable-file-column-diff`, as ovsdb-server does; `ovsdb-tool` reads both.
#[test]
fn disable_file_column_diff_writes_whole_values() {
    if !require(
        "disable_file_column_diff_writes_whole_values",
        &["ovsdb-tool"],
    ) {
        return;
    }
    for disable in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let schema = dir.path().join("test.ovsschema");
        std::fs::write(&schema, SCHEMA).unwrap();
        let extra: &[&str] = if disable {
            &["--disable-file-column-diff"]
        } else {
            &[]
        };
        let mut hf = HoldfastDb::start(dir.path(), &[("hf.db", &schema)], extra);
        let mut c = Conn::connect(&dir.path().join("db.sock")).unwrap();
        for ops in [
            json!([DB, {"op": "insert", "table": "Root", "row": {"name": "a", "e": "a", "us": ["set", ["x", "y"]]}}]),
            json!([DB, {"op": "update", "table": "Root", "where": [], "row": {"us": ["set", ["y", "z"]], "b": true}}]),
        ] {
            let r = c.call("transact", ops).unwrap();
            assert!(r["result"][0].get("error").is_none(), "{r}");
        }
        hf.kill9();
        let bytes = std::fs::read(&hf.files[0]).unwrap();
        let last = hf_ovsdb::file::RecordReader::new(&bytes)
            .filter_map(Result::ok)
            .last()
            .unwrap()
            .json;
        let row = last["Root"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .clone();
        assert_eq!(row["b"], json!(true));
        if disable {
            assert!(last.get("_is_diff").is_none(), "{last}");
            assert_eq!(row["us"], json!(["set", ["y", "z"]]));
        } else {
            assert_eq!(last["_is_diff"], json!(true), "{last}");
            assert_eq!(
                row["us"],
                json!(["set", ["x", "z"]]),
                "the elements that changed"
            );
        }
        let q = run_ok(
            Command::new("ovsdb-tool")
                .arg("query")
                .arg(&hf.files[0])
                .arg(r#"["Diff",{"op":"select","table":"Root","where":[],"columns":["us","b"]}]"#),
        );
        let v: Value = serde_json::from_str(&q).unwrap();
        assert_eq!(
            v[0]["rows"],
            json!([{"us": ["set", ["y", "z"]], "b": true}]),
            "ovsdb-tool reads the file the same way"
        );
    }
}
