//! TCP transfers between simulated hosts: the byte pattern, the transfer header, and one
//! connection's application logic (source and sink) on top of a smoltcp TCP socket.
//!
//! # What it does
//!
//! A client opens a connection and writes a 28-byte header: magic `HFX1`, the direction
//! (1 = upload: the client sends; 2 = download: the server sends), the number of pattern bytes,
//! a 32-bit pattern key and the source's rate in bytes per second (0 = unpaced). Pattern byte `i` of key `k` is byte `i % 8` (little endian) of
//! SplitMix64's mix of `(k << 32) ^ (i / 8)`: deterministic, position dependent, cheap, so the
//! sink checks every byte in order without keeping a copy. The source writes the pattern (paced
//! to a rate if asked), closes once every byte is acknowledged; the sink verifies, closes once it
//! has every byte. Both ends track in-order progress and its longest gap (the stall).
//!
//! A transfer of [`ENDLESS`] bytes is a stream: the source writes until it is stopped
//! ([`Conn::stop`]: its length becomes what it has written), then closes; the sink takes the
//! source's FIN, after every byte it received was verified, as the end.
//!
//! # What it does not do
//!
//! No half-duplex tricks, no urgent data, no application-level retries: a connection that breaks
//! is recorded as broken.

use std::time::Duration;

use smoltcp::socket::tcp;

use super::record::{STALL_THRESHOLD_US, TcpRecord};
use super::rng::mix64;

/// A paced source writes in steps of this many bytes (one full-sized segment at MTU 1500).
pub const PACING_QUANTUM: u64 = 1460;

/// The length of a transfer that runs until its source is stopped (see the module doc).
pub const ENDLESS: u64 = u64::MAX;

/// Header length in bytes.
pub const HEADER_LEN: usize = 28;
const MAGIC: &[u8; 4] = b"HFX1";

/// Which way the pattern flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The connecting host sends.
    Upload,
    /// The accepting host sends.
    Download,
}

impl Direction {
    fn code(self) -> u8 {
        match self {
            Direction::Upload => 1,
            Direction::Download => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Direction::Upload => "upload",
            Direction::Download => "download",
        }
    }
}

/// The transfer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub direction: Direction,
    pub len: u64,
    pub key: u32,
    /// Bytes per second the source may send (None = unpaced).
    pub rate: Option<u64>,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4] = self.direction.code();
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..20].copy_from_slice(&self.key.to_be_bytes());
        b[20..28].copy_from_slice(&self.rate.unwrap_or(0).to_be_bytes());
        b
    }

    /// Parses a header; the error says what is wrong.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, String> {
        if &b[..4] != MAGIC {
            return Err(format!("bad transfer header magic {:02x?}", &b[..4]));
        }
        let direction = match b[4] {
            1 => Direction::Upload,
            2 => Direction::Download,
            d => return Err(format!("bad transfer direction {d}")),
        };
        let mut len = [0u8; 8];
        len.copy_from_slice(&b[8..16]);
        let mut key = [0u8; 4];
        key.copy_from_slice(&b[16..20]);
        let mut rate = [0u8; 8];
        rate.copy_from_slice(&b[20..28]);
        let rate = u64::from_be_bytes(rate);
        Ok(Header {
            direction,
            len: u64::from_be_bytes(len),
            key: u32::from_be_bytes(key),
            rate: (rate != 0).then_some(rate),
        })
    }
}

fn pattern_word(key: u32, block: u64) -> [u8; 8] {
    mix64((u64::from(key) << 32) ^ block).to_le_bytes()
}

/// Fills `buf` with the pattern of `key` starting at stream offset `offset`.
pub fn fill_pattern(key: u32, offset: u64, buf: &mut [u8]) {
    let mut block = offset / 8;
    let mut word = pattern_word(key, block);
    for (i, b) in buf.iter_mut().enumerate() {
        let off = offset + i as u64;
        if off / 8 != block {
            block = off / 8;
            word = pattern_word(key, block);
        }
        *b = word[(off % 8) as usize];
    }
}

