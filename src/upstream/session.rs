//! One client's relay to the upstream server.
//!
//! The client's messages are forwarded in batches (everything it sent in one read). Each
//! forwarded message, and each reply ringwire answers itself, becomes an [`Expect`] in a queue;
//! the server's replies are matched against the queue in order, so the client gets exactly the
//! replies PostgreSQL would have sent, in PostgreSQL's order:
//!
//! - **Prepared statements.** A client's statement names map onto one per-shard upstream name
//!   per (text, parameter types, settings). A Parse of a statement the connection already has
//!   is not sent: its ParseComplete is made here, in its place in the queue. A Bind or Describe
//!   on a connection that lacks the statement sends a Parse first and swallows its reply.
//!   Close of a statement is answered here (the upstream statement stays for the next client).
//! - **Errors.** After an ErrorResponse the server skips to Sync; so does the queue (replies
//!   ringwire would have made in between are dropped, as PostgreSQL would not send them).
//! - **Transaction pooling.** The connection goes back to the shard's pool on ReadyForQuery
//!   `I` with nothing outstanding, unless the session pinned it (`classify`).
//! - **Pipelining.** A batch that is a self-contained autocommit unit ([`Session::pipelinable`])
//!   shares a connection with other clients' units (`pipe.rs`); the relay below is the same,
//!   only the replies come through the pipe.
//! - **Settings.** Committed SETs (and the client's startup parameters) are replayed on a
//!   connection whose settings differ, as one swallowed Query in front of the batch:
//!   `RESET ALL; SET …`. A SET in a transaction that rolls back is never recorded.
//! - **Replica reads.** A batch that is certainly read-only autocommit work (`classify::
//!   read_only` on every statement it runs) goes to a replica that has provably replayed
//!   the oracle's applied LSN as of the batch's start (`ShardUpstream::replica_for`). If the
//!   replica fails it before a byte of its replies reached the client, the batch is run again
//!   on the primary.
//! - **Read-only transactions.** `BEGIN READ ONLY` (or a BEGIN under
//!   `default_transaction_read_only`), not serializable, runs on such a replica to its end;
//!   at read committed each later statement first waits (bounded) for the replica to replay
//!   what was acknowledged before it, and the transaction fails with 40001 if it does not
//!   (`Session::pick_replica_tx`, `Session::continue_replica_tx`).
//! - **The applied LSN.** After a commit that may have written, the primary's WAL position is
//!   asked on the same connection in the same pipeline (a swallowed Query right behind the
//!   client's Sync/Query), and the oracle's applied LSN raised before the client's
//!   ReadyForQuery is released. See [`LSN_QUERY`].

use std::borrow::Cow;
use std::cell::{Cell, OnceCell};
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncWrite, AsyncWriteExt};
use protocol::backend;
use protocol::frontend::{self, FrontendMessage, Target};
use protocol::wire::{put_cstr, split_frame};
use protocol::{PgError, Severity, SqlState};
use shards::engine::{no_statement, CancelToken, SessionStart};

use super::classify::{
    autocommit_shape, begin_modes, classify, combine_shapes, contains_ignore_case, deallocated,
    deallocates_all, movable_in_transaction, read_only, reads_sequence_state, route,
    runs_user_code, sets_identity, setting_value, startup_changes_lexing,
    startup_creates_temp_objects, takes_snapshot, tx_end, Isolation, QueryEnd, Route, SetChange,
    TxControl, TxEnd,
};
use super::client::{simple_values, LoginError, ReplyBuf};
use super::pipe::Lease;
use super::pool::{
    passes_over, ConnStatements, Host, Link, Parameters, Pool, PoolKey, ServerConn, ShardUpstream,
    StatementKey, ACCEPTED_MAX, NO_USER, SETTINGS_UNKNOWN,
};
use super::stats::Counters;
use super::UpstreamLogin;
use shards::auth::Credential;

/// Asked on the primary, in the same pipeline, right after a commit that may have written
/// (and before the client's ReadyForQuery is released); the answer becomes the oracle's
/// applied timestamp.
///
/// Why the *insert* position: the commit record was inserted before COMMIT returned, so the
/// insert position is at or past its end whatever `synchronous_commit` says. The flush
/// position is not: with `synchronous_commit = off` (which a client may set, and which ringwire
/// replays) COMMIT returns before its record is flushed, so `pg_current_wal_flush_lsn()` can be
/// behind it and a replica "caught up" to it could miss the commit — a stale read. Everything
/// inserted is flushed by the WAL writer within a few `wal_writer_delay`s and streamed, so the
/// insert position is always reached by the replica; it may be a little past the commit (other
/// sessions' WAL, or a page header when the last record ended on a page boundary), which only
/// makes a read wait for the next WAL record or go to the primary — never stale.
///
/// (A position right after a page header is read as the page start: see
/// [`super::WalGeometry::end_of_wal`].)
const LSN_QUERY: &str = "SELECT pg_current_wal_insert_lsn()";

/// Reads at `serializable` (not strict) with no `ringwire.max_replica_lag_ms` may miss the
/// commits of this long ago.
const SERIALIZABLE_STALENESS_MAX: Duration = Duration::from_secs(1);

/// The longest a statement of a read-committed read-only transaction on a replica waits for
/// that replica to replay every commit acknowledged before the statement started, where the
/// transaction cannot move to the primary (`ReplicaTx::movable`: a movable one waits as a
/// read does, then moves); one whose replica does not catch up in time (or stops replaying)
/// fails with 40001 and is ended (see `Session::abandon_replica_tx`).
const IN_TRANSACTION_WAIT_MAX: Duration = Duration::from_millis(1000);

/// Replies piled up past this are written to the client mid-batch (a large result streams).
const CLIENT_FLUSH_BYTES: usize = 256 << 10;

/// The upstream statements a pipelinable unit relies on (see `Session::pipelinable`), its
/// shape (`classify::combine_shapes` of its statements') and its size in bytes.
#[derive(Clone, Copy, Default)]
struct UnitNeeds {
    ids: [u32; UNIT_STATEMENTS_MAX],
    len: usize,
    shape: u64,
    bytes: usize,
}

/// Most portals of SET statements a session tracks at once (`Session::portal_sets`).
const PORTAL_SETS_MAX: usize = 16;

/// A client's prepared statement.
pub struct ClientStatement {
    sql: Box<str>,
    /// Declared parameter types, as on the wire (big-endian OIDs).
    param_types: Box<[u8]>,
    /// Upstream statement id; `None` for the unnamed statement (relayed as unnamed). Changed
    /// only where a connection that lacks it would analyse it under other settings than its
    /// key names (`Session::ensure_prepared`).
    upstream: Cell<Option<u32>>,
    /// The settings fingerprint of its upstream statement's key: what every connection's copy
    /// of that statement was analysed under.
    settings: Cell<u64>,
    /// Read at its first Bind that needs it ([`ClientStatement::route`]), for every later one.
    route: OnceCell<Route>,
    /// Certainly autocommit-only: may share a pipelined connection. Its shape
    /// ([`autocommit_shape`]).
    autocommit: Option<u64>,
    /// May run code stored upstream ([`runs_user_code`]): a Bind of it makes the
    /// connection's settings unknown when the connection goes back.
    user_code: bool,
    /// SAVEPOINT / ROLLBACK TO / RELEASE (pgjdbc's `setSavepoint` and `autosave` send them
    /// so): a Bind of it marks the block as having one (`Session::savepoint_in_tx`).
    savepoint: bool,
    /// The session setting a `SET` or `RESET` statement changes (pgjdbc, pgx and Npgsql send
    /// every statement so): pending once an Execute of it completes, as a Query's SET is
    /// (`Session::portal_sets`).
    set: Option<SetChange>,
    /// The client was sent its row description (a Describe of the statement, or of a portal
    /// bound from it in the same batch, answered): it may hold that result type from then on,
    /// as at PostgreSQL (pgjdbc describes the portal of its first named execution and then
    /// reads later results by that description; `Session::refused`).
    described: Cell<bool>,
}

impl ClientStatement {
    /// What it does to the transaction block and whether it may write, read once: with
    /// replicas at its first Bind; without, only once code stored upstream left the session
    /// untidied (whether the tidy may follow it), so that nothing else pays for the scan.
    fn route(&self) -> Route {
        *self.route.get_or_init(|| route(&self.sql))
    }

    /// Its key with the settings its upstream statement was keyed under.
    fn key(&self) -> StatementKey {
        StatementKey {
            sql: self.sql.clone(),
            param_types: self.param_types.clone(),
            settings: self.settings.get(),
        }
    }

    fn upstream_name(&self) -> String {
        self.upstream
            .get()
            .map_or_else(String::new, |id| format!("ringwire_{id}"))
    }

    fn encode_parse(&self, out: &mut Vec<u8>) {
        let types: Vec<u32> = self
            .param_types
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        frontend::encode_parse(out, &self.upstream_name(), &self.sql, &types);
    }
}

/// In a replica transaction, `sql` may change what needs a freshness check: see
/// `Session::continue_replica_tx`.
fn per_statement_checks(sql: &str) -> bool {
    contains_ignore_case(sql.as_bytes(), b"isolation")
        || contains_ignore_case(sql.as_bytes(), b"chain")
}

/// A read-only transaction that runs on a replica (see `Session::pick_replica_tx`).
#[derive(Clone, Copy, Debug)]
struct ReplicaTx {
    replica: usize,
    /// Read committed: every statement takes a new snapshot, so each batch that runs one
    /// first waits for the replica to replay the applied LSN as of its start. (Repeatable
    /// read: the snapshot is taken at the first statement, after the check at BEGIN.)
    each_statement: bool,
    /// The batch that began it is running: if the replica fails it before any reply reached
    /// the client, it is run again on the primary (the transaction never started).
    first_batch: bool,
    /// Surely read committed (its BEGIN or the session says so, else the replica's own
    /// default: `ServerConn::read_committed_default`), no error in it so far, and every batch
    /// before the running one left nothing in the transaction but its BEGIN and what
    /// `Session::moved_replay` redoes (`classify::movable_in_transaction`: `SET LOCAL`,
    /// savepoints; no named portal, no Execute that may stop short): at the primary, a new
    /// `BEGIN READ ONLY` transaction followed by that replay would be the same transaction
    /// from here on (each statement takes its own snapshot, and the primary's hold every
    /// commit). So rather than fail, it goes on there when its replica falls behind or fails,
    /// or when a batch has what a replica transaction cannot run (`Session::move_replica_tx`).
    movable: bool,
    /// `movable` once the running batch is done.
    movable_after: bool,
    /// A statement that takes a snapshot ran or was parsed in it (`classify::takes_snapshot`;
    /// not BEGIN, SET, SAVEPOINT), before the running batch, so a `SET TRANSACTION` fails
    /// there with 25001, "must be called before any query"; the primary gets
    /// [`AFTER_READS`] to say the same. Kept only while the transaction is movable.
    ran: bool,
    /// `ran` once the running batch is done.
    ran_after: bool,
    /// Movable, not the first batch, and the running batch ends with a Sync or Query: if the
    /// replica fails it (a lost connection, a conflict with recovery) before any reply reached
    /// the client, the batch runs again on the primary behind a new BEGIN.
    rerunnable: bool,
}

/// What a batch of a movable transaction relies on and leaves (`Session::leaves_nothing`).
#[derive(Clone, Copy)]
struct InTransaction {
    /// It uses no portal bound before it, so it can run in a new transaction.
    self_contained: bool,
    /// It leaves the transaction movable.
    leaves_nothing: bool,
    /// A statement of it takes a snapshot (`classify::takes_snapshot`): a later `SET
    /// TRANSACTION` fails (`ReplicaTx::ran`).
    snapshot: bool,
}

/// What a batch of a read-only transaction on a replica does (`Session::continue_replica_tx`).
enum ReplicaStep {
    /// Its first this many bytes run on the replica.
    Run(usize),
    /// The replica is behind (or gone), or the batch has what a replica transaction cannot
    /// run (`Session::replica_tx_cut`), and the transaction is movable: it goes on at the
    /// primary. Why, for the log.
    Move(&'static str),
}

/// What a moved read-only transaction begins with on the primary (`ReplicaTx::movable`),
/// followed by `Session::moved_replay` and, once a statement ran in it (`ReplicaTx::ran`),
/// [`AFTER_READS`]. Until then the client may still `SET TRANSACTION`, there as on the
/// replica.
const BEGIN_MOVED: &str = "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;";

/// A transaction whose `Session::moved_replay` would grow past this many bytes (a client
/// setting savepoints in a loop) stops being movable (`ReplicaTx::movable`).
const MOVED_REPLAY_MAX: usize = 64 << 10;

/// The capacity `Session::moved_replay` keeps between replica transactions.
const MOVED_REPLAY_KEPT: usize = 256;

/// A query, so that a later `SET TRANSACTION` fails with 25001 ("must be called before any
/// query") at the primary as it would have on the replica.
const AFTER_READS: &str = "SELECT 1";

/// Whose `default_transaction_isolation` a plain `BEGIN` of the session gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DefaultIsolation {
    /// The session set it (a startup parameter or a committed SET).
    Session(Isolation),
    /// The session never set it: the server's own (postgresql.conf, `ALTER ROLE`/`DATABASE`),
    /// which a replica connection learns as it opens (`ServerConn::read_committed_default`).
    Server,
    /// The session set it to a value this scan cannot read.
    Unreadable,
}

impl DefaultIsolation {
    /// What routing assumes: read committed unless known otherwise, so a transaction on a
    /// replica checks every statement (more checks than needed only wait).
    fn assumed(self) -> Isolation {
        match self {
            DefaultIsolation::Session(level) => level,
            _ => Isolation::ReadCommitted,
        }
    }
}

/// The message a queued reply answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Parse,
    Bind,
    Close,
    DescribeStatement,
    DescribePortal,
    Execute,
    Sync,
    /// A simple Query or a FunctionCall: ends with ReadyForQuery, errors do not skip.
    Query,
}

enum Done {
    Nothing,
    /// A Parse of this upstream statement, marked prepared on the connection when queued:
    /// unmarked if it fails or is skipped, and then the client's statement it made (the
    /// client's own Parse; `None` for one ringwire sends in front of a Bind) forgotten, as
    /// PostgreSQL never made it.
    Prepared(u32, Option<Rc<ClientStatement>>),
    /// A Parse of the unnamed statement from this client statement (marked when queued).
    Unnamed(Rc<ClientStatement>),
    /// Bind or Describe of this upstream statement, from this client statement (0A000 forgets
    /// it: `Session::refused`; 26000 closes the connection as it goes back:
    /// `ConnStatements::lost`).
    Bound(u32, Rc<ClientStatement>),
    /// A Describe of a portal bound from this client statement earlier in the batch: its
    /// answer marks the statement described.
    PortalOf(Rc<ClientStatement>),
    /// Bind or Describe of a refused upstream statement on a connection that lacks it
    /// (`Session::refused`): the server's error (26000) aborts its transaction as PostgreSQL's
    /// 0A000 would, and reaches the client as that 0A000.
    Refused,
    /// The settings replay finished: the connection has the session's settings.
    Settings(u64),
    /// One statement of the settings replay before its last (see `queue_settings_replay`),
    /// or another swallowed Query of ringwire's own.
    Replayed,
    /// The `DISCARD SEQUENCES` in front of a batch that reads sequence values
    /// (`keep_sequence_state_own`).
    Discarded,
    /// A client Query and the SETs in it, pending once it completes (those before a COMMIT
    /// or ROLLBACK inside it are settled there: [`QueryDone`]).
    Query(QueryDone),
    /// [`LSN_QUERY`], queued behind a commit: the applied LSN is raised when it answers.
    Lsn,
    /// [`TIDY`], queued behind code stored upstream (`queue_tidy`); with the fingerprint of
    /// the settings it leaves the connection with, where it replays them.
    Tidied(Option<u64>),
    /// The BEGIN of a read-only transaction moved from a replica (`move_replica_tx`). Its
    /// error, unlikely as it is (a cancel landing on it), reaches the client as an error.
    Moved,
    /// An Execute of a client statement that changes this setting: pending once it
    /// completes ([`ClientStatement::set`]).
    Set(SetChange),
    /// An Execute (of a COPY) whose data and end the client sent right behind it, before the
    /// server's CopyInResponse: the copies not begun yet that have them
    /// (`Session::note_copy_fed`).
    CopyFed(u32),
}

/// What a client Query does to the session's settings, as its replies come.
struct QueryDone {
    /// Its SETs not settled yet.
    sets: Vec<SetChange>,
    /// Its transaction ends not reached yet ([`super::classify::Effects::ends`]), first last.
    ends: Vec<QueryEnd>,
    /// CommandCompletes seen so far.
    completes: usize,
    /// COPYs of it whose data and end the client sent right behind it, not begun yet
    /// (`Session::note_copy_fed`).
    copies_fed: u32,
}

enum Expect {
    /// A reply the server sends. `emit: false` for messages ringwire added (their replies are
    /// swallowed; an ErrorResponse still reaches the client).
    Server { kind: Kind, emit: bool, done: Done },
    /// A reply ringwire makes in place of one the server is not asked for.
    Local(Local),
}

