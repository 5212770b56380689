//! Framing of a byte stream into back-to-back JSON values, as OVSDB's JSON-RPC streams carry
//! them (no length prefix, no delimiter: a value ends where its outermost brace closes).
//!
//! Sans-I/O: [`Framer::push`] takes bytes as they arrive, [`Framer::next_message`] yields each
//! complete top-level value. Malformed input is an error that says what and where; the caller
//! answers and disconnects. The scanner is a small state machine (strings, escapes, nesting
//! depth), so a value split across any number of reads is reassembled exactly.

use serde_json::Value;

/// Why a stream cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A message grew beyond the configured limit.
    #[error("message exceeds the {limit}-byte limit")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Something other than a JSON object or array at the top level.
    #[error(
        "unexpected byte 0x{byte:02x} at stream offset {offset}: a JSON-RPC message must be a JSON object"
    )]
    NotAnObject {
        /// The byte.
        byte: u8,
        /// Its offset in the stream.
        offset: u64,
    },
    /// Brackets that do not match, or a value serde_json rejects.
    #[error("malformed JSON at stream offset {offset}: {reason}")]
    Malformed {
        /// Offset of the message start.
        offset: u64,
        /// What serde_json said.
        reason: String,
    },
    /// Nesting deeper than the limit (protects the parser's stack).
    #[error("JSON nested deeper than {limit} levels at stream offset {offset}")]
    TooDeep {
        /// The limit.
        limit: usize,
        /// Where.
        offset: u64,
    },
}

/// Incremental splitter of a byte stream into JSON values.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    /// Start of the unconsumed part of `buf`.
    start: usize,
    /// How far the scanner has looked (absolute index in `buf`).
    scan: usize,
    depth: usize,
    /// One bit per open bracket, innermost lowest: 1 for `[`, 0 for `{`.
    kinds: u128,
    in_string: bool,
    escape: bool,
    /// A message is in progress (its first byte was seen).
    in_message: bool,
    max_message: usize,
    /// Stream offset of `buf[0]`.
    base: u64,
    failed: bool,
}

/// Maximum nesting depth accepted (serde_json's own limit is 128).
pub const MAX_DEPTH: usize = 128;

/// From this size on, [`Framer::next_raw`] moves the buffer out instead of copying.
const RAW_MOVE_MIN: usize = 1 << 20;