/// Counts the bytes of `data` that differ from the pattern of `key` at `offset`; returns the
/// count and the offset of the first difference.
pub fn check_pattern(key: u32, offset: u64, data: &[u8]) -> (u64, Option<u64>) {
    let mut block = offset / 8;
    let mut word = pattern_word(key, block);
    let mut errors = 0;
    let mut first = None;
    for (i, b) in data.iter().enumerate() {
        let off = offset + i as u64;
        if off / 8 != block {
            block = off / 8;
            word = pattern_word(key, block);
        }
        if *b != word[(off % 8) as usize] {
            errors += 1;
            first.get_or_insert(off);
        }
    }
    (errors, first)
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// In-order progress and its gaps.
#[derive(Debug, Clone, Default)]
struct Progress {
    last: Option<Duration>,
    max_gap: Duration,
    gaps_over: u64,
}

impl Progress {
    /// Nothing is outstanding at `now`: the next gap starts here (a paced or finished source
    /// waiting for its own clock is not stalled).
    fn touch(&mut self, now: Duration) {
        self.last = Some(now);
    }

    fn step(&mut self, now: Duration) {
        if let Some(last) = self.last {
            let gap = now.saturating_sub(last);
            self.max_gap = self.max_gap.max(gap);
            if us(gap) > STALL_THRESHOLD_US {
                self.gaps_over += 1;
            }
        }
        self.last = Some(now);
    }

    /// The longest gap including one still open at `now` (when data is outstanding).
    fn max_at(&self, now: Duration, outstanding: bool) -> (Duration, u64) {
        match self.last {
            Some(last) if outstanding => {
                let open = now.saturating_sub(last);
                let over = u64::from(us(open) > STALL_THRESHOLD_US);
                (self.max_gap.max(open), self.gaps_over + over)
            }
            _ => (self.max_gap, self.gaps_over),
        }
    }
}

/// The sending half.
#[derive(Debug, Clone)]
struct Source {
    key: u32,
    len: u64,
    /// Header bytes still to write (the client's upload or download request).
    header: Vec<u8>,
    header_total: u64,
    /// Stream bytes written (header included).
    written: u64,
    rate: Option<u64>,
    rate_start: Duration,
    progress: Progress,
    acked_stream: u64,
    /// Data written and not yet acknowledged (as of the last step).
    unacked: bool,
}

/// The receiving half.
#[derive(Debug, Clone)]
struct Sink {
    key: u32,
    len: u64,
    received: u64,
    progress: Progress,
}

/// One connection's application state.
#[derive(Debug)]
pub struct Conn {
    pub rec: TcpRecord,
    source: Option<Source>,
    sink: Option<Sink>,
    /// Server side: the header read so far.
    pending_header: Option<Vec<u8>>,
    /// Client side in download mode: the header only (no pattern), then sink.
    closing: bool,
    closed: bool,
    /// The socket has a smoltcp timeout (it aborts when the peer stays silent that long).
    timeout_armed: bool,
    /// This end refuses the peer ([`Conn::refuse`]): it aborts once the handshake is done.
    refused: bool,
}

/// A client's transfer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub direction: Direction,
    /// Pattern bytes.
    pub bytes: u64,
    /// Bytes per second the source may write (None = as fast as TCP goes).
    pub rate: Option<u64>,
}

impl Conn {
    /// A connecting end with its transfer.
    pub fn client(rec: TcpRecord, t: Transfer, key: u32, now: Duration) -> Conn {
        let header = Header {
            direction: t.direction,
            len: t.bytes,
            key,
            rate: t.rate,
        }
        .encode()
        .to_vec();
        let mut rec = rec;
        rec.role = "client".into();
        rec.direction = t.direction.name().into();
        rec.bytes_expected = t.bytes;
        rec.started_us = us(now);
        let (source, sink) = match t.direction {
            Direction::Upload => (
                Some(Source {
                    key,
                    len: t.bytes,
                    header_total: header.len() as u64,
                    header,
                    written: 0,
                    rate: t.rate,
                    rate_start: now,
                    progress: Progress::default(),
                    acked_stream: 0,
                    unacked: false,
                }),
                None,
            ),
            Direction::Download => (
                Some(Source {
                    key,
                    len: 0,
                    header_total: header.len() as u64,
                    header,
                    written: 0,
                    rate: None,
                    rate_start: now,
                    progress: Progress::default(),
                    acked_stream: 0,
                    unacked: false,
                }),
                Some(Sink {
                    key,
                    len: t.bytes,
                    received: 0,
                    progress: Progress::default(),
                }),
            ),
        };
        Conn {
            rec,
            source,
            sink,
            pending_header: None,
            closing: false,
            closed: false,
            timeout_armed: false,
            refused: false,
        }
    }