enum Local {
    /// A client's Parse of a statement the connection has: if the server would have skipped
    /// it (an error earlier in the batch), the client's statement is forgotten (`undo`).
    ParseComplete(Rc<ClientStatement>),
    /// A client's Close of this statement (its name and what it named, if any): put back if
    /// the server would have skipped it.
    CloseComplete(Option<(Box<str>, Rc<ClientStatement>)>),
    Error(PgError),
    /// A Query answered here: CommandComplete with this tag, then ReadyForQuery.
    Command(&'static str),
}

/// The upstream statements a unit relies on (at most this many; more: not pipelined).
const UNIT_STATEMENTS_MAX: usize = 8;

/// One client's relay state (the engine's per-connection session).
pub struct Session {
    shard: Rc<ShardUpstream>,
    /// Who this client runs as upstream (its own user and database, or the URL's with
    /// `--upstream-login url`), what it logs in with, and its primary pool, resolved once.
    key: PoolKey,
    credential: Rc<Credential>,
    primary: Rc<Pool>,
    /// The ParameterStatus values shown at startup: the server's to this key's first login
    /// (the URL user's until `admit` learnt them).
    parameters: Parameters,
    /// Tells this session's queued Parses from other clients' on a shared connection.
    id: u64,
    /// The process id ringwire gave the client (its BackendKeyData).
    client_pid: i32,
    server: Option<ServerConn>,
    /// The reply buffer a share of a pipe reads into, kept between units.
    spare_buf: Option<ReplyBuf>,
    /// Transaction status of the last ReadyForQuery (`I`, `T`, `E`).
    tx: u8,
    statements: std::collections::HashMap<Box<str>, Rc<ClientStatement>>,
    /// The statement that replays each startup parameter (see [`startup_set`]): RESET ALL
    /// returns to these.
    startup_sets: Vec<(String, String)>,
    /// Startup parameters PostgreSQL checks at login and then overrides, so that they have
    /// no effect: a `session_authorization` other than the login user's (its login runs as
    /// the user who authenticated). Run at the check only, undone at once.
    startup_checks: Vec<String>,
    /// Each startup parameter's value by lower-cased name, for ParameterStatus: as the server
    /// shows it once checked (`ISO, MDY` for `datestyle=iso`, `Europe/Berlin` for
    /// `timezone=europe/berlin`: what `set_config` returned), else as the client sent it.
    startup_values: Vec<(String, String)>,
    /// Committed SETs, by lower-cased name.
    sets: Vec<(String, String)>,
    settings: u64,
    /// SETs of the open transaction, recorded if it commits.
    pending_sets: Vec<SetChange>,
    /// The transaction failed or was rolled back: drop `pending_sets` at its end.
    tx_rolled_back: bool,
    /// A `COMMIT` tag came back in the open transaction: with `tx_rolled_back` and a
    /// savepoint, a ROLLBACK TO undid some of its SETs (`end_of_transaction`).
    tx_committed: bool,
    /// A SAVEPOINT, ROLLBACK TO or RELEASE ran in the open transaction (in a Query, or a
    /// Bind of one): a session SET after it pins the session (`note_effects`).
    savepoint_in_tx: bool,
    /// Portals bound to a client statement that changes a setting ([`ClientStatement::set`]),
    /// by name: an Execute of one records the change when it completes. An entry goes when
    /// its portal is bound again or closed. (Not when its transaction ends, which is learnt
    /// from replies, after later messages were translated: an Execute of a portal that ended
    /// fails upstream, and a failed Execute records nothing.) At most [`PORTAL_SETS_MAX`].
    portal_sets: Vec<(Box<str>, SetChange)>,
    /// The session holds state only its connection has: never give the connection back.
    pinned: bool,
    /// The open transaction (or the batch's implicit one) ran code stored upstream that may
    /// have changed settings unseen ([`runs_user_code`]): when the connection goes back
    /// (`give_back`, `close`) its settings are marked unknown, so its next user, this client
    /// included, replays.
    ran_user_code: bool,
    /// Code stored upstream ran since the last [`TIDY`] was queued (`queue_tidy`): what else
    /// it left in the session is undone before the connection goes back.
    untidied: bool,
    /// A Query of this batch changes settings (SET, RESET, DISCARD ALL): they are not settled
    /// until it completes, so a tidy queued in this batch cannot replay them (`queue_tidy`).
    batch_sets: bool,
    /// A tidy with the settings failed other than by a cancel: later ones go without them.
    tidy_without_settings: bool,
    expect: VecDeque<Expect>,
    /// The first `must_answer` entries of `expect` will be answered without more client input
    /// (the client sent Sync, Flush or a Query after them).
    must_answer: usize,
    copy_in: bool,
    /// A reply made here was an error: drop client messages until Sync, as the server would.
    skip_until_sync: bool,
    /// The held connection sent something while the client was idle that `relay_idle` leaves
    /// for the next batch (a FATAL, end of stream): stop reading it until then.
    idle_watch_off: bool,
    /// The connection of a pinned session was lost mid-batch: the FATAL that ends the
    /// client's session when the batch returns, and how much of `out` to send before it (the
    /// replies that came before the loss). See `upstream_lost`.
    pinned_lost: Option<(usize, PgError)>,
    /// Extended-protocol messages were relayed that no Sync (or Query) has closed yet, e.g.
    /// Parse/Bind/Flush with the Execute to come: the server holds their implicit
    /// transaction and unnamed portal, so the connection stays with this client until then.
    unsynced: bool,
    to_send: Vec<u8>,
    /// The value of each reported parameter as this client was last shown it (startup, then
    /// ParameterStatus). A pooled connection's own changes (the settings replay's RESET ALL
    /// putting back another client's application_name) reach the client only where they
    /// change what it was shown, as PostgreSQL would report them.
    shown: Vec<(Box<str>, Box<str>)>,
    /// Work that may have written was sent since the last WAL position learnt: the next
    /// commit needs its position.
    wrote: bool,
    /// While translating a batch: whether a transaction block will be open after the
    /// messages so far, and whether that prediction is sure.
    predicted_open: bool,
    prediction_sure: bool,
    /// [`Done::Lsn`] entries in `expect`: the replies before them are held until they answer.
    lsn_outstanding: usize,
    /// The value in the [`Done::Lsn`] reply being read.
    lsn_seen: Option<u64>,
    /// A ReadyForQuery `I` ended a transaction that may have written and no WAL position was
    /// queued behind it: ask for it before the replies are released.
    commit_unrecorded: bool,
    /// The batch runs on this replica.
    replica_read: Option<usize>,
    /// Some replies of this batch were written to the client already.
    flushed_mid_batch: bool,
    /// The replica read failed before any reply reached the client: run it on the primary
    /// (and take the replica out of rotation if `.0`).
    retry_on_primary: Option<(bool, String)>,
    /// Names of the client statements this batch's Parses made, undone if it runs again.
    batch_parsed: Vec<Box<str>>,
    /// Portals this batch bound from client statements, by name.
    batch_binds: Vec<(Box<str>, Rc<ClientStatement>)>,
    /// Client statements a portal of which this batch describes after binding it: their
    /// client reads this batch's results by the description it gets in it.
    batch_described: Vec<Rc<ClientStatement>>,
    /// With statements refused on this shard: the names of the client statements this batch
    /// binds and then describes the portal of (`self_described`), read before translating.
    self_described_names: Vec<Box<str>>,
    /// An Execute or Query of this batch was answered.
    batch_ran: bool,
    /// A Bind or Describe of this batch failed on an upstream statement the server refused
    /// to reuse (0A000), before anything of the batch ran or reached the client: the batch
    /// may run again on the statement prepared afresh (`relay_part`).
    rerun_refused: bool,
    /// The session's read-only transaction moved here from a replica (`move_replica_tx`):
    /// the next batch begins it again on its connection first (`run_batch`).
    begin_again: Option<String>,
    /// The statements of the session's movable replica transaction (`ReplicaTx::movable`)
    /// that a move to the primary runs again after its BEGIN (`SET LOCAL`, savepoints:
    /// `classify::movable_in_transaction`), each ending in `"\n;"`; and those of the running
    /// batch, added once it leaves the transaction movable.
    moved_replay: String,
    moved_replay_next: String,
    /// A batch runs again on the primary after a replica refused it: not counted twice.
    recounting: bool,
    /// `None`: strict reads. `Some(bound)`: reads may miss commits this old (`serializable`
    /// or `ringwire.max_replica_lag_ms`).
    staleness: Option<Duration>,
    /// `default_transaction_isolation` is serializable, which a hot standby refuses: replica
    /// connections get `repeatable read` instead (the same for a read-only statement).
    serializable: bool,
    /// The session's `default_transaction_read_only` and `default_transaction_isolation`:
    /// what a plain `BEGIN` starts.
    default_read_only: bool,
    default_isolation: DefaultIsolation,
    /// The open transaction is read-only and runs on a replica; `server` is that replica's.
    replica_tx: Option<ReplicaTx>,
    /// The primary connection (`ServerConn::serial`) this client's latest batch of its own
    /// ran on (0: none yet): where its latest `nextval` may have run. (Pipelined units name no
    /// sequence function.)
    last_conn: u64,
    /// Whether the batch being relayed names `lastval` or `currval`, once asked
    /// ([`Session::reads_sequence_state`]).
    sequence_use: Option<bool>,
}

/// How long a login waits for a connection to check its startup parameters on (see
/// [`Session::admit`]) before it is let in unchecked.
const STARTUP_CHECK_WAIT: Duration = Duration::from_secs(1);

/// The settings' fingerprint: 0 for none, else odd (never [`SETTINGS_UNKNOWN`]).
fn fingerprint(startup: &[(String, String)], sets: &[(String, String)]) -> u64 {
    if startup.is_empty() && sets.is_empty() {
        return 0;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    startup.hash(&mut h);
    sets.hash(&mut h);
    h.finish() | 1
}

/// `changes`, in order, applied to the committed SETs `sets` (by lower-cased name).
fn apply_set_changes(
    sets: &mut Vec<(String, String)>,
    changes: impl IntoIterator<Item = SetChange>,
) {
    for change in changes {
        match change {
            SetChange::Set(name, stmt) => {
                sets.retain(|(n, _)| *n != name);
                sets.push((name, stmt));
            }
            SetChange::Reset(name) => sets.retain(|(n, _)| *n != name),
            SetChange::ResetAll => sets.clear(),
        }
    }
}

/// `v` as a string literal that reads the same whatever `standard_conforming_strings` is (a
/// startup parameter may turn it off before the others are replayed, and then a backslash in
/// a plain literal would escape its closing quote): with a backslash, an `E''` literal with
/// backslashes doubled, as PostgreSQL's own `quote_literal` writes it.
fn quote_literal(v: &str) -> String {
    let quoted = v.replace('\'', "''");
    if v.contains('\\') {
        format!("E'{}'", quoted.replace('\\', "\\\\"))
    } else {
        format!("'{quoted}'")
    }
}

/// The statement that gives a connection the startup parameter `name` (lower-cased) =
/// `value` as PostgreSQL's startup would: `set_config`, which reads the string as startup
/// does (a list setting's `search_path=a,b` is two schemas, where `SET search_path TO 'a,b'`
/// is one) and takes any name as a string, so that a name no SET can spell (`9x.y`,
/// `select.x`, `a b`) gets the server's own answer (42602 "invalid configuration parameter
/// name", a placeholder, 42704) as at PostgreSQL's login. ([`setting_value`] reads it.)
fn startup_set(name: &str, value: &str) -> String {
    format!(
        "SELECT pg_catalog.set_config({}, {}, false)",
        quote_literal(name),
        quote_literal(value)
    )
}

/// 42602 at `name` for a placeholder whose prefix a library loaded on this connection
/// reserved (`"plpgsql" is a reserved prefix.`), not on a fresh backend. The same SQLSTATE
/// for a name no backend takes (`9x.y`) is told apart by the name, not by the message, which
/// the server's `lc_messages` may translate.
fn reserved_prefix(name: &str, e: &LoginError) -> bool {
    e.code.as_str() == "42602" && valid_custom_name(name)
}

/// PostgreSQL's rule for a custom parameter's name: two or more parts separated by dots, each
/// a letter, `_` or non-ASCII byte followed by those, digits or `$`.
fn valid_custom_name(name: &str) -> bool {
    let part_ok = |part: &str| {
        let mut bytes = part.bytes();
        bytes
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b >= 0x80)
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80)
    };
    name.contains('.') && name.split('.').all(part_ok)
}

/// Whether `e` is the FATAL an upstream backend sends when
/// `idle_in_transaction_session_timeout`, `idle_session_timeout` or (PostgreSQL 17+)
/// `transaction_timeout` ends its session (`Session::relay_idle`).
fn ended_by_idle_timeout(e: &PgError) -> bool {
    let timeouts = [
        SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
        SqlState::IDLE_SESSION_TIMEOUT,
        SqlState::TRANSACTION_TIMEOUT,
    ];
    timeouts.contains(&e.code)
}

/// The ErrorResponse in `raw` (one whole message), as an error of ringwire's own.
fn upstream_error(raw: &[u8]) -> Option<PgError> {
    let frame = split_frame(raw, usize::MAX).ok()??.0;
    match protocol::backend::BackendMessage::parse(frame) {
        Ok(protocol::backend::BackendMessage::ErrorResponse(fields)) => Some(fields.to_pg_error()),
        _ => None,
    }
}

fn lost(why: &str) -> PgError {
    PgError::new(
        SqlState::CONNECTION_FAILURE,
        format!("the connection to the upstream server was lost: {why}"),
    )
}

/// `e`, as the FATAL that ends a pinned session whose connection is gone.
fn pinned_state_lost(e: PgError) -> PgError {
    PgError {
        severity: Severity::Fatal,
        ..e
    }
    .with_detail(
        "This session's state (LISTEN, temporary tables, session advisory locks, SET ROLE, \
         prepared statements) was on that upstream connection and is gone with it.",
    )
}

/// What the settings replay runs after its `RESET ALL`, in order, and how many of them lead
/// in ringwire's own text (built from startup parameters, literals quoted), which a tidy
/// may carry in its own Query (`Session::queue_tidy`); the client's SETs follow, as it wrote
/// them.
fn replay_statements<'a>(
    startup_sets: &'a [(String, String)],
    startup_values: &[(String, String)],
    sets: &'a [(String, String)],
    replica_cap: bool,
) -> (Vec<Cow<'a, str>>, usize) {
    let serializable_on_replica = replica_cap
        // "cannot use serializable mode in a hot standby"; a read-only statement sees the
        // same at repeatable read (one snapshot either way).
        .then_some("SET default_transaction_isolation = 'repeatable read'");
    // A startup `application_name` (most drivers send one) is replayed as a SET: a plain
    // string setting reads the same either way (PostgreSQL's own hook cleans it for
    // both), and a SET cost the upstream half what the `set_config` SELECT did (PERF.md,
    // session 20). The login check keeps `set_config`, whose answer is the value
    // PostgreSQL shows. (Given twice, in the packet and in `options`, the last wins, as
    // it did when each was replayed.)
    let application_name = startup_values
        .iter()
        .rev()
        .find(|(n, _)| n == "application_name")
        .map(|(_, v)| format!("SET application_name TO {}", quote_literal(v)));
    let mut statements: Vec<Cow<'a, str>> = startup_sets
        .iter()
        .map(|(name, stmt)| match (name.as_str(), &application_name) {
            ("application_name", Some(set)) => Cow::Owned(set.clone()),
            _ => Cow::Borrowed(stmt.as_str()),
        })
        .collect();
    let startup = statements.len();
    statements.extend(sets.iter().map(|(_, stmt)| Cow::Borrowed(stmt.as_str())));
    statements.extend(serializable_on_replica.map(Cow::Borrowed));
    // (The replica's cap is ringwire's too, but leads only where no client SET is before.)
    let own = if sets.is_empty() {
        statements.len()
    } else {
        startup
    };
    (statements, own)
}

/// Queue `statements`, each a Query of its own with its replies swallowed (see
/// `Session::queue_settings_replay`), the last marking the connection with the settings `fp`.
fn queue_replay<S: AsRef<str>>(
    to_send: &mut Vec<u8>,
    expect: &mut VecDeque<Expect>,
    statements: &[S],
    fp: u64,
) {
    for (i, statement) in statements.iter().enumerate() {
        frontend::encode_query(to_send, statement.as_ref());
        let done = if i + 1 == statements.len() {
            Done::Settings(fp)
        } else {
            Done::Replayed
        };
        expect.push_back(Expect::Server {
            kind: Kind::Query,
            emit: false,
            done,
        });
    }
}

impl Session {
    pub fn open(shard: Rc<ShardUpstream>, start: &SessionStart<'_>) -> Result<Session, PgError> {
        let mut startup_sets = Vec::new();
        let mut startup_values = Vec::new();
        let mut startup_checks = Vec::new();
        let mut add = |name: &str, value: &str| {
            let lower = name.to_ascii_lowercase();
            if lower == "session_authorization" {
                // Refused as at PostgreSQL's login (no such role; a user who may not take
                // it), else without effect: the backend's own login user overrides it.
                startup_checks.push(format!(
                    "{}; RESET session_authorization",
                    startup_set(&lower, value)
                ));
                return;
            }
            startup_sets.push((lower.clone(), startup_set(&lower, value)));
            startup_values.push((lower, value.to_string()));
        };
        for (name, value) in start.params.iter() {
            match name {
                "user" | "database" | "replication" => {}
                // Protocol options, not settings (the client got NegotiateProtocolVersion).
                name if name.starts_with("_pq_.") => {}
                "options" => {
                    // `-c name=value` and `--name=value`, as PostgreSQL reads them (the
                    // embedded engine's reader: a malformed word is the login's FATAL).
                    for (n, v) in crate::engine::parse_options(value)? {
                        add(&n, &v);
                    }
                }
                _ => add(name, value),
            }
        }
        // The replay's statements are read in the connection's client encoding: a startup
        // `client_encoding` is replayed after the others (but for the one below), so they are
        // read as the connection's own encoding reads them (ringwire's, UTF-8), not as
        // EUC_JP, say.
        // A transaction's own characteristics come first: PostgreSQL checks them against the
        // server's defaults, before any other startup parameter (`default_transaction_*`)
        // could change those (`check_startup_settings`).
        // A `default_transaction_isolation` comes after everything: the replay's
        // `set_config`s are SELECTs, which take a snapshot, and on a hot standby a snapshot
        // at serializable fails (0A000); the replica replay ends by lowering it (see
        // `queue_settings_replay`).
        startup_sets.sort_by_key(|(name, _)| {
            (
                !is_transaction_characteristic(name),
                name == "default_transaction_isolation",
                name == "client_encoding",
            )
        });
        // A startup `role` (`options=-c role=x`) is replayed as a SET that RESET ALL does not
        // undo: the session keeps its connection, as a SET ROLE would.
        // So does a startup `search_path` naming `pg_temp` (its tables would be temporary), and
        // a startup `standard_conforming_strings` off (the scan could misread its literals).
        let pinned = startup_sets.iter().any(|(name, value)| {
            sets_identity(name)
                || startup_creates_temp_objects(name, value)
                || startup_changes_lexing(name, value)
        });
        let settings = fingerprint(&startup_sets, &[]);
        let (staleness, serializable) = read_rules(&startup_sets, &[]);
        let (default_read_only, default_isolation) = tx_defaults(&startup_sets, &[]);
        Counters::bump(&shard.counters.clients);
        let (key, credential) = match shard.login {
            UpstreamLogin::Client => (
                PoolKey {
                    user: start.user.into(),
                    database: start.database.into(),
                },
                Rc::new(start.credential.clone()),
            ),
            UpstreamLogin::Url => shard.url_login.clone(),
        };
        let primary = shard.pool(Host::Primary, &key);
        let mut session = Session {
            id: shard.session_id(),
            client_pid: start.process_id,
            parameters: shard.parameters.clone(),
            key,
            credential,
            primary,
            shard,
            server: None,
            spare_buf: None,
            tx: b'I',
            statements: Default::default(),
            startup_sets,
            startup_checks,
            startup_values,
            sets: Vec::new(),
            settings,
            pending_sets: Vec::new(),
            tx_rolled_back: false,
            tx_committed: false,
            savepoint_in_tx: false,
            portal_sets: Vec::new(),
            pinned,
            ran_user_code: false,
            untidied: false,
            batch_sets: false,
            tidy_without_settings: false,
            expect: VecDeque::new(),
            must_answer: 0,
            copy_in: false,
            skip_until_sync: false,
            unsynced: false,
            idle_watch_off: false,
            pinned_lost: None,
            to_send: Vec::new(),
            wrote: false,
            predicted_open: false,
            prediction_sure: true,
            lsn_outstanding: 0,
            lsn_seen: None,
            commit_unrecorded: false,
            replica_read: None,
            flushed_mid_batch: false,
            retry_on_primary: None,
            batch_parsed: Vec::new(),
            batch_binds: Vec::new(),
            batch_described: Vec::new(),
            self_described_names: Vec::new(),
            batch_ran: false,
            rerun_refused: false,
            begin_again: None,
            moved_replay: String::new(),
            moved_replay_next: String::new(),
            recounting: false,
            staleness,
            serializable,
            default_read_only,
            default_isolation,
            replica_tx: None,
            shown: Vec::new(),
            last_conn: 0,
            sequence_use: None,
        };
        session.show_startup_parameters();
        Ok(session)
    }

    fn show_startup_parameters(&mut self) {
        self.shown = self
            .parameters
            .iter()
            .map(|(name, value)| {
                let value = self.startup_value(name).unwrap_or(value);
                (name.as_str().into(), value.into())
            })
            .collect();
    }

    /// Before the client is told it is in: make sure its user can log in upstream on its
    /// database, and that the server takes its startup parameters, as PostgreSQL checks both
    /// at login.
    ///
    /// The first client of a (user, database) on this shard opens a connection for it (kept
    /// in the pool); the server's refusal becomes this client's FATAL with the server's
    /// SQLSTATE and message (08006 if it cannot be reached). Later clients of a key that
    /// logged in once pass without a round trip (their credential is as good: ringwire
    /// checked it against the same stored secret). With `--upstream-login url` no login is
    /// checked (`main` logged in as the URL's user at startup).
    ///
    /// Startup parameters (`options=-c work_mem=…`, `application_name`…) are given to a
    /// connection as the settings replay would (see [`Session::check_startup_settings`]); one
    /// the server refuses fails the login with its error, where before it was a warning on
    /// every statement. A set of parameters that passed is remembered per key, so only the
    /// first login with it pays the round trip. One naming a role or session authorization
    /// is checked at every login (membership can be revoked) and waits for a connection as a
    /// first login does. Any other login that cannot have a connection within
    /// [`STARTUP_CHECK_WAIT`] (all busy, or the server unreachable) is let in unchecked: the
    /// settings replay still reports a refusal, as a warning.
    pub async fn admit(&mut self) -> Result<(), PgError> {
        let first_login =
            self.shard.login == UpstreamLogin::Client && self.primary.parameters.borrow().is_none();
        let identity = !self.startup_checks.is_empty()
            || self
                .startup_sets
                .iter()
                .any(|(name, _)| sets_identity(name));
        let remembered = self
            .primary
            .accepted_settings
            .borrow()
            .get(&self.settings)
            .cloned();
        let check = identity || !self.startup_sets.is_empty() && remembered.is_none();
        if let Some(values) = remembered {
            self.startup_values = values.to_vec();
        }
        if first_login || identity {
            let conn = self
                .primary
                .acquire(self.settings, 0, &self.credential, None)
                .await
                .map_err(|e| {
                    log::info!(
                        "upstream login as user {:?}, database {:?} failed: {e}",
                        self.key.user,
                        self.key.database
                    );
                    e.to_fatal()
                })?;
            if check {
                self.check_startup_settings(conn, !identity).await?;
            } else {
                self.shard.release(conn);
            }
        } else if check {
            let acquire = self
                .primary
                .acquire(self.settings, 0, &self.credential, None);
            let waited = futures_lite::future::or(async { Some(acquire.await) }, async {
                glommio::timer::sleep(STARTUP_CHECK_WAIT).await;
                None
            })
            .await;
            match waited {
                Some(Ok(conn)) => self.check_startup_settings(conn, !identity).await?,
                Some(Err(e)) => log::info!("startup parameters not checked upstream: {e}"),
                None => log::info!(
                    "startup parameters not checked upstream: no connection within \
                     {STARTUP_CHECK_WAIT:?}"
                ),
            }
        }
        if let Some(parameters) = self.primary.parameters.borrow().clone() {
            self.parameters = parameters;
        }
        self.show_startup_parameters();
        Ok(())
    }

