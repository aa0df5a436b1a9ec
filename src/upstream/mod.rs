//! Upstream mode (`--upstream postgres://…`): PostgreSQL is the compute and ringwire the
//! frontend. Each shard relays its clients' messages to a pool of upstream connections of its
//! own (no cross-core hop, no shared pool), opened over the shard's own socket path.
//!
//! - [`client`]: ringwire as a PostgreSQL client: startup and authentication as a given user
//!   with a given credential (the client's own, passed through; or the URL's), the reply buffer.
//! - `pool`: the shard's upstream connections, one pool per (host, user, database), and the
//!   shard's prepared-statement names.
//! - `pipe`: autocommit units of several clients pipelined onto one upstream connection.
//! - `classify`: what a statement does to session state (SET tracking, what pins a session).
//! - `session`: one client's relay: message rewriting, replies in order, transaction pooling,
//!   routing reads to replicas and learning each commit's WAL position.
//! - `replica`: what a shard knows about each replica (replay LSN, rotation) and its poller.
//! - `stats`: per-shard counters and pool gauges, gathered over the mesh for `/metrics`.
//!
//! See docs/ARCHITECTURE.md, "Upstream mode", for why this is a relay and not an `Engine`
//! that answers message by message.

mod classify;
pub mod client;
mod pipe;
mod pool;
mod replica;
mod session;
pub mod stats;

pub use pipe::SLOW_UNIT as PIPELINE_SLOW;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use bumpalo::Bump;
use protocol::backend::{self, TransactionStatus};
use protocol::frontend::{Bind, Oids};
use protocol::PgError;
use shards::connect::Address;
use shards::engine::{CancelToken, Cx, Engine, Execution, SessionStart};
use shards::runtime::Mesh;

pub use client::parse_lsn;
pub use session::Session;

/// Where the upstream server is and how ringwire logs in to it.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// The (first) host.
    pub address: Address,
    /// Further hosts of a multi-host URL (`postgres://u@h1:p1,h2:p2/db`, libpq's syntax), in
    /// order: a new connection tries each host in turn from the one that last worked.
    pub more_hosts: Vec<Address>,
    /// Only a host that takes writes will do (libpq's `target_session_attrs=read-write`, the
    /// default for a URL of several hosts): one that reports `in_hot_standby` or
    /// `default_transaction_read_only` at login is passed over, so after a standby is
    /// promoted new connections reach it.
    pub read_write: bool,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    /// Upstream connections each shard may open.
    pub pool_size_per_shard: usize,
    /// When idle pooled connections are checked or closed.
    pub timers: PoolTimers,
    /// Of several primary hosts: the highest WAL timeline a primary was seen on, by any shard
    /// (0: none yet). A primary on an older one is an old primary that came back after a
    /// standby was promoted over it, and is passed over (see `Pool::open_on_some_host`).
    pub fence: Arc<AtomicU32>,
}

/// Health of idle pooled connections, PgBouncer-style (`server_check_delay`,
/// `server_idle_timeout`): a connection idle at least `check_delay` gets a round trip (an
/// empty Query) before a client gets it, and one that does not answer within
/// `check_timeout` is replaced without the client seeing it; one idle `idle_timeout` is
/// closed (zero: never). A client that waits `wait_timeout` for a connection (its key's pool
/// or the host's cap is full) gets 53300 instead (PgBouncer's `query_wait_timeout`; zero:
/// it waits as long as it takes). A client that holds a connection with work open (a
/// transaction, extended-protocol messages no Sync closed, a COPY) and sends nothing for
/// `idle_transaction_timeout` is disconnected with FATAL 25P03 and its work rolled back: a
/// transaction by ROLLBACK, after which the connection goes back to the pool, anything else
/// by closing the connection (PgBouncer's `idle_transaction_timeout`; zero: never; see
/// `Session::idle_limit_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolTimers {
    pub check_delay: Duration,
    pub check_timeout: Duration,
    pub idle_timeout: Duration,
    pub wait_timeout: Duration,
    pub idle_transaction_timeout: Duration,
}

