//! Several clients' autocommit units pipelined onto one upstream connection.
//!
//! A *unit* is one client batch that the relay proved self-contained (`Session::pipelinable`):
//! the client is idle before it, every statement in it is autocommit-only, it ends with its
//! own Sync or Query, and it needs nothing prepared by another client's unit still in flight.
//! Units of clients with the same settings fingerprint are written back to back to one
//! connection (one write when they arrive together); PostgreSQL runs each Sync-delimited unit
//! as its own implicit transaction, so an error aborts only up to that unit's own Sync, and its
//! replies are one contiguous slice of the reply stream ending at its last ReadyForQuery.
//!
//! **Who reads.** No task of its own: the client whose unit waits for replies and finds the
//! connection free takes it (the *reader*), writes what other units queued, and routes each
//! reply to the unit at the head of the queue — counting ReadyForQuerys, as many as the unit
//! has Sync/Query/FunctionCall messages — until its own unit has replies; then it puts the
//! connection back and wakes the first unit still waiting. A client that went away leaves its
//! unit *abandoned*: its replies are read and dropped, other units are unaffected; if nobody
//! else waits, a task drains the pipe.
//!
//! **A ReadyForQuery that is not `I`** means a unit left a transaction open that later units
//! would run inside: the classification was wrong. The pipe then fails: the connection is
//! closed (PostgreSQL rolls back the open transaction, and with it the work of every unit
//! queued behind), and every unit not yet complete — the offender included — gets 08006 and
//! ReadyForQuery `I`. Units before it completed with `I` and are untouched.
//!
//! **Cancel.** A CancelRequest is sent to the backend only while the client's unit is at the
//! head of the queue *and* the last one in it (so what runs there is that client's and nothing
//! of another client can start before the signal lands); from the request on, the pipe takes
//! no new units, and once it retires its connection is closed, not pooled (the signal may land
//! late). A cancel for a unit queued behind another waits until the units before it are
//! done; one for a unit that has other units behind it is withdrawn (never sent): the signal
//! could land on a unit of another client.
//!
//! **A slow client's large result.** Replies routed to a unit wait in memory until its client
//! takes them. So that a client that reads slowly (or not at all) cannot make ringwire buffer
//! a whole large result, a unit holds at most [`UNIT_BUFFER_BYTES`]: past that the reader stops
//! reading the connection until the unit's client has taken its replies, and the pipe takes no
//! new units. PostgreSQL then blocks on its send, as it would for that client on a connection
//! of its own. The units already queued behind it wait too (they are on the same connection,
//! after that result): the price of sharing, bounded by the pipe's depth. While units of other
//! clients are queued behind it, the limit is [`UNIT_BUFFER_BYTES_AHEAD`] instead, so a client
//! that waits for one of them before it reads on is not deadlocked by a result that fits.
//!
//! **A long statement.** Every unit queued behind a unit waits for it: a report of seconds
//! on a pipe would hold up every client that joined it. So a new unit does not join a pipe
//! whose head unit has run for [`SlowShapes::threshold`] (`--upstream-pipeline-slow-ms`,
//! 10 ms, or more on a loaded host) while the pool has a connection to give without
//! waiting, and the shape of a unit that ran that long (`classify::autocommit_shape`: its
//! words, literals left out) is remembered in the shard's [`SlowShapes`]; a batch of that
//! shape then opens a pipe of its own, which is slow from the start, until a run of it is
//! quick again. What is left: the units that joined before the head had run that
//! long, the first time a shape is slow, and units that join while the pool is exhausted
//! (waiting for a connection would be no quicker, and would deadlock a client that runs a
//! statement while it reads a result, the case `UNIT_BUFFER_BYTES_AHEAD` is for).
//!
//! The pipe gives its connection back to the shard's pool when its last unit is done.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use super::client::ReplyBuf;
use super::pool::{ConnStatements, Host, Pool, ServerConn, ShardUpstream};

/// One client's unit on a pipe.
#[derive(Default)]
pub struct Unit {
    /// Replies read for this unit, not yet taken by its client.
    replies: RefCell<Vec<u8>>,
    /// ReadyForQuerys still to come.
    owed: Cell<usize>,
    done: Cell<bool>,
    failed: RefCell<Option<String>>,
    waker: Cell<Option<Waker>>,
    /// The client went away: its replies are dropped.
    abandoned: Cell<bool>,
    /// The client asked to cancel; sent when this unit runs alone (see the module doc).
    cancel_wanted: Cell<bool>,
    /// The reader, waiting for this unit's client to take its replies (they reached
    /// [`UNIT_BUFFER_BYTES`]).
    drained: Cell<Option<Waker>>,
    /// The batch's shape (see [`SlowShapes`]).
    shape: u64,
    /// Bytes of its request on the connection (see [`PIPE_REQUEST_BYTES`]).
    request: usize,
}

