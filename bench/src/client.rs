//! One client connection on a glommio executor: open and authenticate it (setup, allocation
//! allowed), then the closed loop (no allocation: requests are encoded into a reused buffer
//! and replies are framed in place in the read buffer, looking only at tags and SQLSTATEs).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use hdrhistogram::Histogram;
use protocol::backend::BackendMessage;
use protocol::frontend::{
    encode_empty, encode_parse, encode_password, encode_sasl_initial_response,
    encode_sasl_response, encode_startup, PROTOCOL_3_0,
};
use protocol::wire::{frame_bytes_needed, split_frame, Reader};
use shards::connect::{Address, ShardStream};

use crate::auth::{md5_password, Scram};
use crate::workload::{Cursor, Mode, Workload};

/// A reply larger than this is a broken server, not a benchmark result.
const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// Read buffer per connection: many pipelined replies of a few dozen bytes each.
const READ_BUFFER_BYTES: usize = 16 << 10;
/// Write buffer per connection, grown once at setup for the pipeline depth.
const WRITE_BUFFER_BYTES: usize = 4 << 10;
/// Connecting and authenticating must finish within this, or the run is reported as failed.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct ConnectParams {
    pub addr: SocketAddr,
    pub user: String,
    pub database: String,
    pub password: Option<String>,
}

/// The instants every connection of a run agrees on.
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    /// Replies before this are warmup: neither counted nor recorded.
    pub warmup_end: Instant,
    /// No query is sent at or after this; replies after it are not counted.
    pub end: Instant,
}

/// Per-thread results, shared by that thread's connections (`Rc`, never across threads).
pub struct ThreadStats {
    pub latency_ns: RefCell<Histogram<u64>>,
    pub queries: Cell<u64>,
    /// `(SQLSTATE, count, first message)`: a handful of distinct codes at most, so a vector.
    pub errors: RefCell<Vec<([u8; 5], u64, String)>>,
    pub lost: RefCell<Vec<String>>,
}

impl ThreadStats {
    pub fn new() -> ThreadStats {
        ThreadStats {
            latency_ns: RefCell::new(new_histogram()),
            queries: Cell::new(0),
            errors: RefCell::new(Vec::new()),
            lost: RefCell::new(Vec::new()),
        }
    }

    /// Count an ErrorResponse by its SQLSTATE.
    pub fn error(&self, body: &[u8]) {
        let (code, message) = error_fields(body);
        let mut errors = self.errors.borrow_mut();
        match errors.iter_mut().find(|(c, _, _)| *c == code) {
            Some((_, n, _)) => *n += 1,
            // Allocates once per distinct SQLSTATE, not per error.
            None => errors.push((code, 1, String::from_utf8_lossy(message).into_owned())),
        }
    }
}

impl Default for ThreadStats {
    fn default() -> Self {
        Self::new()
    }
}

/// Latencies in nanoseconds, 1 ns to 100 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("static histogram bounds are valid")
}

/// SQLSTATE and message of an ErrorResponse body, read in place.
fn error_fields(body: &[u8]) -> ([u8; 5], &[u8]) {
    let mut code = *b"?????";
    let mut message: &[u8] = b"";
    let mut r = Reader::new(body);
    while let Ok(field) = r.u8() {
        if field == 0 {
            break;
        }
        let rest = r.rest();
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            break;
        };
        let value = &rest[..nul];
        if r.bytes(nul + 1).is_err() {
            break;
        }
        match field {
            b'C' if value.len() == 5 => code.copy_from_slice(value),
            b'M' => message = value,
            _ => {}
        }
    }
    (code, message)
}