    /// This end refused the peer (an application check, such as mutual TLS, failed): the
    /// record's outcome is `refused: <why>`.
    /// The connection is aborted (RST) once established, as a TLS server that rejects the
    /// client's certificate closes an open connection.
    pub fn refuse(&mut self, why: &str) {
        self.rec.outcome = format!("refused: {why}");
        self.refused = true;
    }

    /// An accepting end: it learns what to do from the client's header.
    pub fn server(rec: TcpRecord, now: Duration) -> Conn {
        let mut rec = rec;
        rec.role = "server".into();
        rec.started_us = us(now);
        Conn {
            rec,
            source: None,
            sink: None,
            pending_header: Some(Vec::with_capacity(HEADER_LEN)),
            closing: false,
            closed: false,
            timeout_armed: false,
            refused: false,
        }
    }

    /// The pattern key of the transfer (a client knows it from the start, a server once it has
    /// read the header): both ends of one connection have the same.
    pub fn key(&self) -> Option<u32> {
        self.source
            .as_ref()
            .map(|s| s.key)
            .or(self.sink.as_ref().map(|s| s.key))
    }

    /// Whether this end sends the pattern (the client of an upload, the server of a download).
    pub fn is_source(&self) -> bool {
        match self.rec.direction.as_str() {
            "upload" => self.rec.role == "client",
            "download" => self.rec.role == "server",
            _ => false,
        }
    }

    /// Stops the source: no pattern byte is written after those already written, and the
    /// connection closes once they are acknowledged (the transfer completes with that length).
    /// False when this end is not the source.
    pub fn stop(&mut self) -> bool {
        if !self.is_source() {
            return false;
        }
        let Some(s) = self.source.as_mut() else {
            return false;
        };
        s.len = s.len.min(s.written.saturating_sub(s.header_total));
        self.rec.bytes_expected = s.len;
        true
    }

    /// Notes whether the socket has a timeout (for telling a timeout from other closes).
    pub fn set_timeout_armed(&mut self, armed: bool) {
        self.timeout_armed = armed;
    }

    /// The socket closed without this end closing it, with a timeout armed: it timed out (or was
    /// reset; the host tells the two apart by the RSTs it saw).
    pub fn closed_unasked_with_timeout(&self) -> bool {
        self.closed && !self.closing && self.timeout_armed
    }