impl Default for PoolTimers {
    /// PgBouncer's defaults for the delay (30 s), the idle timeout (10 min), the wait
    /// timeout (2 min) and the idle-transaction timeout (none).
    fn default() -> Self {
        PoolTimers {
            check_delay: Duration::from_secs(30),
            check_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(600),
            wait_timeout: Duration::from_secs(120),
            idle_transaction_timeout: Duration::ZERO,
        }
    }
}

/// Who clients' statements run upstream as (`--upstream-login`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamLogin {
    /// Each client as the user and database it logged in to ringwire with (PgBouncer's and
    /// PostgreSQL's behaviour: `current_user`, GRANTs, row-level security and
    /// `current_database()` are the client's). Credentials come from the client's own
    /// authentication (`shards::auth::Credential`).
    Client,
    /// Everyone as the URL's user on the URL's database, with the URL's password.
    Url,
}

/// The upstream hosts, and the oracle's applied timestamp they share.
pub struct Upstreams {
    pub primary: Arc<UpstreamConfig>,
    /// `--replica`s: hot standbys streaming from the primary.
    pub replicas: Vec<Arc<UpstreamConfig>>,
    /// The primary's WAL position at (or after) the end of the last commit acknowledged to
    /// any client, by any shard: one `fetch_max` per commit, one load per routed read. Starts
    /// at the primary's insert position when ringwire starts, so commits made before are
    /// covered too.
    pub applied: Arc<AtomicU64>,
    pub wal: WalGeometry,
    /// Most autocommit units of different clients pipelined on one upstream connection
    /// (`--upstream-pipeline`); 0 or 1: none, every unit takes a connection of its own.
    pub pipeline_depth: usize,
    /// `--upstream-pipeline-slow-ms`: a pipe's head unit that has run this long is slow
    /// (`pipe.rs`, "A long statement").
    pub pipeline_slow: Duration,
    /// `--upstream-trust-functions on`: code stored upstream (functions, procedures, DO) is
    /// assumed to leave no setting behind, so running it does not make its connection's
    /// settings unknown (`classify::runs_user_code`).
    pub trust_functions: bool,
    /// `--upstream-login`.
    pub login: UpstreamLogin,
    /// `--upstream-max-connections`: connections to each host over every (user, database)
    /// and shard; 0: no cap but `pool_size_per_shard` per key.
    pub max_connections: usize,
    /// `--upstream-auth-query`: reads the stored secret (`$1`: the user name) of a client
    /// the users file does not have, from the primary as the URL's user.
    pub auth_query: Option<Arc<str>>,
}

impl Upstreams {
    /// Shard `shard`'s share of `max_connections` (the shares add up to it; each shard owns
    /// its own, so no count crosses cores), or `None` without a cap.
    pub fn cap_on_shard(&self, shard: usize, shards: usize) -> Option<usize> {
        (self.max_connections > 0).then(|| {
            self.max_connections / shards + usize::from(shard < self.max_connections % shards)
        })
    }
}

/// The primary's WAL page and segment sizes (`wal_block_size`, `wal_segment_size`), to read
/// an insert position at the start of a page as the end of the WAL before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalGeometry {
    pub page_bytes: u64,
    pub segment_bytes: u64,
}

impl Default for WalGeometry {
    /// PostgreSQL's defaults.
    fn default() -> Self {
        WalGeometry {
            page_bytes: 8192,
            segment_bytes: 16 << 20,
        }
    }
}

/// The query whose answer [`WalGeometry::parse_insert_position`] reads.
pub const WAL_POSITION_QUERY: &str = "SELECT pg_current_wal_insert_lsn() || ' ' || \
    current_setting('wal_block_size') || ' ' || \
    (SELECT setting FROM pg_settings WHERE name = 'wal_segment_size')";

impl WalGeometry {
    /// PostgreSQL's page header sizes on 64-bit builds (`SizeOfXLogShortPHD`,
    /// `SizeOfXLogLongPHD`, MAXALIGNed); the long one opens each segment.
    const SHORT_HEADER: u64 = 24;
    const LONG_HEADER: u64 = 40;

