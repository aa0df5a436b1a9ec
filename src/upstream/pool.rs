//! A shard's upstream connections and prepared-statement names.
//!
//! Each shard owns, per upstream host — the primary and each replica — one pool per
//! (user, database) the connections logged in as ([`PoolKey`]; no locks, no cross-core hop):
//! a connection opened for one key is only ever handed to clients of that key. A client
//! borrows a connection for a transaction (or for a batch of autocommit statements) and gives
//! it back on ReadyForQuery `I` with nothing outstanding. At most `pool_size_per_shard` are
//! open per key per host (PgBouncer's `pool_size`); a client that finds none free waits for
//! one of its key to come back (with `--upstream-max-connections`, also for a slot of the
//! host's share; see [`HostCap`]). Connections idle longer than the idle timeout are closed
//! (so a key nobody uses any more holds none). Statement names are per shard, shared by all
//! its pools (each connection knows which it has prepared).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures_lite::AsyncWriteExt;
use protocol::{frontend, PgError, SqlState};

use shards::auth::{Credential, Secret};
use shards::connect::{connect, ShardStream};
use shards::engine::{query_canceled, CancelToken};

use super::client::{login, simple_value, value_for, Handshake, Login, LoginError, ReplyBuf};
use super::pipe::{Lease, Pipe, SlowShapes};
use super::replica::{self, Notify, Replica};
use super::session::ClientStatement;
use super::{UpstreamConfig, UpstreamLogin, Upstreams};

/// ParameterStatus values a server reported at a login, shared by the sessions shown them.
pub type Parameters = Arc<Vec<(String, String)>>;

/// Whose connections a pool holds: the user and database they logged in as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub user: Rc<str>,
    pub database: Rc<str>,
}

/// A shard's pools for one upstream host, one per [`PoolKey`], made on first use. Entries
/// are never removed (one small struct per (user, database) ever seen on the shard); their
/// idle connections are closed by the idle timeout.
pub struct Pools {
    pub config: Arc<UpstreamConfig>,
    host: Host,
    by_key: RefCell<HashMap<PoolKey, Rc<Pool>>>,
    /// This shard's share of `--upstream-max-connections`, over every key.
    cap: Option<Rc<HostCap>>,
}

impl Pools {
    /// `cap`: at most this many connections to the host over every key (`None`: only
    /// `pool_size_per_shard` per key).
    fn new(config: Arc<UpstreamConfig>, host: Host, cap: Option<usize>) -> Pools {
        Pools {
            config,
            host,
            by_key: RefCell::new(HashMap::new()),
            cap: cap.map(|limit| {
                Rc::new(HostCap {
                    limit,
                    slots: Rc::default(),
                    idle_lists: RefCell::default(),
                })
            }),
        }
    }

    /// The pool of `key` (no allocation once it exists).
    pub fn get(&self, key: &PoolKey) -> Rc<Pool> {
        if let Some(pool) = self.by_key.borrow().get(key) {
            return pool.clone();
        }
        let pool = Rc::new(Pool::new(
            self.config.clone(),
            self.host,
            key.clone(),
            self.cap.clone(),
        ));
        if let Some(cap) = &self.cap {
            cap.idle_lists.borrow_mut().push(Rc::downgrade(&pool.idle));
        }
        self.by_key.borrow_mut().insert(key.clone(), pool.clone());
        pool
    }

    /// The host's connections over every (user, database), for `--metrics-listen`.
    pub fn stats(&self, role: &'static str) -> super::stats::HostStats {
        let mut total = super::stats::HostStats {
            role,
            address: self.config.hosts_text(),
            open: 0,
            idle: 0,
            waiting: 0,
        };
        for pool in self.by_key.borrow().values() {
            total.open += pool.slots.open.get();
            total.idle += pool.idle.borrow().len();
            total.waiting += pool.slots.waiters.borrow().len();
        }
        total
    }

    /// Close every idle connection of every key (the host failed).
    pub fn drop_idle(&self) {
        let pools: Vec<Rc<Pool>> = self.by_key.borrow().values().cloned().collect();
        for pool in pools {
            pool.drop_idle();
        }
    }
}

/// The pool key and credential a URL names (`--upstream-login url`).
fn url_login(config: &UpstreamConfig) -> (PoolKey, Rc<Credential>) {
    let key = PoolKey {
        user: config.user.as_str().into(),
        database: config.database.as_str().into(),
    };
    (key, Rc::new(super::client::url_credential(config)))
}

/// Take out of `idle` the connections `expired` picks, to be dropped by the caller once no
/// borrow is held (dropping one frees its slot and wakes a waiter, which looks at the list).
fn take_idle(
    idle: &RefCell<Vec<ServerConn>>,
    expired: impl Fn(&ServerConn) -> bool,
) -> Vec<ServerConn> {
    let mut idle = idle.borrow_mut();
    let (taken, kept) = std::mem::take(&mut *idle).into_iter().partition(expired);
    *idle = kept;
    taken
}

/// Which upstream host a connection talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Primary,
    /// Index into `--replica`s, in command-line order.
    Replica(usize),
}

/// Statements are keyed by what makes their plan: text, declared parameter types and the
/// session settings in effect (search_path changes what a name resolves to).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StatementKey {
    pub sql: Box<str>,
    pub param_types: Box<[u8]>,
    pub settings: u64,
}

pub struct ShardUpstream {
    /// The primary's.
    pub config: Arc<UpstreamConfig>,
    /// The server's startup ParameterStatus values (to the URL's user).
    pub parameters: Arc<Vec<(String, String)>>,
    primary: Pools,
    /// `--upstream-login`: as each client's user, or everyone as the URL's.
    pub login: UpstreamLogin,
    /// The URL's user and database, and its password: `--upstream-login url` logs everyone
    /// in with these.
    pub url_login: (PoolKey, Rc<Credential>),
    /// `--upstream-auth-query`.
    auth_query: Option<Arc<str>>,
    /// Each `--replica` URL's user, database and password: `--upstream-login url` logs in to
    /// a replica as its own URL says.
    pub replica_url_logins: Vec<(PoolKey, Rc<Credential>)>,
    pub replicas: Vec<Rc<Replica>>,
    /// The oracle's applied timestamp: the primary's WAL position at (or after) the end of
    /// every commit acknowledged to a client so far, by any shard. See `session.rs`.
    pub applied: Arc<AtomicU64>,
    pub wal: super::WalGeometry,
    /// Rung whenever a replica's replay LSN or rotation state changes.
    replica_progress: Rc<Notify>,
    /// Round-robin position over the replicas.
    replica_turn: Cell<usize>,
    /// Pipelined connections taking units (see `pipe.rs`).
    pipes: RefCell<Vec<Rc<Pipe>>>,
    /// Most units per pipelined connection; below 2, nothing is pipelined.
    pipeline_depth: usize,
    /// `--upstream-trust-functions on` ([`super::Upstreams::trust_functions`]).
    pub trust_functions: bool,
    /// Shapes of batches that ran long on a pipe (see `pipe.rs`).
    pub slow: SlowShapes,
    /// Session ids (who queued a Parse on a shared connection).
    next_session: Cell<u64>,
    /// Upstream name (`ringwire_<id>`) of every statement some client of this shard prepared.
    statements: RefCell<HashMap<StatementKey, u32>>,
    next_statement: Cell<u32>,
    /// Upstream statements a server refused to run again with 0A000, "cached plan must not
    /// change result type" ([`ShardUpstream::forget_statement`]). Client statements still
    /// name them (see `Session::refused`); one id per statement a schema change caught.
    refused: RefCell<std::collections::HashSet<u32>>,
    /// For `--metrics-listen` (`stats.rs`).
    pub counters: super::stats::Counters,
}

