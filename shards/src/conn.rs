//! One client connection: startup, authentication, then the query loop.
//!
//! The state machine never calls the socket directly: it reads through [`ReadBuf::fill`] and
//! writes by appending to `out`, which the loop flushes once per batch — when every complete
//! message in the read buffer has been handled (so a pipeline of Bind/Execute/Sync costs one
//! write), or earlier if `out` grows past [`FLUSH_BYTES`]. A statement (Query, Execute) is
//! lent the socket through [`Cx::client`] so a large result can go out in chunks while it
//! runs. The transport is any
//! `AsyncRead + AsyncWrite`, so the io_uring path can replace glommio's stream underneath.
//!
//! States: `tls::negotiate` (with TLS on: SSLRequest answered `S` and the handshake, or
//! direct TLS) → `startup` (startup packet, SSL/GSS negotiation answered `N`, cancel requests) →
//! `authenticate` (in `crate::auth`) → ready ⇄ in-query, with the transaction status
//! `I`/`T`/`E` in `Conn::tx` and `skip_until_sync` after an error in the extended protocol.

use std::cell::Cell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use bumpalo::Bump;
use futures_lite::future::or;
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use protocol::backend::{self, TransactionStatus};
use protocol::frontend::{self, FrontendMessage, StartupRequest, Target};
use protocol::wire::{frame_bytes_needed, split_frame};
use protocol::{PgError, Severity, SqlState};

use crate::auth::{authenticate, Client};
use crate::engine::{
    no_statement, CancelToken, ClientOut, ConnInfo, Cx, Engine, Execution, SessionStart, Statements,
};
use crate::limits;
use crate::metrics::{kind_of_reply, Protocol};
use crate::shard::Shard;
use crate::time::StatementClock;
use crate::tls::{self, Transport};
use crate::uring::Peer;

/// COPY FROM STDIN data is collected before it is parsed and applied; this bounds what one
/// client can make a shard hold (scale 10 of pgbench_accounts is ~70 MB of COPY text).
const MAX_COPY_IN_BYTES: usize = 512 << 20;

/// Flush the write buffer mid-batch once it holds this much (a large result streams out
/// instead of piling up).
pub const FLUSH_BYTES: usize = 256 << 10;
/// Initial read buffer: enough for an ordinary query, and small, because every idle
/// connection keeps one (10,000 idle connections per shard are a stated goal).
const READ_BUF_BYTES: usize = 1 << 10;
/// A read that fills the buffer doubles it up to this size, so a pipelining client is still
/// read (and answered) in batches this large; see `ReadBuf::fill`.
const BATCH_READ_BYTES: usize = 16 << 10;
/// Buffers that grew past this for one big message are given back afterwards, so an idle
/// connection costs little memory.
const SHRINK_ABOVE_BYTES: usize = 1 << 20;