/// Scan replies for one connection of a timed run: count errors by SQLSTATE, and at each
/// ReadyForQuery record the finished query's latency (inside the timed window) and queue the
/// next query into `out`, stamped with the same clock read. Shared by both client drivers.
#[allow(clippy::too_many_arguments)]
pub fn scan_and_requeue(
    pending: &[u8],
    failed: &mut bool,
    timeline: &Timeline,
    stats: &ThreadStats,
    sent_at: &mut VecDeque<Instant>,
    workload: &Workload,
    cursor: &mut Cursor,
    out: &mut Vec<u8>,
) -> Result<usize, String> {
    scan_replies(
        pending,
        failed,
        |error_body| {
            let now = Instant::now();
            if now >= timeline.warmup_end && now < timeline.end {
                stats.error(error_body);
            }
        },
        |query_failed| {
            let start = sent_at
                .pop_front()
                .ok_or("ReadyForQuery without a query in flight")?;
            // One clock read per query: it ends this query and stamps the next one, which
            // goes out with this turn's writes.
            let now = Instant::now();
            if !query_failed && now >= timeline.warmup_end && now < timeline.end {
                stats.queries.set(stats.queries.get() + 1);
                stats
                    .latency_ns
                    .borrow_mut()
                    .saturating_record((now - start).as_nanos() as u64);
            }
            if now < timeline.end {
                workload.encode_next(cursor, out);
                sent_at.push_back(now);
            }
            Ok(())
        },
    )
}

/// Walk the whole replies at the front of `pending`, in place: `on_error` gets each
/// ErrorResponse body, `on_ready` runs at each ReadyForQuery with whether that query failed.
/// Everything else (RowDescription, DataRow, CommandComplete, ParseComplete, ...) is skipped by
/// its length. Returns the bytes consumed; a partial message at the end is left for the next
/// read. Allocates nothing unless the server breaks the protocol.
pub fn scan_replies(
    pending: &[u8],
    failed: &mut bool,
    mut on_error: impl FnMut(&[u8]),
    mut on_ready: impl FnMut(bool) -> Result<(), &'static str>,
) -> Result<usize, String> {
    let mut consumed = 0;
    loop {
        match split_frame(&pending[consumed..], MAX_MESSAGE_BYTES) {
            Ok(Some((frame, len))) => {
                consumed += len;
                match frame.tag {
                    b'E' => {
                        *failed = true;
                        on_error(frame.body);
                    }
                    b'Z' => on_ready(std::mem::take(failed))?,
                    _ => {}
                }
            }
            Ok(None) => return Ok(consumed),
            Err(e) => return Err(format!("protocol error from the server: {}", e.message)),
        }
    }
}

/// Received bytes `[start, end)` of `buf` are not yet consumed.
pub(crate) struct ReadBuf {
    buf: Vec<u8>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

impl ReadBuf {
    fn new() -> ReadBuf {
        ReadBuf {
            buf: vec![0; READ_BUFFER_BYTES],
            start: 0,
            end: 0,
        }
    }

    pub(crate) fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The whole message `Connection::wait_frame` found at the front, and its length. The
    /// caller advances `start` by that length once done with it.
    fn front_frame(&self) -> (protocol::wire::Frame<'_>, usize) {
        match split_frame(self.pending(), MAX_MESSAGE_BYTES) {
            Ok(Some(found)) => found,
            _ => unreachable!("wait_frame returned true, so a whole frame is buffered"),
        }
    }

    /// Make room at the end for at least one byte, or for the rest of the partial message at
    /// the front when its length is known. Only call it while no read into `buf` is in flight.
    pub(crate) fn make_room(&mut self) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let needed = frame_bytes_needed(self.pending()).unwrap_or(0).max(1);
        if self.buf.len() - self.end < needed {
            // Move the partial message to the front; grow only for a message larger than the
            // buffer (never in the benchmark workloads, whose replies are tiny).
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() - self.end < needed {
                self.buf.resize(self.end + needed.max(READ_BUFFER_BYTES), 0);
            }
        }
    }

    /// The free space after the received bytes, where the next read goes.
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        &mut self.buf[self.end..]
    }

    /// Read at least one more byte; `Ok(0)` is end of stream.
    async fn fill(&mut self, stream: &mut ShardStream) -> std::io::Result<usize> {
        self.make_room();
        let n = stream.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n)
    }
}

/// An open, authenticated connection, idle (the last message seen was ReadyForQuery).
pub struct Connection {
    /// glommio's `TcpStream`, or (`--driver shards`) a stream on this thread's
    /// `shards::uring` driver: the socket layer a server shard runs on.
    stream: ShardStream,
    pub(crate) rbuf: ReadBuf,
    /// Requests being written (the ring driver's "in flight" buffer).
    pub(crate) out: Vec<u8>,
}