/// A shard's connections to one upstream host as one (user, database).
pub struct Pool {
    pub config: Arc<UpstreamConfig>,
    host: Host,
    pub key: PoolKey,
    /// Shared with the task that closes connections idle past the idle timeout.
    idle: Rc<RefCell<Vec<ServerConn>>>,
    slots: Rc<Slots>,
    cap: Option<Rc<HostCap>>,
    reaper_started: Cell<bool>,
    /// The credential of the latest login that succeeded with a SCRAM ClientKey or an md5
    /// hash (never a cleartext password), for connections opened on behalf of a client whose
    /// own authentication left none (e.g. `trust` to ringwire), as PgBouncer keeps a user's
    /// SCRAM keys once one client logged in.
    credential: RefCell<Option<Rc<Credential>>>,
    /// What the server reported to the first login of this key (`session_authorization`,
    /// `is_superuser` and per-role settings differ by user): shown to its clients at startup.
    pub parameters: RefCell<Option<Parameters>>,
    /// The config's host the latest connection was opened on: new ones try it first.
    preferred_host: Cell<usize>,
    /// Fingerprints of startup parameters this key's logins had accepted upstream (see
    /// `Session::admit`), each with the values as the server showed them (for
    /// ParameterStatus); cleared when it reaches [`ACCEPTED_MAX`].
    pub accepted_settings: RefCell<HashMap<u64, StartupValues>>,
    /// The next [`ServerConn::serial`].
    next_serial: Cell<u64>,
}

/// Startup parameters by lower-cased name, each with its value as the server shows it.
pub type StartupValues = Rc<[(String, String)]>;

/// At most this many accepted startup fingerprints are remembered per key (clients that put
/// a process id in `application_name` each have their own).
pub const ACCEPTED_MAX: usize = 1024;

/// A shard's share of `--upstream-max-connections` for one host: every key's connections
/// count against `limit`. A key that needs a connection when the share is used (and has none
/// idle itself) closes the connection idle longest over all keys; if none is idle, it waits,
/// and the next connection given back by a key none of whose clients waits is closed to free
/// the slot.
struct HostCap {
    limit: usize,
    /// Open connections to the host over every key, and clients waiting for the cap.
    slots: Rc<Slots>,
    /// Each key's idle list (weak: a pool lives as long as its shard's `Pools`).
    idle_lists: RefCell<Vec<Weak<RefCell<Vec<ServerConn>>>>>,
}

impl HostCap {
    fn full(&self) -> bool {
        self.slots.open.get() >= self.limit
    }

    /// Close the connection idle longest over every key, freeing a slot; false if none is
    /// idle.
    fn close_longest_idle(&self) -> bool {
        let lists: Vec<_> = self
            .idle_lists
            .borrow()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let oldest = lists
            .iter()
            .flat_map(|list| {
                let idle = list.borrow();
                idle.iter()
                    .enumerate()
                    .map(|(i, c)| (c.released_at, i))
                    .min()
                    .map(|(at, i)| (at, i, list))
            })
            .min_by_key(|&(at, _, _)| at);
        let Some((_, i, list)) = oldest else {
            return false;
        };
        let conn = list.borrow_mut().swap_remove(i);
        log::info!(
            "closing idle upstream connection {} for another user or database: \
             --upstream-max-connections reached",
            conn.process_id
        );
        drop(conn);
        true
    }
}

/// The count of open connections and who waits for one; shared with each connection so
/// closing one frees its slot.
#[derive(Default)]
struct Slots {
    open: Cell<usize>,
    /// Clients waiting for a connection, first come first served.
    waiters: RefCell<VecDeque<Rc<Waiter>>>,
}

#[derive(Default)]
struct Waiter {
    waker: Cell<Option<Waker>>,
    /// Woken by a release: its turn to look. A waiter dropped with its turn unused passes it
    /// on, so a client that went away never swallows the wake-up.
    woken: Cell<bool>,
}

impl Slots {
    /// Wake the first waiter (one connection came back: one client can use it; waking all of
    /// them cost O(waiters) per release, measured at 512 clients).
    fn wake_first_waiter(&self) {
        let first = self.waiters.borrow_mut().pop_front();
        if let Some(w) = first {
            w.woken.set(true);
            if let Some(waker) = w.waker.take() {
                waker.wake();
            }
        }
    }
}

/// Frees its pool's slot (and its host cap's) when the connection closes.
struct Slot {
    pool: Rc<Slots>,
    cap: Option<Rc<Slots>>,
}