    /// Run this client's startup parameters on `conn` as the settings replay does (`RESET
    /// ALL`, then each its own Query). A refusal is the login's FATAL, with the server's
    /// SQLSTATE and message (PostgreSQL's own at startup: `invalid value for parameter
    /// "work_mem": "banana"`, `unrecognized configuration parameter`, `permission denied to
    /// set parameter`), and also for a parameter only a backend's start can set (55P02,
    /// `log_connections`), which no pooled connection can be given. Two refusals are not
    /// the login's: `temp_tablespaces` naming no tablespace (PostgreSQL ignores that at
    /// startup, refuses it in a SET) and 42602 for a placeholder prefix reserved because a
    /// library was loaded on this connection, not on a fresh backend ([`reserved_prefix`]);
    /// those stay warnings on the client's statements, as before.
    ///
    /// The connection then goes back to the pool: with the settings in effect after a pass,
    /// marked [`SETTINGS_UNKNOWN`] after a refusal. A session pinned from its startup (a
    /// `role`, which `RESET ALL` does not undo; `standard_conforming_strings` off) keeps it
    /// as its own after a pass (since session 18; before, it was closed and the session
    /// opened another at its first statement), and closes it after a refusal.
    /// `remember`: a pass goes into the key's accepted sets (not for a role: see `admit`).
    async fn check_startup_settings(
        &mut self,
        mut conn: ServerConn,
        remember: bool,
    ) -> Result<(), PgError> {
        // These simple Queries replace the server's unnamed statement.
        conn.statements.set_unnamed(None);
        let (stream, buf) = conn.own_io().expect("a pool hands out whole connections");
        // A transaction's own characteristics are set at PostgreSQL's login inside the
        // transaction that reads the catalogs, after its first snapshot: a value other than
        // the server's defaults is refused there (25001, "SET TRANSACTION ISOLATION LEVEL
        // must be called before any query"), and one that passes lasts no longer than that
        // transaction. The same SET after a query in one implicit transaction (`SELECT; SET …`
        // as one Query: an error rolls it back and leaves the connection idle, where an
        // explicit BEGIN would leave it in a failed block) gets the same answer from the
        // server. (`open` puts them first.)
        let sets: Vec<String> = self
            .startup_sets
            .iter()
            .map(|(name, stmt)| {
                if is_transaction_characteristic(name) {
                    format!("SELECT; {stmt}")
                } else {
                    stmt.clone()
                }
            })
            .collect();
        // Each its own Query, as the settings replay runs them, all in one round trip: the
        // first refusal, in the order PostgreSQL applies them, is the login's (what ran after
        // it does not matter: the connection's settings are then marked unknown).
        let statements: Vec<&str> = std::iter::once("RESET ALL")
            .chain(self.startup_checks.iter().map(String::as_str))
            .chain(sets.iter().map(String::as_str))
            .collect();
        let answers = simple_values(stream, buf, &statements).await;
        let first_set = 1 + self.startup_checks.len();
        let mut refusal = None;
        for (i, answer) in answers.into_iter().enumerate() {
            let name = i
                .checked_sub(first_set)
                .map(|k| self.startup_sets[k].0.as_str());
            match (answer, name) {
                (Ok(shown), Some(name)) => {
                    // `set_config` returns the value as the server shows it. (A parameter
                    // given twice: its last value, answered last, is what the session has.)
                    if let (Some(shown), false) = (shown, is_transaction_characteristic(name)) {
                        if let Some((_, v)) = self
                            .startup_values
                            .iter_mut()
                            .rev()
                            .find(|(n, _)| n == name)
                        {
                            *v = shown;
                        }
                    }
                }
                (Ok(_), None) => {}
                (Err(e), Some(name))
                    if reserved_prefix(name, &e)
                        || name == "temp_tablespaces" && !passes_over(&e) =>
                {
                    log::info!("startup parameter {name:?} refused upstream, kept: {e}");
                }
                (Err(e), name) => {
                    log::info!("startup parameter {name:?} refused upstream: {e}");
                    refusal = Some(e);
                    break;
                }
            }
        }
        let Some(e) = refusal else {
            if remember {
                let mut accepted = self.primary.accepted_settings.borrow_mut();
                if accepted.len() >= ACCEPTED_MAX {
                    accepted.clear();
                }
                accepted.insert(self.settings, Rc::from(self.startup_values.as_slice()));
            }
            conn.settings = self.settings;
            if self.pinned {
                // The session's own from now on, as the one it would open at its first
                // statement would be: the check just gave it the session's settings.
                self.server = Some(conn);
            } else {
                self.shard.release(conn);
            }
            return Ok(());
        };
        if !self.pinned && !passes_over(&e) {
            // The server answered and is idle again; what of these settings took is unknown.
            conn.settings = SETTINGS_UNKNOWN;
            self.shard.release(conn);
        }
        let fatal = e.to_fatal();
        Err(if e.message.ends_with("after connection start") {
            fatal.with_detail(
                "ringwire's pooled upstream connections are started by ringwire: a parameter \
                 that only a connection's start can set cannot be given to them.",
            )
        } else {
            fatal
        })
    }

    /// Recompute what follows from the settings (`startup_sets`, `sets`).
    fn settings_changed(&mut self) {
        self.settings = fingerprint(&self.startup_sets, &self.sets);
        (self.staleness, self.serializable) = read_rules(&self.startup_sets, &self.sets);
        (self.default_read_only, self.default_isolation) =
            tx_defaults(&self.startup_sets, &self.sets);
    }

    /// The ParameterStatus values this client was told at startup (and since).
    pub fn shown(&self) -> impl Iterator<Item = (&str, &str)> {
        self.shown.iter().map(|(n, v)| (&**n, &**v))
    }
}

/// What code stored upstream can leave in its backend's session besides settings, undone
/// before the connection goes to another client. None of it is undone by `RESET ALL`, and
/// each would reach the next client: `SET ROLE` or `SET SESSION AUTHORIZATION` (it would run
/// as that role), `WITH HOLD` cursors, `LISTEN` (its notifications), temporary tables and
/// their rows, session advisory locks (and an idle pooled connection holding one blocks
/// everyone else's). With `RESET ALL` it is PostgreSQL's `DISCARD ALL` less `DEALLOCATE ALL`
/// (ringwire's statements), `DISCARD PLANS` and `DISCARD SEQUENCES`
/// (`Session::keep_sequence_state_own` covers those). One Query, none of which fails on an
/// idle connection (a read-only default included); the session authorization first, so that
/// the rest runs as the login user, and the function qualified (the code may have left a
/// `search_path` with a function of that name in front). Sent right behind the client's
/// statement when the session is surely idle after it, with `RESET ALL` and the session's
/// settings where it can (`Session::queue_tidy`), else by [`tidy_and_release`].
const TIDY: &str = "RESET SESSION AUTHORIZATION; RESET ROLE; CLOSE ALL; UNLISTEN *; DISCARD TEMP; \
                    SELECT pg_catalog.pg_advisory_unlock_all()";

/// Put `server` back in the pool after a round trip that makes it fit for its next user, on a
/// task of its own (the client does not wait): `ROLLBACK` of the transaction a departed client
/// left open, and `RESET ALL` and [`TIDY`] if code stored upstream ran on it untidied (`RESET
/// ALL` first undoes a `statement_timeout` the code set). Bounded like a health check: a
/// backend that does not answer (a hung one, a host gone without a FIN) must not keep the
/// slot. One that fails is closed, which rolls back and ends everything its session held.
fn tidy_and_release(shard: Rc<ShardUpstream>, mut server: ServerConn, rollback: bool, tidy: bool) {
    let limit = shard.config.timers.check_timeout;
    glommio::spawn_local(async move {
        let tidied = super::replica::with_timeout("tidying", limit, async {
            let reset = format!("RESET ALL; {TIDY}");
            let statements: Vec<&str> = [("ROLLBACK", rollback), (reset.as_str(), tidy)]
                .into_iter()
                .filter_map(|(sql, wanted)| wanted.then_some(sql))
                .collect();
            let (stream, buf) = server.own_io().expect("tidied connections are whole");
            let answers = simple_values(stream, buf, &statements).await;
            // Simple Queries replace the server's unnamed statement.
            server.statements.set_unnamed(None);
            if answers.len() < statements.len() {
                let why = answers.into_iter().find_map(Result::err);
                return Err(why.map_or_else(|| "the connection broke".into(), String::from));
            }
            answers
                .into_iter()
                .try_for_each(|a| a.map(drop).map_err(String::from))
        })
        .await;
        match tidied {
            Ok(()) => {
                if tidy {
                    // (RESET ALL ran: the connection is at the server's defaults.)
                    server.settings = 0;
                }
                shard.release(server);
            }
            Err(why) => log::warn!(
                "upstream connection {} closed after its client's use: {why}",
                server.process_id
            ),
        }
    })
    .detach();
}

impl Drop for Session {
    /// The client-connections gauge counts sessions alive, however their connection ended
    /// (`close` is not reached when the connection's task is dropped).
    fn drop(&mut self) {
        let clients = &self.shard.counters.clients;
        clients.set(clients.get().saturating_sub(1));
    }
}

/// Pass on a notice or a notification. A notification the session's own upstream backend
/// sent (its NOTIFY, heard by its own LISTEN: the session is pinned, so that backend is its
/// alone) names that backend's process id, which the client never saw: it gets the one
/// ringwire gave it in BackendKeyData, which is what it compares with to skip its own
/// notifications (libpq's `PQbackendPID`, as PostgreSQL's NOTIFY documentation suggests).
/// Other sessions' notifications keep their upstream backends' ids, as through PgBouncer.
fn relay_unasked(out: &mut Vec<u8>, raw: &[u8], upstream_pid: i32, client_pid: i32) {
    let at = out.len();
    out.extend_from_slice(raw);
    if raw.first() == Some(&b'A') && raw.get(5..9) == Some(&upstream_pid.to_be_bytes()[..]) {
        out[at + 5..at + 9].copy_from_slice(&client_pid.to_be_bytes());
    }
}

/// Whether a ParameterStatus from the server tells the client something `shown` does not
/// have; records it there.
fn news(shown: &mut Vec<(Box<str>, Box<str>)>, raw: &[u8]) -> bool {
    let mut fields = raw.get(5..).unwrap_or_default().split(|&b| b == 0);
    let (Some(name), Some(value)) = (fields.next(), fields.next()) else {
        return true;
    };
    let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
        return true;
    };
    match shown.iter_mut().find(|(n, _)| &**n == name) {
        Some((_, shown)) if &**shown == value => false,
        Some((_, shown)) => {
            *shown = value.into();
            true
        }
        None => {
            shown.push((name.into(), value.into()));
            true
        }
    }
}

impl Session {
    /// A startup parameter's value for the ParameterStatus the client is shown (see
    /// `startup_values`).
    /// The value the client's startup gave `name`: the last, as PostgreSQL takes it.
    fn startup_value(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.startup_values
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The client is gone. A clean connection goes back to the pool; one in a transaction, or
    /// one that code stored upstream left untidied, is put right first ([`tidy_and_release`]);
    /// one with replies outstanding or pinned state is closed, which makes the server roll
    /// back and ends its session.
    pub fn close(&mut self) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        self.forget_user_code(&mut server);
        let tidy = std::mem::take(&mut self.untidied);
        // A server skipping messages until a Sync the client never sent is not clean either,
        // nor one holding extended-protocol work that no Sync closed (a Sync would commit it).
        if !self.settled() || self.pinned {
            return;
        }
        let rollback = self.tx != b'I';
        match server.link {
            Link::Own(_) if rollback || tidy => {
                tidy_and_release(self.shard.clone(), server, rollback, tidy);
            }
            _ if !rollback => self.shard.release(server),
            // A share of a pipe holds no transaction (autocommit units only): not reached.
            _ => {}
        }
    }