    /// The end of the WAL inserted so far, given `pg_current_wal_insert_lsn()`.
    ///
    /// When the last record ended exactly at a page end (always so after a segment switch),
    /// the insert position points past the next page's header, where no record exists yet;
    /// a standby's replay position is then the page start and would never reach the insert
    /// position until the next record is written (on an idle primary: possibly never). No
    /// record can end inside a page header, so an insert position right after one means
    /// every record ends at or before the page start: that is the position returned.
    pub fn end_of_wal(&self, insert: u64) -> u64 {
        let in_page = insert % self.page_bytes;
        let page_start = insert - in_page;
        let header = if page_start.is_multiple_of(self.segment_bytes) {
            Self::LONG_HEADER
        } else {
            Self::SHORT_HEADER
        };
        if in_page == header {
            page_start
        } else {
            insert
        }
    }

    /// `(insert position, geometry)` from the answer to [`WAL_POSITION_QUERY`].
    pub fn parse_insert_position(text: &str) -> Option<(u64, WalGeometry)> {
        let mut words = text.split_whitespace();
        let lsn = parse_lsn(words.next()?)?;
        let page_bytes: u64 = words.next()?.parse().ok()?;
        let segment_bytes: u64 = words.next()?.parse().ok()?;
        (page_bytes > Self::LONG_HEADER && segment_bytes >= page_bytes).then_some((
            lsn,
            WalGeometry {
                page_bytes,
                segment_bytes,
            },
        ))
    }
}

impl UpstreamConfig {
    /// The hosts in the order they are tried; the first is `address`.
    pub fn hosts(&self) -> impl Iterator<Item = &Address> {
        std::iter::once(&self.address).chain(&self.more_hosts)
    }

    /// Host `i` of [`Self::hosts`].
    pub fn host(&self, i: usize) -> &Address {
        i.checked_sub(1)
            .and_then(|i| self.more_hosts.get(i))
            .unwrap_or(&self.address)
    }

    /// The hosts for messages and labels: `a`, or `a,b` for several.
    pub fn hosts_text(&self) -> String {
        self.hosts()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `postgres[ql]://USER[:PASSWORD]@HOST[:PORT][,HOST[:PORT]...][/DATABASE][?PARAMS]`.
    /// With `host=DIR` (or a HOST that is a percent-encoded path) the server is reached on its
    /// Unix socket `DIR/.s.PGSQL.PORT`. User, password and database may be percent-encoded.
    /// Several hosts are tried in order (libpq's multi-host URL); `target_session_attrs`
    /// (`read-write`, the default for several hosts, or `any`, the default for one) says
    /// whether a host in hot standby or read-only by default is passed over.
    pub fn parse_url(url: &str, pool_size_per_shard: usize) -> Result<UpstreamConfig, String> {
        let bad = |why: &str| format!("{url:?}: {why}");
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(|| bad("expected postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE"))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, database) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = authority
            .rsplit_once('@')
            .ok_or_else(|| bad("the URL names no user (USER@HOST)"))?;
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (
                percent_decode(u).map_err(|e| bad(&e))?,
                Some(percent_decode(p).map_err(|e| bad(&e))?),
            ),
            None => (percent_decode(userinfo).map_err(|e| bad(&e))?, None),
        };
        if user.is_empty() {
            return Err(bad("the user is empty"));
        }
        let mut hosts = Vec::new();
        for hostport in hostport.split(',') {
            let (host, port) = match hostport.rsplit_once(':') {
                Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                    h,
                    p.parse::<u16>()
                        .map_err(|_| bad("the port is not a number"))?,
                ),
                _ => (hostport, 5432),
            };
            hosts.push((percent_decode(host).map_err(|e| bad(&e))?, port));
        }
        let mut read_write = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("host", v)) if hosts.len() == 1 => {
                    hosts[0].0 = percent_decode(v).map_err(|e| bad(&e))?
                }
                Some(("target_session_attrs", "read-write")) => read_write = Some(true),
                Some(("target_session_attrs", "any")) => read_write = Some(false),
                _ => {
                    return Err(bad(&format!(
                        "unsupported parameter {pair:?} (only host= with one host, and \
                         target_session_attrs=read-write|any)"
                    )))
                }
            }
        }
        let mut addresses = Vec::with_capacity(hosts.len());
        for (host, port) in &hosts {
            addresses.push(if host.starts_with('/') {
                Address::Unix(std::path::Path::new(host).join(format!(".s.PGSQL.{port}")))
            } else {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                if host.is_empty() {
                    return Err(bad("a host is empty"));
                }
                use std::net::ToSocketAddrs;
                let addr = (host, *port)
                    .to_socket_addrs()
                    .map_err(|e| bad(&format!("cannot resolve {host}: {e}")))?
                    .next()
                    .ok_or_else(|| bad(&format!("{host} has no address")))?;
                Address::Tcp(addr)
            });
        }
        let address = addresses.remove(0);
        let database = percent_decode(database).map_err(|e| bad(&e))?;
        Ok(UpstreamConfig {
            address,
            read_write: read_write.unwrap_or(!addresses.is_empty()),
            more_hosts: addresses,
            database: if database.is_empty() {
                user.clone()
            } else {
                database
            },
            user,
            password,
            pool_size_per_shard,
            timers: PoolTimers::default(),
            fence: Arc::default(),
        })
    }
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent-encoding in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