impl Framer {
    /// A framer that rejects messages larger than `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Framer {
            buf: Vec::new(),
            start: 0,
            scan: 0,
            depth: 0,
            kinds: 0,
            in_string: false,
            escape: false,
            in_message: false,
            max_message,
            base: 0,
            failed: false,
        }
    }

    /// Append received bytes.
    pub fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.base += self.start as u64;
            self.buf.clear();
            self.scan = 0;
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// Bytes buffered but not yet returned as messages.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The next complete message, if one is buffered. After an error the framer stays failed.
    pub fn next_message(&mut self) -> Option<Result<Value, FrameError>> {
        let (offset, end) = match self.next_end()? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let r = serde_json::from_slice::<Value>(&self.buf[self.start..end]).map_err(|e| {
            FrameError::Malformed {
                offset,
                reason: e.to_string(),
            }
        });
        self.start = end;
        self.compact();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }

    /// The next complete message's bytes, unparsed, with its stream offset (for
    /// [`FrameError::Malformed`]): only its framing is checked. A large message is handed over
    /// without copying it, so that a client can read it piecemeal instead of as one tree.
    pub fn next_raw(&mut self) -> Option<Result<(u64, Vec<u8>), FrameError>> {
        let (offset, end) = match self.next_end()? {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        let len = end - self.start;
        let msg = if len < RAW_MOVE_MIN || self.buf.len() - end > len / 4 {
            let m = self.buf[self.start..end].to_vec();
            self.start = end;
            self.compact();
            m
        } else {
            // Move the buffer out and keep only what follows the message.
            let tail = self.buf.split_off(end);
            let mut m = std::mem::replace(&mut self.buf, tail);
            m.drain(..self.start);
            self.base += end as u64;
            self.start = 0;
            self.scan = 0;
            m
        };
        Some(Ok((offset, msg)))
    }

    /// Scan for the end of the next message: its stream offset and the index in `buf` one
    /// past its last byte. Marks the framer failed on error (the error is returned once).
    fn next_end(&mut self) -> Option<Result<(u64, usize), FrameError>> {
        if self.failed {
            return None;
        }
        let r = self.scan_message()?;
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }

    fn scan_message(&mut self) -> Option<Result<(u64, usize), FrameError>> {
        let buf = &self.buf;
        let mut i = self.scan;
        while i < buf.len() {
            let b = buf[i];
            if !self.in_message {
                if b.is_ascii_whitespace() {
                    i += 1;
                    self.start = i;
                    continue;
                }
                if b != b'{' && b != b'[' {
                    return Some(Err(FrameError::NotAnObject {
                        byte: b,
                        offset: self.base + i as u64,
                    }));
                }
                self.in_message = true;
                self.start = i;
            }
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                } else {
                    // Skip the plain bytes of the string at once, but never past the byte at
                    // which the size limit below would stop the scan.
                    let limit = buf.len().min(
                        self.start
                            .saturating_add(self.max_message)
                            .saturating_add(1),
                    );
                    i = buf[i + 1..limit]
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\')
                        .map_or(limit, |p| i + 1 + p);
                    if i - self.start > self.max_message {
                        return Some(Err(FrameError::TooLarge {
                            limit: self.max_message,
                        }));
                    }
                    continue;
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => {
                        self.depth += 1;
                        self.kinds = (self.kinds << 1) | u128::from(b == b'[');
                        if self.depth > MAX_DEPTH {
                            return Some(Err(FrameError::TooDeep {
                                limit: MAX_DEPTH,
                                offset: self.base + self.start as u64,
                            }));
                        }
                    }
                    b'}' | b']' => {
                        let open_is_bracket = self.kinds & 1 == 1;
                        if self.depth == 0 || open_is_bracket != (b == b']') {
                            return Some(Err(FrameError::Malformed {
                                offset: self.base + self.start as u64,
                                reason: format!(
                                    "`{}` at stream offset {} closes nothing that is open",
                                    b as char,
                                    self.base + i as u64
                                ),
                            }));
                        }
                        self.depth -= 1;
                        self.kinds >>= 1;
                        if self.depth == 0 {
                            let end = i + 1;
                            self.in_message = false;
                            self.scan = end;
                            return Some(Ok((self.base + self.start as u64, end)));
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
            if i - self.start > self.max_message {
                return Some(Err(FrameError::TooLarge {
                    limit: self.max_message,
                }));
            }
        }
        self.scan = i;
        self.compact();
        None
    }

    /// Drop consumed bytes once they dominate the buffer, so memory tracks the message in
    /// progress, not the stream's history.
    fn compact(&mut self) {
        if self.start > 0 && (self.start >= 64 * 1024 || self.start * 2 >= self.buf.len()) {
            self.buf.drain(..self.start);
            self.base += self.start as u64;
            self.scan -= self.start;
            self.start = 0;
            // After a very large message (a client's initial sync), give the memory back.
            if self.buf.capacity() > 4 << 20 && self.buf.len() < self.buf.capacity() / 4 {
                self.buf.shrink_to(self.buf.len().max(64 << 10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn all(f: &mut Framer) -> Vec<Result<Value, FrameError>> {
        std::iter::from_fn(|| f.next_message()).collect()
    }

    #[test]
    fn back_to_back_values_split_anywhere() {
        let text = br#"{"a":"}{\"x"} [1,[2]]  {"b":{"c":[]}}"#;
        for cut in 0..text.len() {
            let mut f = Framer::new(1 << 20);
            f.push(&text[..cut]);
            let mut got: Vec<Value> = all(&mut f).into_iter().map(Result::unwrap).collect();
            f.push(&text[cut..]);
            got.extend(all(&mut f).into_iter().map(Result::unwrap));
            assert_eq!(
                got,
                vec![
                    json!({"a": "}{\"x"}),
                    json!([1, [2]]),
                    json!({"b": {"c": []}})
                ],
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn errors() {
        let mut f = Framer::new(16);
        f.push(br#"{"a": "0123456789abcdef"}"#);
        assert_eq!(
            f.next_message(),
            Some(Err(FrameError::TooLarge { limit: 16 }))
        );
        assert_eq!(f.next_message(), None, "a failed framer stays failed");
        let mut f = Framer::new(1024);
        f.push(b"  42");
        assert!(matches!(
            f.next_message(),
            Some(Err(FrameError::NotAnObject {
                byte: b'4',
                offset: 2
            }))
        ));
        let mut f = Framer::new(1024);
        f.push(b"{\"a\":]");
        assert!(matches!(
            f.next_message(),
            Some(Err(FrameError::Malformed { .. }))
        ));
        let mut f = Framer::new(1 << 20);
        f.push(&[b'['; 200]);
        assert!(matches!(
            f.next_message(),
            Some(Err(FrameError::TooDeep { .. }))
        ));
    }

    #[test]
    fn raw_messages_small_and_large_keep_offsets_and_order() {
        let big = format!(r#"{{"big":"{}"}}"#, "y".repeat(RAW_MOVE_MIN + 10));
        let text = format!(r#" {{"a":1}}{big}  [2] {big}{{"b":"}}"}}"#);
        let want: Vec<(u64, &str)> = {
            let mut out = Vec::new();
            let mut at = 0;
            for m in [
                r#"{"a":1}"#,
                big.as_str(),
                "[2]",
                big.as_str(),
                r#"{"b":"}"}"#,
            ] {
                let off = text[at..].find(m).unwrap() + at;
                out.push((off as u64, m));
                at = off + m.len();
            }
            out
        };
        for chunk in [text.len(), 100_000, 4096] {
            let mut f = Framer::new(4 << 20);
            let mut got = Vec::new();
            for c in text.as_bytes().chunks(chunk) {
                f.push(c);
                while let Some(m) = f.next_raw() {
                    let (off, bytes) = m.unwrap();
                    got.push((off, String::from_utf8(bytes).unwrap()));
                }
            }
            let got: Vec<(u64, &str)> = got.iter().map(|(o, m)| (*o, m.as_str())).collect();
            assert_eq!(got, want, "chunk {chunk}");
            assert_eq!(f.buffered(), 0);
        }
        // Errors still carry the stream offset, and a failed framer stays failed.
        let mut f = Framer::new(1 << 20);
        f.push(b"{\"a\":1} ]");
        assert!(f.next_raw().unwrap().is_ok());
        assert!(matches!(
            f.next_raw(),
            Some(Err(FrameError::NotAnObject {
                byte: b']',
                offset: 8
            }))
        ));
        assert!(f.next_raw().is_none());
    }
}