    /// See [`shards::engine::Engine::relay`].
    ///
    /// A batch is relayed in parts only where a read-only transaction on a replica ends
    /// inside it: what follows the end is routed afresh (it must not run on the replica
    /// unchecked), one round trip later.
    pub async fn relay(
        &mut self,
        frames: &[u8],
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn AsyncWrite + Unpin),
    ) -> Result<(), PgError> {
        self.idle_watch_off = false;
        let mut rest = frames;
        loop {
            let used = self.relay_part(rest, cancel, out, client).await?;
            if let Some((cut, fatal)) = self.pinned_lost.take() {
                out.truncate(cut);
                return Err(fatal);
            }
            debug_assert!(used <= rest.len() && (used > 0 || rest.is_empty()));
            rest = &rest[used.min(rest.len())..];
            if rest.is_empty() || used == 0 {
                return Ok(());
            }
        }
    }

    /// Relay the first part of `frames` (all of it unless a replica transaction ends inside);
    /// returns the bytes relayed.
    async fn relay_part(
        &mut self,
        frames: &[u8],
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn AsyncWrite + Unpin),
    ) -> Result<usize, PgError> {
        let mut frames = frames;
        let mut replica = None;
        self.sequence_use = None;
        if self
            .server
            .as_ref()
            .is_some_and(|s| s.host != Host::Primary)
        {
            match self.replica_tx {
                Some(tx) => match self.continue_replica_tx(frames, tx).await {
                    Ok(ReplicaStep::Run(part)) => {
                        frames = &frames[..part];
                        replica = Some(tx.replica);
                    }
                    Ok(ReplicaStep::Move(why)) => self.move_replica_tx(why),
                    Err(e) => {
                        self.abandon_replica_tx(frames, out, e);
                        return Ok(frames.len());
                    }
                },
                None => {
                    // Outside a read-only transaction a replica connection is never kept past
                    // a batch (replica reads are autocommit work ending in Sync/Query); if one
                    // were, this batch must not run on it unchecked.
                    debug_assert!(false, "a replica connection was held past its batch");
                    if self.idle_and_unpinned() {
                        if let Some(server) = self.server.take() {
                            self.give_back(server);
                        }
                    }
                }
            }
        }
        if self.server.is_none() {
            // Nothing of this client runs upstream: a cancel that came before this batch was
            // for no statement (PostgreSQL ignores those); one that comes while the batch
            // waits for a connection ends it.
            cancel.reset();
            if let Some((i, each_statement, part, read_committed)) =
                self.pick_replica_tx(frames).await
            {
                match self
                    .take_connection(Host::Replica(i), None, 0, Some(cancel))
                    .await
                {
                    Ok(()) => {
                        let server = self.server.as_ref().expect("taken");
                        let movable = each_statement
                            && read_committed.unwrap_or(server.read_committed_default);
                        // (What a long transaction left is not kept for the session's life.)
                        for replay in [&mut self.moved_replay, &mut self.moved_replay_next] {
                            replay.clear();
                            replay.shrink_to(MOVED_REPLAY_KEPT);
                        }
                        let batch = self.scan_for_move(&frames[..part], movable);
                        let movable_after = batch.is_some_and(|b| b.leaves_nothing);
                        let ran_after = batch.is_some_and(|b| b.snapshot);
                        self.replica_tx = Some(ReplicaTx {
                            replica: i,
                            each_statement,
                            first_batch: true,
                            movable,
                            movable_after,
                            ran: false,
                            ran_after,
                            rerunnable: false,
                        });
                        Counters::bump(&self.shard.counters.replica_transactions);
                        frames = &frames[..part];
                        replica = Some(i);
                    }
                    Err(e) if e.local => {
                        self.fail_locally(frames, out, e.to_error());
                        return Ok(frames.len());
                    }
                    Err(e) => self.replica_unusable(i, e),
                }
            }
        }
        if self.server.is_none() {
            replica = self.pick_replica(frames).await;
            let unit = self.pipelinable(frames);
            if let Some(i) = replica {
                match self
                    .take_connection(Host::Replica(i), unit, 0, Some(cancel))
                    .await
                {
                    Ok(()) => Counters::bump(&self.shard.counters.replica_reads),
                    Err(e) if e.local => {
                        self.fail_locally(frames, out, e.to_error());
                        return Ok(frames.len());
                    }
                    Err(e) => {
                        self.replica_unusable(i, e);
                        replica = None;
                    }
                }
            }
            if self.server.is_none() && !self.acquire_primary(frames, unit, cancel, out).await {
                return Ok(frames.len());
            }
        }
        let out_start = out.len();
        // A retry parses the batch's statements again: undo what the first attempt did to
        // the client's statement names.
        let saved_statements = replica
            .filter(|_| frames_name_statements(frames))
            .map(|_| self.statements.clone());
        self.replica_read = replica;
        self.flushed_mid_batch = false;
        // Nothing of an earlier batch is in the implicit transaction this one runs in.
        let unit_start = self.at_unit_start();
        self.run_batch(frames, cancel, out, client).await?;
        if let Some((replica_down, why)) = self.retry_on_primary.take() {
            let i = replica.expect("only replica reads are retried");
            if replica_down {
                self.shard.replica_failed(i, &why);
            }
            log::debug!("replica read retried on the primary: {why}");
            Counters::bump(&self.shard.counters.replica_retries);
            out.truncate(out_start);
            if let Some(saved) = saved_statements {
                self.statements = saved;
            }
            // Before the batch, the session was idle, or in a movable transaction: no session
            // SET or error in it yet (the standby's error marked it rolled back), but perhaps
            // a savepoint, which the move replays. (Kept even if only this batch set one: at
            // worst a later SET in the transaction pins the session, `note_effects`.)
            let savepoint = self.savepoint_in_tx;
            self.forget_transaction_state();
            let moved = self.replica_tx.is_some_and(|tx| !tx.first_batch);
            if moved {
                // A later batch of a movable transaction (`ReplicaTx::rerunnable`): the
                // transaction goes on at the primary, this batch first.
                self.move_replica_tx(&why);
                self.tx = b'T';
                self.savepoint_in_tx = savepoint;
            } else {
                // (The first batch of a replica transaction: it never started for the
                // client.)
                self.replica_tx = None;
            }
            if let Some(server) = self.server.take() {
                if self.settled() && self.tx == b'I' {
                    self.give_back(server);
                }
            }
            // The batch runs again from the state it started in.
            self.skip_until_sync = false;
            self.unsynced = false;
            self.expect.clear();
            self.must_answer = 0;
            self.replica_read = None;
            // The standby refused a write the text scan let through (e.g. a user function
            // named like a built-in): on the primary it commits, so learn its position. (Not
            // in a read-only transaction.)
            self.wrote = !moved && !self.shard.replicas.is_empty();
            let unit = self.pipelinable(frames);
            if !self.acquire_primary(frames, unit, cancel, out).await {
                return Ok(frames.len());
            }
            // Its statements were counted on the replica.
            self.recounting = true;
            let rerun = self.run_batch(frames, cancel, out, client).await;
            self.recounting = false;
            rerun?;
        }
        if std::mem::take(&mut self.rerun_refused)
            && unit_start
            && self.at_unit_start()
            && matches!(self.server.as_ref().map(|s| &s.link), Some(Link::Own(_)))
            && one_unit_of_statements(frames)
        {
            // A Bind or Describe failed on an upstream statement prepared before a schema
            // change, for a client statement whose row description the client was never sent
            // (its Parse answered from a connection that had the statement, or parsed before
            // the change and never described): it now names a statement prepared afresh. The
            // batch is one Sync's worth of extended-protocol messages that began no later than
            // its implicit transaction did (nothing a write before it left unsynced is in it),
            // none of its Executes ran (the error rolled back its implicit transaction), and
            // its replies so far are still here, on a connection of its own (not a pipe's):
            // it runs again, once, as if its Parse had come after the change, as it may have.
            // Its Parses made statements the rerun parses again.
            log::debug!("batch run again on a statement prepared after a schema change");
            // What came unasked meanwhile (notifications, parameter changes, notices) is
            // not sent again: it stays.
            let unasked = unasked_messages(&out[out_start..]);
            out.truncate(out_start);
            out.extend_from_slice(&unasked);
            for name in std::mem::take(&mut self.batch_parsed) {
                self.statements.remove(&name);
            }
            self.recounting = true;
            let rerun = self.run_batch(frames, cancel, out, client).await;
            self.recounting = false;
            self.rerun_refused = false;
            rerun?;
        }
        self.replica_read = None;
        if let Some(tx) = self.replica_tx.as_mut() {
            tx.first_batch = false;
            // (An error, or a ROLLBACK TO, marks the transaction rolled back: what it undid
            // is not worth tracking.)
            tx.movable = tx.movable_after
                && !self.tx_rolled_back
                && self.moved_replay.len() + self.moved_replay_next.len() <= MOVED_REPLAY_MAX;
            if tx.movable {
                self.moved_replay.push_str(&self.moved_replay_next);
            }
            tx.ran = tx.ran_after;
            if self.server.is_none() {
                // Lost mid-transaction: the client got 08006 and stays connected; the
                // transaction is gone (the standby rolled it back).
                let i = tx.replica;
                self.replica_tx = None;
                self.shard
                    .replica_failed(i, "connection lost in a read-only transaction");
            }
        }
        // After an extended-protocol error with no Sync sent yet, the server skips everything
        // until this client's Sync: the connection stays with this client until then (given
        // back, another client's statements would be skipped).
        let finished = self.settled() && self.tx == b'I';
        if finished && !self.pinned {
            if let Some(server) = self.server.take() {
                self.give_back(server);
            }
            self.replica_tx = None;
        } else if finished && self.replica_tx.is_some() {
            // Unreachable: statements that pin are refused in a replica transaction
            // (`replica_tx_cut`). Kept, the replica connection would serve later writes.
            debug_assert!(false, "a replica transaction pinned its session");
            log::error!("a read-only transaction on a replica pinned its session; closing it");
            self.server = None;
            self.pinned = false;
            self.replica_tx = None;
        }
        Ok(frames.len())
    }

    /// A primary connection (or a share of a pipelined one) for this batch. If none can be
    /// had, the batch is answered here and the result is false: with 08006 when the upstream
    /// could not be reached, else with the error its login gave (53300 when its
    /// `max_connections` are taken, class 28 after a password change upstream), or the one the
    /// wait for a busy pool ended with (53300 at the wait timeout, 57014 when cancelled).
    /// Class 08 would tell drivers and pools (pgjdbc, HikariCP) that this client's connection
    /// is broken, which it is not.
    async fn acquire_primary(
        &mut self,
        frames: &[u8],
        unit: Option<UnitNeeds>,
        cancel: &CancelToken,
        out: &mut Vec<u8>,
    ) -> bool {
        // A batch that reads what an earlier `nextval` of this client left in its backend
        // asks for the connection the client's latest batch ran on (see `run_batch`).
        let prefer = if unit.is_none() && self.reads_sequence_state(frames) {
            self.last_conn
        } else {
            0
        };
        match self
            .take_connection(Host::Primary, unit, prefer, Some(cancel))
            .await
        {
            Ok(()) => true,
            Err(e) => {
                log::warn!("upstream: {}", e.message);
                let err = if e.local {
                    e.to_error()
                } else if e.code == SqlState::CONNECTION_FAILURE {
                    lost(&e.message)
                } else {
                    PgError::new(e.code, e.message).with_detail(e.detail.unwrap_or_else(|| {
                        "The upstream server refused a new connection for this statement.".into()
                    }))
                };
                self.fail_locally(frames, out, err);
                false
            }
        }
    }

    /// No connection to replica `i` could be had for this batch, which then goes to the
    /// primary. A refused login (class 28: the standby's pg_hba, or no credential ringwire
    /// can use there) is this user's, not the replica's failure: it stays in rotation for
    /// everyone else.
    fn replica_unusable(&self, i: usize, e: LoginError) {
        if e.code.as_str().starts_with("28") {
            log::info!(
                "upstream: replica {i} refused user {:?}: {}",
                self.key.user,
                e.message
            );
        } else {
            self.shard.replica_failed(i, &e.message);
        }
    }

    /// The pool and credential for a connection to `host`. On a replica: its own URL's login
    /// with `--upstream-login url`; else this client's, falling back to the credential the
    /// client's primary pool keeps (a `trust` client has none of its own, and the replica's
    /// pool may never have seen a login of this user).
    fn login_for(&self, host: Host) -> (Rc<Pool>, Rc<Credential>) {
        let Host::Replica(i) = host else {
            return (self.primary.clone(), self.credential.clone());
        };
        if self.shard.login == UpstreamLogin::Url {
            let (key, credential) = &self.shard.replica_url_logins[i];
            return (self.shard.pool(host, key), credential.clone());
        }
        let credential = if self.credential.is_some() {
            self.credential.clone()
        } else {
            self.primary
                .cached_credential()
                .unwrap_or_else(|| self.credential.clone())
        };
        (self.shard.pool(host, &self.key), credential)
    }

    /// Hold a connection to `host` for this batch: a share of a pipe if the batch is a
    /// pipelinable unit (`unit`), else a connection of its own.
    async fn take_connection(
        &mut self,
        host: Host,
        unit: Option<UnitNeeds>,
        prefer: u64,
        cancel: Option<&CancelToken>,
    ) -> Result<(), LoginError> {
        let (pool, credential) = self.login_for(host);
        let server = match unit {
            Some(needs) => {
                // A unit of a shape that ran long on a pipe opens a pipe of its own, which
                // takes no units behind it while the pool has another connection to give;
                // with the pool exhausted it joins a pipe as any unit does (`pipe.rs`, "A
                // long statement").
                let fresh = self.shard.slow.is_slow(needs.shape) && !pool.exhausted();
                let me = self.id;
                let usable = |st: &ConnStatements| {
                    needs.ids[..needs.len]
                        .iter()
                        .all(|&id| !st.preparing_for_other(id, me))
                };
                match self
                    .shard
                    .pipe_for(
                        &pool,
                        self.settings,
                        &credential,
                        cancel,
                        fresh,
                        needs.bytes,
                        usable,
                    )
                    .await?
                {
                    Ok(pipe) => {
                        log::trace!("session {} joins pipe {}", self.id, pipe.process_id);
                        let buf = self.spare_buf.take().unwrap_or_default();
                        ServerConn::lease(&pipe, Lease::new(pipe.clone(), needs.shape), buf)
                    }
                    Err(own) => {
                        log::trace!("session {} runs alone (settings)", self.id);
                        own
                    }
                }
            }
            None => {
                pool.acquire(self.settings, prefer, &credential, cancel)
                    .await?
            }
        };
        self.server = Some(server);
        Ok(())
    }

    /// A connection that ran code stored upstream ([`runs_user_code`]) goes back: what that
    /// code left in the session is not known here, so its settings are marked unknown and
    /// its next user (this client too) gets `RESET ALL` and its own SETs. A function's
    /// session-level SET thus lasts until the connection goes back (the end of the batch
    /// that ends its transaction), or until the tidy that put the settings back right behind
    /// it (`queue_tidy`, which clears the mark), and does not reach another client through
    /// this connection. Marked as the connection leaves the session, after everything else
    /// that sets its fingerprint. (A pinned session's connection is its own, settings and
    /// all, and never goes back.)
    fn forget_user_code(&mut self, server: &mut ServerConn) {
        // (`replay_cut_short` sets the mark too.)
        if std::mem::take(&mut self.ran_user_code) {
            server.settings = SETTINGS_UNKNOWN;
        }
    }

    /// A settings replay (or the tidy that carries one) in flight failed or was cancelled
    /// before its end: its last entry must not mark the connection with the session's
    /// settings, and the connection's settings are unknown when it goes back.
    fn replay_cut_short(&mut self) {
        self.ran_user_code = true;
        for e in self.expect.iter_mut() {
            match e {
                Expect::Server {
                    done: done @ (Done::Settings(_) | Done::Tidied(Some(_))),
                    ..
                } => {
                    *done = if matches!(done, Done::Settings(_)) {
                        Done::Replayed
                    } else {
                        Done::Tidied(None)
                    };
                    return;
                }
                Expect::Server {
                    done: Done::Replayed | Done::Tidied(None),
                    ..
                } => {}
                _ => return,
            }
        }
    }

    /// Give a clean connection back: to the pool, or (a share of a pipe) to the pipe, keeping
    /// the reply buffer for the next unit. One that code stored upstream left untidied (no
    /// [`TIDY`] could follow it in its batch: `queue_tidy`) is tidied first, a round trip on a
    /// task of its own ([`tidy_and_release`]). (Such code never runs on a pipe.)
    fn give_back(&mut self, mut server: ServerConn) {
        self.forget_user_code(&mut server);
        match server.link {
            Link::Own(_) if std::mem::take(&mut self.untidied) => {
                tidy_and_release(self.shard.clone(), server, false, true);
                return;
            }
            Link::Own(_) => {}
            Link::Shared(_) => {
                let buf = std::mem::replace(&mut server.buf, ReplyBuf::empty());
                if buf.data().is_empty() {
                    self.spare_buf = Some(buf);
                }
            }
        }
        self.shard.release(server);
    }

    /// No reply awaited, no COPY, no error skipping to a Sync, no extended-protocol work a
    /// Sync has yet to close: with ReadyForQuery `I` as well, nothing of the client's is open
    /// on its connection.
    fn settled(&self) -> bool {
        self.expect.is_empty() && !self.copy_in && !self.skip_until_sync && !self.unsynced
    }

    /// No transaction, nothing pinned, no COPY, nothing skipped, awaited or pending: a batch
    /// that starts now may go to a connection other than the session's own (a replica, a pipe).
    fn idle_and_unpinned(&self) -> bool {
        self.tx == b'I' && !self.pinned && self.settled() && self.pending_sets.is_empty()
    }

    /// How long the client may stay silent while it holds its connection with work open, in
    /// milliseconds (0: no limit): `--upstream-idle-transaction-timeout-secs` (PgBouncer's
    /// `idle_transaction_timeout`) for a transaction block, extended-protocol messages no Sync
    /// closed, or a COPY; past it the connection loop ends the session with FATAL 25P03 and
    /// `close` rolls the work back. A session pinned outside a transaction is not limited.
    /// (The client's own `idle_in_transaction_session_timeout` is the upstream backend's to
    /// enforce, as for any setting; its FATAL reaches the client through `relay_idle`.)
    pub fn idle_limit_ms(&self) -> u64 {
        let open = self.tx != b'I' || self.unsynced || self.copy_in || self.skip_until_sync;
        if self.server.is_none() || !open {
            return 0;
        }
        let limit = self
            .shard
            .config
            .timers
            .idle_transaction_timeout
            .as_millis();
        u64::try_from(limit).unwrap_or(u64::MAX)
    }

    /// See [`shards::engine::Engine::idle`]. While the client is idle and holds its
    /// connection whole between batches (a LISTEN or other pinned state, a transaction), read
    /// what PostgreSQL sends that session unasked and pass it on at once, as PostgreSQL
    /// would: notifications (`NOTIFY` to a channel the client listens on: before, they
    /// reached it only with the reply to its next statement, so a client waiting for one,
    /// psycopg's `notifies()`, node-postgres' `notification` event, waited forever), notices,
    /// and parameter changes it was shown. Returns once something was appended to `out`.
    ///
    /// A FATAL 25P03, 57P05 or 25P04 — the backend's `idle_in_transaction_session_timeout`,
    /// `idle_session_timeout` (armed only after a ReadyForQuery `I`: of the sessions held
    /// between batches, a pinned one) or `transaction_timeout` (PostgreSQL 17+), the client's
    /// own setting or the server's (postgresql.conf, ALTER ROLE) — ends the client's session
    /// with that error, as PostgreSQL ends it; before, the client found out at its next
    /// statement (08006) and the dead connection counted against the pool until then. These
    /// timers measure the backend's idleness or transaction, which are the client's here:
    /// nothing else runs on a connection held whole. Any other end of the connection
    /// (another FATAL, the end of the stream) ends a pinned session too, with the server's
    /// FATAL (`pinned_state_lost`: its state cannot move to another connection); under an
    /// unpinned transaction it is left for the next batch, which reports it as every lost
    /// connection is reported (08006, the client stays connected).
    ///
    /// Cancel safe: it only reads into the connection's reply buffer (both socket paths keep
    /// no read in flight in the future), and a message is consumed only once it is in `out`.
    pub async fn relay_idle(&mut self, out: &mut Vec<u8>) -> Result<(), PgError> {
        loop {
            let watched = !self.idle_watch_off
                && self.expect.is_empty()
                && !self.copy_in
                && self
                    .server
                    .as_ref()
                    .is_some_and(|s| matches!(s.link, Link::Own(_)));
            if !watched {
                return std::future::pending().await;
            }
            let server = self.server.as_mut().expect("watched");
            loop {
                let (tag, len) = match server.buf.frame() {
                    Ok(Some((frame, len))) => (frame.tag, len),
                    Ok(None) => break,
                    Err(_) => {
                        self.idle_watch_off = true;
                        break;
                    }
                };
                let raw = &server.buf.data()[..len];
                match tag {
                    b'A' | b'N' => {
                        relay_unasked(out, raw, server.process_id, self.client_pid);
                    }
                    b'S' => {
                        if news(&mut self.shown, raw) {
                            out.extend_from_slice(raw);
                        }
                    }
                    b'E' if is_fatal(raw) => {
                        let e = upstream_error(raw)
                            .unwrap_or_else(|| lost("the server ended the connection"));
                        let timeout = ended_by_idle_timeout(&e);
                        if timeout || self.pinned {
                            let e = if timeout { e } else { pinned_state_lost(e) };
                            log::info!("upstream connection {}: {}", server.process_id, e.message);
                            self.server = None;
                            return Err(e);
                        }
                        self.idle_watch_off = true;
                        break;
                    }
                    _ => {
                        // Left for the next batch to read and report.
                        self.idle_watch_off = true;
                        break;
                    }
                }
                server.buf.consume(len);
            }
            if !out.is_empty() {
                return Ok(());
            }
            if self.idle_watch_off {
                continue;
            }
            if let Err(e) = self.server.as_mut().expect("watched").fill().await {
                if self.pinned {
                    self.server = None;
                    return Err(pinned_state_lost(lost(&e.to_string())));
                }
                // The end of stream is for the next batch to find.
                self.idle_watch_off = true;
            }
        }
    }

    /// Whether this batch may share a pipelined connection with other clients' units, and
    /// the upstream statements it relies on. Only a self-contained autocommit unit: the
    /// session idle before it (no transaction, nothing outstanding or pinned, no SET pending,
    /// no commit whose position is unknown), every message a Query or Parse of an
    /// autocommit-only statement ([`autocommit_shape`]) or a Bind/Describe/Execute/Close/Sync,
    /// Bind and Describe only of statements that are autocommit-only too, and ending with Sync or
    /// Query (so it ends with its own ReadyForQuery `I`). No Flush (the client would wait for
    /// replies before its Sync), no FunctionCall, no COPY. Anything else runs on a connection
    /// of its own.
    fn pipelinable(&self, frames: &[u8]) -> Option<UnitNeeds> {
        if !self.shard.pipelines()
            || !self.idle_and_unpinned()
            || self.commit_unrecorded
            || self.lsn_outstanding > 0
        {
            return None;
        }
        let mut needs = UnitNeeds {
            bytes: frames.len(),
            ..UnitNeeds::default()
        };
        let need = |needs: &mut UnitNeeds, id: Option<u32>| -> Option<()> {
            if let Some(id) = id {
                if needs.len == UNIT_STATEMENTS_MAX {
                    return None;
                }
                needs.ids[needs.len] = id;
                needs.len += 1;
            }
            Some(())
        };
        // Statements parsed earlier in this batch.
        let mut parsed: [&str; UNIT_STATEMENTS_MAX] = [""; UNIT_STATEMENTS_MAX];
        let mut n_parsed = 0;
        let mut last = 0;
        // Shared, this would skip other clients' units (see `UnsyncedQuery`): it runs on a
        // connection of its own.
        let mut unsynced = UnsyncedQuery::default();
        let mut rest = frames;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            last = frame.tag;
            if unsynced.follows(frame.tag) {
                return None;
            }
            let uses = |name: &str, needs: &mut UnitNeeds| -> Option<()> {
                if parsed[..n_parsed].contains(&name) {
                    return Some(());
                }
                let stmt = self.statements.get(name)?;
                needs.shape = combine_shapes(needs.shape, stmt.autocommit?);
                if stmt.upstream.get().is_some_and(|id| self.shard.refused(id)) {
                    // (`Session::refused` decides on a connection of its own.)
                    return None;
                }
                if stmt.upstream.get().is_some() {
                    // The pipe's connection may lack it: its Parse goes out with the unit,
                    // analysed under the session's settings, which must be its key's.
                    if stmt.settings.get() != self.settings {
                        return None;
                    }
                    needs.bytes += stmt.sql.len() + stmt.param_types.len() + 16;
                }
                need(needs, stmt.upstream.get())
            };
            match FrontendMessage::parse(frame).ok()? {
                FrontendMessage::Query { sql } => {
                    needs.shape = combine_shapes(needs.shape, autocommit_shape(sql)?);
                }
                FrontendMessage::Parse {
                    name,
                    sql,
                    param_types,
                } if n_parsed < UNIT_STATEMENTS_MAX => {
                    needs.shape = combine_shapes(needs.shape, autocommit_shape(sql)?);
                    if !name.is_empty() {
                        if self.statements.contains_key(name) {
                            return None;
                        }
                        let id = self.shard.statement_id(&StatementKey {
                            sql: sql.into(),
                            param_types: param_types.iter().flat_map(u32::to_be_bytes).collect(),
                            settings: self.settings,
                        });
                        need(&mut needs, Some(id))?;
                    }
                    parsed[n_parsed] = name;
                    n_parsed += 1;
                }
                FrontendMessage::Bind(bind) => uses(bind.statement, &mut needs)?,
                FrontendMessage::Describe {
                    target: Target::Statement,
                    name,
                } => uses(name, &mut needs)?,
                FrontendMessage::Describe {
                    target: Target::Portal,
                    ..
                }
                | FrontendMessage::Execute { .. }
                | FrontendMessage::Close { .. }
                | FrontendMessage::Sync => {}
                _ => return None,
            }
        }
        matches!(last, b'S' | b'Q').then_some(needs)
    }

    /// A replica for this batch, or `None` for the primary: only a batch that is certainly
    /// read-only autocommit work, on a session with no transaction, pinned state or replies
    /// outstanding; then the oracle decides (see [`ShardUpstream::replica_for`]).
    async fn pick_replica(&self, frames: &[u8]) -> Option<usize> {
        if self.shard.replicas.is_empty()
            || !self.idle_and_unpinned()
            // A commit whose position is not known yet (see `commit_unrecorded`): this batch
            // goes to the primary, which learns it at its end.
            || self.wrote
            || !self.batch_reads_only(frames)
        {
            return None;
        }
        self.fresh_replica().await
    }

    /// A replica that has replayed every commit acknowledged before now (or within the
    /// session's staleness bound), waiting briefly for one; `None` (counted as sent to the
    /// primary) if none is in time.
    async fn fresh_replica(&self) -> Option<usize> {
        // The read's timestamp: every commit acknowledged before this instant is at or
        // before it.
        let lsn = self.shard.applied_lsn();
        let found = self.shard.replica_for(lsn, self.staleness).await;
        if found.is_none() {
            Counters::bump(&self.shard.counters.sent_to_primary);
        }
        found
    }

    /// A replica for a batch that begins a read-only transaction, whether its statements
    /// each need a freshness check (read committed), and the length of the batch's part
    /// that runs in it; `None` for the primary.
    ///
    /// The batch must start (after any Close/Sync/Flush) with a Query (or Parse) that is one
    /// `BEGIN`/`START TRANSACTION`
    /// whose modes, with the session's defaults, make it read-only and not serializable. A
    /// serializable transaction goes to the primary (a hot standby refuses serializable,
    /// 0A000) — except under a serializable *default*, whose bounded staleness already lets
    /// the session's reads go to replicas, where its connections run at repeatable read (the
    /// settings replay). `BEGIN; SET TRANSACTION READ ONLY` is read-write when it begins, so
    /// it goes to the primary. The replica must have replayed the applied LSN as of now:
    /// every commit acknowledged before the transaction began (`replica_for`, which may wait
    /// briefly). At repeatable read that one check suffices: the snapshot is taken at the
    /// first statement, later.
    async fn pick_replica_tx(&self, frames: &[u8]) -> Option<(usize, bool, usize, Option<bool>)> {
        if self.shard.replicas.is_empty() || !self.idle_and_unpinned() || self.wrote {
            return None;
        }
        // Drivers pipeline the Close of a statement they dropped (and its Sync) in front of
        // the next one (tokio-postgres does): those run anywhere.
        let mut rest = frames;
        let sql = loop {
            let (frame, len) = split_frame(rest, usize::MAX).ok()??;
            rest = &rest[len..];
            match FrontendMessage::parse(frame).ok()? {
                FrontendMessage::Query { sql } | FrontendMessage::Parse { sql, .. } => break sql,
                FrontendMessage::Close { .. } | FrontendMessage::Sync | FrontendMessage::Flush => {}
                _ => return None,
            }
        };
        let modes = begin_modes(sql)?;
        if !modes.read_only.unwrap_or(self.default_read_only) {
            return None;
        }
        let isolation = match modes.isolation {
            Some(Isolation::Serializable) => return None,
            Some(level) => level,
            None => self.default_isolation.assumed(),
        };
        let part = self.replica_tx_cut(frames, true)?;
        // Whether it is surely read committed, for `ReplicaTx::movable` (`None`: as the
        // replica's own default is, which its connection knows).
        let read_committed = match (modes.isolation, self.default_isolation) {
            (Some(level), _) | (None, DefaultIsolation::Session(level)) => {
                Some(level == Isolation::ReadCommitted)
            }
            (None, DefaultIsolation::Server) => None,
            (None, DefaultIsolation::Unreadable) => Some(false),
        };
        let i = self.fresh_replica().await?;
        Some((
            i,
            isolation == Isolation::ReadCommitted,
            part,
            read_committed,
        ))
    }

    /// A batch inside the session's read-only transaction on a replica: how much of it runs
    /// there now. At read committed (or once the text mentions `isolation`: `SET TRANSACTION
    /// ISOLATION LEVEL` may have made it so), a batch that runs a statement first waits for
    /// the replica to replay the applied LSN as of now. A movable transaction
    /// (`ReplicaTx::movable`) waits as a read does (`replica::WAIT_MAX`), then goes on at the
    /// primary; another waits at most [`IN_TRANSACTION_WAIT_MAX`] and gets the error if the
    /// replica does not catch up (the transaction cannot move hosts), as does a batch with
    /// something a replica transaction cannot run (see `replica_tx_cut`).
    async fn continue_replica_tx(
        &mut self,
        frames: &[u8],
        tx: ReplicaTx,
    ) -> Result<ReplicaStep, PgError> {
        if self.copy_in {
            return Ok(ReplicaStep::Run(frames.len()));
        }
        let Some(part) = self.replica_tx_cut(frames, false) else {
            if tx.movable
                && self.tx == b'T'
                && !self.unsynced
                && self.expect.is_empty()
                && self
                    .leaves_nothing(frames, &mut String::new())
                    .self_contained
            {
                // It runs on the primary, which can (and pins the session there if it must).
                return Ok(ReplicaStep::Move(
                    "it runs what a replica transaction cannot",
                ));
            }
            return Err(PgError::new(
                SqlState::FEATURE_NOT_SUPPORTED,
                "this read-only transaction runs on a replica (ringwire) and cannot move to \
                 the primary (it holds a cursor, a lock or other state only its connection \
                 has), so it cannot run statements that tie the session to its connection \
                 (PREPARE, LISTEN, SET ROLE, a WITH HOLD cursor, a SET after a savepoint), a \
                 SET sent as a prepared statement, or statements that end the transaction and \
                 go on in the same query; the transaction was ended",
            ));
        };
        let part_frames = &frames[..part];
        let mut each_statement = tx.each_statement;
        let mut runs = false;
        let mut last = 0;
        let mut rest = part_frames;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            last = frame.tag;
            match FrontendMessage::parse(frame) {
                // `SET TRANSACTION ISOLATION` may make it read committed; `COMMIT AND CHAIN`
                // starts a new transaction on this replica whose first snapshot must see every
                // commit acknowledged before it. Either way: check before every statement from
                // now on (more checks than needed only wait).
                Ok(FrontendMessage::Query { sql }) => {
                    each_statement |= per_statement_checks(sql);
                    let r = route(sql);
                    runs |= r.read_only || r.writes;
                }
                Ok(FrontendMessage::Parse { sql, .. }) => {
                    each_statement |= per_statement_checks(sql);
                }
                Ok(FrontendMessage::Bind(_) | FrontendMessage::Execute { .. }) => runs = true,
                Ok(FrontendMessage::FunctionCall) => runs = true,
                _ => {}
            }
        }
        // Whatever this batch leaves, it can go on at the primary only from a known state: no
        // replies awaited, no extended-protocol work open, not failed (the client must roll it
        // back: moved, it would work again).
        // (Not read once the transaction is not movable: it never becomes so again.)
        let batch = self.scan_for_move(part_frames, tx.movable);
        let movable = batch.is_some_and(|b| b.self_contained)
            && self.tx == b'T'
            && !self.unsynced
            && self.expect.is_empty();
        let movable_after = movable && batch.is_some_and(|b| b.leaves_nothing);
        if let Some(t) = self.replica_tx.as_mut() {
            t.each_statement = each_statement;
            t.movable_after = movable_after;
            t.ran_after = tx.ran || batch.is_some_and(|b| b.snapshot);
            t.rerunnable = movable && matches!(last, b'S' | b'Q');
        }
        // (A failed transaction's statements fail whatever the replica has replayed.)
        if each_statement && runs && self.tx != b'E' {
            let lsn = self.shard.applied_lsn();
            let limit = if movable {
                super::replica::WAIT_MAX
            } else {
                IN_TRANSACTION_WAIT_MAX
            };
            let caught_up = self
                .shard
                .replica_catches_up(tx.replica, lsn, self.staleness, limit)
                .await;
            if !caught_up && movable {
                return Ok(ReplicaStep::Move("it fell behind"));
            }
            if !caught_up && !self.shard.replicas[tx.replica].in_rotation() {
                // Failed or unreachable (its poller says so): the transaction is as good as
                // lost with it.
                return Err(lost(
                    "the replica serving this read-only transaction left the \
                                 rotation",
                ));
            }
            if !caught_up {
                return Err(PgError::new(
                    SqlState(*b"40001"),
                    format!(
                        "could not serialize access: the replica running this read-only \
                         read-committed transaction did not replay the commits acknowledged \
                         before this statement within {IN_TRANSACTION_WAIT_MAX:?}; the \
                         transaction was ended, retry it"
                    ),
                ));
            }
        }
        Ok(ReplicaStep::Run(part))
    }

    /// [`Session::leaves_nothing`] of a batch of the session's replica transaction if it is
    /// `movable` (else neither result matters: `None`), its replay text in
    /// `moved_replay_next` (added to `moved_replay` once the batch leaves the transaction
    /// movable: `relay_part`).
    fn scan_for_move(&mut self, frames: &[u8], movable: bool) -> Option<InTransaction> {
        let mut replay = std::mem::take(&mut self.moved_replay_next);
        replay.clear();
        let batch = movable.then(|| self.leaves_nothing(frames, &mut replay));
        self.moved_replay_next = replay;
        batch
    }

    /// What running `frames` in a movable transaction (see `ReplicaTx::movable`) relies on
    /// and leaves: whether they use no portal bound before them (so they can run in a new
    /// transaction), and whether they leave the transaction movable: every Query, and every
    /// statement a Bind runs, leaves nothing in it but what its text, added to `replay`,
    /// redoes at the primary (`classify::movable_in_transaction`),
    /// each Bind is into the unnamed portal and run to the end by an Execute of these frames,
    /// and besides those only Parse, Describe, Close, Sync and Flush. (PostgreSQL keeps the
    /// unnamed portal past a Sync inside a transaction block: one a later batch used would
    /// not exist at the primary.)
    fn leaves_nothing(&self, frames: &[u8], replay: &mut String) -> InTransaction {
        let not_self_contained = InTransaction {
            self_contained: false,
            leaves_nothing: false,
            snapshot: false,
        };
        // Statements parsed earlier in these frames (more than this: not movable).
        let mut parsed: [(&str, &str); 8] = [("", ""); 8];
        let mut n_parsed = 0;
        let (mut bound, mut unexecuted, mut leaves, mut snapshot) = (false, false, true, false);
        // What the statement bound last adds to `replay` once an Execute runs it.
        let mut bound_replay = String::new();
        let mut rest = frames;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            let ok = match FrontendMessage::parse(frame) {
                Ok(FrontendMessage::Query { sql }) => {
                    snapshot |= takes_snapshot(sql);
                    movable_in_transaction(sql, replay)
                }
                Ok(FrontendMessage::Parse { name, sql, .. }) => {
                    // (PostgreSQL's parse analysis of a query takes a snapshot too.)
                    snapshot |= takes_snapshot(sql);
                    let fits = n_parsed < parsed.len();
                    if fits {
                        parsed[n_parsed] = (name, sql);
                        n_parsed += 1;
                    }
                    fits
                }
                Ok(FrontendMessage::Bind(bind)) => {
                    (bound, unexecuted) = (true, true);
                    bound_replay.clear();
                    let sql =
                        self.named_statement(&parsed[..n_parsed], bind.statement, |s| &*s.sql);
                    snapshot |= sql.is_none_or(takes_snapshot);
                    bind.portal.is_empty()
                        && sql.is_some_and(|sql| movable_in_transaction(sql, &mut bound_replay))
                }
                Ok(FrontendMessage::Execute { max_rows, .. }) => {
                    if !bound {
                        return not_self_contained;
                    }
                    unexecuted = false;
                    replay.push_str(&bound_replay);
                    bound_replay.clear();
                    max_rows == 0
                }
                Ok(FrontendMessage::Describe {
                    target: Target::Portal,
                    ..
                }) => {
                    if !bound {
                        return not_self_contained;
                    }
                    true
                }
                Ok(
                    FrontendMessage::Describe { .. }
                    | FrontendMessage::Close { .. }
                    | FrontendMessage::Sync
                    | FrontendMessage::Flush,
                ) => true,
                _ => {
                    snapshot = true;
                    false
                }
            };
            // (Read on: a later message may still use a portal bound before these frames.)
            leaves &= ok;
        }
        InTransaction {
            self_contained: true,
            leaves_nothing: leaves && !unexecuted,
            snapshot,
        }
    }

    /// The session's movable read-only transaction (`ReplicaTx::movable`) leaves its replica,
    /// which fell behind or failed: the replica's connection (if it is still there) rolls the
    /// transaction back and goes back to the pool, on a task of its own; the transaction goes
    /// on at the primary, where the next batch to run begins it again ([`BEGIN_MOVED`] and
    /// `moved_replay`, in the same write: `run_batch`). The client sees nothing but the new host's answers
    /// (`now()` and the backend differ, as they may at any pooler's transaction boundary).
    fn move_replica_tx(&mut self, why: &str) {
        let Some(tx) = self.replica_tx.take() else {
            return;
        };
        log::debug!(
            "read-only transaction moves from replica {} to the primary: {why}",
            tx.replica
        );
        Counters::bump(&self.shard.counters.replica_transactions_moved);
        if let Some(mut server) = self.server.take() {
            // (A batch run again may have run code stored upstream there before it failed.)
            self.forget_user_code(&mut server);
            let tidy = std::mem::take(&mut self.untidied);
            tidy_and_release(self.shard.clone(), server, true, tidy);
        }
        let mut begin = String::from(BEGIN_MOVED);
        begin.push_str(&self.moved_replay);
        if tx.ran {
            begin.push_str(AFTER_READS);
        }
        self.moved_replay.clear();
        self.begin_again = Some(begin);
    }

    /// How much of `frames` may run in a read-only transaction on a replica: up to the end
    /// of the message that may end the transaction (a Query with COMMIT/ROLLBACK/…, or the
    /// Sync after an Execute of one); what follows is routed afresh, since on the replica it
    /// would run unchecked (a write there fails, a read may be stale). `None` if the part
    /// has what such a transaction cannot run: a Query that ends the transaction and goes on
    /// (`COMMIT; INSERT …` in one Query: it cannot be split), or a statement that pins the
    /// session (its connection would then be kept, and the replica serve later writes; a
    /// session SET once the block has a savepoint is one). A movable transaction then moves
    /// to the primary, where it can run them (`continue_replica_tx`).
    /// `begin`: the first message is the BEGIN that opens the transaction.
    fn replica_tx_cut(&self, frames: &[u8], begin: bool) -> Option<usize> {
        // Statements parsed earlier in this part: (name, controls the transaction, a
        // savepoint statement, a SET statement). A batch
        // with more Parses than this ends the transaction with the 0A000 below (pgx batches of
        // up to 64 new statements fit).
        let mut parsed: [(&str, (bool, bool, bool)); 64] = [("", (false, false, false)); 64];
        let mut n_parsed = 0;
        // Already over (an error left the server skipping to a Sync the client had not sent):
        // that Sync ends it.
        let mut pending_end = !begin && self.tx == b'I';
        let mut savepoint = self.savepoint_in_tx;
        // A Query earlier in this part SETs.
        let mut sets = false;
        let mut ended = false;
        let mut first = begin;
        let mut offset = 0;
        let mut rest = frames;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            if ended {
                return Some(offset);
            }
            let tag = frame.tag;
            rest = &rest[len..];
            offset += len;
            match FrontendMessage::parse(frame) {
                Ok(FrontendMessage::Query { sql }) => {
                    let fx = classify(sql);
                    // A session SET once the block has a savepoint pins too (`note_effects`).
                    savepoint |= fx.savepoint;
                    if fx.pins || (savepoint && !fx.sets.is_empty()) {
                        return None;
                    }
                    sets |= !fx.sets.is_empty();
                    match tx_end(sql, first) {
                        TxEnd::Inside => return None,
                        TxEnd::Last => ended = true,
                        TxEnd::No => {}
                    }
                }
                Ok(FrontendMessage::Parse { name, sql, .. }) => {
                    let fx = classify(sql);
                    // (A Parse after a SET not settled yet may pin: `Session::parse_settings`.)
                    if fx.pins
                        || !fx.sets.is_empty()
                        || sets
                        || !self.pending_sets.is_empty()
                        || self.sets_unanswered()
                    {
                        return None;
                    }
                    if n_parsed == parsed.len() {
                        return None;
                    }
                    let control = !first && tx_end(sql, false) != TxEnd::No;
                    // (A SET statement parsed here ended the cut above.)
                    parsed[n_parsed] = (name, (control, fx.savepoint, false));
                    n_parsed += 1;
                }
                Ok(FrontendMessage::Bind(bind)) => {
                    let (control, bound_savepoint, bound_set) = self
                        .named_statement(&parsed[..n_parsed], bind.statement, |s| {
                            (
                                s.route().tx != TxControl::None,
                                s.savepoint,
                                s.set.is_some(),
                            )
                        })
                        .unwrap_or((false, false, false));
                    // A SET prepared earlier: its Execute pins the session once the block has
                    // a savepoint, which may come between the two (it was left to the
                    // primary before too, when a prepared SET pinned its session at Parse).
                    if bound_set {
                        return None;
                    }
                    pending_end |= control;
                    // (A Bind of a savepoint statement counts as one in a Query: `run_batch`.)
                    savepoint |= bound_savepoint;
                }
                Ok(FrontendMessage::Sync) => {
                    ended |= pending_end;
                    pending_end = false;
                }
                _ => {}
            }
            // (Closes and Syncs in front of the BEGIN do not count: see `pick_replica_tx`.)
            first &= matches!(tag, b'C' | b'S' | b'H');
        }
        Some(frames.len())
    }

    /// End the session's replica transaction with `err`: its connection is closed (the
    /// standby rolls the transaction back), what it owed the client and every message of
    /// `frames` is answered with `err` and ReadyForQuery `I`. The client stays connected.
    fn abandon_replica_tx(&mut self, frames: &[u8], out: &mut Vec<u8>, err: PgError) {
        log::info!("read-only transaction on a replica ended: {}", err.message);
        Counters::bump(&self.shard.counters.replica_transactions_failed);
        self.server = None;
        self.unsynced = false;
        self.replica_tx = None;
        self.fail_outstanding(out, err.clone());
        self.fail_locally(frames, out, err);
    }

    /// What `of_session` says of the statement a Bind or Describe names: what `parsed` (the
    /// statements Parsed earlier in the same frames, by name, the last one winning) holds for
    /// it, else what the session's prepared statement of that name gives; `None` if neither
    /// has it.
    fn named_statement<'a, T: Copy + 'a>(
        &'a self,
        parsed: &[(&str, T)],
        name: &str,
        of_session: impl FnOnce(&'a ClientStatement) -> T,
    ) -> Option<T> {
        parsed
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|p| p.1)
            .or_else(|| self.statements.get(name).map(|s| of_session(s)))
    }

    /// Every message of the batch is part of a read-only autocommit statement, and the batch
    /// ends with Sync or Query (so the connection goes back at its end).
    fn batch_reads_only(&self, frames: &[u8]) -> bool {
        // Statements parsed earlier in this batch (few: a pipeline of Parse messages longer
        // than this goes to the primary).
        let mut parsed: [(&str, bool); 8] = [("", false); 8];
        let mut n_parsed = 0;
        let lookup = |parsed: &[(&str, bool)], name: &str| {
            self.named_statement(parsed, name, |s| s.route().read_only)
                .unwrap_or(false)
        };
        let mut last = 0;
        // The session may have to keep its connection past this batch (see `UnsyncedQuery`);
        // a replica connection is never kept past a batch, so the primary takes it.
        let mut unsynced = UnsyncedQuery::default();
        let mut rest = frames;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            last = frame.tag;
            if unsynced.follows(frame.tag) {
                return false;
            }
            let ok = match FrontendMessage::parse(frame) {
                Ok(FrontendMessage::Query { sql }) => read_only(sql),
                Ok(FrontendMessage::Parse { name, sql, .. }) if n_parsed < parsed.len() => {
                    let ro = read_only(sql);
                    parsed[n_parsed] = (name, ro);
                    n_parsed += 1;
                    ro
                }
                Ok(FrontendMessage::Bind(bind)) => lookup(&parsed[..n_parsed], bind.statement),
                Ok(FrontendMessage::Describe {
                    target: Target::Statement,
                    name,
                }) => lookup(&parsed[..n_parsed], name),
                Ok(
                    FrontendMessage::Describe { .. }
                    | FrontendMessage::Execute { .. }
                    | FrontendMessage::Close { .. }
                    | FrontendMessage::Sync
                    | FrontendMessage::Flush,
                ) => true,
                _ => false,
            };
            if !ok {
                return false;
            }
        }
        matches!(last, b'S' | b'Q')
    }

    /// Translate, send and answer one batch on the held connection.
    async fn run_batch(
        &mut self,
        frames: &[u8],
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn AsyncWrite + Unpin),
    ) -> Result<(), PgError> {
        self.to_send.clear();
        self.batch_parsed.clear();
        self.batch_binds.clear();
        self.batch_described.clear();
        self.self_described_names.clear();
        if self.shard.any_refused() {
            self.self_described_names = self_described(frames);
        }
        self.batch_ran = false;
        self.rerun_refused = false;
        self.predicted_open = self.tx != b'I';
        // A batch that continues extended-protocol work no Sync closed yet, or that follows
        // replies still awaited, may be inside a transaction the last ReadyForQuery did not
        // show.
        self.prediction_sure = !self.unsynced && self.expect.is_empty();
        self.batch_sets = false;
        let settings_match = self
            .server
            .as_ref()
            .is_some_and(|s| s.settings == self.settings);
        let unit_start = self.at_unit_start();
        let begin_again = self.begin_again.take();
        if !settings_match && (unit_start || begin_again.is_some()) {
            self.queue_settings_replay();
        }
        if let Some(begin) = begin_again {
            // A read-only transaction moved here from a replica (`move_replica_tx`).
            frontend::encode_query(&mut self.to_send, &begin);
            self.push(Kind::Query, false, Done::Moved);
            self.forget_unnamed_upstream();
            self.must_answer = self.expect.len();
        }
        self.keep_sequence_state_own(frames, unit_start);
        let mut runs = false;
        let mut rest = frames;
        while let Some((frame, len)) =
            split_frame(rest, usize::MAX).expect("the connection loop checked the frames")
        {
            let raw = &rest[..len];
            rest = &rest[len..];
            if matches!(frame.tag, b'Q' | b'E' | b'F') {
                runs = true;
                if !self.recounting {
                    Counters::bump(&self.shard.counters.statements);
                }
            }
            log::trace!("client {:?}", frame.tag as char);
            self.translate(frame.tag, raw)?;
        }
        if runs {
            // A cancel that arrived while nothing of this client ran is withdrawn.
            cancel.reset();
        }
        let server = self.server.as_mut().expect("acquired above");
        if !self.to_send.is_empty() {
            if let Err(e) = server.send(&self.to_send).await {
                self.upstream_lost(out, &e.to_string());
                return Ok(());
            }
        }
        self.collect_replies(cancel, out, client).await;
        Ok(())
    }

    /// `lastval()` and `currval()` answer from what `nextval` left in the backend's session,
    /// and a pooled backend's session is every client's that ran on it: from a connection
    /// other than its own, a client would get another client's value (PgBouncer returns it).
    /// So a batch that starts a unit and names either function runs as written only where
    /// this client's latest batch ran and no other client ran since (`acquire` hands that
    /// connection back when it is idle, `prefer`), or where no client ran yet. Anywhere else
    /// it first gets `DISCARD SEQUENCES` (a swallowed Query of its own, in the same write),
    /// and the function answers as in a new session: 55000 "not yet defined in this
    /// session", unless the batch itself calls `nextval`. So a value the client drew comes
    /// back only to it, from its own connection; elsewhere it gets an error. Left (the value
    /// may be another client's): a client that names them with no `nextval` of its own in its
    /// latest batch (a `currval` of a sequence another statement advanced) reads what came
    /// before on that connection; a transaction that names them after its first batch;
    /// functions that call them; a DISCARD that fails (a cancel landing on it: the client
    /// gets a WARNING).
    /// (Discarding whenever a connection changes hands instead would cost every write a
    /// statement: `DISCARD SEQUENCES` in front of a one-row INSERT cost a third of pgbench's
    /// tps here, PERF.md session 16.)
    fn keep_sequence_state_own(&mut self, frames: &[u8], unit_start: bool) {
        let Some(server) = self.server.as_ref() else {
            return;
        };
        if server.host != Host::Primary {
            return; // (replicas run none of the sequence functions: `route`)
        }
        if !matches!(server.link, Link::Own(_)) {
            // A pipe's unit names no sequence function (`autocommit_shape`): the client's
            // values stay where they were. (The pipe's connection counts as anyone's.)
            return;
        }
        let serial = server.serial;
        let own =
            server.last_user == NO_USER || server.last_user == self.id && self.last_conn == serial;
        if !own && unit_start && self.reads_sequence_state(frames) {
            frontend::encode_query(&mut self.to_send, "DISCARD SEQUENCES");
            self.push(Kind::Query, false, Done::Discarded);
            self.forget_unnamed_upstream();
            self.must_answer = self.expect.len();
        }
        self.server.as_mut().expect("checked above").last_user = self.id;
        self.last_conn = serial;
    }

    /// Whether this batch names `lastval` or `currval` (anywhere in a statement's text: a
    /// false match costs one `DISCARD SEQUENCES`), in a Query, a Parse, or the statement a
    /// Bind runs; or is a FunctionCall (by OID, which may be either).
    fn reads_sequence_state(&mut self, frames: &[u8]) -> bool {
        if let Some(known) = self.sequence_use {
            return known;
        }
        let mut found = false;
        let mut rest = frames;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            found = match FrontendMessage::parse(frame) {
                Ok(FrontendMessage::Query { sql } | FrontendMessage::Parse { sql, .. }) => {
                    reads_sequence_state(sql)
                }
                Ok(FrontendMessage::Bind(bind)) => self
                    .statements
                    .get(bind.statement)
                    .is_some_and(|s| reads_sequence_state(&s.sql)),
                Ok(FrontendMessage::FunctionCall) => true,
                _ => false,
            };
            if found {
                break;
            }
        }
        self.sequence_use = Some(found);
        found
    }

    fn queue_settings_replay(&mut self) {
        // Each statement is a Query of its own, so each runs in its own implicit transaction:
        // one that fails (a value this connection rejects, say a placeholder setting that a
        // library loaded here validates) undoes only itself, not the RESET ALL and the others
        // (in one Query it undid them all, and the connection kept the previous client's
        // settings under this client's fingerprint). Its error reaches the client as a
        // warning (see `on_reply`). Separate messages also keep a client's SET that ends in
        // a `--` comment from swallowing the next.
        let (statements, _) = replay_statements(
            &self.startup_sets,
            &self.startup_values,
            &self.sets,
            self.serializable && self.replica_read.is_some(),
        );
        let statements: Vec<&str> = std::iter::once("RESET ALL")
            .chain(statements.iter().map(|s| &**s))
            .collect();
        queue_replay(
            &mut self.to_send,
            &mut self.expect,
            &statements,
            self.settings,
        );
        self.forget_unnamed_upstream();
        self.must_answer = self.expect.len();
    }

    /// A simple Query of ringwire's own (settings replay, WAL position) makes the server drop
    /// its unnamed statement, which the client still has: the next Bind or Describe of it
    /// must Parse it again (`ensure_prepared`).
    fn forget_unnamed_upstream(&self) {
        if let Some(s) = self.server.as_ref() {
            s.statements.set_unnamed(None);
        }
    }

    fn push(&mut self, kind: Kind, emit: bool, done: Done) {
        self.expect.push_back(Expect::Server { kind, emit, done });
    }

    fn push_local(&mut self, local: Local) {
        if matches!(local, Local::Error(_)) {
            self.skip_until_sync = true;
        }
        self.expect.push_back(Expect::Local(local));
    }

    /// Queue one client message: forward it (rewritten where statement names are mapped) or
    /// answer it here.
    fn translate(&mut self, tag: u8, raw: &[u8]) -> Result<(), PgError> {
        if self.copy_in {
            // COPY FROM STDIN data goes straight through; the server ignores Flush and Sync
            // meanwhile. Anything else ends the copy (the server reports the violation).
            self.to_send.extend_from_slice(raw);
            if !matches!(tag, b'd' | b'H' | b'S') {
                self.copy_in = false;
                self.must_answer = self.expect.len();
            }
            return Ok(());
        }
        if self.skip_until_sync && tag != b'S' {
            return Ok(());
        }
        let was_unsynced = self.unsynced;
        match tag {
            // (Not Close: PostgreSQL starts no transaction for it.)
            b'P' | b'B' | b'D' | b'E' => self.unsynced = true,
            // A Query ends the extended protocol's implicit transaction too.
            b'S' | b'Q' | b'F' => self.unsynced = false,
            _ => {}
        }
        let frame = split_frame(raw, usize::MAX)
            .expect("checked")
            .expect("whole")
            .0;
        let msg = match FrontendMessage::parse(frame) {
            Ok(m) => m,
            Err(e) if e.severity == Severity::Fatal => return Err(e),
            // A Bind names a client's statement, which the server knows under ringwire's name
            // only (relayed, it would answer 26000): answered here, as the server would, with
            // the error and a skip to Sync.
            Err(e) if tag == b'B' => {
                self.push_local(Local::Error(e));
                return Ok(());
            }
            // The server ignores these outside COPY and answers nothing.
            Err(_) if matches!(tag, b'd' | b'c' | b'f') => {
                self.to_send.extend_from_slice(raw);
                return Ok(());
            }
            // Malformed: let the server report it exactly as it would.
            Err(_) => {
                self.to_send.extend_from_slice(raw);
                let kind = match tag {
                    b'Q' | b'F' => Kind::Query,
                    b'P' => Kind::Parse,
                    b'D' => Kind::DescribePortal,
                    // (A Flush with a body: an error, then the server skips to Sync, as for
                    // a Close.)
                    b'C' | b'H' => Kind::Close,
                    b'E' => Kind::Execute,
                    _ => Kind::Sync,
                };
                self.push(kind, true, Done::Nothing);
                if kind == Kind::Query {
                    self.must_answer = self.expect.len();
                }
                return Ok(());
            }
        };
        match msg {
            FrontendMessage::Query { sql } => {
                if !self.pinned && self.tx != b'E' && deallocates_all(sql) {
                    // SQL DEALLOCATE ALL in a session that never pinned: its statements are
                    // all protocol-level ones (SQL PREPARE pins), known upstream only under
                    // ringwire's shared names, which stay for the shard's other clients. The
                    // client's are forgotten here, and nothing pins (psycopg sends this after
                    // every rollback once it prepared: pinned, each such client held an upstream
                    // connection until it disconnected).
                    if was_unsynced {
                        frontend::encode_query(&mut self.to_send, "");
                        self.push(Kind::Query, false, Done::Replayed);
                    }
                    self.statements.clear();
                    if let Some(s) = self.server.as_ref() {
                        s.statements.set_unnamed(None);
                    }
                    self.push_local(Local::Command("DEALLOCATE ALL"));
                    self.must_answer = self.expect.len();
                    return Ok(());
                }
                if let Some(name) = deallocated(sql)
                    .filter(|n| self.tx != b'E' && self.statements.contains_key(n.as_str()))
                {
                    // SQL DEALLOCATE of a protocol-level statement: the server knows it only
                    // under ringwire's shared name, which stays for the shard's other clients.
                    if was_unsynced {
                        // The Query ends the implicit transaction of the extended-protocol
                        // messages before it, as it would at PostgreSQL: an empty one does
                        // just that (its replies swallowed).
                        frontend::encode_query(&mut self.to_send, "");
                        self.push(Kind::Query, false, Done::Replayed);
                    }
                    self.statements.remove(name.as_str());
                    self.statements.remove("");
                    if let Some(s) = self.server.as_ref() {
                        s.statements.set_unnamed(None);
                    }
                    self.push_local(Local::Command("DEALLOCATE"));
                    self.must_answer = self.expect.len();
                    return Ok(());
                }
                let done = self.note_effects(sql);
                self.batch_sets |= !done.sets.is_empty();
                let code = !self.shard.trust_functions && runs_user_code(sql);
                self.ran_user_code |= code;
                self.untidied |= code;
                self.statements.remove("");
                if let Some(s) = self.server.as_ref() {
                    s.statements.set_unnamed(None);
                }
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Query, true, Done::Query(done));
                self.must_answer = self.expect.len();
                // (A replica batch is read-only: nothing to note.)
                if !self.shard.replicas.is_empty() && self.replica_read.is_none() {
                    self.note_route(route(sql));
                    self.queue_lsn_if_committed();
                } else if self.untidied {
                    // Read only to know whether a tidy may follow.
                    self.note_route(route(sql));
                } else {
                    // Not read: what follows this Query in the batch cannot tell whether a
                    // transaction is open.
                    self.prediction_sure = false;
                }
                self.queue_tidy();
            }
            FrontendMessage::FunctionCall => {
                // Any function, by OID: as opaque as a user's.
                self.ran_user_code |= !self.shard.trust_functions;
                self.untidied |= !self.shard.trust_functions;
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Query, true, Done::Nothing);
                self.must_answer = self.expect.len();
                self.note_route(Route {
                    read_only: false,
                    writes: true,
                    tx: TxControl::None,
                });
                self.queue_lsn_if_committed();
                self.queue_tidy();
            }
            FrontendMessage::Parse {
                name,
                sql,
                param_types,
            } => {
                if !name.is_empty() && self.statements.contains_key(name) {
                    self.push_local(Local::Error(PgError::new(
                        SqlState::DUPLICATE_PREPARED_STATEMENT,
                        format!("prepared statement \"{name}\" already exists"),
                    )));
                    return Ok(());
                }
                let fx = classify(sql);
                // (PostgreSQL prepares one statement per Parse: the SET, if any, is its own.)
                let set = match &fx.sets[..] {
                    [set] => Some(set.clone()),
                    _ => None,
                };
                let analysed_under = self.parse_settings();
                if fx.pins || fx.sets.len() > 1 || analysed_under.is_none() {
                    // (Where the statement's settings are not known, it must never serve
                    // another client on this connection.)
                    self.pinned = true;
                }
                let key_settings = analysed_under.unwrap_or(self.settings);
                let types: Box<[u8]> = param_types.iter().flat_map(u32::to_be_bytes).collect();
                let upstream = (!name.is_empty()).then(|| {
                    self.shard.statement_id(&StatementKey {
                        sql: sql.into(),
                        param_types: types.clone(),
                        settings: key_settings,
                    })
                });
                let stmt = Rc::new(ClientStatement {
                    sql: sql.into(),
                    param_types: types,
                    upstream: Cell::new(upstream),
                    settings: Cell::new(key_settings),
                    route: OnceCell::new(),
                    autocommit: self
                        .shard
                        .pipelines()
                        .then(|| autocommit_shape(sql))
                        .flatten(),
                    user_code: !self.shard.trust_functions && runs_user_code(sql),
                    savepoint: fx.savepoint,
                    set,
                    described: Cell::new(false),
                });
                self.statements.insert(name.into(), stmt.clone());
                if !name.is_empty() {
                    self.batch_parsed.push(name.into());
                }
                let server = self.server.as_ref().expect("held while translating");
                match upstream {
                    Some(id) if server.statements.has(id, self.id) => {
                        self.push_local(Local::ParseComplete(stmt))
                    }
                    Some(id) => {
                        // Marked now, so later messages of this batch do not parse it again;
                        // undone if the Parse fails or is skipped.
                        server.statements.queued(id, self.id);
                        stmt.encode_parse(&mut self.to_send);
                        self.push(Kind::Parse, true, Done::Prepared(id, Some(stmt)));
                    }
                    None => {
                        server.statements.set_unnamed(Some(stmt.clone()));
                        self.to_send.extend_from_slice(raw);
                        self.push(Kind::Parse, true, Done::Unnamed(stmt));
                    }
                }
            }
            FrontendMessage::Bind(bind) => {
                let Some(stmt) = self.statements.get(bind.statement).cloned() else {
                    if self.servers_name(bind.statement) {
                        self.forget_portal_set(bind.portal);
                        self.note_route(Route {
                            read_only: false,
                            writes: true,
                            tx: TxControl::Unsure,
                        });
                        self.to_send.extend_from_slice(raw);
                        self.push(Kind::Bind, true, Done::Nothing);
                    } else {
                        self.push_local(Local::Error(no_statement(bind.statement)));
                    }
                    return Ok(());
                };
                let refused = self.refused(&stmt, bind.statement);
                if !refused {
                    self.ensure_prepared(&stmt);
                }
                self.batch_binds.retain(|(p, _)| **p != *bind.portal);
                self.batch_binds.push((bind.portal.into(), stmt.clone()));
                self.ran_user_code |= stmt.user_code;
                self.untidied |= stmt.user_code;
                // (A SET after it in the block pins the session: `note_effects`.)
                self.savepoint_in_tx |= stmt.savepoint;
                self.forget_portal_set(bind.portal);
                if let Some(set) = &stmt.set {
                    if self.portal_sets.len() == PORTAL_SETS_MAX {
                        // Many portals of SETs at once, some perhaps long ended: the session
                        // keeps its connection rather than tracking more.
                        self.pinned = true;
                    } else {
                        self.portal_sets.push((bind.portal.into(), set.clone()));
                    }
                }
                if !self.shard.replicas.is_empty() || self.untidied {
                    self.note_route(stmt.route());
                } else {
                    // Not read: what follows it in the batch cannot tell whether a
                    // transaction is open (as for a Query).
                    self.prediction_sure = false;
                }
                // Bind = portal, statement, then the rest unchanged.
                let body = &raw[5..];
                let portal_end = body.iter().position(|&b| b == 0).expect("parsed") + 1;
                let stmt_end = portal_end
                    + body[portal_end..]
                        .iter()
                        .position(|&b| b == 0)
                        .expect("parsed")
                    + 1;
                let start = protocol::wire::begin_message(&mut self.to_send, b'B');
                self.to_send.extend_from_slice(&body[..portal_end]);
                put_cstr(&mut self.to_send, &stmt.upstream_name());
                self.to_send.extend_from_slice(&body[stmt_end..]);
                protocol::wire::finish_message(&mut self.to_send, start);
                let done = match stmt.upstream.get() {
                    _ if refused => Done::Refused,
                    Some(id) => Done::Bound(id, stmt.clone()),
                    None => Done::Nothing,
                };
                self.push(Kind::Bind, true, done);
            }
            FrontendMessage::Describe {
                target: Target::Statement,
                name,
            } => {
                let Some(stmt) = self.statements.get(name).cloned() else {
                    if self.servers_name(name) {
                        self.to_send.extend_from_slice(raw);
                        self.push(Kind::DescribeStatement, true, Done::Nothing);
                    } else {
                        self.push_local(Local::Error(no_statement(name)));
                    }
                    return Ok(());
                };
                let refused = self.refused(&stmt, name);
                if !refused {
                    self.ensure_prepared(&stmt);
                }
                frontend::encode_describe(
                    &mut self.to_send,
                    Target::Statement,
                    &stmt.upstream_name(),
                );
                let done = match stmt.upstream.get() {
                    _ if refused => Done::Refused,
                    Some(id) => Done::Bound(id, stmt),
                    None => Done::Nothing,
                };
                self.push(Kind::DescribeStatement, true, done);
            }
            FrontendMessage::Describe {
                target: Target::Portal,
                name,
            } => {
                self.to_send.extend_from_slice(raw);
                let bound = self.batch_binds.iter().find(|(p, _)| **p == *name);
                let done = match bound {
                    Some((_, stmt)) => {
                        self.batch_described.push(stmt.clone());
                        Done::PortalOf(stmt.clone())
                    }
                    None => Done::Nothing,
                };
                self.push(Kind::DescribePortal, true, done);
            }
            FrontendMessage::Execute { portal, .. } => {
                let set = self
                    .portal_sets
                    .iter()
                    .find(|(p, _)| **p == *portal)
                    .map(|(_, set)| set.clone());
                let done = match set {
                    Some(set) => {
                        // As a Query's SET (`note_effects`).
                        self.batch_sets = true;
                        if self.savepoint_in_tx {
                            self.pinned = true;
                        }
                        Done::Set(set)
                    }
                    None => Done::Nothing,
                };
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Execute, true, done);
            }
            FrontendMessage::Close {
                target: Target::Statement,
                name,
            } => {
                if !self.statements.contains_key(name) && self.servers_name(name) {
                    // (One the client made with SQL PREPARE, say: it goes as the server
                    // knows it.)
                    self.to_send.extend_from_slice(raw);
                    self.push(Kind::Close, true, Done::Nothing);
                    return Ok(());
                }
                // The upstream statement stays prepared for the shard's next client.
                let closed = self.statements.remove_entry(name);
                self.push_local(Local::CloseComplete(closed));
            }
            FrontendMessage::Close {
                target: Target::Portal,
                name,
            } => {
                self.forget_portal_set(name);
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Close, true, Done::Nothing);
            }
            FrontendMessage::Sync => {
                self.skip_until_sync = false;
                self.to_send.extend_from_slice(raw);
                self.push(Kind::Sync, true, Done::Nothing);
                self.must_answer = self.expect.len();
                self.queue_lsn_if_committed();
                self.queue_tidy();
            }
            FrontendMessage::Flush => {
                self.to_send.extend_from_slice(raw);
                self.must_answer = self.expect.len();
            }
            // Sent in the same write as the COPY they are for, before the server said it
            // copies (CopyInResponse): relayed in order. (Outside COPY the server ignores them,
            // per the protocol.)
            FrontendMessage::CopyData { .. } => self.to_send.extend_from_slice(raw),
            FrontendMessage::CopyDone | FrontendMessage::CopyFail { .. } => {
                self.to_send.extend_from_slice(raw);
                self.note_copy_fed();
            }
            FrontendMessage::Terminate => {}
            FrontendMessage::Password { .. } => {
                return Err(PgError::fatal(
                    SqlState::PROTOCOL_VIOLATION,
                    "unexpected password message outside authentication",
                ))
            }
        }
        Ok(())
    }

    /// A statement is about to run: note whether it may write and what it does to the
    /// transaction block.
    fn note_route(&mut self, r: Route) {
        // Without replicas nobody reads the applied LSN: commits are not tracked. Nothing
        // that runs on a replica can write (the standby refuses), nor can its position be
        // asked there.
        self.wrote |= r.writes && !self.shard.replicas.is_empty() && self.replica_read.is_none();
        match r.tx {
            TxControl::None => {}
            TxControl::Begin => self.predicted_open = true,
            TxControl::End => self.predicted_open = false,
            TxControl::Unsure => self.prediction_sure = false,
        }
    }

    /// After a client's Sync, Query or FunctionCall: if it surely leaves the session idle
    /// (its work committed) and something may have written, queue [`LSN_QUERY`] right
    /// behind it. If the prediction is not sure, the ReadyForQuery tells
    /// (`commit_unrecorded`) and the position is asked then, one round trip later.
    fn queue_lsn_if_committed(&mut self) {
        if !self.wrote
            || self.predicted_open
            || !self.prediction_sure
            || self.replica_read.is_some()
        {
            return;
        }
        frontend::encode_query(&mut self.to_send, LSN_QUERY);
        self.forget_unnamed_upstream();
        self.push(Kind::Query, false, Done::Lsn);
        self.must_answer = self.expect.len();
        self.lsn_outstanding += 1;
        self.wrote = false;
    }

    /// After a client's Sync, Query or FunctionCall: if code stored upstream ran untidied and
    /// the session is surely idle after it (its transaction over), queue [`TIDY`] right behind
    /// it, in the same write: the server runs it at once, with no round trip of its own (one
    /// of its own, [`tidy_and_release`], cost a third of the tps of a function call per
    /// transaction: PERF.md, session 21). Not in a transaction (it would close the client's
    /// cursors and drop its temporary tables there), not for a pinned session (all of its
    /// connection's state is its own, as in PostgreSQL), not on a pipe (such code never runs
    /// there). Where it cannot follow, the connection is tidied as it goes back.
    ///
    /// The settings the code may have changed are put right in the same write too, where they
    /// can be: `RESET ALL` and the replay of the session's startup parameters go in the tidy's
    /// own Query (ringwire's text, all ASCII, so read alike whatever `client_encoding` the
    /// code left), the client's SETs each in a Query of its own behind it (as in the replay).
    /// The connection then has this session's settings, and its next user with these settings
    /// (most often this client's next batch) needs no replay: one Query in place of three for
    /// a call of a function per transaction (PERF.md, session 22; PostgreSQL flushes at every
    /// ReadyForQuery, so each Query costs a send whatever it holds). Not while a SET of this
    /// batch is still to settle (the replay would leave it out): then only [`TIDY`], and the
    /// settings are replayed by the connection's next user, as before. Nor once such a tidy
    /// failed other than by a cancel (`tidy_without_settings`): a startup parameter that may
    /// not follow a query in one transaction would fail it every time (`transaction_isolation`
    /// at `read committed` where the session's own default is `repeatable read`).
    fn queue_tidy(&mut self) {
        let own = matches!(self.server.as_ref().map(|s| &s.link), Some(Link::Own(_)));
        if !self.untidied || self.pinned || !own || self.predicted_open || !self.prediction_sure {
            return;
        }
        self.untidied = false;
        let settle_first = self.batch_sets || !self.pending_sets.is_empty();
        let replay = (!settle_first && !self.tidy_without_settings)
            .then(|| {
                replay_statements(
                    &self.startup_sets,
                    &self.startup_values,
                    &self.sets,
                    self.serializable && self.replica_read.is_some(),
                )
            })
            .filter(|(statements, inline)| statements[..*inline].iter().all(|s| s.is_ascii()));
        match replay {
            None => {
                frontend::encode_query(&mut self.to_send, TIDY);
                self.push(Kind::Query, false, Done::Tidied(None));
            }
            Some((statements, inline)) => {
                let mut tidy = format!("RESET ALL; {TIDY}");
                for statement in &statements[..inline] {
                    tidy.push_str("; ");
                    tidy.push_str(statement);
                }
                frontend::encode_query(&mut self.to_send, &tidy);
                let (fp, rest) = (self.settings, &statements[inline..]);
                self.expect.push_back(Expect::Server {
                    kind: Kind::Query,
                    emit: false,
                    done: Done::Tidied(rest.is_empty().then_some(fp)),
                });
                queue_replay(&mut self.to_send, &mut self.expect, rest, fp);
                // (Marked again if the tidy fails or is skipped.)
                self.ran_user_code = false;
            }
        }
        self.forget_unnamed_upstream();
        self.must_answer = self.expect.len();
    }

    /// Whether a statement name the client never made with a Parse is the server's to
    /// answer for: in a pinned session, whose connection is its own, a name it made with SQL
    /// `PREPARE` is one (libpq's `PQexecPrepared` runs those), and the server's 26000 for a
    /// name that does not exist is PostgreSQL's own answer.
    fn servers_name(&self, name: &str) -> bool {
        self.pinned && !name.is_empty()
    }

    /// The server's error `raw` about upstream statement `id` (a Bind of the wrong number of
    /// parameters names it) as PostgreSQL would word it to the client: under the client's
    /// name for `stmt`, not ringwire's. None where it names no statement.
    fn with_client_name(&self, raw: &[u8], id: u32, stmt: &Rc<ClientStatement>) -> Option<PgError> {
        let upstream = format!("\"ringwire_{id}\"");
        if !contains_ignore_case(raw, upstream.as_bytes()) {
            return None;
        }
        let (name, _) = self.statements.iter().find(|(_, s)| Rc::ptr_eq(s, stmt))?;
        let mut e = upstream_error(raw)?;
        e.message = e.message.replace(&upstream, &format!("\"{name}\"")).into();
        Some(e)
    }

    /// Nothing of an earlier batch is pending: the session is idle, every reply is in, and no
    /// extended-protocol message waits for a Sync. A batch starting here starts a unit.
    fn at_unit_start(&self) -> bool {
        self.tx == b'I' && !self.unsynced && self.expect.is_empty()
    }

    /// Before a Bind or Describe of `stmt`: whether its upstream statement was refused since
    /// it was prepared ([`ShardUpstream::refused`]), and so a schema change changed its result
    /// type (a copy of it made since, on another connection or again on one that lacked it,
    /// has the new type). A statement whose row description its client was never sent, or
    /// whose portal this batch describes before it runs it (node-postgres and libpq's
    /// `PQexecPrepared` do so at each execution), takes the statement its text is prepared
    /// as now: nothing the client reads these results by says otherwise.
    /// One whose row description the client holds fails with PostgreSQL's 0A000, as its own
    /// would, on a connection that lacks the refused statement: made again there it would
    /// return rows of the new type under the old description. The message goes under the
    /// refused name all the same, so that the server's error (26000, made 0A000 for the
    /// client: [`Done::Refused`]) aborts its transaction as PostgreSQL's 0A000 does. (Where
    /// the connection has it, the server answers.) Returns whether it goes so, unprepared.
    fn refused(&mut self, stmt: &ClientStatement, name: &str) -> bool {
        let Some(id) = stmt.upstream.get() else {
            return false;
        };
        if !self.shard.refused(id) {
            return false;
        }
        if !stmt.described.get() || self.self_described_names.iter().any(|n| **n == *name) {
            stmt.upstream
                .set(Some(self.shard.statement_id(&stmt.key())));
            return false;
        }
        let server = self.server.as_ref().expect("held while translating");
        !server.statements.has(id, self.id)
    }

    /// Parse `stmt` on the held connection first if it lacks it; the reply is swallowed.
    fn ensure_prepared(&mut self, stmt: &Rc<ClientStatement>) {
        let server = self.server.as_ref().expect("held while translating");
        let present = match stmt.upstream.get() {
            Some(id) => server.statements.has(id, self.id),
            None => server.statements.unnamed_is(stmt),
        };
        if present {
            return;
        }
        if stmt.upstream.get().is_some() {
            // Parsed here, it is analysed under this session's settings now. Where those are
            // not its key's (the session changed them since it parsed, or parsed it in a
            // transaction that rolled back), registered as that key's it would serve clients
            // of those settings: it becomes the statement of the settings it now has.
            match self.parse_settings() {
                Some(now) if now != stmt.settings.get() => {
                    let id = self.shard.statement_id(&StatementKey {
                        sql: stmt.sql.clone(),
                        param_types: stmt.param_types.clone(),
                        settings: now,
                    });
                    stmt.upstream.set(Some(id));
                    stmt.settings.set(now);
                    if server.statements.has(id, self.id) {
                        return;
                    }
                }
                Some(_) => {}
                // (Not known: this copy must never serve another client.)
                None => self.pinned = true,
            }
        }
        stmt.encode_parse(&mut self.to_send);
        let server = self.server.as_ref().expect("held while translating");
        let done = match stmt.upstream.get() {
            Some(id) => {
                server.statements.queued(id, self.id);
                Done::Prepared(id, None)
            }
            None => {
                server.statements.set_unnamed(Some(stmt.clone()));
                Done::Unnamed(stmt.clone())
            }
        };
        self.push(Kind::Parse, false, done);
    }

    /// What a simple Query does to session state: pins are noted now, its SETs returned to
    /// be recorded when it completes.
    fn note_effects(&mut self, sql: &str) -> QueryDone {
        let fx = classify(sql);
        if fx.pins {
            self.pinned = true;
        }
        if fx.savepoint {
            self.savepoint_in_tx = true;
        }
        if !fx.sets.is_empty() && self.savepoint_in_tx {
            // ROLLBACK TO may undo part of them; which part is not worth tracking.
            self.pinned = true;
        }
        let mut ends = fx.ends;
        ends.reverse();
        QueryDone {
            sets: fx.sets,
            ends,
            completes: 0,
            copies_fed: 0,
        }
    }

    /// At ReadyForQuery `I` (or a COMMIT / ROLLBACK inside a Query: `query_statement_done`):
    /// the transaction's SETs take effect if it committed.
    fn end_of_transaction(&mut self) {
        let changes = std::mem::take(&mut self.pending_sets);
        if !self.tx_rolled_back && !changes.is_empty() {
            let reset_all = changes.contains(&SetChange::ResetAll);
            apply_set_changes(&mut self.sets, changes);
            self.settings_changed();
            if let Some(server) = self.server.as_mut() {
                // The server ran them; after RESET ALL it lost the startup values too, so the
                // next batch replays.
                server.settings = if reset_all { 0 } else { self.settings };
            }
        } else if !changes.is_empty()
            && self.tx_committed
            && self.savepoint_in_tx
            // (Whether a RESET ALL stuck, and so whether the client's startup values must be
            // replayed, is not known either: dropped as below.)
            && !changes.contains(&SetChange::ResetAll)
            && self
                .server
                .as_ref()
                .is_some_and(|s| s.host == Host::Primary)
        {
            // Committed, and a ROLLBACK TO marked it rolled back (its tag is `ROLLBACK`): it
            // undid the SETs after its savepoint, not those before. Which ones stuck is not
            // tracked; the connection has them, so the session keeps it, settings and all
            // (its fingerprint stays what it was, so nothing is replayed over them). (On a
            // replica connection, which is never kept past its transaction, they are dropped
            // as below.)
            self.pinned = true;
        } else if !changes.is_empty() {
            // Dropped as rolled back. (A COMMIT earlier in the same Query settled the SETs
            // before it where it answered: `query_statement_done`.) In case the scan missed
            // one that made some stick upstream, the connection's settings are not known, so
            // whoever uses it next replays (0 would pass for "no settings"). Not a pinned
            // session's: its connection is its own and has the settings PostgreSQL kept,
            // some of which `sets` may lack (a pin above), so a replay would undo them.
            if let Some(server) = self.server.as_mut().filter(|_| !self.pinned) {
                server.settings = SETTINGS_UNKNOWN;
            }
        }
        self.forget_transaction_state();
    }

    /// The fingerprint of the settings a statement Parsed now is analysed under (parse
    /// analysis reads some: `search_path`, `DateStyle` for a typed literal), which its
    /// upstream statement's key names: the session's, with the SETs its open transaction ran
    /// (the connection has them, committed or not). `None` where the connection's are not
    /// known here: a SET earlier in this batch, or one of an earlier batch with no Sync after
    /// it, has not answered yet, or a `RESET ALL` among the pending ones dropped the startup
    /// values the replay had set. (A `SET LOCAL` is not counted: a statement parsed after one
    /// is keyed as if it were not there.)
    fn parse_settings(&self) -> Option<u64> {
        if self.batch_sets
            || self.pending_sets.contains(&SetChange::ResetAll)
            || self.sets_unanswered()
        {
            return None;
        }
        if self.pending_sets.is_empty() {
            return Some(self.settings);
        }
        let mut sets = self.sets.clone();
        apply_set_changes(&mut sets, self.pending_sets.iter().cloned());
        Some(fingerprint(&self.startup_sets, &sets))
    }

    /// A CopyDone or CopyFail relayed outside copy mode: it ends the data of a COPY of the
    /// Query or Execute right before it (still awaited: the server has not said it copies),
    /// whose CopyInResponse then must not make the relay wait for the client. Anywhere else
    /// the server ignores it, and so does this.
    fn note_copy_fed(&mut self) {
        match self.expect.back_mut() {
            Some(Expect::Server {
                kind: Kind::Query,
                done: Done::Query(q),
                ..
            }) => q.copies_fed += 1,
            Some(Expect::Server {
                kind: Kind::Execute,
                done: done @ (Done::Nothing | Done::CopyFed(_)),
                ..
            }) => {
                *done = match done {
                    Done::CopyFed(n) => Done::CopyFed(*n + 1),
                    _ => Done::CopyFed(1),
                }
            }
            _ => {}
        }
    }

    /// The CopyInResponse at the front answers a COPY whose data already went out
    /// ([`Session::note_copy_fed`]): counted off.
    fn copy_fed_front(&mut self) -> bool {
        match self.expect.front_mut() {
            Some(Expect::Server {
                done: Done::Query(q),
                ..
            }) if q.copies_fed > 0 => {
                q.copies_fed -= 1;
                true
            }
            Some(Expect::Server {
                done: Done::CopyFed(n),
                ..
            }) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// `portal` is bound anew or closed: it runs no SET of [`Session::portal_sets`] any more.
    fn forget_portal_set(&mut self, portal: &str) {
        if !self.portal_sets.is_empty() {
            self.portal_sets.retain(|(p, _)| **p != *portal);
        }
    }

    /// A SET sent in an earlier batch has not answered yet (an Execute of one with no Sync
    /// after it): the connection may have it, `pending_sets` does not yet.
    fn sets_unanswered(&self) -> bool {
        self.expect.iter().any(|e| {
            matches!(
                e,
                Expect::Server {
                    done: Done::Set(_),
                    ..
                }
            ) || matches!(e, Expect::Server { done: Done::Query(q), .. } if !q.sets.is_empty())
        })
    }

    /// What the session noted of its open transaction (its SETs, whether it failed or rolled
    /// back, a savepoint in it), dropped: the transaction is over, or never happened.
    fn forget_transaction_state(&mut self) {
        self.pending_sets.clear();
        self.tx_rolled_back = false;
        self.tx_committed = false;
        self.savepoint_in_tx = false;
    }

    /// A statement of a client Query completed; `tx_ended`: its tag was `COMMIT` (true) or
    /// `ROLLBACK` (false). At a transaction end the scan found inside a Query of several
    /// statements ([`super::classify::Effects::ends`]), the SETs before it are the
    /// transaction's, which ends here (or, at a ROLLBACK TO, does not): PostgreSQL keeps what
    /// a COMMIT committed when a later statement of the Query fails, and runs what follows a
    /// ROLLBACK in a new transaction. Where the server's CommandCompletes do not fall where
    /// the scan put them, nothing more is settled mid-Query and the transaction's SETs are
    /// dropped, its connection's settings unknown: never recorded unless surely committed.
    fn query_statement_done(&mut self, tx_ended: Option<bool>) {
        let Some(Expect::Server {
            done: Done::Query(q),
            ..
        }) = self.expect.front_mut()
        else {
            return;
        };
        let statement = q.completes;
        q.completes += 1;
        let here = q.ends.last().filter(|e| e.statement == statement).copied();
        let end = match (here, tx_ended) {
            (None, None) => return,
            (Some(end), Some(_)) => end,
            (None, Some(_)) if q.ends.is_empty() && q.completes == 1 && q.sets.is_empty() => {
                // A Query of one statement (COMMIT): its ReadyForQuery settles it.
                return;
            }
            _ => {
                q.ends.clear();
                self.tx_rolled_back = true;
                return;
            }
        };
        q.ends.pop();
        let before = end.sets_before.min(q.sets.len());
        self.pending_sets.extend(q.sets.drain(..before));
        if end.ends_tx {
            // (A ROLLBACK TO before this COMMIT already marked the transaction rolled back;
            // the SAVEPOINTs later in the Query still count for the transaction after.)
            self.tx_rolled_back |= tx_ended == Some(false);
            let savepoint = self.savepoint_in_tx;
            self.end_of_transaction();
            self.savepoint_in_tx = savepoint;
        }
    }

    /// Read the server's replies until every message the client will not follow up is
    /// answered, matching each against the queue.
    async fn collect_replies(
        &mut self,
        cancel: &CancelToken,
        out: &mut Vec<u8>,
        client: &mut (dyn AsyncWrite + Unpin),
    ) {
        loop {
            while self.must_answer > 0 {
                match self.expect.front() {
                    Some(Expect::Local(_)) => {
                        let Some(Expect::Local(local)) = self.expect.pop_front() else {
                            unreachable!()
                        };
                        self.must_answer -= 1;
                        match local {
                            Local::ParseComplete(_) => backend::write_parse_complete(out),
                            Local::CloseComplete(_) => backend::write_close_complete(out),
                            Local::Command(tag) => {
                                backend::write_command_complete(out, tag);
                                let status = match self.tx {
                                    b'T' => backend::TransactionStatus::InBlock,
                                    b'E' => backend::TransactionStatus::Failed,
                                    _ => backend::TransactionStatus::Idle,
                                };
                                backend::write_ready_for_query(out, status);
                            }
                            Local::Error(e) => {
                                backend::write_error(out, &e);
                                self.tx_rolled_back = true;
                                self.skip_to_sync();
                            }
                        }
                    }
                    _ => break,
                }
            }
            if self.commit_unrecorded && self.lsn_outstanding > 0 {
                // A WAL position queued later covers the earlier commit too.
                self.commit_unrecorded = false;
            }
            // Before returning: the commit's ReadyForQuery is in `out`, and the replies are
            // released when this returns.
            // (Not while extended-protocol work waits for its Sync: the Query would end its
            // implicit transaction. The position is asked after that Sync.)
            if self.commit_unrecorded && self.expect.is_empty() && !self.unsynced {
                self.commit_unrecorded = false;
                self.wrote = false;
                let mut q = Vec::with_capacity(LSN_QUERY.len() + 6);
                frontend::encode_query(&mut q, LSN_QUERY);
                self.forget_unnamed_upstream();
                let Some(server) = self.server.as_mut() else {
                    return; // lost with it: the client gets 08006, not an acknowledgement
                };
                if let Err(e) = server.send(&q).await {
                    self.upstream_lost(out, &e.to_string());
                    return;
                }
                self.push(Kind::Query, false, Done::Lsn);
                self.must_answer = self.expect.len();
                self.lsn_outstanding += 1;
            }
            if self.must_answer == 0 {
                return;
            }
            if out.len() >= CLIENT_FLUSH_BYTES
                && self.lsn_outstanding == 0
                && !self.commit_unrecorded
                && self.retry_on_primary.is_none()
            {
                // Not while a commit's WAL position is outstanding (its ReadyForQuery may be
                // in `out`, and the client must not see it before the oracle moved), nor once
                // a replica read is to be run again on the primary (its replies so far are
                // dropped).
                let _ = client.write_all(out).await;
                out.clear();
                self.flushed_mid_batch = true;
            }
            let server = self.server.as_mut().expect("replies outstanding");
            let frame = match server.buf.frame() {
                Ok(f) => f.map(|(frame, len)| (frame.tag, len)),
                Err(e) => {
                    self.upstream_lost(out, &e.to_string());
                    return;
                }
            };
            let Some((tag, len)) = frame else {
                let filled = futures_lite::future::or(async { Some(server.fill().await) }, async {
                    cancel.cancelled().await;
                    None
                })
                .await;
                match filled {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        self.upstream_lost(out, &e.to_string());
                        return;
                    }
                    None => {
                        cancel.reset();
                        if let Link::Shared(lease) = &server.link {
                            // Sent only once this client's unit runs alone on the shared
                            // connection; withdrawn if another client's unit follows it.
                            lease.cancel();
                            continue;
                        }
                        if !self
                            .expect
                            .iter()
                            .any(|e| matches!(e, Expect::Server { emit: true, .. }))
                        {
                            // Only ringwire's own Queries are left (the tidy and the settings
                            // behind it, a WAL position): the client's statement is done, and
                            // its cancel comes too late, as it would at PostgreSQL.
                            continue;
                        }
                        // This client's statement is the one running on this connection:
                        // pass the cancel on to its backend (and never hand the connection
                        // to another client, whose statement the signal may reach if it
                        // lands late: `ServerConn::cancel_sent`).
                        server.cancel_sent = true;
                        let config = self.shard.pools(server.host).config.clone();
                        let (at, pid, key) = (server.at, server.process_id, server.secret_key);
                        glommio::spawn_local(async move {
                            super::client::send_cancel(config.host(at), pid, key).await
                        })
                        .detach();
                    }
                }
                continue;
            };
            log::trace!("server {:?} must_answer {}", tag as char, self.must_answer);
            let stop = self.on_reply(tag, len, out);
            // Gone if the reply ended the connection.
            if let Some(server) = self.server.as_mut() {
                server.buf.consume(len);
            }
            if stop {
                return;
            }
        }
    }

    /// Handle the server's message at the front of the reply buffer. Returns true when the
    /// relay must wait for the client (COPY FROM STDIN began).
    fn on_reply(&mut self, tag: u8, len: usize, out: &mut Vec<u8>) -> bool {
        // (Counted off here, before the reply is borrowed.)
        let copy_fed = tag == b'G' && self.copy_fed_front();
        let server = self.server.as_ref().expect("replies outstanding");
        let raw = &server.buf.data()[..len];
        let Some(Expect::Server { kind, emit, done }) = self.expect.front() else {
            unreachable!("local replies are written before waiting on the server")
        };
        let (kind, emit, lsn) = (*kind, *emit, matches!(done, Done::Lsn));
        let replay = matches!(done, Done::Settings(_) | Done::Replayed | Done::Discarded);
        let discard = matches!(done, Done::Discarded);
        if lsn && tag == b'D' {
            self.lsn_seen = data_row_text(raw).and_then(super::client::parse_lsn);
            return false;
        }
        if lsn && tag == b'E' && !is_fatal(raw) {
            // In a failed block (a misprediction): nothing committed; its ReadyForQuery says
            // so and `wrote` stays.
            return false;
        }
        if matches!(done, Done::Tidied(_)) && tag == b'E' && !is_fatal(raw) {
            // Ringwire's, not the client's (a cancel landing on it, a `statement_timeout`
            // the code set): all of it rolled back, the connection is tidied again as it goes
            // back. Anything else (a startup parameter that may not follow the tidy's SELECT
            // in one transaction) would fail every time: this session's tidies leave the
            // settings to the replay from now on.
            if error_field(raw.get(5..).unwrap_or_default(), b'C').as_deref() != Some("57014") {
                self.tidy_without_settings = true;
            }
            self.untidied = true;
            self.replay_cut_short();
            return false;
        }
        let terminal = match (tag, kind) {
            // Asynchronous messages: notices, parameter changes, notifications.
            (b'N' | b'A', _) => {
                if emit {
                    relay_unasked(out, raw, server.process_id, self.client_pid);
                }
                return false;
            }
            (b'S', _) => {
                if news(&mut self.shown, raw) {
                    out.extend_from_slice(raw);
                }
                return false;
            }
            (b'E', _) => {
                let body = raw.get(5..).unwrap_or_default();
                if is_fatal(raw) {
                    // The server is closing this connection (terminated, shut down): report
                    // it once, as the connection loss it is.
                    let why = error_field(body, b'M').unwrap_or_default();
                    if self.pinned {
                        // The session ends with the server's own words (see `upstream_lost`).
                        let e = upstream_error(raw).map(pinned_state_lost);
                        self.pinned_lost = e.map(|e| (out.len(), e));
                    }
                    self.upstream_lost(out, &why);
                    return true;
                }
                let code = error_field(body, b'C');
                let standby_error = match self.replica_tx {
                    None => matches!(code.as_deref(), Some("25006" | "40001" | "0A000")),
                    Some(tx) => tx.rerunnable && code.as_deref() == Some("40001"),
                };
                if self.replica_read.is_some() && !self.flushed_mid_batch && standby_error {
                    // Not the client's error but the standby's: a write the text scan let
                    // through (25006), a conflict with recovery (40001), something a standby
                    // does not support (0A000). The batch is run again on the primary once
                    // this connection is back at ReadyForQuery. (In a read-only transaction
                    // only a conflict with recovery, and only where the transaction may move,
                    // `ReplicaTx::rerunnable`: there 25006 is PostgreSQL's answer to the
                    // client's write.)
                    self.retry_on_primary
                        .get_or_insert((false, error_field(body, b'M').unwrap_or_default()));
                }
                if replay && self.retry_on_primary.is_none() {
                    // A setting of this client's that this connection refuses: the client's
                    // statements run without it, as PostgreSQL's do when a placeholder setting
                    // turns out invalid (a WARNING there too). The replay's other statements
                    // each ran on their own. (On a replica, a refusal that sends the batch to
                    // the primary is handled above, as before.)
                    // Not refused but cancelled (a cancel that reached the backend after the
                    // client's statement, a timeout): the setting may well be valid, and the
                    // connection does not have it.
                    let cut_short = code.as_deref() == Some("57014") && !discard;
                    let message = error_field(body, b'M').unwrap_or_default();
                    let code = code
                        .and_then(|c| <[u8; 5]>::try_from(c.as_bytes()).ok())
                        .map_or(SqlState::INTERNAL_ERROR, SqlState);
                    let mut warning = if discard {
                        // (A cancel that lands on it, say.) The batch behind it runs anyway.
                        PgError::new(
                            code,
                            format!("sequence values could not be reset: {message}"),
                        )
                        .with_detail(
                            "Before a statement that reads lastval() or currval(), ringwire \
                             resets the sequence values an upstream connection holds for other \
                             clients; this time that failed, so the statement may read them.",
                        )
                    } else {
                        PgError::new(
                            code,
                            format!("a setting of this session could not be restored: {message}"),
                        )
                        .with_detail(
                            "ringwire replays the session's settings on each upstream \
                             connection it uses; this connection refused one, and the \
                             statements run with the server's value for it.",
                        )
                    };
                    warning.severity = Severity::Warning;
                    backend::write_notice(out, &warning);
                    if cut_short {
                        self.replay_cut_short();
                    }
                    return false;
                }
                let bound = match self.expect.front() {
                    Some(Expect::Server {
                        done: Done::Bound(id, stmt),
                        ..
                    }) => Some((*id, stmt.clone())),
                    _ => None,
                };
                let refused_here = matches!(
                    self.expect.front(),
                    Some(Expect::Server {
                        done: Done::Refused,
                        ..
                    })
                );
                if refused_here {
                    backend::write_error(
                        out,
                        &PgError::new(
                            SqlState::FEATURE_NOT_SUPPORTED,
                            "cached plan must not change result type",
                        ),
                    );
                } else if code.as_deref() == Some("26000") && bound.is_some() {
                    // A statement ringwire had prepared on this connection is gone: code run
                    // there dropped it (a function's `EXECUTE 'DEALLOCATE ALL'`; ringwire's
                    // own Queries never do). The connection is closed as it goes back.
                    server.statements.lost();
                    let detail = "ringwire prepares statements upstream under names of its \
                                  own, and code run on the upstream connection deallocated \
                                  this one.";
                    match upstream_error(raw) {
                        Some(e) => backend::write_error(out, &e.with_detail(detail)),
                        None => out.extend_from_slice(raw),
                    }
                } else if let Some(e) = bound
                    .as_ref()
                    .and_then(|(id, stmt)| self.with_client_name(raw, *id, stmt))
                {
                    backend::write_error(out, &e);
                } else {
                    out.extend_from_slice(raw);
                }
                self.tx_rolled_back = true;
                // (Its routine tells it from other 0A000s whatever the server's language.)
                let plan_changed = error_field(body, b'R')
                    .is_none_or(|routine| routine == "RevalidateCachedQuery");
                if let (Some("0A000"), Some((id, stmt)), true) =
                    (code.as_deref(), bound, plan_changed)
                {
                    // "cached plan must not change result type": the next Parse of this text
                    // (by any client of the shard) prepares a new upstream statement. A
                    // client statement whose row description its client holds keeps failing,
                    // as at PostgreSQL (`Session::refused`); one it does not takes the new
                    // statement now, and where nothing of the batch ran or reached the client
                    // yet, the batch runs again without this error (`relay_part`).
                    self.shard.forget_statement(id);
                    let self_described = self.batch_described.iter().any(|s| Rc::ptr_eq(s, &stmt));
                    if !stmt.described.get() || self_described {
                        stmt.upstream
                            .set(Some(self.shard.statement_id(&stmt.key())));
                        self.rerun_refused = !self.batch_ran
                            && !self.flushed_mid_batch
                            && self.retry_on_primary.is_none()
                            && self.replica_read.is_none();
                    }
                }
                if matches!(kind, Kind::Query | Kind::Sync) {
                    // A Query goes on to its ReadyForQuery; an error at Sync (a failed
                    // commit of the implicit transaction) is followed by its ReadyForQuery.
                    return false;
                }
                let failed = self.expect.pop_front();
                self.must_answer -= 1;
                self.skip_to_sync_undoing(failed);
                return false;
            }
            (b'G', Kind::Query | Kind::Execute) if copy_fed => {
                // The client sent the data and its end right behind the COPY, before this
                // came: the server has it all, and its replies go on.
                out.extend_from_slice(raw);
                return false;
            }
            (b'G', Kind::Query | Kind::Execute) => {
                out.extend_from_slice(raw);
                self.copy_in = true;
                self.must_answer = 0;
                return true;
            }
            (b'1', Kind::Parse)
            | (b'2', Kind::Bind)
            | (b'3', Kind::Close)
            | (b'T' | b'n', Kind::DescribeStatement | Kind::DescribePortal)
            | (b'C' | b'I' | b's', Kind::Execute)
            | (b'Z', Kind::Sync | Kind::Query) => true,
            (b't', Kind::DescribeStatement) => false,
            (b'T' | b'D' | b'C' | b'I' | b'H' | b'd' | b'c' | b'V' | b'W', Kind::Query)
            | (b'D' | b'H' | b'd' | b'c', Kind::Execute) => false,
            _ => {
                log::error!(
                    "upstream reply {:?} does not answer {kind:?}; closing the connection",
                    tag as char
                );
                self.upstream_lost(out, "the server's replies are out of step");
                return true;
            }
        };
        if tag == b'C' && raw.get(5..) == Some(b"ROLLBACK\0") {
            self.tx_rolled_back = true;
        }
        if tag == b'C' && raw.get(5..) == Some(b"COMMIT\0") {
            self.tx_committed = true;
        }
        let tx_ended = match raw.get(5..) {
            Some(b"COMMIT\0") if tag == b'C' => Some(true),
            Some(b"ROLLBACK\0") if tag == b'C' => Some(false),
            _ => None,
        };
        let set_tag = tag == b'C' && matches!(raw.get(5..), Some(b"SET\0" | b"RESET\0"));
        if emit {
            out.extend_from_slice(raw);
        }
        let status = raw.get(5).copied().unwrap_or(b'I');
        if tag == b'C' && matches!(raw.get(5..), Some(b"DISCARD ALL\0" | b"DEALLOCATE ALL\0")) {
            // The server dropped every prepared statement of this connection: the client's
            // (whatever their names upstream) and those other clients left for reuse.
            self.statements.clear();
            if let Some(server) = self.server.as_ref() {
                server.statements.clear();
            }
        }
        if tag == b'C' && kind == Kind::Query {
            self.query_statement_done(tx_ended);
        }
        if !terminal {
            return false;
        }
        let Some(Expect::Server { done, .. }) = self.expect.pop_front() else {
            unreachable!()
        };
        self.must_answer -= 1;
        self.batch_ran |= emit && matches!(kind, Kind::Execute | Kind::Query);
        let server = self.server.as_mut().expect("held");
        match done {
            Done::Prepared(id, _) => server.statements.confirmed(id),
            Done::Bound(_, stmt) => {
                if kind == Kind::DescribeStatement {
                    stmt.described.set(true);
                }
            }
            Done::PortalOf(stmt) => stmt.described.set(true),
            // (The server had it after all: it answered.)
            Done::Refused => {}
            Done::Nothing
            | Done::CopyFed(_)
            | Done::Unnamed(_)
            | Done::Replayed
            | Done::Discarded
            | Done::Moved
            | Done::Tidied(None) => {}
            Done::Tidied(Some(fp)) => server.settings = fp,
            Done::Settings(fp) => {
                server.settings = fp;
                // The replay is not the client's transaction.
                self.tx_rolled_back = false;
            }
            Done::Query(done) => self.pending_sets.extend(done.sets),
            Done::Set(set) => {
                // (Checked by its tag: a portal of the same name as one bound to a SET long
                // ago may be a cursor SQL DECLAREd since.)
                if set_tag {
                    self.pending_sets.push(set);
                }
            }
            Done::Lsn => {
                self.lsn_outstanding -= 1;
                match (status, self.lsn_seen.take()) {
                    // Idle: every commit before it ended at or before this position.
                    (b'I', Some(lsn)) => self.shard.raise_applied(lsn),
                    // Asked inside a block (a misprediction): the commit is still to come.
                    _ => self.wrote = true,
                }
            }
        }
        if tag == b'Z' {
            if emit {
                self.tx = status;
            }
            if status == b'I' && emit {
                self.end_of_transaction();
                if self.wrote {
                    self.commit_unrecorded = true;
                }
            }
        }
        false
    }

    /// A queued entry that failed or was skipped: a Parse leaves the connection without the
    /// statement; a WAL position query leaves its commit unrecorded.
    fn undo(&mut self, e: &Expect) {
        // What the client's own Parse or Close did to its statements, undone: the server
        // never ran it.
        match e {
            Expect::Local(Local::ParseComplete(stmt))
            | Expect::Server {
                done: Done::Prepared(_, Some(stmt)),
                ..
            }
            | Expect::Server {
                kind: Kind::Parse,
                emit: true,
                done: Done::Unnamed(stmt),
            } => self.statements.retain(|_, s| !Rc::ptr_eq(s, stmt)),
            Expect::Local(Local::CloseComplete(Some((name, stmt))))
                if !self.statements.contains_key(name) =>
            {
                self.statements.insert(name.clone(), stmt.clone());
            }
            _ => {}
        }
        if let Expect::Server {
            done: Done::Tidied(_),
            ..
        } = e
        {
            // Skipped after an error: the connection is tidied as it goes back.
            self.untidied = true;
            self.ran_user_code = true;
            return;
        }
        if let Expect::Server {
            done: Done::Lsn, ..
        } = e
        {
            // Skipped after an error (the server discards it until Sync): no position comes,
            // so whatever it was to record is still owed.
            self.lsn_outstanding -= 1;
            self.wrote = true;
            return;
        }
        let Some(server) = self.server.as_mut() else {
            return;
        };
        match e {
            Expect::Server {
                done: Done::Prepared(id, _),
                ..
            } => {
                server.statements.forget_queued(*id, self.id);
            }
            Expect::Server {
                done: Done::Unnamed(stmt),
                ..
            } if server.statements.unnamed_is(stmt) => {
                server.statements.set_unnamed(None);
            }
            _ => {}
        }
    }

    /// After an error: drop queued replies up to the next Sync, which the server answers. A
    /// simple Query in between is dropped too: the server discards every message until Sync,
    /// Query included, and answers it nothing.
    fn skip_to_sync(&mut self) {
        self.skip_to_sync_undoing(None);
    }

    /// [`Session::skip_to_sync`] after `failed`, the entry the error answered: it and every
    /// entry skipped are undone newest first, as a Close of a statement parsed before it in
    /// the skipped part must be undone before that Parse (and a Parse after a Close before
    /// that Close).
    fn skip_to_sync_undoing(&mut self, failed: Option<Expect>) {
        let mut skipped: Vec<Expect> = failed.into_iter().collect();
        let mut synced = false;
        while let Some(front) = self.expect.front() {
            if matches!(
                front,
                Expect::Server {
                    kind: Kind::Sync,
                    ..
                }
            ) {
                synced = true;
                break;
            }
            if let Some(e) = self.expect.pop_front() {
                skipped.push(e);
            }
            self.must_answer = self.must_answer.saturating_sub(1);
        }
        for e in skipped.iter().rev() {
            self.undo(e);
        }
        if !synced {
            // No Sync queued yet: the client's messages until its Sync are dropped here too.
            self.skip_until_sync = true;
        }
    }

    /// The upstream connection failed: the client gets 08006 where its statement's outcome
    /// should have been, and ReadyForQuery for each Sync/Query it is owed; its transaction is
    /// gone (the server rolls it back) and the next statement gets a fresh connection.
    fn upstream_lost(&mut self, out: &mut Vec<u8>, why: &str) {
        if let Some(Link::Shared(lease)) = self.server.as_ref().map(|s| &s.link) {
            // Every unit on the shared connection fails with it (no-op if it already did).
            lease.fail(why);
        }
        self.server = None;
        // Whatever the server held for the client's extended-protocol messages is gone.
        self.unsynced = false;
        self.lsn_outstanding = 0;
        self.lsn_seen = None;
        self.commit_unrecorded = false;
        // The commit's outcome is unknown to the client (it gets 08006): nothing to record.
        self.wrote = false;
        let may_retry = self
            .replica_tx
            .is_none_or(|tx| tx.first_batch || tx.rerunnable);
        if self.replica_read.is_some() && !self.flushed_mid_batch && may_retry {
            // Nothing of this read reached the client: the primary answers it instead.
            log::info!("replica connection lost: {why}; the read goes to the primary");
            self.retry_on_primary = Some((true, why.to_string()));
            self.expect.clear();
            self.must_answer = 0;
            self.skip_until_sync = false;
            self.copy_in = false;
            self.tx = b'I';
            return;
        }
        log::warn!("upstream connection lost: {why}");
        if self.pinned && self.pinned_lost.is_none() {
            // What the session pinned (LISTEN, temp tables, session locks, SET ROLE, SQL
            // prepared statements) died with the backend and cannot be rebuilt elsewhere:
            // going on without it would be silently wrong (notifications never come, a lock
            // believed held is not). The session ends, as it would at PostgreSQL.
            self.pinned_lost = Some((out.len(), pinned_state_lost(lost(why))));
        }
        self.fail_outstanding(out, lost(why));
    }

    /// The connection is gone: `err` where each outstanding statement's outcome should have
    /// been, ReadyForQuery `I` for each Sync/Query the client is owed, and the session's
    /// transaction state reset (the server rolled the transaction back).
    fn fail_outstanding(&mut self, out: &mut Vec<u8>, err: PgError) {
        let mut reported = false;
        let owed = self.must_answer;
        let mut tail_needs_sync = false;
        for (i, e) in self.expect.drain(..).enumerate() {
            let kind = match e {
                Expect::Server { kind, emit, .. } => {
                    if !emit && kind == Kind::Query {
                        continue; // the settings replay
                    }
                    Some(kind)
                }
                Expect::Local(_) => None,
            };
            if i >= owed {
                tail_needs_sync = true;
                continue;
            }
            match kind {
                Some(Kind::Query) => {
                    backend::write_error(out, &err);
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                }
                Some(Kind::Sync) => {
                    if !reported {
                        backend::write_error(out, &err);
                    }
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                }
                _ => {
                    if !reported {
                        backend::write_error(out, &err);
                        reported = true;
                    }
                }
            }
        }
        self.must_answer = 0;
        self.skip_until_sync = tail_needs_sync || reported;
        self.copy_in = false;
        self.tx = b'I';
        self.forget_transaction_state();
        // Pinned state died with the connection.
        self.pinned = false;
    }

    /// No upstream connection could be had: answer every message of the batch here with `err`.
    fn fail_locally(&mut self, frames: &[u8], out: &mut Vec<u8>, err: PgError) {
        let mut rest = frames;
        let mut reported = false;
        while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
            rest = &rest[len..];
            match frame.tag {
                b'Q' | b'F' => {
                    backend::write_error(out, &err);
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                }
                b'S' => {
                    if !reported && !self.skip_until_sync {
                        backend::write_error(out, &err);
                    }
                    backend::write_ready_for_query(out, protocol::backend::TransactionStatus::Idle);
                    reported = false;
                    self.skip_until_sync = false;
                }
                b'H' | b'd' | b'c' | b'f' => {}
                _ => {
                    if !reported && !self.skip_until_sync {
                        backend::write_error(out, &err);
                        reported = true;
                    }
                }
            }
        }
        if reported {
            self.skip_until_sync = true;
        }
        self.tx = b'I';
        self.begin_again = None;
    }
}

