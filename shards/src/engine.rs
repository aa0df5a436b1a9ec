//! The boundary between the connection state machine (this crate) and whatever answers SQL
//! (the `ringwire` binary's engine). The state machine owns the protocol — startup, the
//! extended-protocol bookkeeping of statements and portals, error recovery until Sync,
//! ReadyForQuery — and calls an [`Engine`] for everything that needs to understand a statement.
//!
//! Engines are per shard and never `Send`: every call happens on the shard's own thread, so an
//! engine keeps its state in `Rc`/`RefCell` (STYLE.md, thread-per-core discipline).

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bumpalo::Bump;
use protocol::backend::TransactionStatus;
use protocol::frontend::{Bind, Oids, StartupParams};
use protocol::{PgError, SqlState};

/// What the client asked for at startup, after authentication.
pub struct SessionStart<'a> {
    pub user: &'a str,
    pub database: &'a str,
    /// Every startup parameter, `user` and `database` included.
    pub params: StartupParams<'a>,
    pub process_id: i32,
    pub shard_id: usize,
    /// What the client's authentication left to log in elsewhere as this user (upstream
    /// mode); the embedded engine ignores it.
    pub credential: &'a crate::auth::Credential,
}

/// Identity of a connection, fixed at startup.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub user: String,
    pub database: String,
    pub process_id: i32,
    pub shard_id: usize,
}

/// How an Execute ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// CommandComplete was written.
    Complete,
    /// `max_rows` rows were written and more remain: the state machine writes PortalSuspended.
    Suspended,
}

/// Named prepared statements of one connection. SQL `DEALLOCATE` and protocol-level Close share
/// this namespace, as in PostgreSQL. The unnamed statement is stored under "".
pub struct Statements<S> {
    map: HashMap<Box<str>, Rc<S>>,
}

impl<S> Default for Statements<S> {
    fn default() -> Self {
        Statements {
            map: HashMap::new(),
        }
    }
}

impl<S> Statements<S> {
    pub fn get(&self, name: &str) -> Option<&Rc<S>> {
        self.map.get(name)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    pub fn insert(&mut self, name: &str, statement: Rc<S>) {
        self.map.insert(name.into(), statement);
    }

    pub fn remove(&mut self, name: &str) -> bool {
        // Every simple Query removes the unnamed statement; most connections that send them
        // have none, and std's map would hash the name anyway.
        !self.map.is_empty() && self.map.remove(name).is_some()
    }

    /// `DEALLOCATE ALL` / `DISCARD ALL`: drop the named statements (the unnamed one too).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Everything an engine call may touch besides its own per-session state.
pub struct Cx<'a, E: Engine + ?Sized> {
    pub session: &'a mut E::Session,
    /// The connection's write buffer: append backend messages here.
    pub out: &'a mut Vec<u8>,
    /// Per-query scratch memory, reset after each ReadyForQuery.
    pub arena: &'a Bump,
    /// The transaction status ReadyForQuery will report; the engine moves it on
    /// BEGIN/COMMIT/ROLLBACK, the state machine sets `Failed` on an error inside a block.
    pub tx: &'a mut TransactionStatus,
    pub cancel: &'a CancelToken,
    pub conn: &'a ConnInfo,
    pub statements: &'a mut Statements<E::Statement>,
    /// Set by `DISCARD ALL` / `CLOSE ALL`: the state machine drops every portal afterwards.
    pub close_all_portals: &'a mut bool,
    /// Set by a simple Query that wrote CopyInResponse: the state machine collects CopyData
    /// until CopyDone/CopyFail, then calls [`Engine::copy_in_done`].
    pub copy_in: &'a mut bool,
    /// The connection's socket, lent to a statement (simple Query, Execute) so that a large
    /// result goes out in bounded pieces: [`Cx::flush_out`]. None where the state machine
    /// cannot lend it (COPY FROM's end, Parse, Bind); the statement then buffers.
    pub client: Option<ClientOut<'a>>,
    /// When a statement starting now started (its `statement_timestamp()`).
    pub clock: crate::time::StatementClock<'a>,
    /// An Execute whose next message, already received, is a Sync: the implicit transaction
    /// it runs in ends right after it (an engine may commit it in one step).
    pub sync_follows: bool,
}

/// The connection's socket as a statement sees it: it can only write whole messages already
/// in `out` (see [`Cx::flush_out`]).
pub struct ClientOut<'a> {
    stream: &'a mut (dyn futures_lite::AsyncWrite + Unpin + 'a),
    metrics: Option<&'a crate::metrics::ShardMetrics>,
}