impl Slot {
    fn take(pool: &Rc<Slots>, cap: Option<&Rc<HostCap>>) -> Slot {
        let cap = cap.map(|c| c.slots.clone());
        for slots in std::iter::once(pool).chain(&cap) {
            slots.open.set(slots.open.get() + 1);
        }
        Slot {
            pool: pool.clone(),
            cap,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        for slots in std::iter::once(&self.pool).chain(&self.cap) {
            slots.open.set(slots.open.get() - 1);
            slots.wake_first_waiter();
        }
    }
}

/// A connection's [`ServerConn::settings`] when what is in effect is not known: no client's
/// fingerprint is ever this (they are 0, for no settings, or odd), so every client replays.
pub const SETTINGS_UNKNOWN: u64 = 2;

/// [`ServerConn::last_user`] of a connection no client has run on.
pub const NO_USER: u64 = 0;
/// [`ServerConn::last_user`] of a connection that carried a pipe, whose units are anyone's,
/// or ran ringwire's `--upstream-auth-query` (a function there may draw from a sequence).
pub const ANY_USER: u64 = u64::MAX;

/// One connection to the upstream server, or one client's share of a pipelined one.
pub struct ServerConn {
    pub link: Link,
    /// The replies read for this holder: the connection's own buffer, or (for a share of a
    /// pipe) this client's replies only, handed over by the pipe's reader.
    pub buf: ReplyBuf,
    pub process_id: i32,
    pub secret_key: i32,
    /// Statements on the connection (shared with every client of a pipe).
    pub statements: Rc<ConnStatements>,
    /// Fingerprint of the session settings in effect (0: the server's defaults;
    /// [`SETTINGS_UNKNOWN`]: not known, so whoever uses it next replays).
    pub settings: u64,
    pub host: Host,
    /// Which of its config's hosts it is connected to (`UpstreamConfig::host`): where a
    /// cancel for its backend goes.
    pub at: usize,
    /// The WAL timeline its host was on when it opened, for the fence (0: not asked).
    timeline: u32,
    /// A replica's: its server's own `default_transaction_isolation` (postgresql.conf, `ALTER
    /// ROLE`/`DATABASE`), asked as it opened, is read committed; `RESET ALL` comes back to
    /// it. False when not asked (the primary's) or not read committed: a plain `BEGIN` of a
    /// session that set no isolation of its own may then be anything (`ReplicaTx::movable`).
    pub read_committed_default: bool,
    /// A client's cancel was forwarded to its backend. PostgreSQL signals the backend
    /// asynchronously, and a signal that lands after the statement ended cancels whatever
    /// that backend runs next: the connection is closed when it goes back, never handed to
    /// another client (`Pool::release`).
    pub cancel_sent: bool,
    /// Which connection of its pool it is (from 1; 0 for a share of a pipe): a session
    /// remembers where its last batch ran (`Session::last_conn`).
    pub serial: u64,
    /// The session whose batch ran on it last ([`NO_USER`], [`ANY_USER`]): whether what
    /// `nextval` left in the backend for `lastval()` and `currval()` may be that client's
    /// (`Session::keep_sequence_state_own`).
    pub last_user: u64,
    /// When it last went back to the pool (for the health check and the idle timeout).
    released_at: Instant,
    /// The pool it belongs to (weak: the pool holds its idle connections).
    pool: Weak<Pool>,
    /// `None` for a share of a pipe: the pipe's own connection holds the slot.
    _slot: Option<Slot>,
}

/// How a [`ServerConn`] reaches its server.
pub enum Link {
    /// The connection itself, held by one client (or by a pipe).
    Own(ShardStream),
    /// One unit on a pipelined connection (`pipe.rs`).
    Shared(Lease),
}

/// What a connection has prepared.
///
/// A named upstream statement is recorded when its Parse is queued, by the session that
/// queued it, and confirmed when its ParseComplete arrives; a Parse that fails or is skipped
/// is forgotten. A client relies on a statement only when it is confirmed or queued by itself:
/// on a pipelined connection another client's Parse may still be skipped by an error in that
/// client's unit, so a unit that needs a statement another session's unit is still preparing
/// does not join that pipe.
#[derive(Default)]
pub struct ConnStatements {
    /// Upstream statement id → `None` (confirmed) or `Some(session)` (queued by it).
    named: RefCell<HashMap<u32, Option<u64>>>,
    /// The client statement the unnamed upstream statement was last parsed from.
    unnamed: RefCell<Option<Rc<ClientStatement>>>,
    /// Code run on the connection dropped statements ringwire had prepared there (a 26000 at
    /// a Bind or Describe of one, [`ConnStatements::lost`]).
    lost: Cell<bool>,
}

impl ConnStatements {
    /// Session `me` may send a Bind of `id` without a Parse first.
    pub fn has(&self, id: u32, me: u64) -> bool {
        match self.named.borrow().get(&id) {
            Some(None) => true,
            Some(Some(owner)) => *owner == me,
            None => false,
        }
    }

    /// Another session's Parse of `id` is queued and not confirmed yet.
    pub fn preparing_for_other(&self, id: u32, me: u64) -> bool {
        matches!(self.named.borrow().get(&id), Some(Some(owner)) if *owner != me)
    }

    pub fn queued(&self, id: u32, me: u64) {
        self.named.borrow_mut().insert(id, Some(me));
    }

    pub fn confirmed(&self, id: u32) {
        if let Some(owner) = self.named.borrow_mut().get_mut(&id) {
            *owner = None;
        }
    }

    /// A Parse session `me` queued failed or was skipped.
    pub fn forget_queued(&self, id: u32, me: u64) {
        let mut named = self.named.borrow_mut();
        if named.get(&id) == Some(&Some(me)) {
            named.remove(&id);
        }
    }

    /// Code run on the connection dropped statements ringwire had prepared there (a
    /// function's `EXECUTE 'DEALLOCATE ALL'`: a 26000 at a Bind of one). Which ones the server
    /// does not say, and a Parse of one still there fails (42P05), so what is recorded cannot
    /// be put right: the connection is closed as it goes back ([`Pool::release`]).
    pub fn lost(&self) {
        self.lost.set(true);
    }

    /// DISCARD ALL / DEALLOCATE ALL ran on the connection.
    pub fn clear(&self) {
        self.named.borrow_mut().clear();
        *self.unnamed.borrow_mut() = None;
    }

    pub fn unnamed_is(&self, stmt: &Rc<ClientStatement>) -> bool {
        self.unnamed
            .borrow()
            .as_ref()
            .is_some_and(|u| Rc::ptr_eq(u, stmt))
    }

    pub fn set_unnamed(&self, stmt: Option<Rc<ClientStatement>>) {
        *self.unnamed.borrow_mut() = stmt;
    }
}

impl ShardUpstream {
    /// Built on shard `shard` of `shards`.
    pub fn new(
        upstreams: &Upstreams,
        parameters: Arc<Vec<(String, String)>>,
        shard: usize,
        shards: usize,
    ) -> Self {
        let config = &upstreams.primary;
        let cap = upstreams.cap_on_shard(shard, shards);
        ShardUpstream {
            config: config.clone(),
            parameters,
            primary: Pools::new(config.clone(), Host::Primary, cap),
            login: upstreams.login,
            url_login: url_login(config),
            auth_query: upstreams.auth_query.clone(),
            replica_url_logins: upstreams.replicas.iter().map(|c| url_login(c)).collect(),
            replicas: upstreams
                .replicas
                .iter()
                .enumerate()
                .map(|(i, c)| Rc::new(Replica::new(Pools::new(c.clone(), Host::Replica(i), cap))))
                .collect(),
            applied: upstreams.applied.clone(),
            wal: upstreams.wal,
            replica_progress: Rc::new(Notify::default()),
            replica_turn: Cell::new(0),
            statements: RefCell::new(HashMap::new()),
            next_statement: Cell::new(1),
            refused: RefCell::default(),
            pipes: RefCell::new(Vec::new()),
            pipeline_depth: upstreams.pipeline_depth,
            trust_functions: upstreams.trust_functions,
            slow: SlowShapes::new(upstreams.pipeline_slow),
            next_session: Cell::new(1),
            counters: Default::default(),
        }
    }