/// The message (with its header) is an ErrorResponse that ends the connection.
pub(super) fn is_fatal(raw: &[u8]) -> bool {
    let body = raw.get(5..).unwrap_or_default();
    matches!(error_field(body, b'V').as_deref(), Some("FATAL" | "PANIC"))
}

/// The first column of a DataRow (with its header), as text.
fn data_row_text(raw: &[u8]) -> Option<&str> {
    let body = raw.get(5..)?;
    let len = i32::from_be_bytes(body.get(2..6)?.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    std::str::from_utf8(body.get(6..6 + len)?).ok()
}

/// Watches a batch message by message for a simple Query behind extended-protocol messages
/// not yet closed by a Sync. After an error in those, the server skips everything up to the
/// next Sync — that Query included, and whatever follows on the connection until a Sync the
/// client may send only later.
#[derive(Default)]
struct UnsyncedQuery {
    open_extended: bool,
}

impl UnsyncedQuery {
    /// Feed the next message's tag; true if it is such a Query.
    fn follows(&mut self, tag: u8) -> bool {
        match tag {
            b'S' => self.open_extended = false,
            b'Q' => return self.open_extended,
            _ => self.open_extended = true,
        }
        false
    }
}

/// The NotificationResponse, ParameterStatus and NoticeResponse messages among the backend
/// messages `replies`, in order.
fn unasked_messages(replies: &[u8]) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut rest = replies;
    while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
        if matches!(frame.tag, b'A' | b'S' | b'N') {
            kept.extend_from_slice(&rest[..len]);
        }
        rest = &rest[len..];
    }
    kept
}