/// A connection's read buffer: bytes `[start, end)` are received but not yet consumed.
pub(crate) struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReadBuf {
    pub(crate) fn new() -> ReadBuf {
        ReadBuf {
            buf: vec![0; READ_BUF_BYTES],
            start: 0,
            end: 0,
        }
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Drop the `n` bytes that follow the first `keep` (authentication reads its messages
    /// behind the StartupMessage, which stays at the front), and wipe them: they are
    /// passwords and SCRAM proofs, and the buffer lives as long as the connection.
    pub(crate) fn remove_after(&mut self, keep: usize, n: usize) {
        assert!(
            keep + n <= self.end - self.start,
            "removing bytes that were never buffered"
        );
        self.buf
            .copy_within(self.start..self.start + keep, self.start + n);
        self.buf[self.start..self.start + n].fill(0);
        self.consume(n);
    }

    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(
            self.start + n <= self.end,
            "consumed more than was buffered"
        );
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Read at least one more byte. `want` is how many more bytes the partial message at the
    /// front needs (if known), so a large message is read into a buffer grown once.
    /// Returns Ok(false) on a clean end of stream.
    pub(crate) async fn fill<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        want: usize,
    ) -> io::Result<bool> {
        if self.start > 0
            && (self.end == self.buf.len()
                || self.end - self.start + want > self.buf.len() - self.start)
        {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let needed = self.end + want.max(1);
        if needed > self.buf.len() {
            self.buf.resize(needed.max(self.buf.len() * 2), 0);
        }
        let room = self.buf.len() - self.end;
        let n = stream.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        if n == room && self.buf.len() < BATCH_READ_BYTES {
            // More is probably waiting: read bigger batches from now on.
            self.buf.resize(self.buf.len() * 2, 0);
        }
        Ok(n > 0)
    }

    pub(crate) fn shrink_if_idle(&mut self) {
        if self.start == self.end && self.buf.len() > SHRINK_ABOVE_BYTES {
            self.buf = vec![0; READ_BUF_BYTES];
            self.start = 0;
            self.end = 0;
        }
    }
}

/// Why a connection ended (for the log line).
#[derive(Debug)]
pub(crate) enum End {
    ClientClosed,
    Terminated,
    CancelRequest,
    Fatal(PgError),
    Io(io::Error),
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> End {
        End::Io(e)
    }
}

/// Serve one accepted connection until it ends. Never panics on client input; every way out
/// is an [`End`]. `peer` is the client's address, for the host-based auth rules.
pub(crate) async fn serve<E: Engine, S: AsyncRead + AsyncWrite + Unpin>(
    shard: Rc<Shard<E>>,
    stream: S,
    peer: Option<Peer>,
    over_limit: bool,
) -> End {
    let mut rbuf = ReadBuf::new();
    let mut out = Vec::with_capacity(READ_BUF_BYTES);
    let timeout = shard.config.startup_timeout;
    let mut stream = Transport::Plain(stream);
    // The timeout covers the TLS handshake too: a client that stalls in it is cut off alike.
    let started = futures_lite::future::or(
        async {
            let negotiated =
                match tls::negotiate(&shard.config.tls, &mut stream, &mut rbuf, peer).await {
                    Ok(negotiated) => negotiated,
                    Err(end) => return Some(Err(end)),
                };
            Some(
                startup(
                    &shard,
                    &mut stream,
                    &mut rbuf,
                    &mut out,
                    peer,
                    negotiated,
                    over_limit,
                )
                .await,
            )
        },
        async {
            crate::time::sleep(timeout).await;
            None
        },
    )
    .await;
    let conn = match started {
        Some(Ok(conn)) => conn,
        Some(Err(End::Fatal(e))) => {
            out.clear();
            backend::write_error(&mut out, &e);
            let _ = flush(&mut stream, &mut out).await;
            return End::Fatal(e);
        }
        Some(Err(end)) => return end,
        None => {
            let e = PgError::fatal(
                SqlState::CONNECTION_FAILURE,
                "canceling authentication due to timeout",
            );
            out.clear();
            backend::write_error(&mut out, &e);
            let _ = flush(&mut stream, &mut out).await;
            return End::Fatal(e);
        }
    };
    let pid = conn.info.process_id;
    let end = if shard.engine.relays() {
        crate::relay::run(conn, &mut stream, &mut rbuf, out).await
    } else {
        conn.run(&mut stream, &mut rbuf, out).await
    };
    shard.unregister_cancel(pid);
    end
}

/// Read and answer startup packets until a StartupMessage, authenticate, and open the session.
async fn startup<E: Engine, S: AsyncRead + AsyncWrite + Unpin>(
    shard: &Rc<Shard<E>>,
    stream: &mut S,
    rbuf: &mut ReadBuf,
    out: &mut Vec<u8>,
    peer: Option<Peer>,
    tls: tls::Negotiated,
    over_limit: bool,
) -> Result<Conn<E>, End> {
    let (session, info) = loop {
        let (body_len, n) = loop {
            match frontend::split_startup(rbuf.data()).map_err(End::Fatal)? {
                Some((body, n)) => break (body.len(), n),
                None => {
                    if !rbuf.fill(stream, 8).await? {
                        return Err(End::ClientClosed);
                    }
                }
            }
        };
        match StartupRequest::parse(&rbuf.data()[4..4 + body_len]).map_err(End::Fatal)? {
            StartupRequest::SslRequest | StartupRequest::GssEncRequest => {
                // Encryption comes with TLS support; until then "N" means "go on in plaintext".
                // Bytes pipelined after the request, before our answer, would be a
                // buffer-stuffing attempt (CVE-2021-23214): refuse them.
                if rbuf.data().len() > n {
                    return Err(End::Fatal(PgError::fatal(
                        SqlState::PROTOCOL_VIOLATION,
                        "received unencrypted data after SSL request",
                    )));
                }
                rbuf.consume(n);
                stream.write_all(b"N").await?;
            }
            StartupRequest::Cancel {
                process_id,
                secret_key,
            } => {
                shard.route_cancel(process_id, secret_key);
                return Err(End::CancelRequest);
            }
            StartupRequest::Startup { version, params } => {
                if over_limit {
                    return Err(End::Fatal(PgError::fatal(
                        SqlState::TOO_MANY_CONNECTIONS,
                        "sorry, too many clients already",
                    )));
                }
                let Some(user) = params.get("user").filter(|u| !u.is_empty()) else {
                    return Err(End::Fatal(PgError::fatal(
                        SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
                        "no PostgreSQL user name specified in startup packet",
                    )));
                };
                if let Some(e) = params.get("replication").and_then(refuse_replication) {
                    return Err(End::Fatal(e));
                }
                let info = ConnInfo {
                    user: user.to_string(),
                    database: params
                        .get("database")
                        .filter(|d| !d.is_empty())
                        .unwrap_or(user)
                        .to_string(),
                    process_id: shard.next_process_id(),
                    shard_id: shard.id,
                };
                // We speak 3.0; a newer minor version or `_pq_.` options get
                // NegotiateProtocolVersion and the connection goes on in 3.0.
                let unrecognized: Vec<&str> = params
                    .iter()
                    .map(|(k, _)| k)
                    .filter(|k| k.starts_with("_pq_."))
                    .collect();
                if version & 0xffff != 0 || !unrecognized.is_empty() {
                    backend::write_negotiate_protocol_version(
                        out,
                        frontend::PROTOCOL_3_0,
                        unrecognized.into_iter(),
                    );
                }
                let client = Client {
                    user: &info.user,
                    database: &info.database,
                    peer,
                    binding: tls.binding,
                    client_cert: &tls.client_cert,
                };
                let credential = authenticate(shard, stream, rbuf, out, &client, n).await?;
                // The StartupMessage is still at the front of rbuf (authentication read past it
                // and dropped only its own message), so the session is built from it in place.
                let Ok(StartupRequest::Startup { params, .. }) =
                    StartupRequest::parse(&rbuf.data()[4..4 + body_len])
                else {
                    unreachable!("the startup packet was parsed above and is still buffered")
                };
                let start = SessionStart {
                    user: &info.user,
                    database: &info.database,
                    params,
                    process_id: info.process_id,
                    shard_id: shard.id,
                    credential: &credential,
                };
                let as_fatal = |e: PgError| {
                    End::Fatal(PgError {
                        severity: Severity::Fatal,
                        ..e
                    })
                };
                let mut session = shard.engine.open_session(&start).map_err(as_fatal)?;
                if let Err(e) = shard.engine.admit(&mut session).await {
                    shard.engine.close_session(&mut session);
                    return Err(as_fatal(e));
                }
                rbuf.consume(n);
                break (session, info);
            }
        }
    };
    let cancel = Rc::new(CancelToken::default());
    let secret = shard.register_cancel(info.process_id, cancel.clone());
    backend::write_auth_ok(out);
    shard.engine.write_startup_parameters(&session, out);
    backend::write_backend_key_data(out, info.process_id, secret);
    backend::write_ready_for_query(out, TransactionStatus::Idle);
    Ok(Conn {
        shard: shard.clone(),
        session,
        info,
        cancel,
        arena: Bump::new(),
        tx: TransactionStatus::Idle,
        statements: Statements::default(),
        portals: HashMap::new(),
        skip_until_sync: false,
        close_all_portals: false,
        copy_in_started: false,
        copy_in: None,
        error_in_cycle: false,
        cycle_open: false,
        flush_requested: Cell::new(false),
        fresh_read: Cell::new(false),
        sync_next: false,
    })
}

/// An established connection.
pub(crate) struct Conn<E: Engine> {
    pub(crate) shard: Rc<Shard<E>>,
    pub(crate) session: E::Session,
    info: ConnInfo,
    pub(crate) cancel: Rc<CancelToken>,
    /// Per-query scratch space, reset at every ReadyForQuery.
    arena: Bump,
    tx: TransactionStatus,
    statements: Statements<E::Statement>,
    portals: HashMap<Box<str>, E::Portal>,
    /// After an error in an extended-protocol message, everything up to Sync is discarded.
    skip_until_sync: bool,
    close_all_portals: bool,
    /// Set by the engine when a statement began COPY FROM STDIN (it sent CopyInResponse).
    copy_in_started: bool,
    /// COPY FROM STDIN in progress: the data received so far.
    copy_in: Option<Vec<u8>>,
    /// An error was reported since the last ReadyForQuery.
    error_in_cycle: bool,
    /// A message was handled since the last ReadyForQuery: an implicit transaction (extended
    /// protocol before its Sync, COPY data, skipping to Sync) is open.
    cycle_open: bool,
    flush_requested: Cell<bool>,
    /// The bytes being handled came in while the connection waited for them: the first
    /// statement they start may share its driver turn's clock read ([`StatementClock`]).
    fresh_read: Cell<bool>,
    /// The message being handled is followed by a Sync already received ([`Cx::sync_follows`]).
    sync_next: bool,
}

/// Borrow the disjoint pieces of a connection an engine call needs.
macro_rules! cx {
    ($self:ident, $out:expr) => {
        cx!($self, $out, None)
    };
    ($self:ident, $out:expr, $client:expr) => {
        Cx {
            session: &mut $self.session,
            out: $out,
            arena: &$self.arena,
            tx: &mut $self.tx,
            cancel: &$self.cancel,
            conn: &$self.info,
            statements: &mut $self.statements,
            close_all_portals: &mut $self.close_all_portals,
            copy_in: &mut $self.copy_in_started,
            client: $client,
            clock: StatementClock::new(&$self.fresh_read),
            sync_follows: false,
        }
    };
}

enum Flow {
    Continue,
    Terminate,
}

impl<E: Engine> Conn<E> {
    async fn run<S: AsyncRead + AsyncWrite + Unpin>(
        mut self,
        stream: &mut S,
        rbuf: &mut ReadBuf,
        out: Vec<u8>,
    ) -> End {
        let end = self.serve_queries(stream, rbuf, out).await;
        self.shard.engine.close_session(&mut self.session);
        end
    }

    async fn serve_queries<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        rbuf: &mut ReadBuf,
        mut out: Vec<u8>,
    ) -> End {
        let max = self.shard.config.max_message_bytes;
        // With metrics on: when the bytes being handled arrived (the first flush after it
        // records receive → first byte), and where the next statement's time starts (the
        // receive, or on glommio's sockets the end of the statement before it). On the
        // io_uring path one clock read per driver turn times everything of the turn
        // (`ShardMetrics::note_turn`; STYLE.md: observability without cost).
        let mut received: Option<Instant> = None;
        let mut mark: Option<Instant> = None;
        loop {
            // Handle every complete message already received, then flush once.
            loop {
                // PostgreSQL rejects an unknown message type on its tag byte alone, before
                // waiting for a body that may never come.
                if let Some(&tag) = rbuf.data().first() {
                    if !frontend::is_frontend_tag(tag) {
                        let e = PgError::fatal(
                            SqlState::PROTOCOL_VIOLATION,
                            format!("invalid frontend message type {tag}"),
                        );
                        return self.fatal(stream, &mut out, e).await;
                    }
                }
                let (frame, n) = match split_frame(rbuf.data(), max) {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => return self.fatal(stream, &mut out, e).await,
                };
                let statement = match frame.tag {
                    _ if self.skip_until_sync || self.copy_in.is_some() => None,
                    b'Q' => Some(Protocol::Simple),
                    b'E' => Some(Protocol::Extended),
                    _ => None,
                };
                let reply_from = out.len();
                self.cycle_open = true;
                let flow = match FrontendMessage::parse(frame) {
                    Ok(msg) => {
                        self.sync_next = rbuf.data().get(n) == Some(&b'S');
                        let flow = self.handle(msg, &mut out, stream).await;
                        // Only the first statement of the bytes waited for may share the
                        // turn's clock read: once anything that runs SQL has (Query, Execute,
                        // Sync, COPY, FunctionCall), whether it took a time or not (COMMIT,
                        // SET, an index build), the next statement reads the clock itself.
                        if !matches!(frame.tag, b'P' | b'B' | b'D' | b'C' | b'H') {
                            self.fresh_read.set(false);
                        }
                        if let (Some(protocol), Some(since)) = (statement, mark) {
                            let kind = kind_of_reply(&out, reply_from);
                            let next = self.shard.metrics.statement_ended(since, protocol, kind);
                            mark = Some(next);
                        }
                        flow
                    }
                    Err(e) if e.severity == Severity::Fatal => {
                        return self.fatal(stream, &mut out, e).await
                    }
                    Err(e) if frame.tag == b'Q' && !self.skip_until_sync => {
                        // A malformed simple Query fails like any other simple Query: error,
                        // then ReadyForQuery. Only extended-protocol errors skip to Sync.
                        self.fail_cycle(&mut out, e).await;
                        Ok(Flow::Continue)
                    }
                    Err(e) if frame.tag == b'S' => {
                        // A Sync with a body is still a Sync, as PostgreSQL reads it: it ends
                        // any skip, and its error is followed by ReadyForQuery.
                        self.skip_until_sync = false;
                        self.fail_cycle(&mut out, e).await;
                        Ok(Flow::Continue)
                    }
                    // So is a Terminate with one: PostgreSQL never reads its body.
                    Err(_) if frame.tag == b'X' => Ok(Flow::Terminate),
                    Err(e) => {
                        if !self.skip_until_sync {
                            self.fail_extended(&mut out, e);
                        }
                        Ok(Flow::Continue)
                    }
                };
                rbuf.consume(n);
                match flow {
                    Ok(Flow::Continue) => {}
                    Ok(Flow::Terminate) => {
                        let _ = flush(stream, &mut out).await;
                        return End::Terminated;
                    }
                    Err(e) => return self.fatal(stream, &mut out, e).await,
                }
                if out.len() >= FLUSH_BYTES || self.flush_requested.replace(false) {
                    self.note_flush(&mut received, mark, &out);
                    if let Err(e) = flush(stream, &mut out).await {
                        return End::Io(e);
                    }
                }
            }
            self.note_flush(&mut received, mark, &out);
            if let Err(e) = flush(stream, &mut out).await {
                return End::Io(e);
            }
            if out.capacity() > SHRINK_ABOVE_BYTES {
                out = Vec::with_capacity(READ_BUF_BYTES);
            }
            rbuf.shrink_if_idle();
            let want = frame_bytes_needed(rbuf.data()).unwrap_or(5);
            let idle_limit_ms = match self.tx {
                TransactionStatus::Idle => 0,
                // Mid-cycle (no ReadyForQuery sent since the client's last message), the
                // client is not idle in a transaction, as PostgreSQL counts it: an implicit
                // transaction the extended protocol keeps open until its Sync.
                _ if self.cycle_open => 0,
                _ => {
                    self.shard
                        .engine
                        .timeouts(&self.session)
                        .idle_in_transaction_ms
                }
            };
            let buffered = rbuf.data().len();
            // A read that finds its bytes already there (they came while a statement of this
            // connection ran) returns without a driver turn; one that waits for them sees one
            // (see `fresh_read`).
            let turn = crate::time::turn();
            let read = rbuf.fill(stream, want);
            let waited = if self.tx == TransactionStatus::Idle && !self.cycle_open {
                // Outside any transaction the engine may have notifications for the client
                // meanwhile. Asked first, so what it holds goes out before more statements
                // run (and a session past its limit hears so at once).
                let (engine, session) = (&self.shard.engine, &mut self.session);
                let engine = async { Err(engine.idle(session, &mut out).await) };
                or(engine, async { Ok(Some(read.await)) }).await
            } else {
                Ok(limits::unless_idle_too_long(read, idle_limit_ms).await)
            };
            let waited = match waited {
                Ok(read) => read,
                // Written to the client at the top of the loop, which then waits again.
                Err(Ok(())) => continue,
                Err(Err(e)) => return self.fatal(stream, &mut out, e).await,
            };
            match waited {
                Some(Ok(true)) => {
                    self.fresh_read.set(crate::time::turn() != turn);
                    let metrics = &self.shard.metrics;
                    metrics.record_bytes_in(rbuf.data().len() - buffered);
                    if received.is_none() {
                        received = metrics.received();
                        mark = received;
                    }
                }
                Some(Ok(false)) => return End::ClientClosed,
                Some(Err(e)) => return End::Io(e),
                None => {
                    let e = limits::idle_in_transaction_timeout();
                    return self.fatal(stream, &mut out, e).await;
                }
            }
        }
    }

    /// Reply bytes are about to be handed to the socket: count them, and, if this is the
    /// first flush since the request bytes arrived, the time since then. `last` is the end of
    /// the last statement (or the receive itself); a flush right after a statement uses it
    /// instead of reading the clock again.
    fn note_flush(&self, received: &mut Option<Instant>, last: Option<Instant>, out: &[u8]) {
        if out.is_empty() {
            return;
        }
        let metrics = &self.shard.metrics;
        metrics.record_bytes_out(out.len());
        if let Some(at) = received.take() {
            metrics.first_byte_sent(at, last);
        }
    }

    /// An ErrorResponse goes to the client: counted by SQLSTATE and logged (one line per
    /// error; successful statements log nothing).
    fn note_error(&self, e: &PgError) {
        self.shard.metrics.record_error(e.code.0);
        log::info!(
            "shard {} pid {}: ERROR {}: {}",
            self.shard.id,
            self.info.process_id,
            String::from_utf8_lossy(&e.code.0),
            e.message
        );
    }

    async fn fatal<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        out: &mut Vec<u8>,
        e: PgError,
    ) -> End {
        let e = PgError {
            severity: Severity::Fatal,
            ..e
        };
        backend::write_error(out, &e);
        let _ = flush(stream, out).await;
        End::Fatal(e)
    }

    /// An error in an extended-protocol message: report it, then ignore messages until Sync.
    fn fail_extended(&mut self, out: &mut Vec<u8>, e: PgError) {
        self.note_error(&e);
        backend::write_error(out, &e);
        self.error_in_cycle = true;
        self.skip_until_sync = true;
        if self.tx == TransactionStatus::InBlock {
            self.tx = TransactionStatus::Failed;
        }
    }

    /// A message while COPY FROM STDIN runs: data accumulates until CopyDone or CopyFail.
    async fn handle_copy_in(
        &mut self,
        msg: FrontendMessage<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Flow, PgError> {
        let data = match msg {
            FrontendMessage::CopyData { data } => {
                let buf = self.copy_in.as_mut().expect("in COPY");
                if buf.len() + data.len() > MAX_COPY_IN_BYTES {
                    self.copy_in = None;
                    let e = PgError::new(
                        SqlState::PROGRAM_LIMIT_EXCEEDED,
                        format!("COPY FROM STDIN data exceeds ringwire's limit of {MAX_COPY_IN_BYTES} bytes"),
                    );
                    let _ = self
                        .shard
                        .engine
                        .copy_in_done(&mut cx!(self, out), Err(e.clone()))
                        .await;
                    self.fail_simple(out, e);
                    return Ok(Flow::Continue);
                }
                buf.extend_from_slice(data);
                return Ok(Flow::Continue);
            }
            // PostgreSQL ignores Flush and Sync during COPY FROM STDIN.
            FrontendMessage::Flush | FrontendMessage::Sync => return Ok(Flow::Continue),
            FrontendMessage::CopyDone => Ok(self.copy_in.take().expect("in COPY")),
            FrontendMessage::CopyFail { message } => {
                self.copy_in = None;
                Err(PgError::new(
                    SqlState::QUERY_CANCELED,
                    format!("COPY from stdin failed: {message}"),
                ))
            }
            FrontendMessage::Terminate => return Ok(Flow::Terminate),
            other => {
                self.copy_in = None;
                Err(PgError::new(
                    SqlState::PROTOCOL_VIOLATION,
                    format!(
                        "unexpected message type 0x{:02X} during COPY from stdin",
                        other.tag()
                    ),
                ))
            }
        };
        let failed = data.is_err();
        match self
            .shard
            .engine
            .copy_in_done(&mut cx!(self, out), data)
            .await
        {
            Ok(()) if !failed => self.ready_for_query(out),
            Ok(()) => unreachable!("copy_in_done returns the failure it was given"),
            Err(e) if e.severity == Severity::Fatal => return Err(e),
            Err(e) => self.fail_simple(out, e),
        }
        Ok(Flow::Continue)
    }

    /// [`Conn::fail_simple`] for an error that ends the cycle without the engine's Query or
    /// Sync: the engine still ends an implicit transaction the extended protocol left open
    /// (rolled back, as the error aborts it; [`Engine::sync`] after the block is marked
    /// failed), so the client is not left in a block it never opened.
    async fn fail_cycle(&mut self, out: &mut Vec<u8>, e: PgError) {
        if self.tx == TransactionStatus::InBlock {
            self.tx = TransactionStatus::Failed;
        }
        let shard = self.shard.clone();
        if let Err(ended) = shard.engine.sync(&mut cx!(self, out)).await {
            log::warn!("an implicit transaction failed to end: {}", ended.message);
        }
        self.fail_simple(out, e);
    }

    /// An error ending a simple-protocol cycle: report it, fail an open transaction block,
    /// and be ready for the next query.
    fn fail_simple(&mut self, out: &mut Vec<u8>, e: PgError) {
        self.note_error(&e);
        backend::write_error(out, &e);
        self.error_in_cycle = true;
        if self.tx == TransactionStatus::InBlock {
            self.tx = TransactionStatus::Failed;
        }
        self.ready_for_query(out);
    }

    /// End of a query cycle: ReadyForQuery, and per-query state is dropped.
    fn ready_for_query(&mut self, out: &mut Vec<u8>) {
        if self.tx == TransactionStatus::Idle || self.close_all_portals {
            // Portals live until the end of their transaction.
            self.portals.clear();
            self.close_all_portals = false;
        }
        self.shard
            .engine
            .end_of_cycle(&mut self.session, self.tx, self.error_in_cycle, out);
        self.error_in_cycle = false;
        self.cycle_open = false;
        backend::write_ready_for_query(out, self.tx);
        self.arena.reset();
    }

    /// Handle one message. `Err` is fatal for the connection. `stream` is lent to the engine
    /// for statements (Query, Execute), which may send part of a large result early
    /// ([`Cx::flush_out`]); everything else only appends to `out`.
    async fn handle<S: AsyncWrite + Unpin>(
        &mut self,
        msg: FrontendMessage<'_>,
        out: &mut Vec<u8>,
        stream: &mut S,
    ) -> Result<Flow, PgError> {
        if self.skip_until_sync {
            match msg {
                FrontendMessage::Sync => {}
                // Everything else is discarded until Sync, as PostgreSQL does.
                _ => return Ok(Flow::Continue),
            }
        }
        if let (Some(canned), FrontendMessage::Query { .. }) = (&self.shard.wire_floor_reply, &msg)
        {
            // Benchmark floor: same shards, framing and parsing, no SQL (see ServerConfig).
            out.extend_from_slice(canned);
            return Ok(Flow::Continue);
        }
        if self.copy_in.is_some() {
            return self.handle_copy_in(msg, out).await;
        }
        let engine = &self.shard.engine;
        match msg {
            FrontendMessage::Query { sql } => {
                // A simple Query destroys the unnamed statement and portal.
                self.statements.remove("");
                if !self.portals.is_empty() {
                    self.portals.remove("");
                }
                self.cancel.reset();
                let timeout_ms = engine.timeouts(&self.session).statement_ms;
                let cancel = &self.cancel;
                let client = ClientOut::new(stream, Some(&self.shard.metrics));
                let mut cx = cx!(self, out, Some(client));
                // Pinned here and passed by reference: the engine's future is kilobytes, and
                // moving it into the timeout wrapper's state cost a memcpy of it per query.
                let result = {
                    let query = std::pin::pin!(engine.simple_query(&mut cx, sql));
                    limits::with_statement_timeout(query, timeout_ms, cancel).await
                };
                match result {
                    // COPY FROM STDIN: ReadyForQuery waits until the data is in.
                    Ok(()) if self.copy_in_started => {
                        self.copy_in_started = false;
                        self.copy_in = Some(Vec::new());
                    }
                    Ok(()) => self.ready_for_query(out),
                    Err(e) if e.severity == Severity::Fatal => return Err(e),
                    Err(e) => self.fail_simple(out, e),
                }
            }
            FrontendMessage::Parse {
                name,
                sql,
                param_types,
            } => {
                if !name.is_empty() && self.statements.contains(name) {
                    let e = PgError::new(
                        SqlState::DUPLICATE_PREPARED_STATEMENT,
                        format!("prepared statement \"{name}\" already exists"),
                    );
                    self.fail_extended(out, e);
                    return Ok(Flow::Continue);
                }
                match engine.parse(&mut cx!(self, out), sql, param_types) {
                    Ok(statement) => {
                        self.statements.insert(name, statement);
                        backend::write_parse_complete(out);
                    }
                    Err(e) => self.fail_extended(out, e),
                }
            }
            FrontendMessage::Bind(bind) => {
                let Some(statement) = self.statements.get(bind.statement).cloned() else {
                    self.fail_extended(out, no_statement(bind.statement));
                    return Ok(Flow::Continue);
                };
                if !bind.portal.is_empty() && self.portals.contains_key(bind.portal) {
                    let e = PgError::new(
                        SqlState::DUPLICATE_CURSOR,
                        format!("portal \"{}\" already exists", bind.portal),
                    );
                    self.fail_extended(out, e);
                    return Ok(Flow::Continue);
                }
                match engine.bind(&mut cx!(self, out), &statement, &bind) {
                    Ok(portal) => {
                        self.portals.insert(bind.portal.into(), portal);
                        backend::write_bind_complete(out);
                    }
                    Err(e) => self.fail_extended(out, e),
                }
            }
            FrontendMessage::Describe {
                target: Target::Statement,
                name,
            } => match self.statements.get(name) {
                Some(statement) => engine.describe_statement(statement, &self.arena, out),
                None => self.fail_extended(out, no_statement(name)),
            },
            FrontendMessage::Describe {
                target: Target::Portal,
                name,
            } => match self.portals.get(name) {
                Some(portal) => engine.describe_portal(portal, &self.arena, out),
                None => self.fail_extended(out, no_portal(name)),
            },
            FrontendMessage::Execute { portal, max_rows } => {
                let Some(p) = self.portals.get_mut(portal) else {
                    self.fail_extended(out, no_portal(portal));
                    return Ok(Flow::Continue);
                };
                self.cancel.reset();
                let timeout_ms = engine.timeouts(&self.session).statement_ms;
                let max_rows = if max_rows <= 0 { 0 } else { max_rows as u32 };
                let mut cx = Cx {
                    session: &mut self.session,
                    out,
                    arena: &self.arena,
                    tx: &mut self.tx,
                    cancel: &self.cancel,
                    conn: &self.info,
                    statements: &mut self.statements,
                    close_all_portals: &mut self.close_all_portals,
                    copy_in: &mut self.copy_in_started,
                    client: Some(ClientOut::new(stream, Some(&self.shard.metrics))),
                    clock: StatementClock::new(&self.fresh_read),
                    sync_follows: self.sync_next,
                };
                let result = {
                    let execution = std::pin::pin!(engine.execute(&mut cx, p, max_rows));
                    limits::with_statement_timeout(execution, timeout_ms, &self.cancel).await
                };
                match result {
                    Ok(Execution::Complete) => {}
                    Ok(Execution::Suspended) => backend::write_portal_suspended(out),
                    Err(e) if e.severity == Severity::Fatal => return Err(e),
                    Err(e) => self.fail_extended(out, e),
                }
            }
            FrontendMessage::Close { target, name } => {
                match target {
                    Target::Statement => {
                        self.statements.remove(name);
                    }
                    Target::Portal => {
                        self.portals.remove(name);
                    }
                }
                backend::write_close_complete(out);
            }
            FrontendMessage::Sync => {
                self.skip_until_sync = false;
                match engine.sync(&mut cx!(self, out)).await {
                    Ok(()) => self.ready_for_query(out),
                    Err(e) if e.severity == Severity::Fatal => return Err(e),
                    Err(e) => self.fail_simple(out, e),
                }
            }
            FrontendMessage::Flush => self.flush_requested.set(true),
            FrontendMessage::Terminate => return Ok(Flow::Terminate),
            // Outside COPY these are ignored, per the protocol.
            FrontendMessage::CopyData { .. }
            | FrontendMessage::CopyDone
            | FrontendMessage::CopyFail { .. } => {}
            FrontendMessage::FunctionCall => {
                let e = PgError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "fast-path function calls are not supported",
                );
                self.fail_cycle(out, e).await;
            }
            FrontendMessage::Password { .. } => {
                return Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    "unexpected password message outside authentication",
                ));
            }
        }
        Ok(Flow::Continue)
    }
}