impl Unit {
    fn wake(&self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// The client took the replies (or went away): a reader held back by them may go on.
    fn wake_reader(&self) {
        if let Some(w) = self.drained.take() {
            w.wake();
        }
    }

    /// The reader must wait for this unit's client before reading more: it holds `limit`
    /// bytes of replies the client has not taken.
    fn holds(&self, limit: usize) -> bool {
        !self.abandoned.get() && self.replies.borrow().len() >= limit
    }

    fn ready(&self) -> bool {
        !self.replies.borrow().is_empty() || self.done.get() || self.failed.borrow().is_some()
    }
}

pub struct Pipe {
    shard: Rc<ShardUpstream>,
    pub host: Host,
    /// Which of the pool's config's hosts the connection is on (see `ServerConn::at`).
    pub at: usize,
    /// The pool (host, user, database) the connection came from: only that pool's clients
    /// join.
    pub pool: Rc<Pool>,
    pub settings: u64,
    pub process_id: i32,
    pub secret_key: i32,
    pub statements: Rc<ConnStatements>,
    /// The connection; `None` while a reader holds it (or once the pipe failed).
    conn: RefCell<Option<ServerConn>>,
    /// Units queued and not yet written (the reader writes them).
    outbox: RefCell<Vec<u8>>,
    /// Units written (or in `outbox`), in the order their replies come.
    units: RefCell<VecDeque<Rc<Unit>>>,
    /// A cancel was sent to the backend: retired, the connection is closed rather than
    /// pooled (see `ServerConn::cancel_sent`).
    cancel_sent: Cell<bool>,
    /// Takes new units (false once a cancel was asked or the pipe failed or retired).
    joinable: Cell<bool>,
    failed: RefCell<Option<String>>,
    /// The connection went back to the pool: the pipe is gone.
    retired: Cell<bool>,
    /// The reader, waiting for replies: woken when `outbox` gets bytes.
    reader: Cell<Option<Waker>>,
    /// Most units at once on this connection.
    depth: usize,
    /// Units taken since the pipe opened.
    taken: Cell<usize>,
    /// How long the unit at the head of `units` has run.
    head: HeadClock,
}

/// How long a pipe's head unit has run, counted only while a reader reads for it: time with
/// no reader (the head's client busy with replies it already has, nobody else waiting) or
/// with the reader waiting for a client to take replies is the clients', not the
/// statement's, and would mark a large result read slowly as a slow statement.
struct HeadClock {
    since: Cell<Instant>,
    /// Stopped at this moment.
    paused: Cell<Option<Instant>>,
}

impl HeadClock {
    fn new(now: Instant) -> HeadClock {
        HeadClock {
            since: Cell::new(now),
            paused: Cell::new(None),
        }
    }

    /// A new head, running from `now`.
    fn restart(&self, now: Instant) {
        self.since.set(now);
        self.paused.set(None);
    }

    fn pause(&self, now: Instant) {
        if self.paused.get().is_none() {
            self.paused.set(Some(now));
        }
    }

    fn resume(&self) {
        if let Some(at) = self.paused.take() {
            self.since.set(self.since.get() + at.elapsed());
        }
    }

