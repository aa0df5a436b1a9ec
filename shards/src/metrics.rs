//! Per-shard metrics of the serving layer: statement latency, receive → first byte, connections,
//! bytes, errors by SQLSTATE, executor stalls.
//!
//! # Cost
//! Each shard owns one [`ShardMetrics`] in an `Rc`, written only from its own thread: plain
//! `Cell`s and `RefCell<Histogram>`s, no atomics, no shared cache line, no hashing, no
//! formatting and no allocation per statement (the histograms have fixed bounds and are
//! recorded with `saturating_record`, which never resizes). Connections resolve the handle
//! once, when they start. With `--metrics off` every `record_*` returns before reading the
//! clock, so the cost of recording can be measured (docs/PERF.md, "Metrics cost").
//!
//! # Merging
//! Nothing is merged until someone asks: [`ShardMetrics::snapshot`] copies the shard's numbers
//! into a `Send` [`MetricsSnapshot`], which the engine gathers from every shard over its mesh
//! (the same messages as `ringwire.shard_stats`) and [`MetricsSnapshot::merge`] adds up
//! (histograms add exactly: same bounds, bucket by bucket).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Largest value the latency histograms hold, in microseconds (60 s); longer saturates.
pub const LATENCY_US_MAX: u64 = 60_000_000;
/// Two significant digits: 1% resolution, ~40 KiB per histogram. The exported quantiles need
/// no more, and a shard holds about a dozen of these.
const SIGNIFICANT_DIGITS: u8 = 2;
/// A gap this long between two turns of the io_uring driver is an executor stall: one task
/// held the shard's thread without yielding, and every other connection's I/O waited.
pub const STALL_THRESHOLD: Duration = Duration::from_millis(10);

/// A latency histogram in microseconds, 1 µs to [`LATENCY_US_MAX`].
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
        .expect("constant bounds are valid")
}

/// Which protocol ran a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// A simple Query message (one histogram entry per message).
    Simple = 0,
    /// An Execute message of the extended protocol.
    Extended = 1,
}

/// What a statement was, read from its CommandComplete tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Select = 0,
    Insert = 1,
    Update = 2,
    /// Everything else, including statements that failed or were suspended.
    Other = 3,
}

pub const PROTOCOLS: [(Protocol, &str); 2] = [
    (Protocol::Simple, "simple"),
    (Protocol::Extended, "extended"),
];
pub const KINDS: [(Kind, &str); 4] = [
    (Kind::Select, "select"),
    (Kind::Insert, "insert"),
    (Kind::Update, "update"),
    (Kind::Other, "other"),
];
const SERIES: usize = PROTOCOLS.len() * KINDS.len();

/// Index of a (protocol, kind) series in the arrays below.
pub fn series(protocol: Protocol, kind: Kind) -> usize {
    protocol as usize * KINDS.len() + kind as usize
}

/// The kind of the statement whose reply ends `out`: the tag of a CommandComplete that is the
/// last message in the buffer. Looks at most 64 bytes back, so it costs the same for a
/// one-row and a million-row result; anything else (an error, PortalSuspended, an empty query,
/// COPY) is [`Kind::Other`].
pub fn kind_of_reply(out: &[u8], since: usize) -> Kind {
    let mut out = &out[since.min(out.len())..];
    // A simple Query's reply ends with ReadyForQuery ('Z', length 5, status): look before it.
    if out.len() >= 6 && out[out.len() - 6..out.len() - 1] == [b'Z', 0, 0, 0, 5] {
        out = &out[..out.len() - 6];
    }
    if out.last() != Some(&0) {
        return Kind::Other;
    }
    let end = out.len();
    // A CommandComplete is 'C', a 4-byte length counting itself and the NUL-terminated tag.
    for start in (end.saturating_sub(64)..end.saturating_sub(6)).rev() {
        if out[start] != b'C' {
            continue;
        }
        let len = u32::from_be_bytes(out[start + 1..start + 5].try_into().expect("4 bytes"));
        if len as usize == end - start - 1 {
            let tag = &out[start + 5..];
            return match tag.get(..6) {
                Some(b"SELECT") => Kind::Select,
                Some(b"INSERT") => Kind::Insert,
                Some(b"UPDATE") => Kind::Update,
                _ => Kind::Other,
            };
        }
    }
    Kind::Other
}