impl Connection {
    /// Connect (with TCP_NODELAY), authenticate, and (prepared mode) Parse every statement
    /// once. The connection is opened on this thread's `shards::uring` driver if one runs here
    /// (`--driver shards`), otherwise on glommio's `TcpStream`.
    pub async fn open(
        params: &ConnectParams,
        workload: &Workload,
        pipeline: usize,
    ) -> Result<Connection, String> {
        let setup = async {
            let stream = shards::connect::connect(&Address::Tcp(params.addr))
                .await
                .map_err(|e: io::Error| format!("cannot connect to {}: {e}", params.addr))?;
            let mut conn = Connection {
                stream,
                rbuf: ReadBuf::new(),
                out: Vec::with_capacity(WRITE_BUFFER_BYTES * pipeline.max(1)),
            };
            conn.startup(params).await?;
            if workload.mode == Mode::Prepared {
                conn.out.clear();
                for statement in workload.statements() {
                    encode_parse(
                        &mut conn.out,
                        &statement.prepared_name,
                        &statement.placeholder_sql,
                        &[],
                    );
                }
                encode_empty(&mut conn.out, b'S');
                conn.flush().await?;
                conn.until_ready("preparing statements").await?;
            }
            Ok(conn)
        };
        // `shards::time::sleep`, not a glommio timer: on the shards driver the thread sleeps
        // in that driver's ring, where only its own timers wake it.
        futures_lite::future::or(setup, async {
            shards::time::sleep(SETUP_TIMEOUT).await;
            Err(format!(
                "connection setup to {} took longer than {SETUP_TIMEOUT:?}",
                params.addr
            ))
        })
        .await
    }