/// The statements `frames` bind and then describe the portal of, by name (see
/// `Session::self_described_names`).
fn self_described(frames: &[u8]) -> Vec<Box<str>> {
    let mut bound: Vec<(&str, &str)> = Vec::new();
    let mut names: Vec<Box<str>> = Vec::new();
    let mut rest = frames;
    while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
        rest = &rest[len..];
        match FrontendMessage::parse(frame) {
            Ok(FrontendMessage::Bind(bind)) => {
                bound.retain(|(p, _)| *p != bind.portal);
                bound.push((bind.portal, bind.statement));
            }
            Ok(FrontendMessage::Describe {
                target: Target::Portal,
                name,
            }) => {
                if let Some((_, stmt)) = bound.iter().find(|(p, _)| *p == name) {
                    names.push((*stmt).into());
                }
            }
            _ => {}
        }
    }
    names
}

/// Whether `frames` are Parse, Bind, Describe and Execute messages closed by one Sync, its
/// last: what a driver sends to run one statement (`Session::relay_part` may run such a
/// batch again).
fn one_unit_of_statements(frames: &[u8]) -> bool {
    let mut rest = frames;
    while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
        rest = &rest[len..];
        match frame.tag {
            b'P' | b'B' | b'D' | b'E' => {}
            b'S' => return rest.is_empty(),
            _ => return false,
        }
    }
    false
}