    fn ran(&self, now: Instant) -> Duration {
        self.paused
            .get()
            .unwrap_or(now)
            .saturating_duration_since(self.since.get())
    }
}

/// Units a pipe takes while other clients wait for a connection of the pool; then it drains
/// and its connection goes to the first of them. Bounds their wait to this many units' worth
/// of work (and keeps pipelining on when the pool is exhausted, unlike stopping at once).
const UNITS_WHILE_OTHERS_WAIT: usize = 256;

/// Replies a unit may hold for its client before the reader stops reading (module doc).
pub const UNIT_BUFFER_BYTES: usize = 1 << 20;

/// The same while other clients' units wait behind it. A client may be waiting for one of
/// them before it reads on (pgx's `rows.Next()` loop running a query through the pool): that
/// unit's replies come after this unit's, so stopping at 1 MiB would deadlock both for good.
/// Reading on to this limit frees every such pattern whose result fits; a larger result still
/// waits for its client (ARCHITECTURE.md, pipelining hazard 2). A pipe whose clients all stop
/// reading can so hold up to its depth times this (16 × 8 MiB by default), where it held 16 ×
/// 1 MiB before.
pub const UNIT_BUFFER_BYTES_AHEAD: usize = 8 << 20;

/// Bytes of requests a pipe's queued units may hold together; a unit that would take it past
/// this does not join (it may open a pipe of its own, as its first unit). The reader does
/// not read while it writes the units queued behind the head: were their requests larger
/// than the socket buffers on the way to PostgreSQL take while it is busy sending the head's
/// result (a receive buffer starts at 128 KiB here, `tcp_rmem`, and grows only as
/// PostgreSQL reads), PostgreSQL would block on sending that result, which nobody reads, and
/// the reader on writing, for good (ARCHITECTURE.md, pipelining hazard 3; test
/// `a_large_statement_behind_a_large_result_does_not_deadlock_the_connection`). Units are
/// client batches of reads, a few hundred bytes each: only a large literal comes near this.
/// A unit's size counts the Parse of each prepared statement it uses, which goes out with it
/// when the connection lacks the statement.
pub const PIPE_REQUEST_BYTES: usize = 32 << 10;

/// What a ReadyForQuery other than `I` on a shared connection does to its units.
const LEFT_OPEN: &str = "a statement left a transaction open on a shared upstream connection; \
    the connection was closed and the transaction rolled back";

impl Pipe {
    /// A pipe over `conn` (idle, with the settings `conn.settings`).
    pub fn new(
        shard: Rc<ShardUpstream>,
        pool: Rc<Pool>,
        mut conn: ServerConn,
        depth: usize,
    ) -> Rc<Pipe> {
        debug_assert!(matches!(conn.link, super::pool::Link::Own(_)));
        // Its units are anyone's: back in the pool, what `lastval()` returns there is not
        // any one client's.
        conn.last_user = super::pool::ANY_USER;
        Rc::new(Pipe {
            shard,
            pool,
            host: conn.host,
            at: conn.at,
            settings: conn.settings,
            process_id: conn.process_id,
            secret_key: conn.secret_key,
            statements: conn.statements.clone(),
            conn: RefCell::new(Some(conn)),
            outbox: RefCell::new(Vec::new()),
            units: RefCell::new(VecDeque::new()),
            joinable: Cell::new(true),
            failed: RefCell::new(None),
            retired: Cell::new(false),
            cancel_sent: Cell::new(false),
            reader: Cell::new(None),
            depth,
            taken: Cell::new(0),
            head: HeadClock::new(Instant::now()),
        })
    }

    /// Whether a unit of `request` bytes of a client of `pool` (host, user and database)
    /// with `settings` may join now. While clients wait for a connection of the pool, only
    /// until the pipe has taken [`UNITS_WHILE_OTHERS_WAIT`] units: a pipe that kept taking
    /// units would never drain and give its connection back, and clients with other
    /// settings (or whole transactions) would starve. Only while the queued requests fit
    /// [`PIPE_REQUEST_BYTES`] with it.
    pub fn takes(&self, pool: &Rc<Pool>, settings: u64, request: usize) -> bool {
        let units = self.units.borrow();
        self.joinable.get()
            && Rc::ptr_eq(&self.pool, pool)
            && self.settings == settings
            && units.len() < self.depth
            && (self.taken.get() < UNITS_WHILE_OTHERS_WAIT || !self.pool.has_waiters())
            && units.iter().map(|u| u.request).sum::<usize>() + request <= PIPE_REQUEST_BYTES
    }

    /// The unit at the head has run for [`SlowShapes::threshold`], or is of a shape that did
    /// before (module doc, "A long statement").
    pub fn head_is_slow(&self, now: Instant) -> bool {
        self.units.borrow().front().is_some_and(|head| {
            self.shard.slow.is_slow(head.shape) || self.head.ran(now) >= self.shard.slow.threshold()
        })
    }

    /// Units completed at the head: the first had run for `head` (units completed
    /// with it in the same read ran for no time this reader can tell, and are not judged).
    /// The next head starts now.
    fn popped(&self, first_shape: u64) {
        let now = Instant::now();
        self.shard.slow.head_ran(first_shape, self.head.ran(now));
        self.head.restart(now);
    }

    /// How many bytes of replies the unit at the head may hold before the reader stops:
    /// [`UNIT_BUFFER_BYTES_AHEAD`] while units of other clients wait behind it, else
    /// [`UNIT_BUFFER_BYTES`].
    fn head_limit(&self) -> usize {
        let behind = self
            .units
            .borrow()
            .iter()
            .skip(1)
            .any(|u| !u.abandoned.get());
        if behind {
            UNIT_BUFFER_BYTES_AHEAD
        } else {
            UNIT_BUFFER_BYTES
        }
    }