    /// `--upstream-auth-query`: the stored secret of `user`, read from the primary over a
    /// connection of the URL's user's pool (no settings of a client's in effect: a client's
    /// `search_path` must not change what the query reads). Nothing is cached: a password
    /// changed upstream counts from the next login. `Ok(None)`: no query configured, or no
    /// row, NULL or a value that is not a SCRAM verifier or md5 hash (logged).
    pub async fn lookup_secret(&self, user: &str) -> Result<Option<Secret>, PgError> {
        let Some(query) = &self.auth_query else {
            return Ok(None);
        };
        let fatal = |code, why: &str| {
            PgError::fatal(
                code,
                format!("could not look up the password of user \"{user}\" upstream: {why}"),
            )
        };
        let (key, credential) = &self.url_login;
        let pool = self.pool(Host::Primary, key);
        let mut conn = pool
            .acquire(0, 0, credential, None)
            .await
            .map_err(|e| fatal(e.code, &e.message))?;
        let reset = conn.settings != 0;
        let (stream, buf) = conn.own_io().expect("a pool hands out whole connections");
        let mut answer = Ok(None);
        if reset {
            answer = simple_value(stream, buf, "RESET ALL")
                .await
                .map_err(String::from);
        }
        if answer.is_ok() {
            answer = value_for(stream, buf, query, user).await;
        }
        // The query replaced the server's unnamed statement (see `ServerConn::check`).
        conn.statements.set_unnamed(None);
        match answer {
            Ok(text) => {
                conn.settings = 0;
                conn.last_user = ANY_USER;
                self.release(conn);
                match text.as_deref().map(Secret::parse) {
                    None => Ok(None),
                    Some(Ok(secret)) => Ok(Some(secret)),
                    Some(Err(e)) => {
                        log::warn!("--upstream-auth-query for user {user:?}: {e}");
                        Ok(None)
                    }
                }
            }
            // An error the server answered (permission denied, a bad query): the connection
            // is idle again, but what else the query did is unknown: close it.
            Err(e) => Err(fatal(SqlState::INVALID_AUTHORIZATION_SPECIFICATION, &e)),
        }
    }

    /// Pipelining is on.
    pub fn pipelines(&self) -> bool {
        self.pipeline_depth > 1
    }

    /// A new session's id.
    pub fn session_id(&self) -> u64 {
        let id = self.next_session.get();
        self.next_session.set(id + 1);
        id
    }

    /// Somewhere to run one unit of a client whose settings have fingerprint `settings`:
    /// a pipe of `pool` (same host, same user and database) that takes it (same settings,
    /// room, and `usable`: no statement the unit needs is still being prepared there by
    /// another client), else a new pipe over a connection from the pool. `Err(conn)`: the
    /// pool's connection has other settings — the unit runs on it alone (the relay replays
    /// the settings; the connection comes back with them, ready for a pipe next time).
    /// `fresh`: a new pipe, whatever pipes there are (a unit of a slow shape).
    #[allow(clippy::too_many_arguments)]
    pub async fn pipe_for(
        self: &Rc<Self>,
        pool: &Rc<Pool>,
        settings: u64,
        credential: &Rc<Credential>,
        cancel: Option<&CancelToken>,
        fresh: bool,
        request: usize,
        usable: impl Fn(&ConnStatements) -> bool,
    ) -> Result<Result<Rc<Pipe>, ServerConn>, LoginError> {
        let found = if fresh {
            None
        } else {
            let pipes = self.pipes.borrow();
            let mut takers = pipes
                .iter()
                .filter(|p| p.takes(pool, settings, request) && usable(&p.statements));
            let now = Instant::now();
            // Behind a long-running head only if the pool cannot do better (`pipe.rs`, "A long
            // statement").
            takers
                .clone()
                .find(|p| !p.head_is_slow(now))
                .or_else(|| takers.find(|_| pool.exhausted()))
                .cloned()
        };
        if let Some(pipe) = found {
            return Ok(Ok(pipe));
        }
        let conn = pool.acquire(settings, 0, credential, cancel).await?;
        if conn.settings != settings {
            return Ok(Err(conn));
        }
        let pipe = Pipe::new(self.clone(), pool.clone(), conn, self.pipeline_depth);
        self.pipes.borrow_mut().push(pipe.clone());
        Ok(Ok(pipe))
    }

    /// The pipe failed or gave its connection back.
    pub fn forget_pipe(&self, pipe: &Pipe) {
        self.pipes
            .borrow_mut()
            .retain(|p| !std::ptr::eq(Rc::as_ptr(p), pipe));
    }

    /// The pools of `host`, one per (user, database).
    pub fn pools(&self, host: Host) -> &Pools {
        match host {
            Host::Primary => &self.primary,
            Host::Replica(i) => &self.replicas[i].pools,
        }
    }

    /// The pool of `key` on `host`.
    pub fn pool(&self, host: Host, key: &PoolKey) -> Rc<Pool> {
        self.pools(host).get(key)
    }

    /// The oracle's applied timestamp now: a read that starts after a commit was
    /// acknowledged sees at least that commit's WAL position.
    pub fn applied_lsn(&self) -> u64 {
        self.applied.load(Ordering::SeqCst)
    }

    /// A commit is about to be acknowledged and the primary's insert position after it is
    /// `insert`: every read that starts from now on must see it.
    pub fn raise_applied(&self, insert: u64) {
        self.applied
            .fetch_max(self.wal.end_of_wal(insert), Ordering::SeqCst);
    }