/// The batch has Parse or Close messages (which change the client's statement names).
fn frames_name_statements(frames: &[u8]) -> bool {
    let mut rest = frames;
    while let Ok(Some((frame, len))) = split_frame(rest, usize::MAX) {
        rest = &rest[len..];
        if matches!(frame.tag, b'P' | b'C') {
            return true;
        }
    }
    false
}

/// What the session's settings say about replica reads: the staleness a read accepts
/// (`None`: strict), and whether the default isolation is serializable.
/// `ringwire.max_replica_lag_ms` (a positive number) bounds it; `serializable` alone allows
/// [`SERIALIZABLE_STALENESS_MAX`]. Later settings win; a value that is not a number is
/// ignored (PostgreSQL keeps it as a placeholder string and so does the session).
fn read_rules(startup: &[(String, String)], sets: &[(String, String)]) -> (Option<Duration>, bool) {
    let mut serializable = false;
    let mut lag_ms = None;
    for (name, stmt) in startup.iter().chain(sets) {
        match name.as_str() {
            "default_transaction_isolation" => {
                serializable = setting_value(stmt, name).starts_with("serializable")
            }
            "ringwire.max_replica_lag_ms" => lag_ms = setting_value(stmt, name).parse::<u64>().ok(),
            _ => {}
        }
    }
    let staleness = match lag_ms {
        Some(ms) if ms > 0 => Some(Duration::from_millis(ms)),
        _ if serializable => Some(SERIALIZABLE_STALENESS_MAX),
        _ => None,
    };
    (staleness, serializable)
}