impl<'a> ClientOut<'a> {
    pub fn new(
        stream: &'a mut (dyn futures_lite::AsyncWrite + Unpin + 'a),
        metrics: Option<&'a crate::metrics::ShardMetrics>,
    ) -> ClientOut<'a> {
        ClientOut { stream, metrics }
    }

    /// The same socket for a shorter borrow (to build a `Cx` for an inner engine).
    pub fn reborrow(&mut self) -> ClientOut<'_> {
        ClientOut {
            stream: &mut *self.stream,
            metrics: self.metrics,
        }
    }
}

impl<E: Engine + ?Sized> Cx<'_, E> {
    /// Whether [`Cx::flush_out`] can send anything (the state machine lent the socket).
    pub fn can_flush(&self) -> bool {
        self.client.is_some()
    }

    /// Send everything in `out` to the client now and empty it, waiting while the client does
    /// not read (the socket path bounds what it buffers: that wait is the backpressure a
    /// statement producing a large result in pieces relies on). `out` must hold only whole
    /// messages. Ok(false): no socket was lent, `out` is untouched. A failed write (the client
    /// went away) is a FATAL 08006, which ends the connection.
    pub async fn flush_out(&mut self) -> Result<bool, PgError> {
        use futures_lite::AsyncWriteExt;
        let Some(client) = self.client.as_mut() else {
            return Ok(false);
        };
        if self.out.is_empty() {
            return Ok(true);
        }
        if let Some(m) = client.metrics {
            m.record_bytes_out(self.out.len());
        }
        let written = client.stream.write_all(self.out).await;
        self.out.clear();
        let flushed = match written {
            Ok(()) => client.stream.flush().await,
            Err(e) => Err(e),
        };
        flushed.map(|()| true).map_err(|e| {
            PgError::fatal(
                SqlState::CONNECTION_FAILURE,
                format!("could not send data to client: {e}"),
            )
        })
    }
}