/// The per-shard engine of upstream mode: every connection is relayed (see
/// [`Engine::relays`]); the message-level calls of the embedded engine are never made.
pub struct Upstream {
    shard: Rc<pool::ShardUpstream>,
    metrics: Rc<Metrics>,
}

/// The shard's side of `/metrics` gathers (see `stats.rs`).
struct Metrics {
    shard: Rc<pool::ShardUpstream>,
    mesh: Mesh<stats::Message>,
    /// Scrapes this shard is gathering: id → each shard's answer so far.
    gathers: RefCell<HashMap<u64, Vec<Option<stats::ShardStats>>>>,
    next_gather: Cell<u64>,
    arrived: replica::Notify,
}

impl Upstream {
    /// Built on the shard's thread. `parameters` are what the upstream server reported at
    /// startup (probed once by `main`), shown to clients as their startup ParameterStatus.
    pub fn new(
        upstreams: &Upstreams,
        parameters: Arc<Vec<(String, String)>>,
        mesh: Mesh<stats::Message>,
    ) -> Upstream {
        let shard = Rc::new(pool::ShardUpstream::new(
            upstreams,
            parameters,
            mesh.shard_id,
            mesh.shards(),
        ));
        Upstream {
            metrics: Rc::new(Metrics {
                shard: shard.clone(),
                mesh,
                gathers: RefCell::new(HashMap::new()),
                next_gather: Cell::new(1),
                arrived: replica::Notify::default(),
            }),
            shard,
        }
    }

    /// A `/metrics` body maker for `metrics_http::spawn_with` on this shard: every shard's
    /// counters and pools, asked over the mesh, rendered by `stats::render`.
    pub fn scrape(&self) -> crate::metrics_http::Scrape {
        let metrics = self.metrics.clone();
        Rc::new(move || {
            let metrics = metrics.clone();
            Box::pin(async move { stats::render(&metrics.gather().await) })
        })
    }
}

impl Metrics {
    /// Every shard's stats; `None` for a shard that did not answer within
    /// [`crate::dispatch::STATS_TIMEOUT`].
    async fn gather(&self) -> Vec<Option<stats::ShardStats>> {
        let me = self.mesh.shard_id;
        let id = self.next_gather.get();
        self.next_gather.set(id + 1);
        let mut answers = vec![None; self.mesh.shards()];
        answers[me] = Some(self.shard.stats());
        self.gathers.borrow_mut().insert(id, answers);
        for to in (0..self.mesh.shards()).filter(|&s| s != me) {
            self.mesh.send(to, stats::Message::Request { from: me, id });
        }
        let deadline = std::time::Instant::now() + crate::dispatch::STATS_TIMEOUT;
        loop {
            let complete = self
                .gathers
                .borrow()
                .get(&id)
                .is_none_or(|a| a.iter().all(Option::is_some));
            if complete {
                break;
            }
            let seen = self.arrived.generation();
            let timed_out = futures_lite::future::or(
                async {
                    self.arrived.changed(seen).await;
                    false
                },
                async {
                    shards::time::sleep(
                        deadline.saturating_duration_since(std::time::Instant::now()),
                    )
                    .await;
                    true
                },
            )
            .await;
            if timed_out {
                break;
            }
        }
        self.gathers.borrow_mut().remove(&id).unwrap_or_default()
    }