    /// The connection is free: wake the first client parked waiting for its unit's replies,
    /// so it reads (a client busy elsewhere — writing a large result to a slow client — takes
    /// the connection when it comes back; it does not hold up the others). Every unit
    /// abandoned: drain the pipe on a task of its own. No units left: the connection goes back
    /// to the pool.
    fn kick(self: &Rc<Self>) {
        if self.conn.borrow().is_none() {
            return; // a reader has it, or the pipe failed
        }
        let live = {
            let units = self.units.borrow();
            if units.is_empty() && self.outbox.borrow().is_empty() {
                None
            } else {
                Some(units.iter().any(|u| !u.abandoned.get()))
            }
        };
        match live {
            None => self.retire(),
            Some(true) => {
                let units = self.units.borrow();
                if let Some(parked) = units
                    .iter()
                    .filter(|u| !u.abandoned.get())
                    .find_map(|u| u.waker.take())
                {
                    parked.wake();
                }
            }
            Some(false) => {
                let pipe = self.clone();
                glommio::spawn_local(async move { pipe.read(None).await }).detach();
            }
        }
    }

    /// The connection goes back to the pool (clean: every unit ended with `I`).
    fn retire(&self) {
        if self.retired.replace(true) {
            return;
        }
        self.joinable.set(false);
        self.shard.forget_pipe(self);
        if let Some(mut conn) = self.conn.borrow_mut().take() {
            conn.cancel_sent |= self.cancel_sent.get();
            self.shard.release(conn);
        }
    }

    /// The connection failed (or a unit left a transaction open): close it and fail every
    /// unit not complete yet. A reader holding the connection closes it at once (see
    /// `read`).
    pub fn fail(&self, why: &str) {
        if self.failed.borrow().is_some() || self.retired.get() {
            return;
        }
        log::warn!(
            "pipelined upstream connection {} failed: {why}",
            self.process_id
        );
        *self.failed.borrow_mut() = Some(why.to_string());
        self.joinable.set(false);
        self.retired.set(true);
        self.shard.forget_pipe(self);
        let conn = self.conn.borrow_mut().take();
        drop(conn);
        self.outbox.borrow_mut().clear();
        let units = std::mem::take(&mut *self.units.borrow_mut());
        for u in units {
            *u.failed.borrow_mut() = Some(why.to_string());
            u.wake();
            u.wake_reader();
        }
        // A reader waiting for replies stops and closes the connection it holds.
        if let Some(w) = self.reader.take() {
            w.wake();
        }
    }

    /// Send the cancel asked for the head unit if it now runs alone.
    fn maybe_cancel(&self) {
        let units = self.units.borrow();
        let Some(head) = units.front() else { return };
        if units.len() == 1 && head.cancel_wanted.replace(false) {
            self.cancel_sent.set(true);
            let config = self.pool.config.clone();
            let (at, pid, key) = (self.at, self.process_id, self.secret_key);
            glommio::spawn_local(async move {
                super::client::send_cancel(config.host(at), pid, key).await
            })
            .detach();
        }
    }