/// One shard's serving-layer metrics. Only that shard's thread touches them.
pub struct ShardMetrics {
    pub shard: usize,
    /// False with `--metrics off`: nothing is recorded and the clock is not read.
    pub enabled: bool,
    latency_us: [RefCell<Histogram<u64>>; SERIES],
    latency_sum_us: [Cell<u64>; SERIES],
    statements: [Cell<u64>; SERIES],
    first_byte_us: RefCell<Histogram<u64>>,
    first_byte_sum_us: Cell<u64>,
    connections_opened: Cell<u64>,
    connections_closed: Cell<u64>,
    connections_rejected: Cell<u64>,
    bytes_in: Cell<u64>,
    bytes_out: Cell<u64>,
    /// Errors sent to clients, by SQLSTATE. Touched only when an error is reported (never on
    /// a successful statement); a short vector searched linearly.
    errors: RefCell<Vec<([u8; 5], u64)>>,
    stalls: Cell<u64>,
    stall_us_total: Cell<u64>,
    stall_us_max: Cell<u64>,
    /// When this shard's io_uring driver last reaped received bytes ([`Self::note_turn`];
    /// None on glommio's sockets).
    received_at: Cell<Option<Instant>>,
    /// Set by the io_uring driver: statement ends and first bytes wait in `ended` for its
    /// next turn's clock read instead of each reading the clock.
    deferred: Cell<bool>,
    /// What ended since the driver's last turn: (start, series index or [`FIRST_BYTE`]).
    /// Its capacity grows to the most a turn has ended and stays: no allocation per turn.
    ended: RefCell<Vec<(Instant, u8)>>,
}

/// In [`ShardMetrics::ended`]: a first byte, not a statement.
const FIRST_BYTE: u8 = u8::MAX;

thread_local! {
    static CURRENT: RefCell<Option<Rc<ShardMetrics>>> = const { RefCell::new(None) };
}

/// The metrics of the shard running on this thread (installed when the shard starts). Code
/// on the shard resolves this once and keeps the `Rc`.
pub fn current() -> Option<Rc<ShardMetrics>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Install `metrics` as this thread's shard metrics.
pub(crate) fn install(metrics: Rc<ShardMetrics>) {
    CURRENT.with(|c| *c.borrow_mut() = Some(metrics));
}

impl ShardMetrics {
    pub fn new(shard: usize, enabled: bool) -> ShardMetrics {
        ShardMetrics {
            shard,
            enabled,
            latency_us: std::array::from_fn(|_| RefCell::new(latency_histogram())),
            latency_sum_us: Default::default(),
            statements: Default::default(),
            first_byte_us: RefCell::new(latency_histogram()),
            first_byte_sum_us: Cell::new(0),
            connections_opened: Cell::new(0),
            connections_closed: Cell::new(0),
            connections_rejected: Cell::new(0),
            bytes_in: Cell::new(0),
            bytes_out: Cell::new(0),
            errors: RefCell::new(Vec::new()),
            stalls: Cell::new(0),
            stall_us_total: Cell::new(0),
            stall_us_max: Cell::new(0),
            received_at: Cell::new(None),
            deferred: Cell::new(false),
            ended: RefCell::new(Vec::new()),
        }
    }

    /// The io_uring driver will call [`Self::note_turn`] every turn.
    pub(crate) fn defer_to_driver(&self) {
        self.deferred.set(self.enabled);
    }

    /// One turn of the io_uring driver, after it reaped `received` bytes or not. One clock
    /// read, if anything needs it, serves every connection of the turn (at 64 connections a
    /// turn carries many; each connection read the clock itself before sessions 18 and 19):
    /// it times the receives just reaped, and ends every statement and first byte that ended
    /// since the last turn (whose replies the driver has usually just taken for sending; in a
    /// pipelined batch whose later statement waits on another shard, the earlier replies
    /// leave only with the batch, later than this).
    #[inline]
    pub(crate) fn note_turn(&self, received: bool) {
        let mut ended = self.ended.borrow_mut();
        if !received && ended.is_empty() {
            return;
        }
        let now = Instant::now();
        if received {
            self.received_at.set(Some(now));
        }
        for (started, what) in ended.drain(..) {
            match what {
                FIRST_BYTE => self.record_first_byte(started, now),
                i => self.record_series(i as usize, started, now),
            }
        }
    }

    /// When the bytes a connection is about to handle arrived, or None when recording is
    /// off: the driver's turn that reaped them (the latest turn that reaped any, which is no
    /// earlier than this connection's), else the clock now.
    #[inline]
    pub fn received(&self) -> Option<Instant> {
        self.enabled
            .then(|| self.received_at.get().unwrap_or_else(Instant::now))
    }