    /// True once the socket reached CLOSED and the record is final.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// When the source's pacing allows the next segment (for the host's timer).
    pub fn wake_at(&self) -> Option<Duration> {
        let s = self.source.as_ref()?;
        let rate = s.rate?;
        let pattern_written = s.written.saturating_sub(s.header_total);
        if pattern_written >= s.len || rate == 0 {
            return None;
        }
        let next = ((pattern_written / PACING_QUANTUM + 1) * PACING_QUANTUM).min(s.len);
        let nanos = u128::from(next) * 1_000_000_000 / u128::from(rate);
        Some(s.rate_start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)))
    }

    /// Moves data between the socket and the application; returns true when anything moved or
    /// changed.
    pub fn step(&mut self, sock: &mut tcp::Socket<'_>, now: Duration) -> bool {
        if self.closed {
            return false;
        }
        let mut moved = false;
        if self.refused && sock.state() == tcp::State::Established {
            sock.abort();
            moved = true;
        }
        if sock.state() == tcp::State::Listen {
            // An accepted socket that an RST sent back to LISTEN (smoltcp does that from
            // SYN-RECEIVED): this connection is over; the host's own listener serves the port.
            sock.abort();
        }
        let state = sock.state();
        if self.rec.established_us.is_none()
            && !matches!(
                state,
                tcp::State::Closed
                    | tcp::State::Listen
                    | tcp::State::SynSent
                    | tcp::State::SynReceived
            )
        {
            self.rec.established_us = Some(us(now));
            moved = true;
            // Progress starts when the connection is up.
            if let Some(s) = self.source.as_mut() {
                s.progress.step(now);
            }
            if let Some(s) = self.sink.as_mut() {
                s.progress.step(now);
            }
        }
        moved |= self.read(sock, now);
        moved |= self.write(sock, now);
        // Acknowledged progress at the source; a gap only counts while data is unacknowledged.
        if let Some(s) = self.source.as_mut() {
            let queued = sock.send_queue() as u64;
            let acked = s.written - queued;
            if acked > s.acked_stream {
                s.acked_stream = acked;
                s.progress.step(now);
                self.rec.bytes_acked = acked.saturating_sub(s.header_total);
                moved = true;
            }
            s.unacked = queued > 0;
            if !s.unacked {
                s.progress.touch(now);
            }
        }
        // An endless sink whose source finished (its FIN came after everything it sent was
        // read): the transfer's length is what arrived.
        if let Some(s) = self.sink.as_mut()
            && s.len == ENDLESS
            && !sock.can_recv()
            && matches!(
                sock.state(),
                tcp::State::CloseWait
                    | tcp::State::LastAck
                    | tcp::State::Closing
                    | tcp::State::TimeWait
            )
        {
            s.len = s.received;
            self.rec.bytes_expected = s.received;
            moved = true;
        }
        // Completion and closing.
        if !self.closing && self.done() && self.rec.pattern_errors == 0 {
            self.rec.completed_us.get_or_insert(us(now));
            sock.close();
            self.closing = true;
            moved = true;
        }
        if !self.closing && state == tcp::State::CloseWait {
            // The peer finished sending; if we have nothing left to send, finish too.
            let source_done = self
                .source
                .as_ref()
                .is_none_or(|s| s.written >= s.header_total.saturating_add(s.len));
            if source_done {
                sock.close();
                self.closing = true;
                moved = true;
            }
        }
        self.rec.state = sock.state().to_string();
        if sock.state() == tcp::State::Closed {
            self.closed = true;
            self.rec.closed_us = Some(us(now));
            moved = true;
        }
        moved
    }

    /// Every byte this end is responsible for went through.
    fn done(&self) -> bool {
        let source_done = self
            .source
            .as_ref()
            .is_none_or(|s| s.acked_stream >= s.header_total.saturating_add(s.len));
        let sink_done = self.sink.as_ref().is_none_or(|s| s.received >= s.len);
        let known = self.pending_header.is_none();
        known && source_done && sink_done && (self.source.is_some() || self.sink.is_some())
    }

    fn read(&mut self, sock: &mut tcp::Socket<'_>, now: Duration) -> bool {
        let mut moved = false;
        while sock.can_recv() {
            let mut error: Option<String> = None;
            let pending = &mut self.pending_header;
            let sink = &mut self.sink;
            let rec = &mut self.rec;
            let mut header_done: Option<Header> = None;
            let res = sock.recv(|buf| {
                if let Some(h) = pending.as_mut() {
                    let need = HEADER_LEN - h.len();
                    let used = need.min(buf.len());
                    h.extend_from_slice(&buf[..used]);
                    if h.len() == HEADER_LEN {
                        let mut arr = [0u8; HEADER_LEN];
                        arr.copy_from_slice(h);
                        match Header::decode(&arr) {
                            Ok(hd) => header_done = Some(hd),
                            Err(e) => {
                                error = Some(e);
                                return (buf.len(), ());
                            }
                        }
                    }
                    // Data after the header is handled on the next loop turn, once the sink or
                    // source exists.
                    return (used, ());
                }
                let total = buf.len();
                let rest: &[u8] = buf;
                match sink.as_mut() {
                    Some(s) => {
                        let want = (s.len - s.received).min(rest.len() as u64) as usize;
                        let (errs, first) = check_pattern(s.key, s.received, &rest[..want]);
                        rec.pattern_errors += errs;
                        if let Some(f) = first {
                            rec.first_error_offset.get_or_insert(f);
                        }
                        s.received += want as u64;
                        rec.bytes_received = s.received;
                        rec.bytes_verified += want as u64 - errs;
                        if want < rest.len() {
                            rec.pattern_errors += (rest.len() - want) as u64;
                            error = Some(format!(
                                "{} bytes beyond the {} expected",
                                rest.len() - want,
                                s.len
                            ));
                        }
                        if want > 0 {
                            s.progress.step(now);
                        }
                    }
                    None => {
                        rec.pattern_errors += rest.len() as u64;
                        error = Some(format!("{} unexpected bytes", rest.len()));
                    }
                }
                (total, ())
            });
            if res.is_err() {
                break;
            }
            moved = true;
            if let Some(h) = header_done {
                self.pending_header = None;
                self.rec.direction = h.direction.name().into();
                self.rec.bytes_expected = h.len;
                match h.direction {
                    Direction::Upload => {
                        let mut p = Progress::default();
                        p.step(now);
                        self.sink = Some(Sink {
                            key: h.key,
                            len: h.len,
                            received: 0,
                            progress: p,
                        })
                    }
                    Direction::Download => {
                        let mut p = Progress::default();
                        p.step(now);
                        self.source = Some(Source {
                            key: h.key,
                            len: h.len,
                            header: Vec::new(),
                            header_total: 0,
                            written: 0,
                            rate: h.rate,
                            rate_start: now,
                            progress: p,
                            acked_stream: 0,
                            unacked: false,
                        })
                    }
                }
            }
            if let Some(e) = error {
                if self.rec.pattern_errors == 0 {
                    self.rec.pattern_errors = 1;
                }
                self.rec.outcome = format!("error: {e}");
                sock.abort();
                break;
            }
        }
        moved
    }

    fn write(&mut self, sock: &mut tcp::Socket<'_>, now: Duration) -> bool {
        let Some(s) = self.source.as_mut() else {
            return false;
        };
        if !sock.may_send() {
            return false;
        }
        if sock.send_queue() == 0 {
            // Whatever is written now starts a new wait for acknowledgement.
            s.progress.touch(now);
        }
        let mut moved = false;
        if !s.header.is_empty() {
            match sock.send_slice(&s.header) {
                Ok(n) if n > 0 => {
                    s.header.drain(..n);
                    s.written += n as u64;
                    moved = true;
                }
                _ => return false,
            }
            if !s.header.is_empty() {
                return moved;
            }
        }
        let pattern_written = s.written - s.header_total;
        let mut allowed = s.len - pattern_written;
        if let Some(rate) = s.rate {
            let elapsed = now.saturating_sub(s.rate_start).as_nanos();
            let budget =
                u64::try_from(elapsed * u128::from(rate) / 1_000_000_000).unwrap_or(u64::MAX);
            // Whole quanta only (the last one may be short): no dribble of tiny segments.
            let budget = if budget >= s.len {
                s.len
            } else {
                budget - budget % PACING_QUANTUM
            };
            allowed = allowed.min(budget.saturating_sub(pattern_written));
        }
        if allowed == 0 {
            return moved;
        }
        let key = s.key;
        let res = sock.send(|buf| {
            let n = (buf.len() as u64).min(allowed) as usize;
            fill_pattern(key, pattern_written, &mut buf[..n]);
            (n, n)
        });
        if let Ok(n) = res
            && n > 0
        {
            s.written += n as u64;
            self.rec.bytes_sent = s.written - s.header_total;
            moved = true;
        }
        moved
    }

    /// The record as of `now`: stall figures include a gap still open, the outcome is derived.
    pub fn snapshot(&self, now: Duration) -> TcpRecord {
        let mut r = self.rec.clone();
        let mut max = Duration::ZERO;
        let mut over = 0;
        let live = !self.closed;
        if let Some(s) = &self.source {
            let outstanding = live && s.unacked;
            let (m, o) = s.progress.max_at(now, outstanding);
            max = max.max(m);
            over += o;
        }
        if let Some(s) = &self.sink {
            let outstanding = live && s.received < s.len;
            let (m, o) = s.progress.max_at(now, outstanding);
            max = max.max(m);
            over += o;
        }
        r.stall_max_us = us(max);
        r.stalls_over_200ms = over;
        if r.outcome.is_empty() {
            r.outcome = if r.completed_us.is_some() {
                "complete".into()
            } else if r.resets_received > 0 {
                "reset".into()
            } else if self.closed {
                "closed-early".into()
            } else {
                "running".into()
            };
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_round_trips_at_any_offset_and_catches_a_flipped_byte() {
        let mut whole = vec![0u8; 1000];
        fill_pattern(42, 0, &mut whole);
        let mut part = vec![0u8; 333];
        fill_pattern(42, 123, &mut part);
        assert_eq!(&whole[123..456], &part[..]);
        assert_eq!(check_pattern(42, 0, &whole), (0, None));
        whole[500] ^= 1;
        assert_eq!(check_pattern(42, 0, &whole), (1, Some(500)));
        assert_ne!(check_pattern(43, 0, &part).0, 0);
    }

    #[test]
    fn header_round_trips_and_rejects_garbage() {
        let h = Header {
            direction: Direction::Download,
            len: 10 << 20,
            key: 7,
            rate: Some(1_000_000),
        };
        assert_eq!(Header::decode(&h.encode()), Ok(h));
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Header::decode(&bad).unwrap_err().contains("magic"));
        let mut bad = h.encode();
        bad[4] = 9;
        assert!(Header::decode(&bad).unwrap_err().contains("direction"));
    }
}