    /// A replica to serve a read whose timestamp is `lsn`, or `None` for the primary.
    ///
    /// Strict (`stale` is `None`): a replica in rotation whose known replay LSN is at least
    /// `lsn` — proven from state, no round trip. If none is, and one is replaying (its position
    /// moved within [`replica::STUCK_AFTER`]), the read waits for the pollers (hurried) at most
    /// [`replica::WAIT_MAX`]; else the primary. Bounded-stale (`Some(bound)`): also a
    /// replica that had everything acknowledged `bound` ago; no waiting.
    pub async fn replica_for(&self, lsn: u64, stale: Option<Duration>) -> Option<usize> {
        for r in &self.replicas {
            r.start_poller(&self.applied, &self.replica_progress);
        }
        let now = Instant::now();
        let ok = |r: &Replica| match stale {
            None => r.serves(lsn),
            Some(bound) => r.serves_stale(lsn, bound, now),
        };
        if let Some(i) = self.next_replica(ok) {
            return Some(i);
        }
        if stale.is_some() || !self.replicas.iter().any(|r| r.worth_waiting(now)) {
            return None;
        }
        super::stats::Counters::bump(&self.counters.replica_waits);
        let deadline = now + replica::WAIT_MAX;
        let waiting: Vec<&Rc<Replica>> = self
            .replicas
            .iter()
            .filter(|r| r.worth_waiting(now))
            .collect();
        for r in &waiting {
            r.wait_begins();
        }
        let found = loop {
            let timed_out = self.progress_or(deadline).await;
            if let Some(i) = self.next_replica(|r| r.serves(lsn)) {
                break Some(i);
            }
            if timed_out || !waiting.iter().any(|r| r.worth_waiting(Instant::now())) {
                break None;
            }
        };
        for r in &waiting {
            r.wait_ends();
        }
        found
    }

    /// Wait until some replica's replay position or rotation state changes (false), or until
    /// `deadline` (true).
    async fn progress_or(&self, deadline: Instant) -> bool {
        let seen = self.replica_progress.generation();
        futures_lite::future::or(
            async {
                self.replica_progress.changed(seen).await;
                false
            },
            async {
                shards::time::sleep(deadline.saturating_duration_since(Instant::now())).await;
                true
            },
        )
        .await
    }

    /// Wait, at most `limit`, until replica `i` may serve a read at `lsn` (strict, or within
    /// the `stale` bound as in [`Self::replica_for`]). False when it did not in time, left
    /// the rotation, or stopped replaying ([`replica::STUCK_AFTER`]): a transaction pinned to
    /// it cannot go elsewhere, so the caller fails it rather than read stale data.
    pub async fn replica_catches_up(
        &self,
        i: usize,
        lsn: u64,
        stale: Option<Duration>,
        limit: Duration,
    ) -> bool {
        let r = &self.replicas[i];
        let ok = |r: &Replica| match stale {
            None => r.serves(lsn),
            Some(bound) => r.serves_stale(lsn, bound, Instant::now()),
        };
        if ok(r) {
            return true;
        }
        super::stats::Counters::bump(&self.counters.replica_waits);
        let deadline = Instant::now() + limit;
        r.wait_begins();
        let caught_up = loop {
            if !r.worth_waiting(Instant::now()) {
                break false;
            }
            let timed_out = self.progress_or(deadline).await;
            if ok(r) {
                break true;
            }
            if timed_out {
                break false;
            }
        };
        r.wait_ends();
        caught_up
    }

    /// The next replica (round robin) that passes `ok`.
    fn next_replica(&self, ok: impl Fn(&Replica) -> bool) -> Option<usize> {
        let n = self.replicas.len();
        let start = self.replica_turn.get();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| ok(&self.replicas[i]))
            .inspect(|&i| {
                self.replica_turn.set(i + 1);
            })
    }

    /// A read failed on replica `i`: out of rotation.
    pub fn replica_failed(&self, i: usize, why: &str) {
        self.replicas[i].mark_down(&self.replica_progress, why);
    }

    /// Take back a clean connection (ReadyForQuery `I`, nothing outstanding). A share of a
    /// pipe is just dropped: the pipe gives its connection back when its last unit is done.
    pub fn release(&self, conn: ServerConn) {
        if let Link::Own(_) = conn.link {
            if let Some(pool) = conn.pool.upgrade() {
                pool.release(conn);
            }
        }
    }
}

impl Pool {
    fn new(
        config: Arc<UpstreamConfig>,
        host: Host,
        key: PoolKey,
        cap: Option<Rc<HostCap>>,
    ) -> Pool {
        Pool {
            config,
            host,
            key,
            idle: Rc::new(RefCell::new(Vec::new())),
            slots: Rc::new(Slots::default()),
            cap,
            reaper_started: Cell::new(false),
            credential: RefCell::new(None),
            parameters: RefCell::new(None),
            preferred_host: Cell::new(0),
            accepted_settings: Default::default(),
            next_serial: Cell::new(1),
        }
    }

    /// A connection for a client whose settings have fingerprint `settings`: an idle one
    /// with the same settings if there is one (no replay needed), else any idle one, else a
    /// new one while under the limit, else wait. Idle connections the server closed are
    /// dropped here (their socket reports end of stream, no round trip); one idle longer than
    /// the idle timeout is closed; one idle at least the check delay must answer an empty
    /// Query within the check timeout first (a host gone without a FIN, a backend that hangs),
    /// else it is closed and the next is tried: the client never sees the failure. A new
    /// connection logs in with `credential`, or (if that is none) with the one the pool's last
    /// successful login used. Waiting ends with an error when it has lasted the wait timeout
    /// (53300) or the client's statement is cancelled (57014); then nothing was sent.
    pub async fn acquire(
        self: &Rc<Self>,
        settings: u64,
        prefer: u64,
        credential: &Rc<Credential>,
        cancel: Option<&CancelToken>,
    ) -> Result<ServerConn, LoginError> {
        let timers = self.config.timers;
        let mut waiting_since = None;
        loop {
            let found = {
                let mut idle = self.idle.borrow_mut();
                let i = (prefer != 0)
                    .then(|| idle.iter().position(|c| c.serial == prefer))
                    .flatten()
                    .or_else(|| idle.iter().rposition(|c| c.settings == settings))
                    .or_else(|| idle.len().checked_sub(1));
                // (`remove`: the others keep their order, most recently given back last.)
                i.map(|i| idle.remove(i))
            };
            if let Some(mut conn) = found {
                let idle_for = conn.released_at.elapsed();
                if !timers.idle_timeout.is_zero() && idle_for >= timers.idle_timeout {
                    continue; // the reaper would have closed it
                }
                let fence = self.config.fence.load(Ordering::Relaxed);
                if conn.timeline < fence && conn.timeline != 0 {
                    log::warn!(
                        "upstream connection {} to {} closed: fenced (its host was on timeline \
                         {}, a primary on timeline {fence} was seen since)",
                        conn.process_id,
                        self.config.host(conn.at),
                        conn.timeline
                    );
                    continue;
                }
                if !conn.alive().await {
                    log::info!(
                        "upstream connection {} was closed while idle",
                        conn.process_id
                    );
                    continue;
                }
                if idle_for >= timers.check_delay {
                    if let Err(why) = conn.check(timers.check_timeout).await {
                        log::warn!(
                            "upstream connection {} to {} failed its health check after \
                             {idle_for:?} idle ({why}); replacing it",
                            conn.process_id,
                            self.config.host(conn.at)
                        );
                        // What failed one (a host gone without a FIN, a hung server) has most
                        // likely failed the connections idle longer too: close them rather
                        // than make this client wait out a check timeout for each.
                        drop(take_idle(&self.idle, |c| c.released_at <= conn.released_at));
                        continue;
                    }
                }
                return Ok(conn);
            }
            let own = WaitTurn {
                slots: &self.slots,
                me: None,
            };
            if self.slots.open.get() >= self.config.pool_size_per_shard {
                self.wait(own, &mut waiting_since, cancel).await?;
                continue;
            }
            match &self.cap {
                Some(cap) if cap.full() => {
                    if cap.close_longest_idle() {
                        continue;
                    }
                    // Whichever comes first: a connection of this key given back, or a
                    // connection of any key closed.
                    let any = WaitTurn {
                        slots: &cap.slots,
                        me: None,
                    };
                    let turn = futures_lite::future::or(own, any);
                    self.wait(turn, &mut waiting_since, cancel).await?;
                }
                _ => {
                    let slot = Slot::take(&self.slots, self.cap.as_ref());
                    return self.open(slot, credential).await;
                }
            }
        }
    }