/// The session's `default_transaction_read_only` and `default_transaction_isolation` (later
/// settings win; an unreadable read-only value leaves PostgreSQL's default, read-write,
/// which routes to the primary: the safe side).
/// `transaction_isolation`, `transaction_read_only`, `transaction_deferrable`: set for one
/// transaction only.
fn is_transaction_characteristic(name: &str) -> bool {
    matches!(
        name,
        "transaction_isolation" | "transaction_read_only" | "transaction_deferrable"
    )
}

fn tx_defaults(
    startup: &[(String, String)],
    sets: &[(String, String)],
) -> (bool, DefaultIsolation) {
    let mut read_only = false;
    let mut isolation = DefaultIsolation::Server;
    for (name, stmt) in startup.iter().chain(sets) {
        match name.as_str() {
            "default_transaction_read_only" => {
                read_only = matches!(
                    setting_value(stmt, name).as_str(),
                    "on" | "true" | "yes" | "1" | "t" | "y"
                )
            }
            "default_transaction_isolation" => {
                isolation = Isolation::from_setting(&setting_value(stmt, name))
                    .map_or(DefaultIsolation::Unreadable, DefaultIsolation::Session)
            }
            _ => {}
        }
    }
    (read_only, isolation)
}

/// One field of an ErrorResponse body (`C` SQLSTATE, `V` severity, `M` message).
pub(super) fn error_field(body: &[u8], code: u8) -> Option<String> {
    let mut i = 0;
    while i < body.len() && body[i] != 0 {
        let field = body[i];
        let end = i + 1 + body[i + 1..].iter().position(|&b| b == 0)?;
        if field == code {
            return std::str::from_utf8(&body[i + 1..end])
                .ok()
                .map(str::to_string);
        }
        i = end + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_parameter_names_as_postgres_reads_them() {
        // Each checked against PostgreSQL 15's `set_config`.
        for name in ["a._b", "a.b$", "_.x", "é.x", "a.b.c", "A.B", "select.x"] {
            assert!(valid_custom_name(name), "{name}");
        }
        for name in ["a.1b", "$a.b", "a..b", "a.", ".a", "a-b.c", "ab", "9x.y"] {
            assert!(!valid_custom_name(name), "{name}");
        }
    }

    fn set(name: &str, stmt: &str) -> (String, String) {
        (name.to_string(), stmt.to_string())
    }

    #[test]
    fn replica_read_rules_from_settings() {
        assert_eq!(read_rules(&[], &[]), (None, false));
        let lag = set(
            "ringwire.max_replica_lag_ms",
            "SET ringwire.max_replica_lag_ms = 250",
        );
        assert_eq!(
            read_rules(&[], std::slice::from_ref(&lag)),
            (Some(Duration::from_millis(250)), false)
        );
        let quoted = set(
            "ringwire.max_replica_lag_ms",
            "set session ringwire.max_replica_lag_ms to '40';",
        );
        assert_eq!(
            read_rules(&[], &[quoted]).0,
            Some(Duration::from_millis(40))
        );
        let serializable = set(
            "default_transaction_isolation",
            "SET default_transaction_isolation TO 'serializable'",
        );
        assert_eq!(
            read_rules(std::slice::from_ref(&serializable), &[]),
            (Some(SERIALIZABLE_STALENESS_MAX), true)
        );
        // An explicit bound wins over serializable's default; 0 or garbage is strict.
        assert_eq!(
            read_rules(std::slice::from_ref(&serializable), &[lag]).0,
            Some(Duration::from_millis(250))
        );
        let zero = set(
            "ringwire.max_replica_lag_ms",
            "SET ringwire.max_replica_lag_ms = 0",
        );
        assert_eq!(read_rules(&[], &[zero]), (None, false));
        let garbage = set(
            "ringwire.max_replica_lag_ms",
            "SET ringwire.max_replica_lag_ms = 'soon'",
        );
        assert_eq!(read_rules(&[], &[garbage]), (None, false));
        let rr = set(
            "default_transaction_isolation",
            "set default_transaction_isolation = 'repeatable read'",
        );
        assert_eq!(read_rules(&[serializable], &[rr]), (None, false));
    }
}