    fn on_message(&self, msg: stats::Message) {
        match msg {
            stats::Message::Request { from, id } => {
                let stats = Box::new(self.shard.stats());
                let shard = self.mesh.shard_id;
                self.mesh
                    .send(from, stats::Message::Reply { id, shard, stats });
            }
            stats::Message::Reply { id, shard, stats } => {
                if let Some(slot) = self
                    .gathers
                    .borrow_mut()
                    .get_mut(&id)
                    .and_then(|a| a.get_mut(shard))
                {
                    *slot = Some(*stats);
                }
                self.arrived.notify();
            }
        }
    }
}

/// The message-level calls: unreachable by construction (the connection loop runs
/// `shards::relay` for engines that relay), so reaching one is a bug in `shards`.
const NOT_RELAYED: &str = "upstream mode relays every message; the state machine never calls this";

impl Engine for Upstream {
    type Session = Session;
    type Statement = ();
    type Portal = ();
    type Message = stats::Message;

    fn on_message(&self, msg: stats::Message) {
        self.metrics.on_message(msg);
    }

    fn open_session(&self, start: &SessionStart<'_>) -> Result<Session, PgError> {
        Session::open(self.shard.clone(), start)
    }

    async fn admit(&self, session: &mut Session) -> Result<(), PgError> {
        session.admit().await
    }

    async fn lookup_secret(&self, user: &str) -> Result<Option<shards::auth::Secret>, PgError> {
        self.shard.lookup_secret(user).await
    }

    fn close_session(&self, session: &mut Session) {
        session.close();
    }

    fn write_startup_parameters(&self, session: &Session, out: &mut Vec<u8>) {
        for (name, value) in session.shown() {
            backend::write_parameter_status(out, name, value);
        }
    }

    fn relays(&self) -> bool {
        true
    }

    /// Statement timeouts are the upstream server's (the SET is relayed); the idle limit is
    /// `--upstream-idle-transaction-timeout-secs` while the session holds open work
    /// (`Session::idle_limit_ms`).
    fn timeouts(&self, session: &Session) -> shards::limits::Timeouts {
        shards::limits::Timeouts {
            statement_ms: 0,
            idle_in_transaction_ms: session.idle_limit_ms(),
        }
    }

    async fn idle(&self, session: &mut Session, out: &mut Vec<u8>) -> Result<(), PgError> {
        session.relay_idle(out).await
    }