    /// The socket, for the raw ring driver, which runs only on connections opened on
    /// glommio's `TcpStream`.
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        match &self.stream {
            ShardStream::GlommioTcp(s) => std::os::fd::AsRawFd::as_raw_fd(s),
            ShardStream::Uring(_) | ShardStream::GlommioUnix(_) => {
                unreachable!("the raw ring driver is given glommio TCP connections only")
            }
        }
    }

    /// Close after the ring driver is done with the socket: Terminate if the connection is
    /// still healthy, then close.
    pub async fn close(mut self, healthy: bool) {
        if healthy {
            self.out.clear();
            encode_empty(&mut self.out, b'X');
            let _ = self.flush().await;
        }
        let _ = self.stream.close().await;
    }

    async fn flush(&mut self) -> Result<(), String> {
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| format!("write failed: {e}"))
    }

    async fn startup(&mut self, params: &ConnectParams) -> Result<(), String> {
        self.out.clear();
        encode_startup(
            &mut self.out,
            PROTOCOL_3_0,
            &[
                ("user", &params.user),
                ("database", &params.database),
                ("application_name", "ringwire-bench"),
            ],
        );
        self.flush().await?;
        let mut scram: Option<Scram> = None;
        let need_password = || {
            params.password.clone().ok_or_else(|| {
                "the server asks for a password: pass --password or set PGPASSWORD".to_string()
            })
        };
        loop {
            self.out.clear();
            let mut ready = false;
            {
                if !self.wait_frame().await? {
                    return Err("server closed the connection during startup".into());
                }
                let (frame, n) = self.rbuf.front_frame();
                let message = BackendMessage::parse(frame)
                    .map_err(|e| format!("bad message during startup: {}", e.message))?;
                match message {
                    BackendMessage::AuthenticationOk => {}
                    BackendMessage::AuthenticationCleartextPassword => {
                        encode_password(&mut self.out, &need_password()?)
                    }
                    BackendMessage::AuthenticationMd5Password { salt } => encode_password(
                        &mut self.out,
                        &md5_password(&params.user, &need_password()?, salt),
                    ),
                    BackendMessage::AuthenticationSasl { mechanisms } => {
                        if !mechanisms.contains(&"SCRAM-SHA-256") {
                            return Err(format!("the server offers SASL mechanisms {mechanisms:?}; only SCRAM-SHA-256 is supported"));
                        }
                        let (s, first) = Scram::start(&need_password()?)?;
                        encode_sasl_initial_response(&mut self.out, "SCRAM-SHA-256", &first);
                        scram = Some(s);
                    }
                    BackendMessage::AuthenticationSaslContinue { data } => {
                        let s = scram.as_mut().ok_or("unexpected SASL continue")?;
                        let reply = s.respond(data)?;
                        encode_sasl_response(&mut self.out, &reply);
                    }
                    BackendMessage::AuthenticationSaslFinal { data } => {
                        scram
                            .as_ref()
                            .ok_or("unexpected SASL final")?
                            .finish(data)?;
                    }
                    BackendMessage::ErrorResponse(fields) => {
                        return Err(format!(
                            "server refused the connection: {} {}",
                            fields.code(),
                            fields.message()
                        ));
                    }
                    BackendMessage::ReadyForQuery { .. } => ready = true,
                    // ParameterStatus, BackendKeyData, NoticeResponse, NegotiateProtocolVersion.
                    _ => {}
                }
                self.rbuf.start += n;
            }
            if ready {
                return Ok(());
            }
            if !self.out.is_empty() {
                self.flush().await?;
            }
        }
    }

    /// Consume replies up to ReadyForQuery; an ErrorResponse on the way is a setup failure.
    async fn until_ready(&mut self, what: &str) -> Result<(), String> {
        let mut failure = None;
        loop {
            if !self.wait_frame().await? {
                return Err(format!("server closed the connection while {what}"));
            }
            let (frame, n) = self.rbuf.front_frame();
            let (tag, body) = (frame.tag, frame.body);
            if tag == b'E' && failure.is_none() {
                let (code, message) = error_fields(body);
                failure = Some(format!(
                    "{what}: {} {}",
                    String::from_utf8_lossy(&code),
                    String::from_utf8_lossy(message)
                ));
            }
            self.rbuf.start += n;
            if tag == b'Z' {
                return failure.map_or(Ok(()), Err);
            }
        }
    }

    /// Read until a whole message is at the front of the read buffer; `false` at end of stream.
    async fn wait_frame(&mut self) -> Result<bool, String> {
        loop {
            match split_frame(self.rbuf.pending(), MAX_MESSAGE_BYTES) {
                Ok(Some(_)) => return Ok(true),
                Ok(None) => {}
                Err(e) => return Err(format!("protocol error from the server: {}", e.message)),
            }
            if self
                .rbuf
                .fill(&mut self.stream)
                .await
                .map_err(|e| format!("read failed: {e}"))?
                == 0
            {
                return Ok(false);
            }
        }
    }

    /// The closed loop: keep `pipeline` queries in flight until `timeline.end`, then drain and
    /// say goodbye. Returns an error if the connection broke; the caller reports it.
    pub async fn run(
        &mut self,
        workload: &Workload,
        cursor: &mut Cursor,
        pipeline: usize,
        timeline: Timeline,
        stats: &ThreadStats,
    ) -> Result<(), String> {
        assert!(
            pipeline >= 1,
            "pipeline depth is validated to be at least 1"
        );
        // When each in-flight query was written, oldest first.
        let mut sent_at: VecDeque<Instant> = VecDeque::with_capacity(pipeline);
        self.out.clear();
        for _ in 0..pipeline {
            workload.encode_next(cursor, &mut self.out);
        }
        let now = Instant::now();
        sent_at.extend(std::iter::repeat_n(now, pipeline));
        self.flush().await?;
        // The current query has seen an ErrorResponse (its latency is not recorded).
        let mut failed = false;
        while !sent_at.is_empty() {
            let n = self
                .rbuf
                .fill(&mut self.stream)
                .await
                .map_err(|e| format!("read failed: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "server closed the connection with {} queries in flight",
                    sent_at.len()
                ));
            }
            self.out.clear();
            let out = &mut self.out;
            let consumed = scan_and_requeue(
                self.rbuf.pending(),
                &mut failed,
                &timeline,
                stats,
                &mut sent_at,
                workload,
                cursor,
                out,
            )?;
            self.rbuf.start += consumed;
            if !self.out.is_empty() {
                self.flush().await?;
            }
            glommio::yield_if_needed().await;
        }
        self.out.clear();
        encode_empty(&mut self.out, b'X');
        let _ = self.flush().await;
        let _ = self.stream.close().await;
        Ok(())
    }
}