fn no_portal(name: &str) -> PgError {
    if name.is_empty() {
        PgError::new(SqlState::INVALID_CURSOR_NAME, "portal \"\" does not exist")
    } else {
        PgError::new(
            SqlState::INVALID_CURSOR_NAME,
            format!("portal \"{name}\" does not exist"),
        )
    }
}

pub(crate) async fn flush<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let r = stream.write_all(out).await;
    out.clear();
    r?;
    // Over TLS the last record may still sit in rustls; plaintext streams return at once.
    stream.flush().await
}

/// The FATAL for startup parameter `replication=mode`, None where it asks for a plain
/// session: ringwire is no WAL sender, and a value PostgreSQL would not read gets its error.
fn refuse_replication(mode: &str) -> Option<PgError> {
    match replication_mode(mode) {
        Some(false) => None,
        Some(true) => Some(
            PgError::fatal(
                SqlState::FEATURE_NOT_SUPPORTED,
                "ringwire does not serve replication connections",
            )
            .with_hint("Connect to the PostgreSQL server itself for replication."),
        ),
        None => Some(
            PgError::fatal(
                SqlState(*b"22023"),
                format!("invalid value for parameter \"replication\": \"{mode}\""),
            )
            .with_hint("Valid values are: \"false\", 0, \"true\", 1, \"database\"."),
        ),
    }
}

/// The startup parameter `replication` as PostgreSQL reads it: a Boolean (any unique prefix
/// of true/false/yes/no, on/off, 1/0, in any case) or `database` (logical replication).
/// Some(true) for a replication connection of either kind, None for anything else.
fn replication_mode(value: &str) -> Option<bool> {
    if value == "database" {
        return Some(true);
    }
    let v = value.to_ascii_lowercase();
    let prefix_of = |word: &str, min: usize| v.len() >= min && word.starts_with(v.as_str());
    if prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) || v == "1" {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || v == "0" {
        Some(false)
    } else {
        None
    }
}