    /// A statement that started at `started` (from [`ShardMetrics::received`], or the end
    /// of the statement before it) wrote its whole reply. Returns where the next statement
    /// of the same bytes starts: on the io_uring path the statement ends at the driver's next
    /// turn (see [`Self::note_turn`]), so a pipelined statement is timed, as its client
    /// waits, from the same receive (it includes the wait behind the ones before it);
    /// elsewhere it ends now, read here, and the next one starts from that read.
    #[inline]
    pub fn statement_ended(&self, started: Instant, protocol: Protocol, kind: Kind) -> Instant {
        let i = series(protocol, kind);
        if self.deferred.get() {
            self.ended.borrow_mut().push((started, i as u8));
            started
        } else {
            let now = Instant::now();
            self.record_series(i, started, now);
            now
        }
    }

    #[inline]
    fn record_series(&self, i: usize, started: Instant, ended: Instant) {
        let us = ended.saturating_duration_since(started).as_micros() as u64;
        self.latency_us[i].borrow_mut().saturating_record(us.max(1));
        bump_by(&self.latency_sum_us[i], us);
        bump_by(&self.statements[i], 1);
    }

    /// The first reply bytes after a receive at `received` are handed to the socket: timed at
    /// the driver's next turn on the io_uring path, else at `last` (the end of the statement
    /// just recorded, if it is after the receive) or the clock now.
    #[inline]
    pub fn first_byte_sent(&self, received: Instant, last: Option<Instant>) {
        if self.deferred.get() {
            self.ended.borrow_mut().push((received, FIRST_BYTE));
            return;
        }
        let now = match last {
            Some(end) if end > received => end,
            _ => Instant::now(),
        };
        self.record_first_byte(received, now);
    }

    #[inline]
    fn record_first_byte(&self, received: Instant, now: Instant) {
        let us = now.saturating_duration_since(received).as_micros() as u64;
        self.first_byte_us.borrow_mut().saturating_record(us.max(1));
        bump_by(&self.first_byte_sum_us, us);
    }

    #[inline]
    pub fn record_bytes_in(&self, n: usize) {
        if self.enabled {
            bump_by(&self.bytes_in, n as u64);
        }
    }

    #[inline]
    pub fn record_bytes_out(&self, n: usize) {
        if self.enabled {
            bump_by(&self.bytes_out, n as u64);
        }
    }

    /// Connection counts are kept even with recording off: they cost one add per connection.
    pub fn connection_opened(&self) {
        bump_by(&self.connections_opened, 1);
    }

    pub fn connection_closed(&self) {
        bump_by(&self.connections_closed, 1);
    }

    /// A connection refused for `--max-connections` (it is also counted opened and closed).
    pub fn connection_rejected(&self) {
        bump_by(&self.connections_rejected, 1);
    }

    /// An ErrorResponse with `code` went to a client. Also counted with recording off: errors
    /// are not the path being measured, and they are logged anyway.
    pub fn record_error(&self, code: [u8; 5]) {
        let mut errors = self.errors.borrow_mut();
        match errors.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => errors.push((code, 1)),
        }
    }

    /// The executor did not get back to the driver for `gap` (see [`STALL_THRESHOLD`]).
    pub fn record_stall(&self, gap: Duration) {
        let us = gap.as_micros() as u64;
        bump_by(&self.stalls, 1);
        bump_by(&self.stall_us_total, us);
        self.stall_us_max.set(self.stall_us_max.get().max(us));
    }

    /// A copy of every number, to send to the shard that asked.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut errors: Vec<(String, u64)> = self
            .errors
            .borrow()
            .iter()
            .map(|(c, n)| (String::from_utf8_lossy(c).into_owned(), *n))
            .collect();
        errors.sort();
        MetricsSnapshot {
            shards: 1,
            enabled: self.enabled,
            latency_us: self.latency_us.iter().map(|h| h.borrow().clone()).collect(),
            latency_sum_us: self.latency_sum_us.iter().map(Cell::get).collect(),
            statements: self.statements.iter().map(Cell::get).collect(),
            first_byte_us: self.first_byte_us.borrow().clone(),
            first_byte_sum_us: self.first_byte_sum_us.get(),
            connections_opened: self.connections_opened.get(),
            connections_closed: self.connections_closed.get(),
            connections_rejected: self.connections_rejected.get(),
            bytes_in: self.bytes_in.get(),
            bytes_out: self.bytes_out.get(),
            errors,
            stalls: self.stalls.get(),
            stall_us_total: self.stall_us_total.get(),
            stall_us_max: self.stall_us_max.get(),
        }
    }
}

#[inline]
fn bump_by(cell: &Cell<u64>, n: u64) {
    cell.set(cell.get().wrapping_add(n));
}