    /// Wait for `turn`, unless the wait that started at `since` (now, on the first call)
    /// reaches the wait timeout or `cancel` fires first.
    async fn wait(
        &self,
        turn: impl Future<Output = ()>,
        since: &mut Option<Instant>,
        cancel: Option<&CancelToken>,
    ) -> Result<(), LoginError> {
        let since = *since.get_or_insert_with(Instant::now);
        let limit = self.config.timers.wait_timeout;
        let never_ran = "The statement was waiting for an upstream connection and never ran.";
        let timed_out = async {
            if limit.is_zero() {
                std::future::pending::<()>().await;
            }
            shards::time::sleep(limit.saturating_sub(since.elapsed())).await;
            let busy = match &self.cap {
                Some(cap) if cap.full() => format!(
                    "All {} of this shard's connections to {} (--upstream-max-connections) \
                     were in use.",
                    cap.limit,
                    self.config.hosts_text()
                ),
                _ => format!(
                    "All {} of this shard's connections to {} for user \"{}\", database \
                     \"{}\" (--upstream-pool-size) were in use.",
                    self.config.pool_size_per_shard,
                    self.config.hosts_text(),
                    self.key.user,
                    self.key.database
                ),
            };
            Err(LoginError::local(
                protocol::SqlState::TOO_MANY_CONNECTIONS,
                format!(
                    "timed out after {} s waiting for an upstream connection",
                    limit.as_secs_f64()
                ),
                format!("{busy} {never_ran}"),
            ))
        };
        let cancelled = async {
            match cancel {
                Some(cancel) => cancel.cancelled().await,
                None => std::future::pending::<()>().await,
            }
            let e = query_canceled();
            Err(LoginError::local(
                e.code,
                e.message.into(),
                never_ran.into(),
            ))
        };
        let turn = async {
            turn.await;
            Ok(())
        };
        futures_lite::future::or(turn, futures_lite::future::or(timed_out, cancelled)).await
    }

    async fn open(
        self: &Rc<Self>,
        slot: Slot,
        credential: &Rc<Credential>,
    ) -> Result<ServerConn, LoginError> {
        let credential = if credential.is_some() {
            credential.clone()
        } else {
            let cached = self.credential.borrow().clone();
            cached.unwrap_or_else(|| credential.clone())
        };
        let (at, (stream, buf, hs), timeline, read_committed_default) =
            self.open_on_some_host(&credential).await?;
        self.preferred_host.set(at);
        // A client's cleartext password stays in its session only (it is not the pool's to
        // keep); the ClientKey and md5 hash are what PgBouncer keeps per user too.
        if matches!(*credential, Credential::Scram { .. } | Credential::Md5(_)) {
            *self.credential.borrow_mut() = Some(credential);
        }
        if self.parameters.borrow().is_none() {
            *self.parameters.borrow_mut() = Some(Arc::new(hs.parameters));
        }
        Ok(ServerConn {
            link: Link::Own(stream),
            buf,
            process_id: hs.process_id,
            secret_key: hs.secret_key,
            statements: Rc::default(),
            settings: 0,
            host: self.host,
            at,
            timeline,
            read_committed_default,
            cancel_sent: false,
            serial: {
                let serial = self.next_serial.get();
                self.next_serial.set(serial + 1);
                serial
            },
            last_user: NO_USER,
            released_at: Instant::now(),
            pool: Rc::downgrade(self),
            _slot: Some(slot),
        })
    }