    /// Read replies, as the reader, until `mine` has some (or, for `None`, until no units
    /// are left). Returns the connection to the pipe when done, also if dropped midway.
    async fn read(self: &Rc<Self>, mine: Option<&Rc<Unit>>) {
        let Some(conn) = self.conn.borrow_mut().take() else {
            return;
        };
        self.head.resume();
        let mut reading = Reading {
            pipe: self.clone(),
            conn: Some(conn),
            mid_write: false,
        };
        let mut scratch = Vec::new();
        loop {
            if self.failed.borrow().is_some() {
                // Failed by another client's relay while this one read: the connection
                // closes here (dropped), not when this reader's own unit next gets a reply.
                reading.conn = None;
                return;
            }
            let conn = reading.conn.as_mut().expect("held while reading");
            let (stream, buf) = conn.own_io().expect("a pipe holds its connection whole");
            let routed = route(&self.units, buf);
            if let Some(shape) = routed.popped {
                self.popped(shape);
                self.maybe_cancel();
            }
            if let Some(why) = routed.failed {
                reading.conn = None;
                self.fail(&why);
                return;
            }
            match mine {
                Some(unit) if unit.ready() => return,
                None if self.units.borrow().is_empty() => return,
                _ => {}
            }
            // Another client's unit holds a full buffer: read nothing more until it drains
            // (module doc), and let no new unit queue behind it meanwhile. Units of other
            // clients already behind it raise its limit (see `UNIT_BUFFER_BYTES_AHEAD`); the
            // queue is looked at only once the head holds the lower limit.
            let head = self.units.borrow().front().cloned();
            let full = head
                .filter(|h| h.holds(UNIT_BUFFER_BYTES))
                .map(|h| (h, self.head_limit()))
                .filter(|(h, limit)| h.holds(*limit));
            if let Some((head, limit)) = full {
                self.joinable.set(false);
                // Waiting for a client is not the head's running time (`HeadClock`).
                self.head.pause(Instant::now());
                poll_fn(|cx| {
                    if !head.holds(limit) || self.failed.borrow().is_some() {
                        Poll::Ready(())
                    } else {
                        head.drained.set(Some(cx.waker().clone()));
                        Poll::Pending
                    }
                })
                .await;
                self.head.resume();
                if self.failed.borrow().is_some() {
                    reading.conn = None;
                    return;
                }
                continue;
            }
            std::mem::swap(&mut scratch, &mut *self.outbox.borrow_mut());
            if !scratch.is_empty() {
                reading.mid_write = true;
                let sent = futures_lite::AsyncWriteExt::write_all(stream, &scratch).await;
                reading.mid_write = false;
                scratch.clear();
                if let Err(e) = sent {
                    reading.conn = None;
                    self.fail(&e.to_string());
                    return;
                }
                continue;
            }
            let filled = futures_lite::future::or(async { Some(buf.fill(stream).await) }, async {
                poll_fn(|cx| {
                    if self.outbox.borrow().is_empty() && self.failed.borrow().is_none() {
                        self.reader.set(Some(cx.waker().clone()));
                        Poll::Pending
                    } else {
                        Poll::Ready(())
                    }
                })
                .await;
                None
            })
            .await;
            if let Some(Err(e)) = filled {
                reading.conn = None;
                self.fail(&e.to_string());
                return;
            }
        }
    }
}

/// Gives the connection back to the pipe when the reader stops, however it stops.
struct Reading {
    pipe: Rc<Pipe>,
    conn: Option<ServerConn>,
    /// Queued units are being written. A reader dropped now (its client's cancel ends the
    /// wait it reads in) may have put part of a message on the wire, which nothing can
    /// follow: the pipe fails and the connection closes.
    mid_write: bool,
}

impl Drop for Reading {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            if self.mid_write {
                drop(conn);
                self.pipe
                    .fail("a reader stopped in the middle of writing queued statements");
            } else if self.pipe.failed.borrow().is_none() {
                *self.pipe.conn.borrow_mut() = Some(conn);
                // Nobody reads for the head until the next reader comes (`HeadClock`).
                self.pipe.head.pause(Instant::now());
            }
        }
        self.pipe.kick();
    }
}

/// A client's share of a pipe: the unit it submitted.
pub struct Lease {
    pipe: Rc<Pipe>,
    unit: Option<Rc<Unit>>,
    /// The batch's shape, for its unit.
    shape: u64,
}

impl Lease {
    pub fn new(pipe: Rc<Pipe>, shape: u64) -> Lease {
        Lease {
            pipe,
            unit: None,
            shape,
        }
    }

    /// Queue `bytes` as this client's unit (written by the reader, at once if there is none).
    pub fn submit(&mut self, bytes: &[u8]) -> io::Result<()> {
        let pipe = &self.pipe;
        if let Some(why) = pipe.failed.borrow().as_ref() {
            return Err(io::Error::other(why.clone()));
        }
        if pipe.retired.get() || self.unit.as_ref().is_some_and(|u| !u.done.get()) {
            debug_assert!(false, "a unit was submitted to a retired pipe or twice");
            return Err(io::Error::other("the shared upstream connection is gone"));
        }
        let owed = ready_for_query_count(bytes);
        debug_assert!(owed > 0, "a unit ends with Sync or Query");
        let unit = Rc::new(Unit {
            shape: self.shape,
            request: bytes.len(),
            ..Unit::default()
        });
        unit.owed.set(owed);
        let mut units = pipe.units.borrow_mut();
        if units.is_empty() {
            pipe.head.restart(Instant::now());
        }
        units.push_back(unit.clone());
        drop(units);
        pipe.taken.set(pipe.taken.get() + 1);
        pipe.outbox.borrow_mut().extend_from_slice(bytes);
        if let Some(w) = pipe.reader.take() {
            w.wake();
        }
        self.unit = Some(unit);
        Ok(())
    }