/// One shard's (or, merged, several shards') serving-layer numbers at one moment.
#[derive(Clone, Debug)]
pub struct MetricsSnapshot {
    /// How many shards were merged into this.
    pub shards: usize,
    pub enabled: bool,
    /// Indexed by [`series`].
    pub latency_us: Vec<Histogram<u64>>,
    pub latency_sum_us: Vec<u64>,
    pub statements: Vec<u64>,
    pub first_byte_us: Histogram<u64>,
    pub first_byte_sum_us: u64,
    pub connections_opened: u64,
    pub connections_closed: u64,
    pub connections_rejected: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// (SQLSTATE, count), sorted by SQLSTATE.
    pub errors: Vec<(String, u64)>,
    pub stalls: u64,
    pub stall_us_total: u64,
    pub stall_us_max: u64,
}

impl MetricsSnapshot {
    /// Connections open now (opened and not yet closed).
    pub fn connections_open(&self) -> u64 {
        self.connections_opened
            .saturating_sub(self.connections_closed)
    }

    /// Add `other` into `self`. Histograms have the same bounds everywhere, so they add
    /// exactly.
    pub fn merge(&mut self, other: &MetricsSnapshot) {
        self.shards += other.shards;
        self.enabled |= other.enabled;
        for (a, b) in self.latency_us.iter_mut().zip(&other.latency_us) {
            a.add(b).expect("histograms with equal bounds add");
        }
        for (a, b) in self.latency_sum_us.iter_mut().zip(&other.latency_sum_us) {
            *a += b;
        }
        for (a, b) in self.statements.iter_mut().zip(&other.statements) {
            *a += b;
        }
        self.first_byte_us
            .add(&other.first_byte_us)
            .expect("histograms with equal bounds add");
        self.first_byte_sum_us += other.first_byte_sum_us;
        self.connections_opened += other.connections_opened;
        self.connections_closed += other.connections_closed;
        self.connections_rejected += other.connections_rejected;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        for (code, n) in &other.errors {
            match self.errors.iter_mut().find(|(c, _)| c == code) {
                Some((_, m)) => *m += n,
                None => self.errors.push((code.clone(), *n)),
            }
        }
        self.errors.sort();
        self.stalls += other.stalls;
        self.stall_us_total += other.stall_us_total;
        self.stall_us_max = self.stall_us_max.max(other.stall_us_max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receive_is_timed_by_the_driver_turn_that_reaped_it() {
        let off = ShardMetrics::new(0, false);
        assert_eq!(off.received(), None, "off: no clock read");
        let on = ShardMetrics::new(0, true);
        let before = Instant::now();
        assert!(
            on.received().unwrap() >= before,
            "no turn noted: the clock now"
        );
        on.note_turn(true);
        let turn = on.received().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert_eq!(
            on.received(),
            Some(turn),
            "every receive of the turn shares its read"
        );
    }

    fn complete(tag: &str) -> Vec<u8> {
        let mut out = vec![b'D', 0, 0, 0, 6, 0, 0];
        out.push(b'C');
        out.extend_from_slice(&((tag.len() + 5) as u32).to_be_bytes());
        out.extend_from_slice(tag.as_bytes());
        out.push(0);
        out
    }

    #[test]
    fn kinds_come_from_the_last_command_complete() {
        assert_eq!(kind_of_reply(&complete("SELECT 1"), 0), Kind::Select);
        assert_eq!(kind_of_reply(&complete("INSERT 0 1"), 0), Kind::Insert);
        assert_eq!(kind_of_reply(&complete("UPDATE 7"), 0), Kind::Update);
        assert_eq!(kind_of_reply(&complete("BEGIN"), 0), Kind::Other);
        assert_eq!(kind_of_reply(b"", 0), Kind::Other);
        // An error is not a CommandComplete, even if its text ends like one.
        assert_eq!(kind_of_reply(b"E\0\0\0\x08SELECT\0", 0), Kind::Other);
        let out = complete("SELECT 1");
        assert_eq!(kind_of_reply(&out, out.len()), Kind::Other);
        let mut with_rfq = complete("UPDATE 1");
        with_rfq.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
        assert_eq!(kind_of_reply(&with_rfq, 0), Kind::Update);
    }

    /// This thread's CPU time: the machine is shared, so wall time would count other
    /// processes' turns on the core.
    fn thread_cpu() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// What recording one simple-protocol statement costs on this machine, without the noise
    /// of a whole server, in thread CPU time: `cargo test --release -p ringwire-shards
    /// recording_cost -- --ignored --nocapture` (docs/PERF.md, "Metrics cost").
    #[test]
    #[ignore]
    fn recording_cost() {
        let reply = complete("SELECT 1");
        let n = 5_000_000u32;
        let per = |t: Duration| t.as_nanos() as f64 / n as f64;
        let t = thread_cpu();
        for _ in 0..n {
            std::hint::black_box(Instant::now());
        }
        println!("one clock read: {:.1} ns", per(thread_cpu() - t));
        let mut h = latency_histogram();
        let t = thread_cpu();
        for i in 0..n {
            h.saturating_record(std::hint::black_box(20 + (i as u64 & 1023)));
        }
        println!("one histogram record: {:.1} ns", per(thread_cpu() - t));
        for enabled in [true, false] {
            let m = ShardMetrics::new(0, enabled);
            let t = thread_cpu();
            for _ in 0..n {
                // What conn.rs does per statement read, run and flushed (glommio's sockets:
                // no driver turn to share a clock read with).
                m.record_bytes_in(std::hint::black_box(60));
                let received = m.received();
                if let Some(since) = received {
                    let kind = kind_of_reply(std::hint::black_box(&reply), 0);
                    let end = m.statement_ended(since, Protocol::Simple, kind);
                    m.record_bytes_out(std::hint::black_box(80));
                    m.first_byte_sent(since, Some(end));
                }
            }
            let on = if enabled { "on" } else { "off" };
            println!(
                "metrics {on}: {:.1} ns per statement",
                per(thread_cpu() - t)
            );
        }
        // The io_uring path: a driver turn carrying 16 connections' statements.
        let m = ShardMetrics::new(0, true);
        m.defer_to_driver();
        let t = thread_cpu();
        for i in 0..n {
            if i % 16 == 0 {
                m.note_turn(true);
            }
            m.record_bytes_in(std::hint::black_box(60));
            if let Some(since) = m.received() {
                let kind = kind_of_reply(std::hint::black_box(&reply), 0);
                let end = m.statement_ended(since, Protocol::Simple, kind);
                m.record_bytes_out(std::hint::black_box(80));
                m.first_byte_sent(since, Some(end));
            }
        }
        println!(
            "metrics on, 16 statements per driver turn: {:.1} ns per statement",
            per(thread_cpu() - t)
        );
    }

    #[test]
    fn merged_histograms_add_exactly() {
        let a = ShardMetrics::new(0, true);
        let b = ShardMetrics::new(1, true);
        for _ in 0..3 {
            a.statement_ended(Instant::now(), Protocol::Simple, Kind::Select);
        }
        b.statement_ended(Instant::now(), Protocol::Simple, Kind::Select);
        b.record_error(*b"42601");
        a.record_error(*b"42601");
        let mut m = a.snapshot();
        m.merge(&b.snapshot());
        let i = series(Protocol::Simple, Kind::Select);
        assert_eq!(m.latency_us[i].len(), 4);
        assert_eq!(m.statements[i], 4);
        assert_eq!(m.errors, vec![("42601".to_string(), 2)]);
        assert_eq!(m.shards, 2);
        let off = ShardMetrics::new(2, false);
        off.defer_to_driver();
        // What conn.rs does: no receive time, nothing to end.
        if let Some(since) = off.received() {
            off.statement_ended(since, Protocol::Simple, Kind::Select);
        }
        off.note_turn(true);
        assert_eq!(off.snapshot().statements[i], 0);
    }

    #[test]
    fn on_the_driver_a_statement_ends_at_its_next_turn() {
        let m = ShardMetrics::new(0, true);
        m.defer_to_driver();
        m.note_turn(true);
        let received = m.received().unwrap();
        let i = series(Protocol::Simple, Kind::Select);
        // Two statements of one read: the second is timed from the same receive.
        let next = m.statement_ended(received, Protocol::Simple, Kind::Select);
        assert_eq!(next, received);
        m.statement_ended(next, Protocol::Simple, Kind::Select);
        m.first_byte_sent(received, Some(next));
        assert_eq!(m.snapshot().statements[i], 0, "not ended before the turn");
        std::thread::sleep(Duration::from_millis(5));
        m.note_turn(false);
        let s = m.snapshot();
        assert_eq!(s.statements[i], 2);
        assert!(s.latency_us[i].min() >= 5_000, "{}", s.latency_us[i].min());
        assert_eq!(s.first_byte_us.len(), 1);
        assert_eq!(m.received(), Some(received), "no receive in that turn");
        m.note_turn(false);
        assert_eq!(m.snapshot().statements[i], 2, "each ends once");
    }
}