/// Per-shard SQL engine. `async fn` in this trait is deliberate: futures stay on the shard and
/// are never `Send`.
#[allow(async_fn_in_trait)]
pub trait Engine: 'static {
    type Session: 'static;
    type Statement: 'static;
    type Portal: 'static;
    /// What engines on different shards send each other over the [`crate::runtime::Mesh`].
    type Message: Send + 'static;

    /// A message from another shard's engine (or this shard's own, sent through the mesh).
    /// Runs on the shard's mesh task: long work belongs in a spawned task.
    fn on_message(&self, msg: Self::Message);

    /// Called after authentication succeeds; applies startup parameters (`application_name`,
    /// `options=-c ...`, `TimeZone`...). An error is sent as FATAL and the connection closes.
    fn open_session(&self, start: &SessionStart<'_>) -> Result<Self::Session, PgError>;

    /// Called after `open_session`, before AuthenticationOk is sent: an engine that must
    /// reach something on the client's behalf first (upstream mode logs in upstream as the
    /// client's user) does it here, so a refusal is a FATAL at login with its SQLSTATE, not
    /// an error on the first statement. The startup timeout covers it.
    async fn admit(&self, session: &mut Self::Session) -> Result<(), PgError> {
        let _ = session;
        Ok(())
    }

    /// The stored secret of `user`, who is not in the users file, for a password method to
    /// check the client against (upstream mode's `--upstream-auth-query` reads it from the
    /// upstream server, as PgBouncer's `auth_query` does). `Ok(None)`: no such user (or no
    /// password), which fails as any unknown user does; an error is sent as FATAL.
    async fn lookup_secret(&self, user: &str) -> Result<Option<crate::auth::Secret>, PgError> {
        let _ = user;
        Ok(None)
    }

    /// The connection ended (for any reason): release what the session holds elsewhere.
    fn close_session(&self, session: &mut Self::Session);

    /// Append the ParameterStatus messages sent at startup.
    fn write_startup_parameters(&self, session: &Self::Session, out: &mut Vec<u8>);

    /// Run a simple-protocol Query string (one or more statements), writing every reply up to
    /// but excluding ReadyForQuery. Returns the error that stopped it, if any; the replies of the
    /// statements before it stay in `cx.out`.
    async fn simple_query(&self, cx: &mut Cx<'_, Self>, sql: &str) -> Result<(), PgError>;

    /// The session's `statement_timeout` and `idle_in_transaction_session_timeout`, read
    /// before every statement and every wait for the client inside a transaction: keep it a
    /// field read. The default is no limits. In relay mode only `idle_in_transaction_ms` is
    /// read, before every wait for the client whatever the transaction state: the engine
    /// answers 0 where the session may idle.
    fn timeouts(&self, _session: &Self::Session) -> crate::limits::Timeouts {
        crate::limits::Timeouts::default()
    }

    /// Plan a Parse message. The statement is shared: an engine may hand the same one to many
    /// connections (a plan cache), so it is immutable once built.
    fn parse(
        &self,
        cx: &mut Cx<'_, Self>,
        sql: &str,
        param_types: Oids<'_>,
    ) -> Result<Rc<Self::Statement>, PgError>;

    /// Append ParameterDescription and then RowDescription (or NoData).
    fn describe_statement(&self, statement: &Self::Statement, arena: &Bump, out: &mut Vec<u8>);

    fn bind(
        &self,
        cx: &mut Cx<'_, Self>,
        statement: &Rc<Self::Statement>,
        bind: &Bind<'_>,
    ) -> Result<Self::Portal, PgError>;

    /// Append RowDescription (with the result formats chosen at Bind) or NoData.
    fn describe_portal(&self, portal: &Self::Portal, arena: &Bump, out: &mut Vec<u8>);

    /// COPY FROM STDIN finished: `data` is everything the client sent, or the error that ended
    /// it (CopyFail, a protocol violation, the size limit), which the engine must return after
    /// cleaning up. On success the engine writes CommandComplete.
    async fn copy_in_done(
        &self,
        cx: &mut Cx<'_, Self>,
        data: Result<Vec<u8>, PgError>,
    ) -> Result<(), PgError>;

    /// A Sync: the extended protocol's implicit transaction ends here (commits, or after an
    /// error rolls back), before [`Engine::end_of_cycle`] and ReadyForQuery. An error is
    /// reported before the ReadyForQuery.
    async fn sync(&self, _cx: &mut Cx<'_, Self>) -> Result<(), PgError> {
        Ok(())
    }

    /// Called just before every ReadyForQuery. `tx` is the status about to be reported;
    /// `error_in_cycle` says whether an error was reported since the last ReadyForQuery (an
    /// implicit transaction then rolls back). The engine writes any ParameterStatus messages
    /// its settings changes owe the client.
    fn end_of_cycle(
        &self,
        session: &mut Self::Session,
        tx: TransactionStatus,
        error_in_cycle: bool,
        out: &mut Vec<u8>,
    );

    /// Run a portal for at most `max_rows` rows (0 = all), writing DataRows and, when it
    /// finishes, CommandComplete (or EmptyQueryResponse for an empty statement).
    async fn execute(
        &self,
        cx: &mut Cx<'_, Self>,
        portal: &mut Self::Portal,
        max_rows: u32,
    ) -> Result<Execution, PgError>;

    /// Upstream mode (docs/ARCHITECTURE.md, "Upstream mode"): an engine that returns true
    /// relays each connection's messages to an upstream server after startup, through
    /// [`Engine::relay`], and none of the message-level calls above except `open_session`,
    /// `close_session` and `write_startup_parameters` are made for its connections.
    fn relays(&self) -> bool {
        false
    }

    /// Relay mode only: `frames` is every complete message the client has sent that was not
    /// relayed yet (headers checked against `--max-message-bytes`, Terminate excluded). The
    /// engine forwards them and appends to `out` every reply the client is owed for them that
    /// can arrive without more input from the client, in order; it may write `out` to `client`
    /// on its own when a large result piles up. Returning leaves the rest of `out` for the
    /// connection to flush. `Err` ends the connection with that FATAL error.
    async fn relay(
        &self,
        session: &mut Self::Session,
        frames: &[u8],
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn futures_lite::AsyncWrite + Unpin),
    ) -> Result<(), PgError> {
        let _ = (session, frames, cancel, out, client);
        unreachable!("relay is only called for engines whose relays() is true")
    }

    /// Raced against the client's next bytes each time the connection waits for them (and
    /// dropped when they come first, so it must be cancel safe): in relay mode at every wait,
    /// otherwise only outside a transaction block, where PostgreSQL passes on notifications.
    /// An engine with something to tell an idle client — a notification from another session,
    /// or what an upstream connection held between batches sends unasked (notices, parameter
    /// changes) — appends it to `out` and returns Ok; the connection writes it to the client
    /// and waits again. `Err` ends the connection with that FATAL. The default never
    /// completes. It is polled once per wait, so a session with nothing to say should find
    /// out in a field read.
    async fn idle(&self, session: &mut Self::Session, out: &mut Vec<u8>) -> Result<(), PgError> {
        let _ = (session, out);
        std::future::pending().await
    }
}