    /// Connect and log in to the first host that will do, trying each of the config's hosts in
    /// turn from the one that last worked: one that cannot be reached, or is shutting down or
    /// starting up (class 08, 57P), is passed over, and so is one in hot standby or read-only
    /// when writes are wanted (`read_write`). A refusal of the login (class 28, 3D000, 53300...)
    /// is returned at once, as libpq does: the next host would most likely refuse it too.
    async fn open_on_some_host(
        &self,
        credential: &Credential,
    ) -> Result<(usize, (ShardStream, ReplyBuf, Handshake), u32, bool), LoginError> {
        let hosts = 1 + self.config.more_hosts.len();
        let fenced = self.host == Host::Primary && hosts > 1 && self.config.read_write;
        let first = self.preferred_host.get();
        let mut passed_over = Vec::new();
        for k in 0..hosts {
            let at = (first + k) % hosts;
            let address = self.config.host(at);
            let opening = async {
                let mut stream = connect(address).await.map_err(|e| {
                    LoginError::new(
                        protocol::SqlState::CONNECTION_FAILURE,
                        format!("cannot connect to {address}: {e}"),
                    )
                })?;
                let mut buf = ReplyBuf::default();
                let who = Login {
                    address,
                    user: &self.key.user,
                    database: &self.key.database,
                    credential,
                };
                let hs = login(&mut stream, &mut buf, &who).await?;
                // Of several primary hosts, a writable one says which timeline it is on
                // (the first 8 hex digits of its WAL file name), for the fence below.
                let mut timeline = None;
                if fenced && read_only_why(&hs.parameters).is_none() {
                    // A server that cannot say (an older one in recovery) is not fenced.
                    match simple_value(&mut stream, &mut buf, TIMELINE_QUERY).await {
                        Ok(name) => {
                            timeline = name
                                .as_deref()
                                .and_then(|n| n.get(..8))
                                .and_then(|t| u32::from_str_radix(t, 16).ok())
                        }
                        Err(e) if passes_over(&e) => return Err(e),
                        Err(e) => log::info!("upstream {address}: no timeline: {e}"),
                    }
                }
                // A replica's default isolation, for moving read-only transactions off it
                // (`ServerConn::read_committed_default`); an answer that is not read committed
                // (or none) only keeps them where they are.
                let mut read_committed = false;
                if matches!(self.host, Host::Replica(_)) {
                    match simple_value(&mut stream, &mut buf, ISOLATION_QUERY).await {
                        Ok(level) => {
                            read_committed = matches!(
                                level.as_deref(),
                                Some("read committed" | "read uncommitted")
                            )
                        }
                        Err(e) if passes_over(&e) => return Err(e),
                        Err(e) => log::info!("upstream {address}: no default isolation: {e}"),
                    }
                }
                Ok::<_, LoginError>((stream, buf, hs, timeline, read_committed))
            };
            // A replica that does not accept a connection in time is out of rotation (the
            // caller takes it out), and one of several primary hosts that does not must not
            // hold up the next for long (only the first connection after a failover pays it:
            // the next start at the host that worked). Only opening is timed: waiting for a
            // busy pool's connection is not the server's failure.
            let limit = match self.host {
                Host::Primary if hosts == 1 => None,
                Host::Primary => Some(MULTI_HOST_CONNECT_TIMEOUT),
                Host::Replica(_) => Some(replica::CONNECT_TIMEOUT),
            };
            let opened = if let Some(limit) = limit {
                futures_lite::future::or(opening, async {
                    shards::time::sleep(limit).await;
                    Err(LoginError::new(
                        protocol::SqlState::CONNECTION_FAILURE,
                        format!("{address}: no answer within {limit:?}"),
                    ))
                })
                .await
            } else {
                opening.await
            };
            match opened {
                Ok((stream, buf, hs, timeline, read_committed)) => {
                    match read_only_why(&hs.parameters) {
                        Some(why) if self.config.read_write => {
                            log::info!("upstream {address} passed over: {why}");
                            passed_over.push(format!("{address}: {why}"));
                        }
                        _ => match timeline
                            .map(|t| (t, self.config.fence.fetch_max(t, Ordering::SeqCst)))
                        {
                            Some((t, seen)) if t < seen => {
                                let why = format!(
                                    "{address}: fenced: a primary on timeline {t}, but one on \
                                 timeline {seen} was seen (an old primary back after a failover?)"
                                );
                                log::warn!("upstream {why}");
                                passed_over.push(why);
                            }
                            _ => {
                                return Ok((
                                    at,
                                    (stream, buf, hs),
                                    timeline.unwrap_or(0),
                                    read_committed,
                                ))
                            }
                        },
                    }
                }
                Err(e) if hosts > 1 && passes_over(&e) => {
                    log::info!("upstream {address} passed over: {}", e.message);
                    passed_over.push(e.message);
                }
                Err(e) => return Err(e),
            }
        }
        Err(LoginError::new(
            protocol::SqlState::CONNECTION_FAILURE,
            no_host(self.config.read_write, &passed_over),
        ))
    }

    fn release(&self, mut conn: ServerConn) {
        if conn.cancel_sent {
            log::debug!(
                "closing upstream connection {}: a cancel was sent to it, and it may land on \
                 whatever runs there next",
                conn.process_id
            );
            return;
        }
        if conn.statements.lost.get() {
            log::info!(
                "closing upstream connection {}: code run on it deallocated statements \
                 ringwire had prepared there",
                conn.process_id
            );
            return;
        }
        if let Some(cap) = &self.cap {
            if !self.has_waiters() && !cap.slots.waiters.borrow().is_empty() {
                // Clients of other keys wait for the cap and none of this key does: closing
                // it lets one of them open a connection.
                log::info!(
                    "closing upstream connection {} for a client of another user or \
                     database: --upstream-max-connections reached",
                    conn.process_id
                );
                return;
            }
        }
        conn.buf.shrink_if_idle();
        conn.released_at = Instant::now();
        self.idle.borrow_mut().push(conn);
        self.slots.wake_first_waiter();
        self.start_reaper();
    }

    /// Close idle connections once they have been idle the idle timeout, whether or not a
    /// client comes (one task per pool, started at the first release; it ends with the pool).
    /// It wakes every quarter of the timeout, so a connection lives at most 1.25 times it.
    fn start_reaper(&self) {
        let timeout = self.config.timers.idle_timeout;
        if timeout.is_zero() || self.reaper_started.replace(true) {
            return;
        }
        let idle: Weak<RefCell<Vec<ServerConn>>> = Rc::downgrade(&self.idle);
        let period = (timeout / 4).max(Duration::from_millis(10));
        glommio::spawn_local(async move {
            loop {
                shards::time::sleep(period).await;
                let Some(idle) = idle.upgrade() else {
                    return;
                };
                let expired = take_idle(&idle, |c| c.released_at.elapsed() >= timeout);
                for conn in &expired {
                    log::info!(
                        "closing upstream connection {} idle for over {timeout:?}",
                        conn.process_id
                    );
                }
                drop(expired);
            }
        })
        .detach();
    }

    /// The credential of this key's latest login that a pool may keep (see `credential`).
    pub fn cached_credential(&self) -> Option<Rc<Credential>> {
        self.credential.borrow().clone()
    }

    /// No connection to give without waiting: none idle, and no room to open one (a cap
    /// that could close another key's idle connection counts as no room).
    pub fn exhausted(&self) -> bool {
        self.idle.borrow().is_empty()
            && (self.slots.open.get() >= self.config.pool_size_per_shard
                || self.cap.as_ref().is_some_and(|c| c.full()))
    }

    /// Clients wait for a connection (every one is open and taken).
    pub fn has_waiters(&self) -> bool {
        !self.slots.waiters.borrow().is_empty()
    }

    /// Close every idle connection (the host failed: they would fail when taken anyway).
    fn drop_idle(&self) {
        let idle = std::mem::take(&mut *self.idle.borrow_mut());
        drop(idle);
    }
}

impl ShardUpstream {
    /// The upstream statement id for `key`, assigned on first use.
    pub fn statement_id(&self, key: &StatementKey) -> u32 {
        if let Some(id) = self.statements.borrow().get(key) {
            return *id;
        }
        let id = self.next_statement.get();
        self.next_statement.set(id + 1);
        self.statements.borrow_mut().insert(key.clone(), id);
        id
    }

    /// Forget a statement whose plan the server refused to reuse (0A000): the next Parse of
    /// the same text gets a new upstream name, prepared afresh, and the name is marked
    /// refused ([`ShardUpstream::refused`]).
    pub fn forget_statement(&self, id: u32) {
        self.statements.borrow_mut().retain(|_, v| *v != id);
        self.refused.borrow_mut().insert(id);
    }

    /// Whether a server refused any statement of this shard since it started.
    pub fn any_refused(&self) -> bool {
        !self.refused.borrow().is_empty()
    }