    async fn relay(
        &self,
        session: &mut Session,
        frames: &[u8],
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn futures_lite::AsyncWrite + Unpin),
    ) -> Result<(), PgError> {
        session.relay(frames, cancel, out, client).await
    }

    async fn simple_query(&self, _cx: &mut Cx<'_, Self>, _sql: &str) -> Result<(), PgError> {
        unreachable!("{NOT_RELAYED}")
    }

    fn parse(&self, _cx: &mut Cx<'_, Self>, _sql: &str, _t: Oids<'_>) -> Result<Rc<()>, PgError> {
        unreachable!("{NOT_RELAYED}")
    }

    fn describe_statement(&self, _s: &(), _arena: &Bump, _out: &mut Vec<u8>) {
        unreachable!("{NOT_RELAYED}")
    }

    fn bind(&self, _cx: &mut Cx<'_, Self>, _s: &Rc<()>, _b: &Bind<'_>) -> Result<(), PgError> {
        unreachable!("{NOT_RELAYED}")
    }

    fn describe_portal(&self, _p: &(), _arena: &Bump, _out: &mut Vec<u8>) {
        unreachable!("{NOT_RELAYED}")
    }

    async fn copy_in_done(
        &self,
        _cx: &mut Cx<'_, Self>,
        _data: Result<Vec<u8>, PgError>,
    ) -> Result<(), PgError> {
        unreachable!("{NOT_RELAYED}")
    }

    fn end_of_cycle(&self, _s: &mut Session, _tx: TransactionStatus, _e: bool, _out: &mut Vec<u8>) {
        unreachable!("{NOT_RELAYED}")
    }

    async fn execute(
        &self,
        _cx: &mut Cx<'_, Self>,
        _portal: &mut (),
        _max_rows: u32,
    ) -> Result<Execution, PgError> {
        unreachable!("{NOT_RELAYED}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let c = UpstreamConfig::parse_url("postgres://u:p%40ss@127.0.0.1:5433/db", 4).unwrap();
        assert_eq!(c.address, Address::Tcp("127.0.0.1:5433".parse().unwrap()));
        assert_eq!(
            (c.user.as_str(), c.password.as_deref()),
            ("u", Some("p@ss"))
        );
        assert_eq!(c.database, "db");
        let c = UpstreamConfig::parse_url("postgresql://postgres@localhost?host=/tmp", 4).unwrap();
        assert_eq!(c.address, Address::Unix("/tmp/.s.PGSQL.5432".into()));
        assert_eq!((c.database.as_str(), c.password), ("postgres", None));
        let c = UpstreamConfig::parse_url("postgres://u@127.0.0.1:5433,127.0.0.1/db", 4).unwrap();
        assert_eq!(
            c.hosts().cloned().collect::<Vec<_>>(),
            [
                Address::Tcp("127.0.0.1:5433".parse().unwrap()),
                Address::Tcp("127.0.0.1:5432".parse().unwrap())
            ]
        );
        assert!(c.read_write);
        assert_eq!(c.host(1), &Address::Tcp("127.0.0.1:5432".parse().unwrap()));
        assert_eq!(c.hosts_text(), "127.0.0.1:5433,127.0.0.1:5432");
        let c = UpstreamConfig::parse_url(
            "postgres://u@127.0.0.1:5433,127.0.0.1/db?target_session_attrs=any",
            4,
        )
        .unwrap();
        assert!(!c.read_write);
        let c =
            UpstreamConfig::parse_url("postgres://u@127.0.0.1?target_session_attrs=read-write", 4);
        assert!(c.unwrap().read_write);
        assert!(
            !UpstreamConfig::parse_url("postgres://u@127.0.0.1", 4)
                .unwrap()
                .read_write
        );
        let refused = |url: &str| UpstreamConfig::parse_url(url, 1).unwrap_err();
        assert!(refused("postgres://u@127.0.0.1,/db").contains("a host is empty"));
        for url in [
            "postgres://u@127.0.0.1,127.0.0.1/db?host=/tmp",
            "postgres://u@127.0.0.1/db?target_session_attrs=x",
        ] {
            assert!(refused(url).contains("unsupported parameter"), "{url}");
        }
        assert!(UpstreamConfig::parse_url("mysql://u@h/d", 1).is_err());
        assert!(UpstreamConfig::parse_url("postgres://h:5432/d", 1).is_err());
        assert!(UpstreamConfig::parse_url("postgres://u@h:x/d", 1).is_err());
    }

    #[test]
    fn end_of_wal_at_page_starts() {
        let g = WalGeometry::default();
        // After a segment switch: the long header of the new segment.
        assert_eq!(g.end_of_wal(0x3000028), 0x3000000);
        // A page start inside a segment: the short header.
        assert_eq!(g.end_of_wal(0x3002018), 0x3002000);
        // Inside a page, even at 40 bytes past a page that does not open a segment.
        assert_eq!(g.end_of_wal(0x3002028), 0x3002028);
        assert_eq!(g.end_of_wal(0x30000a0), 0x30000a0);
        assert_eq!(
            WalGeometry::parse_insert_position("0/3000028 8192 16777216"),
            Some((0x3000028, g))
        );
        assert_eq!(WalGeometry::parse_insert_position("0/3000028 8192"), None);
    }
}