/// Cancellation of the statement a connection is running, set from a CancelRequest that may
/// have arrived on another shard (and crossed over the cancel channel).
#[derive(Default)]
pub struct CancelToken {
    cancelled: Cell<bool>,
    /// The cancel came from `statement_timeout`, not a CancelRequest: a different message.
    timed_out: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

impl CancelToken {
    pub fn cancel(&self) {
        self.cancelled.set(true);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Cancel because `statement_timeout` elapsed (see `crate::limits`).
    pub fn cancel_for_timeout(&self) {
        self.timed_out.set(true);
        self.cancel();
    }

    /// Forget a cancel that arrived while no statement was running (PostgreSQL ignores those).
    pub fn reset(&self) {
        self.cancelled.set(false);
        self.timed_out.set(false);
    }

    /// The error a cancelled statement ends with: 57014, with the reason in the message.
    fn error(&self) -> PgError {
        if self.timed_out.get() {
            crate::limits::statement_timeout()
        } else {
            query_canceled()
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.get()
    }

    /// Err(57014) if the running statement was cancelled.
    pub fn check(&self) -> Result<(), PgError> {
        if self.cancelled.get() {
            Err(self.error())
        } else {
            Ok(())
        }
    }

    /// Completes when a cancel arrives (at once if one already has). For code that waits on
    /// something else, raced against it; one waiter at a time.
    pub fn cancelled(&self) -> Cancelled<'_> {
        Cancelled { token: self }
    }

    /// Sleep for `duration`, ending early with 57014 when the statement is cancelled.
    pub async fn sleep(&self, duration: Duration) -> Result<(), PgError> {
        self.check()?;
        CancellableSleep {
            timer: crate::time::sleep(duration),
            token: self,
        }
        .await
    }
}

/// 26000 for a Bind or Describe that names a statement the session does not have, worded as
/// PostgreSQL words it (the state machine and upstream mode both answer it themselves).
pub fn no_statement(name: &str) -> PgError {
    if name.is_empty() {
        PgError::new(
            SqlState::INVALID_SQL_STATEMENT_NAME,
            "unnamed prepared statement does not exist",
        )
    } else {
        PgError::new(
            SqlState::INVALID_SQL_STATEMENT_NAME,
            format!("prepared statement \"{name}\" does not exist"),
        )
    }
}

pub fn query_canceled() -> PgError {
    PgError::new(
        SqlState::QUERY_CANCELED,
        "canceling statement due to user request",
    )
}

/// See [`CancelToken::cancelled`].
pub struct Cancelled<'a> {
    token: &'a CancelToken,
}

impl Future for Cancelled<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        self.token.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

struct CancellableSleep<'a> {
    timer: crate::time::Sleep,
    token: &'a CancelToken,
}

impl Future for CancellableSleep<'_> {
    type Output = Result<(), PgError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.token.is_cancelled() {
            return Poll::Ready(Err(self.token.error()));
        }
        self.token.waker.set(Some(cx.waker().clone()));
        match Pin::new(&mut self.timer).poll(cx) {
            Poll::Ready(_) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}