    /// A server refused upstream statement `id` since it was prepared: a schema change
    /// changed its result type, so copies of it on different connections may differ.
    pub fn refused(&self, id: u32) -> bool {
        let refused = self.refused.borrow();
        !refused.is_empty() && refused.contains(&id)
    }
}

impl ServerConn {
    /// False if the server closed the connection or sent something unasked (a FATAL before
    /// closing, e.g. on shutdown or idle_session_timeout).
    async fn alive(&mut self) -> bool {
        if !self.buf.data().is_empty() {
            return false;
        }
        let Link::Own(stream) = &mut self.link else {
            return true; // a share of a pipe is never pooled
        };
        let mut probe = [0u8; 1];
        let read = futures_lite::AsyncReadExt::read(stream, &mut probe);
        futures_lite::future::poll_once(read).await.is_none()
    }

    /// One round trip on an idle connection held whole: an empty Query, answered by
    /// EmptyQueryResponse and ReadyForQuery `I` (PgBouncer's `server_check_query` default is
    /// also empty). An error, another status, or no answer within `limit` fails it.
    ///
    /// # Cancel safety
    /// Not: dropped midway, the connection is mid-exchange; the caller closes it on `Err`.
    async fn check(&mut self, limit: Duration) -> Result<(), String> {
        let ServerConn {
            link,
            buf,
            statements,
            ..
        } = self;
        let Link::Own(stream) = link else {
            return Ok(()); // a share of a pipe is never pooled
        };
        // Any simple Query drops the server's unnamed statement: a client's next Bind of its
        // own must Parse it again.
        statements.set_unnamed(None);
        let mut query = Vec::with_capacity(6);
        frontend::encode_query(&mut query, "");
        replica::with_timeout("health check", limit, async {
            stream.write_all(&query).await.map_err(|e| e.to_string())?;
            loop {
                let frame = buf
                    .frame()
                    .map_err(|e| e.to_string())?
                    .map(|(f, len)| (f.tag, f.body.first().copied(), len));
                let Some((tag, first, len)) = frame else {
                    buf.fill(stream).await.map_err(|e| e.to_string())?;
                    continue;
                };
                buf.consume(len);
                match (tag, first) {
                    (b'Z', Some(b'I')) => return Ok(()),
                    (b'Z', _) => return Err("not idle".to_string()),
                    (b'E', _) => return Err("the server answered with an error".to_string()),
                    _ => {} // EmptyQueryResponse, notices, parameter changes
                }
            }
        })
        .await
    }

    /// Send `bytes`: on the connection, or as one unit of the pipe.
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.link {
            Link::Own(stream) => futures_lite::AsyncWriteExt::write_all(stream, bytes).await,
            Link::Shared(lease) => lease.submit(bytes),
        }
    }

    /// Read more replies into `buf`. The end of the stream is an error.
    pub async fn fill(&mut self) -> std::io::Result<()> {
        match &mut self.link {
            Link::Own(stream) => self.buf.fill(stream).await,
            Link::Shared(lease) => lease.fill(&mut self.buf).await,
        }
    }

    /// The stream and reply buffer of a connection held whole (`None` for a share of a pipe).
    pub fn own_io(&mut self) -> Option<(&mut ShardStream, &mut ReplyBuf)> {
        match &mut self.link {
            Link::Own(stream) => Some((stream, &mut self.buf)),
            Link::Shared(_) => None,
        }
    }

    /// A share of a pipelined connection.
    pub fn lease(pipe: &Pipe, lease: Lease, buf: ReplyBuf) -> ServerConn {
        ServerConn {
            link: Link::Shared(lease),
            buf,
            process_id: pipe.process_id,
            secret_key: pipe.secret_key,
            statements: pipe.statements.clone(),
            settings: pipe.settings,
            host: pipe.host,
            at: pipe.at,
            timeline: 0,
            read_committed_default: false,
            cancel_sent: false,
            serial: 0,
            last_user: ANY_USER,
            released_at: Instant::now(),
            pool: Rc::downgrade(&pipe.pool),
            _slot: None,
        }
    }
}

/// Why no host of a multi-host URL would do, host by host.
pub fn no_host(read_write: bool, passed_over: &[String]) -> String {
    format!(
        "no upstream host {} ({})",
        if read_write {
            "takes writes"
        } else {
            "could be reached"
        },
        passed_over.join("; ")
    )
}

/// A primary's WAL file name, whose first 8 hex digits are its timeline (PostgreSQL 15 names
/// it by the timeline WAL is inserted on; a promotion starts a new, higher one).
const TIMELINE_QUERY: &str = "SELECT pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn())";

/// Asked of each replica connection as it opens (`ServerConn::read_committed_default`).
const ISOLATION_QUERY: &str = "SHOW default_transaction_isolation";

/// How long connecting and logging in to one of several primary hosts may take before the
/// next is tried.
const MULTI_HOST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a server that sent these ParameterStatus values at login takes no writes, if it does
/// not: libpq's test for `target_session_attrs=read-write` (PostgreSQL 14 and later report
/// both; an older server that reports neither counts as writable).
pub fn read_only_why(parameters: &[(String, String)]) -> Option<&'static str> {
    let on = |name: &str| parameters.iter().any(|(n, v)| n == name && v == "on");
    if on("in_hot_standby") {
        Some("in hot standby")
    } else if on("default_transaction_read_only") {
        Some("default_transaction_read_only is on")
    } else {
        None
    }
}

/// A login failure after which the next of several hosts is tried: the host cannot be
/// reached or the exchange broke (class 08), or it is shutting down, starting up or
/// recovering (57P01-57P03).
pub fn passes_over(e: &LoginError) -> bool {
    let code = e.code.as_str();
    code.starts_with("08") || code.starts_with("57P")
}

/// Wait until a connection is given back (or closed) by another client of the shard.
struct WaitTurn<'a> {
    slots: &'a Slots,
    me: Option<Rc<Waiter>>,
}

impl Future for WaitTurn<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &self.me {
            None => {
                let me = Rc::new(Waiter::default());
                me.waker.set(Some(cx.waker().clone()));
                self.slots.waiters.borrow_mut().push_back(me.clone());
                self.me = Some(me);
                Poll::Pending
            }
            Some(me) if me.woken.get() => {
                self.me = None;
                Poll::Ready(())
            }
            Some(me) => {
                me.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

impl Drop for WaitTurn<'_> {
    fn drop(&mut self) {
        if let Some(me) = self.me.take() {
            if me.woken.get() {
                self.slots.wake_first_waiter();
            } else {
                self.slots
                    .waiters
                    .borrow_mut()
                    .retain(|w| !Rc::ptr_eq(w, &me));
            }
        }
    }
}