    /// Wait for more of this unit's replies and move them into `buf`.
    pub async fn fill(&mut self, buf: &mut ReplyBuf) -> io::Result<()> {
        let Some(unit) = self.unit.clone() else {
            return Err(io::Error::other("nothing was sent"));
        };
        loop {
            {
                let mut replies = unit.replies.borrow_mut();
                if !replies.is_empty() {
                    buf.append(&replies);
                    replies.clear();
                    drop(replies);
                    unit.wake_reader();
                    return Ok(());
                }
            }
            if let Some(why) = unit.failed.borrow().as_ref() {
                return Err(io::Error::other(why.clone()));
            }
            if unit.done.get() {
                return Err(io::Error::other(
                    "the server's replies are out of step (more expected than the unit had)",
                ));
            }
            if self.pipe.conn.borrow().is_some() {
                self.pipe.read(Some(&unit)).await;
                continue;
            }
            poll_fn(|cx| {
                if unit.ready() || self.pipe.conn.borrow().is_some() {
                    Poll::Ready(())
                } else {
                    unit.waker.set(Some(cx.waker().clone()));
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// The client asked to cancel its statement: see the module doc.
    pub fn cancel(&self) {
        let Some(unit) = &self.unit else { return };
        if unit.done.get() {
            return;
        }
        self.pipe.joinable.set(false);
        unit.cancel_wanted.set(true);
        self.pipe.maybe_cancel();
    }

    /// The pipe failed for everyone (something this client's relay found out of step).
    pub fn fail(&self, why: &str) {
        self.pipe.fail(why);
    }
}

impl Drop for Lease {
    /// A unit not complete is abandoned: its replies are read and dropped.
    fn drop(&mut self) {
        if let Some(unit) = self.unit.take() {
            if !unit.done.get() {
                unit.abandoned.set(true);
                unit.replies.borrow_mut().clear();
                unit.cancel_wanted.set(false);
                unit.wake_reader();
            }
        }
        self.pipe.kick();
    }
}

/// What [`route`] did.
#[derive(Debug, Default)]
struct Routed {
    /// Units completed; the shape of the first.
    popped: Option<u64>,
    /// The pipe must fail.
    failed: Option<String>,
}

/// Hand each complete reply in `buf` to the unit it belongs to: the head of `units`, until
/// its last ReadyForQuery. A ReadyForQuery that is not `I`, a FATAL error, or a reply with no
/// unit to take it fails the pipe.
fn route(units: &RefCell<VecDeque<Rc<Unit>>>, buf: &mut ReplyBuf) -> Routed {
    let mut routed = Routed::default();
    loop {
        let (tag, status, len) = match buf.frame() {
            Ok(Some((frame, len))) => (frame.tag, frame.body.first().copied(), len),
            Ok(None) => return routed,
            Err(e) => {
                routed.failed = Some(e.to_string());
                return routed;
            }
        };
        let Some(head) = units.borrow().front().cloned() else {
            routed.failed = Some("the server sent a reply no unit asked for".into());
            return routed;
        };
        let raw = &buf.data()[..len];
        if tag == b'E' && super::session::is_fatal(raw) {
            let body = raw.get(5..).unwrap_or_default();
            routed.failed = Some(super::session::error_field(body, b'M').unwrap_or_default());
            return routed;
        }
        if tag == b'Z' {
            if status != Some(b'I') {
                routed.failed = Some(LEFT_OPEN.into());
                return routed;
            }
            head.owed.set(head.owed.get() - 1);
        }
        if !head.abandoned.get() {
            head.replies.borrow_mut().extend_from_slice(raw);
        }
        buf.consume(len);
        if head.owed.get() == 0 {
            head.done.set(true);
            units.borrow_mut().pop_front();
            routed.popped.get_or_insert(head.shape);
        }
        head.wake();
    }
}

/// The least time a unit may run at the head of a pipe before the pipe takes no more units
/// behind it and its shape is remembered as slow (module doc), unless
/// `--upstream-pipeline-slow-ms` says otherwise. Far above a point read's time on an idle
/// host (tens to hundreds of µs) and far below the seconds of a long report.
pub const SLOW_UNIT: Duration = Duration::from_millis(10);

/// A unit is slow once it has run this many times the shard's typical head time, if that is
/// more than the limit. On a host with more runnable threads than cores a head's time is
/// mostly waiting for a CPU: measured with 512 pgbench clients on this 2-core machine
/// (`pgbench -S`, `--sched-batch on`), head times were 5 ms at the median (6 ms mean), 11 ms
/// at the 90th percentile and up to 42 ms, and a fixed 10 ms marked pgbench's own statement
/// slow about 60 times a second. 16× the mean is above that tail, and far below a report.
const SLOW_FACTOR: u64 = 16;

/// Shapes of batches that ran for [`SlowShapes::threshold`] on a pipe, per shard: a batch of
/// one opens a pipe of its own, which nobody joins while the pool has another connection,
/// and a quick run forgets the shape.
/// Direct-mapped, a fixed [`SLOW_SHAPES`] slots: a shape that collides with another one is
/// forgotten and learnt again (its next slow run), which costs one wait, never memory.
pub struct SlowShapes {
    slots: Box<[Cell<u64>]>,
    /// Times a shape was remembered (`ringwire_upstream_pipeline_slow_units_total`).
    pub marked: Cell<u64>,
    /// No unit is slow before this ([`SLOW_UNIT`] unless configured).
    pub limit: Duration,
    /// [`SLOW_FACTOR`] times the moving average of head times that were not slow (each
    /// counted as at most `limit`), in ns: each adds itself and takes away 1/[`SLOW_FACTOR`]
    /// of the sum.
    typical: Cell<u64>,
}

/// Slots in [`SlowShapes`] (8 bytes each).
const SLOW_SHAPES: usize = 1024;

impl SlowShapes {
    pub fn new(limit: Duration) -> SlowShapes {
        SlowShapes {
            slots: (0..SLOW_SHAPES).map(|_| Cell::new(0)).collect(),
            marked: Cell::new(0),
            limit,
            typical: Cell::new(0),
        }
    }

    /// How long a unit runs before it is slow: the limit, or [`SLOW_FACTOR`] times the
    /// typical head time if that is more.
    pub fn threshold(&self) -> Duration {
        self.limit.max(Duration::from_nanos(self.typical.get()))
    }

    /// A unit of `shape` completed at the head of a pipe after `took` there: slow, or quick
    /// (which forgets the shape if it was slow before).
    pub fn head_ran(&self, shape: u64, took: Duration) {
        if took >= self.threshold() {
            self.mark(shape);
        } else {
            if self.is_slow(shape) {
                self.slot(shape).set(0);
            }
            // A sample counts for at most the limit, so the threshold stays under
            // SLOW_FACTOR × limit (160 ms by default): heads just under it, one after another,
            // would otherwise raise it without bound.
            let t = self.typical.get();
            let took = u64::try_from(took.min(self.limit).as_nanos()).unwrap_or(u64::MAX);
            self.typical.set((t - t / SLOW_FACTOR).saturating_add(took));
        }
    }

    fn slot(&self, shape: u64) -> &Cell<u64> {
        &self.slots[(shape % SLOW_SHAPES as u64) as usize]
    }

    pub fn is_slow(&self, shape: u64) -> bool {
        shape != 0 && self.slot(shape).get() == shape
    }

    fn mark(&self, shape: u64) {
        if shape != 0 && self.slot(shape).replace(shape) != shape {
            self.marked.set(self.marked.get() + 1);
            log::debug!(
                "a pipelined unit of shape {shape:x} ran for {:?} or more",
                self.threshold()
            );
        }
    }
}

/// How many ReadyForQuerys the server sends for `bytes` (one per Sync, Query, FunctionCall).
fn ready_for_query_count(bytes: &[u8]) -> usize {
    let mut rest = bytes;
    let mut n = 0;
    while let Ok(Some((frame, len))) = protocol::wire::split_frame(rest, usize::MAX) {
        rest = &rest[len..];
        n += usize::from(matches!(frame.tag, b'S' | b'Q' | b'F'));
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::backend;

    fn unit(owed: usize) -> Rc<Unit> {
        let u = Rc::new(Unit {
            shape: 10 + owed as u64,
            ..Unit::default()
        });
        u.owed.set(owed);
        u
    }

    /// Replies are a unit's own slice of the stream, in order, cut at its last
    /// ReadyForQuery; an abandoned unit's replies are dropped.
    #[test]
    fn replies_go_to_their_unit_by_ready_for_query_count() {
        let (a, b, c) = (unit(2), unit(1), unit(1));
        b.abandoned.set(true);
        let units = RefCell::new(VecDeque::from([a.clone(), b.clone(), c.clone()]));
        let mut stream = Vec::new();
        backend::write_command_complete(&mut stream, "SELECT 1");
        backend::write_ready_for_query(&mut stream, backend::TransactionStatus::Idle);
        backend::write_command_complete(&mut stream, "INSERT 0 1");
        backend::write_ready_for_query(&mut stream, backend::TransactionStatus::Idle);
        let a_len = stream.len();
        backend::write_command_complete(&mut stream, "UPDATE 7");
        backend::write_ready_for_query(&mut stream, backend::TransactionStatus::Idle);
        let b_end = stream.len();
        backend::write_command_complete(&mut stream, "DELETE 3");
        let mut buf = ReplyBuf::default();
        buf.append(&stream);
        let routed = route(&units, &mut buf);
        // The first unit completed is the one whose time the pipe judges.
        assert_eq!(routed.popped, Some(a.shape));
        assert!(routed.failed.is_none());
        assert_eq!(&a.replies.borrow()[..], &stream[..a_len]);
        assert!(a.done.get() && b.done.get() && !c.done.get());
        assert!(b.replies.borrow().is_empty());
        assert_eq!(&c.replies.borrow()[..], &stream[b_end..]);
        assert_eq!(units.borrow().len(), 1);
    }

    /// A ReadyForQuery `T` (a unit left a transaction open) fails the pipe before any reply
    /// of a later unit is handed out.
    #[test]
    fn a_transaction_left_open_fails_the_pipe() {
        let (a, b) = (unit(1), unit(1));
        let units = RefCell::new(VecDeque::from([a.clone(), b.clone()]));
        let mut stream = Vec::new();
        backend::write_command_complete(&mut stream, "BEGIN");
        backend::write_ready_for_query(&mut stream, backend::TransactionStatus::InBlock);
        backend::write_command_complete(&mut stream, "SELECT 1");
        let mut buf = ReplyBuf::default();
        buf.append(&stream);
        let routed = route(&units, &mut buf);
        assert_eq!(routed.failed.as_deref(), Some(LEFT_OPEN));
        assert!(!a.done.get() && b.replies.borrow().is_empty());
    }

    /// A slow shape is remembered until a quick run alone; a colliding shape evicts it
    /// rather than sharing its slot.
    #[test]
    fn slow_shapes_are_remembered_until_a_quick_run() {
        let slow = SlowShapes::new(SLOW_UNIT);
        let (a, b) = (7, 7 + SLOW_SHAPES as u64);
        assert!(!slow.is_slow(a) && !slow.is_slow(0));
        slow.mark(a);
        slow.mark(a);
        assert!(slow.is_slow(a) && !slow.is_slow(b));
        assert_eq!(slow.marked.get(), 1);
        slow.head_ran(a, SLOW_UNIT * 2);
        assert!(slow.is_slow(a));
        slow.head_ran(a, SLOW_UNIT / 2);
        assert!(!slow.is_slow(a));
        slow.mark(a);
        slow.mark(b);
        assert!(slow.is_slow(b) && !slow.is_slow(a));
        slow.mark(0);
        assert!(!slow.is_slow(0));
    }

    /// A head time is slow past the limit, or past 16× the typical head time when heads are
    /// slow all round (a loaded host); slow ones do not raise the typical time.
    #[test]
    fn slow_is_the_limit_or_sixteen_times_the_typical_head_time() {
        let ms = Duration::from_millis;
        let slow = SlowShapes::new(ms(10));
        slow.head_ran(1, ms(1));
        assert_eq!(slow.threshold(), ms(10));
        slow.head_ran(2, ms(10));
        assert!(slow.is_slow(2) && slow.marked.get() == 1);
        // Heads of 4 ms, many of them: 16 × 4 ms.
        for _ in 0..200 {
            slow.head_ran(1, ms(4));
        }
        let t = slow.threshold();
        assert!(t > ms(60) && t <= ms(64), "{t:?}");
        slow.head_ran(3, ms(45));
        assert!(!slow.is_slow(3) && !slow.is_slow(1));
        let t = slow.threshold();
        slow.head_ran(3, ms(1000));
        assert!(slow.is_slow(3));
        assert_eq!(slow.threshold(), t, "a slow head raised the typical time");
        // A run under the threshold forgets the shape.
        slow.head_ran(3, ms(45));
        assert!(!slow.is_slow(3));
        // Heads just under the threshold, one after another, raise it only to 16× the limit.
        for _ in 0..1000 {
            let t = slow.threshold();
            slow.head_ran(1, t - Duration::from_micros(1));
        }
        assert!(slow.threshold() <= ms(160), "{:?}", slow.threshold());
        assert!(!slow.is_slow(1));
    }

    #[test]
    fn ready_for_query_counts() {
        let mut m = Vec::new();
        protocol::frontend::encode_query(&mut m, "select 1");
        protocol::frontend::encode_empty(&mut m, b'S');
        protocol::frontend::encode_query(&mut m, "select 2");
        assert_eq!(ready_for_query_count(&m), 3);
    }
}
